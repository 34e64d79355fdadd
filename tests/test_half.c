/* test_half.c — binary16 <-> binary32 conversion (src/common/half.c), against references written
 * here from the IEEE 754 definition rather than from the implementation:
 *
 *  (a) all 65536 half bit patterns -> float -> half come back identical, except signalling NaNs,
 *      which come back quietened (h | 0x0200: same sign, same payload, quiet bit set) — the
 *      documented rule of half.h, the one x86 F16C follows; both paths keep the payload, so NaN
 *      payloads are compared exactly everywhere below;
 *  (b) half -> float of every pattern equals a decoder built on ldexp (NaN: sign | 0x7fc00000 |
 *      fraction << 13);
 *  (c) float -> half equals an encoder that works in double: bisection over the sorted list of
 *      the non-negative half values (with 2^16 appended as the "next value" that the unbounded
 *      exponent would give, so that overflow falls out of the same rule), nearest wins and ties
 *      go to the even pattern. Inputs: every half value as a float, every midpoint between
 *      adjacent halves and the floats just below and above it, 2 Mi random float bit patterns,
 *      2 Mi random floats with exponents in the half range, and special values;
 *  (d) the portable path and the dispatched path (F16C where the CPU has it) agree bit for bit
 *      on all of the above, and on lengths 0..37 at several misalignments (tails), without
 *      writing past the end.
 * A plain asserting program: CHECK is always on (also under NDEBUG). */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"

#define CHECK(c)                                                                                  \
    do {                                                                                          \
        if (!(c)) {                                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);                 \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static uint32_t fbits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float bitsf(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    CHECK(p != NULL);
    return p;
}

static uint64_t rng_next(uint64_t *s) /* SplitMix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- references ------------------------------------------------------------------------- */

static int half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

/* Value of a non-NaN half, from the definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals
 * 2^-14 * m/1024, e == 31 infinity. */
static double ref_decode(uint16_t h)
{
    const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 31)
        v = INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -24);
    else
        v = ldexp((double)(1024 + m), e - 25);
    return s ? -v : v;
}

/* The expected float bits of a half (NaN: quiet, fraction on top). */
static uint32_t ref_decode_bits(uint16_t h)
{
    if (half_is_nan(h))
        return ((uint32_t)(h & 0x8000u) << 16) | 0x7fc00000u | ((uint32_t)(h & 0x3ffu) << 13);
    const float f = (float)ref_decode(h); /* exact: every half is a float */
    CHECK((double)f == ref_decode(h) || isinf(f));
    return fbits(f);
}

/* halfval[i] = value of half pattern i for i < 0x7c00; halfval[0x7c00] = 2^16. */
static double halfval[0x7c01];

static void ref_init(void)
{
    for (uint32_t i = 0; i < 0x7c00u; i++)
        halfval[i] = ref_decode((uint16_t)i);
    halfval[0x7c00] = 65536.0;
    for (uint32_t i = 0; i < 0x7c00u; i++)
        CHECK(halfval[i] < halfval[i + 1]);
}

static uint16_t ref_encode(float x)
{
    const uint32_t xb = fbits(x);
    const uint16_t sign = (uint16_t)((xb >> 16) & 0x8000u);
    if (isnan(x))
        return (uint16_t)(sign | 0x7e00u | ((xb >> 13) & 0x3ffu));
    const double ax = fabs((double)x);
    if (ax >= 65536.0)
        return (uint16_t)(sign | 0x7c00u);
    uint32_t lo = 0, hi = 0x7c00u; /* halfval[lo] <= ax < halfval[hi] */
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (halfval[mid] <= ax)
            lo = mid;
        else
            hi = mid;
    }
    uint32_t r;
    if (ax == halfval[lo]) {
        r = lo;
    } else {
        const double midpoint = 0.5 * (halfval[lo] + halfval[hi]); /* exact (12 bits) */
        if (ax < midpoint)
            r = lo;
        else if (ax > midpoint)
            r = hi;
        else
            r = (lo & 1u) ? hi : lo;
    }
    return (uint16_t)(sign | r); /* r == 0x7c00: overflow to Inf */
}

/* ---- test vectors ----------------------------------------------------------------------- */

typedef struct {
    float *v;
    size_t n, cap;
} vec;

static void push(vec *a, float f)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 1024;
        float *p = realloc(a->v, a->cap * sizeof *p);
        CHECK(p != NULL);
        a->v = p;
    }
    a->v[a->n++] = f;
}

static void push_bits(vec *a, uint32_t b) { push(a, bitsf(b)); }

static void push_pm(vec *a, double d) /* d and -d, d exactly a float */
{
    const float f = (float)d;
    CHECK((double)f == d);
    push(a, f);
    push(a, -f);
}

static size_t build_vectors(vec *a, size_t *counts)
{
    size_t n0 = a->n;
    /* every finite half value, both signs */
    for (uint32_t i = 0; i < 0x7c00u; i++)
        push_pm(a, halfval[i]);
    counts[0] = a->n - n0;
    n0 = a->n;
    /* every midpoint between adjacent halves (65520 included) and its float neighbours */
    for (uint32_t i = 0; i < 0x7c00u; i++) {
        const double mid = 0.5 * (halfval[i] + halfval[i + 1]);
        const float fm = (float)mid;
        CHECK((double)fm == mid);
        push_pm(a, mid);
        push_pm(a, nextafterf(fm, 0.0f));
        push_pm(a, nextafterf(fm, INFINITY));
    }
    counts[1] = a->n - n0;
    n0 = a->n;
    /* random bit patterns, then random floats with exponents around the half range */
    uint64_t s = 0x5eed0f16c0ffeeull;
    for (size_t i = 0; i < (2u << 20); i++)
        push_bits(a, (uint32_t)(rng_next(&s) >> 32));
    for (size_t i = 0; i < (2u << 20); i++) {
        const uint64_t r = rng_next(&s);
        const uint32_t e = 100u + (uint32_t)((r >> 32) % 45u); /* 2^-27 .. 2^17 */
        push_bits(a, ((uint32_t)(r >> 63) << 31) | (e << 23) | ((uint32_t)r & 0x7fffffu));
    }
    counts[2] = a->n - n0;
    n0 = a->n;
    /* special values */
    const uint32_t special_bits[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,         /* ±0, ±Inf */
        0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0xffffffffu,         /* quiet NaNs */
        0x7f800001u, 0xff800001u, 0x7fa00000u, 0x7f802000u,         /* signalling NaNs */
        0x7fbfe000u, 0x7fc01fffu, 0x00000001u, 0x80000001u,         /* payloads; float subnormal */
        0x007fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu,         /* FLT_MIN, FLT_MAX */
        0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u,         /* 65504, around 65520 */
        0x47800000u, 0xc77ff000u, 0xc77fefffu, 0x33000000u,         /* 65536, -65520, 2^-25 */
        0x33000001u, 0x32ffffffu, 0x33800000u, 0x32800000u,         /* around 2^-25, 2^-24, 2^-26 */
    };
    for (size_t i = 0; i < sizeof special_bits / sizeof special_bits[0]; i++) {
        push_bits(a, special_bits[i]);
        push_bits(a, special_bits[i] ^ 0x80000000u);
    }
    const double special_vals[] = {
        65504.0, 65519.99, 65520.0, 65536.0, 1e10, 0x1p-24, 0x1p-25, 0x1p-26, 3 * 0x1p-26,
        3 * 0x1p-25, 5 * 0x1p-26, 0x1p-14, 0x1p-14 - 0x1p-25, 0x1p-14 - 0x1p-24,
        0x1p-14 - 3 * 0x1p-26, 1.0, 1.0 + 0x1p-11, 1.0 + 3 * 0x1p-11, 1.0 + 0x1p-11 + 0x1p-20,
        2049.0, 2051.0, 0.1, 1.0 / 3.0, 3.14159265358979, 1e-5, 6e-8, 3e-8, 2.9802322e-8};
    for (size_t i = 0; i < sizeof special_vals / sizeof special_vals[0]; i++) {
        const float f = (float)special_vals[i]; /* the float nearest, not necessarily exact */
        push(a, f);
        push(a, -f);
        push(a, nextafterf(f, 0.0f));
        push(a, nextafterf(f, INFINITY));
    }
    counts[3] = a->n - n0;
    return a->n;
}

/* ---- checks ----------------------------------------------------------------------------- */

static void check_f32_to_f16(const vec *a, int have_f16c)
{
    uint16_t *disp = xmalloc(a->n * sizeof *disp);
    uint16_t *scal = xmalloc(a->n * sizeof *scal);
    ssb_f32_to_f16(a->v, disp, a->n);
    ssb_f32_to_f16_scalar(a->v, scal, a->n);
    size_t bad = 0;
    for (size_t i = 0; i < a->n; i++) {
        const uint16_t want = ref_encode(a->v[i]);
        if (scal[i] != want || disp[i] != want) {
            if (bad++ < 20)
                fprintf(stderr, "f32->f16 %08" PRIx32 " (%.9g): want %04x scalar %04x %s %04x\n",
                        fbits(a->v[i]), (double)a->v[i], want, scal[i],
                        have_f16c ? "f16c" : "dispatched", disp[i]);
        }
    }
    CHECK(bad == 0);
    free(disp);
    free(scal);
}

static void check_all_halves(int have_f16c)
{
    const size_t n = 65536;
    uint16_t *h = xmalloc(n * sizeof *h), *back_d = xmalloc(n * sizeof *h),
             *back_s = xmalloc(n * sizeof *h);
    float *fd = xmalloc(n * sizeof *fd), *fs = xmalloc(n * sizeof *fs);
    for (size_t i = 0; i < n; i++)
        h[i] = (uint16_t)i;
    ssb_f16_to_f32(h, fd, n);
    ssb_f16_to_f32_scalar(h, fs, n);
    ssb_f32_to_f16(fd, back_d, n);
    ssb_f32_to_f16_scalar(fs, back_s, n);
    size_t bad = 0, nans = 0;
    for (size_t i = 0; i < n; i++) {
        /* (b) decoder: exact values, signed zeros, NaN sign and payload */
        const uint32_t want = ref_decode_bits(h[i]);
        if (fbits(fd[i]) != want || fbits(fs[i]) != want) {
            if (bad++ < 20)
                fprintf(stderr, "f16->f32 %04x: want %08" PRIx32 " scalar %08" PRIx32
                        " %s %08" PRIx32 "\n", h[i], want, fbits(fs[i]),
                        have_f16c ? "f16c" : "dispatched", fbits(fd[i]));
        }
        /* (a) round trip; NaNs stay NaN with their sign, signalling ones get the quiet bit */
        const uint16_t rt = half_is_nan(h[i]) ? (uint16_t)(h[i] | 0x0200u) : h[i];
        if (back_d[i] != rt || back_s[i] != rt) {
            if (bad++ < 20)
                fprintf(stderr, "round trip %04x: want %04x scalar %04x %s %04x\n", h[i], rt,
                        back_s[i], have_f16c ? "f16c" : "dispatched", back_d[i]);
        }
        if (half_is_nan(h[i])) {
            nans++;
            CHECK(isnan(fd[i]) && isnan(fs[i]));
            CHECK(!!signbit(fd[i]) == !!(h[i] & 0x8000u));
            CHECK(half_is_nan(back_d[i]) && (back_d[i] & 0x8000u) == (h[i] & 0x8000u));
        } else {
            CHECK((double)fd[i] == ref_decode(h[i]));
            CHECK(!!signbit(fd[i]) == !!(h[i] & 0x8000u));
        }
    }
    CHECK(bad == 0);
    CHECK(nans == 2 * 1023);
    free(h);
    free(back_d);
    free(back_s);
    free(fd);
    free(fs);
}

/* (d) lengths 0..37 at offsets 0..3 into the vectors; nothing is written past n. */
static size_t check_tails(const vec *a)
{
    enum { MAXN = 37, OFFS = 4, GUARD = 8 };
    size_t checked = 0;
    uint16_t hd[MAXN + GUARD], hs[MAXN + GUARD], hin[OFFS + MAXN];
    float fd[MAXN + GUARD], fs[MAXN + GUARD];
    uint64_t s = 0x7a11ull;
    for (int rep = 0; rep < 64; rep++) {
        const size_t base = (size_t)(rng_next(&s) % (a->n - OFFS - MAXN));
        for (size_t i = 0; i < OFFS + MAXN; i++)
            hin[i] = (uint16_t)rng_next(&s);
        for (size_t off = 0; off < OFFS; off++) {
            for (size_t n = 0; n <= MAXN; n++) {
                memset(hd, 0xa5, sizeof hd);
                memset(hs, 0x5a, sizeof hs);
                ssb_f32_to_f16(a->v + base + off, hd, n);
                ssb_f32_to_f16_scalar(a->v + base + off, hs, n);
                CHECK(memcmp(hd, hs, n * sizeof *hd) == 0);
                for (size_t i = n; i < MAXN + GUARD; i++)
                    CHECK(hd[i] == 0xa5a5u && hs[i] == 0x5a5au);
                for (size_t i = 0; i < n; i++)
                    CHECK(hd[i] == ref_encode(a->v[base + off + i]));

                memset(fd, 0xa5, sizeof fd);
                memset(fs, 0x5a, sizeof fs);
                ssb_f16_to_f32(hin + off, fd, n);
                ssb_f16_to_f32_scalar(hin + off, fs, n);
                CHECK(memcmp(fd, fs, n * sizeof *fd) == 0);
                for (size_t i = n; i < MAXN + GUARD; i++)
                    CHECK(fbits(fd[i]) == 0xa5a5a5a5u && fbits(fs[i]) == 0x5a5a5a5au);
                for (size_t i = 0; i < n; i++)
                    CHECK(fbits(fd[i]) == ref_decode_bits(hin[off + i]));
                checked += 2 * n;
            }
        }
    }
    /* n == 0 with NULL pointers is allowed */
    ssb_f32_to_f16(NULL, NULL, 0);
    ssb_f16_to_f32(NULL, NULL, 0);
    return checked;
}

/* A few hand-computed results, so that the reference itself is pinned down. */
static void check_known(void)
{
    static const struct {
        uint32_t f;
        uint16_t h;
    } known[] = {
        {0x00000000u, 0x0000}, {0x80000000u, 0x8000}, {0x3f800000u, 0x3c00}, /* 0, -0, 1 */
        {0x477fe000u, 0x7bff}, {0x477ff000u, 0x7c00}, {0x477fefffu, 0x7bff}, /* 65504, 65520 */
        {0x7f800000u, 0x7c00}, {0xff800000u, 0xfc00}, {0x7fc00000u, 0x7e00}, /* Inf, NaN */
        {0x33800000u, 0x0001}, {0x33000000u, 0x0000}, {0x33000001u, 0x0001}, /* 2^-24, 2^-25 */
        {0x33400000u, 0x0001}, /* 3*2^-26 = 0.75 * 2^-24: nearest 1 */
        {0x33a00000u, 0x0001}, /* 1.25 * 2^-24: nearest 1 */
        {0x33c00000u, 0x0002}, /* 1.5 * 2^-24: tie between 1 and 2: even 2 */
        {0x34200000u, 0x0002}, /* 2.5 * 2^-24: tie between 2 and 3: even 2 */
        {0x387fc000u, 0x03ff}, /* largest subnormal half */
        {0x387fe000u, 0x0400}, /* midpoint to smallest normal: tie, even 0x400 */
        {0x38800000u, 0x0400}, {0x3f801000u, 0x3c00}, {0x3f803000u, 0x3c02}, /* 2^-14, ties */
        {0xc77ff000u, 0xfc00}, {0x00000001u, 0x0000}, {0x80000001u, 0x8000},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const float f = bitsf(known[i].f);
        uint16_t d, s;
        ssb_f32_to_f16(&f, &d, 1);
        ssb_f32_to_f16_scalar(&f, &s, 1);
        if (ref_encode(f) != known[i].h || d != known[i].h || s != known[i].h) {
            fprintf(stderr, "known %08" PRIx32 ": want %04x ref %04x dispatched %04x scalar %04x\n",
                    known[i].f, known[i].h, ref_encode(f), d, s);
            CHECK(0);
        }
    }
    CHECK(ref_decode(0x0001) == 0x1p-24 && ref_decode(0x7bff) == 65504.0 &&
          ref_decode(0x3c00) == 1.0 && ref_decode(0xc000) == -2.0 && ref_decode(0x0400) == 0x1p-14);
}

int main(void)
{
    const int have_f16c = ssb_half_uses_f16c();
    ref_init();
    check_known();
    check_all_halves(have_f16c);

    vec a = {0};
    size_t counts[4];
    const size_t nvec = build_vectors(&a, counts);
    check_f32_to_f16(&a, have_f16c);
    const size_t ntail = check_tails(&a);
    free(a.v);

    printf("test_half: f16->f32 and round trip: 65536 half patterns; f32->f16: %zu vectors "
           "(%zu half values, %zu midpoints and neighbours, %zu random, %zu special); "
           "tails 0..37: %zu values\n",
           nvec, counts[0], counts[1], counts[2], counts[3], ntail);
    printf("test_half: F16C path exercised: %s (dispatched vs scalar compared on every vector)\n",
           have_f16c ? "yes" : "no (CPU without F16C: dispatched == scalar)");
    printf("test_half: OK\n");
    return 0;
}
