/* band_bench.c — the cost of per-set rotations in the band objective (src/ssb/band.c).
 *
 * Times one ssb4d_band_fit_rot batch of 8 parameter sets with one rotation against the same 8
 * sets with 8 different rotations, thin (the fast kernel) and thick (tilt and thickness), on a
 * resident float32 G and on a streamed one (half of its planes resident), and checks that every
 * value of the 8-rotation batch is the bits of a single call with that rotation in g. The data
 * is a counts .npy (e.g. `ssb4d simulate --preset small -o s.npy`); the microscope values default
 * to that preset's. One JSON line on stdout: median CPU seconds per batch over --reps runs.
 *
 * usage: ssb4d_band_bench DATA.npy [--kv 300] [--semiangle 25] [--step 0.36609375]
 *                         [--det 1.00832210022273] [--threads 2] [--reps 5]
 */
#include "ssb4d_advanced.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Process CPU seconds: less sensitive than wall time to other jobs on a shared machine (with
 * --threads 1 it is the batch's own time). */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { N = 8 };

/* Median CPU seconds of one batch with rotations r1 and with r8, the two runs alternating so that
 * a change of load on a shared machine touches both; f8 receives the r8 values. */
static void time_pair(const ssb4d_G *G, const ssb4d_geometry *g, const double *r1, const double *r8,
                      const ssb4d_aberrations *ab, const ssb4d_thick *th, const ssb4d_band_opts *o,
                      ssb4d_mem *mem, int reps, double *f8, double *t1_out, double *t8_out)
{
    double t1[64], t8[64], f1[N];
    ssb4d_err e = {0};
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (ssb4d_band_fit_rot(G, g, r1, ab, th, N, o, mem, f1, &e))
            goto fail;
        double t = now();
        if (ssb4d_band_fit_rot(G, g, r8, ab, th, N, o, mem, f8, &e))
            goto fail;
        t1[r] = t - t0;
        t8[r] = now() - t;
    }
    qsort(t1, (size_t)reps, sizeof *t1, cmp_double);
    qsort(t8, (size_t)reps, sizeof *t8, cmp_double);
    *t1_out = t1[reps / 2];
    *t8_out = t8[reps / 2];
    return;
fail:
    fprintf(stderr, "band fit: %s\n", e.msg);
    exit(1);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    double kv = 300, semi = 25, step = 0.36609375, det = 1.00832210022273;
    int threads = 2, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--kv"))
            kv = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--semiangle"))
            semi = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--step"))
            step = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--det"))
            det = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
            threads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--reps"))
            reps = atoi(argv[++i]);
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else {
            fprintf(stderr, "usage: %s DATA.npy [--kv KV] [--semiangle MRAD] [--step A] [--det MRAD] "
                            "[--threads T] [--reps R]\n", argv[0]);
            return 2;
        }
    }
    if (!path || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: %s DATA.npy [options] (reps 1..64)\n", argv[0]);
        return 2;
    }
    ssb4d_err e = {0};
    ssb4d_source *src = NULL;
    ssb4d_calibration cal;
    ssb4d_calib_params p;
    ssb4d_calib_params_default(&p);
    p.kv = kv;
    p.semiangle_mrad = semi;
    p.scan_step_A[0] = p.scan_step_A[1] = step;
    p.det_sampling_mrad[0] = p.det_sampling_mrad[1] = det;
    p.rotation_deg = 0;
    if (ssb4d_source_open(path, &src, &e) || ssb4d_calibrate(src, &p, &cal, &e)) {
        fprintf(stderr, "%s: %s\n", path, e.msg);
        return 1;
    }
    ssb4d_mem *mem = ssb4d_mem_create(0);
    ssb4d_band_opts o;
    ssb4d_band_opts_default(&o);
    o.threads = threads;
    ssb4d_aberrations ab[N];
    ssb4d_thick thin[N], thick[N];
    double one_rot[N], rots[N];
    memset(ab, 0, sizeof ab);
    for (int i = 0; i < N; i++) {
        ab[i].C_nm[SSB4D_C10] = -10 + 0.5 * i;
        ab[i].C_nm[SSB4D_C12] = 2 + 0.1 * i;
        ab[i].phi_deg[SSB4D_C12] = 20 - 3 * i;
        thin[i] = (ssb4d_thick){{0, 0}, 0};
        thick[i] = (ssb4d_thick){{3 - i, -4 + i}, 5 + 2 * i};
        one_rot[i] = 1.5;
        rots[i] = -4 + 1.25 * i;
    }
    printf("{\"data\":\"%s\",\"threads\":%d,\"reps\":%d,\"n_bf\":%zu,\"sets\":%d", path, threads, reps, cal.n_bf, N);
    int same_bits = 1;
    for (int mode = 0; mode < 2; mode++) {
        ssb4d_gbuild_opts go;
        ssb4d_gbuild_opts_default(&go);
        ssb4d_G *G = NULL;
        if (ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, mem, &G, &e)) {
            fprintf(stderr, "gbuild: %s\n", e.msg);
            return 1;
        }
        if (mode == 1) { /* streamed: half of the planes resident */
            size_t half = ssb4d_G_bytes(G) / 2;
            ssb4d_G_free(G);
            go.resident_bytes = half;
            if (ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, mem, &G, &e)) {
                fprintf(stderr, "gbuild: %s\n", e.msg);
                return 1;
            }
        }
        double f8[N], t_thin1, t_thin8, t_thick1, t_thick8;
        time_pair(G, &cal.geom, one_rot, rots, ab, thin, &o, mem, reps, f8, &t_thin1, &t_thin8);
        time_pair(G, &cal.geom, one_rot, rots, ab, thick, &o, mem, reps, f8, &t_thick1, &t_thick8);
        /* Each value of the 8-rotation batch is the bits of a single call with that rotation. */
        for (int i = 0; i < N; i++) {
            ssb4d_geometry gi = cal.geom;
            gi.rotation_deg = rots[i];
            double f;
            if (ssb4d_band_fit(G, &gi, &ab[i], &thick[i], 1, &o, mem, &f, &e)) {
                fprintf(stderr, "band fit: %s\n", e.msg);
                return 1;
            }
            same_bits &= !memcmp(&f, &f8[i], sizeof f);
        }
        const char *name = mode ? "streamed" : "resident";
        printf(",\"%s\":{\"planes_resident\":%zu,\"planes_stored\":%zu,\"thin_1rot_s\":%.4f,\"thin_8rot_s\":%.4f,"
               "\"thick_1rot_s\":%.4f,\"thick_8rot_s\":%.4f}",
               name, ssb4d_G_n_resident(G), ssb4d_G_n_stored(G), t_thin1, t_thin8, t_thick1, t_thick8);
        ssb4d_G_free(G);
    }
    printf(",\"same_bits_as_single_calls\":%s}\n", same_bits ? "true" : "false");
    ssb4d_mem_destroy(mem);
    ssb4d_calibration_free(&cal);
    ssb4d_source_close(src);
    return same_bits ? 0 : 1;
}
