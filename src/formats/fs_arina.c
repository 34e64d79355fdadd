/* fs_arina.c — Dectris Arina acquisitions: a master file NAME_master.h5 whose /entry/data holds
 * links data_000001, data_000002, ... (usually external, to NAME_data_00000k.h5), each a stack
 * (frames, rows, cols) of uint8/16/32 chunked by whole frames and compressed with the bitshuffle
 * filter (id 32008, cd_values = {filter version, library version, element size, block size,
 * 2 = LZ4}). Chunks are read raw with H5Dread_chunk and decoded here (bitshuffle.c), so no filter
 * plugin is needed; other pipelines fall back to H5Dread when libhdf5 can decode them.
 *
 * Metadata: the master's /entry/instrument/detector (x/y_pixel_size, detector_distance,
 * count_time, incident_energy; pixel_mask under detectorSpecific) and /entry/instrument/beam
 * (incident_wavelength); the optional companion NAME_em_metadata.h5 (NXem vocabulary under
 * /electron_microscope: scan shape and step, voltage, semi-angle, camera length, reciprocal
 * pixel size, dwell time) wins where both speak. Source: quantem.gpu's "ARINA master and
 * NCEM/NXem companion" layout note; Dectris NXmx master-file fields. */
#include "formats/fs_internal.h"

#include "common/err.h"
#include "formats/bitshuffle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_PARTS 100000
#define MAX_CHUNK_BYTES ((size_t)1 << 30)

typedef struct {
    char *name;           /* link name under /entry/data */
    char *target;         /* external file named by the link ("" for an internal dataset) */
    size_t first, count;  /* frames [first, first+count) of the acquisition */
    size_t chunk_frames;  /* frames per chunk (direct path) */
    int direct;           /* 1: chunks read raw and decoded here */
    int lz4;              /* direct: bitshuffle + LZ4 (0: plain bitshuffle) */
    size_t block;         /* direct, plain bitshuffle: block size in elements (0 = default) */
} arina_part;

typedef struct {
    hid_t master, dapl;
    char *dir;            /* the master's folder, with a trailing '/' (external links start here) */
    arina_part *parts;
    size_t nparts;
    size_t elem, rows, cols, frame_bytes;
    size_t cur;           /* index of the open part, or nparts when none */
    hid_t dset, fspace;
    /* the one decoded chunk kept between reads */
    size_t chunk_part, chunk_index;
    int have_chunk;
    uint8_t *chunk;
    size_t chunk_cap;
    uint8_t *comp;        /* the raw (compressed) chunk as stored */
    size_t comp_cap;
} arina_reader;

static void close_part(arina_reader *r)
{
    if (r->fspace >= 0)
        H5Sclose(r->fspace);
    if (r->dset >= 0)
        H5Dclose(r->dset);
    r->fspace = r->dset = -1;
    r->cur = r->nparts;
}

static void arina_close(void *impl)
{
    arina_reader *r = impl;
    if (!r)
        return;
    close_part(r);
    for (size_t i = 0; i < r->nparts; i++) {
        free(r->parts[i].name);
        free(r->parts[i].target);
    }
    free(r->parts);
    free(r->dir);
    free(r->chunk);
    free(r->comp);
    if (r->dapl >= 0)
        H5Pclose(r->dapl);
    if (r->master >= 0)
        H5Fclose(r->master);
    free(r);
}

static char *link_path(const char *name)
{
    char *p = malloc(strlen(name) + 13);
    if (p) {
        strcpy(p, "/entry/data/");
        strcat(p, name);
    }
    return p;
}

/* Opens part i (closing the previous one): a data file stays open only while it is read. */
static ssb4d_status open_part(framesrc *s, arina_reader *r, size_t i, ssb4d_err *err)
{
    if (r->cur == i)
        return SSB4D_OK;
    close_part(r);
    char *p = link_path(r->parts[i].name);
    if (!p)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    r->dset = H5Dopen2(r->master, p, r->dapl);
    free(p);
    if (r->dset < 0 || (r->fspace = H5Dget_space(r->dset)) < 0) {
        close_part(r);
        return fs_h5_fail(err, SSB4D_EIO, "%s: cannot open /entry/data/%s%s%s%s", s->path,
                          r->parts[i].name, *r->parts[i].target ? " in '" : "",
                          r->parts[i].target, *r->parts[i].target ? "'" : "");
    }
    r->cur = i;
    return SSB4D_OK;
}

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* Decodes chunk ci of part i into r->chunk (kept: the next read usually continues in it). */
static ssb4d_status load_chunk(framesrc *s, arina_reader *r, size_t i, size_t ci, ssb4d_err *err)
{
    if (r->have_chunk && r->chunk_part == i && r->chunk_index == ci)
        return SSB4D_OK;
    const arina_part *pt = &r->parts[i];
    ssb4d_status st = open_part(s, r, i, err);
    if (st)
        return st;
    r->have_chunk = 0;
    size_t want = pt->chunk_frames * r->frame_bytes;
    hsize_t off[3] = {(hsize_t)(ci * pt->chunk_frames), 0, 0}, stored = 0;
    size_t frame = pt->first + ci * pt->chunk_frames;
    if (H5Dget_chunk_storage_size(r->dset, off, &stored) < 0 || stored == 0) {
        H5Eclear2(H5E_DEFAULT);
        return ssb_fail(err, SSB4D_EFORMAT, "%s: frames from %zu on (/entry/data/%s, chunk %zu) were "
                        "never written: the acquisition is incomplete", s->path, frame, pt->name, ci);
    }
    if (stored > 2 * want + 4096)
        return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu: the stored chunk is %llu bytes, implausible "
                        "for %zu bytes of data", s->path, frame, (unsigned long long)stored, want);
    if (stored > r->comp_cap) {
        uint8_t *c = realloc(r->comp, (size_t)stored);
        if (!c)
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory reading %s", s->path);
        r->comp = c;
        r->comp_cap = (size_t)stored;
    }
    if (want > r->chunk_cap) {
        uint8_t *c = realloc(r->chunk, want);
        if (!c)
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory reading %s", s->path);
        r->chunk = c;
        r->chunk_cap = want;
    }
    uint32_t mask = 0;
    if (H5Dread_chunk(r->dset, H5P_DEFAULT, off, &mask, r->comp) < 0)
        return fs_h5_fail(err, SSB4D_EIO, "%s: frame %zu: reading chunk %zu of /entry/data/%s failed",
                          s->path, frame, ci, pt->name);
    ssb4d_err e = {0};
    if (mask & 1u) { /* the writer skipped the filter for this chunk: stored as is */
        if (stored != want)
            return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu: unfiltered chunk of %llu bytes, %zu "
                            "expected", s->path, frame, (unsigned long long)stored, want);
        memcpy(r->chunk, r->comp, want);
    } else if (pt->lz4 || (stored != want && stored >= 12 && be64(r->comp) == want)) {
        /* (the second case: LZ4 chunks under cd_values that do not say so) */
        if (bshuf_lz4_decode(r->comp, (size_t)stored, r->elem, r->chunk, want, &e))
            return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu (/entry/data/%s, chunk %zu): %s",
                            s->path, frame, pt->name, ci, e.msg);
    } else {
        if (stored != want)
            return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu: bitshuffled chunk of %llu bytes, %zu "
                            "expected", s->path, frame, (unsigned long long)stored, want);
        if (bshuf_bitunshuffle(r->comp, r->chunk, want / r->elem, r->elem, pt->block, &e))
            return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu: %s", s->path, frame, e.msg);
    }
    r->have_chunk = 1;
    r->chunk_part = i;
    r->chunk_index = ci;
    return SSB4D_OK;
}

/* Frames [f, f+m) of part i by H5Dread (pipelines libhdf5 decodes itself). */
static ssb4d_status read_frames_h5(framesrc *s, arina_reader *r, size_t i, size_t f, size_t m,
                                   uint32_t *out, ssb4d_err *err)
{
    ssb4d_status st = open_part(s, r, i, err);
    if (st)
        return st;
    hsize_t start[3] = {f, 0, 0}, count[3] = {m, r->rows, r->cols}, n = (hsize_t)m * r->rows * r->cols;
    hid_t ms = H5Screate_simple(1, &n, NULL);
    herr_t e = ms < 0 ? -1 : H5Sselect_hyperslab(r->fspace, H5S_SELECT_SET, start, NULL, count, NULL);
    if (e >= 0)
        e = H5Dread(r->dset, H5T_NATIVE_UINT32, ms, r->fspace, H5P_DEFAULT, out);
    if (ms >= 0)
        H5Sclose(ms);
    if (e < 0)
        return fs_h5_fail(err, SSB4D_EIO, "%s: reading frames %zu..%zu of /entry/data/%s failed",
                          s->path, r->parts[i].first + f, r->parts[i].first + f + m, r->parts[i].name);
    return SSB4D_OK;
}

static ssb4d_status arina_read(framesrc *s, size_t pos0, size_t npos, uint32_t *out, ssb4d_err *err)
{
    arina_reader *r = s->impl;
    fs_h5_quiet(); /* per thread in a thread-safe libhdf5: the reading thread may be a new one */
    size_t P = r->rows * r->cols, i = 0;
    /* parts are in frame order: find the one holding pos0 */
    size_t lo = 0, hi = r->nparts;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (r->parts[mid].first <= pos0)
            lo = mid;
        else
            hi = mid;
    }
    i = lo;
    for (size_t p = pos0, end = pos0 + npos; p < end;) {
        while (p >= r->parts[i].first + r->parts[i].count)
            i++;
        const arina_part *pt = &r->parts[i];
        size_t f = p - pt->first, m = end - p;
        if (m > pt->count - f)
            m = pt->count - f;
        ssb4d_status st;
        if (!pt->direct) {
            if ((st = read_frames_h5(s, r, i, f, m, out + (p - pos0) * P, err)))
                return st;
        } else {
            size_t ci = f / pt->chunk_frames, within = f % pt->chunk_frames;
            if (m > pt->chunk_frames - within)
                m = pt->chunk_frames - within;
            if ((st = load_chunk(s, r, i, ci, err)))
                return st;
            fs_widen(r->chunk + within * r->frame_bytes, out + (p - pos0) * P, m * P, (int)r->elem, 0, 0);
        }
        p += m;
    }
    return SSB4D_OK;
}

static const framesrc_ops arina_ops = {arina_read, arina_close, NULL};

/* ---------------------------------------------------------------------------------------- */
/* Opening: the data links                                                                    */

typedef struct {
    char **names;
    size_t n, cap;
    int oom;
} name_list;

static herr_t list_cb(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    name_list *l = data;
    if (strncmp(name, "data_", 5) != 0)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **nn = cap <= MAX_PARTS ? realloc(l->names, cap * sizeof *nn) : NULL;
        if (!nn) {
            l->oom = 1;
            return 1;
        }
        l->names = nn;
        l->cap = cap;
    }
    if (!(l->names[l->n] = strdup(name))) {
        l->oom = 1;
        return 1;
    }
    l->n++;
    return 0;
}

static void list_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
}

static herr_t list_data_links(hid_t file, name_list *l)
{
    hid_t g = H5Gopen2(file, "/entry/data", H5P_DEFAULT);
    if (g < 0)
        return -1;
    hsize_t idx = 0;
    herr_t e = H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, list_cb, l);
    H5Gclose(g);
    return e;
}

int fs_arina_detect(const char *path)
{
    fs_h5_quiet();
    size_t n = strlen(path);
    int named = n >= 10 && strcasecmp(path + n - 10, "_master.h5") == 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        H5Eclear2(H5E_DEFAULT);
        return named;
    }
    name_list l = {0};
    int found = fs_h5_exists(f, "/entry/data") && list_data_links(f, &l) >= 0 && l.n > 0;
    list_free(&l);
    H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
    return found || named;
}

/* The external file a link points to ("" when it is not an external link). */
static char *link_target(hid_t file, const char *path)
{
    H5L_info_t li;
    char *out = NULL;
    if (H5Lget_info(file, path, &li, H5P_DEFAULT) >= 0 && li.type == H5L_TYPE_EXTERNAL &&
        li.u.val_size > 0 && li.u.val_size < 65536) {
        char *buf = malloc(li.u.val_size);
        const char *fname = NULL, *obj = NULL;
        unsigned flags = 0;
        if (buf && H5Lget_val(file, path, buf, li.u.val_size, H5P_DEFAULT) >= 0 &&
            H5Lunpack_elink_val(buf, li.u.val_size, &flags, &fname, &obj) >= 0 && fname)
            out = strdup(fname);
        free(buf);
    }
    H5Eclear2(H5E_DEFAULT);
    return out ? out : strdup("");
}

/* Why a data link does not open: its external file is missing, or is not readable HDF5 (say
 * truncated: libhdf5 tells which when the file is opened directly). */
static ssb4d_status data_file_error(const arina_reader *r, const arina_part *pt, const char *what,
                                    ssb4d_err *err)
{
    if (!*pt->target)
        return fs_h5_fail(err, SSB4D_EFORMAT, "%s cannot be opened", what);
    H5Eclear2(H5E_DEFAULT);
    size_t n = strlen(r->dir) + strlen(pt->target) + 1;
    char *file = malloc(n);
    if (!file)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    snprintf(file, n, "%s%s", pt->target[0] == '/' ? "" : r->dir, pt->target);
    ssb4d_status st;
    if (access(file, F_OK) != 0) {
        st = ssb_fail(err, SSB4D_EIO, "%s cannot be opened: the data file '%s' is missing", what,
                      file);
    } else {
        hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (f < 0) {
            st = fs_h5_fail(err, SSB4D_EIO, "%s cannot be opened: the data file '%s' is not readable "
                            "HDF5 (truncated or damaged?)", what, file);
        } else {
            H5Fclose(f);
            st = ssb_fail(err, SSB4D_EFORMAT, "%s cannot be opened: '%s' has no dataset at the "
                          "link's target", what, file);
        }
    }
    free(file);
    return st;
}

/* Inspects one data link: shape, type and how its chunks will be read. */
static ssb4d_status inspect_part(framesrc *s, arina_reader *r, arina_part *pt, int first,
                                 ssb4d_err *err)
{
    char *p = link_path(pt->name);
    if (!p)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    const char *path = s->path;
    ssb4d_status st = SSB4D_OK;
    hid_t d = H5Dopen2(r->master, p, r->dapl), t = -1, sp = -1, dcpl = -1;
    char what[700];
    snprintf(what, sizeof what, "%s:%s%s%s%s", path, p, *pt->target ? " (in '" : "", pt->target,
             *pt->target ? "')" : "");
    if (d < 0) {
        st = data_file_error(r, pt, what, err);
        goto done;
    }
    t = H5Dget_type(d);
    sp = H5Dget_space(d);
    dcpl = H5Dget_create_plist(d);
    hsize_t dims[3];
    if (t < 0 || sp < 0 || dcpl < 0 || H5Sget_simple_extent_ndims(sp) != 3) {
        st = fs_h5_fail(err, SSB4D_EFORMAT, "%s is not a stack of frames (frames, rows, cols)", what);
        goto done;
    }
    H5Sget_simple_extent_dims(sp, dims, NULL);
    size_t elem = H5Tget_size(t);
    if (H5Tget_class(t) == H5T_FLOAT) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s is floating point: convert to integer counts first, "
                      "ssb4d never quantises", what);
        goto done;
    }
    if (H5Tget_class(t) != H5T_INTEGER || H5Tget_sign(t) != H5T_SGN_NONE ||
        (elem != 1 && elem != 2 && elem != 4)) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s does not hold uint8, uint16 or uint32 counts", what);
        goto done;
    }
    if (first) {
        r->elem = elem;
        r->rows = (size_t)dims[1];
        r->cols = (size_t)dims[2];
    } else if (elem != r->elem || dims[1] != r->rows || dims[2] != r->cols) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s has %llux%llu frames of %zu-byte counts, unlike the "
                      "first data link (%zux%zu, %zu-byte)", what, (unsigned long long)dims[1],
                      (unsigned long long)dims[2], elem, r->rows, r->cols, r->elem);
        goto done;
    }
    pt->count = (size_t)dims[0];
    /* the direct path: chunks of whole frames, and only the bitshuffle filter */
    hsize_t cd[3] = {0, 0, 0};
    int nf = H5Pget_nfilters(dcpl);
    unsigned flags = 0, cdv[16] = {0};
    size_t ncd = 16;
    H5Z_filter_t id = nf == 1 ? H5Pget_filter2(dcpl, 0, &flags, &ncd, cdv, 0, NULL, NULL) : -1;
    if (H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 3, cd) == 3 && cd[1] == dims[1] &&
        cd[2] == dims[2] && cd[0] >= 1 && id == BSHUF_H5_FILTER) {
        /* cd_values[2] is the element size (0 or absent when written without the plugin) */
        if (ncd >= 3 && cdv[2] != 0 && cdv[2] != elem) {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s: its bitshuffle filter is set up for %u-byte "
                          "elements, the data are %zu-byte", what, cdv[2], elem);
            goto done;
        }
        unsigned comp = ncd > 4 ? cdv[4] : BSHUF_H5_COMPRESS_NONE;
        if (comp == BSHUF_H5_COMPRESS_ZSTD || (comp != BSHUF_H5_COMPRESS_LZ4 && comp != BSHUF_H5_COMPRESS_NONE)) {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s uses bitshuffle with compressor %u%s; only LZ4 (2) "
                          "or none (0) is supported", what, comp,
                          comp == BSHUF_H5_COMPRESS_ZSTD ? " (zstd)" : "");
            goto done;
        }
        size_t chunk_bytes;
        if (!fs_mul((size_t)cd[0], (size_t)(dims[1] * dims[2]) * elem, &chunk_bytes) ||
            chunk_bytes > MAX_CHUNK_BYTES) {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s: chunks of %llu frames are too large to decode "
                          "(limit %zu MiB)", what, (unsigned long long)cd[0], MAX_CHUNK_BYTES >> 20);
            goto done;
        }
        pt->direct = 1;
        pt->lz4 = comp == BSHUF_H5_COMPRESS_LZ4;
        pt->block = ncd > 3 ? cdv[3] : 0;
        pt->chunk_frames = (size_t)cd[0];
        if (!pt->lz4 && pt->block % 8) {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s: bitshuffle block size %zu is not a multiple of 8",
                          what, pt->block);
            goto done;
        }
    } else {
        st = fs_h5_check_filters(dcpl, what, err);
    }
done:
    H5Eclear2(H5E_DEFAULT);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    free(p);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Opening: metadata, mask and scan shape                                                     */

typedef struct {
    const char *unit;
    double factor;
} unit_factor;

static const unit_factor TO_ANGSTROM[] = {
    {"m", 1e10}, {"cm", 1e8}, {"mm", 1e7}, {"um", 1e4}, {"\xc2\xb5m", 1e4}, {"\xce\xbcm", 1e4},
    {"nm", 10.0}, {"A", 1.0}, {"\xc3\x85", 1.0}, {"angstrom", 1.0}, {NULL, 0}};
static const unit_factor TO_METRE[] = {
    {"m", 1.0}, {"cm", 1e-2}, {"mm", 1e-3}, {"um", 1e-6}, {"\xc2\xb5m", 1e-6}, {"\xce\xbcm", 1e-6},
    {"nm", 1e-9}, {NULL, 0}};
static const unit_factor TO_KV[] = {{"V", 1e-3}, {"kV", 1.0}, {"eV", 1e-3}, {"keV", 1.0}, {NULL, 0}};
static const unit_factor TO_US[] = {
    {"s", 1e6}, {"ms", 1e3}, {"us", 1.0}, {"\xc2\xb5s", 1.0}, {"\xce\xbcs", 1.0}, {"ns", 1e-3}, {NULL, 0}};
static const unit_factor TO_MRAD[] = {{"rad", 1e3}, {"mrad", 1.0}, {"urad", 1e-3}, {NULL, 0}};

static double factor_of(const char *unit, const unit_factor *t)
{
    for (; unit && t->unit; t++)
        if (!strcmp(unit, t->unit) || (!strcmp(t->unit, "angstrom") && !strcasecmp(unit, "angstrom")))
            return t->factor;
    return NAN;
}

/* A scalar at path: recorded in the metadata under key ("value unit"), and returned converted
 * by table (NaN when absent or in an unknown unit). default_unit applies when the file gives
 * none (the NeXus default of master fields); NULL means no unit, no conversion. */
static double quantity(framesrc *s, hid_t f, const char *path, const char *key,
                       const char *default_unit, const unit_factor *table)
{
    double v;
    char unit[32];
    if (!fs_h5_number(f, path, &v, unit, sizeof unit) || !isfinite(v))
        return NAN;
    fs_meta_quantity(s, key, v, unit);
    const char *u = unit[0] ? unit : default_unit;
    if (!table)
        return v;
    if (!u || !(v > 0))
        return NAN;
    return v * factor_of(u, table);
}

typedef struct {
    double kv, semiangle, step[2], recip[2], camlen_mm, dwell_us;
    size_t scan_y, scan_x;
} companion;

/* The NXem companion NAME_em_metadata.h5, when it is there. */
static void read_companion(framesrc *s, const char *master_path, companion *c)
{
    *c = (companion){NAN, NAN, {NAN, NAN}, {NAN, NAN}, NAN, NAN, 0, 0};
    size_t n = strlen(master_path);
    if (n < 10 || strcasecmp(master_path + n - 10, "_master.h5") != 0)
        return;
    char *p = malloc(n + 16);
    if (!p)
        return;
    memcpy(p, master_path, n - 10);
    strcpy(p + n - 10, "_em_metadata.h5");
    hid_t f = access(p, R_OK) == 0 ? H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
    if (f < 0) {
        H5Eclear2(H5E_DEFAULT);
        free(p);
        return;
    }
    const char *slash = strrchr(p, '/');
    fs_meta_string(s, "companion_file", slash ? slash + 1 : p);
    free(p);
    static const char *E = "/electron_microscope/";
    char path[160], key[160];
#define Q(sub, table) (snprintf(path, sizeof path, "%s%s", E, sub), \
                       snprintf(key, sizeof key, "electron_microscope/%s", sub), \
                       quantity(s, f, path, key, NULL, table))
    double ny = Q("scan_controller/regular_scan/n_pixels_y", NULL);
    double nx = Q("scan_controller/regular_scan/n_pixels_x", NULL);
    if (ny >= 1 && nx >= 1 && ny <= 65536 && nx <= 65536 && ny == floor(ny) && nx == floor(nx)) {
        c->scan_y = (size_t)ny;
        c->scan_x = (size_t)nx;
    }
    Q("scan_controller/regular_scan/n_frames", NULL);
    c->step[0] = Q("scan_controller/regular_scan/pixel_size_y", TO_ANGSTROM);
    c->step[1] = Q("scan_controller/regular_scan/pixel_size_x", TO_ANGSTROM);
    c->dwell_us = Q("scan_controller/regular_scan/dwell_time", TO_US);
    c->kv = Q("electron_source/accelerating_voltage", TO_KV);
    c->semiangle = Q("illumination_system/semi_convergence_angle", TO_MRAD);
    c->camlen_mm = Q("imaging_system/camera_length", TO_METRE) * 1e3;
    c->recip[0] = Q("imaging_system/reciprocal_pixel_size_y", TO_MRAD);
    c->recip[1] = Q("imaging_system/reciprocal_pixel_size_x", TO_MRAD);
#undef Q
    H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
}

static double pick(double a, double b) { return isfinite(a) && a > 0 ? a : b; }

/* Master fields (NeXus NXmx units when the file gives none), then the companion on top. */
static void calibration(framesrc *s, hid_t m, const companion *c)
{
    static const char *D = "/entry/instrument/detector/";
    char path[160];
#define M(sub, unit, table) (snprintf(path, sizeof path, "%s%s", D, sub), \
                             quantity(s, m, path, path + 1, unit, table))
    double px = M("x_pixel_size", "m", TO_METRE), py = M("y_pixel_size", "m", TO_METRE);
    double dist = M("detector_distance", "m", TO_METRE);
    double count = M("count_time", "s", TO_US);
    M("frame_time", "s", TO_US);
    double energy_kv = M("incident_energy", "eV", TO_KV);
    const char *energy_src = "entry/instrument/detector/incident_energy";
    if (!isfinite(energy_kv)) {
        energy_kv = quantity(s, m, "/entry/instrument/beam/incident_energy",
                             "entry/instrument/beam/incident_energy", "eV", TO_KV);
        energy_src = "entry/instrument/beam/incident_energy";
    }
    double lambda = quantity(s, m, "/entry/instrument/beam/incident_wavelength",
                             "entry/instrument/beam/incident_wavelength", "angstrom", TO_ANGSTROM);
    /* Some Arina masters state the beam energy only here (the detector's calibration energy:
     * eV of the incident electrons, e.g. 300000 at 300 kV); threshold_energy is not it. */
    double photon_kv = M("detectorSpecific/photon_energy", "eV", TO_KV);
    if (isfinite(photon_kv) && !(photon_kv >= 20 && photon_kv <= 1500)) {
        /* not an electron microscope's beam (an X-ray default such as 8041 eV): kept, not used */
        fs_meta_string(s, "photon_energy_note", "outside 20-1500 keV: not taken as the beam energy");
        photon_kv = NAN;
    }
#undef M
    framesrc_calibration *k = &s->cal;
    double lambda_kv = fs_kv_from_wavelength_A(lambda);
    /* the first source that states the beam energy, recorded as kv_source */
    const char *kv_src = isfinite(c->kv) && c->kv > 0
                             ? "companion electron_microscope/electron_source/accelerating_voltage"
                         : isfinite(energy_kv) && energy_kv > 0 ? energy_src
                         : isfinite(lambda_kv) && lambda_kv > 0 ? "entry/instrument/beam/incident_wavelength"
                         : isfinite(photon_kv) && photon_kv > 0 ? "entry/instrument/detector/detectorSpecific/photon_energy"
                         : NULL;
    k->kv = pick(c->kv, pick(energy_kv, pick(lambda_kv, photon_kv)));
    if (kv_src)
        fs_meta_string(s, "kv_source", kv_src);
    k->semiangle_mrad = pick(c->semiangle, NAN);
    k->scan_step_A[0] = pick(c->step[0], NAN);
    k->scan_step_A[1] = pick(c->step[1], NAN);
    double camlen_m = pick(c->camlen_mm * 1e-3, dist);
    k->camera_length_mm = camlen_m * 1e3;
    /* small-angle: one detector pixel seen from the camera length */
    k->det_sampling_mrad[0] = pick(c->recip[0], 1e3 * py / camlen_m);
    k->det_sampling_mrad[1] = pick(c->recip[1], 1e3 * px / camlen_m);
    k->dwell_us = pick(c->dwell_us, count);
    for (int i = 0; i < 2; i++)
        if (!(k->det_sampling_mrad[i] > 0) || !isfinite(k->det_sampling_mrad[i]))
            k->det_sampling_mrad[i] = NAN;
    if (!(k->camera_length_mm > 0) || !isfinite(k->camera_length_mm))
        k->camera_length_mm = NAN;
}

/* detectorSpecific/pixel_mask (uint32, non-zero = flagged) as P bytes of 0/1. */
static ssb4d_status read_mask(framesrc *s, hid_t m, size_t rows, size_t cols, ssb4d_err *err)
{
    static const char *path = "/entry/instrument/detector/detectorSpecific/pixel_mask";
    if (!fs_h5_exists(m, path))
        return SSB4D_OK;
    hid_t d = H5Dopen2(m, path, H5P_DEFAULT), sp = d < 0 ? -1 : H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    ssb4d_status st = SSB4D_OK;
    uint32_t *v = NULL;
    if (sp < 0 || H5Sget_simple_extent_ndims(sp) != 2) {
        st = fs_h5_fail(err, SSB4D_EFORMAT, "%s: %s is not a 2-D array", s->path, path);
        goto done;
    }
    H5Sget_simple_extent_dims(sp, dims, NULL);
    if (dims[0] != rows || dims[1] != cols) {
        /* a mask for another geometry (e.g. the full sensor): unusable, say so in the metadata */
        char note[96];
        snprintf(note, sizeof note, "ignored: %llux%llu, the frames are %zux%zu",
                 (unsigned long long)dims[0], (unsigned long long)dims[1], rows, cols);
        fs_meta_string(s, "pixel_mask", note);
        goto done;
    }
    size_t P = rows * cols;
    v = malloc(P * sizeof *v);
    s->flag_mask = malloc(P);
    if (!v || !s->flag_mask) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory reading the pixel mask of %s", s->path);
        goto done;
    }
    if (H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) {
        st = fs_h5_fail(err, SSB4D_EFORMAT, "%s: cannot read %s", s->path, path);
        goto done;
    }
    size_t flagged = 0;
    for (size_t i = 0; i < P; i++)
        flagged += s->flag_mask[i] = v[i] != 0;
    fs_meta_number(s, "pixel_mask_flagged", (double)flagged);
done:
    if (st) {
        free(s->flag_mask);
        s->flag_mask = NULL;
    }
    free(v);
    if (sp >= 0)
        H5Sclose(sp);
    if (d >= 0)
        H5Dclose(d);
    H5Eclear2(H5E_DEFAULT);
    return st;
}

ssb4d_status fs_arina_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    fs_h5_quiet();
    arina_reader *r = calloc(1, sizeof *r);
    if (!r)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
    r->master = r->dapl = r->dset = r->fspace = -1;
    name_list l = {0};
    ssb4d_status st = SSB4D_OK;
    if ((r->master = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        st = fs_h5_fail(err, SSB4D_EIO, "cannot open %s as HDF5", path);
        goto fail;
    }
    /* external links resolve next to the master, wherever the process runs from */
    char *dir = malloc(strlen(path) + 3);
    if (dir) {
        strcpy(dir, path);
        char *slash = strrchr(dir, '/');
        strcpy(slash ? slash + 1 : dir, slash ? "" : "./");
    }
    r->dir = dir;
    r->dapl = H5Pcreate(H5P_DATASET_ACCESS);
    if (!dir || r->dapl < 0 || H5Pset_elink_prefix(r->dapl, dir) < 0 ||
        H5Pset_chunk_cache(r->dapl, 521, (size_t)32 << 20, 1.0) < 0) {
        st = fs_h5_fail(err, SSB4D_EINTERNAL, "%s: cannot set up dataset access", path);
        goto fail;
    }
    if (!fs_h5_exists(r->master, "/entry/data")) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s has no /entry/data group: not a Dectris master file",
                      path);
        goto fail;
    }
    if (list_data_links(r->master, &l) < 0 || l.oom) {
        st = l.oom ? ssb_fail(err, SSB4D_ENOMEM, "out of memory listing %s", path)
                   : fs_h5_fail(err, SSB4D_EFORMAT, "%s: cannot list /entry/data", path);
        goto fail;
    }
    if (l.n == 0) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: /entry/data holds no data_NNNNNN links", path);
        goto fail;
    }
    if (!(r->parts = calloc(l.n, sizeof *r->parts))) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
        goto fail;
    }
    size_t total = 0;
    for (size_t i = 0; i < l.n; i++) {
        arina_part *pt = &r->parts[i];
        pt->name = l.names[i];
        l.names[i] = NULL;
        r->nparts = i + 1;
        char *lp = link_path(pt->name);
        pt->target = lp ? link_target(r->master, lp) : NULL;
        free(lp);
        if (!pt->target) {
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
            goto fail;
        }
        if ((st = inspect_part(s, r, pt, i == 0, err)))
            goto fail;
        pt->first = total;
        total += pt->count;
    }
    r->cur = r->nparts;
    r->frame_bytes = r->rows * r->cols * r->elem;
    if (total == 0) {
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: the data links hold no frames", path);
        goto fail;
    }
    companion c;
    read_companion(s, path, &c);
    calibration(s, r->master, &c);
    double ntrig = quantity(s, r->master, "/entry/instrument/detector/detectorSpecific/ntrigger",
                            "entry/instrument/detector/detectorSpecific/ntrigger", NULL, NULL);
    double nimg = quantity(s, r->master, "/entry/instrument/detector/detectorSpecific/nimages",
                           "entry/instrument/detector/detectorSpecific/nimages", NULL, NULL);
    size_t hint_r = c.scan_y, hint_c = c.scan_x;
    const char *hint_from = "the companion _em_metadata.h5 (n_pixels_y x n_pixels_x)";
    if (!hint_r && ntrig > 1 && nimg > 1 && ntrig <= 65536 && nimg <= 65536 &&
        (size_t)ntrig * (size_t)nimg == total) {
        /* one trigger per scan row, one image per position */
        hint_r = (size_t)ntrig;
        hint_c = (size_t)nimg;
        hint_from = "the master (ntrigger x nimages)";
    }
    size_t scan[2];
    const char *how = NULL;
    if ((st = fs_scan_shape(total, o, hint_r, hint_c, hint_from, path, scan, &how, err)))
        goto fail;
    size_t shape[4] = {scan[0], scan[1], r->rows, r->cols};
    if ((st = fs_check_shape(shape, path, err)) ||
        (st = fs_check_det_opts(o, r->rows, r->cols, path, err)) ||
        (st = read_mask(s, r->master, r->rows, r->cols, err)))
        goto fail;
    memcpy(s->shape, shape, sizeof shape);
    s->dtype_bytes = (int)r->elem;
    s->format_name = "dectris-arina-hdf5";
    fs_meta_string(s, "sourceFormat", "dectris-arina-hdf5");
    fs_meta_string(s, "scan_shape_source", how);
    fs_meta_number(s, "data_links", (double)r->nparts);
    list_free(&l);
    s->ops = &arina_ops;
    s->impl = r;
    return SSB4D_OK;
fail:
    list_free(&l);
    arina_close(r);
    free(s->flag_mask);
    s->flag_mask = NULL;
    H5Eclear2(H5E_DEFAULT);
    return st;
}
