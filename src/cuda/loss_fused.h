/* loss_fused.h — the exact loss in one pass over G (loss_fused.cu; docs/gpu.md, "The fused loss").
 *
 * Per BF pixel the correction, the inverse transform and the phase sums without the chunk's
 * spectra or phase planes in device memory: a column kernel corrects G's bins as it loads them
 * and inverse-transforms each column in shared memory (the half plane's nyf-point transforms),
 * writing a small group of pixels' half-transformed planes (sized to stay in L2); a row kernel
 * finishes each row (the nxf-point real inverse as an nxf/2-point complex one), takes the phases
 * and adds φ and φ² into the per-pixel sums pixel after pixel, in BF order — the cuFFT path's
 * order, so the sums' bits depend on neither the batch nor the group. The transform's own float
 * order is not cuFFT's: the loss agrees with the cuFFT path to float rounding (SPEC §11), not to
 * the bit. Plain C: the device model (src/plan/) sizes its buffers from here. */
#ifndef SSB4D_CUDA_LOSS_FUSED_H
#define SSB4D_CUDA_LOSS_FUSED_H
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The grids it takes: nyf and nxf powers of two, 16 … 2048 (else the cuFFT path runs). */
static inline int cu_fused_shape_ok(size_t nyf, size_t nxf)
{
    return nyf >= 16 && nyf <= 2048 && !(nyf & (nyf - 1)) && nxf >= 16 && nxf <= 2048 && !(nxf & (nxf - 1));
}

/* The fused path only with SSB4D_CUDA_LOSS=fused until a device run has proven it (issue 41);
 * otherwise the three-kernel cuFFT path. */
static inline int cu_fused_wanted(void)
{
    const char *e = getenv("SSB4D_CUDA_LOSS");
    return e && !strcmp(e, "fused");
}

#define CU_FUSED_GROUP_BYTES ((size_t)24 << 20) /* a group's half-transformed planes: L2 holds them */
#define CU_FUSED_ROW_THREADS 1024                /* the row kernel's block: pixels at once × nxf/16 threads */
#define CU_FUSED_ROW_SMEM ((size_t)48 << 10)    /* its shared memory: pixels at once × nxf/2 points, padded */

/* Pixels per group (a power of two, at most chunk): its planes within CU_FUSED_GROUP_BYTES, or
 * SSB4D_CUDA_FUSED_GROUP pixels (a power of two; for measuring the L2's share). */
static inline size_t cu_fused_group(size_t nyf, size_t nxf, size_t chunk)
{
    const size_t plane = nyf * (nxf / 2 + 1) * 8;
    const char *e = getenv("SSB4D_CUDA_FUSED_GROUP");
    const size_t want = e ? (size_t)strtoul(e, NULL, 10) : 0;
    size_t g = 1;
    while (2 * g <= chunk && (want ? 2 * g <= want : 2 * g * plane <= CU_FUSED_GROUP_BYTES))
        g *= 2;
    return g;
}

/* Pixels the row kernel's block transforms at once (a power of two, at most the group): its
 * threads within CU_FUSED_ROW_THREADS, its shared memory within CU_FUSED_ROW_SMEM. */
static inline size_t cu_fused_row_pixels(size_t nxf, size_t group)
{
    const size_t threads = nxf / 16, smem = (nxf / 2 + nxf / 32) * 8; /* FFT_PADDED(nxf/2) points */
    size_t s = 1;
    while (2 * s <= group && 2 * s * threads <= CU_FUSED_ROW_THREADS && 2 * s * smem <= CU_FUSED_ROW_SMEM)
        s *= 2;
    return s;
}

/* Its device buffers: the group's planes (group × nyf × (nxf/2+1) float2) and the twiddle tables
 * (nyf + nxf float2). */
static inline size_t cu_fused_xbuf_bytes(size_t nyf, size_t nxf, size_t chunk)
{
    return cu_fused_group(nyf, nxf, chunk) * nyf * (nxf / 2 + 1) * 8;
}
static inline size_t cu_fused_tw_bytes(size_t nyf, size_t nxf) { return (nyf + nxf) * 8; }
#endif
