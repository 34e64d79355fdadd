/* test_decode_host.cu — the GPU's stream decoder (src/cuda/decode_stream.cuh) compiled for the host
 * and held to rans.c's integers without a device: every stream of the golden .qem files, of a
 * written file of several chunks and of the damaged ones, found through the device table
 * (src/cuda/qem_table.h) with the model tables packed as gstart.c packs them, decodes to what
 * qem_decode_block gives, through both emitters the kernels use (the calibration's counts, four a
 * store, and G's float columns), and fails exactly where it fails. */
extern "C" {
#include "codec/codec.h"
#include "codec/rans_tables.h"
#include "cuda/qem_table.h"
#include "qem/qem.h"
}
#include "cuda/decode.h"
#include "cuda/decode_stream.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

static size_t check_file(const char *path, int damaged)
{
    ssb4d_err err = {};
    qem_file *f = NULL;
    if (qem_open(path, 1, 1, &f, &err))
        return damaged ? 0 : (fprintf(stderr, "FAIL %s: %s\n", path, err.msg), failures++, 0);
    const qem_info *in = qem_get_info(f);
    qem_dev_table t;
    if (qem_dev_table_make(f, &t, &err)) {
        failures++;
        qem_close(f);
        return 0;
    }
    static uint32_t fs[CU_QEM_FS_WORDS];
    for (int m = 0; m < 64; m++)
        for (int s = 0; s < 33; s++)
            fs[m * 33 + s] = (uint32_t)qem_rans_start[m][s] << 16 | qem_rans_freq[m][s];
    const uint8_t *sym = &qem_rans_slot_symbol[0][0];
    const uint32_t maxval = in->dtype_bytes == 1 ? 255 : 65535;
    size_t bad = 0, streams = 0, refused = 0;
    for (size_t c = 0; c < t.n_chunks; c++) {
        qem_chunk_view v;
        qem_chunk_get(f, c, &v);
        for (size_t lb = 0; lb < v.nblocks; lb++) {
            size_t b = v.block0 + lb, n = t.n[b];
            for (size_t k = 0; k < t.P; k++, streams++) {
                uint32_t o0, o1;
                size_t oi = (size_t)(t.offidx[b] + k - t.chunk_off[c]); /* into this chunk's array 1 */
                memcpy(&o0, v.offsets + 4 * oi, 4);
                memcpy(&o1, v.offsets + 4 * (oi + 1), 4);
                uint32_t sel = v.selectors[lb * t.P + k];
                const uint8_t *buf = v.payload + o0;
                alignas(16) uint16_t cnt[512];
                float col[512];
                uint16_t ref[512];
                EmitCounts ec{cnt, 0};
                EmitColumn el{col, 0};
                int bc = decode(sel, buf, o1 - o0, (unsigned)n, maxval, sym, fs, ec);
                int bl = decode(sel, buf, o1 - o0, (unsigned)n, maxval, sym, fs, el);
                int32_t kk = (int32_t)k;
                ssb4d_err e = {};
                int br = qem_decode_block(f, b, &kk, 1, ref, &e) != SSB4D_OK;
                refused += br;
                uint32_t sum = 0;
                for (size_t j = 0; !br && j < n; j++) {
                    bad += cnt[j] != ref[j] || col[j] != (float)ref[j];
                    sum += ref[j];
                }
                bad += bc != br || bl != br || (!br && (ec.sum != sum || el.sum != sum));
            }
        }
    }
    if (bad || (damaged && !refused) || (!damaged && refused)) {
        fprintf(stderr, "FAIL %s: %zu of %zu streams differ (%zu refused)\n", path, bad, streams, refused);
        failures++;
    } else
        printf("%s: %zu streams, %zu refused as the CPU refuses them: rans.c's integers\n", path, streams, refused);
    qem_dev_table_free(&t);
    qem_close(f);
    return streams;
}

int main(void)
{
    static const char *good[] = {"u16-masked-20x30x33x17.qem", "u16-mixed-23x24x9x9.qem", "u8-poisson-16x16x12x12.qem"};
    static const char *bad[] = {"u16-mixed-23x24x9x9.stream-resealed.bad.qem",
                                "u16-mixed-23x24x9x9.sparse-order-resealed.bad.qem",
                                "u16-mixed-23x24x9x9.model-resealed.bad.qem"};
    char path[4096];
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        snprintf(path, sizeof path, "%s/qem-golden/%s", SSB4D_SHARED_DATA, good[i]);
        if (access(path, R_OK) == 0)
            check_file(path, 0);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(path, sizeof path, "%s/qem-golden/%s", SSB4D_SHARED_DATA, bad[i]);
        if (access(path, R_OK) == 0)
            check_file(path, 1);
    }
    /* every selector kind at once: 4 chunks of 1024 scans and a partial last block, u16 values
     * from zero streams to escapes, and constant pixels */
    snprintf(path, sizeof path, "/tmp/ssb4d-decode-host-%d.qem", (int)getpid());
    size_t shape[4] = {53, 60, 6, 5}, N = 53 * 60, P = 30;
    qem_writer_opts o;
    memset(&o, 0, sizeof o);
    memcpy(o.shape, shape, sizeof shape);
    o.dtype_bytes = 2, o.chunk_scans = 1024, o.threads = 1, o.force = 1;
    uint16_t *fr = (uint16_t *)malloc(N * P * sizeof *fr);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < N * P; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t k = i % P;
        fr[i] = (uint16_t)(k == 0 ? 0 : k == 1 ? 7 : k < 8 ? (x % 50 == 0) * (1 + x % 100) : k < 12 ? x % 3 :
                          k < 20 ? x % 40 : (x % 97 == 0) ? x % 60000 : x % 9);
    }
    ssb4d_err err = {};
    qem_writer *w = NULL;
    if (qem_writer_open(path, &o, &w, &err) || qem_writer_append(w, fr, N, &err) || qem_writer_finish(w, &err)) {
        fprintf(stderr, "FAIL writing %s: %s\n", path, err.msg);
        failures++;
    } else
        check_file(path, 0);
    unlink(path);
    free(fr);
    printf("%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
