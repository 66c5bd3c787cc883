/* test_onnx_lint.c - the importer's warnings for models exported from
 * PyTorch the wrong way for training (trainer/onnx/onnx_lint.c): models
 * built with protobuf-c (onnx_testutil.h) the way torch 1.13 writes them
 * in each case (eval-mode batch norm, its running statistics merged into
 * Identity copies, constant folding's onnx::<Op>_<n> weights, a fixed
 * batch dim), loaded with stderr captured: each warning comes once, names
 * the file, the first offender and the export argument to use; the
 * committed training exports (tests/fixtures) and a clean model warn of
 * nothing. */
#include <config.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_graph.h"
#include "fl_log.h"
#include "fl_onnx.h"
#include "log_capture.h"
#include "onnx_testutil.h"

/* What the last capture_end read back. */
static const char *g_log = "";

/* Warning lines (" W " after the time stamp) in g_log. */
static int warnings(void) {
  int k = 0;
  for (const char *p = g_log; (p = strstr(p, "Z W ")) != NULL; p++) k++;
  return k;
}

static void expect_in_log(const char *s) {
  ck_assert_msg(strstr(g_log, s) != NULL, "'%s' not in the log:\n%s", s, g_log);
}

/* Load t as file name (must succeed) with the log captured. */
static void load(const tm *t, const char *name) {
  size_t len;
  uint8_t *b = tm_pack(t, &len);
  fl_graph *g = NULL;
  capture_begin();
  const fl_status st = fl_onnx_load_mem(b, len, name, NULL, FL_GLOSS_MSE, &g);
  g_log = capture_end();
  ck_assert_msg(st == FL_OK, "%s: %d\n%s", name, st, g_log);
  fl_graph_free(g);
  free(b);
}

static const float k_ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/* x [N, 4] (dim 0 fixed to batch when batch > 0) -> Gemm(weight, bias)
 * -> y [N, 2], opset 17. */
static void gemm_model(tm *t, const char *weight, const char *bias, int64_t batch) {
  tm_init(t, 17);
  Onnx__ValueInfoProto *in = tm_input(t, "input", 2, (const int64_t[]){-1, 4});
  if (batch > 0) {
    Onnx__TensorShapeProto__Dimension *d0 = in->type->tensor_type->shape->dim[0];
    d0->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    d0->dim_value = batch;
  }
  tm_init_f(t, weight, 2, (const int64_t[]){2, 4}, k_ones);
  tm_init_f(t, bias, 1, (const int64_t[]){2}, k_ones);
  char ins[256];
  snprintf(ins, sizeof ins, "input,%s,%s", weight, bias);
  Onnx__NodeProto *n = tm_node(t, "Gemm", "/fc/Gemm", ins, "output");
  tm_attr_i(t, n, "transB", 1);
  tm_output(t, "output");
}

/* x [N, 2, 3] -> BatchNormalization bn1 -> bn2 -> y, at opset; bn1's
 * training_mode attribute is tm1 (-1: none), bn2's 0.  copies: bn1's
 * running statistics are Identity copies of its scale and bias, as torch
 * writes a fresh BatchNorm's in an eval export. */
static void bn_model(tm *t, int64_t opset, int tm1, int copies) {
  tm_init(t, opset);
  tm_input(t, "input", 3, (const int64_t[]){-1, 2, 3});
  tm_init_f(t, "bn1.weight", 1, (const int64_t[]){2}, k_ones);
  tm_init_f(t, "bn1.bias", 1, (const int64_t[]){2}, k_ones);
  if (copies) {
    tm_node(t, "Identity", "/Identity", "bn1.weight", "bn1.running_var");
    tm_node(t, "Identity", "/Identity_1", "bn1.bias", "bn1.running_mean");
  } else {
    tm_init_f(t, "bn1.running_mean", 1, (const int64_t[]){2}, k_ones);
    tm_init_f(t, "bn1.running_var", 1, (const int64_t[]){2}, k_ones);
  }
  static const char *const p2[] = {"bn2.weight", "bn2.bias", "bn2.running_mean",
                                   "bn2.running_var"};
  for (int i = 0; i < 4; i++) tm_init_f(t, p2[i], 1, (const int64_t[]){2}, k_ones);
  Onnx__NodeProto *n = tm_node(t, "BatchNormalization", "/bn1/BatchNormalization",
                               "input,bn1.weight,bn1.bias,bn1.running_mean,bn1.running_var", "h");
  if (tm1 >= 0) tm_attr_i(t, n, "training_mode", tm1);
  n = tm_node(t, "BatchNormalization", "/bn2/BatchNormalization",
              "h,bn2.weight,bn2.bias,bn2.running_mean,bn2.running_var", "output");
  if (opset >= 14) tm_attr_i(t, n, "training_mode", 0);
  tm_output(t, "output");
}

START_TEST(test_bn_eval) {
  tm t;
  bn_model(&t, 17, -1, 0); /* no attribute: ONNX's default 0 */
  load(&t, "bn_eval.onnx");
  tm_free(&t);
  ck_assert_int_eq(warnings(), 1);
  expect_in_log("bn_eval.onnx: node '/bn1/BatchNormalization' (BatchNormalization) and 1 more");
  expect_in_log("eval mode (training_mode 0)");
  expect_in_log("training=torch.onnx.TrainingMode.TRAINING");
  expect_in_log("Dropout");

  bn_model(&t, 14, -1, 1); /* the statistics merged into Identity copies */
  load(&t, "bn_copies.onnx");
  tm_free(&t);
  ck_assert_int_eq(warnings(), 1);
  expect_in_log("bn_copies.onnx: node '/bn1/BatchNormalization'");
  expect_in_log("running statistic 'bn1.running_mean' is computed by a node");
  expect_in_log("will never update");
  expect_in_log("training=torch.onnx.TrainingMode.TRAINING");

  bn_model(&t, 17, 1, 0); /* bn1 in training mode, bn2 not: bn2 named alone */
  load(&t, "bn_one.onnx");
  tm_free(&t);
  ck_assert_int_eq(warnings(), 1);
  expect_in_log("node '/bn2/BatchNormalization' (BatchNormalization) was exported in eval");

  bn_model(&t, 13, -1, 0); /* opset 13 has no training_mode: nothing to say */
  load(&t, "bn13.onnx");
  tm_free(&t);
  ck_assert_int_eq(warnings(), 0);
}
END_TEST

START_TEST(test_anonymous_initializers) {
  tm t;
  gemm_model(&t, "onnx::Gemm_22", "onnx::Gemm_23", 0);
  /* not a weight (int64), and not the pattern: neither counts */
  tm_init_f(&t, "onnx::weird", 1, (const int64_t[]){1}, k_ones);
  const int64_t shape[2] = {1, -1};
  t.inits[t.g.n_initializer++] =
      tm_tensor(&t, "onnx::Reshape_7", 7, 1, (const int64_t[]){2}, shape, sizeof shape);
  load(&t, "folded.onnx");
  tm_free(&t);
  ck_assert_int_eq(warnings(), 1);
  expect_in_log("folded.onnx: initializer 'onnx::Gemm_22' and 1 more such initializers");
  expect_in_log("cannot be loaded back into the PyTorch module by name");
  expect_in_log("do_constant_folding=False");
}
END_TEST

START_TEST(test_fixed_batch) {
  tm t;
  gemm_model(&t, "fc.weight", "fc.bias", 2);
  load(&t, "fixed.onnx");
  tm_free(&t);
  ck_assert_int_eq(warnings(), 1);
  expect_in_log("fixed.onnx: graph input 'input' has a fixed batch dimension of 2");
  expect_in_log("only that batch size");
  expect_in_log("dynamic_axes={'input': {0: 'batch'}}");
  gemm_model(&t, "fc.weight", "fc.bias", 1); /* batch 1 too: torch's usual dummy input */
  load(&t, "fixed1.onnx");
  tm_free(&t);
  ck_assert_int_eq(warnings(), 1);
  expect_in_log("fixed batch dimension of 1");
}
END_TEST

START_TEST(test_all_at_once) {
  tm t;
  gemm_model(&t, "onnx::Conv_16", "fc.bias", 4);
  load(&t, "eval_export.onnx");
  tm_free(&t);
  ck_assert_int_eq(warnings(), 2);
  expect_in_log("eval_export.onnx: initializer 'onnx::Conv_16' has an anonymous name");
  expect_in_log("eval_export.onnx: graph input 'input' has a fixed batch dimension of 4");
}
END_TEST

START_TEST(test_clean) {
  tm t;
  gemm_model(&t, "fc.weight", "fc.bias", 0);
  load(&t, "clean.onnx");
  tm_free(&t);
  ck_assert_msg(warnings() == 0, "%s", g_log);
  /* PyTorch's own training exports, as the fixtures hold them */
  static const char *const files[] = {"onnx/cnn_bn.onnx", "onnx/residual.onnx",
                                      "onnx/transformer.onnx", "ops/convt_unet.onnx"};
  const char *src = getenv("FL_SRCDIR");
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", src ? src : "..", files[i]);
    fl_graph *g = NULL;
    capture_begin();
    const fl_status st = fl_onnx_load(path, NULL, FL_GLOSS_MSE, &g);
    g_log = capture_end();
    ck_assert_msg(st == FL_OK, "%s: %d\n%s", path, st, g_log);
    ck_assert_msg(warnings() == 0, "%s:\n%s", path, g_log);
    fl_graph_free(g);
  }
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_WARN);
  Suite *s = suite_create("onnx_lint");
  TCase *tc = tcase_create("lint");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_bn_eval);
  tcase_add_test(tc, test_anonymous_initializers);
  tcase_add_test(tc, test_fixed_batch);
  tcase_add_test(tc, test_all_at_once);
  tcase_add_test(tc, test_clean);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
