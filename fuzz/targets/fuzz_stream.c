/* fuzz_stream.c — one count stream (codec §5–§6): input = selector byte, n (1..512) from two
 * bytes (LE, n = 1 + v % 512), then the stream bytes.
 *
 * Checks, besides the sanitizers: the library decoder agrees with a decoder written here from the
 * spec (differential); maxval 255 and 65535 agree; decode_add equals decode; whatever decodes
 * re-encodes within qem_stream_bound, and the re-encoded stream decodes to the same samples and
 * re-encodes to the same bytes. The spatial packer round-trips the same bytes as values. */
#include "codec/codec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_stream: check failed: %s (line %d)\n", #c, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static uint32_t start_of(int m, int s)
{
    uint32_t c = 0;
    for (int j = 0; j < s; j++)
        c += qem_rans_freq[m][j];
    return c;
}

/* §6.3 and §5, literally; returns 1 if the stream decodes. */
static int spec_decode(uint8_t sel, const uint8_t *b, size_t len, size_t n, uint32_t maxval,
                       uint16_t *out)
{
    if (sel < 64) {
        if (len < 4)
            return 0;
        uint32_t x = b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
        size_t pos = 4;
        if (x < (1u << 23) || x >= (1u << 31))
            return 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t slot = x & 1023;
            int s = 0;
            while (start_of(sel, s) + qem_rans_freq[sel][s] <= slot)
                s++;
            x = qem_rans_freq[sel][s] * (x >> 10) + slot - start_of(sel, s);
            while (x < (1u << 23)) {
                if (pos >= len)
                    return 0;
                x = x << 8 | b[pos++];
            }
            uint32_t v = (uint32_t)s;
            if (s == 32) {
                if (pos + 2 > len)
                    return 0;
                v = b[pos] | (uint32_t)b[pos + 1] << 8;
                pos += 2;
            }
            if (v > maxval)
                return 0;
            out[i] = (uint16_t)v;
        }
        return x == (1u << 23) && pos == len;
    }
    if (sel == 253) {
        memset(out, 0, n * 2);
        return len == 0;
    }
    if (sel == 255) {
        if (len != 2 || (uint32_t)(b[0] | b[1] << 8) > maxval)
            return 0;
        for (size_t i = 0; i < n; i++)
            out[i] = (uint16_t)(b[0] | b[1] << 8);
        return 1;
    }
    if (sel == 254) {
        if (len != 2 * n)
            return 0;
        for (size_t i = 0; i < n; i++) {
            out[i] = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
            if (out[i] > maxval)
                return 0;
        }
        return 1;
    }
    if (sel == 252) {
        if (len % 2)
            return 0;
        memset(out, 0, n * 2);
        long prev = -1;
        for (size_t i = 0; i < len; i += 2) {
            uint32_t e = b[i] | (uint32_t)b[i + 1] << 8, p = e >> 7;
            if ((long)p <= prev || p >= n || (e & 127) + 1 > maxval)
                return 0;
            out[p] = (uint16_t)((e & 127) + 1);
            prev = (long)p;
        }
        return 1;
    }
    return 0;
}

static void spatial(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    unsigned w = data[0] % 33;
    size_t n = 1 + data[1] % 512;
    uint32_t v[512], back[512], words[512];
    for (size_t i = 0; i < n; i++) {
        uint32_t x = 0;
        for (size_t b = 0; b < 4; b++)
            x = x << 8 | (2 + 4 * i + b < size ? data[2 + 4 * i + b] : 0);
        v[i] = w == 32 ? x : w == 0 ? 0 : x & ((1u << w) - 1);
    }
    size_t nw = qem_spatial_words(n, w);
    CHECK(nw == (n * w + 31) / 32);
    qem_spatial_pack(v, n, w, words);
    qem_spatial_unpack(words, n, w, back);
    CHECK(memcmp(v, back, n * sizeof *v) == 0);
    uint32_t mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = v[i] > mx ? v[i] : mx;
    CHECK(qem_bit_width(mx) <= w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    spatial(data, size);
    uint8_t sel = data[0];
    size_t n = 1 + ((size_t)(data[1] | data[2] << 8) % 512);
    /* A private copy of exactly the stream bytes: ASan sees any read past the end. */
    size_t len = size - 3;
    uint8_t *buf = malloc(len ? len : 1);
    memcpy(buf, data + 3, len);
    uint16_t out8[512], out16[512], ref[512];
    qem_stream_status s8 = qem_stream_decode(sel, buf, len, n, 255, out8);
    qem_stream_status s16 = qem_stream_decode(sel, buf, len, n, 65535, out16);
    CHECK((unsigned)s8 <= QEM_STREAM_RANGE && (unsigned)s16 <= QEM_STREAM_RANGE);
    CHECK(qem_stream_strerror(s16) != NULL);
    if (s8 == QEM_STREAM_OK)
        CHECK(s16 == QEM_STREAM_OK && memcmp(out8, out16, n * 2) == 0);

    /* Differential: the spec decoder. The library may refuse rANS/sparse streams longer than 2n
     * (§5 allows it); otherwise both must agree. */
    int r16 = spec_decode(sel, buf, len, n, 65535, ref);
    if (s16 == QEM_STREAM_OK)
        CHECK(r16 && memcmp(out16, ref, n * 2) == 0);
    else
        CHECK(!r16 || (s16 == QEM_STREAM_BAD_LENGTH && len > 2 * n));
    int r8 = spec_decode(sel, buf, len, n, 255, ref);
    CHECK((s8 == QEM_STREAM_OK) == (r8 && s16 == QEM_STREAM_OK));

    uint64_t acc[512];
    for (size_t i = 0; i < n; i++)
        acc[i] = i;
    qem_stream_status sa = qem_stream_decode_add(sel, buf, len, n, 65535, acc);
    CHECK((sa == QEM_STREAM_OK) == (s16 == QEM_STREAM_OK));
    if (sa == QEM_STREAM_OK)
        for (size_t i = 0; i < n; i++)
            CHECK(acc[i] == i + out16[i]);

    if (s16 == QEM_STREAM_OK) {
        /* Re-encode into exactly the bound, decode again, re-encode again. */
        size_t bound = qem_stream_bound(n);
        uint8_t *e1 = malloc(bound), *e2 = malloc(bound), sel1, sel2;
        size_t l1 = qem_stream_encode(out16, n, e1, &sel1);
        CHECK(l1 <= bound);
        CHECK(sel1 == QEM_SEL_CONST || l1 <= 2 * n); /* §5: writers keep streams <= 2n */
        uint16_t again[512];
        CHECK(qem_stream_decode(sel1, e1, l1, n, 65535, again) == QEM_STREAM_OK);
        CHECK(memcmp(again, out16, n * 2) == 0);
        size_t l2 = qem_stream_encode(again, n, e2, &sel2);
        CHECK(sel1 == sel2 && l1 == l2 && memcmp(e1, e2, l1) == 0);
        free(e1);
        free(e2);
    }
    free(buf);
    return 0;
}
