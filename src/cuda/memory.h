/* memory.h — what the device-memory plan asks of the device (memory.c; issue 31): its free
 * memory, and cuFFT's work area for the backend's plans. Built only with -DSSB4D_CUDA. */
#ifndef SSB4D_CUDA_MEMORY_H
#define SSB4D_CUDA_MEMORY_H
#include <stddef.h>

/* The device's free and total memory now (cudaMemGetInfo); 0, or -1 with no device. */
int cuda_device_memory(size_t *free_bytes, size_t *total_bytes);

/* cuFFT's work area in bytes for device.c's plans of an nyf x nxf grid (plan/device_model.h's
 * dev_fft_work_fn): c2c 0, the batched C2R inverse (n = {nyf, nxf}, idist nyf (nxf/2+1), odist
 * nyf nxf, `batch` transforms); c2c 1, the object's C2C inverse (batch 1). 0 with no device. */
size_t cuda_fft_work_bytes(int nyf, int nxf, int batch, int c2c);
#endif
