/* public.c — benchmark records for clients (include/ssb4d.h, "Benchmark records"). */
#include "bench/record.h"

void ssb4d_bench_compare_opts_default(ssb4d_bench_compare_opts *o) { bench_compare_opts_default(o); }

int ssb4d_bench_stats(const double *runs, size_t n, double *median, double *min, double *max)
{
    return bench_stats(runs, n, median, min, max);
}

void ssb4d_bench_record_finish(ssb4d_bench_record *r) { bench_record_finish(r); }

ssb4d_status ssb4d_bench_record_write(const ssb4d_bench_record *r, const char *path, ssb4d_err *err)
{
    return bench_record_write(r, path, err);
}

int ssb4d_bench_compare_files(const char *old_path, const char *new_path, const ssb4d_bench_compare_opts *o,
                              FILE *out, ssb4d_err *err)
{
    return bench_compare_files(old_path, new_path, o, out, err);
}
