/* kernels.cu — the SSB passes on an NVIDIA GPU (kernels.h says what each does). */
#include "kernels.h"

#include <cuda_runtime.h>
#include <math.h>

#define PI 3.14159265358979323846

/* ---- the SSB model in double (src/ssb/ssb_internal.h, correct.c) ------------------------- */

/* χ(v) in rad (ssb_internal.h ssb_chi): the quadratic form, or the series in the coefficients
 * C (Å), φ (rad) of radial order an and azimuthal order am. Both kernels' sets use it. */
__device__ static double chi(double lambda, const double *C, const double *phi, const int *an, const int *am,
                             int quadratic, const double *m, double vx, double vy)
{
    if (quadratic)
        return PI * lambda * (m[0] * vx * vx + 2 * m[1] * vx * vy + m[2] * vy * vy);
    double r2 = vx * vx + vy * vy;
    if (r2 == 0.0)
        return 0.0;
    double alpha = lambda * sqrt(r2), ph = atan2(vy, vx), sum = 0.0, ap = alpha;
    for (int n = 1; n <= 5; n++) {
        ap *= alpha;
        for (int i = 0; i < CU_N_ABERR; i++) {
            if (an[i] != n || C[i] == 0.0)
                continue;
            int mm = am[i];
            sum += C[i] * ap / (n + 1) * (mm ? cos(mm * (ph - phi[i])) : 1.0);
        }
    }
    return 2.0 * PI / lambda * sum;
}

/* A(v): the soft aperture with a one-pixel linear edge (ssb_internal.h ssb_aperture). */
__device__ static double aperture(double lambda, double alpha0, double ang0, double ang1, double vx, double vy)
{
    double r = sqrt(vx * vx + vy * vy);
    double w = r > 0 ? sqrt(vx * vx * ang0 * ang0 + vy * vy * ang1 * ang1) / r : ang0;
    double A = (alpha0 - lambda * r) / w + 0.5;
    return A < 0 ? 0 : A > 1 ? 1 : A;
}

__device__ static double sinc(double x) { return fabs(x) < 1e-6 ? 1.0 : sin(x) / x; }

/* P(v) = A(v)·e^{−iχ(v)} */
__device__ static double2 d_probe(const cu_set &s, double vx, double vy, double *A)
{
    *A = aperture(s.lambda, s.alpha0, s.ang0, s.ang1, vx, vy);
    if (*A == 0.0)
        return make_double2(0, 0);
    double sn, cs;
    sincos(chi(s.lambda, s.C, s.phi, s.an, s.am, s.quadratic_only, s.m, vx, vy), &sn, &cs);
    return make_double2(*A * cs, -*A * sn);
}

__device__ static double2 cmul(double2 a, double2 b) { return make_double2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
__device__ static double2 cconj(double2 a) { return make_double2(a.x, -a.y); }
__device__ static double cabs2(double2 a) { return hypot(a.x, a.y); }

/* conj(γ)/|γ| with correct.c's degenerate-bin rule. */
__device__ static double2 d_unit_conj(double2 t1, double2 t2)
{
    double2 gam = make_double2(t1.x - t2.x, t1.y - t2.y);
    double mag = cabs2(gam);
    if (mag >= 1e-8)
        return make_double2(gam.x / mag, -gam.y / mag);
    double m1 = cabs2(t1), m2 = cabs2(t2);
    if (m1 > 0) /* conj(−i·t1)/|t1| */
        return make_double2(t1.y / m1, t1.x / m1);
    return m2 > 0 ? make_double2(-t2.x / m2, t2.y / m2) : make_double2(0, 0);
}

/* n(q,k) in double (correct.c n_at): the generic form, and the fast kernel's separable form. */
__device__ static double2 d_n_at(const cu_set &s, double kx, double ky, double Ak, double2 Pk, double a, double b,
                                 double qx, double qy)
{
    if (Ak == 0.0)
        return make_double2(0, 0);
    if (s.fast) {
        double k2 = kx * kx + ky * ky, q2 = qx * qx + qy * qy, dot = qx * kx + qy * ky;
        double chq = PI * s.lambda * (s.m[0] * qx * qx + 2 * s.m[1] * qx * qy + s.m[2] * qy * qy);
        double r1 = sqrt(fmax(q2 - 2 * dot + k2, 0.0)), r2 = sqrt(fmax(q2 + 2 * dot + k2, 0.0));
        double A1 = fmin(fmax((s.alpha0 - s.lambda * r1) / s.ang0 + 0.5, 0.0), 1.0);
        double A2 = fmin(fmax((s.alpha0 - s.lambda * r2) / s.ang0 + 0.5, 0.0), 1.0);
        double sn, cs, ps, pc;
        sincos(chq, &sn, &cs);
        sincos(a * qx + b * qy, &ps, &pc);
        double2 e = make_double2(cs, -sn), p = make_double2(Ak * pc, Ak * ps);
        double2 pe = cmul(p, e), pce = cmul(p, cconj(e));
        return d_unit_conj(make_double2(A1 * pe.x, A1 * pe.y), make_double2(A2 * pce.x, A2 * pce.y));
    }
    double A1, A2;
    double2 P1 = d_probe(s, kx - qx, ky - qy, &A1);
    double2 P2 = d_probe(s, kx + qx, ky + qy, &A2);
    double2 t1 = cmul(P1, cconj(Pk)), t2 = cmul(cconj(P2), Pk);
    if (s.thick) {
        double k2 = kx * kx + ky * ky, qt = 2 * PI * (qx * s.tau0 + qy * s.tau1);
        double r1 = -PI * s.lambda * ((qx - kx) * (qx - kx) + (qy - ky) * (qy - ky) - k2) - qt;
        double r2 = PI * s.lambda * ((qx + kx) * (qx + kx) + (qy + ky) * (qy + ky) - k2) - qt;
        double w1 = sinc(r1 * s.t_A / 2), w2 = sinc(r2 * s.t_A / 2);
        t1 = make_double2(t1.x * w1, t1.y * w1);
        t2 = make_double2(t2.x * w2, t2.y * w2);
    }
    return d_unit_conj(t1, t2);
}

/* ---- the fast kernel in float (correct.c corr_fast), its phasors evaluated directly ------- */

/* e^{iθ} for a double θ: reduced to [−π, π] in double, then sincos in float. */
__device__ static float2 phasor(double th)
{
    th -= 2 * PI * rint(th * (1.0 / (2 * PI)));
    float sn, cs;
    sincosf((float)th, &sn, &cs);
    return make_float2(cs, sn);
}

__device__ static float2 f_n_fast(const cu_set &s, double kxd, double kyd, float Ak, double a, double b, double qrd,
                                  double qcd)
{
    const float qr = (float)qrd, qc = (float)qcd, kx = (float)kxd, ky = (float)kyd;
    const float k2 = kx * kx + ky * ky;
    const float dot = qr * kx + qc * ky, base = qr * qr + k2 + qc * qc;
    float v1 = fmaxf(base - 2 * dot, 0.0f), v2 = fmaxf(base + 2 * dot, 0.0f);
    const float a0 = (float)s.alpha0, lam = (float)s.lambda, invw = s.inv_w;
    float A1 = fminf(fmaxf((a0 - lam * sqrtf(v1)) * invw + 0.5f, 0.0f), 1.0f);
    float A2 = fminf(fmaxf((a0 - lam * sqrtf(v2)) * invw + 0.5f, 0.0f), 1.0f);
    const float2 E = phasor(-PI * s.lambda * (s.m[0] * qrd * qrd + 2 * s.m[1] * qrd * qcd + s.m[2] * qcd * qcd));
    const float er = E.x, ei = E.y; /* e^{−iχ(q)} */
    const float2 P = phasor(a * qrd + b * qcd);
    const float pr = Ak * P.x, pi = Ak * P.y;
    float dr = (A1 - A2) * er, di = (A1 + A2) * ei;
    float gr = pr * dr - pi * di, gi = pr * di + pi * dr;
    float m2 = gr * gr + gi * gi;
    if (m2 < 1e-16f && A1 + A2 > 0.0f) { /* degenerate: −i·p·e */
        float xr = pr * er - pi * ei, xi = pr * ei + pi * er;
        gr = xi, gi = -xr;
        m2 = gr * gr + gi * gi;
    }
    m2 = fmaxf(m2, 1e-16f);
    float inv = rsqrtf(m2);
    return make_float2(gr * inv, -gi * inv);
}

/* G at fine bin (i, j): the native half plane continued periodically, mirrored for the other half. */
__device__ static float2 g_at(const float2 *plane, const cu_grid &g, int i, int j)
{
    int r = i, col = j;
    if (g.f != 1) /* the fine grid: no integer division on the native one */
        r = i % g.ny, col = j % g.nx;
    if (col < g.nxh)
        return plane[(size_t)r * g.nxh + col];
    float2 v = plane[(size_t)((g.ny - r) % g.ny) * g.nxh + (g.nx - col)];
    return make_float2(v.x, -v.y);
}

/* n(q,k) in double with the Nyquist alias average (correct.c n_bin): the generic kernel's every
 * bin, and the fast kernel's Nyquist row and column. */
__device__ static float2 n_bin(const cu_set &s, double kx, double ky, double Ak, double2 Pk, double a, double b,
                               double qx, double qy, int nyq_row, int nyq_col)
{
    int ar = nyq_row ? 2 : 1, ac = nyq_col ? 2 : 1;
    double2 acc = make_double2(0, 0);
    for (int u = 0; u < ar; u++)
        for (int v = 0; v < ac; v++) {
            double2 w = d_n_at(s, kx, ky, Ak, Pk, a, b, u ? -qx : qx, v ? -qy : qy);
            acc.x += w.x, acc.y += w.y;
        }
    return make_float2((float)(acc.x / (ar * ac)), (float)(acc.y / (ar * ac)));
}

/* −i·(G·n) */
__device__ static float2 corrected(float2 gv, float2 n)
{
    float yr = gv.x * n.x - gv.y * n.y, yi = gv.x * n.y + gv.y * n.x;
    return make_float2(yi, -yr);
}

/* FAST: the fast kernel on every bin but the Nyquist row and column (k_nyquist writes those);
 * else the generic kernel on every bin. */
template <bool FAST>
__global__ void k_correct(const float2 *__restrict__ planes, cu_grid g, cu_set s, cu_pixels px, size_t p0,
                          float2 *__restrict__ spec)
{
    /* one thread per bin: x the column, y the row, z the pixel in the chunk (no division) */
    const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (j >= g.ncols)
        return;
    const size_t p = blockIdx.z, ib = p0 + p, t = (size_t)i * g.ncols + j;
    float2 *out = spec + p * ((size_t)g.nyf * g.ncols) + t;
    const int nyq_r = (g.nyf % 2 == 0) ? g.nyf / 2 : -1, nyq_c = (g.nxf % 2 == 0) ? g.nxf / 2 : -1;
    if (FAST && (i == nyq_r || j == nyq_c))
        return; /* k_nyquist's */
    const long long slot = px.slot[ib];
    const double Ak = px.set_tab[ib];
    if (slot < 0 || Ak == 0.0 || t == 0) {
        *out = make_float2(0, 0);
        return;
    }
    const double kx = px.kx[ib], ky = px.ky[ib];
    const double a = px.set_tab[3 * px.n_bf + ib], b = px.set_tab[4 * px.n_bf + ib];
    const double qx = px.qr[i], qy = px.qc[j];
    float2 n;
    if (FAST)
        n = f_n_fast(s, kx, ky, (float)Ak, a, b, qx, qy);
    else {
        const double2 Pk = make_double2(px.set_tab[px.n_bf + ib], px.set_tab[2 * px.n_bf + ib]);
        n = n_bin(s, kx, ky, Ak, Pk, a, b, qx, qy, i == nyq_r, j == nyq_c);
    }
    *out = corrected(g_at(planes + (size_t)slot * g.stride, g, i, j), n);
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
    const double2 Pk = make_double2(px.set_tab[px.n_bf + ib], px.set_tab[2 * px.n_bf + ib]);
    float2 n = n_bin(s, kx, ky, Ak, Pk, a, b, px.qr[i], px.qc[j], i == nyq_r, j == nyq_c);
    *out = corrected(g_at(planes + (size_t)slot * g.stride, g, i, j), n);
}

__global__ void k_acc(const float2 *__restrict__ spec, size_t nb, size_t np, double2 *__restrict__ acc)
{
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < nb; t += (size_t)gridDim.x * blockDim.x) {
        double2 a = acc[t];
        for (size_t p = 0; p < np; p++) {
            float2 v = spec[p * nb + t]; /* −i·Ĉ: Ĉ = (−im, re) */
            a.x += (double)-v.y;
            a.y += (double)v.x;
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
    if (m >= b.nb || (sets[blockIdx.y].quadratic != 0) != QUAD)
        return;
    const cu_band_set &s = sets[blockIdx.y];
    const double qx = b.qx[m], qy = b.qy[m], q2 = b.q2[m], lam = b.lambda;
    const double *kxs = b.ktab + s.rot * b.n_bf, *kys = b.ktab + (b.nrot + s.rot) * b.n_bf;
    const double *Aks = b.ktab + (2 * b.nrot + s.rot) * b.n_bf;
    const long long off = b.off[m];
    double Er = 0, Ei = 0, qt = 0;
    if (QUAD) { /* e^{iχ(q)} */
        double x = chi(lam, s.C, s.phi, s.an, s.am, s.quadratic, s.m, qx, qy);
        sincos(x, &Ei, &Er);
    }
    if (s.thick)
        qt = 2 * PI * (qx * s.tau0 + qy * s.tau1);
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
            double A1 = aperture(lam, b.alpha0, b.ang0, b.ang1, qx - kx, qy - ky),
                   A2 = aperture(lam, b.alpha0, b.ang0, b.ang1, qx + kx, qy + ky);
            if (A1 == 0.0 && A2 == 0.0)
                continue;
            double qk = qx * kx + qy * ky, cr, ci;
            if (QUAD) {
                if (s.thick) {
                    double x1 = 0.5 * s.t * (-PI * lam * (q2 - 2 * qk) - qt);
                    double x2 = 0.5 * s.t * (PI * lam * (q2 + 2 * qk) - qt);
                    A1 *= sinc(x1);
                    A2 *= sinc(x2);
                }
                double bx = 2 * PI * lam * (s.m[0] * kx + s.m[1] * ky), by = 2 * PI * lam * (s.m[1] * kx + s.m[2] * ky);
                double sn, cs;
                sincos(bx * qx + by * qy, &sn, &cs);
                double phr = Ak * cs, phi = -Ak * sn; /* A(k)·e^{−iu} */
                double dr = (A1 - A2) * Er, di = (A1 + A2) * Ei;
                cr = phr * dr - phi * di, ci = phr * di + phi * dr; /* conj(γ) */
            } else {
                double xk = chi(lam, s.C, s.phi, s.an, s.am, s.quadratic, s.m, kx, ky), sk, ck;
                sincos(xk, &sk, &ck);
                double Pkr = Ak * ck, Pki = -Ak * sk;
                double x1 = chi(lam, s.C, s.phi, s.an, s.am, s.quadratic, s.m, kx - qx, ky - qy);
                double x2 = chi(lam, s.C, s.phi, s.an, s.am, s.quadratic, s.m, kx + qx, ky + qy), s1, c1, s2, c2;
                sincos(x1, &s1, &c1);
                sincos(x2, &s2, &c2);
                /* t1 = A1 e^{−ix1} conj(Pk), t2 = A2 e^{ix2} Pk */
                double ar = A1 * c1, ai = -A1 * s1, br = A2 * c2, bi = A2 * s2;
                double t1r = ar * Pkr + ai * Pki, t1i = ai * Pkr - ar * Pki;
                double t2r = br * Pkr - bi * Pki, t2i = br * Pki + bi * Pkr;
                if (s.thick) {
                    double r1 = -PI * lam * (q2 - 2 * qk) - qt, r2 = PI * lam * (q2 + 2 * qk) - qt;
                    double w1 = sinc(r1 * s.t / 2), w2 = sinc(r2 * s.t / 2);
                    t1r *= w1, t1i *= w1, t2r *= w2, t2i *= w2;
                }
                cr = t1r - t2r, ci = -(t1i - t2i);
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
    dim3 grid((unsigned)((gr.ncols + 127) / 128), (unsigned)gr.nyf, (unsigned)np);
    cudaStream_t st = (cudaStream_t)stream;
    if (s->fast) {
        k_correct<true><<<grid, 128, 0, st>>>((const float2 *)planes, gr, *s, px, p0, (float2 *)spec);
        dim3 gn(blocks_for((size_t)gr.ncols + gr.nyf, 128, 65535), (unsigned)np);
        k_nyquist<<<gn, 128, 0, st>>>((const float2 *)planes, gr, *s, px, p0, (float2 *)spec);
    } else
        k_correct<false><<<grid, 128, 0, st>>>((const float2 *)planes, gr, *s, px, p0, (float2 *)spec);
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
