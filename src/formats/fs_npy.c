/* fs_npy.c — .npy acquisitions: integer counts, C order, rank 4. The header is checked here; the
 * frames are read by the contiguous reader of fs_raw.c (pread straight into the caller's block,
 * widened in place), so the reader holds no buffer and the process footprint does not grow with
 * the file (the page cache keeps what the kernel wants). */
#include "formats/fs_internal.h"

#include "common/err.h"
#include "io/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Why a dtype is refused, in words a user can act on (NULL = accepted). */
static const char *npy_refusal(const char *d, int *bytes, int *is_signed, int *big_endian, int *is_float)
{
    char order = d[0], kind = d[1];
    int n = atoi(d + 2);
    *bytes = n;
    *is_signed = kind == 'i';
    *big_endian = order == '>';
    *is_float = kind == 'f';
    if (kind == 'f' && n == 4)
        return NULL; /* float32, either byte order */
    if (kind == 'f')
        return n == 8 ? "is float64: save it as float32 (a.astype(np.float32)); ssb4d never "
                        "quantises silently"
                      : "is a float type other than float32: save it as float32";
    if (kind == 'c')
        return "is complex: ssb4d reads counts or float32 intensities";
    if (kind == 'b')
        return "is boolean: convert to uint8 counts first";
    if (kind != 'u' && kind != 'i')
        return "is not an integer type: counts must be uint8, uint16 or uint32";
    if (n != 1 && n != 2 && n != 4)
        return n == 8 ? "is 64-bit: narrow it to uint32 (or smaller) counts first"
                      : "has an unsupported width: counts must be uint8, uint16 or uint32";
    if (order == '>' && n > 1)
        return "is big-endian: save it little-endian (a.astype(a.dtype.newbyteorder('<')))";
    if (order != '<' && order != '|' && order != '=' && order != '>')
        return "has an unknown byte order";
    return NULL;
}

ssb4d_status fs_npy_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    ssb4d_npy_info info;
    ssb4d_status st = ssb_npy_read_header(f, path, &info, err);
    fclose(f);
    if (st)
        return st;
    int bytes, is_signed, big_endian, is_float;
    const char *why = npy_refusal(info.descr, &bytes, &is_signed, &big_endian, &is_float);
    if (why)
        return ssb_fail(err, SSB4D_EFORMAT, "%s: dtype '%s' %s", path, info.descr, why);
    if (info.fortran_order)
        return ssb_fail(err, SSB4D_EFORMAT, "%s: the array is in Fortran order; save it in C order "
                        "(np.save(path, np.ascontiguousarray(a)))", path);
    if (info.ndim != 4)
        return ssb_fail(err, SSB4D_EFORMAT, "%s: the array has rank %d; ssb4d needs 4 axes "
                        "(scan_row, scan_col, det_row, det_col)", path, info.ndim);
    if ((st = fs_check_shape(info.shape, path, err)) ||
        (st = fs_check_det_opts(o, info.shape[2], info.shape[3], path, err)))
        return st;
    if (o && o->shape[0] && o->shape[1] && (o->shape[0] != info.shape[0] || o->shape[1] != info.shape[1]))
        return ssb_fail(err, SSB4D_EINVAL, "%s: the array's scan is %zux%zu, not the %zux%zu asked",
                        path, info.shape[0], info.shape[1], o->shape[0], o->shape[1]);
    size_t count, data_bytes, need;
    if (!fs_mul(info.shape[0] * info.shape[1], info.shape[2] * info.shape[3], &count) ||
        !fs_mul(count, (size_t)bytes, &data_bytes) ||
        __builtin_add_overflow(data_bytes, info.header_bytes, &need))
        return ssb_fail(err, SSB4D_EFORMAT, "%s: shape is too large", path);
    int fd;
    size_t size = 0;
    if ((st = fs_contiguous_open(path, &fd, &size, err)))
        return st;
    if (size != need) {
        close(fd);
        if (size < need)
            return ssb_fail(err, SSB4D_EFORMAT, "%s is truncated: %zu bytes, its header describes "
                            "%zu (%zu missing)", path, size, need, need - size);
        return ssb_fail(err, SSB4D_EFORMAT, "%s has %zu extra bytes after the array its header "
                        "describes (%zu bytes expected): not a plain .npy", path, size - need, need);
    }
    memcpy(s->shape, info.shape, sizeof s->shape);
    s->dtype_bytes = bytes;
    s->dtype_signed = is_signed;
    s->is_float = is_float;
    s->format_name = "numpy";
    if ((st = fs_contiguous_attach(s, fd, info.header_bytes, big_endian, err)))
        return st;
    fs_meta_string(s, "npy_descr", info.descr);
    return SSB4D_OK;
}
