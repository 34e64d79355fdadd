/* cmd_import.c — `ssb4d import IN -o OUT.qem [options]`: stream an acquisition in a foreign
 * format into the encoded .qem form (SPEC §3, src/import/import.c). */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/cli_input.h"
#include "cli/commands.h"
#include "cli/progress.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CMD "import"

static void help(FILE *f)
{
    fprintf(f,
            "usage: ssb4d import IN [IN2 ...] -o OUT.qem [options]\n\n"
            "Streams a 4D-STEM acquisition into the encoded .qem form. Every count is stored\n"
            "exactly (uint8/uint16; uint32 only when every value fits 16 bits) except those of\n"
            "flagged detector pixels (masked by the file, or hot or dead in the per-pixel totals),\n"
            "which --hot-pixels median (the default) and zero replace before encoding. Flagged\n"
            "pixels stay marked invalid in the .qem and the step is recorded there (ssb4d info\n"
            "shows it; ssb4d verify does not count the replaced values as differences). The file\n"
            "appears atomically once everything succeeded. Memory stays within a few 32 MiB read\n"
            "blocks plus one chunk being encoded, whatever the input size. Several IN files are one\n"
            "Merlin acquisition split over files, given in scan order.\n\n"
            "  -o, --output FILE     the .qem to write (required)\n"
            "  --gain E|auto         float data (EMPAD, gain-normalised counts): store round(value*E)\n"
            "                        electrons (E electrons per unit of the data; negative values as\n"
            "                        0); auto: 1 for integer-valued data, g for data on a grid of 1/g,\n"
            "                        else refused. The quantisation error (max, rms, in electrons) is\n"
            "                        printed and recorded (ssb4d info); refused when its rms is as\n"
            "                        large as the values' own variation over the scan (the data would\n"
            "                        be lost: a summed image stored as all ones). Without --gain float\n"
            "                        data are refused: ssb4d never quantises silently (fit,\n"
            "                        reconstruct and view read them as they are)\n"
            "  --hot-pixels P        what flagged pixels store: median (default): in every frame the\n"
            "                        median of their valid 3x3 neighbours; zero: 0; none: no hot/dead\n"
            "                        detection, and the file's masked pixels keep their counts too\n"
            "                        (a marker value too large for the dtype is stored as 0, recorded)\n"
            "  --kv KV, --semiangle MRAD, --scan-step A[,A], --det-sampling M[,M],\n"
            "  --camera-length MM, --dwell US\n"
            "                        microscope values, recorded as user overrides beside what the\n"
            "                        file records (ssb4d info shows both, and which one counts);\n"
            "                        each flag replaces the sidecar's value\n"
            "  --flip, --no-flip     record the detector's handedness (mirrored: its row and column\n"
            "                        axes swapped before the scan rotation); fit, reconstruct and\n"
            "                        view take it from the .qem\n"
            "  --sidecar FILE        simulator sidecar JSON (default: IN with .json, IN.json or, for\n"
            "                        NAME_counts.npy, NAME.json, if present, as the other commands\n"
            "                        find it): its kV, semi-angle, scan step and detector sampling\n"
            "                        are recorded as overrides too (evidence \"sidecar FILE\"), so\n"
            "                        ssb4d info and every command reading OUT see them\n"
            "  --chunk-scans N       scans per chunk (a multiple of 512; default: automatic)\n"
            "  --threads N           encoder threads (default: all cores)\n"
            "%s"
            "                        it counts the read blocks (two 32 MiB blocks of uint32 frames\n"
            "                        in flight and one converted block, less for small inputs); the\n"
            "                        encoder's chunk buffer (at most 128 MiB) comes on top\n"
            "  --force               replace OUT if it exists (without it an existing OUT is refused\n"
            "                        before any work)\n"
            "  --json                print one JSON report object on stdout\n"
            CLI_QUIET_HELP
            "  -h, --help            this help\n\n%s\n"
            "A missing or unreadable IN is reported first; a failed import leaves no output file.\n"
            CLI_EXIT_HELP,
            CLI_MEMORY_HELP, CLI_INPUT_HELP);
}

enum { OPT_HOT = CLI_OPT_FIRST_FREE, OPT_CHUNK, OPT_FORCE, OPT_GAIN, OPT_CAMLEN, OPT_DWELL };

static void print_pair(const char *name, const double v[2], const char *unit)
{
    if (v[0] == v[1])
        printf("%s %g %s", name, v[0], unit);
    else
        printf("%s %g, %g %s", name, v[0], v[1], unit);
}

typedef struct {
    cli_progress pb;
    const ssb4d_import_report *rep;
} import_bar;

static int import_progress(void *user, const char *stage, double fraction)
{
    import_bar *b = user;
    (void)stage;
    if (b->pb.total <= 0 && b->rep->input_bytes)
        cli_progress_set_rate(&b->pb, (double)b->rep->input_bytes / 1048576.0, "MiB");
    if (fraction < 1.0) /* the last line is drawn once the file is complete (cli_progress_done) */
        cli_progress_update(&b->pb, fraction);
    return 0;
}

static int bad(const char *what, const char *arg)
{
    char msg[320];
    snprintf(msg, sizeof msg, "bad value for --%s: '%.200s' (try ssb4d import --help)", what, arg);
    return cli_error(CMD, SSB4D_EINVAL, msg);
}

int cmd_import(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'},     CLI_INPUT_OPTIONS,
        {"hot-pixels", required_argument, 0, OPT_HOT},
        {"chunk-scans", required_argument, 0, OPT_CHUNK}, {"force", no_argument, 0, OPT_FORCE},
        {"gain", required_argument, 0, OPT_GAIN},
        {"camera-length", required_argument, 0, OPT_CAMLEN}, {"dwell", required_argument, 0, OPT_DWELL},
        {"flip", no_argument, 0, CLI_OPT_FLIP}, {"no-flip", no_argument, 0, CLI_OPT_NO_FLIP},
        {"kv", required_argument, 0, CLI_OPT_KV},   {"semiangle", required_argument, 0, CLI_OPT_SEMIANGLE},
        {"scan-step", required_argument, 0, CLI_OPT_SCAN_STEP},
        {"det-sampling", required_argument, 0, CLI_OPT_DET_SAMPLING},
        {"sidecar", required_argument, 0, CLI_OPT_SIDECAR},
        {"threads", required_argument, 0, CLI_OPT_THREADS}, {"json", no_argument, 0, CLI_OPT_JSON},
        {"memory", required_argument, 0, CLI_OPT_MEMORY},
        {"quiet", no_argument, 0, 'q'},             {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    ssb4d_import_params ip;
    ssb4d_import_params_default(&ip);
    cli_micro m;
    cli_micro_init(&m);
    const char *out = NULL;
    cli_input ci;
    memset(&ci, 0, sizeof ci);
    int quiet = 0;
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":ho:q", opts, NULL)) != -1) {
        switch (opt) {
        case 'h': help(stdout); return CLI_EXIT_OK;
        case 'o': out = optarg; break;
        case 'q': quiet = 1; break;
        case OPT_CHUNK:
            {
                double v;
                if (cli_parse_number(optarg, 1, (double)((size_t)1 << 40), 1, &v))
                    return bad("chunk-scans", optarg);
                ip.chunk_scans = (size_t)v;
            }
            break;
        case OPT_HOT:
            if (!strcmp(optarg, "median"))
                ip.hot = SSB4D_HOT_MEDIAN;
            else if (!strcmp(optarg, "zero"))
                ip.hot = SSB4D_HOT_ZERO;
            else if (!strcmp(optarg, "none"))
                ip.hot = SSB4D_HOT_NONE;
            else
                return bad("hot-pixels", optarg);
            break;
        case OPT_FORCE: ip.force = 1; break;
        case OPT_CAMLEN:
            if (cli_parse_double(optarg, &ip.camera_length_mm) || !(ip.camera_length_mm > 0 && ip.camera_length_mm < 1e9))
                return bad("camera-length", optarg);
            break;
        case OPT_DWELL:
            if (cli_parse_double(optarg, &ip.dwell_us) || !(ip.dwell_us > 0 && ip.dwell_us < 1e12))
                return bad("dwell", optarg);
            break;
        case CLI_OPT_FLIP:
        case CLI_OPT_NO_FLIP: ip.flip = opt == CLI_OPT_FLIP; break;
        case OPT_GAIN:
            if (!strcmp(optarg, "auto"))
                ip.gain = NAN;
            else if (cli_parse_double(optarg, &ip.gain) || !(ip.gain > 0 && ip.gain < 1e12))
                return bad("gain", optarg);
            break;
        case '?':
        case ':': {
            char msg[256];
            const char *what = argv[optind - 1];
            snprintf(msg, sizeof msg, "%s %s (try ssb4d import --help)",
                     opt == ':' ? "missing value for" : "unknown option", what ? what : "");
            return cli_error(CMD, SSB4D_EINVAL, msg);
        }
        default: {
            int h = cli_input_handle(&ci, CMD, opt, optarg);
            if (h == 0)
                h = cli_micro_handle(&m, opt, optarg);
            if (h < 0)
                return CLI_EXIT_USAGE;
            if (h == 0)
                return cli_error(CMD, SSB4D_EINVAL, "unknown option (try ssb4d import --help)");
        }
        }
    }
    if (optind >= argc)
        return cli_error(CMD, SSB4D_EINVAL, "no input given (usage: ssb4d import IN -o OUT.qem)");
    const char *in = argv[optind];
    if (cli_input_check(&ci, CMD)) /* the files before anything else */
        return CLI_EXIT_USAGE;
    if (cli_input_check_files(&ci, CMD, (const char *const *)(argv + optind), (size_t)(argc - optind), 0))
        return CLI_EXIT_USAGE; /* missing, unreadable or not data a reader knows */
    if (!out)
        return cli_error(CMD, SSB4D_EINVAL, "no output given: use -o OUT.qem");
    if (cli_check_output(CMD, out, ip.force, "")) /* then the output, before the long read */
        return CLI_EXIT_USAGE;
    ip.format = ci.format;
    ip.dataset = ci.dataset;
    memcpy(ip.shape, ci.shape, sizeof ip.shape);
    ip.dtype_bytes = ci.dtype_bytes;
    ip.dtype_float = ci.dtype_float;
    ip.big_endian = ci.big_endian;
    ip.offset = ci.offset;
    ip.more_paths = (const char *const *)(argv + optind + 1);
    ip.n_more_paths = (size_t)(argc - optind - 1);
    /* The microscope: each flag, else the sidecar's value (recorded with the sidecar as evidence). */
    ssb4d_values side;
    char side_path[4096], side_evidence[4200];
    int rc = cli_read_sidecar(in, &m, &side, side_path, sizeof side_path);
    if (rc)
        return rc;
    snprintf(side_evidence, sizeof side_evidence, "sidecar %s", side_path);
    const ssb4d_values *v = &m.flags;
    int from_side[4] = {isnan(v->kv) && side.kv > 0, isnan(v->semiangle_mrad) && side.semiangle_mrad > 0,
                        isnan(v->scan_step_A[0]) && side.scan_step_A[0] > 0 && side.scan_step_A[1] > 0,
                        isnan(v->det_sampling_mrad[0]) && side.det_sampling_mrad[0] > 0 &&
                            side.det_sampling_mrad[1] > 0};
    const ssb4d_values *src4[4];
    for (int k = 0; k < 4; k++) {
        src4[k] = from_side[k] ? &side : v;
        ip.evidence[k] = from_side[k] ? side_evidence : NULL;
    }
    ip.kv = src4[0]->kv;
    ip.semiangle_mrad = src4[1]->semiangle_mrad;
    for (int i = 0; i < 2; i++) {
        ip.scan_step_A[i] = src4[2]->scan_step_A[i];
        ip.det_sampling_mrad[i] = src4[3]->det_sampling_mrad[i];
    }
    int n_side = from_side[0] + from_side[1] + from_side[2] + from_side[3];
    ip.threads = m.threads;
    size_t budget = cli_memory_budget(&m);
    ip.mem = ssb4d_mem_create(budget);
    if (!ip.mem)
        return cli_error(CMD, SSB4D_ENOMEM, "out of memory");

    /* The bar's rate and the summary's are the same measure: MiB of input counts (as the source
     * holds them, report.input_bytes, known once the source is open) per second of wall time,
     * whatever the passes over the file (two unless --hot-pixels none). */
    ssb4d_import_report rep;
    memset(&rep, 0, sizeof rep);
    import_bar bar = {.rep = &rep};
    cli_progress_start(&bar.pb, "import", quiet || m.json);
    ip.progress = import_progress;
    ip.progress_user = &bar;
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_import(in, out, &ip, &rep, &err);
    double wall = cli_progress_elapsed(&bar.pb); /* the bar's clock: its last line shows this rate */
    cli_progress_done(&bar.pb);
    ssb4d_mem_destroy(ip.mem);
    if (st)
        return cli_job_error(CMD, st, err.msg, budget);

    static const char *hot_names[] = {"median", "zero", "none"};
    double ratio = rep.encoded_bytes ? (double)rep.input_bytes / (double)rep.encoded_bytes : 0;
    /* median and zero replace every flagged pixel (the file's and the ones found); none, none. */
    size_t replaced = ip.hot == SSB4D_HOT_NONE ? 0 : rep.flagged_file + rep.flagged_found;
    if (m.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "input", in);
        cJSON_AddStringToObject(o, "output", out);
        cJSON_AddStringToObject(o, "source_format", rep.source_format);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int i = 0; i < 4; i++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)rep.shape[i]));
        cJSON_AddNumberToObject(o, "source_dtype_bytes", rep.source_dtype_bytes);
        cJSON_AddNumberToObject(o, "stored_dtype_bytes", rep.stored_dtype_bytes);
        cJSON_AddNumberToObject(o, "input_bytes", (double)rep.input_bytes);
        cJSON_AddNumberToObject(o, "encoded_bytes", (double)rep.encoded_bytes);
        cJSON_AddNumberToObject(o, "compression_ratio", ratio);
        cJSON_AddStringToObject(o, "hot_pixels", hot_names[ip.hot]);
        cJSON_AddNumberToObject(o, "flagged_by_file", (double)rep.flagged_file);
        cJSON_AddNumberToObject(o, "flagged_by_totals", (double)rep.flagged_found);
        cJSON_AddNumberToObject(o, "replaced_pixels", (double)replaced);
        cJSON_AddNumberToObject(o, "seconds", rep.seconds);
        if (rep.source_float) {
            cJSON *q = cJSON_AddObjectToObject(o, "quantisation");
            cJSON_AddNumberToObject(q, "gain_electrons_per_unit", rep.gain);
            cJSON_AddStringToObject(q, "gain_source", rep.gain_how);
            cJSON_AddNumberToObject(q, "max_error_electrons", rep.quant_max_e);
            cJSON_AddNumberToObject(q, "rms_error_electrons", rep.quant_rms_e);
            cJSON_AddNumberToObject(q, "negative_values_stored_as_zero", (double)rep.quant_clipped);
        } else
            cJSON_AddNullToObject(o, "quantisation");
        if (n_side)
            cJSON_AddStringToObject(o, "sidecar", side_path);
        else
            cJSON_AddNullToObject(o, "sidecar");
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!s)
            return cli_error(CMD, SSB4D_ENOMEM, "out of memory");
        puts(s);
        free(s);
        return CLI_EXIT_OK;
    }
    printf("ssb4d import: %s -> %s\n", in, out);
    if (rep.source_float) {
        printf("  source      %s, %zux%zu scan, %zux%zu detector, float32 stored as uint%d electrons\n",
               rep.source_format, rep.shape[0], rep.shape[1], rep.shape[2], rep.shape[3],
               8 * rep.stored_dtype_bytes);
        printf("  quantised   gain %.9g electrons per unit (%s): error max %.3g e, rms %.3g e; %zu "
               "negative value%s stored as 0\n", rep.gain, rep.gain_how, rep.quant_max_e, rep.quant_rms_e,
               rep.quant_clipped, rep.quant_clipped == 1 ? "" : "s");
    } else
        printf("  source      %s, %zux%zu scan, %zux%zu detector, uint%d stored as uint%d\n",
               rep.source_format, rep.shape[0], rep.shape[1], rep.shape[2], rep.shape[3],
               8 * rep.source_dtype_bytes, 8 * rep.stored_dtype_bytes);
    char in_text[32], enc_text[32];
    size_t like = rep.input_bytes > rep.encoded_bytes ? rep.input_bytes : rep.encoded_bytes;
    printf("  size        %s of counts -> %s encoded (ratio %.2f)\n", ssb4d_size_text(in_text, rep.input_bytes, like, 0),
           ssb4d_size_text(enc_text, rep.encoded_bytes, like, 0), ratio);
    printf("  flagged     %zu by the file's mask, %zu found from the totals%s\n", rep.flagged_file,
           rep.flagged_found, rep.flagged_file + rep.flagged_found ? ", marked invalid" : "");
    if (replaced)
        printf("  hot pixels  --hot-pixels %s: the counts of the %zu flagged pixel%s were %s\n",
               hot_names[ip.hot], replaced, replaced == 1 ? "" : "s",
               ip.hot == SSB4D_HOT_ZERO ? "set to 0" : "replaced by the median of their valid 3x3 neighbours");
    else
        printf("  hot pixels  --hot-pixels %s: no count replaced\n", hot_names[ip.hot]);
    if (n_side) {
        printf("  microscope  from the sidecar %s:", side_path);
        if (from_side[0])
            printf(" %g kV", ip.kv);
        if (from_side[1])
            printf("%s %g mrad", from_side[0] ? "," : "", ip.semiangle_mrad);
        if (from_side[2])
            print_pair(from_side[0] + from_side[1] ? ", scan step" : " scan step", ip.scan_step_A, "A");
        if (from_side[3])
            print_pair(from_side[0] + from_side[1] + from_side[2] ? ", sampling" : " sampling",
                       ip.det_sampling_mrad, "mrad/px");
        printf(" (recorded as overrides)\n");
    }
    printf("  time        %.2f s (%.1f MiB/s: MiB of input counts per second of wall time)\n", wall,
           wall > 0 ? (double)rep.input_bytes / 1048576.0 / wall : 0.0);
    return CLI_EXIT_OK;
}
