/* qem.h — the .qem v1 container (../shared/spec/qem-format.md): a validating reader over a
 * memory-mapped file and a streaming, atomic writer. Codec "runtime-column-rans-spatial-v2" only.
 *
 * Reader: qem_open runs every file-level check of §11 (rules 1–15, body checksums included)
 * before anything is decoded; stream-level checks (16–18) run on every decode. Errors are one
 * line naming the file and, for streams, the chunk / block / pixel.
 * Writer: frames are appended in scan order; each chunk's streams are encoded in parallel and
 * the body is written to a temporary file next to the destination; qem_writer_finish writes the
 * header, fsyncs and publishes without overwriting (unless force). */
#ifndef SSB4D_QEM_QEM_H
#define SSB4D_QEM_QEM_H
#include "ssb4d_advanced.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* ---- reader ---- */
typedef struct qem_file qem_file;

/* Effective calibration (§9.8): overrides win over recorded values; NaN = unknown. */
typedef struct {
    double kv, semiangle_mrad, scan_step_A[2], det_sampling[2], camera_length_mm, dwell_us;
    int det_sampling_inverse_A; /* 1: det_sampling is in 1/angstrom, 0: mrad */
} qem_calibration;

typedef struct {
    size_t shape[4];          /* scan_rows, scan_cols, det_rows, det_cols */
    int dtype_bytes;          /* 1 (uint8) or 2 (uint16) */
    size_t n_scans, n_pix;    /* N, P */
    size_t n_chunks, n_blocks;/* blocks over all chunks */
    size_t file_bytes, header_bytes, body_bytes;
    size_t payload_bytes;     /* sum of array-0 counts: the count streams themselves */
} qem_info;

/* Opens and validates path (memory-mapped read-only). verify_body = 0 skips the body SHA-256
 * (only for tools that explicitly say so; every decode path opens with 1). threads: for the
 * checksums (0 = all). Rule 15 (stream offsets) is checked for every chunk here, so the decode
 * functions below may be called from several threads at once on one handle. */
ssb4d_status qem_open(const char *path, int verify_body, int threads, qem_file **out, ssb4d_err *err);
/* Same, for a file image in memory (the fuzzers); data must outlive the handle. One thread;
 * messages name the file "<memory>". */
ssb4d_status qem_open_memory(const uint8_t *data, size_t size, int verify_body, qem_file **out,
                             ssb4d_err *err);
void qem_close(qem_file *f); /* NULL is fine */

const qem_info *qem_get_info(const qem_file *f);
/* valid[k] = 1 for a valid detector pixel, 0 for a flagged one (P bytes, owned by f). */
const uint8_t *qem_valid_mask(const qem_file *f);
const cJSON *qem_header_json(const qem_file *f);       /* the parsed header (owned by f) */
const char *qem_file_name(const qem_file *f);          /* the path given to qem_open */
void qem_effective_calibration(const qem_file *f, qem_calibration *cal);

/* What was done to the flagged (invalid) detector pixels' counts before encoding, from the
 * header: metadata.hot_pixel_correction (written by ssb4d import; other writers record none) and
 * the processing records that changed stored values (§9.5). Every other count is stored as
 * read. The strings point into f's header. */
typedef struct {
    const char *policy;       /* --hot-pixels at import: "median", "zero" or "none"; NULL when the
                                 file does not record one */
    int flagged_recorded;     /* 1 when the two counts below were recorded with the policy */
    size_t flagged_by_file;   /* flagged by the source's own mask */
    size_t flagged_by_totals; /* found hot or dead from the per-pixel totals at import */
    int replaced;             /* 1: a flagged_pixel_replacement record: flagged pixels' counts were
                                 replaced (they are not the source's) */
    const char *method;       /* its method ("median_3x3_valid_neighbours", "zero"), else NULL */
    size_t replaced_pixels;   /* its pixel_count */
    size_t markers_zeroed;    /* flagged_marker_zeroing's value_count: marker values of flagged
                                 pixels too large for the dtype, stored as 0 */
} qem_flag_handling;
void qem_get_flag_handling(const qem_file *f, qem_flag_handling *h);

/* Block b (0 <= b < n_blocks, over all chunks in order) covers scans [t0, t0+n). */
void qem_block_range(const qem_file *f, size_t b, size_t *t0, size_t *n);

/* Chunk c (0 <= c < n_chunks) as stored, for a decoder elsewhere (the GPU's, src/cuda/gstart.c):
 * its blocks [block0, block0 + nblocks) over the file, scans [first, first + scans), the count
 * streams' payload (array 0), their offsets (array 1: nblocks*P + 1 u32 LE, checked at open) and
 * selectors (array 2: nblocks*P bytes). The pointers are into the mapped file (not aligned). */
typedef struct {
    size_t block0, nblocks, first, scans;
    const uint8_t *payload, *offsets, *selectors;
    size_t payload_bytes;
} qem_chunk_view;
void qem_chunk_get(const qem_file *f, size_t c, qem_chunk_view *v);

/* Decodes pixels pix[0..npix) of block b: out[i * n + j] = count of pixel pix[i] at scan t0+j. */
ssb4d_status qem_decode_block(const qem_file *f, size_t b, const int32_t *pix, size_t npix,
                              uint16_t *out, ssb4d_err *err);

/* Dense slice [r0,r1) x [c0,c1) x [dr0,dr1) x [dc0,dc1), C order, as uint16 (uint8 files are
 * widened). Decodes only the blocks and pixels the region touches, in parallel over (block,
 * detector row); the output does not depend on threads (0 = all). An empty range on any axis
 * decodes nothing (out may then be NULL). Like every decode function, a damaged stream fails
 * with one line naming chunk, block, pixel (row, col) and the codec's reason; with several, the
 * first in block-major order is reported. */
ssb4d_status qem_read_region(const qem_file *f, const size_t lo[4], const size_t hi[4],
                             uint16_t *out, int threads, ssb4d_err *err);
/* Exact per-pixel totals over all scans (P values), straight from the streams. */
ssb4d_status qem_pixel_totals(const qem_file *f, uint64_t *totals, int threads, ssb4d_err *err);
/* Checks the spatial index of every block against sums of the decoded counts. */
ssb4d_status qem_check_spatial_index(const qem_file *f, int threads, ssb4d_err *err);

/* ---- writer ---- */
typedef struct qem_writer qem_writer;

typedef struct {
    size_t shape[4];
    int dtype_bytes;          /* 1 or 2: every appended value must fit */
    size_t chunk_scans;       /* scans per chunk. 0: the largest multiple of 512 in [512, 8192]
                                 whose uint16 frame buffer (chunk_scans * P * 2 bytes) stays
                                 within 128 MiB (and that keeps the §3.4 uint32 bound). Otherwise
                                 a multiple of 512, or >= N (one chunk); refused if it breaks the
                                 uint32 bound. Writer memory: that frame buffer + one block's
                                 encoder scratch (P * qem_stream_bound(512) bytes) + the chunk's
                                 small arrays (about 5 bytes per stream, spatial words). */
    const uint8_t *valid;     /* P bytes, 1 = valid; NULL = all valid */
    int threads;              /* 0: all cores */
    int force;                /* 1: replace an existing file */
    cJSON *scientific_metadata; /* taken over by the writer, also when open fails
                                   (NULL: a minimal lossless record) */
    cJSON *metadata;            /* taken over likewise (NULL: {}) */
} qem_writer_opts;

/* Checks the options and the scientific metadata (§9, with the §9.5 cross-checks against
 * metadata), refuses an existing path unless force ("exists; use --force to replace it") and
 * creates the temporary body file "<path>.tmp<pid>.body". The two cJSON trees of o are taken
 * over even when this fails. */
ssb4d_status qem_writer_open(const char *path, const qem_writer_opts *o, qem_writer **out,
                             ssb4d_err *err);
/* Appends frames of nscans consecutive scans (P values each, scan order). Every full chunk is
 * encoded and written before this returns. A value above the dtype maximum, or more than N
 * scans, fails the writer: later calls fail and finish removes everything. */
ssb4d_status qem_writer_append(qem_writer *w, const uint16_t *frames, size_t nscans, ssb4d_err *err);
/* Replaces the scientific metadata and metadata recorded in the header (both taken over, also on
 * failure); allowed any time before qem_writer_finish (e.g. to add a processing record whose
 * counts are known only at the end). */
ssb4d_status qem_writer_set_metadata(qem_writer *w, cJSON *scientific_metadata, cJSON *metadata,
                                     ssb4d_err *err);
/* After all N scans: header, fsync, publish (link + unlink, so an existing name is never
 * replaced; rename with force). On failure nothing is left behind. Frees w. */
ssb4d_status qem_writer_finish(qem_writer *w, ssb4d_err *err);
/* Drops everything written so far (no file appears). Frees w. NULL is fine. */
void qem_writer_abort(qem_writer *w);
/* Bytes written to the body so far (for progress and the memory report). */
size_t qem_writer_body_bytes(const qem_writer *w);

/* ---- scientific metadata (§9) ---- */
typedef struct {
    double kv, semiangle_mrad, scan_step_A[2], det_sampling[2]; /* NaN / <= 0: unknown */
    int det_sampling_inverse_A;
    const char *source_format; /* "unknown", "numpy", "raw", "hdf5", "dectris-arina-hdf5", "merlin-mib" */
    cJSON *source_metadata;    /* taken over (NULL: {}) */
    cJSON *processing_extra;   /* array of extra processing records, taken over (NULL: none) */
    double camera_length_mm, dwell_us; /* NaN / <= 0: unknown (0 from a {0} initialiser) */
} qem_meta_in;

/* Builds a schema-2 scientific_metadata object (caller owns it); in = NULL: nothing known.
 * The objects in `in` are taken over even on failure. NULL only when out of memory. */
cJSON *qem_build_scientific_metadata(const size_t shape[4], const qem_meta_in *in);
/* Effective calibration (§9.8) of a scientific_metadata object (overrides win; NaN = unknown;
 * detector row/column recorded in different units are left unknown). */
void qem_calibration_from_metadata(const cJSON *sci, qem_calibration *cal);
/* §9 checks of scientific_metadata (and the §9.5 cross-checks with metadata). */
ssb4d_status qem_validate_scientific_metadata(const cJSON *sci, const cJSON *meta,
                                              const size_t shape[4], const char *dtype,
                                              ssb4d_err *err);
#endif
