/* dm.c — DM3 / DM4 tag tree walker, image list and dataset choice (see dm.h). Written for
 * hostile input: every count and length is compared with the bytes left in the file before it
 * is used, size arithmetic refuses to wrap, group nesting and type nesting are bounded, and the
 * walker only ever allocates fixed scratch space (names, type words, short values), never an
 * amount a header asks for. Each entry consumes at least 9 bytes of the file, so the walk ends. */
#include "formats/dm.h"

#include "common/err.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DM_MAX_INFO 4096     /* type words of one data tag (a struct of ~2000 fields) */
#define DM_MAX_TYPE_DEPTH 16 /* arrays of structs of arrays ... */
#define DM_NAME_KEPT 256     /* bytes of one tag name kept for paths and messages */

typedef struct {
    const dm_input *in;
    dm_header *h;
    dm_visit_fn visit;
    void *ctx;
    ssb4d_err *err;
    unsigned width;                        /* bytes of counts and type words: 4 (DM3), 8 (DM4) */
    char path[DM_PATH_MAX + 1];
    size_t path_len;
    char name[DM_NAME_KEPT * 2 + 1];       /* the current entry's name as UTF-8 */
    uint8_t raw[DM_TEXT_MAX * 2];          /* a value read for the visitor (names too) */
    char text[DM_TEXT_MAX * 3 + 1];
    uint64_t info[DM_MAX_INFO];
} walker;

/* ---------------------------------------------------------------------------------------- */
/* Reading                                                                                    */

static uint64_t be(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static uint64_t left_at(const walker *w, uint64_t off)
{
    return off < w->in->size ? w->in->size - off : 0;
}

/* n bytes at off; `what` names them when the file is too short. */
static ssb4d_status get(walker *w, uint64_t off, void *buf, size_t n, const char *what)
{
    if (n > left_at(w, off))
        return ssb_fail(w->err, SSB4D_EFORMAT, "truncated: %s at byte %" PRIu64 " needs %zu bytes, "
                        "the file ends at byte %" PRIu64, what, off, n, w->in->size);
    if (n && w->in->read(w->in->ctx, off, buf, n) != 0)
        return ssb_fail(w->err, SSB4D_EIO, "read error at byte %" PRIu64, off);
    return SSB4D_OK;
}

/* A big-endian count or type word (4 bytes in DM3, 8 in DM4). */
static ssb4d_status get_word(walker *w, uint64_t off, uint64_t *v, const char *what)
{
    uint8_t b[8];
    ssb4d_status st = get(w, off, b, w->width, what);
    if (!st)
        *v = be(b, w->width);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Types                                                                                      */

static uint64_t simple_size(uint64_t t)
{
    switch (t) {
    case DM_BOOL: case DM_CHAR: case DM_OCTET: return 1;
    case DM_SHORT: case DM_USHORT: return 2;
    case DM_LONG: case DM_ULONG: case DM_FLOAT: return 4;
    case DM_DOUBLE: case DM_LLONG: case DM_ULLONG: return 8;
    default: return 0;
    }
}

static const char *type_name(uint64_t t)
{
    switch (t) {
    case DM_SHORT: return "int16";
    case DM_LONG: return "int32";
    case DM_USHORT: return "uint16";
    case DM_ULONG: return "uint32";
    case DM_FLOAT: return "float32";
    case DM_DOUBLE: return "float64";
    case DM_BOOL: return "bool";
    case DM_CHAR: return "int8";
    case DM_OCTET: return "uint8";
    case DM_LLONG: return "int64";
    case DM_ULLONG: return "uint64";
    case DM_STRUCT: return "struct";
    case DM_STRING: return "string";
    case DM_ARRAY: return "array";
    default: return "unknown";
    }
}

/* The type described from info[*i] on: its size in bytes. Fails (returning a reason) on
 * unknown codes, a description that ends early, nesting beyond DM_MAX_TYPE_DEPTH and sizes
 * beyond 2^64. */
static const char *parse_type(const uint64_t *info, size_t n, size_t *i, int depth, uint64_t *bytes)
{
    if (depth > DM_MAX_TYPE_DEPTH)
        return "types nested too deeply";
    if (*i >= n)
        return "the type description ends early";
    uint64_t t = info[(*i)++];
    if (simple_size(t)) {
        *bytes = simple_size(t);
        return NULL;
    }
    switch (t) {
    case DM_STRING:
        if (*i >= n)
            return "the string type has no length";
        *bytes = info[(*i)++];
        return NULL;
    case DM_STRUCT: {
        if (n - *i < 2)
            return "the struct type has no field count";
        (*i)++; /* the struct's name length: names are not stored */
        uint64_t nf = info[(*i)++], sum = 0;
        if (nf > (n - *i) / 2)
            return "the struct type lists more fields than it describes";
        for (uint64_t f = 0; f < nf; f++) {
            (*i)++; /* the field's name length */
            uint64_t fb;
            const char *why = parse_type(info, n, i, depth + 1, &fb);
            if (why)
                return why;
            if (__builtin_add_overflow(sum, fb, &sum))
                return "the struct is larger than 2^64 bytes";
        }
        *bytes = sum;
        return NULL;
    }
    case DM_ARRAY: {
        uint64_t eb;
        const char *why = parse_type(info, n, i, depth + 1, &eb);
        if (why)
            return why;
        if (*i >= n)
            return "the array type has no length";
        if (__builtin_mul_overflow(eb, info[(*i)++], bytes))
            return "the array is larger than 2^64 bytes";
        return NULL;
    }
    default:
        return "unknown type code";
    }
}

/* One simple value of type t at p (byte order of the file). */
static void load_simple(const uint8_t *p, uint64_t t, int little, double *d, int64_t *iv, int *is_int)
{
    unsigned n = (unsigned)simple_size(t);
    uint64_t u = 0;
    for (unsigned k = 0; k < n; k++)
        u |= (uint64_t)p[little ? k : n - 1 - k] << (8 * k);
    *is_int = 1;
    switch (t) {
    case DM_SHORT: *iv = (int16_t)u; break;
    case DM_LONG: *iv = (int32_t)u; break;
    case DM_CHAR: *iv = (int8_t)u; break;
    case DM_LLONG: *iv = (int64_t)u; break;
    case DM_FLOAT: {
        uint32_t b = (uint32_t)u;
        float f;
        memcpy(&f, &b, 4);
        *d = f;
        *is_int = 0;
        return;
    }
    case DM_DOUBLE:
        memcpy(d, &u, 8);
        *is_int = 0;
        return;
    case DM_ULLONG:
        *d = (double)u;
        *is_int = u <= INT64_MAX;
        *iv = (int64_t)u;
        return;
    default: *iv = (int64_t)u; break; /* unsigned types of up to 32 bits, bool */
    }
    *d = (double)*iv;
}

/* ---------------------------------------------------------------------------------------- */
/* Text                                                                                       */

static size_t put_utf8(char *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xc0 | c >> 6);
        o[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    o[0] = (char)(0xe0 | c >> 12);
    o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
    o[2] = (char)(0x80 | (c & 0x3f));
    return 3;
}

/* UTF-16 code units (surrogate pairs are kept only as U+FFFD: DM text is Latin) or bytes
 * (read as Latin-1) to NUL-terminated UTF-8 in out (3 bytes per unit + 1). Control characters
 * become blanks; trailing NULs and blanks are dropped. */
static void to_utf8(const uint8_t *raw, size_t n, int unit, int little, char *out)
{
    size_t o = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t c = unit == 1 ? raw[k]
                   : little ? (uint32_t)raw[2 * k] | (uint32_t)raw[2 * k + 1] << 8
                            : (uint32_t)raw[2 * k] << 8 | raw[2 * k + 1];
        if (c >= 0xd800 && c <= 0xdfff)
            c = 0xfffd;
        else if (c < 0x20 || c == 0x7f)
            c = c ? ' ' : 0;
        if (c)
            o += put_utf8(out + o, c);
        else
            out[o++] = 0; /* a NUL ends the text, but keep going to find the end */
    }
    out[o] = 0;
    size_t len = strlen(out);
    while (len && out[len - 1] == ' ')
        out[--len] = 0;
}

/* The entry's name (bytes, read as Latin-1) as a path component: at most DM_NAME_KEPT bytes
 * read, '/' replaced so paths stay unambiguous. */
static void set_name(walker *w, const uint8_t *raw, size_t n, size_t position)
{
    if (n == 0) {
        snprintf(w->name, sizeof w->name, "%zu", position);
        return;
    }
    to_utf8(raw, n < DM_NAME_KEPT ? n : DM_NAME_KEPT, 1, 1, w->name);
    for (char *p = w->name; *p; p++)
        if (*p == '/')
            *p = '_';
    if (!w->name[0])
        snprintf(w->name, sizeof w->name, "%zu", position);
}

/* Appends the current name to the path (cut with "..." when it does not fit); returns the
 * length to restore afterwards. */
static size_t push(walker *w)
{
    size_t old = w->path_len, k = strlen(w->name), need = (old ? 1 : 0) + k;
    if (old + need <= DM_PATH_MAX) {
        if (old)
            w->path[w->path_len++] = '/';
        memcpy(w->path + w->path_len, w->name, k);
        w->path_len += k;
    } else if (old + 4 <= DM_PATH_MAX && (old < 3 || memcmp(w->path + old - 3, "...", 3) != 0)) {
        memcpy(w->path + w->path_len, "/...", 4);
        w->path_len += 4;
    }
    w->path[w->path_len] = 0;
    return old;
}

static void pop(walker *w, size_t old)
{
    w->path_len = old;
    w->path[old] = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* The tree                                                                                   */

static ssb4d_status walk_group(walker *w, uint64_t *pos, int depth, uint64_t entry_off, uint64_t index);

/* The data tag whose "%%%%" is at *pos; *pos moves past its value. */
static ssb4d_status walk_data(walker *w, uint64_t *pos, int depth, uint64_t entry_off, uint64_t index)
{
    uint8_t delim[4];
    ssb4d_status st = get(w, *pos, delim, 4, "a data tag's \"%%%%\"");
    if (st)
        return st;
    if (memcmp(delim, "%%%%", 4) != 0)
        return ssb_fail(w->err, SSB4D_EFORMAT, "data tag '%s' at byte %" PRIu64 " lacks its \"%%%%%%%%\" "
                        "mark (found %02x %02x %02x %02x at byte %" PRIu64 ")", w->path, entry_off,
                        delim[0], delim[1], delim[2], delim[3], *pos);
    uint64_t ninfo;
    if ((st = get_word(w, *pos + 4, &ninfo, "a data tag's type length")))
        return st;
    *pos += 4 + w->width;
    if (ninfo == 0 || ninfo > DM_MAX_INFO || ninfo > left_at(w, *pos) / w->width)
        return ssb_fail(w->err, SSB4D_EFORMAT, "data tag '%s' at byte %" PRIu64 " claims %" PRIu64
                        " type words (1 to %d fit, the file has %" PRIu64 " bytes left)", w->path,
                        entry_off, ninfo, DM_MAX_INFO, left_at(w, *pos));
    uint8_t *b = w->raw; /* the words are read 256 at a time (2048 bytes at most) */
    for (uint64_t k = 0; k < ninfo;) {
        size_t chunk = (size_t)(ninfo - k < 256 ? ninfo - k : 256);
        if ((st = get(w, *pos + k * w->width, b, chunk * w->width, "a data tag's type words")))
            return st;
        for (size_t j = 0; j < chunk; j++)
            w->info[k + j] = be(b + j * w->width, w->width);
        k += chunk;
    }
    *pos += ninfo * w->width;
    size_t i = 0;
    uint64_t bytes = 0;
    const char *why = parse_type(w->info, (size_t)ninfo, &i, 0, &bytes);
    if (!why && i != ninfo)
        why = "type words are left over after the type";
    if (why)
        return ssb_fail(w->err, SSB4D_EFORMAT, "data tag '%s' at byte %" PRIu64 " has a bad type "
                        "description: %s (first word %" PRIu64 ", %" PRIu64 " words)", w->path,
                        entry_off, why, w->info[0], ninfo);
    if (bytes > left_at(w, *pos))
        return ssb_fail(w->err, SSB4D_EFORMAT, "data tag '%s' at byte %" PRIu64 " claims %" PRIu64
                        " bytes of %s, the file has %" PRIu64 " bytes left", w->path, entry_off,
                        bytes, type_name(w->info[0]), left_at(w, *pos));

    dm_tag t = {.path = w->path, .name = w->name, .depth = depth, .index = index, .offset = entry_off,
                .type = (int)w->info[0], .data_offset = *pos, .data_bytes = bytes, .count = 1};
    int little = w->h->little_endian;
    uint64_t et = w->info[0];
    if (simple_size(et)) {
        t.elem_type = (int)et;
        t.elem_bytes = bytes;
        uint8_t v[8];
        if ((st = get(w, *pos, v, (size_t)bytes, "a value")))
            return st;
        load_simple(v, et, little, &t.number, &t.integer, &t.is_integer);
        t.has_number = 1;
        t.n_fields = 1;
        t.fields[0] = t.number;
    } else if (et == DM_STRING) {
        t.count = bytes;
        size_t n = bytes < DM_TEXT_MAX ? (size_t)bytes : DM_TEXT_MAX;
        if ((st = get(w, *pos, w->raw, n, "a string")))
            return st;
        to_utf8(w->raw, n, 1, little, w->text);
        t.text = w->text;
    } else if (et == DM_STRUCT) {
        /* fields: [15, name length, F, (name length, type) x F] */
        t.count = w->info[2];
        int all_simple = t.count <= DM_MAX_FIELDS && ninfo == 3 + 2 * t.count;
        for (uint64_t f = 0; all_simple && f < t.count; f++)
            all_simple = simple_size(w->info[4 + 2 * f]) != 0;
        if (all_simple && bytes <= sizeof w->raw) {
            if ((st = get(w, *pos, w->raw, (size_t)bytes, "a struct")))
                return st;
            size_t off = 0;
            for (uint64_t f = 0; f < t.count; f++) {
                uint64_t ft = w->info[4 + 2 * f];
                int64_t iv;
                int is_int;
                load_simple(w->raw + off, ft, little, &t.fields[f], &iv, &is_int);
                off += simple_size(ft);
            }
            t.n_fields = (size_t)t.count;
        }
    } else { /* DM_ARRAY: [20, element type ..., count] */
        t.count = w->info[ninfo - 1];
        t.elem_type = (int)w->info[1];
        size_t j = 1;
        parse_type(w->info, (size_t)ninfo - 1, &j, 0, &t.elem_bytes); /* checked above */
        uint64_t e = w->info[1];
        size_t eb = (size_t)simple_size(e);
        /* short arrays: numbers for the visitor; 1- and 2-byte ones are also text */
        if (eb && ninfo == 3 && (t.count <= DM_MAX_FIELDS || (eb <= 2 && t.count <= DM_TEXT_MAX))) {
            size_t n = (size_t)t.count;
            if ((st = get(w, *pos, w->raw, n * eb, "an array")))
                return st;
            if (n <= DM_MAX_FIELDS) {
                for (size_t k = 0; k < n; k++) {
                    int64_t iv;
                    int is_int;
                    load_simple(w->raw + k * eb, e, little, &t.fields[k], &iv, &is_int);
                }
                t.n_fields = n;
            }
            if (e == DM_USHORT || e == DM_CHAR || e == DM_OCTET) {
                to_utf8(w->raw, n, (int)eb, little, w->text);
                t.text = w->text;
            }
        }
    }
    *pos += bytes;
    w->visit(w->ctx, &t);
    return SSB4D_OK;
}

/* The entries of the group whose header (sorted, open, count) is at *pos. */
static ssb4d_status walk_group(walker *w, uint64_t *pos, int depth, uint64_t entry_off, uint64_t index)
{
    if (depth > DM_MAX_DEPTH)
        return ssb_fail(w->err, SSB4D_EFORMAT, "tag group '%s' at byte %" PRIu64 " is nested %d deep "
                        "(at most %d): corrupt", w->path, entry_off, depth, DM_MAX_DEPTH);
    uint8_t head[10];
    ssb4d_status st = get(w, *pos, head, 2 + w->width, "a tag group header");
    if (st)
        return st;
    uint64_t n = be(head + 2, w->width), at = *pos;
    *pos += 2 + w->width;
    /* the smallest entry: kind, name length, (DM4 length), an empty group */
    uint64_t min_entry = 3 + (w->width == 8 ? 8 : 0) + 2 + w->width, left = left_at(w, *pos);
    if (n > left / min_entry)
        return ssb_fail(w->err, SSB4D_EFORMAT, "tag group '%s' at byte %" PRIu64 " claims %" PRIu64
                        " entries, the file has %" PRIu64 " bytes left", depth ? w->path : "(root)",
                        at, n, left);
    if (depth > 0) {
        dm_tag g = {.path = w->path, .name = w->name, .depth = depth, .index = index, .is_group = 1,
                    .offset = entry_off, .count = n};
        w->visit(w->ctx, &g);
    }
    for (uint64_t k = 0; k < n; k++) {
        uint64_t e = *pos;
        uint8_t eh[3];
        if ((st = get(w, e, eh, 3, "a tag entry")))
            return st;
        size_t nlen = (size_t)be(eh + 1, 2);
        if (eh[0] != 20 && eh[0] != 21)
            return ssb_fail(w->err, SSB4D_EFORMAT, "entry %" PRIu64 " of tag group '%s' (byte %" PRIu64
                            ") has kind %u at byte %" PRIu64 " (20 = group or 21 = data expected)", k,
                            depth ? w->path : "(root)", at, eh[0], e);
        if (nlen > left_at(w, e + 3))
            return ssb_fail(w->err, SSB4D_EFORMAT, "tag entry at byte %" PRIu64 " claims a %zu-byte "
                            "name, the file has %" PRIu64 " bytes left", e, nlen, left_at(w, e + 3));
        size_t kept = nlen < DM_NAME_KEPT ? nlen : DM_NAME_KEPT;
        if ((st = get(w, e + 3, w->raw, kept, "a tag name")))
            return st;
        set_name(w, w->raw, kept, (size_t)k);
        *pos = e + 3 + nlen;
        if (w->width == 8) {
            /* DM4: the entry's length in bytes; only bounded here (writers agree on what it
               counts less than on the rest, and the walk does not need it) */
            uint64_t len;
            if ((st = get_word(w, *pos, &len, "a DM4 tag length")))
                return st;
            *pos += 8;
            if (len > left_at(w, *pos) + 8)
                return ssb_fail(w->err, SSB4D_EFORMAT, "tag '%s' at byte %" PRIu64 " claims %" PRIu64
                                " bytes, the file has %" PRIu64 " bytes left", w->name, e, len,
                                left_at(w, *pos));
        }
        size_t old = push(w);
        st = eh[0] == 20 ? walk_group(w, pos, depth + 1, e, k) : walk_data(w, pos, depth + 1, e, k);
        pop(w, old);
        if (st)
            return st;
    }
    return SSB4D_OK;
}

ssb4d_status dm_walk(const dm_input *in, dm_header *h, dm_visit_fn visit, void *ctx, ssb4d_err *err)
{
    memset(h, 0, sizeof *h);
    walker *w = calloc(1, sizeof *w);
    if (!w)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory reading the DM tags");
    w->in = in;
    w->h = h;
    w->visit = visit;
    w->ctx = ctx;
    w->err = err;
    uint8_t b[16];
    ssb4d_status st = get(w, 0, b, 4, "the DM header");
    if (!st) {
        uint64_t v = be(b, 4);
        if (v != 3 && v != 4)
            st = ssb_fail(err, SSB4D_EFORMAT, "DM version %" PRIu64 " in the header (3 or 4 expected): "
                          "not a DM3 / DM4 file", v);
        else {
            h->version = (int)v;
            w->width = v == 3 ? 4 : 8;
            h->header_bytes = 4 + w->width + 4;
        }
    }
    if (!st && !(st = get(w, 0, b, (size_t)h->header_bytes, "the DM header"))) {
        h->root_length = be(b + 4, w->width);
        uint64_t order = be(b + 4 + w->width, 4);
        if (order > 1)
            st = ssb_fail(err, SSB4D_EFORMAT, "byte-order flag %" PRIu64 " in the header (0 = big-endian, "
                          "1 = little-endian expected)", order);
        h->little_endian = order == 1;
    }
    if (!st) {
        uint64_t pos = h->header_bytes;
        st = walk_group(w, &pos, 0, pos, 0);
    }
    free(w);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* The image list                                                                             */

typedef struct {
    dm_info *info;
    uint64_t thumbs; /* bit k: ImageList entry k is a thumbnail */
} collector;

/* Parses "<digits>/" (or "<digits>" at the end) at *p: the number, or -1. */
static long index_at(const char **p)
{
    const char *s = *p;
    long v = 0;
    int n = 0;
    while (*s >= '0' && *s <= '9' && n < 9) {
        v = v * 10 + (*s++ - '0');
        n++;
    }
    if (!n || (*s && *s != '/'))
        return -1;
    *p = *s ? s + 1 : s;
    return v;
}

static void collect(void *ctx, const dm_tag *t)
{
    collector *c = ctx;
    dm_info *info = c->info;
    const char *p = t->path;
    if (strncmp(p, "Thumbnails/", 11) == 0) {
        p += 11;
        if (index_at(&p) >= 0 && strcmp(p, "ImageIndex") == 0 && t->is_integer && t->integer >= 0 &&
            t->integer < DM_MAX_IMAGES)
            c->thumbs |= (uint64_t)1 << t->integer;
        return;
    }
    if (t->is_group && t->depth == 1 && strcmp(p, "ImageList") == 0) {
        if (t->count > info->n_images_total)
            info->n_images_total = (size_t)t->count; /* at most the file size / 9 */
        return;
    }
    if (strncmp(p, "ImageList/", 10) != 0)
        return;
    p += 10;
    long k = index_at(&p);
    if (k < 0)
        return;
    if (!*p) {
        if (t->is_group && t->depth == 2) {
            /* entries are known by position: a named entry that looks like a number is not one */
            if (k < DM_MAX_IMAGES && t->index == (uint64_t)k) {
                info->images[k].seen = 1;
                if ((size_t)k + 1 > info->n_images)
                    info->n_images = (size_t)k + 1;
            }
        }
        return;
    }
    if (k >= DM_MAX_IMAGES || strncmp(p, "ImageData/", 10) != 0)
        return;
    dm_image *im = &info->images[k];
    p += 10;
    if (strcmp(p, "Dimensions") == 0 && t->is_group) {
        im->ndims = t->count > DM_MAX_DIMS ? DM_MAX_DIMS + 1 : (size_t)t->count;
    } else if (strncmp(p, "Dimensions/", 11) == 0 && !t->is_group) {
        p += 11;
        long d = index_at(&p);
        if (d >= 0 && d < DM_MAX_DIMS && !*p)
            im->dims[d] = t->is_integer && t->integer > 0 ? (uint64_t)t->integer : 0;
    } else if (strcmp(p, "DataType") == 0 && !t->is_group) {
        im->data_type = t->is_integer && t->integer >= 0 && t->integer < 1000000 ? (int)t->integer : 1000000;
    } else if (strcmp(p, "PixelDepth") == 0 && !t->is_group) {
        im->pixel_depth = t->is_integer && t->integer > 0 && t->integer < 1000 ? (int)t->integer : 1000;
    } else if (strcmp(p, "Data") == 0 && !t->is_group) {
        im->has_data = t->type == DM_ARRAY;
        im->data_elem_type = t->elem_type;
        im->data_elem_bytes = t->elem_bytes;
        im->data_count = t->count;
        im->data_offset = t->data_offset;
        im->data_bytes = t->data_bytes;
    } else if (strncmp(p, "Calibrations/Dimension/", 23) == 0 && !t->is_group) {
        p += 23;
        long d = index_at(&p);
        if (d < 0 || d >= DM_MAX_DIMS)
            return;
        if (strcmp(p, "Origin") == 0 && t->has_number)
            im->origin[d] = t->number;
        else if (strcmp(p, "Scale") == 0 && t->has_number)
            im->scale[d] = t->number;
        else if (strcmp(p, "Units") == 0 && t->text)
            snprintf(im->units[d], sizeof im->units[d], "%s", t->text);
    }
}

ssb4d_status dm_read_info(const dm_input *in, dm_info *info, ssb4d_err *err)
{
    memset(info, 0, sizeof *info);
    for (size_t k = 0; k < DM_MAX_IMAGES; k++) {
        info->images[k].data_type = -1;
        for (size_t d = 0; d < DM_MAX_DIMS; d++)
            info->images[k].origin[d] = info->images[k].scale[d] = NAN;
    }
    collector c = {info, 0};
    ssb4d_status st = dm_walk(in, &info->header, collect, &c, err);
    for (size_t k = 0; k < DM_MAX_IMAGES; k++)
        info->images[k].is_thumbnail = (int)(c.thumbs >> k & 1);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* The dataset                                                                                */

int dm_data_type(int code, int *bytes, int *is_signed, int *is_float, const char **name)
{
    static const struct { int code, bytes, is_signed, is_float; const char *name; } types[] = {
        {1, 2, 1, 0, "int16"},  {2, 4, 0, 1, "float32"}, {6, 1, 0, 0, "uint8"},
        {7, 4, 1, 0, "int32"},  {9, 1, 1, 0, "int8"},    {10, 2, 0, 0, "uint16"},
        {11, 4, 0, 0, "uint32"},
    };
    static const struct { int code; const char *name; } refused[] = {
        {0, "null"}, {3, "complex64"}, {4, "obsolete"}, {5, "packed complex"}, {8, "RGB"},
        {12, "float64"}, {13, "complex128"}, {14, "bool (binary)"}, {23, "RGBA"},
        {27, "packed complex64"}, {28, "packed complex128"},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].code == code) {
            *bytes = types[i].bytes;
            *is_signed = types[i].is_signed;
            *is_float = types[i].is_float;
            *name = types[i].name;
            return 1;
        }
    *name = "unknown";
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (refused[i].code == code)
            *name = refused[i].name;
    return 0;
}

/* "6x5x4x3" (fastest first) into buf. */
static void dims_text(const dm_image *im, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (size_t d = 0; d < im->ndims && d < DM_MAX_DIMS && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, d ? "x%" PRIu64 : "%" PRIu64, im->dims[d]);
}

/* One line about entry k for the "nothing found" message. */
static void describe(const dm_info *info, size_t k, char *buf, size_t n)
{
    const dm_image *im = &info->images[k];
    char dims[96];
    int b, sg, fl;
    const char *tn = "no data type";
    if (im->data_type >= 0)
        dm_data_type(im->data_type, &b, &sg, &fl, &tn);
    dims_text(im, dims, sizeof dims);
    snprintf(buf, n, "entry %zu%s: %zu-D %s %s", k, im->is_thumbnail ? " (thumbnail)" : "",
             im->ndims, dims[0] ? dims : "(no dimensions)", tn);
}

ssb4d_status dm_select(const dm_info *info, long want, dm_dataset *ds, ssb4d_err *err)
{
    memset(ds, 0, sizeof *ds);
    if (info->n_images_total == 0)
        return ssb_fail(err, SSB4D_EFORMAT, "no ImageList entries: the file holds no image");
    size_t k = 0;
    if (want >= 0) {
        if (want >= DM_MAX_IMAGES && (size_t)want < info->n_images_total)
            return ssb_fail(err, SSB4D_EINVAL, "--dataset %ld: ssb4d reads the first %d ImageList "
                            "entries", want, DM_MAX_IMAGES);
        if ((size_t)want >= info->n_images || !info->images[want].seen)
            return ssb_fail(err, SSB4D_EINVAL, "--dataset %ld: the ImageList has %zu entries "
                            "(0 to %zu)", want, info->n_images_total,
                            info->n_images_total ? info->n_images_total - 1 : 0);
        k = (size_t)want;
    } else {
        size_t found = info->n_images;
        for (size_t rank = 4; rank >= 3 && found == info->n_images; rank--)
            for (size_t i = 0; i < info->n_images && found == info->n_images; i++)
                if (info->images[i].seen && !info->images[i].is_thumbnail && info->images[i].ndims == rank)
                    found = i;
        if (found == info->n_images) {
            char msg[400] = "";
            size_t o = 0;
            for (size_t i = 0; i < info->n_images && o < sizeof msg - 1; i++) {
                if (!info->images[i].seen)
                    continue;
                char one[160];
                describe(info, i, one, sizeof one);
                o += (size_t)snprintf(msg + o, sizeof msg - o, "%s%s", o ? "; " : "", one);
            }
            return ssb_fail(err, SSB4D_EFORMAT, "no 4-D dataset (nor a 3-D stack of frames) in the "
                            "ImageList: %s", msg);
        }
        k = found;
    }
    const dm_image *im = &info->images[k];
    char dims[96];
    dims_text(im, dims, sizeof dims);
    if (im->ndims != 4 && im->ndims != 3)
        return ssb_fail(err, SSB4D_EFORMAT, "ImageList entry %zu has %s%zu dimensions (%s): ssb4d "
                        "reads 4-D datasets (scan x scan x detector x detector) or 3-D stacks of "
                        "frames", k, im->ndims > DM_MAX_DIMS ? "more than " : "",
                        im->ndims > DM_MAX_DIMS ? (size_t)DM_MAX_DIMS : im->ndims,
                        dims[0] ? dims : "none");
    for (size_t d = 0; d < im->ndims; d++)
        if (!im->dims[d])
            return ssb_fail(err, SSB4D_EFORMAT, "ImageList/%zu/ImageData/Dimensions/%zu is missing or "
                            "not a positive integer", k, d);
    if (im->data_type < 0)
        return ssb_fail(err, SSB4D_EFORMAT, "ImageList/%zu/ImageData/DataType is missing", k);
    int bytes, is_signed, is_float;
    const char *tn;
    if (!dm_data_type(im->data_type, &bytes, &is_signed, &is_float, &tn))
        return ssb_fail(err, SSB4D_EFORMAT, "DM data type %d (%s) is not supported (ssb4d reads int8, "
                        "uint8, int16, uint16, int32, uint32 and float32)", im->data_type, tn);
    if (!im->has_data)
        return ssb_fail(err, SSB4D_EFORMAT, "ImageList/%zu/ImageData/Data is missing or not an array", k);
    if (!simple_size((uint64_t)im->data_elem_type) || im->data_elem_bytes != (uint64_t)bytes)
        return ssb_fail(err, SSB4D_EFORMAT, "ImageList/%zu/ImageData/Data is an array of %s (%" PRIu64
                        " bytes each), not of the %d-byte values of its data type %s", k,
                        type_name((uint64_t)im->data_elem_type), im->data_elem_bytes, bytes, tn);
    if (im->pixel_depth && im->pixel_depth != bytes)
        return ssb_fail(err, SSB4D_EFORMAT, "ImageList/%zu/ImageData/PixelDepth says %d bytes per "
                        "value, the data type %s has %d", k, im->pixel_depth, tn, bytes);
    uint64_t need = 1;
    for (size_t d = 0; d < im->ndims; d++)
        if (__builtin_mul_overflow(need, im->dims[d], &need))
            return ssb_fail(err, SSB4D_EFORMAT, "ImageList/%zu: the dimensions %s hold more than 2^64 "
                            "values", k, dims);
    if (im->data_count != need)
        return ssb_fail(err, SSB4D_EFORMAT, "ImageList/%zu/ImageData/Data holds %" PRIu64 " values, "
                        "the dimensions %s (fastest first) need %" PRIu64, k, im->data_count, dims,
                        need);
    ds->index = k;
    ds->rank = (int)im->ndims;
    if (im->ndims == 4) {
        /* fastest first (det_col, det_row, scan_col, scan_row): C order reverses them */
        for (int d = 0; d < 4; d++)
            ds->shape[d] = (size_t)im->dims[3 - d];
    } else {
        for (int d = 0; d < 3; d++)
            ds->shape[d] = (size_t)im->dims[2 - d];
    }
    ds->bytes = bytes;
    ds->is_signed = is_signed;
    ds->is_float = is_float;
    ds->type_name = tn;
    ds->data_offset = im->data_offset;
    ds->data_bytes = im->data_bytes;
    ds->big_endian = !info->header.little_endian;
    return SSB4D_OK;
}
