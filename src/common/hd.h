/* hd.h — the qualifiers of code written once for the host and a GPU (SPEC §11, docs/gpu.md).
 *
 * SSB_HD marks a function both compilers build: the host's (gcc, C17) and a GPU backend's (nvcc
 * today; hipcc would define __HIPCC__ and take the same path). SSB_DEVICE_PASS is 1 only in a
 * GPU compiler's device pass (nvcc's __CUDA_ARCH__, hipcc's __HIP_DEVICE_COMPILE__): where the two
 * sides round differently and each side's expression is kept ("per side", optics/physics.h), this
 * is what selects it. No backend's name appears outside this header and the backend's own folder. */
#ifndef SSB4D_COMMON_HD_H
#define SSB4D_COMMON_HD_H

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SSB_HD __host__ __device__
#else
#define SSB_HD
#endif

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define SSB_DEVICE_PASS 1
#else
#define SSB_DEVICE_PASS 0
#endif

#endif
