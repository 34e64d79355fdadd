/* test_fit_search.c — the fit's optimisers (src/fit/search.c) on objectives with known minima:
 * Nelder–Mead convergence and its stopping rule, the periodic φ12 axis, locked parameters, the
 * box, the float32-keyed evaluation cache, batching, the global search finding the right basin of
 * a multimodal objective, and a trace that depends only on the seed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "fit/search.h"
#include "ref_ssb.h"

/* A bowl in (C10, C12, φ12) with φ12 of period 180°, plus optional ripples (local minima). */
typedef struct {
    double c10, c12, phi;
    double ripple;           /* amplitude of cos ripples in C10 (0 = a single basin) */
    size_t calls, points;    /* batches and points evaluated */
    size_t max_batch;
} bowl;

static double bowl_f(const bowl *b, const double *x)
{
    double dc10 = x[0] - b->c10, dc12 = x[1] - b->c12, dphi = ref_dmod180(x[2], b->phi);
    double f = 0.01 * dc10 * dc10 + 0.3 * dc12 * dc12 + 1e-3 * dphi * dphi;
    if (b->ripple > 0)
        f += b->ripple * (1.0 - cos(2.0 * M_PI * dc10 / 16.0));
    return f;
}

static ssb4d_status bowl_eval(void *user, const double *x, size_t n, double *loss, ssb4d_err *err)
{
    (void)err;
    bowl *b = user;
    b->calls++;
    b->points += n;
    if (n > b->max_batch)
        b->max_batch = n;
    for (size_t i = 0; i < n; i++)
        loss[i] = bowl_f(b, x + 3 * i);
    return SSB4D_OK;
}

static fit_problem problem(bowl *b)
{
    fit_problem p;
    memset(&p, 0, sizeof p);
    p.n_params = 3;
    p.lo[0] = -40, p.hi[0] = 40;
    p.lo[1] = 0, p.hi[1] = 10;
    p.lo[2] = -90, p.hi[2] = 90, p.period[2] = 180;
    p.start[0] = 0, p.start[1] = 5, p.start[2] = 0;
    p.eval = bowl_eval;
    p.user = b;
    return p;
}

static void test_nelder_mead_converges(void **st)
{
    (void)st;
    bowl b = {.c10 = -12.3, .c12 = 3.4, .phi = 27.0};
    fit_problem p = problem(&b);
    fit_state *s = fit_state_new(&p);
    assert_non_null(s);
    fit_nm_opts o;
    fit_nm_opts_default(&o);
    o.max_iter = 400;
    o.xtol = 1e-3;
    o.ftol = 1e-9;
    double x0[3] = {0, 5, 0};
    int it = 0;
    ssb4d_err err = {0};
    assert_int_equal(fit_nelder_mead(s, 1, x0, &o, &it, &err), SSB4D_OK);
    const fit_trial *best = fit_best(s);
    assert_non_null(best);
    assert_true(fabs(best->x[0] - b.c10) < 0.05);
    assert_true(fabs(best->x[1] - b.c12) < 0.01);
    assert_true(fabs(ref_dmod180(best->x[2], b.phi)) < 0.5);
    assert_true(it > 5 && it < 400); /* stopped by the tolerances, not the cap */
    fit_state_free(s);
}

static void test_iteration_cap(void **st)
{
    (void)st;
    bowl b = {.c10 = -30, .c12 = 8, .phi = -60};
    fit_problem p = problem(&b);
    fit_state *s = fit_state_new(&p);
    fit_nm_opts o;
    fit_nm_opts_default(&o);
    o.max_iter = 3;
    double x0[3] = {0, 5, 0};
    int it = 0;
    assert_int_equal(fit_nelder_mead(s, 1, x0, &o, &it, NULL), SSB4D_OK);
    assert_int_equal(it, 3);
    fit_state_free(s);
}

/* The minimum at φ12 = 88° is reached from −88° across the wrap, not by crossing 0. */
static void test_periodic_phi(void **st)
{
    (void)st;
    bowl b = {.c10 = 0, .c12 = 5, .phi = 88.0};
    fit_problem p = problem(&b);
    p.start[2] = -88;
    fit_state *s = fit_state_new(&p);
    fit_nm_opts o;
    fit_nm_opts_default(&o);
    o.max_iter = 200;
    double x0[3] = {0, 5, -88};
    assert_int_equal(fit_nelder_mead(s, 1, x0, &o, NULL, NULL), SSB4D_OK);
    const fit_trial *best = fit_best(s);
    assert_true(fabs(ref_dmod180(best->x[2], 88.0)) < 0.5);
    size_t n;
    const fit_trial *t = fit_trials(s, &n);
    for (size_t i = 0; i < n; i++) {
        assert_true(t[i].x[2] >= -90 && t[i].x[2] <= 90);
        assert_true(fabs(t[i].x[2]) > 60); /* never wandered through 0 */
    }
    fit_state_free(s);
}

/* Locked C12 stays at its start value in every trial; the box clamps C12 >= 0. */
static void test_locked_and_box(void **st)
{
    (void)st;
    bowl b = {.c10 = 7, .c12 = -3 /* outside the box */, .phi = 10};
    fit_problem p = problem(&b);
    fit_state *s = fit_state_new(&p);
    fit_nm_opts o;
    fit_nm_opts_default(&o);
    o.max_iter = 200;
    double x0[3] = {0, 5, 0};
    assert_int_equal(fit_nelder_mead(s, 1, x0, &o, NULL, NULL), SSB4D_OK);
    assert_true(fabs(fit_best(s)->x[1]) < 0.02); /* pinned at the lower bound */
    size_t n;
    const fit_trial *t = fit_trials(s, &n);
    for (size_t i = 0; i < n; i++)
        assert_true(t[i].x[1] >= 0 && t[i].x[1] <= 10);
    fit_state_free(s);

    p.locked[1] = 1;
    p.start[1] = 2.5;
    s = fit_state_new(&p);
    double x1[3] = {0, 9, 0}; /* a locked value is forced to start[] */
    assert_int_equal(fit_global(s, 0, 40, 8, 42, NULL), SSB4D_OK);
    assert_int_equal(fit_nelder_mead(s, 1, x1, &o, NULL, NULL), SSB4D_OK);
    t = fit_trials(s, &n);
    for (size_t i = 0; i < n; i++)
        assert_true(t[i].x[1] == (double)(float)2.5);
    fit_state_free(s);
}

/* A point evaluated twice (same float32 values) is computed once; duplicates in one batch too. */
static void test_cache(void **st)
{
    (void)st;
    bowl b = {.c10 = 1, .c12 = 1, .phi = 1};
    fit_problem p = problem(&b);
    fit_state *s = fit_state_new(&p);
    double x[4 * 3] = {1, 2, 3, 1, 2, 3, 1 + 1e-9, 2, 3, 4, 5, 6};
    double loss[4];
    assert_int_equal(fit_eval_batch(s, 0, x, 4, loss, NULL), SSB4D_OK);
    assert_int_equal(fit_evaluations(s), 2);   /* 1e-9 is below float32 resolution */
    assert_int_equal(b.calls, 1);
    assert_true(loss[0] == loss[1] && loss[1] == loss[2]);
    assert_int_equal(fit_eval_batch(s, 0, x, 4, loss, NULL), SSB4D_OK);
    assert_int_equal(fit_evaluations(s), 2);
    assert_int_equal(b.calls, 1);
    size_t n;
    const fit_trial *t = fit_trials(s, &n);
    assert_int_equal(n, 8);
    assert_false(t[0].cached);
    assert_true(t[1].cached && t[2].cached && t[4].cached);
    /* The cache survives growth past its first table. */
    double y[3];
    for (int i = 0; i < 3000; i++) {
        y[0] = -40 + 0.02 * i, y[1] = 5, y[2] = 0;
        assert_int_equal(fit_eval_batch(s, 0, y, 1, NULL, NULL), SSB4D_OK);
    }
    size_t before = fit_evaluations(s);
    y[0] = -40 + 0.02 * 1234;
    assert_int_equal(fit_eval_batch(s, 0, y, 1, NULL, NULL), SSB4D_OK);
    assert_int_equal(fit_evaluations(s), before);
    fit_state_free(s);
}

/* Global search + Nelder–Mead finds the global basin of a rippled objective that Nelder–Mead
 * alone, started at (0, 5, 0), misses. Batches are of the size asked. */
static void test_global_then_refine(void **st)
{
    (void)st;
    bowl b = {.c10 = -22.0, .c12 = 6.1, .phi = -41.0, .ripple = 1.0};
    fit_problem p = problem(&b);
    fit_nm_opts o;
    fit_nm_opts_default(&o);

    fit_state *alone = fit_state_new(&p);
    double x0[3] = {0, 5, 0};
    assert_int_equal(fit_nelder_mead(alone, 1, x0, &o, NULL, NULL), SSB4D_OK);
    assert_true(fabs(fit_best(alone)->x[0] - b.c10) > 2.0); /* stuck in a local basin */
    fit_state_free(alone);

    b.max_batch = 0;
    fit_state *s = fit_state_new(&p);
    assert_int_equal(fit_global(s, 0, 200, 25, 42, NULL), SSB4D_OK);
    assert_int_equal(b.max_batch, 25);
    double start[3];
    memcpy(start, fit_best(s)->x, sizeof start);
    assert_int_equal(fit_nelder_mead(s, 1, start, &o, NULL, NULL), SSB4D_OK);
    const fit_trial *best = fit_best(s);
    assert_true(fabs(best->x[0] - b.c10) < 0.2);
    assert_true(fabs(best->x[1] - b.c12) < 0.2);
    assert_true(fabs(ref_dmod180(best->x[2], b.phi)) < 3.0);
    fit_state_free(s);
}

/* Same seed ⇒ same trace (hash); another seed ⇒ another trace; batch size does not matter. */
static void test_determinism(void **st)
{
    (void)st;
    char h[4][65];
    const uint64_t seeds[4] = {42, 42, 43, 42};
    const size_t batches[4] = {10, 10, 10, 7};
    for (int r = 0; r < 4; r++) {
        bowl b = {.c10 = 5, .c12 = 2, .phi = 70, .ripple = 0.2};
        fit_problem p = problem(&b);
        fit_state *s = fit_state_new(&p);
        assert_int_equal(fit_global(s, 0, 60, batches[r], seeds[r], NULL), SSB4D_OK);
        fit_nm_opts o;
        fit_nm_opts_default(&o);
        double x[3];
        memcpy(x, fit_best(s)->x, sizeof x);
        assert_int_equal(fit_nelder_mead(s, 1, x, &o, NULL, NULL), SSB4D_OK);
        fit_trace_sha256(s, h[r]);
        fit_state_free(s);
    }
    assert_string_equal(h[0], h[1]);
    assert_string_not_equal(h[0], h[2]);
    assert_string_equal(h[0], h[3]);
}

/* Quasi-random candidates cover the box: every tenth of each free axis gets a candidate. */
static void test_global_coverage(void **st)
{
    (void)st;
    bowl b = {0};
    fit_problem p = problem(&b);
    fit_state *s = fit_state_new(&p);
    assert_int_equal(fit_global(s, 0, 100, 16, 7, NULL), SSB4D_OK);
    size_t n;
    const fit_trial *t = fit_trials(s, &n);
    assert_int_equal(n, 100);
    assert_true(t[0].x[0] == 0 && t[0].x[1] == 5 && t[0].x[2] == 0); /* the start point first */
    for (int j = 0; j < 3; j++) {
        int hit[10] = {0};
        for (size_t i = 1; i < n; i++) {
            double u = (t[i].x[j] - p.lo[j]) / (p.hi[j] - p.lo[j]);
            assert_true(u >= 0 && u <= 1);
            hit[u >= 1 ? 9 : (int)(u * 10)]++;
        }
        for (int k = 0; k < 10; k++)
            assert_true(hit[k] >= 5);
    }
    fit_state_free(s);
}

static ssb4d_status failing_eval(void *user, const double *x, size_t n, double *loss, ssb4d_err *err)
{
    (void)user, (void)x, (void)n, (void)loss;
    return ssb_fail(err, SSB4D_ENOMEM, "objective failed");
}

/* An error from the objective stops the search and comes back unchanged. */
static void test_objective_error(void **st)
{
    (void)st;
    bowl b = {0};
    fit_problem p = problem(&b);
    p.eval = failing_eval;
    fit_state *s = fit_state_new(&p);
    ssb4d_err err = {0};
    assert_int_equal(fit_global(s, 0, 50, 10, 1, &err), SSB4D_ENOMEM);
    assert_string_equal(err.msg, "objective failed");
    size_t n;
    fit_trials(s, &n);
    assert_int_equal(n, 0);
    double x0[3] = {0, 5, 0};
    fit_nm_opts o;
    fit_nm_opts_default(&o);
    assert_int_equal(fit_nelder_mead(s, 1, x0, &o, NULL, &err), SSB4D_ENOMEM);
    fit_state_free(s);
    assert_null(fit_state_new(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nelder_mead_converges), cmocka_unit_test(test_iteration_cap),
        cmocka_unit_test(test_periodic_phi),          cmocka_unit_test(test_locked_and_box),
        cmocka_unit_test(test_cache),                 cmocka_unit_test(test_global_then_refine),
        cmocka_unit_test(test_determinism),           cmocka_unit_test(test_global_coverage),
        cmocka_unit_test(test_objective_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
