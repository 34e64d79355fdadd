/* cli_report.h — the stage tables and JSON objects `ssb4d plan` and `ssb4d session` print. */
#ifndef SSB4D_CLI_REPORT_H
#define SSB4D_CLI_REPORT_H
#include "ssb4d_advanced.h"

#include <cjson/cJSON.h>
#include <stdio.h>

/* The plan: decisions, the predicted stage table and the "what fits which machine" table. */
void cli_plan_print(FILE *f, const ssb4d_plan *p, const ssb4d_plan_input *in);
/* {"encoded_bytes", "g_bytes", "resident_bytes", "session_peak_bytes", "fits", "stages": [...]}
 * plus the decisions and the machine table. */
cJSON *cli_plan_json(const ssb4d_plan *p, const ssb4d_plan_input *in);
/* The session's measured table with the plan's prediction beside it. */
void cli_session_print(FILE *f, const ssb4d_session_report *r);
cJSON *cli_session_json(const ssb4d_session_report *r);
#endif
