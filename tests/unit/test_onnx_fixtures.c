/* test_onnx_fixtures.c - imported ONNX models against PyTorch: every model
 * of tests/fixtures/onnx (MLP, CNN with batch norm, a residual block, a
 * Transformer block, an embedding MLP; see its README), and every one-op
 * case of tests/fixtures/ops (each <name>.case there, written by its
 * gen_ops.py), is loaded by the importer, compiled by the engine, and one step on the committed batch is
 * compared with what PyTorch computed for it: the eval-mode output (batch
 * norm on the file's running statistics), the loss, the gradient of every
 * trainable initializer, the batch-norm running statistics after the step,
 * and the train-mode output (and that each reference file was compared).
 * Recompute with segments bounded by ONNX value names gives the same bits
 * on the residual and Transformer fixtures.  Each tensor must agree within
 * 1e-5 of its largest magnitude, plus 1e-7 for tensors that are zero up to
 * rounding
 * (a conv bias before batch norm has gradient 0: both sides hold float32
 * noise of ~1e-8 there).  No Python runs here: the .npy files are
 * committed. */
#include <config.h>

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_config.h"
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

/* The folder of the fixture being compared: "onnx" (models) or "ops". */
static const char *g_dir = "onnx";

static void path_of(char *out, size_t cap, const char *model, const char *what) {
  const char *src = getenv("FL_SRCDIR");
  snprintf(out, cap, "%s/tests/fixtures/%s/%s.%s", src ? src : "..", g_dir, model, what);
}

/* The one-op cases: names of tests/fixtures/ops/<name>.case, sorted, and
 * the loss each names. */
#define MAX_OP_CASES 256
static char *g_cases[MAX_OP_CASES];
static fl_gloss g_case_loss[MAX_OP_CASES];
static int g_ncases;

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Fill g_cases from the folder; exits the program on a case file it cannot
 * read (a broken fixture must fail, not vanish). */
static void scan_op_cases(void) {
  const char *src = getenv("FL_SRCDIR");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/tests/fixtures/ops", src ? src : "..");
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d)) != NULL && g_ncases < MAX_OP_CASES;) {
    const size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".case") != 0) continue;
    g_cases[g_ncases++] = strndup(e->d_name, len - 5);
  }
  closedir(d);
  qsort(g_cases, (size_t)g_ncases, sizeof g_cases[0], cmp_names);
  for (int i = 0; i < g_ncases; i++) {
    char p[768], kind[64] = "";
    snprintf(p, sizeof p, "%s/%s.case", dir, g_cases[i]);
    FILE *f = fopen(p, "r");
    const int loss =
        f && fscanf(f, "loss %63s", kind) == 1 ? fl_names_find(fl_loss_names, kind) : -1;
    if (loss < 0) {
      fprintf(stderr, "%s: want one line 'loss KIND' (KIND one of fl_loss_names)\n", p);
      exit(1);
    }
    g_case_loss[i] = (fl_gloss)loss;
    fclose(f);
  }
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

/* The fixture's grad.* and buf.* reference files. */
static void count_refs(const char *model, size_t *grads, size_t *bufs) {
  char dir[512], g[160], b[160];
  path_of(dir, sizeof dir, "", "");
  char *slash = strrchr(dir, '/');
  ck_assert_ptr_nonnull(slash);
  *slash = '\0';
  snprintf(g, sizeof g, "%s.grad.", model);
  snprintf(b, sizeof b, "%s.buf.", model);
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot list %s", dir);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    const size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 4, ".npy") != 0) continue;
    *grads += strncmp(e->d_name, g, strlen(g)) == 0;
    *bufs += strncmp(e->d_name, b, strlen(b)) == 0;
  }
  closedir(d);
}

/* One fixture of g_dir: eval output, one train step's loss, gradients and
 * buffers, then the train-mode output. */
static void run_fixture(const char *name, fl_gloss lossk) {
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
  /* every reference file was compared: one per trainable initializer and
   * batch-norm statistic PyTorch has */
  size_t want_grads = 0, want_bufs = 0;
  count_refs(name, &want_grads, &want_bufs);
  ck_assert_msg(grads == want_grads, "%s: %zu gradients compared, PyTorch has %zu", name, grads,
                want_grads);
  ck_assert_msg(bufs == want_bufs, "%s: %zu buffers compared, PyTorch has %zu", name, bufs,
                want_bufs);
  if (!strcmp(name, "cnn_bn")) ck_assert_uint_eq(bufs, 4);

  /* train mode: batch statistics (parameters are unchanged: no optimizer) */
  ck_assert_int_eq(fl_graph_model_forward(h, x, B, 1, &out), FL_OK);
  compare(name, "out", out, nout);

  ops->destroy(h);
  fl_npy_close(fx);
  fl_npy_close(fy);
}

START_TEST(test_fixture) {
  g_dir = "onnx";
  run_fixture(k_fixtures[_i].name, k_fixtures[_i].loss);
}
END_TEST

START_TEST(test_op_case) {
  g_dir = "ops";
  run_fixture(g_cases[_i], g_case_loss[_i]);
}
END_TEST

/* Recompute with segments bounded by ONNX value names: one train step on
 * the committed batch gives the loss, every gradient and the batch-norm
 * statistics of the plain run bit for bit, and the plan holds less. */
static const struct {
  const char *name;
  fl_gloss loss;
  const char *ck[3];
} k_recompute[] = {
    {"residual", FL_GLOSS_MSE, {"/Relu_output_0", "/Relu_2_output_0", "/Relu_4_output_0"}},
    {"transformer", FL_GLOSS_SOFTMAX_XENT,
     {"/Add_output_0", "/Softmax_output_0", "/Transpose_3_output_0"}},
};

static void *compile_fixture(const char *name, fl_gloss loss, size_t B, const char *const *ck) {
  char p[512];
  path_of(p, sizeof p, name, "onnx");
  fl_graph *g = NULL;
  ck_assert_int_eq(fl_onnx_load(p, NULL, loss, &g), FL_OK);
  fl_graph_options opt = {.max_batch = B, .seed = 1, .device = -1, .recompute = ck != NULL,
                          .checkpoints = ck, .n_checkpoints = ck ? 3 : 0};
  void *h = NULL;
  ck_assert_int_eq(fl_graph_model_create(g, &opt, &h), FL_OK);
  return h;
}

START_TEST(test_recompute_by_onnx_names) {
  g_dir = "onnx";
  const char *name = k_recompute[_i].name;
  const fl_gloss lossk = k_recompute[_i].loss;
  fl_npy *fx = npy(name, "x"), *fy = npy(name, "y");
  const size_t B = (size_t)fl_npy_shape(fx)[0];
  const fl_model_ops *ops = &fl_graph_model_ops;
  void *h[2] = {compile_fixture(name, lossk, B, NULL),
                compile_fixture(name, lossk, B, k_recompute[_i].ck)};
  ck_assert_uint_lt(ops->activation_bytes(h[1]), ops->activation_bytes(h[0]));
  fl_model_result r[2];
  int32_t y[64];
  ck_assert_uint_le(B, 64);
  for (int k = 0; k < 2; k++) {
    memset(&r[k], 0, sizeof r[k]);
    if (lossk == FL_GLOSS_SOFTMAX_XENT) {
      const int64_t *y64 = fl_npy_data(fy);
      for (size_t i = 0; i < B; i++) y[i] = (int32_t)y64[i];
      ck_assert_int_eq(ops->train_step(h[k], fl_npy_data(fx), y, B, 1.0f, NULL, NULL, &r[k]),
                       FL_OK);
    } else {
      ck_assert_int_eq(fl_graph_model_train_stepf(h[k], fl_npy_data(fx), fl_npy_data(fy), B, 1.0f,
                                                  NULL, NULL, &r[k]), FL_OK);
    }
  }
  ck_assert(memcmp(&r[0].loss_sum, &r[1].loss_sum, sizeof r[0].loss_sum) == 0);
  ck_assert_uint_eq(ops->num_params(h[0]), ops->num_params(h[1]));
  for (size_t i = 0; i < ops->num_params(h[0]); i++) {
    const fl_param *a = ops->param(h[0], i), *b = ops->param(h[1], i);
    ck_assert_str_eq(a->name, b->name);
    ck_assert_msg(memcmp(a->value, b->value, a->n * sizeof(float)) == 0, "%s: %s differs", name,
                  a->name);
    if (a->grad)
      ck_assert_msg(memcmp(a->grad, b->grad, a->n * sizeof(float)) == 0,
                    "%s: gradient of %s differs with recompute", name, a->name);
  }
  ops->destroy(h[0]);
  ops->destroy(h[1]);
  fl_npy_close(fx);
  fl_npy_close(fy);
}
END_TEST

int main(void) {
  scan_op_cases();
  Suite *s = suite_create("onnx_fixtures");
  TCase *tc = tcase_create("pytorch");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_fixture, 0, (int)(sizeof k_fixtures / sizeof k_fixtures[0]));
  tcase_add_loop_test(tc, test_recompute_by_onnx_names, 0,
                      (int)(sizeof k_recompute / sizeof k_recompute[0]));
  suite_add_tcase(s, tc);
  TCase *to = tcase_create("ops");
  tcase_set_timeout(to, 120);
  tcase_add_loop_test(to, test_op_case, 0, g_ncases);
  suite_add_tcase(s, to);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  for (int i = 0; i < g_ncases; i++) free(g_cases[i]);
  return failed ? 1 : 0;
}
