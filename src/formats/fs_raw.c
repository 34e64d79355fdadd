/* fs_raw.c — headerless binary: the user states shape, unsigned width, byte order and an
 * optional offset; the file size must then match exactly (a wrong --shape or --dtype almost
 * always shows up as a size mismatch, so an exact match is the check that protects the user).
 * Also the reader of every format whose frames lie contiguously in one file (.npy). */
#include "formats/fs_internal.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int fd;
    size_t offset;
    int big_endian;
    size_t stride; /* bytes from one frame to the next (= a frame's bytes when packed) */
} contiguous_reader;

/* The values of frames [pos0, pos0+npos) packed at the END of out's npos*P*4 bytes, each
 * dtype_bytes wide: one pread when the frames are packed, one per frame otherwise. */
static ssb4d_status contiguous_load(framesrc *s, size_t pos0, size_t npos, void *out, ssb4d_err *err)
{
    contiguous_reader *r = s->impl;
    size_t P = s->shape[2] * s->shape[3], n = npos * P, b = (size_t)s->dtype_bytes, fb = P * b;
    uint8_t *dst = (uint8_t *)out + n * (4 - b);
    if (r->stride == fb)
        return fs_pread_full(r->fd, dst, n * b, (off_t)(r->offset + pos0 * fb), s->path, err);
    for (size_t f = 0; f < npos; f++) {
        ssb4d_status st = fs_pread_full(r->fd, dst + f * fb, fb, (off_t)(r->offset + (pos0 + f) * r->stride),
                                        s->path, err);
        if (st)
            return st;
    }
    return SSB4D_OK;
}

static ssb4d_status contiguous_read(framesrc *s, size_t pos0, size_t npos, uint32_t *out,
                                    ssb4d_err *err)
{
    contiguous_reader *r = s->impl;
    size_t n = npos * s->shape[2] * s->shape[3];
    ssb4d_status st = contiguous_load(s, pos0, npos, out, err);
    if (st)
        return st;
    fs_widen_tail(out, n, s->dtype_bytes, r->big_endian, s->dtype_signed);
    if (s->dtype_signed) {
        size_t bad = fs_first_negative(out, n);
        if (bad != (size_t)-1)
            return fs_negative_error(s, pos0, bad, (int32_t)out[bad], err);
    }
    return SSB4D_OK;
}

static ssb4d_status contiguous_read_f32(framesrc *s, size_t pos0, size_t npos, float *out,
                                        ssb4d_err *err)
{
    contiguous_reader *r = s->impl;
    size_t n = npos * s->shape[2] * s->shape[3];
    ssb4d_status st = contiguous_load(s, pos0, npos, out, err);
    if (!st && r->big_endian) {
        uint32_t *u = (uint32_t *)(void *)out;
        for (size_t i = 0; i < n; i++)
            u[i] = __builtin_bswap32(u[i]);
    }
    return st;
}

static void contiguous_close(void *impl)
{
    contiguous_reader *r = impl;
    if (r) {
        close(r->fd);
        free(r);
    }
}

static const framesrc_ops contiguous_ops = {contiguous_read, contiguous_close, NULL};
static const framesrc_ops contiguous_f32_ops = {NULL, contiguous_close, contiguous_read_f32};

ssb4d_status fs_contiguous_open(const char *path, int *fd, size_t *size, ssb4d_err *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    ssb4d_status st = fs_file_size(*fd, path, size, err);
    if (st) {
        close(*fd);
        *fd = -1;
    }
    return st;
}

ssb4d_status fs_contiguous_attach(framesrc *s, int fd, size_t offset, int big_endian, ssb4d_err *err)
{
    return fs_contiguous_attach_strided(s, fd, offset, big_endian,
                                        s->shape[2] * s->shape[3] * (size_t)s->dtype_bytes, err);
}

ssb4d_status fs_contiguous_attach_strided(framesrc *s, int fd, size_t offset, int big_endian,
                                          size_t frame_stride, ssb4d_err *err)
{
    if (frame_stride < s->shape[2] * s->shape[3] * (size_t)s->dtype_bytes || (s->is_float && s->dtype_bytes != 4)) {
        close(fd);
        return ssb_fail(err, SSB4D_EINTERNAL, "%s: bad frame layout", s->path);
    }
    contiguous_reader *r = calloc(1, sizeof *r);
    if (!r) {
        close(fd);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", s->path);
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    r->fd = fd;
    r->offset = offset;
    r->big_endian = big_endian && s->dtype_bytes > 1;
    r->stride = frame_stride;
    s->ops = s->is_float ? &contiguous_f32_ops : &contiguous_ops;
    s->impl = r;
    return SSB4D_OK;
}

ssb4d_status fs_raw_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    if (!o || !o->shape[0] || !o->shape[1] || !o->shape[2] || !o->shape[3])
        return ssb_fail(err, SSB4D_EINVAL, "%s: raw binary needs its --shape "
                        "SCAN_ROWS,SCAN_COLS,DET_ROWS,DET_COLS", path);
    if (o->dtype_bytes != 1 && o->dtype_bytes != 2 && o->dtype_bytes != 4)
        return ssb_fail(err, SSB4D_EINVAL, "%s: raw binary needs --dtype uint8, uint16, uint32 or "
                        "float32 (got %d bytes per value)", path, o->dtype_bytes);
    if (o->dtype_float && o->dtype_bytes != 4)
        return ssb_fail(err, SSB4D_EINVAL, "%s: float values must be float32", path);
    ssb4d_status st = fs_check_shape(o->shape, path, err);
    if (st)
        return st;
    size_t count, data_bytes, need;
    if (!fs_mul(o->shape[0] * o->shape[1], o->shape[2] * o->shape[3], &count) ||
        !fs_mul(count, (size_t)o->dtype_bytes, &data_bytes) ||
        __builtin_add_overflow(data_bytes, o->offset, &need))
        return ssb_fail(err, SSB4D_EINVAL, "%s: shape and offset are too large", path);
    int fd;
    size_t size = 0;
    if ((st = fs_contiguous_open(path, &fd, &size, err)))
        return st;
    if (size != need) {
        close(fd);
        if (size < need)
            return ssb_fail(err, SSB4D_EFORMAT, "%s is %zu bytes, too short for the shape %zux%zux"
                            "%zux%zu of %d-byte values after an offset of %zu (%zu bytes needed, "
                            "%zu missing): check --shape, --dtype and --offset", path, size,
                            o->shape[0], o->shape[1], o->shape[2], o->shape[3], o->dtype_bytes,
                            o->offset, need, need - size);
        return ssb_fail(err, SSB4D_EFORMAT, "%s is %zu bytes, %zu more than the shape %zux%zux%zux"
                        "%zu of %d-byte values after an offset of %zu needs (%zu): check --shape, "
                        "--dtype and --offset (a header or footer of %zu bytes?)", path, size,
                        size - need, o->shape[0], o->shape[1], o->shape[2], o->shape[3],
                        o->dtype_bytes, o->offset, need, size - need);
    }
    memcpy(s->shape, o->shape, sizeof s->shape);
    s->dtype_bytes = o->dtype_bytes;
    s->is_float = o->dtype_float != 0;
    s->format_name = "raw";
    if ((st = fs_contiguous_attach(s, fd, o->offset, o->big_endian, err)))
        return st;
    fs_meta_string(s, "raw_byte_order", o->big_endian && o->dtype_bytes > 1 ? "big-endian" : "little-endian");
    fs_meta_number(s, "raw_offset_bytes", (double)o->offset);
    return SSB4D_OK;
}
