/* mib.h — Quantum Detectors Merlin .mib frames: the per-frame ASCII header and the pixel data
 * that follows it. Kept apart from the file reader (fs_mib.c) so a fuzzer can drive the parser.
 *
 * Header: comma-separated ASCII, padded with NUL bytes to header_bytes (384 single, 768 quad):
 *   MQ1,<seq>,<header bytes>,<chips>,<width>,<height>,<U08|U16|U32|R64>,<layout>,<chip select>,
 *   <time stamp>,<shutter s>,<counter>,<colour>,<gain>,<8 thresholds>,<DACs per chip>...,
 *   MQ1A,<UTC time stamp>,<shutter ns>ns,<counter depth>
 * Time stamps: field 10 "YYYY-MM-DD HH:MM:SS.ffffff" (local time), the MQ1A one
 * "YYYY-MM-DDTHH:MM:SS.fffffffffZ" (UTC, ns digits); rosettasciio uses the latter to find the
 * scan's line length when the .hdr does not give it.
 * Pixel data: big-endian U08/U16/U32 in row-major order ("counting mode"; 1- and 6-bit counters
 * are stored as U08, 12-bit as U16, 24-bit as U32). R64 ("raw") is the chip's readout: 64-bit
 * big-endian words with pixels packed from the least significant bit (64 x 1 bit, 8 x 6-bit in
 * bytes, 4 x 12-bit in 16-bit fields); 24-bit raw is two 12-bit frames, high bits first, and the
 * header's width counts both. Quad raw (4 chips, 2x2) rows hold the four chips' rows side by
 * side in the order 4,3,2,1; chips 3 and 4 form the bottom half, flipped in both directions.
 * Sources: ePSIC-DLS/mib_props src/mib_header_MQ1.h (field list); LiberTEM
 * src/libertem/io/dataset/mib.py (R64 decoders, quad layout, 24-bit raw); rosettasciio
 * rsciio/quantumdetector/_api.py (U08/U16/U32 big-endian, .hdr fields). */
#ifndef SSB4D_FORMATS_MIB_H
#define SSB4D_FORMATS_MIB_H
#include "ssb4d_advanced.h"

#include <stddef.h>
#include <stdint.h>

#define MIB_MAX_HEADER_BYTES 65536

typedef enum { MIB_U8 = 1, MIB_U16 = 2, MIB_U32 = 4, MIB_R64 = 8 } mib_dtype;

typedef struct {
    /* as written in the header */
    uint32_t sequence;    /* field 2: frame number, 1 for the first frame of an acquisition */
    size_t header_bytes;  /* field 3: length of this header; the pixel data follow it */
    int chips;            /* field 4: Medipix chips read out (1 single, 4 quad) */
    size_t width, height; /* fields 5, 6: pixel columns and rows of the data as stored */
    mib_dtype dtype;      /* field 7 */
    char dtype_text[4];   /* field 7 as text: "U08", "U16", "U32", "R64" */
    int raw;              /* 1 for R64: pixels in chip readout order, decoded by mib_decode_frame */
    char layout[8];       /* field 8 without blanks: "1x1", "2x2", "2x2G", "Nx1", ... */
    double shutter_s;     /* field 11: shutter open time in seconds; NaN when absent/unreadable */
    int counter_depth;    /* bits per counter (1, 6, 12, 24) from the field after "MQ1A"+2;
                             0 when the header has no MQ1A extension */
    /* The frame's time stamp: the MQ1A extension's UTC time (ns digits) when there, else field
     * 10 (local time, us digits). time_res_ns is the step of its last digit (1 for 9 fraction
     * digits, 1000 for 6, ...); 0 when neither is readable (then time_ns is 0). */
    int64_t time_ns;      /* ns since 1970-01-01 00:00:00 (years 1970..2200 only) */
    int64_t time_res_ns;
    double shutter_ext_s; /* MQ1A "<n>ns" shutter time in seconds; NaN when absent */
    /* derived */
    size_t rows, cols;    /* the decoded frame (differs from height x width only for raw) */
    size_t data_bytes;    /* bytes of pixel data after the header */
} mib_header;

/* Parses the header at buf (len bytes available; at least header_bytes must be, or it is a
 * truncation error). Never reads past len, accepts only printable ASCII before the NUL padding,
 * and refuses anything it cannot decode with one line (SSB4D_EFORMAT). */
ssb4d_status mib_parse_header(const uint8_t *buf, size_t len, mib_header *h, ssb4d_err *err);

/* Decodes h->data_bytes bytes of pixel data into out[h->rows * h->cols] (row-major). */
void mib_decode_frame(const mib_header *h, const uint8_t *data, uint32_t *out);

/* The raster line length of a scan from its frames' time stamps t[0..n) (ns; res_ns = the step
 * of their last digit): within a line frames follow one another at the frame interval, between
 * lines the beam flies back, so the gap from the last frame of a line to the first of the next is
 * longer. The n - 1 gaps are split in two where the sorted gaps jump most (above the median):
 * the within-line gaps below, the line gaps above. The scan shows lines of L frames when
 *   - the jump D is more than twice the spread of either side (a distinct set of long gaps),
 *   - D is more than one tick of the clock the stamps step in (the gcd of the gaps: rounding to
 *     a tick makes a steady interval alternate between two values one tick apart), unless D is
 *     half an interval or more,
 *   - the long gaps are exactly those after frames L-1, 2L-1, ..., L divides n, and there are at
 *     least two lines of at least two frames.
 * A 20.8 us flyback between 102 ms frames (stamps jittering by 10-20 ns) passes; a gap one 10 ns
 * tick longer than the others does not. Verdicts: FOUND (line = L); NONE: the stamps show no
 * flyback (too few frames, time going back, a median gap under 4 ticks of res_ns, no longer
 * gaps, none standing out of the jitter, or longer by one tick only); AMBIGUOUS: a distinct set
 * of long gaps that does not make a raster (a pause inside a line, L not dividing n). `why`
 * says what was seen (one clause, no file name) unless FOUND. */
typedef enum { MIB_LINE_NONE = 0, MIB_LINE_FOUND = 1, MIB_LINE_AMBIGUOUS = 2 } mib_line_verdict;
typedef struct {
    mib_line_verdict verdict;
    size_t line;          /* L when FOUND; else the first long gap's frame + 1 (0 = none) */
    int64_t median_ns;    /* the lower median gap */
    int64_t tick_ns;      /* gcd of the gaps (0 when they are all 0) */
    int64_t step_ns;      /* D: shortest long gap - longest short gap (0 = no long gaps) */
    int64_t spread_ns;    /* longest - shortest gap within the short side */
    int64_t long_from_ns; /* a gap is long when it is at least this (INT64_MAX = none) */
    char why[256];
} mib_line_info;
mib_line_verdict mib_line_scan(const int64_t *t, size_t n, int64_t res_ns, mib_line_info *info);

/* mib_line_scan's L when FOUND, else 0; the median gap in *median_ns when not NULL. */
size_t mib_line_length(const int64_t *t, size_t n, int64_t res_ns, int64_t *median_ns);

/* The first value of a decoded frame (h->rows * h->cols values) above what a counter of
 * `depth` bits holds (2^depth - 1), or (size_t)-1 when none is (or depth is 0 or >= 32:
 * unknown or no limit). Merlin's counters saturate; a larger count is corrupt data or a wrong
 * counter depth in the header. */
size_t mib_first_over_depth(const mib_header *h, const uint32_t *frame, int depth);

/* Fields of a Merlin acquisition header (.hdr) that give the scan; 0 = absent. */
typedef struct {
    size_t scan_x, scan_y;             /* "ScanX", "ScanY" (some Merlin versions) */
    size_t frames_in_acquisition;      /* "Frames in Acquisition (Number)" */
    size_t frames_per_trigger;         /* "Frames per Trigger (Number)" */
    int counter_depth;                 /* "Counter Depth (number)" */
    int complete;                      /* 1: the text ends with Merlin's "End" line; 0: it is
                                          cut short (keys after the cut are lost) */
} mib_hdr_info;
/* Parses the text of a .hdr file (lines "Key:<TAB>value"); unknown lines are skipped. */
void mib_parse_hdr(const char *text, size_t len, mib_hdr_info *info);
#endif
