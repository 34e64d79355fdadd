/* block.h — the logical block of BF pixels that decides every result's bits (docs/scale.md).
 *
 * The sums over BF pixels of the loss and of the band objective run in blocks of SSB_BLOCK pixels
 * in BF order: each block is summed from zero pixel after pixel, and the block partials are added
 * into the totals in block order (ssb_block_add). Threads take whole blocks, MPI ranks own whole
 * blocks (dist/, plan/), groups of G's planes span whole blocks, and the CUDA backend follows the
 * same order (src/cuda/), so the bits depend on none of them. Changing SSB_BLOCK changes results. */
#ifndef SSB4D_COMMON_BLOCK_H
#define SSB4D_COMMON_BLOCK_H
#include <stddef.h>

#define SSB_BLOCK 64

/* Blocks of n pixels: ceil(n / SSB_BLOCK). */
static inline size_t ssb_block_count(size_t n) { return (n + SSB_BLOCK - 1) / SSB_BLOCK; }

/* The fixed-order reduction's step: one block's partial (n values, summed from zero) into the
 * running totals, element by element (the next block's partial comes after it). */
static inline void ssb_block_add(double *restrict total, const double *restrict part, size_t n)
{
    for (size_t i = 0; i < n; i++)
        total[i] += part[i];
}
#endif
