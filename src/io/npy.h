/* npy.h — NumPy .npy headers: parse (for reading/mmap) and write (for streaming output). */
#ifndef SSB4D_IO_NPY_H
#define SSB4D_IO_NPY_H
#include "ssb4d_advanced.h"

#include <stdio.h>

typedef struct {
    char descr[16];      /* e.g. "<u2", "|u1", "<f4", "<c8" */
    int fortran_order;
    int ndim;
    size_t shape[8];
    size_t header_bytes; /* offset of the data */
    size_t item_bytes;
} ssb4d_npy_info;

/* Parses the header at the start of buf (len bytes available). */
ssb4d_status ssb_npy_parse(const unsigned char *buf, size_t len, ssb4d_npy_info *info,
                           ssb4d_err *err);
/* Reads and parses the header of an open file (position restored to 0). */
ssb4d_status ssb_npy_read_header(FILE *f, const char *path, ssb4d_npy_info *info,
                                 ssb4d_err *err);
/* Writes a version-1 header (padded to 64 bytes) for a C-order array. */
ssb4d_status ssb_npy_write_header(FILE *f, const char *descr, int ndim, const size_t *shape,
                                  ssb4d_err *err);
/* Writes a whole array to path (atomically: temp file + rename). */
ssb4d_status ssb_npy_save(const char *path, const char *descr, int ndim, const size_t *shape,
                          const void *data, ssb4d_err *err);
/* Loads a whole small array (any dtype; caller frees *data with free()). */
ssb4d_status ssb_npy_load(const char *path, ssb4d_npy_info *info, void **data, ssb4d_err *err);
#endif
