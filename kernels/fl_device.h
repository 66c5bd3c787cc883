/* fl_device.h - device memory and synchronisation helpers for the CUDA kernels.
 *
 * The fl_*_cuda functions of fl_optim.h take device pointers; these helpers
 * let a C program (a test, a benchmark, another language through its FFI)
 * allocate, fill, read back and wait for that memory without including any
 * CUDA header.  Streams are passed as void* (a cudaStream_t), NULL meaning
 * the default stream.  In a tree built without CUDA every function returns
 * FL_ENOTSUP and fl_cuda_device_count returns 0.  CUDA errors come back as
 * FL_ECUDA, logged once where they happen. */
#ifndef FL_DEVICE_H
#define FL_DEVICE_H

#include <stddef.h>

#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices: 0 without a GPU or in a CPU-only build
 * (the same declaration as in fl_optim.h). */
int fl_cuda_device_count(void);

/* Make device `dev` (0-based) current for the calling thread. */
fl_status fl_cuda_set_device(int dev);

/* Allocate `bytes` (> 0) of device memory on the current device into *out.
 * The caller owns it and frees it with fl_cuda_free.  FL_EINVAL for a NULL
 * out or bytes == 0, FL_ENOMEM when the device is out of memory. */
fl_status fl_cuda_malloc(void **out, size_t bytes);
/* Free memory from fl_cuda_malloc; NULL is a no-op. */
fl_status fl_cuda_free(void *dev_ptr);

/* Copy `bytes` host -> device, device -> host, device -> device.  They are
 * ordered after all work already queued on `stream` and return when the
 * copy is complete (the host buffer may be reused at once).  bytes == 0 is
 * a no-op; NULL pointers with bytes > 0 give FL_EINVAL. */
fl_status fl_cuda_copy_to_device(void *dev_dst, const void *host_src, size_t bytes, void *stream);
fl_status fl_cuda_copy_to_host(void *host_dst, const void *dev_src, size_t bytes, void *stream);
fl_status fl_cuda_copy_device(void *dev_dst, const void *dev_src, size_t bytes, void *stream);
/* Queue a device -> device copy on `stream` and return at once. */
fl_status fl_cuda_copy_device_async(void *dev_dst, const void *dev_src, size_t bytes,
                                    void *stream);

/* Set `bytes` of device memory to the byte value `value`, in stream order
 * (asynchronous). */
fl_status fl_cuda_memset(void *dev_ptr, int value, size_t bytes, void *stream);

/* Create a non-blocking stream into *out (the caller destroys it); destroy
 * one; wait until all work queued on a stream (NULL: the default stream)
 * is done; wait until all work on the current device is done.  Destroying
 * NULL is a no-op. */
fl_status fl_cuda_stream_create(void **out);
fl_status fl_cuda_stream_destroy(void *stream);
fl_status fl_cuda_stream_synchronize(void *stream);
fl_status fl_cuda_synchronize(void);

#ifdef __cplusplus
}
#endif
#endif
