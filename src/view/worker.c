/* worker.c — the one thread that owns the session handle (a handle is used by one thread at a
 * time). HTTP handlers queue jobs and wait; the worker sleeps on a condition variable while
 * there is nothing to do. Commands and long jobs run in order. Previews (SPEC §7): a newer one
 * replaces the one *queued* (answered 204, "superseded") and leaves the running one to finish,
 * so on a busy machine every preview that starts is also drawn and the image keeps moving; only
 * a release (the full set, the loss: a slider let go, the FFT toggled, the upsampling changed)
 * cancels a running preview, so that it never waits behind drags. */
#include "view/view_internal.h"


#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int http_of(ssb4d_status st)
{
    switch (st) {
    case SSB4D_OK: return 200;
    case SSB4D_EINVAL: return 400;
    case SSB4D_ECANCELLED: return 409;
    case SSB4D_ENOMEM: return 507;
    default: return 500;
    }
}

static void fail(view_server *v, view_resp *r, ssb4d_status st, const char *msg)
{
    view_resp_text(r, http_of(st), "%s", msg);
    if (st != SSB4D_ECANCELLED) {
        pthread_mutex_lock(&v->mu);
        snprintf(v->last_error, sizeof v->last_error, "%s", msg);
        pthread_mutex_unlock(&v->mu);
    }
}

/* The current parameters into the state the page reads. */
static void snapshot_params(view_server *v)
{
    ssb4d_aberrations ab;
    ssb4d_thick th;
    ssb4d_geometry g;
    ssb4d_session_get(v->s, &ab, &th, &g);
    pthread_mutex_lock(&v->mu);
    v->ab = ab;
    v->thick = th;
    v->rotation_deg = g.rotation_deg;
    pthread_mutex_unlock(&v->mu);
}

/* The calibration as the page's calibration view needs it, copied once. */
static void snapshot_calibration(view_server *v)
{
    const ssb4d_calibration *c = ssb4d_session_calibration(v->s);
    if (!c)
        return;
    size_t n = c->det_shape[0] * c->det_shape[1];
    float *mean = malloc(n * sizeof *mean);
    int32_t *fl = malloc((c->n_flagged ? c->n_flagged : 1) * sizeof *fl);
    if (!mean || !fl) {
        free(mean);
        free(fl);
        return;
    }
    for (size_t i = 0; i < n; i++)
        mean[i] = (float)c->mean_pattern[i];
    if (c->n_flagged)
        memcpy(fl, c->flagged, c->n_flagged * sizeof *fl);
    size_t ny = 0, nx = 0;
    ssb4d_err err;
    ssb4d_session_image_shape(v->s, 1, &ny, &nx, &err);
    char sampling[sizeof v->cal.sampling], warning[sizeof v->cal.sampling_warning];
    ssb4d_calibration_sampling_report(c, sampling, sizeof sampling, warning, sizeof warning);
    for (char *p = warning; *p; p++)
        if (*p == '\n')
            *p = ' ';
    pthread_mutex_lock(&v->mu);
    free(v->cal.mean);
    free(v->cal.flagged);
    view_cal *k = &v->cal;
    k->mean = mean;
    k->flagged = fl;
    k->n_flagged = c->n_flagged;
    k->det[0] = c->det_shape[0], k->det[1] = c->det_shape[1];
    k->scan[0] = c->scan_shape[0], k->scan[1] = c->scan_shape[1];
    k->centre[0] = c->disk_centre_px[0], k->centre[1] = c->disk_centre_px[1];
    k->radius = c->disk_radius_px;
    k->selection_radius = c->selection_radius_px;
    k->n_bf = c->n_bf;
    k->kv = c->geom.kv;
    k->semiangle_mrad = c->geom.semiangle_mrad;
    memcpy(k->scan_step_A, c->geom.scan_step_A, sizeof k->scan_step_A);
    memcpy(k->det_sampling_mrad, c->geom.det_sampling_mrad, sizeof k->det_sampling_mrad);
    k->rotation_deg = c->geom.rotation_deg;
    k->flip = c->geom.flip;
    memcpy(k->sampling, sampling, sizeof k->sampling);
    memcpy(k->sampling_warning, warning, sizeof k->sampling_warning);
    k->ready = 1;
    v->image[0] = ny, v->image[1] = nx;
    pthread_mutex_unlock(&v->mu);
}

static int by_loss(const void *a, const void *b)
{
    const ssb4d_fit_trial *x = a, *y = b;
    return (x->loss > y->loss) - (x->loss < y->loss);
}

/* A fit's result as JSON (the region refit's too). */
static cJSON *fit_json(const ssb4d_fit_result *r)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "C10_nm", r->ab.C_nm[SSB4D_C10]);
    cJSON_AddNumberToObject(j, "C12_nm", r->ab.C_nm[SSB4D_C12]);
    cJSON_AddNumberToObject(j, "phi12_deg", r->ab.phi_deg[SSB4D_C12]);
    cJSON_AddNumberToObject(j, "phi12_probe_deg", r->phi12_probe_deg); /* the library's conversion */
    cJSON_AddNumberToObject(j, "rotation_deg", r->geom.rotation_deg);
    cJSON_AddBoolToObject(j, "flip", r->geom.flip != 0);
    cJSON_AddStringToObject(j, "flip_source", r->flip_source);
    cJSON_AddNumberToObject(j, "loss", r->loss);
    cJSON_AddBoolToObject(j, "confident", r->confident);
    cJSON_AddStringToObject(j, "warning", r->warning);
    cJSON_AddNumberToObject(j, "seconds", r->seconds);
    return j;
}

/* A fit in the result panel (its best trials the table, NULL: none); Reset returns to it. */
static void show_fit(view_server *v, const ssb4d_fit_result *r, cJSON *trials)
{
    ssb4d_thick thin = {{0, 0}, 0};
    pthread_mutex_lock(&v->mu);
    cJSON_Delete(v->trials);
    v->trials = trials;
    v->has_fit = 1;
    v->fit_ab = r->ab;
    v->fit_thick = thin;
    v->fit_rotation_deg = r->geom.rotation_deg;
    v->fit_flip = r->geom.flip;
    snprintf(v->fit_flip_source, sizeof v->fit_flip_source, "%s", r->flip_source);
    v->fit_loss = r->loss;
    v->fit_seconds = r->seconds;
    snprintf(v->fit_warning, sizeof v->fit_warning, "%s", r->warning);
    v->fit_confident = r->confident;
    snprintf(v->fit_rotation_source, sizeof v->fit_rotation_source, "%s", r->rotation_source);
    v->fit_rotation_sigma_deg = r->rotation_sigma_deg;
    v->fit_se[0] = r->C10_se_nm, v->fit_se[1] = r->C12_se_nm, v->fit_se[2] = r->phi12_se_deg;
    v->fit_se[3] = r->rotation_se_deg;
    pthread_mutex_unlock(&v->mu);
}

/* The standard fit; its result becomes current and its best trials the table. */
static void do_fit(view_server *v, view_resp *resp)
{
    ssb4d_fit_result r;
    memset(&r, 0, sizeof r);
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_session_fit(v->s, NULL, &r, &err);
    if (st) {
        fail(v, resp, st, err.msg);
        return;
    }
    ssb4d_fit_trial *t = NULL;
    size_t nt = r.n_trials;
    if (nt && (t = malloc(nt * sizeof *t))) {
        memcpy(t, r.trials, nt * sizeof *t);
        qsort(t, nt, sizeof *t, by_loss);
    }
    cJSON *trials = cJSON_CreateArray();
    for (size_t i = 0; t && i < nt && i < VIEW_TRIALS_SHOWN; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "C10_nm", t[i].C10_nm);
        cJSON_AddNumberToObject(o, "C12_nm", t[i].C12_nm);
        cJSON_AddNumberToObject(o, "phi12_deg", t[i].phi12_deg);
        cJSON_AddNumberToObject(o, "objective", t[i].loss);
        cJSON_AddNumberToObject(o, "stage", t[i].stage);
        cJSON_AddItemToArray(trials, o);
    }
    free(t);
    show_fit(v, &r, trials);
    view_resp_json(resp, 200, fit_json(&r));
    ssb4d_fit_result_free(&r);
}

/* The virtual images under the session's current rotation and handedness: kept, or made again
 * when either changed. 0, or the status with err filled. */
static ssb4d_status ensure_virtual(view_server *v, ssb4d_err *err)
{
    ssb4d_geometry g;
    ssb4d_session_get(v->s, NULL, NULL, &g);
    if (v->has_virt && (v->virt_rotation_deg != g.rotation_deg || v->virt_flip != g.flip)) {
        pthread_mutex_lock(&v->mu);
        v->has_virt = 0;
        pthread_mutex_unlock(&v->mu);
        ssb4d_virtual_free(&v->virt);
    }
    if (v->has_virt)
        return SSB4D_OK;
    ssb4d_virtual_params vp;
    ssb4d_virtual_params_default(&vp);
    ssb4d_status st = ssb4d_session_virtual(v->s, &vp, &v->virt, err);
    if (st)
        return st;
    pthread_mutex_lock(&v->mu); /* the state reports it; the images themselves are the worker's */
    v->has_virt = 1, v->virt_rotation_deg = g.rotation_deg, v->virt_flip = g.flip;
    pthread_mutex_unlock(&v->mu);
    return SSB4D_OK;
}

static void do_start(view_server *v, view_resp *resp)
{
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_session_calibrate(v->s, &err);
    if (st) {
        fail(v, resp, st, err.msg);
        return;
    }
    snapshot_calibration(v);
    pthread_mutex_lock(&v->mu);
    /* a cancel that came between two calls is not lost: it stops the fit before it starts */
    int stopping = v->stop, cancelled = v->cancel_job;
    pthread_mutex_unlock(&v->mu);
    if (stopping)
        view_resp_text(resp, 503, "the server is stopping");
    else if (v->cfg.fit_on_start && !cancelled)
        do_fit(v, resp);
    else {
        ssb4d_aberrations zero;
        memset(&zero, 0, sizeof zero);
        ssb4d_session_set(v->s, v->cfg.ab ? v->cfg.ab : &zero, v->cfg.thick);
        /* Reset then returns to these. */
        pthread_mutex_lock(&v->mu);
        v->fit_ab = v->cfg.ab ? *v->cfg.ab : zero;
        if (v->cfg.thick)
            v->fit_thick = *v->cfg.thick;
        v->fit_rotation_deg = v->cal.rotation_deg;
        v->fit_flip = v->cal.flip;
        pthread_mutex_unlock(&v->mu);
        /* The fit the calibration file records (`ssb4d fit`'s, Python's after fit(), a Save) is
         * the result shown, not "no fit yet"; a file without one (calibrate's) shows none. */
        ssb4d_fit_result r;
        if (v->cfg.calibration && !ssb4d_session_load_fit(v->s, v->cfg.calibration, &err) &&
            ssb4d_session_last_fit(v->s, &r))
            show_fit(v, &r, cJSON_CreateArray());
    }
}

/* The parameters a request gives over the current ones. */
static void params_over_current(view_server *v, const job_params *p, ssb4d_aberrations *ab, ssb4d_thick *th)
{
    ssb4d_session_get(v->s, ab, th, NULL);
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        if (p->c_mask & (1u << i))
            ab->C_nm[i] = p->ab.C_nm[i];
        if (p->phi_mask & (1u << i))
            ab->phi_deg[i] = p->ab.phi_deg[i];
    }
    if (p->has_tilt)
        th->tilt_mrad[0] = p->thick.tilt_mrad[0], th->tilt_mrad[1] = p->thick.tilt_mrad[1];
    if (p->has_thickness)
        th->thickness_nm = p->thick.thickness_nm;
}

static void do_preview(view_server *v, view_job *j)
{
    const job_params *p = &j->p;
    double t0 = ssb4d_clock_s();
    ssb4d_err err = {0};
    size_t ny, nx;
    ssb4d_status st = ssb4d_session_image_shape(v->s, p->upsample, &ny, &nx, &err);
    if (st) {
        fail(v, &j->resp, st, err.msg);
        return;
    }
    /* The image and what the views need beside it count under the session's budget (the plan
     * holds room for them: cmd_view's image_floats). */
    ssb4d_mem *mem = ssb4d_session_mem(v->s);
    float *img = ssb4d_mem_alloc(mem, ny * nx * sizeof *img, "the viewer's image", &err);
    if (!img) {
        fail(v, &j->resp, err.code, err.msg);
        return;
    }
    ssb4d_aberrations ab;
    ssb4d_thick th;
    params_over_current(v, p, &ab, &th);
    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    q.ab = &ab;
    q.thick = &th;
    q.rotation_deg = p->rotation_deg;
    q.upsample = p->upsample;
    q.subset = p->subset;
    q.estimator = p->estimator;
    q.want_loss = p->want_loss;
    double loss = NAN;
    st = ssb4d_session_preview(v->s, &q, img, p->want_loss ? &loss : NULL, &err);
    if (!st && p->view == VIEW_AMPLITUDE) {
        /* The object's modulus at these parameters: set them for the call, then put back. */
        float *obj = ssb4d_mem_alloc(mem, 2 * ny * nx * sizeof *obj, "the viewer's object", &err);
        ssb4d_aberrations ab0;
        ssb4d_thick th0;
        ssb4d_session_get(v->s, &ab0, &th0, NULL);
        if (!obj)
            st = err.code;
        else {
            ssb4d_session_set(v->s, &ab, &th);
            st = ssb4d_session_object(v->s, p->upsample, obj, NULL, &err);
            ssb4d_session_set(v->s, &ab0, &th0);
            for (size_t i = 0; !st && i < ny * nx; i++)
                img[i] = hypotf(obj[2 * i], obj[2 * i + 1]);
        }
        ssb4d_mem_free(mem, obj, 0);
    }
    if (!st && p->view == VIEW_FFT)
        st = ssb4d_image_fft_logmag(mem, img, ny, nx, &err);
    if (st) {
        ssb4d_mem_free(mem, img, 0);
        fail(v, &j->resp, st, st == SSB4D_ECANCELLED ? "superseded" : err.msg);
        return;
    }
    view_resp *r = &j->resp;
    view_resp_image(r, img, ny, nx, mem);
    view_resp_header(r, "X-Seq", "%.17g", p->seq);
    view_resp_header(r, "X-Seconds", "%.6f", ssb4d_clock_s() - t0);
    if (p->want_loss)
        view_resp_header(r, "X-Loss", "%.17g", loss);
}

/* o[key] = [r0, r1, c0, c1] */
static void add_rect(cJSON *o, const char *key, const size_t rect[4])
{
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int k = 0; k < 4; k++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)rect[k]));
}

/* Rectangle i of a rows x cols grid inside rect (the last row and column take the remainder). */
static void grid_in(const size_t rect[4], size_t rows, size_t cols, size_t i, size_t out[4])
{
    size_t sz[2] = {rect[1] - rect[0], rect[3] - rect[2]};
    ssb4d_grid_rect(sz, rows, cols, i, out);
    out[0] += rect[0], out[1] += rect[0], out[2] += rect[2], out[3] += rect[2];
}

static void do_region(view_server *v, view_job *j)
{
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_session_check_region(v->s, j->p.rect, &err);
    ssb4d_fit_result r;
    memset(&r, 0, sizeof r);
    if (!st)
        st = ssb4d_session_fit_region(v->s, j->p.rect, NULL, &r, &err);
    if (st) {
        fail(v, &j->resp, st, err.msg);
        return;
    }
    cJSON *o = fit_json(&r);
    add_rect(o, "rect", j->p.rect);
    pthread_mutex_lock(&v->mu);
    if (v->has_region_res)
        ssb4d_fit_result_free(&v->region_res);
    v->region_res = r;
    v->has_region_res = 1;
    cJSON_Delete(v->region);
    v->region = cJSON_Duplicate(o, 1);
    pthread_mutex_unlock(&v->mu);
    view_resp_json(&j->resp, 200, o);
}

static cJSON *pair_num(const double x[2])
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < 2; k++)
        cJSON_AddItemToArray(a, isfinite(x[k]) ? cJSON_CreateNumber(x[k]) : cJSON_CreateNull());
    return a;
}

static cJSON *num_or_null(double x) { return isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull(); }

/* Refine (SPEC §13, docs/refine.md "Viewer"): ssb4d_session_refine on the drawn region, with the
 * session's progress and cancel; the record under `ssb4d refine --json`'s keys; the images kept
 * for GET /api/refine/image (the projected phase, each slice). The session's parameters become
 * the refined ones (Save writes the "refine" section). */
static void do_refine(view_server *v, view_job *j)
{
    const job_params *p = &j->p;
    ssb4d_refine_params rp;
    ssb4d_refine_params_default(&rp);
    if (p->refine_slices)
        rp.slices = p->refine_slices;
    if (p->refine_iterations)
        rp.iterations = p->refine_iterations;
    if (!isnan(p->refine_range_nm[0]))
        memcpy(rp.thickness_range_nm, p->refine_range_nm, sizeof rp.thickness_range_nm);
    rp.refine_thickness = rp.thickness_range_nm[0] < rp.thickness_range_nm[1];
    pthread_mutex_lock(&v->mu);
    int had_fit = v->has_fit;
    pthread_mutex_unlock(&v->mu);
    ssb4d_refine_result r;
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_session_refine(v->s, p->rect, &rp, &r, &err);
    ssb4d_fit_result fr;
    if (!had_fit && ssb4d_session_last_fit(v->s, &fr)) /* the seed's standard fit ran first: the */
        show_fit(v, &fr, cJSON_CreateArray());        /* result panel shows it (Reset returns to it) */
    if (st) {
        fail(v, &j->resp, st, err.msg);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "C10_nm", num_or_null(r.ab.C_nm[SSB4D_C10]));
    cJSON_AddItemToObject(o, "C12_nm", num_or_null(r.ab.C_nm[SSB4D_C12]));
    cJSON_AddItemToObject(o, "phi12_deg", num_or_null(r.ab.phi_deg[SSB4D_C12]));
    cJSON_AddItemToObject(o, "phi12_probe_deg", num_or_null(r.phi12_probe_deg));
    cJSON_AddItemToObject(o, "rotation_deg", num_or_null(r.geom.rotation_deg));
    cJSON_AddBoolToObject(o, "flip", r.geom.flip != 0);
    cJSON_AddItemToObject(o, "tilt_mrad", pair_num(r.tilt_probe_mrad)); /* probe frame, as refine --json */
    cJSON_AddItemToObject(o, "tilt_scan_mrad", pair_num(r.tilt_mrad));
    cJSON_AddItemToObject(o, "thickness_nm", num_or_null(r.thickness_nm));
    cJSON_AddNumberToObject(o, "slices", r.slices);
    cJSON_AddBoolToObject(o, "tilt_refined", r.tilt_refined != 0); /* false: the start's (one slice) */
    cJSON_AddBoolToObject(o, "thickness_refined", r.thickness_refined != 0);
    cJSON_AddItemToObject(o, "nll", num_or_null(r.nll));
    cJSON_AddItemToObject(o, "nll_expected", num_or_null(r.nll_expected));
    cJSON *h = cJSON_AddArrayToObject(o, "nll_history");
    for (size_t i = 0; i < r.n_history; i++)
        cJSON_AddItemToArray(h, num_or_null(r.history[i]));
    cJSON_AddBoolToObject(o, "confident", r.confident != 0);
    if (r.confident)
        cJSON_AddNullToObject(o, "warning");
    else
        cJSON_AddStringToObject(o, "warning", r.warning);
    add_rect(o, "region", r.region);
    cJSON *sh = cJSON_AddArrayToObject(o, "object_shape");
    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)r.obj_shape[0]));
    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)r.obj_shape[1]));
    cJSON_AddItemToObject(o, "object_pixel_A", pair_num(r.obj_pixel_A));
    cJSON_AddNumberToObject(o, "seconds", r.seconds);
    pthread_mutex_lock(&v->mu);
    if (v->has_refine_res)
        ssb4d_refine_result_free(&v->refine_res);
    v->refine_res = r;
    v->has_refine_res = 1;
    cJSON_Delete(v->refine);
    v->refine = cJSON_Duplicate(o, 1);
    pthread_mutex_unlock(&v->mu);
    view_resp_json(&j->resp, 200, o);
}

/* Fit Regions: each cell of the grid over p->rect, then (the rotation searched) the 180° branch
 * from the cell that settles it most clearly, held for the others' refits and for the field
 * (ssb4d_session_settle_branch, as `ssb4d fit-regions` and Python do): the answer's and the
 * state's branch_region (null: none set it), branch_unsettled (searched, none settled it) and each
 * cell's rotation_set_by. */
static void do_regions(view_server *v, view_job *j)
{
    const job_params *p = &j->p;
    size_t n = p->rows * p->cols, from = n;
    ssb4d_err err = {0};
    size_t(*rects)[4] = calloc(n, sizeof *rects);
    ssb4d_fit_result *res = calloc(n, sizeof *res);
    ssb4d_status st = rects && res ? SSB4D_OK : ssb4d_err_set(&err, SSB4D_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && !st; i++) { /* every cell checked before the long work */
        grid_in(p->rect, p->rows, p->cols, i, rects[i]);
        st = ssb4d_session_check_region(v->s, rects[i], &err);
    }
    for (size_t i = 0; i < n && !st; i++) {
        pthread_mutex_lock(&v->mu);
        snprintf(v->job_name, sizeof v->job_name, "regions %zu/%zu", i + 1, n);
        int cancelled = v->cancel_job; /* a cancel between two regions' fits */
        pthread_mutex_unlock(&v->mu);
        st = cancelled ? ssb4d_err_set(&err, SSB4D_ECANCELLED, "cancelled")
                       : ssb4d_session_fit_region(v->s, rects[i], NULL, &res[i], &err);
    }
    if (!st) {
        pthread_mutex_lock(&v->mu);
        snprintf(v->job_name, sizeof v->job_name, "regions branch");
        int cancelled = v->cancel_job;
        pthread_mutex_unlock(&v->mu);
        st = cancelled ? ssb4d_err_set(&err, SSB4D_ECANCELLED, "cancelled")
                       : ssb4d_session_settle_branch(v->s, &rects[0][0], n, NULL, res, &from, &err);
        if (from < n) /* the session holds the settled rotation and handedness: the field's too */
            snapshot_params(v);
    }
    cJSON *o = NULL;
    if (!st) {
        o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rows", (double)p->rows);
        cJSON_AddNumberToObject(o, "cols", (double)p->cols);
        add_rect(o, "rect", p->rect);
        if (from < n) {
            cJSON *b = cJSON_AddObjectToObject(o, "branch_region");
            cJSON_AddNumberToObject(b, "index", (double)from);
            add_rect(b, "rect", rects[from]);
            cJSON_AddNumberToObject(b, "skewness", res[from].skewness);
            cJSON_AddNumberToObject(b, "rotation_deg", res[from].geom.rotation_deg);
            cJSON_AddBoolToObject(b, "flip", res[from].geom.flip != 0);
        } else {
            cJSON_AddNullToObject(o, "branch_region");
        }
        /* There was a branch to settle and no cell settled it: each keeps its own, which the page
         * says (ssb4d fit-regions warns). */
        cJSON_AddBoolToObject(o, "branch_unsettled", from == n && ssb4d_session_branch_to_settle(v->s, NULL, n));
        cJSON *cells = cJSON_AddArrayToObject(o, "cells");
        for (size_t i = 0; i < n; i++) {
            cJSON *c = fit_json(&res[i]);
            add_rect(c, "rect", rects[i]);
            if (from < n)
                cJSON_AddNumberToObject(c, "rotation_set_by", (double)from);
            else
                cJSON_AddNullToObject(c, "rotation_set_by");
            cJSON_AddItemToArray(cells, c);
        }
    }
    for (size_t i = 0; res && i < n; i++)
        ssb4d_fit_result_free(&res[i]);
    free(res);
    free(rects);
    if (st) {
        fail(v, &j->resp, st, err.msg);
        return;
    }
    pthread_mutex_lock(&v->mu);
    cJSON_Delete(v->regions);
    v->regions = cJSON_Duplicate(o, 1);
    pthread_mutex_unlock(&v->mu);
    view_resp_json(&j->resp, 200, o);
}

/* Holds the rotation at deg unless it is the current one already (a held rotation is kept by
 * later fits, so it is only set when the person moved it). */
static ssb4d_status set_rotation_if_moved(view_server *v, double deg, ssb4d_err *err)
{
    ssb4d_geometry g;
    ssb4d_session_get(v->s, NULL, NULL, &g);
    if (!isfinite(deg) || deg == g.rotation_deg)
        return SSB4D_OK;
    return ssb4d_session_set_rotation(v->s, deg, err);
}

/* Makes ab, th and the rotation current and answers with the new state (apply and reset). */
static void set_and_answer(view_server *v, view_job *j, double rotation_deg, const ssb4d_aberrations *ab,
                           const ssb4d_thick *th)
{
    ssb4d_err err = {0};
    ssb4d_status st = set_rotation_if_moved(v, rotation_deg, &err);
    if (st) {
        fail(v, &j->resp, st, err.msg);
        return;
    }
    ssb4d_session_set(v->s, ab, th);
    snapshot_params(v);
    view_resp_json(&j->resp, 200, view_state_json(v));
}

static void do_apply(view_server *v, view_job *j)
{
    if (j->p.apply_region) {
        if (!v->has_region_res) { /* only the worker writes region_res: no lock to read it here */
            view_resp_text(&j->resp, 409, "no region refit to apply");
            return;
        }
        ssb4d_session_apply(v->s, &v->region_res);
        snapshot_params(v);
        view_resp_json(&j->resp, 200, view_state_json(v));
        return;
    }
    ssb4d_aberrations ab;
    ssb4d_thick th;
    params_over_current(v, &j->p, &ab, &th);
    set_and_answer(v, j, j->p.rotation_deg, &ab, &th);
}

static void do_reset(view_server *v, view_job *j)
{
    pthread_mutex_lock(&v->mu);
    ssb4d_aberrations ab = v->fit_ab;
    ssb4d_thick th = v->fit_thick;
    double rot = v->fit_rotation_deg;
    pthread_mutex_unlock(&v->mu);
    set_and_answer(v, j, rot, &ab, &th);
}

static void do_fit_tilt(view_server *v, view_job *j)
{
    ssb4d_tilt_result r;
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_session_fit_tilt(v->s, &r, &err);
    if (st) {
        fail(v, &j->resp, st, err.msg);
        return;
    }
    /* Its result is now the fitted values Reset returns to. */
    ssb4d_aberrations ab;
    ssb4d_thick th;
    ssb4d_session_get(v->s, &ab, &th, NULL);
    pthread_mutex_lock(&v->mu);
    v->fit_ab = ab;
    v->fit_thick = th;
    pthread_mutex_unlock(&v->mu);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "C10_nm", r.C10_nm);
    cJSON_AddNumberToObject(o, "C12_nm", r.C12_nm);
    cJSON_AddNumberToObject(o, "phi12_deg", r.phi12_deg);
    cJSON *t = cJSON_AddArrayToObject(o, "tilt_mrad");
    cJSON_AddItemToArray(t, cJSON_CreateNumber(r.thick.tilt_mrad[0]));
    cJSON_AddItemToArray(t, cJSON_CreateNumber(r.thick.tilt_mrad[1]));
    cJSON_AddNumberToObject(o, "thickness_nm", r.thick.thickness_nm);
    cJSON_AddNumberToObject(o, "gain", r.gain);
    cJSON_AddBoolToObject(o, "thin_kept", r.thin_kept);
    view_resp_json(&j->resp, 200, o);
}

/* Save calibration (SPEC §7): a plain name (api.c checked it) inside the output folder, never
 * replacing a file unless the server was started with --force: the page's URL may be seen by
 * others on a shared machine, and the files are the person's. */
static void do_save(view_server *v, view_job *j)
{
    ssb4d_err err = {0};
    char path[1400];
    const char *dir = v->cfg.save_dir ? v->cfg.save_dir : ".";
    size_t dl = strlen(dir);
    snprintf(path, sizeof path, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/",
             j->p.path[0] ? j->p.path : "calibration.json");
    struct stat st_old;
    if (!lstat(path, &st_old)) {
        if (!S_ISREG(st_old.st_mode)) {
            view_resp_text(&j->resp, 409, "%s exists and is not a plain file", path);
            return;
        }
        if (!v->cfg.force) {
            view_resp_text(&j->resp, 409, "%s exists (ssb4d view --force lets Save replace files)", path);
            return;
        }
        if (!j->p.force) { /* --force allows it; the person still says so ("replace") */
            view_resp_text(&j->resp, 409, "%s exists (tick \"replace\" to replace it)", path);
            return;
        }
    }
    ssb4d_status st = ssb4d_session_save_calibration(v->s, path, v->cfg.force && j->p.force, &err);
    if (st && strstr(err.msg, "already exists")) { /* made by someone else meanwhile */
        view_resp_text(&j->resp, 409, "%s", err.msg);
        return;
    }
    if (st) {
        fail(v, &j->resp, st, err.msg);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    view_resp_json(&j->resp, 200, o);
}

/* A virtual image (BF, ADF, CoM, iDPC), scan-sized float32 like a preview, to choose a region on.
 * All five come from one streaming pass over the data, made once and kept (40 bytes per scan
 * position) until the rotation or handedness changes. */
static void do_virtual(view_server *v, view_job *j)
{
    ssb4d_err err = {0};
    ssb4d_status st = ensure_virtual(v, &err);
    if (st) {
        fail(v, &j->resp, st, err.msg);
        return;
    }
    const double *src[VIRT_N] = {v->virt.bf, v->virt.adf, v->virt.com_x, v->virt.com_y, v->virt.idpc};
    size_t ny = v->virt.scan_shape[0], nx = v->virt.scan_shape[1];
    float *img = malloc(ny * nx * sizeof *img);
    if (!img) {
        fail(v, &j->resp, SSB4D_ENOMEM, "out of memory for the virtual image");
        return;
    }
    for (size_t i = 0; i < ny * nx; i++)
        img[i] = (float)src[j->p.virt][i];
    view_resp *r = &j->resp;
    view_resp_image(r, img, ny, nx, NULL);
    static const char *const units[VIRT_N] = {"counts", "counts", "mrad", "mrad", NULL};
    view_resp_header(r, "X-Unit", "%s", units[j->p.virt] ? units[j->p.virt] : v->virt.idpc_unit);
    if (j->p.virt == VIRT_BF || j->p.virt == VIRT_ADF)
        view_resp_header(r, "X-Angles-Mrad", "%.4g %.4g", j->p.virt == VIRT_BF ? v->virt.bf_inner_mrad : v->virt.adf_inner_mrad,
                         j->p.virt == VIRT_BF ? v->virt.bf_outer_mrad : v->virt.adf_outer_mrad);
}

static const char *job_label(job_kind k)
{
    static const char *names[] = {"start", "preview", "fit", "fit tilt", "region", "regions", "apply", "reset", "save",
                                  "virtual images", "refine"};
    return names[k];
}

static void run_job(view_server *v, view_job *j)
{
    switch (j->kind) {
    case JOB_START: do_start(v, &j->resp); break;
    case JOB_PREVIEW: do_preview(v, j); break;
    case JOB_FIT: do_fit(v, &j->resp); break;
    case JOB_FIT_TILT: do_fit_tilt(v, j); break;
    case JOB_REGION: do_region(v, j); break;
    case JOB_REGIONS: do_regions(v, j); break;
    case JOB_APPLY: do_apply(v, j); break;
    case JOB_RESET: do_reset(v, j); break;
    case JOB_SAVE: do_save(v, j); break;
    case JOB_VIRTUAL: do_virtual(v, j); break;
    case JOB_REFINE: do_refine(v, j); break;
    }
    if (j->kind != JOB_PREVIEW)
        snapshot_params(v);
}

/* A preview that will not be drawn: 204 with X-Superseded, which a browser does not count as an
 * error (409 filled the console with red lines on every drag). */
static void answer_superseded(view_resp *r)
{
    view_resp_free(r);
    r->status = 204;
    r->ctype = "text/plain";
    view_resp_header(r, "X-Superseded", "1");
}

/* Answers a job that will not run (stopping) and wakes its handler. Under mu. */
static void answer_locked(view_server *v, view_job *j, int status, const char *msg)
{
    view_resp_text(&j->resp, status, "%s", msg);
    j->done = 1;
    pthread_cond_broadcast(&v->done);
}

/* ---- a distributed viewer (view_follow): the jobs rank 0 runs, sent to the other ranks ------- */

#define JOB_QUIT ((job_kind)-1)

typedef struct {
    int32_t kind;
    job_params p;
} job_msg;

/* Rank 0 (the worker thread: the only thread that sends): the job it is about to run. A failed
 * send leaves the ranks apart, so it ends the job (MPI aborts every rank on a failed message). */
static void send_job(view_server *v, job_kind kind, const job_params *p)
{
    job_msg m;
    memset(&m, 0, sizeof m);
    m.kind = (int32_t)kind;
    if (p)
        m.p = *p;
    ssb4d_err err;
    if (ssb4d_dist_bcast(v->cfg.dist, &m, sizeof m, 0, &err))
        fprintf(stderr, "ssb4d view: %s\n", err.msg);
}

int view_follow(view_server *v, ssb4d_session *s, ssb4d_err *err)
{
    v->s = s;
    view_job start;
    memset(&start, 0, sizeof start);
    do_start(v, &start.resp);
    view_resp_free(&start.resp);
    for (;;) {
        job_msg m;
        ssb4d_status st = ssb4d_dist_bcast(v->cfg.dist, &m, sizeof m, 0, err);
        if (st)
            return st;
        if (m.kind == (int32_t)JOB_QUIT)
            return 0;
        if (m.kind == JOB_SAVE) /* rank 0 writes */
            continue;
        view_job j;
        memset(&j, 0, sizeof j);
        j.kind = (job_kind)m.kind;
        j.p = m.p;
        j.p.path[sizeof j.p.path - 1] = 0;
        run_job(v, &j);
        view_resp_free(&j.resp);
    }
}

static void *worker_main(void *arg)
{
    view_server *v = arg;
    view_job idle; /* the idle virtual-image pass, while nothing else waits */
    /* The start job is the worker's own: calibrate, then fit (or set the given values). */
    view_job start;
    memset(&start, 0, sizeof start);
    start.kind = JOB_START;
    pthread_mutex_lock(&v->mu);
    snprintf(v->job_name, sizeof v->job_name, "%s", v->cfg.fit_on_start ? "calibrate and fit" : "calibrate");
    v->running = &start;
    v->cancel_job = 0;
    pthread_mutex_unlock(&v->mu);
    do_start(v, &start.resp);
    snapshot_params(v);
    view_resp_free(&start.resp);
    pthread_mutex_lock(&v->mu);
    v->running = NULL;
    v->job_name[0] = 0;
    /* The page shows the start-up's result now and the person acts on it: the idle work waits
     * as it would after a request. */
    v->last_request_s = ssb4d_clock_s();
    for (;;) {
        if (v->stop)
            break;
        view_job *j = v->fifo_head;
        if (j) {
            v->fifo_head = j->next;
            if (!v->fifo_head)
                v->fifo_tail = NULL;
        } else if ((j = v->pending_release))
            v->pending_release = NULL;
        else if ((j = v->pending))
            v->pending = NULL;
        else if (!v->has_virt && !v->virt_failed && v->cal.ready && !v->cfg.dist &&
                 ssb4d_clock_s() - v->last_request_s < VIEW_IDLE_S) {
            /* Requests came a moment ago: more will (a drag). Wait until it has been quiet. */
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            double until = VIEW_IDLE_S - (ssb4d_clock_s() - v->last_request_s);
            t.tv_sec += (time_t)until;
            t.tv_nsec += (long)((until - (double)(time_t)until) * 1e9);
            if (t.tv_nsec >= 1000000000)
                t.tv_sec++, t.tv_nsec -= 1000000000;
            pthread_cond_timedwait(&v->wake, &v->mu, &t);
            continue;
        } else if (!v->has_virt && !v->virt_failed && v->cal.ready && !v->cfg.dist) {
            /* Idle: the virtual images, one pass over the frames, so that they are there when
             * the person asks. Any request cancels it (view_submit); it starts again when idle. */
            memset(&idle, 0, sizeof idle);
            idle.kind = JOB_VIRTUAL;
            idle.idle = 1;
            v->running = &idle;
            v->cancel_job = 0; /* the last job's cancel is not this pass's (view_progress) */
            pthread_mutex_unlock(&v->mu);
            ssb4d_err verr = {0};
            ssb4d_status vst = ensure_virtual(v, &verr);
            pthread_mutex_lock(&v->mu);
            v->running = NULL;
            if (vst && vst != SSB4D_ECANCELLED) {
                v->virt_failed = 1; /* asked for, it says why; not tried again while idle */
                if (!v->cfg.quiet)
                    fprintf(stderr, "ssb4d view: no virtual images: %s\n", verr.msg);
            }
            continue;
        } else {
            pthread_cond_wait(&v->wake, &v->mu); /* idle: no polling */
            continue;
        }
        v->running = j;
        v->cancel_job = j->cancelled;
        snprintf(v->job_name, sizeof v->job_name, "%s", j->kind == JOB_PREVIEW ? "" : job_label(j->kind));
        v->stage[0] = 0;
        v->fraction = 0;
        v->last_error[0] = j->kind == JOB_PREVIEW ? v->last_error[0] : 0;
        pthread_mutex_unlock(&v->mu);
        if (j->cancelled)
            fail(v, &j->resp, SSB4D_ECANCELLED, "cancelled");
        else {
            if (v->cfg.dist)
                send_job(v, j->kind, &j->p);
            run_job(v, j);
        }
        pthread_mutex_lock(&v->mu);
        v->running = NULL;
        v->job_name[0] = 0;
        if (j->kind == JOB_PREVIEW && j->superseded) /* a release cancelled it while it ran */
            answer_superseded(&j->resp);
        j->done = 1;
        pthread_cond_broadcast(&v->done);
    }
    if (v->cfg.dist) /* the other ranks stop with us */
        send_job(v, JOB_QUIT, NULL);
    /* Stopping: whoever still waits gets an answer. */
    for (view_job *j = v->fifo_head; j; j = j->next)
        answer_locked(v, j, 503, "the server is stopping");
    v->fifo_head = v->fifo_tail = NULL;
    if (v->pending)
        answer_locked(v, v->pending, 503, "the server is stopping");
    if (v->pending_release)
        answer_locked(v, v->pending_release, 503, "the server is stopping");
    v->pending = v->pending_release = NULL;
    pthread_mutex_unlock(&v->mu);
    return NULL;
}

int view_worker_start(view_server *v)
{
    if (pthread_create(&v->worker, NULL, worker_main, v))
        return -1;
    v->worker_started = 1;
    return 0;
}

void view_worker_stop(view_server *v)
{
    if (!v->worker_started)
        return;
    pthread_mutex_lock(&v->mu);
    v->stop = 1;
    if (v->running && !v->cfg.dist)
        ssb4d_session_cancel(v->s);
    pthread_cond_broadcast(&v->wake);
    pthread_mutex_unlock(&v->mu);
    /* A cancel belongs to the call running when it comes: one that lands between two calls of a
     * job (calibrate, then fit) would be lost, so it is repeated until the worker has ended. */
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 50000000;
        if (t.tv_nsec >= 1000000000)
            t.tv_sec++, t.tv_nsec -= 1000000000;
        if (pthread_timedjoin_np(v->worker, NULL, &t) == 0)
            break;
        if (!v->cfg.dist) /* distributed: the running job ends on every rank (no cancel) */
            ssb4d_session_cancel(v->s);
    }
    v->worker_started = 0;
}

void view_cancel_running(view_server *v)
{
    pthread_mutex_lock(&v->mu);
    if (v->running && !v->cfg.dist) {
        if (v->running->idle && v->fifo_head) {
            /* The person's job waits while the idle pass winds down (view_submit cancelled it):
             * the cancel is that job's, not the idle pass's, or it would be lost and the job run. */
            v->fifo_head->cancelled = 1;
        } else {
            ssb4d_session_cancel(v->s);
            v->cancel_job = 1; /* also through view_progress: a cancel before the job's call began */
        }
        v->n_cancels++;
    }
    pthread_mutex_unlock(&v->mu);
}

/* A release: the full BF set with the loss, as the page asks when a slider is let go, the view or
 * the upsampling changes. It must not wait behind drags. */
static int is_release(const job_params *p)
{
    return p->want_loss; /* the page's drags never ask for the loss, its releases always do */
}

void view_submit(view_server *v, view_job *j)
{
    pthread_mutex_lock(&v->mu);
    if (v->stop) {
        view_resp_text(&j->resp, 503, "the server is stopping");
        pthread_mutex_unlock(&v->mu);
        return;
    }
    j->done = 0;
    j->cancelled = 0;
    j->next = NULL;
    v->last_request_s = ssb4d_clock_s();
    if (v->running && v->running->idle) /* the idle pass gives way to anything asked */
        ssb4d_session_cancel(v->s);
    if (j->kind == JOB_PREVIEW) {
        v->n_previews++;
        /* Ordered by seq, not by arrival: an older request that comes late must not supersede a
         * newer one (seq 0: unordered, always taken). */
        if (j->p.seq > 0 && j->p.seq < v->latest_seq) {
            v->n_stale++;
            answer_superseded(&j->resp);
            pthread_mutex_unlock(&v->mu);
            return;
        }
        if (j->p.seq > v->latest_seq)
            v->latest_seq = j->p.seq;
        /* Only the latest waits: a drag replaces the waiting drag; a release replaces both (a
         * drag replaces no release: the image asked for on letting go is not lost to a later
         * touch of the slider, and the release runs first). */
        int release = is_release(&j->p);
        view_job **slots[2] = {&v->pending, release ? &v->pending_release : NULL};
        for (int k = 0; k < 2; k++) {
            view_job *old = slots[k] ? *slots[k] : NULL;
            if (!old)
                continue;
            old->superseded = 1;
            v->n_superseded++;
            answer_superseded(&old->resp);
            old->done = 1;
            *slots[k] = NULL;
            pthread_cond_broadcast(&v->done);
        }
        *(release ? &v->pending_release : &v->pending) = j;
        /* The running preview finishes and is drawn, unless this is a release: then it would only
         * delay the image the person asked for. Distributed: jobs are never cancelled midway. */
        if (release && v->running && v->running->kind == JOB_PREVIEW && !v->running->superseded && !v->cfg.dist) {
            v->running->superseded = 1;
            v->n_superseded++;
            v->n_cancels++;
            ssb4d_session_cancel(v->s);
        }
    } else {
        if (v->fifo_tail)
            v->fifo_tail->next = j;
        else
            v->fifo_head = j;
        v->fifo_tail = j;
    }
    pthread_cond_signal(&v->wake);
    while (!j->done)
        pthread_cond_wait(&v->done, &v->mu);
    pthread_mutex_unlock(&v->mu);
}
