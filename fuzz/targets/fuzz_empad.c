/* fuzz_empad.c — the EMPAD .xml parser (src/formats/empad.h) on arbitrary bytes. Besides the
 * sanitizers: an accepted document is a well-formed tree (parent, child and sibling links agree,
 * pre-order indices, depth and size bounds, attributes contiguous and distinct, every string
 * NUL-terminated at its length inside the arena); written back out as XML it parses to the very
 * same tree (a round trip through a serializer written here); the EMPAD fields read from it are
 * self-consistent, and empad_parse agrees with parse + read. */
#include "formats/empad.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_empad: check failed: %s (line %d)\n", #c, __LINE__);            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int in_arena(const empad_xml *d, const char *s)
{
    return s >= d->arena && s < d->arena + d->arena_used;
}

static void check_string(const empad_xml *d, const char *s, size_t len)
{
    CHECK(in_arena(d, s) && in_arena(d, s + len)); /* its NUL is in the arena too */
    CHECK(strlen(s) == len);
}

static void check_doc(const empad_xml *d)
{
    CHECK(d->n_nodes >= 1 && d->n_nodes <= EMPAD_XML_MAX_NODES);
    CHECK(d->arena_used <= d->arena_cap);
    size_t attrs = 0, children = 0;
    for (size_t i = 0; i < d->n_nodes; i++) {
        const empad_xml_node *e = &d->nodes[i];
        size_t nl = strlen(e->name);
        CHECK(nl >= 1 && nl <= EMPAD_XML_MAX_NAME);
        check_string(d, e->name, nl);
        if (e->text_len)
            check_string(d, e->text, e->text_len);
        else
            CHECK(e->text[0] == 0);
        if (i == 0)
            CHECK(e->parent == -1 && e->depth == 0);
        else
            CHECK(e->parent >= 0 && (size_t)e->parent < i && e->depth == d->nodes[e->parent].depth + 1);
        CHECK(e->depth < EMPAD_XML_MAX_DEPTH);
        CHECK(e->attr0 == attrs && e->n_attrs <= EMPAD_XML_MAX_ATTRS);
        for (size_t a = e->attr0; a < e->attr0 + e->n_attrs; a++) {
            check_string(d, d->attrs[a].name, strlen(d->attrs[a].name));
            check_string(d, d->attrs[a].value, strlen(d->attrs[a].value));
            for (size_t b = e->attr0; b < a; b++)
                CHECK(strcmp(d->attrs[a].name, d->attrs[b].name) != 0);
            CHECK(empad_xml_attr_value(d, (int)i, d->attrs[a].name) == d->attrs[a].value);
        }
        attrs += e->n_attrs;
        if (e->first_child >= 0)
            CHECK(e->text_len == 0); /* mixed content keeps no text */
        int prev = (int)i;
        for (int c = e->first_child; c >= 0; c = d->nodes[c].next) {
            CHECK((size_t)c < d->n_nodes && c > prev && d->nodes[c].parent == (int)i);
            CHECK(empad_xml_child(d, (int)i, d->nodes[c].name) >= 0);
            prev = c;
            children++;
        }
    }
    CHECK(attrs == d->n_attrs);
    CHECK(children == d->n_nodes - 1);
}

/* ---- writing the tree back out ---- */
typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *s, size_t k)
{
    if (b->n + k + 1 > b->cap) {
        b->cap = (b->n + k + 1) * 2;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p);
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
}

static void put_escaped(sbuf *b, const char *s, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        switch (s[i]) {
        case '&': put(b, "&amp;", 5); break;
        case '<': put(b, "&lt;", 4); break;
        case '>': put(b, "&gt;", 4); break;
        case '"': put(b, "&quot;", 6); break;
        default: put(b, s + i, 1);
        }
    }
}

static void serialize(const empad_xml *d, int i, sbuf *b)
{
    const empad_xml_node *e = &d->nodes[i];
    put(b, "<", 1);
    put(b, e->name, strlen(e->name));
    for (size_t a = e->attr0; a < e->attr0 + e->n_attrs; a++) {
        put(b, " ", 1);
        put(b, d->attrs[a].name, strlen(d->attrs[a].name));
        put(b, "=\"", 2);
        put_escaped(b, d->attrs[a].value, strlen(d->attrs[a].value));
        put(b, "\"", 1);
    }
    put(b, ">", 1);
    if (e->first_child < 0)
        put_escaped(b, e->text, e->text_len);
    for (int c = e->first_child; c >= 0; c = d->nodes[c].next)
        serialize(d, c, b);
    put(b, "</", 2);
    put(b, e->name, strlen(e->name));
    put(b, ">", 1);
}

static void same_tree(const empad_xml *a, const empad_xml *b)
{
    CHECK(a->n_nodes == b->n_nodes && a->n_attrs == b->n_attrs);
    for (size_t i = 0; i < a->n_nodes; i++) {
        const empad_xml_node *x = &a->nodes[i], *y = &b->nodes[i];
        CHECK(!strcmp(x->name, y->name) && x->text_len == y->text_len &&
              !memcmp(x->text, y->text, x->text_len));
        CHECK(x->parent == y->parent && x->first_child == y->first_child && x->next == y->next &&
              x->depth == y->depth && x->attr0 == y->attr0 && x->n_attrs == y->n_attrs);
    }
    for (size_t k = 0; k < a->n_attrs; k++)
        CHECK(!strcmp(a->attrs[k].name, b->attrs[k].name) &&
              !strcmp(a->attrs[k].value, b->attrs[k].value));
}

static void check_info(const empad_info *in)
{
    CHECK(memchr(in->raw_name, 0, sizeof in->raw_name) != NULL);
    CHECK(memchr(in->timestamp, 0, sizeof in->timestamp) != NULL);
    for (int k = 0; k < 3; k++) {
        CHECK((in->scan[k].rows == 0) == (in->scan[k].cols == 0));
        CHECK(in->scan[k].rows <= 1000000000 && in->scan[k].cols <= 1000000000);
        CHECK((in->scan[k].rows != 0) == (in->scan[k].from != NULL));
    }
    CHECK(in->series_count <= 1000000000);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1); /* exact size: reads past len are ASan reports */
    memcpy(buf, data, size);
    empad_xml doc;
    ssb4d_err err = {0};
    empad_info info, info2;
    if (empad_xml_parse(buf, size, &doc, &err) == SSB4D_OK) {
        check_doc(&doc);
        sbuf out = {0};
        serialize(&doc, 0, &out);
        empad_xml again;
        ssb4d_err e2 = {0};
        if (empad_xml_parse(out.p, out.n, &again, &e2) != SSB4D_OK) {
            fprintf(stderr, "fuzz_empad: the written tree does not parse: %s\n", e2.msg);
            abort();
        }
        same_tree(&doc, &again);
        empad_xml_free(&again);
        free(out.p);
        ssb4d_status st = empad_info_read(&doc, &info, &err);
        if (st == SSB4D_OK)
            check_info(&info);
        else
            CHECK(err.msg[0] != 0 && memchr(err.msg, 0, sizeof err.msg) != NULL);
        /* the one-call entry agrees */
        ssb4d_err e3 = {0};
        CHECK(empad_parse(buf, size, &info2, &e3) == st);
        if (st == SSB4D_OK)
            CHECK(!strcmp(info.raw_name, info2.raw_name) && info.scan[0].rows == info2.scan[0].rows &&
                  info.scan[0].cols == info2.scan[0].cols);
        empad_xml_free(&doc);
    } else {
        CHECK(err.msg[0] != 0 && memchr(err.msg, 0, sizeof err.msg) != NULL);
        CHECK(doc.nodes == NULL && doc.arena == NULL && doc.n_nodes == 0);
    }
    free(buf);
    return 0;
}
