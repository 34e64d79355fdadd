/* test_npy.c — the .npy header parser on well-formed and hostile headers, and the round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/npy.h"

static size_t make(unsigned char *buf, const char *dict, int version)
{
    size_t dl = strlen(dict), pre = version == 1 ? 10 : 12;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)version;
    buf[7] = 0;
    if (version == 1) {
        buf[8] = (unsigned char)(dl & 255);
        buf[9] = (unsigned char)(dl >> 8);
    } else {
        buf[8] = (unsigned char)(dl & 255);
        buf[9] = (unsigned char)(dl >> 8);
        buf[10] = buf[11] = 0;
    }
    memcpy(buf + pre, dict, dl);
    return pre + dl;
}

static void parses_good_headers(void **state)
{
    (void)state;
    unsigned char buf[512];
    ssb4d_npy_info info;
    ssb4d_err err = {0};
    size_t n = make(buf, "{'descr': '<u2', 'fortran_order': False, 'shape': (3, 4, 5, 6), }\n", 1);
    assert_int_equal(ssb_npy_parse(buf, n, &info, &err), SSB4D_OK);
    assert_string_equal(info.descr, "<u2");
    assert_int_equal(info.ndim, 4);
    assert_int_equal(info.shape[3], 6);
    assert_int_equal(info.header_bytes, n);
    assert_int_equal(info.item_bytes, 2);
    n = make(buf, "{\"shape\": (7,), \"fortran_order\": True, \"descr\": \"|u1\"}", 2);
    assert_int_equal(ssb_npy_parse(buf, n, &info, &err), SSB4D_OK);
    assert_int_equal(info.ndim, 1);
    assert_int_equal(info.fortran_order, 1);
    n = make(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 1);
    assert_int_equal(ssb_npy_parse(buf, n, &info, &err), SSB4D_OK);
    assert_int_equal(info.ndim, 0);
}

static void refuses_hostile_headers(void **state)
{
    (void)state;
    static const char *bad[] = {
        "{'fortran_order': False, 'shape': (3,), }",                       /* no descr */
        "{'descr': '<u2', 'shape': (3,), }",                                /* no fortran_order */
        "{'descr': '<u2', 'fortran_order': False, }",                       /* no shape */
        "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (3,), }",
        "{'descr': '<u2', 'fortran_order': False, 'shape': (3, -4), }",
        "{'descr': '<u2', 'fortran_order': False, 'shape': (3, x), }",
        "{'descr': '<u2', 'fortran_order': False, 'shape': (3, 4",          /* unterminated */
        "{'descr': '<u2', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }",
        "{'descr': '<u2', 'fortran_order': False, 'shape': (99999999999999999999,), }",
        "{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (3,), }", /* structured */
        "{'descr': '<u0', 'fortran_order': False, 'shape': (3,), }",
        "{'descr': '<u2",
    };
    unsigned char buf[512];
    ssb4d_npy_info info;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ssb4d_err err = {0};
        size_t n = make(buf, bad[i], 1);
        assert_int_equal(ssb_npy_parse(buf, n, &info, &err), SSB4D_EFORMAT);
        assert_true(strlen(err.msg) > 5);
    }
    ssb4d_err err = {0};
    assert_int_equal(ssb_npy_parse((const unsigned char *)"GIF89a....", 10, &info, &err), SSB4D_EFORMAT);
    size_t n = make(buf, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }", 1);
    assert_int_equal(ssb_npy_parse(buf, n - 5, &info, &err), SSB4D_EFORMAT); /* truncated */
    buf[6] = 9;
    assert_int_equal(ssb_npy_parse(buf, n, &info, &err), SSB4D_EFORMAT); /* version */
    /* Every prefix of a good header is refused, never read past. */
    n = make(buf, "{'descr': '<u2', 'fortran_order': False, 'shape': (3, 4), }\n", 1);
    for (size_t k = 0; k < n; k++) {
        unsigned char *copy = malloc(k ? k : 1);
        memcpy(copy, buf, k);
        assert_int_equal(ssb_npy_parse(copy, k, &info, &err), SSB4D_EFORMAT);
        free(copy);
    }
}

static void save_load_round_trip(void **state)
{
    (void)state;
    char path[] = "/tmp/ssb4d-npy-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t shape[2] = {5, 7};
    float v[35];
    for (int i = 0; i < 35; i++)
        v[i] = (float)i * 0.25f - 3.0f;
    ssb4d_err err = {0};
    assert_int_equal(ssb_npy_save(path, "<f4", 2, shape, v, &err), SSB4D_OK);
    ssb4d_npy_info info;
    void *data = NULL;
    assert_int_equal(ssb_npy_load(path, &info, &data, &err), SSB4D_OK);
    assert_int_equal(info.header_bytes % 64, 0);
    assert_int_equal(info.shape[0], 5);
    assert_int_equal(info.shape[1], 7);
    assert_memory_equal(data, v, sizeof v);
    free(data);
    /* Truncated data is refused. */
    assert_int_equal(truncate(path, (off_t)info.header_bytes + 10), 0);
    assert_int_equal(ssb_npy_load(path, &info, &data, &err), SSB4D_EFORMAT);
    assert_null(data);
    unlink(path);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_good_headers),
        cmocka_unit_test(refuses_hostile_headers),
        cmocka_unit_test(save_load_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
