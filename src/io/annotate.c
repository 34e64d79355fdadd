/* annotate.c — the canvas of the PNG previews: a 5x7 bitmap font, rectangles, rings, PNG output. */
#include "io/annotate.h"

#include "common/atomic.h"
#include "common/err.h"

#include <errno.h>
#include <math.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 5x7 glyphs: one byte per row, top first, bit 4 = leftmost column. 'A' + ring is Å (U+00C5). */
typedef struct {
    unsigned cp; /* code point */
    unsigned char row[7];
} glyph;

static const glyph FONT[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {'-', {0x00, 0x00, 0x00, 0x0E, 0x00, 0x00, 0x00}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
    {' ', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {0xC5, {0x04, 0x0A, 0x04, 0x0A, 0x11, 0x1F, 0x11}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}},
    {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11}},
    {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    /* for the calibration picture's legend ("BF disk", "flagged hot/dead", "log scale") */
    {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
    {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E}},
    {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}},
    {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}},
    {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E}},
    {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    /* for the colour bars' units and notes ("counts", "mrad px", "spread 14.5 pm") */
    {'p', {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D}},
    {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
};
static const glyph BOX = {0, {0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F}};

/* The next code point of UTF-8 text (only what the font needs: ASCII and two-byte sequences). */
static unsigned next_cp(const char **s)
{
    const unsigned char *p = (const unsigned char *)*s;
    if (p[0] >= 0xC0 && p[0] < 0xE0 && (p[1] & 0xC0) == 0x80) {
        *s += 2;
        return ((unsigned)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    }
    *s += 1;
    return p[0];
}

static const glyph *glyph_of(unsigned cp)
{
    for (size_t i = 0; i < sizeof FONT / sizeof FONT[0]; i++)
        if (FONT[i].cp == cp)
            return &FONT[i];
    return &BOX;
}

ssb4d_status ssb_canvas_init(ssb4d_canvas *c, size_t w, size_t h, unsigned char bg, ssb4d_err *err)
{
    c->w = w;
    c->h = h;
    c->rgb = w && h && w <= SIZE_MAX / 3 / h ? malloc(w * h * 3) : NULL;
    if (!c->rgb)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for a %zux%zu picture", w, h);
    memset(c->rgb, bg, w * h * 3);
    c->n_text = 0;
    return SSB4D_OK;
}

void ssb_canvas_add_text(ssb4d_canvas *c, const char *key, const char *value)
{
    if (c->n_text >= SSB4D_CANVAS_MAX_TEXT || !key[0])
        return;
    snprintf(c->text_key[c->n_text], sizeof c->text_key[0], "%s", key);
    snprintf(c->text_value[c->n_text], sizeof c->text_value[0], "%s", value);
    c->n_text++;
}

void ssb_canvas_free(ssb4d_canvas *c)
{
    free(c->rgb);
    c->rgb = NULL;
}

void ssb_canvas_put(ssb4d_canvas *c, long x, long y, const unsigned char rgb[3])
{
    if (x < 0 || y < 0 || (size_t)x >= c->w || (size_t)y >= c->h)
        return;
    memcpy(c->rgb + ((size_t)y * c->w + (size_t)x) * 3, rgb, 3);
}

void ssb_canvas_fill(ssb4d_canvas *c, long x0, long y0, long x1, long y1, const unsigned char rgb[3])
{
    for (long y = y0 < 0 ? 0 : y0; y < y1 && (size_t)y < c->h; y++)
        for (long x = x0 < 0 ? 0 : x0; x < x1 && (size_t)x < c->w; x++)
            memcpy(c->rgb + ((size_t)y * c->w + (size_t)x) * 3, rgb, 3);
}

void ssb_canvas_circle(ssb4d_canvas *c, double cx, double cy, double r, double width,
                       const unsigned char rgb[3])
{
    double reach = r + width / 2 + 1;
    long y0 = (long)floor(cy - reach), y1 = (long)ceil(cy + reach);
    long x0 = (long)floor(cx - reach), x1 = (long)ceil(cx + reach);
    for (long y = y0; y <= y1; y++)
        for (long x = x0; x <= x1; x++) {
            double d = hypot((double)x + 0.5 - cx, (double)y + 0.5 - cy);
            if (fabs(d - r) <= width / 2)
                ssb_canvas_put(c, x, y, rgb);
        }
}

long ssb_text_width(const char *s, int scale)
{
    long n = 0;
    while (*s) {
        next_cp(&s);
        n++;
    }
    return n ? (6 * n - 1) * scale : 0; /* 5 columns and a 1-column gap, none after the last */
}

long ssb_canvas_text(ssb4d_canvas *c, long x, long y, int scale, const char *s, const unsigned char rgb[3])
{
    long x_start = x;
    while (*s) {
        const glyph *g = glyph_of(next_cp(&s));
        for (int r = 0; r < 7; r++)
            for (int k = 0; k < 5; k++)
                if (g->row[r] & (0x10 >> k))
                    ssb_canvas_fill(c, x + k * scale, y + r * scale, x + (k + 1) * scale,
                                    y + (r + 1) * scale, rgb);
        x += 6 * scale;
    }
    return x > x_start ? x - x_start - scale : 0;
}

ssb4d_status ssb_canvas_write_png(const ssb4d_canvas *c, const char *path, ssb4d_err *err)
{
    size_t n = c->w * c->h;
    int grey = 1;
    for (size_t i = 0; i < n && grey; i++)
        grey = c->rgb[3 * i] == c->rgb[3 * i + 1] && c->rgb[3 * i] == c->rgb[3 * i + 2];
    unsigned char *g = NULL;
    if (grey) {
        g = malloc(n);
        if (!g)
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory for PNG");
        for (size_t i = 0; i < n; i++)
            g[i] = c->rgb[3 * i];
    }
    char *tmp = ssb_temp_name(path, ".png");
    FILE *f = tmp ? fopen(tmp, "wb") : NULL;
    if (!f) {
        ssb4d_status st = tmp ? ssb_fail(err, SSB4D_EIO, "cannot create %s: %s", path, strerror(errno))
                              : ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        free(tmp);
        free(g);
        return st;
    }
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    int rc = ctx ? 0 : SPNG_EMEM;
    if (!rc)
        rc = spng_set_png_file(ctx, f);
    struct spng_ihdr ihdr = {.width = (uint32_t)c->w, .height = (uint32_t)c->h, .bit_depth = 8,
                             .color_type = grey ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR};
    if (!rc)
        rc = spng_set_ihdr(ctx, &ihdr);
    struct spng_text text[SSB4D_CANVAS_MAX_TEXT];
    memset(text, 0, sizeof text);
    int nt = c->n_text < 0 ? 0 : c->n_text > SSB4D_CANVAS_MAX_TEXT ? SSB4D_CANVAS_MAX_TEXT : c->n_text;
    for (int i = 0; i < nt; i++) {
        memcpy(text[i].keyword, c->text_key[i], sizeof text[i].keyword);
        text[i].type = SPNG_TEXT;
        text[i].length = strlen(c->text_value[i]);
        text[i].text = (char *)c->text_value[i];
    }
    if (!rc && nt)
        rc = spng_set_text(ctx, text, (uint32_t)nt);
    if (!rc)
        rc = spng_encode_image(ctx, grey ? g : c->rgb, grey ? n : 3 * n, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    spng_ctx_free(ctx);
    int cl = fclose(f);
    free(g);
    ssb4d_status st = SSB4D_OK;
    if (rc || cl)
        st = ssb_fail(err, SSB4D_EIO, "PNG encoding of %s failed: %s", path, rc ? spng_strerror(rc) : strerror(errno));
    else if (rename(tmp, path) != 0)
        st = ssb_fail(err, SSB4D_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st)
        unlink(tmp);
    free(tmp);
    return st;
}
