/* calibrate_internal.h — pieces of the calibration stage exposed for tests (SPEC §4). */
#ifndef SSB4D_CALIBRATE_INTERNAL_H
#define SSB4D_CALIBRATE_INTERNAL_H
#include "common/workspace.h"
#include "ssb4d_advanced.h"

/* Scan-detector rotation from a centre-of-mass field com[(i*nx + j)*2 + {0,1}] = (det_row,
 * det_col) components in any angular unit (both axes in the same unit). Each vector d is taken
 * into the scan frame by k = R(θ)·d, R(θ) = [[cos θ, −sin θ], [sin θ, cos θ]] (SPEC §5.1 with
 * a = −θ), and θ minimises S(θ) = Σ (∂k_col/∂row − ∂k_row/∂col)² over interior scan points
 * (central differences, steps step_A, NULL = 1). S is exactly (a+c)/2 + (a−c)/2·cos 2θ + b·sin 2θ,
 * so its minimum is found in closed form (a 1° grid cross-checks it). Reports θ in [−90, 90) and
 * ratio = S(θ_min) / S(θ_max), and (sigma_deg, may be NULL) a delete-one-block jackknife
 * standard error of θ over 4x4 blocks of the scan. Derivatives: order-2 central differences
 * (SSB4D_CURL_STENCIL_HALF = 1; 2 and 3 give orders 4 and 6: less bias near the scan Nyquist,
 * more noise). Fails (SSB4D_ENOTFOUND) on a scan under 3×3 or a field without
 * any variation. Serial, fixed order: bit-reproducible. */
ssb4d_status ssb_cal_rotation_from_com(const double *com, size_t ny, size_t nx,
                                       const double step_A[2], double *theta_deg,
                                       double *curl_ratio, double *sigma_deg, ssb4d_err *err);

/* S(θ) of the same field at θ (degrees); for tests and the grid cross-check. */
double ssb_cal_curl_sumsq(const double *com, size_t ny, size_t nx, const double step_A[2],
                          double theta_deg);

/* ssb4d_calibrate's tracked buffers (common/workspace.h) for frames of fr pixels at npos scan
 * positions and a frame block of block_bytes (0: the default): the block of frames, and when the
 * rotation is fitted the per-frame moments, then the CoM field; all three live to the end. */
typedef struct {
    size_t frames;        /* frames per block */
    size_t buf, mom, com; /* bytes; mom and com 0 unless the rotation is fitted */
} calibrate_ws;
calibrate_ws calibrate_ws_sizes(size_t fr, size_t npos, size_t block_bytes, int fit_rotation);
void calibrate_workspace(const calibrate_ws *w, ws_sink *out);
#endif
