/* values.c — what an acquisition file and the files beside it state about the microscope
 * (ssb4d_values_read in include/ssb4d.h): the .qem's recorded calibration, the simulator's
 * sidecar JSON, a calibration file. One reader for the command line and the Python package, so
 * `ssb4d fit DATA` and `ssb4d.open(DATA)` start from the same values. */
#include "common/err.h"
#include "common/textfile.h"
#include "formats/framesrc.h"
#include "io/calfile.h"
#include "qem/qem.h"
#include "ssb4d_advanced.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void ssb4d_values_unset(ssb4d_values *v)
{
    memset(v, 0, sizeof *v);
    v->kv = v->semiangle_mrad = v->rotation_deg = v->bf_radius_px = NAN;
    v->rotation_sigma_deg = NAN;
    v->flip = -1;
    v->camera_length_mm = v->dwell_us = NAN;
    for (int i = 0; i < 2; i++)
        v->scan_step_A[i] = v->det_sampling_mrad[i] = v->centre_px[i] = NAN;
}

#define OVERRIDE(dst, src) \
    do {                   \
        if (!isnan(src))   \
            (dst) = (src); \
    } while (0)

void ssb4d_values_layer(ssb4d_values *out, const ssb4d_values *in)
{
    OVERRIDE(out->kv, in->kv);
    OVERRIDE(out->semiangle_mrad, in->semiangle_mrad);
    /* A stated rotation (a flag, the sidecar, a fit's branch-checked value) is not replaced by one
     * the centre of mass measured: the measurement is noisy and its 180° branch open. */
    int stated_kept = in->rotation_measured && !isnan(out->rotation_deg) && !out->rotation_measured;
    if (!isnan(in->rotation_deg) && !stated_kept) {
        out->rotation_deg = in->rotation_deg;
        memcpy(out->rotation_from, in->rotation_from, sizeof out->rotation_from);
        out->rotation_measured = in->rotation_measured;
        out->rotation_sigma_deg = in->rotation_sigma_deg;
    }
    if (in->source_format[0])
        memcpy(out->source_format, in->source_format, sizeof out->source_format);
    OVERRIDE(out->camera_length_mm, in->camera_length_mm);
    OVERRIDE(out->dwell_us, in->dwell_us);
    if (in->flip >= 0) {
        out->flip = in->flip;
        memcpy(out->flip_from, in->flip_from, sizeof out->flip_from);
    }
    OVERRIDE(out->bf_radius_px, in->bf_radius_px);
    if (in->pixel_model_S > 0)
        out->pixel_model_S = in->pixel_model_S;
    for (int i = 0; i < 2; i++) {
        OVERRIDE(out->scan_step_A[i], in->scan_step_A[i]);
        OVERRIDE(out->det_sampling_mrad[i], in->det_sampling_mrad[i]);
        OVERRIDE(out->centre_px[i], in->centre_px[i]);
    }
    if (in->has_ab) {
        out->ab = in->ab;
        out->has_ab = 1;
        out->ab_from_truth = in->ab_from_truth;
        memcpy(out->ab_from, in->ab_from, sizeof out->ab_from);
    }
    if (in->has_thick) {
        out->thick = in->thick;
        out->has_thick = 1;
    }
}

static int regular_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

int ssb_sidecar_find(const char *data, char *out, size_t n)
{
    if (!data || n < 2)
        return 0;
    if (snprintf(out, n, "%s.json", data) < (int)n && regular_file(out))
        return 1;
    out[0] = 0;
    const char *dot = strrchr(data, '.'), *slash = strrchr(data, '/');
    if (!dot || (slash && dot < slash))
        return 0;
    size_t stem = (size_t)(dot - data);
    if (stem + 6 > n)
        return 0;
    snprintf(out, n, "%.*s.json", (int)stem, data);
    if (regular_file(out))
        return 1;
    if (stem > 7 && !strncmp(data + stem - 7, "_counts", 7)) {
        snprintf(out, n, "%.*s.json", (int)(stem - 7), data);
        if (regular_file(out))
            return 1;
    }
    out[0] = 0;
    return 0;
}

static double json_num(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

/* [a, b] or one number for both axes; left unset otherwise. */
static void json_pair(const cJSON *o, const char *key, double out[2])
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsNumber(cJSON_GetArrayItem(it, 0)) &&
        cJSON_IsNumber(cJSON_GetArrayItem(it, 1))) {
        out[0] = cJSON_GetArrayItem(it, 0)->valuedouble;
        out[1] = cJSON_GetArrayItem(it, 1)->valuedouble;
    } else if (cJSON_IsNumber(it)) {
        out[0] = out[1] = it->valuedouble;
    }
}

ssb4d_status ssb_sidecar_read(const char *path, ssb4d_values *v, ssb4d_err *err)
{
    ssb4d_values_unset(v);
    char *text = NULL;
    ssb4d_status st = ssb_read_text_file(path, (size_t)16 << 20, "sidecar", &text, NULL, err);
    if (st)
        return st;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ssb_fail(err, SSB4D_EFORMAT, "sidecar %s is not valid JSON", path);
    }
    const cJSON *optics = cJSON_GetObjectItemCaseSensitive(root, "optics");
    const cJSON *scan = cJSON_GetObjectItemCaseSensitive(root, "scan");
    const cJSON *det = cJSON_GetObjectItemCaseSensitive(root, "detector");
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(root, "aberrations_true");
    v->kv = json_num(optics, "voltage_kV");
    v->semiangle_mrad = json_num(optics, "semiangle_mrad");
    json_pair(scan, "step_A", v->scan_step_A);
    v->rotation_deg = json_num(scan, "rotation_deg");
    if (!isnan(v->rotation_deg))
        snprintf(v->rotation_from, sizeof v->rotation_from, "sidecar");
    json_pair(det, "sampling_mrad", v->det_sampling_mrad);
    json_pair(det, "zero_frequency_pixel", v->centre_px);
    const cJSON *flip = cJSON_GetObjectItemCaseSensitive(det, "flip");
    if (cJSON_IsBool(flip)) {
        v->flip = cJSON_IsTrue(flip);
        snprintf(v->flip_from, sizeof v->flip_from, "sidecar");
    }
    /* The pixel model the simulator used: S x S point samples per pixel (SPEC §4, stated beats
     * measured: the edge fit then fits that model alone). */
    double S = json_num(det, "det_oversample");
    if (S >= 1 && S <= SSB4D_SIM_OVERSAMPLE_MAX && S == floor(S))
        v->pixel_model_S = (int)S;
    if (cJSON_IsObject(ab)) {
        for (int i = 0; i < SSB4D_N_ABERR; i++) {
            char key[32];
            snprintf(key, sizeof key, "%s_nm", ssb4d_aberr_name(i));
            double c = json_num(ab, key);
            v->ab.C_nm[i] = isnan(c) ? 0.0 : c;
            snprintf(key, sizeof key, "phi%s_deg", ssb4d_aberr_name(i) + 1);
            double p = json_num(ab, key);
            v->ab.phi_deg[i] = isnan(p) ? 0.0 : p;
        }
        /* SSB refers to the slab's mid-plane; the simulator states where that puts C10. */
        double mid = json_num(ab, "expected_recovered_C10_nm_at_midplane");
        if (!isnan(mid))
            v->ab.C_nm[SSB4D_C10] = mid;
        v->has_ab = 1;
        v->ab_from_truth = 1;
        snprintf(v->ab_from, sizeof v->ab_from, "simulator truth (sidecar)");
    }
    snprintf(v->sidecar_path, sizeof v->sidecar_path, "%s", path);
    cJSON_Delete(root);
    return SSB4D_OK;
}

/* What a foreign format's own header records (a file fitted in place, not imported): the
 * reader's calibration. A file no reader claims states nothing here (opening it as data says
 * why later, in its turn). */
static void read_foreign(const char *path, ssb4d_values *v)
{
    framesrc *fs = NULL;
    ssb4d_err e = {0};
    if (framesrc_open(path, NULL, &fs, &e))
        return;
    framesrc_calibration c;
    framesrc_calibration_of(fs, &c);
    snprintf(v->source_format, sizeof v->source_format, "%s", framesrc_format_name(fs));
    framesrc_close(fs);
    v->camera_length_mm = c.camera_length_mm;
    v->dwell_us = c.dwell_us;
    v->kv = c.kv;
    v->semiangle_mrad = c.semiangle_mrad;
    for (int i = 0; i < 2; i++) {
        v->scan_step_A[i] = c.scan_step_A[i];
        v->det_sampling_mrad[i] = c.det_sampling_mrad[i];
    }
}

/* The calibration a .qem records (qem-format §9.8: its overrides win over its recorded values)
 * and the handedness its import recorded; for other files what their reader finds. Only the
 * header is read: the data are verified when opened. */
static ssb4d_status read_qem(const char *path, ssb4d_values *v, ssb4d_err *err)
{
    FILE *f = fopen(path, "rb");
    char magic[8] = {0};
    size_t got = f ? fread(magic, 1, 8, f) : 0;
    int is_qem = got == 8 && !memcmp(magic, "QEMDATA1", 8);
    int is_npy = got >= 6 && !memcmp(magic, "\x93NUMPY", 6);
    if (f)
        fclose(f);
    if (!is_qem) {
        if (f && !is_npy)
            read_foreign(path, v);
        else if (is_npy)
            snprintf(v->source_format, sizeof v->source_format, "numpy");
        return SSB4D_OK;
    }
    qem_file *q = NULL;
    ssb4d_status st = qem_open(path, 0, 1, &q, err);
    if (st)
        return st;
    qem_calibration cal;
    qem_effective_calibration(q, &cal);
    v->camera_length_mm = cal.camera_length_mm;
    v->dwell_us = cal.dwell_us;
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(qem_header_json(q), "scientific_metadata"), "source_format");
    snprintf(v->source_format, sizeof v->source_format, "%s", cJSON_IsString(sf) ? sf->valuestring : "qem");
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(qem_header_json(q), "metadata");
    const cJSON *flip = cJSON_GetObjectItemCaseSensitive(meta, "detector_flip");
    if (cJSON_IsBool(flip)) {
        v->flip = cJSON_IsTrue(flip);
        snprintf(v->flip_from, sizeof v->flip_from, ".qem record");
    }
    qem_close(q);
    v->kv = cal.kv;
    v->semiangle_mrad = cal.semiangle_mrad;
    for (int i = 0; i < 2; i++) {
        v->scan_step_A[i] = cal.scan_step_A[i];
        /* A reciprocal-length sampling (cycles/Å per pixel) is an angle only through λ. */
        if (!cal.det_sampling_inverse_A)
            v->det_sampling_mrad[i] = cal.det_sampling[i];
        else if (cal.kv > 0 && !isnan(cal.det_sampling[i]))
            v->det_sampling_mrad[i] = cal.det_sampling[i] * ssb4d_wavelength_A(cal.kv) * 1000.0;
    }
    return SSB4D_OK;
}

static ssb4d_status read_calibration_file(const char *path, ssb4d_values *c, ssb4d_err *err)
{
    ssb4d_calfile cf;
    ssb4d_status st = ssb_calfile_read(path, &cf, err);
    if (st) {
        ssb_calfile_free(&cf);
        return st;
    }
    c->kv = cf.geom.kv;
    c->semiangle_mrad = cf.geom.semiangle_mrad;
    c->rotation_deg = cf.geom.rotation_deg;
    snprintf(c->rotation_from, sizeof c->rotation_from, "calibration file");
    /* A rotation `ssb4d calibrate` measured from the centre of mass (or could not measure) leaves
     * the 180° branch open: the fit may refine it. Any other recorded rotation (given, or fitted
     * and branch-checked by ssb4d fit; files that do not say) is held. */
    c->rotation_measured = !strcmp(cf.rotation_method, SSB4D_CALFILE_ROT_COM) ||
                           !strcmp(cf.rotation_method, SSB4D_CALFILE_ROT_UNDETERMINED);
    c->rotation_sigma_deg = cf.rotation_sigma_deg;
    if (cf.flip_stated) {
        c->flip = cf.geom.flip;
        snprintf(c->flip_from, sizeof c->flip_from, "calibration file");
    }
    c->bf_radius_px = cf.bf_radius_px;
    c->pixel_model_S = ssb_calfile_edge_pixel_S(&cf);
    for (int i = 0; i < 2; i++) {
        c->scan_step_A[i] = cf.geom.scan_step_A[i];
        c->det_sampling_mrad[i] = cf.geom.det_sampling_mrad[i];
        c->centre_px[i] = cf.geom.centre_px[i];
    }
    if (cf.has_ab) {
        c->ab = cf.ab;
        c->has_ab = 1;
        snprintf(c->ab_from, sizeof c->ab_from, "calibration file");
    }
    if (cf.has_thick) {
        c->thick = cf.thick;
        c->has_thick = 1;
    }
    snprintf(c->calibration_identity, sizeof c->calibration_identity, "%s", cf.data_identity);
    ssb_calfile_free(&cf);
    return SSB4D_OK;
}

ssb4d_status ssb4d_values_read(const char *data_path, const char *sidecar_path, const char *calibration_path,
                               ssb4d_values *out, ssb4d_err *err)
{
    if (!out)
        return ssb_fail(err, SSB4D_EINVAL, "ssb4d_values_read needs an output");
    ssb4d_values_unset(out);
    ssb4d_values layer;
    ssb4d_status st;
    if (data_path) {
        ssb4d_values_unset(&layer);
        if ((st = read_qem(data_path, &layer, err)))
            return st;
        ssb4d_values_layer(out, &layer);
    }
    char side[sizeof out->sidecar_path];
    if (!sidecar_path && ssb_sidecar_find(data_path, side, sizeof side))
        sidecar_path = side;
    if (sidecar_path) {
        if ((st = ssb_sidecar_read(sidecar_path, &layer, err)))
            return st;
        ssb4d_values_layer(out, &layer);
        snprintf(out->sidecar_path, sizeof out->sidecar_path, "%s", sidecar_path);
    }
    if (calibration_path) {
        ssb4d_values_unset(&layer);
        if ((st = read_calibration_file(calibration_path, &layer, err)))
            return st;
        ssb4d_values_layer(out, &layer);
        memcpy(out->calibration_identity, layer.calibration_identity, sizeof out->calibration_identity);
    }
    return SSB4D_OK;
}

ssb4d_status ssb4d_values_rotation_from(const char *path, ssb4d_values *out, ssb4d_err *err)
{
    if (!path || !out)
        return ssb_fail(err, SSB4D_EINVAL, "ssb4d_values_rotation_from needs a file and an output");
    ssb4d_status st = ssb4d_values_read(NULL, NULL, path, out, err);
    if (st)
        return st;
    /* Only a rotation whose 180° branch is settled will do: one a fit found, or one stated. A
     * centre-of-mass measurement would carry the problem, not the answer. */
    if (isnan(out->rotation_deg) || out->rotation_measured)
        return ssb_fail(err, SSB4D_EINVAL,
                        "%s holds no settled rotation (%s): carry one ssb4d fit found on a thin area of an "
                        "acquisition at the same settings, or state the rotation",
                        path, isnan(out->rotation_deg) ? "none is stated"
                                                       : "it was measured from the centre of mass, its 180 deg "
                                                         "branch open");
    return SSB4D_OK;
}
