/*
 * ref_ssb.h — float64 reference implementation of SSB (SPEC §5, docs/ssb-math.md), tests only.
 *
 * Plain loops in double precision, clarity over speed. It uses the public *types* of ssb4d.h
 * (geometry, aberrations, thick model) but calls no library function: λ, χ, the probe, γ, the
 * Nyquist rule, G (full 2-D complex FFTW double DFT of each BF image), phases, loss, object and
 * the upsampled outputs (zero-insertion construction) are all computed here.
 */
#ifndef SSB4D_REF_SSB_H
#define SSB4D_REF_SSB_H

#include "ssb4d_advanced.h"

#include <complex.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- optics */

/* Relativistic wavelength (Å), CODATA 2018, double precision. */
double ref_wavelength(double kv);

/* Everything needed to evaluate P and γ, in internal units (Å, rad). */
typedef struct {
    double lambda;        /* Å */
    double alpha0;        /* rad */
    double ang[2];        /* detector sampling, rad per pixel (row, col) */
    double C[SSB4D_N_ABERR];   /* Å */
    double phi[SSB4D_N_ABERR]; /* rad */
    int thick;            /* 1: SPEC 5.6 weights (even when thickness is 0) */
    double tau[2];        /* tilt, rad */
    double t;             /* thickness, Å */
    int gamma_variant;    /* 0: SPEC 5.4 γ = P(k−q)P*(k) − P*(k+q)P(k) (default, binding);
                             1: diagnostic only: the earlier text's P(q−k)P*(k) − P*(q+k)P(k),
                             which differs for odd-m aberrations */
} ref_optics;

/* ab == NULL: all zero; th == NULL: thin model. */
void ref_optics_init(ref_optics *o, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                     const ssb4d_thick *th);
extern const int ref_aberr_n[SSB4D_N_ABERR];
extern const int ref_aberr_m[SSB4D_N_ABERR];
extern const char *const ref_aberr_names[SSB4D_N_ABERR];

double ref_chi(const ref_optics *o, double vx, double vy);       /* rad */
double ref_aperture(const ref_optics *o, double vx, double vy);  /* A(v) in [0,1] */
double complex ref_probe(const ref_optics *o, double vx, double vy);
double complex ref_gamma(const ref_optics *o, double qx, double qy, double kx, double ky);
/* n = conj(γ)/max(|γ|, 1e−8) at one frequency vector (no Nyquist rule). */
double complex ref_ncorr(const ref_optics *o, double qx, double qy, double kx, double ky);
/* numpy.fft.fftfreq(n, d)[i] */
double ref_fftfreq(size_t i, size_t n, double d);
/* n at DFT bin (i, j) of an (ny, nx) grid with steps (sr, sc), with the Nyquist alias averaging. */
double complex ref_ncorr_bin(const ref_optics *o, size_t i, size_t j, size_t ny, size_t nx,
                             double sr, double sc, double kx, double ky);
/* Rotated k vector (1/Å) of flat detector pixel `pix` (SPEC 5.1). */
void ref_k_vector(const ssb4d_geometry *g, double lambda, int32_t pix, size_t det_cols,
                  double *kx, double *ky);
/* Smallest f in {1,2,3,4,8} with f/(2 s) >= 2 α0/λ on both axes (8 if none). */
int ref_upsample_auto(const ssb4d_geometry *g);

/* ---------------------------------------------------------------- data */

typedef struct {
    size_t ny, nx;            /* scan */
    size_t det_rows, det_cols;
    size_t n_bf;
    int32_t *bf_pix;          /* flat detector indices */
    double *img;              /* n_bf × ny × nx BF images */
    double complex *G;        /* n_bf × ny × nx full-plane unnormalised forward DFT */
    double total;             /* Σ_k Σ_r I_k(r) (exact for integer counts) */
    double dc;                /* total / n_bf */
} ref_data;

/* From counts (ny, nx, det_rows, det_cols) in C order. Return 0 on success. */
int ref_data_from_counts(ref_data *d, const double *counts, const size_t shape[4],
                         const int32_t *bf_pix, size_t n_bf);
int ref_data_from_u16(ref_data *d, const uint16_t *counts, const size_t shape[4],
                      const int32_t *bf_pix, size_t n_bf);
int ref_data_from_u32(ref_data *d, const uint32_t *counts, const size_t shape[4],
                      const int32_t *bf_pix, size_t n_bf);
/* From a list of BF images imgs[(p*ny + r)*nx + c] of pixels bf_pix on a det_rows×det_cols detector. */
int ref_data_from_images(ref_data *d, const double *imgs, size_t ny, size_t nx,
                         const int32_t *bf_pix, size_t n_bf, size_t det_rows, size_t det_cols);
void ref_data_free(ref_data *d);

/* ---------------------------------------------------------------- SSB */

/* Corrected spectrum Ĉ_k of BF pixel i on the grid upsampled by f (f = 1: native), full plane
 * (f·ny × f·nx). f > 1 uses zero insertion + fine DFT. Returns 1 if A(k) > 0, else 0 (then out is
 * dc at q = 0 and 0 elsewhere). */
int ref_corrected(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, size_t i, int f,
                  double complex *out);

/* Per-pixel phase φ_k on the grid upsampled by f (f·ny × f·nx); inactive pixels give 0. */
int ref_pixel_phase(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, size_t i,
                    int f, double *phase);

/* Loss (SPEC 5.4) on the native grid; mean_phase (ny×nx) optional. Optics given as an ref_optics. */
double ref_loss_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o,
                  double *mean_phase);
/* Same with public-unit aberrations (th may be NULL). */
double ref_loss(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                const ssb4d_thick *th, double *mean_phase);
/* Mean phase on the native grid (ny×nx). */
void ref_mean_phase(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                    const ssb4d_thick *th, double *mean_phase);
/* Mean phase upsampled by f ((f·ny)×(f·nx)). Returns 0 on success. */
int ref_mean_phase_upsampled_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o,
                               int f, double *phase);
int ref_mean_phase_upsampled(const ref_data *d, const ssb4d_geometry *g,
                             const ssb4d_aberrations *ab, const ssb4d_thick *th, int f,
                             double *phase);
/* Object upsampled by f (f = 1: native): F = (1/N_bf) Σ_k Ĉ_k, F(0) = dc,
 * O = IDFT of size (f·ny, f·nx) with 1/(f²·ny·nx). obj and/or phase (= arg O) may be NULL. */
int ref_object_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, int f,
                 double complex *obj, double *phase);
int ref_object(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
               const ssb4d_thick *th, int f, double complex *obj, double *phase);

/* The transfer of SPEC 5.4's estimator on the grid upsampled by f: T(q) = (1/N_bf) Σ_k |γ(q,k)|
 * ((f·ny)×(f·nx)), each Nyquist bin averaged over its aliases (as n is); inactive pixels add 0. */
int ref_transfer_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, int f, double *T);
/* The transfer-corrected object (docs/ssb-math.md): F'(q) = Σ_k Ĉ_k(q) / (N_bf·(T(q) + eps)),
 * F'(0) = dc, then as ref_object_o. */
int ref_object_transfer_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, int f, double eps,
                          double complex *obj, double *phase);
int ref_object_transfer(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                        const ssb4d_thick *th, int f, double eps, double complex *obj, double *phase);

/* ---------------------------------------------------------------- helpers for tests */

/* Flat indices of detector pixels within radius_px of centre (pixel units, <=), ascending. */
size_t ref_select_bf(size_t det_rows, size_t det_cols, const double centre[2], double radius_px,
                     int32_t **out);
/* Pixels whose unrotated |k|·λ <= radius_mrad·1e-3 (physical radius; for unequal sampling). */
size_t ref_select_bf_mrad(const ssb4d_geometry *g, size_t det_rows, size_t det_cols,
                          double radius_mrad, int32_t **out);
/* Pearson correlation. */
double ref_correlation(const double *a, const double *b, size_t n);
/* The same for float arrays. */
double ref_correlation_f(const float *a, const float *b, size_t n);

/* a − b in degrees, modulo 180° (the period of φ12 and of the rotation branch), in [−90, 90). */
double ref_dmod180(double a, double b);

/* Temporary directories for tests that write real files. ref_tmpdir makes
 * $TMPDIR/ssb4d_<tag>_XXXXXX (or under /tmp) into dir; 0 on success. ref_dir_count counts the
 * entries whose names contain needle (all when NULL; SIZE_MAX when dir cannot be read).
 * ref_dir_clear removes everything in dir, ref_rmtree dir itself too; both return 0 on success. */
int ref_tmpdir(char *dir, size_t n, const char *tag);
size_t ref_dir_count(const char *dir, const char *needle);
int ref_dir_clear(const char *dir);
int ref_rmtree(const char *dir);

/* Deterministic uniform [0, 1) numbers for test parameters (splitmix64 on *state). */
double ref_urand(uint64_t *state);

/* The shared abTEM datasets (shared/data/sim/README.md): files, geometry, BF radius, the truth at
 * the slab's mid-plane and the lowest acceptable correlation with the band-limited phase
 * (A2: 0.78, since the SPEC's normalised estimator reaches 0.81 there). */
typedef struct {
    const char *counts, *gt;
    ssb4d_geometry g;
    double radius;
    double C10, C12, phi12;
    double min_corr;
} ref_shared_set;
extern const ref_shared_set REF_SET_A1, REF_SET_A2;

/* Minimal .npy reader: little-endian C-order |u1 <u2 <u4 <f4 <f8, converted to double.
 * shape must hold 8; returns ndim (> 0) or -1 on failure. Caller frees *data. */
int ref_npy_load_double(const char *path, size_t shape[8], double **data);
/* Same, raw bytes of a <u2 array (for feeding ssb4d_source_from_memory). */
int ref_npy_load_u16(const char *path, size_t shape[8], uint16_t **data);

/* ---------------------------------------------------------------- tiny 4D-STEM simulator */
/*
 * Periodic phase object t = exp(iφ) on a fine window of (ny·pr) × (nx·pc) pixels of size dx;
 * probe ψ = IDFT[A·exp(−iχ)] (SPEC 5.2 probe, soft aperture) rolled to each scan position
 * (i·pr, j·pc); pattern |DFT(ψ_R·t)|² fftshifted (centre at M/2), normalised to `dose` expected
 * electrons, Poisson noise (dose > 0) or exact expected values rounded (dose < 0 → |dose|).
 * The detector is the whole window (det_rows = ny·pr, det_cols = nx·pc).
 */
typedef struct {
    size_t ny, nx, pr, pc;
    double dx[2];            /* fine pixel size, Å */
    double kv, semiangle_mrad;
    ssb4d_aberrations ab;
    double dose;             /* electrons per pattern */
    int n_atoms;             /* random Gaussian "atoms" */
    double atom_sigma_A, atom_phase;  /* width (Å) and peak phase (rad) */
    uint64_t seed;
} ref_sim_params;

typedef struct {
    size_t shape[4];
    uint32_t *counts;
    double *phase_scan;      /* ny×nx true phase at scan positions */
    double *phase_band;      /* ny×nx band-limited (|q| <= 2α0/λ) true phase */
    ssb4d_geometry geom;
} ref_sim;

/* The small scene the SSB tests share: 16×12 scan (non-square), 2×2 fine pixels of 0.25 Å
 * (a 32×24 detector, so unequal sampling), 300 kV, 25 mrad, C10 −8 nm, C12 2 nm at 40°,
 * dose 1e5, six atoms of σ 0.4 Å and peak phase 0.3 rad, noise seed `seed`. */
void ref_sim_params_scene(ref_sim_params *p, uint64_t seed);
int ref_simulate(const ref_sim_params *p, ref_sim *out);
void ref_sim_free(ref_sim *s);

#endif
