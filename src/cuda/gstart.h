/* gstart.h — a CUDA session's start from a .qem on the GPU (gstart.c; issue 41): the count
 * streams decoded on the device (decode.h), the calibration's integer sums there (the rest of
 * the calibration is the CPU's, on those numbers: the same bits), and G built there (cuFFT over
 * the BF pixels' scan columns, a chunk of pixels at a time: the dense 4-D array never exists),
 * its planes staying on the device as cuda_G_attach holds them. Built only with -DSSB4D_CUDA. */
#ifndef SSB4D_CUDA_GSTART_H
#define SSB4D_CUDA_GSTART_H
#include "gbuild/gbuild.h"
#include "qem/qem.h"
#include "ssb4d_advanced.h"

typedef struct {
    size_t blocks;    /* calibration: 512-scan blocks decoded at a time (0: CUDA_START_BLOCKS) */
    size_t bf_chunk;  /* G build: BF planes transformed at a time (0: CUDA_START_BF_CHUNK) */
    int host_copy;    /* 1: G's planes also copied back into its host planes (the CPU-side
                         passes read them: the fit's parallax start, the complex path, hashes) */
} cuda_start_opts;
#define CUDA_START_BLOCKS 16
#define CUDA_START_BF_CHUNK 256

/* 1 when src is a whole .qem file of counts (what the device start takes). */
int cuda_start_takes(ssb4d_source *src);

/* The device bytes the start holds at its peak: the streams' upload plus the calibration's
 * buffers (blocks·P·512 u16 counts, P u64 totals, 3 u64 moments per scan) or the G build's
 * (bf_chunk·N float columns, BF totals and pixel lists, cuFFT's own work area not counted; G's
 * planes are the device copy's). */
typedef struct {
    size_t upload, calib, gbuild;
} cuda_start_bytes;
void cuda_start_sizes(const qem_info *in, size_t upload, size_t n_bf, const cuda_start_opts *o, cuda_start_bytes *out);

/* The streams on the device, kept from the calibration for the G build (one upload instead of
 * two): keep (may be NULL: each step uploads and frees its own) holds them between the steps;
 * a step given another file's drops those first. The caller frees them (cuda_start_free) once
 * G is built. */
typedef struct cuda_start cuda_start;
void cuda_start_free(cuda_start *k); /* NULL is fine */

/* ssb4d_calibrate on src (cuda_start_takes) with passes 1 and 2's sums made on the device. */
ssb4d_status cuda_calibrate_qem(ssb4d_source *src, const ssb4d_calib_params *p, const cuda_start_opts *o,
                                cuda_start **keep, ssb4d_calibration *out, ssb4d_err *err);

/* ssb4d_gbuild on src (cuda_start_takes) with the planes built on the device and held there
 * (cuda_G_attach's layout and pass table); o must ask for float32 planes, all resident, one
 * process (else SSB4D_EINVAL, before anything runs). */
ssb4d_status cuda_gbuild_qem(ssb4d_source *src, const ssb4d_geometry *g, const int32_t *bf_pix, size_t n_bf,
                             const ssb4d_gbuild_opts *o, const cuda_start_opts *so, cuda_start **keep, ssb4d_mem *mem,
                             ssb4d_G **out, ssb4d_err *err);
/* Pixels pix[0..np) of f decoded on the device: out[i·N + t] their counts (float), tot[i] their
 * totals (for tests and tools; a damaged stream fails with the CPU decoder's message). */
ssb4d_status cuda_qem_columns(const qem_file *f, const int32_t *pix, size_t np, float *out, uint64_t *tot,
                              ssb4d_err *err);
#endif
