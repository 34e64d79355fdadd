/* blocks.h — a pass's blocks: the one walk over the logical blocks of BF pixels that the block-
 * summed passes share (the CPU's loss and band sums, the CUDA backend's phase and band sums).
 *
 * A pass sums this process's pixels [lo, hi) in segments (dist_segments: blocks of DIST_BLOCK; a
 * distributed G's range may also begin and end inside a block), each segment from zero into one
 * partial, and routes each partial: into the totals in block order (one process, rank 0's whole
 * blocks), kept for the chain of blocks (dist.h), or skipped (a pixel of a block begun on an
 * earlier rank: pix gives it once that block arrives). dist_blocks_end runs the chain. Whether
 * there is a chain at all, and every MPI message, stay in here: a pass reads only the route. */
#ifndef SSB4D_DIST_BLOCKS_H
#define SSB4D_DIST_BLOCKS_H
#include "dist/dist.h"

typedef struct {
    const ssb4d_dist *d; /* NULL: one process */
    size_t n;            /* G's pixels */
    dist_chain ch;
    dist_seg *segs;      /* the segments of the current range (room for [lo, hi)'s) */
    size_t nseg;
} dist_blocks;

/* Where segment i's partial goes. */
enum { DIST_SKIP = 0, DIST_TOTALS = 1, DIST_KEEP = 2 };

/* The blocks of pixels [lo, hi) of a G of n pixels (d NULL: one process), partials of len
 * doubles; kept ones in ops' memory with ctx (ops NULL: the host's, counted in mem), pix and
 * user for the head pixels. The current range is [lo, hi). st: the caller's failure so far (then
 * nothing is made and st comes back); a failure here or there still reaches dist_blocks_end's
 * agreement. Either way dist_blocks_free ends it. */
ssb4d_status dist_blocks_begin(dist_blocks *p, ssb4d_status st, const ssb4d_dist *d, size_t n, size_t lo, size_t hi,
                               size_t len, const dist_vec_ops *ops, void *ctx, dist_pix_fn pix, void *user,
                               ssb4d_mem *mem, ssb4d_err *err);
/* A sub-range [g0, g1) of [lo, hi) (a group of planes at hand) as the current range; returns its
 * segments' count (p->segs). */
size_t dist_blocks_range(dist_blocks *p, size_t g0, size_t g1);
/* Segment i's route (DIST_SKIP, DIST_TOTALS: the caller adds its partial into the totals, in
 * segment order; DIST_KEEP: dist_blocks_keep or dist_blocks_slot, in segment order). */
int dist_blocks_route(const dist_blocks *p, size_t i);
void dist_blocks_keep(dist_blocks *p, size_t i, const double *const *parts, const size_t *lens, size_t np);
double *dist_blocks_slot(dist_blocks *p, size_t i);
/* 1 when partials go through the chain (dist_blocks_end then reads and writes the totals). */
int dist_blocks_chained(const dist_blocks *p);
/* The chain, after every segment (every rank, whatever st is): totals (len doubles, in ops'
 * memory) become the one-process totals on every rank. One process: st. */
ssb4d_status dist_blocks_end(dist_blocks *p, ssb4d_status st, double *totals, ssb4d_err *err);
void dist_blocks_free(dist_blocks *p);
#endif
