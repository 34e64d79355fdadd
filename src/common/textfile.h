/* textfile.h — reading a whole small text file (JSON) with a size cap. */
#ifndef SSB4D_COMMON_TEXTFILE_H
#define SSB4D_COMMON_TEXTFILE_H
#include "ssb4d_advanced.h"

/* *out = NUL-terminated contents (caller frees; len may be NULL). EIO when it cannot be read,
 * EFORMAT when it is larger than max_bytes; `what` names the file in messages. */
ssb4d_status ssb_read_text_file(const char *path, size_t max_bytes, const char *what, char **out,
                                size_t *len, ssb4d_err *err);
#endif
