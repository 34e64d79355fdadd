/* fit_study.c — the widened success-rate study of the fit (issue 11, docs/fit.md).
 *
 * Draws N cases from a wide family with a seeded generator: SrTiO3 or Au, 200 or 300 kV,
 * semi-angle 15–35 mrad, scans 32²–128² (step 0.25–0.6 Å), detectors 48²–96² (BF disk 0.35–0.85
 * of the half-width), dose 500–1e5 electrons per pattern (log-uniform), C10 ±40 nm, C12 0–10 nm,
 * φ12 any, thickness one cell, 2–10 nm or 10–20 nm (the thickest tilted up to 5 mrad), scan–
 * detector rotation 0, a multiple of 90° or any angle in ±180°. Each case is simulated in memory
 * (ssb4d_simulate_to_memory), calibrated from the microscope values a sidecar gives (kV, semi-
 * angle, scan step, detector sampling; never the rotation), G is built and ssb4d_fit runs with its
 * defaults (and with --tilt also the thick-sample fit on the tilted thick cases).
 *
 * A case succeeds when |ΔC10| ≤ 0.2 nm against the mean depth of the potential planes (≤ 2 nm for
 * crystals thicker than 10 nm), |ΔC12| ≤ 0.2 nm, |Δφ12| ≤ 3° when C12 ≥ 1 nm (φ12 in the probe
 * frame) and the rotation within 1° (mod 360). One JSON line per case on stdout, then one summary
 * line per stratum and overall; `--table` prints the per-stratum table in Markdown on stderr.
 *
 * SPEC §6.1's criterion (issue 32) is recorded beside it as `ok_spec`: C10 between the specimen's
 * entrance and exit planes ± 0.2 nm (the first and last potential planes), C12 within 0.2 nm or
 * 5 % above 4 nm, φ12 within 3° when C12 ≥ 1 nm, the rotation within 1°, the handedness; with
 * --tilt on the tilted thick cases also `ok_spec_tilt`: the thick-sample fit's tilt within 1 mrad
 * and its thickness within 20 % as well.
 *
 * Variants (issue 28): --mirror simulates a mirrored detector (every frame transposed, SPEC §2)
 * and nothing tells the fit so: it must find the handedness (the truth's φ12 in the mirrored
 * detector frame is 90° − φ12); --float SIGMA turns the counts into EMPAD-like float data (each
 * count plus Gaussian read noise of SIGMA electrons, in units of 1/7.3 electron, negative values
 * kept) read through the float path, never quantised.
 *
 * --objectives (with --rotation-given) adds, on the crystal cases, each objective's optimum: the
 * thin band (the standard fit), the thin exact loss, the thick band at the true thickness and tilt,
 * at the true thickness with the tilt searched, and the joint thick search; and the band fraction
 * each model explains at the truth (issue 32 item 2: which optimum lies nearest the truth).
 *
 * usage: ssb4d_fit_study [--n N] [--seed S] [--cases i,j,..] [--tilt] [--threads T] [--objectives]
 *                        [--dump DIR] [--table] [--max-scan N] [--mirror] [--float SIGMA]
 *                        > record.jsonl
 */
#include "common/splitmix.h"
#include "fit/tilt.h"
#include "gbuild/gbuild.h"
#include "ssb4d_advanced.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Uniform in [0, 1) from the top 53 bits. */
static double unit(uint64_t *s) { return (double)(ssb4d_splitmix64(s) >> 11) * 0x1p-53; }

static double wrap(double d, double period)
{
    d = fmod(d, period);
    if (d > period / 2)
        d -= period;
    if (d < -period / 2)
        d += period;
    return d;
}

static long gcd(long a, long b) { return b ? gcd(b, a % b) : a; }

/* ---- the family --------------------------------------------------------------------------- */

enum { TH_THIN, TH_MEDIUM, TH_THICK, N_TH };
enum { ROT_ZERO, ROT_QUARTER, ROT_ANY, N_ROT };
enum { DOSE_LOW, DOSE_MID, DOSE_HIGH, N_DOSE };
static const char *th_name[] = {"thin (1 cell)", "2-10 nm", "10-20 nm, tilted"};
static const char *rot_name[] = {"rotation 0", "rotation k*90", "rotation any"};
static const char *dose_name[] = {"dose 500-3e3", "dose 3e3-2e4", "dose 2e4-1e5"};

typedef struct {
    int index;
    ssb4d_sim_params sp;
    int th, rot, dose_class;
    double rotation_deg; /* the truth in ssb4d's convention */
    double c10_mean_plane, thickness_nm;
    double c10_entrance, c10_exit; /* C10 at the first and last potential planes */
} study_case;

/* Draws case i. The stratum of each dimension cycles with i so that every stratum is filled
 * evenly; everything else is random (seeded by seed and i, independent of the other cases). */
static int draw_case(uint64_t seed, int i, int max_scan, study_case *c, ssb4d_err *err)
{
    memset(c, 0, sizeof *c);
    c->index = i;
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xD1B54A32D192ED03ull;
    ssb4d_sim_params *p = &c->sp;
    if (ssb4d_sim_params_preset(p, "small", err))
        return -1;
    c->th = i % N_TH;
    c->rot = (i / N_TH) % N_ROT;
    c->dose_class = (i / (N_TH * N_ROT)) % N_DOSE;
    p->specimen = unit(&r) < 0.5 ? SSB4D_SPECIMEN_SRTIO3 : SSB4D_SPECIMEN_AU;
    p->kv = unit(&r) < 0.5 ? 200.0 : 300.0;
    p->semiangle_mrad = 15.0 + 20.0 * unit(&r);
    static const double dose_lo[] = {500, 3e3, 2e4}, dose_hi[] = {3e3, 2e4, 1e5};
    p->dose = exp(log(dose_lo[c->dose_class]) + (log(dose_hi[c->dose_class]) - log(dose_lo[c->dose_class])) * unit(&r));
    memset(&p->ab, 0, sizeof p->ab);
    p->ab.C_nm[SSB4D_C10] = -40.0 + 80.0 * unit(&r);
    p->ab.C_nm[SSB4D_C12] = 10.0 * unit(&r);
    p->ab.phi_deg[SSB4D_C12] = -90.0 + 180.0 * unit(&r);
    double a = p->specimen == SSB4D_SPECIMEN_AU ? 4.078 : 3.905;
    /* thickness and tilt */
    if (c->th == TH_THIN)
        p->cells_z = 1;
    else if (c->th == TH_MEDIUM)
        p->cells_z = (int)lround((2.0 + 8.0 * unit(&r)) * 10.0 / a);
    else {
        p->cells_z = (int)lround((10.0 + 10.0 * unit(&r)) * 10.0 / a);
        double t = 5.0 * sqrt(unit(&r)), ang = 2 * M_PI * unit(&r);
        p->tilt_mrad[0] = t * cos(ang);
        p->tilt_mrad[1] = t * sin(ang);
    }
    if (p->cells_z < 1)
        p->cells_z = 1;
    /* scan: sizes 32, 64, 128, step 0.25–0.6 Å; the cells covered are chosen near that step so that
     * few positions per cell are distinct (the simulator computes each distinct one once, at
     * rotations that are multiples of 90°) */
    static const int scans[] = {32, 64, 128};
    p->scan_n = scans[(int)(unit(&r) * 3)];
    if (p->scan_n > max_scan)
        p->scan_n = max_scan;
    double step = 0.25 + 0.35 * unit(&r);
    int s0 = (int)lround(step * p->scan_n / a);
    p->scan_cells = s0 < 1 ? 1 : s0;
    long bestn = p->scan_n / gcd(p->scan_n, p->scan_cells);
    for (int sc = s0 - 3; sc <= s0 + 3; sc++)
        if (sc >= 1 && sc * a / p->scan_n >= 0.2 && sc * a / p->scan_n <= 0.7 && p->scan_n / gcd(p->scan_n, sc) < bestn)
            p->scan_cells = sc, bestn = p->scan_n / gcd(p->scan_n, sc);
    /* detector and the window that puts the BF disk at a fraction f of the half-width */
    static const int dets[] = {48, 64, 96};
    p->det = dets[(int)(unit(&r) * 3)];
    double f = 0.35 + 0.5 * unit(&r), lambda = ssb4d_wavelength_A(p->kv);
    double L = f * (p->det / 2.0) * lambda / (p->semiangle_mrad * 1e-3);
    p->window_cells = (int)lround(L / a);
    if (p->window_cells < 2)
        p->window_cells = 2;
    /* rotation */
    if (c->rot == ROT_QUARTER) {
        c->rotation_deg = wrap(90.0 * (1 + (int)(unit(&r) * 3)), 360.0);
        p->scan_rotation_deg = c->rotation_deg;
    } else if (c->rot == ROT_ANY) {
        c->rotation_deg = -180.0 + 360.0 * unit(&r);
        p->scan_rotation_deg = c->rotation_deg;
    }
    p->seed = seed + (uint64_t)i;
    p->threads = 0;
    ssb4d_sim_info info;
    if (ssb4d_sim_describe(p, &info, err))
        return -1;
    /* Bound the simulation's cost (about 2 FFTs of the grid per slice and distinct pattern; the
     * study must rerun in about two hours): smaller scans first, then a coarser detector. */
    for (;;) {
        double per = (double)(p->scan_n / gcd(p->scan_n, p->scan_cells));
        double patterns = (c->rot == ROT_ANY) ? (double)p->scan_n * p->scan_n : per * per;
        double m2 = (double)info.grid * info.grid;
        double cost = patterns * 2.0 * info.n_slices * 5.0 * m2 * log2(m2);
        if (cost < 3e11 || (p->scan_n == 32 && p->det == 48))
            break;
        if (p->scan_n > 32) {
            double st = p->scan_cells * a / p->scan_n;
            p->scan_n /= 2;
            p->scan_cells = (int)lround(st * p->scan_n / a) < 1 ? 1 : (int)lround(st * p->scan_n / a);
        } else {
            double f0 = info.bf_radius_px / (p->det / 2.0);
            p->det = p->det == 96 ? 64 : 48;
            p->window_cells = (int)lround(f0 * (p->det / 2.0) * lambda / (p->semiangle_mrad * 1e-3) / a);
            if (p->window_cells < 2)
                p->window_cells = 2;
        }
        if (ssb4d_sim_describe(p, &info, err))
            return -1;
    }
    c->thickness_nm = info.thickness_nm;
    c->c10_mean_plane = p->ab.C_nm[SSB4D_C10] + 0.5 * (info.thickness_nm - info.thickness_nm / info.n_slices);
    c->c10_entrance = p->ab.C_nm[SSB4D_C10];
    c->c10_exit = p->ab.C_nm[SSB4D_C10] + (info.thickness_nm - info.thickness_nm / info.n_slices);
    return 0;
}

static int write_dump(const char *dir, const study_case *c, const uint16_t *counts, const ssb4d_sim_info *info)
{
    char path[1024];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/case%03d.npy", dir, c->index);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = (size_t)c->sp.scan_n, d = (size_t)c->sp.det;
    char hdr[256];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '<u2', 'fortran_order': False, 'shape': (%zu, %zu, %zu, %zu), }", n, n, d, d);
    int total = 10 + len + 1, pad = (total + 63) / 64 * 64;
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned short hl = (unsigned short)(pad - 10);
    fputc(hl & 255, f);
    fputc(hl >> 8, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int k = total; k < pad; k++)
        fputc(' ', f);
    fputc('\n', f);
    fwrite(counts, sizeof *counts, n * n * d * d, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/case%03d.json", dir, c->index);
    f = fopen(path, "w");
    if (!f)
        return -1;
    /* the microscope values a user would know; the rotation is left out on purpose */
    fprintf(f, "{\"optics\": {\"voltage_kV\": %g, \"semiangle_mrad\": %.6f},\n"
               " \"scan\": {\"step_A\": [%.9g, %.9g]},\n"
               " \"detector\": {\"sampling_mrad\": [%.9g, %.9g]},\n"
               " \"study_truth\": {\"C10_nm_mean_plane\": %.6f, \"C12_nm\": %.6f, \"phi12_deg_probe\": %.4f,"
               " \"rotation_deg\": %.4f, \"thickness_nm\": %.4f, \"tilt_mrad\": [%.4f, %.4f], \"dose\": %.1f,"
               " \"specimen\": \"%s\"}}\n",
            c->sp.kv, c->sp.semiangle_mrad, info->scan_step_A, info->scan_step_A, info->det_sampling_mrad,
            info->det_sampling_mrad, c->c10_mean_plane, c->sp.ab.C_nm[SSB4D_C12], c->sp.ab.phi_deg[SSB4D_C12],
            c->rotation_deg, c->thickness_nm, -c->sp.tilt_mrad[0], -c->sp.tilt_mrad[1], c->sp.dose,
            c->sp.specimen == SSB4D_SPECIMEN_AU ? "Au" : "SrTiO3");
    fclose(f);
    return 0;
}


/* ---- branch diagnostics (research): statistics of the phase at the true branch --------------- */

static double corr(const double *a, const double *b, size_t n)
{
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < n; i++)
        ma += a[i], mb += b[i];
    ma /= (double)n, mb /= (double)n;
    for (size_t i = 0; i < n; i++) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    return saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : 0.0;
}

/* At the truth: skewness of the phase, its correlation with the (negated) BF-disk image and with
 * the dark-field image (everything outside the BF disk), from the counts. */
#include <complex.h>
#include <fftw3.h>
/* The band objective's explained fraction (fit/power, SPEC 5.6, the fit's automatic band, all BF
 * pixels) at aberrations ab and rotation rot_deg: the truth's against the fit's tells a search
 * that missed the objective's minimum (truth higher) from an objective whose minimum is not the
 * truth (fit higher). NaN on error. */
static double explained(const ssb4d_G *G, const ssb4d_geometry *g0, int scan_n, double rot_deg,
                        const ssb4d_aberrations *ab)
{
    ssb4d_geometry g = *g0;
    g.rotation_deg = rot_deg;
    ssb4d_band_opts o;
    ssb4d_band_opts_default(&o);
    double fov = scan_n * fmin(g.scan_step_A[0], g.scan_step_A[1]);
    o.band_lo_inv_A = 1.5 / fov;
    o.band_hi_inv_A = 2.0 * g.semiangle_mrad * 1e-3 / ssb4d_wavelength_A(g.kv);
    o.threads = 1;
    double power = 0, fit = 0;
    ssb4d_err err;
    if (ssb4d_band_power(G, &g, &o, NULL, &power, &err) || ssb4d_band_fit(G, &g, ab, NULL, 1, &o, NULL, &fit, &err) ||
        !(power > 0))
        return NAN;
    return fit / power;
}

/* The integrated centre of mass (iCoM, thin object: φ ⋆ |probe|²) at rotation g: the CoM vectors
 * taken into the scan frame, integrated by FFT (periodic scan). */
static void icom(const uint16_t *counts, size_t n, size_t det, const ssb4d_geometry *g, float *out)
{
    size_t np = n * n, dd = det * det;
    double a = -g->rotation_deg * M_PI / 180.0, ca = cos(a), sa = sin(a);
    double complex *cx = fftw_malloc(np * sizeof *cx), *cy = fftw_malloc(np * sizeof *cy);
    for (size_t p = 0; p < np; p++) {
        const uint16_t *f = counts + p * dd;
        double s0 = 0, sr = 0, sc = 0;
        for (size_t q = 0; q < dd; q++) {
            s0 += f[q];
            sr += (double)(q / det) * f[q];
            sc += (double)(q % det) * f[q];
        }
        double kr = s0 > 0 ? sr / s0 - g->centre_px[0] : 0, kc = s0 > 0 ? sc / s0 - g->centre_px[1] : 0;
        if (g->flip) {
            double t = kr;
            kr = kc;
            kc = t;
        }
        cx[p] = kr * ca + kc * sa;
        cy[p] = -kr * sa + kc * ca;
    }
    fftw_plan f1 = fftw_plan_dft_2d((int)n, (int)n, (fftw_complex *)cx, (fftw_complex *)cx, FFTW_FORWARD, FFTW_ESTIMATE);
    fftw_execute_dft(f1, (fftw_complex *)cx, (fftw_complex *)cx);
    fftw_execute_dft(f1, (fftw_complex *)cy, (fftw_complex *)cy);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double qx = (double)((long)i < (long)(n + 1) / 2 ? (long)i : (long)i - (long)n);
            double qy = (double)((long)j < (long)(n + 1) / 2 ? (long)j : (long)j - (long)n);
            double q2 = qx * qx + qy * qy;
            size_t k = i * n + j;
            cx[k] = q2 > 0 ? (qx * cx[k] + qy * cy[k]) / (2 * M_PI * I * q2) : 0;
        }
    fftw_plan b1 = fftw_plan_dft_2d((int)n, (int)n, (fftw_complex *)cx, (fftw_complex *)cx, FFTW_BACKWARD, FFTW_ESTIMATE);
    fftw_execute(b1);
    for (size_t p = 0; p < np; p++)
        out[p] = (float)creal(cx[p]);
    fftw_destroy_plan(f1);
    fftw_destroy_plan(b1);
    fftw_free(cx);
    fftw_free(cy);
}

static void branch_stats(const uint16_t *counts, size_t np, size_t dd, const ssb4d_calibration *cal,
                         const ssb4d_G *G, const ssb4d_geometry *g, const ssb4d_aberrations *ab, double out[4])
{
    ssb4d_err err = {0};
    float *ph = malloc(np * sizeof *ph);
    double *phd = malloc(np * sizeof *phd), *bf = calloc(np, sizeof *bf), *df = calloc(np, sizeof *df);
    unsigned char *inbf = calloc(dd, 1);
    out[0] = out[1] = out[2] = out[3] = NAN;
    if (!ph || !phd || !bf || !df || !inbf || ssb4d_object(G, g, ab, NULL, 1, NULL, NULL, NULL, ph, &err))
        goto done;
    for (size_t i = 0; i < cal->n_bf; i++)
        inbf[cal->bf_pix[i]] = 1;
    /* the dark field: beyond 1.1 × the disk radius */
    double r2 = 1.21 * cal->disk_radius_px * cal->disk_radius_px;
    size_t det = cal->det_shape[1];
    for (size_t pos = 0; pos < np; pos++) {
        const uint16_t *f = counts + pos * dd;
        double sb = 0, sd = 0;
        for (size_t q = 0; q < dd; q++) {
            double yr = (double)(q / det) - cal->disk_centre_px[0], xc = (double)(q % det) - cal->disk_centre_px[1];
            if (inbf[q])
                sb += f[q];
            else if (yr * yr + xc * xc > r2)
                sd += f[q];
        }
        bf[pos] = -sb;
        df[pos] = sd;
        phd[pos] = ph[pos];
    }
    out[0] = ssb4d_phase_skewness(ph, np);
    out[1] = corr(phd, bf, np);
    out[2] = corr(phd, df, np);
    icom(counts, (size_t)sqrt((double)np), cal->det_shape[1], g, ph);
    out[3] = ssb4d_phase_skewness(ph, np);
done:
    free(ph), free(phd), free(bf), free(df), free(inbf);
}

/* One JSON line on stdout, with C's "nan"/"-nan" written as JSON's null and "inf" as 1e999. */
/* ---- --objectives: which objective's optimum lies nearest the truth (issue 32 item 2) ------- */

/* One optimum as JSON: [C10, C12, φ12 scan frame, tilt row, tilt col, thickness]. */
static int put_opt(char *buf, size_t n, const char *name, const double x[6])
{
    return snprintf(buf, n, "\"%s\":[%.4f,%.4f,%.3f,%.3f,%.3f,%.3f]", name, x[0], x[1], x[2], x[3], x[4], x[5]);
}

/* Crystal cases, the rotation given: the optima of the thin band objective (the standard fit),
 * the thin exact loss, the thick band objective with thickness and tilt held at the truth, with
 * only the thickness held (tilt searched), and the joint thick search (--tilt's); and the band
 * fraction each model explains at the truth. Appended to the case's line as "objectives". */
static ssb4d_status objective_study(const ssb4d_G *G, const ssb4d_geometry *gg, const study_case *c,
                                    const ssb4d_fit_params *fp0, const ssb4d_fit_result *thin, char *out,
                                    size_t outn, ssb4d_err *err)
{
    size_t k = 0;
    double x[6] = {thin->ab.C_nm[SSB4D_C10], thin->ab.C_nm[SSB4D_C12], thin->ab.phi_deg[SSB4D_C12], 0, 0, 0};
    k += (size_t)put_opt(out + k, outn - k, "thin_band", x);
    /* the thin exact loss */
    ssb4d_fit_params fl = *fp0;
    fl.objective = SSB4D_FIT_OBJ_LOSS;
    ssb4d_fit_result rl;
    memset(&rl, 0, sizeof rl);
    ssb4d_status st = ssb4d_fit(G, gg, &fl, NULL, &rl, err);
    if (st)
        return st;
    double xl[6] = {rl.ab.C_nm[SSB4D_C10], rl.ab.C_nm[SSB4D_C12], rl.ab.phi_deg[SSB4D_C12], 0, 0, 0};
    ssb4d_fit_result_free(&rl);
    k += (size_t)snprintf(out + k, outn - k, ",");
    k += (size_t)put_opt(out + k, outn - k, "thin_loss", xl);
    /* the truth's tilt in the scan frame: the specimen tilt is the simulator's beam tilt negated
     * (docs/tilt.md), rotated from the detector frame by the rotation */
    double a = gg->rotation_deg * M_PI / 180.0, ca = cos(a), sa = sin(a);
    double d0 = -c->sp.tilt_mrad[0], d1 = -c->sp.tilt_mrad[1];
    double tilt_scan[2] = {ca * d0 - sa * d1, sa * d0 + ca * d1};
    static const char *names[3] = {"thick_truth", "thick_T", "thick_joint"};
    for (int m = 0; m < 3; m++) {
        fit_tilt_params tp;
        fit_tilt_params_default(&tp);
        tp.thin.start[0] = x[0];
        tp.thin.start[1] = x[1];
        tp.thin.start[2] = x[2];
        tp.thin.seed = fp0->seed;
        tp.thick_given.tilt_mrad[0] = tilt_scan[0];
        tp.thick_given.tilt_mrad[1] = tilt_scan[1];
        tp.thick_given.thickness_nm = c->thickness_nm;
        if (m == 0)
            tp.thick_locked[0] = tp.thick_locked[1] = tp.thick_locked[2] = 1;
        else if (m == 1)
            tp.thick_locked[2] = 1;
        fit_tilt_result tr;
        if ((st = fit_tilt(G, gg, &tp, NULL, &tr, NULL, err)))
            return st;
        double xt[6] = {tr.C10_nm, tr.C12_nm, tr.phi12_deg, tr.thick.tilt_mrad[0], tr.thick.tilt_mrad[1],
                        tr.thick.thickness_nm};
        k += (size_t)snprintf(out + k, outn - k, ",");
        k += (size_t)put_opt(out + k, outn - k, names[m], xt);
    }
    /* the band fraction at the true aberrations and tilt along the thickness (where the thick
     * model's own optimum, an effective thickness, lies against the true one; scale 0 is the thin
     * model exactly, SPEC 5.6, and scale 1 the thick model at the truth), then two variants at
     * the true thickness: the tilt negated and no tilt. One batch: one pass over G. */
    enum { NS = 12, NV = 2, T0 = 0, T_HALF = 4, T1 = 8, T2 = 11 };
    static const double sc[NS] = {0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1, 1.25, 1.5, 2};
    ssb4d_band_opts bo;
    ssb4d_band_opts_default(&bo);
    double power = 0, fs[NS + NV];
    if ((st = ssb4d_band_power(G, gg, &bo, NULL, &power, err)))
        return st;
    ssb4d_aberrations as[NS + NV];
    ssb4d_thick ts[NS + NV];
    memset(as, 0, sizeof as);
    memset(ts, 0, sizeof ts);
    for (int m = 0; m < NS + NV; m++) {
        as[m].C_nm[SSB4D_C10] = c->c10_mean_plane;
        as[m].C_nm[SSB4D_C12] = c->sp.ab.C_nm[SSB4D_C12];
        as[m].phi_deg[SSB4D_C12] = c->sp.ab.phi_deg[SSB4D_C12] + gg->rotation_deg;
        ts[m].tilt_mrad[0] = tilt_scan[0];
        ts[m].tilt_mrad[1] = tilt_scan[1];
        ts[m].thickness_nm = (m < NS ? sc[m] : 1.0) * c->thickness_nm;
    }
    ts[NS].tilt_mrad[0] = -tilt_scan[0], ts[NS].tilt_mrad[1] = -tilt_scan[1];
    ts[NS + 1].tilt_mrad[0] = ts[NS + 1].tilt_mrad[1] = 0;
    if ((st = ssb4d_band_fit(G, gg, as, ts, NS + NV, &bo, NULL, fs, err)))
        return st;
    k += (size_t)snprintf(out + k, outn - k, ",\"band_T_scan\":[");
    for (int m = 0; m < NS; m++)
        k += (size_t)snprintf(out + k, outn - k, "%s[%.3f,%.6f]", m ? "," : "", sc[m], fs[m] / power);
    k += (size_t)snprintf(out + k, outn - k, "]");
    /* variants: the tilt negated, no tilt, the half and the double thickness */
    k += (size_t)snprintf(out + k, outn - k, ",\"band_variants\":[%.6f,%.6f,%.6f,%.6f]", fs[NS] / power,
                          fs[NS + 1] / power, fs[T_HALF] / power, fs[T2] / power);
    snprintf(out + k, outn - k, ",\"band_fraction_truth\":[%.6f,%.6f],\"truth_scan\":[%.4f,%.4f,%.3f,%.3f,%.3f,%.3f]",
             fs[T0] / power, fs[T1] / power, c->c10_mean_plane, c->sp.ab.C_nm[SSB4D_C12],
             wrap(c->sp.ab.phi_deg[SSB4D_C12] + gg->rotation_deg, 180.0), tilt_scan[0], tilt_scan[1],
             c->thickness_nm);
    return SSB4D_OK;
}

static void json_line(const char *line)
{
    for (const char *p = line; *p;) {
        int at_value = p > line && (p[-1] == ':' || p[-1] == ',' || p[-1] == '[');
        if (at_value && !strncmp(p, "-nan", 4)) {
            fputs("null", stdout);
            p += 4;
        } else if (at_value && !strncmp(p, "nan", 3)) {
            fputs("null", stdout);
            p += 3;
        } else if (at_value && (!strncmp(p, "inf", 3) || !strncmp(p, "-inf", 4))) {
            fputs(*p == '-' ? "-1e999" : "1e999", stdout); /* JSON has no infinity; 1e999 reads as one */
            p += *p == '-' ? 4 : 3;
        } else
            fputc(*p++, stdout);
    }
    fflush(stdout);
}

/* ---- the study ------------------------------------------------------------------------------ */

typedef struct {
    int n, ok;
} tally;

static void tally_add(tally *t, int ok)
{
    t->n++;
    t->ok += ok;
}

int main(int argc, char **argv)
{
    int objectives = 0;
    int n = 120, threads = 0, tilt = 0, table = 0, max_scan = 128, rotation_given = 0, objective = -1;
    int only_th = -1, only_rot = -1, only_dose = -1, branch_check = 1, stats_only = 0, det_os = -1, mirror = 0;
    double float_sigma = -1; /* < 0: counts */
    uint64_t seed = 2026;
    double fit_radius = 0.0; /* 0: the library's default */
    const char *cases = NULL, *dump = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--n") && a + 1 < argc)
            n = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--seed") && a + 1 < argc)
            seed = strtoull(argv[++a], NULL, 10);
        else if (!strcmp(argv[a], "--cases") && a + 1 < argc)
            cases = argv[++a];
        else if (!strcmp(argv[a], "--threads") && a + 1 < argc)
            threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--dump") && a + 1 < argc)
            dump = argv[++a];
        else if (!strcmp(argv[a], "--max-scan") && a + 1 < argc)
            max_scan = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--fit-radius") && a + 1 < argc)
            fit_radius = atof(argv[++a]);
        else if (!strcmp(argv[a], "--tilt"))
            tilt = 1;
        else if (!strcmp(argv[a], "--objectives")) /* research: each objective's optimum on crystals */
            objectives = 1;
        else if (!strcmp(argv[a], "--rotation-given")) /* diagnostics: the true rotation given */
            rotation_given = 1;
        else if (!strcmp(argv[a], "--det-oversample") && a + 1 < argc) /* research: force S */
            det_os = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--stats-only")) /* research: the truth's branch statistics only */
            stats_only = 1;
        else if (!strcmp(argv[a], "--no-branch-check"))
            branch_check = 0;
        else if (!strcmp(argv[a], "--objective") && a + 1 < argc) {
            a++;
            objective = !strcmp(argv[a], "loss") ? SSB4D_FIT_OBJ_LOSS : SSB4D_FIT_OBJ_BAND;
        } else if (!strcmp(argv[a], "--only") && a + 2 < argc) { /* one stratum: th|rot|dose K */
            int k = atoi(argv[a + 2]);
            if (!strcmp(argv[a + 1], "th"))
                only_th = k;
            else if (!strcmp(argv[a + 1], "rot"))
                only_rot = k;
            else
                only_dose = k;
            a += 2;
        }
        else if (!strcmp(argv[a], "--table"))
            table = 1;
        else if (!strcmp(argv[a], "--mirror"))
            mirror = 1;
        else if (!strcmp(argv[a], "--float") && a + 1 < argc)
            float_sigma = atof(argv[++a]);
        else {
            fprintf(stderr, "usage: ssb4d_fit_study [--n N] [--seed S] [--cases i,j,..] [--tilt] "
                            "[--threads T] [--dump DIR] [--table] [--max-scan N]\n");
            return 2;
        }
    }
    tally all = {0, 0}, by_th[N_TH] = {{0, 0}}, by_rot[N_ROT] = {{0, 0}}, by_dose[N_DOSE] = {{0, 0}};
    tally by_spec[2] = {{0, 0}}, by_scan[3] = {{0, 0}}, by_tilt = {0, 0};
    tally spec_all = {0, 0}, spec_th[N_TH] = {{0, 0}}, spec_tilt = {0, 0}; /* SPEC §6.1's criterion */
    double t_all0 = now();
    for (int i = 0; i < n; i++) {
        if (cases) { /* a comma-separated list of indices */
            int want = 0;
            for (const char *s = cases; *s;) {
                char *e;
                long v = strtol(s, &e, 10);
                if (e == s)
                    break;
                if (v == i)
                    want = 1;
                s = *e ? e + 1 : e;
            }
            if (!want)
                continue;
        }
        ssb4d_err err = {0};
        study_case c;
        if (draw_case(seed, i, max_scan, &c, &err)) {
            fprintf(stderr, "case %d: %s\n", i, err.msg);
            return 1;
        }
        c.sp.threads = threads;
        c.sp.det_flip = mirror;
        if (det_os >= 0)
            c.sp.det_oversample = det_os;
        if ((only_th >= 0 && c.th != only_th) || (only_rot >= 0 && c.rot != only_rot) ||
            (only_dose >= 0 && c.dose_class != only_dose))
            continue;
        ssb4d_sim_info info;
        ssb4d_sim_describe(&c.sp, &info, &err);
        size_t dd = (size_t)c.sp.det * c.sp.det, np = (size_t)c.sp.scan_n * c.sp.scan_n;
        size_t shape[4] = {(size_t)c.sp.scan_n, (size_t)c.sp.scan_n, (size_t)c.sp.det, (size_t)c.sp.det};
        uint16_t *counts = malloc(np * dd * sizeof *counts);
        double t0 = now();
        float *gt = dump ? malloc(np * sizeof *gt) : NULL;
        if (!counts || ssb4d_simulate_to_memory(&c.sp, counts, NULL, NULL, gt, &info, &err)) {
            fprintf(stderr, "case %d: simulate: %s\n", i, err.msg);
            return 1;
        }
        double t1 = now();
        if (dump) {
            write_dump(dump, &c, counts, &info);
            char path[1024];
            snprintf(path, sizeof path, "%s/case%03d_phase_bl.f32", dump, c.index);
            FILE *f = fopen(path, "wb");
            if (f) {
                fwrite(gt, sizeof *gt, np, f);
                fclose(f);
            }
        }
        free(gt);
        ssb4d_source *src = NULL;
        ssb4d_calibration cal;
        ssb4d_calib_params cp;
        ssb4d_calib_params_default(&cp);
        cp.kv = c.sp.kv;
        cp.semiangle_mrad = c.sp.semiangle_mrad;
        cp.scan_step_A[0] = cp.scan_step_A[1] = info.scan_step_A;
        cp.det_sampling_mrad[0] = cp.det_sampling_mrad[1] = info.det_sampling_mrad;
        cp.threads = threads;
        ssb4d_gbuild_opts go;
        ssb4d_gbuild_opts_default(&go);
        go.threads = threads;
        ssb4d_G *G = NULL;
        float *fdata = NULL;
        if (float_sigma >= 0) { /* EMPAD-like: (count + read noise) in ADU of 1/7.3 e, seeded per case */
            fdata = malloc(np * dd * sizeof *fdata);
            uint64_t rs = c.sp.seed * 0x9E3779B97F4A7C15ull + 12345;
            for (size_t k = 0; fdata && k < np * dd; k++) {
                double u1 = unit(&rs), u2 = unit(&rs);
                double z = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)) * cos(2 * M_PI * u2);
                fdata[k] = (float)(7.3 * ((double)counts[k] + float_sigma * z));
            }
        }
        if ((fdata ? ssb4d_source_from_memory(fdata, SSB4D_F32, shape, &src, &err)
                   : ssb4d_source_from_memory(counts, SSB4D_U16, shape, &src, &err)) ||
            ssb4d_calibrate(src, &cp, &cal, &err) ||
            ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, NULL, &G, &err)) {
            fprintf(stderr, "case %d: calibrate/G: %s\n", i, err.msg);
            return 1;
        }
        double t2 = now();
        /* the dark-field fraction: counts beyond 1.25 BF radii of the disk centre over all counts
         * (a thickness indicator studied in issue 32) */
        double df_fraction = NAN;
        {
            double tot = 0, df = 0, r2 = 1.5625 * info.bf_radius_px * info.bf_radius_px;
            for (int u = 0; u < c.sp.det; u++)
                for (int v = 0; v < c.sp.det; v++) {
                    double du = u - cal.geom.centre_px[0], dv = v - cal.geom.centre_px[1], sum = 0;
                    for (size_t q = 0; q < np; q++)
                        sum += fdata ? (double)fdata[q * dd + (size_t)u * c.sp.det + v]
                                     : (double)counts[q * dd + (size_t)u * c.sp.det + v];
                    tot += sum;
                    if (du * du + dv * dv > r2)
                        df += sum;
                }
            if (tot > 0)
                df_fraction = df / tot;
        }
        ssb4d_fit_params fp;
        ssb4d_fit_params_default(&fp);
        fp.threads = threads;
        fp.rotation_given = rotation_given;
        fp.rotation_sigma_deg = cal.rotation_fitted ? cal.rotation_sigma_deg : NAN;
        fp.branch_check = branch_check;
        if (fit_radius > 0)
            fp.fit_radius = fit_radius;
        if (objective >= 0)
            fp.objective = (ssb4d_fit_objective)objective;
        ssb4d_geometry g0 = cal.geom;
        if (rotation_given)
            g0.rotation_deg = c.rotation_deg;
        /* the truth's φ12 in the (mirrored) detector frame the fit reports */
        double phi_true_probe = mirror ? wrap(90.0 - c.sp.ab.phi_deg[SSB4D_C12], 180.0) : c.sp.ab.phi_deg[SSB4D_C12];
        ssb4d_fit_result r;
        memset(&r, 0, sizeof r);
        if (stats_only)
            fp.use_parallax = 0, fp.trials = 0, fp.coarse_bf = 0;
        if (!stats_only && ssb4d_fit(G, &g0, &fp, NULL, &r, &err)) {
            fprintf(stderr, "case %d: fit: %s\n", i, err.msg);
            return 1;
        }
        double t3 = now();
        double bstat[4], expl[2], loss_truth = NAN;
        {
            ssb4d_geometry gt = cal.geom;
            gt.rotation_deg = c.rotation_deg;
            gt.flip = mirror;
            ssb4d_aberrations at = c.sp.ab;
            at.C_nm[SSB4D_C10] = c.c10_mean_plane;
            at.phi_deg[SSB4D_C12] = c.sp.ab.phi_deg[SSB4D_C12] + c.rotation_deg; /* scan frame */
            branch_stats(counts, np, dd, &cal, G, &gt, &at, bstat);
            expl[0] = explained(G, &gt, c.sp.scan_n, c.rotation_deg, &at);
            ssb4d_ssb_opts so;
            ssb4d_ssb_opts_default(&so);
            so.threads = threads;
            if (ssb4d_loss(G, &gt, &at, NULL, &so, NULL, &loss_truth, NULL, &err))
                loss_truth = NAN;
        }
        ssb4d_geometry gfit = cal.geom;
        gfit.flip = r.geom.flip;
        expl[1] = explained(G, &gfit, c.sp.scan_n, r.geom.rotation_deg, &r.ab);
        double tol10 = c.thickness_nm > 10.0 ? 2.0 : 0.2;
        double c12 = c.sp.ab.C_nm[SSB4D_C12];
        double d10 = r.ab.C_nm[SSB4D_C10] - c.c10_mean_plane;
        double d12 = r.ab.C_nm[SSB4D_C12] - c12;
        double dphi = wrap(r.phi12_probe_deg - phi_true_probe, 180.0);
        double drot = wrap(r.geom.rotation_deg - c.rotation_deg, 360.0);
        int ok10 = fabs(d10) <= tol10, ok12 = fabs(d12) <= 0.2, okphi = c12 < 1.0 || fabs(dphi) <= 3.0;
        int okrot = fabs(drot) <= 1.0, okflip = r.geom.flip == mirror;
        int ok = ok10 && ok12 && okphi && okrot && okflip;
        /* C10 of a crystal t thick is the defocus at its mean plane; the probe is defocused by ±t/2
         * through it, so a second tally accepts C10 anywhere in the middle half of the depth */
        int ok_depth = (fabs(d10) <= fmax(tol10, 0.25 * c.thickness_nm)) && ok12 && okphi && okrot && okflip;
        /* SPEC §6.1: C10 inside the slab ± 0.2 nm; C12 within 0.2 nm, or 5 % above 4 nm */
        const double f10 = r.ab.C_nm[SSB4D_C10];
        int spec10 = f10 >= c.c10_entrance - 0.2 && f10 <= c.c10_exit + 0.2;
        int spec12 = fabs(d12) <= (c12 > 4.0 ? fmax(0.2, 0.05 * c12) : 0.2);
        int ok_spec = spec10 && spec12 && okphi && okrot && okflip;
        /* the thick-sample fit on the tilted thick cases */
        int tilt_ok = -1, ok_spec_tilt = -1;
        double tilt_fit[2] = {NAN, NAN}, t_fit = NAN, t4 = t3;
        if (tilt && c.th == TH_THICK) {
            fit_tilt_params tp;
            fit_tilt_params_default(&tp);
            tp.thin.start[0] = r.ab.C_nm[SSB4D_C10];
            tp.thin.start[1] = r.ab.C_nm[SSB4D_C12];
            tp.thin.start[2] = r.ab.phi_deg[SSB4D_C12];
            fit_tilt_result tr;
            if (fit_tilt(G, &r.geom, &tp, NULL, &tr, NULL, &err)) {
                fprintf(stderr, "case %d: tilt: %s\n", i, err.msg);
                return 1;
            }
            t4 = now();
            tilt_fit[0] = tr.thick.tilt_mrad[0];
            tilt_fit[1] = tr.thick.tilt_mrad[1];
            t_fit = tr.thick.thickness_nm;
            /* the fit's tilt is in the scan frame, the simulator's in the detector frame (a direction
             * at a in the detector frame lies at a + rotation in the scan frame); the simulator's
             * tilt is a beam tilt, the specimen tilt its negative (docs/tilt.md) */
            double a = r.geom.rotation_deg * M_PI / 180.0, ca = cos(a), sa = sin(a);
            double tp0 = ca * tilt_fit[0] + sa * tilt_fit[1], tp1 = -sa * tilt_fit[0] + ca * tilt_fit[1];
            tilt_ok = hypot(tp0 + c.sp.tilt_mrad[0], tp1 + c.sp.tilt_mrad[1]) <= 1.0;
            tally_add(&by_tilt, tilt_ok);
            ok_spec_tilt = ok_spec && tilt_ok && fabs(t_fit - c.thickness_nm) <= 0.2 * c.thickness_nm;
            tally_add(&spec_tilt, ok_spec_tilt);
        }
        tally_add(&spec_all, ok_spec);
        tally_add(&spec_th[c.th], ok_spec);
        tally_add(&all, ok);
        tally_add(&by_th[c.th], ok);
        tally_add(&by_rot[c.rot], ok);
        tally_add(&by_dose[c.dose_class], ok);
        tally_add(&by_spec[c.sp.specimen == SSB4D_SPECIMEN_AU], ok);
        tally_add(&by_scan[c.sp.scan_n == 32 ? 0 : c.sp.scan_n == 64 ? 1 : 2], ok);
        char line[8192];
        snprintf(line, sizeof line, "{\"i\":%d,\"specimen\":\"%s\",\"kv\":%g,\"semiangle_mrad\":%.2f,\"scan\":%d,\"scan_cells\":%d,"
               "\"step_A\":%.4f,\"det\":%d,\"bf_radius_px\":%.2f,\"window_A\":%.2f,\"footprint_A\":%.2f,\"dose\":%.0f,\"thickness_nm\":%.2f,"
               "\"tilt_mrad\":[%.3f,%.3f],\"strata\":{\"thickness\":\"%s\",\"rotation\":\"%s\",\"dose\":\"%s\"},"
               "\"truth\":{\"C10_nm_mean_plane\":%.4f,\"C10_nm_entrance\":%.4f,\"C10_nm_exit\":%.4f,\"C12_nm\":%.4f,\"phi12_deg_probe\":%.3f,\"rotation_deg\":%.3f,\"flip\":%d},\"float_sigma\":%.3f,\"df_fraction\":%.5f,"
               "\"fit\":{\"C10_nm\":%.4f,\"C12_nm\":%.4f,\"phi12_deg_probe\":%.3f,\"phi12_deg_scan\":%.3f,"
               "\"rotation_deg\":%.3f,\"rotation_source\":\"%s\",\"flip\":%d,\"flip_source\":\"%s\",\"flip_objective\":[%.6f,%.6f],\"calibration_flip\":%d,\"calibration_flip_fitted\":%d,\"branch_flipped\":%d,\"loss\":%.9g,"
               "\"confident\":%d,\"skewness\":%.3f,\"contrast\":%.4f,\"se\":[%.4g,%.4g,%.4g,%.4g],\"disk_split\":[%.4g,%.4g,%.4g,%.4g]},"
               "\"parallax\":{\"C10_nm\":%.4f,\"C12_nm\":%.4f,\"phi12_deg_scan\":%.3f,\"rotation_deg\":%.3f,"
               "\"sigma\":[%.4f,%.4f,%.3f,%.3f]},"
               "\"calibration_rotation_deg\":%.3f,\"calibration_rotation_sigma_deg\":%.3f,"
               "\"dC10\":%.4f,\"dC12\":%.4f,\"dphi12\":%.3f,\"drotation\":%.3f,\"ok\":%s,\"ok_depth\":%s,\"ok_spec\":%s,\"ok_spec_tilt\":%d,\"branch_ok\":%s,\"flip_ok\":%s,"
               "\"tilt_fit_mrad\":[%.3f,%.3f],\"thickness_fit_nm\":%.3f,\"tilt_ok\":%d,"
               "\"explained\":{\"truth\":%.6f,\"fit\":%.6f},\"loss_truth\":%.9g,\"truth_branch\":{\"skewness\":%.3f,\"corr_negbf\":%.4f,\"corr_df\":%.4f,\"icom_skewness\":%.3f},\"evaluations\":%zu,\"simulate_s\":%.2f,\"calibrate_gbuild_s\":%.2f,\"fit_s\":%.2f,\"tilt_s\":%.2f}\n",
               i, c.sp.specimen == SSB4D_SPECIMEN_AU ? "Au" : "SrTiO3", c.sp.kv, c.sp.semiangle_mrad, c.sp.scan_n,
               c.sp.scan_cells, info.scan_step_A, c.sp.det, info.bf_radius_px, info.window_A,
               2.0 * c.sp.semiangle_mrad * 1e-3 * 10.0 * (fabs(c.sp.ab.C_nm[SSB4D_C10]) + c.sp.ab.C_nm[SSB4D_C12]) + 4.0, c.sp.dose, c.thickness_nm,
               -c.sp.tilt_mrad[0], -c.sp.tilt_mrad[1], th_name[c.th], rot_name[c.rot], dose_name[c.dose_class],
               c.c10_mean_plane, c.c10_entrance, c.c10_exit, c12, phi_true_probe, c.rotation_deg, mirror, float_sigma, df_fraction, r.ab.C_nm[SSB4D_C10],
               r.ab.C_nm[SSB4D_C12], r.phi12_probe_deg, r.ab.phi_deg[SSB4D_C12], r.geom.rotation_deg,
               r.rotation_source, r.geom.flip, r.flip_source, r.flip_objective[0], r.flip_objective[1], cal.geom.flip,
               cal.flip_fitted, r.branch_flipped, r.loss, r.confident, r.skewness, r.loss_contrast, r.C10_se_nm, r.C12_se_nm, r.phi12_se_deg,
               r.rotation_se_deg, r.disk_split[0], r.disk_split[1], r.disk_split[2], r.disk_split[3], r.parallax.C10_nm, r.parallax.C12_nm,
               r.parallax.phi12_deg, r.parallax.rotation_deg, r.parallax.sigma[0], r.parallax.sigma[1],
               r.parallax.sigma[2], r.parallax.sigma[3], cal.rotation_curl_deg, cal.rotation_sigma_deg, d10, d12,
               dphi, drot, ok ? "true" : "false", ok_depth ? "true" : "false", ok_spec ? "true" : "false", ok_spec_tilt, fabs(drot) < 90.0 ? "true" : "false", okflip ? "true" : "false", tilt_fit[0], tilt_fit[1], t_fit, tilt_ok, expl[0], expl[1], loss_truth, bstat[0], bstat[1], bstat[2], bstat[3], r.evaluations,
               t1 - t0, t2 - t1, t3 - t2, t4 - t3);
        if (objectives && c.th != TH_THIN && rotation_given) {
            char ob[4096];
            if (objective_study(G, &g0, &c, &fp, &r, ob, sizeof ob, &err)) {
                fprintf(stderr, "case %d: objectives: %s\n", i, err.msg);
                return 1;
            }
            size_t L = strlen(line);
            if (L >= 2 && line[L - 2] == '}')
                snprintf(line + L - 2, sizeof line - (L - 2), ",\"objectives\":{%s},\"objectives_s\":%.2f}\n", ob,
                         now() - t4);
        }
        json_line(line);
        ssb4d_fit_result_free(&r);
        ssb4d_G_free(G);
        ssb4d_calibration_free(&cal);
        ssb4d_source_close(src);
        free(counts);
        free(fdata);
    }
    double secs = now() - t_all0;
#define SUMMARY(label, t)                                                                                  \
    printf("{\"summary\":\"%s\",\"n\":%d,\"ok\":%d,\"rate\":%.4f}\n", label, (t).n, (t).ok,             \
           (t).n ? (double)(t).ok / (t).n : 0.0)
    for (int k = 0; k < N_TH; k++)
        SUMMARY(th_name[k], by_th[k]);
    for (int k = 0; k < N_ROT; k++)
        SUMMARY(rot_name[k], by_rot[k]);
    for (int k = 0; k < N_DOSE; k++)
        SUMMARY(dose_name[k], by_dose[k]);
    SUMMARY("SrTiO3", by_spec[0]);
    SUMMARY("Au", by_spec[1]);
    SUMMARY("scan 32", by_scan[0]);
    SUMMARY("scan 64", by_scan[1]);
    SUMMARY("scan 128", by_scan[2]);
    if (tilt)
        SUMMARY("tilt within 1 mrad (--tilt, thick cases)", by_tilt);
    SUMMARY("all", all);
    for (int k = 0; k < N_TH; k++) {
        char lab[96];
        snprintf(lab, sizeof lab, "SPEC 6.1: %s", th_name[k]);
        SUMMARY(lab, spec_th[k]);
    }
    if (tilt)
        SUMMARY("SPEC 6.1 with tilt and thickness (--tilt, thick cases)", spec_tilt);
    SUMMARY("SPEC 6.1: all", spec_all);
    printf("{\"summary\":\"study\",\"seed\":%llu,\"n\":%d,\"seconds\":%.1f}\n", (unsigned long long)seed, all.n, secs);
    if (table) {
        fprintf(stderr, "| stratum | cases | recovered | rate |\n|---|---|---|---|\n");
#define ROW(label, t) fprintf(stderr, "| %s | %d | %d | %.0f %% |\n", label, (t).n, (t).ok, (t).n ? 100.0 * (t).ok / (t).n : 0.0)
        for (int k = 0; k < N_TH; k++)
            ROW(th_name[k], by_th[k]);
        for (int k = 0; k < N_ROT; k++)
            ROW(rot_name[k], by_rot[k]);
        for (int k = 0; k < N_DOSE; k++)
            ROW(dose_name[k], by_dose[k]);
        ROW("SrTiO3", by_spec[0]);
        ROW("Au", by_spec[1]);
        ROW("scan 32", by_scan[0]);
        ROW("scan 64", by_scan[1]);
        ROW("scan 128", by_scan[2]);
        if (tilt)
            ROW("tilt within 1 mrad (--tilt)", by_tilt);
        ROW("**all**", all);
    }
    return 0;
}
