/* tilt.h — the thick-sample (tilt) fit of SPEC §6.2 on a built G: a thin baseline of (C10, C12, φ12)
 * on the band objective of SPEC §5.6, then a joint search over (C10, C12, φ12, tilt_row, tilt_col,
 * thickness), then Nelder–Mead from the best distinct trials (docs/tilt.md). The objective is
 * ssb4d_band_fit (larger is better); the search minimises −fit/power, power = ssb4d_band_power
 * (so the loss lies in [−1, 0] and the Nelder–Mead tolerances have a fixed meaning). */
#ifndef SSB4D_FIT_TILT_H
#define SSB4D_FIT_TILT_H
#include "fit/fit.h"
#include "fit/search.h"
#include "ssb4d_advanced.h"

/* Parameters of the joint search, in this order. */
enum { TILT_C10 = 0, TILT_C12 = 1, TILT_PHI12 = 2, TILT_ROW = 3, TILT_COL = 4, TILT_T = 5, TILT_NP = 6 };
/* Stages of the two traces: thin baseline (global, Nelder–Mead), joint (global, Nelder–Mead). */
enum { TILT_STAGE_THIN_GLOBAL = 0, TILT_STAGE_THIN_NM = 1, TILT_STAGE_GLOBAL = 2, TILT_STAGE_NM = 3 };

typedef struct {
    /* Thin baseline: box, start, lock, trials, batch, seed and Nelder–Mead of (C10, C12, φ12);
     * base holds every other aberration (kept fixed). ssb/work are not used. The joint search
     * uses the same box for the aberrations, the same batch and seed. */
    fit_thin_params thin;
    double tilt_max_mrad;                   /* tilt box ±25 mrad on both axes */
    double thickness_lo_nm, thickness_hi_nm; /* 2–60 nm */
    /* The joint search's aberration box: the thin baseline ± these spans, clipped to thin's box
     * (a 6-D quasi-random search over the whole thin box would put ~2 candidates per axis). */
    double c10_span_nm, c12_span_nm, phi12_span_deg;
    size_t trials;                          /* joint global candidates */
    size_t nm_starts;                       /* Nelder–Mead runs from the best distinct trials (3) */
    fit_nm_opts nm;                         /* joint Nelder–Mead (steps in TILT_* order) */
    ssb4d_band_opts band;
    /* Held thick parameters (a thickness known from elsewhere, a tilt from the diffraction
     * pattern, or the truth in the study's objective comparison): thick_locked[k] holds tilt
     * row (0), tilt col (1) or thickness (2) at thick_given's value (rounded to float32, as every
     * evaluated point), which must lie in the boxes above. With the thickness held the joint
     * result is reported even where the thin baseline explains more of the band (the model was
     * asked for). */
    int thick_locked[3];
    ssb4d_thick thick_given;
} fit_tilt_params;

/* Defaults (SPEC §6.2; the numbers are measured, see tilt.c). */
void fit_tilt_params_default(fit_tilt_params *p);

typedef struct {
    double C10_nm, C12_nm, phi12_deg;  /* at mid-depth */
    ssb4d_thick thick;
    double fit;            /* band objective at the result (fraction·power: ssb4d_band_fit
                              at that point up to rounding) */
    double fit_standard;   /* ... of the thin baseline (thickness 0) */
    double gain;           /* fit / fit_standard (>= 1) */
    double fraction;       /* fit / band power, in [0, 1] */
    double thin[3];        /* the thin baseline (C10 nm, C12 nm, φ12 deg) */
    int thin_kept;         /* 1: no thick point beat the baseline; the result is the baseline */
    size_t evaluations;    /* band-objective evaluations of both stages */
    size_t trials;         /* trials of both traces */
    int nm_runs;           /* joint Nelder–Mead runs made (<= nm_starts) */
    int nm_iterations[16]; /* iterations of each run (max_iter: it stopped on the cap) */
    char trace_sha256[65]; /* SHA-256 over the two traces' hashes (thin, then joint) */
} fit_tilt_result;

/* Fits. states (may be NULL) receives the two traces {thin, joint} for the caller to write out
 * and free with fit_state_free; their x are (C10, C12, φ12) and TILT_* order respectively. */
ssb4d_status fit_tilt(const ssb4d_G *G, const ssb4d_geometry *g, const fit_tilt_params *p,
                      ssb4d_mem *mem, fit_tilt_result *r, fit_state *states[2], ssb4d_err *err);
#endif
