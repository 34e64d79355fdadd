/* cli_common.c — shared flags and the sidecar < calibration file < flags layering. */
#include "cli/cli_common.h"
#include "cli/cli_params.h"


#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* The shared flags' help: the microscope values' lines from the parameter table (ssb4d_params),
 * the rest written here; made once, kept for the process. */
const char *cli_microscope_help(void)
{
    static char *text;
    if (text)
        return text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return "";
    fprintf(f, "microscope and calibration (flags override the calibration file, which overrides the sidecar\n"
               "DATA.json, which overrides what a .qem DATA records):\n");
    cli_param_help(f, SSB4D_OP_CALIBRATE,
                   (const char *const[]){"kv", "semiangle", "scan-step", "det-sampling", "rotation", NULL}, 0);
    fprintf(f, "  --det-sampling measure  the sampling calibration measures from the BF disk's edge,\n"
               "                        not the one a calibration file, sidecar or .qem states (stated\n"
               "                        values are used otherwise; calibrate reports both)\n");
    fprintf(f, "  --flip, --no-flip     the detector is mirrored (its row and column axes swapped before\n"
               "                        the rotation) or not; when neither is given (nor recorded by a\n"
               "                        calibration file or the .qem), fit tests both handedness\n"
               "  --rotation-from FILE  the rotation and handedness of another acquisition at the same\n"
               "                        settings: FILE is its calibration JSON from ssb4d fit (a thin\n"
               "                        area) or one that states them; held by the fit. For crystals,\n"
               "                        whose 180 deg branch the data cannot settle (docs/fit.md)\n");
    cli_param_help(f, SSB4D_OP_CALIBRATE, (const char *const[]){"bf-radius", "centre", NULL}, 0);
    fprintf(f, "  --calibration FILE    calibration JSON (from ssb4d calibrate or ssb4d fit); without it,\n"
               "                        fit, reconstruct and fit-regions take the file ssb4d calibrate\n"
               "                        DATA writes (s.npy: s.calibration.json) when it is there\n"
               "  --sidecar FILE        simulator sidecar JSON (default: DATA with .json, if present)\n");
    cli_param_help(f, SSB4D_OP_CALIBRATE, (const char *const[]){"no-hot-pixels", "threads", NULL}, 0);
    fprintf(f, "  --memory SIZE         memory budget, e.g. 16G, 512M (default: the available RAM); block,\n"
               "                        tile and group sizes and how G is held follow from it\n"
               "  --memory-report       print the per-stage memory table on stderr\n"
               "  --json                print one JSON result object on stdout\n"
               CLI_QUIET_HELP
               "A missing or unreadable DATA is reported first (one line naming it, exit 2), before any\n"
               "of these values, the sidecar or the calibration file is looked for.\n");
    fclose(f);
    return text;
}

/* ---- the command's lines ------------------------------------------------------------------ */

static const char *command_name;

void cli_set_command(const char *name) { command_name = name; }
const char *cli_command(void) { return command_name; }

void cli_say(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (command_name)
        fprintf(stderr, "ssb4d %s: %s\n", command_name, msg);
    else
        fprintf(stderr, "ssb4d: %s\n", msg);
}

const char *cli_dir_text(char *buf, size_t n, const char *dir)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    snprintf(buf, n, "%.*s", (int)len, dir);
    return buf;
}

void cli_join_path(char *buf, size_t n, const char *dir, const char *name)
{
    char d[4096];
    cli_dir_text(d, sizeof d, dir ? dir : "");
    while (*name == '/')
        name++;
    if (!d[0])
        snprintf(buf, n, "%s", name);
    else
        snprintf(buf, n, "%s%s%s", d, d[strlen(d) - 1] == '/' ? "" : "/", name);
}

void cli_micro_init(cli_micro *m)
{
    memset(m, 0, sizeof *m);
    ssb4d_values_unset(&m->flags);
    m->hot_pixels = 1;
    m->backend = SSB4D_BACKEND_AUTO;
}

int cli_parse_number(const char *s, double lo, double hi, int whole, double *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *e;
    double v = strtod(s, &e);
    if (errno || *e || !isfinite(v) || (whole && v != floor(v)) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double *out) { return cli_parse_number(s, -INFINITY, INFINITY, 0, out); }

int cli_parse_pair(const char *s, double out[2])
{
    if (!s || !*s)
        return -1;
    const char *comma = strchr(s, ',');
    if (!comma)
        return cli_parse_double(s, &out[0]) == 0 ? (out[1] = out[0], 0) : -1;
    char a[64];
    size_t n = (size_t)(comma - s);
    if (n == 0 || n >= sizeof a)
        return -1;
    memcpy(a, s, n);
    a[n] = 0;
    return (cli_parse_double(a, &out[0]) == 0 && cli_parse_double(comma + 1, &out[1]) == 0) ? 0 : -1;
}

static int bad_value(const char *flag, const char *arg)
{
    cli_say("invalid value '%s' for --%s", arg ? arg : "", flag);
    return -1;
}

int cli_micro_handle(cli_micro *m, int opt, const char *arg)
{
    ssb4d_values *v = &m->flags;
    switch (opt) {
    case CLI_OPT_KV: return cli_parse_double(arg, &v->kv) ? bad_value("kv", arg) : 1;
    case CLI_OPT_SEMIANGLE: return cli_parse_double(arg, &v->semiangle_mrad) ? bad_value("semiangle", arg) : 1;
    case CLI_OPT_SCAN_STEP: return cli_parse_pair(arg, v->scan_step_A) ? bad_value("scan-step", arg) : 1;
    case CLI_OPT_DET_SAMPLING:
        if (arg && !strcmp(arg, "measure")) { /* SPEC §4: a measurement used only when asked for */
            m->det_sampling_measure = 1;
            v->det_sampling_mrad[0] = v->det_sampling_mrad[1] = NAN;
            return 1;
        }
        m->det_sampling_measure = 0;
        return cli_parse_pair(arg, v->det_sampling_mrad) ? bad_value("det-sampling", arg) : 1;
    case CLI_OPT_ROTATION:
        if (cli_parse_double(arg, &v->rotation_deg))
            return bad_value("rotation", arg);
        snprintf(v->rotation_from, sizeof v->rotation_from, "--rotation");
        return 1;
    case CLI_OPT_FLIP:
    case CLI_OPT_NO_FLIP:
        v->flip = opt == CLI_OPT_FLIP;
        snprintf(v->flip_from, sizeof v->flip_from, "%s", v->flip ? "--flip" : "--no-flip");
        return 1;
    case CLI_OPT_BF_RADIUS: return cli_parse_double(arg, &v->bf_radius_px) ? bad_value("bf-radius", arg) : 1;
    case CLI_OPT_CENTRE: return cli_parse_pair(arg, v->centre_px) ? bad_value("centre", arg) : 1;
    case CLI_OPT_CALIBRATION: m->calibration_path = arg; return 1;
    case CLI_OPT_ROTATION_FROM: m->rotation_from_path = arg; return 1;
    case CLI_OPT_SIDECAR: m->sidecar_path = arg; return 1;
    case CLI_OPT_THREADS: {
        double t;
        if (cli_parse_number(arg, 0, 1024, 1, &t))
            return bad_value("threads", arg);
        m->threads = (int)t;
        return 1;
    }
    case CLI_OPT_MEMORY_REPORT: m->memory_report = 1; return 1;
    case CLI_OPT_MEMORY: return cli_parse_memory(arg, &m->memory_bytes) ? -1 : 1;
    case CLI_OPT_BACKEND: return cli_parse_backend(arg, &m->backend) ? -1 : 1;
    case CLI_OPT_DEVICE_MEMORY: return cli_parse_device_memory(arg, &m->device_memory_bytes) ? -1 : 1;
    case CLI_OPT_JSON: m->json = 1; return 1;
    case CLI_OPT_NO_HOT_PIXELS: m->hot_pixels = 0; return 1;
    case 'q': m->quiet = 1; return 1;
    default: return 0;
    }
}

int cli_parse_memory(const char *arg, size_t *out)
{
    if (ssb4d_parse_size(arg, out) || *out < ((size_t)1 << 20)) {
        cli_say("invalid value '%s' for --memory (a size such as 16G, 8GiB or 512M, at least 1M)", arg ? arg : "");
        return -1;
    }
    return 0;
}

int cli_parse_device_memory(const char *arg, size_t *out)
{
    if (ssb4d_parse_size(arg, out) || *out < ((size_t)1 << 20)) {
        cli_say("invalid value '%s' for --device-memory (a size such as 8G, 8GiB or 512M, at least 1M)",
                arg ? arg : "");
        return -1;
    }
    return 0;
}

int cli_parse_backend(const char *arg, ssb4d_backend_kind *out)
{
    if (arg && !strcmp(arg, "auto"))
        *out = SSB4D_BACKEND_AUTO;
    else if (arg && !strcmp(arg, "cpu"))
        *out = SSB4D_BACKEND_CPU;
    else if (arg && !strcmp(arg, "cuda"))
        *out = SSB4D_BACKEND_CUDA;
    else {
        cli_say("invalid value '%s' for --backend (auto, cpu or cuda)", arg ? arg : "");
        return -1;
    }
    return 0;
}

const char *cli_backend_kind_name(ssb4d_backend_kind k)
{
    return k == SSB4D_BACKEND_CPU ? "cpu" : k == SSB4D_BACKEND_CUDA ? "cuda" : "auto";
}

int cli_parse_preview(const char *arg, ssb4d_preview_precision *out)
{
    if (!strcmp(arg, "auto"))
        *out = SSB4D_PREVIEW_AUTO;
    else if (!strcmp(arg, "float") || !strcmp(arg, "float32"))
        *out = SSB4D_PREVIEW_FLOAT;
    else if (!strcmp(arg, "half") || !strcmp(arg, "float16"))
        *out = SSB4D_PREVIEW_HALF;
    else {
        cli_say("invalid value '%s' for --preview-precision (auto, float or half)", arg);
        return -1;
    }
    return 0;
}

size_t cli_memory_budget(const cli_micro *m)
{
    if (m->memory_bytes)
        return m->memory_bytes;
    size_t a = ssb4d_mem_available();
    return a ? a : ssb4d_mem_total();
}

/* ---- input files ---------------------------------------------------------------------------- */

int cli_check_readable_file(const char *cmd, const char *path)
{
    /* Opened, not just stat'ed, so that a file without read permission is caught too;
     * O_NONBLOCK so that a FIFO given by mistake cannot hang the check. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    const char *why = NULL;
    if (fd < 0 || fstat(fd, &sb) != 0)
        why = strerror(errno);
    else if (S_ISDIR(sb.st_mode))
        why = "it is a folder, not a data file";
    else if (!S_ISREG(sb.st_mode))
        why = "not a regular file"; /* the readers map and seek, and read DATA more than once */
    if (fd >= 0)
        close(fd);
    if (!why)
        return 0;
    fprintf(stderr, "ssb4d %s: cannot open %s: %s\n", cmd, path, why);
    return CLI_EXIT_USAGE;
}

int cli_check_qem_header(const char *path, ssb4d_status *st, ssb4d_err *err)
{
    FILE *f = fopen(path, "rb");
    unsigned char magic[4] = {0};
    size_t got = f ? fread(magic, 1, sizeof magic, f) : 0;
    if (f)
        fclose(f);
    if (got != 4 || memcmp(magic, "QEMD", 4))
        return 0;
    ssb4d_qem *q = NULL; /* the header only: the body is verified where it is read */
    *st = ssb4d_qem_open(path, 0, 1, &q, err);
    ssb4d_qem_close(q);
    return 1;
}

int cli_check_readable(const char *cmd, const char *path)
{
    /* The library's check, Python's too: the file, then its content by its headers. */
    ssb4d_err err = {0};
    ssb4d_status st = ssb4d_data_check(path, &err);
    return st ? cli_error(cmd, st, err.msg) : 0;
}

int cli_check_output(const char *cmd, const char *path, int force, const char *alt)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;
    if (S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "ssb4d %s: %s is a folder: name a file to write\n", cmd, path);
        return CLI_EXIT_USAGE;
    }
    if (force)
        return 0;
    fprintf(stderr, "ssb4d %s: %s already exists (use --force to replace it%s)\n", cmd, path, alt ? alt : "");
    return CLI_EXIT_USAGE;
}

/* ---- sidecar ------------------------------------------------------------------------------ */

static int file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

int cli_read_sidecar(const char *data, const cli_micro *m, ssb4d_values *v, char *path, size_t n)
{
    ssb4d_values_unset(v);
    if (n)
        path[0] = 0;
    ssb4d_values lv;
    char found[sizeof lv.sidecar_path];
    const char *side = m->sidecar_path;
    if (!side && ssb4d_sidecar_find(data, found, sizeof found))
        side = found;
    if (!side)
        return 0;
    ssb4d_err err = {0};
    if (ssb4d_values_read(NULL, side, NULL, &lv, &err)) { /* the sidecar alone */
        cli_say("%s", err.msg);
        return CLI_EXIT_USAGE;
    }
    *v = lv;
    snprintf(path, n, "%s", lv.sidecar_path);
    return 0;
}

/* "sha256:0123456789abcdef…": enough of an identity to tell two apart in a message. */
static void short_identity(const char *id, char *out, size_t n)
{
    const char *colon = strrchr(id, ':');
    size_t keep = colon ? (size_t)(colon - id) + 1 + 16 : 16;
    if (strlen(id) <= keep)
        snprintf(out, n, "%s", id);
    else
        snprintf(out, n, "%.*s…", (int)keep, id);
}

int cli_default_calibration_path(const char *data, char *out, size_t n)
{
    const char *slash = strrchr(data, '/');
    const char *base = slash ? slash + 1 : data;
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot > base ? (size_t)(dot - data) : strlen(data);
    int w = snprintf(out, n, "%.*s.calibration.json", (int)stem, data);
    return w >= 0 && (size_t)w < n ? 0 : -1;
}

int cli_auto_calibration(const char *cmd, const char *data, cli_micro *m, int quiet)
{
    char path[sizeof m->auto_calibration];
    if (m->calibration_path || !data || cli_default_calibration_path(data, path, sizeof path) ||
        !file_exists(path))
        return 0;
    ssb4d_calfile cf;
    ssb4d_err err = {0};
    if (ssb4d_calfile_read(path, &cf, &err)) {
        ssb4d_calfile_free(&cf);
        fprintf(stderr, "ssb4d %s: %s (the calibration file beside DATA: remake it with ssb4d calibrate "
                        "--force, or give --calibration FILE)\n", cmd, err.msg);
        return CLI_EXIT_USAGE;
    }
    int has_ab = cf.has_ab;
    char recorded[sizeof cf.data_identity];
    snprintf(recorded, sizeof recorded, "%s", cf.data_identity);
    ssb4d_calfile_free(&cf);
    if (has_ab) {
        fprintf(stderr, "ssb4d %s: warning: %s holds aberrations, so ssb4d calibrate did not write it; "
                        "not used (give --calibration %s to use it)\n", cmd, path, path);
        return 0;
    }
    if (recorded[0] && ssb4d_data_identity(data, m->data_identity, sizeof m->data_identity, NULL) == 0 &&
        ssb4d_calfile_identity_differs(recorded, m->data_identity)) {
        char a[128], b[128];
        short_identity(recorded, a, sizeof a);
        short_identity(m->data_identity, b, sizeof b);
        fprintf(stderr, "ssb4d %s: warning: %s was made from other data (%s ≠ %s); not used (remake it with "
                        "ssb4d calibrate %s --force)\n", cmd, path, a, b, data);
        return 0;
    }
    memcpy(m->auto_calibration, path, sizeof path);
    m->calibration_path = m->auto_calibration;
    if (!quiet)
        fprintf(stderr, "ssb4d %s: calibration from %s (written by ssb4d calibrate; --calibration FILE "
                        "takes another)\n", cmd, path);
    return 0;
}

/* ---- flags that contradict the files ------------------------------------------------------- */

/* "30" or "0.5,0.4": a flag's value as it would be typed. */
static void value_text(char *buf, size_t n, const double *v, int pair)
{
    if (pair && v[0] != v[1])
        snprintf(buf, n, "%g,%g", v[0], v[1]);
    else
        snprintf(buf, n, "%g", v[0]);
}

/* A flag that cli_check_microscope accepts (an absurd one is its error, not a warning) and that
 * differs from the file's value by more than 1 %. */
static int differs(double flag, double file)
{
    return !isnan(flag) && !isnan(file) && flag > 0 && flag <= 5000 && fabs(flag - file) > 0.01 * fabs(file);
}

void cli_warn_overrides(const ssb4d_values *file, const ssb4d_values *flags, const char *const from[4])
{
    static const struct {
        const char *flag, *unit;
        int pair;
    } Q[4] = {{"kv", "kV", 0}, {"semiangle", "mrad", 0}, {"scan-step", "A", 1}, {"det-sampling", "mrad/pixel", 1}};
    const double *fl[4] = {&flags->kv, &flags->semiangle_mrad, flags->scan_step_A, flags->det_sampling_mrad};
    const double *fi[4] = {&file->kv, &file->semiangle_mrad, file->scan_step_A, file->det_sampling_mrad};
    for (int q = 0; q < 4; q++) {
        int n = Q[q].pair ? 2 : 1, bad = 0;
        for (int i = 0; i < n; i++)
            bad |= differs(fl[q][i], fi[q][i]);
        if (!bad)
            continue;
        char a[64], b[64];
        value_text(a, sizeof a, fl[q], Q[q].pair);
        value_text(b, sizeof b, fi[q], Q[q].pair);
        cli_say("warning: --%s %s differs from %s %s %s; using %s %s", Q[q].flag, a,
                from && from[q] ? from[q] : "the file's", b, Q[q].unit, a, Q[q].unit);
    }
}

/* Who states each of kV, semi-angle, scan step and detector sampling among DATA's record, the
 * sidecar and the calibration file (the last that sets it: the layering's winner), as "X's". */
static void value_sources(const char *data_path, const char *sidecar, const char *calibration,
                          char from[4][4200])
{
    ssb4d_values side, cal;
    ssb4d_err err = {0};
    ssb4d_values_unset(&side);
    ssb4d_values_unset(&cal);
    if (sidecar && ssb4d_values_read(NULL, sidecar, NULL, &side, &err))
        ssb4d_values_unset(&side);
    if (calibration && ssb4d_values_read(NULL, NULL, calibration, &cal, &err))
        ssb4d_values_unset(&cal);
    const double *sv[4] = {&side.kv, &side.semiangle_mrad, side.scan_step_A, side.det_sampling_mrad};
    const double *cv[4] = {&cal.kv, &cal.semiangle_mrad, cal.scan_step_A, cal.det_sampling_mrad};
    for (int q = 0; q < 4; q++) {
        const char *who = !isnan(cv[q][0]) ? calibration : !isnan(sv[q][0]) ? sidecar : data_path;
        snprintf(from[q], sizeof from[q], "%s's", who ? who : "the file");
    }
}

/* --rotation-from FILE: the rotation (and the handedness, where FILE states it) of another
 * acquisition, held like --rotation. Only a rotation whose 180° branch is settled will do (one a
 * fit found, or one stated; ssb4d_values_rotation_from refuses the rest). The microscope values FILE
 * records are compared with this data's: a rotation belongs to the projector's settings, so a
 * difference is worth a warning. */
static int rotation_from(const cli_micro *m, ssb4d_values *out, int warn)
{
    const char *path = m->rotation_from_path;
    if (!isnan(m->flags.rotation_deg)) {
        cli_say("give --rotation or --rotation-from, not both");
        return CLI_EXIT_USAGE;
    }
    ssb4d_values fv;
    ssb4d_err err = {0};
    if (ssb4d_values_rotation_from(path, &fv, &err)) { /* the library's checks, Python's too */
        cli_say("--rotation-from: %s", err.msg);
        return CLI_EXIT_USAGE;
    }
    const double a[4] = {fv.kv, fv.semiangle_mrad, fv.det_sampling_mrad[0], fv.det_sampling_mrad[1]};
    const double b[4] = {out->kv, out->semiangle_mrad, out->det_sampling_mrad[0], out->det_sampling_mrad[1]};
    static const char *const name[4] = {"kV", "semi-angle (mrad)", "detector sampling (mrad)",
                                        "detector sampling (mrad)"};
    for (int q = 0; warn && q < 4; q++)
        if (!isnan(a[q]) && !isnan(b[q]) && fabs(a[q] - b[q]) > 1e-6 * fmax(fabs(a[q]), fabs(b[q]))) {
            cli_say("warning: --rotation-from %s was calibrated at %s %g, this data at %g: check that the "
                    "rotation still holds", path, name[q], a[q], b[q]);
            break;
        }
    out->rotation_deg = fv.rotation_deg;
    out->rotation_measured = 0;
    out->rotation_sigma_deg = NAN;
    snprintf(out->rotation_from, sizeof out->rotation_from, "--rotation-from");
    if (fv.flip >= 0 && m->flags.flip < 0) {
        out->flip = fv.flip;
        snprintf(out->flip_from, sizeof out->flip_from, "--rotation-from");
    }
    return 0;
}

int cli_resolve(const char *data_path, cli_micro *m, ssb4d_values *out)
{
    return cli_resolve_values(data_path, m, out, 1);
}

int cli_resolve_values(const char *data_path, cli_micro *m, ssb4d_values *out, int warn)
{
    ssb4d_values lv;
    ssb4d_err err = {0};
    if (ssb4d_values_read(data_path, m->sidecar_path, m->calibration_path, &lv, &err)) {
        cli_say("%s", err.msg);
        return CLI_EXIT_USAGE;
    }
    *out = lv;
    /* Hashing DATA costs a read of the file (a .qem: its header only), so only when the
     * calibration file has an identity to compare with (and only once: kept in m). */
    const char *recorded = lv.calibration_identity;
    if (data_path && recorded[0] &&
        (m->data_identity[0] ||
         ssb4d_data_identity(data_path, m->data_identity, sizeof m->data_identity, NULL) == 0) &&
        ssb4d_calfile_identity_differs(recorded, m->data_identity)) {
        char a[128], b[128];
        short_identity(recorded, a, sizeof a);
        short_identity(m->data_identity, b, sizeof b);
        cli_say("warning: %s was made from other data (%s ≠ %s)", m->calibration_path, a, b);
    }
    if (warn) { /* a flag wins, but not silently over what a file records */
        ssb4d_values flagged = *out;
        ssb4d_values_layer(&flagged, &m->flags);
        int any = 0;
        const double *fl[4] = {&m->flags.kv, &m->flags.semiangle_mrad, m->flags.scan_step_A,
                               m->flags.det_sampling_mrad};
        const double *fi[4] = {&out->kv, &out->semiangle_mrad, out->scan_step_A, out->det_sampling_mrad};
        for (int q = 0; q < 4; q++)
            any |= differs(fl[q][0], fi[q][0]) || (q >= 2 && differs(fl[q][1], fi[q][1]));
        if (any) {
            static char from[4][4200];
            const char *fp[4] = {from[0], from[1], from[2], from[3]};
            value_sources(data_path, lv.sidecar_path[0] ? lv.sidecar_path : NULL, m->calibration_path, from);
            cli_warn_overrides(out, &m->flags, fp);
        }
    }
    ssb4d_values_layer(out, &m->flags);
    if (m->det_sampling_measure) /* unset: the library measures it (ssb4d_calib_params) */
        out->det_sampling_mrad[0] = out->det_sampling_mrad[1] = NAN;
    return m->rotation_from_path ? rotation_from(m, out, warn) : 0;
}

void cli_values_to_calib_params(const ssb4d_values *v, int threads, int hot_pixels,
                                ssb4d_calib_params *p)
{
    ssb4d_calib_params_default(p);
    p->kv = v->kv;
    p->semiangle_mrad = v->semiangle_mrad;
    for (int i = 0; i < 2; i++) {
        p->scan_step_A[i] = v->scan_step_A[i];
        p->det_sampling_mrad[i] = isnan(v->det_sampling_mrad[i]) ? 0.0 : v->det_sampling_mrad[i];
        p->centre_px[i] = v->centre_px[i];
    }
    p->rotation_deg = v->rotation_deg;
    p->flip = v->flip;
    p->bf_radius_px = isnan(v->bf_radius_px) ? 0.0 : v->bf_radius_px;
    p->edge_pixel_S = v->pixel_model_S;
    p->hot_pixels = hot_pixels;
    p->threads = threads;
}

int cli_check_microscope(const ssb4d_values *v)
{
    /* Each value, in this order: known when it must be, and within its parameter-table range
     * when set (by a flag, a calibration file or a sidecar). */
    const struct {
        const char *option, *unknown;
        const double *v;
        int n;
    } set[] = {
        {"kv", "the accelerating voltage is unknown: give --kv (kV)", &v->kv, 1},
        {"semiangle", "the convergence semi-angle is unknown: give --semiangle (mrad)", &v->semiangle_mrad, 1},
        {"scan-step", "the scan step is unknown: give --scan-step (Angstrom)", v->scan_step_A, 2},
        {"det-sampling", NULL, v->det_sampling_mrad, 2},
        {"bf-radius", NULL, &v->bf_radius_px, 1},
        {"rotation", NULL, &v->rotation_deg, 1},
    };
    /* The values that must be known and are not, all named in one line (not one per run). */
    static const char *const what_missing[3] = {"the accelerating voltage", "the convergence semi-angle",
                                                "the scan step"};
    static const char *const give[3] = {"--kv (kV)", "--semiangle (mrad)", "--scan-step (Angstrom)"};
    int missing[3], n_missing = 0;
    for (size_t i = 0; i < 3; i++)
        if (isnan(set[i].v[0]) || (set[i].n == 2 && isnan(set[i].v[1])))
            missing[n_missing++] = (int)i;
    if (n_missing == 1) {
        cli_say("%s", set[missing[0]].unknown);
        return CLI_EXIT_USAGE;
    }
    if (n_missing > 1) {
        char a[256] = "", b[256] = "";
        for (int j = 0; j < n_missing; j++) {
            const char *sep = j == 0 ? "" : j == n_missing - 1 ? " and " : ", ";
            snprintf(a + strlen(a), sizeof a - strlen(a), "%s%s", sep, what_missing[missing[j]]);
            snprintf(b + strlen(b), sizeof b - strlen(b), "%s%s", sep, give[missing[j]]);
        }
        cli_say("%s are unknown: give %s", a, b);
        return CLI_EXIT_USAGE;
    }
    ssb4d_calib_params scratch;
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        for (int k = 0; k < set[i].n; k++) {
            const ssb4d_param *p = ssb4d_param_find(SSB4D_OP_CALIBRATE, set[i].option);
            double x[2] = {set[i].v[k], set[i].v[k]};
            char what[160];
            if (isnan(x[0]) && set[i].unknown) {
                cli_say("%s", set[i].unknown);
                return CLI_EXIT_USAGE;
            }
            if (!isnan(x[0]) && ssb4d_param_set(p, &scratch, x, NULL) != SSB4D_OK) {
                cli_say("--%s must be %s %s (got %g)", set[i].option, ssb4d_param_describe(p, what, sizeof what),
                        p->unit, x[0]);
                return CLI_EXIT_USAGE;
            }
        }
    return 0;
}

cJSON *cli_json_num(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

cJSON *cli_json_pair(const double v[2])
{
    if (!isfinite(v[0]) && !isfinite(v[1]))
        return cJSON_CreateNull();
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cli_json_num(v[0]));
    cJSON_AddItemToArray(a, cli_json_num(v[1]));
    return a;
}

int cli_error(const char *cmd, ssb4d_status st, const char *msg)
{
    fprintf(stderr, "ssb4d %s: %s\n", cmd, msg);
    return (st == SSB4D_ENOMEM || st == SSB4D_EINTERNAL) ? CLI_EXIT_INTERNAL : CLI_EXIT_USAGE;
}

ssb4d_status cli_write_image(const char *path, const float *img, size_t rows, size_t cols,
                             double pixel_A[2], ssb4d_err *err)
{
    return ssb4d_image_save(path, img, rows, cols, pixel_A, "rad", err);
}

int cli_parse_aberr_list(const char *s, ssb4d_aberrations *ab, unsigned *c_mask, unsigned *phi_mask)
{
    char buf[1024];
    if (!s || strlen(s) >= sizeof buf) {
        cli_say("--aberr list is empty or too long");
        return -1;
    }
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        double v;
        if (!eq || cli_parse_double(eq + 1, &v)) {
            cli_say("--aberr entry '%s' is not NAME=VALUE (e.g. C30=1000 or phi32=15)", tok);
            return -1;
        }
        *eq = 0;
        int is_phi = (tok[0] == 'p' || tok[0] == 'P') && !strncasecmp(tok, "phi", 3);
        char name[16];
        snprintf(name, sizeof name, "C%s", is_phi ? tok + 3 : tok + 1);
        int i = (tok[0] == 'C' || tok[0] == 'c' || is_phi) ? ssb4d_aberr_index(name) : -1;
        if (i < 0) {
            cli_say("unknown aberration '%s' (use C10..C56 and phi12..phi56)", tok);
            return -1;
        }
        if (is_phi) {
            if (ssb4d_aberr_m(i) == 0) {
                cli_say("%s has no angle (m = 0)", ssb4d_aberr_name(i));
                return -1;
            }
            ab->phi_deg[i] = v;
            *phi_mask |= 1u << i;
        } else {
            ab->C_nm[i] = v;
            *c_mask |= 1u << i;
        }
    }
    return 0;
}

void cli_calfile_acquisition(const char *data, ssb4d_calfile *cf)
{
    ssb4d_values v;
    ssb4d_err err = {0};
    if (!data || ssb4d_values_read(data, NULL, NULL, &v, &err))
        return; /* DATA's own problems are reported where it is read */
    snprintf(cf->source_format, sizeof cf->source_format, "%s", v.source_format);
    cf->camera_length_mm = v.camera_length_mm;
    cf->dwell_us = v.dwell_us;
}

