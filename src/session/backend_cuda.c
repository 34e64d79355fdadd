/* backend_cuda.c — the CUDA backend (src/session/backend.h): G is built as the CPU builds it,
 * then its planes go to the GPU (cuda_G_attach) with the CUDA pass table (src/ssb/backend.h);
 * every pass over that G (the fit's candidate batches, previews, the object, releases, region
 * refits) runs on the GPU through that table. */
#include "session/backend.h"

#ifdef SSB4D_HAVE_CUDA /* CMakeLists.txt: the CUDA backend is in this build */
#include "common/err.h"
#include "cuda/cuda.h"
#include "cuda/memory.h"
#include "dist/dist.h"
#include "gbuild/gbuild.h"
#include "plan/budget.h"

#include <stdio.h>

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

static ssb4d_status cuda_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                                const ssb4d_gbuild_opts *o, const session_device *dev, ssb4d_mem *mem, ssb4d_G **out,
                                ssb4d_err *err)
{
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

static const session_backend cuda = {
    .name = "cuda",
    .available = cuda_available,
    .gbuild = cuda_gbuild,
};

const session_backend *session_backend_cuda(void) { return &cuda; }
#endif
