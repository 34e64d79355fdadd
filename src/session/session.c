/* session.c — the seed document's viewer session, replayed stage by stage under a memory budget
 * (issue 5): load, calibrate, G build, fit, upsampled preview with FFT, drags, releases, region
 * refit, next full preview, save. What stays resident is the encoded file plus G; each stage's
 * transients are freed (or parked in the reuse cache, as a viewer would keep them) when it ends.
 *
 * The stage order and the trims here are what src/plan/plan.c's run_session composes the stages'
 * workspace queries in (the preview's own buffers are sized by plan_preview_sizes);
 * tests/test_plan.c compares the two stage by stage, so a change here that moves memory shows
 * up there. */
#include "common/err.h"
#include "common/fftw_lock.h"
#include "common/sha256.h"
#include "fit/fit.h"
#include "gbuild/gbuild.h"
#include "io/calfile.h"
#include "plan/plan.h"
#include "source/source.h"

#include <fftw3.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void ssb4d_session_params_default(ssb4d_session_params *p)
{
    memset(p, 0, sizeof *p);
    ssb4d_calib_params_default(&p->calib);
}

/* ---- stages --------------------------------------------------------------------------------- */

typedef struct {
    const ssb4d_session_params *p;
    ssb4d_session_report *r;
    ssb4d_mem *mem;
} run;

static void begin(run *x, const char *name)
{
    if (x->p->stage)
        x->p->stage(x->p->user, name);
    ssb4d_mem_stage_begin(x->mem, name);
}

static void end(run *x)
{
    ssb4d_mem_stage_end(x->mem);
    size_t i = ssb4d_mem_stage_count(x->mem);
    if (i && x->r->n_stages < SSB4D_SESSION_MAX_STAGES)
        x->r->stages[x->r->n_stages++] = *ssb4d_mem_stage(x->mem, i - 1);
}

/* One preview as the viewer draws it: the phase image, the object at upsampling f, and (fft)
 * the phase's spectrum for the FFT panel. hex (may be NULL) gets the phase's SHA-256. */
static ssb4d_status preview(run *x, const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab,
                            int f, int fft, char *hex, ssb4d_err *err)
{
    size_t ny, nx;
    ssb4d_G_scan_shape(G, &ny, &nx);
    size_t nyf = (size_t)f * ny, nxf = (size_t)f * nx;
    const plan_preview_ws w = plan_preview_sizes(ny, nx, (size_t)f);
    float *ph = ssb4d_mem_alloc(x->mem, w.phase, "preview phase", err);
    if (!ph)
        return SSB4D_ENOMEM;
    ssb4d_ssb_opts so;
    ssb4d_ssb_opts_default(&so);
    so.threads = x->p->threads;
    ssb4d_status st = ssb4d_object(G, g, ab, NULL, f, &so, x->mem, NULL, ph, err);
    if (!st && fft) {
        fftwf_complex *spec = ssb4d_mem_alloc(x->mem, w.spectrum, "preview FFT", err);
        if (!spec)
            st = SSB4D_ENOMEM;
        else {
            ssb4d_fftw_lock();
            fftwf_plan pl = fftwf_plan_dft_r2c_2d((int)nyf, (int)nxf, ph, spec, FFTW_ESTIMATE);
            ssb4d_fftw_unlock();
            if (!pl)
                st = ssb4d_fail(err, SSB4D_EINTERNAL, "FFTW could not plan the preview's FFT");
            else {
                fftwf_execute(pl);
                ssb4d_fftw_lock();
                fftwf_destroy_plan(pl);
                ssb4d_fftw_unlock();
            }
            ssb4d_mem_free(x->mem, spec, 1);
        }
    }
    if (!st && hex) {
        ssb4d_sha256 *h = ssb4d_sha256_new();
        ssb4d_sha256_update(h, ph, nyf * nxf * sizeof *ph);
        ssb4d_sha256_final_hex(h, hex);
    }
    ssb4d_mem_free(x->mem, ph, 1);
    return st;
}

static ssb4d_status build(run *x, ssb4d_source *src, const ssb4d_calibration *cal, int half,
                          size_t resident, size_t g_bytes, ssb4d_G **G, ssb4d_err *err)
{
    ssb4d_gbuild_opts go;
    plan_gbuild_opts(&x->r->plan, half, resident, g_bytes, x->p->threads, &go);
    return ssb4d_gbuild(src, &cal->geom, cal->bf_pix, cal->n_bf, &go, x->mem, G, err);
}

static ssb4d_status save_calibration(run *x, const ssb4d_calibration *cal, const ssb4d_fit_result *fr,
                                     const ssb4d_fit_params *fp, ssb4d_err *err)
{
    ssb4d_calfile cf;
    ssb4d_calfile_init(&cf);
    ssb4d_status st = ssb4d_calfile_from_calibration(&cf, cal, err);
    if (!st) {
        ssb4d_calfile_set_fit(&cf, fr, fp, NULL, cal->n_bf);
        if (x->p->out_dir) {
            char path[4096];
            mkdir(x->p->out_dir, 0777);
            snprintf(path, sizeof path, "%s/calibration.json", x->p->out_dir);
            st = ssb4d_calfile_write(path, &cf, err);
        } else {
            char *text = ssb4d_calfile_to_json(&cf); /* the work of a save, without the file */
            if (!text)
                st = ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
            free(text);
        }
    }
    ssb4d_calfile_free(&cf);
    return st;
}

ssb4d_status ssb4d_session_run(const char *data_path, const ssb4d_session_params *p,
                               const ssb4d_session_script *s, ssb4d_session_report *r,
                               ssb4d_err *err)
{
    memset(r, 0, sizeof *r);
    size_t budget = p->memory_bytes ? p->memory_bytes : ssb4d_mem_available();
    run x = {p, r, ssb4d_mem_create(budget)};
    if (!x.mem)
        return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_source *src = NULL, *view = NULL;
    ssb4d_calibration cal;
    int have_cal = 0;
    ssb4d_G *G = NULL, *RG = NULL;
    ssb4d_fit_result fr, rr;
    memset(&fr, 0, sizeof fr);
    memset(&rr, 0, sizeof rr);
    ssb4d_status st;

    /* load: the encoded file is mapped and verified; it stays resident for the session. */
    begin(&x, "load");
    st = ssb4d_source_open(data_path, &src, err);
    const qem_file *q = st ? NULL : ssb4d_source_qem(src);
    if (q) {
        r->encoded_bytes = qem_get_info(q)->file_bytes;
        st = ssb4d_mem_external(x.mem, r->encoded_bytes, 1, "the encoded data", err);
        r->does_not_fit = st == SSB4D_ENOMEM;
        if (st)
            r->encoded_bytes = 0; /* not counted: nothing to uncount */
    }
    end(&x);
    if (st)
        goto out;
    ssb4d_source_shape(src, r->shape);

    /* The calibration's frame block (a quarter of what the budget leaves, at most 64 MiB; CoM
     * planes when it fits the rotation) must fit beside the encoded data. */
    size_t fr_px = r->shape[2] * r->shape[3], npos = r->shape[0] * r->shape[1];
    size_t cal_block;
    size_t cal_need = plan_calib_need(budget, r->encoded_bytes, fr_px, npos, isnan(p->calib.rotation_deg), &cal_block);
    if (cal_need > budget) {
        r->does_not_fit = 1;
        st = ssb4d_fail(err, SSB4D_ENOMEM, "the session does not fit in %.3f GiB: calibrating needs %.3f GiB "
                                           "(the encoded data and one block of frames)",
                        budget / 1073741824.0, cal_need / 1073741824.0);
        goto out;
    }
    begin(&x, "calibrate");
    ssb4d_calib_params cp = p->calib;
    cp.mem = x.mem;
    cp.threads = p->threads;
    cp.block_bytes = cal_block;
    st = ssb4d_calibrate(src, &cp, &cal, err);
    have_cal = !st;
    end(&x);
    if (st)
        goto out;

    /* Plan with the calibrated counts: every later size comes from here. */
    r->n_bf = cal.n_bf;
    r->upsample = s->upsample ? s->upsample : ssb4d_upsample_auto(&cal.geom);
    if (s->region) {
        memcpy(r->region_rect, s->region_rect, sizeof r->region_rect);
        if (!r->region_rect[1] && !r->region_rect[3]) {
            size_t hr = ssb4d_plan_region_side(r->shape[0]), hc = ssb4d_plan_region_side(r->shape[1]);
            r->region_rect[0] = (r->shape[0] - hr) / 2, r->region_rect[1] = r->region_rect[0] + hr;
            r->region_rect[2] = (r->shape[1] - hc) / 2, r->region_rect[3] = r->region_rect[2] + hc;
        }
    }
    /* The scan is too small for a region (below 64x64), or the script's region is bad: checked
     * now, before the long stages. */
    int do_region = s->region && r->region_rect[1] > r->region_rect[0] && r->region_rect[3] > r->region_rect[2];
    if (do_region) {
        ssb4d_source *probe = NULL;
        st = ssb4d_source_region(src, r->region_rect[0], r->region_rect[1], r->region_rect[2], r->region_rect[3],
                                 &probe, err);
        ssb4d_source_close(probe);
        if (st)
            goto out;
    } else
        memset(r->region_rect, 0, sizeof r->region_rect);
    ssb4d_plan_input pi;
    ssb4d_plan_input_default(&pi);
    ssb4d_fit_params fp;
    ssb4d_fit_params_default(&fp);
    fp.threads = p->threads;
    /* A rotation in the parameters was stated: the fit holds it. Otherwise the calibration's
     * centre-of-mass value (with its error) is where the fit's rotation search may start. */
    fp.rotation_given = !isnan(p->calib.rotation_deg);
    fp.rotation_sigma_deg = fp.rotation_given ? NAN : cal.rotation_sigma_deg;
    plan_input_from_calibration(&pi, &cal, r->shape, fp.fit_radius);
    r->n_stored = pi.n_stored;
    pi.n_coarse_bf = fp.coarse_bf;
    pi.fit = &fp;
    pi.encoded_bytes = r->encoded_bytes;
    pi.rotation_fitted = isnan(p->calib.rotation_deg);
    pi.threads = p->threads;
    pi.upsample = r->upsample;
    if (do_region)
        pi.region[0] = r->region_rect[1] - r->region_rect[0], pi.region[1] = r->region_rect[3] - r->region_rect[2];
    pi.memory_bytes = budget;
    pi.preview = p->preview;
    pi.script = s;
    st = ssb4d_plan_make(&pi, &r->plan, err);
    r->does_not_fit = !st && !r->plan.fits;
    if (!st && !r->plan.fits)
        st = ssb4d_fail(err, SSB4D_ENOMEM, "the session does not fit in %.2f GiB: %s", budget / 1073741824.0,
                        r->plan.reason);
    if (st)
        goto out;
    const ssb4d_plan *pl = &r->plan;
    r->g_bytes = pl->g_bytes;

    /* G build: the fit's float32 G (the outer BF pixels streamed when the budget says so). */
    begin(&x, "G build");
    st = build(&x, src, &cal, 0, pl->fit_resident_bytes, pl->g_bytes, &G, err);
    end(&x);
    if (st)
        goto out;
    r->resident_bytes = r->encoded_bytes + ssb4d_G_bytes(G);
    if (p->hashes) {
        ssb4d_G_sha256(G, r->g_sha256); /* outside any stage; its group buffer is returned */
        ssb4d_mem_trim(x.mem);
    }

    begin(&x, "fit");
    st = ssb4d_fit(G, &cal.geom, &fp, x.mem, &fr, err);
    ssb4d_mem_trim(x.mem); /* the fit's tiles go back, as the seed's find_aberrations does */
    end(&x);
    if (st)
        goto out;
    r->C10_nm = fr.ab.C_nm[SSB4D_C10], r->C12_nm = fr.ab.C_nm[SSB4D_C12];
    r->phi12_deg = fr.ab.phi_deg[SSB4D_C12], r->loss = fr.loss;
    memcpy(r->trace_sha256, fr.trace_sha256, sizeof r->trace_sha256);

    int same = !pl->preview_half && pl->preview_resident_bytes == pl->fit_resident_bytes;
    char name[48];
    snprintf(name, sizeof name, "preview (%dx%s)", r->upsample, s->fft ? ", FFT" : "");
    begin(&x, name);
    if (!same) { /* the preview copy replaces the fit's G */
        ssb4d_G_free(G);
        G = NULL;
        st = build(&x, src, &cal, pl->preview_half, pl->preview_resident_bytes,
                   pl->preview_half ? pl->g_half_bytes : pl->g_bytes, &G, err);
    }
    if (!st)
        st = preview(&x, G, &fr.geom, &fr.ab, r->upsample, s->fft, p->hashes ? r->first_preview_sha256 : NULL, err);
    end(&x);
    if (st)
        goto out;

    /* Drags move C10 through ±1 nm and come back; releases add the loss over all BF pixels. */
    if (s->drags) {
        snprintf(name, sizeof name, "%zu drags", s->drags);
        begin(&x, name);
        for (size_t i = 0; i < s->drags && !st; i++) {
            ssb4d_aberrations ab = fr.ab;
            ab.C_nm[SSB4D_C10] += sin(2 * M_PI * (double)(i + 1) / (double)s->drags);
            st = preview(&x, G, &fr.geom, &ab, r->upsample, s->fft, NULL, err);
        }
        end(&x);
        if (st)
            goto out;
    }
    if (s->releases) {
        snprintf(name, sizeof name, "%zu releases", s->releases);
        begin(&x, name);
        ssb4d_ssb_opts so;
        ssb4d_ssb_opts_default(&so);
        so.threads = p->threads;
        for (size_t i = 0; i < s->releases && !st; i++) {
            ssb4d_aberrations ab = fr.ab;
            ab.C_nm[SSB4D_C10] += 0.2 * (double)(s->releases - 1 - i); /* the last one at the fit */
            st = preview(&x, G, &fr.geom, &ab, r->upsample, s->fft, NULL, err);
            if (!st)
                st = ssb4d_loss(G, &fr.geom, &ab, NULL, &so, x.mem, &r->release_loss, NULL, err);
        }
        end(&x);
        if (st)
            goto out;
    }

    if (do_region) {
        const size_t *q = r->region_rect;
        snprintf(name, sizeof name, "region refit %zux%zu", q[1] - q[0], q[3] - q[2]);
        begin(&x, name);
        if (pl->region_frees_g) {
            ssb4d_G_free(G);
            G = NULL;
            ssb4d_mem_trim(x.mem);
        }
        st = ssb4d_source_region(src, q[0], q[1], q[2], q[3], &view, err);
        if (!st) {
            size_t region_g = r->n_stored * plan_plane_bytes(q[1] - q[0], q[3] - q[2]);
            st = build(&x, view, &cal, 0, pl->region_resident_bytes, region_g, &RG, err);
        }
        if (!st)
            st = ssb4d_fit(RG, &cal.geom, &fp, x.mem, &rr, err);
        ssb4d_G_free(RG);
        RG = NULL;
        ssb4d_mem_trim(x.mem);
        end(&x);
        ssb4d_source_close(view);
        view = NULL;
        if (st)
            goto out;
        r->region_C10_nm = rr.ab.C_nm[SSB4D_C10], r->region_C12_nm = rr.ab.C_nm[SSB4D_C12];
        r->region_phi12_deg = rr.ab.phi_deg[SSB4D_C12];

        begin(&x, "next full preview");
        int rebuilt = !G;
        if (!G)
            st = build(&x, src, &cal, pl->preview_half, pl->preview_resident_bytes,
                       pl->preview_half ? pl->g_half_bytes : pl->g_bytes, &G, err);
        char hex[65] = "";
        if (!st)
            st = preview(&x, G, &fr.geom, &fr.ab, r->upsample, s->fft, p->hashes ? hex : NULL, err);
        end(&x);
        if (st)
            goto out;
        if (p->hashes) {
            memcpy(r->phase_sha256, hex, sizeof hex);
            r->rebuilt_same_bits = rebuilt && !strcmp(hex, r->first_preview_sha256);
        }
    } else if (p->hashes)
        memcpy(r->phase_sha256, r->first_preview_sha256, sizeof r->phase_sha256);

    if (s->save) {
        begin(&x, "save calibration");
        st = save_calibration(&x, &cal, &fr, &fp, err);
        end(&x);
    }
out:
    for (size_t i = 0; i < r->n_stages; i++) {
        if (r->stages[i].peak_bytes > r->session_peak_bytes)
            r->session_peak_bytes = r->stages[i].peak_bytes;
        if (r->stages[i].rss_peak_bytes > r->session_rss_peak_bytes)
            r->session_rss_peak_bytes = r->stages[i].rss_peak_bytes;
    }
    ssb4d_fit_result_free(&fr);
    ssb4d_fit_result_free(&rr);
    ssb4d_G_free(RG);
    ssb4d_G_free(G);
    if (have_cal)
        ssb4d_calibration_free(&cal);
    ssb4d_source_close(view);
    ssb4d_source_close(src);
    if (r->encoded_bytes)
        ssb4d_mem_external(x.mem, r->encoded_bytes, 0, NULL, NULL);
    ssb4d_mem_destroy(x.mem);
    return st;
}
