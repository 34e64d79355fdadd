/* cuda.h — the CUDA backend's device (device.c): what its backend table (backend.c, device.c)
 * and the tests call. Built only with -DSSB4D_CUDA (CMakeLists.txt). */
#ifndef SSB4D_CUDA_CUDA_H
#define SSB4D_CUDA_CUDA_H
#include "gbuild/gbuild.h"
#include "ssb4d_advanced.h"

/* 1 when an NVIDIA driver and at least one CUDA device are present. A machine without the
 * driver is answered without loading the CUDA runtime's device code. */
int cuda_available(void);

/* Copies every stored plane of G (not a view) to the device and attaches the copy to G's store
 * with the CUDA pass table (src/ssb/backend.h): from then on G's passes run on the device.
 * Half-precision and streamed planes are converted or rebuilt through G_group on the way. */
ssb4d_status cuda_G_attach(struct ssb4d_G *G, ssb4d_mem *mem, ssb4d_err *err);

/* For a G whose planes are built on the device (gstart.c): G's device copy and pass table as
 * cuda_G_attach makes them, with the planes (slot-major in BF order, G->plane_stride float2
 * each) allocated and zeroed but not filled; *planes and *stream (a cudaStream_t) for the
 * builder. One process, G not a view. */
ssb4d_status cuda_G_attach_blank(struct ssb4d_G *G, void **planes, void **stream, ssb4d_err *err);
/* The exact loss in one pass (loss_fused.h) for G's device copy: on (1), the cuFFT path (0), or
 * unchanged (-1); returns the previous setting. Set at attach: on with SSB4D_CUDA_LOSS=fused. */
int cuda_G_loss_fused(const struct ssb4d_G *G, int on);

/* Device bytes held by G's copy now (planes and work buffers) and at most so far (0 without one). */
void cuda_G_device_bytes(const struct ssb4d_G *G, size_t *now, size_t *peak);

/* Profiling of the loss/object passes over G's device copy (G or a view of it): on, each stage
 * is waited for and its seconds added up (slower: for a breakdown, not for timings). Returns the
 * sums so far in out (may be NULL) and clears them. HOST: the pass's set-up on the host (the
 * contexts, the pixel table, the buffers); FINISH: the loss's reduction and the mean phase's copy;
 * OBJECT: the object's spectrum, transform and phase; COPY: the object's way back to the host. */
enum { CUDA_PROF_HOST, CUDA_PROF_CORRECT, CUDA_PROF_ACC, CUDA_PROF_FFT, CUDA_PROF_PHASE, CUDA_PROF_FINISH,
       CUDA_PROF_OBJECT, CUDA_PROF_COPY, CUDA_PROF_N };
void cuda_G_profile(const struct ssb4d_G *G, int on, double out[CUDA_PROF_N]);

/* The work area cuFFT asks for a plan of the CUDA backend's shapes: the phase planes' batched
 * c2r (nyf × nxf, batch planes) or, with c2c, the object's inverse transform (batch 1). 0 when
 * no device is present or cuFFT cannot plan it. The backend owns that area (cufftSetWorkArea),
 * so it is in cuda_G_device_bytes. */
size_t cuda_fft_work_bytes(int nyf, int nxf, int batch, int c2c);
#define CUDA_HAVE_FFT_WORK_BYTES 1

/* The device's name and memory (for reports); returns 0, or -1 with no device. */
int cuda_device_info(char *name, size_t name_len, size_t *total_bytes);
#endif
