/* tilt.c — the thick-sample fit (see tilt.h, SPEC §6.2, docs/tilt.md). */
#include "fit/tilt.h"

#include "common/err.h"
#include "common/sha256.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void fit_tilt_params_default(fit_tilt_params *p)
{
    memset(p, 0, sizeof *p);
    fit_thin_params_default(&p->thin);
    /* The band objective is cheap next to the exact loss and every batch shares one pass over
     * G, so larger batches cost little more than small ones. */
    p->thin.batch = 16;
    p->tilt_max_mrad = 25;
    p->thickness_lo_nm = 2;
    p->thickness_hi_nm = 60;
    p->c10_span_nm = 8;
    p->c12_span_nm = 2;
    p->phi12_span_deg = 90;
    /* Measured on 14.8 nm SrTiO3 (tiny preset, docs/tilt.md) at tilts (3,−4), (10,−15) and
     * (−20,8) mrad: 100, 200 and 400 joint candidates all reach the same endpoint (to 0.03 mrad);
     * 200 keeps a margin. Nelder–Mead in 6-D is what costs: capped at 60 iterations it stops
     * 3.7 mrad off at (10,−15), at 100 still 1 mrad off, at 200 it converges (the endpoints of
     * the three runs then agree). xtol 0.05 (nm, deg, mrad) and ftol 1e-6 (in fit/power) are
     * far below the precision that matters (0.1 mrad, 0.1 nm) and stop some runs early. */
    p->trials = 200;
    p->nm_starts = 3;
    fit_nm_opts_default(&p->nm);
    p->nm.step[TILT_C10] = 2.0;
    p->nm.step[TILT_C12] = 0.5;
    p->nm.step[TILT_PHI12] = 5.0;
    p->nm.step[TILT_ROW] = 2.0; /* mrad: about half the width of the tilt basin at 15 nm */
    p->nm.step[TILT_COL] = 2.0;
    p->nm.step[TILT_T] = 5.0;   /* nm */
    p->nm.xtol = 0.05;
    p->nm.ftol = 1e-6;
    p->nm.max_iter = 200;
    ssb4d_band_opts_default(&p->band);
}

typedef struct {
    const ssb4d_G *G;
    const ssb4d_geometry *g;
    const fit_tilt_params *p;
    ssb4d_mem *mem;
    double inv_power;
    int joint;            /* 0: x = (C10, C12, φ12), thickness 0; 1: TILT_* order */
    ssb4d_aberrations *ab; /* scratch for one batch */
    ssb4d_thick *th;
    double *fit;
    size_t cap;
} objective;

static void point_aberrations(const fit_tilt_params *p, const double *x, ssb4d_aberrations *ab)
{
    fit_point_aberrations(&p->thin.base, x, ab); /* x starts with C10, C12, φ12 (TILT_*) */
}

/* The whole batch in one ssb4d_band_fit call (one pass over G). */
static ssb4d_status band_eval(void *user, const double *x, size_t n, double *loss, ssb4d_err *err)
{
    objective *o = user;
    if (n > o->cap) {
        free(o->ab);
        free(o->th);
        free(o->fit);
        o->ab = malloc(n * sizeof *o->ab);
        o->th = malloc(n * sizeof *o->th);
        o->fit = malloc(n * sizeof *o->fit);
        o->cap = n;
        if (!o->ab || !o->th || !o->fit) {
            o->cap = 0;
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory in the tilt fit");
        }
    }
    size_t np = o->joint ? TILT_NP : 3;
    for (size_t i = 0; i < n; i++) {
        const double *xi = x + i * np;
        point_aberrations(o->p, xi, &o->ab[i]);
        memset(&o->th[i], 0, sizeof o->th[i]);
        if (o->joint) {
            o->th[i].tilt_mrad[0] = xi[TILT_ROW];
            o->th[i].tilt_mrad[1] = xi[TILT_COL];
            o->th[i].thickness_nm = xi[TILT_T];
        }
    }
    ssb4d_status st = ssb4d_band_fit(o->G, o->g, o->ab, o->th, n, &o->p->band, o->mem, o->fit, err);
    for (size_t i = 0; !st && i < n; i++)
        loss[i] = -o->fit[i] * o->inv_power;
    return st;
}

static double box_dist(const fit_problem *fp, const double *a, const double *b)
{
    double d = 0;
    for (int j = 0; j < fp->n_params; j++) {
        if (fp->locked[j])
            continue;
        double w = fp->period[j] > 0 ? fp->period[j] : fp->hi[j] - fp->lo[j];
        double v = a[j] - b[j];
        if (fp->period[j] > 0) {
            v = fmod(v, fp->period[j]);
            if (v > fp->period[j] / 2)
                v -= fp->period[j];
            else if (v < -fp->period[j] / 2)
                v += fp->period[j];
        }
        if (w > 0)
            d = fmax(d, fabs(v) / w);
    }
    return d;
}

/* Two trials are "distinct" starts when some free parameter differs by more than this fraction
 * of its range (closer ones lead Nelder–Mead into the same basin). */
#define DISTINCT 0.05

/* Indices of the best `want` distinct trials of stage `stage` (ascending loss, ties by order). */
static size_t best_distinct(const fit_state *s, const fit_problem *fp, int stage, size_t want,
                            size_t *out)
{
    size_t n, k = 0;
    const fit_trial *t = fit_trials(s, &n);
    size_t *idx = malloc((n ? n : 1) * sizeof *idx), m = 0;
    if (!idx)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].stage == stage && !t[i].cached)
            idx[m++] = i;
    for (size_t a = 1; a < m; a++) /* stable insertion sort by loss */
        for (size_t b = a; b > 0 && t[idx[b]].loss < t[idx[b - 1]].loss; b--) {
            size_t tmp = idx[b];
            idx[b] = idx[b - 1];
            idx[b - 1] = tmp;
        }
    for (size_t a = 0; a < m && k < want; a++) {
        int ok = 1;
        for (size_t b = 0; b < k && ok; b++)
            ok = box_dist(fp, t[idx[a]].x, t[out[b]].x) > DISTINCT;
        if (ok)
            out[k++] = idx[a];
    }
    free(idx);
    return k;
}

static ssb4d_status check_params(const fit_tilt_params *p, ssb4d_err *err)
{
    ssb4d_status st = fit_check_start(p->thin.lo, p->thin.hi, p->thin.start, err);
    if (st)
        return st;
    if (!(p->tilt_max_mrad >= 0) || !isfinite(p->tilt_max_mrad))
        return ssb_fail(err, SSB4D_EINVAL, "the tilt range must be >= 0 mrad (got %g)", p->tilt_max_mrad);
    if (!(p->thickness_lo_nm > 0) || !(p->thickness_hi_nm >= p->thickness_lo_nm) || !isfinite(p->thickness_hi_nm))
        return ssb_fail(err, SSB4D_EINVAL, "the thickness range must satisfy 0 < lo <= hi (got %g-%g nm)",
                        p->thickness_lo_nm, p->thickness_hi_nm);
    if (!(p->c10_span_nm >= 0) || !(p->c12_span_nm >= 0) || !(p->phi12_span_deg >= 0))
        return ssb_fail(err, SSB4D_EINVAL, "the joint search's aberration spans must be >= 0");
    for (int k = 0; k < 2; k++)
        if (p->thick_locked[k] && !(fabs(p->thick_given.tilt_mrad[k]) <= p->tilt_max_mrad))
            return ssb_fail(err, SSB4D_EINVAL, "a held tilt must lie within +-%g mrad (got %g)", p->tilt_max_mrad,
                            p->thick_given.tilt_mrad[k]);
    if (p->thick_locked[2] && !(p->thick_given.thickness_nm >= p->thickness_lo_nm &&
                                p->thick_given.thickness_nm <= p->thickness_hi_nm))
        return ssb_fail(err, SSB4D_EINVAL, "a held thickness must lie in %g-%g nm (got %g)", p->thickness_lo_nm,
                        p->thickness_hi_nm, p->thick_given.thickness_nm);
    return SSB4D_OK;
}

ssb4d_status fit_tilt(const ssb4d_G *G, const ssb4d_geometry *g, const fit_tilt_params *p,
                      ssb4d_mem *mem, fit_tilt_result *r, fit_state *states[2], ssb4d_err *err)
{
    if (states)
        states[0] = states[1] = NULL;
    ssb4d_status st = check_params(p, err);
    if (st)
        return st;
    double power = 0;
    if ((st = ssb4d_band_power(G, g, &p->band, mem, &power, err)))
        return st;
    if (!(power > 0))
        return ssb_fail(err, SSB4D_ENOTFOUND, "the band %g-%g 1/A holds no signal (band power 0)",
                        p->band.band_lo_inv_A, p->band.band_hi_inv_A);
    objective o = {G, g, p, mem, 1.0 / power, 0, NULL, NULL, NULL, 0};
    fit_state *thin = NULL, *joint = NULL;

    /* (1) Thin baseline: (C10, C12, φ12) at thickness 0 on the band objective. */
    fit_problem tp;
    memset(&tp, 0, sizeof tp);
    tp.n_params = 3;
    for (int j = 0; j < 3; j++) {
        tp.lo[j] = p->thin.lo[j];
        tp.hi[j] = p->thin.hi[j];
        tp.start[j] = p->thin.start[j];
        tp.locked[j] = p->thin.locked[j];
    }
    if (p->thin.hi[FIT_PHI12] - p->thin.lo[FIT_PHI12] >= 180)
        tp.period[FIT_PHI12] = 180, tp.hi[FIT_PHI12] = tp.lo[FIT_PHI12] + 180;
    tp.eval = band_eval;
    tp.user = &o;
    thin = fit_state_new(&tp);
    if (!thin) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory starting the tilt fit");
        goto out;
    }
    if (p->thin.trials)
        st = fit_global(thin, TILT_STAGE_THIN_GLOBAL, p->thin.trials, p->thin.batch, p->thin.seed, err);
    if (!st) {
        double x0[FIT_MAX_PARAMS] = {0};
        memcpy(x0, p->thin.trials ? fit_best(thin)->x : tp.start, sizeof x0);
        st = fit_nelder_mead(thin, TILT_STAGE_THIN_NM, x0, &p->thin.nm, NULL, err);
    }
    if (st)
        goto out;
    const fit_trial *tb = fit_best(thin);
    double thin_x[3] = {tb->x[0], tb->x[1], tb->x[2]}, thin_loss = tb->loss;

    /* (2) Joint search around the baseline: aberrations within the spans, tilt, thickness. */
    fit_problem jp;
    memset(&jp, 0, sizeof jp);
    jp.n_params = TILT_NP;
    double span[3] = {p->c10_span_nm, p->c12_span_nm, p->phi12_span_deg};
    for (int j = 0; j < 3; j++) {
        jp.locked[j] = p->thin.locked[j];
        jp.start[j] = thin_x[j];
        if (j == TILT_PHI12 && tp.period[j] > 0 && 2 * span[j] >= 180) {
            jp.period[j] = 180; /* the whole circle */
            jp.lo[j] = tp.lo[j];
            jp.hi[j] = tp.lo[j] + 180;
        } else if (j == TILT_PHI12 && tp.period[j] > 0) {
            jp.lo[j] = thin_x[j] - span[j]; /* an arc that may cross the wrap: no clipping */
            jp.hi[j] = thin_x[j] + span[j];
        } else {
            jp.lo[j] = fmax(tp.lo[j], thin_x[j] - span[j]);
            jp.hi[j] = fmin(tp.hi[j], thin_x[j] + span[j]);
        }
    }
    jp.lo[TILT_ROW] = jp.lo[TILT_COL] = -p->tilt_max_mrad;
    jp.hi[TILT_ROW] = jp.hi[TILT_COL] = p->tilt_max_mrad;
    jp.lo[TILT_T] = p->thickness_lo_nm;
    jp.hi[TILT_T] = p->thickness_hi_nm;
    jp.start[TILT_T] = p->thickness_lo_nm; /* the baseline's nearest thick point */
    const double given[3] = {p->thick_given.tilt_mrad[0], p->thick_given.tilt_mrad[1], p->thick_given.thickness_nm};
    for (int k = 0; k < 3; k++)
        if (p->thick_locked[k]) {
            jp.locked[TILT_ROW + k] = 1;
            jp.start[TILT_ROW + k] = given[k];
        }
    jp.eval = band_eval;
    jp.user = &o;
    o.joint = 1;
    joint = fit_state_new(&jp);
    if (!joint) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory starting the tilt fit");
        goto out;
    }
    if ((st = fit_global(joint, TILT_STAGE_GLOBAL, p->trials ? p->trials : 1, p->thin.batch,
                         p->thin.seed ^ 0x7417u, err)))
        goto out;

    /* (3) Nelder–Mead from the best distinct trials; the best endpoint wins. */
    size_t starts[16], ns = best_distinct(joint, &jp, TILT_STAGE_GLOBAL,
                                          p->nm_starts < 16 ? p->nm_starts : 16, starts);
    double x0s[16][FIT_MAX_PARAMS];
    size_t nt;
    const fit_trial *jt = fit_trials(joint, &nt);
    for (size_t i = 0; i < ns; i++)
        memcpy(x0s[i], jt[starts[i]].x, sizeof x0s[i]); /* the trace grows: copy first */
    int iters[16] = {0};
    for (size_t i = 0; i < ns && !st; i++)
        st = fit_nelder_mead(joint, TILT_STAGE_NM, x0s[i], &p->nm, &iters[i], err);
    if (st)
        goto out;

    const fit_trial *jb = fit_best(joint);
    memset(r, 0, sizeof *r);
    memcpy(r->thin, thin_x, sizeof r->thin);
    r->fit_standard = -thin_loss * power;
    if (jb->loss <= thin_loss || p->thick_locked[2]) {
        r->C10_nm = jb->x[TILT_C10];
        r->C12_nm = jb->x[TILT_C12];
        r->phi12_deg = jb->x[TILT_PHI12];
        r->thick.tilt_mrad[0] = jb->x[TILT_ROW];
        r->thick.tilt_mrad[1] = jb->x[TILT_COL];
        r->thick.thickness_nm = jb->x[TILT_T];
        r->fraction = -jb->loss;
    } else { /* the thin model explains the band better than any thick point found */
        r->C10_nm = thin_x[0];
        r->C12_nm = thin_x[1];
        r->phi12_deg = thin_x[2];
        r->thin_kept = 1;
        r->fraction = -thin_loss;
    }
    r->fit = r->fraction * power;
    r->gain = r->fit / r->fit_standard;
    r->nm_runs = (int)ns;
    memcpy(r->nm_iterations, iters, sizeof iters);
    r->evaluations = fit_evaluations(thin) + fit_evaluations(joint);
    size_t n1, n2;
    fit_trials(thin, &n1);
    fit_trials(joint, &n2);
    r->trials = n1 + n2;
    char h1[65], h2[65];
    fit_trace_sha256(thin, h1);
    fit_trace_sha256(joint, h2);
    ssb4d_sha256 *h = ssb_sha256_new();
    ssb_sha256_update(h, h1, 64);
    ssb_sha256_update(h, h2, 64);
    ssb_sha256_final_hex(h, r->trace_sha256);
out:
    free(o.ab);
    free(o.th);
    free(o.fit);
    if (!st && states) {
        states[0] = thin;
        states[1] = joint;
    } else {
        fit_state_free(thin);
        fit_state_free(joint);
    }
    return st;
}
