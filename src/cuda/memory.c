/* memory.c — the device's free memory and cuFFT's work sizes, for the device-memory plan
 * (memory.h). cuda_fft_work_bytes here is weak: the definition beside the plans in device.c,
 * where the backend sizes the work areas it owns (cufftSetWorkArea), takes its place when it is
 * there; this one asks cuFFT for the same plan shapes. */
#include "cuda/memory.h"

#include "cuda/cuda.h"

#include <cuda_runtime_api.h>
#include <cufft.h>

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

__attribute__((weak)) size_t cuda_fft_work_bytes(int nyf, int nxf, int batch, int c2c)
{
    if (!cuda_available())
        return 0;
    cufftHandle h;
    if (cufftCreate(&h) != CUFFT_SUCCESS)
        return 0;
    int n[2] = {nyf, nxf};
    size_t ws = 0;
    cufftResult r = cufftSetAutoAllocation(h, 0);
    if (r == CUFFT_SUCCESS)
        r = c2c ? cufftMakePlanMany(h, 2, n, NULL, 1, nyf * nxf, NULL, 1, nyf * nxf, CUFFT_C2C, 1, &ws)
                : cufftMakePlanMany(h, 2, n, NULL, 1, nyf * (nxf / 2 + 1), NULL, 1, nyf * nxf, CUFFT_C2R, batch, &ws);
    cufftDestroy(h);
    return r == CUFFT_SUCCESS ? ws : 0;
}
