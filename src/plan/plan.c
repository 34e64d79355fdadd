/* plan.c — the memory planner (SPEC §9): decide how G is held and how big every transient is,
 * once, from the shape and the budget; predict each session stage's tracked bytes.
 *
 * The prediction composes the stages' workspace queries (common/workspace.h): each stage says,
 * for given sizes, which buffers it allocates and frees through src/common/mem.c and in which
 * order, and sizes its own allocations from the same functions, so there is one source of truth
 * per buffer. The planner feeds those events through its model of mem.c (model.c: live bytes,
 * the exact-size reuse cache, "return the cache before refusing") and expands each stage's pass
 * over G by how this plan holds G (gbuild.c's pass query, or nothing for a resident float32 view).
 * The queries: calibrate.c (frame block, moments, CoM), gbuild.c (the build, a pass, the free),
 * fit/workspace.c (standard.c's order of parallax.c, band.c, loss.c and object.c's queries),
 * object.c, loss.c; the session's own order (the stages, trims, the preview buffers of
 * plan_preview_sizes, which session.c allocates from) is run_session's below.
 * tests/test_plan.c runs the real session and compares every stage's tracked peak and after with
 * the plan's, so a query that drifts from its stage shows at once. */
#include "plan/plan.h"

#include "calibrate/calibrate_internal.h"
#include "plan/budget.h"
#include "common/err.h"
#include "common/parallel.h"
#include "fit/fit.h"
#include "gbuild/gbuild.h"
#include "parallax/parallax.h"
#include "plan/model.h"
#include "ssb/ssb_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

void ssb4d_plan_input_default(ssb4d_plan_input *in)
{
    memset(in, 0, sizeof *in);
}

/* ---- shapes ---------------------------------------------------------------------------------- */

typedef struct {
    size_t ny, nx, nxh;
    size_t n_bf, n_stored, n_fit, n_coarse;
    int nt;
    size_t band_nb, band_nr, band_nc; /* the band objective's bins, and rows / columns holding them */
    size_t px_nb;                     /* the parallax estimate's bins (0: under 4, it stops there) */
    int px_runs;                      /* the parallax estimate reads G (enough stored pixels) */
    size_t stored_all;                /* a rank's shape: the stored planes of all ranks (0: one process) */
} shape;

static size_t p32(const shape *s) { return G_plane_bytes_of(s->ny, s->nx, 0); }
static size_t p16(const shape *s) { return G_plane_bytes_of(s->ny, s->nx, 1); }

/* all_bf, all_stored: the counts of the whole acquisition, which decide whether the parallax
 * estimate runs and at how many bins (the same for every rank); n_bf, n_stored: those this shape
 * holds (a rank's share, or all of them). */
static shape make_shape(size_t ny, size_t nx, size_t n_bf, size_t n_stored, size_t n_fit,
                        size_t n_coarse, int nt, const ssb4d_geometry *g, const ssb4d_fit_params *fp,
                        size_t all_bf, size_t all_stored)
{
    shape s = {ny, nx, nx / 2 + 1, n_bf, n_stored, n_fit, n_coarse, nt, 0, 0, 0, 0, 0, 0};
    if (g) { /* standard.c auto_band; the bins counted as band.c counts them */
        double lambda = ssb4d_wavelength_A(g->kv);
        double fov = fmin((double)ny * g->scan_step_A[0], (double)nx * g->scan_step_A[1]);
        double lo = fp->band_lo_inv_A > 0 ? fp->band_lo_inv_A : 1.5 / fov;
        double hi = fp->band_hi_inv_A > 0 ? fp->band_hi_inv_A : 2.0 * g->semiangle_mrad * 1e-3 / lambda;
        int *row = calloc(ny, sizeof *row), *col = calloc(s.nxh, sizeof *col);
        if (row && col)
            s.band_nb = band_bins(ny, nx, g->scan_step_A, lo, hi, row, col, &s.band_nr, &s.band_nc);
        else /* no memory to count: the whole half-plane, an upper bound */
            s.band_nb = ny * s.nxh, s.band_nr = ny, s.band_nc = s.nxh;
        free(row), free(col);
    } else { /* no geometry: the whole half-plane, an upper bound */
        s.band_nb = ny * s.nxh, s.band_nr = ny, s.band_nc = s.nxh;
    }
    /* parallax.c runs on 8 or more stored pixels */
    s.px_runs = fp->use_parallax && all_stored >= 8;
    if (s.px_runs) {
        ssb4d_parallax_opts po;
        ssb4d_parallax_opts_default(&po);
        s.px_nb = parallax_bins_of(ny, nx, all_bf, g, &po);
    }
    if (s.px_nb < 4) /* the estimate stops before its spectra, and gives no start */
        s.px_nb = 0;
    return s;
}

/* How a G is held: resident planes, half or not, the group span of passes. */
typedef struct {
    int half;
    size_t n_res;        /* resident planes */
    size_t group_planes; /* BF pixels per group (gbuild.c) */
    size_t block_bytes;
} gmode;

static size_t group_planes_of(const shape *s, size_t group_bytes) { return G_group_planes_of(s->ny, s->nx, group_bytes); }

static int resident_f32(const shape *s, const gmode *g) { return !g->half && g->n_res >= s->n_stored; }

static gbuild_ws_shape g_shape(const shape *s, const gmode *g)
{
    gbuild_ws_shape w = {s->ny, s->nx, s->n_bf, s->n_stored, g->n_res, g->group_planes, g->block_bytes, g->half, s->nt};
    return w;
}

/* ---- composing the stages' workspace queries -------------------------------------------------- */

/* The model, and how G is held: a stage's pass over G (WS_PASS) costs a group buffer unless its
 * view is resident in float32 (the resident planes are the innermost, so a view within the
 * `within` innermost pixels is resident when they fit in them); then gbuild's pass query. On a
 * rank of a distributed session a pass also holds the chain's buffers (plan_chain_bytes): `red_view`
 * for the fit's objective passes (its views, within > 0), `red_all` for the others. */
typedef struct {
    model_sink sink;
    const shape *s;
    const gmode *g;
    size_t red_view, red_all;
} stage_sink;

static void on_pass(model_sink *self, size_t within)
{
    const stage_sink *st = (const stage_sink *)self;
    const shape *s = st->s;
    const gmode *g = st->g;
    size_t red = within ? st->red_view : st->red_all;
    if (red) /* held during the pass, freed after it (not cached) */
        model_alloc(self->m, red);
    int needs = g->half || (g->n_res < s->n_stored && !(within && within <= g->n_res));
    if (needs) {
        model_sink plain;
        model_sink_init(&plain, self->m, NULL);
        gbuild_ws_shape gs = g_shape(s, g);
        gbuild_pass_workspace(&gs, &plain.base);
    }
    if (red)
        model_free(self->m, red, 0);
}

static ws_sink *stage(stage_sink *out, plan_model *m, const shape *s, const gmode *g, size_t red_view,
                      size_t red_all)
{
    model_sink_init(&out->sink, m, on_pass);
    out->s = s;
    out->g = g;
    out->red_view = red_view;
    out->red_all = red_all;
    return &out->sink.base;
}

static void gbuild_on(plan_model *m, const shape *s, const gmode *g)
{
    stage_sink ss;
    gbuild_ws_shape gs = g_shape(s, g);
    gbuild_workspace(&gs, stage(&ss, m, s, g, 0, 0));
}

static void gfree_on(plan_model *m, const shape *s, const gmode *g)
{
    stage_sink ss;
    gbuild_ws_shape gs = g_shape(s, g);
    gbuild_free_workspace(&gs, stage(&ss, m, s, g, 0, 0));
}

/* How the standard fit searches (standard.c), as far as memory goes. */
typedef struct {
    size_t batch, trials;  /* global candidates in batches of batch */
    int d;                 /* Nelder–Mead's free parameters (C10, C12, φ12 unless locked; the rotation) */
    int fit_rotation;      /* the rotation is a search parameter: a k table per distinct rotation */
    int band;              /* the band objective (else the exact loss) */
    int branch_check;
    size_t n_seeds;        /* the start's seeds (fit_ws_shape.n_seeds) */
    int se_d;              /* the standard errors' free coordinates (fit_se_dims) */
} fitcfg;

/* red_fit: the chain's buffers during the fit's objective passes; red_loss: during its other
 * passes (the exact loss over all BF pixels; the parallax estimate's and the branch check's
 * passes are counted with them, a bound: they reduce less). */
static void fit_on(plan_model *m, const shape *s, const gmode *g, const fitcfg *c, size_t red_fit, size_t red_loss)
{
    fit_ws_shape f = {s->ny, s->nx, s->n_bf, s->n_fit, s->n_coarse, s->nt, s->band_nb, s->band_nr, s->band_nc,
                      s->px_runs, s->px_nb, c->batch, c->trials, c->d, c->fit_rotation, c->band, c->branch_check,
                      c->n_seeds, c->se_d};
    stage_sink ss;
    fit_workspace(&f, stage(&ss, m, s, g, red_fit, red_loss));
}

/* The exact loss over all BF pixels (a release). */
static void loss_on(plan_model *m, const shape *s, const gmode *g, size_t red_loss)
{
    stage_sink ss;
    loss_ws w = loss_ws_sizes(s->ny, s->nx, s->n_bf, 1, s->nt, 1, 1, 0);
    loss_workspace(&w, stage(&ss, m, s, g, 0, red_loss));
}

plan_preview_ws plan_preview_sizes(size_t ny, size_t nx, size_t f)
{
    size_t nyf = f * ny, nxf = f * nx;
    plan_preview_ws w = {nyf * nxf * sizeof(float), nyf * (nxf / 2 + 1) * 2 * sizeof(float)};
    return w;
}

/* session.c's preview: the phase image, the object at f, the FFT of the phase for the display.
 * A distributed object adds nothing to a rank: its chain passes the object's running sum on,
 * and a rank receives it into its own (object.c's accumulator, already counted). */
static void preview_on(plan_model *m, const shape *s, const gmode *g, size_t f, int fft)
{
    stage_sink ss;
    ws_sink *out = stage(&ss, m, s, g, 0, 0);
    plan_preview_ws p = plan_preview_sizes(s->ny, s->nx, f);
    object_ws o = object_ws_sizes(f * s->ny, f * s->nx, s->n_bf, s->nt, 1, 1);
    ws_alloc(out, p.phase);
    object_workspace(&o, out);
    if (fft) {
        ws_alloc(out, p.spectrum);
        ws_free(out, p.spectrum, 1);
    }
    ws_free(out, p.phase, 1);
}

/* A release at native sampling (session.c's and the viewer's): the phase image, the fused pass
 * (ssb4d_object_loss: the object and the exact loss from the same spectra), the FFT. */
static void release_on(plan_model *m, const shape *s, const gmode *g, int fft, size_t red_loss)
{
    stage_sink ss;
    ws_sink *out = stage(&ss, m, s, g, 0, red_loss);
    plan_preview_ws p = plan_preview_sizes(s->ny, s->nx, 1);
    ws_alloc(out, p.phase);
    release_workspace(s->ny, s->nx, s->n_bf, s->nt, out);
    if (fft) {
        ws_alloc(out, p.spectrum);
        ws_free(out, p.spectrum, 1);
    }
    ws_free(out, p.phase, 1);
}

/* ---- times, from the machine profile (profile.c); for the time class only ------------------ */
static double secs(const ssb4d_machine_profile *mp, double work, double rate_ns, int nt)
{
    return work * rate_ns * 1e-9 * (double)(mp->threads > 0 ? mp->threads : 1) / (nt > 0 ? nt : 1);
}

static void time_class(double s, char *out, size_t n)
{
    const char *c = s < 1 ? "under a second" : s < 10 ? "seconds" : s < 60 ? "tens of seconds"
                    : s < 600 ? "minutes" : s < 3600 ? "tens of minutes" : "hours";
    snprintf(out, n, "%s", c);
}

/* ---- one whole session under one set of decisions --------------------------------------------- */

typedef struct {
    gmode fit_g, prev_g, region_g;
    int region_frees;
    fitcfg fit;
} decisions;

typedef struct {
    const ssb4d_plan_input *in;
    int in_band;  /* the fit's objective is the band objective */
    shape s, rs; /* full field, region */
    calibrate_ws cal; /* the calibration's buffers at the budget's frame block */
    size_t E;
    size_t f;
    int nt;
    ssb4d_session_script script;
    ssb4d_machine_profile mp;
    plan_rank_share rk; /* the rank planned (ranks = 1: the one process) */
} problem;

/* The most parameter sets one pass of the fit's objective carries (fit/workspace.c's batches):
 * on the coarse subset the seeds' and the trials' batches and Nelder–Mead's simplex and shrink
 * of d; on all fit pixels Nelder–Mead's alone. The exact loss with the rotation searched is one
 * call per candidate. */
static size_t fit_max_sets(const fitcfg *c, int coarse)
{
    size_t b = c->batch ? c->batch : 1, t = c->trials > c->n_seeds ? c->trials : c->n_seeds;
    size_t n = coarse ? (t < b ? t : b) : 1;
    if ((size_t)(c->d > 0 ? c->d : 0) > n)
        n = (size_t)c->d;
    if (!c->band && c->fit_rotation)
        n = 1;
    return n ? n : 1;
}

/* The chain's buffers on this problem's rank: a pass of the exact loss (one set) over all of G on
 * shape s; the largest pass of the fit's objective (the band's partials: 4 doubles a bin), over
 * the coarse subset or over all fit pixels. */
static size_t chain_loss(const problem *pr, const shape *s) { return plan_chain_bytes(&pr->rk, s->ny * s->nx + 1, 1, 0); }

static size_t chain_fit(const problem *pr, const shape *s, const fitcfg *c)
{
    size_t set = c->band ? 4 * (s->band_nb ? s->band_nb : 1) : s->ny * s->nx + 1;
    size_t coarse = s->n_coarse < s->n_fit ? s->n_coarse : s->n_fit;
    size_t a = plan_chain_bytes(&pr->rk, set, fit_max_sets(c, 1), coarse);
    size_t b = coarse < s->n_fit ? plan_chain_bytes(&pr->rk, set, fit_max_sets(c, 0), s->n_fit) : 0;
    return a > b ? a : b;
}

static void stage_begin(plan_model *m) { m->stage_peak = m->live + m->cached; }

static void stage_end(plan_model *m, ssb4d_plan *p, const char *name, double seconds, const char *tiles)
{
    ssb4d_plan_stage *st = &p->stages[p->n_stages++];
    memset(st, 0, sizeof *st);
    snprintf(st->name, sizeof st->name, "%s", name);
    st->peak_bytes = m->stage_peak;
    st->after_bytes = m->live + m->cached;
    st->cache_bytes = m->cached;
    st->seconds = seconds;
    time_class(seconds, st->time_class, sizeof st->time_class);
    snprintf(st->tiles, sizeof st->tiles, "%s", tiles);
}

static double gbuild_secs(const problem *pr, const shape *s, const gmode *g)
{
    return secs(&pr->mp, (double)s->n_bf * (double)(s->ny * s->nx), pr->mp.gbuild_ns, pr->nt);
}

static double fit_secs(const problem *pr, const shape *s, const gmode *g, size_t trials)
{
    double npix = (double)(s->ny * s->nx), coarse = (double)(s->n_coarse < s->n_fit ? s->n_coarse : s->n_fit);
    double evals_px = ((double)trials + 70.0) * coarse + 80.0 * (double)s->n_fit;
    /* the band objective costs about a fifth of the exact loss per evaluation (no FFT); the
     * exact loss over all BF pixels and the branch check's object come once at the end */
    const ssb4d_machine_profile *mp = &pr->mp;
    double t = secs(mp, evals_px * npix, pr->in_band ? mp->band_ns : mp->loss_ns, pr->nt) +
               secs(mp, (double)s->n_bf * npix, mp->loss_ns, pr->nt) + secs(mp, (double)s->n_bf * npix, mp->object_ns, pr->nt);
    /* streamed fit pixels are rebuilt by every evaluation */
    if (!g->half && g->n_res < s->n_fit)
        t += 150.0 * gbuild_secs(pr, s, g) * (double)(s->n_fit - g->n_res) / (double)s->n_bf;
    return t;
}

static double pass_rebuild_secs(const problem *pr, const shape *s, const gmode *g)
{
    if (g->half || g->n_res >= s->n_stored)
        return 0;
    return gbuild_secs(pr, s, g) * (double)(s->n_stored - g->n_res) / (double)s->n_stored;
}

static void describe_g(const shape *s, const gmode *g, char *out, size_t n)
{
    if (s->stored_all && resident_f32(s, g))
        snprintf(out, n, "G float32 resident: this rank's %zu of %zu planes (%.2f GiB)", s->n_stored, s->stored_all,
                 (double)(s->n_stored * p32(s)) / GIB);
    else if (resident_f32(s, g))
        snprintf(out, n, "G float32 resident (%.2f GiB)", (double)(s->n_stored * p32(s)) / GIB);
    else if (g->half && g->n_res >= s->n_stored)
        snprintf(out, n, "G half precision (%.2f GiB), groups of %zu planes", (double)(s->n_stored * p16(s)) / GIB,
                 g->group_planes);
    else
        snprintf(out, n, "G %s, %zu of %zu planes resident, the rest rebuilt per pass in groups of %zu",
                 g->half ? "half" : "float32", g->n_res, s->n_stored, g->group_planes);
}

static void run_session(const problem *pr, const decisions *d, size_t limit, ssb4d_plan *p, int *failed)
{
    plan_model mm = {0}, *m = &mm;
    m->limit = limit;
    const shape *s = &pr->s;
    char t[200], gdesc[160];
    p->n_stages = 0;

    stage_begin(m);
    model_alloc(m, pr->E);
    stage_end(m, p, "load", 0.0, pr->E ? "encoded file mapped and verified" : "data read from disk");

    stage_begin(m);
    const char *who = pr->rk.ranks > 1 ? "rank 0 only, the others wait: " : "";
    if (pr->rk.calibrates) {
        model_sink cs;
        model_sink_init(&cs, m, NULL);
        calibrate_workspace(&pr->cal, &cs.base);
        if (pr->cal.buf >= MIB)
            snprintf(t, sizeof t, "%sframe blocks of %.0f MiB", who, (double)pr->cal.buf / MIB);
        else
            snprintf(t, sizeof t, "%sframe blocks of %.0f KiB", who, (double)pr->cal.buf / 1024);
    } else
        snprintf(t, sizeof t, "none on this rank: rank 0 calibrates, the others wait");
    stage_end(m, p, "calibrate",
              secs(&pr->mp, (double)(pr->in->scan[0] * pr->in->scan[1]) * (double)(pr->in->det[0] * pr->in->det[1]),
                   pr->mp.calibrate_ns, pr->nt), t);

    stage_begin(m);
    gbuild_on(m, s, &d->fit_g);
    describe_g(s, &d->fit_g, gdesc, sizeof gdesc);
    snprintf(t, sizeof t, "%s; decode block %.0f MiB", gdesc, (double)d->fit_g.block_bytes / MIB);
    stage_end(m, p, "G build", gbuild_secs(pr, s, &d->fit_g), t);

    if (!pr->in->no_fit) {
        stage_begin(m);
        size_t red_fit = chain_fit(pr, s, &d->fit);
        fit_on(m, s, &d->fit_g, &d->fit, red_fit, chain_loss(pr, s));
        model_trim(m);
        int w = snprintf(t, sizeof t, "parallax spectra %.1f MiB; %s batches of %zu on %zu coarse pixels, then %zu fit pixels; "
                                      "the exact loss on all %zu", (double)(s->px_nb ? parallax_spectra_bytes(s->n_bf, s->px_nb) : 0) / MIB,
                         d->fit.band ? "band" : "loss", d->fit.batch, s->n_coarse < s->n_fit ? s->n_coarse : s->n_fit, s->n_fit,
                         s->n_bf);
        if (red_fit && w > 0 && (size_t)w < sizeof t)
            snprintf(t + w, sizeof t - (size_t)w, "; chain %.0f MiB", (double)red_fit / MIB);
        stage_end(m, p, "fit", fit_secs(pr, s, &d->fit_g, d->fit.trials), t);
    }

    int same = !memcmp(&d->fit_g, &d->prev_g, sizeof d->prev_g);
    double obj = secs(&pr->mp, (double)s->n_bf * (double)(s->ny * s->nx * pr->f * pr->f), pr->mp.object_ns, pr->nt);
    stage_begin(m);
    if (!same) {
        gfree_on(m, s, &d->fit_g);
        gbuild_on(m, s, &d->prev_g);
    }
    preview_on(m, s, &d->prev_g, pr->f, pr->script.fft);
    describe_g(s, &d->prev_g, gdesc, sizeof gdesc);
    snprintf(t, sizeof t, "%s%s; %zux upsampled, with its FFT", same ? "" : "rebuilt as ", gdesc, pr->f);
    char name[48];
    snprintf(name, sizeof name, "preview (%zux%s)", pr->f, pr->script.fft ? ", FFT" : "");
    double rebuild = same ? 0 : gbuild_secs(pr, s, &d->prev_g);
    stage_end(m, p, name, rebuild + obj + pass_rebuild_secs(pr, s, &d->prev_g), t);

    const ssb4d_session_script *sc = &pr->script;
    if (sc->drags) {
        stage_begin(m);
        for (size_t i = 0; i < sc->drags; i++)
            preview_on(m, s, &d->prev_g, pr->f, pr->script.fft);
        snprintf(name, sizeof name, "%zu drags", sc->drags);
        stage_end(m, p, name, (double)sc->drags * (obj + pass_rebuild_secs(pr, s, &d->prev_g)),
                  "previews reuse the cached buffers");
    }
    if (sc->releases) {
        stage_begin(m);
        int fused = pr->f == 1; /* one pass: the object and the loss from the same spectra */
        for (size_t i = 0; i < sc->releases; i++) {
            if (fused)
                release_on(m, s, &d->prev_g, pr->script.fft, chain_loss(pr, s));
            else {
                preview_on(m, s, &d->prev_g, pr->f, pr->script.fft);
                loss_on(m, s, &d->prev_g, chain_loss(pr, s));
            }
        }
        snprintf(name, sizeof name, "%zu releases", sc->releases);
        double loss_s = secs(&pr->mp, (double)s->n_bf * (double)(s->ny * s->nx), pr->mp.loss_ns, pr->nt);
        stage_end(m, p, name,
                  (double)sc->releases * (fused ? loss_s + pass_rebuild_secs(pr, s, &d->prev_g)
                                                : obj + loss_s + 2 * pass_rebuild_secs(pr, s, &d->prev_g)),
                  fused ? "the image and the loss over all BF pixels in one pass"
                        : "preview and the loss over all BF pixels");
    }

    int have_region = pr->rs.ny > 0;
    if (have_region) {
        const shape *rs = &pr->rs;
        stage_begin(m);
        if (d->region_frees) {
            gfree_on(m, s, &d->prev_g);
            model_trim(m);
        }
        gbuild_on(m, rs, &d->region_g);
        fit_on(m, rs, &d->region_g, &d->fit, chain_fit(pr, rs, &d->fit), chain_loss(pr, rs));
        gfree_on(m, rs, &d->region_g);
        model_trim(m);
        describe_g(rs, &d->region_g, gdesc, sizeof gdesc);
        snprintf(t, sizeof t, "%s%s", d->region_frees ? "full field's G freed first; " : "", gdesc);
        snprintf(name, sizeof name, "region refit %zux%zu", rs->ny, rs->nx);
        stage_end(m, p, name, gbuild_secs(pr, rs, &d->region_g) + fit_secs(pr, rs, &d->region_g, d->fit.trials), t);

        stage_begin(m);
        if (d->region_frees)
            gbuild_on(m, s, &d->prev_g);
        preview_on(m, s, &d->prev_g, pr->f, pr->script.fft);
        stage_end(m, p, "next full preview",
                  (d->region_frees ? gbuild_secs(pr, s, &d->prev_g) : 0) + obj + pass_rebuild_secs(pr, s, &d->prev_g),
                  d->region_frees ? "G rebuilt from the encoded data (same bits)" : "G kept");
    }
    if (pr->script.save) {
        stage_begin(m);
        stage_end(m, p, "save calibration", 0.0, "calibration.json");
    }
    p->session_peak_bytes = m->session_peak;
    *failed = m->failed || (limit && m->session_peak > limit);
}

/* ---- decisions ------------------------------------------------------------------------------ */

static int try_plan(const problem *pr, decisions *d, size_t B, ssb4d_plan *p)
{
    int failed;
    run_session(pr, d, B, p, &failed);
    return !failed;
}

/* The most planes (n_res of *g, and of *g2 too when not NULL: one G serves both) for which the
 * session fits in B (binary search: more resident planes never need less memory), or -1. */
static long fit_resident(const problem *pr, decisions *d, gmode *g, gmode *g2, size_t n_max, size_t B,
                         ssb4d_plan *p)
{
    size_t lo = 0, hi = n_max;
    g->n_res = 0;
    if (g2)
        g2->n_res = 0;
    if (!try_plan(pr, d, B, p))
        return -1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        g->n_res = mid;
        if (g2)
            g2->n_res = mid;
        if (try_plan(pr, d, B, p))
            lo = mid;
        else
            hi = mid - 1;
    }
    g->n_res = lo;
    if (g2)
        g2->n_res = lo;
    return (long)lo;
}

size_t plan_calib_block(size_t budget, size_t encoded, size_t det_pixels, size_t npos)
{
    size_t want = (size_t)64 << 20, room = budget > encoded ? budget - encoded : 0;
    if (budget && want > room / 2)
        want = room / 4;
    size_t frames = want / (det_pixels * 4);
    frames = frames < 1 ? 1 : frames > npos ? npos : frames;
    return frames * det_pixels * 4;
}

size_t plan_calib_extra(size_t npos, int rotation_fitted)
{
    calibrate_ws w = calibrate_ws_sizes(1, npos, 0, rotation_fitted);
    return w.mom + w.com;
}

size_t plan_calib_need(size_t budget, size_t encoded, size_t det_pixels, size_t npos, int rotation_fitted,
                       size_t *block)
{
    *block = plan_calib_block(budget, encoded, det_pixels, npos);
    return encoded + *block + plan_calib_extra(npos, rotation_fitted);
}

size_t plan_plane_bytes(size_t ny, size_t nx) { return G_plane_bytes_of(ny, nx, 0); }

void plan_input_from_calibration(ssb4d_plan_input *in, const ssb4d_calibration *cal,
                                 const size_t shape[4], double fit_radius)
{
    in->scan[0] = shape[0], in->scan[1] = shape[1], in->det[0] = shape[2], in->det[1] = shape[3];
    in->n_bf = cal->n_bf;
    in->n_stored = 0;
    for (size_t i = 0; i < cal->n_bf; i++)
        in->n_stored += ssb_bf_pixel_active(&cal->geom, cal->det_shape[1], cal->bf_pix[i]);
    in->n_fit_bf = fit_pixels_of(cal->bf_pix, cal->n_bf, cal->det_shape[1], &cal->geom, fit_radius, NULL);
    in->geometry = &cal->geom;
}

void plan_gbuild_opts(const ssb4d_plan *p, int half, size_t resident, size_t g_bytes, int threads,
                      ssb4d_gbuild_opts *go)
{
    ssb4d_gbuild_opts_default(go);
    go->threads = threads;
    go->half = half;
    go->resident_bytes = resident >= g_bytes ? 0 : resident ? resident : 1;
    go->block_bytes = p->block_bytes;
    go->group_bytes = p->group_bytes;
}

size_t ssb_plan_region_side(size_t n) { return n >= 512 ? 256 : n >= 64 ? n / 2 : 0; }

/* The fit's views: all its pixels (fit_radius² n_bf unless given) and the coarse subset (every
 * ⌈n_fit / coarse⌉-th of them). */
static void fit_views(const ssb4d_plan_input *in, const ssb4d_fit_params *fp, size_t *n_fit_out,
                      size_t *n_coarse_out)
{
    size_t n_fit = in->n_fit_bf ? in->n_fit_bf : (size_t)(fp->fit_radius * fp->fit_radius * (double)in->n_bf);
    if (n_fit < 1)
        n_fit = 1;
    size_t n_coarse = in->n_coarse_bf ? in->n_coarse_bf : fp->coarse_bf ? fp->coarse_bf : 256;
    if (n_fit > n_coarse && n_coarse) {
        size_t mstep = (n_fit + n_coarse - 1) / n_coarse;
        n_coarse = (n_fit + mstep - 1) / mstep;
    } else
        n_coarse = n_fit;
    *n_fit_out = n_fit, *n_coarse_out = n_coarse;
}

static void fit_config(const ssb4d_plan_input *in, const ssb4d_fit_params *fp, const shape *s, fitcfg *c)
{
    /* standard.c: trials around the parallax estimate, at least 200 over the whole box without
     * one (a given start, or no parallax); Nelder–Mead over the free parameters. */
    c->batch = in->fit_batch ? in->fit_batch : fp->batch ? fp->batch : 8;
    c->trials = fp->trials;
    if ((fp->start_given || !s->px_nb) && c->trials < 200)
        c->trials = 200;
    c->fit_rotation = !fp->rotation_given;
    c->band = fp->objective == SSB4D_FIT_OBJ_BAND;
    c->branch_check = fp->branch_check;
    c->d = c->fit_rotation;
    for (int j = 0; j < 3; j++)
        c->d += !fp->locked[j];
    c->se_d = fit_se_dims(fp->locked, c->fit_rotation);
    /* The start's seeds: the parallax estimate and its alternatives (at most SSB4D_PARALLAX_ALT:
     * a crystal's aliased reflections give them), planned at their most. Fewer seeds leave smaller
     * buffers in the cache; a rotation scan (a rotation nothing fixes) multiplies the seeds, and
     * its last, partial batch can leave one batch's band buffers of another size beyond this plan
     * (docs/memory.md). */
    c->n_seeds = s->px_runs && !fp->start_given && !fp->locked[0] && !fp->locked[1] && !fp->locked[2]
                     ? 1 + SSB4D_PARALLAX_ALT
                     : 0;
}

/* The plan of one process (rk NULL or rk->ranks 1) or of one rank of a distributed session. */
static ssb4d_status plan_make(const ssb4d_plan_input *in, const plan_rank_share *rk, ssb4d_plan *p,
                              plan_rank_share *share, ssb4d_err *err)
{
    memset(p, 0, sizeof *p);
    if (in->scan[0] < 2 || in->scan[1] < 2 || in->det[0] < 2 || in->det[1] < 2)
        return ssb_fail(err, SSB4D_EINVAL, "the data shape must be at least 2x2 scan x 2x2 detector");
    if (in->scan[0] > 65536 || in->scan[1] > 65536 || in->det[0] > 4096 || in->det[1] > 4096)
        return ssb_fail(err, SSB4D_EINVAL, "the data shape %zux%zux%zux%zu is beyond what ssb4d plans for",
                        in->scan[0], in->scan[1], in->det[0], in->det[1]);
    if (in->n_bf == 0 || in->n_bf > in->det[0] * in->det[1])
        return ssb_fail(err, SSB4D_EINVAL, "the BF pixel count must be between 1 and the detector's %zu pixels",
                        in->det[0] * in->det[1]);
    if (in->upsample != 0 && in->upsample != 1 && in->upsample != 2 && in->upsample != 3 &&
        in->upsample != 4 && in->upsample != 8)
        return ssb_fail(err, SSB4D_EINVAL, "the preview upsampling must be 1, 2, 3, 4 or 8");
    problem pr;
    memset(&pr, 0, sizeof pr);
    pr.in = in;
    pr.nt = ssb_threads_resolve(in->threads);
    if (in->profile)
        pr.mp = *in->profile;
    else
        ssb4d_machine_profile_stated(&pr.mp);
    if (in->script)
        pr.script = *in->script;
    else
        ssb4d_session_script_default(&pr.script);
    ssb4d_fit_params fdef;
    ssb4d_fit_params_default(&fdef);
    const ssb4d_fit_params *fp = in->fit ? in->fit : &fdef;
    pr.in_band = fp->objective == SSB4D_FIT_OBJ_BAND;
    size_t n_stored = in->n_stored ? in->n_stored : in->n_bf;
    int dist = rk && rk->ranks > 1;
    pr.rk = dist ? *rk : plan_rank_share_of(in->n_bf, n_stored, 1, 0);
    size_t n_fit, n_coarse;
    fit_views(in, fp, &n_fit, &n_coarse);
    /* A rank's shape: its BF pixels and stored planes (a rank without blocks is planned as one
     * pixel, a bound), the fit's pixels as many as it could hold (the innermost pixels may all
     * lie in its blocks), the coarse subset likewise; the parallax estimate's bins are the whole
     * acquisition's (the same bins on every rank), its spectra the rank's pixels'. */
    size_t l_bf = in->n_bf, l_stored = n_stored, l_fit = n_fit, l_coarse = n_coarse;
    if (dist) {
        l_bf = rk->local_bf ? rk->local_bf : 1;
        l_stored = rk->local_stored ? rk->local_stored : 1;
        l_fit = n_fit < l_bf ? n_fit : l_bf;
        l_coarse = n_coarse < l_fit ? n_coarse : l_fit;
    }
    pr.s = make_shape(in->scan[0], in->scan[1], l_bf, l_stored, l_fit, l_coarse, pr.nt, in->geometry, fp, in->n_bf,
                      n_stored);
    if (in->region[0] && in->region[1])
        pr.rs = make_shape(in->region[0], in->region[1], l_bf, l_stored, l_fit, l_coarse, pr.nt, in->geometry, fp,
                           in->n_bf, n_stored);
    if (dist)
        pr.s.stored_all = pr.rs.stored_all = n_stored;
    n_stored = l_stored; /* from here on: the planes this plan holds */
    pr.E = in->encoded_bytes;
    pr.f = in->upsample ? (size_t)in->upsample : 2;
    size_t fr = in->det[0] * in->det[1], npos = in->scan[0] * in->scan[1];
    size_t B = in->memory_bytes ? in->memory_bytes : ssb4d_mem_available();
    pr.cal = calibrate_ws_sizes(fr, npos, plan_calib_block(B, in->encoded_bytes, fr, npos), in->rotation_fitted);

    p->memory_bytes = B;
    snprintf(p->profile_source, sizeof p->profile_source, "%s", pr.mp.source);
    p->calib_block_bytes = pr.cal.buf;
    p->encoded_bytes = pr.E;
    p->g_bytes = n_stored * p32(&pr.s);
    p->g_half_bytes = n_stored * p16(&pr.s);

    decisions d;
    memset(&d, 0, sizeof d);
    fit_config(in, fp, &pr.s, &d.fit);
    size_t block = (size_t)256 << 20, group = (size_t)256 << 20;
    gmode full = {0, n_stored, group_planes_of(&pr.s, group), block};
    d.fit_g = d.prev_g = full;
    d.region_g = (gmode){0, n_stored, group_planes_of(pr.rs.ny ? &pr.rs : &pr.s, group), block};
    /* The region refit frees the full field's G when its own G would not fit beside it, or
     * would lift the session more than 1 GiB above encoded + G (SPEC 9's target). */
    size_t region_g = pr.rs.ny ? n_stored * p32(&pr.rs) : 0;
    d.region_frees = 0;

    /* The smallest budget with everything resident in float32 (no cap while measuring). */
    ssb4d_plan tmp;
    d.region_frees = region_g > GIB;
    int failed;
    run_session(&pr, &d, 0, &tmp, &failed);
    size_t resident_need = tmp.session_peak_bytes;
    if (region_g && !d.region_frees && resident_need > B) {
        d.region_frees = 1;
        run_session(&pr, &d, 0, &tmp, &failed);
        resident_need = tmp.session_peak_bytes;
    }
    p->resident_memory_bytes = resident_need;

    /* The smallest budget of all: nothing resident, small blocks and groups. */
    decisions dmin = d;
    gmode tiny = {0, 0, 64, (size_t)1 << 20};
    dmin.fit_g = dmin.prev_g = tiny;
    dmin.region_g = tiny;
    dmin.region_frees = 1;
    if (dist) /* no streaming on a rank: the least is every plane resident, small blocks */
        dmin.fit_g = dmin.prev_g = dmin.region_g = (gmode){0, n_stored, d.fit_g.group_planes, (size_t)1 << 20};
    run_session(&pr, &dmin, 0, &tmp, &failed);
    p->min_memory_bytes = tmp.session_peak_bytes;

    int ok = 0;
    if (dist) {
        /* Every plane of the rank resident in float32, the decode block shrunk if needed; else
         * it does not fit (no streaming, no half-precision copy in a distributed session). */
        for (size_t bb = block; !ok && bb >= ((size_t)1 << 20); bb /= 4) {
            d.fit_g.block_bytes = d.prev_g.block_bytes = d.region_g.block_bytes = bb;
            ok = try_plan(&pr, &d, B, p);
        }
        snprintf(p->mode, sizeof p->mode, "resident");
        p->fits = ok;
        if (!ok) {
            run_session(&pr, &dmin, 0, p, &failed);
            char sz[4][32];
            snprintf(p->reason, sizeof p->reason,
                     "one rank of %zu holds %zu of %zu BF pixels, its G %s resident in float32 (no streaming "
                     "across ranks), and needs %s with the encoded data (%s); the budget is %s",
                     rk->ranks, rk->local_bf, in->n_bf, plan_size_text(sz[0], p->g_bytes, 0),
                     plan_size_text(sz[1], p->min_memory_bytes, 1), plan_size_text(sz[2], pr.E, 0),
                     plan_size_text(sz[3], B, 0));
            d = dmin;
        }
    } else if (in->preview != SSB4D_PREVIEW_HALF) {
        /* Resident float32, with the decode block shrunk until the G build fits. */
        for (size_t bb = block; !ok && bb >= ((size_t)1 << 20); bb /= 4) {
            d.fit_g.block_bytes = d.prev_g.block_bytes = d.region_g.block_bytes = bb;
            ok = try_plan(&pr, &d, B, p);
        }
        if (!ok)
            d.fit_g.block_bytes = d.prev_g.block_bytes = d.region_g.block_bytes = block;
        snprintf(p->mode, sizeof p->mode, "resident");
    }
    if (!ok && !dist) {
        /* Streaming: shrink block and group to what the budget allows, free the full G for the
         * region, keep as many planes as fit (innermost first, so the fit's pixels stay). */
        d.region_frees = region_g > 0;
        size_t room = B > pr.E ? B - pr.E : 0;
        size_t bb = room / 16, gbytes = room / 16;
        bb = bb > block ? block : bb < ((size_t)1 << 20) ? ((size_t)1 << 20) : bb;
        gbytes = gbytes > group ? group : gbytes;
        d.fit_g.block_bytes = d.prev_g.block_bytes = d.region_g.block_bytes = bb;
        d.fit_g.group_planes = d.prev_g.group_planes = group_planes_of(&pr.s, gbytes);
        if (pr.rs.ny)
            d.region_g.group_planes = group_planes_of(&pr.rs, gbytes);
        int want_half = in->preview != SSB4D_PREVIEW_FLOAT;
        /* Previews: a half copy when allowed (all of it resident if it fits), else float32. */
        d.prev_g.half = want_half;
        d.prev_g.n_res = want_half ? n_stored : 0;
        d.fit_g.n_res = 0;
        /* The region's own G: resident if it fits, else streamed too. */
        d.region_g.n_res = n_stored;
        ok = try_plan(&pr, &d, B, p);
        if (!ok) {
            d.region_g.n_res = 0;
            d.prev_g.n_res = 0;
            ok = try_plan(&pr, &d, B, p);
            if (ok && want_half)
                fit_resident(&pr, &d, &d.prev_g, NULL, n_stored, B, p);
            if (ok && pr.rs.ny)
                fit_resident(&pr, &d, &d.region_g, NULL, n_stored, B, p);
        }
        if (ok) {
            if (!want_half) { /* float32 previews use the fit's G */
                d.prev_g = d.fit_g;
                fit_resident(&pr, &d, &d.fit_g, &d.prev_g, n_stored, B, p);
            } else
                fit_resident(&pr, &d, &d.fit_g, NULL, n_stored, B, p);
            ok = try_plan(&pr, &d, B, p);
        }
        snprintf(p->mode, sizeof p->mode, "streaming");
    }
    p->fits = ok;
    if (!ok && !dist) {
        run_session(&pr, &dmin, 0, p, &failed); /* show the least the session needs */
        snprintf(p->reason, sizeof p->reason,
                 "even with nothing of G resident the session needs %.2f GiB (encoded data %.2f GiB "
                 "plus the smallest transients); the budget is %.2f GiB",
                 (double)p->min_memory_bytes / GIB, (double)pr.E / GIB, (double)B / GIB);
        d = dmin;
    }
    p->preview_half = d.prev_g.half;
    p->fit_resident_bytes = d.fit_g.n_res * p32(&pr.s);
    p->preview_resident_bytes = d.prev_g.n_res * (d.prev_g.half ? p16(&pr.s) : p32(&pr.s));
    p->block_bytes = d.fit_g.block_bytes;
    p->group_bytes = d.fit_g.group_planes * p32(&pr.s);
    p->fit_batch = d.fit.batch;
    p->region_frees_g = d.region_frees;
    p->region_resident_bytes = pr.rs.ny ? d.region_g.n_res * p32(&pr.rs) : 0;
    p->resident_bytes = pr.E + p->fit_resident_bytes;
    if (share) {
        *share = pr.rk;
        share->g_bytes = p->g_bytes;
        share->chain_loss_bytes = chain_loss(&pr, &pr.s);
        share->chain_fit_bytes = in->no_fit ? 0 : chain_fit(&pr, &pr.s, &d.fit);
    }
    return SSB4D_OK;
}

ssb4d_status ssb4d_plan_make(const ssb4d_plan_input *in, ssb4d_plan *p, ssb4d_err *err)
{
    return plan_make(in, NULL, p, NULL, err);
}

/* ---- ranks ----------------------------------------------------------------------------------- */

plan_rank_share plan_rank_share_of(size_t n_bf, size_t n_stored, size_t ranks, size_t rank)
{
    plan_rank_share r;
    memset(&r, 0, sizeof r);
    if (!n_stored || n_stored > n_bf)
        n_stored = n_bf;
    r.ranks = ranks ? ranks : 1;
    r.rank = rank;
    r.blocks = (n_bf + PLAN_BLOCK - 1) / PLAN_BLOCK;
    if (r.ranks == 1) {
        r.block1 = r.local_blocks = r.blocks;
        r.local_bf = n_bf, r.local_stored = n_stored;
        r.calibrates = 1;
        return r;
    }
    if (rank == PLAN_RANK_LARGEST) { /* ceil(nb / N) whole blocks: the last rank's count */
        r.local_blocks = (r.blocks + r.ranks - 1) / r.ranks;
        r.block0 = r.blocks - r.local_blocks, r.block1 = r.blocks;
        r.local_bf = PLAN_BLOCK * r.local_blocks < n_bf ? PLAN_BLOCK * r.local_blocks : n_bf;
        r.calibrates = r.holds_partials = 1;
    } else {
        r.block0 = r.blocks * rank / r.ranks, r.block1 = r.blocks * (rank + 1) / r.ranks;
        r.local_blocks = r.block1 - r.block0;
        size_t p0 = PLAN_BLOCK * r.block0 < n_bf ? PLAN_BLOCK * r.block0 : n_bf;
        size_t p1 = PLAN_BLOCK * r.block1 < n_bf ? PLAN_BLOCK * r.block1 : n_bf;
        r.local_bf = p1 - p0;
        r.calibrates = rank == 0;
        r.holds_partials = rank > 0;
    }
    /* the stored planes in proportion, rounded up */
    r.local_stored = n_bf ? (n_stored * r.local_bf + n_bf - 1) / n_bf : 0;
    return r;
}

size_t plan_chain_bytes(const plan_rank_share *r, size_t set_doubles, size_t n, size_t view)
{
    if (r->ranks <= 1)
        return 0;
    size_t set = n * set_doubles * sizeof(double), held = r->local_blocks;
    if (view) {
        size_t c = view < r->local_bf ? view : r->local_bf;
        held = (c + PLAN_BLOCK - 1) / PLAN_BLOCK;
    }
    return 2 * set + (r->holds_partials ? held * set : 0);
}

ssb4d_status plan_make_rank(const ssb4d_plan_input *in, size_t ranks, size_t rank, ssb4d_plan *p,
                            plan_rank_share *share, ssb4d_err *err)
{
    if (ranks < 1 || ranks > PLAN_MAX_RANKS) {
        memset(p, 0, sizeof *p);
        return ssb_fail(err, SSB4D_EINVAL, "the rank count must be between 1 and %d", PLAN_MAX_RANKS);
    }
    if (rank != PLAN_RANK_LARGEST && rank >= ranks) {
        memset(p, 0, sizeof *p);
        return ssb_fail(err, SSB4D_EINVAL, "rank %zu is not one of %zu ranks", rank, ranks);
    }
    plan_rank_share r = plan_rank_share_of(in->n_bf, in->n_stored, ranks, rank);
    return plan_make(in, &r, p, share, err);
}

/* A rank's need never grows with N: it depends on N only through ceil(nb / N) blocks (G, the
 * partials, the decode block's rows), so the first N that fits is found by bisection over
 * 2..min(nb, max) (at N >= nb every rank has one block, or none). N = 1 is the one-process plan,
 * which has no chain: it counts when it fits with G resident. */
ssb4d_status plan_smallest_ranks(const ssb4d_plan_input *in, size_t max_ranks, plan_ranks_answer *a,
                                 ssb4d_err *err)
{
    memset(a, 0, sizeof *a);
    if (max_ranks < 1 || max_ranks > PLAN_MAX_RANKS)
        return ssb_fail(err, SSB4D_EINVAL, "the rank count must be between 1 and %d", PLAN_MAX_RANKS);
    ssb4d_plan *q = malloc(sizeof *q);
    if (!q)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_plan_input one = *in;
    one.preview = SSB4D_PREVIEW_FLOAT; /* resident first, as a rank holds it */
    ssb4d_status st = ssb4d_plan_make(&one, q, err);
    if (!st && q->fits && !strcmp(q->mode, "resident"))
        a->ranks = 1;
    else if (!st) {
        ssb4d_plan_input any = *in;
        st = ssb4d_plan_make(&any, q, err);
        a->one_process_streams = !st && q->fits;
    }
    size_t nb = (in->n_bf + PLAN_BLOCK - 1) / PLAN_BLOCK, hi = nb > 2 ? nb : 2;
    if (hi > max_ranks)
        hi = max_ranks;
    a->tried = hi;
    if (st || a->ranks || hi < 2) {
        if (!st && !a->ranks)
            snprintf(a->reason, sizeof a->reason, "one process does not fit with G resident, and at most %zu rank%s may be used",
                     max_ranks, max_ranks == 1 ? "" : "s");
        free(q);
        return st;
    }
    st = plan_make_rank(in, hi, PLAN_RANK_LARGEST, q, NULL, err);
    if (st) {
        free(q);
        return st;
    }
    a->tried_need = q->fits ? q->session_peak_bytes : q->min_memory_bytes;
    if (!q->fits) {
        size_t k = (nb + hi - 1) / hi;
        char sz[4][32];
        snprintf(a->reason, sizeof a->reason,
                 "even %zu ranks (%zu block%s of 64 BF pixels each) need %s a rank (encoded data %s, the rank's "
                 "G %s, transients and the chain's partials); the budget is %s",
                 hi, k, k == 1 ? "" : "s", plan_size_text(sz[0], q->min_memory_bytes, 1),
                 plan_size_text(sz[1], q->encoded_bytes, 0), plan_size_text(sz[2], q->g_bytes, 0),
                 plan_size_text(sz[3], q->memory_bytes, 0));
        free(q);
        return SSB4D_OK;
    }
    size_t lo = 2; /* the answer lies in [lo, hi] */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        st = plan_make_rank(in, mid, PLAN_RANK_LARGEST, q, NULL, err);
        if (st) {
            free(q);
            return st;
        }
        if (q->fits)
            hi = mid;
        else
            lo = mid + 1;
    }
    a->ranks = lo;
    free(q);
    return SSB4D_OK;
}

/* ---- sizes ----------------------------------------------------------------------------------- */

int ssb4d_parse_size(const char *s, size_t *out)
{
    if (!s || !*s)
        return -1;
    if (!((*s >= '0' && *s <= '9') || *s == '.'))
        return -1; /* no signs, spaces, "inf" or "nan" */
    char *e;
    double v = strtod(s, &e);
    if (e == s || !isfinite(v) || v <= 0)
        return -1;
    double mult = 1;
    switch (*e) {
    case 'k': case 'K': mult = 1024.0; e++; break;
    case 'm': case 'M': mult = 1048576.0; e++; break;
    case 'g': case 'G': mult = 1073741824.0; e++; break;
    case 't': case 'T': mult = 1099511627776.0; e++; break;
    default: break;
    }
    if (mult > 1 && *e == 'i')
        e++;
    if (*e == 'B' || *e == 'b')
        e++;
    if (*e)
        return -1;
    double b = v * mult;
    if (b < 1 || b > 1.0e18)
        return -1;
    *out = (size_t)b;
    return 0;
}

/* ---- the device (plan/device_model.h) -------------------------------------------------------- */

void plan_device_session(const ssb4d_plan_input *in, size_t ny, size_t nx, dev_session_in *out)
{
    memset(out, 0, sizeof *out);
    ssb4d_fit_params fdef;
    ssb4d_fit_params_default(&fdef);
    const ssb4d_fit_params *fp = in->fit ? in->fit : &fdef;
    size_t n_stored = in->n_stored ? in->n_stored : in->n_bf, n_fit, n_coarse;
    fit_views(in, fp, &n_fit, &n_coarse);
    shape s = make_shape(ny, nx, in->n_bf, n_stored, n_fit, n_coarse, 1, in->geometry, fp, in->n_bf, n_stored);
    fitcfg c;
    memset(&c, 0, sizeof c);
    fit_config(in, fp, &s, &c);
    out->ny = ny, out->nx = nx;
    out->n_bf = in->n_bf, out->n_stored = n_stored;
    out->f = in->upsample ? in->upsample : 2;
    out->fit = !in->no_fit;
    out->band = c.band;
    out->n_fit = n_fit < in->n_bf ? n_fit : in->n_bf;
    out->n_coarse = n_coarse < out->n_fit ? n_coarse : out->n_fit;
    out->sets_coarse = fit_max_sets(&c, 1);
    out->sets_fit = fit_max_sets(&c, 0);
    out->rot_coarse = c.band && c.fit_rotation ? out->sets_coarse : 1;
    out->rot_fit = c.band && c.fit_rotation ? out->sets_fit : 1;
    out->sets_se = c.se_d > 0 ? fit_se_points(c.se_d) : 0;
    out->rot_se = c.fit_rotation ? 3 : 1;
    out->band_nb = s.band_nb;
    out->branch_check = c.branch_check;
    out->subset = 256;
}
