/* cli_common.h — what every subcommand shares: microscope flags, the sidecar / calibration-file /
 * flag layering (flags override a calibration file, which overrides a sidecar DATA.json written by
 * `ssb4d simulate`), exit codes and output helpers. */
#ifndef SSB4D_CLI_COMMON_H
#define SSB4D_CLI_COMMON_H
#include "ssb4d_advanced.h"

#include <cjson/cJSON.h>

#include <getopt.h>

/* Exit codes: 0 ok, 2 bad input or user error (one line on stderr), 1 internal/out of memory. */
#define CLI_EXIT_OK 0
#define CLI_EXIT_INTERNAL 1
#define CLI_EXIT_USAGE 2

/* The exit statuses every command's --help ends with, in the same words everywhere: the common
 * part, then what a command adds (verify's and plan's 3), then the line's end. */
#define CLI_EXIT_HELP_BEGIN "exit status: 0 success, 1 internal error or out of memory, 2 usage error or bad input\n" \
                            "(one line on stderr: a missing file, bad data, an existing output, a budget too small)"
#define CLI_EXIT_HELP CLI_EXIT_HELP_BEGIN ".\n"
/* -q / --quiet, in every command's --help. */
#define CLI_QUIET_HELP "  -q, --quiet           no progress bar and no notes on stderr (errors and warnings\n" \
                       "                        still print)\n"

/* Long-option ids for the shared flags (>= 1000 to stay clear of short options). */
enum {
    CLI_OPT_KV = 1000, CLI_OPT_SEMIANGLE, CLI_OPT_SCAN_STEP, CLI_OPT_DET_SAMPLING, CLI_OPT_ROTATION,
    CLI_OPT_BF_RADIUS, CLI_OPT_CENTRE, CLI_OPT_CALIBRATION, CLI_OPT_SIDECAR, CLI_OPT_THREADS,
    CLI_OPT_MEMORY_REPORT, CLI_OPT_JSON, CLI_OPT_NO_HOT_PIXELS, CLI_OPT_MEMORY, CLI_OPT_BACKEND,
    CLI_OPT_FLIP, CLI_OPT_NO_FLIP, CLI_OPT_DEVICE_MEMORY, CLI_OPT_ROTATION_FROM,
    CLI_OPT_FIRST_FREE = 1100 /* commands number their own options from here */
};

/* Put this inside a command's `struct option` array. */
#define CLI_MICROSCOPE_OPTIONS                                             \
    {"kv", required_argument, 0, CLI_OPT_KV},                              \
    {"semiangle", required_argument, 0, CLI_OPT_SEMIANGLE},                \
    {"scan-step", required_argument, 0, CLI_OPT_SCAN_STEP},                \
    {"det-sampling", required_argument, 0, CLI_OPT_DET_SAMPLING},          \
    {"rotation", required_argument, 0, CLI_OPT_ROTATION},                  \
    {"rotation-from", required_argument, 0, CLI_OPT_ROTATION_FROM},        \
    {"flip", no_argument, 0, CLI_OPT_FLIP},                                \
    {"no-flip", no_argument, 0, CLI_OPT_NO_FLIP},                          \
    {"bf-radius", required_argument, 0, CLI_OPT_BF_RADIUS},                \
    {"centre", required_argument, 0, CLI_OPT_CENTRE},                      \
    {"calibration", required_argument, 0, CLI_OPT_CALIBRATION},            \
    {"sidecar", required_argument, 0, CLI_OPT_SIDECAR},                    \
    {"threads", required_argument, 0, CLI_OPT_THREADS},                    \
    {"memory-report", no_argument, 0, CLI_OPT_MEMORY_REPORT},              \
    {"json", no_argument, 0, CLI_OPT_JSON},                                \
    {"no-hot-pixels", no_argument, 0, CLI_OPT_NO_HOT_PIXELS},             \
    {"memory", required_argument, 0, CLI_OPT_MEMORY},                      \
    {"quiet", no_argument, 0, 'q'}

/* Help text for the shared flags (printed by each command's --help). */
const char *cli_microscope_help(void);
#define CLI_MICROSCOPE_HELP cli_microscope_help()

/* --backend: where a session's heavy passes run, and --device-memory: the device's budget (the
 * CUDA backend: G's planes, the work buffers and cuFFT's work area, ssb4d_plan_device). Only
 * the commands that open a session handle (fit, demo, fit-regions, reconstruct, view, session,
 * bench run, bench view) and plan put them in their `struct option` array and their --help;
 * cli_micro_handle parses them into cli_micro.backend and cli_micro.device_memory_bytes. */
#define CLI_BACKEND_OPTION {"backend", required_argument, 0, CLI_OPT_BACKEND}, \
                           {"device-memory", required_argument, 0, CLI_OPT_DEVICE_MEMORY}
#define CLI_BACKEND_HELP "  --backend B           where the heavy passes run: auto (CUDA when a GPU is present,\n" \
                         "                        else the CPU), cpu, cuda\n" \
                         "  --device-memory SIZE  the GPU memory the CUDA backend may hold, e.g. 8G (default: the\n" \
                         "                        device's free memory); a session that needs more stops at the\n" \
                         "                        G build, naming what it needs (ssb4d plan --backend cuda)\n"

typedef struct {
    ssb4d_values flags;   /* from the command line (ssb4d_values: the library's own struct; the
                             flags record where a rotation or handedness came from: "--rotation",
                             "--flip") */
    const char *calibration_path;
    const char *sidecar_path;
    const char *rotation_from_path; /* --rotation-from FILE (NULL: not given) */
    char auto_calibration[4096]; /* the calibration file cli_auto_calibration found beside DATA */
    char data_identity[96];      /* DATA's identity once computed (ssb4d_data_identity), else "" */
    int threads;
    int memory_report;
    size_t memory_bytes; /* --memory (0: not given: the available RAM) */
    int json;
    int hot_pixels;
    int det_sampling_measure; /* --det-sampling measure: the measured sampling, whatever is stated */
    int quiet;           /* -q / --quiet: no progress bar, no notes on stderr */
    ssb4d_backend_kind backend; /* --backend (default SSB4D_BACKEND_AUTO) */
    size_t device_memory_bytes; /* --device-memory (0: not given: the device's free memory) */
} cli_micro;

void cli_micro_init(cli_micro *m);
/* Handles a shared option (-q too: put 'q' in the command's short options); returns 1 if
 * handled, 0 if not a shared option, -1 on a bad value (message already printed). */
int cli_micro_handle(cli_micro *m, int opt, const char *arg);

/* The command whose lines these are ("fit", "bench run"): main.c sets it before it calls the
 * command (a command with subcommands may set its own); every line the shared helpers print
 * starts "ssb4d CMD: " ("ssb4d: " before one is set). */
void cli_set_command(const char *name);
const char *cli_command(void);
/* Prints "ssb4d CMD: <text>" and a newline on stderr (CMD = cli_command()). */
void cli_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* DIR/NAME with one '/' between them however many DIR ends in ("out/" + "phase.png" is
 * "out/phase.png", never "out//phase.png"); DIR "" gives NAME. */
void cli_join_path(char *buf, size_t n, const char *dir, const char *name);
/* DIR as a person reads it: without its trailing slashes ("out/" -> "out", "/" stays "/"). */
const char *cli_dir_text(char *buf, size_t n, const char *dir);

/* The first check of every command that reads input files, made once the command line has been
 * parsed and before anything else (sidecar, calibration file, microscope values, outputs):
 * path must name a regular file this process can open for reading. Otherwise prints one line
 * "ssb4d <cmd>: cannot open PATH: <reason>" and returns CLI_EXIT_USAGE; 0 when it can be read. */
int cli_check_readable_file(const char *cmd, const char *path);
/* cli_check_readable_file, then: the file must be data ssb4d reads in place (a .qem, whose
 * header is checked but not yet its body's checksums; a .npy; a format the frame readers know by
 * content or extension). Otherwise one line "ssb4d <cmd>: <why, naming the file>" and
 * CLI_EXIT_USAGE (1 when out of memory). What fit, reconstruct, fit-regions, calibrate, view,
 * plan, session and bench check first; import, export and verify, which take the reader flags,
 * check theirs with cli_input_check_files (cli_input.h), info (a .qem) with qem_open. */
int cli_check_readable(const char *cmd, const char *path);
/* 1 when PATH starts with the .qem magic, its header then checked into *st (the body is verified
 * where it is read); 0 when it is not a .qem (*st untouched). */
int cli_check_qem_header(const char *path, ssb4d_status *st, ssb4d_err *err);

/* The overwrite rule of every command: an output that exists is refused unless --force, before
 * any long work, with one line "ssb4d <cmd>: PATH already exists (use --force to replace it<alt>)"
 * (alt: e.g. ", or -o FILE", or ""); a folder where a file is to go is refused even with --force.
 * Returns 0 or CLI_EXIT_USAGE. */
int cli_check_output(const char *cmd, const char *path, int force, const char *alt);

/* Layers the calibration a .qem DATA carries, the sidecar (found next to data_path or given by
 * --sidecar), the calibration file (--calibration, or the one cli_auto_calibration found) and
 * the flags, in that order (later wins).
 * Fills `out` (unset fields stay NaN). Returns 0 or prints one error line and returns exit code.
 * When the calibration file records a data identity and data_path is given, DATA's identity is
 * computed (kept in m->data_identity) and a warning line is printed if they differ. */
int cli_resolve(const char *data_path, cli_micro *m, ssb4d_values *out);
/* cli_resolve; warn = 1 (what cli_resolve does) also prints, for each of --kv, --semiangle,
 * --scan-step and --det-sampling that differs by more than 1 % from what DATA's record, the
 * sidecar or the calibration file states, one line "ssb4d CMD: warning: --kv 30 differs from
 * s.json's 300 kV; using 30 kV" (the flag still wins). */
int cli_resolve_values(const char *data_path, cli_micro *m, ssb4d_values *out, int warn);
/* Those warning lines for `flags` over `file` (the values without the flags); from[q] names who
 * states kV, semi-angle, scan step, detector sampling ("s.json's"; NULL: "the file's"). */
void cli_warn_overrides(const ssb4d_values *file, const ssb4d_values *flags, const char *const from[4]);

/* The simulator sidecar of DATA, as cli_resolve finds it (--sidecar, else DATA.json, DATA with
 * its extension replaced by .json, or that without a trailing "_counts"), read into v (all unset
 * when there is none); path gets its name ("" when none). Returns 0, or CLI_EXIT_USAGE when it
 * cannot be read or is not JSON (one line printed). */
int cli_read_sidecar(const char *data, const cli_micro *m, ssb4d_values *v, char *path, size_t n);

/* The calibration file `ssb4d calibrate DATA` writes by default: in DATA's folder, DATA's name
 * without its extension + ".calibration.json" (s.npy -> s.calibration.json). Returns 0, or -1
 * when it does not fit in n. */
int cli_default_calibration_path(const char *data, char *out, size_t n);

/* For the commands that take calibrate's results (fit, reconstruct, fit-regions): when no
 * --calibration was given and cli_default_calibration_path(data) exists, it becomes m's
 * calibration file, and one line on stderr says so (unless quiet). It is passed over, with one
 * warning line, when it holds aberrations (ssb4d calibrate writes none: it is not calibrate's
 * file) or when it records a data identity other than DATA's (DATA's identity is then kept in
 * m->data_identity for cli_resolve). Returns 0, or CLI_EXIT_USAGE when the file cannot be read
 * or is malformed (one line printed). */
int cli_auto_calibration(const char *cmd, const char *data, cli_micro *m, int quiet);

/* The calibration file's `acquisition` section (format, camera length, dwell) from what DATA
 * records (a .qem's record or its reader's); left unset when DATA is NULL or says nothing. */
void cli_calfile_acquisition(const char *data, ssb4d_calfile *cf);

/* Calibration params / geometry from resolved values (unset → fit from data / defaults). */
void cli_values_to_calib_params(const ssb4d_values *v, int threads, int hot_pixels,
                                ssb4d_calib_params *p);
/* Checks the values that must be known before any work (kv, semiangle, scan step) and prints one
 * line naming the missing or absurd one. Returns 0 or CLI_EXIT_USAGE. */
int cli_check_microscope(const ssb4d_values *v);

/* The budget: --memory, else the available RAM (MemAvailable). */
size_t cli_memory_budget(const cli_micro *m);
/* Parses a --memory value into *out; prints one error line and returns -1 when it is not a size. */
int cli_parse_memory(const char *arg, size_t *out);
/* Parses a --device-memory value (a size as --memory takes, at least 1M); -1 with one line. */
int cli_parse_device_memory(const char *arg, size_t *out);
/* Parses --backend auto|cpu|cuda; -1 with one message line otherwise. */
int cli_parse_backend(const char *arg, ssb4d_backend_kind *out);
/* The name of a backend kind as --backend spells it ("auto", "cpu", "cuda"). */
const char *cli_backend_kind_name(ssb4d_backend_kind k);
/* Parses --preview-precision auto|float|half (float32, float16 too); -1 with a message otherwise. */
int cli_parse_preview(const char *arg, ssb4d_preview_precision *out);
/* Help line for --memory (for commands that take it without the microscope flags). */
#define CLI_MEMORY_HELP "  --memory SIZE         memory budget, e.g. 16G, 512M (default: the available RAM)\n"

/* JSON of a value that may be unknown: the number, or null when it is not finite; a (row, col)
 * pair: [a, b] (each null when not finite), or null when neither is. */
cJSON *cli_json_num(double v);
cJSON *cli_json_pair(const double v[2]);

/* Prints "ssb4d <cmd>: <msg>" on stderr and returns the exit code for status st. */
int cli_error(const char *cmd, ssb4d_status st, const char *msg);

/* Parses "A" or "A,B" into two doubles. Returns 0 on success. */
int cli_parse_pair(const char *s, double out[2]);
/* The command line's one number parser: the whole of s is a finite number in [lo, hi] (whole: a
 * whole number); 0 and *out, or -1. Every option's number goes through it (the table's options
 * through ssb4d_param_parse, with the parameter table's ranges). */
int cli_parse_number(const char *s, double lo, double hi, int whole, double *out);
/* Parses a finite number (cli_parse_number without a range); returns 0 on success. */
int cli_parse_double(const char *s, double *out);

/* Writes a float32 phase image to .tiff/.tif (float32), .npy or .png by the extension of path.
 * pixel_A is the sampling written into the TIFF tags (Å). A .png is the 8-bit preview (contrast
 * stretched) with a scale bar from pixel_A[1] and a colour bar in rad, in margins beside it. */
ssb4d_status cli_write_image(const char *path, const float *img, size_t rows, size_t cols,
                             double pixel_A[2], ssb4d_err *err);

/* Aberration flags: "--c10 NM", "--c12 NM", "--phi12 DEG" and "--aberr C30=NM,phi32=DEG,...".
 * Sets ab and marks each coefficient given in *c_mask / *phi_mask (bit i = coefficient i).
 * Returns 0, or -1 with a message printed. */
int cli_parse_aberr_list(const char *s, ssb4d_aberrations *ab, unsigned *c_mask, unsigned *phi_mask);
#endif
