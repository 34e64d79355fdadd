/* cmd_virtual.c — `ssb4d virtual [DATA] [-o DIR] [--bf-outer MRAD] [--adf INNER OUTER] [--format
 * LIST] [microscope flags] [--force] [-q]`: the virtual detector images (docs/virtual.md) of DATA
 * (or of the built-in dataset) under its calibration: virtual_bf, virtual_adf, com_x, com_y and
 * idpc as float32 TIFF at the scan's sampling, PNG previews with scale and colour bars, or float64
 * .npy, and virtual.json with the angles, centre, sampling, rotation and flagged pixels used. */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/cli_session.h"
#include "cli/commands.h"
#include "cli/progress.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define CMD "virtual"
#define DEFAULT_DIR "ssb4d-virtual"

enum { OPT_FORCE = CLI_OPT_FIRST_FREE, OPT_BF_OUTER, OPT_BF_INNER, OPT_ADF, OPT_FORMAT };
enum { FMT_TIFF = 1, FMT_PNG = 2, FMT_NPY = 4 };

static const char *const NAMES[5] = {"virtual_bf", "virtual_adf", "com_x", "com_y", "idpc"};

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d virtual [DATA] [options]\n\n"
            "Virtual detector images from one pass over the frames, under DATA's calibration (the BF\n"
            "disk centre and radius, detector sampling, rotation, handedness and flagged pixels,\n"
            "measured as ssb4d calibrate does unless flags or a calibration file give them; the file\n"
            "ssb4d calibrate DATA writes beside DATA is taken when there):\n"
            "  virtual_bf    bright field: the counts inside the BF disk (the calibration's BF\n"
            "                selection, or --bf-outer)\n"
            "  virtual_adf   annular dark field: the counts between the ADF angles\n"
            "  com_x, com_y  centre of mass of each pattern (mrad, from the disk centre), turned into\n"
            "                the scan frame: x along the scan rows, y along the scan columns\n"
            "  idpc          integrated DPC: the phase (rad) whose gradient is the centre-of-mass\n"
            "                deflection, by Fourier integration (mean 0)\n"
            "Without DATA, the built-in dataset that ssb4d fit and ssb4d demo use.\n\n"
            "options:\n"
            "  -o, --output DIR      the output folder (default " DEFAULT_DIR "), created if needed\n"
            "  --bf-outer MRAD       BF outer angle (default: the calibration's BF disk)\n"
            "  --bf-inner MRAD       BF inner angle, an annular bright field (default 0)\n"
            "  --adf INNER OUTER     ADF angles in mrad (also INNER,OUTER); default: inner 1.5x the\n"
            "                        BF angle, outer the detector's farthest pixel; an outer angle\n"
            "                        beyond the detector is clamped to it\n"
            "  --format LIST         tiff, png, npy, or a comma list (default tiff,png): float32\n"
            "                        TIFF at the scan step, 8-bit PNG previews with a scale bar and\n"
            "                        a colour bar, or float64 .npy\n"
            "  --force               replace outputs that exist\n"
            "  -h, --help            this help\n\n%s\n"
            "outputs in DIR: NAME.tiff / .png / .npy for each image above, and virtual.json (the\n"
            "angles, centre, sampling, rotation, flip and flagged pixels used). An existing output is\n"
            "refused before any work unless --force. Memory: one block of frames (at most 64 MiB)\n"
            "and 56 bytes a scan position (docs/virtual.md).\n\n" CLI_EXIT_HELP,
            CLI_MICROSCOPE_HELP);
}

/* "tiff,png,npy" into FMT_ bits; 0 when a word is unknown. */
static int parse_formats(const char *s)
{
    char buf[128];
    if (!s || strlen(s) >= sizeof buf)
        return 0;
    strcpy(buf, s);
    int f = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (!strcmp(t, "tiff") || !strcmp(t, "tif"))
            f |= FMT_TIFF;
        else if (!strcmp(t, "png"))
            f |= FMT_PNG;
        else if (!strcmp(t, "npy"))
            f |= FMT_NPY;
        else
            return 0;
    }
    return f;
}

static const char *const EXT[3] = {"tiff", "png", "npy"};

/* Parses an angle: any finite number (the library refuses negative ones with its own words). */
static int parse_angle(const char *s, double *out)
{
    return cli_parse_double(s, out);
}

/* The built-in dataset (cli_session.h's), simulated into *counts, and the values its sidecar gives. */
static int builtin(const cli_micro *m, uint16_t **counts, size_t shape[4], ssb4d_values *v, int quiet)
{
    ssb4d_err err = {0};
    ssb4d_sim_params sp;
    cli_builtin_params(&sp, m->threads);
    ssb4d_sim_info info;
    if (ssb4d_sim_describe(&sp, &info, &err))
        return cli_error(CMD, err.code, err.msg);
    shape[0] = shape[1] = (size_t)sp.scan_n;
    shape[2] = shape[3] = (size_t)sp.det;
    if (!(*counts = malloc(shape[0] * shape[1] * shape[2] * shape[3] * sizeof(uint16_t))))
        return cli_error(CMD, SSB4D_ENOMEM, "out of memory");
    cli_progress pb;
    cli_progress_start(&pb, "simulate", quiet);
    sp.progress = cli_progress_cb;
    sp.progress_user = &pb;
    ssb4d_status st = ssb4d_simulate_to_memory(&sp, *counts, NULL, NULL, NULL, &info, &err);
    cli_progress_done(&pb);
    if (st)
        return cli_error(CMD, st, err.msg);
    ssb4d_values_unset(v);
    v->kv = sp.kv;
    v->semiangle_mrad = sp.semiangle_mrad;
    v->scan_step_A[0] = v->scan_step_A[1] = info.scan_step_A;
    v->det_sampling_mrad[0] = v->det_sampling_mrad[1] = info.det_sampling_mrad;
    v->rotation_deg = 0;
    snprintf(v->rotation_from, sizeof v->rotation_from, "built-in dataset");
    v->flip = 0;
    snprintf(v->flip_from, sizeof v->flip_from, "built-in dataset");
    ssb4d_values_layer(v, &m->flags);
    return 0;
}

static cJSON *pair(double a, double b)
{
    double v[2] = {a, b};
    return cli_json_pair(v);
}

static cJSON *record(const char *data, const ssb4d_calibration *cal, const ssb4d_virtual_images *vi, int is_float,
                     const char *const *written, size_t n_written)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "data", data ? data : "built-in dataset");
    cJSON_AddItemToObject(j, "scan_shape", pair((double)vi->scan_shape[0], (double)vi->scan_shape[1]));
    cJSON_AddItemToObject(j, "det_shape", pair((double)cal->det_shape[0], (double)cal->det_shape[1]));
    cJSON_AddBoolToObject(j, "float_data", is_float);
    cJSON_AddItemToObject(j, "kv", cli_json_num(cal->geom.kv));
    cJSON_AddItemToObject(j, "scan_step_A", cli_json_pair(cal->geom.scan_step_A));
    cJSON_AddItemToObject(j, "centre_px", cli_json_pair(vi->centre_px));
    cJSON_AddItemToObject(j, "det_sampling_mrad", cli_json_pair(vi->det_sampling_mrad));
    cJSON_AddItemToObject(j, "rotation_deg", cli_json_num(vi->rotation_deg));
    cJSON_AddBoolToObject(j, "flip", vi->flip);
    cJSON_AddBoolToObject(j, "bf_default", vi->bf_default);
    cJSON_AddItemToObject(j, "selection_radius_px", cli_json_num(cal->selection_radius_px));
    cJSON_AddItemToObject(j, "bf_mrad", pair(vi->bf_inner_mrad, vi->bf_outer_mrad));
    cJSON_AddItemToObject(j, "adf_mrad", pair(vi->adf_inner_mrad, vi->adf_outer_mrad));
    cJSON_AddItemToObject(j, "detector_max_mrad", cli_json_num(vi->detector_max_mrad));
    cJSON_AddNumberToObject(j, "n_bf_pixels", (double)vi->n_bf_pixels);
    cJSON_AddNumberToObject(j, "n_adf_pixels", (double)vi->n_adf_pixels);
    cJSON_AddNumberToObject(j, "n_com_pixels", (double)vi->n_com_pixels);
    cJSON *fl = cJSON_AddArrayToObject(j, "flagged");
    for (size_t i = 0; i < cal->n_flagged; i++)
        cJSON_AddItemToArray(fl, cJSON_CreateNumber((double)cal->flagged[i]));
    cJSON_AddStringToObject(j, "com_unit", "mrad");
    cJSON_AddStringToObject(j, "idpc_unit", vi->idpc_unit);
    cJSON_AddItemToObject(j, "idpc_lambda_A", cli_json_num(vi->idpc_lambda_A));
    cJSON_AddItemToObject(j, "idpc_step_A", cli_json_pair(vi->idpc_step_A));
    cJSON_AddNumberToObject(j, "seconds", vi->seconds);
    cJSON *w = cJSON_AddArrayToObject(j, "written");
    for (size_t i = 0; i < n_written; i++)
        cJSON_AddItemToArray(w, cJSON_CreateString(written[i]));
    return j;
}

int cmd_virtual(int argc, char **argv)
{
    static const struct option opts[] = {CLI_MICROSCOPE_OPTIONS,
                                         {"output", required_argument, 0, 'o'},
                                         {"bf-outer", required_argument, 0, OPT_BF_OUTER},
                                         {"bf-inner", required_argument, 0, OPT_BF_INNER},
                                         {"adf", required_argument, 0, OPT_ADF},
                                         {"format", required_argument, 0, OPT_FORMAT},
                                         {"force", no_argument, 0, OPT_FORCE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_micro m;
    cli_micro_init(&m);
    const char *dir = DEFAULT_DIR;
    int force = 0, formats = FMT_TIFF | FMT_PNG;
    ssb4d_virtual_params vp;
    ssb4d_virtual_params_default(&vp);
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":ho:q", opts, NULL)) != -1) {
        char msg[512];
        switch (opt) {
        case 'h':
            help(stdout);
            return CLI_EXIT_OK;
        case 'o':
            dir = optarg;
            continue;
        case OPT_FORCE:
            force = 1;
            continue;
        case OPT_FORMAT:
            if (!(formats = parse_formats(optarg))) {
                snprintf(msg, sizeof msg, "--format '%s': give tiff, png, npy or a comma list of them", optarg);
                return cli_error(CMD, SSB4D_EINVAL, msg);
            }
            continue;
        case OPT_BF_OUTER:
        case OPT_BF_INNER:
            if (parse_angle(optarg, opt == OPT_BF_OUTER ? &vp.bf_outer_mrad : &vp.bf_inner_mrad)) {
                snprintf(msg, sizeof msg, "%s '%s' is not an angle in mrad",
                         opt == OPT_BF_OUTER ? "--bf-outer" : "--bf-inner", optarg);
                return cli_error(CMD, SSB4D_EINVAL, msg);
            }
            continue;
        case OPT_ADF: {
            /* INNER,OUTER in one word, or INNER OUTER as two */
            const char *comma = strchr(optarg, ',');
            char a[64] = "", b[64] = "";
            if (comma) {
                snprintf(a, sizeof a, "%.*s", (int)(comma - optarg), optarg);
                snprintf(b, sizeof b, "%s", comma + 1);
            } else if (optind < argc) {
                snprintf(a, sizeof a, "%s", optarg);
                snprintf(b, sizeof b, "%s", argv[optind++]);
            } else
                return cli_error(CMD, SSB4D_EINVAL, "--adf needs two angles: --adf INNER OUTER (mrad)");
            if (parse_angle(a, &vp.adf_inner_mrad) || parse_angle(b, &vp.adf_outer_mrad)) {
                snprintf(msg, sizeof msg, "--adf '%s' '%s': give two angles in mrad, INNER OUTER", a, b);
                return cli_error(CMD, SSB4D_EINVAL, msg);
            }
            continue;
        }
        case '?':
        case ':': {
            const char *what = argv[optind - 1];
            snprintf(msg, sizeof msg, "%s %s (try ssb4d virtual --help)",
                     opt == ':' ? "missing value for" : "unknown option", what ? what : "");
            return cli_error(CMD, SSB4D_EINVAL, msg);
        }
        default: {
            int h = cli_micro_handle(&m, opt, optarg);
            if (h < 0)
                return CLI_EXIT_USAGE;
            if (h == 0)
                return cli_error(CMD, SSB4D_EINVAL, "unknown option (try ssb4d virtual --help)");
        }
        }
    }
    if (argc - optind > 1) {
        char msg[512];
        snprintf(msg, sizeof msg, "one DATA file expected, got also '%s'", argv[optind + 1]);
        return cli_error(CMD, SSB4D_EINVAL, msg);
    }
    const char *data = optind < argc ? argv[optind] : NULL;
    int rc;
    if (data && (rc = cli_check_readable(CMD, data)))
        return rc;
    /* The angles, before anything else is looked at: the ones no detector can have. */
    {
        const double a[4] = {vp.bf_inner_mrad, vp.bf_outer_mrad, vp.adf_inner_mrad, vp.adf_outer_mrad};
        const char *nm[4] = {"--bf-inner", "--bf-outer", "--adf inner", "--adf outer"};
        for (int i = 0; i < 4; i++)
            if (!isnan(a[i]) && a[i] < 0) {
                char msg[256];
                snprintf(msg, sizeof msg, "the %s angle %g mrad is negative", nm[i], a[i]);
                return cli_error(CMD, SSB4D_EINVAL, msg);
            }
        if (!isnan(vp.adf_inner_mrad) && !(vp.adf_inner_mrad < vp.adf_outer_mrad)) {
            char msg[256];
            snprintf(msg, sizeof msg, "the ADF inner angle %g mrad is not below its outer angle %g mrad",
                     vp.adf_inner_mrad, vp.adf_outer_mrad);
            return cli_error(CMD, SSB4D_EINVAL, msg);
        }
        if (!isnan(vp.bf_outer_mrad) && !(vp.bf_inner_mrad < vp.bf_outer_mrad)) {
            char msg[256];
            snprintf(msg, sizeof msg, "the BF inner angle %g mrad is not below its outer angle %g mrad",
                     vp.bf_inner_mrad, vp.bf_outer_mrad);
            return cli_error(CMD, SSB4D_EINVAL, msg);
        }
    }
    /* The outputs: the folder, and every file refused before any work unless --force. */
    char dirbuf[4096];
    dir = cli_dir_text(dirbuf, sizeof dirbuf, dir); /* "out/" prints out/phase.tiff, not out//… */
    struct stat sb;
    int created = 0;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "ssb4d " CMD ": %s exists and is not a folder\n", dir);
            return CLI_EXIT_USAGE;
        }
    }
    char paths[16][4096];
    size_t np = 0;
    for (int k = 0; k < 5; k++)
        for (int f = 0; f < 3; f++)
            if (formats & (1 << f))
                snprintf(paths[np++], sizeof paths[0], "%s/%s.%s", dir, NAMES[k], EXT[f]);
    snprintf(paths[np++], sizeof paths[0], "%s/virtual.json", dir);
    for (size_t i = 0; i < np; i++)
        if ((rc = cli_check_output(CMD, paths[i], force, ", or -o DIR")))
            return rc;

    /* The values: a .qem's record, the sidecar, the calibration file (given, or calibrate's beside
     * DATA), the flags; the built-in dataset's own. */
    ssb4d_values v;
    uint16_t *counts = NULL;
    size_t shape[4];
    if (data) {
        if ((rc = cli_auto_calibration(CMD, data, &m, m.quiet)) || (rc = cli_resolve(data, &m, &v)))
            return rc;
    } else if ((rc = builtin(&m, &counts, shape, &v, m.quiet || m.json)))
        return rc;
    if ((rc = cli_check_microscope(&v))) {
        free(counts);
        return rc;
    }
    ssb4d_err err = {0};
    ssb4d_source *src = NULL;
    ssb4d_status st = data ? ssb4d_source_open(data, &src, &err) : ssb4d_source_from_memory(counts, SSB4D_U16, shape, &src, &err);
    if (st) {
        free(counts);
        return cli_error(CMD, st, err.msg);
    }
    ssb4d_calib_params cp;
    cli_values_to_calib_params(&v, m.threads, m.hot_pixels, &cp);
    size_t budget = cli_memory_budget(&m);
    ssb4d_mem *mem = ssb4d_mem_create(budget);
    if (!mem) {
        ssb4d_source_close(src);
        free(counts);
        return cli_error(CMD, SSB4D_ENOMEM, "out of memory");
    }
    size_t encoded = data ? cli_job_encoded_bytes(data) : 0;
    if (encoded && ssb4d_mem_external(mem, encoded, 1, "encoded data", &err)) {
        rc = cli_job_error(CMD, err.code, err.msg, budget);
        goto done_src;
    }
    ssb4d_calibration cal;
    memset(&cal, 0, sizeof cal);
    cli_progress pb;
    cli_progress_start(&pb, "calibrate", m.quiet || m.json);
    ssb4d_mem_set_progress(mem, cli_progress_cb, &pb);
    rc = cli_job_calibrate(CMD, src, &cp, mem, encoded, &cal);
    cli_progress_done(&pb);
    if (rc)
        goto done_src;
    /* The calibration's frame block fits the budget; the same for this pass. */
    vp.block_bytes = cp.block_bytes;
    vp.threads = m.threads;
    vp.mem = mem;
    ssb4d_virtual_images vi;
    cli_progress_start(&pb, "virtual images", m.quiet || m.json);
    ssb4d_mem_set_progress(mem, cli_progress_cb, &pb);
    ssb4d_mem_stage_begin(mem, "virtual images");
    st = ssb4d_virtual_compute(src, &cal, &vp, &vi, &err);
    ssb4d_mem_stage_end(mem);
    cli_progress_done(&pb);
    ssb4d_mem_set_progress(mem, NULL, NULL);
    int is_float = ssb4d_source_is_float(src);
    if (st) {
        rc = cli_job_error(CMD, st, err.msg, budget);
        goto done_cal;
    }
    if (!created && stat(dir, &sb) != 0) {
        if (mkdir(dir, 0777) != 0) {
            fprintf(stderr, "ssb4d " CMD ": cannot create the output folder %s: %s\n", dir, strerror(errno));
            rc = CLI_EXIT_USAGE;
            goto done_vi;
        }
        created = 1;
    }
    {
        const size_t ny = vi.scan_shape[0], nx = vi.scan_shape[1], n = ny * nx;
        const double *img[5] = {vi.bf, vi.adf, vi.com_x, vi.com_y, vi.idpc};
        /* the colour bars' units (docs/virtual.md's table): BF and ADF sum the data's values */
        const char *sum_unit = is_float ? "data units" : "counts";
        const char *unit[5] = {sum_unit, sum_unit, "mrad", "mrad", vi.idpc_unit};
        double px[2] = {cal.geom.scan_step_A[0], cal.geom.scan_step_A[1]};
        float *f32 = malloc(n * sizeof *f32);
        const char *written[16];
        size_t nw = 0;
        if (!f32) {
            rc = cli_error(CMD, SSB4D_ENOMEM, "out of memory");
            goto done_vi;
        }
        for (int k = 0; k < 5 && !rc; k++) {
            for (size_t i = 0; i < n; i++)
                f32[i] = (float)img[k][i];
            for (int f = 0; f < 3 && !rc; f++) {
                if (!(formats & (1 << f)))
                    continue;
                const char *path = paths[nw];
                if (f == 2) {
                    size_t sh[2] = {ny, nx};
                    st = ssb4d_npy_save(path, "<f8", 2, sh, img[k], &err);
                } else
                    st = ssb4d_image_save(path, f32, ny, nx, px, unit[k], &err);
                if (st)
                    rc = cli_error(CMD, st, err.msg);
                else
                    written[nw++] = path;
            }
        }
        free(f32);
        if (!rc) {
            cJSON *j = record(data, &cal, &vi, is_float, written, nw);
            char *text = j ? cJSON_Print(j) : NULL;
            cJSON_Delete(j);
            if (!text)
                rc = cli_error(CMD, SSB4D_ENOMEM, "out of memory (JSON)");
            else if ((st = ssb4d_write_text_atomic(paths[np - 1], text, &err)))
                rc = cli_error(CMD, st, err.msg);
            else if (m.json)
                printf("%s\n", text);
            free(text);
        }
        if (!rc && !m.json) {
            printf("ssb4d virtual: %s\n", data ? data : "the built-in dataset");
            printf("  data        %zux%zu scan, %zux%zu detector%s\n", ny, nx, cal.det_shape[0], cal.det_shape[1],
                   is_float ? ", float32 values" : "");
            printf("  centre      (%.3f, %.3f) px, sampling %.5f, %.5f mrad/px\n", vi.centre_px[0], vi.centre_px[1],
                   vi.det_sampling_mrad[0], vi.det_sampling_mrad[1]);
            printf("  BF          %.3f to %.3f mrad%s, %zu pixels\n", vi.bf_inner_mrad, vi.bf_outer_mrad,
                   vi.bf_default ? " (the calibration's BF disk)" : "", vi.n_bf_pixels);
            printf("  ADF         %.3f to %.3f mrad, %zu pixels (the detector reaches %.3f mrad)\n", vi.adf_inner_mrad,
                   vi.adf_outer_mrad, vi.n_adf_pixels, vi.detector_max_mrad);
            printf("  CoM         mrad, scan frame: rotation %.3f deg%s, %zu flagged pixel%s left out\n",
                   vi.rotation_deg, vi.flip ? ", mirrored detector" : "", cal.n_flagged, cal.n_flagged == 1 ? "" : "s");
            printf("  iDPC        %s\n", vi.idpc_unit);
            printf("  time        %.3f s\n", vi.seconds);
            printf("  wrote       %s/ (%zu files and virtual.json)\n", dir, nw);
        }
        if (!rc && !vi.n_adf_pixels)
            fprintf(stderr, "ssb4d " CMD ": warning: the default ADF annulus (from %.3g mrad) lies beyond the "
                            "detector (%.3g mrad): virtual_adf is all zeros; give --adf INNER OUTER\n",
                    vi.adf_inner_mrad, vi.detector_max_mrad);
    }
done_vi:
    ssb4d_virtual_free(&vi);
done_cal:
    ssb4d_calibration_free(&cal);
done_src:
    if (m.memory_report)
        ssb4d_mem_report_print(mem, stderr);
    if (encoded)
        ssb4d_mem_external(mem, encoded, 0, "encoded data", NULL);
    ssb4d_mem_destroy(mem);
    ssb4d_source_close(src);
    free(counts);
    return rc;
}
