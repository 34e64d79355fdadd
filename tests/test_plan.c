/* test_plan.c — the planner against the run (issue 5): for a budget with G resident, one that
 * streams the fit's outer BF pixels with float32 previews and one with half-precision previews,
 * ssb4d_session_run's tracked peak and after of every stage equal the plan's replay (to the byte
 * with G resident; within 10 % and never above it when streaming); the G hash, the fit's trace and (float32) the phase are the same bits
 * for every budget; the preview after the region refit's rebuild equals the first; a budget
 * below the smallest is refused with the smallest budget named. Also: sizes, scripts, and the
 * plan of the reference shape (what fits which machine). Issue 16: one rank of a distributed
 * session (plan_make_rank): ranks = 1 is the one-process plan to the byte; a rank's share of the
 * BF blocks and of G by the exact formula (uneven splits); its stages are the one-process stages
 * of its share plus the chain's buffers; the smallest rank count; bad rank counts refused. */
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

#include "plan/plan.h"
#include "fixture.h"

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

typedef struct {
    char dir[64], path[96];
    ssb4d_calib_params calib;
} dataset;

static int setup(void **state)
{
    dataset *d = calloc(1, sizeof *d);
    if (!d || fx_tmpdir(d->dir, sizeof d->dir, "plan"))
        return -1;
    snprintf(d->path, sizeof d->path, "%s/d.qem", d->dir);
    /* 64x64 scan (a 32x32 region refit), 48x48 detector: a second or two to simulate. */
    fx_sim sim;
    if (fx_sim_params(&sim, 64, 6))
        return -1;
    sim.sp.seed = 5;
    ssb4d_err err = {0};
    if (ssb4d_simulate(&sim.sp, d->path, 1, NULL, &sim.info, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    fx_calib_params(&sim, &d->calib);
    *state = d;
    return 0;
}

static int teardown(void **state)
{
    dataset *d = *state;
    fx_tmpdir_remove(d->dir);
    free(d);
    return 0;
}

static ssb4d_status run(const dataset *d, size_t budget, ssb4d_preview_precision prec, ssb4d_session_report *r,
                        ssb4d_err *err)
{
    ssb4d_session_params p;
    ssb4d_session_params_default(&p);
    p.session.calib = d->calib;
    p.session.memory_bytes = budget;
    p.session.preview = prec;
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


/* ---- issue 16: one rank of N ------------------------------------------------------------------ */

static void rank_input(ssb4d_plan_input *in, size_t side, size_t det, size_t n_bf, size_t budget)
{
    ssb4d_plan_input_default(in);
    in->scan[0] = in->scan[1] = side;
    in->det[0] = in->det[1] = det;
    in->n_bf = n_bf;
    in->encoded_bytes = (size_t)((double)side * side * det * det * 2.0 / 13.1);
    in->region[0] = in->region[1] = ssb_plan_region_side(side);
    in->upsample = 2;
    in->threads = 2;
    in->memory_bytes = budget;
}

/* ranks = 1 is ssb4d_plan_make to the byte, whatever the budget makes of G. */
static void test_ranks_one(void **state)
{
    (void)state;
    ssb4d_plan_input in;
    rank_input(&in, 512, 192, 8939, 0);
    in.encoded_bytes = (size_t)(2.07 * GIB);
    ssb4d_plan *a = calloc(2, sizeof *a);
    assert_non_null(a);
    ssb4d_err err = {0};
    const size_t budgets[] = {64 * GIB, 12 * GIB, 6 * GIB, 3 * GIB, 1 * GIB};
    const ssb4d_preview_precision prec[] = {SSB4D_PREVIEW_AUTO, SSB4D_PREVIEW_FLOAT};
    for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++)
        for (int k = 0; k < 2; k++) {
            in.memory_bytes = budgets[i];
            in.preview = prec[k];
            assert_int_equal(ssb4d_plan_make(&in, &a[0], &err), SSB4D_OK);
            plan_rank_share sh;
            memset(&a[1], 0xA5, sizeof a[1]);
            assert_int_equal(plan_make_rank(&in, 1, PLAN_RANK_LARGEST, &a[1], &sh, &err), SSB4D_OK);
            assert_memory_equal(&a[0], &a[1], sizeof a[0]);
            assert_int_equal(plan_make_rank(&in, 1, 0, &a[1], NULL, &err), SSB4D_OK);
            assert_memory_equal(&a[0], &a[1], sizeof a[0]);
            assert_int_equal(sh.local_bf, 8939);
            assert_int_equal(sh.local_blocks, 140);
            assert_int_equal(sh.chain_loss_bytes, 0);
            assert_int_equal(sh.chain_fit_bytes, 0);
            assert_true(sh.calibrates && !sh.holds_partials);
        }
    free(a);
}

/* The split: n_bf = 1000 is 16 blocks (the last of 40 pixels); 3 ranks own 5, 5 and 6 of them;
 * the largest share is ceil(16 / 3) = 6 blocks = 384 pixels; stored planes in proportion, rounded
 * up; the per-rank G is those planes in float32 and shrinks as the rank count grows. */
static void test_ranks_share(void **state)
{
    (void)state;
    plan_rank_share r = plan_rank_share_of(1000, 0, 3, PLAN_RANK_LARGEST);
    assert_int_equal(r.blocks, 16);
    assert_int_equal(r.local_blocks, 6);
    assert_int_equal(r.local_bf, 384);
    assert_int_equal(r.local_stored, 384);
    assert_true(r.calibrates && r.holds_partials);
    const size_t want_blocks[3] = {5, 5, 6}, want_bf[3] = {320, 320, 360};
    size_t sum = 0;
    for (size_t k = 0; k < 3; k++) {
        plan_rank_share q = plan_rank_share_of(1000, 0, 3, k);
        assert_int_equal(q.local_blocks, want_blocks[k]);
        assert_int_equal(q.local_bf, want_bf[k]);
        assert_int_equal(q.calibrates, k == 0);
        assert_int_equal(q.holds_partials, k > 0);
        sum += q.local_bf;
    }
    assert_int_equal(sum, 1000);
    /* 950 stored: ceil(950 * 384 / 1000) = 365 on the largest rank */
    r = plan_rank_share_of(1000, 950, 3, PLAN_RANK_LARGEST);
    assert_int_equal(r.local_stored, 365);
    /* more ranks than blocks: one block each at most */
    r = plan_rank_share_of(1000, 0, 40, PLAN_RANK_LARGEST);
    assert_int_equal(r.local_blocks, 1);
    assert_int_equal(r.local_bf, 64);
    r = plan_rank_share_of(1000, 0, 40, 39);
    assert_int_equal(r.local_blocks, 1);
    assert_int_equal(r.local_bf, 40); /* the last block's 40 pixels */
    r = plan_rank_share_of(1000, 0, 40, 1);
    assert_int_equal(r.local_blocks, 0);

    /* The plan's G for a 128x128 scan, 1000 BF pixels of which 950 stored. */
    ssb4d_plan_input in;
    rank_input(&in, 128, 64, 1000, 4 * GIB);
    in.n_stored = 950;
    ssb4d_plan *p = calloc(1, sizeof *p);
    assert_non_null(p);
    ssb4d_err err = {0};
    size_t plane = plan_plane_bytes(128, 128), last = (size_t)-1;
    assert_int_equal(plane, (size_t)((128 * 65 + 7) / 8 * 8) * 8);
    const size_t ranks[] = {1, 2, 3, 4, 5, 8, 16, 17, 100};
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
        size_t N = ranks[i];
        plan_rank_share sh;
        assert_int_equal(plan_make_rank(&in, N, PLAN_RANK_LARGEST, p, &sh, &err), SSB4D_OK);
        size_t kb = (16 + N - 1) / N, px = 64 * kb < 1000 ? 64 * kb : 1000;
        size_t stored = (950 * px + 999) / 1000;
        assert_int_equal(sh.local_blocks, kb);
        assert_int_equal(sh.local_bf, px);
        assert_int_equal(sh.local_stored, stored);
        assert_int_equal(p->g_bytes, stored * plane);
        assert_int_equal(sh.g_bytes, p->g_bytes);
        assert_true(p->fits);
        assert_true(p->g_bytes <= last);
        last = p->g_bytes;
        printf("  %3zu ranks: %zu blocks, %zu pixels, %zu planes, G %.2f MiB a rank, peak %.2f MiB\n", N, kb, px, stored,
               p->g_bytes / (double)MIB, p->session_peak_bytes / (double)MIB);
        if (N > 1) { /* every plane resident in float32, no half copy */
            assert_string_equal(p->mode, "resident");
            assert_false(p->preview_half);
            assert_int_equal(p->fit_resident_bytes, p->g_bytes);
            assert_int_equal(p->preview_resident_bytes, p->g_bytes);
            assert_int_equal(p->resident_bytes, p->encoded_bytes + p->g_bytes);
        }
    }
    assert_int_equal(last, 64 * 950 / 1000 * plane + plane); /* ceil(60.8) = 61 planes */
    free(p);
}

/* A rank's stages are the one-process stages of a G of its share, plus the chain's buffers during
 * the passes that reduce: none during the G build, the loss's over all BF pixels during a release
 * (to the byte), and the calibration only on rank 0. */
static void test_ranks_stages(void **state)
{
    (void)state;
    ssb4d_plan_input in, loc;
    rank_input(&in, 128, 64, 1000, 4 * GIB);
    in.upsample = 1; /* releases in one fused pass: the chain is their peak */
    ssb4d_plan *p = calloc(3, sizeof *p);
    assert_non_null(p);
    ssb4d_err err = {0};
    plan_rank_share sh, s1;
    assert_int_equal(plan_make_rank(&in, 3, PLAN_RANK_LARGEST, &p[0], &sh, &err), SSB4D_OK);
    assert_true(p[0].fits);
    /* one process holding the same share (the parallax's bins are the same at this size) */
    loc = in;
    loc.n_bf = sh.local_bf;
    assert_int_equal(ssb4d_plan_make(&loc, &p[1], &err), SSB4D_OK);
    assert_string_equal(p[1].mode, "resident");
    assert_int_equal(p[0].n_stages, p[1].n_stages);
    /* the chain: (2 + 6 blocks) x (128 x 128 + 1) doubles for the exact loss */
    assert_int_equal(sh.chain_loss_bytes, (size_t)8 * (128 * 128 + 1) * 8);
    assert_int_equal(plan_chain_bytes(&sh, 128 * 128 + 1, 1, 0), sh.chain_loss_bytes);
    assert_int_equal(plan_chain_bytes(&sh, 10, 2, 100), (2 + 2) * 2 * 10 * 8); /* a view: its own blocks */
    assert_true(sh.chain_fit_bytes > 0);
    int saw_release = 0;
    for (size_t i = 0; i < p[0].n_stages; i++) {
        const ssb4d_plan_stage *a = &p[0].stages[i], *b = &p[1].stages[i];
        assert_string_equal(a->name, b->name);
        printf("    %-22s rank %8.3f / %-8.3f one process of its share %8.3f / %-8.3f MiB\n", a->name,
               a->peak_bytes / (double)MIB, a->after_bytes / (double)MIB, b->peak_bytes / (double)MIB,
               b->after_bytes / (double)MIB);
        if (!strcmp(a->name, "fit")) {
            assert_true(a->peak_bytes > b->peak_bytes);
            assert_true(a->peak_bytes <= b->peak_bytes + sh.chain_fit_bytes);
            assert_int_equal(a->after_bytes, b->after_bytes);
        } else if (strstr(a->name, "releases")) {
            assert_int_equal(a->peak_bytes, b->peak_bytes + sh.chain_loss_bytes);
            saw_release = 1;
        } else if (strncmp(a->name, "region", 6) && strcmp(a->name, "next full preview")) {
            /* load, calibrate, G build, previews, drags, save: no chain */
            assert_int_equal(a->peak_bytes, b->peak_bytes);
            assert_int_equal(a->after_bytes, b->after_bytes);
        }
    }
    assert_true(saw_release);
    /* Rank 1 of 3 has no calibration: its stage holds only the encoded data. */
    assert_int_equal(plan_make_rank(&in, 3, 1, &p[2], &s1, &err), SSB4D_OK);
    assert_false(s1.calibrates);
    assert_int_equal(s1.local_bf, 320);
    assert_string_equal(p[2].stages[1].name, "calibrate");
    assert_int_equal(p[2].stages[1].peak_bytes, p[2].encoded_bytes);
    assert_true(p[0].stages[1].peak_bytes > p[0].encoded_bytes);
    /* Rank 0 keeps no partials: less than rank 1 in the release. */
    assert_int_equal(plan_make_rank(&in, 3, 0, &p[2], &s1, &err), SSB4D_OK);
    assert_int_equal(s1.chain_loss_bytes, (size_t)2 * (128 * 128 + 1) * 8);
    assert_int_equal(p[2].g_bytes, 320 * plan_plane_bytes(128, 128));

    /* Per rank "does not fit": the encoded data and the rank's G alone leave no room for the G
     * build's block (no streaming to fall back on), and the reason says what a rank needs; at the
     * peak planned under an ample budget it fits (a smaller budget only shrinks the calibration's
     * frame block and the decode block). */
    size_t need = p[0].session_peak_bytes;
    in.memory_bytes = p[0].encoded_bytes + p[0].g_bytes;
    assert_int_equal(plan_make_rank(&in, 3, PLAN_RANK_LARGEST, &p[1], NULL, &err), SSB4D_OK);
    assert_false(p[1].fits);
    assert_true(p[1].min_memory_bytes > in.memory_bytes);
    assert_non_null(strstr(p[1].reason, "one rank of 3 holds 384 of 1000 BF pixels"));
    printf("  does not fit: %s\n", p[1].reason);
    in.memory_bytes = need;
    assert_int_equal(plan_make_rank(&in, 3, PLAN_RANK_LARGEST, &p[1], NULL, &err), SSB4D_OK);
    assert_true(p[1].fits);
    assert_true(p[1].session_peak_bytes <= need);

    /* bad rank counts */
    assert_int_equal(plan_make_rank(&in, 0, PLAN_RANK_LARGEST, &p[1], NULL, &err), SSB4D_EINVAL);
    assert_int_equal(plan_make_rank(&in, PLAN_MAX_RANKS + 1, PLAN_RANK_LARGEST, &p[1], NULL, &err), SSB4D_EINVAL);
    assert_int_equal(plan_make_rank(&in, 3, 3, &p[1], NULL, &err), SSB4D_EINVAL);
    assert_int_equal(plan_make_rank(&in, PLAN_MAX_RANKS, PLAN_RANK_LARGEST, &p[1], NULL, &err), SSB4D_OK);
    free(p);
}

/* The smallest rank count: 1024x1024 x 256x256 with 16,000 BF pixels under 64 GiB a rank. G is
 * 16000 x 1024 x 513 x 8 bytes (62.6 GiB) beside 9.8 GiB of encoded data: one process fits only by
 * streaming, two ranks hold half of G each. */
static void test_ranks_smallest(void **state)
{
    (void)state;
    ssb4d_plan_input in;
    rank_input(&in, 1024, 256, 16000, 64 * GIB);
    ssb4d_plan *p = calloc(1, sizeof *p);
    assert_non_null(p);
    ssb4d_err err = {0};
    plan_ranks_answer a;
    assert_int_equal(plan_smallest_ranks(&in, PLAN_MAX_RANKS, &a, &err), SSB4D_OK);
    printf("  1024^2, 64 GiB a rank: %zu ranks (one process streams: %d)\n", a.ranks, a.one_process_streams);
    assert_int_equal(plan_plane_bytes(1024, 1024), (size_t)1024 * 513 * 8);
    assert_true(a.ranks >= 2 && a.ranks <= 4);
    assert_true(a.one_process_streams);
    plan_rank_share sh;
    assert_int_equal(plan_make_rank(&in, a.ranks, PLAN_RANK_LARGEST, p, &sh, &err), SSB4D_OK);
    assert_true(p->fits);
    assert_true(p->session_peak_bytes <= in.memory_bytes);
    assert_true(p->g_bytes < (size_t)16000 * 1024 * 513 * 8 / a.ranks + 64 * plan_plane_bytes(1024, 1024));
    if (a.ranks > 2) { /* the smallest: one rank fewer does not fit */
        assert_int_equal(plan_make_rank(&in, a.ranks - 1, PLAN_RANK_LARGEST, p, NULL, &err), SSB4D_OK);
        assert_false(p->fits);
    }
    ssb4d_plan_input one = in;
    one.preview = SSB4D_PREVIEW_FLOAT;
    assert_int_equal(ssb4d_plan_make(&one, p, &err), SSB4D_OK);
    assert_string_not_equal(p->mode, "resident");
    /* 8 GiB holds less than the encoded data: no rank count fits, and the reason says so */
    in.memory_bytes = 8 * GIB;
    assert_int_equal(plan_smallest_ranks(&in, PLAN_MAX_RANKS, &a, &err), SSB4D_OK);
    assert_int_equal(a.ranks, 0);
    assert_int_equal(a.tried, 250);
    assert_non_null(strstr(a.reason, "even 250 ranks"));
    printf("  8 GiB: %s\n", a.reason);
    /* ample: one process, G resident */
    in.memory_bytes = 512 * GIB;
    assert_int_equal(plan_smallest_ranks(&in, PLAN_MAX_RANKS, &a, &err), SSB4D_OK);
    assert_int_equal(a.ranks, 1);
    /* 2048^2: more ranks than 1024^2 at the same budget */
    size_t r1024, r2048;
    in.memory_bytes = 120 * GIB;
    assert_int_equal(plan_smallest_ranks(&in, PLAN_MAX_RANKS, &a, &err), SSB4D_OK);
    r1024 = a.ranks;
    rank_input(&in, 2048, 256, 16000, 120 * GIB);
    assert_int_equal(plan_smallest_ranks(&in, PLAN_MAX_RANKS, &a, &err), SSB4D_OK);
    r2048 = a.ranks;
    printf("  120 GiB a rank: %zu ranks at 1024^2, %zu at 2048^2\n", r1024, r2048);
    assert_true(r1024 >= 1 && r2048 > r1024);
    assert_int_equal(plan_smallest_ranks(&in, 0, &a, &err), SSB4D_EINVAL);
    free(p);
}

/* The public planner calls (include/ssb4d.h, what `ssb4d plan` prints) give plan.h's and
 * device_model.h's figures: the largest rank's plan and share, the smallest rank count, and the
 * device replay of the field's and the region's G (no GPU here: cuFFT's area estimated). */
static void test_public_calls(void **state)
{
    (void)state;
    ssb4d_plan_input in;
    rank_input(&in, 512, 192, 8939, 6 * GIB);
    assert_int_equal(ssb4d_plan_region_side(512), ssb_plan_region_side(512));
    assert_int_equal(ssb4d_plan_region_side(40), 0);
    ssb4d_plan *p = calloc(2, sizeof *p);
    assert_non_null(p);
    ssb4d_err err = {0};
    plan_rank_share sh;
    ssb4d_plan_rank_share ps;
    assert_int_equal(plan_make_rank(&in, 3, PLAN_RANK_LARGEST, &p[0], &sh, &err), SSB4D_OK);
    assert_int_equal(ssb4d_plan_make_rank(&in, 3, &p[1], &ps, &err), SSB4D_OK);
    assert_memory_equal(&p[0], &p[1], sizeof p[0]);
    assert_int_equal(ps.ranks, 3);
    assert_int_equal(ps.blocks, sh.blocks);
    assert_int_equal(ps.local_blocks, sh.local_blocks);
    assert_int_equal(ps.local_bf, sh.local_bf);
    assert_int_equal(ps.local_stored, sh.local_stored);
    assert_int_equal(ps.g_bytes, sh.g_bytes);
    assert_int_equal(ps.g_all_bytes, (size_t)8939 * plan_plane_bytes(512, 512));
    assert_int_equal(ps.chain_loss_bytes, sh.chain_loss_bytes);
    assert_int_equal(ps.chain_fit_bytes, sh.chain_fit_bytes);
    assert_int_equal(ssb4d_plan_make_rank(&in, 0, &p[1], NULL, &err), SSB4D_EINVAL);
    assert_int_equal(ssb4d_plan_make_rank(&in, SSB4D_PLAN_MAX_RANKS + 1, &p[1], NULL, &err), SSB4D_EINVAL);
    plan_ranks_answer a;
    ssb4d_plan_ranks_answer pa;
    assert_int_equal(plan_smallest_ranks(&in, 64, &a, &err), SSB4D_OK);
    assert_int_equal(ssb4d_plan_smallest_ranks(&in, 64, &pa, &err), SSB4D_OK);
    assert_int_equal(pa.ranks, a.ranks);
    assert_int_equal(pa.one_process_streams, a.one_process_streams);
    assert_int_equal(pa.tried, a.tried);
    assert_int_equal(pa.tried_need, a.tried_need);
    assert_string_equal(pa.reason, a.reason);
    /* the calibration's block: what plan.c plans */
    size_t b0 = 0, b1 = 0;
    assert_int_equal(ssb4d_calib_need(GIB, 100 << 20, 192 * 192, 512 * 512, 1, &b0),
                     plan_calib_need(GIB, 100 << 20, 192 * 192, 512 * 512, 1, &b1));
    assert_int_equal(b0, b1);
    /* the device plan, one process and a rank of 3 */
    for (size_t n_ranks = 1; n_ranks <= 3; n_ranks += 2) {
        ssb4d_plan_device_info g;
        assert_int_equal(ssb4d_plan_make_rank(&in, n_ranks, &p[0], &ps, &err), SSB4D_OK);
        ssb4d_plan_device(&in, &p[0], n_ranks, ps.local_stored, 0, &g);
        if (g.gpu[0]) { /* a GPU here: cuFFT's own work areas, not the estimates replayed below */
            assert_true(g.peak_bytes >= g.field.peak_bytes && !g.field.fft_estimated);
            continue;
        }
        dev_session_in d;
        dev_model field, region;
        plan_device_session(&in, 512, 512, &d);
        if (n_ranks > 1)
            d.n_stored = ps.local_stored;
        dev_model_session(&d, &field);
        dev_session_in r;
        plan_device_session(&in, in.region[0], in.region[1], &r);
        r.no_images = 1, r.n_stored = d.n_stored;
        dev_model_session(&r, &region);
        assert_int_equal(g.field.n_slots, field.n_slots);
        assert_int_equal(g.field.planes_bytes, field.planes);
        assert_int_equal(g.field.peak_bytes, dev_model_bytes(&field));
        assert_int_equal(g.field.work_bytes, dev_model_work_bytes(&field));
        assert_int_equal(g.field.fft_work_bytes, field.buf[DEV_WORK]);
        assert_int_equal(g.field.n_stages, field.n_stages);
        for (size_t i = 0; i < field.n_stages; i++) {
            assert_string_equal(g.field.stages[i].name, field.stages[i].name);
            assert_int_equal(g.field.stages[i].bytes, field.stages[i].bytes);
            assert_int_equal(g.field.stages[i].after, field.stages[i].after);
        }
        assert_true(g.have_region);
        assert_int_equal(g.region.peak_bytes, dev_model_bytes(&region));
        size_t with = dev_model_bytes(&region) + (p[0].region_frees_g ? 0 : dev_model_bytes(&field));
        assert_int_equal(g.peak_bytes, with > dev_model_bytes(&field) ? with : dev_model_bytes(&field));
#ifndef SSB4D_HAVE_CUDA
        assert_true(g.field.fft_estimated);
        assert_string_equal(g.gpu, "");
        assert_int_equal(g.fits, -1); /* no GPU, no budget */
#endif
        ssb4d_plan_device(&in, &p[0], n_ranks, ps.local_stored, g.peak_bytes, &g);
        assert_true(g.budget_given && g.fits == 1);
        ssb4d_plan_device(&in, &p[0], n_ranks, ps.local_stored, g.peak_bytes - 1, &g);
        assert_int_equal(g.fits, 0);
    }
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_reference_shape),
        cmocka_unit_test(test_ranks_one),
        cmocka_unit_test(test_ranks_share),
        cmocka_unit_test(test_ranks_stages),
        cmocka_unit_test(test_ranks_smallest),
        cmocka_unit_test(test_public_calls),
        cmocka_unit_test(test_script),
        cmocka_unit_test(test_too_small),
        cmocka_unit_test(test_budgets),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
