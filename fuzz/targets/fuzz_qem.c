/* fuzz_qem.c — the .qem reader (src/qem/qem.h) on a file image in memory, verify_body = 1.
 *
 * Every input is tried twice: as it is (exercises the envelope, header hash and checksum checks)
 * and "resealed": the body checksums in the header's top-level "sha256" list and the envelope's
 * header hash are recomputed in place (same length, same JSON text otherwise), so that mutated
 * layouts, selectors and streams get past the checksums and reach the layout checks and the
 * decoders, as the golden *-resealed.bad.qem files do. When a file opens, every block's pixels are
 * decoded, two small regions are read, the pixel totals and the spatial index are checked. */
#include "qem/qem.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_qem: check failed: %s (line %d)\n", #c, __LINE__);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void sha256(const uint8_t *p, size_t n, uint8_t out[32])
{
    unsigned len = 32;
    EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Recomputes the body block hashes (written over the 64-hex strings of the last top-level-looking
 * "sha256":[...] list) and then the envelope's header hash. Leaves anything odd alone. */
static void reseal(uint8_t *f, size_t size)
{
    if (size < 56)
        return;
    uint64_t L = le64(f + 8);
    if (L > size - 56)
        return;
    char *hdr = (char *)f + 56, *list = NULL;
    for (size_t i = 0; i + 8 <= L; i++)
        if (memcmp(hdr + i, "\"sha256\"", 8) == 0) {
            size_t j = i + 8;
            while (j < L && (hdr[j] == ' ' || hdr[j] == ':' || hdr[j] == '\n'))
                j++;
            if (j < L && hdr[j] == '[')
                list = hdr + j + 1;
        }
    const uint8_t *body = f + 56 + L;
    size_t body_len = size - 56 - (size_t)L;
    static const char hexd[] = "0123456789abcdef";
    for (size_t blk = 0; list && blk * ((size_t)1 << 26) < body_len; blk++) {
        char *end = hdr + L;
        while (list < end && *list != '"' && *list != ']')
            list++;
        if (list + 66 > end || *list != '"' || list[65] != '"')
            break;
        size_t off = blk << 26, n = body_len - off < ((size_t)1 << 26) ? body_len - off : (size_t)1 << 26;
        uint8_t d[32];
        sha256(body + off, n, d);
        for (int i = 0; i < 32; i++) {
            list[1 + 2 * i] = hexd[d[i] >> 4];
            list[2 + 2 * i] = hexd[d[i] & 15];
        }
        list += 66;
    }
    sha256(f + 56, (size_t)L, f + 24);
}

/* FUZZ_QEM_VERBOSE=1: say what happened to each attempt (when replaying single inputs). */
static int verbose(void)
{
    static int v = -1;
    if (v < 0)
        v = getenv("FUZZ_QEM_VERBOSE") != NULL;
    return v;
}

static void exercise(const uint8_t *data, size_t size, const char *how)
{
    qem_file *f = NULL;
    ssb4d_err err = {0};
    if (qem_open_memory(data, size, 1, &f, &err) != SSB4D_OK) {
        if (verbose())
            fprintf(stderr, "fuzz_qem (%s): refused: %s\n", how, err.msg);
        CHECK(memchr(err.msg, 0, sizeof err.msg) != NULL && err.msg[0] != 0);
        return;
    }
    const qem_info *in = qem_get_info(f);
    CHECK(in->file_bytes == size);
    CHECK(in->n_scans == in->shape[0] * in->shape[1]);
    CHECK(in->n_pix == in->shape[2] * in->shape[3]);
    CHECK(in->dtype_bytes == 1 || in->dtype_bytes == 2);
    (void)qem_valid_mask(f);
    (void)qem_header_json(f);
    qem_calibration cal;
    qem_effective_calibration(f, &cal);

    /* Every block, every pixel, in groups that keep the buffer small. */
    size_t P = in->n_pix, covered = 0;
    enum { OUT_MAX = 1 << 16 };
    uint16_t *out = malloc(OUT_MAX * sizeof *out);
    int32_t *pix = malloc(P * sizeof *pix);
    for (size_t k = 0; k < P; k++)
        pix[k] = (int32_t)k;
    int failed = 0;
    for (size_t b = 0; b < in->n_blocks && !failed; b++) {
        size_t t0, n;
        qem_block_range(f, b, &t0, &n);
        CHECK(n >= 1 && n <= 512 && t0 == covered);
        covered += n;
        size_t group = OUT_MAX / n;
        for (size_t k = 0; k < P && !failed; k += group) {
            size_t g = P - k < group ? P - k : group;
            failed = qem_decode_block(f, b, pix + k, g, out, &err) != SSB4D_OK;
        }
    }
    if (!failed)
        CHECK(covered == in->n_scans);
    if (verbose())
        fprintf(stderr, "fuzz_qem (%s): opened, %zu blocks, decode %s\n", how, in->n_blocks,
                failed ? err.msg : "ok");
    size_t lo[4], hi[4];
    for (int d = 0; d < 4; d++) {
        lo[d] = 0;
        hi[d] = in->shape[d] < 2 ? in->shape[d] : 2;
    }
    (void)qem_read_region(f, lo, hi, out, 1, &err);
    for (int d = 0; d < 4; d++) {
        lo[d] = in->shape[d] > 3 ? in->shape[d] - 3 : 0;
        hi[d] = in->shape[d];
    }
    (void)qem_read_region(f, lo, hi, out, 1, &err);
    uint64_t *tot = malloc((P ? P : 1) * sizeof *tot);
    (void)qem_pixel_totals(f, tot, 1, &err);
    (void)qem_check_spatial_index(f, 1, &err);
    free(tot);
    free(pix);
    free(out);
    qem_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Exact-size private copies, so that any read past the image is an ASan report. */
    uint8_t *a = malloc(size ? size : 1);
    memcpy(a, data, size);
    exercise(a, size, "as is");
    reseal(a, size);
    if (size >= 56)
        exercise(a, size, "resealed");
    free(a);
    return 0;
}
