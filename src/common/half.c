/* half.c — binary16 <-> binary32 arrays (see half.h for the rules). The portable path works on
 * the bit patterns with integer arithmetic only, so it does not depend on the floating-point
 * environment (rounding mode, FTZ/DAZ); it reproduces x86 F16C bit for bit, NaNs included. */
#include "common/half.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SSB4D_HALF_X86 1
#endif

/* ---- portable path ---------------------------------------------------------------------- */

static inline uint16_t f32_to_f16_bits(uint32_t x)
{
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t a = x & 0x7fffffffu;
    uint32_t h;
    if (a > 0x7f800000u) { /* NaN: top 10 fraction bits, quiet bit set */
        h = 0x7e00u | ((a >> 13) & 0x3ffu);
    } else if (a >= 0x477ff000u) { /* >= 65520 (ties to even go up to 2^16) and Inf */
        h = 0x7c00u;
    } else if (a >= 0x38800000u) { /* >= 2^-14: normal half; rebias the exponent by 127 - 15 */
        const uint32_t r = a - 0x38000000u;
        /* round to nearest even on the 13 dropped bits; a carry into the exponent is right */
        h = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
    } else if (a >= 0x33000000u) { /* [2^-25, 2^-14): subnormal half, units of 2^-24 */
        const uint32_t m = (a & 0x007fffffu) | 0x00800000u; /* value = m * 2^(e - 150) */
        const uint32_t shift = 126u - (a >> 23);            /* 14 .. 24 */
        /* 2^-25 exactly ties to 0; a result of 0x400 is the smallest normal, also right */
        h = (m + ((1u << (shift - 1)) - 1u) + ((m >> shift) & 1u)) >> shift;
    } else { /* below 2^-25 (float subnormals and zero included): ±0 */
        h = 0;
    }
    return (uint16_t)(sign | h);
}

static inline uint32_t f16_to_f32_bits(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = ((uint32_t)h >> 10) & 0x1fu;
    const uint32_t m = h & 0x3ffu;
    if (e == 0x1fu) /* Inf, or NaN: fraction on top, quiet bit set */
        return sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u);
    if (e != 0u) /* normal: rebias the exponent by 127 - 15 */
        return sign | ((e + 112u) << 23) | (m << 13);
    /* zero or subnormal: m * 2^-24, exact in float (m < 2^10, result a normal float or 0) */
    const float v = (float)m * 0x1p-24f;
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return sign | b;
}

void ssb_f32_to_f16_scalar(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, &in[i], sizeof x);
        out[i] = f32_to_f16_bits(x);
    }
}

void ssb_f16_to_f32_scalar(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t b = f16_to_f32_bits(in[i]);
        memcpy(&out[i], &b, sizeof b);
    }
}

/* ---- x86 F16C path ---------------------------------------------------------------------- */

#ifdef SSB4D_HALF_X86
__attribute__((target("f16c,avx"))) static void f32_to_f16_f16c(const float *in, uint16_t *out,
                                                                  size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(in + i), b = _mm256_loadu_ps(in + i + 8);
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
        _mm_storeu_si128((__m128i *)(out + i + 8), _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
    }
    if (i + 8 <= n) {
        const __m256 a = _mm256_loadu_ps(in + i);
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
        i += 8;
    }
    ssb_f32_to_f16_scalar(in + i, out + i, n - i);
}

__attribute__((target("f16c,avx"))) static void f16_to_f32_f16c(const uint16_t *in, float *out,
                                                                  size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(in + i));
        const __m128i b = _mm_loadu_si128((const __m128i *)(in + i + 8));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(a));
        _mm256_storeu_ps(out + i + 8, _mm256_cvtph_ps(b));
    }
    if (i + 8 <= n) {
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
        i += 8;
    }
    ssb_f16_to_f32_scalar(in + i, out + i, n - i);
}
#endif

/* Asked per call (a read of libgcc's CPU model after a cheap, idempotent init), so that there
 * is no mutable global of our own. AVX is checked as well: it says the OS saves the YMM state.
 * Clang (up to at least 14) does not know the "f16c" feature string, so there CPUID leaf 1
 * (ECX bit 29) is read instead. */
int ssb_half_uses_f16c(void)
{
#ifdef SSB4D_HALF_X86
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx"))
        return 0;
#if defined(__clang__)
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
#else
    return __builtin_cpu_supports("f16c");
#endif
#else
    return 0;
#endif
}

void ssb_f32_to_f16(const float *in, uint16_t *out, size_t n)
{
    if (n == 0) /* in and out may then be NULL: no pointer arithmetic on them */
        return;
#ifdef SSB4D_HALF_X86
    if (ssb_half_uses_f16c()) {
        f32_to_f16_f16c(in, out, n);
        return;
    }
#endif
    ssb_f32_to_f16_scalar(in, out, n);
}

void ssb_f16_to_f32(const uint16_t *in, float *out, size_t n)
{
    if (n == 0)
        return;
#ifdef SSB4D_HALF_X86
    if (ssb_half_uses_f16c()) {
        f16_to_f32_f16c(in, out, n);
        return;
    }
#endif
    ssb_f16_to_f32_scalar(in, out, n);
}
