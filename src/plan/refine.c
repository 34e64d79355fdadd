/* refine.c — the multislice refinement's memory plan (ssb4d_refine_plan_make; `ssb4d plan
 * --refine`, docs/refine.md "Data and memory"): the tracked bytes ssb4d_refine will count, from
 * the shapes alone. The refinement counts three things in the memory context: the region's
 * patterns (batch.c, held throughout), one region row of frames while they load (freed before
 * the solver starts), and the solver's workspace as one block (refine_workspace_bytes). The
 * choices of 0s (slices, bin, batch, threads) and the grids are refine.c's and solver.c's;
 * tests/test_refine_plan.c checks the prediction against a run's tracked peak, to the byte. */
#include "common/err.h"
#include "common/parallel.h"
#include "refine/solver.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The binned pixels inside the model grid's ±half-width around the BF centre that hold no flagged
 * pixel: batch.c's rule, counted without reading any frame. */
static size_t valid_pixels(const size_t sh[4], const ssb4d_geometry *g, const ssb4d_calibration *cal, int bin,
                           int nr, int nc, ssb4d_err *err, ssb4d_status *st)
{
    size_t b = (size_t)bin, dr = sh[2] / b, dc = sh[3] / b;
    long ci[2];
    for (int a = 0; a < 2; a++)
        ci[a] = (long)floor((g->centre_px[a] - 0.5 * (double)(b - 1)) / (double)b + 0.5);
    unsigned char *bad = calloc(dr * dc, 1);
    if (!bad) {
        *st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        return 0;
    }
    for (size_t f = 0; cal && f < cal->n_flagged; f++) {
        size_t r = cal->flagged[f] / sh[3], c = cal->flagged[f] % sh[3];
        if (r / b < dr && c / b < dc)
            bad[(r / b) * dc + c / b] = 1;
    }
    long hr = nr / 2, hc = nc / 2;
    size_t nv = 0;
    for (size_t i = 0; i < dr; i++)
        for (size_t j = 0; j < dc; j++) {
            long s0 = (long)i - ci[0], s1 = (long)j - ci[1];
            nv += s0 >= -hr && s0 < nr - hr && s1 >= -hc && s1 < nc - hc && !bad[i * dc + j];
        }
    free(bad);
    *st = SSB4D_OK;
    return nv;
}

ssb4d_status ssb4d_refine_plan_make(const size_t shape[4], const size_t region[4], const ssb4d_geometry *g,
                                    const ssb4d_calibration *cal, const ssb4d_refine_params *p,
                                    ssb4d_refine_plan *out, ssb4d_err *err)
{
    if (!out)
        return ssb_fail(err, SSB4D_EINVAL, "refine plan: a required argument is NULL");
    memset(out, 0, sizeof *out);
    if (!shape || !g || !p)
        return ssb_fail(err, SSB4D_EINVAL, "refine plan: a required argument is NULL");
    for (int a = 0; a < 4; a++)
        if (shape[a] < 1 || shape[a] > 1000000)
            return ssb_fail(err, SSB4D_EINVAL, "refine plan: the shape's sides must be 1..1000000");
    size_t reg[4] = {0, shape[0], 0, shape[1]};
    if (region && (region[0] | region[1] | region[2] | region[3]))
        memcpy(reg, region, sizeof reg);
    if (!(reg[0] < reg[1] && reg[1] <= shape[0] && reg[2] < reg[3] && reg[3] <= shape[1]))
        return ssb_fail(err, SSB4D_EINVAL, "refine plan: the region is outside the %zux%zu scan", shape[0], shape[1]);
    if (!(g->kv > 0) || !(g->det_sampling_mrad[0] > 0) || !(g->det_sampling_mrad[1] > 0) ||
        !(g->scan_step_A[0] > 0) || !(g->scan_step_A[1] > 0) || !isfinite(g->rotation_deg) ||
        !isfinite(g->centre_px[0]) || !isfinite(g->centre_px[1]))
        return ssb_fail(err, SSB4D_EINVAL, "refine plan: the geometry needs kV, sampling, step, rotation and centre");
    if (p->slices < 0 || p->slices > 64 || (p->bin != 0 && p->bin != 1 && p->bin != 2 && p->bin != 4) ||
        p->threads < 0 || p->threads > 1024)
        return ssb_fail(err, SSB4D_EINVAL, "refine plan: slices 0..64, bin 0, 1, 2, 4 and threads 0..1024");
    /* refine.c's choices */
    const double *tr = p->thickness_range_nm;
    double t_nm = !isnan(p->thickness_nm) ? p->thickness_nm : 0.5 * (tr[0] + tr[1]);
    int ns = p->slices > 0 ? p->slices : (int)floor(t_nm / 1.5 + 0.5);
    ns = ns < 1 ? 1 : ns > 64 ? 64 : ns;
    int bin = p->bin ? p->bin : refine_auto_bin(shape[2], shape[3]);
    if (shape[2] / (size_t)bin < 8 || shape[3] / (size_t)bin < 8)
        return ssb_fail(err, SSB4D_EINVAL, "refine plan: the %zux%zu detector binned by %d is under 8 pixels",
                        shape[2], shape[3], bin);
    refine_data d;
    memset(&d, 0, sizeof d);
    d.dr = (int)(shape[2] / (size_t)bin), d.dc = (int)(shape[3] / (size_t)bin);
    d.nr = refine_grid_size(d.dr, REFINE_PAD), d.nc = refine_grid_size(d.dc, REFINE_PAD);
    d.n = (size_t)d.nr * (size_t)d.nc;
    size_t rows = reg[1] - reg[0], cols = reg[3] - reg[2];
    d.npos = rows * cols;
    refine_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.d = &d;
    pb.ns = ns;
    double lam = ssb4d_wavelength_A(g->kv);
    for (int a = 0; a < 2; a++)
        pb.geo.dk[a] = bin * g->det_sampling_mrad[a] * 1e-3 / lam;
    pb.geo.rotation_deg = g->rotation_deg;
    pb.geo.flip = g->flip;
    pb.step_A[0] = g->scan_step_A[0], pb.step_A[1] = g->scan_step_A[1];
    pb.scan_cols = cols;
    ssb4d_status st;
    size_t nv = valid_pixels(shape, g, cal, bin, d.nr, d.nc, err, &st);
    if (st)
        return st;
    size_t batch = p->batch ? p->batch : 32;
    batch = batch < d.npos ? batch : d.npos;
    int threads = ssb_threads_resolve(p->threads);
    size_t grid[2], det[2] = {(size_t)d.nr, (size_t)d.nc};
    refine_object_grid(&pb, grid, out->object_pixel_A);
    out->positions = d.npos;
    out->slices = ns, out->bin = bin, out->threads = threads;
    out->batch = batch;
    out->det[0] = (size_t)d.dr, out->det[1] = (size_t)d.dc;
    memcpy(out->grid, det, sizeof det);
    memcpy(out->object, grid, sizeof grid);
    out->valid_pixels = nv;
    out->patterns_bytes = d.npos * nv * sizeof(float);
    out->frames_bytes = cols * shape[2] * shape[3] * sizeof(float);
    out->workspace_bytes = refine_workspace_bytes(0, det, grid, ns, batch, threads);
    out->peak_bytes = out->patterns_bytes +
                      (out->frames_bytes > out->workspace_bytes ? out->frames_bytes : out->workspace_bytes);
    return SSB4D_OK;
}
