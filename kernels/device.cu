/* device.cu - CUDA device discovery and the memory helpers of fl_device.h.
 *
 * Thin wrappers over the CUDA runtime so that C callers (tests, benchmarks,
 * FFI users) can drive the fl_*_cuda kernels without CUDA headers; each
 * converts a CUDA error to FL_ECUDA at this boundary and logs it once. */
#include <config.h>

#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "fl_device.h"
#include "fl_optim.h"

extern "C" int fl_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

extern "C" fl_status fl_cuda_set_device(int dev) {
  if (dev < 0) return FL_ERR(FL_EINVAL, "fl_cuda_set_device: device %d < 0", dev);
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess)
    return FL_ERR(FL_ECUDA, "fl_cuda_set_device: device %d: %s", dev, cudaGetErrorString(e));
  return FL_OK;
}

extern "C" fl_status fl_cuda_malloc(void **out, size_t bytes) {
  if (out == NULL || bytes == 0)
    return FL_ERR(FL_EINVAL, "fl_cuda_malloc: %s", out == NULL ? "NULL out" : "0 bytes");
  *out = NULL;
  cudaError_t e = cudaMalloc(out, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return FL_ERR(FL_ENOMEM, "fl_cuda_malloc: %zu bytes: device out of memory", bytes);
  }
  if (e != cudaSuccess)
    return FL_ERR(FL_ECUDA, "fl_cuda_malloc: %zu bytes: %s", bytes, cudaGetErrorString(e));
  return FL_OK;
}

extern "C" fl_status fl_cuda_free(void *dev_ptr) {
  if (dev_ptr == NULL) return FL_OK;
  FL_CUDA_TRY(cudaFree(dev_ptr), "cudaFree");
  return FL_OK;
}

/* One stream-ordered copy of `bytes`, waited for unless async. */
static fl_status copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, void *stream,
                      bool async, const char *fn) {
  if (bytes == 0) return FL_OK;
  if (dst == NULL || src == NULL)
    return FL_ERR(FL_EINVAL, "%s: NULL %s with %zu bytes", fn, dst == NULL ? "dst" : "src", bytes);
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, fl_stream(stream));
  if (e == cudaSuccess && !async) e = cudaStreamSynchronize(fl_stream(stream));
  if (e != cudaSuccess)
    return FL_ERR(FL_ECUDA, "%s: %zu bytes: %s", fn, bytes, cudaGetErrorString(e));
  return FL_OK;
}

extern "C" fl_status fl_cuda_copy_to_device(void *dev_dst, const void *host_src, size_t bytes,
                                            void *stream) {
  return copy(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, stream, false, __func__);
}

extern "C" fl_status fl_cuda_copy_to_host(void *host_dst, const void *dev_src, size_t bytes,
                                          void *stream) {
  return copy(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, stream, false, __func__);
}

extern "C" fl_status fl_cuda_copy_device(void *dev_dst, const void *dev_src, size_t bytes,
                                         void *stream) {
  return copy(dev_dst, dev_src, bytes, cudaMemcpyDeviceToDevice, stream, false, __func__);
}

extern "C" fl_status fl_cuda_copy_device_async(void *dev_dst, const void *dev_src, size_t bytes,
                                               void *stream) {
  return copy(dev_dst, dev_src, bytes, cudaMemcpyDeviceToDevice, stream, true, __func__);
}

extern "C" fl_status fl_cuda_memset(void *dev_ptr, int value, size_t bytes, void *stream) {
  if (bytes == 0) return FL_OK;
  if (dev_ptr == NULL) return FL_ERR(FL_EINVAL, "fl_cuda_memset: NULL pointer, %zu bytes", bytes);
  FL_CUDA_TRY(cudaMemsetAsync(dev_ptr, value, bytes, fl_stream(stream)), "cudaMemsetAsync");
  return FL_OK;
}

extern "C" fl_status fl_cuda_stream_create(void **out) {
  if (out == NULL) return FL_ERR(FL_EINVAL, "fl_cuda_stream_create: NULL out");
  cudaStream_t s = NULL;
  FL_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  *out = (void *)s;
  return FL_OK;
}

extern "C" fl_status fl_cuda_stream_destroy(void *stream) {
  if (stream == NULL) return FL_OK;
  FL_CUDA_TRY(cudaStreamDestroy(fl_stream(stream)), "cudaStreamDestroy");
  return FL_OK;
}

extern "C" fl_status fl_cuda_stream_synchronize(void *stream) {
  FL_CUDA_TRY(cudaStreamSynchronize(fl_stream(stream)), "cudaStreamSynchronize");
  return FL_OK;
}

extern "C" fl_status fl_cuda_synchronize(void) {
  FL_CUDA_TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return FL_OK;
}
