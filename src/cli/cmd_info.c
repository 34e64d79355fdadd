/* cmd_info.c — `ssb4d info FILE.qem [--check] [--json]`: what a .qem holds (shape, dtype, sizes,
 * compression ratio, calibration, flagged pixels, processing), from its header alone unless
 * --check asks for the body checksums and the spatial index too. */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/commands.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "info"

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d info FILE.qem [--check] [--json]\n\n"
            "Prints the shape, dtype, chunking, sizes and compression ratio of an encoded\n"
            "acquisition, its effective calibration (user overrides win over what the source\n"
            "recorded), the flagged detector pixels and the processing steps recorded at import:\n"
            "the --hot-pixels policy applied, how many pixels were flagged (by the source's mask,\n"
            "found hot or dead) and whether their counts were replaced (median, zero) or kept\n"
            "(none). Every other count is stored exactly as read.\n"
            "The header is always validated; the body is not read unless --check is given.\n\n"
            "  --check               also verify every 64 MiB body checksum and the spatial index\n"
            "                        (reads and decodes the whole file)\n"
            "  --threads N           threads for --check (default: all cores)\n"
            "%s"
            "                        info uses at most the header and 9 bytes per detector pixel\n"
            "                        (0.3 MiB for 192x192); --check adds about 34 bytes per pixel\n"
            "                        per thread (1.2 MiB for 192x192) and runs on fewer threads\n"
            "                        when the budget asks for it. The file is mapped and read\n"
            "                        through, not held, so it is not counted\n"
            "  --json                print one JSON object on stdout\n"
            CLI_QUIET_HELP
            "  -h, --help            this help\n\n"
            "A missing or unreadable FILE is reported first; a file that is not a valid .qem is bad input.\n"
            CLI_EXIT_HELP, CLI_MEMORY_HELP);
}

enum { OPT_CHECK = CLI_OPT_FIRST_FREE };

/* The import's hot-pixel step in one line: which policy, and whether the flagged pixels' counts
 * are still the source's (every other count always is). */
static void describe_flag_handling(const ssb4d_qem_flags *h, size_t n_flagged, char *out, size_t n)
{
    const char *policy = h->policy ? h->policy : "policy not recorded";
    size_t k = h->replaced ? h->replaced_pixels : n_flagged;
    const char *s = k == 1 ? "" : "s";
    int w;
    if (h->replaced && h->method && !strcmp(h->method, "median_3x3_valid_neighbours"))
        w = snprintf(out, n, "%s at import: the counts of the %zu flagged pixel%s were replaced by the "
                     "median of their valid 3x3 neighbours", policy, k, s);
    else if (h->replaced && h->method && !strcmp(h->method, "zero"))
        w = snprintf(out, n, "%s at import: the counts of the %zu flagged pixel%s were set to 0", policy, k, s);
    else if (h->replaced)
        w = snprintf(out, n, "%s at import: the counts of the %zu flagged pixel%s were replaced (%s)", policy,
                     k, s, h->method ? h->method : "method not recorded");
    else if (!h->policy)
        w = snprintf(out, n, "no import record (not written by ssb4d import); no count replaced");
    else if (!strcmp(h->policy, "none") && k)
        w = snprintf(out, n, "none at import: no hot/dead detection; the %zu flagged pixel%s kept their counts",
                     k, s);
    else if (!strcmp(h->policy, "none"))
        w = snprintf(out, n, "none at import: no hot/dead detection; no count replaced");
    else
        w = snprintf(out, n, "%s at import: no pixel flagged, no count replaced", h->policy);
    if (h->markers_zeroed && w >= 0 && (size_t)w < n)
        snprintf(out + w, n - (size_t)w, "; %zu marker value%s too large for the dtype stored as 0",
                 h->markers_zeroed, h->markers_zeroed == 1 ? "" : "s");
}

static void print_value(const char *name, double v, const char *unit)
{
    if (isfinite(v))
        printf("  %-18s %g %s\n", name, v, unit);
    else
        printf("  %-18s unknown\n", name);
}

static void print_pair(const char *name, const double v[2], const char *unit)
{
    if (!isfinite(v[0]) && !isfinite(v[1]))
        printf("  %-18s unknown\n", name);
    else if (v[0] == v[1])
        printf("  %-18s %g %s\n", name, v[0], unit);
    else
        printf("  %-18s %g, %g %s (row, col)\n", name, v[0], v[1], unit);
}

/* Where each calibration value comes from (qem-format §9.4, §9.8): the value the source file
 * recorded and a stated override; the override counts. One entry per quantity that has either. */
static const struct {
    const char *name, *path;
    int axis; /* recorded as the axis' sampling (-1: in electron_microscope) */
} SOURCES[] = {
    {"kv", "electron_source/accelerating_voltage", -1},
    {"semiangle_mrad", "illumination_system/semi_convergence_angle", -1},
    {"scan_step_row_A", "scan_controller/regular_scan/pixel_size_row", 0},
    {"scan_step_col_A", "scan_controller/regular_scan/pixel_size_column", 1},
    {"det_sampling_row", "imaging_system/reciprocal_pixel_size_row", 2},
    {"det_sampling_col", "imaging_system/reciprocal_pixel_size_column", 3},
    {"camera_length_mm", "imaging_system/camera_length", -1},
    {"dwell_us", "scan_controller/regular_scan/dwell_time", -1},
};

static double qvalue(const cJSON *q)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(q, "value");
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static double qvalue_key(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *qstring(const cJSON *q, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(q, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* sci's recorded quantity and override of SOURCES[i] (NULL when absent). */
static void source_pair(const cJSON *sci, size_t i, const cJSON **rec, const cJSON **ov)
{
    const cJSON *em = cJSON_GetObjectItemCaseSensitive(sci, "electron_microscope");
    const cJSON *axes = cJSON_GetObjectItemCaseSensitive(sci, "axes");
    *ov = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sci, "calibration_overrides"),
                                           SOURCES[i].path);
    *rec = SOURCES[i].axis >= 0 && cJSON_IsArray(axes)
               ? cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(axes, SOURCES[i].axis), "sampling")
               : cJSON_GetObjectItemCaseSensitive(em, SOURCES[i].path);
    if (!isfinite(qvalue(*rec)))
        *rec = NULL;
    if (!isfinite(qvalue(*ov)))
        *ov = NULL;
}

static cJSON *sources_json(const cJSON *sci)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof SOURCES / sizeof SOURCES[0]; i++) {
        const cJSON *rec, *ov;
        source_pair(sci, i, &rec, &ov);
        if (!rec && !ov)
            continue;
        cJSON *e = cJSON_AddObjectToObject(o, SOURCES[i].name);
        cJSON_AddItemToObject(e, "file", rec ? cJSON_CreateNumber(qvalue(rec)) : cJSON_CreateNull());
        cJSON_AddItemToObject(e, "override", ov ? cJSON_CreateNumber(qvalue(ov)) : cJSON_CreateNull());
        const char *ev = ov ? qstring(ov, "evidence") : NULL;
        cJSON_AddItemToObject(e, "override_evidence", ev ? cJSON_CreateString(ev) : cJSON_CreateNull());
        const char *u = qstring(ov ? ov : rec, "unit");
        cJSON_AddItemToObject(e, "unit", u ? cJSON_CreateString(u) : cJSON_CreateNull());
        cJSON_AddStringToObject(e, "used", ov ? "override" : "file");
    }
    return o;
}

/* The lines that say, where a stated value and the file's own disagree, which one counts. */
static void print_sources(const cJSON *sci)
{
    for (size_t i = 0; i < sizeof SOURCES / sizeof SOURCES[0]; i++) {
        const cJSON *rec, *ov;
        source_pair(sci, i, &rec, &ov);
        if (!ov)
            continue;
        const char *ev = qstring(ov, "evidence"), *u = qstring(ov, "unit");
        if (rec && qvalue(rec) != qvalue(ov))
            printf("  %-18s %s: %g %s (%s) is used; the file recorded %g %s\n", "override", SOURCES[i].name,
                   qvalue(ov), u ? u : "", ev ? ev : "stated", qvalue(rec), qstring(rec, "unit") ? qstring(rec, "unit") : "");
        else
            printf("  %-18s %s: %g %s (%s)%s\n", "override", SOURCES[i].name, qvalue(ov), u ? u : "",
                   ev ? ev : "stated", rec ? ", as the file recorded" : "; the file recorded none");
    }
}

int cmd_info(int argc, char **argv)
{
    static const struct option opts[] = {{"check", no_argument, 0, OPT_CHECK},
                                         {"threads", required_argument, 0, CLI_OPT_THREADS},
                                         {"memory", required_argument, 0, CLI_OPT_MEMORY},
                                         {"json", no_argument, 0, CLI_OPT_JSON},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_micro m;
    cli_micro_init(&m);
    int check = 0;
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":hq", opts, NULL)) != -1) { /* -q: info prints no notes */
        if (opt == 'h') {
            help(stdout);
            return CLI_EXIT_OK;
        }
        if (opt == OPT_CHECK) {
            check = 1;
            continue;
        }
        if (opt == '?' || opt == ':') {
            char msg[256];
            const char *what = argv[optind - 1];
            snprintf(msg, sizeof msg, "%s %s (try ssb4d info --help)",
                     opt == ':' ? "missing value for" : "unknown option", what ? what : "");
            return cli_error(CMD, SSB4D_EINVAL, msg);
        }
        if (cli_micro_handle(&m, opt, optarg) <= 0)
            return CLI_EXIT_USAGE;
    }
    if (optind >= argc)
        return cli_error(CMD, SSB4D_EINVAL, "no FILE given (usage: ssb4d info FILE.qem)");
    if (argc - optind > 1) {
        char msg[512];
        snprintf(msg, sizeof msg, "one FILE expected, got also '%.400s'", argv[optind + 1]);
        return cli_error(CMD, SSB4D_EINVAL, msg);
    }
    const char *path = argv[optind];
    if (cli_check_readable_file(CMD, path)) /* then ssb4d_qem_open: what else it is, first */
        return CLI_EXIT_USAGE;

    ssb4d_err err = {0};
    ssb4d_qem *q = NULL;
    ssb4d_status st = ssb4d_qem_open(path, check, m.threads, &q, &err);
    if (st)
        return cli_error(CMD, st, err.msg);
    ssb4d_qem_info info;
    ssb4d_qem_get_info(q, &info);
    const ssb4d_qem_info *in = &info;
    /* What info holds: the per-pixel arrays (valid mask, two spatial field maps) and, with
     * --check, the spatial index check's scratch. */
    size_t budget = cli_memory_budget(&m), per_pixel = in->n_pix * (1 + 2 * sizeof(uint32_t));
    if (per_pixel > budget) {
        char b[2][32];
        fprintf(stderr, "ssb4d info: the job does not fit in %s: the per-pixel arrays need %s\n",
                ssb4d_size_text(b[0], budget, per_pixel, 0), ssb4d_size_text(b[1], per_pixel, per_pixel, 1));
        ssb4d_qem_close(q);
        return CLI_EXIT_USAGE;
    }
    int nt = check ? cli_qem_check_threads(CMD, q, m.threads, budget, per_pixel) : 1;
    if (!nt) {
        ssb4d_qem_close(q);
        return CLI_EXIT_USAGE;
    }
    if (check && (st = ssb4d_qem_check_index(q, nt, &err))) {
        ssb4d_qem_close(q);
        return cli_error(CMD, st, err.msg);
    }
    const uint8_t *valid = ssb4d_qem_valid_mask(q);
    size_t n_flagged = 0;
    for (size_t k = 0; k < in->n_pix; k++)
        n_flagged += !valid[k];
    size_t dense = in->n_scans * in->n_pix * (size_t)in->dtype_bytes;
    double ratio = in->file_bytes ? (double)dense / (double)in->file_bytes : 0;
    double bits = (double)in->payload_bytes * 8.0 / ((double)in->n_scans * (double)in->n_pix);
    ssb4d_qem_calibration cal;
    ssb4d_qem_calibration_of(q, &cal);
    const char *det_unit = cal.det_sampling_inverse_A ? "1/A" : "mrad";
    char *htext = ssb4d_qem_header_text(q);
    cJSON *h = htext ? cJSON_Parse(htext) : NULL;
    free(htext);
    if (!h) {
        ssb4d_qem_close(q);
        return cli_error(CMD, SSB4D_ENOMEM, "out of memory");
    }
    const cJSON *sci = cJSON_GetObjectItemCaseSensitive(h, "scientific_metadata");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(sci, "source_format");
    const cJSON *proc = cJSON_GetObjectItemCaseSensitive(sci, "processing");
    const char *src_format = cJSON_IsString(fmt) ? fmt->valuestring : "unknown";
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(h, "metadata");
    ssb4d_qem_flags fh;
    ssb4d_qem_flags_of(q, &fh);

    if (m.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "file", path);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int i = 0; i < 4; i++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)in->shape[i]));
        cJSON_AddStringToObject(o, "dtype", in->dtype_bytes == 1 ? "uint8" : "uint16");
        cJSON_AddNumberToObject(o, "chunks", (double)in->n_chunks);
        cJSON_AddNumberToObject(o, "blocks", (double)in->n_blocks);
        cJSON_AddNumberToObject(o, "file_bytes", (double)in->file_bytes);
        cJSON_AddNumberToObject(o, "header_bytes", (double)in->header_bytes);
        cJSON_AddNumberToObject(o, "body_bytes", (double)in->body_bytes);
        cJSON_AddNumberToObject(o, "stream_bytes", (double)in->payload_bytes);
        cJSON_AddNumberToObject(o, "dense_bytes", (double)dense);
        cJSON_AddNumberToObject(o, "compression_ratio", ratio);
        cJSON_AddNumberToObject(o, "bits_per_count", bits);
        cJSON_AddNumberToObject(o, "flagged_pixels", (double)n_flagged);
        /* The import's hot-pixel step; null where the file does not record it. */
        cJSON *hp = cJSON_AddObjectToObject(o, "hot_pixels");
        cJSON_AddItemToObject(hp, "policy", fh.policy ? cJSON_CreateString(fh.policy) : cJSON_CreateNull());
        cJSON_AddItemToObject(hp, "flagged_by_file",
                              fh.flagged_recorded ? cJSON_CreateNumber((double)fh.flagged_by_file) : cJSON_CreateNull());
        cJSON_AddItemToObject(hp, "flagged_by_totals",
                              fh.flagged_recorded ? cJSON_CreateNumber((double)fh.flagged_by_totals) : cJSON_CreateNull());
        cJSON_AddBoolToObject(hp, "counts_replaced", fh.replaced);
        cJSON_AddItemToObject(hp, "method", fh.method ? cJSON_CreateString(fh.method) : cJSON_CreateNull());
        cJSON_AddNumberToObject(hp, "replaced_pixels", (double)fh.replaced_pixels);
        cJSON_AddNumberToObject(hp, "markers_stored_as_zero", (double)fh.markers_zeroed);
        cJSON_AddStringToObject(o, "source_format", src_format);
        cJSON *c = cJSON_AddObjectToObject(o, "calibration");
        cJSON_AddItemToObject(c, "kv", cli_json_num(cal.kv));
        cJSON_AddItemToObject(c, "semiangle_mrad", cli_json_num(cal.semiangle_mrad));
        cJSON_AddItemToObject(c, "scan_step_A", cli_json_pair(cal.scan_step_A));
        cJSON_AddItemToObject(c, "det_sampling", cli_json_pair(cal.det_sampling));
        cJSON_AddStringToObject(c, "det_sampling_unit", det_unit);
        cJSON_AddItemToObject(c, "camera_length_mm", cli_json_num(cal.camera_length_mm));
        cJSON_AddItemToObject(c, "dwell_us", cli_json_num(cal.dwell_us));
        cJSON_AddItemToObject(o, "calibration_sources", sources_json(sci));
        const cJSON *fl = cJSON_GetObjectItemCaseSensitive(meta, "detector_flip");
        cJSON_AddItemToObject(o, "detector_flip", cJSON_IsBool(fl) ? cJSON_CreateBool(cJSON_IsTrue(fl)) : cJSON_CreateNull());
        const cJSON *smd = cJSON_GetObjectItemCaseSensitive(sci, "source_metadata");
        cJSON_AddItemToObject(o, "source_metadata", smd ? cJSON_Duplicate(smd, 1) : cJSON_CreateObject());
        cJSON_AddItemToObject(o, "processing", proc ? cJSON_Duplicate(proc, 1) : cJSON_CreateArray());
        cJSON_AddBoolToObject(o, "body_checked", check);
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        cJSON_Delete(h);
        ssb4d_qem_close(q);
        if (!s)
            return cli_error(CMD, SSB4D_ENOMEM, "out of memory");
        puts(s);
        free(s);
        return CLI_EXIT_OK;
    }
    printf("ssb4d info: %s\n", path);
    printf("  %-18s %zu x %zu scan, %zu x %zu detector (%zu positions, %zu pixels)\n", "shape",
           in->shape[0], in->shape[1], in->shape[2], in->shape[3], in->n_scans, in->n_pix);
    printf("  %-18s %s\n", "dtype", in->dtype_bytes == 1 ? "uint8" : "uint16");
    printf("  %-18s %zu chunk%s, %zu blocks of up to 512 scans\n", "layout", in->n_chunks,
           in->n_chunks == 1 ? "" : "s", in->n_blocks);
    printf("  %-18s %zu bytes (header %zu, body %zu; count streams %zu)\n", "file", in->file_bytes,
           in->header_bytes, in->body_bytes, in->payload_bytes);
    printf("  %-18s %zu bytes dense -> ratio %.2f, %.3f bits per count\n", "compression", dense,
           ratio, bits);
    printf("  %-18s %zu pixel%s", "flagged", n_flagged, n_flagged == 1 ? "" : "s");
    if (n_flagged)
        printf(", marked invalid");
    if (fh.flagged_recorded)
        printf(" (%zu by the source's mask, %zu found hot or dead at import)", fh.flagged_by_file,
               fh.flagged_by_totals);
    printf("\n");
    char hot[384];
    describe_flag_handling(&fh, n_flagged, hot, sizeof hot);
    printf("  %-18s %s\n", "hot pixels", hot);
    printf("  %-18s %s\n", "source format", src_format);
    print_value("kV", cal.kv, "kV");
    print_value("semi-angle", cal.semiangle_mrad, "mrad");
    print_pair("scan step", cal.scan_step_A, "A");
    print_pair("detector sampling", cal.det_sampling, det_unit);
    print_value("camera length", cal.camera_length_mm, "mm");
    print_value("dwell", cal.dwell_us, "us");
    print_sources(sci);
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(meta, "detector_flip");
    if (cJSON_IsBool(fl))
        printf("  %-18s %s (recorded at import)\n", "detector", cJSON_IsTrue(fl) ? "mirrored" : "not mirrored");
    const cJSON *smd = cJSON_GetObjectItemCaseSensitive(sci, "source_metadata"), *it;
    cJSON_ArrayForEach(it, smd) {
        char *v = cJSON_IsString(it) ? NULL : cJSON_PrintUnformatted(it);
        printf("  %-18s %s = %.200s\n", "source metadata", it->string ? it->string : "?",
               cJSON_IsString(it) ? it->valuestring : v ? v : "?");
        free(v);
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, proc) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(r, "operation");
        const cJSON *ch = cJSON_GetObjectItemCaseSensitive(r, "changes_measurements");
        printf("  %-18s %s%s\n", "processing", cJSON_IsString(op) ? op->valuestring : "?",
               cJSON_IsTrue(ch) ? " (changes measured values)" : "");
        if (cJSON_IsString(op) && !strcmp(op->valuestring, "gain_quantisation"))
            printf("  %-18s gain %g electrons per unit (%s): error max %g e, rms %g e; %g negative values stored as 0\n",
                   "", qvalue_key(r, "gain_electrons_per_unit"), qstring(r, "gain_source") ? qstring(r, "gain_source") : "?",
                   qvalue_key(r, "max_error_electrons"), qvalue_key(r, "rms_error_electrons"),
                   qvalue_key(r, "negative_values_stored_as_zero"));
    }
    printf("  %-18s %s\n", "body", check ? "checksums and spatial index verified"
                                         : "not read (use --check to verify it)");
    cJSON_Delete(h);
    ssb4d_qem_close(q);
    return CLI_EXIT_OK;
}
