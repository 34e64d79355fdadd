/* bench_cuda.c — ssb4d_gpu_bench: the session's stages on the CUDA backend (and, with --cpu, on
 * the CPU backend for the agreement figures), timed, with device memory; one JSON record.
 *
 *   ssb4d_gpu_bench DATA --kv KV --semiangle MRAD --step A --det-sampling M [--cpu] -o OUT.json
 *
 * Each timed call is warmed up once, then repeated (--repeat, default 7); the median, minimum and
 * maximum are recorded. scripts/gpu-check.sh runs it on the device machine (docs/gpu.md). */
#include "bench/record.h"
#include "cuda/cuda.h"
#include "common/clock.h"
#include "plan/device_model.h"
#include "session/handle_internal.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static ssb4d_err err;
#define OK(call)                                                                                                  \
    do {                                                                                                          \
        ssb4d_status s_ = (call);                                                                                 \
        if (s_) {                                                                                                 \
            fprintf(stderr, "ssb4d_gpu_bench: %s: %s\n", #call, err.msg);                                        \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

static int repeat = 7;

/* The JSON record, written as we go. */
static FILE *out;
static int first_field = 1;
static void field(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void field(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(out, "%s\n  ", first_field ? "" : ",");
    vfprintf(out, fmt, ap);
    va_end(ap);
    first_field = 0;
}

typedef ssb4d_status (*timed_fn)(ssb4d_session *s, void *user);

static void time_it(const char *backend, const char *name, ssb4d_session *s, timed_fn fn, void *user, double per)
{
    double t[64];
    int n = repeat < 64 ? repeat : 64;
    OK(fn(s, user)); /* warm-up */
    for (int i = 0; i < n; i++) {
        double t0 = ssb_clock_s();
        OK(fn(s, user));
        t[i] = (ssb_clock_s() - t0) / per;
    }
    double med, min, max;
    bench_stats(t, (size_t)n, &med, &min, &max);
    printf("  %-6s %-34s median %10.3f ms  (min %.3f, max %.3f)\n", backend, name, 1e3 * med, 1e3 * min, 1e3 * max);
    field("\"%s_%s_ms\": {\"median\": %.4f, \"min\": %.4f, \"max\": %.4f}", backend, name, 1e3 * med, 1e3 * min,
          1e3 * max);
}

typedef struct {
    float *img;
    double loss;
    size_t subset;
    int upsample, n;
    ssb4d_aberrations *ab;
} job;

static ssb4d_status do_loss(ssb4d_session *s, void *u) { return ssb4d_session_loss(s, &((job *)u)->loss, &err); }
static ssb4d_status do_release(ssb4d_session *s, void *u)
{
    job *j = u;
    return ssb4d_session_release(s, NULL, j->img, &j->loss, &err);
}
static ssb4d_status do_object(ssb4d_session *s, void *u)
{
    job *j = u;
    return ssb4d_session_object(s, j->upsample, NULL, j->img, &err);
}
static ssb4d_status do_preview(ssb4d_session *s, void *u)
{
    job *j = u;
    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    q.upsample = j->upsample;
    q.subset = j->subset;
    return ssb4d_session_preview(s, &q, j->img, NULL, &err);
}
static ssb4d_status do_batch(ssb4d_session *s, void *u)
{
    job *j = u;
    double loss[64];
    ssb4d_geometry g;
    ssb4d_session_get(s, NULL, NULL, &g);
    return ssb4d_loss_batch(session_handle_G(s), &g, j->ab, NULL, (size_t)j->n, NULL, NULL, loss, &err);
}

/* Where one call's time goes: the backend's stages, each waited for (cuda_G_profile), per call,
 * with the wall time of the profiled calls and what no stage accounts for (the host's share
 * outside the passes). */
static void profile_call(const char *what, ssb4d_session *s, const ssb4d_G *G, timed_fn fn, void *user, int n)
{
    static const char *names[] = {"host", "correct", "object_sum", "c2r", "phase_sum", "finish", "object", "copy"};
    double pr[CUDA_PROF_N];
    OK(fn(s, user)); /* warm-up */
    cuda_G_profile(G, 1, NULL);
    double t0 = ssb_clock_s();
    for (int i = 0; i < n; i++)
        OK(fn(s, user));
    double wall = (ssb_clock_s() - t0) / n, sum = 0;
    cuda_G_profile(G, 0, pr);
    printf("  cuda   %s profile per call (stages waited for):", what);
    fprintf(out, ",\n  \"cuda_%s_profile_ms\": {", what);
    for (int k = 0; k < CUDA_PROF_N; k++) {
        sum += pr[k] / n;
        printf(" %s %.3f", names[k], 1e3 * pr[k] / n);
        fprintf(out, "\"%s\": %.4f, ", names[k], 1e3 * pr[k] / n);
    }
    printf(" | rest %.3f | wall %.3f ms\n", 1e3 * (wall - sum), 1e3 * wall);
    fprintf(out, "\"rest\": %.4f, \"wall\": %.4f}", 1e3 * (wall - sum), 1e3 * wall);
}

typedef struct {
    double C10, C12, phi12, loss;
    float *phase;
    size_t npix;
} outcome;

static void run_backend(const char *data, const ssb4d_calib_params *cp, ssb4d_backend_kind kind, outcome *oc)
{
    const char *bk = kind == SSB4D_BACKEND_CUDA ? "cuda" : "cpu";
    ssb4d_session_opts o;
    ssb4d_session_opts_default(&o);
    o.calib = *cp;
    o.backend = kind;
    ssb4d_session *s;
    double t0 = ssb_clock_s();
    OK(ssb4d_session_open(data, &o, &s, &err));
    OK(ssb4d_session_calibrate(s, &err));
    double t1 = ssb_clock_s();
    OK(ssb4d_session_build(s, &err));
    double t2 = ssb_clock_s();
    const ssb4d_G *G = session_handle_G(s);
    size_t dnow = 0, dpeak = 0;
    if (kind == SSB4D_BACKEND_CUDA)
        cuda_G_device_bytes(G, &dnow, &dpeak);
    printf("%s: calibrate %.2f s, G build (+ upload) %.2f s, %zu BF pixels, device %.3f GiB\n", bk, t1 - t0, t2 - t1,
           ssb4d_G_n_bf(G), (double)dnow / (1 << 30));
    field("\"%s_calibrate_s\": %.3f", bk, t1 - t0);
    field("\"%s_gbuild_s\": %.3f", bk, t2 - t1);
    field("\"n_bf\": %zu", ssb4d_G_n_bf(G));
    ssb4d_fit_params fp;
    ssb4d_fit_params_default(&fp);
    ssb4d_fit_result r;
    double t3 = ssb_clock_s();
    OK(ssb4d_session_fit(s, &fp, &r, &err));
    double t4 = ssb_clock_s();
    printf("  %-6s %-34s %10.3f s: C10 %.4f nm, C12 %.4f nm, phi12 %.3f deg, loss %.10g, %zu evaluations, trace "
           "%.16s\n",
           bk, "standard fit (with branch check)", t4 - t3, r.ab.C_nm[SSB4D_C10], r.ab.C_nm[SSB4D_C12],
           r.ab.phi_deg[SSB4D_C12], r.loss, r.evaluations, r.trace_sha256);
    field("\"%s_fit_s\": %.3f", bk, t4 - t3);
    field("\"%s_fit\": {\"C10_nm\": %.6f, \"C12_nm\": %.6f, \"phi12_deg\": %.5f, \"loss\": %.12g, \"evaluations\": "
          "%zu, \"trace_sha256\": \"%s\"}",
          bk, r.ab.C_nm[SSB4D_C10], r.ab.C_nm[SSB4D_C12], r.ab.phi_deg[SSB4D_C12], r.loss, r.evaluations,
          r.trace_sha256);
    oc->C10 = r.ab.C_nm[SSB4D_C10], oc->C12 = r.ab.C_nm[SSB4D_C12], oc->phi12 = r.ab.phi_deg[SSB4D_C12];
    ssb4d_fit_result_free(&r);

    size_t ny, nx, ny2, nx2;
    OK(ssb4d_session_image_shape(s, 1, &ny, &nx, &err));
    OK(ssb4d_session_image_shape(s, 2, &ny2, &nx2, &err));
    job j = {.img = malloc(ny2 * nx2 * sizeof(float)), .upsample = 1};
    time_it(bk, "exact_loss", s, do_loss, &j, 1);
    time_it(bk, "release", s, do_release, &j, 1);
    oc->loss = j.loss;
    printf("  %-6s release loss %.17g (loss path %s)\n", bk, j.loss, getenv("SSB4D_CUDA_LOSS") ? getenv("SSB4D_CUDA_LOSS") : "default");
    field("\"%s_release_loss\": %.17g", bk, j.loss);
    oc->npix = ny * nx;
    oc->phase = malloc(ny * nx * sizeof(float));
    memcpy(oc->phase, j.img, ny * nx * sizeof(float));
    time_it(bk, "object_redraw", s, do_object, &j, 1);
    j.subset = 256;
    time_it(bk, "drag_preview_subset256", s, do_preview, &j, 1);
    j.subset = 0, j.upsample = 2;
    time_it(bk, "preview_upsampled_2x", s, do_preview, &j, 1);
    ssb4d_aberrations ab[32], cur;
    ssb4d_session_get(s, &cur, NULL, NULL);
    for (int i = 0; i < 32; i++) {
        ab[i] = cur;
        ab[i].C_nm[SSB4D_C10] += 0.1 * i;
    }
    j.ab = ab;
    j.n = 1;
    time_it(bk, "loss_batch1", s, do_batch, &j, 1);
    j.n = 8;
    time_it(bk, "loss_batch8_per_candidate", s, do_batch, &j, 8);
    j.n = 32;
    time_it(bk, "loss_batch32_per_candidate", s, do_batch, &j, 32);
    if (kind == SSB4D_BACKEND_CUDA) {
        /* a drag's and a release's profile */
        j.subset = 256, j.upsample = 1;
        profile_call("drag_preview_subset256", s, G, do_preview, &j, 20);
        profile_call("release", s, G, do_release, &j, 5);
#ifdef CUDA_HAVE_FFT_WORK_BYTES
        size_t ny1, nx1;
        OK(ssb4d_session_image_shape(s, 1, &ny1, &nx1, &err));
        size_t w_c2r = cuda_fft_work_bytes((int)ny1, (int)nx1, 64, 0), w_c2c = cuda_fft_work_bytes((int)ny1, (int)nx1, 1, 1);
        printf("  cuFFT work areas: c2r %zux%zu batch 64 %zu bytes, c2c %zu bytes\n", ny1, nx1, w_c2r, w_c2c);
        field("\"cufft_work_bytes\": {\"c2r_batch64\": %zu, \"c2c\": %zu}", w_c2r, w_c2c);
#endif
        /* where a candidate's time goes: 3 batches of 8, each stage waited for */
        static const char *names[] = {"host", "correct", "object_sum", "c2r", "phase_sum", "finish", "object", "copy"};
        double pr[CUDA_PROF_N];
        j.n = 8;
        cuda_G_profile(G, 1, NULL);
        for (int k = 0; k < 3; k++)
            OK(do_batch(s, &j));
        cuda_G_profile(G, 0, pr);
        fprintf(out, ",\n  \"cuda_loss_profile_ms_per_candidate\": {");
        printf("  cuda   per-candidate breakdown (batch 8, stages waited for):");
        for (int k = 0; k < CUDA_PROF_N; k++) {
            printf(" %s %.3f ms", names[k], 1e3 * pr[k] / 24);
            fprintf(out, "%s\"%s\": %.4f", k ? ", " : "", names[k], 1e3 * pr[k] / 24);
        }
        printf("\n");
        fprintf(out, "}");
        cuda_G_device_bytes(G, &dnow, &dpeak);
        printf("  device memory: now %.3f GiB, peak %.3f GiB\n", (double)dnow / (1 << 30), (double)dpeak / (1 << 30));
        field("\"device_bytes_after\": %zu", dnow);
        field("\"device_bytes_peak\": %zu", dpeak);
        /* Issue 41 item 5: the device model of the session (its plan) and of this bench's own calls
         * beside it (loss batches of up to 32 sets, previews at f = 1 and 2 of every BF pixel): each
         * buffer is kept at its largest, so the peak is their union, whatever the order. */
        dev_session_in in;
        session_handle_device_model(s, &in);
        size_t here = 0;
        for (size_t ib = 0; ib < G->n_bf; ib++)
            here += G_stored(G, ib);
        in.ny = G->ny, in.nx = G->nx, in.n_bf = G->n_bf, in.n_stored = here, in.fft_work = cuda_fft_work_bytes;
        dev_model m;
        dev_model_session(&in, &m);
        const size_t plan_peak = dev_model_bytes(&m), nbf = G->n_bf;
        dev_model_phases(&m, "bench: loss batch of 32", nbf, 32, 1, 1, 0, 0);
        dev_model_phases(&m, "bench: preview f=1, all BF", nbf, 1, 1, 0, 0, 1);
        dev_model_phases(&m, "bench: preview f=2, all BF", nbf, 1, 2, 0, 0, 1);
        dev_model_phases(&m, "bench: release", nbf, 1, 1, 1, 0, 1);
        const size_t bench_model = dev_model_bytes(&m);
        printf("  device model: the session's plan %zu B; with this bench's own calls %zu B; measured peak %zu B "
               "(%s)\n", plan_peak, bench_model, dpeak, bench_model == dpeak ? "equal" : "DIFFERENT");
        for (int k = 0; k < DEV_N_BUF; k++)
            if (m.buf[k])
                printf("    %-24s %12zu B\n", dev_buf_name[k], m.buf[k]);
        field("\"device_model_session_bytes\": %zu", plan_peak);
        field("\"device_model_bench_bytes\": %zu", bench_model);
    }
    free(j.img);
    ssb4d_session_close(s);
}

int main(int argc, char **argv)
{
    const char *data = NULL, *outp = NULL;
    int cpu = 0;
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--kv") && v)
            cp.kv = atof(v), i++;
        else if (!strcmp(a, "--semiangle") && v)
            cp.semiangle_mrad = atof(v), i++;
        else if (!strcmp(a, "--step") && v)
            cp.scan_step_A[0] = cp.scan_step_A[1] = atof(v), i++;
        else if (!strcmp(a, "--det-sampling") && v)
            cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = atof(v), i++;
        else if (!strcmp(a, "--repeat") && v)
            repeat = atoi(v), i++;
        else if (!strcmp(a, "-o") && v)
            outp = v, i++;
        else if (!strcmp(a, "--cpu"))
            cpu = 1;
        else if (a[0] != '-' && !data)
            data = a;
        else {
            fprintf(stderr, "usage: ssb4d_gpu_bench DATA --kv KV --semiangle MRAD --step A --det-sampling M [--cpu] "
                            "[--repeat N] -o OUT.json\n");
            return 2;
        }
    }
    if (!data || !outp || !(cp.kv > 0) || !(cp.semiangle_mrad > 0) || !(cp.scan_step_A[0] > 0) || repeat < 1) {
        fprintf(stderr, "ssb4d_gpu_bench: DATA, -o, --kv, --semiangle and --step are required\n");
        return 2;
    }
    cp.rotation_deg = 0;
    if (!cuda_available()) {
        fprintf(stderr, "ssb4d_gpu_bench: no CUDA device\n");
        return 77;
    }
    if (!(out = fopen(outp, "w"))) {
        fprintf(stderr, "ssb4d_gpu_bench: cannot write %s\n", outp);
        return 1;
    }
    char name[128] = "";
    size_t total = 0;
    cuda_device_info(name, sizeof name, &total);
    fprintf(out, "{");
    field("\"bench\": \"ssb4d_gpu_bench\"");
    field("\"data\": \"%s\"", data);
    field("\"device\": \"%s\"", name);
    field("\"device_total_bytes\": %zu", total);
    field("\"repeat\": %d", repeat);
    outcome g = {0}, c = {0};
    run_backend(data, &cp, SSB4D_BACKEND_CUDA, &g);
    if (cpu) {
        run_backend(data, &cp, SSB4D_BACKEND_CPU, &c);
        double dph = 0;
        for (size_t i = 0; i < g.npix; i++) {
            double d = fabs(remainder((double)g.phase[i] - (double)c.phase[i], 2 * M_PI));
            dph = d > dph ? d : dph;
        }
        double dC10 = fabs(g.C10 - c.C10), dC12 = fabs(g.C12 - c.C12), dphi = fabs(remainder(g.phi12 - c.phi12, 180));
        printf("agreement (each backend at its own fit): |dC10| %.4f nm, |dC12| %.4f nm, |dphi12| %.3f deg; release "
               "loss rel %.2e, phase max diff %.2e rad\n",
               dC10, dC12, dphi, fabs(g.loss / c.loss - 1), dph);
        field("\"agreement\": {\"dC10_nm\": %.6f, \"dC12_nm\": %.6f, \"dphi12_deg\": %.5f, \"release_loss_rel\": "
              "%.3e, \"release_phase_max_rad\": %.3e}",
              dC10, dC12, dphi, fabs(g.loss / c.loss - 1), dph);
    }
    fprintf(out, "\n}\n");
    fclose(out);
    free(g.phase), free(c.phase);
    return 0;
}
