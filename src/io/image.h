/* image.h — writing float32 images: TIFF float32 (with sampling tags), .npy, 8-bit PNG preview. */
#ifndef SSB4D_IO_IMAGE_H
#define SSB4D_IO_IMAGE_H
#include "ssb4d_advanced.h"

/* Format chosen by extension (.tif/.tiff, .npy, .png). pixel_A = (row, col) sampling in Å.
 * Written atomically (temp file + rename). */
ssb4d_status ssb_image_write(const char *path, const float *img, size_t rows, size_t cols,
                             const double pixel_A[2], ssb4d_err *err);
/* Checks that path has an extension ssb_image_write knows (before any long work). */
ssb4d_status ssb_image_check_path(const char *path, ssb4d_err *err);
/* 8-bit grey levels with a 0.5–99.5 % percentile stretch (out has rows*cols bytes). */
void ssb_image_to_u8(const float *img, size_t n, unsigned char *out);
/* The stretch's ends: the 0.5 % and 99.5 % percentiles of the finite values (0 and 1 if none);
 * grey 0 is lo and 255 hi. */
void ssb_image_stretch(const float *img, size_t n, float *lo, float *hi);

/* What a preview PNG shows beside the image (ssb_image_write_png_legend). */
typedef struct {
    double pixel_A;   /* pixel size along the columns (Å) for a scale bar; <= 0 or NaN: none */
    const char *unit; /* the colour bar's label ("rad", "C10 nm"); NULL: no colour bar */
    int display_scale; /* each image pixel drawn as k x k PNG pixels: 0 or 1 native,
                          SSB4D_PNG_SCALE_AUTO ssb_png_display_scale's */
    double min_span;  /* > 0: the colour bar spans at least this much (the image's unit), centred
                         on the stretch's middle, so that a spread far below it shows as near-even
                         grey instead of black to white; 0: the stretch alone */
    const char *note; /* a line under the unit (e.g. "spread 14.5 pm"); NULL: none */
} ssb4d_png_legend;

#define SSB4D_PNG_SCALE_AUTO (-1)
#define SSB4D_PNG_MIN_LONG_SIDE 512
/* The integer display scale of a preview whose long side is `long_side` pixels: 1 from 512 px
 * up, else ceil(512 / long_side) (nearest neighbour, so the long side is >= 512 px), at most 64. */
int ssb_png_display_scale(size_t long_side);

/* Where the legend goes. The image is at [0, k cols) x [0, k rows) of a width x height canvas
 * (k = display_scale, each pixel a k x k block), drawn as ssb_image_to_u8 renders it (or with
 * the span widened to min_span; non-finite pixels dark blue); the font scale follows the drawn
 * size; the bars are in margins to its right (the colour bar: lo at the bottom, hi at the top,
 * labelled with both, the unit and the note, every label one font pixel clear of the canvas's
 * edges) and below it (a scale bar of a round length, 1, 2 or 5 x 10^k, at most 0.3 of the
 * width, labelled in Å under 1 nm, else nm). Rectangles are {x0, y0, x1, y1}, half-open, all 0
 * when absent; colour_bar is the gradient inside its 1-pixel black frame; labels[] the boxes the
 * four texts (hi, unit, note, lo) are drawn in, all 0 when absent. */
typedef struct {
    size_t width, height;
    int display_scale;         /* image pixels are display_scale x display_scale */
    int scale;                 /* font pixels are scale x scale */
    float lo, hi;              /* the stretch */
    long colour_bar[4], scale_bar[4], label_y;
    double bar_length_A;       /* the scale bar's length, 0 when none */
    char lo_label[32], hi_label[32], unit_label[32], scale_label[32], note_label[48];
    long labels[4][4];         /* hi, unit, note, lo: {x0, y0, x1, y1} */
} ssb4d_png_layout;

void ssb_png_legend_layout(const float *img, size_t rows, size_t cols, const ssb4d_png_legend *lg,
                           ssb4d_png_layout *out);
/* The 8-bit preview with its legend (greyscale PNG, RGB only when a pixel is not finite), written
 * atomically, with tEXt chunks "ssb4d:display_scale" (k), with a pixel size "ssb4d:pixel_size_A"
 * (Å per PNG pixel at that scale), with a colour bar "ssb4d:unit" (its unit, "" when the values
 * have none) and "ssb4d:range" (its ends "lo hi"), with a note "ssb4d:note". lg NULL: the image
 * alone, native. */
ssb4d_status ssb_image_write_png_legend(const char *path, const float *img, size_t rows, size_t cols,
                                        const ssb4d_png_legend *lg, ssb4d_err *err);

/* The calibration picture `ssb4d calibrate` writes (RGB PNG, atomically): the mean diffraction
 * pattern as log1p(counts / s0) (s0: the 5th percentile of the positive counts), black at its
 * 1st percentile and SSB4D_CALIBRATION_DISK_GREY at its 99.9th (the disk: not saturated; white
 * is left to what is brighter still; flagged pixels hold their neighbours' median there), each
 * detector pixel drawn zoom x zoom; the measured BF disk as a
 * green circle (centroid, equal-area radius) with a cross at its centre; the BF selection in
 * yellow when --centre or --bf-radius made it differ; flagged (hot, dead) pixels in red. Below
 * it, on black, a legend: a scale bar in mrad (the calibration's detector sampling) labelled
 * with its length and "log scale", then one line per marker ("BF disk", "BF selection",
 * "flagged hot/dead N"). tEXt chunks "ssb4d:display_scale" (zoom) and "ssb4d:pixel_size_mrad". */
ssb4d_status ssb_calibration_picture(const char *path, const ssb4d_calibration *cal, ssb4d_err *err);
#define SSB4D_CALIBRATION_DISK_GREY 230
/* Where the picture's parts are: the pattern [0, zoom C) x [0, zoom R), the legend band below to
 * `height`; the scale bar {x0, y0, x1, y1} (all 0 without a detector sampling) of bar_mrad. */
typedef struct {
    size_t width, height;
    int zoom, font;
    long band_y, scale_bar[4];
    double bar_mrad;
} ssb4d_calibration_layout;
void ssb_calibration_picture_layout(const ssb4d_calibration *cal, ssb4d_calibration_layout *L);
/* The zoom: ssb_png_display_scale of the larger detector side (>= 512 px drawn). */
int ssb_calibration_picture_zoom(const size_t det_shape[2]);
#endif
