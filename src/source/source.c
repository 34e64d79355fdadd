/* source.c — data sources: memory-mapped .npy files, caller-owned arrays, encoded .qem files
 * (source_qem.c), any other readable format through its frame reader (source_frames.c) and
 * region views of another source (source_region.c). All expose frames (for calibration) and BF
 * columns (for the G build, SPEC §5.3); counts or float32 values (SPEC §4: float data are read
 * as they are, never quantised). */
#include "common/err.h"
#include "formats/framesrc.h"
#include "io/npy.h"
#include "qem/qem.h"
#include "source/source.h"
#include "ssb4d_advanced.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct ssb4d_source {
    size_t shape[4];
    ssb4d_dtype dtype;
    const unsigned char *data; /* first count */
    void *map;                 /* mmap base (NULL for memory sources) */
    size_t map_len;
    qem_file *qem;             /* encoded source (data == NULL) */
    framesrc *fs;              /* a foreign format read in place (data == NULL) */
    ssb4d_source *parent;      /* region view (data == NULL, qem == NULL): not owned */
    size_t origin[2];          /* the view's first scan row and column in the parent */
};

/* What any acquisition must be: no empty axis, within the supported sizes. A 1xN scan is an
 * acquisition (import writes it, export and info read it) but not something to reconstruct. */
static ssb4d_status check_any_shape(const size_t shape[4], ssb4d_err *err)
{
    for (int i = 0; i < 4; i++)
        if (shape[i] == 0)
            return ssb_fail(err, SSB4D_EFORMAT, "data has an empty axis (shape %zux%zux%zux%zu)",
                            shape[0], shape[1], shape[2], shape[3]);
    if (shape[2] > 4096 || shape[3] > 4096 || shape[0] > 65536 || shape[1] > 65536)
        return ssb_fail(err, SSB4D_EFORMAT, "shape %zux%zux%zux%zu is beyond what ssb4d supports",
                        shape[0], shape[1], shape[2], shape[3]);
    return SSB4D_OK;
}

/* The same, and a scan that SSB can work on (at least 2x2). */
static ssb4d_status check_shape(const size_t shape[4], ssb4d_err *err)
{
    ssb4d_status st = check_any_shape(shape, err);
    if (!st && (shape[0] < 2 || shape[1] < 2))
        return ssb_fail(err, SSB4D_EFORMAT, "scan of %zux%zu positions is too small (need at least 2x2)",
                        shape[0], shape[1]);
    return st;
}

ssb4d_status ssb4d_source_from_memory(const void *data, ssb4d_dtype dtype, const size_t shape[4],
                                      ssb4d_source **out, ssb4d_err *err)
{
    *out = NULL;
    if (!data || (dtype != SSB4D_U8 && dtype != SSB4D_U16 && dtype != SSB4D_U32 && dtype != SSB4D_F32))
        return ssb_fail(err, SSB4D_EINVAL, "memory source needs data and a uint8/16/32 or float32 dtype");
    ssb4d_status st = check_shape(shape, err);
    if (st)
        return st;
    ssb4d_source *s = calloc(1, sizeof *s);
    if (!s)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    memcpy(s->shape, shape, sizeof s->shape);
    s->dtype = dtype;
    s->data = data;
    *out = s;
    return SSB4D_OK;
}

ssb4d_status ssb4d_source_open_npy(const char *path, ssb4d_source **out, ssb4d_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    ssb4d_npy_info info;
    ssb4d_status st = ssb_npy_read_header(f, path, &info, err);
    fclose(f);
    if (st)
        return st;
    ssb4d_dtype dt;
    if (!strcmp(info.descr, "|u1") || !strcmp(info.descr, "<u1"))
        dt = SSB4D_U8;
    else if (!strcmp(info.descr, "<u2"))
        dt = SSB4D_U16;
    else if (!strcmp(info.descr, "<u4"))
        dt = SSB4D_U32;
    else if (!strcmp(info.descr, "<f4"))
        dt = SSB4D_F32;
    else
        return ssb_fail(err, SSB4D_EFORMAT,
                        "%s: dtype '%s' is not supported; counts must be uint8, uint16 or uint32 "
                        "little-endian, float data float32 little-endian (`ssb4d import` reads "
                        "other integer types)", path, info.descr);
    if (info.fortran_order)
        return ssb_fail(err, SSB4D_EFORMAT, "%s: Fortran-order arrays are not supported; save it in C order", path);
    if (info.ndim != 4)
        return ssb_fail(err, SSB4D_EFORMAT,
                        "%s: expected a 4-D array (scan_row, scan_col, det_row, det_col), got %d-D",
                        path, info.ndim);
    st = check_shape(info.shape, err);
    if (st)
        return st;
    size_t count = info.shape[0] * info.shape[1] * info.shape[2] * info.shape[3];
    size_t need = info.header_bytes + count * ssb4d_dtype_bytes(dt);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < need) {
        close(fd);
        return ssb_fail(err, SSB4D_EFORMAT, "%s is truncated: %zu bytes, the header needs %zu",
                        path, (size_t)sb.st_size, need);
    }
    void *map = mmap(NULL, need, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return ssb_fail(err, SSB4D_EIO, "cannot map %s: %s", path, strerror(errno));
    ssb4d_source *s = calloc(1, sizeof *s);
    if (!s) {
        munmap(map, need);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    memcpy(s->shape, info.shape, sizeof s->shape);
    s->dtype = dt;
    s->map = map;
    s->map_len = need;
    s->data = (const unsigned char *)map + info.header_bytes;
    *out = s;
    return SSB4D_OK;
}

ssb4d_status ssb_source_new_view(ssb4d_source *parent, size_t r0, size_t c0,
                                 const size_t shape[4], ssb4d_source **out, ssb4d_err *err)
{
    *out = NULL;
    ssb4d_source *s = calloc(1, sizeof *s);
    if (!s)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    memcpy(s->shape, shape, sizeof s->shape);
    s->dtype = parent->dtype;
    s->parent = parent;
    s->origin[0] = r0;
    s->origin[1] = c0;
    *out = s;
    return SSB4D_OK;
}

void ssb4d_source_close(ssb4d_source *s)
{
    if (!s)
        return;
    if (s->map)
        munmap(s->map, s->map_len);
    qem_close(s->qem);
    framesrc_close(s->fs);
    free(s);
}

void ssb4d_source_shape(const ssb4d_source *s, size_t shape[4]) { memcpy(shape, s->shape, sizeof s->shape); }
ssb4d_dtype ssb4d_source_dtype(const ssb4d_source *s) { return s->dtype; }
size_t ssb4d_dtype_bytes(ssb4d_dtype t) { return (size_t)t & 0xff; }
int ssb4d_source_is_float(const ssb4d_source *s) { return s->dtype == SSB4D_F32; }

static inline uint32_t value_at(const ssb4d_source *s, size_t i)
{
    switch (s->dtype) {
    case SSB4D_U8: return s->data[i];
    case SSB4D_U16: {
        uint16_t v;
        memcpy(&v, s->data + 2 * i, 2);
        return v;
    }
    default: {
        uint32_t v;
        memcpy(&v, s->data + 4 * i, 4);
        return v;
    }
    }
}

ssb4d_status ssb4d_source_read_frames(ssb4d_source *s, size_t pos0, size_t npos, uint32_t *out,
                                      ssb4d_err *err)
{
    size_t npos_all = s->shape[0] * s->shape[1], fr = s->shape[2] * s->shape[3];
    if (pos0 > npos_all || npos > npos_all - pos0)
        return ssb_fail(err, SSB4D_EINVAL, "frame range %zu+%zu is outside the scan (%zu positions)",
                        pos0, npos, npos_all);
    if (s->dtype == SSB4D_F32)
        return ssb_fail(err, SSB4D_EFORMAT, "the data hold float values, not counts: read them as "
                        "float32 (ssb4d never quantises silently)");
    if (s->qem)
        return ssb_qem_read_frames(s->qem, pos0, npos, out, err);
    if (s->fs)
        return framesrc_read(s->fs, pos0, npos, out, err);
    if (s->parent)
        return ssb_region_read_frames(s->parent, s->origin, s->shape, pos0, npos, out, 0, err);
    size_t base = pos0 * fr, n = npos * fr;
    if (s->dtype == SSB4D_U16) {
        const uint16_t *p = (const uint16_t *)s->data + base;
        for (size_t i = 0; i < n; i++)
            out[i] = p[i];
    } else {
        for (size_t i = 0; i < n; i++)
            out[i] = value_at(s, base + i);
    }
    return SSB4D_OK;
}

ssb4d_status ssb4d_source_read_frames_f32(ssb4d_source *s, size_t pos0, size_t npos, float *out,
                                          ssb4d_err *err)
{
    size_t npos_all = s->shape[0] * s->shape[1], fr = s->shape[2] * s->shape[3], n = npos * fr;
    if (pos0 > npos_all || npos > npos_all - pos0)
        return ssb_fail(err, SSB4D_EINVAL, "frame range %zu+%zu is outside the scan (%zu positions)",
                        pos0, npos, npos_all);
    if (s->fs)
        return framesrc_read_f32(s->fs, pos0, npos, out, err);
    if (s->parent)
        return ssb_region_read_frames(s->parent, s->origin, s->shape, pos0, npos, out, 1, err);
    if (s->dtype == SSB4D_F32) {
        memcpy(out, (const float *)(const void *)s->data + pos0 * fr, n * sizeof *out);
        size_t i = framesrc_first_nonfinite(out, n);
        if (i != (size_t)-1)
            return ssb_fail(err, SSB4D_EFORMAT, "frame %zu holds %s at detector pixel %zu",
                            pos0 + i / fr, isnan(out[i]) ? "NaN" : "an infinite value", i % fr);
        return SSB4D_OK;
    }
    /* counts: read as uint32 into the same 4-byte slots, converted in place */
    uint32_t *u = (uint32_t *)(void *)out;
    ssb4d_status st = ssb4d_source_read_frames(s, pos0, npos, u, err);
    size_t i = st ? (size_t)-1 : framesrc_counts_to_f32(u, n);
    if (i != (size_t)-1)
        return ssb_fail(err, SSB4D_EFORMAT, "frame %zu holds the count %u at detector pixel %zu, "
                        "beyond float32's exact integers (2^24)", pos0 + i / fr, (unsigned)u[i], i % fr);
    return st;
}

/* Column read with `threads` workers over scan rows. Positions are visited in tiles of TILE
 * consecutive frames so that each BF pixel receives one contiguous run of TILE floats per tile
 * (the output is pixel-major, the file position-major: this is a blocked transpose). */
#define TILE 16
ssb4d_status ssb_source_read_columns_mt(ssb4d_source *s, const int32_t *det_pix, size_t n_pix,
                                        size_t row0, size_t nrows, float *out, int threads,
                                        ssb4d_err *err)
{
    size_t ny = s->shape[0], nx = s->shape[1], fr = s->shape[2] * s->shape[3];
    if (row0 > ny || nrows > ny - row0)
        return ssb_fail(err, SSB4D_EINVAL, "scan rows %zu+%zu are outside the scan (%zu rows)", row0,
                        nrows, ny);
    for (size_t p = 0; p < n_pix; p++)
        if (det_pix[p] < 0 || (size_t)det_pix[p] >= fr)
            return ssb_fail(err, SSB4D_EINVAL, "detector pixel %d is outside the detector",
                            (int)det_pix[p]);
    if (threads < 1)
        threads = 1;
    if (s->qem)
        return ssb_qem_read_columns(s->qem, det_pix, n_pix, row0, nrows, out, threads, err);
    if (s->fs)
        return ssb_frames_read_columns(s->fs, det_pix, n_pix, row0, nrows, out, threads, err);
    if (s->parent)
        return ssb_region_read_columns(s->parent, s->origin, s->shape, det_pix, n_pix, row0,
                                       nrows, out, threads, err);
    const size_t plane = nrows * nx;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (size_t r = 0; r < nrows; r++)
        for (size_t c0 = 0; c0 < nx; c0 += TILE) {
            size_t nc = nx - c0 < TILE ? nx - c0 : TILE;
            size_t frame0 = ((row0 + r) * nx + c0) * fr;
            float *o = out + r * nx + c0;
            if (s->dtype == SSB4D_U16) {
                const uint16_t *d = (const uint16_t *)s->data + frame0;
                for (size_t p = 0; p < n_pix; p++)
                    for (size_t cc = 0; cc < nc; cc++)
                        o[p * plane + cc] = (float)d[cc * fr + (size_t)det_pix[p]];
            } else if (s->dtype == SSB4D_F32) {
                const float *d = (const float *)(const void *)s->data + frame0;
                for (size_t p = 0; p < n_pix; p++)
                    for (size_t cc = 0; cc < nc; cc++)
                        o[p * plane + cc] = d[cc * fr + (size_t)det_pix[p]];
            } else {
                for (size_t p = 0; p < n_pix; p++)
                    for (size_t cc = 0; cc < nc; cc++)
                        o[p * plane + cc] = (float)value_at(s, frame0 + cc * fr + (size_t)det_pix[p]);
            }
        }
    return SSB4D_OK;
}

void ssb_source_done_with(ssb4d_source *s, size_t pos0, size_t npos)
{
    if (s->parent && npos) {
        /* The parent's positions from the first to the last one of the range: the frames of
         * other columns in between are dropped too, which is harmless for a hint. */
        size_t vnx = s->shape[1], pnx = s->parent->shape[1], last = pos0 + npos - 1;
        size_t p0 = (s->origin[0] + pos0 / vnx) * pnx + s->origin[1] + pos0 % vnx;
        size_t p1 = (s->origin[0] + last / vnx) * pnx + s->origin[1] + last % vnx;
        ssb_source_done_with(s->parent, p0, p1 - p0 + 1);
        return;
    }
    if (!s->map || npos == 0)
        return; /* .qem: decoded blocks are never kept, the encoded file is what stays resident */
    size_t fr_bytes = s->shape[2] * s->shape[3] * ssb4d_dtype_bytes(s->dtype);
    uintptr_t base = (uintptr_t)s->map, lo = (uintptr_t)s->data + pos0 * fr_bytes,
              hi = lo + npos * fr_bytes, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    lo = (lo + page - 1) / page * page; /* only whole pages inside the range */
    hi = hi / page * page;
    if (hi > lo && lo >= base)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

ssb4d_status ssb4d_source_read_columns(ssb4d_source *s, const int32_t *det_pix, size_t n_pix,
                                       size_t row0, size_t nrows, float *out, ssb4d_err *err)
{
    return ssb_source_read_columns_mt(s, det_pix, n_pix, row0, nrows, out, 1, err);
}

ssb4d_status ssb4d_source_open_qem(const char *path, ssb4d_source **out, ssb4d_err *err)
{
    *out = NULL;
    qem_file *q = NULL;
    ssb4d_status st = qem_open(path, 1, 0, &q, err);
    if (st)
        return st;
    const qem_info *in = qem_get_info(q);
    st = check_any_shape(in->shape, err);
    if (st) {
        qem_close(q);
        return st;
    }
    ssb4d_source *s = calloc(1, sizeof *s);
    if (!s) {
        qem_close(q);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    memcpy(s->shape, in->shape, sizeof s->shape);
    s->dtype = in->dtype_bytes == 1 ? SSB4D_U8 : SSB4D_U16;
    s->qem = q;
    *out = s;
    return SSB4D_OK;
}

ssb4d_status ssb_source_open_frames(const char *path, const framesrc_opts *o, ssb4d_source **out,
                                    ssb4d_err *err)
{
    *out = NULL;
    framesrc *fs = NULL;
    ssb4d_status st = framesrc_open(path, o, &fs, err);
    size_t shape[4];
    if (!st) {
        framesrc_shape(fs, shape);
        st = check_shape(shape, err);
    }
    ssb4d_source *s = st ? NULL : calloc(1, sizeof *s);
    if (!st && !s)
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    if (st) {
        framesrc_close(fs);
        return st;
    }
    memcpy(s->shape, shape, sizeof s->shape);
    int b = framesrc_dtype_bytes(fs);
    s->dtype = framesrc_is_float(fs) ? SSB4D_F32 : b == 1 ? SSB4D_U8 : b == 2 ? SSB4D_U16 : SSB4D_U32;
    s->fs = fs;
    *out = s;
    return SSB4D_OK;
}

/* By content, not by name: .qem files start with "QEMDATA1", .npy files with "\x93NUMPY"; any
 * other format goes to the frame readers, which tell theirs by content and extension. */
ssb4d_status ssb4d_source_open(const char *path, ssb4d_source **out, ssb4d_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    unsigned char magic[8] = {0};
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got >= 6 && !memcmp(magic, "\x93NUMPY", 6))
        return ssb4d_source_open_npy(path, out, err);
    if (got >= 4 && !memcmp(magic, "QEMD", 4)) {
        ssb4d_status st = ssb4d_source_open_qem(path, out, err);
        if (!st && (st = check_shape((*out)->shape, err))) {
            ssb4d_source_close(*out);
            *out = NULL;
        }
        return st;
    }
    ssb4d_err ferr = {0};
    ssb4d_status st = ssb_source_open_frames(path, NULL, out, &ferr);
    if (st == SSB4D_EINVAL && strstr(ferr.msg, "raw binary"))
        return ssb_fail(err, SSB4D_EFORMAT, "%s looks like raw binary, whose shape only you know: "
                        "convert it with `ssb4d import %s --shape ... --dtype ... -o DATA.qem`", path, path);
    if (st && err) {
        *err = ferr;
        /* the reader's advice names import's flags: say where they go */
        if (strstr(ferr.msg, "--scan-shape") || strstr(ferr.msg, "--dataset"))
            snprintf(err->msg, sizeof err->msg, "%.*s (these flags belong to `ssb4d import`: import it "
                     "once, then use the .qem)", (int)(sizeof err->msg - 100), ferr.msg);
    }
    return st;
}

qem_file *ssb_source_qem(const ssb4d_source *s) { return s->qem; }
