/* empad.h — the EMPAD acquisition .xml (Thermo Fisher / Cornell Electron Microscope Pixel Array
 * Detector), parsed in memory so a fuzzer can drive it (fuzz/targets/fuzz_empad.c); the file
 * reader is fs_empad.c.
 *
 * An acquisition is NAME.xml plus the .raw it names: float32 little-endian frames of 128 columns
 * x 130 rows in scan order, the last two rows a per-frame footer. The .xml (a flat <root>):
 *   <raw_file filename="scan_x256_y256.raw"/>      the frames (a name beside the .xml)
 *   <scan_parameters mode="acquire">               the scan (x fast: rows = y, columns = x);
 *     <scan_resolution_x>, <scan_resolution_y>,    a mode="search" block may follow: some
 *     <scan_size> (fraction of the full field)     files hold the search scan (LiberTEM #1617)
 *   <pix_x>, <pix_y>                               the scan in older files (0.51)
 *   <type>series</type> + <count> or <scan_parameters><series_count>: a stack of frames
 *   <exposure_time>                                per frame, ms
 *   <timestamp isoformat="..."/>, <software_version>
 *   <iom_measurements>: <high_voltage> (V), <nominal_camera_length> (m),
 *     <calibrated_diffraction_angle> (rad per detector pixel), <full_scan_field_of_view>
 *     (<x>, <y> m, <scale_factor>) or <optics.get_full_scan_field_of_view> "[x, y]" (m) ...
 * Sources: rosettasciio rsciio/empad/_api.py and its test .xml (version 1.2.2); LiberTEM
 * src/libertem/io/dataset/empad.py (rows = y, the search-mode fallback); py4DSTEM read_empad.
 *
 * The XML parser is small and strict: elements, attributes, character data, CDATA, comments and
 * processing instructions; the five predefined entities and character references; no DTD (a
 * <!DOCTYPE> is refused, so no entity can expand). Depth, node count and sizes are bounded. */
#ifndef SSB4D_FORMATS_EMPAD_H
#define SSB4D_FORMATS_EMPAD_H
#include "ssb4d_advanced.h"

#include <stddef.h>
#include <stdint.h>

#define EMPAD_XML_MAX_BYTES ((size_t)16 << 20)
#define EMPAD_XML_MAX_DEPTH 64
#define EMPAD_XML_MAX_NODES 100000
#define EMPAD_XML_MAX_ATTRS 64   /* per element */
#define EMPAD_XML_MAX_NAME 256   /* bytes of an element or attribute name */

#define EMPAD_DET_ROWS 128       /* the frame as read */
#define EMPAD_DET_COLS 128
#define EMPAD_RAW_ROWS 130       /* the frame as stored: two footer rows follow */

/* ---- the document ---- */
typedef struct {
    const char *name, *value; /* entity-decoded, NUL-terminated */
} empad_xml_attr;

typedef struct {
    const char *name;
    /* The character data of an element without child elements (entities decoded, CDATA
     * included, NUL-terminated; "" otherwise: mixed content is not kept). */
    const char *text;
    size_t text_len;
    size_t attr0, n_attrs;              /* its attributes: doc->attrs[attr0 .. attr0+n_attrs) */
    int parent, first_child, next;      /* node indices, -1 = none; node 0 is the root element */
    int depth;                          /* 0 for the root element */
} empad_xml_node;

typedef struct {
    empad_xml_node *nodes;
    size_t n_nodes;
    empad_xml_attr *attrs;
    size_t n_attrs;
    char *arena;                        /* every string; freed by empad_xml_free */
    size_t arena_used, arena_cap;
} empad_xml;

/* Parses len bytes (at most EMPAD_XML_MAX_BYTES; no NUL needed). On failure doc is empty and
 * err says what and at which line (SSB4D_EFORMAT; SSB4D_ENOMEM). */
ssb4d_status empad_xml_parse(const char *buf, size_t len, empad_xml *doc, ssb4d_err *err);
void empad_xml_free(empad_xml *doc);
/* The first child element of node named name (-1 when none). */
int empad_xml_child(const empad_xml *doc, int node, const char *name);
/* The value of node's attribute name, or NULL. */
const char *empad_xml_attr_value(const empad_xml *doc, int node, const char *name);

/* ---- what an EMPAD .xml says ---- */
typedef struct {
    char raw_name[512];        /* <raw_file filename>, as written ("" = absent) */
    int is_series;             /* <type>series</type> or a series_count */
    size_t series_count;       /* frames of a series; 0 = not recorded */
    /* Scan candidates in the order they are believed: [0] the acquire block (or a block without
     * a mode), [1] pix_x/pix_y, [2] the search block. cols = x (fast), rows = y; 0 = absent. */
    struct {
        size_t rows, cols;
        const char *from;      /* a string literal naming the fields */
    } scan[3];
    /* NaN = not recorded (or not a plausible positive number) */
    double high_voltage_V, camera_length_m, exposure_ms, diffraction_angle_rad;
    double scan_size;          /* acquire block's <scan_size> */
    char timestamp[64];        /* <timestamp isoformat> ("" = absent) */
} empad_info;

/* Reads the fields above from a parsed document. Refuses (one line) a document whose root is
 * not <root>, and contradictions: two raw_file names, two acquire blocks or two pix_x that
 * disagree, an unreadable number where a scan size belongs. A missing raw_file is not an error
 * here (raw_name[0] == 0): the caller decides. */
ssb4d_status empad_info_read(const empad_xml *doc, empad_info *info, ssb4d_err *err);
/* Parse + read in one go (the fuzzer's entry). */
ssb4d_status empad_parse(const char *buf, size_t len, empad_info *info, ssb4d_err *err);

/* The last component of a path as the .xml may write it ('/' or '\\' separated). */
const char *empad_basename(const char *path);
#endif
