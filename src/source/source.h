/* source.h — internal calls of the data sources. */
#ifndef SSB4D_SOURCE_SOURCE_H
#define SSB4D_SOURCE_SOURCE_H
#include "formats/framesrc.h"
#include "qem/qem.h"
#include "ssb4d_advanced.h"

/* ssb4d_source_read_columns with `threads` workers over scan rows (same output). */
ssb4d_status ssb_source_read_columns_mt(ssb4d_source *s, const int32_t *det_pix, size_t n_pix,
                                        size_t row0, size_t nrows, float *out, int threads,
                                        ssb4d_err *err);
/* Tells the source that frames [pos0, pos0+npos) will not be read again soon: a memory-mapped
 * file drops those pages from the process (they stay in the page cache), so reading a 19 GB file
 * does not grow the footprint by 19 GB. A hint: never fails. */
void ssb_source_done_with(ssb4d_source *s, size_t pos0, size_t npos);
/* The encoded file behind a .qem source (NULL for other sources, region views of a .qem too:
 * their scan coordinates are not the file's). */
qem_file *ssb_source_qem(const ssb4d_source *s);
/* A view of shape `shape` whose scan position (0, 0) is (r0, c0) of parent (source.c; the
 * rectangle is checked by ssb4d_source_region). */
ssb4d_status ssb_source_new_view(ssb4d_source *parent, size_t r0, size_t c0,
                                 const size_t shape[4], ssb4d_source **out, ssb4d_err *err);

/* A source over any format the frame readers know (formats/framesrc.h), read in place with the
 * reader options o (NULL: by content). */
ssb4d_status ssb_source_open_frames(const char *path, const framesrc_opts *o, ssb4d_source **out,
                                    ssb4d_err *err);
/* source_frames.c: BF columns from a frame reader: the frames of the asked scan rows are read in
 * bounded chunks and their BF pixels gathered (same layout as ssb4d_source_read_columns). */
ssb4d_status ssb_frames_read_columns(framesrc *fs, const int32_t *det_pix, size_t n_pix, size_t row0,
                                     size_t nrows, float *out, int threads, ssb4d_err *err);

/* source_region.c: reads of a view (shape vshape, origin in the parent), mapped to the parent;
 * ranges are already checked against vshape. as_float: out is float32 (else uint32 counts). */
ssb4d_status ssb_region_read_frames(ssb4d_source *parent, const size_t origin[2],
                                    const size_t vshape[4], size_t pos0, size_t npos,
                                    void *out, int as_float, ssb4d_err *err);
ssb4d_status ssb_region_read_columns(ssb4d_source *parent, const size_t origin[2],
                                     const size_t vshape[4], const int32_t *det_pix,
                                     size_t n_pix, size_t row0, size_t nrows, float *out,
                                     int threads, ssb4d_err *err);

/* source_qem.c: frames and columns decoded from the streams (same layouts as above). */
ssb4d_status ssb_qem_read_frames(const qem_file *q, size_t pos0, size_t npos, uint32_t *out,
                                 ssb4d_err *err);
ssb4d_status ssb_qem_read_columns(const qem_file *q, const int32_t *det_pix, size_t n_pix,
                                  size_t row0, size_t nrows, float *out, int threads,
                                  ssb4d_err *err);

/* values.c: the simulator sidecar of DATA (DATA.json, DATA with its extension replaced by .json,
 * or that without a trailing "_counts"): 1 and its path in out when one exists, else 0 and "". */
int ssb_sidecar_find(const char *data, char *out, size_t n);
/* Reads a sidecar's values (unset where it says nothing). */
ssb4d_status ssb_sidecar_read(const char *path, ssb4d_values *v, ssb4d_err *err);
#endif
