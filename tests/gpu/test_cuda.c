/* test_cuda.c — the CUDA backend against the CPU backend (SPEC §11): the same G on both, the
 * loss of fast-kernel, generic (C21, C30) and thick sets within 1e-5 relative, the mean phase, the
 * object and the upsampled preview within 2e-4 rad, a BF subset view, the fused release; the GPU's
 * own bits for any batch of candidates and on a repeat; a cancelled pass leaves G usable; the
 * standard fit within 0.02 nm / 0.2°; the session handle on the CUDA backend; the shared datasets
 * A1 and A2. Exits 77 (skipped) where no CUDA device is present. */
#include "cuda/cuda.h"
#include "cuda/memory.h"
#include "plan/device_model.h"
#include "session/handle_internal.h"
#include "common/clock.h"
#include "ref_ssb.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* max over pixels of |e^{ia} − e^{ib}| (phase difference, wrap-safe) */
static double phase_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(remainder((double)a[i] - (double)b[i], 2 * M_PI));
        m = d > m ? d : m;
    }
    return m;
}

typedef struct {
    ssb4d_source *src;
    ssb4d_calibration cal;
    ssb4d_G *cpu, *gpu;
    size_t ny, nx;
} pair;

static void pair_open(pair *p, ssb4d_source *src, const ssb4d_calib_params *cp)
{
    memset(p, 0, sizeof *p);
    p->src = src;
    OK(ssb4d_calibrate(src, cp, &p->cal, &err));
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    OK(ssb4d_gbuild(src, &p->cal.geom, p->cal.bf_pix, p->cal.n_bf, &go, NULL, &p->cpu, &err));
    OK(ssb4d_gbuild(src, &p->cal.geom, p->cal.bf_pix, p->cal.n_bf, &go, NULL, &p->gpu, &err));
    OK(cuda_G_attach(p->gpu, NULL, &err));
    size_t sh[4];
    ssb4d_source_shape(src, sh);
    p->ny = sh[0], p->nx = sh[1];
}

static void pair_close(pair *p)
{
    ssb4d_G_free(p->cpu);
    ssb4d_G_free(p->gpu);
    ssb4d_calibration_free(&p->cal);
    ssb4d_source_close(p->src);
}

static ssb4d_aberrations ab_of(double c10, double c12, double phi12)
{
    ssb4d_aberrations a;
    memset(&a, 0, sizeof a);
    a.C_nm[SSB4D_C10] = c10, a.C_nm[SSB4D_C12] = c12, a.phi_deg[SSB4D_C12] = phi12;
    return a;
}

/* loss and mean phase of one set on both Gs (f: upsampling of the mean phase) */
static void agree(const pair *p, const ssb4d_geometry *g, const ssb4d_aberrations *ab, const ssb4d_thick *th,
                  const char *what)
{
    size_t n = p->ny * p->nx;
    float *mc = malloc(n * sizeof *mc), *mg = malloc(n * sizeof *mg);
    double lc, lg;
    OK(ssb4d_loss(p->cpu, g, ab, th, NULL, NULL, &lc, mc, &err));
    OK(ssb4d_loss(p->gpu, g, ab, th, NULL, NULL, &lg, mg, &err));
    double rel = fabs(lg / lc - 1), dph = phase_diff(mc, mg, n);
    printf("  %-34s loss cpu %.10g gpu %.10g rel %.2e; mean phase max diff %.2e rad\n", what, lc, lg, rel, dph);
    CHECK(rel <= 1e-5, "%s: loss rel %.3g", what, rel);
    CHECK(dph <= 2e-4, "%s: mean phase %.3g rad", what, dph);
    OK(ssb4d_object(p->cpu, g, ab, th, 1, NULL, NULL, NULL, mc, &err));
    OK(ssb4d_object(p->gpu, g, ab, th, 1, NULL, NULL, NULL, mg, &err));
    dph = phase_diff(mc, mg, n);
    printf("  %-34s object phase max diff %.2e rad\n", what, dph);
    CHECK(dph <= 2e-4, "%s: object phase %.3g rad", what, dph);
    /* the transfer-corrected object: the backend's object, then the host's division (≤ 1/ε = 2×) */
    OK(ssb4d_object_transfer(p->cpu, g, ab, th, 1, SSB4D_TRANSFER_EPS, NULL, NULL, NULL, mc, &err));
    OK(ssb4d_object_transfer(p->gpu, g, ab, th, 1, SSB4D_TRANSFER_EPS, NULL, NULL, NULL, mg, &err));
    dph = phase_diff(mc, mg, n);
    printf("  %-34s transfer-corrected phase max diff %.2e rad\n", what, dph);
    CHECK(dph <= 4e-4, "%s: transfer-corrected phase %.3g rad", what, dph);
    free(mc), free(mg);
}

static void test_agreement(const pair *p)
{
    const ssb4d_geometry *g = &p->cal.geom;
    ssb4d_aberrations a = ab_of(12, 3, 35);
    agree(p, g, &a, NULL, "fast kernel (C10, C12)");
    ssb4d_aberrations z = ab_of(0, 0, 0);
    agree(p, g, &z, NULL, "zero aberrations (degenerate bins)");
    ssb4d_aberrations h = ab_of(-20, 6, -60);
    h.C_nm[SSB4D_C21] = 150, h.phi_deg[SSB4D_C21] = 20;
    h.C_nm[SSB4D_C30] = 5000;
    agree(p, g, &h, NULL, "generic kernel (C21, C30)");
    ssb4d_thick th = {{1.5, -0.7}, 20};
    agree(p, g, &a, &th, "thick model (20 nm, tilt)");
    ssb4d_geometry ga = *g;
    ga.det_sampling_mrad[1] *= 1.03;
    agree(p, &ga, &a, NULL, "anisotropic pixels");

    /* upsampled preview (f = 2) */
    size_t n2 = 4 * p->ny * p->nx;
    float *mc = malloc(n2 * sizeof *mc), *mg = malloc(n2 * sizeof *mg);
    OK(ssb4d_mean_phase_upsampled(p->cpu, g, &a, NULL, 2, NULL, NULL, mc, &err));
    OK(ssb4d_mean_phase_upsampled(p->gpu, g, &a, NULL, 2, NULL, NULL, mg, &err));
    double d = phase_diff(mc, mg, n2);
    printf("  upsampled x2 mean phase max diff %.2e rad\n", d);
    CHECK(d <= 2e-4, "upsampled mean phase %.3g", d);
    OK(ssb4d_object(p->cpu, g, &a, NULL, 2, NULL, NULL, NULL, mc, &err));
    OK(ssb4d_object(p->gpu, g, &a, NULL, 2, NULL, NULL, NULL, mg, &err));
    d = phase_diff(mc, mg, n2);
    printf("  upsampled x2 object phase max diff %.2e rad\n", d);
    CHECK(d <= 2e-4, "upsampled object phase %.3g", d);
    free(mc), free(mg);

    /* the fused release: the GPU's object and loss equal its two separate passes, bit for bit */
    size_t n = p->ny * p->nx;
    float *o1 = malloc(2 * n * sizeof *o1), *o2 = malloc(2 * n * sizeof *o2);
    double l1, l2;
    OK(ssb4d_object_loss(p->gpu, g, &a, NULL, NULL, NULL, o1, NULL, &l1, &err));
    OK(ssb4d_object(p->gpu, g, &a, NULL, 1, NULL, NULL, o2, NULL, &err));
    OK(ssb4d_loss(p->gpu, g, &a, NULL, NULL, NULL, &l2, NULL, &err));
    CHECK(l1 == l2 && !memcmp(o1, o2, 2 * n * sizeof *o1), "fused release differs from its two passes");
    free(o1), free(o2);

    /* a BF subset view of the GPU's G */
    size_t nb = ssb4d_G_n_bf(p->cpu), m = 0;
    size_t *idx = malloc(nb * sizeof *idx);
    for (size_t i = 0; i < nb; i += 3)
        idx[m++] = i;
    ssb4d_G *vc, *vg;
    OK(ssb_G_subset(p->cpu, idx, m, &vc, &err));
    OK(ssb_G_subset(p->gpu, idx, m, &vg, &err));
    double lc, lg;
    OK(ssb4d_loss(vc, g, &a, NULL, NULL, NULL, &lc, NULL, &err));
    OK(ssb4d_loss(vg, g, &a, NULL, NULL, NULL, &lg, NULL, &err));
    printf("  subset of %zu BF pixels: loss rel %.2e\n", m, fabs(lg / lc - 1));
    CHECK(fabs(lg / lc - 1) <= 1e-5, "subset loss");
    ssb4d_G_free(vc), ssb4d_G_free(vg);
    free(idx);
}

/* The band objective (the standard fit's default search) and its power, both in double. */
static void test_band(const pair *p)
{
    enum { N = 6 };
    ssb4d_aberrations ab[N];
    ssb4d_thick th[N];
    double rot[N];
    memset(th, 0, sizeof th);
    for (int i = 0; i < N; i++) {
        ab[i] = ab_of(-15 + 6 * i, 1 + i, -70 + 25 * i);
        rot[i] = (i % 3) * 2.5;
    }
    ab[4].C_nm[SSB4D_C21] = 100, ab[4].C_nm[SSB4D_C30] = 3000;
    th[2].thickness_nm = 15, th[2].tilt_mrad[0] = 1, th[5].thickness_nm = 25;
    ab[5].C_nm[SSB4D_C23] = 40;
    double fc[N], fg[N], pc, pg, worst = 0;
    OK(ssb4d_band_fit_rot(p->cpu, &p->cal.geom, rot, ab, th, N, NULL, NULL, fc, &err));
    OK(ssb4d_band_fit_rot(p->gpu, &p->cal.geom, rot, ab, th, N, NULL, NULL, fg, &err));
    for (int i = 0; i < N; i++) {
        double r = fabs(fg[i] / fc[i] - 1);
        worst = r > worst ? r : worst;
    }
    OK(ssb4d_band_power(p->cpu, &p->cal.geom, NULL, NULL, &pc, &err));
    OK(ssb4d_band_power(p->gpu, &p->cal.geom, NULL, NULL, &pg, &err));
    printf("  band objective (fast, generic, thick; 3 rotations): max rel %.2e; band power rel %.2e\n", worst,
           fabs(pg / pc - 1));
    CHECK(worst <= 1e-9, "band objective rel %.3g", worst);
    CHECK(fabs(pg / pc - 1) <= 1e-12, "band power");
    double one;
    OK(ssb4d_band_fit_rot(p->gpu, &p->cal.geom, rot + 4, ab + 4, th + 4, 1, NULL, NULL, &one, &err));
    CHECK(!memcmp(&one, &fg[4], sizeof one), "the GPU's band objective depends on the batch");
}

/* The GPU's bits: a candidate's loss is the same in a batch of 1, 5 or 64 and on a repeat. */
static void test_determinism(const pair *p)
{
    enum { N = 64 };
    ssb4d_aberrations ab[N];
    uint64_t s = 7;
    for (int i = 0; i < N; i++)
        ab[i] = ab_of(ref_urand(&s) * 80 - 40, ref_urand(&s) * 10, ref_urand(&s) * 180 - 90);
    double all[N], five[5], one;
    OK(ssb4d_loss_batch(p->gpu, &p->cal.geom, ab, NULL, N, NULL, NULL, all, &err));
    OK(ssb4d_loss_batch(p->gpu, &p->cal.geom, ab + 10, NULL, 5, NULL, NULL, five, &err));
    int same = 1;
    for (int i = 0; i < 5; i++)
        same &= !memcmp(&five[i], &all[10 + i], sizeof(double));
    for (int i = 0; i < N; i += 9) {
        OK(ssb4d_loss_batch(p->gpu, &p->cal.geom, &ab[i], NULL, 1, NULL, NULL, &one, &err));
        same &= !memcmp(&one, &all[i], sizeof one);
    }
    double again[N];
    OK(ssb4d_loss_batch(p->gpu, &p->cal.geom, ab, NULL, N, NULL, NULL, again, &err));
    same &= !memcmp(again, all, sizeof all);
    printf("  batch 64 / 5 / 1 and a repeat: %s\n", same ? "same bits" : "DIFFERENT");
    CHECK(same, "the GPU's loss depends on the batch");
}

static void test_cancel(const pair *p)
{
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_aberrations a = ab_of(12, 3, 35);
    double l = 0, l0 = 0;
    ssb4d_mem_cancel(mem); /* as a newer request or Ctrl-C does, from any thread */
    ssb4d_status st = ssb4d_loss(p->gpu, &p->cal.geom, &a, NULL, NULL, mem, &l, NULL, &err);
    printf("  cancelled pass: status %d (%s)\n", (int)st, st ? err.msg : "finished");
    CHECK(st == SSB4D_ECANCELLED, "a cancel was not honoured");
    ssb4d_mem_destroy(mem);
    OK(ssb4d_loss(p->gpu, &p->cal.geom, &a, NULL, NULL, NULL, &l, NULL, &err));
    OK(ssb4d_loss(p->cpu, &p->cal.geom, &a, NULL, NULL, NULL, &l0, NULL, &err));
    CHECK(fabs(l / l0 - 1) <= 1e-5, "G unusable after a cancel");
}

static void test_fit(const pair *p, const char *what)
{
    ssb4d_fit_params fp;
    ssb4d_fit_params_default(&fp);
    fp.rotation_given = 1;
    ssb4d_fit_result rc, rg;
    double t0 = ssb_clock_s();
    OK(ssb4d_fit(p->cpu, &p->cal.geom, &fp, NULL, &rc, &err));
    double t1 = ssb_clock_s();
    OK(ssb4d_fit(p->gpu, &p->cal.geom, &fp, NULL, &rg, &err));
    double t2 = ssb_clock_s();
    double dc10 = fabs(rc.ab.C_nm[SSB4D_C10] - rg.ab.C_nm[SSB4D_C10]);
    double dc12 = fabs(rc.ab.C_nm[SSB4D_C12] - rg.ab.C_nm[SSB4D_C12]);
    double dphi = fabs(remainder(rc.ab.phi_deg[SSB4D_C12] - rg.ab.phi_deg[SSB4D_C12], 180.0));
    printf("  %s fit: cpu C10 %.4f C12 %.4f phi12 %.3f (%.2f s, %zu evals) | gpu C10 %.4f C12 %.4f phi12 %.3f "
           "(%.2f s, %zu evals); |dC10| %.4f |dC12| %.4f |dphi12| %.3f\n",
           what, rc.ab.C_nm[SSB4D_C10], rc.ab.C_nm[SSB4D_C12], rc.ab.phi_deg[SSB4D_C12], t1 - t0, rc.evaluations,
           rg.ab.C_nm[SSB4D_C10], rg.ab.C_nm[SSB4D_C12], rg.ab.phi_deg[SSB4D_C12], t2 - t1, rg.evaluations, dc10,
           dc12, dphi);
    CHECK(dc10 <= 0.02 && dc12 <= 0.02 && dphi <= 0.2, "%s: the fits disagree", what);
    ssb4d_fit_result_free(&rc), ssb4d_fit_result_free(&rg);
}

static void test_session(const uint16_t *counts, const size_t shape[4], const ssb4d_calib_params *cp)
{
    ssb4d_session_opts o;
    ssb4d_session_opts_default(&o);
    o.calib = *cp;
    o.backend = SSB4D_BACKEND_CUDA;
    ssb4d_session *s = NULL;
    OK(ssb4d_session_open_memory(counts, SSB4D_U16, shape, &o, &s, &err));
    CHECK(!strcmp(ssb4d_session_backend(s), "cuda"), "backend %s", ssb4d_session_backend(s));
    ssb4d_fit_params fp;
    ssb4d_fit_params_default(&fp);
    ssb4d_fit_result r;
    OK(ssb4d_session_fit(s, &fp, &r, &err));
    printf("  session on cuda: C10 %.3f C12 %.3f phi12 %.2f loss %.6g\n", r.ab.C_nm[SSB4D_C10], r.ab.C_nm[SSB4D_C12],
           r.ab.phi_deg[SSB4D_C12], r.loss);
    ssb4d_fit_result_free(&r);
    /* Issue 41 item 5: the session's device peak against its plan (plan_device_session, the
     * model session_device_check checks G against) to the byte, after what the model replays: the fit
     * (above), a drag preview, a release, the object at the session's upsampling. */
    dev_session_in in;
    session_handle_device_model(s, &in);
    const ssb4d_G *G = session_handle_G(s);
    size_t ny2, nx2, now = 0, peak = 0;
    const int f = in.f ? in.f : 2;
    OK(ssb4d_session_image_shape(s, f, &ny2, &nx2, &err));
    float *img = malloc(2 * ny2 * nx2 * sizeof *img);
    double loss;
    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    q.upsample = f, q.subset = in.subset;
    OK(ssb4d_session_preview(s, &q, img, NULL, &err));
    OK(ssb4d_session_release(s, NULL, img, &loss, &err));
    OK(ssb4d_session_object(s, f, NULL, img, &err));
    cuda_G_device_bytes(G, &now, &peak);
    size_t here = 0;
    for (size_t ib = 0; ib < G->n_bf; ib++)
        here += G_stored(G, ib);
    in.ny = G->ny, in.nx = G->nx, in.n_bf = G->n_bf, in.n_stored = here, in.fft_work = cuda_fft_work_bytes;
    dev_model m;
    dev_model_session(&in, &m);
    const size_t want = dev_model_bytes(&m);
    printf("  session device bytes: measured peak %zu; the plan's model %zu (planes %zu, work %zu; fit: %zu of %zu "
           "BF pixels coarse, %zu sets, band %d)\n",
           peak, want, m.planes, dev_model_work_bytes(&m), in.n_coarse, in.n_fit, in.sets_coarse, in.band);
    for (size_t k = 0; k < m.n_stages; k++)
        printf("    %-34s %8zu B after %zu\n", m.stages[k].name, m.stages[k].bytes, m.stages[k].after);
    CHECK(peak == want, "the session's device peak %zu is not its plan's %zu", peak, want);
    free(img);
    ssb4d_session_close(s);
}

static void shared_set(const ref_shared_set *ds)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/sim/%s", SSB4D_SHARED_DATA, ds->counts);
    ssb4d_source *src;
    if (ssb4d_source_open_npy(path, &src, &err)) {
        printf("  %s: not here (%s), skipped\n", ds->counts, err.msg);
        return;
    }
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    cp.kv = ds->g.kv, cp.semiangle_mrad = ds->g.semiangle_mrad;
    cp.scan_step_A[0] = ds->g.scan_step_A[0], cp.scan_step_A[1] = ds->g.scan_step_A[1];
    cp.det_sampling_mrad[0] = ds->g.det_sampling_mrad[0], cp.det_sampling_mrad[1] = ds->g.det_sampling_mrad[1];
    cp.rotation_deg = ds->g.rotation_deg;
    cp.centre_px[0] = ds->g.centre_px[0], cp.centre_px[1] = ds->g.centre_px[1];
    cp.bf_radius_px = ds->radius;
    pair p;
    pair_open(&p, src, &cp);
    printf("%s: %zu BF pixels\n", ds->counts, p.cal.n_bf);
    ssb4d_aberrations t = ab_of(ds->C10, ds->C12, ds->phi12);
    agree(&p, &p.cal.geom, &t, NULL, "truth");
    test_fit(&p, ds->counts);
    pair_close(&p);
}

static void test_device_bytes(const pair *p, int fused);

/* Issue 41: the fused loss (src/cuda/loss_fused.cu) against the cuFFT path on the same device
 * copy (cuda_G_loss_fused), and both against the CPU: fast, generic and thick sets, the loss
 * within 1e-6 relative of the cuFFT path's (a different float order in the transform), the mean
 * phase within 2e-5 rad. */
static void test_fused(const pair *p)
{
    const size_t n = p->ny * p->nx;
    ssb4d_aberrations ab[3] = {ab_of(12, 3, 35), ab_of(-20, 5, -60), ab_of(8, 1, 10)};
    ab[1].C_nm[SSB4D_C30] = 3000, ab[1].C_nm[SSB4D_C21] = 150, ab[1].phi_deg[SSB4D_C21] = 20;
    ssb4d_thick th[3];
    memset(th, 0, sizeof th);
    th[2].thickness_nm = 12;
    const char *what[3] = {"fast", "generic (C30, C21)", "thick 12 nm"};
    float *mf = malloc(n * sizeof *mf), *mc = malloc(n * sizeof *mc), *mu = malloc(n * sizeof *mu);
    for (int k = 0; k < 3; k++) {
        double lf, lc, lu;
        const ssb4d_thick *t = k == 2 ? &th[2] : NULL;
        int was = cuda_G_loss_fused(p->gpu, 1);
        OK(ssb4d_loss(p->gpu, &p->cal.geom, &ab[k], t, NULL, NULL, &lf, mf, &err));
        cuda_G_loss_fused(p->gpu, 0);
        OK(ssb4d_loss(p->gpu, &p->cal.geom, &ab[k], t, NULL, NULL, &lc, mc, &err));
        cuda_G_loss_fused(p->gpu, was);
        OK(ssb4d_loss(p->cpu, &p->cal.geom, &ab[k], t, NULL, NULL, &lu, mu, &err));
        double rel = fabs(lf / lc - 1), relu = fabs(lf / lu - 1), relc = fabs(lc / lu - 1);
        double dph = phase_diff(mf, mc, n);
        printf("  fused %-20s loss %.10g, cuFFT path %.10g (rel %.2e), CPU %.10g (fused rel %.2e, cuFFT rel "
               "%.2e); mean phase vs cuFFT path %.2e rad\n",
               what[k], lf, lc, rel, lu, relu, relc, dph);
        CHECK(rel <= 1e-6, "%s: fused loss rel %.3g to the cuFFT path", what[k], rel);
        CHECK(relu <= 1e-5, "%s: fused loss rel %.3g to the CPU", what[k], relu);
        CHECK(dph <= 2e-5, "%s: fused mean phase %.3g rad from the cuFFT path's", what[k], dph);
    }
    free(mf), free(mc), free(mu);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && !strcmp(argv[1], "--quick"); /* no fits: for compute-sanitizer */
    if (!cuda_available()) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    char name[128];
    size_t mem = 0;
    cuda_device_info(name, sizeof name, &mem);
    printf("device: %s, %.1f GiB\n", name, (double)mem / (1 << 30));
    ssb4d_sim_params sp;
    ssb4d_sim_info info;
    OK(ssb4d_sim_params_preset(&sp, "tiny", &err));
    sp.scan_n = 64;
    sp.scan_cells = 6;
    sp.ab.C_nm[SSB4D_C10] = 12, sp.ab.C_nm[SSB4D_C12] = 3, sp.ab.phi_deg[SSB4D_C12] = 35;
    OK(ssb4d_sim_describe(&sp, &info, &err));
    size_t shape[4] = {(size_t)sp.scan_n, (size_t)sp.scan_n, (size_t)sp.det, (size_t)sp.det};
    uint16_t *counts = malloc(shape[0] * shape[1] * shape[2] * shape[3] * sizeof *counts);
    OK(ssb4d_simulate_to_memory(&sp, counts, NULL, NULL, NULL, &info, &err));
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    cp.kv = sp.kv, cp.semiangle_mrad = sp.semiangle_mrad;
    cp.scan_step_A[0] = cp.scan_step_A[1] = info.scan_step_A;
    cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = info.det_sampling_mrad;
    cp.rotation_deg = 0;
    ssb4d_source *src;
    OK(ssb4d_source_from_memory(counts, SSB4D_U16, shape, &src, &err));
    pair p;
    pair_open(&p, src, &cp);
    printf("tiny 64x64 scan, %zu BF pixels\n", p.cal.n_bf);
    test_agreement(&p);
    test_determinism(&p);
    test_band(&p);
    test_cancel(&p);
    test_fused(&p);
    test_device_bytes(&p, 1);
    test_device_bytes(&p, 0);
    if (!quick)
        test_fit(&p, "tiny");
    pair_close(&p);
    if (!quick)
        test_session(counts, shape, &cp);
    free(counts);
    if (!quick) {
        shared_set(&REF_SET_A1);
        shared_set(&REF_SET_A2);
    }
    printf("%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}

/* Issue 31: the device bytes, planned to the byte. A fresh device copy of G runs a loss batch of
 * 8 sets, a drag preview (the object at f = 2 of every 2nd BF pixel, a view) and a release (the
 * object's phase and the exact loss fused, f = 1); the peak cuda_G_device_bytes measures, and
 * what it holds after, equal the device model's replay of the same passes (plan/device_model.h,
 * cuFFT's work area from cuda_fft_work_bytes). */
static void test_device_bytes(const pair *p, int fused)
{
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    ssb4d_G *G = NULL;
    OK(ssb4d_gbuild(p->src, &p->cal.geom, p->cal.bf_pix, p->cal.n_bf, &go, NULL, &G, &err));
    OK(cuda_G_attach(G, NULL, &err));
    cuda_G_loss_fused(G, fused);
    const ssb4d_geometry *g = &p->cal.geom;
    const size_t n_bf = G->n_bf, npix = p->ny * p->nx;
    size_t n_slots = 0;
    for (size_t ib = 0; ib < n_bf; ib++)
        n_slots += G_stored(G, ib);
    ssb4d_aberrations ab[8];
    double loss[8];
    for (int i = 0; i < 8; i++)
        ab[i] = ab_of(10 + i, 2 + 0.25 * i, 5 * i);
    OK(ssb4d_loss_batch(G, g, ab, NULL, 8, NULL, NULL, loss, &err));
    size_t n_sub = (n_bf + 1) / 2, *idx = malloc(n_sub * sizeof *idx);
    for (size_t i = 0; i < n_sub; i++)
        idx[i] = 2 * i;
    ssb4d_G *sub = NULL;
    OK(ssb_G_subset(G, idx, n_sub, &sub, &err));
    float *ph = malloc(4 * npix * sizeof *ph);
    OK(ssb4d_object(sub, g, &ab[0], NULL, 2, NULL, NULL, NULL, ph, &err));
    ssb4d_G_free(sub);
    double l1;
    OK(ssb4d_object_loss(G, g, &ab[0], NULL, NULL, NULL, NULL, ph, &l1, &err));
    size_t now = 0, peak = 0;
    cuda_G_device_bytes(G, &now, &peak);

    dev_model m;
    dev_model_init(&m, p->ny, p->nx, n_slots, G->plane_stride, cuda_fft_work_bytes);
    m.fused = fused;
    dev_model_phases(&m, "loss batch", n_bf, 8, 1, 1, 0, 0);
    dev_model_phases(&m, "drag preview", n_sub, 1, 2, 0, 0, 1);
    dev_model_phases(&m, "release", n_bf, 1, 1, 1, 0, 1);
    const size_t want = dev_model_bytes(&m);
    printf("  device bytes (%s): measured peak %zu, held %zu; the model's peak %zu (planes %zu, work %zu, cuFFT %zu)"
           "\n", fused ? "fused loss" : "cuFFT path", peak, now, want, m.planes, dev_model_work_bytes(&m), m.buf[DEV_WORK]);
    CHECK(peak == want, "the device peak %zu is not the model's %zu", peak, want);
    CHECK(now == want, "the device holds %zu after the passes, the model %zu", now, want);
    free(ph), free(idx);
    ssb4d_G_free(G);
}
