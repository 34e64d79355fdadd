/* test_session.c — the session handle (src/session/handle.c) against the stage functions it
 * strings together: the same fit trace, image and loss bits as calibrate + G build + fit +
 * object called directly; previews (subset, upsampling, estimators); a cancel from the progress
 * callback or from another thread ends the call with SSB4D_ECANCELLED and leaves the session
 * usable (the next fit has the uncancelled trace); region refits; a saved calibration reopened
 * gives the same image; bad input is refused with a clear status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"

/* A 64x64 scan of the tiny preset's crystal (48x48 detector), made once (tests/fixture.h). */
static fx_sim data;

static int setup(void **state)
{
    (void)state;
    return fx_sim_memory(&data, 64, 6);
}

static int teardown(void **state)
{
    fx_sim_free(&data);
    (void)state;
    return 0;
}

/* compared with the CPU stage functions, bit for bit (a GPU machine too) */
static void opts(ssb4d_session_opts *o) { fx_session_opts(&data, o); }

/* A short search: these tests compare paths, not the fit's accuracy (test_fit.c does that). */
static ssb4d_fit_params quick(void)
{
    ssb4d_fit_params fp;
    ssb4d_fit_params_default(&fp);
    fp.trials = 16;
    return fp;
}

static ssb4d_session *open_session(const ssb4d_session_opts *o)
{
    ssb4d_session *s = NULL;
    ssb4d_err err = {0};
    if (ssb4d_session_open_memory(data.counts, SSB4D_U16, data.shape, o, &s, &err))
        fail_msg("open: %s", err.msg);
    return s;
}

/* The same job by the stage functions: trace, exact loss and the upsampled image. */
typedef struct {
    char trace[65];
    double loss;
    float *phase;
    size_t n;
} direct_result;

static void direct(int upsample, direct_result *d)
{
    ssb4d_err err = {0};
    ssb4d_source *src = NULL;
    assert_int_equal(ssb4d_source_from_memory(data.counts, SSB4D_U16, data.shape, &src, &err), 0);
    ssb4d_session_opts o;
    opts(&o);
    ssb4d_calib_params cp = o.calib;
    ssb4d_calibration cal;
    assert_int_equal(ssb4d_calibrate(src, &cp, &cal, &err), 0);
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    ssb4d_G *G = NULL;
    assert_int_equal(ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, NULL, &G, &err), 0);
    ssb4d_fit_params fp = quick();
    fp.rotation_given = 1;
    ssb4d_fit_result r;
    assert_int_equal(ssb4d_fit(G, &cal.geom, &fp, NULL, &r, &err), 0);
    memcpy(d->trace, r.trace_sha256, sizeof d->trace);
    d->loss = r.loss;
    d->n = (size_t)(upsample * upsample) * data.shape[0] * data.shape[1];
    d->phase = malloc(d->n * sizeof *d->phase);
    ssb4d_thick thin = {{0, 0}, 0};
    assert_int_equal(ssb4d_object(G, &r.geom, &r.ab, &thin, upsample, NULL, NULL, NULL, d->phase, &err), 0);
    ssb4d_fit_result_free(&r);
    ssb4d_G_free(G);
    ssb4d_calibration_free(&cal);
    ssb4d_source_close(src);
}

static void test_same_bits_as_the_stages(void **state)
{
    ssb4d_fit_params fq = quick();
    direct_result d;
    direct(2, &d);
    ssb4d_session_opts o;
    opts(&o);
    ssb4d_session *s = open_session(&o);
    ssb4d_err err = {0};
    ssb4d_fit_result r;
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), 0);
    assert_string_equal(r.trace_sha256, d.trace);
    assert_memory_equal(&r.loss, &d.loss, sizeof d.loss);
    size_t ny, nx;
    assert_int_equal(ssb4d_session_image_shape(s, 2, &ny, &nx, &err), 0);
    assert_int_equal(ny * nx, d.n);
    float *ph = malloc(d.n * sizeof *ph), *pv = malloc(d.n * sizeof *pv);
    float *obj = malloc(2 * d.n * sizeof *obj);
    assert_int_equal(ssb4d_session_object(s, 2, obj, ph, &err), 0);
    assert_memory_equal(ph, d.phase, d.n * sizeof *ph);
    /* A release: the preview at the current parameters with the exact loss over all BF pixels. */
    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    q.upsample = 2;
    q.want_loss = 1;
    double loss = 0;
    assert_int_equal(ssb4d_session_preview(s, &q, pv, &loss, &err), 0);
    assert_memory_equal(pv, d.phase, d.n * sizeof *pv);
    assert_memory_equal(&loss, &d.loss, sizeof loss);
    /* A drag preview (a subset) differs from the full one but is finite; the mean-phase estimator
     * at native sampling is another image of the same size as the upsampling-1 preview. */
    q.subset = 50;
    q.want_loss = 0;
    assert_int_equal(ssb4d_session_preview(s, &q, pv, NULL, &err), 0);
    size_t differ = 0;
    for (size_t i = 0; i < d.n; i++) {
        assert_true(isfinite(pv[i]));
        differ += pv[i] != d.phase[i];
    }
    assert_true(differ > d.n / 2);
    q.subset = 0;
    q.upsample = 1;
    q.estimator = SSB4D_ESTIMATE_MEAN_PHASE;
    assert_int_equal(ssb4d_session_preview(s, &q, pv, NULL, &err), 0);
    /* The transfer-corrected estimator (issue 39 §5): the preview (with the loss, which it does not
     * fuse) and ssb4d_session_image give the same image, another than the object's, and the
     * image's complex object has that phase; an unknown estimator and a mean phase's object are
     * refused. */
    q.upsample = 2;
    q.want_loss = 1;
    q.estimator = SSB4D_ESTIMATE_TRANSFER;
    loss = 0;
    assert_int_equal(ssb4d_session_preview(s, &q, pv, &loss, &err), 0);
    assert_memory_equal(&loss, &d.loss, sizeof loss);
    assert_int_equal(ssb4d_session_image(s, 2, SSB4D_ESTIMATE_TRANSFER, obj, ph, &err), 0);
    assert_memory_equal(pv, ph, d.n * sizeof *pv);
    differ = 0;
    for (size_t i = 0; i < d.n; i++) {
        differ += ph[i] != d.phase[i];
        assert_true(fabs(atan2f(obj[2 * i + 1], obj[2 * i]) - ph[i]) < 1e-6);
    }
    assert_true(differ > d.n / 2);
    q.estimator = (ssb4d_estimator)3;
    assert_int_equal(ssb4d_session_preview(s, &q, pv, &loss, &err), SSB4D_EINVAL);
    assert_int_equal(ssb4d_session_image(s, 2, SSB4D_ESTIMATE_MEAN_PHASE, obj, ph, &err), SSB4D_EINVAL);
    /* Every call is a stage of the memory report. */
    ssb4d_mem *m = ssb4d_session_mem(s);
    int saw_fit = 0, saw_build = 0;
    for (size_t i = 0; i < ssb4d_mem_stage_count(m); i++) {
        saw_fit |= !strcmp(ssb4d_mem_stage(m, i)->name, "fit");
        saw_build |= !strcmp(ssb4d_mem_stage(m, i)->name, "G build");
    }
    assert_true(saw_fit && saw_build);
    assert_string_equal(ssb4d_session_backend(s), "cpu");
    ssb4d_fit_result_free(&r);
    ssb4d_session_close(s);
    free(ph), free(pv), free(obj), free(d.phase);
    (void)state;
}

/* Cancels on the n-th call of the progress callback. */
typedef struct {
    int calls, cancel_at;
    char last_stage[48];
} canceller;

static int cancel_cb(void *user, const char *stage, double fraction)
{
    canceller *c = user;
    assert_true(fraction >= 0.0 && fraction <= 1.0);
    snprintf(c->last_stage, sizeof c->last_stage, "%s", stage);
    return ++c->calls >= c->cancel_at;
}

static void test_cancel_from_the_callback(void **state)
{
    ssb4d_fit_params fq = quick();
    direct_result d;
    direct(1, &d);
    ssb4d_session_opts o;
    opts(&o);
    canceller c = {0, 1 << 30, ""};
    o.progress = cancel_cb;
    o.progress_user = &c;
    o.threads = 2;
    ssb4d_session *s = open_session(&o);
    ssb4d_err err = {0};
    ssb4d_fit_result r;
    /* The G build cancelled at once: the session has no G and builds it on the next call. */
    c.calls = 0, c.cancel_at = 1;
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), SSB4D_ECANCELLED);
    assert_string_equal(ssb4d_status_name(err.code), "cancelled");
    ssb4d_fit_result_free(&r);
    /* Cancelled in the middle of the fit (the G build and calibration go through). */
    c.calls = 0, c.cancel_at = 1 << 30;
    assert_int_equal(ssb4d_session_calibrate(s, &err), 0);
    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    float *ph = malloc(d.n * sizeof *ph);
    assert_int_equal(ssb4d_session_preview(s, &q, ph, NULL, &err), 0); /* builds G */
    c.calls = 0, c.cancel_at = 3;
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), SSB4D_ECANCELLED);
    assert_string_equal(c.last_stage, "fit");
    ssb4d_fit_result_free(&r);
    /* Intact: the next fit is the uncancelled one, bit for bit. */
    c.calls = 0, c.cancel_at = 1 << 30;
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), 0);
    assert_string_equal(r.trace_sha256, d.trace);
    assert_true(c.calls > 0); /* the callback ran during the fit */
    ssb4d_fit_result_free(&r);
    /* A cancelled preview leaves the current parameters as they were. */
    ssb4d_aberrations before;
    ssb4d_session_get(s, &before, NULL, NULL);
    c.calls = 0, c.cancel_at = 1;
    assert_int_equal(ssb4d_session_preview(s, &q, ph, NULL, &err), SSB4D_ECANCELLED);
    ssb4d_aberrations after;
    ssb4d_session_get(s, &after, NULL, NULL);
    assert_memory_equal(&before, &after, sizeof before);
    ssb4d_session_close(s);
    free(ph), free(d.phase);
    (void)state;
}

/* ssb4d_session_cancel during the G build a fit starts with ends the fit (the G is kept), and
 * the next fit runs with no cancel left over. A cancel that lands after the build's last poll
 * (its callback is rate-limited, so no test lands one there) is handle.c's step_cancelled. */
typedef struct {
    ssb4d_session *s;
    int cancels;
} build_canceller;

static int cancel_in_build(void *user, const char *stage, double fraction)
{
    build_canceller *c = user;
    (void)fraction;
    if (c->s && !strcmp(stage, "G build")) {
        ssb4d_session_cancel(c->s);
        c->cancels++;
    }
    return 0;
}

static void test_cancel_in_the_build(void **state)
{
    ssb4d_fit_params fq = quick();
    ssb4d_session_opts o;
    opts(&o);
    build_canceller c = {NULL, 0};
    o.progress = cancel_in_build;
    o.progress_user = &c;
    ssb4d_session *s = open_session(&o);
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_session_calibrate(s, &err), 0);
    c.s = s;
    ssb4d_fit_result r;
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), SSB4D_ECANCELLED);
    assert_true(c.cancels > 0);
    ssb4d_fit_result_free(&r);
    c.s = NULL; /* the G was kept: the next fit runs, with no cancel left over */
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), 0);
    ssb4d_fit_result_free(&r);
    ssb4d_session_close(s);
    (void)state;
}

typedef struct {
    ssb4d_session *s;
    volatile int done;
} cancel_thread_arg;

static void *keep_cancelling(void *p)
{
    cancel_thread_arg *a = p;
    while (!a->done) {
        ssb4d_session_cancel(a->s);
        usleep(1000);
    }
    return NULL;
}

static void test_cancel_from_another_thread(void **state)
{
    ssb4d_fit_params fq = quick();
    ssb4d_session_opts o;
    opts(&o);
    ssb4d_session *s = open_session(&o);
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_session_calibrate(s, &err), 0);
    cancel_thread_arg a = {s, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, keep_cancelling, &a), 0);
    ssb4d_fit_result r;
    ssb4d_status st = ssb4d_session_fit(s, &fq, &r, &err);
    a.done = 1;
    pthread_join(t, NULL);
    assert_int_equal(st, SSB4D_ECANCELLED);
    ssb4d_fit_result_free(&r);
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), 0); /* no cancel left over */
    ssb4d_fit_result_free(&r);
    ssb4d_session_close(s);
    (void)state;
}

static void test_regions_and_calibration_file(void **state)
{
    ssb4d_fit_params fq = quick();
    ssb4d_session_opts o;
    opts(&o);
    ssb4d_session *s = open_session(&o);
    ssb4d_err err = {0};
    ssb4d_fit_result r, reg[2];
    size_t rects[2][4], from = 0;
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), 0);
    assert_int_equal(ssb4d_session_fit_regions(s, 2, 1, &fq, 0, reg, rects, &from, &err), 0);
    assert_int_equal(from, 2); /* the rotation is given: no region settles the branch */
    assert_int_equal(rects[1][0], 32);
    assert_int_equal(rects[1][1], 64);
    for (int i = 0; i < 2; i++) {
        /* one crystal, one set of aberrations: each half agrees with the whole to ~1 nm */
        assert_true(fabs(reg[i].ab.C_nm[SSB4D_C10] - r.ab.C_nm[SSB4D_C10]) < 1.0);
        ssb4d_fit_result_free(&reg[i]);
    }
    /* Nothing to settle with the rotation held; missing rectangles are refused. */
    from = 0;
    assert_int_equal(ssb4d_session_settle_branch(s, &rects[0][0], 2, &fq, reg, &from, &err), 0);
    assert_int_equal(from, 2);
    assert_int_equal(ssb4d_session_branch_to_settle(s, &fq, 2), 0);
    assert_int_equal(ssb4d_session_settle_branch(s, NULL, 2, &fq, reg, &from, &err), SSB4D_EINVAL);
    assert_non_null(strstr(err.msg, "rectangles"));
    /* Refits leave the current parameters alone. */
    ssb4d_aberrations cur;
    ssb4d_session_get(s, &cur, NULL, NULL);
    assert_memory_equal(&cur, &r.ab, sizeof cur);
    size_t bad[4] = {0, 16, 0, 16};
    assert_int_equal(ssb4d_session_fit_region(s, bad, NULL, &reg[0], &err), SSB4D_EINVAL);

    char dir[] = "/tmp/ssb4d-session-XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/calibration.json", dir);
    assert_int_equal(ssb4d_session_save_calibration(s, path, 0, &err), 0);
    assert_int_equal(ssb4d_session_save_calibration(s, path, 0, &err), SSB4D_EIO); /* exists */
    assert_non_null(strstr(err.msg, "already exists"));
    size_t n = data.shape[0] * data.shape[1];
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_int_equal(ssb4d_session_object(s, 1, NULL, a, &err), 0);
    ssb4d_session_opts o2;
    opts(&o2);
    o2.calib.rotation_deg = NAN; /* the file's rotation is used */
    ssb4d_session *t = open_session(&o2);
    /* A searched rotation: two regions have a branch to settle; one region, or no branch check, not. */
    ssb4d_fit_params nb = fq;
    nb.branch_check = 0;
    assert_int_equal(ssb4d_session_branch_to_settle(t, &fq, 2), 1);
    assert_int_equal(ssb4d_session_branch_to_settle(t, &fq, 1), 0);
    assert_int_equal(ssb4d_session_branch_to_settle(t, &nb, 2), 0);
    assert_int_equal(ssb4d_session_load_calibration(t, path, &err), 0);
    assert_int_equal(ssb4d_session_branch_to_settle(t, &fq, 2), 0); /* the file's rotation is held */
    assert_int_equal(ssb4d_session_object(t, 1, NULL, b, &err), 0);
    assert_memory_equal(a, b, n * sizeof *a);
    ssb4d_session_close(t);
    unlink(path);
    rmdir(dir);
    free(a), free(b);
    ssb4d_fit_result_free(&r);
    ssb4d_session_close(s);
    (void)state;
}

static int cancel_now(void *user, const char *stage, double fraction)
{
    (void)fraction;
    snprintf(user, 48, "%s", stage);
    return 1;
}

/* The one callback type cancels the stage functions too: the simulator, the G build and the fit
 * (through the memory context it was given). */
static void test_stage_functions_cancel(void **state)
{
    ssb4d_err err = {0};
    char stage[48] = "";
    ssb4d_sim_params q = data.sp;
    q.scan_n = 32, q.scan_cells = 3;
    q.progress = cancel_now, q.progress_user = stage;
    ssb4d_sim_info qi;
    uint16_t *c = malloc((size_t)32 * 32 * data.shape[2] * data.shape[3] * sizeof *c);
    assert_int_equal(ssb4d_simulate_to_memory(&q, c, NULL, NULL, NULL, &qi, &err), SSB4D_ECANCELLED);
    assert_string_equal(stage, "simulate");
    free(c);

    ssb4d_source *src = NULL;
    assert_int_equal(ssb4d_source_from_memory(data.counts, SSB4D_U16, data.shape, &src, &err), 0);
    ssb4d_session_opts o;
    opts(&o);
    ssb4d_calibration cal;
    assert_int_equal(ssb4d_calibrate(src, &o.calib, &cal, &err), 0);
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    go.progress = cancel_now, go.progress_user = stage;
    ssb4d_G *G = NULL;
    assert_int_equal(ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, NULL, &G, &err), SSB4D_ECANCELLED);
    assert_null(G);
    assert_string_equal(stage, "G build");
    go.progress = NULL;
    assert_int_equal(ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, NULL, &G, &err), 0);
    ssb4d_fit_params fp = quick();
    fp.rotation_given = 1;
    fp.progress = cancel_now, fp.progress_user = stage;
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_fit_result r;
    assert_int_equal(ssb4d_fit(G, &cal.geom, &fp, mem, &r, &err), SSB4D_ECANCELLED);
    assert_string_equal(stage, "fit");
    ssb4d_fit_result_free(&r);
    ssb4d_mem_destroy(mem);
    ssb4d_G_free(G);
    ssb4d_calibration_free(&cal);
    ssb4d_source_close(src);
    (void)state;
}

static void test_bad_input(void **state)
{
    ssb4d_session_opts o;
    opts(&o);
    ssb4d_session *s = NULL;
    ssb4d_err err = {0};
    assert_int_not_equal(ssb4d_session_open("/nonexistent/data.qem", &o, &s, &err), 0);
    assert_null(s);
    assert_non_null(strstr(err.msg, "nonexistent"));
    o.calib.kv = NAN; /* the microscope must be stated */
    assert_int_equal(ssb4d_session_open_memory(data.counts, SSB4D_U16, data.shape, &o, &s, &err), SSB4D_EINVAL);
    assert_null(s);
    opts(&o);
    o.backend = SSB4D_BACKEND_CUDA;
    assert_int_equal(ssb4d_session_open_memory(data.counts, SSB4D_U16, data.shape, &o, &s, &err), SSB4D_EINVAL);
    assert_non_null(strstr(err.msg, "CUDA"));
    opts(&o);
    o.memory_bytes = 1 << 20; /* 1 MiB: the counts (held for the session's life) do not fit */
    assert_int_equal(ssb4d_session_open_memory(data.counts, SSB4D_U16, data.shape, &o, &s, &err), SSB4D_ENOMEM);
    assert_null(s);
    assert_non_null(strstr(err.msg, "does not fit"));
    /* Room for the counts, not for the session: refused at the plan, naming the smallest budget. */
    o.memory_bytes = data.shape[0] * data.shape[1] * data.shape[2] * data.shape[3] * sizeof *data.counts + (2u << 20);
    s = open_session(&o);
    assert_int_equal(ssb4d_session_calibrate(s, &err), SSB4D_ENOMEM);
    assert_non_null(strstr(err.msg, "the job does not fit in"));
    assert_non_null(strstr(err.msg, "smallest budget is"));
    ssb4d_session_close(s);
    opts(&o);
    o.region[0] = 0, o.region[1] = 8, o.region[2] = 0, o.region[3] = 64; /* under 32 rows */
    assert_int_equal(ssb4d_session_open_memory(data.counts, SSB4D_U16, data.shape, &o, &s, &err), SSB4D_EINVAL);
    assert_null(s);
    opts(&o);
    o.calib.rotation_deg = NAN;
    o.rotation_measured = 1; /* measured, but no value */
    assert_int_equal(ssb4d_session_open_memory(data.counts, SSB4D_U16, data.shape, &o, &s, &err), SSB4D_EINVAL);
    opts(&o);
    s = open_session(&o);
    ssb4d_tilt_result tr;
    assert_int_equal(ssb4d_session_fit_tilt(s, &tr, &err), SSB4D_EINVAL);
    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    q.upsample = 5;
    float one;
    assert_int_equal(ssb4d_session_preview(s, &q, &one, NULL, &err), SSB4D_EINVAL);
    assert_int_equal(ssb4d_session_set_rotation(s, INFINITY, &err), SSB4D_EINVAL);
    ssb4d_session_close(s);
    ssb4d_session_close(NULL);
    (void)state;
}

/* The loss call, the G report, a field that is a region (fit --region: the same bits as a region
 * refit), a rectangle check and a measured rotation (searched from its value, not held). */
static void test_loss_field_and_rotation(void **state)
{
    ssb4d_fit_params fq = quick();
    ssb4d_session_opts o;
    opts(&o);
    ssb4d_session *s = open_session(&o);
    ssb4d_err err = {0};
    size_t gb, nbf, nst, nres;
    ssb4d_session_G_info(s, &gb, &nbf, &nst, &nres);
    assert_int_equal(gb, 0); /* nothing built yet */
    assert_int_equal(ssb4d_session_build(s, &err), 0);
    ssb4d_session_G_info(s, &gb, &nbf, &nst, &nres);
    assert_true(gb > 0 && nbf > 0 && nres == nst);
    ssb4d_fit_result r;
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), 0);
    double loss = 0;
    assert_int_equal(ssb4d_session_loss(s, &loss, &err), 0);
    assert_memory_equal(&loss, &r.loss, sizeof loss); /* the fit's exact loss at its answer */
    {   /* a release: the object and the loss in one pass, the same bits as the two calls */
        size_t ny1, nx1;
        assert_int_equal(ssb4d_session_image_shape(s, 1, &ny1, &nx1, &err), 0);
        float *o1 = malloc(2 * ny1 * nx1 * sizeof *o1), *o2 = malloc(2 * ny1 * nx1 * sizeof *o2);
        float *p2 = malloc(ny1 * nx1 * sizeof *p2), *p1 = malloc(ny1 * nx1 * sizeof *p1);
        double l2 = -1;
        assert_int_equal(ssb4d_session_object(s, 1, o1, p1, &err), 0);
        assert_int_equal(ssb4d_session_release(s, o2, p2, &l2, &err), 0);
        assert_memory_equal(&loss, &l2, sizeof loss);
        assert_memory_equal(o1, o2, 2 * ny1 * nx1 * sizeof *o1);
        assert_memory_equal(p1, p2, ny1 * nx1 * sizeof *p1);
        assert_int_equal(ssb4d_session_release(s, NULL, NULL, &l2, &err), SSB4D_EINVAL);
        free(o1), free(o2), free(p1), free(p2);
    }
    size_t rect[4] = {0, 40, 8, 56}, bad[4] = {0, 40, 40, 80};
    assert_int_equal(ssb4d_session_check_region(s, rect, &err), 0);
    assert_int_equal(ssb4d_session_check_region(s, bad, &err), SSB4D_EINVAL);
    assert_non_null(strstr(err.msg, "outside"));
    ssb4d_fit_result rr;
    assert_int_equal(ssb4d_session_fit_region(s, rect, &fq, &rr, &err), 0);
    ssb4d_fit_result_free(&r);
    ssb4d_session_close(s);

    memcpy(o.region, rect, sizeof rect); /* the same region as the session's field */
    s = open_session(&o);
    size_t ny, nx;
    assert_int_equal(ssb4d_session_image_shape(s, 1, &ny, &nx, &err), 0);
    assert_int_equal(ny, 40);
    assert_int_equal(nx, 48);
    assert_int_equal(ssb4d_session_fit(s, &fq, &r, &err), 0);
    assert_string_equal(r.trace_sha256, rr.trace_sha256);
    ssb4d_fit_result_free(&r);
    ssb4d_fit_result_free(&rr);
    ssb4d_session_close(s);

    opts(&o);
    o.calib.rotation_deg = 3.0;
    o.rotation_measured = 1;
    o.rotation_sigma_deg = 2.0;
    s = open_session(&o);
    ssb4d_fit_params fp;
    assert_int_equal(ssb4d_session_calibrate(s, &err), 0);
    ssb4d_session_fit_params(s, &fq, &fp);
    assert_int_equal(fp.rotation_given, 0);
    assert_true(fp.rotation_sigma_deg == 2.0);
    ssb4d_session_close(s);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bits_as_the_stages),
        cmocka_unit_test(test_cancel_from_the_callback),
        cmocka_unit_test(test_cancel_from_another_thread),
        cmocka_unit_test(test_cancel_in_the_build),
        cmocka_unit_test(test_regions_and_calibration_file),
        cmocka_unit_test(test_stage_functions_cancel),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_loss_field_and_rotation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
