/* cmd_reconstruct.c — `ssb4d reconstruct DATA`: calibrate (what is not given), build G, SSB at the
 * given aberrations, write the phase image and print the loss. */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/cli_session.h"
#include "cli/cli_mpi.h"
#include "cli/cli_params.h"
#include "cli/commands.h"
#include "cli/progress.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

enum {
    OPT_ABERR = CLI_OPT_FIRST_FREE, OPT_ESTIMATOR, OPT_PATH, OPT_OBJECT, OPT_BLOCK_MB, OPT_FORCE, OPT_VERBOSE
};

/* The options read from the parameter table (ssb4d_params). */
static const char *const RECON_ABERR[] = {"c10", "c12", "phi12", NULL};
static const char *const RECON_THICK[] = {"tilt", "thickness", NULL};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ssb4d reconstruct DATA [options]\n\n"
            "Builds G(q,k) from DATA (a .qem from ssb4d import, or .npy counts, uint8/16/32, shape\n"
            "scan_row x scan_col x det_row x det_col),\n"
            "applies the aberration-corrected single-side-band correction and writes the phase image.\n\n"
            "aberrations (default: those of --calibration, else the simulator's truth from the sidecar, else 0;\n"
            "the thick model likewise from --calibration, else none):\n");
    cli_param_help(f, SSB4D_OP_ABERRATIONS, RECON_ABERR, 0);
    fprintf(f, "  --aberr LIST          any of the 14 coefficients, e.g. C30=1000,C32=50,phi32=20 (nm, deg)\n");
    cli_param_help(f, SSB4D_OP_THICK, RECON_THICK, 0);
    fprintf(f,
            "\noutput:\n"
            "  -o, --output FILE     phase image: .tiff (float32), .npy or .png (default phase.tiff);\n"
            "                        a .png is an 8-bit preview with a scale bar and a colour bar (rad)\n"
            "  --object FILE         also write the complex object (.npy complex64)\n"
            "  --force               replace the phase image and --object FILE if they exist\n"
            "                        (without it an existing one is refused before any work)\n");
    cli_param_help(f, SSB4D_OP_PREVIEW, (const char *const[]){"upsample", NULL}, 1);
    fprintf(f,
            "  --estimator E         phase-of-mean (default), mean-phase, or transfer: the phase of\n"
            "                        the mean divided by its transfer (docs/ssb-math.md)\n"
            "  --path P              auto (default) or real: the real-output path; complex: full-plane\n"
            "                        transforms (same results to rounding, for checks)\n"
            "  --block-mb N          decoded block size for the G build (MiB); overrides the block\n"
            "                        the --memory plan picks (256 MiB, less under a small budget)\n"
            "  --verbose             also the loss's computation path and time\n"
            CLI_BACKEND_HELP "\n"
            "memory: the budget (--memory, default the available RAM) counts a .qem DATA (it stays\n"
            "mapped), the output images, G and every transient. When G does not fit, its outer BF\n"
            "pixels are streamed (rebuilt from DATA by every pass): slower, same bits. A budget below\n"
            "the smallest that runs exits 2 with that smallest budget (see also ssb4d plan).\n\n%s\n"
            CLI_EXIT_HELP,
            CLI_MICROSCOPE_HELP);
}

static const char *const ESTIMATOR_NAME[] = {"phase-of-mean", "mean-phase", "transfer"}; /* ssb4d_estimator */

static const char *path_name(int real) { return real ? "real" : "complex"; }

/* The command line. */
typedef struct {
    cli_micro m;
    ssb4d_aberrations ab_flags;
    unsigned c_mask, phi_mask;
    const char *data, *out_path, *object_path;
    int upsample, upsample_auto, force, verbose;
    ssb4d_estimator estimator;
    ssb4d_path path;
    ssb4d_thick thick;
    int tilt_given, thickness_given;
    double block_mb; /* 0: the plan's */
} recon_opts;

/* A table option was given: its coefficient's bit, or the thick model's part. */
static void mark_given(recon_opts *o, const ssb4d_param *row)
{
    size_t off = row->offset, c0 = offsetof(ssb4d_aberrations, C_nm), phi = offsetof(ssb4d_aberrations, phi_deg);
    if (row == ssb4d_param_find(SSB4D_OP_ABERRATIONS, row->name)) {
        if (off < phi)
            o->c_mask |= 1u << ((off - c0) / sizeof(double));
        else
            o->phi_mask |= 1u << ((off - phi) / sizeof(double));
    } else if (!strcmp(row->name, "tilt_mrad"))
        o->tilt_given = 1;
    else if (!strcmp(row->name, "thickness_nm"))
        o->thickness_given = 1;
}

/* Returns 0, -1 after --help, or the exit code (message printed). */
static int parse(int argc, char **argv, recon_opts *o)
{
    struct option opts[48] = {
        CLI_MICROSCOPE_OPTIONS,
        CLI_BACKEND_OPTION,
        {"aberr", required_argument, 0, OPT_ABERR},
        {"estimator", required_argument, 0, OPT_ESTIMATOR},
        {"path", required_argument, 0, OPT_PATH},
        {"object", required_argument, 0, OPT_OBJECT},
        {"block-mb", required_argument, 0, OPT_BLOCK_MB},
        {"force", no_argument, 0, OPT_FORCE},
        {"verbose", no_argument, 0, OPT_VERBOSE},
        {"output", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},
    };
    size_t n_opts = 0;
    while (opts[n_opts].name)
        n_opts++;
    cli_param_options(opts, &n_opts, 48, SSB4D_OP_ABERRATIONS, RECON_ABERR);
    cli_param_options(opts, &n_opts, 48, SSB4D_OP_THICK, RECON_THICK);
    cli_param_options(opts, &n_opts, 48, SSB4D_OP_PREVIEW, (const char *const[]){"upsample", NULL});
    memset(o, 0, sizeof *o);
    ssb4d_preview_req up;
    ssb4d_preview_req_default(&up);
    void *const targets[SSB4D_OP_COUNT] = {[SSB4D_OP_ABERRATIONS] = &o->ab_flags, [SSB4D_OP_THICK] = &o->thick,
                                           [SSB4D_OP_PREVIEW] = &up};
    cli_micro_init(&o->m);
    o->out_path = "phase.tiff";
    o->upsample = 1;
    o->path = SSB4D_PATH_AUTO;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:hq", opts, NULL)) != -1) {
        int r = cli_micro_handle(&o->m, c, optarg);
        if (!r && (r = cli_param_handle(c, optarg, targets)) > 0)
            mark_given(o, cli_param_row(c));
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        switch (c) {
        case 'h': usage(stdout); return -1;
        case 'o': o->out_path = optarg; break;
        case OPT_OBJECT: o->object_path = optarg; break;
        case OPT_FORCE: o->force = 1; break;
        case OPT_VERBOSE: o->verbose = 1; break;
        case OPT_ABERR:
            if (cli_parse_aberr_list(optarg, &o->ab_flags, &o->c_mask, &o->phi_mask))
                return CLI_EXIT_USAGE;
            break;
        case OPT_ESTIMATOR:
            if (!strcmp(optarg, "mean-phase"))
                o->estimator = SSB4D_ESTIMATE_MEAN_PHASE;
            else if (!strcmp(optarg, "phase-of-mean"))
                o->estimator = SSB4D_ESTIMATE_OBJECT;
            else if (!strcmp(optarg, "transfer"))
                o->estimator = SSB4D_ESTIMATE_TRANSFER;
            else {
                fprintf(stderr, "ssb4d reconstruct: --estimator must be phase-of-mean, mean-phase or transfer\n");
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_PATH:
            if (!strcmp(optarg, "auto"))
                o->path = SSB4D_PATH_AUTO;
            else if (!strcmp(optarg, "real"))
                o->path = SSB4D_PATH_REAL;
            else if (!strcmp(optarg, "complex"))
                o->path = SSB4D_PATH_COMPLEX;
            else {
                fprintf(stderr, "ssb4d reconstruct: --path must be auto, real or complex\n");
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_BLOCK_MB:
            if (cli_parse_double(optarg, &o->block_mb) || !(o->block_mb > 0) || o->block_mb > 1e6) {
                fprintf(stderr, "ssb4d reconstruct: --block-mb must be > 0\n");
                return CLI_EXIT_USAGE;
            }
            break;
        case ':':
            fprintf(stderr, "ssb4d reconstruct: option %s needs a value\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        default:
            fprintf(stderr, "ssb4d reconstruct: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        }
    }
    o->upsample_auto = up.upsample == 0;
    o->upsample = up.upsample ? up.upsample : 1;
    if (optind != argc - 1) {
        fprintf(stderr, "ssb4d reconstruct: expected exactly one DATA file (see --help)\n");
        return CLI_EXIT_USAGE;
    }
    o->data = argv[optind];
    return 0;
}

/* The aberrations and thick model to image with: the calibration file's (or the sidecar's truth),
 * each coefficient and part overridable by its flag; *_source say where they came from. */
typedef struct {
    ssb4d_aberrations ab;
    ssb4d_thick thick;
    const char *ab_source, *thick_source;
    char ab_source_buf[96];
} recon_params;

static void recon_params_of(const recon_opts *o, const ssb4d_values *v, recon_params *rp)
{
    memset(&rp->ab, 0, sizeof rp->ab);
    rp->ab_source = "zero (none given)";
    if (v->has_ab) {
        rp->ab = v->ab;
        rp->ab_source = v->ab_from;
    }
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        if (o->c_mask & (1u << i))
            rp->ab.C_nm[i] = o->ab_flags.C_nm[i];
        if (o->phi_mask & (1u << i))
            rp->ab.phi_deg[i] = o->ab_flags.phi_deg[i];
    }
    if (o->c_mask || o->phi_mask) {
        snprintf(rp->ab_source_buf, sizeof rp->ab_source_buf, "flags%s%s", v->has_ab ? " over " : "",
                 v->has_ab ? v->ab_from : "");
        rp->ab_source = rp->ab_source_buf;
    }
    rp->thick = o->thick;
    rp->thick_source = "flags";
    if (v->has_thick) {
        if (!o->tilt_given) {
            rp->thick.tilt_mrad[0] = v->thick.tilt_mrad[0];
            rp->thick.tilt_mrad[1] = v->thick.tilt_mrad[1];
        }
        if (!o->thickness_given)
            rp->thick.thickness_nm = v->thick.thickness_nm;
        rp->thick_source = (o->tilt_given || o->thickness_given) ? "flags over calibration file" : "calibration file";
    }
}

/* What the reconstruction produced, for the outputs and the summary. */
typedef struct {
    float *phase, *object;
    size_t nyf, nxf;
    int upsample;
    double loss, t_build, t_loss, t_image;
    ssb4d_geometry g;
    double pixel[2];
} recon_run;

/* G, the exact loss and the image at the given parameters, then the files. */
static ssb4d_status recon_compute(const recon_opts *o, cli_session *cs, const recon_params *rp, recon_run *run,
                                  ssb4d_err *err)
{
    ssb4d_session *s = cs->s;
    ssb4d_mem *mem = ssb4d_session_mem(s);
    ssb4d_status st = ssb4d_session_image_shape(s, o->upsample_auto ? 0 : o->upsample, &run->nyf, &run->nxf, err);
    if (st)
        return st;
    run->upsample = (int)(run->nyf / cs->shape[0]);
    /* The outputs first: they stay live to the end, as the plan counted them (beside the data). */
    size_t n = run->nyf * run->nxf;
    if (!(run->phase = ssb4d_mem_alloc(mem, n * sizeof(float), "the phase image", err)))
        return err->code;
    if (o->object_path && !(run->object = ssb4d_mem_alloc(mem, 2 * n * sizeof(float), "the complex object", err)))
        return err->code;
    ssb4d_session_set(s, &rp->ab, &rp->thick);
    cli_session_bar(cs, "G build");
    st = ssb4d_session_build(s, err);
    run->t_build = cli_session_bar_done(cs);
    /* At native sampling the image and the loss are one pass over G (the plan's release). */
    int fused = run->upsample == 1 && o->estimator == SSB4D_ESTIMATE_OBJECT;
    if (!st && fused) {
        cli_session_bar(cs, "loss and image");
        st = ssb4d_session_release(s, run->object, run->phase, &run->loss, err);
        run->t_loss = cli_session_bar_done(cs);
    }
    if (!st && !fused) {
        cli_session_bar(cs, "loss");
        st = ssb4d_session_loss(s, &run->loss, err);
        run->t_loss = cli_session_bar_done(cs);
    }
    if (!st && !fused) {
        cli_session_bar(cs, "image");
        int mp = o->estimator == SSB4D_ESTIMATE_MEAN_PHASE; /* no complex object: --object is the phase of mean's */
        if (mp && o->object_path)
            st = ssb4d_session_object(s, run->upsample, run->object, NULL, err);
        if (!st)
            st = ssb4d_session_image(s, run->upsample, o->estimator, mp ? NULL : run->object, run->phase, err);
        run->t_image = cli_session_bar_done(cs);
    }
    ssb4d_session_get(s, NULL, NULL, &run->g);
    run->pixel[0] = run->g.scan_step_A[0] / run->upsample;
    run->pixel[1] = run->g.scan_step_A[1] / run->upsample;
    if (!st && cli_is_root()) { /* under mpirun, rank 0 writes (cli_mpi.h) */
        ssb4d_mem_stage_begin(mem, "write");
        st = cli_write_image(o->out_path, run->phase, run->nyf, run->nxf, run->pixel, err);
        if (!st && o->object_path) {
            size_t oshape[2] = {run->nyf, run->nxf};
            st = ssb4d_npy_save(o->object_path, "<c8", 2, oshape, run->object, err);
        }
        ssb4d_mem_stage_end(mem);
    }
    return st;
}

static void recon_print_json(const recon_opts *o, const cli_session *cs, const recon_params *rp,
                             const recon_run *run, double seconds)
{
    ssb4d_mem *mem = ssb4d_session_mem(cs->s);
    const ssb4d_plan *plan = ssb4d_session_plan(cs->s);
    const ssb4d_calibration *cal = ssb4d_session_calibration(cs->s);
    const ssb4d_geometry g = run->g;
    size_t g_bytes, n_bf, n_stored, n_resident;
    ssb4d_session_G_info(cs->s, &g_bytes, &n_bf, &n_stored, &n_resident);
    const char *g_mode = n_resident < n_stored ? "streaming" : "resident";
    size_t block_bytes = o->block_mb > 0 ? (size_t)(o->block_mb * 1048576.0) : plan->block_bytes;
    const ssb4d_aberrations ab = rp->ab;
    const ssb4d_thick thick = rp->thick;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "loss", run->loss);
    cJSON_AddNumberToObject(out, "loss_n_bf", (double)n_bf);
    cJSON_AddNumberToObject(out, "n_bf", (double)n_bf);
    cJSON_AddNumberToObject(out, "n_stored", (double)n_stored);
    cJSON_AddNumberToObject(out, "seconds", seconds);
    cJSON_AddNumberToObject(out, "g_build_seconds", run->t_build);
    cJSON_AddNumberToObject(out, "loss_seconds", run->t_loss);
    cJSON_AddNumberToObject(out, "image_seconds", run->t_image);
    cJSON_AddNumberToObject(out, "g_bytes", (double)g_bytes);
    cJSON_AddNumberToObject(out, "memory_bytes", (double)cs->budget);
    cJSON_AddStringToObject(out, "g_mode", g_mode);
    cJSON_AddNumberToObject(out, "n_resident", (double)n_resident);
    cJSON_AddNumberToObject(out, "block_bytes", (double)block_bytes);
    cJSON_AddNumberToObject(out, "min_memory_bytes", (double)plan->min_memory_bytes);
    cJSON_AddNumberToObject(out, "resident_memory_bytes", (double)plan->resident_memory_bytes);
    cJSON_AddNumberToObject(out, "peak_tracked_bytes", (double)ssb4d_mem_peak(mem));
    cJSON_AddStringToObject(out, "backend", ssb4d_session_backend(cs->s));
    cJSON_AddStringToObject(out, "output", o->out_path);
    if (o->object_path)
        cJSON_AddStringToObject(out, "object", o->object_path);
    cJSON_AddStringToObject(out, "estimator", ESTIMATOR_NAME[o->estimator]);
    cJSON_AddStringToObject(out, "loss_path", path_name(o->path != SSB4D_PATH_COMPLEX));
    cJSON_AddNumberToObject(out, "upsample", run->upsample);
    cJSON *sh = cJSON_AddArrayToObject(out, "image_shape");
    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)run->nyf));
    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)run->nxf));
    cJSON_AddNumberToObject(out, "pixel_A", run->pixel[0]);
    cJSON *a = cJSON_AddObjectToObject(out, "aberrations");
    for (int i = 0; i < SSB4D_N_ABERR; i++) {
        char key[32];
        if (ab.C_nm[i] == 0 && i > SSB4D_C12)
            continue;
        snprintf(key, sizeof key, "%s_nm", ssb4d_aberr_name(i));
        cJSON_AddNumberToObject(a, key, ab.C_nm[i]);
        if (ssb4d_aberr_m(i)) {
            snprintf(key, sizeof key, "phi%s_deg", ssb4d_aberr_name(i) + 1);
            cJSON_AddNumberToObject(a, key, ab.phi_deg[i]);
        }
    }
    cJSON_AddStringToObject(out, "aberrations_source", rp->ab_source);
    if (thick.thickness_nm > 0) {
        cJSON_AddNumberToObject(out, "thickness_nm", thick.thickness_nm);
        cJSON *t = cJSON_AddArrayToObject(out, "tilt_mrad");
        cJSON_AddItemToArray(t, cJSON_CreateNumber(thick.tilt_mrad[0]));
        cJSON_AddItemToArray(t, cJSON_CreateNumber(thick.tilt_mrad[1]));
        cJSON_AddStringToObject(out, "thick_source", rp->thick_source);
    }
    cJSON *ge = cJSON_AddObjectToObject(out, "geometry");
    cJSON_AddNumberToObject(ge, "kv", g.kv);
    cJSON_AddNumberToObject(ge, "semiangle_mrad", g.semiangle_mrad);
    cJSON_AddNumberToObject(ge, "scan_step_row_A", g.scan_step_A[0]);
    cJSON_AddNumberToObject(ge, "scan_step_col_A", g.scan_step_A[1]);
    cJSON_AddNumberToObject(ge, "det_sampling_row_mrad", g.det_sampling_mrad[0]);
    cJSON_AddNumberToObject(ge, "det_sampling_col_mrad", g.det_sampling_mrad[1]);
    cJSON_AddNumberToObject(ge, "centre_row_px", g.centre_px[0]);
    cJSON_AddNumberToObject(ge, "centre_col_px", g.centre_px[1]);
    cJSON_AddNumberToObject(ge, "rotation_deg", g.rotation_deg);
    cJSON_AddNumberToObject(ge, "selection_radius_px", cal->selection_radius_px);
    cJSON_AddNumberToObject(out, "n_flagged", (double)cal->n_flagged);
    char *s = cJSON_PrintUnformatted(out);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(out);
}

static void recon_print_text(const recon_opts *o, const cli_session *cs, const recon_params *rp,
                             const recon_run *run)
{
    ssb4d_mem *mem = ssb4d_session_mem(cs->s);
    const ssb4d_geometry g = run->g;
    size_t g_bytes, n_bf, n_stored, n_resident;
    ssb4d_session_G_info(cs->s, &g_bytes, &n_bf, &n_stored, &n_resident);
    const char *g_mode = n_resident < n_stored ? "streaming" : "resident";
    const ssb4d_aberrations ab = rp->ab;
    const ssb4d_thick thick = rp->thick;
    printf("data         %s (%zux%zu scan, %zux%zu detector)\n", o->data, cs->shape[0], cs->shape[1], cs->shape[2], cs->shape[3]);
    printf("geometry     %.1f kV, %.3f mrad, step %.5g x %.5g A, sampling %.5g mrad/px, centre (%.2f, %.2f), rotation %.2f deg\n",
           g.kv, g.semiangle_mrad, g.scan_step_A[0], g.scan_step_A[1], g.det_sampling_mrad[0],
           g.centre_px[0], g.centre_px[1], g.rotation_deg);
    printf("aberrations  C10 %.4f nm, C12 %.4f nm, phi12 %.3f deg (%s)\n", ab.C_nm[SSB4D_C10],
           ab.C_nm[SSB4D_C12], ab.phi_deg[SSB4D_C12], rp->ab_source);
    if (thick.thickness_nm > 0)
        printf("thick model  tilt (%.4g, %.4g) mrad, thickness %.4g nm (%s)\n",
               thick.tilt_mrad[0], thick.tilt_mrad[1], thick.thickness_nm, rp->thick_source);
    char gb[32];
    if (ssb4d_dist_size(cli_dist()) > 1) /* rank 0's own share (docs/scale.md) */
        printf("BF pixels    %zu (%zu stored on rank 0 of %d), G %s on rank 0, built in %.3f s\n", n_bf,
               n_stored, ssb4d_dist_size(cli_dist()), ssb4d_size_text(gb, g_bytes, 0, 0), run->t_build);
    else
        printf("BF pixels    %zu (%zu stored), G %s, built in %.3f s\n", n_bf, n_stored,
               ssb4d_size_text(gb, g_bytes, 0, 0), run->t_build);
    char b[32], pk[32];
    size_t peak = ssb4d_mem_peak(mem), big = peak; /* one unit: the measured peak's */
    printf("memory       budget %s, G %s (%zu of %zu planes held), peak %s tracked\n",
           cli_job_size_as(b, cs->budget, big, 0), g_mode, n_resident, n_stored, cli_job_size_as(pk, peak, big, 0));
    printf("backend      %s\n", ssb4d_session_backend(cs->s));
    printf("loss         %.9g (exact SSB loss over all %zu BF pixels, as ssb4d fit reports it", run->loss,
           n_bf);
    if (o->verbose)
        printf("; %s path, %.3f s", path_name(o->path != SSB4D_PATH_COMPLEX), run->t_loss);
    printf(")\n");
    printf("phase image  %s (%zux%zu, %s, upsample %d, pixel %.4g A)\n", o->out_path, run->nyf, run->nxf,
           o->estimator == SSB4D_ESTIMATE_MEAN_PHASE ? "mean phase"
           : o->estimator == SSB4D_ESTIMATE_TRANSFER ? "phase of mean / transfer"
                                                      : "phase of mean",
           run->upsample, run->pixel[0]);
    if (o->object_path)
        printf("object       %s\n", o->object_path);
}

int cmd_reconstruct(int argc, char **argv)
{
    recon_opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    ssb4d_err err = {0};
    if (ssb4d_image_check_path(o.out_path, &err))
        return cli_error("reconstruct", err.code, err.msg);
    if (o.object_path &&
        (strlen(o.object_path) < 4 || strcasecmp(o.object_path + strlen(o.object_path) - 4, ".npy"))) {
        fprintf(stderr, "ssb4d reconstruct: --object must name a .npy file\n");
        return CLI_EXIT_USAGE;
    }
    /* A missing DATA is the first thing to say, before any unknown microscope value; then a
     * backend that cannot run here, before any note. */
    if ((rc = cli_check_readable("reconstruct", o.data)) ||
        (rc = cli_backend_check("reconstruct", o.m.backend, NULL)) ||
        (rc = cli_auto_calibration("reconstruct", o.data, &o.m, o.m.quiet)))
        return rc;
    /* Then the outputs: an existing one is refused unless --force, before any long work. */
    if ((rc = cli_check_output("reconstruct", o.out_path, o.force, ", or -o FILE")) ||
        (o.object_path && (rc = cli_check_output("reconstruct", o.object_path, o.force, ""))))
        return rc;
    ssb4d_values v;
    if ((rc = cli_resolve(o.data, &o.m, &v)) || (rc = cli_check_microscope(&v)))
        return rc;
    recon_params rp;
    recon_params_of(&o, &v, &rp);
    if (v.ab_from_truth && !(o.c_mask || o.phi_mask) && !o.m.json && !o.m.quiet)
        fprintf(stderr, "ssb4d reconstruct: using the simulator's true aberrations from the sidecar\n");

    /* Everything large is counted under the budget; the plan made at calibration sizes the G
     * build (block, group, planes held) so that the job fits, with the same bits for any. */
    cli_progress total;
    cli_progress_start(&total, "total", 1);
    cli_session_req rq;
    memset(&rq, 0, sizeof rq);
    rq.data = o.data;
    rq.m = &o.m;
    rq.values = &v;
    rq.upsample = o.upsample_auto ? 0 : o.upsample;
    rq.image_floats = o.object_path ? 3 : 1;
    rq.block_bytes = (size_t)(o.block_mb * 1048576.0); /* --block-mb overrides the plan's block */
    rq.ssb_path = o.path;
    cli_session cs;
    recon_run run;
    memset(&run, 0, sizeof run);
    run.loss = NAN;
    rc = cli_session_open("reconstruct", &rq, &cs);
    if (!rc)
        rc = cli_session_calibrate(&cs);
    if (!rc) {
        ssb4d_status st = recon_compute(&o, &cs, &rp, &run, &err);
        if (st)
            rc = cli_session_fail(&cs, st, err.msg);
        else if (o.m.json)
            recon_print_json(&o, &cs, &rp, &run, cli_progress_elapsed(&total));
        else
            recon_print_text(&o, &cs, &rp, &run);
    }
    if (cs.s) {
        ssb4d_mem *mem = ssb4d_session_mem(cs.s);
        if (o.m.memory_report)
            ssb4d_mem_report_print(mem, stderr);
        ssb4d_mem_free(mem, run.phase, 0);
        ssb4d_mem_free(mem, run.object, 0);
    }
    cli_session_close(&cs);
    return rc;
}
