/* source_frames.c — BF columns from a frame reader (formats/framesrc.h), so that every format
 * ssb4d reads can be fitted and reconstructed in place, without an import.
 *
 * A column read asks for whole scan rows of a few thousand detector pixels; the reader gives
 * whole frames. Frames are read in chunks of at most CHUNK_BYTES (a few MiB: never the whole
 * block of rows, which for a 192² detector would be four times the columns' size) and their BF
 * pixels gathered into the pixel-major output. Values are copied, never combined, so the result
 * does not depend on the chunk size or the thread count. */
#include "common/err.h"
#include "source/source.h"

#include <stdlib.h>

#define CHUNK_BYTES ((size_t)16 << 20)

ssb4d_status ssb_frames_read_columns(framesrc *fs, const int32_t *det_pix, size_t n_pix, size_t row0,
                                     size_t nrows, float *out, int threads, ssb4d_err *err)
{
    size_t shape[4];
    framesrc_shape(fs, shape);
    size_t nx = shape[1], fr = shape[2] * shape[3], npos = nrows * nx, pos0 = row0 * nx;
    if (n_pix == 0 || npos == 0)
        return SSB4D_OK;
    size_t chunk = CHUNK_BYTES / (fr * sizeof(float));
    chunk = chunk < 1 ? 1 : chunk > npos ? npos : chunk;
    float *buf = malloc(chunk * fr * sizeof *buf);
    if (!buf)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory (a chunk of %zu frames)", chunk);
    ssb4d_status st = SSB4D_OK;
    for (size_t c0 = 0; c0 < npos && !st; c0 += chunk) {
        size_t n = npos - c0 < chunk ? npos - c0 : chunk;
        if ((st = framesrc_read_f32(fs, pos0 + c0, n, buf, err)))
            break;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t p = 0; p < n_pix; p++) {
            float *o = out + p * npos + c0;
            const float *b = buf + (size_t)det_pix[p];
            for (size_t f = 0; f < n; f++)
                o[f] = b[f * fr];
        }
    }
    free(buf);
    return st;
}
