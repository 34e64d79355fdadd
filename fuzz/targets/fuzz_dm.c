/* fuzz_dm.c — the DM3 / DM4 tag walker, image list and dataset choice (src/formats/dm.h) on a
 * whole file image held in memory. Besides the sanitizers: every entry the walker reports lies
 * within the file, its path and text are bounded NUL-terminated UTF-8, and a dataset that is
 * accepted has a supported type, a shape whose values fill its data block exactly, and a data
 * block inside the file. Every ImageList entry is also tried by index. */
#include "formats/dm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_dm: check failed: %s (line %d)\n", #c, __LINE__);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    const uint8_t *p;
    size_t n;
} mem;

static int mem_read(void *ctx, uint64_t off, void *buf, size_t n)
{
    const mem *m = ctx;
    CHECK(off <= m->n && n <= m->n - off); /* the walker checks bounds before it reads */
    memcpy(buf, m->p + off, n);
    return 0;
}

static int valid_utf8(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n > max)
        return 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : 0;
        if (!k || i + k > n || (k > 1 && c < 0xc2))
            return 0;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xc0) != 0x80)
                return 0;
        i += k;
    }
    return 1;
}

typedef struct {
    uint64_t size;
    size_t tags;
} visit_state;

static void visit(void *ctx, const dm_tag *t)
{
    visit_state *v = ctx;
    v->tags++;
    CHECK(t->path && valid_utf8(t->path, DM_PATH_MAX));
    CHECK(t->name && valid_utf8(t->name, 2 * 256));
    CHECK(t->depth >= 1 && t->depth <= DM_MAX_DEPTH + 1);
    CHECK(t->offset < v->size);
    CHECK(t->n_fields <= DM_MAX_FIELDS);
    if (!t->is_group) {
        CHECK(t->data_offset <= v->size && t->data_bytes <= v->size - t->data_offset);
        CHECK(t->data_offset > t->offset);
        if (t->text)
            CHECK(valid_utf8(t->text, 3 * DM_TEXT_MAX));
        if (t->type == DM_ARRAY && t->elem_bytes)
            CHECK(t->data_bytes / t->elem_bytes == t->count && t->data_bytes % t->elem_bytes == 0);
    }
}

static void check_dataset(const dm_info *info, const dm_dataset *ds, uint64_t size)
{
    CHECK(ds->index < info->n_images && info->images[ds->index].seen);
    CHECK(ds->rank == 3 || ds->rank == 4);
    CHECK(ds->bytes == 1 || ds->bytes == 2 || ds->bytes == 4);
    CHECK(!ds->is_float || ds->bytes == 4);
    uint64_t n = 1;
    for (int d = 0; d < ds->rank; d++) {
        CHECK(ds->shape[d] >= 1);
        CHECK(!__builtin_mul_overflow(n, (uint64_t)ds->shape[d], &n));
    }
    CHECK(n * (uint64_t)ds->bytes == ds->data_bytes);
    CHECK(ds->data_offset <= size && ds->data_bytes <= size - ds->data_offset);
    int b, sg, fl;
    const char *name;
    CHECK(dm_data_type(info->images[ds->index].data_type, &b, &sg, &fl, &name) && b == ds->bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size: reads past the end are ASan reports */
    memcpy(buf, data, size);
    mem m = {buf, size};
    dm_input in = {mem_read, &m, size};
    ssb4d_err err = {0};

    visit_state v = {size, 0};
    dm_header h;
    ssb4d_status st = dm_walk(&in, &h, visit, &v, &err);
    if (st == SSB4D_OK) {
        CHECK(h.version == 3 || h.version == 4);
        CHECK(v.tags <= size / 9); /* every entry takes at least 9 bytes */
    } else {
        CHECK(err.msg[0] && memchr(err.msg, 0, sizeof err.msg));
    }

    dm_info *info = malloc(sizeof *info);
    memset(&err, 0, sizeof err);
    ssb4d_status st2 = dm_read_info(&in, info, &err);
    CHECK((st == SSB4D_OK) == (st2 == SSB4D_OK)); /* the same walk */
    if (st2 == SSB4D_OK) {
        CHECK(info->n_images <= DM_MAX_IMAGES && info->n_images <= info->n_images_total);
        dm_dataset ds;
        memset(&err, 0, sizeof err);
        if (dm_select(info, -1, &ds, &err) == SSB4D_OK)
            check_dataset(info, &ds, size);
        else
            CHECK(err.msg[0] && memchr(err.msg, 0, sizeof err.msg));
        for (size_t k = 0; k <= info->n_images; k++) {
            memset(&err, 0, sizeof err);
            if (dm_select(info, (long)k, &ds, &err) == SSB4D_OK) {
                CHECK(ds.index == k);
                check_dataset(info, &ds, size);
            } else {
                CHECK(err.msg[0]);
            }
        }
    }
    free(info);
    free(buf);
    return 0;
}
