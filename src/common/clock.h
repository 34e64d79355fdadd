/* clock.h — seconds on the monotonic clock, for timings and progress (never for results). */
#ifndef SSB4D_COMMON_CLOCK_H
#define SSB4D_COMMON_CLOCK_H
#include <time.h>

static inline double ssb_clock_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#endif
