/* test_bench_record.c — benchmark records (SPEC §10): medians over 1..5 repeats (even counts
 * take the mean of the middle two), the JSON written atomically with every key, and the verdicts
 * of bench_compare_files: time, memory (relative and absolute), hashes, missing stages, and the
 * refusals (exit 2) of missing, malformed and foreign files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/record.h"
#include "common/textfile.h"

#define GIB 1073741824.0

typedef struct {
    char dir[64];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/ssb4d-bench-XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    DIR *d = opendir(f->dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", f->dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static void path_in(const fixture *f, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", f->dir, name);
}

static cJSON *read_json(const char *path)
{
    char *text = NULL;
    ssb4d_err err = {0};
    assert_int_equal(ssb_read_text_file(path, 1 << 20, "test", &text, NULL, &err), SSB4D_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static char *read_text(const char *path)
{
    char *text = NULL;
    ssb4d_err err = {0};
    assert_int_equal(ssb_read_text_file(path, 1 << 20, "test", &text, NULL, &err), SSB4D_OK);
    return text;
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void add_stage(bench_record *r, const char *name, double seconds, size_t peak)
{
    bench_stage *s = &r->stages[r->n_stages++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->n_runs = 3;
    s->seconds[0] = seconds;
    s->seconds[1] = seconds * 1.01;
    s->seconds[2] = seconds * 0.99;
    s->peak_bytes = peak;
    s->after_bytes = peak / 2;
    s->cache_bytes = 0;
    s->rss_peak_bytes = peak + (64u << 20);
    s->device_peak_bytes = 0;
}

static void base_record(bench_record *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->workload, sizeof r->workload, "small");
    snprintf(r->identity, sizeof r->identity, "sha256:%064d", 0);
    r->shape[0] = r->shape[1] = 128;
    r->shape[2] = r->shape[3] = 64;
    r->n_bf = 1869;
    r->n_stored = 1869;
    r->encoded_bytes = 30000000;
    r->g_bytes = 124780544;
    r->threads = 2;
    r->memory_budget_bytes = (size_t)8 << 30;
    r->repeat = 3;
    r->upsample = 2;
    snprintf(r->preview_precision, sizeof r->preview_precision, "float");
    snprintf(r->mode, sizeof r->mode, "resident");
    snprintf(r->backend, sizeof r->backend, "cpu");
    add_stage(r, "load", 1.0, (size_t)(3 * GIB));
    add_stage(r, "ssb_build", 2.0, (size_t)(1 * GIB));
    add_stage(r, "drag_preview", 0.001, (size_t)(0.2 * GIB));
    add_stage(r, "fit", 7.0, (size_t)(1 * GIB));
    r->C10_nm = -10.02;
    r->C12_nm = 2.01;
    r->phi12_deg = 29.9;
    r->loss = NAN; /* written as null */
    r->session_peak_bytes = (size_t)(3.5 * GIB);
    r->session_rss_peak_bytes = (size_t)(4 * GIB);
    snprintf(r->g_sha256, sizeof r->g_sha256, "%064x", 0xabcdefu);
    snprintf(r->phase_sha256, sizeof r->phase_sha256, "%064x", 0x123456u);
    r->trace_sha256[0] = 0; /* written as null */
    bench_record_finish(r);
}

static bench_stage *stage(bench_record *r, const char *name)
{
    for (size_t i = 0; i < r->n_stages; i++)
        if (!strcmp(r->stages[i].name, name))
            return &r->stages[i];
    fail_msg("no stage %s", name);
    return NULL;
}

/* Writes old and new, compares them (table into a file) and returns the exit status. */
static int compare(const fixture *f, const bench_record *old, const bench_record *new_,
                   const bench_compare_opts *o, char **table)
{
    char po[256], pn[256], pt[256];
    path_in(f, "old.json", po, sizeof po);
    path_in(f, "new.json", pn, sizeof pn);
    path_in(f, "table.txt", pt, sizeof pt);
    ssb4d_err err = {0};
    assert_int_equal(bench_record_write(old, po, &err), SSB4D_OK);
    assert_int_equal(bench_record_write(new_, pn, &err), SSB4D_OK);
    FILE *out = fopen(pt, "w");
    assert_non_null(out);
    int rc = bench_compare_files(po, pn, o, out, &err);
    fclose(out);
    if (rc != 2)
        assert_string_equal(err.msg, "");
    *table = read_text(pt);
    return rc;
}

/* GCC 12 wrongly sees the heap text read_text returns as the caller's local (-Wdangling-pointer). */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#endif
static int last_line_has(const char *table, const char *what)
{
    /* Offsets, not pointers: the last "bench compare: " line. */
    size_t at = (size_t)-1;
    for (const char *p = strstr(table, "bench compare: "); p; p = strstr(p + 1, "bench compare: "))
        at = (size_t)(p - table);
    return at != (size_t)-1 && strstr(table + at, what) != NULL;
}

/* ------------------------------------------------------------------------------------------ */

static void medians_over_repeats(void **state)
{
    (void)state;
    bench_record r;
    memset(&r, 0, sizeof r);
    const double runs[5] = {5, 3, 1, 4, 2}; /* unsorted on purpose */
    const double want[5][3] = {{5, 5, 5}, {4, 3, 5}, {3, 1, 5}, {3.5, 1, 5}, {3, 1, 5}};
    for (size_t n = 1; n <= 5; n++) {
        bench_stage *s = &r.stages[r.n_stages++];
        snprintf(s->name, sizeof s->name, "n%zu", n);
        s->n_runs = n;
        memcpy(s->seconds, runs, n * sizeof *runs);
    }
    bench_record_finish(&r);
    for (size_t n = 1; n <= 5; n++) {
        const bench_stage *s = &r.stages[n - 1];
        assert_true(s->median == want[n - 1][0]);
        assert_true(s->min == want[n - 1][1]);
        assert_true(s->max == want[n - 1][2]);
    }
    /* An even count of distinct values: {0.1, 0.4, 0.2, 0.3} -> (0.2 + 0.3) / 2. */
    bench_stage *s = &r.stages[0];
    s->n_runs = 4;
    s->seconds[0] = 0.1, s->seconds[1] = 0.4, s->seconds[2] = 0.2, s->seconds[3] = 0.3;
    bench_record_finish(&r);
    assert_true(fabs(s->median - 0.25) < 1e-15);
    /* No runs: no time. */
    s->n_runs = 0;
    bench_record_finish(&r);
    assert_true(isnan(s->median));
}

static void record_json_has_every_key(void **state)
{
    fixture *f = *state;
    bench_record r;
    base_record(&r);
    /* the 1..5-run medians also travel through the file */
    bench_stage *s = stage(&r, "fit");
    s->n_runs = 4;
    s->seconds[0] = 7.4, s->seconds[1] = 7.0, s->seconds[2] = 7.2, s->seconds[3] = 7.1;
    bench_record_finish(&r);
    char p[256];
    path_in(f, "rec.json", p, sizeof p);
    ssb4d_err err = {0};
    assert_int_equal(bench_record_write(&r, p, &err), SSB4D_OK);

    /* Atomic: only the record is left in the folder, no temporary file. */
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            assert_string_equal(e->d_name, "rec.json");
            n++;
        }
    closedir(d);
    assert_int_equal(n, 1);

    cJSON *j = read_json(p);
    assert_string_equal(cJSON_GetObjectItem(j, "schema")->valuestring, BENCH_SCHEMA);
    const char *date = cJSON_GetObjectItem(j, "date")->valuestring;
    assert_int_equal(strlen(date), 20); /* 2026-12-03T14:00:00Z */
    assert_int_equal(date[10], 'T');
    assert_int_equal(date[19], 'Z');

    cJSON *git = cJSON_GetObjectItem(j, "git");
    const char *rev = cJSON_GetObjectItem(git, "revision")->valuestring;
    assert_true(!strcmp(rev, "unknown") || strlen(rev) == 40);
    cJSON *dirty = cJSON_GetObjectItem(git, "dirty");
    assert_true(cJSON_IsBool(dirty) || cJSON_IsNull(dirty));

    cJSON *m = cJSON_GetObjectItem(j, "machine");
    assert_true(cJSON_IsString(cJSON_GetObjectItem(m, "cpu")));
    assert_true(cJSON_GetObjectItem(m, "cores")->valuedouble >= 1);
    assert_true(cJSON_GetObjectItem(m, "ram_bytes")->valuedouble > 0);
    cJSON *gpu = cJSON_GetObjectItem(m, "gpu"), *drv = cJSON_GetObjectItem(m, "driver");
    assert_true(cJSON_IsNull(gpu) || cJSON_IsString(gpu));
    assert_true(cJSON_IsNull(drv) || cJSON_IsString(drv));
    assert_non_null(strstr(cJSON_GetObjectItem(m, "os")->valuestring, "Linux"));

    cJSON *w = cJSON_GetObjectItem(j, "workload");
    assert_string_equal(cJSON_GetObjectItem(w, "name")->valuestring, "small");
    assert_true(cJSON_IsString(cJSON_GetObjectItem(w, "identity")));
    cJSON *shape = cJSON_GetObjectItem(w, "shape");
    assert_int_equal(cJSON_GetArraySize(shape), 4);
    assert_int_equal(cJSON_GetArrayItem(shape, 0)->valueint, 128);
    assert_int_equal(cJSON_GetArrayItem(shape, 3)->valueint, 64);
    assert_int_equal(cJSON_GetObjectItem(w, "n_bf")->valueint, 1869);
    assert_int_equal(cJSON_GetObjectItem(w, "n_stored")->valueint, 1869);
    assert_true(cJSON_GetObjectItem(w, "encoded_bytes")->valuedouble == 30000000);
    assert_true(cJSON_GetObjectItem(w, "g_bytes")->valuedouble == 124780544);

    cJSON *st = cJSON_GetObjectItem(j, "settings");
    assert_int_equal(cJSON_GetObjectItem(st, "threads")->valueint, 2);
    assert_true(cJSON_GetObjectItem(st, "memory_budget_bytes")->valuedouble == 8 * GIB);
    assert_int_equal(cJSON_GetObjectItem(st, "repeat")->valueint, 3);
    assert_int_equal(cJSON_GetObjectItem(st, "upsample")->valueint, 2);
    assert_string_equal(cJSON_GetObjectItem(st, "preview_precision")->valuestring, "float");
    assert_string_equal(cJSON_GetObjectItem(st, "mode")->valuestring, "resident");
    assert_string_equal(cJSON_GetObjectItem(st, "loss_tile")->valuestring, "default");
    assert_string_equal(cJSON_GetObjectItem(st, "backend")->valuestring, "cpu");

    cJSON *stages = cJSON_GetObjectItem(j, "stages");
    assert_int_equal(cJSON_GetArraySize(stages), 4);
    cJSON *load = cJSON_GetArrayItem(stages, 0);
    assert_string_equal(cJSON_GetObjectItem(load, "name")->valuestring, "load");
    static const char *const mem[] = {"peak_bytes", "after_bytes", "cache_bytes", "rss_peak_bytes",
                                      "device_peak_bytes"};
    for (size_t i = 0; i < 5; i++)
        assert_true(cJSON_IsNumber(cJSON_GetObjectItem(load, mem[i])));
    assert_true(cJSON_GetObjectItem(load, "peak_bytes")->valuedouble == 3 * GIB);
    cJSON *fit = cJSON_GetArrayItem(stages, 3);
    cJSON *sec = cJSON_GetObjectItem(fit, "seconds");
    assert_true(fabs(cJSON_GetObjectItem(sec, "median")->valuedouble - 7.15) < 1e-12);
    assert_true(cJSON_GetObjectItem(sec, "min")->valuedouble == 7.0);
    assert_true(cJSON_GetObjectItem(sec, "max")->valuedouble == 7.4);
    cJSON *runs = cJSON_GetObjectItem(sec, "runs");
    assert_int_equal(cJSON_GetArraySize(runs), 4);
    assert_true(cJSON_GetArrayItem(runs, 0)->valuedouble == 7.4); /* in run order */

    assert_true(cJSON_GetObjectItem(j, "session_peak_bytes")->valuedouble == 3.5 * GIB);
    assert_true(cJSON_GetObjectItem(j, "session_rss_peak_bytes")->valuedouble == 4 * GIB);
    cJSON *fj = cJSON_GetObjectItem(j, "fit");
    assert_true(cJSON_GetObjectItem(fj, "C10_nm")->valuedouble == -10.02);
    assert_true(cJSON_GetObjectItem(fj, "C12_nm")->valuedouble == 2.01);
    assert_true(cJSON_GetObjectItem(fj, "phi12_deg")->valuedouble == 29.9);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(fj, "loss")));
    cJSON *h = cJSON_GetObjectItem(j, "hashes");
    assert_int_equal(strlen(cJSON_GetObjectItem(h, "G")->valuestring), 64);
    assert_int_equal(strlen(cJSON_GetObjectItem(h, "phase")->valuestring), 64);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(h, "trace")));
    cJSON_Delete(j);

    /* A set loss tile is a number. */
    r.loss_tile = 4096;
    assert_int_equal(bench_record_write(&r, p, &err), SSB4D_OK);
    j = read_json(p);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "settings"), "loss_tile")->valueint, 4096);
    cJSON_Delete(j);

    /* An unwritable place: a message naming the path. */
    assert_int_not_equal(bench_record_write(&r, "/nonexistent-dir/rec.json", &err), SSB4D_OK);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/rec.json"));
}

static void compare_time_verdicts(void **state)
{
    fixture *f = *state;
    bench_record old, new_;
    base_record(&old);
    char *t;

    new_ = old;
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 0);
    for (size_t i = 0; i < old.n_stages; i++)
        assert_non_null(strstr(t, old.stages[i].name));
    assert_true(last_line_has(t, "OK (4 stages"));
    free(t);

    /* +20 % on one stage: regressed, and named on the last line. */
    new_ = old;
    for (size_t k = 0; k < 3; k++)
        stage(&new_, "ssb_build")->seconds[k] *= 1.20;
    bench_record_finish(&new_);
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 1);
    assert_true(last_line_has(t, "REGRESSED"));
    assert_true(last_line_has(t, "ssb_build time"));
    free(t);

    /* ... but passes with --time-ratio 0.25 */
    bench_compare_opts o;
    bench_compare_opts_default(&o);
    o.time_ratio = 0.25;
    assert_int_equal(compare(f, &old, &new_, &o, &t), 0);
    free(t);

    /* +5 %: within the 10 %. */
    new_ = old;
    for (size_t k = 0; k < 3; k++)
        stage(&new_, "fit")->seconds[k] *= 1.05;
    bench_record_finish(&new_);
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 0);
    free(t);

    /* A 1 ms stage doubled: both below min_seconds, shown but not judged. */
    new_ = old;
    for (size_t k = 0; k < 3; k++)
        stage(&new_, "drag_preview")->seconds[k] *= 2;
    bench_record_finish(&new_);
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 0);
    assert_non_null(strstr(t, "not judged"));
    free(t);
    /* ... judged when the floor is lowered */
    o.time_ratio = 0.10;
    o.min_seconds = 0;
    assert_int_equal(compare(f, &old, &new_, &o, &t), 1);
    free(t);

    /* A stage of OLD missing from NEW regresses; a stage only NEW has is reported. */
    new_ = old;
    new_.n_stages = 3; /* drops "fit" */
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 1);
    assert_true(last_line_has(t, "stage fit missing"));
    free(t);
    assert_int_equal(compare(f, &new_, &old, NULL, &t), 0);
    assert_non_null(strstr(t, "new stage"));
    free(t);

    /* Another workload: a warning, still compared. */
    new_ = old;
    snprintf(new_.workload, sizeof new_.workload, "medium");
    new_.shape[0] = new_.shape[1] = 256;
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 0);
    assert_non_null(strstr(t, "warning: workloads differ"));
    free(t);
}

static void compare_memory_and_hash_verdicts(void **state)
{
    fixture *f = *state;
    bench_record old, new_;
    base_record(&old);
    char *t;

    /* 3 GiB -> 3.33 GiB: +11 % and +0.33 GiB. */
    new_ = old;
    stage(&new_, "load")->peak_bytes = (size_t)(3 * GIB * 1.11);
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 1);
    assert_true(last_line_has(t, "load peak_bytes"));
    free(t);

    /* 0.2 GiB -> 0.3 GiB: +50 % but only +0.1 GiB. */
    new_ = old;
    stage(&new_, "drag_preview")->peak_bytes = (size_t)(0.3 * GIB);
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 0);
    free(t);
    /* ... a regression with --mem-abs 0.05 */
    bench_compare_opts o;
    bench_compare_opts_default(&o);
    o.mem_abs_bytes = 0.05 * GIB;
    assert_int_equal(compare(f, &old, &new_, &o, &t), 1);
    free(t);

    /* A session total counts as well. */
    new_ = old;
    new_.session_rss_peak_bytes = (size_t)(5 * GIB);
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 1);
    assert_true(last_line_has(t, "session_rss_peak_bytes"));
    free(t);

    /* Memory that shrank is fine. */
    new_ = old;
    stage(&new_, "load")->peak_bytes = (size_t)(1 * GIB);
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 0);
    free(t);

    /* A changed phase hash regresses, unless allowed; a null hash is not compared. */
    new_ = old;
    new_.phase_sha256[0] = 'f';
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 1);
    assert_true(last_line_has(t, "phase hash changed"));
    free(t);
    bench_compare_opts_default(&o);
    o.allow_hash_change = 1;
    assert_int_equal(compare(f, &old, &new_, &o, &t), 0);
    assert_non_null(strstr(t, "changed (allowed)"));
    free(t);
    new_ = old;
    snprintf(new_.trace_sha256, sizeof new_.trace_sha256, "%064d", 7); /* old trace is null */
    new_.g_sha256[0] = 0;                                               /* new G is null */
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 0);
    free(t);

    /* Everything at once: all listed. */
    new_ = old;
    stage(&new_, "load")->peak_bytes = (size_t)(4 * GIB);
    new_.g_sha256[1] = 'x';
    for (size_t k = 0; k < 3; k++)
        stage(&new_, "fit")->seconds[k] *= 2;
    bench_record_finish(&new_);
    assert_int_equal(compare(f, &old, &new_, NULL, &t), 1);
    assert_true(last_line_has(t, "fit time"));
    assert_true(last_line_has(t, "load peak_bytes"));
    assert_true(last_line_has(t, "G hash changed"));
    free(t);
}

/* bench_compare_files on files that are not two good records: 2 and a message naming the file. */
static void expect_refused(const fixture *f, const char *old_path, const char *new_path,
                           const char *want_in_msg, const char *want_file)
{
    char pt[256];
    path_in(f, "table.txt", pt, sizeof pt);
    FILE *out = fopen(pt, "w");
    assert_non_null(out);
    ssb4d_err err = {0};
    int rc = bench_compare_files(old_path, new_path, NULL, out, &err);
    fclose(out);
    assert_int_equal(rc, 2);
    if (!strstr(err.msg, want_in_msg) || !strstr(err.msg, want_file))
        fail_msg("message '%s' lacks '%s' or '%s'", err.msg, want_in_msg, want_file);
    char *t = read_text(pt);
    assert_string_equal(t, ""); /* nothing printed before the refusal */
    free(t);
}

static void compare_refuses_bad_files(void **state)
{
    fixture *f = *state;
    bench_record r;
    base_record(&r);
    char good[256], missing[256], bad_json[256], schema[256], no_schema[256], no_stages[256],
        nameless[256], array[256];
    path_in(f, "good.json", good, sizeof good);
    path_in(f, "missing.json", missing, sizeof missing);
    path_in(f, "bad.json", bad_json, sizeof bad_json);
    path_in(f, "schema.json", schema, sizeof schema);
    path_in(f, "noschema.json", no_schema, sizeof no_schema);
    path_in(f, "nostages.json", no_stages, sizeof no_stages);
    path_in(f, "nameless.json", nameless, sizeof nameless);
    path_in(f, "array.json", array, sizeof array);
    ssb4d_err err = {0};
    assert_int_equal(bench_record_write(&r, good, &err), SSB4D_OK);
    write_text(bad_json, "{\"schema\": \"ssb4d-bench/1\", \"stages\": [");
    write_text(schema, "{\"schema\": \"ssb4d-bench/2\", \"stages\": []}");
    write_text(no_schema, "{\"stages\": []}");
    write_text(no_stages, "{\"schema\": \"ssb4d-bench/1\"}");
    write_text(nameless, "{\"schema\": \"ssb4d-bench/1\", \"stages\": [{\"seconds\": {}}]}");
    write_text(array, "[1, 2]");

    expect_refused(f, missing, good, "cannot open", "missing.json");
    expect_refused(f, good, missing, "cannot open", "missing.json");
    expect_refused(f, good, bad_json, "not valid JSON", "bad.json");
    expect_refused(f, schema, good, "ssb4d-bench/2", "schema.json");
    expect_refused(f, good, no_schema, "no \"schema\"", "noschema.json");
    expect_refused(f, no_stages, good, "no \"stages\"", "nostages.json");
    expect_refused(f, good, nameless, "no \"name\"", "nameless.json");
    expect_refused(f, array, good, "not a JSON object", "array.json");
    expect_refused(f, f->dir, good, "not a regular file", f->dir);

    /* Absurd thresholds. */
    bench_compare_opts o;
    bench_compare_opts_default(&o);
    o.time_ratio = -1;
    assert_int_equal(bench_compare_files(good, good, &o, stdout, &err), 2);
    assert_non_null(strstr(err.msg, "thresholds"));

    /* A record of the minimal form is accepted: no stages, no hashes. */
    char minimal[256];
    path_in(f, "minimal.json", minimal, sizeof minimal);
    write_text(minimal, "{\"schema\": \"ssb4d-bench/1\", \"stages\": []}");
    char pt[256];
    path_in(f, "table.txt", pt, sizeof pt);
    FILE *out = fopen(pt, "w");
    assert_int_equal(bench_compare_files(minimal, minimal, NULL, out, &err), 0);
    fclose(out);
    char *t = read_text(pt);
    assert_true(last_line_has(t, "OK (0 stages"));
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(medians_over_repeats),
        cmocka_unit_test_setup_teardown(record_json_has_every_key, setup, teardown),
        cmocka_unit_test_setup_teardown(compare_time_verdicts, setup, teardown),
        cmocka_unit_test_setup_teardown(compare_memory_and_hash_verdicts, setup, teardown),
        cmocka_unit_test_setup_teardown(compare_refuses_bad_files, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
