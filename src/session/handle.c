/* handle.c — the session handle (include/ssb4d.h): one live acquisition that a viewer, Python
 * or a script steers. It strings the stages together exactly as `ssb4d fit` does (calibrate,
 * plan, G build, fit, object), so the same inputs give the same bits through either.
 *
 * Plan, then execute: the memory plan is made once, right after the calibration (the first point
 * where the BF pixel count is known), and every G the session builds is held as it says. */
#include "common/err.h"
#include "common/mem_device.h"
#include "fit/fit.h"
#include "fit/tilt.h"
#include "gbuild/gbuild.h"
#include "source/source.h"
#include "io/calfile.h"
#include "plan/budget.h"
#include "qem/qem.h"
#include "plan/plan.h"
#include "session/backend.h"
#include "session/handle_internal.h"
#include "ssb/backend.h"
#include "dist/dist.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SESSION_BEST_TRIALS 50 /* the calibration file's best_trials */

struct ssb4d_session {
    ssb4d_session_opts o;
    const ssb_backend *bk;
    void *bk_keep;             /* what the backend keeps from the calibration for the G build */
    ssb4d_mem *mem;            /* the budget; also carries progress and cancel */
    size_t budget;
    ssb4d_source *src;
    ssb4d_source *field;       /* what is fitted and imaged: src, or a view of opts.region */
    size_t shape[4];
    size_t field_shape[2];     /* scan rows and cols of the field */
    int has_region;
    size_t encoded;            /* a .qem's mapped bytes or an array's, counted in mem for the
                                  session's life */
    ssb4d_calibration cal;
    int have_cal;
    ssb4d_plan plan;
    ssb4d_G *G;                /* the field's G (NULL: not built, or freed) */
    int G_kind;                /* G_FIT or G_PREVIEW: the copy the plan holds for those stages */
    int grouped;               /* inside a caller's stage (ssb4d_session_stage_begin) */
    /* The device (issue 31): the session's passes as the device model replays them on the
     * field's G and on a region's (plan_device_session, made with the plan), and the stage's
     * device peak so far over the G copies it used (stage_G: a region's G besides s->G). */
    dev_session_in dev_field, dev_region;
    const ssb4d_G *stage_G;
    size_t dev_peak;
    /* The rotation the fits start from: given (held) or measured (its standard error). */
    int rotation_given;
    double rotation_deg, rotation_sigma_deg;
    /* The current parameters, which previews, the object and saves use. */
    ssb4d_geometry geom;
    ssb4d_aberrations ab;
    ssb4d_thick thick;
    /* The last standard fit of the whole field (without its trace) and its parameters. */
    int have_fit, have_tilt;
    ssb4d_fit_result fit;
    ssb4d_fit_params fp;
    ssb4d_tilt_result tilt;
    /* What a saved calibration file records beyond the state above, as `ssb4d fit`'s does (one
     * writer for every client): the data file (NULL: an array) with its identity, hashed on the
     * first save; the last fit's global trials and its best distinct trials, lowest loss first. */
    char *path;
    char identity[96];
    int identity_done;
    size_t fit_global_trials;
    char fit_given_by[32];     /* who stated the rotation the last fit held ("" none) */
    ssb4d_calfile_trial best[SESSION_BEST_TRIALS];
    size_t n_best;
    /* Aberrations a loaded calibration file stated (a refinement starts from them without a fit);
     * the last refinement (without its arrays). */
    int ab_loaded;
    char *fit_file;            /* the loaded calibration file, when it records a fit (a refinement
                                  seeds from that fit, as ssb4d_session_load_fit would) */
    int have_refine;
    ssb4d_refine_result refine;
    ssb4d_refine_loss refine_loss; /* the loss it minimised (for the calibration file) */
};

enum { G_FIT = 1, G_PREVIEW = 2 };

/* ---- open and close ---------------------------------------------------------------------------- */

void ssb4d_session_opts_default(ssb4d_session_opts *o)
{
    memset(o, 0, sizeof *o);
    ssb4d_calib_params_default(&o->calib);
    o->backend = SSB4D_BACKEND_AUTO;
    o->rotation_sigma_deg = NAN;
    o->preview = SSB4D_PREVIEW_FLOAT;
}

static ssb4d_status check_opts(const ssb4d_session_opts *o, ssb4d_err *err)
{
    const ssb4d_calib_params *c = &o->calib;
    if (!(c->kv >= 1.0 && c->kv <= 5000.0))
        return ssb_fail(err, SSB4D_EINVAL, "the accelerating voltage must be 1..5000 kV (got %g)", c->kv);
    if (!(c->semiangle_mrad > 0.0 && c->semiangle_mrad <= 1000.0))
        return ssb_fail(err, SSB4D_EINVAL, "the probe semi-angle must be in (0, 1000] mrad (got %g)",
                        c->semiangle_mrad);
    for (int i = 0; i < 2; i++)
        if (!(c->scan_step_A[i] > 0.0 && c->scan_step_A[i] < 1e6))
            return ssb_fail(err, SSB4D_EINVAL, "the scan step must be a positive length in Å (got %g)",
                            c->scan_step_A[i]);
    if (!isnan(c->rotation_deg) && !(fabs(c->rotation_deg) <= 1e4))
        return ssb_fail(err, SSB4D_EINVAL, "the rotation must be finite, |rotation| <= 10000 deg");
    if (o->threads < 0)
        return ssb_fail(err, SSB4D_EINVAL, "threads must be >= 0 (0: all cores)");
    if (o->rotation_measured && isnan(c->rotation_deg))
        return ssb_fail(err, SSB4D_EINVAL, "a measured rotation needs its value (calib.rotation_deg)");
    if (o->ssb_path < SSB4D_PATH_AUTO || o->ssb_path > SSB4D_PATH_COMPLEX)
        return ssb_fail(err, SSB4D_EINVAL, "unknown SSB path %d", o->ssb_path);
    return SSB4D_OK;
}

/* The session around an opened source (taken over: closed on failure); encoded: its resident
 * bytes (what), counted under the budget for the session's life. */
static ssb4d_status make(ssb4d_source *src, size_t encoded, const char *what, const ssb4d_session_opts *o,
                         ssb4d_session **out, ssb4d_err *err)
{
    ssb4d_session *s = calloc(1, sizeof *s);
    if (!s) {
        ssb4d_source_close(src);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    s->o = *o;
    s->src = src;
    s->budget = o->memory_bytes ? o->memory_bytes : ssb4d_mem_available();
    ssb4d_status st = session_backend_select(o->backend, &s->bk, err);
    if (!st && !(s->mem = ssb4d_mem_create(s->budget)))
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    if (!st) { /* the load stage: what stays resident (a .npy is read through: nothing) */
        ssb4d_mem_stage_begin(s->mem, "load");
        if (encoded && !(st = ssb4d_mem_external(s->mem, encoded, 1, what, err)))
            s->encoded = encoded;
        ssb4d_mem_stage_end(s->mem);
    }
    ssb4d_source_shape(src, s->shape);
    s->field = src;
    s->field_shape[0] = s->shape[0], s->field_shape[1] = s->shape[1];
    const size_t *r = o->region;
    if (!st && (r[0] || r[1] || r[2] || r[3])) { /* a bad rectangle is refused before any work */
        st = ssb4d_source_region(src, r[0], r[1], r[2], r[3], &s->field, err);
        s->has_region = !st;
        s->field_shape[0] = r[1] - r[0], s->field_shape[1] = r[3] - r[2];
    }
    if (st) {
        ssb4d_session_close(s);
        return st;
    }
    ssb4d_mem_set_progress(s->mem, o->progress, o->progress_user);
    s->rotation_given = !isnan(o->calib.rotation_deg) && !o->rotation_measured;
    s->rotation_deg = o->calib.rotation_deg;
    s->rotation_sigma_deg = o->rotation_measured ? o->rotation_sigma_deg : NAN;
    *out = s;
    return SSB4D_OK;
}

ssb4d_status ssb4d_data_check(const char *path, ssb4d_err *err)
{
    if (!path)
        return ssb_fail(err, SSB4D_EINVAL, "missing data path");
    /* Opened, not just stat'ed, so that a file without read permission is caught too;
     * O_NONBLOCK so that a FIFO given by mistake cannot hang the check. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    const char *why = NULL;
    if (fd < 0 || fstat(fd, &sb) != 0)
        why = strerror(errno);
    else if (S_ISDIR(sb.st_mode))
        why = "it is a folder, not a data file";
    else if (!S_ISREG(sb.st_mode))
        why = "not a regular file"; /* the readers map and seek, and read DATA more than once */
    unsigned char magic[4] = {0};
    int qem = !why && read(fd, magic, sizeof magic) == (ssize_t)sizeof magic && !memcmp(magic, "QEMD", 4);
    if (fd >= 0)
        close(fd);
    if (why)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, why);
    ssb4d_status st;
    if (qem) { /* the header only: the body's checksums are verified where it is read */
        qem_file *q = NULL;
        st = qem_open(path, 0, 1, &q, err);
        qem_close(q);
    } else {
        ssb4d_source *src = NULL;
        st = ssb4d_source_open(path, &src, err);
        ssb4d_source_close(src);
    }
    return st;
}

ssb4d_status ssb4d_session_open(const char *path, const ssb4d_session_opts *o, ssb4d_session **out,
                                ssb4d_err *err)
{
    *out = NULL;
    if (!path || !o)
        return ssb_fail(err, SSB4D_EINVAL, "session: missing path or options");
    ssb4d_source *src = NULL;
    ssb4d_status st = ssb4d_source_open(path, &src, err); /* a missing file first */
    if (!st)
        st = check_opts(o, err);
    if (st) {
        ssb4d_source_close(src);
        return st;
    }
    /* A .qem's mapping stays resident (every pass decodes from it): it counts under the budget. */
    struct stat sb;
    size_t encoded = ssb_source_qem(src) && stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
    char *copy = strdup(path);
    if (!copy) {
        ssb4d_source_close(src);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    st = make(src, encoded, "the encoded data", o, out, err);
    if (st)
        free(copy);
    else
        (*out)->path = copy;
    return st;
}

ssb4d_status ssb4d_session_open_memory(const void *data, ssb4d_dtype dtype, const size_t shape[4],
                                       const ssb4d_session_opts *o, ssb4d_session **out, ssb4d_err *err)
{
    *out = NULL;
    if (!o)
        return ssb_fail(err, SSB4D_EINVAL, "session: missing options");
    ssb4d_status st = check_opts(o, err);
    ssb4d_source *src = NULL;
    if (!st)
        st = ssb4d_source_from_memory(data, dtype, shape, &src, err);
    /* The array is resident for the session's life: it counts under the budget. */
    size_t bytes = st ? 0 : shape[0] * shape[1] * shape[2] * shape[3] * (size_t)dtype;
    return st ? st : make(src, bytes, "the data in memory", o, out, err);
}

static void drop_G(ssb4d_session *s)
{
    if (s->G) {
        ssb4d_G_free(s->G);
        s->G = NULL;
        ssb4d_mem_trim(s->mem);
    }
}

static void drop_calibration(ssb4d_session *s)
{
    drop_G(s);
    if (s->have_cal)
        ssb4d_calibration_free(&s->cal);
    s->have_cal = 0;
}

void ssb4d_session_close(ssb4d_session *s)
{
    if (!s)
        return;
    drop_calibration(s);
    if (s->bk && s->bk->keep_free && s->bk_keep) /* a calibration without a G build */
        s->bk->keep_free(s->bk_keep);
    if (s->has_region)
        ssb4d_source_close(s->field); /* after G: a streamed G rebuilds its planes from it */
    ssb4d_source_close(s->src);
    if (s->encoded)
        ssb4d_mem_external(s->mem, s->encoded, 0, NULL, NULL);
    ssb4d_mem_destroy(s->mem);
    free(s->path);
    free(s->fit_file);
    free(s);
}

void ssb4d_session_cancel(ssb4d_session *s)
{
    if (s)
        ssb4d_mem_cancel(s->mem);
}

void ssb4d_session_shape(const ssb4d_session *s, size_t shape[4]) { memcpy(shape, s->shape, 4 * sizeof *shape); }
ssb4d_mem *ssb4d_session_mem(const ssb4d_session *s) { return s->mem; }
const char *ssb4d_session_backend(const ssb4d_session *s) { return s->bk->name; }
const ssb4d_G *session_handle_G(const ssb4d_session *s) { return s->G; }
size_t session_handle_encoded(const ssb4d_session *s) { return s->encoded; }
void session_handle_device_model(const ssb4d_session *s, dev_session_in *out) { *out = s->dev_field; }

/* ---- one call = one stage ---------------------------------------------------------------------- */

/* The stage's device peak (ssb4d_stage_record.device_peak_bytes): restarted on the G copies
 * held at its start, then the largest sum of their peaks seen at the ends of its calls. */
static void device_reset(ssb4d_session *s)
{
    size_t now, peak;
    ssb_device_bytes(s->G, &now, &peak, 1);
    ssb_device_bytes(s->stage_G, &now, &peak, 1);
    s->dev_peak = 0;
}

static void device_note(ssb4d_session *s, const ssb4d_G *extra)
{
    size_t now, peak, sum = 0;
    ssb_device_bytes(s->G, &now, &peak, 0);
    sum += peak;
    ssb_device_bytes(s->stage_G, &now, &peak, 0);
    sum += peak;
    if (extra && extra != s->G && extra != s->stage_G) {
        ssb_device_bytes(extra, &now, &peak, 0);
        sum += peak;
    }
    if (sum > s->dev_peak)
        s->dev_peak = sum;
    ssb_mem_stage_device_peak(s->mem, s->dev_peak);
}

/* A public call made of steps (calibrate, G build, then the fit): each step's call_begin clears
 * the cancel, so one that came after a finished step stopped polling would be lost and the
 * call run to its end. Checked after each step that ran; G stays built (it is reused). Not
 * distributed: ranks learn of a cancel together, inside the passes. */
static ssb4d_status step_cancelled(ssb4d_session *s, ssb4d_err *err)
{
    return !s->o.dist && ssb4d_mem_cancelled(s->mem) ? ssb_fail(err, SSB4D_ECANCELLED, "cancelled") : SSB4D_OK;
}

/* Every call starts here: a cancel belongs to the call that was running when it came. Inside a
 * caller's stage the call is part of it, not a stage of its own. */
static void call_begin(ssb4d_session *s, const char *stage)
{
    ssb4d_mem_cancel_clear(s->mem);
    if (!s->grouped) {
        ssb4d_mem_stage_begin(s->mem, stage);
        device_reset(s);
    }
    ssb4d_mem_progress(s->mem, 0.0);
}

static void call_end(ssb4d_session *s)
{
    device_note(s, NULL);
    if (!s->grouped)
        ssb4d_mem_stage_end(s->mem);
}

void ssb4d_session_stage_begin(ssb4d_session *s, const char *name)
{
    ssb4d_mem_stage_begin(s->mem, name);
    device_reset(s);
    s->grouped = 1;
}

void ssb4d_session_stage_end(ssb4d_session *s)
{
    s->grouped = 0;
    device_note(s, NULL);
    ssb4d_mem_stage_end(s->mem);
}

/* The fit's and the G build's progress (0..1) goes into the call's progress. */
static int on_fraction(void *user, const char *stage, double f)
{
    (void)stage;
    return ssb4d_mem_progress_outer(user, f);
}

/* ---- calibration and plan ---------------------------------------------------------------------- */

/* The plan of what the options say the session will do (the stages, the fit, the bytes held). */
static ssb4d_status plan_session(ssb4d_session *s, ssb4d_err *err)
{
    ssb4d_fit_params fp;
    if (s->o.fit)
        fp = *s->o.fit;
    else
        ssb4d_fit_params_default(&fp);
    fp.rotation_given = s->rotation_given;
    ssb4d_session_script sc;
    if (s->o.script)
        sc = *s->o.script;
    else
        ssb4d_session_script_default(&sc);
    ssb4d_plan_input in;
    ssb4d_plan_input_default(&in);
    plan_input_from_calibration(&in, &s->cal, s->shape, fp.fit_radius);
    in.n_coarse_bf = fp.coarse_bf;
    in.fit_batch = fp.batch;
    in.fit = &fp;
    in.no_fit = s->o.no_fit;
    size_t up = (size_t)(sc.upsample ? sc.upsample : ssb4d_upsample_auto(&s->cal.geom));
    in.encoded_bytes = s->encoded + s->o.held_bytes +
                       s->field_shape[0] * s->field_shape[1] * up * up * s->o.held_image_floats * sizeof(float);
    in.rotation_fitted = isnan(s->o.calib.rotation_deg);
    in.threads = s->o.threads;
    in.upsample = (int)up;
    in.script = &sc;
    if (s->has_region) { /* the field's G is held as a region's */
        sc.region = 1;
        memcpy(sc.region_rect, s->o.region, sizeof sc.region_rect);
    }
    if (sc.region) {
        size_t r0 = sc.region_rect[0], r1 = sc.region_rect[1], c0 = sc.region_rect[2], c1 = sc.region_rect[3];
        in.region[0] = r1 > r0 ? r1 - r0 : ssb_plan_region_side(s->shape[0]);
        in.region[1] = c1 > c0 ? c1 - c0 : ssb_plan_region_side(s->shape[1]);
    }
    in.memory_bytes = s->budget;
    in.preview = s->o.preview;
    /* A distributed session plans this rank's share: its blocks' planes, all resident in float32
     * (docs/scale.md); the budget is a rank's. */
    ssb4d_status st = s->o.dist ? plan_make_rank(&in, (size_t)dist_size(s->o.dist), (size_t)dist_rank(s->o.dist),
                                                 &s->plan, NULL, err)
                                : ssb4d_plan_make(&in, &s->plan, err);
    /* The device's passes (a GPU backend checks its G against them, backend.h): the field's
     * session, and a region's refit (fitted only). The grids and pixel counts come from each G. */
    plan_device_session(&in, s->field_shape[0], s->field_shape[1], &s->dev_field);
    plan_device_session(&in, in.region[0] ? in.region[0] : s->field_shape[0],
                        in.region[1] ? in.region[1] : s->field_shape[1], &s->dev_region);
    s->dev_field.object_complex = s->o.held_image_floats >= 3;
    s->dev_region.no_images = 1;
    if (!st && !s->plan.fits) {
        char b[32], m[32];
        st = ssb_fail(err, SSB4D_ENOMEM, "the job does not fit in %s: %s; the smallest budget is %s",
                      plan_size_text(b, s->budget, 0), s->plan.reason,
                      plan_size_text(m, plan_smallest_budget(&in, &s->plan), 1));
    }
    return st;
}

/* A distributed session: rank 0 reads the data for the calibration, the others receive it
 * (the same struct, its arrays and, on failure, rank 0's message). */
static ssb4d_status calibrate_shared(ssb4d_session *s, const ssb4d_calib_params *cp, ssb4d_err *err)
{
    const ssb4d_dist *d = s->o.dist;
    int root = dist_rank(d) == 0;
    ssb4d_err e = {0};
    int32_t head[2] = {0, 0};
    if (root)
        head[0] = (int32_t)ssb4d_calibrate(s->src, cp, &s->cal, &e);
    ssb4d_status st = dist_bcast(d, head, sizeof head, 0, err);
    if (!st && head[0]) {
        st = dist_bcast(d, &e, sizeof e, 0, err);
        if (!st) {
            if (err)
                *err = e;
            st = (ssb4d_status)head[0];
        }
        return st;
    }
    ssb4d_calibration c;
    if (root)
        c = s->cal;
    if (!st)
        st = dist_bcast(d, &c, sizeof c, 0, err);
    if (st)
        return st;
    size_t npat = c.det_shape[0] * c.det_shape[1];
    if (!root) { /* the arrays, sized by the struct just received */
        c.mean_pattern = malloc((npat ? npat : 1) * sizeof *c.mean_pattern);
        c.bf_pix = malloc((c.n_bf ? c.n_bf : 1) * sizeof *c.bf_pix);
        c.flagged = malloc((c.n_flagged ? c.n_flagged : 1) * sizeof *c.flagged);
        if (!c.mean_pattern || !c.bf_pix || !c.flagged) {
            ssb4d_calibration_free(&c);
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory"); /* MPI aborts the others */
        }
    }
    if (!(st = dist_bcast(d, c.mean_pattern, npat * sizeof *c.mean_pattern, 0, err)) &&
        !(st = dist_bcast(d, c.bf_pix, c.n_bf * sizeof *c.bf_pix, 0, err)))
        st = dist_bcast(d, c.flagged, c.n_flagged * sizeof *c.flagged, 0, err);
    if (!root) {
        if (st)
            ssb4d_calibration_free(&c);
        else
            s->cal = c;
    }
    return st;
}

ssb4d_status ssb4d_session_calibrate(ssb4d_session *s, ssb4d_err *err)
{
    if (s->have_cal)
        return SSB4D_OK;
    ssb4d_calib_params cp = s->o.calib;
    size_t npos = s->shape[0] * s->shape[1];
    cp.mem = s->mem;
    cp.threads = s->o.threads;
    cp.rotation_deg = s->rotation_deg;
    size_t need = plan_calib_need(s->budget, s->encoded, s->shape[2] * s->shape[3], npos, isnan(cp.rotation_deg),
                                  &cp.block_bytes);
    if (s->budget && need > s->budget) {
        char b[32], n[32];
        return ssb_fail(err, SSB4D_ENOMEM, "the job does not fit in %s: calibrating needs %s (the %s and one "
                                             "block of frames)", plan_size_text(b, s->budget, 0),
                          plan_size_text(n, need, 1), s->encoded ? "data held" : "data");
    }
    call_begin(s, "calibrate");
    ssb4d_status st = s->o.dist          ? calibrate_shared(s, &cp, err)
                      : s->bk->calibrate ? s->bk->calibrate(s->src, &cp, &s->bk_keep, &s->cal, err) /* a GPU's start */
                                         : ssb4d_calibrate(s->src, &cp, &s->cal, err);
    call_end(s);
    if (st)
        return st;
    s->have_cal = 1;
    if ((st = plan_session(s, err))) {
        drop_calibration(s);
        return st;
    }
    if (isnan(s->rotation_deg)) { /* measured now */
        s->rotation_deg = s->cal.geom.rotation_deg;
        s->rotation_sigma_deg = s->cal.rotation_sigma_deg;
    }
    if (!s->have_fit)
        s->geom = s->cal.geom;
    return SSB4D_OK;
}

/* Calibration as the first step of a longer call: a cancel that came during it ends the call. */
static ssb4d_status calibrate_step(ssb4d_session *s, ssb4d_err *err)
{
    int had_cal = s->have_cal; /* already calibrated: no step ran, an older cancel is not this call's */
    ssb4d_status st = ssb4d_session_calibrate(s, err);
    return st || had_cal ? st : step_cancelled(s, err);
}

const ssb4d_calibration *ssb4d_session_calibration(const ssb4d_session *s) { return s->have_cal ? &s->cal : NULL; }
const ssb4d_plan *ssb4d_session_plan(const ssb4d_session *s) { return s->have_cal ? &s->plan : NULL; }

/* The geometry the fits start from: the calibration's, with the held or measured rotation. */
static ssb4d_geometry fit_geometry(const ssb4d_session *s)
{
    ssb4d_geometry g = s->cal.geom;
    g.rotation_deg = s->rotation_deg;
    return g;
}

/* ---- G --------------------------------------------------------------------------------------- */

static void keep_drop(ssb4d_session *s)
{
    if (s->bk->keep_free && s->bk_keep)
        s->bk->keep_free(s->bk_keep);
    s->bk_keep = NULL;
}

/* G of src (the whole field, or a region's view) held as the plan says: `resident` bytes of
 * float32 planes (the outer BF pixels streamed beyond them), g_bytes its full size. */
static ssb4d_status build(ssb4d_session *s, ssb4d_source *src, int half, size_t resident, size_t g_bytes,
                          ssb4d_G **G, ssb4d_err *err)
{
    ssb4d_gbuild_opts go;
    plan_gbuild_opts(&s->plan, half, resident, g_bytes, s->o.threads, &go);
    if (s->o.block_bytes)
        go.block_bytes = s->o.block_bytes;
    if (s->o.dist) { /* each rank holds its own blocks' planes, all of them in float32 */
        go.dist = s->o.dist;
        go.half = 0;
        go.resident_bytes = 0;
    }
    go.progress = on_fraction;
    go.progress_user = s->mem;
    /* The region's G (a source of another shape than the field) is checked as a region's. */
    size_t sh[4];
    ssb4d_source_shape(src, sh);
    session_device dev = {sh[0] == s->field_shape[0] && sh[1] == s->field_shape[1] ? s->dev_field : s->dev_region,
                          s->o.device_memory_bytes};
    const ssb_device_check chk = {session_device_check, &dev};
    call_begin(s, "G build");
    ssb4d_status st = s->bk->gbuild(src, &s->cal.geom, s->cal.bf_pix, s->cal.n_bf, &go, &chk, &s->bk_keep, s->mem, G, err);
    keep_drop(s); /* G is built: what the calibration kept for it goes */
    device_note(s, st ? NULL : *G);
    call_end(s);
    return st ? st : step_cancelled(s, err);
}

/* The bytes of the G of a rows x cols field with the plan's stored planes. */
static size_t g_bytes_of(const ssb4d_session *s, size_t rows, size_t cols)
{
    size_t n_stored = s->plan.g_bytes / plan_plane_bytes(s->shape[0], s->shape[1]);
    return n_stored * plan_plane_bytes(rows, cols);
}

/* One G serves the fit and the previews unless the plan holds a different copy for previews
 * (half precision, or fewer planes resident beside the preview's buffers). */
static int one_G(const ssb4d_session *s)
{
    return s->has_region || (!s->plan.preview_half && s->plan.preview_resident_bytes == s->plan.fit_resident_bytes);
}

/* G as the plan holds it for a stage of this kind: the fit's float32 copy, or the previews'
 * (which replaces it when they differ; switching back rebuilds from the data, same bits). */
static ssb4d_status need_G(ssb4d_session *s, int kind, ssb4d_err *err)
{
    ssb4d_status st = calibrate_step(s, err);
    if (st || (s->G && (s->G_kind == kind || one_G(s))))
        return st;
    if (s->G) { /* the other copy goes first: both are never held */
        ssb4d_G_free(s->G);
        s->G = NULL;
    }
    const ssb4d_plan *p = &s->plan;
    if (s->has_region) /* held as the plan holds a region's G */
        st = build(s, s->field, 0, p->region_resident_bytes, g_bytes_of(s, s->field_shape[0], s->field_shape[1]),
                   &s->G, err);
    else if (kind == G_FIT)
        st = build(s, s->src, 0, p->fit_resident_bytes, p->g_bytes, &s->G, err);
    else
        st = build(s, s->src, p->preview_half, p->preview_resident_bytes, p->preview_half ? p->g_half_bytes : p->g_bytes,
                   &s->G, err);
    s->G_kind = kind;
    return st;
}

/* The G of the next stage: the fit's until a fit has run (or when none will), then the previews'. */
static int next_kind(const ssb4d_session *s) { return s->have_fit || s->o.no_fit ? G_PREVIEW : G_FIT; }

ssb4d_status ssb4d_session_build(ssb4d_session *s, ssb4d_err *err) { return need_G(s, next_kind(s), err); }

void ssb4d_session_G_info(const ssb4d_session *s, size_t *bytes, size_t *n_bf, size_t *n_stored,
                          size_t *n_resident)
{
    *bytes = s->G ? ssb4d_G_bytes(s->G) : 0;
    *n_bf = s->G ? ssb4d_G_n_bf(s->G) : 0;
    /* a distributed G: this rank's stored planes (all resident), of all n_bf pixels */
    *n_stored = s->G ? ssb4d_G_n_stored(s->G) - s->G->n_remote : 0;
    *n_resident = s->G ? ssb4d_G_n_resident(s->G) : 0;
}

/* ---- fits -------------------------------------------------------------------------------------- */

/* The fit's parameters: the caller's (or the defaults), with the session's threads, rotation and
 * progress. */
void ssb4d_session_fit_params(const ssb4d_session *s, const ssb4d_fit_params *p, ssb4d_fit_params *fp)
{
    if (p)
        *fp = *p;
    else
        ssb4d_fit_params_default(fp);
    fp->threads = s->o.threads;
    fp->rotation_given = s->rotation_given;
    fp->rotation_sigma_deg = s->rotation_given ? NAN : s->rotation_sigma_deg;
    fp->flip_given = s->o.calib.flip >= 0; /* else tested by every fit, as the rotation is searched */
    fp->flip_measured = s->have_cal && s->cal.flip_fitted;
    fp->progress = NULL;
    fp->progress_user = NULL;
}

static void fit_params(const ssb4d_session *s, const ssb4d_fit_params *p, ssb4d_fit_params *fp)
{
    ssb4d_session_fit_params(s, p, fp);
    fp->progress = on_fraction;
    fp->progress_user = s->mem;
}

static int by_loss_then_number(const void *a, const void *b)
{
    const ssb4d_fit_trial *x = a, *y = b;
    if (x->loss != y->loss)
        return x->loss < y->loss ? -1 : 1;
    return (x->number > y->number) - (x->number < y->number);
}

/* What the calibration file records of a fit's trace: the global candidates it ran and its best
 * distinct (not cached) trials, lowest loss first (no allocation: a partial selection). */
static void keep_best_trials(ssb4d_session *s, const ssb4d_fit_result *r)
{
    s->fit_global_trials = 0;
    s->n_best = 0;
    for (size_t i = 0; i < r->n_trials; i++) {
        const ssb4d_fit_trial *t = &r->trials[i];
        s->fit_global_trials += t->stage == 0;
        if (t->cached)
            continue;
        size_t k = s->n_best < SESSION_BEST_TRIALS ? s->n_best++ : SESSION_BEST_TRIALS;
        ssb4d_fit_trial last = {0};
        if (k == SESSION_BEST_TRIALS) { /* full: t replaces the worst if it is better */
            const ssb4d_calfile_trial *w = &s->best[k - 1];
            last.loss = w->loss, last.number = w->number;
            if (by_loss_then_number(t, &last) >= 0)
                continue;
            k--;
        }
        for (; k > 0; k--) { /* insertion: shift the worse ones down */
            const ssb4d_calfile_trial *p = &s->best[k - 1];
            ssb4d_fit_trial q = {0};
            q.loss = p->loss, q.number = p->number;
            if (by_loss_then_number(&q, t) <= 0)
                break;
            s->best[k] = *p;
        }
        ssb4d_calfile_trial *b = &s->best[k];
        b->stage = t->stage;
        b->number = t->number;
        b->C10_nm = t->C10_nm, b->C12_nm = t->C12_nm, b->phi12_deg = t->phi12_deg;
        b->loss = t->loss;
    }
}

ssb4d_status ssb4d_session_fit(ssb4d_session *s, const ssb4d_fit_params *p, ssb4d_fit_result *r, ssb4d_err *err)
{
    memset(r, 0, sizeof *r);
    ssb4d_status st = need_G(s, G_FIT, err);
    if (st)
        return st;
    ssb4d_fit_params fp;
    fit_params(s, p, &fp);
    ssb4d_geometry g = fit_geometry(s);
    call_begin(s, "fit");
    st = ssb4d_fit(s->G, &g, &fp, s->mem, r, err);
    ssb4d_mem_trim(s->mem); /* the fit's tiles go back */
    call_end(s);
    if (st)
        return st;
    s->fit = *r;
    keep_best_trials(s, r);
    memcpy(s->fit_given_by, s->o.rotation_from, sizeof s->fit_given_by);
    s->fit.trials = NULL, s->fit.n_trials = 0; /* the caller owns the trace */
    s->fp = fp;
    s->have_fit = 1, s->have_tilt = 0, s->have_refine = 0;
    s->ab = r->ab;
    s->geom = r->geom;
    memset(&s->thick, 0, sizeof s->thick);
    return SSB4D_OK;
}

ssb4d_status ssb4d_session_fit_tilt(ssb4d_session *s, ssb4d_tilt_result *r, ssb4d_err *err)
{
    memset(r, 0, sizeof *r);
    if (!s->have_fit)
        return ssb_fail(err, SSB4D_EINVAL, "the tilt fit starts from a standard fit: run ssb4d_session_fit first");
    ssb4d_status st = need_G(s, G_FIT, err);
    if (st)
        return st;
    /* From the standard fit, as `ssb4d fit --tilt` does: its box, start, locks, seed, batch. */
    fit_tilt_params tp;
    fit_tilt_params_default(&tp);
    memcpy(tp.thin.lo, s->fp.lo, sizeof tp.thin.lo);
    memcpy(tp.thin.hi, s->fp.hi, sizeof tp.thin.hi);
    tp.thin.start[FIT_C10] = s->fit.ab.C_nm[SSB4D_C10];
    tp.thin.start[FIT_C12] = s->fit.ab.C_nm[SSB4D_C12];
    double ph = s->fit.ab.phi_deg[SSB4D_C12], lo = tp.thin.lo[FIT_PHI12], hi = tp.thin.hi[FIT_PHI12];
    if (!(ph >= lo && ph <= hi) && hi - lo >= 180.0) /* φ12 is periodic in 180°: a loaded fit's may lie outside */
        ph = lo + fmod(fmod(ph - lo, 180.0) + 180.0, 180.0);
    tp.thin.start[FIT_PHI12] = ph;
    memcpy(tp.thin.locked, s->fp.locked, sizeof tp.thin.locked);
    tp.thin.seed = s->fp.seed;
    tp.thin.batch = s->fp.batch;
    tp.band.threads = s->o.threads;
    fit_tilt_result tr;
    call_begin(s, "tilt fit");
    st = fit_tilt(s->G, &s->fit.geom, &tp, s->mem, &tr, NULL, err);
    call_end(s);
    if (st)
        return st;
    r->C10_nm = tr.C10_nm, r->C12_nm = tr.C12_nm, r->phi12_deg = tr.phi12_deg;
    r->thick = tr.thick;
    r->gain = tr.gain;
    r->thin_kept = tr.thin_kept;
    r->evaluations = tr.evaluations;
    memcpy(r->trace_sha256, tr.trace_sha256, sizeof r->trace_sha256);
    s->tilt = *r;
    s->have_tilt = 1, s->have_refine = 0;
    s->ab = s->fit.ab;
    s->ab.C_nm[SSB4D_C10] = tr.C10_nm;
    s->ab.C_nm[SSB4D_C12] = tr.C12_nm;
    s->ab.phi_deg[SSB4D_C12] = tr.phi12_deg;
    s->thick = tr.thick;
    s->geom = s->fit.geom;
    return SSB4D_OK;
}

/* ---- current parameters ------------------------------------------------------------------------ */

void ssb4d_session_get(const ssb4d_session *s, ssb4d_aberrations *ab, ssb4d_thick *thick, ssb4d_geometry *g)
{
    if (ab)
        *ab = s->ab;
    if (thick)
        *thick = s->thick;
    if (g)
        *g = s->geom;
}

void ssb4d_session_set(ssb4d_session *s, const ssb4d_aberrations *ab, const ssb4d_thick *thick)
{
    if (ab)
        s->ab = *ab;
    if (thick)
        s->thick = *thick;
    else
        memset(&s->thick, 0, sizeof s->thick);
}

ssb4d_status ssb4d_session_set_rotation(ssb4d_session *s, double deg, ssb4d_err *err)
{
    if (!(fabs(deg) <= 1e4))
        return ssb_fail(err, SSB4D_EINVAL, "the rotation must be finite, |rotation| <= 10000 deg");
    ssb4d_status st = ssb4d_session_calibrate(s, err);
    if (st)
        return st;
    s->rotation_given = 1;
    s->rotation_deg = deg;
    s->rotation_sigma_deg = NAN;
    s->geom.rotation_deg = deg;
    return SSB4D_OK;
}

ssb4d_status ssb4d_session_set_flip(ssb4d_session *s, int flip, ssb4d_err *err)
{
    if (flip != 0 && flip != 1)
        return ssb_fail(err, SSB4D_EINVAL, "flip must be 0 or 1, got %d", flip);
    ssb4d_status st = ssb4d_session_calibrate(s, err);
    if (st)
        return st;
    s->o.calib.flip = flip; /* given, for every later fit (and a recalibration) */
    s->cal.geom.flip = flip;
    s->geom.flip = flip;
    return SSB4D_OK;
}

void ssb4d_session_apply(ssb4d_session *s, const ssb4d_fit_result *r)
{
    s->ab = r->ab;
    s->geom = r->geom;
    memset(&s->thick, 0, sizeof s->thick);
}

/* ---- previews and the object ------------------------------------------------------------------- */

static void ssb_opts(const ssb4d_session *s, ssb4d_ssb_opts *so)
{
    ssb4d_ssb_opts_default(so);
    so->threads = s->o.threads;
    so->path = (ssb4d_path)s->o.ssb_path;
}

void ssb4d_preview_req_default(ssb4d_preview_req *q)
{
    memset(q, 0, sizeof *q);
    q->rotation_deg = NAN;
    q->upsample = 1;
}

static ssb4d_status check_upsample(int f, ssb4d_err *err)
{
    if (f != 0 && f != 1 && f != 2 && f != 3 && f != 4 && f != 8)
        return ssb_fail(err, SSB4D_EINVAL, "upsampling must be 1, 2, 3, 4 or 8 (0: automatic), got %d", f);
    return SSB4D_OK;
}

ssb4d_status ssb4d_session_image_shape(ssb4d_session *s, int upsample, size_t *ny, size_t *nx, ssb4d_err *err)
{
    ssb4d_status st = check_upsample(upsample, err);
    if (!st)
        st = ssb4d_session_calibrate(s, err);
    if (st)
        return st;
    size_t f = (size_t)(upsample ? upsample : ssb4d_upsample_auto(&s->cal.geom));
    *ny = f * s->field_shape[0], *nx = f * s->field_shape[1];
    return SSB4D_OK;
}

/* A release at native sampling on P: the object and the exact loss (ssb4d_object_loss: one pass
 * over G where it can, the same bits as the two passes it replaces). */
static ssb4d_status release_pass(ssb4d_session *s, const ssb4d_G *P, const ssb4d_geometry *g,
                                 const ssb4d_aberrations *ab, const ssb4d_thick *thick, const ssb4d_ssb_opts *so,
                                 float *object, float *phase, double *loss, ssb4d_err *err)
{
    return ssb4d_object_loss(P, g, ab, thick, so, s->mem, object, phase, loss, err);
}

ssb4d_status ssb4d_session_preview(ssb4d_session *s, const ssb4d_preview_req *q, float *phase, double *loss,
                                   ssb4d_err *err)
{
    if (!q || !phase || (q->want_loss && !loss))
        return ssb_fail(err, SSB4D_EINVAL, "preview: missing request or output");
    ssb4d_status st = check_upsample(q->upsample, err);
    if (!st && (q->estimator < SSB4D_ESTIMATE_OBJECT || q->estimator > SSB4D_ESTIMATE_TRANSFER))
        st = ssb_fail(err, SSB4D_EINVAL, "unknown estimator %d", (int)q->estimator);
    if (!st && !isnan(q->rotation_deg) && !(fabs(q->rotation_deg) <= 1e4))
        st = ssb_fail(err, SSB4D_EINVAL, "the rotation must be finite, |rotation| <= 10000 deg");
    if (!st)
        st = need_G(s, G_PREVIEW, err);
    if (st)
        return st;
    int f = q->upsample ? q->upsample : ssb4d_upsample_auto(&s->cal.geom);
    ssb4d_geometry g = s->geom;
    if (!isnan(q->rotation_deg))
        g.rotation_deg = q->rotation_deg;
    const ssb4d_aberrations *ab = q->ab ? q->ab : &s->ab;
    const ssb4d_thick *thick = q->thick ? q->thick : &s->thick;
    /* A drag preview reads every ⌊N/n⌋-th BF pixel: a view of G, no copy of its planes. */
    const ssb4d_G *P = s->G;
    ssb4d_G *sub = NULL;
    size_t n_bf = ssb4d_G_n_bf(s->G);
    call_begin(s, "preview");
    if (q->subset && q->subset < n_bf) {
        size_t step = n_bf / q->subset, n = dev_preview_bf(n_bf, q->subset); /* the device model counts it so */
        size_t *idx = malloc(n * sizeof *idx);
        if (!idx)
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        for (size_t i = 0; idx && i < n; i++)
            idx[i] = i * step;
        if (!st)
            st = ssb_G_subset(s->G, idx, n, &sub, err);
        free(idx);
        P = sub;
    }
    ssb4d_ssb_opts so;
    ssb_opts(s, &so);
    int release = q->want_loss && f == 1 && q->estimator == SSB4D_ESTIMATE_OBJECT;
    if (!st && release)
        st = release_pass(s, P, &g, ab, thick, &so, NULL, phase, loss, err);
    if (!st && !release)
        st = q->estimator == SSB4D_ESTIMATE_MEAN_PHASE ? ssb4d_mean_phase_upsampled(P, &g, ab, thick, f, &so, s->mem,
                                                                                    phase, err)
             : q->estimator == SSB4D_ESTIMATE_TRANSFER
                 ? ssb4d_object_transfer(P, &g, ab, thick, f, SSB4D_TRANSFER_EPS, &so, s->mem, NULL, phase, err)
                 : ssb4d_object(P, &g, ab, thick, f, &so, s->mem, NULL, phase, err);
    if (!st && !release && q->want_loss)
        st = ssb4d_loss(P, &g, ab, thick, &so, s->mem, loss, NULL, err);
    if (sub)
        ssb4d_G_free(sub);
    call_end(s);
    return st;
}

ssb4d_status ssb4d_session_object(ssb4d_session *s, int upsample, float *object, float *phase, ssb4d_err *err)
{
    ssb4d_status st = check_upsample(upsample, err);
    if (!st)
        st = need_G(s, G_PREVIEW, err);
    if (st)
        return st;
    int f = upsample ? upsample : ssb4d_upsample_auto(&s->cal.geom);
    ssb4d_ssb_opts so;
    ssb_opts(s, &so);
    call_begin(s, "object");
    st = ssb4d_object(s->G, &s->geom, &s->ab, &s->thick, f, &so, s->mem, object, phase, err);
    call_end(s);
    return st;
}

ssb4d_status ssb4d_session_image(ssb4d_session *s, int upsample, ssb4d_estimator est, float *object, float *phase,
                                 ssb4d_err *err)
{
    if (est == SSB4D_ESTIMATE_OBJECT)
        return ssb4d_session_object(s, upsample, object, phase, err);
    if (est == SSB4D_ESTIMATE_MEAN_PHASE && object)
        return ssb_fail(err, SSB4D_EINVAL, "the mean phase has no complex object");
    if (est != SSB4D_ESTIMATE_TRANSFER && est != SSB4D_ESTIMATE_MEAN_PHASE)
        return ssb_fail(err, SSB4D_EINVAL, "unknown estimator %d", (int)est);
    if (!phase && !object)
        return ssb_fail(err, SSB4D_EINVAL, "image: missing output");
    ssb4d_status st = check_upsample(upsample, err);
    if (!st)
        st = need_G(s, G_PREVIEW, err);
    if (st)
        return st;
    int f = upsample ? upsample : ssb4d_upsample_auto(&s->cal.geom);
    ssb4d_ssb_opts so;
    ssb_opts(s, &so);
    call_begin(s, "image");
    st = est == SSB4D_ESTIMATE_TRANSFER ? ssb4d_object_transfer(s->G, &s->geom, &s->ab, &s->thick, f, SSB4D_TRANSFER_EPS,
                                                                &so, s->mem, object, phase, err)
                                        : ssb4d_mean_phase_upsampled(s->G, &s->geom, &s->ab, &s->thick, f, &so, s->mem,
                                                                     phase, err);
    call_end(s);
    return st;
}

ssb4d_status ssb4d_session_release(ssb4d_session *s, float *object, float *phase, double *loss, ssb4d_err *err)
{
    if (!loss || (!object && !phase))
        return ssb_fail(err, SSB4D_EINVAL, "release: missing output");
    ssb4d_status st = need_G(s, G_PREVIEW, err);
    if (st)
        return st;
    ssb4d_ssb_opts so;
    ssb_opts(s, &so);
    call_begin(s, "release");
    st = release_pass(s, s->G, &s->geom, &s->ab, &s->thick, &so, object, phase, loss, err);
    call_end(s);
    return st;
}

ssb4d_status ssb4d_session_loss(ssb4d_session *s, double *loss, ssb4d_err *err)
{
    if (!loss)
        return ssb_fail(err, SSB4D_EINVAL, "loss: missing output");
    ssb4d_status st = need_G(s, G_PREVIEW, err);
    if (st)
        return st;
    ssb4d_ssb_opts so;
    ssb_opts(s, &so);
    call_begin(s, "exact loss");
    st = ssb4d_loss(s->G, &s->geom, &s->ab, &s->thick, &so, s->mem, loss, NULL, err);
    call_end(s);
    return st;
}

/* ---- virtual images ---------------------------------------------------------------------------- */

ssb4d_status ssb4d_session_virtual(ssb4d_session *s, const ssb4d_virtual_params *p, ssb4d_virtual_images *out,
                                   ssb4d_err *err)
{
    if (!out)
        return ssb_fail(err, SSB4D_EINVAL, "virtual images: missing output");
    memset(out, 0, sizeof *out);
    ssb4d_status st = ssb4d_session_calibrate(s, err);
    if (st)
        return st;
    ssb4d_virtual_params vp;
    if (p)
        vp = *p;
    else
        ssb4d_virtual_params_default(&vp);
    vp.mem = s->mem;
    vp.threads = s->o.threads;
    vp.progress = NULL;
    vp.progress_user = NULL;
    if (!vp.block_bytes)
        vp.block_bytes = s->plan.calib_block_bytes;
    /* The calibration's centre, sampling, BF selection and flagged pixels; the session's current
     * rotation and handedness (a fit's once fitted). */
    ssb4d_calibration cal = s->cal;
    cal.geom.rotation_deg = s->geom.rotation_deg;
    cal.geom.flip = s->geom.flip;
    call_begin(s, "virtual images");
    st = ssb4d_virtual_compute(s->field, &cal, &vp, out, err);
    call_end(s);
    return st;
}

/* ---- regions ----------------------------------------------------------------------------------- */

ssb4d_status ssb4d_session_check_region(const ssb4d_session *s, const size_t rect[4], ssb4d_err *err)
{
    ssb4d_source *view = NULL;
    ssb4d_status st = rect ? ssb4d_source_region(s->src, rect[0], rect[1], rect[2], rect[3], &view, err)
                           : ssb_fail(err, SSB4D_EINVAL, "region: missing rectangle");
    ssb4d_source_close(view);
    return st;
}

void session_region_fit_params(const ssb4d_session *s, const ssb4d_fit_params *p, ssb4d_fit_params *fp)
{
    ssb4d_session_fit_params(s, p ? p : s->have_fit ? &s->fp : NULL, fp);
}

ssb4d_status ssb4d_session_fit_region(ssb4d_session *s, const size_t rect[4], const ssb4d_fit_params *p,
                                      ssb4d_fit_result *r, ssb4d_err *err)
{
    memset(r, 0, sizeof *r);
    if (!rect)
        return ssb_fail(err, SSB4D_EINVAL, "region: missing rectangle");
    ssb4d_source *view = NULL;
    ssb4d_status st = ssb4d_source_region(s->src, rect[0], rect[1], rect[2], rect[3], &view, err);
    if (!st)
        st = calibrate_step(s, err);
    if (st) {
        ssb4d_source_close(view);
        return st;
    }
    /* The plan frees the full field's G first when both do not fit (it is rebuilt on need). */
    if (s->plan.region_frees_g)
        drop_G(s);
    ssb4d_G *RG = NULL;
    st = build(s, view, 0, s->plan.region_resident_bytes, g_bytes_of(s, rect[1] - rect[0], rect[3] - rect[2]), &RG,
               err);
    ssb4d_fit_params fp;
    fit_params(s, p ? p : s->have_fit ? &s->fp : NULL, &fp);
    ssb4d_geometry g = fit_geometry(s);
    if (!st) {
        s->stage_G = RG;
        call_begin(s, "region fit");
        st = ssb4d_fit(RG, &g, &fp, s->mem, r, err);
        call_end(s);
        s->stage_G = NULL;
    }
    if (RG)
        ssb4d_G_free(RG);
    ssb4d_source_close(view); /* after G: a streamed G rebuilds its planes from the view */
    ssb4d_mem_trim(s->mem);
    return st;
}

/* ---- calibration files ------------------------------------------------------------------------- */

/* The calibration file of the session as it stands, the one writer of every client's file
 * (`ssb4d fit`'s calibration.json, Python's save_calibration, the viewer's Save): the
 * calibration, the last standard fit's record (its search settings and best trials, how the
 * rotation was obtained, the tilt fit's thick model) with the current parameters, the scan
 * region, and the data file's identity and what it records. */
static ssb4d_status fill_calfile(ssb4d_session *s, ssb4d_calfile *cf, ssb4d_err *err)
{
    ssb4d_status st = ssb_calfile_from_calibration(cf, &s->cal, err);
    if (st)
        return st;
    if (s->have_fit) {
        ssb_calfile_set_fit(cf, &s->fit, &s->fp, s->fit_given_by, s->cal.n_bf);
        cf->has_search = 1;
        cf->trials = s->fit_global_trials;
        cf->seed = s->fp.seed;
        memcpy(cf->range_lo, s->fp.lo, sizeof cf->range_lo);
        memcpy(cf->range_hi, s->fp.hi, sizeof cf->range_hi);
        memcpy(cf->locked, s->fp.locked, sizeof cf->locked);
        cf->evaluations = s->fit.evaluations;
        snprintf(cf->trials_phi12_frame, sizeof cf->trials_phi12_frame, "%s", s->fp.rotation_given ? "scan" : "probe");
        if (s->n_best) {
            if (!(cf->best = malloc(s->n_best * sizeof *cf->best)))
                return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
            memcpy(cf->best, s->best, s->n_best * sizeof *cf->best);
            cf->n_best = s->n_best;
        }
    }
    /* What the session shows now (a fit, then perhaps sliders or an applied region). */
    cf->geom = s->geom;
    cf->has_ab = 1;
    cf->ab = s->ab;
    cf->has_thick = s->have_tilt || s->thick.thickness_nm > 0;
    cf->thick = s->thick;
    if (s->have_tilt) {
        cf->gain = s->tilt.gain;
        cf->phi12_scan_deg = s->tilt.phi12_deg;
        cf->phi12_probe_deg = ssb4d_phi12_to_probe(&s->fit.geom, s->tilt.phi12_deg);
        for (int i = 0; i < 4; i++) /* the standard errors are the thin fit's, not the thick model's */
            cf->se[i] = NAN;
    }
    if (s->has_region) {
        cf->has_region = 1;
        memcpy(cf->region, s->o.region, sizeof cf->region);
    }
    if (s->have_refine) { /* the aberrations and the thick model above are the refinement's */
        const ssb4d_refine_result *rr = &s->refine;
        cf->has_refine = 1;
        cf->refine_slices = rr->slices;
        snprintf(cf->refine_loss, sizeof cf->refine_loss, "%s",
                 s->refine_loss == SSB4D_REFINE_AMPLITUDE ? "amplitude" : "poisson");
        cf->refine_nll = rr->nll;
        cf->refine_nll_expected = rr->nll_expected;
        cf->refine_iterations = s->refine.n_history; /* kept: the count, not the history */
        cf->refine_phi12_probe_deg = rr->phi12_probe_deg;
        memcpy(cf->refine_tilt_probe_mrad, rr->tilt_probe_mrad, sizeof cf->refine_tilt_probe_mrad);
        cf->refine_confident = rr->confident != 0;
        snprintf(cf->refine_warning, sizeof cf->refine_warning, "%s", rr->confident ? "" : rr->warning);
        memcpy(cf->refine_region, rr->region, sizeof cf->refine_region);
        cf->refine_tilt_refined = rr->tilt_refined != 0;
        cf->refine_thickness_refined = rr->thickness_refined != 0;
        cf->has_thick = 1;
    }
    if (s->path) {
        if (!s->identity_done) /* hashed once: the data do not change under an open session */
            (void)ssb4d_data_identity(s->path, s->identity, sizeof s->identity, NULL); /* "" unreadable */
        s->identity_done = 1;
        snprintf(cf->data_identity, sizeof cf->data_identity, "%s", s->identity);
        ssb4d_values v;
        ssb4d_err verr = {0};
        if (!ssb4d_values_read(s->path, NULL, NULL, &v, &verr)) {
            snprintf(cf->source_format, sizeof cf->source_format, "%s", v.source_format);
            cf->camera_length_mm = v.camera_length_mm;
            cf->dwell_us = v.dwell_us;
        }
    }
    return SSB4D_OK;
}

ssb4d_status ssb4d_session_save_calibration(ssb4d_session *s, const char *path, int force, ssb4d_err *err)
{
    if (!path)
        return ssb_fail(err, SSB4D_EINVAL, "save: missing path");
    if (!force && access(path, F_OK) == 0)
        return ssb_fail(err, SSB4D_EIO, "%s already exists (pass force to replace it)", path);
    ssb4d_status st = ssb4d_session_calibrate(s, err);
    if (st)
        return st;
    ssb4d_calfile cf;
    ssb_calfile_init(&cf);
    call_begin(s, "save calibration");
    st = fill_calfile(s, &cf, err);
    if (!st)
        st = ssb_calfile_write(path, &cf, err);
    call_end(s);
    ssb_calfile_free(&cf);
    return st;
}

ssb4d_status ssb4d_session_load_fit(ssb4d_session *s, const char *path, ssb4d_err *err)
{
    ssb4d_calfile cf;
    ssb4d_status st = ssb_calfile_read(path, &cf, err);
    if (!st && !(cf.has_fit && cf.has_ab))
        st = ssb_fail(err, SSB4D_EINVAL, "%s records no fit", path);
    if (st) {
        ssb_calfile_free(&cf);
        return st;
    }
    /* The inverse of ssb_calfile_set_fit and fill_calfile's search record. */
    ssb4d_fit_result *r = &s->fit;
    memset(r, 0, sizeof *r);
    r->ab = cf.ab;
    r->geom = cf.geom;
    r->phi12_probe_deg = cf.phi12_probe_deg;
    int given = !strcmp(cf.rotation_method, SSB4D_CALFILE_ROT_GIVEN);
    snprintf(r->rotation_source, sizeof r->rotation_source, "%.23s", given ? "given" : cf.rotation_from);
    r->rotation_sigma_deg = cf.rotation_sigma_deg;
    snprintf(r->flip_source, sizeof r->flip_source, "%s", cf.flip_source);
    r->flip_objective[0] = r->flip_objective[1] = NAN;
    r->loss = cf.loss;
    r->objective = NAN;
    r->branch_flipped = cf.branch_flipped;
    r->skewness = cf.skewness;
    r->skewness_other = cf.skewness_other;
    r->parallax_ok = cf.has_parallax;
    r->parallax.C10_nm = cf.px_C10_nm;
    r->parallax.C12_nm = cf.px_C12_nm;
    r->parallax.phi12_deg = cf.px_phi12_scan_deg;
    r->parallax.rotation_deg = cf.px_rotation_deg;
    memcpy(r->parallax.sigma, cf.px_sigma, sizeof r->parallax.sigma);
    r->parallax.residual_A = cf.px_residual_A;
    r->loss_contrast = cf.loss_contrast;
    r->C10_se_nm = cf.se[0], r->C12_se_nm = cf.se[1], r->phi12_se_deg = cf.se[2], r->rotation_se_deg = cf.se[3];
    r->confident = cf.confident == 1;
    snprintf(r->warning, sizeof r->warning, "%s", cf.warning);
    r->n_fit_bf = cf.fit_n_bf;
    r->evaluations = cf.evaluations;
    ssb4d_fit_params *fp = &s->fp;
    ssb4d_session_fit_params(s, NULL, fp);
    fp->objective = !strcmp(cf.objective, "loss") ? SSB4D_FIT_OBJ_LOSS : SSB4D_FIT_OBJ_BAND;
    fp->rotation_given = given;
    fp->rotation_sigma_deg = given ? NAN : cf.rotation_sigma_deg;
    if (cf.has_search) {
        fp->seed = cf.seed;
        memcpy(fp->lo, cf.range_lo, sizeof fp->lo);
        memcpy(fp->hi, cf.range_hi, sizeof fp->hi);
        memcpy(fp->locked, cf.locked, sizeof fp->locked);
    }
    s->fit_global_trials = cf.trials;
    snprintf(s->fit_given_by, sizeof s->fit_given_by, "%s", given ? cf.rotation_from : "");
    s->n_best = cf.n_best < SESSION_BEST_TRIALS ? cf.n_best : SESSION_BEST_TRIALS;
    if (s->n_best)
        memcpy(s->best, cf.best, s->n_best * sizeof *s->best);
    s->have_fit = 1, s->have_tilt = 0, s->have_refine = 0;
    ssb_calfile_free(&cf);
    return SSB4D_OK;
}

int ssb4d_session_last_fit(const ssb4d_session *s, ssb4d_fit_result *r)
{
    memset(r, 0, sizeof *r);
    if (!s->have_fit)
        return 0;
    *r = s->fit;
    r->trials = NULL, r->n_trials = 0;
    return 1;
}

ssb4d_status ssb4d_session_load_calibration(ssb4d_session *s, const char *path, ssb4d_err *err)
{
    ssb4d_calfile cf;
    ssb4d_status st = ssb_calfile_read(path, &cf, err);
    if (st) {
        ssb_calfile_free(&cf);
        return st;
    }
    ssb4d_calib_params *c = &s->o.calib;
    c->kv = cf.geom.kv;
    c->semiangle_mrad = cf.geom.semiangle_mrad;
    for (int i = 0; i < 2; i++) {
        c->scan_step_A[i] = cf.geom.scan_step_A[i];
        c->det_sampling_mrad[i] = isnan(cf.geom.det_sampling_mrad[i]) ? 0.0 : cf.geom.det_sampling_mrad[i];
        c->centre_px[i] = cf.geom.centre_px[i];
    }
    c->bf_radius_px = isnan(cf.bf_radius_px) ? 0.0 : cf.bf_radius_px;
    if (ssb_calfile_edge_pixel_S(&cf)) /* the pixel model it records, stated (SPEC §4) */
        c->edge_pixel_S = ssb_calfile_edge_pixel_S(&cf);
    /* A rotation `ssb4d calibrate` measured from the centre of mass leaves the 180° branch open
     * (the fit may refine it); any other recorded rotation is held (as the command line does). */
    int measured = !strcmp(cf.rotation_method, SSB4D_CALFILE_ROT_COM) ||
                   !strcmp(cf.rotation_method, SSB4D_CALFILE_ROT_UNDETERMINED);
    c->rotation_deg = cf.geom.rotation_deg;
    c->flip = cf.flip_stated ? cf.geom.flip : -1;
    s->o.rotation_measured = measured;
    s->o.rotation_sigma_deg = measured ? cf.rotation_sigma_deg : NAN;
    s->rotation_given = !measured;
    snprintf(s->o.rotation_from, sizeof s->o.rotation_from, "%s", measured ? "" : "calibration file");
    s->rotation_deg = cf.geom.rotation_deg;
    s->rotation_sigma_deg = s->o.rotation_sigma_deg;
    drop_calibration(s);
    s->have_fit = s->have_tilt = 0;
    if ((st = check_opts(&s->o, err)) || (st = ssb4d_session_calibrate(s, err))) {
        ssb_calfile_free(&cf);
        return st;
    }
    s->geom = s->cal.geom;
    s->geom.rotation_deg = cf.geom.rotation_deg;
    if (cf.has_ab)
        s->ab = cf.ab;
    s->ab_loaded = cf.has_ab;
    s->have_refine = 0;
    free(s->fit_file);
    s->fit_file = cf.has_fit && cf.has_ab ? strdup(path) : NULL;
    if (cf.has_thick)
        s->thick = cf.thick;
    ssb_calfile_free(&cf);
    return SSB4D_OK;
}

/* ---- multislice refinement (SPEC §13) ---------------------------------------------------------- */

ssb4d_status ssb4d_session_refine(ssb4d_session *s, const size_t region[4], const ssb4d_refine_params *p,
                                  ssb4d_refine_result *r, ssb4d_err *err)
{
    memset(r, 0, sizeof *r);
    ssb4d_status st = calibrate_step(s, err);
    if (st)
        return st;
    /* Seeded by the SSB fit: a loaded calibration file's (every door alike: the command line
     * loads it explicitly, Python and the viewer through this), else run it first. */
    if (!s->have_fit && s->fit_file && (st = ssb4d_session_load_fit(s, s->fit_file, err)))
        return st;
    if (!s->have_fit && !s->ab_loaded) {
        ssb4d_fit_result fr;
        st = ssb4d_session_fit(s, NULL, &fr, err);
        ssb4d_fit_result_free(&fr);
        if (st || (st = step_cancelled(s, err)))
            return st;
    }
    ssb4d_refine_params rp;
    if (p)
        rp = *p;
    else
        ssb4d_refine_params_default(&rp);
    if (!rp.threads)
        rp.threads = s->o.threads;
    /* AUTO runs the refinement on the CPU even in a CUDA session: the GPU path's whole runs do not
     * yet agree with the CPU's (docs/refine.md "Backends"), so it runs only when asked for */
    if (rp.backend == SSB4D_BACKEND_AUTO)
        rp.backend = SSB4D_BACKEND_CPU;
    rp.mem = s->mem;
    size_t reg[4] = {0, 0, 0, 0};
    if (region && (region[0] | region[1] | region[2] | region[3]))
        memcpy(reg, region, sizeof reg);
    else if (s->has_region)
        memcpy(reg, s->o.region, sizeof reg);
    /* No thick model and no thickness given: the SSB tilt fit (SPEC §6.2) seeds the thickness and
     * the tilt, as `fit --tilt` would; where it keeps the thin model, the refinement starts at
     * the range's thin end, not in its middle (a one-cell specimen started at 15 nm put its
     * slices' mid-plane, hence C10, nm away). */
    if (s->thick.thickness_nm <= 0 && isnan(rp.thickness_nm) && s->have_fit) {
        ssb4d_tilt_result tr;
        st = ssb4d_session_fit_tilt(s, &tr, err);
        if (st || (st = step_cancelled(s, err)))
            return st;
        if (tr.thin_kept || !(s->thick.thickness_nm > 0))
            rp.thickness_nm = rp.thickness_range_nm[0];
    }
    const ssb4d_thick *thick = s->thick.thickness_nm > 0 ? &s->thick : NULL;
    call_begin(s, "refine");
    st = ssb4d_refine(s->src, &s->cal, &s->geom, reg, &s->ab, thick, &rp, r, err);
    call_end(s);
    if (st)
        return st;
    s->ab = r->ab;
    memcpy(s->thick.tilt_mrad, r->tilt_mrad, sizeof s->thick.tilt_mrad);
    s->thick.thickness_nm = r->thickness_nm;
    s->have_tilt = 0; /* the refined thick model replaces a tilt fit's */
    s->refine = *r;
    s->refine.history = NULL; /* n_history kept: the iterations the file records */
    s->refine.slice_phase = s->refine.projected_phase = s->refine.probe = NULL;
    s->refine_loss = rp.loss;
    s->have_refine = 1;
    return SSB4D_OK;
}

int ssb4d_session_last_refine(const ssb4d_session *s, ssb4d_refine_result *r)
{
    if (!s->have_refine) {
        memset(r, 0, sizeof *r);
        return 0;
    }
    *r = s->refine;
    r->n_history = 0; /* no arrays */
    return 1;
}
