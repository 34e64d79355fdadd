/*
 * ssb4d.h — public API of libssb4d: single-side-band (SSB) direct ptychography of 4D-STEM data.
 *
 * Conventions (SPEC §2):
 *   - axis order (scan_row, scan_col, det_row, det_col), row before column, C order;
 *   - public units: aberrations C_nm in nm, angles in degrees, rotation in degrees, semiangle and
 *     detector sampling in mrad (per pixel), scan step in Å, tilt in mrad, thickness in nm;
 *   - C10 = -defocus (positive C10 = underfocus);
 *   - spectra use the unnormalised forward DFT (e^{-2πi q·r}), frequencies fftfreq(N, step).
 *
 * Style: every call that can fail returns an ssb4d_status (0 = SSB4D_OK) and, when `err` is not
 * NULL, writes one human-readable line into it. Every large buffer is counted by an ssb4d_mem
 * context that the caller owns (plan, then execute: the caller decides budgets once).
 * There is no global mutable state; objects are not shared between threads unless stated.
 *
 * Two parts, in reading order (as zstd.h): first what most programs need (errors, memory
 * accounting, optics, calibration and fit results, the session handle, virtual images, import,
 * the simulator, the parameter table); then, only where SSB4D_ADVANCED is defined before this
 * header is included (or ssb4d_advanced.h is included), the stages one by one, the memory
 * planner and distributed (MPI) sessions. Both parts are exported by libssb4d.so; every other
 * symbol of the library is internal (prefix ssb_ or a stage's own) and hidden.
 */
#ifndef SSB4D_H
#define SSB4D_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SSB4D_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                       */

typedef enum {
    SSB4D_OK = 0,
    SSB4D_EINVAL = 1,    /* bad argument or absurd parameter */
    SSB4D_ENOMEM = 2,    /* allocation failed or over budget */
    SSB4D_EIO = 3,       /* file could not be read or written */
    SSB4D_EFORMAT = 4,   /* file is malformed, wrong dtype or wrong shape */
    SSB4D_ENOTFOUND = 5, /* something expected in the data was not found (e.g. the BF disk) */
    SSB4D_EINTERNAL = 6,
    SSB4D_ECANCELLED = 7 /* the caller cancelled the call (progress callback or ssb4d_session_cancel);
                            what the call was making is dropped, everything else is as before */
} ssb4d_status;

/* One error line; functions fill it on failure. */
typedef struct {
    ssb4d_status code;
    char msg[512];
} ssb4d_err;

/* Short name of a status ("invalid argument", ...). */
const char *ssb4d_status_name(ssb4d_status s);

/* ------------------------------------------------------------------------------------------ */
/* Memory accounting (src/common/mem.c)                                                         */
/*
 * All large buffers (data, G, FFT scratch, tiles) are allocated through an ssb4d_mem context.
 * It counts live bytes, cached bytes (freed into the reuse cache, kept for the next allocation
 * of the same size) and the peak, per named stage, and reads the process footprint
 * (VmHWM/VmRSS, the high-water reset per stage through /proc/self/clear_refs).
 * The context is thread-safe (a mutex guards its counters).
 */
typedef struct ssb4d_mem ssb4d_mem;

typedef struct {
    char name[48];
    size_t peak_bytes;     /* highest tracked live+cache during the stage */
    size_t after_bytes;    /* tracked live+cache when the stage ended */
    size_t live_after;     /* tracked live bytes when the stage ended */
    size_t cache_bytes;    /* of after_bytes, how much is reusable cache */
    size_t rss_peak_bytes; /* process high-water mark during the stage (0 if unknown) */
    size_t rss_after_bytes;
    double seconds;
    /* The device bytes held during the stage at most (a GPU backend's G: its planes, work buffers
     * and cuFFT's work areas, the peak reset at the stage's start); 0 on the CPU and outside a
     * session. A distributed session records rank 0's. Set by the session handle. */
    size_t device_peak_bytes;
} ssb4d_stage_record;

size_t ssb4d_mem_stage_count(const ssb4d_mem *m);
const ssb4d_stage_record *ssb4d_mem_stage(const ssb4d_mem *m, size_t i);
/* Prints the stage table ("peak during / after", tracked, cache, footprint) to f. */
void ssb4d_mem_report_print(const ssb4d_mem *m, FILE *f);
/*
 * Progress and cancel. The memory context is the one object every stage receives, so it also
 * carries the call's progress callback and its cancel flag. Long loops poll it (every BF plane,
 * block of frames or batch of candidates); the callback is called from whichever thread polls,
 * never by two threads at once, at most every 20 ms (except that a report of the work done, 1, is
 * always passed on), with the stage's name and the work done so far (0..1, an estimate). Returning non-zero cancels: the stage stops at its next poll and
 * returns SSB4D_ECANCELLED. ssb4d_mem_cancel may be called from any thread.
 */
typedef int (*ssb4d_progress_fn)(void *user, const char *stage, double fraction);
/* Current and peak process footprint from /proc/self/status (bytes; 0 if unavailable). */
size_t ssb4d_rss_now(void);
size_t ssb4d_rss_peak(void);

/* ------------------------------------------------------------------------------------------ */
/* Optics (src/optics/)                                                                         */

/* Relativistic electron wavelength in Å for an accelerating voltage in kV (CODATA 2018). */
double ssb4d_wavelength_A(double kv);

/* The 14 Krivanek coefficients, in this order. */
enum {
    SSB4D_C10, SSB4D_C12, SSB4D_C21, SSB4D_C23, SSB4D_C30, SSB4D_C32, SSB4D_C34,
    SSB4D_C41, SSB4D_C43, SSB4D_C45, SSB4D_C50, SSB4D_C52, SSB4D_C54, SSB4D_C56,
    SSB4D_N_ABERR
};
/* Name ("C10"), radial order n and azimuthal order m of coefficient i. */
const char *ssb4d_aberr_name(int i);
int ssb4d_aberr_n(int i);
int ssb4d_aberr_m(int i);
/* Index of a name like "C12" (case-insensitive), or -1. */
int ssb4d_aberr_index(const char *name);

/* Aberrations in public units: C in nm, phi in degrees (phi ignored where m = 0). */
typedef struct {
    double C_nm[SSB4D_N_ABERR];
    double phi_deg[SSB4D_N_ABERR];
} ssb4d_aberrations;

/* Thick-sample (tilt) model, SPEC §5.6. thickness_nm = 0 is standard SSB exactly. */
typedef struct {
    double tilt_mrad[2]; /* (row, col) */
    double thickness_nm;
} ssb4d_thick;

/* Microscope and detector geometry of one acquisition. */
typedef struct {
    double kv;
    double semiangle_mrad;
    double scan_step_A[2];        /* (row, col) */
    double det_sampling_mrad[2];  /* (row, col), mrad per detector pixel */
    double centre_px[2];          /* BF disk centre (det_row, det_col), pixels */
    double rotation_deg;          /* scan-detector rotation */
    int flip;                     /* 1: the detector is mirrored: its row and column axes are
                                     swapped (transposed) before the rotation (SPEC §2, §5.1) */
} ssb4d_geometry;

/* χ(v) in radians at reciprocal vector v = (vx, vy) (1/Å, vx along scan rows). */
double ssb4d_chi(const ssb4d_aberrations *ab, double lambda_A, double vx, double vy);

/* ------------------------------------------------------------------------------------------ */
/* Data sources (src/source/)                                                                   */
/*
 * A source yields the acquisition two ways:
 *   frames:  counts of consecutive scan positions (flattened row-major), for calibration;
 *   columns: float32 scan images of a list of detector pixels for a range of scan rows, for the
 *            G build ("column source"): out[(p * nrows + r) * scan_cols + c].
 * Implemented for .npy files (memory-mapped), encoded .qem files and caller-owned arrays.
 */
/* Stored value types: unsigned counts, or float32 (analogue detectors such as EMPAD and
 * gain-normalised data, read as they are: SPEC §4). The low byte is the width in bytes. */
typedef enum { SSB4D_U8 = 1, SSB4D_U16 = 2, SSB4D_U32 = 4, SSB4D_F32 = 0x104 } ssb4d_dtype;
/* Bytes per value of a dtype (1, 2 or 4). */
size_t ssb4d_dtype_bytes(ssb4d_dtype t);

typedef struct ssb4d_source ssb4d_source;

/* ------------------------------------------------------------------------------------------ */
/* Calibration (src/calibrate/)                                                                 */

typedef struct {
    double kv;
    double semiangle_mrad;
    double scan_step_A[2];
    double det_sampling_mrad[2]; /* <= 0: fit from the disk edge */
    double rotation_deg;         /* NaN: fit from the centre-of-mass curl */
    int flip;                    /* -1: the handedness from the centre-of-mass curl too (with a
                                    measured rotation; else 0); 0, 1: given (ssb4d_geometry) */
    double bf_radius_px;         /* selection radius; <= 0: the disk radius */
    double centre_px[2];         /* NaN: the disk centroid */
    int hot_pixels;              /* 1: detect hot pixels (default), 0: only file masks */
    int threads;                 /* 0: all cores */
    ssb4d_mem *mem;              /* counts the frame blocks and per-position buffers (may be NULL) */
    size_t block_bytes;          /* frames read at a time (uint32), 0: 64 MiB; same results for any */
    int edge_pixel_S;            /* the detector's pixel model, stated (SPEC §4 "Stated beats
                                    measured"; ssb4d_values.pixel_model_S): S x S point samples of
                                    the aperture's edge per pixel (the simulator's det_oversample;
                                    1 point-sampled); the edge fit then fits that model alone (R
                                    and the blur): 1, 3, 5 their own, S >= 6 the area-integrated
                                    hard edge (their limit: within 1/(6 S) px), 2 and 4 the next
                                    odd one. 0: not stated, the model with the smaller residual
                                    (docs/calibrate.md) */
} ssb4d_calib_params;

void ssb4d_calib_params_default(ssb4d_calib_params *p);

typedef struct {
    ssb4d_geometry geom;
    size_t det_shape[2];
    size_t scan_shape[2];
    double disk_centre_px[2];    /* measured centroid */
    double disk_radius_px;       /* equal-area radius of pixels > disk_threshold */
    double disk_threshold;       /* mean + std of the mean pattern, or the two-class threshold */
    int disk_threshold_two_class; /* 1: mean + std gave no filled disk (disk > half the detector) */
    int disk_threshold_half_median; /* 1: mean + std found only the bright core of a non-flat disk;
                                       the disk is the set above half its median */
    double edge_radius_px;       /* R_edge: the aperture's edge fitted with a model of its profile
                                    (SPEC §4; docs/calibrate.md), else (edge_model -1) the
                                    equal-area radius of pixels > median(disk)/2 */
    double selection_radius_px;
    double rotation_curl_deg;    /* measured (NaN if not measured) */
    double curl_ratio;           /* curl residual at the chosen angle / at the worst angle */
    double rotation_sigma_deg;   /* jackknife standard error of rotation_curl_deg (NaN if not measured) */
    int det_sampling_fitted, rotation_fitted, centre_fitted;
    int flip_fitted;             /* geom.flip chosen by the curl: the handedness whose best rotation
                                    leaves the smaller curl (curl_ratio vs curl_ratio_other) */
    double curl_ratio_other;     /* the other handedness's curl_ratio (NaN if not measured) */
    double *mean_pattern;        /* det_rows*det_cols, float64 */
    int32_t *bf_pix;             /* selected BF pixels (flat), ascending */
    size_t n_bf;
    int32_t *flagged;            /* flagged (hot) pixels, flat */
    size_t n_flagged;
    double total_counts;
    /* The measurement behind the sampling, made whether or not a sampling was stated (SPEC §4
     * "Stated beats measured": geom holds the stated one when there is one; det_sampling_fitted
     * says which). */
    double det_sampling_measured_mrad;       /* semiangle / edge_radius_px */
    double det_sampling_measured_sigma_mrad; /* its standard error (NaN: unknown) */
    double edge_radius_sigma_px;             /* standard error of edge_radius_px (NaN: unknown) */
    double edge_blur_px;                     /* the fitted blur (Gaussian σ) of the edge */
    int edge_model;                          /* the pixel model that fitted best (S x S point
                                                samples of the SPEC 5.2 edge per pixel): 0 S = 1
                                                (point-sampled; only with a blur under 0.144 px),
                                                1 S = 3, 2 S = 5, 3 area-integrated hard edge;
                                                -1 no fit (the half-median radius) */
    double edge_radius_threshold_px;         /* the half-median radius (the fit's start) */
    int edge_model_stated;                   /* 1: edge_model was stated (edge_pixel_S), 0: the
                                                residual chose it (or no fit) */
} ssb4d_calibration;

void ssb4d_calibration_free(ssb4d_calibration *c);

/* A stated sampling this many standard errors from the measured one is warned about (SPEC §4). */
#define SSB4D_SAMPLING_WARN_SIGMA 3.0
/* The detector sampling as every client reports it (SPEC §4 "Stated beats measured"): into text
 * (size n; NULL: not written) the sampling line without its label, "1.00832, 1.00832 mrad/px
 * (stated); measured 1.01845 +- 0.00050 (+1.00 %, 20.3 sigma)" or, when it was measured,
 * "1.01845 mrad/px +- 0.00050 (measured: semi-angle 25 mrad / the edge radius 24.547 px)"; into
 * warning (size wn; NULL: not written) the warning when the measured sampling differs from the
 * stated one by more than SSB4D_SAMPLING_WARN_SIGMA standard errors, else "". The warning's two
 * lines are separated by '\n' (the command line indents the second; one-line clients join them
 * with a space). Returns 1 when warned, 0 otherwise. */
int ssb4d_calibration_sampling_report(const ssb4d_calibration *c, char *text, size_t n, char *warning, size_t wn);

/* The smallest f in {1,2,3,4,8} with f/(2 s) >= 2 α0/λ on both axes (8 if none). */
int ssb4d_upsample_auto(const ssb4d_geometry *g);

/* ------------------------------------------------------------------------------------------ */
/* What a file states about its microscope (src/source/values.c)                                */
/*
 * The values `ssb4d fit DATA` starts from, layered, later winning: what a .qem records (its
 * overrides winning, qem-format §9.8), the simulator's sidecar JSON (sidecar_path, else the first
 * of DATA.json, DATA with its extension replaced by .json, and that without a trailing "_counts"),
 * then a calibration file (docs/calibration-file.md). NaN = not stated. A rotation measured from
 * the centre of mass never replaces a stated one (its 180° branch is open). The command line
 * layers its flags on top; the Python package its keyword arguments.
 */
typedef struct {
    double kv, semiangle_mrad, scan_step_A[2], det_sampling_mrad[2], centre_px[2], rotation_deg,
        bf_radius_px;
    char rotation_from[32];     /* "sidecar", "calibration file", ... ("" when not stated) */
    int flip;                   /* -1: not stated; 0, 1: the detector's handedness (SPEC §2) */
    char flip_from[32];         /* where it was stated ("" when not) */
    int rotation_measured;      /* measured (centre of mass): the fit may refine it and its branch */
    double rotation_sigma_deg;  /* its standard error (NaN: unknown) */
    int has_ab;                 /* aberrations stated (the sidecar's truth, a calibration file's) */
    int ab_from_truth;          /* they are the simulator's truth (C10 at the slab's mid-plane) */
    ssb4d_aberrations ab;
    char ab_from[64];           /* "simulator truth (sidecar)", "calibration file" */
    int has_thick;              /* a thick-sample model (a calibration file's) */
    ssb4d_thick thick;
    char sidecar_path[4096];    /* the sidecar that was read ("" none) */
    char calibration_identity[96]; /* the data identity the calibration file records ("" none) */
    /* What the data file itself records beyond the microscope (a .qem's record, or a foreign
     * format's reader): its format, camera length (mm) and dwell (µs); NaN / "" unknown. */
    char source_format[32];
    double camera_length_mm, dwell_us;
    /* The detector's pixel model (ssb4d_calib_params.edge_pixel_S): the sidecar's
     * detector.det_oversample, or the edge model a calibration file records
     * (detector.edge_model); 0 not stated. */
    int pixel_model_S;
} ssb4d_values;

/* Everything unset (NaN, 0, ""). */
void ssb4d_values_unset(ssb4d_values *v);
/* Every value `in` states replaces out's (a measured rotation never replaces a stated one). */
void ssb4d_values_layer(ssb4d_values *out, const ssb4d_values *in);
/* Reads the values of data_path (may be NULL: only the files given), its sidecar (sidecar_path or
 * the one found beside it) and calibration_path (may be NULL). A file that cannot be read or is
 * malformed is an error with its name; a missing sidecar is not. */
ssb4d_status ssb4d_values_read(const char *data_path, const char *sidecar_path, const char *calibration_path,
                               ssb4d_values *out, ssb4d_err *err);
/* The values of another acquisition's calibration file (path) whose rotation is to be held on
 * this one (a thin area's fit carried to a crystal: the command line's --rotation-from, Python's
 * rotation_from=; docs/fit.md): out as ssb4d_values_read(NULL, NULL, path) gives them. Refused
 * (SSB4D_EINVAL or the reader's error, the message naming path): a missing or broken file, one
 * that states no rotation, one whose rotation was measured from the centre of mass (its 180°
 * branch open). The caller takes out's rotation_deg and, where stated (flip >= 0), its flip, and
 * may compare out's kv, semi-angle and detector sampling with its own data's. */
ssb4d_status ssb4d_values_rotation_from(const char *path, ssb4d_values *out, ssb4d_err *err);

/* The parallax estimate of the fit's start (src/parallax/, SPEC §6.1; the advanced part runs it
 * on its own). */
#define SSB4D_PARALLAX_ALT 3
typedef struct {
    double B[4];            /* shift (Å) per detector pixel: [row←row, row←col, col←row, col←col] */
    double J;               /* mean over the offsets of the normalised cross-correlation at B */
    /* Other shift fields that the one- and two-pixel offsets allowed (a crystal's aliased
     * reflections can make several fit nearly as well), worse by J: the fit weighs them too. */
    size_t n_alt;
    double alt_B[SSB4D_PARALLAX_ALT][4], alt_J[SSB4D_PARALLAX_ALT];
    double C10_nm, C12_nm, phi12_deg; /* φ12 in the scan frame (ssb4d's χ), on this branch */
    double rotation_deg;    /* in [−90, 90); the other branch is +180° with −C10, −C12 */
    double est[4];          /* (C10, C12, φ12, rotation) as above */
    double sigma[4];        /* their standard errors (from the shifts' residuals; NaN if unknown) */
    int flip;               /* the handedness est is for (the geometry's) */
    double est_other[4], sigma_other[4]; /* the same for the other handedness (both fit B) */
    double residual_A;      /* rms misfit of the measured shifts (Å) */
    size_t n_offsets;       /* pixel offsets measured */
    size_t n_bins, n_pixels;
    double seconds;
} ssb4d_parallax;

/* ------------------------------------------------------------------------------------------ */
/* Fitting (src/fit/), SPEC §6                                                                   */
/*
 * The standard fit of (C10, C12, φ12) on a built G (docs/fit.md):
 *   1. the parallax estimate (ssb4d_parallax_estimate) gives the start, the scan–detector
 *      rotation (when the user did not give one) and the size of the search box;
 *   2. a seeded quasi-random search in that box on a coarse subset of the fit pixels, evaluated in
 *      batches that share each read of G, then Nelder–Mead on the subset and on all fit pixels;
 *      the objective is the band objective (the fraction of the spectra's power that the model's
 *      γ explains, SPEC 5.6 at zero thickness) or the exact loss;
 *   3. the 180° branch (SPEC §6.3);
 *   4. the exact loss (SPEC 5.4) over all selected BF pixels at the endpoint, and a confidence.
 * When the parallax finds no shift (no contrast) the search covers the whole box from `start`.
 * Deterministic: the trace depends only on G, the geometry and these parameters, never on the
 * thread count.
 */
typedef struct {
    int stage;          /* 0 global (coarse), 1 Nelder–Mead (coarse), 2 Nelder–Mead (all fit
                           pixels), 3 Nelder–Mead on the flipped branch */
    size_t number;      /* position in the whole trace */
    double C10_nm, C12_nm, phi12_deg, loss;
    int cached;         /* answered by the evaluation cache */
} ssb4d_fit_trial;

typedef enum { SSB4D_FIT_OBJ_BAND = 0, SSB4D_FIT_OBJ_LOSS = 1 } ssb4d_fit_objective;

typedef struct {
    double lo[3], hi[3]; /* box for (C10 nm, C12 nm, φ12 deg); φ12 wraps over a 180° range */
    double start[3];     /* used when start_given or when the parallax finds nothing (0, 5, 0) */
    int start_given;     /* 1: start at `start` rather than at the parallax estimate */
    int locked[3];       /* held at `start` */
    size_t trials;       /* global candidates (default 64 around the parallax estimate; at least
                            200 over the whole box without one) */
    size_t batch;        /* candidates per batch (default 8) */
    uint64_t seed;       /* default 42 */
    double fit_radius;   /* fraction of the selection radius (default 1: all BF pixels) */
    size_t coarse_bf;    /* pixels of the coarse subset (default 256; 0 = no coarse stage) */
    ssb4d_fit_objective objective; /* default SSB4D_FIT_OBJ_BAND */
    double band_lo_inv_A, band_hi_inv_A; /* the band objective's band; 0: automatic */
    int use_parallax;    /* default 1 */
    /* The rotation in the geometry: given by the user (kept; the checks only warn) or measured
     * by the calibration (CoM curl, with its standard error; NaN = not measured), in which case
     * the parallax may replace it. */
    int rotation_given;
    double rotation_sigma_deg;
    /* The handedness in the geometry (geom.flip): given (kept) or, when 0 (the default), tested:
     * the parallax's shifts fit either handedness equally (any 2x2 relation is symmetric x
     * rotation and symmetric x reflection); the band objective, which sees the trotters and
     * the contrast transfer, tells them apart. Without a parallax geom.flip is kept: measured
     * by the calibration's curl (flip_measured = 1) or not known. */
    int flip_given, flip_measured;
    int branch_check;    /* default 1 */
    ssb4d_aberrations base; /* the other coefficients, held fixed */
    int threads;         /* 0: all cores */
    /* Progress, 0..1 (an estimate: the work of Nelder–Mead is not known in advance). A cancel
     * (non-zero return) reaches the fit through the memory context it was given (none without
     * one): the running pass stops and the fit returns SSB4D_ECANCELLED. */
    ssb4d_progress_fn progress;  /* may be NULL; returning non-zero cancels (SSB4D_ECANCELLED) */
    void *progress_user;
} ssb4d_fit_params;

void ssb4d_fit_params_default(ssb4d_fit_params *p);

typedef struct {
    ssb4d_aberrations ab;       /* base with the fitted C10, C12, φ12 (φ12 in the scan frame) */
    double phi12_probe_deg;     /* φ12 in the probe (detector) frame: φ12 − rotation, mod 180
                                   (a mirrored detector: 90° + rotation − φ12) */
    ssb4d_geometry geom;        /* the geometry kept (rotation from the parallax, flipped by the
                                   branch check) */
    char rotation_source[24];   /* "given", "parallax", "centre of mass", "undetermined" */
    double rotation_sigma_deg;  /* standard error of the rotation used (NaN when unknown) */
    char flip_source[24];       /* geom.flip: "given", "objective" (the better of both handedness
                                   on the band objective), "centre of mass" (the calibration's
                                   curl), "assumed" (a start or locks given: not tested; as the
                                   geometry says), "undetermined" (nothing could test it) */
    double flip_objective[2];   /* the best start objective with flip 0 and 1 (NaN: not tried) */
    double loss;                /* exact loss (SPEC 5.4) on all selected BF pixels at the fit */
    double objective;           /* the minimised objective at the fit (on the fit pixels) */
    int branch_flipped;         /* the kept branch is 180° from the one the start gave */
    double skewness;            /* of the phase on the kept branch */
    double skewness_other;      /* of the other branch */
    ssb4d_parallax parallax;    /* the parallax estimate (parallax_ok = 0: none) */
    int parallax_ok;
    double loss_contrast;       /* (median of the global search − best) / |median| of the objective */
    /* Standard errors of the fitted C10, C12, φ12 (scan frame) and, when searched, the rotation:
     * the counting noise's, from the optima of 8 disjoint groups of the fit pixels (the inner and
     * outer half of the disk, each dealt into four) and their spread within each half, over √8
     * (docs/fit.md "Standard errors"). NaN: not fitted (locked, a given rotation) or too few
     * pixels; INFINITY: the objective has no minimum near the fit on the groups' mean curvature. */
    double C10_se_nm, C12_se_nm, phi12_se_deg, rotation_se_deg;
    /* A model check, not noise: the inner half's optimum − the outer half's, for C10 nm, C12 nm,
     * φ12 deg and the rotation deg (NaN, INFINITY as above). Thin specimens: about 0.1 nm in
     * C10; crystals whose phase the thin model does not describe: more. */
    double disk_split[4];
    int confident;              /* 0: no clear minimum, the rotation undetermined, or (rotation
                                   searched) |skewness| < SSB4D_FIT_SKEW_SETTLED: branch uncertain */
    char warning[256];          /* why not confident (empty when confident) */
    size_t n_fit_bf, n_coarse_bf;
    size_t evaluations;         /* objective evaluations (cache misses) */
    int nm_iterations;          /* over all Nelder–Mead stages */
    char trace_sha256[65];      /* over every trial (stage, parameters, loss) in order */
    ssb4d_fit_trial *trials;    /* the whole trace; freed by ssb4d_fit_result_free */
    size_t n_trials;
    double seconds;
} ssb4d_fit_result;

/* Below this |skewness| of the fitted phase the sign of the phase does not settle the 180° branch
 * (thick crystals; docs/fit.md) and a searched rotation's fit is not confident. */
#define SSB4D_FIT_SKEW_SETTLED 1.5
/* Below this skewness, with the rotation given, the atoms show as negative phase peaks: the given
 * rotation may be 180° off (SPEC §6.3's threshold); the fit keeps it and is not confident. */
#define SSB4D_FIT_SKEW_WRONG (-0.2)

void ssb4d_fit_result_free(ssb4d_fit_result *r);

/* Results in both frames (src/fit/frames.c). φ12 (deg) in the probe (detector) frame of a
 * scan-frame φ12 under g's rotation and handedness, in [−90, 90): φ12 − rotation, or with a
 * mirrored detector (g->flip) 90° + rotation − φ12 (ssb4d_fit_result.phi12_probe_deg). */
double ssb4d_phi12_to_probe(const ssb4d_geometry *g, double phi12_scan_deg);
/* A scan-frame vector (the thick model's tilt, mrad; row, col) in the probe (detector) frame:
 * turned by −rotation, then its row and column swapped when the detector is mirrored. */
void ssb4d_vector_to_probe(const ssb4d_geometry *g, const double scan[2], double probe[2]);

/* ------------------------------------------------------------------------------------------ */
/* Budgets                                                                                      */
/* How the session's memory plan is held (ssb4d_session_plan; its fields are in the advanced
 * part, "Memory planner"). */
typedef struct ssb4d_plan ssb4d_plan;
/* The stages a session will run, for its plan (ssb4d_session_opts.script; advanced part). */
typedef struct ssb4d_session_script ssb4d_session_script;
typedef enum { SSB4D_PREVIEW_AUTO = 0, SSB4D_PREVIEW_FLOAT = 1, SSB4D_PREVIEW_HALF = 2 } ssb4d_preview_precision;

/* Available memory (MemAvailable; 0 if unknown) and total RAM (MemTotal) in bytes. */
size_t ssb4d_mem_available(void);
size_t ssb4d_mem_total(void);
/* Parses "16G", "512M", "8GiB", "1.5T", "2000000" (bytes) into bytes: K/M/G/T are powers of
 * 1024, an optional "B" or "iB" follows. Returns 0 on success, -1 for anything else. */
int ssb4d_parse_size(const char *s, size_t *out);

/* ------------------------------------------------------------------------------------------ */
/* The session handle (src/session/handle.c): one live acquisition that a viewer, a script or a */
/* GPU backend steers                                                                           */
/*
 * open → calibrate → fit (→ tilt fit) → previews, the object, region refits → save → close.
 * The handle owns the data source, the memory context (the budget), the calibration, G (built on
 * first need, held as the memory plan decides: resident, or its outer BF pixels streamed) and
 * the current parameters (aberrations, thick model, geometry with its rotation), which a fit, an
 * apply or a set call changes and every preview and save uses. Each call is one stage in the
 * memory report (ssb4d_session_mem: ssb4d_mem_stage / ssb4d_mem_report_print).
 *
 * Thread safety: a handle is used by one thread at a time; ssb4d_session_cancel may be called
 * from any thread at any time (it is what a viewer's "newer request" does). Handles are
 * independent of each other. Results are the same bits as the stage functions called directly,
 * whatever the thread count.
 *
 * Cancel: the progress callback (opts.progress) is called at least every ~50 ms of work with the
 * stage's name and the fraction done; returning non-zero, or ssb4d_session_cancel, ends the
 * running call with SSB4D_ECANCELLED within about 50 ms of work. The session stays usable: what
 * the call was making is dropped and the current parameters are those before the call.
 */
typedef struct ssb4d_session ssb4d_session;

/* Where the heavy passes run. AUTO: CUDA when the build has the CUDA backend (-DSSB4D_CUDA) and a
 * device is present, else the CPU. CUDA where it cannot run: ssb4d_session_open* fail with
 * SSB4D_EINVAL and the reason. */
typedef enum { SSB4D_BACKEND_AUTO = 0, SSB4D_BACKEND_CPU = 1, SSB4D_BACKEND_CUDA = 2 } ssb4d_backend_kind;
/* The backend a session asking for kind would run on here: SSB4D_OK and its name ("cpu",
 * "cuda"; a static string) in *name (may be NULL), or SSB4D_EINVAL with the reason it cannot run
 * (a build without CUDA, no device): what a command checks before any long work. */
ssb4d_status ssb4d_backend_check(ssb4d_backend_kind kind, const char **name, ssb4d_err *err);

typedef struct {
    /* The microscope: kv, semiangle_mrad, scan_step_A are required (> 0); det_sampling_mrad,
     * rotation_deg (NaN: measured), centre_px, bf_radius_px as ssb4d_calib_params says. A
     * rotation given here is held by every fit (rotation_given). calib.mem/threads are ignored. */
    ssb4d_calib_params calib;
    size_t memory_bytes;            /* the budget; 0: available RAM */
    int threads;                    /* 0: all cores */
    ssb4d_backend_kind backend;
    ssb4d_progress_fn progress;     /* may be NULL */
    void *progress_user;
    /* What the session will do, for the memory plan made at calibration (plan, then execute):
     * its stages (NULL: the viewer's session, ssb4d_session_script_default), the fit it will run
     * (NULL: the defaults; no_fit: none, as in a reconstruction) and the bytes the caller keeps
     * live beside it for the session's life (output images, data it holds), which count under
     * the budget. Only memory decisions follow from these; results do not. */
    const ssb4d_session_script *script;
    const ssb4d_fit_params *fit;
    int no_fit;
    size_t held_bytes;
    /* Output images the caller keeps to the end, in floats per image pixel of the field at the
     * script's upsampling (a phase image 1; with the complex object 3): planned like held_bytes. */
    size_t held_image_floats;
    /* rotation_measured: calib.rotation_deg was measured, not stated (a calibration file's
     * centre-of-mass value): the fits start from it, its 180° branch open, with its standard
     * error rotation_sigma_deg (NaN: undetermined), instead of holding it. 0 (the default): a
     * given rotation is held. */
    int rotation_measured;
    double rotation_sigma_deg;
    /* Scan rows [region[0], region[1]) x cols [region[2], region[3]): the field the session
     * fits and images (previews, the object, the fits); the calibration still reads the whole
     * scan. All 0 (the default): the whole scan. */
    size_t region[4];
    /* Advanced, for checks and tuning; 0: the plan's and the library's choice. The G build's
     * decoded block in bytes, and the SSB transform path (ssb4d_path, the advanced part). */
    size_t block_bytes;
    int ssb_path;
    /* The G that previews, the object and the loss read: FLOAT (the default: exact, what the
     * command line writes) or AUTO (the plan may hold a half-precision copy for them when the
     * float32 one does not fit beside the preview's buffers; the fits always use float32). */
    ssb4d_preview_precision preview;
    /* A distributed session (ssb4d_dist_mpi; NULL: this process alone). Every rank of its
     * communicator opens the same data with the same options and makes the same calls in the same
     * order; each holds G for its own blocks of BF pixels, and every result is the one-process
     * result, bit for bit, on every rank (SPEC 11, docs/scale.md). */
    const struct ssb4d_dist *dist;
    /* The device memory the CUDA backend may hold (G's planes, its work buffers, cuFFT's work
     * areas; the peak of plan/device_model.h's replay of the session); 0: the device's free
     * memory. A session that needs more fails at the G build (SSB4D_ENOMEM, one line naming the
     * bytes and the budget). Ignored on the CPU. */
    size_t device_memory_bytes;
    /* Who stated a given calib.rotation_deg ("sidecar", "--rotation", ...: ssb4d_values.rotation_from),
     * which ssb4d_session_save_calibration records; "" unknown. */
    char rotation_from[32];
} ssb4d_session_opts;

void ssb4d_session_opts_default(ssb4d_session_opts *o);


/* Checks that path is a data file ssb4d_session_open can open, as it would, before anything
 * else is said about it: a missing or unreadable file, a folder, not a regular file (SSB4D_EIO:
 * "cannot open PATH: why"), a file whose content is no format ssb4d reads, a .npy without its
 * magic, a .qem whose header is broken (the format's error, naming the file). Reads headers only. */
ssb4d_status ssb4d_data_check(const char *path, ssb4d_err *err);

/* Opens DATA (.qem or .npy; the .qem's mapping counts under the budget). Nothing is read yet. */
ssb4d_status ssb4d_session_open(const char *path, const ssb4d_session_opts *o, ssb4d_session **out,
                                ssb4d_err *err);
/* Opens a caller-owned 4-D array (scan rows, scan cols, det rows, det cols), used without a copy:
 * it must stay alive and unchanged until ssb4d_session_close. Its bytes count under the budget
 * (it is resident for the session's life, like a .qem's mapping). */
ssb4d_status ssb4d_session_open_memory(const void *data, ssb4d_dtype dtype, const size_t shape[4],
                                       const ssb4d_session_opts *o, ssb4d_session **out, ssb4d_err *err);
/* Frees everything the session holds. NULL is allowed. */
void ssb4d_session_close(ssb4d_session *s);
/* Thread-safe: ends the call running now with SSB4D_ECANCELLED (a call that starts later starts
 * clean: a viewer cancels the older request, then runs the newer). */
void ssb4d_session_cancel(ssb4d_session *s);

/* Finds the BF disk, detector sampling, hot pixels and (unless given) the rotation, and plans
 * memory for the session (SPEC §4, §9). A budget too small for the session is SSB4D_ENOMEM with
 * the planner's reason. Called by the other calls when needed. */
ssb4d_status ssb4d_session_calibrate(ssb4d_session *s, ssb4d_err *err);
const ssb4d_calibration *ssb4d_session_calibration(const ssb4d_session *s); /* NULL before */
const ssb4d_plan *ssb4d_session_plan(const ssb4d_session *s);                /* NULL before */
/* The acquisition's shape (scan rows, scan cols, det rows, det cols). */
void ssb4d_session_shape(const ssb4d_session *s, size_t shape[4]);

/* The standard fit (ssb4d_fit) of the whole field; p NULL: defaults. The session's threads, the
 * rotation (given or measured) and progress are filled in. On success the session's parameters
 * become the fit's (aberrations, geometry with its rotation; thick model reset to thin). r is
 * freed by ssb4d_fit_result_free. */
ssb4d_status ssb4d_session_fit(ssb4d_session *s, const ssb4d_fit_params *p, ssb4d_fit_result *r,
                               ssb4d_err *err);

/* The parameters a fit with p (NULL: defaults) runs with in this session: p's, with the
 * session's threads and its rotation, held (given) or searched from the measured value with its
 * standard error (after calibration). For reporting what a fit did; progress fields are NULL. */
void ssb4d_session_fit_params(const ssb4d_session *s, const ssb4d_fit_params *p, ssb4d_fit_params *out);

/* The thick-sample (tilt) fit, SPEC §6.2, from the last standard fit (its box, locks, seed and
 * batch; run ssb4d_session_fit first). On success the session's parameters become its result. */
typedef struct {
    double C10_nm, C12_nm, phi12_deg; /* at mid-depth, φ12 in the scan frame */
    ssb4d_thick thick;                /* tilt (scan frame) and thickness */
    double gain;                      /* band objective against the thin baseline (>= 1) */
    int thin_kept;                    /* no thick point beat the thin baseline */
    size_t evaluations;
    char trace_sha256[65];
} ssb4d_tilt_result;
ssb4d_status ssb4d_session_fit_tilt(ssb4d_session *s, ssb4d_tilt_result *r, ssb4d_err *err);

/* The current parameters (any may be NULL). */
void ssb4d_session_get(const ssb4d_session *s, ssb4d_aberrations *ab, ssb4d_thick *thick, ssb4d_geometry *g);
/* Sets the current aberrations and thick model (thick NULL: thin). */
void ssb4d_session_set(ssb4d_session *s, const ssb4d_aberrations *ab, const ssb4d_thick *thick);
/* Holds the scan–detector rotation at deg (later fits keep it, as if given). Calibrates first. */
ssb4d_status ssb4d_session_set_rotation(ssb4d_session *s, double deg, ssb4d_err *err);
/* Holds the detector's handedness at flip (0 or 1; later fits keep it, as if given, rather than
 * test both): with ssb4d_session_set_rotation, the geometry of one fit held for others (as
 * ssb4d_session_settle_branch holds the region that settles the 180° branch). Calibrates first. */
ssb4d_status ssb4d_session_set_flip(ssb4d_session *s, int flip, ssb4d_err *err);
/* Makes a fit's result (of the whole field or of a region) the current parameters: its
 * aberrations and geometry, for the whole field. */
void ssb4d_session_apply(ssb4d_session *s, const ssb4d_fit_result *r);

/* One preview: what a viewer draws while a slider moves, and on release. */
typedef enum {
    SSB4D_ESTIMATE_OBJECT = 0,     /* arg of the mean corrected spectrum (SPEC §5.5, the image) */
    SSB4D_ESTIMATE_MEAN_PHASE = 1, /* mean of the BF pixels' phases (what the loss measures) */
    SSB4D_ESTIMATE_TRANSFER = 2    /* the object divided by its transfer (ssb4d_object_transfer) */
} ssb4d_estimator;
typedef struct {
    const ssb4d_aberrations *ab;  /* NULL: the current ones (higher orders included) */
    const ssb4d_thick *thick;     /* NULL: the current ones */
    double rotation_deg;          /* NaN: the current rotation */
    int upsample;                 /* 1, 2, 3, 4 or 8; 0: ssb4d_upsample_auto */
    size_t subset;                /* 0: all BF pixels; n: every ⌊N_bf/n⌋-th (a drag preview) */
    ssb4d_estimator estimator;
    int want_loss;                /* also the exact loss (SPEC 5.4) over the same BF pixels,
                                     native sampling */
} ssb4d_preview_req;
void ssb4d_preview_req_default(ssb4d_preview_req *q);
/* The phase image's shape for an upsampling (0: auto), after calibration. */
ssb4d_status ssb4d_session_image_shape(ssb4d_session *s, int upsample, size_t *ny, size_t *nx, ssb4d_err *err);
/* phase: room for the image_shape floats; loss (want_loss) may be NULL otherwise. */
ssb4d_status ssb4d_session_preview(ssb4d_session *s, const ssb4d_preview_req *q, float *phase, double *loss,
                                   ssb4d_err *err);
/* The complex object (image_shape complex64 as float pairs) and/or its phase, at the current
 * parameters; exactly what `ssb4d fit` writes as object.npy and phase.tiff. */
ssb4d_status ssb4d_session_object(ssb4d_session *s, int upsample, float *object, float *phase, ssb4d_err *err);
/* The image by an estimator at the current parameters: SSB4D_ESTIMATE_OBJECT is
 * ssb4d_session_object; SSB4D_ESTIMATE_TRANSFER the transfer-corrected object and/or its phase
 * (ssb4d_object_transfer, eps SSB4D_TRANSFER_EPS); SSB4D_ESTIMATE_MEAN_PHASE the phase only (object
 * must be NULL). What `ssb4d reconstruct --estimator` writes. */
ssb4d_status ssb4d_session_image(ssb4d_session *s, int upsample, ssb4d_estimator est, float *object, float *phase,
                                 ssb4d_err *err);
/* A release at the current parameters: the object and/or its phase at native sampling and the
 * exact loss over all BF pixels, from one pass over G (the same bits as ssb4d_session_object at
 * upsample 1 and ssb4d_session_loss, in about the loss's time). loss and one of object/phase are
 * required. */
ssb4d_status ssb4d_session_release(ssb4d_session *s, float *object, float *phase, double *loss, ssb4d_err *err);
/* The exact loss (SPEC §5.4) over all BF pixels at the current parameters, native sampling:
 * what `ssb4d reconstruct` and `ssb4d fit` report. */
ssb4d_status ssb4d_session_loss(ssb4d_session *s, double *loss, ssb4d_err *err);
/* Builds G now, as the plan says (the other calls build it on first need): a caller that shows
 * the slow step on its own, or times it, calls this after calibrating. */
ssb4d_status ssb4d_session_build(ssb4d_session *s, ssb4d_err *err);
/* How G is held now: its bytes, the BF pixels it serves, the planes stored and those resident
 * (fewer: the outer ones are streamed). All 0 before it is built. A distributed session: this
 * rank's G (its bytes, its stored planes, all resident) of all the BF pixels. */
void ssb4d_session_G_info(const ssb4d_session *s, size_t *bytes, size_t *n_bf, size_t *n_stored,
                          size_t *n_resident);

/* SSB4D_OK when rows [r0, r1) x cols [c0, c1) is a region the session can refit (inside the
 * scan, at least 32x32), else SSB4D_EINVAL saying why. Reads nothing: a viewer checks a drawn
 * rectangle, a script its list, before the long work. */
ssb4d_status ssb4d_session_check_region(const ssb4d_session *s, const size_t rect[4], ssb4d_err *err);
/* Refits scan rows [r0, r1) x cols [c0, c1) (at least 32x32) with the full field's calibration;
 * p NULL: the last fit's parameters (or the defaults). The session's parameters are unchanged
 * (ssb4d_session_apply makes them current). */
ssb4d_status ssb4d_session_fit_region(ssb4d_session *s, const size_t rect[4], const ssb4d_fit_params *p,
                                      ssb4d_fit_result *r, ssb4d_err *err);
/* Region i (row-major) of a grid of rows x cols equal regions of a scan[0] x scan[1] scan: the
 * last row and column take the remainder. */
void ssb4d_grid_rect(const size_t scan[2], size_t rows, size_t cols, size_t i, size_t rect[4]);
/* The 180° branch of n region fits whose rotation was searched (issue 32; docs/fit.md "The branch
 * from the thinnest region"): a thick crystal's regions cannot settle it, a thin one's can.
 * results[n] are ssb4d_session_fit_region's fits with p of the rectangles rects[4n] (r0, r1, c0,
 * c1 each). The region whose branch is settled most clearly, the largest |skewness| among the
 * confident fits (a searched rotation's fit is confident only with |skewness| >=
 * SSB4D_FIT_SKEW_SETTLED; ties: the first), sets the rotation and handedness: the session holds
 * them from then on, for the field too (as ssb4d_session_set_rotation and ssb4d_session_set_flip
 * leave it: the current geometry and later fits), and every other region is refit with p, its
 * results[i] freed and replaced. *from (may be NULL): that region's index, or n when none
 * settles it (each keeps its own fit; the session is unchanged) or there is nothing to settle
 * (fewer than 2 regions, the rotation held, p's branch_check off). After a failure (a cancel) the
 * caller frees results[] as they are. `ssb4d fit-regions`, Python and the viewer call it. */
ssb4d_status ssb4d_session_settle_branch(ssb4d_session *s, const size_t *rects, size_t n, const ssb4d_fit_params *p,
                                         ssb4d_fit_result *results, size_t *from, ssb4d_err *err);
/* 1 when ssb4d_session_settle_branch would try to settle the branch of n region fits made with p
 * (NULL: the session's): 2 or more regions, the rotation searched, the branch check on. With
 * *from == n after it, this tells "none settles it" (a warning is due) from "nothing to settle". */
int ssb4d_session_branch_to_settle(const ssb4d_session *s, const ssb4d_fit_params *p, size_t n);
/* A grid of rows x cols equal regions (the last row and column take the remainder), each refit
 * as above: results[rows*cols] (row-major; free each with ssb4d_fit_result_free) and rects
 * (may be NULL) their rectangles. The aberration map is results[i].ab over rects[i]. Unless
 * rotation_per_region, the branch is then settled (ssb4d_session_settle_branch): *branch_region
 * (may be NULL) is the settling region's index, rows*cols when none set it. */
ssb4d_status ssb4d_session_fit_regions(ssb4d_session *s, size_t rows, size_t cols, const ssb4d_fit_params *p,
                                       int rotation_per_region, ssb4d_fit_result *results, size_t (*rects)[4],
                                       size_t *branch_region, ssb4d_err *err);

/* Writes the calibration and the current parameters as a calibration file (docs/calibration-
 * file.md) that `ssb4d reconstruct --calibration` reads; refuses an existing path unless force.
 * The file appears atomically. With the last standard fit's record (its search settings and best
 * trials, the tilt fit's thick model), the scan region and the data file's identity: the file
 * `ssb4d fit` writes, byte for byte, for the same data and options (no times in it). */
ssb4d_status ssb4d_session_save_calibration(ssb4d_session *s, const char *path, int force, ssb4d_err *err);
/* Reads a calibration file: its microscope, geometry, rotation (held as given) and aberrations
 * become the session's; the session is recalibrated with them on its next call. */
ssb4d_status ssb4d_session_load_calibration(ssb4d_session *s, const char *path, ssb4d_err *err);
/* Makes the standard fit a calibration file records (its "fit" section, as ssb4d_session_save_
 * calibration writes it: `ssb4d fit`'s, Python's, the viewer's Save) the session's last fit, as
 * if it had just run (its aberrations, geometry, loss, standard errors, search settings and best
 * trials; not its trace): what ssb4d_session_last_fit returns and a save writes again. The
 * microscope values and the current parameters stay as they are. A file without a fit: EINVAL. */
ssb4d_status ssb4d_session_load_fit(ssb4d_session *s, const char *path, ssb4d_err *err);
/* The session's last standard fit (ssb4d_session_fit or ssb4d_session_load_fit) into *r, without
 * its trials (r->trials NULL): 1, or 0 (r zeroed) when it has none. */
int ssb4d_session_last_fit(const ssb4d_session *s, ssb4d_fit_result *r);

/* Multislice refinement (src/refine/, SPEC §13): a model that explains the recorded intensities,
 * seeded by the SSB fit (docs/refine.md). */

typedef enum { SSB4D_REFINE_POISSON = 0, SSB4D_REFINE_AMPLITUDE = 1 } ssb4d_refine_loss;

typedef struct {
    int slices;                    /* N slices; 0: auto (about one per 1.5 nm of the thickness, >= 1) */
    double thickness_nm;           /* the start's total thickness; NaN: the middle of the range */
    double thickness_range_nm[2];  /* the range the thickness may take; equal ends: held fixed */
    int iterations;                /* passes over the positions in all (0: the default, e.g. 30) */
    size_t batch;                  /* positions per minibatch (0: the library's choice) */
    ssb4d_refine_loss loss;
    int refine_aberrations;        /* 1 (default): C10, C12, φ12 after the object stage */
    int refine_tilt;               /* 1 (default) */
    int refine_thickness;          /* 1 (default) when the range is not a point */
    int refine_probe;              /* 0 (default): probe pixels free in the last stage */
    int modes;                     /* incoherent probe modes, 1 (default) */
    int bin;                       /* detector binning 1, 2, 4 (0: the library's choice for speed) */
    uint64_t seed;
    int threads;                   /* 0: all cores; results do not depend on it (SPEC §9) */
    ssb4d_mem *mem;                /* budget, progress ("refine", fraction) and cancel; may be NULL */
    double slice_coupling;         /* κ, how strongly the slices are held alike (the tilt is
                                      degenerate with shifted free slices; docs/refine.md
                                      "Regularisation"): 0 = the default 1, negative = off */
    int restart_check;             /* 1 (default): a second, shorter start from the other side of
                                      the thickness and the tilt, which must agree with the result
                                      for confidence (about 60 % more time; only when the
                                      thickness or the tilt is refined); 0: none */
    ssb4d_backend_kind backend;    /* where the minibatches run (docs/refine.md "Backends"): AUTO
                                      (default) and CPU = the CPU; CUDA = the GPU (asked for only:
                                      its whole runs do not yet agree with the CPU's), SSB4D_EINVAL
                                      where it cannot run. The session's door keeps AUTO on the CPU */
} ssb4d_refine_params;
void ssb4d_refine_params_default(ssb4d_refine_params *p);

typedef struct {
    ssb4d_aberrations ab;          /* the seed with the refined C10, C12, φ12 (φ12 scan frame) */
    double phi12_probe_deg;        /* φ12 in the probe frame (ssb4d_phi12_to_probe) */
    double tilt_mrad[2];           /* scan frame (row, col); SPEC §5.6's specimen tilt, as the tilt
                                      fit's (ssb4d_thick): minus the simulator's beam tilt */
    double tilt_probe_mrad[2];     /* probe frame (ssb4d_vector_to_probe) */
    double thickness_nm;
    int slices;
    ssb4d_geometry geom;           /* the geometry used (rotation, flip, sampling: the seed's) */
    double nll;                    /* final negative log-likelihood per position (Poisson: deviance form) */
    double nll_expected;           /* what pure counting noise would give at the truth (for confidence) */
    double *history;               /* nll after each iteration; n_history entries */
    size_t n_history;
    int confident;
    char warning[256];             /* why not confident ("" when confident) */
    size_t obj_shape[2];           /* object grid (rows, cols), probe frame */
    double obj_pixel_A[2];
    float *slice_phase;            /* slices x rows x cols: the phase of each slice's transmission */
    float *projected_phase;        /* rows x cols: Σ of the slices' phases */
    size_t probe_shape[2];
    float *probe;                  /* probe_shape complex64 as float pairs, real space, at the entrance */
    size_t region[4];              /* scan rows [r0,r1) x cols [c0,c1) refined */
    double seconds;
    double C10_entrance_nm;        /* C10 at the first slice's plane (ab's C10 is at the
                                      mid-plane, as the SSB fit's: the centroid of the N slices'
                                      planes, entrance + (N − 1)·thickness/(2N)) */
    int bin;                       /* the detector binning used */
    double seconds_per_iteration;  /* one pass of the main solve (with its global step) */
    double grad[6];                /* the final loss gradient per position, in the order C10, C12
                                      (per Å), φ12 (per rad), tilt row, col (per rad, scan frame),
                                      Δz (per Å) */
    double curvature[6];           /* the loss's curvature along each (NaN: not refined) */
    double thickness_check_nm;     /* where the check start's thickness ended (NaN: not run) */
    /* Whether the tilt and the thickness were refined (1) or repeat the start (0): with one slice
     * the model has no depth, so neither is (tilt_mrad and thickness_nm are the seed's), nor is
     * the tilt with refine_tilt = 0 or the thickness with refine_thickness = 0 or a range that is
     * a point. */
    int tilt_refined, thickness_refined;
    const char *backend;           /* where the minibatches ran: "cpu" or "cuda" (a static string) */
    size_t device_peak_bytes;      /* the GPU memory the refinement held at most (0 on the CPU) */
} ssb4d_refine_result;
void ssb4d_refine_result_free(ssb4d_refine_result *r);

/* Refines from a source (region: scan rows [r0,r1) x cols [c0,c1) of src, all 0 = whole scan),
 * its calibration (BF centre, flagged pixels, sampling) and the geometry g (rotation and flip: the
 * SSB fit's), seeded by ab (the SSB fit's) and thick (NULL: untilted, thickness from p). */
ssb4d_status ssb4d_refine(ssb4d_source *src, const ssb4d_calibration *cal, const ssb4d_geometry *g,
                          const size_t region[4], const ssb4d_aberrations *ab, const ssb4d_thick *thick,
                          const ssb4d_refine_params *p, ssb4d_refine_result *r, ssb4d_err *err);

/* The session's door: calibrates if needed; seeds from the session's current parameters (the
 * last fit or a loaded calibration file's aberrations; with neither, the standard fit is run first);
 * region: scan rows/cols of the whole scan, NULL or all 0: the session's region (or the whole scan). Progress and cancel through the session. On success the
 * session's aberrations and thick model become the refined ones, and a later
 * ssb4d_session_save_calibration records the refinement ("refine" section). */
ssb4d_status ssb4d_session_refine(ssb4d_session *s, const size_t region[4], const ssb4d_refine_params *p,
                                  ssb4d_refine_result *r, ssb4d_err *err);
/* The session's last refinement (1), or 0 when none (r zeroed; arrays not copied: NULL). */
int ssb4d_session_last_refine(const ssb4d_session *s, ssb4d_refine_result *r);

/* Groups the calls that follow, until ssb4d_session_stage_end, into one stage of the memory
 * report named `name` (a viewer's "12 drags"; the replayed session's stages). */
void ssb4d_session_stage_begin(ssb4d_session *s, const char *name);
void ssb4d_session_stage_end(ssb4d_session *s);
/* The memory context: limit, peak and the per-stage table (ssb4d_mem_stage_count, ...). The caller
 * may allocate its own buffers under the session's budget from it (opts.held_bytes plans them). */
ssb4d_mem *ssb4d_session_mem(const ssb4d_session *s);
/* The backend in use ("cpu" or "cuda"). */
const char *ssb4d_session_backend(const ssb4d_session *s);

/* ------------------------------------------------------------------------------------------ */
/* Virtual images (src/virtual/, docs/virtual.md)                                               */
/*
 * Virtual bright field (BF), annular dark field (ADF), centre of mass (CoM) and integrated DPC
 * (iDPC) images of an acquisition, all from ONE streaming pass over its frames (a block of
 * frames at a time: memory is the block, the five scan-sized float64 images and, for iDPC, two
 * complex64 scan planes), given its calibration (ssb4d_calibrate or a session's).
 *
 * Detector angles: a pixel (row, col) lies at θ = hypot((row − c_r)·s_r, (col − c_c)·s_c) mrad
 * from the calibration's centre (geom.centre_px = (c_r, c_c), the BF disk centroid unless given)
 * with the calibration's sampling s (geom.det_sampling_mrad). Flagged (hot / dead) pixels of the
 * calibration are left out of every image.
 *   BF   Σ counts over the calibration's BF selection (its bf_pix: unflagged pixels within
 *        selection_radius_px of the centre) by default, or over bf_inner <= θ <= bf_outer when
 *        bf_outer_mrad is given.
 *   ADF  Σ counts over adf_inner <= θ <= adf_outer; defaults: inner 1.5x the BF outer angle,
 *        outer the detector's farthest pixel (an outer angle beyond it is clamped to it).
 *   CoM  the centre of mass of the unflagged pixels minus the centre, in mrad, turned into the
 *        scan frame as calibrate's rotation fit does (SPEC §5.1): d = (d_row, d_col), swapped
 *        when geom.flip, then k = R(θ)·d with R(θ) = [[cos θ, −sin θ], [sin θ, cos θ]],
 *        θ = geom.rotation_deg. com_x = k[0] lies along the scan rows (the first scan index,
 *        ssb4d's x), com_y = k[1] along the scan columns. 0 where a frame has no counts.
 *   iDPC φ with ∇φ = (2π/λ)·CoM (a thin phase object's deflection): φ = Re IDFT[−i·10⁻³/λ ·
 *        (f_x·C_x + f_y·C_y) / (f_x² + f_y²)], f = fftfreq(n, scan step) on each axis, the
 *        k = 0 term 0 (mean 0), computed with FFTW in single precision (complex-to-complex,
 *        FFTW_ESTIMATE). In rad when kV and the scan step are known; otherwise with λ = 1 Å and
 *        steps of 1 ("mrad px", idpc_unit says which).
 * Determinism: each frame's sums are made by one thread in pixel order (integers for counts,
 * float64 for float32 data), so every image has the same bits for any thread count and block
 * size. Float32 sources are read as stored.
 */
typedef struct {
    double bf_inner_mrad;      /* BF annulus inner angle (default 0) */
    double bf_outer_mrad;      /* NaN (default): the calibration's BF selection (with
                                  bf_inner_mrad <= θ) */
    double adf_inner_mrad;     /* NaN (default): 1.5 x the BF outer angle */
    double adf_outer_mrad;     /* NaN (default): the detector's farthest pixel */
    int threads;               /* 0: all cores */
    size_t block_bytes;        /* frames read at a time (4 bytes a value); 0: 64 MiB */
    ssb4d_mem *mem;            /* counts the frame block and the iDPC planes; carries progress
                                  and cancel (may be NULL) */
    ssb4d_progress_fn progress; /* may be NULL ("virtual images", 0..1); non-zero cancels */
    void *progress_user;
} ssb4d_virtual_params;

void ssb4d_virtual_params_default(ssb4d_virtual_params *p);

typedef struct {
    size_t scan_shape[2];      /* rows, cols of every image */
    /* scan_shape[0] x scan_shape[1], row-major, float64; freed by ssb4d_virtual_free */
    double *bf, *adf, *com_x, *com_y, *idpc;
    /* what was used: angles in mrad (the BF default's outer angle is its selection radius x
     * the geometric mean of the two samplings), the pixels each sum covers */
    double bf_inner_mrad, bf_outer_mrad, adf_inner_mrad, adf_outer_mrad;
    double detector_max_mrad;  /* the farthest pixel's angle from the centre */
    size_t n_bf_pixels, n_adf_pixels, n_com_pixels;
    int bf_default;            /* 1: BF is the calibration's BF selection */
    double centre_px[2], det_sampling_mrad[2], rotation_deg;
    int flip;
    double idpc_lambda_A, idpc_step_A[2]; /* what the integration used */
    char idpc_unit[16];        /* "rad", or "mrad px" when kV or the scan step is unknown */
    double seconds;
} ssb4d_virtual_images;

/* The five images of src under cal (its geometry, BF selection and flagged pixels; the detector
 * shapes must match, the scan may be a region of the calibrated one). p NULL: defaults. Angles: negative or infinite ones, inner >= outer, and an inner
 * angle at or beyond the detector's farthest pixel are SSB4D_EINVAL before any frame is read;
 * a default ADF annulus beyond the detector gives an ADF of zeros (n_adf_pixels 0). On failure
 * out holds no arrays. */
ssb4d_status ssb4d_virtual_compute(ssb4d_source *src, const ssb4d_calibration *cal,
                                   const ssb4d_virtual_params *p, ssb4d_virtual_images *out,
                                   ssb4d_err *err);
/* Frees the arrays (NULL and a zeroed struct are allowed) and zeroes *v. */
void ssb4d_virtual_free(ssb4d_virtual_images *v);
/* The bytes ssb4d_virtual_compute tracks in p->mem for this shape (the frame block and the iDPC
 * planes, at its peak) and, in *images (may be NULL), the bytes of the five images it returns
 * (malloc'd, the caller's). block_bytes 0: the default. */
size_t ssb4d_virtual_workspace_bytes(const size_t shape[4], size_t block_bytes, size_t *images);
/* The session's virtual images: its field (the whole scan, or opts.region) under its
 * calibration (calibrating first when needed) with the session's current rotation and flip
 * (a fit's, once fitted). p NULL: defaults; p's mem, threads and progress are the session's.
 * One stage "virtual images" in the memory report; ssb4d_session_cancel ends it. */
ssb4d_status ssb4d_session_virtual(ssb4d_session *s, const ssb4d_virtual_params *p, ssb4d_virtual_images *out,
                                   ssb4d_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Import into the encoded .qem form (src/import/import.c, SPEC §3)                             */
/*
 * Streams an acquisition in a foreign format (.npy, raw, HDF5 / EMD / py4DSTEM, Dectris Arina,
 * Merlin .mib) into a .qem file block by block: peak memory is a few read blocks plus one chunk
 * being encoded, whatever the input size. uint8/uint16 counts are kept exactly; uint32 counts are
 * narrowed to uint16 only when every valid value fits (else refused). Float data are refused
 * unless a gain is stated (gain > 0, electrons per unit of the data, or NaN: estimated): each
 * value is then stored as round(value·gain) electrons (negative ones as 0), and the
 * quantisation error is reported and recorded (processing record "gain_quantisation").
 * Flagged pixels (the file's mask, plus hot/dead pixels found from per-pixel totals unless
 * hot = NONE) are marked invalid in the .qem; MEDIAN replaces them in every frame by the median
 * of their valid 3x3 neighbours (lower middle for an even count), ZERO by 0; both are recorded
 * as a processing step. The output appears atomically, and only when everything succeeded.
 */
typedef enum { SSB4D_HOT_MEDIAN = 0, SSB4D_HOT_ZERO = 1, SSB4D_HOT_NONE = 2 } ssb4d_hot_policy;

typedef struct {
    const char *format;       /* NULL or "auto" (by content/extension), "npy", "raw", "hdf5",
                                 "arina", "mib" */
    const char *dataset;      /* HDF5 dataset path (NULL: discover the rank-4 dataset) */
    size_t shape[4];          /* raw: the full shape; arina/mib: shape[0..1] = scan shape */
    int dtype_bytes;          /* raw: 1, 2 or 4 */
    int big_endian;           /* raw */
    size_t offset;            /* raw: header bytes to skip */
    ssb4d_hot_policy hot;
    /* Microscope values given by the user (NaN = not given): recorded as calibration overrides
     * (provenance user_override), never mixed with what the file recorded. */
    double kv, semiangle_mrad, scan_step_A[2], det_sampling_mrad[2];
    /* What each override records as its evidence (kv, semi-angle, scan step, det sampling), e.g.
     * "sidecar s.json"; NULL: "ssb4d import --kv" and so on. */
    const char *evidence[4];
    size_t chunk_scans;       /* 0: the writer's default */
    int threads;              /* 0: all cores */
    int force;                /* replace an existing output */
    ssb4d_mem *mem;           /* counts the read blocks (may be NULL) */
    ssb4d_progress_fn progress;  /* may be NULL; returning non-zero cancels (SSB4D_ECANCELLED) */
    void *progress_user;
    double gain;              /* float data: electrons per unit (> 0); NaN: estimate it (integer-
                                 valued data: 1; values on a grid of 1/g: g); 0: refuse floats */
    int dtype_float;          /* raw: the values are float32 (dtype_bytes 4) */
    const char *const *more_paths; /* Merlin: further .mib files of the acquisition, in order */
    size_t n_more_paths;
    /* Values the user states that the .qem records beside the file's own (NaN = not given). */
    double camera_length_mm, dwell_us;
    int flip;                 /* the detector's handedness (SPEC §2), recorded in the .qem's
                                 metadata.detector_flip: -1 not stated (default), 0 or 1 */
} ssb4d_import_params;

void ssb4d_import_params_default(ssb4d_import_params *p);

typedef struct {
    size_t shape[4];
    int source_dtype_bytes, stored_dtype_bytes;
    const char *source_format;          /* "numpy", "raw", "hdf5", "dectris-arina-hdf5",
                                           "merlin-mib": a static string, valid for ever */
    size_t flagged_file, flagged_found; /* pixels flagged by the file's mask / by the totals */
    size_t input_bytes;                 /* the counts as the source holds them (set as soon as
                                           the source is open, before the first progress call) */
    size_t encoded_bytes;               /* size of the written .qem */
    double seconds;
    int source_float;                   /* the source held float32 values (quantised by gain) */
    double gain;                        /* electrons per unit used (NaN for counts) */
    char gain_how[96];                  /* "given", or how it was estimated */
    double quant_max_e, quant_rms_e;    /* quantisation error |round(v·g) − v·g|, electrons */
    size_t quant_clipped;               /* values below −0.5 e stored as 0 */
} ssb4d_import_report;

ssb4d_status ssb4d_import(const char *in_path, const char *out_path, const ssb4d_import_params *p,
                          ssb4d_import_report *report, ssb4d_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Images and bindings                                                                          */

/* Writes a float32 image (rows x cols, row-major) by the path's extension: .tif/.tiff float32
 * with its sampling (pixel_A: (row, col) Å, may be NULL), .npy, or .png, an 8-bit preview
 * (0.5–99.5 % stretch) with a scale bar and a colour bar in `unit` (NULL: "rad") in margins,
 * as `ssb4d fit` writes phase.png. Atomic: the file appears complete or not at all. */
ssb4d_status ssb4d_image_save(const char *path, const float *img, size_t rows, size_t cols,
                              const double pixel_A[2], const char *unit, ssb4d_err *err);
/* The C10 map `ssb4d fit-regions` writes (defocus.png): c10_nm is rows x cols (row-major, NaN
 * where no region lies, drawn dark blue), drawn at an integer scale (>= 512 px) with a colour
 * bar "C10 nm" whose span is the 0.5–99.5 % stretch widened, about its middle, to at least
 * SSB4D_DEFOCUS_MAP_SPAN_NM, and the spread (the largest C10 less the smallest) printed under
 * the unit ("spread 14.5 pm"). PNG tEXt chunks: ssb4d:display_scale, ssb4d:unit, ssb4d:range
 * (the bar's ends, nm), ssb4d:note (the spread's line). Atomic. */
ssb4d_status ssb4d_defocus_map_save(const char *path, const float *c10_nm, size_t rows, size_t cols,
                                    ssb4d_err *err);
/* The thin-model fit puts C10 at the specimen's mean depth: regions that differ by less than a
 * nanometre (a few atomic layers) show as one grey, not as black and white. */
#define SSB4D_DEFOCUS_MAP_SPAN_NM 1.0

/* sizeof the public struct named `type` ("ssb4d_fit_result", ...), 0 for a name it does not
 * know: bindings that mirror the structs (the Python package) check their layouts against the
 * library they load. */
size_t ssb4d_abi_sizeof(const char *type);
/* The library's version, SSB4D_VERSION_STRING when it was built. */
const char *ssb4d_version(void);

/* ------------------------------------------------------------------------------------------ */
/* Simulator (src/sim/)                                                                         */
/*
 * Multislice simulation of a 4D-STEM acquisition through a perfect crystal (docs/simulate.md).
 * The probe P(k) = A(k)·exp(−iχ(k)) (SPEC §5.2, aberrations at the entrance surface) is placed at
 * scan position R as ψ0 = IDFT[P(k)·e^{−2πi k·R}] (abTEM convention), transmitted through
 * 2 slices per unit cell (Fresnel propagator, optional tilt) of tabulated Gaussian-sum projected
 * potentials, and the detector is the central D×D crop of |DFT(exit wave)|², zero frequency at
 * pixel (D/2, D/2), pixel spacing 1/L (L = simulation window). One pattern sums to 1 over the
 * full simulation grid; counts are Poisson(dose·I), seeded per scan position from (seed, index),
 * so results do not depend on the thread count. Scan position (i, j) is the scan-frame vector
 * (x, y) = (i·step, j·step) Å with (0, 0) on an atomic column and step = scan_cells·a/scan_n
 * (endpoint excluded). With a scan rotation θ = scan_rotation_deg it sits in the specimen /
 * detector frame (det_row, det_col) at
 *     r_det = R(a)ᵀ·(x, y) = (x cos θ + y sin θ, −x sin θ + y cos θ),   a = −θ,
 * the inverse of SPEC §5.1's k mapping, so θ is exactly the rotation that ssb4d's reconstruction
 * needs (test_sim.c: test_rotation_convention). θ = 0: det_row ∥ scan_row, and the scan is
 * periodic against the crystal; other angles (except multiples of 90°) are not, like real data.
 * Aberration angles (φ12, ...) stay in the detector frame (from +det_row towards +det_col).
 * Pattern reuse: the window is a periodic crystal, so at a multiple of 90° each position is
 * simulated at its place reduced modulo the lattice (exact integers: i·S mod N in units of
 * a/N), and each of the (N/gcd(N, S))² distinct noise-free patterns is computed once (kept in
 * row tables up to reuse_bytes; the others recomputed per block of rows). Other angles compute
 * every position. The noise stays per position, so the counts depend on neither.
 * Detector oversampling S (det_oversample, odd): the multislice runs in a window of S·W cells
 * (far-field spacing 1/(S·L)), and each detector pixel is the sum of the S×S native pixels it
 * covers (the central (S·D)² crop), so the pixel spacing 1/L, the BF radius in pixels and the
 * zero frequency at (D/2, D/2) are those of S = 1 while each pixel integrates the intensity over
 * its area and a probe wider than L no longer wraps. S = 1 is the point-sampled detector, bit for
 * bit the simulator without oversampling. Auto (0): the smallest odd S with S·L >= 1.3·F, F the
 * probe footprint (ssb4d_sim_info.probe_footprint_A, docs/simulate.md).
 */
/* The specimens along [001]: SrTiO3 (perovskite, a = 3.905 Å) and Au (fcc, 4.078 Å), 2 atomic
 * layers (= slices) per cell; Si (diamond cubic, 5.431 Å), 4 layers per cell (issue 40). */
typedef enum { SSB4D_SPECIMEN_SRTIO3 = 0, SSB4D_SPECIMEN_AU = 1, SSB4D_SPECIMEN_SI = 2 } ssb4d_specimen;
#define SSB4D_SIM_OVERSAMPLE_MAX 63 /* the largest det_oversample */

typedef struct {
    ssb4d_specimen specimen;
    int cells_z;            /* thickness in unit cells (>= 1), 2 slices each */
    int window_cells;       /* periodic simulation window: window_cells × window_cells cells */
    double kv;              /* accelerating voltage (kV) */
    double semiangle_mrad;  /* probe semi-angle (mrad) */
    ssb4d_aberrations ab;   /* public units (nm, degrees), at the entrance surface */
    double tilt_mrad[2];    /* specimen/beam tilt (row, col), mrad; enters the propagator */
    double scan_rotation_deg; /* scan rotated against the detector, degrees (see above): the
                                 value to give ssb4d's reconstruction as its rotation; finite,
                                 |θ| <= 1e4 */
    int scan_n;             /* scan positions per axis (scan_n × scan_n) */
    int scan_cells;         /* the scan covers scan_cells × scan_cells whole unit cells */
    int det;                /* detector D (D × D pixels) */
    int grid;               /* simulation grid M (M × M) of the whole simulated window of
                               det_oversample·window_cells cells; 0 = auto (ssb4d_sim_describe) */
    int det_oversample;     /* detector oversampling S (see above): 0 = auto, else odd, 1..63;
                               even S is refused (its native pixels cannot be centred on the
                               detector pixels); 1 = point-sampled detector */
    double dose;            /* electrons per probe position */
    uint64_t seed;
    int threads;            /* 0: all cores */
    size_t reuse_bytes;     /* bound of the patterns kept for reuse (see above); 0: 1 GiB */
    size_t block_bytes;     /* counts per block of whole scan rows (uint16); 0: 8 MiB */
    /* The results never depend on threads, reuse_bytes or block_bytes: only speed and memory. */
    /* Optional progress (called from the calling thread after each block of rows, "simulate",
     * positions done / all); returning non-zero cancels (SSB4D_ECANCELLED, nothing written). */
    ssb4d_progress_fn progress;
    void *progress_user;
    int det_flip;           /* 1: a mirrored detector: every frame is written transposed (det_row
                               and det_col swapped), as a camera mounted or read out in the other
                               handedness records it; reconstruct with flip (SPEC §2). The
                               sidecar says "flip": true */
    double wedge_nm[2];     /* a wedge: the thickness rises linearly along the scan columns from
                               wedge_nm[0] nm at column 0 to wedge_nm[1] at the last, rounded per
                               column to whole unit cells (at least 1; 2 slices each), replacing
                               cells_z; {0, 0}: the uniform cells_z. Each column is simulated at
                               its own thickness (no pattern reuse); the detector oversampling and
                               grid follow the thickest. ssb4d_sim_describe's thickness_nm and
                               n_slices are then the thickest column's */
} ssb4d_sim_params;

/* The unit cells along the beam at scan column j (cells_z, or the wedge's there). */
int ssb4d_sim_cells_at(const ssb4d_sim_params *p, int j);

/* Derived geometry and, after a simulation, its statistics. */
typedef struct {
    int grid;                     /* M actually used (the grid of the S·L window) */
    double wavelength_A;
    double sigma;                 /* interaction constant, rad/(V·Å) */
    double lattice_A;
    double window_A;              /* L = window_cells·a: the detector pixel is 1/L */
    int det_oversample;           /* S actually used (det_oversample, or the auto value) */
    double sim_window_A;          /* S·L: the simulated periodic window */
    double probe_footprint_A;     /* F: the probe's diameter, the auto-S rule's input */
    double real_sampling_A;       /* S·L / M */
    double scan_step_A;           /* both axes */
    double det_sampling_mrad;     /* 1e3·λ/L, both axes */
    double bf_radius_px;          /* α/(λ/L) */
    double antialias_inv_A;       /* band limit of transmission and propagator: M/(3·S·L) */
    double thickness_nm;
    int n_slices;
    /* filled by a simulation */
    double mean_sum_full;         /* mean over positions of Σ I over the full grid */
    double min_sum_full, max_sum_full;
    double mean_sum_detector;     /* ... over the D × D crop */
    size_t n_clamped;             /* counts clamped at 65535 */
    size_t n_patterns;            /* multislice runs (distinct patterns computed) */
    uint16_t max_count;
    double seconds;
} ssb4d_sim_info;

/* Fills p with a preset ("tiny", "small", "medium", "reference"; NULL = "small"). Fields can be
 * changed afterwards. SSB4D_EINVAL for an unknown name. */
ssb4d_status ssb4d_sim_params_preset(ssb4d_sim_params *p, const char *preset, ssb4d_err *err);
/* Checks p (SSB4D_EINVAL with the reason) and fills the derived geometry of info (may be NULL).
 * Auto S: the smallest odd S with S·L >= 1.3·F, F = 2·max_z max_{|k| <= α/λ} |∇χ_z(k)|/(2π)
 * + |tilt|·t + 4 Å, χ_z being χ with C10 + z at the depths z = 0 and t (the thickness), all
 * coefficients in Å. Auto grid: the smallest FFT-friendly M >= 2·S·D whose antialias band
 * M/(3·S·L) reaches the SSB passband 2α/λ (so that the object's frequencies up to 2α/λ are all
 * simulated). */
ssb4d_status ssb4d_sim_describe(const ssb4d_sim_params *p, ssb4d_sim_info *info, ssb4d_err *err);
/* In memory. Any output may be NULL: counts (scan_n² · D² uint16), intensity (the noise-free
 * normalised intensity on the D×D detector, S×S-binned when oversampled, float32, same shape), phase and phase_bl (scan_n² float32:
 * projected phase σ·V_proj of the whole specimen at the scan positions, up to the antialias band,
 * and low-passed to |q| <= 2α/λ). info may be NULL. */
ssb4d_status ssb4d_simulate_to_memory(const ssb4d_sim_params *p, uint16_t *counts, float *intensity,
                                      float *phase, float *phase_bl, ssb4d_sim_info *info,
                                      ssb4d_err *err);
/* Streams the counts to npy_path (uint16 (N, N, D, D), header first, then blocks of scan rows,
 * written to npy_path.tmpPID and renamed at the end), and writes beside it STEM_phase.npy,
 * STEM_phase_bandlimited.npy and the sidecar STEM.json (same key layout as the shared data's
 * sidecars). Existing outputs are refused unless force. command_line (may be NULL) is recorded. */
ssb4d_status ssb4d_simulate(const ssb4d_sim_params *p, const char *npy_path, int force,
                            const char *command_line, ssb4d_sim_info *info, ssb4d_err *err);

/* The simulator's largest buffers in bytes (it has no memory context, so `ssb4d simulate`
 * checks this working set against its budget up front): the multislice grids, the blocks of scan
 * rows, the .qem writer's chunk (to_qem), the pattern reuse tables, and their total. info:
 * ssb4d_sim_describe's. */
typedef struct {
    size_t grid, blocks, writer, reuse, total;
} ssb4d_sim_working_set;
ssb4d_sim_working_set ssb4d_sim_working_set_of(const ssb4d_sim_params *p, const ssb4d_sim_info *info, int to_qem);

/* ---- The parameter table -------------------------------------------------------------------
 * Every operation's parameters declared once (name, type, unit, range, default, help and the
 * field of the public struct each fills), read by the command line (its options, their checks
 * and --help lines), the viewer (its JSON checks) and Python (its keyword checks and
 * docstrings). An operation's rows fill one struct: */
typedef enum {
    SSB4D_OP_FIT = 0,         /* ssb4d_fit_params (ssb4d_fit_params_default) */
    SSB4D_OP_ABERRATIONS = 1, /* ssb4d_aberrations: C10_nm … C56_nm, phi12_deg … phi56_deg */
    SSB4D_OP_THICK = 2,       /* ssb4d_thick: tilt_mrad, thickness_nm */
    SSB4D_OP_PREVIEW = 3,     /* ssb4d_preview_req (ssb4d_preview_req_default) */
    SSB4D_OP_CALIBRATE = 4,   /* ssb4d_calib_params: the microscope values (ssb4d_calib_params_default) */
    SSB4D_OP_REFINE = 5,      /* ssb4d_refine_params (ssb4d_refine_params_default); the thickness
                                 range is a LO:HI pair the clients parse */
    SSB4D_OP_COUNT = 6
} ssb4d_op;

/* What a parameter's field holds. */
typedef enum {
    SSB4D_PARAM_DOUBLE = 0, /* double */
    SSB4D_PARAM_PAIR = 1,   /* double[2]: (row, col); one number sets both */
    SSB4D_PARAM_INT = 2,    /* int, a whole number */
    SSB4D_PARAM_SIZE = 3,   /* size_t, a whole number */
    SSB4D_PARAM_U64 = 4,    /* uint64_t, a whole number */
    SSB4D_PARAM_BOOL = 5,   /* int, 0 or 1 */
    SSB4D_PARAM_ENUM = 6    /* int (a C enum): the index of its name in choices */
} ssb4d_param_type;

/* ssb4d_param.flags */
#define SSB4D_PARAM_MIN_OPEN 1u /* min itself is outside the range: (min, max] */
#define SSB4D_PARAM_AUTO 2u     /* the text "auto" is accepted and stored as 0 */
#define SSB4D_PARAM_NEGATED 4u  /* BOOL: the command-line option clears it (--no-branch-check) */

typedef struct {
    const char *name;    /* keyword and JSON field: "trials", "C10_nm" */
    const char *option;  /* the command line's option without "--" ("c10"), NULL: none */
    ssb4d_param_type type;
    const char *unit;    /* "nm", "deg", "mrad", "kV", "Å", "px" or "" */
    double min, max;     /* the allowed range (inclusive unless SSB4D_PARAM_MIN_OPEN; max may be
                            INFINITY); ENUM: 0 .. choices - 1 */
    double def;          /* the default (NaN: unset, measured or computed; see help) */
    const char *choices; /* ENUM: the value names, '|'-separated, in the enum's order; INT: the
                            only values allowed ("1|2|3|4|8"); else NULL */
    const char *help;    /* one line; "{default}" in it stands for the default (else clients may
                            append it) */
    size_t offset;       /* offsetof(the op's struct, its field) */
    unsigned flags;      /* SSB4D_PARAM_* */
} ssb4d_param;

/* The rows of op (n: their count; NULL and 0 for an unknown op). The table is static. */
const ssb4d_param *ssb4d_params(ssb4d_op op, size_t *n);
/* The row of op named name (its name, or its option without "--"), or NULL. */
const ssb4d_param *ssb4d_param_find(ssb4d_op op, const char *name);
/* What p's values must be, in words: "a whole number in 1..64", "a number in (0, 1]", "band or
 * loss", "1, 2, 3, 4, 8 or auto"; written to buf (n bytes, truncated), returns buf. */
const char *ssb4d_param_describe(const ssb4d_param *p, char *buf, size_t n);
/* Checks v (PAIR: v[0], v[1]; ENUM: the index) against p's type, range and choices and stores it
 * in target, a struct of p's op; SSB4D_EINVAL ("NAME must be …; got …") leaves target unchanged. */
ssb4d_status ssb4d_param_set(const ssb4d_param *p, void *target, const double *v, ssb4d_err *err);
/* The same from text as a command line gives it: a number, "ROW,COL" or one number (PAIR), a
 * choice's name (ENUM), "auto" (SSB4D_PARAM_AUTO), "true|false|1|0" (BOOL). */
ssb4d_status ssb4d_param_parse(const ssb4d_param *p, void *target, const char *text, ssb4d_err *err);
/* The value of p in target as doubles (PAIR: out[0], out[1]; else out[0]). */
void ssb4d_param_get(const ssb4d_param *p, const void *target, double *out);


#ifdef __cplusplus
}
#endif
#endif /* SSB4D_H */

/* ========================================================================================== */
/* The advanced part: the stages one by one, under the session handle                          */
/* ========================================================================================== */
/*
 * What most programs need ends above: open data into a session, fit, preview, save (and the
 * simulator and importer). Define SSB4D_ADVANCED before including this header (or include
 * ssb4d_advanced.h, which does) for the stages the session strings together, for programs that
 * build their own pipeline or study one stage, in the order data flows through them: the memory
 * context's allocator, data sources, calibration, the G build, the SSB passes (loss, object, mean
 * phase), the band objective, the parallax estimate, the fit, the memory planner, the replayed
 * viewer session and distributed (MPI) sessions. Same library and exports; its calls change more
 * freely between versions (none is stable before 1.0).
 */
#if defined(SSB4D_ADVANCED) && !defined(SSB4D_H_ADVANCED)
#define SSB4D_H_ADVANCED
#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Memory context: allocation and stages (src/common/mem.c) */
/* limit_bytes = 0: no limit. Allocations beyond the limit fail with SSB4D_ENOMEM. */
ssb4d_mem *ssb4d_mem_create(size_t limit_bytes);
void ssb4d_mem_destroy(ssb4d_mem *m);
/* 64-byte aligned, counted under `tag`. Returns NULL (and fills err) on failure or over budget. */
void *ssb4d_mem_alloc(ssb4d_mem *m, size_t bytes, const char *tag, ssb4d_err *err);
void *ssb4d_mem_calloc(ssb4d_mem *m, size_t bytes, const char *tag, ssb4d_err *err);
/* Frees a block. keep_in_cache != 0 parks it in the reuse cache instead (counted as cache). */
void ssb4d_mem_free(ssb4d_mem *m, void *p, int keep_in_cache);
/* Counts (add = 1) or stops counting (add = 0) bytes held outside the allocator, such as the
 * memory-mapped encoded file, as live under the budget. */
ssb4d_status ssb4d_mem_external(ssb4d_mem *m, size_t bytes, int add, const char *tag, ssb4d_err *err);
/* Returns every cached block to the system. */
void ssb4d_mem_trim(ssb4d_mem *m);
size_t ssb4d_mem_live(const ssb4d_mem *m);
size_t ssb4d_mem_cached(const ssb4d_mem *m);
size_t ssb4d_mem_peak(const ssb4d_mem *m);   /* peak since creation */
size_t ssb4d_mem_limit(const ssb4d_mem *m);
/* Fault injection, for tests (as SQLite's fault simulation): the n-th allocation through m from
 * now on (ssb4d_mem_alloc/calloc calls, reuses from the cache included; n >= 1) fails with
 * SSB4D_ENOMEM and its message, as if the system had refused it; the ones after it succeed
 * again, or with persistent != 0 fail too, until the next call of this function. n <= 0 turns
 * injection off. The counter lives in m: allocations that bypass the context (a NULL context,
 * FFTW's plans, small plain mallocs) are not counted and never fail. */
void ssb4d_mem_fail_after(ssb4d_mem *m, long n, int persistent);
/* The allocations counted through m since it was created (0 for NULL). */
long ssb4d_mem_alloc_count(const ssb4d_mem *m);
/* The faults injected through m so far (0 for NULL). */
long ssb4d_mem_fault_count(const ssb4d_mem *m);
/* Stages: begin resets the stage peak (tracked and RSS); end records one ssb4d_stage_record. */
void ssb4d_mem_stage_begin(ssb4d_mem *m, const char *name);
void ssb4d_mem_stage_end(ssb4d_mem *m);

/* ------------------------------------------------------------------------------------------ */
/* Memory context: progress and cancel */
void ssb4d_mem_set_progress(ssb4d_mem *m, ssb4d_progress_fn fn, void *user);
void ssb4d_mem_cancel(ssb4d_mem *m);
void ssb4d_mem_cancel_clear(ssb4d_mem *m);
int ssb4d_mem_cancelled(const ssb4d_mem *m);
/* Returns 1 when the call is cancelled (calling the callback first when it is due). 0 for NULL. */
int ssb4d_mem_poll(ssb4d_mem *m);
/* Records the work done (0..1) and polls. */
int ssb4d_mem_progress(ssb4d_mem *m, double fraction);
/* The same for a call that reports its fraction over many passes (the fit, from its trials):
 * from then until the next call starts (ssb4d_mem_cancel_clear), the passes' own
 * ssb4d_mem_progress only polls, so the fraction shown does not fall back to 0 at every pass. */
int ssb4d_mem_progress_outer(ssb4d_mem *m, double fraction);

/* ------------------------------------------------------------------------------------------ */
/* Data sources (src/source/) */
/* Opens DATA by its content: a .npy (ssb4d_source_open_npy), an encoded .qem
 * (ssb4d_source_open_qem), or any other format `ssb4d import` reads whose file says its whole
 * shape (HDF5 / EMD / py4DSTEM, Arina, Merlin, EMPAD, DM3/DM4, Velox, MRC), read in place
 * through its frame reader: each column read reads the frames of its scan rows in bounded
 * chunks. Formats that need more (raw binary's shape) are refused with a hint to `import`. */
ssb4d_status ssb4d_source_open(const char *path, ssb4d_source **out, ssb4d_err *err);
/* Opens an encoded .qem acquisition: the whole file is validated (layout and body checksums)
 * first; frames and columns are then decoded from the streams on every read (columns decode
 * only the requested pixels' streams of the blocks that overlap the requested scan rows). Any
 * scan shape the file holds is opened, 1xN included (to decode or export it);
 * ssb4d_source_open, which opens data to reconstruct, refuses scans smaller than 2x2. */
ssb4d_status ssb4d_source_open_qem(const char *path, ssb4d_source **out, ssb4d_err *err);
/* Opens a C-order little-endian .npy of uint8/uint16/uint32 counts or float32 values with rank
 * 4. Memory-mapped. */
ssb4d_status ssb4d_source_open_npy(const char *path, ssb4d_source **out, ssb4d_err *err);
/* Wraps an array the caller keeps alive; data is (shape[0]*shape[1]*shape[2]*shape[3]) values. */
ssb4d_status ssb4d_source_from_memory(const void *data, ssb4d_dtype dtype, const size_t shape[4],
                                      ssb4d_source **out, ssb4d_err *err);
void ssb4d_source_close(ssb4d_source *s);
void ssb4d_source_shape(const ssb4d_source *s, size_t shape[4]);
ssb4d_dtype ssb4d_source_dtype(const ssb4d_source *s);
/* 1 when the source holds float32 values (SSB4D_F32). */
int ssb4d_source_is_float(const ssb4d_source *s);
/* Counts of positions [pos0, pos0+npos): out[(p * det_rows + r) * det_cols + c]. A float
 * source is refused (SSB4D_EFORMAT): ssb4d never quantises silently. */
ssb4d_status ssb4d_source_read_frames(ssb4d_source *s, size_t pos0, size_t npos, uint32_t *out,
                                      ssb4d_err *err);
/* The same frames as float32 from any source: counts exactly (counts above 2^24 are refused),
 * float values as stored (non-finite ones are refused). */
ssb4d_status ssb4d_source_read_frames_f32(ssb4d_source *s, size_t pos0, size_t npos, float *out,
                                          ssb4d_err *err);
/* Column read, see above. det_pix are flat detector indices (row * det_cols + col). */
ssb4d_status ssb4d_source_read_columns(ssb4d_source *s, const int32_t *det_pix, size_t n_pix,
                                       size_t row0, size_t nrows, float *out, ssb4d_err *err);
/* A view of scan rows [r0, r1) x cols [c0, c1) of parent: shape (r1-r0, c1-c0, det_rows,
 * det_cols), same dtype; frame and column reads go to the parent (columns through a bounded
 * scratch, at most the caller's output size or one parent row), with the same values as a
 * cropped copy of the data. The parent must outlive the view; closing the view leaves the parent
 * open. Refuses (SSB4D_EINVAL) empty rectangles, ones outside the scan and ones under 32x32. */
ssb4d_status ssb4d_source_region(ssb4d_source *parent, size_t r0, size_t r1, size_t c0, size_t c1,
                                 ssb4d_source **out, ssb4d_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Calibration (src/calibrate/) */
ssb4d_status ssb4d_calibrate(ssb4d_source *src, const ssb4d_calib_params *p,
                             ssb4d_calibration *out, ssb4d_err *err);

/* ------------------------------------------------------------------------------------------ */
/* G(q,k) build (src/gbuild/)                                                                    */

typedef struct ssb4d_G ssb4d_G;

typedef struct {
    int threads;            /* 0: all cores */
    size_t block_bytes;     /* decoded float32 per block of scan rows; 0: 256 MiB */
    int store_inactive;     /* 1: also store BF pixels whose aperture A(k) is 0 */
    /* Memory (SPEC 9). The bits of every stored plane are the same whatever these are. */
    int half;               /* 1: hold the planes in half precision (a preview copy, half the
                               size; consumers convert them back to float32 group by group) */
    size_t resident_bytes;  /* the most bytes of planes to hold; 0: all. The innermost BF pixels
                               are kept, the others are streamed: rebuilt from the source by every
                               pass that needs them (the source must then outlive G) */
    size_t group_bytes;     /* float32 planes materialised at once by the build and by passes over
                               a half or streamed G; 0: 256 MiB */
    ssb4d_progress_fn progress;  /* may be NULL; returning non-zero cancels (SSB4D_ECANCELLED) */
    void *progress_user;
    /* A distributed build (ssb4d.h, ssb4d_dist_mpi; NULL: all here): this rank builds the planes of
     * its own blocks of 64 BF pixels and knows the others' only as stored elsewhere; every rank
     * still reads every frame for the totals. Not with half or resident_bytes. */
    const struct ssb4d_dist *dist;
} ssb4d_gbuild_opts;

void ssb4d_gbuild_opts_default(ssb4d_gbuild_opts *o);

/* Builds G for the BF pixels bf_pix[0..n_bf) of `src` under geometry g. */
ssb4d_status ssb4d_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix,
                          size_t n_bf, const ssb4d_gbuild_opts *o, ssb4d_mem *mem, ssb4d_G **out,
                          ssb4d_err *err);
void ssb4d_G_free(ssb4d_G *G);
size_t ssb4d_G_n_bf(const ssb4d_G *G);      /* all selected BF pixels (count in N_bf) */
size_t ssb4d_G_n_stored(const ssb4d_G *G);  /* those with a stored spectrum */
size_t ssb4d_G_bytes(const ssb4d_G *G);
double ssb4d_G_dc(const ssb4d_G *G);
void ssb4d_G_scan_shape(const ssb4d_G *G, size_t *ny, size_t *nx);
/* Stored half-plane spectrum of the i-th BF pixel ((ny, nx/2+1) complex64 as float pairs), or
 * NULL when the pixel is inactive or its plane is not resident in float32 (half or streamed). */
const float *ssb4d_G_plane(const ssb4d_G *G, size_t i);
/* Copies the i-th BF pixel's float32 plane (ny*(nx/2+1) complex values) into out, converting a
 * half plane or rebuilding a streamed one. SSB4D_EINVAL for an inactive pixel. */
ssb4d_status ssb4d_G_plane_copy(const ssb4d_G *G, size_t i, float *out, ssb4d_err *err);
/* Stored planes held in memory (all of them unless streamed), and whether they are half. */
size_t ssb4d_G_n_resident(const ssb4d_G *G);
int ssb4d_G_is_half(const ssb4d_G *G);
/* SHA-256 (hex, 65 bytes) of the stored float32 spectra in BF order and dc: the same for a
 * resident and a streamed G (streamed planes are rebuilt); for a half G, of its half planes.
 * "unavailable" if a streamed plane could not be rebuilt. */
void ssb4d_G_sha256(const ssb4d_G *G, char hex[65]);
/* SHA-256 (hex) of the per-block SHA-256s (32 bytes each, in block order) of G's float32 planes in
 * logical blocks of 64 BF pixels, then dc: the hash a distributed G can give (each rank hashes its
 * own blocks), the same for one process. A collective call for a distributed G. */
void ssb4d_G_blocks_sha256(const ssb4d_G *G, char hex[65]);

/* ------------------------------------------------------------------------------------------ */
/* SSB (src/ssb/)                                                                                */

typedef enum { SSB4D_PATH_AUTO = 0, SSB4D_PATH_REAL = 1, SSB4D_PATH_COMPLEX = 2 } ssb4d_path;

typedef struct {
    int threads;      /* 0: all cores */
    ssb4d_path path;  /* auto and real: the real-output path (valid for any χ, SPEC 5.4's γ);
                         complex: full-plane transforms, for checks */
    size_t loss_tile; /* loss and mean phase: 0 = each thread sums its own blocks of BF pixels
                         (the default); T = T BF pixels' phase planes in flight at once, summed
                         afterwards (the GPU's layout, for the bench sweep). Same bits for any. */
} ssb4d_ssb_opts;

void ssb4d_ssb_opts_default(ssb4d_ssb_opts *o);

/* Exact loss (SPEC §5.4) at aberrations ab (and optional thick model, NULL = thin).
 * If mean_phase is not NULL it receives the mean phase (ny*nx float32). */
ssb4d_status ssb4d_loss(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                        const ssb4d_thick *thick, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                        double *loss, float *mean_phase, ssb4d_err *err);

/* Exact losses of n parameter sets (ab[i], thick[i] or thick NULL = thin) in one pass over G:
 * each G plane is read once for the whole batch. loss[i] is bit-identical to ssb4d_loss with
 * ab[i] alone, whatever n and the thread count. */
ssb4d_status ssb4d_loss_batch(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                              const ssb4d_thick *thick, size_t n, const ssb4d_ssb_opts *o,
                              ssb4d_mem *mem, double *loss, ssb4d_err *err);

/* Object F = mean of corrected spectra, upsampled by f (SPEC §5.5); writes the complex object
 * O (f*ny by f*nx complex64 as float pairs) and/or its phase (arg O). Either may be NULL. */
ssb4d_status ssb4d_object(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                          const ssb4d_thick *thick, int upsample, const ssb4d_ssb_opts *o,
                          ssb4d_mem *mem, float *object, float *phase, ssb4d_err *err);

/* The transfer-corrected object (docs/ssb-math.md, "Image at the truth"): ssb4d_object's spectrum
 * divided per bin by its own transfer, F'(q) = Σ_k Ĉ_k(q) / (Σ_k |γ(q,k)| + eps·N_bf), F'(0) = dc,
 * where SPEC §5.4's object is Σ_k Ĉ_k(q) / N_bf. A weak phase object comes out of SPEC's estimator
 * filtered by T(q) = (1/N_bf) Σ_k |γ(q,k)| (about 1 where the triple overlap adds, a few % near
 * 2α0/λ); this one is flat up to where T falls below eps. Σ_k |γ| depends on the geometry and the
 * aberrations only: it is summed on the host in BF blocks of 64 in BF order, and the division
 * comes after the object's sum, so every backend gives it. eps > 0 (SSB4D_TRANSFER_EPS is the
 * studied value); outputs as ssb4d_object's. */
#define SSB4D_TRANSFER_EPS 0.5
ssb4d_status ssb4d_object_transfer(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                                   const ssb4d_thick *thick, int upsample, double eps, const ssb4d_ssb_opts *o,
                                   ssb4d_mem *mem, float *object, float *phase, ssb4d_err *err);
/* That transfer, T(q) = (1/N_bf) Σ_k |γ(q,k)| (SPEC 5.4's γ; SPEC 5.6's weights with a thick model)
 * on the grid upsampled by f (f·ny × f·nx doubles, fftfreq order), the Nyquist bins averaged over
 * their aliases as the correction is; pixels with A(k) = 0 add nothing but count in N_bf. */
ssb4d_status ssb4d_transfer(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                            const ssb4d_thick *thick, int upsample, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                            double *T, ssb4d_err *err);

/* A release in one pass over G: the object at native sampling (as ssb4d_object with upsample 1:
 * the same bits) and the exact loss (as ssb4d_loss: the same bits). Each BF pixel's corrected
 * spectrum is made once and serves both, so it costs about the loss alone. loss and one of
 * object/phase are required. Its buffers differ from the two calls' (ssb4d_object_loss in the
 * plan); on the complex path it makes the two calls. */
ssb4d_status ssb4d_object_loss(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                               const ssb4d_thick *thick, const ssb4d_ssb_opts *o, ssb4d_mem *mem, float *object,
                               float *phase, double *loss, ssb4d_err *err);

/* Mean phase upsampled by f (each BF pixel's corrected spectrum continued periodically). */
ssb4d_status ssb4d_mean_phase_upsampled(const ssb4d_G *G, const ssb4d_geometry *g,
                                        const ssb4d_aberrations *ab, const ssb4d_thick *thick,
                                        int upsample, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                                        float *phase, ssb4d_err *err);

/* ------------------------------------------------------------------------------------------ */
/* The band objective (src/ssb/band.c), SPEC §5.6: the thick-sample fit's objective             */
typedef struct {
    double band_lo_inv_A, band_hi_inv_A; /* the band 0.2 < |q| < 0.9 Å⁻¹ by default */
    int threads;                         /* 0: all cores */
} ssb4d_band_opts;

void ssb4d_band_opts_default(ssb4d_band_opts *o);

/* Band objective fit(θ) = Σ_{q∈band} |Σ_k G(q,k)·γ*(q,k)|² / Σ_k |γ(q,k)|² (larger is better) for
 * n parameter sets at once: ab[i] with thick[i] (thick NULL: thin for all; thickness 0 is the
 * thin model exactly). γ is unnormalised (SPEC §5.6); sums run over the stored half-plane with
 * weight 2 per column except columns 0 and nx/2, q at its fftfreq value. Each read of a G plane
 * serves every parameter set of the batch; sums run in a fixed order (BF blocks of 64 merged in
 * block order), so fit[i] does not depend on n, the batch's other members or the thread count.
 * G may be resident, streamed or half precision (read in groups of planes, as the loss does): a
 * streamed float32 G gives the resident G's bits for any group size; a half G is a preview-
 * precision value. */
ssb4d_status ssb4d_band_fit(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                            const ssb4d_thick *thick, size_t n, const ssb4d_band_opts *o,
                            ssb4d_mem *mem, double *fit, ssb4d_err *err);
/* ssb4d_band_fit with a scan–detector rotation per parameter set, for a search over the rotation
 * and the aberrations together: rotation_deg[i] replaces g->rotation_deg for set i (NULL: g's for
 * all; ssb4d_band_fit is this call with NULL). Still one pass over G per batch; the per-(q,k)
 * geometry is made once per distinct rotation (sets with bit-equal rotations share it, so a batch
 * of one rotation costs what ssb4d_band_fit costs). fit[i] is bit-identical to ssb4d_band_fit of
 * set i alone with g->rotation_deg = rotation_deg[i], for any batch, thread count or G mode. */
ssb4d_status ssb4d_band_fit_rot(const ssb4d_G *G, const ssb4d_geometry *g, const double *rotation_deg,
                                const ssb4d_aberrations *ab, const ssb4d_thick *thick, size_t n,
                                const ssb4d_band_opts *o, ssb4d_mem *mem, double *fit, ssb4d_err *err);
/* The band's power Σ_{q∈band} w_q Σ_k |G(q,k)|² over the stored pixels with A(k) > 0: an upper
 * bound of fit(θ) for any θ (Cauchy–Schwarz), so fit/power in [0, 1] is the fraction of the
 * band's power that the model explains. */
ssb4d_status ssb4d_band_power(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_band_opts *o,
                              ssb4d_mem *mem, double *power, ssb4d_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Parallax estimate (src/parallax/), SPEC §6.1: tilt-corrected bright field                    */
/*
 * Each BF pixel's image is shifted by the gradient of χ at its k: for χ = πλ vᵀMv (C10, C12) the
 * images of two pixels p detector pixels apart are shifted against each other by B·p with
 * B = λ·M·R(a)·diag(Δk) (Å per pixel; a = −rotation, SPEC 5.1). ssb4d_parallax_estimate measures
 * B from the cross-spectra of pixel pairs in G (a pass over a subset of G and one over all of it,
 * reading a few hundred of the strongest frequencies), and splits it into C10, C12, φ12 and the
 * scan–detector rotation. The shifts cannot tell the rotation a from a + 180° with (−C10, −C12):
 * the estimate reports the branch with the rotation in [−90°, 90°), the fit decides the branch.
 * The rotation is undetermined when C10 is small against C12 (pure astigmatism turns with φ12).
 */
typedef struct {
    int threads;         /* 0: all cores */
    size_t max_bins;     /* frequencies read per BF pixel (default 1024) */
    size_t max_bytes;    /* cap on the per-pixel spectra held (n_bf × bins × 8; default 64 MiB) */
    double max_aberration_nm; /* the largest |C10| + |C12| considered (sizes the one-pixel shift
                                 search; default 50) */
} ssb4d_parallax_opts;

void ssb4d_parallax_opts_default(ssb4d_parallax_opts *o);

ssb4d_status ssb4d_parallax_estimate(const ssb4d_G *G, const ssb4d_geometry *g,
                                     const ssb4d_parallax_opts *o, ssb4d_mem *mem,
                                     ssb4d_parallax *out, ssb4d_err *err);
/* (C10 nm, C12 nm, φ12 deg in the scan frame) that the measured B gives at a stated rotation (a
 * rotation the user gave), and the part of B that rotation leaves unexplained (nm of C10-like
 * misfit: large when the stated rotation disagrees with the shifts). */
void ssb4d_parallax_at_rotation(const ssb4d_parallax *p, const ssb4d_geometry *g, double rotation_deg,
                                double ab[3], double *misfit_nm);
/* p with its shift field replaced by alternative k (< p->n_alt): B, J and the estimate (C10, C12,
 * φ12, rotation) recomputed; the standard errors are kept. */
void ssb4d_parallax_alternative(const ssb4d_parallax *p, const ssb4d_geometry *g, size_t k, ssb4d_parallax *out);
/* p for the other handedness of the detector (est, sigma and flip swapped with est_other,
 * sigma_other): a geometry with flip = out->flip then gives out's values. */
void ssb4d_parallax_mirror(const ssb4d_parallax *p, ssb4d_parallax *out);

/* ------------------------------------------------------------------------------------------ */
/* Fitting (src/fit/) */
ssb4d_status ssb4d_fit(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_fit_params *p,
                       ssb4d_mem *mem, ssb4d_fit_result *r, ssb4d_err *err);

/* Skewness of a phase image about its median, mean(v³)/mean(v²)^{3/2} with v = φ − median(φ)
 * (SPEC §6.3; positive on the right branch). 0 for a constant image. */
double ssb4d_phase_skewness(const float *phase, size_t n);

/* ------------------------------------------------------------------------------------------ */
/* Memory planner (src/plan/), SPEC §9: plan, then execute                                       */
/*
 * From the data's shape, the number of BF pixels and a memory budget the planner decides once how
 * G is held (float32 resident; float32 with the outer BF pixels streamed; a half-precision preview
 * copy beside a float32 fit G), the G build's decode block, the group of planes a pass over a half
 * or streamed G materialises, and the fit batch. It predicts every stage of the session
 * (ssb4d_session_run) by replaying that stage's allocations through a model of the accounting
 * layer (exact-size reuse cache included), so the prediction is the tracked bytes the run will
 * count. Budgets count tracked bytes: the encoded file, G and every transient; the process
 * footprint adds the program, libraries and small arrays (about 0.1–0.2 GiB).
 */
/* What a session does (src/session/); the planner plans the same stages. */
struct ssb4d_session_script {
    int upsample;          /* preview factor; 0: ssb4d_upsample_auto */
    int fft;               /* previews also transform the phase (the viewer's FFT panel) */
    size_t drags;          /* drag previews (default 20) */
    size_t releases;       /* releases: preview + loss (default 3) */
    int region;            /* 1: a region refit (default) */
    size_t region_rect[4]; /* r0, r1, c0, c1; all 0: centred, the planner's default side */
    int save;              /* write calibration.json into the output folder (default 1) */
};

/* The viewer's session: upsampling 0 (auto), fft 1, 20 drags, 3 releases, the centred region,
 * save. */
void ssb4d_session_script_default(ssb4d_session_script *s);

typedef struct {
    char name[48];
    size_t peak_bytes, after_bytes, cache_bytes; /* tracked, predicted */
    double seconds;                              /* rough, from the machine profile's rates */
    char time_class[24];
    char tiles[200];                             /* what the stage was given */
} ssb4d_plan_stage;

#define SSB4D_PLAN_MAX_STAGES 16
struct ssb4d_plan {
    int fits;
    char reason[256];                  /* why not, when it does not fit */
    size_t memory_bytes;               /* the budget planned for */
    size_t min_memory_bytes;           /* the smallest budget that runs the session (streaming) */
    size_t resident_memory_bytes;      /* the smallest budget with G resident in float32 */
    size_t encoded_bytes, g_bytes, g_half_bytes;
    size_t resident_bytes;             /* encoded + G as held after the G build */
    size_t session_peak_bytes;
    /* decisions */
    char mode[16];                     /* "resident", "streaming" */
    int preview_half;
    size_t fit_resident_bytes;         /* float32 planes held for the fit (all = g_bytes) */
    size_t preview_resident_bytes;     /* planes held for previews */
    size_t block_bytes, group_bytes, fit_batch; /* loss passes: one BF pixel per thread in flight */
    size_t calib_block_bytes;          /* the calibration's frame block */
    int region_frees_g;                /* the region refit frees the full field's G first */
    size_t region_resident_bytes;      /* planes of the region's own G held */
    ssb4d_plan_stage stages[SSB4D_PLAN_MAX_STAGES];
    size_t n_stages;
    char profile_source[96];           /* the machine profile the times come from */
};

/* The machine's speeds, for the plan's times only (no decision depends on them): rates in
 * nanoseconds per unit of work on `threads` threads; the plan scales them to its thread count.
 * Stated: the figures measured on the 2-core machine of docs/memory.md at the reference size.
 * Measured: ssb4d_machine_profile_measure times each pass on a small synthetic acquisition here
 * (about a second; small passes run from cache, so large jobs can be somewhat slower). */
typedef struct {
    char source[96];      /* where the rates come from */
    int threads;
    double calibrate_ns;  /* per count read (decode + per-frame sums) */
    double gbuild_ns;     /* per BF pixel x scan position */
    double loss_ns;       /* per BF pixel x image pixel, the exact loss */
    double band_ns;       /* per BF pixel x image pixel, the band objective */
    double object_ns;     /* per BF pixel x output pixel, the object */
} ssb4d_machine_profile;
void ssb4d_machine_profile_stated(ssb4d_machine_profile *p);
ssb4d_status ssb4d_machine_profile_measure(int threads, ssb4d_machine_profile *p, ssb4d_err *err);

typedef struct {
    size_t scan[2], det[2];   /* acquisition shape */
    size_t n_bf;              /* selected BF pixels */
    size_t n_stored;          /* of those, with a stored plane (0: all) */
    size_t n_fit_bf;          /* the fit's pixels (0: fit_radius² n_bf, all of them by default) */
    size_t n_coarse_bf;       /* the fit's coarse subset (0: fit->coarse_bf) */
    size_t encoded_bytes;     /* resident data: the .qem file (0 for data read from disk) */
    int rotation_fitted;      /* calibration fits the rotation (moments and CoM planes) */
    int threads;              /* 0: all cores */
    int upsample;             /* preview factor (0: 2) */
    size_t region[2];         /* region refit shape (0: none) */
    size_t memory_bytes;      /* the budget (0: available RAM) */
    ssb4d_preview_precision preview;
    size_t fit_batch;         /* 0: fit->batch */
    const ssb4d_session_script *script; /* the session's stages (NULL: the built-in one) */
    /* The fit as it will run (NULL: ssb4d_fit_params_default): its objective, trials, locks,
     * whether the rotation is given (else a k table per candidate's rotation) and the parallax. */
    const ssb4d_fit_params *fit;
    int no_fit;               /* 1: the job fits nothing (reconstruct): no fit stage */
    /* The calibrated geometry (NULL: unknown). With it the band objective's bins and the
     * parallax estimate's spectra are counted as the fit will hold them; without it they are
     * bounded by the whole half-plane. */
    const ssb4d_geometry *geometry;
    const ssb4d_machine_profile *profile; /* the times' rates (NULL: the stated profile) */
} ssb4d_plan_input;

void ssb4d_plan_input_default(ssb4d_plan_input *in);
/* SSB4D_EINVAL for absurd shapes or counts; a budget that is too small is not an error: the plan
 * says fits = 0 with the reason and min_memory_bytes. */
ssb4d_status ssb4d_plan_make(const ssb4d_plan_input *in, ssb4d_plan *out, ssb4d_err *err);
/* Side of the built-in session's region refit for a scan side n: 256 from 512 up, n/2 from 64
 * up, 0 (no region refit: regions are at least 32x32) below. */
size_t ssb4d_plan_region_side(size_t n);
/* Fills in's shape (scan, det from shape[4]) and counts from a calibration: n_bf, n_stored,
 * n_fit_bf (the fit's pixels at fit_radius) and the geometry (pointing into cal, which must
 * outlive the plan's making). */
void ssb4d_plan_input_from_calibration(ssb4d_plan_input *in, const ssb4d_calibration *cal, const size_t shape[4],
                                       double fit_radius);
/* What calibrating holds at its peak under `budget` (0: none): the encoded data, the frame block
 * (returned in *block: what ssb4d_calib_params.block_bytes should be) and, when the rotation is
 * fitted, the per-position planes. A budget below it cannot calibrate. */
size_t ssb4d_calib_need(size_t budget, size_t encoded, size_t det_pixels, size_t npos, int rotation_fitted,
                        size_t *block);

/* The multislice refinement's memory (ssb4d_refine, SPEC §13; `ssb4d plan --refine`,
 * docs/refine.md "Data and memory"): what it adds to a memory context's tracked bytes. */
typedef struct {
    size_t positions;          /* of the region */
    int slices, bin, threads;  /* as ssb4d_refine resolves p's 0s */
    size_t batch;              /* positions per minibatch (at most positions) */
    size_t det[2];             /* the binned detector */
    size_t grid[2];            /* the model grid (its FFTs) */
    size_t object[2];          /* the object grid (rows, cols) and its pixel, Å */
    double object_pixel_A[2];
    size_t valid_pixels;       /* pixels per pattern in the likelihood */
    size_t patterns_bytes;     /* "refine patterns": positions x valid pixels float32, held throughout */
    size_t frames_bytes;       /* "refine frames": one region row of frames while loading */
    size_t workspace_bytes;    /* "refine workspace": the solver's block (object: phase, transmission,
                                  Adam moments, gradient; one minibatch's gradient crops; the
                                  per-thread FFT buffers; the model's tables) */
    size_t peak_bytes;         /* patterns + max(frames, workspace): the call's tracked peak over
                                  what the context held before it */
} ssb4d_refine_plan;
/* Plans ssb4d_refine on a source of shape[4] (scan rows, cols, detector rows, cols): region as
 * ssb4d_refine takes it (NULL or all 0: the whole scan), g the geometry it will get (kV, detector
 * sampling, scan step, rotation, flip; the BF centre decides which binned pixels are in the
 * likelihood), cal (may be NULL: no flagged pixels) the calibration's flagged pixels, p the
 * parameters (slices 0: from p->thickness_nm, NaN: the range's middle, as ssb4d_refine starts
 * without a thick model; bin, batch and threads 0: the library's choices). The byte counts are
 * the ones ssb4d_refine counts, to the byte. SSB4D_EINVAL for what ssb4d_refine refuses in the
 * shapes and parameters. */
ssb4d_status ssb4d_refine_plan_make(const size_t shape[4], const size_t region[4], const ssb4d_geometry *g,
                                    const ssb4d_calibration *cal, const ssb4d_refine_params *p,
                                    ssb4d_refine_plan *out, ssb4d_err *err);

/* A distributed session (one rank a machine, docs/memory.md "Per-rank plans"): BF pixels in
 * blocks of SSB4D_PLAN_BLOCK_BF, each rank owning a run of blocks, all its planes resident. */
#define SSB4D_PLAN_MAX_RANKS 65536
#define SSB4D_PLAN_BLOCK_BF 64
typedef struct {
    size_t ranks;                    /* N */
    size_t blocks, local_blocks;     /* blocks over all ranks; the largest rank's */
    size_t local_bf, local_stored;   /* its BF pixels; its stored planes */
    size_t g_bytes;                  /* its float32 planes */
    size_t g_all_bytes;              /* every rank's planes together */
    size_t chain_loss_bytes;         /* the chain's buffers during a pass of the exact loss */
    size_t chain_fit_bytes;          /* ... during the fit's objective passes, the largest */
} ssb4d_plan_rank_share;
/* The plan of the largest rank of `ranks` (1..SSB4D_PLAN_MAX_RANKS; 1 is ssb4d_plan_make
 * exactly): in->memory_bytes is one rank's budget, p the rank's sizes, *share (may be NULL) what
 * it holds. SSB4D_EINVAL for a rank count out of range and what ssb4d_plan_make refuses. */
ssb4d_status ssb4d_plan_make_rank(const ssb4d_plan_input *in, size_t ranks, ssb4d_plan *p,
                                  ssb4d_plan_rank_share *share, ssb4d_err *err);
typedef struct {
    size_t ranks;             /* the smallest N that fits; 0: none */
    int one_process_streams;  /* N = 1 fits only by streaming G */
    size_t tried;             /* the largest N tried */
    size_t tried_need;        /* what a rank needs there */
    char reason[256];         /* why no N fits */
} ssb4d_plan_ranks_answer;
/* The smallest rank count in 1..max_ranks for which every rank fits in->memory_bytes. */
ssb4d_status ssb4d_plan_smallest_ranks(const ssb4d_plan_input *in, size_t max_ranks, ssb4d_plan_ranks_answer *a,
                                       ssb4d_err *err);

/* The CUDA backend's device memory for the session `in` plans (`ssb4d plan --backend cuda`,
 * docs/gpu.md "Device memory"): the passes replayed on a G's device copy, each work buffer kept
 * at its largest size. */
#define SSB4D_DEVICE_MAX_STAGES 16
typedef struct {
    char name[40];
    size_t view_bf, sets;     /* BF pixels the pass reads; its parameter sets */
    int f;                    /* upsampling */
    size_t bytes, after;      /* the work buffers it needs; device bytes held after it */
} ssb4d_device_stage;
typedef struct {
    size_t ny, nx, n_slots;   /* G's grid and its planes on the device */
    size_t planes_bytes, work_bytes, fft_work_bytes, peak_bytes; /* work_bytes includes fft_work */
    int fft_estimated;        /* cuFFT's work area estimated (no GPU here) */
    ssb4d_device_stage stages[SSB4D_DEVICE_MAX_STAGES];
    size_t n_stages;
} ssb4d_device_model;
typedef struct {
    ssb4d_device_model field;    /* the full field's G */
    ssb4d_device_model region;   /* a region refit's own G (when have_region) */
    int have_region, region_frees; /* region_frees: the field's copy is freed first */
    size_t peak_bytes;           /* the session's peak on the GPU */
    size_t budget_bytes;         /* device_memory, else the GPU's memory (0: neither) */
    int budget_given;            /* device_memory was given */
    char gpu[128];               /* the GPU here ("": none, or a build without CUDA) */
    size_t gpu_bytes;
    int fits;                    /* peak within the budget; -1: nothing to compare it with */
} ssb4d_plan_device_info;
/* The device plan of the session `in` whose plan (one rank of n_ranks) is p: asks the GPU here
 * (its name, memory and cuFFT's work areas; without one they are estimated). A rank's GPU holds
 * local_stored planes (n_ranks > 1). device_memory: the budget (0: the GPU's memory). Never fails. */
void ssb4d_plan_device(const ssb4d_plan_input *in, const ssb4d_plan *p, size_t n_ranks, size_t local_stored,
                       size_t device_memory, ssb4d_plan_device_info *out);

/* ------------------------------------------------------------------------------------------ */
/* Session (src/session/): the seed document's viewer session, stage by stage, under a budget   */
/*
 * load, calibrate, G build, fit (with the branch check), an upsampled preview with its FFT, drag
 * previews, releases (preview + loss over all BF pixels), a region refit, the next full preview
 * and saving the calibration; each stage's tracked peak / after / cache, footprint and time.
 * The memory decisions come from ssb4d_plan_make with the calibrated counts, so the report holds
 * the prediction beside the measurement. Previews use the half-precision copy of G when the plan
 * chose it; the fit always uses float32 G (resident or streamed, same bits).
 */
/* Reads a JSON script: {"upsample": 2 | "auto", "fft": true, "drags": 20, "releases": 3,
 * "region": {"rows": [r0, r1], "cols": [c0, c1]} | "centre" | null, "save": true}; keys left out
 * keep their defaults, unknown keys are refused. */
ssb4d_status ssb4d_session_script_read(const char *path, ssb4d_session_script *s, ssb4d_err *err);

typedef struct {
    /* The session's options, as for ssb4d_session_open (one struct for both: the microscope in
     * session.calib, the budget, threads, preview precision, backend, distribution, device
     * memory). ssb4d_session_run sets session.script and session.fit itself. */
    ssb4d_session_opts session;
    const char *out_dir;       /* where "save calibration" writes (NULL: not written) */
    int hashes;                /* SHA-256 of G and of the previews' phase */
    void (*stage)(void *user, const char *name); /* called as each stage starts (may be NULL) */
    void *user;
} ssb4d_session_params;

void ssb4d_session_params_default(ssb4d_session_params *p);

#define SSB4D_SESSION_MAX_STAGES 16
typedef struct {
    ssb4d_plan plan;           /* the decisions it ran with and their prediction */
    ssb4d_stage_record stages[SSB4D_SESSION_MAX_STAGES];
    size_t n_stages;
    size_t shape[4], n_bf, n_stored;
    size_t encoded_bytes, g_bytes, resident_bytes;
    size_t session_peak_bytes, session_rss_peak_bytes;
    int upsample;
    double C10_nm, C12_nm, phi12_deg, loss;      /* the fit */
    double region_C10_nm, region_C12_nm, region_phi12_deg;
    size_t region_rect[4];
    double release_loss;                          /* the last release's loss */
    char g_sha256[65], phase_sha256[65], trace_sha256[65];
    char first_preview_sha256[65];                /* the first preview; equals phase_sha256 when the
                                                     drags and releases returned to the fit */
    int rebuilt_same_bits;                        /* next full preview after a rebuild == first */
    int does_not_fit;                             /* the run was refused: the budget is too small */
    char g_blocks_sha256[65];                     /* ssb4d_G_blocks_sha256: also distributed */
} ssb4d_session_report;

ssb4d_status ssb4d_session_run(const char *data_path, const ssb4d_session_params *p,
                               const ssb4d_session_script *s, ssb4d_session_report *r,
                               ssb4d_err *err);

/* ------------------------------------------------------------------------------------------ */
/* Distributed sessions (src/dist/, MPI; builds with SSB4D_HAVE_MPI; docs/scale.md)             */
typedef struct ssb4d_dist ssb4d_dist;
/* A context over the MPI communicator *comm (an MPI_Comm, passed by address so that this header
 * needs no mpi.h; NULL: MPI_COMM_WORLD), which it duplicates. MPI must be initialised, and stay
 * so until ssb4d_dist_free. SSB4D_EINVAL in a build without MPI. */
ssb4d_status ssb4d_dist_mpi(const void *comm, ssb4d_dist **out, ssb4d_err *err);
void ssb4d_dist_free(ssb4d_dist *d);
int ssb4d_dist_rank(const ssb4d_dist *d); /* 0 for NULL */
int ssb4d_dist_size(const ssb4d_dist *d); /* 1 for NULL */
/* What this rank has sent since the context was made (bytes and messages; a broadcast counts as
 * the root sending to every other rank) and the seconds it spent in messages, waits included. */
void ssb4d_dist_traffic(const ssb4d_dist *d, uint64_t *bytes, uint64_t *messages, double *seconds);

/* ------------------------------------------------------------------------------------------ */
/* Calibration files (src/io/calfile.c, docs/calibration-file.md): read, write, record a fit    */
#define SSB4D_CALFILE_SCHEMA "ssb4d.calibration"
#define SSB4D_CALFILE_VERSION 1

/* rotation_source.method: how rotation_deg was obtained. */
#define SSB4D_CALFILE_ROT_GIVEN "given"          /* stated: --rotation, a sidecar, a calibration file */
#define SSB4D_CALFILE_ROT_COM "centre of mass"   /* measured by `ssb4d calibrate`; 180° branch open */
#define SSB4D_CALFILE_ROT_UNDETERMINED "undetermined" /* nothing measured it (calibrate set 0) */
#define SSB4D_CALFILE_ROT_FIT "fit"              /* fitted with the aberrations, branch checked */

/* One recorded trial of a fit (the best ones are kept in the file). */
typedef struct {
    int stage;                   /* as ssb4d_fit_trial.stage (0 global, 1..3 Nelder–Mead) */
    size_t number;               /* position in the fit's trace */
    double C10_nm, C12_nm, phi12_deg, loss;
} ssb4d_calfile_trial;

/* The fit of one scan region (half-open rectangle [r0, r1) × [c0, c1) of scan positions). */
typedef struct {
    size_t r0, r1, c0, c1;
    double C10_nm, C12_nm, phi12_deg, loss;
} ssb4d_calfile_region;

/* Every double is NaN when the file does not give it; counts are 0. A thick model (has_thick)
 * has finite tilt and thickness. rotation_deg is the rotation to reconstruct with (the branch,
 * if flipped, already included). best[] is written only with the search settings (has_search). */
typedef struct {
    int version;
    ssb4d_geometry geom;
    double bf_radius_px;         /* selection radius */
    double disk_radius_px;
    size_t det_shape[2], scan_shape[2];
    int has_ab;
    ssb4d_aberrations ab;
    double loss;
    char data_identity[96];      /* "sha256:<hex>" of the data file, "qem-body-sha256:<hex>" of a
                                    .qem's encoded body (ssb4d_data_identity), or "" (unknown) */
    int32_t *flagged;            /* malloc'ed; n_flagged entries */
    size_t n_flagged;
    size_t n_bf;                 /* selected BF pixels (0 unknown) */
    /* Thick-sample model (fit --tilt); has_thick = 0: thin. gain = fit / standard fit. */
    int has_thick;
    ssb4d_thick thick;
    double gain;
    /* 180° branch check (SPEC §6.3): 1 if the fit flipped the rotation; skewness of the kept
     * phase and of the other branch (NaN when not evaluated). */
    int branch_flipped;
    double skewness, skewness_other;
    /* Search settings of the fit that produced the aberrations (has_search = 0: none). */
    int has_search;
    size_t trials;
    uint64_t seed;
    double range_lo[3], range_hi[3]; /* C10 nm, C12 nm, φ12 deg */
    int locked[3];
    size_t evaluations;
    ssb4d_calfile_trial *best;   /* malloc'ed; the best trials, lowest loss first (<= 50) */
    char trials_phi12_frame[8];  /* the trials' φ12: "scan", or "probe" when the fit searched the
                                    rotation (φ12 − rotation); "" not recorded (scan) */
    size_t n_best;
    /* Stated beats measured (SPEC §4): the sampling and the centre above are the ones used;
     * method "stated" (a flag, a calibration file, a sidecar, the file's metadata) or "measured"
     * ("" not recorded: older files), with what calibration measured beside it (NaN unknown):
     * detector.sampling_source and detector.centre_source. */
    char sampling_method[12];
    double sampling_measured_mrad, sampling_sigma_mrad;
    char centre_method[12];
    double centre_measured_px[2];
    /* How rotation_deg was obtained (rotation_source; "" when the file does not say): method one
     * of SSB4D_CALFILE_ROT_*; from: who stated it ("--rotation", "sidecar", ...) for "given",
     * what gave the fit its start and error ("parallax", "centre of mass", "undetermined") for
     * "fit"; sigma: its standard error in degrees (NaN unknown). */
    char rotation_method[24];
    char rotation_from[32];
    double rotation_sigma_deg;
    /* The detector's handedness (SPEC §2): geom.flip, and whether the file states it ("flip"
     * present; older files do not: unmirrored) and how it was found ("given", "objective",
     * "centre of mass", "assumed", "undetermined"; "" not recorded). */
    int flip_stated;
    char flip_source[24];
    /* What the acquisition's file records beyond the geometry (NaN / "" unknown). */
    char source_format[32];
    double camera_length_mm, dwell_us;
    /* The standard fit's record ("fit" section, has_fit): the objective it minimised ("band" or
     * "loss"), φ12 in the scan frame (= aberrations.phi12_deg) and in the probe (detector) frame,
     * the BF pixels of the exact loss, its confidence (confident: 1, 0; -1 not recorded), the
     * warning ("" none) and the objective's contrast; the parallax estimate (has_parallax). */
    int has_fit;
    char objective[8];
    double phi12_scan_deg, phi12_probe_deg;
    size_t loss_n_bf, fit_n_bf;
    int confident;
    char warning[256];
    double loss_contrast;
    double se[4];                /* standard errors of C10 nm, C12 nm, φ12 deg (scan frame) and the
                                    rotation deg ("standard_errors"; NaN: none, or undetermined) */
    int has_parallax;
    double px_C10_nm, px_C12_nm, px_phi12_scan_deg, px_rotation_deg;
    double px_sigma[4];          /* C10 nm, C12 nm, φ12 deg, rotation deg (NaN unknown) */
    double px_residual_A, px_seconds;
    /* The fit ran on this scan region only (has_region = 0: the full field). */
    int has_region;
    size_t region[4];            /* r0, r1, c0, c1 */
    ssb4d_calfile_region *regions; /* malloc'ed; fit-regions results */
    size_t n_regions;
    /* The pixel model of calibration's edge fit (detector.edge_model, edge_model_source): as
     * ssb4d_calibration.edge_model (-1 not recorded) and "stated" (edge_pixel_S) or "measured"
     * (the smaller residual); "" not recorded (older files). Read back, it is stated. */
    int edge_model;
    char edge_model_source[12];
    /* The multislice refinement that produced the aberrations and the thick model ("refine"
     * section, has_refine; SPEC §13, docs/refine.md): its slices, loss ("poisson", "amplitude"),
     * final likelihood per position and what counting noise would give, the iterations run, φ12
     * and the tilt in the probe frame, its confidence (1, 0; -1 not recorded), warning ("" none)
     * and the scan region refined (all 0: the whole scan). The refined C10, C12, φ12 are the file's
     * aberrations; the refined tilt (scan frame) and thickness its "thick" section. */
    int has_refine;
    int refine_slices;
    char refine_loss[12];
    double refine_nll, refine_nll_expected;
    size_t refine_iterations;
    double refine_phi12_probe_deg, refine_tilt_probe_mrad[2];
    int refine_confident;
    char refine_warning[256];
    size_t refine_region[4];
    /* refine.tilt_refined, refine.thickness_refined: 1, 0 (they repeat the start, e.g. one
     * slice), -1 not recorded (older files) */
    int refine_tilt_refined, refine_thickness_refined;
} ssb4d_calfile;

void ssb4d_calfile_init(ssb4d_calfile *c);          /* everything unset */
void ssb4d_calfile_free(ssb4d_calfile *c);
/* Fills from a measured calibration (copies the flagged list). */
ssb4d_status ssb4d_calfile_from_calibration(ssb4d_calfile *c, const ssb4d_calibration *cal, ssb4d_err *err);
/* Records a standard fit (ssb4d_fit with parameters p): the geometry it kept, the aberrations,
 * the loss, the branch check, how the rotation was obtained (given_by: who stated a given
 * rotation, e.g. "--rotation"; may be NULL) and the "fit" section (objective, φ12 in both frames,
 * confidence, parallax estimate). loss_n_bf: the BF pixels of the exact loss. Search settings,
 * trials, region and thick model are the caller's. */
void ssb4d_calfile_set_fit(ssb4d_calfile *c, const ssb4d_fit_result *r, const ssb4d_fit_params *p,
                           const char *given_by, size_t loss_n_bf);
/* The file's JSON text (caller frees with free()); NULL when out of memory. */
char *ssb4d_calfile_to_json(const ssb4d_calfile *c);
/* Writes the whole file atomically (temp + rename). */
ssb4d_status ssb4d_calfile_write(const char *path, const ssb4d_calfile *c, ssb4d_err *err);
/* Reads a whole file; refuses malformed files and future versions with a clear message
 * (SSB4D_EFORMAT, or SSB4D_EIO when it cannot be read). c is initialised either way and must be
 * freed. */
ssb4d_status ssb4d_calfile_read(const char *path, ssb4d_calfile *c, ssb4d_err *err);
/* 1 when both data identities are known (not "" or NULL) and differ, else 0. */
int ssb4d_calfile_identity_differs(const char *a, const char *b);
/* The identity of a data file that a calibration file records (SPEC §4): "qem-body-sha256:<hex>"
 * for a .qem, the SHA-256 of its concatenated body checksums (the header's "sha256" list, verified
 * against the body whenever the file is opened as a source), so only the header is read; for any
 * other file "sha256:<hex>" of its bytes. out gets "" on failure (SSB4D_EIO: it cannot be read;
 * SSB4D_EINVAL: n is too small, 96 bytes always suffice). */
ssb4d_status ssb4d_data_identity(const char *path, char *out, size_t n, ssb4d_err *err);
/* The simulator sidecar of DATA as ssb4d_values_read finds it (DATA.json, DATA with its extension
 * replaced by .json, or that without a trailing "_counts"): 1 and its path in out when one
 * exists, else 0 and "". */
int ssb4d_sidecar_find(const char *data, char *out, size_t n);

/* ------------------------------------------------------------------------------------------ */
/* Writing results (src/io/)                                                                     */
/* SSB4D_OK when path's extension is one ssb4d_image_save writes (.tif/.tiff, .npy, .png): what a
 * command checks before any long work. */
ssb4d_status ssb4d_image_check_path(const char *path, ssb4d_err *err);
/* The calibration picture `ssb4d calibrate` writes (RGB PNG, atomically): the mean diffraction
 * pattern on a log scale, each detector pixel drawn as a square (>= 512 px in all), the measured
 * BF disk as a green circle with a cross at its centre, the BF selection in yellow where it
 * differs, flagged (hot, dead) pixels in red, and below it a legend with a scale bar in mrad. */
ssb4d_status ssb4d_calibration_picture(const char *path, const ssb4d_calibration *cal, ssb4d_err *err);
/* A whole C-order array as .npy (descr: "<f4", "<f8", "<c8", ...), atomically. */
ssb4d_status ssb4d_npy_save(const char *path, const char *descr, int ndim, const size_t *shape,
                            const void *data, ssb4d_err *err);
/* A version-1 .npy header (padded to 64 bytes) for a C-order array, written to f: the values
 * follow as the caller streams them. */
ssb4d_status ssb4d_npy_write_header(FILE *f, const char *descr, int ndim, const size_t *shape, ssb4d_err *err);
/* The bytes each thread of a .qem's spatial-index check holds (one block's sums of every spatial
 * field of a det_rows x det_cols detector): what `ssb4d info --check` and `verify` fit their
 * thread count to under --memory. */
size_t ssb4d_qem_index_check_bytes(size_t det_rows, size_t det_cols);
/* An encoded .qem read directly (what `ssb4d info` and `verify` look at): its layout, its
 * header's record and its counts, without opening it as a source for reconstruction. */
typedef struct ssb4d_qem ssb4d_qem;
typedef struct {
    size_t shape[4];           /* scan_rows, scan_cols, det_rows, det_cols */
    int dtype_bytes;           /* 1 (uint8) or 2 (uint16) */
    size_t n_scans, n_pix;     /* scan positions, detector pixels */
    size_t n_chunks, n_blocks; /* chunks; blocks over all chunks */
    size_t file_bytes, header_bytes, body_bytes;
    size_t payload_bytes;      /* the count streams themselves */
} ssb4d_qem_info;
/* The effective calibration (qem-format §9.8: overrides win over recorded values; NaN unknown). */
typedef struct {
    double kv, semiangle_mrad, scan_step_A[2], det_sampling[2], camera_length_mm, dwell_us;
    int det_sampling_inverse_A; /* 1: det_sampling is in 1/angstrom, 0: mrad */
} ssb4d_qem_calibration;
/* What the import did to the flagged pixels' counts, from the header (strings owned by the
 * handle): policy ("median", "zero", "none"; NULL: not recorded), the flagged counts (when
 * flagged_recorded), whether and how their counts were replaced, marker values stored as 0. */
typedef struct {
    const char *policy;
    int flagged_recorded;
    size_t flagged_by_file, flagged_by_totals;
    int replaced;
    const char *method;
    size_t replaced_pixels, markers_zeroed;
} ssb4d_qem_flags;
/* Opens and validates path (memory-mapped; the header always, the body's checksums too when
 * verify_body, on `threads` threads, 0: all cores). SSB4D_EIO when it cannot be read,
 * SSB4D_EFORMAT (one line naming the file) when it is not a valid .qem. Close with
 * ssb4d_qem_close (NULL is fine). */
ssb4d_status ssb4d_qem_open(const char *path, int verify_body, int threads, ssb4d_qem **out, ssb4d_err *err);
void ssb4d_qem_close(ssb4d_qem *q);
void ssb4d_qem_get_info(const ssb4d_qem *q, ssb4d_qem_info *info);
/* valid[k] = 1 for a valid detector pixel, 0 for a flagged one (n_pix bytes, owned by q). */
const uint8_t *ssb4d_qem_valid_mask(const ssb4d_qem *q);
void ssb4d_qem_calibration_of(const ssb4d_qem *q, ssb4d_qem_calibration *cal);
void ssb4d_qem_flags_of(const ssb4d_qem *q, ssb4d_qem_flags *flags);
/* The whole header as JSON text (caller frees with free()); NULL when out of memory. */
char *ssb4d_qem_header_text(const ssb4d_qem *q);
/* Decodes every block and checks the spatial index against it on `threads` threads (each holds
 * ssb4d_qem_index_check_bytes); SSB4D_EFORMAT naming the file on a mismatch. */
ssb4d_status ssb4d_qem_check_index(const ssb4d_qem *q, int threads, ssb4d_err *err);
/* The counts of the box lo <= index < hi (4-D, C order) into out, decoded on `threads` threads. */
ssb4d_status ssb4d_qem_read_region(const ssb4d_qem *q, const size_t lo[4], const size_t hi[4], uint16_t *out,
                                   int threads, ssb4d_err *err);
/* An acquisition in a foreign format read as `ssb4d import` reads it (src/formats/): blocks of
 * whole frames, in the file's own orientation, for `ssb4d export` and `verify`. */
typedef struct ssb4d_reader ssb4d_reader;
typedef struct {
    const char *format;       /* NULL or "auto" (by content/extension), "npy", "raw", "hdf5",
                                 "arina", "mib", "empad", "dm", "velox", "mrc" */
    const char *dataset;      /* HDF5 dataset path (NULL: discover the rank-4 dataset) */
    size_t shape[4];          /* raw: the full shape; arina/mib/HDF5 stacks: shape[0..1] = scan shape */
    int dtype_bytes;          /* raw: 1, 2 or 4 */
    int dtype_float;          /* raw: the values are float32 (dtype_bytes 4) */
    int big_endian;           /* raw */
    size_t offset;            /* raw: header bytes to skip */
    const char *const *more_paths; /* Merlin: further files of the acquisition, in scan order */
    size_t n_more_paths;
} ssb4d_reader_opts;
/* What the file records about the microscope (NaN = not recorded). */
typedef struct {
    double kv, semiangle_mrad, scan_step_A[2], det_sampling_mrad[2], camera_length_mm, dwell_us;
} ssb4d_reader_calibration;
/* SSB4D_OK when name is a --format word above, else SSB4D_EINVAL with one line. */
ssb4d_status ssb4d_reader_format_check(const char *name, ssb4d_err *err);
/* Opens path (o may not be NULL; zeroed: auto). Every reader checks what the file says against
 * its size and refuses with one line naming the file (SSB4D_EIO, SSB4D_EFORMAT, SSB4D_EINVAL).
 * Close with ssb4d_reader_close (NULL is fine). */
ssb4d_status ssb4d_reader_open(const char *path, const ssb4d_reader_opts *o, ssb4d_reader **out, ssb4d_err *err);
void ssb4d_reader_close(ssb4d_reader *r);
/* shape (scan_rows, scan_cols, det_rows, det_cols); the source's integer width (1, 2, 4); 1 when
 * it holds float32 values (read them with ssb4d_reader_read_f32). */
void ssb4d_reader_shape(const ssb4d_reader *r, size_t shape[4]);
int ssb4d_reader_dtype_bytes(const ssb4d_reader *r);
int ssb4d_reader_is_float(const ssb4d_reader *r);
/* The format's name as a .qem records it ("numpy", "raw", "hdf5", ...; static). */
const char *ssb4d_reader_format_name(const ssb4d_reader *r);
/* Pixels the file marks as bad (det_rows*det_cols bytes, 1 = flagged, owned by r), or NULL. */
const uint8_t *ssb4d_reader_flag_mask(const ssb4d_reader *r);
void ssb4d_reader_calibration_of(const ssb4d_reader *r, ssb4d_reader_calibration *cal);
/* The fields of the file the reader keeps, as JSON object text (caller frees with free()); NULL
 * when there are none to print or out of memory. */
char *ssb4d_reader_metadata_text(const ssb4d_reader *r);
/* Frames [pos0, pos0+npos) as uint32 counts (out[(p*det_rows + row)*det_cols + col]); refused
 * for float data and, naming frame and pixel, for a negative value. */
ssb4d_status ssb4d_reader_read(ssb4d_reader *r, size_t pos0, size_t npos, uint32_t *out, ssb4d_err *err);
/* The same frames as float32 from any source (counts above 2^24 and NaN/infinite values refused). */
ssb4d_status ssb4d_reader_read_f32(ssb4d_reader *r, size_t pos0, size_t npos, float *out, ssb4d_err *err);
/* Tells the source that frames [pos0, pos0+npos) will not be read again soon (a memory-mapped
 * file drops those pages from the process): a hint for a pass over every frame; never fails. */
void ssb4d_source_done_with(ssb4d_source *s, size_t pos0, size_t npos);

/* ------------------------------------------------------------------------------------------ */
/* Benchmark records (src/bench/, SPEC §10): one JSON object per `ssb4d bench run`, and the    */
/* comparison of two records (`ssb4d bench compare OLD NEW`)                                    */
#define SSB4D_BENCH_SCHEMA "ssb4d-bench/1"
#define SSB4D_BENCH_MAX_STAGES 32
#define SSB4D_BENCH_MAX_RUNS 32

typedef struct {
    char name[48];
    size_t n_runs;
    double seconds[SSB4D_BENCH_MAX_RUNS]; /* wall time of each repeat */
    double median, min, max;        /* filled by ssb4d_bench_record_finish */
    /* memory of the last repeat, bytes */
    size_t peak_bytes, after_bytes, cache_bytes, rss_peak_bytes, device_peak_bytes;
} ssb4d_bench_stage;

typedef struct {
    /* workload */
    char workload[32];        /* "small", "medium", "reference" or a file name */
    char identity[112];       /* data identity (ssb4d_data_identity) */
    size_t shape[4];
    size_t n_bf, n_stored;
    size_t encoded_bytes, g_bytes;
    /* settings */
    int threads;
    size_t memory_budget_bytes;
    int repeat;
    int upsample;
    char preview_precision[8];   /* "float" or "half" */
    char mode[16];               /* "resident" or "streaming" */
    char backend[16];            /* where the heavy passes ran: "cpu" or "cuda" ("": not recorded, null) */
    size_t loss_tile;            /* 0 = the default */
    /* results */
    ssb4d_bench_stage stages[SSB4D_BENCH_MAX_STAGES];
    size_t n_stages;
    double C10_nm, C12_nm, phi12_deg, loss;
    size_t session_peak_bytes, session_rss_peak_bytes;
    char g_sha256[65], phase_sha256[65], trace_sha256[65];
    char g_blocks_sha256[65];   /* G per block of 64 BF pixels (also from a distributed run) */
} ssb4d_bench_record;
/* Comparison thresholds (SPEC §10). */
typedef struct {
    double time_ratio;         /* a time fails when new > old * (1 + time_ratio); default 0.10 */
    double min_seconds;        /* stages whose medians are both below this are shown, not judged */
    double mem_ratio;          /* a memory metric fails when it grew by more than mem_ratio ... */
    double mem_abs_bytes;      /* ... and by more than this (default 0.25 GiB) */
    int allow_hash_change;     /* 1: a changed hash is reported but does not fail */
} ssb4d_bench_compare_opts;
void ssb4d_bench_compare_opts_default(ssb4d_bench_compare_opts *o);
/* Median (the mean of the middle two for an even count), min and max of n values; NaN for n = 0.
 * Returns -1 when out of memory (the outputs are then NaN). */
int ssb4d_bench_stats(const double *runs, size_t n, double *median, double *min, double *max);
/* Median, min and max of every stage's runs. */
void ssb4d_bench_record_finish(ssb4d_bench_record *r);
/* Writes the record as JSON to path, atomically (schema, date in UTC, git revision of the source
 * tree, machine: CPU model, cores, RAM, GPU and driver or null, OS). */
ssb4d_status ssb4d_bench_record_write(const ssb4d_bench_record *r, const char *path, ssb4d_err *err);
/* Reads two record files, prints the table to out and returns 0 (nothing regressed), 1 (a time,
 * memory metric or hash regressed) or 2 (a file is missing, malformed or of another schema; the
 * message goes to err). */
int ssb4d_bench_compare_files(const char *old_path, const char *new_path, const ssb4d_bench_compare_opts *o,
                              FILE *out, ssb4d_err *err);

/* ------------------------------------------------------------------------------------------ */
/* For clients (src/common/): what the command line and the viewer share with the library     */
/* Sets err (if not NULL) to one formatted line and returns code (`return ssb4d_err_set(...)`). */
ssb4d_status ssb4d_err_set(ssb4d_err *err, ssb4d_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Seconds on the monotonic clock, for timings and progress (never for results). */
double ssb4d_clock_s(void);
/* The threads a call given `requested` runs on: <= 0 the online cores, else requested (at most
 * 1024), as every stage resolves its `threads`. */
int ssb4d_threads_resolve(int requested);
/* A size in words, in binary units: "%.1f MiB" below 1 GiB, else "%.2f GiB", the unit chosen
 * by `like` (the largest size of the same message, so that one message keeps one unit; 0: bytes
 * itself); up: rounded up (a smallest budget printed can be given back to --memory as it is).
 * Every size the library and the command line print is written by this function. Returns buf. */
const char *ssb4d_size_text(char buf[32], size_t bytes, size_t like, int up);
/* SHA-256 of n bytes as 64 hex digits and a NUL. */
void ssb4d_sha256_hex(const void *data, size_t n, char hex[65]);
/* Output files appear whole or not at all: "<path>.tmp<pid>" is written, flushed, synced and
 * renamed over path; on any failure the temporary file is removed. */
typedef struct {
    FILE *f;
    char *tmp;
    char *path;
} ssb4d_afile;
ssb4d_status ssb4d_afile_open(ssb4d_afile *a, const char *path, ssb4d_err *err);
/* st == SSB4D_OK: flush, sync, close and rename; otherwise close and remove the temporary file.
 * Returns the final status (an I/O error here is reported through err). */
ssb4d_status ssb4d_afile_finish(ssb4d_afile *a, ssb4d_status st, ssb4d_err *err);
/* A whole text file, atomically (a newline is appended). */
ssb4d_status ssb4d_write_text_atomic(const char *path, const char *text, ssb4d_err *err);
/* Every number of a cJSON tree (libcjson's cJSON *, here its struct tag) made to print exactly:
 * cJSON prints a double with 15 digits whenever they read back within a relative DBL_EPSILON,
 * which loses the last bit; each number becomes the shortest "%.Ng" (N 15..17) that reads back as
 * the same double, and a non-finite one null. What `ssb4d fit --json` and the viewer's answers
 * print, so that a client reads the very double the library computed. */
struct cJSON;
void ssb4d_json_exact(struct cJSON *j);
/* What the viewer's FFT panel shows, in place: log(1 + |DFT|) of img (ny x nx, row-major) with
 * its mean removed first (the DC peak would flatten the rest), the zero frequency in the middle.
 * Its two buffers are counted in mem (may be NULL). */
ssb4d_status ssb4d_image_fft_logmag(ssb4d_mem *mem, float *img, size_t ny, size_t nx, ssb4d_err *err);
/* Bytes from rank `root` to every rank of d (a distributed viewer's jobs). */
ssb4d_status ssb4d_dist_bcast(const ssb4d_dist *d, void *buf, size_t bytes, int root, ssb4d_err *err);

#ifdef __cplusplus
}
#endif
#endif /* SSB4D_ADVANCED */
