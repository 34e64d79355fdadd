/* decode.h — the .qem count streams decoded on the GPU (decode.cu), callable from C (gstart.c).
 *
 * The file's count-stream arrays go to the device as stored (qem-format.md §4): every chunk's
 * payload (array 0) and offsets (array 1) one after the other, the selectors (array 2) back to
 * back, so that stream s = b·P + k of global block b sits at offset index offidx[b] + k of the
 * offsets and at payload byte paybase[b] + offset. One thread decodes one stream (qem-format §5–§6,
 * every check of rans.c's decoder), the model tables (the slot → symbol lookup and each symbol's
 * frequency and start) in shared memory; the integers are rans.c's exactly. A damaged stream makes
 * its key b·P + k the smallest failed one (cu_qem.err_key, atomicMin: the same stream whatever
 * the order); the host then asks the CPU decoder for its message. */
#ifndef SSB4D_CUDA_DECODE_H
#define SSB4D_CUDA_DECODE_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const uint8_t *pay;                 /* every chunk's array 0, concatenated */
    const uint32_t *off;                /* every chunk's array 1, concatenated */
    const uint8_t *sel;                 /* every chunk's array 2: index b·P + k */
    const unsigned long long *paybase;  /* per global block: its chunk's payload start in pay */
    const unsigned long long *offidx;   /* per global block: index of its stream 0's offset in off */
    const unsigned long long *t0;       /* per global block: its first scan */
    const unsigned *n;                  /* per global block: its scans (1..512) */
    unsigned long long P, N;            /* detector pixels, scans */
    unsigned long long n_blocks;
    unsigned det_cols, maxval;          /* maxval: 255 or 65535 */
    unsigned long long *err_key;        /* device: the smallest failed stream key, else ~0 */
    /* the model tables (codec/rans_tables.h) on the device: slot → symbol, 64 × 1024 bytes, and
     * per model and symbol start << 16 | freq, 64 × 33 words */
    const uint8_t *slot_sym;
    const uint32_t *fs;
} cu_qem;

#define CU_QEM_FS_WORDS (64 * 33)
/* Every launcher returns a cudaError_t. */

/* Every pixel's streams of blocks [b0, b0 + nb): dec[((b − b0)·P + k)·512 + j] = count of pixel k
 * at scan t0[b] + j (j < n[b]); tot[k] += the stream's sum (integer atomics: order-free). */
int cu_qem_decode_counts(cu_qem q, size_t b0, size_t nb, uint16_t *dec, unsigned long long *tot, void *stream);

/* The per-scan moments of those blocks from dec: mom[3t] += Σ_k v, mom[3t+1] += Σ_k row(k)·v,
 * mom[3t+2] += Σ_k col(k)·v (uint64, exact). */
int cu_qem_moments(cu_qem q, size_t b0, size_t nb, const uint16_t *dec, unsigned long long *mom, void *stream);

/* Pixels pix[0..np) over every block: col[i·N + t] = count (float; col NULL: none) and
 * tot[i] += the counts (integers). */
int cu_qem_decode_columns(cu_qem q, const int *pix, size_t np, float *col, unsigned long long *tot, void *stream);

/* The pixels pix[0..np)'s counts taken out of the moments (the calibration's flagged pixels). */
int cu_qem_unflag(cu_qem q, const int *pix, size_t np, unsigned long long *mom, void *stream);

#ifdef __cplusplus
}
#endif
#endif
