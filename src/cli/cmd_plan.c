/* cmd_plan.c — `ssb4d plan DATA | --shape RxCxDRxDC --bf N [--memory SIZE] [--json]`: the memory
 * plan of a session (SPEC 9): per stage the predicted peak and after, the tiles, the time class;
 * "does not fit" with the smallest budget that would; the "what fits which machine" table. */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/cli_report.h"
#include "cli/commands.h"
#include "plan/plan.h"
#include "common/parallel.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "plan"

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d plan DATA [options]\n"
            "       ssb4d plan --shape 512x512x192x192 --bf 8939 [options]\n\n"
            "Plans the memory of a session (ssb4d session) under a budget: how G is held (float32\n"
            "resident; the outer BF pixels streamed, i.e. rebuilt from the encoded data by every pass;\n"
            "a half-precision preview copy), the decode block, the group of planes a pass\n"
            "materialises, and per stage the predicted tracked peak and after, the tiles and a time\n"
            "class (from a machine profile: the stated rates of the 2-core reference machine, or this\n"
            "machine's with --measure). Ends with what fits machines of 8 to 128 GB.\n"
            "With DATA the BF pixels are counted by calibrating it (a full read of the data); the\n"
            "encoded size is that of the .qem file.\n\n"
            "  --shape RxCxDRxDC     scan rows x scan cols x detector rows x detector cols\n"
            "  --bf N                selected BF pixels (with --shape)\n"
            "  --fit-bf N            the fit's pixels (default N: the fit radius is 1)\n"
            "  --encoded SIZE        resident encoded data (default with --shape: the uint16 counts\n"
            "                        / 13.1, the ratio of the reference workload; 0 for data on disk)\n"
            "  --upsample F          preview upsampling 1, 2, 3, 4 or 8 (default: auto from DATA, else 2)\n"
            "  --region RxC          region refit shape (default 256x256, half the scan below 512);\n"
            "                        0x0: no region refit\n"
            "  --preview-precision P auto, float or half\n"
            "  --rotation-fitted     with --shape: the calibration fits the rotation (CoM planes) and\n"
            "                        the fit searches it (a k table per candidate's rotation)\n"
            "  --measure             time this machine's passes first (about a second) and take the\n"
            "                        times from them instead of the stated profile\n"
            "  -h, --help            this help\n\n%s\n"
            CLI_EXIT_HELP_BEGIN ";\n"
            "3 the session does not fit in the budget (the plan is still printed).\n",
            CLI_MICROSCOPE_HELP);
}

enum { OPT_SHAPE = CLI_OPT_FIRST_FREE, OPT_BF, OPT_FIT_BF, OPT_ENCODED, OPT_UPSAMPLE, OPT_REGION, OPT_PREVIEW,
       OPT_ROT_FITTED, OPT_MEASURE };

static int parse_dims(const char *s, size_t *out, int n)
{
    const char *p = s;
    for (int i = 0; i < n; i++) {
        char *e;
        unsigned long long v = strtoull(p, &e, 10);
        if (e == p || (i < n - 1 && *e != 'x') || (i == n - 1 && *e) || v > 1000000)
            return -1;
        out[i] = (size_t)v;
        p = e + 1;
    }
    return 0;
}

static int parse_count(const char *s, size_t *out)
{
    char *e;
    unsigned long long v = strtoull(s, &e, 10);
    if (e == s || *e || v == 0 || v > 100000000ULL || s[0] == '-')
        return -1;
    *out = (size_t)v;
    return 0;
}

int cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {CLI_MICROSCOPE_OPTIONS,
                                         {"shape", required_argument, 0, OPT_SHAPE},
                                         {"bf", required_argument, 0, OPT_BF},
                                         {"fit-bf", required_argument, 0, OPT_FIT_BF},
                                         {"encoded", required_argument, 0, OPT_ENCODED},
                                         {"upsample", required_argument, 0, OPT_UPSAMPLE},
                                         {"region", required_argument, 0, OPT_REGION},
                                         {"preview-precision", required_argument, 0, OPT_PREVIEW},
                                         {"rotation-fitted", no_argument, 0, OPT_ROT_FITTED},
                                         {"measure", no_argument, 0, OPT_MEASURE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_micro m;
    cli_micro_init(&m);
    ssb4d_plan_input in;
    ssb4d_plan_input_default(&in);
    size_t shape[4] = {0}, region[2] = {(size_t)-1, (size_t)-1};
    int have_shape = 0, have_encoded = 0, measure = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hq", opts, NULL)) != -1) {
        int r = cli_micro_handle(&m, c, optarg);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r)
            continue;
        switch (c) {
        case OPT_SHAPE:
            if (parse_dims(optarg, shape, 4)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --shape (e.g. 512x512x192x192)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            have_shape = 1;
            break;
        case OPT_BF:
        case OPT_FIT_BF:
            if (parse_count(optarg, c == OPT_BF ? &in.n_bf : &in.n_fit_bf)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --%s (a positive count)\n", optarg,
                        c == OPT_BF ? "bf" : "fit-bf");
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_ENCODED:
            if (!strcmp(optarg, "0"))
                in.encoded_bytes = 0;
            else if (ssb4d_parse_size(optarg, &in.encoded_bytes)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --encoded (a size such as 2G)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            have_encoded = 1;
            break;
        case OPT_UPSAMPLE: {
            size_t f;
            if (parse_count(optarg, &f) || (f != 1 && f != 2 && f != 3 && f != 4 && f != 8)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --upsample (1, 2, 3, 4 or 8)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            in.upsample = (int)f;
            break;
        }
        case OPT_REGION:
            if (parse_dims(optarg, region, 2)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --region (e.g. 256x256, or 0x0)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_PREVIEW:
            if (cli_parse_preview(optarg, &in.preview))
                return CLI_EXIT_USAGE;
            break;
        case OPT_ROT_FITTED: in.rotation_fitted = 1; break;
        case OPT_MEASURE: measure = 1; break;
        case 'h': help(stdout); return CLI_EXIT_OK;
        case ':':
            fprintf(stderr, "ssb4d plan: option %s needs a value (see --help)\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        default:
            fprintf(stderr, "ssb4d plan: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        }
    }
    const char *data = optind < argc ? argv[optind] : NULL;
    if (optind < argc - 1 || (!data && !have_shape) || (data && have_shape)) {
        fprintf(stderr, "ssb4d plan: give either DATA or --shape with --bf (try --help)\n");
        return CLI_EXIT_USAGE;
    }
    if (data && cli_check_readable(CMD, data)) /* first: before the microscope values */
        return CLI_EXIT_USAGE;
    ssb4d_err err = {0};
    ssb4d_geometry geom; /* DATA's calibrated geometry, for the plan (outlives the calibration) */
    if (have_shape) {
        if (!in.n_bf) {
            fprintf(stderr, "ssb4d plan: --shape needs --bf N, the number of selected BF pixels\n");
            return CLI_EXIT_USAGE;
        }
        memcpy(in.scan, shape, 2 * sizeof *shape);
        memcpy(in.det, shape + 2, 2 * sizeof *shape);
        if (!have_encoded)
            in.encoded_bytes = (size_t)((double)shape[0] * shape[1] * shape[2] * shape[3] * 2.0 / 13.1);
        if (!in.upsample)
            in.upsample = 2;
    } else {
        /* DATA: calibrate it for the exact BF selection, as the session will. */
        ssb4d_source *src = NULL;
        ssb4d_status st = ssb4d_source_open(data, &src, &err);
        if (st)
            return cli_error(CMD, st, err.msg);
        cli_values v;
        int rc = cli_resolve(data, &m, &v);
        if (!rc)
            rc = cli_check_microscope(&v);
        if (rc) {
            ssb4d_source_close(src);
            return rc;
        }
        ssb4d_calib_params cp;
        cli_values_to_calib_params(&v, m.threads, m.hot_pixels, &cp);
        ssb4d_calibration cal;
        if (!m.json && !m.quiet)
            fprintf(stderr, "ssb4d plan: calibrating %s for its BF pixels\n", data);
        st = ssb4d_calibrate(src, &cp, &cal, &err);
        size_t sh[4];
        ssb4d_source_shape(src, sh);
        ssb4d_source_close(src);
        if (st)
            return cli_error(CMD, st, err.msg);
        size_t fit_bf = in.n_fit_bf; /* --fit-bf, if given, wins */
        ssb4d_fit_params fp;
        ssb4d_fit_params_default(&fp);
        plan_input_from_calibration(&in, &cal, sh, fp.fit_radius);
        if (fit_bf)
            in.n_fit_bf = fit_bf;
        in.rotation_fitted = isnan(cp.rotation_deg);
        if (!in.upsample)
            in.upsample = ssb4d_upsample_auto(&cal.geom);
        geom = cal.geom; /* the plan counts the band's and the parallax's bins from it */
        in.geometry = &geom;
        ssb4d_calibration_free(&cal);
        if (!have_encoded)
            in.encoded_bytes = cli_job_encoded_bytes(data);
    }
    if (region[0] == (size_t)-1) {
        region[0] = ssb4d_plan_region_side(in.scan[0]);
        region[1] = ssb4d_plan_region_side(in.scan[1]);
    }
    if ((region[0] || region[1]) && (region[0] < 32 || region[1] < 32 || region[0] > in.scan[0] || region[1] > in.scan[1])) {
        fprintf(stderr, "ssb4d plan: the region %zux%zu must be at least 32x32 and inside the %zux%zu scan\n",
                region[0], region[1], in.scan[0], in.scan[1]);
        return CLI_EXIT_USAGE;
    }
    in.region[0] = region[0], in.region[1] = region[1];
    in.threads = m.threads;
    in.memory_bytes = cli_memory_budget(&m);
    /* The session's fit: the rotation held when it was given, else searched with the aberrations. */
    ssb4d_fit_params fit;
    ssb4d_fit_params_default(&fit);
    fit.rotation_given = !in.rotation_fitted;
    in.fit = &fit;
    ssb4d_machine_profile prof;
    if (measure) {
        if (ssb4d_machine_profile_measure(m.threads, &prof, &err))
            return cli_error(CMD, err.code, err.msg);
        in.profile = &prof;
    }
    ssb4d_plan p;
    ssb4d_status st = ssb4d_plan_make(&in, &p, &err);
    if (st)
        return cli_error(CMD, st, err.msg);
    if (m.json) {
        cJSON *j = cli_plan_json(&p, &in);
        char *t = cJSON_PrintUnformatted(j);
        printf("%s\n", t);
        free(t);
        cJSON_Delete(j);
    } else {
        printf("plan for %zux%zu scan x %zux%zu detector, %zu BF pixels (%zu fit), %d threads\n", in.scan[0],
               in.scan[1], in.det[0], in.det[1], in.n_bf, in.n_fit_bf ? in.n_fit_bf : in.n_bf,
               ssb4d_threads_resolve(in.threads));
        cli_plan_print(stdout, &p, &in);
        printf("times from the %s profile\n", p.profile_source);
    }
    return p.fits ? CLI_EXIT_OK : 3;
}
