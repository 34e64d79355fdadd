/* solver.h — the staged optimisation of the refinement (solver.c, docs/refine.md "Solver"). */
#ifndef SSB4D_REFINE_SOLVER_H
#define SSB4D_REFINE_SOLVER_H
#include "refine/refine.h"

/* Output object pixels lit with less than this fraction of the most-lit pixel's electrons are 0
 * (the data do not constrain them; docs/refine.md "Outputs"). */
#define REFINE_LIT 0.1f

typedef struct {
    const refine_data *d;
    refine_geo geo;
    int ns;
    double th[RP_N];          /* in: the start; out: the refined */
    double dz_range[2];       /* Δz bounds (Å) */
    int iterations;
    int active[RP_N];         /* parameters the stages may refine */
    double step_A[2];         /* scan step (row, col), Å */
    size_t scan_cols;         /* positions per region row */
    size_t batch;
    int threads;
    int amplitude;
    uint64_t seed;
    double lr;                /* Adam's step on the object phase (rad); 0: default */
    double kappa;             /* the slices' similarity weight (0: none) */
    ssb4d_mem *mem;
    refine_accel *accel;      /* the minibatch on a device (batch.c); NULL: the CPU's threads */
    double prog[2];           /* the share of the call's progress this solve reports: [from, to);
                                 {0, 0}: all of it */
} refine_problem;

typedef struct {
    size_t Or, Oc;            /* object grid */
    double dx[2];             /* its pixel (Å) */
    float *phase;             /* ns × Or × Oc */
    double *history;          /* per pass: deviance per position */
    size_t n_history;
    double dev, dev_expected; /* final deviance per position and its expectation */
    double grad[RP_N];        /* the final gradient of the loss (per position) */
    double curv[RP_N];        /* the curvature along each refined parameter (finite differences
                                 of the loss, per position; NaN where not measured) */
    double last_change;       /* relative loss change over the last pass */
    float *probe;             /* grid complex, real space */
} refine_solution;

ssb4d_status refine_solve(refine_problem *pb, refine_solution *out, ssb4d_err *err);
void refine_solution_free(refine_solution *s);
/* The object grid of a problem (rows, cols) and its pixel. */
void refine_object_grid(const refine_problem *pb, size_t grid[2], double dx[2]);

#endif
