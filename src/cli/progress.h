/* progress.h — a one-line progress bar with rate and ETA on stderr (only when it is a terminal). */
#ifndef SSB4D_CLI_PROGRESS_H
#define SSB4D_CLI_PROGRESS_H
#include <time.h>

typedef struct {
    const char *label;
    int enabled;
    struct timespec t0;
    double last_print;
    double total;       /* > 0: also print the rate in `unit`s per second */
    const char *unit;
} cli_progress;

void cli_progress_start(cli_progress *p, const char *label, int quiet);
/* Prints a rate: `total` units (e.g. MB of input) correspond to fraction 1. */
void cli_progress_set_rate(cli_progress *p, double total, const char *unit);
/* Callback shape used by the library (fraction in [0, 1]). */
void cli_progress_update(void *p, double fraction);
/* The library's progress callback (ssb4d_progress_fn) drawing bar p; never cancels. */
int cli_progress_cb(void *p, const char *stage, double fraction);
void cli_progress_done(cli_progress *p);
/* Seconds since start. */
double cli_progress_elapsed(const cli_progress *p);
#endif
