/* atomic.c — temp file + rename. */
#include "common/atomic.h"

#include "common/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *ssb_temp_name(const char *path, const char *suffix)
{
    size_t n = strlen(path) + strlen(suffix) + 32;
    char *t = malloc(n);
    if (t)
        snprintf(t, n, "%s.tmp%d%s", path, (int)getpid(), suffix);
    return t;
}

ssb4d_status ssb_afile_open(ssb4d_afile *a, const char *path, ssb4d_err *err)
{
    memset(a, 0, sizeof *a);
    a->tmp = ssb_temp_name(path, "");
    a->path = strdup(path);
    if (!a->tmp || !a->path) {
        free(a->tmp);
        free(a->path);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    a->f = fopen(a->tmp, "wb");
    if (!a->f) {
        ssb4d_status st = ssb_fail(err, SSB4D_EIO, "cannot write %s: %s", path, strerror(errno));
        free(a->tmp);
        free(a->path);
        a->tmp = a->path = NULL;
        return st;
    }
    return SSB4D_OK;
}

ssb4d_status ssb_afile_finish(ssb4d_afile *a, ssb4d_status st, ssb4d_err *err)
{
    if (!a->f)
        return st;
    if (!st && (fflush(a->f) != 0 || ferror(a->f) || fsync(fileno(a->f)) != 0))
        st = ssb_fail(err, SSB4D_EIO, "cannot write %s: %s", a->path, strerror(errno));
    if (fclose(a->f) != 0 && !st)
        st = ssb_fail(err, SSB4D_EIO, "cannot write %s: %s", a->path, strerror(errno));
    a->f = NULL;
    if (!st && rename(a->tmp, a->path) != 0)
        st = ssb_fail(err, SSB4D_EIO, "cannot rename to %s: %s", a->path, strerror(errno));
    if (st)
        unlink(a->tmp);
    free(a->tmp);
    free(a->path);
    a->tmp = a->path = NULL;
    return st;
}

ssb4d_status ssb_write_text_atomic(const char *path, const char *text, ssb4d_err *err)
{
    ssb4d_afile a;
    ssb4d_status st = ssb_afile_open(&a, path, err);
    if (st)
        return st;
    size_t n = strlen(text);
    if (fwrite(text, 1, n, a.f) != n || fputc('\n', a.f) == EOF)
        st = ssb_fail(err, SSB4D_EIO, "cannot write %s: %s", path, strerror(errno));
    return ssb_afile_finish(&a, st, err);
}
