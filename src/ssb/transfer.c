/* transfer.c — the transfer-corrected object (docs/ssb-math.md, "Image at the truth").
 *
 * SPEC 5.4's object F(q) = (1/N_bf) Σ_k G(q,k)·conj(γ)/|γ| passes a weak phase object through the
 * transfer T(q) = (1/N_bf) Σ_k |γ(q,k)|, which the triple overlap lifts to ~1 at low and middle q
 * and which falls to a few % at 2α0/λ. The transfer-corrected estimator divides it out per bin:
 *     F′(q) = Σ_k Ĉ_k(q) / (Σ_k |γ(q,k)| + ε·N_bf),  F′(0) = dc.
 * Σ_k |γ| depends on the geometry and the aberrations only, never on G, so it is made here on the
 * host, and the division comes after the object's sum: the backend (CPU, CUDA, distributed) makes
 * the object as always, its spectrum is taken back by one forward DFT, divided, and transformed
 * again. No backend carries anything new. */
#include "common/block.h"
#include "common/err.h"
#include "common/fftw_lock.h"
#include "common/parallel.h"
#include "ssb/ssb_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* |γ(q,k)| for BF pixel ib at one frequency vector, double precision. Thin and χ quadratic (C10,
 * C12 only): χ(k∓q) = χ(k) ∓ u + χ(q) gives γ = A(k)e^{iu}(A1 e^{−iχ(q)} − A2 e^{iχ(q)}), so
 * |γ|² = A(k)²(A1² + A2² − 2 A1 A2 cos 2χ(q)) with cos2 = cos 2χ(q) made once per bin. Otherwise
 * γ = w1·P(k−q)P*(k) − w2·P*(k+q)P(k) (SPEC 5.4, 5.6) as ssb_n_at's generic branch makes it. */
static double gamma_abs(const ssb_ctx *c, size_t ib, double qx, double qy, double cos2)
{
    const ssb_phys *p = &c->p;
    const double kx = c->kx[ib], ky = c->ky[ib], Ak = c->Ak[ib];
    if (p->quadratic && !p->thick) {
        double A1 = ssb_aperture(p->lambda, p->alpha0, p->ang[0], p->ang[1], kx - qx, ky - qy);
        double A2 = ssb_aperture(p->lambda, p->alpha0, p->ang[0], p->ang[1], kx + qx, ky + qy);
        if (A1 == 0.0 && A2 == 0.0)
            return 0.0;
        return Ak * sqrt(fmax(A1 * A1 + A2 * A2 - 2.0 * A1 * A2 * cos2, 0.0));
    }
    double A1, A2;
    ssb_c64 P1 = ssb_probe(p, kx - qx, ky - qy, &A1);
    ssb_c64 P2 = ssb_probe(p, kx + qx, ky + qy, &A2);
    if (A1 == 0.0 && A2 == 0.0)
        return 0.0;
    ssb_c64 Pk = c->Pk[ib];
    ssb_c64 t1 = ssb_cmul(P1, ssb_conj(Pk)), t2 = ssb_cmul(ssb_conj(P2), Pk);
    if (p->thick) {
        double k2 = kx * kx + ky * ky, qt = ssb_tilt_phase(p, qx, qy);
        double r1 = -SSB_PI * p->lambda * ((qx - kx) * (qx - kx) + (qy - ky) * (qy - ky) - k2) - qt;
        double r2 = SSB_PI * p->lambda * ((qx + kx) * (qx + kx) + (qy + ky) * (qy + ky) - k2) - qt;
        double w1 = ssb_sinc(r1 * p->t / 2), w2 = ssb_sinc(r2 * p->t / 2);
        t1 = ssb_c64_make(t1.re * w1, t1.im * w1);
        t2 = ssb_c64_make(t2.re * w2, t2.im * w2);
    }
    return hypot(t1.re - t2.re, t1.im - t2.im);
}

/* |γ| at fine bin (i, j), averaged over the Nyquist aliases as n is (docs/ssb-math.md). */
static double gamma_abs_bin(const ssb_ctx *c, size_t ib, size_t i, size_t j, const double *cos2)
{
    int nyq_r = (c->nyf % 2 == 0) && i == c->nyf / 2;
    int nyq_c = (c->nxf % 2 == 0) && j == c->nxf / 2;
    if (!nyq_r && !nyq_c)
        return gamma_abs(c, ib, c->qr[i], c->qc[j], cos2[0]);
    double s = 0;
    int cnt = 0;
    for (int a = 0; a < (nyq_r ? 2 : 1); a++)
        for (int b = 0; b < (nyq_c ? 2 : 1); b++, cnt++)
            s += gamma_abs(c, ib, a ? -c->qr[i] : c->qr[i], b ? -c->qc[j] : c->qc[j], cos2[2 * a + b]);
    return s / cnt;
}

/* cos 2χ(q) at the (up to four) alias vectors of bin (i, j), in gamma_abs_bin's order. */
static void bin_cos2(const ssb_ctx *c, size_t i, size_t j, double cos2[4])
{
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            cos2[2 * a + b] = c->p.quadratic && !c->p.thick
                                  ? cos(2.0 * ssb_chi(&c->p, a ? -c->qr[i] : c->qr[i], b ? -c->qc[j] : c->qc[j]))
                                  : 0.0;
}

/* S(q) = Σ_k |γ(q,k)| over c's BF pixels on the fine grid (nyf × nxf, full plane). Each bin sums
 * the pixels in blocks of SSB_BLOCK in BF order (common/block.h) into double, so the bits depend
 * on neither the thread count nor anything but the geometry and the aberrations. The half plane
 * j <= nxf/2 is summed and the rest mirrored: |γ(−q,k)| = |γ(q,k)| exactly (the same products of
 * negated values). Bins beyond 2(α0 + one pixel's edge)/λ hold no overlap and are left 0. */
static ssb4d_status transfer_sum(const ssb_ctx *c, int nt, ssb4d_mem *mem, double *S, ssb4d_err *err)
{
    const size_t nyf = c->nyf, nxf = c->nxf, ncols = nxf / 2 + 1, n_bf = c->G->n_bf;
    const ssb_phys *p = &c->p;
    const double reach = 2.0 * (p->alpha0 + fmax(p->ang[0], p->ang[1])) / p->lambda;
    double *part = ssb4d_mem_alloc(mem, (size_t)nt * ncols * sizeof *part, "transfer rows", err);
    if (!part)
        return SSB4D_ENOMEM;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (size_t i = 0; i < nyf; i++) {
        double *tot = S + i * nxf, *pt = part + (size_t)omp_get_thread_num() * ncols;
        memset(tot, 0, ncols * sizeof *tot);
        if (ssb4d_mem_poll(mem))
            continue; /* cancelled: the caller drops the sum */
        for (size_t b0 = 0; b0 < n_bf; b0 += SSB_BLOCK) {
            size_t b1 = b0 + SSB_BLOCK < n_bf ? b0 + SSB_BLOCK : n_bf;
            memset(pt, 0, ncols * sizeof *pt);
            for (size_t j = 0; j < ncols; j++) {
                if (hypot(c->qr[i], c->qc[j]) > reach)
                    continue;
                double cos2[4];
                bin_cos2(c, i, j, cos2);
                for (size_t ib = b0; ib < b1; ib++)
                    if (c->Ak[ib] != 0.0)
                        pt[j] += gamma_abs_bin(c, ib, i, j, cos2);
            }
            ssb_block_add(tot, pt, ncols);
        }
    }
    ssb4d_mem_free(mem, part, 0);
    if (ssb4d_mem_cancelled(mem))
        return ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
    for (size_t i = 0; i < nyf; i++)
        for (size_t j = ncols; j < nxf; j++)
            S[i * nxf + j] = S[((nyf - i) % nyf) * nxf + (nxf - j)];
    return SSB4D_OK;
}

ssb4d_status ssb4d_transfer(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                            const ssb4d_thick *thick, int upsample, const ssb4d_ssb_opts *o, ssb4d_mem *mem,
                            double *T, ssb4d_err *err)
{
    if (!G || !g || !ab || !T)
        return ssb_fail(err, SSB4D_EINVAL, "transfer: missing argument");
    ssb4d_ssb_opts dflt;
    if (!o) {
        ssb4d_ssb_opts_default(&dflt);
        o = &dflt;
    }
    ssb_ctx c;
    ssb4d_status st = ssb_ctx_init(&c, G, g, ab, thick, upsample, err);
    if (st)
        return st;
    st = transfer_sum(&c, ssb_threads_resolve(o->threads), mem, T, err);
    const double inv = G->n_bf ? 1.0 / (double)G->n_bf : 0.0;
    for (size_t r = 0; !st && r < c.nyf * c.nxf; r++)
        T[r] *= inv;
    ssb_ctx_free(&c);
    return st;
}

ssb4d_status ssb4d_object_transfer(const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                                   const ssb4d_thick *thick, int upsample, double eps, const ssb4d_ssb_opts *o,
                                   ssb4d_mem *mem, float *object, float *phase, ssb4d_err *err)
{
    if (!G || !g || !ab || (!object && !phase))
        return ssb_fail(err, SSB4D_EINVAL, "transfer-corrected object: missing argument or output");
    if (!(eps > 0) || !(eps <= 1e6))
        return ssb_fail(err, SSB4D_EINVAL, "the transfer's regulariser must be in (0, 1e6] (got %g)", eps);
    ssb4d_ssb_opts dflt;
    if (!o) {
        ssb4d_ssb_opts_default(&dflt);
        o = &dflt;
    }
    /* The object first: on a distributed G every rank takes part in that pass (it checks the
     * geometry and tells the others of a failure) and ends with the whole object; everything
     * after it is local and the same on every rank, so a local failure cannot leave a rank
     * waiting. Without F the pass still runs (into the caller's outputs, then refused). */
    if (upsample != 1 && upsample != 2 && upsample != 3 && upsample != 4 && upsample != 8)
        return ssb_fail(err, SSB4D_EINVAL, "upsampling factor must be 1, 2, 3, 4 or 8 (got %d)", upsample);
    const size_t nyf = (size_t)upsample * G->ny, nxf = (size_t)upsample * G->nx, npix = nyf * nxf;
    cfloat *F = ssb4d_mem_alloc(mem, npix * sizeof *F, "transfer object", err);
    float *into = F ? (float *)F : object;
    ssb4d_status st = ssb4d_object(G, g, ab, thick, upsample, o, mem, into, into ? NULL : phase, err);
    if (!st && !F)
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory (the transfer-corrected object)");
    ssb_ctx c;
    memset(&c, 0, sizeof c);
    if (!st)
        st = ssb_ctx_init(&c, G, g, ab, thick, upsample, err);
    double *S = st ? NULL : ssb4d_mem_alloc(mem, npix * sizeof *S, "transfer sum", err);
    if (!st && !S)
        st = SSB4D_ENOMEM;
    if (!st)
        st = transfer_sum(&c, ssb_threads_resolve(o->threads), mem, S, err);
    if (!st) {
        /* O = IDFT[F]/npix, so the forward DFT of O is F = Σ_k Ĉ_k / N_bf; then F′ = F·N_bf/(S + ε·N_bf). */
        ssb_fftw_lock();
        fftwf_plan pl = fftwf_plan_dft_2d((int)nyf, (int)nxf, (fftwf_complex *)F, (fftwf_complex *)F, FFTW_FORWARD,
                                          FFTW_ESTIMATE);
        ssb_fftw_unlock();
        if (!pl)
            st = ssb_fail(err, SSB4D_EINTERNAL, "FFTW could not plan the transfer's transform");
        else {
            fftwf_execute(pl);
            ssb_fftw_lock();
            fftwf_destroy_plan(pl);
            ssb_fftw_unlock();
            const double nb = (double)G->n_bf;
            for (size_t r = 1; r < npix; r++)
                F[r] = (cfloat)((double complex)F[r] * (nb / (S[r] + eps * nb)));
            F[0] = (cfloat)c.dc;
            st = ssb_object_transform(nyf, nxf, F, object, phase, err);
        }
    }
    ssb4d_mem_free(mem, S, 0);
    ssb4d_mem_free(mem, F, 0);
    ssb_ctx_free(&c);
    return st;
}
