/* npy.c — .npy header parsing and writing. The parser is strict and bounded: it is fed files
 * from users and must refuse anything odd with a message rather than guess. */
#include "io/npy.h"

#include "common/atomic.h"
#include "common/err.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NPY_MAX_HEADER 65536

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && isspace((unsigned char)*p))
        p++;
    return p;
}

/* Finds 'key' at top level of the dict text and returns the position just after its colon. */
static const char *find_key(const char *dict, const char *end, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = dict; p + kl + 2 < end; p++) {
        if ((*p == '\'' || *p == '"') && p[kl + 1] == *p && memcmp(p + 1, key, kl) == 0) {
            const char *q = skip_ws(p + kl + 2, end);
            if (q < end && *q == ':')
                return skip_ws(q + 1, end);
        }
    }
    return NULL;
}

static size_t descr_item_bytes(const char *d)
{
    /* descr = byteorder + kind + size, e.g. <u2 */
    if (strlen(d) < 3)
        return 0;
    char *e;
    long n = strtol(d + 2, &e, 10);
    if (*e || n <= 0 || n > 16)
        return 0;
    return (size_t)n;
}

ssb4d_status ssb_npy_parse(const unsigned char *buf, size_t len, ssb4d_npy_info *info,
                           ssb4d_err *err)
{
    memset(info, 0, sizeof *info);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return ssb_fail(err, SSB4D_EFORMAT, "not a .npy file (bad magic)");
    int major = buf[6];
    size_t hlen, pre;
    if (major == 1) {
        hlen = buf[8] | ((size_t)buf[9] << 8);
        pre = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return ssb_fail(err, SSB4D_EFORMAT, "truncated .npy header");
        hlen = buf[8] | ((size_t)buf[9] << 8) | ((size_t)buf[10] << 16) | ((size_t)buf[11] << 24);
        pre = 12;
    } else {
        return ssb_fail(err, SSB4D_EFORMAT, "unsupported .npy version %d", major);
    }
    if (hlen > NPY_MAX_HEADER || pre + hlen > len)
        return ssb_fail(err, SSB4D_EFORMAT, "truncated or oversized .npy header (%zu bytes)", hlen);
    const char *dict = (const char *)buf + pre, *end = dict + hlen;
    const char *p = find_key(dict, end, "descr");
    if (!p || p >= end || (*p != '\'' && *p != '"'))
        return ssb_fail(err, SSB4D_EFORMAT, ".npy header has no descr");
    char quote = *p++;
    size_t i = 0;
    while (p < end && *p != quote && i + 1 < sizeof info->descr)
        info->descr[i++] = *p++;
    if (p >= end || *p != quote)
        return ssb_fail(err, SSB4D_EFORMAT, ".npy descr is not a simple dtype (structured arrays are not supported)");
    info->item_bytes = descr_item_bytes(info->descr);
    if (!info->item_bytes)
        return ssb_fail(err, SSB4D_EFORMAT, ".npy dtype '%s' is not supported", info->descr);
    p = find_key(dict, end, "fortran_order");
    if (!p)
        return ssb_fail(err, SSB4D_EFORMAT, ".npy header has no fortran_order");
    if (end - p >= 4 && memcmp(p, "True", 4) == 0)
        info->fortran_order = 1;
    else if (end - p >= 5 && memcmp(p, "False", 5) == 0)
        info->fortran_order = 0;
    else
        return ssb_fail(err, SSB4D_EFORMAT, ".npy fortran_order is neither True nor False");
    p = find_key(dict, end, "shape");
    if (!p || p >= end || *p != '(')
        return ssb_fail(err, SSB4D_EFORMAT, ".npy header has no shape tuple");
    p++;
    int nd = 0;
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end)
            return ssb_fail(err, SSB4D_EFORMAT, ".npy shape tuple is not closed");
        if (*p == ')')
            break;
        if (!isdigit((unsigned char)*p))
            return ssb_fail(err, SSB4D_EFORMAT, ".npy shape holds a non-integer");
        if (nd >= 8)
            return ssb_fail(err, SSB4D_EFORMAT, ".npy array has more than 8 dimensions");
        /* Digits are parsed by hand: the header is not NUL-terminated, so strtoull could read
         * past its end when the last digit is the last byte (found by fuzz_npy). */
        unsigned long long v = 0;
        while (p < end && isdigit((unsigned char)*p)) {
            v = v * 10 + (unsigned long long)(*p++ - '0');
            if (v > ((unsigned long long)1 << 48))
                return ssb_fail(err, SSB4D_EFORMAT, ".npy shape entry is absurd");
        }
        info->shape[nd++] = (size_t)v;
        p = skip_ws(p, end);
        if (p < end && *p == ',')
            p++;
    }
    info->ndim = nd;
    info->header_bytes = pre + hlen;
    return SSB4D_OK;
}

ssb4d_status ssb_npy_read_header(FILE *f, const char *path, ssb4d_npy_info *info,
                                 ssb4d_err *err)
{
    unsigned char *buf = malloc(NPY_MAX_HEADER + 16);
    if (!buf)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory reading %s", path);
    size_t n = fread(buf, 1, NPY_MAX_HEADER + 16, f);
    rewind(f);
    ssb4d_status st = ssb_npy_parse(buf, n, info, err);
    free(buf);
    if (st && err) {
        char tmp[sizeof err->msg];
        memcpy(tmp, err->msg, sizeof tmp);
        snprintf(err->msg, sizeof err->msg, "%.200s: %.300s", path, tmp);
    }
    return st;
}

ssb4d_status ssb_npy_write_header(FILE *f, const char *descr, int ndim, const size_t *shape,
                                  ssb4d_err *err)
{
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%zu%s", shape[i],
                      (ndim == 1 || i + 1 < ndim) ? ", " : "");
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    size_t total = 10 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    size_t hlen = padded - 10;
    pre[8] = (unsigned char)(hlen & 0xff);
    pre[9] = (unsigned char)(hlen >> 8);
    if (fwrite(pre, 1, 10, f) != 10 || fwrite(dict, 1, (size_t)n, f) != (size_t)n)
        return ssb_fail(err, SSB4D_EIO, "could not write .npy header");
    for (size_t i = 10 + (size_t)n; i < padded - 1; i++)
        fputc(' ', f);
    fputc('\n', f);
    return ferror(f) ? ssb_fail(err, SSB4D_EIO, "could not write .npy header") : SSB4D_OK;
}

ssb4d_status ssb_npy_save(const char *path, const char *descr, int ndim, const size_t *shape,
                          const void *data, ssb4d_err *err)
{
    size_t count = 1, item = descr_item_bytes(descr);
    for (int i = 0; i < ndim; i++)
        count *= shape[i];
    ssb4d_afile a;
    ssb4d_status st = ssb_afile_open(&a, path, err);
    if (st)
        return st;
    st = ssb_npy_write_header(a.f, descr, ndim, shape, err);
    if (!st && fwrite(data, item, count, a.f) != count)
        st = ssb_fail(err, SSB4D_EIO, "cannot write %s: %s", path, strerror(errno));
    return ssb_afile_finish(&a, st, err);
}

ssb4d_status ssb_npy_load(const char *path, ssb4d_npy_info *info, void **data, ssb4d_err *err)
{
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    ssb4d_status st = ssb_npy_read_header(f, path, info, err);
    if (st) {
        fclose(f);
        return st;
    }
    size_t count = 1;
    for (int i = 0; i < info->ndim; i++)
        count *= info->shape[i];
    fseek(f, 0, SEEK_END);
    long fsize = ftell(f);
    if (fsize < 0 || (size_t)fsize < info->header_bytes + count * info->item_bytes) {
        fclose(f);
        return ssb_fail(err, SSB4D_EFORMAT, "%s is truncated: header promises %zu bytes of data",
                        path, count * info->item_bytes);
    }
    fseek(f, (long)info->header_bytes, SEEK_SET);
    *data = malloc(count * info->item_bytes + 1);
    if (!*data) {
        fclose(f);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory loading %s", path);
    }
    if (fread(*data, info->item_bytes, count, f) != count) {
        free(*data);
        *data = NULL;
        fclose(f);
        return ssb_fail(err, SSB4D_EIO, "short read on %s", path);
    }
    fclose(f);
    return SSB4D_OK;
}
