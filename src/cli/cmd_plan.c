/* cmd_plan.c — `ssb4d plan DATA | --shape RxCxDRxDC --bf N [--memory SIZE] [--ranks N|auto]
 * [--backend cuda [--device-memory SIZE]] [--json]`: the memory plan of a session (SPEC 9): per
 * stage the predicted peak and after, the tiles, the time class; "does not fit" with the smallest
 * budget that would; the "what fits which machine" table, and how many machines a distributed
 * session (one rank each) needs. With --ranks, the plan of the largest rank of N (ssb4d_plan_make_rank)
 * and the smallest N that fits. With --backend cuda (or auto on a machine with a GPU), the GPU's
 * memory too: the device bytes of every pass the session runs there and the peak
 * (ssb4d_plan_device), against --device-memory or the GPU's memory. With --refine REGION, the
 * multislice refinement's memory too (ssb4d_refine_plan_make: the bytes ssb4d_refine counts) and
 * whether it fits beside the encoded data and G. */
#include "cli/cli_common.h"
#include "cli/cli_job.h"
#include "cli/cli_params.h"
#include "cli/cli_report.h"
#include "cli/commands.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "plan"

/* refine's options that change its memory (the parameter table's rows: the same names, checks
 * and ranges as `ssb4d refine`). */
static const char *const REFINE_TABLE[] = {"slices", "thickness", "batch", "bin", NULL};

static void help(FILE *f)
{
    char refine_help[2048] = "";
    FILE *mf = fmemopen(refine_help, sizeof refine_help - 1, "w");
    if (mf) {
        cli_param_help(mf, SSB4D_OP_REFINE, REFINE_TABLE, 1);
        fclose(mf);
    }
    fprintf(f,
            "usage: ssb4d plan DATA [options]\n"
            "       ssb4d plan --shape 512x512x192x192 --bf 8939 [options]\n\n"
            "Plans the memory of a session (ssb4d session) under a budget: how G is held (float32\n"
            "resident; the outer BF pixels streamed, i.e. rebuilt from the encoded data by every pass;\n"
            "a half-precision preview copy), the decode block, the group of planes a pass\n"
            "materialises, and per stage the predicted tracked peak and after, the tiles and a time\n"
            "class (from a machine profile: the stated rates of the 2-core reference machine, or this\n"
            "machine's with --measure). Ends with what fits machines of 8 to 128 GB, and how many\n"
            "machines of 64 to 512 GB a distributed session (mpirun -np N, one rank a machine) needs\n"
            "for 1024x1024 and 2048x2048 scans (and for this data).\n"
            "With DATA the BF pixels are counted by calibrating it (a full read of the data); the\n"
            "encoded size is that of the .qem file.\n\n"
            "  --shape RxCxDRxDC     scan rows x scan cols x detector rows x detector cols\n"
            "  --bf N                selected BF pixels (with --shape)\n"
            "  --fit-bf N            the fit's pixels (default N: the fit radius is 1)\n"
            "  --encoded SIZE        resident encoded data (default with --shape: the uint16 counts\n"
            "                        / 13.1, the ratio of the reference workload; 0 for data on disk)\n"
            "  --upsample F          preview upsampling 1, 2, 3, 4 or 8 (default: auto from DATA, else 2)\n"
            "  --region RxC          region refit shape (default 256x256, half the scan below 512);\n"
            "                        0x0: no region refit\n"
            "  --preview-precision P auto, float or half\n"
            "  --rotation-fitted     with --shape: the calibration fits the rotation (CoM planes) and\n"
            "                        the fit searches it (a k table per candidate's rotation)\n"
            "  --measure             time this machine's passes first (about a second) and take the\n"
            "                        times from them instead of the stated profile\n"
            "  --ranks N|auto        plan a distributed session of N ranks (1 to 65536; 1: one process,\n"
            "                        the default): --memory is then one rank's budget and the stages\n"
            "                        show the largest rank's memory (its share of the BF pixels' blocks\n"
            "                        of 64, all its planes resident in float32: no streaming, no\n"
            "                        half-precision previews; rank 0 alone calibrates); also prints the\n"
            "                        smallest N that fits. auto: plan that smallest N\n"
            CLI_BACKEND_HELP
            "                        With cuda (auto: where a GPU is present) the plan adds the GPU's\n"
            "                        memory: G's planes, every pass's work buffers (kept between\n"
            "                        passes) and cuFFT's work area (estimated without a GPU), the\n"
            "                        peak, and whether it fits --device-memory or the GPU\n"
            "  --refine REGION       also plan ssb4d refine on REGION: R0:R1,C0:C1 (as refine's\n"
            "                        --region), RxC (that many rows and columns) or all: its patterns,\n"
            "                        the frames of one region row while loading, the solver's\n"
            "                        workspace (object, Adam moments, gradient, one minibatch, the\n"
            "                        per-thread FFT buffers) and the peak beside the encoded data and G;\n"
            "                        with --shape it needs --kv, --det-sampling and --scan-step\n"
            "                        (--rotation, --flip and --centre default to 0, none and the\n"
            "                        detector's middle). Refine's options that change it:\n"
            "%s"
            "  -h, --help            this help\n\n%s\n"
            CLI_EXIT_HELP_BEGIN ";\n"
            "3 the session does not fit in the budget, or (--ranks auto) no rank count fits, or\n"
            "(--backend cuda) the GPU's peak exceeds --device-memory or the GPU's memory (the plan is\n"
            "still printed).\n",
            refine_help, CLI_MICROSCOPE_HELP);
}

enum { OPT_SHAPE = CLI_OPT_FIRST_FREE, OPT_BF, OPT_FIT_BF, OPT_ENCODED, OPT_UPSAMPLE, OPT_REGION, OPT_PREVIEW,
       OPT_ROT_FITTED, OPT_MEASURE, OPT_RANKS, OPT_REFINE };

static int parse_dims(const char *s, size_t *out, int n)
{
    const char *p = s;
    for (int i = 0; i < n; i++) {
        char *e;
        unsigned long long v = strtoull(p, &e, 10);
        if (e == p || (i < n - 1 && *e != 'x') || (i == n - 1 && *e) || v > 1000000)
            return -1;
        out[i] = (size_t)v;
        p = e + 1;
    }
    return 0;
}

/* --ranks: a rank count 1..SSB4D_PLAN_MAX_RANKS in decimal digits, or "auto" (*out 0). */
static int parse_ranks(const char *s, size_t *out)
{
    if (!strcmp(s, "auto")) {
        *out = 0;
        return 0;
    }
    size_t v = 0;
    if (!*s)
        return -1;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        v = v * 10 + (size_t)(*c - '0');
        if (v > SSB4D_PLAN_MAX_RANKS)
            return -1;
    }
    if (v < 1)
        return -1;
    *out = v;
    return 0;
}

static int parse_count(const char *s, size_t *out)
{
    double v;
    if (cli_parse_number(s, 1, 1e8, 1, &v))
        return -1;
    *out = (size_t)v;
    return 0;
}

#define GIBF 1073741824.0

/* A size in the planner's words (ssb4d_size_text, its own unit). */
static const char *size_text(char buf[32], size_t bytes, int up)
{
    return ssb4d_size_text(buf, bytes, 0, up);
}

/* ---- distributed sessions: the per-rank plan, the smallest rank count, the machine counts ---- */

/* How many machines (one rank each) the default session needs: the reference scans with a 256x256
 * detector and 16,000 BF pixels (the encoded data the uint16 counts / 13.1, no geometry: the band
 * objective's bins bounded by the whole half-plane), and this data; budget 90 % of the RAM. */
static const size_t rank_ram_gb[] = {64, 128, 256, 512};
#define RANK_RAMS 4
#define RANK_SHAPES 3
#define RANK_REF_BF 16000
typedef struct {
    size_t scan[RANK_SHAPES];         /* scan side of the reference rows; 0: this data's row */
    size_t ranks[RANK_SHAPES][RANK_RAMS]; /* 0: none fits */
    int n;                            /* rows */
} rank_machines;

static void machines_ranks(const ssb4d_plan_input *in, rank_machines *rm)
{
    memset(rm, 0, sizeof *rm);
    const size_t sides[2] = {1024, 2048};
    ssb4d_fit_params fit;
    ssb4d_fit_params_default(&fit);
    fit.rotation_given = 1;
    for (int r = 0; r < RANK_SHAPES; r++) {
        ssb4d_plan_input q;
        if (r < 2) {
            ssb4d_plan_input_default(&q);
            q.scan[0] = q.scan[1] = sides[r];
            q.det[0] = q.det[1] = 256;
            q.n_bf = RANK_REF_BF;
            q.encoded_bytes = (size_t)((double)sides[r] * sides[r] * 256.0 * 256.0 * 2.0 / 13.1);
            q.region[0] = q.region[1] = ssb4d_plan_region_side(sides[r]);
            q.upsample = 2;
            q.threads = in->threads;
            q.fit = &fit;
            q.profile = in->profile;
            rm->scan[r] = sides[r];
        } else
            q = *in;
        for (int i = 0; i < RANK_RAMS; i++) {
            q.memory_bytes = (size_t)((double)rank_ram_gb[i] * 1e9 * 0.9);
            ssb4d_plan_ranks_answer a;
            ssb4d_err e = {0};
            rm->ranks[r][i] = ssb4d_plan_smallest_ranks(&q, SSB4D_PLAN_MAX_RANKS, &a, &e) ? 0 : a.ranks;
        }
        rm->n = r + 1;
    }
}

static void machines_ranks_print(const rank_machines *rm)
{
    printf("\nmachines a distributed session needs (mpirun -np N, one rank a machine, budget 90 %% of its RAM,\n"
           "every rank's planes resident in float32; 1: one process); the 1024 and 2048 rows assume %d BF\n"
           "pixels of a 256x256 detector, the encoded data 13.1x smaller than uint16 counts, no geometry\n"
           "(the band objective's bins bounded by the whole half-plane) and the default session\n",
           RANK_REF_BF);
    printf("  %-26s", "scan");
    for (int i = 0; i < RANK_RAMS; i++)
        printf(" %7zu GB", rank_ram_gb[i]);
    printf("\n");
    for (int r = 0; r < rm->n; r++) {
        char label[80];
        if (rm->scan[r])
            snprintf(label, sizeof label, "%zux%zu x 256x256", rm->scan[r], rm->scan[r]);
        else
            snprintf(label, sizeof label, "this data");
        printf("  %-26s", label);
        for (int i = 0; i < RANK_RAMS; i++) {
            if (rm->ranks[r][i])
                printf(" %10zu", rm->ranks[r][i]);
            else
                printf(" %10s", "none");
        }
        printf("\n");
    }
}

/* The per-rank plan in words: what the largest rank holds, then the stage table. */
static void rank_plan_print(const ssb4d_plan *p, const ssb4d_plan_rank_share *r)
{
    printf("distributed over %zu ranks: every figure below is one rank's, the largest: %zu of %zu blocks of %d BF\n"
           "pixels (%zu pixels, %zu stored planes), all its planes resident in float32 (no streaming, no\n"
           "half-precision previews); every rank maps the encoded data; rank 0 alone calibrates (counted in)\n",
           r->ranks, r->local_blocks, r->blocks, SSB4D_PLAN_BLOCK_BF, r->local_bf, r->local_stored);
    char b[5][32];
    printf("budget %s a rank: %s", size_text(b[0], p->memory_bytes, 0), p->fits ? "fits" : "does not fit");
    if (p->fits)
        printf("\n");
    else
        printf(": %s\n", p->reason);
    printf("  encoded %s, this rank's G %s float32 (all ranks' %s), resident after the G build %s\n",
           size_text(b[0], p->encoded_bytes, 0), size_text(b[1], p->g_bytes, 0),
           size_text(b[2], r->g_all_bytes, 0), size_text(b[3], p->resident_bytes, 0));
    printf("  decode block %.0f MiB, fit batch %zu; the chain's buffers during a pass: %s (the fit's objective), %s "
           "(the exact loss)%s\n",
           p->block_bytes / 1048576.0, p->fit_batch, size_text(b[0], r->chain_fit_bytes, 0),
           size_text(b[1], r->chain_loss_bytes, 0), p->region_frees_g ? "; the region refit frees the rank's G first" : "");
    printf("  smallest budget a rank: %s", size_text(b[0], p->min_memory_bytes, 1));
    if (p->resident_memory_bytes != p->min_memory_bytes)
        printf(" with 1 MiB decode blocks, %s with 256 MiB ones", size_text(b[1], p->resident_memory_bytes, 1));
    printf("\n");
    printf("\n%-26s %8s %8s %8s  %-16s %s\n", "stage (per rank, GiB)", "peak", "after", "cache", "time", "tiles");
    for (size_t i = 0; i < p->n_stages; i++) {
        const ssb4d_plan_stage *s = &p->stages[i];
        printf("%-26s %8.3f %8.3f %8.3f  %-16s %s\n", s->name, s->peak_bytes / GIBF, s->after_bytes / GIBF,
               s->cache_bytes / GIBF, s->time_class, s->tiles);
    }
    printf("%-26s %8.3f   (encoded + the rank's G + %.2f GiB)\n", "session peak (per rank)",
           p->session_peak_bytes / GIBF,
           ((double)p->session_peak_bytes - (double)p->encoded_bytes - (double)p->g_bytes) / GIBF);
}

static void smallest_print(const ssb4d_plan_input *in, const ssb4d_plan_ranks_answer *a, int is_auto)
{
    char b[32];
    size_text(b, in->memory_bytes, 0);
    if (a->ranks)
        printf("\nsmallest rank count for %s a rank: %zu%s%s\n", b, a->ranks,
               a->ranks == 1 ? " (one process, G resident in float32)" : "", is_auto ? " (planned above)" : "");
    else
        printf("\nno rank count fits %s a rank: %s\n", b, a->reason);
    if (a->one_process_streams)
        printf("one process also fits, streaming G (rebuilding its outer BF pixels every pass: slower fits)\n");
}

/* ---- the GPU (--backend cuda): ssb4d_plan_device ---------------------------------------------- */

#define MIBF 1048576.0

static void gpu_stages_print(const ssb4d_device_model *m)
{
    printf("  %-28s %9s %5s %2s %12s %12s\n", "pass", "BF pixels", "sets", "f", "needs MiB", "held MiB");
    printf("  %-28s %9zu %5s %2s %12.1f %12.1f\n", "G's planes", m->n_slots, "", "", m->planes_bytes / MIBF,
           m->planes_bytes / MIBF);
    for (size_t i = 0; i < m->n_stages; i++) {
        const ssb4d_device_stage *s = &m->stages[i];
        printf("  %-28s %9zu %5zu %2d %12.1f %12.1f\n", s->name, s->view_bf, s->sets, s->f, s->bytes / MIBF,
               s->after / MIBF);
    }
}

static void gpu_plan_print(const ssb4d_plan_device_info *g, size_t n_ranks)
{
    char b[4][32];
    const ssb4d_device_model *f = &g->field;
    printf("\nGPU memory (--backend cuda%s): G's planes stay on the device; each work buffer is kept at the\n"
           "largest size a pass asked of it, so the device holds what the passes so far needed at most\n",
           n_ranks > 1 ? "; one rank's GPU, without the rank chain's device buffers" : "");
    gpu_stages_print(f);
    size_t fft = f->fft_work_bytes;
    printf("  peak %s: G's planes %s, work buffers %s, cuFFT's work area %s%s\n",
           size_text(b[0], f->peak_bytes, 1), size_text(b[1], f->planes_bytes, 1),
           size_text(b[2], f->work_bytes - fft, 1), size_text(b[3], fft, 1),
           f->fft_estimated ? " (estimated: no GPU here)" : "");
    if (g->have_region)
        printf("  region refit: its own G's copy, fitted only: peak %s (%zu planes of %zux%zu), %s\n",
               size_text(b[0], g->region.peak_bytes, 1), g->region.n_slots, g->region.ny, g->region.nx,
               g->region_frees ? "the field's copy freed first" : "beside the field's copy");
    printf("  session peak on the GPU: %s\n", size_text(b[0], g->peak_bytes, 1));
    if (g->gpu[0])
        printf("  GPU here: %s, %s\n", g->gpu, size_text(b[0], g->gpu_bytes, 0));
    if (g->fits < 0)
        printf("  nothing to compare it with: no GPU here and no --device-memory\n");
    else if (g->fits)
        printf("  fits %s %s\n", g->budget_given ? "--device-memory" : "the GPU's", size_text(b[0], g->budget_bytes, 0));
    else
        printf("  does not fit: the session needs %s of GPU memory and %s is %s: use --backend cpu or a GPU\n"
               "  with more memory (half-precision planes on the GPU are not available yet)\n",
               size_text(b[1], g->peak_bytes, 1), g->budget_given ? "--device-memory" : "the GPU's memory",
               size_text(b[0], g->budget_bytes, 0));
}

static void gpu_stages_json(cJSON *o, const ssb4d_device_model *m)
{
    cJSON_AddNumberToObject(o, "planes", (double)m->n_slots);
    cJSON_AddNumberToObject(o, "planes_bytes", (double)m->planes_bytes);
    cJSON_AddNumberToObject(o, "work_bytes", (double)m->work_bytes);
    cJSON_AddNumberToObject(o, "fft_work_bytes", (double)m->fft_work_bytes);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)m->peak_bytes);
    cJSON *a = cJSON_AddArrayToObject(o, "stages");
    for (size_t i = 0; i < m->n_stages; i++) {
        const ssb4d_device_stage *s = &m->stages[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", s->name);
        cJSON_AddNumberToObject(e, "bf_pixels", (double)s->view_bf);
        cJSON_AddNumberToObject(e, "sets", (double)s->sets);
        cJSON_AddNumberToObject(e, "upsample", s->f);
        cJSON_AddNumberToObject(e, "bytes", (double)s->bytes);
        cJSON_AddNumberToObject(e, "after_bytes", (double)s->after);
        cJSON_AddItemToArray(a, e);
    }
}

static void gpu_plan_json(cJSON *j, const ssb4d_plan_device_info *g)
{
    cJSON *o = cJSON_AddObjectToObject(j, "device");
    cJSON_AddStringToObject(o, "backend", "cuda");
    gpu_stages_json(o, &g->field);
    cJSON_AddBoolToObject(o, "fft_work_estimated", g->field.fft_estimated);
    if (g->have_region) {
        cJSON *r = cJSON_AddObjectToObject(o, "region");
        gpu_stages_json(r, &g->region);
        cJSON_AddBoolToObject(r, "frees_field", g->region_frees);
    }
    cJSON_AddNumberToObject(o, "session_peak_bytes", (double)g->peak_bytes);
    if (g->gpu[0]) {
        cJSON_AddStringToObject(o, "gpu", g->gpu);
        cJSON_AddNumberToObject(o, "gpu_bytes", (double)g->gpu_bytes);
    } else
        cJSON_AddNullToObject(o, "gpu");
    if (g->budget_bytes)
        cJSON_AddNumberToObject(o, "budget_bytes", (double)g->budget_bytes);
    else
        cJSON_AddNullToObject(o, "budget_bytes");
    cJSON_AddStringToObject(o, "budget_from", g->budget_given ? "--device-memory" : g->budget_bytes ? "gpu" : "none");
    if (g->fits < 0)
        cJSON_AddNullToObject(o, "fits");
    else
        cJSON_AddBoolToObject(o, "fits", g->fits);
}

/* --json's additions: the rank count planned, the largest rank's share, the smallest rank count,
 * and the machine counts. */
static void ranks_json(cJSON *j, size_t n_ranks, const ssb4d_plan_rank_share *r, const ssb4d_plan *p,
                       const ssb4d_plan_ranks_answer *a, const rank_machines *rm)
{
    cJSON_AddNumberToObject(j, "ranks", (double)n_ranks);
    cJSON *o = cJSON_AddObjectToObject(j, "per_rank");
    cJSON_AddBoolToObject(o, "largest_rank", n_ranks > 1);
    cJSON_AddNumberToObject(o, "blocks", (double)r->blocks);
    cJSON_AddNumberToObject(o, "local_blocks", (double)r->local_blocks);
    cJSON_AddNumberToObject(o, "bf_pixels", (double)r->local_bf);
    cJSON_AddNumberToObject(o, "stored_planes", (double)r->local_stored);
    cJSON_AddNumberToObject(o, "g_bytes", (double)r->g_bytes);
    cJSON_AddNumberToObject(o, "chain_fit_bytes", (double)r->chain_fit_bytes);
    cJSON_AddNumberToObject(o, "chain_loss_bytes", (double)r->chain_loss_bytes);
    cJSON_AddNumberToObject(o, "session_peak_bytes", (double)p->session_peak_bytes);
    cJSON_AddBoolToObject(o, "fits", p->fits);
    if (a->ranks)
        cJSON_AddNumberToObject(j, "smallest_ranks", (double)a->ranks);
    else {
        cJSON_AddNullToObject(j, "smallest_ranks");
        cJSON_AddStringToObject(j, "smallest_ranks_reason", a->reason);
    }
    cJSON_AddBoolToObject(j, "one_process_streams", a->one_process_streams);
    cJSON *ma = cJSON_AddArrayToObject(j, "machines_ranks");
    for (int k = 0; k < rm->n; k++)
        for (int i = 0; i < RANK_RAMS; i++) {
            cJSON *e = cJSON_CreateObject();
            if (rm->scan[k]) {
                cJSON_AddNumberToObject(e, "scan", (double)rm->scan[k]);
                cJSON_AddNumberToObject(e, "n_bf", RANK_REF_BF);
            } else
                cJSON_AddStringToObject(e, "scan", "this data");
            cJSON_AddNumberToObject(e, "ram_gb", (double)rank_ram_gb[i]);
            if (rm->ranks[k][i])
                cJSON_AddNumberToObject(e, "ranks", (double)rm->ranks[k][i]);
            else
                cJSON_AddNullToObject(e, "ranks");
            cJSON_AddItemToArray(ma, e);
        }
}

/* ---- the multislice refinement (--refine): ssb4d_refine_plan_make ------------------------------ */

/* --refine: "R0:R1,C0:C1", "RxC" (rows 0..R, cols 0..C) or "all" (all 0). 0, or -1. */
static int parse_refine_region(const char *s, size_t r[4])
{
    unsigned long long v[4];
    int n = 0;
    memset(r, 0, 4 * sizeof *r);
    if (!strcmp(s, "all"))
        return 0;
    if (strchr(s, '-'))
        return -1;
    if (sscanf(s, "%llu:%llu,%llu:%llu%n", &v[0], &v[1], &v[2], &v[3], &n) == 4 && !s[n] && v[0] < v[1] &&
        v[2] < v[3]) {
        for (int i = 0; i < 4; i++)
            r[i] = (size_t)v[i];
        return 0;
    }
    size_t d[2];
    if (parse_dims(s, d, 2) || !d[0] || !d[1])
        return -1;
    r[1] = d[0], r[3] = d[1];
    return 0;
}

/* With --shape: the geometry from the microscope flags (kV, detector sampling and scan step
 * needed; rotation 0, no flip and the detector's middle as the centre unless given). 0, or the
 * exit code (line printed). */
static int refine_shape_geometry(const cli_micro *m, const size_t shape[4], ssb4d_geometry *g)
{
    const ssb4d_values *v = &m->flags;
    if (!(v->kv > 0) || !(v->det_sampling_mrad[0] > 0) || !(v->scan_step_A[0] > 0)) {
        fprintf(stderr, "ssb4d plan: --refine with --shape needs --kv, --det-sampling and --scan-step (the object "
                        "grid depends on them)\n");
        return CLI_EXIT_USAGE;
    }
    memset(g, 0, sizeof *g);
    g->kv = v->kv;
    g->semiangle_mrad = v->semiangle_mrad;
    for (int a = 0; a < 2; a++) {
        g->det_sampling_mrad[a] = v->det_sampling_mrad[a] > 0 ? v->det_sampling_mrad[a] : v->det_sampling_mrad[0];
        g->scan_step_A[a] = v->scan_step_A[a] > 0 ? v->scan_step_A[a] : v->scan_step_A[0];
        g->centre_px[a] = isfinite(v->centre_px[a]) ? v->centre_px[a] : 0.5 * (double)shape[2 + a];
    }
    g->rotation_deg = isfinite(v->rotation_deg) ? v->rotation_deg : 0.0;
    g->flip = v->flip > 0;
    return 0;
}

/* What `ssb4d refine` holds besides the refinement: the encoded data and the fit's G (the plan's
 * resident bytes after the G build). */
static size_t refine_session_bytes(const ssb4d_plan *p, const ssb4d_refine_plan *r)
{
    return p->resident_bytes + r->peak_bytes;
}

static void refine_plan_print(const ssb4d_plan *p, const ssb4d_refine_plan *r, const size_t reg[4])
{
    char b[4][32];
    printf("\nrefine (ssb4d refine --region %zu:%zu,%zu:%zu): %zu positions, %d slice%s, bin %d (detector %zux%zu), "
           "model grid %zux%zu, object %zux%zu of %.4g A, %zu pixels a pattern in the likelihood, %zu positions a "
           "minibatch, %d thread%s\n",
           reg[0], reg[1], reg[2], reg[3], r->positions, r->slices, r->slices == 1 ? "" : "s", r->bin, r->det[0],
           r->det[1], r->grid[0], r->grid[1], r->object[0], r->object[1], r->object_pixel_A[0], r->valid_pixels,
           r->batch, r->threads, r->threads == 1 ? "" : "s");
    printf("  patterns   %10s  positions x pixels in the likelihood, float32, held throughout\n",
           size_text(b[0], r->patterns_bytes, 1));
    printf("  frames     %10s  one region row of frames while loading (freed before the solver)\n",
           size_text(b[0], r->frames_bytes, 1));
    printf("  workspace  %10s  the object (phase, transmission, Adam moments, gradient), one minibatch's\n"
           "                         gradient crops, the per-thread FFT buffers, the model's tables\n",
           size_text(b[0], r->workspace_bytes, 1));
    printf("  peak       %10s  tracked, over what the session held before it (patterns + the larger of\n"
           "                         frames and workspace)\n",
           size_text(b[0], r->peak_bytes, 1));
    size_t all = refine_session_bytes(p, r);
    printf("  with the encoded data and G (%s): %s against the budget %s: %s\n", size_text(b[1], p->resident_bytes, 1),
           size_text(b[2], all, 1), size_text(b[3], p->memory_bytes, 0),
           all <= p->memory_bytes ? "fits" : "does not fit");
}

static void refine_plan_json(cJSON *j, const ssb4d_plan *p, const ssb4d_refine_plan *r, const size_t reg[4])
{
    cJSON *o = cJSON_AddObjectToObject(j, "refine");
    cJSON *a = cJSON_AddArrayToObject(o, "region");
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)reg[i]));
    cJSON_AddNumberToObject(o, "positions", (double)r->positions);
    cJSON_AddNumberToObject(o, "slices", r->slices);
    cJSON_AddNumberToObject(o, "bin", r->bin);
    cJSON_AddNumberToObject(o, "threads", r->threads);
    cJSON_AddNumberToObject(o, "batch", (double)r->batch);
    const size_t *pairs[3] = {r->det, r->grid, r->object};
    const char *names[3] = {"detector", "grid", "object_shape"};
    for (int k = 0; k < 3; k++) {
        a = cJSON_AddArrayToObject(o, names[k]);
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)pairs[k][0]));
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)pairs[k][1]));
    }
    a = cJSON_AddArrayToObject(o, "object_pixel_A");
    cJSON_AddItemToArray(a, cJSON_CreateNumber(r->object_pixel_A[0]));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(r->object_pixel_A[1]));
    cJSON_AddNumberToObject(o, "valid_pixels", (double)r->valid_pixels);
    cJSON_AddNumberToObject(o, "patterns_bytes", (double)r->patterns_bytes);
    cJSON_AddNumberToObject(o, "frames_bytes", (double)r->frames_bytes);
    cJSON_AddNumberToObject(o, "workspace_bytes", (double)r->workspace_bytes);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)r->peak_bytes);
    cJSON_AddNumberToObject(o, "session_bytes", (double)refine_session_bytes(p, r));
    cJSON_AddBoolToObject(o, "fits", refine_session_bytes(p, r) <= p->memory_bytes);
}

int cmd_plan(int argc, char **argv)
{
    struct option opts[48] = {CLI_MICROSCOPE_OPTIONS,
                                         {"shape", required_argument, 0, OPT_SHAPE},
                                         {"bf", required_argument, 0, OPT_BF},
                                         {"fit-bf", required_argument, 0, OPT_FIT_BF},
                                         {"encoded", required_argument, 0, OPT_ENCODED},
                                         {"upsample", required_argument, 0, OPT_UPSAMPLE},
                                         {"region", required_argument, 0, OPT_REGION},
                                         {"preview-precision", required_argument, 0, OPT_PREVIEW},
                                         {"rotation-fitted", no_argument, 0, OPT_ROT_FITTED},
                                         {"measure", no_argument, 0, OPT_MEASURE},
                                         {"ranks", required_argument, 0, OPT_RANKS},
                                         {"refine", required_argument, 0, OPT_REFINE},
                                         CLI_BACKEND_OPTION,
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    size_t n_opts = 0;
    while (opts[n_opts].name)
        n_opts++;
    cli_param_options(opts, &n_opts, 48, SSB4D_OP_REFINE, REFINE_TABLE);
    ssb4d_refine_params rfp;
    ssb4d_refine_params_default(&rfp);
    void *const targets[SSB4D_OP_COUNT] = {[SSB4D_OP_REFINE] = &rfp};
    size_t refine_reg[4] = {0};
    int refine_on = 0;
    ssb4d_refine_plan rpl;
    memset(&rpl, 0, sizeof rpl);
    cli_micro m;
    cli_micro_init(&m);
    ssb4d_plan_input in;
    ssb4d_plan_input_default(&in);
    size_t shape[4] = {0}, region[2] = {(size_t)-1, (size_t)-1};
    int have_shape = 0, have_encoded = 0, measure = 0, have_ranks = 0, c;
    size_t ranks = 1; /* 0: auto */
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hq", opts, NULL)) != -1) {
        int r = cli_micro_handle(&m, c, optarg);
        if (!r)
            r = cli_param_handle(c, optarg, targets);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r)
            continue;
        switch (c) {
        case OPT_SHAPE:
            if (parse_dims(optarg, shape, 4)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --shape (e.g. 512x512x192x192)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            have_shape = 1;
            break;
        case OPT_BF:
        case OPT_FIT_BF:
            if (parse_count(optarg, c == OPT_BF ? &in.n_bf : &in.n_fit_bf)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --%s (a positive count)\n", optarg,
                        c == OPT_BF ? "bf" : "fit-bf");
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_ENCODED:
            if (!strcmp(optarg, "0"))
                in.encoded_bytes = 0;
            else if (ssb4d_parse_size(optarg, &in.encoded_bytes)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --encoded (a size such as 2G)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            have_encoded = 1;
            break;
        case OPT_UPSAMPLE: {
            size_t f;
            if (parse_count(optarg, &f) || (f != 1 && f != 2 && f != 3 && f != 4 && f != 8)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --upsample (1, 2, 3, 4 or 8)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            in.upsample = (int)f;
            break;
        }
        case OPT_REGION:
            if (parse_dims(optarg, region, 2)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --region (e.g. 256x256, or 0x0)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            break;
        case OPT_PREVIEW:
            if (cli_parse_preview(optarg, &in.preview))
                return CLI_EXIT_USAGE;
            break;
        case OPT_ROT_FITTED: in.rotation_fitted = 1; break;
        case OPT_MEASURE: measure = 1; break;
        case OPT_RANKS:
            if (parse_ranks(optarg, &ranks)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --ranks (a rank count from 1 to %d, or auto)\n",
                        optarg, SSB4D_PLAN_MAX_RANKS);
                return CLI_EXIT_USAGE;
            }
            have_ranks = 1;
            break;
        case OPT_REFINE:
            if (parse_refine_region(optarg, refine_reg)) {
                fprintf(stderr, "ssb4d plan: invalid value '%s' for --refine (R0:R1,C0:C1, RxC or all)\n", optarg);
                return CLI_EXIT_USAGE;
            }
            refine_on = 1;
            break;
        case 'h': help(stdout); return CLI_EXIT_OK;
        case ':':
            fprintf(stderr, "ssb4d plan: option %s needs a value (see --help)\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        default:
            fprintf(stderr, "ssb4d plan: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return CLI_EXIT_USAGE;
        }
    }
    rfp.threads = m.threads; /* as `ssb4d refine --threads` sets it (its per-thread FFT buffers) */
    const char *data = optind < argc ? argv[optind] : NULL;
    if (optind < argc - 1 || (!data && !have_shape) || (data && have_shape)) {
        fprintf(stderr, "ssb4d plan: give either DATA or --shape with --bf (try --help)\n");
        return CLI_EXIT_USAGE;
    }
    if (data && cli_check_readable(CMD, data)) /* first: before the microscope values */
        return CLI_EXIT_USAGE;
    ssb4d_err err = {0};
    ssb4d_geometry geom; /* DATA's calibrated geometry, for the plan (outlives the calibration) */
    if (have_shape) {
        if (!in.n_bf) {
            fprintf(stderr, "ssb4d plan: --shape needs --bf N, the number of selected BF pixels\n");
            return CLI_EXIT_USAGE;
        }
        memcpy(in.scan, shape, 2 * sizeof *shape);
        memcpy(in.det, shape + 2, 2 * sizeof *shape);
        if (!have_encoded)
            in.encoded_bytes = (size_t)((double)shape[0] * shape[1] * shape[2] * shape[3] * 2.0 / 13.1);
        if (!in.upsample)
            in.upsample = 2;
        if (refine_on) {
            int rc = refine_shape_geometry(&m, shape, &geom);
            if (!rc && ssb4d_refine_plan_make(shape, refine_reg, &geom, NULL, &rfp, &rpl, &err))
                rc = cli_error(CMD, err.code, err.msg);
            if (rc)
                return rc;
        }
    } else {
        /* DATA: calibrate it for the exact BF selection, as the session will. */
        ssb4d_source *src = NULL;
        ssb4d_status st = ssb4d_source_open(data, &src, &err);
        if (st)
            return cli_error(CMD, st, err.msg);
        ssb4d_values v;
        int rc = cli_resolve(data, &m, &v);
        if (!rc)
            rc = cli_check_microscope(&v);
        if (rc) {
            ssb4d_source_close(src);
            return rc;
        }
        ssb4d_calib_params cp;
        cli_values_to_calib_params(&v, m.threads, m.hot_pixels, &cp);
        ssb4d_calibration cal;
        if (!m.json && !m.quiet)
            fprintf(stderr, "ssb4d plan: calibrating %s for its BF pixels\n", data);
        st = ssb4d_calibrate(src, &cp, &cal, &err);
        size_t sh[4];
        ssb4d_source_shape(src, sh);
        ssb4d_source_close(src);
        if (st)
            return cli_error(CMD, st, err.msg);
        size_t fit_bf = in.n_fit_bf; /* --fit-bf, if given, wins */
        ssb4d_fit_params fp;
        ssb4d_fit_params_default(&fp);
        ssb4d_plan_input_from_calibration(&in, &cal, sh, fp.fit_radius);
        if (fit_bf)
            in.n_fit_bf = fit_bf;
        in.rotation_fitted = isnan(cp.rotation_deg);
        if (!in.upsample)
            in.upsample = ssb4d_upsample_auto(&cal.geom);
        geom = cal.geom; /* the plan counts the band's and the parallax's bins from it */
        in.geometry = &geom;
        /* the refinement on this calibration: its centre and flagged pixels (the fit may move the
         * rotation, which changes the object grid by a few pixels at most) */
        st = refine_on ? ssb4d_refine_plan_make(sh, refine_reg, &geom, &cal, &rfp, &rpl, &err) : SSB4D_OK;
        ssb4d_calibration_free(&cal);
        if (st)
            return cli_error(CMD, st, err.msg);
        if (!have_encoded)
            in.encoded_bytes = cli_job_encoded_bytes(data);
    }
    if (region[0] == (size_t)-1) {
        region[0] = ssb4d_plan_region_side(in.scan[0]);
        region[1] = ssb4d_plan_region_side(in.scan[1]);
    }
    if ((region[0] || region[1]) && (region[0] < 32 || region[1] < 32 || region[0] > in.scan[0] || region[1] > in.scan[1])) {
        fprintf(stderr, "ssb4d plan: the region %zux%zu must be at least 32x32 and inside the %zux%zu scan\n",
                region[0], region[1], in.scan[0], in.scan[1]);
        return CLI_EXIT_USAGE;
    }
    in.region[0] = region[0], in.region[1] = region[1];
    in.threads = m.threads;
    in.memory_bytes = cli_memory_budget(&m);
    /* The session's fit: the rotation held when it was given, else searched with the aberrations. */
    ssb4d_fit_params fit;
    ssb4d_fit_params_default(&fit);
    fit.rotation_given = !in.rotation_fitted;
    in.fit = &fit;
    ssb4d_machine_profile prof;
    if (measure) {
        if (ssb4d_machine_profile_measure(m.threads, &prof, &err))
            return cli_error(CMD, err.code, err.msg);
        in.profile = &prof;
    }
    /* The smallest rank count (for --ranks, and the JSON), then the plan of the rank count asked. */
    ssb4d_plan_ranks_answer ans;
    ssb4d_status st = ssb4d_plan_smallest_ranks(&in, SSB4D_PLAN_MAX_RANKS, &ans, &err);
    if (st)
        return cli_error(CMD, st, err.msg);
    size_t n_ranks = ranks ? ranks : ans.ranks ? ans.ranks : ans.tried;
    ssb4d_plan p;
    ssb4d_plan_rank_share share;
    st = ssb4d_plan_make_rank(&in, n_ranks, &p, &share, &err);
    if (st)
        return cli_error(CMD, st, err.msg);
    rank_machines rm;
    machines_ranks(&in, &rm);
    /* The GPU: asked for (cuda, or --device-memory), or auto with a GPU here. */
    int gpu_on = m.backend == SSB4D_BACKEND_CUDA || (m.backend == SSB4D_BACKEND_AUTO && m.device_memory_bytes);
    const char *here = NULL; /* auto: the backend a session would take here */
    if (!gpu_on && m.backend == SSB4D_BACKEND_AUTO && !ssb4d_backend_check(SSB4D_BACKEND_AUTO, &here, NULL))
        gpu_on = !strcmp(here, "cuda");
    ssb4d_plan_device_info gp;
    if (gpu_on)
        ssb4d_plan_device(&in, &p, n_ranks, share.local_stored, m.device_memory_bytes, &gp);
    if (m.json) {
        cJSON *j = cli_plan_json(&p, &in);
        ranks_json(j, n_ranks, &share, &p, &ans, &rm);
        if (gpu_on)
            gpu_plan_json(j, &gp);
        if (refine_on)
            refine_plan_json(j, &p, &rpl, refine_reg[1] ? refine_reg : (size_t[4]){0, in.scan[0], 0, in.scan[1]});
        char *t = cJSON_PrintUnformatted(j);
        printf("%s\n", t);
        free(t);
        cJSON_Delete(j);
    } else {
        printf("plan for %zux%zu scan x %zux%zu detector, %zu BF pixels (%zu fit), %d threads\n", in.scan[0],
               in.scan[1], in.det[0], in.det[1], in.n_bf, in.n_fit_bf ? in.n_fit_bf : in.n_bf,
               ssb4d_threads_resolve(in.threads));
        if (n_ranks > 1)
            rank_plan_print(&p, &share);
        else
            cli_plan_print(stdout, &p, &in);
        machines_ranks_print(&rm);
        if (have_ranks)
            smallest_print(&in, &ans, ranks == 0);
        if (gpu_on)
            gpu_plan_print(&gp, n_ranks);
        if (refine_on)
            refine_plan_print(&p, &rpl, refine_reg[1] ? refine_reg : (size_t[4]){0, in.scan[0], 0, in.scan[1]});
        printf("times from the %s profile\n", p.profile_source);
    }
    if (ranks == 0 && !ans.ranks)
        return 3;
    if (gpu_on && gp.fits == 0)
        return 3;
    if (refine_on && refine_session_bytes(&p, &rpl) > p.memory_bytes)
        return 3;
    return p.fits ? CLI_EXIT_OK : 3;
}
