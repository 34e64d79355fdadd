/* test_gstream.c — the memory modes of G (SPEC 9, issue 5): a G whose planes are partly or wholly
 * streamed (rebuilt from the source by every pass) gives the same bits as the resident G — its
 * SHA-256, every plane, losses, batched losses, mean phases, objects at any upsampling, the band
 * objective (with one and with per-set rotations) and its power, and whole fit traces (standard
 * and thick-sample) — for any group size; a half-precision G holds exactly the rounded float32
 * planes and its previews and band values stay within half precision's error of the exact ones.
 * Both a .npy and an encoded .qem source are streamed from. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/half.h"
#include "fit/tilt.h"
#include "gbuild/gbuild.h"
#include "ref_ssb.h"

#define SIM SSB4D_SHARED_DATA "/sim/"

typedef struct {
    ssb4d_source *src;
    ssb4d_calibration cal;
    ssb4d_aberrations ab;
} scene;

static void open_scene(scene *s, const char *path)
{
    const ref_shared_set *d = &REF_SET_A1;
    ssb4d_err err = {0};
    memset(s, 0, sizeof *s);
    if (ssb4d_source_open(path, &s->src, &err))
        fail_msg("%s", err.msg);
    ssb4d_calib_params p;
    ssb4d_calib_params_default(&p);
    p.kv = d->g.kv;
    p.semiangle_mrad = d->g.semiangle_mrad;
    memcpy(p.scan_step_A, d->g.scan_step_A, sizeof p.scan_step_A);
    memcpy(p.det_sampling_mrad, d->g.det_sampling_mrad, sizeof p.det_sampling_mrad);
    p.rotation_deg = 0;
    if (ssb4d_calibrate(s->src, &p, &s->cal, &err))
        fail_msg("%s", err.msg);
    s->ab.C_nm[SSB4D_C10] = d->C10;
    s->ab.C_nm[SSB4D_C12] = d->C12;
    s->ab.phi_deg[SSB4D_C12] = d->phi12;
}

static void close_scene(scene *s)
{
    ssb4d_calibration_free(&s->cal);
    ssb4d_source_close(s->src);
}

static ssb4d_G *build(scene *s, int half, size_t resident_bytes, size_t group_bytes, ssb4d_mem *mem)
{
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    go.half = half;
    go.resident_bytes = resident_bytes;
    go.group_bytes = group_bytes;
    go.block_bytes = 1 << 18; /* several row blocks per group */
    ssb4d_G *G = NULL;
    ssb4d_err err = {0};
    if (ssb4d_gbuild(s->src, &s->cal.geom, s->cal.bf_pix, s->cal.n_bf, &go, mem, &G, &err))
        fail_msg("%s", err.msg);
    return G;
}

enum { NBAND = 4 };

typedef struct {
    char sha[65];
    double loss, batch[3];
    double band[NBAND], band_rot[NBAND], power; /* the band objective (band.c) */
    float *mean_phase, *obj1, *obj2;
    size_t npix;
} results;

/* The band objective: sets covering both kernels, thin and thick, with g's rotation (band) and
 * with a rotation each, two of them equal (band_rot); and the band power. */
static void band_eval(scene *s, const ssb4d_G *G, ssb4d_mem *mem, results *r)
{
    ssb4d_err err = {0};
    ssb4d_aberrations ab[NBAND] = {s->ab, s->ab, s->ab, s->ab};
    ssb4d_thick th[NBAND] = {{{0, 0}, 0}, {{3, -4}, 15}, {{0, 0}, 0}, {{-5, 2}, 30}};
    ab[1].C_nm[SSB4D_C10] += 2;
    ab[2].C_nm[SSB4D_C30] = 1500; /* the generic kernel */
    ab[3].phi_deg[SSB4D_C12] -= 20;
    const double rot[NBAND] = {2.5, -1, 2.5, 0};
    ssb4d_band_opts o;
    ssb4d_band_opts_default(&o);
    o.threads = 2;
    if (ssb4d_band_fit(G, &s->cal.geom, ab, th, NBAND, &o, mem, r->band, &err) ||
        ssb4d_band_fit_rot(G, &s->cal.geom, rot, ab, th, NBAND, &o, mem, r->band_rot, &err) ||
        ssb4d_band_power(G, &s->cal.geom, &o, mem, &r->power, &err))
        fail_msg("%s", err.msg);
}

static void evaluate(scene *s, const ssb4d_G *G, ssb4d_mem *mem, results *r)
{
    ssb4d_err err = {0};
    size_t ny, nx;
    ssb4d_G_scan_shape(G, &ny, &nx);
    r->npix = ny * nx;
    ssb4d_G_sha256(G, r->sha);
    r->mean_phase = malloc(r->npix * sizeof(float));
    r->obj1 = malloc(2 * r->npix * sizeof(float));
    r->obj2 = malloc(8 * r->npix * sizeof(float));
    assert_non_null(r->mean_phase);
    assert_non_null(r->obj1);
    assert_non_null(r->obj2);
    if (ssb4d_loss(G, &s->cal.geom, &s->ab, NULL, NULL, mem, &r->loss, r->mean_phase, &err))
        fail_msg("%s", err.msg);
    ssb4d_aberrations abs[3] = {s->ab, s->ab, s->ab};
    abs[1].C_nm[SSB4D_C10] += 2;
    abs[2].phi_deg[SSB4D_C12] -= 20;
    if (ssb4d_loss_batch(G, &s->cal.geom, abs, NULL, 3, NULL, mem, r->batch, &err))
        fail_msg("%s", err.msg);
    if (ssb4d_object(G, &s->cal.geom, &s->ab, NULL, 1, NULL, mem, r->obj1, NULL, &err))
        fail_msg("%s", err.msg);
    if (ssb4d_object(G, &s->cal.geom, &s->ab, NULL, 2, NULL, mem, r->obj2, NULL, &err))
        fail_msg("%s", err.msg);
    band_eval(s, G, mem, r);
}

static void results_free(results *r)
{
    free(r->mean_phase);
    free(r->obj1);
    free(r->obj2);
}

static void assert_same(const results *a, const results *b)
{
    assert_string_equal(a->sha, b->sha);
    assert_memory_equal(&a->loss, &b->loss, sizeof a->loss);
    assert_memory_equal(a->batch, b->batch, sizeof a->batch);
    assert_memory_equal(a->band, b->band, sizeof a->band);
    assert_memory_equal(a->band_rot, b->band_rot, sizeof a->band_rot);
    assert_memory_equal(&a->power, &b->power, sizeof a->power);
    assert_memory_equal(a->mean_phase, b->mean_phase, a->npix * sizeof(float));
    assert_memory_equal(a->obj1, b->obj1, 2 * a->npix * sizeof(float));
    assert_memory_equal(a->obj2, b->obj2, 8 * a->npix * sizeof(float));
}

static void streamed_equals_resident(const char *path)
{
    scene s;
    open_scene(&s, path);
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_G *R = build(&s, 0, 0, 0, mem);
    size_t g_bytes = ssb4d_G_bytes(R), plane = g_bytes / ssb4d_G_n_stored(R);
    results ref;
    evaluate(&s, R, mem, &ref);
    printf("  resident: %zu BF, %zu stored, %.1f KiB of G, loss %.9g, band fit %.9g of power %.9g\n",
           ssb4d_G_n_bf(R), ssb4d_G_n_stored(R), g_bytes / 1024.0, ref.loss, ref.band[0], ref.power);

    /* A third resident (groups of 64 and of 192 planes), then nothing resident. */
    const size_t resident[] = {g_bytes / 3, g_bytes / 3, 1};
    const size_t groups[] = {64 * plane, 192 * plane, 0};
    for (int v = 0; v < 3; v++) {
        ssb4d_G *S = build(&s, 0, resident[v], groups[v], mem);
        assert_true(ssb4d_G_n_resident(S) < ssb4d_G_n_stored(S));
        assert_int_equal(ssb4d_G_n_stored(S), ssb4d_G_n_stored(R));
        assert_true(ssb4d_G_bytes(S) <= resident[v]);
        results r;
        evaluate(&s, S, mem, &r);
        assert_same(&ref, &r);
        /* Every plane, resident or rebuilt, equals the resident G's. */
        size_t ny, nx;
        ssb4d_G_scan_shape(R, &ny, &nx);
        float *p = malloc(ny * (nx / 2 + 1) * 2 * sizeof *p);
        assert_non_null(p);
        for (size_t i = 0; i < ssb4d_G_n_bf(R); i += 7) {
            const float *q = ssb4d_G_plane(R, i);
            if (!q)
                continue;
            ssb4d_err err = {0};
            assert_int_equal(ssb4d_G_plane_copy(S, i, p, &err), SSB4D_OK);
            assert_memory_equal(p, q, ny * (nx / 2 + 1) * 2 * sizeof *p);
        }
        free(p);
        printf("  streamed (%zu of %zu planes resident, groups of %zu): same bits\n",
               ssb4d_G_n_resident(S), ssb4d_G_n_stored(S), groups[v] ? groups[v] / plane : 0);
        results_free(&r);
        ssb4d_G_free(S);
    }
    results_free(&ref);
    ssb4d_G_free(R);
    ssb4d_mem_destroy(mem);
    close_scene(&s);
}

static void test_streamed_npy(void **state)
{
    (void)state;
    streamed_equals_resident(SIM "sim_A1_SrTiO3_300kV_counts.npy");
}

static void test_streamed_qem(void **state)
{
    (void)state;
    char dir[] = "/tmp/ssb4d_gstream_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/a1.qem", dir);
    ssb4d_import_params ip;
    ssb4d_import_params_default(&ip);
    ssb4d_err err = {0};
    if (ssb4d_import(SIM "sim_A1_SrTiO3_300kV_counts.npy", path, &ip, NULL, &err))
        fail_msg("%s", err.msg);
    streamed_equals_resident(path);
    unlink(path);
    rmdir(dir);
}

/* A fit on a streamed G walks the same trace as on the resident G. */
static void test_streamed_fit(void **state)
{
    (void)state;
    scene s;
    open_scene(&s, SIM "sim_A1_SrTiO3_300kV_counts.npy");
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_G *R = build(&s, 0, 0, 0, mem);
    ssb4d_G *S = build(&s, 0, ssb4d_G_bytes(R) / 2, 0, mem);
    ssb4d_fit_params p;
    ssb4d_fit_params_default(&p);
    p.trials = 24;
    p.coarse_bf = 128;
    ssb4d_fit_result a, b;
    ssb4d_err err = {0};
    if (ssb4d_fit(R, &s.cal.geom, &p, mem, &a, &err) || ssb4d_fit(S, &s.cal.geom, &p, mem, &b, &err))
        fail_msg("%s", err.msg);
    printf("  fit: %zu evaluations, C10 %.4f nm, trace %.16s… on both\n", a.evaluations,
           a.ab.C_nm[SSB4D_C10], a.trace_sha256);
    assert_string_equal(a.trace_sha256, b.trace_sha256);
    assert_memory_equal(&a.loss, &b.loss, sizeof a.loss);
    ssb4d_fit_result_free(&a);
    ssb4d_fit_result_free(&b);
    ssb4d_G_free(S);
    ssb4d_G_free(R);
    ssb4d_mem_destroy(mem);
    close_scene(&s);
}

/* The thick-sample search (fit_tilt: thin baseline, joint global search, Nelder–Mead, all on the
 * band objective) on a streamed G walks the resident G's trace; on a half G it runs too. A short
 * search: its bits are the point, not its result. */
static void test_streamed_tilt_fit(void **state)
{
    (void)state;
    scene s;
    open_scene(&s, SIM "sim_A1_SrTiO3_300kV_counts.npy");
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_G *R = build(&s, 0, 0, 0, mem);
    size_t plane = ssb4d_G_bytes(R) / ssb4d_G_n_stored(R);
    ssb4d_G *S = build(&s, 0, ssb4d_G_bytes(R) / 3, 64 * plane, mem);
    ssb4d_G *H = build(&s, 1, 0, 0, mem);
    fit_tilt_params p;
    fit_tilt_params_default(&p);
    p.thin.trials = 16;
    p.thin.nm.max_iter = 20;
    p.trials = 32;
    p.nm_starts = 1;
    p.nm.max_iter = 20;
    fit_tilt_result a, b, h;
    ssb4d_err err = {0};
    if (fit_tilt(R, &s.cal.geom, &p, mem, &a, NULL, &err) || fit_tilt(S, &s.cal.geom, &p, mem, &b, NULL, &err) ||
        fit_tilt(H, &s.cal.geom, &p, mem, &h, NULL, &err))
        fail_msg("%s", err.msg);
    printf("  tilt fit: %zu evaluations, tilt (%.3f, %.3f) mrad, %.2f nm, trace %.16s… resident and streamed;"
           " half: tilt (%.3f, %.3f) mrad, %.2f nm\n", a.evaluations, a.thick.tilt_mrad[0], a.thick.tilt_mrad[1],
           a.thick.thickness_nm, a.trace_sha256, h.thick.tilt_mrad[0], h.thick.tilt_mrad[1], h.thick.thickness_nm);
    assert_string_equal(a.trace_sha256, b.trace_sha256);
    assert_memory_equal(&a.fit, &b.fit, sizeof a.fit);
    assert_true(isfinite(h.fit) && h.evaluations > 0);
    ssb4d_G_free(H);
    ssb4d_G_free(S);
    ssb4d_G_free(R);
    ssb4d_mem_destroy(mem);
    close_scene(&s);
}

/* Half precision: the planes are the float32 planes rounded to binary16 (whatever the group
 * size), the previews are within half precision's error, and half the bytes are held. */
static void test_half(void **state)
{
    (void)state;
    scene s;
    open_scene(&s, SIM "sim_A1_SrTiO3_300kV_counts.npy");
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_G *R = build(&s, 0, 0, 0, mem);
    size_t plane = ssb4d_G_bytes(R) / ssb4d_G_n_stored(R);
    ssb4d_G *H = build(&s, 1, 0, 64 * plane, mem);
    ssb4d_G *H2 = build(&s, 1, 0, 0, mem);
    assert_true(ssb4d_G_is_half(H));
    assert_int_equal(2 * ssb4d_G_bytes(H), ssb4d_G_bytes(R));
    size_t ny, nx;
    ssb4d_G_scan_shape(R, &ny, &nx);
    size_t nv = ny * (nx / 2 + 1) * 2;
    float *p = malloc(nv * sizeof *p), *want = malloc(nv * sizeof *want);
    uint16_t *h = malloc(nv * sizeof *h);
    assert_true(p && want && h);
    for (size_t i = 0; i < ssb4d_G_n_bf(R); i++) {
        const float *q = ssb4d_G_plane(R, i);
        if (!q)
            continue;
        /* Independently: the plane scaled by 2^-e so its largest component is at most 32768,
         * rounded to binary16, scaled back (exact powers of two). */
        float amax = 0;
        for (size_t k = 0; k < nv; k++)
            amax = fmaxf(amax, fabsf(q[k]));
        int e = 0;
        if (amax > 0)
            frexpf(amax / 32768.0f, &e);
        for (size_t k = 0; k < nv; k++)
            want[k] = ldexpf(q[k], -e);
        ssb_f32_to_f16(want, h, nv);
        ssb_f16_to_f32(h, want, nv);
        for (size_t k = 0; k < nv; k++)
            want[k] = ldexpf(want[k], e);
        ssb4d_err err = {0};
        assert_int_equal(ssb4d_G_plane_copy(H, i, p, &err), SSB4D_OK);
        assert_memory_equal(p, want, nv * sizeof *p);
    }
    results ref, a, b;
    evaluate(&s, R, mem, &ref);
    evaluate(&s, H, mem, &a);
    evaluate(&s, H2, mem, &b);
    assert_same(&a, &b); /* the group size does not change a half G's bits either */
    double rel = fabs(a.loss - ref.loss) / ref.loss, dmax = 0;
    for (size_t r = 0; r < ref.npix; r++) {
        double d = fabs(atan2(a.obj1[2 * r + 1], a.obj1[2 * r]) - atan2(ref.obj1[2 * r + 1], ref.obj1[2 * r]));
        dmax = fmax(dmax, fmin(d, 2 * M_PI - d));
    }
    printf("  half: loss %.9g vs %.9g (rel %.2e), phase max |diff| %.2e rad\n", a.loss, ref.loss, rel, dmax);
    assert_true(rel < 1e-3);
    assert_true(dmax < 1e-2);
    /* The band objective on the half G: within half precision's error of the float32 values. */
    double prel = fabs(a.power - ref.power) / ref.power, frel = 0;
    for (int i = 0; i < NBAND; i++) {
        frel = fmax(frel, fabs(a.band[i] - ref.band[i]) / ref.band[i]);
        frel = fmax(frel, fabs(a.band_rot[i] - ref.band_rot[i]) / ref.band_rot[i]);
    }
    printf("  half: band power rel diff %.2e, band fit max rel diff %.2e\n", prel, frel);
    assert_true(prel < 1e-4 && frel < 1e-4);
    results_free(&ref);
    results_free(&a);
    results_free(&b);
    free(p), free(want), free(h);
    ssb4d_G_free(H2);
    ssb4d_G_free(H);
    ssb4d_G_free(R);
    ssb4d_mem_destroy(mem);
    close_scene(&s);
}

/* Counts 1000 times A1's: G's low frequencies (sums over the scan, about 1e9) are far beyond
 * binary16's 65504, so the half copy must scale each plane; its loss and phase stay close. */
static void test_half_range(void **state)
{
    (void)state;
    scene s;
    open_scene(&s, SIM "sim_A1_SrTiO3_300kV_counts.npy");
    size_t sh[4];
    ssb4d_source_shape(s.src, sh);
    size_t nfr = sh[0] * sh[1], fr = sh[2] * sh[3];
    uint32_t *counts = malloc(nfr * fr * sizeof *counts);
    assert_non_null(counts);
    ssb4d_err err = {0};
    if (ssb4d_source_read_frames(s.src, 0, nfr, counts, &err))
        fail_msg("%s", err.msg);
    for (size_t i = 0; i < nfr * fr; i++)
        counts[i] *= 1000;
    ssb4d_source *big = NULL;
    if (ssb4d_source_from_memory(counts, SSB4D_U32, sh, &big, &err))
        fail_msg("%s", err.msg);
    ssb4d_source *orig = s.src;
    s.src = big;
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_G *R = build(&s, 0, 0, 0, mem), *H = build(&s, 1, 0, 0, mem);
    s.src = orig;
    double lr, lh;
    size_t ny, nx;
    ssb4d_G_scan_shape(R, &ny, &nx);
    float *pr = malloc(ny * nx * sizeof *pr), *ph = malloc(ny * nx * sizeof *ph);
    assert_true(pr && ph);
    if (ssb4d_loss(R, &s.cal.geom, &s.ab, NULL, NULL, mem, &lr, NULL, &err) ||
        ssb4d_loss(H, &s.cal.geom, &s.ab, NULL, NULL, mem, &lh, NULL, &err) ||
        ssb4d_object(R, &s.cal.geom, &s.ab, NULL, 1, NULL, mem, NULL, pr, &err) ||
        ssb4d_object(H, &s.cal.geom, &s.ab, NULL, 1, NULL, mem, NULL, ph, &err))
        fail_msg("%s", err.msg);
    double dmax = 0;
    for (size_t r = 0; r < ny * nx; r++)
        dmax = fmax(dmax, fabs((double)pr[r] - ph[r]));
    printf("  half, 1000x counts (G up to %.3g): loss %.9g vs %.9g, phase max |diff| %.2e rad\n",
           (double)ssb4d_G_plane(R, 0)[0], lh, lr, dmax);
    assert_true(isfinite(lh) && fabs(lh - lr) < 1e-3 * lr);
    assert_true(dmax < 1e-2);
    free(pr), free(ph);
    ssb4d_G_free(H);
    ssb4d_G_free(R);
    ssb4d_source_close(big);
    free(counts);
    ssb4d_mem_destroy(mem);
    close_scene(&s);
}

/* The tiled loss layout (ssb4d_ssb_opts.loss_tile: T pixels' phase planes in flight) gives the
 * per-thread layout's bits for any T, batch, path and memory mode of G. */
static void test_loss_tiles(void **state)
{
    (void)state;
    scene s;
    open_scene(&s, SIM "sim_A1_SrTiO3_300kV_counts.npy");
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_G *R = build(&s, 0, 0, 0, mem);
    ssb4d_G *S = build(&s, 0, ssb4d_G_bytes(R) / 3, 0, mem);
    size_t ny, nx;
    ssb4d_G_scan_shape(R, &ny, &nx);
    size_t npix = ny * nx;
    ssb4d_aberrations abs[3] = {s.ab, s.ab, s.ab};
    abs[1].C_nm[SSB4D_C10] += 2;
    abs[2].C_nm[SSB4D_C21] = 20; /* odd m: the complex path for the whole batch */
    abs[2].phi_deg[SSB4D_C21] = 10;
    const size_t tiles[] = {1, 7, 64, 100, 100000};
    for (int g = 0; g < 2; g++) {
        const ssb4d_G *G = g ? S : R;
        for (int path = 0; path < 2; path++) {
            size_t nb = path ? 3 : 2; /* real path for the first two, complex with the third */
            ssb4d_ssb_opts o;
            ssb4d_ssb_opts_default(&o);
            double want[3], got[3], l0, l1;
            float *m0 = malloc(npix * sizeof *m0), *m1 = malloc(npix * sizeof *m1);
            assert_true(m0 && m1);
            ssb4d_err err = {0};
            if (ssb4d_loss_batch(G, &s.cal.geom, abs, NULL, nb, &o, mem, want, &err) ||
                ssb4d_loss(G, &s.cal.geom, &abs[path ? 2 : 0], NULL, &o, mem, &l0, m0, &err))
                fail_msg("%s", err.msg);
            for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++) {
                o.loss_tile = tiles[t];
                if (ssb4d_loss_batch(G, &s.cal.geom, abs, NULL, nb, &o, mem, got, &err) ||
                    ssb4d_loss(G, &s.cal.geom, &abs[path ? 2 : 0], NULL, &o, mem, &l1, m1, &err))
                    fail_msg("%s", err.msg);
                assert_memory_equal(want, got, nb * sizeof *want);
                assert_memory_equal(&l0, &l1, sizeof l0);
                assert_memory_equal(m0, m1, npix * sizeof *m0);
            }
            free(m0), free(m1);
        }
    }
    printf("  loss tiles 1, 7, 64, 100, all: the per-thread bits (real and complex paths, resident and streamed G)\n");
    ssb4d_G_free(S);
    ssb4d_G_free(R);
    ssb4d_mem_destroy(mem);
    close_scene(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streamed_npy),
        cmocka_unit_test(test_streamed_qem),
        cmocka_unit_test(test_streamed_fit),
        cmocka_unit_test(test_streamed_tilt_fit),
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_half_range),
        cmocka_unit_test(test_loss_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
