/* backend.h — the CUDA backend's table (src/ssb/backend.h's ssb_backend, defined in device.c
 * beside its passes) and its session entries (backend.c): the calibration and G build, on the
 * GPU from a .qem of counts, else the CPU's then uploaded. Built only with -DSSB4D_CUDA. */
#ifndef SSB4D_CUDA_BACKEND_H
#define SSB4D_CUDA_BACKEND_H
#include "ssb/backend.h"

extern const ssb_backend ssb_backend_cuda;

ssb4d_status cuda_backend_calibrate(ssb4d_source *src, const ssb4d_calib_params *p, void **keep,
                                    ssb4d_calibration *out, ssb4d_err *err);
ssb4d_status cuda_backend_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                                 const ssb4d_gbuild_opts *o, const ssb_device_check *chk, void **keep,
                                 ssb4d_mem *mem, struct ssb4d_G **out, ssb4d_err *err);
void cuda_backend_keep_free(void *keep);
#endif
