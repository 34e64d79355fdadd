/* fs_empad.c — EMPAD acquisitions: NAME.xml (parsed by empad.c) and the .raw it names, float32
 * little-endian frames of 128 columns x 130 rows whose last two rows (a per-frame footer) are
 * dropped. Opened by the .xml, or by the .raw when an .xml beside it names it (or, with
 * --scan-shape, the .raw alone). The raw size must be exactly the scan's frames: a truncated or
 * foreign .raw is refused with what the .xml said and what the size would need. */
#include "formats/fs_internal.h"

#include "common/err.h"
#include "formats/empad.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define EMPAD_FRAME_BYTES ((size_t)EMPAD_RAW_ROWS * EMPAD_DET_COLS * 4)
#define EMPAD_SIBLING_XML_MAX 256          /* .xml files looked at beside a .raw */
#define EMPAD_SIBLING_XML_BYTES ((size_t)1 << 20)
#define EMPAD_META_MAX 256                 /* xml values recorded in the metadata */
#define EMPAD_META_NODES 4096              /* elements walked for them */

static int has_suffix(const char *path, const char *suffix)
{
    size_t n = strlen(path), k = strlen(suffix);
    return n >= k && strcasecmp(path + n - k, suffix) == 0;
}

/* The directory part of path joined with name (malloc'd; NULL when out of memory). */
static char *beside(const char *path, const char *name)
{
    const char *slash = strrchr(path, '/');
    size_t dn = slash ? (size_t)(slash - path) + 1 : 0, nn = strlen(name);
    char *out = malloc(dn + nn + 1);
    if (out) {
        memcpy(out, path, dn);
        memcpy(out + dn, name, nn + 1);
    }
    return out;
}

/* Reads a whole file of at most max bytes; *too_big set when it is larger. */
static ssb4d_status slurp(const char *path, size_t max, char **buf, size_t *len, int *too_big,
                          ssb4d_err *err)
{
    *buf = NULL;
    *too_big = 0;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    size_t size = 0;
    ssb4d_status st = fs_file_size(fd, path, &size, err);
    if (!st && size > max) {
        *too_big = 1;
        st = ssb_fail(err, SSB4D_EFORMAT, "%s is %zu bytes, more than the %zu an EMPAD .xml may "
                      "have", path, size, max);
    }
    if (!st && !(*buf = malloc(size ? size : 1)))
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory reading %s", path);
    if (!st && (st = fs_pread_full(fd, *buf, size, 0, path, err))) {
        free(*buf);
        *buf = NULL;
    }
    close(fd);
    *len = size;
    return st;
}

/* Parses the .xml at path (errors name it). */
static ssb4d_status read_xml(const char *path, empad_xml *doc, empad_info *info, ssb4d_err *err)
{
    char *buf;
    size_t len = 0;
    int big;
    ssb4d_status st = slurp(path, EMPAD_XML_MAX_BYTES, &buf, &len, &big, err);
    if (st)
        return st;
    ssb4d_err e = {0};
    if ((st = empad_xml_parse(buf, len, doc, &e)) || (st = empad_info_read(doc, info, &e))) {
        empad_xml_free(doc);
        st = ssb_fail(err, st, "%s: %s", path, e.msg);
    }
    free(buf);
    return st;
}

/* The .xml beside raw_path whose <raw_file> names it: 1 found (*xml_path malloc'd), 0 none,
 * -1 several (*xml_path = the first, *other = a second; both malloc'd). Unreadable or foreign
 * .xml files are passed over. */
static int find_xml(const char *raw_path, char **xml_path, char **other)
{
    *xml_path = *other = NULL;
    char *dir = beside(raw_path, "");
    if (!dir)
        return 0;
    DIR *d = opendir(*dir ? dir : ".");
    int found = 0, looked = 0;
    const char *raw_base = empad_basename(raw_path);
    struct dirent *de;
    while (d && (de = readdir(d)) && looked < EMPAD_SIBLING_XML_MAX) {
        if (!has_suffix(de->d_name, ".xml"))
            continue;
        looked++;
        char *p = beside(raw_path, de->d_name), *buf = NULL;
        size_t len = 0;
        int big;
        ssb4d_err e = {0};
        empad_info info;
        if (p && !slurp(p, EMPAD_SIBLING_XML_BYTES, &buf, &len, &big, &e) &&
            !empad_parse(buf, len, &info, &e) && strcmp(empad_basename(info.raw_name), raw_base) == 0) {
            if (!found++)
                *xml_path = p;
            else if (!*other)
                *other = p;
            else
                free(p);
            p = NULL;
        }
        free(buf);
        free(p);
    }
    if (d)
        closedir(d);
    free(dir);
    return found > 1 ? -1 : found;
}

/* 1 when raw_path is a .raw that an .xml beside it names (for format detection). */
int fs_empad_raw_has_xml(const char *raw_path)
{
    char *x, *y;
    int r = has_suffix(raw_path, ".raw") ? find_xml(raw_path, &x, &y) : 0;
    if (r) {
        free(x);
        free(y);
    }
    return r != 0;
}

/* ---- metadata: every value of the .xml, as "empad_xml/PATH" (PATH with [k] for repeated
 * siblings, @name for attributes), bounded in number ---- */

typedef struct {
    framesrc *s;
    const empad_xml *doc;
    size_t entries, visited;
} meta_walk;

static void record(meta_walk *w, const char *key, const char *value, size_t n)
{
    if (w->entries >= EMPAD_META_MAX)
        return;
    char v[256];
    size_t k = n < sizeof v - 1 ? n : sizeof v - 1;
    memcpy(v, value, k);
    v[k] = 0;
    fs_meta_string(w->s, key, v);
    w->entries++;
}

static void walk(meta_walk *w, int node, char *path, size_t plen, size_t cap)
{
    const empad_xml *d = w->doc;
    const empad_xml_node *e = &d->nodes[node];
    if (++w->visited > EMPAD_META_NODES || w->entries >= EMPAD_META_MAX)
        return;
    /* analysis state of the EMPAD software, not of the acquisition */
    if (e->depth == 1 && (!strcmp(e->name, "reconstructions") ||
                          !strcmp(e->name, "reconstruction_parameters")))
        return;
    for (size_t a = e->attr0; a < e->attr0 + e->n_attrs; a++) {
        int k = snprintf(path + plen, cap - plen, "@%s", d->attrs[a].name);
        if (k > 0 && (size_t)k < cap - plen)
            record(w, path, d->attrs[a].value, strlen(d->attrs[a].value));
    }
    path[plen] = 0;
    if (e->first_child < 0) {
        const char *t = e->text;
        size_t n = e->text_len;
        while (n && (*t == ' ' || *t == '\t' || *t == '\n' || *t == '\r')) {
            t++;
            n--;
        }
        while (n && (t[n - 1] == ' ' || t[n - 1] == '\t' || t[n - 1] == '\n' || t[n - 1] == '\r'))
            n--;
        if (n && e->depth > 0)
            record(w, path, t, n);
        return;
    }
    for (int c = e->first_child; c >= 0 && w->visited < EMPAD_META_NODES; c = d->nodes[c].next) {
        const char *nm = d->nodes[c].name;
        size_t index = 0, same = 0;
        for (int o = e->first_child; o >= 0; o = d->nodes[o].next)
            if (!strcmp(d->nodes[o].name, nm)) {
                same++;
                if (o == c)
                    index = same;
            }
        int k = same > 1 ? snprintf(path + plen, cap - plen, "/%s[%zu]", nm, index)
                         : snprintf(path + plen, cap - plen, "/%s", nm);
        if (k > 0 && (size_t)k < cap - plen)
            walk(w, c, path, plen + (size_t)k, cap);
        path[plen] = 0;
    }
}

static void record_xml(framesrc *s, const empad_xml *doc)
{
    char path[1024] = "empad_xml";
    meta_walk w = {s, doc, 0, 0};
    walk(&w, 0, path, strlen(path), sizeof path);
}

/* ---- the opener ---- */

static ssb4d_status open_raw(const char *xml_path, const char *raw_path, int *fd, size_t *size,
                             ssb4d_err *err)
{
    struct stat sb;
    if (xml_path && stat(raw_path, &sb) != 0 && errno == ENOENT)
        return ssb_fail(err, SSB4D_EIO, "%s names the raw file %s, which is missing (looked for %s)",
                        xml_path, empad_basename(raw_path), raw_path);
    return fs_contiguous_open(raw_path, fd, size, err);
}

ssb4d_status fs_empad_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    static const framesrc_opts none = {0};
    if (!o)
        o = &none;
    empad_xml doc = {0};
    empad_info info;
    memset(&info, 0, sizeof info);
    char *xml_path = NULL, *raw_path = NULL, *other = NULL;
    int have_xml = 0, fd = -1, user = o->shape[0] || o->shape[1];
    size_t size = 0;
    ssb4d_status st = SSB4D_OK;

    if (!has_suffix(path, ".raw")) { /* the .xml (the usual way) */
        if ((st = read_xml(path, &doc, &info, err)))
            goto done;
        have_xml = 1;
        if (!info.raw_name[0] || !*empad_basename(info.raw_name)) {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s names no raw file (<raw_file filename=\"...\"/>): "
                          "not an EMPAD acquisition .xml", path);
            goto done;
        }
        xml_path = strdup(path);
        raw_path = beside(path, empad_basename(info.raw_name));
        if (!xml_path || !raw_path) {
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
            goto done;
        }
    } else { /* the .raw: its .xml is the one beside it that names it */
        int r = find_xml(path, &xml_path, &other);
        if (r < 0) {
            st = ssb_fail(err, SSB4D_EINVAL, "%s: both %s and %s name it as their raw file: open "
                          "the .xml of the acquisition you mean", path, xml_path, other);
            goto done;
        }
        if (r == 0 && !user) {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s: no EMPAD .xml beside it names it (the .xml "
                          "records the scan): open the acquisition's .xml, or give --scan-shape "
                          "ROWS,COLS to read the .raw alone", path);
            goto done;
        }
        if (r == 1) {
            if ((st = read_xml(xml_path, &doc, &info, err)))
                goto done;
            have_xml = 1;
        }
        if (!(raw_path = strdup(path))) {
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
            goto done;
        }
    }
    if ((st = open_raw(have_xml ? xml_path : NULL, raw_path, &fd, &size, err)))
        goto done;

    /* The frames: a whole number of 128x130 float32 frames, as many as the .xml says. */
    size_t n = size / EMPAD_FRAME_BYTES, over = size % EMPAD_FRAME_BYTES;
    int pick = -1, first = -1;
    for (int k = 0; k < 3 && have_xml && !info.is_series; k++)
        if (info.scan[k].rows) {
            if (first < 0)
                first = k;
            if (pick < 0 && !over && info.scan[k].rows * info.scan[k].cols == n)
                pick = k;
        }
    if (have_xml && info.is_series && info.series_count && !user &&
        (over || info.series_count != n)) {
        size_t need = info.series_count * EMPAD_FRAME_BYTES;
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: %s records a series of %zu frames, which needs %zu "
                      "bytes (128x130 float32 frames), but it is %zu bytes (%.4g frames)", raw_path,
                      xml_path, info.series_count, need, size, (double)size / EMPAD_FRAME_BYTES);
        goto done;
    }
    if (first >= 0 && pick < 0 && !user) {
        size_t r = info.scan[first].rows, c = info.scan[first].cols, need;
        if (!fs_mul(r * c, EMPAD_FRAME_BYTES, &need))
            need = SIZE_MAX;
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: %s records a %zux%zu scan (rows x columns, from %s), "
                      "which needs %zu bytes (%zu frames of 128x130 float32), but it is %zu bytes "
                      "(%.4g frames): truncated, or not this acquisition's .raw?", raw_path,
                      xml_path, r, c, info.scan[first].from, need, r * c, size,
                      (double)size / EMPAD_FRAME_BYTES);
        goto done;
    }
    if (over || n == 0) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s is %zu bytes, not a whole number of EMPAD frames "
                      "(128x130 float32, %zu bytes each): %zu frames and %zu bytes over (truncated?)",
                      raw_path, size, EMPAD_FRAME_BYTES, n, over);
        goto done;
    }
    size_t scan[2];
    const char *how = NULL;
    size_t hr = pick >= 0 ? info.scan[pick].rows : 0, hc = pick >= 0 ? info.scan[pick].cols : 0;
    if ((st = fs_scan_shape(n, o, hr, hc, xml_path ? xml_path : "the .xml", raw_path, scan, &how,
                            err)))
        goto done;
    size_t shape[4] = {scan[0], scan[1], EMPAD_DET_ROWS, EMPAD_DET_COLS};
    if ((st = fs_check_shape(shape, raw_path, err)) ||
        (st = fs_check_det_opts(o, EMPAD_DET_ROWS, EMPAD_DET_COLS, raw_path, err)))
        goto done;

    memcpy(s->shape, shape, sizeof shape);
    s->dtype_bytes = 4;
    s->is_float = 1;
    s->format_name = "empad";
    if (have_xml) {
        /* plausible values only: a unit we do not recognise stays in the metadata */
        double v = info.high_voltage_V;
        if (isfinite(v) && v >= 1e3 && v <= 3e6)
            s->cal.kv = v / 1000.0;
        v = info.camera_length_m;
        if (isfinite(v) && v > 0 && v < 100)
            s->cal.camera_length_mm = v * 1000.0;
        v = info.exposure_ms;
        if (isfinite(v) && v > 0 && v < 1e6)
            s->cal.dwell_us = v * 1000.0;
        v = info.diffraction_angle_rad;
        if (isfinite(v) && v > 0 && v < 0.1)
            s->cal.det_sampling_mrad[0] = s->cal.det_sampling_mrad[1] = v * 1000.0;
        fs_meta_string(s, "empad_xml_file", empad_basename(xml_path));
        fs_meta_string(s, "empad_xml_raw_name", info.raw_name);
        fs_meta_string(s, "empad_type", info.is_series ? "series" : "scan");
        if (pick >= 0)
            fs_meta_string(s, "empad_scan_from", info.scan[pick].from);
        if (pick > first) { /* LiberTEM #1617: the raw holds the search scan */
            char note[256];
            snprintf(note, sizeof note, "%s records %zux%zu, which does not fit the raw size; %s "
                     "(%zux%zu) does", info.scan[first].from, info.scan[first].rows,
                     info.scan[first].cols, info.scan[pick].from, info.scan[pick].rows,
                     info.scan[pick].cols);
            fs_meta_string(s, "empad_scan_note", note);
        }
        if (info.timestamp[0])
            fs_meta_string(s, "empad_timestamp", info.timestamp);
        record_xml(s, &doc);
    }
    fs_meta_string(s, "empad_raw_file", empad_basename(raw_path));
    fs_meta_number(s, "empad_footer_rows_dropped", EMPAD_RAW_ROWS - EMPAD_DET_ROWS);
    fs_meta_string(s, "scan_shape_source", !strcmp(how, "file") ? "xml" : how);
    st = fs_contiguous_attach_strided(s, fd, 0, 0, EMPAD_FRAME_BYTES, err);
    fd = -1; /* taken over (closed on failure too) */
done:
    if (fd >= 0)
        close(fd);
    empad_xml_free(&doc);
    free(xml_path);
    free(raw_path);
    free(other);
    return st;
}
