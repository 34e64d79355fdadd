/* cmd_calibrate.c — `ssb4d calibrate DATA [microscope flags] [-o cal.json] [--force] [--json]`:
 * BF disk, detector sampling, flagged pixels and scan-detector rotation (SPEC §4), written as a
 * calibration JSON (SPEC §8), by default beside DATA (DATA's name without its extension +
 * ".calibration.json", which fit, reconstruct and fit-regions then take), with a picture of the
 * mean pattern, the disk and the flagged pixels beside it (.png in place of .json). */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/commands.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CMD "calibrate"

enum { OPT_FORCE = CLI_OPT_FIRST_FREE, OPT_VERBOSE };

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d calibrate DATA [options]\n\n"
            "Finds the bright-field disk (centre, radius), the detector sampling (mrad/pixel, from a\n"
            "model fit of the disk's edge and the convergence semi-angle, with its standard error),\n"
            "hot/dead pixels and the scan-detector rotation (centre-of-mass curl), and writes them as\n"
            "a calibration JSON. Stated beats measured: a sampling, centre, rotation or handedness\n"
            "stated by a flag, --calibration, the simulator sidecar or DATA's own record is used; the\n"
            "sampling and centre are measured all the same, printed beside the stated ones (a warning\n"
            "beyond 3 sigma) and both recorded. --det-sampling measure uses the measured sampling.\n\n"
            "outputs (written atomically; an existing one is refused before any work unless --force):\n"
            "  DATA's name without its extension + .calibration.json, beside DATA (s.npy:\n"
            "  s.calibration.json): the calibration file. ssb4d fit, reconstruct and fit-regions take\n"
            "  it from there when no --calibration is given (one line on stderr says so).\n"
            "  The same name with .png (s.calibration.png): the calibration picture, the mean\n"
            "  diffraction pattern on a log scale (the disk light grey, not saturated: anything\n"
            "  brighter shows white) with the measured BF disk (green circle, cross at\n"
            "  its centre), the BF selection when --centre or --bf-radius changed it (yellow) and\n"
            "  the flagged hot/dead pixels (red).\n"
            "  -o, --output FILE     write the calibration JSON to FILE instead (the picture beside\n"
            "                        it, FILE with .png in place of .json)\n"
            "  --force               replace the calibration file and picture if they exist\n"
            "  --verbose             also how the disk was thresholded, its edge radius and how\n"
            "                        clearly the centre of mass fixes the rotation (curl ratio)\n"
            "  -h, --help            this help\n\n%s\n"
            "DATA is a .qem (ssb4d import) or a .npy of uint8/uint16/uint32 counts, shape\n"
            "(scan_row, scan_col, det_row, det_col). --memory bounds the frame blocks read at a time\n"
            "(at most 64 MiB, fewer frames under a small budget: the same results) and the\n"
            "per-position buffers; DATA itself is read through, not held.\n\n"
            CLI_EXIT_HELP,
            CLI_MICROSCOPE_HELP);
}

static cJSON *num(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

/* The pixel model of the edge fit (ssb4d_calibration.edge_model; docs/calibrate.md). */
static const char *edge_model_name(int m)
{
    static const char *const name[4] = {"point-sampled", "3x3 sub-samples", "5x5 sub-samples", "area-integrated"};
    return m >= 0 && m < 4 ? name[m] : "none (half-median threshold)";
}

static cJSON *measured_json(const ssb4d_calibration *c, double seconds)
{
    cJSON *m = cJSON_CreateObject();
    cJSON *cen = cJSON_AddArrayToObject(m, "disk_centre_px");
    cJSON_AddItemToArray(cen, num(c->disk_centre_px[0]));
    cJSON_AddItemToArray(cen, num(c->disk_centre_px[1]));
    cJSON_AddItemToObject(m, "disk_radius_px", num(c->disk_radius_px));
    cJSON_AddItemToObject(m, "disk_threshold", num(c->disk_threshold));
    cJSON_AddStringToObject(m, "disk_threshold_method",
                            c->disk_threshold_half_median ? "half-median" : c->disk_threshold_two_class ? "two-class" : "mean+std");
    cJSON_AddItemToObject(m, "edge_radius_px", num(c->edge_radius_px));
    cJSON_AddItemToObject(m, "edge_radius_sigma_px", num(c->edge_radius_sigma_px));
    cJSON_AddItemToObject(m, "edge_blur_px", num(c->edge_blur_px));
    cJSON_AddStringToObject(m, "edge_model", edge_model_name(c->edge_model));
    cJSON_AddStringToObject(m, "edge_model_source",
                            c->edge_model < 0 ? "none" : c->edge_model_stated ? "stated" : "measured");
    cJSON_AddItemToObject(m, "edge_radius_threshold_px", num(c->edge_radius_threshold_px));
    cJSON_AddItemToObject(m, "det_sampling_measured_mrad", num(c->det_sampling_measured_mrad));
    cJSON_AddItemToObject(m, "det_sampling_measured_sigma_mrad", num(c->det_sampling_measured_sigma_mrad));
    cJSON_AddNumberToObject(m, "n_bf", (double)c->n_bf);
    cJSON_AddNumberToObject(m, "n_flagged", (double)c->n_flagged);
    cJSON_AddItemToObject(m, "rotation_curl_deg", num(c->rotation_curl_deg));
    cJSON_AddItemToObject(m, "rotation_sigma_deg", num(c->rotation_sigma_deg));
    cJSON_AddItemToObject(m, "curl_ratio", num(c->curl_ratio));
    cJSON_AddBoolToObject(m, "det_sampling_fitted", c->det_sampling_fitted);
    cJSON_AddBoolToObject(m, "centre_fitted", c->centre_fitted);
    cJSON_AddBoolToObject(m, "rotation_fitted", c->rotation_fitted);
    cJSON_AddBoolToObject(m, "flip", c->geom.flip != 0);
    cJSON_AddBoolToObject(m, "flip_fitted", c->flip_fitted);
    cJSON_AddItemToObject(m, "curl_ratio_other", num(c->curl_ratio_other));
    cJSON_AddNumberToObject(m, "total_counts", c->total_counts);
    cJSON_AddNumberToObject(m, "seconds", seconds);
    return m;
}

/* The rotation is called poorly determined when its jackknife error exceeds this or the curl
 * barely depends on the angle. */
#define ROT_SIGMA_WARN_DEG 5.0
#define ROT_RATIO_WARN 0.8

static void print_summary(const char *data, const ssb4d_calibration *c, const char *outpath,
                          const char *picture, double seconds, int rotation_given, int verbose)
{
    printf("ssb4d calibrate: %s\n", data);
    printf("  data        %zux%zu scan, %zux%zu detector, %.0f counts\n", c->scan_shape[0],
           c->scan_shape[1], c->det_shape[0], c->det_shape[1], c->total_counts);
    printf("  BF disk     centroid (%.3f, %.3f) px, radius %.3f px", c->disk_centre_px[0], c->disk_centre_px[1],
           c->disk_radius_px);
    if (verbose)
        printf(" (%s threshold), edge radius %.3f px",
               c->disk_threshold_half_median ? "half-median" : c->disk_threshold_two_class ? "two-class" : "mean+std",
               c->edge_radius_px);
    printf("\n");
    if (c->centre_fitted)
        printf("  centre      (%.3f, %.3f) px (centroid)\n", c->geom.centre_px[0], c->geom.centre_px[1]);
    else
        printf("  centre      (%.3f, %.3f) px (stated; the centroid is (%.3f, %.3f))\n", c->geom.centre_px[0],
               c->geom.centre_px[1], c->disk_centre_px[0], c->disk_centre_px[1]);
    /* the library's words, as Python and the viewer report them */
    char line[320], warn[320];
    int warned = ssb4d_calibration_sampling_report(c, line, sizeof line, warn, sizeof warn);
    printf("  sampling    %s\n", line);
    if (warned) {
        char *nl = strchr(warn, '\n');
        if (nl)
            *nl = 0;
        printf("  warning     %s\n%s%s%s", warn, nl ? "              " : "", nl ? nl + 1 : "", nl ? "\n" : "");
    }
    if (verbose)
        printf("  edge        fitted, pixel model %s (%s), blur %.3f px (half-median radius %.3f px)\n",
               edge_model_name(c->edge_model), c->edge_model_stated ? "stated" : "the smaller residual",
               c->edge_blur_px, c->edge_radius_threshold_px);
    printf("  selection   radius %.3f px, %zu BF pixels\n", c->selection_radius_px, c->n_bf);
    printf("  flagged     %zu pixel%s", c->n_flagged, c->n_flagged == 1 ? "" : "s");
    for (size_t i = 0; i < c->n_flagged && i < 8; i++)
        printf("%s(%d, %d)", i ? " " : ": ", (int)((size_t)c->flagged[i] / c->det_shape[1]),
               (int)((size_t)c->flagged[i] % c->det_shape[1]));
    printf("%s\n", c->n_flagged > 8 ? " ..." : "");
    if (c->rotation_fitted) {
        printf("  rotation    %.3f deg +- %.2f (from the centre of mass", c->geom.rotation_deg, c->rotation_sigma_deg);
        if (verbose)
            printf(": its curl, ratio %.3f", c->curl_ratio);
        printf("; +180 deg is equivalent)\n");
        printf("              ssb4d fit starts from it only if it is within 1 deg (sigma); otherwise from the\n"
               "              parallax's rotation, or a search over the half-circle (this value then only\n"
               "              picks the branch the search starts on; the branch check settles it)\n");
        if (!(c->rotation_sigma_deg <= ROT_SIGMA_WARN_DEG) || !(c->curl_ratio <= ROT_RATIO_WARN))
            printf("  warning     the rotation is poorly determined by the centre of mass (low dose or\n"
                   "              weak contrast); give --rotation if it is known\n");
    } else if (rotation_given) {
        printf("  rotation    %.3f deg (given)\n", c->geom.rotation_deg);
    } else {
        printf("  rotation    not measurable (the centre-of-mass field does not vary, or the scan is\n"
               "              under 3x3); set to 0: give --rotation\n");
    }
    if (c->flip_fitted)
        printf("  detector    %s (the centre of mass: curl ratio %.3f, %.3f the other way round)\n",
               c->geom.flip ? "mirrored" : "not mirrored", c->curl_ratio, c->curl_ratio_other);
    else if (c->rotation_fitted)
        printf("  detector    handedness not decided by the centre of mass (curl ratios %.3f and %.3f):\n"
               "              ssb4d fit tests both; give --flip or --no-flip if it is known\n", c->curl_ratio,
               c->curl_ratio_other);
    else
        printf("  detector    %s (given or assumed)\n", c->geom.flip ? "mirrored" : "not mirrored");
    printf("  time        %.3f s\n", seconds);
    printf("  wrote       %s\n", outpath);
    printf("  picture     %s (mean pattern, log scale; green: BF disk; red: flagged pixels)\n", picture);
}

/* The picture's name: the calibration file's with .png in place of .json (else .png added). */
static int picture_path(const char *json, char *out, size_t n)
{
    size_t len = strlen(json);
    int w = len > 5 && !strcmp(json + len - 5, ".json") ? snprintf(out, n, "%.*s.png", (int)(len - 5), json)
                                                        : snprintf(out, n, "%s.png", json);
    return w >= 0 && (size_t)w < n ? 0 : -1;
}

/* An output that exists is refused unless --force; a folder in its place always. Also refused
 * before any work: a folder that cannot be written in. Returns 0 or CLI_EXIT_USAGE. */
static int check_output(const char *path, int force, int defaulted)
{
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "ssb4d " CMD ": %s is a folder: name a file to write (-o FILE)\n", path);
            return CLI_EXIT_USAGE;
        }
        if (!force) {
            fprintf(stderr, "ssb4d " CMD ": %s already exists (use --force to replace it, or -o FILE)\n", path);
            return CLI_EXIT_USAGE;
        }
    }
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
    if (access(dir, W_OK) != 0) {
        fprintf(stderr, "ssb4d " CMD ": cannot write %s: %s%s\n", path, strerror(errno),
                defaulted ? " (give -o FILE to write it elsewhere)" : "");
        return CLI_EXIT_USAGE;
    }
    return 0;
}

int cmd_calibrate(int argc, char **argv)
{
    static const struct option opts[] = {CLI_MICROSCOPE_OPTIONS,
                                         {"output", required_argument, 0, 'o'},
                                         {"force", no_argument, 0, OPT_FORCE},
                                         {"verbose", no_argument, 0, OPT_VERBOSE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_micro m;
    cli_micro_init(&m);
    const char *outpath = NULL;
    int force = 0, verbose = 0;
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":ho:q", opts, NULL)) != -1) {
        if (opt == 'h') {
            help(stdout);
            return CLI_EXIT_OK;
        }
        if (opt == 'o') {
            outpath = optarg;
            continue;
        }
        if (opt == OPT_FORCE || opt == OPT_VERBOSE) {
            *(opt == OPT_FORCE ? &force : &verbose) = 1;
            continue;
        }
        if (opt == '?' || opt == ':') {
            char msg[256];
            const char *what = argv[optind - 1];
            snprintf(msg, sizeof msg, "%s %s (try ssb4d calibrate --help)",
                     opt == ':' ? "missing value for" : "unknown option", what ? what : "");
            return cli_error(CMD, SSB4D_EINVAL, msg);
        }
        int h = cli_micro_handle(&m, opt, optarg);
        if (h < 0)
            return CLI_EXIT_USAGE;
        if (h == 0)
            return cli_error(CMD, SSB4D_EINVAL, "unknown option (try ssb4d calibrate --help)");
    }
    if (optind >= argc)
        return cli_error(CMD, SSB4D_EINVAL, "no DATA given (usage: ssb4d calibrate DATA [options])");
    if (argc - optind > 1) {
        char msg[512];
        snprintf(msg, sizeof msg, "one DATA file expected, got also '%s'", argv[optind + 1]);
        return cli_error(CMD, SSB4D_EINVAL, msg);
    }
    const char *data = argv[optind];
    int rc = cli_check_readable(CMD, data); /* first: before the sidecar or microscope values */
    if (rc)
        return rc;
    /* The outputs' names: by default beside DATA (checked once the values are, before any work). */
    char defpath[4096], picture[4096];
    int defaulted = !outpath;
    if (!outpath) {
        if (cli_default_calibration_path(data, defpath, sizeof defpath))
            return cli_error(CMD, SSB4D_EINVAL, "DATA's path is too long for the calibration file's name");
        outpath = defpath;
    }
    if (picture_path(outpath, picture, sizeof picture))
        return cli_error(CMD, SSB4D_EINVAL, "the output path is too long");
    /* The outputs first, as every command does: an existing one is refused before anything else
     * is looked at (then the microscope values; nothing long has run yet either way). */
    if ((rc = check_output(outpath, force, defaulted)) || (rc = check_output(picture, force, defaulted)))
        return rc;

    ssb4d_err err = {0};
    ssb4d_source *src = NULL;
    ssb4d_status st = ssb4d_source_open(data, &src, &err);
    if (st)
        return cli_error(CMD, st, err.msg);

    /* Stated beats measured (SPEC §4), as for every command and Python: what the flags, a
     * calibration file, the sidecar or DATA's record state is used; the library measures the
     * sampling and the centre all the same, and the summary compares the two. */
    ssb4d_values v;
    rc = cli_resolve(data, &m, &v);
    if (!rc)
        rc = cli_check_microscope(&v);
    if (rc) {
        ssb4d_source_close(src);
        return rc;
    }
    ssb4d_calib_params p;
    cli_values_to_calib_params(&v, m.threads, m.hot_pixels, &p);

    /* The frame blocks and per-position buffers are counted under the budget. */
    ssb4d_mem *mem = ssb4d_mem_create(cli_memory_budget(&m));
    if (!mem) {
        ssb4d_source_close(src);
        return cli_error(CMD, SSB4D_ENOMEM, "out of memory");
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ssb4d_calibration cal;
    rc = cli_job_calibrate(CMD, src, &p, mem, 0, &cal);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (m.memory_report)
        ssb4d_mem_report_print(mem, stderr);
    ssb4d_mem_destroy(mem);
    ssb4d_source_close(src);
    if (rc)
        return rc;

    ssb4d_calfile cf;
    st = ssb4d_calfile_from_calibration(&cf, &cal, &err);
    if (st) {
        ssb4d_calibration_free(&cal);
        return cli_error(CMD, st, err.msg);
    }
    /* How the rotation was obtained: measured here (the centre-of-mass curl leaves the 180°
     * branch to the fit), stated, or carried over from a file that measured it. */
    if (cal.rotation_fitted || (!isnan(v.rotation_deg) && v.rotation_measured)) {
        snprintf(cf.rotation_method, sizeof cf.rotation_method, "%s", SSB4D_CALFILE_ROT_COM);
        cf.rotation_sigma_deg = cal.rotation_fitted ? cal.rotation_sigma_deg : v.rotation_sigma_deg;
    } else if (!isnan(v.rotation_deg)) {
        snprintf(cf.rotation_method, sizeof cf.rotation_method, "%s", SSB4D_CALFILE_ROT_GIVEN);
        snprintf(cf.rotation_from, sizeof cf.rotation_from, "%s", v.rotation_from);
    } else
        snprintf(cf.rotation_method, sizeof cf.rotation_method, "%s", SSB4D_CALFILE_ROT_UNDETERMINED);
    /* The handedness is recorded when it was given (later commands hold it); a centre-of-mass
     * verdict is printed, not recorded: the fit tests both handedness on its objective. */
    if (v.flip >= 0) {
        cf.flip_stated = 1;
        snprintf(cf.flip_source, sizeof cf.flip_source, "given");
    }
    /* cli_resolve computed it already when --calibration had one to compare with. */
    if (m.data_identity[0])
        snprintf(cf.data_identity, sizeof cf.data_identity, "%s", m.data_identity);
    else if (ssb4d_data_identity(data, cf.data_identity, sizeof cf.data_identity, NULL) != 0)
        cf.data_identity[0] = 0;
    cli_calfile_acquisition(data, &cf);
    rc = CLI_EXIT_OK;
    /* The picture first: the calibration file, which later commands take, appears last. */
    if ((st = ssb4d_calibration_picture(picture, &cal, &err)) != SSB4D_OK ||
        (st = ssb4d_calfile_write(outpath, &cf, &err)) != SSB4D_OK) {
        rc = cli_error(CMD, st, err.msg);
        goto out;
    }
    if (m.json) {
        /* The calfile text as written (exact numbers) plus the measured extras. */
        char *text = ssb4d_calfile_to_json(&cf);
        cJSON *meas = measured_json(&cal, seconds);
        if (meas) {
            cJSON_AddStringToObject(meas, "written", outpath);
            cJSON_AddStringToObject(meas, "picture", picture);
        }
        char *mt = meas ? cJSON_Print(meas) : NULL;
        cJSON_Delete(meas);
        char *close = text ? strrchr(text, '}') : NULL;
        if (!close || !mt) {
            free(text);
            free(mt);
            rc = cli_error(CMD, SSB4D_ENOMEM, "out of memory (JSON output)");
            goto out;
        }
        *close = 0;
        for (size_t n = strlen(text); n && (text[n - 1] == '\n' || text[n - 1] == '\t' || text[n - 1] == ' ');)
            text[--n] = 0;
        printf("%s,\n\t\"measured\":\t%s\n}\n", text, mt);
        free(text);
        free(mt);
    } else {
        print_summary(data, &cal, outpath, picture, seconds, !isnan(p.rotation_deg), verbose);
    }
out:
    ssb4d_calfile_free(&cf);
    ssb4d_calibration_free(&cal);
    return rc;
}
