/* test_framesrc.c — the foreign-format frame readers: every format is written here with the
 * real libraries (libhdf5, liblz4, our bitshuffle) as a small 4-D acquisition of known values,
 * then read back over odd block sizes and out of order; hostile inputs must fail with a clear
 * line and never crash (run under ASan/UBSan in CI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/bitshuffle.h"
#include "formats/framesrc.h"
#include "formats/mib.h"
#include "io/npy.h"
#include "ref_ssb.h"

static char g_dir[256];

/* ---------------------------------------------------------------------------------------- */
/* Known values                                                                               */

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Small counts, values at the top of the range (markers, saturation) and, for 32-bit data,
 * values above 65535. */
static uint32_t expect(size_t pos, size_t pix, uint32_t maxv)
{
    uint64_t h = mix(pos * 7919 + pix * 104729 + 12345);
    if (pix % 13 == 5)
        return maxv - (uint32_t)(pos % 3 < maxv ? pos % 3 : 0);
    if (maxv > 65535 && pix % 11 == 7)
        return 65536 + (uint32_t)(h % 100000);
    return (uint32_t)(h % (maxv < 60 ? (uint64_t)maxv + 1 : 60));
}

static char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

/* Reads every frame in blocks of each size (and once backwards) and checks every value. */
static void check_all(framesrc *s, uint32_t maxv)
{
    size_t sh[4];
    framesrc_shape(s, sh);
    size_t N = sh[0] * sh[1], P = sh[2] * sh[3];
    static const size_t blocks[] = {1, 3, 7, 64};
    uint32_t *buf = malloc(N * P * sizeof *buf);
    assert_non_null(buf);
    ssb4d_err err = {0};
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
        size_t b = blocks[bi];
        for (size_t p0 = 0; p0 < N; p0 += b) {
            size_t n = N - p0 < b ? N - p0 : b;
            if (framesrc_read(s, p0, n, buf, &err) != SSB4D_OK)
                fail_msg("read %zu+%zu: %s", p0, n, err.msg);
            for (size_t i = 0; i < n; i++)
                for (size_t k = 0; k < P; k++)
                    if (buf[i * P + k] != expect(p0 + i, k, maxv))
                        fail_msg("frame %zu pixel %zu: %u, expected %u (block %zu)", p0 + i, k,
                                 buf[i * P + k], expect(p0 + i, k, maxv), b);
        }
    }
    for (size_t p = N; p-- > 0;) {
        assert_int_equal(framesrc_read(s, p, 1, buf, &err), SSB4D_OK);
        for (size_t k = 0; k < P; k++)
            assert_int_equal(buf[k], expect(p, k, maxv));
    }
    /* whole acquisition at once */
    assert_int_equal(framesrc_read(s, 0, N, buf, &err), SSB4D_OK);
    assert_int_equal(buf[(N - 1) * P + P - 1], expect(N - 1, P - 1, maxv));
    /* outside the scan */
    assert_int_equal(framesrc_read(s, N - 1, 2, buf, &err), SSB4D_EINVAL);
    free(buf);
}

static framesrc *open_ok(const char *path, const framesrc_opts *o)
{
    framesrc *s = NULL;
    ssb4d_err err = {0};
    if (framesrc_open(path, o, &s, &err) != SSB4D_OK)
        fail_msg("open %s: %s", path, err.msg);
    return s;
}

/* Opening must fail and the message must hold `word`. */
static void open_fails(const char *path, const framesrc_opts *o, const char *word)
{
    framesrc *s = NULL;
    ssb4d_err err = {0};
    ssb4d_status st = framesrc_open(path, o, &s, &err);
    if (st == SSB4D_OK) {
        framesrc_close(s);
        fail_msg("open %s succeeded, expected an error about '%s'", path, word);
    }
    assert_null(s);
    if (getenv("FRAMESRC_VERBOSE"))
        print_message("%s\n", err.msg);
    if (!strstr(err.msg, word))
        fail_msg("error for %s lacks '%s': %s", path, word, err.msg);
}

/* Reading all frames must fail with `word` in the message. */
static void read_fails(framesrc *s, const char *word)
{
    size_t sh[4];
    framesrc_shape(s, sh);
    uint32_t *buf = malloc(sh[0] * sh[1] * sh[2] * sh[3] * sizeof *buf);
    ssb4d_err err = {0};
    assert_int_not_equal(framesrc_read(s, 0, sh[0] * sh[1], buf, &err), SSB4D_OK);
    free(buf);
    if (getenv("FRAMESRC_VERBOSE"))
        print_message("%s\n", err.msg);
    if (!strstr(err.msg, word))
        fail_msg("read error lacks '%s': %s", word, err.msg);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void put_le(uint8_t *p, uint64_t v, int bytes, int big)
{
    for (int i = 0; i < bytes; i++)
        p[big ? bytes - 1 - i : i] = (uint8_t)(v >> (8 * i));
}

/* ---------------------------------------------------------------------------------------- */
/* bitshuffle                                                                                 */

/* The definition, bit by bit: row j*8+k, element i at bit i%8 of byte i/8. */
static void ref_shuffle(const uint8_t *in, uint8_t *out, size_t n, size_t es)
{
    memset(out, 0, n * es);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < es; j++)
            for (size_t k = 0; k < 8; k++)
                if (in[i * es + j] >> k & 1)
                    out[(j * 8 + k) * (n / 8) + i / 8] |= (uint8_t)(1u << (i % 8));
}

static void bitshuffle_definition(void **state)
{
    (void)state;
    /* uint16 element 0 = 1 sets bit 0 of row 0; element 1 = 0x0100 sets bit 1 of row 8 */
    uint16_t v[8] = {1, 0x0100, 0, 0, 0, 0, 0, 0x8000};
    uint8_t out[16];
    bshuf_shuffle_block((const uint8_t *)v, out, 8, 2);
    uint8_t want[16] = {0};
    want[0] = 0x01;
    want[8] = 0x02;
    want[15] = 0x80;
    assert_memory_equal(out, want, 16);
    for (size_t es = 1; es <= 8; es *= 2)
        for (size_t n = 8; n <= 256; n += 8) {
            uint8_t in[2048], a[2048], b[2048], back[2048];
            for (size_t i = 0; i < n * es; i++)
                in[i] = (uint8_t)mix(i * 31 + n + es);
            bshuf_shuffle_block(in, a, n, es);
            ref_shuffle(in, b, n, es);
            assert_memory_equal(a, b, n * es);
            bshuf_unshuffle_block(a, back, n, es);
            assert_memory_equal(back, in, n * es);
        }
}

static void bitshuffle_roundtrip(void **state)
{
    (void)state;
    ssb4d_err err = {0};
    size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 63, 127, 128, 129, 1000, 4095, 4096, 4097, 20001};
    size_t blocks[] = {0, 8, 16, 120, 2048};
    for (size_t es = 1; es <= 4; es *= 2)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
                size_t n = lens[li], bytes = n * es;
                uint8_t *in = malloc(bytes + 1), *a = malloc(bytes + 1), *b = malloc(bytes + 1);
                for (size_t i = 0; i < bytes; i++)
                    in[i] = (uint8_t)mix(i + 17 * n + es);
                assert_int_equal(bshuf_bitshuffle(in, a, n, es, blocks[bi], &err), SSB4D_OK);
                /* the last n%8 elements are copied verbatim */
                assert_memory_equal(a + (n - n % 8) * es, in + (n - n % 8) * es, (n % 8) * es);
                assert_int_equal(bshuf_bitunshuffle(a, b, n, es, blocks[bi], &err), SSB4D_OK);
                assert_memory_equal(b, in, bytes);
                /* and through the LZ4 chunk format */
                size_t cap = bshuf_lz4_bound(bytes, es, blocks[bi]), len = 0;
                assert_true(cap > 0);
                uint8_t *c = malloc(cap);
                assert_int_equal(bshuf_lz4_encode(in, bytes, es, blocks[bi], c, cap, &len, &err),
                                 SSB4D_OK);
                memset(b, 0xEE, bytes);
                if (bshuf_lz4_decode(c, len, es, b, bytes, &err) != SSB4D_OK)
                    fail_msg("decode n=%zu es=%zu block=%zu: %s", n, es, blocks[bi], err.msg);
                assert_memory_equal(b, in, bytes);
                free(c);
                free(in);
                free(a);
                free(b);
            }
    assert_int_equal(bshuf_bitshuffle("x", (char[8]){0}, 1, 1, 12, &err), SSB4D_EINVAL);
    assert_int_equal(bshuf_default_block_size(2), 4096);
    assert_int_equal(bshuf_default_block_size(4), 2048);
    assert_int_equal(bshuf_default_block_size(128), 128);
}

static void lz4_chunk_hostile(void **state)
{
    (void)state;
    ssb4d_err err = {0};
    size_t n = 3000, bytes = n * 2;
    uint16_t *in = malloc(bytes), *out = malloc(bytes);
    for (size_t i = 0; i < n; i++)
        in[i] = (uint16_t)(mix(i) % 40);
    size_t cap = bshuf_lz4_bound(bytes, 2, 0), len = 0;
    uint8_t *c = malloc(cap), *bad = malloc(cap);
    assert_int_equal(bshuf_lz4_encode(in, bytes, 2, 0, c, cap, &len, &err), SSB4D_OK);
    assert_int_equal(bshuf_lz4_decode(c, len, 2, out, bytes, &err), SSB4D_OK);
    assert_memory_equal(out, in, bytes);
    /* every truncation fails cleanly */
    for (size_t k = 0; k < len; k += (k < 40 ? 1 : 97))
        assert_int_equal(bshuf_lz4_decode(c, k, 2, out, bytes, &err), SSB4D_EFORMAT);
    /* wrong size in the header, wrong block size */
    memcpy(bad, c, len);
    bad[7] ^= 2;
    assert_int_equal(bshuf_lz4_decode(bad, len, 2, out, bytes, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "uncompressed"));
    memcpy(bad, c, len);
    bad[11] = 3;
    assert_int_equal(bshuf_lz4_decode(bad, len, 2, out, bytes, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "block size"));
    /* corrupt LZ4 payload: garbage inside the first block */
    memcpy(bad, c, len);
    for (size_t i = 16; i < 40 && i < len; i++)
        bad[i] = 0xFF;
    assert_int_equal(bshuf_lz4_decode(bad, len, 2, out, bytes, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "corrupt"));
    /* a block length pointing past the end */
    memcpy(bad, c, len);
    bad[12] = 0x7F;
    assert_int_equal(bshuf_lz4_decode(bad, len, 2, out, bytes, &err), SSB4D_EFORMAT);
    /* random mutations never crash */
    for (int t = 0; t < 2000; t++) {
        memcpy(bad, c, len);
        for (int k = 0; k < 4; k++)
            bad[mix((uint64_t)t * 4 + k) % len] = (uint8_t)mix((uint64_t)t + 99 * k);
        (void)bshuf_lz4_decode(bad, len, 2, out, bytes, &err);
    }
    free(in);
    free(out);
    free(c);
    free(bad);
}

/* ---------------------------------------------------------------------------------------- */
/* .npy and raw                                                                               */

static void write_npy(const char *path, const char *descr, const size_t shape[4], int bytes,
                      int big, uint32_t maxv, size_t drop)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    ssb4d_err err = {0};
    assert_int_equal(ssb_npy_write_header(f, descr, 4, shape, &err), SSB4D_OK);
    size_t N = shape[0] * shape[1], P = shape[2] * shape[3];
    uint8_t *buf = malloc(N * P * (size_t)bytes);
    for (size_t p = 0; p < N; p++)
        for (size_t k = 0; k < P; k++)
            put_le(buf + (p * P + k) * (size_t)bytes, expect(p, k, maxv), bytes, big);
    fwrite(buf, 1, N * P * (size_t)bytes - drop, f);
    free(buf);
    fclose(f);
}

static void npy_formats(void **state)
{
    (void)state;
    size_t shape[4] = {5, 4, 6, 7};
    struct { const char *descr; int bytes; uint32_t maxv; } t[] = {
        {"|u1", 1, 255}, {"<u2", 2, 65535}, {"<u4", 4, 0xFFFFFFFFu}};
    for (int i = 0; i < 3; i++) {
        write_npy(tpath("a.npy"), t[i].descr, shape, t[i].bytes, 0, t[i].maxv, 0);
        framesrc *s = open_ok(tpath("a.npy"), NULL);
        assert_string_equal(framesrc_format_name(s), "numpy");
        assert_int_equal(framesrc_dtype_bytes(s), t[i].bytes);
        assert_null(framesrc_flag_mask(s));
        check_all(s, t[i].maxv);
        framesrc_close(s);
    }
    /* signed counts are accepted while they are >= 0 */
    write_npy(tpath("i.npy"), "<i2", shape, 2, 0, 30000, 0);
    framesrc *s = open_ok(tpath("i.npy"), NULL);
    assert_int_equal(framesrc_dtype_signed(s), 1);
    check_all(s, 30000);
    framesrc_close(s);
    write_npy(tpath("i.npy"), "<i2", shape, 2, 0, 65535, 0); /* 65535 reads as -1 */
    s = open_ok(tpath("i.npy"), NULL);
    read_fails(s, "negative");
    framesrc_close(s);
}

static void npy_hostile(void **state)
{
    (void)state;
    size_t shape[4] = {3, 3, 4, 4};
    write_npy(tpath("f.npy"), "<f8", shape, 8, 0, 100, 0);
    open_fails(tpath("f.npy"), NULL, "float64");
    write_npy(tpath("b.npy"), ">u2", shape, 2, 1, 100, 0);
    open_fails(tpath("b.npy"), NULL, "big-endian");
    write_npy(tpath("t.npy"), "<u2", shape, 2, 0, 100, 10);
    open_fails(tpath("t.npy"), NULL, "truncated");
    write_npy(tpath("l.npy"), "<u8", shape, 8, 0, 100, 0);
    open_fails(tpath("l.npy"), NULL, "64-bit");
    /* Fortran order and rank 3, written by hand */
    const char *hdrs[] = {"{'descr': '<u2', 'fortran_order': True, 'shape': (3, 3, 4, 4), }",
                          "{'descr': '<u2', 'fortran_order': False, 'shape': (9, 4, 4), }"};
    const char *words[] = {"Fortran", "rank 3"};
    for (int i = 0; i < 2; i++) {
        uint8_t buf[128 + 288] = {0};
        memcpy(buf, "\x93NUMPY\x01\x00", 8);
        size_t dl = 128 - 10;
        buf[8] = (uint8_t)dl;
        memset(buf + 10, ' ', dl);
        memcpy(buf + 10, hdrs[i], strlen(hdrs[i]));
        buf[127] = '\n';
        write_file(tpath("h.npy"), buf, sizeof buf);
        open_fails(tpath("h.npy"), NULL, words[i]);
    }
    /* extra bytes after the array */
    write_npy(tpath("x.npy"), "<u2", shape, 2, 0, 100, 0);
    FILE *f = fopen(tpath("x.npy"), "ab");
    fputs("junk", f);
    fclose(f);
    open_fails(tpath("x.npy"), NULL, "extra");
    open_fails(tpath("missing.npy"), NULL, "cannot open");
}

static void raw_formats(void **state)
{
    (void)state;
    size_t shape[4] = {4, 5, 3, 6}, N = 20, P = 18;
    for (int bytes = 1; bytes <= 4; bytes *= 2)
        for (int big = 0; big < 2; big++) {
            uint32_t maxv = bytes == 1 ? 255 : bytes == 2 ? 65535 : 0xFFFFFFFFu;
            size_t off = 13, n = off + N * P * (size_t)bytes;
            uint8_t *buf = calloc(1, n);
            for (size_t p = 0; p < N; p++)
                for (size_t k = 0; k < P; k++)
                    put_le(buf + off + (p * P + k) * (size_t)bytes, expect(p, k, maxv), bytes, big);
            write_file(tpath("a.raw"), buf, n);
            framesrc_opts o = {.format = FRAMESRC_AUTO, .dtype_bytes = bytes, .big_endian = big,
                               .offset = off};
            memcpy(o.shape, shape, sizeof shape);
            framesrc *s = open_ok(tpath("a.raw"), &o);
            assert_string_equal(framesrc_format_name(s), "raw");
            check_all(s, maxv);
            framesrc_close(s);
            /* one byte short, one byte too many */
            write_file(tpath("a.raw"), buf, n - 1);
            open_fails(tpath("a.raw"), &o, "too short");
            uint8_t *more = calloc(1, n + 5);
            memcpy(more, buf, n);
            write_file(tpath("a.raw"), more, n + 5);
            open_fails(tpath("a.raw"), &o, "5 more");
            free(more);
            free(buf);
        }
    framesrc_opts o = {.format = FRAMESRC_RAW, .dtype_bytes = 3, .shape = {1, 1, 1, 1}};
    open_fails(tpath("a.raw"), &o, "--dtype");
    o = (framesrc_opts){.format = FRAMESRC_RAW, .dtype_bytes = 2};
    open_fails(tpath("a.raw"), &o, "--shape");
    framesrc_opts none = {0};
    open_fails(tpath("a.raw"), &none, "--shape");
}

/* ---------------------------------------------------------------------------------------- */
/* HDF5                                                                                       */

static hid_t lcpl_intermediate(void)
{
    hid_t l = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(l, 1);
    return l;
}

/* A dataset of known values; chunk_frames > 0 makes it chunked + deflate (one chunk holds
 * chunk_frames frames of one scan row). */
static void h5_write_4d(hid_t file, const char *path, hid_t ftype, int rank, const size_t *shape,
                        uint32_t maxv, size_t chunk_frames)
{
    hsize_t dims[4];
    size_t N = 1, P = shape[rank - 1] * shape[rank - 2];
    for (int i = 0; i < rank; i++)
        dims[i] = shape[i];
    for (int i = 0; i < rank - 2; i++)
        N *= shape[i];
    hid_t sp = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunk_frames) {
        hsize_t cd[4];
        for (int i = 0; i < rank; i++)
            cd[i] = dims[i];
        cd[0] = 1;
        if (rank == 4)
            cd[1] = chunk_frames;
        else
            cd[0] = chunk_frames;
        H5Pset_chunk(dcpl, rank, cd);
        H5Pset_deflate(dcpl, 1);
    }
    hid_t lcpl = lcpl_intermediate();
    hid_t d = H5Dcreate2(file, path, ftype, sp, lcpl, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    uint32_t *v = malloc(N * P * 4);
    for (size_t p = 0; p < N; p++)
        for (size_t k = 0; k < P; k++)
            v[p * P + k] = expect(p, k, maxv);
    assert_true(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    free(v);
    H5Dclose(d);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(sp);
}

static void h5_attr_int(hid_t loc, const char *obj, const char *name, int v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate_by_name(loc, obj, name, H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &v);
    H5Aclose(a);
    H5Sclose(sp);
}

static void h5_attr_str(hid_t loc, const char *obj, const char *name, const char *v)
{
    hid_t sp = H5Screate(H5S_SCALAR), t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    hid_t a = H5Acreate_by_name(loc, obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v);
    H5Aclose(a);
    H5Tclose(t);
    H5Sclose(sp);
}

/* A scalar double dataset with a units attribute (NeXus style). */
static void h5_number(hid_t loc, const char *path, double v, const char *units)
{
    hid_t sp = H5Screate(H5S_SCALAR), lcpl = lcpl_intermediate();
    hid_t d = H5Dcreate2(loc, path, H5T_IEEE_F64LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(d >= 0);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v);
    if (units)
        h5_attr_str(d, ".", "units", units);
    H5Dclose(d);
    H5Pclose(lcpl);
    H5Sclose(sp);
}

static void hdf5_discovery(void **state)
{
    (void)state;
    size_t shape[4] = {4, 6, 5, 7};
    /* EMD 1.0: a group with emd_group_type = 1 holding "data", beside a decoy 4-D dataset */
    hid_t f = H5Fcreate(tpath("emd.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_write_4d(f, "/aaa/decoy", H5T_STD_U8LE, 4, shape, 255, 0);
    h5_write_4d(f, "/experiment/cube/data", H5T_STD_U16LE, 4, shape, 65535, 4);
    h5_attr_int(f, "/experiment/cube", "emd_group_type", 1);
    h5_number(f, "/experiment/cube/dim1", 1.0, NULL);
    H5Fclose(f);
    framesrc *s = open_ok(tpath("emd.h5"), NULL);
    assert_string_equal(framesrc_format_name(s), "hdf5");
    assert_int_equal(framesrc_dtype_bytes(s), 2);
    assert_string_equal(cJSON_GetObjectItem(framesrc_source_metadata(s), "hdf5_dataset")->valuestring,
                        "/experiment/cube/data");
    check_all(s, 65535);
    framesrc_close(s);

    /* py4DSTEM / emdfile: .../datacube_root/datacube/data, with a calibration bundle */
    f = H5Fcreate(tpath("py4d.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_write_4d(f, "/extra/stack", H5T_STD_U32LE, 4, shape, 100, 0);
    h5_write_4d(f, "/root/datacube_root/datacube/data", H5T_STD_U32LE, 4, shape, 0xFFFFFFFFu, 1);
    hid_t lcpl = lcpl_intermediate();
    hid_t g = H5Gcreate2(f, "/root/datacube_root/metadatabundle/calibration", lcpl, H5P_DEFAULT,
                         H5P_DEFAULT);
    H5Gclose(g);
    H5Pclose(lcpl);
    h5_number(f, "/root/datacube_root/metadatabundle/calibration/R_pixel_size", 0.25, NULL);
    h5_attr_str(f, "/root/datacube_root/metadatabundle/calibration", "R_pixel_units", "nm");
    h5_number(f, "/root/datacube_root/metadatabundle/calibration/convergence_semiangle_mrad", 21.4,
              NULL);
    H5Fclose(f);
    s = open_ok(tpath("py4d.h5"), NULL);
    assert_int_equal(framesrc_dtype_bytes(s), 4);
    framesrc_calibration cal;
    framesrc_calibration_of(s, &cal);
    assert_float_equal(cal.scan_step_A[0], 2.5, 1e-12);
    assert_float_equal(cal.semiangle_mrad, 21.4, 1e-12);
    assert_true(isnan(cal.kv));
    check_all(s, 0xFFFFFFFFu);
    framesrc_close(s);

    /* two plain candidates: refuse, name both, ask for --dataset; then choose one */
    f = H5Fcreate(tpath("two.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_write_4d(f, "/scan_a", H5T_STD_U16LE, 4, shape, 1000, 0);
    h5_write_4d(f, "/group/scan_b", H5T_STD_U8LE, 4, shape, 255, 0);
    H5Fclose(f);
    open_fails(tpath("two.h5"), NULL, "/scan_a");
    open_fails(tpath("two.h5"), NULL, "/group/scan_b");
    open_fails(tpath("two.h5"), NULL, "--dataset");
    framesrc_opts o = {.dataset = "/group/scan_b"};
    s = open_ok(tpath("two.h5"), &o);
    check_all(s, 255);
    framesrc_close(s);
    o.dataset = "/nope";
    open_fails(tpath("two.h5"), &o, "no dataset '/nope'");
    o.dataset = "/group";
    open_fails(tpath("two.h5"), &o, "not a dataset");
}

static void hdf5_types(void **state)
{
    (void)state;
    size_t shape[4] = {3, 3, 4, 5}, stack[3] = {12, 4, 5};
    hid_t f = H5Fcreate(tpath("types.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_write_4d(f, "/float", H5T_IEEE_F32LE, 4, shape, 100, 0);
    h5_write_4d(f, "/signed", H5T_STD_I16LE, 4, shape, 30000, 0);
    h5_write_4d(f, "/big", H5T_STD_U16BE, 4, shape, 65535, 0);
    h5_write_4d(f, "/wide", H5T_STD_U64LE, 4, shape, 100, 0);
    h5_write_4d(f, "/stack", H5T_STD_U16LE, 3, stack, 65535, 5);
    h5_write_4d(f, "/rank2", H5T_STD_U16LE, 2, stack + 1, 100, 0);
    H5Fclose(f);
    h5_write_4d(f = H5Fopen(tpath("types.h5"), H5F_ACC_RDWR, H5P_DEFAULT), "/double", H5T_IEEE_F64LE, 4, shape, 100, 0);
    H5Fclose(f);
    framesrc_opts o = {.dataset = "/double"};
    open_fails(tpath("types.h5"), &o, "float32");
    o.dataset = "/float"; /* float32: read as it is (the float path, SPEC §4) */
    {
        framesrc *fs = open_ok(tpath("types.h5"), &o);
        assert_true(framesrc_is_float(fs));
        size_t n = shape[0] * shape[1] * shape[2] * shape[3];
        float *v = malloc(n * sizeof *v);
        ssb4d_err e2 = {0};
        assert_int_equal(framesrc_read_f32(fs, 0, shape[0] * shape[1], v, &e2), SSB4D_OK);
        for (size_t i = 0; i < n; i++)
            assert_true(v[i] == (float)expect(i / (shape[2] * shape[3]), i % (shape[2] * shape[3]), 100));
        uint32_t *u = malloc(n * sizeof *u);
        assert_int_equal(framesrc_read(fs, 0, 1, u, &e2), SSB4D_EFORMAT); /* never quantised silently */
        free(u);
        free(v);
        framesrc_close(fs);
    }
    o.dataset = "/wide";
    open_fails(tpath("types.h5"), &o, "8-byte");
    o.dataset = "/rank2";
    open_fails(tpath("types.h5"), &o, "rank 2");
    o.dataset = "/signed";
    framesrc *s = open_ok(tpath("types.h5"), &o);
    assert_int_equal(framesrc_dtype_signed(s), 1);
    check_all(s, 30000);
    framesrc_close(s);
    o.dataset = "/big"; /* big-endian storage: libhdf5 converts */
    s = open_ok(tpath("types.h5"), &o);
    check_all(s, 65535);
    framesrc_close(s);
    /* a stack of frames needs its scan shape (or a square count) */
    o.dataset = "/stack";
    open_fails(tpath("types.h5"), &o, "--scan-shape");
    o.shape[0] = 3;
    o.shape[1] = 4;
    s = open_ok(tpath("types.h5"), &o);
    size_t sh[4];
    framesrc_shape(s, sh);
    assert_int_equal(sh[0], 3);
    assert_int_equal(sh[1], 4);
    check_all(s, 65535);
    framesrc_close(s);
    o.shape[1] = 5;
    open_fails(tpath("types.h5"), &o, "needs 15");
    /* only a float 4-D dataset: discovery says why */
    f = H5Fcreate(tpath("onlyfloat.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_write_4d(f, "/cube", H5T_IEEE_F64LE, 4, shape, 100, 0);
    H5Fclose(f);
    open_fails(tpath("onlyfloat.h5"), NULL, "float32");
    /* a negative value in a signed dataset */
    f = H5Fcreate(tpath("neg.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_write_4d(f, "/cube", H5T_STD_I16LE, 4, shape, 65535, 0); /* 65535 -> clipped to 32767? */
    hid_t d = H5Dopen2(f, "/cube", H5P_DEFAULT);
    int16_t minus = -3;
    hsize_t one = 1, start[4] = {2, 1, 3, 4}, cnt[4] = {1, 1, 1, 1};
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &one, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    H5Dwrite(d, H5T_NATIVE_INT16, ms, fs, H5P_DEFAULT, &minus);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(d);
    H5Fclose(f);
    s = open_ok(tpath("neg.h5"), NULL);
    read_fails(s, "negative count -3");
    framesrc_close(s);
}

/* A chunked dataset whose filter this libhdf5 does not have (blosc, id 32001). */
static void hdf5_missing_filter(void **state)
{
    (void)state;
    hid_t f = H5Fcreate(tpath("blosc.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[4] = {2, 2, 4, 4}, cd[4] = {1, 1, 4, 4};
    hid_t sp = H5Screate_simple(4, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 4, cd);
    unsigned cdv[4] = {2, 2, 2, 0};
    assert_true(H5Pset_filter(dcpl, 32001, H5Z_FLAG_OPTIONAL, 4, cdv) >= 0);
    hid_t d = H5Dcreate2(f, "/data", H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    uint8_t junk[20] = {1, 2, 3};
    for (hsize_t r = 0; r < 2; r++)
        for (hsize_t c = 0; c < 2; c++) {
            hsize_t off[4] = {r, c, 0, 0};
            assert_true(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, sizeof junk, junk) >= 0);
        }
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Fclose(f);
    open_fails(tpath("blosc.h5"), NULL, "32001 (blosc");
    open_fails(tpath("blosc.h5"), NULL, "HDF5_PLUGIN_PATH");
    /* not HDF5 at all, but named so */
    write_file(tpath("bad.h5"), "hello world, not hdf5", 21);
    open_fails(tpath("bad.h5"), NULL, "HDF5");
}

/* ---------------------------------------------------------------------------------------- */
/* Dectris Arina                                                                              */

typedef struct {
    size_t frames[3];       /* frames per data file (0 ends the list) */
    size_t rows, cols, elem, chunk_frames;
    int lz4;                /* 0: plain bitshuffle */
    int corrupt_frame;      /* >= 0: break the chunk holding this frame */
    size_t stop_at;         /* > 0: chunks from this frame on are never written */
    int mask, meta, companion;
} arina_spec;

static uint32_t arina_max(size_t elem) { return elem == 1 ? 255 : elem == 2 ? 65535 : 0xFFFFFFFFu; }

static hid_t arina_type(size_t elem)
{
    return elem == 1 ? H5T_STD_U8LE : elem == 2 ? H5T_STD_U16LE : H5T_STD_U32LE;
}

/* NAME_master.h5 + NAME_data_00000k.h5, the data written as bitshuffle(-LZ4) chunks with
 * H5Dwrite_chunk under filter 32008 (no plugin needed to write raw chunks). */
static void write_arina(const char *name, const arina_spec *a)
{
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%s/%s_master.h5", g_dir, name);
    hid_t m = H5Fcreate(mpath, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t lcpl = lcpl_intermediate();
    hid_t g = H5Gcreate2(m, "/entry/data", lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    size_t P = a->rows * a->cols, fb = P * a->elem, first = 0;
    uint32_t maxv = arina_max(a->elem);
    for (int k = 0; k < 3 && a->frames[k]; k++) {
        char dname[64], dpath[600], link[64];
        snprintf(dname, sizeof dname, "%s_data_%06d.h5", name, k + 1);
        snprintf(dpath, sizeof dpath, "%s/%s", g_dir, dname);
        snprintf(link, sizeof link, "/entry/data/data_%06d", k + 1);
        hid_t df = H5Fcreate(dpath, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hsize_t dims[3] = {a->frames[k], a->rows, a->cols}, cd[3] = {a->chunk_frames, a->rows, a->cols};
        hid_t sp = H5Screate_simple(3, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 3, cd);
        unsigned cdv[5] = {0, 4, (unsigned)a->elem, 0, a->lz4 ? 2u : 0u};
        assert_true(H5Pset_filter(dcpl, 32008, H5Z_FLAG_OPTIONAL, 5, cdv) >= 0);
        hid_t d = H5Dcreate2(df, "/entry/data/data", arina_type(a->elem), sp, lcpl, dcpl, H5P_DEFAULT);
        assert_true(d >= 0);
        size_t cbytes = a->chunk_frames * fb;
        uint8_t *raw = malloc(cbytes), *enc = malloc(bshuf_lz4_bound(cbytes, a->elem, 0) + cbytes);
        for (size_t c0 = 0; c0 < a->frames[k]; c0 += a->chunk_frames) {
            memset(raw, 0, cbytes);
            for (size_t i = 0; i < a->chunk_frames && c0 + i < a->frames[k]; i++)
                for (size_t px = 0; px < P; px++)
                    put_le(raw + (i * P + px) * a->elem, expect(first + c0 + i, px, maxv),
                           (int)a->elem, 0);
            size_t len = 0;
            ssb4d_err err = {0};
            if (a->lz4)
                assert_int_equal(bshuf_lz4_encode(raw, cbytes, a->elem, 0, enc,
                                                  bshuf_lz4_bound(cbytes, a->elem, 0), &len, &err), 0);
            else {
                assert_int_equal(bshuf_bitshuffle(raw, enc, cbytes / a->elem, a->elem, 0, &err), 0);
                len = cbytes;
            }
            size_t fr = first + c0;
            if (a->corrupt_frame >= 0 && (size_t)a->corrupt_frame >= fr &&
                (size_t)a->corrupt_frame < fr + a->chunk_frames)
                for (size_t i = 16; i < len; i++) /* LZ4 tokens asking for endless literals */
                    enc[i] = 0xFF;
            hsize_t off[3] = {c0, 0, 0};
            if (!a->stop_at || fr < a->stop_at)
                assert_true(H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, len, enc) >= 0);
        }
        free(raw);
        free(enc);
        H5Dclose(d);
        H5Pclose(dcpl);
        H5Sclose(sp);
        H5Fclose(df);
        /* relative target: resolved next to the master */
        assert_true(H5Lcreate_external(dname, "/entry/data/data", m, link, H5P_DEFAULT, H5P_DEFAULT) >= 0);
        first += a->frames[k];
    }
    if (a->meta) {
        h5_number(m, "/entry/instrument/detector/x_pixel_size", 75e-6, "m");
        h5_number(m, "/entry/instrument/detector/y_pixel_size", 75e-6, "m");
        h5_number(m, "/entry/instrument/detector/detector_distance", 0.1, "m");
        h5_number(m, "/entry/instrument/detector/count_time", 0.5e-3, "s");
        h5_number(m, "/entry/instrument/beam/incident_wavelength", 0.019687489006849, "angstrom");
    }
    if (a->mask) {
        hsize_t md[2] = {a->rows, a->cols};
        hid_t sp = H5Screate_simple(2, md, NULL);
        hid_t d = H5Dcreate2(m, "/entry/instrument/detector/detectorSpecific/pixel_mask",
                             H5T_STD_U32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        uint32_t *v = calloc(P, 4);
        v[0] = 1;
        v[P / 2] = 0x80000000u;
        v[P - 1] = 16;
        H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        free(v);
        H5Dclose(d);
        H5Sclose(sp);
    }
    H5Pclose(lcpl);
    H5Fclose(m);
    if (a->companion) {
        char cpath[512];
        snprintf(cpath, sizeof cpath, "%s/%s_em_metadata.h5", g_dir, name);
        hid_t c = H5Fcreate(cpath, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        h5_number(c, "/electron_microscope/scan_controller/regular_scan/n_pixels_y", 3, NULL);
        h5_number(c, "/electron_microscope/scan_controller/regular_scan/n_pixels_x", 4, NULL);
        h5_number(c, "/electron_microscope/scan_controller/regular_scan/pixel_size_y", 0.5, "nm");
        h5_number(c, "/electron_microscope/scan_controller/regular_scan/pixel_size_x", 0.6, "nm");
        h5_number(c, "/electron_microscope/scan_controller/regular_scan/dwell_time", 2e-6, "s");
        h5_number(c, "/electron_microscope/electron_source/accelerating_voltage", 200, "kV");
        h5_number(c, "/electron_microscope/illumination_system/semi_convergence_angle", 25, "mrad");
        h5_number(c, "/electron_microscope/imaging_system/camera_length", 150, "mm");
        H5Fclose(c);
    }
}

static char *arina_master(const char *name)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s_master.h5", g_dir, name);
    return p;
}

static void arina_formats(void **state)
{
    (void)state;
    /* uint16, one frame per chunk, 9 frames in two files: a 3x3 square scan */
    arina_spec a = {.frames = {5, 4}, .rows = 12, .cols = 10, .elem = 2, .chunk_frames = 1,
                    .lz4 = 1, .corrupt_frame = -1, .mask = 1, .meta = 1};
    write_arina("u16", &a);
    /* run from another directory: the external links must resolve next to the master */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir("/"), 0);
    framesrc *s = open_ok(arina_master("u16"), NULL);
    assert_string_equal(framesrc_format_name(s), "dectris-arina-hdf5");
    size_t sh[4];
    framesrc_shape(s, sh);
    assert_int_equal(sh[0], 3);
    assert_int_equal(sh[1], 3);
    assert_int_equal(sh[2], 12);
    assert_int_equal(sh[3], 10);
    const uint8_t *mask = framesrc_flag_mask(s);
    assert_non_null(mask);
    size_t flagged = 0;
    for (size_t i = 0; i < 120; i++)
        flagged += mask[i];
    assert_int_equal(flagged, 3);
    assert_int_equal(mask[0] + mask[60] + mask[119], 3);
    framesrc_calibration cal;
    framesrc_calibration_of(s, &cal);
    assert_float_equal(cal.kv, 300.0, 1e-6);
    assert_float_equal(cal.det_sampling_mrad[0], 0.75, 1e-12);
    assert_float_equal(cal.det_sampling_mrad[1], 0.75, 1e-12);
    assert_float_equal(cal.camera_length_mm, 100.0, 1e-9);
    assert_float_equal(cal.dwell_us, 500.0, 1e-9);
    assert_true(isnan(cal.semiangle_mrad));
    const cJSON *meta = framesrc_source_metadata(s);
    const char *px = cJSON_GetObjectItem(meta, "entry/instrument/detector/x_pixel_size")->valuestring;
    assert_float_equal(strtod(px, NULL), 75e-6, 1e-18);
    assert_non_null(strstr(px, " m"));
    check_all(s, 65535);
    framesrc_close(s);
    assert_int_equal(chdir(cwd), 0);

    /* uint32 with marker values, two frames per chunk (a partial last chunk), 12 frames in
     * three files; the companion gives the 3x4 scan and the microscope */
    a = (arina_spec){.frames = {5, 4, 3}, .rows = 9, .cols = 11, .elem = 4, .chunk_frames = 2,
                     .lz4 = 1, .corrupt_frame = -1, .meta = 1, .companion = 1};
    write_arina("u32", &a);
    s = open_ok(arina_master("u32"), NULL);
    framesrc_shape(s, sh);
    assert_int_equal(sh[0], 3);
    assert_int_equal(sh[1], 4);
    assert_null(framesrc_flag_mask(s));
    framesrc_calibration_of(s, &cal);
    assert_float_equal(cal.kv, 200.0, 1e-12);
    assert_float_equal(cal.scan_step_A[0], 5.0, 1e-12);
    assert_float_equal(cal.scan_step_A[1], 6.0, 1e-12);
    assert_float_equal(cal.semiangle_mrad, 25.0, 1e-12);
    assert_float_equal(cal.camera_length_mm, 150.0, 1e-9);
    assert_float_equal(cal.det_sampling_mrad[0], 0.5, 1e-12);
    assert_float_equal(cal.dwell_us, 2.0, 1e-12);
    meta = framesrc_source_metadata(s);
    assert_string_equal(cJSON_GetObjectItem(meta, "electron_microscope/electron_source/"
                                                  "accelerating_voltage")->valuestring, "200 kV");
    check_all(s, 0xFFFFFFFFu);
    framesrc_close(s);
    /* the user's scan shape wins; a wrong one is refused */
    framesrc_opts o = {.shape = {4, 3}};
    s = open_ok(arina_master("u32"), &o);
    framesrc_shape(s, sh);
    assert_int_equal(sh[0], 4);
    framesrc_close(s);
    o.shape[1] = 5;
    open_fails(arina_master("u32"), &o, "needs 20");

    /* uint8, plain bitshuffle (no LZ4), 3 frames per chunk */
    a = (arina_spec){.frames = {7, 9}, .rows = 8, .cols = 8, .elem = 1, .chunk_frames = 3,
                     .lz4 = 0, .corrupt_frame = -1};
    write_arina("u8", &a);
    s = open_ok(arina_master("u8"), NULL);
    framesrc_shape(s, sh);
    assert_int_equal(sh[0] * sh[1], 16);
    check_all(s, 255);
    framesrc_close(s);
}

static void arina_hostile(void **state)
{
    (void)state;
    /* a corrupt chunk: the error names the frame */
    arina_spec a = {.frames = {4, 5}, .rows = 16, .cols = 16, .elem = 2, .chunk_frames = 1,
                    .lz4 = 1, .corrupt_frame = 6};
    write_arina("bad", &a);
    framesrc *s = open_ok(arina_master("bad"), NULL);
    uint32_t *buf = malloc(9 * 256 * 4);
    ssb4d_err err = {0};
    assert_int_equal(framesrc_read(s, 0, 6, buf, &err), SSB4D_OK);
    assert_int_equal(framesrc_read(s, 5, 3, buf, &err), SSB4D_EFORMAT);
    if (getenv("FRAMESRC_VERBOSE"))
        print_message("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "frame 6"));
    assert_non_null(strstr(err.msg, "corrupt"));
    free(buf);
    framesrc_close(s);
    /* a frame count that is not a square and no scan metadata */
    a = (arina_spec){.frames = {4, 2}, .rows = 4, .cols = 4, .elem = 2, .chunk_frames = 1, .lz4 = 1,
                     .corrupt_frame = -1};
    write_arina("six", &a);
    open_fails(arina_master("six"), NULL, "--scan-shape");
    /* a missing data file */
    a.frames[1] = 5;
    write_arina("gone", &a);
    assert_int_equal(unlink(tpath("gone_data_000002.h5")), 0);
    open_fails(arina_master("gone"), NULL, "data_000002");
    open_fails(arina_master("gone"), NULL, "is missing");
    /* an interrupted acquisition: the last chunks were never written */
    a = (arina_spec){.frames = {4, 5}, .rows = 4, .cols = 4, .elem = 2, .chunk_frames = 1, .lz4 = 1,
                     .corrupt_frame = -1, .stop_at = 7};
    write_arina("stop", &a);
    s = open_ok(arina_master("stop"), NULL);
    read_fails(s, "never written");
    framesrc_close(s);
    /* a data file cut short: its chunks point past the end */
    a.stop_at = 0;
    write_arina("cut", &a);
    FILE *f = fopen(tpath("cut_data_000002.h5"), "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_int_equal(truncate(tpath("cut_data_000002.h5"), size / 2), 0);
    open_fails(arina_master("cut"), NULL, "truncated");
    /* no data links at all */
    hid_t m = H5Fcreate(arina_master("empty"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(m);
    open_fails(arina_master("empty"), NULL, "/entry/data");
}

/* ---------------------------------------------------------------------------------------- */
/* Merlin .mib                                                                                */

typedef struct {
    const char *dtype; /* U08 U16 U32 R64 */
    int depth;         /* 1 6 12 24 */
    int chips;         /* 1 or 4 */
    size_t rows, cols; /* the decoded frame */
} mib_spec;

static size_t mib_header_text(char *h, size_t hb, const mib_spec *m, uint32_t seq, size_t w, size_t ht)
{
    memset(h, 0, hb);
    int n = snprintf(h, hb, "MQ1,%06u,%05zu,%02d,%04zu,%04zu,%s,%6s,%s,2024-01-02 03:04:05.678901,"
                     "0.000500,0,0,0,1.000000E+1,5.110000E+2,0.000000E+0,0.000000E+0,0.000000E+0,"
                     "0.000000E+0,0.000000E+0,0.000000E+0,3RX,175,511,000,000,000,000,000,000,125,"
                     "255,125,125,100,100,082,100,087,030,128,004,255,129,128,176,168,511,511,MQ1A,"
                     "2024-01-02T03:04:05.678901234Z,500000ns,%d,", seq, hb, m->chips, w, ht,
                     m->dtype, m->chips == 4 ? "2x2" : "1x1", m->chips == 4 ? "FF" : "01", m->depth);
    assert_true(n > 0 && (size_t)n < hb);
    return hb;
}

static void be_word(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

/* Raw counters as the chip reads them out: 64-bit big-endian words, pixels from the low bits. */
static void raw_pack(const uint32_t *c, size_t n, int depth, uint8_t *out)
{
    int bits = depth == 1 ? 1 : depth == 6 ? 8 : 16, per = 64 / bits;
    for (size_t w = 0; w < n / (size_t)per; w++) {
        uint64_t v = 0;
        for (int k = 0; k < per; k++)
            v |= (uint64_t)(c[w * per + k] & ((1u << bits) - 1)) << (k * bits);
        be_word(out + 8 * w, v);
    }
}

/* One frame's pixel data; returns its size. */
static size_t mib_frame_data(const mib_spec *m, size_t pos, uint32_t maxv, uint8_t *out,
                             size_t *w, size_t *ht)
{
    size_t P = m->rows * m->cols;
    uint32_t *f = malloc(P * 4), *raw = malloc(2 * P * 4);
    for (size_t k = 0; k < P; k++)
        f[k] = expect(pos, k, maxv);
    size_t n = 0;
    if (strcmp(m->dtype, "R64") != 0) {
        int b = m->dtype[2] == '8' ? 1 : m->dtype[1] == '1' ? 2 : 4;
        for (size_t k = 0; k < P; k++)
            put_le(out + k * (size_t)b, f[k], b, 1);
        n = P * (size_t)b;
        *w = m->cols;
        *ht = m->rows;
    } else if (m->chips == 1 && m->depth == 24) {
        for (size_t k = 0; k < P; k++) {
            raw[k] = f[k] >> 12;
            raw[P + k] = f[k] & 0xFFF;
        }
        raw_pack(raw, P, 12, out);
        raw_pack(raw + P, P, 12, out + P * 2);
        n = P * 4;
        *w = 2 * m->cols;
        *ht = m->rows;
    } else if (m->chips == 1) {
        raw_pack(f, P, m->depth, out);
        n = P * (size_t)(m->depth == 1 ? 1 : m->depth == 6 ? 8 : 16) / 8;
        *w = m->cols;
        *ht = m->rows;
    } else { /* quad: raw row r = [chip4 | chip3 | chip2 | chip1] */
        size_t c = m->rows / 2, W = m->cols;
        for (size_t r = 0; r < c; r++)
            for (size_t x = 0; x < c; x++) {
                raw[r * 4 * c + 3 * c + x] = f[r * W + x];
                raw[r * 4 * c + 2 * c + x] = f[r * W + c + x];
                raw[r * 4 * c + 1 * c + x] = f[(2 * c - 1 - r) * W + (c - 1 - x)];
                raw[r * 4 * c + 0 * c + x] = f[(2 * c - 1 - r) * W + c + (c - 1 - x)];
            }
        raw_pack(raw, P, m->depth, out);
        n = P * (size_t)(m->depth == 1 ? 1 : m->depth == 6 ? 8 : 16) / 8;
        *w = 4 * c;
        *ht = c;
    }
    free(f);
    free(raw);
    return n;
}

static uint32_t mib_max(int depth) { return depth == 1 ? 1 : depth == 6 ? 63 : depth == 12 ? 4095 : 0xFFFFFF; }

/* Writes n frames; returns the frame stride. bad_seq / bad_head >= 0 corrupt that frame. */
static size_t write_mib(const char *path, const mib_spec *m, size_t n, int bad_seq, int bad_head)
{
    size_t hb = m->chips == 4 ? 768 : 384, cap = m->rows * m->cols * 4 + hb;
    uint8_t *frame = malloc(cap);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    size_t stride = 0;
    for (size_t p = 0; p < n; p++) {
        size_t w, ht;
        size_t dn = mib_frame_data(m, p, mib_max(m->depth), frame + hb, &w, &ht);
        uint32_t seq = (uint32_t)(p + 1) + ((int)p == bad_seq ? 5 : 0);
        mib_header_text((char *)frame, hb, m, seq, w, ht);
        if ((int)p == bad_head)
            memcpy(frame + 8, "XYZ", 3);
        stride = hb + dn;
        fwrite(frame, 1, stride, f);
    }
    fclose(f);
    free(frame);
    return stride;
}

static void mib_formats(void **state)
{
    (void)state;
    mib_spec specs[] = {
        {"U08", 1, 1, 16, 16}, {"U08", 6, 1, 16, 16}, {"U16", 12, 1, 16, 16}, {"U32", 24, 1, 16, 16},
        {"U16", 12, 4, 32, 32}, {"R64", 1, 1, 16, 64}, {"R64", 6, 1, 16, 16}, {"R64", 12, 1, 8, 16},
        {"R64", 24, 1, 8, 16}, {"R64", 1, 4, 128, 128}, {"R64", 6, 4, 16, 16}, {"R64", 12, 4, 16, 16},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        const mib_spec *m = &specs[i];
        write_mib(tpath("a.mib"), m, 9, -1, -1);
        framesrc *s = open_ok(tpath("a.mib"), NULL);
        assert_string_equal(framesrc_format_name(s), "merlin-mib");
        size_t sh[4];
        framesrc_shape(s, sh);
        assert_int_equal(sh[0], 3);
        assert_int_equal(sh[1], 3);
        assert_int_equal(sh[2], m->rows);
        assert_int_equal(sh[3], m->cols);
        framesrc_calibration cal;
        framesrc_calibration_of(s, &cal);
        assert_float_equal(cal.dwell_us, 500.0, 1e-9);
        check_all(s, mib_max(m->depth));
        framesrc_close(s);
    }
    /* the scan shape from the sibling .hdr (12 frames, 4 per trigger: 3x4) */
    mib_spec m = {"U16", 12, 1, 16, 16};
    write_mib(tpath("scan1.mib"), &m, 12, -1, -1);
    open_fails(tpath("scan1.mib"), NULL, "--scan-shape");
    const char *hdr = "HDR,\t\nTime and Date Stamp (day, mnth, yr, hr, min, s):\t02/01/2024 03:04:05\n"
                      "Counter Depth (number):\t12\nFrames in Acquisition (Number):\t12\n"
                      "Frames per Trigger (Number):\t4\nEnd\t\n";
    write_file(tpath("scan.hdr"), hdr, strlen(hdr));
    framesrc *s = open_ok(tpath("scan1.mib"), NULL);
    size_t sh[4];
    framesrc_shape(s, sh);
    assert_int_equal(sh[0], 3);
    assert_int_equal(sh[1], 4);
    check_all(s, 4095);
    framesrc_close(s);
    framesrc_opts o = {.shape = {2, 6}};
    s = open_ok(tpath("scan1.mib"), &o);
    framesrc_shape(s, sh);
    assert_int_equal(sh[1], 6);
    framesrc_close(s);
}

static void mib_hostile(void **state)
{
    (void)state;
    mib_spec m = {"U16", 12, 1, 16, 16};
    /* frame 5 has a garbled header, frame 6 a wrong sequence number */
    write_mib(tpath("h.mib"), &m, 9, -1, 5);
    framesrc *s = open_ok(tpath("h.mib"), NULL);
    uint32_t *buf = malloc(9 * 256 * 4);
    ssb4d_err err = {0};
    assert_int_equal(framesrc_read(s, 0, 5, buf, &err), SSB4D_OK);
    assert_int_equal(framesrc_read(s, 3, 4, buf, &err), SSB4D_EFORMAT);
    if (getenv("FRAMESRC_VERBOSE"))
        print_message("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "frame 5"));
    framesrc_close(s);
    write_mib(tpath("q.mib"), &m, 9, 6, -1);
    s = open_ok(tpath("q.mib"), NULL);
    assert_int_equal(framesrc_read(s, 0, 9, buf, &err), SSB4D_EFORMAT);
    if (getenv("FRAMESRC_VERBOSE"))
        print_message("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "frame 6"));
    assert_non_null(strstr(err.msg, "sequence"));
    framesrc_close(s);
    free(buf);
    /* a file that ends inside a frame */
    size_t stride = write_mib(tpath("t.mib"), &m, 9, -1, -1);
    assert_int_equal(truncate(tpath("t.mib"), (off_t)(stride * 9 - 100)), 0);
    open_fails(tpath("t.mib"), NULL, "not a whole number");
    /* a first header cut short */
    write_file(tpath("z.mib"), "MQ1,", 4);
    open_fails(tpath("z.mib"), NULL, "first frame");

    /* the parser on garbage, truncations and mutations: errors, never a crash or overread */
    char good[384];
    mib_header_text(good, sizeof good, &m, 1, 16, 16);
    mib_header h;
    assert_int_equal(mib_parse_header((const uint8_t *)good, sizeof good, &h, &err), SSB4D_OK);
    assert_int_equal(h.header_bytes, 384);
    assert_int_equal(h.counter_depth, 12);
    assert_int_equal(h.width, 16);
    assert_int_equal(h.data_bytes, 512);
    assert_string_equal(h.layout, "1x1");
    for (size_t len = 0; len < sizeof good; len++) {
        uint8_t *cut = malloc(len ? len : 1); /* exactly len bytes: ASan catches any overread */
        memcpy(cut, good, len);
        assert_int_not_equal(mib_parse_header(cut, len, &h, &err), SSB4D_OK);
        free(cut);
    }
    uint8_t *bad = malloc(sizeof good);
    for (int t = 0; t < 20000; t++) {
        memcpy(bad, good, sizeof good);
        int k = 1 + (int)(mix((uint64_t)t) % 6);
        for (int i = 0; i < k; i++)
            bad[mix((uint64_t)t * 7 + i) % (t % 3 ? 120 : sizeof good)] = (uint8_t)mix((uint64_t)t + 13 * i);
        if (mib_parse_header(bad, sizeof good, &h, &err) == SSB4D_OK) {
            assert_true(h.rows <= 4096 && h.cols <= 4096 && h.header_bytes <= sizeof good);
            assert_true(h.data_bytes <= h.rows * h.cols * 4);
        }
    }
    for (int t = 0; t < 5000; t++) {
        for (size_t i = 0; i < sizeof good; i++)
            bad[i] = (uint8_t)mix((uint64_t)t * 1000 + i);
        if (t % 2)
            memcpy(bad, "MQ1,", 4);
        (void)mib_parse_header(bad, sizeof good, &h, &err);
    }
    free(bad);
    const char *msgs[][2] = {
        {"MQ1,000001,00064,01,0016,0016,F32,   1x1,", "data type"},
        {"MQ1,000001,99999,01,0016,0016,U16,   1x1,", "length"},
        {"MQ1,000001,00384,01,0016,0016,U16,   1x1,", "truncated"},
        {"MQ1,00000a,00064,01,0016,0016,U16,   1x1,", "sequence"},
        {"MQ1,000001,00064,01,0000,0016,U16,   1x1,", "width"},
        {"MQ1,000001,00064,01,0016,0016,R64,   1x1,", "counter depth"},
        {"MQ1,000001,00064,02,0016,0016,R64,   2x1,1,2,3,4,MQ1A,x,1ns,12", "not supported"},
    };
    for (size_t i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
        uint8_t b[64] = {0};
        memcpy(b, msgs[i][0], strlen(msgs[i][0]) < 64 ? strlen(msgs[i][0]) : 64);
        assert_int_not_equal(mib_parse_header(b, sizeof b, &h, &err), SSB4D_OK);
        if (!strstr(err.msg, msgs[i][1]))
            fail_msg("header %zu: '%s' lacks '%s'", i, err.msg, msgs[i][1]);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Detection                                                                                  */

static void detection(void **state)
{
    (void)state;
    write_file(tpath("what.bin"), "0123456789", 10);
    open_fails(tpath("what.bin"), NULL, "--shape");
    write_file(tpath("what.xyz"), "0123456789", 10);
    open_fails(tpath("what.xyz"), NULL, "cannot tell");
    write_file(tpath("fake.mib"), "0123456789", 10);
    open_fails(tpath("fake.mib"), NULL, "MQ1");
    framesrc_format f;
    ssb4d_err err = {0};
    assert_int_equal(framesrc_format_parse("arina", &f, &err), SSB4D_OK);
    assert_int_equal(f, FRAMESRC_ARINA);
    assert_int_equal(framesrc_format_parse("MIB", &f, &err), SSB4D_OK);
    assert_int_equal(f, FRAMESRC_MIB);
    assert_int_equal(framesrc_format_parse("tiff", &f, &err), SSB4D_EINVAL);
    /* a forced format on the wrong file */
    size_t shape[4] = {2, 2, 3, 3};
    write_npy(tpath("n.npy"), "<u2", shape, 2, 0, 100, 0);
    framesrc_opts o = {.format = FRAMESRC_MIB};
    open_fails(tpath("n.npy"), &o, "MQ1");
    o.format = FRAMESRC_HDF5;
    open_fails(tpath("n.npy"), &o, "HDF5");
    o.format = FRAMESRC_ARINA;
    open_fails(tpath("n.npy"), &o, "HDF5");
}

/* ---------------------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    return ref_tmpdir(g_dir, sizeof g_dir, "framesrc");
}

static int teardown(void **state)
{
    (void)state;
    return ref_rmtree(g_dir);
}

/* The public reader (include/ssb4d.h, what `ssb4d export` and `verify` read with): the flags'
 * words and values reach the readers, and it reads what framesrc reads. */
static void public_reader(void **state)
{
    (void)state;
    size_t shape[4] = {4, 5, 3, 6}, N = 20, P = 18, off = 13, got_shape[4];
    uint8_t *buf = calloc(1, off + N * P * 2);
    for (size_t p = 0; p < N; p++)
        for (size_t k = 0; k < P; k++)
            put_le(buf + off + (p * P + k) * 2, expect(p, k, 65535), 2, 1);
    write_file(tpath("p.raw"), buf, off + N * P * 2);
    free(buf);
    ssb4d_err err = {0};
    assert_int_equal(ssb4d_reader_format_check("raw", &err), SSB4D_OK);
    assert_int_equal(ssb4d_reader_format_check("mrc", &err), SSB4D_OK);
    assert_int_equal(ssb4d_reader_format_check("tiff", &err), SSB4D_EINVAL);
    ssb4d_reader_opts o = {.format = "raw", .dtype_bytes = 2, .big_endian = 1, .offset = off};
    memcpy(o.shape, shape, sizeof shape);
    ssb4d_reader *r = NULL;
    assert_int_equal(ssb4d_reader_open(tpath("p.raw"), &o, &r, &err), SSB4D_OK);
    ssb4d_reader_shape(r, got_shape);
    assert_memory_equal(got_shape, shape, sizeof shape);
    assert_int_equal(ssb4d_reader_dtype_bytes(r), 2);
    assert_int_equal(ssb4d_reader_is_float(r), 0);
    assert_string_equal(ssb4d_reader_format_name(r), "raw");
    assert_null(ssb4d_reader_flag_mask(r));
    ssb4d_reader_calibration cal;
    ssb4d_reader_calibration_of(r, &cal);
    assert_true(isnan(cal.kv) && isnan(cal.scan_step_A[0]));
    uint32_t *u = malloc(N * P * sizeof *u);
    float *f = malloc(N * P * sizeof *f);
    assert_int_equal(ssb4d_reader_read(r, 0, N, u, &err), SSB4D_OK);
    assert_int_equal(ssb4d_reader_read_f32(r, 0, N, f, &err), SSB4D_OK);
    for (size_t p = 0; p < N; p++)
        for (size_t k = 0; k < P; k++) {
            assert_int_equal(u[p * P + k], expect(p, k, 65535));
            assert_true(f[p * P + k] == (float)expect(p, k, 65535));
        }
    free(u);
    free(f);
    ssb4d_reader_close(r);
    /* the same bytes as little-endian: other counts, so the flag reached the reader */
    o.big_endian = 0;
    assert_int_equal(ssb4d_reader_open(tpath("p.raw"), &o, &r, &err), SSB4D_OK);
    uint32_t one[18];
    assert_int_equal(ssb4d_reader_read(r, 1, 1, one, &err), SSB4D_OK);
    int differs = 0;
    for (size_t k = 0; k < P; k++)
        differs |= one[k] != expect(1, k, 65535);
    assert_true(differs);
    ssb4d_reader_close(r);
    /* a bad word, a wrong size: one line, no reader */
    o.format = "bogus";
    assert_int_equal(ssb4d_reader_open(tpath("p.raw"), &o, &r, &err), SSB4D_EINVAL);
    assert_null(r);
    o.format = "raw", o.offset = off + 1;
    assert_int_not_equal(ssb4d_reader_open(tpath("p.raw"), &o, &r, &err), SSB4D_OK);
    assert_null(r);
    assert_null(strchr(err.msg, '\n'));
    ssb4d_reader_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bitshuffle_definition), cmocka_unit_test(bitshuffle_roundtrip),
        cmocka_unit_test(lz4_chunk_hostile),     cmocka_unit_test(npy_formats),
        cmocka_unit_test(npy_hostile),           cmocka_unit_test(raw_formats),
        cmocka_unit_test(hdf5_discovery),        cmocka_unit_test(hdf5_types),
        cmocka_unit_test(hdf5_missing_filter),   cmocka_unit_test(arina_formats),
        cmocka_unit_test(arina_hostile),         cmocka_unit_test(mib_formats),
        cmocka_unit_test(mib_hostile),           cmocka_unit_test(detection),
        cmocka_unit_test(public_reader),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
