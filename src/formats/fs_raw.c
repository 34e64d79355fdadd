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
} contiguous_reader;

static ssb4d_status contiguous_read(framesrc *s, size_t pos0, size_t npos, uint32_t *out,
                                    ssb4d_err *err)
{
    contiguous_reader *r = s->impl;
    size_t P = s->shape[2] * s->shape[3], n = npos * P, b = (size_t)s->dtype_bytes;
    off_t at = (off_t)(r->offset + pos0 * P * b);
    ssb4d_status st = fs_pread_full(r->fd, (uint8_t *)out + n * (4 - b), n * b, at, s->path, err);
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

static void contiguous_close(void *impl)
{
    contiguous_reader *r = impl;
    if (r) {
        close(r->fd);
        free(r);
    }
}

static const framesrc_ops contiguous_ops = {contiguous_read, contiguous_close};

ssb4d_status fs_contiguous_open(const char *path, int *fd, size_t *size, ssb4d_err *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return ssb4d_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    ssb4d_status st = fs_file_size(*fd, path, size, err);
    if (st) {
        close(*fd);
        *fd = -1;
    }
    return st;
}

ssb4d_status fs_contiguous_attach(framesrc *s, int fd, size_t offset, int big_endian, ssb4d_err *err)
{
    contiguous_reader *r = calloc(1, sizeof *r);
    if (!r) {
        close(fd);
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory opening %s", s->path);
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    r->fd = fd;
    r->offset = offset;
    r->big_endian = big_endian && s->dtype_bytes > 1;
    s->ops = &contiguous_ops;
    s->impl = r;
    return SSB4D_OK;
}

ssb4d_status fs_raw_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    if (!o || !o->shape[0] || !o->shape[1] || !o->shape[2] || !o->shape[3])
        return ssb4d_fail(err, SSB4D_EINVAL, "%s: raw binary needs its --shape "
                          "SCAN_ROWS,SCAN_COLS,DET_ROWS,DET_COLS", path);
    if (o->dtype_bytes != 1 && o->dtype_bytes != 2 && o->dtype_bytes != 4)
        return ssb4d_fail(err, SSB4D_EINVAL, "%s: raw binary needs --dtype uint8, uint16 or uint32 "
                          "(got %d bytes per value)", path, o->dtype_bytes);
    ssb4d_status st = fs_check_shape(o->shape, path, err);
    if (st)
        return st;
    size_t count, data_bytes, need;
    if (!fs_mul(o->shape[0] * o->shape[1], o->shape[2] * o->shape[3], &count) ||
        !fs_mul(count, (size_t)o->dtype_bytes, &data_bytes) ||
        __builtin_add_overflow(data_bytes, o->offset, &need))
        return ssb4d_fail(err, SSB4D_EINVAL, "%s: shape and offset are too large", path);
    int fd;
    size_t size = 0;
    if ((st = fs_contiguous_open(path, &fd, &size, err)))
        return st;
    if (size != need) {
        close(fd);
        if (size < need)
            return ssb4d_fail(err, SSB4D_EFORMAT, "%s is %zu bytes, too short for the shape %zux%zux"
                              "%zux%zu of %d-byte values after an offset of %zu (%zu bytes needed, "
                              "%zu missing): check --shape, --dtype and --offset", path, size,
                              o->shape[0], o->shape[1], o->shape[2], o->shape[3], o->dtype_bytes,
                              o->offset, need, need - size);
        return ssb4d_fail(err, SSB4D_EFORMAT, "%s is %zu bytes, %zu more than the shape %zux%zux%zux"
                          "%zu of %d-byte values after an offset of %zu needs (%zu): check --shape, "
                          "--dtype and --offset (a header or footer of %zu bytes?)", path, size,
                          size - need, o->shape[0], o->shape[1], o->shape[2], o->shape[3],
                          o->dtype_bytes, o->offset, need, size - need);
    }
    memcpy(s->shape, o->shape, sizeof s->shape);
    s->dtype_bytes = o->dtype_bytes;
    s->format_name = "raw";
    if ((st = fs_contiguous_attach(s, fd, o->offset, o->big_endian, err)))
        return st;
    fs_meta_string(s, "raw_byte_order", o->big_endian && o->dtype_bytes > 1 ? "big-endian" : "little-endian");
    fs_meta_number(s, "raw_offset_bytes", (double)o->offset);
    return SSB4D_OK;
}
