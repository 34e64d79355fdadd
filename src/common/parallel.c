/* parallel.c — resolving thread counts. */
#include "common/parallel.h"

#include <unistd.h>

int ssb_threads_resolve(int requested)
{
    if (requested > 0)
        return requested > 1024 ? 1024 : requested;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
