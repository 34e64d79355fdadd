/* workspace.c — the standard fit's workspace query (common/workspace.h): standard.c's order of
 * the stages it calls, each answered by that stage's own query (parallax.c, band.c, loss.c,
 * object.c), for the planner to compose. The search's memory does not depend on the values it
 * visits, only on how many candidates a batch holds and how many distinct rotations they carry. */
#include "fit/fit.h"
#include "parallax/parallax.h"
#include "ssb/ssb_internal.h"

size_t fit_branch_phase_bytes(size_t ny, size_t nx) { return ny * nx * sizeof(float); }

/* A view of G within the fit's n_fit innermost pixels: its passes say so. */
typedef struct {
    ws_sink base;
    ws_sink *to;
    size_t within;
} view_sink;

static void view_event(ws_sink *self, ws_op op, size_t bytes)
{
    view_sink *v = (view_sink *)self;
    v->to->event(v->to, op, op == WS_PASS ? v->within : bytes);
}

static void loss_on(const fit_ws_shape *s, size_t n_view, size_t n, ws_sink *out)
{
    loss_ws w = loss_ws_sizes(s->ny, s->nx, n_view, n, s->threads, 1, 1, 0);
    loss_workspace(&w, out);
}

/* One batch of n candidates with nrot distinct rotations (fit.c thin_eval): the band objective in
 * one call; the exact loss in one call per candidate when the rotation is searched. */
static void batch(const fit_ws_shape *s, size_t n_view, size_t n, size_t nrot, ws_sink *out)
{
    if (s->band) {
        band_ws w = band_ws_sizes(s->band_nb, s->band_nr, s->band_nc, n_view, n, s->fit_rotation ? nrot : 1, s->threads);
        band_fit_workspace(&w, out);
    } else if (s->fit_rotation)
        for (size_t i = 0; i < n; i++)
            loss_on(s, n_view, 1, out);
    else
        loss_on(s, n_view, n, out);
}

static void band_power(const fit_ws_shape *s, size_t n_view, ws_sink *out)
{
    band_ws w = band_ws_sizes(s->band_nb, s->band_nr, s->band_nc, n_view, 0, 0, s->threads);
    band_power_workspace(&w, out);
}

/* Nelder–Mead (search.c): the start (n_start = 0 when it is the global search's best, answered by
 * the cache), the initial simplex as one batch (the rotation's step gives it a second rotation),
 * then single points. A shrink evaluates d vertices as one batch with up to d rotations: counted
 * once, so that the query bounds what a shrink needs. */
static void nelder_mead(const fit_ws_shape *s, size_t n_view, int n_start, ws_sink *out)
{
    if (n_start)
        batch(s, n_view, 1, 1, out);
    if (s->d <= 0)
        return;
    size_t d = (size_t)s->d;
    batch(s, n_view, d, s->fit_rotation && d > 1 ? 2 : 1, out);
    if (d > 1)
        batch(s, n_view, d, s->fit_rotation ? d : 1, out);
    batch(s, n_view, 1, 1, out);
}

void fit_workspace(const fit_ws_shape *s, ws_sink *out)
{
    size_t coarse = s->n_coarse < s->n_fit ? s->n_coarse : s->n_fit;
    view_sink fit_view = {{view_event}, out, s->n_fit};
    ws_sink *fv = &fit_view.base;
    if (s->parallax_runs)
        parallax_workspace(s->n_bf, s->parallax_nb, out);
    if (s->band)
        band_power(s, coarse, fv);
    size_t b = s->batch ? s->batch : 1;
    for (size_t i = 0; i < s->n_seeds; i += b) {
        size_t nb = s->n_seeds - i < b ? s->n_seeds - i : b;
        batch(s, coarse, nb, nb, fv);
    }
    for (size_t i = 0; i < s->trials / b; i++)
        batch(s, coarse, b, b, fv);
    if (s->trials % b)
        batch(s, coarse, s->trials % b, s->trials % b, fv);
    nelder_mead(s, coarse, s->trials == 0, fv);
    if (coarse < s->n_fit) {
        if (s->band)
            band_power(s, s->n_fit, fv);
        nelder_mead(s, s->n_fit, 1, fv);
    }
    /* the standard errors (uncertainty.c): per group of the fit pixels its band power and one
     * batch of the design's points, whose rotations are the fit's and ± its step */
    if (s->se_d > 0 && s->n_fit >= 8 * FIT_SE_GROUPS) {
        size_t npts = fit_se_points(s->se_d);
        for (size_t k = 0; k < FIT_SE_GROUPS; k++) {
            size_t n_k = fit_se_group_bf(s->n_fit, k);
            if (s->band)
                band_power(s, n_k, fv);
            batch(s, n_k, npts, s->fit_rotation ? 3 : 1, fv);
        }
    }
    if (s->branch_check) {
        size_t ph = fit_branch_phase_bytes(s->ny, s->nx);
        object_ws w = object_ws_sizes(s->ny, s->nx, s->n_bf, s->threads, 1, 1);
        ws_alloc(out, ph);
        object_workspace(&w, out);
        ws_free(out, ph, 0);
    }
    loss_on(s, s->n_bf, 1, out);
}
