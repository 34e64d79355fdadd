/* device.c — G's planes in device memory and the SSB passes over them (src/ssb/dev.h).
 *
 * Plan, then execute: the planes go up once; a pass works through the BF pixels in chunks of
 * CHUNK/f² pixels (a fixed count for a grid, so the cuFFT plan, and with it each plane's bits,
 * never depend on the batch), for each parameter set: correct (−i·Ĉ), add into the object's sum
 * if asked, inverse-transform (one batched c2r), and add φ and φ² into per-pixel running sums in
 * BF order. The loss is reduced from those sums in one fixed-order block at the end. Work buffers
 * stay allocated between passes (a fit makes thousands). */
#include "cuda/cuda.h"
#include "common/clock.h"

#include "common/err.h"
#include "cuda/kernels.h"
#include "ssb/dev.h"

#include <cuda_runtime_api.h>
#include <cufft.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK 64     /* BF pixels in flight at f = 1 */
#define SYNC_EVERY 8 /* chunks between polls of the cancel flag (each poll waits for the device) */

struct ssb_dev {
    int device;
    cudaStream_t stream;
    float2 *planes;            /* n_slots planes of stride float2 */
    size_t n_slots, stride;
    long long *slot_of;        /* host: per BF pixel of the owning G, its slot or -1 */
    /* work buffers, grown on demand */
    void *spec, *real, *sums;  /* chunk spectra, chunk c2r outputs, per-set totals and Σφ² (a band pass: its sums) */
    size_t spec_b, real_b, sums_b;
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
    cufftHandle plan;
    int plan_nyf, plan_nxf, plan_batch;
    size_t bytes, peak;
    /* cuda_G_profile: per-stage seconds of dev_phases (each stage waited for, so slower) */
    int profile;
    double prof[CUDA_PROF_N], prof_t;
};

static ssb4d_status cuda_fail(ssb4d_err *err, cudaError_t e, const char *what)
{
    if (e == cudaErrorMemoryAllocation)
        return ssb4d_fail(err, SSB4D_ENOMEM, "the GPU is out of memory (%s)", what);
    return ssb4d_fail(err, SSB4D_EIO, "CUDA error in %s: %s", what, cudaGetErrorString(e));
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
    cudaFree(d->planes), cudaFree(d->spec), cudaFree(d->real), cudaFree(d->sums), cudaFree(d->tab);
    cudaFree(d->acc), cudaFree(d->valid), cudaFree(d->fin), cudaFree(d->mean);
    if (d->stream)
        cudaStreamDestroy(d->stream);
    free(d->slot_of);
    free(d);
}

/* The chunk for upsampling f: CHUNK/f² pixels, at least 1. */
static size_t chunk_of(int f) { size_t c = CHUNK / (size_t)(f * f); return c ? c : 1; }

static ssb4d_status ensure_plan(ssb_dev *d, int nyf, int nxf, int batch, ssb4d_err *err)
{
    if (d->plan_batch && d->plan_nyf == nyf && d->plan_nxf == nxf && d->plan_batch == batch)
        return SSB4D_OK;
    if (d->plan_batch)
        cufftDestroy(d->plan), d->plan_batch = 0;
    int n[2] = {nyf, nxf};
    cufftResult r = cufftPlanMany(&d->plan, 2, n, NULL, 1, nyf * (nxf / 2 + 1), NULL, 1, nyf * nxf, CUFFT_C2R, batch);
    if (r != CUFFT_SUCCESS)
        return r == CUFFT_ALLOC_FAILED ? ssb4d_fail(err, SSB4D_ENOMEM, "the GPU is out of memory (cuFFT plan)")
                                       : ssb4d_fail(err, SSB4D_EIO, "cuFFT could not plan the %dx%d inverse transform (%d)",
                                                    nyf, nxf, (int)r);
    cufftSetStream(d->plan, d->stream);
    d->plan_nyf = nyf, d->plan_nxf = nxf, d->plan_batch = batch;
    return SSB4D_OK;
}

static void set_of(const ssb_ctx *c, cu_set *s)
{
    memset(s, 0, sizeof *s);
    s->lambda = c->lambda, s->alpha0 = c->alpha0, s->ang0 = c->ang[0], s->ang1 = c->ang[1];
    for (int i = 0; i < CU_N_ABERR; i++) {
        s->C[i] = c->C[i], s->phi[i] = c->phi[i];
        s->an[i] = ssb4d_aberr_n(i), s->am[i] = ssb4d_aberr_m(i);
    }
    memcpy(s->m, c->m, sizeof s->m);
    s->tau0 = c->tau[0], s->tau1 = c->tau[1], s->t_A = c->t_A;
    s->quadratic_only = c->quadratic_only, s->thick = c->thick, s->fast = c->fast;
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

static ssb4d_status dev_phases(ssb_dev *d, const ssb4d_G *G, const ssb_ctx *c, size_t n, double *loss,
                               float *mean_phase, double complex *acc, ssb4d_mem *mem, ssb4d_err *err)
{
    ssb4d_status st = SSB4D_OK;
    const size_t n_bf = G->n_bf, nyf = c[0].nyf, nxf = c[0].nxf, ncols = nxf / 2 + 1;
    const size_t nb = nyf * ncols, npix = nyf * nxf, P = chunk_of(c[0].f);
    const int want_phase = loss || mean_phase;
    if (nyf > 65535 || nxf > 65535 || P > 65535)
        return ssb4d_fail(err, SSB4D_EINVAL, "a %zux%zu grid is too large for the GPU pass", nyf, nxf);
    cudaSetDevice(d->device);
    if (d->profile)
        d->prof_t = ssb_clock_s();
    /* the pass's table: per pixel slot, kx, ky; the grid's qr, qc; per set 5 values per pixel */
    const size_t set0 = 3 * n_bf + nyf + nxf, tab_n = set0 + 5 * n_bf * n;
    double *h = malloc(tab_n * sizeof *h);
    if (!h)
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    long long *hs = (long long *)h;
    for (size_t ib = 0; ib < n_bf; ib++) {
        size_t owner = G->dev_ib ? G->dev_ib[ib] : ib;
        hs[ib] = G_stored(G, ib) ? d->slot_of[owner] : -1;
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
            t[n_bf + ib] = creal(c[j].Pk[ib]);
            t[2 * n_bf + ib] = cimag(c[j].Pk[ib]);
            t[3 * n_bf + ib] = a;
            t[4 * n_bf + ib] = b;
        }
    }
    CK(dev_alloc(d, &d->tab, &d->tab_b, tab_n * sizeof *h), "the pixel table");
    CK(cudaMemcpyAsync(d->tab, h, tab_n * sizeof *h, cudaMemcpyHostToDevice, d->stream), "the pixel table");
    CK(dev_alloc(d, &d->spec, &d->spec_b, P * nb * sizeof(float2)), "the chunk spectra");
    CK(dev_alloc(d, (void **)&d->valid, &d->valid_b, P), "the chunk flags");
    if (want_phase) {
        CK(dev_alloc(d, &d->real, &d->real_b, P * npix * sizeof(float)), "the chunk phase planes");
        CK(dev_alloc(d, &d->sums, &d->sums_b, n * 2 * npix * sizeof(double)), "the phase sums");
        CK(cudaMemsetAsync(d->sums, 0, n * 2 * npix * sizeof(double), d->stream), "the phase sums");
        CK(dev_alloc(d, (void **)&d->fin, &d->fin_b, n * 2 * sizeof(double)), "the loss sums");
        if (mean_phase)
            CK(dev_alloc(d, (void **)&d->mean, &d->mean_b, npix * sizeof(float)), "the mean phase");
        if ((st = ensure_plan(d, (int)nyf, (int)nxf, (int)P, err)))
            goto done;
    }
    if (acc) {
        CK(dev_alloc(d, &d->acc, &d->acc_b, nb * 2 * sizeof(double)), "the object sum");
        CK(cudaMemsetAsync(d->acc, 0, nb * 2 * sizeof(double), d->stream), "the object sum");
    }
    cu_grid gr = {.ny = (int)G->ny, .nx = (int)G->nx, .nxh = (int)G->nxh, .stride = (long long)d->stride,
                  .f = c[0].f, .nyf = (int)nyf, .nxf = (int)nxf, .ncols = (int)ncols};
    const double *dt = d->tab;
    for (size_t p0 = 0, k = 0; p0 < n_bf; p0 += P, k++) {
        if (k % SYNC_EVERY == 0) {
            CK(cudaStreamSynchronize(d->stream), "a pass");
            if (ssb4d_mem_progress(mem, (double)p0 / (double)n_bf)) {
                st = ssb4d_fail(err, SSB4D_ECANCELLED, "cancelled");
                goto done;
            }
        }
        size_t np = n_bf - p0 < P ? n_bf - p0 : P;
        for (size_t j = 0; j < n; j++) {
            cu_set s;
            set_of(&c[j], &s);
            cu_pixels px = {.slot = (const long long *)dt, .kx = dt + n_bf, .ky = dt + 2 * n_bf,
                            .set_tab = dt + set0 + 5 * n_bf * j, .qr = dt + 3 * n_bf,
                            .qc = dt + 3 * n_bf + nyf, .n_bf = n_bf};
            mark(d, CUDA_PROF_HOST);
            CK(cu_correct(d->planes, gr, &s, px, p0, np, d->spec, d->stream), "the correction");
            mark(d, CUDA_PROF_CORRECT);
            if (acc && j == 0)
                CK(cu_acc(d->spec, nb, np, d->acc, d->stream), "the object sum");
            mark(d, CUDA_PROF_ACC);
            if (!want_phase)
                continue;
            CK(cu_valid(px, px.set_tab, p0, np, d->valid, d->stream), "the chunk flags");
            cufftResult r = cufftExecC2R(d->plan, (cufftComplex *)d->spec, (cufftReal *)d->real);
            if (r != CUFFT_SUCCESS) {
                st = ssb4d_fail(err, SSB4D_EIO, "cuFFT's inverse transform failed (%d)", (int)r);
                goto done;
            }
            mark(d, CUDA_PROF_FFT);
            double *sums = (double *)d->sums + j * 2 * npix;
            CK(cu_phase_sum(d->real, npix, np, d->valid, s.inv_dc, sums, sums + npix, d->stream), "the phase sums");
            mark(d, CUDA_PROF_PHASE);
        }
    }
    if (want_phase) {
        const double nbf = (double)n_bf;
        for (size_t j = 0; j < n; j++) {
            double *sums = (double *)d->sums + j * 2 * npix;
            CK(cu_finish(sums, sums + npix, npix, nbf, d->fin + 2 * j, mean_phase ? d->mean : NULL, d->stream),
               "the loss");
            if (mean_phase)
                CK(cudaMemcpyAsync(mean_phase + j * npix, d->mean, npix * sizeof(float), cudaMemcpyDeviceToHost,
                                   d->stream), "the mean phase");
        }
        double fin[2 * 64], *fb = n <= 64 ? fin : malloc(2 * n * sizeof *fb);
        if (!fb) {
            st = ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
            goto done;
        }
        cudaError_t e = cudaMemcpyAsync(fb, d->fin, 2 * n * sizeof(double), cudaMemcpyDeviceToHost, d->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(d->stream);
        if (e == cudaSuccess && loss)
            for (size_t j = 0; j < n; j++)
                loss[j] = fb[2 * j] / (nbf * (double)npix) - fb[2 * j + 1] / (double)npix;
        if (fb != fin)
            free(fb);
        CK(e, "the loss");
    }
    if (acc) {
        CK(cudaMemcpyAsync(acc, d->acc, nb * 2 * sizeof(double), cudaMemcpyDeviceToHost, d->stream), "the object sum");
    }
    CK(cudaStreamSynchronize(d->stream), "a pass");
    mark(d, CUDA_PROF_FINISH);
done:
    if (st)
        cudaStreamSynchronize(d->stream);
    free(h);
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
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    long long *ho = (long long *)h, *hs = ho + nb1;
    double *hq = h + nb1 + n_bf, *hT = hq + 3 * nb1, *hk = hT + n_bf;
    for (size_t m = 0; m < nb; m++)
        ho[m] = (long long)off[m], hq[m] = qx ? qx[m] : 0, hq[nb1 + m] = qy ? qy[m] : 0,
        hq[2 * nb1 + m] = q2 ? q2[m] : 0;
    for (size_t ib = 0; ib < n_bf; ib++) {
        size_t owner = G->dev_ib ? G->dev_ib[ib] : ib;
        hs[ib] = G_stored(G, ib) ? d->slot_of[owner] : -1;
        hT[ib] = (double)G->totals[ib];
    }
    for (size_t u = 0; u < nrot; u++) {
        memcpy(hk + u * n_bf, kx[u], n_bf * sizeof *hk);
        memcpy(hk + (nrot + u) * n_bf, ky[u], n_bf * sizeof *hk);
        memcpy(hk + (2 * nrot + u) * n_bf, Ak[u], n_bf * sizeof *hk);
    }
    CK(dev_alloc(d, &d->tab, &d->tab_b, nd * sizeof *h), "the band tables");
    CK(cudaMemcpy(d->tab, h, nd * sizeof *h, cudaMemcpyHostToDevice), "the band tables");
    const double *t = d->tab;
    *b = (cu_band){.nb = (long long)nb, .n_bf = (long long)n_bf, .nrot = (long long)nrot,
                   .stride = (long long)d->stride, .off = (const long long *)t, .slot = (const long long *)t + nb1,
                   .qx = t + nb1 + n_bf, .qy = t + 2 * nb1 + n_bf, .q2 = t + 3 * nb1 + n_bf,
                   .T = t + 4 * nb1 + n_bf, .ktab = t + 4 * nb1 + 2 * n_bf};
done:
    free(h);
    return st;
}

static ssb4d_status dev_band(ssb_dev *d, const ssb4d_G *G, const ssb_band_job *j, double *total, ssb4d_mem *mem,
                             ssb4d_err *err)
{
    cudaSetDevice(d->device);
    cu_band b;
    ssb4d_status st = band_upload(d, G, j->nb, j->off, j->qx, j->qy, j->q2, j->nrot, j->kx, j->ky, j->Ak, &b, err);
    if (st)
        return st;
    b.lambda = j->lambda, b.alpha0 = j->alpha0, b.ang0 = j->ang[0], b.ang1 = j->ang[1];
    const size_t n = j->n, nout = n * (j->nb ? j->nb : 1) * 4;
    cu_band_set *hs = calloc(n, sizeof *hs);
    if (!hs)
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const ssb_band_set *s = &j->sets[i];
        for (int a = 0; a < CU_N_ABERR; a++)
            hs[i].C[a] = s->C[a], hs[i].phi[a] = s->phi[a], hs[i].an[a] = ssb4d_aberr_n(a),
            hs[i].am[a] = ssb4d_aberr_m(a);
        memcpy(hs[i].m, s->m, sizeof hs[i].m);
        hs[i].quadratic = s->quadratic, hs[i].thick = s->thick;
        hs[i].t = s->t, hs[i].tau0 = s->tau[0], hs[i].tau1 = s->tau[1];
        hs[i].rot = (long long)s->rot;
    }
    if (ssb4d_mem_progress(mem, 0.0)) {
        free(hs);
        return ssb4d_fail(err, SSB4D_ECANCELLED, "cancelled");
    }
    CK(dev_alloc(d, &d->acc, &d->acc_b, n * sizeof *hs), "the band sets");
    CK(dev_alloc(d, &d->sums, &d->sums_b, nout * sizeof(double)), "the band sums");
    CK(cudaMemcpy(d->acc, hs, n * sizeof *hs, cudaMemcpyHostToDevice), "the band sets");
    CK(cu_band_sums(d->planes, b, d->acc, n, d->sums, d->stream), "the band objective");
    CK(cudaMemcpyAsync(total, d->sums, nout * sizeof(double), cudaMemcpyDeviceToHost, d->stream), "the band sums");
    CK(cudaStreamSynchronize(d->stream), "the band objective");
    if (ssb4d_mem_progress(mem, 1.0))
        st = ssb4d_fail(err, SSB4D_ECANCELLED, "cancelled");
done:
    free(hs);
    return st;
}

static ssb4d_status dev_band_power(ssb_dev *d, const ssb4d_G *G, size_t nb, const size_t *off, const double *Ak,
                                   double *acc, ssb4d_err *err)
{
    cudaSetDevice(d->device);
    cu_band b;
    const double *kt[3] = {Ak, Ak, Ak}; /* only A(k) is read */
    ssb4d_status st = band_upload(d, G, nb, off, NULL, NULL, NULL, 1, kt, kt + 1, kt + 2, &b, err);
    if (st)
        return st;
    CK(dev_alloc(d, &d->sums, &d->sums_b, (nb ? nb : 1) * sizeof(double)), "the band power");
    CK(cu_band_power(d->planes, b, b.ktab + 2 * G->n_bf, d->sums, d->stream), "the band power");
    CK(cudaMemcpyAsync(acc, d->sums, nb * sizeof(double), cudaMemcpyDeviceToHost, d->stream), "the band power");
    CK(cudaStreamSynchronize(d->stream), "the band power");
done:
    return st;
}

static const ssb_dev_ops cuda_ops = {.name = "cuda", .phases = dev_phases, .band = dev_band,
                                     .band_power = dev_band_power};

void cuda_G_profile(const struct ssb4d_G *G, int on, double out[CUDA_PROF_N])
{
    if (!G->dev)
        return;
    if (out)
        memcpy(out, G->dev->prof, sizeof G->dev->prof);
    memset(G->dev->prof, 0, sizeof G->dev->prof);
    G->dev->profile = on;
}

void cuda_G_device_bytes(const struct ssb4d_G *G, size_t *now, size_t *peak)
{
    *now = G->dev ? G->dev->bytes : 0;
    *peak = G->dev ? G->dev->peak : 0;
}

ssb4d_status cuda_G_attach(struct ssb4d_G *G, ssb4d_mem *mem, ssb4d_err *err)
{
    if (G->is_view || G->dev)
        return ssb4d_fail(err, SSB4D_EINTERNAL, "cuda_G_attach: G is a view or already on the device");
    if (!cuda_available())
        return ssb4d_fail(err, SSB4D_EINVAL, "no CUDA device is present");
    ssb_dev *d = calloc(1, sizeof *d);
    if (!d || !(d->slot_of = malloc(G->n_bf * sizeof *d->slot_of))) {
        free(d);
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    ssb4d_status st = SSB4D_OK;
    G_group gr = {0};
    int have_group = 0;
    cudaGetDevice(&d->device);
    d->stride = G->plane_stride;
    for (size_t ib = 0; ib < G->n_bf; ib++)
        d->slot_of[ib] = G_stored(G, ib) ? (long long)d->n_slots++ : -1;
    CK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking), "creating a stream");
    size_t have = 0, want = (d->n_slots ? d->n_slots : 1) * d->stride * sizeof(float2), fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess && want > fr) {
        st = ssb4d_fail(err, SSB4D_ENOMEM,
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
    for (size_t g0 = 0; g0 < G->n_bf; g0 += gr.cap) {
        size_t g1 = g0 + gr.cap < G->n_bf ? g0 + gr.cap : G->n_bf;
        if (ssb4d_mem_progress(mem, (double)g0 / (double)G->n_bf)) {
            st = ssb4d_fail(err, SSB4D_ECANCELLED, "cancelled");
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
    G->dev_ops = &cuda_ops;
    G->dev = d;
    G->dev_free = dev_free;
    return SSB4D_OK;
}
