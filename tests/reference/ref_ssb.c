/* ref_ssb.c — float64 reference SSB (see ref_ssb.h). Plain loops, double precision. */
#include "ref_ssb.h"

#include <complex.h>
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <sys/stat.h>
#include <fftw3.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

const int ref_aberr_n[SSB4D_N_ABERR] = {1, 1, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 5};
const int ref_aberr_m[SSB4D_N_ABERR] = {0, 2, 1, 3, 0, 2, 4, 1, 3, 5, 0, 2, 4, 6};
const char *const ref_aberr_names[SSB4D_N_ABERR] = {"C10", "C12", "C21", "C23", "C30",
                                                    "C32", "C34", "C41", "C43", "C45",
                                                    "C50", "C52", "C54", "C56"};

/* ------------------------------------------------------------------------------ optics */

double ref_wavelength(double kv)
{
    const double h = 6.62607015e-34;     /* J s (exact) */
    const double me = 9.1093837015e-31;  /* kg */
    const double e = 1.602176634e-19;    /* C (exact) */
    const double c = 299792458.0;        /* m/s (exact) */
    double V = kv * 1000.0;
    double p2 = 2.0 * me * e * V * (1.0 + e * V / (2.0 * me * c * c));
    return h / sqrt(p2) * 1e10;
}

void ref_optics_init(ref_optics *o, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                     const ssb4d_thick *th)
{
    memset(o, 0, sizeof *o);
    o->lambda = ref_wavelength(g->kv);
    o->alpha0 = g->semiangle_mrad * 1e-3;
    o->ang[0] = g->det_sampling_mrad[0] * 1e-3;
    o->ang[1] = g->det_sampling_mrad[1] * 1e-3;
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        o->C[i] = ab ? ab->C_nm[i] * 10.0 : 0.0;            /* nm → Å */
        o->phi[i] = ab ? ab->phi_deg[i] * (M_PI / 180.0) : 0.0; /* deg → rad */
    }
    if (th) {
        o->thick = 1;
        o->tau[0] = th->tilt_mrad[0] * 1e-3;
        o->tau[1] = th->tilt_mrad[1] * 1e-3;
        o->t = th->thickness_nm * 10.0;
    }
}

double ref_chi(const ref_optics *o, double vx, double vy)
{
    double r = sqrt(vx * vx + vy * vy);
    if (r == 0.0)
        return 0.0;
    double alpha = o->lambda * r;
    double phi = atan2(vy, vx);
    double sum = 0.0;
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        if (o->C[i] == 0.0)
            continue;
        int n = ref_aberr_n[i], m = ref_aberr_m[i];
        double a = 1.0;
        for (int p = 0; p < n + 1; p++)
            a *= alpha;
        sum += o->C[i] * a / (double)(n + 1) * cos((double)m * (phi - o->phi[i]));
    }
    return 2.0 * M_PI / o->lambda * sum;
}

double ref_aperture(const ref_optics *o, double vx, double vy)
{
    double r = sqrt(vx * vx + vy * vy);
    double w;
    if (r > 0.0) {
        double a = vx * o->ang[0], b = vy * o->ang[1];
        w = sqrt(a * a + b * b) / r;
    } else {
        w = o->ang[0];
    }
    double alpha = o->lambda * r;
    if (!(w > 0.0))
        return alpha <= o->alpha0 ? 1.0 : 0.0;
    double A = (o->alpha0 - alpha) / w + 0.5;
    if (A < 0.0)
        A = 0.0;
    if (A > 1.0)
        A = 1.0;
    return A;
}

double complex ref_probe(const ref_optics *o, double vx, double vy)
{
    double A = ref_aperture(o, vx, vy);
    if (A == 0.0)
        return 0.0;
    double chi = ref_chi(o, vx, vy);
    return A * (cos(chi) - I * sin(chi));
}

static double sinc(double x) { return fabs(x) < 1e-6 ? 1.0 : sin(x) / x; }

static double alpha2(const ref_optics *o, double vx, double vy)
{
    double a = o->lambda * sqrt(vx * vx + vy * vy);
    return a * a;
}

double complex ref_gamma(const ref_optics *o, double qx, double qy, double kx, double ky)
{
    double complex Pk = ref_probe(o, kx, ky);
    double complex Pm = o->gamma_variant ? ref_probe(o, qx - kx, qy - ky)
                                         : ref_probe(o, kx - qx, ky - qy);
    double complex Pp = ref_probe(o, qx + kx, qy + ky);
    double complex t1 = Pm * conj(Pk);
    double complex t2 = conj(Pp) * Pk;
    if (!o->thick)
        return t1 - t2;
    double a2k = alpha2(o, kx, ky);
    double qt = qx * o->tau[0] + qy * o->tau[1];
    double rate1 = -(M_PI / o->lambda) * (alpha2(o, qx - kx, qy - ky) - a2k) - 2.0 * M_PI * qt;
    double rate2 = +(M_PI / o->lambda) * (alpha2(o, qx + kx, qy + ky) - a2k) - 2.0 * M_PI * qt;
    double w1 = sinc(rate1 * o->t / 2.0);
    double w2 = sinc(rate2 * o->t / 2.0);
    return w1 * t1 - w2 * t2;
}

double complex ref_ncorr(const ref_optics *o, double qx, double qy, double kx, double ky)
{
    double complex g = ref_gamma(o, qx, qy, kx, ky);
    double m = cabs(g);
    if (m >= 1e-8)
        return conj(g) / m;
    /* A bin the apertures open whose two terms cancel: γ's direction as the aberrations leave
     * that point, −i·t1/|t1| (docs/ssb-math.md, "degenerate bins"). t1 with its thick weight. */
    double complex t1 = ref_probe(o, kx - qx, ky - qy) * conj(ref_probe(o, kx, ky));
    double complex t2 = conj(ref_probe(o, kx + qx, ky + qy)) * ref_probe(o, kx, ky);
    if (o->thick) {
        double a2k = alpha2(o, kx, ky), qt = qx * o->tau[0] + qy * o->tau[1];
        t1 *= sinc((-(M_PI / o->lambda) * (alpha2(o, qx - kx, qy - ky) - a2k) - 2.0 * M_PI * qt) * o->t / 2.0);
        t2 *= sinc(((M_PI / o->lambda) * (alpha2(o, qx + kx, qy + ky) - a2k) - 2.0 * M_PI * qt) * o->t / 2.0);
    }
    if (cabs(t1) > 0)
        return conj(-I * t1) / cabs(t1);
    return cabs(t2) > 0 ? conj(-t2) / cabs(t2) : 0.0;
}

double ref_fftfreq(size_t i, size_t n, double d)
{
    long k = (i < (n + 1) / 2) ? (long)i : (long)i - (long)n;
    return (double)k / ((double)n * d);
}

double complex ref_ncorr_bin(const ref_optics *o, size_t i, size_t j, size_t ny, size_t nx,
                             double sr, double sc, double kx, double ky)
{
    double qxs[2], qys[2];
    int nqx = 1, nqy = 1;
    if (ny % 2 == 0 && i == ny / 2) {
        qxs[0] = -1.0 / (2.0 * sr);
        qxs[1] = +1.0 / (2.0 * sr);
        nqx = 2;
    } else {
        qxs[0] = ref_fftfreq(i, ny, sr);
    }
    if (nx % 2 == 0 && j == nx / 2) {
        qys[0] = -1.0 / (2.0 * sc);
        qys[1] = +1.0 / (2.0 * sc);
        nqy = 2;
    } else {
        qys[0] = ref_fftfreq(j, nx, sc);
    }
    double complex s = 0.0;
    for (int a = 0; a < nqx; a++)
        for (int b = 0; b < nqy; b++)
            s += ref_ncorr(o, qxs[a], qys[b], kx, ky);
    return s / (double)(nqx * nqy);
}

void ref_k_vector(const ssb4d_geometry *g, double lambda, int32_t pix, size_t det_cols,
                  double *kx, double *ky)
{
    double row = (double)(pix / (int32_t)det_cols), col = (double)(pix % (int32_t)det_cols);
    double dkr = g->det_sampling_mrad[0] * 1e-3 / lambda;
    double dkc = g->det_sampling_mrad[1] * 1e-3 / lambda;
    double x = (row - g->centre_px[0]) * dkr;
    double y = (col - g->centre_px[1]) * dkc;
    double a = -g->rotation_deg * (M_PI / 180.0);
    *kx = x * cos(a) + y * sin(a);
    *ky = -x * sin(a) + y * cos(a);
}

int ref_upsample_auto(const ssb4d_geometry *g)
{
    static const int fs[5] = {1, 2, 3, 4, 8};
    double band = 2.0 * g->semiangle_mrad * 1e-3 / ref_wavelength(g->kv);
    for (int i = 0; i < 5; i++) {
        int f = fs[i];
        if (f / (2.0 * g->scan_step_A[0]) >= band && f / (2.0 * g->scan_step_A[1]) >= band)
            return f;
    }
    return 8;
}

/* ------------------------------------------------------------------------------ data */

static int data_finish(ref_data *d)
{
    size_t n = d->ny * d->nx;
    d->G = fftw_malloc(sizeof(double complex) * n * (d->n_bf ? d->n_bf : 1));
    double complex *buf = fftw_malloc(sizeof(double complex) * n);
    if (!d->G || !buf)
        return -1;
    fftw_plan p = fftw_plan_dft_2d((int)d->ny, (int)d->nx, buf, buf, FFTW_FORWARD, FFTW_ESTIMATE);
    double total = 0.0;
    for (size_t k = 0; k < d->n_bf; k++) {
        const double *im = d->img + k * n;
        for (size_t r = 0; r < n; r++) {
            buf[r] = im[r];
            total += im[r];
        }
        fftw_execute(p);
        memcpy(d->G + k * n, buf, sizeof(double complex) * n);
    }
    fftw_destroy_plan(p);
    fftw_free(buf);
    d->total = total;
    d->dc = d->n_bf ? total / (double)d->n_bf : 0.0;
    return 0;
}

static int data_alloc(ref_data *d, size_t ny, size_t nx, size_t dr, size_t dcl,
                      const int32_t *bf_pix, size_t n_bf)
{
    memset(d, 0, sizeof *d);
    d->ny = ny;
    d->nx = nx;
    d->det_rows = dr;
    d->det_cols = dcl;
    d->n_bf = n_bf;
    d->bf_pix = malloc(sizeof(int32_t) * (n_bf ? n_bf : 1));
    d->img = malloc(sizeof(double) * ny * nx * (n_bf ? n_bf : 1));
    if (!d->bf_pix || !d->img)
        return -1;
    memcpy(d->bf_pix, bf_pix, sizeof(int32_t) * n_bf);
    return 0;
}

#define FROM_COUNTS(T)                                                                        \
    size_t ny = shape[0], nx = shape[1], dr = shape[2], dcl = shape[3];                       \
    if (data_alloc(d, ny, nx, dr, dcl, bf_pix, n_bf))                                         \
        return -1;                                                                            \
    for (size_t k = 0; k < n_bf; k++)                                                         \
        for (size_t r = 0; r < ny * nx; r++)                                                  \
            d->img[k * ny * nx + r] = (double)((const T *)counts)[r * dr * dcl + (size_t)bf_pix[k]]; \
    return data_finish(d);

int ref_data_from_counts(ref_data *d, const double *counts, const size_t shape[4],
                         const int32_t *bf_pix, size_t n_bf)
{
    FROM_COUNTS(double)
}
int ref_data_from_u16(ref_data *d, const uint16_t *counts, const size_t shape[4],
                      const int32_t *bf_pix, size_t n_bf)
{
    FROM_COUNTS(uint16_t)
}
int ref_data_from_u32(ref_data *d, const uint32_t *counts, const size_t shape[4],
                      const int32_t *bf_pix, size_t n_bf)
{
    FROM_COUNTS(uint32_t)
}

int ref_data_from_images(ref_data *d, const double *imgs, size_t ny, size_t nx,
                         const int32_t *bf_pix, size_t n_bf, size_t det_rows, size_t det_cols)
{
    if (data_alloc(d, ny, nx, det_rows, det_cols, bf_pix, n_bf))
        return -1;
    memcpy(d->img, imgs, sizeof(double) * ny * nx * n_bf);
    return data_finish(d);
}

void ref_data_free(ref_data *d)
{
    if (!d)
        return;
    free(d->bf_pix);
    free(d->img);
    if (d->G)
        fftw_free(d->G);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------------------------ SSB */

/* Spectrum of BF pixel i on the grid upsampled by f: native G (f = 1), or the fine DFT of the
 * zero-inserted image (f > 1), which equals the native spectrum tiled f×f. */
static void fine_spectrum(const ref_data *d, size_t i, int f, double complex *out)
{
    size_t ny = d->ny, nx = d->nx, n = ny * nx;
    if (f == 1) {
        memcpy(out, d->G + i * n, sizeof(double complex) * n);
        return;
    }
    size_t NY = (size_t)f * ny, NX = (size_t)f * nx;
    double complex *buf = fftw_malloc(sizeof(double complex) * NY * NX);
    for (size_t p = 0; p < NY * NX; p++)
        buf[p] = 0.0;
    const double *im = d->img + i * n;
    for (size_t r = 0; r < ny; r++)
        for (size_t c = 0; c < nx; c++)
            buf[(r * (size_t)f) * NX + c * (size_t)f] = im[r * nx + c];
    fftw_plan p = fftw_plan_dft_2d((int)NY, (int)NX, buf, buf, FFTW_FORWARD, FFTW_ESTIMATE);
    fftw_execute(p);
    fftw_destroy_plan(p);
    memcpy(out, buf, sizeof(double complex) * NY * NX);
    fftw_free(buf);
}

int ref_corrected(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, size_t i, int f,
                  double complex *out)
{
    size_t NY = (size_t)f * d->ny, NX = (size_t)f * d->nx;
    double sr = g->scan_step_A[0] / f, sc = g->scan_step_A[1] / f;
    double kx, ky;
    ref_k_vector(g, o->lambda, d->bf_pix[i], d->det_cols, &kx, &ky);
    int active = ref_aperture(o, kx, ky) > 0.0;
    if (!active) {
        for (size_t p = 0; p < NY * NX; p++)
            out[p] = 0.0;
        out[0] = d->dc;
        return 0;
    }
    fine_spectrum(d, i, f, out);
    for (size_t a = 0; a < NY; a++)
        for (size_t b = 0; b < NX; b++) {
            if (a == 0 && b == 0)
                out[0] = d->dc;
            else
                out[a * NX + b] *= ref_ncorr_bin(o, a, b, NY, NX, sr, sc, kx, ky);
        }
    return 1;
}

int ref_pixel_phase(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, size_t i,
                    int f, double *phase)
{
    size_t NY = (size_t)f * d->ny, NX = (size_t)f * d->nx, N = NY * NX;
    double complex *buf = fftw_malloc(sizeof(double complex) * N);
    if (!buf)
        return -1;
    int active = ref_corrected(d, g, o, i, f, buf);
    if (!active) {
        for (size_t p = 0; p < N; p++)
            phase[p] = 0.0;
        fftw_free(buf);
        return 0;
    }
    fftw_plan p = fftw_plan_dft_2d((int)NY, (int)NX, buf, buf, FFTW_BACKWARD, FFTW_ESTIMATE);
    fftw_execute(p);
    fftw_destroy_plan(p);
    for (size_t r = 0; r < N; r++) {
        double complex v = buf[r] / (double)N;
        phase[r] = atan2(cimag(v), creal(v));
    }
    fftw_free(buf);
    return 0;
}

/* Σ_k φ_k (into sum) and Σ_k Σ_r φ_k² on the grid upsampled by f. */
static int phase_sums(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, int f,
                      double *sum, double *sumsq)
{
    size_t N = (size_t)f * d->ny * (size_t)f * d->nx;
    double *ph = malloc(sizeof(double) * N);
    if (!ph)
        return -1;
    for (size_t r = 0; r < N; r++)
        sum[r] = 0.0;
    double sq = 0.0;
    for (size_t k = 0; k < d->n_bf; k++) {
        if (ref_pixel_phase(d, g, o, k, f, ph)) {
            free(ph);
            return -1;
        }
        for (size_t r = 0; r < N; r++) {
            sum[r] += ph[r];
            sq += ph[r] * ph[r];
        }
    }
    free(ph);
    *sumsq = sq;
    return 0;
}

double ref_loss_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o,
                  double *mean_phase)
{
    size_t N = d->ny * d->nx;
    double *sum = malloc(sizeof(double) * N);
    double sq = 0.0;
    if (!sum || phase_sums(d, g, o, 1, sum, &sq)) {
        free(sum);
        return NAN;
    }
    double nb = (double)d->n_bf, m2 = 0.0;
    for (size_t r = 0; r < N; r++) {
        double m = sum[r] / nb;
        m2 += m * m;
        if (mean_phase)
            mean_phase[r] = m;
    }
    free(sum);
    return sq / (nb * (double)N) - m2 / (double)N;
}

double ref_loss(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                const ssb4d_thick *th, double *mean_phase)
{
    ref_optics o;
    ref_optics_init(&o, g, ab, th);
    return ref_loss_o(d, g, &o, mean_phase);
}

int ref_mean_phase_upsampled_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o,
                               int f, double *phase)
{
    size_t N = (size_t)f * d->ny * (size_t)f * d->nx;
    double sq;
    if (phase_sums(d, g, o, f, phase, &sq))
        return -1;
    for (size_t r = 0; r < N; r++)
        phase[r] /= (double)d->n_bf;
    return 0;
}

int ref_mean_phase_upsampled(const ref_data *d, const ssb4d_geometry *g,
                             const ssb4d_aberrations *ab, const ssb4d_thick *th, int f,
                             double *phase)
{
    ref_optics o;
    ref_optics_init(&o, g, ab, th);
    return ref_mean_phase_upsampled_o(d, g, &o, f, phase);
}

void ref_mean_phase(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                    const ssb4d_thick *th, double *mean_phase)
{
    ref_mean_phase_upsampled(d, g, ab, th, 1, mean_phase);
}

int ref_object_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, int f,
                 double complex *obj, double *phase)
{
    size_t NY = (size_t)f * d->ny, NX = (size_t)f * d->nx, N = NY * NX;
    double complex *F = fftw_malloc(sizeof(double complex) * N);
    double complex *c = fftw_malloc(sizeof(double complex) * N);
    if (!F || !c)
        return -1;
    for (size_t p = 0; p < N; p++)
        F[p] = 0.0;
    for (size_t k = 0; k < d->n_bf; k++) {
        ref_corrected(d, g, o, k, f, c);
        for (size_t p = 0; p < N; p++)
            F[p] += c[p];
    }
    for (size_t p = 0; p < N; p++)
        F[p] /= (double)d->n_bf;
    F[0] = d->dc;
    fftw_plan pl = fftw_plan_dft_2d((int)NY, (int)NX, F, F, FFTW_BACKWARD, FFTW_ESTIMATE);
    fftw_execute(pl);
    fftw_destroy_plan(pl);
    for (size_t p = 0; p < N; p++) {
        double complex v = F[p] / (double)N;
        if (obj)
            obj[p] = v;
        if (phase)
            phase[p] = atan2(cimag(v), creal(v));
    }
    fftw_free(F);
    fftw_free(c);
    return 0;
}

int ref_object(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
               const ssb4d_thick *th, int f, double complex *obj, double *phase)
{
    ref_optics o;
    ref_optics_init(&o, g, ab, th);
    return ref_object_o(d, g, &o, f, obj, phase);
}

/* |γ| at DFT bin (i, j) of an (NY, NX) grid with steps (sr, sc), averaged over the Nyquist aliases. */
static double gamma_abs_bin(const ref_optics *o, size_t i, size_t j, size_t NY, size_t NX, double sr, double sc,
                            double kx, double ky)
{
    double qxs[2] = {ref_fftfreq(i, NY, sr), 0}, qys[2] = {ref_fftfreq(j, NX, sc), 0};
    int nqx = 1, nqy = 1;
    if (NY % 2 == 0 && i == NY / 2)
        qxs[1] = -qxs[0], nqx = 2;
    if (NX % 2 == 0 && j == NX / 2)
        qys[1] = -qys[0], nqy = 2;
    double s = 0.0;
    for (int a = 0; a < nqx; a++)
        for (int b = 0; b < nqy; b++)
            s += cabs(ref_gamma(o, qxs[a], qys[b], kx, ky));
    return s / (double)(nqx * nqy);
}

int ref_transfer_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, int f, double *T)
{
    size_t NY = (size_t)f * d->ny, NX = (size_t)f * d->nx;
    double sr = g->scan_step_A[0] / f, sc = g->scan_step_A[1] / f;
    for (size_t p = 0; p < NY * NX; p++)
        T[p] = 0.0;
    for (size_t k = 0; k < d->n_bf; k++) {
        double kx, ky;
        ref_k_vector(g, o->lambda, d->bf_pix[k], d->det_cols, &kx, &ky);
        if (!(ref_aperture(o, kx, ky) > 0.0))
            continue;
        for (size_t a = 0; a < NY; a++)
            for (size_t b = 0; b < NX; b++)
                T[a * NX + b] += gamma_abs_bin(o, a, b, NY, NX, sr, sc, kx, ky);
    }
    for (size_t p = 0; p < NY * NX; p++)
        T[p] /= (double)d->n_bf;
    return 0;
}

int ref_object_transfer_o(const ref_data *d, const ssb4d_geometry *g, const ref_optics *o, int f, double eps,
                          double complex *obj, double *phase)
{
    size_t NY = (size_t)f * d->ny, NX = (size_t)f * d->nx, N = NY * NX;
    double complex *F = fftw_malloc(sizeof(double complex) * N);
    double complex *c = fftw_malloc(sizeof(double complex) * N);
    double *T = malloc(sizeof(double) * N);
    if (!F || !c || !T || ref_transfer_o(d, g, o, f, T)) {
        fftw_free(F);
        fftw_free(c);
        free(T);
        return -1;
    }
    for (size_t p = 0; p < N; p++)
        F[p] = 0.0;
    for (size_t k = 0; k < d->n_bf; k++) {
        ref_corrected(d, g, o, k, f, c);
        for (size_t p = 0; p < N; p++)
            F[p] += c[p];
    }
    for (size_t p = 0; p < N; p++)
        F[p] /= (double)d->n_bf * (T[p] + eps);
    F[0] = d->dc;
    fftw_plan pl = fftw_plan_dft_2d((int)NY, (int)NX, F, F, FFTW_BACKWARD, FFTW_ESTIMATE);
    fftw_execute(pl);
    fftw_destroy_plan(pl);
    for (size_t p = 0; p < N; p++) {
        double complex v = F[p] / (double)N;
        if (obj)
            obj[p] = v;
        if (phase)
            phase[p] = atan2(cimag(v), creal(v));
    }
    fftw_free(F);
    fftw_free(c);
    free(T);
    return 0;
}

int ref_object_transfer(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                        const ssb4d_thick *th, int f, double eps, double complex *obj, double *phase)
{
    ref_optics o;
    ref_optics_init(&o, g, ab, th);
    return ref_object_transfer_o(d, g, &o, f, eps, obj, phase);
}

/* ------------------------------------------------------------------------------ helpers */

size_t ref_select_bf(size_t det_rows, size_t det_cols, const double centre[2], double radius_px,
                     int32_t **out)
{
    size_t n = 0;
    int32_t *v = malloc(sizeof(int32_t) * det_rows * det_cols);
    for (size_t r = 0; r < det_rows; r++)
        for (size_t c = 0; c < det_cols; c++) {
            double a = (double)r - centre[0], b = (double)c - centre[1];
            if (sqrt(a * a + b * b) <= radius_px)
                v[n++] = (int32_t)(r * det_cols + c);
        }
    *out = v;
    return n;
}

size_t ref_select_bf_mrad(const ssb4d_geometry *g, size_t det_rows, size_t det_cols,
                          double radius_mrad, int32_t **out)
{
    size_t n = 0;
    int32_t *v = malloc(sizeof(int32_t) * det_rows * det_cols);
    for (size_t r = 0; r < det_rows; r++)
        for (size_t c = 0; c < det_cols; c++) {
            double a = ((double)r - g->centre_px[0]) * g->det_sampling_mrad[0];
            double b = ((double)c - g->centre_px[1]) * g->det_sampling_mrad[1];
            if (sqrt(a * a + b * b) <= radius_mrad)
                v[n++] = (int32_t)(r * det_cols + c);
        }
    *out = v;
    return n;
}

double ref_correlation(const double *a, const double *b, size_t n)
{
    double ma = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        ma += a[i];
        mb += b[i];
    }
    ma /= (double)n;
    mb /= (double)n;
    double sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i] - ma, y = b[i] - mb;
        sab += x * y;
        saa += x * x;
        sbb += y * y;
    }
    return sab / sqrt(saa * sbb);
}

int ref_tmpdir(char *dir, size_t n, const char *tag)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if ((size_t)snprintf(dir, n, "%s/ssb4d_%s_XXXXXX", base, tag) >= n)
        return -1;
    return mkdtemp(dir) ? 0 : -1;
}

size_t ref_dir_count(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    if (!d)
        return SIZE_MAX;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && (!needle || strstr(e->d_name, needle)))
            n++;
    closedir(d);
    return n;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int ref_rmtree(const char *dir) { return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

int ref_dir_clear(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int rc = 0;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            rc |= ref_rmtree(p);
        }
    closedir(d);
    return rc;
}

double ref_dmod180(double a, double b)
{
    double d = fmod(a - b, 180.0);
    if (d >= 90)
        d -= 180;
    if (d < -90)
        d += 180;
    return d;
}

double ref_urand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

const ref_shared_set REF_SET_A1 = {
    "sim_A1_SrTiO3_300kV_counts.npy", "sim_A1_SrTiO3_300kV_phase_gt_bandlimited.npy",
    {300.0, 25.0, {0.36609375, 0.36609375}, {1.2604026182924246, 1.2604026182924246}, {24, 24}, 0.0, 0},
    19.83, -11.805, 3.0, 30.0, 0.85};
const ref_shared_set REF_SET_A2 = {
    "sim_A2_Au_200kV_counts.npy", "sim_A2_Au_200kV_phase_gt_bandlimited.npy",
    {200.0, 20.0, {0.33983, 0.33983}, {1.2300, 1.2300}, {21, 21}, 0.0, 0},
    16.26, 8.204, 1.5, -50.0, 0.78};

double ref_correlation_f(const float *a, const float *b, size_t n)
{
    double *x = malloc(2 * n * sizeof *x);
    if (!x)
        return NAN;
    for (size_t i = 0; i < n; i++) {
        x[i] = a[i];
        x[n + i] = b[i];
    }
    double r = ref_correlation(x, x + n, n);
    free(x);
    return r;
}

/* Parses the .npy header; returns data offset, fills descr and shape, or -1. */
static long npy_header(FILE *f, char descr[8], size_t shape[8], int *ndim)
{
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return -1;
    size_t hlen, off;
    if (pre[6] == 1) {
        hlen = pre[8] | ((size_t)pre[9] << 8);
        off = 10;
    } else {
        unsigned char b[2];
        if (fread(b, 1, 2, f) != 2)
            return -1;
        hlen = pre[8] | ((size_t)pre[9] << 8) | ((size_t)b[0] << 16) | ((size_t)b[1] << 24);
        off = 12;
    }
    char *h = calloc(1, hlen + 1);
    if (!h || fread(h, 1, hlen, f) != hlen) {
        free(h);
        return -1;
    }
    char *p = strstr(h, "'descr'");
    if (!p || !(p = strchr(p + 7, '\'')))
        goto bad;
    p++;
    char *q = strchr(p, '\'');
    if (!q || q - p > 7)
        goto bad;
    memcpy(descr, p, (size_t)(q - p));
    descr[q - p] = 0;
    if (strstr(h, "'fortran_order': True"))
        goto bad;
    p = strstr(h, "'shape'");
    if (!p || !(p = strchr(p, '(')))
        goto bad;
    p++;
    *ndim = 0;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *e;
        unsigned long long v = strtoull(p, &e, 10);
        if (e == p || *ndim >= 8)
            goto bad;
        shape[(*ndim)++] = (size_t)v;
        p = e;
    }
    free(h);
    return (long)(off + hlen);
bad:
    free(h);
    return -1;
}

static int npy_read(const char *path, size_t shape[8], void **raw, char descr[8], size_t *count)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int ndim = 0;
    long off = npy_header(f, descr, shape, &ndim);
    if (off < 0) {
        fclose(f);
        return -1;
    }
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    size_t item = (size_t)atoi(descr + 2);
    if (item == 0) {
        fclose(f);
        return -1;
    }
    *raw = malloc(n * item + 1);
    if (!*raw || fseek(f, off, SEEK_SET) != 0 || fread(*raw, item, n, f) != n) {
        free(*raw);
        fclose(f);
        return -1;
    }
    fclose(f);
    *count = n;
    return ndim;
}

int ref_npy_load_double(const char *path, size_t shape[8], double **data)
{
    void *raw;
    char descr[8] = {0};
    size_t n;
    int nd = npy_read(path, shape, &raw, descr, &n);
    if (nd < 0)
        return -1;
    double *out = malloc(sizeof(double) * (n ? n : 1));
    const char *t = descr + 1;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(t, "u1"))
            out[i] = ((const uint8_t *)raw)[i];
        else if (!strcmp(t, "u2"))
            out[i] = ((const uint16_t *)raw)[i];
        else if (!strcmp(t, "u4"))
            out[i] = ((const uint32_t *)raw)[i];
        else if (!strcmp(t, "f4"))
            out[i] = ((const float *)raw)[i];
        else if (!strcmp(t, "f8"))
            out[i] = ((const double *)raw)[i];
        else {
            free(out);
            free(raw);
            return -1;
        }
    }
    free(raw);
    *data = out;
    return nd;
}

int ref_npy_load_u16(const char *path, size_t shape[8], uint16_t **data)
{
    void *raw;
    char descr[8] = {0};
    size_t n;
    int nd = npy_read(path, shape, &raw, descr, &n);
    if (nd < 0)
        return -1;
    if (strcmp(descr, "<u2") != 0) {
        free(raw);
        return -1;
    }
    *data = raw;
    return nd;
}
