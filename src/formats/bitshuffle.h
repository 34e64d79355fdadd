/* bitshuffle.h — the bitshuffle transform and the chunk format of the bitshuffle HDF5 filter
 * (id 32008), as written by Dectris detectors, decoded here without the filter plugin.
 *
 * Transform (one block of n elements, n a multiple of 8, elem_size bytes each): the output is
 * 8*elem_size bit rows of n/8 bytes; row j*8+k holds bit k of byte j (memory order) of every
 * element, element i at bit i%8 of byte i/8 of the row. A buffer is cut into blocks of
 * block_size elements; the last partial block is rounded down to a multiple of 8 elements, and
 * the final n%8 elements are copied verbatim.
 *
 * LZ4 chunk (cd_values[4] == 2): 8-byte big-endian uncompressed byte count, 4-byte big-endian
 * block size in BYTES, then per block a 4-byte big-endian compressed length and an LZ4 block
 * that decompresses to the bitshuffled block; the n%8 leftover elements follow raw.
 * Source: kiyo-masui/bitshuffle, src/bshuf_h5filter.c (header), src/bitshuffle_core.c
 * (bshuf_blocked_wrap_fun, bshuf_trans_bit_elem_scal, bshuf_default_block_size). */
#ifndef SSB4D_FORMATS_BITSHUFFLE_H
#define SSB4D_FORMATS_BITSHUFFLE_H
#include "ssb4d_advanced.h"

#include <stddef.h>
#include <stdint.h>

#define BSHUF_H5_FILTER 32008
#define BSHUF_H5_COMPRESS_NONE 0
#define BSHUF_H5_COMPRESS_LZ4 2
#define BSHUF_H5_COMPRESS_ZSTD 3
/* Largest block (bytes) the decoder accepts: real files use 8 KiB; this bounds the scratch. */
#define BSHUF_MAX_BLOCK_BYTES ((size_t)1 << 24)

/* The filter's default block size in elements: 8192 bytes' worth, a multiple of 8, >= 128. */
size_t bshuf_default_block_size(size_t elem_size);

/* One block (n % 8 == 0); in and out must not overlap. */
void bshuf_shuffle_block(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size);
void bshuf_unshuffle_block(const uint8_t *in, uint8_t *out, size_t n, size_t elem_size);

/* A whole buffer of n elements in blocks of block_size elements (0 = default; must be a multiple
 * of 8). SSB4D_EINVAL for a bad block size. */
ssb4d_status bshuf_bitshuffle(const void *in, void *out, size_t n, size_t elem_size,
                              size_t block_size, ssb4d_err *err);
ssb4d_status bshuf_bitunshuffle(const void *in, void *out, size_t n, size_t elem_size,
                                size_t block_size, ssb4d_err *err);

/* Bytes an LZ4 chunk of nbytes may need at most (0 on a bad argument). */
size_t bshuf_lz4_bound(size_t nbytes, size_t elem_size, size_t block_size);
/* Encodes nbytes (a multiple of elem_size) into the LZ4 chunk format; *len = bytes written. */
ssb4d_status bshuf_lz4_encode(const void *in, size_t nbytes, size_t elem_size, size_t block_size,
                              uint8_t *out, size_t cap, size_t *len, ssb4d_err *err);
/* Decodes a chunk of len bytes that must expand to exactly out_bytes. Never reads outside
 * chunk[0..len) nor writes outside out[0..out_bytes); a corrupt chunk is SSB4D_EFORMAT with a
 * line saying what is wrong (the caller adds file and frame). */
ssb4d_status bshuf_lz4_decode(const uint8_t *chunk, size_t len, size_t elem_size, void *out,
                              size_t out_bytes, ssb4d_err *err);
#endif
