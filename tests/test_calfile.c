/* test_calfile.c — the calibration JSON file (src/io/calfile, SPEC §8).
 *
 *   - every field survives write → read bit for bit, with awkward doubles (0.1, -0.0, 1e-300,
 *     the smallest subnormal, 1/3, values near the range limits), a seed of 2^64-1 (written as
 *     a string) and 2^53 (the largest written as a number), NaN as null, and several trials and
 *     regions; writing the read-back struct gives the same text;
 *   - an empty struct round-trips (nothing but unknowns) and optional sections stay absent;
 *   - refusals name the problem: malformed JSON, trailing garbage, wrong schema, version 99,
 *     non-integer version, wrong types and absurd values in every new section, a seed that is not
 *     an exact integer, rectangles that are empty or outside the scan, half a thick model;
 *   - the rotation's source and the fit section (issue 11: objective, φ12 in both frames,
 *     confidence, warning, the parallax estimate) round-trip too; ssb_calfile_set_fit records
 *     a fit result; a file written before issue 11 (no rotation_source, no fit section, the same
 *     schema version 1) still loads, with those unknown;
 *   - ssb_calfile_identity_differs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/calfile.h"
#include "ref_ssb.h"

static char g_dir[512];

static int setup(void **state)
{
    (void)state;
    return ref_tmpdir(g_dir, sizeof g_dir, "calfile");
}

static int teardown(void **state)
{
    (void)state;
    return ref_rmtree(g_dir);
}

static const char *tpath(const char *name)
{
    static char buf[700];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

/* Same bits (NaN == NaN of the same payload; -0.0 != 0.0). */
static void same_double(double a, double b, const char *what)
{
    if (memcmp(&a, &b, sizeof a) != 0)
        fail_msg("%s: %.17g read back as %.17g", what, a, b);
}

static void same_calfile(const ssb4d_calfile *a, const ssb4d_calfile *b)
{
    assert_int_equal(a->version, b->version);
    const double *ga = &a->geom.kv, *gb = &b->geom.kv;
    for (size_t i = 0; i < sizeof a->geom / sizeof(double); i++)
        same_double(ga[i], gb[i], "geometry");
    same_double(a->bf_radius_px, b->bf_radius_px, "selection radius");
    same_double(a->disk_radius_px, b->disk_radius_px, "disk radius");
    assert_memory_equal(a->det_shape, b->det_shape, sizeof a->det_shape);
    assert_memory_equal(a->scan_shape, b->scan_shape, sizeof a->scan_shape);
    assert_int_equal(a->has_ab, b->has_ab);
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        same_double(a->ab.C_nm[i], b->ab.C_nm[i], ssb4d_aberr_name(i));
        if (ssb4d_aberr_m(i))
            same_double(a->ab.phi_deg[i], b->ab.phi_deg[i], "phi");
    }
    same_double(a->loss, b->loss, "loss");
    assert_string_equal(a->data_identity, b->data_identity);
    assert_int_equal(a->n_flagged, b->n_flagged);
    if (a->n_flagged)
        assert_memory_equal(a->flagged, b->flagged, a->n_flagged * sizeof *a->flagged);
    assert_int_equal(a->n_bf, b->n_bf);
    assert_int_equal(a->has_thick, b->has_thick);
    if (a->has_thick) {
        same_double(a->thick.tilt_mrad[0], b->thick.tilt_mrad[0], "tilt row");
        same_double(a->thick.tilt_mrad[1], b->thick.tilt_mrad[1], "tilt col");
        same_double(a->thick.thickness_nm, b->thick.thickness_nm, "thickness");
        same_double(a->gain, b->gain, "gain");
    }
    assert_int_equal(a->branch_flipped, b->branch_flipped);
    same_double(a->skewness, b->skewness, "skewness");
    same_double(a->skewness_other, b->skewness_other, "skewness_other");
    assert_int_equal(a->has_search, b->has_search);
    if (a->has_search) {
        assert_int_equal(a->trials, b->trials);
        if (a->seed != b->seed)
            fail_msg("seed %llu read back as %llu", (unsigned long long)a->seed,
                     (unsigned long long)b->seed);
        for (int i = 0; i < 3; i++) {
            same_double(a->range_lo[i], b->range_lo[i], "range lo");
            same_double(a->range_hi[i], b->range_hi[i], "range hi");
            assert_int_equal(a->locked[i], b->locked[i]);
        }
        assert_int_equal(a->evaluations, b->evaluations);
        assert_int_equal(a->n_best, b->n_best);
        for (size_t i = 0; i < a->n_best; i++) {
            assert_int_equal(a->best[i].stage, b->best[i].stage);
            assert_int_equal(a->best[i].number, b->best[i].number);
            same_double(a->best[i].C10_nm, b->best[i].C10_nm, "trial C10");
            same_double(a->best[i].C12_nm, b->best[i].C12_nm, "trial C12");
            same_double(a->best[i].phi12_deg, b->best[i].phi12_deg, "trial phi12");
            same_double(a->best[i].loss, b->best[i].loss, "trial loss");
        }
    }
    assert_string_equal(a->trials_phi12_frame, b->trials_phi12_frame);
    assert_string_equal(a->rotation_method, b->rotation_method);
    assert_string_equal(a->rotation_from, b->rotation_from);
    same_double(a->rotation_sigma_deg, b->rotation_sigma_deg, "rotation sigma");
    assert_int_equal(a->has_fit, b->has_fit);
    if (a->has_fit) {
        assert_string_equal(a->objective, b->objective);
        same_double(a->phi12_scan_deg, b->phi12_scan_deg, "phi12 scan");
        same_double(a->phi12_probe_deg, b->phi12_probe_deg, "phi12 probe");
        assert_int_equal(a->loss_n_bf, b->loss_n_bf);
        assert_int_equal(a->fit_n_bf, b->fit_n_bf);
        assert_int_equal(a->confident, b->confident);
        assert_string_equal(a->warning, b->warning);
        same_double(a->loss_contrast, b->loss_contrast, "loss contrast");
        for (int i = 0; i < 4; i++)
            same_double(a->se[i], b->se[i], "standard error");
        assert_int_equal(a->has_parallax, b->has_parallax);
        if (a->has_parallax) {
            same_double(a->px_C10_nm, b->px_C10_nm, "parallax C10");
            same_double(a->px_C12_nm, b->px_C12_nm, "parallax C12");
            same_double(a->px_phi12_scan_deg, b->px_phi12_scan_deg, "parallax phi12");
            same_double(a->px_rotation_deg, b->px_rotation_deg, "parallax rotation");
            for (int i = 0; i < 4; i++)
                same_double(a->px_sigma[i], b->px_sigma[i], "parallax sigma");
            same_double(a->px_residual_A, b->px_residual_A, "parallax residual");
            same_double(a->px_seconds, b->px_seconds, "parallax seconds");
        }
    }
    assert_string_equal(a->sampling_method, b->sampling_method);
    same_double(a->sampling_measured_mrad, b->sampling_measured_mrad, "measured sampling");
    same_double(a->sampling_sigma_mrad, b->sampling_sigma_mrad, "sampling sigma");
    assert_string_equal(a->centre_method, b->centre_method);
    assert_int_equal(a->edge_model, b->edge_model);
    assert_string_equal(a->edge_model_source, b->edge_model_source);
    same_double(a->centre_measured_px[0], b->centre_measured_px[0], "measured centre");
    same_double(a->centre_measured_px[1], b->centre_measured_px[1], "measured centre");
    assert_int_equal(a->has_region, b->has_region);
    if (a->has_region)
        assert_memory_equal(a->region, b->region, sizeof a->region);
    assert_int_equal(a->has_refine, b->has_refine);
    if (a->has_refine) { /* the multislice refinement's record (issue 40) */
        assert_int_equal(a->refine_slices, b->refine_slices);
        assert_string_equal(a->refine_loss, b->refine_loss);
        same_double(a->refine_nll, b->refine_nll, "refine nll");
        same_double(a->refine_nll_expected, b->refine_nll_expected, "refine nll_expected");
        assert_int_equal(a->refine_iterations, b->refine_iterations);
        same_double(a->refine_phi12_probe_deg, b->refine_phi12_probe_deg, "refine phi12");
        same_double(a->refine_tilt_probe_mrad[0], b->refine_tilt_probe_mrad[0], "refine tilt");
        same_double(a->refine_tilt_probe_mrad[1], b->refine_tilt_probe_mrad[1], "refine tilt");
        assert_int_equal(a->refine_confident, b->refine_confident);
        assert_string_equal(a->refine_warning, b->refine_warning);
        assert_memory_equal(a->refine_region, b->refine_region, sizeof a->refine_region);
        assert_int_equal(a->refine_tilt_refined, b->refine_tilt_refined);
        assert_int_equal(a->refine_thickness_refined, b->refine_thickness_refined);
    }
    assert_int_equal(a->n_regions, b->n_regions);
    for (size_t i = 0; i < a->n_regions; i++) {
        const ssb4d_calfile_region *x = &a->regions[i], *y = &b->regions[i];
        assert_true(x->r0 == y->r0 && x->r1 == y->r1 && x->c0 == y->c0 && x->c1 == y->c1);
        same_double(x->C10_nm, y->C10_nm, "region C10");
        same_double(x->C12_nm, y->C12_nm, "region C12");
        same_double(x->phi12_deg, y->phi12_deg, "region phi12");
        same_double(x->loss, y->loss, "region loss");
    }
}

static void round_trip(const ssb4d_calfile *c, const char *name)
{
    ssb4d_err err = {0};
    assert_int_equal(ssb_calfile_write(tpath(name), c, &err), SSB4D_OK);
    ssb4d_calfile back;
    if (ssb_calfile_read(tpath(name), &back, &err) != SSB4D_OK)
        fail_msg("reading back %s: %s", name, err.msg);
    same_calfile(c, &back);
    /* and the text is a fixed point */
    char *t1 = ssb_calfile_to_json(c), *t2 = ssb_calfile_to_json(&back);
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
    ssb_calfile_free(&back);
}

/* A calfile with every field set to an awkward value. */
static void fill_everything(ssb4d_calfile *c)
{
    ssb_calfile_init(c);
    c->geom.kv = 300.1;
    c->geom.semiangle_mrad = 0.1;
    c->geom.scan_step_A[0] = 1.0 / 3.0;
    c->geom.scan_step_A[1] = 1e-9;
    c->geom.det_sampling_mrad[0] = 1.2786300000000001;
    c->geom.det_sampling_mrad[1] = 999.99999999999989;
    c->geom.centre_px[0] = -0.0;
    c->geom.centre_px[1] = 23.999999999999996;
    c->geom.rotation_deg = -9.2377e-300;
    c->bf_radius_px = 19.552;
    c->disk_radius_px = 1e5;
    c->det_shape[0] = 48;
    c->det_shape[1] = 47;
    c->scan_shape[0] = 64;
    c->scan_shape[1] = 96;
    c->has_ab = 1;
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        c->ab.C_nm[i] = (i % 3 == 0) ? 0.1 * (i + 1) : (i % 3 == 1 ? -0.0 : 0.0);
        c->ab.phi_deg[i] = ssb4d_aberr_m(i) ? (i == SSB4D_C23 ? -0.0 : 7.0 / (i + 1)) : 0.0;
    }
    c->ab.C_nm[SSB4D_C10] = -11.8;
    c->ab.C_nm[SSB4D_C30] = 1e-300;
    c->ab.C_nm[SSB4D_C56] = 4.9406564584124654e-324; /* the smallest subnormal */
    c->ab.phi_deg[SSB4D_C54] = 12.5;                  /* an angle whose C is +0 */
    c->loss = 0.1 + 0.2;
    snprintf(c->data_identity, sizeof c->data_identity, "sha256:%064d", 7);
    c->n_flagged = 3;
    c->flagged = malloc(3 * sizeof *c->flagged);
    c->flagged[0] = 0;
    c->flagged[1] = 17;
    c->flagged[2] = 48 * 47 - 1;
    c->n_bf = 1201;
    c->has_thick = 1;
    c->thick.tilt_mrad[0] = -0.0;
    c->thick.tilt_mrad[1] = 12.345678901234567;
    c->thick.thickness_nm = 9.6;
    c->gain = 1.0000000000000002;
    c->branch_flipped = 1;
    c->skewness = -0.1;
    c->skewness_other = NAN;
    c->has_search = 1;
    c->trials = 200;
    c->seed = UINT64_MAX;
    c->range_lo[0] = -40;
    c->range_hi[0] = 40;
    c->range_lo[1] = 0;
    c->range_hi[1] = 10;
    c->range_lo[2] = -90;
    c->range_hi[2] = NAN;
    c->locked[1] = 1;
    c->evaluations = 9007199254740992ull;
    c->n_best = 3;
    c->best = calloc(3, sizeof *c->best);
    for (size_t i = 0; i < 3; i++) {
        c->best[i].stage = (int)(i % 2);
        c->best[i].number = 100 * i + 3;
        c->best[i].C10_nm = -11.8 + 0.1 * (double)i;
        c->best[i].C12_nm = i == 2 ? NAN : 3.0000000000000004;
        c->best[i].phi12_deg = -89.99999999999999;
        c->best[i].loss = 1e-300 * (double)(i + 1);
    }
    snprintf(c->trials_phi12_frame, sizeof c->trials_phi12_frame, "probe");
    snprintf(c->rotation_method, sizeof c->rotation_method, "%s", SSB4D_CALFILE_ROT_FIT);
    snprintf(c->rotation_from, sizeof c->rotation_from, "parallax");
    c->rotation_sigma_deg = 0.1;
    c->has_fit = 1;
    snprintf(c->objective, sizeof c->objective, "band");
    c->phi12_scan_deg = -0.0;
    c->phi12_probe_deg = 89.99999999999999;
    c->loss_n_bf = 1201;
    c->fit_n_bf = 0;
    c->confident = 0;
    snprintf(c->warning, sizeof c->warning, "no clear minimum: \"quoted\", \u00b0 and a\ttab");
    c->loss_contrast = -1e-300;
    c->se[0] = 0.0123456789012345, c->se[1] = 0, c->se[3] = 1e6; /* se[2] stays NaN: undetermined */
    c->has_parallax = 1;
    c->px_C10_nm = -11.9;
    c->px_C12_nm = 2.9000000000000004;
    c->px_phi12_scan_deg = NAN;
    c->px_rotation_deg = -90;
    c->px_sigma[0] = 0.04;
    c->px_sigma[1] = NAN;
    c->px_sigma[2] = 1e-300;
    c->px_sigma[3] = 0.22143037896589657;
    c->px_residual_A = 0.0101;
    c->px_seconds = 0.113876607;
    c->has_region = 1;
    c->region[0] = 0;
    c->region[1] = 64;
    c->region[2] = 32;
    c->region[3] = 96;
    c->n_regions = 2;
    c->regions = calloc(2, sizeof *c->regions);
    c->regions[0] = (ssb4d_calfile_region){0, 32, 0, 48, -12.1, 2.9, 31.7, 0.1};
    c->regions[1] = (ssb4d_calfile_region){32, 64, 48, 96, -0.0, NAN, 1e-300, -0.0};
    c->has_refine = 1;
    c->refine_slices = 7;
    snprintf(c->refine_loss, sizeof c->refine_loss, "amplitude");
    c->refine_nll = 1.0000000000000002;
    c->refine_nll_expected = NAN;
    c->refine_iterations = 30;
    c->refine_phi12_probe_deg = -0.0;
    c->refine_tilt_probe_mrad[0] = 4.9406564584124654e-324;
    c->refine_tilt_probe_mrad[1] = -1.25;
    c->refine_confident = 0;
    snprintf(c->refine_warning, sizeof c->refine_warning, "the likelihood is 3x counting noise's: \"model misfit\"");
    c->refine_region[0] = 8, c->refine_region[1] = 40, c->refine_region[2] = 16, c->refine_region[3] = 48;
    c->refine_tilt_refined = 0; /* one slice: the start's tilt */
    c->refine_thickness_refined = 1;
}

static void round_trip_everything(void **state)
{
    (void)state;
    ssb4d_calfile c;
    fill_everything(&c);
    round_trip(&c, "all.json");
    /* the seed above 2^53 is a string; 2^53 itself is still a number */
    char *text = ssb_calfile_to_json(&c);
    assert_non_null(strstr(text, "\"18446744073709551615\""));
    assert_non_null(strstr(text, "\"locked\":\t[\"C12_nm\"]"));
    free(text);
    c.seed = 9007199254740992ull;
    text = ssb_calfile_to_json(&c);
    assert_non_null(strstr(text, "9007199254740992"));
    assert_null(strstr(text, "\"9007199254740992\""));
    free(text);
    round_trip(&c, "seed53.json");
    c.seed = 9007199254740993ull; /* 2^53 + 1: not a double */
    round_trip(&c, "seed53p1.json");
    c.seed = 0;
    c.branch_flipped = 0;
    round_trip(&c, "seed0.json");
    /* the fit section with no parallax, a confident fit, and a given rotation's source */
    c.has_parallax = 0;
    c.confident = 1;
    c.warning[0] = 0;
    snprintf(c.rotation_method, sizeof c.rotation_method, "%s", SSB4D_CALFILE_ROT_GIVEN);
    snprintf(c.rotation_from, sizeof c.rotation_from, "--rotation");
    c.rotation_sigma_deg = NAN;
    text = ssb_calfile_to_json(&c);
    assert_non_null(strstr(text, "\"parallax\":\tnull"));
    assert_non_null(strstr(text, "\"warning\":\tnull"));
    assert_non_null(strstr(text, "\"confident\":\ttrue"));
    free(text);
    round_trip(&c, "fit_noparallax.json");
    ssb_calfile_free(&c);
    ssb_calfile_free(&c); /* idempotent */
}

static void round_trip_empty(void **state)
{
    (void)state;
    ssb4d_calfile c;
    ssb_calfile_init(&c);
    round_trip(&c, "empty.json");
    char *text = ssb_calfile_to_json(&c);
    const char *absent[] = {"\"thick\"", "\"branch\"", "\"search\"", "\"region\"", "\"regions\"",
                            "\"aberrations\"", "\"fit\"", "\"rotation_source\""};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        if (strstr(text, absent[i]))
            fail_msg("an empty calfile writes %s:\n%s", absent[i], text);
    assert_non_null(strstr(text, "\"n_bf\":\tnull"));
    free(text);
    /* a minimal hand-written file */
    write_text(tpath("min.json"), "{\"schema\":\"ssb4d.calibration\",\"version\":1}");
    ssb4d_err err = {0};
    assert_int_equal(ssb_calfile_read(tpath("min.json"), &c, &err), SSB4D_OK);
    assert_true(isnan(c.geom.kv) && isnan(c.thick.thickness_nm) && isnan(c.skewness));
    assert_int_equal(c.has_thick + c.has_search + c.has_region + (int)c.n_regions + (int)c.n_bf, 0);
    ssb_calfile_free(&c);
    /* sections with nulls and empty lists */
    write_text(tpath("nulls.json"),
               "{\"schema\":\"ssb4d.calibration\",\"version\":1,\"branch\":{\"flipped\":null},"
               "\"search\":{\"seed\":null,\"ranges\":null,\"locked\":[],\"best_trials\":[]},"
               "\"region\":null,\"regions\":[],\"thick\":null,\"detector\":{\"n_bf\":null}}");
    assert_int_equal(ssb_calfile_read(tpath("nulls.json"), &c, &err), SSB4D_OK);
    assert_int_equal(c.has_search, 1);
    assert_int_equal(c.n_best, 0);
    assert_int_equal(c.branch_flipped, 0);
    assert_int_equal(c.has_region + c.has_thick, 0);
    ssb_calfile_free(&c);
}

/* Reads `body` (inside a valid schema/version object unless raw) and expects a refusal whose
 * message contains needle. */
static void refuses(const char *body, int raw, const char *needle)
{
    char text[4096];
    if (raw)
        snprintf(text, sizeof text, "%s", body);
    else
        snprintf(text, sizeof text, "{\"schema\":\"ssb4d.calibration\",\"version\":1,%s}", body);
    write_text(tpath("bad.json"), text);
    ssb4d_calfile c;
    ssb4d_err err = {0};
    ssb4d_status st = ssb_calfile_read(tpath("bad.json"), &c, &err);
    if (st != SSB4D_EFORMAT)
        fail_msg("accepted (status %d): %s", (int)st, text);
    if (!strstr(err.msg, needle))
        fail_msg("message \"%s\" lacks \"%s\" for %s", err.msg, needle, text);
    assert_null(strchr(err.msg, '\n'));
    assert_null(c.best);
    assert_null(c.regions);
    assert_null(c.flagged);
    ssb_calfile_free(&c);
}

static void refusals(void **state)
{
    (void)state;
    /* whole-file problems */
    refuses("{\"schema\":\"ssb4d.calibration\",\"version\":1", 1, "not valid JSON");
    refuses("{\"schema\":\"ssb4d.calibration\",\"version\":1} x", 1, "not valid JSON");
    refuses("[1, 2]", 1, "not an object");
    refuses("{\"version\":1}", 1, "no \"schema\"");
    refuses("{\"schema\":\"ssb4d.benchmark\",\"version\":1}", 1, "schema \"ssb4d.benchmark\"");
    refuses("{\"schema\":\"ssb4d.calibration\",\"version\":99}", 1, "newer ssb4d");
    refuses("{\"schema\":\"ssb4d.calibration\",\"version\":1.5}", 1, "\"version\"");
    refuses("{\"schema\":\"ssb4d.calibration\",\"version\":\"1\"}", 1, "\"version\"");
    refuses("{\"schema\":\"ssb4d.calibration\",\"version\":1,\"loss\":NaN}", 1, "not valid JSON");
    /* existing sections */
    refuses("\"aberrations\":{\"C10_nm\":\"abc\"}", 0, "\"aberrations.C10_nm\" must be a number");
    refuses("\"aberrations\":{\"C12_nm\":1e999}", 0, "\"aberrations.C12_nm\"");
    refuses("\"aberrations\":{\"C30_nm\":2e9}", 0, "out of range");
    refuses("\"rotation_deg\":true", 0, "\"rotation_deg\" must be a number");
    refuses("\"microscope\":{\"kv\":-300}", 0, "\"microscope.kv\"");
    refuses("\"detector\":[]", 0, "\"detector\" must be an object");
    /* n_bf */
    refuses("\"detector\":{\"n_bf\":-1}", 0, "\"detector.n_bf\" must be an integer");
    refuses("\"detector\":{\"n_bf\":1.5}", 0, "\"detector.n_bf\"");
    refuses("\"detector\":{\"edge_model\":\"7x7 sub-samples\"}", 0, "\"detector.edge_model\" must be");
    refuses("\"detector\":{\"edge_model\":3}", 0, "\"detector.edge_model\" must be a string");
    refuses("\"detector\":{\"edge_model\":\"area-integrated\",\"edge_model_source\":\"guessed\"}", 0,
            "\"detector.edge_model_source\" must be");
    refuses("\"detector\":{\"shape\":[4,4],\"n_bf\":17}", 0, "\"detector.n_bf\" must be an integer in 0 .. 16");
    /* thick */
    refuses("\"thick\":{\"tilt_mrad\":[1,2]}", 0, "\"thick.thickness_nm\" is missing");
    refuses("\"thick\":{\"thickness_nm\":10}", 0, "\"thick.tilt_mrad\" is missing");
    refuses("\"thick\":{\"tilt_mrad\":[1,null],\"thickness_nm\":10}", 0, "\"thick.tilt_mrad\" is missing");
    refuses("\"thick\":{\"tilt_mrad\":[1,2],\"thickness_nm\":-1}", 0, "\"thick.thickness_nm\" = -1 is out of range");
    refuses("\"thick\":{\"tilt_mrad\":[1,2000],\"thickness_nm\":1}", 0, "\"thick.tilt_mrad\" [1] = 2000");
    refuses("\"thick\":{\"tilt_mrad\":\"1,2\",\"thickness_nm\":1}", 0, "\"thick.tilt_mrad\" must be an array");
    refuses("\"thick\":{\"tilt_mrad\":[1,2],\"thickness_nm\":1,\"gain\":\"x\"}", 0, "\"thick.gain\"");
    refuses("\"thick\":5", 0, "\"thick\" must be an object");
    /* refine */
    refuses("\"refine\":[]", 0, "\"refine\" must be an object");
    refuses("\"refine\":{\"slices\":-1}", 0, "\"refine.slices\" must be an integer");
    refuses("\"refine\":{\"loss\":\"l2\"}", 0, "\"refine.loss\" must be \"poisson\" or \"amplitude\"");
    refuses("\"refine\":{\"confident\":1}", 0, "\"refine.confident\" must be true or false");
    refuses("\"refine\":{\"tilt_probe_mrad\":[1]}", 0, "\"refine.tilt_probe_mrad\" must be an array");
    refuses("\"refine\":{\"region\":[4,2,0,1]}", 0, "\"refine.region\" must be [r0, r1, c0, c1]");
    refuses("\"scan\":{\"shape\":[8,8]},\"refine\":{\"region\":[0,16,0,8]}", 0, "outside the 8x8 scan");
    /* branch */
    refuses("\"branch\":{\"flipped\":1}", 0, "\"branch.flipped\" must be true or false");
    refuses("\"branch\":{\"skewness\":\"big\"}", 0, "\"branch.skewness\" must be a number");
    refuses("\"branch\":{\"skewness_other\":[]}", 0, "\"branch.skewness_other\"");
    /* search */
    refuses("\"search\":[]", 0, "\"search\" must be an object");
    refuses("\"search\":{\"trials\":-5}", 0, "\"search.trials\" must be an integer");
    refuses("\"search\":{\"evaluations\":\"many\"}", 0, "\"search.evaluations\"");
    refuses("\"search\":{\"seed\":-1}", 0, "\"search.seed\"");
    refuses("\"search\":{\"seed\":1.5}", 0, "\"search.seed\"");
    refuses("\"search\":{\"seed\":1e17}", 0, "\"search.seed\""); /* above 2^53: not exact */
    refuses("\"search\":{\"seed\":\"12a\"}", 0, "\"search.seed\"");
    refuses("\"search\":{\"seed\":\"-3\"}", 0, "\"search.seed\"");
    refuses("\"search\":{\"seed\":\"\"}", 0, "\"search.seed\"");
    refuses("\"search\":{\"seed\":\"18446744073709551616\"}", 0, "larger than 2^64 - 1");
    refuses("\"search\":{\"seed\":true}", 0, "\"search.seed\"");
    refuses("\"search\":{\"ranges\":{\"C10_nm\":[40,-40]}}", 0, "\"search.ranges.C10_nm\" must be [lo, hi]");
    refuses("\"search\":{\"ranges\":{\"phi12_deg\":[0,1e5]}}", 0, "\"search.ranges.phi12_deg\" [1]");
    refuses("\"search\":{\"ranges\":{\"C12_nm\":5}}", 0, "\"search.ranges.C12_nm\"");
    refuses("\"search\":{\"ranges\":[]}", 0, "\"search.ranges\" must be an object");
    refuses("\"search\":{\"locked\":[\"C10_nm\",\"C30_nm\"]}", 0, "\"search.locked[1]\" must be one of");
    refuses("\"search\":{\"locked\":[0]}", 0, "\"search.locked[0]\"");
    refuses("\"search\":{\"locked\":\"C10_nm\"}", 0, "\"search.locked\" must be an array");
    refuses("\"search\":{\"best_trials\":{}}", 0, "\"search.best_trials\" must be an array");
    refuses("\"search\":{\"best_trials\":[{},5]}", 0, "\"search.best_trials[1]\" must be an object");
    refuses("\"search\":{\"best_trials\":[{\"stage\":-1}]}", 0, "\"search.best_trials[0].stage\"");
    refuses("\"search\":{\"best_trials\":[{\"number\":0.5}]}", 0, "\"search.best_trials[0].number\"");
    refuses("\"search\":{\"best_trials\":[{},{\"C10_nm\":\"abc\"}]}", 0,
            "\"search.best_trials[1].C10_nm\" must be a number");
    refuses("\"search\":{\"best_trials\":[{\"phi12_deg\":1e6}]}", 0, "\"search.best_trials[0].phi12_deg\"");
    refuses("\"search\":{\"best_trials\":[{\"loss\":[1]}]}", 0, "\"search.best_trials[0].loss\"");
    /* rotation source and fit section */
    refuses("\"rotation_source\":\"given\"", 0, "\"rotation_source\" must be an object");
    refuses("\"rotation_source\":{\"from\":\"sidecar\"}", 0, "\"rotation_source.method\" is missing");
    refuses("\"rotation_source\":{\"method\":1}", 0, "\"rotation_source.method\" must be a string");
    refuses("\"rotation_source\":{\"method\":\"given\",\"sigma_deg\":-1}", 0, "\"rotation_source.sigma_deg\"");
    refuses("\"rotation_source\":{\"method\":\"a method name longer than its field\"}", 0, "is too long");
    refuses("\"fit\":[]", 0, "\"fit\" must be an object");
    refuses("\"fit\":{\"confident\":1}", 0, "\"fit.confident\" must be true or false");
    refuses("\"fit\":{\"warning\":5}", 0, "\"fit.warning\" must be a string");
    refuses("\"fit\":{\"objective\":\"bandwidth\"}", 0, "\"fit.objective\" is too long");
    refuses("\"fit\":{\"phi12_probe_deg\":\"x\"}", 0, "\"fit.phi12_probe_deg\" must be a number");
    refuses("\"fit\":{\"loss_n_bf\":-2}", 0, "\"fit.loss_n_bf\"");
    refuses("\"fit\":{\"parallax\":3}", 0, "\"fit.parallax\" must be an object");
    refuses("\"fit\":{\"parallax\":{\"C10_nm\":\"x\"}}", 0, "\"fit.parallax.C10_nm\" must be a number");
    refuses("\"fit\":{\"parallax\":{\"sigma\":[1,2]}}", 0, "\"fit.parallax.sigma\" must be an object");
    refuses("\"fit\":{\"parallax\":{\"sigma\":{\"rotation_deg\":-1}}}", 0, "\"fit.parallax.sigma.rotation_deg\"");
    refuses("\"search\":{\"phi12_frame\":7}", 0, "\"search.phi12_frame\" must be a string");
    /* region(s) */
    refuses("\"region\":[0,32,0]", 0, "\"region\" must be [r0, r1, c0, c1]");
    refuses("\"region\":[5,5,0,32]", 0, "\"region\" must be [r0, r1, c0, c1]");
    refuses("\"region\":[0,32,40,8]", 0, "\"region\"");
    refuses("\"region\":[0,32,0.5,8]", 0, "\"region\"");
    refuses("\"region\":[-1,32,0,8]", 0, "\"region\"");
    refuses("\"region\":\"all\"", 0, "\"region\"");
    refuses("\"scan\":{\"shape\":[32,32]},\"region\":[0,33,0,32]", 0,
            "\"region\" = [0, 33, 0, 32] is outside the 32x32 scan");
    refuses("\"regions\":{}", 0, "\"regions\" must be an array");
    refuses("\"regions\":[3]", 0, "\"regions[0]\" must be an object");
    refuses("\"regions\":[{\"C10_nm\":1}]", 0, "\"regions[0].rect\" is missing");
    refuses("\"regions\":[{\"rect\":[0,32,0,32]},{\"rect\":[0,32,0,0]}]", 0, "\"regions[1].rect\"");
    refuses("\"regions\":[{\"rect\":[0,32,0,32],\"C12_nm\":\"x\"}]", 0, "\"regions[0].C12_nm\"");
    refuses("\"scan\":{\"shape\":[32,32]},\"regions\":[{\"rect\":[0,32,0,64]}]", 0,
            "outside the 32x32 scan");
}

static void missing_file(void **state)
{
    (void)state;
    ssb4d_calfile c;
    ssb4d_err err = {0};
    assert_int_equal(ssb_calfile_read(tpath("nope.json"), &c, &err), SSB4D_EIO);
    ssb_calfile_free(&c);
}

static void identities(void **state)
{
    (void)state;
    assert_int_equal(ssb_calfile_identity_differs("sha256:ab", "sha256:ab"), 0);
    assert_int_equal(ssb_calfile_identity_differs("sha256:ab", "sha256:ac"), 1);
    assert_int_equal(ssb_calfile_identity_differs("sha256:ab", "qem-body-sha256:ab"), 1);
    assert_int_equal(ssb_calfile_identity_differs("", "sha256:ac"), 0);
    assert_int_equal(ssb_calfile_identity_differs("sha256:ab", ""), 0);
    assert_int_equal(ssb_calfile_identity_differs(NULL, "sha256:ab"), 0);
    assert_int_equal(ssb_calfile_identity_differs("sha256:ab", NULL), 0);
}

/* From a measured calibration: geometry, radii, shapes, n_bf and the flagged list. */
static void from_calibration(void **state)
{
    (void)state;
    ssb4d_calibration cal;
    memset(&cal, 0, sizeof cal);
    cal.geom = (ssb4d_geometry){300, 25, {0.5, 0.5}, {1.25, 1.5}, {24, 23.5}, -9.5, 0};
    cal.selection_radius_px = 18;
    cal.disk_radius_px = 19.5;
    cal.det_shape[0] = cal.det_shape[1] = 48;
    cal.scan_shape[0] = cal.scan_shape[1] = 32;
    cal.n_bf = 1001;
    int32_t fl[2] = {5, 77};
    cal.flagged = fl;
    cal.n_flagged = 2;
    /* stated sampling, centre measured; the measurement recorded beside the value used */
    cal.det_sampling_measured_mrad = 1.2634;
    cal.det_sampling_measured_sigma_mrad = 0.0012;
    cal.centre_fitted = 1;
    cal.disk_centre_px[0] = 24, cal.disk_centre_px[1] = 23.5;
    /* the edge fit's pixel model, stated (issue 39: the sidecar's det_oversample 3) */
    cal.edge_model = 1;
    cal.edge_model_stated = 1;
    ssb4d_calfile c;
    ssb4d_err err = {0};
    assert_int_equal(ssb_calfile_from_calibration(&c, &cal, &err), SSB4D_OK);
    assert_int_equal(c.edge_model, 1);
    assert_string_equal(c.edge_model_source, "stated");
    assert_int_equal(ssb_calfile_edge_pixel_S(&c), 3); /* read back, it is stated: S = 3 */
    assert_string_equal(c.sampling_method, "stated");
    assert_true(c.sampling_measured_mrad == 1.2634 && c.sampling_sigma_mrad == 0.0012);
    assert_string_equal(c.centre_method, "measured");
    assert_int_equal(c.n_bf, 1001);
    assert_int_equal(c.n_flagged, 2);
    assert_int_equal(c.flagged[1], 77);
    assert_int_equal(c.has_ab + c.has_thick + c.has_search, 0);
    round_trip(&c, "fromcal.json");
    /* the JSON holds it by name; a model the residual chose is "measured", and read back stated
     * all the same (the area-integrated one as S = 6) */
    ssb4d_calfile d;
    assert_int_equal(ssb_calfile_read(tpath("fromcal.json"), &d, &err), SSB4D_OK);
    assert_int_equal(d.edge_model, 1);
    ssb_calfile_free(&d);
    ssb_calfile_free(&c);
    cal.edge_model = 3;
    cal.edge_model_stated = 0;
    assert_int_equal(ssb_calfile_from_calibration(&c, &cal, &err), SSB4D_OK);
    assert_string_equal(c.edge_model_source, "measured");
    round_trip(&c, "fromcal2.json");
    assert_int_equal(ssb_calfile_edge_pixel_S(&c), 6);
    ssb_calfile_free(&c);
    /* no edge fit (the half-median radius): nothing recorded */
    cal.edge_model = -1;
    assert_int_equal(ssb_calfile_from_calibration(&c, &cal, &err), SSB4D_OK);
    assert_int_equal(c.edge_model, -1);
    assert_string_equal(c.edge_model_source, "");
    assert_int_equal(ssb_calfile_edge_pixel_S(&c), 0);
    round_trip(&c, "fromcal3.json");
    ssb_calfile_free(&c);
}

/* A file as ssb4d wrote it before issue 11 (the docs' example of then): the same schema version,
 * no rotation_source, no fit section, trials without a frame. It loads, with those unknown. */
static void old_file_loads(void **state)
{
    (void)state;
    write_text(tpath("old.json"),
               "{\"schema\": \"ssb4d.calibration\", \"version\": 1, \"software\": \"ssb4d 0.1.0\",\n"
               " \"data_identity\": \"sha256:1e5aaa9721b43ee5e8738019cb15a88c524c766b4ea97c5925dc8b6517d8bdf4\",\n"
               " \"microscope\": {\"kv\": 300, \"semiangle_mrad\": 25},\n"
               " \"scan\": {\"shape\": [64, 64], \"step_A\": [0.36609375, 0.36609375]},\n"
               " \"detector\": {\"shape\": [48, 48], \"sampling_mrad\": [1.278625735155724, 1.278625735155724],\n"
               "   \"centre_px\": [24, 24], \"disk_radius_px\": 19.5522421554852, \"selection_radius_px\": 19.5522421554852,\n"
               "   \"n_bf\": 1201, \"flagged_pixels\": [1175]},\n"
               " \"rotation_deg\": 8.977714682556062,\n"
               " \"branch\": {\"flipped\": false, \"skewness\": -0.412, \"skewness_other\": 0.388},\n"
               " \"aberrations\": {\"C10_nm\": -9.81, \"C12_nm\": 2.03, \"phi12_deg\": 19.7, \"C30_nm\": 1000},\n"
               " \"thick\": {\"tilt_mrad\": [1.5, -2], \"thickness_nm\": 5, \"gain\": 1.013},\n"
               " \"loss\": 0.0487261,\n"
               " \"search\": {\"trials\": 200, \"seed\": 42, \"ranges\": {\"C10_nm\": [-40, 40], \"C12_nm\": [0, 10],\n"
               "   \"phi12_deg\": [-90, 90]}, \"locked\": [\"phi12_deg\"], \"evaluations\": 331,\n"
               "   \"best_trials\": [{\"stage\": 1, \"number\": 330, \"C10_nm\": -9.81, \"C12_nm\": 2.03,\n"
               "     \"phi12_deg\": 19.7, \"loss\": 0.0487261}]},\n"
               " \"region\": [0, 64, 0, 64],\n"
               " \"regions\": [{\"rect\": [0, 32, 0, 32], \"C10_nm\": -9.7, \"C12_nm\": 2.0, \"phi12_deg\": 19.1,\n"
               "   \"loss\": 0.0502}]}\n");
    ssb4d_calfile c;
    ssb4d_err err = {0};
    if (ssb_calfile_read(tpath("old.json"), &c, &err) != SSB4D_OK)
        fail_msg("an issue-10 file does not load: %s", err.msg);
    assert_int_equal(c.version, 1);
    assert_true(c.geom.rotation_deg == 8.977714682556062);
    /* before issue 39: how the sampling and centre were obtained is not recorded */
    assert_string_equal(c.sampling_method, "");
    assert_true(isnan(c.sampling_measured_mrad) && isnan(c.sampling_sigma_mrad));
    assert_string_equal(c.centre_method, "");
    assert_int_equal(c.edge_model, -1); /* nor the edge's pixel model */
    assert_string_equal(c.edge_model_source, "");
    assert_true(c.ab.C_nm[SSB4D_C10] == -9.81 && c.ab.phi_deg[SSB4D_C12] == 19.7);
    assert_true(c.has_thick && c.has_search && c.has_region && c.n_regions == 1 && c.n_best == 1);
    assert_int_equal(c.has_fit, 0);
    assert_int_equal(c.has_parallax, 0);
    assert_int_equal(c.confident, -1);
    assert_string_equal(c.rotation_method, "");
    assert_string_equal(c.trials_phi12_frame, "");
    assert_true(isnan(c.rotation_sigma_deg) && isnan(c.phi12_probe_deg));
    /* written again by this ssb4d: still version 1, still no fit section of its own making */
    char *text = ssb_calfile_to_json(&c);
    assert_non_null(strstr(text, "\"version\":\t1,"));
    assert_null(strstr(text, "\"fit\""));
    free(text);
    ssb_calfile_free(&c);
}

/* ssb_calfile_set_fit: a fit result's geometry, aberrations, branch, rotation source and fit
 * section, φ12 in both frames. */
static void set_fit(void **state)
{
    (void)state;
    ssb4d_fit_result r;
    memset(&r, 0, sizeof r);
    r.geom = (ssb4d_geometry){300, 25, {0.5, 0.5}, {1.25, 1.25}, {24, 24}, 12.4, 0};
    r.ab.C_nm[SSB4D_C10] = -9.8;
    r.ab.C_nm[SSB4D_C12] = 2.0;
    r.ab.phi_deg[SSB4D_C12] = 47.42;
    r.phi12_probe_deg = 35.02;
    r.loss = 0.0466;
    r.branch_flipped = 1;
    r.skewness = 3.1;
    r.skewness_other = -3.1;
    snprintf(r.rotation_source, sizeof r.rotation_source, "parallax");
    r.rotation_sigma_deg = 0.3;
    r.confident = 1;
    r.loss_contrast = 0.3;
    r.C10_se_nm = 0.04, r.C12_se_nm = 0.01, r.phi12_se_deg = INFINITY, r.rotation_se_deg = NAN;
    r.n_fit_bf = 900;
    r.parallax_ok = 1;
    r.parallax.C10_nm = -9.9;
    r.parallax.C12_nm = 1.9;
    r.parallax.phi12_deg = 46;
    r.parallax.rotation_deg = 12.1;
    for (int i = 0; i < 4; i++)
        r.parallax.sigma[i] = 0.1 * (i + 1);
    r.parallax.residual_A = 0.01;
    r.parallax.seconds = 0.2;
    ssb4d_fit_params p;
    ssb4d_fit_params_default(&p);
    ssb4d_calfile c;
    ssb_calfile_init(&c);
    ssb_calfile_set_fit(&c, &r, &p, "ignored: not given", 1201);
    assert_true(c.geom.rotation_deg == 12.4 && c.has_ab && c.loss == 0.0466 && c.branch_flipped);
    assert_string_equal(c.rotation_method, SSB4D_CALFILE_ROT_FIT);
    assert_string_equal(c.rotation_from, "parallax");
    assert_true(c.phi12_scan_deg == 47.42 && c.phi12_probe_deg == 35.02);
    assert_true(c.has_fit && c.has_parallax && c.confident == 1 && c.loss_n_bf == 1201 && c.fit_n_bf == 900);
    assert_string_equal(c.objective, "band");
    assert_true(c.se[0] == 0.04 && c.se[1] == 0.01 && isnan(c.se[2]) && isnan(c.se[3]));
    round_trip(&c, "setfit.json");
    p.rotation_given = 1;
    p.objective = SSB4D_FIT_OBJ_LOSS;
    ssb_calfile_set_fit(&c, &r, &p, "--rotation", 1201);
    assert_string_equal(c.rotation_method, SSB4D_CALFILE_ROT_GIVEN);
    assert_string_equal(c.rotation_from, "--rotation");
    assert_true(isnan(c.rotation_sigma_deg));
    assert_string_equal(c.objective, "loss");
    round_trip(&c, "setfit_given.json");
    ssb_calfile_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_everything),
        cmocka_unit_test(round_trip_empty),
        cmocka_unit_test(refusals),
        cmocka_unit_test(missing_file),
        cmocka_unit_test(identities),
        cmocka_unit_test(from_calibration),
        cmocka_unit_test(old_file_loads),
        cmocka_unit_test(set_fit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
