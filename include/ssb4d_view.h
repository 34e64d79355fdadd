/* ssb4d_view.h — `ssb4d view`'s server (src/view/, the static library ssb4d_view beside
 * libssb4d): one session handle steered from a browser page. Its entry points, for the command
 * line (src/cli/cmd_view.c), which reaches the viewer only through this header.
 * The command line opens the session (its values, DATA or the built-in dataset), creates the
 * server first so that the session's progress callback can report into it, then serves until
 * SIGINT/SIGTERM. Nothing here is global: every piece of state lives in the view_server. */
#ifndef SSB4D_VIEW_H
#define SSB4D_VIEW_H
#include "ssb4d_advanced.h"

#include <stdio.h>

typedef struct view_server view_server;

typedef struct {
    int port;                   /* 0: an ephemeral port */
    int quiet;                  /* no notes on stderr */
    int fit_on_start;           /* 0: --no-fit or a calibration file's aberrations */
    const ssb4d_aberrations *ab; /* the start values when not fitting (NULL: zero) */
    const ssb4d_thick *thick;   /* NULL: thin */
    const char *calibration;    /* the calibration file the values came from (NULL: none): when
                                   not fitting, the fit it records is shown as the fit */
    const char *data_name;      /* what the page shows as the dataset's name */
    const char *save_dir;       /* the output folder (absolute): Save writes only inside it */
    int force;                  /* --force: Save calibration may replace an existing file */
    const char *base_url;       /* "" or "/prefix" (no trailing slash): every route under it */
    const char *const *allow_hosts; /* n_allow_hosts more Host names (a proxy's), besides
                                       127.0.0.1 and localhost; with or without :port */
    int n_allow_hosts;
    const ssb4d_aberrations *truth; /* the built-in dataset's true aberrations (NULL: unknown) */
    FILE *url_out;              /* where the URL line goes (stdout) */
    /* A distributed session (mpirun, docs/scale.md; NULL: none): rank 0 serves and sends every
     * job to the other ranks, which run it on their share (view_follow). Jobs are not cancelled
     * midway then: a newer preview waits for the running one instead. */
    const ssb4d_dist *dist;
} view_config;

/* The server and its token; nothing listens yet. NULL with err filled on failure. */
view_server *view_create(const view_config *cfg, ssb4d_err *err);
/* The configuration, to finish before view_serve (the start values are known once the session's
 * values are resolved, after the server exists for the progress callback). */
view_config *view_cfg(view_server *v);
/* The progress callback to give the session (user = the view_server): the worker's job's stage
 * and fraction, shown by GET /api/state. */
int view_progress(void *user, const char *stage, double fraction);
/* Serves s until SIGINT or SIGTERM (blocked in the calling thread, read through a signalfd):
 * binds 127.0.0.1:port, prints the URL, starts the worker (which calibrates, and fits unless
 * told not to), then stops everything cleanly. The caller must block SIGINT/SIGTERM
 * (view_block_signals) before creating any thread. Returns 0, or the SSB4D status that kept it
 * from serving (err says why). */
int view_serve(view_server *v, ssb4d_session *s, ssb4d_err *err);
/* A rank other than 0 of a distributed viewer: runs s through the same jobs as rank 0, in the
 * same order, until rank 0 stops; writes nothing. Returns 0 or the status that stopped it. */
int view_follow(view_server *v, ssb4d_session *s, ssb4d_err *err);
/* Blocks SIGINT and SIGTERM in the calling thread (and the threads it will create). */
int view_block_signals(void);
void view_destroy(view_server *v);
#endif
