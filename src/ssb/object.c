/* object.c — the object F = mean corrected spectrum, its inverse FFT and the phase of the mean
 * (SPEC 5.4, 5.5). Parallel over output rows; every bin sums the BF pixels in BF order into its
 * own double accumulator, group of BF pixels after group (see G_group), so the bits depend on
 * neither the thread count nor the group size. */
#include "common/err.h"
#include "common/fftw_lock.h"
#include "common/parallel.h"
#include "dist/dist.h"
#include "ssb/dev.h"
#include "ssb/ssb_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- workspace: the object's sizes, and the order ssb4d_object uses them in ---------------- */

object_ws object_ws_sizes(size_t nyf, size_t nxf, size_t n_bf, int nt, int half, int fast)
{
    size_t ncols = half ? nxf / 2 + 1 : nxf;
    size_t per_thread = nxf * 2 * sizeof(cfloat);
    /* per BF pixel: the column phasors and the basis of its row phasors (ssb_pixel_row_basis) */
    size_t ctab = (n_bf * ncols * sizeof(cfloat) + 15) / 16 * 16;
    object_ws w = {.fast = fast,
                   .F = nyf * nxf * sizeof(cfloat),
                   .tabs = ctab + n_bf * ssb_phasor_basis_len(nyf) * sizeof(double complex),
                   .acc = nyf * ncols * sizeof(double complex),
                   .row_bases = ctab,
                   .per_thread = per_thread,
                   .rows = (size_t)nt * per_thread};
    return w;
}

void object_workspace(const object_ws *w, ws_sink *out)
{
    ws_alloc(out, w->F);
    if (w->fast)
        ws_alloc(out, w->tabs);
    ws_alloc(out, w->acc);
    ws_alloc(out, w->rows);
    ws_pass(out, 0);
    ws_free(out, w->acc, 1);
    ws_free(out, w->rows, 1);
    if (w->fast)
        ws_free(out, w->tabs, 0);
    ws_free(out, w->F, 1);
}

/* ---- the spectrum's last steps, shared with the fused release (loss.c) --------------------- */

void ssb_object_fill(size_t nyf, size_t nxf, double dc, const double complex *acc, size_t n_bf, int half, cfloat *F)
{
    size_t ncols = half ? nxf / 2 + 1 : nxf;
    const double inv_nbf = 1.0 / (double)n_bf;
    for (size_t i = 0; i < nyf; i++)
        for (size_t j = 0; j < ncols; j++)
            F[i * nxf + j] = (cfloat)(acc[i * ncols + j] * inv_nbf);
    if (half)
        for (size_t i = 0; i < nyf; i++)
            for (size_t j = ncols; j < nxf; j++)
                F[i * nxf + j] = -conjf(F[((nyf - i) % nyf) * nxf + (nxf - j)]);
    F[0] = (cfloat)dc;
}

ssb4d_status ssb_object_transform(size_t nyf, size_t nxf, cfloat *F, float *object, float *phase, ssb4d_err *err)
{
    size_t npix = nyf * nxf;
    ssb_fftw_lock();
    fftwf_plan p = fftwf_plan_dft_2d((int)nyf, (int)nxf, (fftwf_complex *)F, (fftwf_complex *)F,
                                     FFTW_BACKWARD, FFTW_ESTIMATE);
    ssb_fftw_unlock();
    if (!p)
        return ssb_fail(err, SSB4D_EINTERNAL, "FFTW could not plan the object transform");
    fftwf_execute(p);
    ssb_fftw_lock();
    fftwf_destroy_plan(p);
    ssb_fftw_unlock();
    const float scale = 1.0f / (float)npix;
    for (size_t r = 0; r < npix; r++) {
        cfloat v = F[r] * scale;
        if (object) {
            object[2 * r] = crealf(v);
            object[2 * r + 1] = cimagf(v);
        }
        if (phase)
            phase[r] = atan2f(cimagf(v), crealf(v));
    }
    return SSB4D_OK;
}

/* A distributed G whose pass fails before it starts: the other ranks learn it (dist.h). */
static ssb4d_status seq_fail(const ssb4d_G *G, ssb4d_status st, ssb4d_err *err)
{
    if (G->dist) {
        dist_seq sq;
        dist_seq_begin(G->dist, &sq, NULL, 0, st, err);
    }
    return st;
}

ssb4d_status ssb4d_object(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                          const ssb4d_thick *thick, int upsample, const ssb4d_ssb_opts *o,
                          ssb4d_mem *mem, float *object, float *phase, ssb4d_err *err)
{
    ssb4d_ssb_opts dflt;
    if (!o) {
        ssb4d_ssb_opts_default(&dflt);
        o = &dflt;
    }
    if (ssb_dev_serves(G, o)) /* G's planes are on a device: the sum runs there (dev.h) */
        return ssb_dev_phase_stack(G, g, ab, thick, 1, upsample, mem, NULL, NULL, object, phase, err);
    ssb_ctx c;
    ssb4d_status st = ssb_ctx_init(&c, G, g, ab, thick, upsample, err);
    if (st)
        return seq_fail(G, st, err);
    size_t nyf = c.nyf, nxf = c.nxf;
    /* F(−q) = −conj F(q) on every bin for any χ (docs/ssb-math.md), so only the half plane
     * j <= nxf/2 is summed and the rest is filled by that symmetry. */
    int half = o->path != SSB4D_PATH_COMPLEX;
    size_t ncols = half ? nxf / 2 + 1 : nxf;
    int nt = ssb_threads_resolve(o->threads);
    const object_ws w = object_ws_sizes(nyf, nxf, G->n_bf, nt, half, c.fast);
    cfloat *F = ssb4d_mem_alloc(mem, w.F, "object spectrum", err);
    cfloat *Ctabs = NULL;
    double complex *Rb = NULL;          /* per pixel, the basis of its row phasors */
    const size_t Lr = ssb_phasor_basis_len(nyf);
    if (F && c.fast) {
        Ctabs = ssb4d_mem_alloc(mem, w.tabs, "object phasor tables", err);
        if (Ctabs) {
            Rb = (double complex *)((char *)Ctabs + w.row_bases);
#pragma omp parallel for num_threads(nt) schedule(static)
            for (size_t ib = 0; ib < G->n_bf; ib++) {
                ssb_pixel_phasors(&c, ib, NULL, 0, Ctabs + ib * ncols, ncols);
                ssb_pixel_row_basis(&c, ib, Rb + ib * Lr);
            }
        }
    }
    /* acc: the running sum over BF pixels of every bin, in BF order whatever the grouping;
     * per thread one row and one row of exp(-i chi(q)) (w.rows). */
    size_t per_thread = w.per_thread;
    double complex *acc = (F && (!c.fast || Ctabs))
                              ? ssb4d_mem_calloc(mem, w.acc, "object sum", err)
                              : NULL;
    char *scr = acc ? ssb4d_mem_alloc(mem, w.rows, "object rows", err) : NULL;
    G_group gr = {0};
    st = scr ? G_group_init(G, mem, &gr, err) : SSB4D_ENOMEM;
    if (st) {
        ssb4d_mem_free(mem, scr, 0);
        ssb4d_mem_free(mem, acc, 0);
        ssb4d_mem_free(mem, F, 0);
        ssb4d_mem_free(mem, Ctabs, 0);
        ssb_ctx_free(&c);
        return seq_fail(G, st, err);
    }
    /* A distributed G: the sum passes rank to rank, each adding its own pixels in BF order
     * (dist.h), so every bin is the one-process sum. */
    const size_t lo = G_lo(G), hi = G_hi(G);
    dist_seq sq = {0};
    /* Distributed: the rows in pieces, passed rank to rank as a pipeline (dist_seq_recv/send);
     * a distributed G is resident, so one group. One process: all rows at once. */
    size_t piece = nyf;
    if (G->dist) {
        st = dist_seq_agree(G->dist, &sq, st, err);
        size_t np = 4 * (size_t)dist_size(G->dist); /* the pipeline fills in N − 1 of 4N pieces */
        piece = (nyf + np - 1) / np;
    }
    for (size_t g0 = lo; !sq.skip && (G->dist || !st) && (g0 < hi || (G->dist && g0 == lo)); g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < hi ? g0 + gr.cap : hi;
        if (!st && ssb4d_mem_progress(mem, hi > lo ? (double)(g0 - lo) / (double)(hi - lo) : 1.0))
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
        if (!st && g1 > g0)
            st = G_group_load(G, g0, g1, &gr, err);
        if (st && !G->dist)
            break;
        for (size_t i0 = 0; i0 < nyf; i0 += piece) {
            size_t i1 = i0 + piece < nyf ? i0 + piece : nyf;
            if (G->dist)
                st = dist_seq_recv(G->dist, &sq, (double *)(acc + i0 * ncols), 2 * (i1 - i0) * ncols, st, err);
            if (!st && g1 > g0) {
#pragma omp parallel num_threads(nt)
                {
                    char *mine = scr + (size_t)omp_get_thread_num() * per_thread;
                    cfloat *row = (cfloat *)mine;
                    cfloat *eq = row + nxf;
#pragma omp for schedule(dynamic, 1)
                    for (size_t i = i0; i < i1; i++) {
                        double complex *a = acc + i * ncols;
                        if (ssb4d_mem_poll(mem))
                            continue; /* cancelled: the sum is dropped below */
                        if (c.fast)
                            for (size_t j = 0; j < ncols; j++)
                                eq[j] = ssb_eq(&c, i, j);
                        for (size_t ib = g0; ib < g1; ib++) {
                            const cfloat *plane = (const cfloat *)gr.planes[ib - g0];
                            if (!plane || c.Ak[ib] == 0.0)
                                continue;
                            /* the loss's R (ssb_pixel_phasors): a fused release gives these bits */
                            cfloat R = c.fast ? ssb_phasor_at(Rb + ib * Lr, nyf, i) : 0;
                            ssb_corr_row(&c, ib, plane, i, ncols, eq, R, Ctabs ? Ctabs + ib * ncols : NULL, 0, row);
                            for (size_t j = 0; j < ncols; j++)
                                a[j] += row[j];
                        }
                    }
                }
                if (G->dist && ssb4d_mem_cancelled(mem))
                    st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
            }
            if (G->dist)
                st = dist_seq_send(G->dist, &sq, (const double *)(acc + i0 * ncols), 2 * (i1 - i0) * ncols, st, err);
        }
        if (G->dist)
            break; /* one group: its own planes, resident */
    }
    G_group_free(&gr);
    if (!st && ssb4d_mem_cancelled(mem))
        st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
    if (G->dist)
        st = dist_seq_finish(G->dist, &sq, (double *)acc, 2 * nyf * ncols, st, err);
    if (st) {
        ssb4d_mem_free(mem, scr, 0);
        ssb4d_mem_free(mem, acc, 0);
        ssb4d_mem_free(mem, F, 0);
        ssb4d_mem_free(mem, Ctabs, 0);
        ssb_ctx_free(&c);
        return st;
    }
    ssb_object_fill(nyf, nxf, c.dc, acc, G->n_bf, half, F);
    ssb4d_mem_free(mem, acc, 1);
    ssb4d_mem_free(mem, scr, 1);
    ssb4d_mem_free(mem, Ctabs, 0);
    st = ssb_object_transform(nyf, nxf, F, object, phase, err);
    ssb4d_mem_free(mem, F, st ? 0 : 1);
    ssb_ctx_free(&c);
    return st;
}
