/* progress.h — a one-line progress bar with rate and ETA on stderr (only when it is a terminal). */
#ifndef SSB4D_CLI_PROGRESS_H
#define SSB4D_CLI_PROGRESS_H
#include <time.h>

typedef struct {
    const char *label;
    int enabled;
    struct timespec t0;
    double last_print;
} cli_progress;

void cli_progress_start(cli_progress *p, const char *label, int quiet);
/* Callback shape used by the library (fraction in [0, 1]). */
void cli_progress_update(void *p, double fraction);
void cli_progress_done(cli_progress *p);
/* Seconds since start. */
double cli_progress_elapsed(const cli_progress *p);
#endif
