/* cmd_bench_view.h — `ssb4d bench view`: the viewer's round trips over HTTP (SPEC §7's speed). */
#ifndef SSB4D_CLI_CMD_BENCH_VIEW_H
#define SSB4D_CLI_CMD_BENCH_VIEW_H
#include <stddef.h>

/* The workload's file (bench's --workload/--data/--cache rule, cmd_bench.c): 0 or exit code. */
typedef int (*bench_resolve_fn)(const char *cmd, const char *name, const char *data, const char *cache, int quiet,
                                char *path, size_t n);
/* argv[0] is "view". Returns the exit status. */
int bench_view(int argc, char **argv, bench_resolve_fn resolve);
#endif
