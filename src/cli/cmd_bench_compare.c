/* cmd_bench_compare.c — `ssb4d bench compare OLD.json NEW.json`: the table of two benchmark
 * records and a verdict by exit status, so CI can fail on a slowdown, a memory growth or a
 * changed result (SPEC §10). */
#include "cli/cmd_bench_compare.h"

#include "cli/cli_common.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define CMD "bench compare"

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d bench compare OLD.json NEW.json [--time-ratio R] [--min-seconds S]\n"
            "                           [--mem-ratio R] [--mem-abs GIB] [--allow-hash-change]\n\n"
            "Compares two records written by `ssb4d bench run`: stages are matched by name and a\n"
            "table shows each stage's median time, each memory metric (GiB) and the SHA-256 of G,\n"
            "the phase and the fit's trial trace, old beside new. It fails when\n"
            "  - a stage's median time grew by more than R (new > old * (1 + R)), unless both\n"
            "    medians are below S seconds (shown as \"not judged\");\n"
            "  - a memory metric (per stage: peak, after, cache, RSS peak, device peak; and the\n"
            "    session peaks) grew by more than R *and* by more than GIB;\n"
            "  - a hash that both records carry changed (unless --allow-hash-change);\n"
            "  - a stage of OLD is missing from NEW (a stage only NEW has is just reported).\n"
            "Different workloads or settings are noted, and compared anyway.\n\n"
            "  --time-ratio R        allowed relative time growth (default 0.10)\n"
            "  --min-seconds S       times below this in both records are not judged (default 0.05)\n"
            "  --mem-ratio R         allowed relative memory growth (default 0.10)\n"
            "  --mem-abs GIB         allowed absolute memory growth in GiB (default 0.25)\n"
            "  --allow-hash-change   report changed hashes without failing\n"
            CLI_QUIET_HELP
            "  -h, --help            this help\n\n"
            "exit status: 0 nothing regressed, 1 a regression (listed on the last line), 2 usage error\n"
            "or bad input (a missing, unreadable or malformed record, another schema: one line on stderr).\n");
}

enum { OPT_TIME_RATIO = CLI_OPT_FIRST_FREE, OPT_MIN_SECONDS, OPT_MEM_RATIO, OPT_MEM_ABS, OPT_ALLOW_HASH };

/* A finite value >= 0 for flag `name`, or one line on stderr and -1. */
static int parse_nonneg(const char *name, const char *arg, double *out)
{
    double v;
    if (cli_parse_double(arg, &v) != 0 || v < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s wants a number >= 0, got '%.100s'", name, arg);
        cli_error(CMD, SSB4D_EINVAL, msg);
        return -1;
    }
    *out = v;
    return 0;
}

int cmd_bench_compare(int argc, char **argv)
{
    static const struct option opts[] = {{"time-ratio", required_argument, 0, OPT_TIME_RATIO},
                                         {"min-seconds", required_argument, 0, OPT_MIN_SECONDS},
                                         {"mem-ratio", required_argument, 0, OPT_MEM_RATIO},
                                         {"mem-abs", required_argument, 0, OPT_MEM_ABS},
                                         {"allow-hash-change", no_argument, 0, OPT_ALLOW_HASH},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    ssb4d_bench_compare_opts o;
    ssb4d_bench_compare_opts_default(&o);
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":hq", opts, NULL)) != -1) {
        double gib;
        switch (opt) {
        case 'h':
            help(stdout);
            return CLI_EXIT_OK;
        case OPT_TIME_RATIO:
            if (parse_nonneg("--time-ratio", optarg, &o.time_ratio))
                return CLI_EXIT_USAGE;
            break;
        case OPT_MIN_SECONDS:
            if (parse_nonneg("--min-seconds", optarg, &o.min_seconds))
                return CLI_EXIT_USAGE;
            break;
        case OPT_MEM_RATIO:
            if (parse_nonneg("--mem-ratio", optarg, &o.mem_ratio))
                return CLI_EXIT_USAGE;
            break;
        case OPT_MEM_ABS:
            if (parse_nonneg("--mem-abs", optarg, &gib))
                return CLI_EXIT_USAGE;
            o.mem_abs_bytes = gib * 1073741824.0;
            break;
        case OPT_ALLOW_HASH:
            o.allow_hash_change = 1;
            break;
        case 'q': /* compare prints its table and verdict on stdout: no notes to drop */
            break;
        default: {
            char msg[256];
            const char *what = argv[optind - 1];
            snprintf(msg, sizeof msg, "%s %.100s (try ssb4d bench compare --help)",
                     opt == ':' ? "missing value for" : "unknown option", what ? what : "");
            return cli_error(CMD, SSB4D_EINVAL, msg);
        }
        }
    }
    if (argc - optind != 2) {
        char msg[256];
        snprintf(msg, sizeof msg, "two files expected, got %d (usage: ssb4d bench compare OLD.json NEW.json)",
                 argc - optind < 0 ? 0 : argc - optind);
        return cli_error(CMD, SSB4D_EINVAL, msg);
    }
    ssb4d_err err = {0};
    int rc = ssb4d_bench_compare_files(argv[optind], argv[optind + 1], &o, stdout, &err);
    if (rc == 2) {
        cli_error(CMD, SSB4D_EFORMAT, err.msg[0] ? err.msg : "cannot compare");
        return CLI_EXIT_USAGE;
    }
    return rc;
}
