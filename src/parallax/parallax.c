/* parallax.c — the tilt-corrected bright-field (parallax) estimate (SPEC 6.1, docs/parallax.md).
 *
 * Every BF pixel's image is the specimen seen through a probe whose aberrations tilt it: for
 * χ = πλ vᵀMv the weak-object spectrum is G(q,k) ∝ V(q)·e^{2πi q·λMk}·(trotter factor), i.e. the
 * image of pixel k is shifted by −λMk (k in the scan frame). With the detector offset p (pixels)
 * of a pixel from the BF centre, k = R(a)·diag(Δk)·p (SPEC 5.1), so two pixels p apart see images
 * that are shifted against each other by B·p with
 *
 *     B = λ M R(a) diag(Δk)       (Å per detector pixel; rows: scan row, scan col).
 *
 * B is measured from cross-spectra of pixel pairs a fixed offset Δ apart, summed over all pairs:
 * X_Δ(q) = Σ_k G(q,k)·conj G(q,k+Δ) ∝ e^{−2πi q·BΔ} (the trotter factors of k and k+Δ are the
 * same for most pairs and cancel). Its cross-correlation peaks at d = BΔ. Pairs of neighbours
 * (Δ of one pixel) give B unambiguously (a crystal's images repeat with the lattice, so the peak
 * has aliases a lattice period apart, far beyond a one-pixel shift); longer Δ, predicted from the
 * shorter ones, give it precisely. B then splits into M (symmetric) and the rotation a, up to
 * (M, a) ≡ (−M, a + π): the 180° branch, which the shifts cannot decide.
 *
 * Cost: one pass over a subset of G's planes to find the strongest frequencies, one pass over all
 * planes reading only those bins (with a Hann window applied in Fourier space as a 3×3 stencil, so
 * non-periodic scans do not correlate their edges), then small sums. */
#include "parallax/parallax.h"

#include "common/err.h"
#include "common/parallel.h"
#include "dist/dist.h"
#include "gbuild/gbuild.h"
#include "optics/optics.h"

#include <complex.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

typedef float complex cfloat;

void ssb4d_parallax_opts_default(ssb4d_parallax_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_bins = 1024;
    o->max_bytes = 64u << 20;
    o->max_aberration_nm = 50.0;
}

/* ---- frequencies -------------------------------------------------------------------------- */

static long freq_index(size_t i, size_t n) { return i < (n + 1) / 2 ? (long)i : (long)i - (long)n; }

int parallax_bin_eligible(size_t i, size_t j, size_t ny, size_t nx, const ssb4d_geometry *g, double qmax2)
{
    long fi = freq_index(i, ny), fj = (long)j;
    if (labs(fi) <= 1 && fj <= 1)
        return 0;
    if ((ny % 2 == 0 && i == ny / 2) || (nx % 2 == 0 && j == nx / 2))
        return 0;
    double qx = (double)fi / ((double)ny * g->scan_step_A[0]);
    double qy = (double)fj / ((double)nx * g->scan_step_A[1]);
    return qx * qx + qy * qy < qmax2;
}

/* G(i, j) of a half-plane for any signed column j in (−nx, nx) and any row (Hermitian mirror). */
static inline cfloat g_any(const cfloat *plane, size_t ny, size_t nx, size_t nxh, long i, long j)
{
    long r = ((i % (long)ny) + (long)ny) % (long)ny;
    long c = ((j % (long)nx) + (long)nx) % (long)nx;
    if ((size_t)c < nxh)
        return plane[(size_t)r * nxh + (size_t)c];
    long rm = ((long)ny - r) % (long)ny;
    return conjf(plane[(size_t)rm * nxh + (size_t)(nx - (size_t)c)]);
}

/* The Hann-windowed spectrum at (i, j): the window 0.5 − 0.5 cos(2πn/N) per axis is the stencil
 * (−¼, ½, −¼) in Fourier space. */
static inline cfloat g_hann(const cfloat *plane, size_t ny, size_t nx, size_t nxh, long i, long j)
{
    static const float w[3] = {-0.25f, 0.5f, -0.25f};
    cfloat s = 0;
    for (int a = -1; a <= 1; a++) {
        cfloat row = 0;
        for (int b = -1; b <= 1; b++)
            row += w[b + 1] * g_any(plane, ny, nx, nxh, i + a, j + b);
        s += w[a + 1] * row;
    }
    return s;
}

typedef struct {
    size_t nb;
    long *bi, *bj;      /* signed frequency indices of the selected bins (bj >= 0) */
    double *qx, *qy;    /* 1/Å */
    cfloat *v;          /* n_bf × nb windowed spectra at the bins (zero for unstored pixels) */
    int32_t *bf_of;     /* detector pixel → BF index, or −1 */
    int *row, *col;     /* BF pixel → detector row, col */
    size_t n_used;      /* pixels with values */
} px;

static void px_free(px *p, ssb4d_mem *mem)
{
    free(p->bi);
    free(p->bj);
    free(p->qx);
    free(p->qy);
    ssb4d_mem_free(mem, p->v, 0);
    free(p->bf_of);
    free(p->row);
    free(p->col);
    memset(p, 0, sizeof *p);
}

typedef struct {
    double p;
    size_t idx;
} ranked;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1; /* descending power */
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* ---- workspace: the sizes the estimate allocates, and their order ------------------------- */

size_t parallax_want_bins(const ssb4d_parallax_opts *o, size_t n_bf)
{
    size_t want = o->max_bins ? o->max_bins : 1024;
    if (o->max_bytes && n_bf && want * n_bf * sizeof(cfloat) > o->max_bytes)
        want = o->max_bytes / (n_bf * sizeof(cfloat));
    return want < 16 ? 16 : want;
}

size_t parallax_bins_of(size_t ny, size_t nx, size_t n_bf, const ssb4d_geometry *g, const ssb4d_parallax_opts *o)
{
    size_t want = parallax_want_bins(o, n_bf), nxh = nx / 2 + 1, n = 0;
    if (!g)
        n = ny * nxh;
    else {
        double lambda = ssb4d_wavelength_A(g->kv), qmax = 2.0 * g->semiangle_mrad * 1e-3 / lambda;
        for (size_t i = 0; i < ny; i++)
            for (size_t j = 0; j < nxh; j++)
                n += (size_t)parallax_bin_eligible(i, j, ny, nx, g, qmax * qmax);
    }
    return n < want ? n : want;
}

size_t parallax_spectra_bytes(size_t n_bf, size_t nb) { return (n_bf ? n_bf : 1) * (nb ? nb : 1) * sizeof(cfloat); }

void parallax_workspace(size_t n_bf, size_t nb, ws_sink *out)
{
    ws_pass(out, 0); /* select_bins */
    if (nb < 4)
        return; /* too few bins: the estimate stops there */
    size_t spectra = parallax_spectra_bytes(n_bf, nb);
    ws_alloc(out, spectra);
    ws_pass(out, 0); /* extract */
    ws_free(out, spectra, 0);
}

/* Chooses the nb strongest bins of Σ_k |G(q,k)|² over every m-th stored pixel, among bins away
 * from DC (3×3), off the Nyquist row/column, and inside the SSB passband |q| < 2α/λ. */
static ssb4d_status select_bins(const ssb4d_G *G, const ssb4d_geometry *g, size_t want, int nt, px *p,
                                ssb4d_mem *mem, ssb4d_err *err)
{
    size_t ny = G->ny, nx = G->nx, nxh = G->nxh, nbins = ny * nxh;
    double lambda = ssb4d_wavelength_A(g->kv), qmax = 2.0 * g->semiangle_mrad * 1e-3 / lambda;
    double *pw = calloc(nbins, sizeof *pw);
    if (!pw)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory (parallax power)");
    size_t m = G->n_stored > 256 ? G->n_stored / 256 : 1, seen = 0;
    /* This process's pixels [lo, hi); a distributed G's power passes rank to rank (dist.h), the
     * sampled pixels counted from the first BF pixel as one process counts them. */
    const size_t lo = G_lo(G), hi = G_hi(G);
    for (size_t ib = 0; ib < lo; ib++)
        seen += G_stored(G, ib);
    G_group gr = {0};
    ssb4d_status st = G_group_init(G, mem, &gr, err);
    const cfloat **sel = st ? NULL : malloc((gr.cap ? gr.cap : 1) * sizeof *sel);
    if (!st && !sel)
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory (parallax power)");
    dist_seq sq = {0};
    if (G->dist)
        st = dist_seq_begin(G->dist, &sq, pw, nbins, st, err);
    for (size_t g0 = lo; !st && g0 < hi; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < hi ? g0 + gr.cap : hi;
        if ((st = G_group_load(G, g0, g1, &gr, err)))
            break;
        /* the pixels of this group that are sampled, then threads over bins (each owns its bins) */
        size_t ns = 0;
        for (size_t ib = g0; ib < g1; ib++)
            if (gr.planes[ib - g0] && seen++ % m == 0)
                sel[ns++] = (const cfloat *)gr.planes[ib - g0];
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t b = 0; b < nbins; b++) {
            /* one running sum over the sampled pixels in BF order, whatever the groups */
            double acc = pw[b];
            for (size_t k = 0; k < ns; k++) {
                float re = crealf(sel[k][b]), im = cimagf(sel[k][b]);
                acc += (double)re * re + (double)im * im;
            }
            pw[b] = acc;
        }
    }
    if (G->dist)
        st = dist_seq_end(G->dist, &sq, pw, nbins, st, err);
    free(sel);
    if (gr.mem || gr.planes)
        G_group_free(&gr);
    if (st) {
        free(pw);
        return st;
    }
    ranked *rk = malloc(nbins * sizeof *rk);
    if (!rk) {
        free(pw);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory (parallax bins)");
    }
    size_t n = 0;
    for (size_t i = 0; i < ny; i++)
        for (size_t j = 0; j < nxh; j++) {
            if (!parallax_bin_eligible(i, j, ny, nx, g, qmax * qmax))
                continue;
            rk[n].p = pw[i * nxh + j];
            rk[n].idx = i * nxh + j;
            n++;
        }
    free(pw);
    qsort(rk, n, sizeof *rk, cmp_ranked);
    p->nb = n < want ? n : want;
    size_t n1 = p->nb ? p->nb : 1;
    p->bi = malloc(n1 * sizeof *p->bi);
    p->bj = malloc(n1 * sizeof *p->bj);
    p->qx = malloc(n1 * sizeof *p->qx);
    p->qy = malloc(n1 * sizeof *p->qy);
    if (!p->bi || !p->bj || !p->qx || !p->qy) {
        free(rk);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory (parallax bins)");
    }
    for (size_t b = 0; b < p->nb; b++) {
        size_t i = rk[b].idx / nxh, j = rk[b].idx % nxh;
        p->bi[b] = freq_index(i, ny);
        p->bj[b] = (long)j;
        p->qx[b] = (double)p->bi[b] / ((double)ny * g->scan_step_A[0]);
        p->qy[b] = (double)p->bj[b] / ((double)nx * g->scan_step_A[1]);
    }
    free(rk);
    return SSB4D_OK;
}

/* The windowed spectra of every stored pixel at the selected bins. */
static ssb4d_status extract(const ssb4d_G *G, int nt, px *p, ssb4d_mem *mem, ssb4d_err *err)
{
    size_t ny = G->ny, nx = G->nx, nxh = G->nxh, nb = p->nb;
    p->v = ssb4d_mem_calloc(mem, parallax_spectra_bytes(G->n_bf, nb), "parallax spectra", err);
    if (!p->v)
        return G->dist ? dist_agree(G->dist, SSB4D_ENOMEM, err) : SSB4D_ENOMEM;
    G_group gr = {0};
    ssb4d_status st = G_group_init(G, mem, &gr, err);
    const size_t lo = G_lo(G), hi = G_hi(G);
    for (size_t g0 = lo; !st && g0 < hi; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < hi ? g0 + gr.cap : hi;
        if (ssb4d_mem_poll(mem)) {
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
            break;
        }
        if ((st = G_group_load(G, g0, g1, &gr, err)))
            break;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t ib = g0; ib < g1; ib++) {
            const cfloat *plane = (const cfloat *)gr.planes[ib - g0];
            if (!plane)
                continue;
            cfloat *v = p->v + ib * nb;
            for (size_t b = 0; b < nb; b++)
                v[b] = g_hann(plane, ny, nx, nxh, p->bi[b], p->bj[b]);
        }
    }
    if (gr.mem || gr.planes)
        G_group_free(&gr);
    /* a distributed G: every rank's rows of spectra to every rank */
    if (G->dist && !(st = dist_agree(G->dist, st, err)))
        st = dist_allgather_rows(G->dist, p->v, nb * sizeof(cfloat), lo, hi, err);
    return st;
}

/* ---- cross-spectra and their peaks --------------------------------------------------------- */

/* X_Δ at every bin: Σ over pairs (k, k+Δ) of stored pixels, in BF order (threads own bins).
 * Returns the number of pairs. */
static size_t cross(const ssb4d_G *G, const px *p, int dr, int dc, int nt, double complex *X)
{
    size_t nb = p->nb, rows = G->det_shape[0], cols = G->det_shape[1];
    size_t *pairs = malloc(2 * (G->n_bf ? G->n_bf : 1) * sizeof *pairs), np = 0;
    if (!pairs)
        return 0;
    for (size_t ib = 0; ib < G->n_bf; ib++) {
        if (!G_stored(G, ib))
            continue;
        long r = p->row[ib] + dr, c = p->col[ib] + dc;
        if (r < 0 || c < 0 || (size_t)r >= rows || (size_t)c >= cols)
            continue;
        int32_t jb = p->bf_of[(size_t)r * cols + (size_t)c];
        if (jb < 0 || !G_stored(G, (size_t)jb))
            continue;
        pairs[2 * np] = ib;
        pairs[2 * np + 1] = (size_t)jb;
        np++;
    }
    /* Threads own blocks of bins (so each sum runs in pair order whatever the thread count);
     * within a block the pairs are the outer loop, so each pixel's values are read in a row. */
    const size_t BB = 32;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t b0 = 0; b0 < nb; b0 += BB) {
        size_t b1 = b0 + BB < nb ? b0 + BB : nb;
        double sr[32] = {0}, si[32] = {0};
        for (size_t k = 0; k < np; k++) {
            const cfloat *a = p->v + pairs[2 * k] * nb, *c = p->v + pairs[2 * k + 1] * nb;
            for (size_t b = b0; b < b1; b++) {
                float ar = crealf(a[b]), ai = cimagf(a[b]), cr = crealf(c[b]), ci = cimagf(c[b]);
                sr[b - b0] += (double)ar * cr + (double)ai * ci; /* a·conj(c) */
                si[b - b0] += (double)ai * cr - (double)ar * ci;
            }
        }
        for (size_t b = b0; b < b1; b++)
            X[b] = sr[b - b0] + I * si[b - b0];
    }
    free(pairs);
    return np;
}

/* c(d) = Σ_b Re(X_b e^{2πi q_b·d}) and its gradient and Hessian. */
static double corr(const px *p, const double complex *X, const double d[2], double grad[2], double hess[3])
{
    double c = 0, g0 = 0, g1 = 0, h00 = 0, h01 = 0, h11 = 0;
    for (size_t b = 0; b < p->nb; b++) {
        double ph = 2 * M_PI * (p->qx[b] * d[0] + p->qy[b] * d[1]);
        double re = creal(X[b]) * cos(ph) - cimag(X[b]) * sin(ph);
        double im = creal(X[b]) * sin(ph) + cimag(X[b]) * cos(ph);
        double ux = 2 * M_PI * p->qx[b], uy = 2 * M_PI * p->qy[b];
        c += re;
        g0 -= im * ux;
        g1 -= im * uy;
        h00 -= re * ux * ux;
        h01 -= re * ux * uy;
        h11 -= re * uy * uy;
    }
    if (grad)
        grad[0] = g0, grad[1] = g1;
    if (hess)
        hess[0] = h00, hess[1] = h01, hess[2] = h11;
    return c;
}

/* The highest peak of c within `radius` Å of `centre`: a grid search (step h), then Newton.
 * Returns 0 when no proper maximum was found. */
static int peak(const px *p, const double complex *X, const double centre[2], double radius, double h,
                double out[2], double *curv)
{
    int n = (int)ceil(radius / h);
    double best = -INFINITY, bd[2] = {centre[0], centre[1]};
    for (int a = -n; a <= n; a++)
        for (int b = -n; b <= n; b++) {
            if ((double)a * a + (double)b * b > (double)n * n)
                continue;
            double d[2] = {centre[0] + a * h, centre[1] + b * h};
            double c = corr(p, X, d, NULL, NULL);
            if (c > best)
                best = c, bd[0] = d[0], bd[1] = d[1];
        }
    for (int it = 0; it < 20; it++) {
        double gr[2], H[3];
        corr(p, X, bd, gr, H);
        double det = H[0] * H[2] - H[1] * H[1];
        if (!(H[0] < 0 && det > 0))
            return 0;
        double s0 = -(H[2] * gr[0] - H[1] * gr[1]) / det, s1 = -(-H[1] * gr[0] + H[0] * gr[1]) / det;
        double len = hypot(s0, s1);
        if (len > h) { /* stay within the grid cell the search found */
            s0 *= h / len;
            s1 *= h / len;
        }
        bd[0] += s0;
        bd[1] += s1;
        if (len < 1e-6)
            break;
    }
    double H[3];
    corr(p, X, bd, NULL, H);
    if (!(H[0] < 0 && H[0] * H[2] - H[1] * H[1] > 0))
        return 0;
    out[0] = bd[0];
    out[1] = bd[1];
    *curv = sqrt(H[0] * H[2] - H[1] * H[1]);
    return 1;
}


/* ---- the joint objective over offsets ---------------------------------------------------------- */

#define MAX_OFFSETS 48

typedef struct {
    int dr, dc;
    double complex *X; /* normalised cross-spectrum at the selected bins */
    size_t pairs;
} off;

#define NHYP 4

/* c on the grid (i·h, j·h), |i|, |j| <= rad, row-major: the phasor of each bin separates into
 * a row and a column factor, so the table costs one complex product per bin and grid point. */
static int corr_table(const px *p, const double complex *X, int rad, double h, double *out)
{
    int w = 2 * rad + 1;
    double complex *ex = malloc((size_t)w * p->nb * sizeof *ex), *ey = malloc((size_t)w * p->nb * sizeof *ey);
    double complex *y = malloc(p->nb * sizeof *y);
    if (!ex || !ey || !y) {
        free(ex), free(ey), free(y);
        return 0;
    }
    for (int i = -rad; i <= rad; i++)
        for (size_t b = 0; b < p->nb; b++) {
            ex[(size_t)(i + rad) * p->nb + b] = cexp(2 * M_PI * I * p->qx[b] * i * h);
            ey[(size_t)(i + rad) * p->nb + b] = cexp(2 * M_PI * I * p->qy[b] * i * h);
        }
    for (int i = 0; i < w; i++) {
        for (size_t b = 0; b < p->nb; b++)
            y[b] = X[b] * ex[(size_t)i * p->nb + b];
        for (int j = 0; j < w; j++) {
            const double complex *e = ey + (size_t)j * p->nb;
            double c = 0;
            for (size_t b = 0; b < p->nb; b++)
                c += creal(y[b]) * creal(e[b]) - cimag(y[b]) * cimag(e[b]);
            out[i * w + j] = c;
        }
    }
    free(ex), free(ey), free(y);
    return 1;
}

/* J at grid point g = (b1 row, b2 row, b1 col, b2 col) in steps: a sum of table lookups. */
static double grid_J(const off *o, size_t n, double *const *tab, const int *rad, const int g[4])
{
    double J = 0;
    for (size_t k = 0; k < n; k++) {
        int di = o[k].dr * g[0] + o[k].dc * g[1], dj = o[k].dr * g[2] + o[k].dc * g[3];
        J += tab[k][(di + rad[k]) * (2 * rad[k] + 1) + (dj + rad[k])];
    }
    return J;
}

/* J at g is no lower than at any of its 8 axis neighbours (within the grid). */
static int grid_local_max(const off *o, size_t n, double *const *tab, const int *rad, int lim, const int g[4], double J)
{
    for (int c = 0; c < 4; c++)
        for (int s = -1; s <= 1; s += 2) {
            int h[4] = {g[0], g[1], g[2], g[3]};
            h[c] += s;
            if (h[c] < -lim || h[c] > lim || h[0] * h[0] + h[2] * h[2] > lim * lim || h[1] * h[1] + h[3] * h[3] > lim * lim)
                continue;
            if (grid_J(o, n, tab, rad, h) > J)
                return 0;
        }
    return 1;
}

/* Keeps the NHYP best (sorted), replacing a kept point within 3 steps of g rather than adding. */
static void hyp_insert(double *hj, int (*hb)[4], size_t *nh, double J, const int g[4])
{
    for (size_t k = 0; k < *nh; k++) {
        int d = 0;
        for (int c = 0; c < 4; c++)
            d = abs(hb[k][c] - g[c]) > d ? abs(hb[k][c] - g[c]) : d;
        if (d <= 3) {
            if (J > hj[k]) { /* move it, then restore the order */
                hj[k] = J;
                memcpy(hb[k], g, 4 * sizeof *g);
                for (size_t m = k; m > 0 && hj[m] > hj[m - 1]; m--) {
                    double tj = hj[m];
                    int tb[4];
                    memcpy(tb, hb[m], sizeof tb);
                    hj[m] = hj[m - 1], memcpy(hb[m], hb[m - 1], sizeof tb);
                    hj[m - 1] = tj, memcpy(hb[m - 1], tb, sizeof tb);
                }
            }
            return;
        }
    }
    size_t pos = *nh < NHYP ? *nh : NHYP - 1;
    if (*nh == NHYP && J <= hj[NHYP - 1])
        return;
    while (pos > 0 && hj[pos - 1] < J) {
        hj[pos] = hj[pos - 1];
        memcpy(hb[pos], hb[pos - 1], 4 * sizeof(int));
        pos--;
    }
    hj[pos] = J;
    memcpy(hb[pos], g, 4 * sizeof *g);
    if (*nh < NHYP)
        (*nh)++;
}

/* J(B) = Σ_Δ c_Δ(B·Δ) over the first n offsets, with its gradient and Hessian in B. */
static double joint(const px *p, const off *o, size_t n, const double B[4], double grad[4], double hess[16])
{
    double J = 0;
    if (grad)
        memset(grad, 0, 4 * sizeof *grad);
    if (hess)
        memset(hess, 0, 16 * sizeof *hess);
    for (size_t k = 0; k < n; k++) {
        double u[2] = {o[k].dr, o[k].dc};
        double d[2] = {B[0] * u[0] + B[1] * u[1], B[2] * u[0] + B[3] * u[1]}, g[2], H[3];
        J += corr(p, o[k].X, d, g, H);
        if (!grad)
            continue;
        double Hm[2][2] = {{H[0], H[1]}, {H[1], H[2]}};
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 2; c++) {
                grad[2 * r + c] += g[r] * u[c];
                for (int r2 = 0; r2 < 2; r2++)
                    for (int c2 = 0; c2 < 2; c2++)
                        hess[(2 * r + c) * 4 + 2 * r2 + c2] += Hm[r][r2] * u[c] * u[c2];
            }
    }
    return J;
}

/* Solves A x = b (4×4) by Gaussian elimination with partial pivoting; 0 if singular. */
static int solve4(double A[16], double b[4], double x[4])
{
    int idx[4] = {0, 1, 2, 3};
    for (int c = 0; c < 4; c++) {
        int piv = c;
        for (int r = c + 1; r < 4; r++)
            if (fabs(A[idx[r] * 4 + c]) > fabs(A[idx[piv] * 4 + c]))
                piv = r;
        int t = idx[c];
        idx[c] = idx[piv];
        idx[piv] = t;
        double a = A[idx[c] * 4 + c];
        if (!(fabs(a) > 1e-300))
            return 0;
        for (int r = c + 1; r < 4; r++) {
            double f = A[idx[r] * 4 + c] / a;
            for (int k = c; k < 4; k++)
                A[idx[r] * 4 + k] -= f * A[idx[c] * 4 + k];
            b[idx[r]] -= f * b[idx[c]];
        }
    }
    for (int c = 3; c >= 0; c--) {
        double s = b[idx[c]];
        for (int k = c + 1; k < 4; k++)
            s -= A[idx[c] * 4 + k] * x[k];
        x[c] = s / A[idx[c] * 4 + c];
    }
    return 1;
}

/* Maximises J over B from B (Newton steps, each at most `limit` Å per pixel of offset, halved
 * until J grows). */
static void joint_maximise(const px *p, const off *o, size_t n, double B[4], double fovlim)
{
    double g[4], H[16];
    double J = joint(p, o, n, B, g, H);
    for (int it = 0; it < 30; it++) {
        double A[16], b[4], x[4];
        for (int k = 0; k < 16; k++)
            A[k] = -H[k];
        memcpy(b, g, sizeof b);
        if (!solve4(A, b, x))
            break;
        /* keep the step small against the longest offset's shift: at most a quarter Å there */
        int umax = 1;
        for (size_t k = 0; k < n; k++)
            umax = abs(o[k].dr) + abs(o[k].dc) > umax ? abs(o[k].dr) + abs(o[k].dc) : umax;
        double len = sqrt(x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3]) * umax;
        double scale = len > 0.25 ? 0.25 / len : 1.0;
        double Bn[4], Jn = -INFINITY;
        for (int half = 0; half < 8; half++, scale *= 0.5) {
            for (int k = 0; k < 4; k++)
                Bn[k] = B[k] + scale * x[k];
            Jn = joint(p, o, n, Bn, NULL, NULL);
            if (Jn > J)
                break;
        }
        if (!(Jn > J))
            break;
        memcpy(B, Bn, sizeof Bn);
        J = joint(p, o, n, B, g, H);
        if (scale * len < 1e-5)
            break;
    }
    (void)fovlim;
}

/* ---- B → aberrations and rotation ----------------------------------------------------------- */

/* M (Å, symmetric: m00, m01, m11) and the rotation a (rad) from B' = B·diag(1/Δk) = λ M R(a),
 * R(a) = [[cos a, sin a], [−sin a, cos a]]; a is the solution in (−π/2, π/2]. */
static void decompose(const double Bp[4], double lambda, double *a_out, double M[3])
{
    double a = atan2(Bp[1] - Bp[2], Bp[0] + Bp[3]);
    if (a > M_PI / 2)
        a -= M_PI;
    else if (a <= -M_PI / 2)
        a += M_PI;
    double c = cos(a), s = sin(a);
    /* B' R(a)ᵀ, symmetrised */
    double s00 = Bp[0] * c + Bp[1] * s, s01 = -Bp[0] * s + Bp[1] * c;
    double s10 = Bp[2] * c + Bp[3] * s, s11 = -Bp[2] * s + Bp[3] * c;
    M[0] = s00 / lambda;
    M[1] = 0.5 * (s01 + s10) / lambda;
    M[2] = s11 / lambda;
    *a_out = a;
}

/* The symmetric M at a given rotation a (least squares: the symmetric part of B'R(a)ᵀ/λ) and the
 * antisymmetric remainder (Å) that rotation leaves unexplained. */
static double at_rotation(const double Bp[4], double lambda, double a, double M[3])
{
    double c = cos(a), s = sin(a);
    double s00 = Bp[0] * c + Bp[1] * s, s01 = -Bp[0] * s + Bp[1] * c;
    double s10 = Bp[2] * c + Bp[3] * s, s11 = -Bp[2] * s + Bp[3] * c;
    M[0] = s00 / lambda;
    M[1] = 0.5 * (s01 + s10) / lambda;
    M[2] = s11 / lambda;
    return 0.5 * fabs(s01 - s10) / lambda;
}

/* (C10 nm, C12 nm, φ12 deg) from M (Å): M = [[C10 + C12 cos2φ, C12 sin2φ], [C12 sin2φ, C10 − C12 cos2φ]]. */
static void m_to_aberrations(const double M[3], double out[3])
{
    double c10 = 0.5 * (M[0] + M[2]), cc = 0.5 * (M[0] - M[2]), ss = M[1];
    out[0] = c10 / 10.0;
    out[1] = hypot(cc, ss) / 10.0;
    out[2] = 0.5 * atan2(ss, cc) * 180.0 / M_PI;
}

static double wrap180(double deg)
{
    double r = fmod(deg + 180.0, 360.0);
    if (r < 0)
        r += 360.0;
    return r - 180.0;
}

/* B' = B diag(1/Δk) (Å per reciprocal unit of detector offset), times T for a mirrored
 * detector (its axes swapped before the rotation: B = λ M R(a) T diag(Δk), and T² = I). */
static void scaled(const double B[4], const double dk[2], int flip, double Bp[4])
{
    double b[4] = {B[0] / dk[0], B[1] / dk[1], B[2] / dk[0], B[3] / dk[1]};
    if (flip) { /* columns swapped */
        Bp[0] = b[1], Bp[1] = b[0], Bp[2] = b[3], Bp[3] = b[2];
    } else
        memcpy(Bp, b, sizeof b);
}

/* (C10, C12, φ12, rotation) of the branch with rotation in [−90, 90) from B (Å/px). Either
 * handedness fits any B exactly: a 2×2 matrix is (symmetric)·(rotation) and also
 * (symmetric)·(reflection); the shifts alone cannot tell them apart (the fit's objective does). */
static void solve(const double B[4], const double dk[2], int flip, double lambda, double out[4])
{
    double Bp[4], a, M[3];
    scaled(B, dk, flip, Bp);
    decompose(Bp, lambda, &a, M);
    m_to_aberrations(M, out);
    double rot = -a * 180.0 / M_PI;
    if (rot >= 90.0) { /* the same point on the other branch: rotation − 180, −M */
        rot -= 180.0;
        out[0] = -out[0];
        out[2] = out[2] + 90.0;
    }
    out[2] = fmod(out[2] + 90.0 + 3600.0, 180.0) - 90.0;
    out[3] = rot;
}

/* The solution and its standard errors: B's rows are independent with covariance s2·A⁻¹;
 * propagated by finite differences of the solution. */
static void solve_sigma(const double B[4], const double dk[2], int flip, double lambda, double s2,
                        const double Ai[2][2], double est[4], double sigma[4])
{
    solve(B, dk, flip, lambda, est);
    double var[4] = {0, 0, 0, 0};
    if (isfinite(s2)) {
        for (int r = 0; r < 2; r++) {
            /* eigen-directions of the 2×2 covariance s2·Ai for this row */
            double a = Ai[0][0], b = Ai[0][1], c = Ai[1][1];
            double tr = 0.5 * (a + c), dd = sqrt(0.25 * (a - c) * (a - c) + b * b);
            double ev[2] = {tr + dd, tr - dd};
            for (int e = 0; e < 2; e++) {
                double vx, vy;
                if (fabs(b) > 1e-300)
                    vx = ev[e] - c, vy = b;
                else
                    vx = (e == 0) == (a >= c), vy = (e == 0) != (a >= c);
                double nrm = hypot(vx, vy);
                vx /= nrm;
                vy /= nrm;
                double sd = sqrt(fmax(ev[e], 0) * s2);
                double Bq[4];
                memcpy(Bq, B, sizeof Bq);
                Bq[2 * r] += sd * vx;
                Bq[2 * r + 1] += sd * vy;
                double x[4];
                solve(Bq, dk, flip, lambda, x);
                for (int k = 0; k < 4; k++) {
                    double dlt = x[k] - est[k];
                    if (k >= 2)
                        dlt = fmod(dlt + 90.0 + 3600.0, 180.0) - 90.0;
                    var[k] += dlt * dlt;
                }
            }
        }
    }
    for (int k = 0; k < 4; k++)
        sigma[k] = isfinite(s2) ? sqrt(var[k]) : NAN;
}

/* ---- the estimate ---------------------------------------------------------------------------- */

typedef struct {
    int dr, dc;
    double d[2];
    double curv;
    size_t pairs;
} meas;

ssb4d_status ssb4d_parallax_estimate(const ssb4d_G *G, const ssb4d_geometry *g,
                                     const ssb4d_parallax_opts *o, ssb4d_mem *mem,
                                     ssb4d_parallax *out, ssb4d_err *err)
{
    ssb4d_parallax_opts dflt;
    if (!o) {
        ssb4d_parallax_opts_default(&dflt);
        o = &dflt;
    }
    memset(out, 0, sizeof *out);
    if (!G || !g)
        return ssb_fail(err, SSB4D_EINVAL, "the parallax estimate needs G and a geometry");
    ssb4d_status st = ssb_geometry_check(g, err);
    if (st)
        return st;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int nt = ssb_threads_resolve(o->threads);
    double lambda = ssb4d_wavelength_A(g->kv);
    double dk[2] = {g->det_sampling_mrad[0] * 1e-3 / lambda, g->det_sampling_mrad[1] * 1e-3 / lambda};
    size_t rows = G->det_shape[0], cols = G->det_shape[1];

    px p;
    memset(&p, 0, sizeof p);
    p.bf_of = malloc(rows * cols * sizeof *p.bf_of);
    p.row = malloc((G->n_bf ? G->n_bf : 1) * sizeof *p.row);
    p.col = malloc((G->n_bf ? G->n_bf : 1) * sizeof *p.col);
    if (!p.bf_of || !p.row || !p.col) {
        px_free(&p, mem);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory (parallax)");
    }
    for (size_t i = 0; i < rows * cols; i++)
        p.bf_of[i] = -1;
    double rmax = 0;
    for (size_t ib = 0; ib < G->n_bf; ib++) {
        p.row[ib] = (int)(G->bf_pix[ib] / (int32_t)cols);
        p.col[ib] = (int)(G->bf_pix[ib] % (int32_t)cols);
        p.bf_of[G->bf_pix[ib]] = (int32_t)ib;
        if (G_stored(G, ib)) {
            p.n_used++;
            rmax = fmax(rmax, hypot(p.row[ib] - g->centre_px[0], p.col[ib] - g->centre_px[1]));
        }
    }
    size_t want = parallax_want_bins(o, G->n_bf);
    st = p.n_used < 8 ? ssb_fail(err, SSB4D_ENOTFOUND, "too few BF pixels (%zu) for the parallax estimate", p.n_used)
                      : select_bins(G, g, want, nt, &p, mem, err);
    if (!st && p.nb < 4)
        st = ssb_fail(err, SSB4D_ENOTFOUND, "the scan is too small for the parallax estimate");
    if (!st)
        st = extract(G, nt, &p, mem, err);

    /* Offsets along four directions, doubling while the pairs still cover a good part of the
     * disk; their cross-spectra X_Δ, each normalised so that every offset weighs the same. */
    static const int dirs[4][2] = {{1, 0}, {0, 1}, {1, 1}, {1, -1}};
    off ofs[MAX_OFFSETS];
    size_t no = 0;
    for (int scale = 1; !st && scale <= (int)fmax(1.0, 0.7 * rmax); scale *= 2)
        for (int d = 0; d < 4 && no < MAX_OFFSETS; d++) {
            off *q = &ofs[no];
            q->dr = dirs[d][0] * scale;
            q->dc = dirs[d][1] * scale;
            q->X = malloc(p.nb * sizeof *q->X);
            if (!q->X) {
                st = ssb_fail(err, SSB4D_ENOMEM, "out of memory (parallax)");
                break;
            }
            q->pairs = cross(G, &p, q->dr, q->dc, nt, q->X);
            double norm = 0;
            for (size_t b = 0; b < p.nb; b++)
                norm += cabs(q->X[b]);
            if (q->pairs < 8 || !(norm > 0)) {
                free(q->X);
                continue;
            }
            for (size_t b = 0; b < p.nb; b++)
                q->X[b] /= norm;
            no++;
        }
    double B[4] = {0, 0, 0, 0}; /* (row, col) shift per (row, col) pixel offset */
    double alt_B[SSB4D_PARALLAX_ALT][4], alt_J[SSB4D_PARALLAX_ALT];
    size_t n_alt = 0;
    double best = NAN;
    int have_B = 0;
    double fov = fmin(G->ny * g->scan_step_A[0], G->nx * g->scan_step_A[1]);
    double h = 0.25 * fmin(g->scan_step_A[0], g->scan_step_A[1]);
    /* The largest shift per pixel the aberration box allows (|M| <= max_aberration_nm). */
    double bmax = fmin(1.1 * (o->max_aberration_nm > 0 ? o->max_aberration_nm : 50.0) * 10.0 * fmax(g->det_sampling_mrad[0], g->det_sampling_mrad[1]) * 1e-3,
                       0.3 * fov);
    if (!st && no >= 2 && ofs[0].dr == 1 && ofs[0].dc == 0 && ofs[1].dr == 0 && ofs[1].dc == 1) {
        /* One- and two-pixel offsets: a crystal's cross-correlation has several peaks within reach
         * (its undersampled reflections alias), so no single offset's highest peak can be
         * trusted. B's first estimate is the grid point (b1, b2) of B's two columns, within the
         * box's largest shift, that maximises J: every offset's correlation is tabulated on the
         * grid once, and J at each grid pair is a sum of table lookups. */
        size_t nlev = no < 8 ? no : 8;
        double hg = fmin(h, 0.05);
        int n = (int)ceil(bmax / hg);
        if (n > 40) { /* keep the tables small: a coarser grid, refined by Newton below */
            n = 40;
            hg = bmax / n;
        }
        double *tab[8] = {0};
        int rad[8], ok = 1;
        for (size_t k = 0; k < nlev && ok; k++) {
            rad[k] = (abs(ofs[k].dr) + abs(ofs[k].dc)) * n;
            tab[k] = malloc((size_t)(2 * rad[k] + 1) * (2 * rad[k] + 1) * sizeof *tab[k]);
            ok = tab[k] != NULL && corr_table(&p, ofs[k].X, rad[k], hg, tab[k]);
        }
        /* the NHYP best grid points that are local maxima in all four directions, kept apart */
        double hj[NHYP];
        int hb[NHYP][4];
        size_t nh = 0;
        for (int i1 = -n; ok && i1 <= n; i1++)
            for (int j1 = -n; j1 <= n; j1++) {
                if (i1 * i1 + j1 * j1 > n * n)
                    continue;
                for (int i2 = -n; i2 <= n; i2++)
                    for (int j2 = -n; j2 <= n; j2++) {
                        if (i2 * i2 + j2 * j2 > n * n)
                            continue;
                        int g4[4] = {i1, i2, j1, j2};
                        double J = grid_J(ofs, nlev, tab, rad, g4);
                        if (nh == NHYP && J <= hj[NHYP - 1])
                            continue;
                        if (!grid_local_max(ofs, nlev, tab, rad, n, g4, J))
                            continue;
                        hyp_insert(hj, hb, &nh, J, g4);
                    }
            }
        for (size_t k = 0; k < nlev; k++)
            free(tab[k]);
        /* each hypothesis refined on ever longer offsets; the best over all offsets is B */
        double Bh[NHYP][4], Jh[NHYP];
        for (size_t k = 0; k < nh; k++) {
            for (int c = 0; c < 4; c++)
                Bh[k][c] = hb[k][c] * hg; /* B = [b1_row b2_row; b1_col b2_col] */
            for (size_t lev = nlev; lev <= no; lev += 4) {
                joint_maximise(&p, ofs, lev < no ? lev : no, Bh[k], 0.3 * fov);
                if (lev >= no)
                    break;
            }
            Jh[k] = joint(&p, ofs, no, Bh[k], NULL, NULL) / (double)no;
        }
        size_t kb = 0;
        for (size_t k = 1; k < nh; k++)
            if (Jh[k] > Jh[kb])
                kb = k;
        if (nh) {
            memcpy(B, Bh[kb], sizeof B);
            have_B = 1;
            best = Jh[kb];
            size_t na = 0;
            for (size_t k = 0; k < nh && na < SSB4D_PARALLAX_ALT; k++)
                if (k != kb) {
                    memcpy(alt_B[na], Bh[k], sizeof alt_B[na]);
                    alt_J[na] = Jh[k];
                    na++;
                }
            n_alt = na;
        }
    }
    /* Each offset's own peak next to B·Δ: the measurements whose scatter gives B's error. */
    meas ms[MAX_OFFSETS];
    size_t nm = 0;
    for (size_t k = 0; have_B && k < no; k++) {
        double pred[2] = {B[0] * ofs[k].dr + B[1] * ofs[k].dc, B[2] * ofs[k].dr + B[3] * ofs[k].dc}, d2[2], cv;
        if (hypot(pred[0], pred[1]) > 0.3 * fov || !peak(&p, ofs[k].X, pred, 2 * h, h / 2, d2, &cv))
            continue;
        ms[nm].dr = ofs[k].dr;
        ms[nm].dc = ofs[k].dc;
        ms[nm].d[0] = d2[0];
        ms[nm].d[1] = d2[1];
        ms[nm].curv = cv;
        ms[nm].pairs = ofs[k].pairs;
        nm++;
    }
    for (size_t k = 0; k < no; k++)
        free(ofs[k].X);
    if (have_B && nm < 3)
        have_B = 0;
    if (!st && !have_B)
        st = ssb_fail(err, SSB4D_ENOTFOUND, "no parallax shift could be measured (no contrast in the BF images?)");
    if (!st) {
        /* Residual and covariance of B (equal weights): σ² = RSS / (2 nm − 4). */
        double rss = 0, A[2][2] = {{0, 0}, {0, 0}};
        for (size_t i = 0; i < nm; i++) {
            double u[2] = {ms[i].dr, ms[i].dc};
            for (int r = 0; r < 2; r++) {
                double e = ms[i].d[r] - (B[2 * r] * u[0] + B[2 * r + 1] * u[1]);
                rss += e * e;
                for (int c = 0; c < 2; c++)
                    A[r][c] += u[r] * u[c];
            }
        }
        double dof = 2.0 * (double)nm - 4.0;
        double s2 = dof > 0 ? rss / dof : NAN;
        double det = A[0][0] * A[1][1] - A[0][1] * A[1][0];
        double Ai[2][2] = {{A[1][1] / det, -A[0][1] / det}, {-A[1][0] / det, A[0][0] / det}};
        memcpy(out->B, B, sizeof out->B);
        out->J = best;
        out->n_alt = n_alt;
        memcpy(out->alt_B, alt_B, sizeof out->alt_B);
        memcpy(out->alt_J, alt_J, sizeof out->alt_J);
        out->residual_A = nm ? sqrt(rss / (2.0 * (double)nm)) : NAN;
        out->n_offsets = nm;
        out->n_bins = p.nb;
        out->n_pixels = p.n_used;
        out->flip = g->flip != 0;
        solve_sigma(B, dk, out->flip, lambda, s2, Ai, out->est, out->sigma);
        solve_sigma(B, dk, !out->flip, lambda, s2, Ai, out->est_other, out->sigma_other);
        out->C10_nm = out->est[0];
        out->C12_nm = out->est[1];
        out->phi12_deg = out->est[2];
        out->rotation_deg = out->est[3];
    }
    px_free(&p, mem);
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return st;
}

void ssb4d_parallax_at_rotation(const ssb4d_parallax *p, const ssb4d_geometry *g, double rotation_deg,
                                double ab[3], double *misfit_nm)
{
    double lambda = ssb4d_wavelength_A(g->kv);
    double dk[2] = {g->det_sampling_mrad[0] * 1e-3 / lambda, g->det_sampling_mrad[1] * 1e-3 / lambda};
    double Bp[4], M[3];
    scaled(p->B, dk, g->flip, Bp);
    double mis = at_rotation(Bp, lambda, -rotation_deg * M_PI / 180.0, M);
    m_to_aberrations(M, ab);
    ab[2] = fmod(ab[2] + 90.0 + 3600.0, 180.0) - 90.0;
    if (misfit_nm)
        *misfit_nm = mis / 10.0;
    (void)wrap180;
}

void ssb4d_parallax_mirror(const ssb4d_parallax *p, ssb4d_parallax *out)
{
    *out = *p;
    memcpy(out->est, p->est_other, sizeof out->est);
    memcpy(out->sigma, p->sigma_other, sizeof out->sigma);
    memcpy(out->est_other, p->est, sizeof out->est_other);
    memcpy(out->sigma_other, p->sigma, sizeof out->sigma_other);
    out->flip = !p->flip;
    out->C10_nm = out->est[0];
    out->C12_nm = out->est[1];
    out->phi12_deg = out->est[2];
    out->rotation_deg = out->est[3];
}

void ssb4d_parallax_alternative(const ssb4d_parallax *p, const ssb4d_geometry *g, size_t k, ssb4d_parallax *out)
{
    *out = *p;
    if (k >= p->n_alt)
        return;
    double lambda = ssb4d_wavelength_A(g->kv);
    double dk[2] = {g->det_sampling_mrad[0] * 1e-3 / lambda, g->det_sampling_mrad[1] * 1e-3 / lambda};
    memcpy(out->B, p->alt_B[k], sizeof out->B);
    out->J = p->alt_J[k];
    solve(out->B, dk, g->flip, lambda, out->est);
    solve(out->B, dk, !g->flip, lambda, out->est_other);
    out->flip = g->flip != 0;
    out->C10_nm = out->est[0];
    out->C12_nm = out->est[1];
    out->phi12_deg = out->est[2];
    out->rotation_deg = out->est[3];
    out->n_alt = 0;
}
