/* qem_meta.c — scientific_metadata (schema "quantem.scientific-metadata/2", qem-format.md §9):
 * the builder used by the writer, the validator used by the reader (and by the writer before it
 * commits to a file) and the effective calibration of §9.8. */
#include "qem/qem_internal.h"

#include "common/err.h"
#include "common/sha256.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const axis_names[4] = {"scan_row", "scan_column", "detector_row",
                                          "detector_column"};

#define P_KV "electron_source/accelerating_voltage"
#define P_KEV "electron_source/beam_energy"
#define P_SEMI "illumination_system/semi_convergence_angle"
#define P_STEP_ROW "scan_controller/regular_scan/pixel_size_row"
#define P_STEP_COL "scan_controller/regular_scan/pixel_size_column"
#define P_DWELL "scan_controller/regular_scan/dwell_time"
#define P_CAMLEN "imaging_system/camera_length"
#define P_DET_ROW "imaging_system/reciprocal_pixel_size_row"
#define P_DET_COL "imaging_system/reciprocal_pixel_size_column"

/* Known paths with their canonical unit(s) (§9.3) and whether an override may name them (§9.4). */
static const struct {
    const char *path, *unit, *unit2;
    int overridable;
    int axis; /* the axis whose sampling this path duplicates, or -1 */
} known[] = {
    {P_KV, "kV", NULL, 1, -1},
    {P_KEV, "keV", NULL, 0, -1},
    {P_SEMI, "mrad", NULL, 1, -1},
    {P_STEP_ROW, "angstrom", NULL, 1, 0},
    {P_STEP_COL, "angstrom", NULL, 1, 1},
    {P_DWELL, "us", NULL, 1, -1},
    {P_CAMLEN, "mm", NULL, 1, -1},
    {P_DET_ROW, "mrad", "1/angstrom", 1, 2},
    {P_DET_COL, "mrad", "1/angstrom", 1, 3},
};
#define N_KNOWN (sizeof known / sizeof known[0])

static int find_known(const char *path)
{
    for (size_t i = 0; i < N_KNOWN; i++)
        if (strcmp(known[i].path, path) == 0)
            return (int)i;
    return -1;
}

static int unit_ok(int ki, const char *unit)
{
    return strcmp(unit, known[ki].unit) == 0 || (known[ki].unit2 && strcmp(unit, known[ki].unit2) == 0);
}

static const char *units_text(int ki)
{
    return known[ki].unit2 ? "mrad or 1/angstrom" : known[ki].unit;
}

/* The spec-0.0.2 names ending in _x/_y, refused in electron_microscope and overrides. */
static int retired_name(const char *path)
{
    const char *last = strrchr(path, '/');
    last = last ? last + 1 : path;
    return strcmp(last, "pixel_size_x") == 0 || strcmp(last, "pixel_size_y") == 0 ||
           strcmp(last, "reciprocal_pixel_size_x") == 0 || strcmp(last, "reciprocal_pixel_size_y") == 0;
}

static int nonblank(const cJSON *j)
{
    if (!cJSON_IsString(j) || !j->valuestring)
        return 0;
    for (const char *s = j->valuestring; *s; s++)
        if (!isspace((unsigned char)*s))
            return 1;
    return 0;
}

static int truthy(const cJSON *j)
{
    if (!j || cJSON_IsNull(j) || cJSON_IsFalse(j))
        return 0;
    if (cJSON_IsNumber(j))
        return j->valuedouble != 0;
    if (cJSON_IsString(j))
        return j->valuestring && j->valuestring[0];
    if (cJSON_IsArray(j) || cJSON_IsObject(j))
        return j->child != NULL;
    return 1;
}

/* §9.2: {"value": finite > 0, "unit": non-empty, "provenance": non-blank, "evidence"?: string}. */
static ssb4d_status check_quantity(const cJSON *q, const char *where, ssb4d_err *err)
{
    if (!cJSON_IsObject(q))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: %s is not a quantity object", where);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(q, "value");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(q, "unit");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(q, "provenance");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(q, "evidence");
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > 0))
        return ssb_fail(err, SSB4D_EFORMAT,
                        "scientific_metadata: %s value must be a finite number > 0 (absent means unknown)",
                        where);
    if (!cJSON_IsString(u) || !u->valuestring || !u->valuestring[0])
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: %s has no unit", where);
    if (!nonblank(p))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: %s has no provenance", where);
    if (e && !cJSON_IsString(e))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: %s evidence must be a string", where);
    return SSB4D_OK;
}

static int close_rel(double a, double b)
{
    return fabs(a - b) <= 1e-14 * fmax(fabs(a), fabs(b));
}

static ssb4d_status check_axes(const cJSON *axes, const size_t shape[4], ssb4d_err *err)
{
    if (!cJSON_IsArray(axes) || cJSON_GetArraySize(axes) != 4)
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: axes must be an array of 4 objects");
    int i = 0;
    for (const cJSON *a = axes->child; a; a = a->next, i++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(a, "name");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(a, "size");
        uint64_t sz;
        if (!cJSON_IsObject(a) || !cJSON_IsString(name) || strcmp(name->valuestring, axis_names[i]) != 0)
            return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: axes[%d] must be named \"%s\"", i,
                            axis_names[i]);
        if (!qem_json_uint(size, 0, QEM_MAX_JSON_INT, &sz) || (shape && sz != shape[i]))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: axes[%d] (%s) size disagrees with the shape %zu", i,
                            axis_names[i], shape ? shape[i] : 0);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(a, "sampling");
        if (!s)
            continue;
        char where[64];
        snprintf(where, sizeof where, "axes[%d] (%s) sampling", i, axis_names[i]);
        ssb4d_status st = check_quantity(s, where, err);
        if (st)
            return st;
        const char *unit = cJSON_GetObjectItemCaseSensitive(s, "unit")->valuestring;
        int ok = i < 2 ? strcmp(unit, "angstrom") == 0
                       : strcmp(unit, "mrad") == 0 || strcmp(unit, "1/angstrom") == 0;
        if (!ok)
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: %s unit \"%.40s\" is not the canonical %s", where, unit,
                            i < 2 ? "angstrom" : "mrad or 1/angstrom");
    }
    return SSB4D_OK;
}

static ssb4d_status check_microscope(const cJSON *em, const cJSON *axes, ssb4d_err *err)
{
    if (!em)
        return SSB4D_OK;
    if (!cJSON_IsObject(em))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: electron_microscope must be an object");
    for (const cJSON *q = em->child; q; q = q->next) {
        if (retired_name(q->string))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: electron_microscope uses the retired name \"%.120s\" "
                            "(use _row/_column)",
                            q->string);
        char where[200];
        snprintf(where, sizeof where, "electron_microscope \"%.150s\"", q->string);
        ssb4d_status st = check_quantity(q, where, err);
        if (st)
            return st;
        int ki = find_known(q->string);
        if (ki < 0)
            continue;
        const cJSON *unit = cJSON_GetObjectItemCaseSensitive(q, "unit");
        if (!unit_ok(ki, unit->valuestring))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: %s unit \"%.40s\" is not the canonical %s", where,
                            unit->valuestring, units_text(ki));
        if (known[ki].axis < 0)
            continue;
        /* A duplicate of an axis step must agree with it exactly (to 1e-14). */
        const cJSON *ax = cJSON_GetArrayItem(axes, known[ki].axis);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(ax, "sampling");
        const cJSON *su = cJSON_GetObjectItemCaseSensitive(s, "unit");
        const cJSON *sv = cJSON_GetObjectItemCaseSensitive(s, "value");
        double v = cJSON_GetObjectItemCaseSensitive(q, "value")->valuedouble;
        if (!s || strcmp(su->valuestring, unit->valuestring) != 0 || !close_rel(sv->valuedouble, v))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: %s disagrees with axes[%d] (%s) sampling", where,
                            known[ki].axis, axis_names[known[ki].axis]);
    }
    return SSB4D_OK;
}

static ssb4d_status check_overrides(const cJSON *ov, ssb4d_err *err)
{
    if (!ov)
        return SSB4D_OK;
    if (!cJSON_IsObject(ov))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: calibration_overrides must be an object");
    for (const cJSON *q = ov->child; q; q = q->next) {
        if (retired_name(q->string))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: calibration_overrides uses the retired name \"%.120s\" "
                            "(use _row/_column)",
                            q->string);
        int ki = find_known(q->string);
        if (ki < 0 || !known[ki].overridable)
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: calibration_overrides may not name \"%.150s\"", q->string);
        char where[200];
        snprintf(where, sizeof where, "calibration_overrides \"%.150s\"", q->string);
        ssb4d_status st = check_quantity(q, where, err);
        if (st)
            return st;
        const cJSON *unit = cJSON_GetObjectItemCaseSensitive(q, "unit");
        const cJSON *prov = cJSON_GetObjectItemCaseSensitive(q, "provenance");
        if (!unit_ok(ki, unit->valuestring))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: %s unit \"%.40s\" is not the canonical %s", where,
                            unit->valuestring, units_text(ki));
        if (strcmp(prov->valuestring, "user_override") != 0)
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: %s provenance must be \"user_override\"", where);
        if (!nonblank(cJSON_GetObjectItemCaseSensitive(q, "evidence")))
            return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: %s needs an evidence text", where);
        double v = cJSON_GetObjectItemCaseSensitive(q, "value")->valuedouble;
        if (known[ki].axis >= 0 && known[ki].axis < 2 && (v < 1e-4 || v > 1e4))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: %s = %g angstrom is outside [1e-4, 1e4]", where, v);
    }
    /* Row/column pairs are all or nothing, in one unit. */
    static const char *const pairs[2][2] = {{P_STEP_ROW, P_STEP_COL}, {P_DET_ROW, P_DET_COL}};
    for (int p = 0; p < 2; p++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(ov, pairs[p][0]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(ov, pairs[p][1]);
        if (!a && !b)
            continue;
        if (!a || !b)
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: calibration_overrides must give both %s and %s", pairs[p][0],
                            pairs[p][1]);
        if (strcmp(cJSON_GetObjectItemCaseSensitive(a, "unit")->valuestring,
                   cJSON_GetObjectItemCaseSensitive(b, "unit")->valuestring) != 0)
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: calibration_overrides %s and %s use different units",
                            pairs[p][0], pairs[p][1]);
    }
    return SSB4D_OK;
}

static int ieq_prefix(const char *s, const char *lit)
{
    for (; *lit; s++, lit++)
        if (tolower((unsigned char)*s) != *lit)
            return 0;
    return 1;
}

static int contains_ci(const char *s, const char *lit)
{
    size_t n = strlen(lit);
    for (; *s; s++)
        if ((unsigned char)tolower((unsigned char)*s) == (unsigned char)lit[0] && strlen(s) >= n &&
            ieq_prefix(s, lit))
            return 1;
    return 0;
}

static ssb4d_status check_documents(const cJSON *docs, ssb4d_err *err)
{
    if (!docs)
        return SSB4D_OK;
    if (!cJSON_IsArray(docs))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: source_documents must be an array");
    int n = cJSON_GetArraySize(docs);
    if (n > 16)
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: %d source_documents (at most 16)", n);
    size_t total = 0;
    int i = 0;
    for (const cJSON *d = docs->child; d; d = d->next, i++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(d, "filename");
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(d, "mediaType");
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(d, "content");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(d, "sha256");
        if (!cJSON_IsObject(d) || !cJSON_IsString(fn) || !fn->valuestring[0] || strchr(fn->valuestring, '/') ||
            strchr(fn->valuestring, '\\'))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: source_documents[%d] needs a plain filename (no / or \\)", i);
        int xml = cJSON_IsString(mt) && strcmp(mt->valuestring, "application/xml") == 0;
        int json = cJSON_IsString(mt) && strcmp(mt->valuestring, "application/json") == 0;
        if (!xml && !json)
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: source_documents[%d] mediaType must be application/xml or "
                            "application/json",
                            i);
        if (!cJSON_IsString(ct) || !cJSON_IsString(sh))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: source_documents[%d] needs content and sha256 strings", i);
        size_t len = strlen(ct->valuestring);
        total += len;
        if (total > ((size_t)4 << 20))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: source_documents hold more than 4 MiB of content");
        char hex[65];
        ssb_sha256_hex(ct->valuestring, len, hex);
        if (strcmp(hex, sh->valuestring) != 0)
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: source_documents[%d] (%.60s) sha256 does not match its "
                            "content; the metadata is damaged",
                            i, fn->valuestring);
        if (xml) {
            if (!strchr(ct->valuestring, '<'))
                return ssb_fail(err, SSB4D_EFORMAT,
                                "scientific_metadata: source_documents[%d] (%.60s) is not XML", i,
                                fn->valuestring);
            if (contains_ci(ct->valuestring, "<!doctype") || contains_ci(ct->valuestring, "<!entity"))
                return ssb_fail(err, SSB4D_EFORMAT,
                                "scientific_metadata: source_documents[%d] (%.60s) contains <!DOCTYPE or "
                                "<!ENTITY (refused)",
                                i, fn->valuestring);
        } else {
            cJSON *doc = cJSON_ParseWithOpts(ct->valuestring, NULL, 1);
            int ok = cJSON_IsObject(doc);
            cJSON_Delete(doc);
            if (!ok)
                return ssb_fail(err, SSB4D_EFORMAT,
                                "scientific_metadata: source_documents[%d] (%.60s) is not a JSON object", i,
                                fn->valuestring);
        }
    }
    return SSB4D_OK;
}

static const cJSON *find_op(const cJSON *proc, const char *op)
{
    for (const cJSON *r = proc->child; r; r = r->next) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "operation");
        if (cJSON_IsString(o) && strcmp(o->valuestring, op) == 0)
            return r;
    }
    return NULL;
}

static int str_field_is(const cJSON *r, const char *key, const char *want)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, key);
    return cJSON_IsString(s) && strcmp(s->valuestring, want) == 0;
}

static ssb4d_status check_processing(const cJSON *proc, const cJSON *meta, const char *dtype,
                                     ssb4d_err *err)
{
    if (!cJSON_IsArray(proc) || !proc->child)
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: processing must be a non-empty list");
    /* Known operations: the changes_measurements they must declare and the fields they need. */
    static const struct {
        const char *op;
        int changes;
        const char *f1, *f2;
        int f1_int;
    } ops[] = {
        {"lossless_storage", 0, NULL, NULL, 0},
        {"exact_integer_narrowing", 0, "source_dtype", "stored_dtype", 0},
        {"flagged_pixel_replacement", 1, "method", "pixel_count", 0},
        {"flagged_marker_zeroing", 0, "value_count", NULL, 1},
        {"exact_float_narrowing", 0, "source_dtype", "stored_dtype", 0},
    };
    int i = 0;
    for (const cJSON *r = proc->child; r; r = r->next, i++) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(r, "operation");
        const cJSON *ch = cJSON_GetObjectItemCaseSensitive(r, "changes_measurements");
        if (!cJSON_IsObject(r) || !nonblank(op))
            return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: processing[%d] has no operation", i);
        if (!cJSON_IsBool(ch))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "scientific_metadata: processing[%d] (%.60s) changes_measurements must be true or "
                            "false",
                            i, op->valuestring);
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            if (strcmp(op->valuestring, ops[k].op) != 0)
                continue;
            if (cJSON_IsTrue(ch) != ops[k].changes)
                return ssb_fail(err, SSB4D_EFORMAT,
                                "scientific_metadata: processing[%d] %s must have changes_measurements %s", i,
                                ops[k].op, ops[k].changes ? "true" : "false");
            const char *f[2] = {ops[k].f1, ops[k].f2};
            for (int m = 0; m < 2; m++) {
                if (!f[m])
                    continue;
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, f[m]);
                int isint = (ops[k].f1_int && m == 0) || strcmp(f[m], "pixel_count") == 0;
                if (isint ? !qem_json_uint(v, 0, QEM_MAX_JSON_INT, NULL) : !nonblank(v))
                    return ssb_fail(err, SSB4D_EFORMAT,
                                    "scientific_metadata: processing[%d] %s needs %s", i, ops[k].op, f[m]);
            }
        }
    }
    /* §9.5 cross-checks: what metadata says was done must be recorded in processing. */
    if (!cJSON_IsObject(meta))
        return SSB4D_OK;
    const cJSON *hot = cJSON_GetObjectItemCaseSensitive(meta, "hot_pixel_correction");
    if (cJSON_IsObject(hot) && truthy(cJSON_GetObjectItemCaseSensitive(hot, "applied"))) {
        const cJSON *r = find_op(proc, "flagged_pixel_replacement");
        if (!r || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "changes_measurements")))
            return ssb_fail(err, SSB4D_EFORMAT,
                            "metadata says hot pixels were replaced but scientific_metadata.processing has no "
                            "flagged_pixel_replacement record");
    }
    if (truthy(cJSON_GetObjectItemCaseSensitive(meta, "flagged_markers_stored_as_zero")) &&
        !find_op(proc, "flagged_marker_zeroing"))
        return ssb_fail(err, SSB4D_EFORMAT,
                        "metadata says flag markers were stored as zero but scientific_metadata.processing has "
                        "no flagged_marker_zeroing record");
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(meta, "source_dtype");
    if (sd && dtype && !(cJSON_IsString(sd) && strcmp(sd->valuestring, dtype) == 0)) {
        int found = 0;
        for (const cJSON *r = proc->child; r; r = r->next)
            if (str_field_is(r, "operation", "exact_integer_narrowing") && cJSON_IsString(sd) &&
                str_field_is(r, "source_dtype", sd->valuestring) && str_field_is(r, "stored_dtype", dtype) &&
                cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "changes_measurements")))
                found = 1;
        if (!found)
            return ssb_fail(err, SSB4D_EFORMAT,
                            "metadata.source_dtype differs from dtype %s but scientific_metadata.processing "
                            "has no matching exact_integer_narrowing record",
                            dtype);
    }
    return SSB4D_OK;
}

ssb4d_status qem_validate_scientific_metadata(const cJSON *sci, const cJSON *meta, const size_t shape[4],
                                              const char *dtype, ssb4d_err *err)
{
    if (!cJSON_IsObject(sci))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata must be an object");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(sci, "schema");
    if (!cJSON_IsString(schema))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata has no schema");
    if (strcmp(schema->valuestring, "quantem.scientific-metadata/1") == 0)
        return ssb_fail(err, SSB4D_EFORMAT,
                        "scientific_metadata uses the legacy schema 1, which this reader does not read; "
                        "re-export the file with a current quantem");
    if (strcmp(schema->valuestring, QEM_SCI_SCHEMA) != 0)
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata schema \"%.80s\" is not supported",
                        schema->valuestring);
    const cJSON *axes = cJSON_GetObjectItemCaseSensitive(sci, "axes");
    ssb4d_status st = check_axes(axes, shape, err);
    if (!st)
        st = check_microscope(cJSON_GetObjectItemCaseSensitive(sci, "electron_microscope"), axes, err);
    if (!st)
        st = check_overrides(cJSON_GetObjectItemCaseSensitive(sci, "calibration_overrides"), err);
    if (st)
        return st;
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(sci, "source_metadata")))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: source_metadata must be an object");
    const cJSON *cov = cJSON_GetObjectItemCaseSensitive(sci, "source_metadata_coverage");
    if (!cJSON_IsString(cov) || (strcmp(cov->valuestring, "reader-retained") != 0 &&
                                 strcmp(cov->valuestring, "exhaustive") != 0 &&
                                 strcmp(cov->valuestring, "unknown") != 0))
        return ssb_fail(err, SSB4D_EFORMAT,
                        "scientific_metadata: source_metadata_coverage must be \"reader-retained\", "
                        "\"exhaustive\" or \"unknown\"");
    st = check_documents(cJSON_GetObjectItemCaseSensitive(sci, "source_documents"), err);
    if (!st)
        st = check_processing(cJSON_GetObjectItemCaseSensitive(sci, "processing"), meta, dtype, err);
    if (st)
        return st;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(sci, "source_format");
    if (fmt && !cJSON_IsString(fmt))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: source_format must be a string");
    const cJSON *sample = cJSON_GetObjectItemCaseSensitive(sci, "sample");
    if (sample) {
        if (!cJSON_IsObject(sample))
            return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: sample must be an object");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(sample, "provenance");
        if (p && !nonblank(p))
            return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: sample provenance must be a non-empty string");
        static const char *const lists[] = {"components", "zone_axes", "thickness_estimates"};
        for (size_t i = 0; i < 3; i++) {
            const cJSON *l = cJSON_GetObjectItemCaseSensitive(sample, lists[i]);
            if (l && !cJSON_IsArray(l))
                return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: sample %s must be a list", lists[i]);
        }
    }
    const cJSON *ext = cJSON_GetObjectItemCaseSensitive(sci, "extensions");
    if (ext && !cJSON_IsObject(ext))
        return ssb_fail(err, SSB4D_EFORMAT, "scientific_metadata: extensions must be an object");
    return SSB4D_OK;
}

/* ---- effective calibration (§9.8) ---- */

static double quantity_value(const cJSON *q, const char **unit)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(q, "value");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(q, "unit");
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > 0))
        return NAN;
    if (unit)
        *unit = cJSON_IsString(u) ? u->valuestring : "";
    return v->valuedouble;
}

/* Override if present, else the recorded quantity (q_rec may be NULL), else NaN. */
static double pick(const cJSON *ov, const char *path, const cJSON *q_rec, const char **unit)
{
    double v = quantity_value(cJSON_GetObjectItemCaseSensitive(ov, path), unit);
    if (isnan(v))
        v = quantity_value(q_rec, unit);
    return v;
}

void qem_calibration_from_metadata(const cJSON *sci, qem_calibration *cal)
{
    cal->kv = cal->semiangle_mrad = cal->camera_length_mm = cal->dwell_us = NAN;
    cal->scan_step_A[0] = cal->scan_step_A[1] = cal->det_sampling[0] = cal->det_sampling[1] = NAN;
    cal->det_sampling_inverse_A = 0;
    if (!cJSON_IsObject(sci))
        return;
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(sci, "calibration_overrides");
    const cJSON *em = cJSON_GetObjectItemCaseSensitive(sci, "electron_microscope");
    const cJSON *axes = cJSON_GetObjectItemCaseSensitive(sci, "axes");
    if (!cJSON_IsObject(ov))
        ov = NULL;
    if (!cJSON_IsObject(em))
        em = NULL;
    const cJSON *samp[4] = {NULL, NULL, NULL, NULL};
    if (cJSON_IsArray(axes) && cJSON_GetArraySize(axes) == 4)
        for (int i = 0; i < 4; i++)
            samp[i] = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(axes, i), "sampling");
    cal->kv = pick(ov, P_KV, cJSON_GetObjectItemCaseSensitive(em, P_KV), NULL);
    cal->semiangle_mrad = pick(ov, P_SEMI, cJSON_GetObjectItemCaseSensitive(em, P_SEMI), NULL);
    cal->camera_length_mm = pick(ov, P_CAMLEN, cJSON_GetObjectItemCaseSensitive(em, P_CAMLEN), NULL);
    cal->dwell_us = pick(ov, P_DWELL, cJSON_GetObjectItemCaseSensitive(em, P_DWELL), NULL);
    cal->scan_step_A[0] = pick(ov, P_STEP_ROW, samp[0], NULL);
    cal->scan_step_A[1] = pick(ov, P_STEP_COL, samp[1], NULL);
    const char *u0 = NULL, *u1 = NULL;
    double d0 = pick(ov, P_DET_ROW, samp[2], &u0), d1 = pick(ov, P_DET_COL, samp[3], &u1);
    if (isnan(d0) || isnan(d1)) {
        /* One known member is still usable alone; its unit decides the flag. */
        const char *u = !isnan(d0) ? u0 : u1;
        cal->det_sampling[0] = d0;
        cal->det_sampling[1] = d1;
        cal->det_sampling_inverse_A = u && strcmp(u, "1/angstrom") == 0;
    } else if (strcmp(u0, u1) == 0) {
        cal->det_sampling[0] = d0;
        cal->det_sampling[1] = d1;
        cal->det_sampling_inverse_A = strcmp(u0, "1/angstrom") == 0;
    } /* else: row and column in different units — not representable, left unknown */
}

/* ---- flagged pixels ---- */

static size_t uint_field(const cJSON *o, const char *key, int *found)
{
    uint64_t v = 0;
    int ok = qem_json_uint(cJSON_GetObjectItemCaseSensitive(o, key), 0, QEM_MAX_JSON_INT, &v);
    if (found)
        *found = ok;
    return ok ? (size_t)v : 0;
}

void qem_get_flag_handling(const qem_file *f, qem_flag_handling *h)
{
    memset(h, 0, sizeof *h);
    const cJSON *head = qem_header_json(f);
    /* The policy and counts are the writer's own record (§10): read, never required. */
    const cJSON *hp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(head, "metadata"),
                                                       "hot_pixel_correction");
    const cJSON *pol = cJSON_GetObjectItemCaseSensitive(hp, "policy");
    if (cJSON_IsString(pol) && pol->valuestring[0]) {
        h->policy = pol->valuestring;
        int a = 0, b = 0;
        h->flagged_by_file = uint_field(hp, "flagged_by_file", &a);
        h->flagged_by_totals = uint_field(hp, "flagged_by_totals", &b);
        h->flagged_recorded = a && b;
    }
    /* What changed stored values is in processing (§9.5), validated when the file was opened. */
    const cJSON *proc = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(head, "scientific_metadata"), "processing");
    if (!cJSON_IsArray(proc))
        return;
    const cJSON *r = find_op(proc, "flagged_pixel_replacement");
    if (r) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "method");
        h->replaced = 1;
        h->method = cJSON_IsString(m) ? m->valuestring : NULL;
        h->replaced_pixels = uint_field(r, "pixel_count", NULL);
    }
    if ((r = find_op(proc, "flagged_marker_zeroing")))
        h->markers_zeroed = uint_field(r, "value_count", NULL);
}

/* ---- builder ---- */

static int known_value(double v) { return isfinite(v) && v > 0; }

static cJSON *quantity(double v, const char *unit)
{
    cJSON *q = cJSON_CreateObject();
    if (!q)
        return NULL;
    cJSON_AddStringToObject(q, "provenance", "source_metadata");
    cJSON_AddStringToObject(q, "unit", unit);
    cJSON_AddNumberToObject(q, "value", v);
    return q;
}

cJSON *qem_build_scientific_metadata(const size_t shape[4], const qem_meta_in *in)
{
    qem_meta_in none = {.kv = NAN,
                        .semiangle_mrad = NAN,
                        .scan_step_A = {NAN, NAN},
                        .det_sampling = {NAN, NAN},
                        .camera_length_mm = NAN,
                        .dwell_us = NAN};
    if (!in)
        in = &none;
    cJSON *sci = cJSON_CreateObject();
    if (!sci) {
        cJSON_Delete(in->source_metadata);
        cJSON_Delete(in->processing_extra);
        return NULL;
    }
    const char *det_unit = in->det_sampling_inverse_A ? "1/angstrom" : "mrad";
    cJSON *axes = cJSON_AddArrayToObject(sci, "axes");
    for (int i = 0; i < 4 && axes; i++) {
        cJSON *a = cJSON_CreateObject();
        if (!a)
            break;
        cJSON_AddItemToArray(axes, a);
        cJSON_AddStringToObject(a, "name", axis_names[i]);
        double v = i < 2 ? in->scan_step_A[i] : in->det_sampling[i - 2];
        if (known_value(v))
            cJSON_AddItemToObject(a, "sampling", quantity(v, i < 2 ? "angstrom" : det_unit));
        cJSON_AddNumberToObject(a, "size", (double)shape[i]);
    }
    cJSON_AddItemToObject(sci, "calibration_overrides", cJSON_CreateObject());
    cJSON *em = cJSON_AddObjectToObject(sci, "electron_microscope");
    if (em) {
        if (known_value(in->kv))
            cJSON_AddItemToObject(em, P_KV, quantity(in->kv, "kV"));
        if (known_value(in->semiangle_mrad))
            cJSON_AddItemToObject(em, P_SEMI, quantity(in->semiangle_mrad, "mrad"));
        if (known_value(in->camera_length_mm))
            cJSON_AddItemToObject(em, P_CAMLEN, quantity(in->camera_length_mm, "mm"));
        if (known_value(in->dwell_us))
            cJSON_AddItemToObject(em, P_DWELL, quantity(in->dwell_us, "us"));
        if (known_value(in->scan_step_A[1]))
            cJSON_AddItemToObject(em, P_STEP_COL, quantity(in->scan_step_A[1], "angstrom"));
        if (known_value(in->scan_step_A[0]))
            cJSON_AddItemToObject(em, P_STEP_ROW, quantity(in->scan_step_A[0], "angstrom"));
    }
    cJSON *proc = cJSON_AddArrayToObject(sci, "processing");
    if (proc) {
        cJSON *r = cJSON_CreateObject();
        if (r) {
            cJSON_AddFalseToObject(r, "changes_measurements");
            cJSON_AddStringToObject(r, "operation", "lossless_storage");
            cJSON_AddItemToArray(proc, r);
        }
        if (cJSON_IsArray(in->processing_extra)) {
            cJSON *x;
            while ((x = cJSON_DetachItemFromArray(in->processing_extra, 0)))
                cJSON_AddItemToArray(proc, x);
        }
    }
    cJSON_Delete(in->processing_extra);
    cJSON_AddStringToObject(sci, "schema", QEM_SCI_SCHEMA);
    cJSON_AddItemToObject(sci, "source_documents", cJSON_CreateArray());
    cJSON_AddStringToObject(sci, "source_format", in->source_format ? in->source_format : "unknown");
    cJSON_AddItemToObject(sci, "source_metadata",
                          cJSON_IsObject(in->source_metadata) ? in->source_metadata : cJSON_CreateObject());
    if (in->source_metadata && !cJSON_IsObject(in->source_metadata))
        cJSON_Delete(in->source_metadata);
    cJSON_AddStringToObject(sci, "source_metadata_coverage", "reader-retained");
    /* A failed allocation above leaves a member missing: report NULL, not a half-built tree. */
    static const char *const required[] = {"axes", "calibration_overrides", "electron_microscope",
                                           "processing", "schema", "source_documents", "source_format",
                                           "source_metadata", "source_metadata_coverage"};
    int complete = cJSON_GetArraySize(axes) == 4;
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        complete = complete && cJSON_GetObjectItemCaseSensitive(sci, required[i]) != NULL;
    for (const cJSON *a = axes ? axes->child : NULL; a; a = a->next)
        complete = complete && cJSON_GetObjectItemCaseSensitive(a, "size") &&
                   cJSON_GetObjectItemCaseSensitive(a, "name");
    if (!complete) {
        cJSON_Delete(sci);
        return NULL;
    }
    return sci;
}
