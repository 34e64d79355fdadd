/* cli_input.c — see cli_input.h. */
#include "cli/cli_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char CLI_INPUT_HELP[] =
    "reading the input (by content / extension unless --format):\n"
    "  .npy                  uint8/uint16/uint32 (signed accepted if no value < 0) or float32,\n"
    "                        C order, shape (scan_row, scan_col, det_row, det_col)\n"
    "  raw binary            needs --shape and --dtype [--endian --offset]\n"
    "  HDF5 / EMD / py4DSTEM the rank-4 integer or float32 dataset found, or --dataset PATH\n"
    "  Dectris Arina         the *_master.h5 (bitshuffle-LZ4 data files beside it)\n"
    "  Merlin .mib           1/6/12/24-bit frames, single chip or quad; several files of one\n"
    "                        acquisition in scan order (IN IN2 ...); the scan shape from\n"
    "                        --scan-shape, the .hdr, the frames' time stamps or a square count\n"
    "  EMPAD                 the .xml (float32 frames of the .raw it names, footer rows dropped)\n"
    "  Gatan DM3 / DM4       4-D datasets (integer or float32) with their calibrations\n"
    "  Velox EMD             Thermo Fisher HDF5: the frames-last stack and its JSON metadata\n"
    "  MRC / MRCS            stacks of frames; --scan-shape unless the header records it\n"
    "  --format F            auto, npy, raw, hdf5, arina, mib, empad, dm, velox or mrc\n"
    "  --dataset PATH        HDF5 dataset holding the counts (rank 4, or a rank-3 frame stack);\n"
    "                        Velox: /Data/Image/<uuid>; DM3/DM4: the ImageList entry number\n"
    "  --shape A,B,C,D       raw: scan rows, scan cols, detector rows, detector cols\n"
    "  --dtype T             raw: uint8, uint16, uint32 or float32\n"
    "  --endian E            raw: little (default) or big\n"
    "  --offset BYTES        raw: header bytes to skip (default 0)\n"
    "  --scan-shape R,C      scan shape of a frame stack (.mib, Arina, HDF5 stack, EMPAD series,\n"
    "                        DM3/DM4 and Velox stacks, MRC): wins over what the file records\n";

/* Exactly n non-negative integers separated by ',' or 'x'. Returns 0 on success. */
static int parse_sizes(const char *s, size_t *out, int n)
{
    for (int i = 0; i < n; i++) {
        char *e;
        if (!s || *s < '0' || *s > '9')
            return -1;
        unsigned long long v = strtoull(s, &e, 10);
        if (v > ((unsigned long long)1 << 40))
            return -1;
        out[i] = (size_t)v;
        if (i + 1 < n) {
            if (*e != ',' && *e != 'x')
                return -1;
            s = e + 1;
        } else if (*e) {
            return -1;
        }
    }
    return 0;
}

static int bad(const char *cmd, const char *what, const char *arg)
{
    char msg[320];
    snprintf(msg, sizeof msg, "bad value for --%s: '%.200s' (try ssb4d %s --help)", what, arg, cmd);
    cli_error(cmd, SSB4D_EINVAL, msg);
    return -1;
}

int cli_input_handle(cli_input *ci, const char *cmd, int opt, const char *arg)
{
    switch (opt) {
    case CLI_OPT_IN_FORMAT: {
        ssb4d_err e;
        if (ssb4d_reader_format_check(arg, &e))
            return bad(cmd, "format", arg);
        ci->format = arg;
        return 1;
    }
    case CLI_OPT_IN_DATASET: ci->dataset = arg; return 1;
    case CLI_OPT_IN_SHAPE:
        if (parse_sizes(arg, ci->shape, 4))
            return bad(cmd, "shape", arg);
        ci->have_shape = 1;
        return 1;
    case CLI_OPT_IN_SCAN_SHAPE:
        if (parse_sizes(arg, ci->shape, 2))
            return bad(cmd, "scan-shape", arg);
        ci->have_scan_shape = 1;
        return 1;
    case CLI_OPT_IN_DTYPE:
        ci->dtype_float = !strcmp(arg, "float32") || !strcmp(arg, "f4");
        ci->dtype_bytes = !strcmp(arg, "uint8") || !strcmp(arg, "u1") ? 1
                        : !strcmp(arg, "uint16") || !strcmp(arg, "u2") ? 2
                        : !strcmp(arg, "uint32") || !strcmp(arg, "u4") || ci->dtype_float ? 4 : 0;
        return ci->dtype_bytes ? 1 : bad(cmd, "dtype", arg);
    case CLI_OPT_IN_ENDIAN:
        if (strcmp(arg, "little") && strcmp(arg, "big"))
            return bad(cmd, "endian", arg);
        ci->big_endian = !strcmp(arg, "big");
        return 1;
    case CLI_OPT_IN_OFFSET: return parse_sizes(arg, &ci->offset, 1) ? bad(cmd, "offset", arg) : 1;
    default: return 0;
    }
}

int cli_input_check(const cli_input *ci, const char *cmd)
{
    if (ci->have_shape && ci->have_scan_shape)
        return cli_error(cmd, SSB4D_EINVAL, "give --shape (raw) or --scan-shape, not both");
    return 0;
}

void cli_input_reader_opts(const cli_input *ci, ssb4d_reader_opts *fo)
{
    memset(fo, 0, sizeof *fo);
    fo->format = ci->format;
    fo->dataset = ci->dataset;
    memcpy(fo->shape, ci->shape, sizeof fo->shape);
    fo->dtype_bytes = ci->dtype_bytes;
    fo->dtype_float = ci->dtype_float;
    fo->more_paths = ci->more_paths;
    fo->n_more_paths = ci->n_more_paths;
    fo->big_endian = ci->big_endian;
    fo->offset = ci->offset;
}

int cli_input_check_files(const cli_input *ci, const char *cmd, const char *const *paths, size_t n, int qem_ok)
{
    for (size_t i = 0; i < n; i++)
        if (cli_check_readable_file(cmd, paths[i]))
            return CLI_EXIT_USAGE;
    if (!n)
        return 0;
    ssb4d_err err = {0};
    ssb4d_status st = SSB4D_OK;
    if (!(qem_ok && !ci->format && cli_check_qem_header(paths[0], &st, &err))) {
        cli_input c = *ci;
        c.more_paths = n > 1 ? paths + 1 : NULL;
        c.n_more_paths = n > 1 ? n - 1 : 0;
        ssb4d_reader_opts ro;
        ssb4d_reader *rd = NULL;
        cli_input_reader_opts(&c, &ro);
        st = ssb4d_reader_open(paths[0], &ro, &rd, &err);
        ssb4d_reader_close(rd);
    }
    return st ? cli_error(cmd, st, err.msg) : 0;
}
