/* fuzz_npy.c — the .npy header parser (src/io/npy.h) on arbitrary bytes. Besides the sanitizers:
 * a header it accepts must describe itself consistently. */
#include "io/npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_npy: check failed: %s (line %d)\n", #c, __LINE__);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Exact-size copy so that any read past len is an ASan report. */
    unsigned char *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    ssb4d_npy_info info;
    ssb4d_err err = {0};
    ssb4d_status st = ssb_npy_parse(buf, size, &info, &err);
    if (st == SSB4D_OK) {
        CHECK(info.header_bytes <= size);
        CHECK(info.ndim >= 0 && info.ndim <= 8);
        CHECK(info.item_bytes >= 1 && info.item_bytes <= 16);
        CHECK(memchr(info.descr, 0, sizeof info.descr) != NULL);
    } else {
        CHECK(memchr(err.msg, 0, sizeof err.msg) != NULL && err.msg[0] != 0);
    }
    free(buf);
    return 0;
}
