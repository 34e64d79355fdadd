/* cli_job.c — the budget's words on the command line (SPEC 9): sizes, a refusal as "does not
 * fit" (exit 2), calibrating within the budget (calibrate), the spatial-index check's threads
 * (info, verify). The compute commands plan through the session handle (cli_session.c). */
#include "cli/cli_job.h"



#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* The planner's wording of sizes (src/plan/budget.c), so that the command line and the session
 * handle say the same. */
const char *cli_job_size(char buf[32], size_t bytes, int up) { return ssb4d_size_text(buf, bytes, 0, up); }

const char *cli_job_size_as(char buf[32], size_t bytes, size_t like, int up)
{
    return ssb4d_size_text(buf, bytes, like ? like : 1, up); /* like 0 meant MiB */
}

/* Exit for a failed step: a refusal by the budget (mem.c's messages name "the memory budget") is
 * the user's "does not fit", exit 2; anything else as cli_error says. */
int cli_job_error(const char *cmd, ssb4d_status st, const char *msg, size_t budget)
{
    if (st == SSB4D_ENOMEM && strstr(msg, "memory budget")) {
        /* the library's refusals (mem.c) give their sizes in MiB: the budget too */
        char b[32];
        fprintf(stderr, "ssb4d %s: the job does not fit in %s: %s\n", cmd, ssb4d_size_text(b, budget, 1, 0), msg);
        return CLI_EXIT_USAGE;
    }
    return cli_error(cmd, st, msg);
}

/* The size of DATA when it is a .qem: its mapping stays resident for the whole job (every pass
 * decodes from it), so it counts under the budget. 0 for anything else (.npy pages are read
 * through, not held). */
size_t cli_job_encoded_bytes(const char *path)
{
    FILE *f = fopen(path, "rb");
    char magic[8] = {0};
    size_t n = f ? fread(magic, 1, sizeof magic, f) : 0;
    if (f)
        fclose(f);
    struct stat sb;
    return n == 8 && !memcmp(magic, "QEMDATA1", 8) && stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

/* Calibrates src under mem's budget with the frame block the planner would pick (the same
 * results for any block), after checking that the encoded data and one block fit at all.
 * encoded: the bytes already counted in mem. Returns 0 or the exit code (message printed). */
int cli_job_calibrate(const char *cmd, ssb4d_source *src, ssb4d_calib_params *cp, ssb4d_mem *mem,
                      size_t encoded, ssb4d_calibration *cal)
{
    size_t budget = ssb4d_mem_limit(mem), sh[4];
    ssb4d_source_shape(src, sh);
    size_t npos = sh[0] * sh[1];
    cp->mem = mem;
    /* The moments and centre-of-mass planes are held when the rotation is fitted (plan.c). */
    size_t need = ssb4d_calib_need(budget, encoded, sh[2] * sh[3], npos, isnan(cp->rotation_deg), &cp->block_bytes);
    if (budget && need > budget) {
        char b[32], n[32];
        size_t big = budget > need ? budget : need;
        fprintf(stderr, "ssb4d %s: the job does not fit in %s: calibrating needs %s (the encoded data and "
                        "one block of frames)\n", cmd, cli_job_size_as(b, budget, big, 0), cli_job_size_as(n, need, big, 1));
        return CLI_EXIT_USAGE;
    }
    ssb4d_err err = {0};
    ssb4d_mem_stage_begin(mem, "calibrate");
    ssb4d_status st = ssb4d_calibrate(src, cp, cal, &err);
    ssb4d_mem_stage_end(mem);
    return st ? cli_job_error(cmd, st, err.msg, budget) : 0;
}

/* The threads a spatial-index check of q may run on within budget, beside `other` bytes held:
 * each holds one block's sums of every spatial field (qem_read.c).
 * Returns the thread count, or 0 after printing why not even one fits. */
int cli_qem_check_threads(const char *cmd, const ssb4d_qem *q, int threads, size_t budget, size_t other)
{
    ssb4d_qem_info in;
    ssb4d_qem_get_info(q, &in);
    size_t per_thread = ssb4d_qem_index_check_bytes(in.shape[2], in.shape[3]);
    size_t nt = (size_t)ssb4d_threads_resolve(threads);
    nt = nt > in.n_blocks ? in.n_blocks : nt;
    size_t room = budget > other ? budget - other : 0;
    if (nt * per_thread > room)
        nt = room / per_thread; /* the same verdict on fewer threads */
    if (nt < 1) {
        char b[4][32];
        size_t need = other + per_thread, big = budget > need ? budget : need;
        fprintf(stderr, "ssb4d %s: the job does not fit in %s: checking the spatial index needs %s "
                        "(%s per thread beside %s of per-pixel arrays)\n", cmd, ssb4d_size_text(b[0], budget, big, 0),
                ssb4d_size_text(b[1], need, big, 1), ssb4d_size_text(b[2], per_thread, big, 1),
                ssb4d_size_text(b[3], other, big, 1));
        return 0;
    }
    return (int)nt;
}

