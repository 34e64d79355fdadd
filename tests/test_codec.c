/* test_codec.c — the .qem stream codec (src/codec, shared/spec/qem-format.md §5–§8), tested
 * against the SPEC rather than the implementation: the normative table, the worked examples and
 * the decoder trace of §6.5, the model choice of §7, round trips of Poisson and adversarial
 * streams, every error path of §5/§6.3, the spatial index of §8, and the golden files' streams.
 *
 * The test carries its own tiny codec written from the spec text (ref_* below, integers only):
 * the library's bytes must equal what it encodes and it must decode what the library writes.
 * Disagreements therefore point at either the library or a misreading of the spec; the failure
 * messages name the stream so that the case can be replayed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "io/npy.h"

#ifndef SSB4D_SHARED_DATA
#define SSB4D_SHARED_DATA "../shared/data"
#endif

#define L_LOW (1u << 23)  /* lower end of the normalized state interval */
#define L_HIGH (1u << 31) /* upper end (exclusive) */
#define REF_MAX_BYTES(n) (8 * (n) + 16) /* generous: escape 2 B + renorm <= 2 B per sample */

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                              */

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = xmalloc((size_t)sz + 1);
    size_t got = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    if (got != (size_t)sz) {
        free(buf);
        return NULL;
    }
    buf[sz] = 0;
    *size = (size_t)sz;
    return buf;
}

static uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static void put16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v & 255); p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v & 0xFFFF); put16(p + 2, v >> 16); }

static size_t from_hex(const char *hex, uint8_t *out)
{
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned b;
        sscanf(hex + 2 * i, "%2x", &b);
        out[i] = (uint8_t)b;
    }
    return n;
}

static void to_hex(const uint8_t *b, size_t n, char *out, size_t cap)
{
    size_t i = 0;
    for (; i < n && 2 * i + 3 < cap; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
    out[2 * i] = 0;
}

/* Deterministic RNG (splitmix64) and a Poisson sampler: Knuth's product method, with large
 * means split into parts of at most 10 (a sum of independent Poissons is Poisson). */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unif(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1p-53; }
static uint32_t rng_below(uint64_t *s, uint32_t n) { return (uint32_t)(rng_next(s) % n); }

static unsigned poisson(uint64_t *s, double lam)
{
    unsigned k = 0;
    while (lam > 0) {
        double part = lam > 10 ? 10 : lam, lim = exp(-part), p = 1;
        lam -= part;
        for (;;) {
            p *= rng_unif(s);
            if (p <= lim)
                break;
            k++;
        }
    }
    return k;
}

static void fill_poisson(uint16_t *v, size_t n, double lam, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        unsigned k = poisson(s, lam);
        v[i] = (uint16_t)(k > 65535 ? 65535 : k);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The test's own codec, from the spec text only                                              */

static uint16_t g_freq[QEM_MODELS][QEM_SYMBOLS]; /* loaded from qem-rans-tables-v1.json */
static uint32_t g_start[QEM_MODELS][QEM_SYMBOLS];
static int g_table_loaded;

static int load_json_table(void)
{
    size_t size;
    uint8_t *txt = read_file(SSB4D_SHARED_DATA "/qem-rans-tables-v1.json", &size);
    if (!txt)
        return -1;
    cJSON *j = cJSON_ParseWithLength((const char *)txt, size);
    free(txt);
    if (!j)
        return -1;
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(j, "frequencies");
    int ok = cJSON_IsArray(fr) && cJSON_GetArraySize(fr) == QEM_MODELS;
    for (int m = 0; ok && m < QEM_MODELS; m++) {
        const cJSON *row = cJSON_GetArrayItem(fr, m);
        ok = cJSON_IsArray(row) && cJSON_GetArraySize(row) == QEM_SYMBOLS;
        uint32_t acc = 0;
        for (int s = 0; ok && s < QEM_SYMBOLS; s++) {
            const cJSON *e = cJSON_GetArrayItem(row, s);
            ok = cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble <= 1024 &&
                 e->valuedouble == (double)(int)e->valuedouble;
            if (ok) {
                g_freq[m][s] = (uint16_t)e->valueint;
                g_start[m][s] = acc;
                acc += g_freq[m][s];
            }
        }
    }
    const cJSON *sb = cJSON_GetObjectItemCaseSensitive(j, "scale_bits");
    ok = ok && cJSON_IsNumber(sb) && sb->valueint == QEM_SCALE_BITS;
    cJSON_Delete(j);
    g_table_loaded = ok;
    return ok ? 0 : -1;
}

static int group_setup(void **state)
{
    (void)state;
    if (load_json_table() != 0) {
        fprintf(stderr, "cannot load %s/qem-rans-tables-v1.json\n", SSB4D_SHARED_DATA);
        return -1;
    }
    return 0;
}

/* Byte roles recorded by the reference decoder (for the bit-flip test). */
enum { ROLE_STATE = 1, ROLE_RENORM = 2, ROLE_ESCAPE = 3 };

typedef struct {
    uint32_t slot, sym, state; /* state after the sample (after renormalization) */
    size_t pos;                /* read position after the sample */
} ref_step;

/* §6.3, literally. trace (n entries) and role (len entries) may be NULL. */
static qem_stream_status ref_rans_decode(int m, const uint8_t *b, size_t len, size_t n,
                                         uint32_t maxval, uint16_t *out, ref_step *trace,
                                         uint8_t *role)
{
    if (len < 4)
        return QEM_STREAM_BAD_LENGTH;
    uint32_t x = le32(b);
    size_t pos = 4;
    if (role)
        memset(role, ROLE_STATE, 4);
    if (x < L_LOW || x >= L_HIGH)
        return QEM_STREAM_BAD_STATE;
    for (size_t i = 0; i < n; i++) {
        uint32_t slot = x & 1023, s = 0;
        while (!(g_start[m][s] <= slot && slot < g_start[m][s] + g_freq[m][s]))
            s++;
        x = g_freq[m][s] * (x >> 10) + slot - g_start[m][s];
        while (x < L_LOW) {
            if (pos >= len)
                return QEM_STREAM_TRUNCATED;
            if (role)
                role[pos] = ROLE_RENORM;
            x = (x << 8) | b[pos++];
        }
        uint32_t value = s;
        if (s == 32) {
            if (pos + 2 > len)
                return QEM_STREAM_TRUNCATED;
            if (role)
                role[pos] = role[pos + 1] = ROLE_ESCAPE;
            value = b[pos] | (uint32_t)b[pos + 1] << 8;
            pos += 2;
        }
        if (value > maxval)
            return QEM_STREAM_RANGE;
        out[i] = (uint16_t)value;
        if (trace)
            trace[i] = (ref_step){slot, s, x, pos};
    }
    if (x != L_LOW || pos != len)
        return QEM_STREAM_BAD_FINAL;
    return QEM_STREAM_OK;
}

/* §5: every selector. A stream that is longer than 2n for rANS is accepted here (the spec lets
 * readers choose); callers compare only ok/not-ok where that matters. */
static qem_stream_status ref_decode(uint8_t sel, const uint8_t *b, size_t len, size_t n,
                                    uint32_t maxval, uint16_t *out)
{
    if (sel < QEM_MODELS)
        return ref_rans_decode(sel, b, len, n, maxval, out, NULL, NULL);
    switch (sel) {
    case QEM_SEL_ZERO:
        if (len != 0)
            return QEM_STREAM_BAD_LENGTH;
        memset(out, 0, n * sizeof *out);
        return QEM_STREAM_OK;
    case QEM_SEL_CONST: {
        if (len != 2)
            return QEM_STREAM_BAD_LENGTH;
        uint32_t v = b[0] | (uint32_t)b[1] << 8;
        if (v > maxval)
            return QEM_STREAM_RANGE;
        for (size_t i = 0; i < n; i++)
            out[i] = (uint16_t)v;
        return QEM_STREAM_OK;
    }
    case QEM_SEL_LITERAL:
        if (len != 2 * n)
            return QEM_STREAM_BAD_LENGTH;
        for (size_t i = 0; i < n; i++) {
            uint32_t v = b[2 * i] | (uint32_t)b[2 * i + 1] << 8;
            if (v > maxval)
                return QEM_STREAM_RANGE;
            out[i] = (uint16_t)v;
        }
        return QEM_STREAM_OK;
    case QEM_SEL_SPARSE: {
        if (len % 2)
            return QEM_STREAM_BAD_LENGTH;
        memset(out, 0, n * sizeof *out);
        long prev = -1;
        for (size_t i = 0; i < len; i += 2) {
            uint32_t e = b[i] | (uint32_t)b[i + 1] << 8, p = e >> 7, v = (e & 127) + 1;
            if ((long)p <= prev || p >= n)
                return QEM_STREAM_SPARSE_ORDER;
            if (v > maxval)
                return QEM_STREAM_RANGE;
            out[p] = (uint16_t)v;
            prev = (long)p;
        }
        return QEM_STREAM_OK;
    }
    default:
        return QEM_STREAM_BAD_SELECTOR;
    }
}

/* §6.4, literally. Returns the stream length. */
static size_t ref_rans_encode(int m, const uint16_t *v, size_t n, uint8_t *out)
{
    uint8_t *e = xmalloc(REF_MAX_BYTES(n));
    size_t ne = 0;
    uint32_t x = L_LOW;
    for (size_t k = n; k-- > 0;) {
        uint32_t val = v[k], s = val < 32 ? val : 32, f = g_freq[m][s], c = g_start[m][s];
        if (val >= 32) {
            e[ne++] = (uint8_t)(val >> 8);
            e[ne++] = (uint8_t)(val & 255);
        }
        while (x >= (1u << 21) * f) {
            e[ne++] = (uint8_t)(x & 255);
            x >>= 8;
        }
        x = (x / f) * 1024 + (x % f) + c;
    }
    put32(out, x);
    for (size_t i = 0; i < ne; i++)
        out[4 + i] = e[ne - 1 - i];
    free(e);
    return 4 + ne;
}

/* §7 step 2. */
static int ref_model(const uint16_t *v, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i] < 32 ? v[i] : 32;
    double mean = (double)sum / (double)n;
    if (mean < 0.002)
        mean = 0.002;
    double r = (log(mean / 0.002) * 63) / log(16000);
    double m = nearbyint(r);
    return m < 0 ? 0 : m > 63 ? 63 : (int)m;
}

/* §7, the whole rule. out needs REF_MAX_BYTES(n). */
static size_t ref_encode(const uint16_t *v, size_t n, uint8_t *out, uint8_t *sel)
{
    uint16_t lo = v[0], hi = v[0];
    size_t nnz = 0;
    for (size_t i = 0; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
        nnz += v[i] != 0;
    }
    if (lo == hi) {
        if (lo == 0) {
            *sel = QEM_SEL_ZERO;
            return 0;
        }
        *sel = QEM_SEL_CONST;
        put16(out, lo);
        return 2;
    }
    int m = ref_model(v, n);
    size_t len = ref_rans_encode(m, v, n, out);
    *sel = (uint8_t)m;
    if (len >= 2 * n) {
        *sel = QEM_SEL_LITERAL;
        for (size_t i = 0; i < n; i++)
            put16(out + 2 * i, v[i]);
        len = 2 * n;
    }
    if (hi <= 128 && 2 * nnz < len) {
        *sel = QEM_SEL_SPARSE;
        len = 0;
        for (size_t i = 0; i < n; i++)
            if (v[i]) {
                put16(out + len, (unsigned)(i << 7 | (v[i] - 1u)));
                len += 2;
            }
    }
    return len;
}

/* ------------------------------------------------------------------------------------------ */
/* The round-trip check used by most tests                                                    */

typedef struct {
    size_t streams, bytes, by_sel[256];
} rt_stats;

/* Encodes v with the library into a buffer of exactly qem_stream_bound(n) bytes (ASan catches
 * any overrun), then checks: same selector and bytes as the spec encoder; the library and the
 * spec decoder both give v back; maxval 255 refuses exactly the streams with a value > 255;
 * decode_add agrees. what/seed name the case in failure messages. */
static void check_roundtrip(const uint16_t *v, size_t n, const char *what, uint64_t seed,
                            rt_stats *st)
{
    size_t bound = qem_stream_bound(n);
    uint8_t *buf = xmalloc(bound);
    uint8_t sel = 0xEE;
    size_t len = qem_stream_encode(v, n, buf, &sel);
    if (len > bound)
        fail_msg("%s seed %llu n %zu: encoded %zu bytes > bound %zu", what,
                 (unsigned long long)seed, n, len, bound);

    uint8_t *rb = xmalloc(REF_MAX_BYTES(n));
    uint8_t rsel;
    size_t rlen = ref_encode(v, n, rb, &rsel);
    if (sel != rsel || len != rlen || memcmp(buf, rb, len) != 0) {
        char h1[200], h2[200];
        to_hex(buf, len, h1, sizeof h1);
        to_hex(rb, rlen, h2, sizeof h2);
        fail_msg("%s seed %llu n %zu: library sel %u len %zu [%s...] != spec sel %u len %zu [%s...]",
                 what, (unsigned long long)seed, n, sel, len, h1, rsel, rlen, h2);
    }

    uint16_t maxv = 0;
    for (size_t i = 0; i < n; i++)
        maxv = v[i] > maxv ? v[i] : maxv;
    uint16_t *out = xmalloc(n * sizeof *out);
    qem_stream_status s = qem_stream_decode(sel, buf, len, n, 65535, out);
    if (s != QEM_STREAM_OK || memcmp(out, v, n * sizeof *v) != 0)
        fail_msg("%s seed %llu n %zu sel %u: library decode status %d (%s) or values differ", what,
                 (unsigned long long)seed, n, sel, s, qem_stream_strerror(s));
    memset(out, 0xAB, n * sizeof *out);
    s = ref_decode(sel, buf, len, n, 65535, out);
    if (s != QEM_STREAM_OK || memcmp(out, v, n * sizeof *v) != 0)
        fail_msg("%s seed %llu n %zu sel %u: spec decoder status %d on the library's bytes", what,
                 (unsigned long long)seed, n, sel, s);
    s = qem_stream_decode(sel, buf, len, n, 255, out);
    if (maxv > 255 && s != QEM_STREAM_RANGE)
        fail_msg("%s seed %llu n %zu: max %u with maxval 255 gave %d, not RANGE", what,
                 (unsigned long long)seed, n, maxv, s);
    if (maxv <= 255 && (s != QEM_STREAM_OK || memcmp(out, v, n * sizeof *v) != 0))
        fail_msg("%s seed %llu n %zu: maxval 255 decode failed (%d)", what,
                 (unsigned long long)seed, n, s);

    uint64_t *acc = xmalloc(n * sizeof *acc);
    for (size_t i = 0; i < n; i++)
        acc[i] = (uint64_t)i * 1000003u + 7;
    s = qem_stream_decode_add(sel, buf, len, n, 65535, acc);
    if (s != QEM_STREAM_OK)
        fail_msg("%s seed %llu n %zu: decode_add status %d", what, (unsigned long long)seed, n, s);
    for (size_t i = 0; i < n; i++)
        if (acc[i] != (uint64_t)i * 1000003u + 7 + v[i])
            fail_msg("%s seed %llu n %zu: decode_add wrong at %zu", what, (unsigned long long)seed,
                     n, i);
    if (st) {
        st->streams++;
        st->bytes += len;
        st->by_sel[sel]++;
    }
    free(acc);
    free(out);
    free(rb);
    free(buf);
}

/* ------------------------------------------------------------------------------------------ */
/* §6.1 the table                                                                             */

static void table_equals_json(void **state)
{
    (void)state;
    assert_true(g_table_loaded);
    for (int m = 0; m < QEM_MODELS; m++) {
        unsigned sum = 0;
        for (int s = 0; s < QEM_SYMBOLS; s++) {
            if (qem_rans_freq[m][s] != g_freq[m][s])
                fail_msg("qem_rans_freq[%d][%d] = %u, JSON says %u", m, s, qem_rans_freq[m][s],
                         g_freq[m][s]);
            assert_true(qem_rans_freq[m][s] >= 1);
            sum += qem_rans_freq[m][s];
        }
        assert_int_equal(sum, 1024);
    }
    /* Spot checks against the spec text (rows 0 and 63 as printed in the JSON). */
    assert_int_equal(qem_rans_freq[0][0], 990);
    assert_int_equal(qem_rans_freq[63][32], 520);
}

/* ------------------------------------------------------------------------------------------ */
/* §6.5 worked examples                                                                       */

static const struct {
    uint16_t v[24];
    size_t n;
    uint8_t sel;
    const char *hex;
} EXAMPLES[] = {
    {{0, 1, 0, 0, 33, 2, 0, 0}, 8, 252, "800020028102"},
    {{3, 0, 65535, 32, 1, 0, 0, 7, 2, 2, 0, 1}, 12, 53, "3448f466ffffffff180220000001e2120002"},
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 20, 252, "0405"},
    {{7, 7, 7, 7, 7, 7}, 6, 255, "0700"},
    {{0, 65535, 0, 65535}, 4, 254, "0000ffff0000ffff"},
    {{31, 32, 33, 31, 32, 33, 30, 29}, 8, 63, "bfb1aa052d200021002000a42100"},
};

static void worked_examples(void **state)
{
    (void)state;
    for (size_t e = 0; e < sizeof EXAMPLES / sizeof EXAMPLES[0]; e++) {
        uint8_t want[64], rb[256], sel = 0, rsel = 0;
        size_t wlen = from_hex(EXAMPLES[e].hex, want), n = EXAMPLES[e].n;
        uint8_t *got = xmalloc(qem_stream_bound(n));
        size_t len = qem_stream_encode(EXAMPLES[e].v, n, got, &sel);
        char hex[200];
        to_hex(got, len, hex, sizeof hex);
        if (sel != EXAMPLES[e].sel || len != wlen || memcmp(got, want, wlen) != 0)
            fail_msg("example %zu: got selector %u bytes %s, spec says %u %s", e, sel, hex,
                     EXAMPLES[e].sel, EXAMPLES[e].hex);
        /* The test's own encoder must agree with the spec too (else the other tests mean little). */
        size_t rlen = ref_encode(EXAMPLES[e].v, n, rb, &rsel);
        assert_int_equal(rsel, EXAMPLES[e].sel);
        assert_int_equal(rlen, wlen);
        assert_memory_equal(rb, want, wlen);
        uint16_t out[24];
        assert_int_equal(qem_stream_decode(EXAMPLES[e].sel, want, wlen, n, 65535, out), QEM_STREAM_OK);
        assert_memory_equal(out, EXAMPLES[e].v, n * sizeof out[0]);
        check_roundtrip(EXAMPLES[e].v, n, "worked example", e, NULL);
        free(got);
    }
}

/* The decoder trace of the model-53 example, step by step (§6.5). */
static void trace_model53(void **state)
{
    (void)state;
    uint8_t b[32];
    size_t len = from_hex(EXAMPLES[1].hex, b);
    assert_int_equal(len, 18);
    assert_int_equal(le32(b), 0x66f44834u);
    ref_step tr[12];
    uint16_t out[12];
    assert_int_equal(ref_rans_decode(53, b, len, 12, 65535, out, tr, NULL), QEM_STREAM_OK);
    assert_memory_equal(out, EXAMPLES[1].v, sizeof out);
    /* sample 0: slot 52 -> 3, no bytes */
    assert_int_equal(tr[0].slot, 52);
    assert_int_equal(tr[0].sym, 3);
    assert_int_equal(tr[0].state, 0x05a15c01u);
    assert_int_equal(tr[0].pos, 4);
    /* sample 1: slot 1 -> 0, reads ff */
    assert_int_equal(tr[1].slot, 1);
    assert_int_equal(tr[1].sym, 0);
    assert_int_equal(tr[1].state, 0x02d0afffu);
    assert_int_equal(tr[1].pos, 5);
    /* sample 2: slot 1023 -> escape, reads ff then ffff */
    assert_int_equal(tr[2].slot, 1023);
    assert_int_equal(tr[2].sym, 32);
    assert_int_equal(tr[2].state, 0x00b42bffu);
    assert_int_equal(tr[2].pos, 8);
    /* sample 3: slot 1023 -> escape, reads 18 02, escape 2000 = 32 */
    assert_int_equal(tr[3].slot, 1023);
    assert_int_equal(tr[3].sym, 32);
    assert_int_equal(tr[3].state, 0x2d0a1802u);
    assert_int_equal(tr[3].pos, 12);
    /* samples 4, 5, 6 read one byte each (00, 01, e2) */
    assert_int_equal(tr[4].pos, 13);
    assert_int_equal(tr[5].pos, 14);
    assert_int_equal(tr[6].pos, 15);
    /* sample 7: slot 482 -> 7, no byte */
    assert_int_equal(tr[7].slot, 482);
    assert_int_equal(tr[7].sym, 7);
    assert_int_equal(tr[7].pos, 15);
    /* sample 8 reads 12; sample 9 leaves the state exactly 2^23 */
    assert_int_equal(tr[8].pos, 16);
    assert_int_equal(tr[9].state, 0x00800000u);
    assert_int_equal(tr[9].pos, 16);
    /* sample 10: slot 0 -> 0, reads 00 02 */
    assert_int_equal(tr[10].slot, 0);
    assert_int_equal(tr[10].state, 0x40000002u);
    assert_int_equal(tr[10].pos, 18);
    /* sample 11 -> 1, final state 2^23, all 18 bytes consumed */
    assert_int_equal(tr[11].sym, 1);
    assert_int_equal(tr[11].state, 0x00800000u);
    assert_int_equal(tr[11].pos, 18);
    /* And the library decodes the same values through the API. */
    assert_int_equal(qem_stream_decode(53, b, len, 12, 65535, out), QEM_STREAM_OK);
    assert_memory_equal(out, EXAMPLES[1].v, sizeof out);
}

/* ------------------------------------------------------------------------------------------ */
/* §7 model choice                                                                            */

static void model_choice_examples(void **state)
{
    (void)state;
    /* Streams whose clipped mean is exactly the example's and for which rANS wins over literal
     * and sparse (a value > 128 rules out sparse). The example 0.01 -> 10 cannot be observed:
     * with n <= 512 such a stream has at most 5 nonzero samples, and sparse (<= 10 bytes) always
     * beats rANS. Mean exactly 32 cannot be observed either: every sample would be escaped and
     * literal always wins. */
    static uint16_t v[512];
    struct { double mean; int model; } ex[] = {{0.1, 25}, {0.5, 36}, {1, 40}, {2, 45}};
    for (size_t e = 0; e < 4; e++) {
        size_t n = (size_t)(32 / ex[e].mean + 0.5); /* one escaped 200 (clips to 32), the rest 0 */
        memset(v, 0, sizeof v);
        v[n / 3] = 200;
        uint8_t *buf = xmalloc(qem_stream_bound(n)), sel;
        qem_stream_encode(v, n, buf, &sel);
        free(buf);
        if (sel != ex[e].model)
            fail_msg("mean %g (n %zu, one 200): selector %u, spec says %d", ex[e].mean, n, sel,
                     ex[e].model);
        check_roundtrip(v, n, "model example", e, NULL);
    }
    /* Means 5, 10, 20 from two alternating values; mean 31.5 -> 63; clipping: the clipped mean
     * of 0,0,1000 is 32/3 -> model 56 (the unclipped mean would give 63). */
    struct { uint16_t a, b, c; int model; } alt[] = {
        {4, 6, 0, 51}, {9, 11, 0, 55}, {19, 21, 0, 60}, {31, 33, 0, 63}, {31, 65535, 0, 63},
        {0, 0, 1000, 56},
    };
    for (size_t e = 0; e < sizeof alt / sizeof alt[0]; e++) {
        size_t n = alt[e].c ? 150 : 100;
        for (size_t i = 0; i < n; i++)
            v[i] = alt[e].c ? (i % 3 == 2 ? alt[e].c : alt[e].a) : (i % 2 ? alt[e].b : alt[e].a);
        uint8_t *buf = xmalloc(qem_stream_bound(n)), sel;
        qem_stream_encode(v, n, buf, &sel);
        free(buf);
        if (sel != alt[e].model)
            fail_msg("alternating %u/%u/%u: selector %u, spec says %d", alt[e].a, alt[e].b,
                     alt[e].c, sel, alt[e].model);
        check_roundtrip(v, n, "model example (alternating)", e, NULL);
    }
    /* The printed example list, through the test's own formula (guards ref_model itself). */
    struct { double mean; int model; } list[] = {{0.01, 10}, {0.1, 25}, {0.5, 36}, {1, 40},
        {2, 45}, {5, 51}, {10, 55}, {20, 60}, {32, 63}};
    for (size_t e = 0; e < sizeof list / sizeof list[0]; e++) {
        double r = (log(list[e].mean / 0.002) * 63) / log(16000);
        assert_int_equal((int)nearbyint(r), list[e].model);
    }
    /* Rule 4 tie: sparse only when strictly shorter. 0,5 (n 2): rANS >= 4 bytes, sparse 2 -> 252.
     * Rule 1: constants. */
    uint16_t two[2] = {0, 5};
    uint8_t buf[64], sel;
    assert_true(qem_stream_bound(2) <= sizeof buf);
    size_t len = qem_stream_encode(two, 2, buf, &sel);
    assert_int_equal(sel, QEM_SEL_SPARSE);
    assert_int_equal(len, 2);
    /* 0,129 cannot be sparse; rANS is >= 4 = 2n bytes -> literal. */
    two[1] = 129;
    len = qem_stream_encode(two, 2, buf, &sel);
    assert_int_equal(sel, QEM_SEL_LITERAL);
    assert_int_equal(len, 4);
    /* A single sample: constant, never rANS. */
    uint16_t one = 0;
    assert_int_equal(qem_stream_encode(&one, 1, buf, &sel), 0);
    assert_int_equal(sel, QEM_SEL_ZERO);
    one = 40000;
    assert_int_equal(qem_stream_encode(&one, 1, buf, &sel), 2);
    assert_int_equal(sel, QEM_SEL_CONST);
    assert_int_equal(buf[0] | buf[1] << 8, 40000);
}

/* Many random streams of every kind: the library's selector and bytes equal the spec encoder's. */
static void matches_spec_encoder(void **state)
{
    (void)state;
    static uint16_t v[512];
    uint64_t s = 12345;
    for (int it = 0; it < 3000; it++) {
        size_t n = 1 + rng_below(&s, 512);
        int kind = it % 6;
        double lam = exp(log(0.001) + rng_unif(&s) * (log(60) - log(0.001)));
        for (size_t i = 0; i < n; i++) {
            switch (kind) {
            case 0: v[i] = (uint16_t)poisson(&s, lam); break;
            case 1: v[i] = (uint16_t)rng_below(&s, 40); break;                 /* around 32 */
            case 2: v[i] = rng_below(&s, 8) ? 0 : (uint16_t)(1 + rng_below(&s, 140)); break;
            case 3: v[i] = (uint16_t)rng_next(&s); break;                      /* noise */
            case 4: v[i] = rng_below(&s, 50) ? (uint16_t)poisson(&s, lam) : 65535; break;
            default: v[i] = (uint16_t)(poisson(&s, lam) * (1 + rng_below(&s, 3))); break;
            }
        }
        check_roundtrip(v, n, "random kind", (uint64_t)it, NULL);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Round trips                                                                                */

static void roundtrip_poisson(void **state)
{
    (void)state;
    static uint16_t v[512];
    rt_stats st = {0};
    for (int li = 0; li <= 40; li++) {
        double lam = 0.001 * pow(50000.0, li / 40.0); /* 0.001 .. 50, log-spaced */
        for (uint64_t seed = 1; seed <= 12; seed++) {
            uint64_t s = seed * 7919 + (uint64_t)li;
            size_t n = seed <= 8 ? 512 : 1 + rng_below(&s, 512);
            fill_poisson(v, n, lam, &s);
            check_roundtrip(v, n, "poisson", seed * 100 + (uint64_t)li, &st);
        }
    }
    print_message("poisson round trips: %zu streams, %zu bytes; selectors 252:%zu 253:%zu 254:%zu "
                  "255:%zu\n", st.streams, st.bytes, st.by_sel[252], st.by_sel[253],
                  st.by_sel[254], st.by_sel[255]);
}

static void roundtrip_special(void **state)
{
    (void)state;
    static uint16_t v[512];
    uint8_t *buf = xmalloc(qem_stream_bound(512)), sel;
    /* All zero and constants (§7 rule 1). */
    const uint16_t consts[] = {0, 1, 7, 31, 32, 255, 256, 65535};
    for (size_t c = 0; c < sizeof consts / sizeof consts[0]; c++) {
        for (size_t n = 1; n <= 512; n += (n < 4 ? 1 : 127)) {
            for (size_t i = 0; i < n; i++)
                v[i] = consts[c];
            size_t len = qem_stream_encode(v, n, buf, &sel);
            if (consts[c] == 0) {
                assert_int_equal(sel, QEM_SEL_ZERO);
                assert_int_equal(len, 0);
            } else {
                assert_int_equal(sel, QEM_SEL_CONST);
                assert_int_equal(len, 2);
                assert_int_equal(buf[0] | buf[1] << 8, consts[c]);
            }
            check_roundtrip(v, n, "constant", consts[c], NULL);
        }
    }
    /* A 255 constant may carry any value, even 0 (writers use 253 for it). */
    uint16_t out[512];
    uint8_t zero2[2] = {0, 0};
    assert_int_equal(qem_stream_decode(QEM_SEL_CONST, zero2, 2, 9, 255, out), QEM_STREAM_OK);
    for (int i = 0; i < 9; i++)
        assert_int_equal(out[i], 0);
    /* Sparse: values 1..128 at any position incl. 511, and the 0xFFFF event. */
    uint64_t s = 99;
    for (int it = 0; it < 300; it++) {
        size_t n = 1 + rng_below(&s, 512);
        memset(v, 0, sizeof v);
        size_t k = 1 + rng_below(&s, 6);
        for (size_t j = 0; j < k; j++)
            v[rng_below(&s, (uint32_t)n)] = (uint16_t)(1 + rng_below(&s, 128));
        if (it % 10 == 0)
            v[n - 1] = 128;
        check_roundtrip(v, n, "sparse", (uint64_t)it, NULL);
    }
    memset(v, 0, sizeof v);
    v[511] = 128;
    v[0] = 1;
    size_t len = qem_stream_encode(v, 512, buf, &sel);
    assert_int_equal(sel, QEM_SEL_SPARSE);
    assert_int_equal(len, 4);
    assert_int_equal(buf[2] | buf[3] << 8, 0xFFFF);
    assert_int_equal(buf[0] | buf[1] << 8, 0x0000);
    /* Escapes at the boundary values, alone and mixed into Poisson data. */
    const uint16_t esc[] = {31, 32, 33, 127, 128, 129, 255, 256, 1000, 65534, 65535};
    for (size_t e = 0; e < sizeof esc / sizeof esc[0]; e++) {
        for (uint64_t seed = 0; seed < 20; seed++) {
            s = seed + 1000 * e;
            size_t n = seed < 10 ? 512 : 1 + rng_below(&s, 512);
            fill_poisson(v, n, 0.05 * pow(10, (double)(seed % 5)), &s);
            size_t k = 1 + rng_below(&s, 10);
            for (size_t j = 0; j < k; j++)
                v[rng_below(&s, (uint32_t)n)] = esc[e];
            check_roundtrip(v, n, "escape mix", seed * 100 + e, NULL);
            /* the same value everywhere but one sample */
            for (size_t i = 0; i < n; i++)
                v[i] = esc[e];
            v[rng_below(&s, (uint32_t)n)] = (uint16_t)(esc[e] - 1);
            check_roundtrip(v, n, "escape nearly const", seed * 100 + e, NULL);
        }
    }
    free(buf);
}

static void roundtrip_every_length(void **state)
{
    (void)state;
    static uint16_t v[512];
    for (size_t n = 1; n <= 512; n++) {
        for (int kind = 0; kind < 4; kind++) {
            uint64_t s = n * 31 + (uint64_t)kind;
            double lam[] = {0.02, 0.7, 4, 25};
            fill_poisson(v, n, lam[kind], &s);
            if (kind == 3 && n > 2)
                v[n / 2] = 40000; /* one escape in the middle */
            check_roundtrip(v, n, "every length", n * 10 + (uint64_t)kind, NULL);
        }
    }
    /* Tail blocks as they occur in files: 552 = 512 + 40 scans, 600 = 512 + 88. */
    size_t tails[] = {40, 88, 1, 2, 3, 255, 256, 257, 511};
    for (size_t t = 0; t < sizeof tails / sizeof tails[0]; t++) {
        uint64_t s = 777 + t;
        fill_poisson(v, tails[t], 3.0, &s);
        check_roundtrip(v, tails[t], "tail", t, NULL);
    }
}

/* §5: a decoded value above the dtype maximum is an error, whatever the selector. */
static void uint8_range(void **state)
{
    (void)state;
    uint16_t out[64];
    uint8_t c256[2] = {0x00, 0x01}, c255[2] = {0xFF, 0x00};
    assert_int_equal(qem_stream_decode(QEM_SEL_CONST, c256, 2, 8, 255, out), QEM_STREAM_RANGE);
    assert_int_equal(qem_stream_decode(QEM_SEL_CONST, c256, 2, 8, 65535, out), QEM_STREAM_OK);
    assert_int_equal(out[7], 256);
    assert_int_equal(qem_stream_decode(QEM_SEL_CONST, c255, 2, 8, 255, out), QEM_STREAM_OK);
    assert_int_equal(out[0], 255);
    uint8_t lit[8] = {1, 0, 0, 1, 2, 0, 3, 0}; /* 1, 256, 2, 3 */
    assert_int_equal(qem_stream_decode(QEM_SEL_LITERAL, lit, 8, 4, 255, out), QEM_STREAM_RANGE);
    assert_int_equal(qem_stream_decode(QEM_SEL_LITERAL, lit, 8, 4, 65535, out), QEM_STREAM_OK);
    assert_int_equal(out[1], 256);
    lit[3] = 0;
    lit[2] = 255;
    assert_int_equal(qem_stream_decode(QEM_SEL_LITERAL, lit, 8, 4, 255, out), QEM_STREAM_OK);
    /* rANS escape 256 vs 255 */
    uint16_t v[40] = {0};
    for (int i = 0; i < 40; i++)
        v[i] = (uint16_t)(i % 4);
    uint8_t buf[256];
    for (int val = 250; val <= 260; val++) {
        v[17] = (uint16_t)val;
        size_t len = ref_rans_encode(40, v, 40, buf);
        qem_stream_status want = val > 255 ? QEM_STREAM_RANGE : QEM_STREAM_OK;
        assert_int_equal(qem_stream_decode(40, buf, len, 40, 255, out), want);
        assert_int_equal(qem_stream_decode(40, buf, len, 40, 65535, out), QEM_STREAM_OK);
        assert_int_equal(out[17], val);
        uint64_t acc[40] = {0};
        assert_int_equal(qem_stream_decode_add(40, buf, len, 40, 255, acc), want);
    }
    /* Sparse values are at most 128, so maxval 255 never refuses them. */
    uint8_t sp[2] = {0x7F, 0x00};
    assert_int_equal(qem_stream_decode(QEM_SEL_SPARSE, sp, 2, 4, 255, out), QEM_STREAM_OK);
    assert_int_equal(out[0], 128);
}

/* ------------------------------------------------------------------------------------------ */
/* Damaged streams                                                                            */

/* A few rANS streams (encoded by the spec encoder with a forced model). */
static size_t make_rans(int kind, uint16_t *v, size_t *n, uint8_t *buf, int *model)
{
    uint64_t s = 4242 + (uint64_t)kind;
    double lam[] = {0.3, 2.0, 12.0, 22.0, 1.0};
    *n = kind == 4 ? 100 : 512;
    fill_poisson(v, *n, lam[kind], &s);
    if (kind == 1 || kind == 4) /* with escapes */
        for (size_t i = 5; i < *n; i += 37)
            v[i] = (uint16_t)(32 + i * 97);
    *model = ref_model(v, *n);
    size_t len = ref_rans_encode(*model, v, *n, buf);
    assert_true(len < 2 * *n); /* a stream a writer could emit (§5) */
    return len;
}

static void truncated_streams(void **state)
{
    (void)state;
    static uint16_t v[512], out[512];
    static uint8_t buf[REF_MAX_BYTES(512)];
    for (int kind = 0; kind < 5; kind++) {
        size_t n;
        int m;
        size_t len = make_rans(kind, v, &n, buf, &m);
        assert_int_equal(qem_stream_decode((uint8_t)m, buf, len, n, 65535, out), QEM_STREAM_OK);
        assert_memory_equal(out, v, n * sizeof v[0]);
        for (size_t p = 0; p < len; p++) {
            uint8_t *cut = xmalloc(p); /* exact size: ASan sees any read past the prefix */
            memcpy(cut, buf, p);
            qem_stream_status s = qem_stream_decode((uint8_t)m, cut, p, n, 65535, out);
            if (p < 4 ? s != QEM_STREAM_BAD_LENGTH
                      : (s != QEM_STREAM_TRUNCATED && s != QEM_STREAM_BAD_FINAL))
                fail_msg("kind %d model %d: prefix %zu of %zu gave status %d (%s)", kind, m, p, len,
                         s, qem_stream_strerror(s));
            uint64_t acc[512];
            qem_stream_status s2 = qem_stream_decode_add((uint8_t)m, cut, p, n, 65535, acc);
            assert_int_equal(s2 != QEM_STREAM_OK, 1);
            free(cut);
        }
        /* One extra byte at the end: trailing data. */
        buf[len] = 0;
        assert_int_equal(qem_stream_decode((uint8_t)m, buf, len + 1, n, 65535, out),
                         QEM_STREAM_BAD_FINAL);
        /* Wrong sample count: one more needs a byte that is not there; one fewer leaves bytes or
         * a state other than 2^23. */
        assert_int_not_equal(qem_stream_decode((uint8_t)m, buf, len, n - 1, 65535, out),
                             QEM_STREAM_OK);
        if (n < 512)
            assert_int_equal(qem_stream_decode((uint8_t)m, buf, len, n + 1, 65535, out),
                             QEM_STREAM_TRUNCATED);
    }
    /* Literal prefixes and extensions. */
    uint8_t lit[1026] = {0};
    for (size_t p = 0; p <= 1026; p++)
        if (p != 1024)
            assert_int_equal(qem_stream_decode(QEM_SEL_LITERAL, lit, p, 512, 65535, out),
                             QEM_STREAM_BAD_LENGTH);
}

static void garbled_streams(void **state)
{
    (void)state;
    static uint16_t v[512], out[512], rout[512];
    static uint8_t buf[REF_MAX_BYTES(512)], role[REF_MAX_BYTES(512)];
    size_t rans_flips = 0, rans_fails = 0;
    for (int kind = 0; kind < 5; kind++) {
        size_t n;
        int m;
        size_t len = make_rans(kind, v, &n, buf, &m);
        assert_int_equal(ref_rans_decode(m, buf, len, n, 65535, out, NULL, role), QEM_STREAM_OK);
        for (size_t bit = 0; bit < 8 * len; bit++) {
            buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            qem_stream_status s = qem_stream_decode((uint8_t)m, buf, len, n, 65535, out);
            qem_stream_status rs = ref_decode((uint8_t)m, buf, len, n, 65535, rout);
            if ((s == QEM_STREAM_OK) != (rs == QEM_STREAM_OK))
                fail_msg("kind %d: bit %zu flipped: library %d, spec decoder %d", kind, bit, s, rs);
            if (s == QEM_STREAM_OK && memcmp(out, rout, n * sizeof out[0]) != 0)
                fail_msg("kind %d: bit %zu flipped: library and spec decoder disagree", kind, bit);
            if (role[bit / 8] == ROLE_ESCAPE) {
                /* Escape words are raw data: the chain is unaffected, one value changes. */
                if (s != QEM_STREAM_OK)
                    fail_msg("kind %d: flip in escape byte %zu refused (%d)", kind, bit / 8, s);
                size_t diff = 0;
                for (size_t i = 0; i < n; i++)
                    diff += out[i] != v[i];
                assert_int_equal(diff, 1);
            } else {
                rans_flips++;
                rans_fails += s != QEM_STREAM_OK;
            }
            uint64_t acc[512] = {0};
            assert_int_equal(qem_stream_decode_add((uint8_t)m, buf, len, n, 65535, acc) == QEM_STREAM_OK,
                             s == QEM_STREAM_OK);
            buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
    }
    print_message("rANS bit flips outside escape words: %zu of %zu refused\n", rans_fails, rans_flips);
    /* The final-state check must catch the large majority. */
    assert_true(rans_fails * 100 >= rans_flips * 95);

    /* Other selectors: any flip must decode or fail cleanly, in agreement with the spec decoder. */
    uint64_t s = 5;
    for (int kind = 0; kind < 3; kind++) {
        size_t n = 64;
        memset(v, 0, sizeof v);
        for (size_t i = 0; i < n; i++)
            v[i] = kind == 0 ? (i % 9 == 0 ? (uint16_t)(1 + i) : 0)
                             : kind == 1 ? (uint16_t)rng_next(&s) : 40;
        uint8_t ebuf[4096], sel;
        assert_true(qem_stream_bound(n) <= sizeof ebuf);
        size_t len = qem_stream_encode(v, n, ebuf, &sel);
        for (size_t bit = 0; bit < 8 * len; bit++) {
            ebuf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            for (int mv = 0; mv < 2; mv++) {
                uint32_t maxval = mv ? 65535 : 255;
                qem_stream_status ls = qem_stream_decode(sel, ebuf, len, n, maxval, out);
                qem_stream_status rs = ref_decode(sel, ebuf, len, n, maxval, rout);
                assert_int_equal(ls == QEM_STREAM_OK, rs == QEM_STREAM_OK);
                if (ls == QEM_STREAM_OK)
                    assert_memory_equal(out, rout, n * sizeof out[0]);
            }
            ebuf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
    }
    /* Random garbage under every selector and length: never crash, agree with the spec decoder
     * on success (rANS streams longer than 2n may be refused by the library: see §5). */
    for (int it = 0; it < 20000; it++) {
        size_t n = 1 + rng_below(&s, 512), len = rng_below(&s, it % 2 ? 24 : 1100);
        uint8_t sel = (uint8_t)(it % 3 ? rng_below(&s, 64) : 252 + rng_below(&s, 4));
        uint8_t *g = xmalloc(len);
        for (size_t i = 0; i < len; i++)
            g[i] = (uint8_t)rng_next(&s);
        if (sel < 64 && len >= 4) /* a valid initial state, so the chain itself is exercised */
            put32(g, L_LOW + (uint32_t)(rng_next(&s) % (L_HIGH - L_LOW)));
        uint32_t maxval = it % 5 ? 65535 : 255;
        qem_stream_status ls = qem_stream_decode(sel, g, len, n, maxval, out);
        qem_stream_status rs = ref_decode(sel, g, len, n, maxval, rout);
        if (ls == QEM_STREAM_OK && (rs != QEM_STREAM_OK || memcmp(out, rout, n * 2) != 0))
            fail_msg("garbage it %d sel %u len %zu n %zu: library accepted, spec decoder %d", it,
                     sel, len, n, rs);
        if (rs == QEM_STREAM_OK && ls != QEM_STREAM_OK &&
            !(ls == QEM_STREAM_BAD_LENGTH && len > 2 * n))
            fail_msg("garbage it %d sel %u len %zu n %zu: spec decoder accepted, library %d", it,
                     sel, len, n, ls);
        free(g);
    }
}

static void bad_selectors(void **state)
{
    (void)state;
    uint8_t buf[64] = {0};
    put32(buf, L_LOW);
    uint16_t out[16];
    uint64_t acc[16];
    for (int sel = 64; sel <= 251; sel++)
        for (size_t len = 0; len <= 32; len += 2) {
            assert_int_equal(qem_stream_decode((uint8_t)sel, buf, len, 16, 65535, out),
                             QEM_STREAM_BAD_SELECTOR);
            assert_int_equal(qem_stream_decode_add((uint8_t)sel, buf, len, 16, 65535, acc),
                             QEM_STREAM_BAD_SELECTOR);
        }
    for (int s = 0; s <= QEM_STREAM_RANGE; s++) {
        const char *msg = qem_stream_strerror((qem_stream_status)s);
        assert_non_null(msg);
        assert_true(strlen(msg) > 0);
    }
}

static void length_mismatches(void **state)
{
    (void)state;
    uint8_t buf[2048] = {0};
    uint16_t out[512];
    /* 253 with any byte */
    for (size_t len = 1; len <= 4; len++)
        assert_int_equal(qem_stream_decode(QEM_SEL_ZERO, buf, len, 10, 65535, out), QEM_STREAM_BAD_LENGTH);
    /* 255 needs exactly 2 */
    size_t lens255[] = {0, 1, 3, 4, 20};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(qem_stream_decode(QEM_SEL_CONST, buf, lens255[i], 10, 65535, out),
                         QEM_STREAM_BAD_LENGTH);
    /* 254 needs exactly 2n, for every n */
    for (size_t n = 1; n <= 512; n++) {
        size_t bad[] = {0, 2 * n - 1, 2 * n + 1, 2 * n + 2, n};
        for (size_t i = 0; i < 5; i++)
            if (bad[i] != 2 * n)
                assert_int_equal(qem_stream_decode(QEM_SEL_LITERAL, buf, bad[i], n, 65535, out),
                                 QEM_STREAM_BAD_LENGTH);
        assert_int_equal(qem_stream_decode(QEM_SEL_LITERAL, buf, 2 * n, n, 65535, out), QEM_STREAM_OK);
    }
    /* 252 needs an even length */
    for (size_t len = 1; len < 40; len += 2)
        assert_int_equal(qem_stream_decode(QEM_SEL_SPARSE, buf, len, 512, 65535, out),
                         QEM_STREAM_BAD_LENGTH);
    /* rANS needs at least the 4-byte state, for every model */
    put32(buf, L_LOW);
    for (int m = 0; m < 64; m++)
        for (size_t len = 0; len < 4; len++)
            assert_int_equal(qem_stream_decode((uint8_t)m, buf, len, 3, 65535, out),
                             QEM_STREAM_BAD_LENGTH);
    /* A valid rANS chain longer than 2n: the spec lets readers refuse it; it must not be
     * misdecoded. n = 1, value 65535, model 0: 4 + 2 + renorm bytes. */
    uint16_t big = 65535;
    size_t len = ref_rans_encode(0, &big, 1, buf);
    assert_true(len > 2);
    qem_stream_status s = qem_stream_decode(0, buf, len, 1, 65535, out);
    assert_true(s == QEM_STREAM_OK || s == QEM_STREAM_BAD_LENGTH);
    if (s == QEM_STREAM_OK)
        assert_int_equal(out[0], 65535);
    print_message("rANS stream of %zu bytes for n = 1 (> 2n): %s\n", len,
                  s == QEM_STREAM_OK ? "accepted" : "refused as BAD_LENGTH");
}

static void sparse_order(void **state)
{
    (void)state;
    uint16_t out[512];
    uint8_t b[8];
    /* equal positions */
    put16(b, 3 << 7 | 0);
    put16(b + 2, 3 << 7 | 5);
    assert_int_equal(qem_stream_decode(QEM_SEL_SPARSE, b, 4, 10, 65535, out), QEM_STREAM_SPARSE_ORDER);
    /* decreasing */
    put16(b, 4 << 7);
    put16(b + 2, 1 << 7);
    assert_int_equal(qem_stream_decode(QEM_SEL_SPARSE, b, 4, 10, 65535, out), QEM_STREAM_SPARSE_ORDER);
    /* position >= n, for every n */
    for (size_t n = 1; n <= 512; n++) {
        put16(b, (unsigned)((n - 1) << 7 | 127));
        assert_int_equal(qem_stream_decode(QEM_SEL_SPARSE, b, 2, n, 65535, out), QEM_STREAM_OK);
        assert_int_equal(out[n - 1], 128);
        if (n < 512) {
            put16(b, (unsigned)(n << 7));
            assert_int_equal(qem_stream_decode(QEM_SEL_SPARSE, b, 2, n, 65535, out),
                             QEM_STREAM_SPARSE_ORDER);
            uint64_t acc[512];
            assert_int_equal(qem_stream_decode_add(QEM_SEL_SPARSE, b, 2, n, 65535, acc),
                             QEM_STREAM_SPARSE_ORDER);
        }
    }
    /* the last event out of range after valid ones */
    put16(b, 0);
    put16(b + 2, 5 << 7);
    put16(b + 4, 9 << 7);
    assert_int_equal(qem_stream_decode(QEM_SEL_SPARSE, b, 6, 9, 65535, out), QEM_STREAM_SPARSE_ORDER);
    /* an empty sparse stream is all zeros (§5 note) */
    memset(out, 0xFF, sizeof out);
    assert_int_equal(qem_stream_decode(QEM_SEL_SPARSE, b, 0, 7, 65535, out), QEM_STREAM_OK);
    for (int i = 0; i < 7; i++)
        assert_int_equal(out[i], 0);
    /* more events than samples can never be ordered */
    uint8_t many[6];
    put16(many, 0);
    put16(many + 2, 1 << 7);
    put16(many + 4, 2 << 7);
    qem_stream_status s = qem_stream_decode(QEM_SEL_SPARSE, many, 6, 2, 65535, out);
    assert_true(s == QEM_STREAM_SPARSE_ORDER || s == QEM_STREAM_BAD_LENGTH);
}

static void bad_initial_state(void **state)
{
    (void)state;
    uint16_t out[8];
    uint8_t b[32];
    memset(b, 0x55, sizeof b);
    const uint32_t bad[] = {0, 1, L_LOW - 1, L_HIGH, L_HIGH + 1, 0xFFFFFFFFu};
    for (int m = 0; m < 64; m += 9)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            put32(b, bad[i]);
            for (size_t len = 4; len <= 32; len += 7)
                assert_int_equal(qem_stream_decode((uint8_t)m, b, len, 8, 65535, out),
                                 QEM_STREAM_BAD_STATE);
        }
    /* The edges of the interval are legal states: decode must not refuse them as BAD_STATE. */
    put32(b, L_LOW);
    assert_int_not_equal(qem_stream_decode(10, b, 32, 8, 65535, out), QEM_STREAM_BAD_STATE);
    put32(b, L_HIGH - 1);
    assert_int_not_equal(qem_stream_decode(10, b, 32, 8, 65535, out), QEM_STREAM_BAD_STATE);
    /* x0 = 2^23 alone cannot carry a sample: slot 0 gives symbol 0 and a state below 2^23, so
     * the decoder needs a renormalization byte that is not there. */
    put32(b, L_LOW);
    assert_int_equal(qem_stream_decode(10, b, 4, 1, 65535, out), QEM_STREAM_TRUNCATED);
}

/* qem_stream_bound must hold for the worst inputs; the buffer is exactly that big. */
static void bound_adversarial(void **state)
{
    (void)state;
    static uint16_t v[512];
    uint64_t s = 2024;
    size_t worst = 0, worst_n = 0;
    for (size_t n = 1; n <= 512; n++) {
        for (int kind = 0; kind < 8; kind++) {
            for (size_t i = 0; i < n; i++) {
                switch (kind) {
                case 0: v[i] = i % 2 ? 65535 : 0; break;
                case 1: v[i] = (uint16_t)(32 + rng_below(&s, 65504)); break;   /* all escapes */
                case 2: v[i] = i % 2 ? 65535 : 65534; break;
                case 3: v[i] = (uint16_t)rng_next(&s); break;
                case 4: v[i] = i % 16 ? 0 : 31; break;                          /* rare symbols */
                case 5: v[i] = i % 2 ? 31 : (uint16_t)(32 + i); break;
                case 6: v[i] = i % 8 ? (uint16_t)rng_below(&s, 3) : 40000; break;
                default: v[i] = (uint16_t)(rng_below(&s, 2) ? 30 : rng_below(&s, 2)); break;
                }
            }
            size_t b = qem_stream_bound(n);
            uint8_t *buf = xmalloc(b);
            uint8_t sel;
            size_t len = qem_stream_encode(v, n, buf, &sel);
            if (len > b)
                fail_msg("kind %d n %zu: %zu bytes > bound %zu", kind, n, len, b);
            if (len > worst) {
                worst = len;
                worst_n = n;
            }
            uint16_t *out = xmalloc(n * sizeof *out);
            assert_int_equal(qem_stream_decode(sel, buf, len, n, 65535, out), QEM_STREAM_OK);
            assert_memory_equal(out, v, n * sizeof *v);
            free(out);
            free(buf);
        }
        /* every written stream fits 2n (the MUST of §5); the bound must allow at least that */
        assert_true(qem_stream_bound(n) >= 2 * n);
    }
    print_message("largest stream %zu bytes (n %zu); qem_stream_bound(512) = %zu\n", worst, worst_n,
                  qem_stream_bound(512));
}

/* Writers MUST keep every stream at most 2n bytes (§5). */
static void written_streams_at_most_2n(void **state)
{
    (void)state;
    static uint16_t v[512];
    uint64_t s = 31337;
    for (int it = 0; it < 4000; it++) {
        size_t n = 1 + rng_below(&s, 512);
        for (size_t i = 0; i < n; i++)
            v[i] = it % 2 ? (uint16_t)rng_next(&s) >> rng_below(&s, 16) : (uint16_t)poisson(&s, 30);
        uint8_t *buf = xmalloc(qem_stream_bound(n)), sel;
        size_t len = qem_stream_encode(v, n, buf, &sel);
        if (sel != QEM_SEL_CONST && len > 2 * n)
            fail_msg("it %d n %zu: selector %u stream of %zu bytes > 2n", it, n, sel, len);
        free(buf);
    }
}

static void decode_add_matches(void **state)
{
    (void)state;
    static uint16_t v[512], out[512];
    static uint64_t acc[512], base[512];
    uint64_t s = 8;
    for (int it = 0; it < 600; it++) {
        size_t n = 1 + rng_below(&s, 512);
        double lam = exp(log(0.005) + rng_unif(&s) * (log(50) - log(0.005)));
        fill_poisson(v, n, lam, &s);
        if (it % 7 == 0)
            v[rng_below(&s, (uint32_t)n)] = 65535;
        if (it % 11 == 0)
            for (size_t i = 0; i < n; i++)
                v[i] = (uint16_t)(it % 3);
        uint8_t *buf = xmalloc(qem_stream_bound(n)), sel;
        size_t len = qem_stream_encode(v, n, buf, &sel);
        for (size_t i = 0; i < n; i++)
            acc[i] = base[i] = rng_next(&s) >> 20;
        assert_int_equal(qem_stream_decode(sel, buf, len, n, 65535, out), QEM_STREAM_OK);
        assert_int_equal(qem_stream_decode_add(sel, buf, len, n, 65535, acc), QEM_STREAM_OK);
        for (size_t i = 0; i < n; i++)
            if (acc[i] != base[i] + out[i])
                fail_msg("it %d sel %u: decode_add differs at %zu", it, sel, i);
        /* twice: it adds, it does not overwrite */
        assert_int_equal(qem_stream_decode_add(sel, buf, len, n, 65535, acc), QEM_STREAM_OK);
        for (size_t i = 0; i < n; i++)
            assert_true(acc[i] == base[i] + 2u * out[i]);
        free(buf);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* §8 spatial index                                                                           */

static void bit_width(void **state)
{
    (void)state;
    assert_int_equal(qem_bit_width(0), 0);
    assert_int_equal(qem_bit_width(1), 1);
    assert_int_equal(qem_bit_width(2), 2);
    assert_int_equal(qem_bit_width(3), 2);
    for (unsigned k = 0; k < 32; k++) {
        assert_int_equal(qem_bit_width(1u << k), k + 1);
        assert_int_equal(qem_bit_width((1u << k) | ((1u << k) - 1)), k + 1);
        if (k)
            assert_int_equal(qem_bit_width((1u << k) - 1), k);
    }
    assert_int_equal(qem_bit_width(0xFFFFFFFFu), 32);
    assert_int_equal(qem_bit_width(1024u * 65535u), 26); /* the largest field value (§8) */
}

static void spatial_words(void **state)
{
    (void)state;
    for (size_t n = 0; n <= 512; n++)
        for (unsigned w = 0; w <= 32; w++)
            assert_int_equal(qem_spatial_words(n, w), (n * w + 31) / 32);
}

/* The packing of §8 bit by bit: bit j of the string is bit j % 32 of word j / 32. */
static void ref_pack(const uint32_t *v, size_t n, unsigned w, uint32_t *words)
{
    memset(words, 0, (n * w + 31) / 32 * sizeof *words);
    for (size_t i = 0; i < n; i++)
        for (unsigned b = 0; b < w; b++)
            if (v[i] >> b & 1) {
                size_t j = i * w + b;
                words[j / 32] |= 1u << (j % 32);
            }
}

static void pack_roundtrip(void **state)
{
    (void)state;
    static uint32_t v[512], back[513], want[512];
    uint64_t s = 77;
    for (unsigned w = 0; w <= 32; w++) {
        for (size_t n = 1; n <= 512; n++) {
            for (size_t i = 0; i < n; i++) {
                uint32_t r = (uint32_t)rng_next(&s);
                v[i] = w == 0 ? 0 : w == 32 ? r : r & ((1u << w) - 1);
                if (i == n - 1 && w > 0)
                    v[i] = w == 32 ? 0xFFFFFFFFu : (1u << w) - 1; /* all-ones at the end */
            }
            size_t nw = qem_spatial_words(n, w);
            /* Exactly nw words, prefilled with garbage: packing must overwrite, and leave the
             * unused high bits of the last word zero. */
            uint32_t *words = xmalloc((nw ? nw : 1) * sizeof *words);
            for (size_t i = 0; i < (nw ? nw : 1); i++)
                words[i] = 0xDEADBEEFu;
            qem_spatial_pack(v, n, w, words);
            ref_pack(v, n, w, want);
            if (nw && memcmp(words, want, nw * sizeof *words) != 0)
                fail_msg("pack w %u n %zu differs from the spec packing", w, n);
            if (nw == 0)
                assert_int_equal(words[0], 0xDEADBEEFu); /* width 0: no words touched */
            back[n] = 0x12345678u;
            qem_spatial_unpack(words, n, w, back);
            if (memcmp(back, v, n * sizeof *v) != 0)
                fail_msg("unpack w %u n %zu differs", w, n);
            assert_int_equal(back[n], 0x12345678u);
            free(words);
        }
    }
    /* A hand-computed straddling case: w = 5, values 1,2,3,4,5,6,31 -> bits
     * 00001 00010 00011 00100 00101 00110 11111 (LSB first): word 0 = 0x18A41C41 ... */
    uint32_t ex[7] = {1, 2, 3, 4, 5, 6, 31}, wd[2] = {0, 0};
    qem_spatial_pack(ex, 7, 5, wd);
    uint32_t w0 = 1 | 2u << 5 | 3u << 10 | 4u << 15 | 5u << 20 | 6u << 25 | (31u & 3) << 30;
    assert_int_equal(wd[0], w0);
    assert_int_equal(wd[1], 31u >> 2);
    /* w = 32: words are the values */
    uint32_t ex32[3] = {0xFFFFFFFFu, 0, 0x80000001u}, wd32[3];
    qem_spatial_pack(ex32, 3, 32, wd32);
    assert_memory_equal(wd32, ex32, sizeof ex32);
    /* w = 17, n = 2: 34 bits, 2 words, the second holding 2 bits */
    uint32_t ex17[2] = {0x1FFFF, 0x1FFFF}, wd17[2];
    qem_spatial_pack(ex17, 2, 17, wd17);
    assert_int_equal(wd17[0], 0xFFFFFFFFu);
    assert_int_equal(wd17[1], 0x3u);
}

static void spatial_fields(void **state)
{
    (void)state;
    const size_t ex[][3] = {{9, 9, 5}, {12, 12, 5}, {16, 16, 5}, {33, 17, 17}, {40, 48, 34},
                            {192, 192, 612}, {256, 256, 1088}, {1, 1, 2}, {8, 8, 2}, {32, 32, 17},
                            {64, 64, 68}, {65, 3, 12}};
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++)
        if (qem_spatial_fields(ex[i][0], ex[i][1]) != ex[i][2])
            fail_msg("fields(%zu, %zu) = %zu, want %zu", ex[i][0], ex[i][1],
                     qem_spatial_fields(ex[i][0], ex[i][1]), ex[i][2]);
}

static void field_map(void **state)
{
    (void)state;
    const size_t shapes[][2] = {{9, 9}, {12, 12}, {16, 16}, {33, 17}, {40, 48}, {1, 1}, {8, 8},
                                {32, 32}, {65, 3}, {3, 65}, {192, 192}, {256, 256}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t R = shapes[i][0], C = shapes[i][1], P = R * C;
        size_t c8 = (C + 7) / 8, f8 = (R + 7) / 8 * c8, c32 = (C + 31) / 32;
        size_t F = qem_spatial_fields(R, C);
        uint32_t *m8 = xmalloc(P * sizeof *m8), *m32 = xmalloc(P * sizeof *m32);
        size_t *area = calloc(F, sizeof *area);
        qem_spatial_field_map(R, C, m8, m32);
        for (size_t r = 0; r < R; r++)
            for (size_t c = 0; c < C; c++) {
                size_t k = r * C + c;
                size_t want8 = (r / 8) * c8 + c / 8, want32 = f8 + (r / 32) * c32 + c / 32;
                if (m8[k] != want8 || m32[k] != want32)
                    fail_msg("%zux%zu pixel (%zu,%zu): fields %u/%u, want %zu/%zu (8x8 tiles "
                             "first, then 32x32, numbered over all F fields)",
                             R, C, r, c, m8[k], m32[k], want8, want32);
                area[m8[k]]++;
                area[m32[k]]++;
            }
        /* Every field is a (possibly partial) tile of the expected size. */
        for (size_t f = 0; f < F; f++) {
            size_t S = f < f8 ? 8 : 32, cols = f < f8 ? c8 : c32, t = f < f8 ? f : f - f8;
            size_t tr = t / cols, tc = t % cols;
            size_t h = (S * tr + S < R ? S : R - S * tr), w = (S * tc + S < C ? S : C - S * tc);
            assert_int_equal(area[f], h * w);
        }
        free(area);
        free(m8);
        free(m32);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The golden files: every stream decodes to the .npy, re-encodes to the same bytes, and the   */
/* spatial index equals the tile sums. Only the codec is under test: the container is parsed  */
/* here with the minimum of checks.                                                           */

typedef struct {
    uint8_t *file;
    size_t size;
    cJSON *hdr;
    const uint8_t *body;
} golden;

static int golden_open(const char *name, golden *g)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/qem-golden/%s", SSB4D_SHARED_DATA, name);
    g->file = read_file(path, &g->size);
    if (!g->file)
        return -1;
    assert_true(g->size > 56);
    assert_memory_equal(g->file, "QEMDATA1", 8);
    uint64_t L = le64(g->file + 8);
    assert_true(56 + L <= g->size);
    g->hdr = cJSON_ParseWithLength((const char *)g->file + 56, L);
    assert_non_null(g->hdr);
    g->body = g->file + 56 + L;
    return 0;
}

static void golden_close(golden *g)
{
    cJSON_Delete(g->hdr);
    free(g->file);
}

static size_t jint(const cJSON *o, const char *k)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, k);
    assert_true(cJSON_IsNumber(e));
    return (size_t)e->valuedouble;
}

static void arr(const cJSON *chunk, int i, size_t *off, size_t *count)
{
    const cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(chunk, "arrays"), i);
    assert_non_null(a);
    *off = jint(a, "offset");
    *count = jint(a, "count");
}

static void golden_case(const char *base)
{
    char name[256], path[1024];
    snprintf(name, sizeof name, "%s.qem", base);
    golden g;
    if (golden_open(name, &g) != 0)
        fail_msg("cannot read golden %s", name);
    snprintf(path, sizeof path, "%s/qem-golden/%s.npy", SSB4D_SHARED_DATA, base);
    ssb4d_npy_info ni;
    void *data;
    ssb4d_err err = {0};
    assert_int_equal(ssb_npy_load(path, &ni, &data, &err), SSB4D_OK);
    assert_int_equal(ni.ndim, 4);
    size_t P = ni.shape[2] * ni.shape[3], R = ni.shape[2], C = ni.shape[3];
    int u8 = ni.item_bytes == 1;
    uint32_t maxval = u8 ? 255 : 65535;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(g.hdr, "dtype");
    assert_string_equal(dt->valuestring, u8 ? "uint8" : "uint16");
    /* valid mask: pixel k at bit 7 - (k & 7) of byte k >> 3 */
    uint8_t *valid = xmalloc(P), *vb = xmalloc(P / 8 + 2);
    from_hex(cJSON_GetObjectItemCaseSensitive(g.hdr, "valid")->valuestring, vb);
    for (size_t k = 0; k < P; k++)
        valid[k] = vb[k >> 3] >> (7 - (k & 7)) & 1;
    size_t F = qem_spatial_fields(R, C), c8 = (C + 7) / 8, f8 = (R + 7) / 8 * c8, c32 = (C + 31) / 32;
    size_t streams = 0, spatial = 0;
    uint16_t v[512], out[512];
    uint32_t sv[512], words[512 + 1];
    const cJSON *chunk;
    cJSON_ArrayForEach(chunk, cJSON_GetObjectItemCaseSensitive(g.hdr, "chunks")) {
        size_t first = jint(chunk, "first"), scans = jint(chunk, "scans"), B = (scans + 511) / 512;
        size_t o0, n0, o1, n1, o2, n2, o3, n3, o4, n4, o5, n5;
        arr(chunk, 0, &o0, &n0);
        arr(chunk, 1, &o1, &n1);
        arr(chunk, 2, &o2, &n2);
        arr(chunk, 3, &o3, &n3);
        arr(chunk, 4, &o4, &n4);
        arr(chunk, 5, &o5, &n5);
        assert_int_equal(n1, B * P + 1);
        assert_int_equal(n4, B * F + 1);
        for (size_t b = 0; b < B; b++) {
            size_t nb = scans - 512 * b < 512 ? scans - 512 * b : 512, t0 = first + 512 * b;
            for (size_t k = 0; k < P; k++) {
                size_t si = b * P + k;
                uint32_t a = le32(g.body + o1 + 4 * si), e = le32(g.body + o1 + 4 * si + 4);
                uint8_t sel = g.body[o2 + si];
                for (size_t j = 0; j < nb; j++)
                    v[j] = u8 ? ((uint8_t *)data)[(t0 + j) * P + k] : ((uint16_t *)data)[(t0 + j) * P + k];
                qem_stream_status s = qem_stream_decode(sel, g.body + o0 + a, e - a, nb, maxval, out);
                if (s != QEM_STREAM_OK || memcmp(out, v, nb * 2) != 0)
                    fail_msg("%s chunk@%zu block %zu pixel %zu sel %u: status %d or wrong values",
                             base, first, b, k, sel, s);
                uint8_t *enc = xmalloc(qem_stream_bound(nb)), esel;
                size_t elen = qem_stream_encode(v, nb, enc, &esel);
                if (esel != sel || elen != e - a || memcmp(enc, g.body + o0 + a, elen) != 0)
                    fail_msg("%s chunk@%zu block %zu pixel %zu: re-encoded sel %u len %zu, file "
                             "has sel %u len %u", base, first, b, k, esel, elen, sel, e - a);
                free(enc);
                streams++;
            }
            /* spatial streams: tile sums of valid pixels */
            for (size_t f = 0; f < F; f++) {
                size_t q = b * F + f;
                for (size_t j = 0; j < nb; j++)
                    sv[j] = 0;
                uint32_t mx = 0;
                for (size_t r = 0; r < R; r++)
                    for (size_t c = 0; c < C; c++) {
                        size_t k = r * C + c;
                        size_t fk = f < f8 ? (r / 8) * c8 + c / 8 : f8 + (r / 32) * c32 + c / 32;
                        if (!valid[k] || fk != f)
                            continue;
                        for (size_t j = 0; j < nb; j++)
                            sv[j] += u8 ? ((uint8_t *)data)[(t0 + j) * P + k]
                                        : ((uint16_t *)data)[(t0 + j) * P + k];
                    }
                for (size_t j = 0; j < nb; j++)
                    mx = sv[j] > mx ? sv[j] : mx;
                unsigned w = qem_bit_width(mx);
                assert_int_equal(w, g.body[o5 + q]);
                uint64_t ws = le64(g.body + o4 + 8 * q), we = le64(g.body + o4 + 8 * q + 8);
                assert_int_equal(we - ws, qem_spatial_words(nb, w));
                qem_spatial_pack(sv, nb, w, words);
                for (size_t i = 0; i < we - ws; i++)
                    if (words[i] != le32(g.body + o3 + 4 * (ws + i)))
                        fail_msg("%s block %zu field %zu: packed word %zu differs", base, b, f, i);
                /* and the file's words unpack to the tile sums */
                uint32_t *fw = xmalloc((we - ws + 1) * 4), *un = xmalloc(nb * 4);
                for (size_t i = 0; i < we - ws; i++)
                    fw[i] = le32(g.body + o3 + 4 * (ws + i));
                qem_spatial_unpack(fw, nb, w, un);
                assert_memory_equal(un, sv, nb * 4);
                free(un);
                free(fw);
                spatial++;
            }
        }
    }
    print_message("%s: %zu count streams and %zu spatial streams match\n", base, streams, spatial);
    free(valid);
    free(vb);
    free(data);
    golden_close(&g);
}

static void golden_files(void **state)
{
    (void)state;
    golden_case("u16-mixed-23x24x9x9");
    golden_case("u8-poisson-16x16x12x12");
    golden_case("u16-masked-20x30x33x17");
}

/* The stream-level corrupted copies: the codec must refuse the damaged stream with the error the
 * golden README names (final state, bad selector, sparse order). */
static qem_stream_status golden_stream_status(const char *name, size_t stream)
{
    golden g;
    if (golden_open(name, &g) != 0)
        fail_msg("cannot read golden %s", name);
    const cJSON *chunk = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(g.hdr, "chunks"), 0);
    size_t o0, n0, o1, n1, o2, n2;
    arr(chunk, 0, &o0, &n0);
    arr(chunk, 1, &o1, &n1);
    arr(chunk, 2, &o2, &n2);
    size_t scans = jint(chunk, "scans"), nb = scans < 512 ? scans : 512;
    uint32_t a = le32(g.body + o1 + 4 * stream), e = le32(g.body + o1 + 4 * stream + 4);
    uint16_t out[512];
    qem_stream_status s = qem_stream_decode(g.body[o2 + stream], g.body + o0 + a, e - a, nb, 65535, out);
    golden_close(&g);
    return s;
}

static void golden_bad_streams(void **state)
{
    (void)state;
    assert_int_equal(golden_stream_status("u16-mixed-23x24x9x9.stream-resealed.bad.qem", 5),
                     QEM_STREAM_BAD_FINAL);
    assert_int_equal(golden_stream_status("u16-mixed-23x24x9x9.model-resealed.bad.qem", 0),
                     QEM_STREAM_BAD_SELECTOR);
    assert_int_equal(golden_stream_status("u16-mixed-23x24x9x9.sparse-order-resealed.bad.qem", 3),
                     QEM_STREAM_SPARSE_ORDER);
    /* and the intact file decodes those streams */
    assert_int_equal(golden_stream_status("u16-mixed-23x24x9x9.qem", 5), QEM_STREAM_OK);
    assert_int_equal(golden_stream_status("u16-mixed-23x24x9x9.qem", 3), QEM_STREAM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_equals_json),
        cmocka_unit_test(worked_examples),
        cmocka_unit_test(trace_model53),
        cmocka_unit_test(model_choice_examples),
        cmocka_unit_test(matches_spec_encoder),
        cmocka_unit_test(roundtrip_poisson),
        cmocka_unit_test(roundtrip_special),
        cmocka_unit_test(roundtrip_every_length),
        cmocka_unit_test(uint8_range),
        cmocka_unit_test(truncated_streams),
        cmocka_unit_test(garbled_streams),
        cmocka_unit_test(bad_selectors),
        cmocka_unit_test(length_mismatches),
        cmocka_unit_test(sparse_order),
        cmocka_unit_test(bad_initial_state),
        cmocka_unit_test(bound_adversarial),
        cmocka_unit_test(written_streams_at_most_2n),
        cmocka_unit_test(decode_add_matches),
        cmocka_unit_test(bit_width),
        cmocka_unit_test(spatial_words),
        cmocka_unit_test(pack_roundtrip),
        cmocka_unit_test(spatial_fields),
        cmocka_unit_test(field_map),
        cmocka_unit_test(golden_files),
        cmocka_unit_test(golden_bad_streams),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
