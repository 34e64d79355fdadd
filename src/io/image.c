/* image.c — phase images to disk. TIFF is what Fiji/ImageJ and tifffile read (float32, one strip
 * per row block, resolution in pixels per cm); PNG is a preview only. */
#include "io/image.h"

#include "common/atomic.h"
#include "common/err.h"
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

void ssb4d_image_to_u8(const float *img, size_t n, unsigned char *out)
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
    float scale = hi > lo ? 255.0f / (hi - lo) : 0.0f;
    for (size_t i = 0; i < n; i++) {
        float v = isfinite(img[i]) ? (img[i] - lo) * scale : 0.0f;
        out[i] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5f);
    }
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
        return ssb4d_fail(err, SSB4D_EIO, "cannot create TIFF %s", tmp);
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
            return ssb4d_fail(err, SSB4D_EIO, "cannot write TIFF scanline %zu", r);
        }
    TIFFClose(t);
    return SSB4D_OK;
}

static ssb4d_status write_png(const char *tmp, const float *img, size_t rows, size_t cols,
                              ssb4d_err *err)
{
    unsigned char *g = malloc(rows * cols);
    if (!g)
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory for PNG");
    ssb4d_image_to_u8(img, rows * cols, g);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(g);
        return ssb4d_fail(err, SSB4D_EIO, "cannot create %s: %s", tmp, strerror(errno));
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
        return ssb4d_fail(err, SSB4D_EIO, "PNG encoding failed: %s", rc ? spng_strerror(rc) : "close");
    return SSB4D_OK;
}

ssb4d_status ssb4d_image_check_path(const char *path, ssb4d_err *err)
{
    const char *ext = ext_of(path);
    if (strcasecmp(ext, "npy") && strcasecmp(ext, "tif") && strcasecmp(ext, "tiff") && strcasecmp(ext, "png"))
        return ssb4d_fail(err, SSB4D_EINVAL, "%s: unknown image extension (use .tiff, .npy or .png)", path);
    return SSB4D_OK;
}

ssb4d_status ssb4d_image_write(const char *path, const float *img, size_t rows, size_t cols,
                               const double pixel_A[2], ssb4d_err *err)
{
    const char *ext = ext_of(path);
    if (!strcasecmp(ext, "npy")) {
        size_t shape[2] = {rows, cols};
        return ssb4d_npy_save(path, "<f4", 2, shape, img, err);
    }
    int tiff = !strcasecmp(ext, "tif") || !strcasecmp(ext, "tiff");
    int png = !strcasecmp(ext, "png");
    if (!tiff && !png)
        return ssb4d_fail(err, SSB4D_EINVAL, "%s: unknown image extension (use .tiff, .npy or .png)", path);
    char suffix[8];
    snprintf(suffix, sizeof suffix, ".%.5s", ext);
    char *tmp = ssb4d_temp_name(path, suffix); /* libtiff picks its mode from the name */
    if (!tmp)
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = tiff ? write_tiff(tmp, img, rows, cols, pixel_A, err)
                           : write_png(tmp, img, rows, cols, err);
    if (!st && rename(tmp, path) != 0)
        st = ssb4d_fail(err, SSB4D_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st)
        unlink(tmp);
    free(tmp);
    return st;
}
