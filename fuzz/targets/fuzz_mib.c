/* fuzz_mib.c — the Merlin .mib frame-header parser (src/formats/mib.h) on arbitrary bytes; when a
 * header parses and its pixel data are in the input, the frame is decoded too. The same bytes
 * also go to the .hdr text parser. Besides the sanitizers: an accepted header must be
 * self-consistent. */
#include "formats/mib.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_mib: check failed: %s (line %d)\n", #c, __LINE__);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size: reads past len are ASan reports */
    memcpy(buf, data, size);
    mib_header h;
    ssb4d_err err = {0};
    if (mib_parse_header(buf, size, &h, &err) == SSB4D_OK) {
        CHECK(h.header_bytes >= 1 && h.header_bytes <= size);
        CHECK(h.header_bytes <= MIB_MAX_HEADER_BYTES);
        CHECK(h.dtype == MIB_U8 || h.dtype == MIB_U16 || h.dtype == MIB_U32 || h.dtype == MIB_R64);
        CHECK(h.raw == (h.dtype == MIB_R64));
        CHECK(h.rows >= 1 && h.cols >= 1);
        if (!h.raw)
            CHECK(h.data_bytes == h.rows * h.cols * (size_t)h.dtype);
        else
            CHECK(h.rows * h.cols <= 8 * h.data_bytes); /* at most 8 pixels per byte (1-bit) */
        if (h.data_bytes <= size - h.header_bytes) {
            uint32_t *out = malloc(h.rows * h.cols * sizeof *out);
            mib_decode_frame(&h, buf + h.header_bytes, out);
            free(out);
        }
    } else {
        CHECK(memchr(err.msg, 0, sizeof err.msg) != NULL && err.msg[0] != 0);
    }
    mib_hdr_info info;
    mib_parse_hdr((const char *)buf, size, &info);
    free(buf);
    return 0;
}
