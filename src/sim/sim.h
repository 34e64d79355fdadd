/* sim.h — internals of the simulator (src/sim/): specimens and potentials, the counter-based
 * random numbers and the Poisson sampler. The public API is in include/ssb4d.h. */
#ifndef SSB4D_SIM_SIM_H
#define SSB4D_SIM_SIM_H
#include "ssb4d_advanced.h"

#include <stdint.h>

/* ---- specimens and potentials (potential.c) ---------------------------------------------- */

/* Projected-potential constant h²/(2π m0 e) = 2π a0 e in V·Å²: the 2-D Fourier transform of an
 * atom's projected potential is SIM_VPROJ_CONST · f_e(|q|/2) in V·Å³ (f_e in Å). */
#define SIM_VPROJ_CONST 47.87801

typedef struct {
    int Z;
    double frac[2]; /* fractional (row, col) position in the unit cell */
} sim_atom;

/* The most atomic layers per unit cell (Si's 4). */
#define SIM_MAX_LAYERS 4

typedef struct {
    const char *name;    /* the material ("SrTiO3") */
    double a_A;          /* cubic lattice constant */
    int n_layers;        /* atomic layers (= slices) per unit cell along the beam */
    int n_atoms[SIM_MAX_LAYERS]; /* atoms of each layer */
    sim_atom atoms[SIM_MAX_LAYERS][4];
    const char *key;     /* the sidecar's specimen.name ("srtio3") */
} sim_crystal;

/* The crystal of a specimen, or NULL. */
const sim_crystal *sim_crystal_get(ssb4d_specimen s);

/* Electron scattering factor f_e(s) in Å at s = |q|/2 (1/Å) for element Z; returns -1 for an
 * element that has no table entry. */
double sim_fe(int Z, double s);
/* The five Gaussian coefficients (a_i in Å, b_i in Å²) of element Z; 0 if known. */
int sim_fe_coeffs(int Z, const double **a, const double **b);

/* Relativistic interaction constant σ (rad / (V·Å)). */
double sim_sigma(double kv);

/* Fourier coefficient (V·Å, complex as re/im) of the periodic projected potential of one layer
 * (layer >= 0) or of the whole unit cell (layer = -1) at G = (h, k)/a. */
void sim_layer_coeff(const sim_crystal *c, int layer, int h, int k, double out[2]);

/* Projected phase σ·V_proj of `cells_z` unit cells at the points (i·step_r, j·step_c),
 * i < ny, j < nx, keeping the reciprocal-lattice terms with |G| <= gmax (1/Å), exactly by
 * Fourier series. out: ny*nx float32. */
void sim_phase_series(const sim_crystal *c, double sigma, int cells_z, double gmax, size_t ny,
                      size_t nx, double step_r, double step_c, float *out);

/* The same phase at the points i·e_row + j·e_col (Å, specimen frame: (det_row, det_col)),
 * i < ny, j < nx: a scan lattice of any orientation (the rotated scan). One term per G at a
 * time, so it costs |G terms| · ny · nx; sim_phase_series is the faster separable form for an
 * unrotated scan. out: ny*nx float32. */
void sim_phase_lattice(const sim_crystal *c, double sigma, int cells_z, double gmax, size_t ny,
                       size_t nx, const double e_row[2], const double e_col[2], float *out);

/* ---- pattern reuse (sim.c) ------------------------------------------------------------------ */

/* Largest detector oversampling S (ssb4d_sim_params.det_oversample); the grid limit (16384)
 * usually binds first. */
#define SIM_OVERSAMPLE_MAX SSB4D_SIM_OVERSAMPLE_MAX

/* Default bound of the kept patterns (ssb4d_sim_params.reuse_bytes = 0). */
#define SIM_REUSE_DEFAULT_BYTES ((size_t)1 << 30)
/* Default block of counts (ssb4d_sim_params.block_bytes = 0). */
#define SIM_BLOCK_DEFAULT_BYTES ((size_t)8 << 20)

/* Whole scan rows per block: block_bytes of uint16 counts, at least 1, at most scan_n. */
size_t sim_rows_per_block(const ssb4d_sim_params *p);

/* Bytes of patterns a simulation with p keeps for reuse: whole row tables of N/gcd(N, S)
 * patterns (plus 16 B of sums each), as many as reuse_bytes allows, at most all N/gcd(N, S)
 * of them; 0 where nothing is reused (a rotation that is not a multiple of 90°, or
 * gcd(N, S) = 1). */
size_t sim_reuse_cache_bytes(const ssb4d_sim_params *p);
/* Bytes of one row table (0 where nothing is reused) and, in *n_tables (may be NULL), how many
 * distinct tables the scan has (N/gcd(N, S)). A block whose row tables are not all kept
 * computes the others into up to min(rows per block, n_tables) scratch tables. */
size_t sim_reuse_table_bytes(const ssb4d_sim_params *p, size_t *n_tables);

/* The noise-free pattern (D×D crop) of one probe position r = (row, col) Å in the specimen
 * frame, simulated directly (no lattice reduction), and its sums over the grid and the crop;
 * for tests. */
ssb4d_status sim_pattern_at(const ssb4d_sim_params *p, double r_row_A, double r_col_A, float *pat,
                            double sums[2], ssb4d_err *err);

/* The multislice of a plane wave along the beam (p's specimen, kV, thickness, window, grid and
 * tilt; the probe, scan and detector are not used), for the checks against references
 * (tests/test_sim_reference.c): after the transmission of each slice s < n_slices (n_layers per
 * cell; s = n_layers·(n + 1) − 1 is the exit of n + 1 cells as the STEM simulation sees it), the complex
 * amplitudes of the beams hk[b] = (h, k) (reciprocal-lattice indices, relative to the
 * incident beam), into amp[(s·nb + b)·2 + {0: re, 1: im}]; the incident beam has amplitude 1.
 * The same transmission functions, propagator, tilt and antialias band as the STEM
 * simulation. */
ssb4d_status sim_planewave_beams(const ssb4d_sim_params *p, int nb, const int (*hk)[2],
                                 double *amp, ssb4d_err *err);

/* ---- random numbers (rng.c) --------------------------------------------------------------- */

typedef struct {
    uint64_t s[4];
} sim_rng;

/* Seeds the stream for one scan position from hash(seed, index): counter-based, so every
 * position has its own stream whatever the thread count. */
void sim_rng_seed(sim_rng *r, uint64_t seed, uint64_t index);
uint64_t sim_rng_next(sim_rng *r);
/* Uniform in [0, 1) (53 bits). */
double sim_rng_uniform(sim_rng *r);
/* Poisson(lam): inversion (exact) for lam < 10, PTRS (Hörmann 1993) for lam >= 10. */
uint64_t sim_poisson(sim_rng *r, double lam);

#endif
