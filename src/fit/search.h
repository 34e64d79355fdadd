/* search.h — the deterministic optimisers behind `ssb4d fit` (SPEC §6.1), independent of SSB:
 * a seeded quasi-random global search evaluated in batches, and Nelder–Mead refinement, both
 * over a box with lockable and periodic parameters, sharing one evaluation cache and one trial
 * trace. The objective is a callback that evaluates a whole batch of candidates at once, so the
 * caller can share each read of G between the candidates of a batch.
 *
 * Determinism: candidates depend only on the seed and the box; the cache is keyed on the float32
 * values of the parameters (what the SSB kernels see), so the trace is the same whatever the
 * thread count or batch timing. */
#ifndef SSB4D_FIT_SEARCH_H
#define SSB4D_FIT_SEARCH_H
#include "ssb4d_advanced.h"

#include <stddef.h>
#include <stdint.h>

#define FIT_MAX_PARAMS 8

/* Evaluates n candidates x[i * n_params .. + n_params) and writes loss[i]. Returns SSB4D_OK or an
 * error (which stops the search). */
typedef ssb4d_status (*fit_batch_fn)(void *user, const double *x, size_t n, double *loss,
                                     ssb4d_err *err);

typedef struct {
    int n_params;
    double lo[FIT_MAX_PARAMS], hi[FIT_MAX_PARAMS]; /* the box */
    double period[FIT_MAX_PARAMS]; /* > 0: periodic (values wrap into [lo, lo + period)) */
    int locked[FIT_MAX_PARAMS];    /* 1: held at start[] */
    double start[FIT_MAX_PARAMS];
    fit_batch_fn eval;
    void *user;
} fit_problem;

typedef struct {
    int stage;      /* caller-chosen stage id (e.g. 0 global, 1 Nelder–Mead, ...) */
    size_t number;  /* 0, 1, ... over the whole trace */
    double x[FIT_MAX_PARAMS];
    double loss;
    int cached;     /* 1: the value came from the cache (no evaluation) */
} fit_trial;

/* Trace and cache of one fit. */
typedef struct fit_state fit_state;

fit_state *fit_state_new(const fit_problem *p);
void fit_state_free(fit_state *s);
/* Trials so far (owned by s). */
const fit_trial *fit_trials(const fit_state *s, size_t *n);
/* Number of objective evaluations actually made (cache misses). */
size_t fit_evaluations(const fit_state *s);
/* Best trial so far (NULL before the first). */
const fit_trial *fit_best(const fit_state *s);
/* SHA-256 (hex) of the trace: every trial's stage, parameters and loss, in order. */
void fit_trace_sha256(const fit_state *s, char hex[65]);

/* Evaluates candidates (n_params each, in order), through the cache, as one batch; the trials
 * are recorded with `stage`. Locked parameters are forced to start[], periodic ones wrapped,
 * others clamped to the box. loss may be NULL. */
ssb4d_status fit_eval_batch(fit_state *s, int stage, const double *x, size_t n, double *loss,
                            ssb4d_err *err);

/* Global search: n_candidates quasi-random points (a Kronecker sequence over the free
 * parameters, shifted by a seed-derived offset), evaluated in batches of `batch`. The start
 * point is candidate 0. */
ssb4d_status fit_global(fit_state *s, int stage, size_t n_candidates, size_t batch, uint64_t seed,
                        ssb4d_err *err);

typedef struct {
    double step[FIT_MAX_PARAMS]; /* initial simplex step per parameter */
    double xtol;                 /* stop when every vertex is within xtol·xscale[j] of the best ... */
    double xscale[FIT_MAX_PARAMS]; /* per-parameter scale of xtol (default 1) */
    double ftol;                 /* ... and every loss within ftol of the best */
    int max_iter;
} fit_nm_opts;

/* SPEC §6.1 defaults: steps (2 nm, 0.5 nm, 5°) for (C10, C12, φ12) and 1 elsewhere, xtol 0.01,
 * ftol 3e-6, 80 iterations. */
void fit_nm_opts_default(fit_nm_opts *o);

/* Nelder–Mead from x0 over the free parameters; *iterations receives the iterations done (may be
 * NULL). The best point is fit_best(s) afterwards. */
ssb4d_status fit_nelder_mead(fit_state *s, int stage, const double *x0, const fit_nm_opts *o,
                             int *iterations, ssb4d_err *err);
#endif
