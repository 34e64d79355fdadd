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
#include "optics/physics.h"
#include "ssb4d_advanced.h"

#include <complex.h>
#include <math.h>

typedef float complex cfloat;

typedef struct {
    const struct ssb4d_G *G;
    ssb_phys p;                                   /* the model's parameters (optics/physics.h) */
    int fast;
    float inv_w;                                  /* 1 / pixel width (fast kernel) */
    int f;
    size_t nyf, nxf;
    double *qr, *qc;                              /* fine-grid frequencies */
    float *qcf;                                   /* qc as float (fast kernel) */
    double *kx, *ky;                              /* per BF pixel (rotated) */
    double *Ak;                                   /* A(k) per BF pixel */
    ssb_c64 *Pk;                                  /* P(k) per BF pixel */
    double dc;
} ssb_ctx;

/* ---- the SSB model's grid, shared by the correction (correct.c) and the band objective (band.c);
 * the model itself (χ, A, γ, the thick model) is optics/physics.h ---- */

/* numpy.fft.fftfreq(n, d)[i]. */
static inline double ssb_fftfreq(size_t i, size_t n, double d)
{
    long k = (i < (n + 1) / 2) ? (long)i : (long)i - (long)n;
    return (double)k / ((double)n * d);
}

/* k of BF pixel `pix` (flat detector index): a mirrored detector's axes swapped (flip), then
 * rotated by the scan–detector rotation (SPEC 2, 5.1). */
static inline void ssb_bf_k(const ssb4d_geometry *g, double lambda, size_t det_cols, int32_t pix,
                            double *kx_out, double *ky_out)
{
    double a = -g->rotation_deg * (M_PI / 180.0), ca = cos(a), sa = sin(a);
    double dk0 = g->det_sampling_mrad[0] * 1e-3 / lambda, dk1 = g->det_sampling_mrad[1] * 1e-3 / lambda;
    double row = (double)(pix / (int32_t)det_cols), col = (double)(pix % (int32_t)det_cols);
    double kx = (row - g->centre_px[0]) * dk0, ky = (col - g->centre_px[1]) * dk1;
    if (g->flip) {
        double t = kx;
        kx = ky;
        ky = t;
    }
    *kx_out = kx * ca + ky * sa;
    *ky_out = -kx * sa + ky * ca;
}

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
/* e^{iθ·k_i} on an n-point fftfreq grid from a basis of ssb_phasor_basis_len(n) values; the
 * phasors above are made this way. ssb_pixel_row_basis: θ of pixel ib's rows (R[i] above). */
#define SSB_PHASOR_MAX_HI ((65536 / 32) + 2)
size_t ssb_phasor_basis_len(size_t n);
void ssb_phasor_basis(double theta, size_t n, double complex *basis);
cfloat ssb_phasor_at(const double complex *basis, size_t n, size_t i);
void ssb_pixel_row_basis(const ssb_ctx *c, size_t ib, double complex *basis);
/* Ĉ_k on fine row i, columns [0, ncols): out[j] = G_f(q,k)·n(q,k), from BF pixel ib's float32
 * plane (NULL: inactive, out = 0; see G_group for half and streamed G); rot: −i·Ĉ_k instead
 * (exactly (im, −re): what the loss's real-output path transforms). DC is left to the caller.
 * Eq_row, R and Ctab are only read by the fast kernel. */
void ssb_corr_row(const ssb_ctx *c, size_t ib, const cfloat *plane, size_t i, size_t ncols,
                  const cfloat *Eq_row, cfloat R, const cfloat *Ctab, int rot, cfloat *out);

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
/* object.c: F (nyf x nxf, DC dc) from the running sum acc (nyf x ncols, the half plane when half) over
 * n_bf pixels, the other half by symmetry and the DC; then its inverse FFT into object (complex
 * pairs) and/or phase (either may be NULL). */
void ssb_object_fill(size_t nyf, size_t nxf, double dc, const double complex *acc, size_t n_bf, int half, cfloat *F);
ssb4d_status ssb_object_transform(size_t nyf, size_t nxf, cfloat *F, float *object, float *phase, ssb4d_err *err);

/* The fused release's tile (ssb4d_object_loss, when ssb4d_ssb_opts.loss_tile is 0): pixels whose
 * spectra and phase planes are in flight at once. */
#define SSB4D_RELEASE_TILE 16

/* ---- workspace queries (common/workspace.h): sizes from the shape, used by the code that
 * allocates them, and the order it allocates and frees them in ---------------------------------- */

/* loss.c phase_stack: n parameter sets on an nyf x nxf grid over n_bf BF pixels with nt threads
 * (resolved; capped here at one per block of 64 pixels). real: the real-output path (the default);
 * fast: every set takes the fast kernel (a table of exp(-i chi(q)) per set); tile: o->loss_tile. */
typedef struct {
    size_t n, nt, tile;
    int real, fast, tiled;
    size_t total, eq;                  /* per set: the mean-phase sum, exp(-i chi(q)) */
    size_t spec, plane, part, phasors; /* per thread (plane and part 0 when tiled) */
    size_t tile_planes, tile_part;     /* tiled only */
} loss_ws;
loss_ws loss_ws_sizes(size_t nyf, size_t nxf, size_t n_bf, size_t n, int nt, int real, int fast, size_t loss_tile);
void loss_workspace(const loss_ws *w, ws_sink *out);
/* loss.c ssb4d_object_loss (the real path, ssb4d_ssb_opts.loss_tile 0) on an nyf x nxf grid. */
void release_workspace(size_t nyf, size_t nxf, size_t n_bf, int nt, ws_sink *out);

/* object.c ssb4d_object at an nyf x nxf grid over n_bf BF pixels with nt threads; half: the
 * half-plane sum (the default path); fast: the fast kernel's phasor tables. */
typedef struct {
    int fast;
    size_t F, tabs, acc;      /* the spectrum, the phasor tables, the running sum */
    size_t row_bases;         /* where the row phasors' bases start in the tables (bytes) */
    size_t per_thread, rows;  /* a thread's row and row of exp(-i chi(q)); all threads' */
} object_ws;
object_ws object_ws_sizes(size_t nyf, size_t nxf, size_t n_bf, int nt, int half, int fast);
void object_workspace(const object_ws *w, ws_sink *out);

/* band.c: the band's bins lo < |q| < hi on an ny x nx scan (steps step), counted as geom_init
 * counts them. row_slot (ny) and col_slot (nx/2+1), zeroed by the caller, come back with each
 * row's and column's slot among those holding bins, or -1. Returns the bins; *nr, *nc the rows
 * and columns holding them. */
size_t band_bins(size_t ny, size_t nx, const double step[2], double lo, double hi, int *row_slot, int *col_slot,
                 size_t *nr, size_t *nc);

/* band.c on nb bins in nr rows and nc columns, n_bf BF pixels: ssb4d_band_fit_rot with n sets and
 * nrot distinct rotations on nt threads (resolved; capped at one per block of 64 pixels), and
 * ssb4d_band_power. */
typedef struct {
    size_t n, nrot, nt;
    size_t off, rs, cs, qx, rq;  /* the bins (geom_init) */
    size_t k;                    /* a k table (rot_init) */
    size_t tabs, qts, total;     /* per batch: set tables, the sums */
    size_t A1, R, part;          /* per thread */
    size_t power;                /* ssb4d_band_power's sums per bin */
} band_ws;
band_ws band_ws_sizes(size_t nb, size_t nr, size_t nc, size_t n_bf, size_t n, size_t nrot, int nt);
void band_fit_workspace(const band_ws *w, ws_sink *out);
void band_power_workspace(const band_ws *w, ws_sink *out);

#endif
