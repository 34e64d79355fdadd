/* cli_report.c — the stage table of the seed document ("peak during / after"), for a plan (predicted)
 * and a session (measured, with the prediction beside it), as text and as JSON. */
#include "cli/cli_report.h"

#include <string.h>

#define GIB 1073741824.0

static const size_t machines_gb[] = {8, 16, 24, 32, 64, 128};

static void decisions_print(FILE *f, const ssb4d_plan *p)
{
    fprintf(f, "budget %.2f GiB: %s", p->memory_bytes / GIB, p->fits ? "fits" : "does not fit");
    if (p->fits)
        fprintf(f, " (%s%s)\n", p->mode, p->preview_half ? ", half-precision previews" : "");
    else
        fprintf(f, ": %s\n", p->reason);
    fprintf(f, "  encoded %.2f GiB, G %.2f GiB float32 (%.2f GiB half), resident after the G build %.2f GiB\n",
            p->encoded_bytes / GIB, p->g_bytes / GIB, p->g_half_bytes / GIB, p->resident_bytes / GIB);
    fprintf(f, "  fit G resident %.2f GiB, preview G resident %.2f GiB%s; decode block %.0f MiB, groups of %.0f MiB, "
               "fit batch %zu%s\n",
            p->fit_resident_bytes / GIB, p->preview_resident_bytes / GIB, p->preview_half ? " (half)" : "",
            p->block_bytes / 1048576.0, p->group_bytes / 1048576.0, p->fit_batch,
            p->region_frees_g ? "; the region refit frees the full field's G first" : "");
    fprintf(f, "  smallest budget: %.2f GiB with G resident in float32, %.2f GiB streaming\n",
            p->resident_memory_bytes / GIB, p->min_memory_bytes / GIB);
}

/* What fits which machine: the plan remade for each RAM size (less 10 % for the system). */
static void machines(const ssb4d_plan_input *in, ssb4d_plan out[6])
{
    for (int i = 0; i < 6; i++) {
        ssb4d_plan_input m = *in;
        m.memory_bytes = (size_t)((double)machines_gb[i] * 1e9 * 0.9);
        ssb4d_err e;
        if (ssb4d_plan_make(&m, &out[i], &e))
            memset(&out[i], 0, sizeof out[i]);
    }
}

void cli_plan_print(FILE *f, const ssb4d_plan *p, const ssb4d_plan_input *in)
{
    decisions_print(f, p);
    fprintf(f, "\n%-26s %8s %8s %8s  %-16s %s\n", "stage (predicted, GiB)", "peak", "after", "cache", "time", "tiles");
    for (size_t i = 0; i < p->n_stages; i++) {
        const ssb4d_plan_stage *s = &p->stages[i];
        fprintf(f, "%-26s %8.3f %8.3f %8.3f  %-16s %s\n", s->name, s->peak_bytes / GIB, s->after_bytes / GIB,
                s->cache_bytes / GIB, s->time_class, s->tiles);
    }
    fprintf(f, "%-26s %8.3f   (encoded + G + %.2f GiB)\n", "session peak", p->session_peak_bytes / GIB,
            ((double)p->session_peak_bytes - (double)p->encoded_bytes - (double)p->g_bytes) / GIB);
    ssb4d_plan mp[6];
    machines(in, mp);
    fprintf(f, "\nwhat fits which machine (budget = 90 %% of the RAM)\n");
    for (int i = 0; i < 6; i++) {
        const ssb4d_plan *q = &mp[i];
        fprintf(f, "  %3zu GB  ", machines_gb[i]);
        if (!q->fits)
            fprintf(f, "does not fit (needs %.1f GiB)\n", q->min_memory_bytes / GIB);
        else if (!strcmp(q->mode, "resident"))
            fprintf(f, "fits, G resident in float32: session peak %.1f GiB\n", q->session_peak_bytes / GIB);
        else
            fprintf(f, "fits streaming%s: session peak %.1f GiB, %.0f %% of the fit's G resident\n",
                    q->preview_half ? " with half-precision previews" : "", q->session_peak_bytes / GIB,
                    q->g_bytes ? 100.0 * (double)q->fit_resident_bytes / (double)q->g_bytes : 0.0);
    }
}

static cJSON *plan_stages(const ssb4d_plan *p)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < p->n_stages; i++) {
        const ssb4d_plan_stage *s = &p->stages[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddNumberToObject(o, "peak_bytes", (double)s->peak_bytes);
        cJSON_AddNumberToObject(o, "after_bytes", (double)s->after_bytes);
        cJSON_AddNumberToObject(o, "cache_bytes", (double)s->cache_bytes);
        cJSON_AddNumberToObject(o, "predicted_seconds", s->seconds);
        cJSON_AddStringToObject(o, "time_class", s->time_class);
        cJSON_AddStringToObject(o, "tiles", s->tiles);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static void decisions_json(cJSON *j, const ssb4d_plan *p)
{
    cJSON_AddNumberToObject(j, "memory_bytes", (double)p->memory_bytes);
    cJSON_AddStringToObject(j, "mode", p->mode);
    cJSON_AddStringToObject(j, "preview_precision", p->preview_half ? "half" : "float");
    cJSON_AddNumberToObject(j, "fit_resident_bytes", (double)p->fit_resident_bytes);
    cJSON_AddNumberToObject(j, "preview_resident_bytes", (double)p->preview_resident_bytes);
    cJSON_AddNumberToObject(j, "block_bytes", (double)p->block_bytes);
    cJSON_AddNumberToObject(j, "group_bytes", (double)p->group_bytes);
    cJSON_AddNumberToObject(j, "fit_batch", (double)p->fit_batch);
    cJSON_AddBoolToObject(j, "region_frees_g", p->region_frees_g);
    cJSON_AddNumberToObject(j, "min_memory_bytes", (double)p->min_memory_bytes);
    cJSON_AddNumberToObject(j, "resident_memory_bytes", (double)p->resident_memory_bytes);
    if (!p->fits)
        cJSON_AddStringToObject(j, "reason", p->reason);
}

cJSON *cli_plan_json(const ssb4d_plan *p, const ssb4d_plan_input *in)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "encoded_bytes", (double)p->encoded_bytes);
    cJSON_AddNumberToObject(j, "g_bytes", (double)p->g_bytes);
    cJSON_AddNumberToObject(j, "resident_bytes", (double)p->resident_bytes);
    cJSON_AddNumberToObject(j, "session_peak_bytes", (double)p->session_peak_bytes);
    cJSON_AddBoolToObject(j, "fits", p->fits);
    cJSON_AddItemToObject(j, "stages", plan_stages(p));
    cJSON_AddNumberToObject(j, "g_half_bytes", (double)p->g_half_bytes);
    cJSON_AddStringToObject(j, "profile", p->profile_source);
    decisions_json(j, p);
    ssb4d_plan mp[6];
    machines(in, mp);
    cJSON *m = cJSON_AddArrayToObject(j, "machines");
    for (int i = 0; i < 6; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "ram_gb", (double)machines_gb[i]);
        cJSON_AddBoolToObject(o, "fits", mp[i].fits);
        cJSON_AddStringToObject(o, "mode", mp[i].fits ? mp[i].mode : "none");
        cJSON_AddStringToObject(o, "preview_precision", mp[i].preview_half ? "half" : "float");
        cJSON_AddNumberToObject(o, "session_peak_bytes", (double)mp[i].session_peak_bytes);
        cJSON_AddItemToArray(m, o);
    }
    return j;
}

void cli_session_print(FILE *f, const ssb4d_session_report *r)
{
    const ssb4d_plan *p = &r->plan;
    decisions_print(f, p);
    fprintf(f, "\n%-24s %17s %7s %16s %8s | %17s\n", "stage (GiB)", "peak / after", "cache", "footprint peak",
            "seconds", "planned peak/after");
    for (size_t i = 0; i < r->n_stages; i++) {
        const ssb4d_stage_record *s = &r->stages[i];
        const ssb4d_plan_stage *q = i < p->n_stages ? &p->stages[i] : NULL;
        fprintf(f, "%-24s %8.3f / %-6.3f %7.3f %16.3f %8.2f |", s->name, s->peak_bytes / GIB, s->after_bytes / GIB,
                s->cache_bytes / GIB, s->rss_peak_bytes / GIB, s->seconds);
        if (q)
            fprintf(f, " %8.3f / %-6.3f\n", q->peak_bytes / GIB, q->after_bytes / GIB);
        else
            fprintf(f, "\n");
    }
    double extra = ((double)r->session_peak_bytes - (double)r->encoded_bytes - (double)r->g_bytes) / GIB;
    fprintf(f, "%-24s %8.3f (footprint %.3f)        planned %.3f\n", "session peak", r->session_peak_bytes / GIB,
            r->session_rss_peak_bytes / GIB, p->session_peak_bytes / GIB);
    fprintf(f, "  = encoded %.3f + G %.3f %+.3f GiB (target: at most 1 GiB above the data and G)\n",
            r->encoded_bytes / GIB, r->g_bytes / GIB, extra);
    fprintf(f, "fit: C10 %.3f nm, C12 %.3f nm, phi12 %.2f deg (scan frame; loss %.6g, exact SSB loss over all %zu BF "
               "pixels); region refit: C10 %.3f nm, C12 %.3f nm, phi12 %.2f deg\n",
            r->C10_nm, r->C12_nm, r->phi12_deg, r->loss, r->n_bf, r->region_C10_nm, r->region_C12_nm,
            r->region_phi12_deg);
    if (r->phase_sha256[0])
        fprintf(f, "hashes: G %.16s, phase %.16s, trace %.16s%s\n", r->g_sha256, r->phase_sha256, r->trace_sha256,
                r->rebuilt_same_bits ? "; the preview after the rebuild equals the first (same bits)" : "");
}

cJSON *cli_session_json(const ssb4d_session_report *r)
{
    const ssb4d_plan *p = &r->plan;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "encoded_bytes", (double)r->encoded_bytes);
    cJSON_AddNumberToObject(j, "g_bytes", (double)r->g_bytes);
    cJSON_AddNumberToObject(j, "resident_bytes", (double)r->resident_bytes);
    cJSON_AddNumberToObject(j, "session_peak_bytes", (double)r->session_peak_bytes);
    cJSON_AddBoolToObject(j, "fits", p->fits);
    cJSON *a = cJSON_AddArrayToObject(j, "stages");
    for (size_t i = 0; i < r->n_stages; i++) {
        const ssb4d_stage_record *s = &r->stages[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddNumberToObject(o, "peak_bytes", (double)s->peak_bytes);
        cJSON_AddNumberToObject(o, "after_bytes", (double)s->after_bytes);
        cJSON_AddNumberToObject(o, "cache_bytes", (double)s->cache_bytes);
        cJSON_AddNumberToObject(o, "rss_peak_bytes", (double)s->rss_peak_bytes);
        cJSON_AddNumberToObject(o, "device_peak_bytes", (double)s->device_peak_bytes);
        cJSON_AddNumberToObject(o, "seconds", s->seconds);
        if (i < p->n_stages) {
            cJSON_AddNumberToObject(o, "planned_peak_bytes", (double)p->stages[i].peak_bytes);
            cJSON_AddNumberToObject(o, "planned_after_bytes", (double)p->stages[i].after_bytes);
        }
        cJSON_AddItemToArray(a, o);
    }
    cJSON_AddNumberToObject(j, "session_rss_peak_bytes", (double)r->session_rss_peak_bytes);
    cJSON_AddNumberToObject(j, "planned_session_peak_bytes", (double)p->session_peak_bytes);
    decisions_json(j, p);
    cJSON_AddNumberToObject(j, "n_bf", (double)r->n_bf);
    cJSON_AddNumberToObject(j, "upsample", r->upsample);
    cJSON *fit = cJSON_AddObjectToObject(j, "fit");
    cJSON_AddNumberToObject(fit, "C10_nm", r->C10_nm);
    cJSON_AddNumberToObject(fit, "C12_nm", r->C12_nm);
    cJSON_AddNumberToObject(fit, "phi12_deg", r->phi12_deg);
    cJSON_AddNumberToObject(fit, "loss", r->loss);
    cJSON *reg = cJSON_AddObjectToObject(j, "region");
    cJSON *rect = cJSON_AddArrayToObject(reg, "rect");
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToArray(rect, cJSON_CreateNumber((double)r->region_rect[i]));
    cJSON_AddNumberToObject(reg, "C10_nm", r->region_C10_nm);
    cJSON_AddNumberToObject(reg, "C12_nm", r->region_C12_nm);
    cJSON_AddNumberToObject(reg, "phi12_deg", r->region_phi12_deg);
    cJSON_AddNumberToObject(j, "release_loss", r->release_loss);
    cJSON *h = cJSON_AddObjectToObject(j, "hashes");
    cJSON_AddStringToObject(h, "G", r->g_sha256);
    cJSON_AddStringToObject(h, "phase", r->phase_sha256);
    cJSON_AddStringToObject(h, "trace", r->trace_sha256);
    cJSON_AddBoolToObject(j, "rebuilt_same_bits", r->rebuilt_same_bits);
    return j;
}
