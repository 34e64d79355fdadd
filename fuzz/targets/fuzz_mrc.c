/* fuzz_mrc.c — the MRC header parser (src/formats/mrc.h) on arbitrary bytes, taken as a whole
 * file image (so the size checks see the input's length), then as the header of a larger file;
 * the Thermo Fisher extended header parser on the bytes after the header and on the input
 * itself. Besides the sanitizers: an accepted header must be self-consistent (sizes >= 1, a
 * readable mode, the data filling the file exactly after the extended header, the volume-stack
 * scan shape multiplying to nz), and a refusal must come with a message. */
#include "formats/mrc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_mrc: check failed: %s (line %d)\n", #c, __LINE__);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_header(const mrc_header *h, size_t len, size_t file_size)
{
    CHECK(len >= MRC_HEADER_BYTES && file_size >= MRC_HEADER_BYTES);
    CHECK(h->nx >= 1 && h->ny >= 1 && h->nz >= 1);
    CHECK(h->mode == 0 || h->mode == 1 || h->mode == 2 || h->mode == 6);
    CHECK(h->dtype_bytes == (h->mode == 0 ? 1 : h->mode == 2 ? 4 : 2));
    CHECK(h->is_float == (h->mode == 2));
    CHECK(h->mode == 0 || h->dtype_signed == (h->mode == 1)); /* mode 0: int8, or IMOD's uint8 */
    CHECK(h->mode_name != NULL);
    CHECK((h->mapc == 1 && h->mapr == 2 && h->maps == 3) || (!h->mapc && !h->mapr && !h->maps));
    CHECK(h->nsymbt >= 0 && h->data_offset == MRC_HEADER_BYTES + (size_t)h->nsymbt);
    CHECK(h->frame_bytes == (size_t)h->nx * (size_t)h->ny * (size_t)h->dtype_bytes);
    CHECK(h->data_bytes / (size_t)h->nz == h->frame_bytes && h->data_bytes % (size_t)h->nz == 0);
    CHECK(h->data_offset <= file_size && h->data_bytes == file_size - h->data_offset);
    if (h->vol_count) {
        CHECK(h->ispg >= 401 && h->ispg <= 630);
        CHECK(h->vol_count * h->vol_sections == (size_t)h->nz && h->vol_sections == (size_t)h->mz);
    }
    CHECK(strlen(h->exttyp) <= 4);
    for (int i = 0; i < 10; i++)
        CHECK(strlen(h->labels[i]) <= 80);
    CHECK(h->stamp_known == 0 || h->stamp_known == 1);
}

static void check_fei(const uint8_t *p, size_t n, int be, int fei2)
{
    mrc_fei f;
    if (mrc_parse_fei(p, n, be, fei2, &f)) {
        CHECK(f.record_bytes >= 768 && (size_t)f.record_bytes <= n);
        CHECK(strlen(f.microscope) <= 16 && strlen(f.camera) <= 16 && strlen(f.stem_detector) <= 16);
        CHECK(strlen(f.detector_commercial) <= 16);
        if (!fei2 || f.record_bytes < 888)
            CHECK(f.beam_center[0] == -1 && f.detector_commercial[0] == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size: reads past len are ASan reports */
    memcpy(buf, data, size);
    mrc_header h;
    ssb4d_err err = {0};
    if (mrc_parse_header(buf, size, size, &h, &err) == SSB4D_OK) {
        check_header(&h, size, size);
        /* the frames lie inside the input: touch the first and the last byte of the data */
        volatile uint8_t sink = buf[h.data_offset] ^ buf[size - 1];
        (void)sink;
        if (h.nsymbt > 0)
            check_fei(buf + MRC_HEADER_BYTES, (size_t)h.nsymbt, h.big_endian, !strcmp(h.exttyp, "FEI2"));
    } else {
        CHECK(memchr(err.msg, 0, sizeof err.msg) != NULL && err.msg[0] != 0);
    }
    /* the same bytes as the first part of a longer file (only the header is read) */
    size_t longer = size * 3 + 7;
    err.msg[0] = 0;
    if (mrc_parse_header(buf, size, longer, &h, &err) == SSB4D_OK)
        check_header(&h, size, longer);
    else
        CHECK(err.msg[0] != 0);
    check_fei(buf, size, 0, 1);
    check_fei(buf, size, 1, 0);
    free(buf);
    return 0;
}
