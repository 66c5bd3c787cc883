/* test_graph.c - the op-graph engine: builder checks, reverse-mode
 * gradients of a branchy graph against finite differences (a tensor used
 * twice by one node and by two nodes, a broadcast parameter, a branch that
 * does not reach the loss), the losses with float targets, on_ready order
 * and finality, recompute with named checkpoints bitwise equal to the
 * plain run with less memory, buffer reuse, re-binding to other batch
 * sizes, the input gradient of the forward/backward calls, dropout masks
 * that follow the step, the AMP white and black lists, and refusals (a gpu graph with an op without
 * CUDA twins names it)
 * (unknown op, attribute, arity, duplicate names, unknown checkpoint, gpu
 * without CUDA). */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_graph.h"
#include "fl_graph_inspect.h"
#include "fl_log.h"
#include "gradcheck.h"

#define B 5
#define IN 4
#define H 3
#define K 2

static const fl_gattr TRANS_B = {.name = "transB", .kind = FL_GA_INT, .i = 1};

/* x[B,4] -> h1 = tanh(x W1^T + b1) -> h2 = h1*h1 -> h3 = (h2 + h1) * s
 * -> out = h3 W2^T + b2 [B,2]; and u = Tanh(h1), which the loss ignores.
 * With deep > 0, `deep` more tanh layers of width H sit between h3 and the
 * output (for recompute and memory tests). */
static fl_graph *build(fl_gloss loss, int deep, uint64_t seed) {
  fl_graph *g;
  uint64_t s = seed;
  float w1[H * IN], b1[H], w2[K * H], b2[K], sc[1] = {0.7f};
  gc_fill(w1, H * IN, &s, -0.8, 0.8);
  gc_fill(b1, H, &s, -0.2, 0.2);
  gc_fill(w2, K * H, &s, -0.8, 0.8);
  gc_fill(b2, K, &s, -0.2, 0.2);
  ck_assert_int_eq(fl_graph_new("t", &g), FL_OK);
  const int64_t xd[2] = {FL_G_BATCH, IN}, w1d[2] = {H, IN}, hd[1] = {H}, w2d[2] = {K, H},
                kd[1] = {K}, sd[1] = {1};
  int x, W1, B1, W2, B2, S, h1, h2, h3, u, out;
  ck_assert_int_eq(fl_graph_input(g, "x", 2, xd, &x), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "l1.weight", 2, w1d, w1, 1, &W1), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "l1.bias", 1, hd, b1, 1, &B1), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "scale", 1, sd, sc, 1, &S), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "l2.weight", 2, w2d, w2, 1, &W2), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "l2.bias", 1, kd, b2, 1, &B2), FL_OK);
  const fl_gattr tanh_act[2] = {TRANS_B, {.name = FL_GRAPH_ACT_ATTR, .kind = FL_GA_STRING, .s = "tanh"}};
  const char *n1[] = {"h1"}, *n2[] = {"h2"}, *n3a[] = {"h3a"}, *n3[] = {"h3"}, *nu[] = {"u"},
             *no[] = {"out"};
  ck_assert_int_eq(fl_graph_node(g, "l1", "Gemm", (int[]){x, W1, B1}, 3, n1, 1, tanh_act, 2, &h1),
                   FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "sq", "Mul", (int[]){h1, h1}, 2, n2, 1, NULL, 0, &h2), FL_OK);
  int h3a;
  ck_assert_int_eq(fl_graph_node(g, "add", "Add", (int[]){h2, h1}, 2, n3a, 1, NULL, 0, &h3a), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "scale", "Mul", (int[]){h3a, S}, 2, n3, 1, NULL, 0, &h3), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "unused", "Tanh", &h1, 1, nu, 1, NULL, 0, &u), FL_OK);
  for (int d = 0; d < deep; d++) {
    char wn[32], bn[32], on[32];
    float w[H * H], b[H];
    gc_fill(w, H * H, &s, -0.9, 0.9);
    gc_fill(b, H, &s, -0.1, 0.1);
    snprintf(wn, sizeof wn, "d%d.weight", d);
    snprintf(bn, sizeof bn, "d%d.bias", d);
    snprintf(on, sizeof on, "d%d", d);
    const int64_t wd[2] = {H, H};
    int wi, bi;
    ck_assert_int_eq(fl_graph_param(g, wn, 2, wd, w, 1, &wi), FL_OK);
    ck_assert_int_eq(fl_graph_param(g, bn, 1, hd, b, 1, &bi), FL_OK);
    const char *o[] = {on};
    ck_assert_int_eq(fl_graph_node(g, on, "Gemm", (int[]){h3, wi, bi}, 3, o, 1, tanh_act, 2, &h3),
                     FL_OK);
  }
  ck_assert_int_eq(fl_graph_node(g, "l2", "Gemm", (int[]){h3, W2, B2}, 3, no, 1, &TRANS_B, 1, &out),
                   FL_OK);
  ck_assert_int_eq(fl_graph_set_output(g, out, loss), FL_OK);
  return g;
}

static void *compile(fl_graph *g, size_t max_batch, int recompute, const char *const *ck,
                     size_t nck) {
  fl_graph_options o = {.max_batch = max_batch, .seed = 1, .device = -1, .recompute = recompute,
                        .checkpoints = ck, .n_checkpoints = nck};
  void *h = NULL;
  ck_assert_int_eq(fl_graph_model_create(g, &o, &h), FL_OK);
  return h;
}

typedef struct data {
  float x[B * IN], t[B * K];
  int32_t y[B];
} data;

static data make_data(uint64_t seed) {
  data d;
  uint64_t s = seed;
  gc_fill(d.x, B * IN, &s, -1, 1);
  gc_fill(d.t, B * K, &s, 0, 1);
  for (int i = 0; i < B; i++) d.y[i] = i % K;
  return d;
}

typedef struct obj {
  void *h;
  data *d;
  fl_gloss loss;
} obj;

static double objective(void *ctx) {
  obj *o = ctx;
  fl_model_result r;
  if (o->loss == FL_GLOSS_SOFTMAX_XENT)
    ck_assert_int_eq(fl_graph_model_ops.eval(o->h, o->d->x, o->d->y, B, &r), FL_OK);
  else
    ck_assert_int_eq(fl_graph_model_evalf(o->h, o->d->x, o->d->t, B, &r), FL_OK);
  return r.loss_sum / B;
}

static void train(void *h, fl_gloss loss, data *d, fl_grad_ready_fn fn, void *ctx,
                  fl_model_result *r) {
  if (loss == FL_GLOSS_SOFTMAX_XENT)
    ck_assert_int_eq(fl_graph_model_ops.train_step(h, d->x, d->y, B, 1.0f, fn, ctx, r), FL_OK);
  else
    ck_assert_int_eq(fl_graph_model_train_stepf(h, d->x, d->t, B, 1.0f, fn, ctx, r), FL_OK);
}

static const fl_gloss LOSSES[3] = {FL_GLOSS_SOFTMAX_XENT, FL_GLOSS_BCE_LOGITS, FL_GLOSS_MSE};

/* Every parameter's gradient against central differences of the loss. */
START_TEST(gradients_match_finite_differences) {
  const fl_gloss loss = LOSSES[_i];
  void *h = compile(build(loss, 0, 11), B, 0, NULL, 0);
  data d = make_data(3);
  fl_model_result r;
  train(h, loss, &d, NULL, NULL, &r);
  ck_assert_uint_eq(r.count, B);
  ck_assert_double_eq_tol(r.loss_sum / B, objective(&(obj){h, &d, loss}), 1e-6);
  const size_t np = fl_graph_model_ops.num_params(h);
  ck_assert_uint_eq(np, 5);
  /* first-use order */
  const char *want[5] = {"l1.weight", "l1.bias", "scale", "l2.weight", "l2.bias"};
  for (size_t p = 0; p < np; p++) {
    fl_param *q = fl_graph_model_ops.param(h, p);
    ck_assert_str_eq(q->name, want[p]);
    float *g = malloc(q->n * sizeof *g);
    memcpy(g, q->grad, q->n * sizeof *g);
    obj o = {h, &d, loss};
    gc_result res = gc_check(q->value, q->n, g, objective, &o, 1e-3, 1e-5, 2e-3);
    ck_assert_msg(res.worst <= 1.0, "loss %d %s[%zu]: analytic %g numeric %g", (int)loss, q->name,
                  res.worst_i, res.worst_a, res.worst_n);
    ck_assert_msg(res.num_norm > 0, "%s: zero gradient tests nothing", q->name);
    free(g);
  }
  fl_graph_model_ops.destroy(h);
}
END_TEST

/* The losses' values on a known output: bias-only graph, zero weights. */
START_TEST(loss_values) {
  for (int li = 1; li < 3; li++) {
    void *h = compile(build(LOSSES[li], 0, 1), B, 0, NULL, 0);
    fl_param *w2 = fl_graph_model_ops.param(h, 3), *b2 = fl_graph_model_ops.param(h, 4);
    memset(w2->value, 0, w2->n * sizeof(float));
    b2->value[0] = 0.5f, b2->value[1] = -1.0f;
    data d = make_data(5);
    fl_model_result r;
    ck_assert_int_eq(fl_graph_model_evalf(h, d.x, d.t, B, &r), FL_OK);
    double want = 0, ae = 0, ts = 0, tq = 0;
    size_t ok = 0;
    for (int i = 0; i < B; i++)
      for (int k = 0; k < K; k++) {
        const double z = b2->value[k], t = d.t[i * K + k];
        want += LOSSES[li] == FL_GLOSS_MSE ? (z - t) * (z - t) / K
                                           : (log1p(exp(-fabs(z))) + (z > 0 ? z : 0) - z * t) / K;
        ok += (z > 0) == (t > 0.5);
        ae += fabs(z - t), ts += t, tq += t * t;
      }
    ck_assert_double_eq_tol(r.loss_sum, want, 1e-9);
    ck_assert_uint_eq(r.correct1, LOSSES[li] == FL_GLOSS_MSE ? 0 : ok / K);
    /* mse's sums for MAE and R²; none for bce */
    const int mse = LOSSES[li] == FL_GLOSS_MSE;
    ck_assert_uint_eq(r.values, mse ? (size_t)(B * K) : 0);
    ck_assert_double_eq_tol(r.abs_err, mse ? ae : 0, 1e-9);
    ck_assert_double_eq_tol(r.t_sum, mse ? ts : 0, 1e-9);
    ck_assert_double_eq_tol(r.t_sq, mse ? tq : 0, 1e-9);
    fl_graph_model_ops.destroy(h);
  }
}
END_TEST

typedef struct ready_log {
  void *h;
  size_t idx[64], n;
  float *snap[64];
} ready_log;

static void on_ready(void *ctx, size_t index) {
  ready_log *l = ctx;
  ck_assert_uint_lt(l->n, 64);
  fl_param *p = fl_graph_model_ops.param(l->h, index);
  l->snap[l->n] = malloc(p->n * sizeof(float));
  memcpy(l->snap[l->n], p->grad, p->n * sizeof(float));
  l->idx[l->n++] = index;
}

static void log_free(ready_log *l) {
  for (size_t i = 0; i < l->n; i++) free(l->snap[i]);
  l->n = 0;
}

/* Every trainable parameter reported once, in decreasing index order,
 * with its final gradient. */
START_TEST(on_ready_reverse_and_final) {
  void *h = compile(build(FL_GLOSS_MSE, 3, 2), B, 0, NULL, 0);
  data d = make_data(7);
  ready_log l = {.h = h};
  train(h, FL_GLOSS_MSE, &d, on_ready, &l, NULL);
  ck_assert_uint_eq(l.n, fl_graph_model_ops.num_params(h));
  for (size_t i = 0; i < l.n; i++) {
    fl_param *p = fl_graph_model_ops.param(h, l.idx[i]);
    ck_assert_mem_eq(l.snap[i], p->grad, p->n * sizeof(float));
    if (i > 0) ck_assert_uint_lt(l.idx[i], l.idx[i - 1]);
  }
  log_free(&l);
  fl_graph_model_ops.destroy(h);
}
END_TEST

static void assert_same(void *a, void *b) {
  const size_t np = fl_graph_model_ops.num_params(a);
  ck_assert_uint_eq(np, fl_graph_model_ops.num_params(b));
  for (size_t i = 0; i < np; i++) {
    fl_param *p = fl_graph_model_ops.param(a, i), *q = fl_graph_model_ops.param(b, i);
    ck_assert_mem_eq(p->value, q->value, p->n * sizeof(float));
    ck_assert(!p->grad == !q->grad); /* a buffer (BN statistics) has none */
    if (p->grad) ck_assert_mem_eq(p->grad, q->grad, p->n * sizeof(float));
  }
}

static void sgd(void *h) {
  for (size_t i = 0; i < fl_graph_model_ops.num_params(h); i++) {
    fl_param *p = fl_graph_model_ops.param(h, i);
    for (size_t j = 0; p->grad && j < p->n; j++) p->value[j] -= 0.1f * p->grad[j];
  }
}

/* Recompute from named checkpoints (and from the engine's own choice):
 * the same bits as the plain run, less activation memory. */
START_TEST(recompute_bitwise_named_checkpoints) {
  const char *ck[] = {"h3", "d2", "d5"};
  for (int mode = 0; mode < 2; mode++) {
    void *a = compile(build(FL_GLOSS_MSE, 8, 4), B, 0, NULL, 0);
    void *b = compile(build(FL_GLOSS_MSE, 8, 4), B, 1, mode ? NULL : ck, mode ? 0 : 3);
    ck_assert_uint_lt(fl_graph_model_ops.activation_bytes(b), fl_graph_model_ops.activation_bytes(a));
    ready_log la = {.h = a}, lb = {.h = b};
    for (int step = 0; step < 3; step++) {
      data d = make_data(20 + (uint64_t)step);
      fl_model_result ra, rb;
      train(a, FL_GLOSS_MSE, &d, on_ready, &la, &ra);
      train(b, FL_GLOSS_MSE, &d, on_ready, &lb, &rb);
      ck_assert(memcmp(&ra.loss_sum, &rb.loss_sum, sizeof ra.loss_sum) == 0);
      assert_same(a, b);
      ck_assert_uint_eq(la.n, lb.n);
      for (size_t i = 0; i < la.n; i++) ck_assert_uint_eq(la.idx[i], lb.idx[i]);
      log_free(&la), log_free(&lb);
      sgd(a), sgd(b);
    }
    fl_graph_model_ops.destroy(a);
    fl_graph_model_ops.destroy(b);
  }
}
END_TEST

/* Liveness: a deep chain holds far less than one buffer per tensor and
 * gradient. */
START_TEST(buffers_are_reused) {
  const size_t mb = 64;
  void *h = compile(build(FL_GLOSS_MSE, 12, 4), mb, 0, NULL, 0);
  const size_t tensors = 5 + 12 + 2; /* values of width H (and K) at batch 64 */
  const size_t naive = 2 * tensors * mb * H * sizeof(float);
  ck_assert_uint_gt(fl_graph_model_ops.activation_bytes(h), 0);
  ck_assert_uint_lt(fl_graph_model_ops.activation_bytes(h), naive);
  fl_graph_model_ops.destroy(h);
}
END_TEST

/* Batches of other sizes re-bind (plans cached for max_batch and the last
 * other size); each result is that of a model bound to that size from the
 * start. */
START_TEST(rebinding_other_batch_sizes) {
  void *a = compile(build(FL_GLOSS_MSE, 2, 8), 8, 0, NULL, 0);
  void *b = compile(build(FL_GLOSS_MSE, 2, 8), B, 0, NULL, 0);
  data d = make_data(9);
  float big_x[8 * IN], big_t[8 * K];
  uint64_t s = 1;
  gc_fill(big_x, 8 * IN, &s, -1, 1);
  gc_fill(big_t, 8 * K, &s, 0, 1);
  fl_model_result ra, rb;
  for (int round = 0; round < 2; round++) {
    ck_assert_int_eq(fl_graph_model_train_stepf(a, big_x, big_t, 8, 1.0f, NULL, NULL, &ra), FL_OK);
    ck_assert_int_eq(fl_graph_model_train_stepf(a, d.x, d.t, B, 1.0f, NULL, NULL, &ra), FL_OK);
    ck_assert_int_eq(fl_graph_model_train_stepf(b, d.x, d.t, B, 1.0f, NULL, NULL, &rb), FL_OK);
    ck_assert(memcmp(&ra.loss_sum, &rb.loss_sum, sizeof ra.loss_sum) == 0);
    assert_same(a, b);
  }
  /* a third size takes the second plan's place; 5 is planned again */
  ck_assert_int_eq(fl_graph_model_train_stepf(a, big_x, big_t, 3, 1.0f, NULL, NULL, &ra), FL_OK);
  ck_assert_int_eq(fl_graph_model_train_stepf(a, d.x, d.t, B, 1.0f, NULL, NULL, &ra), FL_OK);
  ck_assert(memcmp(&ra.loss_sum, &rb.loss_sum, sizeof ra.loss_sum) == 0);
  assert_same(a, b);
  ck_assert_int_eq(fl_graph_model_train_stepf(a, big_x, big_t, 9, 1.0f, NULL, NULL, &ra), FL_EINVAL);
  fl_graph_model_ops.destroy(a);
  fl_graph_model_ops.destroy(b);
}
END_TEST

/* x -> Dropout -> Gemm: the masks are a function of (seed, step, node),
 * so fl_graph_model_set_step reproduces a step's gradients and a later
 * step draws other masks. */
static void *dropout_model(void) {
  fl_graph *g;
  ck_assert_int_eq(fl_graph_new("drop", &g), FL_OK);
  const int64_t xd[2] = {FL_G_BATCH, IN}, wd[2] = {K, IN};
  float w[K * IN];
  uint64_t s = 3;
  gc_fill(w, K * IN, &s, -1, 1);
  int x, W, d, y;
  ck_assert_int_eq(fl_graph_input(g, "x", 2, xd, &x), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "w", 2, wd, w, 1, &W), FL_OK);
  const char *dn[] = {"d"}, *yn[] = {"y"};
  ck_assert_int_eq(fl_graph_node(g, "drop", "Dropout", &x, 1, dn, 1, NULL, 0, &d), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "fc", "Gemm", (int[]){d, W}, 2, yn, 1, &TRANS_B, 1, &y), FL_OK);
  ck_assert_int_eq(fl_graph_set_output(g, y, FL_GLOSS_MSE), FL_OK);
  return compile(g, B, 0, NULL, 0);
}

START_TEST(dropout_follows_the_step) {
  void *a = dropout_model(), *b = dropout_model();
  data d = make_data(4);
  fl_param *pa = fl_graph_model_ops.param(a, 0), *pb = fl_graph_model_ops.param(b, 0);
  float g0[K * IN];
  ck_assert_int_eq(fl_graph_model_train_stepf(a, d.x, d.t, B, 1.0f, NULL, NULL, NULL), FL_OK);
  memcpy(g0, pa->grad, sizeof g0);
  for (int k = 0; k < 5; k++) /* b: steps 0..4, no update */
    ck_assert_int_eq(fl_graph_model_train_stepf(b, d.x, d.t, B, 1.0f, NULL, NULL, NULL), FL_OK);
  ck_assert(memcmp(g0, pb->grad, sizeof g0) != 0); /* step 4 drew other masks than step 0 */
  fl_graph_model_set_step(a, 4);
  ck_assert_int_eq(fl_graph_model_train_stepf(a, d.x, d.t, B, 1.0f, NULL, NULL, NULL), FL_OK);
  ck_assert_mem_eq(pa->grad, pb->grad, sizeof g0);
  fl_graph_model_ops.destroy(a);
  fl_graph_model_ops.destroy(b);
}
END_TEST

/* train.device gpu with an op that has no CUDA twin: refused at create,
 * naming the node and the op (checked before any device is touched, so in
 * every build). */
START_TEST(gpu_refuses_op_without_twin) {
  fl_graph *g;
  ck_assert_int_eq(fl_graph_new("twins", &g), FL_OK);
  const int64_t xd[2] = {FL_G_BATCH, IN}, wd[2] = {K, IN};
  int x, w, e, y;
  ck_assert_int_eq(fl_graph_input(g, "x", 2, xd, &x), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "w", 2, wd, NULL, 1, &w), FL_OK);
  const char *en[] = {"e"}, *yn[] = {"y"};
  ck_assert_int_eq(fl_graph_node(g, "the_erf", "Erf", &x, 1, en, 1, NULL, 0, &e), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "fc", "Gemm", (int[]){e, w}, 2, yn, 1, &TRANS_B, 1, &y), FL_OK);
  ck_assert_int_eq(fl_graph_set_output(g, y, FL_GLOSS_MSE), FL_OK);
  char tmpl[] = "/tmp/fl_test_graph_XXXXXX", log[4096];
  const int fd = mkstemp(tmpl);
  ck_assert_int_ge(fd, 0);
  unlink(tmpl);
  const int saved = dup(2);
  dup2(fd, 2);
  fl_log_set_level(FL_LOG_ERROR);
  fl_graph_options o = {.max_batch = B, .device = 0};
  void *h = NULL;
  const fl_status st = fl_graph_model_create(g, &o, &h);
  fl_log_set_level(FL_LOG_OFF);
  dup2(saved, 2);
  close(saved);
  const ssize_t got = pread(fd, log, sizeof log - 1, 0);
  log[got > 0 ? got : 0] = '\0';
  close(fd);
  ck_assert_int_eq(st, FL_ENOTSUP);
  ck_assert_ptr_null(h);
  ck_assert_msg(strstr(log, "the_erf") && strstr(log, "Erf"), "log: %s", log);
}
END_TEST

/* Run create on g with opt, its log (warnings and errors) in log. */
static fl_status create_logged(fl_graph *g, const fl_graph_options *o, void **h, char *log,
                               size_t cap) {
  char tmpl[] = "/tmp/fl_test_graph_XXXXXX";
  const int fd = mkstemp(tmpl);
  ck_assert_int_ge(fd, 0);
  unlink(tmpl);
  const int saved = dup(2);
  dup2(fd, 2);
  fl_log_set_level(FL_LOG_WARN);
  const fl_status st = fl_graph_model_create(g, o, h);
  fl_log_set_level(FL_LOG_OFF);
  dup2(saved, 2);
  close(saved);
  const ssize_t got = pread(fd, log, cap - 1, 0);
  log[got > 0 ? got : 0] = '\0';
  close(fd);
  return st;
}

/* AMP (amp_configs lists): which op types get the 16-bit GEMM on a gpu
 * graph.  The white list, given, replaces the default (Gemm, MatMul,
 * Conv); the black list wins; names are ONNX's, Paddle's or "linear"
 * (Paddle's matmul_v2 / matmul / mul mean a linear layer: Gemm and MatMul);
 * only Gemm and Conv have a 16-bit GEMM.  On any device, create refuses an
 * op type on both lists and warns about a name of no op. */
START_TEST(amp_lists) {
  fl_graph_options o = {.amp_math = FL_MATH_FP16};
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP16); /* the default white list */
  ck_assert_int_eq(fl_graph_amp_math("Conv", &o), FL_MATH_FP16);
  ck_assert_int_eq(fl_graph_amp_math("conv2d", &o), FL_MATH_FP16);
  ck_assert_int_eq(fl_graph_amp_math("MatMul", &o), FL_MATH_FP32); /* no 16-bit GEMM */
  ck_assert_int_eq(fl_graph_amp_math("Relu", &o), FL_MATH_FP32);
  ck_assert_int_eq(fl_graph_amp_math("NoSuchOp", &o), FL_MATH_FP32);
  /* the white list has an effect: only what it names */
  o.amp_white = (const char *const[]){"conv2d"};
  o.n_amp_white = 1;
  ck_assert_int_eq(fl_graph_amp_math("Conv", &o), FL_MATH_FP16);
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP32);
  o.amp_white = (const char *const[]){"matmul_v2"}; /* Paddle's linear layer: Gemm, MatMul */
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP16);
  ck_assert_int_eq(fl_graph_amp_math("Conv", &o), FL_MATH_FP32);
  o.amp_white = (const char *const[]){"matmul_v2", "mul"};
  o.n_amp_white = 2;
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP16);
  ck_assert_int_eq(fl_graph_amp_math("Conv", &o), FL_MATH_FP32);
  o.amp_white = (const char *const[]){"Gemm", "Conv"}; /* ONNX names */
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP16);
  ck_assert_int_eq(fl_graph_amp_math("Conv", &o), FL_MATH_FP16);
  /* the black list wins, in either spelling; "linear" is Gemm and MatMul */
  o.amp_black = (const char *const[]){"linear"};
  o.n_amp_black = 1;
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP32);
  ck_assert_int_eq(fl_graph_amp_math("Conv", &o), FL_MATH_FP16);
  o.amp_black = (const char *const[]){"matmul_v2"}; /* keeps linear layers fp32, as before */
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP32);
  o.amp_black = (const char *const[]){"MatMul"}; /* an ONNX name is just that op type */
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP16);
  o.n_amp_white = 0;
  o.amp_black = (const char *const[]){"Conv"};
  ck_assert_int_eq(fl_graph_amp_math("conv2d", &o), FL_MATH_FP32);
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP16);
  o.amp_math = FL_MATH_BF16;
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_BF16);
  o.amp_math = FL_MATH_FP32; /* no AMP */
  ck_assert_int_eq(fl_graph_amp_math("Gemm", &o), FL_MATH_FP32);

  /* create (on the CPU): an op type on both lists is refused, naming both */
  char log[4096];
  fl_graph_options c = {.max_batch = B, .device = -1, .amp_math = FL_MATH_FP32,
                        .amp_white = (const char *const[]){"matmul_v2", "Gemm"}, .n_amp_white = 2,
                        .amp_black = (const char *const[]){"linear"}, .n_amp_black = 1};
  void *h = (void *)1;
  ck_assert_int_eq(create_logged(build(FL_GLOSS_MSE, 0, 1), &c, &h, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_null(h);
  ck_assert_msg(strstr(log, "graph t: amp_configs: 'matmul_v2' (custom_white_list) and 'linear' "
                            "(custom_black_list) name the same op type (Gemm)"), "log: %s", log);
  /* a name of no op: a warning, and the model is made */
  c.amp_white = (const char *const[]){"Gemm", "no_such_op"};
  c.amp_black = (const char *const[]){"softmax"};
  ck_assert_int_eq(create_logged(build(FL_GLOSS_MSE, 0, 1), &c, &h, log, sizeof log), FL_OK);
  ck_assert_ptr_nonnull(h);
  ck_assert_msg(strstr(log, "amp_configs.custom_white_list: 'no_such_op' is no op type Flotilla "
                            "knows (ONNX or Paddle name); it has no effect"), "log: %s", log);
  ck_assert_msg(!strstr(log, "softmax"), "log: %s", log);
  fl_graph_model_ops.destroy(h);
}
END_TEST

/* What the builder and create refuse. */
/* x -> fc (Gemm) -> h [B,K] -> bn -> z -> Relu -> a; Add(a, h) -> s ->
 * Relu -> out, and with extra a second reader of z (Mul(z, z) added to the
 * Add's input).  The engine folds each Relu into the node before it when
 * the sum has no other reader and is no checkpoint. */
static fl_graph *build_fusable(int extra) {
  fl_graph *g;
  float w[K * IN];
  uint64_t s = 7;
  gc_fill(w, K * IN, &s, -0.8, 0.8);
  ck_assert_int_eq(fl_graph_new("fuse", &g), FL_OK);
  const int64_t xd[2] = {FL_G_BATCH, IN}, wd[2] = {K, IN}, cd[1] = {K};
  int x, W, sc, bi, rm, rv, h, z, a, sum, out, zz;
  ck_assert_int_eq(fl_graph_input(g, "x", 2, xd, &x), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "w", 2, wd, w, 1, &W), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "bn.scale", 1, cd, NULL, 1, &sc), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "bn.bias", 1, cd, NULL, 1, &bi), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "bn.mean", 1, cd, NULL, 0, &rm), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "bn.var", 1, cd, NULL, 0, &rv), FL_OK);
  const char *nh[] = {"h"}, *nz[] = {"z"}, *na[] = {"a"}, *ns[] = {"s"}, *no[] = {"out"},
             *nzz[] = {"zz"}, *na2[] = {"a2"};
  ck_assert_int_eq(fl_graph_node(g, "fc", "Gemm", (int[]){x, W}, 2, nh, 1, &TRANS_B, 1, &h),
                   FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "bn", "BatchNormalization", (int[]){h, sc, bi, rm, rv}, 5, nz,
                                 1, NULL, 0, &z), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "r1", "Relu", &z, 1, na, 1, NULL, 0, &a), FL_OK);
  if (extra) {
    ck_assert_int_eq(fl_graph_node(g, "sq", "Mul", (int[]){z, z}, 2, nzz, 1, NULL, 0, &zz), FL_OK);
    ck_assert_int_eq(fl_graph_node(g, "add0", "Add", (int[]){a, zz}, 2, na2, 1, NULL, 0, &a),
                     FL_OK);
  }
  ck_assert_int_eq(fl_graph_node(g, "add", "Add", (int[]){a, h}, 2, ns, 1, NULL, 0, &sum), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "r2", "Relu", &sum, 1, no, 1, NULL, 0, &out), FL_OK);
  ck_assert_int_eq(fl_graph_set_output(g, out, FL_GLOSS_MSE), FL_OK);
  return g;
}

/* The names of h's nodes, comma-separated, "+act" after a node that took
 * the attribute flotilla_act. */
static void node_names(void *h, char *buf, size_t cap) {
  const fl_graph *g = fl_graph_model_graph(h);
  buf[0] = 0;
  for (int i = 0; i < fl_graph_num_nodes(g); i++) {
    fl_gnode_info ni;
    ck_assert_int_eq(fl_graph_node_info(g, i, &ni), FL_OK);
    int act = 0;
    for (int k = 0; k < ni.n_attrs; k++) act |= !strcmp(ni.attrs[k].name, FL_GRAPH_ACT_ATTR);
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s%s", i ? "," : "", ni.name,
             act ? "+act" : "");
  }
}

START_TEST(relu_fusion) {
  char buf[256];
  const char *ck_z[] = {"z"};
  void *h = compile(build_fusable(0), B, 0, NULL, 0);
  node_names(h, buf, sizeof buf);
  ck_assert_str_eq(buf, "fc,bn+act,add");
  fl_graph_model_ops.destroy(h);
  h = compile(build_fusable(0), B, 1, ck_z, 1); /* z is a checkpoint: kept */
  node_names(h, buf, sizeof buf);
  ck_assert_str_eq(buf, "fc,bn,r1,add");
  fl_graph_model_ops.destroy(h);
  h = compile(build_fusable(1), B, 0, NULL, 0); /* z has a second reader */
  node_names(h, buf, sizeof buf);
  ck_assert_str_eq(buf, "fc,bn,r1,sq,add0,add");
  fl_graph_model_ops.destroy(h);
  /* fused and separate ops: the same bits (z and s checkpoints keep them
   * apart; recompute changes no bit) */
  const char *ck_zs[] = {"z", "s"};
  void *a = compile(build_fusable(0), B, 0, NULL, 0), *b = compile(build_fusable(0), B, 1, ck_zs, 2);
  node_names(b, buf, sizeof buf);
  ck_assert_str_eq(buf, "fc,bn,r1,add,r2");
  for (int step = 0; step < 2; step++) {
    data d = make_data(30 + (uint64_t)step);
    fl_model_result ra, rb;
    train(a, FL_GLOSS_MSE, &d, NULL, NULL, &ra);
    train(b, FL_GLOSS_MSE, &d, NULL, NULL, &rb);
    ck_assert(memcmp(&ra.loss_sum, &rb.loss_sum, sizeof ra.loss_sum) == 0);
    assert_same(a, b);
    sgd(a), sgd(b);
  }
  fl_graph_model_ops.destroy(a);
  fl_graph_model_ops.destroy(b);
}
END_TEST

START_TEST(refusals) {
  fl_graph *g;
  ck_assert_int_eq(fl_graph_new("bad", &g), FL_OK);
  const int64_t xd[2] = {FL_G_BATCH, 3}, wd[2] = {2, 3}, bad[2] = {2, -1};
  int x, w, y;
  ck_assert_int_eq(fl_graph_input(g, "x", 2, xd, &x), FL_OK);
  ck_assert_int_eq(fl_graph_input(g, "x2", 2, xd, NULL), FL_EINVAL); /* one input */
  ck_assert_int_eq(fl_graph_param(g, "x", 2, wd, NULL, 1, NULL), FL_EINVAL); /* duplicate */
  ck_assert_int_eq(fl_graph_param(g, "w", 2, bad, NULL, 1, NULL), FL_EINVAL); /* dims */
  ck_assert_int_eq(fl_graph_param(g, "w", 2, wd, NULL, 1, &w), FL_OK);
  const char *o[] = {"y"}, *o2[] = {"w"};
  ck_assert_int_eq(fl_graph_node(g, "n", "NoSuchOp", &x, 1, o, 1, NULL, 0, NULL), FL_ENOTSUP);
  ck_assert_int_eq(fl_graph_node(g, "n", "Relu", (int[]){x, w}, 2, o, 1, NULL, 0, NULL), FL_EINVAL);
  const fl_gattr bogus = {.name = "bogus", .kind = FL_GA_INT, .i = 1};
  ck_assert_int_eq(fl_graph_node(g, "n", "Relu", &x, 1, o, 1, &bogus, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_graph_node(g, "n", "Relu", (int[]){99}, 1, o, 1, NULL, 0, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_graph_node(g, "n", "Relu", &x, 1, o2, 1, NULL, 0, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_graph_node(g, "n", "Gemm", (int[]){x, w}, 2, o, 1, &TRANS_B, 1, &y), FL_OK);
  ck_assert_int_eq(fl_graph_find(g, "y"), y);
  ck_assert_int_eq(fl_graph_find(g, "nope"), -1);
  ck_assert_int_eq(fl_graph_set_output(g, w, FL_GLOSS_MSE), FL_EINVAL); /* not a node's */
  ck_assert_int_eq(fl_graph_set_output(g, y, FL_GLOSS_MSE), FL_OK);
  fl_graph_options opt = {.max_batch = 4, .device = -1, .recompute = 1,
                          .checkpoints = (const char *const[]){"nope"}, .n_checkpoints = 1};
  void *h = (void *)1;
  ck_assert_int_eq(fl_graph_model_create(g, &opt, &h), FL_EINVAL); /* frees g */
  ck_assert_ptr_null(h);
  /* a shape mismatch is found at create */
  ck_assert_int_eq(fl_graph_new("shape", &g), FL_OK);
  const int64_t w5[2] = {2, 5};
  ck_assert_int_eq(fl_graph_input(g, "x", 2, xd, &x), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "w", 2, w5, NULL, 1, &w), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "n", "Gemm", (int[]){x, w}, 2, o, 1, &TRANS_B, 1, &y), FL_OK);
  ck_assert_int_eq(fl_graph_set_output(g, y, FL_GLOSS_MSE), FL_OK);
  opt.recompute = 0;
  ck_assert_int_ne(fl_graph_model_create(g, &opt, &h), FL_OK);
#ifndef FL_HAVE_CUDA
  opt.device = 0;
  ck_assert_int_eq(fl_graph_model_create(build(FL_GLOSS_MSE, 0, 1), &opt, &h), FL_ENOTSUP);
#endif
  /* no output */
  ck_assert_int_eq(fl_graph_new("noout", &g), FL_OK);
  ck_assert_int_eq(fl_graph_input(g, "x", 2, xd, &x), FL_OK);
  opt.device = -1;
  ck_assert_int_eq(fl_graph_model_create(g, &opt, &h), FL_EINVAL);
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF);
  Suite *s = suite_create("graph");
  TCase *tc = tcase_create("engine");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, gradients_match_finite_differences, 0, 3);
  tcase_add_test(tc, loss_values);
  tcase_add_test(tc, on_ready_reverse_and_final);
  tcase_add_test(tc, recompute_bitwise_named_checkpoints);
  tcase_add_test(tc, buffers_are_reused);
  tcase_add_test(tc, rebinding_other_batch_sizes);
  tcase_add_test(tc, dropout_follows_the_step);
  tcase_add_test(tc, gpu_refuses_op_without_twin);
  tcase_add_test(tc, amp_lists);
  tcase_add_test(tc, relu_fusion);
  tcase_add_test(tc, refusals);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  const int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
