/* block_pass.h — the CPU backend's walk over one group of blocks (dist/blocks.h): threads sum the
 * segments from zero in parallel, each into its own partial, and an ordered section routes the
 * partials in segment order (into the totals, or kept for the chain). The loss's and the band
 * objective's passes share it; what they sum is theirs (the callbacks). */
#ifndef SSB4D_SSB_BLOCK_PASS_H
#define SSB4D_SSB_BLOCK_PASS_H
#include "dist/blocks.h"
#include "gbuild/gbuild.h"

typedef struct {
    void *user;
    int nt; /* threads */
    /* thread t's partial of pixels [a, b), from zero, in its own scratch */
    void (*sum)(void *user, int t, size_t a, size_t b);
    /* thread t's partial into the totals (called in segment order) */
    void (*add)(void *user, int t);
    /* thread t's partial as at most two pieces to keep (returns how many) */
    size_t (*parts)(void *user, int t, const double *parts[2], size_t lens[2]);
} ssb_block_fns;

/* The segments of [g0, g1) (dist_blocks_range), summed and routed. */
void ssb_block_pass(dist_blocks *bl, size_t g0, size_t g1, const ssb_block_fns *f);

/* G's blocks: this process's pixels [G_lo, G_hi), partials of len doubles on the host. */
static inline ssb4d_status G_blocks_begin(dist_blocks *bl, ssb4d_status st, const struct ssb4d_G *G, size_t len,
                                          dist_pix_fn pix, void *user, ssb4d_mem *mem, ssb4d_err *err)
{
    return dist_blocks_begin(bl, st, G->dist, G->n_bf, G_lo(G), G_hi(G), len, NULL, NULL, pix, user, mem, err);
}
#endif
