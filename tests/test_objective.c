/* test_objective.c — the fit's objective has its minimum at the truth (issue 11, SPEC 5.4):
 *   - an odd-m aberration (coma C21) in a multislice simulation: the exact loss, scanned
 *     along C23 at the true angle, is lowest at the truth with SPEC 5.4's γ = P(k−q)P*(k) −
 *     P*(k+q)P(k) (the earlier text's P(q−k) form puts it near a third of the truth). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssb4d.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_m_minimum_at_truth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
