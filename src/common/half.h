/* half.h — IEEE 754 binary16 ("half") <-> binary32 conversion of arrays.
 *
 * Why: the slider previews keep a resident copy of a big complex64 array; stored as halves that
 * copy takes half the memory (and half the bandwidth when it is read back). float32 -> half rounds
 * to nearest, ties to even; half -> float32 is exact (every half value is a float). Conversion is
 * done with F16C on x86-64 CPUs that have it (chosen at run time, per call) and with a portable
 * integer implementation otherwise and for the tail elements; the two give bit-identical results
 * for every input, so the previews are the same on every machine.
 *
 * float32 -> half:
 *   finite |x| >= 65520 (the midpoint between 65504 and 2^16) -> ±Inf; halves' subnormal range is
 *   rounded correctly (2^-25 exactly ties to ±0; anything above it to ±2^-24); smaller -> ±0;
 *   the sign of zero is kept; ±Inf -> ±Inf.
 * NaN (both directions, as x86 F16C does): the result is a quiet NaN with the same sign; the
 *   payload is kept as far as it fits (float -> half keeps the top 10 fraction bits, then sets
 *   the quiet bit 0x0200; half -> float puts the 10 fraction bits on top and sets the quiet bit
 *   0x00400000). So a signalling half NaN h comes back from a round trip as h | 0x0200 and every
 *   other half bit pattern (quiet NaNs included) round-trips unchanged.
 *
 * in and out must not overlap. n == 0 is allowed (pointers are then not used). */
#ifndef SSB4D_COMMON_HALF_H
#define SSB4D_COMMON_HALF_H
#include <stddef.h>
#include <stdint.h>

void ssb_f32_to_f16(const float *in, uint16_t *out, size_t n);
void ssb_f16_to_f32(const uint16_t *in, float *out, size_t n);

/* For tests: the portable paths alone, and whether the dispatched functions above use F16C on
 * this CPU (1) or the portable path (0). */
void ssb_f32_to_f16_scalar(const float *in, uint16_t *out, size_t n);
void ssb_f16_to_f32_scalar(const uint16_t *in, float *out, size_t n);
int ssb_half_uses_f16c(void);
#endif
