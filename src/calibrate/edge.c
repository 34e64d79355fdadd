/* edge.c — the BF disk's edge radius from a model of its profile (SPEC §4 "Detector sampling"),
 * not a threshold: a threshold at half the disk's median sits ~0.2 px inside the aperture's edge
 * (the SPEC 5.2 aperture's amplitude is 1/2 at the edge, so its intensity is 1/4 there), which
 * biases the sampling by ~1 %.
 *
 * Every unflagged pixel within EDGE_WINDOW px of the first guess R0 is modelled as
 *     I = b + s·(r − R0) + h·E(R − r) + t·(r − R0)·E(R − r)
 * with r its distance from the centre, (b, s, h, t) per azimuthal sector (linear, solved exactly
 * for each trial of the nonlinear parameters) and E the edge profile: the aperture's intensity
 * A² across its edge, A = clamp(x/u + 1/2, 0, 1) (SPEC 5.2 with a ramp u px wide), blurred by a
 * Gaussian of width σ (what scatters across the edge, the detector's spread), averaged over
 * S x S point samples per pixel (offsets projected on the pixel's radial direction, tabulated for
 * orientations 0–45°). Unless the pixel model is stated (ssb4d_calib_params.edge_pixel_S: the
 * simulator's det_oversample; then only that model is fitted, R and σ), four compete and the
 * one with the smaller residual wins:
 *   S = 1, u = 1:  the pattern sampled at the pixel centres (SPEC 5.2 on the detector grid: the
 *                  simulator's det_oversample 1);
 *   S = 3, u = 1/3 and S = 5, u = 1/5: the simulator's oversampled detectors;
 *   S = 6, u = 0:  a hard edge integrated over the pixel's area (a real pixelated detector).
 * The point-sampled model competes only where its blur is below half the pixel's own
 * (EDGE_POINT_MAX_BLUR): with more, its blur stands in for the pixel's area integration.
 * Sectors that fit far worse than the median one (another edge, a crystal's Bragg disk, crosses
 * the window there) are left out, at most half of them, and the fit repeated.
 * R and σ are found by a grid over σ with golden-section searches over R, then refined. The
 * standard error comes from the spread of per-sector radii (each sector refitted at the joint
 * σ and model): R_k = R + a·cos θ_k + b·sin θ_k + e_k (a, b: an off-centre disk) and
 * σ_R² = Σ e_k² / ((K − 3) K), plus the spread of pixel models that fit nearly as well and a
 * floor of 0.05 % (EDGE_SYS_REL). Serial and in a fixed order: the same bits for any thread count. */
#include "calibrate/calibrate_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EDGE_WINDOW 4.0   /* px either side of the first guess */
#define EDGE_SECTORS 16
#define EDGE_MIN_PIX 24   /* per sector */
#define EDGE_NMODELS 4
/* The method's own accuracy where the model holds (the sampling study's thin specimens and
 * point-sampled cases: up to 0.05–0.1 %), added to the standard error in quadrature, so that a
 * high-dose measurement does not claim more than the method can (docs/calibrate.md). */
#define EDGE_SYS_REL 5e-4
/* The point-sampled model stands for a pattern sampled at pixel centres with no blur but the
 * specimen's (the simulator's det_oversample 1: fitted blur 0–0.10 px over the sampling study). Where
 * it needs more blur than half the pixel's own width (area integration over a 1 px pixel is, to
 * second order, a radial blur of σ = 1/√12 px), its blur is standing in for the pixel's area
 * integration, which the integrated models describe with their own edge convention: it is left out
 * (on oversampled patterns it fits with 0.17–0.23 px and a radius 0.4–1.1 % too large). */
#define EDGE_POINT_MAX_BLUR (0.5 / 3.4641016151377544)
#define EDGE_MODEL_CHI2 25.0 /* a model whose residual is within this many σ² of the best competes */
#define EDGE_TX 4.5       /* the profile's table spans x in [-EDGE_TX, EDGE_TX] px */
#define EDGE_DX 0.025     /* in steps of */
#define EDGE_NX ((int)(2 * EDGE_TX / EDGE_DX) + 1)
#define EDGE_NTH 16       /* orientations over [0°, 45°] (the sub-samples' projections repeat) */

/* The pixel models: S x S point samples of the SPEC 5.2 edge (a ramp u px wide) per pixel. */
static const int MODEL_S[EDGE_NMODELS] = {1, 3, 5, 6};
static const double MODEL_U[EDGE_NMODELS] = {1.0, 1.0 / 3.0, 1.0 / 5.0, 0.0};

static double Phi(double z) { return 0.5 * erfc(-z / M_SQRT2); }
static double phi(double z) { return exp(-0.5 * z * z) / sqrt(2.0 * M_PI); }

int ssb_cal_edge_model_of_S(int S)
{
    /* S x S samples of a ramp 1/S px wide tend to the area-integrated hard edge: their radii
     * differ by u/6 = 1/(6 S) px, under 0.03 px from S = 7 on */
    return S <= 0 ? -1 : S == 1 ? 0 : S <= 3 ? 1 : S <= 5 ? 2 : 3;
}

/* E[q_u(x + σZ)], q_u(y) = clamp(y/u + 1/2, 0, 1)², Z standard normal (closed form). */
double ssb_cal_edge_profile(double x, double u, double sigma)
{
    if (!(sigma > 1e-9)) {
        if (u <= 0)
            return x > 0 ? 1.0 : x < 0 ? 0.0 : 0.5;
        double a = x / u + 0.5;
        a = a < 0 ? 0 : a > 1 ? 1 : a;
        return a * a;
    }
    if (u <= 1e-9)
        return Phi(x / sigma);
    double a = -0.5 * u, c = 0.5 * u, m = x - a;
    double al = (a - x) / sigma, be = (c - x) / sigma;
    double Pa = Phi(al), Pb = Phi(be), pa = phi(al), pb = phi(be);
    double mid = m * m * (Pb - Pa) + 2 * m * sigma * (pa - pb) + sigma * sigma * ((Pb - Pa) + al * pa - be * pb);
    return (1.0 - Pb) + mid / (u * u);
}

typedef struct {
    const double *r, *v; /* distance from the centre, value */
    const int *sec;      /* sector of each pixel */
    const int *tb;       /* orientation bin of each pixel */
    size_t n;
    double r0;
    double *tab;         /* the current model's profile, EDGE_NTH x EDGE_NX */
    unsigned char use[EDGE_SECTORS]; /* the sectors the joint fit uses */
} edge_data;

/* The profile of model m at blur σ, tabulated: pixel value against x (px inside the edge) for
 * each orientation bin: the mean over the pixel's S x S sub-samples (offsets projected on the
 * radial direction) of the blurred ramp. */
static void edge_table(edge_data *d, int m, double sigma)
{
    int S = MODEL_S[m];
    int nth = S == 1 ? 1 : EDGE_NTH;
    for (int b = 0; b < nth; b++) {
        double th = (b + 0.5) * (M_PI / 4) / EDGE_NTH, ct = cos(th), st = sin(th);
        double *row = d->tab + (size_t)b * EDGE_NX;
        for (int i = 0; i < EDGE_NX; i++) {
            double x = -EDGE_TX + i * EDGE_DX, acc = 0;
            for (int a = 0; a < S; a++)
                for (int c = 0; c < S; c++) {
                    double t = ((a + 0.5) / S - 0.5) * ct + ((c + 0.5) / S - 0.5) * st;
                    acc += ssb_cal_edge_profile(x - t, MODEL_U[m], sigma);
                }
            row[i] = acc / (S * S);
        }
    }
    for (int b = nth; b < EDGE_NTH; b++)
        memcpy(d->tab + (size_t)b * EDGE_NX, d->tab, EDGE_NX * sizeof *d->tab);
}

static double edge_lookup(const edge_data *d, int b, double x)
{
    const double *row = d->tab + (size_t)b * EDGE_NX;
    double f = (x + EDGE_TX) / EDGE_DX;
    if (f <= 0)
        return row[0];
    if (f >= EDGE_NX - 1)
        return row[EDGE_NX - 1];
    int i = (int)f;
    double w = f - i;
    return row[i] + w * (row[i + 1] - row[i]);
}

/* Solves the 4x4 normal equations of one sector (Gaussian elimination with partial pivoting);
 * returns the residual sum of squares, or HUGE_VAL if singular. */
static double sector_rss(double A[4][4], double y[4], double yy)
{
    double M[4][5];
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 4; j++)
            M[i][j] = A[i][j];
        M[i][4] = y[i];
    }
    for (int k = 0; k < 4; k++) {
        int p = k;
        for (int i = k + 1; i < 4; i++)
            if (fabs(M[i][k]) > fabs(M[p][k]))
                p = i;
        if (!(fabs(M[p][k]) > 1e-12 * (fabs(A[0][0]) + 1e-300)))
            return HUGE_VAL;
        if (p != k)
            for (int j = 0; j < 5; j++) {
                double t = M[k][j];
                M[k][j] = M[p][j];
                M[p][j] = t;
            }
        for (int i = k + 1; i < 4; i++) {
            double f = M[i][k] / M[k][k];
            for (int j = k; j < 5; j++)
                M[i][j] -= f * M[k][j];
        }
    }
    double beta[4];
    for (int i = 3; i >= 0; i--) {
        double s = M[i][4];
        for (int j = i + 1; j < 4; j++)
            s -= M[i][j] * beta[j];
        beta[i] = s / M[i][i];
    }
    /* RSS = y'y − β'X'y (β solves the normal equations) */
    double rss = yy;
    for (int i = 0; i < 4; i++)
        rss -= beta[i] * y[i];
    return rss > 0 ? rss : 0;
}

/* The residual sum of squares at edge radius R, blur σ and model m, over the sectors in
 * [k0, k1) (the linear parameters of each sector solved exactly). */
static double edge_rss(const edge_data *d, double R, int k0, int k1)
{
    double A[EDGE_SECTORS][4][4], y[EDGE_SECTORS][4], yy[EDGE_SECTORS];
    memset(A, 0, sizeof A);
    memset(y, 0, sizeof y);
    memset(yy, 0, sizeof yy);
    for (size_t i = 0; i < d->n; i++) {
        int k = d->sec[i];
        if (k < k0 || k >= k1 || !d->use[k])
            continue;
        double dr = d->r[i] - d->r0, e = edge_lookup(d, d->tb[i], R - d->r[i]);
        double f[4] = {1.0, dr, e, dr * e};
        for (int a = 0; a < 4; a++) {
            for (int b = 0; b < 4; b++)
                A[k][a][b] += f[a] * f[b];
            y[k][a] += f[a] * d->v[i];
        }
        yy[k] += d->v[i] * d->v[i];
    }
    double rss = 0;
    for (int k = k0; k < k1; k++)
        if (A[k][0][0] > 0)
            rss += sector_rss(A[k], y[k], yy[k]);
    return rss;
}

/* Golden-section minimum of edge_rss over R in [lo, hi]. */
static double best_R(const edge_data *d, double lo, double hi, int k0, int k1, double *rss)
{
    const double g = 0.5 * (sqrt(5.0) - 1);
    double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
    double f1 = edge_rss(d, x1, k0, k1), f2 = edge_rss(d, x2, k0, k1);
    for (int it = 0; it < 32 && hi - lo > 1e-5; it++) {
        if (f1 <= f2) {
            hi = x2, x2 = x1, f2 = f1;
            x1 = hi - g * (hi - lo);
            f1 = edge_rss(d, x1, k0, k1);
        } else {
            lo = x1, x1 = x2, f1 = f2;
            x2 = lo + g * (hi - lo);
            f2 = edge_rss(d, x2, k0, k1);
        }
    }
    double x = f1 <= f2 ? x1 : x2;
    *rss = f1 <= f2 ? f1 : f2;
    return x;
}

#define EDGE_NSIG 10
static const double SIG_GRID[EDGE_NSIG] = {0, 0.1, 0.2, 0.35, 0.5, 0.7, 0.95, 1.25, 1.7, 2.3};

/* The best R at blur σ for model m (the table remade for σ). */
static double fit_at(edge_data *d, int m, double sigma, double lo, double hi, int k0, int k1, double *rss)
{
    edge_table(d, m, sigma);
    return best_R(d, lo, hi, k0, k1, rss);
}

/* The joint fit over the used sectors for every model: a grid over σ with R by golden section,
 * then σ refined; each model's R, σ and residual; returns the best model. */
static int joint_fit(edge_data *d, int stated, double r0, double rlo, double rhi, double mR[EDGE_NMODELS],
                     double mS[EDGE_NMODELS], double rss_out[EDGE_NMODELS])
{
    double best = HUGE_VAL;
    int bm = stated >= 0 ? stated : 0;
    for (int m = 0; m < EDGE_NMODELS; m++) {
        double mrss = HUGE_VAL;
        mR[m] = r0, mS[m] = 0;
        if (stated >= 0 && m != stated) { /* a stated model: only it is fitted */
            mR[m] = mS[m] = NAN, rss_out[m] = HUGE_VAL;
            continue;
        }
        int gi = 0;
        for (int i = 0; i < EDGE_NSIG; i++) {
            double rss, R = fit_at(d, m, SIG_GRID[i], rlo, rhi, 0, EDGE_SECTORS, &rss);
            if (rss < mrss)
                mrss = rss, mR[m] = R, mS[m] = SIG_GRID[i], gi = i;
        }
        /* refine σ between its grid neighbours (golden section on the profile over R) */
        double slo = gi > 0 ? SIG_GRID[gi - 1] : 0, shi = gi + 1 < EDGE_NSIG ? SIG_GRID[gi + 1] : SIG_GRID[gi];
        const double g = 0.5 * (sqrt(5.0) - 1);
        double s1 = shi - g * (shi - slo), s2 = slo + g * (shi - slo), f1, f2;
        double R1 = fit_at(d, m, s1, rlo, rhi, 0, EDGE_SECTORS, &f1), R2 = fit_at(d, m, s2, rlo, rhi, 0, EDGE_SECTORS, &f2);
        for (int it = 0; it < 12 && shi - slo > 2e-3; it++) {
            if (f1 <= f2) {
                shi = s2, s2 = s1, f2 = f1, R2 = R1;
                s1 = shi - g * (shi - slo);
                R1 = fit_at(d, m, s1, rlo, rhi, 0, EDGE_SECTORS, &f1);
            } else {
                slo = s1, s1 = s2, f1 = f2, R1 = R2;
                s2 = slo + g * (shi - slo);
                R2 = fit_at(d, m, s2, rlo, rhi, 0, EDGE_SECTORS, &f2);
            }
        }
        if (f1 < mrss)
            mrss = f1, mR[m] = R1, mS[m] = s1;
        if (f2 < mrss)
            mrss = f2, mR[m] = R2, mS[m] = s2;
        rss_out[m] = mrss;
        if (mrss < best)
            best = mrss, bm = m;
    }
    return bm;
}

/* The best model among those allowed (the point-sampled one only where its blur is below
 * EDGE_POINT_MAX_BLUR); a stated model whatever its blur. */
static int pick_model(int stated, const double mS[EDGE_NMODELS], const double rss[EDGE_NMODELS])
{
    if (stated >= 0)
        return stated;
    int bm = -1;
    for (int m = 0; m < EDGE_NMODELS; m++)
        if ((m != 0 || mS[0] <= EDGE_POINT_MAX_BLUR) && (bm < 0 || rss[m] < rss[bm]))
            bm = m;
    return bm;
}

static int cmp_dbl(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int ssb_cal_fit_edge(const double *mean, const unsigned char *isflag, size_t dr, size_t dc, double cr, double cc,
                     double r0, int stated, ssb_cal_edge *out)
{
    memset(out, 0, sizeof *out);
    out->radius_px = out->sigma_px = out->blur_px = NAN;
    out->model = -1;
    if (stated >= EDGE_NMODELS)
        stated = -1;
    if (!(r0 > 2.0))
        return -1;
    size_t cap = 0, fr = dr * dc;
    double lo_r = r0 - EDGE_WINDOW, hi_r = r0 + EDGE_WINDOW;
    if (lo_r < 0.5 * r0)
        lo_r = 0.5 * r0; /* a small disk: keep away from the centre */
    for (size_t q = 0; q < fr; q++) {
        double y = (double)(q / dc) - cr, x = (double)(q % dc) - cc, rr = sqrt(y * y + x * x);
        cap += rr >= lo_r && rr <= hi_r && !(isflag && isflag[q]);
    }
    double *rv = malloc(2 * (cap ? cap : 1) * sizeof *rv), *tab = malloc((size_t)EDGE_NTH * EDGE_NX * sizeof *tab);
    int *sec = malloc(2 * (cap ? cap : 1) * sizeof *sec);
    if (!rv || !sec || !tab) {
        free(rv), free(sec), free(tab);
        return -1;
    }
    edge_data d = {rv, rv + cap, sec, sec + cap, 0, r0, tab, {0}};
    int *tb = sec + cap;
    double *rr_ = rv, *vv = rv + cap;
    size_t count[EDGE_SECTORS] = {0};
    for (size_t q = 0; q < fr; q++) {
        double y = (double)(q / dc) - cr, x = (double)(q % dc) - cc, rr = sqrt(y * y + x * x);
        if (!(rr >= lo_r && rr <= hi_r) || (isflag && isflag[q]))
            continue;
        double th = atan2(y, x) + M_PI; /* [0, 2π] */
        int k = (int)(th / (2 * M_PI) * EDGE_SECTORS);
        k = k < 0 ? 0 : k >= EDGE_SECTORS ? EDGE_SECTORS - 1 : k;
        rr_[d.n] = rr;
        vv[d.n] = mean[q];
        sec[d.n] = k;
        /* the orientation folded into [0°, 45°]: the sub-samples' projections repeat */
        double ay = fabs(y), ax = fabs(x), f = atan2(ay < ax ? ay : ax, ay < ax ? ax : ay);
        int b = (int)(f / (M_PI / 4) * EDGE_NTH);
        tb[d.n] = b < 0 ? 0 : b >= EDGE_NTH ? EDGE_NTH - 1 : b;
        count[k]++;
        d.n++;
    }
    int nsec = 0;
    for (int k = 0; k < EDGE_SECTORS; k++)
        nsec += count[k] >= EDGE_MIN_PIX;
    if (nsec < EDGE_SECTORS / 2) { /* a disk mostly off the detector */
        free(rv), free(sec), free(tab);
        return -1;
    }
    for (int k = 0; k < EDGE_SECTORS; k++)
        d.use[k] = count[k] >= EDGE_MIN_PIX;
    double rlo = r0 - 1.5, rhi = r0 + 1.5, mR[EDGE_NMODELS], mS[EDGE_NMODELS];
    joint_fit(&d, stated, r0, rlo, rhi, mR, mS, out->rss);
    int bm = pick_model(stated, mS, out->rss);
    /* Sectors where something else has an edge (a crystal's Bragg disk crossing the window) fit
     * far worse than the rest: they are left out (at most half of them) and the fit repeated. */
    double srss[EDGE_SECTORS], sorted[EDGE_SECTORS];
    int ns = 0;
    edge_table(&d, bm, mS[bm]);
    for (int k = 0; k < EDGE_SECTORS; k++)
        if (d.use[k]) {
            srss[k] = edge_rss(&d, mR[bm], k, k + 1) / (double)count[k];
            sorted[ns++] = srss[k];
        }
    qsort(sorted, (size_t)ns, sizeof *sorted, cmp_dbl);
    double med = ns ? sorted[ns / 2] : 0;
    int dropped = 0;
    for (int k = 0; k < EDGE_SECTORS; k++)
        if (d.use[k] && srss[k] > 4.0 * med && dropped < ns / 2) {
            d.use[k] = 0;
            dropped++;
        }
    if (dropped) {
        joint_fit(&d, stated, r0, rlo, rhi, mR, mS, out->rss);
        bm = pick_model(stated, mS, out->rss);
    }
    double bR = mR[bm], bS = mS[bm];
    /* Models that fit nearly as well (their residual within what noise allows of the best) give
     * other radii: the model's uncertainty, added to the statistical one below (not the
     * point-sampled model where it is left out). */
    size_t nuse = 0;
    for (int k = 0; k < EDGE_SECTORS; k++)
        nuse += d.use[k] ? count[k] : 0;
    double s2 = out->rss[bm] / (double)(nuse > 8 * (size_t)EDGE_SECTORS ? nuse - 4 * EDGE_SECTORS : nuse), model_var = 0;
    for (int m = 0; m < EDGE_NMODELS; m++)
        if (stated < 0 && m != bm && (m != 0 || mS[0] <= EDGE_POINT_MAX_BLUR) &&
            (out->rss[m] - out->rss[bm]) < EDGE_MODEL_CHI2 * s2) {
            double dR = 0.5 * (mR[m] - bR);
            if (dR * dR > model_var)
                model_var = dR * dR;
        }
    out->n_dropped = dropped;
    memcpy(out->radius_m, mR, sizeof out->radius_m);
    /* Per-sector radii at the joint σ and model: the standard error, net of an off-centre disk. */
    double Rk[EDGE_SECTORS], th[EDGE_SECTORS];
    int K = 0;
    edge_table(&d, bm, bS);
    for (int k = 0; k < EDGE_SECTORS; k++) {
        if (!d.use[k])
            continue;
        double rss;
        Rk[K] = best_R(&d, rlo, rhi, k, k + 1, &rss);
        th[K] = (k + 0.5) * 2 * M_PI / EDGE_SECTORS - M_PI;
        K++;
    }
    double sig = NAN;
    if (K >= 6) {
        /* least squares R_k = c0 + a cos θ + b sin θ (3x3 normal equations) */
        double N[3][3] = {{0}}, z[3] = {0};
        for (int k = 0; k < K; k++) {
            double f[3] = {1, cos(th[k]), sin(th[k])};
            for (int a = 0; a < 3; a++) {
                for (int b = 0; b < 3; b++)
                    N[a][b] += f[a] * f[b];
                z[a] += f[a] * Rk[k];
            }
        }
        /* Cramer's rule */
        double det = N[0][0] * (N[1][1] * N[2][2] - N[1][2] * N[2][1]) - N[0][1] * (N[1][0] * N[2][2] - N[1][2] * N[2][0]) +
                     N[0][2] * (N[1][0] * N[2][1] - N[1][1] * N[2][0]);
        if (fabs(det) > 1e-12) {
            double c[3];
            for (int col = 0; col < 3; col++) {
                double T[3][3];
                memcpy(T, N, sizeof T);
                for (int a = 0; a < 3; a++)
                    T[a][col] = z[a];
                c[col] = (T[0][0] * (T[1][1] * T[2][2] - T[1][2] * T[2][1]) - T[0][1] * (T[1][0] * T[2][2] - T[1][2] * T[2][0]) +
                          T[0][2] * (T[1][0] * T[2][1] - T[1][1] * T[2][0])) / det;
            }
            double ss = 0;
            for (int k = 0; k < K; k++) {
                double e = Rk[k] - c[0] - c[1] * cos(th[k]) - c[2] * sin(th[k]);
                ss += e * e;
            }
            sig = sqrt(ss / ((double)(K - 3) * K) + model_var + EDGE_SYS_REL * EDGE_SYS_REL * bR * bR);
        }
    }
    free(rv), free(sec), free(tab);
    out->radius_px = bR;
    out->blur_px = bS;
    out->model = bm;
    out->sigma_px = sig;
    out->n_pixels = d.n;
    out->n_sectors = K;
    return 0;
}
