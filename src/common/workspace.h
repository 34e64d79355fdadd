/* workspace.h — a stage's workspace query, as cuFFT's and cuDNN's: for given sizes, the
 * allocations and frees the stage makes through the accounting layer (src/common/mem.c), in the
 * order it makes them. Each stage sizes its own buffers from the same size function that feeds
 * its query, so a buffer that changes size changes in one place; the planner (src/plan) composes
 * the queries and feeds the events through its model of mem.c.
 *
 * The events go to a sink (a callback) rather than into a list: a query's length follows the
 * thread count and the batch size, and the planner needs them one at a time anyway. */
#ifndef SSB4D_COMMON_WORKSPACE_H
#define SSB4D_COMMON_WORKSPACE_H
#include <stddef.h>

typedef enum {
    WS_ALLOC, /* ssb4d_mem_alloc or ssb4d_mem_calloc of `bytes` */
    WS_FREE,  /* ssb4d_mem_free(…, keep = 0) of `bytes` */
    WS_KEEP,  /* ssb4d_mem_free(…, keep = 1): into the reuse cache */
    WS_PASS,  /* a pass over G in groups here (G_group_init … G_group_free) on a view of G that
                 lies within its `bytes` innermost stored pixels (0: all of G); what the pass
                 allocates depends on how G is held, which only the planner knows */
} ws_op;

typedef struct ws_sink {
    void (*event)(struct ws_sink *self, ws_op op, size_t bytes);
} ws_sink;

static inline void ws_alloc(ws_sink *s, size_t bytes) { s->event(s, WS_ALLOC, bytes); }
static inline void ws_free(ws_sink *s, size_t bytes, int keep) { s->event(s, keep ? WS_KEEP : WS_FREE, bytes); }
/* A pass over a view within the `within` innermost stored pixels (0: any of G's pixels). */
static inline void ws_pass(ws_sink *s, size_t within) { s->event(s, WS_PASS, within); }
#endif
