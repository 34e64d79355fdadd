/* memory.h — what the device-memory plan asks of the device (memory.c; issue 31): its free
 * memory (cuFFT's work area: cuda_fft_work_bytes, cuda.h). Built only with -DSSB4D_CUDA. */
#ifndef SSB4D_CUDA_MEMORY_H
#define SSB4D_CUDA_MEMORY_H
#include <stddef.h>

/* The device's free and total memory now (cudaMemGetInfo); 0, or -1 with no device. */
int cuda_device_memory(size_t *free_bytes, size_t *total_bytes);

#endif
