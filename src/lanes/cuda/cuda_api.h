/* cuda_api.h - the CUDA driver API and cuBLAS as function pointers, loaded at run time (dlopen), so the one
 * weft library runs with or without NVIDIA's libraries. The headers (cuda.h, cublas_v2.h) give the types
 * and constants only; each pointer has the type of the function the header declares, and is looked up under
 * the name the header's macros map it to (cuMemAlloc -> cuMemAlloc_v2), which is exactly the symbol a
 * program linked against the header would call. */
#ifndef WEFT_CUDA_API_H
#define WEFT_CUDA_API_H

#include <cublas_v2.h>
#include <cuda.h>

/* Driver entry points the lane uses. */
#define WEFT_CU_DRIVER_FUNCS(X)                                                                                    \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)   \
  X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)                \
  X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)             \
  X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemHostAlloc) X(cuMemFreeHost)                 \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemsetD32Async) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuStreamCreate)                    \
  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamWaitEvent) X(cuStreamBeginCapture) X(cuStreamEndCapture)   \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) X(cuEventQuery) X(cuGraphInstantiate) \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuGraphCreate) X(cuGraphAddKernelNode)                   \
  X(cuGraphExecKernelNodeSetParams) X(cuEventElapsedTime) X(cuGetErrorName) X(cuGetErrorString)           \
  X(cuMemHostRegister) X(cuMemHostUnregister)

/* cuBLAS entry points (cuBLASLt comes in underneath, as libcublas's own dependency). */
#define WEFT_CUBLAS_FUNCS(X)                                                                                       \
  X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetWorkspace) X(cublasSetMathMode)                 \
  X(cublasGetProperty) X(cublasSgemmStridedBatched) X(cublasGemmStridedBatchedEx) X(cublasGetStatusName)

#define WEFT_CU_DECLARE(fn) __typeof__(fn) *fn;

typedef struct weft_cuda_api {
  void *lib;
  WEFT_CU_DRIVER_FUNCS(WEFT_CU_DECLARE)
} weft_cuda_api;

typedef struct weft_cublas_api {
  void *lib;
  char path[320]; /* what was opened, for `weft devices` */
  WEFT_CUBLAS_FUNCS(WEFT_CU_DECLARE)
} weft_cublas_api;

/* Loads the driver once per process. NULL when it cannot be used; then *why says why (static text or a
 * buffer owned by the loader). */
const weft_cuda_api *weft_cuda_api_load(const char **why);
/* Loads cuBLAS once per process (libcublas.so.13, .12, unversioned, then CUDA's usual folders). */
const weft_cublas_api *weft_cublas_api_load(const char **why);

#endif /* WEFT_CUDA_API_H */
