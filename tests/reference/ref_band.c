/* ref_band.c — float64 reference of the band objective (see ref_band.h). */
#include "ref_band.h"

#include <complex.h>
#include <math.h>
#include <stdlib.h>

static int in_band(double qx, double qy, double lo, double hi)
{
    double r = sqrt(qx * qx + qy * qy);
    return r > lo && r < hi;
}

double ref_band_fit(const ref_data *d, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                    const ssb4d_thick *th, double lo, double hi, int full_plane)
{
    ref_optics o;
    ref_optics_init(&o, g, ab, th);
    size_t ny = d->ny, nx = d->nx, ncols = full_plane ? nx : nx / 2 + 1;
    double *kx = malloc(d->n_bf * sizeof *kx), *ky = malloc(d->n_bf * sizeof *ky);
    if (!kx || !ky) {
        free(kx);
        free(ky);
        return NAN;
    }
    for (size_t p = 0; p < d->n_bf; p++)
        ref_k_vector(g, o.lambda, d->bf_pix[p], d->det_cols, &kx[p], &ky[p]);
    double fit = 0.0;
    for (size_t i = 0; i < ny; i++)
        for (size_t j = 0; j < ncols; j++) {
            double qx = ref_fftfreq(i, ny, g->scan_step_A[0]), qy = ref_fftfreq(j, nx, g->scan_step_A[1]);
            if (!in_band(qx, qy, lo, hi))
                continue;
            double complex N = 0.0;
            double D = 0.0, E = 0.0;
            for (size_t p = 0; p < d->n_bf; p++) {
                double complex gam = ref_gamma(&o, qx, qy, kx[p], ky[p]);
                N += d->G[(p * ny + i) * nx + j] * conj(gam);
                double g2 = creal(gam) * creal(gam) + cimag(gam) * cimag(gam);
                D += g2;
                E += creal(d->G[p * ny * nx]) * g2; /* G(0,k): the pixel's total counts T_k */
            }
            double w = (full_plane || j == 0 || (nx % 2 == 0 && j == nx / 2)) ? 1.0 : 2.0;
            if (D > 0)
                fit += w * (creal(N) * creal(N) + cimag(N) * cimag(N) - E) / D;
        }
    free(kx);
    free(ky);
    return fit;
}

double ref_band_power(const ref_data *d, const ssb4d_geometry *g, double lo, double hi)
{
    ref_optics o;
    ref_optics_init(&o, g, NULL, NULL);
    size_t ny = d->ny, nx = d->nx;
    double power = 0.0;
    for (size_t p = 0; p < d->n_bf; p++) {
        double kx, ky;
        ref_k_vector(g, o.lambda, d->bf_pix[p], d->det_cols, &kx, &ky);
        if (ref_aperture(&o, kx, ky) == 0.0)
            continue;
        for (size_t i = 0; i < ny; i++)
            for (size_t j = 0; j <= nx / 2; j++) {
                double qx = ref_fftfreq(i, ny, g->scan_step_A[0]), qy = ref_fftfreq(j, nx, g->scan_step_A[1]);
                if (!in_band(qx, qy, lo, hi))
                    continue;
                double w = (j == 0 || (nx % 2 == 0 && j == nx / 2)) ? 1.0 : 2.0;
                double complex v = d->G[(p * ny + i) * nx + j];
                power += w * (creal(v) * creal(v) + cimag(v) * cimag(v));
            }
    }
    return power;
}
