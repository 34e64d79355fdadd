/* refine.c — the refinement's minibatch on the GPU (refine.h): the buffers, the batched cuFFT
 * plan and the order of the kernels (refine_kernels.cu), model_core.inc's steps for a minibatch
 * at once. The counts go up once; the object's crops that a minibatch reads go up before it (the
 * solver updates the object on the host between minibatches); what comes back is what the CPU
 * path's threads give the solver: per position the loss, Σ I, the parameters' gradient and the
 * phase-gradient crop, which the solver sums in its own fixed order. */
#include "cuda/refine.h"

#include "common/err.h"
#include "cuda/cuda.h"
#include "cuda/memory.h"
#include "cuda/refine_kernels.h"

#include <cuda_runtime_api.h>
#include <cufft.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cuda_refine {
    cuda_refine_shape sh;
    long long n;
    cudaStream_t stream;
    cufftHandle plan;
    int have_plan;
    void *work;                       /* cuFFT's work area (ours: counted) */
    float *P, *prop, *dchi, *dth, *fr, *fc;
    int *cidx;
    float *cnt;
    float *obj;                       /* ns × Or × Oc complex: the host object's mirror */
    float *Q, *W, *psi, *T, *phi;     /* B·n complex; ns·B·n; ns·B·n; max(ns − 1, 1)·B·n */
    float *gb;                        /* B·ns·n */
    double *red;                      /* B·8 */
    cu_rpos *pos, *hpos;              /* device; pinned host */
    double *hred;                     /* pinned host, B·8 */
    /* the mirror's freshness: the host object changes only in the solver's Adam step after a
     * minibatch with want_obj (over the rectangle its crops cover) or between solves */
    int stale;                        /* 1: the whole object goes up before the next minibatch */
    int prev_obj;                     /* the last minibatch had want_obj: its rectangle goes up */
    long prev[4];                     /* that rectangle: rows [0, 1), cols [2, 3) */
    size_t bytes, peak;
};

static ssb4d_status fail(ssb4d_err *err, cudaError_t e, const char *what)
{
    if (e == cudaErrorMemoryAllocation)
        return ssb_fail(err, SSB4D_ENOMEM, "the GPU is out of memory (refine: %s)", what);
    return ssb_fail(err, SSB4D_EIO, "CUDA error in refine (%s): %s", what, cudaGetErrorString(e));
}

static cudaError_t dalloc(cuda_refine *c, void *p, size_t bytes)
{
    void **pp = (void **)p;
    cudaError_t e = cudaMalloc(pp, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *pp = NULL;
        return e;
    }
    c->bytes += bytes;
    c->peak = c->bytes > c->peak ? c->bytes : c->peak;
    return cudaMemsetAsync(*pp, 0, bytes ? bytes : 1, c->stream);
}

static cufftResult make_plan(cufftHandle *h, int nr, int nc, size_t B, size_t *work)
{
    int dims[2] = {nr, nc};
    cufftResult r = cufftCreate(h);
    if (r != CUFFT_SUCCESS)
        return r;
    if ((r = cufftSetAutoAllocation(*h, 0)) == CUFFT_SUCCESS)
        r = cufftMakePlanMany(*h, 2, dims, NULL, 1, nr * nc, NULL, 1, nr * nc, CUFFT_C2C, (int)B, work);
    if (r != CUFFT_SUCCESS)
        cufftDestroy(*h);
    return r;
}

size_t cuda_refine_fft_work(int nr, int nc, size_t B)
{
    if (!cuda_available())
        return 0;
    cufftHandle h;
    size_t w = 0;
    if (make_plan(&h, nr, nc, B, &w) != CUFFT_SUCCESS)
        return 0;
    cufftDestroy(h);
    return w;
}

void cuda_refine_delete(cuda_refine *c)
{
    if (!c)
        return;
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->have_plan)
        cufftDestroy(c->plan);
    void *d[] = {c->work, c->P, c->prop, c->dchi, c->dth, c->fr, c->fc, c->cidx, c->cnt, c->obj,
                 c->Q, c->W, c->psi, c->T, c->phi, c->gb, c->red, c->pos};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        cudaFree(d[i]);
    if (c->hpos)
        cudaFreeHost(c->hpos);
    if (c->hred)
        cudaFreeHost(c->hred);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

ssb4d_status cuda_refine_new(const cuda_refine_shape *sh, const float *cnt, const int *vidx, size_t budget,
                             cuda_refine **out, ssb4d_err *err)
{
    *out = NULL;
    if (!cuda_available())
        return ssb_fail(err, SSB4D_EINVAL, "refine: no CUDA device here");
    if (sh->nr < 1 || sh->nc < 1 || sh->ns < 1 || sh->B < 1 || sh->B > 1u << 20)
        return ssb_fail(err, SSB4D_EINVAL, "refine: bad shapes for the GPU");
    cuda_refine *c = calloc(1, sizeof *c);
    if (!c)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    c->sh = *sh;
    size_t n = (size_t)sh->nr * (size_t)sh->nc, ns = (size_t)sh->ns, B = sh->B;
    c->n = (long long)n;
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cuda_refine_delete(c);
        return fail(err, e, "stream");
    }
    size_t work = 0;
    cufftResult fr = make_plan(&c->plan, sh->nr, sh->nc, B, &work);
    if (fr != CUFFT_SUCCESS) {
        cuda_refine_delete(c);
        return fr == CUFFT_ALLOC_FAILED ? ssb_fail(err, SSB4D_ENOMEM, "the GPU is out of memory (refine: cuFFT plan)")
                                        : ssb_fail(err, SSB4D_EIO, "cuFFT could not plan the refinement's %dx%d x %zu "
                                                   "transforms (%d)", sh->nr, sh->nc, B, (int)fr);
    }
    c->have_plan = 1;
    /* the plan (plan, then execute): refused in one line before anything large is allocated */
    size_t need = cuda_refine_bytes_for(sh, work), fre = 0, tot = 0;
    int is_free = 0;
    if (cuda_device_memory(&fre, &tot) == 0 && (!budget || fre < budget))
        budget = fre, is_free = 1;
    if (budget && need > budget) {
        cuda_refine_delete(c);
        return ssb_fail(err, SSB4D_ENOMEM, "refine on the GPU needs %.3g GiB (%zu positions' counts, a %zux%zu x %d "
                        "object, minibatches of %zu) but %s %.3g GiB: use a smaller region or batch, or --backend cpu",
                        (double)need / (1u << 30), sh->npos, sh->Or, sh->Oc, sh->ns, B,
                        is_free ? "only" : "the budget is", (double)budget / (1u << 30));
    }
    size_t f2 = 2 * sizeof(float);
    if ((e = dalloc(c, &c->work, work)) || (e = dalloc(c, &c->P, n * f2)) || (e = dalloc(c, &c->prop, n * f2)) ||
        (e = dalloc(c, &c->dchi, 3 * n * sizeof(float))) || (e = dalloc(c, &c->dth, 3 * n * sizeof(float))) ||
        (e = dalloc(c, &c->fr, (size_t)sh->nr * sizeof(float))) ||
        (e = dalloc(c, &c->fc, (size_t)sh->nc * sizeof(float))) || (e = dalloc(c, &c->cidx, n * sizeof(int))) ||
        (e = dalloc(c, &c->cnt, sh->npos * sh->nv * sizeof(float))) ||
        (e = dalloc(c, &c->obj, ns * sh->Or * sh->Oc * f2)) || (e = dalloc(c, &c->Q, B * n * f2)) ||
        (e = dalloc(c, &c->W, B * n * f2)) || (e = dalloc(c, &c->psi, ns * B * n * f2)) ||
        (e = dalloc(c, &c->T, ns * B * n * f2)) || (e = dalloc(c, &c->phi, (ns > 1 ? ns - 1 : 1) * B * n * f2)) ||
        (e = dalloc(c, &c->gb, B * ns * n * sizeof(float))) || (e = dalloc(c, &c->red, B * 8 * sizeof(double))) ||
        (e = dalloc(c, &c->pos, B * sizeof(cu_rpos))) || (e = cudaMallocHost((void **)&c->hpos, B * sizeof(cu_rpos))) ||
        (e = cudaMallocHost((void **)&c->hred, B * 8 * sizeof(double)))) {
        cuda_refine_delete(c);
        return fail(err, e, "buffers");
    }
    if (work && cufftSetWorkArea(c->plan, c->work) != CUFFT_SUCCESS) {
        cuda_refine_delete(c);
        return ssb_fail(err, SSB4D_EIO, "cuFFT refused the refinement's work area");
    }
    if (cufftSetStream(c->plan, c->stream) != CUFFT_SUCCESS) {
        cuda_refine_delete(c);
        return ssb_fail(err, SSB4D_EIO, "cuFFT refused the refinement's stream");
    }
    int *cidx = malloc(n * sizeof(int));
    if (!cidx) {
        cuda_refine_delete(c);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    for (size_t q = 0; q < n; q++)
        cidx[q] = -1;
    for (size_t v = 0; v < sh->nv; v++)
        cidx[vidx[v]] = (int)v;
    if ((e = cudaMemcpyAsync(c->cidx, cidx, n * sizeof(int), cudaMemcpyHostToDevice, c->stream)) ||
        (e = cudaMemcpyAsync(c->cnt, cnt, sh->npos * sh->nv * sizeof(float), cudaMemcpyHostToDevice, c->stream)) ||
        (e = cudaStreamSynchronize(c->stream))) {
        free(cidx);
        cuda_refine_delete(c);
        return fail(err, e, "the counts' copy");
    }
    free(cidx);
    c->stale = 1;
    *out = c;
    return SSB4D_OK;
}

void cuda_refine_object_changed(cuda_refine *c) { c->stale = 1; }

/* Rows [r0, r1) × cols [c0, c1) of every slice of the host object into the mirror. */
static cudaError_t put_object(cuda_refine *c, const float *t, long r0, long r1, long c0, long c1)
{
    const cuda_refine_shape *sh = &c->sh;
    size_t pitch = sh->Oc * 2 * sizeof(float), width = (size_t)(c1 - c0) * 2 * sizeof(float);
    for (size_t s = 0; s < (size_t)sh->ns; s++) {
        size_t off = ((s * sh->Or + (size_t)r0) * sh->Oc + (size_t)c0) * 2;
        cudaError_t e = cudaMemcpy2DAsync(c->obj + off, pitch, t + off, pitch, width, (size_t)(r1 - r0),
                                          cudaMemcpyHostToDevice, c->stream);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

ssb4d_status cuda_refine_tables(cuda_refine *c, const float *P, const float *prop, const float *dchi,
                                const float *dth, const float *fr, const float *fc, ssb4d_err *err)
{
    size_t n = (size_t)c->n;
    cudaError_t e;
    if ((e = cudaMemcpyAsync(c->P, P, 2 * n * sizeof(float), cudaMemcpyHostToDevice, c->stream)) ||
        (e = cudaMemcpyAsync(c->prop, prop, 2 * n * sizeof(float), cudaMemcpyHostToDevice, c->stream)) ||
        (e = cudaMemcpyAsync(c->dchi, dchi, 3 * n * sizeof(float), cudaMemcpyHostToDevice, c->stream)) ||
        (e = cudaMemcpyAsync(c->dth, dth, 3 * n * sizeof(float), cudaMemcpyHostToDevice, c->stream)) ||
        (e = cudaMemcpyAsync(c->fr, fr, (size_t)c->sh.nr * sizeof(float), cudaMemcpyHostToDevice, c->stream)) ||
        (e = cudaMemcpyAsync(c->fc, fc, (size_t)c->sh.nc * sizeof(float), cudaMemcpyHostToDevice, c->stream)) ||
        (e = cudaStreamSynchronize(c->stream))) /* the host tables may change after we return */
        return fail(err, e, "the model's tables");
    return SSB4D_OK;
}

#define TRY(call, what)                                                                                           \
    do {                                                                                                          \
        cudaError_t e_ = (cudaError_t)(call);                                                                     \
        if (e_ != cudaSuccess)                                                                                    \
            return fail(err, e_, what);                                                                           \
    } while (0)
#define FFT(ptr, dir)                                                                                             \
    do {                                                                                                          \
        if (cufftExecC2C(c->plan, (cufftComplex *)(ptr), (cufftComplex *)(ptr), dir) != CUFFT_SUCCESS)            \
            return ssb_fail(err, SSB4D_EIO, "cuFFT failed in the refinement's minibatch");                        \
    } while (0)

ssb4d_status cuda_refine_batch(cuda_refine *c, const float *t, const size_t *pos, size_t nb, const long *o0,
                               const long *o1, const double *s0, const double *s1, double scale, int amplitude,
                               int want_obj, int want_g, double *lp, double *sp, double *gp, float *gb,
                               ssb4d_err *err)
{
    const cuda_refine_shape *sh = &c->sh;
    if (nb == 0)
        return SSB4D_OK;
    if (nb > sh->B)
        return ssb_fail(err, SSB4D_EINVAL, "refine: a minibatch of %zu positions on an engine of %zu", nb, sh->B);
    size_t n = (size_t)c->n, ns = (size_t)sh->ns, Bn = sh->B * n;
    cudaStream_t st = c->stream;
    /* the object where the host changed it; the positions, and the rectangle their crops cover */
    if (c->stale)
        TRY(put_object(c, t, 0, (long)sh->Or, 0, (long)sh->Oc), "the object");
    else if (c->prev_obj)
        TRY(put_object(c, t, c->prev[0], c->prev[1], c->prev[2], c->prev[3]), "the object's update");
    c->stale = c->prev_obj = 0;
    long r0 = o0[pos[0]], r1 = r0, c0 = o1[pos[0]], c1 = c0;
    for (size_t b = 0; b < nb; b++) {
        size_t p = pos[b];
        c->hpos[b] = (cu_rpos){o0[p], o1[p], (long long)p, s0[p], s1[p]};
        r0 = o0[p] < r0 ? o0[p] : r0, r1 = o0[p] > r1 ? o0[p] : r1;
        c0 = o1[p] < c0 ? o1[p] : c0, c1 = o1[p] > c1 ? o1[p] : c1;
    }
    r1 += sh->nr, c1 += sh->nc;
    TRY(cudaMemcpyAsync(c->pos, c->hpos, nb * sizeof(cu_rpos), cudaMemcpyHostToDevice, st), "positions");
    cu_rgrid g = {sh->nr, sh->nc, sh->ns, c->n, (long long)sh->Or, (long long)sh->Oc, (long long)sh->nv,
                  c->P, c->prop, c->dchi, c->dth, c->fr, c->fc, c->cidx, c->cnt};
    int m = (int)nb;
    /* forward: ψ0 = bwd(Q); per slice x = ψ·t, fwd; Φ' = p·x, ψ' = bwd(Φ')/n */
    TRY(cu_r_probe(g, c->pos, m, c->Q, c->psi, st), "probe");
    FFT(c->psi, CUFFT_INVERSE);
    for (size_t s = 0; s < ns; s++) {
        float *psi = c->psi + 2 * s * Bn, *T = c->T + 2 * s * Bn;
        float *x = s + 1 < ns ? c->phi + 2 * s * Bn : c->W;
        TRY(cu_r_transmit(g, c->obj, (int)s, c->pos, m, psi, T, x, st), "transmit");
        FFT(x, CUFFT_FORWARD);
        if (s + 1 == ns)
            break;
        float *next = c->psi + 2 * (s + 1) * Bn;
        TRY(cu_r_propagate(g, m, x, next, st), "propagate");
        FFT(next, CUFFT_INVERSE);
    }
    TRY(cu_r_likelihood(g, c->pos, m, scale, amplitude, c->W, c->red, st), "likelihood");
    if (want_obj || want_g) { /* back through the slices */
        FFT(c->W, CUFFT_INVERSE);
        for (size_t s = ns; s-- > 0;) {
            TRY(cu_r_back_transmit(g, (int)s, m, c->psi + 2 * s * Bn, c->T + 2 * s * Bn, c->W,
                                   want_obj ? c->gb : NULL, st), "back transmit");
            if (s == 0)
                break;
            FFT(c->W, CUFFT_FORWARD);
            TRY(cu_r_back_propagate(g, m, c->phi + 2 * (s - 1) * Bn, want_g, c->W, c->red, st), "back propagate");
            FFT(c->W, CUFFT_INVERSE);
        }
        if (want_g) {
            FFT(c->W, CUFFT_FORWARD);
            TRY(cu_r_chi(g, m, c->Q, c->W, c->red, st), "aberrations");
        }
    }
    TRY(cudaMemcpyAsync(c->hred, c->red, nb * 8 * sizeof(double), cudaMemcpyDeviceToHost, st), "sums");
    if (want_obj)
        TRY(cudaMemcpyAsync(gb, c->gb, nb * ns * n * sizeof(float), cudaMemcpyDeviceToHost, st), "gradient crops");
    TRY(cudaStreamSynchronize(st), "the minibatch");
    if (want_obj) { /* the solver's Adam step changes this rectangle before the next call */
        c->prev_obj = 1;
        c->prev[0] = r0, c->prev[1] = r1, c->prev[2] = c0, c->prev[3] = c1;
    }
    for (size_t b = 0; b < nb; b++) {
        lp[b] = c->hred[b * 8];
        sp[b] = c->hred[b * 8 + 1];
        if (want_g)
            for (int k = 0; k < 6; k++)
                gp[b * 6 + k] = c->hred[b * 8 + 2 + k];
    }
    return SSB4D_OK;
}

void cuda_refine_device_bytes(const cuda_refine *c, size_t *now, size_t *peak)
{
    if (now)
        *now = c ? c->bytes : 0;
    if (peak)
        *peak = c ? c->peak : 0;
}
