/* test_refine_plan.c — ssb4d_refine_plan_make (`ssb4d plan --refine`, docs/refine.md "Data and
 * memory") predicts the tracked peak a real ssb4d_refine counts, to the byte, and the grids it
 * uses: on a small simulated case, with the library's choices (auto slices and bin, default batch)
 * and with stated ones on a rotated, mirrored geometry with flagged pixels in the bright field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fixture.h"
#include "refine_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One refinement of 1 pass in a fresh memory context against its plan. */
static void check(rcase *c, const ssb4d_geometry *g, const ssb4d_calibration *cal, const size_t region[4],
                  ssb4d_refine_params p)
{
    size_t sh[4];
    ssb4d_source_shape(c->src, sh);
    ssb4d_refine_plan pl;
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_refine_plan_make(sh, region, g, cal, &p, &pl, &err);
    if (st)
        printf("%s\n", err.msg);
    assert_int_equal(st, SSB4D_OK);
    ssb4d_mem *mem = ssb4d_mem_create(0);
    p.mem = mem;
    p.iterations = 1;
    ssb4d_refine_result r;
    st = ssb4d_refine(c->src, cal, g, region, &c->truth_mid, NULL, &p, &r, &err);
    if (st)
        printf("%s\n", err.msg);
    assert_int_equal(st, SSB4D_OK);
    printf("plan: %zu positions, %d slices, bin %d, grid %zux%zu, object %zux%zu, %zu valid pixels; patterns %zu, "
           "frames %zu, workspace %zu, peak %zu bytes; the run's tracked peak %zu bytes\n",
           pl.positions, pl.slices, pl.bin, pl.grid[0], pl.grid[1], pl.object[0], pl.object[1], pl.valid_pixels,
           pl.patterns_bytes, pl.frames_bytes, pl.workspace_bytes, pl.peak_bytes, ssb4d_mem_peak(mem));
    assert_int_equal(ssb4d_mem_peak(mem), pl.peak_bytes);
    assert_int_equal(r.slices, pl.slices);
    assert_int_equal(r.bin, pl.bin);
    assert_int_equal(r.obj_shape[0], pl.object[0]);
    assert_int_equal(r.obj_shape[1], pl.object[1]);
    assert_int_equal(r.probe_shape[0], pl.grid[0]);
    assert_int_equal(r.probe_shape[1], pl.grid[1]);
    assert_true(r.obj_pixel_A[0] == pl.object_pixel_A[0] && r.obj_pixel_A[1] == pl.object_pixel_A[1]);
    ssb4d_refine_result_free(&r);
    ssb4d_mem_destroy(mem);
}

static void test_plan_matches_run(void **state)
{
    (void)state;
    rcase c;
    assert_int_equal(rcase_make(&c, 12, 1, 0.0, 0.0), 0);
    ssb4d_refine_params p;
    ssb4d_refine_params_default(&p);
    p.thickness_range_nm[0] = 1.0, p.thickness_range_nm[1] = 4.0; /* auto: 2 slices at 2.5 nm */
    size_t all[4] = {0, 0, 0, 0};
    check(&c, &c.cal.geom, &c.cal, all, p);

    /* stated choices on a rotated, mirrored geometry, an off-centre region, flagged BF pixels */
    ssb4d_geometry g = c.cal.geom;
    g.rotation_deg = 30.0;
    g.flip = 1;
    ssb4d_calibration cal = c.cal;
    size_t D = c.sim.shape[3];
    int32_t flagged[3] = {(int32_t)((D / 2) * D + D / 2), (int32_t)((D / 2) * D + D / 2 + 1), 0};
    cal.flagged = flagged;
    cal.n_flagged = 3;
    ssb4d_refine_params_default(&p);
    p.slices = 3;
    p.bin = 2;
    p.batch = 7;
    p.threads = 2;
    size_t reg[4] = {2, 9, 3, 12};
    check(&c, &g, &cal, reg, p);
    rcase_free(&c);
}

static void test_plan_refuses(void **state)
{
    (void)state;
    size_t sh[4] = {16, 16, 48, 48}, bad[4] = {0, 17, 0, 4};
    ssb4d_geometry g;
    memset(&g, 0, sizeof g);
    g.kv = 300, g.det_sampling_mrad[0] = g.det_sampling_mrad[1] = 1.0;
    g.scan_step_A[0] = g.scan_step_A[1] = 1.0, g.centre_px[0] = g.centre_px[1] = 24;
    ssb4d_refine_params p;
    ssb4d_refine_params_default(&p);
    ssb4d_refine_plan pl;
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_refine_plan_make(sh, bad, &g, NULL, &p, &pl, &err), SSB4D_EINVAL);
    p.bin = 3;
    assert_int_equal(ssb4d_refine_plan_make(sh, NULL, &g, NULL, &p, &pl, &err), SSB4D_EINVAL);
    p.bin = 0;
    g.kv = 0;
    assert_int_equal(ssb4d_refine_plan_make(sh, NULL, &g, NULL, &p, &pl, &err), SSB4D_EINVAL);
    g.kv = 300;
    assert_int_equal(ssb4d_refine_plan_make(sh, NULL, &g, NULL, &p, &pl, &err), SSB4D_OK);
    assert_int_equal(pl.positions, 256);
    assert_int_equal(pl.valid_pixels, 48 * 48); /* a centred BF: every pixel in the grid */
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_plan_matches_run), cmocka_unit_test(test_plan_refuses)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
