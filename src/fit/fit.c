/* fit.c — the standard fit (see fit.h). */
#include "fit/fit.h"

#include "common/err.h"

#include <string.h>

void fit_thin_params_default(fit_thin_params *p)
{
    memset(p, 0, sizeof *p);
    p->lo[FIT_C10] = -40, p->hi[FIT_C10] = 40;
    p->lo[FIT_C12] = 0, p->hi[FIT_C12] = 10;
    p->lo[FIT_PHI12] = -90, p->hi[FIT_PHI12] = 90;
    p->start[FIT_C12] = 5;
    p->trials = 200;
    p->batch = 8;
    p->seed = 42;
    fit_nm_opts_default(&p->nm);
    ssb4d_ssb_opts_default(&p->ssb);
    ssb4d_band_opts_default(&p->band);
}

void fit_point_aberrations(const ssb4d_aberrations *base, const double x[3], ssb4d_aberrations *ab)
{
    *ab = *base;
    ab->C_nm[SSB4D_C10] = x[FIT_C10];
    ab->C_nm[SSB4D_C12] = x[FIT_C12];
    ab->phi_deg[SSB4D_C12] = x[FIT_PHI12];
}

void fit_thin_aberrations(const fit_thin_params *p, int flip, const double *x, ssb4d_aberrations *ab)
{
    fit_point_aberrations(&p->base, x, ab);
    if (p->fit_rotation) /* probe frame → scan frame (docs/fit.md) */
        ab->phi_deg[SSB4D_C12] = fit_phi_probe_to_scan(flip, x[FIT_PHI12], x[FIT_ROT]);
}


ssb4d_status fit_check_start(const double lo[3], const double hi[3], const double start[3],
                             ssb4d_err *err)
{
    for (int j = 0; j < 3; j++)
        if (!(lo[j] <= start[j] && start[j] <= hi[j]))
            return ssb_fail(err, SSB4D_EINVAL, "the fit's start value %g of %s lies outside its range [%g, %g]",
                            start[j], j == FIT_C10 ? "C10" : j == FIT_C12 ? "C12" : "phi12", lo[j], hi[j]);
    return SSB4D_OK;
}

typedef struct {
    const ssb4d_G *G;
    const ssb4d_geometry *g;
    const fit_thin_params *p;
    ssb4d_mem *mem;
    double inv_power;        /* band objective: 1 / band power */
} objective;

/* A whole batch in one pass over G (each plane read once): the exact losses, or −fit/power of
 * the band objective (the fraction of the band's power that γ explains, negated: lower is
 * better either way). */
static ssb4d_status thin_eval(void *user, const double *x, size_t n, double *loss, ssb4d_err *err)
{
    const objective *o = user;
    ssb4d_aberrations ab[64];
    double fit[64], rot[64];
    ssb4d_status st = SSB4D_OK;
    size_t np = o->p->fit_rotation ? 4 : 3;
    for (size_t i0 = 0; i0 < n && !st; i0 += 64) {
        size_t m = n - i0 < 64 ? n - i0 : 64;
        for (size_t i = 0; i < m; i++) {
            fit_thin_aberrations(o->p, o->g->flip, x + np * (i0 + i), &ab[i]);
            rot[i] = o->p->fit_rotation ? x[np * (i0 + i) + FIT_ROT] : o->g->rotation_deg;
        }
        if (o->p->objective == SSB4D_FIT_OBJ_BAND) {
            st = o->p->fit_rotation ? ssb4d_band_fit_rot(o->G, o->g, rot, ab, NULL, m, &o->p->band, o->mem, fit, err)
                                    : ssb4d_band_fit(o->G, o->g, ab, NULL, m, &o->p->band, o->mem, fit, err);
            for (size_t i = 0; !st && i < m; i++)
                loss[i0 + i] = -fit[i] * o->inv_power;
        } else if (o->p->fit_rotation) { /* the exact loss takes one geometry per call */
            for (size_t i = 0; i < m && !st; i++) {
                ssb4d_geometry gi = *o->g;
                gi.rotation_deg = rot[i];
                st = ssb4d_loss_batch(o->G, &gi, &ab[i], NULL, 1, &o->p->ssb, o->mem, loss + i0 + i, err);
            }
        } else
            st = ssb4d_loss_batch(o->G, o->g, ab, NULL, m, &o->p->ssb, o->mem, loss + i0, err);
    }
    if (!st && o->p->work)
        o->p->work(o->p->work_user, (double)n * (double)ssb4d_G_n_bf(o->G));
    return st;
}

/* The band objective's normalisation: p's, else the band power of G (one pass). */
static ssb4d_status band_norm(const ssb4d_G *G, const ssb4d_geometry *g, const fit_thin_params *p, ssb4d_mem *mem,
                              double *inv_power, ssb4d_err *err)
{
    double power = p->band_power;
    ssb4d_status st = power > 0 ? SSB4D_OK : ssb4d_band_power(G, g, &p->band, mem, &power, err);
    if (st)
        return st;
    if (!(power > 0))
        return ssb_fail(err, SSB4D_ENOTFOUND, "the band %g-%g 1/A holds no signal", p->band.band_lo_inv_A,
                        p->band.band_hi_inv_A);
    *inv_power = 1.0 / power;
    return SSB4D_OK;
}

ssb4d_status fit_thin_eval(const ssb4d_G *G, const ssb4d_geometry *g, const fit_thin_params *p, const double *x,
                           size_t n, ssb4d_mem *mem, double *loss, ssb4d_err *err)
{
    objective o = {G, g, p, mem, 0.0};
    ssb4d_status st = p->objective == SSB4D_FIT_OBJ_BAND ? band_norm(G, g, p, mem, &o.inv_power, err) : SSB4D_OK;
    return st ? st : thin_eval(&o, x, n, loss, err);
}

ssb4d_status fit_thin(const ssb4d_G *G, const ssb4d_geometry *g, const fit_thin_params *p,
                      ssb4d_mem *mem, fit_thin_result *r, fit_state **state, ssb4d_err *err)
{
    if (state)
        *state = NULL;
    ssb4d_status cst = fit_check_start(p->lo, p->hi, p->start, err);
    if (cst)
        return cst;
    objective o = {G, g, p, mem, 0.0};
    if (p->objective == SSB4D_FIT_OBJ_BAND) {
        ssb4d_status pst = band_norm(G, g, p, mem, &o.inv_power, err);
        if (pst)
            return pst;
    }
    fit_problem fp;
    memset(&fp, 0, sizeof fp);
    fp.n_params = p->fit_rotation ? 4 : 3;
    for (int j = 0; j < fp.n_params; j++) {
        fp.lo[j] = p->lo[j];
        fp.hi[j] = p->hi[j];
        fp.start[j] = p->start[j];
        fp.locked[j] = p->locked[j];
    }
    /* φ12 is periodic only over its full range; a narrowed range is an ordinary box. */
    if (p->hi[FIT_PHI12] - p->lo[FIT_PHI12] >= 180)
        fp.period[FIT_PHI12] = 180, fp.hi[FIT_PHI12] = fp.lo[FIT_PHI12] + 180;
    fp.eval = thin_eval;
    fp.user = &o;
    fit_state *s = fit_state_new(&fp);
    if (!s)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory starting the fit");
    ssb4d_status st = SSB4D_OK;
    double x0[FIT_MAX_PARAMS] = {0};
    size_t bsz = p->batch ? p->batch : 1;
    for (size_t i = 0; i < p->n_seeds && !st; i += bsz)
        st = fit_eval_batch(s, p->stage_base, p->seeds + i * (size_t)fp.n_params,
                            p->n_seeds - i < bsz ? p->n_seeds - i : bsz, NULL, err);
    if (st) {
        fit_state_free(s);
        return st;
    }
    if (p->trials) {
        st = fit_global(s, p->stage_base, p->trials, bsz, p->seed, err);
        if (!st)
            memcpy(x0, fit_best(s)->x, sizeof x0);
    } else if (p->n_seeds)
        memcpy(x0, fit_best(s)->x, sizeof x0);
    else
        memcpy(x0, p->start, (size_t)fp.n_params * sizeof *x0);
    int it = 0;
    if (!st && !p->no_nm)
        st = fit_nelder_mead(s, p->stage_base + 1, x0, &p->nm, &it, err);
    if (st) {
        fit_state_free(s);
        return st;
    }
    const fit_trial *b = fit_best(s);
    memset(r, 0, sizeof *r);
    memcpy(r->x, b->x, sizeof r->x);
    r->loss = b->loss;
    r->evaluations = fit_evaluations(s);
    fit_trials(s, &r->trials);
    r->nm_iterations = it;
    fit_trace_sha256(s, r->trace_sha256);
    if (state)
        *state = s;
    else
        fit_state_free(s);
    return SSB4D_OK;
}
