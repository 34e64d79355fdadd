/* mem_device.h — the stage record's device figure (mem.c), which the memory context cannot see
 * itself: the session handle reads a GPU backend's device peak and hands it in. */
#ifndef SSB4D_COMMON_MEM_DEVICE_H
#define SSB4D_COMMON_MEM_DEVICE_H
#include "ssb4d_advanced.h"

/* The running stage's device_peak_bytes becomes at least `bytes` (nothing outside a stage). */
void ssb_mem_stage_device_peak(ssb4d_mem *m, size_t bytes);
#endif
