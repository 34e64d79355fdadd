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
#include "gbuild/gbuild.h"
#include "optics/optics.h"

#include <complex.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef float complex cfloat;

void ssb4d_parallax_opts_default(ssb4d_parallax_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_bins = 1024;
    o->max_bytes = 64u << 20;
}

/* ---- frequencies -------------------------------------------------------------------------- */

static long freq_index(size_t i, size_t n) { return i < (n + 1) / 2 ? (long)i : (long)i - (long)n; }

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

/* Chooses the nb strongest bins of Σ_k |G(q,k)|² over every m-th stored pixel, among bins away
 * from DC (3×3), off the Nyquist row/column, and inside the SSB passband |q| < 2α/λ. */
static ssb4d_status select_bins(const ssb4d_G *G, const ssb4d_geometry *g, size_t want, int nt, px *p,
                                ssb4d_mem *mem, ssb4d_err *err)
{
    size_t ny = G->ny, nx = G->nx, nxh = G->nxh, nbins = ny * nxh;
    double lambda = ssb4d_wavelength_A(g->kv), qmax = 2.0 * g->semiangle_mrad * 1e-3 / lambda;
    double *pw = calloc(nbins, sizeof *pw);
    if (!pw)
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory (parallax power)");
    size_t m = G->n_stored > 256 ? G->n_stored / 256 : 1, seen = 0;
    G_group gr = {0};
    ssb4d_status st = G_group_init(G, mem, &gr, err);
    const cfloat **sel = st ? NULL : malloc((gr.cap ? gr.cap : 1) * sizeof *sel);
    if (!st && !sel)
        st = ssb4d_fail(err, SSB4D_ENOMEM, "out of memory (parallax power)");
    for (size_t g0 = 0; !st && g0 < G->n_bf; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < G->n_bf ? g0 + gr.cap : G->n_bf;
        if ((st = G_group_load(G, g0, g1, &gr, err)))
            break;
        /* the pixels of this group that are sampled, then threads over bins (each owns its bins) */
        size_t ns = 0;
        for (size_t ib = g0; ib < g1; ib++)
            if (gr.planes[ib - g0] && seen++ % m == 0)
                sel[ns++] = (const cfloat *)gr.planes[ib - g0];
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t b = 0; b < nbins; b++) {
            double acc = 0;
            for (size_t k = 0; k < ns; k++) {
                float re = crealf(sel[k][b]), im = cimagf(sel[k][b]);
                acc += (double)re * re + (double)im * im;
            }
            pw[b] += acc;
        }
    }
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
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory (parallax bins)");
    }
    size_t n = 0;
    for (size_t i = 0; i < ny; i++)
        for (size_t j = 0; j < nxh; j++) {
            long fi = freq_index(i, ny), fj = (long)j;
            if (labs(fi) <= 1 && fj <= 1)
                continue;
            if ((ny % 2 == 0 && i == ny / 2) || (nx % 2 == 0 && j == nx / 2))
                continue;
            double qx = (double)fi / ((double)ny * g->scan_step_A[0]);
            double qy = (double)fj / ((double)nx * g->scan_step_A[1]);
            if (qx * qx + qy * qy >= qmax * qmax)
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
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory (parallax bins)");
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
    p->v = ssb4d_mem_calloc(mem, (G->n_bf ? G->n_bf : 1) * (nb ? nb : 1) * sizeof *p->v, "parallax spectra", err);
    if (!p->v)
        return SSB4D_ENOMEM;
    G_group gr = {0};
    ssb4d_status st = G_group_init(G, mem, &gr, err);
    for (size_t g0 = 0; !st && g0 < G->n_bf; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < G->n_bf ? g0 + gr.cap : G->n_bf;
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

/* (C10, C12, φ12, rotation) of the branch with rotation in [−90, 90) from B (Å/px). */
static void solve(const double B[4], const double dk[2], double lambda, double out[4])
{
    double Bp[4] = {B[0] / dk[0], B[1] / dk[1], B[2] / dk[0], B[3] / dk[1]}, a, M[3];
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
        return ssb4d_fail(err, SSB4D_EINVAL, "the parallax estimate needs G and a geometry");
    ssb4d_status st = ssb4d_geometry_check(g, err);
    if (st)
        return st;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int nt = ssb4d_threads_resolve(o->threads);
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
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory (parallax)");
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
    size_t want = o->max_bins ? o->max_bins : 1024;
    if (o->max_bytes && G->n_bf && want * G->n_bf * sizeof(cfloat) > o->max_bytes)
        want = o->max_bytes / (G->n_bf * sizeof(cfloat));
    if (want < 16)
        want = 16;
    st = p.n_used < 8 ? ssb4d_fail(err, SSB4D_ENOTFOUND, "too few BF pixels (%zu) for the parallax estimate", p.n_used)
                      : select_bins(G, g, want, nt, &p, mem, err);
    if (!st && p.nb < 4)
        st = ssb4d_fail(err, SSB4D_ENOTFOUND, "the scan is too small for the parallax estimate");
    if (!st)
        st = extract(G, nt, &p, mem, err);
    double complex *X = st ? NULL : malloc(p.nb * sizeof *X);
    if (!st && !X)
        st = ssb4d_fail(err, SSB4D_ENOMEM, "out of memory (parallax)");

    /* The ladder: offsets along four directions, doubling while the pairs still cover a good
     * part of the disk; each level's search is centred on the prediction of the levels before. */
    static const int dirs[4][2] = {{1, 0}, {0, 1}, {1, 1}, {1, -1}};
    meas ms[64];
    size_t nm = 0;
    double B[4] = {0, 0, 0, 0}; /* (row, col) shift per (row, col) pixel offset */
    int have_B = 0;
    double fov = fmin(G->ny * g->scan_step_A[0], G->nx * g->scan_step_A[1]);
    double h = 0.5 * fmin(g->scan_step_A[0], g->scan_step_A[1]);
    /* Alias spacing of a crystal is at least ~2 Å; a one-pixel shift search within ±1 Å. */
    double r1 = fmin(1.0, 0.25 * fov);
    for (int scale = 1; !st && scale <= (int)(0.7 * rmax) && nm + 4 <= sizeof ms / sizeof ms[0]; scale *= 2) {
        size_t level_start = nm;
        for (int d = 0; d < 4; d++) {
            int dr = dirs[d][0] * scale, dc = dirs[d][1] * scale;
            double pred[2] = {B[0] * dr + B[1] * dc, B[2] * dr + B[3] * dc};
            if (have_B && hypot(pred[0], pred[1]) > 0.3 * fov)
                continue; /* the images would barely overlap */
            size_t np = cross(G, &p, dr, dc, nt, X);
            if (np < 8)
                continue;
            double radius = have_B ? fmax(0.3, 0.25 * hypot(pred[0], pred[1])) : r1;
            radius = fmin(radius, 1.0);
            double d2[2], cv;
            if (!peak(&p, X, have_B ? pred : (double[2]){0, 0}, radius, fmin(h, radius / 4), d2, &cv))
                continue;
            ms[nm].dr = dr;
            ms[nm].dc = dc;
            ms[nm].d[0] = d2[0];
            ms[nm].d[1] = d2[1];
            ms[nm].curv = cv;
            ms[nm].pairs = np;
            nm++;
        }
        if (nm == level_start)
            break;
        /* Least squares of d = B·Δ over every measurement so far (equal weights). */
        double A[2][2] = {{0, 0}, {0, 0}}, Y[2][2] = {{0, 0}, {0, 0}};
        for (size_t i = 0; i < nm; i++) {
            double u[2] = {ms[i].dr, ms[i].dc};
            for (int r = 0; r < 2; r++)
                for (int c = 0; c < 2; c++) {
                    A[r][c] += u[r] * u[c];
                    Y[r][c] += ms[i].d[r] * u[c];
                }
        }
        double det = A[0][0] * A[1][1] - A[0][1] * A[1][0];
        if (!(fabs(det) > 0))
            continue;
        double Ai[2][2] = {{A[1][1] / det, -A[0][1] / det}, {-A[1][0] / det, A[0][0] / det}};
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 2; c++)
                B[r * 2 + c] = Y[r][0] * Ai[0][c] + Y[r][1] * Ai[1][c];
        have_B = 1;
    }
    if (!st && !have_B)
        st = ssb4d_fail(err, SSB4D_ENOTFOUND, "no parallax shift could be measured (no contrast in the BF images?)");
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
        out->residual_A = nm ? sqrt(rss / (2.0 * (double)nm)) : NAN;
        out->n_offsets = nm;
        out->n_bins = p.nb;
        out->n_pixels = p.n_used;
        solve(B, dk, lambda, out->est);
        /* Uncertainties: B's rows are independent with covariance s2·A⁻¹; propagate by finite
         * differences of the solution. */
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
                    solve(Bq, dk, lambda, x);
                    for (int k = 0; k < 4; k++) {
                        double dlt = x[k] - out->est[k];
                        if (k >= 2)
                            dlt = fmod(dlt + (k == 2 ? 90.0 : 90.0) + 3600.0, 180.0) - 90.0;
                        var[k] += dlt * dlt;
                    }
                }
            }
        }
        for (int k = 0; k < 4; k++)
            out->sigma[k] = isfinite(s2) ? sqrt(var[k]) : NAN;
        out->C10_nm = out->est[0];
        out->C12_nm = out->est[1];
        out->phi12_deg = out->est[2];
        out->rotation_deg = out->est[3];
    }
    free(X);
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
    double Bp[4] = {p->B[0] / dk[0], p->B[1] / dk[1], p->B[2] / dk[0], p->B[3] / dk[1]}, M[3];
    double mis = at_rotation(Bp, lambda, -rotation_deg * M_PI / 180.0, M);
    m_to_aberrations(M, ab);
    ab[2] = fmod(ab[2] + 90.0 + 3600.0, 180.0) - 90.0;
    if (misfit_nm)
        *misfit_nm = mis / 10.0;
    (void)wrap180;
}
