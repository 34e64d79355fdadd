/* cli_input.h — the flags that say how to read an acquisition in a foreign format (--format,
 * --dataset, --shape, --dtype, --endian, --offset, --scan-shape), shared by `import` and
 * `verify` so both read an input the same way. */
#ifndef SSB4D_CLI_INPUT_H
#define SSB4D_CLI_INPUT_H
#include "cli/cli_common.h"

enum {
    CLI_OPT_IN_FORMAT = 1050, CLI_OPT_IN_DATASET, CLI_OPT_IN_SHAPE, CLI_OPT_IN_DTYPE,
    CLI_OPT_IN_ENDIAN, CLI_OPT_IN_OFFSET, CLI_OPT_IN_SCAN_SHAPE
};

#define CLI_INPUT_OPTIONS                                                  \
    {"format", required_argument, 0, CLI_OPT_IN_FORMAT},                   \
    {"dataset", required_argument, 0, CLI_OPT_IN_DATASET},                 \
    {"shape", required_argument, 0, CLI_OPT_IN_SHAPE},                     \
    {"dtype", required_argument, 0, CLI_OPT_IN_DTYPE},                     \
    {"endian", required_argument, 0, CLI_OPT_IN_ENDIAN},                   \
    {"offset", required_argument, 0, CLI_OPT_IN_OFFSET},                   \
    {"scan-shape", required_argument, 0, CLI_OPT_IN_SCAN_SHAPE}

extern const char CLI_INPUT_HELP[];

typedef struct {
    const char *format;   /* NULL: auto */
    const char *dataset;
    size_t shape[4];      /* --shape, or --scan-shape in [0..1] */
    int dtype_bytes, dtype_float, big_endian;
    size_t offset;
    int have_shape, have_scan_shape;
    const char *const *more_paths; /* further input files (a Merlin acquisition in several) */
    size_t n_more_paths;
} cli_input;

/* Handles one of the options above: 1 handled, 0 not ours, -1 bad value (message printed,
 * naming cmd). */
int cli_input_handle(cli_input *ci, const char *cmd, int opt, const char *arg);
/* Checks the combination (message printed); 0 or CLI_EXIT_USAGE. */
int cli_input_check(const cli_input *ci, const char *cmd);
/* The first check of import, export and verify: every one of paths[0..n) is a regular file this
 * process can read (cli_check_readable_file), then paths[0] (with the rest as further files of
 * one acquisition when more) is data a reader recognises with these flags: a .qem by its header
 * (when qem_ok and no --format), else the frame readers. One line "ssb4d CMD: ..." naming the
 * file and CLI_EXIT_USAGE otherwise, before outputs or values are looked at; 0 when it reads. */
int cli_input_check_files(const cli_input *ci, const char *cmd, const char *const *paths, size_t n, int qem_ok);
/* The reader options these flags describe (the format word is checked when the reader opens). */
void cli_input_reader_opts(const cli_input *ci, ssb4d_reader_opts *ro);
#endif
