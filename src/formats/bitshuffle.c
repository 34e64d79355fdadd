/* bitshuffle.c — bit transpose of blocks and the bitshuffle-LZ4 chunk codec (see bitshuffle.h).
 * Scalar: eight bit rows are gathered into one 64-bit word and transposed as an 8x8 bit matrix.
 * The inverse (the one reading files needs) also has an SSE2 path, x86-64's baseline. */
#include "formats/bitshuffle.h"

#include "common/err.h"

#include <limits.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>

size_t bshuf_default_block_size(size_t elem_size)
{
    size_t b = elem_size ? 8192 / elem_size : 0;
    b -= b % 8;
    return b < 128 ? 128 : b;
}

/* 8x8 bit matrix in a word, byte r = row r, bit c = column c: returns the transpose
 * (result byte c, bit r = input byte r, bit c), by swapping 1x1, 2x2 then 4x4 sub-blocks. */
static inline uint64_t transpose8(uint64_t x)
{
    uint64_t t;
    t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
    x ^= t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
    x ^= t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
    x ^= t ^ (t << 28);
    return x;
}

void bshuf_shuffle_block(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size)
{
    size_t nb = n / 8; /* bytes per bit row */
    for (size_t j = 0; j < elem_size; j++)
        for (size_t g = 0; g < nb; g++) {
            /* byte j of elements 8g..8g+7, element m in byte m of the word */
            uint64_t x = 0;
            for (size_t m = 0; m < 8; m++)
                x |= (uint64_t)in[(8 * g + m) * elem_size + j] << (8 * m);
            x = transpose8(x); /* now byte k holds bit k of those eight bytes */
            for (size_t k = 0; k < 8; k++)
                out[(j * 8 + k) * nb + g] = (uint8_t)(x >> (8 * k));
        }
}

/* Groups [g0, g1) of the scalar inverse: gather the eight bit rows of byte j, transpose. */
static void unshuffle_groups(const uint8_t *in, uint8_t *out, size_t nb, size_t elem_size,
                             size_t g0, size_t g1)
{
    for (size_t j = 0; j < elem_size; j++)
        for (size_t g = g0; g < g1; g++) {
            uint64_t x = 0;
            for (size_t k = 0; k < 8; k++)
                x |= (uint64_t)in[(j * 8 + k) * nb + g] << (8 * k);
            x = transpose8(x);
            for (size_t m = 0; m < 8; m++)
                out[(8 * g + m) * elem_size + j] = (uint8_t)(x >> (8 * m));
        }
}

#if defined(__SSE2__)
#include <emmintrin.h>

/* 16 groups at a time: the 8 rows of byte j (16 bytes each) are byte-transposed with unpacks
 * into 8 vectors of two groups (row k at byte k of each half); then bit m of every byte is
 * brought to the top (shift by 7-m) and movemask yields element m of both groups at once. */
static void unshuffle_sse2(const uint8_t *in, uint8_t *out, size_t nb, size_t elem_size,
                           size_t *done)
{
    size_t g16 = nb - nb % 16;
    for (size_t j = 0; j < elem_size; j++)
        for (size_t g = 0; g < g16; g += 16) {
            __m128i r[8];
            for (int k = 0; k < 8; k++)
                r[k] = _mm_loadu_si128((const __m128i *)(in + (j * 8 + (size_t)k) * nb + g));
            __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpackhi_epi8(r[0], r[1]);
            __m128i a2 = _mm_unpacklo_epi8(r[2], r[3]), a3 = _mm_unpackhi_epi8(r[2], r[3]);
            __m128i a4 = _mm_unpacklo_epi8(r[4], r[5]), a5 = _mm_unpackhi_epi8(r[4], r[5]);
            __m128i a6 = _mm_unpacklo_epi8(r[6], r[7]), a7 = _mm_unpackhi_epi8(r[6], r[7]);
            __m128i b0 = _mm_unpacklo_epi16(a0, a2), b1 = _mm_unpackhi_epi16(a0, a2);
            __m128i b2 = _mm_unpacklo_epi16(a1, a3), b3 = _mm_unpackhi_epi16(a1, a3);
            __m128i b4 = _mm_unpacklo_epi16(a4, a6), b5 = _mm_unpackhi_epi16(a4, a6);
            __m128i b6 = _mm_unpacklo_epi16(a5, a7), b7 = _mm_unpackhi_epi16(a5, a7);
            __m128i v[8] = {
                _mm_unpacklo_epi32(b0, b4), _mm_unpackhi_epi32(b0, b4), /* groups 0-1, 2-3 */
                _mm_unpacklo_epi32(b1, b5), _mm_unpackhi_epi32(b1, b5), /* 4-5, 6-7 */
                _mm_unpacklo_epi32(b2, b6), _mm_unpackhi_epi32(b2, b6), /* 8-9, 10-11 */
                _mm_unpacklo_epi32(b3, b7), _mm_unpackhi_epi32(b3, b7), /* 12-13, 14-15 */
            };
            for (int q = 0; q < 8; q++) {
                size_t ga = g + 2 * (size_t)q;
                __m128i x = v[q];
                for (int m = 7; m >= 0; m--) {
                    unsigned bits = (unsigned)_mm_movemask_epi8(x);
                    out[(8 * ga + (size_t)m) * elem_size + j] = (uint8_t)bits;
                    out[(8 * (ga + 1) + (size_t)m) * elem_size + j] = (uint8_t)(bits >> 8);
                    x = _mm_slli_epi64(x, 1);
                }
            }
        }
    *done = g16;
}
#endif

void bshuf_unshuffle_block(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size)
{
    size_t nb = n / 8, done = 0;
#if defined(__SSE2__)
    unshuffle_sse2(in, out, nb, elem_size, &done);
#endif
    unshuffle_groups(in, out, nb, elem_size, done, nb);
}

typedef void (*block_fn)(const uint8_t *, uint8_t *, size_t, size_t);

/* The filter's blocking: full blocks, one partial block rounded down to 8, raw leftover. */
static ssb4d_status blocked(block_fn fn, const void *in, void *out, size_t n, size_t elem_size,
                            size_t block, ssb4d_err *err)
{
    if (!elem_size)
        return ssb_fail(err, SSB4D_EINVAL, "bitshuffle: element size 0");
    if (!block)
        block = bshuf_default_block_size(elem_size);
    if (block % 8)
        return ssb_fail(err, SSB4D_EINVAL, "bitshuffle: block size %zu is not a multiple of 8",
                        block);
    const uint8_t *src = in;
    uint8_t *dst = out;
    size_t done = 0;
    while (done + 8 <= n) {
        size_t k = n - done >= block ? block : (n - done) - (n - done) % 8;
        fn(src + done * elem_size, dst + done * elem_size, k, elem_size);
        done += k;
    }
    memcpy(dst + done * elem_size, src + done * elem_size, (n - done) * elem_size);
    return SSB4D_OK;
}

ssb4d_status bshuf_bitshuffle(const void *in, void *out, size_t n, size_t elem_size,
                              size_t block_size, ssb4d_err *err)
{
    return blocked(bshuf_shuffle_block, in, out, n, elem_size, block_size, err);
}

ssb4d_status bshuf_bitunshuffle(const void *in, void *out, size_t n, size_t elem_size,
                                size_t block_size, ssb4d_err *err)
{
    return blocked(bshuf_unshuffle_block, in, out, n, elem_size, block_size, err);
}

/* ---------------------------------------------------------------------------------------- */
/* The LZ4 chunk                                                                              */

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

size_t bshuf_lz4_bound(size_t nbytes, size_t elem_size, size_t block)
{
    if (!elem_size || nbytes % elem_size)
        return 0;
    if (!block)
        block = bshuf_default_block_size(elem_size);
    if (block % 8 || block * elem_size > (size_t)LZ4_MAX_INPUT_SIZE)
        return 0;
    size_t n = nbytes / elem_size, full = n / block, last = (n % block) - (n % block) % 8;
    size_t bound = 12 + full * (4 + (size_t)LZ4_compressBound((int)(block * elem_size)));
    if (last)
        bound += 4 + (size_t)LZ4_compressBound((int)(last * elem_size));
    return bound + (n % 8) * elem_size;
}

ssb4d_status bshuf_lz4_encode(const void *in, size_t nbytes, size_t elem_size, size_t block,
                              uint8_t *out, size_t cap, size_t *len, ssb4d_err *err)
{
    if (!block)
        block = bshuf_default_block_size(elem_size);
    size_t bound = bshuf_lz4_bound(nbytes, elem_size, block);
    if (!bound)
        return ssb_fail(err, SSB4D_EINVAL, "bitshuffle-LZ4: bad element or block size (%zu, %zu)",
                        elem_size, block);
    if (cap < bound)
        return ssb_fail(err, SSB4D_EINVAL, "bitshuffle-LZ4: output of %zu bytes, %zu needed", cap,
                        bound);
    uint8_t *tmp = malloc(block * elem_size);
    if (!tmp)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    const uint8_t *src = in;
    size_t n = nbytes / elem_size, done = 0, at = 12;
    put_be(out, nbytes, 8);
    put_be(out + 8, block * elem_size, 4);
    while (done + 8 <= n) {
        size_t k = n - done >= block ? block : (n - done) - (n - done) % 8, kb = k * elem_size;
        bshuf_shuffle_block(src + done * elem_size, tmp, k, elem_size);
        int c = LZ4_compress_default((const char *)tmp, (char *)out + at + 4, (int)kb,
                                     (int)(cap - at - 4 > INT_MAX ? INT_MAX : cap - at - 4));
        if (c <= 0) {
            free(tmp);
            return ssb_fail(err, SSB4D_EINTERNAL, "LZ4 compression failed");
        }
        put_be(out + at, (uint32_t)c, 4);
        at += 4 + (size_t)c;
        done += k;
    }
    free(tmp);
    memcpy(out + at, src + done * elem_size, (n - done) * elem_size);
    *len = at + (n - done) * elem_size;
    return SSB4D_OK;
}

ssb4d_status bshuf_lz4_decode(const uint8_t *chunk, size_t len, size_t elem_size, void *out,
                              size_t out_bytes, ssb4d_err *err)
{
    if (len < 12)
        return ssb_fail(err, SSB4D_EFORMAT, "bitshuffle-LZ4 chunk of %zu bytes is shorter than "
                        "its 12-byte header", len);
    uint64_t total = be64(chunk);
    size_t bbytes = be32(chunk + 8);
    if (total != out_bytes)
        return ssb_fail(err, SSB4D_EFORMAT, "bitshuffle-LZ4 chunk says %llu bytes uncompressed, "
                        "the dataset's chunk holds %zu", (unsigned long long)total, out_bytes);
    if (!elem_size || out_bytes % elem_size)
        return ssb_fail(err, SSB4D_EFORMAT, "bitshuffle-LZ4 chunk of %zu bytes is not a whole "
                        "number of %zu-byte elements", out_bytes, elem_size);
    if (bbytes == 0 || bbytes % (8 * elem_size) || bbytes > BSHUF_MAX_BLOCK_BYTES)
        return ssb_fail(err, SSB4D_EFORMAT, "bitshuffle-LZ4 chunk has a bad block size of %zu "
                        "bytes (must be a non-zero multiple of %zu, at most %zu)", bbytes,
                        8 * elem_size, BSHUF_MAX_BLOCK_BYTES);
    size_t block = bbytes / elem_size, n = out_bytes / elem_size, done = 0, at = 12, index = 0;
    uint8_t *dst = out;
    uint8_t *tmp = malloc(bbytes);
    if (!tmp)
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory");
    ssb4d_status st = SSB4D_OK;
    while (done + 8 <= n) {
        size_t k = n - done >= block ? block : (n - done) - (n - done) % 8, kb = k * elem_size;
        if (len - at < 4) {
            st = ssb_fail(err, SSB4D_EFORMAT, "bitshuffle-LZ4 chunk is truncated before block %zu "
                          "(%zu bytes)", index, len);
            break;
        }
        size_t clen = be32(chunk + at);
        at += 4;
        if (clen > len - at || clen > (size_t)INT_MAX) {
            st = ssb_fail(err, SSB4D_EFORMAT, "bitshuffle-LZ4 block %zu says %zu compressed bytes, "
                          "only %zu remain in the chunk (truncated or corrupt)", index, clen,
                          len - at);
            break;
        }
        int got = LZ4_decompress_safe((const char *)chunk + at, (char *)tmp, (int)clen, (int)kb);
        if (got != (int)kb) {
            if (got < 0)
                st = ssb_fail(err, SSB4D_EFORMAT, "bitshuffle-LZ4 block %zu is corrupt (LZ4 stops "
                              "at byte %d of its %zu)", index, -got, clen);
            else
                st = ssb_fail(err, SSB4D_EFORMAT, "bitshuffle-LZ4 block %zu is corrupt (LZ4 gives "
                              "%d bytes, the block holds %zu)", index, got, kb);
            break;
        }
        bshuf_unshuffle_block(tmp, dst + done * elem_size, k, elem_size);
        at += clen;
        done += k;
        index++;
    }
    free(tmp);
    if (st)
        return st;
    size_t rest = (n - done) * elem_size;
    if (len - at < rest)
        return ssb_fail(err, SSB4D_EFORMAT, "bitshuffle-LZ4 chunk is truncated in its last %zu raw "
                        "bytes", rest);
    memcpy(dst + done * elem_size, chunk + at, rest);
    return SSB4D_OK;
}
