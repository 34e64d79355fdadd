/* refine.h — internals of the multislice refinement (src/refine/, SPEC §13, docs/refine.md):
 * the geometry of the model, the float32 model (model.c), the region's patterns (batch.c), the
 * staged solver (solver.c) and the workspace estimate. */
#ifndef SSB4D_REFINE_REFINE_H
#define SSB4D_REFINE_REFINE_H
#include "ssb4d_advanced.h"

#include <fftw3.h>
#include <stddef.h>

/* The global parameters θ, internal units: Å, rad. */
enum { RP_C10, RP_C12, RP_PHI12, RP_T0, RP_T1, RP_DZ, RP_N };

/* What the model's tables need besides θ. */
typedef struct {
    double lambda;          /* Å */
    double semiangle_mrad;
    double dk[2];           /* reciprocal pixel of the (binned) grid along det rows, cols (1/Å) */
    double ang[2];          /* its angular width (rad) = dk·λ */
    double delta[2];        /* the centre's offset from the grid's zero frequency (pixels) */
    double rotation_deg;
    int flip;
    double band_inv_A;      /* > 0: the propagator and the probe cut at |k| <= band (tests: the
                               simulator's antialias band); 0: none */
    ssb4d_aberrations ab;   /* the orders not refined (C10, C12, φ12 come from θ) */
} refine_geo;

/* The float32 model (model.c). */
typedef struct refine_model refine_model;
typedef struct refine_work refine_work;
refine_model *refine_model_new(int nr, int nc, int ns);
void refine_model_delete(refine_model *m);
void refine_model_set(refine_model *m, const refine_geo *geo, const double th[RP_N]);
refine_work *refine_work_new(const refine_model *m);
void refine_work_delete(refine_work *w);
/* rmodel_position (model_core.inc) in float32. */
double refine_model_position(const refine_model *m, float *const *obj, size_t ostride, double s0, double s1,
                             const float *cnt, const unsigned char *valid, double scale, int amplitude,
                             refine_work *w, float *gt, double *g, float *Iout, double *dev, double *sumI);
/* The entrance probe (2n floats, real space, bwd(P)/sqrt(n): Σ|ψ|² = 1). */
void refine_model_probe(const refine_model *m, float *out);
/* The model's tables (model_core.inc's rmodel: P, prop complex n; dchi, dth 3n; fr nr; fc nc) and
 * a count that changes with every refine_model_set (a device copy follows it). */
typedef struct {
    const float *P, *prop, *dchi, *dth, *fr, *fc;
    unsigned long version;
} refine_tables;
void refine_model_tables(const refine_model *m, refine_tables *t);

/* Bytes of the refinement's workspace: the region's patterns (npos × grid), the object
 * (slices × its grid, phase, complex, Adam moments and gradient), the per-position buffers of one
 * minibatch and the per-thread FFT buffers. det: the model grid (rows, cols; the patterns are
 * counted at its size, an upper bound of their valid pixels); obj: the object grid (rows, cols). */
size_t refine_workspace_bytes(size_t npos, const size_t det[2], const size_t obj[2], int slices, size_t batch,
                              int threads);

/* The region's data, binned, in the model's FFT order (batch.c). */
typedef struct {
    size_t npos, n;          /* positions, pixels per pattern */
    int nr, nc, bin;         /* the model grid (the binned detector × pad) */
    int dr, dc;              /* the binned detector */
    float *cnt;              /* npos × nv: the counts of the valid pixels, in vidx's order */
    unsigned char *valid;    /* n: 1 = in the likelihood */
    int *vidx;               /* nv: the valid pixels' model indices, ascending */
    size_t nv;
    double mean_total;       /* mean counts per position (all pixels) */
    double sum_valid;        /* Σ counts over the valid pixels of all positions */
    double delta[2];         /* centre offset (binned pixels) */
    ssb4d_mem *mem;
} refine_data;
ssb4d_status refine_data_load(ssb4d_source *src, const ssb4d_calibration *cal, const ssb4d_geometry *g,
                              const size_t region[4], int bin, double pad, ssb4d_mem *mem, refine_data *d,
                              ssb4d_err *err);
void refine_data_free(refine_data *d);
/* The counts of position p expanded onto the model grid (n floats into out; 0 off the valid
 * pixels). */
void refine_data_expand(const refine_data *d, size_t p, float *out);
/* The smallest even n' >= n with only the factors 2, 3, 5, 7. */
int refine_fast_size(int n);
/* The least model grid over the binned detector (docs/refine.md "Grid"). */
#define REFINE_PAD 1.5
/* The model grid along one axis: a power of two from pad·det up to 2·det, else the fast size
 * from pad·det. */
int refine_grid_size(int det, double pad);
/* The binning the library chooses: the smallest of 1, 2, 4 that brings the grid to <= 96. */
int refine_auto_bin(size_t det_rows, size_t det_cols);

/* The minibatch on a device (batch.c, src/cuda/refine.h; docs/refine.md "Backends"): what the
 * solver's threads compute per position (the loss, Σ I over the valid pixels, the parameters'
 * gradient, the phase-gradient crop), for a whole minibatch at once; the solver sums it in its
 * own order as it sums the threads'. */
typedef struct refine_accel refine_accel;
/* The engine for kind (SSB4D_BACKEND_AUTO: CUDA when built and a device is present): *out NULL
 * when the CPU runs. A CUDA request that cannot run here, or whose plan does not fit the
 * device, is the one-line error. obj: the object grid (rows, cols). */
ssb4d_status refine_accel_new(ssb4d_backend_kind kind, const refine_data *d, int ns, size_t batch,
                              const size_t obj[2], refine_accel **out, ssb4d_err *err);
/* Frees it and books its device peak in mem's running stage (may be NULL). */
void refine_accel_delete(refine_accel *a, ssb4d_mem *mem);
/* One minibatch (solver.c's run_pass): positions pos[0..nb), crops of the object t (complex,
 * ns × Or × Oc); outputs as the threads': lp, sp (nb), with want_g gp (nb × RP_N), with want_obj
 * gb (nb × ns × n). 0, or −1 with the error kept (refine_accel_error). */
int refine_accel_batch(refine_accel *a, const refine_model *m, const float *t, const size_t *pos, size_t nb,
                       const long *o0, const long *o1, const double *s0, const double *s1, double scale,
                       int amplitude, int want_obj, int want_g, double *lp, double *sp, double *gp, float *gb);
/* The object is a new one (a solve starts): the device copies all of it before its next
 * minibatch. Between minibatches the solver changes the object only in the Adam step after a
 * minibatch with want_obj, over the rectangle that minibatch's crops cover (the engine copies
 * that up); anything else that changes it, and a new solve (a new model, whose table versions start
 * again), must call this. */
void refine_accel_object_changed(refine_accel *a);
/* The kept error into err (SSB4D_OK when none). */
ssb4d_status refine_accel_error(const refine_accel *a, ssb4d_err *err);
/* The device bytes it held at most so far (0 for NULL). */
size_t refine_accel_peak(const refine_accel *a);
/* "cpu" (a NULL engine) or "cuda". */
const char *refine_accel_name(const refine_accel *a);
/* Device bytes a CUDA refinement of these shapes holds (the plan; cuFFT's work area where a
 * device can say it, else none): npos positions of nv valid pixels, the model grid det, the
 * object grid obj, slices, the minibatch. */
size_t refine_device_bytes(size_t npos, size_t nv, const size_t det[2], const size_t obj[2], int slices,
                           size_t batch);

/* The expected Poisson deviance of one pixel of mean mu (for confidence). */
double refine_expected_deviance(double mu);

#endif
