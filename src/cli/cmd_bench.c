/* cmd_bench.c — `ssb4d bench run|compare|sweep` (SPEC 10).
 *
 *   run:     the session (ssb4d_session_run) on a named workload, repeated; one JSON record with
 *            per-stage median/min/max times, memory, hashes, machine and git identity;
 *   compare: two records (cmd_bench_compare.c);
 *   sweep:   the loss at the fit over loss tiles: time relative to the default layout, live
 *            bytes above G, cache kept, and a check that every tile gives the same bits. */
#include "cli/cli_common.h"
#include "cli/cli_session.h"
#include "cli/cli_mpi.h"
#include "cli/cmd_bench_compare.h"
#include "cli/cmd_bench_view.h"
#include "cli/commands.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define GIB 1073741824.0

static const char BENCH_COMMON_HELP[] =
    "  --workload NAME       small, medium or reference: DIR/NAME.qem (with NAME.json), simulated\n"
    "                        with that preset first when missing (reference: about 20 minutes)\n"
    "  --data FILE           use FILE (a .qem or .npy with its sidecar) instead of a workload\n"
    "  --cache DIR           where workloads live (default $SSB4D_BENCH_DATA, else ./bench-data)\n";

/* ---- workloads ---------------------------------------------------------------------------- */

typedef struct {
    const char *name;  /* workload name or NULL */
    const char *data;  /* explicit file or NULL */
    const char *cache;
    char path[4096];
} workload;

static int workload_resolve(const char *cmd, workload *w, int quiet)
{
    struct stat sb;
    if (w->data) {
        /* The file first, before the microscope values (which may come from its sidecar). */
        char name[32];
        snprintf(name, sizeof name, "bench %s", cmd);
        snprintf(w->path, sizeof w->path, "%s", w->data);
        return cli_check_readable(name, w->path);
    }
    if (!w->name) {
        fprintf(stderr, "ssb4d bench %s: give --workload small|medium|reference or --data FILE\n", cmd);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(w->name, "small") && strcmp(w->name, "medium") && strcmp(w->name, "reference") &&
        strcmp(w->name, "tiny")) {
        fprintf(stderr, "ssb4d bench %s: unknown workload '%s' (tiny, small, medium or reference)\n", cmd, w->name);
        return CLI_EXIT_USAGE;
    }
    const char *dir = w->cache ? w->cache : getenv("SSB4D_BENCH_DATA");
    if (!dir || !*dir)
        dir = "bench-data";
    char file[64];
    snprintf(file, sizeof file, "%s.qem", w->name);
    cli_join_path(w->path, sizeof w->path, dir, file);
    if (stat(w->path, &sb) == 0)
        return 0;
    mkdir(dir, 0777);
    if (!quiet)
        fprintf(stderr, "ssb4d bench %s: simulating the %s workload into %s\n", cmd, w->name, w->path);
    ssb4d_sim_params sp;
    ssb4d_err err = {0};
    ssb4d_sim_info info;
    if (ssb4d_sim_params_preset(&sp, w->name, &err) || ssb4d_simulate(&sp, w->path, 0, "ssb4d bench", &info, &err))
        return cli_error(cli_command(), err.code, err.msg);
    return 0;
}

static int session_params(cli_micro *m, const char *path, ssb4d_session_params *p)
{
    ssb4d_values v;
    int rc = cli_resolve(path, m, &v);
    if (!rc)
        rc = cli_check_microscope(&v);
    if (rc)
        return rc;
    ssb4d_session_params_default(p);
    cli_values_to_calib_params(&v, m->threads, m->hot_pixels, &p->session.calib);
    p->session.memory_bytes = cli_memory_budget(m);
    p->session.threads = m->threads;
    p->session.backend = m->backend;
    p->session.device_memory_bytes = m->device_memory_bytes;
    p->hashes = 1;
    p->session.dist = cli_dist(); /* under mpirun: a distributed session (cli_mpi.h) */
    return 0;
}

/* ---- bench run ----------------------------------------------------------------------------- */

static void run_help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d bench run (--workload NAME | --data FILE) [--repeat N] -o RECORD.json\n\n"
            "Runs the session stages (load, calibrate, G build, fit, preview with FFT, 20 drags, 3\n"
            "releases, region refit, next full preview, save) N times and writes one benchmark record:\n"
            "per-stage median/min/max wall time, tracked peak / after / cache and footprint peak (of\n"
            "the last repeat), the fit, SHA-256 of G, of the phase and of the fit's trace, the machine\n"
            "and the git revision (docs/bench.md). The hashes must agree between repeats.\n\n"
            "%s"
            "  --repeat N            repeats (default 5, at most %d)\n"
            "  --preview-precision P auto, float or half\n"
            CLI_BACKEND_HELP
            "  -o, --output FILE     the record (required)\n"
            "  --force               replace the record if it exists (without it an existing record\n"
            "                        is refused before any work)\n"
            "  -h, --help            this help\n\n%s\n"
            CLI_EXIT_HELP_BEGIN ";\n"
            "1 also when a repeat's hashes differ from the first run's.\n",
            BENCH_COMMON_HELP, SSB4D_BENCH_MAX_RUNS, CLI_MICROSCOPE_HELP);
}

enum { OPT_WORKLOAD = CLI_OPT_FIRST_FREE, OPT_DATA, OPT_CACHE, OPT_REPEAT, OPT_PREVIEW, OPT_TILES, OPT_TILE_REPEAT,
       OPT_FORCE };

/* One line for an option getopt did not take (c = ':' a value missing, else unknown). */
static int bad_option(const char *sub, int c, char **argv)
{
    fprintf(stderr, "ssb4d bench %s: %s '%s' (see ssb4d bench %s --help)\n", sub,
            c == ':' ? "missing value for" : "unknown option", argv[optind - 1], sub);
    return CLI_EXIT_USAGE;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    double v;
    if (cli_parse_number(s, (double)lo, (double)hi, 1, &v))
        return -1;
    *out = (long)v;
    return 0;
}

static int bench_run(int argc, char **argv)
{
    static const struct option opts[] = {CLI_MICROSCOPE_OPTIONS,
                                         CLI_BACKEND_OPTION,
                                         {"workload", required_argument, 0, OPT_WORKLOAD},
                                         {"data", required_argument, 0, OPT_DATA},
                                         {"cache", required_argument, 0, OPT_CACHE},
                                         {"repeat", required_argument, 0, OPT_REPEAT},
                                         {"preview-precision", required_argument, 0, OPT_PREVIEW},
                                         {"output", required_argument, 0, 'o'},
                                         {"force", no_argument, 0, OPT_FORCE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_micro m;
    cli_micro_init(&m);
    workload w = {0};
    const char *out = NULL;
    long repeat = 5;
    int force = 0;
    ssb4d_preview_precision prec = SSB4D_PREVIEW_AUTO;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:hq", opts, NULL)) != -1) {
        int r = cli_micro_handle(&m, c, optarg);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r)
            continue;
        switch (c) {
        case OPT_WORKLOAD: w.name = optarg; break;
        case OPT_DATA: w.data = optarg; break;
        case OPT_CACHE: w.cache = optarg; break;
        case OPT_REPEAT:
            if (parse_int(optarg, 1, SSB4D_BENCH_MAX_RUNS, &repeat)) {
                fprintf(stderr, "ssb4d bench run: invalid value '%s' for --repeat (1 to %d)\n", optarg, SSB4D_BENCH_MAX_RUNS);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_PREVIEW:
            if (cli_parse_preview(optarg, &prec))
                return CLI_EXIT_USAGE;
            break;
        case 'o': out = optarg; break;
        case OPT_FORCE: force = 1; break;
        case 'h': run_help(stdout); return CLI_EXIT_OK;
        default: return bad_option("run", c, argv);
        }
    }
    if (optind != argc || !out) {
        fprintf(stderr, "ssb4d bench run: %s (try --help)\n", !out ? "-o RECORD.json is required" : "unexpected argument");
        return CLI_EXIT_USAGE;
    }
    /* A missing --data first, then the record and the backend, before any work (a workload may be
     * simulated); the record names the backend that ran. */
    const char *backend = NULL;
    int rc = w.data ? workload_resolve("run", &w, m.quiet) : 0;
    if (rc || (rc = cli_check_output("bench run", out, force, ", or -o FILE")) ||
        (rc = cli_backend_check("bench run", m.backend, &backend)) ||
        (!w.data && (rc = workload_resolve("run", &w, m.quiet))))
        return rc;
    ssb4d_session_params p;
    if ((rc = session_params(&m, w.path, &p)))
        return rc;
    p.session.preview = prec;
    ssb4d_session_script s;
    ssb4d_session_script_default(&s);

    ssb4d_bench_record *rec = calloc(1, sizeof *rec);
    ssb4d_session_report *r = calloc(1, sizeof *r);
    if (!rec || !r) {
        free(rec), free(r);
        return cli_error(cli_command(), SSB4D_ENOMEM, "out of memory");
    }
    ssb4d_err err = {0};
    char first_hashes[3][65] = {{0}};
    for (long k = 0; k < repeat; k++) {
        if (!m.quiet)
            fprintf(stderr, "ssb4d bench run: %s, repeat %ld of %ld\n", w.path, k + 1, repeat);
        if (ssb4d_session_run(w.path, &p, &s, r, &err)) {
            free(rec), free(r);
            return cli_error(cli_command(), err.code, err.msg);
        }
        if (k == 0) {
            memcpy(first_hashes[0], r->g_sha256, 65);
            memcpy(first_hashes[1], r->phase_sha256, 65);
            memcpy(first_hashes[2], r->trace_sha256, 65);
            rec->n_stages = r->n_stages < SSB4D_BENCH_MAX_STAGES ? r->n_stages : SSB4D_BENCH_MAX_STAGES;
            for (size_t i = 0; i < rec->n_stages; i++)
                snprintf(rec->stages[i].name, sizeof rec->stages[i].name, "%s", r->stages[i].name);
        } else if (strcmp(first_hashes[0], r->g_sha256) || strcmp(first_hashes[1], r->phase_sha256) ||
                   strcmp(first_hashes[2], r->trace_sha256) || r->n_stages != rec->n_stages) {
            free(rec), free(r);
            return cli_error(cli_command(), SSB4D_EINTERNAL, "repeat results differ from the first run's (hashes)");
        }
        for (size_t i = 0; i < rec->n_stages; i++) {
            ssb4d_bench_stage *b = &rec->stages[i];
            const ssb4d_stage_record *q = &r->stages[i];
            b->seconds[b->n_runs++] = q->seconds;
            b->peak_bytes = q->peak_bytes;
            b->after_bytes = q->after_bytes;
            b->cache_bytes = q->cache_bytes;
            b->rss_peak_bytes = q->rss_peak_bytes;
            b->device_peak_bytes = q->device_peak_bytes; /* the GPU backend's G (0 on the CPU); under MPI rank 0's */
        }
    }
    snprintf(rec->workload, sizeof rec->workload, "%s", w.name ? w.name : w.data);
    if (ssb4d_data_identity(w.path, rec->identity, sizeof rec->identity, NULL))
        rec->identity[0] = 0;
    memcpy(rec->shape, r->shape, sizeof rec->shape);
    rec->n_bf = r->n_bf;
    rec->n_stored = r->n_stored;
    rec->encoded_bytes = r->encoded_bytes;
    rec->g_bytes = r->g_bytes;
    rec->threads = ssb4d_threads_resolve(m.threads);
    rec->memory_budget_bytes = r->plan.memory_bytes;
    rec->repeat = (int)repeat;
    rec->upsample = r->upsample;
    snprintf(rec->preview_precision, sizeof rec->preview_precision, "%s", r->plan.preview_half ? "half" : "float");
    snprintf(rec->mode, sizeof rec->mode, "%s", r->plan.mode);
    snprintf(rec->backend, sizeof rec->backend, "%s", backend);
    rec->C10_nm = r->C10_nm, rec->C12_nm = r->C12_nm, rec->phi12_deg = r->phi12_deg, rec->loss = r->loss;
    rec->session_peak_bytes = r->session_peak_bytes;
    rec->session_rss_peak_bytes = r->session_rss_peak_bytes;
    memcpy(rec->g_sha256, r->g_sha256, 65);
    memcpy(rec->g_blocks_sha256, r->g_blocks_sha256, 65);
    memcpy(rec->phase_sha256, r->phase_sha256, 65);
    memcpy(rec->trace_sha256, r->trace_sha256, 65);
    ssb4d_bench_record_finish(rec);
    if (!cli_is_root()) { /* under mpirun, rank 0 writes the record */
        free(rec), free(r);
        return CLI_EXIT_OK;
    }
    ssb4d_status st = ssb4d_bench_record_write(rec, out, &err);
    if (!st) {
        printf("%-24s %10s %10s %10s %12s\n", "stage", "median s", "min s", "max s", "peak GiB");
        for (size_t i = 0; i < rec->n_stages; i++) {
            const ssb4d_bench_stage *b = &rec->stages[i];
            printf("%-24s %10.3f %10.3f %10.3f %12.3f\n", b->name, b->median, b->min, b->max, b->peak_bytes / GIB);
        }
        printf("session peak %.3f GiB (footprint %.3f GiB); record %s\n", rec->session_peak_bytes / GIB,
               rec->session_rss_peak_bytes / GIB, out);
        printf("backend %s\n", rec->backend);
    }
    free(rec), free(r);
    return st ? cli_error(cli_command(), st, err.msg) : CLI_EXIT_OK;
}

/* ---- bench sweep --------------------------------------------------------------------------- */

static void sweep_help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d bench sweep (--workload NAME | --data FILE) --loss-tile LIST [-o OUT.json]\n\n"
            "The interactive loss (a release: the loss over all BF pixels at the fit) for each loss\n"
            "tile in LIST (BF pixels whose phase planes are in flight at once; 'default' is the\n"
            "per-thread layout, 'all' every BF pixel): median time relative to the default, live\n"
            "bytes above G while it runs, the cache it leaves, and a check that every tile gives the\n"
            "same loss and mean phase bits (exit 1 if not). G is built once; the aberrations are the\n"
            "calibration file's or the sidecar's truth.\n\n"
            "%s"
            "  --loss-tile LIST      e.g. 64,128,256,512,1024,all (default is always measured)\n"
            "  --repeat N            timed runs per tile, interleaved (default 5)\n"
            "  -o, --output FILE     also write the rows as JSON\n"
            "  --force               replace that file if it exists (without it an existing file is\n"
            "                        refused before any work)\n"
            "  -h, --help            this help\n\n%s\n"
            CLI_EXIT_HELP_BEGIN ";\n"
            "1 also when a loss tile gives other bits than the default layout.\n",
            BENCH_COMMON_HELP, CLI_MICROSCOPE_HELP);
}

#define MAX_TILES 16

static int bench_sweep(int argc, char **argv)
{
    static const struct option opts[] = {CLI_MICROSCOPE_OPTIONS,
                                         {"workload", required_argument, 0, OPT_WORKLOAD},
                                         {"data", required_argument, 0, OPT_DATA},
                                         {"cache", required_argument, 0, OPT_CACHE},
                                         {"loss-tile", required_argument, 0, OPT_TILES},
                                         {"repeat", required_argument, 0, OPT_REPEAT},
                                         {"output", required_argument, 0, 'o'},
                                         {"force", no_argument, 0, OPT_FORCE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_micro m;
    cli_micro_init(&m);
    workload w = {0};
    const char *out = NULL, *list = NULL;
    long repeat = 5;
    int c, force = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:hq", opts, NULL)) != -1) {
        int r = cli_micro_handle(&m, c, optarg);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r)
            continue;
        switch (c) {
        case OPT_WORKLOAD: w.name = optarg; break;
        case OPT_DATA: w.data = optarg; break;
        case OPT_CACHE: w.cache = optarg; break;
        case OPT_TILES: list = optarg; break;
        case OPT_REPEAT:
            if (parse_int(optarg, 1, 100, &repeat)) {
                fprintf(stderr, "ssb4d bench sweep: invalid value '%s' for --repeat (1 to 100)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            break;
        case 'o': out = optarg; break;
        case OPT_FORCE: force = 1; break;
        case 'h': sweep_help(stdout); return CLI_EXIT_OK;
        default: return bad_option("sweep", c, argv);
        }
    }
    if (optind != argc || !list) {
        fprintf(stderr, "ssb4d bench sweep: %s (try --help)\n", !list ? "--loss-tile LIST is required" : "unexpected argument");
        return CLI_EXIT_USAGE;
    }
    /* tiles[0] = 0: the default layout; (size_t)-1: all */
    size_t tiles[MAX_TILES + 1] = {0};
    size_t nt = 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        long v;
        if (nt > MAX_TILES) {
            fprintf(stderr, "ssb4d bench sweep: at most %d tiles\n", MAX_TILES);
            return CLI_EXIT_USAGE;
        }
        if (!strcmp(tok, "all"))
            tiles[nt++] = (size_t)-1;
        else if (!strcmp(tok, "default"))
            continue;
        else if (!parse_int(tok, 1, 1 << 24, &v))
            tiles[nt++] = (size_t)v;
        else {
            fprintf(stderr, "ssb4d bench sweep: invalid loss tile '%s' (a count, 'all' or 'default')\n", tok);
            return CLI_EXIT_USAGE;
        }
    }
    int rc = w.data ? workload_resolve("sweep", &w, m.quiet) : 0;
    if (rc || (out && (rc = cli_check_output("bench sweep", out, force, ", or -o FILE"))) ||
        (!w.data && (rc = workload_resolve("sweep", &w, m.quiet))))
        return rc;
    ssb4d_values v;
    if ((rc = cli_resolve(w.path, &m, &v)) || (rc = cli_check_microscope(&v)))
        return rc;
    if (!v.has_ab) {
        fprintf(stderr, "ssb4d bench sweep: no aberrations to evaluate at (give --calibration or a sidecar with the truth)\n");
        return CLI_EXIT_USAGE;
    }
    ssb4d_err err = {0};
    ssb4d_source *src = NULL;
    ssb4d_calibration cal;
    ssb4d_G *G = NULL;
    ssb4d_mem *mem = ssb4d_mem_create(cli_memory_budget(&m));
    ssb4d_calib_params cp;
    cli_values_to_calib_params(&v, m.threads, m.hot_pixels, &cp);
    cp.mem = mem;
    ssb4d_status st = ssb4d_source_open(w.path, &src, &err);
    if (!st)
        st = ssb4d_calibrate(src, &cp, &cal, &err);
    if (st) {
        ssb4d_source_close(src);
        ssb4d_mem_destroy(mem);
        return cli_error(cli_command(), st, err.msg);
    }
    ssb4d_gbuild_opts go;
    ssb4d_gbuild_opts_default(&go);
    go.threads = m.threads;
    if (!m.quiet)
        fprintf(stderr, "ssb4d bench sweep: building G for %zu BF pixels\n", cal.n_bf);
    st = ssb4d_gbuild(src, &cal.geom, cal.bf_pix, cal.n_bf, &go, mem, &G, &err);
    if (st) {
        ssb4d_calibration_free(&cal);
        ssb4d_source_close(src);
        ssb4d_mem_destroy(mem);
        return cli_error(cli_command(), st, err.msg);
    }
    size_t ny, nx;
    ssb4d_G_scan_shape(G, &ny, &nx);
    float *phase = malloc(ny * nx * sizeof *phase);
    double loss[MAX_TILES + 1], secs[MAX_TILES + 1][100], live[MAX_TILES + 1], cache[MAX_TILES + 1];
    char hex[MAX_TILES + 1][65];
    size_t base = ssb4d_mem_live(mem);
    /* Memory and bits: one run per tile from an empty cache. */
    for (size_t t = 0; t < nt && !st && phase; t++) {
        ssb4d_ssb_opts so;
        ssb4d_ssb_opts_default(&so);
        so.threads = m.threads;
        so.loss_tile = tiles[t] == (size_t)-1 ? ssb4d_G_n_bf(G) : tiles[t];
        ssb4d_mem_trim(mem);
        ssb4d_mem_stage_begin(mem, "loss");
        st = ssb4d_loss(G, &cal.geom, &v.ab, NULL, &so, mem, &loss[t], phase, &err);
        ssb4d_mem_stage_end(mem);
        const ssb4d_stage_record *sr = ssb4d_mem_stage(mem, ssb4d_mem_stage_count(mem) - 1);
        live[t] = (double)(sr->peak_bytes - base);
        cache[t] = (double)sr->cache_bytes;
        ssb4d_sha256_hex(phase, ny * nx * sizeof *phase, hex[t]);
    }
    /* Times: interleaved repeats, each tile's buffers kept in the cache between its runs. */
    for (long k = 0; k < repeat && !st && phase; k++)
        for (size_t t = 0; t < nt && !st; t++) {
            ssb4d_ssb_opts so;
            ssb4d_ssb_opts_default(&so);
            so.threads = m.threads;
            so.loss_tile = tiles[t] == (size_t)-1 ? ssb4d_G_n_bf(G) : tiles[t];
            double l, t0 = ssb4d_clock_s();
            st = ssb4d_loss(G, &cal.geom, &v.ab, NULL, &so, mem, &l, NULL, &err);
            secs[t][k] = ssb4d_clock_s() - t0;
        }
    int same = 1;
    cJSON *rows = cJSON_CreateArray();
    if (!st && phase) {
        double med[MAX_TILES + 1];
        for (size_t t = 0; t < nt; t++) {
            double lo, hi;
            ssb4d_bench_stats(secs[t], (size_t)repeat, &med[t], &lo, &hi);
        }
        printf("loss tile sweep: %s, %zu BF pixels, %zux%zu scan, %d threads, %ld interleaved runs\n", w.path,
               cal.n_bf, ny, nx, ssb4d_threads_resolve(m.threads), repeat);
        printf("%-12s %12s %10s %16s %12s  %s\n", "loss tile", "loss s", "vs default", "live above G GiB",
               "cache GiB", "bits");
        for (size_t t = 0; t < nt; t++) {
            int eq = !memcmp(&loss[t], &loss[0], sizeof loss[0]) && !strcmp(hex[t], hex[0]);
            same &= eq;
            char name[32];
            if (tiles[t] == 0)
                snprintf(name, sizeof name, "default");
            else if (tiles[t] == (size_t)-1)
                snprintf(name, sizeof name, "all (%zu)", cal.n_bf);
            else
                snprintf(name, sizeof name, "%zu", tiles[t]);
            printf("%-12s %12.4f %+9.1f%% %16.3f %12.3f  %s\n", name, med[t], 100.0 * (med[t] / med[0] - 1.0),
                   live[t] / GIB, cache[t] / GIB, eq ? "same" : "DIFFERENT");
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "loss_tile", name);
            cJSON_AddNumberToObject(o, "median_seconds", med[t]);
            cJSON_AddNumberToObject(o, "relative", med[t] / med[0] - 1.0);
            cJSON_AddNumberToObject(o, "live_above_g_bytes", live[t]);
            cJSON_AddNumberToObject(o, "cache_bytes", cache[t]);
            cJSON_AddNumberToObject(o, "loss", loss[t]);
            cJSON_AddStringToObject(o, "mean_phase_sha256", hex[t]);
            cJSON_AddBoolToObject(o, "same_bits", eq);
            cJSON_AddItemToArray(rows, o);
        }
        printf("every tile gives the same bits: %s\n", same ? "yes" : "NO");
    }
    if (!st && out) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "schema", "ssb4d-bench-sweep/1");
        cJSON_AddStringToObject(j, "workload", w.name ? w.name : w.data);
        cJSON_AddNumberToObject(j, "n_bf", (double)cal.n_bf);
        cJSON_AddNumberToObject(j, "threads", ssb4d_threads_resolve(m.threads));
        cJSON_AddItemToObject(j, "rows", rows);
        rows = NULL;
        char *text = cJSON_Print(j);
        FILE *f = fopen(out, "w");
        if (!f || fputs(text, f) < 0 || fclose(f))
            st = ssb4d_err_set(&err, SSB4D_EIO, "cannot write %s", out);
        free(text);
        cJSON_Delete(j);
    }
    cJSON_Delete(rows);
    free(phase);
    ssb4d_G_free(G);
    ssb4d_calibration_free(&cal);
    ssb4d_source_close(src);
    ssb4d_mem_destroy(mem);
    if (st)
        return cli_error(cli_command(), st, err.msg);
    return same ? CLI_EXIT_OK : CLI_EXIT_INTERNAL;
}

/* bench view's access to the workload rule above. */
static int resolve_for_view(const char *cmd, const char *name, const char *data, const char *cache, int quiet,
                            char *path, size_t n)
{
    workload w = {name, data, cache, {0}};
    int rc = workload_resolve(cmd, &w, quiet);
    snprintf(path, n, "%s", w.path);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: ssb4d bench run|compare|sweep|view ...   (ssb4d bench <sub> --help)\n\n"
                   "  run      the session on a workload, repeated: one benchmark record (JSON)\n"
                   "  compare  OLD.json NEW.json: exit 1 when a time grew > 10 %%, a memory metric\n"
                   "           > 10 %% and > 0.25 GiB, or a hash changed\n"
                   "  sweep    the loss over loss tiles: time, live bytes above G, cache, same bits\n"
                   "  view     the viewer's drag and release round trips over HTTP (ssb4d view)\n\n"
                   "Each takes -q/--quiet; run and sweep refuse to replace an existing -o FILE unless --force.\n"
                   CLI_EXIT_HELP_BEGIN ";\n"
                   "1 also for compare's regression, sweep's different bits and run's differing repeats.\n");
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    if (!strcmp(argv[1], "compare") && (cli_set_command("bench compare"), 1))
        return cmd_bench_compare(argc - 1, argv + 1);
    if (!strcmp(argv[1], "run") && (cli_set_command("bench run"), 1))
        return bench_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sweep") && (cli_set_command("bench sweep"), 1))
        return bench_sweep(argc - 1, argv + 1);
    if (!strcmp(argv[1], "view") && (cli_set_command("bench view"), 1))
        return bench_view(argc - 1, argv + 1, resolve_for_view);
    fprintf(stderr, "ssb4d bench: unknown subcommand '%s' (run, compare, sweep or view)\n", argv[1]);
    return CLI_EXIT_USAGE;
}
