/* fl_optim.h - Flotilla's optimizer, gradient-merge, AMP and cast kernels.
 *
 * One header for the CPU and the CUDA builds: every fl_*_cuda function takes
 * device pointers and a cudaStream_t passed as void* (NULL = default stream)
 * and computes what its CPU twin computes (within 1e-6 relative).  In a tree
 * built without CUDA the _cuda functions exist and return FL_ENOTSUP.
 *
 * It is a plain C ABI: pointers, sizes and structs of scalars, no callbacks
 * and no hidden allocation, so other languages can call it through an FFI.
 * The caller owns every buffer; no function keeps a pointer after it returns.
 * The numerics are those of docs/DESIGN.md section 5 (PyTorch conventions
 * for the plain optimizers, Paddle's for LARS and LAMB). */
#ifndef FL_OPTIM_H
#define FL_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- optimizers */

typedef enum fl_optim_kind {
  FL_OPTIM_SGD = 0,
  FL_OPTIM_MOMENTUM = 1, /* heavy-ball, optionally Nesterov */
  FL_OPTIM_ADAM = 2,
  FL_OPTIM_ADAMW = 3,
  FL_OPTIM_ADAGRAD = 4,
  FL_OPTIM_LARS = 5, /* momentum inner optimizer */
  FL_OPTIM_LAMB = 6, /* adam inner optimizer */
  /* Sparse-table rows only (fl_optim_sparse_only): */
  FL_OPTIM_ROWWISE_ADAGRAD = 7, /* one accumulator per tensor (= per row) */
  FL_OPTIM_FTRL = 8             /* FTRL-Proximal, per element z and n */
} fl_optim_kind;

/* Hyper-parameters shared by every tensor of one step.  Fields an optimizer
 * does not use are ignored.  Fill with fl_optim_hparams_default() first. */
typedef struct fl_optim_hparams {
  fl_optim_kind kind;
  float momentum;     /* Momentum, LARS: mu (default 0.9) */
  int nesterov;       /* Momentum: 1 for Nesterov */
  float beta1;        /* Adam, AdamW, LAMB (0.9) */
  float beta2;        /* Adam, AdamW, LAMB (0.999) */
  float epsilon;      /* Adam/AdamW 1e-8, Adagrad 1e-10 (PyTorch's), LAMB 1e-6, LARS 0 */
  float weight_decay; /* wd; LARS: lars_weight_decay, LAMB: lamb_weight_decay */
  float lars_coeff;   /* LARS trust coefficient (0.001) */
  float initial_accumulator; /* Adagrad, row-wise Adagrad: start of s; FTRL: of n (0) */
  float l1;           /* FTRL: L1 strength (0) */
  float l2;           /* FTRL: L2 strength (0) */
  float beta;         /* FTRL: beta (0) */
  float lr_power;     /* FTRL: <= 0 (-0.5) */
  /* Parameters whose name contains one of these substrings get wd = 0
   * (and so no LARS/LAMB trust ratio).  May be NULL when n_exclude is 0. */
  const char *const *exclude_from_weight_decay;
  size_t n_exclude;
  /* CPU threads for one step; <= 0 means OpenMP's default (all cores or
   * OMP_NUM_THREADS).  Capped so each thread gets >= 16K elements.  The
   * result is the same bits whatever the count. */
  int num_threads;
} fl_optim_hparams;

/* One parameter tensor and its state for a multi-tensor step.  state1 and
 * state2 hold fl_optim_state_len(kind, n) floats each (n, or 1 for row-wise
 * Adagrad) when fl_optim_state_count() says the optimizer needs them
 * (momentum / Adam m / Adagrad sum / FTRL z; Adam v / FTRL n) and are
 * ignored otherwise (may be NULL); fl_optim_init_state sets their start.
 * The buffers of one tensor must not overlap each other. */
typedef struct fl_optim_tensor {
  const char *name; /* matched against exclude_from_weight_decay; may be NULL */
  float *param;
  const float *grad;
  float *state1;
  float *state2;
  size_t n;
} fl_optim_tensor;

/* Defaults of docs/DESIGN.md section 5 for kind. */
fl_optim_hparams fl_optim_hparams_default(fl_optim_kind kind);

/* Number of state buffers kind needs per tensor (0, 1 or 2). */
int fl_optim_state_count(fl_optim_kind kind);
/* Floats in each of those buffers for a tensor of n elements: n, except
 * row-wise Adagrad's single accumulator (1). */
size_t fl_optim_state_len(fl_optim_kind kind, size_t n);
/* 1 for the optimizers defined for sparse-table rows only (row-wise
 * Adagrad, FTRL): the dense optimizers and fl_optim_step_cuda refuse them. */
int fl_optim_sparse_only(fl_optim_kind kind);

/* Name of kind ("sgd", "momentum", "adam", "adamw", "adagrad", "lars",
 * "lamb", "rowwise_adagrad", "ftrl"), and the reverse; fl_optim_kind_parse
 * returns FL_EINVAL for an unknown name. */
const char *fl_optim_kind_name(fl_optim_kind kind);
/* The names, indexed by fl_optim_kind, NULL-terminated (the job file's
 * optimizer.name takes these). */
extern const char *const fl_optim_kind_names[];
fl_status fl_optim_kind_parse(const char *name, fl_optim_kind *out);

/* Check hparams for values outside their domain: unknown kind, betas
 * outside [0,1), a negative or non-finite momentum, eps, wd, lars_coeff,
 * initial_accumulator, l1, l2 or beta, lr_power not finite and <= 0,
 * nesterov not 0/1, an exclude list with a NULL or
 * empty string (which would match every name).  FL_EINVAL if bad. */
fl_status fl_optim_hparams_check(const fl_optim_hparams *hp);

/* Whether a parameter called name gets weight decay under hp (0 or 1):
 * 0 when weight_decay is 0 or name contains one of the exclude strings;
 * a NULL name matches no exclude string. */
int fl_optim_decays(const fl_optim_hparams *hp, const char *name);

/* Zero the state buffers of every tensor, except the accumulators that
 * start at initial_accumulator (Adagrad's and row-wise Adagrad's s, FTRL's
 * n in state2).  Checks hp and the list as fl_optim_step does, except that
 * param and grad may be NULL here. */
fl_status fl_optim_init_state(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt);

/* One optimizer step over nt tensors with learning rate lr (>= 0) at step
 * number `step` (1 for the first update; Adam-family bias correction uses
 * it).  Fused: one pass over each tensor's elements (LARS/LAMB compute their
 * norms first).  Returns FL_EINVAL for NULL pointers, n == 0, a missing
 * state buffer, overlapping buffers of one tensor, bad hparams, lr < 0
 * (FTRL: <= 0) or not finite, or step < 1, before touching any tensor.
 *
 * Per element, in float, in this order (wd = 0 for a tensor that does not
 * decay, and the wd terms are then skipped; bc1 = 1 - beta1^step,
 * bc2 = 1 - beta2^step, and every per-step scalar below is computed in
 * double and rounded to float once):
 *   SGD       g' = g + wd*p;  p = p - lr*g'
 *   Momentum  g' = g + wd*p;  v = mu*v + g';  p = p - lr*(nesterov ? g' + mu*v : v)
 *   Adam      g' = g + wd*p;  m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'*g';
 *             p = p - (lr/bc1) * (m / (sqrt(v)*(1/sqrt(bc2)) + eps))
 *   AdamW     p = p*(1 - lr*wd) first, then Adam with g' = g
 *   Adagrad   g' = g + wd*p;  s = s + g'*g';  p = p - lr*(g' / (sqrt(s) + eps))
 *   Row-wise Adagrad (FBGEMM's, TorchRec's default for embeddings; each
 *             tensor is one row of n elements with one accumulator s):
 *             g' = g + wd*p;  s = s + mean(g'*g') (the sum of squares in
 *             double in element order, divided by n, rounded to float);
 *             c = lr / (sqrt(s) + eps);  p = p - c*g'
 *   FTRL      (McMahan et al. 2013 as TensorFlow's Ftrl, l2_shrinkage 0;
 *             z = state1, n = state2, k = -lr_power, a = lr; x^k is sqrt
 *             for k = 0.5):  n' = n + g*g;
 *             z = z + g - ((n'^k - n^k) / a)*p;  n = n';
 *             p = |z| <= l1 ? 0 : (sign(z)*l1 - z) / ((beta + n^k)/a + 2*l2)
 *   LARS      local_lr = lr*lars_coeff*||p|| / (||g|| + wd*||p|| + eps) when
 *             wd > 0 and both norms > 0, else lr (in double);
 *             v = mu*v + local_lr*(g + wd*p);  p = p - v
 *   LAMB      m, v as Adam with g' = g;
 *             r = (m*(1/bc1)) / (sqrt(v)*(1/sqrt(bc2)) + eps) + wd*p;
 *             trust = ||p||/||r|| when wd > 0 and both norms > 0, else 1;
 *             p = p - (lr*trust)*r
 * Norms are over the whole tensor (||p|| and ||g|| before the update, ||r||
 * from the new moments), as sums of squares in double over blocks whose
 * bounds depend only on n, added in a fixed order. */
fl_status fl_optim_step(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt, float lr,
                        int64_t step);
/* Same over device pointers (t itself is a host array); FL_ENOTSUP for the
 * fl_optim_sparse_only kinds. */
fl_status fl_optim_step_cuda(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt, float lr,
                             int64_t step, void *stream);

/* ------------------------------------------------------ learning-rate schedules */

/* One value per schedule; kernels/lr.c holds one table row per value (its
 * name, the job-file keys it reads, its function).  t below is the number
 * of updates into the schedule (the step after the warmup); the formulas
 * are torch.optim.lr_scheduler's, stepped once per optimizer update. */
typedef enum fl_lr_kind {
  FL_LR_CONSTANT = 0,
  FL_LR_POLYNOMIAL = 1, /* (base-end)*(1-t/decay_steps)^power + end, held at end after */
  FL_LR_COSINE = 2,     /* end + (base-end)*(1+cos(pi*t/decay_steps))/2 */
  FL_LR_PIECEWISE = 3,  /* values[i] while step < boundaries[i]; values[nb] after */
  FL_LR_STEP = 4,       /* StepLR: base * gamma^floor(t/step_size) */
  FL_LR_MULTISTEP = 5,  /* MultiStepLR: base * gamma^(number of boundaries <= t) */
  FL_LR_EXPONENTIAL = 6, /* ExponentialLR: base * gamma^t */
  FL_LR_ONECYCLE = 7,   /* OneCycleLR, two phases, max_lr = base, total_steps = decay_steps */
  FL_LR_LINEAR = 8,     /* LinearLR: base*(start + (end-start)*min(t,decay_steps)/decay_steps) */
  FL_LR_INVERSE_SQRT = 9, /* fairseq inverse_sqrt: base*sqrt(W)/sqrt(W+t), W = warmup_steps */
  FL_LR_PLATEAU = 10,   /* ReduceLROnPlateau: the rate moves only in fl_lr_plateau_observe */
  FL_LR_COUNT = 11
} fl_lr_kind;

#define FL_LR_MAX_PIECES 16

typedef enum fl_lr_anneal { FL_LR_ANNEAL_COS = 0, FL_LR_ANNEAL_LINEAR = 1 } fl_lr_anneal;

/* ReduceLROnPlateau's settings and state.  The state starts zeroed (no
 * metric seen: the rate is base_lr) and only fl_lr_plateau_observe moves
 * it; a checkpoint keeps it to resume bitwise. */
typedef struct fl_lr_plateau {
  int mode_max;       /* 0: lower metric is better (min), 1: higher (max) */
  int threshold_abs;  /* 0: rel, 1: abs threshold_mode */
  float factor;       /* new = max(lr*factor, min_lr); in (0, 1) */
  float threshold;    /* >= 0 */
  float min_lr;       /* >= 0 */
  int64_t patience;   /* bad observations tolerated before a reduction */
  int64_t cooldown;   /* observations ignored after a reduction */
  /* state */
  int64_t observed;      /* metrics seen */
  int64_t bad;           /* consecutive observations without improvement */
  int64_t cooldown_left;
  double best;           /* best metric so far (meaningful once observed > 0) */
  double lr;             /* current rate (meaningful once observed > 0) */
} fl_lr_plateau;

/* A schedule; warmup_steps > 0 adds a linear warmup from warmup_start_lr to
 * the schedule's value over the first warmup_steps steps (the decay then
 * counts t = step - warmup_steps).  Fields a kind does not read are
 * ignored (zero them: fill with memset first). */
typedef struct fl_lr_schedule {
  fl_lr_kind kind;
  float base_lr;       /* onecycle: max_lr */
  float end_lr;
  float power;        /* polynomial (1.0 = linear decay) */
  int64_t decay_steps; /* polynomial, cosine; onecycle total_steps; linear total_iters */
  int64_t warmup_steps;
  float warmup_start_lr;
  size_t n_boundaries; /* piecewise: boundaries[0..n-1], values[0..n]; multistep: milestones */
  int64_t boundaries[FL_LR_MAX_PIECES];
  float values[FL_LR_MAX_PIECES + 1];
  float gamma;         /* step, multistep, exponential: (0, 1] */
  int64_t step_size;   /* step: >= 1 */
  float pct_start;     /* onecycle: share of the steps rising (0, 1) */
  fl_lr_anneal anneal; /* onecycle */
  float div_factor;    /* onecycle: initial lr = max_lr / div_factor */
  float final_div_factor; /* onecycle: final lr = initial lr / final_div_factor */
  float start_factor;  /* linear: (0, 1] */
  float end_factor;    /* linear: [0, 1] */
  fl_lr_plateau plateau;
} fl_lr_schedule;

/* FL_EINVAL when a field is out of range (negative lr, decay_steps < 1 for
 * the kinds that read it, unsorted boundaries, too many pieces, gamma
 * outside (0, 1], onecycle phases of less than one step, inverse_sqrt
 * without warmup, plateau factor outside (0, 1)). */
fl_status fl_lr_schedule_check(const fl_lr_schedule *s);
/* The names, indexed by fl_lr_kind, NULL-terminated ("constant",
 * "polynomial", "cosine", "piecewise", "step", "multistep", "exponential",
 * "onecycle", "linear", "inverse_sqrt", "plateau"); the job file's
 * lr_schedule.kind takes these. */
extern const char *const fl_lr_kind_names[];
fl_status fl_lr_kind_parse(const char *name, fl_lr_kind *out);
const char *fl_lr_kind_name(fl_lr_kind kind);
/* The job-file keys of lr_schedule that kind reads besides kind and the
 * warmup keys, space-separated ("" for none; "" for an unknown kind). */
const char *fl_lr_kind_keys(fl_lr_kind kind);
/* 1 when key (one word) is among fl_lr_kind_keys(kind), else 0. */
int fl_lr_kind_takes(fl_lr_kind kind, const char *key);
/* Learning rate at optimizer step `step` (0-based count of updates done;
 * a negative step counts as 0).  The warmup ramps linearly to the value the
 * schedule has at its own t = 0.  Computed in double, rounded to float.
 * NAN for a NULL or invalid schedule (which fl_optim_step then rejects). */
float fl_lr_at(const fl_lr_schedule *s, int64_t step);
/* Reduce-on-plateau: feed one evaluation's metric (as torch's
 * ReduceLROnPlateau.step(metric), eps 1e-8).  *reduced (may be NULL) is set
 * to 1 when the rate went down.  A nan metric counts as no improvement.
 * FL_EINVAL for a NULL or invalid schedule or one of another kind. */
fl_status fl_lr_plateau_observe(fl_lr_schedule *s, double metric, int *reduced);

/* -------------------------------------------------------- gradient clipping */

/* torch.nn.utils.clip_grad_norm_ / clip_grad_value_, Paddle's
 * ClipGradByGlobalNorm / ClipGradByValue / ClipGradByNorm. */
typedef enum fl_clip_kind {
  FL_CLIP_NONE = 0,
  FL_CLIP_GLOBAL_NORM = 1, /* one norm over every tensor (clip_grad_norm_) */
  FL_CLIP_VALUE = 2,       /* each element into [-clip_value, clip_value] */
  FL_CLIP_NORM = 3,        /* clip_grad_norm_ applied to each tensor alone */
  FL_CLIP_COUNT = 4
} fl_clip_kind;

typedef struct fl_clip {
  fl_clip_kind kind;
  float max_norm;   /* global_norm, norm: > 0 */
  float clip_value; /* value: > 0 */
  float norm_type;  /* global_norm, norm: p > 0, or INFINITY for the max norm (2) */
} fl_clip;

/* The names, indexed by fl_clip_kind, NULL-terminated ("none",
 * "global_norm", "value", "norm"); the job file's
 * optimizer.grad_clip.kind takes these. */
extern const char *const fl_clip_kind_names[];

/* FL_EINVAL for an unknown kind, or a bound or norm_type the kind reads
 * that is not finite and > 0 (norm_type may be INFINITY). */
fl_status fl_clip_check(const fl_clip *c);

/* Clip nt gradient tensors (g[i] of n[i] floats) in place, as torch does:
 *   global_norm  N = (sum over all elements |g|^p)^(1/p) (max |g| for
 *                p = inf), in double; coef = max_norm / (N + 1e-6) rounded
 *                to float; when coef < 1 (or nan) every element is
 *                multiplied by it.
 *   norm         the same with each tensor's own N.
 *   value        g = min(max(g, -clip_value), clip_value).
 * Non-finite gradients follow torch (error_if_nonfinite False): an inf
 * element makes N inf and coef 0, so that element becomes nan and the
 * finite ones 0; a nan makes N and every element nan; value clipping
 * keeps a nan and bounds an inf.  *norm (may be NULL): global_norm's N,
 * norm's largest per-tensor N (nan if any is), NAN for value and none.
 * FL_EINVAL (nothing touched) for a bad c, NULL arrays or entries, nt 0
 * or an n[i] of 0 (none: only c is checked). */
fl_status fl_clip_grads(const fl_clip *c, float *const *g, const size_t *n, size_t nt,
                        double *norm);

/* ---------------------------------------------------------- gradient merge */

/* acc[i] += g[i] for every tensor i (n[i] elements each).  FL_EINVAL
 * (nothing touched) for NULL arrays or entries, nt == 0, an n[i] == 0, or
 * acc[i] overlapping g[i]. */
fl_status fl_gm_accumulate(float *const *acc, const float *const *g, const size_t *n, size_t nt);
fl_status fl_gm_accumulate_cuda(float *const *acc, const float *const *g, const size_t *n,
                                size_t nt, void *stream);
/* At the k-th micro-step: acc /= k (a division, correctly rounded) when
 * avg, else leave the sum.  FL_EINVAL for k_steps < 1 or bad lists. */
fl_status fl_gm_finalize(float *const *acc, const size_t *n, size_t nt, int k_steps, int avg);
fl_status fl_gm_finalize_cuda(float *const *acc, const size_t *n, size_t nt, int k_steps, int avg,
                              void *stream);

/* --------------------------------------------------------------------- AMP */

/* Multiply every element of every tensor by 1/scale and set *found_inf to 1
 * when any element (before unscaling) is inf or nan, else 0.  The tensors
 * are unscaled either way (Paddle's check_finite_and_unscale).  1/scale is
 * computed in double and rounded to float.  FL_EINVAL (nothing touched) for
 * NULL pointers, nt == 0, an n[i] == 0, or scale not finite and > 0. */
fl_status fl_amp_check_finite_and_unscale(float *const *t, const size_t *n, size_t nt,
                                          float scale, int *found_inf);
fl_status fl_amp_check_finite_and_unscale_cuda(float *const *t, const size_t *n, size_t nt,
                                               float scale, int *found_inf, void *stream);

/* Dynamic loss scaling state (docs/DESIGN.md section 5). */
typedef struct fl_loss_scaler {
  float scale;            /* current loss scale (init_loss_scaling, 32768) */
  int incr_every_n_steps; /* 1000 */
  int decr_every_n_nan_or_inf; /* 2 */
  float incr_ratio;       /* 2.0 */
  float decr_ratio;       /* 0.8 */
  int good_steps;         /* consecutive finite steps */
  int bad_steps;          /* consecutive overflow steps */
  int dynamic;            /* 0 = static scale, never changes */
} fl_loss_scaler;

fl_loss_scaler fl_loss_scaler_default(void);
fl_status fl_loss_scaler_check(const fl_loss_scaler *s);
/* Feed one step's found_inf.  Sets *skip to 1 when the optimizer update
 * must be skipped (found_inf), and updates the counters and the scale:
 * incr_every_n_steps consecutive good steps multiply it by incr_ratio
 * (unless that overflows to inf), decr_every_n_nan_or_inf consecutive bad
 * ones by decr_ratio, never < 1.  A good step zeroes the bad count and a
 * bad one the good count; a change of scale restarts its count.  A static
 * scaler (dynamic = 0) still reports skip but never changes.
 * fl_loss_scaler_check rejects: scale not finite and > 0 (>= 1 when dynamic),
 * counts < 1, incr_ratio < 1, decr_ratio outside (0, 1], negative counters. */
fl_status fl_loss_scaler_update(fl_loss_scaler *s, int found_inf, int *skip);

/* ------------------------------------------------------------------- casts */

/* fp32 <-> fp16 (IEEE binary16) and bf16; round to nearest even; overflow
 * rounds to inf; fp16 subnormals kept; inf and nan kept (nan stays a quiet
 * nan with its sign and top payload bits).  Bit-exact integer code, the same
 * on every CPU.  n may be 0 (then the pointers may be NULL); src and dst
 * must not overlap (FL_EINVAL). */
fl_status fl_cast_f32_to_f16(const float *src, uint16_t *dst, size_t n);
fl_status fl_cast_f16_to_f32(const uint16_t *src, float *dst, size_t n);
fl_status fl_cast_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
fl_status fl_cast_bf16_to_f32(const uint16_t *src, float *dst, size_t n);
fl_status fl_cast_f32_to_f16_cuda(const float *src, uint16_t *dst, size_t n, void *stream);
fl_status fl_cast_f16_to_f32_cuda(const uint16_t *src, float *dst, size_t n, void *stream);
fl_status fl_cast_f32_to_bf16_cuda(const float *src, uint16_t *dst, size_t n, void *stream);
fl_status fl_cast_bf16_to_f32_cuda(const uint16_t *src, float *dst, size_t n, void *stream);

/* ------------------------------------------------------------------ device */

/* Number of usable CUDA devices: 0 without a GPU or in a CPU-only build. */
int fl_cuda_device_count(void);

#ifdef __cplusplus
}
#endif
#endif
