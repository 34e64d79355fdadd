/* refine_kernels.cu — the refinement's minibatch kernels (refine_kernels.h): model_core.inc's
 * per-position steps for many positions at once, in float32 with double sums; each position's
 * sums are one block's, in a fixed tree. */
#include "cuda/refine_kernels.h"

#include <cuda_runtime.h>
#include <math.h>

#define RT 256 /* threads per block; the reductions' tree is over these */

static int grid_for(long long m)
{
    long long b = (m + RT - 1) / RT;
    return (int)(b < 65535 * 16 ? b : 65535 * 16);
}

/* Sums v[0..k) over the block in a fixed tree; thread 0 gets the totals. */
template <int K> __device__ void block_sum(double v[K])
{
    __shared__ double sh[K][RT];
    for (int k = 0; k < K; k++)
        sh[k][threadIdx.x] = v[k];
    __syncthreads();
    for (int h = RT / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h)
            for (int k = 0; k < K; k++)
                sh[k][threadIdx.x] += sh[k][threadIdx.x + h];
        __syncthreads();
    }
    for (int k = 0; k < K; k++)
        v[k] = sh[k][0];
}

__global__ void k_probe(cu_rgrid g, const cu_rpos *pos, int nb, float2 *Q, float2 *psi0)
{
    long long m = (long long)nb * g.n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m; i += (long long)gridDim.x * blockDim.x) {
        long long b = i / g.n, q = i % g.n;
        int r = (int)(q / g.nc), c = (int)(q % g.nc);
        double sr, cr, sc, cc;
        sincos(-2.0 * M_PI * (double)g.fc[c] * pos[b].s1, &sc, &cc);
        sincos(-2.0 * M_PI * (double)g.fr[r] * pos[b].s0, &sr, &cr);
        float ecr = (float)cc, eci = (float)sc, er = (float)cr, ei = (float)sr;
        float co = er * ecr - ei * eci, sn = er * eci + ei * ecr;
        float a = g.P[2 * q], bb = g.P[2 * q + 1];
        float2 v = make_float2(a * co - bb * sn, a * sn + bb * co);
        Q[i] = v;
        psi0[i] = v;
    }
}

__global__ void k_transmit(cu_rgrid g, const float2 *obj, int s, const cu_rpos *pos, int nb, const float2 *psi,
                           float2 *T, float2 *x)
{
    long long m = (long long)nb * g.n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m; i += (long long)gridDim.x * blockDim.x) {
        long long b = i / g.n, q = i % g.n, r = q / g.nc, c = q % g.nc;
        float2 t = obj[((long long)s * g.Or + pos[b].o0 + r) * g.Oc + pos[b].o1 + c];
        float2 p = psi[i];
        T[i] = t;
        x[i] = make_float2(p.x * t.x - p.y * t.y, p.x * t.y + p.y * t.x);
    }
}

__global__ void k_propagate(cu_rgrid g, int nb, float2 *x, float2 *next, float inv_n)
{
    long long m = (long long)nb * g.n;
    const float2 *pr = (const float2 *)g.prop;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m; i += (long long)gridDim.x * blockDim.x) {
        float2 a = x[i], p = pr[i % g.n];
        float2 v = make_float2(a.x * p.x - a.y * p.y, a.x * p.y + a.y * p.x);
        x[i] = v;
        next[i] = make_float2(v.x * inv_n, v.y * inv_n);
    }
}

/* One block per position. */
__global__ void k_likelihood(cu_rgrid g, const cu_rpos *pos, double scale, int amplitude, float2 *E, double *red)
{
    long long b = blockIdx.x;
    float2 *e = E + b * g.n;
    const float *cnt = g.cnt + pos[b].p * g.nv;
    double sc = scale / ((double)g.n * (double)g.n), eps = 1e-9 * scale / (double)g.n;
    double v[2] = {0.0, 0.0};
    for (long long q = threadIdx.x; q < g.n; q += RT) {
        double re = e[q].x, im = e[q].y;
        double I = sc * (re * re + im * im), dLdI = 0.0;
        int k = g.cidx[q];
        if (k >= 0) {
            double c = cnt[k], Ie = I + eps;
            if (amplitude) {
                double d = sqrt(Ie) - sqrt(c);
                v[0] += d * d;
                dLdI = d / sqrt(Ie);
            } else {
                v[0] += Ie - c * log(Ie);
                dLdI = 1.0 - c / Ie;
            }
            v[1] += I;
        }
        e[q] = make_float2((float)(2.0 * sc * dLdI * re), (float)(2.0 * sc * dLdI * im));
    }
    block_sum<2>(v);
    if (threadIdx.x == 0) {
        double *o = red + b * 8;
        o[0] = v[0], o[1] = v[1];
        for (int k = 2; k < 8; k++)
            o[k] = 0.0;
    }
}

__global__ void k_back_transmit(cu_rgrid g, int s, int nb, const float2 *psi, const float2 *T, float2 *G, float *gb)
{
    long long m = (long long)nb * g.n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m; i += (long long)gridDim.x * blockDim.x) {
        float2 p = psi[i], t = T[i], x = G[i];
        if (gb) { /* G_t = conj(ψ)·G_x; ∂L/∂φ = Im(G_t·conj(t)) */
            float gr = p.x * x.x + p.y * x.y, gi = p.x * x.y - p.y * x.x;
            long long b = i / g.n, q = i % g.n;
            gb[(b * g.ns + s) * g.n + q] = gi * t.x - gr * t.y;
        }
        G[i] = make_float2(t.x * x.x + t.y * x.y, t.x * x.y - t.y * x.x);
    }
}

/* One block per position. */
__global__ void k_back_propagate(cu_rgrid g, const float2 *phi, int want_g, float2 *G, double *red, float inv_n)
{
    long long b = blockIdx.x;
    float2 *x = G + b * g.n;
    const float2 *ph = phi + b * g.n, *pr = (const float2 *)g.prop;
    double v[3] = {0.0, 0.0, 0.0};
    for (long long q = threadIdx.x; q < g.n; q += RT) {
        float c = x[q].x * inv_n, d = x[q].y * inv_n;
        if (want_g) {
            double dl = (double)ph[q].x * d - (double)ph[q].y * c;
            v[0] += dl * g.dth[q];
            v[1] += dl * g.dth[g.n + q];
            v[2] += dl * g.dth[2 * g.n + q];
        }
        float2 p = pr[q];
        x[q] = make_float2(p.x * c + p.y * d, p.x * d - p.y * c);
    }
    if (!want_g)
        return;
    block_sum<3>(v);
    if (threadIdx.x == 0) {
        double *o = red + b * 8 + 2;
        o[5] += v[0], o[3] += v[1], o[4] += v[2];
    }
}

/* One block per position. */
__global__ void k_chi(cu_rgrid g, const float2 *Q, const float2 *G, double *red)
{
    long long b = blockIdx.x;
    const float2 *x = G + b * g.n, *qq = Q + b * g.n;
    double v[3] = {0.0, 0.0, 0.0};
    for (long long q = threadIdx.x; q < g.n; q += RT) {
        double dl = (double)qq[q].y * x[q].x - (double)qq[q].x * x[q].y;
        v[0] += dl * g.dchi[q];
        v[1] += dl * g.dchi[g.n + q];
        v[2] += dl * g.dchi[2 * g.n + q];
    }
    block_sum<3>(v);
    if (threadIdx.x == 0) {
        double *o = red + b * 8 + 2;
        o[0] = v[0], o[1] = v[1], o[2] = v[2];
    }
}

extern "C" {

int cu_r_probe(cu_rgrid g, const cu_rpos *pos, int nb, float *Q, float *psi0, void *stream)
{
    k_probe<<<grid_for((long long)nb * g.n), RT, 0, (cudaStream_t)stream>>>(g, pos, nb, (float2 *)Q, (float2 *)psi0);
    return (int)cudaGetLastError();
}

int cu_r_transmit(cu_rgrid g, const float *obj, int s, const cu_rpos *pos, int nb, const float *psi, float *T,
                  float *x, void *stream)
{
    k_transmit<<<grid_for((long long)nb * g.n), RT, 0, (cudaStream_t)stream>>>(
        g, (const float2 *)obj, s, pos, nb, (const float2 *)psi, (float2 *)T, (float2 *)x);
    return (int)cudaGetLastError();
}

int cu_r_propagate(cu_rgrid g, int nb, float *x, float *next, void *stream)
{
    k_propagate<<<grid_for((long long)nb * g.n), RT, 0, (cudaStream_t)stream>>>(g, nb, (float2 *)x, (float2 *)next,
                                                                                (float)(1.0 / (double)g.n));
    return (int)cudaGetLastError();
}

int cu_r_likelihood(cu_rgrid g, const cu_rpos *pos, int nb, double scale, int amplitude, float *E, double *red,
                    void *stream)
{
    k_likelihood<<<nb, RT, 0, (cudaStream_t)stream>>>(g, pos, scale, amplitude, (float2 *)E, red);
    return (int)cudaGetLastError();
}

int cu_r_back_transmit(cu_rgrid g, int s, int nb, const float *psi, const float *T, float *G, float *gb,
                       void *stream)
{
    k_back_transmit<<<grid_for((long long)nb * g.n), RT, 0, (cudaStream_t)stream>>>(
        g, s, nb, (const float2 *)psi, (const float2 *)T, (float2 *)G, gb);
    return (int)cudaGetLastError();
}

int cu_r_back_propagate(cu_rgrid g, int nb, const float *phi, int want_g, float *G, double *red, void *stream)
{
    k_back_propagate<<<nb, RT, 0, (cudaStream_t)stream>>>(g, (const float2 *)phi, want_g, (float2 *)G, red,
                                                          (float)(1.0 / (double)g.n));
    return (int)cudaGetLastError();
}

int cu_r_chi(cu_rgrid g, int nb, const float *Q, const float *G, double *red, void *stream)
{
    k_chi<<<nb, RT, 0, (cudaStream_t)stream>>>(g, (const float2 *)Q, (const float2 *)G, red);
    return (int)cudaGetLastError();
}
}
