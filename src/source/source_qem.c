/* source_qem.c — frames and BF columns decoded from an encoded .qem acquisition (SPEC §3).
 *
 * A column read decodes only the requested detector pixels' streams, and only of the 512-scan
 * blocks that overlap the requested scan rows; nothing decoded is kept between reads, so the
 * resident cost of a .qem source is the (memory-mapped) encoded file. One task = one
 * (pixel, block) stream, written by one thread into its own part of the output, so the result
 * does not depend on the thread count. */
#include "common/err.h"
#include "common/parallel.h"
#include "source/source.h"

#include <stdlib.h>
#include <string.h>

/* First block whose scans reach past t (blocks are consecutive and ordered by t0). */
static size_t block_of(const qem_file *q, size_t t)
{
    size_t lo = 0, hi = qem_get_info(q)->n_blocks;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2, t0, n;
        qem_block_range(q, mid, &t0, &n);
        if (t0 <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Records the first error (the lowest task index, so the message does not depend on timing). */
typedef struct {
    size_t task;
    ssb4d_status st;
    ssb4d_err err;
} first_error;

static void keep_error(first_error *fe, size_t task, ssb4d_status st, const ssb4d_err *e)
{
#pragma omp critical(ssb4d_qem_source_error)
    if (!fe->st || task < fe->task) {
        fe->task = task;
        fe->st = st;
        fe->err = *e;
    }
}

static ssb4d_status report(const first_error *fe, ssb4d_err *err)
{
    if (!fe->st)
        return SSB4D_OK;
    if (err)
        *err = fe->err;
    return fe->st;
}

ssb4d_status ssb_qem_read_columns(const qem_file *q, const int32_t *det_pix, size_t n_pix,
                                  size_t row0, size_t nrows, float *out, int threads,
                                  ssb4d_err *err)
{
    const qem_info *in = qem_get_info(q);
    size_t nx = in->shape[1], t_lo = row0 * nx, t_hi = (row0 + nrows) * nx;
    if (n_pix == 0 || nrows == 0)
        return SSB4D_OK;
    size_t b0 = block_of(q, t_lo), b1 = block_of(q, t_hi - 1) + 1, nb = b1 - b0;
    size_t plane = nrows * nx, ntask = n_pix * nb;
    first_error fe = {0};
    threads = ssb_threads_resolve(threads); /* 0 = all cores, like the qem_* functions */
    /* Pixel-major task order: consecutive tasks of a thread read one pixel's streams block by
     * block, which walks the file forward. */
#pragma omp parallel num_threads(threads)
    {
        uint16_t buf[512];
#pragma omp for schedule(dynamic, 16)
        for (size_t task = 0; task < ntask; task++) {
            size_t p = task / nb, b = b0 + task % nb, t0, n;
            qem_block_range(q, b, &t0, &n);
            ssb4d_err e = {0};
            ssb4d_status st = qem_decode_block(q, b, &det_pix[p], 1, buf, &e);
            if (st) {
                keep_error(&fe, task, st, &e);
                continue;
            }
            size_t lo = t0 > t_lo ? t0 : t_lo, hi = t0 + n < t_hi ? t0 + n : t_hi;
            float *o = out + p * plane + (lo - t_lo);
            const uint16_t *src = buf + (lo - t0);
            for (size_t i = 0; i < hi - lo; i++)
                o[i] = (float)src[i];
        }
    }
    return report(&fe, err);
}

#define PIX_GROUP 64
ssb4d_status ssb_qem_read_frames(const qem_file *q, size_t pos0, size_t npos, uint32_t *out,
                                 ssb4d_err *err)
{
    const qem_info *in = qem_get_info(q);
    size_t P = in->n_pix, t_hi = pos0 + npos;
    if (npos == 0)
        return SSB4D_OK;
    size_t b0 = block_of(q, pos0), b1 = block_of(q, t_hi - 1) + 1, nb = b1 - b0;
    size_t ngroups = (P + PIX_GROUP - 1) / PIX_GROUP, ntask = ngroups * nb;
    int32_t *pix = malloc(P * sizeof *pix);
    if (!pix)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory decoding frames");
    for (size_t k = 0; k < P; k++)
        pix[k] = (int32_t)k;
    first_error fe = {0};
    int failed_alloc = 0;
#pragma omp parallel
    {
        uint16_t *buf = malloc(PIX_GROUP * 512 * sizeof *buf);
        if (!buf) {
#pragma omp atomic write
            failed_alloc = 1;
        }
#pragma omp for schedule(dynamic, 4)
        for (size_t task = 0; task < ntask; task++) {
            if (!buf)
                continue;
            size_t g = task % ngroups, b = b0 + task / ngroups, t0, n;
            size_t k0 = g * PIX_GROUP, nk = P - k0 < PIX_GROUP ? P - k0 : PIX_GROUP;
            qem_block_range(q, b, &t0, &n);
            ssb4d_err e = {0};
            ssb4d_status st = qem_decode_block(q, b, pix + k0, nk, buf, &e);
            if (st) {
                keep_error(&fe, task, st, &e);
                continue;
            }
            size_t lo = t0 > pos0 ? t0 : pos0, hi = t0 + n < t_hi ? t0 + n : t_hi;
            for (size_t t = lo; t < hi; t++) {
                uint32_t *o = out + (t - pos0) * P + k0;
                for (size_t j = 0; j < nk; j++)
                    o[j] = buf[j * n + (t - t0)];
            }
        }
        free(buf);
    }
    free(pix);
    if (failed_alloc)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory decoding frames");
    return report(&fe, err);
}
