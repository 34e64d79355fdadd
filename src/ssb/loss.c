/* loss.c — per-pixel phases, mean phase and the exact loss (SPEC 5.4), any upsampling factor.
 *
 * Each BF pixel: correct its spectrum, inverse FFT, φ_k. Real-output path (even-m χ): the
 * corrected spectrum is anti-Hermitian, so s_k = c2r(−i·Ĉ_k) and φ_k = atan(s_k/dc); complex path:
 * full-plane inverse FFT and atan2. Sums over BF pixels run in logical blocks of BLOCK pixels in BF
 * order, merged in block order (an OpenMP ordered loop), so the bits do not depend on threads. */
#include "common/err.h"
#include "common/parallel.h"
#include "ssb/ssb_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 64

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

/* The per-pixel phases of n parameter sets at once: every G plane is read once per block and
 * serves all n (a batch of fit candidates shares each read of G). Each set's arithmetic and
 * summation order is exactly that of a batch of one, so loss[i] does not depend on n. */
static ssb4d_status phase_stack(const ssb4d_G *G, const ssb4d_geometry *g,
                                const ssb4d_aberrations *ab, const ssb4d_thick *thick, size_t n,
                                int f, const ssb4d_ssb_opts *o, ssb4d_mem *mem, double *loss,
                                float *mean_phase, ssb4d_err *err)
{
    ssb4d_ssb_opts dflt;
    if (!o) {
        ssb4d_ssb_opts_default(&dflt);
        o = &dflt;
    }
    if (n == 0)
        return SSB4D_OK;
    ssb_ctx *c = calloc(n, sizeof *c);
    cfloat **Eq = calloc(n, sizeof *Eq);
    double **total = calloc(n, sizeof *total);
    double *S2 = calloc(n, sizeof *S2);
    if (!c || !Eq || !total || !S2) {
        free(c), free(Eq), free(total), free(S2);
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    ssb4d_status st = SSB4D_OK;
    size_t n_init = 0;
    for (; n_init < n && !st; n_init++) {
        st = ssb_ctx_init(&c[n_init], G, g, &ab[n_init], thick ? &thick[n_init] : NULL, f, err);
        if (st)
            break;
    }
    /* One path for the whole batch: the real-output path only when every set allows it. */
    int even_all = 1;
    for (size_t j = 0; j < n_init; j++)
        even_all &= c[j].even_only;
    int real = even_all && o->path != SSB4D_PATH_COMPLEX;
    if (!st && o->path == SSB4D_PATH_REAL && !even_all)
        st = ssb4d_fail(err, SSB4D_EINVAL, "the real-output path needs even-m aberrations only");
    size_t nyf = c[0].nyf, nxf = c[0].nxf, npix = nyf * nxf;
    size_t ncols = real ? nxf / 2 + 1 : nxf, nspec = nyf * ncols;
    int nt = ssb4d_threads_resolve(o->threads);
    if ((size_t)nt > (G->n_bf + BLOCK - 1) / BLOCK)
        nt = (int)((G->n_bf + BLOCK - 1) / BLOCK);

    thread_scratch *ts = st ? NULL : calloc((size_t)nt, sizeof *ts);
    if (!st && !ts)
        st = ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    for (size_t j = 0; !st && j < n; j++) {
        total[j] = ssb4d_mem_calloc(mem, npix * sizeof(double), "loss mean-phase sum", err);
        if (!total[j])
            st = SSB4D_ENOMEM;
        else if (c[j].fast) {
            Eq[j] = ssb4d_mem_alloc(mem, nspec * sizeof(cfloat), "loss exp(-i chi(q))", err);
            if (!Eq[j])
                st = SSB4D_ENOMEM;
            else {
                const ssb_ctx *cj = &c[j];
                cfloat *E = Eq[j];
#pragma omp parallel for num_threads(nt) schedule(static)
                for (size_t i = 0; i < nyf; i++)
                    for (size_t q = 0; q < ncols; q++)
                        E[i * ncols + q] = ssb_eq(cj, i, q);
            }
        }
    }
    for (int t = 0; !st && t < nt; t++) {
        ts[t].buf = ssb4d_mem_alloc(mem, nspec * sizeof(cfloat), "loss tile spectrum", err);
        ts[t].real = real ? ssb4d_mem_alloc(mem, npix * sizeof(float), "loss tile plane", err) : NULL;
        ts[t].part = ssb4d_mem_alloc(mem, n * npix * sizeof(double), "loss block partial", err);
        ts[t].s2 = calloc(n, sizeof(double));
        ts[t].R = ssb4d_mem_alloc(mem, (nyf + ncols) * sizeof(cfloat), "loss phasors", err);
        if (!ts[t].buf || (real && !ts[t].real) || !ts[t].part || !ts[t].R || !ts[t].s2)
            st = ts[t].s2 ? SSB4D_ENOMEM : ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
        else
            ts[t].C = ts[t].R + nyf;
    }
    fftwf_plan plan = NULL;
    if (!st) {
        ssb4d_fftw_lock();
        if (real)
            plan = fftwf_plan_dft_c2r_2d((int)nyf, (int)nxf, (fftwf_complex *)ts[0].buf, ts[0].real,
                                         FFTW_ESTIMATE);
        else
            plan = fftwf_plan_dft_2d((int)nyf, (int)nxf, (fftwf_complex *)ts[0].buf,
                                     (fftwf_complex *)ts[0].buf, FFTW_BACKWARD, FFTW_ESTIMATE);
        ssb4d_fftw_unlock();
        if (!plan)
            st = ssb4d_fail(err, SSB4D_EINTERNAL, "FFTW could not plan the inverse transform");
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
    for (size_t g0 = 0; !st && g0 < G->n_bf; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < G->n_bf ? g0 + gr.cap : G->n_bf;
        st = G_group_load(G, g0, g1, &gr, err);
        if (st)
            break;
        size_t b0 = g0 / BLOCK, b1 = (g1 + BLOCK - 1) / BLOCK;
#pragma omp parallel num_threads(nt)
        {
            thread_scratch *s = &ts[omp_get_thread_num()];
#pragma omp for ordered schedule(dynamic, 1)
            for (size_t b = b0; b < b1; b++) {
                memset(s->part, 0, n * npix * sizeof(double));
                memset(s->s2, 0, n * sizeof(double));
                size_t end = (b + 1) * BLOCK < g1 ? (b + 1) * BLOCK : g1;
                for (size_t ib = b * BLOCK; ib < end; ib++) {
                    const cfloat *plane = (const cfloat *)gr.planes[ib - g0];
                    if (!plane)
                        continue; /* φ_k ≡ 0: contributes nothing, still counts in N_bf */
                    for (size_t j = 0; j < n; j++) {
                        const ssb_ctx *cj = &c[j];
                        if (cj->Ak[ib] == 0.0)
                            continue;
                        if (cj->fast)
                            ssb_pixel_phasors(cj, ib, s->R, nyf, s->C, ncols);
                        for (size_t i = 0; i < nyf; i++)
                            ssb_corr_row(cj, ib, plane, i, ncols, Eq[j] ? Eq[j] + i * ncols : NULL,
                                         cj->fast ? s->R[i] : 0, s->C, s->buf + i * ncols);
                        const float dc = (float)cj->dc;
                        double *part = s->part + j * npix;
                        if (real) {
                            for (size_t q = 0; q < nspec; q++) /* −i·Ĉ */
                                s->buf[q] = cimagf(s->buf[q]) - I * crealf(s->buf[q]);
                            s->buf[0] = 0;
                            fftwf_execute_dft_c2r(plan, (fftwf_complex *)s->buf, s->real);
                            const float inv = 1.0f / dc;
                            float *ph = s->real;
                            ssb_phases_real(ph, npix, inv);
                            s->s2[j] += accumulate(part, ph, npix);
                        } else {
                            s->buf[0] = dc;
                            fftwf_execute_dft(plan, (fftwf_complex *)s->buf, (fftwf_complex *)s->buf);
                            float *ph = (float *)s->buf; /* phases written over the consumed spectrum */
                            for (size_t r = 0; r < npix; r++)
                                ph[r] = atan2f(cimagf(s->buf[r]), crealf(s->buf[r]));
                            s->s2[j] += accumulate(part, ph, npix);
                        }
                    }
                }
#pragma omp ordered
                {
                    for (size_t j = 0; j < n; j++) {
                        const double *part = s->part + j * npix;
                        for (size_t r = 0; r < npix; r++)
                            total[j][r] += part[r];
                        S2[j] += s->s2[j];
                    }
                }
            }
        }
    }
    if (have_group)
        G_group_free(&gr);
    if (!st) {
        double nbf = (double)G->n_bf;
        for (size_t j = 0; j < n; j++) {
            double mean2 = 0.0;
            for (size_t r = 0; r < npix; r++) {
                double m = total[j][r] / nbf;
                mean2 += m * m;
                if (mean_phase)
                    mean_phase[j * npix + r] = (float)m;
            }
            if (loss)
                loss[j] = S2[j] / (nbf * (double)npix) - mean2 / (double)npix;
        }
    }
    if (plan) {
        ssb4d_fftw_lock();
        fftwf_destroy_plan(plan);
        ssb4d_fftw_unlock();
    }
    for (int t = 0; ts && t < nt; t++) {
        /* Kept in the cache: the next evaluation reuses the same tiles. */
        ssb4d_mem_free(mem, ts[t].buf, 1);
        ssb4d_mem_free(mem, ts[t].real, 1);
        ssb4d_mem_free(mem, ts[t].part, 1);
        ssb4d_mem_free(mem, ts[t].R, 1);
        free(ts[t].s2);
    }
    free(ts);
    for (size_t j = 0; j < n; j++) {
        ssb4d_mem_free(mem, Eq[j], 1);
        ssb4d_mem_free(mem, total[j], 1);
    }
    for (size_t j = 0; j < n_init; j++)
        ssb_ctx_free(&c[j]);
    free(c), free(Eq), free(total), free(S2);
    return st;
}

ssb4d_status ssb4d_loss(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                        const ssb4d_thick *thick, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                        double *loss, float *mean_phase, ssb4d_err *err)
{
    return phase_stack(G, g, ab, thick, 1, 1, o, mem, loss, mean_phase, err);
}

ssb4d_status ssb4d_mean_phase_upsampled(const ssb4d_G *G, const ssb4d_geometry *g,
                                        const ssb4d_aberrations *ab, const ssb4d_thick *thick,
                                        int upsample, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                                        float *phase, ssb4d_err *err)
{
    return phase_stack(G, g, ab, thick, 1, upsample, o, mem, NULL, phase, err);
}

ssb4d_status ssb4d_loss_batch(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                              const ssb4d_thick *thick, size_t n, const ssb4d_ssb_opts *o,
                              ssb4d_mem *mem, double *loss, ssb4d_err *err)
{
    return phase_stack(G, g, ab, thick, n, 1, o, mem, loss, NULL, err);
}
