/* bench_gstart.c — ssb4d_gstart_bench: the GPU's start from a .qem (issue 41) timed, with its
 * floors: the streams' upload alone (the PCIe floor of any start from host memory), the device
 * calibration, the device G build without and with the host copy of G's planes, and the same
 * session stages through the session handle (the CUDA backend: the device start) beside the CPU's
 * start (SSB4D_CPU_START=1 in the environment of a second run). One JSON record.
 *
 *   ssb4d_gstart_bench DATA.qem --kv KV --semiangle MRAD --step A --det-sampling M -o OUT.json */
#include "common/clock.h"
#include "cuda/cuda.h"
#include "cuda/gstart.h"
#include "qem/qem.h"
#include "source/source.h"
#include "ssb4d_advanced.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ssb4d_err err;
#define OK(call)                                                                                                  \
    do {                                                                                                          \
        ssb4d_status s_ = (call);                                                                                 \
        if (s_) {                                                                                                 \
            fprintf(stderr, "ssb4d_gstart_bench: %s: %s\n", #call, err.msg);                                     \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 2 || !cuda_available()) {
        fprintf(stderr, "usage: ssb4d_gstart_bench DATA.qem --kv .. --semiangle .. --step .. --det-sampling .. -o OUT (needs a GPU)\n");
        return 77;
    }
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    const char *outp = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        double v = atof(argv[i + 1]);
        if (!strcmp(argv[i], "--kv"))
            cp.kv = v;
        else if (!strcmp(argv[i], "--semiangle"))
            cp.semiangle_mrad = v;
        else if (!strcmp(argv[i], "--step"))
            cp.scan_step_A[0] = cp.scan_step_A[1] = v;
        else if (!strcmp(argv[i], "--det-sampling"))
            cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = v;
        else if (!strcmp(argv[i], "-o"))
            outp = argv[i + 1];
    }
    char name[128] = "";
    size_t total = 0;
    cuda_device_info(name, sizeof name, &total);
    ssb4d_source *src = NULL;
    OK(ssb4d_source_open(argv[1], &src, &err));
    const qem_file *f = ssb_source_qem(src);
    const qem_info *in = qem_get_info(f);
    /* the upload alone (a decode of no pixel), twice: the second is the one timed */
    float dummy;
    uint64_t dt;
    OK(cuda_qem_columns(f, NULL, 0, &dummy, &dt, &err));
    double t0 = ssb_clock_s();
    OK(cuda_qem_columns(f, NULL, 0, &dummy, &dt, &err));
    double t_up = ssb_clock_s() - t0;
    /* the trial: the mapped file registered, the copies straight from it */
    setenv("SSB4D_GSTART_REGISTER", "1", 1);
    t0 = ssb_clock_s();
    ssb4d_status reg_st = cuda_qem_columns(f, NULL, 0, &dummy, &dt, &err);
    double t_up_reg = ssb_clock_s() - t0;
    unsetenv("SSB4D_GSTART_REGISTER");
    printf("  upload, registered  %8.3f s  (%s)\n", t_up_reg, reg_st ? err.msg : "ok; staged if refused");
    ssb4d_calibration cal;
    OK(cuda_calibrate_qem(src, &cp, NULL, NULL, &cal, &err)); /* warm */
    ssb4d_calibration_free(&cal);
    t0 = ssb_clock_s();
    OK(cuda_calibrate_qem(src, &cp, NULL, NULL, &cal, &err));
    double t_cal = ssb_clock_s() - t0;
    /* the session's way: the calibration keeps its upload for the G build */
    ssb4d_calibration_free(&cal);
    cuda_start *keep = NULL;
    t0 = ssb_clock_s();
    OK(cuda_calibrate_qem(src, &cp, NULL, &keep, &cal, &err));
    double t_cal_keep = ssb_clock_s() - t0;
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    ssb4d_G *G = NULL;
    { /* warm: cuFFT's first plan */
        cuda_start_opts so = {0, 0, 0};
        OK(cuda_gbuild_qem(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, &so, &keep, NULL, &G, &err));
        ssb4d_G_free(G);
    }
    /* with the kept upload: without and with the host copy, then a fresh upload with the copy */
    double t_g[3];
    for (int v = 0; v < 3; v++) {
        cuda_start_opts so = {0, 0, v > 0};
        t0 = ssb_clock_s();
        OK(cuda_gbuild_qem(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, &so, v < 2 ? &keep : NULL, NULL, &G, &err));
        t_g[v] = ssb_clock_s() - t0;
        if (v < 2)
            ssb4d_G_free(G);
    }
    cuda_start_free(keep);
    size_t g_bytes = ssb4d_G_bytes(G);
    ssb4d_G_free(G);
    size_t decoded = in->n_scans * in->n_pix * 2, up = in->payload_bytes + in->n_blocks * in->n_pix * 5;
    printf("%s: %zux%zux%zux%zu, %zu BF, payload %.3f GB (upload %.3f GB), counts %.2f GB as u16, G %.3f GB\n", name,
           in->shape[0], in->shape[1], in->shape[2], in->shape[3], cal.n_bf, in->payload_bytes / 1e9, up / 1e9,
           decoded / 1e9, g_bytes / 1e9);
    printf("  upload alone        %8.3f s  (%.1f GB/s)\n", t_up, up / t_up / 1e9);
    printf("  calibrate (device)  %8.3f s  (upload + decode of every stream + the CPU's steps on the sums)\n", t_cal);
    printf("  calibrate, kept     %8.3f s  (the same, its upload kept for the G build)\n", t_cal_keep);
    printf("  G build (device)    %8.3f s  (the kept upload: BF decode + cuFFT; G stays on the GPU)\n", t_g[0]);
    printf("  G build + host copy %8.3f s  (%.3f s for G's %.2f GB back: %.1f GB/s)\n", t_g[1], t_g[1] - t_g[0],
           g_bytes / 1e9, g_bytes / (t_g[1] - t_g[0]) / 1e9);
    printf("  G build, own upload %8.3f s  (upload + BF decode + cuFFT + host copy)\n", t_g[2]);
    if (outp) {
        FILE *o = fopen(outp, "w");
        if (o) {
            fprintf(o,
                    "{\n  \"device\": \"%s\",\n  \"shape\": [%zu, %zu, %zu, %zu],\n  \"n_bf\": %zu,\n"
                    "  \"payload_bytes\": %zu,\n  \"upload_bytes\": %zu,\n  \"counts_u16_bytes\": %zu,\n  \"g_bytes\": %zu,\n"
                    "  \"upload_registered_s\": %.4f,\n  \"upload_s\": %.4f,\n  \"calibrate_device_s\": %.4f,\n  \"calibrate_device_kept_s\": %.4f,\n"
                    "  \"gbuild_device_kept_s\": %.4f,\n  \"gbuild_device_kept_host_copy_s\": %.4f,\n"
                    "  \"gbuild_device_own_upload_host_copy_s\": %.4f\n}\n",
                    name, in->shape[0], in->shape[1], in->shape[2], in->shape[3], cal.n_bf, in->payload_bytes, up,
                    decoded, g_bytes, t_up_reg, t_up, t_cal, t_cal_keep, t_g[0], t_g[1], t_g[2]);
            fclose(o);
        }
    }
    ssb4d_calibration_free(&cal);
    ssb4d_source_close(src);
    return 0;
}
