/* profile.c — the machine profile behind the plan's times (SPEC §9): stated (the 2-core machine
 * the figures were measured on) or measured here on a small synthetic acquisition. The rates
 * feed only the time classes; no memory decision depends on them. */
#include "common/err.h"
#include "common/clock.h"
#include "common/parallel.h"
#include "common/splitmix.h"
#include "gbuild/gbuild.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void ssb4d_machine_profile_stated(ssb4d_machine_profile *p)
{
    /* docs/memory.md: the reference workload (512² x 192², 9,265 BF) on the 2-core CI machine,
     * Release build. */
    memset(p, 0, sizeof *p);
    snprintf(p->source, sizeof p->source, "stated: the 2-core reference machine (docs/memory.md)");
    p->threads = 2;
    p->calibrate_ns = 3.5;
    p->gbuild_ns = 8.6;
    p->loss_ns = 2.0;
    p->band_ns = 0.4;
    p->object_ns = 1.1;
}

/* The synthetic acquisition: a 256x256 scan of 32x32 patterns (134 MB of counts, about 250 BF
 * pixels): scan planes of 256² so that the per-BF-pixel costs (phasor tables, FFT set-up) weigh
 * about as little against the per-pixel work as at the reference size; a bright disk of radius 9
 * pixels whose intensity and centre move a little with position (so that G has signal), plus
 * noise. */
enum { SCAN = 256, DET = 32 };
#define DISK_R 9.0
static void synthesize(uint16_t *c)
{
    uint64_t rng = 0x5eedULL;
    for (size_t i = 0; i < SCAN; i++)
        for (size_t j = 0; j < SCAN; j++) {
            double dy = 0.3 * sin(2 * M_PI * (double)i / 8.0), dx = 0.3 * cos(2 * M_PI * (double)j / 8.0);
            const double c0 = DET / 2;
            uint16_t *f = c + (i * SCAN + j) * DET * DET;
            for (size_t r = 0; r < DET; r++)
                for (size_t q = 0; q < DET; q++) {
                    double y = (double)r - c0 - dy, x = (double)q - c0 - dx;
                    double v = x * x + y * y < DISK_R * DISK_R ? 300.0 + 40.0 * x / DISK_R : 2.0;
                    f[r * DET + q] = (uint16_t)(v + (double)(ssb4d_splitmix64(&rng) % 16));
                }
        }
}

/* One pass of each kind on the synthetic set; run() repeats one until 50 ms have passed. */
typedef struct {
    ssb4d_source *src;
    ssb4d_calib_params cp;
    ssb4d_calibration cal;
    int have_cal;
    ssb4d_gbuild_opts go;
    ssb4d_G *G;
    const ssb4d_G *view;  /* what the loss, band and object passes read: G, or half of it */
    ssb4d_aberrations ab;
    ssb4d_ssb_opts so;
    ssb4d_band_opts bo;
    float *phase;
} bench;

enum { CALIBRATE, GBUILD, LOSS, BAND, OBJECT, N_PASSES };

static ssb4d_status pass(bench *b, int kind, ssb4d_err *err)
{
    double v;
    switch (kind) {
    case CALIBRATE:
        if (b->have_cal)
            ssb4d_calibration_free(&b->cal);
        b->have_cal = 0;
        if (ssb4d_calibrate(b->src, &b->cp, &b->cal, err))
            return err->code;
        b->have_cal = 1;
        return SSB4D_OK;
    case GBUILD:
        ssb4d_G_free(b->G);
        b->G = NULL;
        return ssb4d_gbuild(b->src, &b->cal.geom, b->cal.bf_pix, b->cal.n_bf, &b->go, NULL, &b->G, err);
    case LOSS: return ssb4d_loss(b->view, &b->cal.geom, &b->ab, NULL, &b->so, NULL, &v, NULL, err);
    case BAND: return ssb4d_band_fit(b->view, &b->cal.geom, &b->ab, NULL, 1, &b->bo, NULL, &v, err);
    default: return ssb4d_object(b->view, &b->cal.geom, &b->ab, NULL, 1, &b->so, NULL, NULL, b->phase, err);
    }
}

static ssb4d_status run(bench *b, int kind, double *seconds, ssb4d_err *err)
{
    double t0 = ssb_clock_s();
    int n = 0;
    do {
        ssb4d_status st = pass(b, kind, err);
        if (st)
            return st;
        n++;
    } while (ssb_clock_s() - t0 < 0.05);
    *seconds = (ssb_clock_s() - t0) / n;
    return SSB4D_OK;
}

ssb4d_status ssb4d_machine_profile_measure(int threads, ssb4d_machine_profile *p, ssb4d_err *err)
{
    memset(p, 0, sizeof *p);
    size_t shape[4] = {SCAN, SCAN, DET, DET}, counts = (size_t)SCAN * SCAN * DET * DET;
    bench b;
    memset(&b, 0, sizeof b);
    uint16_t *c = malloc(counts * sizeof *c);
    b.phase = malloc((size_t)SCAN * SCAN * sizeof *b.phase);
    ssb4d_status st = c && b.phase ? SSB4D_OK : ssb_fail(err, SSB4D_ENOMEM, "out of memory (machine profile)");
    if (!st) {
        synthesize(c);
        st = ssb4d_source_from_memory(c, SSB4D_U16, shape, &b.src, err);
    }
    ssb4d_calib_params_default(&b.cp);
    b.cp.kv = 300, b.cp.semiangle_mrad = 25;
    b.cp.scan_step_A[0] = b.cp.scan_step_A[1] = 0.4;
    b.cp.det_sampling_mrad[0] = b.cp.det_sampling_mrad[1] = 25.0 / DISK_R;
    b.cp.rotation_deg = 0;
    b.cp.threads = threads;
    ssb4d_gbuild_opts_default(&b.go);
    b.go.threads = threads;
    b.ab.C_nm[SSB4D_C10] = -10, b.ab.C_nm[SSB4D_C12] = 2, b.ab.phi_deg[SSB4D_C12] = 20;
    ssb4d_ssb_opts_default(&b.so);
    b.so.threads = threads;
    ssb4d_band_opts_default(&b.bo);
    b.bo.threads = threads;
    /* Calibrate and G build per unit of work; the passes over G by their slope: the time on all
     * BF pixels less that on every other one, so that a call's fixed costs (tables, FFT plans)
     * drop out as they do at the reference size. */
    double t[N_PASSES] = {0}, half[N_PASSES] = {0};
    ssb4d_G *H = NULL;
    size_t n_half = 0;
    for (int k = 0; k < N_PASSES && !st; k++) {
        b.view = b.G;
        st = run(&b, k, &t[k], err);
        if (!st && k == GBUILD) { /* every other BF pixel: a view of G, no copy */
            size_t n = ssb4d_G_n_bf(b.G);
            size_t *idx = malloc((n / 2 + 1) * sizeof *idx);
            if (!idx)
                st = ssb_fail(err, SSB4D_ENOMEM, "out of memory (machine profile)");
            for (size_t i = 0; idx && i < n; i += 2)
                idx[n_half++] = i;
            if (!st)
                st = ssb_G_subset(b.G, idx, n_half, &H, err);
            free(idx);
        }
        if (!st && k > GBUILD) {
            b.view = H;
            st = run(&b, k, &half[k], err);
        }
    }
    if (!st) {
        double bf_px = (double)b.cal.n_bf * SCAN * SCAN, dpx = (double)(b.cal.n_bf - n_half) * SCAN * SCAN;
        for (int k = LOSS; k < N_PASSES; k++)
            t[k] = t[k] > half[k] ? (t[k] - half[k]) * bf_px / dpx : t[k]; /* noise: the plain ratio */
        p->threads = ssb_threads_resolve(threads);
        snprintf(p->source, sizeof p->source, "measured here (%d threads, a 256x256x32x32 synthetic set)", p->threads);
        p->calibrate_ns = t[CALIBRATE] * 1e9 / (double)counts;
        p->gbuild_ns = t[GBUILD] * 1e9 / bf_px;
        p->loss_ns = t[LOSS] * 1e9 / bf_px;
        p->band_ns = t[BAND] * 1e9 / bf_px;
        p->object_ns = t[OBJECT] * 1e9 / bf_px;
    }
    ssb4d_G_free(H);
    ssb4d_G_free(b.G);
    if (b.have_cal)
        ssb4d_calibration_free(&b.cal);
    ssb4d_source_close(b.src);
    free(b.phase);
    free(c);
    return st;
}
