/* annotate.h — an RGB canvas for the PNG previews: text in a built-in 5x7 bitmap font (the few
 * characters the scale and colour bars need), filled rectangles, circles, and writing it as a PNG
 * with libspng (greyscale when every pixel is grey). */
#ifndef SSB4D_IO_ANNOTATE_H
#define SSB4D_IO_ANNOTATE_H
#include "ssb4d_advanced.h"

#define SSB4D_CANVAS_MAX_TEXT 8
typedef struct {
    unsigned char *rgb; /* h rows of w pixels, 3 bytes each */
    size_t w, h;
    /* tEXt chunks written with the PNG (ssb_canvas_add_text) */
    int n_text;
    char text_key[SSB4D_CANVAS_MAX_TEXT][80], text_value[SSB4D_CANVAS_MAX_TEXT][160];
} ssb4d_canvas;

/* A w x h canvas filled with grey level bg. SSB4D_ENOMEM when it cannot be allocated. */
ssb4d_status ssb_canvas_init(ssb4d_canvas *c, size_t w, size_t h, unsigned char bg, ssb4d_err *err);
void ssb_canvas_free(ssb4d_canvas *c);
/* A tEXt chunk (Latin-1 keyword of 1..79 characters, value) for ssb_canvas_write_png; at most
 * SSB4D_CANVAS_MAX_TEXT (more are dropped). */
void ssb_canvas_add_text(ssb4d_canvas *c, const char *key, const char *value);
/* One pixel; outside the canvas does nothing. */
void ssb_canvas_put(ssb4d_canvas *c, long x, long y, const unsigned char rgb[3]);
/* The rectangle [x0, x1) x [y0, y1), clipped to the canvas. */
void ssb_canvas_fill(ssb4d_canvas *c, long x0, long y0, long x1, long y1, const unsigned char rgb[3]);
/* A ring of centre (cx, cy) and radius r (canvas pixels, a pixel's centre at +0.5): the pixels
 * whose centre lies within width/2 of the circle. */
void ssb_canvas_circle(ssb4d_canvas *c, double cx, double cy, double r, double width,
                       const unsigned char rgb[3]);
/* Text with its top-left corner at (x, y), each font pixel drawn scale x scale. The font has the
 * digits, ". - + /", a space, "A Å B C F" and "a c d e f g h i k l m n o p r s t u x" (Å as UTF-8);
 * any other character is drawn as a box. Returns the width drawn. */
long ssb_canvas_text(ssb4d_canvas *c, long x, long y, int scale, const char *s, const unsigned char rgb[3]);
/* The width ssb_canvas_text draws s in (its height is SSB4D_FONT_H * scale). */
long ssb_text_width(const char *s, int scale);
#define SSB4D_FONT_H 7
/* Writes the canvas to path atomically (temporary file + rename): 8-bit greyscale when every
 * pixel is grey, else 8-bit RGB; with the canvas's tEXt chunks. */
ssb4d_status ssb_canvas_write_png(const ssb4d_canvas *c, const char *path, ssb4d_err *err);
#endif
