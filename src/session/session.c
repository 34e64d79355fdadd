/* session.c — a viewer's session replayed from a script through the session handle (handle.c):
 * load, calibrate, G build, fit, upsampled preview with FFT, drags, releases, region refit, next
 * full preview, save. What stays resident is the encoded file plus G; each stage's transients are
 * freed (or parked in the reuse cache, as a viewer would keep them) when it ends. `ssb4d session`
 * and `ssb4d bench run` run this.
 *
 * The plan (src/plan/plan.c) composes the stages' workspace queries in this script's order (the
 * preview's own buffers are sized by plan_preview_sizes); tests/test_plan.c compares every stage's
 * tracked peak with the plan's, so a change in the handle or a stage that moves memory shows up
 * there. */
#include "common/err.h"
#include "common/fftw_lock.h"
#include "common/sha256.h"
#include "fit/fit.h"
#include "io/calfile.h"
#include "plan/plan.h"
#include "session/handle_internal.h"

#include <fftw3.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void ssb4d_session_params_default(ssb4d_session_params *p)
{
    memset(p, 0, sizeof *p);
    ssb4d_session_opts_default(&p->session);
}

/* ---- stages --------------------------------------------------------------------------------- */

typedef struct {
    const ssb4d_session_params *p;
    ssb4d_session_report *r;
    ssb4d_session *s;
    ssb4d_mem *mem;
} run;

/* Each stage of the script is one stage of the handle's memory report: the calls inside it are
 * grouped under its name. */
static void begin(run *x, const char *name)
{
    if (x->p->stage)
        x->p->stage(x->p->user, name);
    ssb4d_session_stage_begin(x->s, name);
}

static void record(run *x)
{
    size_t i = ssb4d_mem_stage_count(x->mem);
    if (i && x->r->n_stages < SSB4D_SESSION_MAX_STAGES)
        x->r->stages[x->r->n_stages++] = *ssb4d_mem_stage(x->mem, i - 1);
}

static void end(run *x)
{
    ssb4d_session_stage_end(x->s);
    record(x);
}

/* One preview as the viewer draws it: the phase image at aberrations ab and upsampling f, and
 * (fft) the phase's spectrum for the FFT panel. hex (may be NULL) gets the phase's SHA-256; loss
 * (may be NULL) the exact loss, a release (at f = 1 the handle makes both in one pass). */
static ssb4d_status preview(run *x, const ssb4d_aberrations *ab, int f, int fft, char *hex, double *loss,
                            ssb4d_err *err)
{
    size_t nyf, nxf;
    /* G first (the preview copy replaces the fit's, or is rebuilt after a region refit freed
     * it), then the buffers: the viewer's order, and the plan's. */
    ssb4d_status st = ssb4d_session_build(x->s, err);
    if (!st)
        st = ssb4d_session_image_shape(x->s, f, &nyf, &nxf, err);
    if (st)
        return st;
    const plan_preview_ws w = plan_preview_sizes(nyf / (size_t)f, nxf / (size_t)f, (size_t)f);
    float *ph = ssb4d_mem_alloc(x->mem, w.phase, "preview phase", err);
    if (!ph)
        return SSB4D_ENOMEM;
    ssb4d_preview_req q;
    ssb4d_preview_req_default(&q);
    q.ab = ab;
    q.upsample = f;
    q.want_loss = loss != NULL;
    st = ssb4d_session_preview(x->s, &q, ph, loss, err);
    if (!st && fft) {
        fftwf_complex *spec = ssb4d_mem_alloc(x->mem, w.spectrum, "preview FFT", err);
        if (!spec)
            st = SSB4D_ENOMEM;
        else {
            ssb_fftw_lock();
            fftwf_plan pl = fftwf_plan_dft_r2c_2d((int)nyf, (int)nxf, ph, spec, FFTW_ESTIMATE);
            ssb_fftw_unlock();
            if (!pl)
                st = ssb_fail(err, SSB4D_EINTERNAL, "FFTW could not plan the preview's FFT");
            else {
                fftwf_execute(pl);
                ssb_fftw_lock();
                fftwf_destroy_plan(pl);
                ssb_fftw_unlock();
            }
            ssb4d_mem_free(x->mem, spec, 1);
        }
    }
    if (!st && hex) {
        ssb4d_sha256 *h = ssb_sha256_new();
        ssb_sha256_update(h, ph, nyf * nxf * sizeof *ph);
        ssb_sha256_final_hex(h, hex);
    }
    ssb4d_mem_free(x->mem, ph, 1);
    return st;
}

static ssb4d_status save_calibration(run *x, const ssb4d_calibration *cal, const ssb4d_fit_result *fr,
                                     const ssb4d_fit_params *fp, ssb4d_err *err)
{
    ssb4d_calfile cf;
    ssb_calfile_init(&cf);
    ssb4d_status st = ssb_calfile_from_calibration(&cf, cal, err);
    if (!st) {
        ssb_calfile_set_fit(&cf, fr, fp, NULL, cal->n_bf);
        if (x->p->out_dir) {
            char path[4096];
            mkdir(x->p->out_dir, 0777);
            snprintf(path, sizeof path, "%s/calibration.json", x->p->out_dir);
            st = ssb_calfile_write(path, &cf, err);
        } else {
            char *text = ssb_calfile_to_json(&cf); /* the work of a save, without the file */
            if (!text)
                st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
            free(text);
        }
    }
    ssb_calfile_free(&cf);
    return st;
}

/* The region of the script: its rectangle, or a centred one of the planner's side. 0: none
 * (the scan is below 64x64, or the script has no region). */
static int script_region(const ssb4d_session_script *s, const size_t shape[4], size_t rect[4])
{
    memset(rect, 0, 4 * sizeof *rect);
    if (!s->region)
        return 0;
    memcpy(rect, s->region_rect, 4 * sizeof *rect);
    if (!rect[1] && !rect[3]) {
        size_t hr = ssb_plan_region_side(shape[0]), hc = ssb_plan_region_side(shape[1]);
        rect[0] = (shape[0] - hr) / 2, rect[1] = rect[0] + hr;
        rect[2] = (shape[1] - hc) / 2, rect[3] = rect[2] + hc;
    }
    if (rect[1] > rect[0] && rect[3] > rect[2])
        return 1;
    memset(rect, 0, 4 * sizeof *rect);
    return 0;
}

/* The script's stages from the fit on: the first preview, drags, releases. */
static ssb4d_status previews(run *x, const ssb4d_session_script *s, const ssb4d_fit_result *fr, ssb4d_err *err)
{
    ssb4d_session_report *r = x->r;
    char name[48];
    snprintf(name, sizeof name, "preview (%dx%s)", r->upsample, s->fft ? ", FFT" : "");
    begin(x, name); /* the preview copy of G replaces the fit's here when the plan holds one */
    ssb4d_status st = preview(x, &fr->ab, r->upsample, s->fft, x->p->hashes ? r->first_preview_sha256 : NULL, NULL, err);
    end(x);
    /* Drags move C10 through ±1 nm and come back; releases add the loss over all BF pixels. */
    if (!st && s->drags) {
        snprintf(name, sizeof name, "%zu drags", s->drags);
        begin(x, name);
        for (size_t i = 0; i < s->drags && !st; i++) {
            ssb4d_aberrations ab = fr->ab;
            ab.C_nm[SSB4D_C10] += sin(2 * M_PI * (double)(i + 1) / (double)s->drags);
            st = preview(x, &ab, r->upsample, s->fft, NULL, NULL, err);
        }
        end(x);
    }
    if (!st && s->releases) {
        snprintf(name, sizeof name, "%zu releases", s->releases);
        begin(x, name);
        for (size_t i = 0; i < s->releases && !st; i++) {
            ssb4d_aberrations ab = fr->ab;
            ab.C_nm[SSB4D_C10] += 0.2 * (double)(s->releases - 1 - i); /* the last one at the fit */
            /* the image and the exact loss at ab: one pass at native sampling (the plan's) */
            int fused = r->upsample == 1;
            st = preview(x, &ab, r->upsample, s->fft, NULL, fused ? &r->release_loss : NULL, err);
            ssb4d_session_set(x->s, &ab, NULL);
            if (!st && !fused)
                st = ssb4d_session_loss(x->s, &r->release_loss, err);
        }
        ssb4d_session_set(x->s, &fr->ab, NULL);
        end(x);
    }
    return st;
}

/* The region refit (the full field's G freed first when the plan says so) and the next full
 * preview (G rebuilt from the data when it was freed: the same bits). */
static ssb4d_status region(run *x, const ssb4d_session_script *s, const ssb4d_fit_result *fr, ssb4d_err *err)
{
    ssb4d_session_report *r = x->r;
    const size_t *q = r->region_rect;
    char name[48];
    snprintf(name, sizeof name, "region refit %zux%zu", q[1] - q[0], q[3] - q[2]);
    begin(x, name);
    ssb4d_fit_result rr;
    ssb4d_status st = ssb4d_session_fit_region(x->s, q, NULL, &rr, err);
    end(x);
    if (st)
        return st;
    r->region_C10_nm = rr.ab.C_nm[SSB4D_C10], r->region_C12_nm = rr.ab.C_nm[SSB4D_C12];
    r->region_phi12_deg = rr.ab.phi_deg[SSB4D_C12];
    ssb4d_fit_result_free(&rr);

    begin(x, "next full preview");
    int rebuilt = r->plan.region_frees_g;
    char hex[65] = "";
    st = preview(x, &fr->ab, r->upsample, s->fft, x->p->hashes ? hex : NULL, NULL, err);
    end(x);
    if (!st && x->p->hashes) {
        memcpy(r->phase_sha256, hex, sizeof hex);
        r->rebuilt_same_bits = rebuilt && !strcmp(hex, r->first_preview_sha256);
    }
    return st;
}

/* Open, calibrate (the plan is made there, from the script), check the region. */
static ssb4d_status open_and_calibrate(run *x, const char *data_path, const ssb4d_session_script *s,
                                       ssb4d_fit_params *fp, ssb4d_err *err)
{
    const ssb4d_session_params *p = x->p;
    ssb4d_session_report *r = x->r;
    ssb4d_session_opts o = p->session;
    o.script = s;
    ssb4d_fit_params_default(fp);
    o.fit = fp;
    /* load: the encoded file is mapped and verified; it stays resident for the session. */
    ssb4d_status st = ssb4d_session_open(data_path, &o, &x->s, err);
    if (st) { /* the load stage refused (nothing held): its record, all zero */
        snprintf(r->stages[0].name, sizeof r->stages[0].name, "load");
        r->n_stages = 1;
        return st;
    }
    x->mem = ssb4d_session_mem(x->s);
    record(x);
    r->encoded_bytes = session_handle_encoded(x->s);
    ssb4d_session_shape(x->s, r->shape);
    begin(x, "calibrate");
    st = ssb4d_session_calibrate(x->s, err);
    end(x);
    if (st)
        return st;
    const ssb4d_calibration *cal = ssb4d_session_calibration(x->s);
    r->plan = *ssb4d_session_plan(x->s);
    r->n_bf = cal->n_bf;
    r->n_stored = r->plan.g_bytes / plan_plane_bytes(r->shape[0], r->shape[1]);
    r->g_bytes = r->plan.g_bytes;
    r->upsample = s->upsample ? s->upsample : ssb4d_upsample_auto(&cal->geom);
    /* A bad region of the script is refused now, before the long stages. */
    if (script_region(s, r->shape, r->region_rect))
        st = ssb4d_session_check_region(x->s, r->region_rect, err);
    ssb4d_session_fit_params(x->s, NULL, fp); /* as the fits run: threads, rotation */
    return st;
}

ssb4d_status ssb4d_session_run(const char *data_path, const ssb4d_session_params *p,
                               const ssb4d_session_script *s, ssb4d_session_report *r,
                               ssb4d_err *err)
{
    memset(r, 0, sizeof *r);
    run x = {p, r, NULL, NULL};
    ssb4d_fit_params fp;
    ssb4d_fit_result fr;
    memset(&fr, 0, sizeof fr);
    ssb4d_status st = open_and_calibrate(&x, data_path, s, &fp, err);

    /* G build: the fit's float32 G (the outer BF pixels streamed when the budget says so). */
    if (!st) {
        begin(&x, "G build");
        st = ssb4d_session_build(x.s, err);
        end(&x);
    }
    if (!st) {
        r->resident_bytes = r->encoded_bytes + ssb4d_G_bytes(session_handle_G(x.s));
        if (p->hashes) {
            ssb4d_G_sha256(session_handle_G(x.s), r->g_sha256); /* outside any stage */
            ssb4d_G_blocks_sha256(session_handle_G(x.s), r->g_blocks_sha256);
            ssb4d_mem_trim(x.mem);                              /* its group buffer goes back */
        }
        begin(&x, "fit");
        st = ssb4d_session_fit(x.s, NULL, &fr, err); /* the fit's tiles go back after it */
        end(&x);
    }
    if (!st) {
        r->C10_nm = fr.ab.C_nm[SSB4D_C10], r->C12_nm = fr.ab.C_nm[SSB4D_C12];
        r->phi12_deg = fr.ab.phi_deg[SSB4D_C12], r->loss = fr.loss;
        memcpy(r->trace_sha256, fr.trace_sha256, sizeof r->trace_sha256);
        st = previews(&x, s, &fr, err);
    }
    if (!st && r->region_rect[1])
        st = region(&x, s, &fr, err);
    else if (!st && p->hashes)
        memcpy(r->phase_sha256, r->first_preview_sha256, sizeof r->phase_sha256);
    if (!st && s->save) {
        begin(&x, "save calibration");
        st = save_calibration(&x, ssb4d_session_calibration(x.s), &fr, &fp, err);
        end(&x);
    }
    r->does_not_fit = st == SSB4D_ENOMEM && strstr(err->msg, "does not fit") != NULL;
    for (size_t i = 0; i < r->n_stages; i++) {
        if (r->stages[i].peak_bytes > r->session_peak_bytes)
            r->session_peak_bytes = r->stages[i].peak_bytes;
        if (r->stages[i].rss_peak_bytes > r->session_rss_peak_bytes)
            r->session_rss_peak_bytes = r->stages[i].rss_peak_bytes;
    }
    ssb4d_fit_result_free(&fr);
    ssb4d_session_close(x.s);
    return st;
}
