/* progress.c — progress bar: label, bar, percentage, elapsed and ETA; redrawn at most 10×/s. */
#include "cli/progress.h"
#include "ssb4d_advanced.h"

#include <stdio.h>
#include <unistd.h>

void cli_progress_start(cli_progress *p, const char *label, int quiet)
{
    p->label = label;
    p->enabled = !quiet && isatty(2);
    clock_gettime(CLOCK_MONOTONIC, &p->t0);
    p->last_print = -1;
    p->total = 0;
    p->unit = NULL;
}

void cli_progress_set_rate(cli_progress *p, double total, const char *unit)
{
    p->total = total;
    p->unit = unit;
}

double cli_progress_elapsed(const cli_progress *p)
{
    return ssb4d_clock_s() - ((double)p->t0.tv_sec + 1e-9 * (double)p->t0.tv_nsec);
}

void cli_progress_update(void *vp, double fraction)
{
    cli_progress *p = vp;
    if (!p || !p->enabled)
        return;
    double el = cli_progress_elapsed(p);
    if (fraction < 1.0 && el - p->last_print < 0.1)
        return;
    p->last_print = el;
    int width = 30, fill = (int)(fraction * width + 0.5);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '-';
    bar[width] = 0;
    double eta = fraction > 0.001 ? el * (1.0 - fraction) / fraction : 0.0;
    fprintf(stderr, "\r%-14s [%s] %5.1f%%  %6.1fs  ETA %6.1fs", p->label, bar, 100.0 * fraction, el, eta);
    if (p->total > 0 && el > 0)
        fprintf(stderr, "  %7.1f %s/s", fraction * p->total / el, p->unit ? p->unit : "");
    fflush(stderr);
}

void cli_progress_done(cli_progress *p)
{
    if (p->enabled) {
        cli_progress_update(p, 1.0);
        fputc('\n', stderr);
    }
}

int cli_progress_cb(void *p, const char *stage, double fraction)
{
    (void)stage;
    cli_progress_update(p, fraction);
    return 0;
}
