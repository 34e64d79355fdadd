/* kernels.h — the CUDA kernels of the SSB passes (kernels.cu), callable from C (device.c).
 *
 * The model (χ, A, γ, the thick model) is optics/physics.h's, compiled here for the device; the
 * arithmetic follows src/ssb/correct.c: the fast kernel (C10/C12 only, thin specimen, square
 * detector pixels) in float, everything else — any χ, thick weights, anisotropic pixels and every
 * Nyquist bin (the alias average) — in double. Its phasors are evaluated directly (sincos of a
 * double argument reduced to [−π, π]) rather than from the CPU's tables, so the GPU agrees with
 * the CPU to float rounding, not to the bit (SPEC §11's tolerances). Every sum runs in a fixed
 * order, the CPU's: per output bin, blocks of 64 BF pixels (dist.h) each summed from zero pixel
 * after pixel, then added into the totals in block order (the object's sum alone runs pixel after
 * pixel). So the bits depend on neither the number of candidates in a batch, nor the chunk of
 * pixels in flight, nor the number of ranks: a distributed pass keeps its blocks' partials for
 * the chain (src/dist/). */
#ifndef SSB4D_CUDA_KERNELS_H
#define SSB4D_CUDA_KERNELS_H
#include "optics/physics.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One parameter set (ssb_ctx's values). */
typedef struct {
    ssb_phys p;
    int fast;
    float inv_w;
    float inv_dc;
} cu_set;

/* The grids: G's native half planes and the fine grid of upsampling f. */
typedef struct {
    int ny, nx, nxh;
    long long stride;      /* float2 per stored plane */
    int f, nyf, nxf, ncols; /* ncols = nxf/2 + 1 */
} cu_grid;

/* Per BF pixel of the pass (n_bf of them): its device plane (-1: none) and k; per set, five
 * values per pixel: A(k), P(k) (re, im) and the fast kernel's phasor slopes a, b. */
typedef struct {
    const long long *slot;
    const double *kx, *ky;
    const double *set_tab;  /* 5 * n_bf per set: Ak | Pk re | Pk im | a | b */
    const double *qr, *qc;  /* the fine grid's frequencies (ssb_ctx's qr, qc: the same values) */
    size_t n_bf;
} cu_pixels;

/* spec[p] = −i·Ĉ_k (the c2r input; DC 0) for pixels p0 .. p0+np−1 under set s (its table
 * set_tab + 5·n_bf·j is passed in px). Returns a cudaError_t. */
int cu_correct(const void *planes, cu_grid gr, const cu_set *s, cu_pixels px, size_t p0, size_t np, void *spec,
               void *stream);
/* acc[t] += Ĉ of each of the np spectra (BF order), t over nyf·ncols bins (double2). */
int cu_acc(const void *spec, size_t nb, size_t np, void *acc, void *stream);
/* dst[i] += src[i], i < n: a block's partial into the totals. */
int cu_add(double *dst, const double *src, size_t n, void *stream);
/* For every output pixel r: φ = atan(real[p][r]·inv_dc); total[r] += φ, s2[r] += φ² over the
 * np planes whose valid[p] is set, in order (double). */
int cu_phase_sum(const float *real, size_t npix, size_t np, const unsigned char *valid, float inv_dc,
                 double *total, double *s2, void *stream);
/* valid[p] = slot[p0+p] >= 0 && Ak[p0+p] != 0. */
int cu_valid(cu_pixels px, const double *Ak, size_t p0, size_t np, unsigned char *valid, void *stream);
/* sums[0] = Σ s2[r], sums[1] = Σ (total[r]/nbf)² over npix in a fixed tree; mean (may be NULL)
 * = (float)(total/nbf). One block: the same bits every time. */
int cu_finish(const double *total, const double *s2, size_t npix, double nbf, double *sums, float *mean,
              void *stream);
/* The object's spectrum F (nyf × nxf complex float) from set 0's half-plane sum acc (nyf × (nxf/2+1)
 * double2): object.c's ssb_object_fill with half = 1, bin for bin. */
int cu_object_fill(const void *acc, int nyf, int nxf, double dc, double inv_nbf, void *F, void *stream);
/* F's inverse transform (done in place by the caller) scaled by scale: the complex object
 * (interleaved, may be NULL) and its phase (atan2, may be NULL), npix each. */
int cu_object_out(const void *F, size_t npix, float scale, float *object, float *phase, void *stream);
/* ---- the fused loss (loss_fused.cu, loss_fused.h) ---- */
/* host (nyf + nxf fft_c): the column and row twiddle tables, e^{+2πi·m/nyf} then e^{+2πi·m/nxf}. */
void cu_fused_twiddles(int nyf, int nxf, void *host);
/* total[r] += φ, s2[r] += φ² over pixels p0 .. p0+np−1 under set s, as cu_correct + c2r +
 * cu_phase_sum make them (nyf, nxf: cu_fused_shape_ok), in groups of cu_fused_group(nyf, nxf,
 * chunk) pixels through X (cu_fused_xbuf_bytes); tw: cu_fused_twiddles' tables on the device. */
int cu_loss_fused(const void *planes, cu_grid gr, const cu_set *s, cu_pixels px, size_t p0, size_t np, size_t chunk,
                  const void *tw, void *X, double *total, double *s2, void *stream);
/* ---- the band objective (src/ssb/band.c) ---- */
typedef struct {
    ssb_phys p; /* its λ, α0 and sampling are cu_band's */
    long long rot;
} cu_band_set;
typedef struct {
    long long nb, n_bf, nrot, stride;
    const long long *off, *slot;       /* nb; n_bf */
    const double *qx, *qy, *q2;        /* nb each */
    const double *ktab;                /* kx | ky | Ak, each nrot × n_bf */
    const double *T;                   /* per pixel: its total counts */
    double lambda, alpha0, ang0, ang1;
    long long nseg;                    /* the pass's segments: pixels [a, b) and where each sum goes */
    const long long *seg;              /* nseg × {a, b, out}: out < 0 into total, else kept[out] */
    double *kept;                      /* kept partials, n × nb × 4 doubles each (total's layout) */
} cu_band;
/* total[(s·nb + m)·4 + {Re N, Im N, D, E}] for the n sets: the sums of the segments whose out is
 * < 0, added in order (each summed from zero over its pixels in order); the others go to kept. */
int cu_band_sums(const void *planes, cu_band b, const cu_band_set *sets, size_t n, double *total, void *stream);
/* acc[m] += Σ |G|² over the pixels with slot >= 0 and Ak != 0 (Ak: n_bf values), in order. */
int cu_band_power(const void *planes, cu_band b, const double *Ak, double *acc, void *stream);

#ifdef __cplusplus
}
#endif
#endif
