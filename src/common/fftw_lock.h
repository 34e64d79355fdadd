/* fftw_lock.h — the one lock around FFTW's planner. FFTW executes plans from any thread, but
 * making and destroying plans touches the planner's shared tables, which are not thread-safe;
 * every fftwf_plan_* and fftwf_destroy_plan call in the library is made under this lock. */
#ifndef SSB4D_COMMON_FFTW_LOCK_H
#define SSB4D_COMMON_FFTW_LOCK_H
void ssb_fftw_lock(void);
void ssb_fftw_unlock(void);
#endif
