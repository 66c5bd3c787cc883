/* optim.c - the CPU optimizer step: SGD, Momentum (Nesterov), Adam, AdamW,
 * Adagrad, LARS and LAMB over a list of fp32 tensors in one call, and the
 * two optimizers of sparse-table rows, row-wise Adagrad (one tensor = one
 * row with one accumulator) and FTRL-Proximal.
 *
 * Why it looks the way it does: an optimizer step is memory-bound (Adam
 * reads 4 and writes 3 floats per parameter for about 10 flops), so each
 * element is touched in exactly one fused, vectorized pass; LARS and LAMB
 * need whole-tensor norms first, so they take one reading pass for the norms
 * (LAMB also updates its moments there) and one for the update.  Threads
 * split the flattened element space of all tensors evenly, so many small
 * tensors cost no more than one big one.  Norms are summed in double with a
 * blocking that depends only on the tensor length, so results are the same
 * bits at any thread count.  The formulas are those of docs/DESIGN.md
 * section 5; the exact float evaluation order is documented in fl_optim.h. */
#include <config.h>

#include <math.h>
#include <string.h>

#include "fl_names.h"
#include "fl_optim.h"
#include "kern_internal.h"

#define FL_INLINE static inline __attribute__((always_inline))

/* Update pass of LARS/LAMB: elements per work item of the omp loop. */
#define UPDATE_CHUNK ((size_t)16384)
/* LAMB's first pass computes r for this many elements into a stack buffer
 * before summing its squares (a multiple of 8, see sumsq8). */
#define LAMB_BLOCK 1024

/* Scalars of one step, computed once in double and rounded to float. */
typedef struct step_c {
  fl_optim_kind kind;
  int nesterov;
  float lr, wd, mu, b1, omb1, b2, omb2, eps, lars_coeff;
  float l1, l2x2, beta, lr_power; /* FTRL; l2x2 = 2*l2 */
  float step_size; /* Adam, AdamW: lr / (1 - beta1^t) */
  float rbc1;      /* LAMB: 1 / (1 - beta1^t) */
  float rbc2s;     /* Adam family: 1 / sqrt(1 - beta2^t) */
  float shrink;    /* AdamW: 1 - lr*wd */
} step_c;

/* ------------------------------------------------------------ hparams */

/* One row per optimizer (its name in fl_optim_kind_names): its state
 * buffers, where it may run, and the defaults that differ between
 * optimizers (docs/DESIGN.md section 5; momentum 0.9, betas 0.9 / 0.999
 * and LARS coefficient 0.001 are common to all, the rest is 0). */
typedef struct optim_row {
  int states;      /* state buffers per tensor: 0, 1 or 2 */
  int per_tensor;  /* the one state value per tensor (row-wise Adagrad) */
  int sparse_only; /* defined for sparse-table rows only */
  int on_rows;     /* a pserver's sparse table may update its rows with it */
  float epsilon, weight_decay, lr_power;
} optim_row;

static const optim_row k_optims[] = {
    [FL_OPTIM_SGD] = {0, 0, 0, 1, 1e-8f, 0.0f, 0.0f},
    [FL_OPTIM_MOMENTUM] = {1, 0, 0, 0, 1e-8f, 0.0f, 0.0f},
    [FL_OPTIM_ADAM] = {2, 0, 0, 1, 1e-8f, 0.0f, 0.0f},
    [FL_OPTIM_ADAMW] = {2, 0, 0, 0, 1e-8f, 0.01f, 0.0f},
    [FL_OPTIM_ADAGRAD] = {1, 0, 0, 1, 1e-10f, 0.0f, 0.0f},
    [FL_OPTIM_LARS] = {1, 0, 0, 0, 0.0f, 0.0005f, 0.0f},
    [FL_OPTIM_LAMB] = {2, 0, 0, 0, 1e-6f, 0.01f, 0.0f},
    [FL_OPTIM_ROWWISE_ADAGRAD] = {1, 1, 1, 1, 1e-8f, 0.0f, 0.0f},
    [FL_OPTIM_FTRL] = {2, 0, 1, 1, 1e-8f, 0.0f, -0.5f},
};
_Static_assert(sizeof k_optims / sizeof k_optims[0] == FL_OPTIM_COUNT,
               "one row of k_optims per fl_optim_kind");

const char *const fl_optim_kind_names[] = {
    "sgd", "momentum", "adam", "adamw", "adagrad", "lars", "lamb", "rowwise_adagrad", "ftrl", NULL};
_Static_assert(sizeof fl_optim_kind_names / sizeof fl_optim_kind_names[0] == FL_OPTIM_COUNT + 1,
               "one name per fl_optim_kind, then NULL");
#define N_KINDS ((unsigned)FL_OPTIM_COUNT)

fl_optim_hparams fl_optim_hparams_default(fl_optim_kind kind) {
  fl_optim_hparams hp;
  memset(&hp, 0, sizeof hp);
  hp.kind = kind;
  hp.momentum = 0.9f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.999f;
  hp.lars_coeff = 0.001f;
  const optim_row *r = (unsigned)kind < N_KINDS ? &k_optims[kind] : &k_optims[FL_OPTIM_SGD];
  hp.epsilon = r->epsilon;
  hp.weight_decay = r->weight_decay;
  hp.lr_power = r->lr_power;
  return hp;
}

int fl_optim_state_count(fl_optim_kind kind) {
  return (unsigned)kind < N_KINDS ? k_optims[kind].states : 0;
}

size_t fl_optim_state_len(fl_optim_kind kind, size_t n) {
  return (unsigned)kind < N_KINDS && k_optims[kind].per_tensor ? 1 : n;
}

int fl_optim_sparse_only(fl_optim_kind kind) {
  return (unsigned)kind < N_KINDS && k_optims[kind].sparse_only;
}

int fl_optim_on_rows(fl_optim_kind kind) {
  return (unsigned)kind < N_KINDS && k_optims[kind].on_rows;
}

const char *fl_optim_kind_name(fl_optim_kind kind) {
  if ((unsigned)kind >= N_KINDS)
    return "unknown";
  return fl_optim_kind_names[kind];
}

fl_status fl_optim_kind_parse(const char *name, fl_optim_kind *out) {
  if (!out)
    return FL_EINVAL;
  const int i = fl_names_find(fl_optim_kind_names, name);
  if (i < 0)
    return FL_EINVAL;
  *out = (fl_optim_kind)i;
  return FL_OK;
}

static int nonneg(float x) { return isfinite(x) && x >= 0.0f; }

fl_status fl_optim_hparams_check(const fl_optim_hparams *hp) {
  if (!hp || (unsigned)hp->kind >= N_KINDS)
    return FL_EINVAL;
  if (!nonneg(hp->momentum) || (hp->nesterov != 0 && hp->nesterov != 1))
    return FL_EINVAL;
  if (!nonneg(hp->beta1) || hp->beta1 >= 1.0f || !nonneg(hp->beta2) || hp->beta2 >= 1.0f)
    return FL_EINVAL;
  if (!nonneg(hp->epsilon) || !nonneg(hp->weight_decay) || !nonneg(hp->lars_coeff) ||
      !nonneg(hp->initial_accumulator))
    return FL_EINVAL;
  if (!nonneg(hp->l1) || !nonneg(hp->l2) || !nonneg(hp->beta) || !isfinite(hp->lr_power) ||
      hp->lr_power > 0.0f)
    return FL_EINVAL;
  if (hp->n_exclude > 0 && !hp->exclude_from_weight_decay)
    return FL_EINVAL;
  for (size_t i = 0; i < hp->n_exclude; i++) /* "" would match every name */
    if (!hp->exclude_from_weight_decay[i] || !hp->exclude_from_weight_decay[i][0])
      return FL_EINVAL;
  return FL_OK;
}

int fl_optim_decays(const fl_optim_hparams *hp, const char *name) {
  if (!hp || !(hp->weight_decay > 0.0f))
    return 0;
  if (!name || !hp->exclude_from_weight_decay)
    return 1;
  for (size_t i = 0; i < hp->n_exclude; i++) {
    const char *ex = hp->exclude_from_weight_decay[i];
    if (ex && ex[0] && strstr(name, ex))
      return 0;
  }
  return 1;
}

/* Validate the tensor list: non-NULL buffers of n > 0 floats, the state the
 * kind needs, no two buffers of one tensor overlapping (the kernels take
 * them as restrict).  need_pg: param and grad must be there too.  *total
 * gets the number of elements of all tensors. */
static fl_status check_tensors(const fl_optim_hparams *hp, const fl_optim_tensor *t, size_t nt,
                               int need_pg, size_t *total) {
  if (!t || nt == 0)
    return FL_EINVAL;
  int ns = fl_optim_state_count(hp->kind);
  size_t sum = 0;
  for (size_t i = 0; i < nt; i++) {
    const fl_optim_tensor *x = &t[i];
    if (x->n == 0 || x->n > SIZE_MAX / (2 * sizeof(float)) || sum > SIZE_MAX / 2 - x->n)
      return FL_EINVAL;
    if (need_pg && (!x->param || !x->grad))
      return FL_EINVAL;
    if ((ns >= 1 && !x->state1) || (ns >= 2 && !x->state2))
      return FL_EINVAL;
    const void *buf[4] = {need_pg ? x->param : NULL, need_pg ? x->grad : NULL,
                          ns >= 1 ? x->state1 : NULL, ns >= 2 ? x->state2 : NULL};
    size_t sb = fl_optim_state_len(hp->kind, x->n) * sizeof(float), pb = x->n * sizeof(float);
    size_t bytes[4] = {pb, pb, sb, sb};
    for (int a = 0; a < 4; a++)
      for (int b = a + 1; b < 4; b++)
        if (buf[a] && buf[b] && fl_kern_overlap(buf[a], bytes[a], buf[b], bytes[b]))
          return FL_EINVAL;
    sum += x->n;
  }
  *total = sum;
  return FL_OK;
}

fl_status fl_optim_init_state(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt) {
  size_t total;
  fl_status st = fl_optim_hparams_check(hp);
  if (st != FL_OK)
    return st;
  st = check_tensors(hp, t, nt, 0, &total);
  if (st != FL_OK)
    return st;
  int ns = fl_optim_state_count(hp->kind);
  int adagrad = hp->kind == FL_OPTIM_ADAGRAD || hp->kind == FL_OPTIM_ROWWISE_ADAGRAD;
  float s1 = adagrad ? hp->initial_accumulator : 0.0f;
  float s2 = hp->kind == FL_OPTIM_FTRL ? hp->initial_accumulator : 0.0f;
  for (size_t i = 0; i < nt; i++) {
    size_t len = fl_optim_state_len(hp->kind, t[i].n);
    for (size_t j = 0; ns >= 1 && j < len; j++)
      t[i].state1[j] = s1;
    for (size_t j = 0; ns >= 2 && j < len; j++)
      t[i].state2[j] = s2;
  }
  return FL_OK;
}

/* ----------------------------------------------------- elementwise kernels
 * Each is always inlined with constant flags (dec: this tensor gets weight
 * decay) so the loop bodies carry no branches and vectorize. */

FL_INLINE void k_sgd(float *restrict p, const float *restrict g, size_t n, float lr, float wd,
                     int dec) {
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i];
    if (dec)
      gi = gi + wd * p[i];
    p[i] = p[i] - lr * gi;
  }
}

FL_INLINE void k_momentum(float *restrict p, const float *restrict g, float *restrict v, size_t n,
                          float lr, float mu, float wd, int dec, int nesterov) {
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i];
    if (dec)
      gi = gi + wd * p[i];
    float vi = mu * v[i] + gi;
    v[i] = vi;
    float d = nesterov ? gi + mu * vi : vi;
    p[i] = p[i] - lr * d;
  }
}

/* Adam and (adamw = 1) AdamW. */
FL_INLINE void k_adam(float *restrict p, const float *restrict g, float *restrict m,
                      float *restrict v, size_t n, const step_c *c, int dec, int adamw) {
  const float b1 = c->b1, omb1 = c->omb1, b2 = c->b2, omb2 = c->omb2, eps = c->eps;
  const float step = c->step_size, rbc2s = c->rbc2s, wd = c->wd, shrink = c->shrink;
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++) {
    float pi = p[i], gi = g[i];
    if (dec && adamw)
      pi = pi * shrink;
    if (dec && !adamw)
      gi = gi + wd * pi;
    float mi = b1 * m[i] + omb1 * gi;
    float vi = b2 * v[i] + omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step * (mi / (sqrtf(vi) * rbc2s + eps));
  }
}

FL_INLINE void k_adagrad(float *restrict p, const float *restrict g, float *restrict s, size_t n,
                         float lr, float eps, float wd, int dec) {
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i];
    if (dec)
      gi = gi + wd * p[i];
    float si = s[i] + gi * gi;
    s[i] = si;
    p[i] = p[i] - lr * (gi / (sqrtf(si) + eps));
  }
}

/* FTRL-Proximal (z, acc: its z and n); half: lr_power is -0.5 (sqrt). */
FL_INLINE void k_ftrl(float *restrict p, const float *restrict g, float *restrict z,
                      float *restrict acc, size_t n, const step_c *c, int half) {
  const float a = c->lr, l1 = c->l1, l2x2 = c->l2x2, beta = c->beta, k = -c->lr_power;
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i], ni = acc[i], nn = ni + gi * gi;
    float pold = half ? sqrtf(ni) : powf(ni, k), pnew = half ? sqrtf(nn) : powf(nn, k);
    float zi = z[i] + gi - ((pnew - pold) / a) * p[i];
    z[i] = zi;
    acc[i] = nn;
    float quad = (beta + pnew) / a + l2x2;
    p[i] = fabsf(zi) <= l1 ? 0.0f : (copysignf(l1, zi) - zi) / quad;
  }
}

/* Row-wise Adagrad over one tensor (one row, one accumulator s[0]). */
static void rowwise_adagrad(const fl_optim_hparams *hp, const step_c *c,
                            const fl_optim_tensor *x) {
  int dec = fl_optim_decays(hp, x->name);
  float wd = dec ? c->wd : 0.0f;
  double ss = 0.0;
  for (size_t i = 0; i < x->n; i++) {
    float gi = dec ? x->grad[i] + wd * x->param[i] : x->grad[i];
    ss += (double)gi * (double)gi;
  }
  float s = x->state1[0] + (float)(ss / (double)x->n);
  x->state1[0] = s;
  float m = c->lr / (sqrtf(s) + c->eps);
  for (size_t i = 0; i < x->n; i++) {
    float gi = dec ? x->grad[i] + wd * x->param[i] : x->grad[i];
    x->param[i] = x->param[i] - m * gi;
  }
}

/* LARS update with the tensor's local learning rate llr. */
FL_INLINE void k_lars(float *restrict p, const float *restrict g, float *restrict v, size_t n,
                      float llr, float mu, float wd, int dec) {
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i];
    if (dec)
      gi = gi + wd * p[i];
    float vi = mu * v[i] + llr * gi;
    v[i] = vi;
    p[i] = p[i] - vi;
  }
}

/* LAMB's r for one element from the updated moments (the same expression in
 * both passes, so pass 2 recomputes pass 1's r bit for bit). */
FL_INLINE float lamb_r(float mi, float vi, float pi, float rbc1, float rbc2s, float eps, float wd,
                       int dec) {
  float r = (mi * rbc1) / (sqrtf(vi) * rbc2s + eps);
  if (dec)
    r = r + wd * pi;
  return r;
}

/* LAMB for a tensor without weight decay: trust ratio 1, one fused pass. */
FL_INLINE void k_lamb_fused(float *restrict p, const float *restrict g, float *restrict m,
                            float *restrict v, size_t n, const step_c *c) {
  const float b1 = c->b1, omb1 = c->omb1, b2 = c->b2, omb2 = c->omb2, eps = c->eps;
  const float rbc1 = c->rbc1, rbc2s = c->rbc2s, lr = c->lr;
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i];
    float mi = b1 * m[i] + omb1 * gi;
    float vi = b2 * v[i] + omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] - lr * lamb_r(mi, vi, 0.0f, rbc1, rbc2s, eps, 0.0f, 0);
  }
}

/* LAMB pass 2 of a decayed tensor: p -= (lr*trust) * r. */
FL_INLINE void k_lamb_apply(float *restrict p, const float *restrict m, const float *restrict v,
                            size_t n, const step_c *c, float scale) {
  const float eps = c->eps, rbc1 = c->rbc1, rbc2s = c->rbc2s, wd = c->wd;
  FL_OMP(omp simd)
  for (size_t i = 0; i < n; i++)
    p[i] = p[i] - scale * lamb_r(m[i], v[i], p[i], rbc1, rbc2s, eps, wd, 1);
}

/* One tensor's elements [a, b) of an elementwise optimizer. */
static void elem_tensor(const fl_optim_hparams *hp, const step_c *c, const fl_optim_tensor *x,
                        size_t a, size_t b) {
  int dec = fl_optim_decays(hp, x->name);
  float *p = x->param + a;
  const float *g = x->grad + a;
  float *s1 = x->state1 ? x->state1 + a : NULL;
  float *s2 = x->state2 ? x->state2 + a : NULL;
  size_t n = b - a;
  switch (c->kind) {
  case FL_OPTIM_SGD:
    if (dec)
      k_sgd(p, g, n, c->lr, c->wd, 1);
    else
      k_sgd(p, g, n, c->lr, 0.0f, 0);
    break;
  case FL_OPTIM_MOMENTUM:
    if (dec && c->nesterov)
      k_momentum(p, g, s1, n, c->lr, c->mu, c->wd, 1, 1);
    else if (dec)
      k_momentum(p, g, s1, n, c->lr, c->mu, c->wd, 1, 0);
    else if (c->nesterov)
      k_momentum(p, g, s1, n, c->lr, c->mu, 0.0f, 0, 1);
    else
      k_momentum(p, g, s1, n, c->lr, c->mu, 0.0f, 0, 0);
    break;
  case FL_OPTIM_ADAM:
    if (dec)
      k_adam(p, g, s1, s2, n, c, 1, 0);
    else
      k_adam(p, g, s1, s2, n, c, 0, 0);
    break;
  case FL_OPTIM_ADAMW:
    if (dec)
      k_adam(p, g, s1, s2, n, c, 1, 1);
    else
      k_adam(p, g, s1, s2, n, c, 0, 1);
    break;
  case FL_OPTIM_ADAGRAD:
    if (dec)
      k_adagrad(p, g, s1, n, c->lr, c->eps, c->wd, 1);
    else
      k_adagrad(p, g, s1, n, c->lr, c->eps, 0.0f, 0);
    break;
  case FL_OPTIM_FTRL:
    if (c->lr_power == -0.5f)
      k_ftrl(p, g, s1, s2, n, c, 1);
    else
      k_ftrl(p, g, s1, s2, n, c, 0);
    break;
  default: break; /* LARS, LAMB: norm_step; row-wise Adagrad: row_step */
  }
}

static void elem_step(const fl_optim_hparams *hp, const step_c *c, const fl_optim_tensor *t,
                      size_t nt, size_t total, int nthr) {
  if (nthr <= 1) { /* the same as one thread of the team, without the team's cost */
    for (size_t i = 0; i < nt; i++) elem_tensor(hp, c, &t[i], 0, t[i].n);
    return;
  }
  FL_OMP(omp parallel num_threads(nthr) if (nthr > 1))
  {
    size_t T = (size_t)fl_kern_nthreads(), k = (size_t)fl_kern_tid();
    size_t lo = fl_kern_split(total, T, k, 16), hi = fl_kern_split(total, T, k + 1, 16);
    size_t off = 0, a, b;
    for (size_t i = 0; i < nt && off < hi; off += t[i].n, i++)
      if (fl_kern_clip(off, t[i].n, lo, hi, &a, &b))
        elem_tensor(hp, c, &t[i], a, b);
  }
}

/* Row-wise Adagrad: threads split the tensors (each one row). */
static void row_step(const fl_optim_hparams *hp, const step_c *c, const fl_optim_tensor *t,
                     size_t nt, int nthr) {
  (void)nthr; /* unused without OpenMP */
  FL_OMP(omp parallel for num_threads(nthr) if (nthr > 1) schedule(static))
  for (size_t i = 0; i < nt; i++)
    rowwise_adagrad(hp, c, &t[i]);
}

/* ---------------------------------------------------------- LARS, LAMB */

/* acc[j] += a[i]^2 in double for i = j mod 8: a fixed summation order
 * (callers start every call at a multiple of 8 within the segment). */
FL_INLINE void sumsq8(double *restrict acc, const float *restrict a, size_t n) {
  double s0 = acc[0], s1 = acc[1], s2 = acc[2], s3 = acc[3];
  double s4 = acc[4], s5 = acc[5], s6 = acc[6], s7 = acc[7];
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    double x0 = a[i], x1 = a[i + 1], x2 = a[i + 2], x3 = a[i + 3];
    double x4 = a[i + 4], x5 = a[i + 5], x6 = a[i + 6], x7 = a[i + 7];
    s0 += x0 * x0, s1 += x1 * x1, s2 += x2 * x2, s3 += x3 * x3;
    s4 += x4 * x4, s5 += x5 * x5, s6 += x6 * x6, s7 += x7 * x7;
  }
  acc[0] = s0, acc[1] = s1, acc[2] = s2, acc[3] = s3;
  acc[4] = s4, acc[5] = s5, acc[6] = s6, acc[7] = s7;
  for (int j = 0; i < n; i++, j++)
    acc[j] += (double)a[i] * (double)a[i];
}

static double sum8(const double *acc) {
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* LARS pass 1 over one segment: sum of squares of p and of g. */
static void lars_seg(const float *p, const float *g, size_t n, double *pp, double *gg) {
  double ap[8] = {0}, ag[8] = {0};
  sumsq8(ap, p, n);
  sumsq8(ag, g, n);
  *pp = sum8(ap);
  *gg = sum8(ag);
}

/* LAMB pass 1 over one segment of a decayed tensor: update m and v, and sum
 * the squares of p and of r. */
static void lamb_seg(const float *restrict p, const float *restrict g, float *restrict m,
                     float *restrict v, size_t n, const step_c *c, double *pp, double *rr) {
  const float b1 = c->b1, omb1 = c->omb1, b2 = c->b2, omb2 = c->omb2, eps = c->eps;
  const float rbc1 = c->rbc1, rbc2s = c->rbc2s, wd = c->wd;
  double ap[8] = {0}, ar[8] = {0};
  float r[LAMB_BLOCK];
  for (size_t o = 0; o < n; o += LAMB_BLOCK) {
    size_t len = n - o < LAMB_BLOCK ? n - o : LAMB_BLOCK;
    const float *po = p + o, *go = g + o;
    float *mo = m + o, *vo = v + o;
    FL_OMP(omp simd)
    for (size_t i = 0; i < len; i++) {
      float gi = go[i];
      float mi = b1 * mo[i] + omb1 * gi;
      float vi = b2 * vo[i] + omb2 * gi * gi;
      mo[i] = mi;
      vo[i] = vi;
      r[i] = lamb_r(mi, vi, po[i], rbc1, rbc2s, eps, wd, 1);
    }
    sumsq8(ap, po, len);
    sumsq8(ar, r, len);
  }
  *pp = sum8(ap);
  *rr = sum8(ar);
}

/* The per-tensor scale of the update pass from the two norms' squares:
 * LARS's local_lr, LAMB's lr * trust ratio. */
static float norm_scale(const step_c *c, double sp, double sx) {
  double pn = sqrt(sp), xn = sqrt(sx), lr = c->lr;
  if (!(pn > 0.0) || !(xn > 0.0))
    return c->lr;
  if (c->kind == FL_OPTIM_LARS)
    return (float)(lr * c->lars_coeff * pn / (xn + (double)c->wd * pn + c->eps));
  return (float)(lr * (pn / xn));
}

static void norm_step(const fl_optim_hparams *hp, const step_c *c, const fl_optim_tensor *t,
                      size_t nt, int nthr) {
  (void)nthr; /* unused without OpenMP */
  double part_p[FL_KERN_NSEG_MAX], part_x[FL_KERN_NSEG_MAX];
  int lars = c->kind == FL_OPTIM_LARS;
  FL_OMP(omp parallel num_threads(nthr) if (nthr > 1))
  for (size_t i = 0; i < nt; i++) {
    const fl_optim_tensor *x = &t[i];
    size_t n = x->n;
    int dec = fl_optim_decays(hp, x->name);
    float scale = c->lr;
    if (dec) {
      size_t ns = fl_kern_nseg(n);
      FL_OMP(omp for schedule(static))
      for (size_t s = 0; s < ns; s++) {
        size_t a = fl_kern_split(n, ns, s, 8), b = fl_kern_split(n, ns, s + 1, 8);
        if (lars)
          lars_seg(x->param + a, x->grad + a, b - a, &part_p[s], &part_x[s]);
        else
          lamb_seg(x->param + a, x->grad + a, x->state1 + a, x->state2 + a, b - a, c,
                   &part_p[s], &part_x[s]);
      }
      /* Every thread adds the segment sums in the same order, so all agree. */
      double sp = 0.0, sx = 0.0;
      for (size_t s = 0; s < ns; s++)
        sp += part_p[s], sx += part_x[s];
      scale = norm_scale(c, sp, sx);
    }
    size_t nc = n / UPDATE_CHUNK + (n % UPDATE_CHUNK != 0);
    /* The implicit barrier at the end keeps part_* alive until all read them. */
    FL_OMP(omp for schedule(static))
    for (size_t ci = 0; ci < nc; ci++) {
      size_t a = ci * UPDATE_CHUNK, len = n - a < UPDATE_CHUNK ? n - a : UPDATE_CHUNK;
      float *p = x->param + a, *s1 = x->state1 + a;
      const float *g = x->grad + a;
      if (lars && dec)
        k_lars(p, g, s1, len, scale, c->mu, c->wd, 1);
      else if (lars)
        k_lars(p, g, s1, len, scale, c->mu, 0.0f, 0);
      else if (dec)
        k_lamb_apply(p, s1, x->state2 + a, len, c, scale);
      else
        k_lamb_fused(p, g, s1, x->state2 + a, len, c);
    }
  }
}

/* ---------------------------------------------------------------- step */

fl_status fl_optim_step(const fl_optim_hparams *hp, fl_optim_tensor *t, size_t nt, float lr,
                        int64_t step) {
  size_t total;
  fl_status st = fl_optim_hparams_check(hp);
  if (st != FL_OK)
    return st;
  if (!nonneg(lr) || step < 1 || (hp->kind == FL_OPTIM_FTRL && !(lr > 0.0f)))
    return FL_EINVAL;
  st = check_tensors(hp, t, nt, 1, &total);
  if (st != FL_OK)
    return st;

  step_c c;
  memset(&c, 0, sizeof c);
  c.kind = hp->kind;
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
  c.l1 = hp->l1;
  c.l2x2 = (float)(2.0 * (double)hp->l2);
  c.beta = hp->beta;
  c.lr_power = hp->lr_power;
  double bc1 = 1.0 - pow(hp->beta1, (double)step), bc2 = 1.0 - pow(hp->beta2, (double)step);
  c.step_size = (float)((double)lr / bc1);
  c.rbc1 = (float)(1.0 / bc1);
  c.rbc2s = (float)(1.0 / sqrt(bc2));
  c.shrink = (float)(1.0 - (double)lr * hp->weight_decay);

  int nthr = fl_kern_threads(hp->num_threads, total);
  if (hp->kind == FL_OPTIM_LARS || hp->kind == FL_OPTIM_LAMB)
    norm_step(hp, &c, t, nt, nthr);
  else if (hp->kind == FL_OPTIM_ROWWISE_ADAGRAD)
    row_step(hp, &c, t, nt, nthr);
  else
    elem_step(hp, &c, t, nt, total, nthr);
  return FL_OK;
}
