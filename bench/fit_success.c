/* fit_success.c — success-rate study of the standard fit (issue 4): N random truths
 * (C10 ∈ ±30 nm, C12 ∈ 0–8 nm, φ12 ∈ ±90°, drawn from a seeded generator) simulated with the
 * built-in simulator at a preset size, calibrated with the microscope values a sidecar gives
 * (kV, semi-angle, scan step, detector sampling, rotation 0), fitted with the default ssb4d_fit,
 * and compared with the truth: |ΔC10| ≤ 0.2 nm, |ΔC12| ≤ 0.2 nm, |Δφ12| ≤ 3° (φ12 only when
 * C12 ≥ 1 nm). C10 is compared two ways: with the mean depth of the simulator's potential
 * planes, C10 + (t − dz)/2 (the multislice puts each slice's potential at its entrance; "ok"),
 * and with the mid-plane C10 + t/2 of the shared datasets' README ("ok_midplane").
 *
 * usage: ssb4d_fit_success [N=30] [preset=small] [seed=2026] [trials=200] [coarse_bf=256]
 *                          [fit_radius=0.8] > record.jsonl
 * (trials, coarse_bf and fit_radius change the fit's parameters, to compare search settings.)
 * One JSON line per truth, then a summary line (rate, evaluations and seconds per fit). */
#include "common/splitmix.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Uniform in [0, 1) from the top 53 bits. */
static double unit(uint64_t *s) { return (double)(ssb4d_splitmix64(s) >> 11) * 0x1p-53; }

static double dmod180(double a, double b)
{
    double d = fmod(a - b, 180.0);
    if (d > 90)
        d -= 180;
    if (d < -90)
        d += 180;
    return d;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 30;
    const char *preset = argc > 2 ? argv[2] : "small";
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 2026;
    ssb4d_fit_params fp0;
    ssb4d_fit_params_default(&fp0);
    if (argc > 4)
        fp0.trials = strtoull(argv[4], NULL, 10);
    if (argc > 5)
        fp0.coarse_bf = strtoull(argv[5], NULL, 10);
    if (argc > 6)
        fp0.fit_radius = atof(argv[6]);
    if (n < 1) {
        fprintf(stderr, "usage: ssb4d_fit_success [N] [preset] [seed]\n");
        return 2;
    }
    ssb4d_err err = {0};
    uint64_t rng = seed;
    int ok_all = 0, ok_mid_all = 0;
    double evals = 0, secs = 0, fit_secs = 0;
    for (int i = 0; i < n; i++) {
        ssb4d_sim_params sp;
        if (ssb4d_sim_params_preset(&sp, preset, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 2;
        }
        double u1 = unit(&rng), u2 = unit(&rng), u3 = unit(&rng);
        memset(&sp.ab, 0, sizeof sp.ab);
        sp.ab.C_nm[SSB4D_C10] = -30.0 + 60.0 * u1;
        sp.ab.C_nm[SSB4D_C12] = 8.0 * u2;
        sp.ab.phi_deg[SSB4D_C12] = -90.0 + 180.0 * u3;
        sp.seed = seed + (uint64_t)i;
        ssb4d_sim_info info;
        if (ssb4d_sim_describe(&sp, &info, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 2;
        }
        size_t shape[4] = {(size_t)sp.scan_n, (size_t)sp.scan_n, (size_t)sp.det, (size_t)sp.det};
        uint16_t *counts = malloc(shape[0] * shape[1] * shape[2] * shape[3] * sizeof *counts);
        double t0 = now();
        ssb4d_source *src = NULL;
        ssb4d_calibration cal;
        ssb4d_G *G = NULL;
        ssb4d_fit_result r;
        ssb4d_calib_params cp;
        ssb4d_calib_params_default(&cp);
        cp.kv = sp.kv;
        cp.semiangle_mrad = sp.semiangle_mrad;
        cp.scan_step_A[0] = cp.scan_step_A[1] = info.scan_step_A;
        cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = info.det_sampling_mrad;
        cp.rotation_deg = 0.0;
        ssb4d_gbuild_opts go;
        ssb4d_gbuild_opts_default(&go);
        ssb4d_fit_params fp = fp0;
        if (!counts || ssb4d_simulate_to_memory(&sp, counts, NULL, NULL, NULL, NULL, &err) ||
            ssb4d_source_from_memory(counts, SSB4D_U16, shape, &src, &err))
            goto fail;
        double t1 = now();
        if (ssb4d_calibrate(src, &cp, &cal, &err) ||
            ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, NULL, &G, &err))
            goto fail;
        double t2 = now();
        if (ssb4d_fit(G, &cal.geom, &fp, NULL, &r, &err))
            goto fail;
        double t3 = now();
        double c10 = sp.ab.C_nm[SSB4D_C10] + 0.5 * (info.thickness_nm - info.thickness_nm / info.n_slices);
        double c10_mid = sp.ab.C_nm[SSB4D_C10] + 0.5 * info.thickness_nm;
        double d10 = r.ab.C_nm[SSB4D_C10] - c10, d12 = r.ab.C_nm[SSB4D_C12] - sp.ab.C_nm[SSB4D_C12];
        double dphi = dmod180(r.ab.phi_deg[SSB4D_C12], sp.ab.phi_deg[SSB4D_C12]);
        int ok = fabs(d10) <= 0.2 && fabs(d12) <= 0.2 && (sp.ab.C_nm[SSB4D_C12] < 1 || fabs(dphi) <= 3);
        int ok_mid = fabs(r.ab.C_nm[SSB4D_C10] - c10_mid) <= 0.2 && fabs(d12) <= 0.2 &&
                     (sp.ab.C_nm[SSB4D_C12] < 1 || fabs(dphi) <= 3);
        ok_all += ok;
        ok_mid_all += ok_mid;
        evals += (double)r.evaluations;
        secs += t3 - t1;
        fit_secs += t3 - t2;
        printf("{\"i\":%d,\"truth\":{\"C10_nm_mean_plane\":%.4f,\"C10_nm_midplane\":%.4f,\"C12_nm\":%.4f,\"phi12_deg\":%.3f},"
               "\"fit\":{\"C10_nm\":%.4f,\"C12_nm\":%.4f,\"phi12_deg\":%.3f,\"loss\":%.9g},"
               "\"dC10\":%.4f,\"dC12\":%.4f,\"dphi12\":%.3f,\"ok\":%s,\"ok_midplane\":%s,\"branch_flipped\":%d,"
               "\"skewness\":%.3f,\"evaluations\":%zu,\"nm_iterations\":%d,\"n_fit_bf\":%zu,"
               "\"simulate_s\":%.2f,\"calibrate_gbuild_s\":%.2f,\"fit_s\":%.2f}\n",
               i, c10, c10_mid, sp.ab.C_nm[SSB4D_C12], sp.ab.phi_deg[SSB4D_C12], r.ab.C_nm[SSB4D_C10],
               r.ab.C_nm[SSB4D_C12], r.ab.phi_deg[SSB4D_C12], r.loss, d10, d12, dphi,
               ok ? "true" : "false", ok_mid ? "true" : "false", r.branch_flipped, r.skewness, r.evaluations, r.nm_iterations,
               r.n_fit_bf, t1 - t0, t2 - t1, t3 - t2);
        fflush(stdout);
        ssb4d_fit_result_free(&r);
        ssb4d_G_free(G);
        ssb4d_calibration_free(&cal);
        ssb4d_source_close(src);
        free(counts);
        continue;
    fail:
        fprintf(stderr, "truth %d: %s\n", i, err.msg);
        return 1;
    }
    printf("{\"summary\":true,\"preset\":\"%s\",\"n\":%d,\"recovered\":%d,\"rate\":%.4f,"
           "\"recovered_midplane\":%d,\"rate_midplane\":%.4f,"
           "\"evaluations_per_fit\":%.1f,\"fit_seconds_per_fit\":%.2f,"
           "\"calibrate_gbuild_fit_seconds_per_fit\":%.2f,\"seed\":%llu,\"trials\":%zu,"
           "\"coarse_bf\":%zu,\"fit_radius\":%g}\n",
           preset, n, ok_all, (double)ok_all / n, ok_mid_all, (double)ok_mid_all / n, evals / n, fit_secs / n, secs / n,
           (unsigned long long)seed, fp0.trials, fp0.coarse_bf, fp0.fit_radius);
    return 0;
}
