/* fixture.c — the tests' shared set-ups (fixture.h). */
#define _XOPEN_SOURCE 700
#include "fixture.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fx_sim_params(fx_sim *d, int scan_n, int scan_cells)
{
    ssb4d_err err = {0};
    memset(d, 0, sizeof *d);
    if (ssb4d_sim_params_preset(&d->sp, "tiny", &err))
        goto fail;
    if (scan_n > 0)
        d->sp.scan_n = scan_n;
    if (scan_cells > 0)
        d->sp.scan_cells = scan_cells;
    if (ssb4d_sim_describe(&d->sp, &d->info, &err))
        goto fail;
    d->shape[0] = d->shape[1] = (size_t)d->sp.scan_n;
    d->shape[2] = d->shape[3] = (size_t)d->sp.det;
    return 0;
fail:
    fprintf(stderr, "fixture: %s\n", err.msg);
    return -1;
}

int fx_sim_memory(fx_sim *d, int scan_n, int scan_cells)
{
    if (fx_sim_params(d, scan_n, scan_cells))
        return -1;
    ssb4d_err err = {0};
    d->counts = malloc(d->shape[0] * d->shape[1] * d->shape[2] * d->shape[3] * sizeof *d->counts);
    if (!d->counts || ssb4d_simulate_to_memory(&d->sp, d->counts, NULL, NULL, NULL, &d->info, &err)) {
        fprintf(stderr, "fixture: simulate: %s\n", d->counts ? err.msg : "out of memory");
        fx_sim_free(d);
        return -1;
    }
    return 0;
}

int fx_sim_file(fx_sim *d, int scan_n, int scan_cells, const char *path)
{
    if (fx_sim_params(d, scan_n, scan_cells))
        return -1;
    ssb4d_err err = {0};
    if (ssb4d_simulate(&d->sp, path, 1, NULL, &d->info, &err)) {
        fprintf(stderr, "fixture: simulate %s: %s\n", path, err.msg);
        return -1;
    }
    return 0;
}

void fx_sim_free(fx_sim *d)
{
    free(d->counts);
    d->counts = NULL;
}

void fx_calib_params(const fx_sim *d, ssb4d_calib_params *c)
{
    ssb4d_calib_params_default(c);
    c->kv = d->sp.kv;
    c->semiangle_mrad = d->sp.semiangle_mrad;
    c->scan_step_A[0] = c->scan_step_A[1] = d->info.scan_step_A;
    c->det_sampling_mrad[0] = c->det_sampling_mrad[1] = d->info.det_sampling_mrad;
    c->rotation_deg = 0;
}

void fx_session_opts(const fx_sim *d, ssb4d_session_opts *o)
{
    ssb4d_session_opts_default(o);
    o->backend = SSB4D_BACKEND_CPU; /* the CPU's bits, on a GPU machine too */
    fx_calib_params(d, &o->calib);
}

int fx_tmpdir(char *dir, size_t n, const char *name)
{
    if (snprintf(dir, n, "/tmp/ssb4d-%s-XXXXXX", name) >= (int)n || !mkdtemp(dir)) {
        fprintf(stderr, "fixture: could not make a temporary folder for %s\n", name);
        return -1;
    }
    return 0;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int fx_tmpdir_remove(const char *dir)
{
    if (nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS)) {
        fprintf(stderr, "fixture: could not remove %s\n", dir);
        return -1;
    }
    return 0;
}
