/* virtual.c — virtual detector images (docs/virtual.md): bright field, annular dark field, centre
 * of mass and its Fourier integral (iDPC), from one streaming pass over a source's frames.
 *
 * Data flow (bounded memory, whatever the scan size): frames in blocks (~64 MiB, 4 bytes a value)
 * through ssb4d_source_read_frames (counts) or _f32 (float data); each frame's five sums (BF, ADF,
 * Σ I, Σ row·I, Σ col·I over the unflagged pixels) are made by one thread in pixel order: exact
 * integers for counts, float64 for float32 data. Each scan position's results therefore depend on
 * neither the thread count nor the block size. Then the CoM field (float64, in the scan frame) is
 * integrated in Fourier space with single-precision FFTW (planned FFTW_ESTIMATE under the planner
 * lock, executed on 64-byte-aligned buffers: the same bits every run).
 */
#include "virtual/virtual.h"
#include "common/err.h"
#include "common/fftw_lock.h"
#include "common/parallel.h"
#include "source/source.h"

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VIRT_BLOCK_BYTES ((size_t)64 << 20)
#define VIRT_STAGE "virtual images"

enum { CLS_BF = 1, CLS_ADF = 2, CLS_COM = 4 };

void ssb4d_virtual_params_default(ssb4d_virtual_params *p)
{
    memset(p, 0, sizeof *p);
    p->bf_inner_mrad = 0.0;
    p->bf_outer_mrad = NAN;
    p->adf_inner_mrad = NAN;
    p->adf_outer_mrad = NAN;
}

void ssb4d_virtual_free(ssb4d_virtual_images *v)
{
    if (!v)
        return;
    free(v->bf);
    free(v->adf);
    free(v->com_x);
    free(v->com_y);
    free(v->idpc);
    memset(v, 0, sizeof *v);
}

/* ---- workspace ---------------------------------------------------------------------------------- */

virtual_ws virtual_ws_sizes(size_t fr, size_t npos, size_t block_bytes)
{
    virtual_ws w;
    w.frames = (block_bytes ? block_bytes : VIRT_BLOCK_BYTES) / (fr ? fr * 4 : 4);
    w.frames = w.frames < 1 ? 1 : w.frames > npos ? npos : w.frames;
    w.buf = w.frames * fr * 4;
    w.fft = 2 * npos * sizeof(fftwf_complex);
    w.images = 5 * npos * sizeof(double);
    return w;
}

void virtual_workspace(const virtual_ws *w, ws_sink *out)
{
    ws_alloc(out, w->buf);
    ws_free(out, w->buf, 0);
    ws_alloc(out, w->fft);
    ws_free(out, w->fft, 0);
}

size_t ssb4d_virtual_workspace_bytes(const size_t shape[4], size_t block_bytes, size_t *images)
{
    virtual_ws w = virtual_ws_sizes(shape[2] * shape[3], shape[0] * shape[1], block_bytes);
    if (images)
        *images = w.images;
    return w.buf > w.fft ? w.buf : w.fft;
}

/* ---- the detector's classes --------------------------------------------------------------------- */

static double angle_of(const ssb4d_geometry *g, size_t q, size_t dc)
{
    double a = ((double)(q / dc) - g->centre_px[0]) * g->det_sampling_mrad[0];
    double b = ((double)(q % dc) - g->centre_px[1]) * g->det_sampling_mrad[1];
    return sqrt(a * a + b * b);
}

static ssb4d_status check_angle(double v, const char *what, int nan_ok, ssb4d_err *err)
{
    if (isnan(v) && nan_ok)
        return SSB4D_OK;
    if (!isfinite(v) || v < 0)
        return ssb_fail(err, SSB4D_EINVAL, "the %s angle must be a number >= 0 mrad (got %g)", what, v);
    return SSB4D_OK;
}

/* The angles used and each detector pixel's classes (cls[fr]); fills out's angles and counts. */
static ssb4d_status classes(const ssb4d_calibration *cal, const ssb4d_virtual_params *p, size_t dr, size_t dc,
                            unsigned char *cls, ssb4d_virtual_images *out, ssb4d_err *err)
{
    const ssb4d_geometry *g = &cal->geom;
    const size_t fr = dr * dc;
    ssb4d_status st;
    if ((st = check_angle(p->bf_inner_mrad, "BF inner", 0, err)) || (st = check_angle(p->bf_outer_mrad, "BF outer", 1, err)) ||
        (st = check_angle(p->adf_inner_mrad, "ADF inner", 1, err)) ||
        (st = check_angle(p->adf_outer_mrad, "ADF outer", 1, err)))
        return st;
    double dmax = 0;
    for (size_t q = 0; q < fr; q++) {
        double a = angle_of(g, q, dc);
        if (a > dmax)
            dmax = a;
    }
    out->detector_max_mrad = dmax;
    double smean = sqrt(g->det_sampling_mrad[0] * g->det_sampling_mrad[1]);
    /* BF */
    out->bf_default = isnan(p->bf_outer_mrad);
    double bfi = p->bf_inner_mrad, bfo = out->bf_default ? cal->selection_radius_px * smean : p->bf_outer_mrad;
    if (!(bfi < bfo))
        return ssb_fail(err, SSB4D_EINVAL, "the BF inner angle %g mrad is not below its outer angle %g mrad", bfi, bfo);
    if (bfi >= dmax)
        return ssb_fail(err, SSB4D_EINVAL,
                        "the BF inner angle %g mrad is beyond the detector (its farthest pixel is %.3g mrad from "
                        "the centre)", bfi, dmax);
    if (bfo > dmax)
        bfo = dmax;
    /* ADF */
    int adf_in_default = isnan(p->adf_inner_mrad), adf_out_default = isnan(p->adf_outer_mrad);
    double adi = adf_in_default ? 1.5 * bfo : p->adf_inner_mrad, ado = adf_out_default ? dmax : p->adf_outer_mrad;
    if (!adf_in_default || !adf_out_default) {
        if (!(adi < ado))
            return ssb_fail(err, SSB4D_EINVAL, "the ADF inner angle %g mrad%s is not below its outer angle %g mrad%s",
                            adi, adf_in_default ? " (the default, 1.5x the BF angle)" : "", ado,
                            adf_out_default ? " (the detector's edge)" : "");
        if (adi >= dmax)
            return ssb_fail(err, SSB4D_EINVAL,
                            "the ADF inner angle %g mrad is beyond the detector (its farthest pixel is %.3g mrad "
                            "from the centre)", adi, dmax);
    }
    if (ado > dmax)
        ado = dmax;
    out->bf_inner_mrad = bfi;
    out->bf_outer_mrad = bfo;
    out->adf_inner_mrad = adi;
    out->adf_outer_mrad = ado;
    /* the classes */
    memset(cls, CLS_COM, fr);
    for (size_t i = 0; i < cal->n_flagged; i++)
        if ((size_t)cal->flagged[i] < fr)
            cls[cal->flagged[i]] = 0;
    if (out->bf_default) {
        for (size_t i = 0; i < cal->n_bf; i++) {
            size_t q = (size_t)cal->bf_pix[i];
            if (q < fr && cls[q] && angle_of(g, q, dc) >= bfi)
                cls[q] |= CLS_BF;
        }
    }
    size_t nb = 0, na = 0, nc = 0;
    for (size_t q = 0; q < fr; q++) {
        if (!cls[q])
            continue;
        double a = angle_of(g, q, dc);
        if (!out->bf_default && a >= bfi && a <= bfo)
            cls[q] |= CLS_BF;
        if (a >= adi && a <= ado && adi < dmax)
            cls[q] |= CLS_ADF;
        nb += (cls[q] & CLS_BF) != 0;
        na += (cls[q] & CLS_ADF) != 0;
        nc++;
    }
    out->n_bf_pixels = nb;
    out->n_adf_pixels = na;
    out->n_com_pixels = nc;
    if (!nb)
        return ssb_fail(err, SSB4D_EINVAL, "the BF angles %g to %g mrad select no unflagged detector pixel", bfi, bfo);
    if (!na && (!adf_in_default || !adf_out_default))
        return ssb_fail(err, SSB4D_EINVAL, "the ADF angles %g to %g mrad select no unflagged detector pixel", adi, ado);
    return SSB4D_OK;
}

/* ---- the pass ------------------------------------------------------------------------------------ */

typedef struct {
    size_t dr, dc, fr, ny, nx, npos, block;
    int nt, is_float;
    const unsigned char *cls;
    double c0, c1, s0, s1, ct, st;
    int flip;
    void *buf;
} vrun;

/* The CoM of one frame's moments into the scan frame: com_x, com_y. */
static inline void com_of(const vrun *r, double m0, double mr, double mc, double *kx, double *ky)
{
    double d0 = 0, d1 = 0;
    if (m0 > 0) {
        d0 = (mr / m0 - r->c0) * r->s0;
        d1 = (mc / m0 - r->c1) * r->s1;
    }
    if (r->flip) {
        double t = d0;
        d0 = d1;
        d1 = t;
    }
    *kx = r->ct * d0 - r->st * d1;
    *ky = r->st * d0 + r->ct * d1;
}

static void frames_counts(const vrun *r, size_t p0, size_t n, ssb4d_virtual_images *o)
{
    const uint32_t *buf = r->buf;
    const size_t dr = r->dr, dc = r->dc, fr = r->fr;
    const unsigned char *cls = r->cls;
#pragma omp parallel for num_threads(r->nt) schedule(static)
    for (size_t f = 0; f < n; f++) {
        const uint32_t *fp = buf + f * fr;
        uint64_t s0 = 0, sr = 0, sc = 0, b = 0, a = 0;
        for (size_t row = 0; row < dr; row++) {
            uint64_t rs = 0, cs = 0;
            for (size_t col = 0; col < dc; col++) {
                size_t q = row * dc + col;
                unsigned m = cls[q];
                if (!m)
                    continue;
                uint64_t v = fp[q];
                rs += v;
                cs += v * col;
                if (m & CLS_BF)
                    b += v;
                if (m & CLS_ADF)
                    a += v;
            }
            s0 += rs;
            sr += rs * row;
            sc += cs;
        }
        size_t i = p0 + f;
        o->bf[i] = (double)b;
        o->adf[i] = (double)a;
        com_of(r, (double)s0, (double)sr, (double)sc, &o->com_x[i], &o->com_y[i]);
    }
}

static void frames_float(const vrun *r, size_t p0, size_t n, ssb4d_virtual_images *o)
{
    const float *buf = r->buf;
    const size_t dr = r->dr, dc = r->dc, fr = r->fr;
    const unsigned char *cls = r->cls;
#pragma omp parallel for num_threads(r->nt) schedule(static)
    for (size_t f = 0; f < n; f++) {
        const float *fp = buf + f * fr;
        double s0 = 0, sr = 0, sc = 0, b = 0, a = 0;
        for (size_t row = 0; row < dr; row++) {
            double rs = 0, cs = 0;
            for (size_t col = 0; col < dc; col++) {
                size_t q = row * dc + col;
                unsigned m = cls[q];
                if (!m)
                    continue;
                double v = fp[q];
                rs += v;
                cs += v * (double)col;
                if (m & CLS_BF)
                    b += v;
                if (m & CLS_ADF)
                    a += v;
            }
            s0 += rs;
            sr += rs * (double)row;
            sc += cs;
        }
        size_t i = p0 + f;
        o->bf[i] = b;
        o->adf[i] = a;
        com_of(r, s0, sr, sc, &o->com_x[i], &o->com_y[i]);
    }
}

static int poll(const ssb4d_virtual_params *p, double f)
{
    if (ssb4d_mem_progress(p->mem, f))
        return 1;
    return p->progress && p->progress(p->progress_user, VIRT_STAGE, f);
}

/* fftfreq(n, d)[k] */
static double freq(size_t k, size_t n, double d)
{
    long kk = k < (n + 1) / 2 ? (long)k : (long)k - (long)n;
    return (double)kk / ((double)n * d);
}

/* φ = Re IDFT[−i·1e-3/λ · (f_x Ĉ_x + f_y Ĉ_y) / |f|²], the k = 0 term 0. */
static ssb4d_status integrate(const ssb4d_virtual_params *p, size_t fft_bytes, ssb4d_virtual_images *o,
                              ssb4d_err *err)
{
    const size_t ny = o->scan_shape[0], nx = o->scan_shape[1], n = ny * nx;
    fftwf_complex *A = ssb4d_mem_alloc(p->mem, fft_bytes, "virtual iDPC planes", err);
    if (!A)
        return err && err->code ? err->code : SSB4D_ENOMEM;
    fftwf_complex *B = A + n;
    for (size_t i = 0; i < n; i++) {
        A[i][0] = (float)o->com_x[i];
        A[i][1] = 0;
        B[i][0] = (float)o->com_y[i];
        B[i][1] = 0;
    }
    ssb_fftw_lock();
    fftwf_plan fwd = fftwf_plan_dft_2d((int)ny, (int)nx, A, A, FFTW_FORWARD, FFTW_ESTIMATE);
    fftwf_plan inv = fftwf_plan_dft_2d((int)ny, (int)nx, A, A, FFTW_BACKWARD, FFTW_ESTIMATE);
    ssb_fftw_unlock();
    if (!fwd || !inv) {
        ssb_fftw_lock();
        if (fwd)
            fftwf_destroy_plan(fwd);
        if (inv)
            fftwf_destroy_plan(inv);
        ssb_fftw_unlock();
        ssb4d_mem_free(p->mem, A, 0);
        return ssb_fail(err, SSB4D_EINTERNAL, "virtual images: FFTW could not plan a %zux%zu transform", ny, nx);
    }
    fftwf_execute_dft(fwd, A, A);
    fftwf_execute_dft(fwd, B, B);
    const double lam = o->idpc_lambda_A, sx = o->idpc_step_A[0], sy = o->idpc_step_A[1];
    const double scale = 1e-3 / lam;
    for (size_t i = 0; i < ny; i++) {
        double fx = freq(i, ny, sx);
        for (size_t j = 0; j < nx; j++) {
            double fy = freq(j, nx, sy), f2 = fx * fx + fy * fy;
            size_t q = i * nx + j;
            if (f2 == 0) {
                A[q][0] = A[q][1] = 0;
                continue;
            }
            double re = fx * (double)A[q][0] + fy * (double)B[q][0];
            double im = fx * (double)A[q][1] + fy * (double)B[q][1];
            double c = scale / f2;
            /* −i (re + i im) = im − i re */
            A[q][0] = (float)(c * im);
            A[q][1] = (float)(-c * re);
        }
    }
    fftwf_execute_dft(inv, A, A);
    for (size_t i = 0; i < n; i++)
        o->idpc[i] = (double)A[i][0] / (double)n;
    ssb_fftw_lock();
    fftwf_destroy_plan(fwd);
    fftwf_destroy_plan(inv);
    ssb_fftw_unlock();
    ssb4d_mem_free(p->mem, A, 0);
    return SSB4D_OK;
}

ssb4d_status ssb4d_virtual_compute(ssb4d_source *src, const ssb4d_calibration *cal, const ssb4d_virtual_params *pp,
                                   ssb4d_virtual_images *out, ssb4d_err *err)
{
    if (!out)
        return ssb_fail(err, SSB4D_EINVAL, "virtual images: no output");
    memset(out, 0, sizeof *out);
    if (!src || !cal)
        return ssb_fail(err, SSB4D_EINVAL, "virtual images: no data source or no calibration");
    ssb4d_virtual_params pd;
    if (!pp) {
        ssb4d_virtual_params_default(&pd);
        pp = &pd;
    }
    const ssb4d_virtual_params *p = pp;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t shape[4];
    ssb4d_source_shape(src, shape);
    const ssb4d_geometry *g = &cal->geom;
    if (cal->det_shape[0] != shape[2] || cal->det_shape[1] != shape[3])
        return ssb_fail(err, SSB4D_EINVAL, "virtual images: the calibration is of a %zux%zu detector, the data's is %zux%zu",
                        cal->det_shape[0], cal->det_shape[1], shape[2], shape[3]);
    if (!cal->bf_pix && cal->n_bf)
        return ssb_fail(err, SSB4D_EINVAL, "virtual images: the calibration has no BF selection");
    for (int i = 0; i < 2; i++)
        if (!(g->det_sampling_mrad[i] > 0) || !isfinite(g->det_sampling_mrad[i]) || !isfinite(g->centre_px[i]))
            return ssb_fail(err, SSB4D_EINVAL, "virtual images: the calibration has no detector sampling or centre");
    if (!isfinite(g->rotation_deg))
        return ssb_fail(err, SSB4D_EINVAL, "virtual images: the calibration has no rotation");
    if (shape[0] > (size_t)1 << 30 || shape[1] > (size_t)1 << 30)
        return ssb_fail(err, SSB4D_EINVAL, "virtual images: the scan %zux%zu is too large", shape[0], shape[1]);
    vrun r;
    memset(&r, 0, sizeof r);
    r.ny = shape[0], r.nx = shape[1], r.dr = shape[2], r.dc = shape[3];
    r.fr = r.dr * r.dc, r.npos = r.ny * r.nx;
    unsigned char *cls = malloc(r.fr ? r.fr : 1);
    if (!cls)
        return ssb_fail(err, SSB4D_ENOMEM, "virtual images: out of memory");
    ssb4d_status st = classes(cal, p, r.dr, r.dc, cls, out, err);
    if (st) {
        free(cls);
        ssb4d_virtual_images keep = *out;
        memset(out, 0, sizeof *out);
        out->detector_max_mrad = keep.detector_max_mrad;
        return st;
    }
    out->scan_shape[0] = r.ny;
    out->scan_shape[1] = r.nx;
    out->centre_px[0] = r.c0 = g->centre_px[0];
    out->centre_px[1] = r.c1 = g->centre_px[1];
    out->det_sampling_mrad[0] = r.s0 = g->det_sampling_mrad[0];
    out->det_sampling_mrad[1] = r.s1 = g->det_sampling_mrad[1];
    out->rotation_deg = g->rotation_deg;
    out->flip = r.flip = g->flip != 0;
    double th = g->rotation_deg * M_PI / 180.0;
    r.ct = cos(th);
    r.st = sin(th);
    int known = g->kv > 0 && isfinite(g->kv) && g->scan_step_A[0] > 0 && g->scan_step_A[1] > 0 &&
                isfinite(g->scan_step_A[0]) && isfinite(g->scan_step_A[1]);
    out->idpc_lambda_A = known ? ssb4d_wavelength_A(g->kv) : 1.0;
    out->idpc_step_A[0] = known ? g->scan_step_A[0] : 1.0;
    out->idpc_step_A[1] = known ? g->scan_step_A[1] : 1.0;
    snprintf(out->idpc_unit, sizeof out->idpc_unit, "%s", known ? "rad" : "mrad px");
    r.cls = cls;
    r.is_float = ssb4d_source_is_float(src);
    virtual_ws w = virtual_ws_sizes(r.fr, r.npos, p->block_bytes);
    r.block = w.frames;
    r.nt = ssb_threads_resolve(p->threads);
    if ((size_t)r.nt > r.block)
        r.nt = (int)r.block;
    size_t npos = r.npos;
    out->bf = malloc(npos * sizeof(double));
    out->adf = malloc(npos * sizeof(double));
    out->com_x = malloc(npos * sizeof(double));
    out->com_y = malloc(npos * sizeof(double));
    out->idpc = malloc(npos * sizeof(double));
    if (!out->bf || !out->adf || !out->com_x || !out->com_y || !out->idpc) {
        st = ssb_fail(err, SSB4D_ENOMEM, "virtual images: out of memory (%zu scan positions)", npos);
        goto fail;
    }
    r.buf = ssb4d_mem_alloc(p->mem, w.buf, "virtual frame block", err);
    if (!r.buf) {
        st = err && err->code ? err->code : SSB4D_ENOMEM;
        goto fail;
    }
    for (size_t p0 = 0; p0 < npos && !st; p0 += r.block) {
        size_t n = npos - p0 < r.block ? npos - p0 : r.block;
        if (poll(p, 0.95 * (double)p0 / (double)npos)) {
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
            break;
        }
        st = r.is_float ? ssb4d_source_read_frames_f32(src, p0, n, r.buf, err)
                        : ssb4d_source_read_frames(src, p0, n, r.buf, err);
        if (st)
            break;
        ssb_source_done_with(src, p0, n);
        if (r.is_float)
            frames_float(&r, p0, n, out);
        else
            frames_counts(&r, p0, n, out);
    }
    ssb4d_mem_free(p->mem, r.buf, 0);
    if (st)
        goto fail;
    if (poll(p, 0.95)) {
        st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
        goto fail;
    }
    if ((st = integrate(p, w.fft, out, err)))
        goto fail;
    free(cls);
    poll(p, 1.0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return SSB4D_OK;
fail:
    free(cls);
    ssb4d_virtual_free(out);
    return st;
}
