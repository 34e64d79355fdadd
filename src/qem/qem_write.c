/* qem_write.c — the streaming, atomic .qem writer (qem-format.md §3–§8, §12).
 *
 * Frames are buffered up to one chunk. A full chunk is encoded block by block: the P count
 * streams of a block are encoded in parallel (streams are independent; each lands in its own
 * slot of a scratch buffer and is then compacted in pixel order, so the bytes do not depend on
 * the thread count), the block's payload goes straight to a temporary body file, and the small
 * arrays (offsets, selectors, spatial index) follow once the chunk is done. The body is hashed
 * in 64 MiB blocks as it is written, never held in memory. qem_writer_finish writes envelope +
 * header into a second temporary file, appends the body (copy_file_range), fsyncs and publishes:
 * link() + unlink() (refuses an existing name) or rename() with force. */
#include "qem/qem_internal.h"

#include "codec/codec.h"
#include "common/atomic.h"
#include "common/err.h"
#include "common/parallel.h"
#include "common/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Default chunk: at most 8192 scans and at most 128 MiB of buffered uint16 frames. */
#define QEM_DEFAULT_CHUNK 8192u
#define QEM_FRAME_BUDGET ((size_t)128 << 20)
#define QEM_TILE 32 /* pixels gathered together when transposing a block for encoding */

typedef struct {
    size_t first, scans;
    uint64_t off[6], count[6];
} wchunk;

struct qem_writer {
    char *path, *tmp_body;
    int fd;                   /* temporary body file */
    size_t shape[4], N, P, F;
    int dtype_bytes;
    uint32_t maxval;
    size_t chunk_scans;
    int threads, force;
    uint8_t *valid;
    uint32_t *field8, *field32;
    char *valid_hex;
    cJSON *sci, *meta;
    uint16_t *frames;         /* chunk_scans x P */
    size_t nbuf, appended;
    wchunk *chunks;
    size_t nchunks, chunks_cap;
    /* body and its checksums */
    uint64_t body_bytes;
    ssb4d_sha256 *h;
    size_t in_block;
    char (*sums)[65];
    size_t nsums, sums_cap;
    /* per-block scratch */
    size_t stride;            /* qem_stream_bound(512) */
    uint8_t *enc;             /* P * stride */
    size_t *len;              /* P */
    uint32_t *tsum;           /* QEM_INTERVAL * F spatial sums of one block */
    int failed;
};

/* ---- body output: write + hash in 64 MiB blocks ---- */

static ssb4d_status body_write(qem_writer *w, const void *data, size_t n, ssb4d_err *err)
{
    const uint8_t *p = data;
    for (size_t done = 0; done < n;) {
        size_t take = n - done, room = QEM_HASH_BLOCK - w->in_block;
        if (take > room)
            take = room;
        if (!w->h && !(w->h = ssb_sha256_new()))
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        ssb_sha256_update(w->h, p + done, take);
        w->in_block += take;
        if (w->in_block == QEM_HASH_BLOCK) {
            if (w->nsums == w->sums_cap) {
                size_t cap = w->sums_cap ? 2 * w->sums_cap : 16;
                char(*s)[65] = realloc(w->sums, cap * sizeof *s);
                if (!s)
                    return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
                w->sums = s;
                w->sums_cap = cap;
            }
            ssb_sha256_final_hex(w->h, w->sums[w->nsums++]);
            w->h = NULL;
            w->in_block = 0;
        }
        size_t left = take;
        const uint8_t *q = p + done;
        while (left) {
            ssize_t r = write(w->fd, q, left);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return ssb_fail(err, SSB4D_EIO, "cannot write %.200s: %s", w->tmp_body,
                                r < 0 ? strerror(errno) : "short write");
            q += r;
            left -= (size_t)r;
        }
        done += take;
    }
    w->body_bytes += n;
    return SSB4D_OK;
}

static ssb4d_status body_align(qem_writer *w, ssb4d_err *err)
{
    static const uint8_t zero[8];
    size_t pad = (size_t)((8 - (w->body_bytes & 7)) & 7);
    return pad ? body_write(w, zero, pad, err) : SSB4D_OK;
}

/* An array of little-endian integers of `item` bytes (native buffers on little-endian hosts). */
static ssb4d_status body_write_le(qem_writer *w, const void *data, size_t count, unsigned item, ssb4d_err *err)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint8_t tmp[4096];
    const uint8_t *p = data;
    for (size_t i = 0; i < count;) {
        size_t n = count - i < sizeof tmp / item ? count - i : sizeof tmp / item;
        for (size_t j = 0; j < n; j++)
            for (unsigned b = 0; b < item; b++)
                tmp[j * item + b] = p[(i + j) * item + item - 1 - b];
        ssb4d_status st = body_write(w, tmp, n * item, err);
        if (st)
            return st;
        i += n;
    }
    return SSB4D_OK;
#else
    return body_write(w, data, count * item, err);
#endif
}

/* ---- one chunk ---- */

/* Encodes the P streams of the n scans at frames[j0 .. j0+n) (scan-major) into w->enc. */
static void encode_block(qem_writer *w, size_t j0, size_t n, uint8_t *sel, int nt)
{
    const size_t P = w->P;
    const size_t ntile = (P + QEM_TILE - 1) / QEM_TILE;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4)
    for (size_t ti = 0; ti < ntile; ti++) {
        uint16_t col[QEM_TILE][QEM_INTERVAL]; /* the tile transposed: one row per pixel */
        size_t k0 = ti * QEM_TILE, g = P - k0 < QEM_TILE ? P - k0 : QEM_TILE;
        for (size_t j = 0; j < n; j++) {
            const uint16_t *row = w->frames + (j0 + j) * P + k0;
            for (size_t i = 0; i < g; i++)
                col[i][j] = row[i];
        }
        for (size_t i = 0; i < g; i++) {
            size_t k = k0 + i;
            w->len[k] = qem_stream_encode(col[i], n, w->enc + k * w->stride, &sel[k]);
        }
    }
}

/* Spatial sums of the block at frames[j0 .. j0+n): tsum[j * F + f] over valid pixels. */
static void spatial_sums(qem_writer *w, size_t j0, size_t n, int nt)
{
    const size_t P = w->P, F = w->F;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t j = 0; j < n; j++) {
        uint32_t *t = w->tsum + j * F;
        memset(t, 0, F * sizeof *t);
        const uint16_t *row = w->frames + (j0 + j) * P;
        for (size_t k = 0; k < P; k++)
            if (w->valid[k]) {
                t[w->field8[k]] += row[k];
                t[w->field32[k]] += row[k];
            }
    }
}

static ssb4d_status flush_chunk(qem_writer *w, ssb4d_err *err)
{
    const size_t P = w->P, F = w->F, scans = w->nbuf;
    const size_t B = (scans + QEM_INTERVAL - 1) / QEM_INTERVAL;
    int nt = ssb_threads_resolve(w->threads);
    ssb4d_status st = SSB4D_OK;
    if (w->nchunks == w->chunks_cap) {
        size_t cap = w->chunks_cap ? 2 * w->chunks_cap : 16;
        wchunk *c = realloc(w->chunks, cap * sizeof *c);
        if (!c)
            return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        w->chunks = c;
        w->chunks_cap = cap;
    }
    wchunk *ch = &w->chunks[w->nchunks];
    memset(ch, 0, sizeof *ch);
    ch->first = w->appended - scans;
    ch->scans = scans;

    /* The small arrays of the chunk: B*P*5 bytes, B*F*9 bytes and the packed words
     * (at most 512*F u32 per block), all far below the frame buffer. */
    uint32_t *off = malloc((B * P + 1) * sizeof *off);
    uint8_t *sel = malloc(B * P);
    uint8_t *width = malloc(B * F); /* F >= 2 */
    uint64_t *wstart = malloc((B * F + 1) * sizeof *wstart);
    uint32_t *words = malloc(B * F * QEM_INTERVAL * sizeof *words + 4);
    if (!off || !sel || !width || !wstart || !words) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory (chunk of %zu scans x %zu pixels)", scans, P);
        goto done;
    }
    if ((st = body_align(w, err)))
        goto done;
    ch->off[0] = w->body_bytes;
    uint64_t payload = 0, nwords = 0;
    wstart[0] = 0;
    for (size_t b = 0; b < B; b++) {
        size_t j0 = b * QEM_INTERVAL, n = scans - j0 < QEM_INTERVAL ? scans - j0 : QEM_INTERVAL;
        /* count streams: encode in parallel, then compact in pixel order and append */
        encode_block(w, j0, n, sel + b * P, nt);
        size_t pos = 0;
        for (size_t k = 0; k < P; k++) {
            off[b * P + k] = (uint32_t)(payload + pos); /* < 2^32 by the chunk bound */
            memmove(w->enc + pos, w->enc + k * w->stride, w->len[k]);
            pos += w->len[k];
        }
        if ((st = body_write(w, w->enc, pos, err)))
            goto done;
        payload += pos;
        /* spatial index: widths, word offsets, LSB-first packing */
        spatial_sums(w, j0, n, nt);
        for (size_t f = 0; f < F; f++) {
            uint32_t mx = 0;
            for (size_t j = 0; j < n; j++)
                if (w->tsum[j * F + f] > mx)
                    mx = w->tsum[j * F + f];
            size_t q = b * F + f;
            width[q] = (uint8_t)qem_bit_width(mx);
            wstart[q + 1] = wstart[q] + qem_spatial_words(n, width[q]);
        }
        nwords = wstart[(b + 1) * F];
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t f = 0; f < F; f++) {
            uint32_t v[QEM_INTERVAL];
            size_t q = b * F + f;
            for (size_t j = 0; j < n; j++)
                v[j] = w->tsum[j * F + f];
            qem_spatial_pack(v, n, width[q], words + wstart[q]);
        }
    }
    off[B * P] = (uint32_t)payload;
    ch->count[0] = payload;
    /* arrays 1..5, each 8-aligned */
    const void *arr[6] = {NULL, off, sel, words, wstart, width};
    const uint64_t cnt[6] = {payload, B * P + 1, B * P, nwords, B * F + 1, B * F};
    for (int a = 1; a < 6; a++) {
        if ((st = body_align(w, err)))
            goto done;
        ch->off[a] = w->body_bytes;
        ch->count[a] = cnt[a];
        if ((st = body_write_le(w, arr[a], (size_t)cnt[a], qem_array_item[a], err)))
            goto done;
    }
    w->nchunks++;
    w->nbuf = 0;
done:
    free(off);
    free(sel);
    free(width);
    free(wstart);
    free(words);
    return st;
}

/* ---- open / append ---- */

static int bound_ok(size_t scans, size_t P)
{
    uint64_t B = (scans + QEM_INTERVAL - 1) / QEM_INTERVAL, per = 2 * (scans < QEM_INTERVAL ? scans : QEM_INTERVAL) + 4,
             bp, x;
    return !__builtin_mul_overflow(B, (uint64_t)P, &bp) && !__builtin_mul_overflow(bp, per, &x) &&
           x < ((uint64_t)1 << 32);
}

static void free_writer(qem_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmp_body)
        unlink(w->tmp_body);
    if (w->h) {
        char hex[65];
        ssb_sha256_final_hex(w->h, hex); /* frees it */
    }
    free(w->path);
    free(w->tmp_body);
    free(w->valid);
    free(w->field8);
    free(w->field32);
    free(w->valid_hex);
    cJSON_Delete(w->sci);
    cJSON_Delete(w->meta);
    free(w->frames);
    free(w->chunks);
    free(w->sums);
    free(w->enc);
    free(w->len);
    free(w->tsum);
    free(w);
}

ssb4d_status qem_writer_open(const char *path, const qem_writer_opts *o, qem_writer **out, ssb4d_err *err)
{
    *out = NULL;
    qem_writer *w = calloc(1, sizeof *w);
    if (!w) {
        cJSON_Delete(o->scientific_metadata);
        cJSON_Delete(o->metadata);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    w->fd = -1;
    w->sci = o->scientific_metadata;
    w->meta = o->metadata ? o->metadata : cJSON_CreateObject();
    ssb4d_status st = SSB4D_OK;
#define REFUSE(code, ...)                                                                                         \
    do {                                                                                                          \
        st = ssb_fail(err, code, __VA_ARGS__);                                                                  \
        goto fail;                                                                                                \
    } while (0)
    for (int a = 0; a < 4; a++) {
        if (o->shape[a] < 1 || o->shape[a] >= QEM_MAX_DIM)
            REFUSE(SSB4D_EINVAL, "%.200s: shape[%d] = %zu is outside 1..2^24-1", path, a, o->shape[a]);
        w->shape[a] = o->shape[a];
    }
    if (o->dtype_bytes != 1 && o->dtype_bytes != 2)
        REFUSE(SSB4D_EINVAL, "%.200s: dtype must be uint8 or uint16", path);
    w->dtype_bytes = o->dtype_bytes;
    w->maxval = o->dtype_bytes == 1 ? 255u : 65535u;
    w->N = w->shape[0] * w->shape[1];
    w->P = w->shape[2] * w->shape[3];
    w->F = qem_spatial_fields(w->shape[2], w->shape[3]);
    w->threads = o->threads;
    w->force = o->force;
    if (!w->meta || !cJSON_IsObject(w->meta))
        REFUSE(SSB4D_EINVAL, "%.200s: metadata must be a JSON object", path);

    /* chunk size */
    size_t cs = o->chunk_scans;
    if (cs == 0) {
        size_t fit = QEM_FRAME_BUDGET / (2 * w->P) / QEM_INTERVAL * QEM_INTERVAL;
        cs = fit < QEM_INTERVAL ? QEM_INTERVAL : fit > QEM_DEFAULT_CHUNK ? QEM_DEFAULT_CHUNK : fit;
        while (cs > QEM_INTERVAL && !bound_ok(cs < w->N ? cs : w->N, w->P))
            cs -= QEM_INTERVAL;
    } else if (cs % QEM_INTERVAL != 0 && cs < w->N) {
        REFUSE(SSB4D_EINVAL, "%.200s: chunk_scans %zu must be a multiple of %d (or cover all %zu scans)", path, cs,
               QEM_INTERVAL, w->N);
    }
    if (cs > w->N)
        cs = w->N;
    if (!bound_ok(cs, w->P))
        REFUSE(SSB4D_EINVAL,
               "%.200s: %zu scans x %zu detector pixels per chunk overflow the 32-bit stream offsets of .qem v1",
               path, cs, w->P);
    w->chunk_scans = cs;

    /* valid mask */
    w->valid = malloc(w->P);
    w->field8 = malloc(w->P * sizeof *w->field8);
    w->field32 = malloc(w->P * sizeof *w->field32);
    w->valid_hex = calloc(2 * ((w->P + 7) / 8) + 1, 1);
    if (!w->valid || !w->field8 || !w->field32 || !w->valid_hex)
        REFUSE(SSB4D_ENOMEM, "out of memory");
    uint8_t byte = 0;
    for (size_t k = 0; k < w->P; k++) {
        w->valid[k] = o->valid ? (o->valid[k] != 0) : 1;
        byte |= (uint8_t)(w->valid[k] << (7 - (k & 7)));
        if ((k & 7) == 7 || k + 1 == w->P) {
            qem_hex(&byte, 1, w->valid_hex + 2 * (k >> 3));
            byte = 0;
        }
    }
    qem_spatial_field_map(w->shape[2], w->shape[3], w->field8, w->field32);

    /* scientific metadata: checked now, so a bad record fails before any work */
    if (!w->sci && !(w->sci = qem_build_scientific_metadata(w->shape, NULL)))
        REFUSE(SSB4D_ENOMEM, "out of memory");
    ssb4d_err e;
    if (qem_validate_scientific_metadata(w->sci, w->meta, w->shape, w->dtype_bytes == 1 ? "uint8" : "uint16", &e))
        REFUSE(SSB4D_EINVAL, "%.200s: %s", path, e.msg);

    /* destination and temporary body */
    struct stat sb;
    if (!w->force && lstat(path, &sb) == 0)
        REFUSE(SSB4D_EIO, "%.200s exists; use --force to replace it", path);
    w->path = strdup(path);
    w->tmp_body = ssb_temp_name(path, ".body");
    if (!w->path || !w->tmp_body)
        REFUSE(SSB4D_ENOMEM, "out of memory");
    w->fd = open(w->tmp_body, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int en = errno;
        free(w->tmp_body);
        w->tmp_body = NULL; /* not ours: never unlink it */
        REFUSE(SSB4D_EIO, "cannot create a temporary file next to %.200s: %s", path, strerror(en));
    }

    /* buffers: one chunk of frames + one block of encoded streams and spatial sums */
    w->stride = qem_stream_bound(QEM_INTERVAL);
    w->frames = malloc(w->chunk_scans * w->P * sizeof *w->frames);
    w->enc = malloc(w->P * w->stride);
    w->len = malloc(w->P * sizeof *w->len);
    w->tsum = malloc((size_t)QEM_INTERVAL * w->F * sizeof *w->tsum);
    if (!w->frames || !w->enc || !w->len || !w->tsum)
        REFUSE(SSB4D_ENOMEM, "out of memory (writer buffers for %zu scans x %zu pixels)", w->chunk_scans, w->P);
#undef REFUSE
    *out = w;
    return SSB4D_OK;
fail:
    free_writer(w);
    return st;
}

ssb4d_status qem_writer_append(qem_writer *w, const uint16_t *frames, size_t nscans, ssb4d_err *err)
{
    if (w->failed)
        return ssb_fail(err, SSB4D_EINVAL, "%.200s: the writer already failed", w->path);
    if (nscans > w->N - w->appended) {
        w->failed = 1;
        return ssb_fail(err, SSB4D_EINVAL, "%.200s: more than the %zu scans of the shape were appended", w->path,
                        w->N);
    }
    const size_t P = w->P;
    while (nscans) {
        size_t take = w->chunk_scans - w->nbuf;
        if (take > nscans)
            take = nscans;
        if (w->dtype_bytes == 1)
            for (size_t i = 0; i < take * P; i++)
                if (frames[i] > w->maxval) {
                    w->failed = 1;
                    size_t t = w->appended + i / P, k = i % P;
                    return ssb_fail(err, SSB4D_EINVAL,
                                    "%.200s: scan %zu detector pixel (%zu, %zu) holds %u, which does not fit uint8",
                                    w->path, t, k / w->shape[3], k % w->shape[3], frames[i]);
                }
        memcpy(w->frames + w->nbuf * P, frames, take * P * sizeof *frames);
        w->nbuf += take;
        w->appended += take;
        frames += take * P;
        nscans -= take;
        if (w->nbuf == w->chunk_scans || w->appended == w->N) {
            ssb4d_status st = flush_chunk(w, err);
            if (st) {
                w->failed = 1;
                return st;
            }
        }
    }
    return SSB4D_OK;
}

ssb4d_status qem_writer_set_metadata(qem_writer *w, cJSON *scientific_metadata, cJSON *metadata,
                                     ssb4d_err *err)
{
    if (!scientific_metadata || !metadata) {
        cJSON_Delete(scientific_metadata);
        cJSON_Delete(metadata);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    ssb4d_err e;
    if (w->failed) {
        cJSON_Delete(scientific_metadata);
        cJSON_Delete(metadata);
        return ssb_fail(err, SSB4D_EINVAL, "%.200s: the writer has already failed", w->path);
    }
    /* Checked like at open, so that finish never writes a header the reader would refuse. */
    if (qem_validate_scientific_metadata(scientific_metadata, metadata, w->shape,
                                         w->dtype_bytes == 1 ? "uint8" : "uint16", &e)) {
        cJSON_Delete(scientific_metadata);
        cJSON_Delete(metadata);
        return ssb_fail(err, SSB4D_EINVAL, "%.200s: %s", w->path, e.msg);
    }
    cJSON_Delete(w->sci);
    cJSON_Delete(w->meta);
    w->sci = scientific_metadata;
    w->meta = metadata;
    return SSB4D_OK;
}

size_t qem_writer_body_bytes(const qem_writer *w) { return w ? (size_t)w->body_bytes : 0; }

void qem_writer_abort(qem_writer *w) { free_writer(w); }

/* ---- finish ---- */

static cJSON *build_header(qem_writer *w)
{
    cJSON *h = cJSON_CreateObject();
    if (!h)
        return NULL;
    cJSON_AddNumberToObject(h, "bytes", (double)w->body_bytes);
    cJSON *chunks = cJSON_AddArrayToObject(h, "chunks");
    for (size_t i = 0; chunks && i < w->nchunks; i++) {
        cJSON *c = cJSON_CreateObject();
        if (!c || !cJSON_AddItemToArray(chunks, c))
            break;
        cJSON *arrays = cJSON_AddArrayToObject(c, "arrays");
        for (int a = 0; arrays && a < 6; a++) {
            cJSON *d = cJSON_CreateObject();
            if (!d || !cJSON_AddItemToArray(arrays, d))
                break;
            cJSON_AddNumberToObject(d, "count", (double)w->chunks[i].count[a]);
            cJSON_AddNumberToObject(d, "offset", (double)w->chunks[i].off[a]);
        }
        cJSON_AddNumberToObject(c, "first", (double)w->chunks[i].first);
        cJSON_AddNumberToObject(c, "scans", (double)w->chunks[i].scans);
    }
    cJSON_AddStringToObject(h, "codec", QEM_CODEC);
    cJSON_AddStringToObject(h, "container", QEM_CONTAINER);
    cJSON_AddNumberToObject(h, "container_version", 1);
    cJSON_AddStringToObject(h, "dtype", w->dtype_bytes == 1 ? "uint8" : "uint16");
    cJSON_AddNumberToObject(h, "interval", QEM_INTERVAL);
    cJSON_AddItemReferenceToObject(h, "metadata", w->meta);
    cJSON_AddStringToObject(h, "profile", QEM_CODEC);
    cJSON_AddItemReferenceToObject(h, "scientific_metadata", w->sci);
    cJSON *sums = cJSON_AddArrayToObject(h, "sha256");
    for (size_t i = 0; sums && i < w->nsums; i++)
        cJSON_AddItemToArray(sums, cJSON_CreateString(w->sums[i]));
    cJSON *shape = cJSON_AddArrayToObject(h, "shape");
    for (int a = 0; shape && a < 4; a++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)w->shape[a]));
    cJSON_AddStringToObject(h, "valid", w->valid_hex);
    cJSON_AddNumberToObject(h, "version", 1);
    return h;
}

static ssb4d_status write_all(int fd, const void *data, size_t n, const char *name, ssb4d_err *err)
{
    const uint8_t *p = data;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return ssb_fail(err, SSB4D_EIO, "cannot write %.200s: %s", name, r < 0 ? strerror(errno) : "short write");
        p += r;
        n -= (size_t)r;
    }
    return SSB4D_OK;
}

/* Appends the temporary body to fd: copy_file_range, or a read/write loop where unsupported. */
static ssb4d_status append_body(qem_writer *w, int fd, const char *name, ssb4d_err *err)
{
    loff_t in = 0;
    uint64_t left = w->body_bytes;
    while (left) {
        ssize_t r = copy_file_range(w->fd, &in, fd, NULL, left > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)left, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        left -= (uint64_t)r;
    }
    if (!left)
        return SSB4D_OK;
    size_t bufsz = (size_t)1 << 20;
    uint8_t *buf = malloc(bufsz);
    if (!buf)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = SSB4D_OK;
    while (left && !st) {
        ssize_t r = pread(w->fd, buf, left < bufsz ? (size_t)left : bufsz, in);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            st = ssb_fail(err, SSB4D_EIO, "cannot read back %.200s: %s", w->tmp_body,
                          r < 0 ? strerror(errno) : "file shrank");
            break;
        }
        st = write_all(fd, buf, (size_t)r, name, err);
        in += r;
        left -= (uint64_t)r;
    }
    free(buf);
    return st;
}

static void fsync_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    int d = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d >= 0) {
        fsync(d);
        close(d);
    }
    free(copy);
}

ssb4d_status qem_writer_finish(qem_writer *w, ssb4d_err *err)
{
    if (!w)
        return ssb_fail(err, SSB4D_EINVAL, "no writer");
    ssb4d_status st = SSB4D_OK;
    char *tmp = NULL, *text = NULL;
    int fd = -1;
    cJSON *h = NULL;
    if (w->failed) {
        st = ssb_fail(err, SSB4D_EINVAL, "%.200s: the writer already failed; nothing was written", w->path);
        goto done;
    }
    if (w->appended != w->N) {
        st = ssb_fail(err, SSB4D_EINVAL, "%.200s: %zu of %zu scans were appended; nothing was written", w->path,
                      w->appended, w->N);
        goto done;
    }
    if (w->in_block || w->nsums == 0) {
        if (!w->h && !(w->h = ssb_sha256_new())) {
            st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
            goto done;
        }
        if (w->nsums == w->sums_cap) {
            char(*s)[65] = realloc(w->sums, (w->sums_cap + 1) * sizeof *s);
            if (!s) {
                st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
                goto done;
            }
            w->sums = s;
            w->sums_cap++;
        }
        ssb_sha256_final_hex(w->h, w->sums[w->nsums++]);
        w->h = NULL;
        w->in_block = 0;
    }
    /* header + envelope */
    size_t L = 0;
    h = build_header(w);
    text = h ? qem_json_print_canonical(h, &L) : NULL;
    if (!text) {
        st = ssb_fail(err, SSB4D_ENOMEM, "%.200s: cannot build the header (out of memory or a non-finite number)",
                      w->path);
        goto done;
    }
    if (L > QEM_MAX_HEADER) {
        st = ssb_fail(err, SSB4D_EINVAL, "%.200s: the header would be %zu bytes, more than the 16 MiB .qem allows",
                      w->path, L);
        goto done;
    }
    uint8_t env[QEM_ENVELOPE];
    memcpy(env, QEM_MAGIC, 8);
    qem_st64(env + 8, L);
    qem_st64(env + 16, QEM_ENVELOPE + L);
    char hex[65];
    ssb_sha256_hex(text, L, hex);
    for (int i = 0; i < 32; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        env[24 + i] = (uint8_t)v;
    }
    /* the file, complete, under a temporary name */
    tmp = ssb_temp_name(w->path, "");
    if (!tmp) {
        st = ssb_fail(err, SSB4D_ENOMEM, "out of memory");
        goto done;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = ssb_fail(err, SSB4D_EIO, "cannot create %.200s: %s", tmp, strerror(errno));
        free(tmp);
        tmp = NULL; /* not ours */
        goto done;
    }
    if ((st = write_all(fd, env, sizeof env, tmp, err)) || (st = write_all(fd, text, L, tmp, err)) ||
        (st = append_body(w, fd, tmp, err)))
        goto done;
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        st = ssb_fail(err, SSB4D_EIO, "cannot write %.200s: %s", tmp, strerror(errno));
        goto done;
    }
    fd = -1;
    /* publish */
    if (w->force) {
        if (rename(tmp, w->path) != 0) {
            st = ssb_fail(err, SSB4D_EIO, "cannot rename to %.200s: %s", w->path, strerror(errno));
            goto done;
        }
    } else if (link(tmp, w->path) != 0) {
        int en = errno;
        if (en == EEXIST) {
            st = ssb_fail(err, SSB4D_EIO, "%.200s exists; use --force to replace it", w->path);
            goto done;
        }
        /* file systems without hard links: the no-replace rename does the same */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, w->path, RENAME_NOREPLACE) != 0) {
            en = errno;
            st = en == EEXIST ? ssb_fail(err, SSB4D_EIO, "%.200s exists; use --force to replace it", w->path)
                              : ssb_fail(err, SSB4D_EIO, "cannot publish %.200s: %s", w->path, strerror(en));
            goto done;
        }
    }
    fsync_dir(w->path);
done:
    if (fd >= 0)
        close(fd);
    if (tmp) {
        unlink(tmp); /* after link(): the extra name; after rename(): already gone */
        free(tmp);
    }
    if (h) {
        /* metadata and scientific_metadata are references to w's trees */
        cJSON_Delete(h);
    }
    free(text);
    free_writer(w);
    return st;
}
