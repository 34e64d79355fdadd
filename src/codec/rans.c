/* rans.c — one count stream: model choice, encoder and checking decoder (qem-format.md §5–§7).
 *
 * rANS state x lives in [2^23, 2^31); frequencies are 10-bit. The encoder runs last sample to
 * first and its emitted bytes are reversed, so the decoder reads forward: per sample first the
 * renormalisation bytes, then (for the escape symbol 32) the value as a u16 LE. */
#include "codec/codec.h"
#include "codec/rans_tables.h"

#include <math.h>
#include <string.h>

#define RANS_L (1u << 23)
#define RANS_HI (1u << 31)
#define ESCAPE 32u

const char *qem_stream_strerror(qem_stream_status s)
{
    switch (s) {
    case QEM_STREAM_OK: return "ok";
    case QEM_STREAM_BAD_SELECTOR: return "invalid model selector";
    case QEM_STREAM_BAD_LENGTH: return "stream length does not match its selector";
    case QEM_STREAM_BAD_STATE: return "rANS initial state outside [2^23, 2^31)";
    case QEM_STREAM_TRUNCATED: return "stream ends before all samples are decoded";
    case QEM_STREAM_BAD_FINAL: return "stream has trailing data or an invalid final state";
    case QEM_STREAM_SPARSE_ORDER: return "sparse event positions not strictly increasing or past the block";
    case QEM_STREAM_RANGE: return "decoded value exceeds the file's dtype";
    }
    return "unknown stream error";
}

/* Every chosen encoding is at most 2n bytes: rANS is kept only when shorter than the literal,
 * sparse only when shorter than that, and a constant takes 2 bytes. */
size_t qem_stream_bound(size_t n) { return n < 1 ? 2 : 2 * n; }

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline void wr16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v & 255);
    p[1] = (uint8_t)(v >> 8);
}

/* §7 step 2, in IEEE double and in exactly the reference's order of operations. */
static int choose_model(const uint16_t *v, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i] < ESCAPE ? v[i] : ESCAPE;
    double mean = (double)sum / (double)n;
    if (mean < 0.002)
        mean = 0.002;
    double r = (log(mean / 0.002) * 63.0) / log(16000.0);
    double m = nearbyint(r);
    if (m < 0)
        m = 0;
    if (m > 63)
        m = 63;
    return (int)m;
}

/* rANS-encodes v with model m into out; returns the length, or 0 when it would not be shorter
 * than `limit` bytes (the caller then uses the literal form). */
static size_t rans_encode(const uint16_t *v, size_t n, int m, uint8_t *out, size_t limit)
{
    /* Emission buffer, filled backwards from its end so no final reversal pass is needed:
     * at most 2 renormalisation bytes and 2 escape bytes per sample. */
    uint8_t buf[4 * QEM_INTERVAL + 8];
    uint8_t *e = buf + sizeof buf;
    const uint16_t *freq = qem_rans_freq[m], *start = qem_rans_start[m];
    uint32_t x = RANS_L;
    for (size_t i = n; i-- > 0;) {
        uint32_t val = v[i], s = val < ESCAPE ? val : ESCAPE;
        uint32_t f = freq[s], c = start[s];
        if (val >= ESCAPE) { /* high byte first into E, so the decoder reads low, high */
            *--e = (uint8_t)(val >> 8);
            *--e = (uint8_t)(val & 255);
        }
        uint32_t x_max = (RANS_L >> QEM_SCALE_BITS) << 8;
        x_max *= f;
        while (x >= x_max) {
            *--e = (uint8_t)(x & 255);
            x >>= 8;
        }
        x = (x / f) * 1024u + (x % f) + c;
        if ((size_t)(buf + sizeof buf - e) + 4 >= limit)
            return 0;
    }
    size_t len = 4 + (size_t)(buf + sizeof buf - e);
    if (len >= limit)
        return 0;
    out[0] = (uint8_t)(x & 255);
    out[1] = (uint8_t)(x >> 8 & 255);
    out[2] = (uint8_t)(x >> 16 & 255);
    out[3] = (uint8_t)(x >> 24);
    memcpy(out + 4, e, len - 4);
    return len;
}

size_t qem_stream_encode(const uint16_t *v, size_t n, uint8_t *out, uint8_t *selector)
{
    uint16_t vmin = v[0], vmax = v[0];
    size_t nnz = 0;
    for (size_t i = 0; i < n; i++) {
        vmin = v[i] < vmin ? v[i] : vmin;
        vmax = v[i] > vmax ? v[i] : vmax;
        nnz += v[i] != 0;
    }
    if (vmin == vmax) { /* §7 step 1 */
        if (vmax == 0) {
            *selector = QEM_SEL_ZERO;
            return 0;
        }
        *selector = QEM_SEL_CONST;
        wr16(out, vmax);
        return 2;
    }
    int m = choose_model(v, n);
    size_t len = rans_encode(v, n, m, out, 2 * n);
    if (len) {
        *selector = (uint8_t)m;
    } else { /* step 3: the literal is no longer than rANS */
        *selector = QEM_SEL_LITERAL;
        len = 2 * n;
    }
    if (vmax <= 128 && 2 * nnz < len) { /* step 4: sparse events */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (v[i])
                wr16(out + 2 * k++, (uint32_t)(i << 7 | (v[i] - 1u)));
        *selector = QEM_SEL_SPARSE;
        return 2 * nnz;
    }
    if (*selector == QEM_SEL_LITERAL)
        for (size_t i = 0; i < n; i++)
            wr16(out + 2 * i, v[i]);
    return len;
}

/* The decoder, shared by decode (store) and decode_add (accumulate); `add` is a constant at
 * every call site so the compiler emits two specialised loops. */
static inline __attribute__((always_inline)) qem_stream_status
decode_impl(uint8_t sel, const uint8_t *buf, size_t len, size_t n, uint32_t maxval, uint16_t *out,
            uint64_t *acc, int add)
{
#define EMIT(i, val) do { if (add) acc[i] += (val); else out[i] = (uint16_t)(val); } while (0)
    if (n == 0 || n > QEM_INTERVAL)
        return QEM_STREAM_BAD_LENGTH;
    switch (sel) {
    case QEM_SEL_ZERO:
        if (len != 0)
            return QEM_STREAM_BAD_LENGTH;
        if (!add)
            memset(out, 0, n * sizeof *out);
        return QEM_STREAM_OK;
    case QEM_SEL_CONST: {
        if (len != 2)
            return QEM_STREAM_BAD_LENGTH;
        uint32_t c = rd16(buf);
        if (c > maxval)
            return QEM_STREAM_RANGE;
        for (size_t i = 0; i < n; i++)
            EMIT(i, c);
        return QEM_STREAM_OK;
    }
    case QEM_SEL_LITERAL:
        if (len != 2 * n)
            return QEM_STREAM_BAD_LENGTH;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = rd16(buf + 2 * i);
            if (c > maxval)
                return QEM_STREAM_RANGE;
            EMIT(i, c);
        }
        return QEM_STREAM_OK;
    case QEM_SEL_SPARSE: {
        if (len & 1 || len > 2 * n)
            return QEM_STREAM_BAD_LENGTH;
        if (!add)
            memset(out, 0, n * sizeof *out);
        size_t next = 0; /* smallest allowed position */
        for (size_t k = 0; k < len; k += 2) {
            uint32_t e = rd16(buf + k), pos = e >> 7, val = (e & 127) + 1;
            if (pos < next || pos >= n)
                return QEM_STREAM_SPARSE_ORDER;
            if (val > maxval)
                return QEM_STREAM_RANGE;
            EMIT(pos, val);
            next = pos + 1;
        }
        return QEM_STREAM_OK;
    }
    default:
        break;
    }
    if (sel >= QEM_MODELS)
        return QEM_STREAM_BAD_SELECTOR;
    if (len < 4)
        return QEM_STREAM_BAD_LENGTH;
    const uint16_t *freq = qem_rans_freq[sel], *start = qem_rans_start[sel];
    const uint8_t *sym_of = qem_rans_slot_symbol[sel];
    uint32_t x = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 | (uint32_t)buf[2] << 16 |
                 (uint32_t)buf[3] << 24;
    if (x < RANS_L || x >= RANS_HI)
        return QEM_STREAM_BAD_STATE;
    size_t pos = 4;
    for (size_t i = 0; i < n; i++) {
        uint32_t slot = x & 1023u, s = sym_of[slot];
        x = freq[s] * (x >> QEM_SCALE_BITS) + slot - start[s];
        while (x < RANS_L) {
            if (pos >= len)
                return QEM_STREAM_TRUNCATED;
            x = x << 8 | buf[pos++];
        }
        uint32_t val = s;
        if (s == ESCAPE) {
            if (pos + 2 > len)
                return QEM_STREAM_TRUNCATED;
            val = rd16(buf + pos);
            pos += 2;
            if (val > maxval)
                return QEM_STREAM_RANGE;
        }
        EMIT(i, val);
    }
    if (x != RANS_L || pos != len)
        return QEM_STREAM_BAD_FINAL;
    return QEM_STREAM_OK;
#undef EMIT
}

qem_stream_status qem_stream_decode(uint8_t selector, const uint8_t *buf, size_t len, size_t n,
                                    uint32_t maxval, uint16_t *out)
{
    return decode_impl(selector, buf, len, n, maxval, out, NULL, 0);
}

qem_stream_status qem_stream_decode_add(uint8_t selector, const uint8_t *buf, size_t len, size_t n,
                                        uint32_t maxval, uint64_t *acc)
{
    return decode_impl(selector, buf, len, n, maxval, NULL, acc, 1);
}
