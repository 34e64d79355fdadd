/* ssb4d_advanced.h — the stages one by one, under the session handle of ssb4d.h.
 *
 * ssb4d.h is what a program usually needs: open data into a session, fit, preview, save (and the
 * simulator and importer). This header adds the stages the session strings together, for programs
 * that build their own pipeline or study one stage: the memory context's allocator, data sources,
 * calibration, the G build, the SSB passes (loss, object, mean phase), the parallax estimate, the
 * fit, the band objective, the memory planner and the replayed viewer session. Same library, same
 * stability (none before 1.0).
 */
#ifndef SSB4D_ADVANCED_H
#define SSB4D_ADVANCED_H
#include "ssb4d.h"

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
 * only the requested pixels' streams of the blocks that overlap the requested scan rows). */
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

/* ------------------------------------------------------------------------------------------ */
/* Parallax estimate (src/parallax/) */
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
/* Memory planner (src/plan/), SPEC §9: plan, then execute */
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
void ssb4d_session_script_default(ssb4d_session_script *s);
/* Reads a JSON script: {"upsample": 2 | "auto", "fft": true, "drags": 20, "releases": 3,
 * "region": {"rows": [r0, r1], "cols": [c0, c1]} | "centre" | null, "save": true}; keys left out
 * keep their defaults, unknown keys are refused. */
ssb4d_status ssb4d_session_script_read(const char *path, ssb4d_session_script *s, ssb4d_err *err);

typedef struct {
    ssb4d_calib_params calib;  /* microscope values and overrides (calib.mem is ignored) */
    size_t memory_bytes;       /* 0: available RAM */
    ssb4d_preview_precision preview;
    int threads;               /* 0: all cores */
    const char *out_dir;       /* where "save calibration" writes (NULL: not written) */
    int hashes;                /* SHA-256 of G and of the previews' phase */
    void (*stage)(void *user, const char *name); /* called as each stage starts (may be NULL) */
    void *user;
    ssb4d_backend_kind backend; /* where the heavy passes run (default AUTO) */
    const struct ssb4d_dist *dist; /* a distributed run (ssb4d_session_opts.dist; NULL: none) */
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

/* BAND-API-BEGIN (thick-sample band objective, src/ssb/band.c, SPEC §5.6) */
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
/* BAND-API-END */

#ifdef __cplusplus
}
#endif
#endif /* SSB4D_ADVANCED_H */
