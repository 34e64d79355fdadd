/* backend.h — where a session's heavy passes run (llama.cpp/ggml style: one engine, several
 * backends behind one small table, chosen at run time).
 *
 * The session handle (handle.c) calls only these entries, so a backend that holds G elsewhere
 * (a GPU) plugs in without its callers changing. Every backend must give the CPU backend's
 * results (tests/test_session.c checks the CPU one against the stage functions; a new backend's
 * tests check it against the CPU one, SPEC §11). */
#ifndef SSB4D_SESSION_BACKEND_H
#define SSB4D_SESSION_BACKEND_H
#include "fit/tilt.h"
#include "ssb4d_advanced.h"

typedef struct {
    const char *name;
    /* 1 when the backend can run here (a device is present). */
    int (*available)(void);
    ssb4d_status (*gbuild)(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                           const ssb4d_gbuild_opts *o, ssb4d_mem *mem, ssb4d_G **out, ssb4d_err *err);
    void (*G_free)(ssb4d_G *G);
    ssb4d_status (*fit)(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_fit_params *p, ssb4d_mem *mem,
                        ssb4d_fit_result *r, ssb4d_err *err);
    ssb4d_status (*fit_tilt)(const ssb4d_G *G, const ssb4d_geometry *g, const fit_tilt_params *p, ssb4d_mem *mem,
                             fit_tilt_result *r, ssb4d_err *err);
    ssb4d_status (*loss)(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                         const ssb4d_thick *thick, const ssb4d_ssb_opts *o, ssb4d_mem *mem, double *loss,
                         ssb4d_err *err);
    ssb4d_status (*object)(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                           const ssb4d_thick *thick, int upsample, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                           float *object, float *phase, ssb4d_err *err);
    /* A release: the object at native sampling and the exact loss, the same bits as object (f = 1)
     * then loss; NULL: the session makes those two calls. */
    ssb4d_status (*object_loss)(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                                const ssb4d_thick *thick, const ssb4d_ssb_opts *o, ssb4d_mem *mem, float *object,
                                float *phase, double *loss, ssb4d_err *err);
    ssb4d_status (*mean_phase)(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                               const ssb4d_thick *thick, int upsample, const ssb4d_ssb_opts *o,
                               ssb4d_mem *mem, float *phase, ssb4d_err *err);
} session_backend;

/* The stage functions in the table's shapes (fit_tilt without its state, the loss without the
 * mean phase): every backend's entries, since a G on a device carries its passes (src/ssb/dev.h). */
ssb4d_status session_fit_tilt(const ssb4d_G *G, const ssb4d_geometry *g, const fit_tilt_params *p, ssb4d_mem *mem,
                              fit_tilt_result *r, ssb4d_err *err);
ssb4d_status session_loss(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                          const ssb4d_thick *thick, const ssb4d_ssb_opts *o, ssb4d_mem *mem, double *loss,
                          ssb4d_err *err);

/* The CPU backend: the stage functions of src/gbuild, src/ssb and src/fit. */
const session_backend *session_backend_cpu(void);
#ifdef SSB4D_HAVE_CUDA
/* The CUDA backend (src/cuda/backend_cuda.c), in builds with -DSSB4D_CUDA. */
const session_backend *session_backend_cuda(void);
#endif

/* The backend for a request: AUTO picks CUDA when the build has it and a device is present,
 * else the CPU; a named one that cannot run here is SSB4D_EINVAL with a clear message. */
ssb4d_status session_backend_select(ssb4d_backend_kind kind, const session_backend **out, ssb4d_err *err);
#endif
