/* backend.c — the CUDA backend's session entries (ssb_backend_cuda, device.c; src/ssb/backend.h).
 * From a whole .qem of counts the session starts on the GPU (cuda/gstart.h, issue 41): the
 * streams decoded there, the calibration's sums and G built there, G's planes staying on the
 * device (and copied back to the host planes, which the CPU-side passes read: the fit's parallax
 * start, the complex path, hashes). Other inputs, or a GPU that cannot hold the start, take the
 * CPU's way: G built as the CPU builds it, then its planes go up (cuda_G_attach). Either way G
 * carries the CUDA table: every pass over it (the fit's candidate batches, previews, the object,
 * releases, region refits) runs on the GPU. */
#include "cuda/backend.h"
#include "common/err.h"
#include "cuda/cuda.h"
#include "cuda/gstart.h"
#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>

/* The GPU's start could not run (no room, a CUDA error): said on one line, then the CPU's way. */
static int start_falls_back(ssb4d_status st, const char *what, const ssb4d_err *e)
{
    if (st != SSB4D_ENOMEM && st != SSB4D_EIO)
        return 0;
    fprintf(stderr, "ssb4d: %s on the GPU failed (%s); doing it on the CPU\n", what, e->msg);
    return 1;
}

/* The GPU's start for src: a whole .qem of counts, unless SSB4D_CPU_START asks for the CPU's
 * (for comparisons). The calibration and the G build ask the same question. */
static int device_start(ssb4d_source *src) { return cuda_start_takes(src) && !getenv("SSB4D_CPU_START"); }

ssb4d_status cuda_backend_calibrate(ssb4d_source *src, const ssb4d_calib_params *p, void **keep,
                                    ssb4d_calibration *out, ssb4d_err *err)
{
    if (!device_start(src))
        return ssb4d_calibrate(src, p, out, err);
    ssb4d_err e = {0};
    ssb4d_status st = cuda_calibrate_qem(src, p, NULL, (cuda_start **)keep, out, &e);
    if (start_falls_back(st, "the calibration", &e))
        return ssb4d_calibrate(src, p, out, err);
    if (st && err)
        *err = e;
    return st;
}

/* G on the device from a .qem (all planes resident in float32, one process), else the CPU's. */
static ssb4d_status device_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                                  const ssb4d_gbuild_opts *o, void **keep, ssb4d_mem *mem, ssb4d_G **out,
                                  ssb4d_err *err)
{
    if (device_start(src) && !o->dist && !o->half) {
        ssb4d_err e = {0};
        cuda_start_opts so = {0, 0, 1};
        ssb4d_status st = cuda_gbuild_qem(src, g, bf_pix, n_bf, o, &so, (cuda_start **)keep, mem, out, &e);
        if (!st || (st != SSB4D_EINVAL && !start_falls_back(st, "the G build", &e))) {
            if (st && err)
                *err = e;
            return st;
        }
        /* EINVAL: G's planes are not all resident (the plan streams some): the CPU builds it */
    }
    ssb4d_status st = ssb4d_gbuild(src, g, bf_pix, n_bf, o, mem, out, err);
    if (!st && !(*out)->store.dev)
        st = cuda_G_attach(*out, mem, err);
    if (st && *out) {
        ssb4d_G_free(*out);
        *out = NULL;
    }
    return st;
}

static ssb4d_status check(const ssb_device_check *chk, const ssb4d_G *G, ssb4d_err *err)
{
    return chk ? chk->fn(&ssb_backend_cuda, G, chk->ctx, err) : SSB4D_OK;
}

ssb4d_status cuda_backend_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                                 const ssb4d_gbuild_opts *o, const ssb_device_check *chk, void **keep,
                                 ssb4d_mem *mem, ssb4d_G **out, ssb4d_err *err)
{
    if (!o->dist) { /* one process: G on the device (built there from a .qem), then the passes' check */
        ssb4d_status st = device_gbuild(src, g, bf_pix, n_bf, o, keep, mem, out, err);
        if (!st && (st = check(chk, *out, err))) {
            ssb4d_G_free(*out);
            *out = NULL;
        }
        return st;
    }
    ssb4d_status st = ssb4d_gbuild(src, g, bf_pix, n_bf, o, mem, out, err);
    if (st)
        return st;
    st = check(chk, *out, err); /* before the copy goes up: the check reads the device's free memory */
    if (!st)
        st = cuda_G_attach(*out, mem, err);
    if ((*out)->dist) /* every rank's device copy is made, or the job stops on every rank */
        st = dist_agree((*out)->dist, st, err);
    if (st) {
        ssb4d_G_free(*out);
        *out = NULL;
    }
    return st;
}

void cuda_backend_keep_free(void *keep) { cuda_start_free(keep); }
