/* model.h — the planner's model of the accounting layer (src/common/mem.c): live bytes, the
 * exact-size reuse cache of at most 64 blocks and the "return the cache before refusing" rule.
 * It is fed the stages' workspace events (common/workspace.h). */
#ifndef SSB4D_PLAN_MODEL_H
#define SSB4D_PLAN_MODEL_H
#include "common/workspace.h"

#include <stddef.h>

#define MODEL_MAX_CACHE 64 /* mem.c's MAX_CACHE */

typedef struct {
    size_t limit, live, cached, stage_peak, session_peak;
    size_t cache[MODEL_MAX_CACHE];
    size_t n_cache;
    int failed; /* an allocation the run would refuse (the model keeps counting, to report the need) */
} plan_model;

void model_alloc(plan_model *m, size_t bytes);
void model_free(plan_model *m, size_t bytes, int keep);
void model_trim(plan_model *m);

/* A sink that feeds a model; its passes over G go to pass(self, within), or allocate nothing
 * when pass is NULL. */
typedef struct model_sink {
    ws_sink base;
    plan_model *m;
    void (*pass)(struct model_sink *self, size_t within);
} model_sink;
void model_sink_init(model_sink *s, plan_model *m, void (*pass)(model_sink *self, size_t within));
#endif
