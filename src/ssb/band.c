/* band.c — the thick-sample band objective of SPEC 5.6 for a batch of parameter sets.
 *
 *   fit(θ) = Σ_{q∈band} w_q (|N(q)|² − E(q)) / D(q),  N(q) = Σ_k G(q,k)·conj(γ(q,k)),
 *   D(q) = Σ_k |γ(q,k)|²,  E(q) = Σ_k T_k |γ(q,k)|²
 *
 * E is the counting noise's expected share of |N|²: a pixel's Poisson counts put a white noise of
 * variance T_k (its total counts) into every bin of its spectrum, so without E the noise adds
 * Σ_k T_k|γ|²/Σ_k|γ|² to each bin: a |γ|-weighted mean of the pixels' counts, which depends on θ
 * when the BF disk is not flat and pulled the fit's C10 by 0.25 nm at 4,500 electrons per
 * pattern (Au, 300 kV, 25 mrad; docs/fit.md). SPEC 5.6's objective is this with E = 0.
 *
 * with γ unnormalised (t1·w1 − t2·w2), w_q = 2 on the stored half-plane except columns 0 and nx/2.
 * Frequencies are fftfreq values (an even axis's Nyquist bin at −1/(2s), as NumPy); the default
 * band lies well inside Nyquist, where the half-plane weighting is exact for even-m χ.
 *
 * One pass over G per batch: BF pixels in logical blocks of SSB_BLOCK, each block's partial sums
 * (every parameter set × every band bin) made by one thread in BF order and added to the totals
 * in block order (an OpenMP ordered loop). G is read in groups of whole blocks (G_group: resident
 * float32 planes in place, half planes converted, streamed planes rebuilt), so neither the group
 * size nor how G is held changes the order of the sums. Each set may carry its own scan–detector
 * rotation; the geometry of a (q,k) pair (k, apertures, q·k) is made once per distinct rotation
 * and shared by that rotation's sets; everything else is per parameter set, so fit[i] depends
 * only on set i and its rotation.
 *
 * Fast kernel (χ = C10, C12 only; SPEC 5.2 quadratic form χ(v) = πλ vᵀMv):
 *   χ(q∓k) = χ(q) ∓ u + χ(k), u = q·b, b = 2πλ M k, hence
 *   conj(γ) = A(k)·e^{−iu}·(w1 A(q−k) e^{iχ(q)} − w2 A(q+k) e^{−iχ(q)}),
 *   and e^{−iu} = R(row)·C(col) from per-pixel tables. The sinc arguments are
 *   x1,2 = (t/2)(∓πλ|q|² + 2π q·(λk − τ)), so sin x = Im(e^{∓i(t/2)πλ|q|²}·R'(row)·C'(col)):
 *   no trigonometric call per bin. Other aberrations use the generic kernel (direct P(q∓k)). */
#include "common/block.h"
#include "common/err.h"
#include "common/parallel.h"
#include "dist/dist.h"
#include "optics/optics.h"
#include "ssb/backend.h"
#include "ssb/block_pass.h"
#include "ssb/ssb_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>


void ssb4d_band_opts_default(ssb4d_band_opts *o)
{
    memset(o, 0, sizeof *o);
    o->band_lo_inv_A = 0.2;
    o->band_hi_inv_A = 0.9;
}

/* ---- the band's bins, shared by every parameter set and rotation ------------------------- */

typedef struct {
    const struct ssb4d_G *G;
    double lambda, alpha0, ang[2];
    double in2, out2;   /* aperture(): |v|² below which A = 1, above which A = 0, exactly */
    size_t nb;          /* band bins (stored half-plane) */
    size_t *off;        /* bin → offset in a plane (row·nxh + col) */
    int *rs, *cs;       /* bin → compact row / column slot */
    double *qx, *qy, *q2, *wq;
    size_t nr, nc;      /* rows / columns that hold band bins */
    double *rq, *cq;    /* their frequencies */
} band_geom;

/* k of every BF pixel under one scan–detector rotation (SPEC 5.1: a rotation touches k only). */
typedef struct {
    double *kx, *ky, *Ak; /* rotated k, A(k) */
} band_rot;

/* ssb_aperture's value, without its square roots and division away from the edge. Where λ|v| lies
 * more than half the widest pixel (plus a margin far above rounding) inside or outside α0, the
 * clamp gives exactly 1 or 0; only the one-pixel annulus of the edge is evaluated in full. So the
 * bits are ssb_aperture's everywhere, and a k table per rotation stays cheap. */
static inline double aperture(const band_geom *b, double vx, double vy)
{
    double r2 = vx * vx + vy * vy;
    if (r2 >= b->out2)
        return 0.0;
    if (r2 <= b->in2)
        return 1.0;
    return ssb_aperture(b->lambda, b->alpha0, b->ang[0], b->ang[1], vx, vy);
}

static void aperture_bounds(band_geom *b)
{
    double wmax = fmax(b->ang[0], b->ang[1]), half = 0.5 * wmax * (1 + 1e-6);
    b->in2 = -1.0;
    b->out2 = INFINITY;
    if (!(wmax > 0) || !isfinite(wmax) || !(b->lambda > 0))
        return;
    double hi = (b->alpha0 + half) / b->lambda, lo = (b->alpha0 - half) / b->lambda;
    b->out2 = hi * hi;
    if (lo > 0)
        b->in2 = lo * lo;
}

static void geom_free(band_geom *b, ssb4d_mem *mem)
{
    ssb4d_mem_free(mem, b->off, 0);
    ssb4d_mem_free(mem, b->rs, 0);
    ssb4d_mem_free(mem, b->cs, 0);
    ssb4d_mem_free(mem, b->qx, 0);
    ssb4d_mem_free(mem, b->rq, 0);
    memset(b, 0, sizeof *b);
}

/* ---- workspace: the band's sizes, and the order the calls below use them in ---------------- */

size_t band_bins(size_t ny, size_t nx, const double step[2], double lo, double hi, int *row_slot, int *col_slot,
                 size_t *nr, size_t *nc)
{
    size_t nxh = nx / 2 + 1, nb = 0;
    for (size_t i = 0; i < ny; i++)
        for (size_t j = 0; j < nxh; j++) {
            double qx = ssb_fftfreq(i, ny, step[0]), qy = ssb_fftfreq(j, nx, step[1]);
            double r = sqrt(qx * qx + qy * qy);
            if (r > lo && r < hi) {
                nb++;
                row_slot[i] = col_slot[j] = 1;
            }
        }
    *nr = *nc = 0;
    for (size_t i = 0; i < ny; i++)
        row_slot[i] = row_slot[i] ? (int)(*nr)++ : -1;
    for (size_t j = 0; j < nxh; j++)
        col_slot[j] = col_slot[j] ? (int)(*nc)++ : -1;
    return nb;
}

band_ws band_ws_sizes(size_t nb, size_t nr, size_t nc, size_t n_bf, size_t n, size_t nrot, int nt)
{
    band_ws w;
    size_t nb1 = nb ? nb : 1, nsum = n * nb1 * 4, nblocks = ssb_block_count(n_bf);
    w.n = n, w.nrot = nrot;
    w.nt = (size_t)nt > nblocks ? (nblocks ? nblocks : 1) : (size_t)nt;
    w.off = nb1 * sizeof(size_t);
    w.rs = nb1 * sizeof(int);
    w.cs = nb1 * sizeof(int);
    w.qx = 4 * nb1 * sizeof(double); /* qx, qy, |q|², w_q */
    w.rq = (nr + nc + 1) * sizeof(double);
    w.k = 3 * (n_bf ? n_bf : 1) * sizeof(double); /* kx, ky, A(k) */
    w.tabs = n * nb1 * 3 * sizeof(double complex);  /* E, Qm, Qp */
    w.qts = n * nb1 * sizeof(double);
    w.total = nsum * sizeof(double);
    w.A1 = 3 * nb1 * sizeof(double);                 /* A1, A2, q·k */
    w.R = 2 * (nr + nc + 1) * sizeof(double complex); /* row and column phasors */
    w.part = nsum * sizeof(double);
    w.power = nb1 * sizeof(double);
    return w;
}

static void geom_workspace(const band_ws *w, ws_sink *out, int release)
{
    const size_t g[5] = {w->off, w->rs, w->cs, w->qx, w->rq};
    for (int i = 0; i < 5; i++)
        release ? ws_free(out, g[i], 0) : ws_alloc(out, g[i]);
}

void band_fit_workspace(const band_ws *w, ws_sink *out)
{
    geom_workspace(w, out, 0);
    for (size_t u = 0; u < w->nrot; u++)
        ws_alloc(out, w->k);
    ws_alloc(out, w->tabs);
    ws_alloc(out, w->qts);
    ws_alloc(out, w->total);
    for (size_t t = 0; t < w->nt; t++) {
        ws_alloc(out, w->A1);
        ws_alloc(out, w->R);
        ws_alloc(out, w->part);
    }
    ws_pass(out, 0);
    for (size_t t = 0; t < w->nt; t++) {
        ws_free(out, w->A1, 1);
        ws_free(out, w->R, 1);
        ws_free(out, w->part, 1);
    }
    ws_free(out, w->tabs, 1);
    ws_free(out, w->qts, 1);
    ws_free(out, w->total, 1);
    for (size_t u = 0; u < w->nrot; u++)
        ws_free(out, w->k, 0);
    geom_workspace(w, out, 1);
}

void band_power_workspace(const band_ws *w, ws_sink *out)
{
    geom_workspace(w, out, 0);
    ws_alloc(out, w->k);
    ws_alloc(out, w->power);
    ws_pass(out, 0);
    ws_free(out, w->power, 0);
    ws_free(out, w->k, 0);
    geom_workspace(w, out, 1);
}

static ssb4d_status geom_init(band_geom *b, const struct ssb4d_G *G, const ssb4d_geometry *g,
                              const ssb4d_band_opts *o, ssb4d_mem *mem, ssb4d_err *err)
{
    memset(b, 0, sizeof *b);
    b->G = G;
    b->lambda = ssb4d_wavelength_A(g->kv);
    b->alpha0 = g->semiangle_mrad * 1e-3;
    b->ang[0] = g->det_sampling_mrad[0] * 1e-3;
    b->ang[1] = g->det_sampling_mrad[1] * 1e-3;
    aperture_bounds(b);
    size_t ny = G->ny, nx = G->nx, nxh = G->nxh;
    double lo = o->band_lo_inv_A, hi = o->band_hi_inv_A;
    int *row_slot = calloc(ny, sizeof *row_slot), *col_slot = calloc(nxh, sizeof *col_slot);
    if (!row_slot || !col_slot) {
        free(row_slot);
        free(col_slot);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    b->nb = band_bins(ny, nx, g->scan_step_A, lo, hi, row_slot, col_slot, &b->nr, &b->nc);
    size_t n1 = b->nb ? b->nb : 1;
    const band_ws w = band_ws_sizes(b->nb, b->nr, b->nc, 0, 0, 0, 1);
    b->off = ssb4d_mem_alloc(mem, w.off, "band bins", err);
    b->rs = ssb4d_mem_alloc(mem, w.rs, "band bins", err);
    b->cs = ssb4d_mem_alloc(mem, w.cs, "band bins", err);
    b->qx = ssb4d_mem_alloc(mem, w.qx, "band bins", err);
    b->rq = ssb4d_mem_alloc(mem, w.rq, "band bins", err);
    if (!b->off || !b->rs || !b->cs || !b->qx || !b->rq) {
        free(row_slot);
        free(col_slot);
        geom_free(b, mem);
        return SSB4D_ENOMEM;
    }
    b->qy = b->qx + n1;
    b->q2 = b->qy + n1;
    b->wq = b->q2 + n1;
    b->cq = b->rq + b->nr;
    size_t m = 0;
    for (size_t i = 0; i < ny; i++) {
        double qx = ssb_fftfreq(i, ny, g->scan_step_A[0]);
        if (row_slot[i] >= 0)
            b->rq[row_slot[i]] = qx;
        for (size_t j = 0; j < nxh; j++) {
            double qy = ssb_fftfreq(j, nx, g->scan_step_A[1]);
            if (col_slot[j] >= 0)
                b->cq[col_slot[j]] = qy;
            double r = sqrt(qx * qx + qy * qy);
            if (!(r > lo && r < hi))
                continue;
            b->off[m] = i * nxh + j;
            b->rs[m] = row_slot[i];
            b->cs[m] = col_slot[j];
            b->qx[m] = qx;
            b->qy[m] = qy;
            b->q2[m] = qx * qx + qy * qy;
            b->wq[m] = (j == 0 || (nx % 2 == 0 && j == nx / 2)) ? 1.0 : 2.0;
            m++;
        }
    }
    free(row_slot);
    free(col_slot);
    return SSB4D_OK;
}

/* The k table of rotation `rotation_deg`: g with its rotation replaced, so a set evaluated in a
 * batch of many rotations sees the bits that a call with that rotation in g gives. */
static ssb4d_status rot_init(band_rot *r, const band_geom *b, const ssb4d_geometry *g, double rotation_deg,
                             ssb4d_mem *mem, ssb4d_err *err)
{
    const struct ssb4d_G *G = b->G;
    size_t n = G->n_bf ? G->n_bf : 1;
    r->kx = ssb4d_mem_alloc(mem, band_ws_sizes(b->nb, b->nr, b->nc, G->n_bf, 0, 0, 1).k, "band k", err);
    if (!r->kx)
        return SSB4D_ENOMEM;
    r->ky = r->kx + n;
    r->Ak = r->ky + n;
    ssb4d_geometry gr = *g;
    gr.rotation_deg = rotation_deg;
    for (size_t ib = 0; ib < G->n_bf; ib++) {
        ssb_bf_k(&gr, b->lambda, G->det_shape[1], G->bf_pix[ib], &r->kx[ib], &r->ky[ib]);
        r->Ak[ib] = aperture(b, r->kx[ib], r->ky[ib]);
    }
    return SSB4D_OK;
}

/* ---- one parameter set ------------------------------------------------------------------- */

typedef struct {
    ssb_phys p;         /* its parameters (optics/physics.h; λ, α0 and the sampling: band_geom's) */
    size_t rot;         /* its rotation: an index into the batch's distinct rotations */
    /* per band bin (fast kernel): e^{iχ(q)}, e^{∓i(t/2)πλ|q|²} and 2π q·τ */
    double complex *E, *Qm, *Qp;
    double *qt;
} band_set;

static ssb4d_status set_init(band_set *s, const ssb4d_aberrations *ab, const ssb4d_thick *th,
                             size_t index, ssb4d_err *err)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < SSB4D_N_ABERR; i++)
        if (!isfinite(ab->C_nm[i]) || !isfinite(ab->phi_deg[i]) || fabs(ab->C_nm[i]) > 1e9)
            return ssb_fail(err, SSB4D_EINVAL, "parameter set %zu: aberration %s is not a finite value",
                            index, ssb4d_aberr_name(i));
    ssb_phys_aberrations(&s->p, ab);
    if (th) {
        if (!(th->thickness_nm >= 0) || !isfinite(th->thickness_nm) || !isfinite(th->tilt_mrad[0]) ||
            !isfinite(th->tilt_mrad[1]))
            return ssb_fail(err, SSB4D_EINVAL, "parameter set %zu: thickness must be >= 0 and tilt finite",
                            index);
        /* t = 0 is the thin model exactly: every weight is 1, so no weight is computed. */
        s->p.thick = th->thickness_nm > 0;
        s->p.t = th->thickness_nm * 10.0;
        s->p.tau[0] = th->tilt_mrad[0] * 1e-3;
        s->p.tau[1] = th->tilt_mrad[1] * 1e-3;
    }
    return SSB4D_OK;
}

static void set_tables(band_set *s, const band_geom *b)
{
    if (!s->p.quadratic)
        return;
    for (size_t m = 0; m < b->nb; m++) {
        double x = ssb_chi_l(&s->p, b->lambda, b->qx[m], b->qy[m]);
        s->E[m] = cos(x) + I * sin(x);
        if (s->p.thick) {
            double h = 0.5 * s->p.t * M_PI * b->lambda * b->q2[m];
            s->Qm[m] = cos(h) - I * sin(h);
            s->Qp[m] = cos(h) + I * sin(h);
            s->qt[m] = ssb_tilt_phase(&s->p, b->qx[m], b->qy[m]);
        }
    }
}

static inline double sinc_from(double x, double sinx) { return fabs(x) < 1e-6 ? 1.0 : sinx / x; }

/* Per-thread scratch: geometry of the current pixel's bins and per-set phasor tables. */
typedef struct {
    double *A1, *A2, *qk;   /* nb each */
    double complex *R, *C, *Rt, *Ct;
    double *part;           /* n × nb × 3: Re N, Im N, D of the current block */
} band_scratch;

/* Fast kernel: pixel ib, set s, accumulating into acc (nb × 3). */
static void accum_fast(const band_geom *b, const band_rot *k, const band_set *s, size_t ib,
                       const cfloat *plane, double T, band_scratch *w, double *restrict acc)
{
    double kx = k->kx[ib], ky = k->ky[ib], Ak = k->Ak[ib], lam = b->lambda;
    /* b = 2πλ M k; e^{−iu} = e^{−i bx qx}·e^{−i by qy} */
    double bx = 2 * M_PI * lam * (s->p.m[0] * kx + s->p.m[1] * ky);
    double by = 2 * M_PI * lam * (s->p.m[1] * kx + s->p.m[2] * ky);
    for (size_t r = 0; r < b->nr; r++)
        w->R[r] = cos(bx * b->rq[r]) - I * sin(bx * b->rq[r]);
    for (size_t c = 0; c < b->nc; c++)
        w->C[c] = cos(by * b->cq[c]) - I * sin(by * b->cq[c]);
    double ex = 0, ey = 0, ht = 0.5 * s->p.t;
    if (s->p.thick) {
        /* e^{iπt q·(λk − τ)} */
        ex = M_PI * s->p.t * (lam * kx - s->p.tau[0]);
        ey = M_PI * s->p.t * (lam * ky - s->p.tau[1]);
        for (size_t r = 0; r < b->nr; r++)
            w->Rt[r] = cos(ex * b->rq[r]) + I * sin(ex * b->rq[r]);
        for (size_t c = 0; c < b->nc; c++)
            w->Ct[c] = cos(ey * b->cq[c]) + I * sin(ey * b->cq[c]);
    }
    const double pl = M_PI * lam, tpl = 2 * M_PI * lam;
    /* Complex products written out in real arithmetic: no Annex G NaN fix-up calls. */
    const double *R = (const double *)w->R, *C = (const double *)w->C;
    const double *Rt = (const double *)w->Rt, *Ct = (const double *)w->Ct;
    const double *E = (const double *)s->E, *Qm = (const double *)s->Qm, *Qp = (const double *)s->Qp;
    const float *gp = (const float *)plane;
    for (size_t m = 0; m < b->nb; m++) {
        double A1 = w->A1[m], A2 = w->A2[m];
        if (A1 == 0.0 && A2 == 0.0)
            continue; /* γ = 0: adds exactly 0 to N and D */
        int r = b->rs[m], c = b->cs[m];
        if (s->p.thick) {
            double spr = Rt[2 * r] * Ct[2 * c] - Rt[2 * r + 1] * Ct[2 * c + 1];
            double spi = Rt[2 * r] * Ct[2 * c + 1] + Rt[2 * r + 1] * Ct[2 * c];
            double base = tpl * w->qk[m] - s->qt[m];
            double x1 = ht * (-pl * b->q2[m] + base), x2 = ht * (pl * b->q2[m] + base);
            double s1 = Qm[2 * m] * spi + Qm[2 * m + 1] * spr; /* Im(Qm·sp) = sin x1 */
            double s2 = Qp[2 * m] * spi + Qp[2 * m + 1] * spr; /* Im(Qp·sp) = sin x2 */
            A1 *= sinc_from(x1, s1);
            A2 *= sinc_from(x2, s2);
        }
        double phr = Ak * (R[2 * r] * C[2 * c] - R[2 * r + 1] * C[2 * c + 1]);
        double phi = Ak * (R[2 * r] * C[2 * c + 1] + R[2 * r + 1] * C[2 * c]);
        double dr = (A1 - A2) * E[2 * m], di = (A1 + A2) * E[2 * m + 1];
        double cr = phr * dr - phi * di, ci = phr * di + phi * dr; /* conj(γ) */
        double gr = gp[2 * b->off[m]], gi = gp[2 * b->off[m] + 1];
        double g2 = cr * cr + ci * ci;
        acc[4 * m] += gr * cr - gi * ci;
        acc[4 * m + 1] += gr * ci + gi * cr;
        acc[4 * m + 2] += g2;
        acc[4 * m + 3] += T * g2;
    }
}

/* Generic kernel: P(q∓k) evaluated directly (any χ; optics/physics.h). */
static void accum_generic(const band_geom *b, const band_rot *k, const band_set *s, size_t ib,
                          const cfloat *plane, double T, band_scratch *w, double *restrict acc)
{
    double kx = k->kx[ib], ky = k->ky[ib], Ak = k->Ak[ib], lam = b->lambda;
    double sk, ck;
    ssb_sincos(ssb_chi_l(&s->p, lam, kx, ky), &sk, &ck);
    double Pkr = Ak * ck, Pki = -Ak * sk; /* P(k) */
    for (size_t m = 0; m < b->nb; m++) {
        double A1 = w->A1[m], A2 = w->A2[m];
        if (A1 == 0.0 && A2 == 0.0)
            continue;
        double qx = b->qx[m], qy = b->qy[m];
        double qt = s->p.thick ? ssb_tilt_phase(&s->p, qx, qy) : 0.0;
        ssb_c64 cg = ssb_band_cgamma(&s->p, lam, kx, ky, Pkr, Pki, A1, A2, qx, qy, b->q2[m], w->qk[m], qt);
        /* G as the complex value re + I·im: the real part is re + 0·im (a −0 becomes +0) */
        double gi = cimagf(plane[b->off[m]]), gr = (double)crealf(plane[b->off[m]]) + 0.0 * gi;
        double g2 = cg.re * cg.re + cg.im * cg.im;
        acc[4 * m] += gr * cg.re - gi * cg.im;
        acc[4 * m + 1] += gr * cg.im + gi * cg.re;
        acc[4 * m + 2] += g2;
        acc[4 * m + 3] += T * g2;
    }
}

/* |q∓k|² = |q|² + |k|² ∓ 2q·k sorts each bin into inside (A = 1), outside (A = 0) or on the
 * aperture's edge (−1 for now), with aperture()'s thresholds; their margin is far above this
 * form's rounding, so the sorting is exact. A function of its own, with restrict arguments: so
 * GCC vectorises the loop (inlined in the OpenMP region as plain code it did not). */
static void classify(size_t nb, const double *restrict qx, const double *restrict qy,
                     const double *restrict q2, double kx, double ky, double in2, double out2,
                     double *restrict A1, double *restrict A2, double *restrict qk)
{
    double k2 = kx * kx + ky * ky;
    for (size_t m = 0; m < nb; m++) {
        double d = qx[m] * kx + qy[m] * ky, s = q2[m] + k2, r1 = s - 2 * d, r2 = s + 2 * d;
        qk[m] = d;
        A1[m] = r1 <= in2 ? 1.0 : r1 < out2 ? -1.0 : 0.0;
        A2[m] = r2 <= in2 ? 1.0 : r2 < out2 ? -1.0 : 0.0;
    }
}

/* The (q,k) geometry shared by every set of one rotation: A(q−k), A(q+k), q·k. It is made once
 * per pixel and distinct rotation, so it is kept cheap: only the edge bins left by classify()
 * call ssb_aperture. The values are aperture()'s, i.e. ssb_aperture's, bit for bit. */
static void pixel_geometry(const band_geom *b, const band_rot *k, size_t ib, band_scratch *w)
{
    double kx = k->kx[ib], ky = k->ky[ib];
    classify(b->nb, b->qx, b->qy, b->q2, kx, ky, b->in2, b->out2, w->A1, w->A2, w->qk);
    for (size_t m = 0; m < b->nb; m++) {
        if (w->A1[m] < 0)
            w->A1[m] = ssb_aperture(b->lambda, b->alpha0, b->ang[0], b->ang[1], b->qx[m] - kx, b->qy[m] - ky);
        if (w->A2[m] < 0)
            w->A2[m] = ssb_aperture(b->lambda, b->alpha0, b->ang[0], b->ang[1], b->qx[m] + kx, b->qy[m] + ky);
    }
}

/* Checks shared by the band entry points; fills *o with the defaults when given NULL. */
static ssb4d_status check_args(const ssb4d_geometry *g, const ssb4d_band_opts **o, ssb4d_band_opts *dflt,
                               ssb4d_err *err)
{
    if (!*o) {
        ssb4d_band_opts_default(dflt);
        *o = dflt;
    }
    if (!((*o)->band_lo_inv_A >= 0) || !((*o)->band_hi_inv_A > (*o)->band_lo_inv_A) ||
        !isfinite((*o)->band_hi_inv_A))
        return ssb_fail(err, SSB4D_EINVAL,
                        "the band objective's band must satisfy 0 <= lo < hi (got %g, %g 1/A)",
                        (*o)->band_lo_inv_A, (*o)->band_hi_inv_A);
    return ssb_geometry_check(g, err);
}

/* What a pass over G's pixels needs of its batch (band_pixel), also after the pass (band_pix). */
typedef struct band_pass {
    const struct ssb4d_G *G;
    const band_geom *b;
    const band_rot *rots;
    size_t nrot;
    const band_set *sets;
    size_t n, nb1;
    band_scratch *ws;
    int nt;             /* threads: ws[0..nt) */
} band_pass;

/* Pixel ib's sums for every set, added into a block's partials part (n × nb × 4). The plane is
 * read once for the whole batch; its (q,k) geometry is made once per distinct rotation and
 * serves that rotation's sets. */
static void band_pixel(const band_pass *u, size_t ib, const cfloat *plane, band_scratch *w, double *part)
{
    const double T = u->G->totals[ib]; /* Poisson: E|noise of G(q,k)|² */
    for (size_t r = 0; r < u->nrot; r++) {
        const band_rot *k = &u->rots[r];
        if (k->Ak[ib] == 0.0)
            continue; /* γ ≡ 0 for this pixel under this rotation */
        pixel_geometry(u->b, k, ib, w);
        for (size_t i = 0; i < u->n; i++) {
            if (u->sets[i].rot != r)
                continue;
            double *acc = part + i * u->nb1 * 4;
            if (u->sets[i].p.quadratic)
                accum_fast(u->b, k, &u->sets[i], ib, plane, T, w, acc);
            else
                accum_generic(u->b, k, &u->sets[i], ib, plane, T, w, acc);
        }
    }
}

/* One pixel's contribution, as the pass adds it into a block partial started at zero
 * (dist_pix_fn): thread 0's scratch, after the pass. A distributed G is resident in float32. */
static ssb4d_status band_pix(void *user, size_t ib, double *out, ssb4d_err *err)
{
    (void)err;
    const band_pass *u = user;
    const cfloat *plane = (const cfloat *)G_plane(u->G, ib);
    if (plane)
        band_pixel(u, ib, plane, &u->ws[0], out);
    return SSB4D_OK;
}

/* The band objective's pass as a plain job (backend.h), run by the backend holding G's planes. */
static ssb4d_status band_run(const struct ssb4d_G *G, const band_geom *b, const band_rot *rots, size_t nrot,
                             const band_set *sets, size_t n, int nt, double *total, ssb4d_mem *mem, ssb4d_err *err)
{
    ssb_band_set *ds = calloc(n, sizeof *ds);
    const double **kt = calloc(3 * (nrot ? nrot : 1), sizeof *kt);
    if (!ds || !kt) {
        free(ds), free(kt);
        ssb4d_status st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        return G->dist ? dist_agree(G->dist, st, err) : st; /* the other ranks' pass begins with it */
    }
    for (size_t i = 0; i < n; i++)
        ds[i] = (ssb_band_set){.p = sets[i].p, .rot = sets[i].rot, .E = sets[i].E, .Qm = sets[i].Qm,
                               .Qp = sets[i].Qp, .qt = sets[i].qt};
    for (size_t r = 0; r < nrot; r++)
        kt[r] = rots[r].kx, kt[nrot + r] = rots[r].ky, kt[2 * nrot + r] = rots[r].Ak;
    const ssb_band_job j = {.nb = b->nb, .off = b->off, .qx = b->qx, .qy = b->qy, .q2 = b->q2, .lambda = b->lambda,
                            .alpha0 = b->alpha0, .ang = {b->ang[0], b->ang[1]}, .in2 = b->in2, .out2 = b->out2,
                            .rs = b->rs, .cs = b->cs, .nr = b->nr, .nc = b->nc, .rq = b->rq, .cq = b->cq,
                            .nrot = nrot, .kx = kt, .ky = kt + nrot, .Ak = kt + 2 * nrot, .n = n, .sets = ds,
                            .threads = nt};
    ssb4d_status st = ssb_run_band(G, &j, total, mem, err);
    free(ds), free(kt);
    return st;
}

/* The CPU's view of a band job: the job's tables as band.c's kernels read them (nothing copied;
 * the kernels only read), and per thread its scratch. */
typedef struct {
    band_geom b;
    band_rot *rots;
    band_set *sets;
    band_scratch *ws;
    int nt;
} cpu_band;

static ssb4d_status cpu_band_init(cpu_band *c, const struct ssb4d_G *G, const ssb_band_job *j, ssb4d_mem *mem,
                                  ssb4d_err *err)
{
    memset(c, 0, sizeof *c);
    band_geom *b = &c->b; /* read only: the kernels take it const */
    b->G = G, b->lambda = j->lambda, b->alpha0 = j->alpha0, b->ang[0] = j->ang[0], b->ang[1] = j->ang[1];
    b->in2 = j->in2, b->out2 = j->out2, b->nb = j->nb, b->off = (size_t *)j->off;
    b->rs = (int *)j->rs, b->cs = (int *)j->cs, b->qx = (double *)j->qx, b->qy = (double *)j->qy;
    b->q2 = (double *)j->q2, b->nr = j->nr, b->nc = j->nc, b->rq = (double *)j->rq, b->cq = (double *)j->cq;
    const size_t nb1 = j->nb ? j->nb : 1;
    const band_ws w = band_ws_sizes(j->nb, j->nr, j->nc, G->n_bf, j->n, j->nrot, j->threads);
    c->nt = (int)w.nt;
    c->rots = calloc(j->nrot ? j->nrot : 1, sizeof *c->rots);
    c->sets = calloc(j->n ? j->n : 1, sizeof *c->sets);
    c->ws = calloc((size_t)c->nt, sizeof *c->ws);
    if (!c->rots || !c->sets || !c->ws)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    for (size_t r = 0; r < j->nrot; r++)
        c->rots[r] = (band_rot){(double *)j->kx[r], (double *)j->ky[r], (double *)j->Ak[r]};
    for (size_t i = 0; i < j->n; i++) {
        const ssb_band_set *s = &j->sets[i];
        c->sets[i] = (band_set){.p = s->p, .rot = s->rot, .E = (double complex *)s->E,
                                .Qm = (double complex *)s->Qm, .Qp = (double complex *)s->Qp, .qt = (double *)s->qt};
    }
    for (int t = 0; t < c->nt; t++) {
        band_scratch *sc = &c->ws[t];
        sc->A1 = ssb4d_mem_alloc(mem, w.A1, "band pixel geometry", err);
        sc->R = ssb4d_mem_alloc(mem, w.R, "band phasors", err);
        sc->part = ssb4d_mem_alloc(mem, w.part, "band block partial", err);
        if (!sc->A1 || !sc->R || !sc->part)
            return SSB4D_ENOMEM;
        sc->A2 = sc->A1 + nb1;
        sc->qk = sc->A2 + nb1;
        sc->C = sc->R + j->nr;
        sc->Rt = sc->C + j->nc;
        sc->Ct = sc->Rt + j->nr;
    }
    return SSB4D_OK;
}

static void cpu_band_free(cpu_band *c, ssb4d_mem *mem)
{
    for (int t = 0; c->ws && t < c->nt; t++) {
        ssb4d_mem_free(mem, c->ws[t].A1, 1);
        ssb4d_mem_free(mem, c->ws[t].R, 1);
        ssb4d_mem_free(mem, c->ws[t].part, 1);
    }
    free(c->ws), free(c->sets), free(c->rots);
}

/* ssb_block_pass's callbacks for the band sums (block_pass.h): per thread, its scratch's partial. */
typedef struct {
    const band_pass *u;
    const G_group *gr;
    size_t g0, nsum;
    double *total;
    ssb4d_mem *mem;
} cpu_band_blocks;

static void band_sum(void *user, int t, size_t a, size_t b)
{
    const cpu_band_blocks *c = user;
    band_scratch *w = &c->u->ws[t];
    memset(w->part, 0, c->nsum * sizeof(double));
    for (size_t ib = a; ib < b; ib++) {
        const cfloat *plane = (const cfloat *)c->gr->planes[ib - c->g0];
        if (!plane || ssb4d_mem_poll(c->mem))
            continue; /* unstored: γ contributes nothing; cancelled: dropped below */
        band_pixel(c->u, ib, plane, w, w->part);
    }
}

static void band_add(void *user, int t)
{
    const cpu_band_blocks *c = user;
    ssb_block_add(c->total, c->u->ws[t].part, c->nsum);
}

static size_t band_parts(void *user, int t, const double *parts[2], size_t lens[2])
{
    const cpu_band_blocks *c = user;
    parts[0] = c->u->ws[t].part, lens[0] = c->nsum;
    return 1;
}

/* The CPU backend's band sums (backend.h): this process's pixels in blocks of SSB_BLOCK, in groups
 * of planes at hand, each block's partial into the totals in block order (a distributed G: kept
 * for the chain of dist.h). Reached by every rank of a distributed G. */
ssb4d_status ssb_cpu_band(const struct ssb4d_G *G, const ssb_band_job *j, double *total, ssb4d_mem *mem,
                          ssb4d_err *err)
{
    cpu_band cb;
    ssb4d_status st = cpu_band_init(&cb, G, j, mem, err);
    const band_pass pass = {G, &cb.b, cb.rots, j->nrot, cb.sets, j->n, j->nb ? j->nb : 1, cb.ws, cb.nt};
    const band_pass *u = &pass;
    const size_t nsum = u->n * u->nb1 * 4;
    const int nt = u->nt;
    /* G in groups of BF pixels whose float32 planes are at hand: all of G when it is resident in
     * float32, else converted from half precision or rebuilt from the source (loss.c does the
     * same). A group spans whole blocks, so the block order of the sums, and with it the bits,
     * is the same for every group size and for a resident G. */
    G_group gr = {0};
    if (!st)
        st = G_group_init(G, mem, &gr, err);
    const int have_group = !st;
    if (!st && gr.cap % SSB_BLOCK && gr.cap < G->n_bf)
        st = ssb_fail(err, SSB4D_EINTERNAL, "G groups of %zu pixels split the blocks of %d", gr.cap, SSB_BLOCK);
    /* A distributed G: this rank's pixels [lo, hi) (one group: its planes are resident), their
     * partials kept for the chain (dist/blocks.h); one process: [0, n_bf) in blocks. */
    const size_t lo = G_lo(G), hi = G_hi(G);
    dist_blocks bl;
    st = G_blocks_begin(&bl, st, G, nsum, band_pix, (void *)u, mem, err);
    cpu_band_blocks bu = {u, &gr, 0, nsum, total, mem};
    const ssb_block_fns fns = {&bu, nt, band_sum, band_add, band_parts};
    for (size_t g0 = lo; !st && g0 < hi; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < hi ? g0 + gr.cap : hi;
        if (ssb4d_mem_progress(mem, (double)(g0 - lo) / (double)(hi - lo))) {
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
            break;
        }
        if ((st = G_group_load(G, g0, g1, &gr, err)))
            break;
        bu.g0 = g0;
        ssb_block_pass(&bl, g0, g1, &fns);
    }
    if (!st && ssb4d_mem_cancelled(mem)) /* before the chain: every rank learns of it */
        st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
    st = dist_blocks_end(&bl, st, total, err);
    dist_blocks_free(&bl);
    if (have_group)
        G_group_free(&gr);
    cpu_band_free(&cb, mem);
    return st;
}

ssb4d_status ssb4d_band_fit_rot(const ssb4d_G *G, const ssb4d_geometry *g, const double *rotation_deg,
                                const ssb4d_aberrations *ab, const ssb4d_thick *thick, size_t n,
                                const ssb4d_band_opts *o, ssb4d_mem *mem, double *fit, ssb4d_err *err)
{
    if (!G || !g || (n && (!ab || !fit)))
        return ssb_fail(err, SSB4D_EINVAL, "band fit: missing argument");
    ssb4d_band_opts dflt;
    ssb4d_status st = check_args(g, &o, &dflt, err);
    if (st || n == 0)
        return st;
    band_set *sets = calloc(n, sizeof *sets);
    double *urot = calloc(n, sizeof *urot); /* the distinct rotations, in order of first use */
    band_rot *rots = calloc(n, sizeof *rots);
    if (!sets || !urot || !rots) {
        free(sets), free(urot), free(rots);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    size_t nrot = 0;
    for (size_t i = 0; i < n && !st; i++) {
        st = set_init(&sets[i], &ab[i], thick ? &thick[i] : NULL, i, err);
        double r = rotation_deg ? rotation_deg[i] : g->rotation_deg;
        if (!st && !isfinite(r))
            st = ssb_fail(err, SSB4D_EINVAL, "parameter set %zu: the rotation is not a finite value", i);
        /* Bit-equal rotations share one k table (−0 and 0 do not: their tables could differ in
         * a zero's sign, and a set's bits must be those of a call with its own rotation). */
        size_t u = 0;
        while (u < nrot && memcmp(&urot[u], &r, sizeof r))
            u++;
        if (u == nrot)
            urot[nrot++] = r;
        sets[i].rot = u;
    }
    band_geom b;
    memset(&b, 0, sizeof b);
    if (!st)
        st = geom_init(&b, G, g, o, mem, err);
    size_t n_rot_init = 0;
    for (; !st && n_rot_init < nrot; n_rot_init++)
        if ((st = rot_init(&rots[n_rot_init], &b, g, urot[n_rot_init], mem, err)))
            break;
    size_t nb = b.nb, nb1 = nb ? nb : 1;
    const band_ws w = band_ws_sizes(nb, b.nr, b.nc, G->n_bf, n, nrot, ssb_threads_resolve(o->threads));
    int nt = (int)w.nt;
    /* Per-set tables: E, Qm, Qp (complex) and qt, allocated as one block. */
    double complex *tabs = NULL;
    double *qts = NULL, *total = NULL;
    if (!st) {
        tabs = ssb4d_mem_alloc(mem, w.tabs, "band set tables", err);
        qts = ssb4d_mem_alloc(mem, w.qts, "band set tables", err);
        total = ssb4d_mem_calloc(mem, w.total, "band sums", err);
        if (!tabs || !qts || !total)
            st = SSB4D_ENOMEM;
    }
    if (!st) {
        for (size_t i = 0; i < n; i++) {
            ssb_phys *p = &sets[i].p; /* the geometry's part of the set's parameters */
            p->lambda = b.lambda, p->alpha0 = b.alpha0, p->ang[0] = b.ang[0], p->ang[1] = b.ang[1];
            sets[i].E = tabs + i * nb1 * 3;
            sets[i].Qm = sets[i].E + nb1;
            sets[i].Qp = sets[i].Qm + nb1;
            sets[i].qt = qts + i * nb1;
        }
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t i = 0; i < n; i++)
            set_tables(&sets[i], &b);
    }
    /* The pass, as a plain job, on the backend that holds G's planes (backend.h); a failure
     * before it still reaches the other ranks' agreement (dist.h). */
    if (!st)
        st = band_run(G, &b, rots, nrot, sets, n, nt, total, mem, err);
    else if (G->dist)
        st = dist_agree(G->dist, st, err);
    if (!st)
        for (size_t i = 0; i < n; i++) {
            const double *t = total + i * nb1 * 4;
            double f = 0.0;
            for (size_t m = 0; m < nb; m++)
                if (t[4 * m + 2] > 0.0)
                    f += b.wq[m] * (t[4 * m] * t[4 * m] + t[4 * m + 1] * t[4 * m + 1] - t[4 * m + 3]) / t[4 * m + 2];
            fit[i] = f;
        }
    ssb4d_mem_free(mem, tabs, 1);
    ssb4d_mem_free(mem, qts, 1);
    ssb4d_mem_free(mem, total, 1);
    for (size_t u = 0; u < n_rot_init; u++)
        ssb4d_mem_free(mem, rots[u].kx, 0);
    geom_free(&b, mem);
    free(sets), free(urot), free(rots);
    return st;
}

ssb4d_status ssb4d_band_fit(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                            const ssb4d_thick *thick, size_t n, const ssb4d_band_opts *o,
                            ssb4d_mem *mem, double *fit, ssb4d_err *err)
{
    return ssb4d_band_fit_rot(G, g, NULL, ab, thick, n, o, mem, fit, err);
}

/* The CPU backend's band power (backend.h): per bin, Σ_k |G|² in BF order, group after group;
 * threads split the bins, never the sum over k, so the bits do not depend on the threads or the
 * group size. */
ssb4d_status ssb_cpu_band_power(const struct ssb4d_G *G, const ssb_power_job *j, ssb4d_mem *mem, ssb4d_err *err)
{
    G_group gr = {0};
    ssb4d_status st = G_group_init(G, mem, &gr, err);
    if (st)
        return st;
    const size_t lo = G_lo(G), hi = G_hi(G), nb = j->nb, chunk = 1024, nchunks = (nb + chunk - 1) / chunk;
    const size_t *off = j->off;
    const double *Ak = j->Ak;
    double *acc = j->acc;
    int nt = ssb_threads_resolve(j->threads);
    for (size_t g0 = lo; g0 < hi; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < hi ? g0 + gr.cap : hi;
        if ((st = G_group_load(G, g0, g1, &gr, err)))
            break;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t c = 0; c < nchunks; c++) {
            size_t m0 = c * chunk, m1 = m0 + chunk < nb ? m0 + chunk : nb;
            for (size_t ib = g0; ib < g1; ib++) {
                const float *plane = (const float *)gr.planes[ib - g0];
                if (!plane || Ak[ib] == 0.0)
                    continue;
                for (size_t m = m0; m < m1; m++) {
                    double re = plane[2 * off[m]], im = plane[2 * off[m] + 1];
                    acc[m] += re * re + im * im;
                }
            }
        }
    }
    G_group_free(&gr);
    return st;
}

/* The band power's pass (dist_pass_fn). */
typedef struct {
    const ssb4d_G *G;
    const ssb_power_job *j;
    ssb4d_mem *mem;
} power_pass;

static ssb4d_status power_run(void *user, ssb4d_err *err)
{
    const power_pass *p = user;
    return ssb_run_band_power(p->G, p->j, p->mem, err);
}

ssb4d_status ssb4d_band_power(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_band_opts *o,
                              ssb4d_mem *mem, double *power, ssb4d_err *err)
{
    if (!G || !g || !power)
        return ssb_fail(err, SSB4D_EINVAL, "band power: missing argument");
    ssb4d_band_opts dflt;
    ssb4d_status st = check_args(g, &o, &dflt, err);
    if (st)
        return st;
    band_geom b;
    band_rot k = {0};
    if ((st = geom_init(&b, G, g, o, mem, err)))
        return st;
    st = rot_init(&k, &b, g, g->rotation_deg, mem, err);
    double *acc = st ? NULL : ssb4d_mem_calloc(mem, band_ws_sizes(b.nb, b.nr, b.nc, G->n_bf, 0, 0, 1).power, "band power", err);
    if (!st && !acc)
        st = SSB4D_ENOMEM;
    /* The sums on G's backend, from acc (a distributed G: the earlier ranks' sum, dist.h). */
    const ssb_power_job pj = {.nb = b.nb, .off = b.off, .Ak = k.Ak, .threads = o->threads, .acc = acc};
    power_pass pp = {G, &pj, mem};
    st = dist_seq_pass(G->dist, acc, b.nb, st, power_run, &pp, err);
    if (!st) {
        double p = 0.0;
        for (size_t m = 0; m < b.nb; m++)
            p += b.wq[m] * acc[m];
        *power = p;
    }
    ssb4d_mem_free(mem, acc, 0);
    ssb4d_mem_free(mem, k.kx, 0);
    geom_free(&b, mem);
    return st;
}
