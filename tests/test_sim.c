/* test_sim.c — the simulator (src/sim): conventions against the abTEM reference data (A1),
 * determinism, the Poisson sampler, normalisation, streaming output, ground-truth phase and
 * parameter checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/sha256.h"
#include "io/npy.h"
#include "ref_ssb.h"
#include "sim/sim.h"
#include "ssb4d_advanced.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SSB4D_SHARED_DATA
#define SSB4D_SHARED_DATA "../shared/data"
#endif


/* Correlation of the position-dependent part of the patterns: each detector pixel's mean over
 * the scan is removed first (the BF disk itself is the same for any aberrations). */
static double fluct_corr(const float *a, const float *b, size_t npos, size_t dd)
{
    float *x = malloc(npos * dd * sizeof(float)), *y = malloc(npos * dd * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    for (size_t k = 0; k < dd; k++) {
        double ma = 0, mb = 0;
        for (size_t p = 0; p < npos; p++) {
            ma += a[p * dd + k];
            mb += b[p * dd + k];
        }
        ma /= (double)npos;
        mb /= (double)npos;
        for (size_t p = 0; p < npos; p++) {
            x[p * dd + k] = (float)(a[p * dd + k] - ma);
            y[p * dd + k] = (float)(b[p * dd + k] - mb);
        }
    }
    double r = ref_correlation_f(x, y, npos * dd);
    free(x);
    free(y);
    return r;
}

static void a1_params(ssb4d_sim_params *p)
{
    assert_int_equal(ssb4d_sim_params_preset(p, "tiny", NULL), SSB4D_OK);
    p->specimen = SSB4D_SPECIMEN_SRTIO3;
    p->cells_z = 1;
    p->kv = 300;
    p->semiangle_mrad = 25;
    p->window_cells = 4;
    p->scan_n = 32;
    p->scan_cells = 3;
    p->det = 48;
    memset(&p->ab, 0, sizeof p->ab);
    p->ab.C_nm[SSB4D_C10] = -12.0;
    p->ab.C_nm[SSB4D_C12] = 3.0;
    p->ab.phi_deg[SSB4D_C12] = 30.0;
    p->dose = 2e4;
    p->seed = 1001;
}

static void test_a1_convention(void **state)
{
    (void)state;
    ssb4d_npy_info inf;
    void *ref = NULL, *bl = NULL;
    ssb4d_err e;
    const char *path = SSB4D_SHARED_DATA "/sim/sim_A1_SrTiO3_300kV_noisefree_f32.npy";
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "skipping: %s not found\n", path);
        skip();
    }
    assert_int_equal(ssb_npy_load(path, &inf, &ref, &e), SSB4D_OK);
    assert_string_equal(inf.descr, "<f4");
    assert_int_equal(inf.ndim, 4);
    assert_int_equal(inf.shape[0], 32);
    assert_int_equal(inf.shape[2], 48);
    assert_int_equal(ssb_npy_load(SSB4D_SHARED_DATA "/sim/sim_A1_SrTiO3_300kV_phase_gt_bandlimited.npy",
                                  &inf, &bl, &e),
                     SSB4D_OK);
    size_t npos = 32 * 32, dd = 48 * 48, n = npos * dd;
    float *inten = malloc(n * sizeof(float));
    float ph[1024], phbl[1024];
    assert_non_null(inten);
    double r_fl[3], r_raw[3];
    const char *what[3] = {"true (C10 -12, C12 3 @ 30)", "phi12 -> -30", "C10 -> +12"};
    for (int v = 0; v < 3; v++) {
        ssb4d_sim_params p;
        a1_params(&p);
        if (v == 1)
            p.ab.phi_deg[SSB4D_C12] = -30.0;
        if (v == 2)
            p.ab.C_nm[SSB4D_C10] = 12.0;
        ssb4d_sim_info info;
        assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, inten, ph, phbl, &info, &e), SSB4D_OK);
        assert_true(fabs(info.scan_step_A - 0.36609375) < 1e-12);
        assert_true(fabs(info.det_sampling_mrad - 1.2604026182924246) < 1e-6);
        r_raw[v] = ref_correlation_f(inten, ref, n);
        r_fl[v] = fluct_corr(inten, ref, npos, dd);
        fprintf(stderr, "A1 %-28s grid %d: pattern r = %.5f, position-dependent part r = %.5f\n",
                what[v], info.grid, r_raw[v], r_fl[v]);
        if (v == 0) {
            double rp = ref_correlation_f(phbl, bl, 1024);
            fprintf(stderr, "A1 band-limited phase vs abTEM: r = %.5f\n", rp);
            assert_true(rp > 0.99);
        }
    }
    assert_true(r_raw[0] > 0.999);
    assert_true(r_fl[0] > 0.99);
    assert_true(r_fl[0] > r_fl[1] + 0.3);
    assert_true(r_fl[0] > r_fl[2] + 0.3);
    free(inten);
    free(ref);
    free(bl);
}

/* A2 (Au fcc, 200 kV): only noisy counts are shared, so the bound is lower but the ordering holds. */
static void test_a2_convention(void **state)
{
    (void)state;
    const char *path = SSB4D_SHARED_DATA "/sim/sim_A2_Au_200kV_counts.npy";
    if (access(path, R_OK) != 0)
        skip();
    ssb4d_npy_info inf;
    void *ref = NULL;
    ssb4d_err e;
    assert_int_equal(ssb_npy_load(path, &inf, &ref, &e), SSB4D_OK);
    assert_string_equal(inf.descr, "<u2");
    size_t npos = 48 * 48, dd = 42 * 42, n = npos * dd;
    assert_int_equal(inf.shape[0] * inf.shape[1] * inf.shape[2] * inf.shape[3], n);
    float *R = malloc(n * sizeof(float)), *inten = malloc(n * sizeof(float));
    assert_non_null(R);
    assert_non_null(inten);
    for (size_t i = 0; i < n; i++)
        R[i] = ((const uint16_t *)ref)[i];
    double r[3];
    for (int v = 0; v < 3; v++) {
        ssb4d_sim_params p;
        assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
        p.specimen = SSB4D_SPECIMEN_AU;
        p.kv = 200;
        p.semiangle_mrad = 20;
        p.window_cells = 5;
        p.scan_n = 48;
        p.scan_cells = 4;
        p.det = 42;
        memset(&p.ab, 0, sizeof p.ab);
        p.ab.C_nm[SSB4D_C10] = v == 2 ? -8.0 : 8.0;
        p.ab.C_nm[SSB4D_C12] = 1.5;
        p.ab.phi_deg[SSB4D_C12] = v == 1 ? 50.0 : -50.0;
        ssb4d_sim_info info;
        assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, inten, NULL, NULL, &info, &e), SSB4D_OK);
        assert_true(fabs(info.det_sampling_mrad - 1.2300) < 1e-4);
        r[v] = fluct_corr(inten, R, npos, dd);
        fprintf(stderr, "A2 %s: position-dependent part r = %.5f (vs noisy counts)\n",
                v == 0 ? "true" : v == 1 ? "phi12 -> +50" : "C10 -> -8", r[v]);
    }
    assert_true(r[0] > 0.5);
    assert_true(r[0] > r[1] + 0.1);
    assert_true(r[0] > r[2] + 0.3);
    free(R);
    free(inten);
    free(ref);
}

static void small_params(ssb4d_sim_params *p)
{
    assert_int_equal(ssb4d_sim_params_preset(p, "tiny", NULL), SSB4D_OK);
    p->scan_n = 12;
    p->scan_cells = 2;
    p->det = 32;
    p->window_cells = 3;
    p->cells_z = 2;
    p->ab.C_nm[SSB4D_C21] = 20.0;
    p->ab.phi_deg[SSB4D_C21] = 40.0;
    p->tilt_mrad[0] = 3.0;
    p->seed = 42;
    /* The point-sampled detector: auto would pick S = 3 here (footprint 10.3 Å against an
     * 11.7 Å window), and these tests check determinism, sums and streaming, which the
     * oversampled path has its own tests for (test_oversample_*). */
    p->det_oversample = 1;
}

static void hash_counts(const ssb4d_sim_params *p, char hex[65], ssb4d_sim_info *info)
{
    size_t n = (size_t)p->scan_n * p->scan_n * p->det * p->det;
    uint16_t *c = malloc(n * sizeof(uint16_t));
    assert_non_null(c);
    ssb4d_err e;
    assert_int_equal(ssb4d_simulate_to_memory(p, c, NULL, NULL, NULL, info, &e), SSB4D_OK);
    ssb_sha256_hex(c, n * sizeof(uint16_t), hex);
    free(c);
}

/* Counts do not depend on the thread count, the block size or how many patterns are kept for
 * reuse (small_params: 12² scan over 2 cells, gcd 2, so 6² distinct patterns), on the reuse
 * path (0°, 90°) and on the direct one (30°). */
static void test_determinism(void **state)
{
    (void)state;
    const double rots[3] = {0.0, 90.0, 30.0};
    char first[3][65];
    for (int r = 0; r < 3; r++) {
        ssb4d_sim_params p;
        small_params(&p);
        p.scan_rotation_deg = rots[r];
        char h1[65], h2[65], h3[65], h4[65];
        ssb4d_sim_info info;
        p.threads = 1;
        hash_counts(&p, h1, &info);
        size_t n_default = info.n_patterns;
        p.threads = 2;
        hash_counts(&p, h2, &info);
        p.threads = 3;
        p.block_bytes = 1;   /* one scan row per block */
        p.reuse_bytes = 1;   /* no row table kept: every block computes its own */
        hash_counts(&p, h4, &info);
        size_t n_none = info.n_patterns;
        p.threads = 2;
        p.block_bytes = (size_t)5 * 12 * 32 * 32 * 2; /* 5 rows */
        p.reuse_bytes = (size_t)2 * 6 * (32 * 32 * 4 + 16); /* 2 of the 6 row tables kept */
        hash_counts(&p, h3, &info);
        fprintf(stderr, "rotation %g: %zu patterns computed (none kept, 1-row blocks: %zu; 2 kept, "
                "5-row blocks: %zu)\n", rots[r], n_default, n_none, info.n_patterns);
        assert_string_equal(h1, h2);
        assert_string_equal(h1, h3);
        assert_string_equal(h1, h4);
        if (r < 2) {
            assert_int_equal(n_default, 36);           /* (N/gcd(N, S))² */
            assert_int_equal(n_none, 12 * 6);          /* each row's 6 patterns */
            assert_true(info.n_patterns > 36 && info.n_patterns < 12 * 6);
        } else {
            assert_int_equal(n_default, 144);          /* no reuse */
        }
        memcpy(first[r], h1, 65);
        p.seed = 43;
        hash_counts(&p, h3, &info);
        assert_string_not_equal(h1, h3);
        assert_true(info.max_count > 0);
    }
    assert_string_not_equal(first[0], first[1]);
}

/* Pattern reuse computes each position at its place reduced modulo the lattice: the result
 * must equal the pattern simulated directly at the unreduced place R(a)ᵀ·(i·s, j·s), up to
 * float rounding. On a grid that W does not divide (126 for W = 4), which needs the
 * transmission functions built from one cell (ctx_init): sampling e^{iσV} on the window's grid
 * put non-lattice frequencies in them and translations then changed patterns by ~1e-4. */
static void test_reuse_matches_direct(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
    p.scan_n = 12;
    p.scan_cells = 3; /* step a/4: gcd 3, 4 distinct reduced positions per axis */
    p.cells_z = 4;
    p.threads = 2;
    size_t N = 12, DD = 48 * 48;
    float *in = malloc(N * N * DD * sizeof(float)), *d = malloc(DD * sizeof(float));
    assert_true(in && d);
    const double rots[5] = {0.0, 90.0, 180.0, -90.0, 270.0};
    const size_t pts[5][2] = {{0, 0}, {1, 3}, {11, 11}, {6, 2}, {5, 10}};
    for (int r = 0; r < 5; r++) {
        p.scan_rotation_deg = rots[r];
        ssb4d_sim_info info;
        ssb4d_err e;
        assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, in, NULL, NULL, &info, &e), SSB4D_OK);
        assert_int_equal(info.grid, 126);
        assert_int_equal(info.n_patterns, 16);
        double c = cos(rots[r] * M_PI / 180.0), sn = sin(rots[r] * M_PI / 180.0), worst = 0.0;
        for (int t = 0; t < 5; t++) {
            size_t i = pts[t][0], j = pts[t][1];
            double x = (double)i * info.scan_step_A, y = (double)j * info.scan_step_A, sums[2];
            assert_int_equal(sim_pattern_at(&p, x * c + y * sn, -x * sn + y * c, d, sums, &e), SSB4D_OK);
            const float *a = in + (i * N + j) * DD;
            double peak = 0.0, dmax = 0.0;
            for (size_t k = 0; k < DD; k++) {
                peak = d[k] > peak ? d[k] : peak;
                double v = fabs((double)a[k] - d[k]);
                dmax = v > dmax ? v : dmax;
            }
            worst = dmax / peak > worst ? dmax / peak : worst;
        }
        fprintf(stderr, "rotation %g: reused vs direct patterns, max |diff| %.2g of the peak\n",
                rots[r], worst);
        assert_true(worst < 1e-5);
    }
    free(in);
    free(d);
}

/* ---- detector oversampling (docs/simulate.md) ------------------------------------------------ */

static float *intensities(const ssb4d_sim_params *p, ssb4d_sim_info *info)
{
    size_t n = (size_t)p->scan_n * p->scan_n * p->det * p->det;
    float *f = malloc(n * sizeof(float));
    assert_non_null(f);
    ssb4d_err e;
    assert_int_equal(ssb4d_simulate_to_memory(p, NULL, f, NULL, NULL, info, &e), SSB4D_OK);
    return f;
}

/* S = 1 is the simulator before oversampling, bit for bit: SHA-256 of the noise-free float32
 * intensities and of the counts of three cases (exact path without reuse, reuse with coma, tilt
 * and 2 cells, direct path at 30° on Au), computed by commit cf1b8f9 (the simulator just before
 * detector oversampling) with the FFTW 3 float build of this machine (x86-64). Another FFTW build
 * may round differently; regenerate them with that commit there. */
static void test_oversample_identity(void **state)
{
    (void)state;
    static const char *golden[3][2] = {
        {"abf5de938c2ee38b8bb7f72e1d7a47e39b8a30bc9956f94c8c96e7e830721fce",
         "0a9185cec588a3f217f59bcb1d2d00a43edb47f9493a4270def1ee6460e6831a"},
        {"ee737e648a65398315673d9007e7fbace5137874c1b7fc07b7f5630fc6e67ea9",
         "6d9f70e4821381ba8f2046cab92fd44e9f9755d7c8fc475b07e577b13bf2c439"},
        {"b7bd913b08995d832b8ce7230aa139b66f80b6386541c23b07b4efc0dfc0ff95",
         "b9e3f54e419875b8a39e2a102a8218776bd8d09befa76066261708efccf943eb"},
    };
    for (int c = 0; c < 3; c++)
        for (int s = 0; s < 2; s++) { /* S = 1 given, and auto (which picks 1 here) */
            ssb4d_sim_params p;
            assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
            p.threads = 2;
            if (c == 0) {
                p.scan_n = 8;
            } else if (c == 1) {
                p.scan_n = 12;
                p.cells_z = 2;
                p.ab.C_nm[SSB4D_C21] = 20;
                p.ab.phi_deg[SSB4D_C21] = 40;
                p.tilt_mrad[0] = 3;
                p.seed = 7;
            } else {
                p.scan_n = 6;
                p.scan_rotation_deg = 30;
                p.specimen = SSB4D_SPECIMEN_AU;
            }
            p.det_oversample = s == 0 ? 1 : 0;
            size_t n = (size_t)p.scan_n * p.scan_n * p.det * p.det;
            uint16_t *cnt = malloc(n * sizeof(uint16_t));
            float *f = malloc(n * sizeof(float));
            assert_true(cnt && f);
            ssb4d_sim_info info;
            ssb4d_err e;
            assert_int_equal(ssb4d_simulate_to_memory(&p, cnt, f, NULL, NULL, &info, &e), SSB4D_OK);
            assert_int_equal(info.det_oversample, 1);
            char h[2][65];
            ssb_sha256_hex(f, n * sizeof(float), h[0]);
            ssb_sha256_hex(cnt, n * sizeof(uint16_t), h[1]);
            assert_string_equal(h[0], golden[c][0]);
            assert_string_equal(h[1], golden[c][1]);
            free(cnt);
            free(f);
        }
}

/* The auto rule: the smallest odd S with S·L >= 1.3·F. F against closed forms, S = 1 for every
 * preset, S > 1 for strongly defocused probes in small windows, and the parameter checks. */
static void test_oversample_auto(void **state)
{
    (void)state;
    const char *presets[4] = {"tiny", "small", "medium", "reference"};
    ssb4d_sim_params p, q;
    ssb4d_sim_info info;
    ssb4d_err e;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ssb4d_sim_params_preset(&p, presets[i], NULL), SSB4D_OK);
        assert_int_equal(p.det_oversample, 0); /* auto */
        assert_int_equal(ssb4d_sim_describe(&p, &info, &e), SSB4D_OK);
        /* C10 −10 nm, C12 2 nm: F = 2·α·(|C10| + |C12|) + 4 Å = 2·0.025·120 + 4 = 10 Å */
        assert_true(fabs(info.probe_footprint_A - 10.0) < 1e-9);
        assert_int_equal(info.det_oversample, 1);
        assert_true(info.sim_window_A == info.window_A);
    }
    /* closed forms: pure defocus (at the entrance or the exit surface, whichever is farther from
     * focus); defocus and spherical aberration of opposite signs, whose
     * largest ray sits inside the aperture (r(α) = C10·α + C30·α³, |r| largest at
     * α² = −C10/(3·C30)); a thick specimen (C10 + t at the exit); a tilted beam (+ |τ|·t) */
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
    memset(&p.ab, 0, sizeof p.ab);
    p.ab.C_nm[SSB4D_C10] = 20.0; /* largest at the exit of the one-cell crystal: C10 + t */
    assert_int_equal(ssb4d_sim_describe(&p, &info, &e), SSB4D_OK);
    assert_true(fabs(info.probe_footprint_A - (2 * 0.025 * (200 + 3.905) + 4)) < 1e-9);
    p.ab.C_nm[SSB4D_C10] = -20.0; /* largest at the entrance */
    assert_int_equal(ssb4d_sim_describe(&p, &info, &e), SSB4D_OK);
    assert_true(fabs(info.probe_footprint_A - (2 * 0.025 * 200 + 4)) < 1e-9);
    p.ab.C_nm[SSB4D_C10] = -10.0;
    p.ab.C_nm[SSB4D_C30] = 2e4; /* 20 µm */
    assert_int_equal(ssb4d_sim_describe(&p, &info, &e), SSB4D_OK);
    double a2 = 100.0 / (3 * 2e5), a1 = sqrt(a2), r_in = fabs(-100 * a1 + 2e5 * a1 * a2);
    double r_rim = fabs(-100 * 0.025 + 2e5 * pow(0.025, 3));
    assert_true(r_in > r_rim);
    assert_true(fabs(info.probe_footprint_A - (2 * r_in + 4)) < 2e-3);
    memset(&p.ab, 0, sizeof p.ab);
    p.cells_z = 50;
    assert_int_equal(ssb4d_sim_describe(&p, &info, &e), SSB4D_OK);
    assert_true(fabs(info.probe_footprint_A - (2 * 0.025 * 50 * 3.905 + 4)) < 1e-9);
    p.tilt_mrad[0] = 6;
    p.tilt_mrad[1] = 8;
    assert_int_equal(ssb4d_sim_describe(&p, &info, &e), SSB4D_OK);
    assert_true(fabs(info.probe_footprint_A - (2 * 0.025 * 195.25 + 0.010 * 195.25 + 4)) < 1e-9);
    /* the case: Au, 300 kV, 25 mrad, C10 = 27.7 nm, window 3 cells (12.2 Å), 64² detector:
     * F = 2·0.025·(277 + 4.078) + 4 = 18.05 Å (at the exit), 1.3·F = 23.5 Å, so S = 2 → 3 (odd),
     * and the grid grows to 384 from 128 */
    assert_int_equal(ssb4d_sim_params_preset(&p, "small", NULL), SSB4D_OK);
    p.specimen = SSB4D_SPECIMEN_AU;
    p.window_cells = 3;
    memset(&p.ab, 0, sizeof p.ab);
    p.ab.C_nm[SSB4D_C10] = 27.7;
    assert_int_equal(ssb4d_sim_describe(&p, &info, &e), SSB4D_OK);
    fprintf(stderr, "Au, C10 27.7 nm, window 12.2 A: footprint %.2f A, auto S %d, grid %d, "
            "window %.1f A\n", info.probe_footprint_A, info.det_oversample, info.grid,
            info.sim_window_A);
    assert_int_equal(info.det_oversample, 3);
    assert_true(fabs(info.sim_window_A - 3 * 3 * 4.078) < 1e-9);
    assert_true(info.grid >= 3 * 2 * 64);
    double mrad1 = info.det_sampling_mrad, bf1 = info.bf_radius_px;
    q = p;
    q.det_oversample = 1;
    assert_int_equal(ssb4d_sim_describe(&q, &info, &e), SSB4D_OK);
    assert_true(info.det_sampling_mrad == mrad1 && info.bf_radius_px == bf1); /* S changes neither */
    assert_int_equal(info.grid, 128);
    /* 35 mrad, 40 nm, a window that puts the BF disk at 0.85 of a 96-pixel detector's half-width
     * (23 Å: 6 SrTiO3 cells): F = 32 Å, S = 3 */
    assert_int_equal(ssb4d_sim_params_preset(&p, "small", NULL), SSB4D_OK);
    p.semiangle_mrad = 35;
    p.window_cells = 6;
    p.det = 96;
    memset(&p.ab, 0, sizeof p.ab);
    p.ab.C_nm[SSB4D_C10] = 40;
    assert_int_equal(ssb4d_sim_describe(&p, &info, &e), SSB4D_OK);
    assert_int_equal(info.det_oversample, 3);
    p.ab.C_nm[SSB4D_C10] = 120; /* F = 88 Å in 23.4 Å: S = 5 */
    assert_int_equal(ssb4d_sim_describe(&p, &info, &e), SSB4D_OK);
    assert_int_equal(info.det_oversample, 5);
    /* checks: even, negative and too large S; a grid smaller than the oversampled detector */
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
    const int bad[4] = {2, 4, -1, SIM_OVERSAMPLE_MAX + 2};
    for (int i = 0; i < 4; i++) {
        q = p;
        q.det_oversample = bad[i];
        assert_int_equal(ssb4d_sim_describe(&q, NULL, &e), SSB4D_EINVAL);
        assert_non_null(strstr(e.msg, "det-oversample"));
    }
    q = p;
    q.det_oversample = 3;
    q.grid = 3 * 48 - 2;
    assert_int_equal(ssb4d_sim_describe(&q, NULL, &e), SSB4D_EINVAL);
    q.grid = 3 * 126;
    assert_int_equal(ssb4d_sim_describe(&q, &info, &e), SSB4D_OK);
    assert_int_equal(info.grid, 378);
    /* an absurd footprint is refused with its reason, not a huge grid */
    q = p;
    q.ab.C_nm[SSB4D_C10] = 1e6;
    assert_int_equal(ssb4d_sim_describe(&q, NULL, &e), SSB4D_EINVAL);
    assert_non_null(strstr(e.msg, "footprint"));
}

/* A probe that fits any window (no aberrations: F = 4.2 Å in 15.6 Å): the oversampled pattern
 * equals the point-sampled one up to what the pixel integration changes.
 *  - The BF disk's total (pixels within r_bf + 1.5) agrees within 1e-3 (measured 3e-4).
 *  - The interior (within r_bf − 1.5) is lower by a uniform factor: the probe is normalised to
 *    Σ|P|² = 1, and the soft aperture's edge, one native pixel wide, holds ∫A² = w/3 instead of
 *    w/2 of a hard edge, so Σ A² = π r² − π r·w/3 (pixels, w = 1/S) and the interior level is
 *    1/ΣA²: I_S/I_1 = (r − 1/3)/(r − 1/(3S)) = 0.98873 for r = 19.83 and S = 3 (measured
 *    0.98883, asserted within 1e-3).
 *  - After that factor, every interior pixel agrees within 5e-3 (measured 2.8e-3; S = 3 against
 *    S = 5 after their factor: 2.5e-4): the rest is the point sample against the pixel's mean
 *    near the edges of the diffracted disks that cross the BF disk.
 * The grids are 120·S, so that both runs have the same antialias band and real-space sampling.
 * Alignment: at a column the crystal is mirror-symmetric about the probe, so the pattern is
 * symmetric about the zero-frequency pixel (D/2, D/2) under row and column mirrors and the
 * transpose: within 1e-5 of the peak for S = 1, 3, 5 (measured 8e-7, 4e-7, 4e-7). An even S
 * binned the same way is half a native pixel off centre: with the odd-S check removed, S = 2
 * and 4 broke the symmetry by 45 % and 23 % of the peak. */
static void test_oversample_fits(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
    memset(&p.ab, 0, sizeof p.ab);
    p.scan_n = 4;
    p.scan_cells = 1;
    p.threads = 2;
    ssb4d_sim_info i1, i3;
    p.det_oversample = 1;
    p.grid = 120;
    float *a = intensities(&p, &i1);
    p.det_oversample = 3;
    p.grid = 360;
    float *b = intensities(&p, &i3);
    assert_int_equal(i1.det_oversample, 1);
    assert_int_equal(i3.det_oversample, 3);
    assert_true(fabs(i1.antialias_inv_A - i3.antialias_inv_A) < 1e-12);
    assert_true(i3.det_sampling_mrad == i1.det_sampling_mrad && i3.bf_radius_px == i1.bf_radius_px);
    int D = p.det;
    size_t np = (size_t)p.scan_n * p.scan_n, DD = (size_t)D * D;
    double r = i1.bf_radius_px, bf1 = 0, bf3 = 0, in1 = 0, in3 = 0;
    for (size_t q = 0; q < np; q++)
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) {
                double rr = hypot(i - D / 2, j - D / 2);
                size_t k = q * DD + (size_t)i * D + j;
                if (rr <= r + 1.5) {
                    bf1 += a[k];
                    bf3 += b[k];
                }
                if (rr <= r - 1.5) {
                    in1 += a[k];
                    in3 += b[k];
                }
            }
    double level = in3 / in1, predicted = (r - 1.0 / 3) / (r - 1.0 / 9), worst = 0.0;
    for (size_t q = 0; q < np; q++)
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++)
                if (hypot(i - D / 2, j - D / 2) <= r - 1.5) {
                    size_t k = q * DD + (size_t)i * D + j;
                    double d = fabs(level * a[k] - b[k]) / b[k];
                    worst = d > worst ? d : worst;
                }
    fprintf(stderr, "C10 = 0, S 1 vs 3: BF disk sum %.6f vs %.6f (rel %.2e); interior level %.5f "
            "(predicted %.5f), then max rel diff %.2e; detector sums %.6f vs %.6f\n", bf1 / np,
            bf3 / np, fabs(bf3 - bf1) / bf1, level, predicted, worst, i1.mean_sum_detector,
            i3.mean_sum_detector);
    assert_true(fabs(bf3 - bf1) / bf1 < 1e-3);
    assert_true(fabs(level - predicted) < 1e-3);
    assert_true(worst < 5e-3);
    assert_true(fabs(i3.mean_sum_full - 1.0) < 1e-3 && fabs(i3.mean_sum_detector - i1.mean_sum_detector) < 1e-3);
    free(a);
    free(b);
    /* alignment: the symmetric pattern of the probe on the Sr column */
    float *pat = malloc(DD * sizeof(float));
    assert_non_null(pat);
    for (int S = 1; S <= 5; S += 2) {
        p.det_oversample = S;
        p.grid = 0;
        double sums[2], worst_sym = 0.0, peak = 0.0;
        ssb4d_err e;
        assert_int_equal(sim_pattern_at(&p, 0.0, 0.0, pat, sums, &e), SSB4D_OK);
        for (int i = 1; i < D; i++)
            for (int j = 1; j < D; j++) {
                float v = pat[i * D + j];
                double d = fmax(fabs(v - pat[(D - i) * D + j]),
                                fmax(fabs(v - pat[i * D + D - j]), fabs(v - pat[j * D + i])));
                worst_sym = d > worst_sym ? d : worst_sym;
                peak = v > peak ? v : peak;
            }
        fprintf(stderr, "S %d: mirror asymmetry about (D/2, D/2) %.2e of the peak\n", S,
                worst_sym / peak);
        assert_true(worst_sym < 1e-5 * peak);
    }
    free(pat);
}

/* The oversampled window gives the same counts for any thread count, block size and reuse bound,
 * and its reuse (the lattice is the same, the window S·W cells: the exact ramp works in units
 * of 1/(S·W·N)) equals direct simulations at the unreduced positions. A strongly defocused probe
 * in a small window (auto S = 3), at 0° and 90°. */
static void defocused_params(ssb4d_sim_params *p)
{
    assert_int_equal(ssb4d_sim_params_preset(p, "tiny", NULL), SSB4D_OK);
    p->window_cells = 2; /* L = 7.81 Å, BF radius 9.9 px */
    p->det = 24;
    memset(&p->ab, 0, sizeof p->ab);
    p->ab.C_nm[SSB4D_C10] = -20.0; /* F = 14 Å */
    p->ab.C_nm[SSB4D_C12] = 1.0;
    p->ab.phi_deg[SSB4D_C12] = 30.0;
    p->scan_n = 6;
    p->scan_cells = 2; /* gcd 2: 3² distinct patterns */
    p->seed = 11;
}

static void test_oversample_determinism(void **state)
{
    (void)state;
    const double rots[2] = {0.0, 90.0};
    for (int r = 0; r < 2; r++) {
        ssb4d_sim_params p;
        defocused_params(&p);
        p.scan_rotation_deg = rots[r];
        char h1[65], h2[65], h3[65];
        ssb4d_sim_info info;
        p.threads = 1;
        hash_counts(&p, h1, &info);
        assert_int_equal(info.det_oversample, 3);
        assert_int_equal(info.n_patterns, 9);
        p.threads = 2;
        hash_counts(&p, h2, &info);
        p.block_bytes = 1;
        p.reuse_bytes = 1;
        hash_counts(&p, h3, &info);
        fprintf(stderr, "S 3, rotation %g: counts %.16s (1 thread) %.16s (2) %.16s (2, 1-row blocks, "
                "nothing kept: %zu patterns)\n", rots[r], h1, h2, h3, info.n_patterns);
        assert_string_equal(h1, h2);
        assert_string_equal(h1, h3);
        /* reused patterns against direct simulations at the unreduced positions */
        size_t N = 6, DD = 24 * 24;
        p.block_bytes = 0;
        p.reuse_bytes = 0;
        float *in = intensities(&p, &info), *d = malloc(DD * sizeof(float));
        assert_non_null(d);
        double c = cos(rots[r] * M_PI / 180.0), sn = sin(rots[r] * M_PI / 180.0), worst = 0.0;
        const size_t pts[3][2] = {{0, 0}, {1, 4}, {5, 3}};
        for (int t = 0; t < 3; t++) {
            size_t i = pts[t][0], j = pts[t][1];
            double x = (double)i * info.scan_step_A, y = (double)j * info.scan_step_A, sums[2];
            ssb4d_err e;
            assert_int_equal(sim_pattern_at(&p, x * c + y * sn, -x * sn + y * c, d, sums, &e), SSB4D_OK);
            double peak = 0.0, dmax = 0.0;
            for (size_t k = 0; k < DD; k++) {
                peak = d[k] > peak ? d[k] : peak;
                double v = fabs((double)in[(i * N + j) * DD + k] - d[k]);
                dmax = v > dmax ? v : dmax;
            }
            worst = dmax / peak > worst ? dmax / peak : worst;
        }
        fprintf(stderr, "S 3, rotation %g: reused vs direct patterns, max |diff| %.2g of the peak\n",
                rots[r], worst);
        assert_true(worst < 1e-5);
        free(in);
        free(d);
    }
}

/* Why it matters: a probe of footprint 14 Å (C10 −20 nm) in a 7.8 Å window wraps around the
 * periodic window at S = 1. The position-dependent part of the BF disk's interior (each pixel's
 * mean over the scan removed; within r_bf − 1.5) differs from S = 5's by 30 % (relative L2),
 * while S = 3 and S = 5, both above the footprint limit, differ by 1.7 % (and S = 5 vs 7 by
 * 0.5 %). The grids are 64·S (one antialias band for all). */
static double fluct_diff(const float *a, const float *b, size_t np, int D, double rmax)
{
    size_t DD = (size_t)D * D;
    double num = 0.0, den = 0.0;
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            if (hypot(i - D / 2, j - D / 2) > rmax)
                continue;
            double ma = 0.0, mb = 0.0;
            for (size_t q = 0; q < np; q++) {
                ma += a[q * DD + (size_t)i * D + j];
                mb += b[q * DD + (size_t)i * D + j];
            }
            ma /= (double)np;
            mb /= (double)np;
            for (size_t q = 0; q < np; q++) {
                double x = a[q * DD + (size_t)i * D + j] - ma, y = b[q * DD + (size_t)i * D + j] - mb;
                num += (x - y) * (x - y);
                den += y * y;
            }
        }
    return sqrt(num / den);
}

static void test_oversample_wrap(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    defocused_params(&p);
    p.ab.C_nm[SSB4D_C12] = 0.0;
    p.scan_n = 4;
    p.scan_cells = 1;
    p.threads = 2;
    float *in[3];
    ssb4d_sim_info info;
    for (int k = 0; k < 3; k++) {
        p.det_oversample = 2 * k + 1;
        p.grid = 64 * p.det_oversample;
        in[k] = intensities(&p, &info);
    }
    size_t np = (size_t)p.scan_n * p.scan_n;
    double rmax = info.bf_radius_px - 1.5;
    double d15 = fluct_diff(in[0], in[2], np, p.det, rmax), d35 = fluct_diff(in[1], in[2], np, p.det, rmax);
    fprintf(stderr, "wrapped probe (F %.1f A, window %.2f A): position-dependent part, relative L2 "
            "difference S 1 vs 5 %.3f, S 3 vs 5 %.4f\n", info.probe_footprint_A, info.window_A, d15, d35);
    assert_true(d15 > 0.15);
    assert_true(d35 < 0.04);
    assert_true(d15 > 8 * d35);
    for (int k = 0; k < 3; k++)
        free(in[k]);
}

static void test_poisson(void **state)
{
    (void)state;
    const double lams[] = {0.01, 0.5, 5.0, 50.0, 500.0};
    const size_t n = 400000;
    for (int t = 0; t < 5; t++) {
        double lam = lams[t];
        sim_rng r;
        sim_rng_seed(&r, 12345, (uint64_t)t);
        double s = 0, s2 = 0;
        for (size_t i = 0; i < n; i++) {
            double k = (double)sim_poisson(&r, lam);
            s += k;
            s2 += k * k;
        }
        double mean = s / n, var = s2 / n - mean * mean;
        double sd_mean = sqrt(lam / n), sd_var = sqrt((lam + 2 * lam * lam) / n);
        fprintf(stderr, "poisson lambda %g: mean %.6g (%.2f sd), var %.6g (%.2f sd)\n", lam, mean,
                (mean - lam) / sd_mean, var, (var - lam) / sd_var);
        assert_true(fabs(mean - lam) < 5 * sd_mean);
        assert_true(fabs(var - lam) < 5 * sd_var);
    }
    /* the sampler is a deterministic function of (seed, index) */
    sim_rng a, b;
    sim_rng_seed(&a, 7, 99);
    sim_rng_seed(&b, 7, 99);
    for (int i = 0; i < 100; i++)
        assert_int_equal(sim_poisson(&a, 3.0), sim_poisson(&b, 3.0));
    sim_rng_seed(&b, 7, 100);
    int same = 0;
    for (int i = 0; i < 64; i++)
        same += sim_rng_next(&a) == sim_rng_next(&b);
    assert_int_equal(same, 0);
}

static void test_normalisation(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    small_params(&p);
    p.ab.C_nm[SSB4D_C21] = 0;
    size_t npos = (size_t)p.scan_n * p.scan_n, dd = (size_t)p.det * p.det;
    float *inten = malloc(npos * dd * sizeof(float));
    assert_non_null(inten);
    ssb4d_sim_info info;
    ssb4d_err e;
    assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, inten, NULL, NULL, &info, &e), SSB4D_OK);
    fprintf(stderr, "pattern sums over the grid: mean %.6f, min %.6f, max %.6f; detector %.6f\n",
            info.mean_sum_full, info.min_sum_full, info.max_sum_full, info.mean_sum_detector);
    assert_true(info.min_sum_full > 0.99 && info.max_sum_full < 1.0001);
    assert_true(info.mean_sum_detector <= info.mean_sum_full && info.mean_sum_detector > 0.98);
    /* the zero frequency is at (D/2, D/2): the BF centroid of the mean pattern */
    double sr = 0, sc = 0, s = 0;
    for (size_t q = 0; q < npos; q++)
        for (int i = 0; i < p.det; i++)
            for (int j = 0; j < p.det; j++) {
                double v = inten[q * dd + (size_t)i * p.det + j];
                s += v;
                sr += v * i;
                sc += v * j;
            }
    assert_true(fabs(sr / s - p.det / 2) < 0.05);
    assert_true(fabs(sc / s - p.det / 2) < 0.05);
    free(inten);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    return b;
}

static void test_streaming_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/ssb4d_test_sim_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], ph[256], phbl[256], js[256];
    snprintf(path, sizeof path, "%s/s.npy", dir);
    snprintf(ph, sizeof ph, "%s/s_phase.npy", dir);
    snprintf(phbl, sizeof phbl, "%s/s_phase_bandlimited.npy", dir);
    snprintf(js, sizeof js, "%s/s.json", dir);
    ssb4d_sim_params p;
    small_params(&p);
    p.scan_n = 40; /* 40 rows of 40×32×32×2 B = 80 KiB: several blocks? one; still streamed */
    p.det = 40;
    p.window_cells = 4;
    size_t npos = (size_t)p.scan_n * p.scan_n, dd = (size_t)p.det * p.det;
    uint16_t *mem = malloc(npos * dd * sizeof(uint16_t));
    float *phm = malloc(npos * sizeof(float)), *phblm = malloc(npos * sizeof(float));
    ssb4d_err e;
    ssb4d_sim_info info;
    assert_int_equal(ssb4d_simulate_to_memory(&p, mem, NULL, phm, phblm, &info, &e), SSB4D_OK);
    p.threads = 2;
    assert_int_equal(ssb4d_simulate(&p, path, 0, "ssb4d simulate test", &info, &e), SSB4D_OK);
    ssb4d_npy_info ni;
    void *data = NULL;
    assert_int_equal(ssb_npy_load(path, &ni, &data, &e), SSB4D_OK);
    assert_string_equal(ni.descr, "<u2");
    assert_int_equal(ni.ndim, 4);
    assert_int_equal(ni.fortran_order, 0);
    assert_int_equal(ni.shape[0], p.scan_n);
    assert_int_equal(ni.shape[1], p.scan_n);
    assert_int_equal(ni.shape[2], p.det);
    assert_int_equal(ni.shape[3], p.det);
    assert_memory_equal(data, mem, npos * dd * sizeof(uint16_t));
    free(data);
    assert_int_equal(ssb_npy_load(ph, &ni, &data, &e), SSB4D_OK);
    assert_string_equal(ni.descr, "<f4");
    assert_int_equal(ni.ndim, 2);
    assert_memory_equal(data, phm, npos * sizeof(float));
    free(data);
    assert_int_equal(ssb_npy_load(phbl, &ni, &data, &e), SSB4D_OK);
    assert_memory_equal(data, phblm, npos * sizeof(float));
    free(data);
    /* sidecar: the shared layout */
    char *text = slurp(js);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    cJSON *o = cJSON_GetObjectItem(root, "optics");
    assert_true(cJSON_GetObjectItem(o, "voltage_kV")->valuedouble == p.kv);
    assert_true(cJSON_GetObjectItem(o, "semiangle_mrad")->valuedouble == p.semiangle_mrad);
    cJSON *sc = cJSON_GetObjectItem(root, "scan");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(sc, "step_A")), 2);
    assert_true(cJSON_GetObjectItem(sc, "rotation_deg")->valuedouble == 0.0);
    cJSON *det = cJSON_GetObjectItem(root, "detector");
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(det, "zero_frequency_pixel"), 0)->valueint,
                     p.det / 2);
    assert_true(fabs(cJSON_GetArrayItem(cJSON_GetObjectItem(det, "sampling_mrad"), 1)->valuedouble -
                     info.det_sampling_mrad) < 1e-12);
    cJSON *ab = cJSON_GetObjectItem(root, "aberrations_true");
    assert_true(cJSON_GetObjectItem(ab, "C10_nm")->valuedouble == p.ab.C_nm[SSB4D_C10]);
    assert_true(cJSON_GetObjectItem(ab, "C21_nm")->valuedouble == 20.0);
    assert_true(cJSON_GetObjectItem(ab, "phi21_deg")->valuedouble == 40.0);
    assert_null(cJSON_GetObjectItem(ab, "C30_nm"));
    assert_true(fabs(cJSON_GetObjectItem(ab, "expected_recovered_C10_nm_at_midplane")->valuedouble -
                     (p.ab.C_nm[SSB4D_C10] + 2 * 0.3905 / 2)) < 1e-9);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "files"), "counts")->valuestring,
                        "s.npy");
    assert_non_null(cJSON_GetObjectItem(root, "generator"));
    cJSON_Delete(root);
    /* refuses to overwrite; --force overwrites */
    assert_int_equal(ssb4d_simulate(&p, path, 0, NULL, NULL, &e), SSB4D_EINVAL);
    assert_int_equal(ssb4d_simulate(&p, path, 1, NULL, NULL, &e), SSB4D_OK);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/missing/x.npy", dir);
    assert_int_equal(ssb4d_simulate(&p, bad, 0, NULL, NULL, &e), SSB4D_EIO);
    unlink(path);
    unlink(ph);
    unlink(phbl);
    unlink(js);
    rmdir(dir);
    free(mem);
    free(phm);
    free(phblm);
}

static int is_local_max(const float *ph, int n, int i, int j)
{
    float v = ph[i * n + j];
    for (int di = -1; di <= 1; di++)
        for (int dj = -1; dj <= 1; dj++) {
            if (!di && !dj)
                continue;
            int a = (i + di + n) % n, b = (j + dj + n) % n;
            if (ph[a * n + b] >= v)
                return 0;
        }
    return 1;
}

static void test_phase_columns(void **state)
{
    (void)state;
    for (int sp = 0; sp < 2; sp++) {
        ssb4d_sim_params p;
        assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
        p.specimen = sp ? SSB4D_SPECIMEN_AU : SSB4D_SPECIMEN_SRTIO3;
        p.scan_n = 40;
        p.scan_cells = 1;
        int n = p.scan_n, h = n / 2;
        float *ph = malloc((size_t)n * n * sizeof(float)), *ph3 = malloc((size_t)n * n * sizeof(float));
        ssb4d_err e;
        assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, NULL, ph, NULL, NULL, &e), SSB4D_OK);
        int cols[4][2] = {{0, 0}, {h, h}, {h, 0}, {0, h}};
        for (int c = 0; c < 4; c++)
            assert_true(is_local_max(ph, n, cols[c][0], cols[c][1]));
        /* the global maximum lies on a column; the interstitial (¼,¼) is low */
        int imax = 0;
        for (int k = 1; k < n * n; k++)
            if (ph[k] > ph[imax])
                imax = k;
        int on_col = 0;
        for (int c = 0; c < 4; c++)
            on_col |= imax == cols[c][0] * n + cols[c][1];
        assert_true(on_col);
        assert_true(ph[(n / 4) * n + n / 4] < 0.5f * ph[imax]);
        if (sp == 0) { /* SrTiO3: Sr and TiO columns above the pure O columns */
            assert_true(ph[0] > ph[h * n]);
            assert_true(ph[h * n + h] > ph[h * n]);
        }
        /* three cells: three times the phase */
        p.cells_z = 3;
        assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, NULL, ph3, NULL, NULL, &e), SSB4D_OK);
        for (int k = 0; k < n * n; k++)
            assert_true(fabs(ph3[k] - 3.0f * ph[k]) < 1e-4f * (1.0f + fabsf(ph3[k])));
        free(ph);
        free(ph3);
    }
}


/* ---- the scan rotation (docs/simulate.md, SPEC §5.1) ------------------------------------------ */

typedef struct {
    ssb4d_geometry g;
    uint16_t *counts;
    float *phase_bl;
    size_t N, D;
} rot_data;

/* A thin SrTiO3 crystal (1 cell) scanned at rotation `deg`: preset tiny (48² detector, C10
 * −10 nm, C12 2 nm at 20°) with a 64² scan over 3 cells. The step (0.18 Å) samples the CoM
 * field's band 2α/λ: at the preset's 0.37 Å the aliased lattice frequencies bias the CoM-curl
 * angle of a rotated scan by up to 3° (measured at dose 1e7: −2.9° at −30°, +1.6° at +30°,
 * −2.8° at 60°; at 0.18 Å: −0.8°, 0.0°, −0.5°). A high dose keeps the comparison off the noise. */
static void rot_simulate(double deg, rot_data *d)
{
    ssb4d_sim_params p;
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
    p.scan_rotation_deg = deg;
    p.scan_n = 64;
    p.dose = 1e6;
    p.threads = 2;
    ssb4d_sim_info info;
    ssb4d_err e;
    d->N = (size_t)p.scan_n;
    d->D = (size_t)p.det;
    d->counts = malloc(d->N * d->N * d->D * d->D * sizeof(uint16_t));
    d->phase_bl = malloc(d->N * d->N * sizeof(float));
    assert_non_null(d->counts);
    assert_non_null(d->phase_bl);
    assert_int_equal(ssb4d_simulate_to_memory(&p, d->counts, NULL, NULL, d->phase_bl, &info, &e),
                     SSB4D_OK);
    memset(&d->g, 0, sizeof d->g);
    d->g.kv = p.kv;
    d->g.semiangle_mrad = p.semiangle_mrad;
    d->g.scan_step_A[0] = d->g.scan_step_A[1] = info.scan_step_A;
    d->g.det_sampling_mrad[0] = d->g.det_sampling_mrad[1] = info.det_sampling_mrad;
    d->g.centre_px[0] = d->g.centre_px[1] = (double)(d->D / 2);
}

static void rot_free(rot_data *d)
{
    free(d->counts);
    free(d->phase_bl);
}

/* The simulator's scan rotation is the rotation ssb4d's reconstruction needs: at the true
 * aberrations the loss is clearly lowest when the geometry says +θ (not −θ, not 0), the mean
 * phase then matches the rotated ground truth, and the calibration's centre-of-mass curl finds
 * θ (mod 180°). Swapping the placement for its transpose (r_det = R(a)·r_scan) makes −θ win:
 * this is the test that pins the convention. */
static void test_rotation_convention(void **state)
{
    (void)state;
    const double theta = 30.0;
    rot_data d;
    rot_simulate(theta, &d);
    size_t shape[4] = {d.N, d.N, d.D, d.D}, npos = d.N * d.N;
    ssb4d_source *src = NULL;
    ssb4d_err e;
    assert_int_equal(ssb4d_source_from_memory(d.counts, SSB4D_U16, shape, &src, &e), SSB4D_OK);

    /* calibration: the CoM curl, rotation not given */
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    cp.kv = d.g.kv;
    cp.semiangle_mrad = d.g.semiangle_mrad;
    cp.scan_step_A[0] = cp.scan_step_A[1] = d.g.scan_step_A[0];
    cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = d.g.det_sampling_mrad[0];
    cp.threads = 2;
    ssb4d_calibration cal;
    assert_int_equal(ssb4d_calibrate(src, &cp, &cal, &e), SSB4D_OK);
    fprintf(stderr, "scan rotation %g: CoM-curl rotation %.3f deg (sigma %.3f, curl ratio %.3f)\n",
            theta, cal.rotation_curl_deg, cal.rotation_sigma_deg, cal.curl_ratio);
    assert_true(cal.rotation_fitted);
    assert_true(fabs(ref_dmod180(cal.rotation_curl_deg, theta)) < 2.0);

    /* G on the calibration's BF pixels (G does not depend on the rotation: SPEC §5.1) */
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    go.threads = 2;
    ssb4d_G *G = NULL;
    assert_int_equal(ssb4d_gbuild(src, &d.g, cal.bf_pix, cal.n_bf, &go, NULL, &G, &e), SSB4D_OK);
    ssb4d_aberrations ab;
    memset(&ab, 0, sizeof ab);
    ab.C_nm[SSB4D_C10] = -10.0 + 0.5 * (0.3905 - 0.3905 / 2); /* the mean plane (docs/simulate.md) */
    ab.C_nm[SSB4D_C12] = 2.0;
    ab.phi_deg[SSB4D_C12] = 20.0;
    ssb4d_ssb_opts so;
    ssb4d_ssb_opts_default(&so);
    so.threads = 2;
    const double rots[3] = {theta, -theta, 0.0};
    double loss[3], corr[3];
    float *mp = malloc(npos * sizeof(float));
    assert_non_null(mp);
    for (int k = 0; k < 3; k++) {
        ssb4d_geometry g = d.g;
        g.rotation_deg = rots[k];
        /* χ is evaluated at the rotated k (the scan frame): the simulator's detector-frame
         * φ12 = 20° is 20° + rotation there */
        ab.phi_deg[SSB4D_C12] = 20.0 + rots[k];
        assert_int_equal(ssb4d_loss(G, &g, &ab, NULL, &so, NULL, &loss[k], mp, &e), SSB4D_OK);
        corr[k] = ref_correlation_f(mp, d.phase_bl, npos);
        fprintf(stderr, "  geometry rotation %+5.1f: loss %.6g, mean phase vs rotated ground "
                "truth r = %.4f\n", rots[k], loss[k], corr[k]);
    }
    assert_true(loss[0] < 0.7 * loss[1]);
    assert_true(loss[0] < 0.7 * loss[2]);
    /* below the unrotated scan's ~0.9: the rotated field is not periodic, so the scan FFT wraps
     * across a seam that the SSB model cannot explain */
    assert_true(corr[0] > 0.8);
    assert_true(corr[0] > corr[1] + 0.3 && corr[0] > corr[2] + 0.3);
    free(mp);
    ssb4d_G_free(G);
    ssb4d_calibration_free(&cal);
    ssb4d_source_close(src);
    rot_free(&d);
}

/* The ground truth and the patterns are placed at the rotated positions. At 90° position (i, j)
 * sits at (j·s, −i·s), which is the unrotated scan's position (j, N − i) moved by a whole
 * scan period (S cells): the same phase and, the crystal being periodic, the same pattern. At 30°
 * the phase equals the projected potential's Fourier series summed here term by term. */
static void test_rotation_positions(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
    p.scan_n = 16;
    p.scan_cells = 2;
    p.det = 32;
    p.window_cells = 3;
    p.threads = 2;
    size_t N = 16, DD = 32 * 32, npos = N * N;
    float *ph0 = malloc(npos * sizeof(float)), *ph90 = malloc(npos * sizeof(float));
    float *in0 = malloc(npos * DD * sizeof(float)), *in90 = malloc(npos * DD * sizeof(float));
    assert_true(ph0 && ph90 && in0 && in90);
    ssb4d_sim_info info;
    ssb4d_err e;
    assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, in0, ph0, NULL, &info, &e), SSB4D_OK);
    p.scan_rotation_deg = 90.0;
    assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, in90, ph90, NULL, &info, &e), SSB4D_OK);
    double dph = 0.0, dmax = 0.0, imax = 0.0;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < N; j++) {
            size_t a = i * N + j, b = j * N + (N - i) % N;
            double d = fabs((double)ph90[a] - ph0[b]);
            dph = d > dph ? d : dph;
            for (size_t k = 0; k < DD; k++) {
                double v = fabs((double)in90[a * DD + k] - in0[b * DD + k]);
                dmax = v > dmax ? v : dmax;
                imax = in0[b * DD + k] > imax ? in0[b * DD + k] : imax;
            }
        }
    fprintf(stderr, "rotation 90: phase max |diff| %.3g rad, pattern max |diff| %.3g (of %.3g)\n",
            dph, dmax, imax);
    assert_true(dph < 1e-5);
    assert_true(dmax < 1e-5 * imax);

    /* 30°: the rotated ground truth against the Fourier series summed here, point by point */
    p.scan_rotation_deg = 30.0;
    assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, NULL, ph90, NULL, &info, &e), SSB4D_OK);
    const sim_crystal *cr = sim_crystal_get(p.specimen);
    double a = cr->a_A, gmax = info.antialias_inv_A, s = info.scan_step_A;
    double c30 = cos(M_PI / 6), s30 = sin(M_PI / 6), worst = 0.0;
    int hmax = (int)floor(gmax * a);
    const size_t pts[4][2] = {{0, 0}, {3, 5}, {15, 1}, {9, 14}};
    for (int t = 0; t < 4; t++) {
        double x = pts[t][0] * s, y = pts[t][1] * s;
        double rr = x * c30 + y * s30, rc = -x * s30 + y * c30, v = 0.0;
        for (int h = -hmax; h <= hmax; h++)
            for (int k = -hmax; k <= hmax; k++) {
                if (((double)h * h + (double)k * k) / (a * a) > gmax * gmax * (1 + 1e-12))
                    continue;
                double cf[2];
                sim_layer_coeff(cr, -1, h, k, cf);
                double ph = 2.0 * M_PI * (h * rr + k * rc) / a;
                v += info.sigma * (cf[0] * cos(ph) - cf[1] * sin(ph));
            }
        double d = fabs(v - ph90[pts[t][0] * N + pts[t][1]]);
        worst = d > worst ? d : worst;
    }
    fprintf(stderr, "rotation 30: ground truth vs direct Fourier sum, max |diff| %.3g rad\n", worst);
    assert_true(worst < 1e-5);
    free(ph0);
    free(ph90);
    free(in0);
    free(in90);
}

static void test_bad_params(void **state)
{
    (void)state;
    ssb4d_sim_params p, q;
    ssb4d_err e;
    assert_int_equal(ssb4d_sim_params_preset(&p, "nonsense", &e), SSB4D_EINVAL);
    assert_int_equal(ssb4d_sim_params_preset(&p, NULL, &e), SSB4D_OK);
    assert_int_equal(p.scan_n, 128);
    assert_int_equal(ssb4d_sim_params_preset(&p, "reference", &e), SSB4D_OK);
    assert_int_equal(p.scan_n, 512);
    assert_int_equal(p.det, 192);
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", &e), SSB4D_OK);
    assert_int_equal(ssb4d_sim_describe(&p, NULL, &e), SSB4D_OK);
#define BAD(stmt)                                                                          \
    do {                                                                                   \
        q = p;                                                                             \
        stmt;                                                                              \
        assert_int_equal(ssb4d_sim_describe(&q, NULL, &e), SSB4D_EINVAL);                  \
        assert_int_equal(ssb4d_simulate_to_memory(&q, NULL, NULL, NULL, NULL, NULL, &e),   \
                         SSB4D_EINVAL);                                                    \
        assert_true(strlen(e.msg) > 0);                                                    \
    } while (0)
    BAD(q.semiangle_mrad = 0);
    BAD(q.semiangle_mrad = -3);
    BAD(q.semiangle_mrad = NAN);
    BAD(q.kv = 0);
    BAD(q.dose = 0);
    BAD(q.dose = -1);
    BAD(q.scan_n = 1);
    BAD(q.det = 4);
    BAD(q.det = 100000);
    BAD(q.scan_cells = 0);
    BAD(q.window_cells = 0);
    BAD(q.cells_z = 0);
    BAD(q.specimen = (ssb4d_specimen)7);
    BAD(q.grid = 40);               /* smaller than the detector */
    BAD(q.grid = 48);               /* the aperture exceeds the antialias band */
    BAD(q.scan_n = 100000);
    BAD(q.ab.C_nm[SSB4D_C30] = INFINITY);
    BAD(q.tilt_mrad[1] = 1e4);
    BAD(q.scan_rotation_deg = NAN);
    BAD(q.scan_rotation_deg = INFINITY);
    BAD(q.scan_rotation_deg = -1.5e4);
#undef BAD
}

static void test_cli_errors(void **state)
{
    (void)state;
    const char *bin = getenv("SSB4D_BIN");
#ifdef SSB4D_BIN
    if (!bin)
        bin = SSB4D_BIN;
#endif
    if (!bin || access(bin, X_OK) != 0)
        skip();
    const char *bad[] = {"--preset nope", "--specimen si", "--semiangle 0", "--kv -5",
                         "--dose 0", "--scan 1", "--detector 4", "--frobnicate",
                         "--scan-rotation nan", "--scan-rotation inf", "--scan-rotation 2e4",
                         "--scan-rotation 30deg", "--scan-rotation", "--det-oversample 2",
                         "--det-oversample 0", "--det-oversample -3", "--det-oversample 65",
                         "--det-oversample three", "--det-oversample 3 --grid 100"};
    char cmd[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s simulate %s -o /tmp/ssb4d_test_sim_never.npy 2>/dev/null", bin,
                 bad[i]);
        int rc = system(cmd);
        assert_true(WIFEXITED(rc));
        assert_int_equal(WEXITSTATUS(rc), 2);
    }
    snprintf(cmd, sizeof cmd, "%s simulate --help | grep -q -- --scan-rotation", bin);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    snprintf(cmd, sizeof cmd, "%s simulate --help | grep -q -- '--det-oversample S|auto'", bin);
    rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    /* the rotation reaches the sidecar, where ssb4d reconstruct reads it */
    char dir[] = "/tmp/ssb4d_test_sim_cli_XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "%s simulate --preset tiny --scan 8 --scan-rotation -12.5 --quiet -o %s/r.npy",
             bin, dir);
    rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    char js[300];
    snprintf(js, sizeof js, "%s/r.json", dir);
    char *text = slurp(js);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    cJSON *sc = cJSON_GetObjectItem(root, "scan");
    assert_true(cJSON_GetObjectItem(sc, "rotation_deg")->valuedouble == -12.5);
    assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "detector"), "rotation_vs_scan_deg")
                    ->valuedouble == -12.5);
    double ur = cJSON_GetArrayItem(cJSON_GetObjectItem(sc, "scan_row_unit_vector_in_detector_frame"), 1)
                    ->valuedouble;
    assert_true(fabs(ur - sin(12.5 * M_PI / 180)) < 1e-12); /* (cos θ, −sin θ), θ = −12.5° */
    /* the detector oversampling the run used: auto picked 1 for tiny */
    cJSON *det = cJSON_GetObjectItem(root, "detector");
    assert_int_equal(cJSON_GetObjectItem(det, "det_oversample")->valueint, 1);
    assert_non_null(strstr(cJSON_GetObjectItem(det, "det_oversample_rule")->valuestring, "auto"));
    assert_true(cJSON_GetObjectItem(det, "probe_footprint_A")->valuedouble == 10.0);
    double mrad1 = cJSON_GetArrayItem(cJSON_GetObjectItem(det, "sampling_mrad"), 0)->valuedouble;
    cJSON_Delete(root);
    /* a given S: recorded, the simulated window is S·W cells, the detector sampling unchanged */
    snprintf(cmd, sizeof cmd, "%s simulate --preset tiny --scan 4 --det-oversample 3 --quiet -o %s/o.npy",
             bin, dir);
    rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    snprintf(js, sizeof js, "%s/o.json", dir);
    text = slurp(js);
    root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    det = cJSON_GetObjectItem(root, "detector");
    assert_int_equal(cJSON_GetObjectItem(det, "det_oversample")->valueint, 3);
    assert_string_equal(cJSON_GetObjectItem(det, "det_oversample_rule")->valuestring, "given");
    assert_true(cJSON_GetArrayItem(cJSON_GetObjectItem(det, "sampling_mrad"), 0)->valuedouble == mrad1);
    cJSON *sp = cJSON_GetObjectItem(root, "specimen");
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(sp, "simulation_window_unit_cells"), 0)
                         ->valueint, 12);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(sp, "gpts"), 0)->valueint, 360);
    cJSON_Delete(root);
    const char *sfx[4] = {".npy", ".json", "_phase.npy", "_phase_bandlimited.npy"};
    for (int i = 0; i < 4; i++) {
        snprintf(js, sizeof js, "%s/r%s", dir, sfx[i]);
        assert_int_equal(unlink(js), 0);
        snprintf(js, sizeof js, "%s/o%s", dir, sfx[i]);
        assert_int_equal(unlink(js), 0);
    }
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a1_convention),   cmocka_unit_test(test_a2_convention),
        cmocka_unit_test(test_determinism),     cmocka_unit_test(test_reuse_matches_direct),
        cmocka_unit_test(test_oversample_identity), cmocka_unit_test(test_oversample_auto),
        cmocka_unit_test(test_oversample_fits), cmocka_unit_test(test_oversample_determinism),
        cmocka_unit_test(test_oversample_wrap),
        cmocka_unit_test(test_poisson),         cmocka_unit_test(test_normalisation),
        cmocka_unit_test(test_streaming_file),  cmocka_unit_test(test_phase_columns),
        cmocka_unit_test(test_rotation_convention),
        cmocka_unit_test(test_rotation_positions),
        cmocka_unit_test(test_bad_params),      cmocka_unit_test(test_cli_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
