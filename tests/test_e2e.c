/* test_e2e.c — the acceptance path through the real binary: `ssb4d simulate --preset small`, then
 * `ssb4d reconstruct` with the calibration read from the sidecar, at the simulated aberrations; the
 * phase must correlate with the simulator's band-limited projected phase (>= 0.9), far better than
 * at wrong aberrations, and the JSON record must carry loss, n_bf and seconds (the loss over all
 * n_bf BF pixels: loss_n_bf). Then `ssb4d fit` on the same data recovers the truth with the
 * sidecar's rotation held, and `reconstruct --calibration` of its calibration.json reports the same
 * loss to the bit over the same pixels (the two losses are the same quantity) and the same phase. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
#include "ref_ssb.h"

static char dir[256];
static const char *bin;

static int run(const char *cmd, char *out, size_t outlen)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}


static float *load2d(const char *path, size_t *n)
{
    ssb4d_npy_info info;
    void *data = NULL;
    ssb4d_err err = {0};
    if (ssb_npy_load(path, &info, &data, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    if (info.ndim != 2 || strcmp(info.descr, "<f4")) {
        free(data);
        return NULL;
    }
    *n = info.shape[0] * info.shape[1];
    return data;
}

static double reconstruct_corr(const char *extra, double *loss)
{
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s reconstruct %s/s.npy -o %s/ph.npy --force --json --quiet %s", bin, dir, dir, extra);
    int rc = run(cmd, out, sizeof out);
    assert_int_equal(rc, 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(j, "loss")));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(j, "seconds")));
    assert_true(cJSON_GetObjectItem(j, "n_bf")->valuedouble > 1000);
    assert_true(cJSON_GetObjectItem(j, "loss_n_bf")->valuedouble == cJSON_GetObjectItem(j, "n_bf")->valuedouble);
    *loss = cJSON_GetObjectItem(j, "loss")->valuedouble;
    cJSON_Delete(j);
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/ph.npy", dir);
    snprintf(p2, sizeof p2, "%s/s_phase_bandlimited.npy", dir);
    size_t n1 = 0, n2 = 0;
    float *a = load2d(p1, &n1), *b = load2d(p2, &n2);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(n1, n2);
    double r = ref_correlation_f(a, b, n1);
    free(a);
    free(b);
    return r;
}

static void simulate_reconstruct(void **state)
{
    (void)state;
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s simulate --preset small --quiet -o %s/s.npy 2>&1", bin, dir);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    double loss_true, loss_wrong, loss_flip;
    double r = reconstruct_corr("", &loss_true);
    printf("# correlation with the projected phase at the simulated aberrations: %.4f (loss %.6g)\n", r, loss_true);
    assert_true(r >= 0.9);
    double rw = reconstruct_corr("--c10 -4", &loss_wrong);
    double rf = reconstruct_corr("--c10 9.8", &loss_flip);
    printf("# at C10 = -4 nm: %.4f (loss %.6g); C10 sign flipped: %.4f (loss %.6g)\n", rw, loss_wrong, rf, loss_flip);
    assert_true(rw < r - 0.05 && rf < 0.6);
    assert_true(loss_true < loss_wrong && loss_true < loss_flip);
    /* The same run again gives the same bits (TIFF output and the upsampled path too). */
    snprintf(cmd, sizeof cmd, "cd %s && %s reconstruct s.npy -o a.tiff --upsample 2 --quiet --threads 1 >/dev/null && "
             "%s reconstruct s.npy -o b.tiff --upsample 2 --quiet --threads 2 >/dev/null && cmp a.tiff b.tiff",
             dir, bin, bin);
    assert_int_equal(run(cmd, out, sizeof out), 0);

    /* The fit (the sidecar states the rotation: held) and the reconstruction of its file. */
    snprintf(cmd, sizeof cmd, "%s fit %s/s.npy -o %s/fit --json --quiet", bin, dir, dir);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    cJSON *f = cJSON_Parse(out);
    assert_non_null(f);
    double c10 = cJSON_GetObjectItem(f, "C10_nm")->valuedouble, c12 = cJSON_GetObjectItem(f, "C12_nm")->valuedouble;
    double phi = cJSON_GetObjectItem(f, "phi12_probe_deg")->valuedouble, fl = cJSON_GetObjectItem(f, "loss")->valuedouble;
    double fn = cJSON_GetObjectItem(f, "loss_n_bf")->valuedouble;
    printf("# fit: C10 %.3f nm, C12 %.3f nm, phi12 %.2f deg (probe frame), rotation %s %g, loss %.9g over %.0f BF "
           "pixels, %s\n", c10, c12, phi, cJSON_GetObjectItem(f, "rotation_source")->valuestring,
           cJSON_GetObjectItem(f, "rotation_deg")->valuedouble, fl, fn,
           cJSON_IsTrue(cJSON_GetObjectItem(f, "confident")) ? "confident" : "not confident");
    /* the small preset: C10 -10 nm at the entrance surface, mid-plane -9.80475; C12 2, phi12 20 */
    assert_true(fabs(c10 - -9.80475) <= 0.2 && fabs(c12 - 2.0) <= 0.2 && fabs(ref_dmod180(phi, 20.0)) <= 3.0);
    assert_string_equal(cJSON_GetObjectItem(f, "rotation_source")->valuestring, "given");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(f, "confident")));
    assert_true(fn == cJSON_GetObjectItem(f, "n_bf")->valuedouble);
    cJSON_Delete(f);
    snprintf(cmd, sizeof cmd, "%s reconstruct %s/s.npy --calibration %s/fit/calibration.json -o %s/re.tiff --json --quiet",
             bin, dir, dir, dir);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    cJSON *rj = cJSON_Parse(out);
    assert_non_null(rj);
    double rl = cJSON_GetObjectItem(rj, "loss")->valuedouble, rn = cJSON_GetObjectItem(rj, "loss_n_bf")->valuedouble;
    cJSON_Delete(rj);
    assert_memory_equal(&rl, &fl, sizeof rl);
    assert_true(rn == fn);
    snprintf(cmd, sizeof cmd, "cmp %s/re.tiff %s/fit/phase.tiff", dir, dir);
    assert_int_equal(run(cmd, out, sizeof out), 0);
}

int main(void)
{
    bin = getenv("SSB4D_BIN");
    if (!bin)
        bin = SSB4D_BIN;
    snprintf(dir, sizeof dir, "/tmp/ssb4d-e2e-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(simulate_reconstruct)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
