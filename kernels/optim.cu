/* optim.cu - the CUDA twins of fl_optim.h: optimizer steps, gradient merge,
 * AMP unscaling and the fp16/bf16 casts over device pointers.
 *
 * Multi-tensor: one launch covers up to MT_MAX tensors, their pointers and
 * sizes passed by value in a kernel parameter (mt_batch), each block working
 * on one MT_CHUNK-element chunk of one tensor.  Every element is updated by
 * exactly the float operations, in the same order, as kernels/optim.c does
 * (the build disables FMA contraction for this reason), and the scalars of
 * a step (bias corrections, 1/scale) are computed on the host as the CPU
 * computes them, so the twins agree to the last bit or nearly.
 *
 * LARS and LAMB need whole-tensor norms: a first launch writes one partial
 * sum of squares (in double) per block, a second reduces each tensor's
 * partials in block order and computes its local learning rate or trust
 * ratio on the device, a third applies the update.  Fixed chunking, fixed
 * block order, no float atomics: same inputs, same bits, with no round trip
 * to the host.  Arguments are validated on the host before anything is
 * queued, with the CPU twin's rules. */
#include <config.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "fl_optim.h"

#define MT_MAX 32       /* tensors per launch (kernel parameters < 4 KiB) */
#define MT_THREADS 256  /* threads per block */
#define MT_ILP 4        /* elements in flight per thread */
#define MT_CHUNK (MT_THREADS * MT_ILP * 4) /* elements per block */

/* Unroll the ILP loops in device code (the host pass knows no such pragma). */
#ifdef __CUDA_ARCH__
#define MT_UNROLL _Pragma("unroll")
#else
#define MT_UNROLL
#endif

/* One launch's tensors.  a is the written tensor (param, accumulator), b the
 * read-only one (grad), s1/s2 the state buffers; first is the index of
 * tensor 0 in the whole call and block0 the index of its first block (for
 * the per-tensor and per-block scratch arrays of LARS and LAMB). */
struct mt_batch {
  float *a[MT_MAX];
  const float *b[MT_MAX];
  float *s1[MT_MAX];
  float *s2[MT_MAX];
  long long n[MT_MAX];
  float wd[MT_MAX];
  int first;
  int block0;
  int nt;
  int block_start[MT_MAX + 1]; /* tensor i owns blocks [block_start[i], block_start[i+1]) */
};

static int mt_blocks(size_t n) { return (int)((n + MT_CHUNK - 1) / MT_CHUNK); }

static void mt_reset(mt_batch *b, int first, int block0) {
  memset(b, 0, sizeof *b);
  b->first = first;
  b->block0 = block0;
}

/* Append a tensor (n > 0); true when the batch is full. */
static bool mt_push(mt_batch *b, float *a, const float *bb, float *s1, float *s2, size_t n,
                    float wd) {
  int i = b->nt++;
  b->a[i] = a;
  b->b[i] = bb;
  b->s1[i] = s1;
  b->s2[i] = s2;
  b->n[i] = (long long)n;
  b->wd[i] = wd;
  b->block_start[i + 1] = b->block_start[i] + mt_blocks(n);
  return b->nt == MT_MAX;
}

/* The tensor that owns block blk: the last i with block_start[i] <= blk. */
__host__ __device__ static int mt_tensor(const mt_batch &b, int blk) {
  int lo = 0, hi = b.nt - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (b.block_start[mid] <= blk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* The element loop every multi-tensor kernel shares: this block's chunk,
 * MT_ILP loads issued before any store.  Op::load fills an element record,
 * Op::run updates and stores it and returns its squares (for the norms;
 * ignored by plain updates).  The per-thread sums run in element order.
 * Block and thread index are parameters, so the loop is plain host+device
 * code (it can be stepped through on the host). */
template <class Op>
__host__ __device__ static double2 mt_chunk(const mt_batch &b, const Op &op, int blk, int tid) {
  const int t = mt_tensor(b, blk);
  const long long n = b.n[t];
  const long long start = (long long)(blk - b.block_start[t]) * MT_CHUNK;
  const long long end = start + MT_CHUNK < n ? start + MT_CHUNK : n;
  const typename Op::tensor_scalars ts = op.prepare(b, t);
  double2 acc = make_double2(0.0, 0.0);
  for (long long base = start + tid; base < end; base += MT_THREADS * MT_ILP) {
    typename Op::elem e[MT_ILP];
    MT_UNROLL
    for (int k = 0; k < MT_ILP; k++) {
      long long i = base + (long long)k * MT_THREADS;
      if (i < end) op.load(b, t, i, e[k]);
    }
    MT_UNROLL
    for (int k = 0; k < MT_ILP; k++) {
      long long i = base + (long long)k * MT_THREADS;
      if (i < end) {
        double2 sq = op.run(b, t, i, e[k], ts);
        acc.x += sq.x;
        acc.y += sq.y;
      }
    }
  }
  return acc;
}

template <class Op>
__global__ static void __launch_bounds__(MT_THREADS) mt_apply(mt_batch b, Op op) {
  (void)mt_chunk(b, op, blockIdx.x, threadIdx.x);
}

/* Sum a double2 over the block in a fixed tree order; thread 0 gets it. */
__device__ static double2 block_sum(double2 v) {
  __shared__ double2 sh[MT_THREADS];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = MT_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      sh[threadIdx.x].x += sh[threadIdx.x + s].x;
      sh[threadIdx.x].y += sh[threadIdx.x + s].y;
    }
    __syncthreads();
  }
  return sh[0];
}

/* Phase 1 of LARS/LAMB: the update part that needs no norm (LAMB's moments)
 * and one partial sum of squares per block. */
template <class Op>
__global__ static void __launch_bounds__(MT_THREADS)
    mt_partials(mt_batch b, Op op, double2 *partials) {
  double2 s = block_sum(mt_chunk(b, op, blockIdx.x, threadIdx.x));
  if (threadIdx.x == 0) partials[b.block0 + blockIdx.x] = s;
}

/* Phase 2: block t reduces tensor t's partials in block order and stores
 * the tensor's factor (LARS local lr, LAMB lr*trust) in factor[first+t]. */
template <class Op>
__global__ static void __launch_bounds__(MT_THREADS)
    mt_factors(mt_batch b, Op op, const double2 *partials, float *factor) {
  const int t = blockIdx.x;
  const int lo = b.block0 + b.block_start[t], hi = b.block0 + b.block_start[t + 1];
  double2 acc = make_double2(0.0, 0.0);
  for (int i = lo + (int)threadIdx.x; i < hi; i += MT_THREADS) {
    acc.x += partials[i].x;
    acc.y += partials[i].y;
  }
  double2 s = block_sum(acc);
  if (threadIdx.x == 0) factor[b.first + t] = op.factor(s.x, s.y, b.wd[t]);
}

/* ------------------------------------------------------------ the updates
 * Each op mirrors the matching loop of optim.c expression for expression.
 * A tensor gets weight decay exactly when its wd (b.wd[t]) is > 0. */

/* The scalars of one step, computed on the host in double and rounded to
 * float exactly as fl_optim_step computes them. */
struct step_scalars {
  float lr, wd, mu, b1, omb1, b2, omb2, eps, lars_coeff;
  float step_size; /* Adam, AdamW: lr / (1 - beta1^t) */
  float rbc1;      /* LAMB: 1 / (1 - beta1^t) */
  float rbc2s;     /* Adam family: 1 / sqrt(1 - beta2^t) */
  float shrink;    /* AdamW: 1 - lr*wd */
  int nesterov;
};

static step_scalars make_scalars(const fl_optim_hparams *hp, float lr, int64_t step) {
  step_scalars c;
  memset(&c, 0, sizeof c);
  c.nesterov = hp->nesterov;
  c.lr = lr;
  c.wd = hp->weight_decay;
  c.mu = hp->momentum;
  c.b1 = hp->beta1;
  c.b2 = hp->beta2;
  c.omb1 = (float)(1.0 - (double)hp->beta1);
  c.omb2 = (float)(1.0 - (double)hp->beta2);
  c.eps = hp->epsilon;
  c.lars_coeff = hp->lars_coeff;
  double bc1 = 1.0 - pow(hp->beta1, (double)step), bc2 = 1.0 - pow(hp->beta2, (double)step);
  c.step_size = (float)((double)lr / bc1);
  c.rbc1 = (float)(1.0 / bc1);
  c.rbc2s = (float)(1.0 / sqrt(bc2));
  c.shrink = (float)(1.0 - (double)lr * hp->weight_decay);
  return c;
}

struct no_scalars {};
/* A tensor's weight decay and its factor from the norm phase. */
struct ratio_scalars {
  float wd;
  float factor;
};

/* SGD: g += wd*p; p -= lr*g. */
struct sgd_op {
  step_scalars c;
  struct elem {
    float p, g;
  };
  typedef float tensor_scalars;
  __host__ __device__ float prepare(const mt_batch &b, int t) const { return b.wd[t]; }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const {
    e.p = b.a[t][i];
    e.g = b.b[t][i];
  }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, float wd) const {
    float gi = e.g;
    if (wd > 0.0f) gi = gi + wd * e.p;
    b.a[t][i] = e.p - c.lr * gi;
    return make_double2(0.0, 0.0);
  }
};

/* Momentum: g += wd*p; v = mu*v + g; p -= lr*v (Nesterov: lr*(g + mu*v)). */
struct momentum_op {
  step_scalars c;
  struct elem {
    float p, g, v;
  };
  typedef float tensor_scalars;
  __host__ __device__ float prepare(const mt_batch &b, int t) const { return b.wd[t]; }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const {
    e.p = b.a[t][i];
    e.g = b.b[t][i];
    e.v = b.s1[t][i];
  }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, float wd) const {
    float gi = e.g;
    if (wd > 0.0f) gi = gi + wd * e.p;
    float vi = c.mu * e.v + gi;
    b.s1[t][i] = vi;
    float d = c.nesterov ? gi + c.mu * vi : vi;
    b.a[t][i] = e.p - c.lr * d;
    return make_double2(0.0, 0.0);
  }
};

/* Adam (g += wd*p) and AdamW (decoupled: p *= 1 - lr*wd), bias-corrected
 * through step_size and rbc2s. */
struct adam_op {
  step_scalars c;
  int adamw;
  struct elem {
    float p, g, m, v;
  };
  typedef float tensor_scalars;
  __host__ __device__ float prepare(const mt_batch &b, int t) const { return b.wd[t]; }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const {
    e.p = b.a[t][i];
    e.g = b.b[t][i];
    e.m = b.s1[t][i];
    e.v = b.s2[t][i];
  }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, float wd) const {
    float pi = e.p, gi = e.g;
    if (wd > 0.0f && adamw) pi = pi * c.shrink;
    if (wd > 0.0f && !adamw) gi = gi + wd * pi;
    float mi = c.b1 * e.m + c.omb1 * gi;
    float vi = c.b2 * e.v + c.omb2 * gi * gi;
    b.s1[t][i] = mi;
    b.s2[t][i] = vi;
    b.a[t][i] = pi - c.step_size * (mi / (sqrtf(vi) * c.rbc2s + c.eps));
    return make_double2(0.0, 0.0);
  }
};

/* Adagrad: g += wd*p; s += g*g; p -= lr*(g/(sqrt(s) + eps)). */
struct adagrad_op {
  step_scalars c;
  struct elem {
    float p, g, s;
  };
  typedef float tensor_scalars;
  __host__ __device__ float prepare(const mt_batch &b, int t) const { return b.wd[t]; }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const {
    e.p = b.a[t][i];
    e.g = b.b[t][i];
    e.s = b.s1[t][i];
  }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, float wd) const {
    float gi = e.g;
    if (wd > 0.0f) gi = gi + wd * e.p;
    float si = e.s + gi * gi;
    b.s1[t][i] = si;
    b.a[t][i] = e.p - c.lr * (gi / (sqrtf(si) + c.eps));
    return make_double2(0.0, 0.0);
  }
};

/* The factor of the update phase from the two squared norms (double), as
 * optim.c's norm_scale: LARS local_lr = lr*coeff*||p||/(||g|| + wd*||p|| +
 * eps), LAMB lr*trust = lr*(||p||/||r||); lr when the tensor has no decay
 * or a norm is 0. */
__host__ __device__ static float norm_factor(const step_scalars &c, int lars, float wd, double sp,
                                    double sx) {
  double pn = sqrt(sp), xn = sqrt(sx), lr = c.lr;
  if (!(wd > 0.0f) || !(pn > 0.0) || !(xn > 0.0)) return c.lr;
  if (lars) return (float)(lr * c.lars_coeff * pn / (xn + (double)c.wd * pn + c.eps));
  return (float)(lr * (pn / xn));
}

/* LARS phase 1: squares of p and g. */
struct lars_norm_op {
  step_scalars c;
  struct elem {
    float p, g;
  };
  typedef no_scalars tensor_scalars;
  __host__ __device__ no_scalars prepare(const mt_batch &, int) const { return no_scalars(); }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const {
    e.p = b.a[t][i];
    e.g = b.b[t][i];
  }
  __host__ __device__ double2 run(const mt_batch &, int, long long, elem &e, no_scalars) const {
    return make_double2((double)e.p * (double)e.p, (double)e.g * (double)e.g);
  }
  __host__ __device__ float factor(double sp, double sx, float wd) const {
    return norm_factor(c, 1, wd, sp, sx);
  }
};

/* LARS phase 3: g += wd*p; v = mu*v + local_lr*g; p -= v. */
struct lars_apply_op {
  step_scalars c;
  const float *factor;
  struct elem {
    float p, g, v;
  };
  typedef ratio_scalars tensor_scalars;
  __host__ __device__ ratio_scalars prepare(const mt_batch &b, int t) const {
    ratio_scalars r;
    r.wd = b.wd[t];
    r.factor = factor[b.first + t];
    return r;
  }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const {
    e.p = b.a[t][i];
    e.g = b.b[t][i];
    e.v = b.s1[t][i];
  }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, ratio_scalars r) const {
    float gi = e.g;
    if (r.wd > 0.0f) gi = gi + r.wd * e.p;
    float vi = c.mu * e.v + r.factor * gi;
    b.s1[t][i] = vi;
    b.a[t][i] = e.p - vi;
    return make_double2(0.0, 0.0);
  }
};

/* LAMB's update direction r = (m*rbc1)/(sqrt(v)*rbc2s + eps) (+ wd*p when
 * the tensor decays): the same expression in both phases, so phase 3
 * recomputes phase 1's r bit for bit. */
__host__ __device__ static inline float lamb_r(const step_scalars &c, float mi, float vi, float pi,
                                      float wd) {
  float r = (mi * c.rbc1) / (sqrtf(vi) * c.rbc2s + c.eps);
  if (wd > 0.0f) r = r + wd * pi;
  return r;
}

/* LAMB phase 1: the moments, and the squares of p and r. */
struct lamb_moments_op {
  step_scalars c;
  struct elem {
    float p, g, m, v;
  };
  typedef float tensor_scalars;
  __host__ __device__ float prepare(const mt_batch &b, int t) const { return b.wd[t]; }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const {
    e.p = b.a[t][i];
    e.g = b.b[t][i];
    e.m = b.s1[t][i];
    e.v = b.s2[t][i];
  }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, float wd) const {
    float gi = e.g;
    float mi = c.b1 * e.m + c.omb1 * gi;
    float vi = c.b2 * e.v + c.omb2 * gi * gi;
    b.s1[t][i] = mi;
    b.s2[t][i] = vi;
    float r = lamb_r(c, mi, vi, e.p, wd);
    return make_double2((double)e.p * (double)e.p, (double)r * (double)r);
  }
  __host__ __device__ float factor(double sp, double sx, float wd) const {
    return norm_factor(c, 0, wd, sp, sx);
  }
};

/* LAMB phase 3: p -= (lr*trust)*r, r recomputed from the stored moments. */
struct lamb_apply_op {
  step_scalars c;
  const float *factor;
  struct elem {
    float p, m, v;
  };
  typedef ratio_scalars tensor_scalars;
  __host__ __device__ ratio_scalars prepare(const mt_batch &b, int t) const {
    ratio_scalars r;
    r.wd = b.wd[t];
    r.factor = factor[b.first + t];
    return r;
  }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const {
    e.p = b.a[t][i];
    e.m = b.s1[t][i];
    e.v = b.s2[t][i];
  }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, ratio_scalars r) const {
    b.a[t][i] = e.p - r.factor * lamb_r(c, e.m, e.v, e.p, r.wd);
    return make_double2(0.0, 0.0);
  }
};

/* ------------------------------------------------------------- launching */

template <class Op>
static fl_status launch_apply(const mt_batch &b, const Op &op, cudaStream_t s) {
  if (b.nt == 0) return FL_OK;
  mt_apply<Op><<<b.block_start[b.nt], MT_THREADS, 0, s>>>(b, op);
  FL_CUDA_LAUNCHED("multi-tensor update kernel");
  return FL_OK;
}

/* The three phases of a norm-based optimizer over one batch. */
template <class NormOp, class ApplyOp>
static fl_status launch_normed(const mt_batch &b, const NormOp &nop, const ApplyOp &aop,
                               double2 *partials, float *factor, cudaStream_t s) {
  if (b.nt == 0) return FL_OK;
  mt_partials<NormOp><<<b.block_start[b.nt], MT_THREADS, 0, s>>>(b, nop, partials);
  mt_factors<NormOp><<<b.nt, MT_THREADS, 0, s>>>(b, nop, partials, factor);
  mt_apply<ApplyOp><<<b.block_start[b.nt], MT_THREADS, 0, s>>>(b, aop);
  FL_CUDA_LAUNCHED("norm-based optimizer kernels");
  return FL_OK;
}

/* Whether byte ranges [a, a+n) and [b, b+n) overlap (NULLs never do). */
static bool overlaps(const void *a, const void *b, size_t n) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a != NULL && b != NULL && x < y + n && y < x + n;
}

/* Host-side validation with the CPU twin's rules (fl_optim_step's); nothing
 * is queued before it passes. */
static fl_status check_step(const fl_optim_hparams *hp, const fl_optim_tensor *t, size_t nt,
                            float lr, int64_t step) {
  const char *fn = "fl_optim_step_cuda";
  if (fl_optim_hparams_check(hp) != FL_OK)
    return FL_ERR(FL_EINVAL, "%s: invalid hyper-parameters", fn);
  if (!isfinite(lr) || !(lr >= 0.0f))
    return FL_ERR(FL_EINVAL, "%s: learning rate %g must be finite and >= 0", fn, (double)lr);
  if (step < 1) return FL_ERR(FL_EINVAL, "%s: step %lld must be >= 1", fn, (long long)step);
  if (t == NULL || nt == 0) return FL_ERR(FL_EINVAL, "%s: no tensors", fn);
  int ns = fl_optim_state_count(hp->kind);
  size_t sum = 0;
  for (size_t i = 0; i < nt; i++) {
    const fl_optim_tensor *x = &t[i];
    const char *name = x->name ? x->name : "(unnamed)";
    if (x->n == 0 || x->n > SIZE_MAX / (2 * sizeof(float)) || sum > SIZE_MAX / 2 - x->n)
      return FL_ERR(FL_EINVAL, "%s: tensor %zu (%s): bad length %zu", fn, i, name, x->n);
    if (x->param == NULL || x->grad == NULL)
      return FL_ERR(FL_EINVAL, "%s: tensor %zu (%s): NULL %s", fn, i, name,
                    x->param == NULL ? "param" : "grad");
    if ((ns >= 1 && x->state1 == NULL) || (ns >= 2 && x->state2 == NULL))
      return FL_ERR(FL_EINVAL, "%s: tensor %zu (%s): %s needs %d state buffer(s)", fn, i, name,
                    fl_optim_kind_name(hp->kind), ns);
    const void *buf[4] = {x->param, x->grad, ns >= 1 ? x->state1 : NULL,
                          ns >= 2 ? x->state2 : NULL};
    size_t bytes = x->n * sizeof(float);
    for (int a = 0; a < 4; a++)
      for (int b = a + 1; b < 4; b++)
        if (overlaps(buf[a], buf[b], bytes))
          return FL_ERR(FL_EINVAL, "%s: tensor %zu (%s): buffers %d and %d overlap", fn, i, name,
                        a, b);
    sum += x->n;
  }
  return FL_OK;
}

/* Run a plain (norm-free) update over all tensors, MT_MAX at a time. */
template <class Op>
static fl_status step_plain(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt,
                            const Op &op, cudaStream_t s) {
  mt_batch b;
  mt_reset(&b, 0, 0);
  for (size_t i = 0; i < nt; i++) {
    float wd = fl_optim_decays(hp, t[i].name) ? hp->weight_decay : 0.0f;
    if (mt_push(&b, t[i].param, t[i].grad, t[i].state1, t[i].state2, t[i].n, wd)) {
      FL_CU_TRY(launch_apply(b, op, s));
      mt_reset(&b, 0, 0);
    }
  }
  return launch_apply(b, op, s);
}

/* LARS/LAMB over all tensors, with stream-ordered scratch for the partial
 * sums (one per block of the whole call) and the per-tensor factors. */
template <class NormOp, class ApplyOp>
static fl_status step_normed(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt,
                             const NormOp &nop, ApplyOp aop, cudaStream_t s) {
  size_t nblocks = 0;
  for (size_t i = 0; i < nt; i++) nblocks += (size_t)mt_blocks(t[i].n);
  if (nblocks > (size_t)INT_MAX || nt > (size_t)INT_MAX)
    return FL_ERR(FL_EINVAL, "fl_optim_step_cuda: %zu tensors in %zu blocks is too many", nt,
                  nblocks);
  fl_status st = FL_OK;
  void *scratch = NULL;
  size_t bytes = nblocks * sizeof(double2) + nt * sizeof(float);
  FL_CUDA_TRY(cudaMallocAsync(&scratch, bytes, s), "cudaMallocAsync of the norm scratch");
  double2 *partials = (double2 *)scratch;
  float *factor = (float *)(partials + nblocks);
  aop.factor = factor;
  mt_batch b;
  mt_reset(&b, 0, 0);
  for (size_t i = 0; i < nt; i++) {
    float wd = fl_optim_decays(hp, t[i].name) ? hp->weight_decay : 0.0f;
    if (mt_push(&b, t[i].param, t[i].grad, t[i].state1, t[i].state2, t[i].n, wd)) {
      st = launch_normed(b, nop, aop, partials, factor, s);
      if (st != FL_OK) goto fail;
      mt_reset(&b, (int)i + 1, b.block0 + b.block_start[b.nt]);
    }
  }
  st = launch_normed(b, nop, aop, partials, factor, s);
fail:;
  cudaError_t e = cudaFreeAsync(scratch, s);
  if (e != cudaSuccess && st == FL_OK)
    st = FL_ERR(FL_ECUDA, "fl_optim_step_cuda: cudaFreeAsync: %s", cudaGetErrorString(e));
  return st;
}

extern "C" fl_status fl_optim_step_cuda(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt,
                                        float lr, int64_t step, void *stream) {
  if (hp != NULL && fl_optim_sparse_only(hp->kind))
    return FL_ERR(FL_ENOTSUP, "fl_optim_step_cuda: %s is for sparse-table rows (CPU) only",
                  fl_optim_kind_name(hp->kind));
  FL_CU_TRY(check_step(hp, t, nt, lr, step));
  cudaStream_t s = fl_stream(stream);
  step_scalars c = make_scalars(hp, lr, step);
  switch (hp->kind) {
  case FL_OPTIM_SGD: return step_plain(hp, t, nt, sgd_op{c}, s);
  case FL_OPTIM_MOMENTUM: return step_plain(hp, t, nt, momentum_op{c}, s);
  case FL_OPTIM_ADAM: return step_plain(hp, t, nt, adam_op{c, 0}, s);
  case FL_OPTIM_ADAMW: return step_plain(hp, t, nt, adam_op{c, 1}, s);
  case FL_OPTIM_ADAGRAD: return step_plain(hp, t, nt, adagrad_op{c}, s);
  case FL_OPTIM_LARS: return step_normed(hp, t, nt, lars_norm_op{c}, lars_apply_op{c, NULL}, s);
  case FL_OPTIM_LAMB:
    return step_normed(hp, t, nt, lamb_moments_op{c}, lamb_apply_op{c, NULL}, s);
  case FL_OPTIM_ROWWISE_ADAGRAD:
  case FL_OPTIM_FTRL: break; /* refused above, before check_step */
  case FL_OPTIM_COUNT: break;
  }
  return FL_ERR(FL_EINVAL, "fl_optim_step_cuda: unknown optimizer kind %d", (int)hp->kind);
}

/* --------------------------------------------------------- gradient merge */

/* acc += g. */
struct accumulate_op {
  struct elem {
    float a, g;
  };
  typedef no_scalars tensor_scalars;
  __host__ __device__ no_scalars prepare(const mt_batch &, int) const { return no_scalars(); }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const {
    e.a = b.a[t][i];
    e.g = b.b[t][i];
  }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, no_scalars) const {
    b.a[t][i] = e.a + e.g;
    return make_double2(0.0, 0.0);
  }
};

/* acc /= k. */
struct divide_op {
  float k;
  struct elem {
    float a;
  };
  typedef no_scalars tensor_scalars;
  __host__ __device__ no_scalars prepare(const mt_batch &, int) const { return no_scalars(); }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const { e.a = b.a[t][i]; }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, no_scalars) const {
    b.a[t][i] = e.a / k;
    return make_double2(0.0, 0.0);
  }
};

/* Run op over tensors a[i] (and b[i] when b is not NULL) of n[i] elements,
 * MT_MAX at a time. */
template <class Op>
static fl_status run_list(float *const *a, const float *const *b, const size_t *n, size_t nt,
                          const Op &op, cudaStream_t s) {
  mt_batch batch;
  mt_reset(&batch, 0, 0);
  for (size_t i = 0; i < nt; i++) {
    if (mt_push(&batch, a[i], b ? b[i] : NULL, NULL, NULL, n[i], 0.0f)) {
      FL_CU_TRY(launch_apply(batch, op, s));
      mt_reset(&batch, 0, 0);
    }
  }
  return launch_apply(batch, op, s);
}

/* The CPU twin's checks on a tensor list (gradmerge.c, amp.c): non-NULL
 * arrays, nt > 0, every tensor non-NULL with n > 0, and, when b is given,
 * b[i] non-NULL and not overlapping a[i]. */
static fl_status check_list(const char *fn, float *const *a, const float *const *b,
                            const size_t *n, size_t nt) {
  if (a == NULL || n == NULL || nt == 0) return FL_ERR(FL_EINVAL, "%s: empty tensor list", fn);
  size_t sum = 0;
  for (size_t i = 0; i < nt; i++) {
    if (a[i] == NULL || n[i] == 0 || n[i] > SIZE_MAX / (2 * sizeof(float)) ||
        sum > SIZE_MAX / 2 - n[i])
      return FL_ERR(FL_EINVAL, "%s: tensor %zu: NULL or bad length %zu", fn, i, n[i]);
    if (b != NULL && (b[i] == NULL || overlaps(a[i], b[i], n[i] * sizeof(float))))
      return FL_ERR(FL_EINVAL, "%s: tensor %zu: addend NULL or overlapping", fn, i);
    sum += n[i];
  }
  return FL_OK;
}

extern "C" fl_status fl_gm_accumulate_cuda(float *const *acc, const float *const *g,
                                           const size_t *n, size_t nt, void *stream) {
  if (g == NULL) return FL_ERR(FL_EINVAL, "%s: NULL gradient list", __func__);
  FL_CU_TRY(check_list(__func__, acc, g, n, nt));
  accumulate_op op;
  return run_list(acc, g, n, nt, op, fl_stream(stream));
}

extern "C" fl_status fl_gm_finalize_cuda(float *const *acc, const size_t *n, size_t nt,
                                         int k_steps, int avg, void *stream) {
  if (k_steps < 1) return FL_ERR(FL_EINVAL, "%s: k_steps %d must be >= 1", __func__, k_steps);
  FL_CU_TRY(check_list(__func__, acc, NULL, n, nt));
  if (!avg || k_steps == 1) return FL_OK;
  divide_op op = {(float)k_steps};
  return run_list(acc, NULL, n, nt, op, fl_stream(stream));
}

/* -------------------------------------------------------------------- AMP */

/* t *= inv_scale; *flag = 1 when the element before unscaling is not
 * finite (every writer stores the same 1, so the race is benign). */
struct unscale_op {
  float inv_scale;
  int *flag;
  struct elem {
    float a;
  };
  typedef no_scalars tensor_scalars;
  __host__ __device__ no_scalars prepare(const mt_batch &, int) const { return no_scalars(); }
  __host__ __device__ void load(const mt_batch &b, int t, long long i, elem &e) const { e.a = b.a[t][i]; }
  __host__ __device__ double2 run(const mt_batch &b, int t, long long i, elem &e, no_scalars) const {
    if (!isfinite(e.a)) *flag = 1;
    b.a[t][i] = e.a * inv_scale;
    return make_double2(0.0, 0.0);
  }
};

extern "C" fl_status fl_amp_check_finite_and_unscale_cuda(float *const *t, const size_t *n,
                                                          size_t nt, float scale, int *found_inf,
                                                          void *stream) {
  if (found_inf == NULL) return FL_ERR(FL_EINVAL, "%s: NULL found_inf", __func__);
  if (!(scale > 0.0f) || !isfinite(scale))
    return FL_ERR(FL_EINVAL, "%s: loss scale %g must be finite and > 0", __func__, (double)scale);
  FL_CU_TRY(check_list(__func__, t, NULL, n, nt));
  cudaStream_t s = fl_stream(stream);
  fl_status st = FL_OK;
  int *flag = NULL, host_flag = 0;
  FL_CUDA_TRY(cudaMallocAsync((void **)&flag, sizeof *flag, s), "cudaMallocAsync of found_inf");
  FL_CUDA_GOTO(cudaMemsetAsync(flag, 0, sizeof *flag, s), "clearing found_inf", st);
  {
    unscale_op op = {(float)(1.0 / (double)scale), flag};
    st = run_list(t, NULL, n, nt, op, s);
    if (st != FL_OK) goto fail;
  }
  FL_CUDA_GOTO(cudaMemcpyAsync(&host_flag, flag, sizeof host_flag, cudaMemcpyDeviceToHost, s),
               "reading found_inf", st);
  FL_CUDA_GOTO(cudaStreamSynchronize(s), "waiting for found_inf", st);
  *found_inf = host_flag != 0;
fail:;
  cudaError_t e = cudaFreeAsync(flag, s);
  if (e != cudaSuccess && st == FL_OK)
    st = FL_ERR(FL_ECUDA, "%s: cudaFreeAsync: %s", __func__, cudaGetErrorString(e));
  return st;
}

/* ------------------------------------------------------------------ casts
 * The bit recipes are in cuda_internal.h (shared with the AMP GEMMs). */

/* Which cast a cast_kernel performs. */
enum cast_kind { CAST_F32_F16, CAST_F16_F32, CAST_F32_BF16, CAST_BF16_F32 };

#define CAST_THREADS 256
#define CAST_MAX_BLOCKS 65536

template <int K>
__global__ static void __launch_bounds__(CAST_THREADS)
    cast_kernel(const void *__restrict__ src, void *__restrict__ dst, size_t n) {
  size_t stride = (size_t)gridDim.x * CAST_THREADS;
  for (size_t i = (size_t)blockIdx.x * CAST_THREADS + threadIdx.x; i < n; i += stride) {
    if (K == CAST_F32_F16)
      ((uint16_t *)dst)[i] = f32_to_f16(((const float *)src)[i]);
    else if (K == CAST_F16_F32)
      ((float *)dst)[i] = f16_to_f32(((const uint16_t *)src)[i]);
    else if (K == CAST_F32_BF16)
      ((uint16_t *)dst)[i] = f32_to_bf16(((const float *)src)[i]);
    else
      ((float *)dst)[i] = bf16_to_f32(((const uint16_t *)src)[i]);
  }
}

/* cast.c's argument rules, then one grid-stride launch. */
template <int K>
static fl_status cast(const char *fn, const void *src, size_t ssize, void *dst, size_t dsize,
                      size_t n, void *stream) {
  if (n == 0) return FL_OK;
  if (src == NULL || dst == NULL || n > SIZE_MAX / sizeof(float))
    return FL_ERR(FL_EINVAL, "%s: NULL buffer or bad length %zu", fn, n);
  uintptr_t x = (uintptr_t)src, y = (uintptr_t)dst;
  if (x < y + n * dsize && y < x + n * ssize)
    return FL_ERR(FL_EINVAL, "%s: source and destination overlap", fn);
  size_t blocks = (n + CAST_THREADS - 1) / CAST_THREADS;
  if (blocks > CAST_MAX_BLOCKS) blocks = CAST_MAX_BLOCKS;
  cast_kernel<K><<<(unsigned)blocks, CAST_THREADS, 0, fl_stream(stream)>>>(src, dst, n);
  FL_CUDA_LAUNCHED("cast kernel");
  return FL_OK;
}

extern "C" fl_status fl_cast_f32_to_f16_cuda(const float *src, uint16_t *dst, size_t n,
                                             void *stream) {
  return cast<CAST_F32_F16>(__func__, src, 4, dst, 2, n, stream);
}

extern "C" fl_status fl_cast_f16_to_f32_cuda(const uint16_t *src, float *dst, size_t n,
                                             void *stream) {
  return cast<CAST_F16_F32>(__func__, src, 2, dst, 4, n, stream);
}

extern "C" fl_status fl_cast_f32_to_bf16_cuda(const float *src, uint16_t *dst, size_t n,
                                              void *stream) {
  return cast<CAST_F32_BF16>(__func__, src, 4, dst, 2, n, stream);
}

extern "C" fl_status fl_cast_bf16_to_f32_cuda(const uint16_t *src, float *dst, size_t n,
                                              void *stream) {
  return cast<CAST_BF16_F32>(__func__, src, 2, dst, 4, n, stream);
}
