/* qem_table.c — the device layout of a .qem's count streams (qem_table.h): every chunk's array 0
 * and array 1 one after the other as stored (so each uploads in one copy from the mapped file),
 * array 2 back to back (its index is then b·P + k over the whole file), and per block where its
 * chunk's payload and its first offset lie. */
#include "cuda/qem_table.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

void qem_dev_table_free(qem_dev_table *t)
{
    free(t->paybase), free(t->offidx), free(t->t0), free(t->n);
    free(t->chunk_pay), free(t->chunk_off);
    memset(t, 0, sizeof *t);
}

ssb4d_status qem_dev_table_make(const qem_file *f, qem_dev_table *t, ssb4d_err *err)
{
    memset(t, 0, sizeof *t);
    const qem_info *in = qem_get_info(f);
    t->n_blocks = in->n_blocks, t->n_chunks = in->n_chunks, t->P = in->n_pix, t->N = in->n_scans;
    size_t nb = t->n_blocks ? t->n_blocks : 1, nc = t->n_chunks ? t->n_chunks : 1;
    t->paybase = malloc(nb * sizeof *t->paybase);
    t->offidx = malloc(nb * sizeof *t->offidx);
    t->t0 = malloc(nb * sizeof *t->t0);
    t->n = malloc(nb * sizeof *t->n);
    t->chunk_pay = malloc(nc * sizeof *t->chunk_pay);
    t->chunk_off = malloc(nc * sizeof *t->chunk_off);
    if (!t->paybase || !t->offidx || !t->t0 || !t->n || !t->chunk_pay || !t->chunk_off) {
        qem_dev_table_free(t);
        return ssb_fail(err, SSB4D_ENOMEM, "out of memory (the .qem's device table)");
    }
    for (size_t c = 0; c < t->n_chunks; c++) {
        qem_chunk_view v;
        qem_chunk_get(f, c, &v);
        t->chunk_pay[c] = t->pay_bytes;
        t->chunk_off[c] = t->off_words;
        for (size_t lb = 0; lb < v.nblocks; lb++) {
            size_t b = v.block0 + lb, left = v.scans - lb * 512;
            t->paybase[b] = t->pay_bytes;
            t->offidx[b] = t->off_words + lb * t->P;
            t->t0[b] = v.first + lb * 512;
            t->n[b] = (unsigned)(left < 512 ? left : 512);
        }
        t->pay_bytes += v.payload_bytes;
        t->off_words += v.nblocks * t->P + 1;
    }
    t->sel_bytes = t->n_blocks * t->P;
    return SSB4D_OK;
}

size_t qem_dev_table_bytes(const qem_dev_table *t)
{
    return t->pay_bytes + 4 * t->off_words + t->sel_bytes + t->n_blocks * (3 * 8 + 4) + 64 * 1024 + 64 * 33 * 4 + 8;
}
