/* potential.c — specimens, electron scattering factors and projected potentials (docs/simulate.md).
 *
 * Each atom's projected potential is a sum of five Gaussians: its electron scattering factor is the
 * tabulated fit f_e(s) = Σ a_i exp(−b_i s²), s = |q|/2 (Peng et al. 1996, International Tables
 * for Crystallography Vol. C, Table 4.3.2.2, neutral atoms), so that the 2-D Fourier transform of
 * its projected potential is 47.878 V·Å² · f_e(|q|/2) and in real space
 * V_proj(r) = 47.878 Σ a_i (4π/b_i) exp(−4π² r²/b_i)   (V·Å, a in Å, b in Å², r in Å).
 * Periodic potentials are evaluated from their Fourier series (exact band limits, no real-space
 * sampling of the sharp cores). */
#include "sim/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    int Z;
    double a[5], b[5];
} fe_table[] = {
    {8, {0.0974, 0.2921, 0.6910, 0.6990, 0.2039}, {0.2067, 1.3815, 4.6943, 12.7105, 32.4726}},
    {22, {0.3825, 1.2598, 2.0008, 3.0617, 2.0694}, {0.3040, 2.4863, 9.2783, 39.0751, 109.4583}},
    {38, {0.6703, 1.4926, 3.3368, 4.4600, 3.1501}, {0.3190, 2.2287, 10.3504, 52.3291, 151.2216}},
    {79, {0.9674, 1.8916, 3.3993, 3.0524, 1.2607}, {0.2358, 1.4712, 5.6758, 18.7119, 61.5286}},
    {14, {0.2519, 0.6372, 1.3795, 2.5082, 1.0500}, {0.3075, 2.0174, 9.6746, 29.3744, 80.4732}},
};

int sim_fe_coeffs(int Z, const double **a, const double **b)
{
    for (size_t i = 0; i < sizeof fe_table / sizeof fe_table[0]; i++)
        if (fe_table[i].Z == Z) {
            *a = fe_table[i].a;
            *b = fe_table[i].b;
            return 0;
        }
    return -1;
}

double sim_fe(int Z, double s)
{
    const double *a, *b;
    if (sim_fe_coeffs(Z, &a, &b))
        return -1.0;
    double f = 0.0, s2 = s * s;
    for (int i = 0; i < 5; i++)
        f += a[i] * exp(-b[i] * s2);
    return f;
}

/* SrTiO3 [001], Sr at the origin: layer z=0 Sr (0,0), O (½,½); layer z=½ Ti (½,½), O (½,0), O (0,½).
 * Au fcc [001]: layer z=0 (0,0), (½,½); layer z=½ (½,0), (0,½).
 * Si diamond cubic [001] (fcc + the basis (¼,¼,¼)): layer z=0 (0,0), (½,½); z=¼ (¼,¼), (¾,¾);
 * z=½ (½,0), (0,½); z=¾ (¾,¼), (¼,¾). */
static const sim_crystal crystals[] = {
    {"SrTiO3", 3.905, 2, {2, 3},
     {{{38, {0.0, 0.0}}, {8, {0.5, 0.5}}}, {{22, {0.5, 0.5}}, {8, {0.5, 0.0}}, {8, {0.0, 0.5}}}},
     "srtio3"},
    {"Au", 4.078, 2, {2, 2},
     {{{79, {0.0, 0.0}}, {79, {0.5, 0.5}}}, {{79, {0.5, 0.0}}, {79, {0.0, 0.5}}}}, "au"},
    {"Si", 5.431, 4, {2, 2, 2, 2},
     {{{14, {0.0, 0.0}}, {14, {0.5, 0.5}}},
      {{14, {0.25, 0.25}}, {14, {0.75, 0.75}}},
      {{14, {0.5, 0.0}}, {14, {0.0, 0.5}}},
      {{14, {0.75, 0.25}}, {14, {0.25, 0.75}}}},
     "si"},
};

const sim_crystal *sim_crystal_get(ssb4d_specimen s)
{
    if ((int)s < 0 || (size_t)s >= sizeof crystals / sizeof crystals[0])
        return NULL;
    return &crystals[s];
}

double sim_sigma(double kv)
{
    const double mc2_keV = 510.99895000; /* electron rest energy, CODATA 2018 */
    double lambda = ssb4d_wavelength_A(kv);
    double V = kv * 1e3;
    return 2.0 * M_PI / (lambda * V) * (mc2_keV + kv) / (2.0 * mc2_keV + kv);
}

void sim_layer_coeff(const sim_crystal *c, int layer, int h, int k, double out[2])
{
    double g = sqrt((double)h * h + (double)k * k) / c->a_A;
    double re = 0.0, im = 0.0;
    int l0 = layer < 0 ? 0 : layer, l1 = layer < 0 ? c->n_layers : layer + 1;
    for (int l = l0; l < l1; l++)
        for (int j = 0; j < c->n_atoms[l]; j++) {
            const sim_atom *at = &c->atoms[l][j];
            double f = SIM_VPROJ_CONST * sim_fe(at->Z, 0.5 * g);
            double ph = -2.0 * M_PI * (h * at->frac[0] + k * at->frac[1]);
            re += f * cos(ph);
            im += f * sin(ph);
        }
    double inv_area = 1.0 / (c->a_A * c->a_A);
    out[0] = re * inv_area;
    out[1] = im * inv_area;
}

void sim_phase_series(const sim_crystal *c, double sigma, int cells_z, double gmax, size_t ny,
                      size_t nx, double step_r, double step_c, float *out)
{
    double a = c->a_A;
    int hmax = (int)floor(gmax * a);
    int nh = 2 * hmax + 1;
    double lim2 = (gmax * a) * (gmax * a) * (1.0 + 1e-12);
    /* coefficients c(h,k) · σ · cells_z */
    double *cf = calloc((size_t)nh * nh * 2, sizeof(double));
    /* T[h][j] = Σ_k c(h,k) e^{2πi k y_j / a} */
    double *T = calloc((size_t)nh * nx * 2, sizeof(double));
    if (!cf || !T) {
        free(cf);
        free(T);
        memset(out, 0, ny * nx * sizeof(float));
        return;
    }
    for (int h = -hmax; h <= hmax; h++)
        for (int k = -hmax; k <= hmax; k++) {
            if ((double)h * h + (double)k * k > lim2)
                continue;
            double v[2];
            sim_layer_coeff(c, -1, h, k, v);
            double *d = &cf[((size_t)(h + hmax) * nh + (k + hmax)) * 2];
            d[0] = v[0] * sigma * cells_z;
            d[1] = v[1] * sigma * cells_z;
        }
    for (int h = 0; h < nh; h++)
        for (size_t j = 0; j < nx; j++) {
            double y = (double)j * step_c / a, sr = 0.0, si = 0.0;
            for (int k = -hmax; k <= hmax; k++) {
                const double *d = &cf[((size_t)h * nh + (k + hmax)) * 2];
                if (d[0] == 0.0 && d[1] == 0.0)
                    continue;
                double ph = 2.0 * M_PI * k * y;
                double cs = cos(ph), sn = sin(ph);
                sr += d[0] * cs - d[1] * sn;
                si += d[0] * sn + d[1] * cs;
            }
            T[((size_t)h * nx + j) * 2] = sr;
            T[((size_t)h * nx + j) * 2 + 1] = si;
        }
    for (size_t i = 0; i < ny; i++) {
        double x = (double)i * step_r / a;
        for (size_t j = 0; j < nx; j++) {
            double s = 0.0;
            for (int h = -hmax; h <= hmax; h++) {
                double ph = 2.0 * M_PI * h * x;
                const double *t = &T[((size_t)(h + hmax) * nx + j) * 2];
                s += t[0] * cos(ph) - t[1] * sin(ph);
            }
            out[i * nx + j] = (float)s;
        }
    }
    free(cf);
    free(T);
}

void sim_phase_lattice(const sim_crystal *c, double sigma, int cells_z, double gmax, size_t ny,
                       size_t nx, const double e_row[2], const double e_col[2], float *out)
{
    double a = c->a_A;
    int hmax = (int)floor(gmax * a);
    double lim2 = (gmax * a) * (gmax * a) * (1.0 + 1e-12);
    double *acc = calloc(ny * nx, sizeof(double));
    double *A = malloc(ny * 2 * sizeof(double)), *B = malloc(nx * 2 * sizeof(double));
    if (!acc || !A || !B) {
        free(acc);
        free(A);
        free(B);
        memset(out, 0, ny * nx * sizeof(float));
        return;
    }
    /* V is real, so c(−G) = conj c(G): sum the half-plane (h > 0, or h = 0 and k > 0) twice
     * over its real part, plus the G = 0 term. */
    for (int h = 0; h <= hmax; h++)
        for (int k = h == 0 ? 0 : -hmax; k <= hmax; k++) {
            if ((double)h * h + (double)k * k > lim2)
                continue;
            double v[2];
            sim_layer_coeff(c, -1, h, k, v);
            double w = (h == 0 && k == 0) ? 1.0 : 2.0;
            double cr = v[0] * sigma * cells_z * w, ci = v[1] * sigma * cells_z * w;
            /* G·r in cycles per scan step along each scan axis; reduced modulo 1 per point so
             * that the phase of far points does not lose digits */
            double u = (h * e_row[0] + k * e_row[1]) / a, t = (h * e_col[0] + k * e_col[1]) / a;
            for (size_t i = 0; i < ny; i++) {
                double ph = 2.0 * M_PI * fmod((double)i * u, 1.0);
                A[2 * i] = cos(ph);
                A[2 * i + 1] = sin(ph);
            }
            for (size_t j = 0; j < nx; j++) {
                double ph = 2.0 * M_PI * fmod((double)j * t, 1.0);
                B[2 * j] = cos(ph);
                B[2 * j + 1] = sin(ph);
            }
            for (size_t i = 0; i < ny; i++) {
                /* (c · A_i) once per row, then Re((c A_i) · B_j) */
                double pr = cr * A[2 * i] - ci * A[2 * i + 1], pi = cr * A[2 * i + 1] + ci * A[2 * i];
                double *row = acc + i * nx;
                for (size_t j = 0; j < nx; j++)
                    row[j] += pr * B[2 * j] - pi * B[2 * j + 1];
            }
        }
    for (size_t n = 0; n < ny * nx; n++)
        out[n] = (float)acc[n];
    free(acc);
    free(A);
    free(B);
}
