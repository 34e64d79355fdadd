/* fs_mib.c — Merlin .mib acquisitions: runs of (header, pixel data) frames of one size, in one
 * file or split over several (Merlin numbers them: NAME1.mib, NAME2.mib, ... beside NAME.hdr).
 * The files are put in order by their first frame's sequence number, which must then run on
 * without a gap or an overlap, and every file's frames must be laid out like the first's.
 *
 * The scan shape: the user's --scan-shape, else the .hdr (ScanX/ScanY, or Frames per Trigger
 * when a trigger starts each line), else the frames' time stamps (the longer gaps of the line
 * flyback recur every line: mib_line_scan), else a square frame count, else a refusal asking
 * for --scan-shape that says what the time stamps show. A .hdr that records more frames than the
 * files hold is refused with the likely companion files named (we never pick up files the user
 * did not list); a .hdr cut short (no End line) is refused unless --scan-shape is given.
 *
 * Every count is checked against the counter depth (the frames' MQ1A field, else the .hdr's):
 * a count above 2^depth - 1 is refused naming the file, frame and pixel.
 *
 * Every header is parsed and compared with the first as its frame is read, so a corrupt or
 * reordered frame is an error that names it (file and frame), never silent garbage. */
#include "formats/fs_internal.h"

#include "common/err.h"
#include "formats/mib.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MIB_STAGING_BYTES ((size_t)4 << 20)
#define MIB_TIMESTAMP_MAX_FRAMES ((size_t)1 << 22) /* headers read to infer the scan shape */
#define MIB_COMPANIONS_SHOWN 6

typedef struct {
    char *path;
    size_t first;      /* index of its first frame in the acquisition */
    size_t n;          /* its frames */
    uint32_t seq0;     /* sequence number of its first frame */
    size_t given;      /* its place on the command line (0 = the path opened) */
} mib_part;

typedef struct {
    mib_part *parts;
    size_t nparts;
    int fd;              /* of parts[open_part]; -1 when none is open */
    size_t open_part;
    mib_header first;    /* the first frame's header: every frame must match it */
    size_t stride;       /* header + data bytes of one frame */
    uint8_t *stage;      /* whole frames, at most MIB_STAGING_BYTES (or one frame) */
    size_t stage_frames;
    int depth;           /* counter depth in bits (the frames' MQ1A, else the .hdr; 0 unknown):
                            a count above 2^depth - 1 is refused */
} mib_reader;

static const char *same_layout(const mib_header *a, const mib_header *b)
{
    if (a->header_bytes != b->header_bytes)
        return "header length";
    if (a->width != b->width || a->height != b->height)
        return "frame size";
    if (a->dtype != b->dtype)
        return "data type";
    if (a->chips != b->chips || strcmp(a->layout, b->layout) != 0)
        return "chip layout";
    if (a->counter_depth != b->counter_depth)
        return "counter depth";
    return NULL;
}

/* Parses and checks the header of frame p (within part) found at buf (len bytes). */
static ssb4d_status check_frame(const mib_reader *r, const mib_part *part, const uint8_t *buf,
                                size_t len, size_t p, mib_header *h, ssb4d_err *err)
{
    ssb4d_err e = {0};
    if (mib_parse_header(buf, len, h, &e))
        return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu (at byte %zu) is corrupt: %s",
                        part->path, p, p * r->stride, e.msg);
    const char *what = same_layout(&r->first, h);
    if (what)
        return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu (at byte %zu) has a different %s than "
                        "the first frame", part->path, p, p * r->stride, what);
    uint64_t want = (uint64_t)part->seq0 + p;
    if (h->sequence != want)
        return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu has sequence number %u, %llu expected "
                        "(dropped or reordered frames?)", part->path, p, h->sequence,
                        (unsigned long long)want);
    return SSB4D_OK;
}

/* Makes parts[k] the open file. */
static ssb4d_status open_part(mib_reader *r, size_t k, ssb4d_err *err)
{
    if (r->fd >= 0 && r->open_part == k)
        return SSB4D_OK;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = open(r->parts[k].path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", r->parts[k].path, strerror(errno));
    r->open_part = k;
    posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return SSB4D_OK;
}

/* The part that holds frame pos (parts are in order and cover every frame). */
static size_t part_of(const mib_reader *r, size_t pos)
{
    size_t lo = 0, hi = r->nparts;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->parts[mid].first <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static ssb4d_status mib_read(framesrc *s, size_t pos0, size_t npos, uint32_t *out, ssb4d_err *err)
{
    mib_reader *r = s->impl;
    if (!r->stage) {
        r->stage_frames = MIB_STAGING_BYTES / r->stride ? MIB_STAGING_BYTES / r->stride : 1;
        if (!(r->stage = malloc(r->stage_frames * r->stride)))
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory reading %s", s->path);
    }
    size_t P = s->shape[2] * s->shape[3];
    for (size_t done = 0; done < npos;) {
        size_t pos = pos0 + done, k = part_of(r, pos);
        const mib_part *part = &r->parts[k];
        size_t local = pos - part->first, left = part->n - local;
        size_t m = npos - done < r->stage_frames ? npos - done : r->stage_frames;
        if (m > left)
            m = left;
        ssb4d_status st = open_part(r, k, err);
        if (!st)
            st = fs_pread_full(r->fd, r->stage, m * r->stride, (off_t)(local * r->stride),
                               part->path, err);
        if (st)
            return st;
        for (size_t i = 0; i < m; i++) {
            const uint8_t *f = r->stage + i * r->stride;
            mib_header h;
            if ((st = check_frame(r, part, f, r->stride, local + i, &h, err)))
                return st;
            uint32_t *o = out + (done + i) * P;
            mib_decode_frame(&h, f + h.header_bytes, o);
            size_t bad = mib_first_over_depth(&h, o, r->depth);
            if (bad != (size_t)-1)
                return ssb_fail(err, SSB4D_EFORMAT, "%s: frame %zu (scan position %zu), pixel (%zu, "
                                "%zu) counts %u, more than a %d-bit counter holds (%u): corrupt data, "
                                "or a wrong counter depth in the header", part->path, local + i,
                                pos + i, bad / s->shape[3], bad % s->shape[3], o[bad], r->depth,
                                (1u << r->depth) - 1u);
        }
        done += m;
    }
    return SSB4D_OK;
}

static void mib_close(void *impl)
{
    mib_reader *r = impl;
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    for (size_t k = 0; k < r->nparts; k++)
        free(r->parts[k].path);
    free(r->parts);
    free(r->stage);
    free(r);
}

static const framesrc_ops mib_ops = {mib_read, mib_close, NULL};

/* ---------------------------------------------------------------------------------------- */
/* The .hdr and the companion files                                                           */

/* Reads a small text file whole (NULL when absent or unreadable). */
static char *slurp(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max, f) : 0;
    fclose(f);
    if (!buf)
        return NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Length of path without ".mib" and, when strip_digits, without the digits before it. */
static size_t stem_length(const char *path, int strip_digits)
{
    size_t base = strlen(path) - 4;
    if (strip_digits)
        while (base && isdigit((unsigned char)path[base - 1]))
            base--;
    return base;
}

/* The sibling acquisition header: name.hdr, or (Merlin numbers its .mib files) name without
 * trailing digits + .hdr. Returns the file it read in `used` (caller frees). */
static int read_hdr(const char *mib_path, mib_hdr_info *info, char **used)
{
    size_t n = strlen(mib_path);
    if (n < 4 || strcasecmp(mib_path + n - 4, ".mib") != 0)
        return 0;
    char *p = malloc(n + 1);
    if (!p)
        return 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        size_t base = stem_length(mib_path, attempt);
        if (attempt == 1 && base == n - 4)
            break;
        memcpy(p, mib_path, base);
        memcpy(p + base, ".hdr", 5);
        size_t len = 0;
        char *text = slurp(p, 1 << 20, &len);
        if (text) {
            mib_parse_hdr(text, len, info);
            free(text);
            *used = p;
            return 1;
        }
    }
    free(p);
    return 0;
}

typedef struct {
    char *name;
    unsigned long long number;
} companion;

static int cmp_companion(const void *a, const void *b)
{
    const companion *x = a, *y = b;
    return (x->number > y->number) - (x->number < y->number);
}

/* Names (into out) the files beside parts[0] that look like further files of its numbered
 * series (STEM<digits>.mib) and were not given: ", "-separated, the first few and a count. */
static void companions(const mib_reader *r, char *out, size_t cap)
{
    out[0] = 0;
    const char *first = r->parts[0].path, *slash = strrchr(first, '/');
    const char *base = slash ? slash + 1 : first;
    size_t dn = (size_t)(base - first), stem = stem_length(base, 1);
    char *dir = strndup(first, dn);
    DIR *d = dir ? opendir(dn ? dir : ".") : NULL;
    companion *found = NULL;
    size_t nf = 0, capf = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) && nf < 100000) {
        const char *nm = de->d_name;
        size_t len = strlen(nm), k = stem;
        if (len < stem + 5 || strncmp(nm, base, stem) != 0 || strcasecmp(nm + len - 4, ".mib") != 0)
            continue;
        unsigned long long num = 0;
        while (k < len - 4 && isdigit((unsigned char)nm[k]) && num < 1000000000ull)
            num = num * 10 + (unsigned)(nm[k++] - '0');
        if (k == stem || k != len - 4)
            continue;
        int given = 0;
        for (size_t i = 0; i < r->nparts && !given; i++) {
            const char *ps = strrchr(r->parts[i].path, '/');
            given = strcmp(ps ? ps + 1 : r->parts[i].path, nm) == 0;
        }
        if (given)
            continue;
        if (nf == capf) {
            size_t nc = capf ? 2 * capf : 16;
            companion *q = realloc(found, nc * sizeof *q);
            if (!q)
                break;
            found = q;
            capf = nc;
        }
        if (!(found[nf].name = strdup(nm)))
            break;
        found[nf++].number = num;
    }
    if (d)
        closedir(d);
    free(dir);
    qsort(found, nf, sizeof *found, cmp_companion);
    size_t used = 0;
    for (size_t i = 0; i < nf && i < MIB_COMPANIONS_SHOWN; i++) {
        int k = snprintf(out + used, cap - used, "%s%s", i ? ", " : "", found[i].name);
        if (k < 0 || (size_t)k >= cap - used)
            break;
        used += (size_t)k;
    }
    if (nf > MIB_COMPANIONS_SHOWN && used < cap)
        snprintf(out + used, cap - used, " and %zu more", nf - MIB_COMPANIONS_SHOWN);
    for (size_t i = 0; i < nf; i++)
        free(found[i].name);
    free(found);
}

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                    */

static int cmp_part(const void *a, const void *b)
{
    const mib_part *x = a, *y = b;
    if (x->seq0 != y->seq0)
        return x->seq0 < y->seq0 ? -1 : 1;
    return (x->given > y->given) - (x->given < y->given);
}

/* Opens one file of the acquisition: its first header (laid out like r->first unless this is
 * the first file: first_path == NULL), its frame count, and its last header. */
static ssb4d_status open_one(mib_reader *r, mib_part *part, const char *first_path,
                             uint8_t *head, ssb4d_err *err)
{
    const char *path = part->path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ssb_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    size_t size = 0;
    mib_header h;
    ssb4d_err e = {0};
    ssb4d_status st = fs_file_size(fd, path, &size, err);
    size_t got = size < MIB_MAX_HEADER_BYTES ? size : MIB_MAX_HEADER_BYTES;
    if (!st)
        st = fs_pread_full(fd, head, got, 0, path, err);
    if (!st && mib_parse_header(head, got, &h, &e))
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: first frame: %s", path, e.msg);
    if (!st && !first_path) {
        r->first = h;
        r->stride = h.header_bytes + h.data_bytes;
    } else if (!st) {
        const mib_header *a = &r->first;
        const char *what = same_layout(a, &h);
        if (what) {
            char x[64], y[64];
            if (!strcmp(what, "frame size")) {
                snprintf(x, sizeof x, "%zux%zu", a->height, a->width);
                snprintf(y, sizeof y, "%zux%zu", h.height, h.width);
            } else if (!strcmp(what, "counter depth")) {
                snprintf(x, sizeof x, "%d bits", a->counter_depth);
                snprintf(y, sizeof y, "%d bits", h.counter_depth);
            } else if (!strcmp(what, "header length")) {
                snprintf(x, sizeof x, "%zu bytes", a->header_bytes);
                snprintf(y, sizeof y, "%zu bytes", h.header_bytes);
            } else {
                snprintf(x, sizeof x, "%s %s", a->dtype_text, a->layout);
                snprintf(y, sizeof y, "%s %s", h.dtype_text, h.layout);
            }
            st = ssb_fail(err, SSB4D_EFORMAT, "%s: its frames have another %s (%s) than those of "
                          "%s (%s): not the same acquisition", path, what, y, first_path, x);
        }
    }
    if (!st && size % r->stride) {
        const mib_header *a = &r->first;
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: %zu bytes is not a whole number of %zu-byte frames "
                      "(%zu header + %zu data): %zu complete frames and %zu bytes over (truncated "
                      "or interrupted acquisition?)", path, size, r->stride, a->header_bytes,
                      a->data_bytes, size / r->stride, size % r->stride);
    }
    if (!st) {
        part->n = size / r->stride;
        part->seq0 = h.sequence;
    }
    /* the last header too, so a file of mixed frames fails now rather than at the end */
    if (!st && part->n > 1) {
        mib_header last;
        size_t k = r->stride < MIB_MAX_HEADER_BYTES ? r->stride : MIB_MAX_HEADER_BYTES;
        if (!(st = fs_pread_full(fd, head, k, (off_t)((part->n - 1) * r->stride), path, err)))
            st = check_frame(r, part, head, k, part->n - 1, &last, err);
    }
    close(fd);
    return st;
}

/* The time stamp of every frame (headers only, one pread each) and what they show
 * (mib_line_scan). A header that does not parse or is out of sequence
 * just ends the attempt (NONE): reading that frame fails later with a line that names it. */
static ssb4d_status line_from_timestamps(mib_reader *r, size_t n, mib_line_info *li,
                                         ssb4d_err *err)
{
    memset(li, 0, sizeof *li);
    if (n > MIB_TIMESTAMP_MAX_FRAMES || r->first.time_res_ns <= 0) {
        snprintf(li->why, sizeof li->why, n > MIB_TIMESTAMP_MAX_FRAMES ? "too many frames to read "
                 "their time stamps" : "its frame headers hold no readable time stamp");
        return SSB4D_OK;
    }
    size_t hb = r->first.header_bytes;
    int64_t *t = malloc(n * sizeof *t);
    uint8_t *head = malloc(hb);
    ssb4d_status st = SSB4D_OK;
    if (!t || !head)
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory reading the frame time stamps");
    int usable = 1;
    for (size_t k = 0; k < r->nparts && !st && usable; k++) {
        const mib_part *part = &r->parts[k];
        if ((st = open_part(r, k, err)))
            break;
        for (size_t p = 0; p < part->n && !st; p++) {
            mib_header h;
            ssb4d_err ignored = {0};
            if ((st = fs_pread_full(r->fd, head, hb, (off_t)(p * r->stride), part->path, err)))
                break;
            if (check_frame(r, part, head, hb, p, &h, &ignored) ||
                h.time_res_ns != r->first.time_res_ns) {
                usable = 0; /* a corrupt frame, or one without a readable time stamp */
                snprintf(li->why, sizeof li->why, "frame %zu of %s has no time stamp like the "
                         "first's", p, part->path);
                break;
            }
            t[part->first + p] = h.time_ns;
        }
    }
    if (!st && usable)
        mib_line_scan(t, n, r->first.time_res_ns, li);
    free(t);
    free(head);
    return st;
}

static size_t isqrt(size_t n)
{
    size_t q = (size_t)sqrt((double)n);
    while (q * q > n)
        q--;
    while ((q + 1) * (q + 1) <= n)
        q++;
    return q;
}

ssb4d_status fs_mib_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    static const framesrc_opts none = {0};
    if (!o)
        o = &none;
    size_t nfiles = 1 + (o->more_paths ? o->n_more_paths : 0);
    mib_reader *r = calloc(1, sizeof *r);
    uint8_t *head = malloc(MIB_MAX_HEADER_BYTES);
    char *hdr_path = NULL;
    ssb4d_status st = SSB4D_OK;
    if (r) {
        r->fd = -1;
        r->parts = calloc(nfiles, sizeof *r->parts);
    }
    if (!r || !head || !r->parts) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
        goto fail;
    }
    for (size_t k = 0; k < nfiles; k++) {
        mib_part *part = &r->parts[r->nparts];
        part->given = k;
        if (!(part->path = strdup(k ? o->more_paths[k - 1] : path))) {
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
            goto fail;
        }
        r->nparts++;
        if ((st = open_one(r, part, k ? path : NULL, head, err)))
            goto fail;
    }
    /* in acquisition order: the sequence numbers must run on from file to file */
    qsort(r->parts, r->nparts, sizeof *r->parts, cmp_part);
    r->first.sequence = r->parts[0].seq0;
    size_t n = 0;
    for (size_t k = 0; k < r->nparts; k++) {
        mib_part *a = &r->parts[k];
        if (k) {
            const mib_part *b = &r->parts[k - 1];
            uint64_t next = (uint64_t)b->seq0 + b->n;
            if (a->seq0 != next) {
                if (a->seq0 == b->seq0)
                    st = ssb_fail(err, SSB4D_EINVAL, "%s and %s both start at frame sequence number "
                                  "%u (the same file twice, or files of two acquisitions?)",
                                  b->path, a->path, a->seq0);
                else if (a->seq0 > next)
                    st = ssb_fail(err, SSB4D_EFORMAT, "%s starts at frame sequence number %u but %s "
                                  "ends at %llu: frames %llu..%u are missing (a file left out?)",
                                  a->path, a->seq0, b->path, (unsigned long long)next - 1,
                                  (unsigned long long)next, a->seq0 - 1);
                else
                    st = ssb_fail(err, SSB4D_EFORMAT, "%s starts at frame sequence number %u, inside "
                                  "%s (frames %u..%llu): files of different acquisitions?",
                                  a->path, a->seq0, b->path, b->seq0, (unsigned long long)next - 1);
                goto fail;
            }
        }
        a->first = n;
        if (__builtin_add_overflow(n, a->n, &n)) {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s: too many frames", path);
            goto fail;
        }
    }
    const mib_header *h = &r->first;
    char what[600];
    if (r->nparts > 1)
        snprintf(what, sizeof what, "%s (and %zu more file%s)", path, r->nparts - 1,
                 r->nparts > 2 ? "s" : "");
    else
        snprintf(what, sizeof what, "%s", path);

    mib_hdr_info hi = {0};
    int have_hdr = read_hdr(r->parts[0].path, &hi, &hdr_path);
    if (!have_hdr && strcmp(r->parts[0].path, path) != 0)
        have_hdr = read_hdr(path, &hi, &hdr_path);
    int user = o->shape[0] || o->shape[1];
    if (have_hdr && !user && !hi.complete) {
        /* a .hdr cut short has lost the keys after the cut (Frames per Trigger, ScanX/Y): a
           scan shape guessed without them can be wrong (3x3 for a line of 9) */
        st = ssb_fail(err, SSB4D_EFORMAT, "%s: %s is cut short (it has no End line), so the scan "
                      "shape it records may be lost: pass --scan-shape ROWS,COLS", what, hdr_path);
        goto fail;
    }
    if (have_hdr && !user && hi.frames_in_acquisition && hi.frames_in_acquisition != n) {
        if (hi.frames_in_acquisition > n) {
            char more[512];
            companions(r, more, sizeof more);
            if (more[0])
                st = ssb_fail(err, SSB4D_EFORMAT, "%s: %s records %zu frames in the acquisition, "
                              "the file%s given hold%s %zu: the rest is likely in %s; list every file "
                              "of the acquisition (ssb4d import A1.mib A2.mib ...)", what, hdr_path,
                              hi.frames_in_acquisition, r->nparts > 1 ? "s" : "",
                              r->nparts > 1 ? "" : "s", n, more);
            else
                st = ssb_fail(err, SSB4D_EFORMAT, "%s: %s records %zu frames in the acquisition, "
                              "the file%s given hold%s %zu: is a file missing? List every file of "
                              "the acquisition, or give --scan-shape for the frames there are", what,
                              hdr_path, hi.frames_in_acquisition, r->nparts > 1 ? "s" : "",
                              r->nparts > 1 ? "" : "s", n);
        } else {
            st = ssb_fail(err, SSB4D_EFORMAT, "%s: %s records %zu frames in the acquisition, the "
                          "files hold %zu: files of another acquisition? (--scan-shape overrides)",
                          what, hdr_path, hi.frames_in_acquisition, n);
        }
        goto fail;
    }
    r->depth = h->counter_depth ? h->counter_depth : have_hdr ? hi.counter_depth : 0;
    size_t hint_r = 0, hint_c = 0;
    if (have_hdr && hi.scan_x && hi.scan_y) {
        hint_r = hi.scan_y;
        hint_c = hi.scan_x;
    } else if (have_hdr && hi.frames_per_trigger > 1 && hi.frames_in_acquisition &&
               hi.frames_in_acquisition % hi.frames_per_trigger == 0) {
        hint_r = hi.frames_in_acquisition / hi.frames_per_trigger;
        hint_c = hi.frames_per_trigger;
    }
    size_t scan[2];
    const char *how = NULL;
    size_t line = 0, q = isqrt(n);
    mib_line_info li = {0};
    if (!user && !hint_r) {
        if ((st = line_from_timestamps(r, n, &li, err)))
            goto fail;
        if (li.verdict == MIB_LINE_FOUND)
            line = li.line;
        char hdr_says[300];
        if (have_hdr)
            snprintf(hdr_says, sizeof hdr_says, "%s does not record it", hdr_path);
        else
            snprintf(hdr_says, sizeof hdr_says, "no .hdr beside it");
        if (!line && q * q != n && li.verdict == MIB_LINE_AMBIGUOUS) {
            st = ssb_fail(err, SSB4D_EINVAL, "%s holds %zu frames and nothing gives its scan shape "
                          "(%s; the frame time stamps are ambiguous: %s; %zu is not a square): pass "
                          "--scan-shape ROWS,COLS", what, n, hdr_says, li.why, n);
            goto fail;
        }
        if (!line && q * q != n) {
            st = ssb_fail(err, SSB4D_EINVAL, "%s holds %zu frames and nothing gives its scan shape "
                          "(%s; the frame time stamps show no line flyback: %s; %zu is not a "
                          "square): pass --scan-shape ROWS,COLS", what, n, hdr_says,
                          li.why[0] ? li.why : "none", n);
            goto fail;
        }
    }
    if (line) {
        scan[0] = n / line;
        scan[1] = line;
        how = "timestamps";
    } else {
        if ((st = fs_scan_shape(n, o, hint_r, hint_c, hdr_path ? hdr_path : "the .hdr file", what,
                                scan, &how, err)))
            goto fail;
        if (!strcmp(how, "file"))
            how = "hdr";
    }
    size_t shape[4] = {scan[0], scan[1], h->rows, h->cols};
    if ((st = fs_check_shape(shape, what, err)) ||
        (st = fs_check_det_opts(o, h->rows, h->cols, what, err)))
        goto fail;
    memcpy(s->shape, shape, sizeof shape);
    s->dtype_bytes = h->raw ? (h->counter_depth <= 6 ? 1 : h->counter_depth <= 12 ? 2 : 4)
                            : (int)h->dtype;
    s->format_name = "merlin-mib";
    /* the MQ1A extension's shutter time has ns digits; field 11 has us */
    double shutter = isfinite(h->shutter_ext_s) && h->shutter_ext_s > 0 ? h->shutter_ext_s
                                                                        : h->shutter_s;
    if (isfinite(shutter) && shutter > 0)
        s->cal.dwell_us = shutter * 1e6;
    fs_meta_string(s, "mib_data_type", h->dtype_text);
    fs_meta_string(s, "mib_sensor_layout", h->layout);
    fs_meta_number(s, "mib_chips", h->chips);
    fs_meta_number(s, "mib_header_bytes", (double)h->header_bytes);
    fs_meta_number(s, "mib_first_sequence", h->sequence);
    if (h->counter_depth)
        fs_meta_number(s, "mib_counter_depth", h->counter_depth);
    if (isfinite(h->shutter_s))
        fs_meta_quantity(s, "mib_shutter_time", h->shutter_s, "s");
    if (isfinite(h->shutter_ext_s))
        fs_meta_quantity(s, "mib_shutter_time_ns", h->shutter_ext_s * 1e9, "ns");
    fs_meta_number(s, "mib_frames", (double)n);
    fs_meta_number(s, "mib_files", (double)r->nparts);
    if (r->nparts > 1) {
        char list[1024];
        size_t used = 0;
        for (size_t k = 0; k < r->nparts; k++) {
            const char *b = strrchr(r->parts[k].path, '/');
            int w = snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "",
                             b ? b + 1 : r->parts[k].path);
            if (w < 0 || (size_t)w >= sizeof list - used) {
                list[used] = 0;
                break;
            }
            used += (size_t)w;
        }
        fs_meta_string(s, "mib_file_order", list);
    }
    fs_meta_string(s, "scan_shape_source", how);
    if (line) {
        fs_meta_number(s, "mib_line_length", (double)line);
        fs_meta_quantity(s, "mib_frame_interval", (double)li.median_ns * 1e-9, "s");
        fs_meta_quantity(s, "mib_line_gap_step", (double)li.step_ns * 1e-9, "s");
        fs_meta_string(s, "mib_time_stamps", h->time_res_ns < 1000 ? "MQ1A UTC (ns digits)"
                                                                   : "frame header (us digits)");
    } else if (li.why[0] && n >= 4 && !strcmp(how, "square")) {
        fs_meta_string(s, "mib_time_stamps_say", li.why);
    }
    if (have_hdr) {
        fs_meta_string(s, "mib_hdr_file", strrchr(hdr_path, '/') ? strrchr(hdr_path, '/') + 1 : hdr_path);
        if (hi.frames_in_acquisition)
            fs_meta_number(s, "hdr/Frames in Acquisition (Number)", (double)hi.frames_in_acquisition);
        if (hi.frames_per_trigger)
            fs_meta_number(s, "hdr/Frames per Trigger (Number)", (double)hi.frames_per_trigger);
        if (hi.counter_depth)
            fs_meta_number(s, "hdr/Counter Depth (number)", hi.counter_depth);
        if (hi.scan_x)
            fs_meta_number(s, "hdr/ScanX", (double)hi.scan_x);
        if (hi.scan_y)
            fs_meta_number(s, "hdr/ScanY", (double)hi.scan_y);
    }
    free(head);
    free(hdr_path);
    s->ops = &mib_ops;
    s->impl = r;
    return SSB4D_OK;
fail:
    free(head);
    free(hdr_path);
    mib_close(r);
    return st;
}
