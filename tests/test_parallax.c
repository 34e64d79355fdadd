/* test_parallax.c — the parallax (tilt-corrected bright-field) estimate (src/parallax/, SPEC 6.1)
 * on multislice simulations with known aberrations and scan rotation:
 *   - C10, C12, φ12 (scan frame) and the rotation (mod 180°) recovered, unrotated and at 35°;
 *   - the estimate at a stated rotation: the estimate's own rotation reproduces it with no
 *     misfit, a rotation 30° off leaves a misfit;
 *   - pure astigmatism leaves the rotation undetermined (a large standard error), as the shifts
 *     cannot tell a turned detector from a turned astigmatism;
 *   - identical frames (no contrast) give SSB4D_ENOTFOUND;
 *   - the same bits for 1 and 2 threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssb4d_advanced.h"

typedef struct {
    ssb4d_sim_info info;
    uint16_t *counts;
    ssb4d_source *src;
    ssb4d_calibration cal;
    ssb4d_G *G;
} sim_case;

/* SrTiO3, 300 kV, 25 mrad, 48² scan over 6 cells, 64² detector. */
static void params(ssb4d_sim_params *p, double c10, double c12, double phi12, double rotation)
{
    ssb4d_err err = {0};
    if (ssb4d_sim_params_preset(p, "tiny", &err))
        fail_msg("%s", err.msg);
    p->scan_n = 48;
    p->scan_cells = 6;
    p->det = 64;
    p->window_cells = 5;
    p->dose = 2e4;
    memset(&p->ab, 0, sizeof p->ab);
    p->ab.C_nm[SSB4D_C10] = c10;
    p->ab.C_nm[SSB4D_C12] = c12;
    p->ab.phi_deg[SSB4D_C12] = phi12;
    p->scan_rotation_deg = rotation;
}

static void case_open(sim_case *c, const ssb4d_sim_params *p)
{
    ssb4d_err err = {0};
    memset(c, 0, sizeof *c);
    if (ssb4d_sim_describe(p, &c->info, &err))
        fail_msg("%s", err.msg);
    size_t shape[4] = {(size_t)p->scan_n, (size_t)p->scan_n, (size_t)p->det, (size_t)p->det};
    c->counts = malloc(shape[0] * shape[1] * shape[2] * shape[3] * sizeof *c->counts);
    assert_non_null(c->counts);
    if (ssb4d_simulate_to_memory(p, c->counts, NULL, NULL, NULL, &c->info, &err) ||
        ssb4d_source_from_memory(c->counts, SSB4D_U16, shape, &c->src, &err))
        fail_msg("%s", err.msg);
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    cp.kv = p->kv;
    cp.semiangle_mrad = p->semiangle_mrad;
    cp.scan_step_A[0] = cp.scan_step_A[1] = c->info.scan_step_A;
    cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = c->info.det_sampling_mrad;
    cp.rotation_deg = 0.0; /* G does not depend on it */
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    if (ssb4d_calibrate(c->src, &cp, &c->cal, &err) ||
        ssb4d_gbuild(c->src, &c->cal.geom, c->cal.bf_pix, c->cal.n_bf, &go, NULL, &c->G, &err))
        fail_msg("%s", err.msg);
}

static void case_close(sim_case *c)
{
    ssb4d_G_free(c->G);
    ssb4d_calibration_free(&c->cal);
    ssb4d_source_close(c->src);
    free(c->counts);
}

static double wrap(double d, double period)
{
    d = fmod(d, period);
    if (d > period / 2)
        d -= period;
    if (d < -period / 2)
        d += period;
    return d;
}

/* The estimate against the truth: the truth in ssb4d's frames (φ12 scan = probe + rotation), on
 * the branch of the estimate's rotation (the other one is −C10, −C12 at rotation + 180°). */
static void check(const ssb4d_parallax *px, const ssb4d_sim_params *p, const sim_case *c)
{
    double c10 = p->ab.C_nm[SSB4D_C10] + 0.5 * (c->info.thickness_nm - c->info.thickness_nm / c->info.n_slices);
    double c12 = p->ab.C_nm[SSB4D_C12], phi = p->ab.phi_deg[SSB4D_C12] + p->scan_rotation_deg;
    double rot = p->scan_rotation_deg;
    int flip = fabs(wrap(px->rotation_deg - rot, 360.0)) > 90.0;
    double e10 = flip ? -px->C10_nm : px->C10_nm;
    double ephi = flip ? px->phi12_deg + 90.0 : px->phi12_deg;
    printf("truth C10 %.3f C12 %.3f phi12(scan) %.2f rot %.2f | parallax C10 %.3f±%.3f C12 %.3f±%.3f "
           "phi12 %.2f±%.2f rot %.2f±%.2f (%s branch), residual %.4f A, %zu offsets, %.3f s\n",
           c10, c12, phi, rot, px->C10_nm, px->sigma[0], px->C12_nm, px->sigma[1], px->phi12_deg, px->sigma[2],
           px->rotation_deg, px->sigma[3], flip ? "other" : "same", px->residual_A, px->n_offsets, px->seconds);
    assert_true(fabs(e10 - c10) <= 0.05 * fabs(c10) + 0.3);
    assert_true(fabs(px->C12_nm - c12) <= 0.1 * c12 + 0.3);
    assert_true(fabs(wrap(ephi - phi, 180.0)) <= 5.0);
    assert_true(fabs(wrap(px->rotation_deg - rot, 180.0)) <= 2.0);
}

static void test_unrotated(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    params(&p, -20, 3, 30, 0);
    sim_case c;
    case_open(&c, &p);
    ssb4d_parallax px;
    ssb4d_err err = {0};
    if (ssb4d_parallax_estimate(c.G, &c.cal.geom, NULL, NULL, &px, &err))
        fail_msg("%s", err.msg);
    check(&px, &p, &c);
    /* at its own rotation the estimate is reproduced; 30° off, the shifts disagree */
    double ab[3], mis, mis30;
    ssb4d_parallax_at_rotation(&px, &c.cal.geom, px.rotation_deg, ab, &mis);
    assert_true(fabs(ab[0] - px.C10_nm) < 1e-6 && fabs(ab[1] - px.C12_nm) < 1e-6);
    ssb4d_parallax_at_rotation(&px, &c.cal.geom, px.rotation_deg + 30.0, ab, &mis30);
    printf("misfit at the estimate's rotation %.4f nm, 30 deg off %.3f nm\n", mis, mis30);
    assert_true(mis < 1e-6);
    assert_true(mis30 > 5.0);
    /* threads */
    ssb4d_parallax_opts o;
    ssb4d_parallax_opts_default(&o);
    ssb4d_parallax a, b;
    o.threads = 1;
    assert_int_equal(ssb4d_parallax_estimate(c.G, &c.cal.geom, &o, NULL, &a, &err), SSB4D_OK);
    o.threads = 2;
    assert_int_equal(ssb4d_parallax_estimate(c.G, &c.cal.geom, &o, NULL, &b, &err), SSB4D_OK);
    assert_memory_equal(a.B, b.B, sizeof a.B);
    assert_memory_equal(a.est, b.est, sizeof a.est);
    case_close(&c);
}

static void test_rotated(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    params(&p, 15, 4, -50, 35);
    sim_case c;
    case_open(&c, &p);
    ssb4d_parallax px;
    ssb4d_err err = {0};
    if (ssb4d_parallax_estimate(c.G, &c.cal.geom, NULL, NULL, &px, &err))
        fail_msg("%s", err.msg);
    check(&px, &p, &c);
    case_close(&c);
}

static void test_astigmatism_leaves_rotation_open(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    params(&p, 0, 6, 20, 0);
    sim_case c;
    case_open(&c, &p);
    ssb4d_parallax px;
    ssb4d_err err = {0};
    if (ssb4d_parallax_estimate(c.G, &c.cal.geom, NULL, NULL, &px, &err))
        fail_msg("%s", err.msg);
    printf("pure astigmatism: C10 %.3f C12 %.3f rotation %.2f ± %.2f deg\n", px.C10_nm, px.C12_nm, px.rotation_deg,
           px.sigma[3]);
    assert_true(fabs(px.C12_nm - 6.0) <= 0.9);
    assert_true(!(px.sigma[3] < 5.0)); /* undetermined: NaN or large */
    case_close(&c);
}

static void test_no_contrast(void **state)
{
    (void)state;
    /* every frame the same disk: the images have no contrast, nothing shifts */
    size_t shape[4] = {32, 32, 32, 32}, n = 32 * 32 * 32 * 32;
    uint16_t *counts = malloc(n * sizeof *counts);
    assert_non_null(counts);
    for (size_t i = 0; i < n; i++) {
        size_t q = i % (32 * 32);
        double r = (double)(q / 32) - 16, cc = (double)(q % 32) - 16;
        counts[i] = r * r + cc * cc < 100 ? 50 : 0;
    }
    ssb4d_err err = {0};
    ssb4d_source *src;
    assert_int_equal(ssb4d_source_from_memory(counts, SSB4D_U16, shape, &src, &err), SSB4D_OK);
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    cp.kv = 300;
    cp.semiangle_mrad = 20;
    cp.scan_step_A[0] = cp.scan_step_A[1] = 0.4;
    cp.rotation_deg = 0;
    ssb4d_calibration cal;
    assert_int_equal(ssb4d_calibrate(src, &cp, &cal, &err), SSB4D_OK);
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    ssb4d_G *G;
    assert_int_equal(ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, NULL, &G, &err), SSB4D_OK);
    ssb4d_parallax px;
    assert_int_equal(ssb4d_parallax_estimate(G, &cal.geom, NULL, NULL, &px, &err), SSB4D_ENOTFOUND);
    printf("no contrast: %s\n", err.msg);
    ssb4d_G_free(G);
    ssb4d_calibration_free(&cal);
    ssb4d_source_close(src);
    free(counts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unrotated),
        cmocka_unit_test(test_rotated),
        cmocka_unit_test(test_astigmatism_leaves_rotation_open),
        cmocka_unit_test(test_no_contrast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
