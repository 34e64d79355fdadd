/* calfile.c — the calibration JSON file, schema "ssb4d.calibration" version 1 (SPEC §8;
 * docs/calibration-file.md has an example).
 *
 *   {"schema":"ssb4d.calibration", "version":1, "software":"ssb4d <ver>",
 *    "data_identity":"sha256:<hex>" | "qem-body-sha256:<hex>" | null,
 *    "microscope":{"kv":..,"semiangle_mrad":..},
 *    "scan":{"shape":[rows,cols],"step_A":[r,c]},
 *    "detector":{"shape":[rows,cols],"sampling_mrad":[r,c],"centre_px":[r,c],
 *                "disk_radius_px":..,"selection_radius_px":..,"n_bf":..,"flagged_pixels":[flat,...]},
 *    "rotation_deg":..,
 *    "rotation_source":{"method":"given"|"centre of mass"|"undetermined"|"fit","from":..|null,
 *                       "sigma_deg":..},                                    (when known)
 *    "branch":{"flipped":bool,"skewness":..,"skewness_other":..},             (when evaluated)
 *    "aberrations":{"C10_nm":..,"C12_nm":..,"phi12_deg":.., <other nonzero C_nm / phi_deg>},
 *    "thick":{"tilt_mrad":[r,c],"thickness_nm":..,"gain":..},                  (thick model)
 *    "loss":..,
 *    "fit":{"objective":"band"|"loss","phi12_scan_deg":..,"phi12_probe_deg":..,"loss_n_bf":..,
 *           "fit_n_bf":..,"confident":bool,"warning":".."|null,"loss_contrast":..,
 *           "parallax":{"C10_nm":..,"C12_nm":..,"phi12_scan_deg":..,"rotation_deg":..,
 *                       "sigma":{"C10_nm":..,"C12_nm":..,"phi12_deg":..,"rotation_deg":..},
 *                       "residual_A":..,"seconds":..}|null},                  (after a fit)
 *    "search":{"trials":..,"seed":<integer, or a decimal string above 2^53>,
 *              "ranges":{"C10_nm":[lo,hi],"C12_nm":[lo,hi],"phi12_deg":[lo,hi]},
 *              "locked":["C10_nm"|"C12_nm"|"phi12_deg",...],"evaluations":..,
 *              "best_trials":[{"stage":..,"number":..,"C10_nm":..,"C12_nm":..,"phi12_deg":..,
 *                              "loss":..},...]},                              (after a fit)
 *    "region":[r0,r1,c0,c1],                                   (the fit ran on this region only)
 *    "regions":[{"rect":[r0,r1,c0,c1],"C10_nm":..,"C12_nm":..,"phi12_deg":..,"loss":..},...],
 *    "refine":{"slices":..,"loss":"poisson"|"amplitude","nll":..,"nll_expected":..,"iterations":..,
 *              "phi12_probe_deg":..,"tilt_probe_mrad":[r,c],"confident":bool,"warning":".."|null,
 *              "region":[r0,r1,c0,c1]|null,"tilt_refined":bool,"thickness_refined":bool}}
 *                                                               (after a multislice refinement)
 *
 * Unknown values are written as null (JSON has no NaN) and read back as NaN; every section and
 * value other than schema and version is optional (a thick model needs its tilt and thickness).
 * Rectangles are half-open scan ranges [r0, r1) x [c0, c1). Reading refuses malformed JSON, a
 * different schema name, a newer version, wrong types and absurd values, naming the key. Unknown
 * extra keys are allowed (later stages add their own). Doubles are printed so that they read
 * back exactly, -0.0 and subnormals included, and the seed is exact for all 64 bits.
 */
#include "io/calfile.h"

#include "common/atomic.h"
#include "common/err.h"
#include "common/textfile.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CALFILE_MAX_BYTES ((size_t)256 << 20)
#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger integers do not survive a double */

/* The three fitted parameters, in the order of range_lo / locked / the trial fields. */
static const char *const PARAM_KEY[3] = {"C10_nm", "C12_nm", "phi12_deg"};
static const double PARAM_LIMIT[3] = {1e9, 1e9, 1e4};

/* detector.edge_model: the edge fit's pixel models (ssb4d_calibration.edge_model 0..3). */
static const char *const EDGE_MODEL_NAME[4] = {"point-sampled", "3x3 sub-samples", "5x5 sub-samples",
                                               "area-integrated"};

void ssb_calfile_init(ssb4d_calfile *c)
{
    memset(c, 0, sizeof *c);
    c->version = SSB4D_CALFILE_VERSION;
    ssb4d_geometry *g = &c->geom;
    g->kv = g->semiangle_mrad = g->rotation_deg = NAN;
    for (int i = 0; i < 2; i++)
        g->scan_step_A[i] = g->det_sampling_mrad[i] = g->centre_px[i] = NAN;
    c->bf_radius_px = c->disk_radius_px = c->loss = NAN;
    for (int i = 0; i < SSB4D_N_ABERR; i++)
        c->ab.C_nm[i] = c->ab.phi_deg[i] = 0.0;
    c->thick.tilt_mrad[0] = c->thick.tilt_mrad[1] = c->thick.thickness_nm = NAN;
    c->gain = c->skewness = c->skewness_other = NAN;
    for (int i = 0; i < 3; i++)
        c->range_lo[i] = c->range_hi[i] = NAN;
    c->rotation_sigma_deg = NAN;
    c->edge_model = -1;
    c->sampling_measured_mrad = c->sampling_sigma_mrad = NAN;
    c->centre_measured_px[0] = c->centre_measured_px[1] = NAN;
    c->camera_length_mm = c->dwell_us = NAN;
    c->phi12_scan_deg = c->phi12_probe_deg = c->loss_contrast = NAN;
    c->se[0] = c->se[1] = c->se[2] = c->se[3] = NAN;
    c->confident = -1;
    c->px_C10_nm = c->px_C12_nm = c->px_phi12_scan_deg = c->px_rotation_deg = NAN;
    c->px_residual_A = c->px_seconds = NAN;
    for (int i = 0; i < 4; i++)
        c->px_sigma[i] = NAN;
    c->refine_nll = c->refine_nll_expected = c->refine_phi12_probe_deg = NAN;
    c->refine_tilt_probe_mrad[0] = c->refine_tilt_probe_mrad[1] = NAN;
    c->refine_confident = -1;
    c->refine_tilt_refined = c->refine_thickness_refined = -1;
}

void ssb_calfile_free(ssb4d_calfile *c)
{
    if (!c)
        return;
    free(c->flagged);
    c->flagged = NULL;
    c->n_flagged = 0;
    free(c->best);
    c->best = NULL;
    c->n_best = 0;
    free(c->regions);
    c->regions = NULL;
    c->n_regions = 0;
}

int ssb_calfile_edge_pixel_S(const ssb4d_calfile *c)
{
    static const int S[4] = {1, 3, 5, 6};
    return c->edge_model >= 0 && c->edge_model < 4 ? S[c->edge_model] : 0;
}

int ssb_calfile_identity_differs(const char *a, const char *b)
{
    return a && b && a[0] && b[0] && strcmp(a, b) != 0;
}

ssb4d_status ssb_calfile_from_calibration(ssb4d_calfile *c, const ssb4d_calibration *cal,
                                          ssb4d_err *err)
{
    ssb_calfile_init(c);
    c->geom = cal->geom; /* its flip is stated only when the caller says it was given */
    c->bf_radius_px = cal->selection_radius_px;
    c->disk_radius_px = cal->disk_radius_px;
    c->n_bf = cal->n_bf;
    /* both the value used and the measurement (SPEC §4) */
    snprintf(c->sampling_method, sizeof c->sampling_method, "%s", cal->det_sampling_fitted ? "measured" : "stated");
    c->sampling_measured_mrad = cal->det_sampling_measured_mrad > 0 ? cal->det_sampling_measured_mrad : NAN;
    c->sampling_sigma_mrad = cal->det_sampling_measured_sigma_mrad >= 0 ? cal->det_sampling_measured_sigma_mrad : NAN;
    snprintf(c->centre_method, sizeof c->centre_method, "%s", cal->centre_fitted ? "measured" : "stated");
    c->edge_model = cal->edge_model >= 0 && cal->edge_model < 4 ? cal->edge_model : -1;
    if (c->edge_model >= 0)
        snprintf(c->edge_model_source, sizeof c->edge_model_source, "%s",
                 cal->edge_model_stated ? "stated" : "measured");
    c->centre_measured_px[0] = cal->disk_centre_px[0];
    c->centre_measured_px[1] = cal->disk_centre_px[1];
    for (int i = 0; i < 2; i++) {
        c->det_shape[i] = cal->det_shape[i];
        c->scan_shape[i] = cal->scan_shape[i];
    }
    if (cal->n_flagged) {
        c->flagged = malloc(cal->n_flagged * sizeof *c->flagged);
        if (!c->flagged)
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory (flagged pixel list)");
        memcpy(c->flagged, cal->flagged, cal->n_flagged * sizeof *c->flagged);
        c->n_flagged = cal->n_flagged;
    }
    return SSB4D_OK;
}

void ssb_calfile_set_fit(ssb4d_calfile *c, const ssb4d_fit_result *r, const ssb4d_fit_params *p,
                         const char *given_by, size_t loss_n_bf)
{
    c->geom = r->geom;
    c->flip_stated = 1;
    snprintf(c->flip_source, sizeof c->flip_source, "%s", r->flip_source);
    c->has_ab = 1;
    c->ab = r->ab;
    c->loss = r->loss;
    c->branch_flipped = r->branch_flipped;
    c->skewness = r->skewness;
    c->skewness_other = r->skewness_other;
    if (p->rotation_given) {
        snprintf(c->rotation_method, sizeof c->rotation_method, "%s", SSB4D_CALFILE_ROT_GIVEN);
        snprintf(c->rotation_from, sizeof c->rotation_from, "%s", given_by ? given_by : "");
        c->rotation_sigma_deg = NAN;
    } else {
        snprintf(c->rotation_method, sizeof c->rotation_method, "%s", SSB4D_CALFILE_ROT_FIT);
        snprintf(c->rotation_from, sizeof c->rotation_from, "%s", r->rotation_source);
        c->rotation_sigma_deg = r->rotation_sigma_deg;
    }
    c->has_fit = 1;
    snprintf(c->objective, sizeof c->objective, "%s", p->objective == SSB4D_FIT_OBJ_LOSS ? "loss" : "band");
    c->phi12_scan_deg = r->ab.phi_deg[SSB4D_C12];
    c->phi12_probe_deg = r->phi12_probe_deg;
    c->loss_n_bf = loss_n_bf;
    c->fit_n_bf = r->n_fit_bf;
    c->confident = r->confident != 0;
    snprintf(c->warning, sizeof c->warning, "%s", r->warning);
    c->loss_contrast = r->loss_contrast;
    const double se[4] = {r->C10_se_nm, r->C12_se_nm, r->phi12_se_deg, r->rotation_se_deg};
    for (int i = 0; i < 4; i++) /* JSON has no infinity: "no minimum" and "none" are both null */
        c->se[i] = isfinite(se[i]) ? se[i] : NAN;
    c->has_parallax = r->parallax_ok;
    if (r->parallax_ok) {
        c->px_C10_nm = r->parallax.C10_nm;
        c->px_C12_nm = r->parallax.C12_nm;
        c->px_phi12_scan_deg = r->parallax.phi12_deg;
        c->px_rotation_deg = r->parallax.rotation_deg;
        memcpy(c->px_sigma, r->parallax.sigma, sizeof c->px_sigma);
        c->px_residual_A = r->parallax.residual_A; /* not its seconds: the same fit, the same file */
    }
}

/* ---- writing --------------------------------------------------------------------------------- */

/* Shortest "%.Ng" that reads back to the same double (cJSON's own printer accepts a relative
 * error of DBL_EPSILON, which loses the last bit): the file must reload bit for bit. */
static cJSON *num_or_null(double v)
{
    if (!isfinite(v))
        return cJSON_CreateNull();
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return cJSON_CreateRaw(buf);
}

static cJSON *pair(const double v[2])
{
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, num_or_null(v[0]));
    cJSON_AddItemToArray(a, num_or_null(v[1]));
    return a;
}

static cJSON *rect(const size_t v[4])
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToArray(a, num_or_null((double)v[i]));
    return a;
}

/* C10, C12, φ12 and the loss of a trial or a region result. */
static void add_point(cJSON *o, double C10, double C12, double phi12, double loss)
{
    cJSON_AddItemToObject(o, PARAM_KEY[0], num_or_null(C10));
    cJSON_AddItemToObject(o, PARAM_KEY[1], num_or_null(C12));
    cJSON_AddItemToObject(o, PARAM_KEY[2], num_or_null(phi12));
    cJSON_AddItemToObject(o, "loss", num_or_null(loss));
}

static int is_plus_zero(double v) { return v == 0.0 && !signbit(v); }

static cJSON *search_json(const ssb4d_calfile *c)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddItemToObject(s, "trials", num_or_null((double)c->trials));
    if (c->seed <= (UINT64_C(1) << 53)) {
        cJSON_AddItemToObject(s, "seed", num_or_null((double)c->seed));
    } else { /* a JSON number would be read as a double and lose the low bits */
        char buf[24];
        snprintf(buf, sizeof buf, "%" PRIu64, c->seed);
        cJSON_AddStringToObject(s, "seed", buf);
    }
    cJSON *rg = cJSON_AddObjectToObject(s, "ranges");
    for (int i = 0; i < 3; i++) {
        double v[2] = {c->range_lo[i], c->range_hi[i]};
        cJSON_AddItemToObject(rg, PARAM_KEY[i], pair(v));
    }
    cJSON *lk = cJSON_AddArrayToObject(s, "locked");
    for (int i = 0; i < 3; i++)
        if (c->locked[i])
            cJSON_AddItemToArray(lk, cJSON_CreateString(PARAM_KEY[i]));
    cJSON_AddItemToObject(s, "evaluations", num_or_null((double)c->evaluations));
    if (c->trials_phi12_frame[0])
        cJSON_AddStringToObject(s, "phi12_frame", c->trials_phi12_frame);
    cJSON *bt = cJSON_AddArrayToObject(s, "best_trials");
    for (size_t i = 0; i < c->n_best; i++) {
        const ssb4d_calfile_trial *t = &c->best[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "stage", num_or_null((double)t->stage));
        cJSON_AddItemToObject(o, "number", num_or_null((double)t->number));
        add_point(o, t->C10_nm, t->C12_nm, t->phi12_deg, t->loss);
        cJSON_AddItemToArray(bt, o);
    }
    return s;
}

static const char *const SIGMA_KEY[4] = {"C10_nm", "C12_nm", "phi12_deg", "rotation_deg"};

static cJSON *fit_json(const ssb4d_calfile *c)
{
    cJSON *f = cJSON_CreateObject();
    if (c->objective[0])
        cJSON_AddStringToObject(f, "objective", c->objective);
    else
        cJSON_AddNullToObject(f, "objective");
    cJSON_AddItemToObject(f, "phi12_scan_deg", num_or_null(c->phi12_scan_deg));
    cJSON_AddItemToObject(f, "phi12_probe_deg", num_or_null(c->phi12_probe_deg));
    cJSON_AddItemToObject(f, "loss_n_bf", c->loss_n_bf ? num_or_null((double)c->loss_n_bf) : cJSON_CreateNull());
    cJSON_AddItemToObject(f, "fit_n_bf", c->fit_n_bf ? num_or_null((double)c->fit_n_bf) : cJSON_CreateNull());
    if (c->confident >= 0)
        cJSON_AddBoolToObject(f, "confident", c->confident != 0);
    else
        cJSON_AddNullToObject(f, "confident");
    if (c->warning[0])
        cJSON_AddStringToObject(f, "warning", c->warning);
    else
        cJSON_AddNullToObject(f, "warning");
    cJSON_AddItemToObject(f, "loss_contrast", num_or_null(c->loss_contrast));
    cJSON *se = cJSON_AddObjectToObject(f, "standard_errors");
    static const char *se_keys[4] = {"C10_nm", "C12_nm", "phi12_deg", "rotation_deg"};
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToObject(se, se_keys[i], num_or_null(c->se[i]));
    if (!c->has_parallax) {
        cJSON_AddNullToObject(f, "parallax");
        return f;
    }
    cJSON *px = cJSON_AddObjectToObject(f, "parallax");
    cJSON_AddItemToObject(px, "C10_nm", num_or_null(c->px_C10_nm));
    cJSON_AddItemToObject(px, "C12_nm", num_or_null(c->px_C12_nm));
    cJSON_AddItemToObject(px, "phi12_scan_deg", num_or_null(c->px_phi12_scan_deg));
    cJSON_AddItemToObject(px, "rotation_deg", num_or_null(c->px_rotation_deg));
    cJSON *sg = cJSON_AddObjectToObject(px, "sigma");
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToObject(sg, SIGMA_KEY[i], num_or_null(c->px_sigma[i]));
    cJSON_AddItemToObject(px, "residual_A", num_or_null(c->px_residual_A));
    if (isfinite(c->px_seconds)) /* an older file's time, read back */
        cJSON_AddItemToObject(px, "seconds", num_or_null(c->px_seconds));
    return f;
}

/* The "refine" section: what the multislice refinement says beside the aberrations and the thick
 * model it replaced (SPEC §13). */
static cJSON *refine_json(const ssb4d_calfile *c)
{
    cJSON *f = cJSON_CreateObject();
    cJSON_AddNumberToObject(f, "slices", c->refine_slices);
    if (c->refine_loss[0])
        cJSON_AddStringToObject(f, "loss", c->refine_loss);
    else
        cJSON_AddNullToObject(f, "loss");
    cJSON_AddItemToObject(f, "nll", num_or_null(c->refine_nll));
    cJSON_AddItemToObject(f, "nll_expected", num_or_null(c->refine_nll_expected));
    cJSON_AddNumberToObject(f, "iterations", (double)c->refine_iterations);
    cJSON_AddItemToObject(f, "phi12_probe_deg", num_or_null(c->refine_phi12_probe_deg));
    cJSON_AddItemToObject(f, "tilt_probe_mrad", pair(c->refine_tilt_probe_mrad));
    if (c->refine_confident >= 0)
        cJSON_AddBoolToObject(f, "confident", c->refine_confident);
    else
        cJSON_AddNullToObject(f, "confident");
    if (c->refine_warning[0])
        cJSON_AddStringToObject(f, "warning", c->refine_warning);
    else
        cJSON_AddNullToObject(f, "warning");
    if (c->refine_region[1])
        cJSON_AddItemToObject(f, "region", rect(c->refine_region));
    else
        cJSON_AddNullToObject(f, "region");
    /* one slice refines neither the tilt nor the thickness: the file says so (-1: not known) */
    if (c->refine_tilt_refined >= 0)
        cJSON_AddBoolToObject(f, "tilt_refined", c->refine_tilt_refined);
    if (c->refine_thickness_refined >= 0)
        cJSON_AddBoolToObject(f, "thickness_refined", c->refine_thickness_refined);
    return f;
}

static cJSON *shape_pair(const size_t v[2])
{
    if (!v[0] || !v[1])
        return cJSON_CreateNull();
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, num_or_null((double)v[0]));
    cJSON_AddItemToArray(a, num_or_null((double)v[1]));
    return a;
}

char *ssb_calfile_to_json(const ssb4d_calfile *c)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "schema", SSB4D_CALFILE_SCHEMA);
    cJSON_AddItemToObject(root, "version", num_or_null(SSB4D_CALFILE_VERSION));
    cJSON_AddStringToObject(root, "software", "ssb4d " SSB4D_VERSION_STRING);
    if (c->data_identity[0])
        cJSON_AddStringToObject(root, "data_identity", c->data_identity);
    else
        cJSON_AddNullToObject(root, "data_identity");

    cJSON *mic = cJSON_AddObjectToObject(root, "microscope");
    cJSON_AddItemToObject(mic, "kv", num_or_null(c->geom.kv));
    cJSON_AddItemToObject(mic, "semiangle_mrad", num_or_null(c->geom.semiangle_mrad));

    cJSON *scan = cJSON_AddObjectToObject(root, "scan");
    cJSON_AddItemToObject(scan, "shape", shape_pair(c->scan_shape));
    cJSON_AddItemToObject(scan, "step_A", pair(c->geom.scan_step_A));

    cJSON *det = cJSON_AddObjectToObject(root, "detector");
    cJSON_AddItemToObject(det, "shape", shape_pair(c->det_shape));
    cJSON_AddItemToObject(det, "sampling_mrad", pair(c->geom.det_sampling_mrad));
    cJSON_AddItemToObject(det, "centre_px", pair(c->geom.centre_px));
    cJSON_AddItemToObject(det, "disk_radius_px", num_or_null(c->disk_radius_px));
    cJSON_AddItemToObject(det, "selection_radius_px", num_or_null(c->bf_radius_px));
    cJSON_AddItemToObject(det, "n_bf", c->n_bf ? num_or_null((double)c->n_bf) : cJSON_CreateNull());
    cJSON *fl = cJSON_AddArrayToObject(det, "flagged_pixels");
    for (size_t i = 0; i < c->n_flagged; i++)
        cJSON_AddItemToArray(fl, num_or_null((double)c->flagged[i]));
    if (c->sampling_method[0]) {
        cJSON *ss = cJSON_AddObjectToObject(det, "sampling_source");
        cJSON_AddStringToObject(ss, "method", c->sampling_method);
        cJSON_AddItemToObject(ss, "measured_mrad", num_or_null(c->sampling_measured_mrad));
        cJSON_AddItemToObject(ss, "sigma_mrad", num_or_null(c->sampling_sigma_mrad));
    }
    if (c->centre_method[0]) {
        cJSON *cs = cJSON_AddObjectToObject(det, "centre_source");
        cJSON_AddStringToObject(cs, "method", c->centre_method);
        cJSON_AddItemToObject(cs, "measured_px", pair(c->centre_measured_px));
    }
    if (c->edge_model >= 0 && c->edge_model < 4) {
        cJSON_AddStringToObject(det, "edge_model", EDGE_MODEL_NAME[c->edge_model]);
        cJSON_AddStringToObject(det, "edge_model_source", c->edge_model_source[0] ? c->edge_model_source : "measured");
    }

    cJSON_AddItemToObject(root, "rotation_deg", num_or_null(c->geom.rotation_deg));
    if (c->flip_stated) {
        cJSON_AddBoolToObject(root, "flip", c->geom.flip != 0);
        if (c->flip_source[0])
            cJSON_AddStringToObject(root, "flip_source", c->flip_source);
    }
    if (c->source_format[0] || !isnan(c->camera_length_mm) || !isnan(c->dwell_us)) {
        cJSON *acq = cJSON_AddObjectToObject(root, "acquisition");
        if (c->source_format[0])
            cJSON_AddStringToObject(acq, "format", c->source_format);
        else
            cJSON_AddNullToObject(acq, "format");
        cJSON_AddItemToObject(acq, "camera_length_mm", num_or_null(c->camera_length_mm));
        cJSON_AddItemToObject(acq, "dwell_us", num_or_null(c->dwell_us));
    }
    if (c->rotation_method[0]) {
        cJSON *rs = cJSON_AddObjectToObject(root, "rotation_source");
        cJSON_AddStringToObject(rs, "method", c->rotation_method);
        if (c->rotation_from[0])
            cJSON_AddStringToObject(rs, "from", c->rotation_from);
        else
            cJSON_AddNullToObject(rs, "from");
        cJSON_AddItemToObject(rs, "sigma_deg", num_or_null(c->rotation_sigma_deg));
    }
    if (c->branch_flipped || !isnan(c->skewness) || !isnan(c->skewness_other)) {
        cJSON *br = cJSON_AddObjectToObject(root, "branch");
        cJSON_AddBoolToObject(br, "flipped", c->branch_flipped != 0);
        cJSON_AddItemToObject(br, "skewness", num_or_null(c->skewness));
        cJSON_AddItemToObject(br, "skewness_other", num_or_null(c->skewness_other));
    }

    if (c->has_ab) {
        cJSON *ab = cJSON_AddObjectToObject(root, "aberrations");
        for (int i = 0; i < SSB4D_N_ABERR; i++) {
            /* +0.0 coefficients are left out; -0.0 is kept so that the file reloads bit for bit */
            int always = (i == SSB4D_C10 || i == SSB4D_C12);
            if (!always && is_plus_zero(c->ab.C_nm[i]) &&
                (ssb4d_aberr_m(i) == 0 || is_plus_zero(c->ab.phi_deg[i])))
                continue;
            char key[32];
            snprintf(key, sizeof key, "%s_nm", ssb4d_aberr_name(i));
            cJSON_AddItemToObject(ab, key, num_or_null(c->ab.C_nm[i]));
            if (ssb4d_aberr_m(i) != 0) {
                snprintf(key, sizeof key, "phi%s_deg", ssb4d_aberr_name(i) + 1);
                cJSON_AddItemToObject(ab, key, num_or_null(c->ab.phi_deg[i]));
            }
        }
    }
    if (c->has_thick) {
        cJSON *th = cJSON_AddObjectToObject(root, "thick");
        cJSON_AddItemToObject(th, "tilt_mrad", pair(c->thick.tilt_mrad));
        cJSON_AddItemToObject(th, "thickness_nm", num_or_null(c->thick.thickness_nm));
        cJSON_AddItemToObject(th, "gain", num_or_null(c->gain));
    }
    cJSON_AddItemToObject(root, "loss", num_or_null(c->loss));
    if (c->has_fit)
        cJSON_AddItemToObject(root, "fit", fit_json(c));
    if (c->has_search)
        cJSON_AddItemToObject(root, "search", search_json(c));
    if (c->has_region)
        cJSON_AddItemToObject(root, "region", rect(c->region));
    if (c->n_regions) {
        cJSON *rs = cJSON_AddArrayToObject(root, "regions");
        for (size_t i = 0; i < c->n_regions; i++) {
            const ssb4d_calfile_region *g = &c->regions[i];
            cJSON *o = cJSON_CreateObject();
            size_t rc[4] = {g->r0, g->r1, g->c0, g->c1};
            cJSON_AddItemToObject(o, "rect", rect(rc));
            add_point(o, g->C10_nm, g->C12_nm, g->phi12_deg, g->loss);
            cJSON_AddItemToArray(rs, o);
        }
    }
    if (c->has_refine)
        cJSON_AddItemToObject(root, "refine", refine_json(c));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

ssb4d_status ssb_calfile_write(const char *path, const ssb4d_calfile *c, ssb4d_err *err)
{
    char *text = ssb_calfile_to_json(c);
    if (!text)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory (calibration JSON)");
    ssb4d_status st = ssb_write_text_atomic(path, text, err);
    free(text);
    return st;
}

/* ---- reading --------------------------------------------------------------------------------- */

typedef struct {
    const char *path;
    ssb4d_err *err;
} rd;

static ssb4d_status bad(const rd *r, const char *key, const char *what)
{
    return ssb_fail(r->err, SSB4D_EFORMAT, "%s: \"%s\" %s", r->path, key, what);
}

/* An optional number in [lo, hi] (null or absent: NaN). */
static ssb4d_status get_num(const rd *r, const cJSON *obj, const char *key, const char *full,
                            double lo, double hi, double *out)
{
    *out = NAN;
    const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!it || cJSON_IsNull(it))
        return SSB4D_OK;
    if (!cJSON_IsNumber(it))
        return bad(r, full, "must be a number");
    double v = it->valuedouble;
    if (!isfinite(v) || v < lo || v > hi) {
        char msg[160];
        snprintf(msg, sizeof msg, "= %g is out of range (expected %g .. %g)", v, lo, hi);
        return bad(r, full, msg);
    }
    *out = v;
    return SSB4D_OK;
}

/* An optional [a, b] pair of numbers in [lo, hi]; entries may be null. */
static ssb4d_status get_pair(const rd *r, const cJSON *obj, const char *key, const char *full,
                             double lo, double hi, double out[2])
{
    out[0] = out[1] = NAN;
    const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!it || cJSON_IsNull(it))
        return SSB4D_OK;
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2)
        return bad(r, full, "must be an array of two numbers [row, col]");
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(it, i);
        if (cJSON_IsNull(e))
            continue;
        if (!cJSON_IsNumber(e))
            return bad(r, full, "must be an array of two numbers [row, col]");
        double v = e->valuedouble;
        if (!isfinite(v) || v < lo || v > hi) {
            char msg[160];
            snprintf(msg, sizeof msg, "[%d] = %g is out of range (expected %g .. %g)", i, v, lo, hi);
            return bad(r, full, msg);
        }
        out[i] = v;
    }
    return SSB4D_OK;
}

static ssb4d_status get_shape(const rd *r, const cJSON *obj, const char *full, size_t out[2])
{
    out[0] = out[1] = 0;
    const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, "shape") : NULL;
    if (!it || cJSON_IsNull(it))
        return SSB4D_OK;
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2)
        return bad(r, full, "must be an array of two positive integers");
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(it, i);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1 && e->valuedouble <= 65536) ||
            e->valuedouble != floor(e->valuedouble))
            return bad(r, full, "must be an array of two positive integers (at most 65536)");
        out[i] = (size_t)e->valuedouble;
    }
    return SSB4D_OK;
}

static const cJSON *get_obj(const rd *r, const cJSON *root, const char *key, ssb4d_status *st);

/* An optional integer in [0, max] (null or absent: 0). */
static ssb4d_status get_count(const rd *r, const cJSON *obj, const char *key, const char *full,
                              double max, size_t *out)
{
    *out = 0;
    const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!it || cJSON_IsNull(it))
        return SSB4D_OK;
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0 && it->valuedouble <= max) ||
        it->valuedouble != floor(it->valuedouble)) {
        char msg[96];
        snprintf(msg, sizeof msg, "must be an integer in 0 .. %.0f", max);
        return bad(r, full, msg);
    }
    *out = (size_t)it->valuedouble;
    return SSB4D_OK;
}

/* A rectangle [r0, r1, c0, c1] of scan positions: integers, r0 < r1, c0 < c1, inside the scan
 * when its shape is known. */
static ssb4d_status get_rect(const rd *r, const cJSON *it, const char *full,
                             const size_t scan_shape[2], size_t out[4])
{
    static const char what[] = "must be [r0, r1, c0, c1]: integers with r0 < r1 and c0 < c1";
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 4)
        return bad(r, full, what);
    for (int i = 0; i < 4; i++) {
        const cJSON *e = cJSON_GetArrayItem(it, i);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble <= 65536) ||
            e->valuedouble != floor(e->valuedouble))
            return bad(r, full, what);
        out[i] = (size_t)e->valuedouble;
    }
    if (out[0] >= out[1] || out[2] >= out[3])
        return bad(r, full, what);
    if (scan_shape[0] && (out[1] > scan_shape[0] || out[3] > scan_shape[1])) {
        char msg[160];
        snprintf(msg, sizeof msg, "= [%zu, %zu, %zu, %zu] is outside the %zux%zu scan", out[0],
                 out[1], out[2], out[3], scan_shape[0], scan_shape[1]);
        return bad(r, full, msg);
    }
    return SSB4D_OK;
}

/* An optional array (null or absent: NULL). */
static const cJSON *get_array(const rd *r, const cJSON *obj, const char *key, const char *full,
                              const char *what, ssb4d_status *st)
{
    const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!it || cJSON_IsNull(it))
        return NULL;
    if (!cJSON_IsArray(it)) {
        *st = bad(r, full, what);
        return NULL;
    }
    return it;
}

/* C10, C12, φ12 and loss of a trial / region entry `prefix` (each may be null: NaN). */
static ssb4d_status get_point(const rd *r, const cJSON *o, const char *prefix, double v[4])
{
    char full[96];
    ssb4d_status st;
    for (int i = 0; i < 3; i++) {
        snprintf(full, sizeof full, "%s.%s", prefix, PARAM_KEY[i]);
        if ((st = get_num(r, o, PARAM_KEY[i], full, -PARAM_LIMIT[i], PARAM_LIMIT[i], &v[i])))
            return st;
    }
    snprintf(full, sizeof full, "%s.loss", prefix);
    return get_num(r, o, "loss", full, -1e300, 1e300, &v[3]);
}

/* The seed: an integer up to 2^53 or a decimal string (any uint64). */
static ssb4d_status get_seed(const rd *r, const cJSON *obj, uint64_t *out)
{
    static const char what[] = "must be an integer in 0 .. 2^53 or a decimal string of a 64-bit "
                               "unsigned integer";
    *out = 0;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, "seed");
    if (!it || cJSON_IsNull(it))
        return SSB4D_OK;
    if (cJSON_IsNumber(it)) {
        double v = it->valuedouble;
        if (!(v >= 0 && v <= MAX_EXACT_INT) || v != floor(v))
            return bad(r, "search.seed", what);
        *out = (uint64_t)v;
        return SSB4D_OK;
    }
    if (!cJSON_IsString(it))
        return bad(r, "search.seed", what);
    const char *t = it->valuestring;
    size_t n = strlen(t);
    if (n == 0 || n > 20 || strspn(t, "0123456789") != n)
        return bad(r, "search.seed", what);
    errno = 0;
    unsigned long long v = strtoull(t, NULL, 10);
    if (errno == ERANGE)
        return bad(r, "search.seed", "is larger than 2^64 - 1");
    *out = (uint64_t)v;
    return SSB4D_OK;
}

/* An optional string of fewer than n bytes into out (null or absent: ""). */
static ssb4d_status get_str(const rd *r, const cJSON *obj, const char *key, const char *full, char *out,
                            size_t n)
{
    out[0] = 0;
    const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!it || cJSON_IsNull(it))
        return SSB4D_OK;
    if (!cJSON_IsString(it))
        return bad(r, full, "must be a string");
    if (strlen(it->valuestring) >= n) {
        char msg[64];
        snprintf(msg, sizeof msg, "is too long (at most %zu bytes)", n - 1);
        return bad(r, full, msg);
    }
    strcpy(out, it->valuestring);
    return SSB4D_OK;
}

static ssb4d_status parse_search(const rd *r, const cJSON *s, ssb4d_calfile *c)
{
    ssb4d_status st = SSB4D_OK;
    c->has_search = 1;
    if ((st = get_count(r, s, "trials", "search.trials", MAX_EXACT_INT, &c->trials)) ||
        (st = get_count(r, s, "evaluations", "search.evaluations", MAX_EXACT_INT, &c->evaluations)) ||
        (st = get_seed(r, s, &c->seed)) ||
        (st = get_str(r, s, "phi12_frame", "search.phi12_frame", c->trials_phi12_frame, sizeof c->trials_phi12_frame)))
        return st;
    const cJSON *rg = get_obj(r, s, "ranges", &st);
    if (st)
        return bad(r, "search.ranges", "must be an object");
    for (int i = 0; i < 3; i++) {
        char full[64];
        double v[2];
        snprintf(full, sizeof full, "search.ranges.%s", PARAM_KEY[i]);
        if ((st = get_pair(r, rg, PARAM_KEY[i], full, -PARAM_LIMIT[i], PARAM_LIMIT[i], v)))
            return st;
        if (v[0] > v[1])
            return bad(r, full, "must be [lo, hi] with lo <= hi");
        c->range_lo[i] = v[0];
        c->range_hi[i] = v[1];
    }
    const cJSON *lk = get_array(r, s, "locked", "search.locked",
                                "must be an array of parameter names", &st);
    if (st)
        return st;
    size_t i = 0;
    for (const cJSON *e = lk ? lk->child : NULL; e; e = e->next, i++) {
        int k = -1;
        for (int j = 0; j < 3 && cJSON_IsString(e); j++)
            if (!strcmp(e->valuestring, PARAM_KEY[j]))
                k = j;
        if (k < 0) {
            char full[48];
            snprintf(full, sizeof full, "search.locked[%zu]", i);
            return bad(r, full, "must be one of \"C10_nm\", \"C12_nm\", \"phi12_deg\"");
        }
        c->locked[k] = 1;
    }
    const cJSON *bt = get_array(r, s, "best_trials", "search.best_trials",
                                "must be an array of trial objects", &st);
    if (st || !bt)
        return st;
    size_t n = (size_t)cJSON_GetArraySize(bt);
    if (n && !(c->best = calloc(n, sizeof *c->best)))
        return ssb_fail(r->err, SSB4D_ENOMEM, "out of memory reading %s", r->path);
    i = 0;
    for (const cJSON *e = bt->child; e; e = e->next, i++) {
        char full[64];
        snprintf(full, sizeof full, "search.best_trials[%zu]", i);
        if (!cJSON_IsObject(e))
            return bad(r, full, "must be an object");
        ssb4d_calfile_trial *t = &c->best[i];
        size_t stage;
        char key[96];
        snprintf(key, sizeof key, "%s.stage", full);
        if ((st = get_count(r, e, "stage", key, 1000, &stage)))
            return st;
        t->stage = (int)stage;
        snprintf(key, sizeof key, "%s.number", full);
        if ((st = get_count(r, e, "number", key, MAX_EXACT_INT, &t->number)))
            return st;
        double v[4];
        if ((st = get_point(r, e, full, v)))
            return st;
        t->C10_nm = v[0];
        t->C12_nm = v[1];
        t->phi12_deg = v[2];
        t->loss = v[3];
        c->n_best = i + 1;
    }
    return SSB4D_OK;
}

/* detector.sampling_source and detector.centre_source (optional; absent in older files). */
static ssb4d_status parse_sources(const rd *r, const cJSON *det, ssb4d_calfile *c)
{
    ssb4d_status st = SSB4D_OK;
    const cJSON *ss = get_obj(r, det, "sampling_source", &st);
    if (st)
        return st;
    if (ss && ((st = get_str(r, ss, "method", "detector.sampling_source.method", c->sampling_method,
                             sizeof c->sampling_method)) ||
               (st = get_num(r, ss, "measured_mrad", "detector.sampling_source.measured_mrad", 1e-9, 1e3,
                             &c->sampling_measured_mrad)) ||
               (st = get_num(r, ss, "sigma_mrad", "detector.sampling_source.sigma_mrad", 0, 1e3,
                             &c->sampling_sigma_mrad))))
        return st;
    if (c->sampling_method[0] && strcmp(c->sampling_method, "stated") && strcmp(c->sampling_method, "measured"))
        return bad(r, "detector.sampling_source.method", "must be \"stated\" or \"measured\"");
    const cJSON *cs = get_obj(r, det, "centre_source", &st);
    if (st)
        return st;
    if (cs && ((st = get_str(r, cs, "method", "detector.centre_source.method", c->centre_method,
                             sizeof c->centre_method)) ||
               (st = get_pair(r, cs, "measured_px", "detector.centre_source.measured_px", -1e5, 1e5,
                              c->centre_measured_px))))
        return st;
    if (c->centre_method[0] && strcmp(c->centre_method, "stated") && strcmp(c->centre_method, "measured"))
        return bad(r, "detector.centre_source.method", "must be \"stated\" or \"measured\"");
    char name[32] = "";
    if ((st = get_str(r, det, "edge_model", "detector.edge_model", name, sizeof name)) ||
        (st = get_str(r, det, "edge_model_source", "detector.edge_model_source", c->edge_model_source,
                      sizeof c->edge_model_source)))
        return st;
    c->edge_model = -1;
    for (int m = 0; m < 4 && name[0]; m++)
        if (!strcmp(name, EDGE_MODEL_NAME[m]))
            c->edge_model = m;
    if (name[0] && c->edge_model < 0)
        return bad(r, "detector.edge_model",
                   "must be \"point-sampled\", \"3x3 sub-samples\", \"5x5 sub-samples\" or \"area-integrated\"");
    if (c->edge_model_source[0] && strcmp(c->edge_model_source, "stated") && strcmp(c->edge_model_source, "measured"))
        return bad(r, "detector.edge_model_source", "must be \"stated\" or \"measured\"");
    return SSB4D_OK;
}

static ssb4d_status parse_rotation_source(const rd *r, const cJSON *o, ssb4d_calfile *c)
{
    ssb4d_status st;
    if ((st = get_str(r, o, "method", "rotation_source.method", c->rotation_method, sizeof c->rotation_method)) ||
        (st = get_str(r, o, "from", "rotation_source.from", c->rotation_from, sizeof c->rotation_from)) ||
        (st = get_num(r, o, "sigma_deg", "rotation_source.sigma_deg", 0, 1e4, &c->rotation_sigma_deg)))
        return st;
    if (!c->rotation_method[0])
        return bad(r, "rotation_source.method", "is missing");
    return SSB4D_OK;
}

static ssb4d_status parse_fit(const rd *r, const cJSON *f, ssb4d_calfile *c)
{
    ssb4d_status st = SSB4D_OK;
    c->has_fit = 1;
    if ((st = get_str(r, f, "objective", "fit.objective", c->objective, sizeof c->objective)) ||
        (st = get_num(r, f, "phi12_scan_deg", "fit.phi12_scan_deg", -1e4, 1e4, &c->phi12_scan_deg)) ||
        (st = get_num(r, f, "phi12_probe_deg", "fit.phi12_probe_deg", -1e4, 1e4, &c->phi12_probe_deg)) ||
        (st = get_count(r, f, "loss_n_bf", "fit.loss_n_bf", 4096.0 * 4096.0, &c->loss_n_bf)) ||
        (st = get_count(r, f, "fit_n_bf", "fit.fit_n_bf", 4096.0 * 4096.0, &c->fit_n_bf)) ||
        (st = get_str(r, f, "warning", "fit.warning", c->warning, sizeof c->warning)) ||
        (st = get_num(r, f, "loss_contrast", "fit.loss_contrast", -1e300, 1e300, &c->loss_contrast)))
        return st;
    /* the standard errors (files before issue 32 have none) */
    const cJSON *se = get_obj(r, f, "standard_errors", &st);
    if (st)
        return bad(r, "fit.standard_errors", "must be an object or null");
    static const char *se_keys[4] = {"C10_nm", "C12_nm", "phi12_deg", "rotation_deg"};
    for (int i = 0; i < 4; i++) {
        char full[64];
        snprintf(full, sizeof full, "fit.standard_errors.%s", se_keys[i]);
        if ((st = get_num(r, se, se_keys[i], full, 0, 1e6, &c->se[i])))
            return st;
    }
    const cJSON *cf = cJSON_GetObjectItemCaseSensitive(f, "confident");
    if (cf && !cJSON_IsNull(cf) && !cJSON_IsBool(cf))
        return bad(r, "fit.confident", "must be true or false");
    c->confident = cJSON_IsBool(cf) ? cJSON_IsTrue(cf) : -1;
    const cJSON *px = get_obj(r, f, "parallax", &st);
    if (st)
        return bad(r, "fit.parallax", "must be an object or null");
    if (!px)
        return SSB4D_OK;
    c->has_parallax = 1;
    if ((st = get_num(r, px, "C10_nm", "fit.parallax.C10_nm", -1e9, 1e9, &c->px_C10_nm)) ||
        (st = get_num(r, px, "C12_nm", "fit.parallax.C12_nm", -1e9, 1e9, &c->px_C12_nm)) ||
        (st = get_num(r, px, "phi12_scan_deg", "fit.parallax.phi12_scan_deg", -1e4, 1e4, &c->px_phi12_scan_deg)) ||
        (st = get_num(r, px, "rotation_deg", "fit.parallax.rotation_deg", -1e4, 1e4, &c->px_rotation_deg)) ||
        (st = get_num(r, px, "residual_A", "fit.parallax.residual_A", 0, 1e300, &c->px_residual_A)) ||
        (st = get_num(r, px, "seconds", "fit.parallax.seconds", 0, 1e300, &c->px_seconds)))
        return st;
    const cJSON *sg = get_obj(r, px, "sigma", &st);
    if (st)
        return bad(r, "fit.parallax.sigma", "must be an object");
    for (int i = 0; sg && i < 4; i++) {
        char full[64];
        snprintf(full, sizeof full, "fit.parallax.sigma.%s", SIGMA_KEY[i]);
        if ((st = get_num(r, sg, SIGMA_KEY[i], full, 0, 1e300, &c->px_sigma[i])))
            return st;
    }
    return SSB4D_OK;
}

static ssb4d_status parse_refine(const rd *r, const cJSON *f, ssb4d_calfile *c)
{
    ssb4d_status st = SSB4D_OK;
    size_t slices = 0;
    c->has_refine = 1;
    if ((st = get_count(r, f, "slices", "refine.slices", 100000, &slices)) ||
        (st = get_str(r, f, "loss", "refine.loss", c->refine_loss, sizeof c->refine_loss)) ||
        (st = get_num(r, f, "nll", "refine.nll", -1e300, 1e300, &c->refine_nll)) ||
        (st = get_num(r, f, "nll_expected", "refine.nll_expected", -1e300, 1e300, &c->refine_nll_expected)) ||
        (st = get_count(r, f, "iterations", "refine.iterations", MAX_EXACT_INT, &c->refine_iterations)) ||
        (st = get_num(r, f, "phi12_probe_deg", "refine.phi12_probe_deg", -1e4, 1e4, &c->refine_phi12_probe_deg)) ||
        (st = get_pair(r, f, "tilt_probe_mrad", "refine.tilt_probe_mrad", -1000, 1000, c->refine_tilt_probe_mrad)) ||
        (st = get_str(r, f, "warning", "refine.warning", c->refine_warning, sizeof c->refine_warning)))
        return st;
    c->refine_slices = (int)slices;
    if (c->refine_loss[0] && strcmp(c->refine_loss, "poisson") && strcmp(c->refine_loss, "amplitude"))
        return bad(r, "refine.loss", "must be \"poisson\" or \"amplitude\"");
    const cJSON *cf = cJSON_GetObjectItemCaseSensitive(f, "confident");
    if (cf && !cJSON_IsNull(cf) && !cJSON_IsBool(cf))
        return bad(r, "refine.confident", "must be true or false");
    c->refine_confident = cJSON_IsBool(cf) ? cJSON_IsTrue(cf) : -1;
    const char *const flags[2] = {"tilt_refined", "thickness_refined"};
    int *const dst[2] = {&c->refine_tilt_refined, &c->refine_thickness_refined};
    for (int k = 0; k < 2; k++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(f, flags[k]);
        if (b && !cJSON_IsNull(b) && !cJSON_IsBool(b))
            return bad(r, flags[k][1] == 'i' ? "refine.tilt_refined" : "refine.thickness_refined",
                       "must be true or false");
        *dst[k] = cJSON_IsBool(b) ? cJSON_IsTrue(b) : -1;
    }
    const cJSON *rg = cJSON_GetObjectItemCaseSensitive(f, "region");
    if (rg && !cJSON_IsNull(rg))
        return get_rect(r, rg, "refine.region", c->scan_shape, c->refine_region);
    return SSB4D_OK;
}

static ssb4d_status parse_regions(const rd *r, const cJSON *root, ssb4d_calfile *c)
{
    ssb4d_status st = SSB4D_OK;
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(root, "region");
    if (one && !cJSON_IsNull(one)) {
        if ((st = get_rect(r, one, "region", c->scan_shape, c->region)))
            return st;
        c->has_region = 1;
    }
    const cJSON *rs = get_array(r, root, "regions", "regions",
                                "must be an array of region objects", &st);
    if (st || !rs)
        return st;
    size_t n = (size_t)cJSON_GetArraySize(rs), i = 0;
    if (n && !(c->regions = calloc(n, sizeof *c->regions)))
        return ssb_fail(r->err, SSB4D_ENOMEM, "out of memory reading %s", r->path);
    for (const cJSON *e = rs->child; e; e = e->next, i++) {
        char full[48], key[64];
        snprintf(full, sizeof full, "regions[%zu]", i);
        if (!cJSON_IsObject(e))
            return bad(r, full, "must be an object");
        snprintf(key, sizeof key, "%s.rect", full);
        size_t rc[4];
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(e, "rect");
        if (!it)
            return bad(r, key, "is missing");
        if ((st = get_rect(r, it, key, c->scan_shape, rc)))
            return st;
        double v[4];
        if ((st = get_point(r, e, full, v)))
            return st;
        ssb4d_calfile_region *g = &c->regions[i];
        g->r0 = rc[0];
        g->r1 = rc[1];
        g->c0 = rc[2];
        g->c1 = rc[3];
        g->C10_nm = v[0];
        g->C12_nm = v[1];
        g->phi12_deg = v[2];
        g->loss = v[3];
        c->n_regions = i + 1;
    }
    return SSB4D_OK;
}

static const cJSON *get_obj(const rd *r, const cJSON *root, const char *key, ssb4d_status *st)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it))
        return NULL;
    if (!cJSON_IsObject(it)) {
        *st = bad(r, key, "must be an object");
        return NULL;
    }
    return it;
}

static char *slurp(const char *path, size_t *len, ssb4d_err *err, ssb4d_status *st)
{
    char *buf = NULL;
    *st = ssb_read_text_file(path, CALFILE_MAX_BYTES, "calibration file", &buf, len, err);
    return buf;
}

static ssb4d_status parse(const rd *r, const cJSON *root, ssb4d_calfile *c)
{
    ssb4d_status st = SSB4D_OK;
    if (!cJSON_IsObject(root))
        return ssb_fail(r->err, SSB4D_EFORMAT, "%s: not a calibration file (the JSON is not an object)",
                        r->path);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(root, "schema");
    if (!cJSON_IsString(schema))
        return ssb_fail(r->err, SSB4D_EFORMAT,
                        "%s: not an ssb4d calibration file (no \"schema\": \"%s\")", r->path,
                        SSB4D_CALFILE_SCHEMA);
    if (strcmp(schema->valuestring, SSB4D_CALFILE_SCHEMA))
        return ssb_fail(r->err, SSB4D_EFORMAT,
                        "%s: not an ssb4d calibration file (schema \"%.100s\", expected \"%s\")",
                        r->path, schema->valuestring, SSB4D_CALFILE_SCHEMA);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != floor(ver->valuedouble) || ver->valuedouble < 1)
        return bad(r, "version", "must be a positive integer");
    if (ver->valuedouble > SSB4D_CALFILE_VERSION)
        return ssb_fail(r->err, SSB4D_EFORMAT,
                        "%s was written by a newer ssb4d (calibration schema version %.0f; this "
                        "ssb4d %s reads version %d): upgrade ssb4d",
                        r->path, ver->valuedouble, SSB4D_VERSION_STRING, SSB4D_CALFILE_VERSION);
    c->version = (int)ver->valuedouble;

    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "data_identity");
    if (id && !cJSON_IsNull(id)) {
        if (!cJSON_IsString(id))
            return bad(r, "data_identity", "must be a string");
        if (strlen(id->valuestring) >= sizeof c->data_identity)
            return bad(r, "data_identity", "is too long");
        strcpy(c->data_identity, id->valuestring);
    }
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "software");
    if (sw && !cJSON_IsNull(sw) && !cJSON_IsString(sw))
        return bad(r, "software", "must be a string");

    const cJSON *mic = get_obj(r, root, "microscope", &st);
    if (st)
        return st;
    if ((st = get_num(r, mic, "kv", "microscope.kv", 1e-3, 5000, &c->geom.kv)) ||
        (st = get_num(r, mic, "semiangle_mrad", "microscope.semiangle_mrad", 1e-6, 500,
                      &c->geom.semiangle_mrad)))
        return st;
    if (!isnan(c->geom.kv) && !(c->geom.kv > 0))
        return bad(r, "microscope.kv", "must be > 0");

    const cJSON *scan = get_obj(r, root, "scan", &st);
    if (st)
        return st;
    if ((st = get_shape(r, scan, "scan.shape", c->scan_shape)) ||
        (st = get_pair(r, scan, "step_A", "scan.step_A", 1e-9, 1e5, c->geom.scan_step_A)))
        return st;

    const cJSON *det = get_obj(r, root, "detector", &st);
    if (st)
        return st;
    if ((st = get_shape(r, det, "detector.shape", c->det_shape)) ||
        (st = get_pair(r, det, "sampling_mrad", "detector.sampling_mrad", 1e-9, 1e3,
                       c->geom.det_sampling_mrad)) ||
        (st = get_pair(r, det, "centre_px", "detector.centre_px", -1e5, 1e5, c->geom.centre_px)) ||
        (st = get_num(r, det, "disk_radius_px", "detector.disk_radius_px", 1e-9, 1e5,
                      &c->disk_radius_px)) ||
        (st = get_num(r, det, "selection_radius_px", "detector.selection_radius_px", 1e-9, 1e5,
                      &c->bf_radius_px)))
        return st;
    const cJSON *fl = det ? cJSON_GetObjectItemCaseSensitive(det, "flagged_pixels") : NULL;
    if (fl && !cJSON_IsNull(fl)) {
        if (!cJSON_IsArray(fl))
            return bad(r, "detector.flagged_pixels", "must be an array of flat pixel indices");
        size_t n = (size_t)cJSON_GetArraySize(fl);
        double lim = c->det_shape[0] ? (double)c->det_shape[0] * (double)c->det_shape[1]
                                     : 4096.0 * 4096.0;
        if (n) {
            c->flagged = malloc(n * sizeof *c->flagged);
            if (!c->flagged)
                return ssb_fail(r->err, SSB4D_ENOMEM, "out of memory reading %s", r->path);
        }
        size_t i = 0;
        for (const cJSON *e = fl->child; e; e = e->next, i++) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
                e->valuedouble < 0 || e->valuedouble >= lim) {
                char msg[160];
                snprintf(msg, sizeof msg, "[%zu] must be a flat pixel index in 0 .. %.0f", i, lim - 1);
                return bad(r, "detector.flagged_pixels", msg);
            }
            c->flagged[i] = (int32_t)e->valuedouble;
        }
        c->n_flagged = n;
    }
    if ((st = parse_sources(r, det, c)))
        return st;
    if ((st = get_count(r, det, "n_bf", "detector.n_bf",
                        c->det_shape[0] ? (double)c->det_shape[0] * (double)c->det_shape[1]
                                        : 4096.0 * 4096.0,
                        &c->n_bf)))
        return st;

    if ((st = get_num(r, root, "rotation_deg", "rotation_deg", -1e4, 1e4, &c->geom.rotation_deg)))
        return st;
    const cJSON *flip = cJSON_GetObjectItemCaseSensitive(root, "flip");
    if (flip && !cJSON_IsNull(flip)) {
        if (!cJSON_IsBool(flip))
            return bad(r, "flip", "must be true or false");
        c->flip_stated = 1;
        c->geom.flip = cJSON_IsTrue(flip);
    }
    if ((st = get_str(r, root, "flip_source", "flip_source", c->flip_source, sizeof c->flip_source)))
        return st;
    const cJSON *acq = get_obj(r, root, "acquisition", &st);
    if (st)
        return st;
    if (acq && ((st = get_str(r, acq, "format", "acquisition.format", c->source_format, sizeof c->source_format)) ||
                (st = get_num(r, acq, "camera_length_mm", "acquisition.camera_length_mm", 0, 1e9, &c->camera_length_mm)) ||
                (st = get_num(r, acq, "dwell_us", "acquisition.dwell_us", 0, 1e12, &c->dwell_us))))
        return st;
    const cJSON *rsrc = get_obj(r, root, "rotation_source", &st);
    if (st || (rsrc && (st = parse_rotation_source(r, rsrc, c))))
        return st;

    const cJSON *br = get_obj(r, root, "branch", &st);
    if (st)
        return st;
    if (br) {
        const cJSON *fl2 = cJSON_GetObjectItemCaseSensitive(br, "flipped");
        if (fl2 && !cJSON_IsNull(fl2) && !cJSON_IsBool(fl2))
            return bad(r, "branch.flipped", "must be true or false");
        c->branch_flipped = cJSON_IsTrue(fl2);
        if ((st = get_num(r, br, "skewness", "branch.skewness", -1e300, 1e300, &c->skewness)) ||
            (st = get_num(r, br, "skewness_other", "branch.skewness_other", -1e300, 1e300,
                          &c->skewness_other)))
            return st;
    }

    const cJSON *ab = get_obj(r, root, "aberrations", &st);
    if (st)
        return st;
    if (ab) {
        c->has_ab = 1;
        for (int i = 0; i < SSB4D_N_ABERR; i++) {
            char key[32], full[48];
            double v;
            snprintf(key, sizeof key, "%s_nm", ssb4d_aberr_name(i));
            snprintf(full, sizeof full, "aberrations.%s", key);
            if ((st = get_num(r, ab, key, full, -1e9, 1e9, &v)))
                return st;
            c->ab.C_nm[i] = isnan(v) ? 0.0 : v;
            snprintf(key, sizeof key, "phi%s_deg", ssb4d_aberr_name(i) + 1);
            snprintf(full, sizeof full, "aberrations.%s", key);
            if ((st = get_num(r, ab, key, full, -1e4, 1e4, &v)))
                return st;
            c->ab.phi_deg[i] = isnan(v) ? 0.0 : v;
        }
    }

    const cJSON *th = get_obj(r, root, "thick", &st);
    if (st)
        return st;
    if (th) {
        if ((st = get_pair(r, th, "tilt_mrad", "thick.tilt_mrad", -1000, 1000, c->thick.tilt_mrad)) ||
            (st = get_num(r, th, "thickness_nm", "thick.thickness_nm", 0, 1e4,
                          &c->thick.thickness_nm)) ||
            (st = get_num(r, th, "gain", "thick.gain", -1e300, 1e300, &c->gain)))
            return st;
        if (isnan(c->thick.tilt_mrad[0]) || isnan(c->thick.tilt_mrad[1]))
            return bad(r, "thick.tilt_mrad", "is missing (a thick model needs [row, col] in mrad)");
        if (isnan(c->thick.thickness_nm))
            return bad(r, "thick.thickness_nm", "is missing (a thick model needs it, in nm)");
        c->has_thick = 1;
    }

    if ((st = get_num(r, root, "loss", "loss", -1e300, 1e300, &c->loss)))
        return st;
    const cJSON *fi = get_obj(r, root, "fit", &st);
    if (st || (fi && (st = parse_fit(r, fi, c))))
        return st;
    const cJSON *se = get_obj(r, root, "search", &st);
    if (st || (se && (st = parse_search(r, se, c))))
        return st;
    const cJSON *rf = get_obj(r, root, "refine", &st);
    if (st || (rf && (st = parse_refine(r, rf, c))))
        return st;
    return parse_regions(r, root, c);
}

ssb4d_status ssb_calfile_read(const char *path, ssb4d_calfile *c, ssb4d_err *err)
{
    ssb_calfile_init(c);
    ssb4d_status st = SSB4D_OK;
    size_t len = 0;
    char *text = slurp(path, &len, err, &st);
    if (!text)
        return st;
    if (strlen(text) != len) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s is not valid JSON (a NUL byte at byte %zu)", path,
                      strlen(text));
        free(text);
        return st;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1); /* the NUL included */
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = (end && end >= text && end <= text + len) ? (size_t)(end - text)
                     : (at && at >= text && at <= text + len) ? (size_t)(at - text) : 0;
        st = ssb_fail(err, SSB4D_EFORMAT, "%s is not valid JSON (error near byte %zu)", path, off);
        free(text);
        return st;
    }
    rd r = {path, err};
    st = parse(&r, root, c);
    cJSON_Delete(root);
    free(text);
    if (st)
        ssb_calfile_free(c);
    return st;
}
