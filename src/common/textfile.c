/* textfile.c — whole-file reads sized by fstat, refused beyond a cap (hostile inputs). */
#include "common/textfile.h"

#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

ssb4d_status ssb_read_text_file(const char *path, size_t max_bytes, const char *what, char **out,
                                size_t *len, ssb4d_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s %s: %s", what, path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return ssb_fail(err, SSB4D_EIO, "%s %s is not a regular file", what, path);
    }
    if ((unsigned long long)sb.st_size > max_bytes) {
        fclose(f);
        return ssb_fail(err, SSB4D_EFORMAT, "%s %s is larger than %zu MiB", what, path, max_bytes >> 20);
    }
    size_t size = (size_t)sb.st_size;
    char *buf = malloc(size + 1);
    size_t n = buf ? fread(buf, 1, size, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory reading %s", path);
    if (bad || n != size) {
        free(buf);
        return ssb_fail(err, SSB4D_EIO, "cannot read %s %s", what, path);
    }
    buf[n] = 0;
    if (len)
        *len = n;
    *out = buf;
    return SSB4D_OK;
}
