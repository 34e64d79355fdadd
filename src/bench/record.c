/* record.c — benchmark records (SPEC §10): statistics over repeats, the JSON record with the
 * machine and git revision it ran on, and the comparison of two record files. */
#include "bench/record.h"

#include "common/atomic.h"
#include "common/err.h"
#include "common/textfile.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define GIB 1073741824.0
/* Records are a few KiB; anything far larger is not one. */
#define BENCH_MAX_FILE_BYTES ((size_t)64 << 20)

/* ------------------------------------------------------------------------------------------ */
/* Statistics                                                                                  */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_stats(const double *runs, size_t n, double *median, double *min, double *max)
{
    *median = *min = *max = NAN; /* written as null: a stage that never ran */
    if (n == 0)
        return 0;
    double *v = malloc(n * sizeof *v);
    if (!v)
        return -1;
    memcpy(v, runs, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_double);
    *min = v[0];
    *max = v[n - 1];
    *median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    free(v);
    return 0;
}

void bench_record_finish(bench_record *r)
{
    size_t n_stages = r->n_stages < BENCH_MAX_STAGES ? r->n_stages : BENCH_MAX_STAGES;
    for (size_t i = 0; i < n_stages; i++) {
        bench_stage *s = &r->stages[i];
        size_t n = s->n_runs < BENCH_MAX_RUNS ? s->n_runs : BENCH_MAX_RUNS;
        bench_stats(s->seconds, n, &s->median, &s->min, &s->max);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Where the record ran: machine, OS, git revision                                             */

/* Strips trailing whitespace (newlines from files and commands) in place. */
static void rtrim(char *s)
{
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
}

/* First line of a command's stdout into out (trimmed); 0 when the command ran and exited 0. */
static int command_line(const char *cmd, char *out, size_t n, int *any_output)
{
    out[0] = 0;
    if (any_output)
        *any_output = 0;
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[512];
    int first = 1;
    while (fgets(line, sizeof line, p)) {
        if (any_output)
            *any_output = 1;
        if (first) {
            snprintf(out, n, "%s", line);
            first = 0;
        }
    }
    int rc = pclose(p);
    rtrim(out);
    return rc == 0 ? 0 : -1;
}

/* The value of the first "key : value" line of a /proc file whose key is `key`. */
static int proc_value(const char *file, const char *key, char *out, size_t n)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return -1;
    char line[1024];
    size_t klen = strlen(key);
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0)
            continue;
        const char *p = line + klen;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != ':')
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        snprintf(out, n, "%s", p);
        rtrim(out);
        found = 0;
        break;
    }
    fclose(f);
    return found;
}

#ifdef SSB4D_SOURCE_DIR /* only the git lookup needs these */
static int is_hex40(const char *s)
{
    if (strlen(s) != 40)
        return 0;
    for (int i = 0; i < 40; i++)
        if (!isxdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

/* Single-quotes s for /bin/sh into out; 0 when it fits. */
static int shell_quote(const char *s, char *out, size_t n)
{
    size_t k = 0;
    if (n < 3)
        return -1;
    out[k++] = '\'';
    for (; *s; s++) {
        const char *piece = *s == '\'' ? "'\\''" : NULL;
        size_t len = piece ? 4 : 1;
        if (k + len + 2 > n)
            return -1;
        if (piece)
            memcpy(out + k, piece, len);
        else
            out[k] = *s;
        k += len;
    }
    out[k++] = '\'';
    out[k] = 0;
    return 0;
}
#endif

/* Revision of the source tree the binary was built from, and whether tracked files differ from
 * it. "unknown" / dirty = -1 (null) when git or the tree is not there (an installed binary). */
static void git_state(char rev[48], int *dirty)
{
    snprintf(rev, 48, "unknown");
    *dirty = -1;
#ifdef SSB4D_SOURCE_DIR
    char dir[1024], cmd[1200], line[512];
    if (shell_quote(SSB4D_SOURCE_DIR, dir, sizeof dir) != 0)
        return;
    snprintf(cmd, sizeof cmd, "git -C %s rev-parse HEAD 2>/dev/null", dir);
    if (command_line(cmd, line, sizeof line, NULL) != 0 || !is_hex40(line))
        return;
    snprintf(rev, 48, "%s", line);
    int any = 0;
    snprintf(cmd, sizeof cmd, "git -C %s status --porcelain --untracked-files=no 2>/dev/null", dir);
    if (command_line(cmd, line, sizeof line, &any) == 0)
        *dirty = any;
#endif
}

static cJSON *machine_json(void)
{
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return NULL;
    char buf[512];
    if (proc_value("/proc/cpuinfo", "model name", buf, sizeof buf) != 0 &&
        proc_value("/proc/cpuinfo", "Hardware", buf, sizeof buf) != 0) /* some ARM kernels */
        snprintf(buf, sizeof buf, "unknown");
    cJSON_AddStringToObject(m, "cpu", buf);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cJSON_AddNumberToObject(m, "cores", cores > 0 ? (double)cores : 0);
    /* MemTotal is in kB (KiB). */
    unsigned long long kb = 0;
    if (proc_value("/proc/meminfo", "MemTotal", buf, sizeof buf) == 0)
        kb = strtoull(buf, NULL, 10);
    cJSON_AddNumberToObject(m, "ram_bytes", (double)kb * 1024.0);

    /* An NVIDIA driver announces itself in /proc; the GPU's name needs nvidia-smi. */
    char driver[512] = "", gpu[256] = "";
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f) {
        if (fgets(driver, sizeof driver, f))
            rtrim(driver);
        fclose(f);
        if (command_line("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", gpu,
                         sizeof gpu, NULL) != 0)
            gpu[0] = 0;
    }
    if (gpu[0])
        cJSON_AddStringToObject(m, "gpu", gpu);
    else
        cJSON_AddNullToObject(m, "gpu");
    if (driver[0])
        cJSON_AddStringToObject(m, "driver", driver);
    else
        cJSON_AddNullToObject(m, "driver");

    struct utsname u;
    if (uname(&u) == 0)
        snprintf(buf, sizeof buf, "%s %s %s", u.sysname, u.release, u.machine);
    else
        snprintf(buf, sizeof buf, "unknown");
    cJSON_AddStringToObject(m, "os", buf);
    return m;
}

/* ------------------------------------------------------------------------------------------ */
/* The record as JSON                                                                          */

static void add_num_or_null(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

static void add_str_or_null(cJSON *o, const char *key, const char *s)
{
    if (s[0])
        cJSON_AddStringToObject(o, key, s);
    else
        cJSON_AddNullToObject(o, key);
}

/* Fixed-size char fields filled by others may lack a terminator; never read past the field. */
#define FIELD(s) field_copy((s), sizeof(s), (char[sizeof(s) + 1]){0})
static const char *field_copy(const char *s, size_t n, char *out)
{
    memcpy(out, s, n);
    out[n] = 0;
    return out;
}

cJSON *bench_record_to_json(const bench_record *r)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "schema", BENCH_SCHEMA);

    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    else
        snprintf(date, sizeof date, "unknown");
    cJSON_AddStringToObject(root, "date", date);

    char rev[48];
    int dirty;
    git_state(rev, &dirty);
    cJSON *git = cJSON_AddObjectToObject(root, "git");
    if (git) {
        cJSON_AddStringToObject(git, "revision", rev);
        if (dirty < 0)
            cJSON_AddNullToObject(git, "dirty");
        else
            cJSON_AddBoolToObject(git, "dirty", dirty);
    }
    cJSON *machine = machine_json();
    if (machine)
        cJSON_AddItemToObject(root, "machine", machine);

    cJSON *w = cJSON_AddObjectToObject(root, "workload");
    if (w) {
        cJSON_AddStringToObject(w, "name", FIELD(r->workload));
        cJSON_AddStringToObject(w, "identity", FIELD(r->identity));
        double shape[4];
        for (int i = 0; i < 4; i++)
            shape[i] = (double)r->shape[i];
        cJSON_AddItemToObject(w, "shape", cJSON_CreateDoubleArray(shape, 4));
        cJSON_AddNumberToObject(w, "n_bf", (double)r->n_bf);
        cJSON_AddNumberToObject(w, "n_stored", (double)r->n_stored);
        cJSON_AddNumberToObject(w, "encoded_bytes", (double)r->encoded_bytes);
        cJSON_AddNumberToObject(w, "g_bytes", (double)r->g_bytes);
    }

    cJSON *s = cJSON_AddObjectToObject(root, "settings");
    if (s) {
        cJSON_AddNumberToObject(s, "threads", r->threads);
        cJSON_AddNumberToObject(s, "memory_budget_bytes", (double)r->memory_budget_bytes);
        cJSON_AddNumberToObject(s, "repeat", r->repeat);
        cJSON_AddNumberToObject(s, "upsample", r->upsample);
        cJSON_AddStringToObject(s, "preview_precision", FIELD(r->preview_precision));
        cJSON_AddStringToObject(s, "mode", FIELD(r->mode));
        add_str_or_null(s, "backend", FIELD(r->backend));
        if (r->loss_tile)
            cJSON_AddNumberToObject(s, "loss_tile", (double)r->loss_tile);
        else
            cJSON_AddStringToObject(s, "loss_tile", "default");
    }

    cJSON *stages = cJSON_AddArrayToObject(root, "stages");
    size_t n_stages = r->n_stages < BENCH_MAX_STAGES ? r->n_stages : BENCH_MAX_STAGES;
    for (size_t i = 0; stages && i < n_stages; i++) {
        const bench_stage *st = &r->stages[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddItemToArray(stages, o);
        cJSON_AddStringToObject(o, "name", FIELD(st->name));
        cJSON *sec = cJSON_AddObjectToObject(o, "seconds");
        if (sec) {
            size_t n = st->n_runs < BENCH_MAX_RUNS ? st->n_runs : BENCH_MAX_RUNS;
            add_num_or_null(sec, "median", n ? st->median : NAN);
            add_num_or_null(sec, "min", n ? st->min : NAN);
            add_num_or_null(sec, "max", n ? st->max : NAN);
            cJSON *runs = cJSON_AddArrayToObject(sec, "runs");
            for (size_t k = 0; runs && k < n; k++)
                cJSON_AddItemToArray(runs, isfinite(st->seconds[k]) ? cJSON_CreateNumber(st->seconds[k])
                                                                     : cJSON_CreateNull());
        }
        cJSON_AddNumberToObject(o, "peak_bytes", (double)st->peak_bytes);
        cJSON_AddNumberToObject(o, "after_bytes", (double)st->after_bytes);
        cJSON_AddNumberToObject(o, "cache_bytes", (double)st->cache_bytes);
        cJSON_AddNumberToObject(o, "rss_peak_bytes", (double)st->rss_peak_bytes);
        cJSON_AddNumberToObject(o, "device_peak_bytes", (double)st->device_peak_bytes);
    }
    cJSON_AddNumberToObject(root, "session_peak_bytes", (double)r->session_peak_bytes);
    cJSON_AddNumberToObject(root, "session_rss_peak_bytes", (double)r->session_rss_peak_bytes);

    cJSON *fit = cJSON_AddObjectToObject(root, "fit");
    if (fit) {
        add_num_or_null(fit, "C10_nm", r->C10_nm);
        add_num_or_null(fit, "C12_nm", r->C12_nm);
        add_num_or_null(fit, "phi12_deg", r->phi12_deg);
        add_num_or_null(fit, "loss", r->loss);
    }
    cJSON *h = cJSON_AddObjectToObject(root, "hashes");
    if (h) {
        add_str_or_null(h, "G", FIELD(r->g_sha256));
        add_str_or_null(h, "G_blocks", FIELD(r->g_blocks_sha256));
        add_str_or_null(h, "phase", FIELD(r->phase_sha256));
        add_str_or_null(h, "trace", FIELD(r->trace_sha256));
    }
    return root;
}

ssb4d_status bench_record_write(const bench_record *r, const char *path, ssb4d_err *err)
{
    if (!r || !path || !*path)
        return ssb_fail(err, SSB4D_EINVAL, "bench record: no record or no output path");
    cJSON *j = bench_record_to_json(r);
    char *text = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!text)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory writing bench record %s", path);
    ssb4d_err e = {0};
    ssb4d_status st = ssb_write_text_atomic(path, text, &e);
    free(text);
    if (st)
        return ssb_fail(err, st, "bench record: %s", e.msg);
    ssb_err_clear(err);
    return SSB4D_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Comparison                                                                                  */

void bench_compare_opts_default(bench_compare_opts *o)
{
    o->time_ratio = 0.10;
    o->min_seconds = 0.05;
    o->mem_ratio = 0.10;
    o->mem_abs_bytes = 0.25 * GIB;
    o->allow_hash_change = 0;
}

/* Reads and checks one record file: an object of our schema with a "stages" array whose entries
 * are objects with a name. Returns 0, or 2 with the message in err. */
static int load_record(const char *path, cJSON **out, ssb4d_err *err)
{
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    ssb4d_err e = {0};
    if (ssb_read_text_file(path, BENCH_MAX_FILE_BYTES, "bench record", &text, &len, &e)) {
        ssb_fail(err, e.code, "%s", e.msg);
        return 2;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        ssb_fail(err, SSB4D_EFORMAT, "bench record %s is not valid JSON (near byte %zu)", path, at);
        free(text);
        return 2;
    }
    free(text);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(j, "schema");
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stages");
    if (!cJSON_IsObject(j)) {
        ssb_fail(err, SSB4D_EFORMAT, "bench record %s is not a JSON object", path);
    } else if (!cJSON_IsString(schema)) {
        ssb_fail(err, SSB4D_EFORMAT, "bench record %s has no \"schema\" (expected \"%s\")", path,
                 BENCH_SCHEMA);
    } else if (strcmp(schema->valuestring, BENCH_SCHEMA) != 0) {
        ssb_fail(err, SSB4D_EFORMAT, "bench record %s has schema \"%.100s\", expected \"%s\"", path,
                 schema->valuestring, BENCH_SCHEMA);
    } else if (!cJSON_IsArray(stages)) {
        ssb_fail(err, SSB4D_EFORMAT, "bench record %s has no \"stages\" array", path);
    } else {
        int i = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, stages) {
            if (!cJSON_IsObject(s) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(s, "name"))) {
                ssb_fail(err, SSB4D_EFORMAT, "bench record %s: stage %d has no \"name\"", path, i);
                cJSON_Delete(j);
                return 2;
            }
            i++;
        }
        *out = j;
        return 0;
    }
    cJSON_Delete(j);
    return 2;
}

/* A number at o[key] (o may be NULL); NaN when absent or null. */
static double num_at(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const cJSON *stage_named(const cJSON *stages, const char *name)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, stages) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "name");
        if (!strcmp(n->valuestring, name))
            return s;
    }
    return NULL;
}

static double stage_median(const cJSON *s)
{
    return num_at(cJSON_GetObjectItemCaseSensitive(s, "seconds"), "median");
}

/* "small 128x128x64x64" from a record's workload. */
static void workload_desc(const cJSON *root, char *out, size_t n)
{
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "workload");
    const cJSON *name = w ? cJSON_GetObjectItemCaseSensitive(w, "name") : NULL;
    const cJSON *shape = w ? cJSON_GetObjectItemCaseSensitive(w, "shape") : NULL;
    int k = snprintf(out, n, "%.60s", cJSON_IsString(name) ? name->valuestring : "?");
    if (cJSON_IsArray(shape)) {
        const cJSON *d;
        const char *sep = " ";
        cJSON_ArrayForEach(d, shape) {
            if (k < 0 || (size_t)k >= n)
                break;
            k += snprintf(out + k, n - (size_t)k, "%s%.0f", sep, cJSON_IsNumber(d) ? d->valuedouble : NAN);
            sep = "x";
        }
    }
}

/* The list after "REGRESSED: ", grown as regressions are found. */
typedef struct {
    char *buf;
    size_t len, cap;
    int count;
    int oom;
} reglist;

static void reg_add(reglist *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reg_add(reglist *l, const char *fmt, ...)
{
    char item[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(item, sizeof item, fmt, ap);
    va_end(ap);
    size_t need = l->len + strlen(item) + 3;
    if (need > l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        while (cap < need)
            cap *= 2;
        char *b = realloc(l->buf, cap);
        if (!b) {
            l->oom = 1;
            l->count++;
            return;
        }
        l->buf = b;
        l->cap = cap;
    }
    l->len += (size_t)sprintf(l->buf + l->len, "%s%s", l->count ? ", " : "", item);
    l->count++;
}

static void fmt_seconds(char *out, size_t n, double v)
{
    if (isfinite(v))
        snprintf(out, n, "%.4f", v);
    else
        snprintf(out, n, "-");
}

static void fmt_change(char *out, size_t n, double old, double new_)
{
    if (!isfinite(old) || !isfinite(new_))
        snprintf(out, n, "-");
    else if (old == 0)
        snprintf(out, n, new_ == 0 ? "+0.0%%" : "n/a");
    else
        snprintf(out, n, "%+.1f%%", 100.0 * (new_ - old) / old);
}

static const char *const MEM_METRICS[] = {"peak_bytes", "after_bytes", "cache_bytes",
                                          "rss_peak_bytes", "device_peak_bytes"};
static const char *const SESSION_METRICS[] = {"session_peak_bytes", "session_rss_peak_bytes"};
static const char *const HASHES[] = {"G", "phase", "trace"};

/* One memory row: prints it (unless both are 0) and judges it. Returns 1 if it was compared. */
static int memory_row(FILE *out, const char *owner, const char *metric, double old, double new_,
                      const bench_compare_opts *o, reglist *reg, int *hidden)
{
    if (!isfinite(old) || !isfinite(new_)) {
        fprintf(out, "%-24s %-22s %10s %10s %8s  %s\n", owner, metric, "-", "-", "-", "not compared (missing)");
        return 0;
    }
    double grew = new_ - old;
    int regressed = new_ > old * (1 + o->mem_ratio) && grew > o->mem_abs_bytes;
    if (old == 0 && new_ == 0) {
        (*hidden)++; /* e.g. device memory on a CPU run: a row of zeros says nothing */
        return 1;
    }
    char change[32];
    fmt_change(change, sizeof change, old, new_);
    fprintf(out, "%-24s %-22s %10.3f %10.3f %8s  %s\n", owner, metric, old / GIB, new_ / GIB, change,
            regressed ? "REGRESSED" : "ok");
    if (regressed)
        reg_add(reg, "%s %s %s (%+.2f GiB)", owner, metric, change, grew / GIB);
    return 1;
}

/* A hash value: the string, or NULL for null / absent. */
static const char *hash_at(const cJSON *root, const char *key)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "hashes");
    const cJSON *v = h ? cJSON_GetObjectItemCaseSensitive(h, key) : NULL;
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

/* Notes (not verdicts) on what makes the two records less comparable. */
static void context_notes(FILE *out, const cJSON *a, const cJSON *b)
{
    char wa[160], wb[160];
    workload_desc(a, wa, sizeof wa);
    workload_desc(b, wb, sizeof wb);
    if (strcmp(wa, wb) != 0)
        fprintf(out, "warning: workloads differ (old %s, new %s); comparing anyway\n", wa, wb);
    else
        fprintf(out, "workload: %s\n", wa);

    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(a, "settings");
    const cJSON *sb = cJSON_GetObjectItemCaseSensitive(b, "settings");
    const cJSON *item;
    if (cJSON_IsObject(sa) && cJSON_IsObject(sb)) {
        cJSON_ArrayForEach(item, sa) {
            const cJSON *other = cJSON_GetObjectItemCaseSensitive(sb, item->string);
            if (!other || !cJSON_Compare(item, other, 1)) {
                char *x = cJSON_PrintUnformatted(item), *y = other ? cJSON_PrintUnformatted(other) : NULL;
                fprintf(out, "note: setting %s differs (old %.60s, new %.60s)\n", item->string,
                        x ? x : "?", y ? y : "absent");
                free(x);
                free(y);
            }
        }
    }
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(a, "machine");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(b, "machine");
    static const char *const keys[] = {"cpu", "cores", "gpu"};
    for (size_t i = 0; ma && mb && i < sizeof keys / sizeof *keys; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(ma, keys[i]);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(mb, keys[i]);
        if (x && y && !cJSON_Compare(x, y, 1))
            fprintf(out, "note: machine %s differs; times may not be comparable\n", keys[i]);
    }
}

int bench_compare_files(const char *old_path, const char *new_path, const bench_compare_opts *o,
                        FILE *out, ssb4d_err *err)
{
    bench_compare_opts def;
    if (!o) {
        bench_compare_opts_default(&def);
        o = &def;
    }
    if (!(o->time_ratio >= 0) || !(o->min_seconds >= 0) || !(o->mem_ratio >= 0) ||
        !(o->mem_abs_bytes >= 0) || !isfinite(o->time_ratio + o->min_seconds + o->mem_ratio + o->mem_abs_bytes)) {
        ssb_fail(err, SSB4D_EINVAL, "bench compare: thresholds must be finite and not negative");
        return 2;
    }
    if (!old_path || !new_path || !out) {
        ssb_fail(err, SSB4D_EINVAL, "bench compare: two record files and an output are needed");
        return 2;
    }
    cJSON *a = NULL, *b = NULL;
    if (load_record(old_path, &a, err) || load_record(new_path, &b, err)) {
        cJSON_Delete(a);
        return 2;
    }
    ssb_err_clear(err);

    fprintf(out, "bench compare: old %s, new %s\n", old_path, new_path);
    context_notes(out, a, b);

    reglist reg = {0};
    const cJSON *sa = cJSON_GetObjectItemCaseSensitive(a, "stages");
    const cJSON *sb = cJSON_GetObjectItemCaseSensitive(b, "stages");
    int n_stages = 0, n_metrics = 0, hidden = 0;

    /* Times: the old record's stages in its order, then the stages only the new one has. */
    fprintf(out, "\n%-24s %10s %10s %8s  %s\n", "stage", "old s", "new s", "change", "verdict");
    const cJSON *s;
    cJSON_ArrayForEach(s, sa) {
        const char *name = cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring;
        const cJSON *t = stage_named(sb, name);
        double mo = stage_median(s), mn = t ? stage_median(t) : NAN;
        char so[32], sn[32], change[32];
        fmt_seconds(so, sizeof so, mo);
        fmt_seconds(sn, sizeof sn, mn);
        fmt_change(change, sizeof change, mo, mn);
        const char *verdict;
        char vbuf[64];
        if (!t) {
            verdict = "MISSING in new (REGRESSED)";
            reg_add(&reg, "stage %s missing", name);
        } else {
            n_stages++;
            if (!isfinite(mo) || !isfinite(mn)) {
                verdict = "not judged (no time)";
            } else if (mo < o->min_seconds && mn < o->min_seconds) {
                snprintf(vbuf, sizeof vbuf, "not judged (< %g s)", o->min_seconds);
                verdict = vbuf;
            } else if (mn > mo * (1 + o->time_ratio)) {
                verdict = "REGRESSED";
                reg_add(&reg, "%s time %s", name, change);
            } else {
                verdict = "ok";
            }
        }
        fprintf(out, "%-24s %10s %10s %8s  %s\n", name, so, sn, change, verdict);
    }
    cJSON_ArrayForEach(s, sb) {
        const char *name = cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring;
        if (stage_named(sa, name))
            continue;
        char sn[32];
        fmt_seconds(sn, sizeof sn, stage_median(s));
        fprintf(out, "%-24s %10s %10s %8s  %s\n", name, "-", sn, "-", "new stage (not judged)");
    }

    /* Memory, per stage present in both, then the session totals. */
    fprintf(out, "\n%-24s %-22s %10s %10s %8s  %s\n", "memory", "metric", "old GiB", "new GiB", "change",
            "verdict");
    cJSON_ArrayForEach(s, sa) {
        const char *name = cJSON_GetObjectItemCaseSensitive(s, "name")->valuestring;
        const cJSON *t = stage_named(sb, name);
        if (!t)
            continue;
        for (size_t i = 0; i < sizeof MEM_METRICS / sizeof *MEM_METRICS; i++)
            n_metrics += memory_row(out, name, MEM_METRICS[i], num_at(s, MEM_METRICS[i]),
                                    num_at(t, MEM_METRICS[i]), o, &reg, &hidden);
    }
    for (size_t i = 0; i < sizeof SESSION_METRICS / sizeof *SESSION_METRICS; i++)
        n_metrics += memory_row(out, "session", SESSION_METRICS[i], num_at(a, SESSION_METRICS[i]),
                                num_at(b, SESSION_METRICS[i]), o, &reg, &hidden);
    if (hidden)
        fprintf(out, "(%d rows where both are 0 not shown)\n", hidden);

    /* Hashes: the results themselves; a change means the output changed. */
    fprintf(out, "\n%-8s %-14s %-14s %s\n", "hash", "old", "new", "verdict");
    for (size_t i = 0; i < sizeof HASHES / sizeof *HASHES; i++) {
        const char *ho = hash_at(a, HASHES[i]), *hn = hash_at(b, HASHES[i]);
        const char *verdict;
        if (!ho || !hn) {
            verdict = "not compared (null)";
        } else {
            n_metrics++;
            if (!strcmp(ho, hn)) {
                verdict = "same";
            } else if (o->allow_hash_change) {
                verdict = "changed (allowed)";
            } else {
                verdict = "CHANGED (REGRESSED)";
                reg_add(&reg, "%s hash changed", HASHES[i]);
            }
        }
        fprintf(out, "%-8s %-14.12s %-14.12s %s\n", HASHES[i], ho ? ho : "null", hn ? hn : "null", verdict);
    }

    int rc;
    if (reg.count == 0) {
        fprintf(out, "\nbench compare: OK (%d stages, %d metrics)\n", n_stages, n_metrics);
        rc = 0;
    } else {
        fprintf(out, "\nbench compare: REGRESSED: %s%s\n", reg.buf ? reg.buf : "",
                reg.oom ? " (list truncated: out of memory)" : "");
        rc = 1;
    }
    free(reg.buf);
    cJSON_Delete(a);
    cJSON_Delete(b);
    return rc;
}
