/* mib.c — Merlin frame header parser and pixel decoder (see mib.h). Written for hostile input:
 * every field is located within the bytes given, numbers are parsed with overflow checks, and
 * the derived sizes are checked before anyone trusts them. */
#include "formats/mib.h"

#include "common/err.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MIB_MAX_FIELDS 256

typedef struct {
    const char *p;
    size_t n;
} field;

/* Trims blanks on both sides. */
static field trim(field f)
{
    while (f.n && (*f.p == ' ' || *f.p == '\t')) {
        f.p++;
        f.n--;
    }
    while (f.n && (f.p[f.n - 1] == ' ' || f.p[f.n - 1] == '\t' || f.p[f.n - 1] == '\r' ||
                   f.p[f.n - 1] == '\n'))
        f.n--;
    return f;
}

static int field_is(field f, const char *s)
{
    f = trim(f);
    return f.n == strlen(s) && memcmp(f.p, s, f.n) == 0;
}

/* Decimal digits only (blanks around allowed), value <= max. */
static int field_uint(field f, unsigned long long max, unsigned long long *v)
{
    f = trim(f);
    if (f.n == 0 || f.n > 19)
        return 0;
    unsigned long long x = 0;
    for (size_t i = 0; i < f.n; i++) {
        if (f.p[i] < '0' || f.p[i] > '9')
            return 0;
        x = x * 10 + (unsigned)(f.p[i] - '0');
    }
    if (x > max)
        return 0;
    *v = x;
    return 1;
}

/* A plain decimal number (digits, one point, optional exponent); NaN otherwise. */
static double field_double(field f)
{
    f = trim(f);
    char buf[48];
    if (f.n == 0 || f.n >= sizeof buf)
        return NAN;
    for (size_t i = 0; i < f.n; i++)
        if (!strchr("0123456789.eE+-", f.p[i]))
            return NAN;
    memcpy(buf, f.p, f.n);
    buf[f.n] = '\0';
    char *end;
    double v = strtod(buf, &end);
    return *end ? NAN : v;
}

/* Splits window[0..n) at commas; stops at the first NUL (the padding). Refuses other control
 * bytes and anything above 0x7e: a header is plain ASCII. */
static ssb4d_status split(const uint8_t *w, size_t n, field *fs, size_t *nf, ssb4d_err *err)
{
    size_t k = 0, start = 0, i = 0;
    for (; i < n && w[i] != 0; i++) {
        if (w[i] < 0x20 || w[i] > 0x7e)
            return ssb_fail(err, SSB4D_EFORMAT, "Merlin header holds a non-text byte 0x%02x at "
                            "offset %zu", w[i], i);
        if (w[i] == ',') {
            if (k == MIB_MAX_FIELDS)
                return ssb_fail(err, SSB4D_EFORMAT, "Merlin header has more than %d fields",
                                MIB_MAX_FIELDS);
            fs[k++] = (field){(const char *)w + start, i - start};
            start = i + 1;
        }
    }
    if (i > start) {
        if (k == MIB_MAX_FIELDS)
            return ssb_fail(err, SSB4D_EFORMAT, "Merlin header has more than %d fields",
                            MIB_MAX_FIELDS);
        fs[k++] = (field){(const char *)w + start, i - start};
    }
    /* after the first NUL only padding may follow */
    for (; i < n; i++)
        if (w[i] != 0 && w[i] != ' ')
            return ssb_fail(err, SSB4D_EFORMAT, "Merlin header has byte 0x%02x inside its NUL "
                            "padding at offset %zu", w[i], i);
    *nf = k;
    return SSB4D_OK;
}

/* Sizes of the decoded frame and of its data, from dtype, depth, chips and layout. */
static ssb4d_status derive(mib_header *h, ssb4d_err *err)
{
    size_t w = h->width, ht = h->height, px = w * ht; /* both <= 65535: no overflow */
    h->rows = ht;
    h->cols = w;
    if (!h->raw) {
        h->data_bytes = px * (size_t)h->dtype;
        return SSB4D_OK;
    }
    int d = h->counter_depth;
    if (d != 1 && d != 6 && d != 12 && d != 24)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin raw (R64) frame needs a counter depth of 1, 6, "
                        "12 or 24 in its header extension (found %d)", d);
    if (h->chips == 1) {
        if (d == 24) { /* two 12-bit frames side by side in the header's width */
            if (w % 2)
                return ssb_fail(err, SSB4D_EFORMAT, "Merlin 24-bit raw frame has an odd width %zu",
                                w);
            h->cols = w / 2;
        }
    } else if (h->chips == 4 && (!strcmp(h->layout, "2x2") || !strcmp(h->layout, "2x2G"))) {
        if (d == 24)
            return ssb_fail(err, SSB4D_EFORMAT, "Merlin raw (R64) 24-bit quad frames are not "
                            "supported: save the acquisition in counting mode (U32)");
        if (w != 4 * ht)
            return ssb_fail(err, SSB4D_EFORMAT, "Merlin raw quad frame of %zux%zu does not hold "
                            "four %zux%zu chips side by side", w, ht, ht, ht);
        h->rows = h->cols = 2 * ht;
    } else {
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin raw (R64) frames from %d chips in layout '%s' "
                        "are not supported (only single chips and 2x2 quads): save in counting "
                        "mode (U08/U16/U32)", h->chips, h->layout);
    }
    /* counters are stored in 1, 8 or 16 bits; each (sub)frame is whole 64-bit words (24-bit
     * raw is two 12-bit subframes of rows x cols counters each) */
    size_t bits = (size_t)(d == 1 ? 1 : d == 6 ? 8 : 16);
    size_t sub = h->rows * h->cols, nsub = d == 24 ? 2 : 1;
    if (sub * bits % 64)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin raw frame of %zu %d-bit pixels is not a whole "
                        "number of 64-bit words", sub, d);
    h->data_bytes = nsub * sub * bits / 8;
    return SSB4D_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Time stamps                                                                                */

/* Days from 1970-01-01 to the civil date y-m-d (proleptic Gregorian; H. Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400, yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

/* k decimal digits at s (exactly), into *v. */
static int digits(const char *s, size_t k, int64_t *v)
{
    int64_t x = 0;
    for (size_t i = 0; i < k; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return 1;
}

/* "YYYY-MM-DD HH:MM:SS[.f...]" or "YYYY-MM-DDTHH:MM:SS[.f...][Z]", 1 to 9 fraction digits. */
static int parse_time(field f, int64_t *ns, int64_t *res)
{
    f = trim(f);
    const char *s = f.p;
    int64_t y, mo, d, hh, mi, ss, frac = 0, r = 1000000000;
    if (f.n < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' ||
        s[16] != ':')
        return 0;
    if (!digits(s, 4, &y) || !digits(s + 5, 2, &mo) || !digits(s + 8, 2, &d) ||
        !digits(s + 11, 2, &hh) || !digits(s + 14, 2, &mi) || !digits(s + 17, 2, &ss))
        return 0;
    if (y < 1970 || y > 2200 || mo < 1 || mo > 12 || d < 1 || d > 31 || hh > 23 || mi > 59 || ss > 60)
        return 0;
    size_t i = 19;
    if (i < f.n && s[i] == '.') {
        size_t k = 0;
        i++;
        while (i + k < f.n && s[i + k] >= '0' && s[i + k] <= '9')
            k++;
        if (k < 1 || k > 9 || !digits(s + i, k, &frac))
            return 0;
        for (size_t e = k; e < 9; e++)
            frac *= 10;
        r = 1;
        for (size_t e = k; e < 9; e++)
            r *= 10;
        i += k;
    }
    if (i < f.n && s[i] == 'Z')
        i++;
    if (i != f.n)
        return 0;
    int64_t sec = days_from_civil(y, mo, d) * 86400 + hh * 3600 + mi * 60 + ss;
    *ns = sec * 1000000000 + frac; /* year 2200 is about 7.3e18 ns: inside int64 */
    *res = r;
    return 1;
}

/* "<n>ns": the MQ1A shutter time, in seconds (NaN otherwise). */
static double parse_ns(field f)
{
    f = trim(f);
    unsigned long long v;
    if (f.n < 3 || f.p[f.n - 2] != 'n' || f.p[f.n - 1] != 's' ||
        !field_uint((field){f.p, f.n - 2}, 1ull << 62, &v))
        return NAN;
    return (double)v * 1e-9;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The gap after frame i (t non-decreasing): exact in uint64 whatever the values. */
static inline uint64_t gap(const int64_t *t, size_t i) { return (uint64_t)t[i + 1] - (uint64_t)t[i]; }

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

static int64_t clamp64(uint64_t v) { return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v; }

/* Follows the rules of mib.h; every difference is taken in uint64 (t is non-decreasing). */
static mib_line_verdict line_scan(const int64_t *t, size_t n, int64_t res_ns, mib_line_info *info)
{
    memset(info, 0, sizeof *info);
    info->long_from_ns = INT64_MAX;
    if (!t || n < 4 || res_ns < 1) {
        snprintf(info->why, sizeof info->why, "%zu frames are too few to show a line flyback", n);
        return MIB_LINE_NONE;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (t[i + 1] < t[i]) {
            snprintf(info->why, sizeof info->why, "the time stamp of frame %zu is earlier than that "
                     "of frame %zu", i + 2, i + 1);
            return MIB_LINE_NONE;
        }
    size_t m = n - 1;
    uint64_t *s = malloc(m * sizeof *s);
    if (!s) {
        snprintf(info->why, sizeof info->why, "out of memory sorting the time stamps");
        return MIB_LINE_NONE;
    }
    uint64_t tick = 0;
    for (size_t i = 0; i < m; i++) {
        s[i] = gap(t, i);
        tick = gcd_u64(tick, s[i]);
    }
    qsort(s, m, sizeof *s, cmp_u64);
    size_t mi = (m - 1) / 2; /* the lower median */
    uint64_t med = s[mi];
    info->median_ns = clamp64(med);
    info->tick_ns = clamp64(tick);
    if (med / 4 < (uint64_t)res_ns) {
        free(s);
        snprintf(info->why, sizeof info->why, "the median frame interval, %" PRId64 " ns, is under "
                 "4 steps of the time stamps' %" PRId64 " ns digits", info->median_ns, res_ns);
        return MIB_LINE_NONE;
    }
    /* the split: the largest jump between neighbours of the sorted gaps from the median up */
    size_t k = m;
    uint64_t D = 0;
    for (size_t j = mi; j + 1 < m; j++)
        if (s[j + 1] - s[j] > D) {
            D = s[j + 1] - s[j];
            k = j;
        }
    if (!D) {
        free(s);
        snprintf(info->why, sizeof info->why, "no gap is longer than the median %" PRId64 " ns: "
                 "no line flyback", info->median_ns);
        return MIB_LINE_NONE;
    }
    uint64_t J = s[k] - s[0], JL = s[m - 1] - s[k + 1], thr = s[k + 1];
    free(s);
    info->step_ns = clamp64(D);
    info->spread_ns = clamp64(J);
    info->long_from_ns = clamp64(thr);
    uint64_t spread = J > JL ? J : JL;
    if (spread >= D / 2 + (D & 1)) { /* D <= 2 * spread, without overflow */
        snprintf(info->why, sizeof info->why, "no set of longer gaps stands out: the frame gaps "
                 "vary by %" PRId64 " ns around %" PRId64 " ns", clamp64(spread), info->median_ns);
        return MIB_LINE_NONE;
    }
    if (D <= tick && D < med / 2 + (med & 1)) { /* one tick, and 2D < med */
        snprintf(info->why, sizeof info->why, "the longer gaps exceed the others (%" PRId64 " ns) "
                 "by only %" PRId64 " ns, one step of the %" PRId64 " ns the time stamps move in: "
                 "rounding, or a flyback too short to tell", info->median_ns, info->step_ns,
                 info->tick_ns);
        return MIB_LINE_NONE;
    }
    size_t first = 0, nlong = 0;
    for (size_t i = 0; i < m; i++)
        if (gap(t, i) >= thr) {
            if (!nlong)
                first = i + 1;
            nlong++;
        }
    info->line = first;
    size_t L = first;
    int raster = L >= 2 && n % L == 0 && n / L >= 2;
    for (size_t i = 0; i < m && raster; i++)
        raster = (gap(t, i) >= thr) == ((i + 1) % L == 0);
    if (!raster) {
        snprintf(info->why, sizeof info->why, "%zu gap%s of %" PRId64 " ns or more (the first after "
                 "frame %zu) against %" PRId64 " ns do not recur every line of a raster", nlong,
                 nlong == 1 ? "" : "s", info->long_from_ns, first, info->median_ns);
        return MIB_LINE_AMBIGUOUS;
    }
    info->why[0] = '\0';
    return MIB_LINE_FOUND;
}

mib_line_verdict mib_line_scan(const int64_t *t, size_t n, int64_t res_ns, mib_line_info *info)
{
    return info->verdict = line_scan(t, n, res_ns, info);
}

size_t mib_line_length(const int64_t *t, size_t n, int64_t res_ns, int64_t *median_ns)
{
    mib_line_info info;
    mib_line_verdict v = mib_line_scan(t, n, res_ns, &info);
    if (median_ns)
        *median_ns = info.median_ns;
    return v == MIB_LINE_FOUND ? info.line : 0;
}

size_t mib_first_over_depth(const mib_header *h, const uint32_t *frame, int depth)
{
    if (depth <= 0 || depth >= 32)
        return (size_t)-1;
    uint32_t top = (1u << depth) - 1u;
    size_t n = h->rows * h->cols;
    for (size_t i = 0; i < n; i++)
        if (frame[i] > top)
            return i;
    return (size_t)-1;
}

ssb4d_status mib_parse_header(const uint8_t *buf, size_t len, mib_header *h, ssb4d_err *err)
{
    memset(h, 0, sizeof *h);
    h->shutter_s = NAN;
    h->shutter_ext_s = NAN;
    if (!buf || len < 4 || memcmp(buf, "MQ1,", 4) != 0)
        return ssb_fail(err, SSB4D_EFORMAT, "not a Merlin frame header (it must start with "
                        "\"MQ1,\")");
    /* the header length is field 3: find it within the first few dozen bytes */
    field fs[MIB_MAX_FIELDS];
    size_t nf = 0;
    ssb4d_status st;
    size_t first = len < 64 ? len : 64;
    size_t cut = 0, commas = 0;
    while (cut < first && commas < 3)
        if (buf[cut++] == ',')
            commas++;
    if (commas < 3)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header is truncated or garbled before its "
                        "length field");
    if ((st = split(buf, cut - 1, fs, &nf, err)))
        return st;
    unsigned long long v;
    if (nf < 3 || !field_uint(fs[2], MIB_MAX_HEADER_BYTES, &v) || v < 64)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header length field is not a number between 64 "
                        "and %d", MIB_MAX_HEADER_BYTES);
    h->header_bytes = (size_t)v;
    if (h->header_bytes > len)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header says %zu bytes, only %zu are there "
                        "(truncated)", h->header_bytes, len);
    if ((st = split(buf, h->header_bytes, fs, &nf, err)))
        return st;
    if (nf < 8)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header has %zu fields, at least 8 are needed",
                        nf);
    if (!field_uint(fs[1], 0xffffffffull, &v))
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header sequence number is not a number");
    h->sequence = (uint32_t)v;
    if (!field_uint(fs[3], 64, &v) || v == 0)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header chip count is not a number 1..64");
    h->chips = (int)v;
    if (!field_uint(fs[4], 65535, &v) || v == 0)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header width is not a number 1..65535");
    h->width = (size_t)v;
    if (!field_uint(fs[5], 65535, &v) || v == 0)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header height is not a number 1..65535");
    h->height = (size_t)v;
    field dt = trim(fs[6]);
    if (dt.n != 3)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header data type is not three characters");
    memcpy(h->dtype_text, dt.p, 3);
    if (field_is(dt, "U08"))
        h->dtype = MIB_U8;
    else if (field_is(dt, "U16"))
        h->dtype = MIB_U16;
    else if (field_is(dt, "U32"))
        h->dtype = MIB_U32;
    else if (field_is(dt, "R64")) {
        h->dtype = MIB_R64;
        h->raw = 1;
    } else
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin data type '%s' is not supported (U08, U16, U32 "
                        "and R64 are)", h->dtype_text);
    /* layout: keep only the visible characters ("   1x1" -> "1x1") */
    size_t li = 0;
    for (size_t i = 0; i < fs[7].n && li + 1 < sizeof h->layout; i++)
        if (fs[7].p[i] != ' ')
            h->layout[li++] = fs[7].p[i];
    if (nf > 10)
        h->shutter_s = field_double(fs[10]);
    if (nf > 9 && !parse_time(fs[9], &h->time_ns, &h->time_res_ns))
        h->time_ns = h->time_res_ns = 0;
    for (size_t i = 8; i < nf; i++)
        if (field_is(fs[i], "MQ1A")) {
            if (i + 3 >= nf || !field_uint(fs[i + 3], 64, &v))
                return ssb_fail(err, SSB4D_EFORMAT, "Merlin header extension (MQ1A) has no counter "
                                "depth");
            h->counter_depth = (int)v;
            /* the extension's time stamp has ns digits: it wins over field 10 */
            int64_t tn, tr;
            if (parse_time(fs[i + 1], &tn, &tr)) {
                h->time_ns = tn;
                h->time_res_ns = tr;
            }
            h->shutter_ext_s = parse_ns(fs[i + 2]);
            break;
        }
    if (!h->raw && h->counter_depth && h->counter_depth > 8 * (int)h->dtype)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin header says %d-bit counters in %s data",
                        h->counter_depth, h->dtype_text);
    if ((st = derive(h, err)))
        return st;
    if (h->rows > 4096 || h->cols > 4096)
        return ssb_fail(err, SSB4D_EFORMAT, "Merlin frame of %zux%zu pixels is larger than ssb4d "
                        "supports (4096x4096)", h->rows, h->cols);
    return SSB4D_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Pixel data                                                                                 */

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* The i-th counter of a raw stream (64-bit big-endian words, counters from the low bits). */
static inline uint32_t raw_counter(const uint8_t *data, size_t i, int depth)
{
    switch (depth) {
    case 1: return (uint32_t)(be64(data + i / 64 * 8) >> (i % 64)) & 1u;
    case 6: return data[i / 8 * 8 + 7 - i % 8];
    default: { /* 12: 16-bit fields */
        const uint8_t *q = data + i / 4 * 8 + (3 - i % 4) * 2;
        return (uint32_t)q[0] << 8 | q[1];
    }
    }
}

void mib_decode_frame(const mib_header *h, const uint8_t *data, uint32_t *out)
{
    size_t n = h->rows * h->cols;
    if (!h->raw) {
        switch (h->dtype) {
        case MIB_U8:
            for (size_t i = 0; i < n; i++)
                out[i] = data[i];
            break;
        case MIB_U16:
            for (size_t i = 0; i < n; i++)
                out[i] = (uint32_t)data[2 * i] << 8 | data[2 * i + 1];
            break;
        default:
            for (size_t i = 0; i < n; i++)
                out[i] = (uint32_t)data[4 * i] << 24 | (uint32_t)data[4 * i + 1] << 16 |
                         (uint32_t)data[4 * i + 2] << 8 | data[4 * i + 3];
        }
        return;
    }
    int d = h->counter_depth;
    if (h->chips == 1) {
        if (d == 24) { /* high 12 bits in the first half of the data, low 12 in the second */
            const uint8_t *lo = data + h->data_bytes / 2;
            for (size_t i = 0; i < n; i++)
                out[i] = (raw_counter(data, i, 12) << 12) + raw_counter(lo, i, 12);
        } else {
            for (size_t i = 0; i < n; i++)
                out[i] = raw_counter(data, i, d);
        }
        return;
    }
    /* 2x2 quad: raw row r = [chip4 | chip3 | chip2 | chip1], each `c` pixels wide; chips 1, 2
     * give the top row r, chips 3, 4 the bottom row 2c-1-r, both flipped left-right */
    size_t c = h->height, W = h->cols;
    for (size_t r = 0; r < c; r++)
        for (size_t x = 0; x < 4 * c; x++) {
            uint32_t v = raw_counter(data, r * 4 * c + x, d);
            size_t seg = x / c, xs = x % c;
            switch (seg) {
            case 3: out[r * W + xs] = v; break;
            case 2: out[r * W + c + xs] = v; break;
            case 1: out[(2 * c - 1 - r) * W + (c - 1 - xs)] = v; break;
            default: out[(2 * c - 1 - r) * W + c + (c - 1 - xs)] = v; break;
            }
        }
}

/* ---------------------------------------------------------------------------------------- */
/* The .hdr acquisition header                                                                */

static int key_is(const char *k, size_t kn, const char *want)
{
    return kn == strlen(want) && strncasecmp(k, want, kn) == 0;
}

void mib_parse_hdr(const char *text, size_t len, mib_hdr_info *info)
{
    memset(info, 0, sizeof *info);
    size_t i = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && text[end] != '\n')
            end++;
        /* "Key:<TAB>value" (older files: "Key: value" with spaces) */
        const char *line = text + i;
        size_t n = end - i, colon = 0;
        field whole = trim((field){line, n});
        if (whole.n >= 3 && strncmp(whole.p, "End", 3) == 0 && (whole.n == 3 || whole.p[3] == ' ' ||
                                                               whole.p[3] == '\t'))
            info->complete = 1;
        while (colon < n && line[colon] != '\t')
            colon++;
        if (colon < n) {
            size_t kn = colon;
            while (kn && (line[kn - 1] == ':' || line[kn - 1] == ' '))
                kn--;
            field val = trim((field){line + colon + 1, n - colon - 1});
            unsigned long long v = 0;
            if (field_uint(val, 1ull << 40, &v)) {
                if (key_is(line, kn, "ScanX"))
                    info->scan_x = (size_t)v;
                else if (key_is(line, kn, "ScanY"))
                    info->scan_y = (size_t)v;
                else if (key_is(line, kn, "Frames in Acquisition (Number)"))
                    info->frames_in_acquisition = (size_t)v;
                else if (key_is(line, kn, "Frames per Trigger (Number)"))
                    info->frames_per_trigger = (size_t)v;
                else if (key_is(line, kn, "Counter Depth (number)") && v <= 64)
                    info->counter_depth = (int)v;
            }
        }
        i = end + 1;
    }
}
