/* test_model_cuda.c - the built-in models on a CUDA device (train.device
 * gpu) against the same models on the CPU.
 *
 * Every case builds the CPU model and the gpu model from one spec and seed
 * (so they start from the same host parameters) and feeds both the same
 * micro-batches:
 *  - one train_step of logreg, mlp (relu, tanh) and cnn (none, bn, gn),
 *    plain and with recompute, at a full and a partial batch: losses,
 *    top-1/top-5 counts, every gradient and the batch-norm running
 *    statistics; on_ready names the same parameters in the same order, and
 *    each gradient is on the host, final, when it is named; eval matches
 *    and leaves the model alone;
 *  - 20 SGD steps on each device stay together, and host-side parameter
 *    changes reach the device every step;
 *  - synchronised batch norm (a hook standing in for one rank and for two
 *    identical ones) makes the same exchanges as on the CPU, with close
 *    contents and results, plain and with recompute;
 *  - FP16 and BF16 GEMMs (AMP) give gradients close to the fp32 CPU ones;
 *  - AMP fp16 training with the dynamic loss scaler: an overflowing scale
 *    (the initial one, and one injected mid-run) is detected by
 *    check_finite_and_unscale and the step skipped, and the loss falls.
 * Tolerances, as the error relative to the largest magnitude of the CPU's
 * tensor: test_cuda_layers holds each device op to 1e-5 of its CPU twin
 * (cuBLAS, cuDNN and the device reductions add in another order than
 * OpenBLAS and the CPU loops); a model chains up to 8 such ops forward and
 * back and the errors add up, so one step is held to 1e-4 and the loss to
 * 1e-5 (it is a sum of well-conditioned terms).  After 20 SGD steps the
 * parameters are held to 1e-3 (each step's 1e-4 enters only through lr*g).
 * 16-bit GEMMs round their inputs to 11 (fp16) or 8 (bf16) significant
 * bits, a relative error of 4.9e-4 or 3.9e-3 per operand.  Those cases use
 * tanh models: with ReLU, a pre-activation that the rounding moves across
 * 0 (or a max-pool near-tie that flips) changes a whole sample's term of a
 * gradient, which at init, where a batch's terms mostly cancel, moves the
 * gradient by several percent whatever the precision.  A CPU emulation of
 * these very models (16-bit rounding of every GEMM input, fp32 otherwise)
 * gave per-tensor relative L2 errors <= 1.5e-3 for fp16 and, for bf16,
 * <= 5e-3 on the MLP and a relative L2 error over all gradients <= 3.1e-2
 * on the CNNs (max-pool near-ties do flip at 8 bits); the bounds are fp16
 * 1e-2 per tensor, bf16 1e-1 over all gradients, and a loss within 1e-2
 * (fp16) / 3e-2 (bf16).
 *
 * Without a CUDA device (or in a --without-cuda tree) the program exits 77
 * (SKIP).  Check runs in-process (CK_NOFORK): CUDA does not survive fork. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_data.h"
#include "fl_device.h"
#include "fl_model.h"
#include "fl_optim.h"

#include "cuda_testutil.h"

#define TOL_STEP 1e-4
#define TOL_LOSS 1e-5
#define TOL_SGD 1e-3
#define TOL_FP16 1e-2      /* per tensor, relative L2; also the fp16 loss */
#define TOL_BF16 3e-2      /* the bf16 loss */
#define TOL_BF16_ALL 1e-1  /* all gradients together, relative L2 */
#define MAX_CB 64

static uint64_t rng_state;

static float urand(void) { /* [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* The model zoo: small versions of every built-in kind. */
enum { Z_LOGREG, Z_MLP, Z_MLP_TANH, Z_CNN, Z_CNN_BN, Z_CNN_GN, Z_COUNT };

static fl_model_spec zoo_spec(int which, int recompute, int gpu) {
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  static const char *const kinds[] = {"logreg", "mlp", "mlp", "cnn", "cnn", "cnn"};
  static const char *const norms[] = {"", "", "", "", "bn", "gn"};
  snprintf(s.kind, sizeof s.kind, "%s", kinds[which]);
  snprintf(s.norm, sizeof s.norm, "%s", norms[which]);
  snprintf(s.activation, sizeof s.activation, "%s", which == Z_MLP_TANH ? "tanh" : "relu");
  s.in_channels = 1, s.in_height = 12, s.in_width = 12;
  s.num_classes = 10;
  s.hidden[0] = 32, s.hidden[1] = 24, s.hidden[2] = 16;
  s.n_hidden = 3;
  s.conv_channels[0] = 4, s.conv_channels[1] = 8;
  s.conv_kernel = 3;
  s.fc_hidden = 16;
  s.gn_groups = 2;
  s.recompute = recompute;
  if (gpu) snprintf(s.device, sizeof s.device, "gpu");
  return s;
}

static fl_model *make(const fl_model_spec *s, size_t max_batch, uint64_t seed) {
  fl_model *m = NULL;
  ck_assert_int_eq(fl_model_create(s, max_batch, seed, &m), FL_OK);
  ck_assert_ptr_nonnull(m);
  return m;
}

typedef struct batch {
  float *x;
  int32_t *y;
  size_t n;
} batch;

static batch random_batch(const fl_model *m, size_t n, uint64_t seed) {
  const size_t in = fl_model_input_size(m);
  batch b = {malloc(n * in * sizeof(float)), malloc(n * sizeof(int32_t)), n};
  ck_assert_ptr_nonnull(b.x);
  ck_assert_ptr_nonnull(b.y);
  rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n * in; i++) b.x[i] = urand();
  for (size_t i = 0; i < n; i++) b.y[i] = (int32_t)((urand() + 1.0f) * 5.0f) % 10;
  return b;
}

static void free_batch(batch *b) { free(b->x), free(b->y); }

/* max |a - b| / max |a| (0 when both are all zero). */
static double rel_max(const float *a, const float *b, size_t n) {
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    scale = fmax(scale, fabs((double)a[i]));
    worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
  }
  return scale > 0.0 ? worst / scale : worst;
}

/* ||a - k*b|| / ||a||. */
static double rel_l2(const float *a, const float *b, double k, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)a[i] - k * (double)b[i];
    num += d * d;
    den += (double)a[i] * (double)a[i];
  }
  return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static double sum_of(const float *a, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += a[i];
  return s;
}

/* What on_ready saw: the order, and each gradient's sum when it was named
 * (compared with the final gradient: it must already be on the host). */
typedef struct ready_log {
  fl_model *m;
  size_t n;
  size_t idx[MAX_CB];
  double sum[MAX_CB];
} ready_log;

static void on_ready(void *ctx, size_t index) {
  ready_log *r = ctx;
  ck_assert_uint_lt(r->n, MAX_CB);
  const fl_param *p = fl_model_param(r->m, index);
  r->idx[r->n] = index;
  r->sum[r->n] = sum_of(p->grad, p->n);
  r->n++;
}

static void expect_results_close(const fl_model_result *c, const fl_model_result *g) {
  ck_assert_uint_eq(g->count, c->count);
  ck_assert_msg(fabs(g->loss_sum - c->loss_sum) <= TOL_LOSS * fabs(c->loss_sum),
                "loss %.9g on the GPU, %.9g on the CPU", g->loss_sum, c->loss_sum);
  ck_assert_uint_eq(g->correct1, c->correct1);
  ck_assert_uint_eq(g->correct5, c->correct5);
}

/* Every parameter (gradients of trainable ones, values of buffers). */
static void expect_params_close(fl_model *cpu, fl_model *gpu, double tol_grad, double tol_value,
                                const char *what) {
  ck_assert_uint_eq(fl_model_num_params(cpu), fl_model_num_params(gpu));
  for (size_t i = 0; i < fl_model_num_params(cpu); i++) {
    const fl_param *a = fl_model_param(cpu, i), *b = fl_model_param(gpu, i);
    ck_assert_str_eq(a->name, b->name);
    ck_assert_uint_eq(a->n, b->n);
    double e = rel_max(a->value, b->value, a->n);
    ck_assert_msg(e <= tol_value, "%s: %s value differs by %.3g (tolerance %.1g)", what, a->name,
                  e, tol_value);
    if (a->grad) {
      e = rel_max(a->grad, b->grad, a->n);
      ck_assert_msg(e <= tol_grad, "%s: %s gradient differs by %.3g (tolerance %.1g)", what,
                    a->name, e, tol_grad);
    }
  }
}

static void expect_ready_same(fl_model *gpu, const ready_log *c, const ready_log *g) {
  ck_assert_uint_eq(g->n, c->n);
  for (size_t k = 0; k < g->n; k++) {
    ck_assert_uint_eq(g->idx[k], c->idx[k]);
    const fl_param *p = fl_model_param(gpu, g->idx[k]);
    ck_assert_msg(g->sum[k] == sum_of(p->grad, p->n),
                  "%s: gradient changed after on_ready named it", p->name);
  }
}

/* ------------------------------------------------------------ one step */

START_TEST(step_matches_cpu) {
  const int which = _i % Z_COUNT, recompute = _i / Z_COUNT;
  fl_model_spec sc = zoo_spec(which, recompute, 0), sg = zoo_spec(which, recompute, 1);
  fl_model *cpu = make(&sc, 24, 7), *gpu = make(&sg, 24, 7);
  char what[64];
  snprintf(what, sizeof what, "%s%s%s%s", sc.kind, sc.norm[0] ? "/" : "", sc.norm,
           recompute ? " recompute" : "");
  expect_params_close(cpu, gpu, 0.0, 0.0, what); /* same host init */
  const size_t sizes[2] = {24, 7};
  for (int k = 0; k < 2; k++) {
    batch b = random_batch(cpu, sizes[k], (uint64_t)(11 + k));
    fl_model_result rc, rg;
    ready_log lc = {.m = cpu}, lg = {.m = gpu};
    ck_assert_int_eq(fl_model_train_step(cpu, b.x, b.y, b.n, 8.0f, on_ready, &lc, &rc), FL_OK);
    ck_assert_int_eq(fl_model_train_step(gpu, b.x, b.y, b.n, 8.0f, on_ready, &lg, &rg), FL_OK);
    expect_results_close(&rc, &rg);
    expect_params_close(cpu, gpu, TOL_STEP, TOL_STEP, what); /* BN running stats too */
    expect_ready_same(gpu, &lc, &lg);
    free_batch(&b);
  }
  /* eval: the same results, and the gpu model's host state untouched */
  batch e = random_batch(cpu, 20, 99);
  const size_t np = fl_model_num_params(gpu);
  double before[64];
  ck_assert_uint_le(np, 64);
  for (size_t i = 0; i < np; i++) {
    const fl_param *p = fl_model_param(gpu, i);
    before[i] = sum_of(p->value, p->n) + (p->grad ? sum_of(p->grad, p->n) : 0.0);
  }
  fl_model_result ec, eg;
  ck_assert_int_eq(fl_model_eval(cpu, e.x, e.y, e.n, &ec), FL_OK);
  ck_assert_int_eq(fl_model_eval(gpu, e.x, e.y, e.n, &eg), FL_OK);
  expect_results_close(&ec, &eg);
  for (size_t i = 0; i < np; i++) {
    const fl_param *p = fl_model_param(gpu, i);
    ck_assert(before[i] == sum_of(p->value, p->n) + (p->grad ? sum_of(p->grad, p->n) : 0.0));
  }
  free_batch(&e);
  fl_model_destroy(cpu);
  fl_model_destroy(gpu);
}
END_TEST

/* ------------------------------------------------ synchronised batch norm */

/* A batch-norm hook standing in for the ranks: an identity (one rank) or a
 * doubling (two ranks with the same micro-batch); it records the calls. */
typedef struct hook_log {
  double factor;
  int calls;
  size_t n[16];
  double buf[16][64];
} hook_log;

static fl_status hook(void *ctx, double *buf, size_t n) {
  hook_log *h = ctx;
  ck_assert_int_lt(h->calls, 16);
  ck_assert_uint_le(n, 64);
  for (size_t i = 0; i < n; i++) buf[i] *= h->factor;
  h->n[h->calls] = n;
  memcpy(h->buf[h->calls], buf, n * sizeof(double));
  h->calls++;
  return FL_OK;
}

START_TEST(sync_bn_matches_cpu) {
  const int recompute = _i % 2;
  const double factor = _i < 2 ? 1.0 : 2.0;
  fl_model_spec sc = zoo_spec(Z_CNN_BN, recompute, 0), sg = zoo_spec(Z_CNN_BN, recompute, 1);
  fl_model *cpu = make(&sc, 24, 13), *gpu = make(&sg, 24, 13);
  static hook_log hc, hg;
  memset(&hc, 0, sizeof hc);
  memset(&hg, 0, sizeof hg);
  hc.factor = hg.factor = factor;
  ck_assert_int_eq(fl_model_set_norm_sync(cpu, hook, &hc), FL_OK);
  ck_assert_int_eq(fl_model_set_norm_sync(gpu, hook, &hg), FL_OK);
  batch b = random_batch(cpu, 24, 21);
  fl_model_result rc, rg;
  ck_assert_int_eq(fl_model_train_step(cpu, b.x, b.y, b.n, 1.0f, NULL, NULL, &rc), FL_OK);
  ck_assert_int_eq(fl_model_train_step(gpu, b.x, b.y, b.n, 1.0f, NULL, NULL, &rg), FL_OK);
  expect_results_close(&rc, &rg);
  expect_params_close(cpu, gpu, TOL_STEP, TOL_STEP, "cnn/bn with the batch-norm hook");
  /* the same exchanges, in the same order, with close contents */
  ck_assert_int_eq(hg.calls, hc.calls);
  ck_assert_int_eq(hc.calls, 6); /* two layers: 2 exchanges each in forward, 1 in backward */
  for (int k = 0; k < hc.calls; k++) {
    ck_assert_uint_eq(hg.n[k], hc.n[k]);
    double scale = 0.0, worst = 0.0;
    for (size_t i = 0; i < hc.n[k]; i++) {
      scale = fmax(scale, fabs(hc.buf[k][i]));
      worst = fmax(worst, fabs(hc.buf[k][i] - hg.buf[k][i]));
    }
    ck_assert_msg(worst <= TOL_STEP * scale, "exchange %d differs by %.3g of %.3g", k, worst,
                  scale);
  }
  free_batch(&b);
  fl_model_destroy(cpu);
  fl_model_destroy(gpu);
}
END_TEST

/* The device keeps its activations (recompute: fewer of them). */
START_TEST(activation_bytes) {
  fl_model_spec plain = zoo_spec(Z_CNN_BN, 0, 1), rc = zoo_spec(Z_CNN_BN, 1, 1);
  fl_model *a = make(&plain, 64, 1), *b = make(&rc, 64, 1);
  ck_assert_uint_gt(fl_model_activation_bytes(a), 0);
  ck_assert_uint_lt(fl_model_activation_bytes(b), fl_model_activation_bytes(a));
  fl_model_destroy(a);
  fl_model_destroy(b);
}
END_TEST

/* ------------------------------------------------------ twenty SGD steps */

static void sgd(fl_model *m, float lr) {
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    if (!p->grad) continue;
    for (size_t k = 0; k < p->n; k++) p->value[k] -= lr * p->grad[k];
  }
}

START_TEST(sgd_steps_stay_close) {
  static const int cases[][2] = {{Z_MLP, 0}, {Z_CNN_BN, 0}, {Z_CNN_GN, 1}};
  const int which = cases[_i][0], recompute = cases[_i][1];
  fl_model_spec sc = zoo_spec(which, recompute, 0), sg = zoo_spec(which, recompute, 1);
  fl_model *cpu = make(&sc, 32, 3), *gpu = make(&sg, 32, 3);
  batch data[4];
  for (int k = 0; k < 4; k++) data[k] = random_batch(cpu, 32, (uint64_t)(100 + k));
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 20; step++) {
    const batch *b = &data[step % 4];
    fl_model_result rc, rg;
    ck_assert_int_eq(fl_model_train_step(cpu, b->x, b->y, b->n, 1.0f, NULL, NULL, &rc), FL_OK);
    ck_assert_int_eq(fl_model_train_step(gpu, b->x, b->y, b->n, 1.0f, NULL, NULL, &rg), FL_OK);
    ck_assert_msg(fabs(rg.loss_sum - rc.loss_sum) <= TOL_SGD * rc.loss_sum,
                  "step %d: loss %.7g on the GPU, %.7g on the CPU", step, rg.loss_sum,
                  rc.loss_sum);
    if (step < 4) first += rc.loss_sum;
    if (step >= 16) last += rc.loss_sum;
    sgd(cpu, 0.05f); /* on the host: the gpu model must upload the new values */
    sgd(gpu, 0.05f);
  }
  expect_params_close(cpu, gpu, INFINITY, TOL_SGD, "after 20 SGD steps");
  ck_assert_msg(last < first, "the loss did not fall: %g -> %g", first / 4, last / 4);
  for (int k = 0; k < 4; k++) free_batch(&data[k]);
  fl_model_destroy(cpu);
  fl_model_destroy(gpu);
}
END_TEST

/* ---------------------------------------------------------- AMP GEMMs */

START_TEST(amp_gemms_close) {
  static const int models[] = {Z_MLP, Z_CNN, Z_CNN_BN, Z_CNN_GN};
  const int which = models[_i % 4];
  const fl_math math = _i < 4 ? FL_MATH_FP16 : FL_MATH_BF16;
  const char *mname = math == FL_MATH_FP16 ? "fp16" : "bf16";
  const float scale = 1024.0f; /* the scaled loss must not overflow 16 bits here */
  fl_model_spec sc = zoo_spec(which, 0, 0), s32 = zoo_spec(which, 0, 1), s16 = s32;
  snprintf(sc.activation, sizeof sc.activation, "tanh"); /* smooth: see the top */
  snprintf(s32.activation, sizeof s32.activation, "tanh");
  snprintf(s16.activation, sizeof s16.activation, "tanh");
  s16.linear_math = s16.conv_math = math;
  fl_model *cpu = make(&sc, 32, 5), *g32 = make(&s32, 32, 5), *g16 = make(&s16, 32, 5);
  batch b = random_batch(cpu, 32, 77);
  fl_model_result rc, r32, r16;
  ck_assert_int_eq(fl_model_train_step(cpu, b.x, b.y, b.n, 1.0f, NULL, NULL, &rc), FL_OK);
  ck_assert_int_eq(fl_model_train_step(g32, b.x, b.y, b.n, 1.0f, NULL, NULL, &r32), FL_OK);
  ck_assert_int_eq(fl_model_train_step(g16, b.x, b.y, b.n, scale, NULL, NULL, &r16), FL_OK);
  const double tol_loss = math == FL_MATH_FP16 ? TOL_FP16 : TOL_BF16;
  ck_assert_msg(fabs(r16.loss_sum - rc.loss_sum) <= tol_loss * rc.loss_sum,
                "%s loss %.7g, fp32 CPU %.7g", mname, r16.loss_sum, rc.loss_sum);
  double num = 0.0, den = 0.0;
  int differs = 0; /* the 16-bit GEMMs did run: not the fp32 device bits */
  for (size_t i = 0; i < fl_model_num_params(cpu); i++) {
    const fl_param *a = fl_model_param(cpu, i), *g = fl_model_param(g16, i);
    const fl_param *f = fl_model_param(g32, i);
    if (!a->grad) continue;
    for (size_t k = 0; k < a->n; k++) {
      const double d = (double)a->grad[k] - (double)g->grad[k] / scale;
      num += d * d;
      den += (double)a->grad[k] * (double)a->grad[k];
      differs |= g->grad[k] / scale != f->grad[k];
    }
    const double e = rel_l2(a->grad, g->grad, 1.0 / scale, a->n);
    if (math == FL_MATH_FP16)
      ck_assert_msg(e <= TOL_FP16, "%s %s: fp16 %s gradient off by %.3g (tolerance %.1g)",
                    sc.kind, sc.norm, a->name, e, TOL_FP16);
  }
  const double all = sqrt(num / den);
  ck_assert_msg(all <= (math == FL_MATH_FP16 ? TOL_FP16 : TOL_BF16_ALL),
                "%s %s: %s gradients off by %.3g overall", sc.kind, sc.norm, mname, all);
  ck_assert_msg(differs, "%s %s: the %s model gave the fp32 gradients", sc.kind, sc.norm, mname);
  free_batch(&b);
  fl_model_destroy(cpu);
  fl_model_destroy(g32);
  fl_model_destroy(g16);
}
END_TEST

/* ------------------------------------------- AMP training, dynamic scale */

/* One AMP step as the loop takes it: scaled loss, unscale + finite check
 * of the host gradients, the scaler, SGD unless skipped.  Returns skip. */
static int amp_step(fl_model *m, fl_loss_scaler *sc, const float *x, const int32_t *y, size_t n,
                    double *loss) {
  float *g[64];
  size_t len[64], nt = 0;
  fl_model_result r;
  const float scale = sc->scale;
  ck_assert_int_eq(fl_model_train_step(m, x, y, n, scale, NULL, NULL, &r), FL_OK);
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    if (!p->grad) continue;
    ck_assert_uint_lt(nt, 64);
    g[nt] = p->grad, len[nt] = p->n, nt++;
  }
  int found_inf = 0, skip = 0;
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(g, len, nt, scale, &found_inf), FL_OK);
  ck_assert_int_eq(fl_loss_scaler_update(sc, found_inf, &skip), FL_OK);
  ck_assert_int_eq(skip, found_inf);
  if (!skip) sgd(m, 0.1f);
  *loss = r.loss_sum / (double)n;
  return skip;
}

static double param_sum(fl_model *m) {
  double s = 0.0;
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    const fl_param *p = fl_model_param(m, i);
    s += sum_of(p->value, p->n);
  }
  return s;
}

START_TEST(amp_fp16_training) {
  fl_model_spec s = zoo_spec(Z_MLP, 0, 1);
  s.linear_math = FL_MATH_FP16;
  const size_t bs = 32;
  fl_model *m = make(&s, bs, 9);
  fl_dataset d;
  fl_synth_image_config cfg = {.n = 512, .channels = 1, .height = 12, .width = 12,
                               .num_classes = 10, .seed = 4};
  ck_assert_int_eq(fl_synth_images(&cfg, 0, &d), FL_OK);
  double mean, std;
  fl_dataset_mean_std(&d, &mean, &std); /* as the loop does */
  ck_assert_int_eq(fl_dataset_normalize(&d, mean, std), FL_OK);
  fl_loss_scaler sc = fl_loss_scaler_default();
  sc.scale = 0x1p30f; /* dlogits ~ 2^30/32: beyond fp16's 65504 in the GEMMs */
  sc.decr_every_n_nan_or_inf = 1;
  sc.decr_ratio = 0.5f;
  const int steps = 240, per_epoch = (int)(d.n / bs);
  int skipped = 0, first_good = -1, n_early = 0, n_late = 0;
  double early = 0.0, late = 0.0;
  for (int step = 0; step < steps; step++) {
    const size_t off = (size_t)(step % per_epoch) * bs;
    if (step == 120) sc.scale = 0x1p40f; /* an injected overflow */
    const float scale_before = sc.scale;
    const double before = param_sum(m);
    double loss;
    const int skip = amp_step(m, &sc, d.x + off * d.dim, d.y + off, bs, &loss);
    if (step == 0) ck_assert_msg(skip, "2^30 did not overflow the fp16 GEMMs");
    if (step == 120) ck_assert_msg(skip, "the injected 2^40 scale was not caught");
    if (skip) {
      skipped++;
      ck_assert(param_sum(m) == before); /* the update was skipped */
      ck_assert(sc.scale < scale_before);
      continue;
    }
    if (first_good < 0) first_good = step;
    if (n_early < per_epoch) early += loss, n_early++;
    if (step >= steps - per_epoch) late += loss, n_late++;
  }
  ck_assert_int_ge(first_good, 1);
  ck_assert_int_lt(first_good, 40);
  ck_assert_int_eq(n_early, per_epoch);
  ck_assert_int_eq(n_late, per_epoch); /* recovered from the injected overflow */
  early /= n_early;
  late /= n_late;
  ck_assert_msg(late < 0.7 * early, "fp16 loss did not fall: %.4f -> %.4f (%d skipped)", early,
                late, skipped);
  fl_dataset_free(&d);
  fl_model_destroy(m);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("model_cuda");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, step_matches_cpu, 0, 2 * Z_COUNT);
  tcase_add_test(tc, activation_bytes);
  tcase_add_loop_test(tc, sync_bn_matches_cpu, 0, 4);
  tcase_add_loop_test(tc, sgd_steps_stay_close, 0, 3);
  tcase_add_loop_test(tc, amp_gemms_close, 0, 8);
  tcase_add_test(tc, amp_fp16_training);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cuda_test_main(suite); }
