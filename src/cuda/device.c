/* device.c — the CUDA backend (src/ssb/backend.h): G's planes in device memory and the SSB passes
 * over them.
 *
 * Plan, then execute: the planes go up once; a pass works through the BF pixels in chunks of
 * CHUNK/f² pixels (a fixed count for a grid, so the cuFFT plan, and with it each plane's bits,
 * never depend on the batch), for each parameter set: correct (−i·Ĉ), add into the object's sum
 * if asked, inverse-transform (one batched c2r), and add φ and φ² into per-pixel running sums in
 * BF order. The loss is reduced from those sums in one fixed-order block at the end. Work buffers
 * stay allocated between passes (a fit makes thousands). */
#include "cuda/cuda.h"
#include "common/clock.h"

#include "common/block.h"
#include "common/err.h"
#include "cuda/backend.h"
#include "cuda/kernels.h"
#include "cuda/memory.h"
#include "cuda/loss_fused.h"
#include "dist/blocks.h"
#include "ssb/backend.h"

#include <cuda_runtime_api.h>
#include <cufft.h>
#include <nvtx3/nvToolsExt.h> /* header only: free unless a profiler (Nsight Systems) listens */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK SSB_BLOCK /* BF pixels in flight at f = 1: one block (common/block.h) */
#define SYNC_EVERY 8 /* chunks between polls of the cancel flag (each poll waits for the device) */

typedef struct ssb_dev ssb_dev; /* the backend's state in G's store (G->store.dev) */

struct ssb_dev {
    int device;
    cudaStream_t stream;
    float2 *planes;            /* n_slots planes of stride float2 */
    size_t n_slots, stride;
    long long *slot_of;        /* host: per BF pixel of the owning G, its slot or -1 */
    /* work buffers, grown on demand */
    void *spec, *real, *sums;  /* chunk spectra, chunk c2r outputs, per-set totals and Σφ² (a band pass: its sums) */
    size_t spec_b, real_b, sums_b;
    void *bpart;               /* one block's sums, from zero (dist.h); a band pass: a kept partial */
    size_t bpart_b;
    void *seg;                 /* a band pass's segments */
    size_t seg_b;
    void *open;                /* a distributed pass: the chain's open block (dist_chain_run) */
    size_t open_b;
    void *tab;                 /* per-pass pixel tables */
    size_t tab_b;
    void *acc;                 /* object sum (a band pass: its parameter sets) */
    size_t acc_b;
    unsigned char *valid;
    size_t valid_b;
    double *fin;               /* per-set [Σφ², Σmean²] */
    size_t fin_b;
    float *mean;
    size_t mean_b;
    /* the object's last steps on the device: its spectrum F (transformed in place) and outputs */
    void *objF, *objout;
    size_t objF_b, objout_b;
    /* pinned host memory for what comes back (a preview's plane): one DMA, no staging copy */
    void *host;
    size_t host_b;
    /* the plans (the phase planes' batched c2r, the object's c2c), made once per shape and kept;
     * their one work area is ours (cufftSetWorkArea), so the device's bytes are all counted */
    cufftHandle plan, plan_obj;
    int plan_nyf, plan_nxf, plan_batch, obj_nyf, obj_nxf;
    void *work;
    size_t work_b, work_plan, work_obj;
    size_t bytes, peak;
    /* the fused loss (loss_fused.h): on with SSB4D_CUDA_LOSS=fused; its group's planes and
     * the twiddle tables of the grid tw_nyf × tw_nxf */
    int fused_on;
    void *xbuf, *twb;
    size_t xbuf_b, twb_b;
    int tw_nyf, tw_nxf;
    /* cuda_G_profile: per-stage seconds of dev_phases (each stage waited for, so slower) */
    int profile;
    double prof[CUDA_PROF_N], prof_t;
};

static ssb4d_status cuda_fail(ssb4d_err *err, cudaError_t e, const char *what)
{
    if (e == cudaErrorMemoryAllocation)
        return ssb_fail(err, SSB4D_ENOMEM, "the GPU is out of memory (%s)", what);
    return ssb_fail(err, SSB4D_EIO, "CUDA error in %s: %s", what, cudaGetErrorString(e));
}

int cuda_available(void)
{
    /* No driver node: no device, and the runtime is never initialised (it would load the driver
     * library and keep allocations that leak checkers report). */
    if (access("/dev/nvidiactl", F_OK) != 0 && access("/proc/driver/nvidia/version", F_OK) != 0)
        return 0;
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int cuda_device_info(char *name, size_t name_len, size_t *total_bytes)
{
    if (!cuda_available())
        return -1;
    struct cudaDeviceProp p;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
        return -1;
    if (name)
        snprintf(name, name_len, "%s", p.name);
    if (total_bytes)
        *total_bytes = p.totalGlobalMem;
    return 0;
}

static cudaError_t dev_alloc(ssb_dev *d, void **p, size_t *have, size_t want)
{
    if (*have >= want)
        return cudaSuccess;
    if (*p) {
        cudaFree(*p);
        d->bytes -= *have;
        *p = NULL, *have = 0;
    }
    cudaError_t e = cudaMalloc(p, want);
    if (e != cudaSuccess) {
        *p = NULL;
        return e;
    }
    *have = want;
    d->bytes += want;
    if (d->bytes > d->peak)
        d->peak = d->bytes;
    return cudaSuccess;
}

static void dev_free(ssb_dev *d)
{
    if (!d)
        return;
    cudaSetDevice(d->device);
    if (d->plan_batch)
        cufftDestroy(d->plan);
    if (d->obj_nyf)
        cufftDestroy(d->plan_obj);
    cudaFree(d->work), cudaFree(d->objF), cudaFree(d->objout);
    if (d->host)
        cudaFreeHost(d->host);
    cudaFree(d->planes), cudaFree(d->spec), cudaFree(d->real), cudaFree(d->sums), cudaFree(d->tab);
    cudaFree(d->acc), cudaFree(d->valid), cudaFree(d->fin), cudaFree(d->mean), cudaFree(d->bpart);
    cudaFree(d->seg), cudaFree(d->open), cudaFree(d->xbuf), cudaFree(d->twb);
    if (d->stream)
        cudaStreamDestroy(d->stream);
    free(d->slot_of);
    free(d);
}

/* The chunk for upsampling f: CHUNK/f² pixels, at least 1. */
static size_t chunk_of(int f) { size_t c = CHUNK / (size_t)(f * f); return c ? c : 1; }

static ssb4d_status fft_fail(ssb4d_err *err, cufftResult r, const char *what, int nyf, int nxf)
{
    if (r == CUFFT_ALLOC_FAILED)
        return ssb_fail(err, SSB4D_ENOMEM, "the GPU is out of memory (cuFFT plan)");
    return ssb_fail(err, SSB4D_EIO, "cuFFT could not plan the %dx%d %s (%d)", nyf, nxf, what, (int)r);
}

/* A plan without its own work area (cuFFT reports the size; we own the memory). */
static cufftResult make_plan(cufftHandle *h, int nyf, int nxf, int batch, int c2c, size_t *work)
{
    int n[2] = {nyf, nxf};
    cufftResult r = cufftCreate(h);
    if (r != CUFFT_SUCCESS)
        return r;
    if ((r = cufftSetAutoAllocation(*h, 0)) == CUFFT_SUCCESS)
        r = c2c ? cufftMakePlanMany(*h, 2, n, NULL, 1, nyf * nxf, NULL, 1, nyf * nxf, CUFFT_C2C, 1, work)
                : cufftMakePlanMany(*h, 2, n, NULL, 1, nyf * (nxf / 2 + 1), NULL, 1, nyf * nxf, CUFFT_C2R, batch,
                                    work);
    if (r != CUFFT_SUCCESS)
        cufftDestroy(*h);
    return r;
}

size_t cuda_fft_work_bytes(int nyf, int nxf, int batch, int c2c)
{
    if (!cuda_available())
        return 0;
    cufftHandle h;
    size_t w = 0;
    if (make_plan(&h, nyf, nxf, batch, c2c, &w) != CUFFT_SUCCESS)
        return 0;
    cufftDestroy(h);
    return w;
}

/* The one work area, grown to the larger plan's and handed to both (one stream: never in use
 * by two transforms at once). */
static ssb4d_status plans_work(ssb_dev *d, ssb4d_err *err)
{
    size_t want = d->work_plan > d->work_obj ? d->work_plan : d->work_obj;
    if (!want && !d->work)
        return SSB4D_OK; /* cuFFT asks none (512² and 256² c2r and c2c on an H100: 0 bytes) */
    cudaError_t e = dev_alloc(d, &d->work, &d->work_b, want);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "cuFFT's work area");
    if ((d->plan_batch && cufftSetWorkArea(d->plan, d->work) != CUFFT_SUCCESS) ||
        (d->obj_nyf && cufftSetWorkArea(d->plan_obj, d->work) != CUFFT_SUCCESS))
        return ssb_fail(err, SSB4D_EIO, "cuFFT refused its work area");
    return SSB4D_OK;
}

static ssb4d_status ensure_plan(ssb_dev *d, int nyf, int nxf, int batch, ssb4d_err *err)
{
    if (d->plan_batch && d->plan_nyf == nyf && d->plan_nxf == nxf && d->plan_batch == batch)
        return SSB4D_OK;
    if (d->plan_batch)
        cufftDestroy(d->plan), d->plan_batch = 0, d->work_plan = 0;
    cufftResult r = make_plan(&d->plan, nyf, nxf, batch, 0, &d->work_plan);
    if (r != CUFFT_SUCCESS)
        return fft_fail(err, r, "inverse transform", nyf, nxf);
    cufftSetStream(d->plan, d->stream);
    d->plan_nyf = nyf, d->plan_nxf = nxf, d->plan_batch = batch;
    return plans_work(d, err);
}

static ssb4d_status ensure_obj_plan(ssb_dev *d, int nyf, int nxf, ssb4d_err *err)
{
    if (d->obj_nyf == nyf && d->obj_nxf == nxf)
        return SSB4D_OK;
    if (d->obj_nyf)
        cufftDestroy(d->plan_obj), d->obj_nyf = 0, d->work_obj = 0;
    cufftResult r = make_plan(&d->plan_obj, nyf, nxf, 1, 1, &d->work_obj);
    if (r != CUFFT_SUCCESS)
        return fft_fail(err, r, "object transform", nyf, nxf);
    cufftSetStream(d->plan_obj, d->stream);
    d->obj_nyf = nyf, d->obj_nxf = nxf;
    return plans_work(d, err);
}

/* Pinned host memory of at least n bytes (kept; not device memory, so not in d->bytes). */
static ssb4d_status host_buf(ssb_dev *d, size_t n, ssb4d_err *err)
{
    if (d->host_b >= n)
        return SSB4D_OK;
    if (d->host)
        cudaFreeHost(d->host), d->host = NULL, d->host_b = 0;
    cudaError_t e = cudaMallocHost(&d->host, n);
    if (e != cudaSuccess) {
        d->host = NULL;
        return cuda_fail(err, e, "pinned host memory");
    }
    d->host_b = n;
    return SSB4D_OK;
}

static void set_of(const ssb_ctx *c, cu_set *s)
{
    memset(s, 0, sizeof *s);
    s->p = c->p;
    s->fast = c->fast;
    s->inv_w = c->inv_w;
    s->inv_dc = 1.0f / (float)c->dc;
}

#define CK(call, what)                                                                                            \
    do {                                                                                                          \
        cudaError_t e_ = (cudaError_t)(call);                                                                     \
        if (e_ != cudaSuccess) {                                                                                  \
            st = cuda_fail(err, e_, what);                                                                        \
            goto done;                                                                                            \
        }                                                                                                         \
    } while (0)

/* Profiling: the time since the last mark goes to stage k. */
static void mark(ssb_dev *d, int k)
{
    if (!d->profile)
        return;
    cudaStreamSynchronize(d->stream);
    double t = ssb_clock_s();
    d->prof[k] += t - d->prof_t;
    d->prof_t = t;
}

/* A pixel whose plane this process's copy holds: stored, and not on another rank. */
static int here(const ssb4d_G *G, size_t ib) { return G_stored(G, ib) && G->plane_of[ib] != G_REMOTE; }

#define TRY(call, what)                                                                                           \
    do {                                                                                                          \
        if (!st) {                                                                                                \
            cudaError_t e_ = (cudaError_t)(call);                                                                 \
            if (e_ != cudaSuccess)                                                                                \
                st = cuda_fail(err, e_, what);                                                                    \
        }                                                                                                         \
    } while (0)

/* ---- the chain of a distributed pass, on the device -----------------------------------------
 * dist.h's chain (dist_chain_run) with its vectors in device memory and the adds made there (a
 * partial of the exact loss is 2 × npix doubles per set: adding a rank's dozens of them on the
 * host would cost more than the pass); the messages go through the host. The adds are the
 * chain's, in its order, so every rank ends with one GPU's bits. */

static ssb4d_status vec_alloc(void *ctx, int what, size_t n, double **out, ssb4d_err *err)
{
    ssb_dev *d = ctx;
    ssb4d_status st = SSB4D_OK;
    *out = NULL;
    if (what == DIST_VEC_KEPT) { /* the pass's own, freed after it */
        TRY(cudaMalloc((void **)out, n * sizeof(double)), "the reduction's partials");
        if (st) {
            *out = NULL;
            return st;
        }
        d->bytes += n * sizeof(double);
        if (d->bytes > d->peak)
            d->peak = d->bytes;
        return st;
    }
    /* the open block and a head pixel's sums: work buffers kept between passes */
    void **buf = what == DIST_VEC_OPEN ? &d->open : &d->bpart;
    size_t *have = what == DIST_VEC_OPEN ? &d->open_b : &d->bpart_b;
    TRY(dev_alloc(d, buf, have, n * sizeof(double)), "the reduction's open block");
    if (what == DIST_VEC_OPEN)
        TRY(cudaMemsetAsync(*buf, 0, n * sizeof(double), d->stream), "the reduction");
    if (!st)
        *out = *buf;
    return st;
}

static void vec_release(void *ctx, int what, double *p, size_t n)
{
    ssb_dev *d = ctx;
    if (what == DIST_VEC_KEPT && p) {
        cudaFree(p);
        d->bytes -= n * sizeof(double);
    }
}

static ssb4d_status vec_add(void *ctx, double *dst, const double *src, size_t n, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    TRY(cu_add(dst, src, n, ((ssb_dev *)ctx)->stream), "the reduction");
    return st;
}

static ssb4d_status vec_copy(void *ctx, double *dst, const double *src, size_t n, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    TRY(cudaMemcpyAsync(dst, src, n * sizeof(double), cudaMemcpyDeviceToDevice, ((ssb_dev *)ctx)->stream),
        "the reduction");
    return st;
}

static ssb4d_status vec_zero(void *ctx, double *dst, size_t n, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    TRY(cudaMemsetAsync(dst, 0, n * sizeof(double), ((ssb_dev *)ctx)->stream), "the reduction");
    return st;
}

static ssb4d_status vec_to_host(void *ctx, double *host, const double *v, size_t n, ssb4d_err *err)
{
    ssb_dev *d = ctx;
    ssb4d_status st = SSB4D_OK;
    TRY(cudaMemcpyAsync(host, v, n * sizeof(double), cudaMemcpyDeviceToHost, d->stream), "the reduction");
    TRY(cudaStreamSynchronize(d->stream), "the reduction");
    return st;
}

static ssb4d_status vec_from_host(void *ctx, double *v, const double *host, size_t n, ssb4d_err *err)
{
    ssb_dev *d = ctx;
    ssb4d_status st = SSB4D_OK;
    TRY(cudaMemcpyAsync(v, host, n * sizeof(double), cudaMemcpyHostToDevice, d->stream), "the reduction");
    TRY(cudaStreamSynchronize(d->stream), "the reduction"); /* before the host buffer changes */
    return st;
}

static const dist_vec_ops dev_vec = {.host = 0, .alloc = vec_alloc, .release = vec_release, .add = vec_add,
                                     .copy = vec_copy, .zero = vec_zero, .to_host = vec_to_host,
                                     .from_host = vec_from_host};

/* One pass of dev_phases: its sets, grid, chunk and what it sums. */
typedef struct {
    ssb_dev *d;
    const ssb4d_G *G;
    const ssb_ctx *c;
    size_t n, n_bf, nyf, nxf, nb, npix, P, set0;
    size_t lo, hi;       /* this rank's pixels (all of G in one process) */
    int want_phase, do_acc;
    int fused;           /* the loss in one pass (loss_fused.h): no spectra, no phase planes */
    cu_grid gr;
    size_t chunks;       /* chunks run so far: the cancel flag is polled every SYNC_EVERY */
    ssb4d_mem *mem;
} dpass;

/* The fused loss's buffers (loss_fused.h): the group's planes, and the grid's twiddle tables made
 * on the host in double and uploaded when the grid changes. */
static ssb4d_status fused_init(ssb_dev *d, size_t nyf, size_t nxf, size_t P, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    TRY(dev_alloc(d, &d->xbuf, &d->xbuf_b, cu_fused_xbuf_bytes(nyf, nxf, P)), "the fused loss's planes");
    if (st || (d->tw_nyf == (int)nyf && d->tw_nxf == (int)nxf))
        return st;
    const size_t tb = cu_fused_tw_bytes(nyf, nxf);
    TRY(dev_alloc(d, &d->twb, &d->twb_b, tb), "the fused loss's twiddles");
    void *h = malloc(tb);
    if (!st && !h)
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    if (!st)
        cu_fused_twiddles((int)nyf, (int)nxf, h);
    TRY(cudaMemcpyAsync(d->twb, h, tb, cudaMemcpyHostToDevice, d->stream), "the fused loss's twiddles");
    TRY(cudaStreamSynchronize(d->stream), "the fused loss's twiddles"); /* before h goes */
    free(h);
    if (!st)
        d->tw_nyf = (int)nyf, d->tw_nxf = (int)nxf;
    return st;
}

/* The pass's pixel table on the device and its work buffers (sums zeroed, acc zeroed). */
static ssb4d_status dpass_init(dpass *p, ssb_dev *d, const ssb4d_G *G, const ssb_ctx *c, size_t n, int want_phase,
                               int do_acc, ssb4d_mem *mem, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    const size_t n_bf = G->n_bf, nyf = c[0].nyf, nxf = c[0].nxf, ncols = nxf / 2 + 1;
    *p = (dpass){.d = d, .G = G, .c = c, .n = n, .n_bf = n_bf, .nyf = nyf, .nxf = nxf, .nb = nyf * ncols,
                 .npix = nyf * nxf, .P = chunk_of(c[0].f), .lo = G_lo(G), .hi = G_hi(G),
                 .want_phase = want_phase, .do_acc = do_acc, .mem = mem};
    p->gr = (cu_grid){.ny = (int)G->ny, .nx = (int)G->nx, .nxh = (int)G->nxh, .stride = (long long)d->stride,
                      .f = c[0].f, .nyf = (int)nyf, .nxf = (int)nxf, .ncols = (int)ncols};
    const size_t nb = p->nb, npix = p->npix, P = p->P;
    if (nyf > 65535 || nxf > 65535 || P > 65535)
        return ssb_fail(err, SSB4D_EINVAL, "a %zux%zu grid is too large for the GPU pass", nyf, nxf);
    cudaSetDevice(d->device);
    /* the pass's table: per pixel slot, kx, ky; the grid's qr, qc; per set 5 values per pixel */
    const size_t set0 = 3 * n_bf + nyf + nxf, tab_n = set0 + 5 * n_bf * n;
    p->set0 = set0;
    double *h = malloc(tab_n * sizeof *h);
    if (!h)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    long long *hs = (long long *)h;
    for (size_t ib = 0; ib < n_bf; ib++) {
        size_t owner = G->view.ib ? G->view.ib[ib] : ib;
        hs[ib] = here(G, ib) ? d->slot_of[owner] : -1;
        h[n_bf + ib] = c[0].kx[ib];
        h[2 * n_bf + ib] = c[0].ky[ib];
    }
    memcpy(h + 3 * n_bf, c[0].qr, nyf * sizeof *h);
    memcpy(h + 3 * n_bf + nyf, c[0].qc, nxf * sizeof *h);
    for (size_t j = 0; j < n; j++) {
        double *t = h + set0 + 5 * n_bf * j;
        for (size_t ib = 0; ib < n_bf; ib++) {
            double a = 0, b = 0;
            if (c[j].fast)
                ssb_pixel_ab(&c[j], ib, &a, &b);
            t[ib] = c[j].Ak[ib];
            t[n_bf + ib] = c[j].Pk[ib].re;
            t[2 * n_bf + ib] = c[j].Pk[ib].im;
            t[3 * n_bf + ib] = a;
            t[4 * n_bf + ib] = b;
        }
    }
    TRY(dev_alloc(d, &d->tab, &d->tab_b, tab_n * sizeof *h), "the pixel table");
    TRY(cudaMemcpyAsync(d->tab, h, tab_n * sizeof *h, cudaMemcpyHostToDevice, d->stream), "the pixel table");
    TRY(cudaStreamSynchronize(d->stream), "the pixel table"); /* before h goes */
    free(h);
    p->fused = d->fused_on && want_phase && !do_acc && cu_fused_shape_ok(nyf, nxf);
    if (!p->fused) {
        TRY(dev_alloc(d, &d->spec, &d->spec_b, P * nb * sizeof(float2)), "the chunk spectra");
        TRY(dev_alloc(d, (void **)&d->valid, &d->valid_b, P), "the chunk flags");
    }
    if (want_phase) {
        const size_t len = n * 2 * npix; /* per set: Σφ and Σφ² per output pixel */
        if (!p->fused)
            TRY(dev_alloc(d, &d->real, &d->real_b, P * npix * sizeof(float)), "the chunk phase planes");
        TRY(dev_alloc(d, &d->sums, &d->sums_b, len * sizeof(double)), "the phase sums");
        TRY(cudaMemsetAsync(d->sums, 0, len * sizeof(double), d->stream), "the phase sums");
        TRY(dev_alloc(d, &d->bpart, &d->bpart_b, len * sizeof(double)), "a block's phase sums");
        TRY(dev_alloc(d, (void **)&d->fin, &d->fin_b, n * 2 * sizeof(double)), "the loss sums");
        if (!st)
            st = p->fused ? fused_init(d, nyf, nxf, P, err) : ensure_plan(d, (int)nyf, (int)nxf, (int)P, err);
    }
    if (do_acc) {
        TRY(dev_alloc(d, &d->acc, &d->acc_b, nb * 2 * sizeof(double)), "the object sum");
        TRY(cudaMemsetAsync(d->acc, 0, nb * 2 * sizeof(double), d->stream), "the object sum");
    }
    return st;
}

/* Pixels [a, b) in chunks of at most P: corrected, added into the object's sum (do_acc), and
 * their phases added into out (per set Σφ | Σφ², npix each; want_phase) pixel after pixel. */
static ssb4d_status dpass_pixels(dpass *p, size_t a, size_t b, double *out, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    ssb_dev *d = p->d;
    const size_t n_bf = p->n_bf, npix = p->npix;
    const double *dt = d->tab;
    for (size_t p0 = a; p0 < b; p0 += p->P, p->chunks++) {
        if (p->chunks % SYNC_EVERY == 0) {
            CK(cudaStreamSynchronize(d->stream), "a pass");
            if (ssb4d_mem_progress(p->mem, p->hi > p->lo ? (double)(p0 - p->lo) / (double)(p->hi - p->lo) : 1.0))
                return ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
        }
        size_t np = b - p0 < p->P ? b - p0 : p->P;
        for (size_t j = 0; j < p->n; j++) {
            cu_set s;
            set_of(&p->c[j], &s);
            cu_pixels px = {.slot = (const long long *)dt, .kx = dt + n_bf, .ky = dt + 2 * n_bf,
                            .set_tab = dt + p->set0 + 5 * n_bf * j, .qr = dt + 3 * n_bf,
                            .qc = dt + 3 * n_bf + p->nyf, .n_bf = n_bf};
            mark(d, CUDA_PROF_HOST);
            if (p->fused) { /* correction, transform and sums in one pass (profiled as c2r) */
                double *sums = out + j * 2 * npix;
                CK(cu_loss_fused(d->planes, p->gr, &s, px, p0, np, p->P, d->twb, d->xbuf, sums, sums + npix,
                                 d->stream), "the fused loss");
                mark(d, CUDA_PROF_FFT);
                continue;
            }
            CK(cu_correct(d->planes, p->gr, &s, px, p0, np, d->spec, d->stream), "the correction");
            mark(d, CUDA_PROF_CORRECT);
            /* A kernel of its own: made inside the correction (one thread per bin taking the
             * chunk's pixels in order) it ran at a quarter of the occupancy, slower at 256². */
            if (p->do_acc && j == 0)
                CK(cu_acc(d->spec, p->nb, np, d->acc, d->stream), "the object sum");
            mark(d, CUDA_PROF_ACC);
            if (!p->want_phase)
                continue;
            CK(cu_valid(px, px.set_tab, p0, np, d->valid, d->stream), "the chunk flags");
            cufftResult r = cufftExecC2R(d->plan, (cufftComplex *)d->spec, (cufftReal *)d->real);
            if (r != CUFFT_SUCCESS)
                return ssb_fail(err, SSB4D_EIO, "cuFFT's inverse transform failed (%d)", (int)r);
            mark(d, CUDA_PROF_FFT);
            double *sums = out + j * 2 * npix;
            CK(cu_phase_sum(d->real, npix, np, d->valid, s.inv_dc, sums, sums + npix, d->stream), "the phase sums");
            mark(d, CUDA_PROF_PHASE);
        }
    }
done:
    return st;
}

/* One pixel's phase sums into out, zeroed (dist_pix_fn): a pixel of a block begun on an earlier rank. */
static ssb4d_status dpass_pix(void *user, size_t ib, double *out, ssb4d_err *err)
{
    return dpass_pixels(user, ib, ib + 1, out, err);
}

/* The phase sums of this rank's pixels in blocks (dist.h): each block from zero, then into the
 * totals (one process, rank 0's whole blocks) or kept on the device for the chain; a distributed
 * G then runs the chain (dist/blocks.h), and every rank's device holds one GPU's
 * totals. Reached by every rank whatever st is. */
static ssb4d_status dpass_blocks(dpass *p, ssb4d_status st, ssb4d_err *err)
{
    ssb_dev *d = p->d;
    const ssb4d_G *G = p->G;
    const size_t len = p->n * 2 * p->npix;
    dist_blocks bl;
    st = dist_blocks_begin(&bl, st, G->dist, G->n_bf, p->lo, p->hi, len, &dev_vec, d, dpass_pix, p, NULL, err);
    for (size_t i = 0; !st && i < bl.nseg; i++) {
        const int route = dist_blocks_route(&bl, i);
        if (route == DIST_SKIP)
            continue; /* a block begun on an earlier rank: dpass_pix, once it arrives */
        double *part = route == DIST_TOTALS ? d->bpart : dist_blocks_slot(&bl, i);
        TRY(cudaMemsetAsync(part, 0, len * sizeof(double), d->stream), "a block's phase sums");
        if (!st)
            st = dpass_pixels(p, bl.segs[i].a, bl.segs[i].b, part, err);
        if (route == DIST_TOTALS)
            TRY(cu_add(d->sums, d->bpart, len, d->stream), "the phase sums");
    }
    st = dist_blocks_end(&bl, st, d->sums, err);
    dist_blocks_free(&bl);
    return st;
}

/* The object's sum of a distributed G: it passes rank to rank, each adding its own pixels in
 * BF order (dist_seq_*), so every rank ends with the one-process sum in acc. */
static ssb4d_status dpass_object_dist(dpass *p, ssb4d_status st, double complex *acc, ssb4d_err *err)
{
    ssb_dev *d = p->d;
    const size_t len = 2 * p->nb;
    dist_seq sq = {0};
    st = dist_seq_begin(p->G->dist, &sq, (double *)acc, len, st, err);
    TRY(cudaMemcpyAsync(d->acc, acc, len * sizeof(double), cudaMemcpyHostToDevice, d->stream), "the object sum");
    if (!st)
        st = dpass_pixels(p, p->lo, p->hi, NULL, err);
    TRY(cudaMemcpyAsync(acc, d->acc, len * sizeof(double), cudaMemcpyDeviceToHost, d->stream), "the object sum");
    TRY(cudaStreamSynchronize(d->stream), "the object sum");
    return dist_seq_end(p->G->dist, &sq, (double *)acc, len, st, err);
}

/* The pass: the loss of each set (loss), their mean phases (mean_phase) and set 0's object sum
 * (do_acc), left in d->acc, and copied to acc on the host when acc is given (a distributed G
 * needs it there: the sum travels rank to rank). */
static ssb4d_status dev_phases(ssb_dev *d, const ssb4d_G *G, const ssb_ctx *c, size_t n, double *loss,
                               float *mean_phase, int do_acc, double complex *acc, ssb4d_mem *mem, ssb4d_err *err)
{
    const int want_phase = loss || mean_phase;
    /* the two reductions differ (dist.h), or the loss is fused and the object's sum is not: two passes */
    if ((G->dist || (d->fused_on && cu_fused_shape_ok(c[0].nyf, c[0].nxf))) && do_acc && want_phase) {
        ssb4d_status st = dev_phases(d, G, c, n, NULL, NULL, 1, acc, mem, err);
        return st ? st : dev_phases(d, G, c, n, loss, mean_phase, 0, NULL, mem, err);
    }
    nvtxRangePushA(do_acc ? (want_phase ? "ssb4d pass: phases + object sum" : "ssb4d pass: object sum")
                          : "ssb4d pass: phases");
    dpass p;
    ssb4d_status st = dpass_init(&p, d, G, c, n, want_phase, do_acc, mem, err);
    if (G->dist && do_acc)
        st = dpass_object_dist(&p, st, acc, err);
    else if (want_phase)
        st = dpass_blocks(&p, st, err); /* and the object's sum with it (one process) */
    else if (!st)
        st = dpass_pixels(&p, p.lo, p.hi, NULL, err);
    if (st)
        goto done;
    const size_t npix = p.npix, nb = p.nb;
    if (want_phase) {
        const double nbf = (double)G->n_bf;
        if (mean_phase) { /* every set's mean phase in one device buffer, back in one copy */
            CK(dev_alloc(d, (void **)&d->mean, &d->mean_b, n * npix * sizeof(float)), "the mean phase");
            if ((st = host_buf(d, n * npix * sizeof(float), err)))
                goto done;
        }
        for (size_t j = 0; j < n; j++) {
            double *sums = (double *)d->sums + j * 2 * npix;
            CK(cu_finish(sums, sums + npix, npix, nbf, d->fin + 2 * j, mean_phase ? d->mean + j * npix : NULL,
                         d->stream), "the loss");
        }
        if (mean_phase)
            CK(cudaMemcpyAsync(d->host, d->mean, n * npix * sizeof(float), cudaMemcpyDeviceToHost, d->stream),
               "the mean phase");
        double fin[2 * 64], *fb = n <= 64 ? fin : malloc(2 * n * sizeof *fb);
        if (!fb) {
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
            goto done;
        }
        cudaError_t e = cudaMemcpyAsync(fb, d->fin, 2 * n * sizeof(double), cudaMemcpyDeviceToHost, d->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(d->stream);
        if (e == cudaSuccess && loss)
            for (size_t j = 0; j < n; j++)
                loss[j] = fb[2 * j] / (nbf * (double)npix) - fb[2 * j + 1] / (double)npix;
        if (e == cudaSuccess && mean_phase)
            memcpy(mean_phase, d->host, n * npix * sizeof(float));
        if (fb != fin)
            free(fb);
        CK(e, "the loss");
    }
    if (acc && !G->dist)
        CK(cudaMemcpyAsync(acc, d->acc, nb * 2 * sizeof(double), cudaMemcpyDeviceToHost, d->stream), "the object sum");
    CK(cudaStreamSynchronize(d->stream), "a pass");
    mark(d, CUDA_PROF_FINISH);
done:
    if (st)
        cudaStreamSynchronize(d->stream);
    nvtxRangePop();
    return st;
}

/* The object from set 0's sum in d->acc, as ssb_object_fill and ssb_object_transform make it on
 * the host, made on the device (F, its c2c inverse, the phase); only the npix (or 2·npix) floats
 * asked for come back, through pinned memory. */
static ssb4d_status dev_object(ssb_dev *d, const ssb_ctx *c, size_t n_bf, float *object, float *phase,
                               ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    const size_t nyf = c->nyf, nxf = c->nxf, npix = nyf * nxf;
    const size_t nout = (object ? 2 * npix : 0) + (phase ? npix : 0);
    if (nyf > INT32_MAX / nxf)
        return ssb_fail(err, SSB4D_EINVAL, "a %zux%zu object is too large for the GPU", nyf, nxf);
    nvtxRangePushA("ssb4d object: spectrum, transform, phase");
    if ((st = ensure_obj_plan(d, (int)nyf, (int)nxf, err)) || (st = host_buf(d, nout * sizeof(float), err)))
        goto done;
    CK(dev_alloc(d, &d->objF, &d->objF_b, npix * sizeof(float2)), "the object spectrum");
    CK(dev_alloc(d, &d->objout, &d->objout_b, nout * sizeof(float)), "the object");
    CK(cu_object_fill(d->acc, (int)nyf, (int)nxf, c->dc, 1.0 / (double)n_bf, d->objF, d->stream), "the object spectrum");
    cufftResult r = cufftExecC2C(d->plan_obj, d->objF, d->objF, CUFFT_INVERSE);
    if (r != CUFFT_SUCCESS) {
        st = ssb_fail(err, SSB4D_EIO, "cuFFT's object transform failed (%d)", (int)r);
        goto done;
    }
    float *dobj = object ? d->objout : NULL, *dph = phase ? (float *)d->objout + (object ? 2 * npix : 0) : NULL;
    CK(cu_object_out(d->objF, npix, 1.0f / (float)npix, dobj, dph, d->stream), "the object");
    mark(d, CUDA_PROF_OBJECT);
    CK(cudaMemcpyAsync(d->host, d->objout, nout * sizeof(float), cudaMemcpyDeviceToHost, d->stream), "the object");
    CK(cudaStreamSynchronize(d->stream), "the object");
    if (object)
        memcpy(object, d->host, 2 * npix * sizeof(float));
    if (phase)
        memcpy(phase, (float *)d->host + (object ? 2 * npix : 0), npix * sizeof(float));
    mark(d, CUDA_PROF_COPY);
done:
    if (st)
        cudaStreamSynchronize(d->stream);
    nvtxRangePop();
    return st;
}

/* The band pass's tables on the device: bins, pixel slots and totals, k tables (nrot of them).
 * One upload per call (a few MB at most); returns the cu_band that points at them. */
static ssb4d_status band_upload(ssb_dev *d, const ssb4d_G *G, size_t nb, const size_t *off, const double *qx,
                                const double *qy, const double *q2, size_t nrot, const double *const *kx,
                                const double *const *ky, const double *const *Ak, cu_band *b, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    const size_t n_bf = G->n_bf, nb1 = nb ? nb : 1;
    const size_t nd = 4 * nb1 + 2 * n_bf + 3 * nrot * n_bf; /* off | slot | qx qy q2 | T | ktab */
    double *h = malloc(nd * sizeof *h);
    if (!h)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    long long *ho = (long long *)h, *hs = ho + nb1;
    double *hq = h + nb1 + n_bf, *hT = hq + 3 * nb1, *hk = hT + n_bf;
    for (size_t m = 0; m < nb; m++)
        ho[m] = (long long)off[m], hq[m] = qx ? qx[m] : 0, hq[nb1 + m] = qy ? qy[m] : 0,
        hq[2 * nb1 + m] = q2 ? q2[m] : 0;
    for (size_t ib = 0; ib < n_bf; ib++) {
        size_t owner = G->view.ib ? G->view.ib[ib] : ib;
        hs[ib] = here(G, ib) ? d->slot_of[owner] : -1;
        hT[ib] = G->totals[ib];
    }
    for (size_t u = 0; u < nrot; u++) {
        memcpy(hk + u * n_bf, kx[u], n_bf * sizeof *hk);
        memcpy(hk + (nrot + u) * n_bf, ky[u], n_bf * sizeof *hk);
        memcpy(hk + (2 * nrot + u) * n_bf, Ak[u], n_bf * sizeof *hk);
    }
    CK(dev_alloc(d, &d->tab, &d->tab_b, nd * sizeof *h), "the band tables");
    CK(cudaMemcpyAsync(d->tab, h, nd * sizeof *h, cudaMemcpyHostToDevice, d->stream), "the band tables");
    CK(cudaStreamSynchronize(d->stream), "the band tables"); /* before h goes */
    const double *t = d->tab;
    *b = (cu_band){.nb = (long long)nb, .n_bf = (long long)n_bf, .nrot = (long long)nrot,
                   .stride = (long long)d->stride, .off = (const long long *)t, .slot = (const long long *)t + nb1,
                   .qx = t + nb1 + n_bf, .qy = t + 2 * nb1 + n_bf, .q2 = t + 3 * nb1 + n_bf,
                   .T = t + 4 * nb1 + n_bf, .ktab = t + 4 * nb1 + 2 * n_bf};
done:
    free(h);
    return st;
}

/* One launch of the band kernels over segments segs[0..nseg) ({a, b, out} each): the sums of
 * those whose out is < 0 into total (NULL: not written), the others into kept + out partials. */
static ssb4d_status band_launch(ssb_dev *d, cu_band b, size_t n, const long long *segs, size_t nseg, double *total,
                                double *kept, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    TRY(dev_alloc(d, &d->seg, &d->seg_b, (nseg ? nseg : 1) * 3 * sizeof *segs), "the band segments");
    TRY(cudaMemcpyAsync(d->seg, segs, nseg * 3 * sizeof *segs, cudaMemcpyHostToDevice, d->stream), "the band segments");
    TRY(cudaStreamSynchronize(d->stream), "the band segments"); /* segs may be on the caller's stack */
    b.nseg = (long long)nseg, b.seg = d->seg, b.kept = kept;
    TRY(cu_band_sums(d->planes, b, d->acc, n, total, d->stream), "the band objective");
    return st;
}

/* What band_pix needs: the pass's tables and sets on the device. */
typedef struct {
    ssb_dev *d;
    cu_band b;
    size_t n;
} band_dpass;

/* One pixel's band sums into out (dist_pix_fn). */
static ssb4d_status band_pix(void *user, size_t ib, double *out, ssb4d_err *err)
{
    band_dpass *p = user;
    const long long seg[3] = {(long long)ib, (long long)ib + 1, 0};
    return band_launch(p->d, p->b, p->n, seg, 1, NULL, out, err);
}

/* The band objective's sums of this rank's pixels in blocks (dist.h): the whole blocks that go
 * straight into the totals in one launch, each kept partial of a distributed G in its own; then
 * the chain. Reached by every rank whatever st is. */
static ssb4d_status dev_band(ssb_dev *d, const ssb4d_G *G, const ssb_band_job *j, double *total, ssb4d_mem *mem,
                             ssb4d_err *err)
{
    cudaSetDevice(d->device);
    const size_t n = j->n, nout = n * (j->nb ? j->nb : 1) * 4, lo = G_lo(G), hi = G_hi(G);
    band_dpass bp = {.d = d, .n = n};
    ssb4d_status st = band_upload(d, G, j->nb, j->off, j->qx, j->qy, j->q2, j->nrot, j->kx, j->ky, j->Ak, &bp.b, err);
    bp.b.lambda = j->lambda, bp.b.alpha0 = j->alpha0, bp.b.ang0 = j->ang[0], bp.b.ang1 = j->ang[1];
    cu_band_set *hs = calloc(n ? n : 1, sizeof *hs);
    long long *ls = malloc(dist_segments_cap(lo, hi) * 3 * sizeof *ls);
    if (!st && (!hs || !ls))
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    dist_blocks bl;
    st = dist_blocks_begin(&bl, st, G->dist, G->n_bf, lo, hi, nout, &dev_vec, d, band_pix, &bp, NULL, err);
    const size_t nseg = st ? 0 : bl.nseg;
    for (size_t i = 0; !st && i < n; i++) {
        hs[i].p = j->sets[i].p;
        hs[i].rot = (long long)j->sets[i].rot;
    }
    if (!st && ssb4d_mem_progress(mem, 0.0))
        st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
    TRY(dev_alloc(d, &d->acc, &d->acc_b, (n ? n : 1) * sizeof *hs), "the band sets");
    TRY(dev_alloc(d, &d->sums, &d->sums_b, nout * sizeof(double)), "the band sums");
    TRY(dev_alloc(d, &d->bpart, &d->bpart_b, nout * sizeof(double)), "a pixel's band sums");
    TRY(cudaMemcpyAsync(d->acc, hs, n * sizeof *hs, cudaMemcpyHostToDevice, d->stream), "the band sets");
    /* the segments that go into the totals (one process: all), in one launch */
    size_t nd = 0;
    for (size_t i = 0; !st && i < nseg; i++)
        if (dist_blocks_route(&bl, i) == DIST_TOTALS)
            ls[3 * nd] = (long long)bl.segs[i].a, ls[3 * nd + 1] = (long long)bl.segs[i].b, ls[3 * nd + 2] = -1, nd++;
    if (!st)
        st = band_launch(d, bp.b, n, ls, nd, d->sums, NULL, err);
    /* the kept partials (a distributed G), each from its own launch, in segment order */
    for (size_t i = 0; !st && i < nseg; i++) {
        if (dist_blocks_route(&bl, i) != DIST_KEEP)
            continue;
        const long long one[3] = {(long long)bl.segs[i].a, (long long)bl.segs[i].b, 0};
        st = band_launch(d, bp.b, n, one, 1, NULL, dist_blocks_slot(&bl, i), err);
    }
    if (!st && ssb4d_mem_progress(mem, 1.0))
        st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
    st = dist_blocks_end(&bl, st, d->sums, err);
    dist_blocks_free(&bl);
    TRY(cudaMemcpyAsync(total, d->sums, nout * sizeof(double), cudaMemcpyDeviceToHost, d->stream), "the band sums");
    TRY(cudaStreamSynchronize(d->stream), "the band objective");
    free(ls), free(hs);
    return st;
}

/* ssb4d_band_power's sums, from acc's values (a distributed G: the earlier ranks' sum, band.c). */
static ssb4d_status dev_band_power(ssb_dev *d, const ssb4d_G *G, size_t nb, const size_t *off, const double *Ak,
                                   double *acc, ssb4d_err *err)
{
    cudaSetDevice(d->device);
    cu_band b;
    const double *kt[3] = {Ak, Ak, Ak}; /* only A(k) is read */
    ssb4d_status st = band_upload(d, G, nb, off, NULL, NULL, NULL, 1, kt, kt + 1, kt + 2, &b, err);
    if (st)
        return st;
    TRY(dev_alloc(d, &d->sums, &d->sums_b, (nb ? nb : 1) * sizeof(double)), "the band power");
    TRY(cudaMemcpyAsync(d->sums, acc, nb * sizeof(double), cudaMemcpyHostToDevice, d->stream), "the band power");
    TRY(cu_band_power(d->planes, b, b.ktab + 2 * G->n_bf, d->sums, d->stream), "the band power");
    TRY(cudaMemcpyAsync(acc, d->sums, nb * sizeof(double), cudaMemcpyDeviceToHost, d->stream), "the band power");
    TRY(cudaStreamSynchronize(d->stream), "the band power");
    return st;
}

static ssb4d_status contexts(const struct ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                             const ssb4d_thick *thick, size_t n, int f, ssb_ctx **out, ssb4d_err *err)
{
    ssb_ctx *c = calloc(n, sizeof *c);
    if (!c)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = SSB4D_OK;
    size_t made = 0;
    for (; made < n; made++)
        if ((st = ssb_ctx_init(&c[made], G, g, &ab[made], thick ? &thick[made] : NULL, f, err)))
            break;
    if (st) {
        for (size_t j = 0; j < made; j++)
            ssb_ctx_free(&c[j]);
        free(c);
        return st;
    }
    *out = c;
    return SSB4D_OK;
}

static void contexts_free(ssb_ctx *c, size_t n)
{
    for (size_t j = 0; c && j < n; j++)
        ssb_ctx_free(&c[j]);
    free(c);
}

/* The backend's phase stack (ssb_backend.phases): the contexts on the host, the sums and the
 * object on the device. */
static ssb4d_status cuda_phases(const ssb4d_G *G, const ssb_phase_job *j, ssb4d_mem *mem, ssb4d_err *err)
{
    const size_t n = j->n;
    ssb_dev *d = G->store.dev;
    if (d->profile)
        d->prof_t = ssb_clock_s();
    ssb_ctx *c = NULL;
    ssb4d_status st = contexts(G, j->g, j->ab, j->thick, n, j->f, &c, err);
    if (st) /* a distributed G: the other ranks' pass begins with an agreement (dist.h) */
        return G->dist ? dist_agree(G->dist, st, err) : st;
    const int fusing = j->object || j->phase;
    /* One process: the object's sum stays on the device and the object is made there. A
     * distributed G: the sum passes through every rank's host (dist_seq), then goes back to the
     * device, so that every rank count makes the object the same way (the same bits). */
    double complex *acc = NULL;
    size_t nacc = c[0].nyf * (c[0].nxf / 2 + 1);
    if (fusing && G->dist && !(acc = ssb4d_mem_calloc(mem, nacc * sizeof *acc, "object sum", err)))
        st = SSB4D_ENOMEM;
    if (!st)
        st = dev_phases(d, G, c, n, j->loss, j->mean_phase, fusing, acc, mem, err);
    else if (G->dist)
        st = dist_agree(G->dist, st, err);
    if (!st && fusing && G->dist) /* every rank now holds the whole sum: the object as in one process */
        TRY(cudaMemcpyAsync(d->acc, acc, nacc * sizeof *acc, cudaMemcpyHostToDevice, d->stream), "the object sum");
    if (!st && fusing)
        st = dev_object(d, &c[0], G->n_bf, j->object, j->phase, err);
    ssb4d_mem_free(mem, acc, 0);
    contexts_free(c, n);
    return st;
}

static ssb4d_status cuda_band(const ssb4d_G *G, const ssb_band_job *j, double *total, ssb4d_mem *mem,
                              ssb4d_err *err)
{
    return dev_band(G->store.dev, G, j, total, mem, err);
}

static ssb4d_status cuda_band_power(const ssb4d_G *G, const ssb_power_job *j, ssb4d_mem *mem, ssb4d_err *err)
{
    (void)mem;
    return dev_band_power(G->store.dev, G, j->nb, j->off, j->Ak, j->acc, err);
}

/* ssb_backend.device_bytes: d->bytes, d->peak (reset: from d->bytes). */
static void cuda_device_bytes(const ssb4d_G *G, size_t *now, size_t *peak, int reset_peak)
{
    ssb_dev *d = G->store.dev;
    if (d && reset_peak)
        d->peak = d->bytes;
    *now = d ? d->bytes : 0, *peak = d ? d->peak : 0;
}

/* The CUDA backend's table (src/ssb/backend.h), its one instance: the session's entries
 * (backend.c: the GPU's start, the device's memory) and the passes, the real-output path's phase
 * stack, the band sums and the band power; the complex path runs on the CPU over the host planes. */
const ssb_backend ssb_backend_cuda = {.name = "cuda",
                                      .available = cuda_available,
                                      .gbuild = cuda_backend_gbuild,
                                      .calibrate = cuda_backend_calibrate,
                                      .keep_free = cuda_backend_keep_free,
                                      .device_memory = cuda_device_memory,
                                      .fft_work_bytes = cuda_fft_work_bytes,
                                      .complex_path = 0,
                                      .phases = cuda_phases,
                                      .band = cuda_band,
                                      .band_power = cuda_band_power,
                                      .device_bytes = cuda_device_bytes};

void cuda_G_profile(const struct ssb4d_G *G, int on, double out[CUDA_PROF_N])
{
    if (!G->store.dev)
        return;
    if (out)
        memcpy(out, G->store.dev->prof, sizeof G->store.dev->prof);
    memset(G->store.dev->prof, 0, sizeof G->store.dev->prof);
    G->store.dev->profile = on;
}

int cuda_G_loss_fused(const struct ssb4d_G *G, int on)
{
    ssb_dev *d = G->store.dev;
    int was = d ? d->fused_on : 0;
    if (d && on >= 0)
        d->fused_on = on;
    return was;
}

void cuda_G_device_bytes(const struct ssb4d_G *G, size_t *now, size_t *peak)
{
    *now = G->store.dev ? G->store.dev->bytes : 0;
    *peak = G->store.dev ? G->store.dev->peak : 0;
}

/* G's device copy without its planes: the device (a distributed G: this rank's of the host), the
 * slots of the planes held here, the loss path, the stream. One set-up for cuda_G_attach and
 * cuda_G_attach_blank, so a G gets the same passes whoever built it. */
static ssb4d_status dev_new(const struct ssb4d_G *G, ssb_dev **out, ssb4d_err *err)
{
    ssb_dev *d = calloc(1, sizeof *d);
    if (!d || !(d->slot_of = malloc((G->n_bf ? G->n_bf : 1) * sizeof *d->slot_of))) {
        free(d);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    ssb4d_status st = SSB4D_OK;
    if (G->dist) { /* one GPU per rank of a host, in the order of the ranks there */
        int nd = 0;
        cudaGetDeviceCount(&nd);
        cudaSetDevice(dist_local_rank(G->dist) % (nd > 0 ? nd : 1));
    }
    cudaGetDevice(&d->device);
    d->fused_on = cu_fused_wanted();
    d->stride = G->plane_stride;
    for (size_t ib = 0; ib < G->n_bf; ib++) /* a distributed G: this rank's planes only */
        d->slot_of[ib] = here(G, ib) ? (long long)d->n_slots++ : -1;
    CK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking), "creating a stream");
done:
    if (st) {
        dev_free(d);
        return st;
    }
    *out = d;
    return SSB4D_OK;
}

/* G's passes from now on run on d (src/ssb/backend.h: the store names its backend). */
static void dev_install(struct ssb4d_G *G, ssb_dev *d)
{
    G->store.backend = &ssb_backend_cuda;
    G->store.dev = d;
    G->store.dev_free = dev_free;
}

ssb4d_status cuda_G_attach(struct ssb4d_G *G, ssb4d_mem *mem, ssb4d_err *err)
{
    if (G->view.is_view || G->store.dev)
        return ssb_fail(err, SSB4D_EINTERNAL, "cuda_G_attach: G is a view or already on the device");
    if (!cuda_available())
        return ssb_fail(err, SSB4D_EINVAL, "no CUDA device is present");
    ssb_dev *d = NULL;
    ssb4d_status st = dev_new(G, &d, err);
    if (st)
        return st;
    G_group gr = {0};
    int have_group = 0;
    size_t have = 0, want = (d->n_slots ? d->n_slots : 1) * d->stride * sizeof(float2), fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && want > fr) {
        st = ssb_fail(err, SSB4D_ENOMEM,
                      "G's %zu planes need %.2f GiB of GPU memory and the GPU has %.2f GiB free (of %.2f GiB): "
                      "use --backend cpu",
                      d->n_slots, (double)want / (1 << 30), (double)fr / (1 << 30), (double)tot / (1 << 30));
        goto done;
    }
    CK(dev_alloc(d, (void **)&d->planes, &have, want), "G's planes");
    if ((st = G_group_init(G, mem, &gr, err)))
        goto done;
    have_group = 1;
    const size_t bytes = G->ny * G->nxh * sizeof(float2);
    const size_t lo = G_lo(G), hi = G_hi(G);
    for (size_t g0 = lo; g0 < hi; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < hi ? g0 + gr.cap : hi;
        if (ssb4d_mem_progress(mem, (double)(g0 - lo) / (double)(hi - lo))) {
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
            goto done;
        }
        if ((st = G_group_load(G, g0, g1, &gr, err)))
            goto done;
        for (size_t ib = g0; ib < g1; ib++)
            if (gr.planes[ib - g0] && d->slot_of[ib] >= 0)
                CK(cudaMemcpy(d->planes + (size_t)d->slot_of[ib] * d->stride, gr.planes[ib - g0], bytes,
                              cudaMemcpyHostToDevice), "copying G to the GPU");
    }
done:
    if (have_group)
        G_group_free(&gr);
    if (st) {
        dev_free(d);
        return st;
    }
    dev_install(G, d);
    return SSB4D_OK;
}

/* A device copy whose planes are filled on the device (gstart.c): as cuda_G_attach, but nothing
 * goes up; the planes are zeroed (the padding stays 0, as the host's) for the builder to fill. */
ssb4d_status cuda_G_attach_blank(struct ssb4d_G *G, void **planes, void **stream, ssb4d_err *err)
{
    if (G->view.is_view || G->store.dev || G->dist)
        return ssb_fail(err, SSB4D_EINTERNAL, "cuda_G_attach_blank: G is a view, distributed or already on the device");
    ssb_dev *d = NULL;
    ssb4d_status st = dev_new(G, &d, err);
    if (st)
        return st;
    size_t have = 0, want = (d->n_slots ? d->n_slots : 1) * d->stride * sizeof(float2);
    CK(dev_alloc(d, (void **)&d->planes, &have, want), "G's planes");
    CK(cudaMemsetAsync(d->planes, 0, want, d->stream), "clearing G's planes");
done:
    if (st) {
        dev_free(d);
        return st;
    }
    dev_install(G, d);
    *planes = d->planes;
    *stream = d->stream;
    return SSB4D_OK;
}
