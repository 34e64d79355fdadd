/* loss_fused.cu — the exact loss in one pass over G (loss_fused.h says what and why). */
#include "correct.cuh"
#include "fft_pass.h"
#include "loss_fused.h"

/* Bin (i, j) of pixel ib corrected, −i·(G·n), as k_correct_pix and k_nyquist make it (the same
 * functions: the same bits); E: the fast kernel's e^{−iχ(q)} of the bin. */
template <bool FAST>
__device__ static float2 bin_value(const float2 *planes, const cu_grid &g, const cu_set &s, const cu_pixels &px,
                                   size_t ib, long long slot, double Ak, int i, int j, float2 E)
{
    const int nyq_r = (g.nyf % 2 == 0) ? g.nyf / 2 : -1, nyq_c = (g.nxf % 2 == 0) ? g.nxf / 2 : -1;
    if (i == 0 && j == 0)
        return make_float2(0, 0);
    const double kx = px.kx[ib], ky = px.ky[ib], qx = px.qr[i], qy = px.qc[j];
    const double a = px.set_tab[3 * px.n_bf + ib], b = px.set_tab[4 * px.n_bf + ib];
    float2 n;
    if (FAST && i != nyq_r && j != nyq_c)
        n = f_n_fast_e(s, E, kx, ky, (float)Ak, a, b, qx, qy);
    else {
        const ssb_c64 Pk = ssb_c64_make(px.set_tab[px.n_bf + ib], px.set_tab[2 * px.n_bf + ib]);
        n = n_bin(s, kx, ky, Ak, Pk, a, b, qx, qy, i == nyq_r, j == nyq_c);
    }
    return corrected(g_at(planes + (size_t)slot * g.stride, g, i, j), n);
}

/* One Stockham pass of radix R over the N points at buf (fft_pass.h), by T threads (t of them),
 * each taking 8/R butterflies: loads, the block's barrier, stores, the barrier. R is a constant
 * here so the points stay in registers. live = 0: only the barriers. */
template <int R>
__device__ static void pass_r(fft_c *buf, int t, int T, int Ns, int N, const fft_c *tw, int tws, bool live)
{
    constexpr int per = 8 / R;
    fft_c v[8];
    if (live)
#pragma unroll
        for (int b = 0; b < per; b++)
            fft_load(buf, t + b * T, R, N, v + b * R);
    __syncthreads();
    if (live)
#pragma unroll
        for (int b = 0; b < per; b++)
            fft_store(buf, t + b * T, Ns, R, N, tw, tws, v + b * R);
    __syncthreads();
}

/* The N-point inverse at buf (natural order out), 8 points per thread. */
__device__ static void inverse(fft_c *buf, int t, int T, int N, const fft_c *tw, int tws, bool live)
{
    for (int Ns = 1; Ns < N;) {
        const int R = fft_radix(N, Ns);
        if (R == 8)
            pass_r<8>(buf, t, T, Ns, N, tw, tws, live);
        else if (R == 4)
            pass_r<4>(buf, t, T, Ns, N, tw, tws, live);
        else
            pass_r<2>(buf, t, T, Ns, N, tw, tws, live);
        Ns *= R;
    }
}

#define COL_PTS 8   /* points per thread in the column kernel: nyf/8 threads a column */
#define COL_RUN 4   /* pixels per column block: the bins' e^{−iχ(q)} worked out once for them */
#define COL_THREADS 256 /* nyf ≤ 2048: W columns × nyf/8 threads = 256 */

/* Columns j0 .. j0+W−1 of pixels [pa, pb) of the group: each bin corrected as it is loaded, each
 * column inverse-transformed (nyf points, shared memory), written to X[p] (nyf × ncols). Block:
 * W columns × nyf/8 threads; shared: W × nyf points. */
template <bool FAST>
__global__ void __launch_bounds__(COL_THREADS) k_fused_cols(const float2 *__restrict__ planes, cu_grid g, cu_set s,
                                                    cu_pixels px, size_t p0, size_t np, int W,
                                                    const fft_c *__restrict__ tw, float2 *__restrict__ X)
{
    extern __shared__ fft_c sm[];
    const int NY = g.nyf, T = NY / COL_PTS, nthr = blockDim.x, tid = threadIdx.x;
    const int j0 = blockIdx.x * W, ncols = g.ncols;
    const size_t nb = (size_t)NY * ncols;
    const size_t pa = (size_t)blockIdx.y * COL_RUN, pb = pa + COL_RUN < np ? pa + COL_RUN : np;
    /* this thread's COL_PTS bins (the same for every pixel): element e is idx = tid + e·nthr, column
     * idx % W, row idx / W (a warp reads W neighbouring bins of consecutive rows) */
    float2 E[COL_PTS];
#pragma unroll
    for (int e = 0; e < COL_PTS; e++) {
        const int idx = tid + e * nthr, c = idx % W, i = idx / W, j = j0 + c;
        E[e] = make_float2(0, 0);
        if (FAST && j < ncols && (i | j))
            E[e] = f_chi_phasor(s, px.qr[i], px.qc[j]);
    }
    const int c = tid / T, t = tid % T; /* this thread's column and place in its transform */
    const int LD = FFT_PADDED(NY);      /* a column's points in shared memory (fft_ix) */
    fft_c *col = sm + (size_t)c * LD;
    for (size_t p = pa; p < pb; p++) {
        const size_t ib = p0 + p;
        const long long slot = px.slot[ib];
        const double Ak = px.set_tab[ib];
        if (slot < 0 || Ak == 0.0)
            continue; /* the row kernel skips it: its plane is never read */
#pragma unroll 1 /* one bin at a time: the double model in registers, once */
        for (int e = 0; e < COL_PTS; e++) {
            const int idx = tid + e * nthr, cc = idx % W, i = idx / W, j = j0 + cc;
            float2 v = make_float2(0, 0);
            if (j < ncols)
                v = bin_value<FAST>(planes, g, s, px, ib, slot, Ak, i, j, E[e]);
            sm[(size_t)cc * LD + fft_ix(i)] = fft_make(v.x, v.y);
        }
        __syncthreads();
        inverse(col, t, T, NY, tw, 1, true);
        float2 *out = X + p * nb;
#pragma unroll
        for (int e = 0; e < COL_PTS; e++) {
            const int idx = tid + e * nthr, cc = idx % W, i = idx / W, j = j0 + cc;
            if (j < ncols) {
                fft_c z = sm[(size_t)cc * LD + fft_ix(i)];
                out[(size_t)i * ncols + j] = make_float2(z.x, z.y);
            }
        }
        __syncthreads(); /* before the next pixel's bins overwrite the columns */
    }
}

/* Row i of the group's np pixels, Sb pixels at a time (blockDim = Sb × nxf/16): each row's real
 * inverse (nxf points as an nxf/2-point complex transform, nxf/16 threads a pixel), φ = atan(x/dc)
 * in place, then per output pixel φ and φ² added into total and s2 pixel after pixel (BF order),
 * skipping pixels without a plane or with A(k) = 0 (as k_phase_sum). Shared: Sb padded rows. */
__global__ void __launch_bounds__(1024) k_fused_rows(const float2 *__restrict__ X, cu_grid g, cu_pixels px,
                                                     size_t p0, size_t np, const fft_c *__restrict__ twx,
                                                     float inv_dc, double *__restrict__ total,
                                                     double *__restrict__ s2)
{
    extern __shared__ fft_c sm[];
    const int NX = g.nxf, M = NX / 2, TB = M / 8, ncols = g.ncols, i = blockIdx.x;
    const int tid = threadIdx.x, q = tid / TB, t = tid % TB, Sb = blockDim.x / TB, LD = FFT_PADDED(M);
    const size_t nb = (size_t)g.nyf * ncols;
    fft_c *z = sm + (size_t)q * LD;
    for (size_t u0 = 0; u0 < np; u0 += Sb) {
        const size_t p = u0 + q;
        const int live = p < np && px.slot[p0 + p] >= 0 && px.set_tab[p0 + p] != 0.0;
        if (live) {
            const float2 *row = X + p * nb + (size_t)i * ncols;
            for (int k = t; k < M; k += TB) {
                float2 a = row[k], b = row[M - k];
                z[fft_ix(k)] = fft_c2r_pre(fft_make(a.x, a.y), fft_make(b.x, b.y), k, twx);
            }
        }
        __syncthreads();
        inverse(z, t, TB, M, twx, 2, live);
        if (live) /* z[m] = x[2m] + i·x[2m+1] */
            for (int m = t; m < M; m += TB) {
                fft_c v = z[fft_ix(m)];
                z[fft_ix(m)] = fft_make(atanf(v.x * inv_dc), atanf(v.y * inv_dc));
            }
        __syncthreads();
        for (int n = tid; n < NX; n += blockDim.x) {
            const size_t r = (size_t)i * NX + n;
            double tt = total[r], qq = s2[r];
            for (size_t u = u0; u < u0 + Sb && u < np; u++) {
                if (px.slot[p0 + u] < 0 || px.set_tab[p0 + u] == 0.0)
                    continue;
                const fft_c v = sm[(u - u0) * LD + fft_ix(n >> 1)];
                double ph = (n & 1) ? v.y : v.x;
                tt += ph;
                qq += ph * ph; /* exact: ph is a float (as k_phase_sum) */
            }
            total[r] = tt, s2[r] = qq;
        }
        __syncthreads(); /* before the next pixels overwrite the rows */
    }
}

extern "C" void cu_fused_twiddles(int nyf, int nxf, void *host)
{
    fft_c *h = (fft_c *)host;
    fft_twiddles(h, nyf);
    fft_twiddles(h + nyf, nxf);
}

extern "C" int cu_loss_fused(const void *planes, cu_grid gr, const cu_set *s, cu_pixels px, size_t p0, size_t np,
                             size_t chunk, const void *tw, void *X, double *total, double *s2, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    const int NY = gr.nyf, NX = gr.nxf, T = NY / COL_PTS, W = T >= COL_THREADS ? 1 : COL_THREADS / T;
    const size_t S = cu_fused_group((size_t)NY, (size_t)NX, chunk), Sb = cu_fused_row_pixels((size_t)NX, S);
    const fft_c *twy = (const fft_c *)tw, *twx = twy + NY;
    const size_t col_smem = (size_t)W * FFT_PADDED(NY) * sizeof(fft_c),
                 row_smem = Sb * (size_t)FFT_PADDED(NX / 2) * sizeof(fft_c);
    const unsigned row_threads = (unsigned)(Sb * (size_t)(NX / 16));
    for (size_t g0 = 0; g0 < np; g0 += S) {
        const size_t n = np - g0 < S ? np - g0 : S;
        dim3 cg((unsigned)((gr.ncols + W - 1) / W), (unsigned)((n + COL_RUN - 1) / COL_RUN));
        if (s->fast)
            k_fused_cols<true><<<cg, W * T, col_smem, st>>>((const float2 *)planes, gr, *s, px, p0 + g0, n, W, twy,
                                                             (float2 *)X);
        else
            k_fused_cols<false><<<cg, W * T, col_smem, st>>>((const float2 *)planes, gr, *s, px, p0 + g0, n, W, twy,
                                                              (float2 *)X);
        k_fused_rows<<<(unsigned)NY, row_threads, row_smem, st>>>((const float2 *)X, gr, px, p0 + g0, n, twx,
                                                                   s->inv_dc, total, s2);
    }
    return (int)cudaGetLastError();
}
