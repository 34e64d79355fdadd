/* backend_cuda.c — the CUDA backend (src/session/backend.h). From a whole .qem of counts the
 * session starts on the GPU (cuda/gstart.h, issue 41): the streams decoded there, the
 * calibration's sums and G built there, G's planes staying on the device (and copied back to the
 * host planes, which the CPU-side passes read: the fit's parallax start, the complex path,
 * hashes). Other inputs, or a GPU that cannot hold the start, take the CPU's way: G built as the
 * CPU builds it, then its planes go up (cuda_G_attach). Either way G carries the CUDA pass table
 * (src/ssb/backend.h): every pass over it (the fit's candidate batches, previews, the object,
 * releases, region refits) runs on the GPU. */
#include "session/backend.h"

#ifdef SSB4D_HAVE_CUDA /* CMakeLists.txt: the CUDA backend is in this build */
#include "common/err.h"
#include "cuda/cuda.h"
#include "cuda/gstart.h"
#include "cuda/memory.h"
#include "dist/dist.h"
#include "gbuild/gbuild.h"
#include "plan/budget.h"

#include <stdio.h>
#include <stdlib.h>

/* The session's device peak on G (plan/device_model.h, with G's own grid and the planes this
 * process holds) against the budget, or the device's free memory when none is given (or when
 * less is free). SSB4D_ENOMEM with one line: the need, G's part, the work buffers' part, the
 * budget and what to do. */
static ssb4d_status device_check(const ssb4d_G *G, const session_device *dev, ssb4d_err *err)
{
    dev_session_in in = dev->model;
    size_t here = 0;
    for (size_t ib = 0; ib < G->n_bf; ib++) /* cuda_G_attach's slots: this rank's stored planes */
        here += G_stored(G, ib) && G->plane_of[ib] != G_REMOTE;
    in.ny = G->ny, in.nx = G->nx, in.n_bf = G->n_bf, in.n_stored = here ? here : 1;
    in.fft_work = cuda_fft_work_bytes;
    dev_model m;
    dev_model_session(&in, &m);
    const size_t need = dev_model_bytes(&m);
    size_t fr = 0, tot = 0, budget = dev->budget;
    const int known = cuda_device_memory(&fr, &tot) == 0;
    int is_free = 0;
    if (known && (!budget || fr < budget))
        budget = fr, is_free = 1;
    if (!budget || need <= budget)
        return SSB4D_OK;
    char b[4][32], lim[96];
    snprintf(lim, sizeof lim, is_free ? "only %s is free on the GPU" : "the budget (--device-memory) is %s",
             plan_size_text(b[3], budget, 0));
    return ssb_fail(err, SSB4D_ENOMEM,
                    "the CUDA backend needs %s of GPU memory for this session (G's planes %s, work buffers and "
                    "cuFFT's work area %s) but %s: use --backend cpu or a GPU with more memory (half-precision "
                    "planes on the GPU are not available yet; ssb4d plan --backend cuda shows the stages)",
                    plan_size_text(b[0], need, 1), plan_size_text(b[1], m.planes, 1),
                    plan_size_text(b[2], need - m.planes, 1), lim);
}

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

static ssb4d_status cuda_calibrate(ssb4d_source *src, const ssb4d_calib_params *p, void **keep,
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

static ssb4d_status cuda_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                                const ssb4d_gbuild_opts *o, const session_device *dev, void **keep, ssb4d_mem *mem,
                                ssb4d_G **out, ssb4d_err *err)
{
    if (!o->dist) { /* one process: G on the device (built there from a .qem), then the passes' check */
        ssb4d_status st = device_gbuild(src, g, bf_pix, n_bf, o, keep, mem, out, err);
        if (!st && dev && (st = device_check(*out, dev, err))) {
            ssb4d_G_free(*out);
            *out = NULL;
        }
        return st;
    }
    ssb4d_status st = ssb4d_gbuild(src, g, bf_pix, n_bf, o, mem, out, err);
    if (st)
        return st;
    st = dev ? device_check(*out, dev, err) : SSB4D_OK;
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

static void keep_free(void *keep) { cuda_start_free(keep); }

static const session_backend cuda = {
    .name = "cuda",
    .available = cuda_available,
    .gbuild = cuda_gbuild,
    .calibrate = cuda_calibrate,
    .keep_free = keep_free,
};

const session_backend *session_backend_cuda(void) { return &cuda; }
#endif
