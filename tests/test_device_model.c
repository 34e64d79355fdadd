/* test_device_model.c — the CUDA backend's device-memory model (src/plan/device_model.c, issue 31)
 * against sizes worked out by hand here from src/cuda/device.c's buffers, for two shapes:
 *   A: a 64x64 scan, 100 BF pixels all stored; an exact-loss batch of 8, a preview at f = 2
 *      (phase), a release (f = 1; no buffer grows); cuFFT's work area estimated;
 *   B: a 32x48 scan, 200 BF pixels of which 150 stored; the band power and a band batch of 8 sets
 *      over 8 rotations on 300 bins, the complex object at f = 3, a loss batch of 4; cuFFT's work
 *      areas from a given function (as cuda_fft_work_bytes gives them with a device).
 * Also: the drag preview's view, the estimate's formula, and that the session's replay
 * (dev_model_session) is the stage functions in handle.c's order, and that plan_device_session
 * takes the plan's fit batches. Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "plan/device_model.h"
#include "plan/plan.h"
#include "cuda/loss_fused.h"

static void test_shape_a(void **state)
{
    (void)state;
    dev_model m;
    dev_model_init(&m, 64, 64, 100, 0, NULL);
    m.fused = 0; /* the cuFFT path (SSB4D_CUDA_LOSS=cufft); test_shape_fused: the fused loss */
    /* stride: 64 * 33 = 2112 float2 (a multiple of 8); 100 planes x 2112 x 8 B */
    assert_int_equal(m.stride, 2112);
    assert_int_equal(m.planes, 1689600);
    assert_true(m.fft_estimated);
    /* loss, 8 sets, f = 1: nb = 2112 bins, npix = 4096, P = 64 pixels in flight
     *   tab   (3*100 + 64 + 64 + 5*100*8) * 8 = 4428 * 8   =    35424
     *   spec  64 * 2112 * 8                                = 1081344
     *   valid 64                                           =       64
     *   real  64 * 4096 * 4                                = 1048576
     *   sums  8 * 2 * 4096 * 8                             =  524288, bpart the same
     *   fin   8 * 2 * 8                                    =      128
     *   C2R work (estimate: the batch's output) 64*4096*4  = 1048576   → 4262688 */
    dev_model_phases(&m, "loss", 100, 8, 1, 1, 0, 0);
    assert_int_equal(m.buf[DEV_TAB], 35424);
    assert_int_equal(m.buf[DEV_SPEC], 1081344);
    assert_int_equal(m.buf[DEV_WORK], 1048576);
    assert_int_equal(m.stages[0].bytes, 4262688);
    assert_int_equal(m.stages[0].after, 1689600 + 4262688);
    /* preview, f = 2, the phase: nb = 128 * 65 = 8320, npix = 16384, P = 16
     *   tab 1056 * 8 = 8448, spec 16 * 8320 * 8 = 1064960, valid 16: below what is held
     *   acc 8320 * 16 = 133120, F 16384 * 8 = 131072, out 16384 * 4 = 65536,
     *   C2C work (estimate: F's size) 131072: within the one area held (the C2R's 1048576)
     *                                                        → grows by 329728 */
    dev_model_phases(&m, "preview", 100, 1, 2, 0, 0, 1);
    assert_int_equal(m.stages[1].bytes, 8448 + 1064960 + 16 + 133120 + 131072 + 65536 + 131072);
    assert_int_equal(m.stages[1].after, 5952288 + 329728);
    /* release, f = 1: every buffer within what is held */
    dev_model_phases(&m, "release", 100, 1, 1, 1, 0, 1);
    assert_int_equal(m.stages[2].after, 6282016);
    assert_int_equal(dev_model_bytes(&m), 6282016);
    assert_int_equal(dev_model_work_bytes(&m), 6282016 - 1689600);
}

/* Shape A with the fused loss (cuda/loss_fused.h): no spectra, phase planes or C2R plan for the
 * loss; its group's planes and twiddles instead; a release makes the object's sum in a pass of
 * its own (the spectra then). */
static void test_shape_fused(void **state)
{
    (void)state;
    dev_model m;
    dev_model_init(&m, 64, 64, 100, 0, NULL);
    m.fused = 1;
    /* loss, 8 sets, f = 1: tab 35424, sums and bpart 524288 each, fin 128;
     *   the group: 64 pixels (a plane 64 * 33 * 8 = 16896 B): xbuf 64 * 16896 = 1081344;
     *   twiddles (64 + 64) * 8 = 1024 */
    dev_model_phases(&m, "loss", 100, 8, 1, 1, 0, 0);
    assert_int_equal(cu_fused_group(64, 64, 64), 64);
    assert_int_equal(m.buf[DEV_SPEC], 0);
    assert_int_equal(m.buf[DEV_REAL], 0);
    assert_int_equal(m.buf[DEV_WORK], 0);
    assert_int_equal(m.buf[DEV_XBUF], 1081344);
    assert_int_equal(m.buf[DEV_TW], 1024);
    assert_int_equal(m.stages[0].bytes, 35424 + 2 * 524288 + 128 + 1081344 + 1024);
    /* release (the phase): spec 1081344, valid 64, acc 2112 * 16, F 4096 * 8, out 4096 * 4, C2C
     * work (estimate) 32768; the rest within what is held */
    dev_model_phases(&m, "release", 100, 1, 1, 1, 0, 1);
    assert_int_equal(m.stages[1].after,
                     m.stages[0].after + 1081344 + 64 + 33792 + 32768 + 16384 + 32768);
    /* a 48-wide grid is not a power of two: the cuFFT path's buffers */
    dev_model n;
    dev_model_init(&n, 32, 48, 10, 0, NULL);
    n.fused = 1;
    dev_model_phases(&n, "loss", 10, 1, 1, 1, 0, 0);
    assert_int_equal(n.buf[DEV_XBUF], 0);
    assert_true(n.buf[DEV_REAL] > 0);
    /* the group at 512^2: 16 pixels (24 MiB of planes at most), the row kernel 16 at once (48 KiB) */
    assert_int_equal(cu_fused_group(512, 512, 64), 16);
    assert_int_equal(cu_fused_xbuf_bytes(512, 512, 64), (size_t)16 * 512 * 257 * 8);
    assert_int_equal(cu_fused_row_pixels(512, 16), 16);
    assert_int_equal(cu_fused_row_pixels(2048, 64), 4); /* 128 threads and 8704 B a pixel */
}

static size_t work_b(int nyf, int nxf, int batch, int c2c)
{
    (void)nyf, (void)nxf;
    return c2c ? 5000 : (size_t)100 * (size_t)batch;
}

static void test_shape_b(void **state)
{
    (void)state;
    dev_model m;
    dev_model_init(&m, 32, 48, 150, 0, work_b);
    /* stride 32 * 25 = 800; 150 planes x 800 x 8 */
    assert_int_equal(m.planes, 960000);
    assert_false(m.fft_estimated);
    /* band power, 200 pixels, 300 bins: tab (4*300 + 2*200 + 3*200) * 8 = 17600, sums 300 * 8 */
    dev_model_band_power(&m, "power", 200, 300);
    assert_int_equal(m.stages[0].after, 960000 + 17600 + 2400);
    /* band batch, 8 sets, 8 rotations: tab (1200 + 400 + 3*8*200) * 8 = 51200;
     * acc 8 cu_band_set of 432 B (ssb_phys: 14+14+3 doubles 248, 28 ints 112, 2 ints 8, 3 doubles
     * 24, 4 doubles 32 = 424; + rot 8) = 3456; nout = 8 * 300 * 4 = 9600: sums, bpart 76800 each;
     * seg: ceil(200 / 64) = 4 segments x 3 x 8 = 96 */
    dev_model_band(&m, "band", 200, 8, 8, 300);
    assert_int_equal(m.buf[DEV_ACC], 3456);
    assert_int_equal(m.buf[DEV_SEG], 96);
    assert_int_equal(m.stages[1].bytes, 51200 + 3456 + 76800 + 76800 + 96);
    assert_int_equal(m.stages[1].after, 1168352);
    /* the complex object at f = 3: 96 x 144, nb = 96 * 73 = 7008, npix = 13824, P = 64/9 = 7
     *   tab 1840 * 8 = 14720 (held: 51200); spec 7 * 7008 * 8 = 392448; valid 7;
     *   acc 7008 * 16 = 112128 (from 3456); F 13824 * 8 = 110592; out 2 * 13824 * 4 = 110592;
     *   C2C work 5000 */
    dev_model_phases(&m, "object", 200, 1, 3, 0, 0, 2);
    assert_int_equal(m.buf[DEV_SPEC], 392448);
    assert_int_equal(m.buf[DEV_VALID], 7);
    assert_int_equal(m.stages[2].after, 1168352 + 392448 + 7 + (112128 - 3456) + 110592 + 110592 + 5000);
    /* loss, 4 sets, f = 1: nb = 800, npix = 1536, P = 64
     *   tab 4680 * 8 = 37440 (held 51200); spec 64 * 800 * 8 = 409600 (+17152); valid 64 (+57);
     *   real 64 * 1536 * 4 = 393216; sums, bpart 4 * 2 * 1536 * 8 = 98304 each (+21504 each);
     *   fin 64; C2R work 100 * 64 = 6400: the one work area grows from the C2C's 5000 */
    dev_model_phases(&m, "loss", 200, 4, 1, 1, 0, 0);
    assert_int_equal(m.stages[3].after, 1895663 + 17152 + 57 + 393216 + 21504 + 21504 + 64 + 1400);
    assert_int_equal(dev_model_bytes(&m), 2350560);
    /* the mean phase adds its plane (npix floats) */
    dev_model_phases(&m, NULL, 200, 1, 1, 1, 1, 0);
    assert_int_equal(dev_model_bytes(&m), 2350560 + 1536 * 4);
    assert_int_equal(m.n_stages, 4);
}

static void test_helpers(void **state)
{
    (void)state;
    assert_int_equal(dev_preview_bf(100, 256), 100);
    assert_int_equal(dev_preview_bf(9000, 256), 258); /* step 35: pixels 0, 35, ..., 8995 */
    assert_int_equal(dev_preview_bf(512, 0), 256);
    assert_int_equal(dev_fft_work_estimate(10, 20, 3, 0), 3 * 200 * 4);
    assert_int_equal(dev_fft_work_estimate(10, 20, 3, 1), 200 * 8);
}

/* dev_model_session is the stage functions in the session's order. */
static void test_session(void **state)
{
    (void)state;
    dev_session_in in;
    memset(&in, 0, sizeof in);
    in.ny = 48, in.nx = 40, in.n_bf = 900, in.n_stored = 800, in.f = 2, in.fit = 1, in.band = 1;
    in.n_fit = 900, in.n_coarse = 225, in.sets_coarse = 8, in.sets_fit = 3, in.rot_coarse = 1, in.rot_fit = 1;
    in.band_nb = 500, in.branch_check = 1, in.fft_work = work_b;
    dev_model s, h;
    dev_model_session(&in, &s);
    dev_model_init(&h, 48, 40, 800, 0, work_b);
    dev_model_band_power(&h, "a", 225, 500);
    dev_model_band(&h, "b", 225, 8, 1, 500);
    dev_model_band_power(&h, "c", 900, 500);
    dev_model_band(&h, "d", 900, 3, 1, 500);
    dev_model_phases(&h, "e", 900, 1, 1, 0, 0, 1);
    dev_model_phases(&h, "f", 900, 1, 1, 1, 0, 0);
    dev_model_phases(&h, "g", dev_preview_bf(900, 256), 1, 2, 0, 0, 1);
    dev_model_phases(&h, "h", 900, 1, 1, 1, 0, 1);
    dev_model_phases(&h, "i", 900, 1, 2, 0, 0, 1);
    assert_int_equal(s.n_stages, h.n_stages);
    for (size_t i = 0; i < s.n_stages; i++)
        assert_int_equal(s.stages[i].after, h.stages[i].after);
    assert_int_equal(dev_model_bytes(&s), dev_model_bytes(&h));
    assert_string_equal(s.stages[s.n_stages - 3].name, "drag preview");

    /* the plan's side: the default fit's batch on the coarse subset, Nelder–Mead's 3 on all */
    ssb4d_plan_input pi;
    ssb4d_plan_input_default(&pi);
    pi.scan[0] = pi.scan[1] = 64, pi.det[0] = pi.det[1] = 64, pi.n_bf = 1000, pi.upsample = 4;
    ssb4d_fit_params fp;
    ssb4d_fit_params_default(&fp);
    fp.rotation_given = 1;
    pi.fit = &fp;
    dev_session_in d;
    plan_device_session(&pi, 64, 64, &d);
    assert_int_equal(d.n_bf, 1000);
    assert_int_equal(d.n_stored, 1000);
    assert_int_equal(d.f, 4);
    assert_true(d.fit && d.band && d.branch_check);
    assert_int_equal(d.n_fit, 1000);
    assert_int_equal(d.n_coarse, 250); /* every 4th of 1000 */
    assert_int_equal(d.sets_coarse, 8);
    assert_int_equal(d.sets_fit, 3);
    assert_int_equal(d.band_nb, 64 * 33); /* no geometry: the whole half-plane */
    pi.no_fit = 1;
    plan_device_session(&pi, 64, 64, &d);
    assert_false(d.fit);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_a), cmocka_unit_test(test_shape_fused),
        cmocka_unit_test(test_shape_b),
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
