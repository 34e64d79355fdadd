/* cmd_bench_compare.h — `ssb4d bench compare OLD.json NEW.json [flags]` (SPEC §10). */
#ifndef SSB4D_CLI_CMD_BENCH_COMPARE_H
#define SSB4D_CLI_CMD_BENCH_COMPARE_H

/* argv[0] is "compare" (the `bench` dispatcher passes what follows `ssb4d bench`). Returns the
 * exit status: 0 nothing regressed, 1 a regression, 2 bad input or usage. */
int cmd_bench_compare(int argc, char **argv);
#endif
