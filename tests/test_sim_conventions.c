/* test_sim_conventions.c — the simulator's conventions, one per test, against an independent
 * float64 STEM multislice (tests/reference/stem_reference.py, its table stem_reference.tsv;
 * docs/refine-conventions.md, "Conventions"). Our simulator and `refine` share their
 * conventions, so an error in one would cancel between them; here each convention an outside
 * code may differ in is pinned against the textbook: the table holds the reference pattern and
 * the pattern with that ONE convention changed, and the simulator must match the first and be
 * far from the second.
 *  a. χ's sign (C10 < 0 is underfocus) and φ12's direction;  b. the probe position's sign and
 *  axis order;  c. the tilt's sign in STEM;  d. the Fresnel propagator's sign;  e. the
 *  potential's sign, and the detector flip (a transpose). The potential's parametrisation
 *  (Peng 1996 against Kirkland, σ, λ) is test_sim_reference's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sim/sim.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SSB4D_TESTS_DIR
#define SSB4D_TESTS_DIR "tests"
#endif

#define MAX_KINDS 4

typedef struct {
    char name[64], crystal[16];
    double kv, semiangle, C10, C12, phi12, tilt[2], pos[2];
    int cells, W, M, D;
    int nk;
    char kind[MAX_KINDS][32];
    double *pat[MAX_KINDS]; /* D×D each; kind 0 is the reference */
} conv_case;

/* The case `name` of stem_reference.tsv into c; 0 when found and complete. */
static int read_case(const char *name, conv_case *c)
{
    FILE *f = fopen(SSB4D_TESTS_DIR "/reference/stem_reference.tsv", "r");
    if (!f)
        return -1;
    size_t cap = 1 << 16;
    char *line = malloc(cap);
    int found = 0;
    memset(c, 0, sizeof *c);
    while (line && fgets(line, (int)cap, f)) {
        while (!strchr(line, '\n') && !feof(f)) { /* a pattern line is long */
            size_t n = strlen(line);
            char *g = realloc(line, cap * 2);
            if (!g)
                break;
            line = g;
            cap *= 2;
            if (!fgets(line + n, (int)(cap - n), f))
                break;
        }
        if (!strncmp(line, "case ", 5)) {
            if (found)
                break;
            char nm[64];
            if (sscanf(line + 5, "%63s", nm) != 1 || strcmp(nm, name))
                continue;
            found = sscanf(line + 5, "%63s %15s %lf %lf %lf %lf %lf %lf %lf %d %d %d %d %lf %lf",
                           c->name, c->crystal, &c->kv, &c->semiangle, &c->C10, &c->C12, &c->phi12,
                           &c->tilt[0], &c->tilt[1], &c->cells, &c->W, &c->M, &c->D, &c->pos[0],
                           &c->pos[1]) == 15 && c->D >= 8 && c->D <= 64;
            if (!found)
                break;
        } else if (found && !strncmp(line, "pattern ", 8) && c->nk < MAX_KINDS) {
            char *s = line + 8, *sp = strchr(s, ' ');
            if (!sp || sp - s >= 32)
                continue;
            memcpy(c->kind[c->nk], s, (size_t)(sp - s));
            c->kind[c->nk][sp - s] = 0;
            double *p = malloc((size_t)c->D * c->D * sizeof(double));
            s = sp;
            for (int n = 0; p && n < c->D * c->D; n++)
                p[n] = strtod(s, &s);
            c->pat[c->nk++] = p;
        }
    }
    free(line);
    fclose(f);
    return found && c->nk >= 2 && !strcmp(c->kind[0], "ref") ? 0 : -1;
}

static void free_case(conv_case *c)
{
    for (int k = 0; k < c->nk; k++)
        free(c->pat[k]);
}

/* max |x − y| / max |y| over the D×D pattern. */
static double rel_diff(const double *x, const double *y, int D)
{
    double w = 0.0, m = 0.0;
    for (int n = 0; n < D * D; n++) {
        w = fmax(w, fabs(x[n] - y[n]));
        m = fmax(m, fabs(y[n]));
    }
    return w / m;
}

/* The simulator's pattern of the case: sim_pattern_at, det-oversample 1, the case's grid. */
static void simulate_case(const conv_case *c, double *out)
{
    ssb4d_sim_params p;
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
    p.specimen = !strcmp(c->crystal, "au")   ? SSB4D_SPECIMEN_AU
                 : !strcmp(c->crystal, "si") ? SSB4D_SPECIMEN_SI
                                             : SSB4D_SPECIMEN_SRTIO3;
    p.kv = c->kv;
    p.semiangle_mrad = c->semiangle;
    memset(&p.ab, 0, sizeof p.ab);
    p.ab.C_nm[SSB4D_C10] = c->C10;
    p.ab.C_nm[SSB4D_C12] = c->C12;
    p.ab.phi_deg[SSB4D_C12] = c->phi12;
    p.tilt_mrad[0] = c->tilt[0];
    p.tilt_mrad[1] = c->tilt[1];
    p.cells_z = c->cells;
    p.window_cells = c->W;
    p.grid = c->M;
    p.det = c->D;
    p.det_oversample = 1;
    float *pat = malloc((size_t)c->D * c->D * sizeof(float));
    assert_non_null(pat);
    double sums[2];
    ssb4d_err err = {0};
    ssb4d_status st = sim_pattern_at(&p, c->pos[0], c->pos[1], pat, sums, &err);
    if (st)
        printf("  sim_pattern_at: %s\n", err.msg);
    assert_int_equal(st, SSB4D_OK);
    for (int n = 0; n < c->D * c->D; n++)
        out[n] = pat[n];
    free(pat);
}

/* The simulator within MATCH of the reference's peak (float32 FFTs through up to 40 slices:
 * measured 3e-6 .. 4.3e-5), and every variant at least FAR away and 100× farther than the
 * simulator: the test tells the two conventions apart by a wide margin. */
#define MATCH 2e-4
#define FAR 0.02

static void check_case(const char *name)
{
    conv_case c;
    assert_int_equal(read_case(name, &c), 0);
    double *sim = malloc((size_t)c.D * c.D * sizeof(double));
    assert_non_null(sim);
    simulate_case(&c, sim);
    double d_ref = rel_diff(sim, c.pat[0], c.D);
    printf("  %-16s simulator vs the reference: %.2e of the peak\n", name, d_ref);
    for (int k = 1; k < c.nk; k++) {
        double d_var = rel_diff(c.pat[k], c.pat[0], c.D), d_sv = rel_diff(sim, c.pat[k], c.D);
        printf("  %-16s %-10s (one convention changed) vs the reference %.3f, vs the simulator "
               "%.3f\n", "", c.kind[k], d_var, d_sv);
        assert_true(d_var > FAR);
        assert_true(d_sv > 100.0 * d_ref);
    }
    assert_true(d_ref < MATCH);
    free(sim);
    free_case(&c);
}

/* a. C10 = −2 nm focuses 2 nm inside a 3.9 nm SrTiO3 crystal (a probe on a Sr column): the
 * reference with χ's sign flipped (C10 < 0 read as overfocus) is far. */
static void test_defocus_sign(void **state)
{
    (void)state;
    check_case("defocus_sign");
}

/* a'. C12 = 2 nm at φ12 = 20° from the row axis towards the column axis: against χ flipped and
 * against rows and columns exchanged (φ12 → 90° − φ12, the position transposed). */
static void test_astigmatism_angle(void **state)
{
    (void)state;
    check_case("astigmatism");
}

/* b. The probe at R = (1.17, 0.59) Å, off every symmetry element of the cell: against −R and
 * against (0.59, 1.17). */
static void test_position_sign(void **state)
{
    (void)state;
    check_case("position_sign");
}

/* c. The tilt τ = (3, −2) mrad in STEM, 7.8 nm of SrTiO3: against −τ and (−2, 3). The plane-wave
 * tilt sign against Bloch waves (k0 = τ/λ) is test_sim_reference's thickness series. */
static void test_tilt_sign(void **state)
{
    (void)state;
    check_case("tilt_sign");
}

/* d. The Fresnel propagator exp(−iπλΔz|k|² − 2πiΔz k·τ) against its conjugate, the probe focused
 * 2 nm deep (C10 = −2 nm). */
static void test_propagator_sign(void **state)
{
    (void)state;
    check_case("propagator_sign");
}

/* e. The potential's sign: t = e^{+iσ v_z} (the nuclei attract the electron), 3 cells of Au at
 * 200 kV, against e^{−iσ v_z}. */
static void test_potential_sign(void **state)
{
    (void)state;
    check_case("potential_sign");
}

/* e''. Si (diamond cubic, 4 atomic layers per cell): the layers stacked from the entrance, z = 0,
 * ¼, ½, ¾, against the stack reversed and against the probe position's opposite. */
static void test_si_layers(void **state)
{
    (void)state;
    check_case("si_layers");
}

/* e'. The detector flip (`simulate --flip`) transposes every frame, det_row ↔ det_col, and
 * nothing else: the counts of a flipped run are exactly the transposed counts of the unflipped
 * one (same seed). A mirror along one axis (det_row → −det_row) would not pass. */
static void test_flip_transposes(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
    p.scan_n = 4;
    p.scan_cells = 1;
    p.det = 16;
    p.window_cells = 2;
    p.det_oversample = 1;
    p.dose = 1e6;
    p.tilt_mrad[0] = 2.0; /* no symmetry makes a pattern its own transpose */
    p.ab.C_nm[SSB4D_C10] = -3.0;
    const size_t DD = (size_t)p.det * p.det, n = (size_t)p.scan_n * p.scan_n * DD;
    uint16_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(ssb4d_simulate_to_memory(&p, a, NULL, NULL, NULL, NULL, NULL), SSB4D_OK);
    p.det_flip = 1;
    assert_int_equal(ssb4d_simulate_to_memory(&p, b, NULL, NULL, NULL, NULL, NULL), SSB4D_OK);
    size_t same = 0, differ_unflipped = 0, D = (size_t)p.det;
    for (size_t q = 0; q < n / DD; q++)
        for (size_t r = 0; r < D; r++)
            for (size_t c = 0; c < D; c++) {
                same += b[q * DD + r * D + c] == a[q * DD + c * D + r];
                differ_unflipped += b[q * DD + r * D + c] != a[q * DD + r * D + c];
            }
    printf("  flip: %zu of %zu counts equal the unflipped run transposed; %zu differ from it "
           "untransposed\n", same, n, differ_unflipped);
    assert_true(same == n);
    assert_true(differ_unflipped > n / 10);
    free(a);
    free(b);
}

/* b'. The scan's position formula (docs/simulate.md, the sidecar's scan.position_formula): at
 * scan rotation θ, scan position (i, j) is the probe at i·e_row + j·e_col, e_row = step·(cos θ,
 * −sin θ), e_col = step·(sin θ, cos θ) in the specimen (det_row, det_col) frame. The whole-scan
 * simulation's noise-free patterns equal sim_pattern_at's at those positions; with the
 * position's sign pinned by test_position_sign, this pins the scan's orientation. */
static void test_scan_position_formula(void **state)
{
    (void)state;
    ssb4d_sim_params p;
    assert_int_equal(ssb4d_sim_params_preset(&p, "tiny", NULL), SSB4D_OK);
    p.scan_n = 4;
    p.scan_cells = 1;
    p.det = 16;
    p.window_cells = 2;
    p.det_oversample = 1;
    p.scan_rotation_deg = 30.0;
    p.ab.C_nm[SSB4D_C10] = -3.0;
    const size_t DD = (size_t)p.det * p.det, N = (size_t)p.scan_n;
    float *all = malloc(N * N * DD * sizeof(float)), *one = malloc(DD * sizeof(float));
    assert_non_null(all);
    assert_non_null(one);
    ssb4d_sim_info info;
    assert_int_equal(ssb4d_simulate_to_memory(&p, NULL, all, NULL, NULL, &info, NULL), SSB4D_OK);
    double th = p.scan_rotation_deg * M_PI / 180.0, st = info.scan_step_A, worst = 0.0, wrong = 0.0;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < N; j++) {
            double r = st * ((double)i * cos(th) + (double)j * sin(th));
            double c = st * (-(double)i * sin(th) + (double)j * cos(th));
            double sums[2];
            assert_int_equal(sim_pattern_at(&p, r, c, one, sums, NULL), SSB4D_OK);
            for (size_t n = 0; n < DD; n++)
                worst = fmax(worst, fabs((double)one[n] - all[(i * N + j) * DD + n]));
            /* the opposite rotation's position, for scale */
            assert_int_equal(sim_pattern_at(&p, st * ((double)i * cos(th) - (double)j * sin(th)),
                                            st * ((double)i * sin(th) + (double)j * cos(th)), one,
                                            sums, NULL), SSB4D_OK);
            for (size_t n = 0; n < DD; n++)
                wrong = fmax(wrong, fabs((double)one[n] - all[(i * N + j) * DD + n]));
        }
    double peak = 0.0;
    for (size_t n = 0; n < N * N * DD; n++)
        peak = fmax(peak, all[n]);
    printf("  scan rotation 30 deg: whole-scan patterns vs sim_pattern_at at the formula's "
           "positions %.2e of the peak, at the opposite rotation's %.3f\n", worst / peak,
           wrong / peak);
    assert_true(worst <= 1e-6 * peak);
    assert_true(wrong > 0.05 * peak);
    free(all);
    free(one);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defocus_sign),    cmocka_unit_test(test_astigmatism_angle),
        cmocka_unit_test(test_position_sign),   cmocka_unit_test(test_tilt_sign),
        cmocka_unit_test(test_propagator_sign), cmocka_unit_test(test_potential_sign),
        cmocka_unit_test(test_si_layers),       cmocka_unit_test(test_flip_transposes), cmocka_unit_test(test_scan_position_formula),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
