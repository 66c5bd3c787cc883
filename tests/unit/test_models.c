/* test_models.c - the built-in models (logreg, mlp, cnn with none/bn/gn),
 * graph presets, and kind onnx through fl_model.
 *
 *  - every model's gradients against central differences of its loss;
 *  - recompute gives bitwise the gradients, statistics and losses of the
 *    plain run, never with more activation memory (less for the CNN), from
 *    the model's checkpoints or ones the job names;
 *  - kind onnx: classes from the output, labels or float targets by loss,
 *    PyTorch's loss on the fixtures (FL_SRCDIR/tests/fixtures/onnx);
 *  - gradient merge at model level: 4 micro-batches of 16 with avg equal
 *    one batch of 64 after 10 momentum / Adam steps (fl_optim.h kernels);
 *  - on_ready reports each gradient once, in reverse layer order, final;
 *  - the loss scale scales the gradients exactly, eval leaves the model
 *    alone, the same seed gives the same bits, bad arguments are refused
 *    without changing anything, and a small model learns. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_data.h"
#include "fl_model.h"
#include "fl_optim.h"
#include "gradcheck.h"

/* Small models so that finite differences over every parameter stay fast. */
static fl_model_spec small_spec(const char *kind, const char *norm, const char *act) {
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  snprintf(s.kind, sizeof s.kind, "%s", kind);
  snprintf(s.norm, sizeof s.norm, "%s", norm);
  snprintf(s.activation, sizeof s.activation, "%s", act);
  s.in_channels = 1;
  s.in_height = 8;
  s.in_width = 8;
  s.num_classes = 5;
  s.hidden[0] = 9, s.hidden[1] = 7, s.hidden[2] = 6;
  s.n_hidden = 3;
  s.conv_channels[0] = 4, s.conv_channels[1] = 4;
  s.conv_kernel = 3;
  s.fc_hidden = 6;
  s.gn_groups = 2;
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

/* Inputs with a learnable signal: the label is the argmax of a fixed
 * projection of x (so the models can be trained in a few steps). */
static batch make_batch(const fl_model *m, size_t n, int classes, uint64_t seed) {
  const size_t in = fl_model_input_size(m);
  batch b = {malloc(n * in * sizeof(float)), malloc(n * sizeof(int32_t)), n};
  ck_assert_ptr_nonnull(b.x);
  ck_assert_ptr_nonnull(b.y);
  uint64_t s = seed;
  gc_fill(b.x, n * in, &s, -1, 1);
  for (size_t i = 0; i < n; i++) {
    int best = 0;
    double bv = -INFINITY;
    for (int c = 0; c < classes; c++) {
      double v = 0;
      for (size_t j = 0; j < in; j++) v += b.x[i * in + j] * sin(1.0 + (double)(c * 31 + j));
      if (v > bv) bv = v, best = c;
    }
    b.y[i] = best;
  }
  return b;
}

static void free_batch(batch *b) { free(b->x), free(b->y); }

/* ----------------------------------------------------- gradient checking
 *
 * The model's float gradients are checked against central differences of a
 * double-precision reference of the same network, written here directly
 * from the spec (naive loops).  In double the step can be tiny (1e-6), so
 * the differences are exact to ~1e-9 and no ReLU or max-pool kink falls
 * inside a step, and the tolerance can be tight.  The reference's loss is
 * also checked against the model's, so it is the model's function that is
 * differentiated. */

typedef struct ref {
  const fl_model_spec *s;
  size_t np;
  double *v[32]; /* every parameter's value, in double, in the model's order */
  size_t n[32];
} ref;

static double ref_act(const fl_model_spec *s, double v) {
  return strcmp(s->activation, "tanh") == 0 ? tanh(v) : (v > 0 ? v : 0);
}

/* y[n][o] = x[n][.] . w[o][.] + b[o], optional activation */
static void ref_linear(const double *x, const double *w, const double *b, double *y, size_t n,
                       size_t in, size_t out, const fl_model_spec *s, int act) {
  for (size_t i = 0; i < n; i++)
    for (size_t o = 0; o < out; o++) {
      double v = b[o];
      for (size_t k = 0; k < in; k++) v += x[i * in + k] * w[o * in + k];
      y[i * out + o] = act ? ref_act(s, v) : v;
    }
}

/* Loss of the reference on batch b (mean cross-entropy). */
static double ref_loss(const ref *r, const batch *b) {
  const fl_model_spec *s = r->s;
  size_t C = (size_t)s->in_channels, H = (size_t)s->in_height, W = (size_t)s->in_width;
  const size_t N = b->n;
  double *a = malloc(N * C * H * W * sizeof *a), *t;
  for (size_t i = 0; i < N * C * H * W; i++) a[i] = b->x[i];
  size_t pi = 0; /* next parameter */
  if (strcmp(s->kind, "cnn") == 0) {
    const int bn = strcmp(s->norm, "bn") == 0, gn = strcmp(s->norm, "gn") == 0;
    for (int blk = 0; blk < 2; blk++) {
      const size_t K = (size_t)s->conv_kernel, P = K / 2, O = (size_t)s->conv_channels[blk];
      const double *w = r->v[pi++], *bias = (bn || gn) ? NULL : r->v[pi++];
      t = calloc(N * O * H * W, sizeof *t);
      for (size_t n = 0; n < N; n++)
        for (size_t o = 0; o < O; o++)
          for (size_t h = 0; h < H; h++)
            for (size_t x = 0; x < W; x++) {
              double v = bias ? bias[o] : 0;
              for (size_t c = 0; c < C; c++)
                for (size_t i = 0; i < K; i++)
                  for (size_t j = 0; j < K; j++) {
                    long ih = (long)(h + i) - (long)P, iw = (long)(x + j) - (long)P;
                    if (ih < 0 || iw < 0 || ih >= (long)H || iw >= (long)W) continue;
                    v += a[((n * C + c) * H + ih) * W + iw] * w[((o * C + c) * K + i) * K + j];
                  }
              t[((n * O + o) * H + h) * W + x] = (bn || gn) ? v : ref_act(s, v);
            }
      free(a);
      a = t, C = O;
      if (bn || gn) {
        const double *g = r->v[pi++], *be = r->v[pi++];
        if (bn) pi += 2; /* running statistics: not used in training mode */
        const size_t G = bn ? 1 : (size_t)s->gn_groups, S = H * W;
        /* statistics over: bn (all n, one channel); gn (one n, C/G channels) */
        for (size_t n = 0; n < (bn ? 1 : N); n++)
          for (size_t grp = 0; grp < (bn ? C : G); grp++) {
            const size_t c0 = bn ? grp : grp * (C / G), c1 = bn ? grp + 1 : c0 + C / G;
            const size_t n0 = bn ? 0 : n, n1 = bn ? N : n + 1;
            double mu = 0, var = 0, m = 0;
            for (size_t nn = n0; nn < n1; nn++)
              for (size_t c = c0; c < c1; c++)
                for (size_t k = 0; k < S; k++) mu += a[(nn * C + c) * S + k], m++;
            mu /= m;
            for (size_t nn = n0; nn < n1; nn++)
              for (size_t c = c0; c < c1; c++)
                for (size_t k = 0; k < S; k++) var += pow(a[(nn * C + c) * S + k] - mu, 2);
            var /= m;
            for (size_t nn = n0; nn < n1; nn++)
              for (size_t c = c0; c < c1; c++)
                for (size_t k = 0; k < S; k++) {
                  double *e = &a[(nn * C + c) * S + k];
                  *e = ref_act(s, g[c] * (*e - mu) / sqrt(var + s->bn_epsilon) + be[c]);
                }
          }
      }
      /* 2x2 max-pool */
      const size_t H2 = H / 2, W2 = W / 2;
      t = malloc(N * C * H2 * W2 * sizeof *t);
      for (size_t p = 0; p < N * C; p++)
        for (size_t h = 0; h < H2; h++)
          for (size_t x = 0; x < W2; x++) {
            const double *q = a + p * H * W + 2 * h * W + 2 * x;
            t[(p * H2 + h) * W2 + x] = fmax(fmax(q[0], q[1]), fmax(q[W], q[W + 1]));
          }
      free(a);
      a = t, H = H2, W = W2;
    }
    if (s->fc_hidden) {
      const size_t in = C * H * W;
      t = malloc(N * s->fc_hidden * sizeof *t);
      ref_linear(a, r->v[pi], r->v[pi + 1], t, N, in, s->fc_hidden, s, 1);
      pi += 2;
      free(a);
      a = t, C = s->fc_hidden, H = W = 1;
    }
  } else {
    const size_t nh = strcmp(s->kind, "mlp") == 0 ? s->n_hidden : 0;
    for (size_t l = 0; l < nh; l++) {
      const size_t in = C * H * W;
      t = malloc(N * s->hidden[l] * sizeof *t);
      ref_linear(a, r->v[pi], r->v[pi + 1], t, N, in, s->hidden[l], s, 1);
      pi += 2;
      free(a);
      a = t, C = s->hidden[l], H = W = 1;
    }
  }
  const size_t K = (size_t)s->num_classes, in = C * H * W;
  t = malloc(N * K * sizeof *t);
  ref_linear(a, r->v[pi], r->v[pi + 1], t, N, in, K, s, 0);
  pi += 2;
  ck_assert_uint_eq(pi, r->np); /* the reference used every parameter */
  double loss = 0;
  for (size_t n = 0; n < N; n++) {
    double mx = -INFINITY, se = 0;
    for (size_t k = 0; k < K; k++) mx = fmax(mx, t[n * K + k]);
    for (size_t k = 0; k < K; k++) se += exp(t[n * K + k] - mx);
    loss += mx + log(se) - t[n * K + b->y[n]];
  }
  free(a);
  free(t);
  return loss / (double)N;
}

/* Every trainable parameter's float gradient against the reference's
 * central differences: |a - n| <= 2e-6 + 2e-4 |n| (a 0.05% error fails). */
static void check_model_grads(const fl_model_spec *s, size_t n) {
  fl_model *m = make(s, n, 7);
  batch b = make_batch(m, n, s->num_classes, 99);
  fl_model_result res;
  ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, n, 1.0f, NULL, NULL, &res), FL_OK);
  ref r = {.s = s, .np = fl_model_num_params(m)};
  ck_assert_uint_le(r.np, 32);
  for (size_t i = 0; i < r.np; i++) {
    fl_param *p = fl_model_param(m, i);
    r.n[i] = p->n;
    r.v[i] = malloc(p->n * sizeof(double));
    for (size_t j = 0; j < p->n; j++) r.v[i][j] = p->value[j];
  }
  const double l0 = ref_loss(&r, &b);
  ck_assert_msg(fabs(l0 - res.loss_sum / n) <= 1e-5 * fabs(l0), "%s/%s: loss %.9g, reference "
                "%.9g", s->kind, s->norm, res.loss_sum / n, l0);
  size_t checked = 0;
  for (size_t i = 0; i < r.np; i++) {
    fl_param *p = fl_model_param(m, i);
    if (!p->grad) continue;
    double worst = 0, norm = 0;
    for (size_t j = 0; j < p->n; j++) {
      const double v0 = r.v[i][j], h = 1e-6;
      r.v[i][j] = v0 + h;
      const double lp = ref_loss(&r, &b);
      r.v[i][j] = v0 - h;
      const double lm = ref_loss(&r, &b);
      r.v[i][j] = v0;
      const double num = (lp - lm) / (2 * h), a = p->grad[j];
      const double e = fabs(a - num) / (2e-6 + 2e-4 * fabs(num));
      ck_assert_msg(e <= 1.0, "%s/%s/%s %s[%zu]: analytic %.9g numeric %.9g", s->kind, s->norm,
                    s->activation, p->name, j, a, num);
      worst = fmax(worst, e);
      norm += num * num;
      checked++;
    }
    ck_assert_msg(norm > 0, "%s: zero gradient tests nothing", p->name);
  }
  ck_assert_uint_gt(checked, 0);
  for (size_t i = 0; i < r.np; i++) free(r.v[i]);
  free_batch(&b);
  fl_model_destroy(m);
}

START_TEST(gradcheck_logreg) {
  fl_model_spec s = small_spec("logreg", "", "relu");
  check_model_grads(&s, 6);
}
END_TEST

START_TEST(gradcheck_mlp) {
  fl_model_spec s = small_spec("mlp", "", "relu");
  check_model_grads(&s, 6);
  s = small_spec("mlp", "", "tanh");
  check_model_grads(&s, 6);
  s.recompute = 1;
  check_model_grads(&s, 6);
}
END_TEST

START_TEST(gradcheck_cnn) {
  const char *norms[] = {"", "bn", "gn"};
  fl_model_spec s = small_spec("cnn", norms[_i], "relu");
  check_model_grads(&s, 4);
  s.recompute = 1;
  check_model_grads(&s, 4);
  s = small_spec("cnn", norms[_i], "tanh");
  s.fc_hidden = 0; /* conv blocks straight into the classifier */
  s.conv_kernel = 5;
  s.in_width = 6;  /* non-square */
  check_model_grads(&s, 3);
}
END_TEST

/* ---------------------------------------------------------------- recompute */

typedef struct ready_log {
  size_t idx[64];
  int layer[64];
  size_t n;
  fl_model *m;
  float *snap[64]; /* the gradient as it was when reported */
} ready_log;

static void on_ready(void *ctx, size_t index) {
  ready_log *l = ctx;
  ck_assert_uint_lt(l->n, 64);
  fl_param *p = fl_model_param(l->m, index);
  l->idx[l->n] = index;
  l->layer[l->n] = p->layer;
  l->snap[l->n] = malloc(p->n * sizeof(float));
  memcpy(l->snap[l->n], p->grad, p->n * sizeof(float));
  l->n++;
}

static void ready_free(ready_log *l) {
  for (size_t i = 0; i < l->n; i++) free(l->snap[i]);
  l->n = 0;
}

static void sgd(fl_model *m, float lr) {
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    if (p->grad)
      for (size_t j = 0; j < p->n; j++) p->value[j] -= lr * p->grad[j];
  }
}

static void assert_same_model(fl_model *a, fl_model *b) {
  ck_assert_uint_eq(fl_model_num_params(a), fl_model_num_params(b));
  for (size_t i = 0; i < fl_model_num_params(a); i++) {
    fl_param *p = fl_model_param(a, i), *q = fl_model_param(b, i);
    ck_assert_str_eq(p->name, q->name);
    ck_assert_msg(memcmp(p->value, q->value, p->n * sizeof(float)) == 0, "%s differs", p->name);
    if (p->grad)
      ck_assert_msg(memcmp(p->grad, q->grad, p->n * sizeof(float)) == 0, "%s grad differs",
                    p->name);
  }
}

static void check_recompute(fl_model_spec s, size_t n) {
  s.recompute = 0;
  fl_model *a = make(&s, n, 3);
  s.recompute = 1;
  fl_model *b = make(&s, n, 3);
  /* never more memory; strictly less only where the values kept for
   * backward outweigh the largest backward working set (the liveness
   * plan already frees what the plain run does not need) */
  ck_assert_uint_le(fl_model_activation_bytes(b), fl_model_activation_bytes(a));
  ready_log la = {.m = a}, lb = {.m = b};
  for (int step = 0; step < 3; step++) {
    batch bt = make_batch(a, n - (size_t)step, s.num_classes, 100 + (uint64_t)step);
    fl_model_result ra, rb;
    ck_assert_int_eq(fl_model_train_step(a, bt.x, bt.y, bt.n, 8.0f, on_ready, &la, &ra), FL_OK);
    ck_assert_int_eq(fl_model_train_step(b, bt.x, bt.y, bt.n, 8.0f, on_ready, &lb, &rb), FL_OK);
    ck_assert(memcmp(&ra.loss_sum, &rb.loss_sum, sizeof ra.loss_sum) == 0);
    ck_assert_uint_eq(ra.correct1, rb.correct1);
    assert_same_model(a, b);
    ck_assert_uint_eq(la.n, lb.n);
    for (size_t i = 0; i < la.n; i++) ck_assert_uint_eq(la.idx[i], lb.idx[i]);
    ready_free(&la), ready_free(&lb);
    sgd(a, 0.05f), sgd(b, 0.05f);
    /* eval after the step agrees too (batch norm: the same running stats) */
    ck_assert_int_eq(fl_model_eval(a, bt.x, bt.y, bt.n, &ra), FL_OK);
    ck_assert_int_eq(fl_model_eval(b, bt.x, bt.y, bt.n, &rb), FL_OK);
    ck_assert(memcmp(&ra.loss_sum, &rb.loss_sum, sizeof ra.loss_sum) == 0);
    free_batch(&bt);
  }
  fl_model_destroy(a);
  fl_model_destroy(b);
}

START_TEST(recompute_bitwise_mlp) {
  check_recompute(small_spec("mlp", "", "relu"), 8);
  check_recompute(small_spec("mlp", "", "tanh"), 8);
}
END_TEST

START_TEST(recompute_bitwise_cnn) {
  const char *norms[] = {"", "bn", "gn"};
  fl_model_spec s = small_spec("cnn", norms[_i], "relu");
  check_recompute(s, 6);
  s.fc_hidden = 0;
  check_recompute(s, 6);
}
END_TEST

/* recompute_configs.checkpoints names graph tensors: segment boundaries
 * chosen by the job give the plain run's bits too; a name that is no
 * tensor of the model is refused at create. */
START_TEST(recompute_named_checkpoints) {
  const char *mlp_ck[] = {"fc0", "fc2"}, *cnn_ck[] = {"bn0", "pool1", "fc0"};
  fl_model_spec s = small_spec("mlp", "", "relu");
  s.checkpoints = mlp_ck;
  s.n_checkpoints = 2;
  check_recompute(s, 8);
  s = small_spec("cnn", "bn", "relu");
  s.checkpoints = cnn_ck;
  s.n_checkpoints = 3;
  check_recompute(s, 6);
  const char *bad[] = {"fc0", "no_such_tensor"};
  s = small_spec("mlp", "", "relu");
  s.recompute = 1;
  s.checkpoints = bad;
  s.n_checkpoints = 2;
  fl_model *m = NULL;
  ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_EINVAL);
  ck_assert_ptr_null(m);
}
END_TEST

/* The default models at batch 64 hold no more with recompute, and the CNN
 * (whose conv maps kept for backward outweigh one layer's backward) less.
 * The MLP's peak is fc1's backward (its input, output, their gradients),
 * which recompute cannot lower. */
START_TEST(recompute_saves_memory_default_models) {
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  const char *kinds[] = {"mlp", "cnn"};
  for (int k = 0; k < 2; k++) {
    snprintf(s.kind, sizeof s.kind, "%s", kinds[k]);
    s.recompute = 0;
    fl_model *a = make(&s, 64, 1);
    s.recompute = 1;
    fl_model *b = make(&s, 64, 1);
    if (k == 1) ck_assert_uint_lt(fl_model_activation_bytes(b), fl_model_activation_bytes(a));
    else ck_assert_uint_le(fl_model_activation_bytes(b), fl_model_activation_bytes(a));
    fl_model_destroy(a);
    fl_model_destroy(b);
  }
}
END_TEST

/* ------------------------------------------------------- gradient merge */

static void optim_step(fl_model *m, const fl_optim_hparams *hp, float **state1, float **state2,
                       float **grads, float lr, int64_t step) {
  fl_optim_tensor t[32];
  size_t nt = 0;
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    if (!p->grad) continue;
    t[nt] = (fl_optim_tensor){p->name, p->value, grads ? grads[nt] : p->grad, state1[nt],
                              state2 ? state2[nt] : NULL, p->n};
    nt++;
  }
  ck_assert_int_eq(fl_optim_step(hp, t, nt, lr, step), FL_OK);
}

/* Zeroed state / accumulator buffers, one per trainable parameter. */
static float **alloc_like(fl_model *m, size_t *nt) {
  float **b = calloc(32, sizeof *b);
  size_t k = 0;
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    if (p->grad) b[k++] = calloc(p->n, sizeof(float));
  }
  *nt = k;
  return b;
}

static void free_like(float **b, size_t nt) {
  for (size_t i = 0; i < nt; i++) free(b[i]);
  free(b);
}

static void check_gradient_merge(fl_model_spec s, fl_optim_kind kind, float lr) {
  fl_optim_hparams hp = fl_optim_hparams_default(kind);
  fl_model *big = make(&s, 64, 11), *small = make(&s, 16, 11);
  size_t nt;
  float **s1a = alloc_like(big, &nt), **s2a = alloc_like(big, &nt);
  float **s1b = alloc_like(small, &nt), **s2b = alloc_like(small, &nt);
  float **acc = alloc_like(small, &nt);
  const int two = fl_optim_state_count(kind) == 2;
  size_t sizes[32];
  const float *grads[32];
  for (size_t i = 0, k = 0; i < fl_model_num_params(small); i++) {
    fl_param *p = fl_model_param(small, i);
    if (p->grad) sizes[k] = p->n, grads[k] = p->grad, k++;
  }
  float first = fl_model_param(big, 0)->value[0];
  for (int step = 1; step <= 10; step++) {
    batch b = make_batch(big, 64, s.num_classes, 500 + (uint64_t)step);
    ck_assert_int_eq(fl_model_train_step(big, b.x, b.y, 64, 1.0f, NULL, NULL, NULL), FL_OK);
    optim_step(big, &hp, s1a, two ? s2a : NULL, NULL, lr, step);
    for (size_t i = 0; i < nt; i++) memset(acc[i], 0, sizes[i] * sizeof(float));
    const size_t in = fl_model_input_size(small);
    for (int k = 0; k < 4; k++) {
      ck_assert_int_eq(fl_model_train_step(small, b.x + (size_t)k * 16 * in, b.y + k * 16, 16,
                                           1.0f, NULL, NULL, NULL), FL_OK);
      ck_assert_int_eq(fl_gm_accumulate(acc, grads, sizes, nt), FL_OK);
    }
    ck_assert_int_eq(fl_gm_finalize(acc, sizes, nt, 4, 1), FL_OK);
    optim_step(small, &hp, s1b, two ? s2b : NULL, acc, lr, step);
    free_batch(&b);
  }
  double maxdiff = 0, moved = 0;
  for (size_t i = 0; i < fl_model_num_params(big); i++) {
    fl_param *p = fl_model_param(big, i), *q = fl_model_param(small, i);
    for (size_t j = 0; j < p->n; j++) maxdiff = fmax(maxdiff, fabs(p->value[j] - q->value[j]));
  }
  moved = fabs(fl_model_param(big, 0)->value[0] - first);
  ck_assert_msg(maxdiff <= 1e-5, "%s %s: k=4 x 16 differs from 64 by %g", s.kind,
                fl_optim_kind_name(kind), maxdiff);
  ck_assert_msg(moved > 1e-4, "the parameters did not move (%g)", moved);
  free_like(s1a, nt), free_like(s2a, nt), free_like(s1b, nt), free_like(s2b, nt);
  free_like(acc, nt);
  fl_model_destroy(big);
  fl_model_destroy(small);
}

START_TEST(gradient_merge_momentum) {
  check_gradient_merge(small_spec("mlp", "", "relu"), FL_OPTIM_MOMENTUM, 0.05f);
  check_gradient_merge(small_spec("cnn", "gn", "relu"), FL_OPTIM_MOMENTUM, 0.05f);
}
END_TEST

START_TEST(gradient_merge_adam) {
  check_gradient_merge(small_spec("mlp", "", "relu"), FL_OPTIM_ADAM, 1e-3f);
  check_gradient_merge(small_spec("cnn", "gn", "relu"), FL_OPTIM_ADAM, 1e-3f);
}
END_TEST

/* ------------------------------------------------------------ kind onnx */

/* tests/fixtures/onnx/<model>.<what> */
static void fixture(char *out, size_t cap, const char *model, const char *what) {
  const char *src = getenv("FL_SRCDIR");
  snprintf(out, cap, "%s/tests/fixtures/onnx/%s.%s", src ? src : "..", model, what);
}

static const float *fixture_f32(const char *model, const char *what, size_t n, fl_npy **f) {
  char p[1024];
  fixture(p, sizeof p, model, what);
  ck_assert_msg(fl_npy_open(p, f) == FL_OK, "cannot read %s", p);
  ck_assert_uint_eq(fl_npy_count(*f), n);
  return fl_npy_data(*f);
}

/* model.c builds kind onnx from the file: the classes (or targets) are the
 * output's width, the loss picks class labels or float targets, and a
 * step's loss is PyTorch's. */
START_TEST(onnx_kind_through_model) {
  struct {
    const char *name;
    fl_loss_kind loss;
    size_t batch, in, k;
  } fx[2] = {{"mlp", FL_LOSS_SOFTMAX_XENT, 6, 12, 5}, {"residual", FL_LOSS_MSE, 3, 2 * 6 * 6, 3}};
  for (int i = 0; i < 2; i++) {
    fl_model_spec s;
    fl_model_spec_defaults(&s);
    snprintf(s.kind, sizeof s.kind, "onnx");
    fixture(s.path, sizeof s.path, fx[i].name, "onnx");
    s.loss = fx[i].loss;
    fl_model *m = NULL;
    ck_assert_int_eq(fl_model_create(&s, fx[i].batch, 1, &m), FL_OK);
    ck_assert_int_eq(fl_model_get_spec(m)->num_classes, (int)fx[i].k);
    ck_assert_uint_eq(fl_model_input_size(m), fx[i].in);
    ck_assert_ptr_nonnull(fl_model_graph(m));
    fl_npy *fx_x, *fx_y, *fx_l;
    const float *x = fixture_f32(fx[i].name, "x.npy", fx[i].batch * fx[i].in, &fx_x);
    const float *want = fixture_f32(fx[i].name, "loss.npy", 1, &fx_l);
    char p[1024];
    fixture(p, sizeof p, fx[i].name, "y.npy");
    ck_assert_int_eq(fl_npy_open(p, &fx_y), FL_OK);
    fl_model_result r;
    if (fx[i].loss != FL_LOSS_SOFTMAX_XENT) {
      ck_assert(fl_model_float_targets(m));
      const float *t = fl_npy_data(fx_y);
      int32_t y0[8] = {0};
      ck_assert_int_eq(fl_model_train_step(m, x, y0, fx[i].batch, 1.0f, NULL, NULL, &r), FL_EINVAL);
      ck_assert_int_eq(fl_model_train_stepf(m, x, t, fx[i].batch, 1.0f, NULL, NULL, &r), FL_OK);
    } else {
      ck_assert(!fl_model_float_targets(m));
      const int64_t *y64 = fl_npy_data(fx_y);
      int32_t y[8];
      for (size_t k = 0; k < fx[i].batch; k++) y[k] = (int32_t)y64[k];
      ck_assert_int_eq(fl_model_train_stepf(m, x, x, fx[i].batch, 1.0f, NULL, NULL, &r), FL_EINVAL);
      ck_assert_int_eq(fl_model_train_step(m, x, y, fx[i].batch, 1.0f, NULL, NULL, &r), FL_OK);
    }
    const double got = r.loss_sum / (double)fx[i].batch;
    ck_assert_msg(fabs(got - want[0]) <= 1e-5 * fabs(want[0]) + 1e-6, "%s: loss %.9g, PyTorch %.9g",
                  fx[i].name, got, (double)want[0]);
    fl_npy_close(fx_x), fl_npy_close(fx_y), fl_npy_close(fx_l);
    fl_model_destroy(m);
  }
  /* no path, a loss that is no fl_loss_kind, a missing file */
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  snprintf(s.kind, sizeof s.kind, "onnx");
  fl_model *m = NULL;
  ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_EINVAL);
  fixture(s.path, sizeof s.path, "mlp", "onnx");
  s.loss = FL_LOSS_COUNT;
  ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_EINVAL);
  s.loss = FL_LOSS_SOFTMAX_XENT;
  fixture(s.path, sizeof s.path, "no_such_model", "onnx");
  ck_assert_int_ne(fl_model_create(&s, 4, 1, &m), FL_OK);
  ck_assert_ptr_null(m);
}
END_TEST

/* ------------------------------------------------------------- behaviour */

START_TEST(on_ready_reverse_and_final) {
  const char *kinds[] = {"logreg", "mlp", "cnn"};
  for (int k = 0; k < 3; k++) {
    fl_model_spec s = small_spec(kinds[k], k == 2 ? "bn" : "", "relu");
    fl_model *m = make(&s, 5, 1);
    batch b = make_batch(m, 5, s.num_classes, 2);
    ready_log l = {.m = m};
    ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 5, 1.0f, on_ready, &l, NULL), FL_OK);
    size_t trainable = 0;
    for (size_t i = 0; i < fl_model_num_params(m); i++) trainable += !!fl_model_param(m, i)->grad;
    ck_assert_uint_eq(l.n, trainable);
    for (size_t i = 0; i < l.n; i++) {
      fl_param *p = fl_model_param(m, l.idx[i]);
      ck_assert_ptr_nonnull(p->grad);
      ck_assert_mem_eq(l.snap[i], p->grad, p->n * sizeof(float)); /* already final */
      if (i > 0) {
        ck_assert_int_le(l.layer[i], l.layer[i - 1]);
        ck_assert_uint_lt(l.idx[i], l.idx[i - 1]);
      }
    }
    ready_free(&l);
    free_batch(&b);
    fl_model_destroy(m);
  }
}
END_TEST

START_TEST(loss_scale_scales_exactly) {
  const char *norms[] = {"", "bn"};
  for (int k = 0; k < 2; k++) {
    fl_model_spec s = small_spec(k ? "cnn" : "mlp", norms[k], "relu");
    fl_model *m = make(&s, 6, 5);
    batch b = make_batch(m, 6, s.num_classes, 6);
    fl_model_result r1, r2;
    ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 6, 1.0f, NULL, NULL, &r1), FL_OK);
    float *g1[32];
    size_t np = fl_model_num_params(m);
    for (size_t i = 0; i < np; i++) {
      fl_param *p = fl_model_param(m, i);
      g1[i] = p->grad ? malloc(p->n * sizeof(float)) : NULL;
      if (p->grad) memcpy(g1[i], p->grad, p->n * sizeof(float));
    }
    ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 6, 1024.0f, NULL, NULL, &r2), FL_OK);
    ck_assert_double_eq(r1.loss_sum, r2.loss_sum); /* the reported loss is unscaled */
    for (size_t i = 0; i < np; i++) {
      fl_param *p = fl_model_param(m, i);
      if (!p->grad) continue;
      for (size_t j = 0; j < p->n; j++) ck_assert_float_eq(p->grad[j], 1024.0f * g1[i][j]);
      free(g1[i]);
    }
    free_batch(&b);
    fl_model_destroy(m);
  }
}
END_TEST

START_TEST(eval_leaves_model_alone) {
  const char *norms[] = {"", "bn"};
  for (int k = 0; k < 2; k++) {
    fl_model_spec s = small_spec("cnn", norms[k], "relu");
    fl_model *m = make(&s, 6, 5), *ref = make(&s, 6, 5);
    batch b = make_batch(m, 6, s.num_classes, 6);
    fl_model_result rt, re, re2;
    ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 6, 1.0f, NULL, NULL, &rt), FL_OK);
    ck_assert_int_eq(fl_model_train_step(ref, b.x, b.y, 6, 1.0f, NULL, NULL, &rt), FL_OK);
    ck_assert_int_eq(fl_model_eval(m, b.x, b.y, 6, &re), FL_OK);
    ck_assert_int_eq(fl_model_eval(m, b.x, b.y, 3, &re2), FL_OK);
    ck_assert_uint_eq(re.count, 6);
    ck_assert_uint_eq(re2.count, 3);
    assert_same_model(m, ref); /* values, running stats and gradients unchanged */
    if (!norms[k][0]) /* no batch norm: eval computes the training forward */
      ck_assert(memcmp(&re.loss_sum, &rt.loss_sum, sizeof rt.loss_sum) == 0);
    ck_assert_uint_le(re.correct1, re.correct5);
    free_batch(&b);
    fl_model_destroy(m);
    fl_model_destroy(ref);
  }
}
END_TEST

START_TEST(same_seed_same_bits) {
  const char *kinds[] = {"logreg", "mlp", "cnn"};
  for (int k = 0; k < 3; k++) {
    fl_model_spec s = small_spec(kinds[k], "bn", "relu");
    fl_model *a = make(&s, 4, 42), *b = make(&s, 4, 42), *c = make(&s, 4, 43);
    assert_same_model(a, b);
    fl_param *p = fl_model_param(a, 0), *q = fl_model_param(c, 0);
    ck_assert(memcmp(p->value, q->value, p->n * sizeof(float)) != 0);
    /* weights inside their init bound, not all equal */
    ck_assert_str_eq(p->name, k == 2 ? "conv0.weight" : "fc0.weight");
    float lo = INFINITY, hi = -INFINITY;
    for (size_t j = 0; j < p->n; j++) lo = fminf(lo, p->value[j]), hi = fmaxf(hi, p->value[j]);
    ck_assert(lo < hi && hi <= 1.0f && lo >= -1.0f);
    fl_model_destroy(a), fl_model_destroy(b), fl_model_destroy(c);
  }
}
END_TEST

START_TEST(parameter_names_and_shapes) {
  fl_model_spec s = small_spec("cnn", "bn", "relu");
  fl_model *m = make(&s, 2, 1);
  const char *want[] = {"conv0.weight", "bn0.weight", "bn0.bias", "bn0.running_mean",
                        "bn0.running_var", "conv1.weight", "bn1.weight", "bn1.bias",
                        "bn1.running_mean", "bn1.running_var", "fc0.weight", "fc0.bias",
                        "fc1.weight", "fc1.bias"};
  ck_assert_uint_eq(fl_model_num_params(m), 14);
  for (size_t i = 0; i < 14; i++) ck_assert_str_eq(fl_model_param(m, i)->name, want[i]);
  fl_param *c1 = fl_model_param(m, 5), *fc0 = fl_model_param(m, 10);
  ck_assert_int_eq(c1->ndim, 4);
  ck_assert(c1->shape[0] == 4 && c1->shape[1] == 4 && c1->shape[2] == 3 && c1->shape[3] == 3);
  ck_assert(fc0->shape[0] == 6 && fc0->shape[1] == 4 * 2 * 2);
  ck_assert_ptr_null(fl_model_param(m, 3)->grad); /* buffers have no gradient */
  ck_assert_float_eq(fl_model_param(m, 4)->value[0], 1.0f);
  ck_assert_ptr_null(fl_model_param(m, 14));
  ck_assert_uint_eq(fl_model_input_size(m), 64);
  ck_assert_uint_eq(fl_model_max_batch(m), 2);
  ck_assert_str_eq(fl_model_get_spec(m)->norm, "bn");
  fl_model_destroy(m);
  /* the default mlp is 784-256-128-100-10 */
  fl_model_spec d;
  fl_model_spec_defaults(&d);
  m = make(&d, 2, 1);
  ck_assert_uint_eq(fl_model_num_params(m), 8);
  const int64_t dims[][2] = {{256, 784}, {128, 256}, {100, 128}, {10, 100}};
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(fl_model_param(m, 2 * (size_t)i)->shape[0], dims[i][0]);
    ck_assert_int_eq(fl_model_param(m, 2 * (size_t)i)->shape[1], dims[i][1]);
  }
  fl_model_destroy(m);
  /* a zeroed spec means the defaults too */
  fl_model_spec z;
  memset(&z, 0, sizeof z);
  z.hidden[0] = 16, z.n_hidden = 1;
  m = make(&z, 2, 1);
  ck_assert_str_eq(fl_model_get_spec(m)->kind, "mlp");
  ck_assert_uint_eq(fl_model_input_size(m), 784);
  fl_model_destroy(m);
}
END_TEST

static fl_status create_status(fl_model_spec s, size_t max_batch) {
  fl_model *m = NULL;
  fl_status st = fl_model_create(&s, max_batch, 1, &m);
  if (st == FL_OK) fl_model_destroy(m);
  else ck_assert_ptr_null(m);
  return st;
}

START_TEST(bad_arguments) {
  fl_model_spec s = small_spec("mlp", "", "relu");
  fl_model *m = NULL;
  ck_assert_int_eq(fl_model_create(NULL, 4, 1, &m), FL_EINVAL);
  ck_assert_int_eq(fl_model_create(&s, 4, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(create_status(s, 0), FL_EINVAL);
  fl_model_spec t = s;
  snprintf(t.kind, sizeof t.kind, "resnet");
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = s, snprintf(t.activation, sizeof t.activation, "gelu");
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = s, t.n_hidden = 0;
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = s, t.n_hidden = FL_MODEL_MAX_HIDDEN + 1;
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = s, t.hidden[1] = 0;
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = s, t.num_classes = 1;
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = s, t.in_width = -3;
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = small_spec("cnn", "gn", "relu"), t.gn_groups = 3; /* does not divide 4 */
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = small_spec("cnn", "", "relu"), t.conv_kernel = 4;
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = small_spec("cnn", "", "relu"), t.in_height = 3; /* too small for two pools */
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = small_spec("cnn", "xx", "relu");
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = small_spec("cnn", "bn", "relu"), t.bn_momentum = 2.0f;
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);
  t = small_spec("plugin", "", "relu"); /* no path */
  ck_assert_int_eq(create_status(t, 4), FL_EINVAL);

  /* steps: refused, and nothing changes */
  t = small_spec("cnn", "bn", "relu");
  m = make(&t, 4, 1);
  fl_model *ref = make(&t, 4, 1);
  batch b = make_batch(m, 4, t.num_classes, 1);
  ck_assert_int_eq(fl_model_train_step(NULL, b.x, b.y, 4, 1.0f, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_train_step(m, NULL, b.y, 4, 1.0f, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_train_step(m, b.x, NULL, 4, 1.0f, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 0, 1.0f, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 5, 1.0f, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 4, 0.0f, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 4, NAN, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 4, INFINITY, NULL, NULL, NULL), FL_EINVAL);
  b.y[3] = 5; /* num_classes is 5 */
  ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 4, 1.0f, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_eval(m, b.x, b.y, 4, NULL), FL_EINVAL);
  b.y[3] = -1;
  ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 4, 1.0f, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_eval(m, b.x, b.y, 0, NULL), FL_EINVAL);
  assert_same_model(m, ref);
  ck_assert_uint_eq(fl_model_num_params(NULL), 0);
  ck_assert_ptr_null(fl_model_param(NULL, 0));
  fl_model_destroy(NULL);
  free_batch(&b);
  fl_model_destroy(m);
  fl_model_destroy(ref);
}
END_TEST

/* A few momentum steps on a learnable problem halve the loss. */
START_TEST(models_learn) {
  const char *kinds[] = {"logreg", "mlp", "cnn", "cnn", "cnn"};
  const char *norms[] = {"", "", "", "bn", "gn"};
  fl_model_spec s = small_spec(kinds[_i], norms[_i], "relu");
  s.num_classes = 3;
  fl_model *m = make(&s, 32, 9);
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_MOMENTUM);
  size_t nt;
  float **st = alloc_like(m, &nt);
  batch b = make_batch(m, 32, s.num_classes, 77);
  fl_model_result r;
  ck_assert_int_eq(fl_model_eval(m, b.x, b.y, 32, &r), FL_OK);
  const double before = r.loss_sum / 32;
  for (int step = 1; step <= 60; step++) {
    ck_assert_int_eq(fl_model_train_step(m, b.x, b.y, 32, 1.0f, NULL, NULL, NULL), FL_OK);
    optim_step(m, &hp, st, NULL, NULL, 0.05f, step);
  }
  ck_assert_int_eq(fl_model_eval(m, b.x, b.y, 32, &r), FL_OK);
  const double after = r.loss_sum / 32;
  ck_assert_msg(after < 0.5 * before, "%s/%s: loss %g -> %g", kinds[_i], norms[_i], before,
                after);
  free_like(st, nt);
  free_batch(&b);
  fl_model_destroy(m);
}
END_TEST

static Suite *models_suite(void) {
  Suite *s = suite_create("models");
  TCase *g = tcase_create("gradcheck");
  tcase_set_timeout(g, 120);
  tcase_add_test(g, gradcheck_logreg);
  tcase_add_test(g, gradcheck_mlp);
  tcase_add_loop_test(g, gradcheck_cnn, 0, 3);
  suite_add_tcase(s, g);
  TCase *r = tcase_create("recompute");
  tcase_add_test(r, recompute_bitwise_mlp);
  tcase_add_loop_test(r, recompute_bitwise_cnn, 0, 3);
  tcase_add_test(r, recompute_saves_memory_default_models);
  tcase_add_test(r, recompute_named_checkpoints);
  tcase_add_test(r, onnx_kind_through_model);
  suite_add_tcase(s, r);
  TCase *m = tcase_create("merge");
  tcase_add_test(m, gradient_merge_momentum);
  tcase_add_test(m, gradient_merge_adam);
  suite_add_tcase(s, m);
  TCase *b = tcase_create("behaviour");
  tcase_add_test(b, on_ready_reverse_and_final);
  tcase_add_test(b, loss_scale_scales_exactly);
  tcase_add_test(b, eval_leaves_model_alone);
  tcase_add_test(b, same_seed_same_bits);
  tcase_add_test(b, parameter_names_and_shapes);
  tcase_add_test(b, bad_arguments);
  tcase_add_loop_test(b, models_learn, 0, 5);
  suite_add_tcase(s, b);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(models_suite());
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
