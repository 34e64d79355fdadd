/* test_plan.c — the planner against the run (issue 5): for a budget with G resident, one that
 * streams the fit's outer BF pixels with float32 previews and one with half-precision previews,
 * ssb4d_session_run's tracked peak and after of every stage equal the plan's replay (to the byte
 * with G resident; within 10 % and never above it when streaming); the G hash, the fit's trace and (float32) the phase are the same bits
 * for every budget; the preview after the region refit's rebuild equals the first; a budget
 * below the smallest is refused with the smallest budget named. Also: sizes, scripts, and the
 * plan of the reference shape (what fits which machine). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssb4d_advanced.h"

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

typedef struct {
    char dir[64], path[96];
    ssb4d_calib_params calib;
} dataset;

static int setup(void **state)
{
    dataset *d = calloc(1, sizeof *d);
    snprintf(d->dir, sizeof d->dir, "/tmp/ssb4d_plan_XXXXXX");
    if (!d || !mkdtemp(d->dir))
        return -1;
    snprintf(d->path, sizeof d->path, "%s/d.qem", d->dir);
    /* 64x64 scan (a 32x32 region refit), 48x48 detector: a second or two to simulate. */
    ssb4d_sim_params sp;
    ssb4d_err err = {0};
    ssb4d_sim_params_preset(&sp, "tiny", &err);
    sp.scan_n = 64;
    sp.scan_cells = 6;
    sp.seed = 5;
    ssb4d_sim_info info;
    if (ssb4d_simulate(&sp, d->path, 1, NULL, &info, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    ssb4d_calib_params_default(&d->calib);
    d->calib.kv = sp.kv;
    d->calib.semiangle_mrad = sp.semiangle_mrad;
    d->calib.scan_step_A[0] = d->calib.scan_step_A[1] = info.scan_step_A;
    d->calib.det_sampling_mrad[0] = d->calib.det_sampling_mrad[1] = info.det_sampling_mrad;
    d->calib.rotation_deg = 0;
    *state = d;
    return 0;
}

static int teardown(void **state)
{
    dataset *d = *state;
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", d->dir);
    free(d);
    return 0;
}

static ssb4d_status run(const dataset *d, size_t budget, ssb4d_preview_precision prec, ssb4d_session_report *r,
                        ssb4d_err *err)
{
    ssb4d_session_params p;
    ssb4d_session_params_default(&p);
    p.calib = d->calib;
    p.memory_bytes = budget;
    p.preview = prec;
    p.hashes = 1;
    ssb4d_session_script s;
    ssb4d_session_script_default(&s);
    s.drags = 3; /* the same buffers as 20; fewer for the test's time */
    return ssb4d_session_run(d->path, &p, &s, r, err);
}

static void within(size_t measured, size_t predicted, const char *what, const char *stage)
{
    double rel = fabs((double)measured - (double)predicted) / (double)(measured > 0 ? measured : 1);
    if (rel > 0.10)
        fail_msg("%s %s: measured %zu, planned %zu (%.1f %%)", stage, what, measured, predicted, 100 * rel);
}

/* Resident: every stage's tracked peak and after are the replay's to the byte. Streaming: within
 * 10 %, and no stage's peak above the replay's (the replay bounds the decode blocks of streamed
 * groups and a Nelder–Mead shrink's k tables: a plan at the budget must not be exceeded). */
static void check_against_plan(const ssb4d_session_report *r)
{
    const ssb4d_plan *p = &r->plan;
    int exact = !strcmp(p->mode, "resident");
    assert_int_equal(r->n_stages, p->n_stages);
    for (size_t i = 0; i < r->n_stages; i++) {
        assert_string_equal(r->stages[i].name, p->stages[i].name);
        within(r->stages[i].peak_bytes, p->stages[i].peak_bytes, "peak", r->stages[i].name);
        within(r->stages[i].after_bytes, p->stages[i].after_bytes, "after", r->stages[i].name);
        if (exact && (r->stages[i].peak_bytes != p->stages[i].peak_bytes ||
                      r->stages[i].after_bytes != p->stages[i].after_bytes))
            fail_msg("%s: measured %zu / %zu, planned %zu / %zu (resident: to the byte)", r->stages[i].name,
                     r->stages[i].peak_bytes, r->stages[i].after_bytes, p->stages[i].peak_bytes,
                     p->stages[i].after_bytes);
        if (r->stages[i].peak_bytes > p->stages[i].peak_bytes)
            fail_msg("%s: measured peak %zu above the planned %zu", r->stages[i].name, r->stages[i].peak_bytes,
                     p->stages[i].peak_bytes);
    }
    within(r->session_peak_bytes, p->session_peak_bytes, "session peak", "session");
    assert_true(r->session_peak_bytes <= p->memory_bytes);
}

static void print_table(const char *label, const ssb4d_session_report *r)
{
    printf("  %s: %s%s, session peak %.2f MiB (planned %.2f), G %.2f MiB, encoded %.2f MiB\n", label, r->plan.mode,
           r->plan.preview_half ? " + half previews" : "", r->session_peak_bytes / (double)MIB,
           r->plan.session_peak_bytes / (double)MIB, r->g_bytes / (double)MIB, r->encoded_bytes / (double)MIB);
    for (size_t i = 0; i < r->n_stages; i++)
        printf("    %-22s %8.2f / %-8.2f MiB   planned %8.2f / %-8.2f   (%+lld / %+lld bytes)\n", r->stages[i].name,
               r->stages[i].peak_bytes / (double)MIB, r->stages[i].after_bytes / (double)MIB,
               r->plan.stages[i].peak_bytes / (double)MIB, r->plan.stages[i].after_bytes / (double)MIB,
               (long long)r->plan.stages[i].peak_bytes - (long long)r->stages[i].peak_bytes,
               (long long)r->plan.stages[i].after_bytes - (long long)r->stages[i].after_bytes);
}

static void test_budgets(void **state)
{
    dataset *d = *state;
    ssb4d_err err = {0};
    ssb4d_session_report *big = calloc(3, sizeof *big);
    assert_non_null(big);
    /* 1. ample: everything resident */
    if (run(d, 4 * GIB, SSB4D_PREVIEW_FLOAT, &big[0], &err))
        fail_msg("%s", err.msg);
    assert_string_equal(big[0].plan.mode, "resident");
    print_table("4 GiB", &big[0]);
    check_against_plan(&big[0]);
    /* 2. between the streaming minimum and resident: float32 previews, streamed outer pixels */
    const ssb4d_plan *p0 = &big[0].plan;
    size_t tight = p0->encoded_bytes + p0->g_bytes * 3 / 4 + 2 * MIB;
    assert_true(tight < p0->encoded_bytes + p0->g_bytes);
    if (run(d, tight, SSB4D_PREVIEW_FLOAT, &big[1], &err))
        fail_msg("%s", err.msg);
    assert_string_equal(big[1].plan.mode, "streaming");
    assert_false(big[1].plan.preview_half);
    assert_true(big[1].plan.fit_resident_bytes < big[1].plan.g_bytes);
    print_table("tight, float previews", &big[1]);
    check_against_plan(&big[1]);
    /* 3. the same budget with half-precision previews */
    if (run(d, tight, SSB4D_PREVIEW_AUTO, &big[2], &err))
        fail_msg("%s", err.msg);
    assert_true(big[2].plan.preview_half);
    print_table("tight, auto previews", &big[2]);
    check_against_plan(&big[2]);

    /* Same bits: G and the fit for every budget; the phase for the float32 previews. */
    for (int i = 1; i < 3; i++) {
        assert_string_equal(big[0].g_sha256, big[i].g_sha256);
        assert_string_equal(big[0].trace_sha256, big[i].trace_sha256);
        assert_memory_equal(&big[0].C10_nm, &big[i].C10_nm, sizeof(double));
        assert_memory_equal(&big[0].region_C10_nm, &big[i].region_C10_nm, sizeof(double));
    }
    assert_string_equal(big[0].phase_sha256, big[1].phase_sha256);
    assert_memory_equal(&big[0].release_loss, &big[1].release_loss, sizeof(double));
    assert_string_not_equal(big[0].phase_sha256, big[2].phase_sha256);
    assert_true(fabs(big[0].release_loss - big[2].release_loss) < 1e-4 * big[0].release_loss);
    /* The region refit freed G in the tight runs; the next preview rebuilt it with the same bits. */
    assert_true(big[1].plan.region_frees_g && big[1].rebuilt_same_bits);
    assert_true(big[2].plan.region_frees_g && big[2].rebuilt_same_bits);
    /* The tight runs stayed below the budget and below encoded + G. */
    for (int i = 1; i < 3; i++)
        assert_true(big[i].session_peak_bytes <= tight);
    free(big);
}

static void test_too_small(void **state)
{
    dataset *d = *state;
    ssb4d_err err = {0};
    ssb4d_session_report *r = calloc(1, sizeof *r);
    assert_non_null(r);
    /* Smaller than the encoded data (3 MiB): refused before any work. */
    assert_int_equal(run(d, 2 * MIB, SSB4D_PREVIEW_AUTO, r, &err), SSB4D_ENOMEM);
    printf("  2 MiB: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "does not fit"));
    assert_true(r->does_not_fit);
    assert_int_equal(r->n_stages, 1); /* only the load ran */
    free(r);
}

static void test_reference_shape(void **state)
{
    (void)state;
    ssb4d_plan_input in;
    ssb4d_plan_input_default(&in);
    in.scan[0] = in.scan[1] = 512;
    in.det[0] = in.det[1] = 192;
    in.n_bf = 8939;
    in.encoded_bytes = (size_t)(2.07 * GIB);
    in.region[0] = in.region[1] = 256;
    in.threads = 2;
    ssb4d_plan p;
    ssb4d_err err = {0};
    const double gb[] = {8, 16, 24, 32, 64, 128};
    for (int i = 0; i < 6; i++) {
        in.memory_bytes = (size_t)(gb[i] * 1e9 * 0.9);
        assert_int_equal(ssb4d_plan_make(&in, &p, &err), SSB4D_OK);
        printf("  %3.0f GB: %s %s%s, session peak %.2f GiB\n", gb[i], p.fits ? "fits" : "does not fit", p.mode,
               p.preview_half ? " + half previews" : "", p.session_peak_bytes / (double)GIB);
        assert_true(p.fits);
        assert_true(p.session_peak_bytes <= in.memory_bytes);
        if (gb[i] >= 16)
            assert_string_equal(p.mode, "resident");
        else
            assert_true(p.preview_half);
    }
    /* G = 8939 planes of 512 x 257 complex64 (padded to 64 bytes). */
    assert_int_equal(p.g_bytes, (size_t)8939 * ((512 * 257 + 7) / 8 * 8) * 8);
    /* Resident: the session peak is the G build: encoded + G + one decode block + scratch. */
    assert_true(p.session_peak_bytes < p.encoded_bytes + p.g_bytes + GIB);
    in.memory_bytes = 2 * GIB;
    assert_int_equal(ssb4d_plan_make(&in, &p, &err), SSB4D_OK);
    assert_false(p.fits);
    assert_true(p.min_memory_bytes > 2 * GIB);
    assert_non_null(strstr(p.reason, "GiB"));
    /* absurd input */
    in.n_bf = 0;
    assert_int_equal(ssb4d_plan_make(&in, &p, &err), SSB4D_EINVAL);
    in.n_bf = 8939;
    in.scan[0] = 1;
    assert_int_equal(ssb4d_plan_make(&in, &p, &err), SSB4D_EINVAL);
}

static void test_sizes(void **state)
{
    (void)state;
    size_t v;
    assert_int_equal(ssb4d_parse_size("16G", &v), 0);
    assert_int_equal(v, 16 * GIB);
    assert_int_equal(ssb4d_parse_size("8GiB", &v), 0);
    assert_int_equal(v, 8 * GIB);
    assert_int_equal(ssb4d_parse_size("512M", &v), 0);
    assert_int_equal(v, 512 * MIB);
    assert_int_equal(ssb4d_parse_size("1.5G", &v), 0);
    assert_int_equal(v, 3 * GIB / 2);
    assert_int_equal(ssb4d_parse_size("2000000", &v), 0);
    assert_int_equal(v, 2000000);
    const char *bad[] = {"", "G", "-1G", "0", "12Q", "1e30", "nan", "inf", "1GG", " 1G", "1 G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(ssb4d_parse_size(bad[i], &v), -1);
    assert_true(ssb4d_mem_total() >= ssb4d_mem_available());
}

static void test_script(void **state)
{
    dataset *d = *state;
    char path[128];
    snprintf(path, sizeof path, "%s/s.json", d->dir);
    struct {
        const char *text;
        ssb4d_status want;
    } cases[] = {
        {"{\"upsample\": 2, \"drags\": 5, \"releases\": 1, \"region\": {\"rows\": [0, 32], \"cols\": [16, 48]}}", SSB4D_OK},
        {"{\"upsample\": \"auto\", \"region\": null, \"fft\": false, \"save\": false}", SSB4D_OK},
        {"{\"upsample\": 5}", SSB4D_EFORMAT},
        {"{\"drags\": -1}", SSB4D_EFORMAT},
        {"{\"drags\": 1.5}", SSB4D_EFORMAT},
        {"{\"frobnicate\": 1}", SSB4D_EFORMAT},
        {"{\"region\": {\"rows\": [0, 32]}}", SSB4D_EFORMAT},
        {"[1, 2]", SSB4D_EFORMAT},
        {"{\"drags\": ", SSB4D_EFORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(cases[i].text, f);
        fclose(f);
        ssb4d_session_script s;
        ssb4d_err err = {0};
        assert_int_equal(ssb4d_session_script_read(path, &s, &err), cases[i].want);
        if (i == 0) {
            assert_int_equal(s.upsample, 2);
            assert_int_equal(s.drags, 5);
            assert_int_equal(s.releases, 1);
            assert_int_equal(s.region_rect[2], 16);
            assert_int_equal(s.region_rect[3], 48);
        } else if (i == 1)
            assert_true(!s.region && !s.fft && !s.save && s.upsample == 0);
        else
            assert_true(err.msg[0] != 0);
    }
    ssb4d_session_script s;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_session_script_read("/nonexistent/s.json", &s, &err), SSB4D_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_reference_shape),
        cmocka_unit_test(test_script),
        cmocka_unit_test(test_too_small),
        cmocka_unit_test(test_budgets),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
