/* sim.c — the multislice 4D-STEM simulator: parameters and presets, the per-position multislice,
 * Poisson counts, streaming .npy output and the sidecar JSON (docs/simulate.md). */
#include "sim/sim.h"

#include "common/atomic.h"
#include "common/err.h"
#include "common/fftw_lock.h"
#include "common/parallel.h"
#include "io/npy.h"
#include "qem/qem.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fftw3.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- parameters --------------------------------------------------------------------------- */

static const struct {
    const char *name;
    int scan_n, scan_cells, det, window_cells;
    double dose;
} presets[] = {
    /* BF radius = α·L/λ at 300 kV, 25 mrad (λ = 0.019687 Å, a = 3.905 Å). tiny and small put the
     * disk at ~0.8 of the detector half-width like the shared A1 set; medium and reference follow
     * the seed document's acquisition (8,939 BF pixels on 192², radius ~0.56 of the half-width). */
    {"tiny", 32, 3, 48, 4, 2e4},          /* A1-like: step 0.366 Å, BF 19.8 px of 24 */
    {"small", 128, 12, 64, 5, 2e4},       /* step 0.366 Å, BF 24.8 px of 32 (~1,870 BF) */
    {"medium", 256, 24, 128, 7, 1e5},     /* step 0.366 Å, BF 34.7 px of 64 (~3,790 BF) */
    {"reference", 512, 48, 192, 11, 1e5}, /* step 0.366 Å, BF 54.5 px of 96 (~9,350 BF) */
};

ssb4d_status ssb4d_sim_params_preset(ssb4d_sim_params *p, const char *preset, ssb4d_err *err)
{
    if (!p)
        return ssb_fail(err, SSB4D_EINVAL, "no parameters");
    if (!preset)
        preset = "small";
    size_t i, n = sizeof presets / sizeof presets[0];
    for (i = 0; i < n; i++)
        if (!strcmp(preset, presets[i].name))
            break;
    if (i == n)
        return ssb_fail(err, SSB4D_EINVAL,
                        "unknown preset '%s' (tiny, small, medium or reference)", preset);
    memset(p, 0, sizeof *p);
    p->specimen = SSB4D_SPECIMEN_SRTIO3;
    p->cells_z = 1;
    p->window_cells = presets[i].window_cells;
    p->kv = 300.0;
    p->semiangle_mrad = 25.0;
    p->ab.C_nm[SSB4D_C10] = -10.0;
    p->ab.C_nm[SSB4D_C12] = 2.0;
    p->ab.phi_deg[SSB4D_C12] = 20.0;
    p->scan_n = presets[i].scan_n;
    p->scan_cells = presets[i].scan_cells;
    p->det = presets[i].det;
    p->grid = 0;
    p->dose = presets[i].dose;
    p->seed = 1;
    p->threads = 0;
    return SSB4D_OK;
}

static int is_fast_size(int n)
{
    static const int f[] = {2, 3, 5, 7};
    for (int i = 0; i < 4; i++)
        while (n % f[i] == 0)
            n /= f[i];
    return n == 1;
}

/* Largest geometric ray displacement (Å) over the aperture |α| <= alpha0, with C10 moved by z_A
 * (the defocus the wave has gained at depth z). A ray leaving the aperture at angle α lands at
 * r = ∇_k χ/(2π) = Σ C α^n (cos m(φ−φ_nm), −m/(n+1)·sin m(φ−φ_nm)) (radial, azimuthal; C in Å),
 * which is the stationary-phase point of ψ(r) = ∫ P(k) e^{2πik·r} dk. Sampled on a polar grid of
 * 64 radii × 720 angles: the terms have at most 6 lobes, and the largest |r| usually sits at the
 * rim, which is sampled exactly. */
static double ray_radius_A(const ssb4d_aberrations *ab, double alpha0, double z_A)
{
    double C[SSB4D_N_ABERR], phi[SSB4D_N_ABERR];
    int n[SSB4D_N_ABERR], m[SSB4D_N_ABERR], nc = 0;
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        double c = ab->C_nm[i] * 10.0 + (i == SSB4D_C10 ? z_A : 0.0);
        if (c == 0.0)
            continue;
        C[nc] = c;
        phi[nc] = ab->phi_deg[i] * (M_PI / 180.0);
        n[nc] = ssb4d_aberr_n(i);
        m[nc++] = ssb4d_aberr_m(i);
    }
    enum { NR = 64, NA = 720 };
    double an[NR][SSB4D_N_ABERR]; /* C·α^n at each radius: the trigonometry is per angle only */
    for (int ir = 0; ir < NR; ir++)
        for (int t = 0; t < nc; t++)
            an[ir][t] = C[t] * pow(alpha0 * (ir + 1) / NR, n[t]);
    double best = 0.0;
    for (int ia = 0; ia < NA; ia++) {
        double f = ia * (2.0 * M_PI / NA), cu[SSB4D_N_ABERR], su[SSB4D_N_ABERR];
        for (int t = 0; t < nc; t++) {
            cu[t] = cos(m[t] * (f - phi[t]));
            su[t] = -m[t] / (n[t] + 1.0) * sin(m[t] * (f - phi[t]));
        }
        for (int ir = 0; ir < NR; ir++) {
            double rr = 0.0, ra = 0.0;
            for (int t = 0; t < nc; t++) {
                rr += an[ir][t] * cu[t];
                ra += an[ir][t] * su[t];
            }
            double r = hypot(rr, ra);
            best = r > best ? r : best;
        }
    }
    return best;
}

/* The probe footprint F (Å) of the auto-S rule (docs/simulate.md): the diameter of the
 * geometric probe at the entrance and at the exit surface (the propagation through the specimen
 * adds its depth to C10; |∇χ| is convex in z, so the two surfaces bound every depth), the drift
 * |τ|·t of a tilted beam, and 4 Å for the diffraction-limited core and the aperture's ringing. */
/* A wedge (ssb4d_sim_params.wedge_nm) replaces the uniform cells_z. */
static int wedged(const ssb4d_sim_params *p) { return p->wedge_nm[0] != 0.0 || p->wedge_nm[1] != 0.0; }

int ssb4d_sim_cells_at(const ssb4d_sim_params *p, int j)
{
    const sim_crystal *cr = sim_crystal_get(p->specimen);
    if (!wedged(p) || !cr)
        return p->cells_z;
    double f = p->scan_n > 1 ? (double)j / (double)(p->scan_n - 1) : 0.0;
    double t = p->wedge_nm[0] + (p->wedge_nm[1] - p->wedge_nm[0]) * f;
    double cells = floor(t * 10.0 / cr->a_A + 0.5); /* as --thickness rounds */
    return cells < 1 ? 1 : cells > 1e9 ? 1000000000 : (int)cells;
}

static double probe_footprint_A(const ssb4d_sim_params *p, double thickness_A)
{
    double alpha0 = p->semiangle_mrad * 1e-3;
    double r0 = ray_radius_A(&p->ab, alpha0, 0.0), r1 = ray_radius_A(&p->ab, alpha0, thickness_A);
    double tilt = 1e-3 * hypot(p->tilt_mrad[0], p->tilt_mrad[1]);
    return 2.0 * (r0 > r1 ? r0 : r1) + tilt * thickness_A + 4.0;
}

ssb4d_status ssb4d_sim_describe(const ssb4d_sim_params *p, ssb4d_sim_info *info, ssb4d_err *err)
{
    if (!p)
        return ssb_fail(err, SSB4D_EINVAL, "no parameters");
    const sim_crystal *cr = sim_crystal_get(p->specimen);
    if (!cr)
        return ssb_fail(err, SSB4D_EINVAL, "unknown specimen %d", (int)p->specimen);
    if (!(p->kv > 0) || !(p->kv <= 5000))
        return ssb_fail(err, SSB4D_EINVAL, "kV must be in (0, 5000], got %g", p->kv);
    if (!(p->semiangle_mrad > 0) || !(p->semiangle_mrad <= 300))
        return ssb_fail(err, SSB4D_EINVAL, "semiangle must be in (0, 300] mrad, got %g",
                        p->semiangle_mrad);
    if (!(p->dose > 0) || !(p->dose <= 1e12))
        return ssb_fail(err, SSB4D_EINVAL, "dose must be in (0, 1e12] e/probe, got %g", p->dose);
    if (p->scan_n < 2 || p->scan_n > 8192)
        return ssb_fail(err, SSB4D_EINVAL, "scan must be 2..8192 positions per axis, got %d",
                        p->scan_n);
    if (p->scan_cells < 1 || p->scan_cells > 100000)
        return ssb_fail(err, SSB4D_EINVAL, "scan-cells must be 1..100000, got %d", p->scan_cells);
    if (p->det < 8 || p->det > 2048)
        return ssb_fail(err, SSB4D_EINVAL, "detector must be 8..2048 pixels, got %d", p->det);
    if (p->window_cells < 1 || p->window_cells > 1000)
        return ssb_fail(err, SSB4D_EINVAL, "window-cells must be 1..1000, got %d",
                        p->window_cells);
    if (p->cells_z < 1 || p->cells_z > 100000)
        return ssb_fail(err, SSB4D_EINVAL, "thickness must be 1..100000 unit cells, got %d",
                        p->cells_z);
    if (wedged(p) && (!(p->wedge_nm[0] > 0) || !(p->wedge_nm[1] > 0) || !isfinite(p->wedge_nm[0]) ||
                      !isfinite(p->wedge_nm[1])))
        return ssb_fail(err, SSB4D_EINVAL, "wedge thicknesses must be finite and > 0 nm, got %g and %g",
                        p->wedge_nm[0], p->wedge_nm[1]);
    /* the thickest column (the wedge's ends are its extremes) */
    int cells_z = wedged(p) ? ssb4d_sim_cells_at(p, 0) > ssb4d_sim_cells_at(p, p->scan_n - 1)
                                  ? ssb4d_sim_cells_at(p, 0)
                                  : ssb4d_sim_cells_at(p, p->scan_n - 1)
                            : p->cells_z;
    if (wedged(p) && cells_z > 100000)
        return ssb_fail(err, SSB4D_EINVAL, "the wedge's thickest end is %d unit cells, more than 100000", cells_z);
    if (p->det_oversample < 0 || p->det_oversample > SIM_OVERSAMPLE_MAX ||
        (p->det_oversample > 0 && p->det_oversample % 2 == 0))
        return ssb_fail(err, SSB4D_EINVAL, "det-oversample must be auto (0) or odd 1..%d, got %d "
                        "(an even S cannot centre its native pixels on the detector pixels)",
                        SIM_OVERSAMPLE_MAX, p->det_oversample);
    if (p->threads < 0 || p->threads > 1024)
        return ssb_fail(err, SSB4D_EINVAL, "threads must be 0..1024, got %d", p->threads);
    if (!isfinite(p->scan_rotation_deg) || fabs(p->scan_rotation_deg) > 1e4)
        return ssb_fail(err, SSB4D_EINVAL, "scan rotation must be finite and within ±1e4 "
                        "degrees, got %g", p->scan_rotation_deg);
    for (int i = 0; i < 2; i++)
        if (!isfinite(p->tilt_mrad[i]) || fabs(p->tilt_mrad[i]) > 200)
            return ssb_fail(err, SSB4D_EINVAL, "tilt must be within ±200 mrad");
    for (int i = 0; i < SSB4D_N_ABERR; i++)
        if (!isfinite(p->ab.C_nm[i]) || !isfinite(p->ab.phi_deg[i]) || fabs(p->ab.C_nm[i]) > 1e9)
            return ssb_fail(err, SSB4D_EINVAL, "aberration %s is not finite or absurd",
                            ssb4d_aberr_name(i));
    double bytes = (double)p->scan_n * p->scan_n * (double)p->det * p->det * 2.0;
    if (bytes > 1024.0 * 1024 * 1024 * 1024)
        return ssb_fail(err, SSB4D_EINVAL, "output of %.3g bytes is absurd (limit 1 TiB)", bytes);

    double lambda = ssb4d_wavelength_A(p->kv);
    double a = cr->a_A, L = p->window_cells * a;
    double alpha = p->semiangle_mrad * 1e-3;
    double bf_px = alpha * L / lambda;
    double thickness_A = cells_z * a;
    double foot = probe_footprint_A(p, thickness_A);
    int S = p->det_oversample;
    if (S == 0) { /* auto: the smallest odd S whose window holds 1.3× the footprint */
        double need = ceil(1.3 * foot / L);
        if (need > SIM_OVERSAMPLE_MAX)
            return ssb_fail(err, SSB4D_EINVAL, "the probe's footprint (%.4g A) needs a window of "
                            "%.4g A, more than %d times the %.4g A window: widen the window, "
                            "reduce the aberrations or the thickness, or give det-oversample 1 "
                            "(point samples; the probe then wraps)", foot, 1.3 * foot,
                            SIM_OVERSAMPLE_MAX, L);
        S = need < 1 ? 1 : (int)need;
        if (S % 2 == 0)
            S++;
    }
    double Ls = S * L; /* the simulated window; S = 1 keeps every value below bit for bit */
    if (p->grid != 0 && (p->grid < S * p->det || p->grid > 16384)) {
        if (S == 1)
            return ssb_fail(err, SSB4D_EINVAL, "grid must be 0 (auto) or %d..16384, got %d",
                            p->det, p->grid);
        return ssb_fail(err, SSB4D_EINVAL, "grid must be 0 (auto) or %d..16384 with detector "
                        "oversampling %d (the grid of the %d-cell window), got %d", S * p->det,
                        S, S * p->window_cells, p->grid);
    }
    int M = p->grid;
    if (M == 0) {
        int need = (int)ceil(6.0 * bf_px * S) + 2; /* M/(3·S·L) >= 2α/λ */
        M = 2 * S * p->det > need ? 2 * S * p->det : need;
        while (M % 2 || !is_fast_size(M))
            M++;
    }
    if (M > 16384)
        return ssb_fail(err, SSB4D_EINVAL, "simulation grid %d is absurd (window too large for "
                        "the semiangle%s)", M, S > 1 ? ", or the detector oversampling too high" : "");
    double kmax = M / (3.0 * Ls);
    if (alpha / lambda > kmax)
        return ssb_fail(err, SSB4D_EINVAL, "the probe aperture (%.3g 1/A) exceeds the antialias "
                        "band %.3g 1/A of a %d grid; use a larger --grid", alpha / lambda, kmax, M);
    if (bf_px < 2.0)
        return ssb_fail(err, SSB4D_EINVAL, "the BF disk is only %.2g px: widen the window", bf_px);
    if (info) {
        memset(info, 0, sizeof *info);
        info->grid = M;
        info->wavelength_A = lambda;
        info->sigma = sim_sigma(p->kv);
        info->lattice_A = a;
        info->window_A = L;
        info->det_oversample = S;
        info->sim_window_A = Ls;
        info->probe_footprint_A = foot;
        info->real_sampling_A = Ls / M;
        info->scan_step_A = p->scan_cells * a / p->scan_n;
        info->det_sampling_mrad = 1e3 * lambda / L;
        info->bf_radius_px = bf_px;
        info->antialias_inv_A = kmax;
        info->thickness_nm = cells_z * a / 10.0;
        info->n_slices = cells_z * cr->n_layers;
    }
    return SSB4D_OK;
}

/* ---- the scan geometry --------------------------------------------------------------------- */

/* cos θ and sin θ of the scan rotation, exact at multiples of 90° (cos(π/2) is not 0 in
 * floating point, and θ = 0 must place the positions exactly where the unrotated scan did). */
static void scan_rotation(double deg, double *c, double *s)
{
    double q = deg / 90.0;
    if (q == floor(q)) {
        static const double cs[4][2] = {{1, 0}, {0, 1}, {-1, 0}, {0, -1}};
        int k = (int)fmod(fmod(q, 4.0) + 4.0, 4.0);
        *c = cs[k][0];
        *s = cs[k][1];
        return;
    }
    *c = cos(deg * M_PI / 180.0);
    *s = sin(deg * M_PI / 180.0);
}

/* The specimen-frame (det_row, det_col) steps of one scan row and one scan column: position
 * (i, j) is i·e_row + j·e_col = R(a)ᵀ·(i·step, j·step), a = −θ (docs/simulate.md). */
static void scan_basis(const ssb4d_sim_params *p, double step, double e_row[2], double e_col[2])
{
    double c, s;
    scan_rotation(p->scan_rotation_deg, &c, &s);
    e_row[0] = step * c;
    e_row[1] = -step * s;
    e_col[0] = step * s;
    e_col[1] = step * c;
}

/* ---- the multislice ------------------------------------------------------------------------ */

typedef struct {
    const ssb4d_sim_params *p;
    const sim_crystal *cr;
    ssb4d_sim_info info;
    int M, D, N, nt;
    int S, Wc;                 /* detector oversampling and the simulated window's cells, S·W */
    double lambda, L;          /* L: the simulated window S·W·a (grid frequencies are n/L) */
    double e_row[2], e_col[2]; /* scan basis in the specimen frame (scan_basis) */
    /* Pattern reuse (run): at a multiple of 90° scan position (i, j) sits at (mr, mc)·a/N with
     * integers mr, mc, and the pattern depends only on (mr mod N, mc mod N). One of the two is
     * set by the scan row i (the row key), the other by the column j; both are multiples of
     * g = gcd(N, S), so there are P = N/g distinct values of each. */
    int exact;               /* rotation a multiple of 90°: positions reduced exactly */
    int reuse;               /* exact and g > 1: each distinct reduced position computed once */
    int cs, sn;              /* cos θ, sin θ there */
    int g, nkey;             /* g = gcd(N, S) and P = N/g */
    double *kf;              /* grid frequencies fftfreq(M, L/M), 1/Å */
    fftwf_complex *P;        /* probe P(k), normalised Σ|P|² = 1 (unshifted layout) */
    int *ap;                 /* indices with P != 0 */
    size_t n_ap;
    fftwf_complex *trans[SIM_MAX_LAYERS]; /* transmission functions of the layers, real space */
    fftwf_complex *prop;     /* propagator × antialias mask / M² */
    float *mask;             /* antialias mask / M⁴ for the exit intensity */
    fftwf_plan fwd, bwd;
    fftwf_complex **ws;      /* per-thread wave */
    double **er, **ec;       /* per-thread shift tables (complex, M each) */
} sim_ctx;

static void ctx_free(sim_ctx *c)
{
    if (c->fwd || c->bwd) {
        ssb_fftw_lock();
        if (c->fwd)
            fftwf_destroy_plan(c->fwd);
        if (c->bwd)
            fftwf_destroy_plan(c->bwd);
        ssb_fftw_unlock();
    }
    fftwf_free(c->P);
    for (int l = 0; l < SIM_MAX_LAYERS; l++)
        fftwf_free(c->trans[l]);
    fftwf_free(c->prop);
    free(c->mask);
    free(c->kf);
    free(c->ap);
    if (c->ws)
        for (int t = 0; t < c->nt; t++) {
            fftwf_free(c->ws[t]);
            free(c->er[t]);
            free(c->ec[t]);
        }
    free(c->ws);
    free(c->er);
    free(c->ec);
    memset(c, 0, sizeof *c);
}

static ssb4d_status ctx_init(sim_ctx *c, const ssb4d_sim_params *p, ssb4d_err *err)
{
    memset(c, 0, sizeof *c);
    ssb4d_status st = ssb4d_sim_describe(p, &c->info, err);
    if (st)
        return st;
    c->p = p;
    c->cr = sim_crystal_get(p->specimen);
    c->M = c->info.grid;
    c->D = p->det;
    c->N = p->scan_n;
    c->nt = ssb_threads_resolve(p->threads);
    c->lambda = c->info.wavelength_A;
    c->S = c->info.det_oversample;
    c->Wc = c->S * p->window_cells;
    c->L = c->info.sim_window_A;
    scan_basis(p, c->info.scan_step_A, c->e_row, c->e_col);
    double q = p->scan_rotation_deg / 90.0;
    c->exact = q == floor(q);
    if (c->exact) {
        double cs, sn;
        scan_rotation(p->scan_rotation_deg, &cs, &sn);
        c->cs = (int)cs;
        c->sn = (int)sn;
        int a = c->N, b = p->scan_cells % c->N;
        while (b) {
            int t = a % b;
            a = b;
            b = t;
        }
        c->g = a;
        c->nkey = c->N / a;
        c->reuse = a > 1 && !wedged(p); /* a wedge's columns differ in thickness */
    }
    int M = c->M;
    size_t MM = (size_t)M * M;
    c->kf = malloc(M * sizeof(double));
    c->P = fftwf_malloc(MM * sizeof(fftwf_complex));
    c->ap = malloc(MM * sizeof(int));
    int trans_ok = 1;
    for (int l = 0; l < c->cr->n_layers; l++)
        trans_ok &= (c->trans[l] = fftwf_malloc(MM * sizeof(fftwf_complex))) != NULL;
    c->prop = fftwf_malloc(MM * sizeof(fftwf_complex));
    c->mask = malloc(MM * sizeof(float));
    c->ws = calloc(c->nt, sizeof *c->ws);
    c->er = calloc(c->nt, sizeof *c->er);
    c->ec = calloc(c->nt, sizeof *c->ec);
    if (!c->kf || !c->P || !c->ap || !trans_ok || !c->prop || !c->mask ||
        !c->ws || !c->er || !c->ec) {
        ctx_free(c);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for a %d grid", M);
    }
    for (int t = 0; t < c->nt; t++) {
        c->ws[t] = fftwf_malloc(MM * sizeof(fftwf_complex));
        c->er[t] = malloc(2 * M * sizeof(double));
        c->ec[t] = malloc(2 * M * sizeof(double));
        if (!c->ws[t] || !c->er[t] || !c->ec[t]) {
            ctx_free(c);
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory for thread buffers");
        }
    }
    for (int i = 0; i < M; i++)
        c->kf[i] = (i < (M + 1) / 2 ? i : i - M) / c->L;

    ssb_fftw_lock();
    c->fwd = fftwf_plan_dft_2d(M, M, c->ws[0], c->ws[0], FFTW_FORWARD, FFTW_ESTIMATE);
    c->bwd = fftwf_plan_dft_2d(M, M, c->ws[0], c->ws[0], FFTW_BACKWARD, FFTW_ESTIMATE);
    ssb_fftw_unlock();
    if (!c->fwd || !c->bwd) {
        ctx_free(c);
        return ssb_fail(err, SSB4D_EINTERNAL, "FFTW could not plan a %d×%d transform", M, M);
    }

    double kmax = c->info.antialias_inv_A, kmax2 = kmax * kmax;
    double lambda = c->lambda, alpha0 = p->semiangle_mrad * 1e-3;
    /* angular size of one native pixel (rad), both axes: with S > 1 the aperture edge is 1/S of
     * a detector pixel wide (nearly the real, hard aperture), and the binning into detector
     * pixels makes the partial pixels of SPEC 5.2's edge */
    double ang = lambda / c->L;
    double dz = c->cr->a_A / c->cr->n_layers;
    double tr = p->tilt_mrad[0] * 1e-3, tc = p->tilt_mrad[1] * 1e-3;
    double inv_M2 = 1.0 / ((double)M * M), inv_M4 = inv_M2 * inv_M2;
    /* probe, aperture, propagator, mask */
    double norm = 0.0;
    c->n_ap = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) {
            size_t idx = (size_t)i * M + j;
            double vx = c->kf[i], vy = c->kf[j], k2 = vx * vx + vy * vy;
            int in_band = k2 <= kmax2;
            c->mask[idx] = in_band ? (float)inv_M4 : 0.0f;
            double ph = -M_PI * lambda * dz * k2 - 2.0 * M_PI * dz * (vx * tr + vy * tc);
            c->prop[idx][0] = in_band ? (float)(cos(ph) * inv_M2) : 0.0f;
            c->prop[idx][1] = in_band ? (float)(sin(ph) * inv_M2) : 0.0f;
            double r = sqrt(k2), alpha = lambda * r;
            /* SPEC 5.2: w = angular width of one pixel along v (= ang on a square grid). */
            double A = r > 0 ? (alpha0 - alpha) / ang + 0.5 : 1.0;
            A = A < 0 ? 0 : (A > 1 ? 1 : A);
            if (!in_band)
                A = 0;
            double chi = ssb4d_chi(&p->ab, lambda, vx, vy);
            c->P[idx][0] = (float)(A * cos(chi));
            c->P[idx][1] = (float)(-A * sin(chi));
            norm += A * A;
            if (A > 0)
                c->ap[c->n_ap++] = (int)idx;
        }
    float s = (float)(1.0 / sqrt(norm));
    for (size_t n = 0; n < c->n_ap; n++) {
        c->P[c->ap[n]][0] *= s;
        c->P[c->ap[n]][1] *= s;
    }
    /* Transmission functions, from one unit cell: V on a K×K grid of the cell from its Fourier
     * series (|G| <= kmax), t = e^{iσV} there, and t's Fourier coefficients placed on the
     * window's reciprocal-lattice points (multiples of W) inside the antialias band. t then has
     * only lattice frequencies, so the crystal is exactly periodic with period a and a lattice
     * translation of the probe leaves the pattern unchanged: the pattern reuse of run() relies
     * on it. Sampling e^{iσV} on the M grid instead aliases its harmonics beyond the grid's
     * Nyquist onto non-lattice frequencies when W does not divide M (translations then changed
     * patterns by up to 1e-4 of the peak on tiny's 126 grid). When W divides M, K = M/W and this
     * is the same function as the M-grid computation. */
    int W = c->Wc, hmax = (int)floor(kmax * c->cr->a_A);
    int K = (M + W - 1) / W;
    if (K < 2 * hmax + 1)
        K = 2 * hmax + 1; /* the band's coefficients must not alias on the cell grid */
    while (!is_fast_size(K))
        K++;
    size_t KK = (size_t)K * K;
    fftwf_complex *cell = fftwf_malloc(KK * sizeof(fftwf_complex));
    if (!cell) {
        ctx_free(c);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for a %d cell grid", K);
    }
    ssb_fftw_lock();
    fftwf_plan cf = fftwf_plan_dft_2d(K, K, cell, cell, FFTW_FORWARD, FFTW_ESTIMATE);
    fftwf_plan cb = fftwf_plan_dft_2d(K, K, cell, cell, FFTW_BACKWARD, FFTW_ESTIMATE);
    ssb_fftw_unlock();
    if (!cf || !cb) {
        ssb_fftw_lock();
        if (cf)
            fftwf_destroy_plan(cf);
        if (cb)
            fftwf_destroy_plan(cb);
        ssb_fftw_unlock();
        fftwf_free(cell);
        ctx_free(c);
        return ssb_fail(err, SSB4D_EINTERNAL, "FFTW could not plan a %d×%d transform", K, K);
    }
    double sigma = c->info.sigma, inv_K2 = 1.0 / (double)KK;
    for (int l = 0; l < c->cr->n_layers; l++) {
        memset(cell, 0, KK * sizeof(fftwf_complex));
        for (int h = -hmax; h <= hmax; h++)
            for (int k = -hmax; k <= hmax; k++) {
                double g2 = ((double)h * h + (double)k * k) / (c->cr->a_A * c->cr->a_A);
                if (g2 > kmax2)
                    continue;
                double v[2];
                sim_layer_coeff(c->cr, l, h, k, v);
                size_t n = (size_t)((h % K + K) % K) * K + (size_t)((k % K + K) % K);
                cell[n][0] = (float)v[0];
                cell[n][1] = (float)v[1];
            }
        fftwf_execute(cb); /* V(r) = Σ_G c(G) e^{2πiG·r} on the cell grid */
        for (size_t n = 0; n < KK; n++) {
            double ph = sigma * cell[n][0];
            cell[n][0] = (float)cos(ph);
            cell[n][1] = (float)sin(ph);
        }
        fftwf_execute(cf); /* K² × t's Fourier coefficients (aliased among lattice points only) */
        fftwf_complex *t = c->trans[l];
        memset(t, 0, MM * sizeof(fftwf_complex));
        for (int h = -hmax; h <= hmax; h++)
            for (int k = -hmax; k <= hmax; k++) {
                size_t fi = (size_t)(((h * W) % M + M) % M), fj = (size_t)(((k * W) % M + M) % M);
                if (!(c->mask[fi * M + fj] > 0))
                    continue;
                const float *v = cell[(size_t)((h % K + K) % K) * K + (size_t)((k % K + K) % K)];
                t[fi * M + fj][0] = (float)(v[0] * inv_K2);
                t[fi * M + fj][1] = (float)(v[1] * inv_K2);
            }
        fftwf_execute_dft(c->bwd, t, t);
    }
    ssb_fftw_lock();
    fftwf_destroy_plan(cf);
    fftwf_destroy_plan(cb);
    ssb_fftw_unlock();
    fftwf_free(cell);
    return SSB4D_OK;
}

/* ---- probe positions ------------------------------------------------------------------------ */

/* The probe's shift tables e^{−2πi k·R} along each axis, for R in Å (any rotation). k·R is
 * reduced modulo 1 before the cosine. */
static void ramp_from_A(const sim_ctx *c, int tid, double Rr, double Rc)
{
    double *er = c->er[tid], *ec = c->ec[tid];
    for (int i = 0; i < c->M; i++) {
        double ph = -2.0 * M_PI * fmod(c->kf[i] * Rr, 1.0);
        er[2 * i] = cos(ph);
        er[2 * i + 1] = sin(ph);
        ph = -2.0 * M_PI * fmod(c->kf[i] * Rc, 1.0);
        ec[2 * i] = cos(ph);
        ec[2 * i + 1] = sin(ph);
    }
}

/* The same for R = (mr, mc)·a/N with integers mr, mc: k·R = n·m/(S·W·N) for grid frequency
 * n/L (L = S·W·a), reduced modulo 1 in exact integer arithmetic. */
static void ramp_exact(const sim_ctx *c, int tid, long mr, long mc)
{
    double *er = c->er[tid], *ec = c->ec[tid];
    long M = c->M, WN = (long)c->Wc * c->N;
    for (long i = 0; i < M; i++) {
        long n = i < (M + 1) / 2 ? i : i - M;
        double ph = -2.0 * M_PI * (double)(((n * mr) % WN + WN) % WN) / (double)WN;
        er[2 * i] = cos(ph);
        er[2 * i + 1] = sin(ph);
        ph = -2.0 * M_PI * (double)(((n * mc) % WN + WN) % WN) / (double)WN;
        ec[2 * i] = cos(ph);
        ec[2 * i + 1] = sin(ph);
    }
}

/* The multislice of ns slices for the probe position in thread tid's shift tables: the
 * noise-free detector pattern into pat (D×D float); returns Σ I over the full grid and sets
 * *sum_det to Σ over the detector. */
static double multislice(const sim_ctx *c, int tid, int ns, float *pat, double *sum_det)
{
    int M = c->M, D = c->D;
    size_t MM = (size_t)M * M;
    fftwf_complex *w = c->ws[tid];
    const double *er = c->er[tid], *ec = c->ec[tid];
    memset(w, 0, MM * sizeof(fftwf_complex));
    for (size_t n = 0; n < c->n_ap; n++) {
        int idx = c->ap[n], i = idx / M, j = idx % M;
        double sr = er[2 * i] * ec[2 * j] - er[2 * i + 1] * ec[2 * j + 1];
        double si = er[2 * i] * ec[2 * j + 1] + er[2 * i + 1] * ec[2 * j];
        double pr = c->P[idx][0], pi = c->P[idx][1];
        w[idx][0] = (float)(pr * sr - pi * si);
        w[idx][1] = (float)(pr * si + pi * sr);
    }
    fftwf_execute_dft(c->bwd, w, w);
    int nl = c->cr->n_layers;
    for (int s = 0; s < ns; s++) {
        const fftwf_complex *t = c->trans[s % nl];
        for (size_t n = 0; n < MM; n++) {
            float a = w[n][0], b = w[n][1];
            w[n][0] = a * t[n][0] - b * t[n][1];
            w[n][1] = a * t[n][1] + b * t[n][0];
        }
        fftwf_execute_dft(c->fwd, w, w);
        if (s + 1 == ns)
            break;
        const fftwf_complex *pr = c->prop;
        for (size_t n = 0; n < MM; n++) {
            float a = w[n][0], b = w[n][1];
            w[n][0] = a * pr[n][0] - b * pr[n][1];
            w[n][1] = a * pr[n][1] + b * pr[n][0];
        }
        fftwf_execute_dft(c->bwd, w, w);
    }
    /* exit intensity, full-grid sum (row-major order, double) */
    double sum = 0.0;
    for (int i = 0; i < M; i++) {
        double rs = 0.0;
        for (int j = 0; j < M; j++) {
            size_t n = (size_t)i * M + j;
            float v = (w[n][0] * w[n][0] + w[n][1] * w[n][1]) * c->mask[n];
            w[n][0] = v;
            rs += v;
        }
        sum += rs;
    }
    /* The detector: pixel (d, e) is centred on native frequency S·(d − D/2, e − D/2) and sums
     * the S×S native pixels around it (S odd: h = (S−1)/2 on each side), i.e. the intensity
     * integrated over its area 1/L × 1/L. The pixels tile the central (S·D)² native crop, and
     * the zero frequency stays at (D/2, D/2). With S = 1 this is the point sample, bit for bit
     * (0.0 + v rounds back to v). */
    int S = c->S, h = (S - 1) / 2;
    double sd = 0.0;
    for (int d = 0; d < D; d++) {
        for (int e = 0; e < D; e++) {
            double v = 0.0;
            for (int a = 0; a < S; a++) {
                size_t fi = (size_t)(((S * (d - D / 2) - h + a) % M + M) % M);
                for (int b = 0; b < S; b++) {
                    int fj = ((S * (e - D / 2) - h + b) % M + M) % M;
                    v += w[fi * M + (size_t)fj][0];
                }
            }
            pat[d * D + e] = (float)v;
            sd += pat[d * D + e];
        }
    }
    *sum_det = sd;
    return sum;
}

/* ---- pattern reuse ---------------------------------------------------------------------- */

/* Exact mode (a multiple of 90°): r_det = (i·cs + j·sn, −i·sn + j·cs)·S·a/N. At 0° and 180° the
 * scan row sets the det_row coordinate; at 90° and 270° it sets the det_col coordinate. */
static int reduce(const sim_ctx *c, long m)
{
    long N = c->N;
    return (int)((((m % N) + N) % N) / c->g);
}

static int row_key(const sim_ctx *c, size_t i)
{
    long S = c->p->scan_cells, v = (long)i * S;
    return reduce(c, c->cs ? v * c->cs : -v * c->sn);
}

static int col_key(const sim_ctx *c, size_t j)
{
    long S = c->p->scan_cells, v = (long)j * S;
    return reduce(c, c->cs ? v * c->cs : v * c->sn);
}

/* The noise-free pattern of the reduced position (row key, column key) into pat. */
static double pattern_exact(const sim_ctx *c, int tid, int rk, int ck, int ns, float *pat, double *sum_det)
{
    long a = (long)rk * c->g, b = (long)ck * c->g;
    if (c->cs)
        ramp_exact(c, tid, a, b);
    else
        ramp_exact(c, tid, b, a);
    return multislice(c, tid, ns, pat, sum_det);
}

/* The slices at scan position pos (its column's thickness on a wedge). */
static int slices_at(const sim_ctx *c, size_t pos)
{
    return ssb4d_sim_cells_at(c->p, (int)(pos % (size_t)c->N)) * c->cr->n_layers;
}

/* The P patterns of one row key (indexed by the column key) and their sums. */
typedef struct {
    float *pat;
    double *sum; /* (Σ grid, Σ crop) per pattern */
} row_table;

static int table_alloc(row_table *t, size_t P, size_t DD)
{
    t->pat = malloc(P * DD * sizeof(float));
    t->sum = malloc(P * 2 * sizeof(double));
    if (!t->pat || !t->sum) {
        free(t->pat);
        free(t->sum);
        t->pat = NULL;
        t->sum = NULL;
        return -1;
    }
    return 0;
}

size_t sim_rows_per_block(const ssb4d_sim_params *p)
{
    size_t N = (size_t)p->scan_n, row = N * (size_t)p->det * (size_t)p->det * sizeof(uint16_t);
    size_t rows = (p->block_bytes ? p->block_bytes : SIM_BLOCK_DEFAULT_BYTES) / row;
    return rows < 1 ? 1 : rows > N ? N : rows;
}

size_t sim_reuse_table_bytes(const ssb4d_sim_params *p, size_t *n_tables)
{
    double q = p->scan_rotation_deg / 90.0;
    if (n_tables)
        *n_tables = 0;
    if (q != floor(q) || p->scan_n < 1 || p->scan_cells < 1 || p->det < 1 || wedged(p))
        return 0;
    size_t N = (size_t)p->scan_n, a = N, b = (size_t)p->scan_cells % N;
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    if (a == 1)
        return 0; /* every position is distinct */
    if (n_tables)
        *n_tables = N / a;
    return N / a * ((size_t)p->det * p->det * sizeof(float) + 2 * sizeof(double));
}

size_t sim_reuse_cache_bytes(const ssb4d_sim_params *p)
{
    size_t P, table = sim_reuse_table_bytes(p, &P);
    if (!table)
        return 0;
    size_t cap = p->reuse_bytes ? p->reuse_bytes : SIM_REUSE_DEFAULT_BYTES, n = cap / table;
    return (n > P ? P : n) * table;
}

typedef ssb4d_status (*block_sink)(void *user, const uint16_t *block, size_t pos0, size_t npos,
                                   ssb4d_err *err);

static ssb4d_status run(const ssb4d_sim_params *p, block_sink sink, void *sink_user,
                        float *intensity, ssb4d_sim_info *info, ssb4d_err *err)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sim_ctx c;
    ssb4d_status st = ctx_init(&c, p, err);
    if (st)
        return st;
    int N = c.N, D = c.D, nt = c.nt;
    size_t DD = (size_t)D * D, total = (size_t)N * N;
    size_t rows_per_block = sim_rows_per_block(p);
    size_t block_pos = rows_per_block * N;
    uint16_t *block = sink ? malloc(block_pos * DD * sizeof(uint16_t)) : NULL;
    float *pats = malloc((size_t)nt * DD * sizeof(float));
    double *sums = malloc(block_pos * 2 * sizeof(double));
    size_t *clamped = calloc(nt, sizeof(size_t));
    uint16_t *maxc = calloc(nt, sizeof(uint16_t));
    /* Exact mode: the kept tables (row key -> table, never evicted, at most n_keep of them), the
     * block's own tables for the row keys that are not kept, and per block row its table. */
    size_t P = c.reuse ? (size_t)c.nkey : 0, n_keep = 0, n_kept = 0;
    row_table *kept = c.reuse ? calloc(P, sizeof *kept) : NULL;
    row_table *scratch = c.reuse ? calloc(rows_per_block, sizeof *scratch) : NULL;
    const row_table **rowtab = c.reuse ? calloc(rows_per_block, sizeof *rowtab) : NULL;
    int *todo = c.reuse ? malloc(rows_per_block * sizeof *todo) : NULL;
    row_table **todo_t = c.reuse ? malloc(rows_per_block * sizeof *todo_t) : NULL;
    int *ckey = c.reuse ? malloc((size_t)N * sizeof *ckey) : NULL;
    if ((sink && !block) || !pats || !sums || !clamped || !maxc ||
        (c.reuse && (!kept || !scratch || !rowtab || !todo || !todo_t || !ckey))) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory for a block of %zu positions", block_pos);
        goto done;
    }
    if (c.reuse) {
        size_t table = P * (DD * sizeof(float) + 2 * sizeof(double));
        n_keep = sim_reuse_cache_bytes(p) / table;
        for (int j = 0; j < N; j++)
            ckey[j] = col_key(&c, (size_t)j);
    }
    double sum_full = 0.0, sum_det = 0.0, smin = INFINITY, smax = -INFINITY;
    double dose = p->dose;
    size_t n_patterns = c.reuse ? 0 : total;
    for (size_t pos0 = 0; pos0 < total && !st; pos0 += block_pos) {
        size_t npos = total - pos0 < block_pos ? total - pos0 : block_pos;
        size_t nrows = npos / N, row0 = pos0 / N, n_todo = 0, n_scratch = 0;
        if (c.reuse) {
            /* Which row tables the block needs: kept ones are reused, new ones are kept while
             * there is room, the others live in the block's scratch tables. */
            for (size_t r = 0; r < nrows; r++) {
                int rk = row_key(&c, row0 + r);
                const row_table *t = kept[rk].pat ? &kept[rk] : NULL;
                for (size_t u = 0; u < n_todo && !t; u++)
                    if (todo[u] == rk)
                        t = todo_t[u];
                if (!t) {
                    row_table *fresh = n_kept < n_keep ? &kept[rk] : &scratch[n_scratch];
                    if (!fresh->pat && table_alloc(fresh, P, DD)) {
                        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory for %zu patterns", P);
                        break;
                    }
                    if (fresh == &kept[rk])
                        n_kept++;
                    else
                        n_scratch++;
                    todo[n_todo] = rk;
                    todo_t[n_todo++] = fresh;
                    t = fresh;
                }
                rowtab[r] = t;
            }
            if (st)
                break;
            n_patterns += n_todo * P;
            /* Every pattern of the new tables once, in parallel over all of them. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
            for (size_t w = 0; w < n_todo * P; w++) {
                int tid = omp_get_thread_num();
                row_table *t = todo_t[w / P];
                size_t k = w % P;
                t->sum[2 * k] = pattern_exact(&c, tid, todo[w / P], (int)k, c.info.n_slices,
                                              t->pat + k * DD, &t->sum[2 * k + 1]);
            }
        }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (size_t q = 0; q < npos; q++) {
            int tid = omp_get_thread_num();
            size_t pos = pos0 + q;
            const float *pat;
            if (c.reuse) {
                const row_table *t = rowtab[q / N];
                size_t k = (size_t)ckey[q % N];
                pat = t->pat + k * DD;
                sums[2 * q] = t->sum[2 * k];
                sums[2 * q + 1] = t->sum[2 * k + 1];
            } else if (c.exact) { /* gcd(N, S) = 1: every reduced position is distinct */
                float *own = pats + (size_t)tid * DD;
                sums[2 * q] = pattern_exact(&c, tid, row_key(&c, pos / N), col_key(&c, pos % N),
                                            slices_at(&c, pos), own, &sums[2 * q + 1]);
                pat = own;
            } else {
                float *own = pats + (size_t)tid * DD;
                double i = (double)(pos / N), j = (double)(pos % N);
                ramp_from_A(&c, tid, i * c.e_row[0] + j * c.e_col[0], i * c.e_row[1] + j * c.e_col[1]);
                sums[2 * q] = multislice(&c, tid, slices_at(&c, pos), own, &sums[2 * q + 1]);
                pat = own;
            }
            if (intensity)
                memcpy(intensity + pos * DD, pat, DD * sizeof(float));
            if (block) {
                sim_rng r;
                sim_rng_seed(&r, p->seed, pos);
                uint16_t *out = block + q * DD;
                for (size_t n = 0; n < DD; n++) {
                    uint64_t k = sim_poisson(&r, dose * (double)pat[n]);
                    if (k > 65535) {
                        k = 65535;
                        clamped[tid]++;
                    }
                    out[n] = (uint16_t)k;
                    if (out[n] > maxc[tid])
                        maxc[tid] = out[n];
                }
            }
        }
        for (size_t q = 0; q < npos; q++) {
            sum_full += sums[2 * q];
            sum_det += sums[2 * q + 1];
            if (sums[2 * q] < smin)
                smin = sums[2 * q];
            if (sums[2 * q] > smax)
                smax = sums[2 * q];
        }
        if (block && p->det_flip) /* a mirrored detector: each square frame transposed in place */
            for (size_t q = 0; q < npos; q++) {
                uint16_t *f = block + q * DD;
                for (size_t a = 0; a < (size_t)D; a++)
                    for (size_t b = a + 1; b < (size_t)D; b++) {
                        uint16_t t = f[a * (size_t)D + b];
                        f[a * (size_t)D + b] = f[b * (size_t)D + a];
                        f[b * (size_t)D + a] = t;
                    }
            }
        if (block)
            st = sink(sink_user, block, pos0, npos, err);
        if (!st && p->progress && p->progress(p->progress_user, "simulate", (double)(pos0 + npos) / (double)total))
            st = ssb_fail(err, SSB4D_ECANCELLED, "cancelled");
    }
    if (st)
        goto done;
    c.info.mean_sum_full = sum_full / (double)total;
    c.info.mean_sum_detector = sum_det / (double)total;
    c.info.min_sum_full = smin;
    c.info.max_sum_full = smax;
    for (int t = 0; t < nt; t++) {
        c.info.n_clamped += clamped[t];
        if (maxc[t] > c.info.max_count)
            c.info.max_count = maxc[t];
    }
    c.info.n_patterns = n_patterns;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c.info.seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (info)
        *info = c.info;
done:
    for (size_t k = 0; kept && k < P; k++) {
        free(kept[k].pat);
        free(kept[k].sum);
    }
    for (size_t k = 0; scratch && k < rows_per_block; k++) {
        free(scratch[k].pat);
        free(scratch[k].sum);
    }
    free(kept);
    free(scratch);
    free(rowtab);
    free(todo);
    free(todo_t);
    free(ckey);
    free(block);
    free(pats);
    free(sums);
    free(clamped);
    free(maxc);
    ctx_free(&c);
    return st;
}

/* The projected phase of cells_z cells at every scan position into out (N×N). */
static void phase_of(const ssb4d_sim_params *p, const ssb4d_sim_info *g, int cells_z, double gmax, float *out)
{
    const sim_crystal *cr = sim_crystal_get(p->specimen);
    size_t N = (size_t)p->scan_n;
    double e_row[2], e_col[2];
    scan_basis(p, g->scan_step_A, e_row, e_col);
    if (p->scan_rotation_deg == 0.0) /* the separable series: the unrotated scan's bits */
        sim_phase_series(cr, g->sigma, cells_z, gmax, N, N, g->scan_step_A, g->scan_step_A, out);
    else
        sim_phase_lattice(cr, g->sigma, cells_z, gmax, N, N, e_row, e_col, out);
}

static ssb4d_status phases(const ssb4d_sim_params *p, const ssb4d_sim_info *g, float *phase, float *phase_bl,
                           ssb4d_err *err)
{
    size_t N = (size_t)p->scan_n;
    double gmax[2] = {g->antialias_inv_A, 2.0 * p->semiangle_mrad * 1e-3 / g->wavelength_A};
    float *out[2] = {phase, phase_bl};
    float *whole = wedged(p) ? malloc(N * N * sizeof *whole) : NULL;
    if (wedged(p) && !whole)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory for the phase of a %zux%zu scan", N, N);
    for (int k = 0; k < 2; k++) {
        if (!out[k])
            continue;
        if (!whole) {
            phase_of(p, g, p->cells_z, gmax[k], out[k]);
            continue;
        }
        /* A wedge: each run of columns of one thickness from that thickness's phase, the same
         * bits as a uniform simulation of it. */
        for (size_t j0 = 0, j1; j0 < N; j0 = j1) {
            int cells = ssb4d_sim_cells_at(p, (int)j0);
            for (j1 = j0 + 1; j1 < N && ssb4d_sim_cells_at(p, (int)j1) == cells; j1++)
                ;
            phase_of(p, g, cells, gmax[k], whole);
            for (size_t i = 0; i < N; i++)
                memcpy(out[k] + i * N + j0, whole + i * N + j0, (j1 - j0) * sizeof *whole);
        }
    }
    free(whole);
    return SSB4D_OK;
}

/* ---- in memory -------------------------------------------------------------------------- */

typedef struct {
    uint16_t *counts;
    size_t DD;
} mem_t;

static ssb4d_status mem_sink(void *user, const uint16_t *block, size_t pos0, size_t npos,
                             ssb4d_err *err)
{
    (void)err;
    mem_t *m = user;
    memcpy(m->counts + pos0 * m->DD, block, npos * m->DD * sizeof(uint16_t));
    return SSB4D_OK;
}

ssb4d_status ssb4d_simulate_to_memory(const ssb4d_sim_params *p, uint16_t *counts, float *intensity,
                                      float *phase, float *phase_bl, ssb4d_sim_info *info,
                                      ssb4d_err *err)
{
    ssb4d_sim_info local;
    ssb4d_status st = ssb4d_sim_describe(p, &local, err);
    if (st)
        return st;
    if (counts || intensity) {
        mem_t m = {counts, (size_t)p->det * p->det};
        st = run(p, counts ? mem_sink : NULL, &m, intensity, &local, err);
        if (st)
            return st;
    }
    if ((st = phases(p, &local, phase, phase_bl, err)))
        return st;
    if (info)
        *info = local;
    return SSB4D_OK;
}

/* ---- files ---------------------------------------------------------------------------------- */

static int path_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static char *derived_path(const char *npy, const char *suffix)
{
    size_t n = strlen(npy);
    size_t stem = n;
    const char *slash = strrchr(npy, '/');
    if (n >= 4 && (!strcmp(npy + n - 4, ".npy") || !strcmp(npy + n - 4, ".qem")) &&
        (!slash || slash < npy + n - 4))
        stem = n - 4;
    char *out = malloc(stem + strlen(suffix) + 1);
    if (!out)
        return NULL;
    memcpy(out, npy, stem);
    strcpy(out + stem, suffix);
    return out;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static cJSON *num_pair(double a, double b)
{
    double v[2] = {a, b};
    return cJSON_CreateDoubleArray(v, 2);
}

static char *sidecar_text(const ssb4d_sim_params *p, const ssb4d_sim_info *g, const char *npy,
                          const char *ph, const char *phbl, const char *cmdline)
{
    const sim_crystal *cr = sim_crystal_get(p->specimen);
    int N = p->scan_n, D = p->det;
    cJSON *root = cJSON_CreateObject();
    char stem[256];
    snprintf(stem, sizeof stem, "%s", base_name(npy));
    char *dot = strrchr(stem, '.');
    if (dot)
        *dot = 0;
    cJSON_AddStringToObject(root, "dataset", stem);
    cJSON_AddStringToObject(root, "generator", "ssb4d simulate " SSB4D_VERSION_STRING);
    cJSON_AddStringToObject(root, "command", cmdline ? cmdline : "");
    cJSON *files = cJSON_AddObjectToObject(root, "files");
    cJSON_AddStringToObject(files, "counts", base_name(npy));
    cJSON_AddStringToObject(files, "phase_gt", base_name(ph));
    cJSON_AddStringToObject(files, "phase_gt_bandlimited", base_name(phbl));

    cJSON *ca = cJSON_AddObjectToObject(root, "counts_array");
    cJSON_AddStringToObject(ca, "dtype", "uint16 little-endian ('<u2')");
    cJSON_AddStringToObject(ca, "order", "C");
    int shape4[4] = {N, N, D, D};
    cJSON_AddItemToObject(ca, "shape", cJSON_CreateIntArray(shape4, 4));
    const char *axes[4] = {"scan_row", "scan_col", "det_row", "det_col"};
    cJSON_AddItemToObject(ca, "axes", cJSON_CreateStringArray(axes, 4));
    cJSON_AddStringToObject(ca, "units", "electron counts per detector pixel (Poisson)");

    cJSON *sim = cJSON_AddObjectToObject(root, "simulator");
    cJSON_AddStringToObject(sim, "name", "ssb4d simulate");
    cJSON_AddStringToObject(sim, "version", SSB4D_VERSION_STRING);
    char method[512];
    snprintf(method, sizeof method,
             "multislice (%d slices per unit cell, Fresnel propagator with tilt), "
             "projected potentials from the 5-Gaussian electron scattering factors "
             "of International Tables C 4.3.2.2 (Peng 1996), float32/complex64 FFTW, "
             "antialias band limit 2/3 of the grid Nyquist; no partial coherence, "
             "no thermal diffuse scattering, no detector MTF", cr->n_layers);
    cJSON_AddStringToObject(sim, "method", method);

    cJSON *op = cJSON_AddObjectToObject(root, "optics");
    cJSON_AddNumberToObject(op, "voltage_kV", p->kv);
    cJSON_AddNumberToObject(op, "wavelength_A", g->wavelength_A);
    cJSON_AddNumberToObject(op, "semiangle_mrad", p->semiangle_mrad);
    cJSON_AddStringToObject(op, "aperture", "soft, linear taper over one detector pixel (SPEC 5.2)");
    cJSON_AddItemToObject(op, "beam_tilt_mrad", num_pair(p->tilt_mrad[0], p->tilt_mrad[1]));
    cJSON_AddNumberToObject(op, "sigma_rad_per_VA", g->sigma);

    cJSON *ab = cJSON_AddObjectToObject(root, "aberrations_true");
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        char key[32];
        int always = (i == SSB4D_C10 || i == SSB4D_C12);
        if (!always && p->ab.C_nm[i] == 0.0)
            continue;
        snprintf(key, sizeof key, "%s_nm", ssb4d_aberr_name(i));
        cJSON_AddNumberToObject(ab, key, p->ab.C_nm[i]);
        if (ssb4d_aberr_m(i) != 0) {
            snprintf(key, sizeof key, "phi%s_deg", ssb4d_aberr_name(i) + 1);
            cJSON_AddNumberToObject(ab, key, p->ab.phi_deg[i]);
            snprintf(key, sizeof key, "phi%s_rad", ssb4d_aberr_name(i) + 1);
            cJSON_AddNumberToObject(ab, key, p->ab.phi_deg[i] * M_PI / 180.0);
        }
    }
    cJSON_AddNumberToObject(ab, "defocus_nm", -p->ab.C_nm[SSB4D_C10]);
    /* A wedge's truth is that of its mean thickness over the columns (each column's: C10 + its
     * thickness / 2, specimen.wedge). */
    double t_nm = g->thickness_nm, dz_nm = g->thickness_nm / g->n_slices;
    if (wedged(p)) {
        double sum = 0.0;
        for (int j = 0; j < N; j++)
            sum += ssb4d_sim_cells_at(p, j);
        t_nm = sum / N * cr->a_A / 10.0;
    }
    cJSON_AddNumberToObject(ab, "expected_recovered_C10_nm_at_midplane", p->ab.C_nm[SSB4D_C10] + t_nm / 2.0);
    /* The multislice transmits each slice's potential at the slice's entrance, then propagates:
     * the potential planes sit at depths 0, dz, ..., (n-1)·dz, whose mean is (t − dz)/2. */
    cJSON_AddNumberToObject(ab, "expected_recovered_C10_nm_at_mean_plane",
                            p->ab.C_nm[SSB4D_C10] + 0.5 * (t_nm - dz_nm));
    cJSON_AddStringToObject(ab, "convention",
                            "Krivanek polar, abTEM: probe(k) = A(k) exp(-i chi(k)), alpha = lambda |k|, "
                            "phi = atan2(k_col, k_row); C10 = -defocus; aberrations defined at the "
                            "specimen ENTRANCE surface");

    cJSON *sc = cJSON_AddObjectToObject(root, "scan");
    int sh2[2] = {N, N};
    cJSON_AddItemToObject(sc, "shape", cJSON_CreateIntArray(sh2, 2));
    cJSON_AddItemToObject(sc, "step_A", num_pair(g->scan_step_A, g->scan_step_A));
    cJSON_AddItemToObject(sc, "origin_A", num_pair(0, 0));
    cJSON_AddNumberToObject(sc, "rotation_deg", p->scan_rotation_deg);
    double e_row[2], e_col[2]; /* the shared sidecars' unit vectors (+ 0.0: no "-0") */
    scan_basis(p, 1.0, e_row, e_col);
    cJSON_AddItemToObject(sc, "scan_row_unit_vector_in_detector_frame",
                          num_pair(e_row[0] + 0.0, e_row[1] + 0.0));
    cJSON_AddItemToObject(sc, "scan_col_unit_vector_in_detector_frame",
                          num_pair(e_col[0] + 0.0, e_col[1] + 0.0));
    cJSON_AddStringToObject(sc, "position_formula",
                            "r(i,j) = step*(i*u_row + j*u_col) in the (det_row, det_col)-aligned "
                            "specimen frame");
    cJSON_AddStringToObject(sc, "rotation_note",
                            p->scan_rotation_deg == 0.0
                                ? "scan and detector axes are aligned (no rotation, no flip)"
                                : "scan position (i, j) at (det_row, det_col) = (x cos t + y sin t, "
                                  "-x sin t + y cos t), (x, y) = (i, j) * step, t = rotation_deg: "
                                  "the rotation that ssb4d reconstruct needs (SPEC 5.1)");
    char cov[160];
    double quarter = p->scan_rotation_deg / 90.0;
    if (quarter == floor(quarter))
        snprintf(cov, sizeof cov, "yes: %dx%d unit cells, periodic (endpoint excluded)",
                 p->scan_cells, p->scan_cells);
    else
        snprintf(cov, sizeof cov, "no: %dx%d unit cells' length per axis, rotated by %g deg, "
                 "so not periodic against the crystal", p->scan_cells, p->scan_cells,
                 p->scan_rotation_deg);
    cJSON_AddStringToObject(sc, "covers_whole_unit_cells", cov);

    cJSON *det = cJSON_AddObjectToObject(root, "detector");
    int dsh[2] = {D, D}, zf[2] = {D / 2, D / 2};
    cJSON_AddItemToObject(det, "shape", cJSON_CreateIntArray(dsh, 2));
    cJSON_AddItemToObject(det, "sampling_mrad", num_pair(g->det_sampling_mrad, g->det_sampling_mrad));
    cJSON_AddItemToObject(det, "sampling_inv_A", num_pair(1.0 / g->window_A, 1.0 / g->window_A));
    cJSON_AddItemToObject(det, "zero_frequency_pixel", cJSON_CreateIntArray(zf, 2));
    cJSON_AddNumberToObject(det, "bf_disk_radius_px_expected", g->bf_radius_px);
    int S = g->det_oversample;
    if (S == 1)
        cJSON_AddStringToObject(det, "pixel_model",
                                "point-sampled reciprocal space (detector sampling = 1/simulation window)");
    else
        cJSON_AddStringToObject(det, "pixel_model",
                                "area-integrated: each pixel sums the det_oversample^2 native far-field "
                                "samples (spacing 1/simulation window) that tile it; detector sampling = "
                                "det_oversample/simulation window");
    cJSON_AddNumberToObject(det, "det_oversample", S);
    cJSON_AddStringToObject(det, "det_oversample_rule",
                            p->det_oversample ? "given"
                                              : "auto: smallest odd S with S*L >= 1.3*probe_footprint_A, "
                                                "L = 1/sampling_inv_A");
    cJSON_AddNumberToObject(det, "probe_footprint_A", g->probe_footprint_A);
    cJSON_AddNumberToObject(det, "rotation_vs_scan_deg", p->scan_rotation_deg);
    cJSON_AddBoolToObject(det, "flip", p->det_flip != 0);

    cJSON *sp = cJSON_AddObjectToObject(root, "specimen");
    cJSON_AddStringToObject(sp, "name", cr->key);
    cJSON_AddStringToObject(sp, "material", cr->name);
    cJSON_AddStringToObject(sp, "zone_axis", "[001]");
    cJSON_AddNumberToObject(sp, "lattice_constant_A", cr->a_A);
    cJSON_AddNumberToObject(sp, "cells", g->n_slices / cr->n_layers);
    /* the simulated (periodic) window: det_oversample × the detector's window */
    int wc[3] = {S * p->window_cells, S * p->window_cells, g->n_slices / cr->n_layers};
    cJSON_AddItemToObject(sp, "simulation_window_unit_cells", cJSON_CreateIntArray(wc, 3));
    cJSON_AddItemToObject(sp, "simulation_window_A", num_pair(g->sim_window_A, g->sim_window_A));
    cJSON_AddNumberToObject(sp, "thickness_A", g->thickness_nm * 10.0);
    cJSON_AddNumberToObject(sp, "thickness_nm", g->thickness_nm);
    cJSON_AddNumberToObject(sp, "n_slices", g->n_slices);
    if (wedged(p)) { /* thickness_nm, cells and n_slices above are the thickest column's */
        cJSON *w = cJSON_AddObjectToObject(sp, "wedge");
        cJSON_AddItemToObject(w, "thickness_nm", num_pair(p->wedge_nm[0], p->wedge_nm[1]));
        int *cells = malloc((size_t)N * sizeof *cells);
        for (int j = 0; cells && j < N; j++)
            cells[j] = ssb4d_sim_cells_at(p, j);
        if (cells)
            cJSON_AddItemToObject(w, "cells_per_column", cJSON_CreateIntArray(cells, N));
        free(cells);
        cJSON_AddStringToObject(w, "along", "scan columns (axis 1)");
        cJSON_AddStringToObject(w, "definition",
                                "column j is round(t(j) / a) unit cells thick (at least 1, 2 slices each), "
                                "t(j) = t0 + (t1 - t0) j / (N - 1) nm; every position simulated at its "
                                "column's thickness; thickness_nm, cells and n_slices are the thickest "
                                "column's; aberrations_true's expected C10 values are for the mean thickness");
        cJSON_AddNumberToObject(w, "mean_thickness_nm", t_nm);
    }
    int gp[2] = {g->grid, g->grid};
    cJSON_AddItemToObject(sp, "gpts", cJSON_CreateIntArray(gp, 2));
    cJSON_AddItemToObject(sp, "realspace_sampling_A", num_pair(g->real_sampling_A, g->real_sampling_A));
    cJSON_AddNumberToObject(sp, "antialias_cutoff_mrad", 1e3 * g->antialias_inv_A * g->wavelength_A);
    cJSON_AddBoolToObject(sp, "periodic", 1);

    cJSON_AddItemToObject(root, "tilt_mrad", num_pair(p->tilt_mrad[0], p->tilt_mrad[1]));
    cJSON *dose = cJSON_AddObjectToObject(root, "dose");
    cJSON_AddNumberToObject(dose, "electrons_per_probe_position", p->dose);
    cJSON_AddStringToObject(dose, "definition",
                            "expected counts = dose * I, where I of one pattern sums to 1 over the "
                            "full simulation grid; electrons outside the detector crop are lost");
    cJSON_AddStringToObject(dose, "noise",
                            "Poisson; per scan position a xoshiro256** stream seeded from "
                            "SplitMix64(seed, position index); inversion for lambda < 10, PTRS above");
    cJSON_AddNumberToObject(dose, "seed", (double)p->seed);
    cJSON_AddNumberToObject(root, "seed", (double)p->seed);

    cJSON *gt = cJSON_AddObjectToObject(root, "ground_truth_phase");
    const char *gtf[2] = {base_name(ph), base_name(phbl)};
    cJSON_AddItemToObject(gt, "files", cJSON_CreateStringArray(gtf, 2));
    cJSON_AddItemToObject(gt, "shape", cJSON_CreateIntArray(sh2, 2));
    cJSON_AddStringToObject(gt, "dtype", "float32 little-endian");
    cJSON_AddStringToObject(gt, "units", "rad");
    cJSON_AddStringToObject(gt, "definition",
                            "phase = sigma * projected potential of the whole specimen, evaluated "
                            "exactly at the scan positions by the Fourier series of the periodic "
                            "potential; '_phase' keeps |q| up to the antialias cutoff, "
                            "'_phase_bandlimited' keeps |q| <= 2*alpha/lambda. No mean subtraction.");
    cJSON_AddNumberToObject(gt, "bandlimit_inv_A", 2.0 * p->semiangle_mrad * 1e-3 / g->wavelength_A);

    cJSON *val = cJSON_AddObjectToObject(root, "validation");
    cJSON_AddNumberToObject(val, "intensity_sum_full_grid_mean", g->mean_sum_full);
    cJSON_AddNumberToObject(val, "noisefree_intensity_sum_mean", g->mean_sum_detector);
    cJSON_AddStringToObject(val, "sums",
                            "means over the scan of one noise-free pattern's sum: over the full "
                            "simulation grid (the whole beam, 1 up to the antialias band's loss) and "
                            "over the D x D detector (the fraction of the beam that lands on it; the "
                            "same angular range for any det_oversample)");
    cJSON_AddNumberToObject(val, "counts_max", g->max_count);
    cJSON_AddNumberToObject(val, "counts_clamped", (double)g->n_clamped);
    cJSON *tm = cJSON_AddObjectToObject(root, "timing_s");
    cJSON_AddNumberToObject(tm, "simulation", g->seconds);
    int threads = p->threads;
    cJSON_AddNumberToObject(tm, "threads_requested", threads);

    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}


typedef struct {
    FILE *f;
    const char *path;
    size_t DD;
} stream_t;

/* Blocks arrive in scan order; .npy data is little-endian uint16 (the host order on x86/ARM). */
static ssb4d_status stream_sink(void *user, const uint16_t *block, size_t pos0, size_t npos,
                                ssb4d_err *err)
{
    (void)pos0;
    stream_t *s = user;
    if (fwrite(block, sizeof(uint16_t), npos * s->DD, s->f) != npos * s->DD)
        return ssb_fail(err, SSB4D_EIO, "cannot write %s: %s", s->path, strerror(errno));
    return SSB4D_OK;
}

static ssb4d_status qem_sink(void *user, const uint16_t *block, size_t pos0, size_t npos,
                             ssb4d_err *err)
{
    (void)pos0;
    return qem_writer_append(user, block, npos, err);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The encoded form records the simulated microscope as the source's values (qem-format §9). */
static ssb4d_status open_qem_writer(const ssb4d_sim_params *p, const ssb4d_sim_info *g,
                                    const char *path, int force, qem_writer **w, ssb4d_err *err)
{
    size_t shape[4] = {(size_t)p->scan_n, (size_t)p->scan_n, (size_t)p->det, (size_t)p->det};
    qem_meta_in mi;
    memset(&mi, 0, sizeof mi);
    mi.kv = p->kv;
    mi.semiangle_mrad = p->semiangle_mrad;
    mi.scan_step_A[0] = mi.scan_step_A[1] = g->scan_step_A;
    mi.det_sampling[0] = mi.det_sampling[1] = g->det_sampling_mrad;
    mi.source_format = "ssb4d-simulation";
    qem_writer_opts wo;
    memset(&wo, 0, sizeof wo);
    memcpy(wo.shape, shape, sizeof shape);
    wo.dtype_bytes = 2;
    wo.threads = p->threads;
    wo.force = force;
    wo.scientific_metadata = qem_build_scientific_metadata(shape, &mi);
    wo.metadata = cJSON_CreateObject();
    cJSON_AddStringToObject(wo.metadata, "writer", "ssb4d simulate " SSB4D_VERSION_STRING);
    return qem_writer_open(path, &wo, w, err);
}

ssb4d_status ssb4d_simulate(const ssb4d_sim_params *p, const char *npy_path, int force,
                            const char *command_line, ssb4d_sim_info *info, ssb4d_err *err)
{
    ssb4d_sim_info g;
    ssb4d_status st = ssb4d_sim_describe(p, &g, err);
    if (st)
        return st;
    if (!npy_path || !*npy_path)
        return ssb_fail(err, SSB4D_EINVAL, "no output path");
    char *ph = derived_path(npy_path, "_phase.npy");
    char *phbl = derived_path(npy_path, "_phase_bandlimited.npy");
    char *js = derived_path(npy_path, ".json");
    float *phase = malloc((size_t)p->scan_n * p->scan_n * sizeof(float));
    float *phase_bl = malloc((size_t)p->scan_n * p->scan_n * sizeof(float));
    ssb4d_afile out = {0};
    qem_writer *qw = NULL;
    int to_qem = ends_with(npy_path, ".qem");
    char *text = NULL;
    if (!ph || !phbl || !js || !phase || !phase_bl) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        goto done;
    }
    if (!strcmp(js, npy_path)) {
        st = ssb_fail(err, SSB4D_EINVAL, "output %s must not end in .json", npy_path);
        goto done;
    }
    const char *outs[4] = {npy_path, ph, phbl, js};
    if (!force)
        for (int i = 0; i < 4; i++)
            if (path_exists(outs[i])) {
                st = ssb_fail(err, SSB4D_EINVAL, "%s exists (use --force to overwrite)", outs[i]);
                goto done;
            }
    size_t DD = (size_t)p->det * p->det;
    stream_t s = {NULL, npy_path, DD};
    if (to_qem) {
        if ((st = open_qem_writer(p, &g, npy_path, force, &qw, err)))
            goto done;
        st = run(p, qem_sink, qw, NULL, &g, err);
    } else {
        if ((st = ssb_afile_open(&out, npy_path, err)))
            goto done;
        s.f = out.f;
        size_t shape[4] = {(size_t)p->scan_n, (size_t)p->scan_n, (size_t)p->det, (size_t)p->det};
        st = ssb_npy_write_header(s.f, "<u2", 4, shape, err);
        if (st)
            goto done;
        st = run(p, stream_sink, &s, NULL, &g, err);
    }
    if (st)
        goto done;
    if ((st = phases(p, &g, phase, phase_bl, err)))
        goto done;
    size_t sh2[2] = {(size_t)p->scan_n, (size_t)p->scan_n};
    if ((st = ssb_npy_save(ph, "<f4", 2, sh2, phase, err)))
        goto done;
    if ((st = ssb_npy_save(phbl, "<f4", 2, sh2, phase_bl, err)))
        goto done;
    text = sidecar_text(p, &g, npy_path, ph, phbl, command_line);
    if (!text) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory for the sidecar");
        goto done;
    }
    if ((st = ssb_write_text_atomic(js, text, err)))
        goto done;
    /* The counts appear last, once everything beside them is written. */
    if (to_qem) {
        st = qem_writer_finish(qw, err);
        qw = NULL;
        if (st)
            goto done;
    } else if ((st = ssb_afile_finish(&out, SSB4D_OK, err)))
        goto done;
    if (info)
        *info = g;
done:
    ssb_afile_finish(&out, st ? st : SSB4D_EINTERNAL, NULL); /* no-op once finished */
    qem_writer_abort(qw);
    free(text);
    free(ph);
    free(phbl);
    free(js);
    free(phase);
    free(phase_bl);
    return st;
}

/* ---- one position, directly (tests) ------------------------------------------------------- */

ssb4d_status sim_pattern_at(const ssb4d_sim_params *p, double r_row_A, double r_col_A, float *pat,
                            double sums[2], ssb4d_err *err)
{
    ssb4d_sim_params q = *p;
    q.threads = 1;
    sim_ctx c;
    ssb4d_status st = ctx_init(&c, &q, err);
    if (st)
        return st;
    ramp_from_A(&c, 0, r_row_A, r_col_A);
    sums[0] = multislice(&c, 0, c.info.n_slices, pat, &sums[1]);
    ctx_free(&c);
    return SSB4D_OK;
}

ssb4d_status sim_planewave_beams(const ssb4d_sim_params *p, int nb, const int (*hk)[2],
                                 double *amp, ssb4d_err *err)
{
    if (nb < 1 || !hk || !amp)
        return ssb_fail(err, SSB4D_EINVAL, "no beams");
    ssb4d_sim_params q = *p;
    q.threads = 1;
    sim_ctx c;
    ssb4d_status st = ctx_init(&c, &q, err);
    if (st)
        return st;
    int M = c.M, W = c.Wc, nl = c.cr->n_layers, ns = c.info.n_slices;
    size_t MM = (size_t)M * M;
    /* beam (h, k) sits at grid frequency (h, k)·W/L; the forward FFT carries a factor M² */
    size_t *at = malloc((size_t)nb * sizeof *at);
    if (!at) {
        ctx_free(&c);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    for (int b = 0; b < nb; b++)
        at[b] = (size_t)((hk[b][0] * W % M + M) % M) * M + (size_t)((hk[b][1] * W % M + M) % M);
    double inv_M2 = 1.0 / ((double)M * M);
    /* the incident plane wave along the beam, amplitude 1: only k = 0 in Fourier space */
    fftwf_complex *w = c.ws[0];
    memset(w, 0, MM * sizeof(fftwf_complex));
    w[0][0] = 1.0f;
    fftwf_execute_dft(c.bwd, w, w);
    /* the slices of multislice(): transmit, to Fourier space, propagate (with the tilt), back */
    for (int s = 0; s < ns; s++) {
        const fftwf_complex *t = c.trans[s % nl];
        for (size_t n = 0; n < MM; n++) {
            float a = w[n][0], b = w[n][1];
            w[n][0] = a * t[n][0] - b * t[n][1];
            w[n][1] = a * t[n][1] + b * t[n][0];
        }
        fftwf_execute_dft(c.fwd, w, w);
        { /* the beams after this slice's transmission, before its propagation */
            double *o = amp + (size_t)s * nb * 2;
            for (int b = 0; b < nb; b++) {
                o[2 * b] = w[at[b]][0] * inv_M2;
                o[2 * b + 1] = w[at[b]][1] * inv_M2;
            }
        }
        if (s + 1 == ns)
            break;
        for (size_t n = 0; n < MM; n++) {
            float a = w[n][0], b = w[n][1];
            w[n][0] = a * c.prop[n][0] - b * c.prop[n][1];
            w[n][1] = a * c.prop[n][1] + b * c.prop[n][0];
        }
        fftwf_execute_dft(c.bwd, w, w);
    }
    free(at);
    ctx_free(&c);
    return SSB4D_OK;
}
