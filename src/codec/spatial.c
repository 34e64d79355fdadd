/* spatial.c — the spatial index of .qem (qem-format.md §8): exact per-scan sums of 8x8 and
 * 32x32 detector tiles, bit-packed LSB first at the stream's own width. */
#include "codec/codec.h"

#include <string.h>

unsigned qem_bit_width(uint32_t max) { return max ? 32u - (unsigned)__builtin_clz(max) : 0u; }

size_t qem_spatial_words(size_t n, unsigned w) { return (n * w + 31) / 32; }

void qem_spatial_pack(const uint32_t *v, size_t n, unsigned w, uint32_t *words)
{
    size_t nw = qem_spatial_words(n, w);
    memset(words, 0, nw * sizeof *words);
    if (w == 0)
        return;
    uint64_t mask = w == 32 ? 0xffffffffu : ((1u << w) - 1u);
    for (size_t i = 0; i < n; i++) {
        size_t bit = i * w, k = bit / 32;
        unsigned sh = (unsigned)(bit % 32);
        uint64_t x = ((uint64_t)v[i] & mask) << sh; /* may straddle into the next word */
        words[k] |= (uint32_t)x;
        if (sh + w > 32)
            words[k + 1] |= (uint32_t)(x >> 32);
    }
}

void qem_spatial_unpack(const uint32_t *words, size_t n, unsigned w, uint32_t *v)
{
    if (w == 0) {
        memset(v, 0, n * sizeof *v);
        return;
    }
    uint64_t mask = w == 32 ? 0xffffffffu : ((1u << w) - 1u);
    for (size_t i = 0; i < n; i++) {
        size_t bit = i * w, k = bit / 32;
        unsigned sh = (unsigned)(bit % 32);
        uint64_t x = words[k];
        if (sh + w > 32)
            x |= (uint64_t)words[k + 1] << 32;
        v[i] = (uint32_t)((x >> sh) & mask);
    }
}

size_t qem_spatial_fields(size_t det_rows, size_t det_cols)
{
    return ((det_rows + 7) / 8) * ((det_cols + 7) / 8) + ((det_rows + 31) / 32) * ((det_cols + 31) / 32);
}

void qem_spatial_field_map(size_t det_rows, size_t det_cols, uint32_t *field8, uint32_t *field32)
{
    size_t t8c = (det_cols + 7) / 8, n8 = ((det_rows + 7) / 8) * t8c, t32c = (det_cols + 31) / 32;
    for (size_t r = 0; r < det_rows; r++)
        for (size_t c = 0; c < det_cols; c++) {
            size_t k = r * det_cols + c;
            field8[k] = (uint32_t)((r / 8) * t8c + c / 8);
            field32[k] = (uint32_t)(n8 + (r / 32) * t32c + c / 32);
        }
}
