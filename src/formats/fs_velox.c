/* fs_velox.c — Thermo Fisher Velox EMD files (HDF5). Velox keeps each image (or image stack)
 * as /Data/Image/<uuid>/Data with the frame axis LAST: (rows, cols, frames), beside
 * /Data/Image/<uuid>/Metadata, uint8 JSON text with one column per frame, and writes the file's
 * format in /Version (JSON: {"format": "Velox", "version": ...}). Sources: rosettasciio
 * rsciio/emd/_emd_velox.py (frames last, rolled to the front on reading; metadata column 0;
 * Optics.AccelerationVoltage in V, Optics.CameraLength in m, BinaryResult.PixelSize with
 * PixelUnitX) and its is_EMD_Velox check (Version format "Velox" or "DevelopersKit"); ncempy
 * io/emdVelox.py (Data/Image groups, Metadata[:, 0] up to the padding, Scan.DwellTime).
 *
 * A 4D-STEM acquisition is a stack of diffraction frames (det_rows, det_cols, N) whose N frames
 * are the scan positions in row-major order; the scan shape comes from --scan-shape, else the
 * frames' metadata (Scan.ScanSize width x height), else a square N. No public description of a
 * rank-4 Velox layout exists, so rank-4 datasets are refused by name (--format hdf5 reads a
 * rank-4 (scan, scan, det, det) dataset as it is). Frames are read as hyperslabs of whole frames
 * (det_rows, det_cols, k) into a scratch block and transposed to frame-major order. */
#include "formats/fs_internal.h"

#include "common/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_STACKS 64
#define TEXT_MAX_BYTES ((size_t)16 << 20) /* a Metadata column or /Version beyond this is not text */
#define BLOCK_BYTES ((size_t)8 << 20)     /* scratch block: frames read per hyperslab */
#define CHUNK_BLOCK_MAX ((size_t)64 << 20)
#define CACHE_MAX_BYTES ((size_t)256 << 20)
#define META_VALUES_MAX 400

typedef struct {
    hid_t file, dset, fspace;
    hsize_t dims[3];   /* det_rows, det_cols, frames (as stored) */
    size_t block;      /* frames per hyperslab read */
    uint32_t *scratch; /* one block as stored, (row, col, frame), 4 bytes a value */
} velox_reader;

static void velox_close(void *impl)
{
    velox_reader *r = impl;
    if (!r)
        return;
    if (r->fspace >= 0)
        H5Sclose(r->fspace);
    if (r->dset >= 0)
        H5Dclose(r->dset);
    if (r->file >= 0)
        H5Fclose(r->file);
    free(r->scratch);
    free(r);
}

/* Frames [p0, p0+n) as 4-byte values (mtype) in frame-major order: sub-blocks aligned to the
 * block size, each one hyperslab (all rows, all cols, k frames) then a transpose. */
static ssb4d_status read_frames(framesrc *s, size_t p0, size_t n, hid_t mtype, uint32_t *out,
                                ssb4d_err *err)
{
    velox_reader *r = s->impl;
    fs_h5_quiet(); /* per thread in a thread-safe libhdf5: the reading thread may be a new one */
    size_t R = (size_t)r->dims[0], C = (size_t)r->dims[1], P = R * C;
    for (size_t f = p0; f < p0 + n;) {
        size_t end = (f / r->block + 1) * r->block;
        size_t k = (end < p0 + n ? end : p0 + n) - f;
        hsize_t start[3] = {0, 0, f}, count[3] = {R, C, k};
        /* the memory space has the selection's shape: libhdf5 then copies runs, not elements */
        hid_t mspace = H5Screate_simple(3, count, NULL);
        herr_t e = mspace < 0 ? -1 : H5Sselect_hyperslab(r->fspace, H5S_SELECT_SET, start, NULL, count, NULL);
        if (e >= 0)
            e = H5Dread(r->dset, mtype, mspace, r->fspace, H5P_DEFAULT, r->scratch);
        if (mspace >= 0)
            H5Sclose(mspace);
        if (e < 0)
            return fs_h5_fail(err, SSB4D_EIO, "%s: reading frames %zu..%zu failed", s->path, f, f + k);
        /* scratch[(row * C + col) * k + j] -> out[((f - p0 + j) * R + row) * C + col] */
        uint32_t *dst = out + (f - p0) * P;
        const uint32_t *src = r->scratch;
        for (size_t px = 0; px < P; px++, src += k)
            for (size_t j = 0; j < k; j++)
                dst[j * P + px] = src[j];
        f += k;
    }
    return SSB4D_OK;
}

static ssb4d_status velox_read(framesrc *s, size_t p0, size_t n, uint32_t *out, ssb4d_err *err)
{
    ssb4d_status st = read_frames(s, p0, n, s->dtype_signed ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32,
                                  out, err);
    if (!st && s->dtype_signed) {
        size_t m = n * s->shape[2] * s->shape[3], bad = fs_first_negative(out, m);
        if (bad != (size_t)-1)
            return fs_negative_error(s, p0, bad, (int32_t)out[bad], err);
    }
    return st;
}

static ssb4d_status velox_read_f32(framesrc *s, size_t p0, size_t n, float *out, ssb4d_err *err)
{
    return read_frames(s, p0, n, H5T_NATIVE_FLOAT, (uint32_t *)(void *)out, err);
}

static const framesrc_ops velox_ops = {velox_read, velox_close, NULL};
static const framesrc_ops velox_f32_ops = {NULL, velox_close, velox_read_f32};

/* ---------------------------------------------------------------------------------------- */
/* Text datasets: /Version and the per-frame Metadata                                         */

/* The text of a dataset, up to its first NUL (caller frees): the first element of a string
 * dataset (fixed or variable length), or the bytes of a uint8 / int8 one (column 0 of a rank-2
 * array: Velox's Metadata holds one JSON text per frame, one per column). NULL otherwise. */
static char *read_text(hid_t loc, const char *path)
{
    if (!fs_h5_exists(loc, path))
        return NULL;
    char *out = NULL;
    hid_t d = H5Dopen2(loc, path, H5P_DEFAULT);
    hid_t t = d < 0 ? -1 : H5Dget_type(d), sp = d < 0 ? -1 : H5Dget_space(d), mt = -1, ms = -1;
    int rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    hsize_t dims[2] = {0, 0}, start[2] = {0, 0}, count[2] = {1, 1};
    if (t < 0 || rank < 0 || rank > 2 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0)
        goto done;
    for (int i = 0; i < rank; i++)
        if (dims[i] == 0)
            goto done;
    H5T_class_t cls = H5Tget_class(t);
    if (cls == H5T_STRING) {
        /* the first element only */
        if (rank > 0 && H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
            goto done;
        ms = H5Screate(H5S_SCALAR);
        mt = H5Tcopy(H5T_C_S1);
        if (H5Tis_variable_str(t) > 0) {
            char *v = NULL;
            if (H5Tset_size(mt, H5T_VARIABLE) >= 0 &&
                H5Dread(d, mt, ms, rank > 0 ? sp : H5S_ALL, H5P_DEFAULT, &v) >= 0 && v) {
                out = strndup(v, TEXT_MAX_BYTES);
                H5free_memory(v);
            }
        } else {
            size_t len = H5Tget_size(t);
            char *v = len && len <= TEXT_MAX_BYTES ? calloc(1, len + 1) : NULL;
            /* NULLPAD: a text filling the whole field keeps its last byte (calloc's NUL ends it) */
            if (v && H5Tset_size(mt, len) >= 0 && H5Tset_strpad(mt, H5T_STR_NULLPAD) >= 0 &&
                H5Dread(d, mt, ms, rank > 0 ? sp : H5S_ALL, H5P_DEFAULT, v) >= 0)
                out = v, v = NULL;
            free(v);
        }
    } else if (cls == H5T_INTEGER && H5Tget_size(t) == 1 && rank >= 1) {
        size_t len = (size_t)dims[0];
        if (len > TEXT_MAX_BYTES)
            goto done;
        count[0] = dims[0];
        hsize_t m = dims[0];
        ms = H5Screate_simple(1, &m, NULL);
        char *v = calloc(1, len + 1);
        if (v && ms >= 0 && H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
            H5Dread(d, H5T_NATIVE_UCHAR, ms, sp, H5P_DEFAULT, v) >= 0)
            out = v, v = NULL;
        free(v);
    }
done:
    if (ms >= 0)
        H5Sclose(ms);
    if (mt >= 0)
        H5Tclose(mt);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    H5Eclear2(H5E_DEFAULT);
    return out;
}

/* The JSON of /Version: {"format": "Velox" | "DevelopersKit", "version": ...}, or NULL. */
static cJSON *version_json(hid_t file)
{
    char *text = read_text(file, "/Version");
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "format");
    if (!cJSON_IsString(f) || (strcmp(f->valuestring, "Velox") && strcmp(f->valuestring, "DevelopersKit"))) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int fs_velox_detect(const char *path)
{
    fs_h5_quiet();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    cJSON *v = fs_h5_exists(f, "/Data") ? version_json(f) : NULL;
    int yes = v != NULL;
    cJSON_Delete(v);
    H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
    return yes;
}

/* ---------------------------------------------------------------------------------------- */
/* The frames' metadata (JSON; Velox writes numbers as text)                                  */

static const cJSON *jget(const cJSON *o, const char *a, const char *b, const char *c)
{
    const char *keys[3] = {a, b, c};
    for (int i = 0; i < 3 && keys[i] && o; i++)
        o = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
    return o;
}

/* A finite number written as a number or as text. */
static int jnum(const cJSON *v, double *x)
{
    if (cJSON_IsNumber(v)) {
        *x = v->valuedouble;
        return isfinite(*x);
    }
    if (!cJSON_IsString(v) || !v->valuestring)
        return 0;
    char *end;
    *x = strtod(v->valuestring, &end);
    return end != v->valuestring && !*end && isfinite(*x);
}

static int jpos(const cJSON *v, double *x) { return jnum(v, x) && *x > 0; }

/* Every scalar under it, as "velox/A/B/..." (at most *budget values). */
static void flatten(framesrc *s, const char *key, const cJSON *it, int *budget)
{
    if (*budget <= 0)
        return;
    if (cJSON_IsObject(it) || cJSON_IsArray(it)) {
        int i = 0;
        for (const cJSON *c = it->child; c; c = c->next, i++) {
            char sub[256];
            if (cJSON_IsArray(it) || !c->string)
                snprintf(sub, sizeof sub, "%.200s/%d", key, i);
            else
                snprintf(sub, sizeof sub, "%.200s/%.50s", key, c->string);
            flatten(s, sub, c, budget);
        }
        return;
    }
    (*budget)--;
    if (cJSON_IsString(it)) {
        char v[301];
        snprintf(v, sizeof v, "%s", it->valuestring);
        fs_meta_string(s, key, v);
    } else if (cJSON_IsNumber(it)) {
        fs_meta_number(s, key, it->valuedouble);
    } else if (cJSON_IsBool(it)) {
        fs_meta_string(s, key, cJSON_IsTrue(it) ? "true" : "false");
    }
}

/* A pixel size in metres (kind 1) or in 1/m (kind 2) from a value and its unit; 0 = neither. */
static int pixel_in_m(double v, const char *unit, double *out)
{
    static const struct { const char *u; double f; int kind; } units[] = {
        {"m", 1.0, 1}, {"nm", 1e-9, 1}, {"pm", 1e-12, 1}, {"um", 1e-6, 1}, {"\xc2\xb5m", 1e-6, 1},
        {"1/m", 1.0, 2}, {"1/nm", 1e9, 2}, {"1/pm", 1e12, 2},
    };
    for (size_t i = 0; unit && i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(unit, units[i].u)) {
            *out = v * units[i].f;
            return units[i].kind;
        }
    return 0;
}

/* Electron wavelength (m) at kv kilovolts, relativistic (CODATA 2018). */
static double wavelength_m(double kv)
{
    const double h = 6.62607015e-34, c = 299792458.0, e = 1.602176634e-19, m = 9.1093837015e-31;
    double V = kv * 1e3;
    return h / sqrt(2.0 * m * e * V * (1.0 + e * V / (2.0 * m * c * c)));
}

/* Calibration and metadata from the JSON of the stack's first frame. */
static void use_metadata(framesrc *s, const cJSON *md)
{
    double v;
    if (jpos(jget(md, "Optics", "AccelerationVoltage", NULL), &v))
        s->cal.kv = v / 1e3;
    if (jpos(jget(md, "Optics", "CameraLength", NULL), &v))
        s->cal.camera_length_mm = v * 1e3;
    if (jpos(jget(md, "Optics", "BeamConvergence", NULL), &v) && v < 0.5) /* radians */
        s->cal.semiangle_mrad = v * 1e3;
    if (jpos(jget(md, "Scan", "DwellTime", NULL), &v))
        s->cal.dwell_us = v * 1e6;
    /* the frames' pixel: in metres it is a scan pixel (STEM image), in 1/m a diffraction pixel */
    const cJSON *br = jget(md, "BinaryResult", NULL, NULL);
    double w = 0, h = 0, wm = 0, hm = 0;
    const cJSON *ux = jget(br, "PixelUnitX", NULL, NULL), *uy = jget(br, "PixelUnitY", NULL, NULL);
    if (jpos(jget(br, "PixelSize", "width", NULL), &w) && jpos(jget(br, "PixelSize", "height", NULL), &h) &&
        cJSON_IsString(ux)) {
        const char *uyt = cJSON_IsString(uy) ? uy->valuestring : ux->valuestring;
        int kx = pixel_in_m(w, ux->valuestring, &wm), ky = pixel_in_m(h, uyt, &hm);
        if (kx == 1 && ky == 1) {
            s->cal.scan_step_A[0] = hm * 1e10; /* index 0: along rows (height) */
            s->cal.scan_step_A[1] = wm * 1e10;
        } else if (kx == 2 && ky == 2 && s->cal.kv > 0) {
            double lambda = wavelength_m(s->cal.kv);
            s->cal.det_sampling_mrad[0] = hm * lambda * 1e3;
            s->cal.det_sampling_mrad[1] = wm * lambda * 1e3;
        }
    }
    /* the sections that describe the acquisition, and the detector that took it */
    static const char *const sections[] = {"Optics", "Scan", "BinaryResult", "Acquisition",
                                           "Instrument", "Stage", "Sample"};
    int budget = META_VALUES_MAX;
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        const cJSON *sec = jget(md, sections[i], NULL, NULL);
        if (sec) {
            char key[64];
            snprintf(key, sizeof key, "velox/%s", sections[i]);
            flatten(s, key, sec, &budget);
        }
    }
    if (jnum(jget(br, "DetectorIndex", NULL, NULL), &v) && v >= 0 && v < 1000) {
        char name[48], key[64];
        snprintf(name, sizeof name, "Detector-%d", (int)v);
        snprintf(key, sizeof key, "velox/Detectors/%s", name);
        const cJSON *det = jget(md, "Detectors", name, NULL);
        if (det)
            flatten(s, key, det, &budget);
    }
}

/* The scan size the metadata records (Scan.ScanSize width x height), 0 when none. */
static void scan_size(const cJSON *md, size_t *rows, size_t *cols)
{
    double w, h;
    *rows = *cols = 0;
    if (jpos(jget(md, "Scan", "ScanSize", "width"), &w) && jpos(jget(md, "Scan", "ScanSize", "height"), &h) &&
        w < 1e6 && h < 1e6 && w == floor(w) && h == floor(h)) {
        *rows = (size_t)h;
        *cols = (size_t)w;
    }
}

/* The parsed JSON of a stack's metadata (group: /Data/Image/<uuid>), or NULL. */
static cJSON *stack_metadata(hid_t file, const char *group)
{
    char p[700];
    snprintf(p, sizeof p, "%s/Metadata", group);
    char *text = read_text(file, p);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

/* ---------------------------------------------------------------------------------------- */
/* Which dataset                                                                              */

typedef struct {
    char path[300];
    int rank;
    hsize_t dims[4];
    int stack;        /* rank 3 with two frames or more */
} item;

/* Appends ", text" to a list of at most cap bytes (ellipsis when it does not fit). */
static void list_add(char *list, size_t cap, const char *text)
{
    size_t n = strlen(list);
    if (n + strlen(text) + 8 < cap)
        snprintf(list + n, cap - n, "%s%s", n ? ", " : "", text);
    else if (n + 5 < cap && !strstr(list, "..."))
        snprintf(list + n, cap - n, ", ...");
}

static void describe(const item *it, char *buf, size_t n)
{
    int k = snprintf(buf, n, "%s (", it->path);
    for (int i = 0; i < it->rank && k > 0 && (size_t)k < n; i++)
        k += snprintf(buf + k, n - (size_t)k, "%s%llu", i ? "x" : "", (unsigned long long)it->dims[i]);
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, ")");
}

/* The dataset to read: the one stack of frames under /Data/Image, or among several the one
 * whose frame count matches its own metadata's scan size; otherwise a refusal naming them. */
static ssb4d_status discover(hid_t file, const char *path, char *chosen, size_t cap, int *by_scan,
                             ssb4d_err *err)
{
    *by_scan = 0;
    if (!fs_h5_exists(file, "/Data/Image"))
        return ssb_fail(err, SSB4D_ENOTFOUND, "%s has no /Data/Image group: this Velox file holds "
                        "no images or frame stacks (spectra are not read)", path);
    hid_t g = H5Gopen2(file, "/Data/Image", H5P_DEFAULT);
    H5G_info_t gi;
    if (g < 0 || H5Gget_info(g, &gi) < 0) {
        if (g >= 0)
            H5Gclose(g);
        return fs_h5_fail(err, SSB4D_EFORMAT, "%s: cannot list /Data/Image", path);
    }
    item *items = calloc(MAX_STACKS, sizeof *items);
    if (!items) {
        H5Gclose(g);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
    }
    size_t n = 0, stacks = 0, more = 0;
    for (hsize_t i = 0; i < gi.nlinks; i++) {
        char name[200];
        ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
        if (len <= 0 || (size_t)len >= sizeof name)
            continue;
        if (n == MAX_STACKS) {
            more++;
            continue;
        }
        item *it = &items[n];
        snprintf(it->path, sizeof it->path, "/Data/Image/%s/Data", name);
        if (!fs_h5_exists(file, it->path))
            continue;
        hid_t d = H5Dopen2(file, it->path, H5P_DEFAULT);
        hid_t sp = d < 0 ? -1 : H5Dget_space(d);
        it->rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
        if (it->rank >= 1 && it->rank <= 4) {
            H5Sget_simple_extent_dims(sp, it->dims, NULL);
            it->stack = it->rank == 3 && it->dims[2] >= 2;
            stacks += (size_t)it->stack;
            n++;
        }
        if (sp >= 0)
            H5Sclose(sp);
        if (d >= 0)
            H5Dclose(d);
    }
    H5Gclose(g);
    H5Eclear2(H5E_DEFAULT);
    ssb4d_status st = SSB4D_OK;
    char list[360] = "", one[340];
    if (stacks == 1) {
        for (size_t i = 0; i < n; i++)
            if (items[i].stack)
                snprintf(chosen, cap, "%s", items[i].path);
    } else if (stacks == 0) {
        for (size_t i = 0; i < n; i++) {
            describe(&items[i], one, sizeof one);
            list_add(list, sizeof list, one);
        }
        st = ssb_fail(err, SSB4D_ENOTFOUND, "%s holds no stack of frames under /Data/Image (a "
                      "(rows, cols, frames) dataset of 2 frames or more)%s%s%s", path,
                      n ? "; found: " : "", list, more ? ", and more" : "");
    } else {
        /* several: the one whose frame count is its own scan size, when exactly one is */
        size_t match = 0, pick = 0;
        for (size_t i = 0; i < n; i++) {
            if (!items[i].stack)
                continue;
            char grp[300];
            snprintf(grp, sizeof grp, "%s", items[i].path);
            *strrchr(grp, '/') = '\0';
            cJSON *md = stack_metadata(file, grp);
            size_t r, c;
            scan_size(md, &r, &c);
            cJSON_Delete(md);
            if (r && r * c == items[i].dims[2]) {
                match++;
                pick = i;
            }
            describe(&items[i], one, sizeof one);
            list_add(list, sizeof list, one);
        }
        if (match == 1) {
            snprintf(chosen, cap, "%s", items[pick].path);
            *by_scan = 1;
        } else {
            st = ssb_fail(err, SSB4D_EINVAL, "%s holds several stacks of frames (%s%s): choose one "
                          "with --dataset /Data/Image/<uuid>", path, list, more ? ", and more" : "");
        }
    }
    free(items);
    return st;
}

/* --dataset: a dataset path, or a group holding "Data" (/Data/Image/<uuid>). */
static ssb4d_status resolve(hid_t file, const char *path, const char *want, char *chosen, size_t cap,
                            ssb4d_err *err)
{
    if (!fs_h5_exists(file, want))
        return ssb_fail(err, SSB4D_ENOTFOUND, "%s has no dataset or group '%s'", path, want);
    hid_t obj = H5Oopen(file, want, H5P_DEFAULT);
    H5I_type_t type = obj < 0 ? H5I_BADID : H5Iget_type(obj);
    if (obj >= 0)
        H5Oclose(obj);
    if (obj < 0)
        return fs_h5_fail(err, SSB4D_EFORMAT, "%s: cannot open '%s'", path, want);
    if (type == H5I_GROUP) {
        snprintf(chosen, cap, "%s/Data", want);
        if (!fs_h5_exists(file, chosen))
            return ssb_fail(err, SSB4D_ENOTFOUND, "%s: group '%s' holds no Data dataset", path, want);
    } else {
        snprintf(chosen, cap, "%s", want);
    }
    return SSB4D_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                    */

/* Frames per hyperslab read (a multiple of the chunk's frame depth when that fits) and an access
 * list whose chunk cache holds the chunks one block touches. */
static hid_t plan_access(hid_t dcpl, const hsize_t *dims, size_t *block)
{
    size_t P = (size_t)(dims[0] * dims[1]), fb = P * 4;
    size_t k = BLOCK_BYTES / fb;
    if (k < 1)
        k = 1;
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    hsize_t cd[3] = {1, 1, 1};
    if (H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 3, cd) == 3) {
        size_t cf = (size_t)cd[2];
        if (cf > 1 && cf * fb <= CHUNK_BLOCK_MAX)
            k = k < cf ? cf : k / cf * cf;
        /* the chunks across one layer of frames, kept while a block reads them */
        size_t across = (size_t)(((dims[0] + cd[0] - 1) / cd[0]) * ((dims[1] + cd[1] - 1) / cd[1]));
        size_t chunk = (size_t)(cd[0] * cd[1] * cd[2]) * 4, bytes = chunk * across + ((size_t)1 << 20);
        if (bytes > CACHE_MAX_BYTES)
            bytes = CACHE_MAX_BYTES;
        if (dapl >= 0)
            H5Pset_chunk_cache(dapl, across * 10 + 521, bytes, 1.0);
    }
    if (k > (size_t)dims[2])
        k = (size_t)dims[2];
    *block = k;
    return dapl;
}

ssb4d_status fs_velox_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    fs_h5_quiet();
    velox_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
    r->file = r->dset = r->fspace = -1;
    hid_t d = -1, t = -1, sp = -1, dcpl = -1, dapl = -1;
    cJSON *version = NULL, *md = NULL;
    ssb4d_status st = SSB4D_OK;
    char name[600], what[900];
    int by_scan = 0;
    if ((r->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        st = fs_h5_fail(err, SSB4D_EIO, "cannot open %s as HDF5", path);
        goto done;
    }
    version = version_json(r->file);
    if (!fs_h5_exists(r->file, "/Data")) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s has no /Data group: not a Velox EMD file", path);
        goto done;
    }
    if (o && o->dataset && *o->dataset)
        st = resolve(r->file, path, o->dataset, name, sizeof name, err);
    else
        st = discover(r->file, path, name, sizeof name, &by_scan, err);
    if (st)
        goto done;
    snprintf(what, sizeof what, "%s:%s", path, name);
    if ((d = H5Dopen2(r->file, name, H5P_DEFAULT)) < 0) {
        st = fs_h5_fail(err, SSB4D_EFORMAT, "%s is not a dataset", what);
        goto done;
    }
    t = H5Dget_type(d);
    sp = H5Dget_space(d);
    dcpl = H5Dget_create_plist(d);
    if (t < 0 || sp < 0 || dcpl < 0) {
        st = fs_h5_fail(err, SSB4D_EFORMAT, "%s: cannot read its type and shape", what);
        goto done;
    }
    int rank = H5Sget_simple_extent_ndims(sp);
    if (rank == 4) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s has rank 4: Velox writes frame stacks as (rows, cols, "
                      "frames) and no rank-4 Velox layout is documented; if its axes are (scan_row, "
                      "scan_col, det_row, det_col) read it with --format hdf5 --dataset %s", what, name);
        goto done;
    }
    if (rank != 3) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s has rank %d, not a stack of frames (rows, cols, "
                      "frames)", what, rank);
        goto done;
    }
    H5Sget_simple_extent_dims(sp, r->dims, NULL);
    H5T_class_t cls = H5Tget_class(t);
    size_t elem = H5Tget_size(t);
    int is_signed = 0, is_float = 0;
    if (cls == H5T_COMPOUND) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s holds complex (real, imaginary) values, a Velox FFT "
                      "or DPC result, not frames of counts", what);
        goto done;
    } else if (cls == H5T_FLOAT) {
        if (elem != 4) {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s holds %zu-byte floating point values: only "
                          "float32 is read (convert it, or to integer counts)", what, elem);
            goto done;
        }
        is_float = 1;
    } else if (cls == H5T_INTEGER) {
        if (elem != 1 && elem != 2 && elem != 4) {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s holds %zu-byte integers: narrow them to uint32 (or "
                          "smaller) counts first", what, elem);
            goto done;
        }
        is_signed = H5Tget_sign(t) == H5T_SGN_2;
    } else {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s holds neither integers nor float32 values", what);
        goto done;
    }
    /* the stack's own metadata: the JSON of its first frame */
    char group[600];
    snprintf(group, sizeof group, "%s", name);
    char *slash = strrchr(group, '/');
    if (slash && slash != group)
        *slash = '\0';
    else
        snprintf(group, sizeof group, "/");
    md = stack_metadata(r->file, group);
    size_t hr = 0, hc = 0, shape[4];
    scan_size(md, &hr, &hc);
    const char *how = "file";
    if ((st = fs_scan_shape((size_t)r->dims[2], o, hr, hc, "its Velox metadata (Scan.ScanSize)", what,
                            shape, &how, err)))
        goto done;
    shape[2] = (size_t)r->dims[0];
    shape[3] = (size_t)r->dims[1];
    if ((st = fs_check_shape(shape, what, err)) ||
        (st = fs_check_det_opts(o, shape[2], shape[3], what, err)) ||
        (st = fs_h5_check_filters(dcpl, what, err)))
        goto done;
    dapl = plan_access(dcpl, r->dims, &r->block);
    H5Dclose(d);
    d = -1;
    if ((r->dset = H5Dopen2(r->file, name, dapl >= 0 ? dapl : H5P_DEFAULT)) < 0 ||
        (r->fspace = H5Dget_space(r->dset)) < 0) {
        st = fs_h5_fail(err, SSB4D_EIO, "%s: cannot reopen the dataset", what);
        goto done;
    }
    if (!(r->scratch = malloc(r->block * shape[2] * shape[3] * 4))) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", what);
        goto done;
    }
    memcpy(s->shape, shape, sizeof shape);
    s->dtype_bytes = (int)elem;
    s->dtype_signed = is_signed;
    s->is_float = is_float;
    s->format_name = "thermo-velox-emd";
    fs_meta_string(s, "velox_dataset", name);
    if (by_scan)
        fs_meta_string(s, "velox_dataset_choice", "the only stack whose frame count matches its "
                       "Scan.ScanSize");
    const cJSON *vv = jget(version, "version", NULL, NULL);
    if (cJSON_IsString(vv))
        fs_meta_string(s, "velox_file_version", vv->valuestring);
    else if (cJSON_IsNumber(vv))
        fs_meta_number(s, "velox_file_version", vv->valuedouble);
    fs_meta_string(s, "scan_shape_source", how);
    if (!md)
        fs_meta_string(s, "velox_metadata", "absent or not JSON");
    use_metadata(s, md);
    s->ops = is_float ? &velox_f32_ops : &velox_ops;
    s->impl = r;
    r = NULL;
done:
    cJSON_Delete(md);
    cJSON_Delete(version);
    if (dapl >= 0)
        H5Pclose(dapl);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    velox_close(r);
    H5Eclear2(H5E_DEFAULT);
    return st;
}
