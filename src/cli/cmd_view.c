/* cmd_view.c — `ssb4d view [DATA]`: the browser viewer. Opens the session the way fit does
 * (cli_session: the values, DATA or the built-in dataset, the budget), planned as the viewer's
 * session, and hands it to the server (src/view/), which prints the URL with its token and serves
 * 127.0.0.1 only until Ctrl-C or SIGTERM. */
#include "cli/cli_common.h"
#include "cli/cli_mpi.h"
#include "cli/cli_session.h"
#include "cli/commands.h"
#include "ssb4d_view.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { OPT_PORT = CLI_OPT_FIRST_FREE, OPT_NO_FIT, OPT_FORCE, OPT_OUTPUT, OPT_BASE_URL, OPT_ALLOW_HOST };
#define MAX_ALLOW_HOSTS 8

/* --base-url: "/a/b" (a trailing slash dropped; "/" alone is no prefix). Path characters only:
 * the prefix is matched byte for byte and printed into the URL and a Location header. */
static int base_url(const char *a, char *out, size_t cap)
{
    size_t n = strlen(a);
    while (n > 1 && a[n - 1] == '/')
        n--;
    int ok = a[0] == '/' && n < cap &&
             strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._~-") >= n;
    for (size_t i = 0; ok && i + 1 < n; i++)
        ok = !(a[i] == '/' && (a[i + 1] == '/' || (a[i + 1] == '.' && (i + 2 >= n || a[i + 2] == '/' || a[i + 2] == '.'))));
    if (!ok) {
        fprintf(stderr, "ssb4d view: --base-url must be a path like /user/me/proxy/8765 (letters, digits, "
                        "'/', '.', '_', '~', '-'; no '//' or '..')\n");
        return -1;
    }
    snprintf(out, cap, "%.*s", (int)(n == 1 ? 0 : n), a);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ssb4d view [DATA] [options]\n\n"
            "Serves the viewer on http://127.0.0.1:PORT/ (this machine only) and prints its URL, which\n"
            "carries a random token: open it in a browser (on a remote machine, through an SSH tunnel:\n"
            "ssh -L 8765:127.0.0.1:8765 HOST, then the printed URL; see docs/viewer.md). The page fits\n"
            "on start (or starts from --calibration's aberrations, showing the fit that file records),\n"
            "then steers the session: sliders for C10, C12, phi12 and rotation with live previews,\n"
            "the exact loss on release, the FFT, region refits, Fit Regions, Save calibration. Without\n"
            "DATA it opens the built-in simulated dataset (as ssb4d demo). Nothing else is opened;\n"
            "Ctrl-C or SIGTERM stops it.\n\n"
            "  --port N              the port (default 8765; 0: any free port, as printed)\n"
            "  --no-fit              do not fit on start (start from --calibration's values, else 0)\n"
            "  -o, --output DIR      the output folder: Save writes only into it (default: the\n"
            "                        current folder)\n"
            "  --force               Save may replace an existing file there when the page's\n"
            "                        \"replace\" box is ticked (without --force, never)\n"
            "  --base-url PREFIX     serve every route under PREFIX (e.g. /user/me/proxy/8765 behind\n"
            "                        jupyter-server-proxy); the printed URL includes it\n"
            "  --allow-host NAME     also accept the Host NAME (a proxy that rewrites Host; up to 8\n"
            "                        times); the token is still required\n"
            CLI_BACKEND_HELP
            "  -h, --help            this help\n\n"
            "Save calibration writes the file name typed on the page (default calibration.json; a\n"
            "plain name ending in .json) into the output folder, and refuses to replace a file unless\n"
            "the server was started with --force and \"replace\" is ticked; ssb4d reconstruct\n"
            "--calibration reproduces the viewer's image and loss from it bit for bit.\n\n"
            "%s\n" CLI_EXIT_HELP,
            CLI_MICROSCOPE_HELP);
}

int cmd_view(int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_MICROSCOPE_OPTIONS,
        CLI_BACKEND_OPTION,
        {"port", required_argument, 0, OPT_PORT},
        {"no-fit", no_argument, 0, OPT_NO_FIT},
        {"force", no_argument, 0, OPT_FORCE},
        {"output", required_argument, 0, OPT_OUTPUT},
        {"base-url", required_argument, 0, OPT_BASE_URL},
        {"allow-host", required_argument, 0, OPT_ALLOW_HOST},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    cli_micro m;
    cli_micro_init(&m);
    int port = 8765, no_fit = 0, force = 0, c, n_hosts = 0;
    const char *output = ".", *hosts[MAX_ALLOW_HOSTS];
    char base[256] = "";
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ho:q", opts, NULL)) != -1) {
        int r = cli_micro_handle(&m, c, optarg);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        switch (c) {
        case 'h': usage(stdout); return 0;
        case OPT_PORT: {
            double p;
            if (cli_parse_number(optarg, 0, 65535, 1, &p)) {
                fprintf(stderr, "ssb4d view: --port must be 0..65535\n");
                return CLI_EXIT_USAGE;
            }
            port = (int)p;
            break;
        }
        case OPT_NO_FIT: no_fit = 1; break;
        case OPT_FORCE: force = 1; break;
        case 'o':
        case OPT_OUTPUT: output = optarg; break;
        case OPT_BASE_URL:
            if (base_url(optarg, base, sizeof base))
                return CLI_EXIT_USAGE;
            break;
        case OPT_ALLOW_HOST:
            if (n_hosts == MAX_ALLOW_HOSTS || !*optarg || strlen(optarg) > 253 ||
                strspn(optarg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") != strlen(optarg)) {
                fprintf(stderr, "ssb4d view: --allow-host takes a host name (letters, digits, '.', '-', "
                                "an optional :port), up to %d times\n", MAX_ALLOW_HOSTS);
                return CLI_EXIT_USAGE;
            }
            hosts[n_hosts++] = optarg;
            break;
        case ':':
            fprintf(stderr, "ssb4d view: option %s needs a value\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        default:
            fprintf(stderr, "ssb4d view: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        }
    }
    if (argc - optind > 1) {
        fprintf(stderr, "ssb4d view: expected at most one DATA file (see --help)\n");
        return CLI_EXIT_USAGE;
    }
    const char *data = optind < argc ? argv[optind] : NULL;
    if (!data && (m.calibration_path || m.sidecar_path)) {
        fprintf(stderr, "ssb4d view: the built-in dataset has its own calibration (no --calibration or "
                        "--sidecar without DATA)\n");
        return CLI_EXIT_USAGE;
    }
    if (data && cli_check_readable("view", data))
        return CLI_EXIT_USAGE;
    /* The output folder, absolute: Save writes there whatever folder the server runs in. */
    char outdir[PATH_MAX];
    struct stat so;
    if (!realpath(output, outdir) || stat(outdir, &so) || !S_ISDIR(so.st_mode) || access(outdir, W_OK)) {
        fprintf(stderr, "ssb4d view: the output folder %s %s\n", output,
                access(output, F_OK) ? "does not exist" : "is not a folder this user can write to");
        return CLI_EXIT_USAGE;
    }
    int rc = cli_backend_check("view", m.backend, NULL); /* before any note, thread or port */
    if (rc)
        return rc;
    if (data && cli_auto_calibration("view", data, &m, m.quiet))
        return CLI_EXIT_USAGE;
    /* Before any thread exists (the simulation's, the server's): the signals are read through a
     * signalfd by the serving thread, and no other thread may take them. */
    if (view_block_signals()) {
        fprintf(stderr, "ssb4d view: cannot block SIGINT/SIGTERM\n");
        return CLI_EXIT_INTERNAL;
    }
    view_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.port = port;
    cfg.quiet = m.quiet;
    cfg.fit_on_start = !no_fit;
    cfg.data_name = data ? data : "built-in dataset";
    cfg.save_dir = outdir;
    cfg.force = force;
    cfg.base_url = base;
    cfg.allow_hosts = hosts;
    cfg.n_allow_hosts = n_hosts;
    cfg.url_out = stdout;
    cfg.dist = cli_dist();
    ssb4d_err err = {0};
    view_server *v = view_create(&cfg, &err);
    if (!v)
        return cli_error("view", err.code, err.msg);

    ssb4d_fit_params fp;
    ssb4d_fit_params_default(&fp);
    cli_session_req rq;
    memset(&rq, 0, sizeof rq);
    rq.data = data;
    rq.m = &m;
    rq.fit = &fp; /* the person may press Fit even with --no-fit: the plan holds one */
    rq.image_floats = 3; /* one image in flight and, for the amplitude view, the complex object */
    rq.viewer = 1;
    rq.progress = view_progress;
    rq.progress_user = v;
    cli_session cs;
    ssb4d_aberrations truth;
    rc = cli_session_open("view", &rq, &cs);
    if (!rc) {
        view_config *vc = view_cfg(v);
        /* A calibration file's aberrations are the start: no fit then (the truth of a simulator's
         * sidecar is not: the viewer fits as a person would on real data). */
        if (cs.v.has_ab && !cs.v.ab_from_truth) {
            vc->fit_on_start = 0;
            vc->ab = &cs.v.ab;
        }
        if (cs.v.has_thick)
            vc->thick = &cs.v.thick;
        vc->calibration = m.calibration_path; /* the fit it records is the page's result */
        if (!data && isfinite(cs.truth[0])) { /* the built-in dataset: the page shows its truth */
            memset(&truth, 0, sizeof truth);
            truth.C_nm[SSB4D_C10] = cs.truth[0];
            truth.C_nm[SSB4D_C12] = cs.truth[1];
            truth.phi_deg[SSB4D_C12] = cs.truth[2];
            vc->truth = &truth;
        }
        if (!cli_is_root()) { /* under mpirun: rank 0 serves, this rank computes its share */
            if (view_follow(v, cs.s, &err))
                rc = cli_error("view", err.code, err.msg);
        } else if (view_serve(v, cs.s, &err))
            rc = cli_error("view", err.code == SSB4D_EIO ? SSB4D_EINVAL : err.code, err.msg);
    }
    cli_session_close(&cs);
    view_destroy(v);
    return rc;
}
