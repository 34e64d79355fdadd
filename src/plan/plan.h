/* plan.h — the planner's helpers shared with the session runner (the API is in ssb4d.h). */
#ifndef SSB4D_PLAN_H
#define SSB4D_PLAN_H
#include "ssb4d.h"

/* Side of the built-in session's region refit for a scan side n: 256 from 512 up, else n/2. */
size_t ssb4d_plan_region_side(size_t n);
#endif
