/* calibrate.c — the calibration stage (SPEC §4): mean diffraction pattern from exact integer
 * totals, hot/dead pixels, BF disk (centre, radius), detector sampling from the disk edge, BF
 * selection and the scan-detector rotation from the centre-of-mass curl.
 *
 * Data flow (bounded memory, whatever the scan size):
 *   pass 1: frames in blocks of ~64 MiB (uint32): per-pixel uint64 totals (per-thread partial
 *           totals, summed in thread order — integers, so exact) and, per frame, the integer
 *           moments S0 = Σ I, Sr = Σ row·I, Sc = Σ col·I (each frame done by one thread in
 *           pixel order: exact and independent of the thread count);
 *   pass 2: only when pixels were flagged and the rotation is fitted: the flagged pixels'
 *           contributions are subtracted from the per-frame moments (again exact integers).
 * Everything after that works on the totals (det_rows*det_cols) and on the per-frame moments
 * (3 uint64 per scan position), serially or per element, so results are bit-identical for any
 * thread count.
 *
 * Float data (SPEC §4: EMPAD, gain-normalised counts) take the same steps in float64: frames as
 * float32, each pixel's total summed over the frames in scan order by the one thread that owns
 * the pixel, each frame's moments by one thread in pixel order; so the bits depend on neither
 * the thread count nor the block size. Every partial sum of integer-valued floats is an exact
 * integer in float64 (below 2^53), so such data give the integer path's results bit for bit.
 */
#include "calibrate/calibrate_internal.h"
#include "common/err.h"
#include "common/parallel.h"
#include "detector/hotpix.h"
#include "source/source.h"
#include "ssb4d_advanced.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAL_BLOCK_BYTES ((size_t)64 << 20)
#define CAL_MIN_DISK_RADIUS_PX 2.0 /* equal-area radius below this: no usable disk */
#define CAL_FLIP_MARGIN 0.5        /* a handedness wins when its curl ratio is below this x the other's */
#ifndef SSB4D_CURL_STENCIL_HALF
#define SSB4D_CURL_STENCIL_HALF 1
#endif

void ssb4d_calib_params_default(ssb4d_calib_params *p)
{
    memset(p, 0, sizeof *p);
    p->kv = NAN;
    p->semiangle_mrad = NAN;
    p->scan_step_A[0] = p->scan_step_A[1] = NAN;
    p->det_sampling_mrad[0] = p->det_sampling_mrad[1] = 0.0;
    p->rotation_deg = NAN;
    p->flip = -1;
    p->bf_radius_px = 0.0;
    p->centre_px[0] = p->centre_px[1] = NAN;
    p->hot_pixels = 1;
    p->threads = 0;
}

void ssb4d_calibration_free(ssb4d_calibration *c)
{
    if (!c)
        return;
    free(c->mean_pattern);
    free(c->bf_pix);
    free(c->flagged);
    memset(c, 0, sizeof *c);
}

int ssb4d_calibration_sampling_report(const ssb4d_calibration *c, char *text, size_t n, char *warning, size_t wn)
{
    char sig[48] = "", buf[320];
    double ms = c->det_sampling_measured_mrad, se = c->det_sampling_measured_sigma_mrad;
    int warn = 0;
    if (isfinite(se))
        snprintf(sig, sizeof sig, " +- %.5f", se);
    if (c->det_sampling_fitted) {
        snprintf(buf, sizeof buf, "%.5f mrad/px%s (measured: semi-angle %g mrad / the edge radius %.3f px)",
                 c->geom.det_sampling_mrad[0], sig, c->geom.semiangle_mrad, c->edge_radius_px);
    } else {
        double st = 0.5 * (c->geom.det_sampling_mrad[0] + c->geom.det_sampling_mrad[1]), d = ms - st;
        int k = snprintf(buf, sizeof buf, "%.5f, %.5f mrad/px (stated); measured %.5f%s (%+.2f %%",
                         c->geom.det_sampling_mrad[0], c->geom.det_sampling_mrad[1], ms, sig, 100 * d / st);
        if (se > 0 && k > 0 && (size_t)k < sizeof buf)
            k += snprintf(buf + k, sizeof buf - (size_t)k, ", %.1f sigma", fabs(d) / se);
        if (k > 0 && (size_t)k < sizeof buf)
            snprintf(buf + k, sizeof buf - (size_t)k, ")");
        warn = se > 0 && fabs(d) > SSB4D_SAMPLING_WARN_SIGMA * se;
    }
    if (text && n)
        snprintf(text, n, "%s", buf);
    if (warning && wn)
        snprintf(warning, wn, warn ? "the measured sampling differs from the stated one by more than %.0f sigma: check\n"
                                     "the semi-angle and the stated sampling (--det-sampling measure uses the measured one)"
                                   : "",
                 SSB4D_SAMPLING_WARN_SIGMA);
    return warn;
}

/* ---- rotation from the CoM curl -------------------------------------------------------------- */

/* Derivative stencils: central differences of order 2, 4 and 6 (coefficients of f(+j) − f(−j)).
 * Order 2 makes a gradient field sampled near the scan Nyquist look curly (sin x ≠ x along the two
 * axes); the higher orders keep that bias small. */
static const double STENCIL[3][3] = {{0.5, 0, 0}, {2.0 / 3, -1.0 / 12, 0}, {0.75, -0.15, 1.0 / 60}};

typedef struct {
    int half;            /* stencil half-width */
    const double *w;
    double sr, sc;       /* scan steps */
} deriv_ctx;

static deriv_ctx make_deriv(size_t ny, size_t nx, const double step_A[2])
{
    deriv_ctx d;
    d.sr = d.sc = 1.0;
    if (step_A && isfinite(step_A[0]) && step_A[0] > 0 && isfinite(step_A[1]) && step_A[1] > 0) {
        d.sr = step_A[0];
        d.sc = step_A[1];
    }
    size_t m = ny < nx ? ny : nx;
    d.half = SSB4D_CURL_STENCIL_HALF;
    while (d.half > 1 && m < (size_t)(4 * d.half + 1))
        d.half--;
    d.w = STENCIL[d.half - 1];
    return d;
}

/* ∂/∂row and ∂/∂col of component comp at interior point (i, j). */
static inline double d_row(const deriv_ctx *d, const double *com, size_t nx, size_t i, size_t j, int comp)
{
    double s = 0;
    for (int k = 1; k <= d->half; k++)
        s += d->w[k - 1] * (com[((i + k) * nx + j) * 2 + comp] - com[((i - k) * nx + j) * 2 + comp]);
    return s / d->sr;
}

static inline double d_col(const deriv_ctx *d, const double *com, size_t nx, size_t i, size_t j, int comp)
{
    double s = 0;
    for (int k = 1; k <= d->half; k++)
        s += d->w[k - 1] * (com[(i * nx + j + k) * 2 + comp] - com[(i * nx + j - k) * 2 + comp]);
    return s / d->sc;
}

/* Sums a = Σ curl², b = Σ curl·div, c = Σ div² of the unrotated field over interior points. */
#define JK_BLOCKS 4 /* jackknife: JK_BLOCKS x JK_BLOCKS blocks of scan positions */

/* Also fills blk[3 * (bi * JK_BLOCKS + bj) + {0,1,2}] with the same sums per block of the scan
 * (blocks along rows/cols, for the jackknife uncertainty). */
static void curl_div_sums(const double *com, size_t ny, size_t nx, const double step_A[2],
                          double *a, double *b, double *c, double *blk)
{
    deriv_ctx d = make_deriv(ny, nx, step_A);
    size_t h = (size_t)d.half;
    double sa = 0, sb = 0, scc = 0;
    if (blk)
        memset(blk, 0, 3 * JK_BLOCKS * JK_BLOCKS * sizeof *blk);
    for (size_t i = h; i + h < ny; i++)
        for (size_t j = h; j + h < nx; j++) {
            double drr = d_row(&d, com, nx, i, j, 0), dcr = d_row(&d, com, nx, i, j, 1);
            double drc = d_col(&d, com, nx, i, j, 0), dcc = d_col(&d, com, nx, i, j, 1);
            double curl = dcr - drc, div = drr + dcc;
            sa += curl * curl;
            sb += curl * div;
            scc += div * div;
            if (blk) {
                size_t bi = i * JK_BLOCKS / ny, bj = j * JK_BLOCKS / nx;
                double *o = blk + 3 * (bi * JK_BLOCKS + bj);
                o[0] += curl * curl;
                o[1] += curl * div;
                o[2] += div * div;
            }
        }
    *a = sa;
    *b = sb;
    *c = scc;
}

double ssb_cal_curl_sumsq(const double *com, size_t ny, size_t nx, const double step_A[2],
                          double theta_deg)
{
    /* Direct evaluation (rotate every vector, then differentiate), independent of the closed
     * form: the derivatives are linear, so rotating first or after gives the same S(θ). */
    deriv_ctx d = make_deriv(ny, nx, step_A);
    size_t h = (size_t)d.half, n = ny * nx;
    double t = theta_deg * M_PI / 180.0, ct = cos(t), st = sin(t), s = 0;
    double *k = malloc(n * 2 * sizeof *k);
    if (!k)
        return NAN;
    for (size_t i = 0; i < n; i++) {
        k[2 * i] = ct * com[2 * i] - st * com[2 * i + 1];
        k[2 * i + 1] = st * com[2 * i] + ct * com[2 * i + 1];
    }
    for (size_t i = h; i + h < ny; i++)
        for (size_t j = h; j + h < nx; j++) {
            double curl = d_row(&d, k, nx, i, j, 1) - d_col(&d, k, nx, i, j, 0);
            s += curl * curl;
        }
    free(k);
    return s;
}

static double wrap_half_turn(double deg)
{
    deg = fmod(deg, 180.0);
    if (deg >= 90.0)
        deg -= 180.0;
    if (deg < -90.0)
        deg += 180.0;
    if (deg >= 90.0) /* fmod rounding at the edge */
        deg = -90.0;
    return deg;
}

ssb4d_status ssb_cal_rotation_from_com(const double *com, size_t ny, size_t nx,
                                       const double step_A[2], double *theta_deg,
                                       double *curl_ratio, double *sigma_deg, ssb4d_err *err)
{
    *theta_deg = NAN;
    *curl_ratio = NAN;
    if (sigma_deg)
        *sigma_deg = NAN;
    if (ny < 3 || nx < 3)
        return ssb_fail(err, SSB4D_ENOTFOUND,
                        "the scan (%zux%zu) is too small to fit the rotation from the "
                        "centre-of-mass curl (need 3x3); give the rotation", ny, nx);
    double a, b, c, blk[3 * JK_BLOCKS * JK_BLOCKS];
    curl_div_sums(com, ny, nx, step_A, &a, &b, &c, blk);
    /* S(θ) = (a+c)/2 + A cos 2θ + b sin 2θ, A = (a−c)/2; extremes (a+c)/2 ∓ ρ. */
    double A = 0.5 * (a - c), rho = hypot(A, b), mid = 0.5 * (a + c);
    double smax = mid + rho, smin = mid - rho;
    if (!(smax > 0) || !isfinite(smax))
        return ssb_fail(err, SSB4D_ENOTFOUND,
                        "the centre-of-mass field does not vary over the scan; the rotation "
                        "cannot be fitted (give the rotation)");
    if (smin < 0)
        smin = 0;
    double th = 0.5 * (atan2(b, A) + M_PI) * 180.0 / M_PI;
    /* Cross-check on a 1° grid: the closed form must not lose to any grid point (beyond
     * rounding); if it somehow does, take the best grid point refined by golden section. */
    double best_g = HUGE_VAL, best_t = 0;
    for (int k = -90; k < 90; k++) {
        double s = mid + A * cos(2 * k * M_PI / 180) + b * sin(2 * k * M_PI / 180);
        if (s < best_g) {
            best_g = s;
            best_t = k;
        }
    }
    double s_cf = mid + A * cos(2 * th * M_PI / 180) + b * sin(2 * th * M_PI / 180);
    if (s_cf > best_g + 1e-9 * smax) {
        double lo = best_t - 1, hi = best_t + 1, g = 0.5 * (sqrt(5.0) - 1);
        for (int it = 0; it < 60; it++) {
            double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
            double f1 = mid + A * cos(2 * x1 * M_PI / 180) + b * sin(2 * x1 * M_PI / 180);
            double f2 = mid + A * cos(2 * x2 * M_PI / 180) + b * sin(2 * x2 * M_PI / 180);
            if (f1 < f2)
                hi = x2;
            else
                lo = x1;
        }
        th = 0.5 * (lo + hi);
    }
    *theta_deg = wrap_half_turn(th);
    *curl_ratio = smin / smax;
    if (sigma_deg) {
        /* Delete-one-block jackknife of the closed-form angle (on the doubled angle, so that
         * the 180° wrap does not matter): sigma² = (n−1)/n Σ (θ_−i − θ)². */
        const int nb = JK_BLOCKS * JK_BLOCKS;
        double acc = 0, phi0 = 2 * th * M_PI / 180;
        for (int k = 0; k < nb; k++) {
            double ak = a - blk[3 * k], bk = b - blk[3 * k + 1], ck = c - blk[3 * k + 2];
            double phik = atan2(bk, 0.5 * (ak - ck)) + M_PI;
            double dphi = remainder(phik - phi0, 2 * M_PI);
            acc += dphi * dphi;
        }
        *sigma_deg = 0.5 * sqrt((double)(nb - 1) / nb * acc) * 180 / M_PI;
    }
    return SSB4D_OK;
}

/* ---- BF disk ---------------------------------------------------------------------------------- */

typedef struct {
    double thr, cr, cc, radius;
    size_t n;
    char why[200];
} disk_try;

/* The pixels above thr as a disk: centroid, equal-area radius, and whether it is one compact,
 * filled disk on the detector. Returns 0 if it is, else 1 with the reason in t->why. */
static int try_disk(const double *mean, size_t dr, size_t dc, double thr, disk_try *t)
{
    const size_t fr = dr * dc;
    memset(t, 0, sizeof *t);
    t->thr = thr;
    double cr = 0, cc = 0;
    size_t n = 0;
    for (size_t q = 0; q < fr; q++)
        if (mean[q] > thr) {
            n++;
            cr += (double)(q / dc);
            cc += (double)(q % dc);
        }
    t->n = n;
    t->radius = sqrt((double)n / M_PI);
    if (n == 0 || t->radius < CAL_MIN_DISK_RADIUS_PX) {
        snprintf(t->why, sizeof t->why,
                 "%zu pixels of the mean pattern are above %s%.4g (a disk needs a radius of at "
                 "least %.0f px)", n, n ? "" : "the threshold ", thr, CAL_MIN_DISK_RADIUS_PX);
        return 1;
    }
    cr /= (double)n;
    cc /= (double)n;
    t->cr = cr;
    t->cc = cc;
    if (cr < 0 || cc < 0 || cr > (double)(dr - 1) || cc > (double)(dc - 1)) {
        snprintf(t->why, sizeof t->why, "the bright pixels' centroid (%.2f, %.2f) is off the detector",
                 cr, cc);
        return 1;
    }
    /* Compact: nearly all bright pixels within radius + 2 of the centroid; filled: nearly all
     * pixels within 0.8 radius of it bright. Scattered noise, rings and clipped disks fail. */
    size_t near = 0, inner = 0, inner_bright = 0;
    double rn = t->radius + 2.0, ri = 0.8 * t->radius;
    for (size_t q = 0; q < fr; q++) {
        double yr = (double)(q / dc) - cr, xc = (double)(q % dc) - cc, d2 = yr * yr + xc * xc;
        int bright = mean[q] > thr;
        if (bright && d2 <= rn * rn)
            near++;
        if (d2 <= ri * ri) {
            inner++;
            inner_bright += bright;
        }
    }
    double f_near = (double)near / (double)n;
    double f_fill = inner ? (double)inner_bright / (double)inner : 0.0;
    if (f_near < 0.9 || f_fill < 0.9) {
        snprintf(t->why, sizeof t->why,
                 "the %zu pixels above %.4g are not one compact disk (%.0f%% within the "
                 "equal-area radius %.1f px + 2 of their centroid, %.0f%% of the inner disk above)",
                 n, thr, 100 * f_near, t->radius, 100 * f_fill);
        return 1;
    }
    return 0;
}

/* Ridler–Calvard / isodata: t = midpoint of the means above and at-or-below t, iterated from t0.
 * NaN when one class is empty (flat data). */
static double isodata_threshold(const double *v, size_t n, double t0)
{
    double t = t0;
    for (int it = 0; it < 200; it++) {
        double sa = 0, sb = 0;
        size_t na = 0, nb = 0;
        for (size_t i = 0; i < n; i++)
            if (v[i] > t) {
                sa += v[i];
                na++;
            } else {
                sb += v[i];
                nb++;
            }
        if (!na || !nb)
            return NAN;
        double tn = 0.5 * (sa / (double)na + sb / (double)nb);
        if (tn == t)
            break;
        t = tn;
    }
    return t;
}

/* ---- the stage ------------------------------------------------------------------------------- */

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* ---- workspace: the tracked buffers' sizes, and their order ------------------------------- */

calibrate_ws calibrate_ws_sizes(size_t fr, size_t npos, size_t block_bytes, int fit_rotation)
{
    calibrate_ws w;
    w.frames = (block_bytes ? block_bytes : CAL_BLOCK_BYTES) / (fr * sizeof(uint32_t));
    w.frames = w.frames < 1 ? 1 : w.frames > npos ? npos : w.frames;
    w.buf = w.frames * fr * sizeof(uint32_t);
    w.mom = fit_rotation ? npos * 3 * sizeof(uint64_t) : 0; /* Σ counts, Σ row·counts, Σ col·counts */
    w.com = fit_rotation ? npos * 2 * sizeof(double) : 0;   /* the CoM field, mrad */
    return w;
}

void calibrate_workspace(const calibrate_ws *w, ws_sink *out)
{
    ws_alloc(out, w->buf);
    if (w->mom) {
        ws_alloc(out, w->mom);
        ws_alloc(out, w->com);
    }
    ws_free(out, w->buf, 0);
    if (w->mom) {
        ws_free(out, w->mom, 0);
        ws_free(out, w->com, 0);
    }
}

/* ---- ssb4d_calibrate, step by step ------------------------------------------------------------ */

/* One calibration's working state: the shape, the options the steps share, and the buffers the
 * passes fill (buf, mom and com tracked by p->mem, at calibrate_ws_sizes' sizes). */
typedef struct {
    const ssb4d_calib_params *p;
    ssb4d_source *src;
    const ssb_cal_sums *sums; /* pass 1 and 2's sums from elsewhere (NULL: the frames) */
    size_t ny, nx, dr, dc, fr, npos;
    int fit_rotation, sampling_given, centre_given;
    int nt;
    calibrate_ws w;     /* the tracked buffers' sizes */
    size_t block;       /* frames per read */
    int is_float;       /* float32 data: fbuf, momd (else buf, mom) */
    uint32_t *buf;      /* one block of frames */
    float *fbuf;        /* the same block of float frames (the same bytes) */
    uint64_t *tot_t;    /* per-thread totals per detector pixel (counts) */
    uint64_t *mom;      /* per frame: Σ counts, Σ row·counts, Σ col·counts (rotation fitted) */
    double *momd;       /* the same moments of float data (the same bytes) */
    uint64_t *tot;      /* totals per detector pixel (counts) */
    double *totd;       /* totals per detector pixel, float64 (exact for counts) */
    int32_t *flagged;   /* flagged pixels (hot or dead), nflag of them */
    size_t nflag;
    double *mean;       /* the mean pattern, flagged pixels replaced */
    unsigned char *isflag;
    double *vals;       /* scratch for medians */
    double *com;        /* the CoM field, mrad (rotation fitted) */
} cal_run;

/* The parameters, refused before any data is read so that a typo costs nothing. */
static ssb4d_status check_params(const ssb4d_calib_params *p, ssb4d_err *err)
{
    if (!(p->semiangle_mrad > 0) || !isfinite(p->semiangle_mrad) || p->semiangle_mrad >= 500)
        return ssb_fail(err, SSB4D_EINVAL,
                        "the convergence semi-angle must be > 0 and < 500 mrad (got %g)",
                        p->semiangle_mrad);
    if (!isnan(p->kv) && !(p->kv > 0 && p->kv <= 5000))
        return ssb_fail(err, SSB4D_EINVAL, "the accelerating voltage %g kV is absurd", p->kv);
    for (int i = 0; i < 2; i++)
        if (!isnan(p->scan_step_A[i]) && !(p->scan_step_A[i] > 0 && p->scan_step_A[i] < 1e5))
            return ssb_fail(err, SSB4D_EINVAL, "the scan step must be > 0 Angstrom (got %g)",
                            p->scan_step_A[i]);
    int sampling_given = p->det_sampling_mrad[0] > 0 || p->det_sampling_mrad[1] > 0;
    if (sampling_given && !(p->det_sampling_mrad[0] > 0 && p->det_sampling_mrad[1] > 0 &&
                            p->det_sampling_mrad[0] < 1e3 && p->det_sampling_mrad[1] < 1e3))
        return ssb_fail(err, SSB4D_EINVAL,
                        "the detector sampling needs two values > 0 and < 1000 mrad/px (got %g, %g)",
                        p->det_sampling_mrad[0], p->det_sampling_mrad[1]);
    if (p->edge_pixel_S < 0 || p->edge_pixel_S > SSB4D_SIM_OVERSAMPLE_MAX)
        return ssb_fail(err, SSB4D_EINVAL, "the detector's pixel model S (S x S samples per pixel) must be 1 to %d, "
                        "or 0 for not stated (got %d)", SSB4D_SIM_OVERSAMPLE_MAX, p->edge_pixel_S);
    if (!isnan(p->rotation_deg) && !(fabs(p->rotation_deg) <= 1e4))
        return ssb_fail(err, SSB4D_EINVAL, "the rotation %g deg is absurd", p->rotation_deg);
    if (!(p->bf_radius_px <= 0) && !(p->bf_radius_px < 1e4)) /* NaN also refused */
        return ssb_fail(err, SSB4D_EINVAL, "the BF selection radius %g px is absurd",
                        p->bf_radius_px);
    return SSB4D_OK;
}

/* The shape and options; a given centre must lie on or near the detector (a centre far off it
 * selects no BF pixel, after a whole pass over the data). */
static ssb4d_status cal_setup(cal_run *c, ssb4d_source *src, const ssb4d_calib_params *p, ssb4d_err *err)
{
    memset(c, 0, sizeof *c);
    c->p = p;
    c->src = src;
    c->sampling_given = p->det_sampling_mrad[0] > 0 || p->det_sampling_mrad[1] > 0;
    c->centre_given = !isnan(p->centre_px[0]) || !isnan(p->centre_px[1]);
    size_t shape[4];
    ssb4d_source_shape(src, shape);
    c->ny = shape[0], c->nx = shape[1], c->dr = shape[2], c->dc = shape[3];
    c->fr = c->dr * c->dc, c->npos = c->ny * c->nx;
    if (c->centre_given) {
        for (int i = 0; i < 2; i++) {
            double lim = (double)shape[2 + i];
            if (!isfinite(p->centre_px[i]) || p->centre_px[i] < -lim || p->centre_px[i] > 2 * lim)
                return ssb_fail(err, SSB4D_EINVAL,
                                "the BF centre (%g, %g) px is not on or near the %zux%zu detector",
                                p->centre_px[0], p->centre_px[1], c->dr, c->dc);
        }
    }
    c->fit_rotation = isnan(p->rotation_deg);
    c->nt = ssb_threads_resolve(p->threads);
    c->is_float = ssb4d_source_is_float(src);
    return SSB4D_OK;
}

/* The buffers, in calibrate_workspace's order (the planner's view of this stage): the frame
 * block and the moments now, the CoM field when the rotation is measured. */
static ssb4d_status cal_alloc(cal_run *c, ssb4d_err *err)
{
    const calibrate_ws w = c->w = calibrate_ws_sizes(c->fr, c->npos, c->p->block_bytes, c->fit_rotation);
    size_t fr = c->fr;
    c->block = w.frames;
    if ((size_t)c->nt > c->block)
        c->nt = (int)c->block;
    const int frames = !c->sums; /* sums from elsewhere: no frame is read here */
    c->buf = frames ? ssb4d_mem_alloc(c->p->mem, w.buf, "calibrate frame block", NULL) : NULL;
    c->fbuf = (float *)(void *)c->buf; /* 4 bytes a value either way */
    c->tot_t = c->is_float || !frames ? NULL : calloc((size_t)c->nt * fr, sizeof *c->tot_t);
    c->mom = c->fit_rotation ? ssb4d_mem_alloc(c->p->mem, w.mom, "calibrate moments", NULL) : NULL;
    c->momd = (double *)(void *)c->mom; /* 8 bytes a moment either way */
    c->tot = c->is_float ? NULL : calloc(fr, sizeof *c->tot);
    c->totd = calloc(fr, sizeof *c->totd);
    c->flagged = malloc(fr * sizeof *c->flagged);
    c->mean = malloc(fr * sizeof *c->mean);
    c->isflag = calloc(fr, 1);
    c->vals = malloc(fr * sizeof *c->vals);
    if ((frames && !c->buf) || (!c->is_float && ((frames && !c->tot_t) || !c->tot)) || (c->fit_rotation && !c->mom) || !c->totd ||
        !c->flagged || !c->mean || !c->isflag || !c->vals)
        return ssb_fail(err, SSB4D_ENOMEM, "calibrate: out of memory (detector %zux%zu)", c->dr, c->dc);
    return SSB4D_OK;
}

static void cal_free(cal_run *c)
{
    ssb4d_mem_free(c->p->mem, c->buf, 0);
    free(c->tot_t);
    ssb4d_mem_free(c->p->mem, c->mom, 0);
    free(c->tot);
    free(c->totd);
    free(c->flagged);
    free(c->mean);
    free(c->isflag);
    free(c->vals);
    ssb4d_mem_free(c->p->mem, c->com, 0);
}

/* Pass 1 over the frames: the totals per detector pixel (per thread, summed after in thread
 * order: integers, so exact) and each frame's moments for the CoM. */
static ssb4d_status pass_totals_counts(cal_run *c, ssb4d_err *err)
{
    const size_t fr = c->fr, npos = c->npos, dr = c->dr, dc = c->dc, block = c->block;
    uint64_t *mom = c->mom;
    for (size_t p0 = 0; p0 < npos; p0 += block) {
        size_t n = npos - p0 < block ? npos - p0 : block;
        if (ssb4d_mem_progress(c->p->mem, 0.9 * (double)p0 / (double)npos))
            return ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
        ssb4d_status st = ssb4d_source_read_frames(c->src, p0, n, c->buf, err);
        if (st)
            return st;
        ssb_source_done_with(c->src, p0, n);
#pragma omp parallel num_threads(c->nt)
        {
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            uint64_t *t = c->tot_t + (size_t)tid * fr;
#pragma omp for schedule(static)
            for (size_t f = 0; f < n; f++) {
                const uint32_t *fp = c->buf + f * fr;
                uint64_t s0 = 0, sr = 0, sc = 0;
                for (size_t r = 0; r < dr; r++) {
                    const uint32_t *row = fp + r * dc;
                    uint64_t rs = 0, cs = 0;
                    for (size_t col = 0; col < dc; col++) {
                        uint64_t v = row[col];
                        t[r * dc + col] += v;
                        rs += v;
                        cs += v * col;
                    }
                    s0 += rs;
                    sr += rs * r;
                    sc += cs;
                }
                if (mom) {
                    mom[(p0 + f) * 3 + 0] = s0;
                    mom[(p0 + f) * 3 + 1] = sr;
                    mom[(p0 + f) * 3 + 2] = sc;
                }
            }
        }
    }
    for (int t = 0; t < c->nt; t++)
        for (size_t q = 0; q < fr; q++)
            c->tot[q] += c->tot_t[(size_t)t * fr + q];
    for (size_t q = 0; q < fr; q++)
        c->totd[q] = (double)c->tot[q];
    return SSB4D_OK;
}

/* Pass 1 on float data: each pixel's total over the frames in scan order (pixels split among
 * the threads, in chunks of whole cache lines), then each frame's moments by one thread. */
static ssb4d_status pass_totals_float(cal_run *c, ssb4d_err *err)
{
    const size_t fr = c->fr, npos = c->npos, dr = c->dr, dc = c->dc, block = c->block;
    double *mom = c->fit_rotation ? c->momd : NULL;
    for (size_t p0 = 0; p0 < npos; p0 += block) {
        size_t n = npos - p0 < block ? npos - p0 : block;
        if (ssb4d_mem_progress(c->p->mem, 0.9 * (double)p0 / (double)npos))
            return ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
        ssb4d_status st = ssb4d_source_read_frames_f32(c->src, p0, n, c->fbuf, err);
        if (st)
            return st;
        ssb_source_done_with(c->src, p0, n);
        const float *fb = c->fbuf;
        double *tot = c->totd;
#pragma omp parallel for num_threads(c->nt) schedule(static)
        for (size_t q0 = 0; q0 < fr; q0 += 64) {
            size_t q1 = q0 + 64 < fr ? q0 + 64 : fr;
            for (size_t f = 0; f < n; f++)
                for (size_t q = q0; q < q1; q++)
                    tot[q] += (double)fb[f * fr + q];
        }
        if (!mom)
            continue;
#pragma omp parallel for num_threads(c->nt) schedule(static)
        for (size_t f = 0; f < n; f++) {
            const float *fp = fb + f * fr;
            double s0 = 0, sr = 0, sc = 0;
            for (size_t r = 0; r < dr; r++) {
                double rs = 0, cs = 0;
                for (size_t col = 0; col < dc; col++) {
                    double v = fp[r * dc + col];
                    rs += v;
                    cs += v * (double)col;
                }
                s0 += rs;
                sr += rs * (double)r;
                sc += cs;
            }
            mom[(p0 + f) * 3 + 0] = s0;
            mom[(p0 + f) * 3 + 1] = sr;
            mom[(p0 + f) * 3 + 2] = sc;
        }
    }
    return SSB4D_OK;
}

/* Pass 1, counts or float data; reports the total. */
static ssb4d_status pass_totals(cal_run *c, ssb4d_calibration *out, ssb4d_err *err)
{
    ssb4d_status st;
    if (c->sums) { /* the integer sums from elsewhere (the GPU), into zeroed totals and moments */
        memset(c->tot, 0, c->fr * sizeof *c->tot);
        if (c->fit_rotation)
            memset(c->mom, 0, c->npos * 3 * sizeof(uint64_t));
        st = c->sums->totals(c->sums->user, c->tot, c->fit_rotation ? c->mom : NULL, err);
        for (size_t q = 0; !st && q < c->fr; q++)
            c->totd[q] = (double)c->tot[q];
    } else
        st = c->is_float ? pass_totals_float(c, err) : pass_totals_counts(c, err);
    if (st)
        return st;
    double total = 0;
    for (size_t q = 0; q < c->fr; q++)
        total += c->totd[q];
    out->total_counts = total;
    if (!(total > 0))
        return ssb_fail(err, SSB4D_ENOTFOUND, "BF disk not found: the data has %s",
                        total == 0 ? "no counts at all" : "no positive total intensity");
    return SSB4D_OK;
}

/* Flagged pixels (hot or dead, from the totals), and the mean pattern with them replaced by
 * their neighbours' median, so that one hot pixel cannot move the disk's threshold. */
static void mean_pattern(cal_run *c)
{
    const size_t fr = c->fr, npos = c->npos;
    c->nflag = c->p->hot_pixels ? ssb_hotpix_find_flagged(c->totd, c->dr, c->dc, c->flagged) : 0;
    for (size_t i = 0; i < c->nflag; i++)
        c->isflag[c->flagged[i]] = 1;
    for (size_t q = 0; q < fr; q++)
        c->mean[q] = c->totd[q] / (double)npos;
    for (size_t i = 0; i < c->nflag; i++) {
        size_t q = (size_t)c->flagged[i];
        c->mean[q] = ssb_hotpix_neighbour_median(c->totd, c->isflag, c->dr, c->dc, q / c->dc, q % c->dc) / (double)npos;
    }
}

/* The BF disk: pixels above mean + std (SPEC §4); when that set is not one filled disk (it cannot
 * be once the disk covers more than half the detector: then mean + std exceeds the disk level),
 * the two-class (isodata) threshold midway between the bright and dark pixels' means instead.
 * Then the edge radius: pixels above half the disk's median intensity. A strong scatterer's
 * disk is not flat (a bright core, a dimmer rim): mean + std can then pick out the core alone, a
 * compact disk well inside the edge (Au, 25 mrad, dose 1e6: 14.4 px of 25.7). When the
 * half-median set is itself one disk clearly larger than the thresholded one, it is the BF disk. */
static ssb4d_status find_disk(cal_run *c, ssb4d_calibration *out, ssb4d_err *err)
{
    const size_t fr = c->fr, dr = c->dr, dc = c->dc;
    const double *mean = c->mean;
    double *vals = c->vals;
    double m1 = 0, m2 = 0;
    for (size_t q = 0; q < fr; q++)
        m1 += mean[q];
    m1 /= (double)fr;
    for (size_t q = 0; q < fr; q++)
        m2 += (mean[q] - m1) * (mean[q] - m1);
    double thr = m1 + sqrt(m2 / (double)fr);
    disk_try d1, d2;
    const disk_try *d = &d1;
    if (try_disk(mean, dr, dc, thr, &d1)) {
        double t2 = isodata_threshold(mean, fr, m1);
        if (!isfinite(t2) || try_disk(mean, dr, dc, t2, &d2))
            return ssb_fail(err, SSB4D_ENOTFOUND, "BF disk not found: %s%s%s", d1.why,
                            isfinite(t2) ? "; with the two-class threshold: " : "",
                            isfinite(t2) ? d2.why : "");
        d = &d2;
        out->disk_threshold_two_class = 1;
    }
    disk_try d3;
    double med = 0;
    size_t nedge = 0;
    for (int pass = 0; pass < 3; pass++) {
        size_t nmask = 0;
        for (size_t q = 0; q < fr; q++)
            if (mean[q] > d->thr)
                vals[nmask++] = mean[q];
        qsort(vals, nmask, sizeof *vals, cmp_double);
        med = (nmask & 1) ? vals[nmask / 2] : 0.5 * (vals[nmask / 2 - 1] + vals[nmask / 2]);
        nedge = 0;
        for (size_t q = 0; q < fr; q++)
            nedge += mean[q] > 0.5 * med;
        if (pass == 2 || !(sqrt((double)nedge / M_PI) > 1.1 * d->radius) ||
            try_disk(mean, dr, dc, 0.5 * med, &d3))
            break;
        d2 = d3;
        d = &d2;
        out->disk_threshold_half_median = 1;
    }
    out->disk_threshold = d->thr;
    out->disk_centre_px[0] = d->cr;
    out->disk_centre_px[1] = d->cc;
    out->disk_radius_px = d->radius;
    out->edge_radius_threshold_px = sqrt((double)nedge / M_PI);
    /* The edge radius from a model of the edge's profile (edge.c), the threshold's radius its
     * start; kept only when the fit found an edge near it. */
    ssb_cal_edge e;
    out->edge_radius_px = out->edge_radius_threshold_px;
    out->edge_radius_sigma_px = out->edge_blur_px = NAN;
    out->edge_model = -1;
    int stated = ssb_cal_edge_model_of_S(c->p->edge_pixel_S); /* -1: the residual chooses */
    if (!ssb_cal_fit_edge(mean, c->isflag, dr, dc, d->cr, d->cc, out->edge_radius_threshold_px, stated, &e) &&
        isfinite(e.radius_px) && fabs(e.radius_px - out->edge_radius_threshold_px) < 1.4) {
        out->edge_radius_px = e.radius_px;
        out->edge_radius_sigma_px = e.sigma_px;
        out->edge_blur_px = e.blur_px;
        out->edge_model = e.model;
        out->edge_model_stated = stated >= 0;
    }
    return SSB4D_OK;
}

/* The geometry: what was given, else what the disk says (the sampling from the semi-angle over
 * the edge radius, the centre at the disk's centroid). */
static void set_geometry(const cal_run *c, ssb4d_calibration *out)
{
    const ssb4d_calib_params *p = c->p;
    ssb4d_geometry *g = &out->geom;
    g->kv = p->kv;
    g->semiangle_mrad = p->semiangle_mrad;
    g->scan_step_A[0] = p->scan_step_A[0];
    g->scan_step_A[1] = p->scan_step_A[1];
    /* Measured always (SPEC §4: stated beats measured, and the two are compared): δs/s = δR/R. */
    out->det_sampling_measured_mrad = p->semiangle_mrad / out->edge_radius_px;
    out->det_sampling_measured_sigma_mrad = out->det_sampling_measured_mrad * out->edge_radius_sigma_px / out->edge_radius_px;
    if (c->sampling_given) {
        g->det_sampling_mrad[0] = p->det_sampling_mrad[0];
        g->det_sampling_mrad[1] = p->det_sampling_mrad[1];
    } else {
        g->det_sampling_mrad[0] = g->det_sampling_mrad[1] = out->det_sampling_measured_mrad;
        out->det_sampling_fitted = 1;
    }
    if (c->centre_given) {
        g->centre_px[0] = p->centre_px[0];
        g->centre_px[1] = p->centre_px[1];
    } else {
        g->centre_px[0] = out->disk_centre_px[0];
        g->centre_px[1] = out->disk_centre_px[1];
        out->centre_fitted = 1;
    }
    out->det_shape[0] = c->dr;
    out->det_shape[1] = c->dc;
    out->scan_shape[0] = c->ny;
    out->scan_shape[1] = c->nx;
}

/* The BF pixels: unflagged pixels within the selection radius (the disk's, unless given) of the
 * centre; both lists ascending (flat order). */
static ssb4d_status select_bf(const cal_run *c, ssb4d_calibration *out, ssb4d_err *err)
{
    const size_t fr = c->fr, dc = c->dc;
    const ssb4d_geometry *g = &out->geom;
    double sel = c->p->bf_radius_px > 0 ? c->p->bf_radius_px : out->disk_radius_px;
    out->selection_radius_px = sel;
    size_t nbf = 0;
    for (size_t q = 0; q < fr; q++) {
        double yr = (double)(q / dc) - g->centre_px[0], xc = (double)(q % dc) - g->centre_px[1];
        if (yr * yr + xc * xc <= sel * sel && !c->isflag[q])
            nbf++;
    }
    if (nbf == 0)
        return ssb_fail(err, SSB4D_ENOTFOUND,
                        "no BF pixel within %.2f px of the centre (%.2f, %.2f)", sel,
                        g->centre_px[0], g->centre_px[1]);
    out->bf_pix = malloc(nbf * sizeof *out->bf_pix);
    out->flagged = malloc((c->nflag ? c->nflag : 1) * sizeof *out->flagged);
    if (!out->bf_pix || !out->flagged)
        return ssb_fail(err, SSB4D_ENOMEM, "calibrate: out of memory");
    nbf = 0;
    size_t nf2 = 0;
    for (size_t q = 0; q < fr; q++) {
        double yr = (double)(q / dc) - g->centre_px[0], xc = (double)(q % dc) - g->centre_px[1];
        if (c->isflag[q])
            out->flagged[nf2++] = (int32_t)q;
        else if (yr * yr + xc * xc <= sel * sel)
            out->bf_pix[nbf++] = (int32_t)q;
    }
    out->n_bf = nbf;
    out->n_flagged = nf2;
    return SSB4D_OK;
}

/* Pass 2, only when pixels were flagged: their counts leave the per-frame moments, so a hot
 * pixel cannot drag the CoM field. */
static ssb4d_status unflag_moments(cal_run *c, const ssb4d_calibration *out, ssb4d_err *err)
{
    const size_t fr = c->fr, npos = c->npos, dc = c->dc, block = c->block, nf2 = out->n_flagged;
    if (c->sums)
        return c->sums->unflag(c->sums->user, out->flagged, nf2, c->mom, err);
    for (size_t p0 = 0; p0 < npos; p0 += block) {
        size_t n = npos - p0 < block ? npos - p0 : block;
        ssb4d_status st = c->is_float ? ssb4d_source_read_frames_f32(c->src, p0, n, c->fbuf, err)
                                      : ssb4d_source_read_frames(c->src, p0, n, c->buf, err);
        if (st)
            return st;
        ssb_source_done_with(c->src, p0, n);
        if (c->is_float) {
#pragma omp parallel for num_threads(c->nt) schedule(static)
            for (size_t f = 0; f < n; f++) {
                const float *fp = c->fbuf + f * fr;
                double *m = c->momd + (p0 + f) * 3;
                for (size_t i = 0; i < nf2; i++) {
                    size_t q = (size_t)out->flagged[i];
                    double v = fp[q];
                    m[0] -= v;
                    m[1] -= v * (double)(q / dc);
                    m[2] -= v * (double)(q % dc);
                }
            }
            continue;
        }
#pragma omp parallel for num_threads(c->nt) schedule(static)
        for (size_t f = 0; f < n; f++) {
            const uint32_t *fp = c->buf + f * fr;
            uint64_t *m = c->mom + (p0 + f) * 3;
            for (size_t i = 0; i < nf2; i++) {
                size_t q = (size_t)out->flagged[i];
                uint64_t v = fp[q];
                m[0] -= v;
                m[1] -= v * (q / dc);
                m[2] -= v * (q % dc);
            }
        }
    }
    return SSB4D_OK;
}

/* The rotation: measured from the CoM field's curl when not given (SPEC §5.1). */
static ssb4d_status measure_rotation(cal_run *c, ssb4d_calibration *out, ssb4d_err *err)
{
    ssb4d_geometry *g = &out->geom;
    out->curl_ratio_other = NAN;
    if (!c->fit_rotation) {
        out->rotation_curl_deg = NAN;
        out->curl_ratio = NAN;
        out->rotation_sigma_deg = NAN;
        g->rotation_deg = c->p->rotation_deg;
        g->flip = c->p->flip > 0;
        return SSB4D_OK;
    }
    ssb4d_status st = c->nflag ? unflag_moments(c, out, err) : SSB4D_OK;
    if (st)
        return st;
    const size_t npos = c->npos;
    c->com = ssb4d_mem_alloc(c->p->mem, c->w.com, "calibrate CoM", NULL);
    if (!c->com)
        return ssb_fail(err, SSB4D_ENOMEM, "calibrate: out of memory (CoM field)");
    double *com = c->com;
    const uint64_t *mom = c->mom;
    /* CoM in mrad (the sampling may differ between the axes when given). */
#pragma omp parallel for num_threads(c->nt) schedule(static)
    for (size_t i = 0; i < npos; i++) {
        double m[3];
        for (int k = 0; k < 3; k++)
            m[k] = c->is_float ? c->momd[i * 3 + k] : (double)mom[i * 3 + k];
        double d0 = 0, d1 = 0;
        if (m[0] > 0) {
            d0 = (m[1] / m[0] - g->centre_px[0]) * g->det_sampling_mrad[0];
            d1 = (m[2] / m[0] - g->centre_px[1]) * g->det_sampling_mrad[1];
        }
        com[2 * i] = d0;
        com[2 * i + 1] = d1;
    }
    /* The handedness (SPEC §2): a mirrored detector's CoM vectors have their components swapped
     * before the rotation. A phase object's CoM field is a gradient, curl-free in the right
     * handedness at the right angle and not at any angle in the other: the one whose best angle
     * leaves the smaller curl wins, unless the handedness is given. */
    int flips[2] = {c->p->flip > 0, 0}, nf = c->p->flip < 0 ? 2 : 1;
    flips[1] = !flips[0];
    double th[2] = {NAN, NAN}, ratio[2] = {NAN, NAN}, sig[2] = {NAN, NAN};
    int ok[2] = {0, 0};
    for (int h = 0; h < nf; h++) {
        if (h == 1 || flips[0]) /* swap the components in place (twice: back to as read) */
            for (size_t i = 0; i < npos; i++) {
                double t = com[2 * i];
                com[2 * i] = com[2 * i + 1];
                com[2 * i + 1] = t;
            }
        ssb4d_err rerr = {0};
        ok[h] = !ssb_cal_rotation_from_com(com, c->ny, c->nx, c->p->scan_step_A, &th[h], &ratio[h], &sig[h], &rerr);
    }
    /* Decided only by a clear margin (half the curl of the other): on thick crystals dynamical
     * scattering bends the CoM field away from a gradient in both handedness alike; undecided,
     * the detector is taken as unmirrored (the common mounting) and the fit tests both. */
    int decided = nf == 2 && ok[0] && ok[1] &&
                  (ratio[1] < CAL_FLIP_MARGIN * ratio[0] || ratio[0] < CAL_FLIP_MARGIN * ratio[1]);
    int h = decided && ratio[1] < ratio[0] ? 1 : 0;
    g->flip = flips[h];
    out->flip_fitted = decided;
    out->curl_ratio_other = nf == 2 && ok[!h] ? ratio[!h] : NAN;
    if (!ok[h]) {
        /* A uniform CoM field (vacuum) or a tiny scan: the disk and sampling are still good;
         * the rotation stays unmeasured (rotation_fitted = 0, NaN figures) and is set to 0. */
        out->rotation_curl_deg = out->curl_ratio = out->rotation_sigma_deg = NAN;
        g->rotation_deg = 0.0;
    } else {
        out->rotation_curl_deg = th[h];
        out->curl_ratio = ratio[h];
        out->rotation_sigma_deg = sig[h];
        out->rotation_fitted = 1;
        g->rotation_deg = th[h];
    }
    return SSB4D_OK;
}

ssb4d_status ssb4d_calibrate(ssb4d_source *src, const ssb4d_calib_params *p,
                             ssb4d_calibration *out, ssb4d_err *err)
{
    return ssb_calibrate_with_sums(src, p, NULL, out, err);
}

ssb4d_status ssb_calibrate_with_sums(ssb4d_source *src, const ssb4d_calib_params *p, const ssb_cal_sums *sums,
                                     ssb4d_calibration *out, ssb4d_err *err)
{
    if (!out)
        return ssb_fail(err, SSB4D_EINVAL, "calibrate: no output");
    memset(out, 0, sizeof *out);
    if (!src || !p)
        return ssb_fail(err, SSB4D_EINVAL, "calibrate: no data source or no parameters");
    ssb4d_status st = check_params(p, err);
    if (st)
        return st;
    cal_run c;
    if ((st = cal_setup(&c, src, p, err)))
        return st;
    if (sums && c.is_float)
        return ssb_fail(err, SSB4D_EINTERNAL, "calibrate: integer sums given for float data");
    c.sums = sums;
    st = cal_alloc(&c, err);
    if (!st)
        st = pass_totals(&c, out, err);
    if (!st) {
        mean_pattern(&c);
        st = find_disk(&c, out, err);
    }
    if (!st) {
        set_geometry(&c, out);
        st = select_bf(&c, out, err);
    }
    if (!st)
        st = measure_rotation(&c, out, err);
    if (!st) {
        out->mean_pattern = c.mean;
        c.mean = NULL;
    }
    cal_free(&c);
    if (st) {
        double tc = out->total_counts;
        ssb4d_calibration_free(out);
        out->total_counts = tc;
        out->rotation_curl_deg = out->curl_ratio = out->rotation_sigma_deg = NAN;
        out->curl_ratio_other = NAN;
    }
    return st;
}
