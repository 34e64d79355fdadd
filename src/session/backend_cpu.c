/* backend_cpu.c — the CPU backend: G on the host, and the choice of a session's backend. */
#include "common/err.h"
#include "session/backend.h"

static int always(void) { return 1; }

static ssb4d_status cpu_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                               const ssb4d_gbuild_opts *o, const session_device *dev, void **keep, ssb4d_mem *mem,
                               ssb4d_G **out, ssb4d_err *err)
{
    (void)dev, (void)keep; /* nothing on a device */
    return ssb4d_gbuild(src, g, bf_pix, n_bf, o, mem, out, err);
}

static const session_backend cpu = {
    .name = "cpu",
    .available = always,
    .gbuild = cpu_gbuild,
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
