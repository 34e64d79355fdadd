/* err.c — error lines. */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>

ssb4d_status ssb_fail(ssb4d_err *err, ssb4d_status code, const char *fmt, ...)
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

void ssb_err_clear(ssb4d_err *err)
{
    if (err) {
        err->code = SSB4D_OK;
        err->msg[0] = '\0';
    }
}

const char *ssb4d_status_name(ssb4d_status s)
{
    switch (s) {
    case SSB4D_OK: return "ok";
    case SSB4D_EINVAL: return "invalid argument";
    case SSB4D_ENOMEM: return "out of memory";
    case SSB4D_EIO: return "I/O error";
    case SSB4D_EFORMAT: return "bad format";
    case SSB4D_ENOTFOUND: return "not found";
    case SSB4D_EINTERNAL: return "internal error";
    case SSB4D_ECANCELLED: return "cancelled";
    }
    return "unknown";
}
