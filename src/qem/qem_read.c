/* qem_read.c — the validating .qem reader (qem-format.md §2–§5, §8, §11).
 *
 * qem_open maps the file read-only and runs §11 rules 1–15 in order before it returns a handle:
 * envelope, header checksum, strict JSON, header fields, scientific metadata, valid mask, chunk
 * layout, body checksums and every chunk's stream offsets. Nothing is allocated from an untrusted
 * count before that count has been checked against the bytes that must hold it. The handle is
 * read-only afterwards, so any number of threads may decode from it at once; rules 16–18 are
 * checked by the stream decoder on every decode. */
#include "qem/qem_internal.h"

#include "codec/codec.h"
#include "common/err.h"
#include "common/parallel.h"
#include "common/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    size_t first, scans, nblocks, block0; /* block0: index of its first block over the file */
    uint64_t off[6], count[6];            /* body-relative byte offset, element count */
} qem_chunk;

struct qem_file {
    char *name;               /* for messages */
    const uint8_t *data;      /* the whole file image */
    size_t size;
    void *map;                /* mmap'd region (NULL for qem_open_memory) */
    const uint8_t *body;
    qem_info info;
    uint32_t maxval;          /* 255 or 65535 */
    size_t F;                 /* spatial fields per scan */
    uint8_t *valid;           /* P bytes */
    uint32_t *field8, *field32;
    cJSON *header;
    qem_chunk *chunks;
    qem_calibration cal;
};

/* ---- helpers ---- */

/* Refuses with "<file>: <what>"; the message is one line. */
#define FAIL(f, code, ...) fail_file((f), (code), err, __VA_ARGS__)
__attribute__((format(printf, 4, 5))) static ssb4d_status fail_file(const qem_file *f, ssb4d_status code,
                                                                      ssb4d_err *err, const char *fmt, ...)
{
    char what[480];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ssb_fail(err, code, "%.200s: %s", f->name, what);
}

static int mul_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_mul_overflow(a, b, r); }

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static int str_is(const cJSON *j, const char *s) { return cJSON_IsString(j) && strcmp(j->valuestring, s) == 0; }

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* ---- §11 rules 1–3: the envelope ---- */

static ssb4d_status check_envelope(qem_file *f, uint64_t *L, ssb4d_err *err)
{
    if (f->size < QEM_ENVELOPE)
        return FAIL(f, SSB4D_EFORMAT, "not a .qem file (only %zu bytes; a .qem starts with a 56-byte envelope)",
                    f->size);
    if (memcmp(f->data, QEM_MAGIC, 8) != 0) {
        if (memcmp(f->data, "QGPUSTRM", 8) == 0 || memcmp(f->data, "QGANS", 5) == 0)
            return FAIL(f, SSB4D_EFORMAT,
                        "retired quantem container (magic is not QEMDATA1); convert it with a current quantem");
        return FAIL(f, SSB4D_EFORMAT, "not a .qem file (magic is not QEMDATA1)");
    }
    uint64_t hl = qem_ld64(f->data + 8), bs = qem_ld64(f->data + 16);
    if (hl < 1 || hl > QEM_MAX_HEADER)
        return FAIL(f, SSB4D_EFORMAT,
                    "header length %llu is outside 1..16 MiB; the envelope is damaged — recopy the file",
                    (unsigned long long)hl);
    if (bs != QEM_ENVELOPE + hl)
        return FAIL(f, SSB4D_EFORMAT,
                    "body start %llu is not 56 + header length %llu; the envelope is damaged — recopy the file",
                    (unsigned long long)bs, (unsigned long long)hl);
    if (bs > f->size)
        return FAIL(f, SSB4D_EFORMAT,
                    "file size %zu is shorter than its header (%llu bytes); the file is truncated — recopy it",
                    f->size, (unsigned long long)bs);
    char want[65], got[65];
    qem_hex(f->data + 24, 32, want);
    ssb_sha256_hex(f->data + QEM_ENVELOPE, (size_t)hl, got);
    if (strcmp(want, got) != 0)
        return FAIL(f, SSB4D_EFORMAT, "header checksum mismatch; the file is damaged — recopy it");
    *L = hl;
    return SSB4D_OK;
}

/* ---- rules 4–9: header fields ---- */

static ssb4d_status check_fields(qem_file *f, const char **valid_hex, ssb4d_err *err)
{
    const cJSON *h = f->header;
    const cJSON *c = get(h, "container"), *cv = get(h, "container_version"), *codec = get(h, "codec");
    uint64_t v;
    if (!str_is(c, QEM_CONTAINER))
        return FAIL(f, SSB4D_EFORMAT, "header container is not \"%s\"; not a .qem file", QEM_CONTAINER);
    if (!qem_json_uint(cv, 0, QEM_MAX_JSON_INT, &v) || v != 1) {
        char what[40] = "missing or not an integer";
        if (cJSON_IsNumber(cv))
            snprintf(what, sizeof what, "%.17g", cv->valuedouble);
        return FAIL(f, SSB4D_EFORMAT,
                    "container_version %s is not supported (this reader reads container version 1 with codec "
                    "%s); update ssb4d",
                    what, QEM_CODEC);
    }
    if (!cJSON_IsString(codec))
        return FAIL(f, SSB4D_EFORMAT, "header has no codec string");
    if (strcmp(codec->valuestring, QEM_CODEC) != 0)
        return FAIL(f, SSB4D_EFORMAT, "unsupported codec \"%.100s\" (this reader handles only %s)",
                    codec->valuestring, QEM_CODEC);
    if (!str_is(get(h, "profile"), codec->valuestring))
        return FAIL(f, SSB4D_EFORMAT, "header profile differs from codec \"%s\"", QEM_CODEC);
    if (!qem_json_uint(get(h, "version"), 0, QEM_MAX_JSON_INT, &v) || v != 1)
        return FAIL(f, SSB4D_EFORMAT, "codec version is not 1 (codec %s); update ssb4d", QEM_CODEC);
    if (!qem_json_uint(get(h, "interval"), 0, QEM_MAX_JSON_INT, &v) || v != QEM_INTERVAL)
        return FAIL(f, SSB4D_EFORMAT, "interval is not %d", QEM_INTERVAL);
    const cJSON *dt = get(h, "dtype");
    if (str_is(dt, "uint8"))
        f->info.dtype_bytes = 1;
    else if (str_is(dt, "uint16"))
        f->info.dtype_bytes = 2;
    else
        return FAIL(f, SSB4D_EFORMAT, "dtype must be \"uint8\" or \"uint16\"");
    f->maxval = f->info.dtype_bytes == 1 ? 255u : 65535u;

    /* rule 6 */
    const cJSON *shape = get(h, "shape");
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 4)
        return FAIL(f, SSB4D_EFORMAT, "shape must be a list of 4 integers");
    int i = 0;
    for (const cJSON *s = shape->child; s; s = s->next, i++) {
        if (!qem_json_uint(s, 1, (double)(QEM_MAX_DIM - 1), &v))
            return FAIL(f, SSB4D_EFORMAT, "shape[%d] must be an integer in 1..2^24-1", i);
        f->info.shape[i] = (size_t)v;
    }
    f->info.n_scans = f->info.shape[0] * f->info.shape[1]; /* < 2^48: no overflow */
    f->info.n_pix = f->info.shape[2] * f->info.shape[3];

    /* rules 7 and 8 */
    const cJSON *meta = get(h, "metadata");
    ssb4d_err e;
    if (qem_validate_scientific_metadata(get(h, "scientific_metadata"), cJSON_IsObject(meta) ? meta : NULL,
                                         f->info.shape, dt->valuestring, &e) != SSB4D_OK)
        return FAIL(f, SSB4D_EFORMAT, "%s", e.msg);
    if (!cJSON_IsObject(meta))
        return FAIL(f, SSB4D_EFORMAT, "metadata must be a JSON object");

    /* rule 9: kept as hex until the layout has proven that P pixels fit in the file */
    const cJSON *valid = get(h, "valid");
    uint64_t nbytes = (f->info.n_pix + 7) / 8;
    if (!cJSON_IsString(valid) || strlen(valid->valuestring) != 2 * nbytes)
        return FAIL(f, SSB4D_EFORMAT, "valid mask must be %llu lowercase hex digits (one bit per detector pixel)",
                    (unsigned long long)(2 * nbytes));
    for (const char *p = valid->valuestring; *p; p++)
        if (hexval((unsigned char)*p) < 0)
            return FAIL(f, SSB4D_EFORMAT, "valid mask has a character that is not lowercase hex");
    *valid_hex = valid->valuestring;
    return SSB4D_OK;
}

/* ---- rules 10–13: layout ---- */

static ssb4d_status check_layout(qem_file *f, uint64_t L, ssb4d_err *err)
{
    const cJSON *chunks = get(f->header, "chunks");
    const size_t P = f->info.n_pix, N = f->info.n_scans;
    if (!cJSON_IsArray(chunks) || !chunks->child)
        return FAIL(f, SSB4D_EFORMAT, "chunks must be a non-empty list");
    size_t nc = 0;
    for (const cJSON *c = chunks->child; c; c = c->next)
        nc++;
    f->chunks = calloc(nc, sizeof *f->chunks); /* nc is bounded by the header length */
    if (!f->chunks)
        return FAIL(f, SSB4D_ENOMEM, "out of memory (%zu chunks)", nc);
    f->info.n_chunks = nc;

    /* rule 10: coverage */
    size_t next = 0, i = 0, blocks = 0;
    for (const cJSON *c = chunks->child; c; c = c->next, i++) {
        uint64_t first, scans;
        if (!cJSON_IsObject(c) || !qem_json_uint(get(c, "first"), 0, QEM_MAX_JSON_INT, &first) ||
            !qem_json_uint(get(c, "scans"), 1, QEM_MAX_JSON_INT, &scans))
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu needs integer first and scans >= 1", i);
        if (first != next)
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu starts at scan %llu, expected %zu (chunks must be consecutive)",
                        i, (unsigned long long)first, next);
        if (scans > N - next)
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu runs past the %zu scans of the shape", i, N);
        qem_chunk *ch = &f->chunks[i];
        ch->first = first;
        ch->scans = scans;
        ch->nblocks = (scans + QEM_INTERVAL - 1) / QEM_INTERVAL;
        ch->block0 = blocks;
        blocks += ch->nblocks;
        next += scans;
    }
    if (next != N)
        return FAIL(f, SSB4D_EFORMAT, "chunks cover %zu scans, the shape has %zu", next, N);
    f->info.n_blocks = blocks;

    /* rule 11: per-chunk bound, array counts and the 8-aligned running cursor */
    const uint64_t span_limit = (uint64_t)1 << 60;
    uint64_t cur = 0;
    i = 0;
    for (const cJSON *c = chunks->child; c; c = c->next, i++) {
        qem_chunk *ch = &f->chunks[i];
        uint64_t bp, bf, payload_bound;
        uint64_t per = 2 * (ch->scans < QEM_INTERVAL ? ch->scans : QEM_INTERVAL) + 4;
        if (!mul_ok(ch->nblocks, P, &bp) || !mul_ok(bp, per, &payload_bound) || payload_bound >= ((uint64_t)1 << 32))
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu is too large for 32-bit stream offsets (blocks x pixels)", i);
        if (!mul_ok(ch->nblocks, f->F, &bf))
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu spatial index is too large", i);
        const cJSON *arrays = get(c, "arrays");
        if (!cJSON_IsArray(arrays) || cJSON_GetArraySize(arrays) != 6)
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu must have exactly 6 arrays", i);
        int a = 0;
        for (const cJSON *d = arrays->child; d; d = d->next, a++) {
            uint64_t off, cnt;
            if (!cJSON_IsObject(d) || !qem_json_uint(get(d, "offset"), 0, QEM_MAX_JSON_INT, &off) ||
                !qem_json_uint(get(d, "count"), 0, QEM_MAX_JSON_INT, &cnt))
                return FAIL(f, SSB4D_EFORMAT, "chunk %zu array %d needs integer offset and count", i, a);
            cur = (cur + 7) & ~(uint64_t)7;
            if (off != cur)
                return FAIL(f, SSB4D_EFORMAT,
                            "chunk %zu array %d offset %llu is not the 8-aligned running offset %llu (invalid array "
                            "span); the file is damaged — re-export it",
                            i, a, (unsigned long long)off, (unsigned long long)cur);
            uint64_t want = a == 1 ? bp + 1 : a == 2 ? bp : a == 4 ? bf + 1 : a == 5 ? bf : cnt;
            if (cnt != want)
                return FAIL(f, SSB4D_EFORMAT,
                            "chunk %zu array %d count %llu, expected %llu for %zu blocks (invalid array span)", i, a,
                            (unsigned long long)cnt, (unsigned long long)want, ch->nblocks);
            if (cnt > span_limit / 8 || cur + cnt * qem_array_item[a] > span_limit)
                return FAIL(f, SSB4D_EFORMAT, "chunk %zu array %d is impossibly large (invalid array span)", i, a);
            ch->off[a] = off;
            ch->count[a] = cnt;
            cur += cnt * qem_array_item[a];
        }
    }

    /* rule 12 */
    uint64_t bytes;
    if (!qem_json_uint(get(f->header, "bytes"), 1, QEM_MAX_JSON_INT, &bytes))
        return FAIL(f, SSB4D_EFORMAT, "header bytes must be an integer > 0");
    if (cur != bytes)
        return FAIL(f, SSB4D_EFORMAT, "header says the body has %llu bytes but its arrays end at byte %llu (length "
                    "disagrees); the file is damaged — re-export it",
                    (unsigned long long)bytes, (unsigned long long)cur);
    if (bytes != f->size - QEM_ENVELOPE - L)
        return FAIL(f, SSB4D_EFORMAT,
                    "file size %zu disagrees with the header (56 + %llu + %llu = %llu bytes expected); the file is "
                    "truncated or damaged — recopy it",
                    f->size, (unsigned long long)L, (unsigned long long)bytes,
                    (unsigned long long)(QEM_ENVELOPE + L + bytes));
    f->info.body_bytes = (size_t)bytes;

    /* rule 13 */
    const cJSON *sums = get(f->header, "sha256");
    size_t nsum = 0, want = (size_t)((bytes + QEM_HASH_BLOCK - 1) / QEM_HASH_BLOCK);
    if (cJSON_IsArray(sums))
        for (const cJSON *s = sums->child; s; s = s->next, nsum++)
            if (!cJSON_IsString(s))
                return FAIL(f, SSB4D_EFORMAT, "sha256[%zu] is not a string", nsum);
    if (!cJSON_IsArray(sums) || nsum != want)
        return FAIL(f, SSB4D_EFORMAT, "sha256 must be a list of %zu checksum strings (one per 64 MiB of body)", want);
    return SSB4D_OK;
}

/* ---- rule 14: body checksums, one 64 MiB block per task ---- */

static ssb4d_status check_body(qem_file *f, int threads, ssb4d_err *err)
{
    const cJSON *sums = get(f->header, "sha256");
    size_t nb = (f->info.body_bytes + QEM_HASH_BLOCK - 1) / QEM_HASH_BLOCK;
    const char **want = malloc(nb * sizeof *want);
    if (!want)
        return FAIL(f, SSB4D_ENOMEM, "out of memory");
    size_t i = 0;
    for (const cJSON *s = sums->child; s; s = s->next)
        want[i++] = s->valuestring;
    size_t bad = SIZE_MAX;
    int nt = ssb_threads_resolve(threads);
    if ((size_t)nt > nb)
        nt = nb ? (int)nb : 1;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) reduction(min : bad)
    for (size_t b = 0; b < nb; b++) {
        size_t len = f->info.body_bytes - b * QEM_HASH_BLOCK;
        if (len > QEM_HASH_BLOCK)
            len = QEM_HASH_BLOCK;
        char got[65];
        ssb_sha256_hex(f->body + b * QEM_HASH_BLOCK, len, got);
        if (strcmp(got, want[b]) != 0 && b < bad)
            bad = b;
    }
    free(want);
    if (bad != SIZE_MAX)
        return FAIL(f, SSB4D_EFORMAT, "body checksum mismatch in block %zu (bytes %zu..); the file is damaged — "
                    "recopy it",
                    bad, bad * QEM_HASH_BLOCK);
    return SSB4D_OK;
}

/* ---- rule 15: stream offsets of every chunk ---- */

static ssb4d_status check_offsets(const qem_file *f, ssb4d_err *err)
{
    const size_t P = f->info.n_pix, DC = f->info.shape[3];
    for (size_t i = 0; i < f->info.n_chunks; i++) {
        const qem_chunk *ch = &f->chunks[i];
        const uint8_t *off = f->body + ch->off[1];
        size_t ns = ch->count[2];
        uint32_t prev = qem_ld32(off);
        if (prev != 0)
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu: first stream offset is %u, not 0 (invalid count offsets); the "
                        "file is damaged — re-export it",
                        i, prev);
        for (size_t s = 1; s <= ns; s++) {
            uint32_t o = qem_ld32(off + 4 * s);
            if (o < prev) {
                size_t b = (s - 1) / P, k = (s - 1) % P;
                return FAIL(f, SSB4D_EFORMAT,
                            "chunk %zu block %zu pixel (%zu, %zu): stream offsets decrease (%u after %u; invalid "
                            "count offsets); the file is damaged — re-export it",
                            i, ch->block0 + b, k / DC, k % DC, o, prev);
            }
            prev = o;
        }
        if (prev != ch->count[0])
            return FAIL(f, SSB4D_EFORMAT,
                        "chunk %zu: last stream offset %u is not the payload length %llu (invalid count offsets)", i,
                        prev, (unsigned long long)ch->count[0]);
    }
    return SSB4D_OK;
}

/* ---- open / close ---- */

static ssb4d_status open_image(qem_file *f, int verify_body, int threads, ssb4d_err *err)
{
    uint64_t L = 0;
    ssb4d_status st = check_envelope(f, &L, err);
    if (st)
        return st;
    f->info.file_bytes = f->size;
    f->info.header_bytes = (size_t)L;
    f->body = f->data + QEM_ENVELOPE + L;

    char why[256];
    f->header = qem_json_parse_strict((const char *)f->data + QEM_ENVELOPE, (size_t)L, why, sizeof why);
    if (!f->header)
        return FAIL(f, SSB4D_EFORMAT, "header: %s; the file is damaged or not a .qem", why);
    if (!cJSON_IsObject(f->header))
        return FAIL(f, SSB4D_EFORMAT, "header is not a JSON object; not a .qem file");
    const char *valid_hex = NULL;
    if ((st = check_fields(f, &valid_hex, err)))
        return st;
    f->F = qem_spatial_fields(f->info.shape[2], f->info.shape[3]);
    if ((st = check_layout(f, L, err)))
        return st;
    if (verify_body && (st = check_body(f, threads, err)))
        return st;

    /* The layout proved that the body holds >= 4 bytes per pixel, so P-sized tables are bounded
     * by the file size from here on. */
    const size_t P = f->info.n_pix;
    f->valid = malloc(P);
    f->field8 = malloc(P * sizeof *f->field8);
    f->field32 = malloc(P * sizeof *f->field32);
    if (!f->valid || !f->field8 || !f->field32)
        return FAIL(f, SSB4D_ENOMEM, "out of memory (%zu detector pixels)", P);
    for (size_t k = 0; k < P; k++) {
        int byte = hexval((unsigned char)valid_hex[2 * (k >> 3)]) << 4 | hexval((unsigned char)valid_hex[2 * (k >> 3) + 1]);
        f->valid[k] = (uint8_t)((byte >> (7 - (k & 7))) & 1);
    }
    qem_spatial_field_map(f->info.shape[2], f->info.shape[3], f->field8, f->field32);
    for (size_t i = 0; i < f->info.n_chunks; i++)
        f->info.payload_bytes += (size_t)f->chunks[i].count[0];
    if ((st = check_offsets(f, err)))
        return st;
    qem_calibration_from_metadata(get(f->header, "scientific_metadata"), &f->cal);
    return SSB4D_OK;
}

static qem_file *new_handle(const char *name)
{
    qem_file *f = calloc(1, sizeof *f);
    if (f && !(f->name = strdup(name))) {
        free(f);
        f = NULL;
    }
    return f;
}

void qem_close(qem_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->size);
    cJSON_Delete(f->header);
    free(f->chunks);
    free(f->valid);
    free(f->field8);
    free(f->field32);
    free(f->name);
    free(f);
}

ssb4d_status qem_open_memory(const uint8_t *data, size_t size, int verify_body, qem_file **out, ssb4d_err *err)
{
    *out = NULL;
    qem_file *f = new_handle("<memory>");
    if (!f)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    f->data = data;
    f->size = data ? size : 0;
    ssb4d_status st = open_image(f, verify_body, 1, err);
    if (st) {
        qem_close(f);
        return st;
    }
    *out = f;
    return SSB4D_OK;
}

ssb4d_status qem_open(const char *path, int verify_body, int threads, qem_file **out, ssb4d_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ssb_fail(err, SSB4D_EIO, "cannot open %.200s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return ssb_fail(err, SSB4D_EIO, "%.200s: not a regular file", path);
    }
    qem_file *f = new_handle(path);
    if (!f) {
        close(fd);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    }
    f->size = (size_t)sb.st_size;
    if (f->size >= QEM_ENVELOPE) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            ssb4d_status st = ssb_fail(err, SSB4D_EIO, "cannot map %.200s: %s", path, strerror(errno));
            close(fd);
            qem_close(f);
            return st;
        }
        f->map = m;
        f->data = m;
    } else {
        f->data = (const uint8_t *)""; /* too short: check_envelope refuses before reading */
    }
    close(fd);
    ssb4d_status st = open_image(f, verify_body, threads, err);
    if (st) {
        qem_close(f);
        return st;
    }
    *out = f;
    return SSB4D_OK;
}

/* ---- accessors ---- */

const qem_info *qem_get_info(const qem_file *f) { return &f->info; }
const uint8_t *qem_valid_mask(const qem_file *f) { return f->valid; }
const cJSON *qem_header_json(const qem_file *f) { return f->header; }
void qem_effective_calibration(const qem_file *f, qem_calibration *cal) { *cal = f->cal; }
const char *qem_file_name(const qem_file *f) { return f->name; }

/* Chunk holding global block b (b < n_blocks). */
static const qem_chunk *chunk_of_block(const qem_file *f, size_t b)
{
    size_t lo = 0, hi = f->info.n_chunks;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->chunks[mid].block0 <= b)
            lo = mid;
        else
            hi = mid;
    }
    return &f->chunks[lo];
}

/* Global block holding scan t (t < N). */
static size_t block_of_scan(const qem_file *f, size_t t)
{
    size_t lo = 0, hi = f->info.n_chunks;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->chunks[mid].first <= t)
            lo = mid;
        else
            hi = mid;
    }
    return f->chunks[lo].block0 + (t - f->chunks[lo].first) / QEM_INTERVAL;
}

void qem_block_range(const qem_file *f, size_t b, size_t *t0, size_t *n)
{
    if (b >= f->info.n_blocks) {
        *t0 = f->info.n_scans;
        *n = 0;
        return;
    }
    const qem_chunk *ch = chunk_of_block(f, b);
    size_t lb = b - ch->block0;
    *t0 = ch->first + lb * QEM_INTERVAL;
    size_t left = ch->scans - lb * QEM_INTERVAL;
    *n = left < QEM_INTERVAL ? left : QEM_INTERVAL;
}

void qem_chunk_get(const qem_file *f, size_t c, qem_chunk_view *v)
{
    const qem_chunk *ch = &f->chunks[c];
    v->block0 = ch->block0, v->nblocks = ch->nblocks, v->first = ch->first, v->scans = ch->scans;
    v->payload = f->body + ch->off[0];
    v->payload_bytes = (size_t)ch->count[0];
    v->offsets = f->body + ch->off[1];
    v->selectors = f->body + ch->off[2];
}

/* ---- decoding ---- */

/* What a selector byte means, for messages. */
static const char *selector_kind(unsigned sel, char buf[32])
{
    if (sel < QEM_MODELS)
        snprintf(buf, 32, "rANS model %u", sel);
    else
        snprintf(buf, 32, "%s", sel == QEM_SEL_SPARSE    ? "sparse"
                                : sel == QEM_SEL_ZERO    ? "zero"
                                : sel == QEM_SEL_LITERAL ? "literal"
                                : sel == QEM_SEL_CONST   ? "constant"
                                                         : "invalid");
    return buf;
}

/* Decodes the stream of pixel k in global block b (n samples) into out. On error fills err. */
static ssb4d_status decode_stream(const qem_file *f, const qem_chunk *ch, size_t b, size_t k, size_t n,
                                  uint16_t *out, ssb4d_err *err)
{
    size_t s = (b - ch->block0) * f->info.n_pix + k;
    const uint8_t *off = f->body + ch->off[1] + 4 * s;
    uint32_t o0 = qem_ld32(off), o1 = qem_ld32(off + 4); /* checked at open: o0 <= o1 <= count[0] */
    uint8_t sel = f->body[ch->off[2] + s];
    qem_stream_status r = qem_stream_decode(sel, f->body + ch->off[0] + o0, o1 - o0, n, f->maxval, out);
    if (r == QEM_STREAM_OK)
        return SSB4D_OK;
    size_t t0 = ch->first + (b - ch->block0) * QEM_INTERVAL;
    char kind[32];
    return fail_file(f, SSB4D_EFORMAT, err,
                     "chunk %zu block %zu (scans %zu-%zu) pixel (%zu, %zu): invalid count stream (selector %u = %s, "
                     "%u bytes): %s; the file is damaged — re-export it",
                     (size_t)(ch - f->chunks), b, t0, t0 + n - 1, k / f->info.shape[3], k % f->info.shape[3], sel,
                     selector_kind(sel, kind), o1 - o0, qem_stream_strerror(r));
}

ssb4d_status qem_decode_block(const qem_file *f, size_t b, const int32_t *pix, size_t npix, uint16_t *out,
                              ssb4d_err *err)
{
    if (b >= f->info.n_blocks)
        return FAIL(f, SSB4D_EINVAL, "block %zu does not exist (%zu blocks)", b, f->info.n_blocks);
    const qem_chunk *ch = chunk_of_block(f, b);
    size_t t0, n;
    qem_block_range(f, b, &t0, &n);
    for (size_t i = 0; i < npix; i++) {
        if (pix[i] < 0 || (size_t)pix[i] >= f->info.n_pix)
            return FAIL(f, SSB4D_EINVAL, "detector pixel %d does not exist (%zu pixels)", (int)pix[i], f->info.n_pix);
        ssb4d_status st = decode_stream(f, ch, b, (size_t)pix[i], n, out + i * n, err);
        if (st)
            return st;
    }
    return SSB4D_OK;
}

/* Does block [t0, t0+n) hold a scan inside rows [r0,r1) x cols [c0,c1)? */
static int block_touches(size_t t0, size_t n, size_t cols, const size_t lo[4], const size_t hi[4])
{
    size_t ra = t0 / cols, rb = (t0 + n - 1) / cols;
    size_t r = ra > lo[0] ? ra : lo[0], rend = rb < hi[0] - 1 ? rb : hi[0] - 1;
    for (; r <= rend; r++) {
        size_t cs = r == ra ? t0 % cols : 0, ce = r == rb ? (t0 + n - 1) % cols : cols - 1;
        if (cs < hi[1] && ce >= lo[1])
            return 1;
    }
    return 0;
}

#define QEM_REGION_TILE 32 /* detector pixels decoded together by qem_read_region (32 KiB of stack) */

/* Keeps the error of the smallest key (block-major stream index) so the report is deterministic. */
typedef struct {
    size_t key;
    ssb4d_err err;
} first_error;

static void keep_error(first_error *fe, size_t key, const ssb4d_err *e)
{
#pragma omp critical(qem_first_error)
    {
        if (key < fe->key) {
            fe->key = key;
            fe->err = *e;
        }
    }
}

ssb4d_status qem_read_region(const qem_file *f, const size_t lo[4], const size_t hi[4], uint16_t *out, int threads,
                             ssb4d_err *err)
{
    for (int a = 0; a < 4; a++)
        if (lo[a] > hi[a] || hi[a] > f->info.shape[a])
            return FAIL(f, SSB4D_EINVAL, "region [%zu, %zu) on axis %d is outside 0..%zu", lo[a], hi[a], a,
                        f->info.shape[a]);
    const size_t cols = f->info.shape[1], DETC = f->info.shape[3], P = f->info.n_pix;
    const size_t C = hi[1] - lo[1], DR = hi[2] - lo[2], DC = hi[3] - lo[3];
    if (hi[0] == lo[0] || C == 0 || DR == 0 || DC == 0)
        return SSB4D_OK;
    size_t bfirst = block_of_scan(f, lo[0] * cols + lo[1]);
    size_t blast = block_of_scan(f, (hi[0] - 1) * cols + hi[1] - 1);
    size_t nb = 0;
    size_t *blocks = malloc((blast - bfirst + 1) * sizeof *blocks);
    if (!blocks)
        return FAIL(f, SSB4D_ENOMEM, "out of memory");
    for (size_t b = bfirst; b <= blast; b++) {
        size_t t0, n;
        qem_block_range(f, b, &t0, &n);
        if (block_touches(t0, n, cols, lo, hi))
            blocks[nb++] = b;
    }
    first_error fe = {.key = SIZE_MAX};
    int nt = ssb_threads_resolve(threads);
    /* One task = one block x one detector row: tasks write disjoint parts of out. */
    size_t ntask = nb * DR;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (size_t task = 0; task < ntask; task++) {
        size_t b = blocks[task / DR], dr = task % DR;
        size_t t0, n;
        qem_block_range(f, b, &t0, &n);
        const qem_chunk *ch = chunk_of_block(f, b);
        /* dst[j]: output scan index of sample j, or SIZE_MAX outside the rectangle */
        size_t dst[QEM_INTERVAL];
        size_t r = t0 / cols, c = t0 % cols;
        for (size_t j = 0; j < n; j++) {
            dst[j] = r >= lo[0] && r < hi[0] && c >= lo[1] && c < hi[1] ? (r - lo[0]) * C + (c - lo[1]) : SIZE_MAX;
            if (++c == cols) {
                c = 0;
                r++;
            }
        }
        /* Decode a few pixels into a tile, then write it scan by scan: contiguous runs in out
         * instead of one scattered store per sample. */
        uint16_t tile[QEM_REGION_TILE][QEM_INTERVAL];
        for (size_t dc0 = 0; dc0 < DC; dc0 += QEM_REGION_TILE) {
            size_t g = DC - dc0 < QEM_REGION_TILE ? DC - dc0 : QEM_REGION_TILE, ok = 1;
            for (size_t i = 0; i < g && ok; i++) {
                size_t k = (lo[2] + dr) * DETC + lo[3] + dc0 + i;
                ssb4d_err e;
                if (decode_stream(f, ch, b, k, n, tile[i], &e) != SSB4D_OK) {
                    keep_error(&fe, b * P + k, &e);
                    ok = 0;
                }
            }
            if (!ok)
                break;
            for (size_t j = 0; j < n; j++) {
                if (dst[j] == SIZE_MAX)
                    continue;
                uint16_t *o = out + (dst[j] * DR + dr) * DC + dc0;
                for (size_t i = 0; i < g; i++)
                    o[i] = tile[i][j];
            }
        }
    }
    free(blocks);
    if (fe.key != SIZE_MAX) {
        if (err)
            *err = fe.err;
        return fe.err.code;
    }
    return SSB4D_OK;
}

ssb4d_status qem_pixel_totals(const qem_file *f, uint64_t *totals, int threads, ssb4d_err *err)
{
    const size_t P = f->info.n_pix;
    first_error fe = {.key = SIZE_MAX};
    int nt = ssb_threads_resolve(threads);
    /* One pixel per task, blocks in order: each total is one thread's exact integer sum. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16)
    for (size_t k = 0; k < P; k++) {
        uint64_t sum = 0;
        uint16_t v[QEM_INTERVAL];
        for (size_t i = 0; i < f->info.n_chunks; i++) {
            const qem_chunk *ch = &f->chunks[i];
            for (size_t lb = 0; lb < ch->nblocks; lb++) {
                size_t left = ch->scans - lb * QEM_INTERVAL, n = left < QEM_INTERVAL ? left : QEM_INTERVAL;
                ssb4d_err e;
                if (decode_stream(f, ch, ch->block0 + lb, k, n, v, &e) != SSB4D_OK) {
                    keep_error(&fe, (ch->block0 + lb) * P + k, &e);
                    goto next_pixel;
                }
                for (size_t j = 0; j < n; j++)
                    sum += v[j];
            }
        }
    next_pixel:
        totals[k] = sum;
    }
    if (fe.key != SIZE_MAX) {
        if (err)
            *err = fe.err;
        return fe.err.code;
    }
    return SSB4D_OK;
}

/* §8 checks of the spatial streams of global block b, against the decoded counts. acc holds
 * F * QEM_INTERVAL sums (scratch). */
static ssb4d_status check_block_index(const qem_file *f, size_t b, uint32_t *acc, ssb4d_err *err)
{
    const size_t P = f->info.n_pix, F = f->F;
    const qem_chunk *ch = chunk_of_block(f, b);
    size_t ci = (size_t)(ch - f->chunks), lb = b - ch->block0, t0, n;
    qem_block_range(f, b, &t0, &n);
    memset(acc, 0, F * n * sizeof *acc);
    uint16_t v[QEM_INTERVAL];
    for (size_t k = 0; k < P; k++) {
        if (!f->valid[k])
            continue; /* invalid pixels are not part of the index */
        ssb4d_status st = decode_stream(f, ch, b, k, n, v, err);
        if (st)
            return st;
        uint32_t *a8 = acc + (size_t)f->field8[k] * n, *a32 = acc + (size_t)f->field32[k] * n;
        for (size_t j = 0; j < n; j++) {
            a8[j] += v[j];
            a32[j] += v[j];
        }
    }
    const uint8_t *wstart = f->body + ch->off[4], *width = f->body + ch->off[5];
    const uint8_t *words = f->body + ch->off[3];
    uint32_t packed[QEM_INTERVAL], vals[QEM_INTERVAL];
    for (size_t fi = 0; fi < F; fi++) {
        size_t q = lb * F + fi;
        unsigned w = width[q];
        uint64_t ws = qem_ld64(wstart + 8 * q), we = qem_ld64(wstart + 8 * (q + 1));
        if (w > 32)
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu block %zu field %zu: spatial index width %u > 32", ci, b, fi, w);
        if ((q == 0 && ws != 0) || we < ws || we - ws != qem_spatial_words(n, w) || we > ch->count[3] ||
            (q + 1 == ch->count[5] && we != ch->count[3]))
            return FAIL(f, SSB4D_EFORMAT,
                        "chunk %zu block %zu field %zu: spatial index word offsets do not match the widths; the file "
                        "is damaged — re-export it",
                        ci, b, fi);
        size_t nw = (size_t)(we - ws);
        memcpy(packed, words + 4 * ws, nw * 4); /* aligned copy: the body start is not 4-aligned */
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        for (size_t i = 0; i < nw; i++)
            packed[i] = __builtin_bswap32(packed[i]);
#endif
        if (nw && (n * w) % 32 && packed[nw - 1] >> ((n * w) % 32))
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu block %zu field %zu: spatial index has stray high bits", ci, b, fi);
        qem_spatial_unpack(packed, n, w, vals);
        uint32_t mx = 0;
        const uint32_t *want = acc + fi * n;
        for (size_t j = 0; j < n; j++) {
            if (vals[j] != want[j])
                return FAIL(f, SSB4D_EFORMAT,
                            "chunk %zu block %zu field %zu scan %zu: spatial index says %u, the decoded counts sum to "
                            "%u; the file is damaged — re-export it",
                            ci, b, fi, t0 + j, vals[j], want[j]);
            if (want[j] > mx)
                mx = want[j];
        }
        if (qem_bit_width(mx) != w)
            return FAIL(f, SSB4D_EFORMAT, "chunk %zu block %zu field %zu: spatial index width %u, expected %u", ci, b,
                        fi, w, qem_bit_width(mx));
    }
    return SSB4D_OK;
}

ssb4d_status qem_check_spatial_index(const qem_file *f, int threads, ssb4d_err *err)
{
    const size_t P = f->info.n_pix, F = f->F;
    first_error fe = {.key = SIZE_MAX};
    int nt = ssb_threads_resolve(threads);
    if ((size_t)nt > f->info.n_blocks)
        nt = (int)f->info.n_blocks;
#pragma omp parallel num_threads(nt)
    {
        uint32_t *acc = malloc(F * QEM_INTERVAL * sizeof *acc); /* F <= 2P: bounded by the file */
        ssb4d_err e;
#pragma omp for schedule(dynamic, 1)
        for (size_t b = 0; b < f->info.n_blocks; b++) {
            if (!acc) {
                fail_file(f, SSB4D_ENOMEM, &e, "out of memory (spatial index check)");
                keep_error(&fe, 0, &e);
                continue;
            }
            if (check_block_index(f, b, acc, &e) != SSB4D_OK)
                keep_error(&fe, b * P, &e);
        }
        free(acc);
    }
    if (fe.key != SIZE_MAX) {
        if (err)
            *err = fe.err;
        return fe.err.code;
    }
    return SSB4D_OK;
}
