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

/* The BF disk's edge radius fitted with a model of its profile (edge.c, SPEC §4): pixels of the
 * mean pattern (det rows dr x cols dc; isflag may be NULL) within a few px of the guess r0 about
 * the centre (cr, cc). Returns 0 with out filled, -1 when there are too few edge pixels (a disk
 * mostly off the detector, r0 <= 2 px). */
typedef struct {
    double radius_px; /* R_edge: where the aperture's amplitude is 1/2 (SPEC 5.2) */
    double sigma_px;  /* its standard error (spread of the per-sector radii; NaN: too few sectors) */
    double blur_px;   /* the fitted Gaussian blur of the edge */
    int model;        /* S x S sub-samples of a ramp u px wide: 0 S = 1, u = 1 (point-sampled);
                         1 S = 3, u = 1/3; 2 S = 5, u = 1/5; 3 S = 6, u = 0 (area-integrated, hard) */
    double rss[4];    /* each model's residual sum of squares (HUGE_VAL, radius_m NaN: not fitted, another stated) */
    double radius_m[4]; /* each model's R at its best blur (the point-sampled one even where it
                           may not win); R_m − u_m/6 is the flux-equivalent hard edge, the same
                           for every model (docs/calibrate.md, the sampling study) */
    size_t n_pixels;
    int n_sectors;    /* sectors used */
    int n_dropped;    /* sectors left out: something else has an edge there */
} ssb_cal_edge;
/* stated: the pixel model to fit alone (0..3, ssb_cal_edge_model_of_S), or -1: all four compete. */
int ssb_cal_fit_edge(const double *mean, const unsigned char *isflag, size_t dr, size_t dc, double cr, double cc,
                     double r0, int stated, ssb_cal_edge *out);
/* The edge model (0..3) for S x S point samples per pixel (the simulator's det_oversample):
 * 1, 3, 5 their own; larger S the area-integrated one; -1 for S <= 0 (not stated). */
int ssb_cal_edge_model_of_S(int S);
/* The edge profile E(x) = E[clamp((x + σZ)/u + 1/2, 0, 1)²] (x px inside the edge; u = 0: a step). */
double ssb_cal_edge_profile(double x, double u, double sigma);

/* ssb4d_calibrate's tracked buffers (common/workspace.h) for frames of fr pixels at npos scan
 * positions and a frame block of block_bytes (0: the default): the block of frames, and when the
 * rotation is fitted the per-frame moments, then the CoM field; all three live to the end. */
typedef struct {
    size_t frames;        /* frames per block */
    size_t buf, mom, com; /* bytes; mom and com 0 unless the rotation is fitted */
} calibrate_ws;
calibrate_ws calibrate_ws_sizes(size_t fr, size_t npos, size_t block_bytes, int fit_rotation);
void calibrate_workspace(const calibrate_ws *w, ws_sink *out);
/* Where pass 1's integer sums come from when not from the frames (the GPU's decoder,
 * src/cuda/gstart.c): totals(tot, mom) fills the per-pixel totals (P values) and, when mom is not
 * NULL, the per-scan moments (both zeroed by the caller: a filler may add into them) Σ I, Σ row·I, Σ col·I (3 per scan position);
 * unflag takes the flagged pixels' counts out of those moments (pass 2). Integers: the numbers
 * the frames give, so the calibration is bit for bit the CPU's. Counts only (not float data). */
typedef struct {
    ssb4d_status (*totals)(void *user, uint64_t *tot, uint64_t *mom, ssb4d_err *err);
    ssb4d_status (*unflag)(void *user, const int32_t *pix, size_t n, uint64_t *mom, ssb4d_err *err);
    void *user;
} ssb_cal_sums;
/* ssb4d_calibrate with passes 1 and 2's sums from `sums` (NULL: from the frames). */
ssb4d_status ssb_calibrate_with_sums(ssb4d_source *src, const ssb4d_calib_params *p, const ssb_cal_sums *sums,
                                     ssb4d_calibration *out, ssb4d_err *err);
#endif
