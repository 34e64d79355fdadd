/* fs_dm.c — Gatan DM3 / DM4 files (Digital Micrograph, STEMx 4D-STEM): the tag tree is walked
 * through a small read-ahead window (dm.c; the data array itself is skipped, never read), the
 * dataset chosen and checked, and its frames read in place with the contiguous reader.
 *
 * Axes: DM lists Dimensions fastest first. A Gatan 4-D STEM dataset is stored as (det_col,
 * det_row, scan_col, scan_row) — whole diffraction patterns one after another in scan order —
 * which is ssb4d's C order (scan_row, scan_col, det_row, det_col) with nothing transposed (as
 * ncempy's dm.py and py4DSTEM's read_dm take it: calibration dimensions 0-1 are the detector,
 * 2-3 the scan). A 3-D dataset is a stack of frames (det_col, det_row, frame); its scan shape
 * comes from --scan-shape, the "Scan shape X/Y" tags (NCEM 4D STEM Tags) or a square count.
 *
 * Calibrations: scan steps from Calibrations/Dimension 2 and 3 when their units are a length,
 * detector sampling from Dimension 0 and 1 when their units are an angle; ImageTags give the
 * voltage, camera length, dwell time and convergence semi-angle. Every tag of the chosen image
 * (its ImageTags and ImageData calibrations) goes into the metadata under its tag path. */
#include "formats/fs_internal.h"

#include "common/err.h"
#include "formats/dm.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define DM_WINDOW_BYTES ((size_t)256 << 10) /* read-ahead for the tags */
#define DM_META_MAX 2000                    /* tags recorded in the metadata */

/* ---------------------------------------------------------------------------------------- */
/* Reading the tags through a window                                                          */

typedef struct {
    int fd;
    uint64_t size;
    uint8_t *buf;
    uint64_t start;
    size_t len;
} window;

static int window_read(void *ctx, uint64_t off, void *dst, size_t n)
{
    window *w = ctx;
    if (off >= w->start && n <= w->len && off - w->start <= w->len - n) {
        memcpy(dst, w->buf + (off - w->start), n);
        return 0;
    }
    if (n > DM_WINDOW_BYTES / 2)
        return fs_pread_full(w->fd, dst, n, (off_t)off, "", NULL) ? -1 : 0;
    size_t len = w->size - off < DM_WINDOW_BYTES ? (size_t)(w->size - off) : DM_WINDOW_BYTES;
    if (fs_pread_full(w->fd, w->buf, len, (off_t)off, "", NULL))
        return -1;
    w->start = off;
    w->len = len;
    memcpy(dst, w->buf, n);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Units                                                                                      */

/* Ångströms per unit of length, or NaN when `u` is not a length. */
static double length_to_A(const char *u)
{
    if (!strcmp(u, "nm"))
        return 10.0;
    if (!strcmp(u, "\xc3\x85") || !strcmp(u, "\xe2\x84\xab") || !strcmp(u, "A") || !strcasecmp(u, "ang") ||
        !strcasecmp(u, "angstrom"))
        return 1.0;
    if (!strcmp(u, "\xc2\xb5m") || !strcmp(u, "\xce\xbcm") || !strcmp(u, "um"))
        return 1e4;
    if (!strcmp(u, "pm"))
        return 0.01;
    return NAN;
}

/* Milliradians per unit of angle, or NaN when `u` is not an angle. */
static double angle_to_mrad(const char *u)
{
    if (!strcmp(u, "mrad"))
        return 1.0;
    if (!strcmp(u, "rad"))
        return 1e3;
    if (!strcmp(u, "\xc2\xb5rad") || !strcmp(u, "\xce\xbcrad") || !strcmp(u, "urad"))
        return 1e-3;
    return NAN;
}

/* A tag name that is `stem` optionally followed by " (unit)": the unit's factor to
 * microseconds (1 when no unit and `bare_us`), 0 when it does not match. */
static double time_name_to_us(const char *name, const char *stem, int bare_us)
{
    size_t k = strlen(stem);
    if (strncasecmp(name, stem, k) != 0)
        return 0;
    const char *u = name + k;
    if (!*u)
        return bare_us ? 1.0 : 0;
    if (!strcmp(u, " (s)"))
        return 1e6;
    if (!strcmp(u, " (ms)"))
        return 1e3;
    if (!strcmp(u, " (us)") || !strcmp(u, " (\xc2\xb5s)") || !strcmp(u, " (\xce\xbcs)"))
        return 1.0;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* The chosen image's tags: metadata and calibration                                          */

typedef struct {
    framesrc *s;
    char prefix[32];     /* "ImageList/<k>/" */
    size_t recorded, omitted;
    double kv, camera_mm, camera_mm_stem, dwell_us, semiangle_mrad;
    double scan_x, scan_y; /* "Scan shape X/Y" (NCEM 4D STEM Tags) */
    /* what the tags say the image is: Meta Data/Signal and /Format (GMS), an Orsay "spim"
       group, a Monarc CL spectrometer group; "" / 0 when absent */
    char signal[64], format[64];
    int spim, monarc;
    char kv_src[DM_PATH_MAX + 1], cam_src[DM_PATH_MAX + 1], dwell_src[DM_PATH_MAX + 1],
        semi_src[DM_PATH_MAX + 1];
} meta_pass;

static void record(meta_pass *m, const dm_tag *t)
{
    if (m->recorded >= DM_META_MAX) {
        m->omitted++;
        return;
    }
    if (t->has_number && !isfinite(t->number)) {
        /* JSON has no infinity or NaN (GMS writes inf, e.g. Exposure Live Time): kept as text */
        fs_meta_string(m->s, t->path, isnan(t->number) ? "nan" : t->number > 0 ? "inf" : "-inf");
    } else if (t->has_number) {
        fs_meta_number(m->s, t->path, t->number);
    } else if (t->text && (t->elem_type == DM_USHORT || t->type == DM_STRING)) {
        fs_meta_string(m->s, t->path, t->text);
    } else if (t->n_fields) {
        char buf[16 * 26 + 4];
        size_t o = 0;
        for (size_t i = 0; i < t->n_fields && o < sizeof buf; i++)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%.9g", i ? ", " : "[", t->fields[i]);
        if (o < sizeof buf)
            snprintf(buf + o, sizeof buf - o, "]");
        fs_meta_string(m->s, t->path, buf);
    } else if (t->text) {
        fs_meta_string(m->s, t->path, t->text);
    } else {
        return; /* large arrays (the data, images in tags) */
    }
    m->recorded++;
}

static void meta_visit(void *ctx, const dm_tag *t)
{
    meta_pass *m = ctx;
    size_t pl = strlen(m->prefix);
    if (strncmp(t->path, m->prefix, pl) != 0)
        return;
    const char *rel = t->path + pl;
    if (t->is_group) {
        if (!strcmp(rel, "ImageTags/spim"))
            m->spim = 1;
        else if (!strcmp(rel, "ImageTags/Acquisition/Monarc Spectrometer"))
            m->monarc = 1;
        return;
    }
    if (t->text && !strcmp(rel, "ImageTags/Meta Data/Signal"))
        snprintf(m->signal, sizeof m->signal, "%s", t->text);
    else if (t->text && !strcmp(rel, "ImageTags/Meta Data/Format"))
        snprintf(m->format, sizeof m->format, "%s", t->text);
    if (!strcmp(rel, "ImageData/Data"))
        return;
    record(m, t);
    if (!t->has_number || !isfinite(t->number))
        return;
    double v = t->number;
    if (!strcmp(rel, "ImageTags/Microscope Info/Voltage") && v > 0) {
        m->kv = v / 1000.0;
        snprintf(m->kv_src, sizeof m->kv_src, "%s", t->path);
    } else if (!strcmp(rel, "ImageTags/Microscope Info/STEM Camera Length") && v > 0) {
        m->camera_mm_stem = v;
        snprintf(m->cam_src, sizeof m->cam_src, "%s", t->path);
    } else if (!strcmp(rel, "ImageTags/Microscope Info/Camera Length") && v > 0 && isnan(m->camera_mm_stem)) {
        m->camera_mm = v;
        snprintf(m->cam_src, sizeof m->cam_src, "%s", t->path);
    }
    if (strncmp(rel, "ImageTags/", 10) != 0)
        return;
    /* dwell: DigiScan's "Sample Time" is in microseconds; elsewhere the name must give a unit */
    int digiscan = strstr(rel, "/DigiScan/") != NULL;
    double f = time_name_to_us(t->name, "Sample Time", digiscan);
    if (!f)
        f = time_name_to_us(t->name, "Pixel Time", digiscan);
    if (!f)
        f = time_name_to_us(t->name, "Dwell Time", digiscan);
    if (f && v > 0 && isnan(m->dwell_us)) {
        m->dwell_us = v * f;
        snprintf(m->dwell_src, sizeof m->dwell_src, "%s", t->path);
    }
    static const char *const semi[] = {"Convergence semi-angle", "Convergence semiangle",
                                       "Convergence half-angle"};
    for (size_t i = 0; i < sizeof semi / sizeof semi[0] && isnan(m->semiangle_mrad); i++) {
        size_t k = strlen(semi[i]);
        if (strncasecmp(t->name, semi[i], k) != 0 || !(v > 0))
            continue;
        const char *u = t->name + k;
        double g = !*u || !strcasecmp(u, " (mrad)") ? 1.0 : !strcasecmp(u, " (rad)") ? 1e3 : NAN;
        if (!isnan(g)) {
            m->semiangle_mrad = v * g;
            snprintf(m->semi_src, sizeof m->semi_src, "%s", t->path);
        }
    }
    if (!strcasecmp(t->name, "Scan shape X") && v >= 1)
        m->scan_x = v;
    else if (!strcasecmp(t->name, "Scan shape Y") && v >= 1)
        m->scan_y = v;
}

/* Scan steps and detector sampling from the chosen image's dimension calibrations. */
static void dimension_calibration(framesrc *s, const dm_image *im, int rank)
{
    for (int d = 0; d < rank; d++) {
        double sc = im->scale[d];
        if (!(sc > 0) || !isfinite(sc))
            continue;
        /* C-order axis of DM dimension d: rank 4 scan_row = 3, scan_col = 2, det_row = 1,
           det_col = 0; rank 3 frame = 2 */
        if (rank == 4 && d >= 2) {
            double f = length_to_A(im->units[d]);
            if (!isnan(f))
                s->cal.scan_step_A[d == 3 ? 0 : 1] = sc * f;
        } else if (d <= 1) {
            double f = angle_to_mrad(im->units[d]);
            if (!isnan(f))
                s->cal.det_sampling_mrad[d == 1 ? 0 : 1] = sc * f;
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                    */

static ssb4d_status parse_index(const char *text, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno || v < 0)
        return SSB4D_EINVAL;
    *out = v;
    return SSB4D_OK;
}

ssb4d_status fs_dm_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    long want = -1;
    if (o && o->dataset && parse_index(o->dataset, &want))
        return ssb_fail(err, SSB4D_EINVAL, "%s: --dataset for a DM file is the ImageList entry to "
                        "read (0, 1, ...), not '%s'", path, o->dataset);
    int fd;
    size_t size = 0;
    ssb4d_status st = fs_contiguous_open(path, &fd, &size, err);
    if (st)
        return st;
    window win = {fd, size, malloc(DM_WINDOW_BYTES), 0, 0};
    dm_info *info = malloc(sizeof *info);
    meta_pass *m = calloc(1, sizeof *m);
    if (!win.buf || !info || !m) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
        goto fail;
    }
    dm_input in = {window_read, &win, size};
    ssb4d_err e = {0};
    dm_dataset ds;
    if ((st = dm_read_info(&in, info, &e)) || (st = dm_select(info, want, &ds, &e))) {
        st = ssb_fail(err, st, "%s: %s", path, e.msg);
        goto fail;
    }
    /* second walk: the chosen image's tags (the tree was checked by the first) */
    m->s = s;
    snprintf(m->prefix, sizeof m->prefix, "ImageList/%zu/", ds.index);
    m->kv = m->camera_mm = m->camera_mm_stem = m->dwell_us = m->semiangle_mrad = NAN;
    dm_header h;
    if ((st = dm_walk(&in, &h, meta_visit, m, &e))) {
        st = ssb_fail(err, st, "%s: %s", path, e.msg);
        goto fail;
    }
    /* a spectrum image (EELS, CL, EDS: a spectrum per scan position) has the ranks of 4D-STEM
       data but its frames are no diffraction patterns: refused whatever the flags */
    int si_format = !strcasecmp(m->format, "Spectrum image") || !strcasecmp(m->format, "Spectrum");
    int si_signal = !strcasecmp(m->signal, "EELS") || !strcasecmp(m->signal, "CL") ||
                    !strcasecmp(m->signal, "X-ray") || !strcasecmp(m->signal, "EDS") ||
                    !strcasecmp(m->signal, "EDX");
    if (si_format || si_signal || m->spim || m->monarc) {
        char said[200];
        if (m->signal[0] || m->format[0])
            snprintf(said, sizeof said, "its tags say Meta Data/Signal = %s, Format = %s",
                     m->signal[0] ? m->signal : "(none)", m->format[0] ? m->format : "(none)");
        else
            snprintf(said, sizeof said, "its tags hold a %s group",
                     m->spim ? "spim (Orsay spectrum image)" : "Monarc (CL) spectrometer");
        const char *kind = !strcasecmp(m->signal, "X-ray") ? "EDS" : m->signal[0] ? m->signal
                         : m->monarc ? "CL" : "";
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: ImageList entry %zu is %s%s spectrum image (%s), "
                      "not 4D-STEM diffraction frames: ssb4d does not read spectrum images", path,
                      ds.index, kind[0] ? (strchr("AEFHILMNORSX", toupper((unsigned char)kind[0]))
                                           ? "an " : "a ") : "a", kind, said);
        goto fail;
    }
    size_t shape[4];
    const char *how = "file";
    if (ds.rank == 4) {
        memcpy(shape, ds.shape, sizeof shape);
        if (o && o->shape[0] && o->shape[1] && (o->shape[0] != shape[0] || o->shape[1] != shape[1])) {
            st = ssb_fail(err, SSB4D_EINVAL, "%s has a %zux%zu scan, not the %zux%zu asked", path,
                          shape[0], shape[1], o->shape[0], o->shape[1]);
            goto fail;
        }
    } else {
        size_t hr = m->scan_y >= 1 && m->scan_y < 1e9 ? (size_t)m->scan_y : 0;
        size_t hc = m->scan_x >= 1 && m->scan_x < 1e9 ? (size_t)m->scan_x : 0;
        if ((st = fs_scan_shape(ds.shape[0], o, hr, hc, "its \"Scan shape X/Y\" tags", path, shape,
                                &how, err)))
            goto fail;
        shape[2] = ds.shape[1];
        shape[3] = ds.shape[2];
    }
    if ((st = fs_check_shape(shape, path, err)) ||
        (st = fs_check_det_opts(o, shape[2], shape[3], path, err)))
        goto fail;
    memcpy(s->shape, shape, sizeof shape);
    s->dtype_bytes = ds.bytes;
    s->dtype_signed = ds.is_signed;
    s->is_float = ds.is_float;
    s->format_name = "gatan-dm";

    const dm_image *im = &info->images[ds.index];
    dimension_calibration(s, im, ds.rank);
    s->cal.kv = m->kv;
    s->cal.camera_length_mm = isnan(m->camera_mm_stem) ? m->camera_mm : m->camera_mm_stem;
    s->cal.dwell_us = m->dwell_us;
    s->cal.semiangle_mrad = m->semiangle_mrad;
    fs_meta_number(s, "dm_version", info->header.version);
    fs_meta_string(s, "dm_byte_order", info->header.little_endian ? "little-endian" : "big-endian");
    fs_meta_number(s, "dm_image_index", (double)ds.index);
    fs_meta_string(s, "dm_data_type", ds.type_name);
    char dims[128];
    size_t k = 0;
    for (size_t d = 0; d < im->ndims && k < sizeof dims; d++)
        k += (size_t)snprintf(dims + k, sizeof dims - k, "%s%llu", d ? "x" : "",
                              (unsigned long long)im->dims[d]);
    if (k < sizeof dims)
        snprintf(dims + k, sizeof dims - k, " (fastest first)");
    fs_meta_string(s, "dm_dimensions", dims);
    fs_meta_number(s, "dm_data_offset", (double)ds.data_offset);
    if (ds.rank == 3)
        fs_meta_string(s, "scan_shape_source", how);
    if (m->kv_src[0])
        fs_meta_string(s, "kv_source", m->kv_src);
    if (m->cam_src[0])
        fs_meta_string(s, "camera_length_source", m->cam_src);
    if (m->dwell_src[0])
        fs_meta_string(s, "dwell_source", m->dwell_src);
    if (m->semi_src[0])
        fs_meta_string(s, "semiangle_source", m->semi_src);
    if (m->omitted)
        fs_meta_number(s, "dm_tags_not_recorded", (double)m->omitted);
    free(win.buf);
    free(info);
    free(m);
    /* the values are one contiguous C-order block: frames one after another */
    return fs_contiguous_attach(s, fd, (size_t)ds.data_offset, ds.big_endian, err);
fail:
    close(fd);
    free(win.buf);
    free(info);
    free(m);
    return st;
}

int fs_dm_detect(const unsigned char *head, size_t n)
{
    if (n < 16)
        return 0;
    uint32_t v = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
    size_t at = v == 3 ? 8 : v == 4 ? 12 : 0;
    if (!at)
        return 0;
    const unsigned char *b = head + at;
    return b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] <= 1;
}
