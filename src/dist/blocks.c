/* blocks.c — a pass's blocks (blocks.h): the segments, their routes and the chain of dist.h. */
#include "dist/blocks.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>

ssb4d_status dist_blocks_begin(dist_blocks *p, ssb4d_status st, const ssb4d_dist *d, size_t n, size_t lo, size_t hi,
                               size_t len, const dist_vec_ops *ops, void *ctx, dist_pix_fn pix, void *user,
                               ssb4d_mem *mem, ssb4d_err *err)
{
    memset(p, 0, sizeof *p);
    p->d = d, p->n = n;
    p->ch.d = d, p->ch.len = len; /* a failure before dist_chain_init still reaches the agreement */
    if (st)
        return st;
    if (!(p->segs = malloc(dist_segments_cap(lo, hi) * sizeof *p->segs)))
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    p->nseg = dist_segments(n, lo, hi, p->segs);
    if (!d)
        return SSB4D_OK;
    return ops ? dist_chain_init_on(&p->ch, ops, ctx, d, len, p->segs, p->nseg, pix, user, err)
               : dist_chain_init(&p->ch, d, len, p->segs, p->nseg, pix, user, mem, err);
}

size_t dist_blocks_range(dist_blocks *p, size_t g0, size_t g1) { return p->nseg = dist_segments(p->n, g0, g1, p->segs); }

int dist_blocks_route(const dist_blocks *p, size_t i)
{
    const dist_seg *s = &p->segs[i];
    if (s->kind == DIST_PIX)
        return DIST_SKIP;
    return !p->d || dist_chain_direct(&p->ch, s->kind) ? DIST_TOTALS : DIST_KEEP;
}

void dist_blocks_keep(dist_blocks *p, size_t i, const double *const *parts, const size_t *lens, size_t np)
{
    dist_chain_keep(&p->ch, &p->segs[i], parts, lens, np);
}

double *dist_blocks_slot(dist_blocks *p, size_t i) { return dist_chain_slot(&p->ch, &p->segs[i]); }

int dist_blocks_chained(const dist_blocks *p) { return p->d != NULL; }

ssb4d_status dist_blocks_end(dist_blocks *p, ssb4d_status st, double *totals, ssb4d_err *err)
{
    return p->d ? dist_chain_run(&p->ch, st, totals, err) : st;
}

void dist_blocks_free(dist_blocks *p)
{
    dist_chain_free(&p->ch);
    free(p->segs);
    memset(p, 0, sizeof *p);
}
