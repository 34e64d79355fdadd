/* framesrc.h — acquisitions in foreign formats, read as blocks of whole frames for
 * `ssb4d import` (streaming: the importer never holds more than the block it asked for).
 *
 * Formats: .npy (uint8/uint16/uint32, C order), raw binary (--shape --dtype --endian
 * [--offset]), HDF5 (a named dataset, or the one rank-4 integer dataset found by EMD / py4DSTEM
 * discovery), Dectris Arina master + data files (bitshuffle-LZ4 chunks, decoded with liblz4 and
 * our own bitshuffle), Merlin .mib (1/6/12/24-bit frames, single chip).
 * Every reader checks what the file says against its size and refuses with one clear line.
 *
 * Also handled: signed HDF5 / .npy integers (every value read must be >= 0), HDF5 stacks of
 * frames (frame, det_row, det_col) named with --dataset, plain bitshuffle (no LZ4) Arina chunks,
 * the NXem companion NAME_em_metadata.h5 of an Arina master, Merlin quad (2x2) files and raw
 * (R64) frames of 1/6/12 bits (single or quad) and 24 bits (single). Frames keep the file's
 * orientation (no flips). libhdf5's automatic error printing is switched off by the HDF5
 * readers (a process-wide libhdf5 setting); errors come back as one line instead. */
#ifndef SSB4D_FORMATS_FRAMESRC_H
#define SSB4D_FORMATS_FRAMESRC_H
#include "ssb4d_advanced.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    FRAMESRC_AUTO = 0, /* from the extension / magic bytes */
    FRAMESRC_NPY, FRAMESRC_RAW, FRAMESRC_HDF5, FRAMESRC_ARINA, FRAMESRC_MIB,
    FRAMESRC_EMPAD,           /* EMPAD .xml + .raw (float32 frames with two footer rows) */
    FRAMESRC_DM,              /* Gatan DM3 / DM4 4-D datasets */
    FRAMESRC_VELOX,           /* Thermo Fisher Velox EMD (HDF5, frames last) */
    FRAMESRC_MRC,             /* MRC / MRCS stacks of frames */
} framesrc_format;

typedef struct {
    framesrc_format format;
    const char *dataset;      /* HDF5: dataset path; NULL = discover */
    /* raw: */
    size_t shape[4];          /* required for raw; for .mib, Arina and HDF5 frame stacks the
                                 scan shape may be given here (shape[0], shape[1]; one of them
                                 may be 0 to be derived from the frame count); it wins over the
                                 file's own record and must match the frame count. shape[2..3],
                                 when non-zero, must equal the file's detector shape */
    int dtype_bytes;          /* raw: 1, 2 or 4 (unsigned integers; 4 with dtype_float: float32) */
    int dtype_float;          /* raw: 1 = the values are IEEE float32 */
    int big_endian;           /* raw: 1 = big-endian */
    size_t offset;            /* raw: bytes to skip at the start */
    /* Merlin: further files of the same acquisition, in scan order after `path` (NULL: none;
       a reader that takes one file refuses them). */
    const char *const *more_paths;
    size_t n_more_paths;
} framesrc_opts;

typedef struct framesrc framesrc;

ssb4d_status framesrc_open(const char *path, const framesrc_opts *o, framesrc **out, ssb4d_err *err);
void framesrc_close(framesrc *s);

/* shape (scan_rows, scan_cols, det_rows, det_cols) and the source's integer width (1, 2, 4). */
void framesrc_shape(const framesrc *s, size_t shape[4]);
int framesrc_dtype_bytes(const framesrc *s);
/* 1 when the source holds float32 values (EMPAD, gain-normalised data): framesrc_read refuses
 * it (ssb4d never quantises silently); framesrc_read_f32 reads it. */
int framesrc_is_float(const framesrc *s);
/* 1 when the source stores signed integers (HDF5 int8/16/32, .npy i1/i2/i4): accepted because
 * framesrc_read refuses, naming the frame and pixel, any value below zero. 0 otherwise. */
int framesrc_dtype_signed(const framesrc *s);
/* Parses a --format word: "auto", "npy", "raw", "hdf5", "arina", "mib", "empad", "dm", "velox",
 * "mrc" (SSB4D_EINVAL otherwise). */
ssb4d_status framesrc_format_parse(const char *name, framesrc_format *f, ssb4d_err *err);
/* Short format name recorded in the .qem: "numpy", "raw", "hdf5", "dectris-arina-hdf5",
 * "merlin-mib". */
const char *framesrc_format_name(const framesrc *s);
/* Pixels the file marks as bad (P bytes, 1 = flagged), or NULL when the file has no mask. */
const uint8_t *framesrc_flag_mask(const framesrc *s);
/* What the file records about the microscope (NaN = not recorded). */
typedef struct {
    double kv, semiangle_mrad, scan_step_A[2], det_sampling_mrad[2], camera_length_mm, dwell_us;
} framesrc_calibration;
void framesrc_calibration_of(const framesrc *s, framesrc_calibration *cal);
/* The reader-retained source fields as a JSON object (owned by s; may be empty). */
const cJSON *framesrc_source_metadata(const framesrc *s);
/* Frames [pos0, pos0+npos) as uint32: out[(p * det_rows + r) * det_cols + c]. Reads are
 * fastest in increasing order; any order works. */
ssb4d_status framesrc_read(framesrc *s, size_t pos0, size_t npos, uint32_t *out, ssb4d_err *err);
/* The same frames as float32, from any source: integer counts are converted exactly (every
 * count below 2^24 is a float32 integer; larger ones are refused), float sources read as stored
 * (NaN or infinite values are refused, naming the frame and pixel). */
ssb4d_status framesrc_read_f32(framesrc *s, size_t pos0, size_t npos, float *out, ssb4d_err *err);
/* The two checks of a float32 read, shared with the other sources (source/): n uint32 counts in
 * buf converted to float32 in place, stopping at the first count above 2^24 (float32's last exact
 * integer), whose index is returned, still a uint32 in its slot; (size_t)-1 when all converted. */
size_t framesrc_counts_to_f32(void *buf, size_t n);
/* Index of the first NaN or infinite value of v[0..n), or (size_t)-1. */
size_t framesrc_first_nonfinite(const float *v, size_t n);
#endif
