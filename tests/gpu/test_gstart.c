/* test_gstart.c — the GPU's start from a .qem (src/cuda/gstart.h, issue 41) against the CPU: the
 * device decoder gives rans.c's integers on the golden files and a simulated one, and fails on a
 * damaged stream with the CPU's message; the calibration on the device's integer sums is the
 * CPU's bit for bit; G built on the device agrees with the CPU's (SPEC §11: float rounding, the
 * totals and dc exact), its planes held as cuda_G_attach holds them. Exits 77 (skipped) where no
 * CUDA device is present. */
#include "cuda/cuda.h"
#include "cuda/gstart.h"
#include "qem/qem.h"
#include "source/source.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
#define CHECK(cond, ...)                                                                                          \
    do {                                                                                                          \
        if (!(cond)) {                                                                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                      \
            fprintf(stderr, __VA_ARGS__);                                                                         \
            fprintf(stderr, "\n");                                                                                \
            failures++;                                                                                           \
        }                                                                                                         \
    } while (0)
#define OK(call)                                                                                                  \
    do {                                                                                                          \
        ssb4d_status s_ = (call);                                                                                 \
        if (s_) {                                                                                                 \
            fprintf(stderr, "FATAL %s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call, (int)s_, err.msg);         \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

static ssb4d_err err;

/* Every pixel of path decoded on the device and on the CPU: the same integers and totals. */
static void decode_same(const char *path)
{
    qem_file *f = NULL;
    OK(qem_open(path, 1, 1, &f, &err));
    const qem_info *in = qem_get_info(f);
    size_t P = in->n_pix, N = in->n_scans;
    int32_t *pix = malloc(P * sizeof *pix);
    float *gpu = malloc(P * N * sizeof *gpu), *cpu = malloc(P * N * sizeof *cpu);
    uint64_t *tot = malloc(P * sizeof *tot);
    for (size_t k = 0; k < P; k++)
        pix[k] = (int32_t)k;
    OK(cuda_qem_columns(f, pix, P, gpu, tot, &err));
    OK(ssb_qem_read_columns(f, pix, P, 0, in->shape[0], cpu, 1, &err));
    size_t bad = 0, badt = 0;
    for (size_t k = 0; k < P; k++) {
        uint64_t t = 0;
        for (size_t i = 0; i < N; i++) {
            bad += gpu[k * N + i] != cpu[k * N + i];
            t += (uint64_t)cpu[k * N + i];
        }
        badt += t != tot[k];
    }
    CHECK(bad == 0 && badt == 0, "%s: %zu counts and %zu totals differ from the CPU's", path, bad, badt);
    printf("decode %s: %zu pixels x %zu scans, %zu blocks: the CPU's integers\n", path, P, N, in->n_blocks);
    free(pix), free(gpu), free(cpu), free(tot);
    qem_close(f);
}

/* A file that opens but holds a damaged stream: the device refuses it with the CPU's words. */
static void damaged_same(const char *path)
{
    qem_file *f = NULL;
    if (qem_open(path, 1, 1, &f, &err))
        return; /* refused at open: the device never sees it */
    const qem_info *in = qem_get_info(f);
    size_t P = in->n_pix, N = in->n_scans;
    int32_t *pix = malloc(P * sizeof *pix);
    float *buf = malloc(P * N * sizeof *buf);
    uint64_t *tot = malloc(P * sizeof *tot);
    for (size_t k = 0; k < P; k++)
        pix[k] = (int32_t)k;
    ssb4d_err eg = {0}, ec = {0};
    ssb4d_status sg = cuda_qem_columns(f, pix, P, buf, tot, &eg);
    ssb4d_status sc = ssb_qem_read_columns(f, pix, P, 0, in->shape[0], buf, 1, &ec);
    CHECK(sg == sc && !strcmp(eg.msg, ec.msg), "%s: GPU %d \"%s\", CPU %d \"%s\"", path, (int)sg, eg.msg, (int)sc, ec.msg);
    printf("damaged %s: %s\n", path, sg ? eg.msg : "decodes");
    free(pix), free(buf), free(tot);
    qem_close(f);
}

static int same_d(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

/* The calibration on the device's sums and G built on the device, against the CPU's. */
static void start_same(const char *path, const ssb4d_calib_params *cp, int use_keep)
{
    cuda_start *keep = NULL; /* use_keep: the G build reuses the calibration's upload */
    ssb4d_source *src = NULL;
    OK(ssb4d_source_open(path, &src, &err));
    CHECK(cuda_start_takes(src), "%s: a .qem of counts", path);
    ssb4d_calibration cc, cg;
    OK(ssb4d_calibrate(src, cp, &cc, &err));
    OK(cuda_calibrate_qem(src, cp, NULL, use_keep ? &keep : NULL, &cg, &err));
    size_t P = cc.det_shape[0] * cc.det_shape[1];
    CHECK(!memcmp(cc.mean_pattern, cg.mean_pattern, P * sizeof *cc.mean_pattern), "mean pattern differs");
    CHECK(cc.n_bf == cg.n_bf && !memcmp(cc.bf_pix, cg.bf_pix, cc.n_bf * sizeof *cc.bf_pix), "BF pixels differ");
    CHECK(cc.n_flagged == cg.n_flagged, "flagged %zu vs %zu", cc.n_flagged, cg.n_flagged);
    CHECK(same_d(cc.total_counts, cg.total_counts) && same_d(cc.geom.rotation_deg, cg.geom.rotation_deg) &&
              same_d(cc.geom.centre_px[0], cg.geom.centre_px[0]) && same_d(cc.geom.centre_px[1], cg.geom.centre_px[1]) &&
              same_d(cc.geom.det_sampling_mrad[0], cg.geom.det_sampling_mrad[0]) &&
              same_d(cc.rotation_sigma_deg, cg.rotation_sigma_deg) && same_d(cc.curl_ratio, cg.curl_ratio) &&
              cc.geom.flip == cg.geom.flip,
          "the calibration differs: rotation %.17g vs %.17g, curl %.17g vs %.17g", cc.geom.rotation_deg,
          cg.geom.rotation_deg, cc.curl_ratio, cg.curl_ratio);
    printf("calibrate %s: %zu BF pixels, rotation %.6f deg: the CPU's bits\n", path, cg.n_bf, cg.geom.rotation_deg);

    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    go.threads = 1;
    ssb4d_G *Gc = NULL, *Gg = NULL;
    OK(ssb4d_gbuild(src, &cc.geom, cc.bf_pix, cc.n_bf, &go, NULL, &Gc, &err));
    cuda_start_opts so = {0, 64, 1}; /* chunks of 64 planes: the last one partial */
    OK(cuda_gbuild_qem(src, &cc.geom, cc.bf_pix, cc.n_bf, &go, &so, use_keep ? &keep : NULL, NULL, &Gg, &err));
    CHECK(!use_keep || keep, "the upload kept");
    cuda_start_free(keep);
    size_t ny, nx;
    ssb4d_G_scan_shape(Gc, &ny, &nx);
    size_t used = ny * (nx / 2 + 1) * 2;
    double worst = 0;
    size_t bad_tot = 0;
    for (size_t i = 0; i < cc.n_bf; i++) {
        const float *a = ssb4d_G_plane(Gc, i), *b = ssb4d_G_plane(Gg, i);
        CHECK(!a == !b, "plane %zu stored on one side only", i);
        if (!a || !b)
            continue;
        double amax = 0, dmax = 0;
        for (size_t j = 0; j < used; j++) {
            amax = fmax(amax, fabs(a[j]));
            dmax = fmax(dmax, fabs((double)a[j] - b[j]));
        }
        worst = fmax(worst, amax > 0 ? dmax / amax : dmax);
    }
    (void)bad_tot;
    CHECK(worst < 1e-5, "G differs from the CPU's by %.3g of a plane's largest value", worst);
    CHECK(ssb4d_G_dc(Gc) == ssb4d_G_dc(Gg), "dc %.17g vs %.17g", ssb4d_G_dc(Gc), ssb4d_G_dc(Gg));
    size_t now = 0, peak = 0;
    cuda_G_device_bytes(Gg, &now, &peak);
    CHECK(now > 0, "G's device copy");
    /* the passes run on the device copy: the loss equals the CPU backend's within 1e-5 */
    ssb4d_aberrations ab;
    memset(&ab, 0, sizeof ab);
    double lc = 0, lg = 0;
    OK(ssb4d_loss(Gc, &cc.geom, &ab, NULL, NULL, NULL, &lc, NULL, &err));
    OK(ssb4d_loss(Gg, &cc.geom, &ab, NULL, NULL, NULL, &lg, NULL, &err));
    CHECK(fabs(lc - lg) <= 1e-5 * fabs(lc), "loss %.10g (CPU) vs %.10g (GPU)", lc, lg);
    printf("G %s: %zu BF pixels, worst plane difference %.3g of its largest value, dc exact, loss %.8g vs %.8g\n", path,
           cc.n_bf, worst, lc, lg);
    ssb4d_G_free(Gc);
    ssb4d_G_free(Gg);
    ssb4d_calibration_free(&cc);
    ssb4d_calibration_free(&cg);
    ssb4d_source_close(src);
}

int main(void)
{
    if (!cuda_available()) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    static const char *golden[] = {"u16-masked-20x30x33x17.qem", "u16-mixed-23x24x9x9.qem", "u8-poisson-16x16x12x12.qem"};
    static const char *damaged[] = {"u16-mixed-23x24x9x9.stream-resealed.bad.qem",
                                    "u16-mixed-23x24x9x9.sparse-order-resealed.bad.qem",
                                    "u16-mixed-23x24x9x9.model-resealed.bad.qem"};
    char path[4096];
    for (size_t i = 0; i < sizeof golden / sizeof *golden; i++) {
        snprintf(path, sizeof path, "%s/qem-golden/%s", SSB4D_SHARED_DATA, golden[i]);
        if (access(path, R_OK) == 0)
            decode_same(path);
        else
            printf("%s: not here\n", path);
    }
    for (size_t i = 0; i < sizeof damaged / sizeof *damaged; i++) {
        snprintf(path, sizeof path, "%s/qem-golden/%s", SSB4D_SHARED_DATA, damaged[i]);
        if (access(path, R_OK) == 0)
            damaged_same(path);
    }
    /* a simulated acquisition: the tiny preset at 64x64 scans (several chunks' blocks) */
    ssb4d_sim_params sp;
    ssb4d_sim_info info;
    OK(ssb4d_sim_params_preset(&sp, "tiny", &err));
    sp.scan_n = 64;
    sp.scan_cells = 6;
    sp.ab.C_nm[SSB4D_C10] = 12, sp.ab.C_nm[SSB4D_C12] = 3, sp.ab.phi_deg[SSB4D_C12] = 35;
    char sim[] = "/tmp/ssb4d-gstart-XXXXXX";
    if (!mkdtemp(sim))
        return 1;
    snprintf(path, sizeof path, "%s/tiny.qem", sim);
    OK(ssb4d_simulate(&sp, path, 1, NULL, &info, &err));
    decode_same(path);
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    cp.kv = sp.kv, cp.semiangle_mrad = sp.semiangle_mrad;
    cp.scan_step_A[0] = cp.scan_step_A[1] = info.scan_step_A;
    start_same(path, &cp, 0); /* the rotation measured: the moments and the unflag pass */
    cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = info.det_sampling_mrad;
    cp.rotation_deg = 0;
    start_same(path, &cp, 1);
    unlink(path);
    rmdir(sim);
    printf("%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
