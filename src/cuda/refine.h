/* refine.h — the refinement's minibatch on the GPU (refine.c, refine_kernels.cu; issue 40,
 * docs/refine.md "Backends"): the per-position forward model and its adjoint of
 * src/refine/model_core.inc for a minibatch of positions at once (cuFFT batched 2-D C2C over the
 * positions, slice after slice), giving the CPU path's per-position outputs (loss, Σ I over the
 * valid pixels, the global parameters' gradient, the phase-gradient crop). The caller (the
 * refinement's batch.c) sums them in its fixed order, so the device adds no order of its own.
 * Plain arrays only: this folder sits below src/refine/. The engine is built with -DSSB4D_CUDA;
 * the byte count below is not (the memory plan uses it on any machine). */
#ifndef SSB4D_CUDA_REFINE_H
#define SSB4D_CUDA_REFINE_H
#include "ssb4d_advanced.h"

#include <stddef.h>

/* The shapes of a refinement: the model grid nr × nc, ns slices, minibatch B, the object grid
 * Or × Oc, npos positions with nv valid pixels each. */
typedef struct {
    int nr, nc, ns;
    size_t B, Or, Oc, npos, nv;
} cuda_refine_shape;

/* Device bytes the engine holds for shape sh, cuFFT's work area (fft_work) aside: the model's
 * tables, the counts of every position (valid pixels only), the object's mirror and the
 * minibatch's waves (entrance probe, ψ and t per slice, the propagated spectra, the running
 * gradient), its phase-gradient crops and the per-position sums. */
static inline size_t cuda_refine_bytes_for(const cuda_refine_shape *sh, size_t fft_work)
{
    size_t n = (size_t)sh->nr * (size_t)sh->nc, ns = (size_t)sh->ns, B = sh->B, c = 8 /* float2 */;
    size_t tables = n * c * 2 + 6 * n * sizeof(float) + (size_t)(sh->nr + sh->nc) * sizeof(float) + n * sizeof(int);
    size_t data = sh->npos * sh->nv * sizeof(float);
    size_t object = ns * sh->Or * sh->Oc * c;
    size_t waves = B * n * c * (2 + 2 * ns + (ns > 1 ? ns - 1 : 1)); /* Q, W; ψ, t; Φ' */
    size_t out = B * ns * n * sizeof(float) + B * 8 * sizeof(double) + B * 5 * sizeof(double);
    return tables + data + object + waves + out + fft_work;
}

#ifdef SSB4D_HAVE_CUDA
typedef struct cuda_refine cuda_refine;

/* The engine for shape sh: the counts (npos × nv, vidx's order) and the valid pixels' model
 * indices vidx (nv, ascending) go up once. budget: device bytes allowed (0: the device's free
 * memory); more needed is SSB4D_ENOMEM with one line. */
ssb4d_status cuda_refine_new(const cuda_refine_shape *sh, const float *cnt, const int *vidx, size_t budget,
                             cuda_refine **out, ssb4d_err *err);
void cuda_refine_delete(cuda_refine *c);

/* The model's tables for the current θ (model_core.inc's rmodel: P and prop n complex, dchi and
 * dth 3n, fr nr, fc nc). */
ssb4d_status cuda_refine_tables(cuda_refine *c, const float *P, const float *prop, const float *dchi,
                                const float *dth, const float *fr, const float *fc, ssb4d_err *err);

/* The host object changed outside a minibatch's Adam step (a new solve): all of it goes up
 * before the next minibatch. */
void cuda_refine_object_changed(cuda_refine *c);

/* One minibatch of nb <= B positions pos[0..nb) (indices into the counts): the crop corners
 * o0, o1 and sub-pixel places s0, s1 are indexed by position. t: the host object (complex,
 * ns × Or × Oc). Its device mirror is refreshed first where the host may have changed it: all of
 * it after cuda_refine_new or cuda_refine_object_changed, else the rectangle the previous
 * minibatch's crops covered when that one had want_obj (the solver's Adam step updates exactly
 * that rectangle after such a minibatch, and nothing else between calls). Per position b: lp[b] the
 * loss, sp[b] Σ I over the valid pixels, and with want_g gp[b·6 ..] the parameters' gradient
 * (C10, C12, φ12, τ0, τ1, Δz), with want_obj gb[b·ns·n ..] ∂L/∂φ on the crop. */
ssb4d_status cuda_refine_batch(cuda_refine *c, const float *t, const size_t *pos, size_t nb, const long *o0,
                               const long *o1, const double *s0, const double *s1, double scale, int amplitude,
                               int want_obj, int want_g, double *lp, double *sp, double *gp, float *gb,
                               ssb4d_err *err);

/* Device bytes held now and at most so far (cuFFT's work area included). */
void cuda_refine_device_bytes(const cuda_refine *c, size_t *now, size_t *peak);
/* cuFFT's work area for the engine's batched transform (0 without a device). */
size_t cuda_refine_fft_work(int nr, int nc, size_t B);
#endif
#endif
