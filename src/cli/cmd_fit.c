/* cmd_fit.c — the main job: `ssb4d fit [DATA]`, `ssb4d demo` and `ssb4d fit-regions DATA`.
 *
 * fit: calibrate (what is not given) → build G (of the whole scan, or of --region only) →
 * ssb4d_fit (parallax estimate, search of C10, C12, φ12 and, unless it was given, the rotation on
 * the band objective, 180° branch check, exact loss) → [--tilt: the thick-sample search] →
 * object → DIR/phase.tiff, phase.png, object.npy, calibration.json, trials.json and a summary.
 * Without DATA it fits a built-in simulated dataset with known aberrations (as does `demo`).
 * fit-regions: the same fit on each region of a grid (or a list), full-field calibration kept;
 * with the rotation not given, the region that settles the 180° branch most clearly then holds
 * its rotation for the others' refits → DIR/regions.json, regions.csv, defocus.png. */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/cli_session.h"
#include "cli/cli_mpi.h"
#include "cli/cli_params.h"
#include "cli/commands.h"
#include "cli/progress.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    OPT_RANGE = CLI_OPT_FIRST_FREE, OPT_LOCK, OPT_START, OPT_REGION, OPT_GRID, OPT_REGIONS,
    OPT_ROTATION_PER_REGION
};


/* The options read from the parameter table (ssb4d_params), in their --help order. */
static const char *const FIT_TABLE_SEARCH[] = {"objective", "trials", "seed", "batch", NULL};
static const char *const FIT_TABLE_TAIL[] = {"fit-radius", "no-branch-check", NULL};

static void fit_help(FILE *f, const char *out_dir)
{
    fprintf(f, "search:\n");
    cli_param_help(f, SSB4D_OP_FIT, FIT_TABLE_SEARCH, 1);
    fprintf(f,
            "  --range P=LO:HI       search box, P = C10 (nm, default -40:40), C12 (nm, 0:10) or\n"
            "                        phi12 (deg, -90:90); repeatable\n"
            "  --start C10,C12,PHI12 start point instead of the parallax estimate; the search then\n"
            "                        covers the whole box\n"
            "  --c10 NM, --c12 NM, --phi12 DEG\n"
            "                        start values, as reconstruct takes them (nm, nm, degrees in the\n"
            "                        scan frame): each replaces its part of --start (default 0,5,0)\n"
            "                        and, like --start, starts the search there over the whole box\n"
            "  --lock P[,P]          hold C10, C12 and/or phi12 at the start value (default 0,5,0;\n"
            "                        phi12 in the probe frame when the rotation is searched); the\n"
            "                        search then starts there, as with --start\n");
    cli_param_help(f, SSB4D_OP_FIT, FIT_TABLE_TAIL, 1);
    fprintf(f,
            "  --tilt                also fit the thick-sample model: tilt (mrad) and thickness (nm)\n"
            "rotation: a rotation that was stated (--rotation, --calibration from ssb4d fit or with a\n"
            "given rotation, the sidecar's scan.rotation_deg) is held, and the branch check only warns;\n"
            "otherwise the fit searches it with C10, C12, phi12, from the parallax estimate (the\n"
            "centre of mass only without one), and the branch check may add 180 degrees. On crystals\n"
            "more than a few nm thick the phase does not settle that branch: give the rotation. phi12\n"
            "(and --tilt's tilt) is reported in the probe (detector) frame and in the scan frame\n"
            "(phi12_deg = scan frame, what reconstruct --phi12 takes). Each value is printed with its\n"
            "standard error (+-). A fit that is not confident (no clear minimum, errors wider than\n"
            "half the tolerance, an undetermined rotation, an uncertain branch, or a phase that does\n"
            "not look like a thin specimen's) prints one warning line on stderr saying why and what to\n"
            "do, and still exits 0.\n"
            "output:\n"
            "  -o, --output DIR      output folder (default %s); it is created if needed\n",
            out_dir);
    cli_param_help(f, SSB4D_OP_PREVIEW, (const char *const[]){"upsample", NULL}, 1);
    fprintf(f,
            "  --force               replace outputs that already exist in DIR (without it they are\n"
            "                        refused before any work)\n"
            "  --verbose             also the parallax estimate, the objective's value, the branch\n"
            "                        check's numbers, the search, the time per step and the memory\n"
            CLI_BACKEND_HELP
            "memory: the budget (--memory, default the available RAM) counts a .qem DATA (it stays\n"
            "mapped), the output images, G and every transient (the parallax's per-pixel spectra, the\n"
            "band objective's tables). When G does not fit, its outer BF pixels are streamed (rebuilt\n"
            "from DATA by every pass): slower, the same fit and images bit for bit (--tilt too). A budget\n"
            "below the smallest that runs exits 2 with that smallest budget (see also ssb4d plan).\n\n");
}

/* The exit statuses, after the shared flags' help. */
static const char FIT_EXIT_HELP[] =
    CLI_EXIT_HELP_BEGIN ";\n"
    "a fit that is not confident prints one warning line on stderr and still exits 0.\n";

static void usage_fit(FILE *f)
{
    fprintf(f,
            "usage: ssb4d fit [DATA] [options]\n\n"
            "Fits the probe aberrations C10, C12, phi12 of DATA (a .qem from ssb4d import, or .npy\n"
            "counts): a parallax (tilt-corrected bright-field) estimate gives the start,\n"
            "the scan-detector rotation and a small search box; a seeded global search and\n"
            "Nelder-Mead on the band objective refine C10, C12, phi12 and, unless it was given, the\n"
            "rotation; the 180-degree branch is checked and the exact SSB loss over all BF pixels\n"
            "reported. It reconstructs and writes DIR/phase.tiff (float32), phase.png (preview\n"
            "with a scale bar and a colour bar in rad),\n"
            "object.npy (complex64), calibration.json (reload with reconstruct --calibration) and\n"
            "trials.json (every trial). Without DATA it fits a built-in simulated dataset with known\n"
            "aberrations (no --calibration or --sidecar then: it has its own). Progress goes to\n"
            "stderr; --json prints one JSON object on stdout.\n\n"
            "  --region R0:R1,C0:C1  fit only these scan rows/cols (half-open, >= 32x32); the\n"
            "                        full field's calibration is kept\n");
    fit_help(f, "ssb4d-fit");
    fprintf(f, "%s\n%s", CLI_MICROSCOPE_HELP, FIT_EXIT_HELP);
}

static void usage_demo(FILE *f)
{
    fprintf(f,
            "usage: ssb4d demo [options]\n\n"
            "Simulates a small dataset (128x128 scan, 64x64 detector, SrTiO3, 300 kV) with known\n"
            "aberrations (C10 %.0f nm, C12 %.0f nm, phi12 %.0f deg), fits it and prints the truth beside\n"
            "the fit. Same options as ssb4d fit; outputs go to ssb4d-demo/ (replaced on each run,\n"
            "--force or not); -o DIR refuses to replace outputs in DIR unless --force, as fit does.\n\n",
            BUILTIN_C10, BUILTIN_C12, BUILTIN_PHI12);
    fit_help(f, "ssb4d-demo");
    fprintf(f, "%s\n%s", CLI_MICROSCOPE_HELP, FIT_EXIT_HELP);
}

static void usage_regions(FILE *f)
{
    fprintf(f,
            "usage: ssb4d fit-regions DATA (--grid RxC | --regions R0:R1,C0:C1[;...]) [options]\n\n"
            "Fits C10, C12, phi12 on each region (every region >= 32x32 scan positions) with the\n"
            "full field's calibration, and writes DIR/regions.json, DIR/regions.csv (one row per\n"
            "region: rectangle, C10, C12, phi12, loss, branch) and DIR/defocus.png (the C10 map,\n"
            "one grey cell per grid region, with a colour bar of C10 in nm spanning at least 1 nm\n"
            "and the regions' spread printed under it).\n\n"
            "When the rotation is not given (--rotation, --rotation-from, a calibration file, the\n"
            "sidecar), the region whose 180 deg branch is settled most clearly (the largest\n"
            "|skewness| >= 1.5 among the confident fits: on a wedge, the thin end) sets it: every\n"
            "other region is refitted with that region's rotation and handedness held (regions.json:\n"
            "branch_region; each region's rotation_source \"region R0:R1,C0:C1\"). When no region\n"
            "settles it, each keeps its own, with one warning (docs/fit.md \"Regions\").\n\n"
            "  --grid RxC            a grid of R x C equal regions covering the scan (e.g. 4x4)\n"
            "  --regions LIST        explicit rectangles separated by ';'\n"
            "  --rotation-per-region each region keeps the rotation its own fit found (no region\n"
            "                        sets it for the others)\n");
    fit_help(f, "ssb4d-regions");
    fprintf(f, "%s\n%s", CLI_MICROSCOPE_HELP, FIT_EXIT_HELP);
}

/* ---- parsing ---------------------------------------------------------------------------------- */

/* The order of ssb4d_fit_params' lo, hi, start and locked: (C10 nm, C12 nm, φ12 deg). */
enum { FIT_C10 = 0, FIT_C12 = 1, FIT_PHI12 = 2 };

static int param_index(const char *name)
{
    if (!strcasecmp(name, "C10"))
        return FIT_C10;
    if (!strcasecmp(name, "C12"))
        return FIT_C12;
    if (!strcasecmp(name, "phi12"))
        return FIT_PHI12;
    return -1;
}

static int parse_range(const char *s, ssb4d_fit_params *p)
{
    char name[16];
    double lo, hi;
    int n = 0;
    if (sscanf(s, "%15[^=]=%lf:%lf%n", name, &lo, &hi, &n) != 3 || s[n] || param_index(name) < 0 ||
        !isfinite(lo) || !isfinite(hi) || !(lo < hi)) {
        cli_say("--range must be C10|C12|phi12=LO:HI with LO < HI; got '%s'", s);
        return -1;
    }
    int j = param_index(name);
    if ((j == FIT_C10 && (lo < -1e4 || hi > 1e4)) || (j == FIT_C12 && (lo < 0 || hi > 1e4)) ||
        (j == FIT_PHI12 && (lo < -360 || hi > 360))) {
        cli_say("--range %s is absurd (C10 within +-1e4 nm, C12 within 0..1e4 nm, phi12 within +-360 deg)", s);
        return -1;
    }
    p->lo[j] = lo;
    p->hi[j] = hi;
    return 0;
}

static int parse_lock(const char *s, ssb4d_fit_params *p)
{
    char buf[64];
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int j = param_index(t);
        if (j < 0) {
            cli_say("--lock takes C10, C12 and/or phi12; got '%s'", t);
            return -1;
        }
        p->locked[j] = 1;
    }
    return 0;
}

static int parse_rect(const char *s, size_t r[4])
{
    unsigned long long v[4];
    int n = 0;
    if (sscanf(s, "%llu:%llu,%llu:%llu%n", &v[0], &v[1], &v[2], &v[3], &n) != 4 || s[n] ||
        strchr(s, '-'))
        return -1;
    for (int i = 0; i < 4; i++)
        r[i] = (size_t)v[i];
    return 0;
}

typedef struct {
    const char *cmd;           /* "fit", "demo" or "fit-regions" */
    const char *data;          /* NULL: the built-in dataset */
    const char *out_dir;
    int force, verbose, tilt, upsample, upsample_auto;
    int out_given;             /* -o DIR was given (demo: its own folder is replaced only without) */
    char out_buf[4096];        /* DIR without trailing slashes: paths and lines never show "//" */
    int has_region;
    size_t region[4];
    int created_dir;           /* the output folder was made by this run */
    size_t grid[2];            /* fit-regions */
    char *regions_list;        /* fit-regions: "R0:R1,C0:C1;..." */
    int rotation_per_region;   /* fit-regions: each region keeps its own rotation (no settling region) */
    double start[3];           /* --start */
    int start_given;
    ssb4d_fit_params fp;
    cli_micro m;
} fit_opts;

/* One of the options of fit's own (not the table's, not the shared ones): 0, or the exit code. */
static int own_option(fit_opts *o, int c, char **argv)
{
    int is_regions = !strcmp(o->cmd, "fit-regions"), n = 0;
    switch (c) {
    case 'o': o->out_dir = optarg, o->out_given = 1; return 0;
    case OPT_RANGE: return parse_range(optarg, &o->fp) ? CLI_EXIT_USAGE : 0;
    case OPT_LOCK: return parse_lock(optarg, &o->fp) ? CLI_EXIT_USAGE : 0;
    case OPT_START:
        if (sscanf(optarg, "%lf,%lf,%lf%n", &o->start[0], &o->start[1], &o->start[2], &n) != 3 || optarg[n] ||
            !isfinite(o->start[0]) || !isfinite(o->start[1]) || !isfinite(o->start[2])) {
            fprintf(stderr, "ssb4d %s: --start must be C10,C12,PHI12 (nm, nm, deg); got '%s'\n", o->cmd, optarg);
            return CLI_EXIT_USAGE;
        }
        o->start_given = 1;
        return 0;
    case OPT_REGION:
        if (is_regions || parse_rect(optarg, o->region)) {
            fprintf(stderr, "ssb4d %s: --region must be R0:R1,C0:C1 (scan rows and columns, half-open)%s\n", o->cmd,
                    is_regions ? "; fit-regions takes --grid or --regions" : "");
            return CLI_EXIT_USAGE;
        }
        o->has_region = 1;
        return 0;
    case OPT_GRID: {
        unsigned long long a, b;
        if (!is_regions || sscanf(optarg, "%llux%llu%n", &a, &b, &n) != 2 || optarg[n] || !a || !b || a > 64 ||
            b > 64 || strchr(optarg, '-')) {
            fprintf(stderr, "ssb4d %s: --grid must be RxC with 1..64 each (fit-regions only)\n", o->cmd);
            return CLI_EXIT_USAGE;
        }
        o->grid[0] = (size_t)a, o->grid[1] = (size_t)b;
        return 0;
    }
    case OPT_REGIONS:
        if (!is_regions) {
            fprintf(stderr, "ssb4d %s: --regions belongs to fit-regions\n", o->cmd);
            return CLI_EXIT_USAGE;
        }
        o->regions_list = optarg;
        return 0;
    case OPT_ROTATION_PER_REGION:
        if (!is_regions) {
            fprintf(stderr, "ssb4d %s: --rotation-per-region belongs to fit-regions\n", o->cmd);
            return CLI_EXIT_USAGE;
        }
        o->rotation_per_region = 1;
        return 0;
    case ':': fprintf(stderr, "ssb4d %s: option %s needs a value\n", o->cmd, argv[optind - 1]); return CLI_EXIT_USAGE;
    default:
        fprintf(stderr, "ssb4d %s: unknown option '%s' (see --help)\n", o->cmd, argv[optind - 1]);
        return CLI_EXIT_USAGE;
    }
}

/* The start point from --start and --c10/--c12/--phi12 (one: NaN where not given), the locks,
 * and the start inside the box: 0, or the exit code. */
static int settle_start(fit_opts *o, const ssb4d_aberrations *one)
{
    if (o->start_given) {
        memcpy(o->fp.start, o->start, sizeof o->start);
        o->fp.start_given = 1;
    }
    /* --c10, --c12, --phi12: start values as reconstruct takes them (φ12 in the scan frame, as
     * --start's), each over its part of --start, wherever they stand on the command line. */
    const double given[3] = {one->C_nm[SSB4D_C10], one->C_nm[SSB4D_C12], one->phi_deg[SSB4D_C12]};
    for (int j = 0; j < 3; j++)
        if (!isnan(given[j])) {
            o->fp.start[j] = given[j];
            o->fp.start_given = 1;
        }
    /* A locked parameter is held at the start value (--start, default 0,5,0), and the search
     * then starts there too: ssb4d_fit narrows its box around the parallax estimate without
     * keeping a locked start inside it (it would refuse the start), so locks use the whole box. */
    if (o->fp.locked[0] || o->fp.locked[1] || o->fp.locked[2])
        o->fp.start_given = 1;
    for (int j = 0; j < 3; j++)
        if (!(o->fp.lo[j] <= o->fp.start[j] && o->fp.start[j] <= o->fp.hi[j])) {
            static const char *nm[3] = {"C10", "C12", "phi12"};
            fprintf(stderr, "ssb4d %s: the start value %g of %s lies outside its range %g:%g (use --start or --range)\n",
                    o->cmd, o->fp.start[j], nm[j], o->fp.lo[j], o->fp.hi[j]);
            return CLI_EXIT_USAGE;
        }
    return 0;
}

/* DATA and the options that exclude each other, per command: 0, or the exit code. */
static int check_args(fit_opts *o, int argc, char **argv)
{
    int is_demo = !strcmp(o->cmd, "demo"), is_regions = !strcmp(o->cmd, "fit-regions");
    int nargs = argc - optind;
    if (is_demo ? nargs != 0 : is_regions ? nargs != 1 : nargs > 1) {
        fprintf(stderr, "ssb4d %s: %s (see --help)\n", o->cmd,
                is_demo ? "takes no DATA" : is_regions ? "expected exactly one DATA file" : "expected at most one DATA file");
        return CLI_EXIT_USAGE;
    }
    o->data = nargs ? argv[optind] : NULL;
    o->out_dir = cli_dir_text(o->out_buf, sizeof o->out_buf, o->out_dir);
    if (is_regions && !o->grid[0] && !o->regions_list) {
        fprintf(stderr, "ssb4d fit-regions: give --grid RxC or --regions LIST\n");
        return CLI_EXIT_USAGE;
    }
    if (!o->data && !is_regions && (o->m.calibration_path || o->m.sidecar_path)) {
        fprintf(stderr, "ssb4d %s: --%s applies to DATA; the built-in dataset has its own microscope values\n",
                o->cmd, o->m.calibration_path ? "calibration" : "sidecar");
        return CLI_EXIT_USAGE;
    }
    if (is_regions && o->tilt) {
        fprintf(stderr, "ssb4d fit-regions: --tilt is not supported per region; use fit --region --tilt\n");
        return CLI_EXIT_USAGE;
    }
    return 0;
}

/* Parses argv for all three commands; returns -1 to exit 0 (help), or an exit code > 0, or 0. */
static int parse(int argc, char **argv, fit_opts *o)
{
    struct option opts[64] = {
        CLI_MICROSCOPE_OPTIONS,
        CLI_BACKEND_OPTION,
        {"range", required_argument, 0, OPT_RANGE},
        {"lock", required_argument, 0, OPT_LOCK},
        {"start", required_argument, 0, OPT_START},
        {"region", required_argument, 0, OPT_REGION},
        {"grid", required_argument, 0, OPT_GRID},
        {"regions", required_argument, 0, OPT_REGIONS},
        {"rotation-per-region", no_argument, 0, OPT_ROTATION_PER_REGION},
        {"tilt", no_argument, &o->tilt, 1},
        {"force", no_argument, &o->force, 1},
        {"verbose", no_argument, &o->verbose, 1},
        {"output", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},
    };
    size_t n_opts = 0;
    while (opts[n_opts].name)
        n_opts++;
    /* The table's: the search's values, --c10/--c12/--phi12 (start values, into one) and --upsample. */
    cli_param_options(opts, &n_opts, 64, SSB4D_OP_FIT, FIT_TABLE_SEARCH);
    cli_param_options(opts, &n_opts, 64, SSB4D_OP_FIT, FIT_TABLE_TAIL);
    cli_param_options(opts, &n_opts, 64, SSB4D_OP_ABERRATIONS, (const char *const[]){"c10", "c12", "phi12", NULL});
    cli_param_options(opts, &n_opts, 64, SSB4D_OP_PREVIEW, (const char *const[]){"upsample", NULL});
    ssb4d_aberrations one; /* --c10, --c12, --phi12: NaN while not given */
    one.C_nm[SSB4D_C10] = one.C_nm[SSB4D_C12] = one.phi_deg[SSB4D_C12] = NAN;
    ssb4d_preview_req up;
    ssb4d_preview_req_default(&up);
    up.upsample = o->upsample;
    void *const targets[SSB4D_OP_COUNT] = {[SSB4D_OP_FIT] = &o->fp, [SSB4D_OP_ABERRATIONS] = &one,
                                           [SSB4D_OP_PREVIEW] = &up};
    optind = 1;
    opterr = 0;
    int c, rc;
    while ((c = getopt_long(argc, argv, ":o:hq", opts, NULL)) != -1) {
        int r = c ? cli_micro_handle(&o->m, c, optarg) : 1; /* 0: a flag getopt set */
        if (!r)
            r = cli_param_handle(c, optarg, targets);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        if (c == 'h') {
            (!strcmp(o->cmd, "demo") ? usage_demo : !strcmp(o->cmd, "fit-regions") ? usage_regions : usage_fit)(stdout);
            return -1;
        }
        if ((rc = own_option(o, c, argv)))
            return rc;
    }
    o->upsample_auto = up.upsample == 0;
    if (up.upsample)
        o->upsample = up.upsample;
    return (rc = settle_start(o, &one)) ? rc : check_args(o, argc, argv);
}

/* ---- output folder ----------------------------------------------------------------------------- */

static void join(char *buf, size_t n, const char *dir, const char *name)
{
    cli_join_path(buf, n, dir, name); /* "out/" + "phase.png": out/phase.png */
}

/* Creates DIR if needed; refuses outputs that exist unless --force (before any long work). */
static int prepare_dir(fit_opts *o, const char *const *names, size_t n_names)
{
    if (!cli_is_root()) /* under mpirun, rank 0 writes (cli_mpi.h) */
        return 0;
    struct stat sb;
    if (stat(o->out_dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "ssb4d %s: %s exists and is not a folder\n", o->cmd, o->out_dir);
            return CLI_EXIT_USAGE;
        }
    } else if (mkdir(o->out_dir, 0777) != 0) {
        fprintf(stderr, "ssb4d %s: cannot create the output folder %s: %s\n", o->cmd, o->out_dir, strerror(errno));
        return CLI_EXIT_USAGE;
    } else
        o->created_dir = 1;
    for (size_t i = 0; i < n_names && !o->force; i++) {
        char p[4096];
        join(p, sizeof p, o->out_dir, names[i]);
        if (stat(p, &sb) == 0) {
            fprintf(stderr, "ssb4d %s: %s already exists (use --force to replace it, or -o DIR)\n", o->cmd, p);
            return CLI_EXIT_USAGE;
        }
    }
    return 0;
}

/* A run that failed leaves no empty output folder behind (rmdir removes only an empty one). */
static void remove_if_empty(const fit_opts *o)
{
    if (o->created_dir)
        rmdir(o->out_dir);
}

/* ---- what the fit found, for the summary, the JSON and the calibration file ------------------ */

/* How the rotation was obtained, in words. */
static void rotation_label(const ssb4d_fit_params *fp, const ssb4d_fit_result *r, const cli_session *j, char *buf, size_t n)
{
    if (fp->rotation_given) {
        snprintf(buf, n, "given: %s", j->v.rotation_from[0] ? j->v.rotation_from : "stated");
        return;
    }
    const char *obj = fp->objective == SSB4D_FIT_OBJ_LOSS ? "the exact loss" : "the band objective";
    if (!strcmp(r->rotation_source, "parallax"))
        snprintf(buf, n, "fitted from the parallax and %s", obj);
    else if (!strcmp(r->rotation_source, "centre of mass"))
        snprintf(buf, n, "fitted from the centre of mass and %s", obj);
    else
        snprintf(buf, n, "fitted with %s; neither the parallax nor the centre of mass determined it", obj);
    if (r->branch_flipped) {
        size_t k = strlen(buf);
        snprintf(buf + k, n - k, ", then +180 deg by the branch check");
    }
}

static const char *rotation_source_key(const ssb4d_fit_params *fp, const ssb4d_fit_result *r)
{
    return fp->rotation_given ? "given" : r->rotation_source;
}

static cJSON *parallax_json(const ssb4d_fit_result *r)
{
    if (!r->parallax_ok)
        return cJSON_CreateNull();
    const ssb4d_parallax *p = &r->parallax;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "C10_nm", cli_json_num(p->C10_nm));
    cJSON_AddItemToObject(o, "C12_nm", cli_json_num(p->C12_nm));
    cJSON_AddItemToObject(o, "phi12_scan_deg", cli_json_num(p->phi12_deg));
    cJSON_AddItemToObject(o, "rotation_deg", cli_json_num(p->rotation_deg));
    cJSON *sg = cJSON_AddObjectToObject(o, "sigma");
    static const char *keys[4] = {"C10_nm", "C12_nm", "phi12_deg", "rotation_deg"};
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToObject(sg, keys[i], cli_json_num(p->sigma[i]));
    cJSON_AddItemToObject(o, "residual_A", cli_json_num(p->residual_A));
    cJSON_AddItemToObject(o, "seconds", cli_json_num(p->seconds));
    return o;
}

/* The fit's keys of --json (and of regions.json): φ12 in both frames, the rotation and its
 * source, the objective, the branch, the confidence and the parallax estimate. */
static void add_fit_json(cJSON *out, const ssb4d_fit_params *fp, const ssb4d_fit_result *r,
                         const cli_session *j, double phi12_probe_deg, double phi12_scan_deg)
{
    cJSON_AddItemToObject(out, "phi12_probe_deg", cli_json_num(phi12_probe_deg));
    cJSON_AddItemToObject(out, "phi12_scan_deg", cli_json_num(phi12_scan_deg));
    cJSON_AddItemToObject(out, "rotation_deg", cli_json_num(r->geom.rotation_deg));
    cJSON_AddStringToObject(out, "rotation_source", rotation_source_key(fp, r));
    if (fp->rotation_given && j->v.rotation_from[0])
        cJSON_AddStringToObject(out, "rotation_given_by", j->v.rotation_from);
    else
        cJSON_AddNullToObject(out, "rotation_given_by");
    cJSON_AddItemToObject(out, "rotation_sigma_deg", cli_json_num(r->rotation_sigma_deg));
    cJSON_AddBoolToObject(out, "flip", r->geom.flip != 0);
    cJSON_AddStringToObject(out, "flip_source", r->flip_source);
    if (fp->flip_given && j->v.flip_from[0])
        cJSON_AddStringToObject(out, "flip_given_by", j->v.flip_from);
    else
        cJSON_AddNullToObject(out, "flip_given_by");
    cJSON *fo = cJSON_AddArrayToObject(out, "flip_objective");
    cJSON_AddItemToArray(fo, cli_json_num(r->flip_objective[0]));
    cJSON_AddItemToArray(fo, cli_json_num(r->flip_objective[1]));
    cJSON_AddStringToObject(out, "objective", fp->objective == SSB4D_FIT_OBJ_LOSS ? "loss" : "band");
    cJSON_AddItemToObject(out, "objective_value", cli_json_num(r->objective));
    cJSON_AddNumberToObject(out, "objective_n_bf", (double)r->n_fit_bf); /* objective_value's pixels; loss: loss_n_bf */
    cJSON_AddBoolToObject(out, "branch_checked", fp->branch_check != 0);
    cJSON_AddBoolToObject(out, "branch_flipped", r->branch_flipped);
    cJSON_AddItemToObject(out, "skewness", cli_json_num(r->skewness));
    if (isfinite(r->skewness_other))
        cJSON_AddNumberToObject(out, "skewness_other_branch", r->skewness_other);
    /* the library's confidence (SPEC §6.1, §6.3; docs/fit.md): a warning whenever not confident */
    cJSON_AddBoolToObject(out, "confident", r->confident != 0);
    if (r->confident)
        cJSON_AddNullToObject(out, "warning");
    else
        cJSON_AddStringToObject(out, "warning", r->warning);
    cJSON_AddItemToObject(out, "loss_contrast", cli_json_num(r->loss_contrast));
    cJSON_AddItemToObject(out, "parallax", parallax_json(r));
}

/* The summary's lines from the rotation to the branch (after the fitted values): plain words;
 * the parallax estimate, the objective's value and the branch check's skewness with --verbose. */
static void print_fit_summary(const fit_opts *o, const ssb4d_fit_params *fp, const ssb4d_fit_result *r,
                              const cli_session *j, size_t n_bf, int thick)
{
    char lab[160];
    rotation_label(fp, r, j, lab, sizeof lab);
    char pm[40] = "";
    if (isfinite(r->rotation_se_deg))
        snprintf(pm, sizeof pm, " \u00b1 %.2f deg", r->rotation_se_deg);
    printf("rotation     %9.3f deg%s (%s)\n", r->geom.rotation_deg, pm, lab);
    if (!strcmp(r->flip_source, "given"))
        printf("detector     %s (given: %s)\n", r->geom.flip ? "mirrored" : "not mirrored",
               j->v.flip_from[0] ? j->v.flip_from : "stated");
    else if (!strcmp(r->flip_source, "objective"))
        printf("detector     %s (the band objective preferred it: %.4g against %.4g mirrored the other way)\n",
               r->geom.flip ? "mirrored" : "not mirrored", r->flip_objective[r->geom.flip],
               r->flip_objective[!r->geom.flip]);
    else
        printf("detector     %s (%s)\n", r->geom.flip ? "mirrored" : "not mirrored",
               !strcmp(r->flip_source, "centre of mass") ? "from the centre of mass"
               : !strcmp(r->flip_source, "assumed") ? "assumed: not tested with a given start or locks"
                                                    : "undetermined, see the warning");
    if (o->verbose && r->parallax_ok) {
        const ssb4d_parallax *p = &r->parallax;
        printf("parallax     C10 %.2f +- %.2f nm, C12 %.2f +- %.2f nm, phi12 %.1f +- %.1f deg (scan frame), rotation "
               "%.2f +- %.2f deg; residual %.3f A, %.2f s\n", p->C10_nm, p->sigma[0], p->C12_nm, p->sigma[1],
               p->phi12_deg, p->sigma[2], p->rotation_deg, p->sigma[3], p->residual_A, p->seconds);
    } else if (o->verbose)
        printf("parallax     no estimate (no shift measured): the search covered the whole box\n");
    if (o->verbose) {
        char on[96];
        snprintf(on, sizeof on, "over the %zu fit pixels (BF pixels within %g x the selection radius)", r->n_fit_bf,
                 fp->fit_radius);
        if (fp->objective == SSB4D_FIT_OBJ_LOSS)
            printf("objective    exact loss %.8g %s, contrast %.3g\n", r->objective, on, r->loss_contrast);
        else
            printf("objective    band: %.2f %% of the band's power explained %s, contrast %.3g\n",
                   -100.0 * r->objective, on, r->loss_contrast);
    }
    printf("loss         %.8g (exact SSB loss over all %zu BF pixels%s)\n", r->loss, n_bf,
           thick ? ", of the standard fit's thin model" : "");
    /* The branch: a thin specimen's atoms are positive phase peaks (a positive skewness of the
     * phase); the numbers only with --verbose. */
    char num[128] = "";
    if (o->verbose && fp->branch_check && isfinite(r->skewness_other))
        snprintf(num, sizeof num, " (phase skewness %+.3f, %+.3f on the other branch; positive on the right one)",
                 r->skewness, r->skewness_other);
    else if (o->verbose && fp->branch_check)
        snprintf(num, sizeof num, " (phase skewness %+.3f; positive on the right branch)", r->skewness);
    if (!fp->branch_check)
        printf("branch       not checked (--no-branch-check)\n");
    else if (fp->rotation_given)
        /* the library's three verdicts (fit/standard.c): negative peaks, no clear peaks, clear
         * positive peaks; the first two come with its warning */
        printf("branch       checked, not flipped (the rotation was given): %s%s\n",
               r->skewness < SSB4D_FIT_SKEW_WRONG      ? "atoms show as negative phase peaks, see the warning"
               : r->skewness < SSB4D_FIT_SKEW_SETTLED ? "atoms do not show clearly as positive phase peaks, "
                                                        "see the warning"
                                                      : "atoms show as positive phase peaks, as they should",
               num);
    else {
        /* below SSB4D_FIT_SKEW_SETTLED the sign does not settle the branch (thick crystals) */
        if (fabs(r->skewness) < SSB4D_FIT_SKEW_SETTLED)
            printf("branch       %s, but uncertain: the phase does not show the atoms clearly as positive peaks, "
                   "see the warning%s\n", r->branch_flipped ? "flipped by 180 deg" : "kept", num);
        else if (r->branch_flipped)
            printf("branch       flipped by 180 deg: atoms showed as negative phase peaks on the first branch, "
                   "positive on the kept one%s\n", num);
        else
            printf("branch       kept: atoms show as positive phase peaks%s\n", num);
    }
}

/* ---- outputs ----------------------------------------------------------------------------------- */

static cJSON *trials_json(const ssb4d_fit_result *r)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < r->n_trials; i++) {
        const ssb4d_fit_trial *t = &r->trials[i];
        cJSON *e = cJSON_CreateObject();
        static const char *stages[] = {"global", "nelder-mead", "nelder-mead-full", "branch"};
        cJSON_AddStringToObject(e, "stage", t->stage >= 0 && t->stage < 4 ? stages[t->stage] : "?");
        cJSON_AddNumberToObject(e, "number", (double)t->number);
        cJSON_AddNumberToObject(e, "C10_nm", t->C10_nm);
        cJSON_AddNumberToObject(e, "C12_nm", t->C12_nm);
        cJSON_AddNumberToObject(e, "phi12_deg", t->phi12_deg);
        cJSON_AddNumberToObject(e, "loss", t->loss);
        if (t->cached)
            cJSON_AddTrueToObject(e, "cached");
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

static ssb4d_status write_json_file(const char *path, cJSON *o, ssb4d_err *err)
{
    char *s = cJSON_Print(o);
    if (!s)
        return ssb4d_err_set(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = ssb4d_write_text_atomic(path, s, err);
    free(s);
    return st;
}

static void add_ab(cJSON *o, const double x[3])
{
    cJSON_AddNumberToObject(o, "C10_nm", x[0]);
    cJSON_AddNumberToObject(o, "C12_nm", x[1]);
    cJSON_AddNumberToObject(o, "phi12_deg", x[2]);
}

/* ---- fit and demo ------------------------------------------------------------------------------ */


/* What one fit produced: the fit, the tilt fit, the image and the time of each step. */
typedef struct {
    ssb4d_fit_params fp;      /* as the fit ran (rotation held or searched) */
    ssb4d_fit_result r;
    ssb4d_tilt_result tr;
    int have_tilt;
    ssb4d_aberrations ab;     /* the image's: the tilt fit's where it ran */
    ssb4d_thick thick;
    float *phase, *object;
    size_t ny, nx;            /* the image's shape (upsampled) */
    int up;
    double t_build, t_fit, t_tilt, t_image;
    size_t g_bytes, n_bf, n_stored, n_resident;
} fit_run;

/* The session's steps: G, the fit, [--tilt], the image. Returns the first failure. */
static ssb4d_status fit_compute(const fit_opts *o, cli_session *cs, fit_run *run, ssb4d_err *err)
{
    ssb4d_session *s = cs->s;
    ssb4d_mem *mem = ssb4d_session_mem(s);
    size_t n = run->ny * run->nx;
    /* The outputs first: they stay live to the end, as the plan counted them (beside the data). */
    run->phase = ssb4d_mem_alloc(mem, n * sizeof(float), "the phase image", err);
    run->object = run->phase ? ssb4d_mem_alloc(mem, 2 * n * sizeof(float), "the complex object", err) : NULL;
    if (!run->object)
        return err->code;
    cli_session_bar(cs, "G build");
    ssb4d_status st = ssb4d_session_build(s, err);
    run->t_build = cli_session_bar_done(cs);
    ssb4d_session_G_info(s, &run->g_bytes, &run->n_bf, &run->n_stored, &run->n_resident);
    if (!st) {
        cli_session_bar(cs, "fit");
        st = ssb4d_session_fit(s, &o->fp, &run->r, err);
        run->t_fit = cli_session_bar_done(cs);
    }
    if (!st && o->tilt) {
        cli_session_bar(cs, "tilt fit");
        st = ssb4d_session_fit_tilt(s, &run->tr, err);
        run->t_tilt = cli_session_bar_done(cs);
        run->have_tilt = !st;
    }
    ssb4d_session_get(s, &run->ab, &run->thick, NULL);
    /* The image, exactly as `reconstruct --calibration DIR/calibration.json` computes it. */
    if (!st) {
        cli_session_bar(cs, "image");
        st = ssb4d_session_object(s, run->up, run->object, run->phase, err);
        run->t_image = cli_session_bar_done(cs);
    }
    return st;
}

/* What the detector sampling's uncertainty does to C10 and C12 (docs/fit.md "Standard errors"):
 * the data fix the product of an aberration and the angle of each detector pixel (a BF pixel's
 * image moves by C10·α, α = sampling × its distance in px), so C ∝ 1/sampling for C10 and C12:
 * δC = |C|·δs/s. The fit's own ± leave this out. */
typedef struct {
    double s, sigma;   /* the sampling used (mrad/px) and its standard error (NaN: stated, none) */
    int measured;      /* the measured sampling is the one used */
    double per_pct[2]; /* |C10|, |C12| × 1 % (nm) */
    double contrib[2]; /* |C| σ/s (nm; NaN without σ) */
} sampling_effect;

static sampling_effect sampling_effect_of(const cli_session *cs, const double x[2])
{
    sampling_effect e = {NAN, NAN, 0, {NAN, NAN}, {NAN, NAN}};
    const ssb4d_calibration *c = ssb4d_session_calibration(cs->s);
    if (!c)
        return e;
    e.s = 0.5 * (c->geom.det_sampling_mrad[0] + c->geom.det_sampling_mrad[1]);
    e.measured = c->det_sampling_fitted;
    e.sigma = e.measured ? c->det_sampling_measured_sigma_mrad : NAN;
    for (int i = 0; i < 2; i++) {
        e.per_pct[i] = 0.01 * fabs(x[i]);
        e.contrib[i] = fabs(x[i]) * e.sigma / e.s;
    }
    return e;
}

/* DIR/phase.tiff, phase.png, object.npy, calibration.json and trials.json. */
static ssb4d_status fit_write(const fit_opts *o, const cli_session *cs, const fit_run *run, ssb4d_err *err)
{
    const ssb4d_fit_result *r = &run->r;
    char path[4096];
    double pixel[2] = {r->geom.scan_step_A[0] / run->up, r->geom.scan_step_A[1] / run->up};
    size_t oshape[2] = {run->ny, run->nx};
    join(path, sizeof path, o->out_dir, "phase.tiff");
    ssb4d_status st = cli_write_image(path, run->phase, run->ny, run->nx, pixel, err);
    join(path, sizeof path, o->out_dir, "phase.png");
    if (!st)
        st = cli_write_image(path, run->phase, run->ny, run->nx, pixel, err);
    join(path, sizeof path, o->out_dir, "object.npy");
    if (!st)
        st = ssb4d_npy_save(path, "<c8", 2, oshape, run->object, err);
    /* The library's file, the one Python's save_calibration and the viewer's Save write. */
    join(path, sizeof path, o->out_dir, "calibration.json");
    if (!st)
        st = ssb4d_session_save_calibration(cs->s, path, 1, err);
    if (st)
        return st;
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "trace_sha256", r->trace_sha256);
    cJSON_AddNumberToObject(t, "seed", (double)o->fp.seed);
    cJSON_AddNumberToObject(t, "evaluations", (double)r->evaluations);
    /* With the rotation searched the trials' phi12 is in the probe frame (the search's
     * coordinate, the rotation being a fourth parameter); else in the scan frame. */
    cJSON_AddStringToObject(t, "phi12_frame", run->fp.rotation_given ? "scan" : "probe");
    /* A trial's "loss" is the searched objective's value: on the coarse subset of the BF
     * pixels in the global stage and its Nelder-Mead, on the fit pixels after. */
    cJSON_AddStringToObject(t, "objective", run->fp.objective == SSB4D_FIT_OBJ_LOSS ? "loss" : "band");
    cJSON_AddNumberToObject(t, "n_coarse_bf", (double)r->n_coarse_bf);
    cJSON_AddNumberToObject(t, "n_fit_bf", (double)r->n_fit_bf);
    cJSON_AddItemToObject(t, "trials", trials_json(r));
    join(path, sizeof path, o->out_dir, "trials.json");
    st = write_json_file(path, t, err);
    cJSON_Delete(t);
    return st;
}

static void fit_print_json(const fit_opts *o, const cli_session *cs, const fit_run *run, double seconds)
{
    const ssb4d_fit_result *r = &run->r;
    const ssb4d_plan *plan = ssb4d_session_plan(cs->s);
    ssb4d_mem *mem = ssb4d_session_mem(cs->s);
    double x[3] = {run->ab.C_nm[SSB4D_C10], run->ab.C_nm[SSB4D_C12], run->ab.phi_deg[SSB4D_C12]};
    cJSON *out = cJSON_CreateObject();
    add_ab(out, x);
    add_fit_json(out, &run->fp, r, cs, run->have_tilt ? ssb4d_phi12_to_probe(&r->geom, x[2]) : r->phi12_probe_deg, x[2]);
    /* the standard fit's standard errors (null: not fitted, undetermined, or the thick model's values) */
    cJSON *se = cJSON_AddObjectToObject(out, "standard_errors");
    const double sev[4] = {r->C10_se_nm, r->C12_se_nm, r->phi12_se_deg, r->rotation_se_deg};
    static const char *se_keys[4] = {"C10_nm", "C12_nm", "phi12_deg", "rotation_deg"};
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToObject(se, se_keys[i], run->have_tilt ? cJSON_CreateNull() : cli_json_num(sev[i]));
    /* the standard errors leave the calibration out; the detector sampling's share, separately */
    cJSON_AddBoolToObject(se, "include_calibration", 0);
    sampling_effect ss = sampling_effect_of(cs, x);
    cJSON *cu = cJSON_AddObjectToObject(out, "sampling_uncertainty");
    cJSON_AddItemToObject(cu, "det_sampling_mrad", cli_json_num(ss.s));
    cJSON_AddStringToObject(cu, "det_sampling_source", ss.measured ? "measured" : "stated");
    cJSON_AddItemToObject(cu, "det_sampling_sigma_mrad", cli_json_num(ss.sigma));
    cJSON_AddItemToObject(cu, "C10_nm", cli_json_num(ss.contrib[0]));
    cJSON_AddItemToObject(cu, "C12_nm", cli_json_num(ss.contrib[1]));
    cJSON_AddItemToObject(cu, "C10_nm_per_percent", cli_json_num(ss.per_pct[0]));
    cJSON_AddItemToObject(cu, "C12_nm_per_percent", cli_json_num(ss.per_pct[1]));
    cJSON_AddNumberToObject(out, "loss", r->loss);
    cJSON_AddNumberToObject(out, "loss_n_bf", (double)run->n_bf);
    cJSON_AddNumberToObject(out, "n_bf", (double)run->n_bf);
    cJSON_AddNumberToObject(out, "n_fit_bf", (double)r->n_fit_bf);
    cJSON_AddNumberToObject(out, "n_coarse_bf", (double)r->n_coarse_bf);
    cJSON_AddNumberToObject(out, "evaluations", (double)r->evaluations);
    cJSON_AddNumberToObject(out, "nm_iterations", r->nm_iterations);
    cJSON_AddStringToObject(out, "trace_sha256", r->trace_sha256);
    if (run->have_tilt) {
        const ssb4d_thick *th = &run->thick;
        cJSON *t = cJSON_AddArrayToObject(out, "tilt_mrad");
        cJSON_AddItemToArray(t, cJSON_CreateNumber(th->tilt_mrad[0]));
        cJSON_AddItemToArray(t, cJSON_CreateNumber(th->tilt_mrad[1]));
        double tp[2];
        ssb4d_vector_to_probe(&r->geom, th->tilt_mrad, tp);
        t = cJSON_AddArrayToObject(out, "tilt_probe_mrad");
        cJSON_AddItemToArray(t, cJSON_CreateNumber(tp[0]));
        cJSON_AddItemToArray(t, cJSON_CreateNumber(tp[1]));
        cJSON_AddNumberToObject(out, "thickness_nm", th->thickness_nm);
        cJSON_AddNumberToObject(out, "gain", run->tr.gain);
        cJSON_AddNumberToObject(out, "tilt_evaluations", (double)run->tr.evaluations);
    }
    if (o->has_region) {
        cJSON *rg = cJSON_AddArrayToObject(out, "region");
        for (int i = 0; i < 4; i++)
            cJSON_AddItemToArray(rg, cJSON_CreateNumber((double)o->region[i]));
    }
    if (!o->data) {
        cJSON *t = cJSON_AddObjectToObject(out, "truth");
        add_ab(t, cs->truth);
        cJSON_AddStringToObject(t, "phi12_frame", "probe");
    }
    cJSON_AddNumberToObject(out, "seconds", seconds);
    cJSON_AddNumberToObject(out, "g_build_seconds", run->t_build);
    cJSON_AddNumberToObject(out, "fit_seconds", run->t_fit);
    if (run->have_tilt)
        cJSON_AddNumberToObject(out, "tilt_seconds", run->t_tilt);
    cJSON_AddNumberToObject(out, "image_seconds", run->t_image);
    cJSON_AddNumberToObject(out, "peak_tracked_bytes", (double)ssb4d_mem_peak(mem));
    cJSON_AddNumberToObject(out, "peak_rss_bytes", (double)ssb4d_rss_peak());
    cJSON_AddNumberToObject(out, "g_bytes", (double)run->g_bytes);
    cJSON_AddNumberToObject(out, "memory_bytes", (double)cs->budget);
    cJSON_AddStringToObject(out, "g_mode", run->n_resident < run->n_stored ? "streaming" : "resident");
    cJSON_AddNumberToObject(out, "n_resident", (double)run->n_resident);
    cJSON_AddNumberToObject(out, "min_memory_bytes", (double)plan->min_memory_bytes);
    cJSON_AddNumberToObject(out, "resident_memory_bytes", (double)plan->resident_memory_bytes);
    cJSON_AddNumberToObject(out, "planned_peak_bytes", (double)plan->session_peak_bytes); /* this rank's */
    cJSON_AddStringToObject(out, "backend", ssb4d_session_backend(cs->s));
    cJSON_AddStringToObject(out, "output_dir", o->out_dir);
    ssb4d_json_exact(out); /* Python's numbers, to the last bit */
    char *str = cJSON_PrintUnformatted(out);
    printf("%s\n", str);
    free(str);
    cJSON_Delete(out);
}

/* " ± 0.045 nm" for a standard error, " ± ? (no minimum on the pixel groups)" for an infinite one,
 * nothing for none (a held value). */
static void se_text(char *buf, size_t n, double se, const char *unit)
{
    if (isfinite(se))
        snprintf(buf, n, " \u00b1 %.*f %s", strcmp(unit, "nm") ? 2 : 3, se, unit);
    else if (isinf(se))
        snprintf(buf, n, " \u00b1 ? (undetermined)");
    else
        buf[0] = 0;
}

static void fit_print_text(const fit_opts *o, const cli_session *cs, const fit_run *run, double seconds)
{
    const ssb4d_fit_result *r = &run->r;
    int builtin = !o->data;
    double x[3] = {run->ab.C_nm[SSB4D_C10], run->ab.C_nm[SSB4D_C12], run->ab.phi_deg[SSB4D_C12]};
    printf("data         %s (%zux%zu scan, %zux%zu detector)%s\n", o->data ? o->data : "built-in simulation",
           cs->shape[0], cs->shape[1], cs->shape[2], cs->shape[3], builtin ? ", SrTiO3 300 kV, 1 unit cell" : "");
    if (o->has_region)
        printf("region       rows %zu:%zu, cols %zu:%zu (full-field calibration)\n", o->region[0], o->region[1],
               o->region[2], o->region[3]);
    /* The built-in dataset's C10 truth is at the mean depth of the simulator's potential planes. */
    printf("%-12s %12s%s\n", "", "fit", !builtin ? "" : o->verbose ? "        truth (C10 at the mean plane depth)"
                                                                   : "        truth");
    static const char *names[2] = {"C10", "C12"};
    const double se[3] = {r->C10_se_nm, r->C12_se_nm, r->phi12_se_deg};
    char pm[3][40];
    for (int i = 0; i < 3; i++) /* the standard fit's standard errors; none for the thick model's values */
        se_text(pm[i], sizeof pm[i], run->have_tilt ? NAN : se[i], i < 2 ? "nm" : "deg");
    for (int i = 0; i < 2; i++) {
        printf("%-12s %9.3f nm%s", names[i], x[i], pm[i]);
        if (builtin)
            printf("    %9.3f nm", cs->truth[i]);
        printf("\n");
    }
    double probe = run->have_tilt ? ssb4d_phi12_to_probe(&r->geom, x[2]) : r->phi12_probe_deg;
    printf("%-12s %9.3f deg (probe/detector frame), %.3f deg (scan frame)%s", "phi12", probe, x[2], pm[2]);
    if (builtin)
        printf("; truth %.3f deg (detector frame)", cs->truth[2]);
    printf("\n");
    sampling_effect se_s = sampling_effect_of(cs, x);
    if (isfinite(se_s.s)) {
        printf("%-12s the +- are the fit's alone, without the calibration's uncertainty. The sampling,\n", "");
        if (isfinite(se_s.contrib[0]))
            printf("%-12s %.5f +- %.5f mrad/px (measured), adds +- %.3f nm to C10, +- %.3f nm to C12\n", "", se_s.s,
                   se_s.sigma, se_s.contrib[0], se_s.contrib[1]);
        else
            printf("%-12s %.5f mrad/px (%s), moves C10 by %.3f nm and C12 by %.3f nm per 1 %%\n", "", se_s.s,
                   se_s.measured ? "measured" : "stated", se_s.per_pct[0], se_s.per_pct[1]);
    }
    print_fit_summary(o, &run->fp, r, cs, run->n_bf, run->have_tilt);
    if (run->have_tilt) {
        const ssb4d_thick *th = &run->thick;
        double tp[2];
        ssb4d_vector_to_probe(&r->geom, th->tilt_mrad, tp);
        printf("thick model  tilt (%.2f, %.2f) mrad (scan frame), (%.2f, %.2f) mrad (probe/detector frame), "
               "thickness %.1f nm", th->tilt_mrad[0], th->tilt_mrad[1], tp[0], tp[1], th->thickness_nm);
        if (o->verbose)
            printf(", gain %.4f", run->tr.gain);
        printf(" (C10, C12, phi12 above are the thick model's)\n");
    }
    char b[32];
    size_t peak = ssb4d_mem_peak(ssb4d_session_mem(cs->s));
    if (o->verbose) {
        printf("search       %zu evaluations, %d Nelder-Mead iterations, seed %llu, trace %.16s\n", r->evaluations,
               r->nm_iterations, (unsigned long long)o->fp.seed, r->trace_sha256);
        printf("time         %.2f s (G build %.2f s, fit %.2f s, ", seconds, run->t_build, run->t_fit);
        if (run->have_tilt)
            printf("tilt fit %.2f s, ", run->t_tilt);
        printf("image %.2f s)\n", run->t_image);
        /* one unit for every size of the line */
        size_t rss = ssb4d_rss_peak(), big = peak; /* the measured sizes' unit (the budget's too) */
        big = run->g_bytes > big ? run->g_bytes : big;
        big = rss > big ? rss : big;
        char p[32], g[32], q[32];
        printf("memory       peak %s tracked (G %s, %s: %zu of %zu planes held; budget %s), %s process\n",
               cli_job_size_as(p, peak, big, 0), cli_job_size_as(g, run->g_bytes, big, 0),
               run->n_resident < run->n_stored ? "streaming" : "resident", run->n_resident, run->n_stored,
               cli_job_size_as(b, cs->budget, big, 0), cli_job_size_as(q, rss, big, 0));
    } else {
        size_t big = peak; /* the measured peak's unit, the budget's too */
        char p[32];
        printf("time         %.1f s\n", seconds);
        printf("memory       peak %s (budget %s)\n", cli_job_size_as(p, peak, big, 0), cli_job_size_as(b, cs->budget, big, 0));
    }
    printf("backend      %s\n", ssb4d_session_backend(cs->s));
    printf("wrote        %s/phase.tiff, phase.png, object.npy, calibration.json, trials.json\n", o->out_dir);
}

/* The command's session: the fit's plan, the field (--region), the images held to the end. */
static int fit_session_open(fit_opts *o, cli_session *cs, const size_t *refit, int up,
                            const ssb4d_values *values)
{
    cli_session_req rq;
    memset(&rq, 0, sizeof rq);
    rq.data = o->data;
    rq.values = values; /* NULL: the session resolves them (and warns of a contradiction) */
    rq.m = &o->m;
    rq.fit = &o->fp;
    rq.upsample = up;
    rq.image_floats = refit ? 0 : 3; /* the phase and the complex object */
    rq.region = o->has_region ? o->region : NULL;
    if (refit)
        rq.refit_region[0] = refit[0], rq.refit_region[1] = refit[1];
    return cli_session_open(o->cmd, &rq, cs);
}

static int run_fit(fit_opts *o)
{
    static const char *outputs[] = {"phase.tiff", "phase.png", "object.npy", "calibration.json", "trials.json"};
    /* A missing DATA first: before the output folder is made or the microscope resolved. */
    if (o->data && cli_check_readable(o->cmd, o->data))
        return CLI_EXIT_USAGE;
    /* Then a backend that cannot run here, before any note, folder or simulation. */
    int rc = cli_backend_check(o->cmd, o->m.backend, NULL);
    if (!rc)
        rc = cli_auto_calibration(o->cmd, o->data, &o->m, o->m.quiet);
    if (!rc)
        rc = prepare_dir(o, outputs, sizeof outputs / sizeof outputs[0]);
    if (rc)
        return rc;
    cli_progress total;
    cli_progress_start(&total, "total", 1);
    cli_session cs;
    fit_run run;
    memset(&run, 0, sizeof run);
    rc = fit_session_open(o, &cs, NULL, o->upsample_auto ? 0 : o->upsample, NULL);
    if (!rc)
        rc = cli_session_calibrate(&cs);
    if (rc) {
        cli_session_close(&cs);
        remove_if_empty(o);
        return rc;
    }
    ssb4d_err err = {0};
    run.up = o->upsample_auto ? 0 : o->upsample;
    ssb4d_status st = ssb4d_session_image_shape(cs.s, run.up, &run.ny, &run.nx, &err);
    if (!run.up)
        run.up = (int)(run.ny / (o->has_region ? o->region[1] - o->region[0] : cs.shape[0]));
    ssb4d_session_fit_params(cs.s, &o->fp, &run.fp);
    if (!st)
        st = fit_compute(o, &cs, &run, &err);
    if (!st && cli_is_root())
        st = fit_write(o, &cs, &run, &err);
    ssb4d_mem *mem = ssb4d_session_mem(cs.s);
    ssb4d_mem_free(mem, run.phase, 0);
    ssb4d_mem_free(mem, run.object, 0);
    int exit_code = 0;
    if (st) {
        exit_code = cli_session_fail(&cs, st, err.msg);
        remove_if_empty(o);
    } else {
        if (o->m.json)
            fit_print_json(o, &cs, &run, cli_progress_elapsed(&total));
        else
            fit_print_text(o, &cs, &run, cli_progress_elapsed(&total));
        if (!run.r.confident)
            fprintf(stderr, "ssb4d %s: warning: %s\n", o->cmd, run.r.warning);
    }
    if (o->m.memory_report)
        ssb4d_mem_report_print(mem, stderr);
    ssb4d_fit_result_free(&run.r);
    cli_session_close(&cs);
    return exit_code;
}

static void init_opts(fit_opts *o, const char *cmd, const char *out_dir)
{
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->out_dir = out_dir;
    o->upsample = 1;
    ssb4d_fit_params_default(&o->fp);
    cli_micro_init(&o->m);
}

int cmd_fit(int argc, char **argv)
{
    fit_opts o;
    init_opts(&o, "fit", "ssb4d-fit");
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    return run_fit(&o);
}

int cmd_demo(int argc, char **argv)
{
    fit_opts o;
    init_opts(&o, "demo", "ssb4d-demo");
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!o.out_given)
        o.force = 1; /* the demo's own folder: replaced on every run; -o DIR follows --force */
    return run_fit(&o);
}

/* ---- fit-regions -------------------------------------------------------------------------------- */

static int parse_region_list(const fit_opts *o, size_t (**rects)[4], size_t *n)
{
    *n = 0;
    *rects = NULL;
    if (o->grid[0]) { /* the rectangles are filled once the scan shape is known */
        *n = o->grid[0] * o->grid[1];
        *rects = calloc(*n, sizeof **rects);
        return *rects ? 0 : -1;
    }
    char *buf = strdup(o->regions_list);
    if (!buf)
        return -1;
    size_t cap = 1;
    for (const char *p = buf; *p; p++)
        cap += *p == ';';
    *rects = calloc(cap, sizeof **rects);
    int bad = !*rects;
    for (char *t = strtok(buf, ";"); t && !bad; t = strtok(NULL, ";"))
        if (parse_rect(t, (*rects)[(*n)++])) {
            fprintf(stderr, "ssb4d fit-regions: region '%s' is not R0:R1,C0:C1\n", t);
            bad = 1;
        }
    free(buf);
    if (!bad && *n == 0) {
        fprintf(stderr, "ssb4d fit-regions: --regions lists no region\n");
        bad = 1;
    }
    return bad ? -1 : 0;
}

/* fit-regions without a given rotation: the region that settles the 180° branch most clearly
 * sets the rotation and handedness, held for every other region's refit (the library's
 * ssb4d_session_settle_branch; res[i] replaced; *hfp: their fit parameters). *from: that region,
 * n when none settles it (a warning, and each region keeps its own). */
static ssb4d_status hold_branch(const fit_opts *o, cli_session *j, size_t (*rects)[4], ssb4d_fit_result *res,
                                size_t n, size_t *from, ssb4d_fit_params *hfp, ssb4d_err *err)
{
    cli_session_bar(j, "region refit");
    ssb4d_status st = ssb4d_session_settle_branch(j->s, &rects[0][0], n, &o->fp, res, from, err);
    cli_session_bar_done(j);
    if (st)
        return st;
    size_t b = *from;
    if (b == n) {
        fprintf(stderr, "ssb4d fit-regions: warning: no region settles the 180 deg branch (|skewness| >= %.1f on "
                        "none): each keeps the rotation its own fit found; give --rotation or --rotation-from "
                        "(a thin area's fit)\n", SSB4D_FIT_SKEW_SETTLED);
        return SSB4D_OK;
    }
    if (!o->m.quiet && !o->m.json)
        fprintf(stderr, "ssb4d fit-regions: region %zu (rows %zu:%zu, cols %zu:%zu) settles the 180 deg branch "
                        "(skewness %.2f): its rotation %.2f deg%s held for the other regions\n", b + 1, rects[b][0],
                rects[b][1], rects[b][2], rects[b][3], res[b].skewness, res[b].geom.rotation_deg,
                res[b].geom.flip ? " (mirrored detector)" : "");
    ssb4d_session_fit_params(j->s, &o->fp, hfp); /* the session holds the settled rotation now */
    return SSB4D_OK;
}

/* "region R0:R1,C0:C1": how regions.json names the region a rotation was held from. */
static void region_label(char *buf, size_t n, const size_t rect[4])
{
    snprintf(buf, n, "region %zu:%zu,%zu:%zu", rect[0], rect[1], rect[2], rect[3]);
}

/* regions.json's branch_region: the region that set the others' rotation, or null. */
static cJSON *branch_json(size_t (*rects)[4], const ssb4d_fit_result *res, size_t n, size_t from)
{
    if (from >= n)
        return cJSON_CreateNull();
    cJSON *b = cJSON_CreateObject();
    char src[96];
    region_label(src, sizeof src, rects[from]);
    cJSON_AddNumberToObject(b, "index", (double)from);
    cJSON_AddStringToObject(b, "region", src);
    cJSON_AddItemToObject(b, "skewness", cli_json_num(res[from].skewness));
    cJSON_AddItemToObject(b, "rotation_deg", cli_json_num(res[from].geom.rotation_deg));
    cJSON_AddBoolToObject(b, "flip", res[from].geom.flip != 0);
    return b;
}

int cmd_fit_regions(int argc, char **argv)
{
    fit_opts o;
    init_opts(&o, "fit-regions", "ssb4d-regions");
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    size_t (*rects)[4] = NULL, n = 0;
    if (parse_region_list(&o, &rects, &n)) {
        free(rects);
        return CLI_EXIT_USAGE;
    }
    static const char *outputs[] = {"regions.json", "regions.csv", "defocus.png"};
    /* A missing DATA first: before the output folder is made or the microscope resolved. */
    if ((rc = cli_check_readable(o.cmd, o.data)) || (rc = cli_backend_check(o.cmd, o.m.backend, NULL)) ||
        (rc = cli_auto_calibration(o.cmd, o.data, &o.m, o.m.quiet)) ||
        (rc = prepare_dir(&o, outputs, 3))) {
        free(rects);
        return rc;
    }
    ssb4d_err err = {0};
    cli_progress total;
    cli_progress_start(&total, "total", 1);
    cli_session j;
    /* The grid's rectangles once the scan's shape is known; every one is checked before the
     * calibration's long read. One plan for the largest: every region's G is held within it. */
    size_t largest[2] = {0, 0};
    ssb4d_fit_params rfp;
    /* The values once: the session is opened twice (its plan, then the largest region's). */
    ssb4d_values vals;
    if ((rc = cli_resolve(o.data, &o.m, &vals)) || (rc = cli_check_microscope(&vals))) {
        free(rects);
        remove_if_empty(&o);
        return rc;
    }
    for (int pass = 0; pass < 2 && !rc; pass++) {
        if (pass == 0) {
            memset(&j, 0, sizeof j);
            rc = fit_session_open(&o, &j, largest, 1, &vals);
            for (size_t i = 0; i < n && !rc; i++) {
                if (o.grid[0])
                    ssb4d_grid_rect(j.shape, o.grid[0], o.grid[1], i, rects[i]);
                if (ssb4d_session_check_region(j.s, rects[i], &err))
                    rc = cli_error(o.cmd, err.code, err.msg);
                for (int k = 0; k < 2; k++)
                    if (rects[i][2 * k + 1] - rects[i][2 * k] > largest[k])
                        largest[k] = rects[i][2 * k + 1] - rects[i][2 * k];
            }
            cli_session_close(&j); /* reopened with the plan of the largest region */
        } else {
            rc = fit_session_open(&o, &j, largest, 1, &vals);
            if (!rc)
                rc = cli_session_calibrate(&j);
        }
    }
    if (rc) {
        cli_session_close(&j);
        free(rects);
        remove_if_empty(&o);
        return rc;
    }
    ssb4d_session_fit_params(j.s, &o.fp, &rfp);
    ssb4d_fit_result *res = calloc(n, sizeof *res);
    double *c10 = calloc(n, sizeof *c10);
    ssb4d_status st = res && c10 ? SSB4D_OK : ssb4d_err_set(&err, SSB4D_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && !st; i++) {
        cli_session_bar(&j, "region fit");
        st = ssb4d_session_fit_region(j.s, rects[i], &o.fp, &res[i], &err);
        cli_session_bar_done(&j);
    }
    /* The 180° branch from the region that settles it most clearly, held for the others. */
    size_t from = n; /* n: none */
    ssb4d_fit_params hfp = rfp;
    if (!st && !o.rotation_per_region && ssb4d_session_branch_to_settle(j.s, &o.fp, n))
        st = hold_branch(&o, &j, rects, res, n, &from, &hfp, &err);
    cJSON *list = cJSON_CreateArray();
    char *csv = NULL;
    size_t csv_len = 0;
    FILE *cf = open_memstream(&csv, &csv_len);
    fprintf(cf, "r0,r1,c0,c1,C10_nm,C12_nm,phi12_deg,loss,rotation_deg,branch_flipped,evaluations,phi12_probe_deg,"
                "rotation_source,confident\n");
    size_t n_unsure = 0;
    for (size_t i = 0; i < n && !st; i++) {
        const ssb4d_fit_result *r = &res[i];
        const ssb4d_fit_params *fp = from < n && i != from ? &hfp : &rfp;
        char held[96] = ""; /* "region R0:R1,C0:C1": the region whose rotation this one holds */
        if (fp == &hfp)
            region_label(held, sizeof held, rects[from]);
        size_t loss_n_bf = ssb4d_session_calibration(j.s)->n_bf; /* every region's G has all of them */
        double x[3] = {r->ab.C_nm[SSB4D_C10], r->ab.C_nm[SSB4D_C12], r->ab.phi_deg[SSB4D_C12]};
        c10[i] = x[0];
        cJSON *e = cJSON_CreateObject();
        cJSON *rc4 = cJSON_AddArrayToObject(e, "rect");
        for (int k = 0; k < 4; k++)
            cJSON_AddItemToArray(rc4, cJSON_CreateNumber((double)rects[i][k]));
        n_unsure += !r->confident;
        add_ab(e, x);
        add_fit_json(e, fp, r, &j, r->phi12_probe_deg, x[2]);
        if (held[0]) { /* held from the settling region, not given by the user */
            cJSON_ReplaceItemInObject(e, "rotation_source", cJSON_CreateString(held));
            cJSON_ReplaceItemInObject(e, "flip_source", cJSON_CreateString(held));
        }
        if (from < n)
            cJSON_AddNumberToObject(e, "rotation_set_by", (double)from);
        else
            cJSON_AddNullToObject(e, "rotation_set_by");
        cJSON_AddNumberToObject(e, "loss", r->loss);
        cJSON_AddNumberToObject(e, "loss_n_bf", (double)loss_n_bf);
        cJSON_AddNumberToObject(e, "evaluations", (double)r->evaluations);
        cJSON_AddItemToArray(list, e);
        /* a source with a comma is quoted (RFC 4180) */
        fprintf(cf, "%zu,%zu,%zu,%zu,%.6f,%.6f,%.4f,%.9g,%.4f,%d,%zu,%.4f,%s%s%s,%d\n", rects[i][0], rects[i][1],
                rects[i][2], rects[i][3], x[0], x[1], x[2], r->loss, r->geom.rotation_deg, r->branch_flipped,
                r->evaluations, r->phi12_probe_deg, held[0] ? "\"" : "", held[0] ? held : rotation_source_key(fp, r),
                held[0] ? "\"" : "", r->confident);
        if (!o.m.quiet && !o.m.json)
            fprintf(stderr, "ssb4d fit-regions: region %zu/%zu (rows %zu:%zu, cols %zu:%zu): C10 %.3f nm, C12 %.3f nm, "
                            "phi12 %.2f deg (probe frame), rotation %.2f deg%s%s\n", i + 1, n, rects[i][0], rects[i][1],
                    rects[i][2], rects[i][3], x[0], x[1], r->phi12_probe_deg, r->geom.rotation_deg,
                    held[0] ? ", held from " : "", held);
        if (!r->confident)
            fprintf(stderr, "ssb4d fit-regions: warning: region %zu (rows %zu:%zu, cols %zu:%zu): %s\n", i + 1,
                    rects[i][0], rects[i][1], rects[i][2], rects[i][3], r->warning);
    }
    fclose(cf);
    if (csv_len && csv[csv_len - 1] == '\n')
        csv[csv_len - 1] = 0; /* the writer adds the final newline */
    char path[4096];
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "data", o.data);
    cJSON_AddNumberToObject(root, "seed", (double)o.fp.seed);
    cJSON_AddStringToObject(root, "objective", rfp.objective == SSB4D_FIT_OBJ_LOSS ? "loss" : "band");
    cJSON_AddNumberToObject(root, "not_confident", (double)n_unsure);
    cJSON_AddItemToObject(root, "branch_region", branch_json(rects, res, n, from));
    cJSON_AddItemToObject(root, "regions", list);
    const int writer = cli_is_root(); /* under mpirun, rank 0 writes (cli_mpi.h) */
    if (!st && writer) {
        join(path, sizeof path, o.out_dir, "regions.json");
        st = write_json_file(path, root, &err);
    }
    if (!st && writer) {
        join(path, sizeof path, o.out_dir, "regions.csv");
        st = ssb4d_write_text_atomic(path, csv, &err);
    }
    if (!st) {
        /* The defocus map: one 32-px cell per grid region (a list is drawn on the scan grid, one
         * pixel per scan position; positions no region covers have no value: dark blue), with a
         * colour bar of C10 in nm labelled with its ends. */
        size_t R = o.grid[0] ? o.grid[0] : j.shape[0], C = o.grid[1] ? o.grid[1] : j.shape[1];
        size_t cell = o.grid[0] ? 32 : 1;
        float *img = malloc(R * C * cell * cell * sizeof *img);
        if (!img)
            st = ssb4d_err_set(&err, SSB4D_ENOMEM, "out of memory");
        for (size_t i = 0; img && i < R * C * cell * cell; i++)
            img[i] = NAN;
        for (size_t i = 0; img && i < n; i++) {
            size_t r0 = o.grid[0] ? i / C : rects[i][0], r1 = o.grid[0] ? r0 + 1 : rects[i][1];
            size_t c0 = o.grid[0] ? i % C : rects[i][2], c1 = o.grid[0] ? c0 + 1 : rects[i][3];
            for (size_t a = r0 * cell; a < r1 * cell; a++)
                for (size_t b = c0 * cell; b < c1 * cell; b++)
                    img[a * C * cell + b] = (float)c10[i];
        }
        join(path, sizeof path, o.out_dir, "defocus.png");
        if (!st && writer) /* drawn >= 512 px, the bar at least 1 nm, the spread printed */
            st = ssb4d_defocus_map_save(path, img, R * cell, C * cell, &err);
        free(img);
    }
    if (st) {
        rc = cli_session_fail(&j, st, err.msg);
        remove_if_empty(&o);
    } else if (o.m.json) {
        cJSON_AddNumberToObject(root, "seconds", cli_progress_elapsed(&total));
        cJSON_AddStringToObject(root, "backend", ssb4d_session_backend(j.s));
        cJSON_AddStringToObject(root, "output_dir", o.out_dir);
        char *s = cJSON_PrintUnformatted(root);
        printf("%s\n", s);
        free(s);
    } else {
        printf("%s\n", csv); /* the CSV without its final newline (stripped for the file writer) */
        printf("backend %s\n", ssb4d_session_backend(j.s));
        printf("wrote %s/regions.json, regions.csv, defocus.png (%.1f s)\n", o.out_dir, cli_progress_elapsed(&total));
    }
    cJSON_Delete(root);
    free(csv);
    free(c10);
    for (size_t i = 0; res && i < n; i++)
        ssb4d_fit_result_free(&res[i]);
    free(res);
    free(rects);
    cli_session_close(&j);
    return rc;
}
