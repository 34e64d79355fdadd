/* cli_params.h — the command line's options from the library's parameter table (ssb4d_params):
 * their getopt entries, their checks (with the command's error line) and their --help lines. */
#ifndef SSB4D_CLI_PARAMS_H
#define SSB4D_CLI_PARAMS_H
#include "ssb4d.h"

#include <getopt.h>
#include <stdio.h>

/* A table option's getopt id: CLI_OPT_PARAM + op * 100 + its row (clear of every command's own). */
#define CLI_OPT_PARAM 3000

/* Appends to opts[*n] (room for cap, the terminating zero row kept free) a getopt entry for each
 * of op's rows named in names (their option, NULL-terminated). */
void cli_param_options(struct option *opts, size_t *n, size_t cap, ssb4d_op op, const char *const *names);

/* For a getopt result c: 0 when c is no table option; 1 when it was one and its value was stored
 * in targets[op] (the struct of its op; NULL: the option is not taken here); -1 when the value
 * was refused, with the command's error line on stderr ("ssb4d CMD: --trials must be …"). */
int cli_param_handle(int c, const char *arg, void *const targets[SSB4D_OP_COUNT]);

/* The row of a table option's getopt id c, or NULL. */
const ssb4d_param *cli_param_row(int c);

/* The --help lines of op's rows named in names (NULL-terminated), in that order; with_defaults:
 * each with "(default X)" where the table has one. */
void cli_param_help(FILE *f, ssb4d_op op, const char *const *names, int with_defaults);
#endif
