/* test_qem_table.c — the device layout of a .qem's count streams (src/cuda/qem_table.h), on the
 * host: the three arrays laid out as the upload lays them (every chunk's payload and offsets one
 * after the other, the selectors back to back), every stream (b, k) found where the kernels look
 * for it (offset index offidx[b] + k, payload byte paybase[b] + offset, selector b·P + k) decodes
 * to what qem_decode_block gives; the block table's scans are qem_block_range's. No device. */
#include "codec/codec.h"
#include "cuda/gstart.h"
#include "cuda/qem_table.h"
#include "plan/device_model.h"
#include "qem/qem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

static void check_file(const char *path)
{
    ssb4d_err err = {0};
    qem_file *f = NULL;
    if (qem_open(path, 1, 1, &f, &err)) {
        fprintf(stderr, "FAIL %s: %s\n", path, err.msg);
        failures++;
        return;
    }
    const qem_info *in = qem_get_info(f);
    qem_dev_table t;
    if (qem_dev_table_make(f, &t, &err)) {
        fprintf(stderr, "FAIL %s: %s\n", path, err.msg);
        failures++;
        qem_close(f);
        return;
    }
    uint8_t *pay = malloc(t.pay_bytes + 1), *sel = malloc(t.sel_bytes + 1);
    uint32_t *off = malloc(4 * t.off_words);
    for (size_t c = 0; c < t.n_chunks; c++) { /* the upload, on the host */
        qem_chunk_view v;
        qem_chunk_get(f, c, &v);
        memcpy(pay + t.chunk_pay[c], v.payload, v.payload_bytes);
        memcpy(off + t.chunk_off[c], v.offsets, 4 * (v.nblocks * t.P + 1));
        memcpy(sel + v.block0 * t.P, v.selectors, v.nblocks * t.P);
    }
    uint16_t a[512], b[512];
    size_t bad = 0, streams = 0;
    for (size_t blk = 0; blk < t.n_blocks; blk++) {
        size_t t0, n;
        qem_block_range(f, blk, &t0, &n);
        bad += t.t0[blk] != t0 || t.n[blk] != n;
        for (size_t k = 0; k < t.P; k++, streams++) {
            unsigned long long oi = qem_dev_table_offidx(&t, blk, k);
            uint32_t o0 = off[oi], o1 = off[oi + 1];
            int32_t kk = (int32_t)k;
            ssb4d_err e = {0};
            int cpu = qem_decode_block(f, blk, &kk, 1, a, &e) != SSB4D_OK;
            int dev = qem_stream_decode(sel[blk * t.P + k], pay + t.paybase[blk] + o0, o1 - o0, n,
                                        in->dtype_bytes == 1 ? 255 : 65535, b) != QEM_STREAM_OK;
            bad += cpu != dev || (!cpu && memcmp(a, b, n * sizeof *a));
        }
    }
    /* the device model's start (plan/device_model.c) is what gstart.c allocates */
    dev_start m;
    cuda_start_bytes g;
    for (size_t blocks = 0; blocks < 40; blocks += 13)
        for (size_t chunk = 0; chunk < 600; chunk += 7) {
            dev_model_start(in->n_scans, in->n_pix, in->n_blocks, in->n_chunks, in->payload_bytes, 1000, blocks, chunk, &m);
            cuda_start_opts so = {blocks, chunk, 1};
            cuda_start_sizes(in, qem_dev_table_bytes(&t), 1000, &so, &g);
            bad += m.upload != g.upload || m.calib != g.calib || m.gbuild != g.gbuild;
        }
    if (bad || t.n_blocks != in->n_blocks || t.pay_bytes != in->payload_bytes ||
        qem_dev_table_bytes(&t) < t.pay_bytes + 4 * t.off_words + t.sel_bytes) {
        fprintf(stderr, "FAIL %s: %zu of %zu streams or blocks differ\n", path, bad, streams);
        failures++;
    } else
        printf("%s: %zu chunks, %zu blocks, %zu streams where the kernels look for them\n", path, t.n_chunks,
               t.n_blocks, streams);
    free(pay), free(sel), free(off);
    qem_dev_table_free(&t);
    qem_close(f);
}

int main(void)
{
    static const char *names[] = {"u16-masked-20x30x33x17.qem", "u16-mixed-23x24x9x9.qem", "u8-poisson-16x16x12x12.qem"};
    char path[4096];
    int seen = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/qem-golden/%s", SSB4D_SHARED_DATA, names[i]);
        if (access(path, R_OK) == 0)
            check_file(path), seen++;
    }
    /* a file of several chunks and a partial last block: 3 chunks of 1024 scans + 100 */
    snprintf(path, sizeof path, "/tmp/ssb4d-qem-table-%d.qem", (int)getpid());
    size_t shape[4] = {53, 60, 6, 5};
    qem_writer_opts o;
    memset(&o, 0, sizeof o);
    memcpy(o.shape, shape, sizeof shape);
    o.dtype_bytes = 2, o.chunk_scans = 1024, o.threads = 1, o.force = 1;
    ssb4d_err err = {0};
    qem_writer *w = NULL;
    size_t N = shape[0] * shape[1], P = shape[2] * shape[3];
    uint16_t *fr = malloc(N * P * sizeof *fr);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < N * P; i++) { /* mostly small counts, some zeros, a few large */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        fr[i] = (uint16_t)((x % 97 == 0) ? x % 60000 : (i / P) % 7 == 0 ? 0 : x % 5);
    }
    if (qem_writer_open(path, &o, &w, &err) || qem_writer_append(w, fr, N, &err) || qem_writer_finish(w, &err)) {
        fprintf(stderr, "FAIL writing %s: %s\n", path, err.msg);
        failures++;
    } else
        check_file(path);
    unlink(path);
    free(fr);
    printf("%s (%d golden files, %d failures)\n", failures ? "FAILED" : "passed", seen, failures);
    return failures ? 1 : 0;
}
