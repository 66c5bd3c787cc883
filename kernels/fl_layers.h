/* fl_layers.h - Flotilla's layer kernels: the forward and backward ops the
 * built-in models (and plugins) are made of.
 *
 * One header for the CPU and the CUDA builds, like fl_optim.h.  The CPU ops
 * are fp32, tensors are dense row-major, images NCHW, weights laid out as
 * PyTorch lays them out (linear [out, in], conv [out_c, in_c, k_h, k_w]), so
 * a tensor exported from one reads the same in the other.  Every fl_*_cuda
 * function takes device pointers and a cudaStream_t passed as void* (NULL =
 * default stream), computes what its CPU twin computes, and queues its work
 * without waiting unless its comment says so.  The CUDA twins live in
 * kernels/layers.cu; in a tree built without CUDA they exist and return
 * FL_ENOTSUP (kernels/layers_nocuda.c).
 *
 * Conventions shared by every function:
 *  - The caller owns every buffer.  No function allocates, keeps a pointer
 *    after it returns, logs, or changes BLAS thread counts.
 *  - Arguments are validated before anything is written: a NULL required
 *    pointer, a zero size, or an inconsistent geometry gives FL_EINVAL.
 *  - Outputs are OVERWRITTEN (gradients too); the caller accumulates when it
 *    wants sums (gradient merge does, in fl_optim.h).
 *  - Input and output buffers must not overlap unless a comment allows it.
 *  - Results are deterministic: same inputs and thread count, same bits.
 *  - Activations can be fused into the op that produces them (fl_act).  A
 *    fused backward takes the op's activated OUTPUT y and the gradient dy
 *    with respect to it, and uses dy as scratch: on return dy holds the
 *    gradient with respect to the pre-activation.  With FL_ACT_NONE, y is
 *    not read (may be NULL) and dy is left untouched. */
#ifndef FL_LAYERS_H
#define FL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element-wise activation fused after an op.  ReLU's derivative at 0 is 0;
 * tanh's derivative is taken from the output as 1 - y*y. */
typedef enum fl_act {
  FL_ACT_NONE = 0,
  FL_ACT_RELU = 1,
  FL_ACT_TANH = 2
} fl_act;

/* GEMM precision of the CUDA twins of linear and conv (AMP).  FP16 and
 * BF16 round the GEMM inputs to that type and accumulate in fp32 (tensor
 * cores); storage, weights and everything outside the GEMM stay fp32, so the
 * fp32 master weights are the parameters themselves.  The CPU always
 * computes in fp32. */
typedef enum fl_math {
  FL_MATH_FP32 = 0,
  FL_MATH_FP16 = 1,
  FL_MATH_BF16 = 2
} fl_math;

/* "none", "relu", "tanh" and back; fl_act_parse gives FL_EINVAL for any
 * other name (NULL or "" parse as FL_ACT_NONE). */
const char *fl_act_name(fl_act act);
fl_status fl_act_parse(const char *name, fl_act *out);

/* ------------------------------------------------------------ element-wise */

/* y[i] = act(x[i]) for i < n.  x == y (in place) is allowed. */
fl_status fl_act_forward(fl_act act, const float *x, float *y, size_t n);
fl_status fl_act_forward_cuda(fl_act act, const float *x, float *y, size_t n, void *stream);

/* dx[i] = dy[i] * act'(.) computed from the forward OUTPUT y (ReLU: y > 0;
 * tanh: 1 - y*y).  dx == dy (in place) is allowed.  FL_ACT_NONE copies. */
fl_status fl_act_backward(fl_act act, const float *y, const float *dy, float *dx, size_t n);
fl_status fl_act_backward_cuda(fl_act act, const float *y, const float *dy, float *dx, size_t n,
                               void *stream);

/* Bias over a [batch, channels, inner] tensor (inner = H*W for images, 1
 * for a linear layer's output): y[n,c,s] += b[c]. */
fl_status fl_bias_forward(float *y, const float *b, size_t batch, size_t channels, size_t inner);
fl_status fl_bias_forward_cuda(float *y, const float *b, size_t batch, size_t channels,
                               size_t inner, void *stream);

/* db[c] = sum over n, s of dy[n,c,s] (summed in a fixed order). */
fl_status fl_bias_backward(const float *dy, float *db, size_t batch, size_t channels,
                           size_t inner);
fl_status fl_bias_backward_cuda(const float *dy, float *db, size_t batch, size_t channels,
                                size_t inner, void *stream);

/* ------------------------------------------------------------------ linear */

/* y[batch, out] = act(x[batch, in] . w[out, in]^T + b[out]); b may be NULL
 * (no bias).  One GEMM (cblas_sgemm, cuBLAS on the GPU) and one fused pass
 * for bias and activation. */
fl_status fl_linear_forward(const float *x, const float *w, const float *b, float *y,
                            size_t batch, size_t in, size_t out, fl_act act);
fl_status fl_linear_forward_cuda(const float *x, const float *w, const float *b, float *y,
                                 size_t batch, size_t in, size_t out, fl_act act, fl_math math,
                                 void *stream);

/* Backward of fl_linear_forward.  y is its output (read only when act is
 * not NONE), dy[batch, out] the gradient w.r.t. y (scratch, see above).
 * Writes dw[out, in] = dz^T . x, db[out] = column sums of dz and
 * dx[batch, in] = dz . w, where dz is the pre-activation gradient.  Each of
 * dx, dw, db may be NULL to skip it (dx of a first layer, a frozen weight). */
fl_status fl_linear_backward(const float *x, const float *w, const float *y, float *dy,
                             float *dx, float *dw, float *db, size_t batch, size_t in,
                             size_t out, fl_act act);
fl_status fl_linear_backward_cuda(const float *x, const float *w, const float *y, float *dy,
                                  float *dx, float *dw, float *db, size_t batch, size_t in,
                                  size_t out, fl_act act, fl_math math, void *stream);

/* ------------------------------------------------------------- losses */

/* The losses a model's output can end in (the job's model.loss). */
typedef enum fl_loss_kind {
  FL_LOSS_SOFTMAX_XENT = 0, /* logits [B, C], class ids */
  FL_LOSS_BCE_LOGITS = 1,   /* logits [B, K], float targets in [0, 1] */
  FL_LOSS_MSE = 2,          /* outputs [B, K], float targets */
  FL_LOSS_COUNT
} fl_loss_kind;
/* Their names, indexed by fl_loss_kind, NULL-terminated: "softmax_cross_
 * entropy" (the presets' loss), "bce_with_logits", "mse". */
extern const char *const fl_loss_names[];

/* ------------------------------------------------- softmax cross-entropy */

/* Softmax cross-entropy over logits[batch, classes] with integer labels.
 * Numerically stable (max subtracted; the loss is computed in double).
 *  - *loss_sum = sum over samples of -log softmax(logits)[label]
 *    (the mean is loss_sum / batch);
 *  - *correct1 / *correct5 = samples whose label is top-1 / among the top 5
 *    (rank of the label = number of logits greater than its logit plus
 *    number of equal ones at a lower index; top-k means rank < k);
 *  - dlogits[batch, classes] = grad_scale * (softmax - onehot(label)) / batch,
 *    the gradient of grad_scale * mean loss (grad_scale is the AMP loss
 *    scale, 1 without AMP).  dlogits may alias logits (in place).
 * Every output may be NULL to skip it.  A label outside [0, classes) gives
 * FL_EINVAL before anything is written.  The CUDA twin takes device logits,
 * labels and dlogits and HOST loss_sum/correct1/correct5; when any of those
 * is non-NULL it waits for the stream before returning. */
fl_status fl_softmax_xent(const float *logits, const int32_t *labels, size_t batch,
                          size_t classes, float grad_scale, float *dlogits, double *loss_sum,
                          size_t *correct1, size_t *correct5);
fl_status fl_softmax_xent_cuda(const float *logits, const int32_t *labels, size_t batch,
                               size_t classes, float grad_scale, float *dlogits,
                               double *loss_sum, size_t *correct1, size_t *correct5,
                               void *stream);

/* ------------------------------------------------------------------ conv2d */

/* Geometry of a 2-D convolution over x[batch, in_c, in_h, in_w] with
 * w[out_c, in_c, k_h, k_w], zero padding and stride; the output is
 * y[batch, out_c, out_h, out_w] with out = (in + 2*pad - k) / stride + 1.
 * Valid when every size and stride is > 0 and k <= in + 2*pad. */
typedef struct fl_conv2d_desc {
  size_t batch;
  size_t in_c, in_h, in_w;
  size_t out_c;
  size_t k_h, k_w;
  size_t stride_h, stride_w;
  size_t pad_h, pad_w;
} fl_conv2d_desc;

/* FL_OK when d describes a valid convolution, FL_EINVAL otherwise. */
fl_status fl_conv2d_check(const fl_conv2d_desc *d);
/* Output height and width (0 for an invalid d). */
size_t fl_conv2d_out_h(const fl_conv2d_desc *d);
size_t fl_conv2d_out_w(const fl_conv2d_desc *d);
/* Floats of CPU workspace the forward and backward need (the im2col buffer
 * of one image: in_c*k_h*k_w*out_h*out_w); 0 for an invalid d. */
size_t fl_conv2d_workspace_floats(const fl_conv2d_desc *d);
/* Bytes of DEVICE workspace the CUDA twins need for d (cuDNN algorithms'
 * scratch, or im2col), into *bytes. */
fl_status fl_conv2d_workspace_bytes_cuda(const fl_conv2d_desc *d, size_t *bytes);

/* y = act(conv(x, w) + b[out_c]) by im2col + GEMM, one image at a time;
 * b may be NULL.  ws holds fl_conv2d_workspace_floats(d) floats. */
fl_status fl_conv2d_forward(const fl_conv2d_desc *d, const float *x, const float *w,
                            const float *b, float *y, float *ws, fl_act act);
/* Device twin; ws holds fl_conv2d_workspace_bytes_cuda(d) bytes (may be
 * NULL when that is 0). */
fl_status fl_conv2d_forward_cuda(const fl_conv2d_desc *d, const float *x, const float *w,
                                 const float *b, float *y, void *ws, fl_act act, fl_math math,
                                 void *stream);

/* Backward of fl_conv2d_forward: from x, w, the output y (read when act is
 * not NONE) and dy (scratch, see above) writes dx[batch, in_c, in_h, in_w],
 * dw[out_c, in_c, k_h, k_w] (summed over the batch in image order) and
 * db[out_c].  dx, dw and db may each be NULL to skip them.  ws as above. */
fl_status fl_conv2d_backward(const fl_conv2d_desc *d, const float *x, const float *w,
                             const float *y, float *dy, float *dx, float *dw, float *db,
                             float *ws, fl_act act);
fl_status fl_conv2d_backward_cuda(const fl_conv2d_desc *d, const float *x, const float *w,
                                  const float *y, float *dy, float *dx, float *dw, float *db,
                                  void *ws, fl_act act, fl_math math, void *stream);

/* ---------------------------------------------------------------- max-pool */

/* Geometry of a max-pool over x[batch, channels, in_h, in_w], no padding;
 * out = (in - k) / stride + 1.  Valid when every field is > 0 and k <= in. */
typedef struct fl_pool2d_desc {
  size_t batch, channels;
  size_t in_h, in_w;
  size_t k_h, k_w;
  size_t stride_h, stride_w;
} fl_pool2d_desc;

fl_status fl_pool2d_check(const fl_pool2d_desc *d);
size_t fl_pool2d_out_h(const fl_pool2d_desc *d);
size_t fl_pool2d_out_w(const fl_pool2d_desc *d);

/* y[batch, channels, out_h, out_w] = window maxima of x.  argmax (same
 * shape as y; may be NULL in inference) receives, for each output, the
 * index h*in_w + w of the chosen input inside its (n, c) plane: the first
 * maximum in row-major window order, or the first NaN (NaN propagates). */
fl_status fl_maxpool2d_forward(const fl_pool2d_desc *d, const float *x, float *y,
                               int32_t *argmax);
fl_status fl_maxpool2d_forward_cuda(const fl_pool2d_desc *d, const float *x, float *y,
                                    int32_t *argmax, void *stream);

/* dx = 0, then dx[argmax] += dy for every output (overlapping windows add
 * up, in output order). */
fl_status fl_maxpool2d_backward(const fl_pool2d_desc *d, const float *dy, const int32_t *argmax,
                                float *dx);
fl_status fl_maxpool2d_backward_cuda(const fl_pool2d_desc *d, const float *dy,
                                     const int32_t *argmax, float *dx, void *stream);

/* ------------------------------------------------------------ normalisation */

/* Geometry and constants of batch norm and group norm over a
 * [batch, channels, inner] tensor (inner = H*W; 1 after a linear layer).
 * groups: group norm only, must divide channels.  momentum: batch norm's
 * running-stat update weight (PyTorch's convention, 0.1 by default). */
typedef struct fl_norm_desc {
  size_t batch, channels, inner;
  size_t groups;
  float eps;      /* > 0, e.g. 1e-5 */
  float momentum; /* in [0, 1] */
} fl_norm_desc;

/* Batch norm, training mode: per channel c, mean and biased variance over
 * (n, s) (computed in double), y = act(gamma[c] * (x - mean) * invstd +
 * beta[c]) with invstd = 1/sqrt(var + eps).  save_mean[c] and save_invstd[c]
 * receive the statistics backward needs.  running_mean/running_var, when
 * not NULL, are updated as r = (1 - momentum)*r + momentum*stat with the
 * UNBIASED variance; pass NULL for both to recompute a forward without
 * touching them (gradient checkpointing).  gamma and beta may be NULL
 * (1 and 0).  Needs batch*inner >= 2. */
fl_status fl_batchnorm_forward_train(const fl_norm_desc *d, const float *x, float *y,
                                     const float *gamma, const float *beta, float *running_mean,
                                     float *running_var, float *save_mean, float *save_invstd,
                                     fl_act act);
fl_status fl_batchnorm_forward_train_cuda(const fl_norm_desc *d, const float *x, float *y,
                                          const float *gamma, const float *beta,
                                          float *running_mean, float *running_var,
                                          float *save_mean, float *save_invstd, fl_act act,
                                          void *stream);

/* Batch norm, inference mode: the running statistics instead of the
 * batch's.  x == y (in place) is allowed. */
fl_status fl_batchnorm_forward_eval(const fl_norm_desc *d, const float *x, float *y,
                                    const float *gamma, const float *beta,
                                    const float *running_mean, const float *running_var,
                                    fl_act act);
fl_status fl_batchnorm_forward_eval_cuda(const fl_norm_desc *d, const float *x, float *y,
                                         const float *gamma, const float *beta,
                                         const float *running_mean, const float *running_var,
                                         fl_act act, void *stream);

/* Backward of fl_batchnorm_forward_train, from its input x, output y (read
 * when act is not NONE), dy (scratch) and the saved statistics: writes
 * dx, dgamma[c] = sum dz*xhat and dbeta[c] = sum dz.  dx, dgamma and dbeta
 * may each be NULL to skip them; gamma NULL means 1.  dx == dy (in place)
 * is allowed. */
fl_status fl_batchnorm_backward(const fl_norm_desc *d, const float *x, const float *y, float *dy,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, float *dx, float *dgamma,
                                float *dbeta, fl_act act);
fl_status fl_batchnorm_backward_cuda(const fl_norm_desc *d, const float *x, const float *y,
                                     float *dy, const float *gamma, const float *save_mean,
                                     const float *save_invstd, float *dx, float *dgamma,
                                     float *dbeta, fl_act act, void *stream);

/* Batch norm training in phases, for synchronised batch norm (SyncBN):
 * the statistics and the backward sums of a batch that is spread over
 * several ranks are per-channel sums, which the caller adds up over the
 * ranks between the phases (an allreduce of a few doubles), so that every
 * rank normalises with the statistics of the whole (global) batch:
 *
 *   forward:  stats_sum(x_r) -> sum, with the count N*inner beside it
 *             [allreduce sum and count]
 *             stats_sqdev(x_r, sum, count) -> sqdev    [allreduce sqdev]
 *             forward_apply(x_r, sum, sqdev, count) -> y_r, save_*, running
 *   backward: backward_reduce(x_r, y_r, dy_r) -> sums (dz is left in dy_r),
 *             dgamma_r, dbeta_r (this rank's, like any parameter gradient)
 *             [allreduce sums]
 *             backward_apply(x_r, dz_r, sums, count) -> dx_r
 *
 * mean = sum/count and the biased variance sqdev/count come in two passes,
 * as in fl_batchnorm_forward_train (no E[x^2] - E[x]^2 cancellation).  With
 * one rank (the exchange an identity and count = batch*inner) the phases
 * give exactly the bits of fl_batchnorm_forward_train and
 * fl_batchnorm_backward.  count is the number of values per channel over
 * all ranks (an integer, as a double); the kernels that take it check
 * count >= batch*inner (this rank's own values), forward_apply also
 * count >= 2.
 * The double arrays are the caller's (CPU: host memory; CUDA twins: device
 * memory, count by value).
 *
 * sum[c] = sum of x over (n, s); sqdev[c] = sum of (x - sum[c]/count)^2. */
fl_status fl_batchnorm_stats_sum(const fl_norm_desc *d, const float *x, double *sum);
fl_status fl_batchnorm_stats_sum_cuda(const fl_norm_desc *d, const float *x, double *sum,
                                      void *stream);
fl_status fl_batchnorm_stats_sqdev(const fl_norm_desc *d, const float *x, const double *sum,
                                   double count, double *sqdev);
fl_status fl_batchnorm_stats_sqdev_cuda(const fl_norm_desc *d, const float *x, const double *sum,
                                        double count, double *sqdev, void *stream);
/* Normalise with mean sum/count and biased variance sqdev/count: y, saved
 * statistics and running statistics (unbiased variance, factor
 * count/(count-1); NULL for both to leave them, as when recomputing) exactly
 * as fl_batchnorm_forward_train does with its own statistics. */
fl_status fl_batchnorm_forward_apply(const fl_norm_desc *d, const float *x, float *y,
                                     const float *gamma, const float *beta, const double *sum,
                                     const double *sqdev, double count, float *running_mean,
                                     float *running_var, float *save_mean, float *save_invstd,
                                     fl_act act);
/* One channel c of fl_batchnorm_forward_apply, from its mean mu and
 * biased variance var of count values (count >= 2): y's channel c, the
 * saved and (when running_mean is set) running statistics, and, when
 * save_ab is set (2*channels floats), the affine a = gamma*invstd at
 * save_ab[c] and b = beta - gamma*invstd*mu at save_ab[channels + c]:
 * y = act(a*x + b) bit for bit, so a caller can tell a fused Relu's mask
 * from x.  For callers that compute the statistics themselves, channel by
 * channel (NaN statistics are not refused: they flow into y). */
fl_status fl_batchnorm_apply_channel(const fl_norm_desc *d, size_t c, const float *x, float *y,
                                     const float *gamma, const float *beta, double mu,
                                     double var, double count, float *running_mean,
                                     float *running_var, float *save_mean, float *save_invstd,
                                     float *save_ab, fl_act act);
fl_status fl_batchnorm_forward_apply_cuda(const fl_norm_desc *d, const float *x, float *y,
                                          const float *gamma, const float *beta,
                                          const double *sum, const double *sqdev, double count,
                                          float *running_mean, float *running_var,
                                          float *save_mean, float *save_invstd, fl_act act,
                                          void *stream);
/* dy becomes dz, the gradient before the activation (in place, as
 * fl_batchnorm_backward does; y is read when act is not NONE); sums[c] =
 * sum dz and sums[channels + c] = sum dz*xhat (2*channels doubles);
 * dgamma[c] and dbeta[c] (each may be NULL) are these local sums in float. */
fl_status fl_batchnorm_backward_reduce(const fl_norm_desc *d, const float *x, const float *y,
                                       float *dy, const float *save_mean,
                                       const float *save_invstd, double *sums, float *dgamma,
                                       float *dbeta, fl_act act);
fl_status fl_batchnorm_backward_reduce_cuda(const fl_norm_desc *d, const float *x,
                                            const float *y, float *dy, const float *save_mean,
                                            const float *save_invstd, double *sums,
                                            float *dgamma, float *dbeta, fl_act act,
                                            void *stream);
/* dx = gamma*invstd*(dz - sums[c]/count - xhat*sums[C + c]/count) from the
 * (summed) sums; dx == dz (in place) is allowed. */
fl_status fl_batchnorm_backward_apply(const fl_norm_desc *d, const float *x, const float *dz,
                                      const float *gamma, const float *save_mean,
                                      const float *save_invstd, const double *sums,
                                      double count, float *dx);
fl_status fl_batchnorm_backward_apply_cuda(const fl_norm_desc *d, const float *x,
                                           const float *dz, const float *gamma,
                                           const float *save_mean, const float *save_invstd,
                                           const double *sums, double count, float *dx,
                                           void *stream);

/* Group norm (same in training and inference): per sample n and group g of
 * channels/groups consecutive channels, mean and biased variance over the
 * group's channels*inner/groups values (in double); y = act(gamma[c] *
 * xhat + beta[c]).  save_mean and save_invstd hold batch*groups floats.
 * gamma and beta may be NULL (1 and 0).  Needs groups to divide channels. */
fl_status fl_groupnorm_forward(const fl_norm_desc *d, const float *x, float *y,
                               const float *gamma, const float *beta, float *save_mean,
                               float *save_invstd, fl_act act);
fl_status fl_groupnorm_forward_cuda(const fl_norm_desc *d, const float *x, float *y,
                                    const float *gamma, const float *beta, float *save_mean,
                                    float *save_invstd, fl_act act, void *stream);

/* Backward of fl_groupnorm_forward; same conventions as batch norm's
 * (dx == dy allowed). */
fl_status fl_groupnorm_backward(const fl_norm_desc *d, const float *x, const float *y, float *dy,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, float *dx, float *dgamma,
                                float *dbeta, fl_act act);
fl_status fl_groupnorm_backward_cuda(const fl_norm_desc *d, const float *x, const float *y,
                                     float *dy, const float *gamma, const float *save_mean,
                                     const float *save_invstd, float *dx, float *dgamma,
                                     float *dbeta, fl_act act, void *stream);

#ifdef __cplusplus
}
#endif
#endif
