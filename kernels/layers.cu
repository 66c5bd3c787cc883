/* layers.cu - the CUDA twins of fl_layers.h: activations, bias, linear
 * (cuBLAS), softmax cross-entropy, conv2d (cuDNN), max-pool, batch norm and
 * group norm over device pointers.
 *
 * Each twin validates its arguments on the host with its CPU twin's rules,
 * then queues its work on the caller's stream.  The per-element arithmetic
 * is the CPU's expression for expression (the build disables FMA
 * contraction), so element-wise ops agree to the bit or to tanhf's last ulp;
 * reductions (bias and norm gradients, statistics, softmax sums) run in
 * double in a fixed block order (deterministic, no atomics), and GEMMs and
 * convolutions are cuBLAS's and cuDNN's fp32 ones (tensor-core TF32 kept
 * off), so those agree with OpenBLAS to float rounding of the sums.
 *
 * Deviations from the CPU twins, because the data live on the device:
 *  - fl_softmax_xent_cuda always waits for the stream: it must read back
 *    whether a label was out of range to return FL_EINVAL (nothing is
 *    written then).
 *  - fl_maxpool2d_backward_cuda waits too, for the same reason, and it
 *    requires every argmax to lie inside its own window (as
 *    fl_maxpool2d_forward[_cuda] produces them): each input element sums
 *    the gradients of the windows covering it in output order, which gives
 *    the CPU's scatter-add bit for bit without atomics.
 *  - Small scratch (per-channel factors, per-sample losses, fp16 copies of
 *    GEMM inputs) comes from the stream-ordered pool (cudaMallocAsync).
 *  - FL_MATH_FP16/BF16 linear layers run cublasGemmEx on 16-bit copies of
 *    the inputs with fp32 accumulation and output; convolutions round their
 *    inputs to 16 bits in the workspace and run the fp32 cuDNN kernels,
 *    which is the same arithmetic (16-bit products are exact in fp32).
 *  - CUDA, cuBLAS and cuDNN failures are logged once here (the CPU twins
 *    never log); argument errors are not.
 * cuBLAS and cuDNN handles are created once per thread and device and
 * destroyed when the thread exits. */
#include <config.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "cuda_internal.h"
#include "fl_layers.h"

#define LT 256               /* threads per block */
#define GRID_MAX 65536       /* blocks of a grid-stride launch */
#define MAX_DEVICES 64       /* per-thread handle slots */
#define WS_ALIGN ((size_t)256)

/* ------------------------------------------------------------ boundaries */

#define FL_BLAS_TRY(call, what)                                                     \
  do {                                                                              \
    cublasStatus_t fl_bs_ = (call);                                                 \
    if (fl_bs_ != CUBLAS_STATUS_SUCCESS)                                            \
      return FL_ERR(FL_ECUDA, "%s: %s: %s", __func__, (what), cublasGetStatusString(fl_bs_)); \
  } while (0)

#define FL_DNN_GOTO(call, what, st)                                                 \
  do {                                                                              \
    cudnnStatus_t fl_ds_ = (call);                                                  \
    if (fl_ds_ != CUDNN_STATUS_SUCCESS) {                                           \
      (st) = FL_ERR(FL_ECUDA, "%s: %s: %s", __func__, (what), cudnnGetErrorString(fl_ds_)); \
      goto fail;                                                                    \
    }                                                                               \
  } while (0)

static unsigned grid_for(size_t n) {
  size_t b = (n + LT - 1) / LT;
  return (unsigned)(b < 1 ? 1 : b > GRID_MAX ? GRID_MAX : b);
}

static size_t align_up(size_t x) { return (x + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN; }

static bool act_ok(fl_act act) {
  return act == FL_ACT_NONE || act == FL_ACT_RELU || act == FL_ACT_TANH;
}

static bool math_ok(fl_math m) {
  return m == FL_MATH_FP32 || m == FL_MATH_FP16 || m == FL_MATH_BF16;
}

/* ------------------------------------------------------- library handles */

struct thread_handles {
  cublasHandle_t blas[MAX_DEVICES];
  cudnnHandle_t dnn[MAX_DEVICES];
};

static pthread_key_t handles_key;
static pthread_once_t handles_once = PTHREAD_ONCE_INIT;
static int handles_key_err;

static void handles_destroy(void *p) {
  thread_handles *h = (thread_handles *)p;
  for (int i = 0; i < MAX_DEVICES; i++) {
    if (h->blas[i]) (void)cublasDestroy(h->blas[i]);
    if (h->dnn[i]) (void)cudnnDestroy(h->dnn[i]);
  }
  free(h);
}

static void handles_key_init(void) { handles_key_err = pthread_key_create(&handles_key, handles_destroy); }

/* This thread's handle table and the current device, created on first use. */
static fl_status my_handles(thread_handles **out, int *dev) {
  FL_CUDA_TRY(cudaGetDevice(dev), "cudaGetDevice");
  if (*dev < 0 || *dev >= MAX_DEVICES)
    return FL_ERR(FL_ECUDA, "%s: device %d beyond the %d supported", __func__, *dev, MAX_DEVICES);
  (void)pthread_once(&handles_once, handles_key_init);
  if (handles_key_err) return FL_ERR(FL_ENOMEM, "%s: pthread_key_create failed", __func__);
  thread_handles *h = (thread_handles *)pthread_getspecific(handles_key);
  if (h == NULL) {
    h = (thread_handles *)calloc(1, sizeof *h);
    if (h == NULL) return FL_ERR(FL_ENOMEM, "%s: out of memory", __func__);
    if (pthread_setspecific(handles_key, h) != 0) {
      free(h);
      return FL_ERR(FL_ENOMEM, "%s: pthread_setspecific failed", __func__);
    }
  }
  *out = h;
  return FL_OK;
}

/* This thread's cuBLAS handle for the current device, bound to stream s.
 * fp32 GEMMs stay fp32 (no TF32 tensor-core rounding). */
static fl_status blas_handle(cudaStream_t s, cublasHandle_t *out) {
  thread_handles *h;
  int dev;
  FL_CU_TRY(my_handles(&h, &dev));
  if (h->blas[dev] == NULL) {
    FL_BLAS_TRY(cublasCreate(&h->blas[dev]), "cublasCreate");
    FL_BLAS_TRY(cublasSetMathMode(h->blas[dev], CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  FL_BLAS_TRY(cublasSetStream(h->blas[dev], s), "cublasSetStream");
  *out = h->blas[dev];
  return FL_OK;
}

/* This thread's cuDNN handle for the current device, bound to stream s. */
static fl_status dnn_handle(cudaStream_t s, cudnnHandle_t *out) {
  thread_handles *h;
  int dev;
  fl_status st = FL_OK;
  FL_CU_TRY(my_handles(&h, &dev));
  if (h->dnn[dev] == NULL) FL_DNN_GOTO(cudnnCreate(&h->dnn[dev]), "cudnnCreate", st);
  FL_DNN_GOTO(cudnnSetStream(h->dnn[dev], s), "cudnnSetStream", st);
  *out = h->dnn[dev];
fail:
  return st;
}

/* ------------------------------------------------------- device helpers */

__device__ static inline float act_fwd(int act, float v) {
  if (act == FL_ACT_RELU) return v > 0.0f ? v : 0.0f;
  if (act == FL_ACT_TANH) return tanhf(v);
  return v;
}

/* dy * act'(.) from the activated output y (ReLU: y > 0; tanh: 1 - y*y). */
__device__ static inline float act_bwd(int act, float y, float dy) {
  if (act == FL_ACT_RELU) return y > 0.0f ? dy : 0.0f;
  if (act == FL_ACT_TANH) return dy * (1.0f - y * y);
  return dy;
}

/* Sum over the block (blockDim.x == LT) in a fixed tree order; every thread
 * gets the total.  Callable repeatedly in one kernel. */
__device__ static double block_sum(double v) {
  __shared__ double sh[LT];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = LT / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  double r = sh[0];
  __syncthreads();
  return r;
}

/* Largest non-nan value over the block (-inf when none). */
__device__ static float block_max(float v) {
  __shared__ float sh[LT];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = LT / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x])
      sh[threadIdx.x] = sh[threadIdx.x + s];
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

/* ------------------------------------------------------------ element-wise */

__global__ static void __launch_bounds__(LT)
    act_forward_kernel(int act, const float *x, float *y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < n; i += (size_t)gridDim.x * LT)
    y[i] = act_fwd(act, x[i]);
}

__global__ static void __launch_bounds__(LT)
    act_backward_kernel(int act, const float *y, const float *dy, float *dx, size_t n) {
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < n; i += (size_t)gridDim.x * LT)
    dx[i] = act_bwd(act, y[i], dy[i]);
}

/* y[n, c, s] = act(y + b[c]) (b may be NULL) over a [*, channels, inner]
 * tensor of n elements. */
__global__ static void __launch_bounds__(LT) bias_act_kernel(float *y, const float *b,
                                                             size_t channels, size_t inner,
                                                             size_t n, int act) {
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < n; i += (size_t)gridDim.x * LT) {
    float v = y[i];
    if (b) v = v + b[(i / inner) % channels];
    y[i] = act_fwd(act, v);
  }
}

/* db[c] = sum over n, s of dy[n, c, s]; one block per channel, in double. */
__global__ static void __launch_bounds__(LT) bias_grad_kernel(const float *dy, float *db,
                                                              size_t batch, size_t channels,
                                                              size_t inner) {
  const size_t c = blockIdx.x, m = batch * inner;
  double acc = 0.0;
  for (size_t k = threadIdx.x; k < m; k += LT)
    acc += dy[((k / inner) * channels + c) * inner + k % inner];
  double s = block_sum(acc);
  if (threadIdx.x == 0) db[c] = (float)s;
}

/* x rounded to fp16 (math 1) or bf16 (math 2) and back, in place or not. */
__global__ static void __launch_bounds__(LT)
    round16_kernel(const float *x, float *y, size_t n, int math) {
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < n; i += (size_t)gridDim.x * LT)
    y[i] = math == FL_MATH_FP16 ? f16_to_f32(f32_to_f16(x[i])) : bf16_to_f32(f32_to_bf16(x[i]));
}

/* x converted to 16-bit storage for a GEMM (fp16 or bf16 bits). */
__global__ static void __launch_bounds__(LT)
    to16_kernel(const float *x, uint16_t *y, size_t n, int math) {
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < n; i += (size_t)gridDim.x * LT)
    y[i] = math == FL_MATH_FP16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
}

static fl_status launch_bias_act(float *y, const float *b, size_t channels, size_t inner,
                                 size_t n, fl_act act, cudaStream_t s) {
  if (b == NULL && act == FL_ACT_NONE) return FL_OK;
  bias_act_kernel<<<grid_for(n), LT, 0, s>>>(y, b, channels, inner, n, (int)act);
  FL_CUDA_LAUNCHED("bias/activation kernel");
  return FL_OK;
}

extern "C" fl_status fl_act_forward_cuda(fl_act act, const float *x, float *y, size_t n,
                                         void *stream) {
  if (!x || !y || n == 0 || !act_ok(act)) return FL_EINVAL;
  act_forward_kernel<<<grid_for(n), LT, 0, fl_stream(stream)>>>((int)act, x, y, n);
  FL_CUDA_LAUNCHED("activation kernel");
  return FL_OK;
}

extern "C" fl_status fl_act_backward_cuda(fl_act act, const float *y, const float *dy, float *dx,
                                          size_t n, void *stream) {
  if (!dy || !dx || n == 0 || !act_ok(act) || (act != FL_ACT_NONE && !y)) return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  if (act == FL_ACT_NONE) {
    if (dx != dy)
      FL_CUDA_TRY(cudaMemcpyAsync(dx, dy, n * sizeof *dx, cudaMemcpyDeviceToDevice, s),
                  "copying dy");
    return FL_OK;
  }
  act_backward_kernel<<<grid_for(n), LT, 0, s>>>((int)act, y, dy, dx, n);
  FL_CUDA_LAUNCHED("activation gradient kernel");
  return FL_OK;
}

extern "C" fl_status fl_bias_forward_cuda(float *y, const float *b, size_t batch, size_t channels,
                                          size_t inner, void *stream) {
  if (!y || !b || batch == 0 || channels == 0 || inner == 0) return FL_EINVAL;
  return launch_bias_act(y, b, channels, inner, batch * channels * inner, FL_ACT_NONE,
                         fl_stream(stream));
}

static fl_status launch_bias_grad(const float *dy, float *db, size_t batch, size_t channels,
                                  size_t inner, cudaStream_t s) {
  if (channels > (size_t)INT32_MAX)
    return FL_ERR(FL_ECUDA, "%s: %zu channels exceed the grid", __func__, channels);
  bias_grad_kernel<<<(unsigned)channels, LT, 0, s>>>(dy, db, batch, channels, inner);
  FL_CUDA_LAUNCHED("bias gradient kernel");
  return FL_OK;
}

extern "C" fl_status fl_bias_backward_cuda(const float *dy, float *db, size_t batch,
                                           size_t channels, size_t inner, void *stream) {
  if (!dy || !db || batch == 0 || channels == 0 || inner == 0) return FL_EINVAL;
  return launch_bias_grad(dy, db, batch, channels, inner, fl_stream(stream));
}

/* ------------------------------------------------------------------ linear */

static bool blas_ok(size_t a, size_t b, size_t c) {
  return a <= (size_t)INT32_MAX && b <= (size_t)INT32_MAX && c <= (size_t)INT32_MAX;
}

/* One column-major GEMM C[m, n] = op(A) . op(B) with fp32 accumulation and
 * output; A and B are fp32 (math FP32) or the 16-bit copies. */
static fl_status gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, size_t m,
                      size_t n, size_t k, const void *a, size_t lda, const void *b, size_t ldb,
                      float *c, size_t ldc, fl_math math) {
  const float one = 1.0f, zero = 0.0f;
  cudaDataType_t t = math == FL_MATH_FP16   ? CUDA_R_16F
                     : math == FL_MATH_BF16 ? CUDA_R_16BF
                                            : CUDA_R_32F;
  FL_BLAS_TRY(cublasGemmEx(h, ta, tb, (int)m, (int)n, (int)k, &one, a, t, (int)lda, b, t,
                           (int)ldb, &zero, c, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
  return FL_OK;
}

/* 16-bit copies of up to three fp32 device arrays in one pool allocation
 * (src[i] may be NULL: no copy).  *mem receives the allocation. */
static fl_status to16(const float *const *src, const size_t *n, uint16_t **dst, int count,
                      fl_math math, cudaStream_t s, void **mem) {
  size_t off[3], total = 0;
  for (int i = 0; i < count; i++) {
    off[i] = total;
    if (src[i]) total += align_up(n[i] * sizeof(uint16_t));
  }
  *mem = NULL;
  FL_CUDA_TRY(cudaMallocAsync(mem, total, s), "cudaMallocAsync of 16-bit GEMM inputs");
  for (int i = 0; i < count; i++) {
    dst[i] = NULL;
    if (!src[i]) continue;
    dst[i] = (uint16_t *)((char *)*mem + off[i]);
    to16_kernel<<<grid_for(n[i]), LT, 0, s>>>(src[i], dst[i], n[i], (int)math);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    (void)cudaFreeAsync(*mem, s);
    *mem = NULL;
    return FL_ERR(FL_ECUDA, "%s: fp16/bf16 conversion kernel: %s", __func__, cudaGetErrorString(e));
  }
  return FL_OK;
}

static fl_status free_async(void *p, cudaStream_t s) {
  if (p) FL_CUDA_TRY(cudaFreeAsync(p, s), "cudaFreeAsync");
  return FL_OK;
}

extern "C" fl_status fl_linear_forward_cuda(const float *x, const float *w, const float *b,
                                            float *y, size_t batch, size_t in, size_t out,
                                            fl_act act, fl_math math, void *stream) {
  if (!x || !w || !y || batch == 0 || in == 0 || out == 0 || !act_ok(act) || !math_ok(math) ||
      !blas_ok(batch, in, out))
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  cublasHandle_t h;
  FL_CU_TRY(blas_handle(s, &h));
  /* Row-major y[batch, out] = x . w^T is column-major y^T = w^T' . x'. */
  if (math == FL_MATH_FP32) {
    FL_CU_TRY(gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, w, in, x, in, y, out, math));
  } else {
    const float *src[2] = {w, x};
    size_t n[2] = {out * in, batch * in};
    uint16_t *d[2];
    void *mem;
    FL_CU_TRY(to16(src, n, d, 2, math, s, &mem));
    fl_status st = gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, d[0], in, d[1], in, y, out,
                        math);
    fl_status fst = free_async(mem, s);
    FL_CU_TRY(st);
    FL_CU_TRY(fst);
  }
  return launch_bias_act(y, b, out, 1, batch * out, act, s);
}

extern "C" fl_status fl_linear_backward_cuda(const float *x, const float *w, const float *y,
                                             float *dy, float *dx, float *dw, float *db,
                                             size_t batch, size_t in, size_t out, fl_act act,
                                             fl_math math, void *stream) {
  if (!x || !w || !dy || batch == 0 || in == 0 || out == 0 || !act_ok(act) || !math_ok(math) ||
      (act != FL_ACT_NONE && !y) || !blas_ok(batch, in, out))
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  if (act != FL_ACT_NONE) {
    act_backward_kernel<<<grid_for(batch * out), LT, 0, s>>>((int)act, y, dy, dy, batch * out);
    FL_CUDA_LAUNCHED("activation gradient kernel");
  }
  if (db) FL_CU_TRY(launch_bias_grad(dy, db, batch, out, 1, s));
  if (!dw && !dx) return FL_OK;
  cublasHandle_t h;
  FL_CU_TRY(blas_handle(s, &h));
  const void *dz = dy, *xx = x, *ww = w;
  void *mem = NULL;
  if (math != FL_MATH_FP32) {
    const float *src[3] = {dy, dw ? x : NULL, dx ? w : NULL};
    size_t n[3] = {batch * out, batch * in, out * in};
    uint16_t *d[3];
    FL_CU_TRY(to16(src, n, d, 3, math, s, &mem));
    dz = d[0], xx = d[1], ww = d[2];
  }
  fl_status st = FL_OK;
  /* dw[out, in] = dz^T . x: column-major dw^T = x' . dz'^T. */
  if (dw) st = gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, xx, in, dz, out, dw, in, math);
  /* dx[batch, in] = dz . w: column-major dx^T = w' . dz'. */
  if (dx && st == FL_OK)
    st = gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, ww, in, dz, out, dx, in, math);
  fl_status fst = free_async(mem, s);
  FL_CU_TRY(st);
  return fst;
}

/* ------------------------------------------------- softmax cross-entropy */

/* Scratch of fl_softmax_xent_cuda: a flag, the totals, and per sample the
 * loss and the label's rank. */
struct xent_totals {
  int bad_label;
  double loss;
  unsigned long long correct1, correct5;
};

__global__ static void __launch_bounds__(LT)
    label_check_kernel(const int32_t *labels, size_t batch, size_t classes, xent_totals *tot) {
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < batch; i += (size_t)gridDim.x * LT)
    if (labels[i] < 0 || (size_t)labels[i] >= classes) tot->bad_label = 1;
}

/* One block per sample: max, log-sum-exp (double), the label's rank, the
 * loss, and dlogits (which may alias logits: every read of the row happens
 * before the first write). */
__global__ static void __launch_bounds__(LT)
    xent_kernel(const float *logits, const int32_t *labels, size_t classes, double gscale,
                float *dlogits, const xent_totals *tot, double *loss, int *rank) {
  if (tot->bad_label) return;
  const size_t n = blockIdx.x;
  const float *z = logits + n * classes;
  const size_t lab = (size_t)labels[n];
  /* The CPU's running max starts at z[0] and skips nan (a nan z[0] stays). */
  float m = -INFINITY;
  for (size_t j = threadIdx.x; j < classes; j += LT)
    if (z[j] > m) m = z[j];
  float zmax = block_max(m);
  if (isnan(z[0])) zmax = z[0];
  double sum = 0.0;
  for (size_t j = threadIdx.x; j < classes; j += LT) sum += exp((double)z[j] - (double)zmax);
  const double lse = (double)zmax + log(block_sum(sum));
  const float zl = z[lab];
  double cnt = 0.0;
  for (size_t j = threadIdx.x; j < classes; j += LT)
    if (z[j] > zl || (z[j] == zl && j < lab)) cnt += 1.0;
  const double r = block_sum(cnt); /* ends with a barrier: z is read */
  if (threadIdx.x == 0) {
    loss[n] = lse - (double)zl;
    rank[n] = isnan(zl) ? 5 : r < 5.0 ? (int)r : 5; /* NaN: never correct */
  }
  if (dlogits) {
    float *g = dlogits + n * classes;
    for (size_t j = threadIdx.x; j < classes; j += LT) {
      const double p = exp((double)z[j] - lse);
      g[j] = (float)(gscale * (p - (j == lab ? 1.0 : 0.0)));
    }
  }
}

/* The totals, summed in sample order (one thread: the CPU's order). */
__global__ static void xent_total_kernel(size_t batch, const double *loss, const int *rank,
                                         xent_totals *tot) {
  if (tot->bad_label) return;
  double l = 0.0;
  unsigned long long c1 = 0, c5 = 0;
  for (size_t n = 0; n < batch; n++) {
    l += loss[n];
    c1 += rank[n] < 1;
    c5 += rank[n] < 5;
  }
  tot->loss = l;
  tot->correct1 = c1;
  tot->correct5 = c5;
}

extern "C" fl_status fl_softmax_xent_cuda(const float *logits, const int32_t *labels,
                                          size_t batch, size_t classes, float grad_scale,
                                          float *dlogits, double *loss_sum, size_t *correct1,
                                          size_t *correct5, void *stream) {
  if (!logits || !labels || batch == 0 || classes == 0 || classes > (size_t)INT32_MAX ||
      batch > (size_t)INT32_MAX)
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  fl_status st = FL_OK;
  void *mem = NULL;
  xent_totals host;
  const size_t loss_off = align_up(sizeof(xent_totals));
  const size_t rank_off = loss_off + align_up(batch * sizeof(double));
  FL_CUDA_TRY(cudaMallocAsync(&mem, rank_off + batch * sizeof(int), s),
              "cudaMallocAsync of softmax scratch");
  xent_totals *tot = (xent_totals *)mem;
  double *loss = (double *)((char *)mem + loss_off);
  int *rank = (int *)((char *)mem + rank_off);
  FL_CUDA_GOTO(cudaMemsetAsync(tot, 0, sizeof *tot, s), "clearing softmax totals", st);
  label_check_kernel<<<grid_for(batch), LT, 0, s>>>(labels, batch, classes, tot);
  xent_kernel<<<(unsigned)batch, LT, 0, s>>>(logits, labels, classes,
                                             (double)grad_scale / (double)batch, dlogits, tot,
                                             loss, rank);
  xent_total_kernel<<<1, 1, 0, s>>>(batch, loss, rank, tot);
  FL_CUDA_GOTO(cudaGetLastError(), "softmax cross-entropy kernels", st);
  FL_CUDA_GOTO(cudaMemcpyAsync(&host, tot, sizeof host, cudaMemcpyDeviceToHost, s),
               "reading softmax totals", st);
  FL_CUDA_GOTO(cudaStreamSynchronize(s), "waiting for softmax totals", st);
  if (host.bad_label) {
    st = FL_EINVAL;
  } else {
    if (loss_sum) *loss_sum = host.loss;
    if (correct1) *correct1 = (size_t)host.correct1;
    if (correct5) *correct5 = (size_t)host.correct5;
  }
fail:;
  fl_status fst = free_async(mem, s);
  return st != FL_OK ? st : fst;
}

/* ------------------------------------------------------------------ conv2d */

/* cuDNN's view of a convolution, with the algorithms used: deterministic
 * ones (implicit precomputed GEMM forward, algorithm 1 for both backward
 * passes) with plain fp32 FMA math. */
struct conv_descs {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
};

static const cudnnConvolutionFwdAlgo_t FWD_ALGO = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
static const cudnnConvolutionBwdDataAlgo_t BWD_DATA_ALGO = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
static const cudnnConvolutionBwdFilterAlgo_t BWD_FILTER_ALGO = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;

static void conv_descs_free(conv_descs *c) {
  if (c->x) (void)cudnnDestroyTensorDescriptor(c->x);
  if (c->y) (void)cudnnDestroyTensorDescriptor(c->y);
  if (c->w) (void)cudnnDestroyFilterDescriptor(c->w);
  if (c->conv) (void)cudnnDestroyConvolutionDescriptor(c->conv);
  memset(c, 0, sizeof *c);
}

/* Every size cuDNN takes must fit an int. */
static bool conv_ints_ok(const fl_conv2d_desc *d) {
  const size_t v[] = {d->batch, d->in_c, d->in_h, d->in_w, d->out_c, d->k_h,
                      d->k_w,   d->stride_h, d->stride_w, d->pad_h, d->pad_w};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i] > (size_t)INT32_MAX) return false;
  return d->batch * d->in_c * d->in_h * d->in_w <= (size_t)INT32_MAX &&
         d->batch * d->out_c * fl_conv2d_out_h(d) * fl_conv2d_out_w(d) <= (size_t)INT32_MAX;
}

static fl_status conv_descs_make(const fl_conv2d_desc *d, conv_descs *c) {
  fl_status st = FL_OK;
  memset(c, 0, sizeof *c);
  const int oh = (int)fl_conv2d_out_h(d), ow = (int)fl_conv2d_out_w(d);
  int n, k, h, w;
  FL_DNN_GOTO(cudnnCreateTensorDescriptor(&c->x), "cudnnCreateTensorDescriptor", st);
  FL_DNN_GOTO(cudnnCreateTensorDescriptor(&c->y), "cudnnCreateTensorDescriptor", st);
  FL_DNN_GOTO(cudnnCreateFilterDescriptor(&c->w), "cudnnCreateFilterDescriptor", st);
  FL_DNN_GOTO(cudnnCreateConvolutionDescriptor(&c->conv), "cudnnCreateConvolutionDescriptor", st);
  FL_DNN_GOTO(cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)d->batch,
                                         (int)d->in_c, (int)d->in_h, (int)d->in_w),
              "input descriptor", st);
  FL_DNN_GOTO(cudnnSetFilter4dDescriptor(c->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)d->out_c,
                                         (int)d->in_c, (int)d->k_h, (int)d->k_w),
              "filter descriptor", st);
  FL_DNN_GOTO(cudnnSetConvolution2dDescriptor(c->conv, (int)d->pad_h, (int)d->pad_w,
                                              (int)d->stride_h, (int)d->stride_w, 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              "convolution descriptor", st);
  FL_DNN_GOTO(cudnnSetConvolutionMathType(c->conv, CUDNN_FMA_MATH), "convolution math type", st);
  FL_DNN_GOTO(cudnnGetConvolution2dForwardOutputDim(c->conv, c->x, c->w, &n, &k, &h, &w),
              "output size", st);
  if (n != (int)d->batch || k != (int)d->out_c || h != oh || w != ow) {
    st = FL_ERR(FL_ECUDA, "%s: cuDNN output %dx%dx%dx%d, expected %zux%zux%dx%d", __func__, n, k,
                h, w, d->batch, d->out_c, oh, ow);
    goto fail;
  }
  FL_DNN_GOTO(cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, h, w),
              "output descriptor", st);
  return FL_OK;
fail:
  conv_descs_free(c);
  return st;
}

/* Workspace layout: cuDNN's scratch, then (for FP16/BF16 math) rounded
 * copies of x, w and dz. */
struct conv_ws {
  size_t dnn, x_off, w_off, dz_off, total;
};

static fl_status conv_ws_layout(cudnnHandle_t h, const fl_conv2d_desc *d, const conv_descs *c,
                                conv_ws *L) {
  fl_status st = FL_OK;
  size_t a = 0, b = 0, f = 0;
  FL_DNN_GOTO(cudnnGetConvolutionForwardWorkspaceSize(h, c->x, c->w, c->conv, c->y, FWD_ALGO, &a),
              "forward workspace size", st);
  FL_DNN_GOTO(cudnnGetConvolutionBackwardDataWorkspaceSize(h, c->w, c->y, c->conv, c->x,
                                                           BWD_DATA_ALGO, &b),
              "backward-data workspace size", st);
  FL_DNN_GOTO(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c->x, c->y, c->conv, c->w,
                                                             BWD_FILTER_ALGO, &f),
              "backward-filter workspace size", st);
  L->dnn = a > b ? a : b;
  if (f > L->dnn) L->dnn = f;
  L->x_off = align_up(L->dnn);
  L->w_off = L->x_off + align_up(d->batch * d->in_c * d->in_h * d->in_w * sizeof(float));
  L->dz_off = L->w_off + align_up(d->out_c * d->in_c * d->k_h * d->k_w * sizeof(float));
  L->total = L->dz_off + d->batch * d->out_c * fl_conv2d_out_h(d) * fl_conv2d_out_w(d) *
                             sizeof(float);
fail:
  return st;
}

/* Validate d, and set up cuDNN (handle on stream s, descriptors, layout). */
static fl_status conv_setup(const fl_conv2d_desc *d, cudaStream_t s, cudnnHandle_t *h,
                            conv_descs *c, conv_ws *L) {
  FL_CU_TRY(dnn_handle(s, h));
  FL_CU_TRY(conv_descs_make(d, c));
  fl_status st = conv_ws_layout(*h, d, c, L);
  if (st != FL_OK) conv_descs_free(c);
  return st;
}

extern "C" fl_status fl_conv2d_workspace_bytes_cuda(const fl_conv2d_desc *d, size_t *bytes) {
  if (fl_conv2d_check(d) != FL_OK || !conv_ints_ok(d) || !bytes) return FL_EINVAL;
  cudnnHandle_t h;
  conv_descs c;
  conv_ws L;
  FL_CU_TRY(conv_setup(d, NULL, &h, &c, &L));
  conv_descs_free(&c);
  *bytes = L.total;
  return FL_OK;
}

static fl_status launch_round16(const float *x, float *y, size_t n, fl_math math, cudaStream_t s) {
  round16_kernel<<<grid_for(n), LT, 0, s>>>(x, y, n, (int)math);
  FL_CUDA_LAUNCHED("fp16/bf16 rounding kernel");
  return FL_OK;
}

extern "C" fl_status fl_conv2d_forward_cuda(const fl_conv2d_desc *d, const float *x,
                                            const float *w, const float *b, float *y, void *ws,
                                            fl_act act, fl_math math, void *stream) {
  if (fl_conv2d_check(d) != FL_OK || !conv_ints_ok(d) || !x || !w || !y || !act_ok(act) ||
      !math_ok(math))
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  cudnnHandle_t h;
  conv_descs c;
  conv_ws L;
  FL_CU_TRY(conv_setup(d, s, &h, &c, &L));
  fl_status st = FL_OK;
  const float one = 1.0f, zero = 0.0f;
  const size_t oh = fl_conv2d_out_h(d), ow = fl_conv2d_out_w(d);
  const float *xx = x, *ww = w;
  if ((math == FL_MATH_FP32 ? L.dnn : L.total) > 0 && !ws) {
    st = FL_EINVAL;
    goto fail;
  }
  if (math != FL_MATH_FP32) {
    float *xr = (float *)((char *)ws + L.x_off), *wr = (float *)((char *)ws + L.w_off);
    st = launch_round16(x, xr, d->batch * d->in_c * d->in_h * d->in_w, math, s);
    if (st == FL_OK) st = launch_round16(w, wr, d->out_c * d->in_c * d->k_h * d->k_w, math, s);
    if (st != FL_OK) goto fail;
    xx = xr, ww = wr;
  }
  FL_DNN_GOTO(cudnnConvolutionForward(h, &one, c.x, xx, c.w, ww, c.conv, FWD_ALGO, ws, L.dnn,
                                      &zero, c.y, y),
              "cudnnConvolutionForward", st);
  st = launch_bias_act(y, b, d->out_c, oh * ow, d->batch * d->out_c * oh * ow, act, s);
fail:
  conv_descs_free(&c);
  return st;
}

extern "C" fl_status fl_conv2d_backward_cuda(const fl_conv2d_desc *d, const float *x,
                                             const float *w, const float *y, float *dy,
                                             float *dx, float *dw, float *db, void *ws,
                                             fl_act act, fl_math math, void *stream) {
  if (fl_conv2d_check(d) != FL_OK || !conv_ints_ok(d) || !x || !w || !dy || !act_ok(act) ||
      !math_ok(math) || (act != FL_ACT_NONE && !y))
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  const size_t oh = fl_conv2d_out_h(d), ow = fl_conv2d_out_w(d);
  const size_t ny = d->batch * d->out_c * oh * ow;
  cudnnHandle_t h;
  conv_descs c;
  conv_ws L;
  FL_CU_TRY(conv_setup(d, s, &h, &c, &L));
  fl_status st = FL_OK;
  const float one = 1.0f, zero = 0.0f;
  const float *xx = x, *ww = w, *dz = dy;
  if ((dx || dw) && (math == FL_MATH_FP32 ? L.dnn : L.total) > 0 && !ws) {
    st = FL_EINVAL;
    goto fail;
  }
  if (act != FL_ACT_NONE) {
    act_backward_kernel<<<grid_for(ny), LT, 0, s>>>((int)act, y, dy, dy, ny);
    FL_CUDA_GOTO(cudaGetLastError(), "activation gradient kernel", st);
  }
  if (db) {
    st = launch_bias_grad(dy, db, d->batch, d->out_c, oh * ow, s);
    if (st != FL_OK) goto fail;
  }
  if (math != FL_MATH_FP32 && (dx || dw)) {
    float *xr = (float *)((char *)ws + L.x_off), *wr = (float *)((char *)ws + L.w_off);
    float *dzr = (float *)((char *)ws + L.dz_off);
    st = launch_round16(dy, dzr, ny, math, s);
    if (st == FL_OK && dw) st = launch_round16(x, xr, d->batch * d->in_c * d->in_h * d->in_w, math, s);
    if (st == FL_OK && dx) st = launch_round16(w, wr, d->out_c * d->in_c * d->k_h * d->k_w, math, s);
    if (st != FL_OK) goto fail;
    xx = xr, ww = wr, dz = dzr;
  }
  if (dw)
    FL_DNN_GOTO(cudnnConvolutionBackwardFilter(h, &one, c.x, xx, c.y, dz, c.conv, BWD_FILTER_ALGO,
                                               ws, L.dnn, &zero, c.w, dw),
                "cudnnConvolutionBackwardFilter", st);
  if (dx)
    FL_DNN_GOTO(cudnnConvolutionBackwardData(h, &one, c.w, ww, c.y, dz, c.conv, BWD_DATA_ALGO, ws,
                                             L.dnn, &zero, c.x, dx),
                "cudnnConvolutionBackwardData", st);
fail:
  conv_descs_free(&c);
  return st;
}

/* ---------------------------------------------------------------- max-pool */

struct pool_geom {
  size_t planes, in_h, in_w, out_h, out_w, k_h, k_w, s_h, s_w;
};

static pool_geom pool_geom_of(const fl_pool2d_desc *d) {
  pool_geom g = {d->batch * d->channels, d->in_h,  d->in_w,     fl_pool2d_out_h(d),
                 fl_pool2d_out_w(d),     d->k_h,   d->k_w,      d->stride_h,
                 d->stride_w};
  return g;
}

/* One thread per output: the CPU's scan (first maximum in row-major window
 * order, or the first nan). */
__global__ static void __launch_bounds__(LT)
    maxpool_fwd_kernel(pool_geom g, const float *x, float *y, int32_t *argmax) {
  const size_t total = g.planes * g.out_h * g.out_w;
  for (size_t o = (size_t)blockIdx.x * LT + threadIdx.x; o < total; o += (size_t)gridDim.x * LT) {
    const size_t p = o / (g.out_h * g.out_w), r = o % (g.out_h * g.out_w);
    const size_t oh = r / g.out_w, ow = r % g.out_w;
    const float *xp = x + p * g.in_h * g.in_w;
    size_t best = oh * g.s_h * g.in_w + ow * g.s_w;
    float bv = xp[best];
    if (!isnan(bv)) {
      bool done = false;
      for (size_t i = 0; i < g.k_h && !done; i++) {
        const size_t row = (oh * g.s_h + i) * g.in_w + ow * g.s_w;
        for (size_t j = 0; j < g.k_w; j++) {
          const float v = xp[row + j];
          if (v > bv || isnan(v)) {
            bv = v;
            best = row + j;
            if (isnan(v)) {
              done = true;
              break;
            }
          }
        }
      }
    }
    y[o] = bv;
    if (argmax) argmax[o] = (int32_t)best;
  }
}

/* Flag an argmax outside its own window. */
__global__ static void __launch_bounds__(LT)
    maxpool_check_kernel(pool_geom g, const int32_t *argmax, int *bad) {
  const size_t total = g.planes * g.out_h * g.out_w;
  for (size_t o = (size_t)blockIdx.x * LT + threadIdx.x; o < total; o += (size_t)gridDim.x * LT) {
    const size_t r = o % (g.out_h * g.out_w), oh = r / g.out_w, ow = r % g.out_w;
    const int32_t a = argmax[o];
    if (a < 0 || (size_t)a >= g.in_h * g.in_w) {
      *bad = 1;
      continue;
    }
    const size_t ah = (size_t)a / g.in_w, aw = (size_t)a % g.in_w;
    if (ah < oh * g.s_h || ah >= oh * g.s_h + g.k_h || aw < ow * g.s_w || aw >= ow * g.s_w + g.k_w)
      *bad = 1;
  }
}

/* One thread per input element: the sum, in output order, of dy over the
 * windows covering it whose argmax is this element (0 when none). */
__global__ static void __launch_bounds__(LT) maxpool_bwd_kernel(pool_geom g, const float *dy,
                                                                const int32_t *argmax,
                                                                const int *bad, float *dx) {
  if (*bad) return;
  const size_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  const size_t total = g.planes * in_plane;
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < total; i += (size_t)gridDim.x * LT) {
    const size_t p = i / in_plane, a = i % in_plane, ih = a / g.in_w, iw = a % g.in_w;
    /* windows oh with oh*s_h <= ih < oh*s_h + k_h, likewise ow */
    const size_t oh0 = ih + 1 > g.k_h ? (ih + 1 - g.k_h + g.s_h - 1) / g.s_h : 0;
    const size_t oh1 = ih / g.s_h + 1 < g.out_h ? ih / g.s_h + 1 : g.out_h;
    const size_t ow0 = iw + 1 > g.k_w ? (iw + 1 - g.k_w + g.s_w - 1) / g.s_w : 0;
    const size_t ow1 = iw / g.s_w + 1 < g.out_w ? iw / g.s_w + 1 : g.out_w;
    const int32_t *ap = argmax + p * out_plane;
    const float *dyp = dy + p * out_plane;
    float acc = 0.0f;
    for (size_t oh = oh0; oh < oh1; oh++)
      for (size_t ow = ow0; ow < ow1; ow++)
        if ((size_t)ap[oh * g.out_w + ow] == a) acc += dyp[oh * g.out_w + ow];
    dx[i] = acc;
  }
}

extern "C" fl_status fl_maxpool2d_forward_cuda(const fl_pool2d_desc *d, const float *x, float *y,
                                               int32_t *argmax, void *stream) {
  if (fl_pool2d_check(d) != FL_OK || !x || !y) return FL_EINVAL;
  pool_geom g = pool_geom_of(d);
  maxpool_fwd_kernel<<<grid_for(g.planes * g.out_h * g.out_w), LT, 0, fl_stream(stream)>>>(
      g, x, y, argmax);
  FL_CUDA_LAUNCHED("max-pool kernel");
  return FL_OK;
}

extern "C" fl_status fl_maxpool2d_backward_cuda(const fl_pool2d_desc *d, const float *dy,
                                                const int32_t *argmax, float *dx, void *stream) {
  if (fl_pool2d_check(d) != FL_OK || !dy || !argmax || !dx) return FL_EINVAL;
  pool_geom g = pool_geom_of(d);
  cudaStream_t s = fl_stream(stream);
  fl_status st = FL_OK;
  int *bad = NULL, host_bad = 0;
  FL_CUDA_TRY(cudaMallocAsync((void **)&bad, sizeof *bad, s), "cudaMallocAsync of a flag");
  FL_CUDA_GOTO(cudaMemsetAsync(bad, 0, sizeof *bad, s), "clearing the flag", st);
  maxpool_check_kernel<<<grid_for(g.planes * g.out_h * g.out_w), LT, 0, s>>>(g, argmax, bad);
  maxpool_bwd_kernel<<<grid_for(g.planes * g.in_h * g.in_w), LT, 0, s>>>(g, dy, argmax, bad, dx);
  FL_CUDA_GOTO(cudaGetLastError(), "max-pool gradient kernels", st);
  FL_CUDA_GOTO(cudaMemcpyAsync(&host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost, s),
               "reading the argmax check", st);
  FL_CUDA_GOTO(cudaStreamSynchronize(s), "waiting for the argmax check", st);
  if (host_bad) st = FL_EINVAL;
fail:;
  fl_status fst = free_async(bad, s);
  return st != FL_OK ? st : fst;
}

/* ------------------------------------------------------------ normalisation */

static bool norm_desc_ok(const fl_norm_desc *d) {
  return d && d->batch > 0 && d->channels > 0 && d->inner > 0 && d->eps > 0.0f &&
         isfinite(d->eps);
}

static bool gn_desc_ok(const fl_norm_desc *d) {
  return norm_desc_ok(d) && d->groups > 0 && d->channels % d->groups == 0;
}

/* y = act(a*x + b) with (a, b) = ab[q % nab] for the q-th run of `inner`
 * elements (batch norm: nab = channels; group norm: nab = batch*channels). */
__global__ static void __launch_bounds__(LT) affine_act_kernel(const float *x, float *y,
                                                               const float2 *ab, size_t nab,
                                                               size_t inner, size_t n, int act) {
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < n; i += (size_t)gridDim.x * LT) {
    const float2 c = ab[(i / inner) % nab];
    if (act == FL_ACT_RELU) {
      const float v = c.x * x[i] + c.y;
      y[i] = v > 0.0f ? v : 0.0f;
    } else {
      y[i] = act_fwd(act, c.x * x[i] + c.y);
    }
  }
}

/* Sum (double, fixed tree order) of the values x[(k / len) * stride + k %
 * len] for k < m; every thread gets it. */
__device__ static double block_seg_sum(const float *x, size_t m, size_t len, size_t stride) {
  double s = 0.0;
  for (size_t k = threadIdx.x; k < m; k += LT) s += x[(k / len) * stride + k % len];
  return block_sum(s);
}

/* Sum of (x - mu)^2 over the same values. */
__device__ static double block_seg_sqdev(const float *x, size_t m, size_t len, size_t stride,
                                         double mu) {
  double v = 0.0;
  for (size_t k = threadIdx.x; k < m; k += LT) {
    const double t = (double)x[(k / len) * stride + k % len] - mu;
    v += t * t;
  }
  return block_sum(v);
}

/* Mean and biased variance (double, two passes as the CPU) of those m
 * values; every thread gets them. */
__device__ static void block_stats(const float *x, size_t m, size_t len, size_t stride,
                                   double *mean, double *var) {
  const double mu = block_seg_sum(x, m, len, stride) / (double)m;
  *mean = mu;
  *var = block_seg_sqdev(x, m, len, stride, mu) / (double)m;
}

/* Channel c of batch norm from its mean and biased variance over `count`
 * values: save_*, running stats and the (a, b) of y = a*x + b, as norm.c's
 * bn_channel_apply computes them. */
__device__ static void bn_channel_factors(const fl_norm_desc &d, size_t c, double mu, double var,
                                          double count, const float *gamma, const float *beta,
                                          float *running_mean, float *running_var,
                                          float *save_mean, float *save_invstd, float2 *ab) {
  const double invstd = 1.0 / sqrt(var + (double)d.eps);
  save_mean[c] = (float)mu;
  save_invstd[c] = (float)invstd;
  if (running_mean) {
    const double mom = d.momentum;
    running_mean[c] = (float)((1.0 - mom) * running_mean[c] + mom * mu);
    running_var[c] = (float)((1.0 - mom) * running_var[c] + mom * var * count / (count - 1.0));
  }
  const float g = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
  ab[c] = make_float2((float)(g * invstd), (float)(be - g * invstd * mu));
}

/* Batch norm statistics, one block per channel: save_*, running stats and
 * the (a, b) of y = a*x + b, as norm.c computes them. */
__global__ static void __launch_bounds__(LT)
    bn_stats_kernel(fl_norm_desc d, const float *x, const float *gamma, const float *beta,
                    float *running_mean, float *running_var, float *save_mean,
                    float *save_invstd, float2 *ab) {
  const size_t c = blockIdx.x, C = d.channels, S = d.inner, N = d.batch;
  double mu, var;
  block_stats(x + c * S, N * S, S, C * S, &mu, &var);
  if (threadIdx.x != 0) return;
  bn_channel_factors(d, c, mu, var, (double)(N * S), gamma, beta, running_mean, running_var,
                     save_mean, save_invstd, ab);
}

/* Batch norm inference factors from the running statistics. */
__global__ static void __launch_bounds__(LT)
    bn_eval_kernel(fl_norm_desc d, const float *gamma, const float *beta,
                   const float *running_mean, const float *running_var, float2 *ab) {
  for (size_t c = (size_t)blockIdx.x * LT + threadIdx.x; c < d.channels;
       c += (size_t)gridDim.x * LT) {
    const double invstd = 1.0 / sqrt((double)running_var[c] + (double)d.eps);
    const float g = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
    ab[c] = make_float2((float)(g * invstd), (float)(be - g * invstd * running_mean[c]));
  }
}

/* Group norm statistics, one block per (sample, group). */
__global__ static void __launch_bounds__(LT)
    gn_stats_kernel(fl_norm_desc d, const float *x, const float *gamma, const float *beta,
                    float *save_mean, float *save_invstd, float2 *ab) {
  const size_t C = d.channels, S = d.inner, G = d.groups, cg = C / G;
  const size_t n = blockIdx.x / G, g = blockIdx.x % G, c0 = g * cg;
  double mu, var;
  block_stats(x + (n * C + c0) * S, cg * S, cg * S, 0, &mu, &var);
  const double invstd = 1.0 / sqrt(var + (double)d.eps);
  if (threadIdx.x == 0) {
    save_mean[n * G + g] = (float)mu;
    save_invstd[n * G + g] = (float)invstd;
  }
  for (size_t c = c0 + threadIdx.x; c < c0 + cg; c += LT) {
    const float gm = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
    ab[n * C + c] = make_float2((float)(gm * invstd), (float)(be - gm * invstd * mu));
  }
}

static fl_status launch_affine(const float *x, float *y, const float2 *ab, size_t nab,
                               size_t inner, size_t n, fl_act act, cudaStream_t s) {
  affine_act_kernel<<<grid_for(n), LT, 0, s>>>(x, y, ab, nab, inner, n, (int)act);
  FL_CUDA_LAUNCHED("normalisation kernel");
  return FL_OK;
}

extern "C" fl_status fl_batchnorm_forward_train_cuda(const fl_norm_desc *d, const float *x,
                                                     float *y, const float *gamma,
                                                     const float *beta, float *running_mean,
                                                     float *running_var, float *save_mean,
                                                     float *save_invstd, fl_act act,
                                                     void *stream) {
  if (!norm_desc_ok(d) || !x || !y || !save_mean || !save_invstd || !act_ok(act) ||
      (!running_mean) != (!running_var) || d->batch * d->inner < 2 || !(d->momentum >= 0.0f) ||
      d->momentum > 1.0f || d->channels > (size_t)INT32_MAX)
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  fl_status st = FL_OK;
  float2 *ab = NULL;
  FL_CUDA_TRY(cudaMallocAsync((void **)&ab, d->channels * sizeof *ab, s),
              "cudaMallocAsync of batch-norm factors");
  bn_stats_kernel<<<(unsigned)d->channels, LT, 0, s>>>(*d, x, gamma, beta, running_mean,
                                                       running_var, save_mean, save_invstd, ab);
  FL_CUDA_GOTO(cudaGetLastError(), "batch-norm statistics kernel", st);
  st = launch_affine(x, y, ab, d->channels, d->inner, d->batch * d->channels * d->inner, act, s);
fail:;
  fl_status fst = free_async(ab, s);
  return st != FL_OK ? st : fst;
}

extern "C" fl_status fl_batchnorm_forward_eval_cuda(const fl_norm_desc *d, const float *x,
                                                    float *y, const float *gamma,
                                                    const float *beta, const float *running_mean,
                                                    const float *running_var, fl_act act,
                                                    void *stream) {
  if (!norm_desc_ok(d) || !x || !y || !running_mean || !running_var || !act_ok(act))
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  fl_status st = FL_OK;
  float2 *ab = NULL;
  FL_CUDA_TRY(cudaMallocAsync((void **)&ab, d->channels * sizeof *ab, s),
              "cudaMallocAsync of batch-norm factors");
  bn_eval_kernel<<<grid_for(d->channels), LT, 0, s>>>(*d, gamma, beta, running_mean, running_var,
                                                      ab);
  FL_CUDA_GOTO(cudaGetLastError(), "batch-norm factor kernel", st);
  st = launch_affine(x, y, ab, d->channels, d->inner, d->batch * d->channels * d->inner, act, s);
fail:;
  fl_status fst = free_async(ab, s);
  return st != FL_OK ? st : fst;
}

/* Channel c's sum dz and sum dz*xhat over the block (every thread gets
 * them). */
__device__ static void block_bn_sums(const fl_norm_desc &d, size_t c, const float *x,
                                     const float *dy, const float *save_mean,
                                     const float *save_invstd, double *sdz_out,
                                     double *sdzx_out) {
  const size_t C = d.channels, S = d.inner, N = d.batch, m = N * S;
  const float mu = save_mean[c], is = save_invstd[c];
  double sdz = 0.0, sdzx = 0.0; /* sum dz, sum dz*xhat */
  for (size_t k = threadIdx.x; k < m; k += LT) {
    const size_t i = ((k / S) * C + c) * S + k % S;
    sdz += dy[i];
    sdzx += (double)dy[i] * (double)((x[i] - mu) * is);
  }
  *sdz_out = block_sum(sdz);
  *sdzx_out = block_sum(sdzx);
}

/* The (k, mean dz, mean dz*xhat) of channel c's dx pass. */
__device__ static float4 bn_dx_factors(const float *gamma, const float *save_invstd, size_t c,
                                       double sdz, double sdzx, double count) {
  const float g = gamma ? gamma[c] : 1.0f;
  return make_float4(g * save_invstd[c], (float)(sdz / count), (float)(sdzx / count), 0.0f);
}

/* Batch norm backward reductions, one block per channel: dgamma, dbeta and
 * the (k, mean dz, mean dz*xhat) of the dx pass. */
__global__ static void __launch_bounds__(LT)
    bn_grad_kernel(fl_norm_desc d, const float *x, const float *dy, const float *gamma,
                   const float *save_mean, const float *save_invstd, float *dgamma, float *dbeta,
                   float4 *k3) {
  const size_t c = blockIdx.x;
  double sdz, sdzx;
  block_bn_sums(d, c, x, dy, save_mean, save_invstd, &sdz, &sdzx);
  if (threadIdx.x != 0) return;
  if (dgamma) dgamma[c] = (float)sdzx;
  if (dbeta) dbeta[c] = (float)sdz;
  k3[c] = bn_dx_factors(gamma, save_invstd, c, sdz, sdzx, (double)(d.batch * d.inner));
}

/* dx = k*(dz - mean dz - xhat*mean(dz*xhat)), norm.c's expression. */
__global__ static void __launch_bounds__(LT)
    bn_dx_kernel(fl_norm_desc d, const float *x, const float *dy, const float *save_mean,
                 const float *save_invstd, const float4 *k3, float *dx) {
  const size_t n_all = d.batch * d.channels * d.inner;
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < n_all;
       i += (size_t)gridDim.x * LT) {
    const size_t c = (i / d.inner) % d.channels;
    const float mu = save_mean[c], is = save_invstd[c];
    const float k = k3[c].x, mdz = k3[c].y, mdzx = k3[c].z;
    dx[i] = k * (dy[i] - mdz - (x[i] - mu) * is * mdzx);
  }
}

extern "C" fl_status fl_batchnorm_backward_cuda(const fl_norm_desc *d, const float *x,
                                                const float *y, float *dy, const float *gamma,
                                                const float *save_mean, const float *save_invstd,
                                                float *dx, float *dgamma, float *dbeta,
                                                fl_act act, void *stream) {
  if (!norm_desc_ok(d) || !x || !dy || !save_mean || !save_invstd || !act_ok(act) ||
      (act != FL_ACT_NONE && !y) || d->channels > (size_t)INT32_MAX)
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  const size_t n = d->batch * d->channels * d->inner;
  fl_status st = FL_OK;
  float4 *k3 = NULL;
  if (act != FL_ACT_NONE) {
    act_backward_kernel<<<grid_for(n), LT, 0, s>>>((int)act, y, dy, dy, n);
    FL_CUDA_LAUNCHED("activation gradient kernel");
  }
  FL_CUDA_TRY(cudaMallocAsync((void **)&k3, d->channels * sizeof *k3, s),
              "cudaMallocAsync of batch-norm gradient factors");
  bn_grad_kernel<<<(unsigned)d->channels, LT, 0, s>>>(*d, x, dy, gamma, save_mean, save_invstd,
                                                      dgamma, dbeta, k3);
  if (dx) bn_dx_kernel<<<grid_for(n), LT, 0, s>>>(*d, x, dy, save_mean, save_invstd, k3, dx);
  FL_CUDA_GOTO(cudaGetLastError(), "batch-norm gradient kernels", st);
fail:;
  fl_status fst = free_async(k3, s);
  return st != FL_OK ? st : fst;
}

/* ------------------------------------------- batch norm in phases (SyncBN) */

/* sum[c], one block per channel (block_stats's first pass). */
__global__ static void __launch_bounds__(LT)
    bn_sum_kernel(fl_norm_desc d, const float *x, double *sum) {
  const size_t c = blockIdx.x, C = d.channels, S = d.inner;
  const double s = block_seg_sum(x + c * S, d.batch * S, S, C * S);
  if (threadIdx.x == 0) sum[c] = s;
}

/* sqdev[c] around sum[c]/count, one block per channel (the second pass). */
__global__ static void __launch_bounds__(LT)
    bn_sqdev_kernel(fl_norm_desc d, const float *x, const double *sum, double count,
                    double *sqdev) {
  const size_t c = blockIdx.x, C = d.channels, S = d.inner;
  const double v = block_seg_sqdev(x + c * S, d.batch * S, S, C * S, sum[c] / count);
  if (threadIdx.x == 0) sqdev[c] = v;
}

/* Per-channel factors from the given statistics. */
__global__ static void __launch_bounds__(LT)
    bn_apply_factors_kernel(fl_norm_desc d, const double *sum, const double *sqdev, double count,
                            const float *gamma, const float *beta, float *running_mean,
                            float *running_var, float *save_mean, float *save_invstd,
                            float2 *ab) {
  for (size_t c = (size_t)blockIdx.x * LT + threadIdx.x; c < d.channels;
       c += (size_t)gridDim.x * LT)
    bn_channel_factors(d, c, sum[c] / count, sqdev[c] / count, count, gamma, beta, running_mean,
                       running_var, save_mean, save_invstd, ab);
}

/* sums[c] = sum dz, sums[C + c] = sum dz*xhat, dgamma, dbeta; one block per
 * channel. */
__global__ static void __launch_bounds__(LT)
    bn_reduce_kernel(fl_norm_desc d, const float *x, const float *dy, const float *save_mean,
                     const float *save_invstd, double *sums, float *dgamma, float *dbeta) {
  const size_t c = blockIdx.x;
  double sdz, sdzx;
  block_bn_sums(d, c, x, dy, save_mean, save_invstd, &sdz, &sdzx);
  if (threadIdx.x != 0) return;
  sums[c] = sdz;
  sums[d.channels + c] = sdzx;
  if (dgamma) dgamma[c] = (float)sdzx;
  if (dbeta) dbeta[c] = (float)sdz;
}

/* The dx factors of every channel from the (summed) sums. */
__global__ static void __launch_bounds__(LT)
    bn_dx_factors_kernel(fl_norm_desc d, const float *gamma, const float *save_invstd,
                         const double *sums, double count, float4 *k3) {
  for (size_t c = (size_t)blockIdx.x * LT + threadIdx.x; c < d.channels;
       c += (size_t)gridDim.x * LT)
    k3[c] = bn_dx_factors(gamma, save_invstd, c, sums[c], sums[d.channels + c], count);
}

extern "C" fl_status fl_batchnorm_stats_sum_cuda(const fl_norm_desc *d, const float *x,
                                                 double *sum, void *stream) {
  if (!norm_desc_ok(d) || !x || !sum || d->channels > (size_t)INT32_MAX) return FL_EINVAL;
  bn_sum_kernel<<<(unsigned)d->channels, LT, 0, fl_stream(stream)>>>(*d, x, sum);
  FL_CUDA_LAUNCHED("batch-norm sum kernel");
  return FL_OK;
}

extern "C" fl_status fl_batchnorm_stats_sqdev_cuda(const fl_norm_desc *d, const float *x,
                                                   const double *sum, double count,
                                                   double *sqdev, void *stream) {
  if (!norm_desc_ok(d) || !x || !sum || !sqdev || !(count >= (double)(d->batch * d->inner)) ||
      !isfinite(count) || d->channels > (size_t)INT32_MAX)
    return FL_EINVAL;
  bn_sqdev_kernel<<<(unsigned)d->channels, LT, 0, fl_stream(stream)>>>(*d, x, sum, count, sqdev);
  FL_CUDA_LAUNCHED("batch-norm squared-deviation kernel");
  return FL_OK;
}

extern "C" fl_status fl_batchnorm_forward_apply_cuda(const fl_norm_desc *d, const float *x,
                                                     float *y, const float *gamma,
                                                     const float *beta, const double *sum,
                                                     const double *sqdev, double count,
                                                     float *running_mean, float *running_var,
                                                     float *save_mean, float *save_invstd,
                                                     fl_act act, void *stream) {
  if (!norm_desc_ok(d) || !x || !y || !sum || !sqdev || !save_mean || !save_invstd ||
      !act_ok(act) || (!running_mean) != (!running_var) || !(count >= 2.0) ||
      count < (double)(d->batch * d->inner) || !isfinite(count) || !(d->momentum >= 0.0f) ||
      d->momentum > 1.0f)
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  fl_status st = FL_OK;
  float2 *ab = NULL;
  FL_CUDA_TRY(cudaMallocAsync((void **)&ab, d->channels * sizeof *ab, s),
              "cudaMallocAsync of batch-norm factors");
  bn_apply_factors_kernel<<<grid_for(d->channels), LT, 0, s>>>(
      *d, sum, sqdev, count, gamma, beta, running_mean, running_var, save_mean, save_invstd, ab);
  FL_CUDA_GOTO(cudaGetLastError(), "batch-norm factor kernel", st);
  st = launch_affine(x, y, ab, d->channels, d->inner, d->batch * d->channels * d->inner, act, s);
fail:;
  fl_status fst = free_async(ab, s);
  return st != FL_OK ? st : fst;
}

extern "C" fl_status fl_batchnorm_backward_reduce_cuda(const fl_norm_desc *d, const float *x,
                                                       const float *y, float *dy,
                                                       const float *save_mean,
                                                       const float *save_invstd, double *sums,
                                                       float *dgamma, float *dbeta, fl_act act,
                                                       void *stream) {
  if (!norm_desc_ok(d) || !x || !dy || !save_mean || !save_invstd || !sums || !act_ok(act) ||
      (act != FL_ACT_NONE && !y) || d->channels > (size_t)INT32_MAX)
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  const size_t n = d->batch * d->channels * d->inner;
  if (act != FL_ACT_NONE) {
    act_backward_kernel<<<grid_for(n), LT, 0, s>>>((int)act, y, dy, dy, n);
    FL_CUDA_LAUNCHED("activation gradient kernel");
  }
  bn_reduce_kernel<<<(unsigned)d->channels, LT, 0, s>>>(*d, x, dy, save_mean, save_invstd, sums,
                                                        dgamma, dbeta);
  FL_CUDA_LAUNCHED("batch-norm gradient sums kernel");
  return FL_OK;
}

extern "C" fl_status fl_batchnorm_backward_apply_cuda(const fl_norm_desc *d, const float *x,
                                                      const float *dz, const float *gamma,
                                                      const float *save_mean,
                                                      const float *save_invstd,
                                                      const double *sums, double count,
                                                      float *dx, void *stream) {
  if (!norm_desc_ok(d) || !x || !dz || !save_mean || !save_invstd || !sums || !dx ||
      !(count >= (double)(d->batch * d->inner)) || !isfinite(count))
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  fl_status st = FL_OK;
  float4 *k3 = NULL;
  FL_CUDA_TRY(cudaMallocAsync((void **)&k3, d->channels * sizeof *k3, s),
              "cudaMallocAsync of batch-norm gradient factors");
  bn_dx_factors_kernel<<<grid_for(d->channels), LT, 0, s>>>(*d, gamma, save_invstd, sums, count,
                                                            k3);
  bn_dx_kernel<<<grid_for(d->batch * d->channels * d->inner), LT, 0, s>>>(
      *d, x, dz, save_mean, save_invstd, k3, dx);
  FL_CUDA_GOTO(cudaGetLastError(), "batch-norm gradient kernels", st);
fail:;
  fl_status fst = free_async(k3, s);
  return st != FL_OK ? st : fst;
}

extern "C" fl_status fl_groupnorm_forward_cuda(const fl_norm_desc *d, const float *x, float *y,
                                               const float *gamma, const float *beta,
                                               float *save_mean, float *save_invstd, fl_act act,
                                               void *stream) {
  if (!gn_desc_ok(d) || !x || !y || !save_mean || !save_invstd || !act_ok(act) ||
      d->batch * d->groups > (size_t)INT32_MAX)
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  const size_t nc = d->batch * d->channels;
  fl_status st = FL_OK;
  float2 *ab = NULL;
  FL_CUDA_TRY(cudaMallocAsync((void **)&ab, nc * sizeof *ab, s),
              "cudaMallocAsync of group-norm factors");
  gn_stats_kernel<<<(unsigned)(d->batch * d->groups), LT, 0, s>>>(*d, x, gamma, beta, save_mean,
                                                                   save_invstd, ab);
  FL_CUDA_GOTO(cudaGetLastError(), "group-norm statistics kernel", st);
  st = launch_affine(x, y, ab, nc, d->inner, nc * d->inner, act, s);
fail:;
  fl_status fst = free_async(ab, s);
  return st != FL_OK ? st : fst;
}

/* Group norm backward, 1: per (sample, channel) block, sum dz and sum
 * dz*xhat (double) into sums[2*(n*C + c)]. */
__global__ static void __launch_bounds__(LT)
    gn_sums_kernel(fl_norm_desc d, const float *x, const float *dy, const float *save_mean,
                   const float *save_invstd, double *sums) {
  const size_t C = d.channels, S = d.inner, G = d.groups, cg = C / G;
  const size_t nc = blockIdx.x, n = nc / C, c = nc % C, g = c / cg;
  const float mu = save_mean[n * G + g], is = save_invstd[n * G + g];
  const float *xp = x + nc * S, *gp = dy + nc * S;
  double sdz = 0.0, sdzx = 0.0;
  for (size_t k = threadIdx.x; k < S; k += LT) {
    sdz += gp[k];
    sdzx += (double)gp[k] * (double)((xp[k] - mu) * is);
  }
  sdz = block_sum(sdz);
  sdzx = block_sum(sdzx);
  if (threadIdx.x == 0) {
    sums[2 * nc] = sdz;
    sums[2 * nc + 1] = sdzx;
  }
}

/* 2: dgamma[c] and dbeta[c] accumulated in float over samples in order, as
 * norm.c does. */
__global__ static void __launch_bounds__(LT)
    gn_param_grad_kernel(fl_norm_desc d, const double *sums, float *dgamma, float *dbeta) {
  for (size_t c = (size_t)blockIdx.x * LT + threadIdx.x; c < d.channels;
       c += (size_t)gridDim.x * LT) {
    float gsum = 0.0f, bsum = 0.0f;
    for (size_t n = 0; n < d.batch; n++) {
      gsum += (float)sums[2 * (n * d.channels + c) + 1];
      bsum += (float)sums[2 * (n * d.channels + c)];
    }
    if (dgamma) dgamma[c] = gsum;
    if (dbeta) dbeta[c] = bsum;
  }
}

/* 3: per (sample, group), the means of dxhat and dxhat*xhat (channels summed
 * in order, in double). */
__global__ static void __launch_bounds__(LT)
    gn_group_kernel(fl_norm_desc d, const float *gamma, const double *sums, float2 *mg) {
  const size_t C = d.channels, G = d.groups, cg = C / G;
  const double m = (double)(cg * d.inner);
  for (size_t ng = (size_t)blockIdx.x * LT + threadIdx.x; ng < d.batch * G;
       ng += (size_t)gridDim.x * LT) {
    const size_t n = ng / G, g = ng % G;
    double sdxh = 0.0, sdxhx = 0.0;
    for (size_t c = g * cg; c < (g + 1) * cg; c++) {
      const float gm = gamma ? gamma[c] : 1.0f;
      sdxh += gm * sums[2 * (n * C + c)];
      sdxhx += gm * sums[2 * (n * C + c) + 1];
    }
    mg[ng] = make_float2((float)(sdxh / m), (float)(sdxhx / m));
  }
}

/* 4: dx = invstd*(dxhat - mean dxhat - xhat*mean(dxhat*xhat)). */
__global__ static void __launch_bounds__(LT)
    gn_dx_kernel(fl_norm_desc d, const float *x, const float *dy, const float *gamma,
                 const float *save_mean, const float *save_invstd, const float2 *mg, float *dx) {
  const size_t C = d.channels, S = d.inner, G = d.groups, cg = C / G;
  const size_t n_all = d.batch * C * S;
  for (size_t i = (size_t)blockIdx.x * LT + threadIdx.x; i < n_all;
       i += (size_t)gridDim.x * LT) {
    const size_t nc = i / S, n = nc / C, c = nc % C, ng = n * G + c / cg;
    const float mu = save_mean[ng], is = save_invstd[ng];
    const float gm = gamma ? gamma[c] : 1.0f;
    const float mdxh = mg[ng].x, mdxhx = mg[ng].y;
    dx[i] = is * (gm * dy[i] - mdxh - (x[i] - mu) * is * mdxhx);
  }
}

extern "C" fl_status fl_groupnorm_backward_cuda(const fl_norm_desc *d, const float *x,
                                                const float *y, float *dy, const float *gamma,
                                                const float *save_mean, const float *save_invstd,
                                                float *dx, float *dgamma, float *dbeta,
                                                fl_act act, void *stream) {
  if (!gn_desc_ok(d) || !x || !dy || !save_mean || !save_invstd || !act_ok(act) ||
      (act != FL_ACT_NONE && !y) || d->batch * d->channels > (size_t)INT32_MAX)
    return FL_EINVAL;
  cudaStream_t s = fl_stream(stream);
  const size_t nc = d->batch * d->channels, n = nc * d->inner, ng = d->batch * d->groups;
  fl_status st = FL_OK;
  void *mem = NULL;
  if (act != FL_ACT_NONE) {
    act_backward_kernel<<<grid_for(n), LT, 0, s>>>((int)act, y, dy, dy, n);
    FL_CUDA_LAUNCHED("activation gradient kernel");
  }
  const size_t mg_off = align_up(2 * nc * sizeof(double));
  FL_CUDA_TRY(cudaMallocAsync(&mem, mg_off + ng * sizeof(float2), s),
              "cudaMallocAsync of group-norm gradient sums");
  {
    double *sums = (double *)mem;
    float2 *mg = (float2 *)((char *)mem + mg_off);
    gn_sums_kernel<<<(unsigned)nc, LT, 0, s>>>(*d, x, dy, save_mean, save_invstd, sums);
    if (dgamma || dbeta)
      gn_param_grad_kernel<<<grid_for(d->channels), LT, 0, s>>>(*d, sums, dgamma, dbeta);
    if (dx) {
      gn_group_kernel<<<grid_for(ng), LT, 0, s>>>(*d, gamma, sums, mg);
      gn_dx_kernel<<<grid_for(n), LT, 0, s>>>(*d, x, dy, gamma, save_mean, save_invstd, mg, dx);
    }
  }
  FL_CUDA_GOTO(cudaGetLastError(), "group-norm gradient kernels", st);
fail:;
  fl_status fst = free_async(mem, s);
  return st != FL_OK ? st : fst;
}
