/* nocuda.c - the CUDA entry points of a CPU-only build (--without-cuda).
 *
 * The public headers declare the same functions in every tree so that
 * callers link either way; here each says FL_ENOTSUP (logged once per call,
 * naming the function) and fl_cuda_device_count says there is no device. */
#include <config.h>

#include "fl_device.h"
#include "fl_log.h"
#include "fl_optim.h"

#define FL_NO_CUDA() FL_ERR(FL_ENOTSUP, "%s: this build has no CUDA (configured --without-cuda)", __func__)

int fl_cuda_device_count(void) { return 0; }

fl_status fl_optim_step_cuda(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt, float lr,
                             int64_t step, void *stream) {
  (void)hp, (void)t, (void)nt, (void)lr, (void)step, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_gm_accumulate_cuda(float *const *acc, const float *const *g, const size_t *n,
                                size_t nt, void *stream) {
  (void)acc, (void)g, (void)n, (void)nt, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_gm_finalize_cuda(float *const *acc, const size_t *n, size_t nt, int k_steps, int avg,
                              void *stream) {
  (void)acc, (void)n, (void)nt, (void)k_steps, (void)avg, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_amp_check_finite_and_unscale_cuda(float *const *t, const size_t *n, size_t nt,
                                               float scale, int *found_inf, void *stream) {
  (void)t, (void)n, (void)nt, (void)scale, (void)found_inf, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cast_f32_to_f16_cuda(const float *src, uint16_t *dst, size_t n, void *stream) {
  (void)src, (void)dst, (void)n, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cast_f16_to_f32_cuda(const uint16_t *src, float *dst, size_t n, void *stream) {
  (void)src, (void)dst, (void)n, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cast_f32_to_bf16_cuda(const float *src, uint16_t *dst, size_t n, void *stream) {
  (void)src, (void)dst, (void)n, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cast_bf16_to_f32_cuda(const uint16_t *src, float *dst, size_t n, void *stream) {
  (void)src, (void)dst, (void)n, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cuda_set_device(int dev) {
  (void)dev;
  return FL_NO_CUDA();
}

fl_status fl_cuda_malloc(void **out, size_t bytes) {
  (void)out, (void)bytes;
  return FL_NO_CUDA();
}

fl_status fl_cuda_free(void *dev_ptr) {
  (void)dev_ptr;
  return FL_NO_CUDA();
}

fl_status fl_cuda_copy_to_device(void *dev_dst, const void *host_src, size_t bytes, void *stream) {
  (void)dev_dst, (void)host_src, (void)bytes, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cuda_copy_to_host(void *host_dst, const void *dev_src, size_t bytes, void *stream) {
  (void)host_dst, (void)dev_src, (void)bytes, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cuda_copy_device(void *dev_dst, const void *dev_src, size_t bytes, void *stream) {
  (void)dev_dst, (void)dev_src, (void)bytes, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cuda_copy_device_async(void *dev_dst, const void *dev_src, size_t bytes,
                                    void *stream) {
  (void)dev_dst, (void)dev_src, (void)bytes, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cuda_memset(void *dev_ptr, int value, size_t bytes, void *stream) {
  (void)dev_ptr, (void)value, (void)bytes, (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cuda_stream_create(void **out) {
  (void)out;
  return FL_NO_CUDA();
}

fl_status fl_cuda_stream_destroy(void *stream) {
  (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cuda_stream_synchronize(void *stream) {
  (void)stream;
  return FL_NO_CUDA();
}

fl_status fl_cuda_synchronize(void) { return FL_NO_CUDA(); }
