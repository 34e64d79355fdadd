/* ssb_internal.h — the evaluation context shared by the loss, mean-phase and object paths.
 *
 * The correction n(q,k) = conj(γ)/max(|γ|,1e-8) is evaluated one row of q at a time. Two kernels:
 *   fast:    χ has only C10/C12, thin specimen, square detector pixels. Then
 *            χ(q∓k) = χ(q) ∓ u + χ(k) with u = 2πλ qᵀMk linear in q, so
 *            γ = A(k)·e^{iu}·(A(q−k)e^{−iχ(q)} − A(q+k)e^{iχ(q)}) and e^{iu} = R(row)·C(col):
 *            a few multiplies per bin instead of four complex exponentials;
 *   generic: any χ, thick weights, anisotropic pixels, and every Nyquist bin (alias average,
 *            docs/ssb-math.md), evaluated in double. */
#ifndef SSB4D_SSB_INTERNAL_H
#define SSB4D_SSB_INTERNAL_H
#include "gbuild/gbuild.h"
#include "ssb4d.h"

#include <complex.h>
#include <math.h>

typedef float complex cfloat;

typedef struct {
    const struct ssb4d_G *G;
    double lambda, alpha0, ang[2];
    double C[SSB4D_N_ABERR], phi[SSB4D_N_ABERR]; /* Å, rad */
    int quadratic_only, even_only, thick;
    double m00, m01, m11;                         /* χ(v) = πλ (m00 vx² + 2 m01 vx vy + m11 vy²) */
    double tau[2], t_A;
    int fast;
    float inv_w;                                  /* 1 / pixel width (fast kernel) */
    int f;
    size_t nyf, nxf;
    double *qr, *qc;                              /* fine-grid frequencies */
    float *qcf;                                   /* qc as float (fast kernel) */
    double *kx, *ky;                              /* per BF pixel (rotated) */
    double *Ak;                                   /* A(k) per BF pixel */
    double complex *Pk;                           /* P(k) per BF pixel */
    double dc;
} ssb_ctx;

ssb4d_status ssb_ctx_init(ssb_ctx *c, const struct ssb4d_G *G, const ssb4d_geometry *g,
                          const ssb4d_aberrations *ab, const ssb4d_thick *thick, int f,
                          ssb4d_err *err);
void ssb_ctx_free(ssb_ctx *c);

/* exp(−iχ(q)) for the fine-grid bin (i, j) (double precision, rounded to float). */
cfloat ssb_eq(const ssb_ctx *c, size_t i, size_t j);
/* Per-pixel phasors of the fast kernel: R[i] = e^{i a q_r(i)}, C[j] = e^{i b q_c(j)}. */
void ssb_pixel_phasors(const ssb_ctx *c, size_t ib, cfloat *R, size_t nrows, cfloat *Ctab,
                       size_t ncols);
void ssb_pixel_ab(const ssb_ctx *c, size_t ib, double *a, double *b);
/* Ĉ_k on fine row i, columns [0, ncols): out[j] = G_f(q,k)·n(q,k). DC is left to the caller.
 * Eq_row, R and Ctab are only read by the fast kernel. */
void ssb_corr_row(const ssb_ctx *c, size_t ib, size_t i, size_t ncols, const cfloat *Eq_row,
                  cfloat R, const cfloat *Ctab, cfloat *out);

/* Hot loops are compiled twice (AVX2 and baseline) and picked at run time. Results are the same
 * bits either way: the loops use only IEEE +, −, ×, ÷ and sqrt, and C17 mode turns off FMA
 * contraction. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define SSB_HOT __attribute__((target_clones("avx2", "default")))
#else
#define SSB_HOT
#endif

/* φ = atan(s/dc) over a plane, in place (real-output path). */
void ssb_phases_real(float *ph, size_t n, float inv_dc);

/* FFTW planner lock (src/gbuild/gbuild.c). */
void ssb4d_fftw_lock(void);
void ssb4d_fftw_unlock(void);

/* atan(x) to ~1e-7 rad. Selects are written as arithmetic so that loops over it vectorise
 * (with -fno-trapping-math); the result does not depend on vector width. */
static inline float ssb_atanf(float x)
{
    float a = fabsf(x);
    float big = a > 1.0f ? 1.0f : 0.0f;
    float num = big + (1.0f - big) * a, den = big * a + (1.0f - big); /* t = min(a, 1/a) = num/den */
    const float s3 = 0.57735026919f;
    float red = num > 0.26794919f * den ? 1.0f : 0.0f;               /* t > tan(pi/12) */
    /* (t − s3)/(1 + t·s3) with t = num/den, in one division */
    float u = (num - red * s3 * den) / (den + red * s3 * num);
    float u2 = u * u;
    float p = u * (1.0f + u2 * (-1.0f / 3 + u2 * (1.0f / 5 + u2 * (-1.0f / 7 + u2 * (1.0f / 9 + u2 * (-1.0f / 11))))));
    p = p + red * 0.52359877560f;
    p = big * (1.57079632679f - p) + (1.0f - big) * p;
    return copysignf(p, x);
}
#endif
