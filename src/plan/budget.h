/* budget.h — how a refusal by the memory budget is worded (budget.c), for every caller of the
 * planner: the session handle, and through it the command line. */
#ifndef SSB4D_PLAN_BUDGET_H
#define SSB4D_PLAN_BUDGET_H
#include "ssb4d_advanced.h"

/* A size for messages: MiB below 1 GiB (tiny data has tiny budgets), else GiB; up = round up,
 * so that a smallest budget printed can be given back to --memory as it is. */
const char *plan_size_text(char buf[32], size_t bytes, int up);

/* The smallest budget under which the plan of `in` fits, starting from p's figure (p: the plan
 * that did not fit). The calibration's frame block grows with the budget, so the figure moves
 * with it: step up until a plan at that budget fits. in->memory_bytes is restored. */
size_t plan_smallest_budget(ssb4d_plan_input *in, const ssb4d_plan *p);
#endif
