/* test_refine.c — the multislice refinement (src/refine/, SPEC §13, docs/refine.md):
 * 1. the analytic gradients against central finite differences, in float64 (the model's source
 *    compiled for double), for object pixels and every global parameter, with a rotated,
 *    mirrored geometry and an off-grid BF centre;
 * 2. the float32 forward model against the simulator's patterns (same crystal, probe, tilt,
 *    S = 1, grid = detector);
 * 3. the scan's rotation and the detector's handedness (the simulator's scan_basis, det_flip);
 * 4. the same bits for 1 and 2 threads;
 * 5. bad input refused in one line.
 * The recovery of known parameters is test_refine_recovery.c (slow). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fixture.h"
#include "refine_case.h"
#include "refine/refine.h"
#include "sim/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the model in float64 -------------------------------------------------------------------- */
#define RR double
#define FX(name) fftw_##name
#define MC(name) name##_d
#define RMODEL_LOCK() ((void)0)
#define RMODEL_UNLOCK() ((void)0)
#include "refine/model_core.inc"

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

typedef struct {
    rmodel_d m;
    rwork_d w;
    refine_geo geo;
    double th[RP_N];
    double *obj[3]; /* complex, Or × Oc */
    size_t Oc;
    float cnt[24 * 24];
    unsigned char valid[24 * 24];
    double s0, s1;
    int amplitude;
} gcase;

static double gloss(gcase *c, double *gt, double *g)
{
    rmodel_set_d(&c->m, &c->geo, c->th);
    double *o[3];
    for (int s = 0; s < c->m.ns; s++)
        o[s] = c->obj[s] + 2 * (3 * c->Oc + 2); /* the crop's corner (3, 2) */
    return rmodel_position_d(&c->m, o, c->Oc, c->s0, c->s1, c->cnt, c->valid, 5000.0, c->amplitude, &c->w, gt, g,
                             NULL, NULL, NULL);
}

static void check_gradients(int amplitude)
{
    gcase c;
    memset(&c, 0, sizeof c);
    int nr = 24, nc = 24, ns = 3;
    assert_int_equal(rmodel_init_d(&c.m, nr, nc, ns), 0);
    assert_int_equal(rwork_init_d(&c.w, &c.m), 0);
    c.amplitude = amplitude;
    c.geo.lambda = ssb4d_wavelength_A(300);
    c.geo.semiangle_mrad = 25;
    c.geo.dk[0] = 2.1e-3 / c.geo.lambda;
    c.geo.dk[1] = 2.0e-3 / c.geo.lambda;
    c.geo.ang[0] = c.geo.dk[0] * c.geo.lambda;
    c.geo.ang[1] = c.geo.dk[1] * c.geo.lambda;
    c.geo.delta[0] = 0.3, c.geo.delta[1] = -0.2;
    c.geo.rotation_deg = 23.0;
    c.geo.flip = 1;
    c.geo.ab.C_nm[SSB4D_C30] = 1000.0; /* a fixed higher order on the side */
    double th[RP_N] = {-40.0, 15.0, 0.4, 2e-3, -1.5e-3, 12.0};
    memcpy(c.th, th, sizeof th);
    c.Oc = 30;
    uint64_t seed = 7;
    for (int s = 0; s < ns; s++) {
        c.obj[s] = malloc(2 * 30 * c.Oc * sizeof(double));
        for (size_t q = 0; q < 30 * c.Oc; q++) {
            double ph = 0.6 * (urand(&seed) - 0.5), a = 1.0 - 0.1 * urand(&seed);
            c.obj[s][2 * q] = a * cos(ph);
            c.obj[s][2 * q + 1] = a * sin(ph);
        }
    }
    c.s0 = 12.37, c.s1 = 11.81;
    /* counts: a Poisson-ish draw around the model at a perturbed object */
    for (int q = 0; q < nr * nc; q++) {
        c.valid[q] = (q % 17) != 3;
        c.cnt[q] = (float)floor(40.0 * urand(&seed) * urand(&seed));
    }
    double *gt = malloc(2 * (size_t)ns * nr * nc * sizeof(double)), g[RP_N] = {0};
    gloss(&c, gt, g);
    /* object pixels: ∂L/∂Re t, ∂L/∂Im t */
    int pix[3][3] = {{0, 10, 12}, {1, 5, 17}, {2, 13, 9}};
    for (int k = 0; k < 3; k++) {
        int s = pix[k][0], i = pix[k][1], j = pix[k][2];
        double *v = c.obj[s] + 2 * ((3 + i) * c.Oc + 2 + j);
        for (int part = 0; part < 2; part++) {
            double h = 1e-6, keep = v[part];
            v[part] = keep + h;
            double Lp = gloss(&c, NULL, NULL);
            v[part] = keep - h;
            double Lm = gloss(&c, NULL, NULL);
            v[part] = keep;
            double fd = (Lp - Lm) / (2 * h), an = gt[2 * ((size_t)s * nr * nc + (size_t)i * nc + j) + part];
            printf("object s%d (%d,%d) %s: analytic %.9g  fd %.9g\n", s, i, j, part ? "im" : "re", an, fd);
            assert_true(fabs(an - fd) <= 1e-5 * fabs(fd) + 1e-7);
        }
    }
    static const char *names[RP_N] = {"C10", "C12", "phi12", "tilt0", "tilt1", "dz"};
    const double hs[RP_N] = {1e-3, 1e-3, 1e-6, 1e-8, 1e-8, 1e-4};
    for (int k = 0; k < RP_N; k++) {
        double keep = c.th[k];
        c.th[k] = keep + hs[k];
        double Lp = gloss(&c, NULL, NULL);
        c.th[k] = keep - hs[k];
        double Lm = gloss(&c, NULL, NULL);
        c.th[k] = keep;
        double fd = (Lp - Lm) / (2 * hs[k]);
        printf("%-6s analytic %.9g  fd %.9g\n", names[k], g[k], fd);
        assert_true(fabs(g[k] - fd) <= 1e-5 * fabs(fd) + 1e-6 * (fabs(g[k]) + 1e-3));
    }
    for (int s = 0; s < ns; s++)
        free(c.obj[s]);
    free(gt);
    rwork_free_d(&c.w);
    rmodel_free_d(&c.m);
}

static void test_gradients_poisson(void **state)
{
    (void)state;
    check_gradients(0);
}

static void test_gradients_amplitude(void **state)
{
    (void)state;
    check_gradients(1);
}

/* ---- the forward model against the simulator ------------------------------------------------ */

/* The simulator's transmission of one layer on the window's M grid (ctx_init's construction,
 * in double): V from its Fourier series on the cell grid, e^{iσV}, its coefficients inside the
 * band placed on the window's lattice points. Complex, M×M. */
static void sim_transmission(const ssb4d_sim_params *p, const ssb4d_sim_info *info, int layer, double *t)
{
    const sim_crystal *cr = sim_crystal_get(p->specimen);
    int M = info->grid, W = p->window_cells, K = M / W;
    double kmax = info->antialias_inv_A, a = cr->a_A;
    int hmax = (int)floor(kmax * a);
    fftw_complex *cell = fftw_malloc((size_t)K * K * sizeof(fftw_complex));
    fftw_plan cb = fftw_plan_dft_2d(K, K, cell, cell, FFTW_BACKWARD, FFTW_ESTIMATE);
    fftw_plan cf = fftw_plan_dft_2d(K, K, cell, cell, FFTW_FORWARD, FFTW_ESTIMATE);
    memset(cell, 0, (size_t)K * K * sizeof(fftw_complex));
    for (int h = -hmax; h <= hmax; h++)
        for (int k = -hmax; k <= hmax; k++) {
            if (((double)h * h + (double)k * k) / (a * a) > kmax * kmax)
                continue;
            double v[2];
            sim_layer_coeff(cr, layer, h, k, v);
            size_t q = (size_t)((h % K + K) % K) * K + (size_t)((k % K + K) % K);
            cell[q][0] = v[0], cell[q][1] = v[1];
        }
    fftw_execute(cb);
    for (int q = 0; q < K * K; q++) {
        double ph = info->sigma * cell[q][0];
        cell[q][0] = cos(ph), cell[q][1] = sin(ph);
    }
    fftw_execute(cf);
    fftw_complex *T = fftw_malloc((size_t)M * M * sizeof(fftw_complex));
    memset(T, 0, (size_t)M * M * sizeof(fftw_complex));
    for (int h = -hmax; h <= hmax; h++)
        for (int k = -hmax; k <= hmax; k++) {
            if (((double)h * h + (double)k * k) / (a * a) > kmax * kmax)
                continue;
            size_t q = (size_t)((h % K + K) % K) * K + (size_t)((k % K + K) % K);
            size_t o = (size_t)(((h * W) % M + M) % M) * M + (size_t)(((k * W) % M + M) % M);
            T[o][0] = cell[q][0] / (K * K), T[o][1] = cell[q][1] / (K * K);
        }
    fftw_plan mb = fftw_plan_dft_2d(M, M, T, T, FFTW_BACKWARD, FFTW_ESTIMATE);
    fftw_execute(mb);
    for (int q = 0; q < M * M; q++)
        t[2 * q] = T[q][0], t[2 * q + 1] = T[q][1];
    fftw_destroy_plan(mb);
    fftw_destroy_plan(cb);
    fftw_destroy_plan(cf);
    fftw_free(T);
    fftw_free(cell);
}

static void test_forward_vs_simulator(void **state)
{
    (void)state;
    ssb4d_err err = {0};
    ssb4d_sim_params sp;
    assert_int_equal(ssb4d_sim_params_preset(&sp, "tiny", &err), 0);
    sp.det = 64, sp.grid = 64, sp.det_oversample = 1, sp.window_cells = 4, sp.cells_z = 3;
    sp.tilt_mrad[0] = 3.0, sp.tilt_mrad[1] = -2.0;
    sp.ab.C_nm[SSB4D_C10] = -6.0;
    ssb4d_sim_info info;
    assert_int_equal(ssb4d_sim_describe(&sp, &info, &err), 0);
    int M = info.grid, ns = info.n_slices;
    double *t[2];
    float *tf[2];
    for (int l = 0; l < 2; l++) {
        t[l] = malloc(2 * (size_t)M * M * sizeof(double));
        tf[l] = malloc(2 * (size_t)M * M * sizeof(float));
        sim_transmission(&sp, &info, l, t[l]);
        for (int q = 0; q < 2 * M * M; q++)
            tf[l][q] = (float)t[l][q];
    }
    refine_geo geo;
    memset(&geo, 0, sizeof geo);
    geo.lambda = info.wavelength_A;
    geo.semiangle_mrad = sp.semiangle_mrad;
    geo.dk[0] = geo.dk[1] = 1.0 / info.window_A;
    geo.ang[0] = geo.ang[1] = geo.lambda / info.window_A;
    geo.band_inv_A = info.antialias_inv_A;
    geo.ab = sp.ab;
    double th[RP_N] = {sp.ab.C_nm[SSB4D_C10] * 10, sp.ab.C_nm[SSB4D_C12] * 10, sp.ab.phi_deg[SSB4D_C12] * M_PI / 180,
                       sp.tilt_mrad[0] * 1e-3, sp.tilt_mrad[1] * 1e-3, info.lattice_A / 2};
    refine_model *m = refine_model_new(M, M, ns);
    refine_work *w = refine_work_new(m);
    assert_non_null(m);
    assert_non_null(w);
    refine_model_set(m, &geo, th);
    float *obj[64], *cnt = calloc((size_t)M * M, sizeof(float)), *I = malloc((size_t)M * M * sizeof(float));
    float *pat = malloc((size_t)M * M * sizeof(float));
    unsigned char *valid = malloc((size_t)M * M);
    memset(valid, 1, (size_t)M * M);
    for (int s = 0; s < ns; s++)
        obj[s] = tf[s % 2];
    const double R[3][2] = {{0.0, 0.0}, {1.3, 0.7}, {-2.21, 3.05}};
    double dx = info.window_A / M;
    for (int k = 0; k < 3; k++) {
        double sums[2];
        assert_int_equal(sim_pattern_at(&sp, R[k][0], R[k][1], pat, sums, &err), 0);
        refine_model_position(m, obj, (size_t)M, R[k][0] / dx, R[k][1] / dx, cnt, valid, 1.0, 0, w, NULL, NULL, I,
                              NULL, NULL);
        double mx = 0.0, dmax = 0.0, sum_in = 0.0, sum_sim = 0.0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < M; j++) {
                double ki = (i < M / 2 ? i : i - M) / info.window_A, kj = (j < M / 2 ? j : j - M) / info.window_A;
                double v = pat[((i + M / 2) % M) * M + (j + M / 2) % M];
                mx = fmax(mx, v);
                if (ki * ki + kj * kj > info.antialias_inv_A * info.antialias_inv_A)
                    continue; /* the simulator masks beyond its antialias band */
                dmax = fmax(dmax, fabs(I[i * M + j] - v));
                sum_in += I[i * M + j];
                sum_sim += v;
            }
        printf("position (%.2f, %.2f) A: max |model - sim| = %.3g of the peak; sums %.6f %.6f\n", R[k][0], R[k][1],
               dmax / mx, sum_in, sum_sim);
        assert_true(dmax <= 2e-4 * mx);
    }
    free(cnt);
    free(I);
    free(pat);
    free(valid);
    for (int l = 0; l < 2; l++) {
        free(t[l]);
        free(tf[l]);
    }
    refine_work_delete(w);
    refine_model_delete(m);
}

/* ---- recovery, determinism, bad input ------------------------------------------------------- */

/* The scan-to-detector convention (SPEC §2, §5.1) end to end: the simulator's rotated scan on a
 * mirrored detector (scan_basis, det_flip) is explained by the refinement only under the same
 * rotation and handedness: with either wrong, the free object cannot make up for the misplaced
 * positions and the deviance stays high. */
static void test_scan_convention(void **state)
{
    (void)state;
    fx_sim sim;
    assert_int_equal(fx_sim_params(&sim, 16, 2), 0);
    sim.sp.cells_z = 2;
    sim.sp.scan_rotation_deg = 30.0;
    sim.sp.det_flip = 1;
    sim.sp.ab.C_nm[SSB4D_C12] = 0.0;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_sim_describe(&sim.sp, &sim.info, &err), 0);
    size_t n = sim.shape[0] * sim.shape[1] * sim.shape[2] * sim.shape[3];
    sim.counts = malloc(n * sizeof(uint16_t));
    ssb4d_source *src;
    assert_int_equal(ssb4d_simulate_to_memory(&sim.sp, sim.counts, NULL, NULL, NULL, &sim.info, &err), 0);
    assert_int_equal(ssb4d_source_from_memory(sim.counts, SSB4D_U16, sim.shape, &src, &err), 0);
    ssb4d_calib_params cp;
    fx_calib_params(&sim, &cp);
    cp.rotation_deg = 30.0;
    cp.flip = 1;
    ssb4d_calibration cal;
    assert_int_equal(ssb4d_calibrate(src, &cp, &cal, &err), 0);
    ssb4d_aberrations ab = sim.sp.ab;
    double t = sim.info.thickness_nm;
    ab.C_nm[SSB4D_C10] += t / 2;
    ssb4d_refine_params p;
    ssb4d_refine_params_default(&p);
    p.slices = 1;
    p.thickness_range_nm[0] = p.thickness_range_nm[1] = t;
    p.refine_aberrations = p.refine_tilt = p.refine_thickness = 0;
    p.iterations = 8;
    const double rot[3] = {30.0, 30.0, -30.0};
    const int flip[3] = {1, 0, 1};
    double ratio[3];
    for (int k = 0; k < 3; k++) {
        ssb4d_geometry g = cal.geom;
        g.rotation_deg = rot[k];
        g.flip = flip[k];
        ssb4d_refine_result r;
        assert_int_equal(ssb4d_refine(src, &cal, &g, NULL, &ab, NULL, &p, &r, &err), 0);
        ratio[k] = r.nll / r.nll_expected;
        printf("rotation %+.0f flip %d: deviance %.4g of its expectation\n", rot[k], flip[k], ratio[k]);
        ssb4d_refine_result_free(&r);
    }
    assert_true(ratio[0] < 1.15); /* measured 0.99 */
    assert_true(ratio[1] > 1.3 * ratio[0] && ratio[2] > 1.3 * ratio[0]); /* 1.44, 1.52 */
    ssb4d_calibration_free(&cal);
    ssb4d_source_close(src);
    fx_sim_free(&sim);
}

static void test_threads_same_bits(void **state)
{
    (void)state;
    rcase c;
    assert_int_equal(rcase_make(&c, 24, 4, 1.0, 0.0), 0);
    ssb4d_refine_params p;
    ssb4d_refine_params_default(&p);
    p.thickness_range_nm[0] = 1.0, p.thickness_range_nm[1] = 3.0;
    p.slices = 2;
    p.iterations = 6;
    p.batch = 20;
    size_t region[4] = {2, 14, 3, 13};
    ssb4d_refine_result r[2];
    ssb4d_err err = {0};
    for (int k = 0; k < 2; k++) {
        p.threads = k + 1;
        assert_int_equal(ssb4d_refine(c.src, &c.cal, &c.cal.geom, region, &c.truth_mid, NULL, &p, &r[k], &err), 0);
    }
    assert_memory_equal(&r[0].ab, &r[1].ab, sizeof r[0].ab);
    assert_true(r[0].thickness_nm == r[1].thickness_nm && r[0].nll == r[1].nll);
    assert_memory_equal(r[0].tilt_mrad, r[1].tilt_mrad, sizeof r[0].tilt_mrad);
    size_t on = r[0].obj_shape[0] * r[0].obj_shape[1] * (size_t)r[0].slices;
    assert_int_equal(r[0].obj_shape[0], r[1].obj_shape[0]);
    assert_memory_equal(r[0].slice_phase, r[1].slice_phase, on * sizeof(float));
    assert_memory_equal(r[0].history, r[1].history, r[0].n_history * sizeof(double));
    for (int k = 0; k < 2; k++)
        ssb4d_refine_result_free(&r[k]);
    rcase_free(&c);
}

static void test_bad_input(void **state)
{
    (void)state;
    rcase c;
    assert_int_equal(rcase_make(&c, 24, 2, 0.0, 0.0), 0);
    ssb4d_refine_params p, q;
    ssb4d_refine_params_default(&p);
    ssb4d_refine_result r;
    ssb4d_err err = {0};
    const ssb4d_geometry *g = &c.cal.geom;
    assert_int_equal(ssb4d_refine(NULL, &c.cal, g, NULL, &c.truth_mid, NULL, &p, &r, &err), SSB4D_EINVAL);
    assert_int_equal(ssb4d_refine(c.src, &c.cal, g, NULL, NULL, NULL, &p, &r, &err), SSB4D_EINVAL);
    size_t out[4] = {0, 30, 0, 4};
    assert_int_equal(ssb4d_refine(c.src, &c.cal, g, out, &c.truth_mid, NULL, &p, &r, &err), SSB4D_EINVAL);
    printf("%s\n", err.msg);
    q = p, q.slices = 1000;
    assert_int_equal(ssb4d_refine(c.src, &c.cal, g, NULL, &c.truth_mid, NULL, &q, &r, &err), SSB4D_EINVAL);
    printf("%s\n", err.msg);
    q = p, q.iterations = -3;
    assert_int_equal(ssb4d_refine(c.src, &c.cal, g, NULL, &c.truth_mid, NULL, &q, &r, &err), SSB4D_EINVAL);
    printf("%s\n", err.msg);
    q = p, q.thickness_range_nm[0] = 5, q.thickness_range_nm[1] = 2;
    assert_int_equal(ssb4d_refine(c.src, &c.cal, g, NULL, &c.truth_mid, NULL, &q, &r, &err), SSB4D_EINVAL);
    printf("%s\n", err.msg);
    q = p, q.thickness_range_nm[1] = NAN;
    assert_int_equal(ssb4d_refine(c.src, &c.cal, g, NULL, &c.truth_mid, NULL, &q, &r, &err), SSB4D_EINVAL);
    q = p, q.thickness_nm = 50;
    assert_int_equal(ssb4d_refine(c.src, &c.cal, g, NULL, &c.truth_mid, NULL, &q, &r, &err), SSB4D_EINVAL);
    printf("%s\n", err.msg);
    q = p, q.bin = 3;
    assert_int_equal(ssb4d_refine(c.src, &c.cal, g, NULL, &c.truth_mid, NULL, &q, &r, &err), SSB4D_EINVAL);
    printf("%s\n", err.msg);
    assert_null(strchr(err.msg, '\n'));
    rcase_free(&c);
}

typedef struct {
    int calls;
    double last;
    int backwards;
} progress_log;

static int cancel_at_half(void *user, const char *stage, double f)
{
    (void)stage;
    progress_log *l = user;
    l->calls++;
    l->backwards |= f < l->last - 1e-12;
    l->last = f;
    return f > 0.5;
}

static int watch(void *user, const char *stage, double f)
{
    cancel_at_half(user, stage, f);
    return 0;
}

/* Progress rises (through the check start too, which reports after the main solve), a cancel stops the call (SSB4D_ECANCELLED), a budget too small for the patterns
 * is refused in one line. */
static void test_progress_cancel_budget(void **state)
{
    (void)state;
    rcase c;
    assert_int_equal(rcase_make(&c, 24, 2, 0.0, 0.0), 0);
    ssb4d_refine_params p;
    ssb4d_refine_params_default(&p);
    p.slices = 1, p.iterations = 4;
    p.thickness_range_nm[0] = p.thickness_range_nm[1] = c.t_nm;
    ssb4d_refine_result r;
    ssb4d_err err = {0};
    progress_log log = {0};
    p.mem = ssb4d_mem_create(0);
    ssb4d_mem_set_progress(p.mem, cancel_at_half, &log);
    assert_int_equal(ssb4d_refine(c.src, &c.cal, &c.cal.geom, NULL, &c.truth_mid, NULL, &p, &r, &err), SSB4D_ECANCELLED);
    printf("%s after %d progress calls (last %.3f)\n", err.msg, log.calls, log.last);
    assert_true(log.calls > 5 && !log.backwards);
    ssb4d_mem_destroy(p.mem);
    /* two slices: the tilt and the thickness are refined and the check start runs after the main solve */
    ssb4d_refine_params q = p;
    q.slices = 2, q.iterations = 3;
    q.thickness_range_nm[0] = 0.5, q.thickness_range_nm[1] = 2.0;
    q.thickness_nm = 1.0;
    size_t region[4] = {4, 14, 4, 14};
    progress_log wl = {0};
    q.mem = ssb4d_mem_create(0);
    ssb4d_mem_set_progress(q.mem, watch, &wl);
    assert_int_equal(ssb4d_refine(c.src, &c.cal, &c.cal.geom, region, &c.truth_mid, NULL, &q, &r, &err), SSB4D_OK);
    printf("with the check start: %d progress calls, last %.3f, check thickness %.3f nm\n", wl.calls, wl.last,
           r.thickness_check_nm);
    assert_true(!wl.backwards && wl.last == 1.0 && !isnan(r.thickness_check_nm));
    ssb4d_refine_result_free(&r);
    ssb4d_mem_destroy(q.mem);
    p.mem = ssb4d_mem_create((size_t)1 << 20);
    assert_int_equal(ssb4d_refine(c.src, &c.cal, &c.cal.geom, NULL, &c.truth_mid, NULL, &p, &r, &err), SSB4D_ENOMEM);
    printf("%s\n", err.msg);
    assert_null(strchr(err.msg, '\n'));
    ssb4d_mem_destroy(p.mem);
    rcase_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_poisson), cmocka_unit_test(test_gradients_amplitude),
        cmocka_unit_test(test_forward_vs_simulator), cmocka_unit_test(test_scan_convention),
        cmocka_unit_test(test_threads_same_bits), cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_progress_cancel_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
