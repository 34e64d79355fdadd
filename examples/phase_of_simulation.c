/*
 * phase_of_simulation.c — libssb4d from a program of your own, through the core header alone
 * (include/ssb4d.h): simulate a tiny 4D-STEM acquisition in memory, open it in a session (the
 * session handle), calibrate it, evaluate the SSB loss at the true aberrations and at none, and
 * make the phase image at the truth. (include/ssb4d_advanced.h has the stages one by one.)
 *
 * Build against an installed copy (examples/README.md):
 *     cc phase_of_simulation.c -o phase_of_simulation $(pkg-config --cflags --libs ssb4d) -lm
 * (-lm for this program's own sqrt).
 * Exit status 0 when every step worked and the loss is lower at the truth than at zero aberration.
 */
#include <ssb4d.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    ssb4d_err err = {0}; /* every call that can fail fills this with one line */
    int ok = 0;
    uint16_t *counts = NULL;
    float *truth = NULL, *phase = NULL;
    ssb4d_session *ses = NULL;

    /* 1. Simulate: the "tiny" preset is a 32x32 scan of 48x48-pixel diffraction patterns through
     *    one SrTiO3 unit cell at 300 kV, 25 mrad, with C10 = -10 nm, C12 = 2 nm at 20 degrees. */
    ssb4d_sim_params sp;
    ssb4d_sim_info info;
    if (ssb4d_sim_params_preset(&sp, "tiny", &err) || ssb4d_sim_describe(&sp, &info, &err))
        goto done;
    size_t n = (size_t)sp.scan_n, d = (size_t)sp.det;
    size_t shape[4] = {n, n, d, d}; /* (scan_row, scan_col, det_row, det_col) */
    counts = malloc(n * n * d * d * sizeof *counts);
    truth = malloc(n * n * sizeof *truth);
    phase = malloc(n * n * sizeof *phase);
    if (!counts || !truth || !phase) {
        snprintf(err.msg, sizeof err.msg, "out of memory");
        goto done;
    }
    /* counts: Poisson counts; truth: the specimen's projected phase, low-passed to the band SSB
     * can see (|q| <= 2 alpha / lambda), at the scan positions. */
    if (ssb4d_simulate_to_memory(&sp, counts, NULL, NULL, truth, &info, &err))
        goto done;

    /* 2. A session over the array (files: ssb4d_session_open for .npy or .qem). The microscope
     *    values come from the simulation, and its detector is not rotated against the scan
     *    (rotation NaN would measure it from the centre of mass). */
    ssb4d_session_opts o;
    ssb4d_session_opts_default(&o);
    o.calib.kv = sp.kv;
    o.calib.semiangle_mrad = sp.semiangle_mrad;
    o.calib.scan_step_A[0] = o.calib.scan_step_A[1] = info.scan_step_A;
    o.calib.rotation_deg = 0.0;
    if (ssb4d_session_open_memory(counts, SSB4D_U16, shape, &o, &ses, &err))
        goto done;

    /* 3. Calibrate: the detector sampling, the bright-field (BF) disk and its pixels are measured. */
    if (ssb4d_session_calibrate(ses, &err))
        goto done;
    const ssb4d_calibration *cal = ssb4d_session_calibration(ses);
    printf("calibrated: BF disk radius %.2f px (simulated %.2f), detector sampling %.4f mrad/px "
           "(simulated %.4f), %zu BF pixels\n",
           cal->disk_radius_px, info.bf_radius_px, cal->geom.det_sampling_mrad[0], info.det_sampling_mrad,
           cal->n_bf);

    /* 4. The exact SSB loss at the true aberrations and at none (lower is better), and the phase
     *    image at the truth (native scan sampling: upsample 1). The first preview builds G. */
    ssb4d_aberrations zero = {{0}, {0}};
    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    q.want_loss = 1;
    double loss_truth, loss_zero;
    q.ab = &zero;
    if (ssb4d_session_preview(ses, &q, phase, &loss_zero, &err))
        goto done;
    q.ab = &sp.ab;
    if (ssb4d_session_preview(ses, &q, phase, &loss_truth, &err))
        goto done;

    /* Compare the phase image with the simulated phase: Pearson correlation over the scan. */
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n * n; i++) {
        ma += phase[i];
        mb += truth[i];
        lo = fmin(lo, phase[i]);
        hi = fmax(hi, phase[i]);
    }
    ma /= (double)(n * n);
    mb /= (double)(n * n);
    for (size_t i = 0; i < n * n; i++) {
        sab += (phase[i] - ma) * (truth[i] - mb);
        saa += (phase[i] - ma) * (phase[i] - ma);
        sbb += (truth[i] - mb) * (truth[i] - mb);
    }
    double corr = sab / sqrt(saa * sbb);
    printf("loss at the truth %.6g, at zero aberration %.6g; phase image %zux%zu, %.3f to %.3f rad, "
           "correlation with the simulated phase %.3f\n",
           loss_truth, loss_zero, n, n, lo, hi, corr);
    ok = loss_truth < loss_zero;
    if (!ok)
        snprintf(err.msg, sizeof err.msg, "the loss is not lower at the truth");

done:
    if (!ok)
        fprintf(stderr, "phase_of_simulation: %s\n", err.msg);
    ssb4d_session_close(ses);
    free(counts);
    free(truth);
    free(phase);
    return ok ? 0 : 1;
}
