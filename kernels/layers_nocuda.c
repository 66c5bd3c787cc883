/* layers_nocuda.c - the CUDA twins of fl_layers.h in a CPU-only build.
 *
 * A tree configured --without-cuda still exports every symbol the header
 * declares, so a program linking libflotilla builds either way; each of
 * these says FL_ENOTSUP (and fl_cuda_device_count() says 0). */
#include <config.h>

#include "fl_layers.h"

fl_status fl_act_forward_cuda(fl_act act, const float *x, float *y, size_t n, void *stream) {
  (void)act, (void)x, (void)y, (void)n, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_act_backward_cuda(fl_act act, const float *y, const float *dy, float *dx, size_t n,
                               void *stream) {
  (void)act, (void)y, (void)dy, (void)dx, (void)n, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_bias_forward_cuda(float *y, const float *b, size_t batch, size_t channels,
                               size_t inner, void *stream) {
  (void)y, (void)b, (void)batch, (void)channels, (void)inner, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_bias_backward_cuda(const float *dy, float *db, size_t batch, size_t channels,
                                size_t inner, void *stream) {
  (void)dy, (void)db, (void)batch, (void)channels, (void)inner, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_linear_forward_cuda(const float *x, const float *w, const float *b, float *y,
                                 size_t batch, size_t in, size_t out, fl_act act, fl_math math,
                                 void *stream) {
  (void)x, (void)w, (void)b, (void)y, (void)batch, (void)in, (void)out, (void)act, (void)math,
      (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_linear_backward_cuda(const float *x, const float *w, const float *y, float *dy,
                                  float *dx, float *dw, float *db, size_t batch, size_t in,
                                  size_t out, fl_act act, fl_math math, void *stream) {
  (void)x, (void)w, (void)y, (void)dy, (void)dx, (void)dw, (void)db, (void)batch, (void)in,
      (void)out, (void)act, (void)math, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_softmax_xent_cuda(const float *logits, const int32_t *labels, size_t batch,
                               size_t classes, float grad_scale, float *dlogits,
                               double *loss_sum, size_t *correct1, size_t *correct5,
                               void *stream) {
  (void)logits, (void)labels, (void)batch, (void)classes, (void)grad_scale, (void)dlogits,
      (void)loss_sum, (void)correct1, (void)correct5, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_conv2d_workspace_bytes_cuda(const fl_conv2d_desc *d, size_t *bytes) {
  (void)d, (void)bytes;
  return FL_ENOTSUP;
}

fl_status fl_conv2d_forward_cuda(const fl_conv2d_desc *d, const float *x, const float *w,
                                 const float *b, float *y, void *ws, fl_act act, fl_math math,
                                 void *stream) {
  (void)d, (void)x, (void)w, (void)b, (void)y, (void)ws, (void)act, (void)math, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_conv2d_backward_cuda(const fl_conv2d_desc *d, const float *x, const float *w,
                                  const float *y, float *dy, float *dx, float *dw, float *db,
                                  void *ws, fl_act act, fl_math math, void *stream) {
  (void)d, (void)x, (void)w, (void)y, (void)dy, (void)dx, (void)dw, (void)db, (void)ws,
      (void)act, (void)math, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_maxpool2d_forward_cuda(const fl_pool2d_desc *d, const float *x, float *y,
                                    int32_t *argmax, void *stream) {
  (void)d, (void)x, (void)y, (void)argmax, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_maxpool2d_backward_cuda(const fl_pool2d_desc *d, const float *dy,
                                     const int32_t *argmax, float *dx, void *stream) {
  (void)d, (void)dy, (void)argmax, (void)dx, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_batchnorm_forward_train_cuda(const fl_norm_desc *d, const float *x, float *y,
                                          const float *gamma, const float *beta,
                                          float *running_mean, float *running_var,
                                          float *save_mean, float *save_invstd, fl_act act,
                                          void *stream) {
  (void)d, (void)x, (void)y, (void)gamma, (void)beta, (void)running_mean, (void)running_var,
      (void)save_mean, (void)save_invstd, (void)act, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_batchnorm_forward_eval_cuda(const fl_norm_desc *d, const float *x, float *y,
                                         const float *gamma, const float *beta,
                                         const float *running_mean, const float *running_var,
                                         fl_act act, void *stream) {
  (void)d, (void)x, (void)y, (void)gamma, (void)beta, (void)running_mean, (void)running_var,
      (void)act, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_batchnorm_backward_cuda(const fl_norm_desc *d, const float *x, const float *y,
                                     float *dy, const float *gamma, const float *save_mean,
                                     const float *save_invstd, float *dx, float *dgamma,
                                     float *dbeta, fl_act act, void *stream) {
  (void)d, (void)x, (void)y, (void)dy, (void)gamma, (void)save_mean, (void)save_invstd, (void)dx,
      (void)dgamma, (void)dbeta, (void)act, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_batchnorm_stats_sum_cuda(const fl_norm_desc *d, const float *x, double *sum,
                                      void *stream) {
  (void)d, (void)x, (void)sum, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_batchnorm_stats_sqdev_cuda(const fl_norm_desc *d, const float *x, const double *sum,
                                        double count, double *sqdev, void *stream) {
  (void)d, (void)x, (void)sum, (void)count, (void)sqdev, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_batchnorm_forward_apply_cuda(const fl_norm_desc *d, const float *x, float *y,
                                          const float *gamma, const float *beta,
                                          const double *sum, const double *sqdev, double count,
                                          float *running_mean, float *running_var,
                                          float *save_mean, float *save_invstd, fl_act act,
                                          void *stream) {
  (void)d, (void)x, (void)y, (void)gamma, (void)beta, (void)sum, (void)sqdev, (void)count,
      (void)running_mean, (void)running_var, (void)save_mean, (void)save_invstd, (void)act,
      (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_batchnorm_backward_reduce_cuda(const fl_norm_desc *d, const float *x,
                                            const float *y, float *dy, const float *save_mean,
                                            const float *save_invstd, double *sums,
                                            float *dgamma, float *dbeta, fl_act act,
                                            void *stream) {
  (void)d, (void)x, (void)y, (void)dy, (void)save_mean, (void)save_invstd, (void)sums,
      (void)dgamma, (void)dbeta, (void)act, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_batchnorm_backward_apply_cuda(const fl_norm_desc *d, const float *x,
                                           const float *dz, const float *gamma,
                                           const float *save_mean, const float *save_invstd,
                                           const double *sums, double count, float *dx,
                                           void *stream) {
  (void)d, (void)x, (void)dz, (void)gamma, (void)save_mean, (void)save_invstd, (void)sums,
      (void)count, (void)dx, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_groupnorm_forward_cuda(const fl_norm_desc *d, const float *x, float *y,
                                    const float *gamma, const float *beta, float *save_mean,
                                    float *save_invstd, fl_act act, void *stream) {
  (void)d, (void)x, (void)y, (void)gamma, (void)beta, (void)save_mean, (void)save_invstd,
      (void)act, (void)stream;
  return FL_ENOTSUP;
}

fl_status fl_groupnorm_backward_cuda(const fl_norm_desc *d, const float *x, const float *y,
                                     float *dy, const float *gamma, const float *save_mean,
                                     const float *save_invstd, float *dx, float *dgamma,
                                     float *dbeta, fl_act act, void *stream) {
  (void)d, (void)x, (void)y, (void)dy, (void)gamma, (void)save_mean, (void)save_invstd, (void)dx,
      (void)dgamma, (void)dbeta, (void)act, (void)stream;
  return FL_ENOTSUP;
}
