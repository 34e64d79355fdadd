/* test_fs_mrc.c — the MRC header parser (src/formats/mrc.c) on headers built here byte by byte
 * from the MRC2014 layout, and the MRC reader through framesrc: both byte orders (stamped and
 * inferred), the readable modes and the refusals (each naming its field), the volume-stack scan
 * shape, the Thermo Fisher extended header fields at their published offsets, and frames read
 * back in odd blocks. The end-to-end checks against independent writers are
 * tests/formats/test_mrc.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/framesrc.h"
#include "formats/mrc.h"

static void put32(uint8_t *p, uint32_t v, int be)
{
    for (int i = 0; i < 4; i++)
        p[be ? 3 - i : i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, double d, int be)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    for (int i = 0; i < 8; i++)
        p[be ? 7 - i : i] = (uint8_t)(v >> (8 * i));
}

static void putf(uint8_t *p, float f, int be)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    put32(p, v, be);
}

/* A header of nx x ny x nz values of mode, nsymbt extended bytes, in byte order be. */
static void header(uint8_t *h, int32_t nx, int32_t ny, int32_t nz, int32_t mode, int32_t nsymbt,
                   int be, int stamp)
{
    memset(h, 0, MRC_HEADER_BYTES);
    const int32_t w[10] = {nx, ny, nz, mode, 0, 0, 0, nx, ny, 1};
    for (int i = 0; i < 10; i++)
        put32(h + 4 * i, (uint32_t)w[i], be);
    putf(h + 40, 2.0f * (float)nx, be); /* 2 Å per pixel */
    putf(h + 44, 2.0f * (float)ny, be);
    put32(h + 64, 1, be);
    put32(h + 68, 2, be);
    put32(h + 72, 3, be);
    put32(h + 92, (uint32_t)nsymbt, be);
    memcpy(h + 104, "FEI1", 4);
    put32(h + 108, 20140, be);
    memcpy(h + 208, "MAP ", 4);
    if (stamp) {
        h[212] = be ? 0x11 : 0x44;
        h[213] = be ? 0x11 : 0x44;
    }
    memcpy(h + 224, "label zero", 10);
}

static size_t file_size(int32_t nx, int32_t ny, int32_t nz, int bytes, int32_t nsymbt)
{
    return MRC_HEADER_BYTES + (size_t)nsymbt + (size_t)nx * (size_t)ny * (size_t)nz * (size_t)bytes;
}

static void test_parse_orders_and_modes(void **state)
{
    (void)state;
    static const struct { int32_t mode; int bytes, sgn, flt; const char *name; } modes[] = {
        {0, 1, 1, 0, "int8"}, {1, 2, 1, 0, "int16"}, {2, 4, 0, 1, "float32"}, {6, 2, 0, 0, "uint16"},
    };
    uint8_t h[MRC_HEADER_BYTES];
    for (int be = 0; be < 2; be++)
        for (int stamp = 0; stamp < 2; stamp++)
            for (size_t m = 0; m < 4; m++) {
                header(h, 7, 5, 6, modes[m].mode, 96, be, stamp);
                mrc_header r;
                ssb4d_err err = {0};
                size_t size = file_size(7, 5, 6, modes[m].bytes, 96);
                assert_int_equal(mrc_parse_header(h, sizeof h, size, &r, &err), SSB4D_OK);
                assert_int_equal(r.big_endian, be);
                assert_int_equal(r.stamp_known, stamp);
                assert_int_equal(r.nx, 7);
                assert_int_equal(r.ny, 5);
                assert_int_equal(r.nz, 6);
                assert_int_equal(r.dtype_bytes, modes[m].bytes);
                assert_int_equal(r.dtype_signed, modes[m].sgn);
                assert_int_equal(r.is_float, modes[m].flt);
                assert_string_equal(r.mode_name, modes[m].name);
                assert_int_equal(r.data_offset, MRC_HEADER_BYTES + 96);
                assert_int_equal(r.frame_bytes, 35 * (size_t)modes[m].bytes);
                assert_string_equal(r.exttyp, "FEI1");
                assert_string_equal(r.labels[0], "label zero");
                assert_true(fabsf(r.cella[0] - 14.0f) < 1e-6f);
                assert_int_equal(r.vol_count, 0);
            }
}

/* Each corruption must be refused with a message naming its field. */
static void test_parse_refusals(void **state)
{
    (void)state;
    static const struct { int off; int32_t v; const char *word; } bad[] = {
        {0, -3, "nx"}, {4, 0, "ny"}, {8, -1, "nz"}, {12, 77, "mode"}, {12, 12, "float16"},
        {12, 3, "complex"}, {12, 4, "complex"}, {12, 101, "4-bit"}, {92, -8, "nsymbt"},
        {92, 1 << 30, "nsymbt"}, {64, 3, "mapc"}, {72, 1, "mapc"}, {4, 6, "missing"},
    };
    uint8_t h[MRC_HEADER_BYTES];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        header(h, 4, 5, 6, 6, 0, 0, 1);
        put32(h + bad[i].off, (uint32_t)bad[i].v, 0);
        mrc_header r;
        ssb4d_err err = {0};
        assert_int_equal(mrc_parse_header(h, sizeof h, file_size(4, 5, 6, 2, 0), &r, &err), SSB4D_EFORMAT);
        if (!strstr(err.msg, bad[i].word))
            fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, bad[i].word);
    }
    /* a file shorter than its header, and one byte too many */
    header(h, 4, 5, 6, 6, 0, 0, 1);
    mrc_header r;
    ssb4d_err err = {0};
    assert_int_equal(mrc_parse_header(h, 500, 500, &r, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "1024-byte"));
    assert_int_equal(mrc_parse_header(h, sizeof h, file_size(4, 5, 6, 2, 0) + 1, &r, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "1 too many"));
}

static void test_parse_volume_stack_and_imod(void **state)
{
    (void)state;
    uint8_t h[MRC_HEADER_BYTES];
    header(h, 3, 3, 12, 6, 0, 1, 1);
    put32(h + 88, 401, 1); /* ispg: a stack of volumes */
    put32(h + 36, 4, 1);   /* mz */
    mrc_header r;
    ssb4d_err err = {0};
    assert_int_equal(mrc_parse_header(h, sizeof h, file_size(3, 3, 12, 2, 0), &r, &err), SSB4D_OK);
    assert_int_equal(r.vol_count, 3);
    assert_int_equal(r.vol_sections, 4);
    put32(h + 36, 5, 1); /* mz not dividing nz: no scan shape */
    assert_int_equal(mrc_parse_header(h, sizeof h, file_size(3, 3, 12, 2, 0), &r, &err), SSB4D_OK);
    assert_int_equal(r.vol_count, 0);
    /* IMOD: unsigned bytes unless flag 1; flag 16 (4-bit) refused */
    header(h, 3, 3, 2, 0, 0, 0, 1);
    put32(h + 152, 1146047817, 0);
    put32(h + 156, 0, 0);
    assert_int_equal(mrc_parse_header(h, sizeof h, file_size(3, 3, 2, 1, 0), &r, &err), SSB4D_OK);
    assert_int_equal(r.dtype_signed, 0);
    assert_string_equal(r.mode_name, "uint8");
    put32(h + 156, 1, 0);
    assert_int_equal(mrc_parse_header(h, sizeof h, file_size(3, 3, 2, 1, 0), &r, &err), SSB4D_OK);
    assert_int_equal(r.dtype_signed, 1);
    put32(h + 156, 16, 0);
    assert_int_equal(mrc_parse_header(h, sizeof h, file_size(3, 3, 2, 1, 0), &r, &err), SSB4D_EFORMAT);
    assert_non_null(strstr(err.msg, "4-bit"));
}

static void test_parse_fei(void **state)
{
    (void)state;
    uint8_t e[888 * 2] = {0};
    for (int be = 0; be < 2; be++) {
        memset(e, 0, sizeof e);
        put32(e, 888, be);
        put32(e + 4, 2, be);
        memcpy(e + 20, "Titan", 5);
        put64(e + 84, 300000.0, be);
        put64(e + 156, 1.5e8, be);
        put64(e + 164, 2.5e8, be);
        put64(e + 301, 0.115, be);
        put64(e + 329, 0.021, be);
        put64(e + 571, 5e-6, be);
        put32(e + 587, 1, be);
        put32(e + 591, 2, be);
        put32(e + 595, 65, be);
        put32(e + 599, 34, be);
        put64(e + 768, 0.75, be);
        put32(e + 852, 128, be);
        put32(e + 856, 127, be);
        mrc_fei f;
        assert_int_equal(mrc_parse_fei(e, sizeof e, be, 1, &f), 1);
        assert_string_equal(f.microscope, "Titan");
        assert_true(f.ht_V == 300000.0 && f.pixel_size[0] == 1.5e8 && f.pixel_size[1] == 2.5e8);
        assert_true(f.camera_length_m == 0.115 && f.convergence_rad == 0.021 && f.dwell_s == 5e-6);
        assert_int_equal(f.scan_left, 1);
        assert_int_equal(f.scan_top, 2);
        assert_int_equal(f.scan_right, 65);
        assert_int_equal(f.scan_bottom, 34);
        assert_true(f.scan_rotation_rad == 0.75);
        assert_int_equal(f.beam_center[0], 128);
        assert_int_equal(f.beam_center[1], 127);
        /* read as FEI1: no FEI2 fields */
        assert_int_equal(mrc_parse_fei(e, sizeof e, be, 0, &f), 1);
        assert_true(isnan(f.scan_rotation_rad));
        assert_int_equal(f.beam_center[0], -1);
        /* a record size beyond the bytes, or too small */
        assert_int_equal(mrc_parse_fei(e, 800, be, 1, &f), 0);
        put32(e, 100, be);
        assert_int_equal(mrc_parse_fei(e, sizeof e, be, 1, &f), 0);
    }
}

/* Through framesrc: a big-endian int16 volume stack, read in odd blocks. */
static void test_read_frames(void **state)
{
    (void)state;
    char path[] = "/tmp/ssb4d-test-mrc-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const int32_t nx = 5, ny = 3, nz = 12;
    uint8_t h[MRC_HEADER_BYTES];
    header(h, nx, ny, nz, 1, 0, 1, 1);
    put32(h + 88, 401, 1);
    put32(h + 36, 4, 1);
    memcpy(h + 104, "\0\0\0\0", 4);
    assert_int_equal(write(fd, h, sizeof h), (ssize_t)sizeof h);
    for (int32_t i = 0; i < nx * ny * nz; i++) {
        uint8_t v[2] = {(uint8_t)((i * 7) >> 8), (uint8_t)(i * 7)};
        assert_int_equal(write(fd, v, 2), 2);
    }
    close(fd);
    framesrc *s = NULL;
    ssb4d_err err = {0};
    framesrc_opts o = {.format = FRAMESRC_AUTO};
    if (framesrc_open(path, &o, &s, &err))
        fail_msg("open: %s", err.msg);
    size_t sh[4];
    framesrc_shape(s, sh);
    assert_int_equal(sh[0], 3);
    assert_int_equal(sh[1], 4);
    assert_int_equal(sh[2], (size_t)ny);
    assert_int_equal(sh[3], (size_t)nx);
    assert_string_equal(framesrc_format_name(s), "mrc");
    assert_int_equal(framesrc_dtype_signed(s), 1);
    uint32_t buf[5 * 15];
    for (size_t p0 = 0; p0 < 12; p0 += 5) {
        size_t n = p0 + 5 <= 12 ? 5 : 12 - p0;
        assert_int_equal(framesrc_read(s, p0, n, buf, &err), SSB4D_OK);
        for (size_t i = 0; i < n * 15; i++)
            assert_int_equal(buf[i], (uint32_t)((p0 * 15 + i) * 7));
    }
    framesrc_close(s);
    unlink(path);
}

/* Issue 39: a Direct Electron movie with its NAME_info.txt (kV and dwell read; a Random scan
 * refused whatever --scan-shape says), and a single 2-D image refused rather than read as 1x1. */
static void write_u16_mrc(const char *path, int32_t nx, int32_t ny, int32_t nz)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t h[MRC_HEADER_BYTES];
    header(h, nx, ny, nz, 6, 0, 0, 1);
    memcpy(h + 104, "\0\0\0\0", 4);
    assert_int_equal(fwrite(h, 1, sizeof h, f), sizeof h);
    for (int32_t i = 0; i < nx * ny * nz; i++) {
        uint8_t v[2] = {(uint8_t)i, 0};
        assert_int_equal(fwrite(v, 1, 2, f), 2);
    }
    fclose(f);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_de_sidecar_and_single_image(void **state)
{
    (void)state;
    char dir[] = "/tmp/ssb4d-test-mrc-de-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char movie[128], info[128], single[128];
    snprintf(movie, sizeof movie, "%s/a_movie.mrc", dir);
    snprintf(info, sizeof info, "%s/a_info.txt", dir);
    snprintf(single, sizeof single, "%s/sum.mrc", dir);
    write_u16_mrc(movie, 3, 2, 16);
    const char *raster =
        "Instrument Accelerating Voltage (V)                             = 200000\r\n"
        "Instrument Accelerating Voltage (V) Allowed Values              = 300000,200000,0\r\n"
        "Scan - Dwell Time (microseconds)                                = 12.5\r\n"
        "Scan - Enable                                                   = Enable\r\n"
        "Scan - Size X                                                   = 8\r\n"
        "Scan - Size Y                                                   = 2\r\n"
        "Scan - Type                                                     = Raster\r\n";
    write_text(info, raster);
    framesrc *s = NULL;
    ssb4d_err err = {0};
    if (framesrc_open(movie, NULL, &s, &err))
        fail_msg("open: %s", err.msg);
    size_t sh[4];
    framesrc_shape(s, sh);
    assert_int_equal(sh[0], 2);
    assert_int_equal(sh[1], 8);
    framesrc_calibration cal;
    framesrc_calibration_of(s, &cal);
    assert_true(fabs(cal.kv - 200.0) < 1e-12);
    assert_true(fabs(cal.dwell_us - 12.5) < 1e-12);
    framesrc_close(s);
    /* a Random scan of 16 frames (a square count), with and without --scan-shape */
    write_text(info, "Scan - Enable = Enable\nScan - Type = Random\nScan - Size X = 8\n"
                     "Scan - Size Y = 2\n");
    framesrc_opts o = {.shape = {4, 4, 0, 0}};
    for (int k = 0; k < 2; k++) {
        s = NULL;
        assert_int_equal(framesrc_open(movie, k ? &o : NULL, &s, &err), SSB4D_EFORMAT);
        assert_null(s);
        assert_non_null(strstr(err.msg, "Scan - Type = Random"));
        assert_non_null(strstr(err.msg, "not a raster"));
    }
    /* one frame: no scan, even as --scan-shape 1,1 */
    write_u16_mrc(single, 4, 3, 1);
    framesrc_opts one = {.shape = {1, 1, 0, 0}};
    for (int k = 0; k < 2; k++) {
        s = NULL;
        assert_int_equal(framesrc_open(single, k ? &one : NULL, &s, &err), SSB4D_EFORMAT);
        assert_non_null(strstr(err.msg, "single 3x4 image"));
    }
    unlink(movie);
    unlink(info);
    unlink(single);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_orders_and_modes),
        cmocka_unit_test(test_parse_refusals),
        cmocka_unit_test(test_parse_volume_stack_and_imod),
        cmocka_unit_test(test_parse_fei),
        cmocka_unit_test(test_read_frames),
        cmocka_unit_test(test_de_sidecar_and_single_image),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
