/* kernels.cu — the SSB passes on an NVIDIA GPU (kernels.h says what each does); a bin's
 * correction is correct.cuh's, shared with the fused loss (loss_fused.cu). */
#include "correct.cuh"

/* FAST: the fast kernel on every bin but the Nyquist row and column (k_nyquist writes those);
 * else the generic kernel on every bin. One thread per bin for CORRECT_PIX pixels of the chunk:
 * the bin's own values (its q, the fast kernel's e^{−iχ(q)}) are worked out once for them, and a
 * 32 × 8 block wastes less of an odd column count (nxf/2 + 1) than a row of 128 (issue 31: the
 * exact loss 39.2 → 37.5 ms at 512² on an H100, the same bits as one thread per bin and pixel). */
#define CORRECT_PIX 8
template <bool FAST>
__global__ void k_correct_pix(const float2 *__restrict__ planes, cu_grid g, cu_set s, cu_pixels px, size_t p0,
                              size_t np, float2 *__restrict__ spec)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
    if (j >= g.ncols || i >= g.nyf)
        return;
    const int nyq_r = (g.nyf % 2 == 0) ? g.nyf / 2 : -1, nyq_c = (g.nxf % 2 == 0) ? g.nxf / 2 : -1;
    if (FAST && (i == nyq_r || j == nyq_c))
        return; /* k_nyquist's */
    const size_t nb = (size_t)g.nyf * g.ncols, t = (size_t)i * g.ncols + j;
    const double qx = px.qr[i], qy = px.qc[j];
    float2 E = make_float2(0, 0);
    if (FAST && t != 0)
        E = f_chi_phasor(s, qx, qy);
    const size_t pa = (size_t)blockIdx.z * CORRECT_PIX, pb = pa + CORRECT_PIX < np ? pa + CORRECT_PIX : np;
    for (size_t p = pa; p < pb; p++) {
        const size_t ib = p0 + p;
        float2 *out = spec + p * nb + t;
        const long long slot = px.slot[ib];
        const double Ak = px.set_tab[ib];
        if (slot < 0 || Ak == 0.0 || t == 0) {
            *out = make_float2(0, 0);
            continue;
        }
        const double kx = px.kx[ib], ky = px.ky[ib];
        const double a = px.set_tab[3 * px.n_bf + ib], b = px.set_tab[4 * px.n_bf + ib];
        float2 n;
        if (FAST)
            n = f_n_fast_e(s, E, kx, ky, (float)Ak, a, b, qx, qy);
        else {
            const ssb_c64 Pk = ssb_c64_make(px.set_tab[px.n_bf + ib], px.set_tab[2 * px.n_bf + ib]);
            n = n_bin(s, kx, ky, Ak, Pk, a, b, qx, qy, i == nyq_r, j == nyq_c);
        }
        *out = corrected(g_at(planes + (size_t)slot * g.stride, g, i, j), n);
    }
}

/* The fast kernel's Nyquist row (t < ncols) and column (the other rows), in double. */
__global__ void k_nyquist(const float2 *__restrict__ planes, cu_grid g, cu_set s, cu_pixels px, size_t p0,
                          float2 *__restrict__ spec)
{
    const size_t p = blockIdx.y, ib = p0 + p, nb = (size_t)g.nyf * g.ncols;
    const int nyq_r = (g.nyf % 2 == 0) ? g.nyf / 2 : -1, nyq_c = (g.nxf % 2 == 0) ? g.nxf / 2 : -1;
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int i, j;
    if (t < (size_t)g.ncols) {
        if (nyq_r < 0)
            return;
        i = nyq_r, j = (int)t;
    } else if (t < (size_t)g.ncols + g.nyf) {
        i = (int)(t - g.ncols), j = nyq_c;
        if (nyq_c < 0 || i == nyq_r)
            return;
    } else
        return;
    float2 *out = spec + p * nb + (size_t)i * g.ncols + j;
    const long long slot = px.slot[ib];
    const double Ak = px.set_tab[ib];
    if (slot < 0 || Ak == 0.0 || (i == 0 && j == 0)) {
        *out = make_float2(0, 0);
        return;
    }
    const double kx = px.kx[ib], ky = px.ky[ib];
    const double a = px.set_tab[3 * px.n_bf + ib], b = px.set_tab[4 * px.n_bf + ib];
    const ssb_c64 Pk = ssb_c64_make(px.set_tab[px.n_bf + ib], px.set_tab[2 * px.n_bf + ib]);
    float2 n = n_bin(s, kx, ky, Ak, Pk, a, b, px.qr[i], px.qc[j], i == nyq_r, j == nyq_c);
    *out = corrected(g_at(planes + (size_t)slot * g.stride, g, i, j), n);
}

/* acc[t] += Ĉ of each of the np spectra, pixel after pixel (eight loads in flight, then the adds
 * in order: the same bits as one at a time). */
__global__ void k_acc(const float2 *__restrict__ spec, size_t nb, size_t np, double2 *__restrict__ acc)
{
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < nb; t += (size_t)gridDim.x * blockDim.x) {
        double2 a = acc[t];
        for (size_t p0 = 0; p0 < np; p0 += 8) {
            float2 v[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                v[k] = p0 + k < np ? spec[(p0 + k) * nb + t] : make_float2(0, 0);
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (p0 + k < np) { /* −i·Ĉ: Ĉ = (−im, re) */
                    a.x += (double)-v[k].y;
                    a.y += (double)v[k].x;
                }
        }
        acc[t] = a;
    }
}

__global__ void k_phase_sum(const float *__restrict__ real, size_t npix, size_t np,
                            const unsigned char *__restrict__ valid, float inv_dc, double *__restrict__ total,
                            double *__restrict__ s2)
{
    for (size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; r < npix; r += (size_t)gridDim.x * blockDim.x) {
        double t = total[r], q = s2[r];
        for (size_t p0 = 0; p0 < np; p0 += 8) {
            float v[8]; /* eight loads in flight, then the sums in pixel order */
#pragma unroll
            for (int k = 0; k < 8; k++)
                v[k] = p0 + k < np ? real[(p0 + k) * npix + r] : 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (p0 + k >= np || !valid[p0 + k])
                    continue;
                double ph = atanf(v[k] * inv_dc);
                t += ph;
                q += ph * ph; /* exact: ph is a float, so a fused multiply-add rounds the same */
            }
        }
        total[r] = t;
        s2[r] = q;
    }
}

__global__ void k_valid(cu_pixels px, const double *Ak, size_t p0, size_t np, unsigned char *valid)
{
    size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p < np)
        valid[p] = px.slot[p0 + p] >= 0 && Ak[p0 + p] != 0.0;
}

__global__ void k_add(double *__restrict__ dst, const double *__restrict__ src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

#define FIN_THREADS 1024
__global__ void k_finish(const double *total, const double *s2, size_t npix, double nbf, double *sums, float *mean)
{
    __shared__ double a[FIN_THREADS], b[FIN_THREADS];
    double x = 0, y = 0;
    for (size_t r = threadIdx.x; r < npix; r += FIN_THREADS) {
        double m = total[r] / nbf;
        x += s2[r];
        y += m * m;
        if (mean)
            mean[r] = (float)m;
    }
    a[threadIdx.x] = x, b[threadIdx.x] = y;
    __syncthreads();
    for (int h = FIN_THREADS / 2; h > 0; h /= 2) {
        if (threadIdx.x < h)
            a[threadIdx.x] += a[threadIdx.x + h], b[threadIdx.x] += b[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        sums[0] = a[0], sums[1] = b[0];
}

/* ---- the band objective (src/ssb/band.c accum_fast / accum_generic), in double ------------- */

/* QUAD: the sets with only C10/C12 (the fast form, few registers); else the others. */
template <bool QUAD>
__global__ void k_band(const float2 *__restrict__ planes, cu_band b, const cu_band_set *__restrict__ sets,
                       double *__restrict__ total)
{
    const long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= b.nb || (sets[blockIdx.y].p.quadratic != 0) != QUAD)
        return;
    const ssb_phys &s = sets[blockIdx.y].p;
    const long long rot = sets[blockIdx.y].rot;
    const double qx = b.qx[m], qy = b.qy[m], q2 = b.q2[m], lam = b.lambda;
    const double *kxs = b.ktab + rot * b.n_bf, *kys = b.ktab + (b.nrot + rot) * b.n_bf;
    const double *Aks = b.ktab + (2 * b.nrot + rot) * b.n_bf;
    const long long off = b.off[m];
    double Er = 0, Ei = 0, qt = 0;
    if (QUAD) { /* e^{iχ(q)} */
        double x = ssb_chi_l(&s, lam, qx, qy);
        sincos(x, &Ei, &Er);
    }
    if (s.thick)
        qt = ssb_tilt_phase(&s, qx, qy);
    /* Segment after segment (blocks of 64 BF pixels, dist.h): each summed from zero, then added
     * into the totals in order, or kept for the chain of a distributed pass. */
    double T0 = 0, T1 = 0, T2 = 0, T3 = 0;
    for (long long sg = 0; sg < b.nseg; sg++) {
        double Nr = 0, Ni = 0, D = 0, E = 0;
        for (long long ib = b.seg[3 * sg]; ib < b.seg[3 * sg + 1]; ib++) {
            long long slot = b.slot[ib];
            double Ak = Aks[ib];
            if (slot < 0 || Ak == 0.0)
                continue;
            double kx = kxs[ib], ky = kys[ib];
            double A1 = ssb_aperture(lam, b.alpha0, b.ang0, b.ang1, qx - kx, qy - ky),
                   A2 = ssb_aperture(lam, b.alpha0, b.ang0, b.ang1, qx + kx, qy + ky);
            if (A1 == 0.0 && A2 == 0.0)
                continue;
            double qk = qx * kx + qy * ky, cr, ci;
            if (QUAD) {
                if (s.thick) {
                    double x1 = 0.5 * s.t * ssb_thick_r1(lam, q2, qk, qt);
                    double x2 = 0.5 * s.t * ssb_thick_r2(lam, q2, qk, qt);
                    A1 *= ssb_sinc(x1);
                    A2 *= ssb_sinc(x2);
                }
                double bx = 2 * PI * lam * (s.m[0] * kx + s.m[1] * ky), by = 2 * PI * lam * (s.m[1] * kx + s.m[2] * ky);
                double sn, cs;
                sincos(bx * qx + by * qy, &sn, &cs);
                double phr = Ak * cs, phi = -Ak * sn; /* A(k)·e^{−iu} */
                double dr = (A1 - A2) * Er, di = (A1 + A2) * Ei;
                cr = phr * dr - phi * di, ci = phr * di + phi * dr; /* conj(γ) */
            } else {
                double xk = ssb_chi_l(&s, lam, kx, ky), sk, ck;
                sincos(xk, &sk, &ck);
                double Pkr = Ak * ck, Pki = -Ak * sk;
                ssb_c64 cg = ssb_band_cgamma(&s, lam, kx, ky, Pkr, Pki, A1, A2, qx, qy, q2, qk, qt);
                cr = cg.re, ci = cg.im;
            }
            float2 g = planes[(size_t)slot * b.stride + off];
            double gr = g.x, gi = g.y, g2 = cr * cr + ci * ci;
            /* Each pixel's terms rounded on their own, then added (__dadd_rn is never fused into a
             * multiply-add): a pixel adds the same bits into a block's sum whether the block began
             * at zero on this rank or arrived from an earlier one (dist.h's head pixels). */
            Nr = __dadd_rn(Nr, gr * cr - gi * ci);
            Ni = __dadd_rn(Ni, gr * ci + gi * cr);
            D = __dadd_rn(D, g2);
            E = __dadd_rn(E, __dmul_rn(b.T[ib], g2));
        }
        const long long out = b.seg[3 * sg + 2];
        if (out < 0) {
            T0 += Nr, T1 += Ni, T2 += D, T3 += E;
        } else {
            double *k = b.kept + (size_t)out * gridDim.y * b.nb * 4 + ((size_t)blockIdx.y * b.nb + m) * 4;
            k[0] = Nr, k[1] = Ni, k[2] = D, k[3] = E;
        }
    }
    if (total) {
        double *t = total + ((size_t)blockIdx.y * b.nb + m) * 4;
        t[0] = T0, t[1] = T1, t[2] = T2, t[3] = T3;
    }
}

__global__ void k_band_power(const float2 *__restrict__ planes, cu_band b, const double *__restrict__ Ak,
                             double *__restrict__ acc)
{
    const long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= b.nb)
        return;
    double a = acc[m]; /* a distributed pass: the earlier ranks' sum */
    for (long long ib = 0; ib < b.n_bf; ib++) {
        long long slot = b.slot[ib];
        if (slot < 0 || Ak[ib] == 0.0)
            continue;
        float2 g = planes[(size_t)slot * b.stride + b.off[m]];
        double re = g.x, im = g.y;
        a += re * re + im * im;
    }
    acc[m] = a;
}

/* ---- launchers ---------------------------------------------------------------------------- */

extern "C" int cu_band_sums(const void *planes, cu_band b, const cu_band_set *sets, size_t n, double *total,
                            void *stream)
{
    if (b.nb == 0 || n == 0)
        return 0;
    dim3 grid((unsigned)((b.nb + 127) / 128), (unsigned)n);
    k_band<true><<<grid, 128, 0, (cudaStream_t)stream>>>((const float2 *)planes, b, sets, total);
    k_band<false><<<grid, 128, 0, (cudaStream_t)stream>>>((const float2 *)planes, b, sets, total);
    return (int)cudaGetLastError();
}

extern "C" int cu_band_power(const void *planes, cu_band b, const double *Ak, double *acc, void *stream)
{
    if (b.nb == 0)
        return 0;
    k_band_power<<<(unsigned)((b.nb + 127) / 128), 128, 0, (cudaStream_t)stream>>>((const float2 *)planes, b, Ak, acc);
    return (int)cudaGetLastError();
}

static unsigned blocks_for(size_t n, unsigned threads, unsigned cap)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

extern "C" int cu_correct(const void *planes, cu_grid gr, const cu_set *s, cu_pixels px, size_t p0, size_t np,
                          void *spec, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    const float2 *pl = (const float2 *)planes;
    float2 *sp = (float2 *)spec;
    dim3 blk(32, 8), grid((unsigned)((gr.ncols + 31) / 32), (unsigned)((gr.nyf + 7) / 8),
                         (unsigned)((np + CORRECT_PIX - 1) / CORRECT_PIX));
    if (s->fast)
        k_correct_pix<true><<<grid, blk, 0, st>>>(pl, gr, *s, px, p0, np, sp);
    else
        k_correct_pix<false><<<grid, blk, 0, st>>>(pl, gr, *s, px, p0, np, sp);
    if (s->fast) {
        dim3 gn(blocks_for((size_t)gr.ncols + gr.nyf, 128, 65535), (unsigned)np);
        k_nyquist<<<gn, 128, 0, st>>>(pl, gr, *s, px, p0, sp);
    }
    return (int)cudaGetLastError();
}

extern "C" int cu_acc(const void *spec, size_t nb, size_t np, void *acc, void *stream)
{
    k_acc<<<blocks_for(nb, 256, 65535), 256, 0, (cudaStream_t)stream>>>((const float2 *)spec, nb, np, (double2 *)acc);
    return (int)cudaGetLastError();
}

extern "C" int cu_phase_sum(const float *real, size_t npix, size_t np, const unsigned char *valid, float inv_dc,
                            double *total, double *s2, void *stream)
{
    k_phase_sum<<<blocks_for(npix, 256, 65535), 256, 0, (cudaStream_t)stream>>>(real, npix, np, valid, inv_dc, total,
                                                                                 s2);
    return (int)cudaGetLastError();
}

extern "C" int cu_add(double *dst, const double *src, size_t n, void *stream)
{
    k_add<<<blocks_for(n, 256, 65535), 256, 0, (cudaStream_t)stream>>>(dst, src, n);
    return (int)cudaGetLastError();
}

extern "C" int cu_valid(cu_pixels px, const double *Ak, size_t p0, size_t np, unsigned char *valid, void *stream)
{
    k_valid<<<blocks_for(np, 128, 65535), 128, 0, (cudaStream_t)stream>>>(px, Ak, p0, np, valid);
    return (int)cudaGetLastError();
}

extern "C" int cu_finish(const double *total, const double *s2, size_t npix, double nbf, double *sums, float *mean,
                         void *stream)
{
    k_finish<<<1, FIN_THREADS, 0, (cudaStream_t)stream>>>(total, s2, npix, nbf, sums, mean);
    return (int)cudaGetLastError();
}

/* ---- the object's last steps (object.c ssb_object_fill, ssb_object_transform) ------------- */

/* F = acc/n_bf on the half plane, −conj of the mirror bin on the other half, F[0] = dc: the
 * CPU's fill, bin for bin (each bin is one double product rounded to float, as there). */
__global__ void k_object_fill(const double2 *__restrict__ acc, int nyf, int nxf, double dc, double inv_nbf,
                              float2 *__restrict__ F)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= nxf)
        return;
    const int ncols = nxf / 2 + 1;
    float2 v;
    if (j < ncols) {
        double2 a = acc[(size_t)i * ncols + j];
        v = make_float2((float)(a.x * inv_nbf), (float)(a.y * inv_nbf));
    } else {
        double2 a = acc[(size_t)((nyf - i) % nyf) * ncols + (nxf - j)];
        v = make_float2(-(float)(a.x * inv_nbf), (float)(a.y * inv_nbf));
    }
    if (i == 0 && j == 0)
        v = make_float2((float)dc, 0.0f);
    F[(size_t)i * nxf + j] = v;
}

/* The inverse transform's output scaled by 1/npix: the complex object (interleaved) and/or its
 * phase. */
__global__ void k_object_out(const float2 *__restrict__ F, size_t npix, float scale, float *__restrict__ object,
                             float *__restrict__ phase)
{
    for (size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; r < npix; r += (size_t)gridDim.x * blockDim.x) {
        float2 v = F[r];
        float re = v.x * scale, im = v.y * scale;
        if (object)
            object[2 * r] = re, object[2 * r + 1] = im;
        if (phase)
            phase[r] = atan2f(im, re);
    }
}

extern "C" int cu_object_fill(const void *acc, int nyf, int nxf, double dc, double inv_nbf, void *F, void *stream)
{
    dim3 grid((unsigned)((nxf + 255) / 256), (unsigned)nyf);
    k_object_fill<<<grid, 256, 0, (cudaStream_t)stream>>>((const double2 *)acc, nyf, nxf, dc, inv_nbf, (float2 *)F);
    return (int)cudaGetLastError();
}

extern "C" int cu_object_out(const void *F, size_t npix, float scale, float *object, float *phase, void *stream)
{
    k_object_out<<<blocks_for(npix, 256, 4096), 256, 0, (cudaStream_t)stream>>>((const float2 *)F, npix, scale, object,
                                                                              phase);
    return (int)cudaGetLastError();
}
