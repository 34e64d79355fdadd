/* calfile.c — the calibration JSON file, schema "ssb4d.calibration" version 1 (SPEC §8).
 *
 *   {"schema":"ssb4d.calibration", "version":1, "software":"ssb4d <ver>",
 *    "data_identity":"sha256:<hex>" | null,
 *    "microscope":{"kv":..,"semiangle_mrad":..},
 *    "scan":{"shape":[rows,cols],"step_A":[r,c]},
 *    "detector":{"shape":[rows,cols],"sampling_mrad":[r,c],"centre_px":[r,c],
 *                "disk_radius_px":..,"selection_radius_px":..,"flagged_pixels":[flat,...]},
 *    "rotation_deg":..,
 *    "aberrations":{"C10_nm":..,"C12_nm":..,"phi12_deg":.., <other nonzero C_nm / phi_deg>},
 *    "loss":..}
 *
 * Unknown values are written as null (JSON has no NaN) and read back as NaN; every section and
 * value other than schema and version is optional. Reading refuses malformed JSON, a different
 * schema name, a newer version, wrong types and absurd values, naming the key. Unknown extra keys
 * are allowed (later stages add their own). Doubles are printed so that they read back exactly.
 */
#include "io/calfile.h"

#include "common/atomic.h"
#include "common/err.h"
#include "common/textfile.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CALFILE_MAX_BYTES ((size_t)256 << 20)

void ssb4d_calfile_init(ssb4d_calfile *c)
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
}

void ssb4d_calfile_free(ssb4d_calfile *c)
{
    if (!c)
        return;
    free(c->flagged);
    c->flagged = NULL;
    c->n_flagged = 0;
}

ssb4d_status ssb4d_calfile_from_calibration(ssb4d_calfile *c, const ssb4d_calibration *cal,
                                            ssb4d_err *err)
{
    ssb4d_calfile_init(c);
    c->geom = cal->geom;
    c->bf_radius_px = cal->selection_radius_px;
    c->disk_radius_px = cal->disk_radius_px;
    for (int i = 0; i < 2; i++) {
        c->det_shape[i] = cal->det_shape[i];
        c->scan_shape[i] = cal->scan_shape[i];
    }
    if (cal->n_flagged) {
        c->flagged = malloc(cal->n_flagged * sizeof *c->flagged);
        if (!c->flagged)
            return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory (flagged pixel list)");
        memcpy(c->flagged, cal->flagged, cal->n_flagged * sizeof *c->flagged);
        c->n_flagged = cal->n_flagged;
    }
    return SSB4D_OK;
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

static cJSON *shape_pair(const size_t v[2])
{
    if (!v[0] || !v[1])
        return cJSON_CreateNull();
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, num_or_null((double)v[0]));
    cJSON_AddItemToArray(a, num_or_null((double)v[1]));
    return a;
}

char *ssb4d_calfile_to_json(const ssb4d_calfile *c)
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
    cJSON *fl = cJSON_AddArrayToObject(det, "flagged_pixels");
    for (size_t i = 0; i < c->n_flagged; i++)
        cJSON_AddItemToArray(fl, num_or_null((double)c->flagged[i]));

    cJSON_AddItemToObject(root, "rotation_deg", num_or_null(c->geom.rotation_deg));

    if (c->has_ab) {
        cJSON *ab = cJSON_AddObjectToObject(root, "aberrations");
        for (int i = 0; i < SSB4D_N_ABERR; i++) {
            int always = (i == SSB4D_C10 || i == SSB4D_C12);
            if (!always && c->ab.C_nm[i] == 0.0)
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
    cJSON_AddItemToObject(root, "loss", num_or_null(c->loss));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

ssb4d_status ssb4d_calfile_write(const char *path, const ssb4d_calfile *c, ssb4d_err *err)
{
    char *text = ssb4d_calfile_to_json(c);
    if (!text)
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory (calibration JSON)");
    ssb4d_status st = ssb4d_write_text_atomic(path, text, err);
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
    return ssb4d_fail(r->err, SSB4D_EFORMAT, "%s: \"%s\" %s", r->path, key, what);
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
    *st = ssb4d_read_text_file(path, CALFILE_MAX_BYTES, "calibration file", &buf, len, err);
    return buf;
}

static ssb4d_status parse(const rd *r, const cJSON *root, ssb4d_calfile *c)
{
    ssb4d_status st = SSB4D_OK;
    if (!cJSON_IsObject(root))
        return ssb4d_fail(r->err, SSB4D_EFORMAT, "%s: not a calibration file (the JSON is not an object)",
                          r->path);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(root, "schema");
    if (!cJSON_IsString(schema))
        return ssb4d_fail(r->err, SSB4D_EFORMAT,
                          "%s: not an ssb4d calibration file (no \"schema\": \"%s\")", r->path,
                          SSB4D_CALFILE_SCHEMA);
    if (strcmp(schema->valuestring, SSB4D_CALFILE_SCHEMA))
        return ssb4d_fail(r->err, SSB4D_EFORMAT,
                          "%s: not an ssb4d calibration file (schema \"%.100s\", expected \"%s\")",
                          r->path, schema->valuestring, SSB4D_CALFILE_SCHEMA);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != floor(ver->valuedouble) || ver->valuedouble < 1)
        return bad(r, "version", "must be a positive integer");
    if (ver->valuedouble > SSB4D_CALFILE_VERSION)
        return ssb4d_fail(r->err, SSB4D_EFORMAT,
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
                return ssb4d_fail(r->err, SSB4D_ENOMEM, "out of memory reading %s", r->path);
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

    if ((st = get_num(r, root, "rotation_deg", "rotation_deg", -1e4, 1e4, &c->geom.rotation_deg)))
        return st;

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
    if ((st = get_num(r, root, "loss", "loss", -1e300, 1e300, &c->loss)))
        return st;
    return SSB4D_OK;
}

ssb4d_status ssb4d_calfile_read(const char *path, ssb4d_calfile *c, ssb4d_err *err)
{
    ssb4d_calfile_init(c);
    ssb4d_status st = SSB4D_OK;
    size_t len = 0;
    char *text = slurp(path, &len, err, &st);
    if (!text)
        return st;
    if (strlen(text) != len) {
        st = ssb4d_fail(err, SSB4D_EFORMAT, "%s is not valid JSON (a NUL byte at byte %zu)", path,
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
        st = ssb4d_fail(err, SSB4D_EFORMAT, "%s is not valid JSON (error near byte %zu)", path, off);
        free(text);
        return st;
    }
    rd r = {path, err};
    st = parse(&r, root, c);
    cJSON_Delete(root);
    free(text);
    if (st)
        ssb4d_calfile_free(c);
    return st;
}
