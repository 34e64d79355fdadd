/* image.c — phase images to disk. TIFF is what Fiji/ImageJ and tifffile read (float32, one strip
 * per row block, resolution in pixels per cm); PNG is a preview only. */
#include "io/image.h"

#include "common/atomic.h"
#include "common/err.h"
#include "io/annotate.h"
#include "io/npy.h"

#include <errno.h>
#include <math.h>
#include <spng.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <tiffio.h>
#include <unistd.h>

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void ssb_image_stretch(const float *img, size_t n, float *lo_out, float *hi_out)
{
    float *tmp = malloc(n * sizeof *tmp);
    size_t m = 0;
    for (size_t i = 0; tmp && i < n; i++)
        if (isfinite(img[i]))
            tmp[m++] = img[i];
    float lo = 0, hi = 1;
    if (m) {
        qsort(tmp, m, sizeof *tmp, cmp_float);
        lo = tmp[(size_t)(0.005 * (double)(m - 1))];
        hi = tmp[(size_t)(0.995 * (double)(m - 1))];
    }
    free(tmp);
    *lo_out = lo;
    *hi_out = hi;
}

/* Grey levels for the stretch [lo, hi]. */
static void map_u8(const float *img, size_t n, float lo, float hi, unsigned char *out)
{
    float scale = hi > lo ? 255.0f / (hi - lo) : 0.0f;
    for (size_t i = 0; i < n; i++) {
        float v = isfinite(img[i]) ? (img[i] - lo) * scale : 0.0f;
        out[i] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5f);
    }
}

void ssb_image_to_u8(const float *img, size_t n, unsigned char *out)
{
    float lo, hi;
    ssb_image_stretch(img, n, &lo, &hi);
    map_u8(img, n, lo, hi, out);
}

static const char *ext_of(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : "";
}

static ssb4d_status write_tiff(const char *tmp, const float *img, size_t rows, size_t cols,
                               const double pixel_A[2], ssb4d_err *err)
{
    TIFFSetErrorHandler(NULL);
    TIFFSetWarningHandler(NULL);
    TIFF *t = TIFFOpen(tmp, "w");
    if (!t)
        return ssb_fail(err, SSB4D_EIO, "cannot create TIFF %s", tmp);
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, (uint32_t)cols);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, (uint32_t)rows);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 32);
    TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_IEEEFP);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_NONE);
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, (uint32_t)(rows < 64 ? rows : 64));
    if (pixel_A && pixel_A[0] > 0 && pixel_A[1] > 0) {
        /* pixels per centimetre: 1 cm = 1e8 Å */
        TIFFSetField(t, TIFFTAG_RESOLUTIONUNIT, RESUNIT_CENTIMETER);
        TIFFSetField(t, TIFFTAG_XRESOLUTION, (float)(1e8 / pixel_A[1]));
        TIFFSetField(t, TIFFTAG_YRESOLUTION, (float)(1e8 / pixel_A[0]));
        char desc[160];
        snprintf(desc, sizeof desc, "ssb4d phase (rad); pixel %.6g x %.6g A (row x col)", pixel_A[0],
                 pixel_A[1]);
        TIFFSetField(t, TIFFTAG_IMAGEDESCRIPTION, desc);
    }
    TIFFSetField(t, TIFFTAG_SOFTWARE, "ssb4d " SSB4D_VERSION_STRING);
    for (size_t r = 0; r < rows; r++)
        if (TIFFWriteScanline(t, (void *)(img + r * cols), (uint32_t)r, 0) < 0) {
            TIFFClose(t);
            return ssb_fail(err, SSB4D_EIO, "cannot write TIFF scanline %zu", r);
        }
    TIFFClose(t);
    return SSB4D_OK;
}

static ssb4d_status write_png(const char *tmp, const float *img, size_t rows, size_t cols,
                              ssb4d_err *err)
{
    unsigned char *g = malloc(rows * cols);
    if (!g)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for PNG");
    ssb_image_to_u8(img, rows * cols, g);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(g);
        return ssb_fail(err, SSB4D_EIO, "cannot create %s: %s", tmp, strerror(errno));
    }
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    spng_set_png_file(ctx, f);
    struct spng_ihdr ihdr = {.width = (uint32_t)cols, .height = (uint32_t)rows, .bit_depth = 8,
                             .color_type = SPNG_COLOR_TYPE_GRAYSCALE};
    spng_set_ihdr(ctx, &ihdr);
    int rc = spng_encode_image(ctx, g, rows * cols, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    spng_ctx_free(ctx);
    int cl = fclose(f);
    free(g);
    if (rc || cl)
        return ssb_fail(err, SSB4D_EIO, "PNG encoding failed: %s", rc ? spng_strerror(rc) : "close");
    return SSB4D_OK;
}

ssb4d_status ssb_image_check_path(const char *path, ssb4d_err *err)
{
    const char *ext = ext_of(path);
    if (strcasecmp(ext, "npy") && strcasecmp(ext, "tif") && strcasecmp(ext, "tiff") && strcasecmp(ext, "png"))
        return ssb_fail(err, SSB4D_EINVAL, "%s: unknown image extension (use .tiff, .npy or .png)", path);
    return SSB4D_OK;
}

ssb4d_status ssb_image_write(const char *path, const float *img, size_t rows, size_t cols,
                             const double pixel_A[2], ssb4d_err *err)
{
    const char *ext = ext_of(path);
    if (!strcasecmp(ext, "npy")) {
        size_t shape[2] = {rows, cols};
        return ssb_npy_save(path, "<f4", 2, shape, img, err);
    }
    int tiff = !strcasecmp(ext, "tif") || !strcasecmp(ext, "tiff");
    int png = !strcasecmp(ext, "png");
    if (!tiff && !png)
        return ssb_fail(err, SSB4D_EINVAL, "%s: unknown image extension (use .tiff, .npy or .png)", path);
    char suffix[8];
    snprintf(suffix, sizeof suffix, ".%.5s", ext);
    char *tmp = ssb_temp_name(path, suffix); /* libtiff picks its mode from the name */
    if (!tmp)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = tiff ? write_tiff(tmp, img, rows, cols, pixel_A, err)
                           : write_png(tmp, img, rows, cols, err);
    if (!st && rename(tmp, path) != 0)
        st = ssb_fail(err, SSB4D_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st)
        unlink(tmp);
    free(tmp);
    return st;
}

/* ---- the annotated preview: scale bar and colour bar in margins ------------------------------ */

/* The largest of 1, 2, 5 x 10^k Å not above target (target > 0). */
static double nice_length(double target)
{
    double p = pow(10.0, floor(log10(target)));
    return 5 * p <= target ? 5 * p : 2 * p <= target ? 2 * p : p;
}

/* A value with as many decimals as the range between the bar's ends needs (0 to 4). */
static void format_value(char *out, size_t n, double v, double range)
{
    int dec = range > 0 && isfinite(range) ? 2 - (int)floor(log10(range)) : 2;
    dec = dec < 0 ? 0 : dec > 4 ? 4 : dec;
    snprintf(out, n, "%.*f", dec, v);
    int zero = 1; /* "-0.00" is 0.00 */
    for (const char *p = out + 1; *p; p++)
        zero &= *p == '0' || *p == '.';
    if (out[0] == '-' && zero)
        memmove(out, out + 1, strlen(out));
}

int ssb_png_display_scale(size_t long_side)
{
    if (!long_side || long_side >= SSB4D_PNG_MIN_LONG_SIDE)
        return 1;
    size_t k = (SSB4D_PNG_MIN_LONG_SIDE + long_side - 1) / long_side;
    return k > 64 ? 64 : (int)k;
}

/* The legend's display scale: 1 for none / native, the automatic one, or the one given. */
static int legend_scale(const ssb4d_png_legend *lg, size_t rows, size_t cols)
{
    if (!lg || lg->display_scale == 0)
        return 1;
    if (lg->display_scale == SSB4D_PNG_SCALE_AUTO)
        return ssb_png_display_scale(rows > cols ? rows : cols);
    return lg->display_scale < 1 ? 1 : lg->display_scale > 64 ? 64 : lg->display_scale;
}

void ssb_png_legend_layout(const float *img, size_t rows0, size_t cols0, const ssb4d_png_legend *lg,
                           ssb4d_png_layout *L)
{
    memset(L, 0, sizeof *L);
    int k = legend_scale(lg, rows0, cols0);
    size_t rows = rows0 * (size_t)k, cols = cols0 * (size_t)k; /* as drawn */
    size_t big = rows > cols ? rows : cols;
    int s = 1 + (int)(big / 512);
    long line = (SSB4D_FONT_H + 2) * s, gap = 4 * s;
    L->display_scale = k;
    L->scale = s;
    ssb_image_stretch(img, rows0 * cols0, &L->lo, &L->hi);
    if (lg && lg->min_span > 0 && isfinite(lg->min_span) && (double)L->hi - (double)L->lo < lg->min_span) {
        double mid = 0.5 * ((double)L->lo + (double)L->hi);
        L->lo = (float)(mid - 0.5 * lg->min_span);
        L->hi = (float)(mid + 0.5 * lg->min_span);
    }
    long w = (long)cols, h = (long)rows;
    if (lg && lg->unit) {
        format_value(L->hi_label, sizeof L->hi_label, L->hi, (double)L->hi - (double)L->lo);
        format_value(L->lo_label, sizeof L->lo_label, L->lo, (double)L->hi - (double)L->lo);
        snprintf(L->unit_label, sizeof L->unit_label, "%s", lg->unit);
        snprintf(L->note_label, sizeof L->note_label, "%s", lg->note ? lg->note : "");
        int n_lines = L->note_label[0] ? 5 : 4;
        long bar_h = h > n_lines * line ? h : n_lines * line; /* the frame's outer height */
        long x0 = (long)cols + gap, bw = 10 * s;
        L->colour_bar[0] = x0 + 1;
        L->colour_bar[1] = 1;
        L->colour_bar[2] = x0 + 1 + bw;
        L->colour_bar[3] = bar_h - 1;
        /* the labels right of the bar, each a font pixel clear of the canvas's top and bottom
         * edges: hi at the top, lo at the bottom, the unit (and the note below it) mid-way */
        long tx = x0 + bw + 2 + gap, fh = SSB4D_FONT_H * s, pad = s, tw = 0;
        long mid = (bar_h - fh) / 2 - (L->note_label[0] ? line / 2 : 0);
        const char *text[4] = {L->hi_label, L->unit_label, L->note_label, L->lo_label};
        long y[4] = {pad, mid, mid + line, bar_h - pad - fh};
        for (int i = 0; i < 4; i++) {
            long t = ssb_text_width(text[i], s);
            if (!t)
                continue;
            long *b = L->labels[i];
            b[0] = tx;
            b[1] = y[i];
            b[2] = tx + t;
            b[3] = y[i] + fh;
            tw = tw > t ? tw : t;
        }
        w = tx + tw + gap;
        h = bar_h;
    }
    if (lg && lg->pixel_A > 0 && isfinite(lg->pixel_A) && cols0 >= 8) {
        double pa = lg->pixel_A / k; /* Å per drawn pixel */
        double len = nice_length(0.3 * (double)cols * pa);
        long px = lround(len / pa);
        if (px < 1)
            px = 1;
        if (len < 10.0)
            snprintf(L->scale_label, sizeof L->scale_label, "%g \xC3\x85", len);
        else
            snprintf(L->scale_label, sizeof L->scale_label, "%g nm", len / 10.0);
        long y0 = h + gap;
        L->scale_bar[0] = 3 * s;
        L->scale_bar[1] = y0;
        L->scale_bar[2] = 3 * s + px;
        L->scale_bar[3] = y0 + 3 * s;
        L->bar_length_A = len;
        L->label_y = y0 + 6 * s;
        long tw = 3 * s + ssb_text_width(L->scale_label, s) + gap;
        w = w > tw ? w : tw;
        h = L->label_y + SSB4D_FONT_H * s + gap;
    }
    L->width = (size_t)w;
    L->height = (size_t)h;
}

ssb4d_status ssb_image_write_png_legend(const char *path, const float *img, size_t rows, size_t cols,
                                        const ssb4d_png_legend *lg, ssb4d_err *err)
{
    static const unsigned char black[3] = {0, 0, 0}, nodata[3] = {0, 0, 96};
    ssb4d_png_layout L;
    ssb_png_legend_layout(img, rows, cols, lg, &L);
    long k = L.display_scale;
    unsigned char *g = malloc(rows * cols);
    ssb4d_canvas c = {0};
    ssb4d_status st = g ? ssb_canvas_init(&c, L.width, L.height, 255, err)
                        : ssb_fail(err, SSB4D_ENOMEM, "out of memory for PNG");
    if (st) {
        free(g);
        return st;
    }
    map_u8(img, rows * cols, L.lo, L.hi, g); /* = ssb_image_to_u8, the stretch computed once */
    for (size_t r = 0; r < rows; r++)
        for (size_t q = 0; q < cols; q++) {
            unsigned char v[3] = {g[r * cols + q], g[r * cols + q], g[r * cols + q]};
            ssb_canvas_fill(&c, (long)q * k, (long)r * k, (long)(q + 1) * k, (long)(r + 1) * k,
                            isfinite(img[r * cols + q]) ? v : nodata);
        }
    free(g);
    int s = L.scale;
    if (L.colour_bar[2] > L.colour_bar[0]) {
        const long *b = L.colour_bar;
        ssb_canvas_fill(&c, b[0] - 1, b[1] - 1, b[2] + 1, b[3] + 1, black); /* the frame */
        for (long y = b[1]; y < b[3]; y++) {
            long span = b[3] - 1 - b[1];
            unsigned char v = (unsigned char)(span > 0 ? (255 * (b[3] - 1 - y) + span / 2) / span : 255);
            unsigned char rgb[3] = {v, v, v};
            ssb_canvas_fill(&c, b[0], y, b[2], y + 1, rgb);
        }
        const char *text[4] = {L.hi_label, L.unit_label, L.note_label, L.lo_label};
        for (int i = 0; i < 4; i++)
            if (L.labels[i][2] > L.labels[i][0])
                ssb_canvas_text(&c, L.labels[i][0], L.labels[i][1], s, text[i], black);
    }
    if (L.scale_bar[2] > L.scale_bar[0]) {
        const long *b = L.scale_bar;
        ssb_canvas_fill(&c, b[0], b[1], b[2], b[3], black);
        ssb_canvas_text(&c, b[0], L.label_y, s, L.scale_label, black);
    }
    /* What a reader of the file needs to measure on it: the scale it was drawn at. */
    char text[64];
    snprintf(text, sizeof text, "%ld", k);
    ssb_canvas_add_text(&c, "ssb4d:display_scale", text);
    if (lg && lg->pixel_A > 0 && isfinite(lg->pixel_A)) {
        snprintf(text, sizeof text, "%.6g", lg->pixel_A / (double)k);
        ssb_canvas_add_text(&c, "ssb4d:pixel_size_A", text);
    }
    if (L.colour_bar[2] > L.colour_bar[0]) { /* the colour bar's unit and ends, for a reader */
        ssb_canvas_add_text(&c, "ssb4d:unit", L.unit_label);
        snprintf(text, sizeof text, "%.9g %.9g", (double)L.lo, (double)L.hi);
        ssb_canvas_add_text(&c, "ssb4d:range", text);
    }
    if (L.note_label[0])
        ssb_canvas_add_text(&c, "ssb4d:note", L.note_label);
    st = ssb_canvas_write_png(&c, path, err);
    ssb_canvas_free(&c);
    return st;
}

/* ---- the calibration picture ------------------------------------------------------------------ */

int ssb_calibration_picture_zoom(const size_t det_shape[2])
{
    size_t big = det_shape[0] > det_shape[1] ? det_shape[0] : det_shape[1];
    return ssb_png_display_scale(big);
}

/* The legend's lines below the pattern: the scale bar's, then one per marker. */
static int calibration_legend_lines(const ssb4d_calibration *cal, int selection)
{
    return 1 + 1 + selection + 1;
}

/* The BF selection differs from the measured disk (--centre, --bf-radius): drawn in yellow. */
static int selection_differs(const ssb4d_calibration *cal)
{
    const double *dc = cal->disk_centre_px, *gc = cal->geom.centre_px;
    return isfinite(cal->selection_radius_px) && isfinite(gc[0]) && isfinite(gc[1]) &&
           (fabs(cal->selection_radius_px - cal->disk_radius_px) > 0.01 || fabs(gc[0] - dc[0]) > 0.01 ||
            fabs(gc[1] - dc[1]) > 0.01);
}

void ssb_calibration_picture_layout(const ssb4d_calibration *cal, ssb4d_calibration_layout *L)
{
    memset(L, 0, sizeof *L);
    size_t R = cal->det_shape[0], C = cal->det_shape[1];
    int z = ssb_calibration_picture_zoom(cal->det_shape);
    size_t W = C * (size_t)z, H = R * (size_t)z, big = W > H ? W : H;
    int s = 1 + (int)(big / 512); /* the font as the phase image's legend sizes it */
    long line = (SSB4D_FONT_H + 4) * s, gap = 4 * s;
    L->zoom = z;
    L->font = s;
    L->width = W;
    L->band_y = (long)H + gap;
    double mrad = cal->geom.det_sampling_mrad[1];
    if (isfinite(mrad) && mrad > 0 && C >= 4) {
        double pm = mrad / z; /* mrad per drawn pixel */
        double len = nice_length(0.3 * (double)W * pm);
        long px = lround(len / pm);
        L->bar_mrad = len;
        L->scale_bar[0] = gap;
        L->scale_bar[1] = L->band_y + (SSB4D_FONT_H * s) / 2 - s;
        L->scale_bar[2] = gap + (px < 1 ? 1 : px);
        L->scale_bar[3] = L->scale_bar[1] + 3 * s;
    }
    L->height = (size_t)(L->band_y + calibration_legend_lines(cal, selection_differs(cal)) * line);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

ssb4d_status ssb_calibration_picture(const char *path, const ssb4d_calibration *cal, ssb4d_err *err)
{
    static const unsigned char green[3] = {0, 230, 0}, yellow[3] = {255, 220, 0}, red[3] = {255, 0, 0},
                               white[3] = {255, 255, 255};
    size_t R = cal->det_shape[0], C = cal->det_shape[1];
    if (!cal->mean_pattern || !R || !C)
        return ssb_fail(err, SSB4D_EINVAL, "no mean pattern to draw");
    ssb4d_calibration_layout L;
    ssb_calibration_picture_layout(cal, &L);
    int z = L.zoom, s = L.font;
    /* log1p(counts / s0) between robust ends, black at the 1st percentile and light grey
     * (SSB4D_CALIBRATION_DISK_GREY) at the 99.9th: s0, the 5th percentile of the positive values,
     * lifts the faint dark field (diffuse scattering, the outer disks) off black; the 99.9th
     * percentile lies in the BF disk, which so is not saturated (its edge and any structure in it
     * stay visible), while one hot pixel left in the pattern darkens nothing and shows whiter */
    double *lv = malloc(R * C * sizeof *lv);
    if (!lv)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for the calibration picture");
    size_t m = 0;
    double vmax = 0;
    for (size_t i = 0; i < R * C; i++)
        if (isfinite(cal->mean_pattern[i]) && cal->mean_pattern[i] > 0) {
            lv[m++] = cal->mean_pattern[i];
            vmax = cal->mean_pattern[i] > vmax ? cal->mean_pattern[i] : vmax;
        }
    double s0 = 1, lo = 0, hi = 1;
    if (m) {
        qsort(lv, m, sizeof *lv, cmp_double);
        s0 = lv[(size_t)(0.05 * (double)(m - 1))];
        s0 = s0 > vmax * 1e-6 ? s0 : vmax * 1e-6;
    }
    m = 0;
    for (size_t i = 0; i < R * C; i++)
        if (isfinite(cal->mean_pattern[i]))
            lv[m++] = log1p((cal->mean_pattern[i] > 0 ? cal->mean_pattern[i] : 0.0) / s0);
    if (m) {
        qsort(lv, m, sizeof *lv, cmp_double);
        lo = lv[(size_t)(0.01 * (double)(m - 1))];
        hi = lv[(size_t)(0.999 * (double)(m - 1))];
        if (!(hi > lo))
            hi = lv[m - 1] > lo ? lv[m - 1] : lo + 1;
    }
    free(lv);
    ssb4d_canvas c;
    ssb4d_status st = ssb_canvas_init(&c, L.width, L.height, 0, err);
    if (st)
        return st;
    for (size_t r = 0; r < R; r++)
        for (size_t k = 0; k < C; k++) {
            double v = cal->mean_pattern[r * C + k];
            double g = isfinite(v) ? SSB4D_CALIBRATION_DISK_GREY * (log1p((v > 0 ? v : 0.0) / s0) - lo) / (hi - lo)
                                   : 0.0;
            unsigned char u = (unsigned char)(g < 0 ? 0 : g > 255 ? 255 : g + 0.5);
            unsigned char rgb[3] = {u, u, u};
            ssb_canvas_fill(&c, (long)k * z, (long)r * z, (long)(k + 1) * z, (long)(r + 1) * z, rgb);
        }
    /* Detector pixel (row, col) covers canvas [col*z, (col+1)*z) x [row*z, (row+1)*z): its centre
     * is at canvas ((col + 0.5) z, (row + 0.5) z). */
    double w = z < 3 ? 1.0 : z / 3.0 + 0.5;
    const double *dc = cal->disk_centre_px, *gc = cal->geom.centre_px;
    if (isfinite(cal->disk_radius_px) && isfinite(dc[0]) && isfinite(dc[1])) {
        double cx = (dc[1] + 0.5) * z, cy = (dc[0] + 0.5) * z;
        ssb_canvas_circle(&c, cx, cy, cal->disk_radius_px * z, w, green);
        long arm = 2 * z, t = (long)w;
        ssb_canvas_fill(&c, lround(cx) - arm, lround(cy - w / 2), lround(cx) + arm, lround(cy - w / 2) + t, green);
        ssb_canvas_fill(&c, lround(cx - w / 2), lround(cy) - arm, lround(cx - w / 2) + t, lround(cy) + arm, green);
    }
    int sel = selection_differs(cal);
    if (sel)
        ssb_canvas_circle(&c, (gc[1] + 0.5) * z, (gc[0] + 0.5) * z, cal->selection_radius_px * z, w, yellow);
    for (size_t i = 0; i < cal->n_flagged; i++) {
        size_t r = (size_t)cal->flagged[i] / C, k = (size_t)cal->flagged[i] % C;
        ssb_canvas_fill(&c, (long)k * z, (long)r * z, (long)(k + 1) * z, (long)(r + 1) * z, red);
    }
    /* The legend band: the scale bar and "log scale", then each marker beside its sample. */
    long line = (SSB4D_FONT_H + 4) * s, gap = 4 * s, y = L.band_y, icon = SSB4D_FONT_H * s;
    char label[64];
    long tx = gap;
    if (L.scale_bar[2] > L.scale_bar[0]) {
        const long *b = L.scale_bar;
        ssb_canvas_fill(&c, b[0], b[1], b[2], b[3], white);
        snprintf(label, sizeof label, "%g mrad", L.bar_mrad);
        tx = b[2] + 2 * gap;
        tx += ssb_canvas_text(&c, tx, y, s, label, white) + 3 * gap;
    }
    ssb_canvas_text(&c, tx, y, s, "log scale", white);
    y += line;
    long cx = gap + icon / 2, ring_w = s < 2 ? 1.0 : s;
    ssb_canvas_circle(&c, (double)cx, (double)(y + icon / 2), icon / 2.0 - ring_w / 2.0, (double)ring_w, green);
    ssb_canvas_text(&c, gap + icon + gap, y, s, "BF disk", white);
    y += line;
    if (sel) {
        ssb_canvas_circle(&c, (double)cx, (double)(y + icon / 2), icon / 2.0 - ring_w / 2.0, (double)ring_w, yellow);
        ssb_canvas_text(&c, gap + icon + gap, y, s, "BF selection", white);
        y += line;
    }
    ssb_canvas_fill(&c, gap + icon / 4, y + icon / 4, gap + icon - icon / 4, y + icon - icon / 4, red);
    snprintf(label, sizeof label, "flagged hot/dead %zu", cal->n_flagged);
    ssb_canvas_text(&c, gap + icon + gap, y, s, label, white);
    snprintf(label, sizeof label, "%d", z);
    ssb_canvas_add_text(&c, "ssb4d:display_scale", label);
    double mrad = cal->geom.det_sampling_mrad[1];
    if (isfinite(mrad) && mrad > 0) {
        snprintf(label, sizeof label, "%.6g", mrad / z);
        ssb_canvas_add_text(&c, "ssb4d:pixel_size_mrad", label);
    }
    st = ssb_canvas_write_png(&c, path, err);
    ssb_canvas_free(&c);
    return st;
}

ssb4d_status ssb4d_image_save(const char *path, const float *img, size_t rows, size_t cols,
                              const double pixel_A[2], const char *unit, ssb4d_err *err)
{
    if (!path || !img || !rows || !cols)
        return ssb_fail(err, SSB4D_EINVAL, "ssb4d_image_save needs a path and a non-empty image");
    const char *ext = ext_of(path);
    if (!strcasecmp(ext, "png")) {
        /* a small image is drawn at an integer scale (>= 512 px), the TIFF and .npy stay native */
        ssb4d_png_legend lg = {pixel_A ? pixel_A[1] : 0.0, unit ? unit : "rad", SSB4D_PNG_SCALE_AUTO, 0.0, NULL};
        return ssb_image_write_png_legend(path, img, rows, cols, &lg, err);
    }
    return ssb_image_write(path, img, rows, cols, pixel_A, err);
}

ssb4d_status ssb4d_defocus_map_save(const char *path, const float *c10_nm, size_t rows, size_t cols,
                                    ssb4d_err *err)
{
    if (!path || !c10_nm || !rows || !cols)
        return ssb_fail(err, SSB4D_EINVAL, "ssb4d_defocus_map_save needs a path and a non-empty map");
    /* the spread: what the picture's grey cannot show when it is far below the bar's span */
    double mn = INFINITY, mx = -INFINITY;
    for (size_t i = 0; i < rows * cols; i++)
        if (isfinite(c10_nm[i])) {
            mn = c10_nm[i] < mn ? c10_nm[i] : mn;
            mx = c10_nm[i] > mx ? c10_nm[i] : mx;
        }
    char note[48] = "";
    double spread = mx - mn;
    if (isfinite(spread) && spread < 1.0)
        snprintf(note, sizeof note, "spread %.3g pm", 1000.0 * spread);
    else if (isfinite(spread))
        snprintf(note, sizeof note, "spread %.3g nm", spread);
    ssb4d_png_legend lg = {0.0, "C10 nm", SSB4D_PNG_SCALE_AUTO, SSB4D_DEFOCUS_MAP_SPAN_NM, note[0] ? note : NULL};
    return ssb_image_write_png_legend(path, c10_nm, rows, cols, &lg, err);
}
