/* device_model.h — the CUDA backend's device memory, planned to the byte (issue 31; docs/gpu.md,
 * "Device memory"). Pure C: builds and answers without CUDA.
 *
 * The CUDA backend (src/cuda/device.c) holds G's stored planes on the device and a fixed set of
 * work buffers, each grown on demand and kept between passes (dev_alloc): a pass that needs a
 * buffer no larger than the one held allocates nothing. So after any sequence of passes the device
 * holds the planes plus, per buffer, the largest size any pass asked of it, plus cuFFT's work
 * areas (owned by the backend through cufftSetWorkArea, grown the same way); the peak of a G's
 * device copy is that sum after its last pass. The model replays the passes on these sizes: each
 * buffer's formula below is device.c's, named by its field there. */
#ifndef SSB4D_PLAN_DEVICE_MODEL_H
#define SSB4D_PLAN_DEVICE_MODEL_H
#include <stddef.h>

/* cuFFT's work area in bytes for the backend's plan of an nyf x nxf grid: c2c 0, the batched
 * real-output inverse (C2R, `batch` transforms, idist nyf (nxf/2+1), odist nyf nxf); c2c 1, the
 * object's complex inverse (batch 1). cuda_fft_work_bytes with a device (src/cuda/cuda.h). */
typedef size_t (*dev_fft_work_fn)(int nyf, int nxf, int batch, int c2c);

/* Without a device: an estimate of that work area, the transform's output (batch nyf nxf floats
 * for C2R, nyf nxf complex floats for C2C). cuFFT's own figure (cufftGetSizeMany) is usually at
 * most this for 2-D transforms, 0 for some sizes. */
size_t dev_fft_work_estimate(int nyf, int nxf, int batch, int c2c);

/* The work buffers (device.c's ssb_dev fields). */
enum {
    DEV_TAB,      /* tab: a pass's pixel table, or a band pass's tables */
    DEV_SPEC,     /* spec: one chunk's corrected spectra */
    DEV_VALID,    /* valid: one chunk's flags */
    DEV_REAL,     /* real: one chunk's c2r outputs */
    DEV_SUMS,     /* sums: per set Σφ and Σφ² (a band pass: its sums; the band power's) */
    DEV_BPART,    /* bpart: one block's sums (a band pass: a pixel's) */
    DEV_FIN,      /* fin: per set [Σφ², Σmean²] */
    DEV_ACC,      /* acc: the object's sum (a band pass: its parameter sets) */
    DEV_SEG,      /* seg: a band pass's segments */
    DEV_MEAN,     /* mean: every set's mean phase */
    DEV_OBJ_F,    /* the object's spectrum F, nyf x nxf complex float */
    DEV_OBJ_OUT,  /* the object's output plane: the phase, or the complex object */
    DEV_WORK,     /* cuFFT's one work area (work): the larger of the C2R and C2C plans' */
    DEV_XBUF,     /* xbuf: the fused loss's group of half-transformed planes (cuda/loss_fused.h) */
    DEV_TW,       /* twb: the fused loss's twiddle tables */
    DEV_N_BUF
};
extern const char *const dev_buf_name[DEV_N_BUF];

#define DEV_MAX_STAGES 16
typedef struct {
    char name[40];
    size_t view_bf;   /* BF pixels of the G (or view) the pass reads */
    size_t sets;      /* parameter sets in the pass */
    int f;            /* upsampling */
    size_t bytes;     /* the work buffers it needs on its own (G's planes not counted) */
    size_t after;     /* device bytes held after it: planes + each buffer's largest size so far */
} dev_stage;

typedef struct {
    size_t ny, nx, n_slots, stride; /* G's grid, its planes on the device, float2 per plane */
    size_t planes;                  /* n_slots (at least 1) x stride x 8 bytes */
    size_t buf[DEV_N_BUF];          /* each buffer's largest size so far */
    dev_fft_work_fn fft_work;       /* NULL: dev_fft_work_estimate */
    int fft_estimated;              /* the work areas are estimates (no device) */
    int fused;                      /* the loss in one pass where its grid allows (cu_fused_wanted) */
    dev_stage stages[DEV_MAX_STAGES];
    size_t n_stages;
} dev_model;

/* A G of ny x nx with n_slots planes on the device (stride 0: G_plane_stride_of(ny, nx)); the
 * loss fused as the backend makes it (SSB4D_CUDA_LOSS; set m->fused after to model the other). */
void dev_model_init(dev_model *m, size_t ny, size_t nx, size_t n_slots, size_t stride, dev_fft_work_fn fft_work);
/* Device bytes held now: the planes, every buffer's largest size, the work areas. */
size_t dev_model_bytes(const dev_model *m);
/* The work buffers alone (dev_model_bytes - planes). */
size_t dev_model_work_bytes(const dev_model *m);

/* One phase stack pass (device.c dev_phases) over a G or view of view_bf BF pixels: n sets at
 * upsampling f; want_phase: the loss or the mean phase (mean: the mean phase too); object_floats:
 * the object's output plane in floats per output pixel (0: no object; 1: its phase; 2: the complex
 * object). Records a stage named `name` (NULL: none). */
void dev_model_phases(dev_model *m, const char *name, size_t view_bf, size_t n, int f, int want_phase, int mean,
                      int object_floats);
/* One band objective pass (dev_band): n sets over nrot distinct rotations, nb bins. */
void dev_model_band(dev_model *m, const char *name, size_t view_bf, size_t n, size_t nrot, size_t nb);
/* The band power (dev_band_power) over nb bins. */
void dev_model_band_power(dev_model *m, const char *name, size_t view_bf, size_t nb);

/* The session's passes on the device (the stages of handle.c and the standard fit). */
typedef struct dev_session_in {
    size_t ny, nx;           /* G's grid */
    size_t n_bf, n_stored;   /* G's BF pixels; its stored planes (0: all) */
    int f;                   /* previews' and the object's upsampling (0: 2) */
    int fit;                 /* the session fits (the standard fit) */
    int band;                /* its objective: the band objective, else the exact loss */
    size_t n_fit, n_coarse;  /* its views: all fit pixels, the coarse subset (0: n_bf) */
    size_t sets_coarse, sets_fit; /* the most parameter sets one pass carries on each view */
    size_t rot_coarse, rot_fit;   /* distinct rotations in such a band pass (0: 1) */
    size_t sets_se, rot_se;       /* the standard errors' passes (uncertainty.c): design points and
                                     distinct rotations; 0: none */
    size_t band_nb;          /* the band objective's bins */
    int branch_check;        /* the fit's 180° branch check (an object at f = 1) */
    size_t subset;           /* a drag preview's BF pixels asked (0: 256; ≥ n_bf: all) */
    int object_complex;      /* releases and the object return the complex object too */
    int no_images;           /* the G is only fitted (a region refit's): no previews, releases, object */
    dev_fft_work_fn fft_work;
} dev_session_in;

/* The BF pixels of a drag preview's view: every ⌊n_bf/subset⌋-th pixel (subset 0: 256); the session
 * (handle.c, ssb4d_session_preview) sizes its view with it. */
size_t dev_preview_bf(size_t n_bf, size_t subset);
/* Replays the session: G's planes; the fit (the band power and band batches, or loss batches, on
 * the coarse subset and on all fit pixels; the branch check's object; the exact loss over all
 * BF pixels); a drag preview (the object at f of the preview subset); a release (the object and
 * the exact loss fused, f = 1); the object at f. The peak is dev_model_bytes after it. */
void dev_model_session(const dev_session_in *in, dev_model *m);

/* The GPU's start from a .qem (src/cuda/gstart.h, issue 41), before the passes: the count streams
 * go up (upload: the payload, the offsets as 4-byte words, the selectors, 28 bytes of table per
 * block, the model tables and an error key); the calibration adds one batch of `blocks` blocks of
 * counts (P·512 u16 each), P u64 totals, 3 u64 moments per scan and P flagged-pixel ints (calib:
 * the upload included); the G build adds beside G's planes one chunk of bf_chunk scan columns (N
 * floats each) and 12 bytes per BF pixel (gbuild: the upload included, the planes and cuFFT's
 * own work area not). blocks and bf_chunk 0: the defaults (16, 256). cuda_start_sizes (gstart.c)
 * allocates these; tests/gpu/test_qem_table.c checks the two agree. */
typedef struct {
    size_t upload, calib, gbuild;
} dev_start;
void dev_model_start(size_t n_scans, size_t n_pix, size_t n_blocks, size_t n_chunks, size_t payload_bytes,
                     size_t n_bf, size_t blocks, size_t bf_chunk, dev_start *out);
#endif
