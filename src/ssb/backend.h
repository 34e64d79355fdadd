/* backend.h — one interface under the SSB passes (as ggml's ggml_backend_i): where a pass over
 * G's BF pixels runs.
 *
 * The stage functions (ssb4d_loss, ssb4d_loss_batch, ssb4d_mean_phase_upsampled, ssb4d_object,
 * ssb4d_object_loss, ssb4d_band_fit_rot, ssb4d_band_power) describe the pass as a plain job
 * (which parameter sets, what to produce) and hand it to the backend that holds G's planes:
 * G's store names it (G->store.backend, set by whoever built the store; NULL: the host planes,
 * the CPU backend). The CPU is a backend like the others: its entries are the loops of loss.c,
 * object.c and band.c (ssb_backend_cpu, backend.c). The CUDA backend's table lives in
 * src/cuda/backend.c and is attached with G's device copy (cuda_G_attach): cuda/ sits above ssb/,
 * so it hands its table down through G rather than ssb/ reaching up. The same table is what a
 * session chooses (session/backend.h): whether the backend runs here, its calibration and G
 * build, its device memory; there is one backend type.
 *
 * What a backend does not run — a NULL entry, or the complex path where complex_path is 0 — runs
 * on the CPU backend over the host planes; that rule is ssb_backend_serving's, in backend.c. Every
 * backend gives each entry's results in the CPU's order of sums (SPEC §11), ranks included: an
 * entry of a distributed G is reached by every rank and ends with every rank's totals. */
#ifndef SSB4D_SSB_BACKEND_H
#define SSB4D_SSB_BACKEND_H
#include "ssb/ssb_internal.h"

/* The phase stack: n parameter sets ab[0..n) (thick[0..n) or NULL; same G, geometry and
 * upsampling f) over all of G's BF pixels, from one pass. Any output may be NULL:
 *   loss[n]: each set's exact loss;  mean_phase[n * nyf * nxf]: each set's mean phase;
 *   object (complex pairs), phase: set 0's object at upsampling f and its phase.
 * An object without loss or mean phase is ssb4d_object's pass (any path and f); an object with
 * the loss is the fused release (n = 1, f = 1, the real path). */
typedef struct {
    const ssb4d_geometry *g;
    const ssb4d_aberrations *ab;
    const ssb4d_thick *thick;
    size_t n;
    int f;
    const ssb4d_ssb_opts *o; /* never NULL */
    double *loss;
    float *mean_phase, *object, *phase;
} ssb_phase_job;

/* The band objective's pass (band.c): its bins, per distinct rotation the BF pixels' k and A(k),
 * and the parameter sets with their tables. Plain data: every backend reads the same job, and
 * what a backend needs besides (the CPU's per-thread scratch, a device's buffers) it makes
 * itself. */
typedef struct {
    ssb_phys p;                         /* its parameters (optics/physics.h) */
    size_t rot;                         /* its rotation's index */
    /* Its tables on the bins (nb each), read where p.quadratic: e^{iχ(q)}, and for the thick
     * model e^{∓i(t/2)πλ|q|²} and the tilt phase. */
    const double complex *E, *Qm, *Qp;
    const double *qt;
} ssb_band_set;
typedef struct {
    size_t nb;                          /* bins of the band on the stored half plane */
    const size_t *off;                  /* bin → offset in a plane (row·nxh + col) */
    const double *qx, *qy, *q2;
    double lambda, alpha0, ang[2];
    double in2, out2;                   /* |v|² below which A = 1, above which A = 0, exactly */
    const int *rs, *cs;                 /* bin → its slot among the nr rows and nc columns holding bins */
    size_t nr, nc;
    const double *rq, *cq;              /* those rows' and columns' frequencies */
    size_t nrot;
    const double *const *kx, *const *ky, *const *Ak; /* nrot tables of n_bf values */
    size_t n;
    const ssb_band_set *sets;
    int threads;                        /* host threads (resolved) */
} ssb_band_job;

/* ssb4d_band_power's sums: acc[bin] += Σ_k |G(q,k)|² over the pixels with Ak[k] != 0, in BF order
 * (acc holds the earlier ranks' sum of a distributed G). */
typedef struct {
    size_t nb;
    const size_t *off;
    const double *Ak;
    int threads;
    double *acc;
} ssb_power_job;

struct ssb_backend;
/* What a device backend checks a G against before it takes it (issue 31): the session's check of
 * the device model and budget (session/backend.c), handed down because the model sits above the
 * backends. fn gets the backend asking, G as built, and ctx. */
typedef struct ssb_device_check {
    ssb4d_status (*fn)(const struct ssb_backend *b, const struct ssb4d_G *G, const void *ctx, ssb4d_err *err);
    const void *ctx;
} ssb_device_check;

/* One backend: where a session runs (availability, the calibration, G's build, device memory)
 * and the passes over the G it built. */
typedef struct ssb_backend {
    const char *name;
    /* 1 when the backend can run here (a device is present); NULL: always (the CPU). */
    int (*available)(void);
    /* G built where the backend keeps it: the CPU's on the host; a device's G carries the
     * device's copy of its planes and this table (G->store.backend), so every stage function over
     * that G (fit, previews, the object, releases, region refits, ssb4d_G_free) runs on the
     * device without the session knowing. chk (may be NULL): the device check, before G is taken. */
    ssb4d_status (*gbuild)(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                           const ssb4d_gbuild_opts *o, const ssb_device_check *chk, void **keep, ssb4d_mem *mem,
                           struct ssb4d_G **out, ssb4d_err *err);
    /* The calibration where the backend runs it (NULL: ssb4d_calibrate on the CPU). */
    ssb4d_status (*calibrate)(ssb4d_source *src, const ssb4d_calib_params *p, void **keep, ssb4d_calibration *out,
                              ssb4d_err *err);
    /* What the backend keeps in *keep from the calibration for the G build (the GPU's start: the
     * streams it uploaded, so they go up once); the session frees it after the G build and at
     * close (NULL: the backend keeps nothing). */
    void (*keep_free)(void *keep);
    /* A device's free and total memory (returns 0, or -1 when unknown), and the work area its FFT
     * asks for a plan of the passes' shapes (plan/device_model.h's dev_fft_work_fn). NULL on the
     * CPU. */
    int (*device_memory)(size_t *free_bytes, size_t *total_bytes);
    size_t (*fft_work_bytes)(int nyf, int nxf, int batch, int c2c);
    int complex_path; /* runs phase jobs on SSB4D_PATH_COMPLEX (else the CPU does) */
    ssb4d_status (*phases)(const struct ssb4d_G *G, const ssb_phase_job *j, ssb4d_mem *mem, ssb4d_err *err);
    /* total[(set·nb + bin)·4 + {Re N, Im N, D, E}], zeroed by the caller */
    ssb4d_status (*band)(const struct ssb4d_G *G, const ssb_band_job *j, double *total, ssb4d_mem *mem,
                         ssb4d_err *err);
    ssb4d_status (*band_power)(const struct ssb4d_G *G, const ssb_power_job *j, ssb4d_mem *mem, ssb4d_err *err);
    /* Optional (NULL: the backend holds nothing off the host, the CPU's case): the device bytes
     * G's copy holds now and at most since the last reset; reset_peak first restarts that peak
     * from what is held now (the session does at each stage's start). */
    void (*device_bytes)(const struct ssb4d_G *G, size_t *now, size_t *peak, int reset_peak);
} ssb_backend;

/* The CPU backend: G built on the host (ssb4d_gbuild), loss.c's phase stack, object.c's sum,
 * band.c's sums, over the host planes. */
extern const ssb_backend ssb_backend_cpu;
ssb4d_status ssb_cpu_phases(const struct ssb4d_G *G, const ssb_phase_job *j, ssb4d_mem *mem, ssb4d_err *err);
ssb4d_status ssb_cpu_object(const struct ssb4d_G *G, const ssb_phase_job *j, ssb4d_mem *mem, ssb4d_err *err);
ssb4d_status ssb_cpu_band(const struct ssb4d_G *G, const ssb_band_job *j, double *total, ssb4d_mem *mem,
                          ssb4d_err *err);
ssb4d_status ssb_cpu_band_power(const struct ssb4d_G *G, const ssb_power_job *j, ssb4d_mem *mem, ssb4d_err *err);

/* The passes, run by the backend that serves them for G (the stage functions call only these). */
ssb4d_status ssb_run_phases(const struct ssb4d_G *G, const ssb_phase_job *j, ssb4d_mem *mem, ssb4d_err *err);
ssb4d_status ssb_run_band(const struct ssb4d_G *G, const ssb_band_job *j, double *total, ssb4d_mem *mem,
                          ssb4d_err *err);
ssb4d_status ssb_run_band_power(const struct ssb4d_G *G, const ssb_power_job *j, ssb4d_mem *mem, ssb4d_err *err);
/* G's backend's device_bytes (G NULL, or a backend without one: 0 and 0). */
void ssb_device_bytes(const struct ssb4d_G *G, size_t *now, size_t *peak, int reset_peak);
#endif
