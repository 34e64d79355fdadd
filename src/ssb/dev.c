/* dev.c — the SSB passes of a G with a device copy (dev.h): contexts on the host, sums on the
 * device, the object's last step (ssb_object_fill, ssb_object_transform) on the host. */
#include "ssb/dev.h"

#include "common/err.h"
#include "dist/dist.h"

#include <stdlib.h>
#include <string.h>

int ssb_dev_serves(const struct ssb4d_G *G, const ssb4d_ssb_opts *o)
{
    return G->dev && (!o || o->path != SSB4D_PATH_COMPLEX);
}

static ssb4d_status contexts(const struct ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                             const ssb4d_thick *thick, size_t n, int f, ssb_ctx **out, ssb4d_err *err)
{
    ssb_ctx *c = calloc(n, sizeof *c);
    if (!c)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = SSB4D_OK;
    size_t made = 0;
    for (; made < n; made++)
        if ((st = ssb_ctx_init(&c[made], G, g, &ab[made], thick ? &thick[made] : NULL, f, err)))
            break;
    if (st) {
        for (size_t j = 0; j < made; j++)
            ssb_ctx_free(&c[j]);
        free(c);
        return st;
    }
    *out = c;
    return SSB4D_OK;
}

static void contexts_free(ssb_ctx *c, size_t n)
{
    for (size_t j = 0; c && j < n; j++)
        ssb_ctx_free(&c[j]);
    free(c);
}

/* The object from set 0's sum (acc, consumed) as ssb4d_object finishes it. */
static ssb4d_status finish_object(const ssb_ctx *c, size_t n_bf, double complex *acc, ssb4d_mem *mem, float *object,
                                  float *phase, ssb4d_err *err)
{
    cfloat *F = ssb4d_mem_alloc(mem, c->nyf * c->nxf * sizeof(cfloat), "object spectrum", err);
    if (!F)
        return SSB4D_ENOMEM;
    ssb_object_fill(c->nyf, c->nxf, c->dc, acc, n_bf, 1, F);
    ssb4d_status st = ssb_object_transform(c->nyf, c->nxf, F, object, phase, err);
    ssb4d_mem_free(mem, F, st ? 0 : 1);
    return st;
}

ssb4d_status ssb_dev_phase_stack(const struct ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                                 const ssb4d_thick *thick, size_t n, int f, ssb4d_mem *mem, double *loss,
                                 float *mean_phase, float *object, float *phase, ssb4d_err *err)
{
    if (n == 0)
        return SSB4D_OK;
    ssb_ctx *c = NULL;
    ssb4d_status st = contexts(G, g, ab, thick, n, f, &c, err);
    if (st) /* a distributed G: the other ranks' pass begins with an agreement (dist.h) */
        return G->dist ? dist_agree(G->dist, st, err) : st;
    const int fusing = object || phase;
    double complex *acc = NULL;
    size_t nacc = c[0].nyf * (c[0].nxf / 2 + 1);
    if (fusing && !(acc = ssb4d_mem_calloc(mem, nacc * sizeof *acc, "object sum", err)))
        st = SSB4D_ENOMEM;
    if (!st)
        st = G->dev_ops->phases(G->dev, G, c, n, loss, mean_phase, acc, mem, err);
    else if (G->dist)
        st = dist_agree(G->dist, st, err);
    if (!st && fusing)
        st = finish_object(&c[0], G->n_bf, acc, mem, object, phase, err);
    ssb4d_mem_free(mem, acc, 0);
    contexts_free(c, n);
    return st;
}
