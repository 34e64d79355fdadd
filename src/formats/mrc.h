/* mrc.h — the MRC / MRCS header (MRC2014) and the Thermo Fisher (FEI1 / FEI2) extended header,
 * parsed from bytes in memory. Kept apart from the file reader (fs_mrc.c) so a fuzzer can drive
 * the parser (fuzz/targets/fuzz_mrc.c).
 *
 * Main header, 1024 bytes, 4-byte words in the byte order of the machine stamp:
 *   0 nx (columns, the fast axis)  4 ny (rows)  8 nz (sections: frames of a stack)  12 mode
 *   16..24 nxstart, nystart, nzstart   28..36 mx, my, mz (sampling: pixels per cell)
 *   40..48 cella x, y, z (cell size, Å)  52..60 cellb (angles)  64..72 mapc, mapr, maps (axis
 *   order, 1,2,3 for images)  76..84 dmin, dmax, dmean  88 ispg (0 image stack, 1 volume,
 *   401..630 stack of volumes)  92 nsymbt (extended header bytes)  104 exttyp (4 characters:
 *   "FEI1", "FEI2", "SERI", "AGAR", "CCP4", "MRCO")  108 nversion (20140)  152 IMOD stamp and
 *   156 IMOD flags (IMOD's own files)  196..204 origin  208 "MAP "  212 machine stamp
 *   (0x44 0x44 or 0x44 0x41 little-endian, 0x11 0x11 big-endian)  216 rms  220 nlabl
 *   224 ten 80-character labels.
 * The extended header (nsymbt bytes) follows, then nx*ny*nz values of the mode:
 *   0 int8 (signed in MRC2014; IMOD's files without its "signed" flag hold uint8),
 *   1 int16, 2 float32, 6 uint16 — read; 3 / 4 complex, 12 float16, 101 4-bit — refused.
 * A stack of volumes (ispg 401..630) holds nz/mz volumes of mz sections: mrcfile writes a 4-D
 * array (scan_rows, scan_cols, rows, cols) this way, so such a header records the scan shape.
 * Sources: the MRC2014 paper (Cheng et al., J. Struct. Biol. 192 (2015) 146) and the CCP-EM
 * format page; mrcfile (ccpem/mrcfile: header and FEI extended header dtypes, volume stacks);
 * IMOD's MRC header notes (imodStamp, imodFlags). */
#ifndef SSB4D_FORMATS_MRC_H
#define SSB4D_FORMATS_MRC_H
#include "ssb4d_advanced.h"

#include <stddef.h>
#include <stdint.h>

#define MRC_HEADER_BYTES 1024

typedef struct {
    /* as written */
    int32_t nx, ny, nz, mode;
    int32_t nxstart, nystart, nzstart, mx, my, mz;
    float cella[3], cellb[3];
    int32_t mapc, mapr, maps;
    float dmin, dmax, dmean;
    int32_t ispg, nsymbt;
    char exttyp[5];           /* printable characters only, trailing blanks cut ("" = none) */
    int32_t nversion;
    float origin[3];
    float rms;
    int32_t nlabl;
    char labels[10][81];      /* trailing blanks cut, unprintable bytes shown as '?' */
    /* derived */
    int big_endian;           /* 1: big-endian words */
    int stamp_known;          /* 1: the machine stamp named the byte order (0: inferred) */
    int has_map;              /* 1: "MAP " at byte 208 */
    int imod;                 /* 1: IMOD's stamp is present (its flags then apply) */
    int dtype_bytes;          /* 1, 2 or 4 */
    int dtype_signed;         /* 1: int8 / int16 */
    int is_float;             /* 1: float32 (mode 2) */
    const char *mode_name;    /* "int8", "uint8", "int16", "float32", "uint16" */
    size_t frame_bytes;       /* nx * ny * dtype_bytes */
    size_t data_offset;       /* 1024 + nsymbt */
    size_t data_bytes;        /* nx * ny * nz * dtype_bytes */
    size_t vol_count, vol_sections; /* a stack of volumes: nz = vol_count * vol_sections; 0 = not one */
} mrc_header;

/* Parses the 1024-byte header at buf (len bytes available) of a file of file_size bytes. An
 * accepted header describes a stack of nz frames (ny rows of nx values) of a readable mode that
 * fill the file exactly after the header and the extended header. Anything else is refused with
 * one line naming the field (SSB4D_EFORMAT); never reads past len. */
ssb4d_status mrc_parse_header(const uint8_t *buf, size_t len, size_t file_size, mrc_header *h,
                              ssb4d_err *err);

/* What the first record of a Thermo Fisher extended header (exttyp "FEI1" / "FEI2", one record
 * per frame, written by EPU and Velox) says. NaN / 0 / "" = absent or not readable. Units as
 * stored: SI (V, m, s, rad); the pixel size of diffraction frames is in 1/m. */
typedef struct {
    int32_t record_bytes;     /* "Metadata size" */
    int32_t version;          /* "Metadata version" */
    double ht_V, pixel_size[2], camera_length_m, convergence_rad, magnification;
    double dwell_s, frame_time_s, full_fov_m[2];
    double scan_rotation_rad, diffraction_rotation_rad; /* FEI2 only */
    int32_t scan_left, scan_top, scan_right, scan_bottom;
    int32_t binning[2];
    int32_t beam_center[2];   /* FEI2 only: the direct beam on the detector (x, y pixels); -1 absent */
    char microscope[17], application[17], application_version[17], camera[17], stem_detector[17];
    char detector_commercial[17]; /* FEI2 only */
} mrc_fei;

/* Parses the first record of an FEI1 / FEI2 extended header (ext: n bytes, the words in the
 * file's byte order). 1 when a record was read, 0 when the bytes do not hold one. */
int mrc_parse_fei(const uint8_t *ext, size_t n, int big_endian, int fei2, mrc_fei *f);
#endif
