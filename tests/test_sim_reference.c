/* test_sim_reference.c — `ssb4d simulate`'s physics against independent references
 * (docs/simulate.md, "Checked against references"):
 *  - the electron scattering factors (Peng 1996) against Kirkland's independent
 *    parameterisation (Kirkland 2010, Appendix C), and the projected-potential integrals;
 *  - the wavelength and the interaction constant σ against their CODATA 2018 values;
 *  - the weak-phase (projection) limit: one cell's exit-wave phase is σ·V_proj;
 *  - the multislice thickness series of a plane wave, untilted and tilted, against a Bloch-wave
 *    calculation (tests/reference/bloch_wave.py, its table bloch_wave.tsv). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sim/sim.h"
#include "ssb4d_advanced.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SSB4D_TESTS_DIR
#define SSB4D_TESTS_DIR "tests"
#endif

/* Kirkland, Advanced Computing in Electron Microscopy, 2nd ed. (2010), Appendix C: a fit to
 * Dirac–Fock scattering factors, f_e(q) = Σ a_i/(q² + b_i) + Σ c_i exp(−d_i q²), q = |g| in 1/Å
 * (not s = q/2 as in Peng's table). Coefficients as distributed with abTEM
 * (abtem/parametrizations/data/kirkland.json). */
static const struct {
    int Z;
    double a[3], b[3], c[3], d[3];
} kirkland[] = {
    {8, {0.339969204, 0.307570172, 0.130369072}, {0.38157028, 0.381571436, 19.1919745},
     {0.0883326058, 0.1965867, 0.00099622}, {0.760635525, 2.07401094, 0.0303266869}},
    {14, {1.06543892, 0.120143691, 0.180915263}, {1.04118455, 68.7113368, 0.0887533926},
     {1.1206562, 0.0305452816, 1.59963502}, {3.70062619, 0.214097897, 9.99096638}},
    {22, {0.362383267, 0.984232966, 0.741715642}, {0.0754707114, 0.497757309, 8.17659391},
     {0.362555269, 1.4915939, 0.0161659509}, {0.955524906, 16.2221677, 0.0733140839}},
    {38, {0.0137373086, 1.97548672, 1.59261029}, {0.0187469061, 6.3607923, 0.221992482},
     {0.173263882, 4.66280378, 0.0016126506}, {0.201624958, 25.3027803, 0.0153610568}},
    {79, {0.961263398, 3.6958103, 2.77567491}, {0.170932277, 12.9335319, 0.68999707},
     {0.295414176, 0.311475743, 0.0143237267}, {0.16352551, 1.39200901, 0.0271265337}},
};

static double fe_kirkland(int i, double q)
{
    double f = 0.0, q2 = q * q;
    for (int j = 0; j < 3; j++)
        f += kirkland[i].a[j] / (q2 + kirkland[i].b[j]) + kirkland[i].c[j] * exp(-kirkland[i].d[j] * q2);
    return f;
}

/* h²/(2π m0 e) in V·Å², from CODATA 2018 (h = 6.62607015e−34 J s, m0 = 9.1093837015e−31 kg,
 * e = 1.602176634e−19 C): the projected potential's integral per Å of f_e(0). */
#define VPROJ_CODATA 47.8776473

static void test_scattering_factors(void **state)
{
    (void)state;
    printf("  Z   f_e(0) Peng  Kirkland  diff     max |Δf|/f(0), q <= 2, 4 1/A\n");
    double fe0[100] = {0};
    for (size_t i = 0; i < sizeof kirkland / sizeof kirkland[0]; i++) {
        int Z = kirkland[i].Z;
        double p0 = sim_fe(Z, 0.0), k0 = fe_kirkland((int)i, 0.0);
        double worst2 = 0.0, worst4 = 0.0;
        for (int n = 0; n <= 400; n++) {
            double q = 0.01 * n; /* the simulator takes s = q/2 */
            double d = fabs(sim_fe(Z, 0.5 * q) - fe_kirkland((int)i, q)) / k0;
            if (q <= 2.0)
                worst2 = d > worst2 ? d : worst2;
            worst4 = d > worst4 ? d : worst4;
        }
        printf("  %2d  %8.4f   %8.4f  %+6.2f%%  %.4f  %.4f\n", Z, p0, k0, 100.0 * (p0 / k0 - 1.0),
               worst2, worst4);
        fe0[Z] = k0;
        /* The two fits agree to within 0.5 % at q = 0 and 1.2 % of f_e(0) out to q = 4 1/Å
         * (s = 2, the end of Peng's fit); an s/q mix-up or a wrong table is off by far more. */
        assert_true(fabs(p0 / k0 - 1.0) < 0.006);
        assert_true(worst4 < 0.015);
    }
    /* ∫∫ V_proj dx dy over one cell = the G = 0 coefficient × a² = 47.878 V·Å² · Σ f_e(0). */
    const ssb4d_specimen sp[3] = {SSB4D_SPECIMEN_SRTIO3, SSB4D_SPECIMEN_AU, SSB4D_SPECIMEN_SI};
    for (int s = 0; s < 3; s++) {
        const sim_crystal *cr = sim_crystal_get(sp[s]);
        double v[2], ref = 0.0;
        sim_layer_coeff(cr, -1, 0, 0, v);
        for (int l = 0; l < cr->n_layers; l++)
            for (int j = 0; j < cr->n_atoms[l]; j++)
                ref += VPROJ_CODATA * fe0[cr->atoms[l][j].Z];
        double got = v[0] * cr->a_A * cr->a_A;
        printf("  %s: cell's integral of V_proj %.1f V·A^3 (Kirkland f_e(0), CODATA: %.1f; %+.2f%%), "
               "mean inner potential %.2f V\n", cr->name, got, ref, 100.0 * (got / ref - 1.0),
               got / (cr->a_A * cr->a_A * cr->a_A));
        assert_true(fabs(got / ref - 1.0) < 0.006);
        assert_true(fabs(v[1]) < 1e-9 * got);
    }
    assert_true(fabs(SIM_VPROJ_CONST / VPROJ_CODATA - 1.0) < 1e-5);
}

/* λ and σ = 2π γ m0 e λ / h² (Kirkland 2010, eq. 5.6) from CODATA 2018, computed in SI units. */
static void test_sigma(void **state)
{
    (void)state;
    static const struct {
        double kv, lambda_A, sigma;
    } ref[] = {{80, 0.0417571608, 1.00870660e-3}, {200, 0.0250793405, 7.28840104e-4},
               {300, 0.0196874890, 6.52616142e-4}};
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        double l = ssb4d_wavelength_A(ref[i].kv), s = sim_sigma(ref[i].kv);
        printf("  %3.0f kV: lambda %.8f A (CODATA %.8f), sigma %.6e (CODATA %.6e, %+.1e)\n",
               ref[i].kv, l, ref[i].lambda_A, s, ref[i].sigma, s / ref[i].sigma - 1.0);
        assert_true(fabs(l / ref[i].lambda_A - 1.0) < 2e-6);
        assert_true(fabs(s / ref[i].sigma - 1.0) < 2e-6);
    }
}

/* Plane-wave parameters: a one-cell window on a grid of 3·hmax + 1, so that the antialias band
 * holds the beams |g| <= (hmax + ⅓)/a: no beam on its edge (bloch_wave.py's band_r2). */
static void pw_params(ssb4d_sim_params *p, ssb4d_specimen sp, double kv, double tr, double tc,
                      int cells, int hmax)
{
    assert_int_equal(ssb4d_sim_params_preset(p, "tiny", NULL), SSB4D_OK);
    p->specimen = sp;
    p->kv = kv;
    p->tilt_mrad[0] = tr;
    p->tilt_mrad[1] = tc;
    p->cells_z = cells;
    p->window_cells = 1;
    p->det = 8;
    p->det_oversample = 1;
    p->grid = 3 * hmax + 1;
}

/* The projection (weak-phase) limit of one slice: the wave after the first slice's transmission
 * is t = e^{iσ·v_z}, v_z the layer's projected potential, so its phase at any point is σ·v_z
 * there and |t| = 1 (up to the antialias band's truncation of t); and after one whole cell the
 * zero beam's phase is σ·V̄·a, the mean inner potential V̄ times the thickness, the phase
 * shift electron holography measures. */
static void test_weak_phase(void **state)
{
    (void)state;
    enum { HM = 20 };
    int hk[(2 * HM + 1) * (2 * HM + 1)][2];
    int nb = 0;
    for (int h = -HM; h <= HM; h++)
        for (int k = -HM; k <= HM; k++)
            if (h * h + k * k <= HM * HM) {
                hk[nb][0] = h;
                hk[nb][1] = k;
                nb++;
            }
    const ssb4d_specimen sp[2] = {SSB4D_SPECIMEN_SRTIO3, SSB4D_SPECIMEN_AU};
    for (int s = 0; s < 2; s++) {
        ssb4d_sim_params p;
        pw_params(&p, sp[s], 300, 0, 0, 1, HM);
        double *amp = malloc((size_t)2 * nb * 2 * sizeof(double)); /* 2 slices */
        assert_non_null(amp);
        assert_int_equal(sim_planewave_beams(&p, nb, (const int(*)[2])hk, amp, NULL), SSB4D_OK);
        const sim_crystal *cr = sim_crystal_get(sp[s]);
        double sigma = sim_sigma(300), a = cr->a_A;
        /* sites: the columns (0,0), (½,½), (½,0) and the quarter point (¼,¼) between them */
        static const double site[4][2] = {{0, 0}, {0.5, 0.5}, {0.5, 0}, {0.25, 0.25}};
        double worst = 0.0, worst_mod = 0.0;
        for (int n = 0; n < 4; n++) {
            double complex psi = 0;
            double v = 0.0; /* layer 0's v_z at the site, from its Fourier series in the band */
            for (int b = 0; b < nb; b++) {
                double t = 2 * M_PI * (hk[b][0] * site[n][0] + hk[b][1] * site[n][1]), c[2];
                psi += (amp[2 * b] + I * amp[2 * b + 1]) * cexp(I * t);
                sim_layer_coeff(cr, 0, hk[b][0], hk[b][1], c);
                v += c[0] * cos(t) - c[1] * sin(t);
            }
            printf("  %s layer 0 at (%.2f, %.2f): phase %.4f rad, sigma*v_z %.4f rad (v_z %.1f V*A), "
                   "|t| %.4f\n", cr->name, site[n][0], site[n][1], carg(psi), sigma * v, v, cabs(psi));
            if (sigma * v < 0.5) { /* the weak-phase sites; the columns' peaks are not weak */
                worst = fmax(worst, fabs(carg(psi) - sigma * v) - 0.05 * fabs(sigma * v));
                worst_mod = fmax(worst_mod, fabs(cabs(psi) - 1.0));
            }
        }
        /* The same in Fourier space, without the band's truncation: t's beams against the
         * Fourier coefficients of e^{iσ·v_z} computed here in double precision on a fine
         * KF × KF grid of the cell (no aliasing of its harmonics into the band). */
        enum { KF = 128 };
        double complex *vg = calloc((size_t)KF * KF, sizeof *vg), *ex = malloc(KF * sizeof *ex);
        assert_non_null(vg);
        assert_non_null(ex);
        for (int i = 0; i < KF; i++)
            ex[i] = cexp(2 * M_PI * I * i / KF); /* e^{2πi n/KF}, indexed mod KF */
        double complex *cg = malloc((size_t)nb * sizeof *cg);
        assert_non_null(cg);
        for (int b = 0; b < nb; b++) {
            double c[2];
            sim_layer_coeff(cr, 0, hk[b][0], hk[b][1], c);
            cg[b] = c[0] + I * c[1];
        }
        for (int i = 0; i < KF; i++)
            for (int j = 0; j < KF; j++) {
                double complex v = 0;
                for (int b = 0; b < nb; b++) {
                    v += cg[b] * ex[((hk[b][0] * i) % KF + KF) % KF] *
                         ex[((hk[b][1] * j) % KF + KF) % KF];
                }
                vg[(size_t)i * KF + j] = cexp(I * sigma * creal(v));
            }
        double worst_g = 0.0;
        for (int b = 0; b < nb; b++) {
            double complex tg = 0;
            for (int i = 0; i < KF; i++)
                for (int j = 0; j < KF; j++)
                    tg += vg[(size_t)i * KF + j] * conj(ex[((hk[b][0] * i) % KF + KF) % KF] *
                                                        ex[((hk[b][1] * j) % KF + KF) % KF]);
            tg /= (double)KF * KF;
            worst_g = fmax(worst_g, cabs(tg - (amp[2 * b] + I * amp[2 * b + 1])));
        }
        free(vg);
        free(ex);
        free(cg);
        printf("  %s layer 0: largest |t_G - FT[exp(i sigma v_z)]_G| over %d beams %.2e\n",
               cr->name, nb, worst_g);
        /* the simulator builds t on a 60² cell grid (its harmonics beyond 30/a alias into the
         * band) in float32: 2e-4 */
        assert_true(worst_g < 5e-4);
        double c0[2];
        sim_layer_coeff(cr, -1, 0, 0, c0);
        const double *a00 = amp + (size_t)(nb + nb / 2) * 2; /* slice 1, beam (0,0) */
        assert_true(hk[nb / 2][0] == 0 && hk[nb / 2][1] == 0);
        double mip = c0[0] / a, ph0 = atan2(a00[1], a00[0]);
        printf("  %s: weak sites' phase within 5 %% + %.4f rad, ||t| - 1| <= %.4f; one cell: zero "
               "beam's phase %.4f rad, sigma*V0*a %.4f rad (V0 = %.2f V)\n", cr->name, worst,
               worst_mod, ph0, sigma * mip * a, mip);
        /* Away from the columns' peaks the band's truncation of t is small: the phase is σ·v_z
         * within 5 % + 0.003 rad (measured: 1 % and 0.002 rad). The zero beam's phase
         * arg⟨e^{iφ}⟩ is ⟨φ⟩ = σ·V0·a to first order only: 0.7 % low for SrTiO3, 6 % for Au,
         * whose columns reach 2 rad. */
        assert_true(worst < 0.003);
        assert_true(worst_mod < 0.01);
        assert_true(fabs(ph0 / (sigma * mip * a) - 1.0) < (sp[s] == SSB4D_SPECIMEN_AU ? 0.08 : 0.02));
        free(amp);
    }
}

/* ---- the thickness series against Bloch waves and a numpy multislice ----------------------- */

typedef struct {
    char name[64], crystal[16];
    double kv, tilt[2];
    int cells, hmax, nb;
    int hk[16][2];
    double *bloch, *ms; /* cells × nb intensities of the two references */
} ref_case;

/* tests/reference/bloch_wave.tsv (written by bloch_wave.py); returns the number of cases. */
static int read_table(const char *path, ref_case *cs, int max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    int n = -1;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        if (!strncmp(line, "case ", 5)) {
            if (n + 1 >= max)
                break;
            ref_case *c = &cs[++n];
            memset(c, 0, sizeof *c);
            if (sscanf(line + 5, "%63s %15s %lf %lf %lf %d %d %d", c->name, c->crystal, &c->kv,
                       &c->tilt[0], &c->tilt[1], &c->cells, &c->hmax, &c->nb) != 8 ||
                c->nb < 1 || c->nb > 16 || c->cells < 1 || c->cells > 1000)
                break;
            c->bloch = calloc((size_t)c->cells * c->nb, sizeof(double));
            c->ms = calloc((size_t)c->cells * c->nb, sizeof(double));
        } else if (!strncmp(line, "beams ", 6) && n >= 0) {
            char *s = line + 6;
            for (int b = 0; b < cs[n].nb; b++)
                for (int j = 0; j < 2; j++)
                    cs[n].hk[b][j] = (int)strtol(s, &s, 10);
        } else if (n >= 0 && (!strncmp(line, "bloch ", 6) || !strncmp(line, "ms ", 3))) {
            double *dst = line[0] == 'b' ? cs[n].bloch : cs[n].ms;
            char *s = strchr(line, ' ');
            int cell = (int)strtol(s, &s, 10);
            strtod(s, &s); /* the thickness */
            if (cell < 1 || cell > cs[n].cells || !dst)
                continue;
            for (int b = 0; b < cs[n].nb; b++)
                dst[(size_t)(cell - 1) * cs[n].nb + b] = strtod(s, &s);
        }
    }
    fclose(f);
    return n + 1;
}

/* The largest |I − ref| over the first `cells` cells. */
static double worst_diff(const ref_case *c, const double *Iv, const double *ref, int cells)
{
    double w = 0.0;
    for (size_t n = 0; n < (size_t)cells * c->nb; n++)
        w = fmax(w, fabs(Iv[n] - ref[n]));
    return w;
}

/* The tilt's signature: the asymmetry I_g − I_{−g} of the Friedel pairs, which a tilt makes
 * and whose sign it sets (I_g(−τ) = I_{−g}(τ) for these centrosymmetric crystals). The largest
 * |A − sign·A_ref| over the first `cells` cells (sign −1: against the opposite tilt); *amax:
 * the largest |A_ref|. */
static double worst_asym(const ref_case *c, const double *Iv, const double *ref, int cells,
                         double sign, double *amax)
{
    double w = 0.0;
    *amax = 0.0;
    for (int b = 0; b < c->nb; b++)
        for (int m = b + 1; m < c->nb; m++) {
            if (c->hk[m][0] != -c->hk[b][0] || c->hk[m][1] != -c->hk[b][1])
                continue;
            for (size_t n = 0; n < (size_t)cells; n++) {
                const double *x = Iv + n * c->nb, *r = ref + n * c->nb;
                w = fmax(w, fabs((x[b] - x[m]) - sign * (r[b] - r[m])));
                *amax = fmax(*amax, fabs(r[b] - r[m]));
            }
        }
    return w;
}

/* Where the Bloch waves and the layered crystal agree: SrTiO3 to 5 nm within 0.01 (measured
 * 0.0074). Au's columns give each wave 2 rad per atom every 4.08 Å, far from the continuous
 * string the zero-order Laue zone assumes: 0.018 apart at 0.8 nm, 0.15 at 5 nm (docs). */
#define THIN_NM 5.0
#define BLOCH_TOL_SRTIO3 0.01

static void test_thickness_series(void **state)
{
    (void)state;
    ref_case cs[8];
    int nc = read_table(SSB4D_TESTS_DIR "/reference/bloch_wave.tsv", cs, 8);
    assert_true(nc >= 4);
    for (int i = 0; i < nc; i++) {
        ref_case *c = &cs[i];
        assert_non_null(c->bloch);
        assert_non_null(c->ms);
        ssb4d_specimen sp = !strcmp(c->crystal, "au")   ? SSB4D_SPECIMEN_AU
                            : !strcmp(c->crystal, "si") ? SSB4D_SPECIMEN_SI
                                                        : SSB4D_SPECIMEN_SRTIO3;
        double a = sim_crystal_get(sp)->a_A;
        int nl = sim_crystal_get(sp)->n_layers;
        ssb4d_sim_params p;
        pw_params(&p, sp, c->kv, c->tilt[0], c->tilt[1], c->cells, c->hmax);
        /* records per slice; the exit of n + 1 cells is slice nl·(n + 1) − 1 */
        double *amp = malloc((size_t)nl * c->cells * c->nb * 2 * sizeof(double));
        double *Iv = malloc((size_t)c->cells * c->nb * sizeof(double));
        assert_non_null(amp);
        assert_non_null(Iv);
        assert_int_equal(sim_planewave_beams(&p, c->nb, (const int(*)[2])c->hk, amp, NULL),
                         SSB4D_OK);
        for (int n = 0; n < c->cells; n++)
            for (int b = 0; b < c->nb; b++) {
                const double *v = amp + ((size_t)(nl * (n + 1) - 1) * c->nb + b) * 2;
                Iv[(size_t)n * c->nb + b] = v[0] * v[0] + v[1] * v[1];
            }
        /* Bloch waves agree while the crystal is thin; the thin range is where the zero-order
         * Laue zone (no period along the beam) and the layers give the same answer */
        int thin = (int)floor(THIN_NM * 10.0 / a);
        double w_ms = worst_diff(c, Iv, c->ms, c->cells);
        double w_bl = worst_diff(c, Iv, c->bloch, c->cells);
        double w_thin = worst_diff(c, Iv, c->bloch, thin);
        double amax, a_same = worst_asym(c, Iv, c->bloch, thin, 1.0, &amax);
        double a_flip = worst_asym(c, Iv, c->bloch, thin, -1.0, &amax);
        printf("  %-22s largest |dI|: numpy multislice %.1e (to %.1f nm); Bloch %.4f to %.1f nm, "
               "%.4f to %.1f nm\n", c->name, w_ms, c->cells * a / 10, w_thin, thin * a / 10, w_bl,
               c->cells * a / 10);
        printf("    to %.1f nm, Friedel asymmetry I_g - I_-g up to %.4f (Bloch): the simulator's is "
               "off by %.4f, by %.4f against the opposite tilt\n", thin * a / 10, amax, a_same,
               a_flip);
        printf("    largest |I - I_bloch| to");
        static const double nm[5] = {1, 2, 5, 10, 20};
        for (int r = 0; r < 5; r++) {
            int n = (int)floor(nm[r] * 10.0 / a);
            n = n < c->cells ? n : c->cells;
            printf(" %.1f nm %.4f%s", n * a / 10, worst_diff(c, Iv, c->bloch, n), r < 4 ? "," : "\n");
        }
        int rows[2] = {thin, c->cells};
        for (int r = 0; r < 2; r++) {
            size_t o = (size_t)(rows[r] - 1) * c->nb;
            printf("    %4.1f nm, simulator / Bloch / numpy multislice:", rows[r] * a / 10);
            for (int b = 0; b < c->nb && b < 5; b++)
                printf(" (%d,%d) %.4f/%.4f/%.4f", c->hk[b][0], c->hk[b][1], Iv[o + b],
                       c->bloch[o + b], c->ms[o + b]);
            printf("\n");
        }
        assert_true(w_ms < 1e-3);
        if (sp != SSB4D_SPECIMEN_AU) /* SrTiO3 and Si: light columns, near the ZOLZ string */
            assert_true(w_thin < BLOCH_TOL_SRTIO3);
        if (c->tilt[0] != 0.0 || c->tilt[1] != 0.0) {
            /* the tilt's sign: the asymmetry is the Bloch waves' for this tilt, not for the
             * opposite one (SrTiO3: 0.0002 against 0.0125 of 0.0062; Au: 0.0036 against
             * 0.0182 of 0.0091); its size: SrTiO3's within 10 % */
            assert_true(amax > 0.003);
            assert_true(a_flip > 1.5 * amax);
            assert_true(a_same < a_flip / 3.0);
            if (sp == SSB4D_SPECIMEN_SRTIO3)
                assert_true(a_same < 0.1 * amax);
        }
        free(amp);
        free(Iv);
        free(c->bloch);
        free(c->ms);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scattering_factors),
        cmocka_unit_test(test_sigma),
        cmocka_unit_test(test_weak_phase),
        cmocka_unit_test(test_thickness_series),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
