/* refine_case.h — a small simulated acquisition, calibrated as the command line would, with its
 * truth at the mid-plane: the cases of tests/test_refine.c and tests/test_refine_recovery.c. */
#ifndef SSB4D_TESTS_REFINE_CASE_H
#define SSB4D_TESTS_REFINE_CASE_H
#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    fx_sim sim;
    ssb4d_source *src;
    ssb4d_calibration cal;
    ssb4d_aberrations truth_mid; /* C10 at the mid-plane */
    double t_nm;
} rcase;

/* A scan x scan simulation (fx_sim_params(scan, 3)) of cells_z cells, beam tilt (tilt0, tilt1)
 * mrad, dose 5e4; 0 or -1 (printed). */
static int rcase_make(rcase *c, int scan, int cells_z, double tilt0, double tilt1)
{
    memset(c, 0, sizeof *c);
    if (fx_sim_params(&c->sim, scan, 3))
        return -1;
    c->sim.sp.cells_z = cells_z;
    c->sim.sp.tilt_mrad[0] = tilt0, c->sim.sp.tilt_mrad[1] = tilt1;
    c->sim.sp.dose = 5e4;
    ssb4d_err err = {0};
    if (ssb4d_sim_describe(&c->sim.sp, &c->sim.info, &err))
        return -1;
    size_t n = c->sim.shape[0] * c->sim.shape[1] * c->sim.shape[2] * c->sim.shape[3];
    c->sim.counts = malloc(n * sizeof(uint16_t));
    if (ssb4d_simulate_to_memory(&c->sim.sp, c->sim.counts, NULL, NULL, NULL, &c->sim.info, &err) ||
        ssb4d_source_from_memory(c->sim.counts, SSB4D_U16, c->sim.shape, &c->src, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    ssb4d_calib_params cp;
    fx_calib_params(&c->sim, &cp);
    if (ssb4d_calibrate(c->src, &cp, &c->cal, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    c->t_nm = c->sim.info.thickness_nm;
    c->truth_mid = c->sim.sp.ab;
    c->truth_mid.C_nm[SSB4D_C10] += c->t_nm / 2;
    return 0;
}

static void rcase_free(rcase *c)
{
    ssb4d_source_close(c->src);
    ssb4d_calibration_free(&c->cal);
    fx_sim_free(&c->sim);
}

#endif
