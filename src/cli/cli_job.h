/* cli_job.h — a command's memory plan under --memory (cli_job.c). */
#ifndef SSB4D_CLI_JOB_H
#define SSB4D_CLI_JOB_H
#include "cli/cli_common.h"

/* A size for messages: MiB below 1 GiB, else GiB; up = round up (a smallest budget printed can
 * be given back to --memory as it is). */
const char *cli_job_size(char buf[32], size_t bytes, int up);
/* bytes in the unit cli_job_size gives `like` (the largest size of the same message): one unit
 * per message ("0.12 GiB of 1.50 GiB", never "120.0 MiB of 1.50 GiB"). */
const char *cli_job_size_as(char buf[32], size_t bytes, size_t like, int up);
/* Exit for a failed step: a refusal by the budget is "does not fit", exit 2; else cli_error's. */
int cli_job_error(const char *cmd, ssb4d_status st, const char *msg, size_t budget);
/* DATA's size when it is a .qem (its mapping stays resident and counts under the budget), else 0. */
size_t cli_job_encoded_bytes(const char *path);
/* Calibrates src under mem's budget with the planner's frame block; encoded: bytes already counted
 * in mem. Returns 0 or the exit code (message printed). */
int cli_job_calibrate(const char *cmd, ssb4d_source *src, ssb4d_calib_params *cp, ssb4d_mem *mem,
                      size_t encoded, ssb4d_calibration *cal);
/* The threads a spatial-index check of q may run on within budget beside `other` bytes, or 0
 * after printing why not even one fits. */
int cli_qem_check_threads(const char *cmd, const ssb4d_qem *q, int threads, size_t budget, size_t other);
#endif
