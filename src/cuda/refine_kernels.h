/* refine_kernels.h — the kernels of the refinement's minibatch (refine_kernels.cu), callable from
 * C (refine.c). Every wave buffer holds the minibatch's positions one after another (n complex
 * each), slice-major where there is one per slice ([s][b][q]); the phase-gradient crops are
 * [b][s][q] (the solver's layout). The arithmetic is model_core.inc's in float32 with double
 * sums; a per-position sum is one block's, reduced in a fixed tree (no atomics), so the bits do
 * not depend on the minibatch or a repeat. Each returns a cudaError_t. */
#ifndef SSB4D_CUDA_REFINE_KERNELS_H
#define SSB4D_CUDA_REFINE_KERNELS_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One position of a minibatch: its crop corner, its place in the window, its index (counts). */
typedef struct {
    long long o0, o1, p;
    double s0, s1;
} cu_rpos;

/* The grid and the per-pixel tables (device pointers). */
typedef struct {
    int nr, nc, ns;
    long long n, Or, Oc, nv;
    const float *P, *prop;   /* n complex each */
    const float *dchi, *dth; /* 3n each */
    const float *fr, *fc;    /* nr, nc */
    const int *cidx;         /* n: the pixel's place among the valid ones, -1: not valid */
    const float *cnt;        /* npos × nv */
} cu_rgrid;

/* Q[b] = P·e^{−2πi k·s_b}, and a copy into psi0[b]. */
int cu_r_probe(cu_rgrid g, const cu_rpos *pos, int nb, float *Q, float *psi0, void *stream);
/* T[b] = the object's crop of slice s at pos[b]; x[b] = ψ[b]·T[b]. */
int cu_r_transmit(cu_rgrid g, const float *obj, int s, const cu_rpos *pos, int nb, const float *psi, float *T,
                  float *x, void *stream);
/* x ← p·x (kept), next = x/n. */
int cu_r_propagate(cu_rgrid g, int nb, float *x, float *next, void *stream);
/* From the exit spectra E (overwritten by ∂L/∂E): red[b·8 + 0] = the loss, red[b·8 + 1] = Σ I
 * over the valid pixels; red[b·8 + 2 ..] = 0 (the gradient's sums to come). */
int cu_r_likelihood(cu_rgrid g, const cu_rpos *pos, int nb, double scale, int amplitude, float *E, double *red,
                    void *stream);
/* Slice s going back: with gb, gb[b][s] = Im(conj(ψ)·G·conj(t)); G ← conj(t)·G. */
int cu_r_back_transmit(cu_rgrid g, int s, int nb, const float *psi, const float *T, float *G, float *gb,
                       void *stream);
/* Through the propagation before slice s (G already forward-transformed): with want_g the
 * sums Im(conj(Φ')·G/n)·∂θ/∂(Δz, τ0, τ1) added to red[b·8 + 2 + {5, 3, 4}]; G ← conj(p)·G/n. */
int cu_r_back_propagate(cu_rgrid g, int nb, const float *phi, int want_g, float *G, double *red, void *stream);
/* The aberrations' sums Im(Q·conj(G))·∂χ/∂(C10, C12, φ12) into red[b·8 + 2 + {0, 1, 2}]. */
int cu_r_chi(cu_rgrid g, int nb, const float *Q, const float *G, double *red, void *stream);

#ifdef __cplusplus
}
#endif
#endif
