/* fftw_lock.c — the FFTW planner lock (fftw_lock.h says why it exists).
 *
 * The project keeps no global mutable state; this mutex is the one exception, because the state
 * it guards (FFTW's planner) is itself process-wide: a lock per object would not stop two
 * sessions in one process from planning at once.
 * FFTW's own fftwf_make_planner_thread_safe() (3.3.5+) would do the same, but it lives in
 * libfftw3f_threads (a second library, not in pkg-config's fftw3f) and must be called once
 * before any plan is made, which needs an initialisation call this library does not have. */
#include "common/fftw_lock.h"

#include <pthread.h>

static pthread_mutex_t planner_lock = PTHREAD_MUTEX_INITIALIZER;

void ssb_fftw_lock(void) { pthread_mutex_lock(&planner_lock); }
void ssb_fftw_unlock(void) { pthread_mutex_unlock(&planner_lock); }
