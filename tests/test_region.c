/* test_region.c — region views of a source (ssb4d_source_region, SPEC §6.4).
 *
 * A 50x45 scan of 10x10 uint16 frames (Poisson-like counts with a bright disk) is written as a
 * .npy and imported into a .qem (no hot-pixel change, so both hold the same counts; the .qem
 * blocks of 512 scans end inside scan rows). For both sources and for several rectangles
 * (inner, full width, touching the far corner, a view of a view):
 *   - frames of the view equal the corresponding crop of the parent's frames, for whole and
 *     partial reads that start and end inside view rows;
 *   - columns of the view equal the crop of the parent's columns for the same scan rows, with 1
 *     and 3 threads, and equal the columns of a cropped copy in memory;
 *   - the G built from the view equals the G built from the cropped copy
 *     (ssb4d_source_from_memory) bit for bit (ssb4d_G_sha256), with G-build blocks that
 *     straddle the .qem blocks;
 *   - closing the view leaves the parent usable.
 * Refusals: empty, outside the scan, smaller than 32x32 (message names the size), NULL parent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/splitmix.h"
#include "io/npy.h"
#include "ref_ssb.h"
#include "source/source.h"
#include "ssb4d_advanced.h"

enum { NY = 50, NX = 45, DR = 10, DC = 10 };
#define NPOS ((size_t)NY * NX)
#define NPIX ((size_t)DR * DC)

typedef struct {
    char dir[512], npy[600], qem[600];
    uint16_t *counts; /* NY x NX x DR x DC */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f || ref_tmpdir(f->dir, sizeof f->dir, "region"))
        return -1;
    snprintf(f->npy, sizeof f->npy, "%s/d.npy", f->dir);
    snprintf(f->qem, sizeof f->qem, "%s/d.qem", f->dir);
    f->counts = malloc(NPOS * NPIX * sizeof *f->counts);
    uint64_t s = 12345;
    for (size_t t = 0; t < NPOS; t++)
        for (size_t k = 0; k < NPIX; k++) {
            double dr = (double)(k / DC) - 4.5, dc = (double)(k % DC) - 4.5;
            unsigned base = dr * dr + dc * dc < 12 ? 30 : 10; /* contrast 3: no hot pixels */
            f->counts[t * NPIX + k] = (uint16_t)(base + ssb4d_splitmix64(&s) % 11);
        }
    ssb4d_err err = {0};
    size_t shape[4] = {NY, NX, DR, DC};
    if (ssb_npy_save(f->npy, "<u2", 4, shape, f->counts, &err))
        return -1;
    ssb4d_import_params p;
    ssb4d_import_params_default(&p);
    p.hot = SSB4D_HOT_NONE;
    p.threads = 2;
    if (ssb4d_import(f->npy, f->qem, &p, NULL, &err)) {
        fprintf(stderr, "import: %s\n", err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ref_rmtree(f->dir);
    free(f->counts);
    free(f);
    return 0;
}

static ssb4d_source *open_or_fail(const char *path)
{
    ssb4d_source *s = NULL;
    ssb4d_err err = {0};
    if (ssb4d_source_open(path, &s, &err))
        fail_msg("open %s: %s", path, err.msg);
    return s;
}

static ssb4d_source *region_or_fail(ssb4d_source *p, size_t r0, size_t r1, size_t c0, size_t c1)
{
    ssb4d_source *v = NULL;
    ssb4d_err err = {0};
    if (ssb4d_source_region(p, r0, r1, c0, c1, &v, &err))
        fail_msg("region [%zu,%zu)x[%zu,%zu): %s", r0, r1, c0, c1, err.msg);
    return v;
}

/* The counts of scan rows [r0,r1) x cols [c0,c1) as a dense array. */
static uint16_t *crop(const uint16_t *counts, size_t r0, size_t r1, size_t c0, size_t c1)
{
    size_t vny = r1 - r0, vnx = c1 - c0;
    uint16_t *o = malloc(vny * vnx * NPIX * sizeof *o);
    for (size_t r = 0; r < vny; r++)
        memcpy(o + r * vnx * NPIX, counts + ((r0 + r) * NX + c0) * NPIX, vnx * NPIX * sizeof *o);
    return o;
}

static void check_frames(ssb4d_source *view, const uint16_t *want, size_t npos)
{
    uint32_t *got = malloc(npos * NPIX * sizeof *got);
    ssb4d_err err = {0};
    /* whole, then pieces that start and end inside view rows */
    size_t pieces[][2] = {{0, npos}, {7, 50}, {npos / 3, npos / 2}, {npos - 1, 1}, {0, 1}};
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        size_t p0 = pieces[i][0], n = pieces[i][1];
        memset(got, 0xab, n * NPIX * sizeof *got);
        assert_int_equal(ssb4d_source_read_frames(view, p0, n, got, &err), SSB4D_OK);
        for (size_t j = 0; j < n * NPIX; j++)
            if (got[j] != want[p0 * NPIX + j])
                fail_msg("frame value %zu of piece %zu+%zu: %u, want %u", j, p0, n, got[j],
                         want[p0 * NPIX + j]);
    }
    /* past the end is refused like any source */
    assert_int_equal(ssb4d_source_read_frames(view, npos - 1, 2, got, &err), SSB4D_EINVAL);
    free(got);
}

/* View columns vs the crop of the parent's columns vs a cropped copy in memory. */
static void check_columns(ssb4d_source *parent, size_t pr0, size_t pc0, ssb4d_source *view,
                          ssb4d_source *mem_src)
{
    size_t vs[4], ps[4];
    ssb4d_source_shape(view, vs);
    ssb4d_source_shape(parent, ps);
    int32_t pix[] = {0, 44, 45, 99, 13, 55};
    size_t np = sizeof pix / sizeof pix[0];
    size_t spans[][2] = {{0, vs[0]}, {3, 5}, {vs[0] - 1, 1}};
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++) {
        size_t row0 = spans[i][0], nr = spans[i][1];
        float *pc = malloc(np * nr * ps[1] * sizeof *pc);
        float *vc = malloc(np * nr * vs[1] * sizeof *vc), *mc = malloc(np * nr * vs[1] * sizeof *mc);
        ssb4d_err err = {0};
        assert_int_equal(ssb4d_source_read_columns(parent, pix, np, pr0 + row0, nr, pc, &err), SSB4D_OK);
        assert_int_equal(ssb4d_source_read_columns(mem_src, pix, np, row0, nr, mc, &err), SSB4D_OK);
        for (int threads = 1; threads <= 3; threads += 2) {
            memset(vc, 0xff, np * nr * vs[1] * sizeof *vc);
            assert_int_equal(ssb_source_read_columns_mt(view, pix, np, row0, nr, vc, threads, &err),
                             SSB4D_OK);
            for (size_t p = 0; p < np; p++)
                for (size_t r = 0; r < nr; r++)
                    if (memcmp(vc + (p * nr + r) * vs[1], pc + (p * nr + r) * ps[1] + pc0,
                               vs[1] * sizeof *vc))
                        fail_msg("columns of pixel %d, view row %zu differ from the parent's crop",
                                 (int)pix[p], row0 + r);
            assert_memory_equal(vc, mc, np * nr * vs[1] * sizeof *vc);
        }
        /* rows past the view and pixels off the detector are refused */
        assert_int_equal(ssb4d_source_read_columns(view, pix, np, vs[0] - nr + 1, nr, vc, &err),
                         SSB4D_EINVAL);
        int32_t off = (int32_t)NPIX;
        assert_int_equal(ssb4d_source_read_columns(view, &off, 1, 0, 1, vc, &err), SSB4D_EINVAL);
        free(pc);
        free(vc);
        free(mc);
    }
}

static void G_hex(ssb4d_source *s, size_t rows_per_block, char hex[65])
{
    size_t sh[4];
    ssb4d_source_shape(s, sh);
    ssb4d_geometry g = {.kv = 300, .semiangle_mrad = 20, .scan_step_A = {0.4, 0.41},
                        .det_sampling_mrad = {5.0, 5.0}, .centre_px = {4.5, 4.5}, .rotation_deg = 7};
    int32_t bf[NPIX];
    size_t nbf = 0;
    for (size_t k = 0; k < NPIX; k++) {
        double dr = (double)(k / DC) - 4.5, dc = (double)(k % DC) - 4.5;
        if (dr * dr + dc * dc <= 16)
            bf[nbf++] = (int32_t)k;
    }
    ssb4d_gbuild_opts o;
    ssb4d_gbuild_opts_default(&o);
    o.threads = 2;
    o.store_inactive = 1;
    o.block_bytes = rows_per_block * nbf * sh[1] * sizeof(float);
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_G *G = NULL;
    ssb4d_err err = {0};
    if (ssb4d_gbuild(s, &g, bf, nbf, &o, mem, &G, &err))
        fail_msg("gbuild: %s", err.msg);
    size_t ny, nx;
    ssb4d_G_scan_shape(G, &ny, &nx);
    assert_int_equal(ny, sh[0]);
    assert_int_equal(nx, sh[1]);
    assert_true(ssb4d_G_dc(G) > 0);
    ssb4d_G_sha256(G, hex);
    ssb4d_G_free(G);
    ssb4d_mem_destroy(mem);
}

/* Every check for one rectangle of one parent. */
static void check_rect(const fixture *f, ssb4d_source *parent, size_t r0, size_t r1, size_t c0,
                       size_t c1)
{
    ssb4d_source *v = region_or_fail(parent, r0, r1, c0, c1);
    size_t vs[4];
    ssb4d_source_shape(v, vs);
    assert_int_equal(vs[0], r1 - r0);
    assert_int_equal(vs[1], c1 - c0);
    assert_int_equal(vs[2], DR);
    assert_int_equal(vs[3], DC);
    assert_int_equal(ssb4d_source_dtype(v), ssb4d_source_dtype(parent));
    assert_null(ssb_source_qem(v));

    uint16_t *want16 = crop(f->counts, r0, r1, c0, c1);
    size_t npos = vs[0] * vs[1];
    check_frames(v, want16, npos);
    ssb4d_source *m = NULL;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_source_from_memory(want16, SSB4D_U16, vs, &m, &err), SSB4D_OK);
    check_columns(parent, r0, c0, v, m);

    char hv[65], hv1[65], hm[65];
    G_hex(v, 7, hv);
    G_hex(v, 1, hv1);
    G_hex(m, 0, hm);
    assert_string_equal(hv, hm);
    assert_string_equal(hv1, hm);

    ssb4d_source_close(v);
    ssb4d_source_close(m);
    free(want16);
    /* the parent is still open and right */
    uint32_t one[NPIX];
    assert_int_equal(ssb4d_source_read_frames(parent, NPOS - 1, 1, one, &err), SSB4D_OK);
    assert_int_equal(one[NPIX - 1], f->counts[NPOS * NPIX - 1]);
}

static void views_of(void **state, const char *path)
{
    const fixture *f = *state;
    ssb4d_source *p = open_or_fail(path);
    check_rect(f, p, 7, 41, 5, 40);   /* inner */
    check_rect(f, p, 3, 40, 0, NX);   /* full width: the parent's layout */
    check_rect(f, p, NY - 32, NY, NX - 33, NX); /* the far corner */
    check_rect(f, p, 0, NY, 0, NX);   /* the whole scan */

    /* A view of a view: (7+1 .. 7+33) x (5+2 .. 5+34) of the parent. */
    ssb4d_source *v = region_or_fail(p, 7, 41, 5, 40);
    ssb4d_source *w = region_or_fail(v, 1, 33, 2, 34);
    uint16_t *want = crop(f->counts, 8, 40, 7, 39);
    check_frames(w, want, 32 * 32);
    size_t ws[4];
    ssb4d_source_shape(w, ws);
    ssb4d_source *m = NULL;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_source_from_memory(want, SSB4D_U16, ws, &m, &err), SSB4D_OK);
    char hw[65], hm[65];
    G_hex(w, 3, hw);
    G_hex(m, 0, hm);
    assert_string_equal(hw, hm);
    ssb4d_source_close(w);
    ssb4d_source_close(m);
    ssb4d_source_close(v);
    free(want);
    ssb4d_source_close(p);
}

static void views_of_npy(void **state) { views_of(state, ((fixture *)*state)->npy); }
static void views_of_qem(void **state) { views_of(state, ((fixture *)*state)->qem); }

static void expect_refusal(ssb4d_source *p, size_t r0, size_t r1, size_t c0, size_t c1,
                           const char *needle)
{
    static char sentinel;
    ssb4d_source *v = (ssb4d_source *)(void *)&sentinel; /* must be reset to NULL */
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_source_region(p, r0, r1, c0, c1, &v, &err), SSB4D_EINVAL);
    assert_null(v);
    if (!strstr(err.msg, needle))
        fail_msg("region [%zu,%zu)x[%zu,%zu): message \"%s\" lacks \"%s\"", r0, r1, c0, c1, err.msg,
                 needle);
}

static void refusals(void **state)
{
    const fixture *f = *state;
    ssb4d_source *p = open_or_fail(f->npy);
    expect_refusal(p, 10, 30, 0, 40, "a region must be at least 32x32 scan positions; got 20x40");
    expect_refusal(p, 0, 40, 5, 36, "got 40x31");
    expect_refusal(p, 5, 5, 0, 40, "empty");
    expect_refusal(p, 20, 10, 0, 40, "empty");
    expect_refusal(p, 0, 40, 9, 9, "empty");
    expect_refusal(p, 10, NY + 1, 0, 40, "outside the 50x45 scan");
    expect_refusal(p, 0, 40, 10, NX + 100, "outside");
    expect_refusal(p, SIZE_MAX - 1, SIZE_MAX, 0, 40, "outside");
    /* a view of a view is bounded by the view */
    ssb4d_source *v = region_or_fail(p, 0, 40, 0, 40);
    expect_refusal(v, 0, 41, 0, 40, "outside the 40x40 scan");
    ssb4d_source_close(v);
    expect_refusal(NULL, 0, 40, 0, 40, "parent");
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_source_region(p, 0, 40, 0, 40, NULL, &err), SSB4D_EINVAL);
    ssb4d_source_close(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(views_of_npy),
        cmocka_unit_test(views_of_qem),
        cmocka_unit_test(refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
