/* parallel.h — thread counts. Threads are always passed explicitly (num_threads clauses). */
#ifndef SSB4D_COMMON_PARALLEL_H
#define SSB4D_COMMON_PARALLEL_H
/* requested <= 0 → number of online cores; otherwise requested (capped at 1024). */
int ssb_threads_resolve(int requested);
#endif
