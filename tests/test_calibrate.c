/* test_calibrate.c — the calibration stage (SPEC §4) and the calibration file (SPEC §8). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "calibrate/calibrate_internal.h"
#include "detector/hotpix.h"
#include "io/calfile.h"
#include "io/npy.h"
#include "ref_ssb.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SIM SSB4D_SHARED_DATA "/sim/"
#define A1 SIM "sim_A1_SrTiO3_300kV_counts.npy"
#define A2 SIM "sim_A2_Au_200kV_counts.npy"
#define A1_NOISEFREE SIM "sim_A1_SrTiO3_300kV_noisefree_f32.npy"

static void params(ssb4d_calib_params *p, double kv, double semi, double step, int threads)
{
    ssb4d_calib_params_default(p);
    p->kv = kv;
    p->semiangle_mrad = semi;
    p->scan_step_A[0] = p->scan_step_A[1] = step;
    p->threads = threads;
}

/* Whole .npy (uint16 counts) in memory, so that tests can alter a copy. */
static uint16_t *load_u16(const char *path, size_t shape[4])
{
    ssb4d_npy_info info;
    void *data = NULL;
    ssb4d_err err = {0};
    ssb4d_status st = ssb_npy_load(path, &info, &data, &err);
    if (st)
        fail_msg("%s", err.msg);
    assert_string_equal(info.descr, "<u2");
    assert_int_equal(info.ndim, 4);
    memcpy(shape, info.shape, 4 * sizeof *shape);
    return data;
}

static ssb4d_status calib_mem(const void *data, ssb4d_dtype dt, const size_t shape[4],
                              const ssb4d_calib_params *p, ssb4d_calibration *c, ssb4d_err *err)
{
    ssb4d_source *s = NULL;
    ssb4d_status st = ssb4d_source_from_memory(data, dt, shape, &s, err);
    assert_int_equal(st, SSB4D_OK);
    st = ssb4d_calibrate(s, p, c, err);
    ssb4d_source_close(s);
    return st;
}

static ssb4d_status calib_file(const char *path, const ssb4d_calib_params *p, ssb4d_calibration *c)
{
    ssb4d_source *s = NULL;
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_source_open_npy(path, &s, &err);
    if (st)
        fail_msg("%s", err.msg);
    st = ssb4d_calibrate(s, p, c, &err);
    if (st)
        fail_msg("%s", err.msg);
    ssb4d_source_close(s);
    return st;
}

/* A1 noise-free intensities × dose, rounded: the same scene without shot noise. */
static uint16_t *a1_high_dose(double dose, size_t shape[4])
{
    ssb4d_npy_info info;
    void *data = NULL;
    ssb4d_err err = {0};
    if (ssb_npy_load(A1_NOISEFREE, &info, &data, &err))
        fail_msg("%s", err.msg);
    assert_string_equal(info.descr, "<f4");
    memcpy(shape, info.shape, 4 * sizeof *shape);
    size_t n = shape[0] * shape[1] * shape[2] * shape[3];
    const float *f = data;
    uint16_t *u = malloc(n * sizeof *u);
    assert_non_null(u);
    for (size_t i = 0; i < n; i++) {
        double v = floor(f[i] * dose + 0.5);
        u[i] = (uint16_t)(v > 65535 ? 65535 : v < 0 ? 0 : v);
    }
    free(data);
    return u;
}

/* ---- geometry on the simulated sets ---------------------------------------------------------- */

static void check_set(const char *path, double kv, double semi, double step, size_t D,
                      double halfmax_radius, double true_sampling)
{
    ssb4d_calib_params p;
    params(&p, kv, semi, step, 2);
    ssb4d_calibration c;
    calib_file(path, &p, &c);
    assert_int_equal(c.det_shape[0], D);
    assert_true(fabs(c.disk_centre_px[0] - D / 2.0) < 0.1);
    assert_true(fabs(c.disk_centre_px[1] - D / 2.0) < 0.1);
    assert_true(c.centre_fitted && c.det_sampling_fitted && c.rotation_fitted);
    assert_true(fabs(c.disk_radius_px - halfmax_radius) < 0.5);
    /* issue 39: the edge fit, not a threshold (which was 1.5 % high on both sets) */
    assert_true(fabs(c.geom.det_sampling_mrad[0] / true_sampling - 1) < 5e-4);
    assert_true(c.det_sampling_measured_mrad == c.geom.det_sampling_mrad[0]);
    assert_true(c.det_sampling_measured_sigma_mrad > 0 && c.det_sampling_measured_sigma_mrad < 1e-3 * true_sampling);
    assert_true(c.geom.det_sampling_mrad[0] == c.geom.det_sampling_mrad[1]);
    assert_true(c.geom.det_sampling_mrad[0] == semi / c.edge_radius_px);
    assert_int_equal(c.n_flagged, 0); /* clean data: nothing flagged */
    /* selection = pixels within the disk radius of the centroid, ascending */
    assert_true(c.n_bf > 0.9 * M_PI * c.disk_radius_px * c.disk_radius_px);
    for (size_t i = 1; i < c.n_bf; i++)
        assert_true(c.bf_pix[i] > c.bf_pix[i - 1]);
    for (size_t i = 0; i < c.n_bf; i++) {
        double r = (double)(c.bf_pix[i] / (int32_t)D) - c.geom.centre_px[0];
        double q = (double)(c.bf_pix[i] % (int32_t)D) - c.geom.centre_px[1];
        assert_true(r * r + q * q <= c.selection_radius_px * c.selection_radius_px);
    }
    assert_true(c.rotation_curl_deg >= -90 && c.rotation_curl_deg < 90);
    print_message("  %s: centre (%.4f, %.4f) radius %.3f edge %.3f sampling %.5f rotation %.3f "
                  "+- %.2f (ratio %.3f) n_bf %zu\n", strrchr(path, '/') + 1, c.disk_centre_px[0],
                  c.disk_centre_px[1], c.disk_radius_px, c.edge_radius_px,
                  c.geom.det_sampling_mrad[0], c.rotation_curl_deg, c.rotation_sigma_deg,
                  c.curl_ratio, c.n_bf);
    if (strstr(path, "A2")) {
        assert_true(fabs(ref_dmod180(c.rotation_curl_deg, 0)) < 2.0);
        assert_true(c.rotation_sigma_deg < 5.0);
    } else {
        /* A1 at its dose (2e4 e/probe, 12 nm defocus) has a CoM field that is ~96% shot noise
         * (rms 0.019 px of signal in 0.098 px): the curl cannot fix the rotation, and the
         * calibration must say so through its jackknife error. */
        assert_true(c.rotation_sigma_deg > 5.0);
    }
    ssb4d_calibration_free(&c);
}

static void test_a1_geometry(void **state)
{
    (void)state;
    check_set(A1, 300, 25, 0.36609375, 48, 19.55, 1.2604026182924246);
}

static void test_a2_geometry(void **state)
{
    (void)state;
    check_set(A2, 200, 20, 0.33983333, 42, 16.01, 1.2299823598493609);
}

/* Overrides: given sampling, centre, radius and rotation are used, not fitted. */
static void test_overrides(void **state)
{
    (void)state;
    ssb4d_calib_params p;
    params(&p, 200, 20, 0.34, 1);
    p.det_sampling_mrad[0] = 1.1;
    p.det_sampling_mrad[1] = 1.3;
    p.centre_px[0] = 20.5;
    p.centre_px[1] = 21.25;
    p.bf_radius_px = 10;
    p.rotation_deg = 12.5;
    ssb4d_calibration c;
    calib_file(A2, &p, &c);
    assert_false(c.det_sampling_fitted || c.centre_fitted || c.rotation_fitted);
    assert_true(c.geom.det_sampling_mrad[0] == 1.1 && c.geom.det_sampling_mrad[1] == 1.3);
    /* stated beats measured (SPEC §4), but the sampling is measured all the same */
    assert_true(fabs(c.det_sampling_measured_mrad / 1.2299823598493609 - 1) < 5e-4);
    assert_true(c.geom.centre_px[0] == 20.5 && c.geom.centre_px[1] == 21.25);
    assert_true(c.geom.rotation_deg == 12.5 && isnan(c.rotation_curl_deg));
    assert_true(c.selection_radius_px == 10);
    size_t n = 0;
    for (int r = 0; r < 42; r++)
        for (int q = 0; q < 42; q++)
            n += (r - 20.5) * (r - 20.5) + (q - 21.25) * (q - 21.25) <= 100;
    assert_int_equal(c.n_bf, n);
    ssb4d_calibration_free(&c);
}

/* ---- the edge fit (issue 39) ------------------------------------------------------------------ */

/* Known answers: a disk of radius R about a sub-pixel centre on a sloping background, drawn two
 * ways independently of edge.c: point samples of SPEC 5.2's aperture (A = clamp(R − r + 1/2)),
 * and a hard disk integrated over each pixel by 41 x 41 sub-samples. The fit finds R within
 * 0.01 px and names the model (the half-median threshold was ~0.2 px inside on the first). */
static void edge_case(int area, double R, double cr, double cc, double *fitted, int *model)
{
    enum { D = 64 };
    double *img = malloc(D * D * sizeof *img);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            double v = 0;
            if (!area) {
                double r = hypot(i - cr, j - cc), a = R - r + 0.5;
                a = a < 0 ? 0 : a > 1 ? 1 : a;
                v = a * a;
            } else {
                int in = 0;
                for (int a = 0; a < 41; a++)
                    for (int b = 0; b < 41; b++)
                        in += hypot(i + (a + 0.5) / 41 - 0.5 - cr, j + (b + 0.5) / 41 - 0.5 - cc) < R;
                v = in / (41.0 * 41.0);
            }
            img[i * D + j] = 100.0 * v * (1 - 0.002 * hypot(i - cr, j - cc)) + 3.0 + 0.01 * i;
        }
    ssb_cal_edge e;
    assert_int_equal(ssb_cal_fit_edge(img, NULL, D, D, cr, cc, R - 0.25, -1, &e), 0);
    *fitted = e.radius_px;
    *model = e.model;
    assert_true(e.sigma_px >= 0 && e.sigma_px < 0.02); /* the 0.05 % floor: ~0.01 px */
    free(img);
}

/* A crystal's mean pattern: the BF disk (radius R, a hard edge integrated over each pixel by
 * 15 x 15 sub-samples, then blurred radially by 0.1 px) with eight Bragg disks of the same radius
 * whose edges cross the BF edge's window in every sector ({200} at 8 px, {220} at 11.3 px, as
 * Au 3 nm at 15 mrad), each pixel-integrated the same way. The point-sampled model, with a blur
 * standing in for the pixels' integration, must not win; the radius within 0.3 %. */
static void test_edge_fit_bragg(void **state)
{
    (void)state;
    enum { D = 72, SUB = 15 };
    const double R = 12.43, cr = 35.2, cc = 35.6, gs[8][2] = {{8, 0}, {-8, 0}, {0, 8}, {0, -8},
                                                              {8, 8}, {8, -8}, {-8, 8}, {-8, -8}};
    double *img = malloc(D * D * sizeof *img);
    assert_non_null(img);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            double v = 0;
            for (int a = 0; a < SUB; a++)
                for (int b = 0; b < SUB; b++) {
                    double y = i + (a + 0.5) / SUB - 0.5 - cr, x = j + (b + 0.5) / SUB - 0.5 - cc;
                    /* the 0.1 px blur of each edge: the smooth step Φ((R − r)/0.1) */
                    v += 0.5 * erfc(-(R - hypot(y, x)) / (0.1 * M_SQRT2));
                    for (int g = 0; g < 8; g++)
                        v += (g < 4 ? 0.12 : 0.06) * 0.5 * erfc(-(R - hypot(y - gs[g][0], x - gs[g][1])) / (0.1 * M_SQRT2));
                }
            img[i * D + j] = 100.0 * v / (SUB * SUB) + 2.0;
        }
    ssb_cal_edge e;
    assert_int_equal(ssb_cal_fit_edge(img, NULL, D, D, cr, cc, R - 0.25, -1, &e), 0);
    print_message("  BF disk R %.2f with crossing Bragg disks: fitted %.4f (model %d, blur %.3f) +- %.4f\n", R,
                  e.radius_px, e.model, e.blur_px, e.sigma_px);
    assert_true(e.model != 0);
    assert_true(fabs(e.radius_px / R - 1) < 0.003);
    free(img);
}

/* What the edge's profile determines (the sampling study's oversampled crystals, docs/calibrate.md):
 * a disk drawn as the simulator draws it with det_oversample 3 (3 x 3 point samples per pixel of
 * SPEC 5.2's aperture, its amplitude a ramp 1/3 px wide, so intensity A²) and blurred radially by
 * 0.15 px. Every pixel model fits it with its own blur, and their radii differ by the models' edge
 * conventions, u/6 (u the ramp's width): R_m − u_m/6, the radius of the hard edge that lets
 * through the same flux, is the same for all of them, R − (1/3)/6. The blur hides which u the
 * pixels had, so that flux-equivalent edge is what the data fix; R itself needs u. */
static void test_edge_fit_flux_edge(void **state)
{
    (void)state;
    enum { D = 60, S = 3, NZ = 61 };
    const double R = 15.37, cr = 29.3, cc = 30.15, u = 1.0 / S, sig = 0.15;
    double *img = malloc(D * D * sizeof *img);
    assert_non_null(img);
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            double v = 0, wsum = 0;
            for (int a = 0; a < S; a++)
                for (int b = 0; b < S; b++) {
                    double r = hypot(i + (a + 0.5) / S - 0.5 - cr, j + (b + 0.5) / S - 0.5 - cc);
                    for (int z = 0; z < NZ; z++) { /* the blur: a normal over ±5σ */
                        double t = -5.0 + 10.0 * z / (NZ - 1), w = exp(-0.5 * t * t);
                        double A = (R - r + sig * t) / u + 0.5;
                        A = A < 0 ? 0 : A > 1 ? 1 : A;
                        v += w * A * A;
                        wsum += w;
                    }
                }
            img[i * D + j] = 50.0 * v / wsum + 1.0 + 0.02 * j;
        }
    ssb_cal_edge e;
    assert_int_equal(ssb_cal_fit_edge(img, NULL, D, D, cr, cc, R - 0.2, -1, &e), 0);
    static const double um[4] = {1.0, 1.0 / 3.0, 1.0 / 5.0, 0.0};
    for (int m = 0; m < 4; m++) {
        double flux = e.radius_m[m] - um[m] / 6;
        print_message("  model %d: R %.4f, R - u/6 %.4f (truth %.4f, %.4f), rss %.4g\n", m, e.radius_m[m], flux, R,
                      R - u / 6, e.rss[m]);
        if (m > 0)
            assert_true(fabs(flux - (R - u / 6)) < 0.01);
    }
    print_message("  fitted %.4f (model %d, blur %.3f) +- %.4f\n", e.radius_px, e.model, e.blur_px, e.sigma_px);
    free(img);
}

static void test_edge_fit_known(void **state)
{
    (void)state;
    double R;
    int m;
    edge_case(0, 17.3, 31.4, 32.2, &R, &m);
    print_message("  point-sampled aperture R 17.3: fitted %.5f (model %d)\n", R, m);
    assert_true(fabs(R - 17.3) < 0.01 && m == 0);
    edge_case(1, 21.65, 32.3, 31.15, &R, &m);
    print_message("  area-integrated hard disk R 21.65: fitted %.5f (model %d)\n", R, m);
    assert_true(fabs(R - 21.65) < 0.01 && m == 3);
}

/* ---- rotation -------------------------------------------------------------------------------- */

/* Synthetic gradient field rotated into the detector frame by −θ0: the fit must return +θ0
 * (so that k_scan = R(θ)·d, SPEC §5.1 with a = −rotation). */
static void test_rotation_synthetic_field(void **state)
{
    (void)state;
    const size_t ny = 64, nx = 80;
    double *com = malloc(ny * nx * 2 * sizeof *com);
    assert_non_null(com);
    const double step[2] = {0.5, 0.4};
    for (double th0 = -80; th0 < 90; th0 += 17) {
        double t = -th0 * M_PI / 180, ct = cos(t), st = sin(t);
        for (size_t i = 0; i < ny; i++)
            for (size_t j = 0; j < nx; j++) {
                double x = i * step[0], y = j * step[1];
                /* φ = sin(a x) cos(b y) + 0.7 cos(c x + d y): gradient */
                double a = 2 * M_PI * 2 / (ny * step[0]), b = 2 * M_PI * 3 / (nx * step[1]);
                double cc = 2 * M_PI * 1 / (ny * step[0]), dd = 2 * M_PI * 2 / (nx * step[1]);
                double gr = a * cos(a * x) * cos(b * y) - 0.7 * cc * sin(cc * x + dd * y);
                double gc = -b * sin(a * x) * sin(b * y) - 0.7 * dd * sin(cc * x + dd * y);
                com[(i * nx + j) * 2] = ct * gr - st * gc;
                com[(i * nx + j) * 2 + 1] = st * gr + ct * gc;
            }
        double th, ratio, sig;
        ssb4d_err err = {0};
        assert_int_equal(ssb_cal_rotation_from_com(com, ny, nx, step, &th, &ratio, &sig, &err),
                         SSB4D_OK);
        assert_true(th >= -90 && th < 90);
        assert_true(fabs(ref_dmod180(th, th0)) < 0.1);
        assert_true(ratio < 0.05);
        /* the direct evaluation agrees that θ is the minimum */
        double s0 = ssb_cal_curl_sumsq(com, ny, nx, step, th);
        assert_true(s0 < ssb_cal_curl_sumsq(com, ny, nx, step, th + 3));
        assert_true(s0 < ssb_cal_curl_sumsq(com, ny, nx, step, th - 3));
        assert_true(s0 < 0.06 * ssb_cal_curl_sumsq(com, ny, nx, step, th + 90));
    }
    /* a uniform field has no rotation to find */
    for (size_t i = 0; i < ny * nx * 2; i++)
        com[i] = 0.25;
    double th, ratio;
    ssb4d_err err = {0};
    assert_int_equal(ssb_cal_rotation_from_com(com, ny, nx, step, &th, &ratio, NULL, &err),
                     SSB4D_ENOTFOUND);
    free(com);
}

/* End to end with the sign: frames whose disk is displaced by R(−θ0)·∇φ must calibrate to θ0. */
static void test_rotation_synthetic_frames(void **state)
{
    (void)state;
    const size_t ny = 24, nx = 24, D = 32;
    const size_t shape[4] = {ny, nx, D, D};
    uint16_t *u = malloc(ny * nx * D * D * sizeof *u);
    assert_non_null(u);
    const double th0 = 30.0, t = -th0 * M_PI / 180, R = 8.0;
    for (size_t i = 0; i < ny; i++)
        for (size_t j = 0; j < nx; j++) {
            double a = 2 * M_PI / ny, b = 2 * M_PI * 2 / nx;
            /* φ = (1.2/a) sin(a i) cos(b j): ∇φ = (1.2 cos cos, −1.2 (b/a) sin sin) px */
            double gr = 1.2 * cos(a * i) * cos(b * j), gc = -1.2 * (b / a) * sin(a * i) * sin(b * j);
            double sr = cos(t) * gr - sin(t) * gc, sc = sin(t) * gr + cos(t) * gc;
            double cr = 15.5 + sr, cc = 15.5 + sc;
            uint16_t *f = u + (i * nx + j) * D * D;
            for (size_t r = 0; r < D; r++)
                for (size_t q = 0; q < D; q++) {
                    /* 4x4 supersampled disk */
                    int in = 0;
                    for (int sy = 0; sy < 4; sy++)
                        for (int sx = 0; sx < 4; sx++) {
                            double y = r - 0.375 + 0.25 * sy - cr, x = q - 0.375 + 0.25 * sx - cc;
                            in += y * y + x * x <= R * R;
                        }
                    f[r * D + q] = (uint16_t)(in * 40);
                }
        }
    ssb4d_calib_params p;
    params(&p, 300, 20, 1.0, 2);
    ssb4d_calibration c;
    ssb4d_err err = {0};
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_OK);
    print_message("  synthetic frames: rotation %.3f (expected %.1f), ratio %.4f, radius %.3f\n",
                  c.geom.rotation_deg, th0, c.curl_ratio, c.disk_radius_px);
    assert_true(fabs(ref_dmod180(c.geom.rotation_deg, th0)) < 1.0);
    assert_true(fabs(c.disk_radius_px - R) < 0.5);
    ssb4d_calibration_free(&c);
    free(u);
}

/* The detector axes turned by 90° (an exact pixel permutation): the CoM vectors turn by −90°
 * (d' = R(−90°)·d), so the fitted rotation must grow by exactly 90° (mod 180). */
static void test_rotation_detector_90(void **state)
{
    (void)state;
    size_t shape[4];
    uint16_t *u = a1_high_dose(2e6, shape); /* high dose: a well-determined reference angle */
    const size_t D = shape[2], fr = D * D, npos = shape[0] * shape[1];
    uint16_t *v = malloc(npos * fr * sizeof *v);
    assert_non_null(v);
    for (size_t k = 0; k < npos; k++)
        for (size_t r = 0; r < D; r++)
            for (size_t q = 0; q < D; q++) /* (r, q) → (q, D−1−r) */
                v[k * fr + q * D + (D - 1 - r)] = u[k * fr + r * D + q];
    ssb4d_calib_params p;
    params(&p, 300, 25, 0.36609375, 2);
    ssb4d_calibration c0, c1;
    ssb4d_err err = {0};
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c0, &err), SSB4D_OK);
    assert_int_equal(calib_mem(v, SSB4D_U16, shape, &p, &c1, &err), SSB4D_OK);
    print_message("  A1 x dose 100: rotation %.4f (ratio %.4f, +- %.2f); detector turned 90: %.4f\n",
                  c0.geom.rotation_deg, c0.curl_ratio, c0.rotation_sigma_deg, c1.geom.rotation_deg);
    /* the noise-free scene: the curl nearly vanishes at the fitted angle, close to the truth (0);
     * order-2 differences of A1's near-Nyquist lattice field leave a bias of ~3° */
    assert_true(c0.curl_ratio < 0.15);
    assert_true(fabs(ref_dmod180(c0.geom.rotation_deg, 0)) < 3.5);
    assert_true(fabs(ref_dmod180(c1.geom.rotation_deg, c0.geom.rotation_deg + 90)) < 0.01);
    /* centre moves with the permutation: (24, 24) → (24, 23) */
    assert_true(fabs(c1.disk_centre_px[0] - c0.disk_centre_px[1]) < 1e-9);
    assert_true(fabs(c1.disk_centre_px[1] - (D - 1 - c0.disk_centre_px[0])) < 1e-9);
    assert_true(c1.disk_radius_px == c0.disk_radius_px);
    ssb4d_calibration_free(&c0);
    ssb4d_calibration_free(&c1);
    free(u);
    free(v);
}

/* ---- hot pixels, threads --------------------------------------------------------------------- */

static void test_hot_pixels(void **state)
{
    (void)state;
    size_t shape[4];
    uint16_t *u = load_u16(A1, shape);
    const size_t D = shape[2], fr = D * D, npos = shape[0] * shape[1];
    const int hot[4][2] = {{24, 10}, {15, 30}, {33, 20}, {2, 3}}; /* 3 in the disk, 1 far out */
    for (size_t k = 0; k < npos; k++)
        for (int h = 0; h < 4; h++) {
            uint16_t *px = u + k * fr + (size_t)hot[h][0] * D + (size_t)hot[h][1];
            *px = h < 3 ? (uint16_t)(*px * 50) : 50;
        }
    ssb4d_calib_params p;
    params(&p, 300, 25, 0.36609375, 2);
    ssb4d_calibration c;
    ssb4d_err err = {0};
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_OK);
    assert_int_equal(c.n_flagged, 4);
    int32_t want[4];
    for (int h = 0; h < 4; h++)
        want[h] = hot[h][0] * (int32_t)D + hot[h][1];
    /* ascending: 2*48+3, 15*48+30, 24*48+10, 33*48+20 */
    int32_t sorted[4] = {want[3], want[1], want[0], want[2]};
    assert_memory_equal(c.flagged, sorted, sizeof sorted);
    for (size_t i = 0; i < c.n_bf; i++)
        for (int h = 0; h < 4; h++)
            assert_int_not_equal(c.bf_pix[i], want[h]);
    /* the fit does not see them: same disk as the clean data */
    assert_true(fabs(c.disk_centre_px[0] - 24) < 0.01 && fabs(c.disk_centre_px[1] - 24) < 0.01);
    assert_true(fabs(c.disk_radius_px - 19.55) < 0.5);
    /* the mean pattern has them replaced by their neighbours' median */
    assert_true(c.mean_pattern[want[0]] < 2 * c.mean_pattern[want[0] + 1]);
    size_t nbf_hot = c.n_bf;
    ssb4d_calibration c2;
    /* bit-identical for 1 and 2 threads (with pass 2 for the flagged pixels' moments) */
    p.threads = 1;
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c2, &err), SSB4D_OK);
    assert_memory_equal(&c.geom, &c2.geom, sizeof c.geom);
    assert_memory_equal(c.mean_pattern, c2.mean_pattern, fr * sizeof(double));
    assert_memory_equal(&c.rotation_curl_deg, &c2.rotation_curl_deg, sizeof(double));
    assert_memory_equal(&c.curl_ratio, &c2.curl_ratio, sizeof(double));
    ssb4d_calibration_free(&c2);
    /* disabled: nothing flagged, the in-disk hot pixels are selected */
    p.hot_pixels = 0;
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c2, &err), SSB4D_OK);
    assert_int_equal(c2.n_flagged, 0);
    assert_int_equal(c2.n_bf, nbf_hot + 3);
    ssb4d_calibration_free(&c2);
    ssb4d_calibration_free(&c);
    free(u);
}

/* Dead pixels: a zero pixel whose neighbours all saw counts is flagged; zeros on the rim of a
 * region that is dark anyway (beyond the scattering, or a simulation's band limit) are not. */
static void test_dead_pixels(void **state)
{
    (void)state;
    enum { R = 16, C = 16 };
    double tot[R * C];
    int32_t out[R * C];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            tot[r * C + c] = (r >= 10 && c >= 10) ? 0 : 1000 + (double)((r * 7 + c * 3) % 11); /* dark corner */
    tot[5 * C + 4] = 0;                                                     /* a dead pixel */
    size_t n = ssb_hotpix_find_flagged(tot, R, C, out);
    assert_int_equal(n, 1);
    assert_int_equal(out[0], 5 * C + 4);
}


/* A strong scatterer's BF disk is not flat (a bright core, a dimmer rim): at high dose mean + std
 * picked out the core alone as a compact disk (Au, 300 kV, 25 mrad: 14.4 px of 25.7). The disk
 * is then the set above half its median. */
static void test_non_flat_disk(void **state)
{
    (void)state;
    ssb4d_sim_params sp;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_sim_params_preset(&sp, "tiny", &err), SSB4D_OK);
    sp.specimen = SSB4D_SPECIMEN_AU;
    sp.scan_n = 64;
    sp.scan_cells = 7;
    sp.det = 64;
    sp.window_cells = 5;
    sp.dose = 1e6;
    sp.ab.C_nm[SSB4D_C10] = 5;
    sp.ab.C_nm[SSB4D_C12] = 0.3;
    ssb4d_sim_info info;
    assert_int_equal(ssb4d_sim_describe(&sp, &info, &err), SSB4D_OK);
    size_t shape[4] = {64, 64, 64, 64};
    uint16_t *counts = malloc(64 * 64 * 64 * 64 * sizeof *counts);
    assert_non_null(counts);
    assert_int_equal(ssb4d_simulate_to_memory(&sp, counts, NULL, NULL, NULL, &info, &err), SSB4D_OK);
    ssb4d_source *src;
    assert_int_equal(ssb4d_source_from_memory(counts, SSB4D_U16, shape, &src, &err), SSB4D_OK);
    ssb4d_calib_params p;
    params(&p, 300, 25, info.scan_step_A, 0);
    ssb4d_calibration c;
    assert_int_equal(ssb4d_calibrate(src, &p, &c, &err), SSB4D_OK);
    printf("non-flat disk: radius %.2f px (simulated %.2f), centre (%.2f, %.2f), half-median %d\n", c.disk_radius_px,
           info.bf_radius_px, c.disk_centre_px[0], c.disk_centre_px[1], c.disk_threshold_half_median);
    assert_true(fabs(c.disk_radius_px - info.bf_radius_px) < 1.0);
    assert_true(fabs(c.disk_centre_px[0] - 32) < 0.2 && fabs(c.disk_centre_px[1] - 32) < 0.2);
    assert_true(c.disk_threshold_half_median);
    ssb4d_calibration_free(&c);
    ssb4d_source_close(src);
    free(counts);
}

/* The detector's pixel model stated (SPEC §4, stated beats measured; issue 39): on an oversampled
 * crystal (Au 3 nm, 15 mrad, det_oversample 3: the sampling study's case 9, on a 16x16 scan)
 * the four edge models fit nearly equally well and the residual picks the area-integrated one,
 * whose edge convention puts R 0.3 % out; with the model stated (3x3, the sidecar's
 * det_oversample) only it is fitted and the sampling is within 0.3 %. */
static void test_stated_pixel_model(void **state)
{
    (void)state;
    ssb4d_sim_params sp;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_sim_params_preset(&sp, "small", &err), SSB4D_OK);
    sp.specimen = SSB4D_SPECIMEN_AU;
    sp.cells_z = 7; /* 3 nm */
    sp.scan_n = 16;
    sp.scan_cells = 4;
    sp.window_cells = 4;
    sp.det = 71;
    sp.det_oversample = 3;
    sp.semiangle_mrad = 15;
    sp.ab.C_nm[SSB4D_C10] = -40;
    sp.dose = 1e4;
    sp.seed = 109;
    sp.det_flip = 1;
    sp.threads = 1;
    ssb4d_sim_info info;
    assert_int_equal(ssb4d_sim_describe(&sp, &info, &err), SSB4D_OK);
    size_t shape[4] = {16, 16, 71, 71};
    uint16_t *counts = malloc(16 * 16 * 71 * 71 * sizeof *counts);
    assert_non_null(counts);
    assert_int_equal(ssb4d_simulate_to_memory(&sp, counts, NULL, NULL, NULL, &info, &err), SSB4D_OK);
    ssb4d_source *src;
    assert_int_equal(ssb4d_source_from_memory(counts, SSB4D_U16, shape, &src, &err), SSB4D_OK);
    double rel[2];
    int model[2], stated[2];
    for (int k = 0; k < 2; k++) {
        ssb4d_calib_params p;
        params(&p, 300, 15, info.scan_step_A, 1);
        p.edge_pixel_S = k ? 3 : 0;
        ssb4d_calibration c;
        assert_int_equal(ssb4d_calibrate(src, &p, &c, &err), SSB4D_OK);
        rel[k] = c.det_sampling_measured_mrad / info.det_sampling_mrad - 1;
        model[k] = c.edge_model;
        stated[k] = c.edge_model_stated;
        ssb4d_calibration_free(&c);
    }
    printf("pixel model: chosen %d %+.3f %%, stated 3x3 %d %+.3f %%\n", model[0], 100 * rel[0], model[1], 100 * rel[1]);
    assert_true(fabs(rel[0]) > 3e-3); /* the residual's choice misses (as before the model could be stated) */
    assert_int_equal(stated[0], 0);
    assert_int_equal(model[1], 1);
    assert_int_equal(stated[1], 1);
    assert_true(fabs(rel[1]) <= 3e-3);
    /* out of range: refused before any data is read */
    ssb4d_calib_params p;
    params(&p, 300, 15, info.scan_step_A, 1);
    p.edge_pixel_S = -1;
    ssb4d_calibration c;
    assert_int_equal(ssb4d_calibrate(src, &p, &c, &err), SSB4D_EINVAL);
    ssb4d_source_close(src);
    free(counts);
}

static void test_threads_bit_identical(void **state)
{
    (void)state;
    ssb4d_calibration c[3];
    for (int t = 1; t <= 3; t++) {
        ssb4d_calib_params p;
        params(&p, 200, 20, 0.34, t);
        calib_file(A2, &p, &c[t - 1]);
    }
    for (int t = 1; t < 3; t++) {
        assert_memory_equal(&c[0].geom, &c[t].geom, sizeof c[0].geom);
        assert_memory_equal(c[0].mean_pattern, c[t].mean_pattern, 42 * 42 * sizeof(double));
        assert_int_equal(c[0].n_bf, c[t].n_bf);
        assert_memory_equal(c[0].bf_pix, c[t].bf_pix, c[0].n_bf * sizeof(int32_t));
        assert_memory_equal(&c[0].curl_ratio, &c[t].curl_ratio, sizeof(double));
        assert_memory_equal(&c[0].rotation_sigma_deg, &c[t].rotation_sigma_deg, sizeof(double));
        assert_memory_equal(&c[0].disk_radius_px, &c[t].disk_radius_px, sizeof(double));
        assert_memory_equal(&c[0].edge_radius_px, &c[t].edge_radius_px, sizeof(double));
    }
    for (int t = 0; t < 3; t++)
        ssb4d_calibration_free(&c[t]);
}

/* ---- bad input ------------------------------------------------------------------------------- */

static void test_bad_input(void **state)
{
    (void)state;
    const size_t shape[4] = {8, 8, 32, 32}, n = 8 * 8 * 32 * 32;
    uint16_t *u = calloc(n, sizeof *u);
    assert_non_null(u);
    ssb4d_calib_params p;
    params(&p, 300, 25, 0.5, 2);
    ssb4d_calibration c;
    ssb4d_err err = {0};
    /* all zero */
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_ENOTFOUND);
    assert_non_null(strstr(err.msg, "BF disk not found"));
    assert_null(c.mean_pattern);
    /* flat */
    for (size_t i = 0; i < n; i++)
        u[i] = 7;
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_ENOTFOUND);
    assert_non_null(strstr(err.msg, "BF disk not found"));
    /* flat with Poisson-like noise: bright pixels scattered, no disk */
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        u[i] = (uint16_t)(5 + (x >> 28));
    }
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_ENOTFOUND);
    assert_non_null(strstr(err.msg, "BF disk not found"));
    /* a ring, not a disk */
    for (size_t k = 0; k < 64; k++)
        for (int r = 0; r < 32; r++)
            for (int q = 0; q < 32; q++) {
                double d = hypot(r - 16, q - 16);
                u[k * 1024 + r * 32 + q] = (d > 9 && d < 12) ? 50 : 0;
            }
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_ENOTFOUND);
    /* a tiny spot */
    memset(u, 0, n * sizeof *u);
    for (size_t k = 0; k < 64; k++)
        u[k * 1024 + 16 * 32 + 16] = u[k * 1024 + 16 * 32 + 17] = 100;
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_ENOTFOUND);
    /* semi-angle <= 0, NaN */
    for (size_t k = 0; k < 64; k++)
        for (int r = 0; r < 32; r++)
            for (int q = 0; q < 32; q++)
                u[k * 1024 + r * 32 + q] = hypot(r - 16, q - 16) < 8 ? 30 : 0;
    const double bad[3] = {0.0, -5.0, NAN};
    for (int i = 0; i < 3; i++) {
        params(&p, 300, bad[i], 0.5, 1);
        assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_EINVAL);
        assert_non_null(strstr(err.msg, "semi-angle"));
    }
    params(&p, 300, 25, 0.5, 1);
    p.det_sampling_mrad[0] = 1.0; /* only one axis */
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_EINVAL);
    params(&p, 300, 25, 0.5, 1);
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_OK);
    assert_true(fabs(c.disk_centre_px[0] - 16) < 1e-9 && fabs(c.disk_radius_px - 8) < 0.3);
    /* identical frames: the CoM does not vary, the rotation is not measurable (not an error) */
    assert_false(c.rotation_fitted);
    assert_true(c.geom.rotation_deg == 0 && isnan(c.rotation_curl_deg));
    ssb4d_calibration_free(&c);
    free(u);
}

/* ---- calibration file ------------------------------------------------------------------------ */

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ssb4d_test_calib_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_calfile_round_trip(void **state)
{
    (void)state;
    ssb4d_calib_params p;
    params(&p, 300, 25, 0.36609375, 2);
    size_t shape[4];
    uint16_t *u = load_u16(A1, shape);
    for (size_t k = 0; k < 1024; k++)
        u[k * 2304 + 24 * 48 + 10] *= 50;
    ssb4d_calibration c;
    ssb4d_err err = {0};
    assert_int_equal(calib_mem(u, SSB4D_U16, shape, &p, &c, &err), SSB4D_OK);
    free(u);
    ssb4d_calfile cf, back;
    assert_int_equal(ssb_calfile_from_calibration(&cf, &c, &err), SSB4D_OK);
    snprintf(cf.data_identity, sizeof cf.data_identity, "sha256:%064d", 7);
    cf.has_ab = 1;
    cf.ab.C_nm[SSB4D_C10] = -11.8047512345678901;
    cf.ab.C_nm[SSB4D_C12] = 3.0000000000000004;
    cf.ab.phi_deg[SSB4D_C12] = 30.1;
    cf.ab.C_nm[SSB4D_C30] = 1234.5;
    cf.ab.C_nm[SSB4D_C21] = 10.25;
    cf.ab.phi_deg[SSB4D_C21] = -45;
    cf.loss = 0.0123456789012345678;
    char path[300];
    snprintf(path, sizeof path, "%s/cal.json", tmpdir);
    assert_int_equal(ssb_calfile_write(path, &cf, &err), SSB4D_OK);
    assert_int_equal(ssb_calfile_read(path, &back, &err), SSB4D_OK);
    assert_int_equal(back.version, 1);
    assert_memory_equal(&back.geom, &c.geom, sizeof c.geom);
    assert_true(back.bf_radius_px == c.selection_radius_px);
    assert_true(back.disk_radius_px == c.disk_radius_px);
    assert_int_equal(back.det_shape[0], 48);
    assert_int_equal(back.scan_shape[1], 32);
    assert_int_equal(back.n_flagged, 1);
    assert_int_equal(back.flagged[0], 24 * 48 + 10);
    assert_string_equal(back.data_identity, cf.data_identity);
    assert_int_equal(back.has_ab, 1);
    assert_memory_equal(&back.ab, &cf.ab, sizeof cf.ab);
    assert_true(back.loss == cf.loss);
    ssb_calfile_free(&back);
    /* unknown values come back unknown */
    ssb_calfile_free(&cf);
    ssb_calfile_init(&cf);
    assert_int_equal(ssb_calfile_write(path, &cf, &err), SSB4D_OK);
    assert_int_equal(ssb_calfile_read(path, &back, &err), SSB4D_OK);
    assert_true(isnan(back.geom.kv) && isnan(back.geom.rotation_deg) && isnan(back.loss));
    assert_int_equal(back.has_ab, 0);
    ssb_calfile_free(&back);
    /* no temp files left behind */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) -eq 1", tmpdir);
    assert_int_equal(system(cmd), 0);
    ssb4d_calibration_free(&c);
}

static void expect_refused(const char *text, const char *needle)
{
    char path[300];
    snprintf(path, sizeof path, "%s/bad.json", tmpdir);
    write_text(path, text);
    ssb4d_calfile cf;
    ssb4d_err err = {0};
    ssb4d_status st = ssb_calfile_read(path, &cf, &err);
    if (st == SSB4D_OK)
        fail_msg("accepted: %s", text);
    assert_int_equal(st, SSB4D_EFORMAT);
    if (!strstr(err.msg, needle))
        fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_null(cf.flagged);
}

#define HEAD "{\"schema\":\"ssb4d.calibration\",\"version\":1"

static void test_calfile_refusals(void **state)
{
    (void)state;
    expect_refused(HEAD ",\"microscope\":{\"kv\":300", "not valid JSON");
    expect_refused(HEAD "} trailing", "not valid JSON");
    expect_refused("", "not valid JSON");
    expect_refused("[1,2]", "not a calibration file");
    expect_refused("{\"version\":1}", "not an ssb4d calibration file");
    expect_refused("{\"schema\":\"quantem.calibration\",\"version\":1}", "not an ssb4d calibration file");
    expect_refused("{\"schema\":\"ssb4d.calibration\",\"version\":2}", "newer ssb4d");
    expect_refused("{\"schema\":\"ssb4d.calibration\",\"version\":\"1\"}", "version");
    expect_refused("{\"schema\":\"ssb4d.calibration\",\"version\":0.5}", "version");
    expect_refused(HEAD ",\"microscope\":{\"kv\":\"300\"}}", "microscope.kv");
    expect_refused(HEAD ",\"microscope\":{\"kv\":-300}}", "microscope.kv");
    expect_refused(HEAD ",\"microscope\":{\"semiangle_mrad\":0}}", "semiangle_mrad");
    expect_refused(HEAD ",\"microscope\":[300]}", "microscope");
    expect_refused(HEAD ",\"scan\":{\"step_A\":[0.4]}}", "scan.step_A");
    expect_refused(HEAD ",\"scan\":{\"step_A\":[0.4,-1]}}", "scan.step_A");
    expect_refused(HEAD ",\"scan\":{\"shape\":[32,0]}}", "scan.shape");
    expect_refused(HEAD ",\"detector\":{\"centre_px\":\"24,24\"}}", "detector.centre_px");
    expect_refused(HEAD ",\"detector\":{\"sampling_mrad\":[1e9,1]}}", "detector.sampling_mrad");
    expect_refused(HEAD ",\"detector\":{\"disk_radius_px\":-2}}", "detector.disk_radius_px");
    expect_refused(HEAD ",\"detector\":{\"shape\":[4,4],\"flagged_pixels\":[1,16]}}", "flagged_pixels");
    expect_refused(HEAD ",\"detector\":{\"flagged_pixels\":[1.5]}}", "flagged_pixels");
    expect_refused(HEAD ",\"detector\":{\"flagged_pixels\":{}}}", "flagged_pixels");
    expect_refused(HEAD ",\"rotation_deg\":true}", "rotation_deg");
    expect_refused(HEAD ",\"aberrations\":{\"C10_nm\":\"-12\"}}", "aberrations.C10_nm");
    expect_refused(HEAD ",\"aberrations\":{\"C12_nm\":1e30}}", "aberrations.C12_nm");
    expect_refused(HEAD ",\"aberrations\":5}", "aberrations");
    expect_refused(HEAD ",\"data_identity\":5}", "data_identity");
    expect_refused(HEAD ",\"loss\":\"low\"}", "loss");

    /* accepted: unknown extra keys, nulls, minimal */
    char path[300];
    snprintf(path, sizeof path, "%s/ok.json", tmpdir);
    write_text(path, HEAD ",\"future_key\":{\"x\":[1,2,3]},\"rotation_deg\":null,"
                     "\"detector\":{\"centre_px\":[24,null],\"extra\":1},"
                     "\"aberrations\":{\"C10_nm\":-5,\"C99_nm\":3}}");
    ssb4d_calfile cf;
    ssb4d_err err = {0};
    assert_int_equal(ssb_calfile_read(path, &cf, &err), SSB4D_OK);
    assert_true(cf.geom.centre_px[0] == 24 && isnan(cf.geom.centre_px[1]));
    assert_true(isnan(cf.geom.rotation_deg));
    assert_true(cf.has_ab && cf.ab.C_nm[SSB4D_C10] == -5 && cf.ab.C_nm[SSB4D_C12] == 0);
    ssb_calfile_free(&cf);
    /* missing file */
    snprintf(path, sizeof path, "%s/none.json", tmpdir);
    assert_int_equal(ssb_calfile_read(path, &cf, &err), SSB4D_EIO);
}

/* ---- command line ---------------------------------------------------------------------------- */

static void test_cli(void **state)
{
    (void)state;
    const char *bin = getenv("SSB4D_BIN");
    if (!bin)
        bin = SSB4D_BIN;
    if (access(bin, X_OK) != 0)
        skip();
    char cmd[2048], out[300], log[300];
    snprintf(out, sizeof out, "%s/cli.json", tmpdir);
    snprintf(log, sizeof log, "%s/cli.log", tmpdir);
    snprintf(cmd, sizeof cmd, "'%s' calibrate '%s' --threads 2 -o '%s' --json > '%s' 2>&1", bin, A2,
             out, log);
    assert_int_equal(system(cmd), 0);
    ssb4d_calfile cf;
    ssb4d_err err = {0};
    assert_int_equal(ssb_calfile_read(out, &cf, &err), SSB4D_OK);
    assert_true(cf.geom.kv == 200 && cf.geom.semiangle_mrad == 20); /* from the sidecar */
    assert_true(fabs(cf.geom.det_sampling_mrad[0] / 1.23 - 1) < 0.02); /* measured */
    assert_non_null(strstr(cf.data_identity, "sha256:"));
    ssb_calfile_free(&cf);
    snprintf(cmd, sizeof cmd, "grep -q '\"n_bf\"' '%s' && grep -q '\"curl_ratio\"' '%s'", log, log);
    assert_int_equal(system(cmd), 0);
    /* bad input: exit 2, one line starting "ssb4d calibrate:" */
    snprintf(cmd, sizeof cmd, "'%s' calibrate /nonexistent/x.npy > '%s' 2>&1; test $? -eq 2 && "
             "test $(wc -l < '%s') -eq 1 && grep -q '^ssb4d calibrate: ' '%s'", bin, log, log, log);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' calibrate '%s' --semiangle 0 > '%s' 2>&1; test $? -eq 2 && "
             "test $(wc -l < '%s') -eq 1", bin, A2, log, log);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' calibrate '%s' > '%s' 2>&1; test $? -eq 2 && "
             "test $(wc -l < '%s') -eq 1", bin, A1_NOISEFREE, log, log);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' calibrate --help | grep -q 'usage: ssb4d calibrate'", bin);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a1_geometry),
        cmocka_unit_test(test_a2_geometry),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_edge_fit_known),
        cmocka_unit_test(test_edge_fit_flux_edge),
        cmocka_unit_test(test_edge_fit_bragg),
        cmocka_unit_test(test_rotation_synthetic_field),
        cmocka_unit_test(test_rotation_synthetic_frames),
        cmocka_unit_test(test_rotation_detector_90),
        cmocka_unit_test(test_hot_pixels),
        cmocka_unit_test(test_dead_pixels),
        cmocka_unit_test(test_non_flat_disk),
        cmocka_unit_test(test_stated_pixel_model),
        cmocka_unit_test(test_threads_bit_identical),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_calfile_round_trip),
        cmocka_unit_test(test_calfile_refusals),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
