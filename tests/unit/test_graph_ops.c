/* test_graph_ops.c - unit tests of the graph engine's op library
 * (trainer/graph/ops_*.c), without the engine: each test builds the
 * tensors and one node by hand, runs the op's infer, forward and backward,
 * and checks the forward against a naive reference (double precision where
 * it matters) and the backward against central finite differences of a
 * fixed random weighting of the outputs (gradcheck.h), then that backward
 * accumulates into input grads when told to.  The refusals (bad
 * attributes, shapes, modes) are tested too.  Flotilla's own sparse op
 * (EmbeddingBagSum) is fed its entries by hand. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_ops_harness.h"

/* ------------------------------------------------------------ registry */

START_TEST(test_registry) {
  ck_assert_ptr_nonnull(fl_gop_find("Conv"));
  ck_assert_ptr_null(fl_gop_find("conv"));
  ck_assert_ptr_null(fl_gop_find("NoSuchOp"));
  ck_assert_str_eq(fl_gop_find_paddle("matmul_v2")->type, "MatMul");
  ck_assert_str_eq(fl_gop_find_paddle("matmul")->type, "MatMul");
  ck_assert_str_eq(fl_gop_find_paddle("mul")->type, "Gemm");
  ck_assert_str_eq(fl_gop_find_paddle("conv2d")->type, "Conv");
  ck_assert_str_eq(fl_gop_find_paddle("elementwise_add")->type, "Add");
  ck_assert_str_eq(fl_gop_find_paddle("relu")->type, "Relu");
  ck_assert_str_eq(fl_gop_find_paddle("batch_norm")->type, "BatchNormalization");
  ck_assert_str_eq(fl_gop_find_paddle("layer_norm")->type, "LayerNormalization");
  ck_assert_str_eq(fl_gop_find_paddle("softmax")->type, "Softmax");
  ck_assert_ptr_null(fl_gop_find_paddle("no_such_op"));
  const char *all = fl_gop_supported();
  static const char *const required[] = {
      "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Neg", "Pow", "Sqrt", "Relu", "LeakyRelu",
      "Sigmoid", "Tanh", "Erf", "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "Conv",
      "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization",
      "LayerNormalization", "GroupNormalization", "Flatten", "Reshape", "Transpose", "Squeeze",
      "Unsqueeze", "Concat", "Split", "Slice", "Gather", "Dropout", "Identity", "Constant",
      "Cast", "Shape", "Expand", "Range", "ConstantOfShape", "Equal", "Less", "Greater", "Not",
      "Where"};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    const fl_gop *op = fl_gop_find(required[i]);
    ck_assert_msg(op != NULL, "%s missing", required[i]);
    ck_assert_msg(strstr(all, required[i]) != NULL, "%s not listed", required[i]);
    ck_assert(op->infer && op->forward && op->attrs);
  }
  /* Broadcasting. */
  int nd;
  int64_t out[FL_G_MAX_DIMS];
  const int64_t a[] = {2, 1, 4}, b[] = {3, 1}, c[] = {2, 3, 5};
  ck_assert_int_eq(fl_gbroadcast_shape(3, a, 2, b, &nd, out), FL_OK);
  ck_assert_int_eq(nd, 3);
  ck_assert(out[0] == 2 && out[1] == 3 && out[2] == 4);
  ck_assert_int_eq(fl_gbroadcast_shape(3, a, 3, c, &nd, out), FL_EINVAL);
  ck_assert_int_eq(fl_gbroadcast_shape(0, a, 2, b, &nd, out), FL_OK);
  ck_assert_int_eq(nd, 2);
}
END_TEST

/* ---------------------------------------------------------- elementwise */

static double bin_ref(const char *op, double u, double v) {
  if (!strcmp(op, "Add")) return u + v;
  if (!strcmp(op, "Sub")) return u - v;
  if (!strcmp(op, "Mul")) return u * v;
  if (!strcmp(op, "Div")) return u / v;
  return pow(u, v);
}

static void check_binary(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                         double lo, double hi) {
  harness h;
  uint64_t s = 11;
  h_init(&h, op);
  h_f32(&h, "a", na, sa, &s, lo, hi, 0);
  h_f32(&h, "b", nb, sb, &s, lo, hi, 0);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  const fl_gtensor *y = h_y(&h, 0), *a = h_x(&h, 0), *b = h_x(&h, 1);
  double *want = malloc(y->n * sizeof *want);
  for (size_t o = 0; o < y->n; o++)
    want[o] = bin_ref(op, a->data[bidx(o, y->ndim, y->shape, na, sa)],
                      b->data[bidx(o, y->ndim, y->shape, nb, sb)]);
  expect_close(y->data, want, y->n, 1e-6, op);
  free(want);
  h_gradcheck(&h, op, 1, 1e-3, 2e-3, 2e-3);
  h_free(&h);
}

START_TEST(test_binary_broadcast) {
  static const char *const ops[] = {"Add", "Sub", "Mul", "Div", "Pow"};
  const int64_t s234[] = {2, 3, 4}, s214[] = {2, 1, 4}, s31[] = {3, 1}, s4[] = {4}, s1[] = {1};
  const int64_t s37[] = {3, 7}, s7[] = {7};
  for (size_t k = 0; k < 5; k++) {
    const double lo = 0.5, hi = 2.0; /* positive: Div and Pow stay smooth */
    check_binary(ops[k], 3, s234, 3, s234, lo, hi);
    check_binary(ops[k], 3, s214, 2, s31, lo, hi);
    check_binary(ops[k], 1, s4, 3, s234, lo, hi);
    check_binary(ops[k], 3, s234, 0, s1, lo, hi);
    check_binary(ops[k], 2, s37, 2, s37, lo, hi); /* rows of 7: SSE and a tail */
    check_binary(ops[k], 1, s7, 2, s37, lo, hi);
  }
}
END_TEST

START_TEST(test_binary_int64_and_refusals) {
  static const char *const ops[] = {"Add", "Sub", "Mul", "Div"};
  static const int64_t want[4][3] = {{9, 12, 15}, {3, 6, 9}, {18, 27, 36}, {2, 3, 4}};
  for (int k = 0; k < 4; k++) {
    harness h;
    h_init(&h, ops[k]);
    const int64_t s3[] = {3}, v[] = {6, 9, 12}, three[] = {3};
    h_i64(&h, "a", 1, s3, v);
    h_i64(&h, "b", 0, s3, three);
    h_outs(&h, 1);
    h_ready(&h);
    ck_assert_int_eq(h_y(&h, 0)->dtype, FL_G_I64);
    h_fwd(&h);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(h_y(&h, 0)->idata[i], want[k][i]);
    h_free(&h);
  }
  /* Shapes that do not broadcast, mixed types, int division by zero. */
  harness h;
  uint64_t s = 1;
  const int64_t s23[] = {2, 3}, s4[] = {4};
  h_init(&h, "Add");
  h_f32(&h, "a", 2, s23, &s, 0, 1, 0);
  h_f32(&h, "b", 1, s4, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  h_init(&h, "Mul");
  const int64_t one[] = {1};
  h_f32(&h, "a", 1, s4, &s, 0, 1, 0);
  h_i64(&h, "b", 1, one, one);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  h_init(&h, "Div");
  const int64_t zero[] = {0};
  h_i64(&h, "a", 1, one, one);
  h_i64(&h, "b", 1, one, zero);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h.node.op->forward(&h.node, &h.c), FL_EINVAL);
  h_free(&h);
}
END_TEST

static double un_ref(const char *op, double x) {
  if (!strcmp(op, "Relu")) return x > 0 ? x : 0;
  if (!strcmp(op, "LeakyRelu")) return x >= 0 ? x : 0.2 * x;
  if (!strcmp(op, "Sigmoid")) return 1.0 / (1.0 + exp(-x));
  if (!strcmp(op, "Tanh")) return tanh(x);
  if (!strcmp(op, "Erf")) return erf(x);
  if (!strcmp(op, "Neg")) return -x;
  if (!strcmp(op, "Sqrt")) return sqrt(x);
  if (!strcmp(op, "Exp")) return exp(x);
  return log(x);
}

START_TEST(test_unary) {
  static const char *const ops[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf",
                                    "Neg",  "Sqrt",      "Exp",     "Log"};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    harness h;
    uint64_t s = 5;
    const int64_t sh[] = {3, 7};
    const int positive = !strcmp(ops[k], "Sqrt") || !strcmp(ops[k], "Log");
    h_init(&h, ops[k]);
    if (positive)
      h_f32(&h, "x", 2, sh, &s, 0.5, 2.0, 0);
    else
      h_f32(&h, "x", 2, sh, &s, 0.1, 1.5, 1); /* away from ReLU's kink */
    if (!strcmp(ops[k], "LeakyRelu")) h_af(&h, "alpha", 0.2f);
    h_outs(&h, 1);
    h_ready(&h);
    h_fwd(&h);
    double want[21];
    for (int i = 0; i < 21; i++) want[i] = un_ref(ops[k], h_x(&h, 0)->data[i]);
    expect_close(h_y(&h, 0)->data, want, 21, 1e-6, ops[k]);
    h_gradcheck(&h, ops[k], 1, 1e-3, 1e-3, 2e-3);
    h_free(&h);
  }
  /* Float-only ops refuse int64. */
  harness h;
  const int64_t s1[] = {1}, v[] = {1};
  h_init(&h, "Relu");
  h_i64(&h, "x", 1, s1, v);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

START_TEST(test_identity_cast_dropout) {
  harness h;
  uint64_t s = 9;
  const int64_t sh[] = {4, 5};
  h_init(&h, "Identity");
  h_f32(&h, "x", 2, sh, &s, -1, 1, 0);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert_mem_eq(h_y(&h, 0)->data, h_x(&h, 0)->data, 20 * sizeof(float));
  h_gradcheck(&h, "Identity", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);

  /* Cast float -> int64 truncates, int64 -> float, and back. */
  h_init(&h, "Cast");
  const int64_t s3[] = {3};
  const int id = h_tensor(&h, "x", FL_G_F32, 1, s3);
  h.in[h.node.n_in++] = id;
  h.t[id].data[0] = 2.7f, h.t[id].data[1] = -1.5f, h.t[id].data[2] = 7.0f;
  h_ai(&h, "to", 7);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert_int_eq(h_y(&h, 0)->dtype, FL_G_I64);
  ck_assert(h_y(&h, 0)->idata[0] == 2 && h_y(&h, 0)->idata[1] == -1 &&
            h_y(&h, 0)->idata[2] == 7);
  h_free(&h);
  h_init(&h, "Cast");
  const int64_t iv[] = {4, -2, 9};
  h_i64(&h, "x", 1, s3, iv);
  h_ai(&h, "to", 1);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert(h_y(&h, 0)->data[0] == 4.0f && h_y(&h, 0)->data[1] == -2.0f);
  h_free(&h);
  h_init(&h, "Cast");
  h_i64(&h, "x", 1, s3, iv);
  h_ai(&h, "to", 6); /* int32: no such element type here (bool: test_ops_activation) */
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);

  /* Dropout: training drops about ratio of the values, scales the rest by
   * 1/(1-p), the same mask for the same (seed, step, node); eval is the
   * identity; backward uses the mask. */
  const int64_t big[] = {100, 50};
  const int64_t one[] = {1};
  h_init(&h, "Dropout");
  h_f32(&h, "x", 2, big, &s, 0.5, 1.5, 0);
  const int rid = h_tensor(&h, "ratio", FL_G_F32, 0, one);
  h.t[rid].data[0] = 0.3f;
  h.t[rid].kind = FL_GT_CONST;
  h.in[h.node.n_in++] = rid;
  h_outs(&h, 2);
  h_ready(&h);
  h_fwd(&h);
  const fl_gtensor *x = h_x(&h, 0), *y = h_y(&h, 0), *m = h_y(&h, 1);
  size_t dropped = 0;
  for (size_t i = 0; i < x->n; i++) {
    if (m->idata[i] == 0) {
      dropped++;
      ck_assert(y->data[i] == 0.0f);
    } else {
      ck_assert_float_eq_tol(y->data[i], x->data[i] / 0.7f, 1e-6);
    }
  }
  ck_assert_msg(dropped > 1350 && dropped < 1650, "dropped %zu of 5000", dropped);
  float *first = malloc(x->n * sizeof *first);
  memcpy(first, y->data, x->n * sizeof *first);
  h_fwd(&h);
  ck_assert_mem_eq(first, y->data, x->n * sizeof *first);
  h.c.step++;
  h_fwd(&h);
  ck_assert(memcmp(first, y->data, x->n * sizeof *first) != 0);
  free(first);
  h_gradcheck(&h, "Dropout", 1, 1e-3, 1e-4, 1e-3);
  h.c.training = 0;
  h_fwd(&h);
  ck_assert_mem_eq(y->data, x->data, x->n * sizeof(float));
  h_free(&h);
}
END_TEST

/* Comparisons give int64 0/1 with broadcasting; Where selects and sends
 * the gradient to the chosen side. */
START_TEST(test_compare_where) {
  static const char *const ops[] = {"Equal", "Less", "Greater"};
  const int64_t s23[] = {2, 3}, s3[] = {3};
  const int64_t av[] = {1, 5, 3, 4, 2, 9}, bv[] = {4, 2, 3};
  for (int k = 0; k < 3; k++) {
    harness h;
    h_init(&h, ops[k]);
    h_i64(&h, "a", 2, s23, av);
    h_i64(&h, "b", 1, s3, bv);
    h_outs(&h, 1);
    h_ready(&h);
    ck_assert_int_eq(h_y(&h, 0)->dtype, FL_G_I64);
    h_fwd(&h);
    for (int i = 0; i < 6; i++) {
      const int64_t u = av[i], v = bv[i % 3];
      const int64_t want = k == 0 ? u == v : k == 1 ? u < v : u > v;
      ck_assert_int_eq(h_y(&h, 0)->idata[i], want);
    }
    h_free(&h);
  }
  harness h;
  uint64_t s = 181;
  h_init(&h, "Equal"); /* floats */
  h_f32(&h, "a", 2, s23, &s, -1, 1, 0);
  h_f32(&h, "b", 1, s3, &s, -1, 1, 0);
  h_x(&h, 1)->data[1] = h_x(&h, 0)->data[4];
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  for (int i = 0; i < 6; i++) ck_assert_int_eq(h_y(&h, 0)->idata[i], i == 4);
  h_free(&h);
  h_init(&h, "Not");
  const int64_t nv[] = {0, 1, 7};
  h_i64(&h, "x", 1, s3, nv);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert(h_y(&h, 0)->idata[0] == 1 && h_y(&h, 0)->idata[1] == 0 &&
            h_y(&h, 0)->idata[2] == 0);
  h_free(&h);
  /* Where: condition [3] over X [2, 3] and a scalar Y. */
  const int64_t cv[] = {1, 0, 1}, one[] = {1};
  h_init(&h, "Where");
  h_i64(&h, "cond", 1, s3, cv);
  h_f32(&h, "x", 2, s23, &s, -1, 1, 0);
  h_f32(&h, "y", 0, one, &s, -1, 1, 0);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, 2, s23);
  h_fwd(&h);
  for (int i = 0; i < 6; i++)
    ck_assert_float_eq(h_y(&h, 0)->data[i],
                       cv[i % 3] ? h_x(&h, 1)->data[i] : h_x(&h, 2)->data[0]);
  h_gradcheck(&h, "Where", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* Mismatched shapes are refused. */
  const int64_t s4[] = {4};
  h_init(&h, "Where");
  h_i64(&h, "cond", 1, s3, cv);
  h_f32(&h, "x", 1, s4, &s, -1, 1, 0);
  h_f32(&h, "y", 0, one, &s, -1, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* A gpu graph binds with c->stream set: infer then refuses what the CUDA
 * twins do not take, naming the node (checked here without a device: the
 * refusals come before any device call), and sizes the device scratch. */
START_TEST(test_gpu_bind_refusals) {
  static int fake_stream;
  harness h;
  uint64_t s = 191;
  const int64_t a[] = {3, 5}, b[] = {4, 5}, bt[] = {5, 4}, cN[] = {4};
  h_init(&h, "Gemm"); /* Linear's layout: accepted, scratch for accumulation */
  h_f32(&h, "A", 2, a, &s, 0, 1, 0);
  h_f32(&h, "B", 2, b, &s, 0, 1, 0);
  h_f32(&h, "C", 1, cN, &s, 0, 1, 0);
  h_ai(&h, "transB", 1);
  h_outs(&h, 1);
  h.c.stream = &fake_stream;
  ck_assert_int_eq(h_infer(&h), FL_OK);
  ck_assert_uint_eq(h.node.ws_floats, 3 * 5 + 4 * 5 + 4);
  h_free(&h);
  h_init(&h, "Gemm"); /* transB 0: not on the gpu */
  h_f32(&h, "A", 2, a, &s, 0, 1, 0);
  h_f32(&h, "B", 2, bt, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_OK);
  h.c.stream = &fake_stream;
  ck_assert_int_eq(h_infer(&h), FL_ENOTSUP);
  h_free(&h);
  const int64_t xs[] = {1, 4, 5, 5}, ws[] = {4, 2, 3, 3};
  h_init(&h, "Conv"); /* two groups */
  h_f32(&h, "x", 4, xs, &s, 0, 1, 0);
  h_f32(&h, "w", 4, ws, &s, 0, 1, 0);
  h_ai(&h, "group", 2);
  h_outs(&h, 1);
  h.c.stream = &fake_stream;
  ck_assert_int_eq(h_infer(&h), FL_ENOTSUP);
  h_free(&h);
  const int64_t k[] = {2, 2}, pads[] = {1, 1, 1, 1};
  h_init(&h, "MaxPool"); /* padded */
  h_f32(&h, "x", 4, xs, &s, 0, 1, 0);
  h_ais(&h, "kernel_shape", k, 2);
  h_ais(&h, "pads", pads, 4);
  h_outs(&h, 1);
  h.c.stream = &fake_stream;
  ck_assert_int_eq(h_infer(&h), FL_ENOTSUP);
  h_free(&h);
  const int64_t g2[] = {2};
  h_init(&h, "GroupNormalization"); /* per-group scale */
  h_f32(&h, "x", 4, xs, &s, 0, 1, 0);
  h_f32(&h, "s", 1, g2, &s, 0, 1, 0);
  h_f32(&h, "b", 1, g2, &s, 0, 1, 0);
  h_ai(&h, "num_groups", 2);
  h_outs(&h, 1);
  h.c.stream = &fake_stream;
  ck_assert_int_eq(h_infer(&h), FL_ENOTSUP);
  h_free(&h);
  const int64_t n1[] = {3, 1}, r4[] = {1, 4};
  h_init(&h, "Add"); /* both operands broadcast */
  h_f32(&h, "a", 2, n1, &s, 0, 1, 0);
  h_f32(&h, "b", 2, r4, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_OK);
  h.c.stream = &fake_stream;
  ck_assert_int_eq(h_infer(&h), FL_ENOTSUP);
  h_free(&h);
  const int64_t btd[] = {2, 3, 4};
  h_init(&h, "Add"); /* a bias over the last dim: accepted */
  h_f32(&h, "a", 1, cN, &s, 0, 1, 0);
  h_f32(&h, "b", 3, btd, &s, 0, 1, 0);
  h_outs(&h, 1);
  h.c.stream = &fake_stream;
  ck_assert_int_eq(h_infer(&h), FL_OK);
  h_free(&h);
}
END_TEST

/* ---------------------------------------------------------------- Gemm */

static void check_gemm(int ta, int tb, float alpha, float beta, int cnd, const int64_t *cs,
                       const char *act) {
  const int64_t M = 3, K = 5, N = 4;
  const int64_t as[2] = {ta ? K : M, ta ? M : K}, bs[2] = {tb ? N : K, tb ? K : N};
  harness h;
  uint64_t s = 21;
  h_init(&h, "Gemm");
  h_f32(&h, "A", 2, as, &s, -1, 1, 0);
  h_f32(&h, "B", 2, bs, &s, -1, 1, 0);
  if (cnd >= 0)
    h_f32(&h, "C", cnd, cs, &s, -1, 1, 0);
  else
    h_none(&h); /* an omitted optional input */
  h_ai(&h, "transA", ta);
  h_ai(&h, "transB", tb);
  h_af(&h, "alpha", alpha);
  h_af(&h, "beta", beta);
  if (act) h_as(&h, FL_GRAPH_ACT_ATTR, act);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t ys[2] = {M, N};
  h_expect_shape(&h, 0, 2, ys);
  h_fwd(&h);
  const float *A = h_x(&h, 0)->data, *B = h_x(&h, 1)->data;
  const float *C = cnd >= 0 ? h_x(&h, 2)->data : NULL;
  double want[12];
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++)
        acc += (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
      double v = alpha * acc;
      if (C) v += beta * C[bidx((size_t)(i * N + j), 2, ys, cnd, cs)];
      if (act && !strcmp(act, "relu")) v = v > 0 ? v : 0;
      if (act && !strcmp(act, "tanh")) v = tanh(v);
      want[i * N + j] = v;
    }
  expect_close(h_y(&h, 0)->data, want, 12, 1e-5, "Gemm");
  if (!act || strcmp(act, "relu") != 0) h_gradcheck(&h, "Gemm", 1, 1e-3, 2e-3, 2e-3);
  h_free(&h);
}

START_TEST(test_gemm) {
  const int64_t cN[] = {4}, c1N[] = {1, 4}, cM1[] = {3, 1}, cMN[] = {3, 4}, c1[] = {1};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      check_gemm(ta, tb, 1.0f, 1.0f, 1, cN, NULL);
      check_gemm(ta, tb, 0.5f, 2.0f, 2, cMN, NULL);
    }
  check_gemm(0, 1, 1.0f, 1.0f, -1, NULL, NULL);
  check_gemm(0, 1, 1.5f, -0.5f, 2, c1N, "tanh");
  check_gemm(1, 0, 1.0f, 1.0f, 2, cM1, NULL);
  check_gemm(0, 0, 1.0f, 3.0f, 0, c1, NULL);
  check_gemm(0, 1, 1.0f, 1.0f, 1, cN, "relu");
}
END_TEST

/* Gemm in PyTorch Linear's layout gives fl_linear_forward's bits, and its
 * backward fl_linear_backward's (relu fused). */
START_TEST(test_gemm_matches_linear_kernels) {
  const int64_t as[] = {6, 9}, bs[] = {5, 9}, cs[] = {5};
  harness h;
  uint64_t s = 3;
  h_init(&h, "Gemm");
  h_f32(&h, "x", 2, as, &s, -1, 1, 0);
  h_f32(&h, "w", 2, bs, &s, -1, 1, 0);
  h_f32(&h, "b", 1, cs, &s, -1, 1, 0);
  h_ai(&h, "transB", 1);
  h_as(&h, FL_GRAPH_ACT_ATTR, "relu");
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  float y[30], dy[30], dx[54], dw[45], db[5];
  ck_assert_int_eq(fl_linear_forward(h_x(&h, 0)->data, h_x(&h, 1)->data, h_x(&h, 2)->data, y,
                                     6, 9, 5, FL_ACT_RELU),
                   FL_OK);
  ck_assert_mem_eq(y, h_y(&h, 0)->data, sizeof y);
  gc_fill(dy, 30, &s, -1, 1);
  fl_gtensor *yt = h_y(&h, 0);
  yt->grad = malloc(sizeof dy);
  memcpy(yt->grad, dy, sizeof dy);
  for (int i = 0; i < 3; i++) h_x(&h, i)->grad = malloc(h_x(&h, i)->n * sizeof(float));
  ck_assert_int_eq(h.node.op->backward(&h.node, &h.c, 0), FL_OK);
  ck_assert_int_eq(fl_linear_backward(h_x(&h, 0)->data, h_x(&h, 1)->data, y, dy, dx, dw, db, 6,
                                      9, 5, FL_ACT_RELU),
                   FL_OK);
  ck_assert_mem_eq(dx, h_x(&h, 0)->grad, sizeof dx);
  ck_assert_mem_eq(dw, h_x(&h, 1)->grad, sizeof dw);
  ck_assert_mem_eq(db, h_x(&h, 2)->grad, sizeof db);
  h_free(&h);
}
END_TEST

START_TEST(test_gemm_refusals) {
  harness h;
  uint64_t s = 1;
  const int64_t a[] = {3, 5}, b[] = {4, 4}, b3[] = {5, 4, 1}, c[] = {2};
  h_init(&h, "Gemm"); /* K mismatch */
  h_f32(&h, "A", 2, a, &s, 0, 1, 0);
  h_f32(&h, "B", 2, b, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  h_init(&h, "Gemm"); /* 3-D B */
  h_f32(&h, "A", 2, a, &s, 0, 1, 0);
  h_f32(&h, "B", 3, b3, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  const int64_t b54[] = {5, 4};
  h_init(&h, "Gemm"); /* C does not broadcast to [3,4] */
  h_f32(&h, "A", 2, a, &s, 0, 1, 0);
  h_f32(&h, "B", 2, b54, &s, 0, 1, 0);
  h_f32(&h, "C", 1, c, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  h_init(&h, "Gemm"); /* unknown fused activation, bad transA, wrong attribute kind */
  h_f32(&h, "A", 2, a, &s, 0, 1, 0);
  h_f32(&h, "B", 2, b54, &s, 0, 1, 0);
  h_as(&h, FL_GRAPH_ACT_ATTR, "gelu");
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h.attrs[0] = (fl_gattr){.name = "transA", .kind = FL_GA_INT, .i = 2};
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h.attrs[0] = (fl_gattr){.name = "alpha", .kind = FL_GA_INT, .i = 2};
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* -------------------------------------------------------------- MatMul */

static void check_matmul(int na, const int64_t *sa, int nb, const int64_t *sb, int ny,
                         const int64_t *sy) {
  harness h;
  uint64_t s = 31;
  h_init(&h, "MatMul");
  h_f32(&h, "a", na, sa, &s, -1, 1, 0);
  h_f32(&h, "b", nb, sb, &s, -1, 1, 0);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, ny, sy);
  h_fwd(&h);
  /* Reference with promoted shapes. */
  const int64_t M = na == 1 ? 1 : sa[na - 2], K = sa[na - 1], N = nb == 1 ? 1 : sb[nb - 1];
  const int64_t am[2] = {M, K}, bm[2] = {K, N};
  int64_t pa[FL_G_MAX_DIMS], pb[FL_G_MAX_DIMS];
  int ra = na == 1 ? 2 : na, rb = nb == 1 ? 2 : nb;
  for (int d = 0; d < ra - 2; d++) pa[d] = sa[d];
  for (int d = 0; d < rb - 2; d++) pb[d] = sb[d];
  pa[ra - 2] = am[0], pa[ra - 1] = am[1];
  pb[rb - 2] = bm[0], pb[rb - 1] = bm[1];
  int nbat;
  int64_t bat[FL_G_MAX_DIMS];
  ck_assert_int_eq(fl_gbroadcast_shape(ra - 2, pa, rb - 2, pb, &nbat, bat), FL_OK);
  const fl_gtensor *y = h_y(&h, 0);
  double *want = malloc(y->n * sizeof *want);
  for (size_t o = 0; o < y->n; o++) {
    const size_t i = (o / (size_t)N) % (size_t)M, j = o % (size_t)N, bo = o / (size_t)(M * N);
    double acc = 0;
    for (int64_t k = 0; k < K; k++) {
      /* batch offsets via broadcasting of the batch index */
      const size_t ia = bidx(bo, nbat, bat, ra - 2, pa) * (size_t)(M * K) + i * (size_t)K + k;
      const size_t ib = bidx(bo, nbat, bat, rb - 2, pb) * (size_t)(K * N) + k * (size_t)N + j;
      acc += (double)h_x(&h, 0)->data[ia] * h_x(&h, 1)->data[ib];
    }
    want[o] = acc;
  }
  expect_close(y->data, want, y->n, 1e-5, "MatMul");
  free(want);
  h_gradcheck(&h, "MatMul", 1, 1e-3, 2e-3, 2e-3);
  h_free(&h);
}

START_TEST(test_matmul) {
  const int64_t a234[] = {2, 3, 4}, b45[] = {4, 5}, y235[] = {2, 3, 5};
  check_matmul(3, a234, 2, b45, 3, y235);
  const int64_t a2134[] = {2, 1, 3, 4}, b342[] = {3, 4, 2}, y2332[] = {2, 3, 3, 2};
  check_matmul(4, a2134, 3, b342, 4, y2332);
  const int64_t a34[] = {3, 4}, b245[] = {2, 4, 5}, y235b[] = {2, 3, 5};
  check_matmul(2, a34, 3, b245, 3, y235b);
  const int64_t a4[] = {4}, y5[] = {5}, y23[] = {2, 3};
  check_matmul(1, a4, 2, b45, 1, y5);
  check_matmul(3, a234, 1, a4, 2, y23);
  /* Refusal: inner dims differ. */
  harness h;
  uint64_t s = 2;
  h_init(&h, "MatMul");
  h_f32(&h, "a", 2, a34, &s, 0, 1, 0);
  h_f32(&h, "b", 2, a34, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* ---------------------------------------------------------------- Conv */

typedef struct conv_case {
  int64_t N, C, H, W, O, kh, kw, group;
  int64_t sh, sw, dh, dw, pt, pl, pb, pr;
  int one_d;
  const char *act;
} conv_case;

/* got within tol of want, scaled by want's largest magnitude (as the
 * PyTorch fixtures compare): a Winograd sum's rounding follows the size of
 * the whole tensor's terms, not of the one element. */
static void expect_close_scaled(const float *got, const double *want, size_t n, double tol,
                                const char *what) {
  double big = 0.0;
  for (size_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1.0 + big), "%s[%zu]: %.9g, want %.9g",
                  what, i, (double)got[i], want[i]);
}

/* dx and dW of conv case k (no activation) in double, straight from the
 * definition, against the analytic gradients h_gradcheck kept (its output
 * gradient is h->w[0]). */
static void check_conv_grads(harness *h, const conv_case *k, int64_t oh, int64_t ow) {
  const float *x = h_x(h, 0)->data, *w = h_x(h, 1)->data, *dy = h->w[0];
  const int64_t Cg = k->C / k->group, Og = k->O / k->group;
  const size_t nx = h_x(h, 0)->n, nw = h_x(h, 1)->n;
  double *dx = calloc(nx, sizeof *dx), *dw = calloc(nw, sizeof *dw);
  for (int64_t n = 0; n < k->N; n++)
    for (int64_t o = 0; o < k->O; o++)
      for (int64_t p = 0; p < oh * ow; p++)
        for (int64_t cc = 0; cc < Cg; cc++)
          for (int64_t u = 0; u < k->kh; u++)
            for (int64_t v = 0; v < k->kw; v++) {
              const int64_t iy = p / ow * k->sh - k->pt + u * k->dh;
              const int64_t ix = p % ow * k->sw - k->pl + v * k->dw;
              if (iy < 0 || iy >= k->H || ix < 0 || ix >= k->W) continue;
              const int64_t xi = ((n * k->C + o / Og * Cg + cc) * k->H + iy) * k->W + ix;
              const int64_t wi = ((o * Cg + cc) * k->kh + u) * k->kw + v;
              const double d = dy[(n * k->O + o) * oh * ow + p];
              dx[xi] += d * w[wi];
              dw[wi] += d * x[xi];
            }
  expect_close_scaled(h->analytic[0], dx, nx, 1e-5, "Conv dx");
  expect_close_scaled(h->analytic[1], dw, nw, 1e-5, "Conv dW");
  free(dx);
  free(dw);
}

static void check_conv(const conv_case *k) {
  harness h;
  uint64_t s = 41;
  h_init(&h, "Conv");
  const int nd = k->one_d ? 3 : 4;
  const int64_t xs4[] = {k->N, k->C, k->H, k->W}, xs3[] = {k->N, k->C, k->W};
  const int64_t ws4[] = {k->O, k->C / k->group, k->kh, k->kw}, ws3[] = {k->O, k->C / k->group,
                                                                         k->kw};
  const int64_t bs[] = {k->O};
  h_f32(&h, "x", nd, k->one_d ? xs3 : xs4, &s, -1, 1, 0);
  h_f32(&h, "w", nd, k->one_d ? ws3 : ws4, &s, -1, 1, 0);
  h_f32(&h, "b", 1, bs, &s, -1, 1, 0);
  int64_t st[2] = {k->sh, k->sw}, dl[2] = {k->dh, k->dw}, pd[4] = {k->pt, k->pl, k->pb, k->pr};
  if (k->one_d) {
    st[0] = k->sw, dl[0] = k->dw, pd[0] = k->pl, pd[1] = k->pr;
    h_ais(&h, "strides", st, 1);
    h_ais(&h, "dilations", dl, 1);
    h_ais(&h, "pads", pd, 2);
  } else {
    h_ais(&h, "strides", st, 2);
    h_ais(&h, "dilations", dl, 2);
    h_ais(&h, "pads", pd, 4);
  }
  h_ai(&h, "group", k->group);
  if (k->act) h_as(&h, FL_GRAPH_ACT_ATTR, k->act);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t oh = (k->H + k->pt + k->pb - (k->kh - 1) * k->dh - 1) / k->sh + 1;
  const int64_t ow = (k->W + k->pl + k->pr - (k->kw - 1) * k->dw - 1) / k->sw + 1;
  const fl_gtensor *y = h_y(&h, 0);
  ck_assert_int_eq(y->shape[nd - 1], ow);
  if (!k->one_d) ck_assert_int_eq(y->shape[2], oh);
  h_fwd(&h);
  const float *x = h_x(&h, 0)->data, *w = h_x(&h, 1)->data, *b = h_x(&h, 2)->data;
  const int64_t Cg = k->C / k->group, Og = k->O / k->group;
  double *want = malloc(y->n * sizeof *want);
  for (int64_t n = 0; n < k->N; n++)
    for (int64_t o = 0; o < k->O; o++)
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
          const int64_t g = o / Og;
          double acc = b[o];
          for (int64_t cc = 0; cc < Cg; cc++)
            for (int64_t u = 0; u < k->kh; u++)
              for (int64_t v = 0; v < k->kw; v++) {
                const int64_t iy = i * k->sh - k->pt + u * k->dh;
                const int64_t ix = j * k->sw - k->pl + v * k->dw;
                if (iy < 0 || iy >= k->H || ix < 0 || ix >= k->W) continue;
                acc += (double)x[((n * k->C + g * Cg + cc) * k->H + iy) * k->W + ix] *
                       w[((o * Cg + cc) * k->kh + u) * k->kw + v];
              }
          if (k->act && !strcmp(k->act, "tanh")) acc = tanh(acc);
          want[((n * k->O + o) * oh + i) * ow + j] = acc;
        }
  expect_close(y->data, want, y->n, 1e-5, "Conv");
  free(want);
  /* Without an activation the objective is linear in each input, where a
   * central difference is exact for any step: a larger one keeps the
   * forward's rounding (the Winograd transforms') out of the quotient. */
  h_gradcheck(&h, "Conv", 1, k->act ? 1e-3 : 3e-2, 2e-3, 3e-3);
  if (!k->act) check_conv_grads(&h, k, oh, ow);
  h_free(&h);
}

START_TEST(test_conv) {
  /* The kernels' geometry, then groups, dilations, asymmetric pads,
   * strides, a 1-D conv, a fused tanh; images in several chunks, a dilated
   * conv as wide as its input, a pointwise conv, stride 2 over rows
   * wide enough for the vector gather. */
  const conv_case cases[] = {
      {2, 3, 6, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},
      {2, 3, 6, 5, 4, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1, 0, "tanh"},
      {1, 4, 7, 6, 6, 3, 2, 2, 1, 2, 1, 1, 0, 1, 2, 0, 0, NULL},
      {2, 2, 7, 7, 2, 3, 3, 1, 1, 1, 2, 2, 2, 1, 1, 2, 0, NULL},
      {1, 4, 5, 5, 4, 3, 3, 4, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL}, /* depthwise */
      {2, 3, 1, 9, 2, 1, 3, 1, 1, 2, 1, 1, 0, 1, 0, 1, 1, NULL}, /* 1-D */
      {5, 2, 16, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL}, /* chunks of 4 + 1 */
      {2, 2, 7, 6, 3, 3, 3, 1, 1, 1, 2, 2, 2, 2, 2, 2, 0, "tanh"}, /* dilated, ow == W */
      {2, 3, 4, 5, 4, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, NULL},   /* pointwise */
      {2, 2, 14, 14, 3, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1, 0, NULL}, /* stride 2, wide */
      {2, 3, 12, 12, 2, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 0, NULL}, /* 1x1 stride 2 */
      /* dx as a convolution of dz (stride 1, output as large as the input,
       * O <= C): one chunk of two images, chunks of 4 + 1 (the last one
       * image), an asymmetric 2x3 kernel with a fused tanh */
      {2, 4, 6, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},
      {5, 3, 16, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},
      {2, 3, 5, 6, 2, 2, 3, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, "tanh"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_conv(&cases[i]);
}
END_TEST

START_TEST(test_conv_winograd) {
  /* 3x3, stride 1, pad 1, at least 8 channels each way (ops_conv_wino.c):
   * batch 1 with odd non-square images and more outputs than inputs, even
   * sizes with fewer, a 1x1 image, channel counts that are no multiple of
   * anything, a fused tanh, images in chunks of 3 + 1 (23x23: 144
   * tiles each); beside it, pads of 1 on one side only and 7 channels take
   * the other paths. */
  const conv_case cases[] = {
      {1, 8, 5, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},
      {3, 11, 6, 4, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},
      {2, 8, 1, 1, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},
      {2, 9, 3, 5, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, "tanh"},
      {2, 8, 4, 3, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},
      {4, 8, 23, 23, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},
      {2, 8, 5, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, NULL},
      {2, 7, 5, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_conv(&cases[i]);
}
END_TEST

START_TEST(test_conv_refusals) {
  harness h;
  uint64_t s = 1;
  const int64_t xs[] = {1, 4, 5, 5}, ws[] = {2, 3, 3, 3}, ws2[] = {2, 4, 3, 3};
  h_init(&h, "Conv"); /* channels do not match */
  h_f32(&h, "x", 4, xs, &s, 0, 1, 0);
  h_f32(&h, "w", 4, ws, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  h_init(&h, "Conv"); /* auto_pad SAME_UPPER */
  h_f32(&h, "x", 4, xs, &s, 0, 1, 0);
  h_f32(&h, "w", 4, ws2, &s, 0, 1, 0);
  h_as(&h, "auto_pad", "SAME_UPPER");
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  const int64_t x5[] = {1, 4, 3, 3, 3}, w5[] = {2, 4, 1, 1, 1};
  h_init(&h, "Conv"); /* 3-D convolution */
  h_f32(&h, "x", 5, x5, &s, 0, 1, 0);
  h_f32(&h, "w", 5, w5, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  const int64_t big[] = {2, 4, 7, 7};
  h_init(&h, "Conv"); /* kernel larger than the input */
  h_f32(&h, "x", 4, xs, &s, 0, 1, 0);
  h_f32(&h, "w", 4, big, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* ---------------------------------------------------------------- pools */

START_TEST(test_maxpool) {
  for (int variant = 0; variant < 3; variant++) {
    harness h;
    uint64_t s = 51 + (uint64_t)variant;
    const int64_t xs[] = {2, 3, 7, 6};
    h_init(&h, "MaxPool");
    h_f32(&h, "x", 4, xs, &s, -1, 1, 0);
    int64_t k[2] = {2, 2}, st[2] = {2, 2}, pd[4] = {0, 0, 0, 0}, dl[2] = {1, 1};
    int ceil_mode = 0;
    if (variant == 1) pd[0] = 1, pd[1] = 1, pd[2] = 1, pd[3] = 0, k[0] = 3, st[1] = 1;
    /* variant 2: the last column window lies half outside (ceil_mode) */
    if (variant == 2) ceil_mode = 1, dl[0] = 2, st[0] = 1, k[1] = 3;
    h_ais(&h, "kernel_shape", k, 2);
    h_ais(&h, "strides", st, 2);
    h_ais(&h, "pads", pd, 4);
    h_ais(&h, "dilations", dl, 2);
    h_ai(&h, "ceil_mode", ceil_mode);
    h_outs(&h, 1);
    h_ready(&h);
    h_fwd(&h);
    const fl_gtensor *x = h_x(&h, 0), *y = h_y(&h, 0);
    const int64_t oh = y->shape[2], ow = y->shape[3];
    if (variant == 0) ck_assert(oh == 3 && ow == 3);
    if (variant == 1) ck_assert(oh == 4 && ow == 6);
    if (variant == 2) ck_assert(oh == 5 && ow == 3);
    for (int64_t p = 0; p < 6; p++)
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
          float m = -INFINITY;
          for (int64_t u = 0; u < k[0]; u++)
            for (int64_t v = 0; v < k[1]; v++) {
              const int64_t iy = i * st[0] - pd[0] + u * dl[0], ix = j * st[1] - pd[1] + v * dl[1];
              if (iy < 0 || iy >= 7 || ix < 0 || ix >= 6) continue;
              const float e = x->data[(p * 7 + iy) * 6 + ix];
              if (e > m) m = e;
            }
          ck_assert_float_eq(y->data[(p * oh + i) * ow + j], m);
        }
    /* Piecewise linear: a tiny step is exact and stays off the kinks. */
    h_gradcheck(&h, "MaxPool", 1, 1e-6, 1e-3, 1e-3);
    h_free(&h);
  }
  /* The Indices output is refused. */
  harness h;
  uint64_t s = 1;
  const int64_t xs[] = {1, 1, 4, 4}, k[] = {2, 2};
  h_init(&h, "MaxPool");
  h_f32(&h, "x", 4, xs, &s, 0, 1, 0);
  h_ais(&h, "kernel_shape", k, 2);
  h_outs(&h, 2);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

START_TEST(test_avgpool) {
  for (int cip = 0; cip < 2; cip++)
    for (int ceil_mode = 0; ceil_mode < 2; ceil_mode++) {
      harness h;
      uint64_t s = 61;
      const int64_t xs[] = {2, 2, 5, 7}, k[] = {3, 2}, st[] = {2, 2}, pd[] = {1, 0, 1, 0};
      h_init(&h, "AveragePool");
      h_f32(&h, "x", 4, xs, &s, -1, 1, 0);
      h_ais(&h, "kernel_shape", k, 2);
      h_ais(&h, "strides", st, 2);
      h_ais(&h, "pads", pd, 4);
      h_ai(&h, "count_include_pad", cip);
      h_ai(&h, "ceil_mode", ceil_mode);
      h_outs(&h, 1);
      h_ready(&h);
      h_fwd(&h);
      const fl_gtensor *x = h_x(&h, 0), *y = h_y(&h, 0);
      const int64_t oh = y->shape[2], ow = y->shape[3];
      ck_assert_int_eq(oh, 3);
      ck_assert_int_eq(ow, ceil_mode ? 4 : 3);
      for (int64_t p = 0; p < 4; p++)
        for (int64_t i = 0; i < oh; i++)
          for (int64_t j = 0; j < ow; j++) {
            /* PyTorch's rule: the divisor counts padding (cip) but not what
             * lies beyond the end padding. */
            const int64_t hs = i * 2 - 1, ws = j * 2 - 0;
            int64_t he = hs + 3, we = ws + 2;
            if (he > 5 + 1) he = 6;
            if (we > 7) we = 7;
            double sum = 0;
            int cnt = 0;
            for (int64_t iy = hs; iy < he; iy++)
              for (int64_t ix = ws; ix < we; ix++)
                if (iy >= 0 && iy < 5 && ix >= 0 && ix < 7)
                  sum += x->data[(p * 5 + iy) * 7 + ix], cnt++;
            const double div = cip ? (double)((he - hs) * (we - ws)) : cnt;
            ck_assert_float_eq_tol(y->data[(p * oh + i) * ow + j], sum / div, 1e-6);
          }
      h_gradcheck(&h, "AveragePool", 1, 1e-3, 1e-3, 1e-3);
      h_free(&h);
    }
  harness h;
  uint64_t s = 71;
  const int64_t xs[] = {2, 3, 4, 5};
  h_init(&h, "GlobalAveragePool");
  h_f32(&h, "x", 4, xs, &s, -1, 1, 0);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t ys[] = {2, 3, 1, 1};
  h_expect_shape(&h, 0, 4, ys);
  h_fwd(&h);
  for (int p = 0; p < 6; p++) {
    double sum = 0;
    for (int k = 0; k < 20; k++) sum += h_x(&h, 0)->data[p * 20 + k];
    ck_assert_float_eq_tol(h_y(&h, 0)->data[p], sum / 20, 1e-6);
  }
  h_gradcheck(&h, "GlobalAveragePool", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
}
END_TEST

/* ---------------------------------------------------------------- norms */

typedef struct sync_count {
  int calls;
} sync_count;

static fl_status sync_identity(void *ctx, double *buf, size_t n) {
  (void)buf, (void)n;
  ((sync_count *)ctx)->calls++;
  return FL_OK;
}

static void bn_build(harness *h, int64_t N, int64_t C, int64_t HW, const char *act) {
  uint64_t s = 81;
  const int64_t xs[] = {N, C, HW}, cs[] = {C};
  h_init(h, "BatchNormalization");
  h_f32(h, "x", 3, xs, &s, -1, 2, 0);
  h_f32(h, "gamma", 1, cs, &s, 0.5, 1.5, 0);
  h_f32(h, "beta", 1, cs, &s, -0.5, 0.5, 0);
  h_f32(h, "rmean", 1, cs, &s, -0.1, 0.1, 0);
  h_f32(h, "rvar", 1, cs, &s, 0.9, 1.1, 0);
  h_x(h, 3)->kind = FL_GT_BUFFER;
  h_x(h, 4)->kind = FL_GT_BUFFER;
  h_af(h, "epsilon", 1e-5f);
  h_af(h, "momentum", 0.9f);
  if (act) h_as(h, FL_GRAPH_ACT_ATTR, act);
  h_outs(h, 1);
  h_ready(h);
}

START_TEST(test_batchnorm) {
  harness h;
  const int64_t N = 4, C = 3, HW = 5;
  bn_build(&h, N, C, HW, NULL);
  float rm0[3], rv0[3];
  memcpy(rm0, h_x(&h, 3)->data, sizeof rm0);
  memcpy(rv0, h_x(&h, 4)->data, sizeof rv0);
  h_fwd(&h);
  const float *x = h_x(&h, 0)->data, *g = h_x(&h, 1)->data, *b = h_x(&h, 2)->data;
  double want[60];
  for (int64_t c = 0; c < C; c++) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < HW; k++) m += x[(n * C + c) * HW + k];
    m /= (double)(N * HW);
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < HW; k++) v += pow(x[(n * C + c) * HW + k] - m, 2);
    const double var = v / (double)(N * HW), uvar = v / (double)(N * HW - 1);
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < HW; k++) {
        const size_t i = (size_t)((n * C + c) * HW + k);
        want[i] = (x[i] - m) / sqrt(var + 1e-5) * g[c] + b[c];
      }
    /* ONNX momentum 0.9: running = 0.9 running + 0.1 batch (unbiased var). */
    ck_assert_float_eq_tol(h_x(&h, 3)->data[c], 0.9 * rm0[c] + 0.1 * m, 1e-6);
    ck_assert_float_eq_tol(h_x(&h, 4)->data[c], 0.9 * rv0[c] + 0.1 * uvar, 1e-6);
  }
  expect_close(h_y(&h, 0)->data, want, 60, 2e-5, "BatchNormalization");
  /* A recompute leaves the running statistics alone and gives the same y. */
  float rm1[3], y1[60];
  memcpy(rm1, h_x(&h, 3)->data, sizeof rm1);
  memcpy(y1, h_y(&h, 0)->data, sizeof y1);
  h.c.recomputing = 1;
  h_fwd(&h);
  ck_assert_mem_eq(rm1, h_x(&h, 3)->data, sizeof rm1);
  ck_assert_mem_eq(y1, h_y(&h, 0)->data, sizeof y1);
  h_gradcheck(&h, "BatchNormalization", 1, 1e-3, 2e-3, 3e-3);
  /* Eval: the running statistics. */
  h.c.training = 0;
  h_fwd(&h);
  for (int64_t c = 0; c < C; c++) {
    const double m = h_x(&h, 3)->data[c], v = h_x(&h, 4)->data[c];
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < HW; k++) {
        const size_t i = (size_t)((n * C + c) * HW + k);
        ck_assert_float_eq_tol(h_y(&h, 0)->data[i], (x[i] - m) / sqrt(v + 1e-5) * g[c] + b[c],
                               2e-5);
      }
  }
  h_free(&h);
}
END_TEST

/* With an identity norm-sync hook the graph op gives the local kernels'
 * bits, calls the hook twice in forward and once in backward, and not at
 * all when recomputing. */
START_TEST(test_batchnorm_sync) {
  harness a, b;
  bn_build(&a, 3, 4, 6, "relu");
  bn_build(&b, 3, 4, 6, "relu");
  sync_count cnt = {0};
  b.c.norm_sync = sync_identity;
  b.c.norm_sync_ctx = &cnt;
  h_fwd(&a);
  h_fwd(&b);
  ck_assert_int_eq(cnt.calls, 2);
  ck_assert_mem_eq(a.t[a.out[0]].data, b.t[b.out[0]].data, 72 * sizeof(float));
  ck_assert_mem_eq(a.t[a.in[3]].data, b.t[b.in[3]].data, 4 * sizeof(float));
  ck_assert_mem_eq(a.t[a.in[4]].data, b.t[b.in[4]].data, 4 * sizeof(float));
  b.c.recomputing = 1;
  h_fwd(&b);
  ck_assert_int_eq(cnt.calls, 2);
  b.c.recomputing = 0;
  uint64_t s = 5;
  float dy[72];
  gc_fill(dy, 72, &s, -1, 1);
  harness *hs[2] = {&a, &b};
  for (int k = 0; k < 2; k++) {
    harness *h = hs[k];
    h_y(h, 0)->grad = malloc(sizeof dy);
    memcpy(h_y(h, 0)->grad, dy, sizeof dy);
    for (int i = 0; i < 3; i++) h_x(h, i)->grad = calloc(h_x(h, i)->n, sizeof(float));
    ck_assert_int_eq(h->node.op->backward(&h->node, &h->c, 0), FL_OK);
  }
  ck_assert_int_eq(cnt.calls, 3);
  for (int i = 0; i < 3; i++)
    ck_assert_mem_eq(h_x(&a, i)->grad, h_x(&b, i)->grad, h_x(&a, i)->n * sizeof(float));
  /* The sync path's gradient against finite differences, with accumulation. */
  for (int i = 0; i < 5; i++) {
    free(h_x(&b, i)->grad);
    h_x(&b, i)->grad = NULL;
  }
  free(h_y(&b, 0)->grad);
  h_y(&b, 0)->grad = NULL;
  h_gradcheck(&b, "BatchNormalization sync", 1, 1e-3, 2e-3, 3e-3);
  h_free(&a);
  h_free(&b);
}
END_TEST

START_TEST(test_batchnorm_refusals) {
  harness h;
  uint64_t s = 1;
  const int64_t xs[] = {2, 3, 4}, c3[] = {3}, c4[] = {4};
  h_init(&h, "BatchNormalization");
  h_f32(&h, "x", 3, xs, &s, 0, 1, 0);
  h_f32(&h, "g", 1, c3, &s, 0, 1, 0);
  h_f32(&h, "b", 1, c4, &s, 0, 1, 0); /* wrong size */
  h_f32(&h, "m", 1, c3, &s, 0, 1, 0);
  h_f32(&h, "v", 1, c3, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  h_init(&h, "BatchNormalization");
  h_f32(&h, "x", 3, xs, &s, 0, 1, 0);
  for (int i = 0; i < 4; i++) h_f32(&h, "p", 1, c3, &s, 0, 1, 0);
  h_af(&h, "momentum", 1.5f);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  /* A batch of one value per channel cannot train. */
  const int64_t x1[] = {1, 3};
  h_init(&h, "BatchNormalization");
  h_f32(&h, "x", 2, x1, &s, 0, 1, 0);
  for (int i = 0; i < 4; i++) h_f32(&h, "p", 1, c3, &s, 0.5, 1, 0);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h.node.op->forward(&h.node, &h.c), FL_EINVAL);
  h_free(&h);
}
END_TEST

static void check_groupnorm(int per_group, const char *act) {
  harness h;
  uint64_t s = 91;
  const int64_t N = 2, C = 6, G = 3, HW = 4;
  const int64_t xs[] = {N, C, 2, 2}, cs[] = {per_group ? G : C};
  h_init(&h, "GroupNormalization");
  h_f32(&h, "x", 4, xs, &s, -1, 2, 0);
  h_f32(&h, "scale", 1, cs, &s, 0.5, 1.5, 0);
  h_f32(&h, "bias", 1, cs, &s, -0.5, 0.5, 0);
  h_ai(&h, "num_groups", G);
  h_af(&h, "epsilon", 1e-5f);
  if (act) h_as(&h, FL_GRAPH_ACT_ATTR, act);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  const float *x = h_x(&h, 0)->data, *g = h_x(&h, 1)->data, *b = h_x(&h, 2)->data;
  double want[48];
  const int64_t cpg = C / G, m = cpg * HW;
  for (int64_t n = 0; n < N; n++)
    for (int64_t gr = 0; gr < G; gr++) {
      const float *xg = x + (n * C + gr * cpg) * HW;
      double mean = 0, var = 0;
      for (int64_t k = 0; k < m; k++) mean += xg[k];
      mean /= (double)m;
      for (int64_t k = 0; k < m; k++) var += pow(xg[k] - mean, 2);
      var /= (double)m;
      for (int64_t k = 0; k < m; k++) {
        const int64_t ch = gr * cpg + k / HW, pi = per_group ? gr : ch;
        double v = (xg[k] - mean) / sqrt(var + 1e-5) * g[pi] + b[pi];
        if (act) v = tanh(v);
        want[(n * C + gr * cpg) * HW + k] = v;
      }
    }
  expect_close(h_y(&h, 0)->data, want, 48, 2e-5, "GroupNormalization");
  h_gradcheck(&h, "GroupNormalization", 1, 1e-3, 2e-3, 3e-3);
  h_free(&h);
}

START_TEST(test_groupnorm) {
  check_groupnorm(0, NULL);
  check_groupnorm(1, NULL);
  check_groupnorm(0, "tanh");
  harness h;
  uint64_t s = 1;
  const int64_t xs[] = {2, 6, 4}, c6[] = {6};
  h_init(&h, "GroupNormalization"); /* 4 groups do not divide 6 channels */
  h_f32(&h, "x", 3, xs, &s, 0, 1, 0);
  h_f32(&h, "s", 1, c6, &s, 0, 1, 0);
  h_f32(&h, "b", 1, c6, &s, 0, 1, 0);
  h_ai(&h, "num_groups", 4);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

START_TEST(test_layernorm) {
  for (int variant = 0; variant < 2; variant++) {
    harness h;
    uint64_t s = 101;
    const int64_t xs[] = {2, 3, 6}; /* rows with an SSE tail */
    const int64_t cs_last[] = {6}, cs_12[] = {3, 6};
    const int axis = variant ? 1 : -1;
    const int64_t cols = variant ? 18 : 6, rows = variant ? 2 : 6;
    h_init(&h, "LayerNormalization");
    h_f32(&h, "x", 3, xs, &s, -1, 2, 0);
    h_f32(&h, "scale", variant ? 2 : 1, variant ? cs_12 : cs_last, &s, 0.5, 1.5, 0);
    h_f32(&h, "bias", variant ? 2 : 1, variant ? cs_12 : cs_last, &s, -0.5, 0.5, 0);
    h_ai(&h, "axis", axis);
    h_af(&h, "epsilon", 1e-5f);
    h_outs(&h, 1);
    h_ready(&h);
    h_fwd(&h);
    const float *x = h_x(&h, 0)->data, *g = h_x(&h, 1)->data, *b = h_x(&h, 2)->data;
    double want[36];
    for (int64_t r = 0; r < rows; r++) {
      double m = 0, v = 0;
      for (int64_t k = 0; k < cols; k++) m += x[r * cols + k];
      m /= (double)cols;
      for (int64_t k = 0; k < cols; k++) v += pow(x[r * cols + k] - m, 2);
      v /= (double)cols;
      for (int64_t k = 0; k < cols; k++)
        want[r * cols + k] = (x[r * cols + k] - m) / sqrt(v + 1e-5) * g[k] + b[k];
    }
    expect_close(h_y(&h, 0)->data, want, 36, 2e-5, "LayerNormalization");
    h_gradcheck(&h, "LayerNormalization", 1, 1e-3, 2e-3, 3e-3);
    h_free(&h);
  }
  harness h;
  uint64_t s = 1;
  const int64_t xs[] = {2, 3, 4}, c3[] = {3};
  h_init(&h, "LayerNormalization"); /* scale of the wrong dims */
  h_f32(&h, "x", 3, xs, &s, 0, 1, 0);
  h_f32(&h, "s", 1, c3, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

START_TEST(test_softmax) {
  for (int lg = 0; lg < 2; lg++)
    for (int axis = 0; axis < 3; axis++) {
      harness h;
      uint64_t s = 111;
      const int64_t xs[] = {2, 3, 6}; /* last axis: SSE and tail */
      h_init(&h, lg ? "LogSoftmax" : "Softmax");
      h_f32(&h, "x", 3, xs, &s, -2, 2, 0);
      h_ai(&h, "axis", axis == 2 ? -1 : axis);
      h_outs(&h, 1);
      h_ready(&h);
      h_fwd(&h);
      const float *x = h_x(&h, 0)->data;
      const size_t outer = axis == 0 ? 1 : axis == 1 ? 2 : 6, len = (size_t)xs[axis];
      const size_t inner = 36 / outer / len;
      double want[36];
      for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < inner; i++) {
          double sum = 0;
          for (size_t k = 0; k < len; k++) sum += exp(x[(o * len + k) * inner + i]);
          for (size_t k = 0; k < len; k++) {
            const double v = x[(o * len + k) * inner + i];
            want[(o * len + k) * inner + i] = lg ? v - log(sum) : exp(v) / sum;
          }
        }
      expect_close(h_y(&h, 0)->data, want, 36, 1e-6, "Softmax");
      h_gradcheck(&h, lg ? "LogSoftmax" : "Softmax", 1, 1e-3, 1e-3, 2e-3);
      h_free(&h);
    }
}
END_TEST

/* ------------------------------------------------------------- reduce */

START_TEST(test_reduce) {
  /* ReduceMean with the axes attribute, keepdims 0. */
  harness h;
  uint64_t s = 121;
  const int64_t xs[] = {2, 3, 4}, axes1[] = {1};
  h_init(&h, "ReduceMean");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_ais(&h, "axes", axes1, 1);
  h_ai(&h, "keepdims", 0);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t y24[] = {2, 4};
  h_expect_shape(&h, 0, 2, y24);
  h_fwd(&h);
  double want[8];
  for (int a = 0; a < 2; a++)
    for (int c = 0; c < 4; c++) {
      double sum = 0;
      for (int b = 0; b < 3; b++) sum += h_x(&h, 0)->data[(a * 3 + b) * 4 + c];
      want[a * 4 + c] = sum / 3;
    }
  expect_close(h_y(&h, 0)->data, want, 8, 1e-6, "ReduceMean");
  h_gradcheck(&h, "ReduceMean", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* ReduceSum with axes as an input (opset 13), keepdims 1, negative axis. */
  h_init(&h, "ReduceSum");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  const int64_t s2[] = {2}, ax[] = {0, -1};
  h_i64(&h, "axes", 1, s2, ax);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t y131[] = {1, 3, 1};
  h_expect_shape(&h, 0, 3, y131);
  h_fwd(&h);
  double want3[3];
  for (int b = 0; b < 3; b++) {
    double sum = 0;
    for (int a = 0; a < 2; a++)
      for (int c = 0; c < 4; c++) sum += h_x(&h, 0)->data[(a * 3 + b) * 4 + c];
    want3[b] = sum;
  }
  expect_close(h_y(&h, 0)->data, want3, 3, 1e-6, "ReduceSum");
  h_gradcheck(&h, "ReduceSum", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* ReduceSum without axes: everything; a data-dependent axes input is refused. */
  h_init(&h, "ReduceSum");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_ai(&h, "keepdims", 0);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h_y(&h, 0)->ndim, 0);
  h_fwd(&h);
  double tot = 0;
  for (int i = 0; i < 24; i++) tot += h_x(&h, 0)->data[i];
  ck_assert_float_eq_tol(h_y(&h, 0)->data[0], tot, 1e-5);
  h_free(&h);
  h_init(&h, "ReduceSum");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "axes", 1, s2, ax);
  h_x(&h, 1)->known = 0;
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* -------------------------------------------------------------- shapes */

START_TEST(test_reshape_flatten_squeeze) {
  harness h;
  uint64_t s = 131;
  const int64_t xs[] = {2, 3, 4};
  /* Reshape with 0 (copy) and -1 (inferred). */
  const int64_t s2[] = {2}, shp[] = {0, -1};
  h_init(&h, "Reshape");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "shape", 1, s2, shp);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t y2_12[] = {2, 12};
  h_expect_shape(&h, 0, 2, y2_12);
  h_fwd(&h);
  ck_assert_mem_eq(h_y(&h, 0)->data, h_x(&h, 0)->data, 24 * sizeof(float));
  h_gradcheck(&h, "Reshape", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* allowzero: a 0 is a zero-size dim, which 24 values cannot take. */
  h_init(&h, "Reshape");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "shape", 1, s2, shp);
  h_ai(&h, "allowzero", 1);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  /* A shape that does not fit, and a shape not known at bind. */
  const int64_t bad[] = {5, -1};
  h_init(&h, "Reshape");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "shape", 1, s2, bad);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_x(&h, 1)->idata[0] = 4;
  h_x(&h, 1)->known = 0;
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  /* Flatten at axis 2, and negative axis. */
  h_init(&h, "Flatten");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_ai(&h, "axis", 2);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t y6_4[] = {6, 4};
  h_expect_shape(&h, 0, 2, y6_4);
  h_fwd(&h);
  ck_assert_mem_eq(h_y(&h, 0)->data, h_x(&h, 0)->data, 24 * sizeof(float));
  h_gradcheck(&h, "Flatten", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* Unsqueeze (axes input, negative) then Squeeze back. */
  const int64_t s1[] = {2}, axes[] = {1, -1};
  h_init(&h, "Unsqueeze");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "axes", 1, s1, axes);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t y21341[] = {2, 1, 3, 4, 1};
  h_expect_shape(&h, 0, 5, y21341);
  h_gradcheck(&h, "Unsqueeze", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  h_init(&h, "Squeeze");
  h_f32(&h, "x", 5, y21341, &s, -1, 1, 0);
  h_i64(&h, "axes", 1, s1, axes);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, 3, xs);
  h_gradcheck(&h, "Squeeze", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  h_init(&h, "Squeeze"); /* no axes: every 1; an axis of size 3 refused */
  h_f32(&h, "x", 5, y21341, &s, -1, 1, 0);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, 3, xs);
  h_free(&h);
  const int64_t ax2[] = {2};
  const int64_t one[] = {1};
  h_init(&h, "Squeeze");
  h_f32(&h, "x", 5, y21341, &s, -1, 1, 0);
  h_i64(&h, "axes", 1, one, ax2);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

START_TEST(test_transpose_concat_split) {
  harness h;
  uint64_t s = 141;
  const int64_t xs[] = {2, 3, 4}, perm[] = {2, 0, 1};
  h_init(&h, "Transpose");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_ais(&h, "perm", perm, 3);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t ys[] = {4, 2, 3};
  h_expect_shape(&h, 0, 3, ys);
  h_fwd(&h);
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 4; c++)
        ck_assert_float_eq(h_y(&h, 0)->data[(c * 2 + a) * 3 + b],
                           h_x(&h, 0)->data[(a * 3 + b) * 4 + c]);
  h_gradcheck(&h, "Transpose", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* A permutation that keeps the last dim (contiguous rows). */
  const int64_t perm_k[] = {1, 0, 2};
  h_init(&h, "Transpose");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_ais(&h, "perm", perm_k, 3);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 4; c++)
        ck_assert_float_eq(h_y(&h, 0)->data[(b * 2 + a) * 4 + c],
                           h_x(&h, 0)->data[(a * 3 + b) * 4 + c]);
  h_gradcheck(&h, "Transpose (last dim kept)", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* Concat on axis 1 of [2,3,4] and [2,1,4]. */
  const int64_t x2[] = {2, 1, 4};
  h_init(&h, "Concat");
  h_f32(&h, "a", 3, xs, &s, -1, 1, 0);
  h_f32(&h, "b", 3, x2, &s, -1, 1, 0);
  h_ai(&h, "axis", 1);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t yc[] = {2, 4, 4};
  h_expect_shape(&h, 0, 3, yc);
  h_fwd(&h);
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 4; b++)
      for (int c = 0; c < 4; c++) {
        const float want = b < 3 ? h_x(&h, 0)->data[(a * 3 + b) * 4 + c]
                                 : h_x(&h, 1)->data[a * 4 + c];
        ck_assert_float_eq(h_y(&h, 0)->data[(a * 4 + b) * 4 + c], want);
      }
  h_gradcheck(&h, "Concat", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* Concat of int64 shape pieces. */
  const int64_t one[] = {1}, two[] = {2}, v1[] = {7}, v2[] = {-1, 5};
  h_init(&h, "Concat");
  h_i64(&h, "a", 1, one, v1);
  h_i64(&h, "b", 1, two, v2);
  h_ai(&h, "axis", 0);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert(h_y(&h, 0)->idata[0] == 7 && h_y(&h, 0)->idata[1] == -1 &&
            h_y(&h, 0)->idata[2] == 5);
  h_free(&h);
  /* Split with the split input, axis -1; outputs [2,3,1] and [2,3,3]. */
  const int64_t sp[] = {1, 3};
  h_init(&h, "Split");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "split", 1, two, sp);
  h_ai(&h, "axis", -1);
  h_outs(&h, 2);
  h_ready(&h);
  const int64_t y0[] = {2, 3, 1}, y1[] = {2, 3, 3};
  h_expect_shape(&h, 0, 3, y0);
  h_expect_shape(&h, 1, 3, y1);
  h_fwd(&h);
  for (int r = 0; r < 6; r++) {
    ck_assert_float_eq(h_y(&h, 0)->data[r], h_x(&h, 0)->data[r * 4]);
    for (int k = 0; k < 3; k++)
      ck_assert_float_eq(h_y(&h, 1)->data[r * 3 + k], h_x(&h, 0)->data[r * 4 + 1 + k]);
  }
  h_gradcheck(&h, "Split", 2, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* Split sizes that do not add up. */
  const int64_t spbad[] = {1, 2};
  h_init(&h, "Split");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "split", 1, two, spbad);
  h_ai(&h, "axis", 2);
  h_outs(&h, 2);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

static void check_slice(const int64_t *st, const int64_t *en, const int64_t *ax,
                        const int64_t *steps, size_t k, const int64_t *ys) {
  harness h;
  uint64_t s = 151;
  const int64_t xs[] = {4, 5, 6};
  const int64_t kk[] = {(int64_t)k};
  h_init(&h, "Slice");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "starts", 1, kk, st);
  h_i64(&h, "ends", 1, kk, en);
  h_i64(&h, "axes", 1, kk, ax);
  h_i64(&h, "steps", 1, kk, steps);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, 3, ys);
  h_fwd(&h);
  /* Reference: per axis, the start and step after ONNX's clamping. */
  int64_t b[3] = {0, 0, 0}, stp[3] = {1, 1, 1};
  for (size_t i = 0; i < k; i++) {
    const int a = (int)(ax[i] < 0 ? ax[i] + 3 : ax[i]);
    int64_t v = st[i] < 0 ? st[i] + xs[a] : st[i];
    if (steps[i] > 0)
      v = v < 0 ? 0 : v > xs[a] ? xs[a] : v;
    else
      v = v < 0 ? 0 : v > xs[a] - 1 ? xs[a] - 1 : v;
    b[a] = v;
    stp[a] = steps[i];
  }
  const fl_gtensor *y = h_y(&h, 0);
  for (int64_t i = 0; i < ys[0]; i++)
    for (int64_t j = 0; j < ys[1]; j++)
      for (int64_t l = 0; l < ys[2]; l++) {
        const int64_t xi = ((b[0] + i * stp[0]) * 5 + b[1] + j * stp[1]) * 6 + b[2] + l * stp[2];
        ck_assert_float_eq(y->data[(i * ys[1] + j) * ys[2] + l], h_x(&h, 0)->data[xi]);
      }
  if (y->n) h_gradcheck(&h, "Slice", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
}

START_TEST(test_slice) {
  const int64_t st1[] = {1, -3}, en1[] = {3, INT64_MAX}, ax1[] = {0, 2}, sp1[] = {1, 1};
  const int64_t y1[] = {2, 5, 3};
  check_slice(st1, en1, ax1, sp1, 2, y1);
  const int64_t st2[] = {-1, 10}, en2[] = {-100, -10}, ax2[] = {-1, 1}, sp2[] = {-2, -1};
  const int64_t y2[] = {4, 5, 3}; /* axis 2: 5,3,1; axis 1: clamped 4..-1: 5 values */
  check_slice(st2, en2, ax2, sp2, 2, y2);
  const int64_t st3[] = {3}, en3[] = {1}, ax3[] = {1}, sp3[] = {1};
  const int64_t y3[] = {4, 0, 6}; /* empty */
  check_slice(st3, en3, ax3, sp3, 1, y3);
  /* step 0 refused */
  harness h;
  uint64_t s = 1;
  const int64_t xs[] = {4}, one[] = {1}, zero[] = {0}, four[] = {4};
  h_init(&h, "Slice");
  h_f32(&h, "x", 1, xs, &s, 0, 1, 0);
  h_i64(&h, "starts", 1, one, zero);
  h_i64(&h, "ends", 1, one, four);
  h_i64(&h, "axes", 1, one, zero);
  h_i64(&h, "steps", 1, one, zero);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

#define GATHER_MANY 700 /* indices: more than one chunk of Gather's positions (512) */

/* h (the caller's, h_free'd by it): Gather on axis 1 of x [2, 9] (random
 * from *s) by GATHER_MANY indices ids, ready. */
static void gather_many(harness *h, uint64_t *s, const int64_t *ids) {
  const int64_t xs[] = {2, 9}, ni[] = {GATHER_MANY};
  h_init(h, "Gather");
  h_f32(h, "x", 2, xs, s, -1, 1, 0);
  h_i64(h, "ids", 1, ni, ids);
  h_ai(h, "axis", 1);
  h_outs(h, 1);
  h_ready(h);
}

START_TEST(test_gather) {
  /* Embedding lookup: table [5, 3], indices [2, 3] with a repeat and a
   * negative index; backward scatter-adds. */
  harness h;
  uint64_t s = 161;
  const int64_t ts[] = {5, 3}, is[] = {2, 3}, iv[] = {0, 4, 2, 4, -1, 1};
  h_init(&h, "Gather");
  h_f32(&h, "table", 2, ts, &s, -1, 1, 0);
  h_i64(&h, "ids", 2, is, iv);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t ys[] = {2, 3, 3};
  h_expect_shape(&h, 0, 3, ys);
  h_fwd(&h);
  for (int j = 0; j < 6; j++) {
    const int64_t r = iv[j] < 0 ? iv[j] + 5 : iv[j];
    for (int k = 0; k < 3; k++)
      ck_assert_float_eq(h_y(&h, 0)->data[j * 3 + k], h_x(&h, 0)->data[r * 3 + k]);
  }
  h_gradcheck(&h, "Gather", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* Gather on axis 1 of floats. */
  const int64_t xs[] = {2, 4, 3}, one[] = {2}, iv2[] = {3, 0};
  h_init(&h, "Gather");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "ids", 1, one, iv2);
  h_ai(&h, "axis", 1);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t y2[] = {2, 2, 3};
  h_expect_shape(&h, 0, 3, y2);
  h_fwd(&h);
  for (int a = 0; a < 2; a++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++)
        ck_assert_float_eq(h_y(&h, 0)->data[(a * 2 + j) * 3 + k],
                           h_x(&h, 0)->data[(a * 4 + iv2[j]) * 3 + k]);
  h_gradcheck(&h, "Gather axis 1", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* Single elements (the last axis), an index repeated and a negative one:
   * backward scatter-adds them. */
  const int64_t xs3[] = {2, 5}, four[] = {4}, iv3[] = {4, 1, -1, 1};
  h_init(&h, "Gather");
  h_f32(&h, "x", 2, xs3, &s, -1, 1, 0);
  h_i64(&h, "ids", 1, four, iv3);
  h_ai(&h, "axis", 1);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  for (int a = 0; a < 2; a++)
    for (int j = 0; j < 4; j++)
      ck_assert_float_eq(h_y(&h, 0)->data[a * 4 + j],
                         h_x(&h, 0)->data[a * 5 + (iv3[j] < 0 ? iv3[j] + 5 : iv3[j])]);
  h_gradcheck(&h, "Gather last axis", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* Shape domain: a scalar index into a shape gives a scalar. */
  const int64_t s3[] = {3}, shp[] = {8, 5, 16}, sc[] = {1}, idx[] = {-2};
  h_init(&h, "Gather");
  h_i64(&h, "shape", 1, s3, shp);
  h_i64(&h, "i", 0, sc, idx);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h_y(&h, 0)->ndim, 0);
  h_fwd(&h);
  ck_assert_int_eq(h_y(&h, 0)->idata[0], 5);
  h_free(&h);
  /* More indices than one chunk of positions (512): 700 single elements
   * of [2, 9], repeated and negative ones, forward and the scatter-add
   * backward; then one out of range past the first chunk, refused before
   * anything is written. */
  static int64_t many[GATHER_MANY];
  for (int j = 0; j < GATHER_MANY; j++) many[j] = (j * 7) % 18 - 9;
  gather_many(&h, &s, many);
  h_fwd(&h);
  for (int a = 0; a < 2; a++)
    for (int j = 0; j < GATHER_MANY; j++)
      ck_assert_float_eq(h_y(&h, 0)->data[a * GATHER_MANY + j],
                         h_x(&h, 0)->data[a * 9 + (many[j] < 0 ? many[j] + 9 : many[j])]);
  h_gradcheck(&h, "Gather many", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  many[600] = 9;
  gather_many(&h, &s, many);
  for (int i = 0; i < 2 * GATHER_MANY; i++) h_y(&h, 0)->data[i] = 42.0f;
  ck_assert_int_eq(h.node.op->forward(&h.node, &h.c), FL_EINVAL);
  for (int i = 0; i < 2 * GATHER_MANY; i++) ck_assert_float_eq(h_y(&h, 0)->data[i], 42.0f);
  h_free(&h);
  /* An index out of range is refused at forward. */
  const int64_t bad[] = {5};
  h_init(&h, "Gather");
  h_f32(&h, "table", 2, ts, &s, -1, 1, 0);
  h_i64(&h, "ids", 1, sc, bad);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h.node.op->forward(&h.node, &h.c), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* ----------------------------------------------------- EmbeddingBagSum */

/* Reference: out[i, g*D + d] = sum over entries of sample i in group g
 * (slot, or 0 with all; slots >= groups skipped) of value * rows[row, d]. */
static void bag_reference(const fl_graph_sparse_entry *e, size_t ne, const float *rows, size_t D,
                          size_t nb, size_t groups, int all, double *out) {
  memset(out, 0, nb * groups * D * sizeof *out);
  for (size_t k = 0; k < ne; k++) {
    if (!all && e[k].slot >= groups) continue;
    const size_t g = all ? 0 : e[k].slot;
    for (size_t d = 0; d < D; d++)
      out[(e[k].sample * groups + g) * D + d] += (double)e[k].value * rows[e[k].row * D + d];
  }
}

/* One EmbeddingBagSum of rows [5, D] on a batch of 4 by entries; mode
 * "all" when slots is 0. */
static void bag_check(const fl_graph_sparse_entry *e, size_t ne, int64_t D, int64_t slots) {
  harness h;
  uint64_t s = 171;
  const int64_t rs[] = {5, D}, groups = slots ? slots : 1;
  h_init(&h, "EmbeddingBagSum");
  h.c.batch = 4;
  h_f32(&h, "rows", 2, rs, &s, -1, 1, 0);
  if (slots)
    h_ai(&h, "num_slots", slots);
  else
    h_as(&h, "mode", "all");
  h.node.feed = (fl_graph_sparse_feed){e, ne};
  h.node.fed = 1;
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t ys[] = {4, groups * D};
  h_expect_shape(&h, 0, 2, ys);
  h_fwd(&h);
  double want[4 * 4 * 3];
  bag_reference(e, ne, h_x(&h, 0)->data, (size_t)D, 4, (size_t)groups, !slots, want);
  expect_close(h_y(&h, 0)->data, want, (size_t)(4 * groups * D), 1e-6, "EmbeddingBagSum");
  h_gradcheck(&h, slots ? "EmbeddingBagSum slots" : "EmbeddingBagSum all", 1, 1e-3, 1e-4, 1e-3);
  /* row 4 is named by no entry; row 3 only in slot 3 (skipped by slots) */
  h_bwd(&h, 0);
  for (int64_t d = 0; d < D; d++) {
    ck_assert_float_eq(h_x(&h, 0)->grad[4 * D + d], 0.0f);
    if (slots) ck_assert_float_eq(h_x(&h, 0)->grad[3 * D + d], 0.0f);
  }
  h_free(&h);
}

START_TEST(test_embedding_bag_sum) {
  /* Sample 0 names row 0 twice in one slot, sample 1 has slot 3 (beyond
   * 3 slots), sample 2 none, sample 3 rows 0 and 1 again. */
  static const fl_graph_sparse_entry e[] = {
      {0, 0, 0, 1.0f}, {0, 1, 1, 0.5f}, {0, 0, 0, 2.0f}, {1, 2, 2, 1.5f},
      {1, 3, 3, -1.0f}, {3, 1, 0, 1.0f}, {3, 2, 2, 0.7f}, {3, 0, 1, -0.5f}};
  const size_t ne = sizeof e / sizeof e[0];
  bag_check(e, ne, 3, 3);
  bag_check(e, ne, 1, 0); /* the wide sum */
  bag_check(e, ne, 2, 0);
  ck_assert_str_eq(fl_gop_find("EmbeddingBagSum")->domain, "flotilla");
  ck_assert_ptr_null(strstr(fl_gop_supported(), "EmbeddingBagSum")); /* not an ONNX op */
  /* Refusals: at infer (attributes, rank), at forward (feed). */
  harness h;
  uint64_t s = 3;
  const int64_t rs[] = {5, 2}, r1[] = {10};
  h_init(&h, "EmbeddingBagSum");
  h.c.batch = 4;
  h_f32(&h, "rows", 2, rs, &s, -1, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* mode slots without num_slots */
  h_as(&h, "mode", "all");
  h_ai(&h, "num_slots", 2);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* num_slots with all */
  h.nattrs = h.node.n_attrs = 0;
  h_as(&h, "mode", "mean");
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h.nattrs = h.node.n_attrs = 0;
  h_as(&h, "mode", "all");
  h_ready(&h);
  ck_assert_int_eq(h.node.op->forward(&h.node, &h.c), FL_ESTATE); /* no feed */
  const fl_graph_sparse_entry bad[] = {{0, 0, 5, 1.0f}, {4, 0, 0, 1.0f}};
  for (int k = 0; k < 2; k++) {
    h.node.feed = (fl_graph_sparse_feed){&bad[k], 1};
    h.node.fed = 1;
    ck_assert_int_eq(h.node.op->forward(&h.node, &h.c), FL_EINVAL);
  }
  h.node.feed = (fl_graph_sparse_feed){NULL, 0}; /* empty: zeros */
  h_fwd(&h);
  for (size_t i = 0; i < h_y(&h, 0)->n; i++) ck_assert_float_eq(h_y(&h, 0)->data[i], 0.0f);
  h_free(&h);
  h_init(&h, "EmbeddingBagSum");
  h.c.batch = 4;
  h_f32(&h, "rows", 1, r1, &s, -1, 1, 0);
  h_as(&h, "mode", "all");
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL); /* rows must be [rows, width] */
  h_free(&h);
}
END_TEST

START_TEST(test_shape_domain) {
  harness h;
  uint64_t s = 171;
  const int64_t xs[] = {8, 5, 16};
  /* Shape with start/end. */
  h_init(&h, "Shape");
  h_f32(&h, "x", 3, xs, &s, 0, 1, 0);
  h_ai(&h, "start", 1);
  h_ai(&h, "end", -0);
  h_outs(&h, 1);
  h_ready(&h);
  ck_assert_int_eq(h_y(&h, 0)->n, 0);
  h_free(&h);
  h_init(&h, "Shape");
  h_f32(&h, "x", 3, xs, &s, 0, 1, 0);
  h_ai(&h, "start", -2);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert_int_eq(h_y(&h, 0)->n, 2);
  ck_assert(h_y(&h, 0)->idata[0] == 5 && h_y(&h, 0)->idata[1] == 16);
  h_free(&h);
  /* Constant: value_ints, value (float) with flotilla_dims, value_float. */
  const int64_t vi[] = {3, -1};
  h_init(&h, "Constant");
  h_ais(&h, "value_ints", vi, 2);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert_int_eq(h_y(&h, 0)->dtype, FL_G_I64);
  ck_assert(h_y(&h, 0)->idata[0] == 3 && h_y(&h, 0)->idata[1] == -1);
  h_free(&h);
  const float fv[] = {1, 2, 3, 4, 5, 6};
  const int64_t dims[] = {2, 3};
  h_init(&h, "Constant");
  h.attrs[h.nattrs++] = (fl_gattr){.name = "value", .kind = FL_GA_FLOATS, .floats = fv, .n = 6};
  h_ais(&h, "flotilla_dims", dims, 2);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, 2, dims);
  h_fwd(&h);
  ck_assert_mem_eq(h_y(&h, 0)->data, fv, sizeof fv);
  h_free(&h);
  h_init(&h, "Constant");
  h_af(&h, "value_float", 2.5f);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert_int_eq(h_y(&h, 0)->ndim, 0);
  ck_assert_float_eq(h_y(&h, 0)->data[0], 2.5f);
  h_free(&h);
  h_init(&h, "Constant"); /* two values */
  h_af(&h, "value_float", 2.5f);
  h_ai(&h, "value_int", 2);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  /* ConstantOfShape, Range, Expand. */
  const int64_t two[] = {2}, cs[] = {2, 3};
  h_init(&h, "ConstantOfShape");
  h_i64(&h, "shape", 1, two, cs);
  h_ai(&h, "value", 7);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert_int_eq(h_y(&h, 0)->n, 6);
  for (int i = 0; i < 6; i++) ck_assert_int_eq(h_y(&h, 0)->idata[i], 7);
  h_free(&h);
  const int64_t sc[] = {1}, r0[] = {10}, r1[] = {1}, r2[] = {-3};
  h_init(&h, "Range");
  h_i64(&h, "start", 0, sc, r0);
  h_i64(&h, "limit", 0, sc, r1);
  h_i64(&h, "delta", 0, sc, r2);
  h_outs(&h, 1);
  h_ready(&h);
  h_fwd(&h);
  ck_assert_int_eq(h_y(&h, 0)->n, 3);
  ck_assert(h_y(&h, 0)->idata[0] == 10 && h_y(&h, 0)->idata[1] == 7 &&
            h_y(&h, 0)->idata[2] == 4);
  h_free(&h);
  const int64_t x31[] = {3, 1}, es[] = {2, 1, 4}, ey[] = {2, 3, 4}, three[] = {3};
  h_init(&h, "Expand");
  h_f32(&h, "x", 2, x31, &s, -1, 1, 0);
  h_i64(&h, "shape", 1, three, es);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, 3, ey);
  h_fwd(&h);
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 4; c++)
        ck_assert_float_eq(h_y(&h, 0)->data[(a * 3 + b) * 4 + c], h_x(&h, 0)->data[b]);
  h_gradcheck(&h, "Expand", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF); /* the refusal tests log their errors */
  Suite *s = suite_create("graph_ops");
  TCase *tc = tcase_create("ops");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_registry);
  tcase_add_test(tc, test_binary_broadcast);
  tcase_add_test(tc, test_binary_int64_and_refusals);
  tcase_add_test(tc, test_unary);
  tcase_add_test(tc, test_identity_cast_dropout);
  tcase_add_test(tc, test_compare_where);
  tcase_add_test(tc, test_gemm);
  tcase_add_test(tc, test_gpu_bind_refusals);
  tcase_add_test(tc, test_gemm_matches_linear_kernels);
  tcase_add_test(tc, test_gemm_refusals);
  tcase_add_test(tc, test_matmul);
  tcase_add_test(tc, test_conv);
  tcase_add_test(tc, test_conv_winograd);
  tcase_add_test(tc, test_conv_refusals);
  tcase_add_test(tc, test_maxpool);
  tcase_add_test(tc, test_avgpool);
  tcase_add_test(tc, test_batchnorm);
  tcase_add_test(tc, test_batchnorm_sync);
  tcase_add_test(tc, test_batchnorm_refusals);
  tcase_add_test(tc, test_groupnorm);
  tcase_add_test(tc, test_layernorm);
  tcase_add_test(tc, test_softmax);
  tcase_add_test(tc, test_reduce);
  tcase_add_test(tc, test_reshape_flatten_squeeze);
  tcase_add_test(tc, test_transpose_concat_split);
  tcase_add_test(tc, test_slice);
  tcase_add_test(tc, test_gather);
  tcase_add_test(tc, test_shape_domain);
  tcase_add_test(tc, test_embedding_bag_sum);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
