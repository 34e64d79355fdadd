/* test_fault.c — allocation-failure injection (ssb4d_mem_fail_after) over a small session, as
 * SQLite's fault-simulation loops: for each call of the session (calibrate, build, fit, preview,
 * object, release, loss, region refit, save, load; a calibration measuring the rotation) the allocations it makes through the session's
 * memory context are counted (N) in an undisturbed run; then for n = 1..N the n-th fails (every
 * other time with all the allocations after it: cleanup that allocates, fallbacks). The
 * call must return SSB4D_ENOMEM with its message (or succeed, having absorbed the fault, with the
 * undisturbed bits), give back every tracked byte it took, and leave the session usable: the same
 * call with no fault gives the undisturbed run's bits, and so does a preview after it. Leaks are
 * LeakSanitizer's to find in the sanitizer build (CI's). Where N is large the walk takes every
 * allocation of the first few and a stride over the rest (SSB4D_FAULT_ALL=1: every one); it
 * prints the count walked (SSB4D_FAULT_STEPS=fit,region: those calls only). One thread (SSB4D_FAULT_THREADS to change): the n-th allocation is
 * then the same in every run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"

/* Per call: its first `full` allocations one by one, then at most `stride_max` more over the rest
 * (the fits are the long calls: fewer). */
static const long full[] = {64, 64, 16, 64, 64, 64, 64, 16, 64, 64, 64};
static const long stride_max[] = {64, 64, 16, 64, 64, 64, 64, 16, 64, 64, 64};

static fx_sim data;    /* the tiny preset: a 32x32 scan, 48x48 detector */
static char dir[64], path[96];
static long walked, faulted, absorbed;

/* CALIBRATE_ROT: a session whose rotation is measured (the moments and the centre of mass). */
enum { CALIBRATE, BUILD, FIT, PREVIEW, OBJECT, RELEASE, LOSS, REGION, SAVE, LOAD, CALIBRATE_ROT, N_STEPS };
static const char *names[N_STEPS] = {"calibrate", "build", "fit",  "preview", "object",       "release",
                                     "loss",      "region", "save", "load",    "calibrate_rot"};
/* Calls that change the session's state get a fresh session for every fault. The fit sets the
 * session's parameters to its result, but starts from its own (given rotation, fixed seed): a
 * second fit in the same session gives the same bits (the retry checks it), so it is walked in
 * one session like the calls that change nothing. */
static const int changes_state[N_STEPS] = {1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static ssb4d_fit_params quick(void)
{
    ssb4d_fit_params fp;
    ssb4d_fit_params_default(&fp);
    fp.trials = 8;        /* the paths, not the fit's accuracy: a short search */
    fp.coarse_bf = 64;    /* on few BF pixels */
    fp.fit_radius = 0.5;
    return fp;
}

static ssb4d_session *open_session(int k)
{
    ssb4d_session_opts o;
    fx_session_opts(&data, &o);
    if (k == CALIBRATE_ROT)
        o.calib.rotation_deg = NAN;
    const char *t = getenv("SSB4D_FAULT_THREADS");
    o.threads = t ? atoi(t) : 1;
    ssb4d_session *s = NULL;
    ssb4d_err err = {0};
    if (ssb4d_session_open_memory(data.counts, SSB4D_U16, data.shape, &o, &s, &err))
        fail_msg("open: %s", err.msg);
    return s;
}

static uint64_t hash_file(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        fail_msg("cannot read %s", p);
    uint64_t h = 1469598103934665603ULL;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        h = fnv(h, buf, n);
    fclose(f);
    return h;
}

/* Runs call k; *h: a digest of what it gives. */
static ssb4d_status run_step(ssb4d_session *s, int k, uint64_t *h, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    uint64_t d = 1469598103934665603ULL;
    size_t n = data.shape[0] * data.shape[1];
    float *img = calloc(2 * n, sizeof *img), *ph = calloc(n, sizeof *ph);
    double loss = 0;
    assert_non_null(img);
    assert_non_null(ph);
    switch (k) {
    case CALIBRATE:
    case CALIBRATE_ROT:
        st = ssb4d_session_calibrate(s, err);
        break;
    case BUILD:
        st = ssb4d_session_build(s, err);
        break;
    case FIT: {
        ssb4d_fit_params fp = quick();
        ssb4d_fit_result r;
        memset(&r, 0, sizeof r);
        st = ssb4d_session_fit(s, &fp, &r, err);
        if (!st) {
            d = fnv(d, r.trace_sha256, sizeof r.trace_sha256);
            d = fnv(d, &r.loss, sizeof r.loss);
            d = fnv(d, &r.ab, sizeof r.ab);
        }
        ssb4d_fit_result_free(&r);
        break;
    }
    case PREVIEW: {
        ssb4d_preview_req q;
        ssb4d_preview_req_default(&q);
        q.upsample = 1;
        q.subset = 16;
        q.want_loss = 1;
        st = ssb4d_session_preview(s, &q, ph, &loss, err);
        break;
    }
    case OBJECT:
        st = ssb4d_session_object(s, 1, img, ph, err);
        break;
    case RELEASE:
        st = ssb4d_session_release(s, img, ph, &loss, err);
        break;
    case LOSS:
        st = ssb4d_session_loss(s, &loss, err);
        break;
    case REGION: {
        ssb4d_fit_params fp = quick();
        size_t rect[4] = {0, 32, 0, 32};
        ssb4d_fit_result r;
        memset(&r, 0, sizeof r);
        st = ssb4d_session_fit_region(s, rect, &fp, &r, err);
        if (!st) {
            d = fnv(d, r.trace_sha256, sizeof r.trace_sha256);
            d = fnv(d, &r.loss, sizeof r.loss);
        }
        ssb4d_fit_result_free(&r);
        break;
    }
    case SAVE:
        unlink(path);
        st = ssb4d_session_save_calibration(s, path, 1, err);
        if (!st)
            d = fnv(d, &(uint64_t){hash_file(path)}, sizeof(uint64_t));
        else
            assert_int_not_equal(access(path, F_OK), 0); /* atomic: no file on failure */
        break;
    case LOAD:
        st = ssb4d_session_load_calibration(s, path, err);
        if (!st) /* the next call recalibrates: include it */
            st = ssb4d_session_calibrate(s, err);
        break;
    }
    if (!st) {
        d = fnv(d, img, 2 * n * sizeof *img);
        d = fnv(d, ph, n * sizeof *ph);
        d = fnv(d, &loss, sizeof loss);
    }
    free(img);
    free(ph);
    *h = d;
    return st;
}

/* The state before call k: the calls that must come first. */
static void prepare(ssb4d_session *s, int k)
{
    ssb4d_err err = {0};
    uint64_t h;
    if (k == CALIBRATE_ROT)
        return;
    if (k > CALIBRATE && run_step(s, CALIBRATE, &h, &err))
        fail_msg("calibrate: %s", err.msg);
    if (k > BUILD && run_step(s, BUILD, &h, &err))
        fail_msg("build: %s", err.msg);
    if (k > FIT && run_step(s, FIT, &h, &err))
        fail_msg("fit: %s", err.msg);
    if (k == LOAD && run_step(s, SAVE, &h, &err))
        fail_msg("save: %s", err.msg);
}

/* What the session gives after a call: a preview at native sampling with its loss. */
static uint64_t probe(ssb4d_session *s)
{
    ssb4d_err err = {0};
    uint64_t h;
    if (run_step(s, PREVIEW, &h, &err))
        fail_msg("probe preview: %s", err.msg);
    return h;
}

/* The n's walked out of 1..N. */
static long next_n(int k, long n, long N)
{
    if (getenv("SSB4D_FAULT_ALL") || n < full[k] || N <= full[k] + stride_max[k])
        return n + 1;
    long stride = (N - full[k] + stride_max[k] - 1) / stride_max[k];
    return n + stride > N && n < N ? N : n + stride;
}

/* Fault n of call k on s (prepared); checks the status, the bytes, and the retry's bits. */
static void inject(ssb4d_session *s, int k, long n, uint64_t want, uint64_t want_probe)
{
    ssb4d_mem *m = ssb4d_session_mem(s);
    ssb4d_err err = {0};
    uint64_t h;
    size_t live0 = ssb4d_mem_live(m);
    long f0 = ssb4d_mem_fault_count(m);
    int persistent = walked % 2; /* every other fault: all the allocations after it fail too */
    ssb4d_mem_fail_after(m, n, persistent);
    ssb4d_status st = run_step(s, k, &h, &err);
    ssb4d_mem_fail_after(m, 0, 0);
    walked++;
    if (ssb4d_mem_fault_count(m) == f0)
        fail_msg("%s, allocation %ld: the fault was not reached", names[k], n);
    if (st == SSB4D_OK) { /* absorbed (a fallback): the bits must be the undisturbed ones */
        absorbed++;
        if (h != want)
            fail_msg("%s, allocation %ld: succeeded despite the fault with other bits", names[k], n);
    } else {
        faulted++;
        if (st != SSB4D_ENOMEM)
            fail_msg("%s, allocation %ld: status %d (%s), not SSB4D_ENOMEM", names[k], n, (int)st, err.msg);
        if (!err.msg[0])
            fail_msg("%s, allocation %ld: SSB4D_ENOMEM without a message", names[k], n);
        if (!changes_state[k] && ssb4d_mem_live(m) != live0)
            fail_msg("%s, allocation %ld: %zu tracked bytes live after the failure, %zu before: %s", names[k],
                     n, ssb4d_mem_live(m), live0, err.msg);
        memset(&err, 0, sizeof err);
        if ((st = run_step(s, k, &h, &err)))
            fail_msg("%s after a fault at allocation %ld: %s", names[k], n, err.msg);
        if (h != want)
            fail_msg("%s after a fault at allocation %ld: other bits than undisturbed", names[k], n);
    }
    if (probe(s) != want_probe)
        fail_msg("%s, allocation %ld: the session's preview differs afterwards", names[k], n);
}

static void walk(int k)
{
    const char *only = getenv("SSB4D_FAULT_STEPS"); /* e.g. "fit,region": those calls only */
    if (only && !strstr(only, names[k]))
        return;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* The undisturbed run: its bits and its count. */
    ssb4d_session *s = open_session(k);
    prepare(s, k);
    ssb4d_err err = {0};
    uint64_t want;
    long c0 = ssb4d_mem_alloc_count(ssb4d_session_mem(s));
    if (run_step(s, k, &want, &err))
        fail_msg("%s: %s", names[k], err.msg);
    long N = ssb4d_mem_alloc_count(ssb4d_session_mem(s)) - c0;
    uint64_t want_probe = probe(s);
    long w0 = walked;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("# %-9s %5ld allocations (undisturbed: %.1f s)\n", names[k], N,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    fflush(stdout);
    if (!changes_state[k]) {
        for (long n = 1; n <= N; n = next_n(k, n, N))
            inject(s, k, n, want, want_probe);
        ssb4d_session_close(s);
    } else {
        ssb4d_session_close(s);
        for (long n = 1; n <= N; n = next_n(k, n, N)) {
            s = open_session(k);
            prepare(s, k);
            inject(s, k, n, want, want_probe);
            ssb4d_session_close(s);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("# %-9s %5ld allocations, %4ld walked (%.1f s)\n", names[k], N, walked - w0,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
}

static void test_calibrate(void **state) { (void)state; walk(CALIBRATE); }
static void test_build(void **state) { (void)state; walk(BUILD); }
static void test_fit(void **state) { (void)state; walk(FIT); }
static void test_preview(void **state) { (void)state; walk(PREVIEW); }
static void test_object(void **state) { (void)state; walk(OBJECT); }
static void test_release(void **state) { (void)state; walk(RELEASE); }
static void test_loss(void **state) { (void)state; walk(LOSS); }
static void test_region(void **state) { (void)state; walk(REGION); }
static void test_save(void **state) { (void)state; walk(SAVE); }
static void test_load(void **state) { (void)state; walk(LOAD); }
static void test_calibrate_rot(void **state) { (void)state; walk(CALIBRATE_ROT); }

/* The hook itself: the n-th allocation fails once, with its message; a NULL context never. */
static void test_hook(void **state)
{
    (void)state;
    ssb4d_mem *m = ssb4d_mem_create(0);
    ssb4d_err err = {0};
    void *a = ssb4d_mem_alloc(m, 100, "a", &err);
    assert_non_null(a);
    ssb4d_mem_fail_after(m, 2, 0);
    void *b = ssb4d_mem_alloc(m, 100, "b", &err);
    assert_non_null(b);
    assert_null(ssb4d_mem_calloc(m, 100, "c", &err));
    assert_int_equal(err.code, SSB4D_ENOMEM);
    assert_non_null(strstr(err.msg, "injected"));
    assert_int_equal(ssb4d_mem_fault_count(m), 1);
    void *c = ssb4d_mem_alloc(m, 100, "c", &err);
    assert_non_null(c);
    assert_int_equal(ssb4d_mem_alloc_count(m), 4);
    ssb4d_mem_fail_after(m, 1, 0);
    ssb4d_mem_fail_after(m, 0, 0); /* cancelled */
    ssb4d_mem_free(m, a, 0);
    a = ssb4d_mem_alloc(m, 100, "a", &err);
    assert_non_null(a);
    assert_int_equal(ssb4d_mem_live(m), 300);
    ssb4d_mem_free(m, a, 0);
    ssb4d_mem_free(m, b, 0);
    ssb4d_mem_free(m, c, 1);
    ssb4d_mem_destroy(m);
    ssb4d_mem_fail_after(m = ssb4d_mem_create(0), 1, 1); /* persistent: every one from the first */
    assert_null(ssb4d_mem_alloc(m, 10, "a", &err));
    assert_null(ssb4d_mem_alloc(m, 10, "b", &err));
    assert_int_equal(ssb4d_mem_fault_count(m), 2);
    ssb4d_mem_fail_after(m, 0, 0);
    a = ssb4d_mem_alloc(m, 10, "a", &err);
    assert_non_null(a);
    ssb4d_mem_free(m, a, 0);
    ssb4d_mem_destroy(m);
    ssb4d_mem_fail_after(NULL, 1, 0);
    assert_int_equal(ssb4d_mem_alloc_count(NULL), 0);
}

static int setup(void **state)
{
    (void)state;
    if (fx_sim_memory(&data, 0, 0) || fx_tmpdir(dir, sizeof dir, "fault"))
        return -1;
    snprintf(path, sizeof path, "%s/cal.json", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fx_sim_free(&data);
    printf("# %ld faults injected: %ld failed with SSB4D_ENOMEM, %ld absorbed\n", walked, faulted, absorbed);
    return fx_tmpdir_remove(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook),    cmocka_unit_test(test_calibrate), cmocka_unit_test(test_build),
        cmocka_unit_test(test_fit),     cmocka_unit_test(test_preview),   cmocka_unit_test(test_object),
        cmocka_unit_test(test_release), cmocka_unit_test(test_loss),      cmocka_unit_test(test_region),
        cmocka_unit_test(test_save),    cmocka_unit_test(test_load),      cmocka_unit_test(test_calibrate_rot),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
