/* test_params.c — the parameter table (src/params): every row's default is its struct's default,
 * names and options are unique, every field lies inside its struct, and the checks store exactly
 * what they accept and nothing they refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ssb4d.h"

#include <math.h>
#include <string.h>

/* The struct each op fills, with its own default. */
static size_t op_struct(ssb4d_op op, void *buf)
{
    memset(buf, 0, 4096);
    switch (op) {
    case SSB4D_OP_FIT: ssb4d_fit_params_default(buf); return sizeof(ssb4d_fit_params);
    case SSB4D_OP_ABERRATIONS: return sizeof(ssb4d_aberrations);
    case SSB4D_OP_THICK: return sizeof(ssb4d_thick);
    case SSB4D_OP_PREVIEW: ssb4d_preview_req_default(buf); return sizeof(ssb4d_preview_req);
    case SSB4D_OP_CALIBRATE: ssb4d_calib_params_default(buf); return sizeof(ssb4d_calib_params);
    case SSB4D_OP_REFINE: ssb4d_refine_params_default(buf); return sizeof(ssb4d_refine_params);
    default: return 0;
    }
}

static void test_defaults_and_names(void **state)
{
    (void)state;
    _Alignas(16) char s[4096];
    for (int op = 0; op < SSB4D_OP_COUNT; op++) {
        size_t n, size = op_struct((ssb4d_op)op, s);
        const ssb4d_param *t = ssb4d_params((ssb4d_op)op, &n);
        assert_non_null(t);
        assert_true(n > 0);
        for (size_t i = 0; i < n; i++) {
            assert_true(t[i].offset + (t[i].type == SSB4D_PARAM_PAIR ? 16 : 4) <= size);
            double v[2];
            ssb4d_param_get(&t[i], s, v);
            if (isnan(t[i].def))
                assert_true(isnan(v[0]));
            else
                assert_true(v[0] == t[i].def);
            assert_ptr_equal(ssb4d_param_find((ssb4d_op)op, t[i].name), &t[i]);
            if (t[i].option)
                assert_ptr_equal(ssb4d_param_find((ssb4d_op)op, t[i].option), &t[i]);
            for (size_t j = 0; j < i; j++)
                assert_true(strcmp(t[i].name, t[j].name) && t[i].offset != t[j].offset);
        }
    }
    size_t n = 1;
    assert_null(ssb4d_params(SSB4D_OP_COUNT, &n));
    assert_int_equal(n, 0);
    assert_null(ssb4d_param_find(SSB4D_OP_FIT, "no-such"));
}

static void test_checks(void **state)
{
    (void)state;
    ssb4d_fit_params fp;
    ssb4d_fit_params_default(&fp);
    ssb4d_err err;
    const ssb4d_param *trials = ssb4d_param_find(SSB4D_OP_FIT, "trials");
    assert_int_equal(ssb4d_param_parse(trials, &fp, "0", &err), SSB4D_EINVAL);
    assert_string_equal(err.msg, "trials must be a whole number in 1..1000000; got '0'");
    assert_int_equal(ssb4d_param_parse(trials, &fp, "1.5", &err), SSB4D_EINVAL);
    assert_int_equal(fp.trials, 64);
    assert_int_equal(ssb4d_param_parse(trials, &fp, "100", &err), SSB4D_OK);
    assert_int_equal(fp.trials, 100);
    const ssb4d_param *seed = ssb4d_param_find(SSB4D_OP_FIT, "seed");
    assert_int_equal(ssb4d_param_parse(seed, &fp, "18446744073709551615", &err), SSB4D_OK);
    assert_true(fp.seed == UINT64_MAX);
    assert_int_equal(ssb4d_param_parse(seed, &fp, "-1", &err), SSB4D_EINVAL);
    const ssb4d_param *obj = ssb4d_param_find(SSB4D_OP_FIT, "objective");
    assert_int_equal(ssb4d_param_parse(obj, &fp, "loss", &err), SSB4D_OK);
    assert_int_equal(fp.objective, SSB4D_FIT_OBJ_LOSS);
    assert_int_equal(ssb4d_param_parse(obj, &fp, "x", &err), SSB4D_EINVAL);
    assert_string_equal(err.msg, "objective must be band or loss; got 'x'");
    const ssb4d_param *fr = ssb4d_param_find(SSB4D_OP_FIT, "fit-radius");
    double zero[2] = {0, 0}, half[2] = {0.5, 0};
    assert_int_equal(ssb4d_param_set(fr, &fp, zero, &err), SSB4D_EINVAL);
    assert_int_equal(ssb4d_param_set(fr, &fp, half, &err), SSB4D_OK);
    assert_true(fp.fit_radius == 0.5);

    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    const ssb4d_param *up = ssb4d_param_find(SSB4D_OP_PREVIEW, "upsample");
    char what[160];
    assert_string_equal(ssb4d_param_describe(up, what, sizeof what), "1, 2, 3, 4, 8 or auto");
    assert_int_equal(ssb4d_param_parse(up, &q, "5", &err), SSB4D_EINVAL);
    assert_int_equal(ssb4d_param_parse(up, &q, "8", &err), SSB4D_OK);
    assert_int_equal(q.upsample, 8);
    assert_int_equal(ssb4d_param_parse(up, &q, "auto", &err), SSB4D_OK);
    assert_int_equal(q.upsample, 0);

    ssb4d_thick th = {{0, 0}, 0};
    const ssb4d_param *tilt = ssb4d_param_find(SSB4D_OP_THICK, "tilt_mrad");
    assert_int_equal(ssb4d_param_parse(tilt, &th, "3,-4", &err), SSB4D_OK);
    assert_true(th.tilt_mrad[0] == 3 && th.tilt_mrad[1] == -4);
    assert_int_equal(ssb4d_param_parse(tilt, &th, "2", &err), SSB4D_OK);
    assert_true(th.tilt_mrad[0] == 2 && th.tilt_mrad[1] == 2);
    assert_int_equal(ssb4d_param_parse(tilt, &th, "1,2000", &err), SSB4D_EINVAL);
    assert_true(th.tilt_mrad[0] == 2 && th.tilt_mrad[1] == 2);

    ssb4d_aberrations ab;
    memset(&ab, 0, sizeof ab);
    const ssb4d_param *phi32 = ssb4d_param_find(SSB4D_OP_ABERRATIONS, "phi32_deg");
    assert_int_equal(ssb4d_param_parse(phi32, &ab, "20", &err), SSB4D_OK);
    assert_true(ab.phi_deg[SSB4D_C32] == 20);
    assert_null(ssb4d_param_find(SSB4D_OP_ABERRATIONS, "phi30_deg"));
    double inf[2] = {INFINITY, 0}, nan[2] = {NAN, 0};
    const ssb4d_param *c10 = ssb4d_param_find(SSB4D_OP_ABERRATIONS, "c10");
    assert_int_equal(ssb4d_param_set(c10, &ab, inf, &err), SSB4D_EINVAL);
    assert_int_equal(ssb4d_param_set(c10, &ab, nan, &err), SSB4D_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_names),
        cmocka_unit_test(test_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
