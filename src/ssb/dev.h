/* dev.h — a G whose planes also live on a device (the CUDA backend, src/cuda/), and the SSB
 * passes that run there.
 *
 * The backend's G build attaches a device copy of every stored plane to the G it returns
 * (G->dev_ops, G->dev). From then on every consumer of that G — the loss of a batch of fit
 * candidates, the mean phase, the object, the fused release, on G itself or on a BF subset view
 * of it — finds the copy through G and runs its pass on the device; what a device does not run
 * (the complex path, the band objective, the parallax estimate) reads the host planes as before.
 * So the fit, the tilt fit and region refits drive the device without knowing about it. */
#ifndef SSB4D_SSB_DEV_H
#define SSB4D_SSB_DEV_H
#include "ssb/ssb_internal.h"

typedef struct ssb_dev ssb_dev;

/* The band objective's pass (band.c): its bins, per distinct rotation the BF pixels' k and A(k),
 * and the parameter sets. */
typedef struct {
    ssb_phys p;                                        /* its parameters (optics/physics.h) */
    size_t rot;                                        /* its rotation's index */
} ssb_band_set;
typedef struct {
    size_t nb;                          /* bins of the band on the stored half plane */
    const size_t *off;                  /* bin → offset in a plane (row·nxh + col) */
    const double *qx, *qy, *q2;
    double lambda, alpha0, ang[2];
    size_t nrot;
    const double *const *kx, *const *ky, *const *Ak; /* nrot tables of n_bf values */
    size_t n;
    const ssb_band_set *sets;
} ssb_band_job;

typedef struct ssb_dev_ops_s {
    const char *name;
    /* The phases of n parameter sets c[0..n) (same G, geometry and upsampling; the real-output
     * path) over all of G's BF pixels, summed on the device. Any output may be NULL:
     *   loss[n]: the exact loss of each set;
     *   mean_phase[n * nyf * nxf]: each set's mean phase;
     *   acc: set 0's corrected spectrum Ĉ summed over the BF pixels (nyf x (nxf/2+1), BF order),
     *        what ssb_object_fill turns into the object.
     * Polls mem (progress, cancel) between chunks of BF pixels. */
    ssb4d_status (*phases)(ssb_dev *d, const struct ssb4d_G *G, const ssb_ctx *c, size_t n, double *loss,
                           float *mean_phase, double complex *acc, ssb4d_mem *mem, ssb4d_err *err);
    /* The band objective's sums for every set: total[(set·nb + bin)·4 + {Re N, Im N, D, E}]
     * (band.c's layout), each a sum over G's BF pixels in BF order. */
    ssb4d_status (*band)(ssb_dev *d, const struct ssb4d_G *G, const ssb_band_job *j, double *total,
                         ssb4d_mem *mem, ssb4d_err *err);
    /* ssb4d_band_power's sums: acc[bin] = Σ_k |G(q,k)|² over the pixels with Ak[k] != 0. */
    ssb4d_status (*band_power)(ssb_dev *d, const struct ssb4d_G *G, size_t nb, const size_t *off, const double *Ak,
                               double *acc, ssb4d_err *err);
} ssb_dev_ops;

/* 1 when G has a device copy that serves a pass on path o (NULL: defaults). */
int ssb_dev_serves(const struct ssb4d_G *G, const ssb4d_ssb_opts *o);

/* The device version of phase_stack (loss.c): n sets' losses and/or mean phases, and/or set 0's
 * object (complex pairs) and phase at upsampling f, from one pass. ssb4d_object is its n = 1
 * call with only the object asked for. */
ssb4d_status ssb_dev_phase_stack(const struct ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                                 const ssb4d_thick *thick, size_t n, int f, ssb4d_mem *mem, double *loss,
                                 float *mean_phase, float *object, float *phase, ssb4d_err *err);
#endif
