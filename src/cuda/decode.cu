/* decode.cu — the .qem count streams decoded on the GPU (decode.h): rans.c's decoder, one thread
 * per stream, the model tables in shared memory, and what the start of a session sums from the
 * counts (the calibration's totals and moments, G's columns). Integer sums go through integer
 * atomics: exact, so their order does not matter. */
#include "cuda/decode.h"

#include <cuda_runtime.h>

#define SMEM_BYTES (64 * 1024 + CU_QEM_FS_WORDS * 4)
#define THREADS 256

#include "cuda/decode_stream.cuh"

/* The tables into shared memory: fs words first, then the slot → symbol bytes. */
static __device__ void load_tables(const cu_qem &q, uint32_t *s_fs, uint8_t *s_sym)
{
    for (int i = threadIdx.x; i < CU_QEM_FS_WORDS; i += blockDim.x)
        s_fs[i] = q.fs[i];
    const uint4 *src = (const uint4 *)q.slot_sym;
    uint4 *dst = (uint4 *)s_sym;
    for (int i = threadIdx.x; i < 64 * 1024 / 16; i += blockDim.x)
        dst[i] = src[i];
    __syncthreads();
}

enum { MODE_COUNTS, MODE_COLUMNS, MODE_UNFLAG };

/* One stream per thread, grid-stride (the blocks stay resident: the tables load once a block).
 * Counts: streams s = (b − b0)·P + k of blocks [b0, b0 + nb). Columns and unflag: s = b·np + i. */
template <int MODE>
__global__ void __launch_bounds__(THREADS) k_decode(cu_qem q, size_t b0, size_t n_streams, const int *pix, size_t np,
                                                     uint16_t *dec, float *col, ull *tot, ull *mom)
{
    extern __shared__ uint4 smem[];
    uint32_t *s_fs = (uint32_t *)smem;
    uint8_t *s_sym = (uint8_t *)(s_fs + CU_QEM_FS_WORDS);
    load_tables(q, s_fs, s_sym);
    for (size_t s = (size_t)blockIdx.x * blockDim.x + threadIdx.x; s < n_streams; s += (size_t)gridDim.x * blockDim.x) {
        size_t b, k, i;
        if (MODE == MODE_COUNTS) {
            b = b0 + s / q.P, k = s % q.P, i = k;
        } else {
            b = s / np, i = s % np, k = (size_t)pix[i];
        }
        const unsigned long long oi = q.offidx[b] + k;
        const uint32_t o0 = q.off[oi], o1 = q.off[oi + 1];
        const uint8_t *buf = q.pay + q.paybase[b] + o0;
        const uint32_t sel = q.sel[b * q.P + k];
        const unsigned n = q.n[b];
        int bad;
        uint32_t sum;
        if (MODE == MODE_COUNTS) {
            EmitCounts e{dec + ((b - b0) * q.P + k) * 512, 0};
            bad = decode(sel, buf, o1 - o0, n, q.maxval, s_sym, s_fs, e);
            sum = e.sum;
        } else if (MODE == MODE_COLUMNS) {
            EmitColumn e{col ? col + i * q.N + q.t0[b] : nullptr, 0};
            bad = decode(sel, buf, o1 - o0, n, q.maxval, s_sym, s_fs, e);
            sum = e.sum;
        } else {
            EmitUnflag e{mom + 3 * q.t0[b], k / q.det_cols, k % q.det_cols, 0};
            bad = decode(sel, buf, o1 - o0, n, q.maxval, s_sym, s_fs, e);
            sum = 0;
        }
        if (bad)
            atomicMin(q.err_key, (ull)(b * q.P + k));
        else if (tot && sum)
            atomicAdd(tot + i, (ull)sum);
    }
}

/* Resident blocks for a grid-stride kernel with the tables' shared memory. */
template <int MODE> static int launch(cu_qem q, size_t b0, size_t n_streams, const int *pix, size_t np, uint16_t *dec,
                                      float *col, ull *tot, ull *mom, cudaStream_t st)
{
    if (n_streams == 0)
        return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(k_decode<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    int dev = 0, sms = 0, per = 0;
    if (e == cudaSuccess)
        e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_decode<MODE>, THREADS, SMEM_BYTES);
    if (e != cudaSuccess)
        return e;
    size_t want = (n_streams + THREADS - 1) / THREADS, most = (size_t)sms * (size_t)(per > 0 ? per : 1);
    unsigned grid = (unsigned)(want < most ? want : most);
    k_decode<MODE><<<grid, THREADS, SMEM_BYTES, st>>>(q, b0, n_streams, pix, np, dec, col, tot, mom);
    return cudaGetLastError();
}

extern "C" int cu_qem_decode_counts(cu_qem q, size_t b0, size_t nb, uint16_t *dec, unsigned long long *tot,
                                    void *stream)
{
    return launch<MODE_COUNTS>(q, b0, nb * q.P, nullptr, 0, dec, nullptr, tot, nullptr, (cudaStream_t)stream);
}

extern "C" int cu_qem_decode_columns(cu_qem q, const int *pix, size_t np, float *col, unsigned long long *tot,
                                     void *stream)
{
    return launch<MODE_COLUMNS>(q, 0, q.n_blocks * np, pix, np, nullptr, col, tot, nullptr, (cudaStream_t)stream);
}

extern "C" int cu_qem_unflag(cu_qem q, const int *pix, size_t np, unsigned long long *mom, void *stream)
{
    return launch<MODE_UNFLAG>(q, 0, q.n_blocks * np, pix, np, nullptr, nullptr, nullptr, mom, (cudaStream_t)stream);
}

/* Per scan j of block b0 + blockIdx.y: its moments over the pixels [k0, k0 + KSLICE) of slice
 * blockIdx.z (a warp reads 32 consecutive scans of one pixel: coalesced). */
#define KSLICE 256
__global__ void k_moments(cu_qem q, size_t b0, const uint16_t *dec, ull *mom)
{
    const unsigned j = blockIdx.x * blockDim.x + threadIdx.x;
    const size_t bb = blockIdx.y, b = b0 + bb;
    if (j >= q.n[b])
        return;
    const size_t k0 = (size_t)blockIdx.z * KSLICE, k1 = k0 + KSLICE < q.P ? k0 + KSLICE : q.P;
    ull row = k0 / q.det_cols, col = k0 % q.det_cols, s0 = 0, sr = 0, sc = 0;
    const uint16_t *d = dec + bb * q.P * 512 + j;
    for (size_t k = k0; k < k1; k++) {
        ull v = d[k * 512];
        s0 += v;
        sr += row * v;
        sc += col * v;
        if (++col == q.det_cols)
            col = 0, row++;
    }
    ull *m = mom + 3 * (q.t0[b] + j);
    if (s0) {
        atomicAdd(m, s0);
        atomicAdd(m + 1, sr);
        atomicAdd(m + 2, sc);
    }
}

extern "C" int cu_qem_moments(cu_qem q, size_t b0, size_t nb, const uint16_t *dec, unsigned long long *mom,
                              void *stream)
{
    if (nb == 0)
        return cudaSuccess;
    dim3 grid(512 / 128, (unsigned)nb, (unsigned)((q.P + KSLICE - 1) / KSLICE));
    k_moments<<<grid, 128, 0, (cudaStream_t)stream>>>(q, b0, dec, mom);
    return cudaGetLastError();
}
