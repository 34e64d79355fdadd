/* memory.c — the device's free memory, for the device-memory plan (memory.h). cuFFT's work sizes
 * come from device.c (cuda_fft_work_bytes, cuda.h), beside the plans whose areas it owns. */
#include "cuda/memory.h"

#include "cuda/cuda.h"

#include <cuda_runtime_api.h>

int cuda_device_memory(size_t *free_bytes, size_t *total_bytes)
{
    size_t fr = 0, tot = 0;
    if (!cuda_available() || cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        return -1;
    if (free_bytes)
        *free_bytes = fr;
    if (total_bytes)
        *total_bytes = tot;
    return 0;
}
