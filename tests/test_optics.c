/* test_optics.c — the library's optics (src/optics) against the float64 reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ref_ssb.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static uint64_t rng_state = 777;
static double urand(void) { return ref_urand(&rng_state); }

static void test_wavelength(void **state)
{
    (void)state;
    assert_true(fabs(ssb4d_wavelength_A(300.0) / 0.019687489006849 - 1.0) < 1e-12);
    assert_true(fabs(ssb4d_wavelength_A(200.0) / 0.025079340450548 - 1.0) < 1e-12);
    for (double kv = 20.0; kv <= 1000.0; kv += 7.5)
        assert_true(fabs(ssb4d_wavelength_A(kv) / ref_wavelength(kv) - 1.0) < 1e-12);
    assert_true(fabs(ssb4d_wavelength_A(80.0) / 0.04175716077283421 - 1.0) < 1e-12);
}

static void test_aberration_table(void **state)
{
    (void)state;
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        assert_string_equal(ssb4d_aberr_name(i), ref_aberr_names[i]);
        assert_int_equal(ssb4d_aberr_n(i), ref_aberr_n[i]);
        assert_int_equal(ssb4d_aberr_m(i), ref_aberr_m[i]);
        assert_int_equal(ssb4d_aberr_index(ref_aberr_names[i]), i);
        char lower[8];
        snprintf(lower, sizeof lower, "%s", ref_aberr_names[i]);
        lower[0] = 'c';
        assert_int_equal(ssb4d_aberr_index(lower), i);
        /* name encodes n and m */
        assert_int_equal(ref_aberr_names[i][1] - '0', ref_aberr_n[i]);
        assert_int_equal(ref_aberr_names[i][2] - '0', ref_aberr_m[i]);
    }
    assert_int_equal(SSB4D_N_ABERR, 14);
    assert_int_equal(SSB4D_C10, 0);
    assert_int_equal(SSB4D_C12, 1);
    assert_int_equal(SSB4D_C21, 2);
    assert_int_equal(SSB4D_C30, 4);
    assert_int_equal(SSB4D_C56, 13);
    assert_int_equal(ssb4d_aberr_index("C99"), -1);
    assert_int_equal(ssb4d_aberr_index(""), -1);
    assert_int_equal(ssb4d_aberr_index("C1"), -1);
    assert_int_equal(ssb4d_aberr_index("C100"), -1);
}

static void test_chi(void **state)
{
    (void)state;
    ssb4d_geometry g;
    memset(&g, 0, sizeof g);
    g.kv = 200.0;
    g.semiangle_mrad = 30.0;
    g.det_sampling_mrad[0] = g.det_sampling_mrad[1] = 1.0;
    /* typical magnitudes per coefficient (nm) */
    const double scale_nm[SSB4D_N_ABERR] = {30, 10, 200, 200, 5e3, 5e3, 5e3,
                                            1e5, 1e5, 1e5, 5e6, 5e6, 5e6, 5e6};
    double maxrel = 0.0;
    for (int set = 0; set < 200; set++) {
        ssb4d_aberrations ab;
        memset(&ab, 0, sizeof ab);
        for (int i = 0; i < SSB4D_N_ABERR; i++) {
            ab.C_nm[i] = scale_nm[i] * (2 * urand() - 1);
            ab.phi_deg[i] = 360.0 * urand() - 180.0;
            if (set % 4 == 1 && i > 1)
                ab.C_nm[i] = 0.0; /* C10/C12 only */
            if (set % 4 == 2 && ref_aberr_m[i] % 2 == 1)
                ab.C_nm[i] = 0.0; /* even m only */
        }
        g.kv = (set % 3 == 0) ? 300.0 : (set % 3 == 1 ? 200.0 : 80.0);
        ref_optics o;
        ref_optics_init(&o, &g, &ab, NULL);
        double lam = ssb4d_wavelength_A(g.kv);
        for (int s = 0; s < 50; s++) {
            double r = 1.5 * o.alpha0 / o.lambda * urand(), a = 2 * M_PI * urand();
            double vx = r * cos(a), vy = r * sin(a);
            double c_lib = ssb4d_chi(&ab, lam, vx, vy);
            double c_ref = ref_chi(&o, vx, vy);
            /* scale: Σ |terms| */
            double alpha = o.lambda * r, sc = 0.0;
            for (int i = 0; i < SSB4D_N_ABERR; i++)
                sc += fabs(o.C[i]) * pow(alpha, ref_aberr_n[i] + 1) / (ref_aberr_n[i] + 1);
            sc *= 2 * M_PI / o.lambda;
            if (sc == 0.0)
                continue;
            double rel = fabs(c_lib - c_ref) / sc;
            if (rel > maxrel)
                maxrel = rel;
            assert_true(rel < 1e-12);
        }
        assert_true(ssb4d_chi(&ab, lam, 0.0, 0.0) == 0.0);
    }
    printf("chi: max relative difference library vs reference %.3g\n", maxrel);
    /* single-term hand checks: C10 → π C10 λ |v|² (Å) */
    ssb4d_aberrations ab;
    memset(&ab, 0, sizeof ab);
    ab.C_nm[SSB4D_C10] = -12.0;
    double lam = ssb4d_wavelength_A(300.0);
    double v = 0.8;
    assert_true(fabs(ssb4d_chi(&ab, lam, 0.0, v) / (M_PI * -120.0 * lam * v * v) - 1) < 1e-13);
    /* C12 orientation: φ measured from +rows (vx) towards +cols (vy) */
    memset(&ab, 0, sizeof ab);
    ab.C_nm[SSB4D_C12] = 3.0;
    ab.phi_deg[SSB4D_C12] = 90.0;
    double e = M_PI * 30.0 * lam * v * v;
    assert_true(fabs(ssb4d_chi(&ab, lam, 0.0, v) / e - 1) < 1e-12);  /* along cols: max */
    assert_true(fabs(ssb4d_chi(&ab, lam, v, 0.0) / -e - 1) < 1e-12); /* along rows: min */
    /* C21 is odd: χ(−v) = −χ(v) */
    memset(&ab, 0, sizeof ab);
    ab.C_nm[SSB4D_C21] = 100.0;
    ab.phi_deg[SSB4D_C21] = 17.0;
    assert_true(fabs(ssb4d_chi(&ab, lam, 0.3, 0.4) + ssb4d_chi(&ab, lam, -0.3, -0.4)) <
                1e-12 * fabs(ssb4d_chi(&ab, lam, 0.3, 0.4)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wavelength),
        cmocka_unit_test(test_aberration_table),
        cmocka_unit_test(test_chi),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
