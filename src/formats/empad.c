/* empad.c — a small strict XML parser and the EMPAD fields read from it (see empad.h). Written
 * for hostile input: every read is bounded by len, depth and node count are capped, strings are
 * decoded into one arena sized from the input, and no DTD is read (so no entity expands). */
#include "formats/empad.h"

#include "common/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* The parser                                                                                 */

typedef struct {
    const unsigned char *b;
    size_t n, i;
    empad_xml *d;
    ssb4d_err *err;
    /* open elements: node index, whether a child element has started (the text is dropped),
     * and the last child seen (to link siblings) */
    int stack[EMPAD_XML_MAX_DEPTH];
    int has_child[EMPAD_XML_MAX_DEPTH];
    int last_child[EMPAD_XML_MAX_DEPTH];
    size_t text_at[EMPAD_XML_MAX_DEPTH]; /* arena offset where the open element's text starts */
    int depth;                           /* open elements */
} parser;

static const char empty_text[1] = "";

static ssb4d_status perr(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ssb4d_status perr(parser *p, const char *fmt, ...)
{
    size_t line = 1, end = p->i < p->n ? p->i : p->n;
    for (size_t k = 0; k < end; k++)
        line += p->b[k] == '\n';
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ssb_fail(p->err, SSB4D_EFORMAT, "XML line %zu: %s", line, msg);
}

static int is_space(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_name_start(unsigned c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || c >= 0x80;
}
static int is_name_char(unsigned c)
{
    return is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

static int at(const parser *p, const char *s)
{
    size_t k = strlen(s);
    return p->n - p->i >= k && memcmp(p->b + p->i, s, k) == 0;
}

static void skip_space(parser *p)
{
    while (p->i < p->n && is_space(p->b[p->i]))
        p->i++;
}

/* The arena holds every string: each is at most as long as the input bytes it came from, and
 * every string (plus its NUL) consumes at least one input byte, so 2 * len + 16 always fits;
 * the check below is a second line of defence. */
static ssb4d_status put(parser *p, const void *s, size_t k)
{
    empad_xml *d = p->d;
    if (k > d->arena_cap - d->arena_used)
        return ssb_fail(p->err, SSB4D_EINTERNAL, "XML string arena overflow");
    memcpy(d->arena + d->arena_used, s, k);
    d->arena_used += k;
    return SSB4D_OK;
}

/* A byte of character data or of an attribute value: no NUL or other control byte. */
static ssb4d_status check_byte(parser *p, unsigned c)
{
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
        return perr(p, "control byte 0x%02x in the text", c);
    return SSB4D_OK;
}

/* An entity or character reference at p->i ('&'): decoded into out (up to 4 bytes). */
static ssb4d_status reference(parser *p, char out[4], size_t *k)
{
    size_t j = p->i + 1, end = j;
    while (end < p->n && end - j < 12 && p->b[end] != ';')
        end++;
    if (end >= p->n || p->b[end] != ';')
        return perr(p, "'&' that does not start an entity (write &amp;)");
    const char *name = (const char *)p->b + j;
    size_t nl = end - j;
    static const struct { const char *name; char c; } predefined[] = {
        {"lt", '<'}, {"gt", '>'}, {"amp", '&'}, {"quot", '"'}, {"apos", '\''},
    };
    for (size_t t = 0; t < 5; t++)
        if (nl == strlen(predefined[t].name) && memcmp(name, predefined[t].name, nl) == 0) {
            out[0] = predefined[t].c;
            *k = 1;
            p->i = end + 1;
            return SSB4D_OK;
        }
    if (nl < 2 || name[0] != '#')
        return perr(p, "unknown entity &%.*s; (only &lt; &gt; &amp; &quot; &apos; and character "
                    "references are read)", (int)nl, name);
    unsigned long v = 0;
    int hex = name[1] == 'x';
    size_t q = hex ? 2 : 1;
    if (q == nl)
        return perr(p, "empty character reference");
    for (; q < nl; q++) {
        unsigned c = (unsigned char)name[q];
        unsigned dgt = c >= '0' && c <= '9' ? c - '0'
                     : hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
                     : hex && c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
        if (dgt == 99)
            return perr(p, "bad character reference &%.*s;", (int)nl, name);
        v = v * (hex ? 16 : 10) + dgt;
        if (v > 0x10FFFF)
            return perr(p, "character reference beyond Unicode");
    }
    if ((v < 0x20 && v != '\t' && v != '\n' && v != '\r') || (v >= 0xD800 && v <= 0xDFFF) ||
        v == 0xFFFE || v == 0xFFFF)
        return perr(p, "character reference to a character XML does not allow (U+%04lX)", v);
    if (v < 0x80) {
        out[0] = (char)v;
        *k = 1;
    } else if (v < 0x800) {
        out[0] = (char)(0xC0 | v >> 6);
        out[1] = (char)(0x80 | (v & 0x3F));
        *k = 2;
    } else if (v < 0x10000) {
        out[0] = (char)(0xE0 | v >> 12);
        out[1] = (char)(0x80 | (v >> 6 & 0x3F));
        out[2] = (char)(0x80 | (v & 0x3F));
        *k = 3;
    } else {
        out[0] = (char)(0xF0 | v >> 18);
        out[1] = (char)(0x80 | (v >> 12 & 0x3F));
        out[2] = (char)(0x80 | (v >> 6 & 0x3F));
        out[3] = (char)(0x80 | (v & 0x3F));
        *k = 4;
    }
    p->i = end + 1;
    return SSB4D_OK;
}

/* A name at p->i, copied into the arena; *out points at it. */
static ssb4d_status name(parser *p, const char **out)
{
    size_t j = p->i;
    if (j >= p->n || !is_name_start(p->b[j]))
        return perr(p, "a name was expected");
    while (j < p->n && is_name_char(p->b[j]))
        j++;
    if (j - p->i > EMPAD_XML_MAX_NAME)
        return perr(p, "a name longer than %d bytes", EMPAD_XML_MAX_NAME);
    *out = p->d->arena + p->d->arena_used;
    ssb4d_status st = put(p, p->b + p->i, j - p->i);
    if (!st)
        st = put(p, "", 1);
    p->i = j;
    return st;
}

/* Skips what lies between p->i + skip and the terminator (included). */
static ssb4d_status skip_until(parser *p, size_t skip, const char *term, const char *what)
{
    const void *e = memmem(p->b + p->i + skip, p->n - p->i - skip, term, strlen(term));
    if (!e)
        return perr(p, "%s that never ends", what);
    p->i = (size_t)((const unsigned char *)e - p->b) + strlen(term);
    return SSB4D_OK;
}

/* Comments, processing instructions and blanks outside the root element. */
static ssb4d_status misc(parser *p)
{
    for (;;) {
        skip_space(p);
        ssb4d_status st = SSB4D_OK;
        if (at(p, "<?"))
            st = skip_until(p, 2, "?>", "a processing instruction");
        else if (at(p, "<!--"))
            st = skip_until(p, 4, "-->", "a comment");
        else if (at(p, "<!"))
            return perr(p, "a document type declaration (DTD) is not read");
        else
            return SSB4D_OK;
        if (st)
            return st;
    }
}

static ssb4d_status grow(void **v, size_t *cap, size_t need, size_t size, size_t max)
{
    if (need <= *cap)
        return SSB4D_OK;
    if (need > max)
        return SSB4D_EFORMAT;
    size_t c = *cap ? *cap * 2 : 64;
    if (c > max)
        c = max;
    void *q = realloc(*v, c * size);
    if (!q)
        return SSB4D_ENOMEM;
    *v = q;
    *cap = c;
    return SSB4D_OK;
}

/* A start tag at p->i ('<' + name): the node, its attributes; opened unless it is empty. */
static ssb4d_status start_tag(parser *p, size_t *node_cap, size_t *attr_cap)
{
    empad_xml *d = p->d;
    ssb4d_status st;
    if (p->depth >= EMPAD_XML_MAX_DEPTH)
        return perr(p, "elements nested deeper than %d", EMPAD_XML_MAX_DEPTH);
    if ((st = grow((void **)&d->nodes, node_cap, d->n_nodes + 1, sizeof *d->nodes,
                   EMPAD_XML_MAX_NODES)))
        return st == SSB4D_ENOMEM ? ssb_fail(p->err, st, "out of memory reading XML")
                                  : perr(p, "more than %d elements", EMPAD_XML_MAX_NODES);
    int id = (int)d->n_nodes++;
    empad_xml_node *e = &d->nodes[id];
    *e = (empad_xml_node){.text = empty_text, .attr0 = d->n_attrs, .parent = -1,
                          .first_child = -1, .next = -1, .depth = p->depth};
    if (p->depth) {
        int parent = p->stack[p->depth - 1];
        e->parent = parent;
        if (!p->has_child[p->depth - 1]) {
            p->has_child[p->depth - 1] = 1; /* mixed content: the parent keeps no text */
            d->nodes[parent].text = empty_text;
            d->nodes[parent].first_child = id;
        } else {
            d->nodes[p->last_child[p->depth - 1]].next = id;
        }
        p->last_child[p->depth - 1] = id;
    }
    p->i++; /* '<' */
    const char *nm;
    if ((st = name(p, &nm)))
        return st;
    d->nodes[id].name = nm;
    for (;;) {
        size_t before = p->i;
        skip_space(p);
        if (p->i >= p->n)
            return perr(p, "the document ends inside the tag <%s>", nm);
        if (p->b[p->i] == '/' || p->b[p->i] == '>')
            break;
        if (p->i == before)
            return perr(p, "attributes of <%s> must be separated by blanks", nm);
        if (d->nodes[id].n_attrs == EMPAD_XML_MAX_ATTRS)
            return perr(p, "<%s> has more than %d attributes", nm, EMPAD_XML_MAX_ATTRS);
        if ((st = grow((void **)&d->attrs, attr_cap, d->n_attrs + 1, sizeof *d->attrs,
                       (size_t)EMPAD_XML_MAX_NODES * EMPAD_XML_MAX_ATTRS)))
            return ssb_fail(p->err, SSB4D_ENOMEM, "out of memory reading XML");
        empad_xml_attr *a = &d->attrs[d->n_attrs];
        if ((st = name(p, &a->name)))
            return st;
        for (size_t k = d->nodes[id].attr0; k < d->n_attrs; k++)
            if (strcmp(d->attrs[k].name, a->name) == 0)
                return perr(p, "<%s> repeats the attribute %s", nm, a->name);
        skip_space(p);
        if (p->i >= p->n || p->b[p->i] != '=')
            return perr(p, "'=' expected after the attribute %s of <%s>", a->name, nm);
        p->i++;
        skip_space(p);
        if (p->i >= p->n || (p->b[p->i] != '"' && p->b[p->i] != '\''))
            return perr(p, "the value of %s in <%s> is not quoted", a->name, nm);
        unsigned char q = p->b[p->i++];
        a->value = d->arena + d->arena_used;
        for (;;) {
            if (p->i >= p->n)
                return perr(p, "the value of %s in <%s> never ends", a->name, nm);
            unsigned c = p->b[p->i];
            if (c == q)
                break;
            if (c == '<')
                return perr(p, "'<' inside the value of %s in <%s>", a->name, nm);
            if (c == '&') {
                char ch[4];
                size_t k;
                if ((st = reference(p, ch, &k)) || (st = put(p, ch, k)))
                    return st;
                continue;
            }
            if ((st = check_byte(p, c)) || (st = put(p, &p->b[p->i], 1)))
                return st;
            p->i++;
        }
        p->i++; /* closing quote */
        if ((st = put(p, "", 1)))
            return st;
        d->n_attrs++;
        d->nodes[id].n_attrs++;
    }
    if (p->b[p->i] == '/') {
        if (p->i + 1 >= p->n || p->b[p->i + 1] != '>')
            return perr(p, "'/' in the tag <%s> not followed by '>'", nm);
        p->i += 2;
        return SSB4D_OK; /* empty element: never opened */
    }
    p->i++; /* '>' */
    p->stack[p->depth] = id;
    p->has_child[p->depth] = 0;
    p->last_child[p->depth] = -1;
    p->text_at[p->depth] = d->arena_used;
    d->nodes[id].text = d->arena + d->arena_used;
    p->depth++;
    return SSB4D_OK;
}

/* Character data of the innermost open element: kept while it has no child element. */
static ssb4d_status text_bytes(parser *p, const void *s, size_t k)
{
    if (p->has_child[p->depth - 1])
        return SSB4D_OK;
    return put(p, s, k);
}

static ssb4d_status end_tag(parser *p)
{
    empad_xml *d = p->d;
    int id = p->stack[p->depth - 1];
    const char *nm = d->nodes[id].name;
    p->i += 2; /* "</" */
    size_t j = p->i, k = strlen(nm);
    if (p->n - j < k || memcmp(p->b + j, nm, k) != 0 || (j + k < p->n && is_name_char(p->b[j + k])))
        return perr(p, "the end tag does not close <%s>", nm);
    p->i = j + k;
    skip_space(p);
    if (p->i >= p->n || p->b[p->i] != '>')
        return perr(p, "'>' expected to end </%s", nm);
    p->i++;
    if (!p->has_child[p->depth - 1]) {
        d->nodes[id].text_len = d->arena_used - p->text_at[p->depth - 1];
        ssb4d_status st = put(p, "", 1);
        if (st)
            return st;
    }
    p->depth--;
    return SSB4D_OK;
}

void empad_xml_free(empad_xml *doc)
{
    if (!doc)
        return;
    free(doc->nodes);
    free(doc->attrs);
    free(doc->arena);
    memset(doc, 0, sizeof *doc);
}

static ssb4d_status parse_doc(parser *p)
{
    empad_xml *d = p->d;
    size_t node_cap = 0, attr_cap = 0;
    ssb4d_status st;
    if (at(p, "\xEF\xBB\xBF")) /* UTF-8 byte order mark */
        p->i += 3;
    if ((st = misc(p)))
        return st;
    if (p->i >= p->n || p->b[p->i] != '<')
        return perr(p, "no root element");
    if ((st = start_tag(p, &node_cap, &attr_cap)))
        return st;
    while (p->depth) {
        if (p->i >= p->n)
            return perr(p, "the document ends inside <%s>", d->nodes[p->stack[p->depth - 1]].name);
        unsigned c = p->b[p->i];
        if (c == '<') {
            if (at(p, "</"))
                st = end_tag(p);
            else if (at(p, "<!--"))
                st = skip_until(p, 4, "-->", "a comment");
            else if (at(p, "<![CDATA[")) {
                const unsigned char *s = p->b + p->i + 9;
                const void *e = memmem(s, p->n - p->i - 9, "]]>", 3);
                if (!e)
                    return perr(p, "a CDATA section that never ends");
                size_t k = (size_t)((const unsigned char *)e - s);
                for (size_t t = 0; t < k && !st; t++)
                    st = check_byte(p, s[t]);
                if (!st)
                    st = text_bytes(p, s, k);
                p->i += 9 + k + 3;
            } else if (at(p, "<!"))
                return perr(p, "a declaration inside an element");
            else if (at(p, "<?"))
                st = skip_until(p, 2, "?>", "a processing instruction");
            else
                st = start_tag(p, &node_cap, &attr_cap);
        } else if (c == '&') {
            char ch[4];
            size_t k;
            if (!(st = reference(p, ch, &k)))
                st = text_bytes(p, ch, k);
        } else {
            if (!(st = check_byte(p, c)))
                st = text_bytes(p, &p->b[p->i], 1);
            p->i++;
        }
        if (st)
            return st;
    }
    if ((st = misc(p)))
        return st;
    if (p->i < p->n)
        return perr(p, "content after the root element");
    return SSB4D_OK;
}

ssb4d_status empad_xml_parse(const char *buf, size_t len, empad_xml *doc, ssb4d_err *err)
{
    memset(doc, 0, sizeof *doc);
    if (!buf && len)
        return ssb_fail(err, SSB4D_EINVAL, "empad_xml_parse: no buffer");
    if (len > EMPAD_XML_MAX_BYTES)
        return ssb_fail(err, SSB4D_EFORMAT, "XML of %zu bytes is larger than the %zu read",
                        len, EMPAD_XML_MAX_BYTES);
    doc->arena_cap = 2 * len + 16;
    if (!(doc->arena = malloc(doc->arena_cap)))
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory reading XML");
    parser p = {.b = (const unsigned char *)buf, .n = len, .d = doc, .err = err};
    ssb4d_status st = parse_doc(&p);
    if (st)
        empad_xml_free(doc);
    return st;
}

int empad_xml_child(const empad_xml *doc, int node, const char *nm)
{
    if (node < 0 || (size_t)node >= doc->n_nodes)
        return -1;
    for (int c = doc->nodes[node].first_child; c >= 0; c = doc->nodes[c].next)
        if (strcmp(doc->nodes[c].name, nm) == 0)
            return c;
    return -1;
}

const char *empad_xml_attr_value(const empad_xml *doc, int node, const char *nm)
{
    if (node < 0 || (size_t)node >= doc->n_nodes)
        return NULL;
    const empad_xml_node *e = &doc->nodes[node];
    for (size_t k = e->attr0; k < e->attr0 + e->n_attrs; k++)
        if (strcmp(doc->attrs[k].name, nm) == 0)
            return doc->attrs[k].value;
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* The EMPAD fields                                                                           */

const char *empad_basename(const char *path)
{
    const char *b = path;
    for (const char *q = path; *q; q++)
        if (*q == '/' || *q == '\\')
            b = q + 1;
    return b;
}

/* The text of an element without surrounding blanks, as (pointer, length). */
static const char *trimmed(const empad_xml_node *e, size_t *n)
{
    const char *s = e->text;
    size_t k = e->text_len;
    while (k && is_space((unsigned char)*s)) {
        s++;
        k--;
    }
    while (k && is_space((unsigned char)s[k - 1]))
        k--;
    *n = k;
    return s;
}

/* A positive whole number of at most 10^9 (a scan size); 0 when the text is anything else. */
static size_t count_of(const empad_xml_node *e)
{
    size_t n;
    const char *s = trimmed(e, &n);
    if (n == 0 || n > 10)
        return 0;
    size_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (size_t)(s[i] - '0');
    }
    return v <= 1000000000 ? v : 0;
}

/* A plain decimal number (optionally signed, with an exponent), finite; NaN otherwise. */
static double number_of(const char *s, size_t n)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return NAN;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789.eE+-", s[i]) || s[i] == 0)
            return NAN;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    double v = strtod(buf, &end);
    return *end || !isfinite(v) ? NAN : v;
}

static double node_number(const empad_xml *doc, int node)
{
    if (node < 0)
        return NAN;
    size_t n;
    const char *s = trimmed(&doc->nodes[node], &n);
    return number_of(s, n);
}

static ssb4d_status need_count(const empad_xml *doc, int node, size_t *v, ssb4d_err *err)
{
    const empad_xml_node *e = &doc->nodes[node];
    size_t n;
    const char *s = trimmed(e, &n);
    *v = count_of(e);
    if (!*v)
        return ssb_fail(err, SSB4D_EFORMAT, "<%s> is '%.*s', not a whole number from 1 to 10^9",
                        e->name, (int)(n < 40 ? n : 40), s);
    return SSB4D_OK;
}

/* One scan-size pair (x = columns, y = rows) under parent: both or neither. */
static ssb4d_status scan_pair(const empad_xml *doc, int parent, const char *xn, const char *yn,
                              size_t *rows, size_t *cols, ssb4d_err *err)
{
    int x = empad_xml_child(doc, parent, xn), y = empad_xml_child(doc, parent, yn);
    *rows = *cols = 0;
    if (x < 0 && y < 0)
        return SSB4D_OK;
    if (x < 0 || y < 0)
        return ssb_fail(err, SSB4D_EFORMAT, "<%s> without <%s>", x < 0 ? yn : xn, x < 0 ? xn : yn);
    ssb4d_status st = need_count(doc, x, cols, err);
    if (!st)
        st = need_count(doc, y, rows, err);
    return st;
}

/* Stores (rows, cols) in slot k, refusing a second value that disagrees. */
static ssb4d_status set_scan(empad_info *info, int k, size_t rows, size_t cols, const char *from,
                             ssb4d_err *err)
{
    if (!rows)
        return SSB4D_OK;
    if (info->scan[k].rows && (info->scan[k].rows != rows || info->scan[k].cols != cols))
        return ssb_fail(err, SSB4D_EFORMAT, "two %s disagree (%zux%zu and %zux%zu, rows x columns)",
                        from, info->scan[k].rows, info->scan[k].cols, rows, cols);
    info->scan[k].rows = rows;
    info->scan[k].cols = cols;
    info->scan[k].from = from;
    return SSB4D_OK;
}

ssb4d_status empad_info_read(const empad_xml *doc, empad_info *info, ssb4d_err *err)
{
    memset(info, 0, sizeof *info);
    info->high_voltage_V = info->camera_length_m = info->exposure_ms = NAN;
    info->diffraction_angle_rad = info->scan_size = NAN;
    if (!doc->n_nodes || strcmp(doc->nodes[0].name, "root") != 0)
        return ssb_fail(err, SSB4D_EFORMAT, "the document element is <%s>, not the <root> of an "
                        "EMPAD acquisition", doc->n_nodes ? doc->nodes[0].name : "");
    ssb4d_status st = SSB4D_OK;
    size_t pix_r = 0, pix_c = 0;
    for (int c = doc->nodes[0].first_child; c >= 0 && !st; c = doc->nodes[c].next) {
        const empad_xml_node *e = &doc->nodes[c];
        if (!strcmp(e->name, "raw_file")) {
            const char *f = empad_xml_attr_value(doc, c, "filename");
            if (!f || !*f)
                continue;
            if (strlen(f) >= sizeof info->raw_name)
                return ssb_fail(err, SSB4D_EFORMAT, "<raw_file filename> is longer than %zu bytes",
                                sizeof info->raw_name - 1);
            if (info->raw_name[0] && strcmp(info->raw_name, f) != 0)
                return ssb_fail(err, SSB4D_EFORMAT, "two <raw_file> elements name different files "
                                "(%s and %s)", info->raw_name, f);
            strcpy(info->raw_name, f);
        } else if (!strcmp(e->name, "type")) {
            size_t n;
            const char *s = trimmed(e, &n);
            if (n == 6 && !memcmp(s, "series", 6))
                info->is_series = 1;
            else if (!(n == 4 && !memcmp(s, "scan", 4)))
                return ssb_fail(err, SSB4D_EFORMAT, "<type> is '%.*s' (scan or series expected)",
                                (int)(n < 40 ? n : 40), s);
        } else if (!strcmp(e->name, "count")) {
            st = need_count(doc, c, &info->series_count, err);
        } else if (!strcmp(e->name, "pix_x") || !strcmp(e->name, "pix_y")) {
            /* read as a pair below (refusing duplicates that disagree) */
            size_t v;
            if ((st = need_count(doc, c, &v, err)))
                break;
            size_t *slot = e->name[4] == 'x' ? &pix_c : &pix_r;
            if (*slot && *slot != v)
                return ssb_fail(err, SSB4D_EFORMAT, "two <%s> disagree (%zu and %zu)", e->name,
                                *slot, v);
            *slot = v;
        } else if (!strcmp(e->name, "scan_parameters")) {
            const char *mode = empad_xml_attr_value(doc, c, "mode");
            int k = !mode || !strcmp(mode, "acquire") ? 0 : !strcmp(mode, "search") ? 2 : -1;
            int sc = empad_xml_child(doc, c, "series_count");
            if (sc >= 0) {
                size_t v;
                if ((st = need_count(doc, sc, &v, err)))
                    break;
                info->is_series = 1;
                info->series_count = v;
            }
            if (k < 0)
                continue;
            size_t r, cl;
            if ((st = scan_pair(doc, c, "scan_resolution_x", "scan_resolution_y", &r, &cl, err)))
                break;
            st = set_scan(info, k, r, cl, k ? "<scan_parameters mode=\"search\">"
                                             : "<scan_parameters mode=\"acquire\">", err);
            if (k == 0 && !isfinite(info->scan_size))
                info->scan_size = node_number(doc, empad_xml_child(doc, c, "scan_size"));
        } else if (!strcmp(e->name, "exposure_time")) {
            info->exposure_ms = node_number(doc, c);
        } else if (!strcmp(e->name, "timestamp")) {
            const char *iso = empad_xml_attr_value(doc, c, "isoformat");
            if (iso && strlen(iso) < sizeof info->timestamp)
                strcpy(info->timestamp, iso);
        } else if (!strcmp(e->name, "iom_measurements")) {
            for (int m = e->first_child; m >= 0; m = doc->nodes[m].next) {
                const char *nm = doc->nodes[m].name;
                if (!strcmp(nm, "high_voltage") || !strcmp(nm, "source.get_voltage"))
                    info->high_voltage_V = node_number(doc, m);
                else if (!strcmp(nm, "nominal_camera_length") || !strcmp(nm, "optics.get_cameralength"))
                    info->camera_length_m = node_number(doc, m);
                else if (!strcmp(nm, "calibrated_diffraction_angle"))
                    info->diffraction_angle_rad = node_number(doc, m);
            }
        }
    }
    if (st)
        return st;
    if ((pix_r == 0) != (pix_c == 0))
        return ssb_fail(err, SSB4D_EFORMAT, "<%s> without <%s>", pix_r ? "pix_y" : "pix_x",
                        pix_r ? "pix_x" : "pix_y");
    if (pix_r) {
        info->scan[1].rows = pix_r;
        info->scan[1].cols = pix_c;
        info->scan[1].from = "<pix_x>, <pix_y>";
    }
    return SSB4D_OK;
}

ssb4d_status empad_parse(const char *buf, size_t len, empad_info *info, ssb4d_err *err)
{
    empad_xml doc;
    ssb4d_status st = empad_xml_parse(buf, len, &doc, err);
    if (st)
        return st;
    st = empad_info_read(&doc, info, err);
    empad_xml_free(&doc);
    return st;
}
