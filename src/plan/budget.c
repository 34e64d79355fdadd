/* budget.c — the words and the figure of a refusal by the memory budget (SPEC §9): "the job does
 * not fit in X: why; the smallest budget is Y", Y a budget that does fit when given back. */
#include "plan/budget.h"

#include <math.h>
#include <stdio.h>

const char *plan_size_text(char buf[32], size_t bytes, int up) { return ssb4d_size_text(buf, bytes, 0, up); }

size_t plan_smallest_budget(ssb4d_plan_input *in, const ssb4d_plan *p)
{
    size_t keep = in->memory_bytes, least = p->min_memory_bytes;
    ssb4d_plan q;
    for (int i = 0; i < 16; i++) {
        in->memory_bytes = least;
        if (ssb4d_plan_make(in, &q, NULL) || q.fits)
            break;
        least = q.min_memory_bytes > least ? q.min_memory_bytes : least + least / 64;
    }
    in->memory_bytes = keep;
    return least;
}
