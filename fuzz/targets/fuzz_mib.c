/* fuzz_mib.c — the Merlin .mib frame-header parser (src/formats/mib.h) on arbitrary bytes; when a
 * header parses and its pixel data are in the input, the frame is decoded too. The same bytes
 * also go to the .hdr text parser, and, read as frame time stamps, to mib_line_length (the scan
 * line length from the flyback gaps). Besides the sanitizers: an accepted header must be
 * self-consistent (sizes, time stamp and its resolution), and a line length must agree with a
 * reference check written here in 128-bit arithmetic. */
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

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Time stamps from the bytes: byte 0 picks the resolution and the reading (mode 0: raw int64
 * values; otherwise a start and 16-bit increments, so rasters of regular gaps come up). */
static void line_length(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    int mode = data[0] & 3;
    int64_t res = (int64_t[]){1, 10, 1000, 7}[data[0] >> 2 & 3];
    size_t n = 0, w = mode ? 2 : 8;
    int64_t *t = malloc(((size - 1) / w + 1) * sizeof *t);
    CHECK(t);
    uint64_t now = (uint64_t)data[1] << 40;
    for (size_t i = 1; i + w <= size; i += w) {
        if (mode) {
            now += ((uint64_t)data[i] << 8 | data[i + 1]) * (uint64_t)(mode == 2 ? 1000 : 1);
            t[n++] = (int64_t)now;
        } else {
            uint64_t v = 0;
            memcpy(&v, data + i, 8);
            t[n++] = (int64_t)v;
        }
    }
    int64_t med = -1;
    size_t L = mib_line_length(t, n, res, &med);
    CHECK(med >= 0);
    /* the reference, from the definition: gaps in 128 bits, long when 2 * gap > 3 * median */
    size_t want = 0;
    int ordered = n >= 4;
    for (size_t i = 0; i + 1 < n && ordered; i++)
        ordered = t[i + 1] >= t[i];
    if (ordered) {
        uint64_t *g = malloc((n - 1) * sizeof *g), *s = malloc((n - 1) * sizeof *s);
        CHECK(g && s);
        for (size_t i = 0; i + 1 < n; i++)
            g[i] = (uint64_t)((__int128)t[i + 1] - (__int128)t[i]);
        memcpy(s, g, (n - 1) * sizeof *s);
        qsort(s, n - 1, sizeof *s, cmp_u64);
        unsigned __int128 m = s[(n - 2) / 2];
        CHECK(m > INT64_MAX ? med == INT64_MAX : m == (unsigned __int128)(uint64_t)med);
        if (m >= 4 * (unsigned __int128)res) {
            size_t first = 0;
            for (size_t i = 0; i + 1 < n && !first; i++)
                if (2 * (unsigned __int128)g[i] > 3 * m)
                    first = i + 1;
            int ok = first >= 2 && n % first == 0 && n / first >= 2;
            for (size_t i = 0; i + 1 < n && ok; i++)
                ok = (2 * (unsigned __int128)g[i] > 3 * m) == ((i + 1) % first == 0);
            want = ok ? first : 0;
        }
        free(s);
        free(g);
    }
    if (L != want) {
        fprintf(stderr, "fuzz_mib: mib_line_length %zu, the reference %zu (n %zu)\n", L, want, n);
        abort();
    }
    free(t);
}

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
        /* the time stamp: none, or a time in 1970..2200 with a power-of-ten resolution */
        if (h.time_res_ns == 0)
            CHECK(h.time_ns == 0);
        else
            CHECK(h.time_ns >= 0 && h.time_ns < 7300000000000000000LL);
        int64_t res = h.time_res_ns;
        while (res > 1 && res % 10 == 0)
            res /= 10;
        CHECK(h.time_res_ns == 0 || (res == 1 && h.time_res_ns <= 1000000000));
        CHECK(!(h.shutter_ext_s < 0));
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
    line_length(data, size);
    return 0;
}
