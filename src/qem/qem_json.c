/* qem_json.c — strict parsing of untrusted JSON (cJSON underneath, plus the checks cJSON does
 * not make: duplicate keys, JSON number grammar, NaN/Infinity, UTF-8, \u0000) and the
 * canonical compact printer used for .qem headers. */
#include "qem/qem_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- strict parsing ---- */

/* Length of the UTF-8 sequence at p (n bytes left), 0 if invalid (overlong, surrogate, > U+10FFFF). */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* Length of the JSON number at p (RFC 8259 grammar), 0 if it is not one. */
static size_t number_len(const unsigned char *p, size_t n)
{
    size_t i = 0;
    if (i < n && p[i] == '-')
        i++;
    if (i >= n || !is_digit(p[i]))
        return 0;
    if (p[i] == '0')
        i++;
    else
        while (i < n && is_digit(p[i]))
            i++;
    if (i < n && p[i] == '.') {
        i++;
        if (i >= n || !is_digit(p[i]))
            return 0;
        while (i < n && is_digit(p[i]))
            i++;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-'))
            i++;
        if (i >= n || !is_digit(p[i]))
            return 0;
        while (i < n && is_digit(p[i]))
            i++;
    }
    if (i < n && (is_digit(p[i]) || p[i] == '.' || p[i] == 'e' || p[i] == 'E' || p[i] == '+' ||
                  p[i] == '-'))
        return 0;
    return i;
}

/* The byte-level checks cJSON does not make. */
static int prescan(const unsigned char *s, size_t n, char *why, size_t why_len)
{
    if (n >= 3 && s[0] == 0xEF && s[1] == 0xBB && s[2] == 0xBF) {
        snprintf(why, why_len, "JSON starts with a byte-order mark");
        return 0;
    }
    int in_str = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c < 0x20 && !(!in_str && (c == ' ' || c == '\t' || c == '\n' || c == '\r'))) {
            snprintf(why, why_len, "control character 0x%02x at byte %zu of the JSON", c, i);
            return 0;
        }
        if (c >= 0x80) {
            size_t l = utf8_len(s + i, n - i);
            if (!l) {
                snprintf(why, why_len, "invalid UTF-8 at byte %zu of the JSON", i);
                return 0;
            }
            if (!in_str) {
                snprintf(why, why_len, "unexpected character at byte %zu of the JSON", i);
                return 0;
            }
            i += l;
            continue;
        }
        if (in_str) {
            if (c == '"') {
                in_str = 0;
            } else if (c == '\\') {
                if (i + 1 < n && s[i + 1] == 'u' && i + 5 < n && s[i + 2] == '0' && s[i + 3] == '0' &&
                    s[i + 4] == '0' && s[i + 5] == '0') {
                    snprintf(why, why_len, "\\u0000 in a JSON string at byte %zu", i);
                    return 0;
                }
                i += 2; /* the escaped character (cJSON checks the escape itself) */
                continue;
            }
            i++;
            continue;
        }
        if (c == '"') {
            in_str = 1;
        } else if (c == '-' || is_digit(c)) {
            size_t l = number_len(s + i, n - i);
            if (!l) {
                snprintf(why, why_len, "malformed number at byte %zu of the JSON", i);
                return 0;
            }
            i += l;
            continue;
        } else if (c == 'N' || c == 'I') {
            snprintf(why, why_len, "NaN/Infinity at byte %zu: not JSON and not allowed", i);
            return 0;
        }
        i++;
    }
    return 1;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every number finite, no duplicate key in any object. 1 = fine. */
static int walk(const cJSON *j, char *why, size_t why_len)
{
    if (cJSON_IsNumber(j) && !isfinite(j->valuedouble)) {
        snprintf(why, why_len, "number out of range (not finite)");
        return 0;
    }
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j))
        return 1;
    size_t n = 0;
    for (const cJSON *c = j->child; c; c = c->next)
        n++;
    if (cJSON_IsObject(j) && n > 1) {
        const char **names = malloc(n * sizeof *names);
        if (!names) {
            snprintf(why, why_len, "out of memory while checking the JSON");
            return 0;
        }
        size_t i = 0;
        for (const cJSON *c = j->child; c; c = c->next)
            names[i++] = c->string ? c->string : "";
        qsort(names, n, sizeof *names, cmp_names);
        for (i = 1; i < n; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                snprintf(why, why_len, "duplicate key \"%.80s\" in a JSON object", names[i]);
                free(names);
                return 0;
            }
        free(names);
    }
    for (const cJSON *c = j->child; c; c = c->next)
        if (!walk(c, why, why_len))
            return 0;
    return 1;
}

cJSON *qem_json_parse_strict(const char *text, size_t len, char *why, size_t why_len)
{
    if (!prescan((const unsigned char *)text, len, why, why_len))
        return NULL;
    /* cJSON wants a NUL-terminated buffer; the prescan guarantees no NUL inside. */
    char *copy = malloc(len + 1);
    if (!copy) {
        snprintf(why, why_len, "out of memory (%zu bytes of JSON)", len);
        return NULL;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(copy, &end, 1);
    if (!j) {
        size_t at = end && end >= copy && end <= copy + len ? (size_t)(end - copy) : 0;
        snprintf(why, why_len, "not valid JSON (near byte %zu)", at);
        free(copy);
        return NULL;
    }
    free(copy);
    if (!walk(j, why, why_len)) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int qem_json_uint(const cJSON *j, double lo, double hi, uint64_t *v)
{
    if (!cJSON_IsNumber(j))
        return 0;
    double d = j->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < lo || d > hi || d > QEM_MAX_JSON_INT)
        return 0;
    if (v)
        *v = (uint64_t)d;
    return 1;
}

void qem_hex(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* ---- canonical printer ---- */

typedef struct {
    char *p;
    size_t n, cap;
    int fail;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->fail)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->fail = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void put_u16esc(sbuf *b, unsigned u)
{
    static const char digits[] = "0123456789abcdef";
    char t[6] = {'\\', 'u', digits[(u >> 12) & 15], digits[(u >> 8) & 15], digits[(u >> 4) & 15], digits[u & 15]};
    put(b, t, 6);
}

/* A JSON string with non-ASCII written as \uXXXX (surrogate pairs above U+FFFF), like Python's
 * json.dumps(ensure_ascii=True). Invalid UTF-8 becomes U+FFFD. */
static void put_string(sbuf *b, const char *str)
{
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    size_t n = strlen((const char *)s);
    put(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (c == '"')
                put(b, "\\\"", 2);
            else if (c == '\\')
                put(b, "\\\\", 2);
            else if (c == '\n')
                put(b, "\\n", 2);
            else if (c == '\r')
                put(b, "\\r", 2);
            else if (c == '\t')
                put(b, "\\t", 2);
            else if (c == '\b')
                put(b, "\\b", 2);
            else if (c == '\f')
                put(b, "\\f", 2);
            else if (c < 0x20)
                put_u16esc(b, c);
            else
                put(b, (const char *)s + i, 1);
            i++;
            continue;
        }
        size_t l = utf8_len(s + i, n - i);
        if (!l) {
            put_u16esc(b, 0xFFFD);
            i++;
            continue;
        }
        unsigned cp = l == 2 ? (c & 0x1F) : l == 3 ? (c & 0x0F) : (c & 0x07);
        for (size_t k = 1; k < l; k++)
            cp = cp << 6 | (s[i + k] & 0x3F);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            put_u16esc(b, 0xD800 + (cp >> 10));
            put_u16esc(b, 0xDC00 + (cp & 0x3FF));
        } else {
            put_u16esc(b, cp);
        }
        i += l;
    }
    put(b, "\"", 1);
}

static void put_number(sbuf *b, double d)
{
    char t[40];
    if (!isfinite(d)) {
        b->fail = 1;
        return;
    }
    if (d == floor(d) && fabs(d) < QEM_MAX_JSON_INT) {
        snprintf(t, sizeof t, "%.0f", d);
    } else {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(t, sizeof t, "%.*g", prec, d);
            if (strtod(t, NULL) == d)
                break;
        }
    }
    puts_(b, t);
}

static int cmp_items(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

static void put_value(sbuf *b, const cJSON *j)
{
    if (b->fail)
        return;
    if (cJSON_IsRaw(j)) {
        puts_(b, j->valuestring ? j->valuestring : "null");
    } else if (cJSON_IsNull(j)) {
        puts_(b, "null");
    } else if (cJSON_IsTrue(j)) {
        puts_(b, "true");
    } else if (cJSON_IsFalse(j)) {
        puts_(b, "false");
    } else if (cJSON_IsNumber(j)) {
        put_number(b, j->valuedouble);
    } else if (cJSON_IsString(j)) {
        put_string(b, j->valuestring);
    } else if (cJSON_IsArray(j)) {
        put(b, "[", 1);
        for (const cJSON *c = j->child; c; c = c->next) {
            put_value(b, c);
            if (c->next)
                put(b, ",", 1);
        }
        put(b, "]", 1);
    } else if (cJSON_IsObject(j)) {
        size_t n = 0;
        for (const cJSON *c = j->child; c; c = c->next)
            n++;
        const cJSON **items = n ? malloc(n * sizeof *items) : NULL;
        if (n && !items) {
            b->fail = 1;
            return;
        }
        size_t i = 0;
        for (const cJSON *c = j->child; c; c = c->next)
            items[i++] = c;
        if (n > 1)
            qsort(items, n, sizeof *items, cmp_items);
        put(b, "{", 1);
        for (i = 0; i < n; i++) {
            put_string(b, items[i]->string);
            put(b, ":", 1);
            put_value(b, items[i]);
            if (i + 1 < n)
                put(b, ",", 1);
        }
        put(b, "}", 1);
        free(items);
    } else {
        b->fail = 1; /* cJSON_Invalid */
    }
}

char *qem_json_print_canonical(const cJSON *j, size_t *len)
{
    sbuf b = {0};
    put_value(&b, j);
    if (b.fail) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.n;
    return b.p;
}
