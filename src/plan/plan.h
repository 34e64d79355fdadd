/* plan.h — the planner's helpers shared with the session runner (the API is in ssb4d.h). */
#ifndef SSB4D_PLAN_H
#define SSB4D_PLAN_H
#include "ssb4d.h"

/* Side of the built-in session's region refit for a scan side n: 256 from 512 up, n/2 from 64
 * up, 0 (no region refit: regions are at least 32x32) below. */
size_t ssb4d_plan_region_side(size_t n);
/* The calibration's frame block for a budget: 64 MiB (calibrate.c's default) when it fits
 * comfortably beside the encoded data, else a quarter of what is left (at least one frame).
 * Whole frames of det_pixels uint32 values, at most npos of them. */
size_t plan_calib_block(size_t budget, size_t encoded, size_t det_pixels, size_t npos);
#endif
