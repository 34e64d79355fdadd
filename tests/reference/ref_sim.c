/* ref_sim.c — a tiny periodic 4D-STEM simulator for tests (single slice, projection approx). */
#include "ref_ssb.h"

#include <complex.h>
#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform(uint64_t *s) { return ((double)(splitmix(s) >> 11) + 0.5) * 0x1.0p-53; }

static uint32_t poisson(uint64_t *s, double lam)
{
    if (lam <= 0.0)
        return 0;
    if (lam < 40.0) {
        double L = exp(-lam), p = 1.0;
        uint32_t k = 0;
        do {
            k++;
            p *= uniform(s);
        } while (p > L);
        return k - 1;
    }
    double u1 = uniform(s), u2 = uniform(s);
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    double v = floor(lam + sqrt(lam) * z + 0.5);
    return v < 0 ? 0 : (uint32_t)v;
}

void ref_sim_params_scene(ref_sim_params *p, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->ny = 16;
    p->nx = 12;
    p->pr = p->pc = 2;
    p->dx[0] = p->dx[1] = 0.25;
    p->kv = 300;
    p->semiangle_mrad = 25;
    p->ab.C_nm[SSB4D_C10] = -8;
    p->ab.C_nm[SSB4D_C12] = 2;
    p->ab.phi_deg[SSB4D_C12] = 40;
    p->dose = 1e5;
    p->n_atoms = 6;
    p->atom_sigma_A = 0.4;
    p->atom_phase = 0.3;
    p->seed = seed;
}

int ref_simulate(const ref_sim_params *p, ref_sim *out)
{
    memset(out, 0, sizeof *out);
    size_t Mr = p->ny * p->pr, Mc = p->nx * p->pc, M = Mr * Mc;
    double lambda = ref_wavelength(p->kv);
    double Lr = (double)Mr * p->dx[0], Lc = (double)Mc * p->dx[1]; /* window, Å */

    ssb4d_geometry *g = &out->geom;
    g->kv = p->kv;
    g->semiangle_mrad = p->semiangle_mrad;
    g->scan_step_A[0] = (double)p->pr * p->dx[0];
    g->scan_step_A[1] = (double)p->pc * p->dx[1];
    g->det_sampling_mrad[0] = lambda / Lr * 1e3;
    g->det_sampling_mrad[1] = lambda / Lc * 1e3;
    g->centre_px[0] = (double)(Mr / 2);
    g->centre_px[1] = (double)(Mc / 2);
    g->rotation_deg = 0.0;

    uint64_t seed = p->seed ? p->seed : 1;

    /* object phase on the fine grid: periodic Gaussians */
    double *phi = calloc(M, sizeof(double));
    for (int a = 0; a < p->n_atoms; a++) {
        double x0 = uniform(&seed) * Lr, y0 = uniform(&seed) * Lc;
        double amp = p->atom_phase * (0.5 + uniform(&seed));
        for (size_t r = 0; r < Mr; r++)
            for (size_t c = 0; c < Mc; c++) {
                double dxr = (double)r * p->dx[0] - x0, dyc = (double)c * p->dx[1] - y0;
                dxr -= Lr * floor(dxr / Lr + 0.5);
                dyc -= Lc * floor(dyc / Lc + 0.5);
                phi[r * Mc + c] += amp * exp(-(dxr * dxr + dyc * dyc) /
                                            (2.0 * p->atom_sigma_A * p->atom_sigma_A));
            }
    }

    /* probe ψ0 = IDFT[A exp(−iχ)] */
    ref_optics o;
    ref_optics_init(&o, g, &p->ab, NULL);
    double complex *psi = fftw_malloc(sizeof(double complex) * M);
    double complex *buf = fftw_malloc(sizeof(double complex) * M);
    fftw_plan pinv = fftw_plan_dft_2d((int)Mr, (int)Mc, psi, psi, FFTW_BACKWARD, FFTW_ESTIMATE);
    fftw_plan pfwd = fftw_plan_dft_2d((int)Mr, (int)Mc, buf, buf, FFTW_FORWARD, FFTW_ESTIMATE);
    for (size_t r = 0; r < Mr; r++)
        for (size_t c = 0; c < Mc; c++)
            psi[r * Mc + c] = ref_probe(&o, ref_fftfreq(r, Mr, p->dx[0]), ref_fftfreq(c, Mc, p->dx[1]));
    fftw_execute(pinv);

    out->shape[0] = p->ny;
    out->shape[1] = p->nx;
    out->shape[2] = Mr;
    out->shape[3] = Mc;
    out->counts = malloc(sizeof(uint32_t) * p->ny * p->nx * M);
    double *inten = malloc(sizeof(double) * M);
    for (size_t i = 0; i < p->ny; i++)
        for (size_t j = 0; j < p->nx; j++) {
            size_t R0 = i * p->pr, R1 = j * p->pc;
            for (size_t r = 0; r < Mr; r++)
                for (size_t c = 0; c < Mc; c++) {
                    size_t rr = (r + Mr - R0) % Mr, cc = (c + Mc - R1) % Mc;
                    double ph = phi[r * Mc + c];
                    buf[r * Mc + c] = psi[rr * Mc + cc] * (cos(ph) + I * sin(ph));
                }
            fftw_execute(pfwd);
            double tot = 0.0;
            for (size_t d = 0; d < M; d++) {
                double a = creal(buf[d]), b = cimag(buf[d]);
                tot += a * a + b * b;
            }
            for (size_t dr = 0; dr < Mr; dr++)
                for (size_t dc = 0; dc < Mc; dc++) {
                    size_t fr = (dr + Mr - Mr / 2) % Mr, fc = (dc + Mc - Mc / 2) % Mc;
                    double complex v = buf[fr * Mc + fc];
                    inten[dr * Mc + dc] = (creal(v) * creal(v) + cimag(v) * cimag(v)) / tot;
                }
            uint32_t *dst = out->counts + (i * p->nx + j) * M;
            for (size_t d = 0; d < M; d++) {
                double lam = fabs(p->dose) * inten[d];
                dst[d] = p->dose > 0 ? poisson(&seed, lam) : (uint32_t)floor(lam + 0.5);
            }
        }
    free(inten);

    /* ground truth at the scan positions, full and band-limited */
    out->phase_scan = malloc(sizeof(double) * p->ny * p->nx);
    out->phase_band = malloc(sizeof(double) * p->ny * p->nx);
    for (size_t i = 0; i < p->ny; i++)
        for (size_t j = 0; j < p->nx; j++)
            out->phase_scan[i * p->nx + j] = phi[(i * p->pr) * Mc + j * p->pc];
    for (size_t d = 0; d < M; d++)
        buf[d] = phi[d];
    fftw_execute(pfwd);
    double band = 2.0 * o.alpha0 / lambda;
    for (size_t r = 0; r < Mr; r++)
        for (size_t c = 0; c < Mc; c++) {
            double qx = ref_fftfreq(r, Mr, p->dx[0]), qy = ref_fftfreq(c, Mc, p->dx[1]);
            if (sqrt(qx * qx + qy * qy) > band)
                buf[r * Mc + c] = 0.0;
        }
    fftw_plan pinvb = fftw_plan_dft_2d((int)Mr, (int)Mc, buf, buf, FFTW_BACKWARD, FFTW_ESTIMATE);
    fftw_execute(pinvb);
    for (size_t i = 0; i < p->ny; i++)
        for (size_t j = 0; j < p->nx; j++)
            out->phase_band[i * p->nx + j] = creal(buf[(i * p->pr) * Mc + j * p->pc]) / (double)M;

    fftw_destroy_plan(pinv);
    fftw_destroy_plan(pfwd);
    fftw_destroy_plan(pinvb);
    fftw_free(psi);
    fftw_free(buf);
    free(phi);
    return 0;
}

void ref_sim_free(ref_sim *s)
{
    if (!s)
        return;
    free(s->counts);
    free(s->phase_scan);
    free(s->phase_band);
    memset(s, 0, sizeof *s);
}
