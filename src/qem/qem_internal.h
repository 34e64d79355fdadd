/* qem_internal.h — what the .qem reader, writer and metadata code share: the fixed numbers of
 * the container, little-endian loads/stores through memcpy (the body start is generally not
 * 8-aligned in the file), strict JSON helpers and the canonical header printer. */
#ifndef SSB4D_QEM_INTERNAL_H
#define SSB4D_QEM_INTERNAL_H
#include "qem/qem.h"

#include <stdint.h>
#include <string.h>

#define QEM_MAGIC "QEMDATA1"
#define QEM_ENVELOPE 56u
#define QEM_MAX_HEADER (16u << 20)      /* 16 MiB */
#define QEM_HASH_BLOCK ((size_t)1 << 26) /* body checksums cover 64 MiB blocks */
#define QEM_CODEC "runtime-column-rans-spatial-v2"
#define QEM_CONTAINER "quantem.qem"
#define QEM_SCI_SCHEMA "quantem.scientific-metadata/2"
#define QEM_MAX_DIM ((size_t)1 << 24)   /* every shape entry is < 2^24 */
#define QEM_MAX_JSON_INT 9007199254740992.0 /* 2^53: larger integers are not exact doubles */

/* Element sizes of the six per-chunk arrays (§4). */
static const unsigned qem_array_item[6] = {1, 4, 1, 4, 8, 1};

static inline uint32_t qem_ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline uint64_t qem_ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void qem_st32(uint8_t *p, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}

static inline void qem_st64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

/* Parses len bytes of untrusted JSON strictly: UTF-8, no control characters or \u0000, one
 * top-level value with nothing after it, every number finite, no duplicate key in any object.
 * Returns the tree, or NULL with a one-line reason in why (no file name). */
cJSON *qem_json_parse_strict(const char *text, size_t len, char *why, size_t why_len);

/* 1 if j is a JSON number holding an integer in [lo, hi] (hi <= 2^53); stores it in *v. */
int qem_json_uint(const cJSON *j, double lo, double hi, uint64_t *v);

/* Compact JSON with keys sorted at every level, non-ASCII escaped as \uXXXX, doubles in the
 * shortest form that round-trips (integral values without a fraction), raw items verbatim.
 * Returns a malloc'd NUL-terminated string (length in *len) or NULL when out of memory or when
 * the tree holds a non-finite number. */
char *qem_json_print_canonical(const cJSON *j, size_t *len);

/* Lowercase hex of n bytes into out (2n+1 chars). */
void qem_hex(const uint8_t *b, size_t n, char *out);
#endif
