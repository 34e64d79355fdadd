/* framesrc.c — opening a foreign acquisition: format detection, dispatch to the reader of that
 * format (fs_*.c), the common accessors and the small helpers every reader needs. */
#include "formats/fs_internal.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------- */
/* Format detection                                                                           */

static int has_suffix(const char *path, const char *suffix)
{
    size_t n = strlen(path), k = strlen(suffix);
    return n >= k && strcasecmp(path + n - k, suffix) == 0;
}

/* HDF5 files start with this signature at 0 or, after a user block, at 512, 1024, 2048, ... */
static int is_hdf5(int fd, size_t size)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    for (size_t off = 0; off + 8 <= size && off <= ((size_t)1 << 30); off = off ? off * 2 : 512) {
        unsigned char b[8];
        if (pread(fd, b, 8, (off_t)off) != 8)
            return 0;
        if (memcmp(b, sig, 8) == 0)
            return 1;
    }
    return 0;
}

static ssb4d_status detect(const char *path, const framesrc_opts *o, framesrc_format *f,
                           ssb4d_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    size_t size = 0;
    ssb4d_status st = fs_file_size(fd, path, &size, err);
    unsigned char head[1024] = {0};
    ssize_t got = st ? 0 : pread(fd, head, sizeof head, 0);
    int hdf5 = !st && is_hdf5(fd, size);
    close(fd);
    if (st)
        return st;
    if (got >= 6 && memcmp(head, "\x93NUMPY", 6) == 0)
        *f = FRAMESRC_NPY;
    else if (hdf5)
        *f = fs_arina_detect(path) ? FRAMESRC_ARINA : fs_velox_detect(path) ? FRAMESRC_VELOX : FRAMESRC_HDF5;
    else if (got >= 4 && memcmp(head, "MQ1,", 4) == 0)
        *f = FRAMESRC_MIB;
    else if (has_suffix(path, ".xml") && got > 0 && memmem(head, (size_t)got, "<", 1))
        *f = FRAMESRC_EMPAD;
    else if ((has_suffix(path, ".dm3") || has_suffix(path, ".dm4")) && got > 0 && fs_dm_detect(head, (size_t)got))
        *f = FRAMESRC_DM;
    else if (got > 0 && fs_mrc_detect(head, (size_t)got, size))
        *f = FRAMESRC_MRC;
    else if (o && o->dtype_bytes && o->shape[0] && o->shape[1] && o->shape[2] && o->shape[3])
        *f = FRAMESRC_RAW;
    else if (has_suffix(path, ".raw") && fs_empad_raw_has_xml(path))
        *f = FRAMESRC_EMPAD; /* an EMPAD .raw with the .xml that names it beside it */
    else if (has_suffix(path, ".raw") || has_suffix(path, ".bin") || has_suffix(path, ".dat"))
        return ssb_fail(err, SSB4D_EINVAL,
                        "%s looks like raw binary: give its --shape, --dtype and --endian", path);
    else if (has_suffix(path, ".dm3") || has_suffix(path, ".dm4"))
        return ssb_fail(err, SSB4D_EFORMAT, "%s does not start like a DM3 / DM4 file (version 3 or 4)", path);
    else if (has_suffix(path, ".mrc") || has_suffix(path, ".mrcs"))
        return ssb_fail(err, SSB4D_EFORMAT, "%s does not have an MRC header (\"MAP \" at byte 208, "
                        "a mode and sizes that fit the file)", path);
    else if (has_suffix(path, ".mib"))
        return ssb_fail(err, SSB4D_EFORMAT,
                        "%s does not start with a Merlin frame header (\"MQ1,\")", path);
    else if (has_suffix(path, ".npy"))
        return ssb_fail(err, SSB4D_EFORMAT, "%s does not start with the .npy magic", path);
    else if (has_suffix(path, ".h5") || has_suffix(path, ".hdf5") || has_suffix(path, ".emd"))
        return ssb_fail(err, SSB4D_EFORMAT, "%s has no HDF5 signature", path);
    else
        return ssb_fail(err, SSB4D_EFORMAT,
                        "cannot tell the format of %s (not .npy, HDF5, Merlin .mib, DM3/DM4, MRC or "
                        "an EMPAD .xml by its first bytes); for raw binary give --shape, --dtype and "
                        "--endian", path);
    return SSB4D_OK;
}

ssb4d_status framesrc_format_parse(const char *name, framesrc_format *f, ssb4d_err *err)
{
    static const struct { const char *name; framesrc_format f; } words[] = {
        {"auto", FRAMESRC_AUTO}, {"npy", FRAMESRC_NPY},     {"numpy", FRAMESRC_NPY},
        {"raw", FRAMESRC_RAW},   {"hdf5", FRAMESRC_HDF5},   {"h5", FRAMESRC_HDF5},
        {"emd", FRAMESRC_HDF5},  {"arina", FRAMESRC_ARINA}, {"mib", FRAMESRC_MIB},
        {"merlin", FRAMESRC_MIB}, {"empad", FRAMESRC_EMPAD}, {"dm", FRAMESRC_DM},
        {"dm3", FRAMESRC_DM},    {"dm4", FRAMESRC_DM},      {"velox", FRAMESRC_VELOX},
        {"mrc", FRAMESRC_MRC},   {"mrcs", FRAMESRC_MRC},
    };
    for (size_t i = 0; name && i < sizeof words / sizeof words[0]; i++)
        if (strcasecmp(name, words[i].name) == 0) {
            *f = words[i].f;
            return SSB4D_OK;
        }
    return ssb_fail(err, SSB4D_EINVAL,
                    "unknown format '%s' (expected auto, npy, raw, hdf5, arina, mib, empad, dm, "
                    "velox or mrc)",
                    name ? name : "");
}

/* ---------------------------------------------------------------------------------------- */
/* Open, read, close and the accessors                                                        */

ssb4d_status framesrc_open(const char *path, const framesrc_opts *o, framesrc **out, ssb4d_err *err)
{
    *out = NULL;
    if (!path || !*path)
        return ssb_fail(err, SSB4D_EINVAL, "framesrc_open: no path");
    static const framesrc_opts none = {0};
    if (!o)
        o = &none;
    framesrc_format f = o->format;
    ssb4d_status st = SSB4D_OK;
    if (f == FRAMESRC_AUTO && (st = detect(path, o, &f, err)))
        return st;
    framesrc *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path)) || !(s->meta = cJSON_CreateObject())) {
        framesrc_close(s);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
    }
    s->cal = (framesrc_calibration){NAN, NAN, {NAN, NAN}, {NAN, NAN}, NAN, NAN};
    switch (f) {
    case FRAMESRC_NPY: st = fs_npy_open(s, path, o, err); break;
    case FRAMESRC_RAW: st = fs_raw_open(s, path, o, err); break;
    case FRAMESRC_HDF5: st = fs_hdf5_open(s, path, o, err); break;
    case FRAMESRC_ARINA: st = fs_arina_open(s, path, o, err); break;
    case FRAMESRC_MIB: st = fs_mib_open(s, path, o, err); break;
    case FRAMESRC_EMPAD: st = fs_empad_open(s, path, o, err); break;
    case FRAMESRC_DM: st = fs_dm_open(s, path, o, err); break;
    case FRAMESRC_VELOX: st = fs_velox_open(s, path, o, err); break;
    case FRAMESRC_MRC: st = fs_mrc_open(s, path, o, err); break;
    default: st = ssb_fail(err, SSB4D_EINVAL, "framesrc_open: unknown format %d", (int)f);
    }
    if (!st && f != FRAMESRC_MIB && o->n_more_paths)
        st = ssb_fail(err, SSB4D_EINVAL, "%s: only Merlin acquisitions may be split over several "
                      "files", path);
    if (!st && s->is_float && (s->dtype_bytes != 4 || !s->ops->read_f32))
        st = ssb_fail(err, SSB4D_EINTERNAL, "%s: float reader without float32 reads", path);
    if (st) {
        if (s->ops && s->ops->close)
            s->ops->close(s->impl);
        s->ops = NULL; /* the opener released its own state on failure, or it was just closed */
        framesrc_close(s);
        return st;
    }
    *out = s;
    return SSB4D_OK;
}

void framesrc_close(framesrc *s)
{
    if (!s)
        return;
    if (s->ops && s->ops->close)
        s->ops->close(s->impl);
    free(s->flag_mask);
    cJSON_Delete(s->meta);
    free(s->path);
    free(s);
}

ssb4d_status framesrc_read(framesrc *s, size_t pos0, size_t npos, uint32_t *out, ssb4d_err *err)
{
    if (!s || (!out && npos))
        return ssb_fail(err, SSB4D_EINVAL, "framesrc_read: no source or no output");
    size_t n = s->shape[0] * s->shape[1];
    if (pos0 > n || npos > n - pos0)
        return ssb_fail(err, SSB4D_EINVAL, "%s: frames %zu..%zu asked, the scan has %zu", s->path,
                        pos0, pos0 + npos, n);
    if (npos == 0)
        return SSB4D_OK;
    if (s->is_float)
        return ssb_fail(err, SSB4D_EFORMAT, "%s holds float values, not counts: ssb4d never "
                        "quantises silently (import --gain E states the electrons per unit; "
                        "fit, reconstruct and view read float data as it is)", s->path);
    return s->ops->read(s, pos0, npos, out, err);
}

ssb4d_status framesrc_read_f32(framesrc *s, size_t pos0, size_t npos, float *out, ssb4d_err *err)
{
    if (!s || (!out && npos))
        return ssb_fail(err, SSB4D_EINVAL, "framesrc_read_f32: no source or no output");
    size_t n = s->shape[0] * s->shape[1], P = s->shape[2] * s->shape[3];
    if (pos0 > n || npos > n - pos0)
        return ssb_fail(err, SSB4D_EINVAL, "%s: frames %zu..%zu asked, the scan has %zu", s->path,
                        pos0, pos0 + npos, n);
    if (npos == 0)
        return SSB4D_OK;
    if (s->is_float) {
        ssb4d_status st = s->ops->read_f32(s, pos0, npos, out, err);
        size_t i = st ? (size_t)-1 : framesrc_first_nonfinite(out, npos * P);
        if (i != (size_t)-1) {
            size_t pos = pos0 + i / P, pix = i % P;
            return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu (scan %zu,%zu) holds %s at "
                            "detector pixel %zu,%zu", s->path, pos, pos / s->shape[1],
                            pos % s->shape[1], isnan(out[i]) ? "NaN" : "an infinite value",
                            pix / s->shape[3], pix % s->shape[3]);
        }
        return st;
    }
    /* integers: read as uint32 into the same buffer (4 bytes per value), converted in place */
    uint32_t *u = (uint32_t *)(void *)out;
    ssb4d_status st = s->ops->read(s, pos0, npos, u, err);
    size_t i = st ? (size_t)-1 : framesrc_counts_to_f32(u, npos * P);
    if (i != (size_t)-1) {
        size_t pos = pos0 + i / P, pix = i % P;
        return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu holds the count %u at detector pixel "
                        "%zu,%zu, beyond float32's exact integers (2^24)", s->path, pos,
                        (unsigned)u[i], pix / s->shape[3], pix % s->shape[3]);
    }
    return st;
}

size_t framesrc_counts_to_f32(void *buf, size_t n)
{
    uint32_t *u = buf;
    float *f = buf; /* the same 4-byte slots */
    for (size_t i = 0; i < n; i++) {
        uint32_t v = u[i];
        if (v > (1u << 24))
            return i;
        f[i] = (float)v;
    }
    return (size_t)-1;
}

size_t framesrc_first_nonfinite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return i;
    return (size_t)-1;
}

void framesrc_shape(const framesrc *s, size_t shape[4]) { memcpy(shape, s->shape, sizeof s->shape); }
int framesrc_dtype_bytes(const framesrc *s) { return s->dtype_bytes; }
int framesrc_is_float(const framesrc *s) { return s->is_float; }
int framesrc_dtype_signed(const framesrc *s) { return s->dtype_signed; }
const char *framesrc_format_name(const framesrc *s) { return s->format_name; }
const uint8_t *framesrc_flag_mask(const framesrc *s) { return s->flag_mask; }
void framesrc_calibration_of(const framesrc *s, framesrc_calibration *cal) { *cal = s->cal; }
const cJSON *framesrc_source_metadata(const framesrc *s) { return s->meta; }

/* ---------------------------------------------------------------------------------------- */
/* Helpers for the readers                                                                    */

int fs_mul(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

ssb4d_status fs_check_shape(const size_t shape[4], const char *what, ssb4d_err *err)
{
    for (int i = 0; i < 4; i++)
        if (shape[i] == 0)
            return ssb_fail(err, SSB4D_EFORMAT, "%s: shape %zux%zux%zux%zu has an empty axis",
                            what, shape[0], shape[1], shape[2], shape[3]);
    if (shape[2] > 4096 || shape[3] > 4096 || shape[0] > 65536 || shape[1] > 65536)
        return ssb_fail(err, SSB4D_EFORMAT, "%s: shape %zux%zux%zux%zu is beyond what ssb4d "
                        "supports (scan <= 65536 per axis, detector <= 4096 per axis)",
                        what, shape[0], shape[1], shape[2], shape[3]);
    return SSB4D_OK;
}

static size_t isqrt(size_t n)
{
    size_t r = (size_t)sqrt((double)n);
    while (r * r > n)
        r--;
    while ((r + 1) * (r + 1) <= n)
        r++;
    return r;
}

ssb4d_status fs_scan_shape(size_t n, const framesrc_opts *o, size_t hint_rows, size_t hint_cols,
                           const char *hint_from, const char *what, size_t scan[2],
                           const char **how, ssb4d_err *err)
{
    size_t r = o ? o->shape[0] : 0, c = o ? o->shape[1] : 0;
    const char *h = "user";
    if (r && c) {
        size_t need;
        if (!fs_mul(r, c, &need) || need != n)
            return ssb_fail(err, SSB4D_EINVAL, "%s holds %zu frames but the scan shape %zux%zu "
                            "needs %zu", what, n, r, c, r * c);
    } else if (r || c) {
        /* one side given: the other follows when it divides the frame count */
        size_t k = r ? r : c;
        if (n % k)
            return ssb_fail(err, SSB4D_EINVAL, "%s holds %zu frames, not a multiple of %zu: give "
                            "the whole --scan-shape ROWS,COLS", what, n, k);
        if (r)
            c = n / r;
        else
            r = n / c;
    } else if (hint_rows && hint_cols) {
        if (hint_rows * hint_cols != n)
            return ssb_fail(err, SSB4D_EFORMAT, "%s holds %zu frames but %s says the scan is "
                            "%zux%zu (%zu frames); pass --scan-shape ROWS,COLS", what, n,
                            hint_from, hint_rows, hint_cols, hint_rows * hint_cols);
        r = hint_rows;
        c = hint_cols;
        h = "file";
    } else {
        size_t q = isqrt(n);
        if (n == 0 || q * q != n)
            return ssb_fail(err, SSB4D_EINVAL, "%s holds %zu frames and does not record its scan "
                            "shape (%zu is not a square): pass --scan-shape ROWS,COLS", what, n, n);
        r = c = q;
        h = "square";
    }
    scan[0] = r;
    scan[1] = c;
    if (how)
        *how = h;
    return SSB4D_OK;
}

ssb4d_status fs_check_det_opts(const framesrc_opts *o, size_t det_rows, size_t det_cols,
                               const char *what, ssb4d_err *err)
{
    if (o && ((o->shape[2] && o->shape[2] != det_rows) || (o->shape[3] && o->shape[3] != det_cols)))
        return ssb_fail(err, SSB4D_EINVAL, "%s has %zux%zu detector frames, not the %zux%zu asked",
                        what, det_rows, det_cols, o->shape[2], o->shape[3]);
    return SSB4D_OK;
}

static inline uint32_t load(const uint8_t *p, int bytes, int big_endian, int is_signed)
{
    switch (bytes) {
    case 1: return is_signed ? (uint32_t)(int32_t)(int8_t)p[0] : p[0];
    case 2: {
        uint16_t v = big_endian ? (uint16_t)(p[0] << 8 | p[1]) : (uint16_t)(p[1] << 8 | p[0]);
        return is_signed ? (uint32_t)(int32_t)(int16_t)v : v;
    }
    default:
        return big_endian ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
                          : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
    }
}

void fs_widen(const uint8_t *in, uint32_t *out, size_t n, int bytes, int big_endian, int is_signed)
{
    if (bytes == 4 && !big_endian) { /* the common little-endian uint32 case is a copy */
        memmove(out, in, n * 4);
        return;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = load(in + i * (size_t)bytes, bytes, big_endian, is_signed);
}

void fs_widen_tail(uint32_t *out, size_t n, int bytes, int big_endian, int is_signed)
{
    const uint8_t *in = (const uint8_t *)out + n * (size_t)(4 - bytes);
    if (bytes == 4) {
        if (big_endian)
            for (size_t i = 0; i < n; i++)
                out[i] = __builtin_bswap32(out[i]);
        return;
    }
    /* element i sits at byte n(4-b) + i*b >= 4i: loading it before storing out[i] is enough */
    for (size_t i = 0; i < n; i++)
        out[i] = load(in + i * (size_t)bytes, bytes, big_endian, is_signed);
}

size_t fs_first_negative(const uint32_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] & 0x80000000u)
            return i;
    return (size_t)-1;
}

ssb4d_status fs_negative_error(const framesrc *s, size_t pos0, size_t index, int32_t value,
                               ssb4d_err *err)
{
    size_t P = s->shape[2] * s->shape[3], pos = pos0 + index / P, pix = index % P;
    return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu (scan %zu,%zu) holds a negative count %d "
                    "at detector pixel %zu,%zu; signed data are accepted only when every value "
                    "is >= 0", s->path, pos, pos / s->shape[1], pos % s->shape[1], (int)value,
                    pix / s->shape[3], pix % s->shape[3]);
}

ssb4d_status fs_pread_full(int fd, void *buf, size_t len, off_t off, const char *what,
                           ssb4d_err *err)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t got = pread(fd, p, len, off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return ssb_fail(err, SSB4D_EIO, "reading %s at byte %lld: %s", what, (long long)off,
                            strerror(errno));
        if (got == 0)
            return ssb_fail(err, SSB4D_EIO, "reading %s: unexpected end of file at byte %lld "
                            "(was it truncated while open?)", what, (long long)off);
        p += got;
        len -= (size_t)got;
        off += got;
    }
    return SSB4D_OK;
}

ssb4d_status fs_file_size(int fd, const char *what, size_t *size, ssb4d_err *err)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return ssb_fail(err, SSB4D_EIO, "cannot stat %s: %s", what, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return ssb_fail(err, SSB4D_EINVAL, "%s is not a regular file", what);
    *size = (size_t)sb.st_size;
    return SSB4D_OK;
}

double fs_kv_from_wavelength_A(double lambda_A)
{
    /* p = h/λ, E_kinetic = sqrt((mc²)² + (pc)²) − mc² (CODATA 2018 exact h, c, e; m_e) */
    const double h = 6.62607015e-34, c = 299792458.0, e = 1.602176634e-19, m = 9.1093837015e-31;
    if (!(lambda_A > 0) || !isfinite(lambda_A))
        return NAN;
    double mc2 = m * c * c, pc = h / (lambda_A * 1e-10) * c;
    /* the difference of two nearly equal terms, written without cancellation */
    double ek = pc * pc / (sqrt(mc2 * mc2 + pc * pc) + mc2);
    return ek / e / 1000.0;
}

void fs_meta_quantity(framesrc *s, const char *key, double value, const char *unit)
{
    char text[96];
    if (unit && *unit)
        snprintf(text, sizeof text, "%.17g %s", value, unit);
    else
        snprintf(text, sizeof text, "%.17g", value);
    fs_meta_string(s, key, text);
}

void fs_meta_string(framesrc *s, const char *key, const char *value)
{
    cJSON_DeleteItemFromObjectCaseSensitive(s->meta, key);
    cJSON_AddStringToObject(s->meta, key, value);
}

void fs_meta_number(framesrc *s, const char *key, double value)
{
    cJSON_DeleteItemFromObjectCaseSensitive(s->meta, key);
    /* JSON has no inf or NaN (a real DM file's Exposure Live Time is inf): keep them as text,
     * as fs_dm.c does for tags, so that no reader's value can break the .qem header. */
    if (!isfinite(value))
        cJSON_AddStringToObject(s->meta, key, isnan(value) ? "nan" : value > 0 ? "inf" : "-inf");
    else
        cJSON_AddNumberToObject(s->meta, key, value);
}
