/* refine.c — the public multislice refinement call (SPEC §13, docs/refine.md).
 *
 * STUB (issue 40 base): checks its arguments and returns the seed with empty images, so the
 * doors (session, command line, Python, viewer) can be built while the engine is written. The
 * engine replaces this file. */
#include "common/err.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ssb4d_refine_params_default(ssb4d_refine_params *p)
{
    memset(p, 0, sizeof *p);
    p->thickness_nm = NAN;
    p->thickness_range_nm[0] = 1.0;
    p->thickness_range_nm[1] = 30.0;
    p->iterations = 30;
    p->loss = SSB4D_REFINE_POISSON;
    p->refine_aberrations = 1;
    p->refine_tilt = 1;
    p->refine_thickness = 1;
    p->modes = 1;
    p->seed = 1;
}

void ssb4d_refine_result_free(ssb4d_refine_result *r)
{
    if (!r)
        return;
    free(r->history);
    free(r->slice_phase);
    free(r->projected_phase);
    free(r->probe);
    memset(r, 0, sizeof *r);
}

ssb4d_status ssb4d_refine(ssb4d_source *src, const ssb4d_calibration *cal, const ssb4d_geometry *g,
                          const size_t region[4], const ssb4d_aberrations *ab, const ssb4d_thick *thick,
                          const ssb4d_refine_params *p, ssb4d_refine_result *r, ssb4d_err *err)
{
    memset(r, 0, sizeof *r);
    if (!src || !cal || !g || !ab || !p)
        return ssb_fail(err, SSB4D_EINVAL, "refine: a required argument is NULL");
    size_t sh[4];
    ssb4d_source_shape(src, sh);
    size_t reg[4] = {0, sh[0], 0, sh[1]};
    if (region && (region[0] | region[1] | region[2] | region[3]))
        memcpy(reg, region, sizeof reg);
    if (!(reg[0] < reg[1] && reg[1] <= sh[0] && reg[2] < reg[3] && reg[3] <= sh[1]))
        return ssb_fail(err, SSB4D_EINVAL, "refine: the region is outside the %zux%zu scan", sh[0], sh[1]);
    r->ab = *ab;
    r->geom = *g;
    r->phi12_probe_deg = ssb4d_phi12_to_probe(g, ab->phi_deg[SSB4D_C12]);
    if (thick)
        memcpy(r->tilt_mrad, thick->tilt_mrad, sizeof r->tilt_mrad);
    ssb4d_vector_to_probe(g, r->tilt_mrad, r->tilt_probe_mrad);
    r->thickness_nm = !isnan(p->thickness_nm) ? p->thickness_nm
                                               : 0.5 * (p->thickness_range_nm[0] + p->thickness_range_nm[1]);
    r->slices = p->slices > 0 ? p->slices : 1;
    memcpy(r->region, reg, sizeof reg);
    r->obj_shape[0] = reg[1] - reg[0];
    r->obj_shape[1] = reg[3] - reg[2];
    r->obj_pixel_A[0] = g->scan_step_A[0];
    r->obj_pixel_A[1] = g->scan_step_A[1];
    r->probe_shape[0] = sh[2];
    r->probe_shape[1] = sh[3];
    size_t n = r->obj_shape[0] * r->obj_shape[1];
    r->slice_phase = calloc((size_t)r->slices * n, sizeof(float));
    r->projected_phase = calloc(n, sizeof(float));
    r->probe = calloc(2 * sh[2] * sh[3], sizeof(float));
    r->history = calloc(1, sizeof(double));
    if (!r->slice_phase || !r->projected_phase || !r->probe || !r->history) {
        ssb4d_refine_result_free(r);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for the refinement's images");
    }
    r->n_history = 1;
    r->nll = r->nll_expected = NAN;
    snprintf(r->warning, sizeof r->warning, "the refinement engine is not built yet (stub)");
    return SSB4D_OK;
}
