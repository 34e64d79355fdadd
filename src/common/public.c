/* public.c — the small utilities the clients (the command line, the viewer) share with the
 * library, exported under ssb4d_ names (include/ssb4d.h, "For clients"). */
#include "common/atomic.h"
#include "common/clock.h"
#include "common/parallel.h"
#include "common/sha256.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

ssb4d_status ssb4d_err_set(ssb4d_err *err, ssb4d_status code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

double ssb4d_clock_s(void) { return ssb_clock_s(); }

const char *ssb4d_size_text(char buf[32], size_t bytes, size_t like, int up)
{
    double mib = (double)bytes / 1048576.0, gib = mib / 1024.0;
    if ((double)(like ? like : bytes) / 1073741824.0 >= 1)
        snprintf(buf, 32, "%.2f GiB", up ? ceil(gib * 100) / 100 : gib);
    else
        snprintf(buf, 32, "%.1f MiB", up ? ceil(mib * 10) / 10 : mib);
    return buf;
}

int ssb4d_threads_resolve(int requested) { return ssb_threads_resolve(requested); }

void ssb4d_sha256_hex(const void *data, size_t n, char hex[65]) { ssb_sha256_hex(data, n, hex); }

ssb4d_status ssb4d_afile_open(ssb4d_afile *a, const char *path, ssb4d_err *err)
{
    return ssb_afile_open(a, path, err);
}

ssb4d_status ssb4d_afile_finish(ssb4d_afile *a, ssb4d_status st, ssb4d_err *err)
{
    return ssb_afile_finish(a, st, err);
}

ssb4d_status ssb4d_write_text_atomic(const char *path, const char *text, ssb4d_err *err)
{
    return ssb_write_text_atomic(path, text, err);
}
