/* gstart.c — a CUDA session's start from a .qem on the GPU (gstart.h). The count streams go up as
 * stored (qem_table.h), are decoded by decode.cu's kernels, and only sums and G's planes are kept:
 * per block batch the calibration's counts (freed after), per BF chunk its scan columns, one
 * batched 2-D real FFT of them written straight into G's device planes (the same transform as
 * gbuild.c's rows-then-columns, in cuFFT's float rounding: SPEC §11's agreement). */
#include "cuda/gstart.h"

#include "calibrate/calibrate_internal.h"
#include "codec/rans_tables.h"
#include "common/err.h"
#include "common/mem_device.h"
#include "common/parallel.h"
#include "cuda/cuda.h"
#include "cuda/decode.h"
#include "cuda/qem_table.h"
#include "source/source.h"

#include <cuda_runtime_api.h>
#include <cufft.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ssb4d_status cu_fail(ssb4d_err *err, int e, const char *what)
{
    if (e == cudaErrorMemoryAllocation)
        return ssb_fail(err, SSB4D_ENOMEM, "the GPU is out of memory (%s)", what);
    return ssb_fail(err, SSB4D_EIO, "CUDA error in %s: %s", what, cudaGetErrorString((cudaError_t)e));
}

#define CK(call, what)                                                                                            \
    do {                                                                                                          \
        int e_ = (int)(call);                                                                                     \
        if (e_ != cudaSuccess) {                                                                                  \
            st = cu_fail(err, e_, what);                                                                          \
            goto done;                                                                                            \
        }                                                                                                         \
    } while (0)

int cuda_start_takes(ssb4d_source *src)
{
    qem_file *f = ssb_source_qem(src);
    return f && !ssb4d_source_is_float(src);
}

void cuda_start_sizes(const qem_info *in, size_t upload, size_t n_bf, const cuda_start_opts *o, cuda_start_bytes *out)
{
    size_t blocks = o && o->blocks ? o->blocks : CUDA_START_BLOCKS, chunk = o && o->bf_chunk ? o->bf_chunk : CUDA_START_BF_CHUNK;
    blocks = blocks < in->n_blocks ? blocks : in->n_blocks;
    chunk = chunk < n_bf ? chunk : n_bf;
    out->upload = upload; /* plan/device_model.c's dev_model_start: the same formulas */
    out->calib = upload + blocks * in->n_pix * 512 * 2 + in->n_pix * 8 + in->n_scans * 3 * 8 + 4 * in->n_pix;
    out->gbuild = upload + chunk * in->n_scans * 4 + n_bf * (8 + 4);
}

/* Refused before anything goes up when the GPU's free memory cannot hold `need` bytes: one line
 * (the backend then does the step on the CPU). */
static ssb4d_status room_for(size_t need, const char *what, ssb4d_err *err)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess || need <= fr)
        return SSB4D_OK;
    return ssb_fail(err, SSB4D_ENOMEM, "%s needs %.2f GiB of GPU memory and %.2f GiB is free (of %.2f GiB)", what,
                    (double)need / (1 << 30), (double)fr / (1 << 30), (double)tot / (1 << 30));
}

/* The upload's bytes from the file's numbers (qem_dev_table_bytes without the table). */
static size_t upload_bytes(const qem_info *in)
{
    return in->payload_bytes + 4 * (in->n_blocks * in->n_pix + in->n_chunks) + in->n_blocks * in->n_pix +
           in->n_blocks * (3 * 8 + 4) + 64 * 1024 + CU_QEM_FS_WORDS * 4 + 8;
}

/* ---- the streams on the device --------------------------------------------------------------- */

typedef struct {
    const qem_file *f;
    qem_dev_table t;
    void *pay, *off, *sel, *tab, *models, *key;
    cu_qem q;
    cudaStream_t stream;
} qem_up;

static void qem_down(qem_up *u)
{
    cudaFree(u->pay), cudaFree(u->off), cudaFree(u->sel), cudaFree(u->tab), cudaFree(u->models), cudaFree(u->key);
    qem_dev_table_free(&u->t);
    memset(u, 0, sizeof *u);
}

/* The upload: a pageable copy goes through the driver's own staging, one core's memcpy at a time
 * (well under the link's speed); here all cores copy the mapped file into two pinned buffers in
 * turn, each sent while the other fills. */
#define STAGE_BYTES ((size_t)64 << 20)
typedef struct {
    void *buf[2];
    cudaEvent_t sent[2];
    int next, nt;
    cudaStream_t stream;
} stager;

/* m bytes copied by nt threads, 1 MiB a task. */
static void par_copy(void *to, const void *from, size_t m, int nt)
{
    const size_t piece = (size_t)1 << 20, np = (m + piece - 1) / piece;
#pragma omp parallel for num_threads(nt) schedule(static) if (np > 1)
    for (size_t k = 0; k < np; k++)
        memcpy((char *)to + k * piece, (const char *)from + k * piece, m - k * piece < piece ? m - k * piece : piece);
}

static void stager_free(stager *g)
{
    for (int i = 0; i < 2; i++) {
        if (g->sent[i])
            cudaEventSynchronize(g->sent[i]), cudaEventDestroy(g->sent[i]);
        if (g->buf[i])
            cudaFreeHost(g->buf[i]);
    }
}

static int stager_init(stager *g, cudaStream_t stream)
{
    memset(g, 0, sizeof *g);
    g->stream = stream;
    g->nt = ssb_threads_resolve(0);
    for (int i = 0; i < 2; i++) {
        int e = cudaHostAlloc(&g->buf[i], STAGE_BYTES, cudaHostAllocDefault);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&g->sent[i], cudaEventDisableTiming);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

static int stager_send(stager *g, void *dst, const void *src, size_t n)
{
    for (size_t o = 0; o < n; o += STAGE_BYTES) {
        size_t m = n - o < STAGE_BYTES ? n - o : STAGE_BYTES;
        int i = g->next;
        g->next ^= 1;
        int e = cudaEventSynchronize(g->sent[i]); /* its last piece is on the device */
        if (e != cudaSuccess)
            return e;
        char *b = g->buf[i];
        par_copy(b, (const char *)src + o, m, g->nt);
        if ((e = cudaMemcpyAsync((char *)dst + o, b, m, cudaMemcpyHostToDevice, g->stream)) != cudaSuccess ||
            (e = cudaEventRecord(g->sent[i], g->stream)) != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* The way back (G's planes into its host planes): piece p comes into pinned buffer p % 2 while
 * all cores copy piece p − 1 out of the other. */
static int stager_recv(stager *g, void *dst, const void *src, size_t n)
{
    size_t prev_o = 0, prev_m = 0;
    int e = cudaSuccess;
    for (size_t o = 0, p = 0; o < n; o += STAGE_BYTES, p++) {
        size_t m = n - o < STAGE_BYTES ? n - o : STAGE_BYTES;
        int i = (int)(p & 1);
        if ((e = cudaMemcpyAsync(g->buf[i], (const char *)src + o, m, cudaMemcpyDeviceToHost, g->stream)) != cudaSuccess ||
            (e = cudaEventRecord(g->sent[i], g->stream)) != cudaSuccess)
            return e;
        if (p) {
            if ((e = cudaEventSynchronize(g->sent[i ^ 1])) != cudaSuccess)
                return e;
            par_copy((char *)dst + prev_o, g->buf[i ^ 1], prev_m, g->nt);
        }
        prev_o = o, prev_m = m;
    }
    if (n) {
        int i = (int)(((n + STAGE_BYTES - 1) / STAGE_BYTES - 1) & 1);
        if ((e = cudaEventSynchronize(g->sent[i])) != cudaSuccess)
            return e;
        par_copy((char *)dst + prev_o, g->buf[i], prev_m, g->nt);
    }
    return e;
}

static ssb4d_status qem_upload(const qem_file *f, cudaStream_t stream, qem_up *u, ssb4d_err *err)
{
    memset(u, 0, sizeof *u);
    u->f = f;
    u->stream = stream;
    ssb4d_status st = qem_dev_table_make(f, &u->t, err);
    if (st)
        return st;
    const qem_dev_table *t = &u->t;
    const size_t nb = t->n_blocks;
    stager sg = {0};
    uint32_t *fs = malloc(CU_QEM_FS_WORDS * sizeof *fs);
    if (!fs)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    for (int m = 0; m < 64; m++)
        for (int s = 0; s < 33; s++)
            fs[m * 33 + s] = (uint32_t)qem_rans_start[m][s] << 16 | qem_rans_freq[m][s];
    CK(cudaMalloc(&u->pay, t->pay_bytes ? t->pay_bytes : 1), "the .qem's streams");
    CK(cudaMalloc(&u->off, 4 * t->off_words), "the .qem's stream offsets");
    CK(cudaMalloc(&u->sel, t->sel_bytes ? t->sel_bytes : 1), "the .qem's selectors");
    CK(cudaMalloc(&u->tab, nb * (3 * 8 + 4)), "the .qem's block table");
    CK(cudaMalloc(&u->models, 64 * 1024 + CU_QEM_FS_WORDS * 4), "the rANS tables");
    CK(cudaMalloc(&u->key, 8), "the decoder's error key");
    /* SSB4D_GSTART_REGISTER=1 (a trial): the mapped file registered with the driver, read-only,
     * so the copies go straight from it (no staging copy); else, or when that is refused, staged */
    if (getenv("SSB4D_GSTART_REGISTER") && t->n_chunks) {
        uintptr_t lo = UINTPTR_MAX, hi = 0;
        for (size_t c = 0; c < t->n_chunks; c++) {
            qem_chunk_view v;
            qem_chunk_get(f, c, &v);
            const uint8_t *a[3] = {v.payload, v.offsets, v.selectors};
            size_t n[3] = {v.payload_bytes, 4 * (v.nblocks * t->P + 1), v.nblocks * t->P};
            for (int i = 0; i < 3; i++) {
                lo = (uintptr_t)a[i] < lo ? (uintptr_t)a[i] : lo;
                hi = (uintptr_t)a[i] + n[i] > hi ? (uintptr_t)a[i] + n[i] : hi;
            }
        }
        const uintptr_t page = 4096;
        lo &= ~(page - 1), hi = (hi + page - 1) & ~(page - 1);
        cudaError_t re = cudaHostRegister((void *)lo, hi - lo, cudaHostRegisterReadOnly);
        if (re != cudaSuccess)
            fprintf(stderr, "ssb4d: registering the mapped file refused (%s): staged\n", cudaGetErrorString(re));
        if (re == cudaSuccess) {
            for (size_t c = 0; c < t->n_chunks && !st; c++) {
                qem_chunk_view v;
                qem_chunk_get(f, c, &v);
                if (cudaMemcpyAsync((char *)u->pay + t->chunk_pay[c], v.payload, v.payload_bytes, cudaMemcpyHostToDevice,
                                    stream) != cudaSuccess ||
                    cudaMemcpyAsync((uint32_t *)u->off + t->chunk_off[c], v.offsets, 4 * (v.nblocks * t->P + 1),
                                    cudaMemcpyHostToDevice, stream) != cudaSuccess ||
                    cudaMemcpyAsync((char *)u->sel + v.block0 * t->P, v.selectors, v.nblocks * t->P,
                                    cudaMemcpyHostToDevice, stream) != cudaSuccess)
                    st = ssb_fail(err, SSB4D_EIO, "copying the streams to the GPU (registered)");
            }
            cudaStreamSynchronize(stream);
            cudaHostUnregister((void *)lo);
            if (st)
                goto done;
            goto table;
        }
        cudaGetLastError(); /* refused: staged below */
    }
    CK(stager_init(&sg, stream), "pinned host memory for the upload");
    for (size_t c = 0; c < t->n_chunks; c++) {
        qem_chunk_view v;
        qem_chunk_get(f, c, &v);
        CK(stager_send(&sg, (char *)u->pay + t->chunk_pay[c], v.payload, v.payload_bytes),
           "copying the streams to the GPU");
        CK(stager_send(&sg, (uint32_t *)u->off + t->chunk_off[c], v.offsets, 4 * (v.nblocks * t->P + 1)),
           "copying the stream offsets to the GPU");
        CK(stager_send(&sg, (char *)u->sel + v.block0 * t->P, v.selectors, v.nblocks * t->P),
           "copying the selectors to the GPU");
    }
table:;
    unsigned long long *tab = u->tab;
    CK(cudaMemcpy(tab, t->paybase, nb * 8, cudaMemcpyHostToDevice), "copying the block table");
    CK(cudaMemcpy(tab + nb, t->offidx, nb * 8, cudaMemcpyHostToDevice), "copying the block table");
    CK(cudaMemcpy(tab + 2 * nb, t->t0, nb * 8, cudaMemcpyHostToDevice), "copying the block table");
    CK(cudaMemcpy(tab + 3 * nb, t->n, nb * 4, cudaMemcpyHostToDevice), "copying the block table");
    CK(cudaMemcpy(u->models, qem_rans_slot_symbol, 64 * 1024, cudaMemcpyHostToDevice), "copying the rANS tables");
    CK(cudaMemcpy((char *)u->models + 64 * 1024, fs, CU_QEM_FS_WORDS * 4, cudaMemcpyHostToDevice),
       "copying the rANS tables");
    CK(cudaMemset(u->key, 0xff, 8), "the decoder's error key");
    CK(cudaDeviceSynchronize(), "the upload"); /* the legacy stream's copies before the kernels' stream */
    const qem_info *in = qem_get_info(f);
    u->q = (cu_qem){.pay = u->pay, .off = u->off, .sel = u->sel, .paybase = tab, .offidx = tab + nb,
                    .t0 = tab + 2 * nb, .n = (const unsigned *)(tab + 3 * nb), .P = t->P, .N = t->N,
                    .n_blocks = nb, .det_cols = (unsigned)in->shape[3],
                    .maxval = in->dtype_bytes == 1 ? 255u : 65535u, .err_key = u->key,
                    .slot_sym = u->models, .fs = (const uint32_t *)((char *)u->models + 64 * 1024)};
done:
    stager_free(&sg); /* waits for the last pieces */
    free(fs);
    if (st)
        qem_down(u);
    return st;
}

/* The streams on the device, kept between the calibration and the G build (gstart.h). */
struct cuda_start {
    qem_up u;
};

void cuda_start_free(cuda_start *k)
{
    if (!k)
        return;
    qem_down(&k->u);
    free(k);
}

/* The streams of f on the device for a step on `stream`: *keep's when it holds f's (reused is set),
 * else uploaded now (and left in *keep for the next step; keep NULL: the caller frees it). */
static ssb4d_status start_get(const qem_file *f, cudaStream_t stream, cuda_start **keep, cuda_start **out,
                              int *reused, ssb4d_err *err)
{
    *out = NULL;
    *reused = keep && *keep && (*keep)->u.f == f;
    if (*reused) {
        *out = *keep;
        (*out)->u.stream = stream;
        return SSB4D_OK;
    }
    if (keep && *keep) {
        cuda_start_free(*keep);
        *keep = NULL;
    }
    cuda_start *k = calloc(1, sizeof *k);
    if (!k)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = qem_upload(f, stream, &k->u, err);
    if (st) {
        free(k);
        return st;
    }
    if (keep)
        *keep = k;
    *out = k;
    return SSB4D_OK;
}

/* After the kernels: a damaged stream is reported by the CPU's decoder (the same words). */
static ssb4d_status check_streams(qem_up *u, ssb4d_err *err)
{
    unsigned long long key = 0;
    ssb4d_status st = SSB4D_OK;
    CK(cudaStreamSynchronize(u->stream), "decoding the streams");
    CK(cudaMemcpy(&key, u->key, 8, cudaMemcpyDeviceToHost), "reading the decoder's error key");
    if (key != ~0ull) {
        int32_t k = (int32_t)(key % u->t.P);
        uint16_t buf[512];
        st = qem_decode_block(u->f, (size_t)(key / u->t.P), &k, 1, buf, err);
        if (!st)
            st = ssb_fail(err, SSB4D_EINTERNAL, "the GPU's decoder refused block %llu pixel %d, which the CPU's decodes",
                          key / u->t.P, (int)k);
    }
done:
    return st;
}

/* ---- the calibration's sums ------------------------------------------------------------------ */

typedef struct {
    qem_up *u;
    ssb4d_mem *mem;
    size_t blocks, npos;
    uint16_t *dec;
    unsigned long long *tot, *mom;
    int *pix;
    cudaStream_t stream;
} cal_dev;

static ssb4d_status cal_totals(void *user, uint64_t *tot, uint64_t *mom, ssb4d_err *err)
{
    cal_dev *c = user;
    const qem_dev_table *t = &c->u->t;
    ssb4d_status st = SSB4D_OK;
    const size_t P = t->P;
    c->blocks = c->blocks < t->n_blocks ? c->blocks : t->n_blocks ? t->n_blocks : 1; /* cuda_start_sizes' */
    CK(cudaMalloc((void **)&c->dec, c->blocks * P * 512 * 2), "the calibration's block of counts");
    CK(cudaMalloc((void **)&c->tot, P * 8), "the calibration's totals");
    CK(cudaMalloc((void **)&c->mom, c->npos * 3 * 8), "the calibration's moments");
    CK(cudaMalloc((void **)&c->pix, 4 * P), "the flagged pixels");
    CK(cudaMemsetAsync(c->tot, 0, P * 8, c->stream), "the calibration's totals");
    CK(cudaMemsetAsync(c->mom, 0, c->npos * 3 * 8, c->stream), "the calibration's moments");
    for (size_t b0 = 0; b0 < t->n_blocks; b0 += c->blocks) {
        size_t nb = t->n_blocks - b0 < c->blocks ? t->n_blocks - b0 : c->blocks;
        /* a poll per batch: it waits for the one before, so a cancel stops within a batch */
        CK(cudaStreamSynchronize(c->stream), "decoding the streams");
        if (ssb4d_mem_progress(c->mem, 0.9 * (double)b0 / (double)t->n_blocks))
            return ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
        CK(cu_qem_decode_counts(c->u->q, b0, nb, c->dec, c->tot, c->stream), "decoding the streams");
        if (mom)
            CK(cu_qem_moments(c->u->q, b0, nb, c->dec, c->mom, c->stream), "the per-scan moments");
    }
    if ((st = check_streams(c->u, err)))
        return st;
    CK(cudaMemcpy(tot, c->tot, P * 8, cudaMemcpyDeviceToHost), "reading the totals");
    if (mom)
        CK(cudaMemcpy(mom, c->mom, c->npos * 3 * 8, cudaMemcpyDeviceToHost), "reading the moments");
    cudaFree(c->dec); /* the unflag pass needs only the moments */
    c->dec = NULL;
done:
    return st;
}

static ssb4d_status cal_unflag(void *user, const int32_t *pix, size_t n, uint64_t *mom, ssb4d_err *err)
{
    cal_dev *c = user;
    ssb4d_status st = SSB4D_OK;
    if (!n)
        return SSB4D_OK;
    CK(cudaMemcpyAsync(c->pix, pix, 4 * n, cudaMemcpyHostToDevice, c->stream), "the flagged pixels");
    CK(cu_qem_unflag(c->u->q, c->pix, n, c->mom, c->stream), "the flagged pixels' moments");
    if ((st = check_streams(c->u, err)))
        return st;
    CK(cudaMemcpy(mom, c->mom, c->npos * 3 * 8, cudaMemcpyDeviceToHost), "reading the moments");
done:
    return st;
}

ssb4d_status cuda_calibrate_qem(ssb4d_source *src, const ssb4d_calib_params *p, const cuda_start_opts *o,
                                cuda_start **keep, ssb4d_calibration *out, ssb4d_err *err)
{
    memset(out, 0, sizeof *out);
    if (!cuda_start_takes(src))
        return ssb_fail(err, SSB4D_EINVAL, "the GPU's calibration reads a .qem of counts");
    const qem_file *f = ssb_source_qem(src);
    const qem_info *in = qem_get_info(f);
    cal_dev c = {.mem = p->mem, .npos = in->n_scans};
    c.blocks = o && o->blocks ? o->blocks : CUDA_START_BLOCKS;
    ssb4d_status st = SSB4D_OK;
    cuda_start *k = NULL;
    int reused = 0;
    cuda_start_bytes sz;
    cuda_start_sizes(in, upload_bytes(in), 0, o, &sz);
    const int held = keep && *keep && (*keep)->u.f == f;
    if ((st = room_for(sz.calib - (held ? sz.upload : 0), "the calibration on the GPU (the streams and a batch of counts)",
                       err)))
        return st;
    CK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "creating a stream");
    if ((st = start_get(f, c.stream, keep, &k, &reused, err)))
        goto done;
    c.u = &k->u;
    ssb_mem_stage_device_peak(p->mem, sz.calib);
    ssb_cal_sums sums = {cal_totals, cal_unflag, &c};
    st = ssb_calibrate_with_sums(src, p, &sums, out, err);
done:
    cudaFree(c.dec), cudaFree(c.tot), cudaFree(c.mom), cudaFree(c.pix);
    if (!keep)
        cuda_start_free(k);
    if (c.stream)
        cudaStreamDestroy(c.stream);
    return st;
}

/* ---- G --------------------------------------------------------------------------------------- */

/* A batched 2-D real-to-complex plan: batch images of ny x nx floats (idist N) into half planes of
 * stride float2 (odist): gbuild.c's row FFTs then column FFTs, as one transform. */
static cufftResult r2c_plan(cufftHandle *h, size_t ny, size_t nx, size_t stride, size_t batch, cudaStream_t s)
{
    int n[2] = {(int)ny, (int)nx}, inem[2] = {(int)ny, (int)nx}, onem[2] = {(int)ny, (int)(nx / 2 + 1)};
    cufftResult r = cufftPlanMany(h, 2, n, inem, 1, (int)(ny * nx), onem, 1, (int)stride, CUFFT_R2C, (int)batch);
    if (r == CUFFT_SUCCESS)
        r = cufftSetStream(*h, s);
    return r;
}

ssb4d_status cuda_gbuild_qem(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                             const ssb4d_gbuild_opts *o, const cuda_start_opts *so, cuda_start **keep, ssb4d_mem *mem,
                             ssb4d_G **out, ssb4d_err *err)
{
    *out = NULL;
    if (!cuda_start_takes(src))
        return ssb_fail(err, SSB4D_EINVAL, "the GPU's G build reads a .qem of counts");
    ssb4d_G *G = NULL;
    ssb4d_status st = gbuild_layout(src, g, bf_pix, n_bf, o, mem, &G, err);
    if (st)
        return st;
    const qem_info *in = qem_get_info(ssb_source_qem(src));
    cuda_start *k = NULL;
    int reused = 0;
    float *col = NULL;
    unsigned long long *tot = NULL;
    int *pix = NULL;
    uint64_t *tot_h = NULL;
    int32_t *order = NULL;
    cufftHandle plan = 0, plan_last = 0;
    int have_plan = 0, have_last = 0;
    void *planes = NULL, *sv = NULL;
    size_t chunk = so && so->bf_chunk ? so->bf_chunk : CUDA_START_BF_CHUNK;
    size_t n_st = 0;
    cuda_start_bytes sz;
    cuda_start_sizes(in, upload_bytes(in), n_bf, so, &sz);
    const int held = keep && *keep && (*keep)->u.f == ssb_source_qem(src);
    if ((st = room_for(sz.gbuild - (held ? sz.upload : 0) + (G->store.n_resident ? G->store.n_resident : 1) * G->plane_stride * sizeof(cufftComplex),
                       "G built on the GPU (the streams, a chunk of columns and G's planes)", err)))
        goto done;
    if ((st = cuda_G_attach_blank(G, &planes, &sv, err)))
        goto done;
    cudaStream_t stream = sv;
    /* the stored pixels first (their slots, in BF order), then the others (their totals only) */
    order = malloc(n_bf * sizeof *order);
    tot_h = malloc(n_bf * sizeof *tot_h);
    if (!order || !tot_h) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t ib = 0; ib < n_bf; ib++)
        if (G->plane_of[ib] >= 0)
            order[n_st++] = G->bf_pix[ib];
    for (size_t ib = 0, j = n_st; ib < n_bf; ib++)
        if (G->plane_of[ib] < 0)
            order[j++] = G->bf_pix[ib];
    chunk = chunk < n_st ? chunk : n_st ? n_st : 1;
    if ((st = start_get(ssb_source_qem(src), stream, keep, &k, &reused, err)))
        goto done;
    const cu_qem q = k->u.q;
    {
        size_t now = 0, peak = 0;
        cuda_G_device_bytes(G, &now, &peak);
        ssb_mem_stage_device_peak(mem, sz.gbuild + now);
    }
    CK(cudaMalloc((void **)&col, chunk * in->n_scans * sizeof(float)), "G's scan columns");
    CK(cudaMalloc((void **)&tot, n_bf * 8), "G's totals");
    CK(cudaMalloc((void **)&pix, n_bf * 4), "G's pixels");
    CK(cudaMemcpyAsync(pix, order, n_bf * 4, cudaMemcpyHostToDevice, stream), "G's pixels");
    CK(cudaMemsetAsync(tot, 0, n_bf * 8, stream), "G's totals");
    if (n_st) {
        cufftResult r = r2c_plan(&plan, G->ny, G->nx, G->plane_stride, chunk, stream);
        have_plan = r == CUFFT_SUCCESS;
        if (have_plan && n_st % chunk) {
            r = r2c_plan(&plan_last, G->ny, G->nx, G->plane_stride, n_st % chunk, stream);
            have_last = r == CUFFT_SUCCESS;
        }
        if (r != CUFFT_SUCCESS) {
            st = r == CUFFT_ALLOC_FAILED ? ssb_fail(err, SSB4D_ENOMEM, "the GPU is out of memory (cuFFT plan of G)")
                                         : ssb_fail(err, SSB4D_EIO, "cuFFT could not plan G's %zux%zu transform (%d)",
                                                    G->ny, G->nx, (int)r);
            goto done;
        }
    }
    for (size_t c0 = 0; c0 < n_st; c0 += chunk) {
        size_t m = n_st - c0 < chunk ? n_st - c0 : chunk;
        CK(cudaStreamSynchronize(stream), "building G");
        double frac = (double)c0 / (double)n_st;
        if (ssb4d_mem_progress(mem, frac) || (o->progress && o->progress(o->progress_user, "G build", frac))) {
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
            goto done;
        }
        CK(cu_qem_decode_columns(q, pix + c0, m, col, tot + c0, stream), "decoding G's columns");
        cufftResult r = cufftExecR2C(m == chunk ? plan : plan_last, col, (cufftComplex *)planes + c0 * G->plane_stride);
        if (r != CUFFT_SUCCESS) {
            st = ssb_fail(err, SSB4D_EIO, "cuFFT failed on G's transform (%d)", (int)r);
            goto done;
        }
    }
    if (n_bf > n_st)
        CK(cu_qem_decode_columns(q, pix + n_st, n_bf - n_st, NULL, tot + n_st, stream), "G's totals");
    if ((st = check_streams(&k->u, err)))
        goto done;
    CK(cudaMemcpy(tot_h, tot, n_bf * 8, cudaMemcpyDeviceToHost), "reading G's totals");
    for (size_t ib = 0, a = 0, b = n_st; ib < n_bf; ib++) /* integers below 2^53: the CPU's doubles */
        G->totals[ib] = (double)tot_h[G->plane_of[ib] >= 0 ? a++ : b++];
    if (so && so->host_copy && G->store.data && n_st) {
        stager sg;
        int e = stager_init(&sg, stream);
        if (e == cudaSuccess)
            e = stager_recv(&sg, G->store.data, planes, n_st * G->plane_stride * sizeof(cufftComplex));
        stager_free(&sg);
        CK(e, "copying G back to the host");
    }
done:
    if (have_plan)
        cufftDestroy(plan);
    if (have_last)
        cufftDestroy(plan_last);
    cudaFree(col), cudaFree(tot), cudaFree(pix);
    if (!keep)
        cuda_start_free(k);
    free(order), free(tot_h);
    return gbuild_layout_finish(G, st, o, out, err);
}

ssb4d_status cuda_qem_columns(const qem_file *f, const int32_t *pix, size_t np, float *out, uint64_t *tot,
                              ssb4d_err *err)
{
    const qem_info *in = qem_get_info(f);
    ssb4d_status st = SSB4D_OK;
    qem_up u = {0};
    cudaStream_t stream = NULL;
    float *col = NULL;
    unsigned long long *t = NULL;
    int *p = NULL;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating a stream");
    if ((st = qem_upload(f, stream, &u, err)))
        goto done;
    CK(cudaMalloc((void **)&col, (np ? np : 1) * in->n_scans * sizeof(float)), "the columns");
    CK(cudaMalloc((void **)&t, (np ? np : 1) * 8), "the totals");
    CK(cudaMalloc((void **)&p, (np ? np : 1) * 4), "the pixels");
    CK(cudaMemcpyAsync(p, pix, np * 4, cudaMemcpyHostToDevice, stream), "the pixels");
    CK(cudaMemsetAsync(t, 0, (np ? np : 1) * 8, stream), "the totals");
    CK(cu_qem_decode_columns(u.q, p, np, col, t, stream), "decoding the columns");
    if ((st = check_streams(&u, err)))
        goto done;
    CK(cudaMemcpy(out, col, np * in->n_scans * sizeof(float), cudaMemcpyDeviceToHost), "reading the columns");
    CK(cudaMemcpy(tot, t, np * 8, cudaMemcpyDeviceToHost), "reading the totals");
done:
    cudaFree(col), cudaFree(t), cudaFree(p);
    qem_down(&u);
    if (stream)
        cudaStreamDestroy(stream);
    return st;
}
