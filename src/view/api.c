/* api.c — the routes of /api/ and their strict JSON: a body must be one JSON object whose fields
 * are all known to the route, numbers finite and in sane ranges, strings from a fixed list;
 * anything else is 400 with one line saying which field and why. Reads (state, calibration) are
 * answered from the worker's snapshot without waiting; everything that touches the session is a
 * job for the worker. */
#include "view/view_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- validation --------------------------------------------------------------------------- */

/* 0 when every field of o is in the NULL-terminated list; else 400 naming the first stranger. */
static int only_fields(const cJSON *o, const char *const *allowed, view_resp *r)
{
    for (const cJSON *f = o->child; f; f = f->next) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            ok |= f->string && !strcmp(f->string, *a);
        if (!ok) {
            view_resp_text(r, 400, "unknown field '%s'", f->string ? f->string : "?");
            return -1;
        }
        for (const cJSON *g = o->child; g != f; g = g->next)
            if (g->string && f->string && !strcmp(g->string, f->string)) {
                view_resp_text(r, 400, "field '%s' given twice", f->string);
                return -1;
            }
    }
    return 0;
}

/* A number field: absent → 0 (*out untouched); present → 1 if finite in [lo, hi]; else -1 + 400. */
static int num_field(const cJSON *o, const char *name, double lo, double hi, double *out, view_resp *r)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!f)
        return 0;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble)) {
        view_resp_text(r, 400, "'%s' must be a finite number", name);
        return -1;
    }
    if (f->valuedouble < lo || f->valuedouble > hi) {
        view_resp_text(r, 400, "'%s' must be in [%g, %g]", name, lo, hi);
        return -1;
    }
    *out = f->valuedouble;
    return 1;
}

static int int_field(const cJSON *o, const char *name, double lo, double hi, size_t *out, view_resp *r)
{
    double d;
    int k = num_field(o, name, lo, hi, &d, r);
    if (k > 0) {
        if (d != floor(d)) {
            view_resp_text(r, 400, "'%s' must be an integer", name);
            return -1;
        }
        *out = (size_t)d;
    }
    return k;
}

static int bool_field(const cJSON *o, const char *name, int *out, view_resp *r)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!f)
        return 0;
    if (!cJSON_IsBool(f)) {
        view_resp_text(r, 400, "'%s' must be true or false", name);
        return -1;
    }
    *out = cJSON_IsTrue(f);
    return 1;
}

/* A string field that must be one of the list: its index, or -1 absent, or -2 (400). */
static int enum_field(const cJSON *o, const char *name, const char *const *list, view_resp *r)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!f)
        return -1;
    if (cJSON_IsString(f))
        for (int i = 0; list[i]; i++)
            if (!strcmp(f->valuestring, list[i]))
                return i;
    view_resp_text(r, 400, "'%s' must be one of the allowed names", name);
    return -2;
}

/* A rectangle [r0, r1, c0, c1] of whole scan positions, r0 < r1 <= rows, c0 < c1 <= cols. */
static int rect_field(view_server *v, const cJSON *o, size_t rect[4], int required, view_resp *r)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "rect");
    size_t rows = v->shape[0], cols = v->shape[1];
    if (!f) {
        if (required) {
            view_resp_text(r, 400, "'rect' [r0, r1, c0, c1] is required");
            return -1;
        }
        rect[0] = 0, rect[1] = rows, rect[2] = 0, rect[3] = cols;
        return 0;
    }
    if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) != 4) {
        view_resp_text(r, 400, "'rect' must be [r0, r1, c0, c1]");
        return -1;
    }
    for (int k = 0; k < 4; k++) {
        const cJSON *e = cJSON_GetArrayItem(f, k);
        double d = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (!isfinite(d) || d < 0 || d != floor(d) || d > (double)(k < 2 ? rows : cols)) {
            view_resp_text(r, 400, "'rect' must hold whole scan positions inside the %zux%zu scan", rows, cols);
            return -1;
        }
        rect[k] = (size_t)d;
    }
    if (rect[0] >= rect[1] || rect[2] >= rect[3]) {
        view_resp_text(r, 400, "'rect' must have r0 < r1 and c0 < c1");
        return -1;
    }
    return 1;
}

/* A field of the parameter table (ssb4d_params): the row of op named name (its JSON name only),
 * checked for its JSON type (a number, true/false, a choice's name, a [row, col] pair) and its
 * range, and stored into target, the op's struct. Absent → 0; stored → 1; else -1 + 400 naming
 * the field and what it must be. */
static int table_field(const cJSON *o, ssb4d_op op, const char *name, void *target, view_resp *r)
{
    const ssb4d_param *p = ssb4d_param_find(op, name);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!p || strcmp(p->name, name) || !f)
        return 0;
    double v[2] = {NAN, NAN};
    int ok;
    switch (p->type) {
    case SSB4D_PARAM_BOOL: ok = cJSON_IsBool(f), v[0] = cJSON_IsTrue(f); break;
    case SSB4D_PARAM_ENUM: {
        ok = 0;
        size_t k = 0;
        for (const char *c = p->choices; c && cJSON_IsString(f); c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL, k++)
            if (strlen(f->valuestring) == strcspn(c, "|") && !strncmp(c, f->valuestring, strcspn(c, "|")))
                ok = 1, v[0] = (double)k;
        break;
    }
    case SSB4D_PARAM_PAIR: {
        const cJSON *a = cJSON_GetArrayItem(f, 0), *b = cJSON_GetArrayItem(f, 1);
        ok = cJSON_IsArray(f) && cJSON_GetArraySize(f) == 2 && cJSON_IsNumber(a) && cJSON_IsNumber(b);
        if (ok)
            v[0] = a->valuedouble, v[1] = b->valuedouble;
        break;
    }
    default: ok = cJSON_IsNumber(f), v[0] = ok ? f->valuedouble : NAN; break;
    }
    ssb4d_err err = {0};
    if (ok && ssb4d_param_set(p, target, v, &err) == SSB4D_OK)
        return 1;
    char what[160];
    view_resp_text(r, 400, "'%s' must be %s%s%s%s%s", name, ssb4d_param_describe(p, what, sizeof what),
                   p->type == SSB4D_PARAM_PAIR ? " as [row, col]" : "", *p->unit ? " (" : "", p->unit,
                   *p->unit ? ")" : "");
    return -1;
}

/* An aberration field (a row of SSB4D_OP_ABERRATIONS: "C10_nm", "phi32_deg") into p->ab, marked
 * given in c_mask or phi_mask. Absent → 0, stored → 1, else -1 + 400. */
static int aberr_field(const cJSON *o, const char *name, job_params *p, view_resp *r)
{
    int k = table_field(o, SSB4D_OP_ABERRATIONS, name, &p->ab, r);
    if (k > 0) {
        size_t off = ssb4d_param_find(SSB4D_OP_ABERRATIONS, name)->offset, phi = offsetof(ssb4d_aberrations, phi_deg);
        if (off < phi)
            p->c_mask |= 1u << ((off - offsetof(ssb4d_aberrations, C_nm)) / sizeof(double));
        else
            p->phi_mask |= 1u << ((off - phi) / sizeof(double));
    }
    return k;
}

/* The parameters shared by preview and apply: C10, C12, φ12, rotation, the higher orders
 * ("aberr": {"C30_nm": …, "phi32_deg": …}), tilt and thickness, each as the parameter table says. */
static int params_fields(const cJSON *o, job_params *p, view_resp *r)
{
    static const char *const TOP[] = {"C10_nm", "C12_nm", "phi12_deg"};
    for (int i = 0; i < 3; i++)
        if (aberr_field(o, TOP[i], p, r) < 0)
            return -1;
    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    if (table_field(o, SSB4D_OP_PREVIEW, "rotation_deg", &q, r) < 0)
        return -1;
    p->rotation_deg = q.rotation_deg;
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(o, "aberr");
    if (ab) {
        if (!cJSON_IsObject(ab)) {
            view_resp_text(r, 400, "'aberr' must be an object like {\"C30_nm\": 1000}");
            return -1;
        }
        for (const cJSON *f = ab->child; f; f = f->next) {
            const char *s = f->string ? f->string : "";
            const ssb4d_param *row = ssb4d_param_find(SSB4D_OP_ABERRATIONS, s);
            if (!row || strcmp(row->name, s)) {
                view_resp_text(r, 400, "unknown aberration '%s' (C21_nm … C56_nm, phi21_deg …)", s);
                return -1;
            }
            if (aberr_field(ab, s, p, r) < 0)
                return -1;
        }
    }
    int k;
    if ((k = table_field(o, SSB4D_OP_THICK, "tilt_mrad", &p->thick, r)) < 0)
        return -1;
    p->has_tilt = k;
    if ((k = table_field(o, SSB4D_OP_THICK, "thickness_nm", &p->thick, r)) < 0)
        return -1;
    p->has_thickness = k;
    return 0;
}

/* ---- the state ---------------------------------------------------------------------------- */

static cJSON *ab_json(const ssb4d_aberrations *ab, const ssb4d_thick *th, double rot)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "C10_nm", ab->C_nm[SSB4D_C10]);
    cJSON_AddNumberToObject(o, "C12_nm", ab->C_nm[SSB4D_C12]);
    cJSON_AddNumberToObject(o, "phi12_deg", ab->phi_deg[SSB4D_C12]);
    cJSON_AddNumberToObject(o, "rotation_deg", isfinite(rot) ? rot : 0);
    cJSON *h = cJSON_AddObjectToObject(o, "aberr");
    for (int i = SSB4D_C21; i < SSB4D_N_ABERR; i++) {
        char n[16];
        snprintf(n, sizeof n, "%s_nm", ssb4d_aberr_name(i));
        cJSON_AddNumberToObject(h, n, ab->C_nm[i]);
        if (ssb4d_aberr_m(i)) {
            snprintf(n, sizeof n, "phi%s_deg", ssb4d_aberr_name(i) + 1);
            cJSON_AddNumberToObject(h, n, ab->phi_deg[i]);
        }
    }
    cJSON *t = cJSON_AddArrayToObject(o, "tilt_mrad");
    cJSON_AddItemToArray(t, cJSON_CreateNumber(th->tilt_mrad[0]));
    cJSON_AddItemToArray(t, cJSON_CreateNumber(th->tilt_mrad[1]));
    cJSON_AddNumberToObject(o, "thickness_nm", th->thickness_nm);
    return o;
}

static cJSON *pair(double a, double b)
{
    cJSON *t = cJSON_CreateArray();
    cJSON_AddItemToArray(t, cJSON_CreateNumber(a));
    cJSON_AddItemToArray(t, cJSON_CreateNumber(b));
    return t;
}

cJSON *view_state_json(view_server *v)
{
    cJSON *o = cJSON_CreateObject();
    ssb4d_mem *m = ssb4d_session_mem(v->s); /* its counters have their own lock */
    pthread_mutex_lock(&v->mu);
    cJSON_AddStringToObject(o, "dataset", v->cfg.data_name ? v->cfg.data_name : "");
    cJSON_AddStringToObject(o, "backend", ssb4d_session_backend(v->s)); /* fixed when the session opened */
    cJSON *sh = cJSON_AddArrayToObject(o, "shape");
    for (int k = 0; k < 4; k++)
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)v->shape[k]));
    cJSON_AddBoolToObject(o, "ready", v->cal.ready);
    cJSON_AddItemToObject(o, "image", pair((double)v->image[0], (double)v->image[1]));
    if (v->cal.ready) {
        cJSON *c = cJSON_AddObjectToObject(o, "calibration");
        cJSON_AddNumberToObject(c, "kv", v->cal.kv);
        cJSON_AddNumberToObject(c, "semiangle_mrad", v->cal.semiangle_mrad);
        cJSON_AddItemToObject(c, "scan_step_A", pair(v->cal.scan_step_A[0], v->cal.scan_step_A[1]));
        cJSON_AddItemToObject(c, "det_sampling_mrad", pair(v->cal.det_sampling_mrad[0], v->cal.det_sampling_mrad[1]));
        cJSON_AddItemToObject(c, "disk_centre_px", pair(v->cal.centre[0], v->cal.centre[1]));
        cJSON_AddNumberToObject(c, "disk_radius_px", v->cal.radius);
        cJSON_AddNumberToObject(c, "n_bf", (double)v->cal.n_bf);
        cJSON_AddNumberToObject(c, "n_flagged", (double)v->cal.n_flagged);
        cJSON_AddBoolToObject(c, "flip", v->cal.flip != 0);
        cJSON_AddStringToObject(c, "sampling", v->cal.sampling);
        cJSON_AddStringToObject(c, "sampling_warning", v->cal.sampling_warning); /* "": none */
    }
    cJSON_AddItemToObject(o, "current", ab_json(&v->ab, &v->thick, v->rotation_deg));
    cJSON *f = cJSON_AddObjectToObject(o, "fit");
    cJSON_AddBoolToObject(f, "done", v->has_fit);
    if (v->has_fit) {
        cJSON_AddItemToObject(f, "result", ab_json(&v->fit_ab, &v->fit_thick, v->fit_rotation_deg));
        cJSON_AddNumberToObject(f, "loss", v->fit_loss);
        cJSON_AddBoolToObject(f, "flip", v->fit_flip != 0);
        cJSON_AddStringToObject(f, "flip_source", v->fit_flip_source);
        cJSON_AddNumberToObject(f, "seconds", v->fit_seconds);
        cJSON_AddStringToObject(f, "warning", v->fit_warning);
        cJSON_AddBoolToObject(f, "confident", v->fit_confident != 0);
        cJSON_AddStringToObject(f, "rotation_source", v->fit_rotation_source);
        if (isfinite(v->fit_rotation_sigma_deg))
            cJSON_AddNumberToObject(f, "rotation_sigma_deg", v->fit_rotation_sigma_deg);
        cJSON *se = cJSON_AddObjectToObject(f, "standard_errors"); /* null: not fitted or undetermined */
        static const char *se_keys[4] = {"C10_nm", "C12_nm", "phi12_deg", "rotation_deg"};
        for (int i = 0; i < 4; i++)
            cJSON_AddItemToObject(se, se_keys[i], isfinite(v->fit_se[i]) ? cJSON_CreateNumber(v->fit_se[i])
                                                                          : cJSON_CreateNull());
        /* φ12 in the probe (detector) frame (docs/fit.md): φ12 − rotation, mod 180°; with a
         * mirrored detector 90° + rotation − φ12 */
        double ps = v->fit_ab.phi_deg[SSB4D_C12], rot = isfinite(v->fit_rotation_deg) ? v->fit_rotation_deg : 0;
        double pp = fmod((v->fit_flip ? 90.0 + rot - ps : ps - rot) + 90.0, 180.0);
        cJSON_AddNumberToObject(f, "phi12_probe_deg", (pp < 0 ? pp + 180.0 : pp) - 90.0);
    }
    if (v->cfg.truth) { /* the built-in dataset's true aberrations (φ12 in the probe frame) */
        cJSON *t = cJSON_AddObjectToObject(o, "truth");
        cJSON_AddNumberToObject(t, "C10_nm", v->cfg.truth->C_nm[SSB4D_C10]);
        cJSON_AddNumberToObject(t, "C12_nm", v->cfg.truth->C_nm[SSB4D_C12]);
        cJSON_AddNumberToObject(t, "phi12_deg", v->cfg.truth->phi_deg[SSB4D_C12]);
    }
    cJSON_AddItemToObject(o, "trials", v->trials ? cJSON_Duplicate(v->trials, 1) : cJSON_CreateArray());
    cJSON *j = cJSON_AddObjectToObject(o, "job");
    int busy = v->job_name[0] != 0;
    cJSON_AddBoolToObject(j, "busy", busy);
    cJSON_AddStringToObject(j, "name", v->job_name);
    cJSON_AddStringToObject(j, "stage", busy ? v->stage : "");
    cJSON_AddNumberToObject(j, "fraction", busy ? v->fraction : 0);
    size_t queued = 0; /* jobs (not previews) waiting behind the running one or the idle work */
    for (const view_job *q = v->fifo_head; q; q = q->next)
        queued++;
    cJSON_AddNumberToObject(j, "queued", (double)queued);
    cJSON_AddStringToObject(o, "error", v->last_error);
    if (v->region)
        cJSON_AddItemToObject(o, "region", cJSON_Duplicate(v->region, 1));
    if (v->regions)
        cJSON_AddItemToObject(o, "regions", cJSON_Duplicate(v->regions, 1));
    if (v->refine)
        cJSON_AddItemToObject(o, "refine", cJSON_Duplicate(v->refine, 1));
    cJSON *vi = cJSON_AddObjectToObject(o, "virtual");
    cJSON_AddBoolToObject(vi, "ready", v->has_virt);
    cJSON *st = cJSON_AddObjectToObject(o, "stats");
    cJSON_AddNumberToObject(st, "previews", (double)v->n_previews);
    cJSON_AddNumberToObject(st, "superseded", (double)v->n_superseded);
    cJSON_AddNumberToObject(st, "cancels", (double)v->n_cancels);
    cJSON_AddNumberToObject(st, "stale", (double)v->n_stale);
    pthread_mutex_unlock(&v->mu);
    cJSON *mm = cJSON_AddObjectToObject(o, "memory");
    cJSON_AddNumberToObject(mm, "tracked", (double)(ssb4d_mem_live(m) + ssb4d_mem_cached(m)));
    cJSON_AddNumberToObject(mm, "peak", (double)ssb4d_mem_peak(m));
    cJSON_AddNumberToObject(mm, "budget", (double)ssb4d_mem_limit(m));
    cJSON_AddNumberToObject(mm, "footprint", (double)ssb4d_rss_now());
    return o;
}

/* ---- routes ------------------------------------------------------------------------------- */

static void calibration_json(view_server *v, view_resp *r)
{
    pthread_mutex_lock(&v->mu);
    if (!v->cal.ready) {
        pthread_mutex_unlock(&v->mu);
        view_resp_text(r, 409, "not calibrated yet");
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "det", pair((double)v->cal.det[0], (double)v->cal.det[1]));
    cJSON_AddItemToObject(o, "disk_centre_px", pair(v->cal.centre[0], v->cal.centre[1]));
    cJSON_AddNumberToObject(o, "disk_radius_px", v->cal.radius);
    cJSON_AddNumberToObject(o, "selection_radius_px", v->cal.selection_radius);
    cJSON *fl = cJSON_AddArrayToObject(o, "flagged");
    for (size_t i = 0; i < v->cal.n_flagged; i++)
        cJSON_AddItemToArray(fl, cJSON_CreateNumber(v->cal.flagged[i]));
    pthread_mutex_unlock(&v->mu);
    view_resp_json(r, 200, o);
}

static void calibration_mean(view_server *v, view_resp *r)
{
    pthread_mutex_lock(&v->mu);
    if (!v->cal.ready) {
        pthread_mutex_unlock(&v->mu);
        view_resp_text(r, 409, "not calibrated yet");
        return;
    }
    size_t n = v->cal.det[0] * v->cal.det[1];
    float *b = malloc(n * sizeof *b);
    if (b)
        memcpy(b, v->cal.mean, n * sizeof *b);
    size_t h = v->cal.det[0], w = v->cal.det[1];
    pthread_mutex_unlock(&v->mu);
    if (!b) {
        view_resp_text(r, 500, "out of memory");
        return;
    }
    view_resp_image(r, b, h, w, NULL);
}

static const char *const PREVIEW_FIELDS[] = {"C10_nm", "C12_nm", "phi12_deg", "rotation_deg", "aberr", "tilt_mrad",
                                             "thickness_nm", "upsample", "subset", "estimator", "want_loss", "view",
                                             "seq", NULL};
static const char *const APPLY_FIELDS[] = {"C10_nm", "C12_nm", "phi12_deg", "rotation_deg", "aberr", "tilt_mrad",
                                           "thickness_nm", "region", NULL};
static const char *const NONE[] = {NULL};
static const char *const REGION_FIELDS[] = {"rect", NULL};
static const char *const REGIONS_FIELDS[] = {"rect", "rows", "cols", NULL};
static const char *const SAVE_FIELDS[] = {"name", "path", "force", NULL};
static const char *const REFINE_FIELDS[] = {"rect", "slices", "iterations", "thickness_range_nm", NULL};

/* /api/refine's body: the drawn region (required), slices and iterations through the parameter
 * table, the thickness range [lo, hi] (nm, 0 < lo <= hi <= 1e4). 0, or -1 with r set (400). */
static int parse_refine(view_server *v, const cJSON *o, job_params *p, view_resp *r)
{
    ssb4d_refine_params rp;
    ssb4d_refine_params_default(&rp);
    if (only_fields(o, REFINE_FIELDS, r) || rect_field(v, o, p->rect, 1, r) < 0 ||
        table_field(o, SSB4D_OP_REFINE, "slices", &rp, r) < 0 || table_field(o, SSB4D_OP_REFINE, "iterations", &rp, r) < 0)
        return -1;
    p->refine_slices = rp.slices;
    p->refine_iterations = rp.iterations;
    p->refine_range_nm[0] = p->refine_range_nm[1] = NAN;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "thickness_range_nm");
    if (f) {
        const cJSON *a = cJSON_GetArrayItem(f, 0), *b = cJSON_GetArrayItem(f, 1);
        if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) != 2 || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) ||
            !(a->valuedouble > 0 && a->valuedouble <= b->valuedouble && b->valuedouble <= 1e4)) {
            view_resp_text(r, 400, "'thickness_range_nm' must be [lo, hi] with 0 < lo <= hi <= 10000 (nm)");
            return -1;
        }
        p->refine_range_nm[0] = a->valuedouble, p->refine_range_nm[1] = b->valuedouble;
    }
    return 0;
}

/* GET /api/refine/image?kind=projected (the projected phase) or kind=N (slice N's phase), float32
 * like a preview, from the last refinement. */
static void refine_image(view_server *v, const char *kind, view_resp *r)
{
    pthread_mutex_lock(&v->mu);
    const ssb4d_refine_result *rr = &v->refine_res;
    if (!v->has_refine_res) {
        pthread_mutex_unlock(&v->mu);
        view_resp_text(r, 409, "no refinement yet");
        return;
    }
    size_t rows = rr->obj_shape[0], cols = rr->obj_shape[1], n = rows * cols;
    long k = -1; /* -1: the projected phase */
    char *end = NULL;
    int ok = kind && !strcmp(kind, "projected");
    if (kind && !ok && *kind >= '0' && *kind <= '9') {
        k = strtol(kind, &end, 10);
        ok = !*end && k < rr->slices;
    }
    if (!ok) {
        int ns = rr->slices;
        pthread_mutex_unlock(&v->mu);
        view_resp_text(r, 400, "kind must be projected or a slice 0..%d", ns - 1);
        return;
    }
    int slices = rr->slices; /* read under the lock: a later refinement replaces rr */
    const float *base = k < 0 ? rr->projected_phase : rr->slice_phase;
    const float *src = base ? base + (k < 0 ? 0 : (size_t)k * n) : NULL; /* no arithmetic on NULL */
    float *img = malloc(n * sizeof *img);
    if (img && src)
        memcpy(img, src, n * sizeof *img);
    else if (img)
        memset(img, 0, n * sizeof *img);
    pthread_mutex_unlock(&v->mu);
    if (!img) {
        view_resp_text(r, 500, "out of memory");
        return;
    }
    view_resp_image(r, img, rows, cols, NULL);
    view_resp_header(r, "X-Slices", "%d", slices);
}

/* A file name the page may save under (SPEC §7): plain, inside the output folder. A request
 * never names a folder: no '/', no '\\', no "..", no leading '.', no control bytes; and it
 * ends in .json, so that Save can only ever write a calibration file. NULL, or why not. */
static const char *bad_save_name(const char *n)
{
    size_t k = strlen(n);
    if (!k || k > 200)
        return "must be 1 to 200 characters";
    if (strchr(n, '/') || strchr(n, '\\'))
        return "must be a plain file name: the file goes into the server's output folder";
    if (n[0] == '.')
        return "must not start with '.'";
    for (const unsigned char *c = (const unsigned char *)n; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return "must not hold control characters";
    if (k < 6 || strcmp(n + k - 5, ".json"))
        return "must end in .json";
    return NULL;
}

/* Parses a POST body into the job; 0, or -1 with r set (400). */
static int parse_job(view_server *v, view_job *j, const cJSON *o, view_resp *r)
{
    job_params *p = &j->p;
    p->rotation_deg = NAN;
    switch (j->kind) {
    case JOB_PREVIEW: {
        static const char *const views[] = {"phase", "fft", "amplitude", NULL};
        if (only_fields(o, PREVIEW_FIELDS, r) || params_fields(o, p, r))
            return -1;
        ssb4d_preview_req q;
        ssb4d_preview_req_default(&q);
        static const char *const TABLE_FIELDS[] = {"upsample", "subset", "estimator", "want_loss"};
        for (int i = 0; i < 4; i++)
            if (table_field(o, SSB4D_OP_PREVIEW, TABLE_FIELDS[i], &q, r) < 0)
                return -1;
        p->upsample = q.upsample, p->subset = q.subset, p->estimator = q.estimator, p->want_loss = q.want_loss;
        if (num_field(o, "seq", 0, 9007199254740992.0, &p->seq, r) < 0)
            return -1;
        int w = enum_field(o, "view", views, r);
        if (w == -2)
            return -1;
        p->view = w < 0 ? VIEW_PHASE : (view_image)w;
        return 0;
    }
    case JOB_APPLY:
        if (only_fields(o, APPLY_FIELDS, r) || params_fields(o, p, r) ||
            bool_field(o, "region", &p->apply_region, r) < 0)
            return -1;
        return 0;
    case JOB_REGION:
        return only_fields(o, REGION_FIELDS, r) || rect_field(v, o, p->rect, 1, r) < 0 ? -1 : 0;
    case JOB_REGIONS:
        p->rows = p->cols = 2;
        if (only_fields(o, REGIONS_FIELDS, r) || rect_field(v, o, p->rect, 0, r) < 0 ||
            int_field(o, "rows", 1, 64, &p->rows, r) < 0 || int_field(o, "cols", 1, 64, &p->cols, r) < 0)
            return -1;
        return 0;
    case JOB_REFINE:
        if (v->cfg.dist) { /* the refinement reads the frames; the ranks share G only */
            view_resp_text(r, 501, "refine is not run by a distributed viewer (run it without mpirun)");
            return -1;
        }
        return parse_refine(v, o, p, r);
    case JOB_SAVE: {
        if (only_fields(o, SAVE_FIELDS, r) || bool_field(o, "force", &p->force, r) < 0)
            return -1;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "name");
        const char *field = "name";
        if (!f) /* "path": the older name of the field, held to the same rule */
            f = cJSON_GetObjectItemCaseSensitive(o, field = "path");
        if (f) {
            const char *why = cJSON_IsString(f) ? bad_save_name(f->valuestring) : "must be a string";
            if (why) {
                view_resp_text(r, 400, "'%s' %s", field, why);
                return -1;
            }
            snprintf(p->path, sizeof p->path, "%s", f->valuestring);
        }
        return 0;
    }
    default:
        return only_fields(o, NONE, r);
    }
}

static const struct {
    const char *url;
    job_kind kind;
} POST_JOBS[] = {
    {"/api/preview", JOB_PREVIEW}, {"/api/fit", JOB_FIT},       {"/api/fit_tilt", JOB_FIT_TILT},
    {"/api/region", JOB_REGION},   {"/api/regions", JOB_REGIONS}, {"/api/apply", JOB_APPLY},
    {"/api/reset", JOB_RESET},     {"/api/save", JOB_SAVE},     {"/api/refine", JOB_REFINE},
};

void view_api(view_server *v, const char *method, const char *url, const char *kind, const char *body, size_t len,
              view_resp *r)
{
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!strcmp(url, "/api/state") || !strcmp(url, "/api/calibration") || !strcmp(url, "/api/calibration/mean")) {
        if (!get) {
            view_resp_text(r, 405, "use GET");
            return;
        }
        if (!strcmp(url, "/api/state"))
            view_resp_json(r, 200, view_state_json(v));
        else if (!strcmp(url, "/api/calibration"))
            calibration_json(v, r);
        else
            calibration_mean(v, r);
        return;
    }
    if (!strcmp(url, "/api/virtual")) {
        static const char *const kinds[] = {"bf", "adf", "com_x", "com_y", "idpc", NULL};
        if (!get) {
            view_resp_text(r, 405, "use GET");
            return;
        }
        int k = -1;
        for (int i = 0; kind && kinds[i]; i++)
            if (!strcmp(kind, kinds[i]))
                k = i;
        if (k < 0) {
            view_resp_text(r, 400, "kind must be bf, adf, com_x, com_y or idpc");
            return;
        }
        if (v->cfg.dist) { /* the ranks share G, not the frames */
            view_resp_text(r, 501, "virtual images are not made by a distributed viewer (run it without mpirun)");
            return;
        }
        pthread_mutex_lock(&v->mu);
        int ready = v->cal.ready;
        pthread_mutex_unlock(&v->mu);
        if (!ready) {
            view_resp_text(r, 409, "not calibrated yet");
            return;
        }
        view_job *j = calloc(1, sizeof *j);
        if (!j) {
            view_resp_text(r, 500, "out of memory");
            return;
        }
        j->kind = JOB_VIRTUAL;
        j->p.rotation_deg = NAN;
        j->p.virt = (virt_kind)k;
        view_submit(v, j);
        *r = j->resp;
        free(j);
        return;
    }
    if (!strcmp(url, "/api/refine/image")) {
        if (!get) {
            view_resp_text(r, 405, "use GET");
            return;
        }
        refine_image(v, kind, r);
        return;
    }
    if (!strcmp(url, "/api/cancel")) {
        if (get) {
            view_resp_text(r, 405, "use POST");
            return;
        }
        view_cancel_running(v);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "cancelled", 1);
        view_resp_json(r, 200, o);
        return;
    }
    for (size_t i = 0; i < sizeof POST_JOBS / sizeof POST_JOBS[0]; i++) {
        if (strcmp(url, POST_JOBS[i].url))
            continue;
        if (get) {
            view_resp_text(r, 405, "use POST");
            return;
        }
        if (strlen(body) != len) {
            view_resp_text(r, 400, "the body holds a NUL byte");
            return;
        }
        cJSON *o = len ? cJSON_ParseWithOpts(body, NULL, 1) : cJSON_CreateObject(); /* nothing after it */
        if (!o || !cJSON_IsObject(o)) {
            cJSON_Delete(o);
            view_resp_text(r, 400, "the body must be one JSON object");
            return;
        }
        view_job *j = calloc(1, sizeof *j);
        if (!j) {
            cJSON_Delete(o);
            view_resp_text(r, 500, "out of memory");
            return;
        }
        j->kind = POST_JOBS[i].kind;
        if (!parse_job(v, j, o, r))
            view_submit(v, j);
        else
            j->resp = *r, memset(r, 0, sizeof *r);
        cJSON_Delete(o);
        *r = j->resp;
        free(j);
        return;
    }
    view_resp_text(r, 404, "no such route");
}
