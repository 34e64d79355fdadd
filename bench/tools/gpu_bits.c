/* gpubits.c — hashes of the GPU's results for every path of kernels.cu (a bit comparison of two builds). */
#include "cuda/cuda.h"
#include "ssb4d_advanced.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static ssb4d_err err;
#define OK(call) do { ssb4d_status s_ = (call); if (s_) { fprintf(stderr, "FATAL %s: %s\n", #call, err.msg); exit(1); } } while (0)
static uint64_t h64(const void *p, size_t n) { const unsigned char *b = p; uint64_t h = 1469598103934665603ull; for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull; return h; }
static ssb4d_aberrations ab_of(double c10, double c12, double phi12) { ssb4d_aberrations a; memset(&a, 0, sizeof a); a.C_nm[SSB4D_C10] = c10, a.C_nm[SSB4D_C12] = c12, a.phi_deg[SSB4D_C12] = phi12; return a; }
static void run(ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab, const ssb4d_thick *th, size_t n, const char *what)
{
    float *m = malloc(4 * n * sizeof *m), *o = malloc(2 * n * sizeof *o), *ph = malloc(n * sizeof *ph), *up = malloc(4 * n * sizeof *up);
    double l;
    OK(ssb4d_loss(G, g, ab, th, NULL, NULL, &l, m, &err));
    printf("%-28s loss %a mean %016llx", what, l, (unsigned long long)h64(m, n * sizeof *m));
    OK(ssb4d_object(G, g, ab, th, 1, NULL, NULL, o, ph, &err));
    printf(" object %016llx phase %016llx", (unsigned long long)h64(o, 2 * n * sizeof *o), (unsigned long long)h64(ph, n * sizeof *ph));
    OK(ssb4d_mean_phase_upsampled(G, g, ab, th, 2, NULL, NULL, up, &err));
    printf(" up2 %016llx", (unsigned long long)h64(up, 4 * n * sizeof *up));
    double l2;
    OK(ssb4d_object_loss(G, g, ab, th, NULL, NULL, NULL, ph, &l2, &err));
    printf(" release %a %016llx\n", l2, (unsigned long long)h64(ph, n * sizeof *ph));
    free(m), free(o), free(ph), free(up);
}
int main(void)
{
    if (!cuda_available()) { printf("no CUDA device\n"); return 77; }
    ssb4d_sim_params sp; ssb4d_sim_info info;
    OK(ssb4d_sim_params_preset(&sp, "tiny", &err));
    sp.scan_n = 64; sp.scan_cells = 6;
    sp.ab.C_nm[SSB4D_C10] = 12, sp.ab.C_nm[SSB4D_C12] = 3, sp.ab.phi_deg[SSB4D_C12] = 35;
    OK(ssb4d_sim_describe(&sp, &info, &err));
    size_t shape[4] = {(size_t)sp.scan_n, (size_t)sp.scan_n, (size_t)sp.det, (size_t)sp.det};
    uint16_t *counts = malloc(shape[0] * shape[1] * shape[2] * shape[3] * sizeof *counts);
    OK(ssb4d_simulate_to_memory(&sp, counts, NULL, NULL, NULL, &info, &err));
    printf("counts %016llx\n", (unsigned long long)h64(counts, shape[0] * shape[1] * shape[2] * shape[3] * 2));
    ssb4d_calib_params cp; ssb4d_calib_params_default(&cp);
    cp.kv = sp.kv, cp.semiangle_mrad = sp.semiangle_mrad;
    cp.scan_step_A[0] = cp.scan_step_A[1] = info.scan_step_A;
    cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = info.det_sampling_mrad;
    ssb4d_source *src; OK(ssb4d_source_from_memory(counts, SSB4D_U16, shape, &src, &err));
    ssb4d_calibration cal; OK(ssb4d_calibrate(src, &cp, &cal, &err));
    ssb4d_gbuild_opts go; ssb4d_gbuild_opts_default(&go);
    ssb4d_G *G; OK(ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, NULL, &G, &err));
    OK(cuda_G_attach(G, NULL, &err));
    const ssb4d_geometry *g = &cal.geom; size_t n = shape[0] * shape[1];
    ssb4d_aberrations a = ab_of(12, 3, 35), z = ab_of(0, 0, 0), h = ab_of(-20, 6, -60);
    h.C_nm[SSB4D_C21] = 150, h.phi_deg[SSB4D_C21] = 20; h.C_nm[SSB4D_C30] = 5000;
    ssb4d_thick th = {{1.5, -0.7}, 20};
    run(G, g, &a, NULL, n, "fast");
    run(G, g, &z, NULL, n, "zero (degenerate)");
    run(G, g, &h, NULL, n, "generic C21 C30");
    run(G, g, &a, &th, n, "thick");
    run(G, g, &h, &th, n, "generic thick");
    ssb4d_geometry ga = *g; ga.det_sampling_mrad[1] *= 1.03;
    run(G, &ga, &a, NULL, n, "anisotropic");
    /* batches of the loss */
    ssb4d_aberrations bs[4] = {a, z, h, ab_of(-5, 2, 10)};
    double lb[4];
    for (int i = 0; i < 4; i++) OK(ssb4d_loss(G, g, &bs[i], NULL, NULL, NULL, &lb[i], NULL, &err));
    printf("losses %a %a %a %a\n", lb[0], lb[1], lb[2], lb[3]);
    enum { N = 8 };
    ssb4d_aberrations ab[N]; ssb4d_thick tk[N]; double rot[N], fit[N];
    memset(tk, 0, sizeof tk);
    for (int i = 0; i < N; i++) { ab[i] = ab_of(-15 + 6 * i, 1 + i, -70 + 25 * i); rot[i] = (i % 3) * 2.5; }
    ab[4].C_nm[SSB4D_C21] = 100, ab[4].C_nm[SSB4D_C30] = 3000;
    tk[2].thickness_nm = 15, tk[2].tilt_mrad[0] = 1, tk[5].thickness_nm = 25;
    ab[5].C_nm[SSB4D_C23] = 40;
    ab[6].C_nm[SSB4D_C30] = 2000, tk[6].thickness_nm = 12, tk[6].tilt_mrad[1] = -2;
    tk[7].thickness_nm = 30, tk[7].tilt_mrad[0] = 0.5, tk[7].tilt_mrad[1] = 1.5;
    OK(ssb4d_band_fit_rot(G, g, rot, ab, tk, N, NULL, NULL, fit, &err));
    printf("band");
    for (int i = 0; i < N; i++) printf(" %a", fit[i]);
    double pw; OK(ssb4d_band_power(G, g, NULL, NULL, &pw, &err));
    printf("\nband power %a\n", pw);
    return 0;
}
