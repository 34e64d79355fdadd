/* fs_hdf5.c — a 4-D integer dataset in a generic HDF5 file: named by the user, or the one found
 * by walking the file. EMD 1.0 (a group with attribute emd_group_type holding "data") and
 * py4DSTEM / emdfile datacubes (".../datacube/data") are found by the same walk and win over
 * other candidates. A block of frames is one hyperslab selection and one H5Dread into uint32
 * (libhdf5 widens the type); the chunk cache holds the chunks that cover one frame. */
#include "formats/fs_internal.h"

#include "common/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_CANDIDATES 64
#define CACHE_MAX_BYTES ((size_t)64 << 20)

typedef struct {
    hid_t file, dset, fspace;
    int rank;        /* 4: (rows, cols, det_rows, det_cols); 3: (frames, det_rows, det_cols) */
    hsize_t dims[4];
} h5_reader;

static void h5_close(void *impl)
{
    h5_reader *r = impl;
    if (!r)
        return;
    if (r->fspace >= 0)
        H5Sclose(r->fspace);
    if (r->dset >= 0)
        H5Dclose(r->dset);
    if (r->file >= 0)
        H5Fclose(r->file);
    free(r);
}

/* Reads flat scan positions [p0, p0+n) into out (mtype elements): one simple hyperslab per run of
 * positions within a scan row (a stack: one for all), each read into a memory space of the
 * selection's own shape. libhdf5 then copies chunk by chunk; a 1-D memory space against a union
 * of 4-D hyperslabs made it walk element by element (17 MB/s on a file chunked by frame). */
static herr_t read_positions(const h5_reader *r, hid_t mtype, size_t p0, size_t n, void *out, size_t elem)
{
    if (r->rank == 3) {
        hsize_t start[3] = {p0, 0, 0}, count[3] = {n, r->dims[1], r->dims[2]};
        hid_t ms = H5Screate_simple(3, count, NULL);
        herr_t e = ms < 0 ? -1 : H5Sselect_hyperslab(r->fspace, H5S_SELECT_SET, start, NULL, count, NULL);
        if (e >= 0)
            e = H5Dread(r->dset, mtype, ms, r->fspace, H5P_DEFAULT, out);
        if (ms >= 0)
            H5Sclose(ms);
        return e;
    }
    hsize_t C = r->dims[1], D1 = r->dims[2], D2 = r->dims[3];
    uint8_t *o = out;
    for (size_t done = 0; done < n;) {
        hsize_t p = p0 + done, row = p / C, col = p % C;
        hsize_t run = C - col < n - done ? C - col : n - done;
        hsize_t rows = 1;
        if (col == 0 && run == C) /* whole rows at once while they last */
            rows = (n - done) / C, run = C;
        hsize_t start[4] = {row, col, 0, 0}, count[4] = {rows, run, D1, D2};
        hid_t ms = H5Screate_simple(4, count, NULL);
        herr_t e = ms < 0 ? -1 : H5Sselect_hyperslab(r->fspace, H5S_SELECT_SET, start, NULL, count, NULL);
        if (e >= 0)
            e = H5Dread(r->dset, mtype, ms, r->fspace, H5P_DEFAULT, o);
        if (ms >= 0)
            H5Sclose(ms);
        if (e < 0)
            return e;
        size_t k = (size_t)(rows * run);
        o += k * (size_t)(D1 * D2) * elem;
        done += k;
    }
    return 0;
}

static ssb4d_status h5_read(framesrc *s, size_t pos0, size_t npos, uint32_t *out, ssb4d_err *err)
{
    h5_reader *r = s->impl;
    fs_h5_quiet(); /* per thread in a thread-safe libhdf5: the reading thread may be a new one */
    size_t n = npos * s->shape[2] * s->shape[3];
    hid_t mtype = s->dtype_signed ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32;
    if (read_positions(r, mtype, pos0, npos, out, sizeof *out) < 0)
        return fs_h5_fail(err, SSB4D_EIO, "%s: reading frames %zu..%zu failed", s->path, pos0,
                          pos0 + npos);
    if (s->dtype_signed) {
        size_t bad = fs_first_negative(out, n);
        if (bad != (size_t)-1)
            return fs_negative_error(s, pos0, bad, (int32_t)out[bad], err);
    }
    return SSB4D_OK;
}

/* float32 datasets (SPEC §4: read as they are): libhdf5 converts byte order. */
static ssb4d_status h5_read_f32(framesrc *s, size_t pos0, size_t npos, float *out, ssb4d_err *err)
{
    h5_reader *r = s->impl;
    fs_h5_quiet();
    if (read_positions(r, H5T_NATIVE_FLOAT, pos0, npos, out, sizeof *out) < 0)
        return fs_h5_fail(err, SSB4D_EIO, "%s: reading frames %zu..%zu failed", s->path, pos0,
                          pos0 + npos);
    return SSB4D_OK;
}

static const framesrc_ops h5_ops = {h5_read, h5_close, NULL};
static const framesrc_ops h5_f32_ops = {NULL, h5_close, h5_read_f32};

/* ---------------------------------------------------------------------------------------- */
/* Discovery                                                                                  */

typedef struct {
    hid_t file;
    char *ints[MAX_CANDIDATES];   /* rank-4 integer datasets */
    int preferred[MAX_CANDIDATES];
    size_t n_ints, n_more;
    char *floats[8];              /* rank-4 floating-point datasets (for the message) */
    size_t n_floats;
} walk;

/* An EMD / py4DSTEM datacube: ".../data" in a group that carries emd_group_type or a
 * DataCube class, or whose path names a datacube. */
static int is_datacube(hid_t file, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (strcmp(base, "data") != 0)
        return 0;
    size_t plen = slash ? (size_t)(slash - path) : 0;
    char parent[512];
    if (plen >= sizeof parent)
        return 0;
    memcpy(parent, path, plen);
    parent[plen] = '\0';
    const char *pp = plen ? parent : ".";
    double v;
    char cls[64];
    if (fs_h5_attr_number(file, pp, "emd_group_type", &v) ||
        fs_h5_attr_string(file, pp, "emd_group_type", cls, sizeof cls))
        return 1;
    if (fs_h5_attr_string(file, pp, "python_class", cls, sizeof cls) && strstr(cls, "DataCube"))
        return 1;
    for (const char *c = path; (c = strstr(c, "datacube")); c++)
        if (c == path || c[-1] == '/')
            return 1;
    return 0;
}

#if H5_VERSION_GE(1, 12, 0)
static herr_t visit_cb(hid_t obj, const char *name, const H5O_info2_t *info, void *data)
#else
static herr_t visit_cb(hid_t obj, const char *name, const H5O_info_t *info, void *data)
#endif
{
    walk *w = data;
    if (info->type != H5O_TYPE_DATASET)
        return 0;
    hid_t d = H5Dopen2(obj, name, H5P_DEFAULT);
    if (d < 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
    int rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    H5T_class_t c = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    if (rank == 4 && (c == H5T_INTEGER || (c == H5T_FLOAT && H5Tget_size(t) == 4))) {
        if (w->n_ints < MAX_CANDIDATES) {
            char *p = malloc(strlen(name) + 2);
            if (p) {
                p[0] = '/';
                strcpy(p + 1, name);
                w->preferred[w->n_ints] = is_datacube(w->file, p);
                w->ints[w->n_ints++] = p;
            }
        } else {
            w->n_more++;
        }
    } else if (rank == 4 && c == H5T_FLOAT && w->n_floats < 8) { /* float64 and others */
        char *p = malloc(strlen(name) + 2);
        if (p) {
            p[0] = '/';
            strcpy(p + 1, name);
            w->floats[w->n_floats++] = p;
        }
    }
    if (t >= 0)
        H5Tclose(t);
    if (sp >= 0)
        H5Sclose(sp);
    H5Dclose(d);
    return 0;
}

static void walk_free(walk *w)
{
    for (size_t i = 0; i < w->n_ints; i++)
        free(w->ints[i]);
    for (size_t i = 0; i < w->n_floats; i++)
        free(w->floats[i]);
}

/* Appends ", name" to a list of at most cap bytes (ellipsis when it does not fit). */
static void list_add(char *list, size_t cap, const char *name)
{
    size_t n = strlen(list);
    if (n + strlen(name) + 8 < cap)
        snprintf(list + n, cap - n, "%s%s", n ? ", " : "", name);
    else if (n + 5 < cap && !strstr(list, "..."))
        snprintf(list + n, cap - n, ", ...");
}

static ssb4d_status discover(hid_t file, const char *path, char **chosen, ssb4d_err *err)
{
    walk w = {.file = file};
#if H5_VERSION_GE(1, 12, 0)
    herr_t e = H5Ovisit3(file, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &w, H5O_INFO_BASIC);
#else
    herr_t e = H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &w);
#endif
    if (e < 0) {
        walk_free(&w);
        return fs_h5_fail(err, SSB4D_EFORMAT, "%s: cannot walk the file's groups", path);
    }
    size_t n_pref = 0, pick = 0;
    for (size_t i = 0; i < w.n_ints; i++)
        if (w.preferred[i]) {
            n_pref++;
            pick = i;
        }
    ssb4d_status st = SSB4D_OK;
    char list[300] = "";
    if (n_pref == 1 || (n_pref == 0 && w.n_ints == 1 && !w.n_more)) {
        *chosen = w.ints[pick];
        w.ints[pick] = w.ints[--w.n_ints];
    } else if (w.n_ints == 0 && w.n_floats) {
        for (size_t i = 0; i < w.n_floats; i++)
            list_add(list, sizeof list, w.floats[i]);
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: the rank-4 dataset%s %s %s floating point of a width "
                      "other than float32: save it as float32 (ssb4d never quantises silently)", path,
                      w.n_floats > 1 ? "s" : "", list, w.n_floats > 1 ? "are" : "is");
    } else if (w.n_ints == 0) {
        st = ssb_fail(err, SSB4D_ENOTFOUND, "%s holds no rank-4 integer or float32 dataset (scan_row, "
                      "scan_col, det_row, det_col): name one with --dataset PATH%s", path,
                      fs_h5_exists(file, "/entry/data/data")
                            ? " (for a Dectris data file, open its *_master.h5 instead)" : "");
    } else {
        for (size_t i = 0; i < w.n_ints; i++)
            if (!n_pref || w.preferred[i])
                list_add(list, sizeof list, w.ints[i]);
        st = ssb_fail(err, SSB4D_EINVAL, "%s holds several rank-4 datasets (%s%s): choose "
                      "one with --dataset PATH", path, list, w.n_more ? ", and more" : "");
    }
    walk_free(&w);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                    */

/* Sets a chunk cache that holds every chunk a whole frame touches (at least one chunk): frames
 * are read in scan order, so a chunk spanning several frames is decompressed once. */
static hid_t dataset_access(hid_t dcpl, int rank, const hsize_t *dims, size_t elem)
{
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    hsize_t cd[4] = {1, 1, 1, 1};
    if (dapl < 0 || H5Pget_layout(dcpl) != H5D_CHUNKED || H5Pget_chunk(dcpl, rank, cd) != rank)
        return dapl;
    size_t chunk = elem, across = 1;
    for (int i = 0; i < rank; i++)
        chunk *= cd[i];
    for (int i = rank - 2; i < rank; i++)
        across *= (dims[i] + cd[i] - 1) / cd[i];
    size_t bytes = chunk * across;
    if (bytes > CACHE_MAX_BYTES)
        bytes = chunk > CACHE_MAX_BYTES ? chunk : CACHE_MAX_BYTES;
    bytes += (size_t)1 << 20;
    size_t slots = across * 10 + 1; /* the guide: ~10x the number of cached chunks, odd */
    if (slots < 521)
        slots = 521;
    H5Pset_chunk_cache(dapl, slots, bytes, 1.0);
    return dapl;
}

/* A calibration value stored as an attribute of grp or as a scalar dataset in it. */
static int cal_number(hid_t file, const char *grp, const char *key, double *v)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", grp, key);
    return (fs_h5_attr_number(file, grp, key, v) || fs_h5_number(file, p, v, NULL, 0)) && *v > 0 &&
           isfinite(*v);
}

/* The same for a text value (units): py4DSTEM / emdfile store every metadata value, text too, as
 * a dataset (R_pixel_units = "A"); older writers as an attribute. */
static int cal_text(hid_t file, const char *grp, const char *key, char *buf, size_t n)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", grp, key);
    return fs_h5_attr_string(file, grp, key, buf, n) || fs_h5_string(file, p, buf, n);
}

/* A unit as written, without brackets, blanks and underscores ("[n_m]" -> "nm", ncempy's
 * spelling), so one comparison serves every writer. */
static void unit_norm(const char *u, char *out, size_t n)
{
    size_t j = 0;
    for (; *u && j + 1 < n; u++)
        if (*u != '[' && *u != ']' && *u != '_' && *u != ' ')
            out[j++] = *u;
    out[j] = '\0';
}

/* A length unit to Å (NaN: not a length we know, e.g. "pixels"). */
static double length_to_A(const char *unit)
{
    char u[32];
    unit_norm(unit, u, sizeof u);
    if (!strcmp(u, "A") || !strcmp(u, "\xc3\x85") || !strcasecmp(u, "angstrom") ||
        !strcasecmp(u, "angstroms"))
        return 1.0;
    if (!strcmp(u, "nm"))
        return 10.0;
    if (!strcmp(u, "pm"))
        return 0.01;
    if (!strcmp(u, "um") || !strcmp(u, "\xc2\xb5m") || !strcmp(u, "\xce\xbcm"))
        return 1e4;
    return NAN;
}

/* A detector-axis unit: an angle (returns 1, *f to mrad) or a spatial frequency (returns 2, *f to
 * 1/Å, without 2π as py4DSTEM's A^-1); 0 otherwise. */
static int detector_unit(const char *unit, double *f)
{
    char u[32];
    unit_norm(unit, u, sizeof u);
    if (!strcmp(u, "mrad"))
        return *f = 1.0, 1;
    if (!strcmp(u, "rad"))
        return *f = 1e3, 1;
    if (!strcmp(u, "urad") || !strcmp(u, "\xc2\xb5rad") || !strcmp(u, "\xce\xbcrad"))
        return *f = 1e-3, 1;
    if (!strcmp(u, "A^-1") || !strcmp(u, "1/A") || !strcmp(u, "A-1") || !strcmp(u, "\xc3\x85^-1") ||
        !strcmp(u, "1/\xc3\x85") || !strcasecmp(u, "1/angstrom"))
        return *f = 1.0, 2;
    if (!strcmp(u, "nm^-1") || !strcmp(u, "1/nm") || !strcmp(u, "nm-1"))
        return *f = 0.1, 2;
    return 0;
}

/* The spacing of a dim vector: its second value less its first (a full vector, or emdfile's
 * compressed [start, step] of a linear axis). 1 when it is a finite non-zero number. */
static int dim_step(hid_t file, const char *path, double *step)
{
    hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
    hid_t t = d < 0 ? -1 : H5Dget_type(d), sp = d < 0 ? -1 : H5Dget_space(d), ms = -1;
    hsize_t n = 0, start = 0, count = 2;
    double v[2];
    int ok = t >= 0 && sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1 &&
             (H5Tget_class(t) == H5T_FLOAT || H5Tget_class(t) == H5T_INTEGER);
    if (ok) {
        H5Sget_simple_extent_dims(sp, &n, NULL);
        ok = n >= 2 && (ms = H5Screate_simple(1, &count, NULL)) >= 0 &&
             H5Sselect_hyperslab(sp, H5S_SELECT_SET, &start, NULL, &count, NULL) >= 0 &&
             H5Dread(d, H5T_NATIVE_DOUBLE, ms, sp, H5P_DEFAULT, v) >= 0;
    }
    if (ms >= 0)
        H5Sclose(ms);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    H5Eclear2(H5E_DEFAULT);
    *step = ok ? v[1] - v[0] : NAN;
    return ok && isfinite(*step) && *step != 0;
}

/* Electron wavelength in Å at kv (relativistic; the constants of fs_kv_from_wavelength_A). */
static double wavelength_A(double kv)
{
    const double h = 6.62607015e-34, c = 299792458.0, e = 1.602176634e-19, m = 9.1093837015e-31;
    double E = kv * 1e3 * e, mc2 = m * c * c;
    return h * c / sqrt(E * (E + 2 * mc2)) * 1e10;
}

/* What the calibration found, before it becomes s->cal: each value with where it came from. */
typedef struct {
    double step_A[2], det_mrad[2], det_inv_A[2];
    char step_src[2][160], det_src[2][160];
} emd_found;

/* EMD dim vectors next to the dataset: Berkeley EMD v0.2 (ncempy) names them dim1..dimN, emdfile
 * (py4DSTEM >= 0.14) dim0..dim(N-1); each has "units" (and "name") attributes. A rank-4 cube's
 * axes 0, 1 are the scan (a length: the scan step), 2, 3 the detector (an angle or a spatial
 * frequency: the detector sampling); a stack's axes 1, 2 are the detector. */
static void emd_dims(framesrc *s, hid_t file, const char *dset, int rank, emd_found *f)
{
    char grp[512];
    snprintf(grp, sizeof grp, "%s", dset);
    char *cut = strrchr(grp, '/');
    if (!cut)
        return;
    *cut = '\0';
    char probe[600];
    snprintf(probe, sizeof probe, "%s/dim0", grp);
    int base = fs_h5_exists(file, probe) ? 0 : 1;
    for (int i = 0; i < rank; i++) {
        char path[600], unit[32] = "", key[64];
        snprintf(path, sizeof path, "%s/dim%d", grp, i + base);
        double step;
        if (!fs_h5_exists(file, path) || !dim_step(file, path, &step))
            continue;
        fs_h5_attr_string(file, path, "units", unit, sizeof unit);
        snprintf(key, sizeof key, "emd/dim%d", i + base);
        fs_meta_quantity(s, key, step, unit);
        int det = rank == 4 ? i - 2 : i - 1; /* detector axis 0 (rows) or 1, else < 0 */
        double fac;
        if (rank == 4 && i < 2 && isfinite(length_to_A(unit))) {
            f->step_A[i] = fabs(step) * length_to_A(unit);
            snprintf(f->step_src[i], sizeof f->step_src[i], "%s", path + (path[0] == '/'));
        } else if (det >= 0) {
            int kind = detector_unit(unit, &fac);
            if (kind == 1)
                f->det_mrad[det] = fabs(step) * fac;
            else if (kind == 2)
                f->det_inv_A[det] = fabs(step) * fac;
            if (kind)
                snprintf(f->det_src[det], sizeof f->det_src[det], "%s", path + (path[0] == '/'));
        }
    }
}

/* py4DSTEM / emdfile calibration next to the datacube (metadatabundle/calibration, in the cube's
 * group or an ancestor's): R_pixel_size with R_pixel_units, Q_pixel_size with Q_pixel_units
 * ("mrad" or "A^-1"), convergence_semiangle_mrad. It wins over the dim vectors (py4DSTEM derives
 * them from it). Every value also goes to the metadata. */
static void py4dstem_calibration(framesrc *s, hid_t file, const char *dset, emd_found *f)
{
    char base[512];
    snprintf(base, sizeof base, "%s", dset);
    char *cut;
    while ((cut = strrchr(base, '/'))) {
        *cut = '\0';
        char grp[600], unit[32] = "";
        snprintf(grp, sizeof grp, "%s/metadatabundle/calibration", base);
        if (!fs_h5_exists(file, grp))
            continue;
        const char *g = grp + (grp[0] == '/');
        double v, fac;
        if (cal_number(file, grp, "R_pixel_size", &v)) {
            cal_text(file, grp, "R_pixel_units", unit, sizeof unit);
            fs_meta_quantity(s, "emd/calibration/R_pixel_size", v, unit);
            if (isfinite(length_to_A(unit)))
                for (int i = 0; i < 2; i++) {
                    f->step_A[i] = v * length_to_A(unit);
                    snprintf(f->step_src[i], sizeof f->step_src[i], "%s/R_pixel_size", g);
                }
        }
        unit[0] = '\0';
        if (cal_number(file, grp, "Q_pixel_size", &v)) {
            cal_text(file, grp, "Q_pixel_units", unit, sizeof unit);
            fs_meta_quantity(s, "emd/calibration/Q_pixel_size", v, unit);
            int kind = detector_unit(unit, &fac);
            for (int i = 0; kind && i < 2; i++) {
                f->det_mrad[i] = kind == 1 ? v * fac : NAN;
                f->det_inv_A[i] = kind == 2 ? v * fac : NAN;
                snprintf(f->det_src[i], sizeof f->det_src[i], "%s/Q_pixel_size", g);
            }
        }
        if (cal_number(file, grp, "convergence_semiangle_mrad", &v)) {
            fs_meta_quantity(s, "emd/calibration/convergence_semiangle_mrad", v, "mrad");
            s->cal.semiangle_mrad = v;
        }
        return;
    }
}

/* The file's calibration: dim vectors, then py4DSTEM's calibration on top; a spatial-frequency
 * sampling becomes mrad (θ = λq) only with a beam energy from the file, else it stays in the
 * metadata (det_sampling_inv_A) for the user to convert. */
static void emd_calibration(framesrc *s, hid_t file, const char *dset, int rank)
{
    emd_found f = {{NAN, NAN}, {NAN, NAN}, {NAN, NAN}, {"", ""}, {"", ""}};
    emd_dims(s, file, dset, rank, &f);
    py4dstem_calibration(s, file, dset, &f);
    if (f.step_src[0][0] && f.step_src[1][0]) {
        s->cal.scan_step_A[0] = f.step_A[0];
        s->cal.scan_step_A[1] = f.step_A[1];
        fs_meta_string(s, "scan_step_source", f.step_src[0]);
    }
    if (f.det_src[0][0] && f.det_src[1][0]) {
        double lam = s->cal.kv > 0 ? wavelength_A(s->cal.kv) : NAN;
        for (int i = 0; i < 2; i++)
            s->cal.det_sampling_mrad[i] = isfinite(f.det_mrad[i]) ? f.det_mrad[i] : 1e3 * lam * f.det_inv_A[i];
        if (isfinite(f.det_inv_A[0]) && !isfinite(lam)) {
            char v[64];
            snprintf(v, sizeof v, "%.9g %.9g 1/A", f.det_inv_A[0], f.det_inv_A[1]);
            fs_meta_string(s, "det_sampling_inv_A", v);
        }
        if (isfinite(s->cal.det_sampling_mrad[0]))
            fs_meta_string(s, "det_sampling_source", f.det_src[0]);
        else
            s->cal.det_sampling_mrad[0] = s->cal.det_sampling_mrad[1] = NAN;
    }
}

ssb4d_status fs_hdf5_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    fs_h5_quiet();
    h5_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
    r->file = r->dset = r->fspace = -1;
    char *name = NULL;
    hid_t d = -1, t = -1, sp = -1, dcpl = -1, dapl = -1;
    ssb4d_status st = SSB4D_OK;
    if ((r->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        st = fs_h5_fail(err, SSB4D_EIO, "cannot open %s as HDF5", path);
        goto done;
    }
    if (o && o->dataset && *o->dataset) {
        if (!fs_h5_exists(r->file, o->dataset)) {
            st = ssb_fail(err, SSB4D_ENOTFOUND, "%s has no dataset '%s'", path, o->dataset);
            goto done;
        }
        name = strdup(o->dataset);
    } else if ((st = discover(r->file, path, &name, err))) {
        goto done;
    }
    if (!name) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
        goto done;
    }
    char what[600];
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
    H5T_class_t cls = H5Tget_class(t);
    size_t elem = H5Tget_size(t);
    if (cls == H5T_FLOAT && elem != 4) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s is floating point of %zu bytes: save it as float32 "
                      "(ssb4d never quantises silently)", what, elem);
        goto done;
    }
    if (cls != H5T_INTEGER && cls != H5T_FLOAT) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s is not an integer dataset (counts must be uint8, "
                      "uint16 or uint32)", what);
        goto done;
    }
    if (elem != 1 && elem != 2 && elem != 4) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s holds %zu-byte integers: narrow it to uint32 (or "
                      "smaller) counts first", what, elem);
        goto done;
    }
    r->rank = H5Sget_simple_extent_ndims(sp);
    if (r->rank != 4 && r->rank != 3) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s has rank %d; ssb4d needs 4 axes (scan_row, scan_col, "
                      "det_row, det_col) or a stack of frames (frame, det_row, det_col)", what,
                      r->rank);
        goto done;
    }
    H5Sget_simple_extent_dims(sp, r->dims, NULL);
    if (r->rank == 3 && fs_velox_detect(path)) {
        /* a Velox stack is (rows, cols, frames): read as (frames, rows, cols) it would be garbage */
        st = ssb_fail(err, SSB4D_EFORMAT, "%s is a Velox EMD stack, stored with the frames last: read "
                      "it with --format velox (or without --format)", what);
        goto done;
    }
    size_t shape[4];
    const char *how = "file";
    if (r->rank == 4) {
        for (int i = 0; i < 4; i++)
            shape[i] = (size_t)r->dims[i];
        if (o && o->shape[0] && o->shape[1] && (o->shape[0] != shape[0] || o->shape[1] != shape[1])) {
            st = ssb_fail(err, SSB4D_EINVAL, "%s has a %zux%zu scan, not the %zux%zu asked", what,
                          shape[0], shape[1], o->shape[0], o->shape[1]);
            goto done;
        }
    } else {
        if ((st = fs_scan_shape((size_t)r->dims[0], o, 0, 0, NULL, what, shape, &how, err)))
            goto done;
        shape[2] = (size_t)r->dims[1];
        shape[3] = (size_t)r->dims[2];
    }
    if ((st = fs_check_shape(shape, what, err)) ||
        (st = fs_check_det_opts(o, shape[2], shape[3], what, err)) ||
        (st = fs_h5_check_filters(dcpl, what, err)))
        goto done;
    int is_float = cls == H5T_FLOAT;
    int is_signed = !is_float && H5Tget_sign(t) == H5T_SGN_2;
    /* reopen with a chunk cache sized for this dataset's chunks */
    dapl = dataset_access(dcpl, r->rank, r->dims, elem);
    H5Dclose(d);
    d = -1;
    if ((r->dset = H5Dopen2(r->file, name, dapl >= 0 ? dapl : H5P_DEFAULT)) < 0 ||
        (r->fspace = H5Dget_space(r->dset)) < 0) {
        st = fs_h5_fail(err, SSB4D_EIO, "%s: cannot reopen the dataset", what);
        goto done;
    }
    memcpy(s->shape, shape, sizeof shape);
    s->dtype_bytes = (int)elem;
    s->dtype_signed = is_signed;
    s->is_float = is_float;
    s->format_name = "hdf5";
    fs_meta_string(s, "hdf5_dataset", name);
    if (r->rank == 3)
        fs_meta_string(s, "scan_shape_source", how);
    emd_calibration(s, r->file, name, r->rank);
    s->ops = is_float ? &h5_f32_ops : &h5_ops;
    s->impl = r;
    r = NULL;
done:
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
    free(name);
    h5_close(r);
    H5Eclear2(H5E_DEFAULT);
    return st;
}
