/* fs_h5util.c — small libhdf5 helpers for the HDF5 and Arina readers: one-line errors from
 * libhdf5's error stack, existence checks that do not trip over missing intermediate groups,
 * scalar numbers/strings from datasets and attributes, and the filter check. */
#include "formats/fs_internal.h"

#include "common/err.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void fs_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

typedef struct {
    char msg[200];
    int have;
} walk_ctx;

/* Walked from the innermost error outwards: the first description is the most specific. */
static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    walk_ctx *w = data;
    if (!w->have && e && e->desc && *e->desc) {
        snprintf(w->msg, sizeof w->msg, "%s", e->desc);
        w->have = 1;
    }
    return 0;
}

ssb4d_status fs_h5_fail(ssb4d_err *err, ssb4d_status code, const char *fmt, ...)
{
    char line[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    walk_ctx w = {{0}, 0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &w);
    H5Eclear2(H5E_DEFAULT);
    if (w.have)
        return ssb_fail(err, code, "%s (libhdf5: %s)", line, w.msg);
    return ssb_fail(err, code, "%s", line);
}

int fs_h5_exists(hid_t loc, const char *path)
{
    if (!path || !*path || !strcmp(path, "/") || !strcmp(path, "."))
        return 1;
    size_t n = strlen(path);
    char *p = malloc(n + 1);
    if (!p)
        return 0;
    int ok = 1;
    /* check each prefix that ends at a '/' boundary, then the whole path */
    for (size_t i = 1; ok && i <= n; i++) {
        if (i < n && path[i] != '/')
            continue;
        memcpy(p, path, i);
        p[i] = '\0';
        if (i == 1 && p[0] == '/')
            continue;
        ok = H5Lexists(loc, p, H5P_DEFAULT) > 0 && H5Oexists_by_name(loc, p, H5P_DEFAULT) > 0;
    }
    free(p);
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

/* One scalar string of an attribute (is_attr) or a dataset obj, of type t and space sp, into buf:
 * fixed-length or variable-length, in the cset it was written in. 1 when read. */
static int read_string(hid_t obj, int is_attr, hid_t t, hid_t sp, char *buf, size_t n)
{
    if (t < 0 || sp < 0 || H5Tget_class(t) != H5T_STRING || H5Sget_simple_extent_npoints(sp) != 1)
        return 0;
    int ok = 0;
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mt, H5Tget_cset(t)); /* h5py writes str as UTF-8: no ASCII conversion path */
    if (H5Tis_variable_str(t) > 0) {
        char *s = NULL;
        if (H5Tset_size(mt, H5T_VARIABLE) >= 0 &&
            (is_attr ? H5Aread(obj, mt, &s) : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &s)) >= 0 && s) {
            snprintf(buf, n, "%s", s);
            ok = 1;
        }
        if (s)
            H5free_memory(s);
    } else {
        size_t len = H5Tget_size(t);
        char *s = len < (1u << 20) ? calloc(1, len + 1) : NULL;
        /* NULLPAD: a string that fills its field keeps its last character (NULLTERM would
         * overwrite it with the terminator); the buffer's extra byte ends it */
        if (s && H5Tset_size(mt, len) >= 0 && H5Tset_strpad(mt, H5T_STR_NULLPAD) >= 0 &&
            (is_attr ? H5Aread(obj, mt, s) : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, s)) >= 0) {
            snprintf(buf, n, "%s", s);
            ok = 1;
        }
        free(s);
    }
    if (mt >= 0)
        H5Tclose(mt);
    return ok;
}

int fs_h5_attr_string(hid_t loc, const char *path, const char *name, char *buf, size_t n)
{
    if (n == 0 || !fs_h5_exists(loc, path) || H5Aexists_by_name(loc, path, name, H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    hid_t a = H5Aopen_by_name(loc, path, name, H5P_DEFAULT, H5P_DEFAULT);
    hid_t t = a < 0 ? -1 : H5Aget_type(a), sp = a < 0 ? -1 : H5Aget_space(a);
    int ok = read_string(a, 1, t, sp, buf, n);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

int fs_h5_string(hid_t loc, const char *path, char *buf, size_t n)
{
    if (n == 0 || !fs_h5_exists(loc, path))
        return 0;
    hid_t d = H5Dopen2(loc, path, H5P_DEFAULT);
    hid_t t = d < 0 ? -1 : H5Dget_type(d), sp = d < 0 ? -1 : H5Dget_space(d);
    int ok = read_string(d, 0, t, sp, buf, n);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

int fs_h5_attr_number(hid_t loc, const char *path, const char *name, double *v)
{
    if (!fs_h5_exists(loc, path) || H5Aexists_by_name(loc, path, name, H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    int ok = 0;
    hid_t a = H5Aopen_by_name(loc, path, name, H5P_DEFAULT, H5P_DEFAULT);
    hid_t t = a < 0 ? -1 : H5Aget_type(a), sp = a < 0 ? -1 : H5Aget_space(a);
    if (t >= 0 && sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1) {
        H5T_class_t c = H5Tget_class(t);
        if (c == H5T_INTEGER || c == H5T_FLOAT)
            ok = H5Aread(a, H5T_NATIVE_DOUBLE, v) >= 0;
    }
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    if (!ok) { /* a number written as text ("1") */
        char s[64], *end;
        if (fs_h5_attr_string(loc, path, name, s, sizeof s)) {
            double x = strtod(s, &end);
            if (end != s && !*end) {
                *v = x;
                ok = 1;
            }
        }
    }
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

int fs_h5_number(hid_t loc, const char *path, double *v, char *unit, size_t unit_n)
{
    if (unit && unit_n)
        unit[0] = '\0';
    if (!fs_h5_exists(loc, path))
        return 0;
    int ok = 0;
    hid_t d = H5Dopen2(loc, path, H5P_DEFAULT);
    hid_t t = d < 0 ? -1 : H5Dget_type(d), sp = d < 0 ? -1 : H5Dget_space(d);
    if (t >= 0 && sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1) {
        H5T_class_t c = H5Tget_class(t);
        if (c == H5T_INTEGER || c == H5T_FLOAT)
            ok = H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0;
    }
    if (ok && unit && unit_n)
        fs_h5_attr_string(d, ".", "units", unit, unit_n);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    H5Eclear2(H5E_DEFAULT);
    return ok;
}

const char *fs_h5_filter_name(H5Z_filter_t id)
{
    switch (id) {
    case 1: return "deflate";
    case 2: return "shuffle";
    case 3: return "fletcher32";
    case 4: return "szip";
    case 5: return "nbit";
    case 6: return "scaleoffset";
    case 307: return "bzip2";
    case 32000: return "lzf";
    case 32001: return "blosc";
    case 32004: return "lz4";
    case 32008: return "bitshuffle";
    case 32015: return "zstd";
    case 32026: return "blosc2";
    default: return "unknown";
    }
}

ssb4d_status fs_h5_check_filters(hid_t dcpl, const char *what, ssb4d_err *err)
{
    int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0, cd[16], config = 0;
        size_t ncd = 16;
        char name[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof name, name, &config);
        if (id < 0)
            return fs_h5_fail(err, SSB4D_EFORMAT, "%s: cannot read its filter pipeline", what);
        unsigned info = 0;
        int avail = H5Zfilter_avail(id) > 0 && H5Zget_filter_info(id, &info) >= 0 &&
                    (info & H5Z_FILTER_CONFIG_DECODE_ENABLED);
        H5Eclear2(H5E_DEFAULT);
        if (!avail)
            return ssb_fail(err, SSB4D_EFORMAT, "%s is compressed with HDF5 filter %d (%s%s%s), which "
                            "this libhdf5 cannot decode: set HDF5_PLUGIN_PATH to a folder holding the "
                            "plugin (e.g. from the hdf5plugin Python package) or re-save the data "
                            "uncompressed%s", what, (int)id, fs_h5_filter_name(id), *name ? ", " : "",
                            name, id == 32008 ? "; for Dectris data open the *_master.h5 file" : "");
    }
    return SSB4D_OK;
}
