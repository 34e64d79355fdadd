/* test_virtual.c — virtual BF / ADF / CoM / iDPC images (src/virtual/, docs/virtual.md): sums
 * against a brute-force loop, the same bits for any thread count and frame block, float32 data
 * as counts, the angles refused, the CoM rotation convention, the workspace query and the
 * session's call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NY 12
#define NX 10
#define DR 24
#define DC 22
#define HOT_R 2
#define HOT_C 3

typedef struct {
    size_t shape[4];
    uint16_t *counts;
    float *values;
    ssb4d_source *src;
    ssb4d_calibration cal;
} fixture;

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A BF disk of radius 6 px (~200 counts a pixel) shifted by up to a pixel per scan position, a
 * dim ring beyond it, a little noise everywhere and one hot pixel. */
static void make_data(fixture *f)
{
    size_t n = (size_t)NY * NX * DR * DC;
    f->shape[0] = NY, f->shape[1] = NX, f->shape[2] = DR, f->shape[3] = DC;
    f->counts = malloc(n * sizeof *f->counts);
    f->values = malloc(n * sizeof *f->values);
    assert_non_null(f->counts);
    assert_non_null(f->values);
    uint64_t s = 7;
    for (size_t i = 0; i < NY; i++)
        for (size_t j = 0; j < NX; j++) {
            double cr = 11.5 + 0.8 * sin(0.7 * (double)i), cc = 10.5 + 0.8 * cos(0.5 * (double)j);
            uint16_t *fp = f->counts + (i * NX + j) * DR * DC;
            for (size_t r = 0; r < DR; r++)
                for (size_t c = 0; c < DC; c++) {
                    double d = hypot((double)r - cr, (double)c - cc);
                    unsigned v = (unsigned)(rng(&s) % 4);
                    if (d <= 6.0)
                        v += 180 + (unsigned)(rng(&s) % 40);
                    else if (d > 8.0 && d < 10.5)
                        v += 5 + (unsigned)(rng(&s) % 6);
                    fp[r * DC + c] = (uint16_t)v;
                }
            fp[HOT_R * DC + HOT_C] = 30000;
        }
    for (size_t i = 0; i < n; i++)
        f->values[i] = (float)f->counts[i];
}

static void calib_params(ssb4d_calib_params *p)
{
    ssb4d_calib_params_default(p);
    p->kv = 300;
    p->semiangle_mrad = 12;
    p->scan_step_A[0] = 0.5;
    p->scan_step_A[1] = 0.4;
    p->det_sampling_mrad[0] = p->det_sampling_mrad[1] = 2.0;
    p->rotation_deg = 30;
    p->flip = 0;
    p->threads = 2;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    make_data(f);
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_source_from_memory(f->counts, SSB4D_U16, f->shape, &f->src, &err), SSB4D_OK);
    ssb4d_calib_params p;
    calib_params(&p);
    if (ssb4d_calibrate(f->src, &p, &f->cal, &err))
        fail_msg("%s", err.msg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ssb4d_calibration_free(&f->cal);
    ssb4d_source_close(f->src);
    free(f->counts);
    free(f->values);
    free(f);
    return 0;
}

static void compute(fixture *f, ssb4d_source *src, const ssb4d_virtual_params *p, ssb4d_virtual_images *v)
{
    ssb4d_err err = {0};
    if (ssb4d_virtual_compute(src, &f->cal, p, v, &err))
        fail_msg("%s", err.msg);
}

static int is_flagged(const ssb4d_calibration *c, size_t q)
{
    for (size_t i = 0; i < c->n_flagged; i++)
        if ((size_t)c->flagged[i] == q)
            return 1;
    return 0;
}

/* BF and ADF exactly, CoM to rounding, against a brute-force loop over the definitions. */
static void test_sums(void **state)
{
    fixture *f = *state;
    const ssb4d_geometry *g = &f->cal.geom;
    assert_true(f->cal.n_flagged >= 1);
    assert_true(is_flagged(&f->cal, HOT_R * DC + HOT_C));
    ssb4d_virtual_params p;
    ssb4d_virtual_params_default(&p);
    p.adf_inner_mrad = 16.0; /* the ring: 8 to 10.5 px at 2 mrad/px */
    p.adf_outer_mrad = 21.0;
    ssb4d_virtual_images v;
    compute(f, f->src, &p, &v);
    assert_int_equal(v.scan_shape[0], NY);
    assert_int_equal(v.scan_shape[1], NX);
    assert_true(v.bf_default);
    assert_int_equal(v.n_bf_pixels, f->cal.n_bf);
    assert_int_equal(v.n_com_pixels, DR * DC - f->cal.n_flagged);
    assert_string_equal(v.idpc_unit, "rad");
    double th = 30 * M_PI / 180;
    for (size_t i = 0; i < NY * NX; i++) {
        const uint16_t *fp = f->counts + i * DR * DC;
        uint64_t bf = 0, adf = 0;
        double s0 = 0, sr = 0, sc = 0;
        for (size_t k = 0; k < f->cal.n_bf; k++)
            bf += fp[f->cal.bf_pix[k]];
        for (size_t q = 0; q < DR * DC; q++) {
            if (is_flagged(&f->cal, q))
                continue;
            double a = ((double)(q / DC) - g->centre_px[0]) * 2.0, b = ((double)(q % DC) - g->centre_px[1]) * 2.0;
            double t = sqrt(a * a + b * b);
            if (t >= 16.0 && t <= 21.0)
                adf += fp[q];
            s0 += fp[q];
            sr += fp[q] * (double)(q / DC);
            sc += fp[q] * (double)(q % DC);
        }
        assert_true(v.bf[i] == (double)bf);
        assert_true(v.adf[i] == (double)adf);
        double d0 = (sr / s0 - g->centre_px[0]) * 2.0, d1 = (sc / s0 - g->centre_px[1]) * 2.0;
        assert_true(fabs(v.com_x[i] - (cos(th) * d0 - sin(th) * d1)) < 1e-12);
        assert_true(fabs(v.com_y[i] - (sin(th) * d0 + cos(th) * d1)) < 1e-12);
    }
    double mean = 0, mx = 0;
    for (size_t i = 0; i < NY * NX; i++) {
        mean += v.idpc[i];
        mx = fmax(mx, fabs(v.idpc[i]));
    }
    assert_true(mx > 0);
    assert_true(fabs(mean / (NY * NX)) < 1e-5 * mx); /* the k = 0 term is 0 */
    ssb4d_virtual_free(&v);
    assert_null(v.bf);
}

static void assert_same_bits(const ssb4d_virtual_images *a, const ssb4d_virtual_images *b)
{
    size_t n = a->scan_shape[0] * a->scan_shape[1] * sizeof(double);
    assert_memory_equal(a->bf, b->bf, n);
    assert_memory_equal(a->adf, b->adf, n);
    assert_memory_equal(a->com_x, b->com_x, n);
    assert_memory_equal(a->com_y, b->com_y, n);
    assert_memory_equal(a->idpc, b->idpc, n);
}

/* The same bits for 1, 2 and 3 threads and any frame block; float32 data as counts. */
static void test_deterministic(void **state)
{
    fixture *f = *state;
    ssb4d_virtual_params p;
    ssb4d_virtual_params_default(&p);
    p.threads = 1;
    ssb4d_virtual_images ref, v;
    compute(f, f->src, &p, &ref);
    const size_t blocks[3] = {DR * DC * 4, 7 * DR * DC * 4 + 5, 0};
    for (int t = 1; t <= 3; t++)
        for (int b = 0; b < 3; b++) {
            p.threads = t;
            p.block_bytes = blocks[b];
            compute(f, f->src, &p, &v);
            assert_same_bits(&ref, &v);
            ssb4d_virtual_free(&v);
        }
    ssb4d_source *fs = NULL;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_source_from_memory(f->values, SSB4D_F32, f->shape, &fs, &err), SSB4D_OK);
    p.threads = 2;
    p.block_bytes = 5 * DR * DC * 4;
    compute(f, fs, &p, &v);
    assert_same_bits(&ref, &v);
    ssb4d_virtual_free(&v);
    ssb4d_source_close(fs);
    ssb4d_virtual_free(&ref);
}

/* The CoM convention: flip swaps the detector components, then R(θ) turns them. */
static void test_rotation_flip(void **state)
{
    fixture *f = *state;
    ssb4d_virtual_images a, b;
    ssb4d_calibration keep = f->cal;
    f->cal.geom.rotation_deg = 0;
    f->cal.geom.flip = 0;
    compute(f, f->src, NULL, &a);
    f->cal.geom.rotation_deg = 90;
    f->cal.geom.flip = 1;
    compute(f, f->src, NULL, &b);
    f->cal = keep;
    for (size_t i = 0; i < NY * NX; i++) {
        /* d = (d0, d1) -> flip (d1, d0) -> R(90°) (−d0, d1) */
        assert_true(fabs(b.com_x[i] + a.com_x[i]) < 1e-12);
        assert_true(fabs(b.com_y[i] - a.com_y[i]) < 1e-12);
    }
    assert_true(b.flip == 1 && b.rotation_deg == 90);
    ssb4d_virtual_free(&a);
    ssb4d_virtual_free(&b);
}

static void refused(fixture *f, double bfi, double bfo, double adi, double ado, const char *words)
{
    ssb4d_virtual_params p;
    ssb4d_virtual_params_default(&p);
    p.bf_inner_mrad = bfi;
    p.bf_outer_mrad = bfo;
    p.adf_inner_mrad = adi;
    p.adf_outer_mrad = ado;
    ssb4d_virtual_images v;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_virtual_compute(f->src, &f->cal, &p, &v, &err), SSB4D_EINVAL);
    if (!strstr(err.msg, words))
        fail_msg("'%s' lacks '%s'", err.msg, words);
    assert_null(v.bf);
    assert_null(v.idpc);
}

static void test_angles(void **state)
{
    fixture *f = *state;
    refused(f, 0, NAN, 20, 10, "not below");
    refused(f, 0, NAN, 10, 10, "not below");
    refused(f, 0, NAN, -1, 10, "ADF inner angle must be a number >= 0");
    refused(f, 0, -3, NAN, NAN, "BF outer angle must be");
    refused(f, 0, NAN, INFINITY, NAN, "ADF inner");
    refused(f, 5, 4, NAN, NAN, "BF inner angle 5 mrad is not below");
    refused(f, 0, NAN, 500, 600, "beyond the detector");
    refused(f, 300, 400, NAN, NAN, "beyond the detector");
    refused(f, 0, 0.5, NAN, NAN, "select no unflagged detector pixel");
    /* an outer angle beyond the detector is clamped to its farthest pixel */
    ssb4d_virtual_params p;
    ssb4d_virtual_params_default(&p);
    p.adf_inner_mrad = 16;
    p.adf_outer_mrad = 1000;
    ssb4d_virtual_images v;
    compute(f, f->src, &p, &v);
    assert_true(v.adf_outer_mrad == v.detector_max_mrad);
    assert_true(v.detector_max_mrad > 30 && v.detector_max_mrad < 40);
    ssb4d_virtual_free(&v);
    /* a BF annulus by angles */
    p.bf_inner_mrad = 4;
    p.bf_outer_mrad = 10;
    compute(f, f->src, &p, &v);
    assert_false(v.bf_default);
    assert_true(v.n_bf_pixels > 0 && v.n_bf_pixels < f->cal.n_bf);
    ssb4d_virtual_free(&v);
}

/* The workspace query is what the pass holds in its memory context at its peak. */
static void test_workspace(void **state)
{
    fixture *f = *state;
    ssb4d_virtual_params p;
    ssb4d_virtual_params_default(&p);
    p.block_bytes = 3 * DR * DC * 4;
    p.mem = ssb4d_mem_create(0);
    ssb4d_virtual_images v;
    compute(f, f->src, &p, &v);
    size_t images = 0, ws = ssb4d_virtual_workspace_bytes(f->shape, p.block_bytes, &images);
    assert_int_equal(images, 5 * NY * NX * sizeof(double));
    assert_int_equal(ws, 3 * DR * DC * 4 > 2 * NY * NX * 8 ? 3 * DR * DC * 4 : 2 * NY * NX * 8);
    assert_int_equal(ssb4d_mem_peak(p.mem), ws);
    assert_int_equal(ssb4d_mem_live(p.mem), 0);
    ssb4d_virtual_free(&v);
    ssb4d_mem_destroy(p.mem);
}

static int cancel_now(void *user, const char *stage, double f)
{
    (void)f;
    *(int *)user += !strcmp(stage, "virtual images");
    return 1;
}

static void test_cancel(void **state)
{
    fixture *f = *state;
    ssb4d_virtual_params p;
    ssb4d_virtual_params_default(&p);
    int calls = 0;
    p.progress = cancel_now;
    p.progress_user = &calls;
    ssb4d_virtual_images v;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_virtual_compute(f->src, &f->cal, &p, &v, &err), SSB4D_ECANCELLED);
    assert_int_equal(calls, 1);
    assert_null(v.bf);
}

/* The session's call: its calibration and current rotation, the same bits as the stage. */
static void test_session(void **state)
{
    fixture *f = *state;
    ssb4d_session_opts o;
    ssb4d_session_opts_default(&o);
    calib_params(&o.calib);
    o.threads = 2;
    ssb4d_session *s = NULL;
    ssb4d_err err = {0};
    if (ssb4d_session_open_memory(f->counts, SSB4D_U16, f->shape, &o, &s, &err))
        fail_msg("%s", err.msg);
    ssb4d_virtual_images a, b;
    if (ssb4d_session_virtual(s, NULL, &a, &err))
        fail_msg("%s", err.msg);
    compute(f, f->src, NULL, &b);
    assert_same_bits(&a, &b);
    ssb4d_virtual_free(&a);
    ssb4d_virtual_free(&b);
    ssb4d_session_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sums),          cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_rotation_flip), cmocka_unit_test(test_angles),
        cmocka_unit_test(test_workspace),     cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_session),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
