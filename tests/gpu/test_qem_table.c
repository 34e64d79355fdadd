/* test_qem_table.c — the device layout of a .qem's count streams (src/cuda/qem_table.h), on the
 * host (and the calibration's hook for sums made elsewhere, ssb_calibrate_with_sums, fed the
 * sums the device makes, computed here from the streams: the CPU's calibration bit for bit): the three arrays laid out as the upload lays them (every chunk's payload and offsets one
 * after the other, the selectors back to back), every stream (b, k) found where the kernels look
 * for it (offset index offidx[b] + k, payload byte paybase[b] + offset, selector b·P + k) decodes
 * to what qem_decode_block gives; the block table's scans are qem_block_range's. No device. */
#include "calibrate/calibrate_internal.h"
#include "codec/codec.h"
#include "cuda/gstart.h"
#include "cuda/qem_table.h"
#include "plan/device_model.h"
#include "qem/qem.h"
#include "source/source.h"
#include "ssb4d_advanced.h"

#include <math.h>
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

/* The device's sums, made on the host the way the kernels make them: per stream, its counts into
 * the pixel's total and into each scan's moments; pass 2 takes the flagged pixels' counts out. */
static ssb4d_status host_totals(void *user, uint64_t *tot, uint64_t *mom, ssb4d_err *err)
{
    const qem_file *f = user;
    const qem_info *in = qem_get_info(f);
    uint16_t v[512];
    for (size_t b = 0; b < in->n_blocks; b++) {
        size_t t0, n;
        qem_block_range(f, b, &t0, &n);
        for (size_t k = 0; k < in->n_pix; k++) {
            int32_t kk = (int32_t)k;
            ssb4d_status st = qem_decode_block(f, b, &kk, 1, v, err);
            if (st)
                return st;
            for (size_t j = 0; j < n; j++) {
                tot[k] += v[j];
                if (mom) {
                    mom[3 * (t0 + j)] += v[j];
                    mom[3 * (t0 + j) + 1] += (uint64_t)(k / in->shape[3]) * v[j];
                    mom[3 * (t0 + j) + 2] += (uint64_t)(k % in->shape[3]) * v[j];
                }
            }
        }
    }
    return SSB4D_OK;
}

static ssb4d_status host_unflag(void *user, const int32_t *pix, size_t np, uint64_t *mom, ssb4d_err *err)
{
    const qem_file *f = user;
    const qem_info *in = qem_get_info(f);
    uint16_t v[512];
    for (size_t b = 0; b < in->n_blocks; b++) {
        size_t t0, n;
        qem_block_range(f, b, &t0, &n);
        for (size_t i = 0; i < np; i++) {
            ssb4d_status st = qem_decode_block(f, b, &pix[i], 1, v, err);
            if (st)
                return st;
            for (size_t j = 0; j < n; j++) {
                mom[3 * (t0 + j)] -= v[j];
                mom[3 * (t0 + j) + 1] -= (uint64_t)(pix[i] / (int32_t)in->shape[3]) * v[j];
                mom[3 * (t0 + j) + 2] -= (uint64_t)(pix[i] % (int32_t)in->shape[3]) * v[j];
            }
        }
    }
    return SSB4D_OK;
}

static int same(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

/* A simulated acquisition calibrated from the frames and from the streams' sums: the same bits. */
static void calibrate_same(void)
{
    ssb4d_err err = {0};
    ssb4d_sim_params sp;
    ssb4d_sim_info info;
    char path[128];
    snprintf(path, sizeof path, "/tmp/ssb4d-cal-sums-%d.qem", (int)getpid());
    if (ssb4d_sim_params_preset(&sp, "tiny", &err) || (sp.scan_n = 48, sp.scan_cells = 5, 0) ||
        ssb4d_sim_describe(&sp, &info, &err)) {
        fprintf(stderr, "FAIL simulating: %s\n", err.msg);
        failures++;
        return;
    }
    /* with a hot pixel, so that pass 2 (the flagged pixels out of the moments) runs */
    size_t shape[4] = {(size_t)sp.scan_n, (size_t)sp.scan_n, (size_t)sp.det, (size_t)sp.det};
    size_t N = shape[0] * shape[1], P = shape[2] * shape[3];
    uint16_t *counts = malloc(N * P * sizeof *counts);
    qem_writer_opts o;
    memset(&o, 0, sizeof o);
    memcpy(o.shape, shape, sizeof shape);
    o.dtype_bytes = 2, o.threads = 1, o.force = 1;
    qem_writer *w = NULL;
    int bad = !counts || ssb4d_simulate_to_memory(&sp, counts, NULL, NULL, NULL, &info, &err);
    for (size_t t = 0; !bad && t < N; t++)
        counts[t * P + 3 * shape[3] + 5] = 4000;
    if (bad || qem_writer_open(path, &o, &w, &err) || qem_writer_append(w, counts, N, &err) ||
        qem_writer_finish(w, &err)) {
        fprintf(stderr, "FAIL writing %s: %s\n", path, err.msg);
        failures++;
        free(counts);
        return;
    }
    free(counts);
    ssb4d_source *src = NULL;
    if (ssb4d_source_open(path, &src, &err)) {
        fprintf(stderr, "FAIL %s: %s\n", path, err.msg);
        failures++;
        return;
    }
    ssb4d_calib_params cp;
    ssb4d_calib_params_default(&cp);
    cp.kv = sp.kv, cp.semiangle_mrad = sp.semiangle_mrad;
    cp.scan_step_A[0] = cp.scan_step_A[1] = info.scan_step_A; /* the rotation measured */
    ssb4d_calibration a, b;
    ssb_cal_sums sums = {host_totals, host_unflag, (void *)ssb_source_qem(src)};
    if (ssb4d_calibrate(src, &cp, &a, &err) || ssb_calibrate_with_sums(src, &cp, &sums, &b, &err)) {
        fprintf(stderr, "FAIL calibrating: %s\n", err.msg);
        failures++;
    } else {
        size_t P = a.det_shape[0] * a.det_shape[1];
        int ok = !memcmp(a.mean_pattern, b.mean_pattern, P * sizeof *a.mean_pattern) && a.n_bf == b.n_bf &&
                 !memcmp(a.bf_pix, b.bf_pix, a.n_bf * sizeof *a.bf_pix) && a.n_flagged == b.n_flagged &&
                 same(a.geom.rotation_deg, b.geom.rotation_deg) && same(a.curl_ratio, b.curl_ratio) &&
                 same(a.rotation_sigma_deg, b.rotation_sigma_deg) && same(a.total_counts, b.total_counts) &&
                 same(a.geom.det_sampling_mrad[0], b.geom.det_sampling_mrad[0]) && a.geom.flip == b.geom.flip;
        if (!ok) {
            fprintf(stderr, "FAIL the calibration from the sums differs: rotation %.17g vs %.17g\n", a.geom.rotation_deg,
                    b.geom.rotation_deg);
            failures++;
        } else
            printf("calibration from the streams' sums: the frames' bits (%zu BF, rotation %.6f deg, %zu flagged)\n",
                   a.n_bf, a.geom.rotation_deg, a.n_flagged);
        if (!a.n_flagged) {
            fprintf(stderr, "FAIL the hot pixel was not flagged: pass 2 did not run\n");
            failures++;
        }
        ssb4d_calibration_free(&a);
        ssb4d_calibration_free(&b);
    }
    ssb4d_source_close(src);
    unlink(path);
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
    calibrate_same();
    printf("%s (%d golden files, %d failures)\n", failures ? "FAILED" : "passed", seen, failures);
    return failures ? 1 : 0;
}
