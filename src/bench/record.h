/* record.h — benchmark records (SPEC §10): one JSON object per `ssb4d bench run`, and the
 * comparison of two records (`ssb4d bench compare OLD NEW`).
 *
 * A record holds the workload's identity and shape, the settings, per-stage wall times over the
 * repeats (median, min, max and every run) and memory (tracked peak / after / cache, process
 * footprint peak, device peak), the fit's endpoint and the SHA-256 of G, the final phase and the
 * fit's trial trace, plus the date, git revision and machine it ran on. */
#ifndef SSB4D_BENCH_RECORD_H
#define SSB4D_BENCH_RECORD_H
#include "ssb4d_advanced.h"

#include <stdio.h>

#define BENCH_SCHEMA "ssb4d-bench/1"
#define BENCH_MAX_STAGES 32
#define BENCH_MAX_RUNS 32

typedef struct {
    char name[48];
    size_t n_runs;
    double seconds[BENCH_MAX_RUNS]; /* wall time of each repeat */
    double median, min, max;        /* filled by bench_record_finish */
    /* memory of the last repeat, bytes */
    size_t peak_bytes, after_bytes, cache_bytes, rss_peak_bytes, device_peak_bytes;
} bench_stage;

typedef struct {
    /* workload */
    char workload[32];        /* "small", "medium", "reference" or a file name */
    char identity[112];       /* data identity (ssb4d_data_identity) */
    size_t shape[4];
    size_t n_bf, n_stored;
    size_t encoded_bytes, g_bytes;
    /* settings */
    int threads;
    size_t memory_budget_bytes;
    int repeat;
    int upsample;
    char preview_precision[8];   /* "float" or "half" */
    char mode[16];               /* "resident" or "streaming" */
    char backend[16];            /* where the heavy passes ran: "cpu" or "cuda" ("": not recorded, null) */
    size_t loss_tile;            /* 0 = the default */
    /* results */
    bench_stage stages[BENCH_MAX_STAGES];
    size_t n_stages;
    double C10_nm, C12_nm, phi12_deg, loss;
    size_t session_peak_bytes, session_rss_peak_bytes;
    char g_sha256[65], phase_sha256[65], trace_sha256[65];
    char g_blocks_sha256[65];   /* G per block of 64 BF pixels (also from a distributed run) */
} bench_record;

/* Median (the mean of the middle two for an even count), min and max of n values; NaN for n = 0.
 * Returns -1 when out of memory (the outputs are then NaN). */
int bench_stats(const double *runs, size_t n, double *median, double *min, double *max);
/* Median, min and max of every stage's runs. */
void bench_record_finish(bench_record *r);

/* The record as JSON (schema, date in UTC, git revision of the source tree, machine: CPU model,
 * cores, RAM, GPU and driver or null, OS). The caller owns the returned object. */
struct cJSON *bench_record_to_json(const bench_record *r);

/* Writes the record to path (atomically: path.tmp, then rename). */
ssb4d_status bench_record_write(const bench_record *r, const char *path, ssb4d_err *err);

/* Comparison thresholds (SPEC §10). */
typedef struct {
    double time_ratio;         /* a time fails when new > old * (1 + time_ratio); default 0.10 */
    double min_seconds;        /* stages whose medians are both below this are shown, not judged */
    double mem_ratio;          /* a memory metric fails when it grew by more than mem_ratio ... */
    double mem_abs_bytes;      /* ... and by more than this (default 0.25 GiB) */
    int allow_hash_change;     /* 1: a changed hash is reported but does not fail */
} bench_compare_opts;

void bench_compare_opts_default(bench_compare_opts *o);

/* Reads two record files, prints the table to out and returns 0 (nothing regressed), 1 (a time,
 * memory metric or hash regressed) or 2 (a file is missing, malformed or of another schema; the
 * message goes to err). */
int bench_compare_files(const char *old_path, const char *new_path, const bench_compare_opts *o,
                        FILE *out, ssb4d_err *err);
#endif
