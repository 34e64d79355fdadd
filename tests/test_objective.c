/* test_objective.c — the fit's objective has its minimum at the truth (issue 11, SPEC 5.4):
 *   - an odd-m aberration (coma C21) in a multislice simulation: the exact loss, scanned
 *     along C23 at the true angle, is lowest at the truth with SPEC 5.4's γ = P(k−q)P*(k) −
 *     P*(k+q)P(k) (the earlier text's P(q−k) form puts it near a third of the truth);
 *   - no false basin at zero aberration: the exact loss at C10 = C12 = 0 (where γ ≡ 0 on the
 *     whole triple overlap) is not below its values 0.1 nm away (it was 25 % below with the
 *     earlier max(|γ|, 1e-8), which dropped those bins), on a high-dose and a low-dose case;
 *   - the band objective, the fit's objective, has its maximum within 0.2 nm of the truth in C10
 *     at low dose (500 electrons per pattern, Au), where the exact loss was ragged and lower near
 *     zero aberration than at the truth; near zero it is a fifth of its maximum or less. */
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
    ssb4d_sim_params sp;
    ssb4d_sim_info info;
    uint16_t *counts;
    ssb4d_source *src;
    ssb4d_calibration cal;
    ssb4d_G *G;
} sim_case;

/* Simulates p, calibrates with the microscope values a sidecar gives (kV, semi-angle, scan step,
 * detector sampling, rotation 0) and builds G. */
static void case_open(sim_case *c, const ssb4d_sim_params *p)
{
    ssb4d_err err = {0};
    memset(c, 0, sizeof *c);
    c->sp = *p;
    if (ssb4d_sim_describe(&c->sp, &c->info, &err))
        fail_msg("%s", err.msg);
    size_t shape[4] = {(size_t)p->scan_n, (size_t)p->scan_n, (size_t)p->det, (size_t)p->det};
    c->counts = malloc(shape[0] * shape[1] * shape[2] * shape[3] * sizeof *c->counts);
    assert_non_null(c->counts);
    if (ssb4d_simulate_to_memory(&c->sp, c->counts, NULL, NULL, NULL, NULL, &err) ||
        ssb4d_source_from_memory(c->counts, SSB4D_U16, shape, &c->src, &err))
        fail_msg("%s", err.msg);
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    cp.kv = p->kv;
    cp.semiangle_mrad = p->semiangle_mrad;
    cp.scan_step_A[0] = cp.scan_step_A[1] = c->info.scan_step_A;
    cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = c->info.det_sampling_mrad;
    cp.rotation_deg = 0.0;
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

static double loss_at(const sim_case *c, const ssb4d_aberrations *ab)
{
    ssb4d_err err = {0};
    double l = NAN;
    if (ssb4d_loss(c->G, &c->cal.geom, ab, NULL, NULL, NULL, &l, NULL, &err))
        fail_msg("%s", err.msg);
    return l;
}

/* Coma C21 = 150 nm at 25° (χ reaches 2.5 rad at the aperture edge), tiny preset: the loss
 * along C21 at the true angle, 0..300 nm in 25 nm steps, is lowest at 150. */
static void test_odd_m_minimum_at_truth(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    ssb4d_err err = {0};
    if (ssb4d_sim_params_preset(&p, "tiny", &err))
        fail_msg("%s", err.msg);
    p.ab.C_nm[SSB4D_C21] = 150.0;
    p.ab.phi_deg[SSB4D_C21] = 25.0;
    sim_case c;
    case_open(&c, &p);
    ssb4d_aberrations ab = p.ab;
    ab.C_nm[SSB4D_C10] += 0.5 * (c.info.thickness_nm - c.info.thickness_nm / c.info.n_slices);
    double best = INFINITY, best_c21 = -1;
    printf("C21 scan (truth 150 nm):");
    for (double c21 = 0; c21 <= 300.1; c21 += 25) {
        ab.C_nm[SSB4D_C21] = c21;
        double l = loss_at(&c, &ab);
        printf(" %.0f:%.6f", c21, l);
        if (l < best)
            best = l, best_c21 = c21;
    }
    printf("\nminimum at %.0f nm\n", best_c21);
    assert_true(fabs(best_c21 - 150.0) <= 25.0);
    case_close(&c);
}


static double band_at(const sim_case *c, const ssb4d_aberrations *ab, const ssb4d_band_opts *bo)
{
    ssb4d_err err = {0};
    double f = NAN;
    if (ssb4d_band_fit(c->G, &c->cal.geom, ab, NULL, 1, bo, NULL, &f, &err))
        fail_msg("%s", err.msg);
    return f;
}

/* SrTiO3 at 300 kV (high dose) and Au at 200 kV with 500 electrons per pattern. */
static void two_cases(ssb4d_sim_params p[2])
{
    ssb4d_err err = {0};
    for (int i = 0; i < 2; i++)
        if (ssb4d_sim_params_preset(&p[i], "tiny", &err))
            fail_msg("%s", err.msg);
    p[0].semiangle_mrad = 30;
    p[0].ab.C_nm[SSB4D_C10] = 17;
    p[0].ab.C_nm[SSB4D_C12] = 5.4;
    p[0].ab.phi_deg[SSB4D_C12] = 40;
    p[1].specimen = SSB4D_SPECIMEN_AU;
    p[1].kv = 200;
    p[1].semiangle_mrad = 22;
    p[1].dose = 500;
    p[1].scan_n = 64;
    p[1].scan_cells = 6;
    p[1].window_cells = 5;
    p[1].det = 64;
    p[1].ab.C_nm[SSB4D_C10] = -11;
    p[1].ab.C_nm[SSB4D_C12] = 1.9;
    p[1].ab.phi_deg[SSB4D_C12] = -60;
}

static void test_no_false_basin_at_zero(void **state)
{
    (void)state;
    ssb4d_sim_params p[2];
    two_cases(p);
    for (int i = 0; i < 2; i++) {
        sim_case c;
        case_open(&c, &p[i]);
        ssb4d_aberrations ab;
        memset(&ab, 0, sizeof ab);
        double l[3];
        for (int k = 0; k < 3; k++) {
            ab.C_nm[SSB4D_C10] = 0.1 * (k - 1);
            l[k] = loss_at(&c, &ab);
        }
        ab.C_nm[SSB4D_C10] = 0;
        ab.C_nm[SSB4D_C12] = 0.1;
        double l12 = loss_at(&c, &ab);
        printf("case %d: loss at C10 -0.1, 0, +0.1 nm: %.7f %.7f %.7f; at C12 0.1 nm: %.7f\n", i, l[0], l[1],
               l[2], l12);
        /* Not a basin: at most the plateau's own smooth variation below its neighbours (0.013 %
         * measured; the hard threshold put it 25 % below), and no jump. */
        assert_true(l[1] >= fmin(fmin(l[0], l[2]), l12) * (1.0 - 5e-4));
        assert_true(fabs(l[1] - 0.5 * (l[0] + l[2])) < 1e-3 * l[1]);
        case_close(&c);
    }
}

static void test_band_maximum_at_truth_low_dose(void **state)
{
    (void)state;
    ssb4d_sim_params p[2];
    two_cases(p);
    sim_case c;
    case_open(&c, &p[1]);
    double c10 = p[1].ab.C_nm[SSB4D_C10] + 0.5 * (c.info.thickness_nm - c.info.thickness_nm / c.info.n_slices);
    ssb4d_band_opts bo;
    ssb4d_band_opts_default(&bo);
    double lambda = ssb4d_wavelength_A(p[1].kv);
    bo.band_lo_inv_A = 1.5 / (p[1].scan_n * c.info.scan_step_A);
    bo.band_hi_inv_A = 2.0 * p[1].semiangle_mrad * 1e-3 / lambda;
    ssb4d_aberrations ab = p[1].ab;
    double best = -INFINITY, at = NAN;
    printf("band objective along C10 (mean-plane truth %.3f nm):", c10);
    for (double x = c10 - 1.5; x <= c10 + 1.5 + 1e-9; x += 0.1) {
        ab.C_nm[SSB4D_C10] = x;
        double f = band_at(&c, &ab, &bo);
        printf(" %.2f:%.5g", x, f);
        if (f > best)
            best = f, at = x;
    }
    printf("\nmaximum at %.3f nm\n", at);
    /* the zero-aberration dip: (−0.2, 0.03) and (0.1, 0) */
    ssb4d_aberrations z;
    memset(&z, 0, sizeof z);
    z.C_nm[SSB4D_C10] = -0.2;
    z.C_nm[SSB4D_C12] = 0.03;
    double fz1 = band_at(&c, &z, &bo);
    z.C_nm[SSB4D_C10] = 0.1;
    z.C_nm[SSB4D_C12] = 0;
    double fz2 = band_at(&c, &z, &bo);
    printf("near zero: %.5g, %.5g against %.5g at the maximum\n", fz1, fz2, best);
    assert_true(fz1 < 0.2 * best && fz2 < 0.2 * best);
    assert_true(fabs(at - c10) <= 0.2);
    case_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_m_minimum_at_truth),
        cmocka_unit_test(test_no_false_basin_at_zero),
        cmocka_unit_test(test_band_maximum_at_truth_low_dose),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
