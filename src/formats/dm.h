/* dm.h — Gatan Digital Micrograph DM3 / DM4 tag files: the tag tree walker and the image list.
 * Kept apart from the file reader (fs_dm.c) so a fuzzer can drive it: the parser never does I/O
 * itself, it asks a read callback for bytes (memory for the fuzzer and the tests, pread for the
 * reader), so a multi-gigabyte data array is skipped by arithmetic and never read.
 *
 * Layout (no official specification exists; this follows the community descriptions: Greg
 * Jefferis' DM3 notes, Chris Boothroyd's DM3/DM4 pages, and the readers of ncempy
 * (ncempy/io/dm.py) and RosettaSciIO (rsciio/digitalmicrograph)):
 *   header      version u32be (3 or 4), root length (DM3 u32be, DM4 u64be), byte order u32be
 *               (1 = tag values and data little-endian, 0 = big-endian)
 *   tag group   sorted u8, open u8, number of entries N (DM3 u32be, DM4 u64be), N entries
 *   entry       kind u8 (20 = group, 21 = data), name length u16be, name bytes (may be empty:
 *               unnamed entries are known by their position), DM4 only: entry length u64be,
 *               then a tag group or a data tag
 *   data tag    "%%%%", n u32be/u64be, n info words u32be/u64be describing the type, the value
 *   types       2 int16, 3 int32, 4 uint16, 5 uint32, 6 float32, 7 float64, 8 bool, 9 int8
 *               (char), 10 uint8 (octet), 11 int64, 12 uint64 (simple: info = [t]);
 *               18 string [18, bytes]; 15 struct [15, name length, F, (name length, type) x F];
 *               20 array [20, element type..., count], the element type written out in full
 *               (so arrays of structs, strings and arrays nest the same way)
 * Every structural word is big-endian; values follow the header's byte order. Text in tags is
 * mostly an array of uint16 (UTF-16 code units), which the walker hands over as UTF-8.
 *
 * An image is an entry of the root group ImageList: ImageData/{Data, DataType, Dimensions,
 * PixelDepth, Calibrations/Dimension/<k>/{Origin, Scale, Units}} and ImageTags (free-form).
 * Dimensions list the axis lengths fastest first (x, then y, ...): the data are a C-order array
 * of shape (dim[n-1], ..., dim[1], dim[0]). The root group Thumbnails names the ImageList
 * entries that are display thumbnails (usually entry 0, a small RGB image). */
#ifndef SSB4D_FORMATS_DM_H
#define SSB4D_FORMATS_DM_H
#include "ssb4d_advanced.h"

#include <stddef.h>
#include <stdint.h>

#define DM_MAX_DEPTH 64      /* nested tag groups (real files use fewer than 12) */
#define DM_PATH_MAX 512      /* bytes of a tag path kept (longer paths are cut, marked "...") */
#define DM_MAX_IMAGES 64     /* ImageList entries examined */
#define DM_MAX_DIMS 8
#define DM_MAX_FIELDS 16     /* numbers kept from a small array or struct */
#define DM_TEXT_MAX 1024     /* characters of text kept from a string tag */

/* Reads exactly n bytes at off into buf; 0 on success, -1 on a read error (the walker has
 * already checked that off + n is within the file). */
typedef int (*dm_read_fn)(void *ctx, uint64_t off, void *buf, size_t n);

typedef struct {
    dm_read_fn read;
    void *ctx;
    uint64_t size;         /* bytes in the file */
} dm_input;

typedef struct {
    int version;           /* 3 or 4 */
    int little_endian;     /* byte order of tag values and data */
    uint64_t root_length;  /* as written (not checked: writers disagree on what it counts) */
    uint64_t header_bytes; /* 12 (DM3) or 16 (DM4) */
} dm_header;

enum { DM_SHORT = 2, DM_LONG = 3, DM_USHORT = 4, DM_ULONG = 5, DM_FLOAT = 6, DM_DOUBLE = 7,
       DM_BOOL = 8, DM_CHAR = 9, DM_OCTET = 10, DM_LLONG = 11, DM_ULLONG = 12, DM_STRUCT = 15,
       DM_STRING = 18, DM_ARRAY = 20 };

/* One entry of the tree, as the walker hands it to the visitor. */
typedef struct {
    const char *path;      /* names from the root joined by '/'; an unnamed entry is its
                              0-based position in its group: "ImageList/1/ImageData/DataType" */
    const char *name;      /* the last component of path */
    int depth;             /* 1 for entries of the root group */
    uint64_t index;        /* 0-based position in its group (a name may look like another) */
    int is_group;
    uint64_t offset;       /* byte of the entry in the file */
    uint64_t count;        /* groups: entries; arrays: elements; structs: fields; strings:
                              bytes; simple values: 1 */
    /* data tags only: */
    int type;              /* first type word: a simple type, DM_STRUCT, DM_STRING or DM_ARRAY */
    int elem_type;         /* arrays: the element's first type word; simple values: type */
    uint64_t elem_bytes;   /* bytes of one element (simple value: its size) */
    uint64_t data_offset;  /* first byte of the value */
    uint64_t data_bytes;   /* bytes of the value */
    int has_number;        /* a simple (scalar) value ... */
    double number;         /* ... as a double */
    int is_integer;        /* the value is an integer type ... */
    int64_t integer;       /* ... whose value is this (uint64 beyond INT64_MAX: has_number only) */
    size_t n_fields;       /* a struct or array of at most DM_MAX_FIELDS simple numbers */
    double fields[DM_MAX_FIELDS];
    const char *text;      /* a string, or an array of uint16 / int8 / uint8 of at most
                              DM_TEXT_MAX elements read as text: UTF-8, NUL-terminated; else NULL */
} dm_tag;

/* Called for every group and data tag in file order; the strings live until it returns. */
typedef void (*dm_visit_fn)(void *ctx, const dm_tag *t);

/* Parses the header and walks the whole tag tree. Every count and length is checked against
 * the bytes left in the file before it is trusted; refusals are one line without the file
 * name (the caller adds it), SSB4D_EFORMAT (SSB4D_EIO when the read callback fails). */
ssb4d_status dm_walk(const dm_input *in, dm_header *h, dm_visit_fn visit, void *ctx, ssb4d_err *err);

/* What the tree says about one ImageList entry. */
typedef struct {
    int seen;                   /* the entry exists */
    int is_thumbnail;           /* named by Thumbnails/<k>/ImageIndex */
    size_t ndims;               /* entries of ImageData/Dimensions (DM_MAX_DIMS + 1 = too many) */
    uint64_t dims[DM_MAX_DIMS]; /* fastest first; 0 = absent or not a positive integer */
    int data_type;              /* ImageData/DataType; -1 = absent */
    int pixel_depth;            /* ImageData/PixelDepth (bytes); 0 = absent */
    int has_data;               /* ImageData/Data is an array */
    int data_elem_type;         /* its element type */
    uint64_t data_elem_bytes, data_count, data_offset, data_bytes;
    /* ImageData/Calibrations/Dimension/<k> (NaN / "" when absent) */
    double origin[DM_MAX_DIMS], scale[DM_MAX_DIMS];
    char units[DM_MAX_DIMS][32];
} dm_image;

typedef struct {
    dm_header header;
    size_t n_images;            /* 1 + the last ImageList entry kept (at most DM_MAX_IMAGES) */
    size_t n_images_total;      /* entries of the ImageList group */
    dm_image images[DM_MAX_IMAGES];
} dm_info;

/* Walks the tree and fills info (the header and the image list). */
ssb4d_status dm_read_info(const dm_input *in, dm_info *info, ssb4d_err *err);

/* The value type of a DM image DataType: bytes per value, signedness, float32; 0 when ssb4d
 * does not read it. `name` is its name either way ("uint16", "complex64", "RGB", ...). */
int dm_data_type(int code, int *bytes, int *is_signed, int *is_float, const char **name);

/* The dataset ssb4d reads from a DM file. */
typedef struct {
    size_t index;               /* ImageList entry */
    int rank;                   /* 4 (scan x scan x det x det) or 3 (frames x det x det) */
    size_t shape[4];            /* C order: rank 4 (scan_rows, scan_cols, det_rows, det_cols);
                                   rank 3 (frames, det_rows, det_cols, 0) */
    int bytes, is_signed, is_float;
    const char *type_name;
    uint64_t data_offset, data_bytes;
    int big_endian;
} dm_dataset;

/* Picks the dataset: entry `want` (an ImageList index), or when want < 0 the first entry that
 * is not a thumbnail with 4 dimensions, else with 3. Checks its data type, that its Data array
 * holds exactly the values the dimensions need, of the type's size, and refuses anything else
 * with one line naming the entry and what is wrong. */
ssb4d_status dm_select(const dm_info *info, long want, dm_dataset *ds, ssb4d_err *err);
#endif
