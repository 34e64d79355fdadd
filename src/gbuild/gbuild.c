/* gbuild.c — G(q,k) from a column source (SPEC 5.3).
 *
 * Per block of scan rows: read the BF columns, real FFT along the scan columns of each row into G.
 * After all blocks: complex FFT along the scan rows of each plane, in place.
 * Every row uses the same 1-D plan on the same aligned scratch, so the bits of G depend on neither
 * the block size nor the thread count (each plane is written by exactly one thread). */
#include "gbuild/gbuild.h"

#include "common/err.h"
#include "common/fftw_lock.h"
#include "common/half.h"
#include "common/parallel.h"
#include "common/sha256.h"
#include "dist/dist.h"
#include "optics/optics.h"
#include "source/source.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BLOCK_BYTES ((size_t)256 << 20)
#define DEFAULT_GROUP_BYTES ((size_t)256 << 20)

void ssb4d_gbuild_opts_default(ssb4d_gbuild_opts *o)
{
    memset(o, 0, sizeof *o);
    o->block_bytes = DEFAULT_BLOCK_BYTES;
}

int ssb_bf_pixel_active(const ssb4d_geometry *g, size_t det_cols, int32_t pix)
{
    double lambda = ssb4d_wavelength_A(g->kv);
    double row = (double)(pix / (int32_t)det_cols), col = (double)(pix % (int32_t)det_cols);
    double kx = (row - g->centre_px[0]) * g->det_sampling_mrad[0] * 1e-3 / lambda;
    double ky = (col - g->centre_px[1]) * g->det_sampling_mrad[1] * 1e-3 / lambda;
    double alpha = lambda * sqrt(kx * kx + ky * ky);
    double wmax = fmax(g->det_sampling_mrad[0], g->det_sampling_mrad[1]) * 1e-3;
    return alpha < g->semiangle_mrad * 1e-3 + 0.5 * wmax;
}

void ssb4d_G_free(ssb4d_G *G)
{
    if (!G)
        return;
    if (!G->view.is_view) {
        if (G->store.dev)
            G->store.dev_free(G->store.dev);
        ssb4d_mem_free(G->store.mem, G->store.data, 0);
        ssb4d_mem_free(G->store.mem, G->store.data_h, 0);
        free(G->store.h_exp);
    }
    free(G->bf_pix);
    free(G->plane_of);
    free(G->totals);
    free(G->view.ib);
    free(G);
}

int G_half_store(const float *in, uint16_t *out, size_t n)
{
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(in[i]);
        amax = a > amax ? a : amax;
    }
    int e = 0;
    if (amax > 0.0f && isfinite(amax)) {
        frexpf(amax / 32768.0f, &e); /* amax / 32768 = m·2^e with m in [0.5, 1): amax·2^-e <= 32768 */
        e = e < -100 ? -100 : e > 120 ? 120 : e;
    }
    const float scale = ldexpf(1.0f, -e);
    float tmp[256];
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        size_t m = n - i0 < 256 ? n - i0 : 256;
        for (size_t i = 0; i < m; i++)
            tmp[i] = in[i0 + i] * scale;
        ssb_f32_to_f16(tmp, out + i0, m);
    }
    return e;
}

void G_half_load(const uint16_t *in, int e, float *out, size_t n)
{
    ssb_f16_to_f32(in, out, n);
    const float scale = ldexpf(1.0f, e);
    for (size_t i = 0; i < n; i++)
        out[i] *= scale;
}

/* The float32 planes of the BF pixels idx[0..n) (indices into G's BF order, ascending) into
 * dest[0..n) (NULL: read for the totals only), their values added into totals (may be NULL) one
 * by one in scan order (float data: the same sum whatever the block size; counts: exact).
 * Per block of scan rows: read the columns, real FFT along the scan columns of each row; then a
 * complex FFT along the scan rows of each plane. Every row goes through the same 1-D plan on the
 * same aligned scratch and every plane through the same column plan, so a plane's bits depend
 * on neither the block size, the group it is built in, nor the thread count. */
static ssb4d_status build_planes(const ssb4d_G *G, ssb4d_source *src, const size_t *idx, size_t n,
                                 fftwf_complex *const *dest, double *totals, size_t block_bytes,
                                 int nt, ssb4d_mem *mem, const ssb4d_gbuild_opts *o, double prog0,
                                 double prog_span, ssb4d_err *err)
{
    size_t ny = G->ny, nx = G->nx;
    int32_t *pix = malloc(n * sizeof *pix);
    if (!pix)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    fftwf_complex *first = NULL;
    for (size_t i = 0; i < n; i++) {
        pix[i] = G->bf_pix[idx[i]];
        if (!first && dest[i])
            first = dest[i];
    }
    const gbuild_block_ws w = gbuild_block_sizes(ny, nx, n, block_bytes, nt);
    size_t rows_per_block = w.rows, in_bytes = w.in_bytes, scratch_stride = w.scratch_stride;
    float *block = ssb4d_mem_alloc(mem, w.block, "G build block", err);
    char *scratch = block ? ssb4d_mem_alloc(mem, w.scratch, "G build FFT scratch", err) : NULL;
    if (!block || !scratch) {
        ssb4d_mem_free(mem, block, 0);
        free(pix);
        return SSB4D_ENOMEM;
    }
    const int is_float = ssb4d_source_is_float(src);
    float *r_in = (float *)scratch;
    fftwf_complex *r_out = (fftwf_complex *)(scratch + in_bytes);
    ssb_fftw_lock();
    fftwf_plan prow = fftwf_plan_dft_r2c_1d((int)nx, r_in, r_out, FFTW_ESTIMATE);
    fftwf_plan pcol = NULL;
    if (first) {
        int nyi = (int)ny;
        pcol = fftwf_plan_many_dft(1, &nyi, (int)G->nxh, first, NULL, (int)G->nxh, 1, first, NULL,
                                   (int)G->nxh, 1, FFTW_FORWARD, FFTW_ESTIMATE);
    }
    ssb_fftw_unlock();
    ssb4d_status st = SSB4D_OK;
    if (!prow || (first && !pcol))
        st = ssb_fail(err, SSB4D_EINTERNAL, "FFTW could not plan the G build");

    size_t n_blocks = (ny + rows_per_block - 1) / rows_per_block;
    for (size_t b = 0; b < n_blocks && !st; b++) {
        if (ssb4d_mem_progress(mem, prog0 + prog_span * (double)b / ((double)n_blocks + 1.0))) {
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
            break;
        }
        size_t row0 = b * rows_per_block;
        size_t nrows = (row0 + rows_per_block <= ny) ? rows_per_block : ny - row0;
        st = ssb_source_read_columns_mt(src, pix, n, row0, nrows, block, nt, err);
        if (st)
            break;
        ssb_source_done_with(src, row0 * nx, nrows * nx);
        int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 8) reduction(| : bad)
        for (size_t i = 0; i < n; i++) {
            const float *img = block + i * nrows * nx;
            /* counts: never negative; float data (SPEC §4): any finite value */
            double sum = totals ? totals[idx[i]] : 0.0;
            for (size_t k = 0; k < nrows * nx; k++) {
                float v = img[k];
                if (is_float ? !isfinite(v) : (!(v >= 0.0f) || v > 4294967295.0f))
                    bad = 1;
                else
                    sum += (double)v;
            }
            if (totals)
                totals[idx[i]] = sum;
            fftwf_complex *plane = dest[i];
            if (!plane || ssb4d_mem_poll(mem))
                continue; /* cancelled: checked after the block */
            int t = omp_get_thread_num();
            float *in = (float *)(scratch + (size_t)t * scratch_stride);
            fftwf_complex *o2 = (fftwf_complex *)(scratch + (size_t)t * scratch_stride + in_bytes);
            for (size_t r = 0; r < nrows; r++) {
                memcpy(in, img + r * nx, nx * sizeof(float));
                fftwf_execute_dft_r2c(prow, in, o2);
                memcpy(plane + (row0 + r) * G->nxh, o2, G->nxh * sizeof(fftwf_complex));
            }
        }
        if (bad)
            st = ssb_fail(err, SSB4D_EFORMAT, "the data holds negative or non-finite values");
        else if (ssb4d_mem_cancelled(mem))
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
        if (!st && o && o->progress &&
            o->progress(o->progress_user, "G build", prog0 + prog_span * (double)(b + 1) / ((double)n_blocks + 1.0)))
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
    }
    if (!st && first) {
        size_t used = ny * G->nxh;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4)
        for (size_t i = 0; i < n; i++) {
            if (!dest[i])
                continue;
            fftwf_execute_dft(pcol, dest[i], dest[i]);
            /* Zero the padding so hashes and copies are well defined. */
            memset(dest[i] + used, 0, (G->plane_stride - used) * sizeof(fftwf_complex));
        }
    }
    ssb_fftw_lock();
    if (prow)
        fftwf_destroy_plan(prow);
    if (pcol)
        fftwf_destroy_plan(pcol);
    ssb_fftw_unlock();
    ssb4d_mem_free(mem, block, 0);
    ssb4d_mem_free(mem, scratch, 0);
    free(pix);
    return st;
}

static size_t plane_bytes_f32(const ssb4d_G *G) { return G->plane_stride * sizeof(fftwf_complex); }

/* ---- workspace: the sizes the code below allocates, and the query the planner composes ------ */

size_t G_plane_stride_of(size_t ny, size_t nx) { return (ny * (nx / 2 + 1) + 7) / 8 * 8; }

size_t G_plane_bytes_of(size_t ny, size_t nx, int half)
{
    return half ? G_plane_stride_of(ny, nx) * 2 * sizeof(uint16_t) : G_plane_stride_of(ny, nx) * sizeof(fftwf_complex);
}

size_t G_group_planes_of(size_t ny, size_t nx, size_t group_bytes)
{
    size_t g = group_bytes / G_plane_bytes_of(ny, nx, 0) / 64 * 64;
    return g < 64 ? 64 : g;
}

gbuild_block_ws gbuild_block_sizes(size_t ny, size_t nx, size_t n, size_t block_bytes, int nt)
{
    gbuild_block_ws w;
    size_t row_bytes = n * nx * sizeof(float);
    w.rows = row_bytes ? block_bytes / row_bytes : ny;
    w.rows = w.rows < 1 ? 1 : w.rows > ny ? ny : w.rows;
    w.block = w.rows * row_bytes;
    w.in_bytes = ((nx + 16) * sizeof(float) + 63) / 64 * 64;
    w.scratch_stride = w.in_bytes + ((nx / 2 + 1 + 8) * sizeof(fftwf_complex) + 63) / 64 * 64;
    w.scratch = (size_t)nt * w.scratch_stride;
    return w;
}

static void block_workspace(const gbuild_ws_shape *s, size_t n, ws_sink *out)
{
    gbuild_block_ws w = gbuild_block_sizes(s->ny, s->nx, n, s->block_bytes, s->threads);
    ws_alloc(out, w.block);
    ws_alloc(out, w.scratch);
    ws_free(out, w.block, 0);
    ws_free(out, w.scratch, 0);
}

static int ws_resident_f32(const gbuild_ws_shape *s) { return !s->half && s->n_resident >= s->n_stored; }

void gbuild_workspace(const gbuild_ws_shape *s, ws_sink *out)
{
    if (s->n_resident)
        ws_alloc(out, s->n_resident * G_plane_bytes_of(s->ny, s->nx, s->half));
    if (ws_resident_f32(s) || s->n_stored == 0) {
        block_workspace(s, s->n_bf, out);
        return;
    }
    size_t span = s->group_planes, buf = span * G_plane_bytes_of(s->ny, s->nx, 0);
    ws_alloc(out, buf);
    for (size_t ib0 = 0; ib0 < s->n_bf; ib0 += span)
        block_workspace(s, ib0 + span < s->n_bf ? span : s->n_bf - ib0, out);
    ws_free(out, buf, 0);
}

void gbuild_free_workspace(const gbuild_ws_shape *s, ws_sink *out)
{
    if (s->n_resident)
        ws_free(out, s->n_resident * G_plane_bytes_of(s->ny, s->nx, s->half), 0);
}

void gbuild_pass_workspace(const gbuild_ws_shape *s, ws_sink *out)
{
    size_t buf = s->group_planes * G_plane_bytes_of(s->ny, s->nx, 0);
    ws_alloc(out, buf);
    if (s->n_resident < s->n_stored) {
        size_t nmax = s->n_stored - s->n_resident, best = 1, best_bytes = 0;
        if (nmax > s->group_planes)
            nmax = s->group_planes;
        for (size_t n = 1; n <= nmax; n++) {
            size_t b = gbuild_block_sizes(s->ny, s->nx, n, s->block_bytes, s->threads).block;
            if (b > best_bytes)
                best_bytes = b, best = n;
        }
        block_workspace(s, best, out);
    }
    ws_free(out, buf, 1);
}

/* Which stored planes stay resident when they do not all fit in resident_bytes: the innermost
 * BF pixels (nearest the disk centre; ties in BF order), which every fit subset uses. */
typedef struct {
    double r2;
    size_t ib;
} by_radius;

static int cmp_radius(const void *a, const void *b)
{
    const by_radius *x = a, *y = b;
    if (x->r2 != y->r2)
        return x->r2 < y->r2 ? -1 : 1;
    return x->ib < y->ib ? -1 : (x->ib > y->ib);
}

static ssb4d_status choose_resident(ssb4d_G *G, const ssb4d_geometry *g, size_t n_keep, ssb4d_err *err)
{
    by_radius *v = malloc((G->n_stored ? G->n_stored : 1) * sizeof *v);
    if (!v)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t ib = 0; ib < G->n_bf; ib++) {
        if (G->plane_of[ib] == G_INACTIVE)
            continue;
        double dr = (double)(G->bf_pix[ib] / (int32_t)G->det_shape[1]) - g->centre_px[0];
        double dc = (double)(G->bf_pix[ib] % (int32_t)G->det_shape[1]) - g->centre_px[1];
        v[k].r2 = dr * dr + dc * dc;
        v[k].ib = ib;
        k++;
    }
    qsort(v, k, sizeof *v, cmp_radius);
    for (size_t i = 0; i < k; i++)
        G->plane_of[v[i].ib] = i < n_keep ? 0 : G_STREAMED;
    free(v);
    size_t p = 0;
    for (size_t ib = 0; ib < G->n_bf; ib++)
        if (G->plane_of[ib] >= 0)
            G->plane_of[ib] = (int64_t)p++;
    G->store.n_resident = p;
    return SSB4D_OK;
}

/* ssb4d_gbuild up to the build: the checks, the layout and the resident planes (not filled). */
static ssb4d_status gbuild_setup(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                                 const ssb4d_gbuild_opts *o, ssb4d_mem *mem, ssb4d_G **out, ssb4d_err *err)
{
    *out = NULL;
    ssb4d_status st = ssb_geometry_check(g, err);
    if (st)
        return st;
    size_t shape[4];
    ssb4d_source_shape(src, shape);
    size_t ny = shape[0], nx = shape[1], det_n = shape[2] * shape[3];
    if (n_bf == 0)
        return ssb_fail(err, SSB4D_EINVAL, "no bright-field pixels selected");
    for (size_t i = 0; i < n_bf; i++) {
        if (bf_pix[i] < 0 || (size_t)bf_pix[i] >= det_n)
            return ssb_fail(err, SSB4D_EINVAL, "BF pixel %d is outside the %zux%zu detector",
                            (int)bf_pix[i], shape[2], shape[3]);
        if (i && bf_pix[i] <= bf_pix[i - 1])
            return ssb_fail(err, SSB4D_EINVAL, "BF pixels must be strictly ascending");
    }
    ssb4d_G *G = calloc(1, sizeof *G);
    if (!G)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    G->ny = ny;
    G->nx = nx;
    G->nxh = nx / 2 + 1;
    G->plane_stride = G_plane_stride_of(ny, nx);
    G->n_bf = n_bf;
    G->det_shape[0] = shape[2];
    G->det_shape[1] = shape[3];
    G->store.mem = mem;
    G->store.src = src;
    G->store.threads = o->threads;
    G->store.block_bytes = o->block_bytes ? o->block_bytes : DEFAULT_BLOCK_BYTES;
    size_t group_bytes = o->group_bytes ? o->group_bytes : DEFAULT_GROUP_BYTES;
    G->store.group_planes = G_group_planes_of(ny, nx, group_bytes);
    G->bf_pix = malloc(n_bf * sizeof *G->bf_pix);
    G->plane_of = malloc(n_bf * sizeof *G->plane_of);
    G->totals = calloc(n_bf, sizeof *G->totals);
    if (!G->bf_pix || !G->plane_of || !G->totals) {
        ssb4d_G_free(G);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    memcpy(G->bf_pix, bf_pix, n_bf * sizeof *bf_pix);
    if (o->dist) {
        if (o->half || o->resident_bytes) {
            ssb4d_G_free(G);
            return ssb_fail(err, SSB4D_EINVAL, "a distributed G holds its planes in float32, all resident");
        }
        G->dist = o->dist;
        dist_split(n_bf, dist_size(o->dist), dist_rank(o->dist), &G->own_lo, &G->own_hi);
    }
    size_t n_here = 0;
    for (size_t i = 0; i < n_bf; i++) {
        int stored = o->store_inactive || ssb_bf_pixel_active(g, shape[3], bf_pix[i]);
        int here = !G->dist || (i >= G->own_lo && i < G->own_hi);
        G->plane_of[i] = !stored ? G_INACTIVE : here ? (int64_t)n_here++ : G_REMOTE;
        G->n_stored += stored;
        G->n_remote += stored && !here;
    }
    G->store.n_resident = n_here;
    size_t per_plane = G_plane_bytes_of(ny, nx, o->half);
    if (o->resident_bytes && G->n_stored * per_plane > o->resident_bytes) {
        st = choose_resident(G, g, o->resident_bytes / per_plane, err);
        if (st) {
            ssb4d_G_free(G);
            return st;
        }
    }
    if (G->store.n_resident) {
        if (o->half) {
            G->store.data_h = ssb4d_mem_alloc(mem, G->store.n_resident * per_plane, "G(q,k) half", err);
            G->store.h_exp = calloc(G->store.n_resident, 1);
            if (G->store.data_h && !G->store.h_exp) {
                ssb4d_G_free(G);
                return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
            }
        } else
            G->store.data = ssb4d_mem_alloc(mem, G->store.n_resident * per_plane, "G(q,k)", err);
        if (!G->store.data && !G->store.data_h) {
            ssb4d_G_free(G);
            return SSB4D_ENOMEM;
        }
    }
    *out = G;
    return SSB4D_OK;
}

/* ssb4d_gbuild after the planes and the totals: the mean total (dc) and its check. */
static ssb4d_status gbuild_finish(ssb4d_G *G, ssb4d_status st, const ssb4d_gbuild_opts *o, ssb4d_G **out,
                                  ssb4d_err *err)
{
    double grand = 0;
    for (size_t ib = 0; ib < G->n_bf; ib++)
        grand += G->totals[ib];
    G->dc = grand / (double)G->n_bf;
    if (!st && !(G->dc > 0))
        st = ssb_fail(err, SSB4D_ENOTFOUND, "the selected BF pixels hold no counts (is the BF disk where the calibration says?)");
    if (o->progress)
        o->progress(o->progress_user, "G build", 1.0);
    if (st) {
        ssb4d_G_free(G);
        return st;
    }
    if (G->store.n_resident + G->n_remote == G->n_stored)
        G->store.src = NULL; /* nothing to rebuild: the source may be closed */
    *out = G;
    return SSB4D_OK;
}

ssb4d_status gbuild_layout(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                           const ssb4d_gbuild_opts *o, ssb4d_mem *mem, ssb4d_G **out, ssb4d_err *err)
{
    if (o->dist || o->half)
        return ssb_fail(err, SSB4D_EINVAL, "a G built elsewhere is held in float32 on one process");
    ssb4d_status st = gbuild_setup(src, g, bf_pix, n_bf, o, mem, out, err);
    if (!st && !G_resident_f32(*out) && (*out)->n_stored) {
        ssb4d_G_free(*out);
        *out = NULL;
        st = ssb_fail(err, SSB4D_EINVAL, "a G built elsewhere holds every stored plane resident");
    }
    return st;
}

ssb4d_status gbuild_layout_finish(ssb4d_G *G, ssb4d_status st, const ssb4d_gbuild_opts *o, ssb4d_G **out,
                                  ssb4d_err *err)
{
    *out = NULL;
    return gbuild_finish(G, st, o, out, err);
}

ssb4d_status ssb4d_gbuild(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix,
                          size_t n_bf, const ssb4d_gbuild_opts *o, ssb4d_mem *mem, ssb4d_G **out,
                          ssb4d_err *err)
{
    ssb4d_gbuild_opts defaults;
    if (!o) {
        ssb4d_gbuild_opts_default(&defaults);
        o = &defaults;
    }
    ssb4d_G *G = NULL;
    ssb4d_status st = gbuild_setup(src, g, bf_pix, n_bf, o, mem, &G, err);
    if (st)
        return st;
    const int nt = ssb_threads_resolve(o->threads);
    size_t *idx = malloc(n_bf * sizeof *idx);
    fftwf_complex **dest = malloc(n_bf * sizeof *dest);
    if (!idx || !dest) {
        free(idx), free(dest);
        ssb4d_G_free(G);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    if (G_resident_f32(G) || G->n_stored == 0) {
        /* Everything resident in float32: one pass over all BF pixels, straight into G. */
        for (size_t i = 0; i < n_bf; i++) {
            idx[i] = i;
            dest[i] = (fftwf_complex *)G_plane(G, i);
        }
        st = build_planes(G, src, idx, n_bf, dest, G->totals, G->store.block_bytes, nt, mem, o, 0.0, 1.0, err);
    } else {
        /* Groups of BF pixels: resident float32 planes are built in place, the others in the
         * group's buffer, then converted to half precision or dropped (streamed). */
        size_t span = G->store.group_planes;
        fftwf_complex *buf = ssb4d_mem_alloc(mem, span * plane_bytes_f32(G), "G build group", err);
        if (!buf)
            st = SSB4D_ENOMEM;
        size_t n_groups = (n_bf + span - 1) / span;
        for (size_t gi = 0; gi < n_groups && !st; gi++) {
            size_t ib0 = gi * span, ib1 = ib0 + span < n_bf ? ib0 + span : n_bf;
            for (size_t ib = ib0; ib < ib1; ib++) {
                idx[ib - ib0] = ib;
                int64_t p = G->plane_of[ib];
                dest[ib - ib0] = p == G_INACTIVE                ? NULL
                                 : (p >= 0 && G->store.data)          ? G->store.data + (size_t)p * G->plane_stride
                                 : o->half && p >= 0            ? buf + (ib - ib0) * G->plane_stride
                                 : NULL; /* streamed: the totals only */
            }
            st = build_planes(G, src, idx, ib1 - ib0, dest, G->totals, G->store.block_bytes, nt, mem, o,
                              (double)gi / (double)n_groups, 1.0 / (double)n_groups, err);
            if (!st && G->store.data_h) {
                size_t hp = G->plane_stride * 2;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4)
                for (size_t ib = ib0; ib < ib1; ib++) {
                    int64_t p = G->plane_of[ib];
                    if (p >= 0)
                        G->store.h_exp[p] = (int8_t)G_half_store((const float *)(buf + (ib - ib0) * G->plane_stride),
                                                           G->store.data_h + (size_t)p * hp, hp);
                }
            }
        }
        ssb4d_mem_free(mem, buf, 0);
    }
    free(idx), free(dest);
    return gbuild_finish(G, st, o, out, err);
}

/* ---- passes over a half or streamed G ------------------------------------------------------ */

size_t G_group_span(const ssb4d_G *G) { return G_resident_f32(G) ? G->n_bf : G->store.group_planes; }

ssb4d_status G_group_init(const ssb4d_G *G, ssb4d_mem *mem, G_group *gr, ssb4d_err *err)
{
    memset(gr, 0, sizeof *gr);
    gr->cap = G_group_span(G);
    gr->mem = mem;
    gr->planes = calloc(gr->cap ? gr->cap : 1, sizeof *gr->planes);
    if (!gr->planes)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    if (!G_resident_f32(G)) {
        gr->buf = ssb4d_mem_alloc(mem, gr->cap * G->plane_stride * sizeof(fftwf_complex),
                                  G->store.data_h ? "G group (from half)" : "G group (streamed)", err);
        if (!gr->buf) {
            free(gr->planes);
            gr->planes = NULL;
            return SSB4D_ENOMEM;
        }
    }
    return SSB4D_OK;
}

void G_group_free(G_group *gr)
{
    free(gr->planes);
    /* Kept in the cache: the next pass (a slider drag, the next fit evaluation) reuses it. */
    ssb4d_mem_free(gr->mem, gr->buf, 1);
    memset(gr, 0, sizeof *gr);
}

ssb4d_status G_group_load(const ssb4d_G *G, size_t ib0, size_t ib1, G_group *gr, ssb4d_err *err)
{
    if (ib1 - ib0 > gr->cap)
        return ssb_fail(err, SSB4D_EINTERNAL, "G group of %zu pixels exceeds its %zu", ib1 - ib0, gr->cap);
    gr->ib0 = ib0;
    gr->ib1 = ib1;
    if (G_resident_f32(G)) {
        for (size_t ib = ib0; ib < ib1; ib++)
            gr->planes[ib - ib0] = G_plane(G, ib);
        return SSB4D_OK;
    }
    int nt = ssb_threads_resolve(G->store.threads);
    size_t n = ib1 - ib0, n_stream = 0;
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    fftwf_complex **dest = malloc((n ? n : 1) * sizeof *dest);
    if (!idx || !dest) {
        free(idx), free(dest);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    for (size_t ib = ib0; ib < ib1; ib++) {
        int64_t p = G->plane_of[ib];
        fftwf_complex *slot = gr->buf + (ib - ib0) * G->plane_stride;
        if (p == G_INACTIVE || p == G_REMOTE)
            gr->planes[ib - ib0] = NULL;
        else if (p >= 0 && G->store.data)
            gr->planes[ib - ib0] = G->store.data + (size_t)p * G->plane_stride;
        else {
            gr->planes[ib - ib0] = slot;
            if (p == G_STREAMED) {
                idx[n_stream] = ib;
                dest[n_stream++] = slot;
            }
        }
    }
    if (G->store.data_h) {
        size_t hp = G->plane_stride * 2;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4)
        for (size_t ib = ib0; ib < ib1; ib++) {
            int64_t p = G->plane_of[ib];
            if (p >= 0)
                G_half_load(G->store.data_h + (size_t)p * hp, G->store.h_exp[p], (float *)(gr->buf + (ib - ib0) * G->plane_stride), hp);
        }
    }
    ssb4d_status st = SSB4D_OK;
    if (n_stream) {
        if (!G->store.src)
            st = ssb_fail(err, SSB4D_EINVAL, "G has streamed planes but no source to rebuild them from");
        else
            st = build_planes(G, G->store.src, idx, n_stream, dest, NULL, G->store.block_bytes, nt, gr->mem, NULL,
                              0.0, 0.0, err);
    }
    free(idx), free(dest);
    return st;
}

ssb4d_status ssb_G_subset(const ssb4d_G *G, const size_t *idx, size_t n, ssb4d_G **out,
                          ssb4d_err *err)
{
    *out = NULL;
    if (n == 0)
        return ssb_fail(err, SSB4D_EINVAL, "a BF subset needs at least one pixel");
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= G->n_bf || (i && idx[i] <= idx[i - 1]))
            return ssb_fail(err, SSB4D_EINVAL, "BF subset indices must be ascending and below %zu", G->n_bf);
    ssb4d_G *V = calloc(1, sizeof *V);
    if (!V)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    *V = *G;
    V->view.is_view = 1;
    V->n_bf = n;
    V->bf_pix = malloc(n * sizeof *V->bf_pix);
    V->plane_of = malloc(n * sizeof *V->plane_of);
    V->totals = malloc(n * sizeof *V->totals);
    V->view.ib = G->store.dev ? malloc(n * sizeof *V->view.ib) : NULL;
    if (!V->bf_pix || !V->plane_of || !V->totals || (G->store.dev && !V->view.ib)) {
        ssb4d_G_free(V);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    double grand = 0;
    V->n_stored = V->store.n_resident = V->n_remote = V->own_lo = V->own_hi = 0;
    for (size_t i = 0; i < n; i++) {
        V->bf_pix[i] = G->bf_pix[idx[i]];
        V->plane_of[i] = G->plane_of[idx[i]];
        V->totals[i] = G->totals[idx[i]];
        if (V->view.ib)
            V->view.ib[i] = G->view.ib ? G->view.ib[idx[i]] : idx[i];
        V->n_stored += V->plane_of[i] != G_INACTIVE;
        V->store.n_resident += V->plane_of[i] >= 0;
        V->n_remote += V->plane_of[i] == G_REMOTE;
        V->own_lo += idx[i] < G->own_lo; /* the view's pixels that lie in G's own range */
        V->own_hi += idx[i] < G->own_hi;
        grand += V->totals[i];
    }
    V->dc = grand / (double)n;
    if (!(V->dc > 0)) {
        ssb4d_G_free(V);
        return ssb_fail(err, SSB4D_EINVAL, "the BF subset has no counts");
    }
    *out = V;
    return SSB4D_OK;
}

size_t ssb4d_G_n_bf(const ssb4d_G *G) { return G->n_bf; }
size_t ssb4d_G_n_stored(const ssb4d_G *G) { return G->n_stored; }
size_t ssb4d_G_bytes(const ssb4d_G *G)
{
    return G->store.n_resident * G->plane_stride * (G->store.data_h ? 2 * sizeof(uint16_t) : sizeof(fftwf_complex));
}
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

size_t ssb4d_G_n_resident(const ssb4d_G *G) { return G->store.n_resident; }
int ssb4d_G_is_half(const ssb4d_G *G) { return G->store.data_h != NULL; }

ssb4d_status ssb4d_G_plane_copy(const ssb4d_G *G, size_t i, float *out, ssb4d_err *err)
{
    if (i >= G->n_bf || !G_stored(G, i))
        return ssb_fail(err, SSB4D_EINVAL, "BF pixel %zu has no stored plane", i);
    size_t used = G->ny * G->nxh;
    const fftwf_complex *p = G_plane(G, i);
    if (p) {
        memcpy(out, p, used * sizeof *p);
        return SSB4D_OK;
    }
    if (G->store.data_h) {
        if (G->plane_of[i] >= 0) {
            G_half_load(G->store.data_h + (size_t)G->plane_of[i] * G->plane_stride * 2, G->store.h_exp[G->plane_of[i]], out, 2 * used);
            return SSB4D_OK;
        }
    }
    /* Streamed: rebuild this one plane into an aligned buffer (the plans need the alignment). */
    fftwf_complex *buf = ssb4d_mem_alloc(G->store.mem, G->plane_stride * sizeof *buf, "G plane copy", err);
    if (!buf)
        return SSB4D_ENOMEM;
    ssb4d_status st = build_planes(G, G->store.src, &i, 1, &buf, NULL, G->store.block_bytes,
                                   ssb_threads_resolve(G->store.threads), G->store.mem, NULL, 0.0, 0.0, err);
    if (!st)
        memcpy(out, buf, used * sizeof *buf);
    ssb4d_mem_free(G->store.mem, buf, 0);
    return st;
}

void ssb4d_G_sha256(const ssb4d_G *G, char hex[65])
{
    if (G->dist && dist_size(G->dist) > 1) { /* the planes are spread over ranks */
        snprintf(hex, 65, "distributed");
        return;
    }
    ssb4d_sha256 *h = ssb_sha256_new();
    size_t used = G->ny * G->nxh;
    if (G->store.data_h) {
        for (size_t i = 0; i < G->n_bf; i++)
            if (G->plane_of[i] >= 0) {
                ssb_sha256_update(h, G->store.data_h + (size_t)G->plane_of[i] * G->plane_stride * 2,
                                  2 * used * sizeof(uint16_t));
                ssb_sha256_update(h, &G->store.h_exp[G->plane_of[i]], 1);
            }
    } else {
        G_group gr;
        ssb4d_err e;
        if (G_group_init(G, G->store.mem, &gr, &e)) {
            ssb_sha256_final_hex(h, hex);
            snprintf(hex, 65, "unavailable");
            return;
        }
        for (size_t ib0 = 0; ib0 < G->n_bf; ib0 += gr.cap) {
            size_t ib1 = ib0 + gr.cap < G->n_bf ? ib0 + gr.cap : G->n_bf;
            if (G_group_load(G, ib0, ib1, &gr, &e)) {
                G_group_free(&gr);
                ssb_sha256_final_hex(h, hex);
                snprintf(hex, 65, "unavailable");
                return;
            }
            for (size_t ib = ib0; ib < ib1; ib++)
                if (gr.planes[ib - ib0])
                    ssb_sha256_update(h, gr.planes[ib - ib0], used * sizeof(fftwf_complex));
        }
        G_group_free(&gr);
    }
    ssb_sha256_update(h, &G->dc, sizeof G->dc);
    ssb_sha256_final_hex(h, hex);
}

void ssb4d_G_blocks_sha256(const ssb4d_G *G, char hex[65])
{
    size_t nb = (G->n_bf + DIST_BLOCK - 1) / DIST_BLOCK, lo = G_lo(G), hi = G_hi(G);
    unsigned char *dig = calloc(nb ? nb : 1, 32);
    G_group gr;
    ssb4d_err e;
    int ok = dig && lo % DIST_BLOCK == 0 && !G_group_init(G, G->store.mem, &gr, &e);
    size_t used = G->ny * G->nxh;
    /* this process's blocks (whole blocks: a full G's own range starts on one) */
    for (size_t ib0 = lo; ok && ib0 < hi; ib0 += gr.cap) {
        size_t ib1 = ib0 + gr.cap < hi ? ib0 + gr.cap : hi;
        if (G_group_load(G, ib0, ib1, &gr, &e)) {
            ok = 0;
            break;
        }
        for (size_t b = ib0 / DIST_BLOCK; b * DIST_BLOCK < ib1; b++) {
            ssb4d_sha256 *h = ssb_sha256_new();
            size_t end = (b + 1) * DIST_BLOCK < ib1 ? (b + 1) * DIST_BLOCK : ib1;
            for (size_t ib = b * DIST_BLOCK; ib < end; ib++)
                if (gr.planes[ib - ib0])
                    ssb_sha256_update(h, gr.planes[ib - ib0], used * sizeof(fftwf_complex));
            char bh[65];
            ssb_sha256_final_hex(h, bh);
            for (int i = 0; i < 32; i++)
                sscanf(bh + 2 * i, "%2hhx", &dig[b * 32 + i]);
        }
    }
    if (dig && lo % DIST_BLOCK == 0)
        G_group_free(&gr);
    if (G->dist) {
        ssb4d_status st = dist_agree(G->dist, ok ? SSB4D_OK : SSB4D_EINTERNAL, &e);
        ok = !st && !dist_allgather_rows(G->dist, dig, 32, lo / DIST_BLOCK, (hi + DIST_BLOCK - 1) / DIST_BLOCK, &e);
    }
    if (!ok) {
        free(dig);
        snprintf(hex, 65, "unavailable");
        return;
    }
    ssb4d_sha256 *h = ssb_sha256_new();
    ssb_sha256_update(h, dig, nb * 32);
    ssb_sha256_update(h, &G->dc, sizeof G->dc);
    ssb_sha256_final_hex(h, hex);
    free(dig);
}
