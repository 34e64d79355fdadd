/* test_ssb.c — the library's G build and SSB (float32) against the float64 reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ref_ssb.h"
#include "ssb4d_advanced.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static uint64_t rng_state = 4242;
static double urand(void) { return ref_urand(&rng_state); }

/* ------------------------------------------------------------------ fixture: synthetic data */

typedef struct {
    ref_sim sim;
    ssb4d_aberrations truth;
    int32_t *bf;
    size_t nbf;
    ref_data ref;
    ssb4d_source *src;
    ssb4d_mem *mem;
    ssb4d_G *G;      /* default build (store_inactive 0) */
    size_t ny, nx;
} fixture;

static fixture FX;

#define CHECK_OK(call)                                                                        \
    do {                                                                                      \
        ssb4d_err e_;                                                                         \
        memset(&e_, 0, sizeof e_);                                                            \
        ssb4d_status s_ = (call);                                                             \
        if (s_ != SSB4D_OK)                                                                   \
            fprintf(stderr, "%s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call, (int)s_,       \
                    e_.msg);                                                                  \
        assert_int_equal(s_, SSB4D_OK);                                                       \
    } while (0)
#define ERR (&e_)

static ssb4d_G *build_G(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf, size_t nbf,
                        int store_inactive, int threads, size_t block_bytes)
{
    ssb4d_gbuild_opts o;
    ssb4d_gbuild_opts_default(&o);
    o.store_inactive = store_inactive;
    o.threads = threads;
    o.block_bytes = block_bytes;
    ssb4d_G *G = NULL;
    CHECK_OK(ssb4d_gbuild(src, g, bf, nbf, &o, FX.mem, &G, ERR));
    return G;
}

static double lib_loss(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                       const ssb4d_thick *th, ssb4d_path path, int threads, float *mp)
{
    ssb4d_ssb_opts o;
    ssb4d_ssb_opts_default(&o);
    o.path = path;
    o.threads = threads;
    double loss = NAN;
    CHECK_OK(ssb4d_loss(G, g, ab, th, &o, FX.mem, &loss, mp, ERR));
    return loss;
}

static int setup(void **state)
{
    (void)state;
    memset(&FX, 0, sizeof FX);
    ref_sim_params p;
    ref_sim_params_scene(&p, 7); /* non-square scan, unequal detector sampling */
    if (ref_simulate(&p, &FX.sim))
        return -1;
    FX.truth = p.ab;
    /* selection radius beyond the disk edge: includes aperture-inactive pixels */
    FX.nbf = ref_select_bf_mrad(&FX.sim.geom, FX.sim.shape[2], FX.sim.shape[3], 28.0, &FX.bf);
    if (ref_data_from_u32(&FX.ref, FX.sim.counts, FX.sim.shape, FX.bf, FX.nbf))
        return -1;
    FX.ny = FX.sim.shape[0];
    FX.nx = FX.sim.shape[1];
    FX.mem = ssb4d_mem_create(0);
    ssb4d_err e;
    if (ssb4d_source_from_memory(FX.sim.counts, SSB4D_U32, FX.sim.shape, &FX.src, &e))
        return -1;
    ssb4d_gbuild_opts o;
    ssb4d_gbuild_opts_default(&o);
    if (ssb4d_gbuild(FX.src, &FX.sim.geom, FX.bf, FX.nbf, &o, FX.mem, &FX.G, &e)) {
        fprintf(stderr, "gbuild: %s\n", e.msg);
        return -1;
    }
    printf("synthetic: scan %zux%zu, detector %zux%zu, %zu BF selected, %zu stored\n", FX.ny,
           FX.nx, FX.sim.shape[2], FX.sim.shape[3], FX.nbf, ssb4d_G_n_stored(FX.G));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ssb4d_G_free(FX.G);
    ssb4d_source_close(FX.src);
    ssb4d_mem_destroy(FX.mem);
    ref_data_free(&FX.ref);
    free(FX.bf);
    ref_sim_free(&FX.sim);
    return 0;
}

static double max_abs_diff_fd(const float *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m)
            m = d;
    }
    return m;
}

static double max_abs_diff_f(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/* phase difference wrapped to (−π, π] */
static double max_phase_diff_fd(const float *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = remainder((double)a[i] - b[i], 2 * M_PI);
        if (fabs(d) > m)
            m = fabs(d);
    }
    return m;
}

static ssb4d_aberrations random_aberr(int with_c3)
{
    ssb4d_aberrations ab;
    memset(&ab, 0, sizeof ab);
    ab.C_nm[SSB4D_C10] = 60.0 * urand() - 30.0;
    ab.C_nm[SSB4D_C12] = 8.0 * urand();
    ab.phi_deg[SSB4D_C12] = 360.0 * urand() - 180.0;
    if (with_c3) {
        ab.C_nm[SSB4D_C30] = 4000.0 * urand() - 2000.0;
        ab.C_nm[SSB4D_C32] = 1000.0 * urand();
        ab.phi_deg[SSB4D_C32] = 360.0 * urand() - 180.0;
    }
    return ab;
}

/* ------------------------------------------------------------------ G */

static void test_G_vs_reference(void **state)
{
    (void)state;
    const ssb4d_G *G = FX.G;
    size_t ny, nx;
    ssb4d_G_scan_shape(G, &ny, &nx);
    assert_int_equal(ny, FX.ny);
    assert_int_equal(nx, FX.nx);
    assert_int_equal(ssb4d_G_n_bf(G), FX.nbf);
    assert_true(fabs(ssb4d_G_dc(G) / FX.ref.dc - 1.0) < 1e-15);
    size_t nxh = nx / 2 + 1, n_stored = 0, n_inactive = 0;
    double maxrel = 0;
    ref_optics o;
    ref_optics_init(&o, &FX.sim.geom, NULL, NULL);
    for (size_t i = 0; i < FX.nbf; i++) {
        double kx, ky;
        ref_k_vector(&FX.sim.geom, o.lambda, FX.bf[i], FX.ref.det_cols, &kx, &ky);
        int active = ref_aperture(&o, kx, ky) > 0.0;
        const float *pl = ssb4d_G_plane(G, i);
        if (!active)
            n_inactive++;
        if (active)
            assert_non_null(pl);
        if (!pl)
            continue;
        n_stored++;
        const double complex *R = FX.ref.G + i * ny * nx;
        double gmax = 0, dmax = 0;
        for (size_t a = 0; a < ny; a++)
            for (size_t b = 0; b < nxh; b++) {
                double complex l = pl[2 * (a * nxh + b)] + I * pl[2 * (a * nxh + b) + 1];
                double complex r = R[a * nx + b];
                if (cabs(r) > gmax)
                    gmax = cabs(r);
                if (cabs(l - r) > dmax)
                    dmax = cabs(l - r);
            }
        if (dmax / gmax > maxrel)
            maxrel = dmax / gmax;
    }
    printf("G vs reference: max |dG|/max|G| = %.3g over %zu stored planes (%zu inactive of %zu)\n",
           maxrel, n_stored, n_inactive, FX.nbf);
    assert_int_equal(n_stored, ssb4d_G_n_stored(G));
    assert_true(n_inactive > 0); /* the fixture must exercise unstored pixels */
    assert_true(maxrel < 1e-5);
}

/* ------------------------------------------------------------------ loss and mean phase */

static void test_f32_vs_f64(void **state)
{
    (void)state;
    size_t N = FX.ny * FX.nx;
    float *mp = malloc(sizeof(float) * N);
    double *rmp = malloc(sizeof(double) * N);
    double worst_l = 0, worst_p = 0;
    for (int s = 0; s < 8; s++) {
        ssb4d_aberrations ab = s == 0 ? FX.truth : random_aberr(s >= 5);
        ssb4d_thick th = {{1.5, -0.8}, 12.0};
        const ssb4d_thick *tp = (s == 7) ? &th : NULL;
        double l = lib_loss(FX.G, &FX.sim.geom, &ab, tp, SSB4D_PATH_AUTO, 0, mp);
        double r = ref_loss(&FX.ref, &FX.sim.geom, &ab, tp, rmp);
        double rel = fabs(l / r - 1.0), dp = max_abs_diff_fd(mp, rmp, N);
        printf("  set %d C10 %7.2f C12 %5.2f phi %7.1f C30 %8.1f C32 %6.1f%s: loss %.8g ref %.8g "
               "rel %.2e, mean phase max|d| %.2e\n", s, ab.C_nm[0], ab.C_nm[1], ab.phi_deg[1],
               ab.C_nm[SSB4D_C30], ab.C_nm[SSB4D_C32], tp ? " thick" : "", l, r, rel, dp);
        if (rel > worst_l)
            worst_l = rel;
        if (dp > worst_p)
            worst_p = dp;
        assert_true(rel <= 1e-5);
        assert_true(dp <= 2e-4);
    }
    printf("f32 vs f64: worst loss rel %.2e, worst mean phase %.2e rad\n", worst_l, worst_p);
    free(mp);
    free(rmp);
}

static void test_real_vs_complex(void **state)
{
    (void)state;
    size_t N = FX.ny * FX.nx;
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    float *c = malloc(sizeof(float) * N);
    double wl = 0, wp = 0;
    for (int s = 0; s < 6; s++) {
        ssb4d_aberrations ab = s == 0 ? FX.truth : random_aberr(s >= 3);
        ssb4d_thick th = {{2.0, 1.0}, 8.0};
        const ssb4d_thick *tp = (s == 5) ? &th : NULL;
        double lr = lib_loss(FX.G, &FX.sim.geom, &ab, tp, SSB4D_PATH_REAL, 0, a);
        double lc = lib_loss(FX.G, &FX.sim.geom, &ab, tp, SSB4D_PATH_COMPLEX, 0, b);
        double la = lib_loss(FX.G, &FX.sim.geom, &ab, tp, SSB4D_PATH_AUTO, 0, c);
        double rel = fabs(lr / lc - 1.0), dp = 0;
        for (size_t i = 0; i < N; i++)
            if (fabs(a[i] - b[i]) > dp)
                dp = fabs(a[i] - b[i]);
        if (rel > wl)
            wl = rel;
        if (dp > wp)
            wp = dp;
        assert_true(rel <= 1e-6);
        assert_true(dp <= 1e-5);
        /* AUTO picks the real path for even-m */
        assert_memory_equal(&la, &lr, sizeof la);
        assert_memory_equal(c, a, sizeof(float) * N);
    }
    printf("real vs complex path: worst loss rel %.2e, worst phase %.2e rad\n", wl, wp);
    free(a);
    free(b);
    free(c);
}

static void test_odd_m_complex(void **state)
{
    (void)state;
    size_t N = FX.ny * FX.nx;
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    double *r = malloc(sizeof(double) * N);
    for (int s = 0; s < 3; s++) {
        ssb4d_aberrations ab = random_aberr(s == 2);
        ab.C_nm[SSB4D_C21] = 50.0 + 100.0 * urand();
        ab.phi_deg[SSB4D_C21] = 360.0 * urand();
        if (s == 1) {
            ab.C_nm[SSB4D_C23] = 80.0;
            ab.phi_deg[SSB4D_C23] = 12.0;
        }
        double lc = lib_loss(FX.G, &FX.sim.geom, &ab, NULL, SSB4D_PATH_COMPLEX, 0, a);
        double la = lib_loss(FX.G, &FX.sim.geom, &ab, NULL, SSB4D_PATH_AUTO, 0, b);
        double lr = ref_loss(&FX.ref, &FX.sim.geom, &ab, NULL, r);
        double rel = fabs(lc / lr - 1.0), dp = max_abs_diff_fd(a, r, N);
        double rel_real = fabs(la / lc - 1.0), dp_real = max_abs_diff_f(a, b, N);
        printf("  odd-m set %d (C21 %.1f nm): loss %.8g ref %.8g rel %.2e, phase %.2e; real path "
               "rel %.2e, phase %.2e\n", s, ab.C_nm[SSB4D_C21], lc, lr, rel, dp, rel_real, dp_real);
        assert_true(rel <= 1e-5);
        assert_true(dp <= 2e-4);
        /* SPEC 5.4's γ is anti-Hermitian for odd m too: AUTO takes the real path, which equals the
         * complex one to rounding */
        assert_true(rel_real <= 1e-5);
        assert_true(dp_real <= 2e-4);
    }
    free(a);
    free(b);
    free(r);
}

/* ------------------------------------------------------------------ invariances */

static void test_store_inactive(void **state)
{
    (void)state;
    ssb4d_G *G1 = build_G(FX.src, &FX.sim.geom, FX.bf, FX.nbf, 1, 0, 0);
    assert_int_equal(ssb4d_G_n_stored(G1), FX.nbf);
    assert_true(ssb4d_G_n_stored(FX.G) < FX.nbf);
    size_t N = FX.ny * FX.nx;
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    float *oa = malloc(sizeof(float) * 2 * N), *ob = malloc(sizeof(float) * 2 * N);
    for (int s = 0; s < 3; s++) {
        ssb4d_aberrations ab = s == 0 ? FX.truth : random_aberr(s == 2);
        if (s == 2)
            ab.C_nm[SSB4D_C21] = 70.0;
        double l0 = lib_loss(FX.G, &FX.sim.geom, &ab, NULL, SSB4D_PATH_AUTO, 0, a);
        double l1 = lib_loss(G1, &FX.sim.geom, &ab, NULL, SSB4D_PATH_AUTO, 0, b);
        assert_memory_equal(&l0, &l1, sizeof l0);
        assert_memory_equal(a, b, sizeof(float) * N);
        ssb4d_ssb_opts o;
        ssb4d_ssb_opts_default(&o);
        CHECK_OK(ssb4d_object(FX.G, &FX.sim.geom, &ab, NULL, 1, &o, FX.mem, oa, a, ERR));
        CHECK_OK(ssb4d_object(G1, &FX.sim.geom, &ab, NULL, 1, &o, FX.mem, ob, b, ERR));
        assert_memory_equal(oa, ob, sizeof(float) * 2 * N);
        assert_memory_equal(a, b, sizeof(float) * N);
    }
    ssb4d_G_free(G1);
    free(a);
    free(b);
    free(oa);
    free(ob);
}

static void test_rotation_retarget(void **state)
{
    (void)state;
    ssb4d_geometry g30 = FX.sim.geom;
    g30.rotation_deg = 30.0;
    size_t N = FX.ny * FX.nx;
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    for (int si = 1; si >= 0; si--) {
        ssb4d_G *G0 = build_G(FX.src, &FX.sim.geom, FX.bf, FX.nbf, si, 0, 0);
        ssb4d_G *G30 = build_G(FX.src, &g30, FX.bf, FX.nbf, si, 0, 0);
        char h0[65], h30[65];
        ssb4d_G_sha256(G0, h0);
        ssb4d_G_sha256(G30, h30);
        int same_store = ssb4d_G_n_stored(G0) == ssb4d_G_n_stored(G30);
        int same = 1;
        for (int s = 0; s < 3; s++) {
            ssb4d_aberrations ab = s == 0 ? FX.truth : random_aberr(s == 2);
            if (s == 2)
                ab.C_nm[SSB4D_C21] = 60.0;
            double l0 = lib_loss(G0, &g30, &ab, NULL, SSB4D_PATH_AUTO, 0, a);
            double l1 = lib_loss(G30, &g30, &ab, NULL, SSB4D_PATH_AUTO, 0, b);
            int eq = memcmp(&l0, &l1, sizeof l0) == 0 && memcmp(a, b, sizeof(float) * N) == 0;
            same &= eq;
            if (si)
                assert_true(eq);
        }
        printf("rotation retarget (store_inactive %d): G sha %s, stored %zu vs %zu, results %s\n",
               si, strcmp(h0, h30) ? "differ" : "equal", ssb4d_G_n_stored(G0),
               ssb4d_G_n_stored(G30), same ? "bit-identical" : "DIFFER");
        if (same_store)
            assert_true(same);
        ssb4d_G_free(G0);
        ssb4d_G_free(G30);
    }
    /* and at 30° the library still matches the reference */
    double *r = malloc(sizeof(double) * N);
    double l = lib_loss(FX.G, &g30, &FX.truth, NULL, SSB4D_PATH_AUTO, 0, a);
    double lr = ref_loss(&FX.ref, &g30, &FX.truth, NULL, r);
    assert_true(fabs(l / lr - 1) < 1e-5);
    assert_true(max_abs_diff_fd(a, r, N) < 2e-4);
    free(r);
    free(a);
    free(b);
}

/* ------------------------------------------------------------------ object and upsampling */

static void test_object_native(void **state)
{
    (void)state;
    size_t N = FX.ny * FX.nx;
    float *obj = malloc(sizeof(float) * 2 * N), *ph = malloc(sizeof(float) * N);
    double complex *robj = malloc(sizeof(double complex) * N);
    double *rph = malloc(sizeof(double) * N);
    for (int s = 0; s < 3; s++) {
        ssb4d_aberrations ab = s == 0 ? FX.truth : random_aberr(1);
        if (s == 2)
            ab.C_nm[SSB4D_C21] = 40.0;
        ssb4d_ssb_opts o;
        ssb4d_ssb_opts_default(&o);
        CHECK_OK(ssb4d_object(FX.G, &FX.sim.geom, &ab, NULL, 1, &o, FX.mem, obj, ph, ERR));
        ref_object(&FX.ref, &FX.sim.geom, &ab, NULL, 1, robj, rph);
        double omax = 0, dmax = 0;
        for (size_t i = 0; i < N; i++) {
            double complex l = obj[2 * i] + I * obj[2 * i + 1];
            if (cabs(robj[i]) > omax)
                omax = cabs(robj[i]);
            if (cabs(l - robj[i]) > dmax)
                dmax = cabs(l - robj[i]);
        }
        double dp = max_phase_diff_fd(ph, rph, N);
        printf("  object f=1 set %d: max|dO|/max|O| %.2e, phase %.2e\n", s, dmax / omax, dp);
        assert_true(dmax / omax < 1e-5);
        assert_true(dp < 2e-4);
    }
    double c = ref_correlation(rph, FX.sim.phase_band, N);
    printf("synthetic: reference phase-of-mean vs band-limited truth corr %.4f (native grid)\n", c);
    free(obj);
    free(ph);
    free(robj);
    free(rph);
}

/* The fused release (ssb4d_object_loss): the object at native sampling and the exact loss in one
 * pass, the same bits as ssb4d_object (f = 1) and ssb4d_loss, for the fast kernel, the generic one
 * (odd m, a thick model), 1 and 2 threads, any tile, and the complex path (two passes). */
static void test_object_loss_fused(void **state)
{
    (void)state;
    size_t N = FX.ny * FX.nx;
    float *oa = malloc(sizeof(float) * 2 * N), *ob = malloc(sizeof(float) * 2 * N);
    float *pa = malloc(sizeof(float) * N), *pb = malloc(sizeof(float) * N);
    for (int s = 0; s < 4; s++) {
        ssb4d_aberrations ab = s == 0 ? FX.truth : random_aberr(s == 2);
        if (s == 2)
            ab.C_nm[SSB4D_C21] = 60.0;
        ssb4d_thick th = {{1.5, -0.5}, 8.0};
        const ssb4d_thick *thick = s == 3 ? &th : NULL;
        for (int v = 0; v < 4; v++) {
            ssb4d_ssb_opts o;
            ssb4d_ssb_opts_default(&o);
            o.threads = v == 1 ? 1 : 2;
            o.loss_tile = v == 2 ? 3 : 0;
            o.path = v == 3 ? SSB4D_PATH_COMPLEX : SSB4D_PATH_AUTO;
            double la = 0, lb = 1;
            CHECK_OK(ssb4d_object(FX.G, &FX.sim.geom, &ab, thick, 1, &o, FX.mem, oa, pa, ERR));
            CHECK_OK(ssb4d_loss(FX.G, &FX.sim.geom, &ab, thick, &o, FX.mem, &la, NULL, ERR));
            memset(ob, 0, sizeof(float) * 2 * N);
            CHECK_OK(ssb4d_object_loss(FX.G, &FX.sim.geom, &ab, thick, &o, FX.mem, ob, pb, &lb, ERR));
            assert_memory_equal(&la, &lb, sizeof la);
            assert_memory_equal(oa, ob, sizeof(float) * 2 * N);
            assert_memory_equal(pa, pb, sizeof(float) * N);
            /* the phase alone */
            CHECK_OK(ssb4d_object_loss(FX.G, &FX.sim.geom, &ab, thick, &o, FX.mem, NULL, pb, &lb, ERR));
            assert_memory_equal(&la, &lb, sizeof la);
            assert_memory_equal(pa, pb, sizeof(float) * N);
        }
    }
    ssb4d_err e = {0};
    assert_int_equal(ssb4d_object_loss(FX.G, &FX.sim.geom, &FX.truth, NULL, NULL, FX.mem, NULL, NULL, NULL, &e),
                     SSB4D_EINVAL);
    free(oa);
    free(ob);
    free(pa);
    free(pb);
}

static void test_upsampled(void **state)
{
    (void)state;
    for (int f = 2; f <= 3; f++) {
        size_t NF = (size_t)f * FX.ny * (size_t)f * FX.nx;
        float *ph = malloc(sizeof(float) * NF), *mp = malloc(sizeof(float) * NF);
        float *obj = malloc(sizeof(float) * 2 * NF);
        double *rph = malloc(sizeof(double) * NF), *rmp = malloc(sizeof(double) * NF);
        double complex *robj = malloc(sizeof(double complex) * NF);
        for (int s = 0; s < 2; s++) {
            ssb4d_aberrations ab = s == 0 ? FX.truth : random_aberr(1);
            ssb4d_ssb_opts o;
            ssb4d_ssb_opts_default(&o);
            CHECK_OK(ssb4d_object(FX.G, &FX.sim.geom, &ab, NULL, f, &o, FX.mem, obj, ph, ERR));
            CHECK_OK(ssb4d_mean_phase_upsampled(FX.G, &FX.sim.geom, &ab, NULL, f, &o, FX.mem, mp,
                                                ERR));
            ref_object(&FX.ref, &FX.sim.geom, &ab, NULL, f, robj, rph);
            ref_mean_phase_upsampled(&FX.ref, &FX.sim.geom, &ab, NULL, f, rmp);
            double dp = max_phase_diff_fd(ph, rph, NF), dm = max_abs_diff_fd(mp, rmp, NF);
            double omax = 0, dmax = 0;
            for (size_t i = 0; i < NF; i++) {
                double complex l = obj[2 * i] + I * obj[2 * i + 1];
                if (cabs(robj[i]) > omax)
                    omax = cabs(robj[i]);
                if (cabs(l - robj[i]) > dmax)
                    dmax = cabs(l - robj[i]);
            }
            printf("  upsampled f=%d set %d: object phase %.2e, max|dO|/max|O| %.2e, mean phase "
                   "%.2e\n", f, s, dp, dmax / omax, dm);
            assert_true(dp <= 2e-4);
            assert_true(dm <= 2e-4);
            assert_true(dmax / omax < 1e-5);
            if (s == 0) {
                /* the upsampled output at the native samples stays close to the truth */
                double *sub = malloc(sizeof(double) * FX.ny * FX.nx);
                for (size_t i = 0; i < FX.ny; i++)
                    for (size_t j = 0; j < FX.nx; j++)
                        sub[i * FX.nx + j] = rph[(i * f) * (f * FX.nx) + j * f];
                printf("  f=%d reference phase-of-mean at native samples vs truth: corr %.4f\n", f,
                       ref_correlation(sub, FX.sim.phase_band, FX.ny * FX.nx));
                free(sub);
            }
        }
        /* odd-m upsampled (complex path) once, f = 2 */
        if (f == 2) {
            ssb4d_aberrations ab = FX.truth;
            ab.C_nm[SSB4D_C21] = 80.0;
            ab.phi_deg[SSB4D_C21] = 45.0;
            ssb4d_ssb_opts o;
            ssb4d_ssb_opts_default(&o);
            CHECK_OK(ssb4d_mean_phase_upsampled(FX.G, &FX.sim.geom, &ab, NULL, f, &o, FX.mem, mp,
                                                ERR));
            ref_mean_phase_upsampled(&FX.ref, &FX.sim.geom, &ab, NULL, f, rmp);
            double dm = max_abs_diff_fd(mp, rmp, NF);
            printf("  upsampled f=2 with C21: mean phase %.2e\n", dm);
            assert_true(dm <= 2e-4);
        }
        free(ph);
        free(mp);
        free(obj);
        free(rph);
        free(rmp);
        free(robj);
    }
}

/* The transfer-corrected object (ssb4d_object_transfer, docs/ssb-math.md "Image at the truth")
 * and its transfer T(q) = (1/N_bf) Σ_k |γ| (ssb4d_transfer) against the float64 reference: the fast
 * and generic forms of |γ| (C10/C12; C3; coma; a thick model), native and upsampled, both paths;
 * the same bits for 1 and 2 threads; a regulariser outside (0, 1e6] refused. */
static void test_object_transfer(void **state)
{
    (void)state;
    const double eps = SSB4D_TRANSFER_EPS;
    ssb4d_thick th = {{1.5, -0.5}, 8.0};
    for (int s = 0; s < 6; s++) {
        int f = s == 4 ? 2 : 1;
        size_t NF = (size_t)f * FX.ny * (size_t)f * FX.nx;
        ssb4d_aberrations ab = s == 1 ? random_aberr(1) : FX.truth;
        if (s == 2 || s == 4) {
            ab.C_nm[SSB4D_C21] = 60.0;
            ab.phi_deg[SSB4D_C21] = 30.0;
        }
        const ssb4d_thick *thick = s == 3 ? &th : NULL;
        ssb4d_ssb_opts o;
        ssb4d_ssb_opts_default(&o);
        o.path = s == 5 ? SSB4D_PATH_COMPLEX : SSB4D_PATH_AUTO;
        o.threads = 2;
        double *T = malloc(sizeof(double) * NF), *rT = malloc(sizeof(double) * NF), *rph = malloc(sizeof(double) * NF);
        float *obj = malloc(sizeof(float) * 2 * NF), *ph = malloc(sizeof(float) * NF);
        float *obj1 = malloc(sizeof(float) * 2 * NF), *ph1 = malloc(sizeof(float) * NF);
        double complex *robj = malloc(sizeof(double complex) * NF);
        CHECK_OK(ssb4d_transfer(FX.G, &FX.sim.geom, &ab, thick, f, &o, FX.mem, T, ERR));
        CHECK_OK(ssb4d_object_transfer(FX.G, &FX.sim.geom, &ab, thick, f, eps, &o, FX.mem, obj, ph, ERR));
        ref_optics ro;
        ref_optics_init(&ro, &FX.sim.geom, &ab, thick);
        ref_transfer_o(&FX.ref, &FX.sim.geom, &ro, f, rT);
        ref_object_transfer_o(&FX.ref, &FX.sim.geom, &ro, f, eps, robj, rph);
        double dT = 0, Tmax = 0, omax = 0, dmax = 0;
        for (size_t i = 0; i < NF; i++) {
            dT = fmax(dT, fabs(T[i] - rT[i]));
            Tmax = fmax(Tmax, rT[i]);
            double complex l = obj[2 * i] + I * obj[2 * i + 1];
            omax = fmax(omax, cabs(robj[i]));
            dmax = fmax(dmax, cabs(l - robj[i]));
        }
        double dp = max_phase_diff_fd(ph, rph, NF);
        printf("  transfer set %d (f=%d%s): max T %.3f, max|dT| %.2e; object max|dO|/max|O| %.2e, phase %.2e\n", s,
               f, s == 5 ? ", complex path" : "", Tmax, dT, dmax / omax, dp);
        assert_true(Tmax > 0.5);
        assert_true(dT < 1e-9);
        assert_true(dmax / omax < 1e-6);
        assert_true(dp < 1e-5);
        /* one thread: the same bits */
        o.threads = 1;
        CHECK_OK(ssb4d_object_transfer(FX.G, &FX.sim.geom, &ab, thick, f, eps, &o, FX.mem, obj1, ph1, ERR));
        assert_memory_equal(obj, obj1, sizeof(float) * 2 * NF);
        assert_memory_equal(ph, ph1, sizeof(float) * NF);
        free(T);
        free(rT);
        free(rph);
        free(obj);
        free(ph);
        free(obj1);
        free(ph1);
        free(robj);
    }
    float ph[1024];
    assert_true(FX.ny * FX.nx <= 1024);
    const double bad[] = {0.0, -0.1, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        ssb4d_err e = {0};
        assert_int_equal(ssb4d_object_transfer(FX.G, &FX.sim.geom, &FX.truth, NULL, 1, bad[i], NULL, FX.mem, NULL, ph,
                                               &e),
                         SSB4D_EINVAL);
    }
}

static void test_upsample_auto(void **state)
{
    (void)state;
    /* band 2α0/λ at 300 kV, 25 mrad = 2.5397 Å⁻¹: f/(2s) >= 2.5397 ⇔ f >= 5.0794 s */
    struct {
        double s[2];
        int f;
    } cases[] = {{{0.1, 0.1}, 1},    {{0.19, 0.19}, 1}, {{0.2, 0.2}, 2},  {{0.36609375, 0.36609375}, 2},
                 {{0.39, 0.39}, 2},  {{0.5, 0.5}, 3},   {{0.59, 0.3}, 3}, {{0.7, 0.1}, 4},
                 {{0.78, 0.78}, 4},  {{0.8, 0.8}, 8},   {{1.5, 1.5}, 8},  {{2.0, 2.0}, 8},
                 {{0.1, 0.7}, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ssb4d_geometry g = FX.sim.geom;
        g.kv = 300;
        g.semiangle_mrad = 25;
        g.scan_step_A[0] = cases[i].s[0];
        g.scan_step_A[1] = cases[i].s[1];
        int f = ssb4d_upsample_auto(&g);
        if (f != cases[i].f)
            printf("upsample_auto(s=%g,%g) = %d, expected %d\n", cases[i].s[0], cases[i].s[1], f,
                   cases[i].f);
        assert_int_equal(f, cases[i].f);
        assert_int_equal(ref_upsample_auto(&g), cases[i].f);
    }
    /* A2: 200 kV, 20 mrad, 0.33983 Å: band 1.5949, f/(2s) = 1.4713 f → 2 */
    ssb4d_geometry g = {200.0, 20.0, {0.33983, 0.33983}, {1.23, 1.23}, {21, 21}, 0.0, 0};
    assert_int_equal(ssb4d_upsample_auto(&g), 2);
    g.scan_step_A[0] = g.scan_step_A[1] = 0.3;
    assert_int_equal(ssb4d_upsample_auto(&g), 1);
}

/* ------------------------------------------------------------------ determinism */

static void test_determinism(void **state)
{
    (void)state;
    size_t row_bytes = FX.nx * FX.nbf * sizeof(float); /* one scan row of decoded BF columns */
    ssb4d_G *Ga = build_G(FX.src, &FX.sim.geom, FX.bf, FX.nbf, 0, 1, row_bytes);
    ssb4d_G *Gb = build_G(FX.src, &FX.sim.geom, FX.bf, FX.nbf, 0, 2, 0);
    ssb4d_G *Gc = build_G(FX.src, &FX.sim.geom, FX.bf, FX.nbf, 0, 2, 3 * row_bytes);
    char ha[65], hb[65], hc[65], hd[65];
    ssb4d_G_sha256(Ga, ha);
    ssb4d_G_sha256(Gb, hb);
    ssb4d_G_sha256(Gc, hc);
    ssb4d_G_sha256(FX.G, hd);
    printf("G sha256: 1 thread/1-row blocks %.16s…, 2 threads/all rows %.16s…, 2 threads/3-row "
           "blocks %.16s…, default %.16s…\n", ha, hb, hc, hd);
    assert_string_equal(ha, hb);
    assert_string_equal(ha, hc);
    assert_string_equal(ha, hd);
    size_t N = FX.ny * FX.nx;
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    float *oa = malloc(sizeof(float) * 2 * 4 * N), *ob = malloc(sizeof(float) * 2 * 4 * N);
    for (int s = 0; s < 3; s++) {
        ssb4d_aberrations ab = s == 0 ? FX.truth : random_aberr(1);
        if (s == 2)
            ab.C_nm[SSB4D_C21] = 30.0;
        for (int path = 0; path < 3; path++) {
            double l1 = lib_loss(Ga, &FX.sim.geom, &ab, NULL, (ssb4d_path)path, 1, a);
            double l2 = lib_loss(Gb, &FX.sim.geom, &ab, NULL, (ssb4d_path)path, 2, b);
            assert_memory_equal(&l1, &l2, sizeof l1);
            assert_memory_equal(a, b, sizeof(float) * N);
        }
        ssb4d_ssb_opts o1, o2;
        ssb4d_ssb_opts_default(&o1);
        ssb4d_ssb_opts_default(&o2);
        o1.threads = 1;
        o2.threads = 2;
        CHECK_OK(ssb4d_object(Ga, &FX.sim.geom, &ab, NULL, 2, &o1, FX.mem, oa, NULL, ERR));
        CHECK_OK(ssb4d_object(Gc, &FX.sim.geom, &ab, NULL, 2, &o2, FX.mem, ob, NULL, ERR));
        assert_memory_equal(oa, ob, sizeof(float) * 2 * 4 * N);
        CHECK_OK(ssb4d_mean_phase_upsampled(Ga, &FX.sim.geom, &ab, NULL, 2, &o1, FX.mem, oa, ERR));
        CHECK_OK(ssb4d_mean_phase_upsampled(Gb, &FX.sim.geom, &ab, NULL, 2, &o2, FX.mem, ob, ERR));
        assert_memory_equal(oa, ob, sizeof(float) * 4 * N);
    }
    ssb4d_G_free(Ga);
    ssb4d_G_free(Gb);
    ssb4d_G_free(Gc);
    free(a);
    free(b);
    free(oa);
    free(ob);
}

/* ------------------------------------------------------------------ A1 / A2 */

typedef ref_shared_set dataset;

static void run_dataset(const dataset *ds)
{
    char path[1024];
    size_t shape[8];
    uint16_t *counts;
    snprintf(path, sizeof path, "%s/sim/%s", SSB4D_SHARED_DATA, ds->counts);
    assert_int_equal(ref_npy_load_u16(path, shape, &counts), 4);
    ssb4d_source *src;
    CHECK_OK(ssb4d_source_open_npy(path, &src, ERR));
    double *gt;
    size_t gshape[8];
    snprintf(path, sizeof path, "%s/sim/%s", SSB4D_SHARED_DATA, ds->gt);
    assert_int_equal(ref_npy_load_double(path, gshape, &gt), 2);
    int32_t *bf;
    size_t nbf = ref_select_bf(shape[2], shape[3], ds->g.centre_px, ds->radius, &bf);
    ref_data d;
    assert_int_equal(ref_data_from_u16(&d, counts, shape, bf, nbf), 0);
    ssb4d_G *G = build_G(src, &ds->g, bf, nbf, 0, 0, 0);
    size_t N = d.ny * d.nx;
    float *mp = malloc(sizeof(float) * N), *ph = malloc(sizeof(float) * N);
    double *dmp = malloc(sizeof(double) * N), *dph = malloc(sizeof(double) * N);
    double *rmp = malloc(sizeof(double) * N);

    ssb4d_aberrations truth;
    memset(&truth, 0, sizeof truth);
    truth.C_nm[SSB4D_C10] = ds->C10;
    truth.C_nm[SSB4D_C12] = ds->C12;
    truth.phi_deg[SSB4D_C12] = ds->phi12;
    double lt = lib_loss(G, &ds->g, &truth, NULL, SSB4D_PATH_AUTO, 0, mp);
    double lr = ref_loss(&d, &ds->g, &truth, NULL, rmp);
    ssb4d_ssb_opts o;
    ssb4d_ssb_opts_default(&o);
    CHECK_OK(ssb4d_object(G, &ds->g, &truth, NULL, 1, &o, FX.mem, NULL, ph, ERR));
    for (size_t i = 0; i < N; i++) {
        dmp[i] = mp[i];
        dph[i] = ph[i];
    }
    double c_mp = ref_correlation(dmp, gt, N), c_obj = ref_correlation(dph, gt, N);
    printf("%s (library): %zu BF, loss at truth %.8g (ref %.8g, rel %.2e), mean phase vs ref "
           "%.2e; corr with band-limited GT: phase of mean %.4f, mean phase %.4f\n",
           ds->counts, nbf, lt, lr, fabs(lt / lr - 1), max_abs_diff_fd(mp, rmp, N), c_obj, c_mp);
    assert_true(fabs(lt / lr - 1) <= 1e-5);
    assert_true(max_abs_diff_fd(mp, rmp, N) <= 2e-4);
    assert_true(c_obj >= ds->min_corr);
    assert_true(c_mp >= ds->min_corr);
    ssb4d_aberrations pert[6];
    for (int i = 0; i < 6; i++)
        pert[i] = truth;
    pert[0].C_nm[SSB4D_C10] += 3.0;
    pert[1].C_nm[SSB4D_C10] -= 3.0;
    pert[2].C_nm[SSB4D_C12] = 0.0;
    pert[3].C_nm[SSB4D_C12] = 2.0 * ds->C12;
    pert[4].phi_deg[SSB4D_C12] = -ds->phi12;
    pert[5].C_nm[SSB4D_C10] = -ds->C10;
    for (int i = 0; i < 6; i++) {
        double l = lib_loss(G, &ds->g, &pert[i], NULL, SSB4D_PATH_AUTO, 0, NULL);
        assert_true(lt < l);
    }
    ssb4d_G_free(G);
    ssb4d_source_close(src);
    ref_data_free(&d);
    free(bf);
    free(gt);
    free(counts);
    free(mp);
    free(ph);
    free(dmp);
    free(dph);
    free(rmp);
}

static void test_A1(void **state)
{
    (void)state;
    run_dataset(&REF_SET_A1);
}

static void test_A2(void **state)
{
    (void)state;
    run_dataset(&REF_SET_A2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_G_vs_reference),
        cmocka_unit_test(test_f32_vs_f64),
        cmocka_unit_test(test_real_vs_complex),
        cmocka_unit_test(test_odd_m_complex),
        cmocka_unit_test(test_store_inactive),
        cmocka_unit_test(test_rotation_retarget),
        cmocka_unit_test(test_object_native),
        cmocka_unit_test(test_object_loss_fused),
        cmocka_unit_test(test_upsampled),
        cmocka_unit_test(test_object_transfer),
        cmocka_unit_test(test_upsample_auto),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_A1),
        cmocka_unit_test(test_A2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
