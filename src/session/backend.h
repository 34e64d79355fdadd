/* backend.h — which backend a session runs on, chosen at run time: what differs between them
 * here is only whether it can run and where G is built. The passes themselves go through G's
 * own backend (src/ssb/backend.h), so the session handle (handle.c) calls the stage functions.
 * Every backend must give the CPU backend's results (tests/test_session.c checks the CPU one against the stage functions; a new backend's
 * tests check it against the CPU one, SPEC §11). */
#ifndef SSB4D_SESSION_BACKEND_H
#define SSB4D_SESSION_BACKEND_H
#include "plan/device_model.h"
#include "ssb4d_advanced.h"

/* What a device backend checks its G against before it takes it (issue 31): the session's passes
 * as the device model replays them (the grid, BF pixels and stored planes are taken from the G
 * built) and the device budget (ssb4d_session_opts.device_memory_bytes; 0: the device's free
 * memory). */
typedef struct {
    dev_session_in model;
    size_t budget;
} session_device;

typedef struct {
    const char *name;
    /* 1 when the backend can run here (a device is present). */
    int (*available)(void);
    /* G built where the backend keeps it: the CPU's on the host; a device's G carries the
     * device's copy of its planes and its pass table (src/ssb/backend.h), so every stage
     * function over that G (fit, previews, the object, releases, region refits, ssb4d_G_free)
     * runs on the device without the session knowing. */
    ssb4d_status (*gbuild)(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                           const ssb4d_gbuild_opts *o, const session_device *dev, void **keep, ssb4d_mem *mem,
                           ssb4d_G **out, ssb4d_err *err);
    /* The calibration where the backend runs it (NULL: ssb4d_calibrate on the CPU). */
    ssb4d_status (*calibrate)(ssb4d_source *src, const ssb4d_calib_params *p, void **keep, ssb4d_calibration *out,
                              ssb4d_err *err);
    /* What the backend keeps in *keep from the calibration for the G build (the GPU's start: the
     * streams it uploaded, so they go up once); the session frees it after the G build and at
     * close (NULL: the backend keeps nothing). */
    void (*keep_free)(void *keep);
} session_backend;

/* The CPU backend: G on the host (ssb4d_gbuild). */
const session_backend *session_backend_cpu(void);
#ifdef SSB4D_HAVE_CUDA
/* The CUDA backend (backend_cuda.c), in builds with -DSSB4D_CUDA. */
const session_backend *session_backend_cuda(void);
#endif

/* The backend for a request: AUTO picks CUDA when the build has it and a device is present,
 * else the CPU; a named one that cannot run here is SSB4D_EINVAL with a clear message. */
ssb4d_status session_backend_select(ssb4d_backend_kind kind, const session_backend **out, ssb4d_err *err);
#endif
