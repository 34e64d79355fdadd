/* qem_table.h — where a .qem's count-stream arrays go on the device (qem_table.c; decode.h says
 * how the kernels read them). Pure C: built with the CUDA backend, tested without a device. */
#ifndef SSB4D_CUDA_QEM_TABLE_H
#define SSB4D_CUDA_QEM_TABLE_H
#include "qem/qem.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t n_blocks, n_chunks, P, N;
    size_t pay_bytes, off_words, sel_bytes; /* the three concatenated arrays */
    /* per global block (n_blocks each): its chunk's payload start, the index of its stream 0's
     * offset, its first scan and its scans */
    unsigned long long *paybase, *offidx, *t0;
    unsigned *n;
    /* per chunk: where its payload and offsets start in the concatenated arrays */
    size_t *chunk_pay, *chunk_off;
} qem_dev_table;

/* The table of f's chunks and blocks (SSB4D_ENOMEM only). */
ssb4d_status qem_dev_table_make(const qem_file *f, qem_dev_table *t, ssb4d_err *err);
void qem_dev_table_free(qem_dev_table *t);

/* Device bytes of the upload: the three arrays (offsets 4-byte words), the block table (3 u64 and a
 * u32 per block), the model tables (64 KiB + 64 × 33 words) and the error key. */
size_t qem_dev_table_bytes(const qem_dev_table *t);

/* Offset index and payload byte of stream (b, k), as the kernels compute them (for tests). */
static inline unsigned long long qem_dev_table_offidx(const qem_dev_table *t, size_t b, size_t k)
{
    return t->offidx[b] + k;
}
#endif
