/* cli_session.h — a compute command's session (cli_session.c): the command line's values, the
 * data (DATA, or the built-in dataset), the session handle under --memory, one progress bar per
 * call, and a refusal by the budget worded the same by every command. fit, demo, reconstruct and
 * fit-regions parse, call this, call the handle, and print. */
#ifndef SSB4D_CLI_SESSION_H
#define SSB4D_CLI_SESSION_H
#include "cli/cli_common.h"
#include "cli/progress.h"

/* The built-in dataset: the `small` simulation (128² scan, 64² detector, SrTiO3, 300 kV) with
 * these aberrations at the entrance surface. */
#define BUILTIN_C10 12.0
#define BUILTIN_C12 3.0
#define BUILTIN_PHI12 35.0
#define BUILTIN_SEED 7

/* What the command will do, for the memory plan made at calibration. */
typedef struct {
    const char *data;             /* NULL: the built-in dataset (fit, demo) */
    cli_micro *m;
    const ssb4d_values *values;     /* already resolved by the command; NULL: cli_session_open's */
    const ssb4d_fit_params *fit;  /* NULL: no fit (reconstruct: one release instead) */
    int upsample;                 /* 0: automatic; cli_session_open writes the resolved one */
    const size_t *region;         /* the field: rows r0:r1, cols c0:c1 (fit --region); NULL: all */
    size_t image_floats;          /* floats per output pixel held to the end (phase 1; with the
                                     complex object 3) */
    size_t refit_region[2];       /* fit-regions: the largest region's rows x cols; 0: none */
    size_t block_bytes;           /* the G build's block (0: the plan's) */
    int ssb_path;                 /* ssb4d_path */
    int viewer;                   /* plan the viewer's session (drags, releases, FFT, a region,
                                     save: ssb4d_session_script_default) instead of one command */
    ssb4d_progress_fn progress;   /* the handle's progress (NULL: the command's bar) */
    void *progress_user;
} cli_session_req;

typedef struct {
    const char *cmd;
    ssb4d_session *s;
    ssb4d_values v;                 /* the resolved microscope values (flags over files) */
    void *builtin;                /* the built-in dataset's counts (NULL: DATA) */
    double truth[3];              /* its C10 (mean plane depth), C12, φ12; else NaN */
    size_t shape[4];
    size_t budget;
    int quiet;
    cli_progress pb;              /* the running call's bar (the handle's progress draws it) */
    ssb4d_session_script sc;      /* the plan's script (the handle reads it at calibration) */
} cli_session;

/* Resolves the values, opens the data under the budget and plans nothing yet (regions can be
 * checked with ssb4d_session_check_region before the long read). Returns 0 or the exit code
 * (message printed); cs is ready for cli_session_close either way. */
int cli_session_open(const char *cmd, cli_session_req *rq, cli_session *cs);
/* The simulation parameters of the built-in dataset (the small preset at BUILTIN_C10, C12, φ12,
 * seed BUILTIN_SEED), for a command that simulates it itself (ssb4d virtual). */
void cli_builtin_params(ssb4d_sim_params *sp, int threads);
/* Calibrates and plans (the "does not fit" refusal, exit 2, comes from here). 0 or exit code. */
int cli_session_calibrate(cli_session *cs);
/* A bar for the next call (label; none under -q or --json), and its elapsed seconds when done. */
void cli_session_bar(cli_session *cs, const char *label);
double cli_session_bar_done(cli_session *cs);
/* Exit code of a failed call: a refusal by the budget is exit 2 ("does not fit"); else
 * cli_error's. Prints one line. */
int cli_session_fail(const cli_session *cs, ssb4d_status st, const char *msg);
void cli_session_close(cli_session *cs);

/* The backend a session asked for `kind` (--backend) runs on: its name ("cpu", "cuda") in *name.
 * Returns 0, or prints one line "ssb4d CMD: <why>" and returns CLI_EXIT_USAGE when it cannot run
 * here (CUDA not in this build, or no GPU). cli_session_open checks this before any work (before
 * the built-in dataset is simulated); the session handle checks it again when opened. */
int cli_backend_check(const char *cmd, ssb4d_backend_kind kind, const char **name);
#endif
