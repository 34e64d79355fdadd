/* atomic.h — output files appear whole or not at all: write "<path>.tmp<pid>", flush, fsync,
 * rename over path; on any failure the temporary file is removed. */
#ifndef SSB4D_COMMON_ATOMIC_H
#define SSB4D_COMMON_ATOMIC_H
#include "ssb4d_advanced.h"

#include <stdio.h>

/* ssb4d_afile is public (include/ssb4d.h): the clients write their outputs with it too. */

ssb4d_status ssb_afile_open(ssb4d_afile *a, const char *path, ssb4d_err *err);
/* st == SSB4D_OK: flush, fsync, close and rename; otherwise close and remove the temporary file.
 * Returns the final status (an I/O error here is reported through err). */
ssb4d_status ssb_afile_finish(ssb4d_afile *a, ssb4d_status st, ssb4d_err *err);
/* Whole text file (a newline is appended). */
ssb4d_status ssb_write_text_atomic(const char *path, const char *text, ssb4d_err *err);
/* "<path>.tmp<pid><suffix>" for writers that open by name (caller frees), NULL if out of memory. */
char *ssb_temp_name(const char *path, const char *suffix);
#endif
