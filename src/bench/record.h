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

/* The record's structs are public (include/ssb4d.h, "Benchmark records"): `ssb4d bench`
 * fills them. */
#define BENCH_SCHEMA SSB4D_BENCH_SCHEMA
#define BENCH_MAX_STAGES SSB4D_BENCH_MAX_STAGES
#define BENCH_MAX_RUNS SSB4D_BENCH_MAX_RUNS
typedef ssb4d_bench_stage bench_stage;
typedef ssb4d_bench_record bench_record;
typedef ssb4d_bench_compare_opts bench_compare_opts;

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

void bench_compare_opts_default(bench_compare_opts *o);

/* Reads two record files, prints the table to out and returns 0 (nothing regressed), 1 (a time,
 * memory metric or hash regressed) or 2 (a file is missing, malformed or of another schema; the
 * message goes to err). */
int bench_compare_files(const char *old_path, const char *new_path, const bench_compare_opts *o,
                        FILE *out, ssb4d_err *err);
#endif
