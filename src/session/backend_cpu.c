/* backend_cpu.c — the CPU backend: the session's passes are the library's stage functions. */
#include "common/err.h"
#include "session/backend.h"

static int always(void) { return 1; }

ssb4d_status session_fit_tilt(const ssb4d_G *G, const ssb4d_geometry *g, const fit_tilt_params *p, ssb4d_mem *mem,
                              fit_tilt_result *r, ssb4d_err *err)
{
    return fit_tilt(G, g, p, mem, r, NULL, err);
}

ssb4d_status session_loss(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                          const ssb4d_thick *thick, const ssb4d_ssb_opts *o, ssb4d_mem *mem, double *loss,
                          ssb4d_err *err)
{
    return ssb4d_loss(G, g, ab, thick, o, mem, loss, NULL, err);
}

static const session_backend cpu = {
    .name = "cpu",
    .available = always,
    .gbuild = ssb4d_gbuild,
    .G_free = ssb4d_G_free,
    .fit = ssb4d_fit,
    .fit_tilt = session_fit_tilt,
    .loss = session_loss,
    .object = ssb4d_object,
    .object_loss = ssb4d_object_loss,
    .mean_phase = ssb4d_mean_phase_upsampled,
};

const session_backend *session_backend_cpu(void) { return &cpu; }

ssb4d_status session_backend_select(ssb4d_backend_kind kind, const session_backend **out, ssb4d_err *err)
{
    switch (kind) {
    case SSB4D_BACKEND_AUTO:
#ifdef SSB4D_HAVE_CUDA
        *out = session_backend_cuda()->available() ? session_backend_cuda() : &cpu;
#else
        *out = &cpu;
#endif
        return SSB4D_OK;
    case SSB4D_BACKEND_CPU:
        *out = &cpu;
        return SSB4D_OK;
    case SSB4D_BACKEND_CUDA:
#ifdef SSB4D_HAVE_CUDA
        if (!session_backend_cuda()->available())
            return ssb_fail(err, SSB4D_EINVAL, "--backend cuda: no CUDA device is present (no NVIDIA driver or GPU)");
        *out = session_backend_cuda();
        return SSB4D_OK;
#else
        return ssb_fail(err, SSB4D_EINVAL,
                          "--backend cuda: this build has no CUDA backend (configure with -DSSB4D_CUDA=ON)");
#endif
    }
    return ssb_fail(err, SSB4D_EINVAL, "unknown backend %d", (int)kind);
}
