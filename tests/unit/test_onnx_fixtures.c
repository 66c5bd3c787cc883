/* test_onnx_fixtures.c - imported ONNX models against PyTorch: every model
 * of tests/fixtures/onnx (MLP, CNN with batch norm, a residual block, a
 * Transformer block, an embedding MLP; see its README) is loaded by the
 * importer, compiled by the engine, and one step on the committed batch is
 * compared with what PyTorch computed for it: the eval-mode output (batch
 * norm on the file's running statistics), the loss, the gradient of every
 * trainable initializer, the batch-norm running statistics after the step,
 * and the train-mode output.  Each tensor must agree within 1e-5 of its
 * largest magnitude, plus 1e-7 for tensors that are zero up to rounding
 * (a conv bias before batch norm has gradient 0: both sides hold float32
 * noise of ~1e-8 there).  No Python runs here: the .npy files are
 * committed. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_data.h"
#include "fl_graph.h"
#include "fl_log.h"
#include "fl_onnx.h"

#define RTOL 1e-5
#define ATOL 1e-7

static const struct {
  const char *name;
  fl_gloss loss;
} k_fixtures[] = {
    {"mlp", FL_GLOSS_SOFTMAX_XENT},   {"cnn_bn", FL_GLOSS_SOFTMAX_XENT},
    {"residual", FL_GLOSS_MSE},       {"transformer", FL_GLOSS_SOFTMAX_XENT},
    {"embedding_mlp", FL_GLOSS_BCE_LOGITS},
};

static void path_of(char *out, size_t cap, const char *model, const char *what) {
  const char *src = getenv("FL_SRCDIR");
  snprintf(out, cap, "%s/tests/fixtures/onnx/%s.%s", src ? src : "..", model, what);
}

/* The .npy <model>.<what>.npy (must exist, float32 unless int64 labels). */
static fl_npy *npy(const char *model, const char *what) {
  char p[512], w[256];
  snprintf(w, sizeof w, "%s.npy", what);
  path_of(p, sizeof p, model, w);
  fl_npy *f = NULL;
  ck_assert_msg(fl_npy_open(p, &f) == FL_OK, "cannot read %s", p);
  return f;
}

/* a (n floats) against the reference file: max |a - ref| <= RTOL * max|ref|
 * + ATOL (and the same number of elements). */
static void compare(const char *model, const char *what, const float *a, size_t n) {
  fl_npy *f = npy(model, what);
  ck_assert_msg(fl_npy_dtype_of(f) == FL_NPY_F32, "%s.%s: not float32", model, what);
  ck_assert_msg(fl_npy_count(f) == n, "%s.%s: %zu elements, flotilla has %zu", model, what,
                fl_npy_count(f), n);
  const float *r = fl_npy_data(f);
  double scale = 0, err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < n; i++) {
    scale = fmax(scale, fabs((double)r[i]));
    double e = fabs((double)a[i] - (double)r[i]);
    if (e > err) err = e, worst = i;
  }
  ck_assert_msg(isfinite(err) && err <= RTOL * scale + ATOL,
                "%s.%s: element %zu is %.9g, PyTorch %.9g (max error %.3g, scale %.3g)", model,
                what, worst, n ? (double)a[worst] : 0.0, n ? (double)r[worst] : 0.0, err, scale);
  fl_npy_close(f);
}

START_TEST(test_fixture) {
  const char *name = k_fixtures[_i].name;
  const fl_gloss lossk = k_fixtures[_i].loss;
  char p[512];
  path_of(p, sizeof p, name, "onnx");
  fl_graph *g = NULL;
  ck_assert_int_eq(fl_onnx_load(p, NULL, lossk, &g), FL_OK);

  fl_npy *fx = npy(name, "x"), *fy = npy(name, "y");
  const size_t B = (size_t)fl_npy_shape(fx)[0];
  const float *x = fl_npy_data(fx);
  fl_graph_options opt = {.max_batch = B, .seed = 1, .device = -1};
  void *h = NULL;
  ck_assert_int_eq(fl_graph_model_create(g, &opt, &h), FL_OK);
  const fl_model_ops *ops = &fl_graph_model_ops;

  /* eval mode: the file's running statistics */
  fl_npy *fo = npy(name, "eval_out");
  const size_t nout = fl_npy_count(fo);
  fl_npy_close(fo);
  const float *out = NULL;
  ck_assert_int_eq(fl_graph_model_forward(h, x, B, 0, &out), FL_OK);
  compare(name, "eval_out", out, nout);

  /* one train step: loss, gradients, running statistics */
  fl_model_result res;
  memset(&res, 0, sizeof res);
  if (lossk == FL_GLOSS_SOFTMAX_XENT) {
    ck_assert_int_eq(fl_npy_dtype_of(fy), FL_NPY_I64);
    const int64_t *y64 = fl_npy_data(fy);
    int32_t *y = malloc(B * sizeof *y);
    for (size_t i = 0; i < B; i++) y[i] = (int32_t)y64[i];
    ck_assert_int_eq(ops->train_step(h, x, y, B, 1.0f, NULL, NULL, &res), FL_OK);
    free(y);
  } else {
    ck_assert_int_eq(fl_npy_dtype_of(fy), FL_NPY_F32);
    ck_assert_int_eq(fl_graph_model_train_stepf(h, x, fl_npy_data(fy), B, 1.0f, NULL, NULL, &res),
                     FL_OK);
  }
  const float mean = (float)(res.loss_sum / (double)res.count);
  compare(name, "loss", &mean, 1);
  size_t grads = 0, bufs = 0;
  for (size_t i = 0; i < ops->num_params(h); i++) {
    const fl_param *q = ops->param(h, i);
    char what[128];
    snprintf(what, sizeof what, "%s.%s", q->grad ? "grad" : "buf", q->name);
    if (q->grad) {
      compare(name, what, q->grad, q->n);
      grads++;
    } else {
      compare(name, what, q->value, q->n);
      bufs++;
    }
  }
  ck_assert_uint_gt(grads, 0);
  if (!strcmp(name, "cnn_bn")) ck_assert_uint_eq(bufs, 4);

  /* train mode: batch statistics (parameters are unchanged: no optimizer) */
  ck_assert_int_eq(fl_graph_model_forward(h, x, B, 1, &out), FL_OK);
  compare(name, "out", out, nout);

  ops->destroy(h);
  fl_npy_close(fx);
  fl_npy_close(fy);
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_fixtures");
  TCase *tc = tcase_create("pytorch");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_fixture, 0, (int)(sizeof k_fixtures / sizeof k_fixtures[0]));
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
