/* test_image.c — phase images written as TIFF float32 (read back with libtiff, bit for bit, with
 * the sampling in the resolution tags), 8-bit PNG (decoded with libspng) and .npy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>
#include <unistd.h>

#include "io/image.h"
#include "io/npy.h"

enum { ROWS = 37, COLS = 53 };
static float img[ROWS * COLS];
static char dir[64];

static void fill(void)
{
    for (int i = 0; i < ROWS * COLS; i++)
        img[i] = sinf(0.1f * (float)i) * 1.5f + (float)(i % 7) * 1e-3f;
}

static void tiff_round_trip(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/p.tiff", dir);
    double px[2] = {0.25, 0.5};
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_image_write(path, img, ROWS, COLS, px, &err), SSB4D_OK);
    TIFF *t = TIFFOpen(path, "r");
    assert_non_null(t);
    uint32_t w = 0, h = 0;
    uint16_t bps = 0, fmt = 0, unit = 0;
    float xr = 0, yr = 0;
    TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w);
    TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h);
    TIFFGetField(t, TIFFTAG_BITSPERSAMPLE, &bps);
    TIFFGetField(t, TIFFTAG_SAMPLEFORMAT, &fmt);
    TIFFGetField(t, TIFFTAG_RESOLUTIONUNIT, &unit);
    TIFFGetField(t, TIFFTAG_XRESOLUTION, &xr);
    TIFFGetField(t, TIFFTAG_YRESOLUTION, &yr);
    assert_int_equal(w, COLS);
    assert_int_equal(h, ROWS);
    assert_int_equal(bps, 32);
    assert_int_equal(fmt, SAMPLEFORMAT_IEEEFP);
    assert_int_equal(unit, RESUNIT_CENTIMETER);
    assert_true(fabs(xr - 1e8 / 0.5) < 1.0 && fabs(yr - 1e8 / 0.25) < 1.0);
    float row[COLS];
    for (uint32_t r = 0; r < h; r++) {
        assert_int_equal(TIFFReadScanline(t, row, r, 0), 1);
        assert_memory_equal(row, img + r * COLS, sizeof row);
    }
    TIFFClose(t);
}

static void png_and_npy(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/p.png", dir);
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_image_write(path, img, ROWS, COLS, NULL, &err), SSB4D_OK);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    spng_ctx *ctx = spng_ctx_new(0);
    spng_set_png_file(ctx, f);
    struct spng_ihdr ihdr;
    assert_int_equal(spng_get_ihdr(ctx, &ihdr), 0);
    assert_int_equal(ihdr.width, COLS);
    assert_int_equal(ihdr.height, ROWS);
    unsigned char grey[ROWS * COLS], want[ROWS * COLS];
    assert_int_equal(spng_decode_image(ctx, grey, sizeof grey, SPNG_FMT_G8, 0), 0);
    spng_ctx_free(ctx);
    fclose(f);
    ssb4d_image_to_u8(img, ROWS * COLS, want);
    assert_memory_equal(grey, want, sizeof grey);
    int lo = 255, hi = 0;
    for (int i = 0; i < ROWS * COLS; i++) {
        lo = want[i] < lo ? want[i] : lo;
        hi = want[i] > hi ? want[i] : hi;
    }
    assert_int_equal(lo, 0); /* the percentile stretch uses the full range */
    assert_int_equal(hi, 255);
    snprintf(path, sizeof path, "%s/p.npy", dir);
    assert_int_equal(ssb4d_image_write(path, img, ROWS, COLS, NULL, &err), SSB4D_OK);
    ssb4d_npy_info info;
    void *data;
    assert_int_equal(ssb4d_npy_load(path, &info, &data, &err), SSB4D_OK);
    assert_string_equal(info.descr, "<f4");
    assert_memory_equal(data, img, sizeof img);
    free(data);
    snprintf(path, sizeof path, "%s/p.bmp", dir);
    assert_int_equal(ssb4d_image_write(path, img, ROWS, COLS, NULL, &err), SSB4D_EINVAL);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/missing-dir/p.tiff", dir);
    assert_int_equal(ssb4d_image_write(path, img, ROWS, COLS, NULL, &err), SSB4D_EIO);
}

int main(void)
{
    fill();
    snprintf(dir, sizeof dir, "/tmp/ssb4d-img-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(tiff_round_trip), cmocka_unit_test(png_and_npy)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
