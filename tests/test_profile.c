/* test_profile.c — the plan's times come from a machine profile (src/plan/profile.c), never its
 * decisions: a profile twice as slow doubles every stage's predicted seconds and leaves every
 * byte, mode and tile the same; the measured profile has finite positive rates and names
 * itself; the plan says which profile it used. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "ssb4d_advanced.h"

static void reference_input(ssb4d_plan_input *in)
{
    ssb4d_plan_input_default(in);
    in->scan[0] = in->scan[1] = 512;
    in->det[0] = in->det[1] = 192;
    in->n_bf = 9265;
    in->encoded_bytes = (size_t)1475000000;
    in->threads = 2;
    in->upsample = 2;
    in->region[0] = in->region[1] = 256;
    in->memory_bytes = (size_t)16 << 30;
}

static void test_times_scale_decisions_do_not(void **state)
{
    ssb4d_plan_input in;
    reference_input(&in);
    ssb4d_plan a, b;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_plan_make(&in, &a, &err), 0);
    assert_non_null(strstr(a.profile_source, "stated"));
    ssb4d_machine_profile slow;
    ssb4d_machine_profile_stated(&slow);
    slow.calibrate_ns *= 2, slow.gbuild_ns *= 2, slow.loss_ns *= 2, slow.band_ns *= 2, slow.object_ns *= 2;
    snprintf(slow.source, sizeof slow.source, "twice as slow");
    in.profile = &slow;
    assert_int_equal(ssb4d_plan_make(&in, &b, &err), 0);
    assert_string_equal(b.profile_source, "twice as slow");
    assert_int_equal(a.n_stages, b.n_stages);
    assert_true(a.n_stages > 5);
    for (size_t i = 0; i < a.n_stages; i++) {
        assert_string_equal(a.stages[i].name, b.stages[i].name);
        assert_int_equal(a.stages[i].peak_bytes, b.stages[i].peak_bytes);
        assert_int_equal(a.stages[i].after_bytes, b.stages[i].after_bytes);
        assert_string_equal(a.stages[i].tiles, b.stages[i].tiles);
        assert_true(fabs(b.stages[i].seconds - 2 * a.stages[i].seconds) <= 1e-9 * (1 + a.stages[i].seconds));
    }
    assert_string_equal(a.mode, b.mode);
    assert_int_equal(a.session_peak_bytes, b.session_peak_bytes);
    /* The threads the rates were measured on scale them: a profile of 4 threads is half as fast
     * per thread as one of 2 at the same rates. */
    slow.threads = 4;
    ssb4d_plan c;
    assert_int_equal(ssb4d_plan_make(&in, &c, &err), 0);
    for (size_t i = 0; i < a.n_stages; i++)
        assert_true(fabs(c.stages[i].seconds - 2 * b.stages[i].seconds) <= 1e-9 * (1 + b.stages[i].seconds));
    (void)state;
}

static void test_measured_profile(void **state)
{
    ssb4d_machine_profile p;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_machine_profile_measure(0, &p, &err), 0);
    assert_non_null(strstr(p.source, "measured"));
    assert_true(p.threads >= 1);
    double r[5] = {p.calibrate_ns, p.gbuild_ns, p.loss_ns, p.band_ns, p.object_ns};
    for (int i = 0; i < 5; i++)
        assert_true(isfinite(r[i]) && r[i] > 0 && r[i] < 1e6);
    printf("# %s: calibrate %.2f, G build %.2f, loss %.2f, band %.2f, object %.2f ns\n", p.source, r[0], r[1], r[2],
           r[3], r[4]);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_times_scale_decisions_do_not),
        cmocka_unit_test(test_measured_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
