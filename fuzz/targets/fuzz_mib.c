/* fuzz_mib.c — the Merlin .mib frame-header parser (src/formats/mib.h) on arbitrary bytes; when a
 * header parses and its pixel data are in the input, the frame is decoded too. The same bytes
 * also go to the .hdr text parser, and, read as frame time stamps, to mib_line_length (the scan
 * line length from the flyback gaps). Besides the sanitizers: an accepted header must be
 * self-consistent (sizes, time stamp and its resolution), the first count above the counter
 * depth must be the one a plain scan finds, and mib_line_scan's verdict and line length must agree
 * with a reference written here from the rules of mib.h in 128-bit arithmetic. */
#include "formats/mib.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_mib: check failed: %s (line %d)\n", #c, __LINE__);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Time stamps from the bytes: byte 0 picks the resolution and the reading (mode 0: raw int64
 * values; otherwise a start and 16-bit increments, so rasters of regular gaps come up). */
static void line_length(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    int mode = data[0] & 3;
    int64_t res = (int64_t[]){1, 10, 1000, 7}[data[0] >> 2 & 3];
    size_t n = 0, w = mode ? 2 : 8;
    int64_t *t = malloc(((size - 1) / w + 1) * sizeof *t);
    CHECK(t);
    uint64_t now = (uint64_t)data[1] << 40;
    for (size_t i = 1; i + w <= size; i += w) {
        if (mode) {
            now += ((uint64_t)data[i] << 8 | data[i + 1]) * (uint64_t)(mode == 2 ? 1000 : 1);
            t[n++] = (int64_t)now;
        } else {
            uint64_t v = 0;
            memcpy(&v, data + i, 8);
            t[n++] = (int64_t)v;
        }
    }
    mib_line_info info;
    mib_line_verdict v = mib_line_scan(t, n, res, &info);
    size_t L = v == MIB_LINE_FOUND ? info.line : 0;
    CHECK(v == info.verdict && info.median_ns >= 0);
    CHECK(memchr(info.why, 0, sizeof info.why) != NULL);
    CHECK((v == MIB_LINE_FOUND) == (info.why[0] == 0));
    CHECK(mib_line_length(t, n, res, NULL) == L);
    /* the reference, from the rules of mib.h in 128-bit arithmetic: the split at the largest jump
       of the sorted gaps from the lower median up; distinct (jump > 2 x either spread); more than
       one tick (the gcd) unless 2 x jump >= median; long gaps exactly at the line ends */
    size_t want = 0;
    int want_ambiguous = 0;
    int ordered = n >= 4;
    for (size_t i = 0; i + 1 < n && ordered; i++)
        ordered = t[i + 1] >= t[i];
    if (ordered) {
        size_t m = n - 1, mi = (m - 1) / 2;
        unsigned __int128 *g = malloc(m * sizeof *g);
        uint64_t *s = malloc(m * sizeof *s);
        CHECK(g && s);
        unsigned __int128 tick = 0;
        for (size_t i = 0; i < m; i++) {
            g[i] = (unsigned __int128)((__int128)t[i + 1] - (__int128)t[i]);
            s[i] = (uint64_t)g[i];
            for (unsigned __int128 a = tick, b = g[i], r; ; a = b, b = r) { /* tick = gcd(tick, g) */
                if (!b) {
                    tick = a;
                    break;
                }
                r = a % b;
            }
        }
        qsort(s, m, sizeof *s, cmp_u64);
        unsigned __int128 med = s[mi];
        CHECK(med > INT64_MAX ? info.median_ns == INT64_MAX : med == (unsigned __int128)info.median_ns);
        if (med >= 4 * (unsigned __int128)res) {
            unsigned __int128 D = 0;
            size_t k = 0;
            for (size_t j = mi; j + 1 < m; j++)
                if ((unsigned __int128)s[j + 1] - s[j] > D) {
                    D = (unsigned __int128)s[j + 1] - s[j];
                    k = j;
                }
            unsigned __int128 J = D ? (unsigned __int128)s[k] - s[0] : 0;
            unsigned __int128 JL = D ? (unsigned __int128)s[m - 1] - s[k + 1] : 0;
            unsigned __int128 spread = J > JL ? J : JL;
            if (D && D > 2 * spread && !(D <= tick && 2 * D < med)) {
                unsigned __int128 thr = s[k + 1];
                size_t first = 0;
                for (size_t i = 0; i < m && !first; i++)
                    if (g[i] >= thr)
                        first = i + 1;
                int ok = first >= 2 && n % first == 0 && n / first >= 2;
                for (size_t i = 0; i < m && ok; i++)
                    ok = (g[i] >= thr) == ((i + 1) % first == 0);
                want = ok ? first : 0;
                want_ambiguous = !ok;
            }
        }
        free(s);
        free(g);
    }
    CHECK(want_ambiguous == (v == MIB_LINE_AMBIGUOUS));
    if (L != want) {
        fprintf(stderr, "fuzz_mib: mib_line_length %zu, the reference %zu (n %zu)\n", L, want, n);
        abort();
    }
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size: reads past len are ASan reports */
    memcpy(buf, data, size);
    mib_header h;
    ssb4d_err err = {0};
    if (mib_parse_header(buf, size, &h, &err) == SSB4D_OK) {
        CHECK(h.header_bytes >= 1 && h.header_bytes <= size);
        CHECK(h.header_bytes <= MIB_MAX_HEADER_BYTES);
        CHECK(h.dtype == MIB_U8 || h.dtype == MIB_U16 || h.dtype == MIB_U32 || h.dtype == MIB_R64);
        CHECK(h.raw == (h.dtype == MIB_R64));
        CHECK(h.rows >= 1 && h.cols >= 1);
        if (!h.raw)
            CHECK(h.data_bytes == h.rows * h.cols * (size_t)h.dtype);
        else
            CHECK(h.rows * h.cols <= 8 * h.data_bytes); /* at most 8 pixels per byte (1-bit) */
        /* the time stamp: none, or a time in 1970..2200 with a power-of-ten resolution */
        if (h.time_res_ns == 0)
            CHECK(h.time_ns == 0);
        else
            CHECK(h.time_ns >= 0 && h.time_ns < 7300000000000000000LL);
        int64_t res = h.time_res_ns;
        while (res > 1 && res % 10 == 0)
            res /= 10;
        CHECK(h.time_res_ns == 0 || (res == 1 && h.time_res_ns <= 1000000000));
        CHECK(!(h.shutter_ext_s < 0));
        if (h.data_bytes <= size - h.header_bytes) {
            uint32_t *out = malloc(h.rows * h.cols * sizeof *out);
            mib_decode_frame(&h, buf + h.header_bytes, out);
            /* the first count above the counter depth, as the reader refuses it */
            int depth = h.counter_depth ? h.counter_depth : (int)(size & 31);
            size_t over = mib_first_over_depth(&h, out, depth);
            uint32_t top = depth > 0 && depth < 32 ? (1u << depth) - 1u : UINT32_MAX;
            size_t want = (size_t)-1;
            for (size_t i = 0; i < h.rows * h.cols && want == (size_t)-1; i++)
                if (out[i] > top)
                    want = i;
            CHECK(over == want);
            free(out);
        }
    } else {
        CHECK(memchr(err.msg, 0, sizeof err.msg) != NULL && err.msg[0] != 0);
    }
    mib_hdr_info info;
    mib_parse_hdr((const char *)buf, size, &info);
    free(buf);
    line_length(data, size);
    return 0;
}
