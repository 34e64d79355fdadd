/* backend.c — the CPU backend's table and the one rule of which backend runs a pass (backend.h). */
#include "ssb/backend.h"

static ssb4d_status cpu_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                               const ssb4d_gbuild_opts *o, const ssb_device_check *chk, void **keep, ssb4d_mem *mem,
                               struct ssb4d_G **out, ssb4d_err *err)
{
    (void)chk, (void)keep; /* nothing on a device */
    return ssb4d_gbuild(src, g, bf_pix, n_bf, o, mem, out, err);
}

const ssb_backend ssb_backend_cpu = {
    .name = "cpu",
    .gbuild = cpu_gbuild,
    .complex_path = 1,
    .phases = ssb_cpu_phases,
    .band = ssb_cpu_band,
    .band_power = ssb_cpu_band_power,
};

/* The backend that runs a pass over G: the one holding G's planes (b) when it has the pass's
 * entry and, for the complex path, runs it; else the CPU over the host planes. */
static const ssb_backend *serving(const ssb_backend *b, int has_entry, int cplx)
{
    return b && has_entry && (!cplx || b->complex_path) ? b : &ssb_backend_cpu;
}

ssb4d_status ssb_run_phases(const struct ssb4d_G *G, const ssb_phase_job *j, ssb4d_mem *mem, ssb4d_err *err)
{
    const ssb_backend *b = G->store.backend;
    return serving(b, b && b->phases, j->o->path == SSB4D_PATH_COMPLEX)->phases(G, j, mem, err);
}

ssb4d_status ssb_run_band(const struct ssb4d_G *G, const ssb_band_job *j, double *total, ssb4d_mem *mem,
                          ssb4d_err *err)
{
    const ssb_backend *b = G->store.backend;
    return serving(b, b && b->band, 0)->band(G, j, total, mem, err);
}

ssb4d_status ssb_run_band_power(const struct ssb4d_G *G, const ssb_power_job *j, ssb4d_mem *mem, ssb4d_err *err)
{
    const ssb_backend *b = G->store.backend;
    return serving(b, b && b->band_power, 0)->band_power(G, j, mem, err);
}

void ssb_device_bytes(const struct ssb4d_G *G, size_t *now, size_t *peak, int reset_peak)
{
    const ssb_backend *b = G ? G->store.backend : NULL;
    *now = *peak = 0;
    if (b && b->device_bytes)
        b->device_bytes(G, now, peak, reset_peak);
}
