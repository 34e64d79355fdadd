/* loss.c — per-pixel phases, mean phase and the exact loss (SPEC 5.4), any upsampling factor.
 *
 * Each BF pixel: correct its spectrum, inverse FFT, φ_k. Real-output path (even-m χ): the
 * corrected spectrum is anti-Hermitian, so s_k = c2r(−i·Ĉ_k) and φ_k = atan(s_k/dc); complex path:
 * full-plane inverse FFT and atan2. Sums over BF pixels run in logical blocks of SSB_BLOCK pixels in BF
 * order, merged in block order (an OpenMP ordered loop), so the bits do not depend on threads. */
#include "common/block.h"
#include "common/err.h"
#include "common/fftw_lock.h"
#include "common/parallel.h"
#include "ssb/backend.h"
#include "ssb/block_pass.h"
#include "ssb/ssb_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>


void ssb4d_ssb_opts_default(ssb4d_ssb_opts *o)
{
    memset(o, 0, sizeof *o);
}

int ssb4d_upsample_auto(const ssb4d_geometry *g)
{
    static const int fs[] = {1, 2, 3, 4, 8};
    double lambda = ssb4d_wavelength_A(g->kv), need = 2.0 * g->semiangle_mrad * 1e-3 / lambda;
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        if (fs[i] / (2.0 * g->scan_step_A[0]) >= need && fs[i] / (2.0 * g->scan_step_A[1]) >= need)
            return fs[i];
    return 8;
}

/* part += ph and Σ ph² in a fixed order: 8 interleaved partial sums, combined in order. */
SSB_HOT static double accumulate(double *restrict part, const float *restrict ph, size_t n)
{
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t r = 0;
    for (; r + 8 <= n; r += 8)
        for (int k = 0; k < 8; k++) {
            double v = ph[r + k];
            part[r + k] += v;
            acc[k] += v * v;
        }
    for (; r < n; r++) {
        double v = ph[r];
        part[r] += v;
        acc[0] += v * v;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Σ ph² with accumulate()'s 8 lanes and combination, so the tiled path's sums are its bits. */
SSB_HOT static double square_sum(const float *restrict ph, size_t n)
{
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t r = 0;
    for (; r + 8 <= n; r += 8)
        for (int k = 0; k < 8; k++) {
            double v = ph[r + k];
            acc[k] += v * v;
        }
    for (; r < n; r++) {
        double v = ph[r];
        acc[0] += v * v;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

SSB_HOT void ssb_phases_real(float *ph, size_t n, float inv_dc)
{
    for (size_t r = 0; r < n; r++)
        ph[r] = ssb_atanf(ph[r] * inv_dc);
}

typedef struct {
    cfloat *buf;    /* corrected spectrum (half or full plane) */
    float *real;    /* c2r output */
    double *part;   /* block partial sums of φ, one plane per parameter set */
    double *s2;     /* block partial Σφ², one per parameter set */
    cfloat *R, *C;  /* phasors */
} thread_scratch;

/* Ĉ_k of BF pixel ib under set c into spec (nyf x ncols); real: −i·Ĉ_k, what the real-output
 * path transforms. */
static void pixel_correct(const ssb_ctx *c, size_t ib, const cfloat *plane, const cfloat *Eqj, thread_scratch *s,
                          size_t ncols, int real, cfloat *spec)
{
    size_t nyf = c->nyf;
    if (c->fast)
        ssb_pixel_phasors(c, ib, s->R, nyf, s->C, ncols);
    for (size_t i = 0; i < nyf; i++)
        ssb_corr_row(c, ib, plane, i, ncols, Eqj ? Eqj + i * ncols : NULL, c->fast ? s->R[i] : 0, s->C, real,
                     spec + i * ncols);
}

/* φ_k from pixel_correct's spectrum (consumed) into dst (npix floats; dst may be spec on the
 * complex path). */
static void spectrum_phases(const ssb_ctx *c, cfloat *spec, int real, fftwf_plan plan, float *dst)
{
    size_t npix = c->nyf * c->nxf;
    const float dc = (float)c->dc;
    if (real) {
        spec[0] = 0;
        fftwf_execute_dft_c2r(plan, (fftwf_complex *)spec, dst);
        ssb_phases_real(dst, npix, 1.0f / dc);
    } else {
        spec[0] = dc;
        fftwf_execute_dft(plan, (fftwf_complex *)spec, (fftwf_complex *)spec);
        for (size_t r = 0; r < npix; r++)
            dst[r] = atan2f(cimagf(spec[r]), crealf(spec[r]));
    }
}

/* φ_k of BF pixel ib under set c into dst (npix floats; dst may be s->buf on the complex path,
 * the phases overwriting the consumed spectrum). */
static void pixel_phases(const ssb_ctx *c, size_t ib, const cfloat *plane, const cfloat *Eqj,
                         thread_scratch *s, int real, fftwf_plan plan, size_t ncols, float *dst)
{
    pixel_correct(c, ib, plane, Eqj, s, ncols, real, s->buf);
    spectrum_phases(c, s->buf, real, plan, dst);
}

/* The fused release (ssb4d_object_loss): the tile's spectra, kept for the object's sum before
 * the loss's transform consumes them, and that sum. */
typedef struct {
    cfloat *spec;          /* tile spectra, slot floats apart */
    size_t slot;           /* cfloats per spectrum (release_slot) */
    double complex *acc;   /* the object's running sum, nyf x ncols, in BF order (object.c's) */
} fused;

/* The tiled layout (o->loss_tile = T): T pixels' phase planes are computed at once (threads over
 * (pixel, set) pairs), then added into the current block's partial sums in BF order, parallel
 * over output pixels; at every block boundary the partial goes into the total, as the per-thread
 * layout's ordered merge does. The same operations in the same order: the same bits. */
typedef struct {
    size_t tile, slot;        /* pixels in flight, floats per phase plane (64-byte multiple) */
    float *planes;            /* tile * n planes */
    double *part;             /* n planes: the current block's partial sums */
    double *s2pix, *s2blk;    /* per (pixel, set) Σφ²; per set, the block's */
    unsigned char *valid;     /* per (pixel, set): has a phase plane */
    size_t next_block;        /* the next block boundary (BF index) */
} tiled;

static void tiled_flush(tiled *t, size_t n, size_t npix, double **total, double *S2, int nt)
{
    for (size_t j = 0; j < n; j++) {
        double *part = t->part + j * npix, *tot = total[j];
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t r = 0; r < npix; r++) {
            tot[r] += part[r];
            part[r] = 0.0;
        }
        S2[j] += t->s2blk[j];
        t->s2blk[j] = 0.0;
    }
}

/* fu (n = 1, the real path): the object's sum too, from the same spectra. */
static ssb4d_status tiled_pass(const ssb4d_G *G, const ssb_ctx *c, size_t n, cfloat **Eq, thread_scratch *ts,
                               int nt, int real, fftwf_plan plan, size_t ncols, const G_group *gr, size_t g0,
                               size_t g1, tiled *t, double **total, double *S2, const fused *fu, ssb4d_mem *mem)
{
    size_t npix = c[0].nyf * c[0].nxf;
    for (size_t t0 = g0; t0 < g1; t0 += t->tile) {
        size_t t1 = t0 + t->tile < g1 ? t0 + t->tile : g1, m = (t1 - t0) * n;
        if (!fu) {
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
            for (size_t k = 0; k < m; k++) {
                size_t ib = t0 + k / n, j = k % n;
                const cfloat *plane = (const cfloat *)gr->planes[ib - g0];
                t->valid[k] = plane && c[j].Ak[ib] != 0.0 && !ssb4d_mem_poll(mem);
                if (!t->valid[k])
                    continue;
                float *dst = t->planes + k * t->slot;
                pixel_phases(&c[j], ib, plane, Eq[j], &ts[omp_get_thread_num()], real, plan, ncols, dst);
                t->s2pix[k] = square_sum(dst, npix);
            }
        } else {
            /* Each pixel's spectrum, kept for the object, and its phases from a copy (the inverse
             * FFT consumes its input); then the object's sum, every bin over the tile's pixels in
             * BF order (object.c's order and arithmetic: the same bits). */
            size_t nyf = c[0].nyf, nspec = nyf * ncols;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
            for (size_t k = 0; k < m; k++) {
                size_t ib = t0 + k;
                const cfloat *plane = (const cfloat *)gr->planes[ib - g0];
                t->valid[k] = plane && c[0].Ak[ib] != 0.0 && !ssb4d_mem_poll(mem);
                if (!t->valid[k])
                    continue;
                thread_scratch *me = &ts[omp_get_thread_num()];
                cfloat *spec = fu->spec + k * fu->slot;
                float *dst = t->planes + k * t->slot;
                pixel_correct(&c[0], ib, plane, Eq[0], me, ncols, 1, spec);
                memcpy(me->buf, spec, nspec * sizeof *spec);
                spectrum_phases(&c[0], me->buf, real, plan, dst);
                t->s2pix[k] = square_sum(dst, npix);
            }
#pragma omp parallel for num_threads(nt) schedule(static)
            for (size_t i = 0; i < nyf; i++) {
                double *a = (double *)(fu->acc + i * ncols);
                for (size_t k = 0; k < m; k++) {
                    if (!t->valid[k])
                        continue;
                    /* the spectra are −i·Ĉ: Ĉ = (−im, re), exactly */
                    const float *row = (const float *)(fu->spec + k * fu->slot + i * ncols);
                    for (size_t j = 0; j < ncols; j++) {
                        a[2 * j] += (double)-row[2 * j + 1];
                        a[2 * j + 1] += (double)row[2 * j];
                    }
                }
            }
        }
        /* Add the tile into the block partials in BF order; flush at each block boundary. */
        size_t ib = t0;
        while (ib < t1) {
            size_t end = t->next_block < t1 ? t->next_block : t1;
            for (size_t j = 0; j < n; j++) {
                double *part = t->part + j * npix;
#pragma omp parallel for num_threads(nt) schedule(static)
                for (size_t r0 = 0; r0 < npix; r0 += 4096) {
                    size_t r1 = r0 + 4096 < npix ? r0 + 4096 : npix;
                    for (size_t q = ib; q < end; q++) {
                        size_t k = (q - t0) * n + j;
                        if (!t->valid[k])
                            continue;
                        const float *ph = t->planes + k * t->slot;
                        for (size_t r = r0; r < r1; r++)
                            part[r] += ph[r];
                    }
                }
                for (size_t q = ib; q < end; q++) {
                    size_t k = (q - t0) * n + j;
                    if (t->valid[k])
                        t->s2blk[j] += t->s2pix[k];
                }
            }
            ib = end;
            if (ib == t->next_block) {
                tiled_flush(t, n, npix, total, S2, nt);
                t->next_block += SSB_BLOCK;
            }
        }
    }
    (void)G;
    return SSB4D_OK;
}

/* ---- the stack: n parameter sets' phases over all BF pixels -------------------------------- */

/* What a pass over G holds for n parameter sets: their contexts and exp(−iχ(q)) tables, the
 * running sums (Σφ per pixel, Σφ²), the per-thread scratch and the inverse FFT's plan. */
typedef struct {
    size_t n, n_init;           /* sets; contexts made */
    ssb_ctx *c;
    cfloat **Eq;
    double **total, *S2;
    int real, nt, tiles;
    size_t nyf, nxf, npix, ncols, nspec;
    thread_scratch *ts;
    tiled tl;
    fftwf_plan plan;
    dist_blocks bl;             /* the pass's blocks; a distributed G: the partials this rank keeps */
} stack;

/* ---- workspace: phase_stack's sizes, and the order stack_init and stack_free use them in ---- */

loss_ws loss_ws_sizes(size_t nyf, size_t nxf, size_t n_bf, size_t n, int nt, int real, int fast, size_t loss_tile)
{
    loss_ws w;
    memset(&w, 0, sizeof w);
    size_t npix = nyf * nxf, ncols = real ? nxf / 2 + 1 : nxf, nspec = nyf * ncols;
    size_t nblocks = ssb_block_count(n_bf);
    w.n = n, w.real = real, w.fast = fast;
    w.nt = (size_t)nt > nblocks ? nblocks : (size_t)nt;
    w.tiled = loss_tile > 0;
    w.tile = w.tiled ? (loss_tile < n_bf ? loss_tile : n_bf) : 0;
    w.total = npix * sizeof(double);
    w.eq = nspec * sizeof(cfloat);
    w.spec = nspec * sizeof(cfloat);
    w.plane = real && !w.tiled ? npix * sizeof(float) : 0;
    w.part = !w.tiled ? n * npix * sizeof(double) : 0;
    w.phasors = (nyf + ncols) * sizeof(cfloat);
    if (w.tiled) {
        size_t slot = (npix + 15) / 16 * 16; /* every plane 64-byte aligned, as the plan's output was */
        w.tile_planes = w.tile * n * slot * sizeof(float);
        w.tile_part = n * npix * sizeof(double);
    }
    return w;
}

static void loss_ws_alloc(const loss_ws *w, ws_sink *out)
{
    for (size_t j = 0; j < w->n; j++) {
        ws_alloc(out, w->total);
        if (w->fast)
            ws_alloc(out, w->eq);
    }
    for (size_t t = 0; t < w->nt; t++) {
        ws_alloc(out, w->spec);
        if (!w->tiled) {
            if (w->real)
                ws_alloc(out, w->plane);
            ws_alloc(out, w->part);
        }
        ws_alloc(out, w->phasors);
    }
    if (w->tiled) {
        ws_alloc(out, w->tile_planes);
        ws_alloc(out, w->tile_part);
    }
}

static void loss_ws_free(const loss_ws *w, ws_sink *out)
{
    if (w->tiled) {
        ws_free(out, w->tile_part, 1);
        ws_free(out, w->tile_planes, 1);
    }
    for (size_t t = 0; t < w->nt; t++) {
        ws_free(out, w->spec, 1);
        if (!w->tiled) {
            if (w->real)
                ws_free(out, w->plane, 1);
            ws_free(out, w->part, 1);
        }
        ws_free(out, w->phasors, 1);
    }
    for (size_t j = 0; j < w->n; j++) {
        if (w->fast)
            ws_free(out, w->eq, 1);
        ws_free(out, w->total, 1);
    }
}

void loss_workspace(const loss_ws *w, ws_sink *out)
{
    loss_ws_alloc(w, out);
    ws_pass(out, 0);
    loss_ws_free(w, out);
}

/* cfloats between the fused release's tile spectra: whole cache lines (the inverse FFT reads a
 * thread's copy, so FFTW's alignment does not depend on it). */
static size_t release_slot(size_t nspec) { return (nspec + 7) / 8 * 8; }

/* ssb4d_object_loss on the real path (phase_stack with an object): the tiled loss, the tile's
 * spectra and the object's sum; after the pass the object's spectrum replaces the loss's buffers. */
void release_workspace(size_t nyf, size_t nxf, size_t n_bf, int nt, ws_sink *out)
{
    const loss_ws w = loss_ws_sizes(nyf, nxf, n_bf, 1, nt, 1, 1, SSB4D_RELEASE_TILE);
    size_t nspec = nyf * (nxf / 2 + 1), spectra = w.tile * release_slot(nspec) * sizeof(cfloat);
    size_t acc = nspec * sizeof(double complex), F = nyf * nxf * sizeof(cfloat);
    loss_ws_alloc(&w, out);
    ws_alloc(out, spectra);
    ws_alloc(out, acc);
    ws_pass(out, 0);
    ws_free(out, spectra, 1);
    loss_ws_free(&w, out);
    ws_alloc(out, F);
    ws_free(out, acc, 1);
    ws_free(out, F, 1);
}

/* The allocations come in loss_workspace's order, at loss_ws_sizes' sizes. */
static ssb4d_status stack_init(stack *k, const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                               const ssb4d_thick *thick, size_t n, int f, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                               ssb4d_err *err)
{
    memset(k, 0, sizeof *k);
    k->n = n;
    k->c = calloc(n, sizeof *k->c);
    k->Eq = calloc(n, sizeof *k->Eq);
    k->total = calloc(n, sizeof *k->total);
    k->S2 = calloc(n, sizeof *k->S2);
    if (!k->c || !k->Eq || !k->total || !k->S2)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = SSB4D_OK;
    for (; k->n_init < n && !st; k->n_init++) {
        st = ssb_ctx_init(&k->c[k->n_init], G, g, &ab[k->n_init], thick ? &thick[k->n_init] : NULL, f, err);
        if (st)
            break;
    }
    if (st)
        return st;
    /* SPEC 5.4's γ = P(k−q)P*(k) − P*(k+q)P(k) satisfies γ(−q,k) = −conj γ(q,k) for any χ and
     * the centrosymmetric aperture (thick weights too), so the real-output path holds for every
     * parameter set; the complex path is kept for checks (docs/ssb-math.md). */
    k->real = o->path != SSB4D_PATH_COMPLEX;
    k->nyf = k->c[0].nyf, k->nxf = k->c[0].nxf, k->npix = k->nyf * k->nxf;
    k->ncols = k->real ? k->nxf / 2 + 1 : k->nxf, k->nspec = k->nyf * k->ncols;
    size_t nyf = k->nyf, npix = k->npix, ncols = k->ncols;
    const loss_ws w = loss_ws_sizes(nyf, k->nxf, G->n_bf, n, ssb_threads_resolve(o->threads), k->real, 1,
                                    o->loss_tile > 0 ? (size_t)o->loss_tile : 0);
    int nt = (int)w.nt;
    k->nt = nt;
    k->ts = calloc((size_t)nt, sizeof *k->ts);
    if (!k->ts)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    for (size_t j = 0; !st && j < n; j++) {
        k->total[j] = ssb4d_mem_calloc(mem, w.total, "loss mean-phase sum", err);
        if (!k->total[j])
            st = SSB4D_ENOMEM;
        else if (k->c[j].fast) {
            k->Eq[j] = ssb4d_mem_alloc(mem, w.eq, "loss exp(-i chi(q))", err);
            if (!k->Eq[j])
                st = SSB4D_ENOMEM;
            else {
                const ssb_ctx *cj = &k->c[j];
                cfloat *E = k->Eq[j];
#pragma omp parallel for num_threads(nt) schedule(static)
                for (size_t i = 0; i < nyf; i++)
                    for (size_t q = 0; q < ncols; q++)
                        E[i * ncols + q] = ssb_eq(cj, i, q);
            }
        }
    }
    k->tiles = w.tiled;
    int real = k->real, tiles = k->tiles;
    thread_scratch *ts = k->ts;
    for (int t = 0; !st && t < nt; t++) {
        ts[t].buf = ssb4d_mem_alloc(mem, w.spec, "loss tile spectrum", err);
        ts[t].real = real && !tiles ? ssb4d_mem_alloc(mem, w.plane, "loss tile plane", err) : NULL;
        ts[t].part = !tiles ? ssb4d_mem_alloc(mem, w.part, "loss block partial", err) : NULL;
        ts[t].s2 = calloc(n, sizeof(double));
        ts[t].R = ssb4d_mem_alloc(mem, w.phasors, "loss phasors", err);
        if (!ts[t].buf || (real && !tiles && !ts[t].real) || (!tiles && !ts[t].part) || !ts[t].R || !ts[t].s2)
            st = ts[t].s2 ? SSB4D_ENOMEM : ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        else
            ts[t].C = ts[t].R + nyf;
    }
    tiled *tl = &k->tl;
    if (!st && tiles) {
        tl->tile = w.tile;
        tl->slot = (npix + 15) / 16 * 16; /* every plane 64-byte aligned, as the plan's output was */
        tl->planes = ssb4d_mem_alloc(mem, w.tile_planes, "loss tile planes", err);
        tl->part = tl->planes ? ssb4d_mem_calloc(mem, w.tile_part, "loss block partial", err) : NULL;
        tl->s2pix = calloc(tl->tile * n, sizeof(double));
        tl->s2blk = calloc(n, sizeof(double));
        tl->valid = calloc(tl->tile * n, 1);
        tl->next_block = SSB_BLOCK;
        if (!tl->planes || !tl->part)
            st = SSB4D_ENOMEM;
        else if (!tl->s2pix || !tl->s2blk || !tl->valid)
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    if (!st) {
        ssb_fftw_lock();
        if (real)
            k->plan = fftwf_plan_dft_c2r_2d((int)nyf, (int)k->nxf, (fftwf_complex *)ts[0].buf,
                                            tiles ? tl->planes : ts[0].real, FFTW_ESTIMATE);
        else
            k->plan = fftwf_plan_dft_2d((int)nyf, (int)k->nxf, (fftwf_complex *)ts[0].buf,
                                        (fftwf_complex *)ts[0].buf, FFTW_BACKWARD, FFTW_ESTIMATE);
        ssb_fftw_unlock();
        if (!k->plan)
            st = ssb_fail(err, SSB4D_EINTERNAL, "FFTW could not plan the inverse transform");
    }
    return st;
}

/* Pixel ib's phases under every set, added into a block's partials part (n planes) and s2 (n). */
static void pixel_sums(const stack *k, size_t ib, const cfloat *plane, thread_scratch *s, double *part, double *s2)
{
    for (size_t j = 0; j < k->n; j++) {
        const ssb_ctx *cj = &k->c[j];
        if (cj->Ak[ib] == 0.0)
            continue;
        float *ph = k->real ? s->real : (float *)s->buf;
        pixel_phases(cj, ib, plane, k->Eq[j], s, k->real, k->plan, k->ncols, ph);
#ifdef SSB4D_BENCH_SLOWDOWN
        pixel_phases(cj, ib, plane, k->Eq[j], s, k->real, k->plan, k->ncols, ph); /* CMakeLists.txt */
#endif
        s2[j] += accumulate(part + j * k->npix, ph, k->npix);
    }
}

/* ssb_block_pass's callbacks for the per-thread layout (block_pass.h). */
typedef struct {
    stack *k;
    const G_group *gr;
    size_t g0;
    ssb4d_mem *mem;
} stack_blocks;

static void stack_sum(void *user, int t, size_t a, size_t b)
{
    const stack_blocks *u = user;
    stack *k = u->k;
    thread_scratch *s = &k->ts[t];
    memset(s->part, 0, k->n * k->npix * sizeof(double));
    memset(s->s2, 0, k->n * sizeof(double));
    for (size_t ib = a; ib < b; ib++) {
        const cfloat *plane = (const cfloat *)u->gr->planes[ib - u->g0];
        if (!plane || ssb4d_mem_poll(u->mem))
            continue; /* φ_k ≡ 0: contributes nothing, still counts in N_bf;
                         cancelled: the sums are dropped by the caller */
        pixel_sums(k, ib, plane, s, s->part, s->s2);
    }
}

static void stack_add(void *user, int t)
{
    stack *k = ((const stack_blocks *)user)->k;
    const thread_scratch *s = &k->ts[t];
    for (size_t j = 0; j < k->n; j++) {
        ssb_block_add(k->total[j], s->part + j * k->npix, k->npix);
        k->S2[j] += s->s2[j];
    }
}

static size_t stack_parts(void *user, int t, const double *parts[2], size_t lens[2])
{
    const stack *k = ((const stack_blocks *)user)->k;
    parts[0] = k->ts[t].part, lens[0] = k->n * k->npix;
    parts[1] = k->ts[t].s2, lens[1] = k->n;
    return 2;
}

/* One group of BF pixels [g0, g1) (whole blocks) in the per-thread layout: each thread sums its
 * blocks, and the blocks' partials go into the totals in block order. */
static void stack_group(stack *k, const G_group *gr, size_t g0, size_t g1, ssb4d_mem *mem)
{
    stack_blocks u = {k, gr, g0, mem};
    const ssb_block_fns f = {&u, k->nt, stack_sum, stack_add, stack_parts};
    ssb_block_pass(&k->bl, g0, g1, &f);
}

/* One pixel's contribution, as stack_group adds it into a block partial started at zero
 * (dist_pix_fn): thread 0's scratch, after the pass. A distributed G is resident in float32. */
typedef struct {
    stack *k;
    const ssb4d_G *G;
} loss_pix_user;

static ssb4d_status loss_pix(void *user, size_t ib, double *out, ssb4d_err *err)
{
    (void)err;
    const loss_pix_user *u = user;
    const stack *k = u->k;
    const cfloat *plane = (const cfloat *)G_plane(u->G, ib);
    if (plane)
        pixel_sums(k, ib, plane, &k->ts[0], out, out + k->n * k->npix);
    return SSB4D_OK;
}

/* A distributed G: the totals of every rank's partials, in block order (dist.h), on every rank.
 * Reached by every rank whatever st is (a failure anywhere fails all). */
static ssb4d_status stack_reduce(stack *k, ssb4d_status st, ssb4d_mem *mem, ssb4d_err *err)
{
    const size_t n = k->n, npix = k->npix, len = n * npix + n;
    double *T = st ? NULL : ssb4d_mem_alloc(mem, len * sizeof *T, "reduction totals", err);
    if (!st && !T)
        st = SSB4D_ENOMEM;
    for (size_t j = 0; T && j < n; j++) {
        memcpy(T + j * npix, k->total[j], npix * sizeof *T);
        T[n * npix + j] = k->S2[j];
    }
    st = dist_blocks_end(&k->bl, st, T, err);
    for (size_t j = 0; !st && j < n; j++) {
        memcpy(k->total[j], T + j * npix, npix * sizeof *T);
        k->S2[j] = T[n * npix + j];
    }
    ssb4d_mem_free(mem, T, 0);
    return st;
}

/* loss = Σφ²/(N·P) − Σ_r mean(φ)²/P per set, and the mean phase. */
static void stack_finish(const stack *k, size_t n_bf, double *loss, float *mean_phase)
{
    double nbf = (double)n_bf;
    for (size_t j = 0; j < k->n; j++) {
        double mean2 = 0.0;
        for (size_t r = 0; r < k->npix; r++) {
            double m = k->total[j][r] / nbf;
            mean2 += m * m;
            if (mean_phase)
                mean_phase[j * k->npix + r] = (float)m;
        }
        if (loss)
            loss[j] = k->S2[j] / (nbf * (double)k->npix) - mean2 / (double)k->npix;
    }
}

static void stack_free(stack *k, ssb4d_mem *mem)
{
    if (k->tiles) {
        ssb4d_mem_free(mem, k->tl.part, 1);
        ssb4d_mem_free(mem, k->tl.planes, 1);
        free(k->tl.s2pix), free(k->tl.s2blk), free(k->tl.valid);
    }
    if (k->plan) {
        ssb_fftw_lock();
        fftwf_destroy_plan(k->plan);
        ssb_fftw_unlock();
    }
    dist_blocks_free(&k->bl);
    for (int t = 0; k->ts && t < k->nt; t++) {
        /* Kept in the cache: the next evaluation reuses the same tiles. */
        ssb4d_mem_free(mem, k->ts[t].buf, 1);
        ssb4d_mem_free(mem, k->ts[t].real, 1);
        ssb4d_mem_free(mem, k->ts[t].part, 1);
        ssb4d_mem_free(mem, k->ts[t].R, 1);
        free(k->ts[t].s2);
    }
    free(k->ts);
    for (size_t j = 0; k->Eq && k->total && j < k->n; j++) {
        ssb4d_mem_free(mem, k->Eq[j], 1);
        ssb4d_mem_free(mem, k->total[j], 1);
    }
    for (size_t j = 0; k->c && j < k->n_init; j++)
        ssb_ctx_free(&k->c[j]);
    free(k->c), free(k->Eq), free(k->total), free(k->S2);
}

/* The CPU backend's phase stack (backend.h): the per-pixel phases of n parameter sets at once;
 * every G plane is read once per block and serves all n (a batch of fit candidates shares each
 * read of G). Each set's arithmetic and summation order is exactly that of a batch of one, so
 * loss[i] does not depend on n. An object alone is object.c's sum. */
ssb4d_status ssb_cpu_phases(const ssb4d_G *G, const ssb_phase_job *j, ssb4d_mem *mem, ssb4d_err *err)
{
    if ((j->object || j->phase) && !j->loss && !j->mean_phase)
        return ssb_cpu_object(G, j, mem, err);
    const ssb4d_geometry *g = j->g;
    const ssb4d_aberrations *ab = j->ab;
    const ssb4d_thick *thick = j->thick;
    const ssb4d_ssb_opts *o = j->o;
    const size_t n = j->n;
    const int f = j->f;
    double *loss = j->loss;
    float *mean_phase = j->mean_phase, *object = j->object, *phase = j->phase;
    /* The fused release (object or phase given; n = 1, f = 1, the real path): tiled, and the
     * tile's spectra kept for the object's sum (release_workspace's order). */
    const int fusing = object || phase;
    ssb4d_ssb_opts of = *o;
    if (fusing && of.loss_tile <= 0)
        of.loss_tile = SSB4D_RELEASE_TILE;
    if (G->dist) /* a distributed pass keeps whole blocks' partials: the per-thread layout */
        of.loss_tile = 0;
    stack k;
    ssb4d_status st = stack_init(&k, G, g, ab, thick, n, f, &of, mem, err);
    const size_t lo = G_lo(G), hi = G_hi(G);
    loss_pix_user pu = {&k, G};
    st = G_blocks_begin(&k.bl, st, G, n * k.npix + n, loss_pix, &pu, mem, err);
    fused fb = {0}, *fu = NULL;
    if (!st && fusing) {
        fb.slot = release_slot(k.nspec);
        fb.spec = ssb4d_mem_alloc(mem, k.tl.tile * fb.slot * sizeof(cfloat), "release tile spectra", err);
        fb.acc = fb.spec ? ssb4d_mem_calloc(mem, k.nspec * sizeof(double complex), "object sum", err) : NULL;
        st = fb.acc ? SSB4D_OK : SSB4D_ENOMEM;
        fu = &fb;
    }
    /* Groups of BF pixels whose float32 planes are at hand (all of G when it is resident in
     * float32; else converted from half or rebuilt from the source). A group spans whole blocks,
     * so the block order of the sums, and with it the bits, is the same for every group size. */
    G_group gr = {0};
    int have_group = 0;
    if (!st) {
        st = G_group_init(G, mem, &gr, err);
        have_group = !st;
    }
    for (size_t g0 = lo; !st && g0 < hi; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < hi ? g0 + gr.cap : hi;
        if (ssb4d_mem_progress(mem, (double)(g0 - lo) / (double)(hi - lo))) {
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
            break;
        }
        st = G_group_load(G, g0, g1, &gr, err);
        if (st)
            break;
        if (k.tiles)
            st = tiled_pass(G, k.c, n, k.Eq, k.ts, k.nt, k.real, k.plan, k.ncols, &gr, g0, g1, &k.tl, k.total, k.S2,
                            fu, mem);
        else
            stack_group(&k, &gr, g0, g1, mem);
    }
    if (!st && ssb4d_mem_cancelled(mem)) /* planes were skipped: the sums are incomplete */
        st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
    if (have_group)
        G_group_free(&gr);
    if (dist_blocks_chained(&k.bl))
        st = stack_reduce(&k, st, mem, err);
    if (!st && k.tiles && k.tl.next_block - SSB_BLOCK < G->n_bf)
        tiled_flush(&k.tl, n, k.npix, k.total, k.S2, k.nt); /* the last, partial block */
    if (!st)
        stack_finish(&k, G->n_bf, loss, mean_phase);
    if (fusing)
        ssb4d_mem_free(mem, fb.spec, 1);
    /* the object's finish needs only the grid and the DC of set 0, after the stack is gone */
    const size_t nyf = k.nyf, nxf = k.nxf;
    const double dc = k.n_init ? k.c[0].dc : 0.0;
    stack_free(&k, mem);
    if (fusing && !st) {
        cfloat *F = ssb4d_mem_alloc(mem, nyf * nxf * sizeof(cfloat), "object spectrum", err);
        if (!F)
            st = SSB4D_ENOMEM;
        else {
            ssb_object_fill(nyf, nxf, dc, fb.acc, G->n_bf, 1, F);
            ssb4d_mem_free(mem, fb.acc, 1);
            fb.acc = NULL;
            st = ssb_object_transform(nyf, nxf, F, object, phase, err);
            ssb4d_mem_free(mem, F, st ? 0 : 1);
        }
    }
    if (fusing)
        ssb4d_mem_free(mem, fb.acc, 0);
    return st;
}

/* The stage functions: the job, run by the backend that holds G's planes (backend.h). */
static ssb4d_status phase_stack(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                                const ssb4d_thick *thick, size_t n, int f, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                                double *loss, float *mean_phase, float *object, float *phase, ssb4d_err *err)
{
    ssb4d_ssb_opts dflt;
    if (!o) {
        ssb4d_ssb_opts_default(&dflt);
        o = &dflt;
    }
    if (n == 0)
        return SSB4D_OK;
    const ssb_phase_job j = {.g = g, .ab = ab, .thick = thick, .n = n, .f = f, .o = o, .loss = loss,
                             .mean_phase = mean_phase, .object = object, .phase = phase};
    return ssb_run_phases(G, &j, mem, err);
}

ssb4d_status ssb4d_loss(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                        const ssb4d_thick *thick, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                        double *loss, float *mean_phase, ssb4d_err *err)
{
    return phase_stack(G, g, ab, thick, 1, 1, o, mem, loss, mean_phase, NULL, NULL, err);
}

ssb4d_status ssb4d_mean_phase_upsampled(const ssb4d_G *G, const ssb4d_geometry *g,
                                        const ssb4d_aberrations *ab, const ssb4d_thick *thick,
                                        int upsample, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                                        float *phase, ssb4d_err *err)
{
    return phase_stack(G, g, ab, thick, 1, upsample, o, mem, NULL, phase, NULL, NULL, err);
}

ssb4d_status ssb4d_loss_batch(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                              const ssb4d_thick *thick, size_t n, const ssb4d_ssb_opts *o,
                              ssb4d_mem *mem, double *loss, ssb4d_err *err)
{
    return phase_stack(G, g, ab, thick, n, 1, o, mem, loss, NULL, NULL, NULL, err);
}

/* One pass over G for a release: the object at native sampling (ssb4d_object's bits) and the
 * exact loss (ssb4d_loss's bits). The complex path takes the two passes. */
ssb4d_status ssb4d_object_loss(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                               const ssb4d_thick *thick, const ssb4d_ssb_opts *o, ssb4d_mem *mem, float *object,
                               float *phase, double *loss, ssb4d_err *err)
{
    if (!loss || (!object && !phase))
        return ssb_fail(err, SSB4D_EINVAL, "object_loss: missing output");
    if ((o && o->path == SSB4D_PATH_COMPLEX) || G->dist) { /* distributed: the two reductions */
        ssb4d_status st = ssb4d_object(G, g, ab, thick, 1, o, mem, object, phase, err);
        return st ? st : ssb4d_loss(G, g, ab, thick, o, mem, loss, NULL, err);
    }
    return phase_stack(G, g, ab, thick, 1, 1, o, mem, loss, NULL, object, phase, err);
}
