/* test_onnx_export.c - trained models out as ONNX and back in: train a few
 * steps, export, reload the file, and the evaluation is the same.
 *   - an imported model (the cnn_bn fixture, batch norm included): the
 *     file keeps every field of the source and only the trained
 *     initializers (running statistics too) change; reloaded, its eval is
 *     bitwise the trained model's;
 *   - the presets (logreg, mlp relu/tanh, cnn with bn): a ModelProto of
 *     opset 17 built from the graph, fused activations as their own nodes;
 *     reloaded through the importer, the eval agrees within float rounding;
 *   - what cannot be exported (GroupNormalization in opset 17, a source
 *     file that no longer matches the graph, an unwritable path) is refused
 *     with a message. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_graph_inspect.h"
#include "fl_log.h"
#include "fl_model.h"
#include "fl_onnx.h"
#include "onnx.pb-c.h"

static char g_dir[64];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_onnx_export_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

static void fixture(char *out, size_t cap, const char *file) {
  const char *src = getenv("FL_SRCDIR");
  snprintf(out, cap, "%s/tests/fixtures/onnx/%s", src ? src : "..", file);
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  ck_assert_int_eq(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* Deterministic inputs and labels. */
static void batch_data(float *x, int32_t *y, size_t n, size_t dim, int classes, uint64_t seed) {
  uint64_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n * dim; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
  }
  for (size_t i = 0; i < n; i++) y[i] = (int32_t)(i % (size_t)classes);
}

/* A few SGD steps on batches of n, then the eval of a fixed batch into *res. */
static void train_then_eval(fl_model *m, size_t n, int classes, fl_model_result *res) {
  const size_t dim = fl_model_input_size(m);
  float *x = malloc(n * dim * sizeof *x);
  int32_t *y = malloc(n * sizeof *y);
  for (int step = 0; step < 3; step++) {
    batch_data(x, y, n, dim, classes, 10 + (uint64_t)step);
    ck_assert_int_eq(fl_model_train_step(m, x, y, n, 1.0f, NULL, NULL, NULL), FL_OK);
    for (size_t i = 0; i < fl_model_num_params(m); i++) {
      fl_param *p = fl_model_param(m, i);
      if (!p->grad) continue;
      for (size_t k = 0; k < p->n; k++) p->value[k] -= 0.1f * p->grad[k];
    }
  }
  batch_data(x, y, n, dim, classes, 99);
  memset(res, 0, sizeof *res);
  ck_assert_int_eq(fl_model_eval(m, x, y, n, res), FL_OK);
  free(x);
  free(y);
}

static void eval_only(fl_model *m, size_t n, int classes, fl_model_result *res) {
  const size_t dim = fl_model_input_size(m);
  float *x = malloc(n * dim * sizeof *x);
  int32_t *y = malloc(n * sizeof *y);
  batch_data(x, y, n, dim, classes, 99);
  memset(res, 0, sizeof *res);
  ck_assert_int_eq(fl_model_eval(m, x, y, n, res), FL_OK);
  free(x);
  free(y);
}

static fl_model *onnx_model(const char *path, int classes, size_t max_batch) {
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  snprintf(s.kind, sizeof s.kind, "onnx");
  snprintf(s.path, sizeof s.path, "%s", path);
  s.num_classes = classes;
  fl_model *m = NULL;
  ck_assert_int_eq(fl_model_create(&s, max_batch, 1, &m), FL_OK);
  return m;
}

START_TEST(test_imported_round_trip) {
  char src[512], out[128];
  fixture(src, sizeof src, "cnn_bn.onnx");
  snprintf(out, sizeof out, "%s/trained.onnx", g_dir);
  fl_model *m = onnx_model(src, 4, 8);
  fl_model_result r1, r2;
  train_then_eval(m, 8, 4, &r1);
  ck_assert_int_eq(fl_onnx_export(src, fl_model_graph(m), out), FL_OK);

  /* the file: the source's fields, with the trained values */
  size_t la, lb;
  uint8_t *a = slurp(src, &la), *b = slurp(out, &lb);
  Onnx__ModelProto *ma = onnx__model_proto__unpack(NULL, la, a);
  Onnx__ModelProto *mb = onnx__model_proto__unpack(NULL, lb, b);
  ck_assert_ptr_nonnull(ma);
  ck_assert_ptr_nonnull(mb);
  ck_assert_str_eq(mb->producer_name, ma->producer_name);
  ck_assert_int_eq(mb->ir_version, ma->ir_version);
  ck_assert_uint_eq(mb->n_opset_import, ma->n_opset_import);
  ck_assert_int_eq(mb->opset_import[0]->version, ma->opset_import[0]->version);
  ck_assert_uint_eq(mb->graph->n_node, ma->graph->n_node);
  for (size_t i = 0; i < ma->graph->n_node; i++) {
    ck_assert_str_eq(mb->graph->node[i]->op_type, ma->graph->node[i]->op_type);
    ck_assert_str_eq(mb->graph->node[i]->name, ma->graph->node[i]->name);
    ck_assert_uint_eq(mb->graph->node[i]->n_attribute, ma->graph->node[i]->n_attribute);
  }
  ck_assert_uint_eq(mb->graph->n_initializer, ma->graph->n_initializer);
  size_t changed = 0, bufs = 0;
  for (size_t i = 0; i < mb->graph->n_initializer; i++) {
    const Onnx__TensorProto *t = mb->graph->initializer[i];
    ck_assert_str_eq(t->name, ma->graph->initializer[i]->name);
    size_t n = 0;
    const float *v = fl_graph_value(fl_model_graph(m), t->name, &n);
    if (!v) continue;
    ck_assert(t->has_raw_data);
    ck_assert_uint_eq(t->raw_data.len, n * sizeof(float));
    ck_assert(memcmp(t->raw_data.data, v, n * sizeof(float)) == 0);
    const Onnx__TensorProto *o = ma->graph->initializer[i];
    changed += o->raw_data.len != t->raw_data.len ||
               memcmp(o->raw_data.data, t->raw_data.data, t->raw_data.len) != 0;
    bufs += strstr(t->name, "running_") != NULL;
  }
  ck_assert_uint_eq(bufs, 4); /* bn1/bn2 running mean and var */
  ck_assert_uint_ge(changed, 13);
  onnx__model_proto__free_unpacked(ma, NULL);
  onnx__model_proto__free_unpacked(mb, NULL);
  free(a);
  free(b);

  /* reloaded: the same evaluation, bit for bit */
  fl_model *m2 = onnx_model(out, 4, 8);
  eval_only(m2, 8, 4, &r2);
  ck_assert_msg(r1.loss_sum == r2.loss_sum, "loss %.9g, reloaded %.9g", r1.loss_sum, r2.loss_sum);
  ck_assert_uint_eq(r1.correct1, r2.correct1);
  ck_assert_uint_eq(r1.count, r2.count);
  fl_model_destroy(m2);
  fl_model_destroy(m);
}
END_TEST

/* The presets export as fresh opset-17 models that the importer reads back
 * into a graph with the same evaluation. */
START_TEST(test_preset_round_trip) {
  static const struct {
    const char *kind, *act, *norm;
  } cases[] = {{"logreg", "relu", ""}, {"mlp", "relu", ""}, {"mlp", "tanh", ""},
               {"cnn", "relu", "bn"}, {"cnn", "tanh", ""}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    fl_model_spec s;
    fl_model_spec_defaults(&s);
    snprintf(s.kind, sizeof s.kind, "%s", cases[c].kind);
    snprintf(s.activation, sizeof s.activation, "%s", cases[c].act);
    snprintf(s.norm, sizeof s.norm, "%s", cases[c].norm);
    s.in_channels = 1, s.in_height = 8, s.in_width = 8;
    s.num_classes = 4;
    s.hidden[0] = 16, s.hidden[1] = 8, s.n_hidden = 2;
    s.conv_channels[0] = 4, s.conv_channels[1] = 8, s.conv_kernel = 3, s.fc_hidden = 12;
    fl_model *m = NULL;
    ck_assert_int_eq(fl_model_create(&s, 8, 7, &m), FL_OK);
    fl_model_result r1, r2;
    train_then_eval(m, 8, 4, &r1);
    char out[128];
    snprintf(out, sizeof out, "%s/%s_%s_%s.onnx", g_dir, cases[c].kind, cases[c].act,
             cases[c].norm);
    ck_assert_int_eq(fl_onnx_export(NULL, fl_model_graph(m), out), FL_OK);

    fl_model *m2 = onnx_model(out, 4, 8);
    /* same parameter names, shapes and values, in the same order */
    ck_assert_uint_eq(fl_model_num_params(m2), fl_model_num_params(m));
    for (size_t i = 0; i < fl_model_num_params(m); i++) {
      fl_param *p = fl_model_param(m, i), *q = fl_model_param(m2, i);
      ck_assert_str_eq(q->name, p->name);
      ck_assert_uint_eq(q->n, p->n);
      ck_assert(memcmp(q->value, p->value, p->n * sizeof(float)) == 0);
      ck_assert((q->grad == NULL) == (p->grad == NULL));
    }
    eval_only(m2, 8, 4, &r2);
    const double tol = 1e-5 * fmax(1.0, fabs(r1.loss_sum));
    ck_assert_msg(fabs(r1.loss_sum - r2.loss_sum) <= tol, "%s %s %s: loss %.9g, reloaded %.9g",
                  cases[c].kind, cases[c].act, cases[c].norm, r1.loss_sum, r2.loss_sum);
    ck_assert_uint_eq(r1.correct1, r2.correct1);

    /* the file: opset 17, a symbolic batch, no engine-internal attribute */
    size_t len;
    uint8_t *b = slurp(out, &len);
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, b);
    ck_assert_ptr_nonnull(mp);
    ck_assert_int_eq(mp->opset_import[0]->version, 17);
    ck_assert_uint_eq(mp->graph->n_input, 1);
    ck_assert_str_eq(mp->graph->input[0]->type->tensor_type->shape->dim[0]->dim_param, "batch");
    for (size_t i = 0; i < mp->graph->n_node; i++)
      for (size_t k = 0; k < mp->graph->node[i]->n_attribute; k++)
        ck_assert(strncmp(mp->graph->node[i]->attribute[k]->name, "flotilla_", 9) != 0);
    onnx__model_proto__free_unpacked(mp, NULL);
    free(b);
    fl_model_destroy(m2);
    fl_model_destroy(m);
  }
}
END_TEST

/* Log capture: stderr into a file of g_dir. */
static char *capture(int begin) {
  static int saved = -1;
  static char buf[8192];
  char path[128];
  snprintf(path, sizeof path, "%s/stderr", g_dir);
  fflush(stderr);
  if (begin) {
    FILE *f = fopen(path, "w");
    saved = dup(2);
    dup2(fileno(f), 2);
    fclose(f);
    return NULL;
  }
  dup2(saved, 2);
  close(saved);
  FILE *f = fopen(path, "rb");
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

START_TEST(test_refusals) {
  /* GroupNormalization needs opset 18 */
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  snprintf(s.kind, sizeof s.kind, "cnn");
  snprintf(s.norm, sizeof s.norm, "gn");
  s.in_channels = 1, s.in_height = 8, s.in_width = 8, s.num_classes = 4;
  s.conv_channels[0] = 4, s.conv_channels[1] = 8, s.gn_groups = 2, s.conv_kernel = 3;
  fl_model *m = NULL;
  ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_OK);
  char out[128];
  snprintf(out, sizeof out, "%s/gn.onnx", g_dir);
  capture(1);
  fl_status st = fl_onnx_export(NULL, fl_model_graph(m), out);
  char *log = capture(0);
  ck_assert_int_eq(st, FL_ENOTSUP);
  ck_assert_msg(strstr(log, "is a GroupNormalization, which ONNX has only from opset 18; the "
                            "exporter writes opset 17") && strstr(log, "model.norm bn or none"),
                "%s", log);
  ck_assert_int_ne(access(out, F_OK), 0);
  fl_model_destroy(m);

  /* a source that no longer holds the trained initializers */
  char src[512];
  fixture(src, sizeof src, "cnn_bn.onnx");
  m = onnx_model(src, 4, 4);
  char mlp[512];
  fixture(mlp, sizeof mlp, "mlp.onnx");
  capture(1);
  st = fl_onnx_export(mlp, fl_model_graph(m), out);
  log = capture(0);
  ck_assert_int_eq(st, FL_EINVAL);
  ck_assert_msg(strstr(log, "was the file changed since training?"), "%s", log);
  ck_assert_int_ne(access(out, F_OK), 0);

  /* an output directory that does not exist; the temporary file is gone */
  snprintf(out, sizeof out, "%s/no/such/dir.onnx", g_dir);
  capture(1);
  st = fl_onnx_export(src, fl_model_graph(m), out);
  log = capture(0);
  ck_assert_int_eq(st, FL_EIO);
  ck_assert_msg(strstr(log, out), "%s", log);
  fl_model_destroy(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_export");
  TCase *tc = tcase_create("export");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_imported_round_trip);
  tcase_add_test(tc, test_preset_round_trip);
  tcase_add_test(tc, test_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
