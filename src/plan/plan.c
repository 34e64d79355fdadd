/* plan.c — the memory planner (SPEC §9): decide how G is held and how big every transient is,
 * once, from the shape and the budget; predict each session stage's tracked bytes.
 *
 * The prediction replays each stage's allocations, in the order the code makes them, through a
 * model of src/common/mem.c (live bytes, the exact-size reuse cache of at most 64 blocks, the
 * "return the cache before refusing" rule). A formula per stage would drift from the code the
 * first time a buffer moved; a replay drifts too, but tests/test_plan.c runs the real session and
 * compares every stage's tracked peak and after with the replay, so the drift shows at once.
 * The replays below mirror: calibrate.c (frame block, moments, CoM), gbuild.c (single pass or
 * groups), loss.c (phase_stack), object.c, parallax.c (its per-pixel spectra and group passes),
 * band.c (band power; a batch's bins, k tables per distinct rotation, set tables, sums and
 * per-thread scratch), standard.c (the parallax estimate, the coarse and full stages of the band
 * or loss search, the branch check, the exact loss over all BF pixels) and src/session/session.c
 * (the stage order, trims, the preview buffers). */
#include "plan/plan.h"

#include "common/err.h"
#include "common/parallel.h"
#include "fit/fit.h"
#include "gbuild/gbuild.h"
#include "parallax/parallax.h"
#include "ssb/ssb_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define MODEL_MAX_CACHE 64 /* mem.c's MAX_CACHE */

void ssb4d_plan_input_default(ssb4d_plan_input *in)
{
    memset(in, 0, sizeof *in);
}

/* ---- the model of the accounting layer ----------------------------------------------------- */

typedef struct {
    size_t limit, live, cached, stage_peak, session_peak;
    size_t cache[MODEL_MAX_CACHE];
    size_t n_cache;
    int failed;
} model;

static void note(model *m)
{
    size_t t = m->live + m->cached;
    if (t > m->stage_peak)
        m->stage_peak = t;
    if (t > m->session_peak)
        m->session_peak = t;
}

static void m_trim(model *m)
{
    m->cached = 0;
    m->n_cache = 0;
}

static void m_alloc(model *m, size_t b)
{
    if (b == 0)
        b = 1;
    for (size_t i = 0; i < m->n_cache; i++)
        if (m->cache[i] == b) {
            m->cache[i] = m->cache[--m->n_cache];
            m->cached -= b;
            m->live += b;
            note(m);
            return;
        }
    if (m->limit && m->live + m->cached + b > m->limit && m->n_cache)
        m_trim(m);
    if (m->limit && m->live + b > m->limit)
        m->failed = 1; /* the run would refuse here; keep counting to report the need */
    m->live += b;
    note(m);
}

static void m_free(model *m, size_t b, int keep)
{
    if (b == 0)
        b = 1;
    m->live -= b;
    if (keep && m->n_cache < MODEL_MAX_CACHE) {
        m->cache[m->n_cache++] = b;
        m->cached += b;
    }
}

/* ---- shapes ---------------------------------------------------------------------------------- */

typedef struct {
    size_t ny, nx, nxh, stride; /* G's plane: stride complex values */
    size_t n_bf, n_stored, n_fit, n_coarse;
    int nt;
    size_t band_nb, band_nr, band_nc; /* the band objective's bins, and rows / columns holding them */
    size_t px_nb;                     /* the parallax estimate's bins (0: it stops before its spectra) */
    int px_runs;                      /* the parallax estimate reads G (enough stored pixels) */
} shape;

static size_t p32(const shape *s) { return s->stride * 8; }
static size_t p16(const shape *s) { return s->stride * 4; }

/* band.c geom_init's bins for the band lo < |q| < hi on an ny x nx scan (the same arithmetic, so
 * the same count at the band's edges), and the rows and columns that hold them. */
static void band_bins(size_t ny, size_t nx, const double step[2], double lo, double hi, size_t *nb, size_t *nr,
                      size_t *nc)
{
    size_t nxh = nx / 2 + 1, n = 0, rows = 0, cols = 0;
    unsigned char *col = calloc(nxh, 1);
    for (size_t i = 0; i < ny; i++) {
        int row = 0;
        for (size_t j = 0; j < nxh; j++) {
            double qx = ssb_fftfreq(i, ny, step[0]), qy = ssb_fftfreq(j, nx, step[1]);
            double r = sqrt(qx * qx + qy * qy);
            if (r > lo && r < hi) {
                n++;
                row = 1;
                if (col && !col[j])
                    col[j] = 1, cols++;
            }
        }
        rows += row;
    }
    free(col);
    *nb = n, *nr = rows, *nc = col ? cols : nxh;
}

/* parallax.c: the bins select_bins keeps (the strongest of those off DC's 3x3, off the Nyquist
 * row and column and inside the SSB passband, at most max_bins and the max_bytes cap) for n_bf
 * pixels; without a geometry every bin of the half-plane counts. */
static size_t parallax_bins(size_t ny, size_t nx, size_t n_bf, const ssb4d_geometry *g)
{
    ssb4d_parallax_opts o;
    ssb4d_parallax_opts_default(&o);
    size_t want = o.max_bins ? o.max_bins : 1024;
    if (o.max_bytes && n_bf && want * n_bf * 8 > o.max_bytes)
        want = o.max_bytes / (n_bf * 8);
    if (want < 16)
        want = 16;
    size_t nxh = nx / 2 + 1, n = 0;
    if (!g)
        n = ny * nxh;
    else {
        double lambda = ssb4d_wavelength_A(g->kv), qmax = 2.0 * g->semiangle_mrad * 1e-3 / lambda;
        for (size_t i = 0; i < ny; i++)
            for (size_t j = 0; j < nxh; j++)
                n += (size_t)parallax_bin_eligible(i, j, ny, nx, g, qmax * qmax);
    }
    return n < want ? n : want;
}

static shape make_shape(size_t ny, size_t nx, size_t n_bf, size_t n_stored, size_t n_fit,
                        size_t n_coarse, int nt, const ssb4d_geometry *g, const ssb4d_fit_params *fp)
{
    shape s = {ny, nx, nx / 2 + 1, 0, n_bf, n_stored, n_fit, n_coarse, nt, 0, 0, 0, 0, 0};
    s.stride = (ny * s.nxh + 7) / 8 * 8;
    if (g) { /* standard.c auto_band */
        double lambda = ssb4d_wavelength_A(g->kv);
        double fov = fmin((double)ny * g->scan_step_A[0], (double)nx * g->scan_step_A[1]);
        double lo = fp->band_lo_inv_A > 0 ? fp->band_lo_inv_A : 1.5 / fov;
        double hi = fp->band_hi_inv_A > 0 ? fp->band_hi_inv_A : 2.0 * g->semiangle_mrad * 1e-3 / lambda;
        band_bins(ny, nx, g->scan_step_A, lo, hi, &s.band_nb, &s.band_nr, &s.band_nc);
    } else { /* no geometry: the whole half-plane, an upper bound */
        s.band_nb = ny * s.nxh, s.band_nr = ny, s.band_nc = s.nxh;
    }
    /* parallax.c runs on 8 or more stored pixels and reads its spectra from 4 bins up */
    s.px_runs = fp->use_parallax && n_stored >= 8;
    s.px_nb = s.px_runs ? parallax_bins(ny, nx, n_bf, g) : 0;
    if (s.px_nb < 4)
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

static size_t group_planes_of(const shape *s, size_t group_bytes)
{
    size_t g = group_bytes / p32(s) / 64 * 64;
    return g < 64 ? 64 : g;
}

static int resident_f32(const shape *s, const gmode *g) { return !g->half && g->n_res >= s->n_stored; }

/* gbuild.c: build_planes' block (rows of n pixels) and per-thread scratch. */
static void replay_build_planes(model *m, const shape *s, size_t n, size_t block_bytes)
{
    size_t row_bytes = n * s->nx * 4, rows = block_bytes / row_bytes;
    rows = rows < 1 ? 1 : rows > s->ny ? s->ny : rows;
    size_t in_bytes = ((s->nx + 16) * 4 + 63) / 64 * 64;
    size_t scratch = in_bytes + ((s->nxh + 8) * 8 + 63) / 64 * 64;
    m_alloc(m, rows * row_bytes);
    m_alloc(m, (size_t)s->nt * scratch);
    m_free(m, rows * row_bytes, 0);
    m_free(m, (size_t)s->nt * scratch, 0);
}

/* ssb4d_gbuild: G's planes stay live (returned). */
static void replay_gbuild(model *m, const shape *s, const gmode *g)
{
    size_t per = g->half ? p16(s) : p32(s);
    if (g->n_res)
        m_alloc(m, g->n_res * per);
    if (resident_f32(s, g) || s->n_stored == 0) {
        replay_build_planes(m, s, s->n_bf, g->block_bytes);
        return;
    }
    size_t span = g->group_planes;
    m_alloc(m, span * p32(s));
    for (size_t ib0 = 0; ib0 < s->n_bf; ib0 += span) {
        size_t n = ib0 + span < s->n_bf ? span : s->n_bf - ib0;
        replay_build_planes(m, s, n, g->block_bytes);
    }
    m_free(m, span * p32(s), 0);
}

static void replay_gfree(model *m, const shape *s, const gmode *g)
{
    if (g->n_res)
        m_free(m, g->n_res * (g->half ? p16(s) : p32(s)), 0);
}

/* A group pass over n_view pixels of G: a buffer unless the view is resident in float32 (the
 * resident planes are the innermost, so an inner view is resident when it fits in them). */
static int view_needs_group(const shape *s, const gmode *g, size_t n_view, int inner)
{
    if (g->half)
        return 1;
    if (g->n_res >= s->n_stored)
        return 0;
    return !(inner && n_view <= g->n_res);
}

/* gbuild.c G_group_load: a pass that meets streamed planes rebuilds them with a decode block and
 * scratch (freed, not cached); the largest block is that of the most streamed pixels a group holds. */
static void replay_group_pass(model *m, const shape *s, const gmode *g)
{
    size_t gb = g->group_planes * p32(s);
    m_alloc(m, gb);
    if (g->n_res < s->n_stored) {
        /* A group rebuilds the streamed pixels it holds, n of them, in blocks of
         * floor(block / row) rows: the block is not monotone in n (59 pixels can need more bytes
         * than 64), and which n occur depends on where the streamed pixels lie, so the replay
         * takes the n up to the most a group can hold that needs the largest block. */
        size_t nmax = s->n_stored - g->n_res, best = 1, best_bytes = 0;
        if (nmax > g->group_planes)
            nmax = g->group_planes;
        for (size_t n = 1; n <= nmax; n++) {
            size_t row_bytes = n * s->nx * 4, rows = g->block_bytes / row_bytes;
            rows = rows < 1 ? 1 : rows > s->ny ? s->ny : rows;
            if (rows * row_bytes > best_bytes)
                best_bytes = rows * row_bytes, best = n;
        }
        replay_build_planes(m, s, best, g->block_bytes);
    }
    m_free(m, gb, 1);
}

/* loss.c phase_stack: n parameter sets, native grid, real path, fast kernel. */
static void replay_loss(model *m, const shape *s, const gmode *g, size_t n, size_t n_view, int grp)
{
    size_t npix = s->ny * s->nx, nspec = s->ny * s->nxh;
    size_t nblocks = (n_view + 63) / 64;
    size_t nt = (size_t)s->nt < nblocks ? (size_t)s->nt : nblocks;
    for (size_t j = 0; j < n; j++) {
        m_alloc(m, npix * 8);  /* mean-phase sum */
        m_alloc(m, nspec * 8); /* exp(-i chi(q)) */
    }
    for (size_t t = 0; t < nt; t++) {
        m_alloc(m, nspec * 8);
        m_alloc(m, npix * 4);
        m_alloc(m, n * npix * 8);
        m_alloc(m, (s->ny + s->nxh) * 8);
    }
    if (grp)
        replay_group_pass(m, s, g);
    for (size_t t = 0; t < nt; t++) {
        m_free(m, nspec * 8, 1);
        m_free(m, npix * 4, 1);
        m_free(m, n * npix * 8, 1);
        m_free(m, (s->ny + s->nxh) * 8, 1);
    }
    for (size_t j = 0; j < n; j++) {
        m_free(m, nspec * 8, 1);
        m_free(m, npix * 8, 1);
    }
}

/* object.c at upsampling f, even-m aberrations (half-plane sum), fast kernel, all BF pixels. */
static void replay_object(model *m, const shape *s, const gmode *g, size_t f)
{
    size_t nyf = f * s->ny, nxf = f * s->nx, ncols = nxf / 2 + 1, npix = nyf * nxf;
    m_alloc(m, npix * 8);                       /* F */
    m_alloc(m, s->n_bf * ncols * 8);            /* phasor tables */
    m_alloc(m, nyf * ncols * 16);               /* the running sum */
    m_alloc(m, (size_t)s->nt * nxf * 2 * 8);    /* rows */
    if (view_needs_group(s, g, s->n_bf, 0))
        replay_group_pass(m, s, g);
    m_free(m, nyf * ncols * 16, 1);
    m_free(m, (size_t)s->nt * nxf * 2 * 8, 1);
    m_free(m, s->n_bf * ncols * 8, 0);
    m_free(m, npix * 8, 1);
}

/* How the standard fit searches (standard.c), as far as memory goes. */
typedef struct {
    size_t batch, trials;  /* global candidates in batches of batch */
    int d;                 /* Nelder–Mead's free parameters (C10, C12, φ12 unless locked; the rotation) */
    int fit_rotation;      /* the rotation is a search parameter: a k table per distinct rotation */
    int band;              /* the band objective (else the exact loss) */
    int branch_check;
} fitcfg;

/* band.c ssb4d_band_power on a view of n_view BF pixels: the band's bins, one k table, the sums
 * per bin, one group pass. */
static void replay_band_power(model *m, const shape *s, const gmode *g, size_t n_view, int grp)
{
    size_t nb1 = s->band_nb ? s->band_nb : 1, nv1 = n_view ? n_view : 1;
    size_t geom[5] = {nb1 * 8, nb1 * 4, nb1 * 4, 4 * nb1 * 8, (s->band_nr + s->band_nc + 1) * 8};
    for (int i = 0; i < 5; i++)
        m_alloc(m, geom[i]);
    m_alloc(m, 3 * nv1 * 8);
    m_alloc(m, nb1 * 8);
    if (grp)
        replay_group_pass(m, s, g);
    m_free(m, nb1 * 8, 0);
    m_free(m, 3 * nv1 * 8, 0);
    for (int i = 0; i < 5; i++)
        m_free(m, geom[i], 0);
}

/* band.c ssb4d_band_fit_rot: n parameter sets with nrot distinct rotations on a view of n_view
 * BF pixels. The set tables, the sums and the per-thread scratch go to the reuse cache (their
 * sizes follow n, so every batch size leaves its own); the k tables and the bins do not. */
static void replay_band(model *m, const shape *s, const gmode *g, size_t n_view, size_t n, size_t nrot, int grp)
{
    size_t nb1 = s->band_nb ? s->band_nb : 1, nv1 = n_view ? n_view : 1, nsum = n * nb1 * 3;
    size_t geom[5] = {nb1 * 8, nb1 * 4, nb1 * 4, 4 * nb1 * 8, (s->band_nr + s->band_nc + 1) * 8};
    size_t nblocks = (n_view + 63) / 64, nt = (size_t)s->nt;
    if (nt > nblocks)
        nt = nblocks ? nblocks : 1;
    for (int i = 0; i < 5; i++)
        m_alloc(m, geom[i]);
    for (size_t u = 0; u < nrot; u++)
        m_alloc(m, 3 * nv1 * 8);
    m_alloc(m, n * nb1 * 3 * 16); /* E, Qm, Qp */
    m_alloc(m, n * nb1 * 8);      /* qt */
    m_alloc(m, nsum * 8);         /* the totals */
    for (size_t t = 0; t < nt; t++) {
        m_alloc(m, 3 * nb1 * 8);                          /* A1, A2, q·k */
        m_alloc(m, 2 * (s->band_nr + s->band_nc + 1) * 16); /* row / column phasors */
        m_alloc(m, nsum * 8);                             /* the block's partial sums */
    }
    if (grp)
        replay_group_pass(m, s, g);
    for (size_t t = 0; t < nt; t++) {
        m_free(m, 3 * nb1 * 8, 1);
        m_free(m, 2 * (s->band_nr + s->band_nc + 1) * 16, 1);
        m_free(m, nsum * 8, 1);
    }
    m_free(m, n * nb1 * 3 * 16, 1);
    m_free(m, n * nb1 * 8, 1);
    m_free(m, nsum * 8, 1);
    for (size_t u = 0; u < nrot; u++)
        m_free(m, 3 * nv1 * 8, 0);
    for (int i = 0; i < 5; i++)
        m_free(m, geom[i], 0);
}

/* One batch of n candidates with nrot distinct rotations (fit.c thin_eval): the band objective in
 * one call; the exact loss in one call per rotation when the rotation is searched. */
static void replay_batch(model *m, const shape *s, const gmode *g, const fitcfg *c, size_t n_view, size_t n,
                         size_t nrot, int grp)
{
    if (c->band)
        replay_band(m, s, g, n_view, n, c->fit_rotation ? nrot : 1, grp);
    else if (c->fit_rotation)
        for (size_t i = 0; i < n; i++)
            replay_loss(m, s, g, 1, n_view, grp);
    else
        replay_loss(m, s, g, n, n_view, grp);
}

/* parallax.c: the bins' power over a subset of G (a group pass), then every pixel's spectra at
 * those bins (n_bf x bins complex64, live through a second group pass), freed at the end. */
static void replay_parallax(model *m, const shape *s, const gmode *g)
{
    if (!s->px_runs)
        return;
    int grp = view_needs_group(s, g, s->n_bf, 0);
    if (grp)
        replay_group_pass(m, s, g);
    if (!s->px_nb)
        return;
    size_t spectra = (s->n_bf ? s->n_bf : 1) * s->px_nb * 8;
    m_alloc(m, spectra);
    if (grp)
        replay_group_pass(m, s, g);
    m_free(m, spectra, 0);
}

/* Nelder–Mead (search.c) on a view as far as memory goes: the start (n_start = 0 when it is the
 * global search's best, answered by the cache), the initial simplex as one batch (the rotation's
 * step gives it a second rotation), then single points. A shrink evaluates d vertices as one
 * batch with up to d rotations: counted as one, so that the plan bounds what a shrink needs. */
static void replay_nm(model *m, const shape *s, const gmode *g, const fitcfg *c, size_t n_view, int n_start, int grp)
{
    if (n_start)
        replay_batch(m, s, g, c, n_view, 1, 1, grp);
    if (c->d <= 0)
        return;
    size_t d = (size_t)c->d;
    replay_batch(m, s, g, c, n_view, d, c->fit_rotation && d > 1 ? 2 : 1, grp);
    if (d > 1)
        replay_batch(m, s, g, c, n_view, d, c->fit_rotation ? d : 1, grp);
    replay_batch(m, s, g, c, n_view, 1, 1, grp);
}

/* standard.c ssb4d_fit: the parallax estimate on all of G; on the coarse subset the band power,
 * the global batches and Nelder–Mead; on all fit pixels (when the coarse subset is smaller) the
 * band power and Nelder–Mead; the branch check's phase (an object on all BF pixels); the exact
 * loss over all BF pixels. */
static void replay_fit(model *m, const shape *s, const gmode *g, const fitcfg *c)
{
    size_t coarse = s->n_coarse < s->n_fit ? s->n_coarse : s->n_fit;
    int grp = view_needs_group(s, g, s->n_fit, 1); /* both views lie within the fit radius */
    replay_parallax(m, s, g);
    if (c->band)
        replay_band_power(m, s, g, coarse, grp);
    size_t batch = c->batch ? c->batch : 1;
    for (size_t i = 0; i < c->trials / batch; i++)
        replay_batch(m, s, g, c, coarse, batch, batch, grp);
    if (c->trials % batch)
        replay_batch(m, s, g, c, coarse, c->trials % batch, c->trials % batch, grp);
    replay_nm(m, s, g, c, coarse, c->trials == 0, grp);
    if (coarse < s->n_fit) {
        if (c->band)
            replay_band_power(m, s, g, s->n_fit, grp);
        replay_nm(m, s, g, c, s->n_fit, 1, grp);
    }
    if (c->branch_check) {
        m_alloc(m, s->ny * s->nx * 4);
        replay_object(m, s, g, 1);
        m_free(m, s->ny * s->nx * 4, 0);
    }
    replay_loss(m, s, g, 1, s->n_bf, view_needs_group(s, g, s->n_bf, 0));
}

/* session.c's preview: the phase image, the object, the FFT of the phase for the display. */
static void replay_preview(model *m, const shape *s, const gmode *g, size_t f, int fft)
{
    size_t nyf = f * s->ny, nxf = f * s->nx;
    m_alloc(m, nyf * nxf * 4);
    replay_object(m, s, g, f);
    if (fft) {
        m_alloc(m, nyf * (nxf / 2 + 1) * 8);
        m_free(m, nyf * (nxf / 2 + 1) * 8, 1);
    }
    m_free(m, nyf * nxf * 4, 1);
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
    size_t cal_block, cal_extra, E;
    size_t f;
    int nt;
    ssb4d_session_script script;
    ssb4d_machine_profile mp;
} problem;

static void stage_begin(model *m) { m->stage_peak = m->live + m->cached; }

static void stage_end(model *m, ssb4d_plan *p, const char *name, double seconds, const char *tiles)
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
    if (resident_f32(s, g))
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
    model mm = {0}, *m = &mm;
    m->limit = limit;
    const shape *s = &pr->s;
    char t[200], gdesc[160];
    p->n_stages = 0;

    stage_begin(m);
    m_alloc(m, pr->E);
    stage_end(m, p, "load", 0.0, pr->E ? "encoded file mapped and verified" : "data read from disk");

    stage_begin(m);
    m_alloc(m, pr->cal_block);
    if (pr->cal_extra)
        m_alloc(m, pr->cal_extra);
    m_free(m, pr->cal_block, 0);
    if (pr->cal_extra)
        m_free(m, pr->cal_extra, 0);
    if (pr->cal_block >= MIB)
        snprintf(t, sizeof t, "frame blocks of %.0f MiB", (double)pr->cal_block / MIB);
    else
        snprintf(t, sizeof t, "frame blocks of %.0f KiB", (double)pr->cal_block / 1024);
    stage_end(m, p, "calibrate",
              secs(&pr->mp, (double)(pr->in->scan[0] * pr->in->scan[1]) * (double)(pr->in->det[0] * pr->in->det[1]),
                   pr->mp.calibrate_ns, pr->nt), t);

    stage_begin(m);
    replay_gbuild(m, s, &d->fit_g);
    describe_g(s, &d->fit_g, gdesc, sizeof gdesc);
    snprintf(t, sizeof t, "%s; decode block %.0f MiB", gdesc, (double)d->fit_g.block_bytes / MIB);
    stage_end(m, p, "G build", gbuild_secs(pr, s, &d->fit_g), t);

    if (!pr->in->no_fit) {
        stage_begin(m);
        replay_fit(m, s, &d->fit_g, &d->fit);
        m_trim(m);
        snprintf(t, sizeof t, "parallax spectra %.1f MiB; %s batches of %zu on %zu coarse pixels, then %zu fit pixels; "
                              "the exact loss on all %zu", (double)(s->px_nb * s->n_bf * 8) / MIB,
                 d->fit.band ? "band" : "loss", d->fit.batch, s->n_coarse < s->n_fit ? s->n_coarse : s->n_fit, s->n_fit,
                 s->n_bf);
        stage_end(m, p, "fit", fit_secs(pr, s, &d->fit_g, d->fit.trials), t);
    }

    int same = !memcmp(&d->fit_g, &d->prev_g, sizeof d->prev_g);
    double obj = secs(&pr->mp, (double)s->n_bf * (double)(s->ny * s->nx * pr->f * pr->f), pr->mp.object_ns, pr->nt);
    stage_begin(m);
    if (!same) {
        replay_gfree(m, s, &d->fit_g);
        replay_gbuild(m, s, &d->prev_g);
    }
    replay_preview(m, s, &d->prev_g, pr->f, pr->script.fft);
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
            replay_preview(m, s, &d->prev_g, pr->f, pr->script.fft);
        snprintf(name, sizeof name, "%zu drags", sc->drags);
        stage_end(m, p, name, (double)sc->drags * (obj + pass_rebuild_secs(pr, s, &d->prev_g)),
                  "previews reuse the cached buffers");
    }
    if (sc->releases) {
        stage_begin(m);
        for (size_t i = 0; i < sc->releases; i++) {
            replay_preview(m, s, &d->prev_g, pr->f, pr->script.fft);
            replay_loss(m, s, &d->prev_g, 1, s->n_bf, view_needs_group(s, &d->prev_g, s->n_bf, 0));
        }
        snprintf(name, sizeof name, "%zu releases", sc->releases);
        stage_end(m, p, name,
                  (double)sc->releases * (obj + secs(&pr->mp, (double)s->n_bf * (double)(s->ny * s->nx), pr->mp.loss_ns, pr->nt) +
                                          2 * pass_rebuild_secs(pr, s, &d->prev_g)),
                  "preview and the loss over all BF pixels");
    }

    int have_region = pr->rs.ny > 0;
    if (have_region) {
        const shape *rs = &pr->rs;
        stage_begin(m);
        if (d->region_frees) {
            replay_gfree(m, s, &d->prev_g);
            m_trim(m);
        }
        replay_gbuild(m, rs, &d->region_g);
        replay_fit(m, rs, &d->region_g, &d->fit);
        replay_gfree(m, rs, &d->region_g);
        m_trim(m);
        describe_g(rs, &d->region_g, gdesc, sizeof gdesc);
        snprintf(t, sizeof t, "%s%s", d->region_frees ? "full field's G freed first; " : "", gdesc);
        snprintf(name, sizeof name, "region refit %zux%zu", rs->ny, rs->nx);
        stage_end(m, p, name, gbuild_secs(pr, rs, &d->region_g) + fit_secs(pr, rs, &d->region_g, d->fit.trials), t);

        stage_begin(m);
        if (d->region_frees)
            replay_gbuild(m, s, &d->prev_g);
        replay_preview(m, s, &d->prev_g, pr->f, pr->script.fft);
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

size_t plan_calib_extra(size_t npos, int rotation_fitted) { return rotation_fitted ? npos * (3 * 8 + 2 * 8) : 0; }

size_t plan_calib_need(size_t budget, size_t encoded, size_t det_pixels, size_t npos, int rotation_fitted,
                       size_t *block)
{
    *block = plan_calib_block(budget, encoded, det_pixels, npos);
    return encoded + *block + plan_calib_extra(npos, rotation_fitted);
}

size_t plan_plane_bytes(size_t ny, size_t nx) { return (ny * (nx / 2 + 1) + 7) / 8 * 8 * 8; }

void plan_input_from_calibration(ssb4d_plan_input *in, const ssb4d_calibration *cal,
                                 const size_t shape[4], double fit_radius)
{
    in->scan[0] = shape[0], in->scan[1] = shape[1], in->det[0] = shape[2], in->det[1] = shape[3];
    in->n_bf = cal->n_bf;
    in->n_stored = 0;
    for (size_t i = 0; i < cal->n_bf; i++)
        in->n_stored += ssb4d_bf_pixel_active(&cal->geom, cal->det_shape[1], cal->bf_pix[i]);
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

size_t ssb4d_plan_region_side(size_t n) { return n >= 512 ? 256 : n >= 64 ? n / 2 : 0; }

ssb4d_status ssb4d_plan_make(const ssb4d_plan_input *in, ssb4d_plan *p, ssb4d_err *err)
{
    memset(p, 0, sizeof *p);
    if (in->scan[0] < 2 || in->scan[1] < 2 || in->det[0] < 2 || in->det[1] < 2)
        return ssb4d_fail(err, SSB4D_EINVAL, "the data shape must be at least 2x2 scan x 2x2 detector");
    if (in->scan[0] > 65536 || in->scan[1] > 65536 || in->det[0] > 4096 || in->det[1] > 4096)
        return ssb4d_fail(err, SSB4D_EINVAL, "the data shape %zux%zux%zux%zu is beyond what ssb4d plans for",
                          in->scan[0], in->scan[1], in->det[0], in->det[1]);
    if (in->n_bf == 0 || in->n_bf > in->det[0] * in->det[1])
        return ssb4d_fail(err, SSB4D_EINVAL, "the BF pixel count must be between 1 and the detector's %zu pixels",
                          in->det[0] * in->det[1]);
    if (in->upsample != 0 && in->upsample != 1 && in->upsample != 2 && in->upsample != 3 &&
        in->upsample != 4 && in->upsample != 8)
        return ssb4d_fail(err, SSB4D_EINVAL, "the preview upsampling must be 1, 2, 3, 4 or 8");
    problem pr;
    memset(&pr, 0, sizeof pr);
    pr.in = in;
    pr.nt = ssb4d_threads_resolve(in->threads);
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
    size_t n_fit = in->n_fit_bf ? in->n_fit_bf : (size_t)(fp->fit_radius * fp->fit_radius * (double)in->n_bf);
    if (n_fit < 1)
        n_fit = 1;
    size_t n_coarse = in->n_coarse_bf ? in->n_coarse_bf : fp->coarse_bf ? fp->coarse_bf : 256;
    if (n_fit > n_coarse && n_coarse) {
        size_t mstep = (n_fit + n_coarse - 1) / n_coarse;
        n_coarse = (n_fit + mstep - 1) / mstep;
    } else
        n_coarse = n_fit;
    pr.s = make_shape(in->scan[0], in->scan[1], in->n_bf, n_stored, n_fit, n_coarse, pr.nt, in->geometry, fp);
    if (in->region[0] && in->region[1])
        pr.rs = make_shape(in->region[0], in->region[1], in->n_bf, n_stored, n_fit, n_coarse, pr.nt, in->geometry, fp);
    pr.E = in->encoded_bytes;
    pr.f = in->upsample ? (size_t)in->upsample : 2;
    size_t fr = in->det[0] * in->det[1], npos = in->scan[0] * in->scan[1];
    size_t B = in->memory_bytes ? in->memory_bytes : ssb4d_mem_available();
    pr.cal_block = plan_calib_block(B, in->encoded_bytes, fr, npos);
    pr.cal_extra = plan_calib_extra(npos, in->rotation_fitted); /* moments then CoM, both live at the end */

    p->memory_bytes = B;
    snprintf(p->profile_source, sizeof p->profile_source, "%s", pr.mp.source);
    p->calib_block_bytes = pr.cal_block;
    p->encoded_bytes = pr.E;
    p->g_bytes = n_stored * p32(&pr.s);
    p->g_half_bytes = n_stored * p16(&pr.s);

    decisions d;
    memset(&d, 0, sizeof d);
    /* standard.c: trials around the parallax estimate, at least 200 over the whole box without
     * one (a given start, or no parallax); Nelder–Mead over the free parameters. */
    d.fit.batch = in->fit_batch ? in->fit_batch : fp->batch ? fp->batch : 8;
    d.fit.trials = fp->trials;
    if ((fp->start_given || !pr.s.px_nb) && d.fit.trials < 200)
        d.fit.trials = 200;
    d.fit.fit_rotation = !fp->rotation_given;
    d.fit.band = pr.in_band;
    d.fit.branch_check = fp->branch_check;
    d.fit.d = d.fit.fit_rotation;
    for (int j = 0; j < 3; j++)
        d.fit.d += !fp->locked[j];
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
    run_session(&pr, &dmin, 0, &tmp, &failed);
    p->min_memory_bytes = tmp.session_peak_bytes;

    int ok = 0;
    if (in->preview != SSB4D_PREVIEW_HALF) {
        /* Resident float32, with the decode block shrunk until the G build fits. */
        for (size_t bb = block; !ok && bb >= ((size_t)1 << 20); bb /= 4) {
            d.fit_g.block_bytes = d.prev_g.block_bytes = d.region_g.block_bytes = bb;
            ok = try_plan(&pr, &d, B, p);
        }
        if (!ok)
            d.fit_g.block_bytes = d.prev_g.block_bytes = d.region_g.block_bytes = block;
        snprintf(p->mode, sizeof p->mode, "resident");
    }
    if (!ok) {
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
    if (!ok) {
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
