/* plan.h — the planner's helpers shared with the session runner (the API is in ssb4d.h). */
#ifndef SSB4D_PLAN_H
#define SSB4D_PLAN_H
#include "common/block.h"
#include "plan/device_model.h"
#include "ssb4d_advanced.h"

/* Side of the built-in session's region refit for a scan side n: 256 from 512 up, n/2 from 64
 * up, 0 (no region refit: regions are at least 32x32) below. */
size_t ssb_plan_region_side(size_t n);
/* The calibration's frame block for a budget: 64 MiB (calibrate.c's default) when it fits
 * comfortably beside the encoded data, else a quarter of what is left (at least one frame).
 * Whole frames of det_pixels uint32 values, at most npos of them. */
size_t plan_calib_block(size_t budget, size_t encoded, size_t det_pixels, size_t npos);
/* The calibration's per-position planes held beside its frame block (calibrate.c: moments and
 * centre of mass, 40 bytes a position) when it fits the rotation; 0 otherwise. */
size_t plan_calib_extra(size_t npos, int rotation_fitted);
/* What calibrating holds at its peak: the encoded data, the frame block for this budget (returned
 * in *block) and the per-position planes. A budget below it cannot calibrate. */
size_t plan_calib_need(size_t budget, size_t encoded, size_t det_pixels, size_t npos, int rotation_fitted,
                       size_t *block);
/* Bytes of one float32 plane of G for a scan of ny x nx (gbuild.c's stride). */
size_t plan_plane_bytes(size_t ny, size_t nx);
/* session.c's preview at upsampling f on an ny x nx scan: the phase image and its FFT's spectrum
 * (the object between them is object.c's own query). */
typedef struct {
    size_t phase, spectrum;
} plan_preview_ws;
plan_preview_ws plan_preview_sizes(size_t ny, size_t nx, size_t f);
/* Fills in's shape (scan, det from shape[4]) and counts from a calibration: n_bf, n_stored (BF
 * pixels with a stored plane, gbuild.c's rule), n_fit_bf (the fit's pixels at fit_radius) and
 * the geometry (pointing into cal, which must outlive the plan's making). */
void plan_input_from_calibration(ssb4d_plan_input *in, const ssb4d_calibration *cal,
                                 const size_t shape[4], double fit_radius);
/* G build options as a plan says: half or float32, `resident` bytes of planes held (the plan's
 * 0 = nothing; gbuild's resident_bytes 0 = all, so the two zeros are kept apart), g_bytes that
 * G's full size, the plan's decode block and group. */
void plan_gbuild_opts(const ssb4d_plan *p, int half, size_t resident, size_t g_bytes, int threads,
                      ssb4d_gbuild_opts *go);

/* ---- a distributed session: one rank of N (issue 16; docs/memory.md, "Per-rank plans") ------
 * BF pixels, in BF order, form logical blocks of PLAN_BLOCK (nb = ceil(n_bf / 64)); rank r of N
 * owns blocks [floor(nb r / N), floor(nb (r+1) / N)). Every rank maps the encoded data, holds all
 * its stored planes resident in float32 (no streaming, no half-precision preview copy) and has
 * the one-process transients of every stage computed for its share; each pass of the loss or the
 * band objective adds the chain's buffers (plan_chain_bytes); rank 0 alone calibrates. */
#define PLAN_BLOCK SSB_BLOCK /* common/block.h */
#define PLAN_MAX_RANKS 65536
#define PLAN_RANK_LARGEST ((size_t)-1) /* plan_rank_share_of's rank: the worst rank, see below */
typedef struct {
    size_t ranks, rank;       /* N, and the rank planned (PLAN_RANK_LARGEST: the worst one) */
    size_t blocks;            /* nb = ceil(n_bf / 64), over all ranks */
    size_t block0, block1;    /* the rank's blocks [block0, block1) */
    size_t local_blocks;      /* block1 - block0 */
    size_t local_bf;          /* its BF pixels */
    size_t local_stored;      /* its stored planes: ceil(n_stored local_bf / n_bf) */
    int calibrates;           /* it runs the calibration (rank 0; the worst rank counts it too) */
    int holds_partials;       /* it holds its blocks' partials until the chain reaches it (r > 0) */
    /* Filled by plan_make_rank: */
    size_t g_bytes;           /* local_stored float32 planes */
    size_t chain_loss_bytes;  /* the chain's buffers during a pass of the exact loss over all BF pixels */
    size_t chain_fit_bytes;   /* ... during the fit's objective passes, the largest (a batch on the
                                 coarse subset, or Nelder–Mead's simplex on all fit pixels) */
} plan_rank_share;

/* The share of `rank` of `ranks` (1..PLAN_MAX_RANKS) for n_bf BF pixels of which n_stored
 * (0: all) have a stored plane. ranks = 1: everything, calibrates, no partials. PLAN_RANK_LARGEST:
 * the largest share, ceil(nb / N) blocks = min(n_bf, 64 ceil(nb / N)) pixels, planned as a rank
 * other than the first (it holds its partials) that also calibrates (rank 0's stage): the worst
 * of every stage of every rank, so a budget it fits, every rank fits. */
plan_rank_share plan_rank_share_of(size_t n_bf, size_t n_stored, size_t ranks, size_t rank);

/* The chain's buffers during one pass with n parameter sets (0 when ranks = 1): the running
 * totals received from the previous rank and the open block partial (where a block begun on an
 * earlier rank is finished), 2 n set_doubles 8 bytes; on ranks other than the first also the
 * partials of its blocks until the chain reaches it, n set_doubles 8 bytes each. A pass over all
 * of G (view 0) has the rank's local_blocks of them; a pass over a view of `view` BF pixels (the
 * fit's subsets, whose blocks are 64 of the view's pixels) ceil(min(view, local_bf) / 64).
 * set_doubles: npix + 1 for the exact loss on an npix grid (a plane of sums and Σφ²), 4 a bin for
 * the band objective. */
size_t plan_chain_bytes(const plan_rank_share *r, size_t set_doubles, size_t n, size_t view);

/* The plan of one rank of `ranks` (PLAN_RANK_LARGEST: the worst rank, as `ssb4d plan --ranks`
 * prints it). in describes the whole acquisition and in->memory_bytes is the budget of one rank.
 * ranks = 1 is ssb4d_plan_make exactly. ranks > 1: p's sizes are the rank's (g_bytes its float32
 * share, mode "resident", fits = 0 with the reason when its planes cannot all be resident,
 * min_memory_bytes the least a rank needs with 1 MiB decode blocks), and *share (may be NULL)
 * says what the rank holds. SSB4D_EINVAL for ranks outside 1..PLAN_MAX_RANKS or a rank >= ranks,
 * and for what ssb4d_plan_make refuses. */
ssb4d_status plan_make_rank(const ssb4d_plan_input *in, size_t ranks, size_t rank, ssb4d_plan *p,
                            plan_rank_share *share, ssb4d_err *err);

/* The smallest rank count N in 1..max_ranks for which every rank fits in->memory_bytes with its
 * planes resident in float32 (N = 1: the one-process plan with G resident). */
typedef struct {
    size_t ranks;             /* that N; 0: none */
    int one_process_streams;  /* N = 1 fits only by streaming G (the one-process plan) */
    size_t tried;             /* the largest N tried: min(max(nb, 2), max_ranks), one block a rank */
    size_t tried_need;        /* what a rank needs there (the least of any N) */
    char reason[256];         /* why no N fits */
} plan_ranks_answer;
ssb4d_status plan_smallest_ranks(const ssb4d_plan_input *in, size_t max_ranks, plan_ranks_answer *a,
                                 ssb4d_err *err);

/* The CUDA backend's passes of the session `in` plans (plan/device_model.h), on a G of ny x nx
 * (the scan, or a region): the fit's views, its largest batches and their rotations as plan_make
 * plans them, the band objective's bins on that grid, previews and the object at in->upsample,
 * drag previews of 256 BF pixels. fft_work and object_complex are left 0 for the caller. */
void plan_device_session(const ssb4d_plan_input *in, size_t ny, size_t nx, dev_session_in *out);
#endif
