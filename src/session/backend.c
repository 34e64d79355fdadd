/* backend.c — the choice of a session's backend and the device check it hands to a device
 * backend's G build (session/backend.h). The backends themselves are ssb_backend tables: the
 * CPU's in src/ssb/backend.c, CUDA's in src/cuda/device.c. */
#include "session/backend.h"
#include "common/err.h"
#include "plan/budget.h"
#ifdef SSB4D_HAVE_CUDA /* CMakeLists.txt: the CUDA backend is in this build */
#include "cuda/backend.h"
#endif

#include <stdio.h>

ssb4d_status session_device_check(const ssb_backend *b, const struct ssb4d_G *G, const void *ctx, ssb4d_err *err)
{
    const session_device *dev = ctx;
    dev_session_in in = dev->model;
    size_t here = 0;
    for (size_t ib = 0; ib < G->n_bf; ib++) /* the device copy's slots: this rank's stored planes */
        here += G_stored(G, ib) && G->plane_of[ib] != G_REMOTE;
    in.ny = G->ny, in.nx = G->nx, in.n_bf = G->n_bf, in.n_stored = here ? here : 1;
    in.fft_work = b->fft_work_bytes;
    dev_model m;
    dev_model_session(&in, &m);
    const size_t need = dev_model_bytes(&m);
    size_t fr = 0, tot = 0, budget = dev->budget;
    const int known = b->device_memory && b->device_memory(&fr, &tot) == 0;
    int is_free = 0;
    if (known && (!budget || fr < budget))
        budget = fr, is_free = 1;
    if (!budget || need <= budget)
        return SSB4D_OK;
    char s[4][32], lim[96];
    snprintf(lim, sizeof lim, is_free ? "only %s is free on the GPU" : "the budget (--device-memory) is %s",
             plan_size_text(s[3], budget, 0));
    return ssb_fail(err, SSB4D_ENOMEM,
                    "the CUDA backend needs %s of GPU memory for this session (G's planes %s, work buffers and "
                    "cuFFT's work area %s) but %s: use --backend cpu or a GPU with more memory (half-precision "
                    "planes on the GPU are not available yet; ssb4d plan --backend cuda shows the stages)",
                    plan_size_text(s[0], need, 1), plan_size_text(s[1], m.planes, 1),
                    plan_size_text(s[2], need - m.planes, 1), lim);
}

#ifdef SSB4D_HAVE_CUDA
static int available(const ssb_backend *b) { return !b->available || b->available(); }
#endif

ssb4d_status session_backend_select(ssb4d_backend_kind kind, const ssb_backend **out, ssb4d_err *err)
{
    switch (kind) {
    case SSB4D_BACKEND_AUTO:
#ifdef SSB4D_HAVE_CUDA
        *out = available(&ssb_backend_cuda) ? &ssb_backend_cuda : &ssb_backend_cpu;
#else
        *out = &ssb_backend_cpu;
#endif
        return SSB4D_OK;
    case SSB4D_BACKEND_CPU:
        *out = &ssb_backend_cpu;
        return SSB4D_OK;
    case SSB4D_BACKEND_CUDA:
#ifdef SSB4D_HAVE_CUDA
        if (!available(&ssb_backend_cuda))
            return ssb_fail(err, SSB4D_EINVAL, "--backend cuda: no CUDA device is present (no NVIDIA driver or GPU)");
        *out = &ssb_backend_cuda;
        return SSB4D_OK;
#else
        return ssb_fail(err, SSB4D_EINVAL,
                        "--backend cuda: this build has no CUDA backend (configure with -DSSB4D_CUDA=ON)");
#endif
    }
    return ssb_fail(err, SSB4D_EINVAL, "unknown backend %d", (int)kind);
}
