/* fixture.h — the set-ups the tests share (tests/fixture.c, linked into every tests/test_*.c):
 * the tiny simulated dataset in memory or in a .qem file, the calibration and session options
 * that match it, and temporary folders. Helpers return 0 on success; on failure they print the
 * reason to stderr and return -1, so they serve cmocka's group set-ups as well as test bodies. */
#ifndef SSB4D_TEST_FIXTURE_H
#define SSB4D_TEST_FIXTURE_H
#include <stddef.h>
#include <stdint.h>

#include "ssb4d_advanced.h"

/* The "tiny" preset's crystal (48x48 detector) on a scan_n x scan_n scan of scan_cells cells. */
typedef struct {
    ssb4d_sim_params sp;
    ssb4d_sim_info info;
    size_t shape[4];
    uint16_t *counts; /* fx_sim_memory: the counts, shape[0..3], C order; else NULL */
} fx_sim;

/* The tiny preset with the scan size (0: the preset's); d->counts stays NULL. */
int fx_sim_params(fx_sim *d, int scan_n, int scan_cells);
/* ... and simulated into memory (d->counts, freed by fx_sim_free). */
int fx_sim_memory(fx_sim *d, int scan_n, int scan_cells);
/* ... or written to `path` (a .qem, encoded), d->info filled. */
int fx_sim_file(fx_sim *d, int scan_n, int scan_cells, const char *path);
void fx_sim_free(fx_sim *d);

/* The microscope of d's simulation: kv, semiangle, scan step, detector sampling, rotation 0. */
void fx_calib_params(const fx_sim *d, ssb4d_calib_params *c);
/* Session options on the CPU backend (the bits the tests compare) with fx_calib_params. */
void fx_session_opts(const fx_sim *d, ssb4d_session_opts *o);

/* A new folder /tmp/ssb4d-<name>-XXXXXX into dir (n bytes), and its removal with what it holds. */
int fx_tmpdir(char *dir, size_t n, const char *name);
int fx_tmpdir_remove(const char *dir);
#endif
