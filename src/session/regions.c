/* regions.c — region grids and the 180° branch of a set of region fits (include/ssb4d.h,
 * docs/fit.md "The branch from the thinnest region"): what `ssb4d fit-regions`, Python's
 * Session.fit_regions and the viewer's Fit Regions share. Only the session's public calls (and
 * handle_internal.h's region parameters): a region's fit is ssb4d_session_fit_region. */
#include "common/err.h"
#include "session/handle_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ssb4d_grid_rect(const size_t scan[2], size_t rows, size_t cols, size_t i, size_t rect[4])
{
    size_t hr = scan[0] / rows, hc = scan[1] / cols, a = i / cols, b = i % cols;
    rect[0] = a * hr, rect[1] = a + 1 == rows ? scan[0] : (a + 1) * hr;
    rect[2] = b * hc, rect[3] = b + 1 == cols ? scan[1] : (b + 1) * hc;
}

/* The region whose 180° branch is settled most clearly (SPEC §6.3): the largest |skewness| among
 * the confident fits (a searched rotation's fit is confident only with |skewness| >=
 * SSB4D_FIT_SKEW_SETTLED and a determined rotation and handedness); n when none is. */
static size_t settling_region(const ssb4d_fit_result *results, size_t n)
{
    size_t best = n;
    for (size_t i = 0; results && i < n; i++)
        if (results[i].confident && fabs(results[i].skewness) >= SSB4D_FIT_SKEW_SETTLED &&
            (best == n || fabs(results[i].skewness) > fabs(results[best].skewness)))
            best = i; /* ties: the first, so the same fits settle on the same region */
    return best;
}

int ssb4d_session_branch_to_settle(const ssb4d_session *s, const ssb4d_fit_params *p, size_t n)
{
    ssb4d_fit_params fp;
    session_region_fit_params(s, p, &fp);
    return n >= 2 && !fp.rotation_given && fp.branch_check;
}

ssb4d_status ssb4d_session_settle_branch(ssb4d_session *s, const size_t *rects, size_t n, const ssb4d_fit_params *p,
                                         ssb4d_fit_result *results, size_t *from, ssb4d_err *err)
{
    if (from)
        *from = n;
    if (!s || (n && (!rects || !results)))
        return ssb_fail(err, SSB4D_EINVAL, "settle branch: missing %s", !s ? "session" : !rects ? "rectangles"
                                                                                                  : "results");
    if (!ssb4d_session_branch_to_settle(s, p, n))
        return SSB4D_OK; /* nothing to settle: one region, a held rotation, or no branch check */
    size_t b = settling_region(results, n);
    if (b == n)
        return SSB4D_OK; /* no region settles it: each keeps its own */
    ssb4d_status st = ssb4d_session_set_rotation(s, results[b].geom.rotation_deg, err);
    if (!st)
        st = ssb4d_session_set_flip(s, results[b].geom.flip, err);
    if (st)
        return st;
    if (from)
        *from = b;
    for (size_t i = 0; i < n && !st; i++) {
        if (i == b)
            continue;
        ssb4d_fit_result_free(&results[i]);
        st = ssb4d_session_fit_region(s, rects + 4 * i, p, &results[i], err);
    }
    return st;
}

ssb4d_status ssb4d_session_fit_regions(ssb4d_session *s, size_t rows, size_t cols, const ssb4d_fit_params *p,
                                       int rotation_per_region, ssb4d_fit_result *results, size_t (*rects)[4],
                                       size_t *branch_region, ssb4d_err *err)
{
    size_t shape[4];
    ssb4d_session_shape(s, shape);
    size_t n = rows * cols;
    if (branch_region)
        *branch_region = n;
    if (!rows || !cols || rows > shape[0] || cols > shape[1])
        return ssb_fail(err, SSB4D_EINVAL, "a grid of %zux%zu regions does not fit a %zux%zu scan", rows, cols,
                        shape[0], shape[1]);
    size_t(*q)[4] = rects ? rects : calloc(n, sizeof *q);
    if (!q)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    memset(results, 0, n * sizeof *results);
    ssb4d_status st = SSB4D_OK;
    for (size_t i = 0; i < n && !st; i++) {
        ssb4d_grid_rect(shape, rows, cols, i, q[i]);
        st = ssb4d_session_fit_region(s, q[i], p, &results[i], err);
    }
    if (!st && !rotation_per_region)
        st = ssb4d_session_settle_branch(s, &q[0][0], n, p, results, branch_region, err);
    if (st) {
        for (size_t i = 0; i < n; i++)
            ssb4d_fit_result_free(&results[i]);
        if (branch_region)
            *branch_region = n;
    }
    if (q != rects)
        free(q);
    return st;
}
