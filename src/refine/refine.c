/* refine.c — the public multislice refinement call (SPEC §13, docs/refine.md): checks the
 * arguments, loads the region's patterns (batch.c), runs the staged solver (solver.c) and states
 * its confidence from the evidence (confidence(), below). */
#include "common/err.h"
#include "common/parallel.h"
#include "refine/solver.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    p->restart_check = 1; /* the thickness and the tilt are shallow: a second start checks them */
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

/* Confidence thresholds (docs/refine.md "Confidence"). */
#define DEV_RATIO_MAX 1.25  /* deviance over its Poisson expectation */
#define CHANGE_MAX 2e-3     /* relative loss change over the last pass: converged */
#define THICK_AGREE 0.10    /* the check start's thickness within 10 % (SPEC §13's tolerance) */
#define C10_AGREE_NM 0.2    /* its C10 within 0.2 nm (SPEC §13's margin) */
#define TILT_AGREE_MRAD 1.0 /* its tilt within 1 mrad (SPEC §13's tolerance) */
#define TILT_CHECK_MRAD 1.5 /* the check start's tilt: this far from the seed's, away from the result */

/* chk: the check start's thickness (nm), C10 (nm, mid-plane), tilt (mrad, specimen, scan frame) and
 * deviance ratio, or NULL when none ran. r holds the main result already. */
static void confidence(ssb4d_refine_result *r, const refine_solution *s, const refine_problem *pb, const double *chk)
{
    char *w = r->warning;
    size_t n = sizeof r->warning;
    w[0] = 0;
    double ratio = s->dev / s->dev_expected;
    if (!(ratio <= DEV_RATIO_MAX))
        snprintf(w, n, "the model leaves %.2fx the deviance counting noise would (limit %.2f): it does not "
                 "explain the data", ratio, DEV_RATIO_MAX);
    else if (chk && (fabs(chk[0] - r->thickness_nm) > THICK_AGREE * r->thickness_nm ||
                     fabs(chk[1] - r->ab.C_nm[SSB4D_C10]) > C10_AGREE_NM ||
                     (pb->active[RP_T0] && hypot(chk[2] - r->tilt_mrad[0], chk[3] - r->tilt_mrad[1]) > TILT_AGREE_MRAD)))
        snprintf(w, n, "a second start from the other side ended %.2g nm, %.2g nm and %.2g mrad away in thickness, "
                 "C10 and tilt (limits %.0f %%, %.1f nm, %.1f mrad; its deviance %.3gx): the data do not determine "
                 "them", fabs(chk[0] - r->thickness_nm), fabs(chk[1] - r->ab.C_nm[SSB4D_C10]),
                 pb->active[RP_T0] ? hypot(chk[2] - r->tilt_mrad[0], chk[3] - r->tilt_mrad[1]) : 0.0,
                 100 * THICK_AGREE, C10_AGREE_NM, TILT_AGREE_MRAD, chk[4]);
    else if (!(s->last_change <= CHANGE_MAX))
        snprintf(w, n, "not converged: the loss still changed by %.2g of itself in the last pass (limit %.1g)",
                 s->last_change, CHANGE_MAX);
    else if (pb->active[RP_DZ] && (pb->th[RP_DZ] <= pb->dz_range[0] * 1.01 || pb->th[RP_DZ] >= pb->dz_range[1] * 0.99))
        snprintf(w, n, "the thickness ended at an end of its range (%.3g nm)", pb->th[RP_DZ] * pb->ns / 10.0);
    else {
        static const char *names[RP_N] = {"C10", "C12", "phi12", "the tilt (row)", "the tilt (col)", "the thickness"};
        for (int k = 0; k < RP_N; k++)
            if (pb->active[k] && !(s->curv[k] > 0)) {
                snprintf(w, n, "the likelihood is not at a minimum along %s (curvature %.3g)", names[k], s->curv[k]);
                break;
            }
    }
    r->confident = w[0] == 0;
}

/* One solve of pb from a new object (the device's mirror, if any, goes up whole). A device error
 * stops the solve as a cancel would: its own line is what the caller gets, not "cancelled". */
static ssb4d_status solve_from_new_object(refine_problem *pb, refine_solution *s, ssb4d_err *err)
{
    refine_accel_object_changed(pb->accel);
    ssb4d_status st = refine_solve(pb, s, err);
    if (st == SSB4D_ECANCELLED && refine_accel_error(pb->accel, NULL))
        st = refine_accel_error(pb->accel, err);
    return st;
}

ssb4d_status ssb4d_refine(ssb4d_source *src, const ssb4d_calibration *cal, const ssb4d_geometry *g,
                          const size_t region[4], const ssb4d_aberrations *ab, const ssb4d_thick *thick,
                          const ssb4d_refine_params *p, ssb4d_refine_result *r, ssb4d_err *err)
{
    if (!r)
        return ssb_fail(err, SSB4D_EINVAL, "refine: a required argument is NULL");
    memset(r, 0, sizeof *r);
    if (!src || !cal || !g || !ab || !p)
        return ssb_fail(err, SSB4D_EINVAL, "refine: a required argument is NULL");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t sh[4];
    ssb4d_source_shape(src, sh);
    size_t reg[4] = {0, sh[0], 0, sh[1]};
    if (region && (region[0] | region[1] | region[2] | region[3]))
        memcpy(reg, region, sizeof reg);
    if (!(reg[0] < reg[1] && reg[1] <= sh[0] && reg[2] < reg[3] && reg[3] <= sh[1]))
        return ssb_fail(err, SSB4D_EINVAL, "refine: the region is outside the %zux%zu scan", sh[0], sh[1]);
    const double *tr = p->thickness_range_nm;
    if (!isfinite(tr[0]) || !isfinite(tr[1]) || !(tr[0] > 0) || !(tr[0] <= tr[1]) || tr[1] > 1000)
        return ssb_fail(err, SSB4D_EINVAL, "refine: the thickness range must be 0 < min <= max <= 1000 nm, got %g..%g",
                        tr[0], tr[1]);
    if (!isnan(p->thickness_nm) && !(p->thickness_nm >= tr[0] && p->thickness_nm <= tr[1]))
        return ssb_fail(err, SSB4D_EINVAL, "refine: the start thickness %g nm is outside the range %g..%g nm",
                        p->thickness_nm, tr[0], tr[1]);
    if (p->slices < 0 || p->slices > 64)
        return ssb_fail(err, SSB4D_EINVAL, "refine: slices must be 0 (auto) .. 64, got %d", p->slices);
    if (p->iterations < 0 || p->iterations > 10000)
        return ssb_fail(err, SSB4D_EINVAL, "refine: iterations must be 0 (default) .. 10000, got %d", p->iterations);
    if (p->bin != 0 && p->bin != 1 && p->bin != 2 && p->bin != 4)
        return ssb_fail(err, SSB4D_EINVAL, "refine: bin must be 0 (auto), 1, 2 or 4, got %d", p->bin);
    if (p->modes > 1)
        return ssb_fail(err, SSB4D_EINVAL, "refine: incoherent probe modes (%d) are not implemented yet; use 1",
                        p->modes);
    if (p->threads < 0 || p->threads > 1024)
        return ssb_fail(err, SSB4D_EINVAL, "refine: threads must be 0..1024, got %d", p->threads);
    if (!isfinite(p->slice_coupling) || p->slice_coupling > 1e6)
        return ssb_fail(err, SSB4D_EINVAL, "refine: slice coupling must be finite and <= 1e6, got %g", p->slice_coupling);
    if (p->loss != SSB4D_REFINE_POISSON && p->loss != SSB4D_REFINE_AMPLITUDE)
        return ssb_fail(err, SSB4D_EINVAL, "refine: unknown loss %d", (int)p->loss);
    if (!(g->kv > 0) || !(g->semiangle_mrad > 0) || !(g->det_sampling_mrad[0] > 0) || !(g->det_sampling_mrad[1] > 0) ||
        !(g->scan_step_A[0] > 0) || !(g->scan_step_A[1] > 0) || !isfinite(g->rotation_deg) ||
        !isfinite(g->centre_px[0]) || !isfinite(g->centre_px[1]))
        return ssb_fail(err, SSB4D_EINVAL, "refine: the geometry is incomplete (kV, semi-angle, sampling, step, "
                        "rotation and centre must be stated)");
    for (int i = 0; i < SSB4D_N_ABERR; i++)
        if (!isfinite(ab->C_nm[i]) || !isfinite(ab->phi_deg[i]) || fabs(ab->C_nm[i]) > 1e6)
            return ssb_fail(err, SSB4D_EINVAL, "refine: aberration %s is not finite or absurd", ssb4d_aberr_name(i));
    if (thick && (!isfinite(thick->tilt_mrad[0]) || !isfinite(thick->tilt_mrad[1]) ||
                  fabs(thick->tilt_mrad[0]) > 200 || fabs(thick->tilt_mrad[1]) > 200))
        return ssb_fail(err, SSB4D_EINVAL, "refine: the start tilt must be finite and within 200 mrad");

    /* the start: given, else the seed's thickness held inside the range, else the range's middle */
    double t_nm = !isnan(p->thickness_nm)           ? p->thickness_nm
                  : thick && thick->thickness_nm > 0 ? fmin(fmax(thick->thickness_nm, tr[0]), tr[1])
                                                     : 0.5 * (tr[0] + tr[1]);
    int ns = p->slices > 0 ? p->slices : (int)floor(t_nm / 1.5 + 0.5); /* about one per 1.5 nm */
    ns = ns < 1 ? 1 : ns > 64 ? 64 : ns;
    int bin = p->bin ? p->bin : refine_auto_bin(sh[2], sh[3]);
    if (sh[2] / (size_t)bin < 8 || sh[3] / (size_t)bin < 8)
        return ssb_fail(err, SSB4D_EINVAL, "refine: the %zux%zu detector binned by %d is under 8 pixels", sh[2], sh[3], bin);

    refine_data d;
    ssb4d_status st = refine_data_load(src, cal, g, reg, bin, REFINE_PAD, p->mem, &d, err);
    if (st)
        return st;
    refine_problem pb;
    memset(&pb, 0, sizeof pb);
    pb.d = &d;
    pb.ns = ns;
    double lam = ssb4d_wavelength_A(g->kv);
    pb.geo.lambda = lam;
    pb.geo.semiangle_mrad = g->semiangle_mrad;
    for (int a = 0; a < 2; a++) {
        pb.geo.dk[a] = bin * g->det_sampling_mrad[a] * 1e-3 / lam;
        pb.geo.ang[a] = pb.geo.dk[a] * lam;
        pb.geo.delta[a] = d.delta[a];
    }
    pb.geo.rotation_deg = g->rotation_deg;
    pb.geo.flip = g->flip;
    pb.geo.ab = *ab;
    /* the mid-plane is the centroid of the N planes where the slices act, (N − 1)·Δz/2 below the
     * first (docs/refine.md "C10's plane") */
    pb.th[RP_C10] = ab->C_nm[SSB4D_C10] * 10.0 - (ns - 1) * (t_nm * 10.0 / ns) / 2.0;
    pb.th[RP_C12] = ab->C_nm[SSB4D_C12] * 10.0;
    pb.th[RP_PHI12] = ab->phi_deg[SSB4D_C12] * M_PI / 180.0;
    /* The model's τ is the simulator's beam tilt (its propagator, term for term); the public tilt
     * is SPEC §5.6's specimen tilt, as `fit --tilt` and the calibration file's thick model state
     * it: τ_spec = −τ_beam (docs/tilt.md "Tilt sign convention"). */
    pb.th[RP_T0] = thick ? -thick->tilt_mrad[0] * 1e-3 : 0.0;
    pb.th[RP_T1] = thick ? -thick->tilt_mrad[1] * 1e-3 : 0.0;
    pb.th[RP_DZ] = t_nm * 10.0 / ns;
    pb.dz_range[0] = tr[0] * 10.0 / ns;
    pb.dz_range[1] = tr[1] * 10.0 / ns;
    pb.iterations = p->iterations ? p->iterations : 30;
    pb.active[RP_C10] = pb.active[RP_C12] = pb.active[RP_PHI12] = p->refine_aberrations != 0;
    pb.active[RP_T0] = pb.active[RP_T1] = p->refine_tilt != 0 && ns > 1;
    pb.active[RP_DZ] = p->refine_thickness != 0 && tr[0] < tr[1] && ns > 1;
    pb.step_A[0] = g->scan_step_A[0];
    pb.step_A[1] = g->scan_step_A[1];
    pb.scan_cols = reg[3] - reg[2];
    pb.threads = ssb_threads_resolve(p->threads);
    pb.batch = p->batch ? p->batch : 32;
    pb.amplitude = p->loss == SSB4D_REFINE_AMPLITUDE;
    pb.seed = p->seed;
    pb.mem = p->mem;
    pb.kappa = p->slice_coupling == 0 ? 1.0 : p->slice_coupling < 0 ? 0.0 : p->slice_coupling;
    pb.lr = 0.05;

    /* the backend: the minibatches on the GPU when asked (or AUTO and one is here) */
    size_t ogrid[2];
    double odx[2];
    refine_object_grid(&pb, ogrid, odx);
    if ((st = refine_accel_new(p->backend, &d, ns, pb.batch, ogrid, &pb.accel, err))) {
        refine_data_free(&d);
        return st;
    }
    /* with the check start, the main solve reports the first P/(P + 0.6P) of the progress */
    int check = p->restart_check && (pb.active[RP_DZ] || pb.active[RP_T0]);
    if (check)
        pb.prog[0] = 0.0, pb.prog[1] = 0.62;
    refine_problem pb0 = pb; /* the start, for the check's second start */
    refine_solution s;
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    st = solve_from_new_object(&pb, &s, err);
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    if (st) {
        refine_accel_delete(pb.accel, p->mem);
        refine_data_free(&d);
        return st;
    }
    /* The check start (p->restart_check, docs/refine.md "Confidence"): with a free object the
     * likelihood is shallow along the thickness and the tilt, and the solve may end near wherever
     * it started. So a second, shorter solve starts on the other side of the result: the thickness
     * at 0.75x or 1.25x of it, the tilt TILT_CHECK_MRAD from the seed's, opposite to where the main
     * solve moved it. The two must agree (confidence(), below). */
    double t2_nm = NAN, c10_2 = NAN, tilt2[2] = {NAN, NAN}, dev2 = NAN;
    if (check) {
        refine_problem q = pb0;
        q.prog[0] = 0.62, q.prog[1] = 0.99;
        double t1 = pb.th[RP_DZ] * ns, t0 = pb0.th[RP_DZ] * ns, ts = t0;
        if (pb.active[RP_DZ]) {
            ts = t1 >= t0 ? 0.75 * t1 : 1.25 * t1;
            ts = fmin(fmax(ts, tr[0] * 10.0), tr[1] * 10.0);
        }
        q.th[RP_C10] = pb0.th[RP_C10] + (ns - 1) * (t0 - ts) / (2.0 * ns); /* the same mid-plane */
        q.th[RP_DZ] = ts / ns;
        if (pb.active[RP_T0]) {
            double a = pb.th[RP_T0] - pb0.th[RP_T0], b = pb.th[RP_T1] - pb0.th[RP_T1], m = hypot(a, b);
            double u0 = m > 1e-6 ? a / m : 1.0, u1 = m > 1e-6 ? b / m : 0.0;
            q.th[RP_T0] = pb0.th[RP_T0] - TILT_CHECK_MRAD * 1e-3 * u0;
            q.th[RP_T1] = pb0.th[RP_T1] - TILT_CHECK_MRAD * 1e-3 * u1;
        }
        q.iterations = pb.iterations * 3 / 5 > 1 ? pb.iterations * 3 / 5 : 1; /* 60 % of the main solve's */
        refine_solution s2;
        st = solve_from_new_object(&q, &s2, err);
        if (st) {
            refine_accel_delete(pb.accel, p->mem);
            refine_solution_free(&s);
            refine_data_free(&d);
            return st;
        }
        t2_nm = q.th[RP_DZ] * ns / 10.0;
        c10_2 = (q.th[RP_C10] + (ns - 1) * q.th[RP_DZ] / 2.0) / 10.0;
        tilt2[0] = -q.th[RP_T0] * 1e3, tilt2[1] = -q.th[RP_T1] * 1e3; /* the specimen tilt, scan frame */
        dev2 = s2.dev / s2.dev_expected;
        refine_solution_free(&s2);
    }
    r->backend = refine_accel_name(pb.accel);
    r->device_peak_bytes = refine_accel_peak(pb.accel);
    refine_accel_delete(pb.accel, p->mem);
    pb.accel = NULL;
    /* the result */
    double t_fin = pb.th[RP_DZ] * ns / 10.0;
    r->ab = *ab;
    r->C10_entrance_nm = pb.th[RP_C10] / 10.0;
    r->ab.C_nm[SSB4D_C10] = r->C10_entrance_nm + (ns - 1) * (t_fin / ns) / 2.0;
    r->ab.C_nm[SSB4D_C12] = pb.th[RP_C12] / 10.0;
    double phi = fmod(pb.th[RP_PHI12] * 180.0 / M_PI + 90.0, 180.0);
    r->ab.phi_deg[SSB4D_C12] = (phi < 0 ? phi + 180.0 : phi) - 90.0;
    if (r->ab.C_nm[SSB4D_C12] < 0) { /* the same astigmatism, a positive magnitude */
        r->ab.C_nm[SSB4D_C12] = -r->ab.C_nm[SSB4D_C12];
        r->ab.phi_deg[SSB4D_C12] += r->ab.phi_deg[SSB4D_C12] < 0 ? 90.0 : -90.0;
    }
    r->geom = *g;
    r->phi12_probe_deg = ssb4d_phi12_to_probe(g, r->ab.phi_deg[SSB4D_C12]);
    r->tilt_mrad[0] = -pb.th[RP_T0] * 1e3; /* the specimen tilt (above) */
    r->tilt_mrad[1] = -pb.th[RP_T1] * 1e3;
    ssb4d_vector_to_probe(g, r->tilt_mrad, r->tilt_probe_mrad);
    r->thickness_nm = t_fin;
    r->slices = ns;
    r->nll = s.dev;
    r->nll_expected = s.dev_expected;
    r->history = s.history;
    r->n_history = s.n_history;
    s.history = NULL;
    memcpy(r->region, reg, sizeof reg);
    r->obj_shape[0] = s.Or;
    r->obj_shape[1] = s.Oc;
    r->obj_pixel_A[0] = s.dx[0];
    r->obj_pixel_A[1] = s.dx[1];
    r->slice_phase = s.phase;
    s.phase = NULL;
    size_t on = s.Or * s.Oc;
    r->projected_phase = calloc(on, sizeof(float));
    r->probe_shape[0] = (size_t)d.nr;
    r->probe_shape[1] = (size_t)d.nc;
    r->probe = s.probe;
    s.probe = NULL;
    r->bin = bin;
    for (int k = 0; k < RP_N; k++) {
        r->grad[k] = k == RP_T0 || k == RP_T1 ? -s.grad[k] : s.grad[k]; /* per specimen tilt */
        r->curvature[k] = s.curv[k];
    }
    double chk[5] = {t2_nm, c10_2, tilt2[0], tilt2[1], dev2};
    confidence(r, &s, &pb, isnan(c10_2) ? NULL : chk);
    r->thickness_check_nm = t2_nm;
    r->tilt_refined = pb.active[RP_T0]; /* one slice: no depth to tilt or thicken (they repeat the start) */
    r->thickness_refined = pb.active[RP_DZ];
    refine_solution_free(&s);
    refine_data_free(&d);
    if (!r->projected_phase) {
        ssb4d_refine_result_free(r);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for the projected phase");
    }
    for (int j = 0; j < ns; j++)
        for (size_t q = 0; q < on; q++)
            r->projected_phase[q] += r->slice_phase[(size_t)j * on + q];
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    r->seconds_per_iteration = ((double)(ts1.tv_sec - ts0.tv_sec) + 1e-9 * (double)(ts1.tv_nsec - ts0.tv_nsec)) /
                               pb.iterations; /* the main solve's */
    ssb4d_mem_progress(p->mem, 1.0);
    return SSB4D_OK;
}
