/* codec.h — the count-ANS stream codec of .qem v1 (codec "runtime-column-rans-spatial-v2",
 * ../shared/spec/qem-format.md §5–§8): one stream = one detector pixel over one block of at most
 * 512 consecutive scans. Pure functions on caller buffers: no allocation, no global state
 * (the frequency table is constant data). */
#ifndef SSB4D_CODEC_CODEC_H
#define SSB4D_CODEC_CODEC_H
#include <stddef.h>
#include <stdint.h>

#define QEM_INTERVAL 512      /* scans per block */
#define QEM_MODELS 64         /* rANS frequency-table rows, selectors 0..63 */
#define QEM_SYMBOLS 33        /* 0..31 literal, 32 = escape (value follows as u16 LE) */
#define QEM_SCALE_BITS 10     /* frequencies sum to 1024 */
#define QEM_SEL_SPARSE 252
#define QEM_SEL_ZERO 253
#define QEM_SEL_LITERAL 254
#define QEM_SEL_CONST 255

/* The normative table (qem-rans-tables-v1.json): freq[m][s] >= 1, each row sums to 1024. */
extern const uint16_t qem_rans_freq[QEM_MODELS][QEM_SYMBOLS];

/* Stream decode results. 0 = ok; the others name what is wrong (qem_stream_strerror). */
typedef enum {
    QEM_STREAM_OK = 0,
    QEM_STREAM_BAD_SELECTOR,   /* selector 64..251 */
    QEM_STREAM_BAD_LENGTH,     /* selector/length mismatch (§5) */
    QEM_STREAM_BAD_STATE,      /* rANS initial state outside [2^23, 2^31) */
    QEM_STREAM_TRUNCATED,      /* rANS read past the end of the stream */
    QEM_STREAM_BAD_FINAL,      /* trailing bytes or final state != 2^23 */
    QEM_STREAM_SPARSE_ORDER,   /* sparse positions not strictly increasing or >= n */
    QEM_STREAM_RANGE,          /* a decoded value exceeds the dtype maximum */
} qem_stream_status;

const char *qem_stream_strerror(qem_stream_status s);

/* Largest number of bytes qem_stream_encode may write for n samples (n <= 512). */
size_t qem_stream_bound(size_t n);

/* Encodes samples v[0..n) (1 <= n <= 512) with the reference model choice (§7), so that the
 * bytes equal the reference writer's. Writes at most qem_stream_bound(n) bytes to out, sets
 * *selector and returns the stream length. */
size_t qem_stream_encode(const uint16_t *v, size_t n, uint8_t *out, uint8_t *selector);

/* Decodes one stream of n samples (1 <= n <= 512) with every check of §5/§6.3/§11 rules 16–18:
 * values above maxval (255 or 65535) are an error. out has room for n values. */
qem_stream_status qem_stream_decode(uint8_t selector, const uint8_t *buf, size_t len, size_t n,
                                    uint32_t maxval, uint16_t *out);

/* Same checks, but adds the decoded values into acc[0..n) (exact totals without a buffer). */
qem_stream_status qem_stream_decode_add(uint8_t selector, const uint8_t *buf, size_t len, size_t n,
                                        uint32_t maxval, uint64_t *acc);

/* Spatial index (§8). Bit length of the largest value (0 for 0). */
unsigned qem_bit_width(uint32_t max);
/* u32 words of a stream of n values of width w: ceil(n*w/32). */
size_t qem_spatial_words(size_t n, unsigned w);
/* Packs v[0..n) LSB-first at width w (w <= 32) into qem_spatial_words(n, w) words. */
void qem_spatial_pack(const uint32_t *v, size_t n, unsigned w, uint32_t *words);
/* Inverse of qem_spatial_pack. */
void qem_spatial_unpack(const uint32_t *words, size_t n, unsigned w, uint32_t *v);
/* F = ceil(R/8)*ceil(C/8) + ceil(R/32)*ceil(C/32). */
size_t qem_spatial_fields(size_t det_rows, size_t det_cols);
/* field_of[k] for 8x8 tiles and for 32x32 tiles: the two fields detector pixel k adds to. */
void qem_spatial_field_map(size_t det_rows, size_t det_cols, uint32_t *field8, uint32_t *field32);
#endif
