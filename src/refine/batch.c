/* batch.c — the region's patterns for the refinement: read scan row by scan row (positions are
 * flat row-major over the whole scan), binned b×b, put in the model's FFT order around the BF
 * centre on a model grid pad times the binned detector (the frequencies beyond the detector are
 * modelled but not measured: the exit wave's scattering beyond the detector does not wrap onto
 * it), and kept in memory (counted in the memory context): npos × grid floats, never the
 * whole scan's 4-D array. Pixels that are flagged (a bin holding one), or that fall outside the
 * model grid's ±half-width around the centre, are left out of the likelihood. At the end: the
 * minibatch on a device (refine_accel: the CUDA engine of src/cuda/refine.h behind the solver's
 * minibatch loop). */
#include "refine/refine.h"

#include "common/err.h"
#include "common/mem_device.h"
#include "cuda/refine.h"
#ifdef SSB4D_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

int refine_fast_size(int n)
{
    for (;; n++) {
        int m = n;
        if (m % 2)
            continue; /* even: the zero frequency sits in the middle of the detector's half-widths */
        static const int f[] = {2, 3, 5, 7};
        for (int i = 0; i < 4; i++)
            while (m % f[i] == 0)
                m /= f[i];
        if (m == 1)
            return n;
    }
}

int refine_grid_size(int det, double pad)
{
    int need = (int)ceil(pad * det), p2 = 2;
    while (p2 < need)
        p2 *= 2;
    /* FFTW_ESTIMATE's plans (reproducible bits, SPEC §9) are much faster for powers of two: at
     * 96² a transform took 84 µs, at 128² 61 µs; take one up to 2× the detector */
    return p2 <= 2 * det ? p2 : refine_fast_size(need);
}

int refine_auto_bin(size_t det_rows, size_t det_cols)
{
    size_t d = det_rows > det_cols ? det_rows : det_cols;
    return d <= 96 ? 1 : d <= 192 ? 2 : 4;
}

void refine_data_free(refine_data *d)
{
    if (!d)
        return;
    ssb4d_mem_free(d->mem, d->cnt, 0);
    free(d->valid);
    free(d->vidx);
    memset(d, 0, sizeof *d);
}

ssb4d_status refine_data_load(ssb4d_source *src, const ssb4d_calibration *cal, const ssb4d_geometry *g,
                              const size_t region[4], int bin, double pad, ssb4d_mem *mem, refine_data *d,
                              ssb4d_err *err)
{
    memset(d, 0, sizeof *d);
    d->mem = mem;
    size_t sh[4];
    ssb4d_source_shape(src, sh);
    size_t Dr = sh[2], Dc = sh[3], b = (size_t)bin;
    d->dr = (int)(Dr / b), d->dc = (int)(Dc / b);
    int nr = refine_grid_size(d->dr, pad), nc = refine_grid_size(d->dc, pad);
    d->nr = nr, d->nc = nc, d->bin = bin;
    d->n = (size_t)nr * nc;
    size_t rows = region[1] - region[0], cols = region[3] - region[2];
    d->npos = rows * cols;
    /* binned centre: bin B covers fine pixels [B·b, B·b + b), centred at B·b + (b − 1)/2 */
    double cb[2], ci[2];
    for (int a = 0; a < 2; a++) {
        cb[a] = (g->centre_px[a] - 0.5 * (double)(b - 1)) / (double)b;
        ci[a] = floor(cb[a] + 0.5);
        d->delta[a] = ci[a] - cb[a];
    }
    /* which model pixel each detector pixel feeds (−1: none), and the valid ones */
    d->valid = calloc(d->n, 1);
    d->vidx = malloc(d->n * sizeof(int));
    int *map = malloc(Dr * Dc * sizeof(int)), *cidx = malloc(d->n * sizeof(int));
    unsigned char *bad = calloc(d->n, 1);
    if (!d->valid || !d->vidx || !map || !cidx || !bad) {
        free(map);
        free(cidx);
        free(bad);
        refine_data_free(d);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for the refinement's %zu patterns", rows * cols);
    }
    long hr = nr / 2, hc = nc / 2;
    for (size_t r = 0; r < Dr; r++)
        for (size_t c = 0; c < Dc; c++) {
            long B0 = (long)(r / b), B1 = (long)(c / b);
            map[r * Dc + c] = -1;
            if (B0 >= d->dr || B1 >= d->dc)
                continue;
            long s0 = B0 - (long)ci[0], s1 = B1 - (long)ci[1]; /* signed frequency index */
            if (s0 < -hr || s0 >= nr - hr || s1 < -hc || s1 >= nc - hc)
                continue;
            size_t q = (size_t)((s0 + nr) % nr) * nc + (size_t)((s1 + nc) % nc);
            map[r * Dc + c] = (int)q;
            d->valid[q] = 1;
        }
    for (size_t f = 0; f < cal->n_flagged; f++) {
        int q = map[cal->flagged[f]];
        if (q >= 0)
            bad[q] = 1;
    }
    d->nv = 0;
    for (size_t q = 0; q < d->n; q++) {
        if (bad[q])
            d->valid[q] = 0;
        cidx[q] = d->valid[q] ? (int)d->nv : -1;
        if (d->valid[q])
            d->vidx[d->nv++] = (int)q;
    }
    free(bad);
    /* the patterns: the valid pixels only (the model grid's margin holds no data) */
    d->cnt = ssb4d_mem_alloc(mem, d->npos * d->nv * sizeof(float), "refine patterns", err);
    float *frames = d->cnt ? ssb4d_mem_alloc(mem, cols * Dr * Dc * sizeof(float), "refine frames", err) : NULL;
    if (!d->cnt || !frames) { /* the memory context's line says what did not fit */
        free(map);
        free(cidx);
        refine_data_free(d);
        return err ? err->code : SSB4D_ENOMEM;
    }
    memset(d->cnt, 0, d->npos * d->nv * sizeof(float));
    double total = 0.0, sv = 0.0;
    ssb4d_status st = SSB4D_OK;
    for (size_t i = 0; i < rows && !st; i++) {
        st = ssb4d_source_read_frames_f32(src, (region[0] + i) * sh[1] + region[2], cols, frames, err);
        if (st)
            break;
        for (size_t j = 0; j < cols; j++) {
            const float *fr = frames + j * Dr * Dc;
            float *o = d->cnt + (i * cols + j) * d->nv;
            double tot = 0.0;
            for (size_t p = 0; p < Dr * Dc; p++) {
                tot += fr[p];
                if (map[p] >= 0 && cidx[map[p]] >= 0)
                    o[cidx[map[p]]] += fr[p];
            }
            total += tot;
            for (size_t v = 0; v < d->nv; v++)
                sv += o[v];
        }
        if (ssb4d_mem_progress(mem, 0.02 * (double)(i + 1) / (double)rows)) {
            st = ssb_fail(err, SSB4D_ECANCELLED, "refine: cancelled");
            break;
        }
    }
    ssb4d_mem_free(mem, frames, 0);
    free(map);
    free(cidx);
    if (st) {
        refine_data_free(d);
        return st;
    }
    d->mean_total = total / (double)d->npos;
    d->sum_valid = sv;
    return SSB4D_OK;
}

void refine_data_expand(const refine_data *d, size_t p, float *out)
{
    memset(out, 0, d->n * sizeof(float));
    const float *c = d->cnt + p * d->nv;
    for (size_t v = 0; v < d->nv; v++)
        out[d->vidx[v]] = c[v];
}

/* E[2(c log(c/μ) − (c − μ))] for c ~ Poisson(μ): summed exactly below μ = 30, the asymptotic
 * 1 + 1/(6μ) + 1/(6μ²) above. */
double refine_expected_deviance(double mu)
{
    if (!(mu > 0))
        return 0.0;
    if (mu >= 30.0)
        return 1.0 + 1.0 / (6.0 * mu) + 1.0 / (6.0 * mu * mu);
    double e = 0.0, p = exp(-mu);
    int kmax = (int)(mu + 12.0 * sqrt(mu) + 25.0);
    for (int k = 0; k <= kmax; k++) {
        double dv = 2.0 * ((k > 0 ? k * log(k / mu) : 0.0) - (k - mu));
        e += p * dv;
        p *= mu / (k + 1);
    }
    return e;
}

/* ---- the minibatch on a device (refine.h, src/cuda/refine.h; docs/refine.md "Backends") ---- */

struct refine_accel {
#ifdef SSB4D_HAVE_CUDA
    cuda_refine *c;
#endif
    unsigned long version; /* the model tables' version on the device (0: none yet) */
    ssb4d_err err;
};

size_t refine_device_bytes(size_t npos, size_t nv, const size_t det[2], const size_t obj[2], int slices,
                           size_t batch)
{
    cuda_refine_shape sh = {(int)det[0], (int)det[1], slices, batch, obj[0], obj[1], npos, nv};
    size_t work = 0;
#ifdef SSB4D_HAVE_CUDA
    work = cuda_refine_fft_work(sh.nr, sh.nc, batch);
#endif
    return cuda_refine_bytes_for(&sh, work);
}

ssb4d_status refine_accel_new(ssb4d_backend_kind kind, const refine_data *d, int ns, size_t batch,
                              const size_t obj[2], refine_accel **out, ssb4d_err *err)
{
    *out = NULL;
    /* AUTO is the CPU: the GPU path runs only when asked for (docs/refine.md "Backends": its
     * minibatches agree with the CPU's, its whole runs do not yet) */
    if (kind == SSB4D_BACKEND_CPU || kind == SSB4D_BACKEND_AUTO)
        return SSB4D_OK;
    if (kind != SSB4D_BACKEND_AUTO && kind != SSB4D_BACKEND_CUDA)
        return ssb_fail(err, SSB4D_EINVAL, "refine: unknown backend %d", (int)kind);
#ifdef SSB4D_HAVE_CUDA
    if (!cuda_available()) {
        if (kind == SSB4D_BACKEND_AUTO)
            return SSB4D_OK;
        return ssb_fail(err, SSB4D_EINVAL, "refine: --backend cuda: no CUDA device here (use --backend cpu)");
    }
    refine_accel *a = calloc(1, sizeof *a);
    if (!a)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    cuda_refine_shape sh = {d->nr, d->nc, ns, batch < d->npos ? batch : d->npos, obj[0], obj[1], d->npos, d->nv};
    ssb4d_status st = cuda_refine_new(&sh, d->cnt, d->vidx, 0, &a->c, err);
    if (st) {
        free(a);
        return st;
    }
    *out = a;
    return SSB4D_OK;
#else
    (void)d, (void)ns, (void)batch, (void)obj;
    if (kind == SSB4D_BACKEND_AUTO)
        return SSB4D_OK;
    return ssb_fail(err, SSB4D_EINVAL, "refine: --backend cuda: this build has no CUDA backend (use --backend cpu)");
#endif
}

void refine_accel_delete(refine_accel *a, ssb4d_mem *mem)
{
    if (!a)
        return;
#ifdef SSB4D_HAVE_CUDA
    size_t peak = 0;
    cuda_refine_device_bytes(a->c, NULL, &peak);
    if (mem)
        ssb_mem_stage_device_peak(mem, peak);
    cuda_refine_delete(a->c);
#else
    (void)mem;
#endif
    free(a);
}

int refine_accel_batch(refine_accel *a, const refine_model *m, const float *t, const size_t *pos, size_t nb,
                       const long *o0, const long *o1, const double *s0, const double *s1, double scale,
                       int amplitude, int want_obj, int want_g, double *lp, double *sp, double *gp, float *gb)
{
#ifdef SSB4D_HAVE_CUDA
    refine_tables tb;
    refine_model_tables(m, &tb);
    ssb4d_status st = SSB4D_OK;
    if (tb.version != a->version) { /* θ changed: the tables go up again */
        st = cuda_refine_tables(a->c, tb.P, tb.prop, tb.dchi, tb.dth, tb.fr, tb.fc, &a->err);
        a->version = st ? 0 : tb.version;
    }
    if (!st)
        st = cuda_refine_batch(a->c, t, pos, nb, o0, o1, s0, s1, scale, amplitude, want_obj, want_g, lp, sp, gp, gb,
                               &a->err);
    return st ? -1 : 0;
#else
    (void)m, (void)t, (void)pos, (void)nb, (void)o0, (void)o1, (void)s0, (void)s1, (void)scale, (void)amplitude;
    (void)want_obj, (void)want_g, (void)lp, (void)sp, (void)gp, (void)gb;
    ssb_fail(&a->err, SSB4D_EINVAL, "refine: this build has no CUDA backend");
    return -1;
#endif
}

ssb4d_status refine_accel_error(const refine_accel *a, ssb4d_err *err)
{
    if (!a || !a->err.code)
        return SSB4D_OK;
    if (err)
        *err = a->err;
    return a->err.code;
}

void refine_accel_object_changed(refine_accel *a)
{
#ifdef SSB4D_HAVE_CUDA
    /* A new solve has a new model whose version count starts again at 1: the tables go up again
     * too, or the check start's model, reaching the main solve's last count, would run on the
     * main solve's last tables. */
    if (a)
        cuda_refine_object_changed(a->c), a->version = 0;
#else
    (void)a;
#endif
}

size_t refine_accel_peak(const refine_accel *a)
{
    size_t peak = 0;
#ifdef SSB4D_HAVE_CUDA
    if (a)
        cuda_refine_device_bytes(a->c, NULL, &peak);
#else
    (void)a;
#endif
    return peak;
}

const char *refine_accel_name(const refine_accel *a) { return a ? "cuda" : "cpu"; }
