/* model.c — the planner's model of src/common/mem.c (model.h). */
#include "plan/model.h"

static void note(plan_model *m)
{
    size_t t = m->live + m->cached;
    if (t > m->stage_peak)
        m->stage_peak = t;
    if (t > m->session_peak)
        m->session_peak = t;
}

void model_trim(plan_model *m)
{
    m->cached = 0;
    m->n_cache = 0;
}

void model_alloc(plan_model *m, size_t b)
{
    if (b == 0)
        b = 1;
    for (size_t i = 0; i < m->n_cache; i++)
        if (m->cache[i] == b) {
            m->cache[i] = m->cache[--m->n_cache];
            m->cached -= b;
            m->live += b;
            note(m);
            return;
        }
    if (m->limit && m->live + m->cached + b > m->limit && m->n_cache)
        model_trim(m);
    if (m->limit && m->live + b > m->limit)
        m->failed = 1; /* the run would refuse here; keep counting to report the need */
    m->live += b;
    note(m);
}

void model_free(plan_model *m, size_t b, int keep)
{
    if (b == 0)
        b = 1;
    m->live -= b;
    if (keep && m->n_cache < MODEL_MAX_CACHE) {
        m->cache[m->n_cache++] = b;
        m->cached += b;
    }
}

static void sink_event(ws_sink *self, ws_op op, size_t bytes)
{
    model_sink *s = (model_sink *)self;
    switch (op) {
    case WS_ALLOC: model_alloc(s->m, bytes); break;
    case WS_FREE: model_free(s->m, bytes, 0); break;
    case WS_KEEP: model_free(s->m, bytes, 1); break;
    case WS_PASS:
        if (s->pass)
            s->pass(s, bytes);
        break;
    }
}

void model_sink_init(model_sink *s, plan_model *m, void (*pass)(model_sink *self, size_t within))
{
    s->base.event = sink_event;
    s->m = m;
    s->pass = pass;
}
