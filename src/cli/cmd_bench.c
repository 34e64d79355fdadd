/* cmd_bench.c — `ssb4d bench run|compare|sweep` (SPEC 10). */
#include "cli/cli_common.h"
#include "cli/cmd_bench_compare.h"
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: ssb4d bench run|compare|sweep ...   (ssb4d bench <sub> --help)\n");
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    if (!strcmp(argv[1], "compare"))
        return cmd_bench_compare(argc - 1, argv + 1);
    fprintf(stderr, "ssb4d bench: unknown subcommand '%s' (run, compare or sweep)\n", argv[1]);
    return CLI_EXIT_USAGE;
}
