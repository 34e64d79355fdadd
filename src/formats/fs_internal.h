/* fs_internal.h — what the frame readers (fs_*.c) share with the dispatcher (framesrc.c).
 *
 * A reader's open function fills the common part of `struct framesrc` (shape, dtype, format name,
 * optional flag mask, calibration, metadata) and hangs its own state on `impl`; framesrc_read
 * checks the range and calls ops->read, framesrc_close calls ops->close and frees the rest. */
#ifndef SSB4D_FORMATS_FS_INTERNAL_H
#define SSB4D_FORMATS_FS_INTERNAL_H
#include "formats/framesrc.h"

#include <stdio.h>
#include <sys/types.h>

typedef struct {
    /* Frames [pos0, pos0+npos) as uint32 into out (the range was checked by the caller). */
    ssb4d_status (*read)(framesrc *s, size_t pos0, size_t npos, uint32_t *out, ssb4d_err *err);
    void (*close)(void *impl);
    /* Float sources (s->is_float): frames [pos0, pos0+npos) as float32 into out; `read` is then
     * NULL. framesrc_read_f32 checks the range and that every value is finite. */
    ssb4d_status (*read_f32)(framesrc *s, size_t pos0, size_t npos, float *out, ssb4d_err *err);
} framesrc_ops;

struct framesrc {
    const framesrc_ops *ops;
    void *impl;
    char *path;                /* as given to framesrc_open (for messages) */
    size_t shape[4];
    int dtype_bytes;           /* 1, 2 or 4 */
    int is_float;              /* 1: float32 values (dtype_bytes 4), read through ops->read_f32 */
    int dtype_signed;          /* 1: signed source integers (every value read is checked >= 0) */
    const char *format_name; /* a string literal: the import report keeps the pointer */
    uint8_t *flag_mask;        /* P bytes, 1 = flagged; NULL = the file has no mask */
    framesrc_calibration cal;  /* NaN = not recorded */
    cJSON *meta;               /* reader-retained source fields (always an object) */
};

/* ---- per-format openers (each fills s; on failure it frees what it allocated itself) ---- */
ssb4d_status fs_npy_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err);
ssb4d_status fs_raw_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err);
/* The reader shared by raw and .npy (fs_raw.c): frames stored contiguously from byte `offset`,
 * s->dtype_bytes wide (s->dtype_signed honoured), read with pread straight into the caller's
 * block and widened in place. fs_contiguous_open opens path and returns its size; attach makes
 * s read from fd (taking it over, closed on failure too). */
ssb4d_status fs_contiguous_open(const char *path, int *fd, size_t *size, ssb4d_err *err);
ssb4d_status fs_contiguous_attach(framesrc *s, int fd, size_t offset, int big_endian, ssb4d_err *err);
/* The same for frames that lie frame_stride bytes apart (>= one frame's bytes): each frame's
 * values are the first det_rows*det_cols of its stride (EMPAD's two footer rows are skipped
 * this way). s->is_float selects float32 values (read_f32) instead of integers. */
ssb4d_status fs_contiguous_attach_strided(framesrc *s, int fd, size_t offset, int big_endian,
                                          size_t frame_stride, ssb4d_err *err);
ssb4d_status fs_hdf5_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err);
ssb4d_status fs_arina_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err);
ssb4d_status fs_mib_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err);
ssb4d_status fs_empad_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err);
ssb4d_status fs_dm_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err);
ssb4d_status fs_velox_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err);
ssb4d_status fs_mrc_open(framesrc *s, const char *path, const framesrc_opts *o, ssb4d_err *err);
/* 1 when a .xml beside raw_path names it as its EMPAD raw file (fs_empad.c). */
int fs_empad_raw_has_xml(const char *raw_path);
/* 1 when an HDF5 file looks like a Velox EMD (fs_velox.c). */
int fs_velox_detect(const char *path);
/* 1 when the first bytes look like a DM3 / DM4 file (big-endian version 3 or 4; fs_dm.c). */
int fs_dm_detect(const unsigned char *head, size_t n);
/* 1 when a file of `size` bytes with this 1024-byte header looks like an MRC file (fs_mrc.c). */
int fs_mrc_detect(const unsigned char *head, size_t n, size_t size);
/* 1 when an HDF5 file looks like a Dectris master (a /entry/data group of data_* links). */
int fs_arina_detect(const char *path);

/* ---- helpers shared by the readers (framesrc.c) ---- */

/* Checks a 4-D shape against what ssb4d handles (no empty axis, detector <= 4096^2, scan <=
 * 65536^2; within these N*P*4 bytes fits a size_t). `what` names the file in the message. */
ssb4d_status fs_check_shape(const size_t shape[4], const char *what, ssb4d_err *err);
/* The scan shape of a flat stack of n_frames: opts->shape[0..1] when given (their product must
 * be n_frames; with one of them 0 the other follows when it divides n_frames), else the file's
 * own hint (hint_rows x hint_cols, 0 = none; `hint_from` names it, and it must match n_frames),
 * else a square when n_frames is one, else a refusal asking for --scan-shape. `how` (may be
 * NULL) receives a short word for the metadata: "user", "file" or "square". */
ssb4d_status fs_scan_shape(size_t n_frames, const framesrc_opts *o, size_t hint_rows,
                           size_t hint_cols, const char *hint_from, const char *what,
                           size_t scan[2], const char **how, ssb4d_err *err);
/* opts->shape[2..3], when given, must equal the detector shape of the file. */
ssb4d_status fs_check_det_opts(const framesrc_opts *o, size_t det_rows, size_t det_cols,
                               const char *what, ssb4d_err *err);

/* Widens n integers of `bytes` (1, 2, 4) bytes each into out[0..n): sign-extended when
 * is_signed (the caller then checks fs_first_negative), zero-extended otherwise. */
void fs_widen(const uint8_t *in, uint32_t *out, size_t n, int bytes, int big_endian, int is_signed);
/* The same in place, for integers packed at the END of out's n*4 bytes (starting at
 * (uint8_t *)out + n*(4-bytes)), as left there by one read of the file: front to back, each
 * element is loaded before any store reaches it, so no staging buffer is needed. */
void fs_widen_tail(uint32_t *out, size_t n, int bytes, int big_endian, int is_signed);
/* Index of the first value that is negative as int32, or (size_t)-1 (signed sources only). */
size_t fs_first_negative(const uint32_t *v, size_t n);
/* The error for a negative count in a signed source: names the frame and pixel. */
ssb4d_status fs_negative_error(const framesrc *s, size_t pos0, size_t index, int32_t value,
                               ssb4d_err *err);

/* pread of exactly len bytes at off (retries short reads and EINTR); EIO names `what`. */
ssb4d_status fs_pread_full(int fd, void *buf, size_t len, off_t off, const char *what,
                           ssb4d_err *err);
/* Size of an open file in bytes. */
ssb4d_status fs_file_size(int fd, const char *what, size_t *size, ssb4d_err *err);

/* Multiplications that refuse to wrap (returns 0 on overflow). */
int fs_mul(size_t a, size_t b, size_t *out);

/* Relativistic accelerating voltage (kV) of electrons of wavelength lambda_A (CODATA 2018). */
double fs_kv_from_wavelength_A(double lambda_A);
/* Records "value unit" text under key in s->meta (unit may be NULL or ""). */
void fs_meta_quantity(framesrc *s, const char *key, double value, const char *unit);
void fs_meta_string(framesrc *s, const char *key, const char *value);
void fs_meta_number(framesrc *s, const char *key, double value);

/* ---- HDF5 helpers (fs_h5util.c), shared by fs_hdf5.c and fs_arina.c ---- */
#include <hdf5.h>

/* Turns off libhdf5's automatic printing of its error stack (we report one line ourselves). */
void fs_h5_quiet(void);
/* Fails with the formatted line followed by ": " and the innermost message of libhdf5's error
 * stack (when there is one), then clears that stack. */
ssb4d_status fs_h5_fail(ssb4d_err *err, ssb4d_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* 1 when every component of path (relative to loc, or absolute) exists as a link that resolves. */
int fs_h5_exists(hid_t loc, const char *path);
/* A scalar (or one-element) numeric dataset at path, with its "units" attribute when it has one
 * (unit[0] = 0 otherwise). 1 on success, 0 when absent or not numeric. */
int fs_h5_number(hid_t loc, const char *path, double *v, char *unit, size_t unit_n);
/* A numeric attribute of the object at path ("." = loc itself). */
int fs_h5_attr_number(hid_t loc, const char *path, const char *name, double *v);
/* A string attribute (fixed or variable length). */
int fs_h5_attr_string(hid_t loc, const char *path, const char *name, char *buf, size_t n);
/* A scalar text dataset (fixed-length or variable-length, as h5py writes str and bytes) into buf;
 * 1 when read. */
int fs_h5_string(hid_t loc, const char *path, char *buf, size_t n);
/* What a filter is called, for messages ("bitshuffle", "blosc", ...; "unknown" otherwise). */
const char *fs_h5_filter_name(H5Z_filter_t id);
/* SSB4D_EFORMAT naming the first filter of dcpl that this libhdf5 cannot decode, or SSB4D_OK. */
ssb4d_status fs_h5_check_filters(hid_t dcpl, const char *what, ssb4d_err *err);
#endif
