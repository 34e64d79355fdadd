/* fs_mib.c — Merlin .mib acquisitions: a run of (header, pixel data) frames of one size. The
 * frame count follows from the file size; the scan shape comes from the user, the sibling .hdr
 * or a square count. Every header is parsed and compared with the first as its frame is read,
 * so a corrupt or reordered frame is an error that names it, never silent garbage. */
#include "formats/fs_internal.h"

#include "common/err.h"
#include "formats/mib.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB_STAGING_BYTES ((size_t)4 << 20)

typedef struct {
    int fd;
    mib_header first;    /* the first frame's header: every frame must match it */
    size_t stride;       /* header + data bytes of one frame */
    uint8_t *stage;      /* whole frames, at most MIB_STAGING_BYTES (or one frame) */
    size_t stage_frames;
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
    if (a->raw && a->counter_depth != b->counter_depth)
        return "counter depth";
    return NULL;
}

/* Parses and checks the header of frame p found at buf (stride bytes). */
static ssb4d_status check_frame(const framesrc *s, const mib_reader *r, const uint8_t *buf,
                                size_t len, size_t p, mib_header *h, ssb4d_err *err)
{
    ssb4d_err e = {0};
    if (mib_parse_header(buf, len, h, &e))
        return ssb4d_fail(err, SSB4D_EFORMAT, "%s: frame %zu (at byte %zu) is corrupt: %s", s->path,
                          p, p * r->stride, e.msg);
    const char *what = same_layout(&r->first, h);
    if (what)
        return ssb4d_fail(err, SSB4D_EFORMAT, "%s: frame %zu (at byte %zu) has a different %s than "
                          "frame 0", s->path, p, p * r->stride, what);
    uint64_t want = (uint64_t)r->first.sequence + p;
    if (h->sequence != want)
        return ssb4d_fail(err, SSB4D_EFORMAT, "%s: frame %zu has sequence number %u, %llu expected "
                          "(dropped or reordered frames?)", s->path, p, h->sequence,
                          (unsigned long long)want);
    return SSB4D_OK;
}

static ssb4d_status mib_read(framesrc *s, size_t pos0, size_t npos, uint32_t *out, ssb4d_err *err)
{
    mib_reader *r = s->impl;
    if (!r->stage) {
        r->stage_frames = MIB_STAGING_BYTES / r->stride ? MIB_STAGING_BYTES / r->stride : 1;
        if (!(r->stage = malloc(r->stage_frames * r->stride)))
            return ssb4d_fail(err, SSB4D_ENOMEM, "out of memory reading %s", s->path);
    }
    size_t P = s->shape[2] * s->shape[3];
    for (size_t done = 0; done < npos;) {
        size_t k = npos - done < r->stage_frames ? npos - done : r->stage_frames;
        off_t at = (off_t)((pos0 + done) * r->stride);
        ssb4d_status st = fs_pread_full(r->fd, r->stage, k * r->stride, at, s->path, err);
        if (st)
            return st;
        for (size_t i = 0; i < k; i++) {
            const uint8_t *f = r->stage + i * r->stride;
            mib_header h;
            if ((st = check_frame(s, r, f, r->stride, pos0 + done + i, &h, err)))
                return st;
            mib_decode_frame(&h, f + h.header_bytes, out + (done + i) * P);
        }
        done += k;
    }
    return SSB4D_OK;
}

static void mib_close(void *impl)
{
    mib_reader *r = impl;
    if (r) {
        close(r->fd);
        free(r->stage);
        free(r);
    }
}

static const framesrc_ops mib_ops = {mib_read, mib_close};

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
        size_t base = n - 4;
        if (attempt == 1) {
            size_t b = base;
            while (b && isdigit((unsigned char)mib_path[b - 1]))
                b--;
            if (b == base)
                break;
            base = b;
        }
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

ssb4d_status fs_mib_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ssb4d_fail(err, SSB4D_EIO, "cannot open %s: %s", path, strerror(errno));
    mib_reader *r = calloc(1, sizeof *r);
    uint8_t *head = malloc(MIB_MAX_HEADER_BYTES);
    char *hdr_path = NULL;
    ssb4d_status st = SSB4D_OK;
    size_t size = 0;
    if (r)
        r->fd = fd;
    if (!r || !head) {
        st = ssb4d_fail(err, SSB4D_ENOMEM, "out of memory opening %s", path);
        goto fail;
    }
    if ((st = fs_file_size(fd, path, &size, err)))
        goto fail;
    size_t got = size < MIB_MAX_HEADER_BYTES ? size : MIB_MAX_HEADER_BYTES;
    if ((st = fs_pread_full(fd, head, got, 0, path, err)))
        goto fail;
    ssb4d_err e = {0};
    if (mib_parse_header(head, got, &r->first, &e)) {
        st = ssb4d_fail(err, SSB4D_EFORMAT, "%s: first frame: %s", path, e.msg);
        goto fail;
    }
    const mib_header *h = &r->first;
    r->stride = h->header_bytes + h->data_bytes;
    size_t n = size / r->stride;
    if (size % r->stride) {
        st = ssb4d_fail(err, SSB4D_EFORMAT, "%s: %zu bytes is not a whole number of %zu-byte frames "
                        "(%zu header + %zu data): %zu complete frames and %zu bytes over (truncated "
                        "or interrupted acquisition?)", path, size, r->stride, h->header_bytes,
                        h->data_bytes, n, size % r->stride);
        goto fail;
    }
    /* the last header too, so a file of mixed frames fails now rather than at the end */
    if (n > 1) {
        mib_header last;
        size_t k = r->stride < MIB_MAX_HEADER_BYTES ? r->stride : MIB_MAX_HEADER_BYTES;
        if ((st = fs_pread_full(fd, head, k, (off_t)((n - 1) * r->stride), path, err)))
            goto fail;
        if ((st = check_frame(s, r, head, k, n - 1, &last, err)))
            goto fail;
    }
    mib_hdr_info hi = {0};
    int have_hdr = read_hdr(path, &hi, &hdr_path);
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
    if ((st = fs_scan_shape(n, o, hint_r, hint_c, hdr_path ? hdr_path : "the .hdr file", path, scan,
                            &how, err)))
        goto fail;
    size_t shape[4] = {scan[0], scan[1], h->rows, h->cols};
    if ((st = fs_check_shape(shape, path, err)) ||
        (st = fs_check_det_opts(o, h->rows, h->cols, path, err)))
        goto fail;
    memcpy(s->shape, shape, sizeof shape);
    s->dtype_bytes = h->raw ? (h->counter_depth <= 6 ? 1 : h->counter_depth <= 12 ? 2 : 4)
                            : (int)h->dtype;
    s->format_name = "merlin-mib";
    if (isfinite(h->shutter_s) && h->shutter_s > 0)
        s->cal.dwell_us = h->shutter_s * 1e6;
    fs_meta_string(s, "mib_data_type", h->dtype_text);
    fs_meta_string(s, "mib_sensor_layout", h->layout);
    fs_meta_number(s, "mib_chips", h->chips);
    fs_meta_number(s, "mib_header_bytes", (double)h->header_bytes);
    fs_meta_number(s, "mib_first_sequence", h->sequence);
    if (h->counter_depth)
        fs_meta_number(s, "mib_counter_depth", h->counter_depth);
    if (isfinite(h->shutter_s))
        fs_meta_quantity(s, "mib_shutter_time", h->shutter_s, "s");
    fs_meta_string(s, "scan_shape_source", how);
    if (have_hdr) {
        if (hi.frames_in_acquisition)
            fs_meta_number(s, "hdr/Frames in Acquisition (Number)", (double)hi.frames_in_acquisition);
        if (hi.frames_per_trigger)
            fs_meta_number(s, "hdr/Frames per Trigger (Number)", (double)hi.frames_per_trigger);
        if (hi.counter_depth)
            fs_meta_number(s, "hdr/Counter Depth (number)", hi.counter_depth);
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    free(head);
    free(hdr_path);
    s->ops = &mib_ops;
    s->impl = r;
    return SSB4D_OK;
fail:
    free(head);
    free(hdr_path);
    mib_close(r);
    if (!r)
        close(fd);
    return st;
}
