/* cmd_refine.c — `ssb4d refine DATA`: multislice refinement seeded by the SSB fit (SPEC §13,
 * docs/refine.md).
 *
 * The microscope values as `fit` resolves them (the .qem's record, the sidecar, --calibration,
 * the flags) → calibrate → the seed: the calibration file's fit when it records one (loaded into
 * the session), else the standard fit (ssb4d_session_refine runs it) → ssb4d_session_refine on
 * the region → DIR/projected_phase.tiff, projected_phase.png, slices.npy, probe.npy,
 * calibration.json (the session's file, with its "refine" section) and refine.json (the --json
 * record). The outputs are written into a staging folder inside DIR and renamed into place only
 * when all of them were written: a run that fails leaves none of them behind. */
#include "cli/cli_common.h"
#include "cli/cli_params.h"
#include "cli/cli_session.h"
#include "cli/commands.h"
#include "cli/progress.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { OPT_REGION = CLI_OPT_FIRST_FREE, OPT_THICKNESS_RANGE, OPT_FORCE };

/* The options read from the parameter table (SSB4D_OP_REFINE), in their --help order. */
static const char *const REFINE_TABLE[] = {"slices",         "thickness", "iterations", "batch", "loss",
                                           "no-aberrations", "no-tilt",   "bin",        "seed",  NULL};

/* What the run writes into DIR, in this order. */
static const char *const OUTPUTS[] = {"projected_phase.tiff", "projected_phase.png", "slices.npy",
                                      "probe.npy", "calibration.json", "refine.json"};
enum { N_OUTPUTS = sizeof OUTPUTS / sizeof OUTPUTS[0] };

typedef struct {
    const char *data;
    const char *out_dir;
    char out_buf[4096];
    int force, has_region, created_dir;
    size_t region[4];
    ssb4d_refine_params rp;
    cli_micro m;
} refine_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ssb4d refine DATA [options]\n\n"
            "Multislice ptychography seeded by the SSB fit (docs/refine.md): a model of N slices,\n"
            "the probe from the aberrations and the tilt that explains the recorded counts (Poisson\n"
            "likelihood), refined in stages: the object, then C10, C12, phi12, the tilt and the\n"
            "thickness. The seed is the calibration file's fit when --calibration names one that\n"
            "records a fit (ssb4d fit's calibration.json); otherwise the standard fit runs first.\n"
            "Writes DIR/projected_phase.tiff (float32, the sum of the slices' phases),\n"
            "projected_phase.png (with a scale bar and a colour bar in rad), slices.npy (float32,\n"
            "slices x rows x cols: each slice's phase), probe.npy (complex64, at the entrance\n"
            "surface), calibration.json (with the refined C10, C12, phi12, tilt and thickness and a\n"
            "\"refine\" section) and refine.json (what --json prints). Progress goes to stderr.\n\n"
            "  --region R0:R1,C0:C1  refine only these scan rows/cols (half-open); the full field's\n"
            "                        calibration is kept (default: the whole scan)\n");
    cli_param_help(f, SSB4D_OP_REFINE, REFINE_TABLE, 1);
    fprintf(f,
            "  --thickness-range LO:HI\n"
            "                        the range the thickness may take, nm (default 1:30); LO = HI\n"
            "                        holds it fixed\n"
            "  -o, --output DIR      output folder (default ssb4d-refine); it is created if needed\n"
            "  --force               replace outputs that already exist in DIR (without it they are\n"
            "                        refused before any work)\n"
            CLI_BACKEND_HELP
            "                        (refine: the minibatches of positions run on the GPU too)\n"
            "A refinement that is not confident prints one warning line on stderr saying why, and\n"
            "still exits 0. --json prints the record on stdout: C10_nm, C12_nm, phi12_deg (scan\n"
            "frame, as fit --json), phi12_probe_deg, phi12_scan_deg, rotation_deg, flip, tilt_mrad\n"
            "(probe frame), tilt_scan_mrad, thickness_nm, slices, nll, nll_expected, nll_history,\n"
            "confident, warning, region, seconds.\n\n"
            "%s\n" CLI_EXIT_HELP_BEGIN ".\n",
            CLI_MICROSCOPE_HELP);
}

/* "R0:R1,C0:C1" of non-negative integers: 0, or -1. */
static int parse_rect(const char *s, size_t r[4])
{
    unsigned long long v[4];
    int n = 0;
    if (sscanf(s, "%llu:%llu,%llu:%llu%n", &v[0], &v[1], &v[2], &v[3], &n) != 4 || s[n] || strchr(s, '-') ||
        !(v[0] < v[1] && v[2] < v[3]))
        return -1;
    for (int i = 0; i < 4; i++)
        r[i] = (size_t)v[i];
    return 0;
}

/* "LO:HI" in nm, 0 < LO <= HI <= 1e4, through the one number parser: 0, or -1 (line printed). */
static int parse_thickness_range(const char *s, double out[2])
{
    char a[64], b[64];
    const char *colon = strchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof a || strlen(colon + 1) >= sizeof b) {
        cli_say("--thickness-range must be LO:HI in nm; got '%s'", s);
        return -1;
    }
    snprintf(a, sizeof a, "%.*s", (int)(colon - s), s);
    snprintf(b, sizeof b, "%s", colon + 1);
    if (cli_parse_number(a, 1e-3, 1e4, 0, &out[0]) || cli_parse_number(b, 1e-3, 1e4, 0, &out[1])) {
        cli_say("--thickness-range must be LO:HI with numbers in 0.001..10000 nm; got '%s'", s);
        return -1;
    }
    if (out[0] > out[1]) {
        cli_say("--thickness-range %s is empty: LO must not exceed HI", s);
        return -1;
    }
    return 0;
}

/* Parses argv: -1 to exit 0 (help), an exit code > 0, or 0. */
static int parse(int argc, char **argv, refine_opts *o)
{
    struct option opts[64] = {
        CLI_MICROSCOPE_OPTIONS,
        CLI_BACKEND_OPTION,
        {"region", required_argument, 0, OPT_REGION},
        {"thickness-range", required_argument, 0, OPT_THICKNESS_RANGE},
        {"force", no_argument, 0, OPT_FORCE},
        {"output", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},
    };
    size_t n_opts = 0;
    while (opts[n_opts].name)
        n_opts++;
    cli_param_options(opts, &n_opts, 64, SSB4D_OP_REFINE, REFINE_TABLE);
    void *const targets[SSB4D_OP_COUNT] = {[SSB4D_OP_REFINE] = &o->rp};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:hq", opts, NULL)) != -1) {
        int r = c ? cli_micro_handle(&o->m, c, optarg) : 1;
        if (!r)
            r = cli_param_handle(c, optarg, targets);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        switch (c) {
        case 'h': usage(stdout); return -1;
        case 'o': o->out_dir = optarg; break;
        case OPT_FORCE: o->force = 1; break;
        case OPT_REGION:
            if (parse_rect(optarg, o->region)) {
                cli_say("--region must be R0:R1,C0:C1 (scan rows and columns, half-open, R0 < R1, C0 < C1); got '%s'",
                        optarg);
                return CLI_EXIT_USAGE;
            }
            o->has_region = 1;
            break;
        case OPT_THICKNESS_RANGE:
            if (parse_thickness_range(optarg, o->rp.thickness_range_nm))
                return CLI_EXIT_USAGE;
            break;
        case ':': cli_say("option %s needs a value", argv[optind - 1]); return CLI_EXIT_USAGE;
        default: cli_say("unknown option '%s' (see --help)", argv[optind - 1]); return CLI_EXIT_USAGE;
        }
    }
    if (argc - optind != 1) {
        cli_say("expected exactly one DATA file (see --help)");
        return CLI_EXIT_USAGE;
    }
    o->data = argv[optind];
    o->out_dir = cli_dir_text(o->out_buf, sizeof o->out_buf, o->out_dir);
    const double *tr = o->rp.thickness_range_nm;
    if (!isnan(o->rp.thickness_nm) && !(tr[0] <= o->rp.thickness_nm && o->rp.thickness_nm <= tr[1])) {
        cli_say("--thickness %g lies outside the thickness range %g:%g nm (see --thickness-range)",
                o->rp.thickness_nm, tr[0], tr[1]);
        return CLI_EXIT_USAGE;
    }
    o->rp.refine_thickness = tr[0] < tr[1];
    o->rp.threads = o->m.threads;
    if (o->m.backend == SSB4D_BACKEND_CUDA) /* asked for: the refinement too (AUTO keeps it on the CPU) */
        o->rp.backend = SSB4D_BACKEND_CUDA;
    return 0;
}

/* ---- output folder ---------------------------------------------------------------------------- */

/* Creates DIR if needed and refuses outputs that exist unless --force (before any work). */
static int prepare_dir(refine_opts *o)
{
    struct stat sb;
    if (stat(o->out_dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) {
            cli_say("%s exists and is not a folder", o->out_dir);
            return CLI_EXIT_USAGE;
        }
    } else if (mkdir(o->out_dir, 0777) != 0) {
        cli_say("cannot create the output folder %s: %s", o->out_dir, strerror(errno));
        return CLI_EXIT_USAGE;
    } else
        o->created_dir = 1;
    for (size_t i = 0; i < N_OUTPUTS; i++) {
        char p[4096];
        cli_join_path(p, sizeof p, o->out_dir, OUTPUTS[i]);
        if (cli_check_output("refine", p, o->force, ", or -o DIR"))
            return CLI_EXIT_USAGE;
    }
    return 0;
}

/* The staging folder's files and the folder itself (what a failed run leaves otherwise). */
static void remove_staging(const char *stage)
{
    for (size_t i = 0; i < N_OUTPUTS; i++) {
        char p[4096];
        cli_join_path(p, sizeof p, stage, OUTPUTS[i]);
        unlink(p);
    }
    rmdir(stage);
}

/* ---- the record -------------------------------------------------------------------------------- */

static cJSON *pair_json(const double v[2])
{
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cli_json_num(v[0]));
    cJSON_AddItemToArray(a, cli_json_num(v[1]));
    return a;
}

/* The refinement's own tracked peak: the "refine" stage's peak over what the stage before it left
 * (what `ssb4d plan --refine` predicts as the refinement's peak; equal unless the refinement
 * reused a cached block of the earlier stages). */
static size_t refine_stage_bytes(const ssb4d_mem *mem)
{
    size_t n = ssb4d_mem_stage_count(mem);
    for (size_t i = n; i-- > 1;) {
        const ssb4d_stage_record *r = ssb4d_mem_stage(mem, i);
        if (!strcmp(r->name, "refine")) {
            size_t before = ssb4d_mem_stage(mem, i - 1)->after_bytes;
            return r->peak_bytes > before ? r->peak_bytes - before : 0;
        }
    }
    return 0;
}

/* refine.json and --json: fit --json's keys where they mean the same (C10_nm, C12_nm, phi12_deg in
 * the scan frame, phi12_probe_deg, phi12_scan_deg, rotation_deg, flip), then the refinement's. */
static cJSON *record(const refine_opts *o, const cli_session *cs, const ssb4d_refine_result *r, const char *seed_from,
                     double seconds)
{
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "data", o->data);
    cJSON_AddItemToObject(out, "C10_nm", cli_json_num(r->ab.C_nm[SSB4D_C10]));
    cJSON_AddItemToObject(out, "C12_nm", cli_json_num(r->ab.C_nm[SSB4D_C12]));
    cJSON_AddItemToObject(out, "phi12_deg", cli_json_num(r->ab.phi_deg[SSB4D_C12]));
    cJSON_AddItemToObject(out, "phi12_probe_deg", cli_json_num(r->phi12_probe_deg));
    cJSON_AddItemToObject(out, "phi12_scan_deg", cli_json_num(r->ab.phi_deg[SSB4D_C12]));
    cJSON_AddItemToObject(out, "rotation_deg", cli_json_num(r->geom.rotation_deg));
    cJSON_AddBoolToObject(out, "flip", r->geom.flip != 0);
    /* the tilt in the probe frame under tilt_mrad (issue 40); fit --json's tilt_mrad is the scan
     * frame's: both frames are here under explicit names too */
    cJSON_AddItemToObject(out, "tilt_mrad", pair_json(r->tilt_probe_mrad));
    cJSON_AddItemToObject(out, "tilt_probe_mrad", pair_json(r->tilt_probe_mrad));
    cJSON_AddItemToObject(out, "tilt_scan_mrad", pair_json(r->tilt_mrad));
    cJSON_AddItemToObject(out, "thickness_nm", cli_json_num(r->thickness_nm));
    /* false: the value repeats the start (one slice has no depth; docs/refine.md) */
    cJSON_AddBoolToObject(out, "tilt_refined", r->tilt_refined != 0);
    cJSON_AddBoolToObject(out, "thickness_refined", r->thickness_refined != 0);
    cJSON_AddNumberToObject(out, "slices", r->slices);
    cJSON_AddStringToObject(out, "loss", o->rp.loss == SSB4D_REFINE_AMPLITUDE ? "amplitude" : "poisson");
    cJSON_AddItemToObject(out, "nll", cli_json_num(r->nll));
    cJSON_AddItemToObject(out, "nll_expected", cli_json_num(r->nll_expected));
    cJSON *h = cJSON_AddArrayToObject(out, "nll_history");
    for (size_t i = 0; i < r->n_history; i++)
        cJSON_AddItemToArray(h, cli_json_num(r->history[i]));
    cJSON_AddBoolToObject(out, "confident", r->confident != 0);
    if (r->confident)
        cJSON_AddNullToObject(out, "warning");
    else
        cJSON_AddStringToObject(out, "warning", r->warning);
    cJSON *rg = cJSON_AddArrayToObject(out, "region");
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToArray(rg, cJSON_CreateNumber((double)r->region[i]));
    cJSON *sh = cJSON_AddArrayToObject(out, "object_shape");
    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)r->obj_shape[0]));
    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)r->obj_shape[1]));
    cJSON_AddItemToObject(out, "object_pixel_A", pair_json(r->obj_pixel_A));
    sh = cJSON_AddArrayToObject(out, "probe_shape");
    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)r->probe_shape[0]));
    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)r->probe_shape[1]));
    cJSON_AddStringToObject(out, "seeded_by", seed_from);
    cJSON_AddNumberToObject(out, "seed", (double)o->rp.seed);
    cJSON_AddNumberToObject(out, "iterations", o->rp.iterations);
    cJSON_AddNumberToObject(out, "refine_seconds", r->seconds);
    cJSON_AddNumberToObject(out, "seconds_per_iteration", r->seconds_per_iteration);
    cJSON_AddNumberToObject(out, "seconds", seconds);
    cJSON_AddNumberToObject(out, "peak_tracked_bytes", (double)ssb4d_mem_peak(ssb4d_session_mem(cs->s)));
    cJSON_AddNumberToObject(out, "refine_peak_tracked_bytes", (double)refine_stage_bytes(ssb4d_session_mem(cs->s)));
    cJSON_AddNumberToObject(out, "memory_bytes", (double)cs->budget);
    /* where the refinement's minibatches ran (the session's backend unless --backend said otherwise) */
    cJSON_AddStringToObject(out, "backend", r->backend ? r->backend : ssb4d_session_backend(cs->s));
    cJSON_AddNumberToObject(out, "device_peak_bytes", (double)r->device_peak_bytes);
    cJSON_AddNumberToObject(out, "seconds_per_iteration", r->seconds_per_iteration);
    cJSON_AddStringToObject(out, "output_dir", o->out_dir);
    ssb4d_json_exact(out); /* Python's numbers, to the last bit */
    return out;
}

/* Every output into the staging folder `stage`. */
static ssb4d_status write_outputs(const char *stage, const cli_session *cs, const ssb4d_refine_result *r, cJSON *rec,
                                  ssb4d_err *err)
{
    char p[4096];
    size_t rows = r->obj_shape[0], cols = r->obj_shape[1];
    double pixel[2] = {r->obj_pixel_A[0], r->obj_pixel_A[1]};
    if (!r->projected_phase || !r->slice_phase || !r->probe || !r->slices)
        return ssb4d_err_set(err, SSB4D_EINTERNAL, "the refinement returned no images");
    ssb4d_status st = SSB4D_OK;
    for (int i = 0; i < 2 && !st; i++) {
        cli_join_path(p, sizeof p, stage, OUTPUTS[i]);
        st = cli_write_image(p, r->projected_phase, rows, cols, pixel, err);
    }
    size_t s3[3] = {(size_t)r->slices, rows, cols};
    cli_join_path(p, sizeof p, stage, "slices.npy");
    if (!st)
        st = ssb4d_npy_save(p, "<f4", 3, s3, r->slice_phase, err);
    cli_join_path(p, sizeof p, stage, "probe.npy");
    if (!st)
        st = ssb4d_npy_save(p, "<c8", 2, r->probe_shape, r->probe, err);
    cli_join_path(p, sizeof p, stage, "calibration.json");
    if (!st) /* the library's one writer: the refined values and the "refine" section */
        st = ssb4d_session_save_calibration(cs->s, p, 1, err);
    if (!st) {
        char *text = cJSON_Print(rec);
        cli_join_path(p, sizeof p, stage, "refine.json");
        st = text ? ssb4d_write_text_atomic(p, text, err) : ssb4d_err_set(err, SSB4D_ENOMEM, "out of memory");
        free(text);
    }
    return st;
}

/* Renames the staged outputs into DIR (each rename atomic; the folder left empty is removed). */
static ssb4d_status publish(const char *stage, const char *dir, ssb4d_err *err)
{
    for (size_t i = 0; i < N_OUTPUTS; i++) {
        char a[4096], b[4096];
        cli_join_path(a, sizeof a, stage, OUTPUTS[i]);
        cli_join_path(b, sizeof b, dir, OUTPUTS[i]);
        if (rename(a, b))
            return ssb4d_err_set(err, SSB4D_EIO, "cannot move %s into %s: %s", OUTPUTS[i], dir, strerror(errno));
    }
    rmdir(stage);
    return SSB4D_OK;
}

static void print_text(const refine_opts *o, const cli_session *cs, const ssb4d_refine_result *r,
                       const char *seed_from, double seconds)
{
    printf("data         %s (%zux%zu scan, %zux%zu detector)\n", o->data, cs->shape[0], cs->shape[1], cs->shape[2],
           cs->shape[3]);
    printf("region       rows %zu:%zu, cols %zu:%zu\n", r->region[0], r->region[1], r->region[2], r->region[3]);
    printf("seeded by    %s\n", seed_from);
    printf("C10          %9.3f nm\n", r->ab.C_nm[SSB4D_C10]);
    printf("C12          %9.3f nm\n", r->ab.C_nm[SSB4D_C12]);
    printf("phi12        %9.3f deg (probe/detector frame), %.3f deg (scan frame)\n", r->phi12_probe_deg,
           r->ab.phi_deg[SSB4D_C12]);
    printf("tilt         (%.3f, %.3f) mrad (probe/detector frame), (%.3f, %.3f) mrad (scan frame)\n",
           r->tilt_probe_mrad[0], r->tilt_probe_mrad[1], r->tilt_mrad[0], r->tilt_mrad[1]);
    printf("thickness    %9.3f nm in %d slice%s\n", r->thickness_nm, r->slices, r->slices == 1 ? "" : "s");
    if (!r->tilt_refined || !r->thickness_refined)
        printf("not refined  %s%s%s (the start's values%s)\n", r->tilt_refined ? "" : "the tilt",
               !r->tilt_refined && !r->thickness_refined ? " and " : "", r->thickness_refined ? "" : "the thickness",
               r->slices == 1 ? ": one slice has no depth" : "");
    printf("rotation     %9.3f deg, detector %s\n", r->geom.rotation_deg, r->geom.flip ? "mirrored" : "not mirrored");
    printf("likelihood   %.6g per position (counting noise alone: %.6g), %zu iteration%s\n", r->nll, r->nll_expected,
           r->n_history, r->n_history == 1 ? "" : "s");
    printf("confident    %s\n", r->confident ? "yes" : "no, see the warning");
    printf("time         %.1f s (refinement %.1f s)\n", seconds, r->seconds);
    printf("backend      %s\n", r->backend ? r->backend : ssb4d_session_backend(cs->s));
    printf("wrote        %s/projected_phase.tiff, projected_phase.png, slices.npy, probe.npy, calibration.json, "
           "refine.json\n", o->out_dir);
}

/* The seed: a calibration file that records a fit is loaded into the session (its calibration,
 * then its fit: the refinement starts where that fit ended, under the calibration it was made
 * with, so the file's microscope values and geometry are used as they are); otherwise
 * ssb4d_session_refine runs the standard fit. *from says which. */
static int seed_session(const refine_opts *o, cli_session *cs, const char **from, int *seeded)
{
    *from = "the standard fit (run first)";
    *seeded = 0;
    const char *path = o->m.calibration_path;
    if (!path)
        return 0;
    ssb4d_calfile cf;
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_calfile_read(path, &cf, &err);
    int has_fit = !st && cf.has_fit && cf.has_ab;
    ssb4d_calfile_free(&cf);
    if (st)
        return cli_error("refine", st, err.msg);
    if (!has_fit)
        return 0;
    cli_session_bar(cs, "calibrate"); /* the file's calibration, then its fit: one calibration */
    st = ssb4d_session_load_calibration(cs->s, path, &err);
    if (!st)
        st = ssb4d_session_load_fit(cs->s, path, &err);
    cli_session_bar_done(cs);
    if (st)
        return cli_session_fail(cs, st, err.msg);
    *from = "the calibration file's fit";
    *seeded = 1;
    return 0;
}

int cmd_refine(int argc, char **argv)
{
    refine_opts o;
    memset(&o, 0, sizeof o);
    o.out_dir = "ssb4d-refine";
    ssb4d_refine_params_default(&o.rp);
    cli_micro_init(&o.m);
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    /* A missing DATA first: before the output folder is made or the microscope resolved. */
    if ((rc = cli_check_readable("refine", o.data)) || (rc = cli_auto_calibration("refine", o.data, &o.m, o.m.quiet)))
        return rc;
    /* The overwrite rule before the microscope values are resolved (they may be missing). */
    if ((rc = prepare_dir(&o)))
        return rc;
    cli_progress total;
    cli_progress_start(&total, "total", 1);
    cli_session cs;
    memset(&cs, 0, sizeof cs);
    cli_session_req rq;
    memset(&rq, 0, sizeof rq);
    ssb4d_fit_params fp; /* the standard fit's plan, should the seed need it */
    ssb4d_fit_params_default(&fp);
    rq.data = o.data;
    rq.m = &o.m;
    rq.fit = &fp;
    rq.upsample = 1;
    rc = cli_session_open("refine", &rq, &cs);
    ssb4d_err err = {0};
    /* the region inside the scan, before any work (any size: no G is built on it) */
    if (!rc && o.has_region && (o.region[1] > cs.shape[0] || o.region[3] > cs.shape[1])) {
        cli_say("--region %zu:%zu,%zu:%zu is outside the %zux%zu scan", o.region[0], o.region[1], o.region[2],
                o.region[3], cs.shape[0], cs.shape[1]);
        rc = CLI_EXIT_USAGE;
    }
    const char *seed_from = "";
    int seeded = 0;
    if (!rc)
        rc = seed_session(&o, &cs, &seed_from, &seeded);
    if (!rc && !seeded) /* a loaded file's calibration is done already */
        rc = cli_session_calibrate(&cs);
    ssb4d_refine_result r;
    memset(&r, 0, sizeof r);
    if (!rc) {
        cli_session_bar(&cs, "refine");
        ssb4d_status st = ssb4d_session_refine(cs.s, o.has_region ? o.region : NULL, &o.rp, &r, &err);
        cli_session_bar_done(&cs);
        if (st)
            rc = cli_session_fail(&cs, st, err.msg);
    }
    char stage[4096] = "";
    cJSON *rec = NULL;
    if (!rc) {
        char name[64];
        snprintf(name, sizeof name, ".refine-staging-%ld", (long)getpid());
        cli_join_path(stage, sizeof stage, o.out_dir, name);
        rec = record(&o, &cs, &r, seed_from, cli_progress_elapsed(&total));
        ssb4d_status st = mkdir(stage, 0777) ? ssb4d_err_set(&err, SSB4D_EIO, "cannot create %s: %s", stage,
                                                             strerror(errno))
                                             : write_outputs(stage, &cs, &r, rec, &err);
        if (!st)
            st = publish(stage, o.out_dir, &err);
        if (st) {
            remove_staging(stage);
            rc = cli_session_fail(&cs, st, err.msg);
        }
    }
    if (!rc) {
        if (o.m.json) {
            char *s = cJSON_PrintUnformatted(rec);
            printf("%s\n", s ? s : "{}");
            free(s);
        } else
            print_text(&o, &cs, &r, seed_from, cli_progress_elapsed(&total));
        if (!r.confident)
            fprintf(stderr, "ssb4d refine: warning: %s\n", r.warning[0] ? r.warning : "not confident");
    } else if (o.created_dir)
        rmdir(o.out_dir); /* a failed run leaves no empty folder of its own behind */
    if (o.m.memory_report && cs.s && !rc)
        ssb4d_mem_report_print(ssb4d_session_mem(cs.s), stderr);
    cJSON_Delete(rec);
    ssb4d_refine_result_free(&r);
    cli_session_close(&cs);
    return rc;
}
