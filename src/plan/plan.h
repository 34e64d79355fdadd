/* plan.h — the planner's helpers shared with the session runner (the API is in ssb4d.h). */
#ifndef SSB4D_PLAN_H
#define SSB4D_PLAN_H
#include "ssb4d_advanced.h"

/* Side of the built-in session's region refit for a scan side n: 256 from 512 up, n/2 from 64
 * up, 0 (no region refit: regions are at least 32x32) below. */
size_t ssb4d_plan_region_side(size_t n);
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
#endif
