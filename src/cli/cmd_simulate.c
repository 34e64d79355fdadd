/* cmd_simulate.c — `ssb4d simulate`: multislice 4D-STEM simulation to a streaming .npy, with the
 * projected-phase ground truths and a sidecar JSON (docs/simulate.md). */
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "ssb4d_advanced.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

enum {
    OPT_PRESET = CLI_OPT_FIRST_FREE, OPT_SPECIMEN, OPT_CELLS_Z, OPT_THICKNESS, OPT_WINDOW_CELLS,
    OPT_SCAN, OPT_SCAN_CELLS, OPT_DETECTOR, OPT_GRID, OPT_KV, OPT_SEMIANGLE, OPT_C10, OPT_C12,
    OPT_PHI12, OPT_C30, OPT_ABERR, OPT_TILT, OPT_DOSE, OPT_SEED, OPT_THREADS, OPT_QUIET, OPT_FORCE,
    OPT_HELP, OPT_MEMORY, OPT_SCAN_ROTATION, OPT_DET_OVERSAMPLE, OPT_FLIP, OPT_WEDGE
};

static const char HELP[] =
    "usage: ssb4d simulate [options] -o OUT.npy|OUT.qem\n"
    "\n"
    "Multislice simulation of a 4D-STEM acquisition of a perfect crystal: uint16 Poisson counts\n"
    "(scan_row, scan_col, det_row, det_col), streamed to OUT.npy (or, for OUT.qem, straight into\n"
    "the encoded form, never holding more than one chunk), plus OUT_phase.npy,\n"
    "OUT_phase_bandlimited.npy (projected phase in rad at the scan positions) and the sidecar\n"
    "OUT.json. Every flag has a default (preset small); flags override the preset.\n"
    "\n"
    "  -o, --output FILE      output .npy or .qem (required)\n"
    "  --preset NAME          tiny (32^2 scan x 48^2 det), small (128^2 x 64^2, default),\n"
    "                         medium (256^2 x 128^2), reference (512^2 x 192^2)\n"
    "  --specimen NAME        srtio3 (perovskite [001], a = 3.905 A, default), au (fcc [001],\n"
    "                         a = 4.078 A) or si (diamond cubic [001], a = 5.431 A, 4 slices\n"
    "                         per cell)\n"
    "  --cells-z N            thickness in unit cells (default 1; 2 slices per cell, 4 for si)\n"
    "  --thickness NM         thickness in nm, rounded to whole unit cells (overrides --cells-z)\n"
    "  --wedge T0:T1          a wedge instead: the thickness rises linearly along the scan\n"
    "                         columns from T0 nm at column 0 to T1 nm at the last, rounded per\n"
    "                         column to whole unit cells (at least 1; 2 slices each); every\n"
    "                         position at its column's thickness (no pattern reuse), the\n"
    "                         detector oversampling and grid those of the thickest; recorded in\n"
    "                         the sidecar (specimen.wedge). Not with --cells-z or --thickness\n"
    "  --window-cells W       periodic simulation window, W x W unit cells (preset)\n"
    "  --scan N               scan positions per axis (preset)\n"
    "  --scan-cells S         the scan covers S x S whole unit cells, step = S*a/N (preset)\n"
    "  --scan-rotation DEG    scan rotated against the detector (default 0): scan position\n"
    "                         (i,j), (x,y) = (i,j)*step, sits at (det_row, det_col) =\n"
    "                         (x cos t + y sin t, -x sin t + y cos t), t = DEG, so DEG is the\n"
    "                         --rotation that ssb4d reconstruct needs; written to the sidecar\n"
    "                         as scan.rotation_deg. Finite, |DEG| <= 1e4. Not a multiple of\n"
    "                         90: the scan is not periodic against the crystal (like real\n"
    "                         data) and every position is simulated (no pattern reuse)\n"
    "  --flip                 a mirrored detector: every frame written transposed (det_row and\n"
    "                         det_col swapped), as a camera mounted or read out in the other\n"
    "                         handedness records it; the sidecar says detector.flip = true and\n"
    "                         ssb4d reconstructs it with --flip\n"
    "  --detector D           detector pixels per axis (preset); sampling = 1e3*lambda/L mrad\n"
    "  --det-oversample S|auto  detector oversampling (default auto): simulate a window of\n"
    "                         S*W cells and sum each SxS block of its far-field samples into one\n"
    "                         detector pixel, so every pixel integrates the intensity over its\n"
    "                         area and a probe wider than the window does not wrap; the pixel\n"
    "                         size, BF radius and mrad/px do not change. S odd (1 = point\n"
    "                         samples); auto: the smallest odd S with S*L >= 1.3 x the probe\n"
    "                         footprint (2 x max ray displacement |grad chi|/2pi over the\n"
    "                         aperture at entrance and exit, + |tilt|*t + 4 A). Costs S^2 or\n"
    "                         more in time and in grid buffers; written to the sidecar\n"
    "                         (detector.det_oversample)\n"
    "  --grid M               simulation grid M x M of the whole S*W-cell window (default auto:\n"
    "                         >= 2*S*D and antialias band >= 2*alpha/lambda)\n"
    "  --kv KV                accelerating voltage, kV (default 300)\n"
    "  --semiangle MRAD       probe convergence semi-angle, mrad (default 25)\n"
    "  --c10 NM               C10 = -defocus, nm (default -10)\n"
    "  --c12 NM               twofold astigmatism, nm (default 2)\n"
    "  --phi12 DEG            its angle from +det_row towards +det_col, degrees (default 20;\n"
    "                         the detector frame, whatever --scan-rotation)\n"
    "  --c30 NM               spherical aberration, nm (default 0)\n"
    "  --aberr LIST           any Krivanek coefficients, e.g. C21=1.5,phi21=30,C23=2 (nm, deg)\n"
    "  --tilt ROW,COL         specimen/beam tilt, mrad (default 0,0)\n"
    "  --dose E               electrons per probe position (preset: 2e4 tiny/small, 1e5 larger)\n"
    "  --seed N               random seed for the Poisson noise (default 1)\n"
    "  --threads N            worker threads (default: all cores)\n"
    "  -q, --quiet            no progress or summary on stderr (errors and warnings still print)\n"
    "  --force                replace existing outputs (without it they are refused before any\n"
    "                         work)\n"
    "  --memory SIZE          memory budget, e.g. 16G, 512M (default: the available RAM); the\n"
    "                         simulation's working set (per-thread grid buffers, a block of\n"
    "                         about 8 MiB of scan rows, for .qem one chunk of at most 128 MiB,\n"
    "                         the noise-free patterns kept for reuse: at most 1 GiB, fewer\n"
    "                         when the budget is short) is checked against it before any work\n"
    "  --memory-report        print the memory table (process footprint) on stderr\n"
    "  -h, --help             this help\n"
    "\n"
    CLI_EXIT_HELP;

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "ssb4d simulate: ");
    fprintf(stderr, fmt, arg ? arg : "");
    fputc('\n', stderr);
    return CLI_EXIT_USAGE;
}

static int parse_int(const char *s, long lo, long hi, int *out)
{
    double v;
    if (cli_parse_number(s, (double)lo, (double)hi, 1, &v))
        return -1;
    *out = (int)v;
    return 0;
}

int cmd_simulate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'},
        {"preset", required_argument, 0, OPT_PRESET},
        {"specimen", required_argument, 0, OPT_SPECIMEN},
        {"cells-z", required_argument, 0, OPT_CELLS_Z},
        {"thickness", required_argument, 0, OPT_THICKNESS},
        {"wedge", required_argument, 0, OPT_WEDGE},
        {"window-cells", required_argument, 0, OPT_WINDOW_CELLS},
        {"scan", required_argument, 0, OPT_SCAN},
        {"scan-cells", required_argument, 0, OPT_SCAN_CELLS},
        {"scan-rotation", required_argument, 0, OPT_SCAN_ROTATION},
        {"flip", no_argument, 0, OPT_FLIP},
        {"detector", required_argument, 0, OPT_DETECTOR},
        {"det", required_argument, 0, OPT_DETECTOR},
        {"grid", required_argument, 0, OPT_GRID},
        {"det-oversample", required_argument, 0, OPT_DET_OVERSAMPLE},
        {"kv", required_argument, 0, OPT_KV},
        {"semiangle", required_argument, 0, OPT_SEMIANGLE},
        {"c10", required_argument, 0, OPT_C10},
        {"c12", required_argument, 0, OPT_C12},
        {"phi12", required_argument, 0, OPT_PHI12},
        {"c30", required_argument, 0, OPT_C30},
        {"aberr", required_argument, 0, OPT_ABERR},
        {"tilt", required_argument, 0, OPT_TILT},
        {"dose", required_argument, 0, OPT_DOSE},
        {"seed", required_argument, 0, OPT_SEED},
        {"threads", required_argument, 0, OPT_THREADS},
        {"quiet", no_argument, 0, 'q'},
        {"force", no_argument, 0, OPT_FORCE},
        {"memory-report", no_argument, 0, CLI_OPT_MEMORY_REPORT},
        {"memory", required_argument, 0, OPT_MEMORY},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    /* First pass: the preset (flags override it wherever they appear). */
    const char *preset = "small";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc)
            preset = argv[i + 1];
        else if (!strncmp(argv[i], "--preset=", 9))
            preset = argv[i] + 9;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(HELP, stdout);
            return CLI_EXIT_OK;
        }
    }
    ssb4d_sim_params p;
    ssb4d_err err = {0};
    if (ssb4d_sim_params_preset(&p, preset, &err))
        return cli_error("simulate", err.code, err.msg);

    const char *out = NULL;
    double thickness_nm = NAN;
    const char *thickness_arg = NULL, *wedge_arg = NULL;
    int cells_given = 0, quiet = 0, force = 0, memory_report = 0;
    size_t memory_bytes = 0; /* 0: the available RAM */
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:hq", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case OPT_PRESET: break;
        case OPT_SPECIMEN:
            if (!strcasecmp(optarg, "srtio3"))
                p.specimen = SSB4D_SPECIMEN_SRTIO3;
            else if (!strcasecmp(optarg, "au"))
                p.specimen = SSB4D_SPECIMEN_AU;
            else if (!strcasecmp(optarg, "si"))
                p.specimen = SSB4D_SPECIMEN_SI;
            else
                return usage_error("unknown specimen '%s' (srtio3, au or si)", optarg);
            break;
        case OPT_CELLS_Z:
            if (parse_int(optarg, 1, 100000, &p.cells_z))
                return usage_error("--cells-z must be an integer 1..100000, got '%s'", optarg);
            cells_given = 1;
            break;
        case OPT_THICKNESS:
            thickness_arg = optarg;
            if (cli_parse_double(optarg, &thickness_nm) || !(thickness_nm > 0))
                return usage_error("--thickness must be > 0 nm, got '%s'", optarg);
            break;
        case OPT_WEDGE: {
            char a[64];
            const char *colon = strchr(optarg, ':');
            size_t k = colon ? (size_t)(colon - optarg) : 0;
            wedge_arg = optarg;
            if (!colon || k >= sizeof a)
                return usage_error("--wedge must be T0:T1, two thicknesses > 0 nm, got '%s'", optarg);
            memcpy(a, optarg, k);
            a[k] = 0;
            if (cli_parse_double(a, &p.wedge_nm[0]) || cli_parse_double(colon + 1, &p.wedge_nm[1]) ||
                !(p.wedge_nm[0] > 0) || !(p.wedge_nm[1] > 0))
                return usage_error("--wedge must be T0:T1, two thicknesses > 0 nm, got '%s'", optarg);
            if (p.wedge_nm[0] > 1e5 || p.wedge_nm[1] > 1e5)
                return usage_error("--wedge %s nm is absurd", optarg);
            break;
        }
        case OPT_WINDOW_CELLS:
            if (parse_int(optarg, 1, 1000, &p.window_cells))
                return usage_error("--window-cells must be an integer 1..1000, got '%s'", optarg);
            break;
        case OPT_SCAN:
            if (parse_int(optarg, -1000000, 1000000, &p.scan_n))
                return usage_error("--scan must be an integer, got '%s'", optarg);
            break;
        case OPT_SCAN_CELLS:
            if (parse_int(optarg, 1, 100000, &p.scan_cells))
                return usage_error("--scan-cells must be an integer 1..100000, got '%s'", optarg);
            break;
        case OPT_FLIP: p.det_flip = 1; break;
        case OPT_SCAN_ROTATION:
            /* cli_parse_double refuses non-finite values; beyond ±1e4 degrees is a typo */
            if (cli_parse_double(optarg, &p.scan_rotation_deg) || !(fabs(p.scan_rotation_deg) <= 1e4))
                return usage_error("--scan-rotation must be a finite angle within ±1e4 degrees, "
                                   "got '%s'", optarg);
            break;
        case OPT_DETECTOR:
            if (parse_int(optarg, -1000000, 1000000, &p.det))
                return usage_error("--detector must be an integer, got '%s'", optarg);
            break;
        case OPT_GRID:
            if (parse_int(optarg, 0, 1000000, &p.grid))
                return usage_error("--grid must be a non-negative integer, got '%s'", optarg);
            break;
        case OPT_DET_OVERSAMPLE:
            if (!strcasecmp(optarg, "auto"))
                p.det_oversample = 0;
            else if (parse_int(optarg, 1, SSB4D_SIM_OVERSAMPLE_MAX, &p.det_oversample) ||
                     p.det_oversample % 2 == 0)
                return usage_error("--det-oversample must be auto or an odd integer 1..63, got '%s'",
                                   optarg);
            break;
        case OPT_KV:
            if (cli_parse_double(optarg, &p.kv))
                return usage_error("invalid --kv '%s'", optarg);
            break;
        case OPT_SEMIANGLE:
            if (cli_parse_double(optarg, &p.semiangle_mrad))
                return usage_error("invalid --semiangle '%s'", optarg);
            break;
        case OPT_C10:
            if (cli_parse_double(optarg, &p.ab.C_nm[SSB4D_C10]))
                return usage_error("invalid --c10 '%s'", optarg);
            break;
        case OPT_C12:
            if (cli_parse_double(optarg, &p.ab.C_nm[SSB4D_C12]))
                return usage_error("invalid --c12 '%s'", optarg);
            break;
        case OPT_PHI12:
            if (cli_parse_double(optarg, &p.ab.phi_deg[SSB4D_C12]))
                return usage_error("invalid --phi12 '%s'", optarg);
            break;
        case OPT_C30:
            if (cli_parse_double(optarg, &p.ab.C_nm[SSB4D_C30]))
                return usage_error("invalid --c30 '%s'", optarg);
            break;
        case OPT_ABERR:
            {
                unsigned cm = 0, pm = 0; /* the shared parser prints its own message */
                if (cli_parse_aberr_list(optarg, &p.ab, &cm, &pm))
                    return CLI_EXIT_USAGE;
            }
            break;
        case OPT_TILT:
            if (cli_parse_pair(optarg, p.tilt_mrad))
                return usage_error("invalid --tilt '%s' (ROW,COL in mrad)", optarg);
            break;
        case OPT_DOSE:
            if (cli_parse_double(optarg, &p.dose))
                return usage_error("invalid --dose '%s'", optarg);
            break;
        case OPT_SEED: {
            errno = 0;
            char *e;
            unsigned long long v = strtoull(optarg, &e, 0);
            if (errno || *e || !*optarg || optarg[0] == '-')
                return usage_error("--seed must be a non-negative integer, got '%s'", optarg);
            p.seed = (uint64_t)v;
            break;
        }
        case OPT_THREADS:
            if (parse_int(optarg, 0, 1024, &p.threads))
                return usage_error("--threads must be an integer 0..1024, got '%s'", optarg);
            break;
        case 'q': quiet = 1; break;
        case OPT_FORCE: force = 1; break;
        case 'h': fputs(HELP, stdout); return CLI_EXIT_OK;
        case CLI_OPT_MEMORY_REPORT: memory_report = 1; break;
        case OPT_MEMORY:
            if (cli_parse_memory(optarg, &memory_bytes))
                return CLI_EXIT_USAGE;
            break;
        case ':': return usage_error("option %s needs a value", argv[optind - 1]);
        default: return usage_error("unknown option '%s' (see ssb4d simulate --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!out)
        return usage_error("%sno output given (-o OUT.npy)", "");
    if (wedge_arg && (cells_given || thickness_arg))
        return usage_error("give --wedge or %s, not both", cells_given ? "--cells-z" : "--thickness");
    if (!isnan(thickness_nm)) {
        double a = p.specimen == SSB4D_SPECIMEN_AU ? 4.078 : p.specimen == SSB4D_SPECIMEN_SI ? 5.431 : 3.905;
        double cells = floor(thickness_nm * 10.0 / a + 0.5);
        if (cells < 1)
            cells = 1;
        if (cells > 100000)
            return usage_error("--thickness %s nm is absurd", thickness_arg);
        p.cells_z = (int)cells;
    }
    ssb4d_sim_info info;
    if (ssb4d_sim_describe(&p, &info, &err))
        return cli_error("simulate", err.code, err.msg);
    {
        size_t n = strlen(out), budget = memory_bytes ? memory_bytes : ssb4d_mem_available();
        int to_qem = n >= 4 && !strcmp(out + n - 4, ".qem");
        ssb4d_sim_working_set w = ssb4d_sim_working_set_of(&p, &info, to_qem);
        if (budget && w.total > budget && w.reuse) {
            /* Keep fewer patterns for reuse rather than refuse: only the speed changes. With
             * none kept (reuse_bytes 1) the blocks still share their own scratch tables. */
            ssb4d_sim_params q = p;
            q.reuse_bytes = 1;
            ssb4d_sim_working_set w0 = ssb4d_sim_working_set_of(&q, &info, to_qem);
            if (w0.total <= budget) {
                p.reuse_bytes = budget > w0.total ? budget - w0.total : 1;
                w = ssb4d_sim_working_set_of(&p, &info, to_qem);
            } else {
                w = w0; /* the message below states the least it needs */
            }
        }
        if (budget && w.total > budget) {
            char b[6][32];
            size_t big = w.total; /* > budget here: one unit for the whole message */
            fprintf(stderr, "ssb4d simulate: the simulation does not fit in %s: it needs about %s "
                            "(grid buffers %s, blocks of rows %s, .qem chunk %s, reused "
                            "patterns %s; fewer --threads, a smaller --grid or --detector, or a lower "
                            "--det-oversample need less)\n",
                    ssb4d_size_text(b[0], budget, big, 0), ssb4d_size_text(b[1], w.total, big, 1),
                    ssb4d_size_text(b[2], w.grid, big, 1), ssb4d_size_text(b[3], w.blocks, big, 1),
                    ssb4d_size_text(b[4], w.writer, big, 1), ssb4d_size_text(b[5], w.reuse, big, 1));
            return CLI_EXIT_USAGE;
        }
    }

    /* outputs: refuse existing ones (unless --force) and unwritable folders before any work */
    {
        size_t n = strlen(out);
        size_t stem = (n >= 4 && (!strcmp(out + n - 4, ".npy") || !strcmp(out + n - 4, ".qem"))) ? n - 4 : n;
        const char *suffix[4] = {"", "_phase.npy", "_phase_bandlimited.npy", ".json"};
        char *path = malloc(n + 32);
        if (!path)
            return cli_error("simulate", SSB4D_ENOMEM, "out of memory");
        for (int i = 0; i < 4; i++) {
            if (i == 0)
                strcpy(path, out);
            else {
                memcpy(path, out, stem);
                strcpy(path + stem, suffix[i]);
            }
            if (!force && access(path, F_OK) == 0) {
                fprintf(stderr, "ssb4d simulate: %s already exists (use --force to replace it)\n", path);
                free(path);
                return CLI_EXIT_USAGE;
            }
        }
        strcpy(path, out);
        char *slash = strrchr(path, '/');
        if (slash)
            slash[slash == path ? 1 : 0] = 0;
        const char *dir = slash ? path : ".";
        if (access(dir, W_OK) != 0) {
            fprintf(stderr, "ssb4d simulate: cannot write %s: %s\n", out, strerror(errno));
            free(path);
            return CLI_EXIT_USAGE;
        }
        free(path);
    }

    /* the command line for the sidecar */
    size_t len = 32;
    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *cmd = malloc(len);
    if (!cmd)
        return cli_error("simulate", SSB4D_ENOMEM, "out of memory");
    strcpy(cmd, "ssb4d");
    for (int i = 0; i < argc; i++) {
        strcat(cmd, " ");
        strcat(cmd, argv[i]);
    }
    cli_progress pb;
    cli_progress_start(&pb, "simulate", quiet);
    if (pb.enabled) { /* the shared bar, with the rate in scan positions per second */
        cli_progress_set_rate(&pb, (double)p.scan_n * (double)p.scan_n, "positions");
        p.progress = cli_progress_cb;
        p.progress_user = &pb;
    }
    if (!quiet && wedge_arg)
        fprintf(stderr, "ssb4d simulate: a wedge of %d to %d cells along the scan columns\n",
                ssb4d_sim_cells_at(&p, 0), ssb4d_sim_cells_at(&p, p.scan_n - 1));
    if (!quiet)
        fprintf(stderr,
                "ssb4d simulate: %s, %d cell(s) (%.3g nm), %d×%d scan (step %.5g Å, rotation %g°) "
                "× %d×%d detector (%.5g mrad/px, BF radius %.2f px), grid %d, detector "
                "oversampling %d%s (window %d cells = %.4g Å, probe footprint %.3g Å)\n",
                p.specimen == SSB4D_SPECIMEN_AU ? "Au" : p.specimen == SSB4D_SPECIMEN_SI ? "Si" : "SrTiO3",
                (int)floor(info.thickness_nm * 10.0 / info.lattice_A + 0.5), info.thickness_nm,
                p.scan_n, p.scan_n, info.scan_step_A, p.scan_rotation_deg, p.det, p.det,
                info.det_sampling_mrad, info.bf_radius_px, info.grid, info.det_oversample,
                p.det_oversample ? "" : " (auto)", info.det_oversample * p.window_cells,
                info.sim_window_A, info.probe_footprint_A);
    ssb4d_mem *mem = memory_report ? ssb4d_mem_create(0) : NULL;
    ssb4d_mem_stage_begin(mem, "simulate");
    ssb4d_status st = ssb4d_simulate(&p, out, force, cmd, &info, &err);
    if (!st)
        cli_progress_done(&pb);
    else if (pb.enabled && pb.last_print >= 0)
        fputc('\n', stderr); /* the error goes on a line of its own */
    ssb4d_mem_stage_end(mem);
    if (mem) {
        /* The simulator's buffers are small per-thread FFT planes: the footprint column is the
         * figure that shows the streaming bound. */
        ssb4d_mem_report_print(mem, stderr);
        ssb4d_mem_destroy(mem);
    }
    free(cmd);
    if (st)
        return cli_error("simulate", st, err.msg);
    if (info.n_clamped)
        fprintf(stderr, "ssb4d simulate: warning: %zu counts clamped at 65535 (lower --dose)\n",
                info.n_clamped);
    if (!quiet)
        fprintf(stderr, "ssb4d simulate: wrote %s in %.2f s (mean pattern sum %.5f over the grid, "
                        "%.5f on the detector; max count %u)\n",
                out, info.seconds, info.mean_sum_full, info.mean_sum_detector,
                (unsigned)info.max_count);
    return CLI_EXIT_OK;
}
