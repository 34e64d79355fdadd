/* public.c — the distributed context's calls for clients (include/ssb4d.h, "For clients"). */
#include "dist/dist.h"

ssb4d_status ssb4d_dist_bcast(const ssb4d_dist *d, void *buf, size_t bytes, int root, ssb4d_err *err)
{
    return dist_bcast(d, buf, bytes, root, err);
}
