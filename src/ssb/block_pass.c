/* block_pass.c — the CPU backend's walk over a group of blocks (block_pass.h). */
#include "ssb/block_pass.h"

#include <omp.h>

void ssb_block_pass(dist_blocks *bl, size_t g0, size_t g1, const ssb_block_fns *f)
{
    const size_t nseg = dist_blocks_range(bl, g0, g1);
#pragma omp parallel num_threads(f->nt)
    {
        const int t = omp_get_thread_num();
#pragma omp for ordered schedule(dynamic, 1)
        for (size_t i = 0; i < nseg; i++) {
            const int route = dist_blocks_route(bl, i);
            if (route == DIST_SKIP)
                continue; /* a block begun on an earlier rank: the pass's pix, once it arrives */
            f->sum(f->user, t, bl->segs[i].a, bl->segs[i].b);
#pragma omp ordered
            {
                if (route == DIST_TOTALS)
                    f->add(f->user, t);
                else {
                    const double *parts[2];
                    size_t lens[2];
                    const size_t np = f->parts(f->user, t, parts, lens);
                    dist_blocks_keep(bl, i, parts, lens, np);
                }
            }
        }
    }
}
