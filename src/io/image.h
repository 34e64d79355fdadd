/* image.h — writing float32 images: TIFF float32 (with sampling tags), .npy, 8-bit PNG preview. */
#ifndef SSB4D_IO_IMAGE_H
#define SSB4D_IO_IMAGE_H
#include "ssb4d.h"

/* Format chosen by extension (.tif/.tiff, .npy, .png). pixel_A = (row, col) sampling in Å.
 * Written atomically (temp file + rename). */
ssb4d_status ssb4d_image_write(const char *path, const float *img, size_t rows, size_t cols,
                               const double pixel_A[2], ssb4d_err *err);
/* Checks that path has an extension ssb4d_image_write knows (before any long work). */
ssb4d_status ssb4d_image_check_path(const char *path, ssb4d_err *err);
/* 8-bit grey levels with a 0.5–99.5 % percentile stretch (out has rows*cols bytes). */
void ssb4d_image_to_u8(const float *img, size_t n, unsigned char *out);
#endif
