/* fs_mrc.c — MRC / MRCS stacks of frames (MRC2014, header parsed by mrc.c): nz frames of ny rows
 * of nx values, contiguous after the 1024-byte header and the extended header, read by the
 * contiguous reader of fs_raw.c in the file's byte order. Frame row r is the file's row y = r
 * (MRC viewers draw y upwards; ssb4d keeps the stored order, as for every format).
 *
 * The scan shape, in this order: --scan-shape; the Thermo Fisher extended header (Velox 4D-STEM
 * files, exttyp FEI1 / FEI2: "Scan size left/top/right/bottom" of the first record, rows =
 * bottom - top, columns = right - left, as pycroscopy's SciFiReaders reads Velox 4D-STEM MRC);
 * a stack of volumes (ispg 401..630: nz / mz rows of mz, how mrcfile writes a 4-D array); the
 * Direct Electron sidecar NAME_info.txt of NAME_movie.mrc ("Scan - Size X / Y", as rosettasciio
 * reads DE-Series 4D-STEM movies); else a square frame count.
 *
 * Calibration: FEI HT (V), camera length (m), convergence angle (rad; taken as the semi-angle),
 * dwell time (s) and, for diffraction frames, pixel size (1/m, times the wavelength = mrad);
 * the DE sidecar's specimen pixel size (nm: the scan step), camera length (cm), accelerating
 * voltage (V) and dwell time (us). Refused: a single 2-D image (nz = 1), and a DE scan whose
 * Scan - Type is not Raster (Random, XY File), whatever the frame count. The header's
 * cell (cella / mx: Å per pixel) and every other field go to the metadata. */
#include "formats/fs_internal.h"

#include "common/err.h"
#include "formats/mrc.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define FEI_READ_MAX 4096        /* bytes of the extended header read: its first record */
#define DE_INFO_MAX (1u << 20)   /* a DE _info.txt larger than this is not one */
#define DE_INFO_KEYS 400

/* Electron wavelength (m) at kv kilovolts, relativistic (CODATA 2018). */
static double wavelength_m(double kv)
{
    const double h = 6.62607015e-34, c = 299792458.0, e = 1.602176634e-19, m = 9.1093837015e-31;
    double V = kv * 1e3;
    return h / sqrt(2.0 * m * e * V * (1.0 + e * V / (2.0 * m * c * c)));
}

static int positive(double v) { return isfinite(v) && v > 0; }

/* ---------------------------------------------------------------------------------------- */
/* Thermo Fisher extended header                                                              */

static void fei_record(framesrc *s, const mrc_fei *f, size_t *rows, size_t *cols)
{
    fs_meta_number(s, "fei_metadata_version", f->version);
    fs_meta_number(s, "fei_record_bytes", f->record_bytes);
    const struct { const char *key; const char *v; } texts[] = {
        {"fei_microscope", f->microscope}, {"fei_application", f->application},
        {"fei_application_version", f->application_version}, {"fei_camera", f->camera},
        {"fei_stem_detector", f->stem_detector}, {"fei_detector_commercial_name", f->detector_commercial},
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        if (*texts[i].v)
            fs_meta_string(s, texts[i].key, texts[i].v);
    const struct { const char *key; double v; const char *unit; } nums[] = {
        {"fei_ht", f->ht_V, "V"}, {"fei_camera_length", f->camera_length_m, "m"},
        {"fei_convergence_angle", f->convergence_rad, "rad"}, {"fei_magnification", f->magnification, ""},
        {"fei_dwell_time", f->dwell_s, "s"}, {"fei_frame_time", f->frame_time_s, "s"},
        {"fei_full_scan_fov_x", f->full_fov_m[0], "m"}, {"fei_full_scan_fov_y", f->full_fov_m[1], "m"},
        {"fei_scan_rotation", f->scan_rotation_rad, "rad"},
        {"fei_diffraction_pattern_rotation", f->diffraction_rotation_rad, "rad"},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (isfinite(nums[i].v) && nums[i].v != 0)
            fs_meta_quantity(s, nums[i].key, nums[i].v, nums[i].unit);
    /* diffraction frames carry a reciprocal pixel size (order 1e8 1/m), images one in metres */
    int reciprocal = positive(f->pixel_size[0]) && f->pixel_size[0] > 1.0;
    for (int i = 0; i < 2; i++)
        if (positive(f->pixel_size[i]))
            fs_meta_quantity(s, i ? "fei_pixel_size_y" : "fei_pixel_size_x", f->pixel_size[i],
                             reciprocal ? "1/m" : "m");
    if (f->binning[0] > 0 && f->binning[1] > 0) {
        char t[48];
        snprintf(t, sizeof t, "%d x %d", (int)f->binning[0], (int)f->binning[1]);
        fs_meta_string(s, "fei_binning", t);
    }
    if (f->beam_center[0] >= 0 && f->beam_center[1] >= 0) {
        char t[48];
        snprintf(t, sizeof t, "%d, %d", (int)f->beam_center[0], (int)f->beam_center[1]);
        fs_meta_string(s, "fei_beam_center_pixel", t);
    }
    if (f->scan_left || f->scan_top || f->scan_right || f->scan_bottom) {
        char t[80];
        snprintf(t, sizeof t, "left %d, top %d, right %d, bottom %d", (int)f->scan_left,
                 (int)f->scan_top, (int)f->scan_right, (int)f->scan_bottom);
        fs_meta_string(s, "fei_scan_size", t);
        if (f->scan_right > f->scan_left && f->scan_bottom > f->scan_top) {
            *rows = (size_t)((int64_t)f->scan_bottom - f->scan_top);
            *cols = (size_t)((int64_t)f->scan_right - f->scan_left);
        }
    }
    if (positive(f->ht_V))
        s->cal.kv = f->ht_V / 1e3;
    if (positive(f->camera_length_m))
        s->cal.camera_length_mm = f->camera_length_m * 1e3;
    if (positive(f->convergence_rad) && f->convergence_rad < 0.5) /* radians, not degrees or mrad */
        s->cal.semiangle_mrad = f->convergence_rad * 1e3;
    if (positive(f->dwell_s))
        s->cal.dwell_us = f->dwell_s * 1e6;
    if (reciprocal && positive(s->cal.kv) && positive(f->pixel_size[1])) {
        /* cal's index 0 is along rows (y), 1 along columns (x) */
        s->cal.det_sampling_mrad[0] = f->pixel_size[1] * wavelength_m(s->cal.kv) * 1e3;
        s->cal.det_sampling_mrad[1] = f->pixel_size[0] * wavelength_m(s->cal.kv) * 1e3;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Direct Electron sidecar: NAME_info.txt beside NAME_movie.mrc, lines "key = value"           */

static char *de_info_path(const char *path)
{
    static const char *const tails[] = {"_movie.mrc", "_movie.mrcs"};
    size_t n = strlen(path);
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(tails[i]);
        if (n > k && strcasecmp(path + n - k, tails[i]) == 0) {
            char *p = malloc(n - k + sizeof "_info.txt");
            if (p) {
                memcpy(p, path, n - k);
                strcpy(p + n - k, "_info.txt");
            }
            return p;
        }
    }
    return NULL;
}

static char *trim(char *t)
{
    while (isspace((unsigned char)*t))
        t++;
    size_t n = strlen(t);
    while (n && isspace((unsigned char)t[n - 1]))
        t[--n] = '\0';
    return t;
}

/* A positive number from a value, or 0. */
static double de_number(const char *v)
{
    char *end;
    double x = strtod(v, &end);
    return end != v && isfinite(x) && x > 0 ? x : 0;
}

/* Reads the sidecar when there is one: every line to the metadata (prefix "de_info/"), the
 * raster scan size as the hint, specimen pixel size, camera length, accelerating voltage and
 * dwell time as calibration. scan_type receives "Scan - Type" when DE-Server drove a scan of
 * another kind than a raster (Random, XY File: the frames follow a list of positions), else "";
 * info_name the sidecar's file name. */
static void de_info(framesrc *s, const char *path, size_t *rows, size_t *cols, char *scan_type,
                    size_t type_n, char *info_name, size_t name_n)
{
    scan_type[0] = '\0';
    info_name[0] = '\0';
    char *ip = de_info_path(path);
    FILE *f = ip ? fopen(ip, "rb") : NULL;
    if (!f) {
        free(ip);
        return;
    }
    char *text = malloc(DE_INFO_MAX + 1);
    size_t n = text ? fread(text, 1, DE_INFO_MAX + 1, f) : 0;
    fclose(f);
    if (!text || n > DE_INFO_MAX) {
        free(text);
        free(ip);
        return;
    }
    text[n] = '\0';
    const char *slash = strrchr(ip, '/');
    fs_meta_string(s, "de_info_file", slash ? slash + 1 : ip);
    snprintf(info_name, name_n, "%s", slash ? slash + 1 : ip);
    free(ip);
    size_t keys = 0, sx = 0, sy = 0;
    int scanning = 1, raster = 1;
    char type[64] = "";
    double step[2] = {0, 0};
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        char *k = trim(line), *v = trim(eq + 1);
        if (!*k)
            continue;
        if (keys++ < DE_INFO_KEYS) {
            char key[160];
            snprintf(key, sizeof key, "de_info/%.140s", k);
            for (char *c = v; *c; c++)
                if ((unsigned char)*c < 32)
                    *c = ' ';
            fs_meta_string(s, key, v);
        }
        if (!strcmp(k, "Scan - Size X"))
            sx = (size_t)de_number(v);
        else if (!strcmp(k, "Scan - Size Y"))
            sy = (size_t)de_number(v);
        else if (!strcmp(k, "Scan - Enable"))
            scanning = !strcasecmp(v, "Enable");
        else if (!strcmp(k, "Scan - Type")) {
            raster = !strcasecmp(v, "Raster");
            snprintf(type, sizeof type, "%s", v);
        }
        else if (!strcmp(k, "Specimen Pixel Size X (nanometers)"))
            step[1] = de_number(v);
        else if (!strcmp(k, "Specimen Pixel Size Y (nanometers)"))
            step[0] = de_number(v);
        else if (!strcmp(k, "Instrument Project Camera Length (centimeters)") && de_number(v) > 0)
            s->cal.camera_length_mm = de_number(v) * 10.0;
        else if (!strcmp(k, "Instrument Accelerating Voltage (V)") && de_number(v) > 0)
            s->cal.kv = de_number(v) / 1e3;
        else if (!strcmp(k, "Scan - Dwell Time (microseconds)") && de_number(v) > 0)
            s->cal.dwell_us = de_number(v);
    }
    free(text);
    if (scanning && !raster)
        snprintf(scan_type, type_n, "%s", type[0] ? type : "(empty)");
    /* a raster scan only: other scan types list their positions in a separate file */
    if (scanning && raster && sx && sy && sx < 65536 && sy < 65536) {
        *rows = sy;
        *cols = sx;
        if (step[0] > 0 && step[1] > 0) {
            s->cal.scan_step_A[0] = step[0] * 10.0;
            s->cal.scan_step_A[1] = step[1] * 10.0;
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Header fields to the metadata                                                              */

static void header_meta(framesrc *s, const mrc_header *h)
{
    char t[200];
    snprintf(t, sizeof t, "%d (%s)", (int)h->mode, h->mode_name);
    fs_meta_string(s, "mrc_mode", t);
    snprintf(t, sizeof t, "%s (%s)", h->big_endian ? "big-endian" : "little-endian",
             h->stamp_known ? "machine stamp" : "inferred: no machine stamp");
    fs_meta_string(s, "mrc_byte_order", t);
    if (!h->has_map)
        fs_meta_string(s, "mrc_map_marker", "absent (a header older than MRC2000)");
    fs_meta_number(s, "mrc_nversion", h->nversion);
    fs_meta_number(s, "mrc_ispg", h->ispg);
    fs_meta_number(s, "mrc_extended_header_bytes", h->nsymbt);
    if (*h->exttyp)
        fs_meta_string(s, "mrc_exttyp", h->exttyp);
    snprintf(t, sizeof t, "%d %d %d", (int)h->nxstart, (int)h->nystart, (int)h->nzstart);
    fs_meta_string(s, "mrc_start", t);
    snprintf(t, sizeof t, "%d %d %d", (int)h->mx, (int)h->my, (int)h->mz);
    fs_meta_string(s, "mrc_sampling_mxyz", t);
    snprintf(t, sizeof t, "%.9g %.9g %.9g A", h->cella[0], h->cella[1], h->cella[2]);
    fs_meta_string(s, "mrc_cell", t);
    snprintf(t, sizeof t, "%.9g %.9g %.9g deg", h->cellb[0], h->cellb[1], h->cellb[2]);
    fs_meta_string(s, "mrc_cell_angles", t);
    snprintf(t, sizeof t, "%.9g %.9g %.9g A", h->origin[0], h->origin[1], h->origin[2]);
    fs_meta_string(s, "mrc_origin", t);
    /* Å per pixel along x and y: the frame's own pixel (a detector pixel for diffraction) */
    if (h->mx > 0 && h->my > 0 && h->cella[0] > 0 && h->cella[1] > 0) {
        snprintf(t, sizeof t, "%.9g %.9g A", h->cella[0] / (double)h->mx, h->cella[1] / (double)h->my);
        fs_meta_string(s, "mrc_pixel_spacing_xy", t);
    }
    snprintf(t, sizeof t, "%.9g %.9g %.9g %.9g", h->dmin, h->dmax, h->dmean, h->rms);
    fs_meta_string(s, "mrc_dmin_dmax_dmean_rms", t);
    if (h->imod)
        fs_meta_string(s, "mrc_imod_stamp", "present");
    for (int i = 0; i < 10; i++)
        if (*h->labels[i]) {
            char key[24];
            snprintf(key, sizeof key, "mrc_label_%d", i);
            fs_meta_string(s, key, h->labels[i]);
        }
}

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                    */

ssb4d_status fs_mrc_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    int fd;
    size_t size = 0;
    ssb4d_status st = fs_contiguous_open(path, &fd, &size, err);
    if (st)
        return st;
    uint8_t head[MRC_HEADER_BYTES];
    size_t got = size < sizeof head ? size : sizeof head;
    mrc_header h;
    ssb4d_err e = {0};
    if ((st = fs_pread_full(fd, head, got, 0, path, err)))
        goto fail;
    if (mrc_parse_header(head, got, size, &h, &e)) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: %s", path, e.msg);
        goto fail;
    }
    if (h.nz == 1) {
        /* a sum, a virtual image, an HAADF image: one frame cannot be a scan */
        st = ssb_fail(err, SSB4D_EFORMAT, "%s holds a single %dx%d image (nz = 1), not a stack of "
                      "diffraction frames: a 4D-STEM MRC holds one frame per scan position", path,
                      (int)h.ny, (int)h.nx);
        goto fail;
    }
    size_t rows = 0, cols = 0;
    const char *hint_from = NULL;
    mrc_fei fei;
    int fei2 = !strcmp(h.exttyp, "FEI2");
    if (h.nsymbt > 0 && (fei2 || !strcmp(h.exttyp, "FEI1"))) {
        size_t n = (size_t)h.nsymbt < FEI_READ_MAX ? (size_t)h.nsymbt : FEI_READ_MAX;
        uint8_t *ext = malloc(n);
        if (!ext) {
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
            goto fail;
        }
        if ((st = fs_pread_full(fd, ext, n, MRC_HEADER_BYTES, path, err))) {
            free(ext);
            goto fail;
        }
        if (mrc_parse_fei(ext, n, h.big_endian, fei2, &fei)) {
            fei_record(s, &fei, &rows, &cols);
            if (rows)
                hint_from = "its FEI extended header (Scan size left/top/right/bottom)";
        } else {
            fs_meta_string(s, "fei_extended_header", "present but not readable (record size)");
        }
        free(ext);
    }
    if (!rows && h.vol_count) {
        rows = h.vol_count;
        cols = h.vol_sections;
        hint_from = "its header (a stack of volumes: ispg 401, nz / mz volumes of mz sections)";
    }
    size_t de_rows = 0, de_cols = 0;
    char de_type[64], de_name[256];
    de_info(s, path, &de_rows, &de_cols, de_type, sizeof de_type, de_name, sizeof de_name);
    if (de_type[0]) {
        /* the frames follow DE-Server's list of positions: no --scan-shape can make them a raster */
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: its %s says Scan - Type = %s: the frames follow a "
                      "list of scan positions, not a raster, and ssb4d reconstructs raster scans "
                      "only", path, de_name, de_type);
        goto fail;
    }
    if (!rows && de_rows) {
        rows = de_rows;
        cols = de_cols;
        hint_from = "its Direct Electron _info.txt (Scan - Size X / Y)";
    }
    size_t shape[4];
    const char *how = "file";
    if ((st = fs_scan_shape((size_t)h.nz, o, rows, cols, hint_from, path, shape, &how, err)))
        goto fail;
    shape[2] = (size_t)h.ny;
    shape[3] = (size_t)h.nx;
    if ((st = fs_check_shape(shape, path, err)) ||
        (st = fs_check_det_opts(o, shape[2], shape[3], path, err)))
        goto fail;
    memcpy(s->shape, shape, sizeof shape);
    s->dtype_bytes = h.dtype_bytes;
    s->dtype_signed = h.dtype_signed;
    s->is_float = h.is_float;
    s->format_name = "mrc";
    header_meta(s, &h);
    fs_meta_string(s, "scan_shape_source", how);
    if (!strcmp(how, "file"))
        fs_meta_string(s, "scan_shape_record", hint_from);
    return fs_contiguous_attach(s, fd, h.data_offset, h.big_endian, err); /* takes fd over */
fail:
    close(fd);
    return st;
}

/* Claims a file by the "MAP " marker of MRC2000 and later (so a damaged header still gets the
 * MRC reader's message naming the field), or, for older headers without it, only when the
 * header is wholly consistent: a readable mode, axis order 1,2,3 and data filling the file. */
int fs_mrc_detect(const unsigned char *head, size_t n, size_t size)
{
    if (n >= 212 && memcmp(head + 208, "MAP ", 4) == 0)
        return 1;
    mrc_header h;
    ssb4d_err e;
    return mrc_parse_header(head, n, size, &h, &e) == SSB4D_OK && h.mapc == 1 && h.mapr == 2 &&
           h.maps == 3;
}
