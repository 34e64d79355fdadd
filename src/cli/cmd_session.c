/* cmd_session.c — `ssb4d session DATA [--script S.json] [--memory SIZE] [--json]`: replays a
 * typical viewer session (the seed document's) under a budget and prints its stage table (issue 5). */
#include "cli/cli_common.h"
#include "cli/cli_mpi.h"
#include "cli/cli_report.h"
#include "cli/cli_session.h"
#include "cli/commands.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CMD "session"

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d session DATA [options]\n\n"
            "Replays a typical interactive viewer session on DATA and measures every stage:\n"
            "load, calibrate, G build, fit (with the 180-degree branch check), an upsampled preview\n"
            "with its FFT, 20 drag previews, 3 releases (preview + loss over all BF pixels), a\n"
            "256x256 region refit (half the scan below 512), the next full preview and saving the\n"
            "calibration. The budget (--memory) decides how G is held (ssb4d plan shows the same\n"
            "decisions and predicts this table); a table of tracked peak / after, cache, footprint\n"
            "and seconds per stage follows, with the planned peak / after beside it.\n\n"
            "  --script FILE         session script JSON: {\"upsample\": 2|\"auto\", \"fft\": true,\n"
            "                        \"drags\": 20, \"releases\": 3, \"region\": {\"rows\": [r0, r1],\n"
            "                        \"cols\": [c0, c1]} | \"centre\" | null, \"save\": true}\n"
            "  --preview-precision P auto (half only when float32 does not fit), float or half\n"
            "  --hashes              SHA-256 of G and of the previews' phase (slower)\n"
            CLI_BACKEND_HELP
            "  -o, --output DIR      where \"save calibration\" writes calibration.json\n"
            "                        (default: the calibration is serialised, not written)\n"
            "  --force               replace DIR/calibration.json if it exists (without it an\n"
            "                        existing one is refused before any work)\n"
            "  -h, --help            this help\n\n%s\n"
            "-q also drops the stage lines on stderr.\n"
            CLI_EXIT_HELP,
            CLI_MICROSCOPE_HELP);
}

enum { OPT_SCRIPT = CLI_OPT_FIRST_FREE, OPT_PREVIEW, OPT_HASHES, OPT_FORCE };

static void on_stage(void *user, const char *name)
{
    if (!*(int *)user)
        fprintf(stderr, "ssb4d session: %s\n", name);
}

int cmd_session(int argc, char **argv)
{
    static const struct option opts[] = {CLI_MICROSCOPE_OPTIONS,
                                         CLI_BACKEND_OPTION,
                                         {"script", required_argument, 0, OPT_SCRIPT},
                                         {"preview-precision", required_argument, 0, OPT_PREVIEW},
                                         {"hashes", no_argument, 0, OPT_HASHES},
                                         {"output", required_argument, 0, 'o'},
                                         {"force", no_argument, 0, OPT_FORCE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_micro m;
    cli_micro_init(&m);
    const char *script = NULL, *out_dir = NULL;
    ssb4d_preview_precision prec = SSB4D_PREVIEW_AUTO;
    int hashes = 0, force = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:qh", opts, NULL)) != -1) {
        int r = cli_micro_handle(&m, c, optarg);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r)
            continue;
        switch (c) {
        case OPT_SCRIPT: script = optarg; break;
        case OPT_PREVIEW:
            if (cli_parse_preview(optarg, &prec))
                return CLI_EXIT_USAGE;
            break;
        case OPT_HASHES: hashes = 1; break;
        case 'o': out_dir = optarg; break;
        case OPT_FORCE: force = 1; break;
        case 'h': help(stdout); return CLI_EXIT_OK;
        case ':':
            fprintf(stderr, "ssb4d session: option %s needs a value (see --help)\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        default:
            fprintf(stderr, "ssb4d session: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "ssb4d session: expected one DATA argument (try --help)\n");
        return CLI_EXIT_USAGE;
    }
    const char *data = argv[optind];
    /* A missing DATA is the first thing to say, before the script or the microscope values. */
    int rc = cli_check_readable(CMD, data);
    if (rc)
        return rc;
    /* Then the output the session's "save calibration" stage writes, before any work. */
    if (out_dir) {
        char path[4096];
        struct stat sb;
        if (stat(out_dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "ssb4d session: %s exists and is not a folder\n", out_dir);
            return CLI_EXIT_USAGE;
        }
        snprintf(path, sizeof path, "%s/calibration.json", out_dir);
        if ((rc = cli_check_output(CMD, path, force, ", or -o DIR")))
            return rc;
    }
    const char *backend = NULL;
    if ((rc = cli_backend_check(CMD, m.backend, &backend)))
        return rc;
    ssb4d_err err = {0};
    ssb4d_session_script s;
    if (script) {
        if (ssb4d_session_script_read(script, &s, &err))
            return cli_error(CMD, err.code, err.msg);
    } else
        ssb4d_session_script_default(&s);
    ssb4d_values v;
    if ((rc = cli_resolve(data, &m, &v)))
        return rc;
    if ((rc = cli_check_microscope(&v)))
        return rc;
    ssb4d_session_params p;
    ssb4d_session_params_default(&p);
    cli_values_to_calib_params(&v, m.threads, m.hot_pixels, &p.session.calib);
    p.session.memory_bytes = cli_memory_budget(&m);
    p.session.preview = prec;
    p.session.threads = m.threads;
    p.session.backend = m.backend;
    p.session.device_memory_bytes = m.device_memory_bytes;
    p.out_dir = cli_is_root() ? out_dir : NULL; /* under mpirun, rank 0 writes (cli_mpi.h) */
    p.hashes = hashes;
    p.session.dist = cli_dist();
    int quiet = m.quiet || m.json || !cli_is_root();
    p.stage = on_stage;
    p.user = &quiet;
    ssb4d_session_report *r = calloc(1, sizeof *r);
    if (!r)
        return cli_error(CMD, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = ssb4d_session_run(data, &p, &s, r, &err);
    if (st) {
        int too_small = r->does_not_fit;
        free(r);
        rc = cli_error(CMD, st, err.msg);
        return too_small ? CLI_EXIT_USAGE : rc;
    }
    if (m.json) {
        cJSON *j = cli_session_json(r);
        cJSON_AddStringToObject(j, "backend", backend);
        char *t = cJSON_PrintUnformatted(j);
        printf("%s\n", t);
        free(t);
        cJSON_Delete(j);
    } else {
        cli_session_print(stdout, r);
        printf("backend: %s\n", backend);
    }
    free(r);
    return CLI_EXIT_OK;
}
