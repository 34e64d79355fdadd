/* search.c — seeded global search and Nelder–Mead over a box (see search.h). */
#include "fit/search.h"

#include "common/err.h"
#include "common/sha256.h"
#include "common/splitmix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- state: trace + cache -------------------------------------------------------------------- */

typedef struct {
    float key[FIT_MAX_PARAMS];
    double loss;
    int used;
} cache_slot;

struct fit_state {
    fit_problem p;
    fit_trial *trials;
    size_t n_trials, cap_trials, n_evals, best;
    cache_slot *slots; /* open addressing, power-of-two size */
    size_t n_slots, n_used;
};

fit_state *fit_state_new(const fit_problem *p)
{
    if (!p || p->n_params < 1 || p->n_params > FIT_MAX_PARAMS || !p->eval)
        return NULL;
    fit_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->p = *p;
    s->n_slots = 1024;
    s->slots = calloc(s->n_slots, sizeof *s->slots);
    if (!s->slots) {
        free(s);
        return NULL;
    }
    s->best = SIZE_MAX;
    return s;
}

void fit_state_free(fit_state *s)
{
    if (s) {
        free(s->trials);
        free(s->slots);
        free(s);
    }
}

const fit_trial *fit_trials(const fit_state *s, size_t *n)
{
    *n = s->n_trials;
    return s->trials;
}

size_t fit_evaluations(const fit_state *s) { return s->n_evals; }

const fit_trial *fit_best(const fit_state *s) { return s->best == SIZE_MAX ? NULL : &s->trials[s->best]; }

void fit_trace_sha256(const fit_state *s, char hex[65])
{
    ssb4d_sha256 *h = ssb_sha256_new();
    for (size_t i = 0; i < s->n_trials; i++) {
        const fit_trial *t = &s->trials[i];
        ssb_sha256_update(h, &t->stage, sizeof t->stage);
        ssb_sha256_update(h, t->x, (size_t)s->p.n_params * sizeof t->x[0]);
        ssb_sha256_update(h, &t->loss, sizeof t->loss);
    }
    ssb_sha256_final_hex(h, hex);
}

static uint64_t key_hash(const float *k, int n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the float bits */
    const unsigned char *b = (const unsigned char *)k;
    for (size_t i = 0; i < (size_t)n * sizeof(float); i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static cache_slot *cache_find(fit_state *s, const float *key)
{
    int n = s->p.n_params;
    size_t mask = s->n_slots - 1;
    for (size_t i = key_hash(key, n) & mask;; i = (i + 1) & mask) {
        cache_slot *c = &s->slots[i];
        if (!c->used || memcmp(c->key, key, (size_t)n * sizeof(float)) == 0)
            return c;
    }
}

static int cache_grow(fit_state *s)
{
    cache_slot *old = s->slots;
    size_t n_old = s->n_slots;
    cache_slot *slots = calloc(2 * n_old, sizeof *slots);
    if (!slots)
        return -1;
    s->slots = slots;
    s->n_slots = 2 * n_old;
    for (size_t i = 0; i < n_old; i++)
        if (old[i].used)
            *cache_find(s, old[i].key) = old[i];
    free(old);
    return 0;
}

/* Locked → start, periodic → wrapped into [lo, lo + period), others → clamped. */
static void normalise(const fit_problem *p, double *x)
{
    for (int j = 0; j < p->n_params; j++) {
        if (p->locked[j]) {
            x[j] = p->start[j];
        } else if (p->period[j] > 0) {
            double t = fmod(x[j] - p->lo[j], p->period[j]);
            if (t < 0)
                t += p->period[j];
            x[j] = p->lo[j] + t;
        } else {
            x[j] = x[j] < p->lo[j] ? p->lo[j] : x[j] > p->hi[j] ? p->hi[j] : x[j];
        }
    }
}

static ssb4d_status push_trial(fit_state *s, int stage, const double *x, double loss, int cached,
                               ssb4d_err *err)
{
    if (s->n_trials == s->cap_trials) {
        size_t cap = s->cap_trials ? 2 * s->cap_trials : 256;
        fit_trial *t = realloc(s->trials, cap * sizeof *t);
        if (!t)
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory recording the fit's trials");
        s->trials = t;
        s->cap_trials = cap;
    }
    fit_trial *t = &s->trials[s->n_trials];
    memset(t, 0, sizeof *t);
    t->stage = stage;
    t->number = s->n_trials;
    memcpy(t->x, x, (size_t)s->p.n_params * sizeof *x);
    t->loss = loss;
    t->cached = cached;
    /* Ties keep the earlier trial, so the best does not depend on anything but the order. */
    if (s->best == SIZE_MAX || loss < s->trials[s->best].loss)
        s->best = s->n_trials;
    s->n_trials++;
    return SSB4D_OK;
}

ssb4d_status fit_eval_batch(fit_state *s, int stage, const double *x_in, size_t n, double *loss_out,
                            ssb4d_err *err)
{
    int np = s->p.n_params;
    double *x = malloc((n ? n : 1) * (size_t)np * sizeof *x);
    double *loss = malloc((n ? n : 1) * sizeof *loss);
    size_t *miss = malloc((n ? n : 1) * sizeof *miss);
    double *xm = malloc((n ? n : 1) * (size_t)np * sizeof *xm);
    double *lm = malloc((n ? n : 1) * sizeof *lm);
    ssb4d_status st = SSB4D_OK;
    if (!x || !loss || !miss || !xm || !lm) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory in the fit");
        goto out;
    }
    /* Look every candidate up; evaluate the misses (each distinct one once) as one batch. */
    size_t nm = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(x + i * (size_t)np, x_in + i * (size_t)np, (size_t)np * sizeof *x);
        normalise(&s->p, x + i * (size_t)np);
        float key[FIT_MAX_PARAMS] = {0};
        for (int j = 0; j < np; j++)
            key[j] = (float)x[i * (size_t)np + (size_t)j];
        cache_slot *c = cache_find(s, key);
        if (c->used) {
            loss[i] = c->loss;
            miss[i] = SIZE_MAX;
            continue;
        }
        size_t dup = SIZE_MAX;
        for (size_t m = 0; m < nm && dup == SIZE_MAX; m++) {
            int same = 1;
            for (int j = 0; j < np; j++)
                same &= (float)xm[m * (size_t)np + (size_t)j] == key[j];
            if (same)
                dup = m;
        }
        if (dup == SIZE_MAX) {
            for (int j = 0; j < np; j++) /* evaluated at the float32 point the cache keys on */
                xm[nm * (size_t)np + (size_t)j] = key[j];
            dup = nm++;
        }
        miss[i] = dup;
    }
    if (nm) {
        if ((st = s->p.eval(s->p.user, xm, nm, lm, err)))
            goto out;
        s->n_evals += nm;
        for (size_t m = 0; m < nm; m++) {
            if ((s->n_used + 1) * 2 > s->n_slots && cache_grow(s)) {
                st = ssb_fail(err, SSB4D_ENOMEM, "out of memory in the fit's cache");
                goto out;
            }
            float key[FIT_MAX_PARAMS] = {0};
            for (int j = 0; j < np; j++)
                key[j] = (float)xm[m * (size_t)np + (size_t)j];
            cache_slot *c = cache_find(s, key);
            if (!c->used) {
                memcpy(c->key, key, sizeof key);
                c->loss = lm[m];
                c->used = 1;
                s->n_used++;
            }
        }
    }
    /* Trials in candidate order; the first occurrence of a missed point counts as evaluated. */
    for (size_t i = 0; i < n && !st; i++) {
        int cached = miss[i] == SIZE_MAX;
        if (!cached) {
            loss[i] = lm[miss[i]];
            for (size_t k = 0; k < i; k++)
                if (miss[k] == miss[i])
                    cached = 1;
        }
        double xf[FIT_MAX_PARAMS];
        for (int j = 0; j < np; j++)
            xf[j] = (float)x[i * (size_t)np + (size_t)j];
        st = push_trial(s, stage, xf, loss[i], cached, err);
    }
    if (!st && loss_out)
        memcpy(loss_out, loss, n * sizeof *loss);
out:
    free(x);
    free(loss);
    free(miss);
    free(xm);
    free(lm);
    return st;
}

/* ---- global search ----------------------------------------------------------------------------- */

/* The d-dimensional Kronecker (R_d) sequence: alpha_j = phi_d^-(j+1), phi_d the root > 1 of
 * x^(d+1) = x + 1. Low discrepancy in any dimension, and trivially seeded by a shift. */
static double generalised_golden(int d)
{
    double x = 2.0;
    for (int i = 0; i < 60; i++)
        x = pow(1.0 + x, 1.0 / (d + 1));
    return x;
}

ssb4d_status fit_global(fit_state *s, int stage, size_t n_candidates, size_t batch, uint64_t seed,
                        ssb4d_err *err)
{
    const fit_problem *p = &s->p;
    int np = p->n_params, free_idx[FIT_MAX_PARAMS], d = 0;
    for (int j = 0; j < np; j++)
        if (!p->locked[j])
            free_idx[d++] = j;
    if (batch == 0)
        batch = 1;
    double alpha[FIT_MAX_PARAMS], shift[FIT_MAX_PARAMS];
    double g = generalised_golden(d > 0 ? d : 1);
    uint64_t sm = seed;
    for (int k = 0; k < d; k++) {
        alpha[k] = fmod(pow(1.0 / g, k + 1), 1.0);
        shift[k] = (double)(ssb4d_splitmix64(&sm) >> 11) * 0x1.0p-53;
    }
    double *x = malloc(batch * (size_t)np * sizeof *x);
    if (!x)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory in the fit");
    ssb4d_status st = SSB4D_OK;
    for (size_t c0 = 0; c0 < n_candidates && !st; c0 += batch) {
        size_t nb = n_candidates - c0 < batch ? n_candidates - c0 : batch;
        for (size_t i = 0; i < nb; i++) {
            size_t c = c0 + i;
            double *xi = x + i * (size_t)np;
            memcpy(xi, p->start, (size_t)np * sizeof *xi);
            if (c == 0)
                continue; /* the start point */
            for (int k = 0; k < d; k++) {
                int j = free_idx[k];
                double u = fmod(shift[k] + (double)c * alpha[k], 1.0);
                double hi = p->period[j] > 0 ? p->lo[j] + p->period[j] : p->hi[j];
                xi[j] = p->lo[j] + u * (hi - p->lo[j]);
            }
        }
        st = fit_eval_batch(s, stage, x, nb, NULL, err);
    }
    free(x);
    return st;
}

/* ---- Nelder–Mead -------------------------------------------------------------------------------- */

void fit_nm_opts_default(fit_nm_opts *o)
{
    for (int j = 0; j < FIT_MAX_PARAMS; j++)
        o->step[j] = 1.0, o->xscale[j] = 1.0;
    o->step[0] = 2.0; /* C10, nm */
    o->step[1] = 0.5; /* C12, nm (SPEC: >= 0.2) */
    o->step[2] = 5.0; /* phi12, deg (SPEC: >= 2.3) */
    o->xtol = 0.01;
    o->ftol = 3e-6;
    o->max_iter = 80;
}

/* Distance of two points along periodic parameter j: the shorter way round. */
static double pdiff(const fit_problem *p, int j, double a, double b)
{
    double d = a - b;
    if (p->period[j] > 0) {
        d = fmod(d, p->period[j]);
        if (d > p->period[j] / 2)
            d -= p->period[j];
        else if (d < -p->period[j] / 2)
            d += p->period[j];
    }
    return d;
}

/* One point through the cache (a batch of one); the point is normalised in place. */
static ssb4d_status eval1(fit_state *s, int stage, double *x, double *f, ssb4d_err *err)
{
    normalise(&s->p, x);
    for (int j = 0; j < s->p.n_params; j++)
        x[j] = (float)x[j];
    return fit_eval_batch(s, stage, x, 1, f, err);
}

ssb4d_status fit_nelder_mead(fit_state *s, int stage, const double *x0, const fit_nm_opts *o,
                             int *iterations, ssb4d_err *err)
{
    const fit_problem *p = &s->p;
    int np = p->n_params, free_idx[FIT_MAX_PARAMS], d = 0;
    for (int j = 0; j < np; j++)
        if (!p->locked[j])
            free_idx[d++] = j;
    if (iterations)
        *iterations = 0;
    double v[FIT_MAX_PARAMS + 1][FIT_MAX_PARAMS], f[FIT_MAX_PARAMS + 1];
    memcpy(v[0], x0, (size_t)np * sizeof(double));
    ssb4d_status st = eval1(s, stage, v[0], &f[0], err);
    if (st || d == 0)
        return st;
    /* Initial simplex: one step along each free parameter, towards the inside of the box. */
    double batch[FIT_MAX_PARAMS * FIT_MAX_PARAMS], fb[FIT_MAX_PARAMS];
    for (int k = 0; k < d; k++) {
        int j = free_idx[k];
        memcpy(v[k + 1], v[0], (size_t)np * sizeof(double));
        double step = o->step[j];
        if (p->period[j] <= 0 && v[0][j] + step > p->hi[j])
            step = -step;
        v[k + 1][j] += step;
        normalise(p, v[k + 1]);
        for (int i = 0; i < np; i++)
            v[k + 1][i] = (float)v[k + 1][i];
        memcpy(batch + (size_t)k * (size_t)np, v[k + 1], (size_t)np * sizeof(double));
    }
    if ((st = fit_eval_batch(s, stage, batch, (size_t)d, fb, err)))
        return st;
    for (int k = 0; k < d; k++)
        f[k + 1] = fb[k];

    int it = 0;
    for (; it < o->max_iter; it++) {
        /* Order the vertices by loss (stable: insertion sort keeps ties in place). */
        for (int a = 1; a <= d; a++)
            for (int b = a; b > 0 && f[b] < f[b - 1]; b--) {
                double tf = f[b], tv[FIT_MAX_PARAMS];
                f[b] = f[b - 1];
                f[b - 1] = tf;
                memcpy(tv, v[b], sizeof tv);
                memcpy(v[b], v[b - 1], sizeof tv);
                memcpy(v[b - 1], tv, sizeof tv);
            }
        double xspread = 0, fspread = 0;
        for (int a = 1; a <= d; a++) {
            fspread = fmax(fspread, fabs(f[a] - f[0]));
            for (int k = 0; k < d; k++)
                xspread = fmax(xspread, fabs(pdiff(p, free_idx[k], v[a][free_idx[k]], v[0][free_idx[k]])) /
                                            o->xscale[free_idx[k]]);
        }
        if (xspread <= o->xtol && fspread <= o->ftol)
            break;
        /* Centroid of all but the worst, measured from the best (periodic-safe). */
        double c[FIT_MAX_PARAMS];
        memcpy(c, v[0], sizeof c);
        for (int k = 0; k < d; k++) {
            int j = free_idx[k];
            double acc = 0;
            for (int a = 0; a < d; a++)
                acc += pdiff(p, j, v[a][j], v[0][j]);
            c[j] = v[0][j] + acc / d;
        }
        double xr[FIT_MAX_PARAMS], xe[FIT_MAX_PARAMS], xc[FIT_MAX_PARAMS], fr, fe, fc;
        memcpy(xr, c, sizeof xr);
        for (int k = 0; k < d; k++) {
            int j = free_idx[k];
            double w = c[j] + pdiff(p, j, v[d][j], c[j]);
            xr[j] = c[j] + (c[j] - w);
        }
        if ((st = eval1(s, stage, xr, &fr, err)))
            break;
        if (fr < f[0]) {
            memcpy(xe, c, sizeof xe);
            for (int k = 0; k < d; k++) {
                int j = free_idx[k];
                double w = c[j] + pdiff(p, j, v[d][j], c[j]);
                xe[j] = c[j] + 2.0 * (c[j] - w);
            }
            if ((st = eval1(s, stage, xe, &fe, err)))
                break;
            if (fe < fr) {
                memcpy(v[d], xe, sizeof xe);
                f[d] = fe;
            } else {
                memcpy(v[d], xr, sizeof xr);
                f[d] = fr;
            }
            continue;
        }
        if (fr < f[d - 1]) {
            memcpy(v[d], xr, sizeof xr);
            f[d] = fr;
            continue;
        }
        /* Contraction: outside if the reflection improved on the worst, else inside. */
        int outside = fr < f[d];
        memcpy(xc, c, sizeof xc);
        for (int k = 0; k < d; k++) {
            int j = free_idx[k];
            double w = c[j] + pdiff(p, j, v[d][j], c[j]);
            xc[j] = outside ? c[j] + 0.5 * (c[j] - w) : c[j] + 0.5 * (w - c[j]);
        }
        if ((st = eval1(s, stage, xc, &fc, err)))
            break;
        if (fc < (outside ? fr : f[d])) {
            memcpy(v[d], xc, sizeof xc);
            f[d] = fc;
            continue;
        }
        /* Shrink towards the best, evaluated as one batch. */
        for (int a = 1; a <= d; a++) {
            for (int k = 0; k < d; k++) {
                int j = free_idx[k];
                v[a][j] = v[0][j] + 0.5 * pdiff(p, j, v[a][j], v[0][j]);
            }
            normalise(p, v[a]);
            for (int i = 0; i < np; i++)
                v[a][i] = (float)v[a][i];
            memcpy(batch + (size_t)(a - 1) * (size_t)np, v[a], (size_t)np * sizeof(double));
        }
        if ((st = fit_eval_batch(s, stage, batch, (size_t)d, fb, err)))
            break;
        for (int a = 1; a <= d; a++)
            f[a] = fb[a - 1];
    }
    if (iterations)
        *iterations = it;
    return st;
}
