/* public.c — the session folder's calls for clients (include/ssb4d.h): backend queries. */
#include "session/backend.h"

ssb4d_status ssb4d_backend_check(ssb4d_backend_kind kind, const char **name, ssb4d_err *err)
{
    const ssb_backend *bk = NULL;
    ssb4d_status st = session_backend_select(kind, &bk, err);
    if (!st && name)
        *name = bk->name;
    return st;
}
