/* err.h — filling ssb4d_err with one formatted line. */
#ifndef SSB4D_COMMON_ERR_H
#define SSB4D_COMMON_ERR_H
#include "ssb4d_advanced.h"

/* Sets err (if not NULL) and returns code, so callers can `return ssb_fail(err, ...)`. */
ssb4d_status ssb_fail(ssb4d_err *err, ssb4d_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ssb_err_clear(ssb4d_err *err);
#endif
