/* gbuild.c — G(q,k) from a column source (SPEC 5.3).
 *
 * Per block of scan rows: read the BF columns, real FFT along the scan columns of each row into G.
 * After all blocks: complex FFT along the scan rows of each plane, in place.
 * Every row uses the same 1-D plan on the same aligned scratch, so the bits of G depend on neither
 * the block size nor the thread count (each plane is written by exactly one thread). */
#include "gbuild/gbuild.h"

#include "common/err.h"
#include "common/parallel.h"
#include "common/sha256.h"
#include "ingest/source.h"
#include "optics/optics.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BLOCK_BYTES ((size_t)256 << 20)

void ssb4d_gbuild_opts_default(ssb4d_gbuild_opts *o)
{
    memset(o, 0, sizeof *o);
    o->block_bytes = DEFAULT_BLOCK_BYTES;
}

int ssb4d_bf_pixel_active(const ssb4d_geometry *g, size_t det_cols, int32_t pix)
{
    double lambda = ssb4d_wavelength_A(g->kv);
    double row = (double)(pix / (int32_t)det_cols), col = (double)(pix % (int32_t)det_cols);
    double kx = (row - g->centre_px[0]) * g->det_sampling_mrad[0] * 1e-3 / lambda;
    double ky = (col - g->centre_px[1]) * g->det_sampling_mrad[1] * 1e-3 / lambda;
    double alpha = lambda * sqrt(kx * kx + ky * ky);
    double wmax = fmax(g->det_sampling_mrad[0], g->det_sampling_mrad[1]) * 1e-3;
    return alpha < g->semiangle_mrad * 1e-3 + 0.5 * wmax;
}


/* FFTW's planner is not thread-safe; plans are made under this lock (execution is). */
static pthread_mutex_t planner_lock = PTHREAD_MUTEX_INITIALIZER;
void ssb4d_fftw_lock(void) { pthread_mutex_lock(&planner_lock); }
void ssb4d_fftw_unlock(void) { pthread_mutex_unlock(&planner_lock); }

void ssb4d_G_free(ssb4d_G *G)
{
    if (!G)
        return;
    if (!G->is_view)
        ssb4d_mem_free(G->mem, G->data, 0);
    free(G->bf_pix);
    free(G->plane_of);
    free(G->totals);
    free(G);
}

ssb4d_status ssb4d_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix,
                          size_t n_bf, const ssb4d_gbuild_opts *o, ssb4d_mem *mem, ssb4d_G **out,
                          ssb4d_err *err)
{
    *out = NULL;
    ssb4d_gbuild_opts defaults;
    if (!o) {
        ssb4d_gbuild_opts_default(&defaults);
        o = &defaults;
    }
    ssb4d_status st = ssb4d_geometry_check(g, err);
    if (st)
        return st;
    size_t shape[4];
    ssb4d_source_shape(src, shape);
    size_t ny = shape[0], nx = shape[1], det_n = shape[2] * shape[3];
    if (n_bf == 0)
        return ssb4d_fail(err, SSB4D_EINVAL, "no bright-field pixels selected");
    for (size_t i = 0; i < n_bf; i++) {
        if (bf_pix[i] < 0 || (size_t)bf_pix[i] >= det_n)
            return ssb4d_fail(err, SSB4D_EINVAL, "BF pixel %d is outside the %zux%zu detector",
                              (int)bf_pix[i], shape[2], shape[3]);
        if (i && bf_pix[i] <= bf_pix[i - 1])
            return ssb4d_fail(err, SSB4D_EINVAL, "BF pixels must be strictly ascending");
    }
    int nt = ssb4d_threads_resolve(o->threads);

    ssb4d_G *G = calloc(1, sizeof *G);
    if (!G)
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    G->ny = ny;
    G->nx = nx;
    G->nxh = nx / 2 + 1;
    G->plane_stride = (ny * G->nxh + 7) / 8 * 8;
    G->n_bf = n_bf;
    G->det_shape[0] = shape[2];
    G->det_shape[1] = shape[3];
    G->mem = mem;
    G->bf_pix = malloc(n_bf * sizeof *G->bf_pix);
    G->plane_of = malloc(n_bf * sizeof *G->plane_of);
    G->totals = calloc(n_bf, sizeof *G->totals);
    if (!G->bf_pix || !G->plane_of || !G->totals) {
        ssb4d_G_free(G);
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    memcpy(G->bf_pix, bf_pix, n_bf * sizeof *bf_pix);
    for (size_t i = 0; i < n_bf; i++)
        G->plane_of[i] = (o->store_inactive || ssb4d_bf_pixel_active(g, shape[3], bf_pix[i]))
                             ? (int64_t)G->n_stored++
                             : -1;
    size_t g_bytes = G->n_stored * G->plane_stride * sizeof(fftwf_complex);
    if (G->n_stored) {
        G->data = ssb4d_mem_alloc(mem, g_bytes, "G(q,k)", err);
        if (!G->data) {
            ssb4d_G_free(G);
            return SSB4D_ENOMEM;
        }
    }

    /* Block of scan rows: all BF columns (totals need the unstored ones too). */
    size_t block_bytes = o->block_bytes ? o->block_bytes : DEFAULT_BLOCK_BYTES;
    size_t row_bytes = n_bf * nx * sizeof(float);
    size_t rows_per_block = block_bytes / row_bytes;
    if (rows_per_block < 1)
        rows_per_block = 1;
    if (rows_per_block > ny)
        rows_per_block = ny;
    /* Per-thread scratch: one aligned input row and one aligned output row. */
    size_t in_bytes = ((nx + 16) * sizeof(float) + 63) / 64 * 64;
    size_t scratch_stride = in_bytes + ((G->nxh + 8) * sizeof(fftwf_complex) + 63) / 64 * 64;
    float *block = ssb4d_mem_alloc(mem, rows_per_block * row_bytes, "G build block", err);
    char *scratch = block ? ssb4d_mem_alloc(mem, (size_t)nt * scratch_stride, "G build FFT scratch", err)
                          : NULL;
    if (!block || !scratch) {
        ssb4d_mem_free(mem, block, 0);
        ssb4d_G_free(G);
        return SSB4D_ENOMEM;
    }
    float *r_in = (float *)scratch;
    fftwf_complex *r_out = (fftwf_complex *)(scratch + in_bytes);

    ssb4d_fftw_lock();
    fftwf_plan prow = fftwf_plan_dft_r2c_1d((int)nx, r_in, r_out, FFTW_ESTIMATE);
    fftwf_plan pcol = NULL;
    if (G->n_stored) {
        int n = (int)ny;
        pcol = fftwf_plan_many_dft(1, &n, (int)G->nxh, G->data, NULL, (int)G->nxh, 1, G->data, NULL,
                                   (int)G->nxh, 1, FFTW_FORWARD, FFTW_ESTIMATE);
    }
    ssb4d_fftw_unlock();
    if (!prow || (G->n_stored && !pcol)) {
        ssb4d_mem_free(mem, block, 0);
        ssb4d_mem_free(mem, scratch, 0);
        ssb4d_G_free(G);
        return ssb4d_fail(err, SSB4D_EINTERNAL, "FFTW could not plan the G build");
    }

    size_t n_blocks = (ny + rows_per_block - 1) / rows_per_block;
    double work_total = (double)n_blocks + 1.0;
    for (size_t b = 0; b < n_blocks && !st; b++) {
        size_t row0 = b * rows_per_block;
        size_t nrows = (row0 + rows_per_block <= ny) ? rows_per_block : ny - row0;
        st = ssb4d_source_read_columns_mt(src, bf_pix, n_bf, row0, nrows, block, nt, err);
        if (st)
            break;
        ssb4d_source_done_with(src, row0 * nx, nrows * nx);
        int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 8) reduction(| : bad)
        for (size_t ib = 0; ib < n_bf; ib++) {
            const float *img = block + ib * nrows * nx;
            uint64_t sum = 0;
            for (size_t i = 0; i < nrows * nx; i++) {
                float v = img[i];
                if (!(v >= 0.0f) || v > 4294967295.0f)
                    bad = 1;
                else
                    sum += (uint64_t)v;
            }
            G->totals[ib] += sum;
            int64_t p = G->plane_of[ib];
            if (p < 0)
                continue;
            int t = omp_get_thread_num();
            float *in = (float *)(scratch + (size_t)t * scratch_stride);
            fftwf_complex *o2 = (fftwf_complex *)(scratch + (size_t)t * scratch_stride + in_bytes);
            fftwf_complex *plane = G->data + (size_t)p * G->plane_stride;
            for (size_t r = 0; r < nrows; r++) {
                memcpy(in, img + r * nx, nx * sizeof(float));
                fftwf_execute_dft_r2c(prow, in, o2);
                memcpy(plane + (row0 + r) * G->nxh, o2, G->nxh * sizeof(fftwf_complex));
            }
        }
        if (bad)
            st = ssb4d_fail(err, SSB4D_EFORMAT, "the data holds negative or non-finite values");
        if (o->progress)
            o->progress(o->progress_user, (double)(b + 1) / work_total);
    }
    if (!st && G->n_stored) {
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4)
        for (size_t p = 0; p < G->n_stored; p++) {
            fftwf_complex *plane = G->data + p * G->plane_stride;
            fftwf_execute_dft(pcol, plane, plane);
        }
        /* Zero the padding so hashes and copies are well defined. */
        size_t used = ny * G->nxh;
        for (size_t p = 0; p < G->n_stored; p++)
            memset(G->data + p * G->plane_stride + used, 0,
                   (G->plane_stride - used) * sizeof(fftwf_complex));
    }
    uint64_t grand = 0;
    for (size_t ib = 0; ib < n_bf; ib++)
        grand += G->totals[ib];
    G->dc = (double)grand / (double)n_bf;
    if (!st && !(G->dc > 0))
        st = ssb4d_fail(err, SSB4D_ENOTFOUND, "the selected BF pixels hold no counts (is the BF disk where the calibration says?)");
    if (o->progress)
        o->progress(o->progress_user, 1.0);

    ssb4d_fftw_lock();
    fftwf_destroy_plan(prow);
    if (pcol)
        fftwf_destroy_plan(pcol);
    ssb4d_fftw_unlock();
    ssb4d_mem_free(mem, block, 0);
    ssb4d_mem_free(mem, scratch, 0);
    if (st) {
        ssb4d_G_free(G);
        return st;
    }
    *out = G;
    return SSB4D_OK;
}

ssb4d_status ssb4d_G_subset(const ssb4d_G *G, const size_t *idx, size_t n, ssb4d_G **out,
                            ssb4d_err *err)
{
    *out = NULL;
    if (n == 0)
        return ssb4d_fail(err, SSB4D_EINVAL, "a BF subset needs at least one pixel");
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= G->n_bf || (i && idx[i] <= idx[i - 1]))
            return ssb4d_fail(err, SSB4D_EINVAL, "BF subset indices must be ascending and below %zu", G->n_bf);
    ssb4d_G *V = calloc(1, sizeof *V);
    if (!V)
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    *V = *G;
    V->is_view = 1;
    V->n_bf = n;
    V->bf_pix = malloc(n * sizeof *V->bf_pix);
    V->plane_of = malloc(n * sizeof *V->plane_of);
    V->totals = malloc(n * sizeof *V->totals);
    if (!V->bf_pix || !V->plane_of || !V->totals) {
        ssb4d_G_free(V);
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    uint64_t grand = 0;
    V->n_stored = 0;
    for (size_t i = 0; i < n; i++) {
        V->bf_pix[i] = G->bf_pix[idx[i]];
        V->plane_of[i] = G->plane_of[idx[i]];
        V->totals[i] = G->totals[idx[i]];
        V->n_stored += V->plane_of[i] >= 0;
        grand += V->totals[i];
    }
    V->dc = (double)grand / (double)n;
    if (!(V->dc > 0)) {
        ssb4d_G_free(V);
        return ssb4d_fail(err, SSB4D_EINVAL, "the BF subset has no counts");
    }
    *out = V;
    return SSB4D_OK;
}

size_t ssb4d_G_n_bf(const ssb4d_G *G) { return G->n_bf; }
size_t ssb4d_G_n_stored(const ssb4d_G *G) { return G->n_stored; }
size_t ssb4d_G_bytes(const ssb4d_G *G) { return G->n_stored * G->plane_stride * sizeof(fftwf_complex); }
double ssb4d_G_dc(const ssb4d_G *G) { return G->dc; }

void ssb4d_G_scan_shape(const ssb4d_G *G, size_t *ny, size_t *nx)
{
    *ny = G->ny;
    *nx = G->nx;
}

const float *ssb4d_G_plane(const ssb4d_G *G, size_t i)
{
    if (i >= G->n_bf)
        return NULL;
    return (const float *)G_plane(G, i);
}

void ssb4d_G_sha256(const ssb4d_G *G, char hex[65])
{
    ssb4d_sha256 *h = ssb4d_sha256_new();
    for (size_t i = 0; i < G->n_bf; i++) {
        const fftwf_complex *p = G_plane(G, i);
        if (p)
            ssb4d_sha256_update(h, p, G->ny * G->nxh * sizeof(fftwf_complex));
    }
    ssb4d_sha256_update(h, &G->dc, sizeof G->dc);
    ssb4d_sha256_final_hex(h, hex);
}
