/* test_image.c — phase images written as TIFF float32 (read back with libtiff, bit for bit, with
 * the sampling in the resolution tags), 8-bit PNG (decoded with libspng) and .npy; the annotated
 * preview (the image pixels exactly the plain rendering, the scale and colour bars and their
 * labels in the margins, clear of the edges, the unit in the text chunks); fit-regions' defocus
 * map (a bar of at least 1 nm, the spread printed); the calibration picture (disk circle, the
 * disk light grey, not saturated, flagged pixels in red). */
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

#include "fixture.h"
#include "io/annotate.h"
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
    assert_int_equal(ssb_image_write(path, img, ROWS, COLS, px, &err), SSB4D_OK);
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
    assert_int_equal(ssb_image_write(path, img, ROWS, COLS, NULL, &err), SSB4D_OK);
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
    ssb_image_to_u8(img, ROWS * COLS, want);
    assert_memory_equal(grey, want, sizeof grey);
    int lo = 255, hi = 0;
    for (int i = 0; i < ROWS * COLS; i++) {
        lo = want[i] < lo ? want[i] : lo;
        hi = want[i] > hi ? want[i] : hi;
    }
    assert_int_equal(lo, 0); /* the percentile stretch uses the full range */
    assert_int_equal(hi, 255);
    snprintf(path, sizeof path, "%s/p.npy", dir);
    assert_int_equal(ssb_image_write(path, img, ROWS, COLS, NULL, &err), SSB4D_OK);
    ssb4d_npy_info info;
    void *data;
    assert_int_equal(ssb_npy_load(path, &info, &data, &err), SSB4D_OK);
    assert_string_equal(info.descr, "<f4");
    assert_memory_equal(data, img, sizeof img);
    free(data);
    snprintf(path, sizeof path, "%s/p.bmp", dir);
    assert_int_equal(ssb_image_write(path, img, ROWS, COLS, NULL, &err), SSB4D_EINVAL);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/missing-dir/p.tiff", dir);
    assert_int_equal(ssb_image_write(path, img, ROWS, COLS, NULL, &err), SSB4D_EIO);
}

/* Decodes a PNG as RGB8 (grey ones too); *w, *h its size. Caller frees. */
static unsigned char *decode_rgb(const char *path, uint32_t *w, uint32_t *h)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    spng_ctx *ctx = spng_ctx_new(0);
    spng_set_png_file(ctx, f);
    struct spng_ihdr ihdr;
    assert_int_equal(spng_get_ihdr(ctx, &ihdr), 0);
    size_t n = 0;
    assert_int_equal(spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &n), 0);
    unsigned char *rgb = malloc(n);
    assert_non_null(rgb);
    assert_int_equal(spng_decode_image(ctx, rgb, n, SPNG_FMT_RGB8, 0), 0);
    spng_ctx_free(ctx);
    fclose(f);
    *w = ihdr.width;
    *h = ihdr.height;
    return rgb;
}

/* The value of the PNG's tEXt chunk `key` into out ("" when it has none). */
static void png_text(const char *path, const char *key, char *out, size_t n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    spng_ctx *ctx = spng_ctx_new(0);
    spng_set_png_file(ctx, f);
    uint32_t nt = 0;
    out[0] = 0;
    if (spng_get_text(ctx, NULL, &nt) == 0 && nt) {
        struct spng_text *t = calloc(nt, sizeof *t);
        assert_non_null(t);
        assert_int_equal(spng_get_text(ctx, t, &nt), 0);
        for (uint32_t i = 0; i < nt; i++)
            if (!strcmp(t[i].keyword, key))
                snprintf(out, n, "%s", t[i].text);
        free(t);
    }
    spng_ctx_free(ctx);
    fclose(f);
}

/* Pixels in [x0, x1) x [y0, y1) that differ from white. */
static size_t non_white(const unsigned char *rgb, uint32_t w, long x0, long y0, long x1, long y1)
{
    size_t n = 0;
    for (long y = y0; y < y1; y++)
        for (long x = x0; x < x1; x++)
            for (int c = 0; c < 3; c++)
                if (rgb[((size_t)y * w + (size_t)x) * 3 + c] != 255) {
                    n++;
                    break;
                }
    return n;
}

static void png_legend(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/legend.png", dir);
    ssb4d_png_legend lg = {0.5, "rad", 0, 0.0, NULL}; /* native: the display scale has its own test below */
    ssb4d_err err = {0};
    assert_int_equal(ssb_image_write_png_legend(path, img, ROWS, COLS, &lg, &err), SSB4D_OK);
    ssb4d_png_layout L;
    ssb_png_legend_layout(img, ROWS, COLS, &lg, &L);
    uint32_t w, h;
    unsigned char *rgb = decode_rgb(path, &w, &h);
    /* The size: the image plus both margins. */
    assert_int_equal(w, L.width);
    assert_int_equal(h, L.height);
    assert_true(w > COLS + 20 && h > ROWS + 10);
    /* The image region is the plain rendering, pixel for pixel. */
    unsigned char want[ROWS * COLS];
    ssb_image_to_u8(img, ROWS * COLS, want);
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++)
            for (int k = 0; k < 3; k++)
                assert_int_equal(rgb[((size_t)r * w + (size_t)c) * 3 + k], want[r * COLS + c]);
    /* The scale bar: 0.3 x 53 px x 0.5 A = 7.95 A -> 5 A = 10 px, black, labelled "5 Å". */
    assert_true(L.bar_length_A == 5.0);
    assert_string_equal(L.scale_label, "5 \xC3\x85");
    const long *sb = L.scale_bar;
    assert_int_equal(sb[2] - sb[0], 10);
    assert_true(sb[1] >= ROWS); /* below the image */
    assert_int_equal(non_white(rgb, w, sb[0], sb[1], sb[2], sb[3]), (size_t)((sb[2] - sb[0]) * (sb[3] - sb[1])));
    for (long x = sb[0]; x < sb[2]; x++)
        assert_int_equal(rgb[((size_t)sb[1] * w + (size_t)x) * 3], 0);
    assert_true(non_white(rgb, w, 0, L.label_y, (long)w, L.label_y + SSB4D_FONT_H * L.scale) > 10); /* its label */
    /* The colour bar: right of the image, white (hi) at the top to black (lo) at the bottom. */
    const long *cb = L.colour_bar;
    assert_true(cb[0] > COLS);
    assert_int_equal(rgb[((size_t)cb[1] * w + (size_t)cb[0]) * 3], 255);
    assert_int_equal(rgb[((size_t)(cb[3] - 1) * w + (size_t)cb[0]) * 3], 0);
    assert_true(non_white(rgb, w, cb[0], cb[1], cb[2], cb[3]) > (size_t)((cb[3] - cb[1]) * (cb[2] - cb[0])) / 2);
    /* Its labels: the stretch's ends and the unit, right of the bar. */
    float lo, hi;
    ssb_image_stretch(img, ROWS * COLS, &lo, &hi);
    assert_true(L.lo == lo && L.hi == hi && lo < hi);
    char buf[32];
    snprintf(buf, sizeof buf, "%.2f", (double)hi);
    assert_string_equal(L.hi_label, buf);
    snprintf(buf, sizeof buf, "%.2f", (double)lo);
    assert_string_equal(L.lo_label, buf);
    assert_string_equal(L.unit_label, "rad");
    assert_true(non_white(rgb, w, cb[2] + 1, 0, (long)w, SSB4D_FONT_H + L.scale) > 10);
    /* Every label fits (issue 39: the top one touched the edge): inside the canvas, a font
     * pixel clear of its top, and nothing drawn right of the colour bar on the first row. */
    for (int i = 0; i < 4; i++) {
        const long *b = L.labels[i];
        if (i == 2) { /* no note */
            assert_true(b[2] == 0);
            continue;
        }
        assert_true(b[0] > cb[2] && b[1] >= L.scale && b[2] < (long)w && b[3] <= cb[3] + 1 - L.scale);
    }
    assert_int_equal(non_white(rgb, w, cb[2] + 1, 0, (long)w, L.scale), 0);
    free(rgb);
    /* The unit and the bar's ends are in the PNG's text for a reader. */
    char text[160];
    png_text(path, "ssb4d:unit", text, sizeof text);
    assert_string_equal(text, "rad");
    png_text(path, "ssb4d:range", text, sizeof text);
    double r0 = NAN, r1 = NAN;
    assert_int_equal(sscanf(text, "%lf %lf", &r0, &r1), 2);
    assert_true((float)r0 == lo && (float)r1 == hi);

    /* No legend: the image alone, the same bytes as the plain writer's pixels. */
    assert_int_equal(ssb_image_write_png_legend(path, img, ROWS, COLS, NULL, &err), SSB4D_OK);
    rgb = decode_rgb(path, &w, &h);
    assert_int_equal(w, COLS);
    assert_int_equal(h, ROWS);
    for (int i = 0; i < ROWS * COLS; i++)
        assert_int_equal(rgb[3 * i], want[i]);
    free(rgb);
    /* A large pixel: the bar is labelled in nm (0.3 x 53 x 40 A = 636 A -> 500 A = 50 nm, 12.5 px). */
    lg.pixel_A = 40;
    ssb_png_legend_layout(img, ROWS, COLS, &lg, &L);
    assert_string_equal(L.scale_label, "50 nm");
    assert_int_equal(L.scale_bar[2] - L.scale_bar[0], 13);
    /* No pixel size: no scale bar, the colour bar only. */
    lg.pixel_A = NAN;
    ssb_png_legend_layout(img, ROWS, COLS, &lg, &L);
    assert_true(L.scale_bar[2] == 0 && L.colour_bar[2] > 0 && L.height == (size_t)(L.colour_bar[3] + 1));
    /* A minimum span wider than the stretch: centred on the stretch's middle. */
    lg.min_span = 10.0;
    ssb_png_legend_layout(img, ROWS, COLS, &lg, &L);
    assert_true(fabs((double)L.hi - (double)L.lo - 10.0) < 1e-5 && fabs(0.5 * ((double)L.lo + L.hi) - 0.5 * ((double)lo + hi)) < 1e-5);
    lg.min_span = 0.1; /* narrower: the stretch as it was */
    ssb_png_legend_layout(img, ROWS, COLS, &lg, &L);
    assert_true(L.lo == lo && L.hi == hi);
}

/* fit-regions' defocus map (issue 39): four regions 14.5 pm apart were drawn black to white with
 * the ends labelled to 0.1 pm; now the bar spans 1 nm about their middle, so they show as nearly
 * the same grey, and the spread is printed under the unit. */
static void defocus_map(void **state)
{
    (void)state;
    enum { G = 2, CELL = 32 };
    const float c10[G * G] = {-9.8687f, -9.8760f, -9.8832f, -9.8700f}; /* 14.5 pm from end to end */
    float map[G * CELL * G * CELL];
    for (int r = 0; r < G * CELL; r++)
        for (int c = 0; c < G * CELL; c++)
            map[r * G * CELL + c] = c10[(r / CELL) * G + c / CELL];
    char path[128];
    snprintf(path, sizeof path, "%s/defocus.png", dir);
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_defocus_map_save(path, map, G * CELL, G * CELL, &err), SSB4D_OK);
    uint32_t w, h;
    unsigned char *rgb = decode_rgb(path, &w, &h);
    int k = ssb_png_display_scale(G * CELL);
    assert_int_equal(k, 8);
    /* the cells' greys: near the middle, at most 255 x 14.5 pm / 1 nm (4 levels) apart */
    int gmin = 255, gmax = 0;
    for (int i = 0; i < G * G; i++) {
        long x = (long)((i % G) * CELL + CELL / 2) * k, y = (long)((i / G) * CELL + CELL / 2) * k;
        int g = rgb[((size_t)y * w + (size_t)x) * 3];
        gmin = g < gmin ? g : gmin;
        gmax = g > gmax ? g : gmax;
    }
    assert_true(gmin >= 120 && gmax <= 136 && gmax - gmin <= 4);
    char text[160];
    png_text(path, "ssb4d:unit", text, sizeof text);
    assert_string_equal(text, "C10 nm");
    png_text(path, "ssb4d:note", text, sizeof text);
    assert_string_equal(text, "spread 14.5 pm");
    png_text(path, "ssb4d:range", text, sizeof text);
    double lo = NAN, hi = NAN;
    assert_int_equal(sscanf(text, "%lf %lf", &lo, &hi), 2);
    assert_true(fabs(hi - lo - SSB4D_DEFOCUS_MAP_SPAN_NM) < 1e-5 && fabs(0.5 * (lo + hi) - (-9.8832 + 0.00725)) < 1e-4);
    /* the labels (hi, unit, the spread, lo) drawn, clear of the canvas's edges */
    ssb4d_png_legend lg = {0.0, "C10 nm", SSB4D_PNG_SCALE_AUTO, SSB4D_DEFOCUS_MAP_SPAN_NM, "spread 14.5 pm"};
    ssb4d_png_layout L;
    ssb_png_legend_layout(map, G * CELL, G * CELL, &lg, &L);
    assert_int_equal(L.width, w);
    assert_int_equal(L.height, h);
    assert_string_equal(L.hi_label, "-9.38");
    assert_string_equal(L.lo_label, "-10.38");
    for (int i = 0; i < 4; i++) {
        const long *b = L.labels[i];
        assert_true(b[2] > b[0] && b[1] >= L.scale && b[3] <= (long)h - L.scale && b[2] < (long)w);
        assert_true(non_white(rgb, w, b[0], b[1], b[2], b[3]) > 10);
    }
    assert_int_equal(non_white(rgb, w, L.colour_bar[2] + 1, 0, (long)w, L.scale), 0);
    assert_int_equal(non_white(rgb, w, L.colour_bar[2] + 1, (long)h - L.scale, (long)w, (long)h), 0);
    free(rgb);
    /* a spread of nanometres: the stretch itself, the spread in nm */
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        map[i] = (float)(i % (G * CELL)) * 0.05f;
    assert_int_equal(ssb4d_defocus_map_save(path, map, G * CELL, G * CELL, &err), SSB4D_OK);
    png_text(path, "ssb4d:note", text, sizeof text);
    assert_string_equal(text, "spread 3.15 nm");
    png_text(path, "ssb4d:range", text, sizeof text);
    assert_int_equal(sscanf(text, "%lf %lf", &lo, &hi), 2);
    assert_true(hi - lo > 3.0);
    assert_int_equal(ssb4d_defocus_map_save(path, map, 0, G * CELL, &err), SSB4D_EINVAL);
}

static void calibration_picture(void **state)
{
    (void)state;
    enum { D = 32 };
    double mean[D * D];
    for (int r = 0; r < D; r++)
        for (int c = 0; c < D; c++)
            mean[r * D + c] = hypot(r - 15.5, c - 16.0) <= 10 ? 100.0 : 1.0;
    int32_t flagged[2] = {3 * D + 4, 28 * D + 30};
    ssb4d_calibration cal;
    memset(&cal, 0, sizeof cal);
    cal.det_shape[0] = cal.det_shape[1] = D;
    cal.mean_pattern = mean;
    cal.disk_centre_px[0] = cal.geom.centre_px[0] = 15.5;
    cal.disk_centre_px[1] = cal.geom.centre_px[1] = 16.0;
    cal.disk_radius_px = cal.selection_radius_px = 10.0;
    cal.flagged = flagged;
    cal.n_flagged = 2;
    char path[128];
    snprintf(path, sizeof path, "%s/cal.png", dir);
    ssb4d_err err = {0};
    assert_int_equal(ssb_calibration_picture(path, &cal, &err), SSB4D_OK);
    int z = ssb_calibration_picture_zoom(cal.det_shape);
    assert_int_equal(z, 16); /* ceil(512 / 32): the picture is 512 px across */
    uint32_t w, h;
    unsigned char *rgb = decode_rgb(path, &w, &h);
    assert_int_equal(w, D * z);
    assert_true(h > (uint32_t)(D * z)); /* the legend band below the pattern */
#define PX(x, y) (rgb + ((size_t)(y) * w + (size_t)(x)) * 3)
    /* Flagged pixels: their whole z x z block red. */
    for (int i = 0; i < 2; i++) {
        int r = flagged[i] / D, c = flagged[i] % D;
        for (int y = r * z; y < (r + 1) * z; y++)
            for (int x = c * z; x < (c + 1) * z; x++)
                assert_true(PX(x, y)[0] == 255 && PX(x, y)[1] == 0 && PX(x, y)[2] == 0);
    }
    /* The disk: green on the circle (right of the centre, radius 10 px); log1p(v / s0) with s0
     * the 5th percentile (1 here) between robust ends: the disk white, the dark field black. */
    double cx = (16.0 + 0.5) * z, cy = (15.5 + 0.5) * z;
    unsigned char *on = PX((long)(cx + 10 * z), (long)cy);
    assert_true(on[1] > 200 && on[0] == 0 && on[2] == 0);
    unsigned char *in = PX((long)(cx + 5 * z), (long)cy), *out = PX((long)(cx + 14 * z), (long)cy);
    /* the disk light grey, not saturated (issue 39: it was white); the dark field black */
    assert_true(in[0] == SSB4D_CALIBRATION_DISK_GREY && in[1] == in[0] && in[2] == in[0]);
    assert_true(in[0] < 255);
    assert_true(out[0] == out[1] && out[1] == out[2] && out[0] == 0);
    /* No yellow (the selection is the disk) anywhere in the pattern. */
    for (size_t i = 0; i < (size_t)w * (size_t)(D * z); i++)
        assert_false(rgb[3 * i] > 200 && rgb[3 * i + 1] > 200 && rgb[3 * i + 2] < 50);
    free(rgb);
    /* A selection radius of its own: a yellow circle of that radius. */
    cal.selection_radius_px = 6.0;
    assert_int_equal(ssb_calibration_picture(path, &cal, &err), SSB4D_OK);
    rgb = decode_rgb(path, &w, &h);
    unsigned char *sel = PX((long)(cx + 6 * z), (long)cy);
    assert_true(sel[0] > 200 && sel[1] > 200 && sel[2] < 50);
    free(rgb);
    /* A hot pixel left in the disk (unflagged): whiter than the disk, which stays as it was. */
    cal.selection_radius_px = 10.0;
    mean[15 * D + 20] = 1000.0;
    assert_int_equal(ssb_calibration_picture(path, &cal, &err), SSB4D_OK);
    rgb = decode_rgb(path, &w, &h);
    unsigned char *hot = PX(20 * z + z / 2, 15 * z + z / 2);
    assert_true(hot[0] == 255 && hot[1] == 255 && hot[2] == 255);
    in = PX((long)(cx + 5 * z), (long)cy);
    assert_true(in[0] == SSB4D_CALIBRATION_DISK_GREY);
    free(rgb);
#undef PX
}

int main(void)
{
    fill();
    if (fx_tmpdir(dir, sizeof dir, "img"))
        return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(tiff_round_trip), cmocka_unit_test(png_and_npy),
                                       cmocka_unit_test(png_legend), cmocka_unit_test(defocus_map),
                                       cmocka_unit_test(calibration_picture)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (fx_tmpdir_remove(dir))
        rc = rc ? rc : 1;
    return rc;
}
