/* cmd_export.c — `ssb4d export IN [IN2 ...] -o OUT.npy`: every frame of an acquisition, as the
 * reader of its format reads it (or as a .qem decodes), written as a C-order .npy of shape
 * (scan_row, scan_col, det_row, det_col). It lets a user hand any format ssb4d reads to another
 * pipeline, and lets the tests check a reader against an independent writer value by value.
 * `--json` also prints what the reader found (format, shape, calibration, metadata). */
#include "cli/cli_common.h"
#include "cli/cli_input.h"
#include "cli/commands.h"
#include "cli/progress.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "export"
#define EXPORT_BLOCK_BYTES ((size_t)32 << 20) /* frames (4 bytes per value) read at a time */

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d export IN [IN2 ...] -o OUT.npy [options]\n"
            "       ssb4d export IN --metadata-only --json\n\n"
            "Writes every frame of IN, as ssb4d reads it, to OUT.npy: C order, shape (scan_row,\n"
            "scan_col, det_row, det_col), uint8/uint16/uint32 for counts (the file's width), float32\n"
            "for float data. IN may be any format `ssb4d import` reads, or a .qem (decoded). Nothing\n"
            "is flipped or transposed: the file's own row order is kept (docs/import.md says how to\n"
            "match another pipeline's orientation). Several IN files are one Merlin acquisition, in\n"
            "scan order.\n\n"
            "  -o, --output FILE     the .npy to write (refused if it exists, unless --force)\n"
            "  --force               replace OUT\n"
            "  --json                print what the reader found on stdout (format, shape, dtype,\n"
            "                        calibration with units, metadata)\n"
            "  --metadata-only       read the headers only: no frames, no OUT (with --json)\n"
            CLI_QUIET_HELP
            "  -h, --help            this help\n\n%s\n"
            CLI_EXIT_HELP,
            CLI_INPUT_HELP);
}

enum { OPT_FORCE = CLI_OPT_FIRST_FREE, OPT_METADATA_ONLY };

/* One reader for both kinds of input: a foreign format through its reader, a .qem through its
 * source (decoded counts). */
typedef struct {
    ssb4d_reader *fs;
    ssb4d_source *src;
    size_t shape[4];
    int bytes, is_float;
} input;

static ssb4d_status input_read(input *in, size_t p0, size_t n, void *out, ssb4d_err *err)
{
    if (in->src)
        return ssb4d_source_read_frames(in->src, p0, n, out, err);
    if (in->is_float)
        return ssb4d_reader_read_f32(in->fs, p0, n, out, err);
    return ssb4d_reader_read(in->fs, p0, n, out, err);
}

static const char *dtype_name(const input *in)
{
    return in->is_float ? "float32" : in->bytes == 1 ? "uint8" : in->bytes == 2 ? "uint16" : "uint32";
}

static void print_json(const char *path, const input *in, const char *outp)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "input", path);
    cJSON_AddItemToObject(o, "output", outp ? cJSON_CreateString(outp) : cJSON_CreateNull());
    cJSON_AddStringToObject(o, "format", in->fs ? ssb4d_reader_format_name(in->fs) : "qem");
    cJSON *sh = cJSON_CreateArray();
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)in->shape[i]));
    cJSON_AddItemToObject(o, "shape", sh);
    cJSON_AddStringToObject(o, "dtype", dtype_name(in));
    if (in->fs) {
        ssb4d_reader_calibration c;
        ssb4d_reader_calibration_of(in->fs, &c);
        cJSON *cal = cJSON_CreateObject();
        cJSON_AddItemToObject(cal, "kv", cli_json_num(c.kv));
        cJSON_AddItemToObject(cal, "semiangle_mrad", cli_json_num(c.semiangle_mrad));
        cJSON_AddItemToObject(cal, "scan_step_A", cli_json_pair(c.scan_step_A));
        cJSON_AddItemToObject(cal, "det_sampling_mrad", cli_json_pair(c.det_sampling_mrad));
        cJSON_AddItemToObject(cal, "camera_length_mm", cli_json_num(c.camera_length_mm));
        cJSON_AddItemToObject(cal, "dwell_us", cli_json_num(c.dwell_us));
        cJSON_AddItemToObject(o, "calibration", cal);
        char *meta = ssb4d_reader_metadata_text(in->fs);
        cJSON_AddItemToObject(o, "metadata", meta ? cJSON_Parse(meta) : NULL);
        free(meta);
        const uint8_t *mask = ssb4d_reader_flag_mask(in->fs);
        size_t nf = 0;
        for (size_t i = 0; mask && i < in->shape[2] * in->shape[3]; i++)
            nf += mask[i] != 0;
        cJSON_AddNumberToObject(o, "flagged_pixels", (double)nf);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (s)
        puts(s);
    free(s);
}

/* Streams every frame into the open .npy: blocks of frames read as uint32 / float32, narrowed
 * to the file's width on the way out. */
static ssb4d_status write_frames(input *in, FILE *f, int quiet, ssb4d_err *err)
{
    size_t P = in->shape[2] * in->shape[3], N = in->shape[0] * in->shape[1];
    size_t step = EXPORT_BLOCK_BYTES / (P * 4);
    step = step < 1 ? 1 : step > N ? N : step;
    uint32_t *buf = malloc(step * P * 4);
    if (!buf)
        return ssb4d_err_set(err, SSB4D_ENOMEM, "out of memory (a block of %zu frames)", step);
    cli_progress pb;
    cli_progress_start(&pb, "export", quiet);
    cli_progress_set_rate(&pb, (double)(N * P * (size_t)in->bytes) / 1048576.0, "MiB");
    ssb4d_status st = SSB4D_OK;
    for (size_t p0 = 0; p0 < N && !st; p0 += step) {
        size_t n = N - p0 < step ? N - p0 : step, m = n * P;
        if ((st = input_read(in, p0, n, buf, err)))
            break;
        if (!in->is_float && in->bytes < 4) { /* narrow in place: every value fits the width */
            if (in->bytes == 1) {
                uint8_t *b = (uint8_t *)buf;
                for (size_t i = 0; i < m; i++)
                    b[i] = (uint8_t)buf[i];
            } else {
                uint16_t *b = (uint16_t *)buf;
                for (size_t i = 0; i < m; i++)
                    b[i] = (uint16_t)buf[i];
            }
        }
        if (fwrite(buf, (size_t)in->bytes, m, f) != m)
            st = ssb4d_err_set(err, SSB4D_EIO, "writing the frames: %s", strerror(errno));
        if (in->src)
            ssb4d_source_done_with(in->src, p0, n);
        cli_progress_update(&pb, (double)(p0 + n) / (double)N);
    }
    cli_progress_done(&pb);
    free(buf);
    return st;
}

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {CLI_INPUT_OPTIONS,
                                         {"output", required_argument, 0, 'o'},
                                         {"force", no_argument, 0, OPT_FORCE},
                                         {"json", no_argument, 0, CLI_OPT_JSON},
                                         {"metadata-only", no_argument, 0, OPT_METADATA_ONLY},
                                         {"quiet", no_argument, 0, 'q'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_input ci;
    memset(&ci, 0, sizeof ci);
    const char *outp = NULL;
    int force = 0, json = 0, meta_only = 0, quiet = 0;
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":ho:q", opts, NULL)) != -1) {
        switch (opt) {
        case 'h': help(stdout); return CLI_EXIT_OK;
        case 'o': outp = optarg; continue;
        case 'q': quiet = 1; continue;
        case OPT_FORCE: force = 1; continue;
        case CLI_OPT_JSON: json = 1; continue;
        case OPT_METADATA_ONLY: meta_only = 1; continue;
        case '?':
        case ':': {
            char msg[256];
            const char *what = argv[optind - 1];
            snprintf(msg, sizeof msg, "%s %s (try ssb4d export --help)",
                     opt == ':' ? "missing value for" : "unknown option", what ? what : "");
            return cli_error(CMD, SSB4D_EINVAL, msg);
        }
        default:
            if (cli_input_handle(&ci, CMD, opt, optarg) <= 0)
                return CLI_EXIT_USAGE;
        }
    }
    if (argc - optind < 1)
        return cli_error(CMD, SSB4D_EINVAL, "no input (usage: ssb4d export IN -o OUT.npy)");
    if (!outp && !meta_only)
        return cli_error(CMD, SSB4D_EINVAL, "no output: give -o OUT.npy (or --metadata-only)");
    if (cli_input_check(&ci, CMD))
        return CLI_EXIT_USAGE;
    if (cli_input_check_files(&ci, CMD, (const char *const *)(argv + optind), (size_t)(argc - optind), 1))
        return CLI_EXIT_USAGE; /* missing, unreadable or not data a reader knows */
    const char *path = argv[optind];
    ci.more_paths = (const char *const *)(argv + optind + 1);
    ci.n_more_paths = (size_t)(argc - optind - 1);
    if (outp && !meta_only && cli_check_output(CMD, outp, force, ""))
        return CLI_EXIT_USAGE;

    ssb4d_err err = {0};
    input in;
    memset(&in, 0, sizeof in);
    ssb4d_status st;
    FILE *probe = fopen(path, "rb");
    char magic[4] = {0};
    size_t got = probe ? fread(magic, 1, 4, probe) : 0;
    if (probe)
        fclose(probe);
    if (got == 4 && !memcmp(magic, "QEMD", 4) && !ci.format) {
        if (ci.n_more_paths)
            return cli_error(CMD, SSB4D_EINVAL, "a .qem is one file: give it alone");
        if ((st = ssb4d_source_open_qem(path, &in.src, &err)))
            return cli_error(CMD, st, err.msg);
        ssb4d_source_shape(in.src, in.shape);
        in.bytes = (int)ssb4d_source_dtype(in.src);
    } else {
        ssb4d_reader_opts ro;
        cli_input_reader_opts(&ci, &ro);
        if ((st = ssb4d_reader_open(path, &ro, &in.fs, &err)))
            return cli_error(CMD, st, err.msg);
        ssb4d_reader_shape(in.fs, in.shape);
        in.is_float = ssb4d_reader_is_float(in.fs);
        in.bytes = ssb4d_reader_dtype_bytes(in.fs);
    }
    if (!meta_only) {
        ssb4d_afile af;
        const char *descr = in.is_float ? "<f4" : in.bytes == 1 ? "|u1" : in.bytes == 2 ? "<u2" : "<u4";
        st = ssb4d_afile_open(&af, outp, &err);
        if (!st) {
            st = ssb4d_npy_write_header(af.f, descr, 4, in.shape, &err);
            if (!st)
                st = write_frames(&in, af.f, quiet || json, &err);
            st = ssb4d_afile_finish(&af, st, &err);
        }
    }
    if (!st && json)
        print_json(path, &in, meta_only ? NULL : outp);
    ssb4d_reader_close(in.fs);
    ssb4d_source_close(in.src);
    if (st)
        return cli_error(CMD, st, err.msg);
    if (!json && !quiet && !meta_only)
        fprintf(stderr, "ssb4d export: %s -> %s: %zux%zux%zux%zu %s\n", path, outp, in.shape[0],
                in.shape[1], in.shape[2], in.shape[3], dtype_name(&in));
    return CLI_EXIT_OK;
}
