/* fit.h — the standard thin-specimen fit of (C10, C12, φ12) on a built G (SPEC §6.1): the
 * seeded global search, then Nelder–Mead from its best trial, with the exact SSB loss as the
 * objective. Other aberration coefficients stay at the values given in `base`. */
#ifndef SSB4D_FIT_FIT_H
#define SSB4D_FIT_FIT_H
#include "common/workspace.h"
#include "fit/search.h"
#include "ssb4d_advanced.h"

enum { FIT_C10 = 0, FIT_C12 = 1, FIT_PHI12 = 2, FIT_ROT = 3 };
/* Stages of the trace: the global search and Nelder–Mead on the coarse BF subset, Nelder–Mead
 * on all fit pixels, and Nelder–Mead on the other 180° branch. */
enum { FIT_STAGE_GLOBAL = 0, FIT_STAGE_NM = 1, FIT_STAGE_NM_FULL = 2, FIT_STAGE_BRANCH = 3 };

typedef struct {
    /* The box: C10 nm, C12 nm, φ12 deg (φ12 wraps with period 180°) and, when fit_rotation,
     * the scan–detector rotation in degrees; φ12 is then in the probe frame (φ12 − rotation), so
     * that turning the rotation does not turn the astigmatism with it. */
    double lo[4], hi[4];
    double start[4];
    int locked[4];
    int fit_rotation;        /* 1: the rotation is the fourth parameter (g's rotation is ignored) */
    size_t trials;           /* global candidates (default 200) */
    size_t batch;            /* candidates per batch (default 8) */
    uint64_t seed;           /* default 42 */
    fit_nm_opts nm;
    ssb4d_aberrations base;  /* every other coefficient */
    ssb4d_ssb_opts ssb;
    int objective;           /* SSB4D_FIT_OBJ_LOSS (the exact loss) or SSB4D_FIT_OBJ_BAND */
    ssb4d_band_opts band;    /* the band objective's band and threads */
    double band_power;       /* its normalisation (ssb4d_band_power on the same G); 0: computed */
    int stage_base;          /* trials are recorded as stage_base (global), stage_base + 1 (NM) */
    /* Candidates evaluated (as one batch series, stage_base) before the global search; with
     * no_nm the fit stops there and returns the best of them. */
    const double *seeds;     /* n_seeds points of n_params values */
    size_t n_seeds;
    int no_nm;
    /* Called after every batch with the work done (candidates × BF pixels); may be NULL. */
    void (*work)(void *user, double units);
    void *work_user;
} fit_thin_params;

/* SPEC §6.1 defaults: box C10 ±40, C12 0–10, φ12 ±90; start (0, 5, 0); nothing locked.
 * trials = 0 skips the global search (Nelder–Mead from start). */
void fit_thin_params_default(fit_thin_params *p);

typedef struct {
    double x[4];             /* fitted C10 nm, C12 nm, φ12 deg (and the rotation, deg) */
    double loss;
    size_t evaluations, trials;
    int nm_iterations;
    char trace_sha256[65];
} fit_thin_result;

/* Fits; *state (may be NULL) receives the trace for the caller to write out and free. */
ssb4d_status fit_thin(const ssb4d_G *G, const ssb4d_geometry *g, const fit_thin_params *p,
                      ssb4d_mem *mem, fit_thin_result *r, fit_state **state, ssb4d_err *err);

/* The objective at n points x (n_params values each, as fit_thin sees them) on G, with no trace
 * or cache: −fit/power of the band objective (power: p->band_power, or G's when 0) or the exact
 * loss. */
ssb4d_status fit_thin_eval(const ssb4d_G *G, const ssb4d_geometry *g, const fit_thin_params *p, const double *x,
                           size_t n, ssb4d_mem *mem, double *loss, ssb4d_err *err);

/* Standard errors of the fit point x (p's parameters: C10 nm, C12 nm, φ12 deg and, with
 * p->fit_rotation, the rotation deg) on the fit pixels F (uncertainty.c): the optima of
 * FIT_SE_GROUPS disjoint groups of F's pixels (the inner and outer half of the disk, each dealt
 * into four), each one Newton step from x. se: the spread within the halves over √groups (the
 * noise); split: inner half's mean − outer half's (a model check). φ12's are in the scan frame
 * (g's handedness). NaN for a held parameter, INFINITY when the groups' mean curvature has no
 * minimum near x. *n_evals receives the evaluations (point × group). */
#define FIT_SE_GROUPS 8
/* Its free coordinates: C10, the astigmatism (two when C12 and φ12 are free, one when φ12 is held,
 * none when C12 is) and the rotation; the Newton design's points for d of them. */
int fit_se_dims(const int locked[3], int fit_rotation);
static inline size_t fit_se_points(int d) { return 1 + 2 * (size_t)d + (size_t)d * (size_t)(d - 1) / 2; }
/* The pixels of group k of n_fit: the nearer half (⌊n/2⌋) dealt into groups 0–3, the farther into
 * 4–7, each in BF order. */
static inline size_t fit_se_group_bf(size_t n_fit, size_t k)
{
    size_t half = k < FIT_SE_GROUPS / 2 ? n_fit / 2 : n_fit - n_fit / 2, j = k % (FIT_SE_GROUPS / 2);
    return (half + FIT_SE_GROUPS / 2 - 1 - j) / (FIT_SE_GROUPS / 2);
}
ssb4d_status fit_uncertainty(const ssb4d_G *F, const ssb4d_geometry *g, const fit_thin_params *p, const double x[4],
                             ssb4d_mem *mem, double se[4], double split[4], size_t *n_evals, ssb4d_err *err);

/* φ12 between the probe (detector) and the scan frame at rotation rot (SPEC §2): φ_scan =
 * φ_probe + rot; with a mirrored detector (flip: axes swapped before the rotation) φ_scan =
 * 90° + rot − φ_probe, which is its own inverse. Not wrapped. */
static inline double fit_phi_probe_to_scan(int flip, double phi, double rot) { return flip ? 90.0 + rot - phi : phi + rot; }
static inline double fit_phi_scan_to_probe(int flip, double phi, double rot) { return flip ? 90.0 + rot - phi : phi - rot; }

/* The aberrations of a fit point (base with C10, C12, φ12 replaced; φ12 in the scan frame; with
 * p->fit_rotation x's φ12 is in the probe frame of a detector of handedness flip). */
void fit_thin_aberrations(const fit_thin_params *p, int flip, const double *x, ssb4d_aberrations *ab);
void fit_point_aberrations(const ssb4d_aberrations *base, const double x[3], ssb4d_aberrations *ab);

/* SSB4D_EINVAL, naming the parameter, unless lo[j] <= start[j] <= hi[j] for C10, C12, φ12. */
ssb4d_status fit_check_start(const double lo[3], const double hi[3], const double start[3],
                             ssb4d_err *err);
/* BF indices (into bf_pix) within fraction × (distance of the farthest BF pixel from g's centre)
 * of the centre: the standard fit's pixels (idx may be NULL to count them). */
size_t fit_pixels_of(const int32_t *bf_pix, size_t n_bf, size_t det_cols, const ssb4d_geometry *g,
                     double fraction, size_t *idx);

/* ---- workspace (common/workspace.h; workspace.c) ---- */

/* The branch check's phase image on an ny x nx scan. */
size_t fit_branch_phase_bytes(size_t ny, size_t nx);

/* ssb4d_fit as far as memory goes, on an ny x nx scan: the parallax estimate, the coarse and the
 * full stages of the band or loss search, the branch check and the exact loss on all BF pixels. */
typedef struct {
    size_t ny, nx, n_bf, n_fit, n_coarse; /* BF pixels: all, within the fit radius, the coarse subset */
    int threads;                          /* resolved */
    size_t band_nb, band_nr, band_nc;     /* the band objective's bins, rows and columns (band_bins) */
    int parallax_runs;                    /* the parallax estimate reads G (8 or more stored pixels) */
    size_t parallax_nb;                   /* its bins (parallax_bins_of) */
    size_t batch, trials;                 /* global candidates in batches of batch */
    int d;                                /* Nelder–Mead's free parameters */
    int fit_rotation;                     /* the rotation is searched: a k table per distinct rotation */
    int band;                             /* the band objective (else the exact loss) */
    int branch_check;
    /* The start's seeds (standard.c start_seeds: the parallax estimate and its alternatives, at
     * each rotation of a scan), evaluated on the coarse subset before the global search in batches
     * of batch; 0: none (a given start, a locked parameter, no parallax). Their count is known only
     * once the parallax has run: a planner states what it expects. */
    size_t n_seeds;
    int se_d;                             /* the standard errors' free coordinates (fit_se_dims) */
} fit_ws_shape;
/* Passes over the coarse and full fit views come as ws_pass(out, n_fit): both lie within the fit
 * radius, so within its n_fit innermost pixels; the others as ws_pass(out, 0). */
void fit_workspace(const fit_ws_shape *s, ws_sink *out);
#endif
