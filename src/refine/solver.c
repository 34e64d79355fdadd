/* solver.c — the staged optimisation (SPEC §13, docs/refine.md "Solver").
 *
 * The object is N phase slices, t_j = e^{iφ_j}, on a grid that covers every position's window.
 * A pass visits the positions in minibatches (a fixed order shuffled by the seed); each
 * minibatch's positions run in parallel (threads over positions), each writes its own gradient
 * crop, and the crops are summed into the object gradient in the minibatch's order: the same bits
 * for any thread count. The object takes Adam steps (per-pixel normalised). The global parameters
 * (C10, C12, φ12, the tilt, Δz) take, after each object pass of their stage, one step along their
 * scaled gradient (full pass), with a parabolic line search on the full loss. Stages: object only,
 * then + aberrations, + tilt, + thickness. */
#include "refine/solver.h"

#include "common/err.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The characteristic scale of each parameter: a step moves the largest scaled one this far. */
static const double h_scale[RP_N] = {5.0, 2.0, 0.05, 0.5e-3, 0.5e-3, 0.0 /* Δz: 5 % of it */};

typedef struct {
    refine_problem *pb;
    const refine_data *d;
    int ns, nt;
    size_t Or, Oc, n, B;
    double dx[2];
    float *phase, *t;          /* ns·Or·Oc; complex ns·Or·Oc */
    float *m1, *m2;            /* Adam */
    float *illum;              /* Or·Oc: electrons through each object pixel over all positions */
    double kappa;              /* the slices' similarity weight (docs/refine.md "Regularisation") */
    double *gacc;              /* ns·Or·Oc */
    long *o0, *o1;             /* crop corners */
    double *s0, *s1;           /* sub-pixel places in the window */
    size_t *order;
    refine_model *model;
    refine_work **work;
    float **gt;                /* per thread: ns·2n */
    float **cb;                /* per thread: n, one position's counts on the grid */
    float *gb;                 /* B·ns·n: per-position phase gradients */
    double *gp, *lp, *sp;      /* B·RP_N, B, B */
    double scale;              /* the dose: fitted (Poisson's closed form) after each object pass */
    double sum_I;              /* Σ over the last pass of the model's valid intensity */
    long adam_t;
    double lr;                 /* Adam's step this pass (decays over the last passes) */
    double K;                  /* Σ (c log c − c) over the valid pixels: deviance = 2(L + K) */
} solver;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The detector-frame place (Å) of region position (i, j): k_s·R_s = k_det·R_det with
 * k_s = Rot·swap^flip·k_det (ssb_bf_k), so R_det = swap^flip·Rotᵀ·R_s. */
static void position_det(const refine_problem *pb, size_t i, size_t j, double out[2])
{
    double a = -pb->geo.rotation_deg * (M_PI / 180.0), ca = cos(a), sa = sin(a);
    double r0 = (double)i * pb->step_A[0], r1 = (double)j * pb->step_A[1];
    double v0 = ca * r0 - sa * r1, v1 = sa * r0 + ca * r1;
    out[0] = pb->geo.flip ? v1 : v0;
    out[1] = pb->geo.flip ? v0 : v1;
}

void refine_object_grid(const refine_problem *pb, size_t grid[2], double dx[2])
{
    const refine_data *d = pb->d;
    int nn[2] = {d->nr, d->nc};
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
    size_t rows = d->npos / pb->scan_cols;
    for (int a = 0; a < 2; a++)
        dx[a] = 1.0 / (nn[a] * pb->geo.dk[a]);
    size_t corners[4][2] = {{0, 0}, {0, pb->scan_cols - 1}, {rows - 1, 0}, {rows - 1, pb->scan_cols - 1}};
    for (int c = 0; c < 4; c++) {
        double R[2];
        position_det(pb, corners[c][0], corners[c][1], R);
        for (int a = 0; a < 2; a++) {
            lo[a] = fmin(lo[a], R[a] / dx[a]);
            hi[a] = fmax(hi[a], R[a] / dx[a]);
        }
    }
    for (int a = 0; a < 2; a++)
        grid[a] = (size_t)ceil(hi[a] - lo[a]) + (size_t)nn[a] + 3;
}

static void solver_free(solver *S)
{
    free(S->phase);
    free(S->t);
    free(S->m1);
    free(S->m2);
    free(S->illum);
    free(S->gacc);
    free(S->o0);
    free(S->o1);
    free(S->s0);
    free(S->s1);
    free(S->order);
    if (S->work)
        for (int i = 0; i < S->nt; i++)
            refine_work_delete(S->work[i]);
    free(S->work);
    if (S->gt)
        for (int i = 0; i < S->nt; i++)
            fftwf_free(S->gt[i]);
    free(S->gt);
    if (S->cb)
        for (int i = 0; i < S->nt; i++)
            free(S->cb[i]);
    free(S->cb);
    free(S->gb);
    free(S->gp);
    free(S->lp);
    free(S->sp);
    refine_model_delete(S->model);
    memset(S, 0, sizeof *S);
}

static ssb4d_status solver_init(solver *S, refine_problem *pb, ssb4d_err *err)
{
    memset(S, 0, sizeof *S);
    const refine_data *d = pb->d;
    S->pb = pb, S->d = d, S->ns = pb->ns, S->n = d->n;
    S->nt = pb->threads;
    S->B = pb->batch < d->npos ? pb->batch : d->npos;
    size_t grid[2];
    refine_object_grid(pb, grid, S->dx);
    S->Or = grid[0], S->Oc = grid[1];
    size_t on = (size_t)S->ns * S->Or * S->Oc;
    S->phase = calloc(on, sizeof(float));
    S->t = malloc(2 * on * sizeof(float));
    S->m1 = calloc(on, sizeof(float));
    S->m2 = calloc(on, sizeof(float));
    S->illum = calloc(S->Or * S->Oc, sizeof(float));
    S->kappa = pb->kappa;
    S->gacc = calloc(on, sizeof(double));
    S->o0 = malloc(d->npos * sizeof(long));
    S->o1 = malloc(d->npos * sizeof(long));
    S->s0 = malloc(d->npos * sizeof(double));
    S->s1 = malloc(d->npos * sizeof(double));
    S->order = malloc(d->npos * sizeof(size_t));
    S->work = calloc((size_t)S->nt, sizeof *S->work);
    S->gt = calloc((size_t)S->nt, sizeof *S->gt);
    S->cb = calloc((size_t)S->nt, sizeof *S->cb);
    S->gb = malloc(S->B * (size_t)S->ns * S->n * sizeof(float));
    S->gp = malloc(S->B * RP_N * sizeof(double));
    S->lp = malloc(S->B * sizeof(double));
    S->sp = malloc(S->B * sizeof(double));
    S->scale = d->mean_total;
    S->model = refine_model_new(d->nr, d->nc, S->ns);
    if (!S->phase || !S->t || !S->m1 || !S->m2 || !S->illum || !S->gacc || !S->o0 || !S->o1 || !S->s0 || !S->s1 ||
        !S->order || !S->work || !S->gt || !S->cb || !S->gb || !S->gp || !S->lp || !S->sp || !S->model) {
        solver_free(S);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for the refinement's object (%zux%zu x %d slices)",
                        S->Or, S->Oc, pb->ns);
    }
    for (int i = 0; i < S->nt; i++) {
        S->work[i] = refine_work_new(S->model);
        S->gt[i] = fftwf_malloc(2 * S->n * (size_t)S->ns * sizeof(float));
        S->cb[i] = malloc(S->n * sizeof(float));
        if (!S->work[i] || !S->gt[i] || !S->cb[i]) {
            solver_free(S);
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory for the refinement's thread buffers");
        }
    }
    for (size_t q = 0; q < on; q++)
        S->t[2 * q] = 1.0f, S->t[2 * q + 1] = 0.0f;
    /* crops: the window's corner o = floor(u) − n/2, the probe at u − o in it */
    double lo[2] = {INFINITY, INFINITY};
    size_t rows = d->npos / pb->scan_cols;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < pb->scan_cols; j++) {
            double R[2];
            position_det(pb, i, j, R);
            lo[0] = fmin(lo[0], R[0] / S->dx[0]);
            lo[1] = fmin(lo[1], R[1] / S->dx[1]);
        }
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < pb->scan_cols; j++) {
            size_t p = i * pb->scan_cols + j;
            double R[2];
            position_det(pb, i, j, R);
            double u0 = R[0] / S->dx[0] - lo[0] + d->nr / 2 + 1, u1 = R[1] / S->dx[1] - lo[1] + d->nc / 2 + 1;
            S->o0[p] = (long)floor(u0) - d->nr / 2;
            S->o1[p] = (long)floor(u1) - d->nc / 2;
            S->s0[p] = u0 - (double)S->o0[p];
            S->s1[p] = u1 - (double)S->o1[p];
        }
    for (size_t p = 0; p < d->npos; p++)
        S->order[p] = p;
    /* the deviance's constant */
    double K = 0.0;
    for (size_t p = 0; p < d->npos; p++) {
        const float *c = d->cnt + p * d->nv;
        for (size_t v = 0; v < d->nv; v++)
            K += c[v] > 0 ? c[v] * log((double)c[v]) - c[v] : 0.0;
    }
    S->K = K;
    return SSB4D_OK;
}

/* Reports progress f (0..1 of this solve) within the share the caller gave it (pb->prog). */
static int progress(const refine_problem *pb, double f)
{
    double lo = pb->prog[0], hi = pb->prog[1] > pb->prog[0] ? pb->prog[1] : 1.0;
    return ssb4d_mem_progress(pb->mem, lo + (hi - lo) * f);
}

static void shuffle(solver *S, uint64_t pass)
{
    uint64_t st = S->pb->seed * 0x2545F4914F6CDD1Dull + pass;
    for (size_t p = 0; p < S->d->npos; p++)
        S->order[p] = p;
    for (size_t p = S->d->npos; p > 1; p--) {
        size_t j = (size_t)(splitmix(&st) % p);
        size_t tmp = S->order[p - 1];
        S->order[p - 1] = S->order[j];
        S->order[j] = tmp;
    }
}

/* Rewrites t = e^{iφ} over rows [r0, r1) × cols [c0, c1) of every slice. */
static void update_t(solver *S, long r0, long r1, long c0, long c1)
{
    for (int s = 0; s < S->ns; s++)
        for (long r = r0; r < r1; r++)
            for (long c = c0; c < c1; c++) {
                size_t q = ((size_t)s * S->Or + (size_t)r) * S->Oc + (size_t)c;
                S->t[2 * q] = cosf(S->phase[q]);
                S->t[2 * q + 1] = sinf(S->phase[q]);
            }
}

enum { PASS_OBJECT, PASS_GRAD, PASS_LOSS };

/* One pass over the positions. PASS_OBJECT: Adam steps on the object per minibatch;
 * PASS_GRAD: object fixed; PASS_LOSS: the loss only. With g, the parameters' gradient is summed
 * into it (in an object pass: over the evolving object, the minibatches' sum). Returns
 * the loss (Σ over positions, in the pass's order), or NAN when cancelled. */
static double run_pass(solver *S, int mode, uint64_t pass, double *g, double prog0, double prog1)
{
    refine_problem *pb = S->pb;
    const refine_data *d = S->d;
    size_t n = S->n, ns = (size_t)S->ns, npos = d->npos;
    if (mode == PASS_OBJECT)
        shuffle(S, pass);
    else
        for (size_t p = 0; p < npos; p++)
            S->order[p] = p;
    if (g)
        memset(g, 0, RP_N * sizeof(double));
    S->sum_I = 0.0;
    double loss = 0.0, lr = S->lr;
    const double b1 = 0.9, b2 = 0.999;
    for (size_t b0 = 0; b0 < npos; b0 += S->B) {
        long nb = (long)(npos - b0 < S->B ? npos - b0 : S->B);
        int want_obj = mode == PASS_OBJECT, want_g = g != NULL;
        long ncpu = nb; /* the positions the threads below compute: none when a device did */
        if (pb->accel) {
            if (refine_accel_batch(pb->accel, S->model, S->t, S->order + b0, (size_t)nb, S->o0, S->o1, S->s0, S->s1,
                                   S->scale, pb->amplitude, want_obj, want_g, S->lp, S->sp, S->gp, S->gb))
                return NAN; /* the caller reports refine_accel_error */
            ncpu = 0;
        }
#pragma omp parallel for num_threads(S->nt) schedule(dynamic, 1)
        for (long b = 0; b < ncpu; b++) {
            int tid = omp_get_thread_num();
            size_t p = S->order[b0 + (size_t)b];
            float *obj[64];
            for (size_t s = 0; s < ns; s++)
                obj[s] = S->t + 2 * (((s * S->Or) + (size_t)S->o0[p]) * S->Oc + (size_t)S->o1[p]);
            double *gp = S->gp + (size_t)b * RP_N;
            memset(gp, 0, RP_N * sizeof(double));
            refine_data_expand(d, p, S->cb[tid]);
            S->lp[b] = refine_model_position(S->model, obj, S->Oc, S->s0[p], S->s1[p], S->cb[tid], d->valid,
                                             S->scale, pb->amplitude, S->work[tid],
                                             want_obj ? S->gt[tid] : NULL, want_g ? gp : NULL, NULL, NULL,
                                             &S->sp[b]);
            if (want_obj) { /* ∂L/∂φ = Im(G_t·conj(t)) on the crop */
                float *o = S->gb + (size_t)b * ns * n;
                for (size_t s = 0; s < ns; s++)
                    for (int i = 0; i < d->nr; i++) {
                        const float *tt = obj[s] + 2 * (size_t)i * S->Oc;
                        const float *G = S->gt[tid] + 2 * (s * n + (size_t)i * d->nc);
                        float *oo = o + s * n + (size_t)i * d->nc;
                        for (int j = 0; j < d->nc; j++)
                            oo[j] = G[2 * j + 1] * tt[2 * j] - G[2 * j] * tt[2 * j + 1];
                    }
            }
        }
        long r0 = LONG_MAX, r1 = 0, c0 = LONG_MAX, c1 = 0;
        for (long b = 0; b < nb; b++) { /* fixed order: the same bits for any thread count */
            loss += S->lp[b];
            S->sum_I += S->sp[b];
            if (g)
                for (int k = 0; k < RP_N; k++)
                    g[k] += S->gp[(size_t)b * RP_N + k];
            if (mode != PASS_OBJECT)
                continue;
            size_t p = S->order[b0 + (size_t)b];
            const float *o = S->gb + (size_t)b * ns * n;
            for (size_t s = 0; s < ns; s++)
                for (int i = 0; i < d->nr; i++) {
                    double *a = S->gacc + ((s * S->Or) + (size_t)S->o0[p] + (size_t)i) * S->Oc + (size_t)S->o1[p];
                    const float *oo = o + s * n + (size_t)i * d->nc;
                    for (int j = 0; j < d->nc; j++)
                        a[j] += oo[j];
                }
            r0 = S->o0[p] < r0 ? S->o0[p] : r0;
            c0 = S->o1[p] < c0 ? S->o1[p] : c0;
            r1 = S->o0[p] + d->nr > r1 ? S->o0[p] + d->nr : r1;
            c1 = S->o1[p] + d->nc > c1 ? S->o1[p] + d->nc : c1;
        }
        if (mode == PASS_OBJECT) {
            S->adam_t++;
            double bc1 = 1.0 - pow(b1, (double)S->adam_t), bc2 = 1.0 - pow(b2, (double)S->adam_t);
            if (ns > 1 && S->kappa > 0) { /* the slices' similarity: κ·4·illum·(φ_j − φ̄) */
                double w = 4.0 * S->kappa * (double)nb / (double)npos;
                for (long r = r0; r < r1; r++)
                    for (long c = c0; c < c1; c++) {
                        size_t q0 = (size_t)r * S->Oc + (size_t)c, on = S->Or * S->Oc;
                        double mean = 0.0;
                        for (size_t s = 0; s < ns; s++)
                            mean += S->phase[s * on + q0];
                        mean /= (double)ns;
                        for (size_t s = 0; s < ns; s++)
                            S->gacc[s * on + q0] += w * S->illum[q0] * (S->phase[s * on + q0] - mean);
                    }
            }
            for (size_t s = 0; s < ns; s++)
                for (long r = r0; r < r1; r++)
                    for (long c = c0; c < c1; c++) {
                        size_t q = ((s * S->Or) + (size_t)r) * S->Oc + (size_t)c;
                        double gq = S->gacc[q];
                        S->gacc[q] = 0.0;
                        double m = b1 * S->m1[q] + (1 - b1) * gq, v = b2 * S->m2[q] + (1 - b2) * gq * gq;
                        S->m1[q] = (float)m;
                        S->m2[q] = (float)v;
                        double mh = m / bc1, vh = v / bc2;
                        if (vh > 0)
                            S->phase[q] -= (float)(lr * mh / (sqrt(vh) + 1e-12 + 1e-8 * sqrt(vh)));
                    }
            update_t(S, r0, r1, c0, c1);
        }
        double f = prog0 + (prog1 - prog0) * (double)(b0 + (size_t)nb) / (double)npos;
        if (progress(pb, f))
            return NAN;
    }
    return loss;
}

static void clamp_theta(const refine_problem *pb, double th[RP_N])
{
    if (th[RP_DZ] < pb->dz_range[0])
        th[RP_DZ] = pb->dz_range[0];
    if (th[RP_DZ] > pb->dz_range[1])
        th[RP_DZ] = pb->dz_range[1];
}

static double loss_at(solver *S, const double th[RP_N], double prog)
{
    refine_model_set(S->model, &S->pb->geo, th);
    return run_pass(S, PASS_LOSS, 0, NULL, prog, prog);
}

/* The curvature of the full loss along parameter k (a central second difference with step hk),
 * at the current θ; L0 the loss there. NaN when cancelled. */
static double curvature(solver *S, int k, double hk, double L0, double prog)
{
    double tp[RP_N], tm[RP_N];
    memcpy(tp, S->pb->th, sizeof tp);
    memcpy(tm, S->pb->th, sizeof tm);
    tp[k] += hk;
    tm[k] -= hk;
    double Lp = loss_at(S, tp, prog), Lm = loss_at(S, tm, prog);
    refine_model_set(S->model, &S->pb->geo, S->pb->th);
    return (Lp - 2.0 * L0 + Lm) / (hk * hk);
}

static double h_of(const refine_problem *pb, int k) { return k == RP_DZ ? 0.05 * pb->th[RP_DZ] : h_scale[k]; }

/* One global step from the gradient g of the object pass: a diagonal Newton direction (the curvature of each parameter measured by
 * finite differences when it joins and every few passes), each component held within two of its
 * scales, then a parabolic line search on the full loss along it. alpha: the trial step
 * (1 = the Newton step), adapted. Returns 0, or −1 when cancelled. */
static int global_step(solver *S, const int act[RP_N], const double g[RP_N], double *curv, const int *refresh,
                       double *alpha, double prog)
{
    refine_problem *pb = S->pb;
    double dir[RP_N];
    double L0 = loss_at(S, pb->th, prog);
    if (isnan(L0))
        return -1;
    int any = 0;
    for (int k = 0; k < RP_N; k++) {
        dir[k] = 0.0;
        if (!act[k])
            continue;
        double h = h_of(pb, k);
        if (refresh[k] || isnan(curv[k])) {
            curv[k] = curvature(S, k, 0.3 * h, L0, prog);
            if (isnan(curv[k]))
                return -1;
        }
        /* where the loss is not convex along k, a step of one scale downhill */
        dir[k] = curv[k] > 0 ? -g[k] / curv[k] : (g[k] > 0 ? -h : h);
        dir[k] = fmax(-2.0 * h, fmin(2.0 * h, dir[k]));
        any |= dir[k] != 0.0;
    }
    if (!any)
        return 0;
    double slope = 0.0;
    for (int k = 0; k < RP_N; k++)
        slope += g[k] * dir[k];
    if (!(slope < 0))
        return 0;
    double a1 = *alpha, th1[RP_N], th2[RP_N];
    for (int k = 0; k < RP_N; k++)
        th1[k] = pb->th[k] + a1 * dir[k];
    clamp_theta(pb, th1);
    double L1 = loss_at(S, th1, prog);
    if (isnan(L1))
        return -1;
    double c = (L1 - L0 - slope * a1) / (a1 * a1);
    double a2 = c > 0 ? -slope / (2.0 * c) : 2.0 * a1;
    a2 = fmin(fmax(a2, 0.1 * a1), 2.0 * a1);
    if (L1 < L0 && fabs(a2 - a1) < 0.3 * a1) { /* the parabola agrees with the trial: keep it */
        memcpy(pb->th, th1, sizeof th1);
        *alpha = fmin(a1 * 1.2, 1.0);
        refine_model_set(S->model, &pb->geo, pb->th);
        return 0;
    }
    for (int k = 0; k < RP_N; k++)
        th2[k] = pb->th[k] + a2 * dir[k];
    clamp_theta(pb, th2);
    double L2 = loss_at(S, th2, prog);
    if (isnan(L2))
        return -1;
    if (L2 <= L1 && L2 < L0) {
        memcpy(pb->th, th2, sizeof th2);
        *alpha = fmin(fmax(a2, 0.1), 1.0);
    } else if (L1 < L0) {
        memcpy(pb->th, th1, sizeof th1);
        *alpha = fmin(a1 * 1.5, 1.0);
    } else {
        *alpha = fmax(0.3 * fmin(a1, a2), 0.05);
    }
    refine_model_set(S->model, &pb->geo, pb->th);
    return 0;
}

/* The final evaluation: the deviance and its expectation (one forward pass). */
static int final_eval(solver *S, refine_solution *out, double prog)
{
    refine_problem *pb = S->pb;
    const refine_data *d = S->d;
    size_t n = S->n;
    refine_model_set(S->model, &pb->geo, pb->th);
    if (progress(pb, prog))
        return -1;
    /* the expected deviance from the model's own intensities (a table over log μ) */
    enum { NT = 512 };
    double tab[NT + 1], lmin = log(1e-6), lmax = log(30.0);
    for (int i = 0; i <= NT; i++)
        tab[i] = refine_expected_deviance(exp(lmin + (lmax - lmin) * i / NT));
    double *ep = calloc(d->npos, sizeof(double)), *dv = calloc(d->npos, sizeof(double));
    float **I = calloc((size_t)S->nt, sizeof(float *));
    int ok = ep && dv && I;
    for (int t = 0; ok && t < S->nt; t++)
        ok = (I[t] = malloc(n * sizeof(float))) != NULL;
    if (ok) {
#pragma omp parallel for num_threads(S->nt) schedule(dynamic, 4)
        for (long pl = 0; pl < (long)d->npos; pl++) {
            size_t p = (size_t)pl;
            int tid = omp_get_thread_num();
            float *obj[64];
            for (size_t s = 0; s < (size_t)S->ns; s++)
                obj[s] = S->t + 2 * (((s * S->Or) + (size_t)S->o0[p]) * S->Oc + (size_t)S->o1[p]);
            refine_data_expand(d, p, S->cb[tid]);
            refine_model_position(S->model, obj, S->Oc, S->s0[p], S->s1[p], S->cb[tid], d->valid, S->scale,
                                  pb->amplitude, S->work[tid], NULL, NULL, I[tid], &dv[p], NULL);
            double e = 0.0;
            for (size_t q = 0; q < n; q++) {
                if (!d->valid[q])
                    continue;
                double mu = I[tid][q];
                if (mu >= 30.0)
                    e += 1.0 + 1.0 / (6.0 * mu) + 1.0 / (6.0 * mu * mu);
                else if (mu > 1e-6) {
                    double x = (log(mu) - lmin) / (lmax - lmin) * NT;
                    int i = (int)x;
                    i = i >= NT ? NT - 1 : i;
                    e += tab[i] + (x - i) * (tab[i + 1] - tab[i]);
                }
            }
            ep[p] = e;
        }
        double e = 0.0, v = 0.0;
        for (size_t p = 0; p < d->npos; p++)
            e += ep[p], v += dv[p];
        out->dev_expected = e / (double)d->npos;
        out->dev = v / (double)d->npos;
    } else
        out->dev_expected = out->dev = NAN;
    if (I)
        for (int t = 0; t < S->nt; t++)
            free(I[t]);
    free(I);
    free(ep);
    free(dv);
    refine_model_set(S->model, &pb->geo, pb->th);
    return 0;
}

/* The illumination map: Σ over positions of scale·|ψ0|² on the object grid (the probe's
 * intensity at its integer place), the data term's curvature scale per pixel. */
static int compute_illum(solver *S)
{
    const refine_data *d = S->d;
    float *pr = malloc(2 * S->n * sizeof(float));
    if (!pr)
        return -1;
    refine_model_probe(S->model, pr);
    memset(S->illum, 0, S->Or * S->Oc * sizeof(float));
    for (size_t p = 0; p < d->npos; p++) {
        long c0 = (long)floor(S->s0[p] + 0.5), c1 = (long)floor(S->s1[p] + 0.5);
        for (int i = 0; i < d->nr; i++)
            for (int j = 0; j < d->nc; j++) {
                size_t q = (size_t)(((i - c0) % d->nr + d->nr) % d->nr) * d->nc + (size_t)(((j - c1) % d->nc + d->nc) % d->nc);
                float v = pr[2 * q] * pr[2 * q] + pr[2 * q + 1] * pr[2 * q + 1];
                S->illum[((size_t)S->o0[p] + (size_t)i) * S->Oc + (size_t)S->o1[p] + (size_t)j] += (float)(S->scale * v);
            }
    }
    free(pr);
    return 0;
}

void refine_solution_free(refine_solution *s)
{
    if (!s)
        return;
    free(s->phase);
    free(s->history);
    free(s->probe);
    memset(s, 0, sizeof *s);
}

static ssb4d_status solve_inner(refine_problem *pb, refine_solution *out, ssb4d_err *err)
{
    memset(out, 0, sizeof *out);
    if (pb->ns > 64)
        return ssb_fail(err, SSB4D_EINVAL, "refine: at most 64 slices, got %d", pb->ns);
    solver S;
    ssb4d_status st = solver_init(&S, pb, err);
    if (st)
        return st;
    int P = pb->iterations;
    out->history = calloc((size_t)P, sizeof(double));
    if (!out->history) {
        solver_free(&S);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    /* stage starts: object only for the first 30 % of the passes, then the aberrations, the
     * tilt (from 40 %), the thickness (from 50 %) */
    int start[RP_N] = {0};
    int s_ab = (int)ceil(0.3 * P), s_tilt = (int)ceil(0.4 * P), s_dz = (int)ceil(0.5 * P);
    start[RP_C10] = start[RP_C12] = start[RP_PHI12] = s_ab;
    start[RP_T0] = start[RP_T1] = s_tilt;
    start[RP_DZ] = s_dz;
    double alpha = 1.0, prev = NAN, curv[RP_N];
    int joined[RP_N] = {0};
    double glast[RP_N] = {0};
    for (int k = 0; k < RP_N; k++)
        curv[k] = NAN;
    refine_model_set(S.model, &pb->geo, pb->th);
    if (compute_illum(&S)) {
        solver_free(&S);
        refine_solution_free(out);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    for (int it = 0; it < P; it++) {
        double f0 = 0.03 + 0.9 * it / P, f1 = 0.03 + 0.9 * (it + 1) / P;
        int act[RP_N], any = 0;
        for (int k = 0; k < RP_N; k++)
            any |= act[k] = pb->active[k] && it >= start[k];
        /* Adam's step: constant, then halved every 10 % of the passes over the last 40 %, so the
         * minibatches' noise settles and the loss converges */
        double base = pb->lr > 0 ? pb->lr : 0.05, late = it - 0.6 * P;
        S.lr = late > 0 ? base * pow(0.5, late / (0.1 * P)) : base;
        double g[RP_N] = {0};
        double L = run_pass(&S, PASS_OBJECT, (uint64_t)it, any ? g : NULL, f0, f1);
        memcpy(glast, g, sizeof g);
        if (isnan(L)) {
            solver_free(&S);
            refine_solution_free(out);
            return ssb_fail(err, SSB4D_ECANCELLED, "refine: cancelled");
        }
        out->history[out->n_history++] = 2.0 * (L + S.K) / (double)S.d->npos;
        if (S.sum_I > 0) /* the dose's maximum-likelihood value for the current model */
            S.scale *= S.d->sum_valid / S.sum_I;
        int refresh[RP_N];
        for (int k = 0; k < RP_N; k++) { /* on joining, and every 10 passes */
            refresh[k] = act[k] && (!joined[k] || (it - start[k]) % 10 == 9);
            joined[k] |= act[k];
        }
        if (any && global_step(&S, act, g, curv, refresh, &alpha, f1)) {
            solver_free(&S);
            refine_solution_free(out);
            return ssb_fail(err, SSB4D_ECANCELLED, "refine: cancelled");
        }
        if (!isnan(prev))
            out->last_change = fabs(prev - L) / fabs(L + S.K);
        prev = L;
    }
    for (int k = 0; k < RP_N; k++) {
        out->curv[k] = pb->active[k] ? curv[k] / (double)S.d->npos : NAN;
        out->grad[k] = glast[k] / (double)S.d->npos;
    }
    if (final_eval(&S, out, 0.95)) {
        solver_free(&S);
        refine_solution_free(out);
        return ssb_fail(err, SSB4D_ECANCELLED, "refine: cancelled");
    }
    out->Or = S.Or, out->Oc = S.Oc;
    out->dx[0] = S.dx[0], out->dx[1] = S.dx[1];
    /* What the data do not constrain is not shown: object pixels the probes lit with under
     * REFINE_LIT of the most-lit pixel's electrons (the grid's margin around the scanned field,
     * where only the probe's tails reach and the steps leave noise) are 0 in the output. */
    {
        size_t on = S.Or * S.Oc;
        float imax = 0.0f;
        for (size_t q = 0; q < on; q++)
            imax = S.illum[q] > imax ? S.illum[q] : imax;
        for (size_t q = 0; q < on; q++)
            if (!(S.illum[q] >= REFINE_LIT * imax))
                for (int j = 0; j < pb->ns; j++)
                    S.phase[(size_t)j * on + q] = 0.0f;
    }
    out->phase = S.phase;
    S.phase = NULL;
    out->probe = malloc(2 * S.n * sizeof(float));
    if (out->probe)
        refine_model_probe(S.model, out->probe);
    solver_free(&S);
    if (!out->probe) {
        refine_solution_free(out);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    return SSB4D_OK;
}

ssb4d_status refine_solve(refine_problem *pb, refine_solution *out, ssb4d_err *err)
{
    size_t grid[2], det[2] = {(size_t)pb->d->nr, (size_t)pb->d->nc};
    double dx[2];
    refine_object_grid(pb, grid, dx);
    size_t B = pb->batch < pb->d->npos ? pb->batch : pb->d->npos;
    size_t ws = refine_workspace_bytes(0, det, grid, pb->ns, B, pb->threads);
    /* the solver's buffers, counted in the memory context as one block (the patterns are counted
     * where they are allocated, batch.c) */
    ssb4d_status st = ssb4d_mem_external(pb->mem, ws, 1, "refine workspace", err);
    if (st)
        return st;
    st = solve_inner(pb, out, err);
    ssb4d_mem_external(pb->mem, ws, 0, NULL, NULL);
    return st;
}

size_t refine_workspace_bytes(size_t npos, const size_t det[2], const size_t obj[2], int slices, size_t batch,
                              int threads)
{
    size_t n = det[0] * det[1], on = obj[0] * obj[1] * (size_t)slices;
    size_t data = npos * n * sizeof(float) + n;
    size_t object = on * (sizeof(float) * 5 + sizeof(double)); /* φ, t (2), Adam (2), gradient */
    size_t per_batch = batch * ((size_t)slices * n * sizeof(float) + (RP_N + 1) * sizeof(double));
    size_t per_thread = (size_t)threads * (2 * n * sizeof(float) * (3 * (size_t)slices + 3) + n * sizeof(float));
    size_t model = 2 * n * sizeof(float) * 6;
    return data + object + per_batch + per_thread + model;
}
