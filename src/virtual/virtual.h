/* virtual.h — the virtual-image stage's workspace query (common/workspace.h), for the planner. */
#ifndef SSB4D_VIRTUAL_VIRTUAL_H
#define SSB4D_VIRTUAL_VIRTUAL_H
#include "common/workspace.h"
#include "ssb4d_advanced.h"

/* ssb4d_virtual_compute's tracked buffers for frames of fr pixels at npos scan positions and a
 * frame block of block_bytes (0: 64 MiB): the block of frames (freed after the pass), then the
 * two complex64 scan planes of the iDPC integration. images: the five float64 images it returns
 * (malloc'd, held by the caller: not in the memory context). */
typedef struct {
    size_t frames;            /* frames per block */
    size_t buf, fft, images;  /* bytes */
} virtual_ws;
virtual_ws virtual_ws_sizes(size_t fr, size_t npos, size_t block_bytes);
/* Its allocations and frees in order: buf, free, fft, free. */
void virtual_workspace(const virtual_ws *w, ws_sink *out);
#endif
