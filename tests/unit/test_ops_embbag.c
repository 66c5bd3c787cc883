/* test_ops_embbag.c - the EmbeddingBag op (trainer/graph/ops_embbag.c) and
 * its import from PyTorch's nn.EmbeddingBag export (onnx_embbag.c).
 *
 * Op: forward against a naive double reference for every mode with fixed
 * bags, offsets (empty bags included), include_last_offset and per-sample
 * weights; backward against finite differences and the accumulate path;
 * the weight's gradient is a scatter-add (a row named twice gets both);
 * the refusals.  Import: every exported variant of
 * tests/fixtures/ops/embbag_*.onnx becomes one EmbeddingBag node and no
 * Loop; a Loop that is an embedding bag of another reduction, or mean with
 * per-sample weights, is refused naming the node and the mode. */
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
#include "graph_ops_harness.h"
#include "onnx.pb-c.h"

/* ------------------------------------------------------------ the op */

typedef struct ref_bags {
  const char *mode;
  const int64_t *off; /* NULL: fixed bags of `fixed` */
  int64_t n_off, fixed, bags, L;
  int last;
} ref_bags;

static void ref_bag(const ref_bags *r, int64_t b, int64_t *lo, int64_t *hi) {
  if (!r->off) {
    *lo = b * r->fixed;
    *hi = *lo + r->fixed;
    return;
  }
  *lo = r->off[b];
  *hi = b + 1 < r->n_off ? r->off[b + 1] : r->L;
}

/* out[b, d] by the definition, in double. */
static void reference(const ref_bags *r, const float *w, int64_t D, const int64_t *idx,
                      const float *psw, double *out) {
  for (int64_t b = 0; b < r->bags; b++) {
    int64_t lo, hi;
    ref_bag(r, b, &lo, &hi);
    for (int64_t d = 0; d < D; d++) {
      double acc = 0.0;
      for (int64_t j = lo; j < hi; j++) {
        const double v = w[idx[j] * D + d];
        if (!strcmp(r->mode, "max"))
          acc = j == lo || v > acc ? v : acc;
        else
          acc += (psw ? psw[j] : 1.0) * v;
      }
      if (!strcmp(r->mode, "mean") && hi > lo) acc /= (double)(hi - lo);
      out[b * D + d] = acc;
    }
  }
}

/* Build the node: weight [N, D], indices (rank 2 when r->off is NULL),
 * offsets, optional per-sample weights; check forward and backward. */
static void check_bags(const ref_bags *r, const int64_t *idx, int psw, const char *what) {
  harness h;
  uint64_t s = 99;
  const int64_t N = 7, D = 3, ws[] = {N, D};
  h_init(&h, "EmbeddingBag");
  h_f32(&h, "weight", 2, ws, &s, -1, 1, 0);
  if (r->off) {
    const int64_t is[] = {r->L}, os[] = {r->n_off};
    h_i64(&h, "indices", 1, is, idx);
    h_i64(&h, "offsets", 1, os, r->off);
  } else {
    const int64_t is[] = {r->bags, r->fixed};
    h_i64(&h, "indices", 2, is, idx);
  }
  if (psw) {
    if (!r->off) h_none(&h);
    const int64_t ps[] = {r->L};
    h_f32(&h, "psw", 1, ps, &s, -1, 1, 0);
  }
  h_as(&h, "mode", r->mode);
  if (r->last) h_ai(&h, "include_last_offset", 1);
  h_outs(&h, 1);
  h_ready(&h);
  const int64_t ys[] = {r->bags, D};
  h_expect_shape(&h, 0, 2, ys);
  h_fwd(&h);
  double want[64];
  reference(r, h_x(&h, 0)->data, D, idx, psw ? h_x(&h, 3)->data : NULL, want);
  expect_close(h_y(&h, 0)->data, want, (size_t)(r->bags * D), 1e-6, what);
  h_gradcheck(&h, what, 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
}

START_TEST(test_fixed_bags) {
  const int64_t idx[] = {0, 3, 3, 6, 1, 2, 5, 5, 4};
  static const char *const modes[] = {"sum", "mean", "max"};
  for (int m = 0; m < 3; m++) {
    const ref_bags r = {.mode = modes[m], .fixed = 3, .bags = 3, .L = 9};
    check_bags(&r, idx, 0, modes[m]);
  }
  const ref_bags r = {.mode = "sum", .fixed = 3, .bags = 3, .L = 9};
  check_bags(&r, idx, 1, "sum per_sample_weights, fixed bags");
}
END_TEST

START_TEST(test_offsets) {
  /* bags [0, 2), [2, 2) empty, [2, 5), [5, 6) */
  const int64_t idx[] = {1, 1, 4, 0, 6, 2}, off[] = {0, 2, 2, 5};
  static const char *const modes[] = {"sum", "mean", "max"};
  for (int m = 0; m < 3; m++) {
    const ref_bags r = {.mode = modes[m], .off = off, .n_off = 4, .bags = 4, .L = 6};
    check_bags(&r, idx, 0, modes[m]);
  }
  const ref_bags r = {.mode = "sum", .off = off, .n_off = 4, .bags = 4, .L = 6};
  check_bags(&r, idx, 1, "sum per_sample_weights, offsets");
  /* include_last_offset: 3 bags, entry 5 in none */
  const int64_t off2[] = {0, 2, 2, 5};
  const ref_bags rl = {.mode = "sum", .off = off2, .n_off = 4, .bags = 3, .L = 6, .last = 1};
  check_bags(&rl, idx, 1, "include_last_offset");
  const ref_bags rm = {.mode = "mean", .off = off2, .n_off = 4, .bags = 3, .L = 6, .last = 1};
  check_bags(&rm, idx, 0, "mean include_last_offset");
}
END_TEST

/* The weight's gradient is a scatter-add: a row named twice in one bag
 * and once in another gets all three shares; rows named by none get 0. */
START_TEST(test_scatter_add) {
  harness h;
  const int64_t ws[] = {4, 2}, is[] = {2, 2}, idx[] = {3, 3, 3, 1};
  h_init(&h, "EmbeddingBag");
  const int w = h_tensor(&h, "weight", FL_G_F32, 2, ws);
  h.in[h.node.n_in++] = w;
  h_i64(&h, "indices", 2, is, idx);
  h_as(&h, "mode", "mean");
  h_outs(&h, 1);
  h_ready(&h);
  h_x(&h, 0)->grad = calloc(8, sizeof(float));
  h_y(&h, 0)->grad = calloc(4, sizeof(float));
  const float dy[] = {1, 2, 10, 20};
  memcpy(h_y(&h, 0)->grad, dy, sizeof dy);
  h_fwd(&h);
  ck_assert_int_eq(h.node.op->backward(&h.node, &h.c, 0), FL_OK);
  const float want[] = {0, 0, 5, 10, 0, 0, 6, 12}; /* row 3: 1 + 5 and 2 + 10 */
  for (int k = 0; k < 8; k++) ck_assert_float_eq(h_x(&h, 0)->grad[k], want[k]);
  h_free(&h);
}
END_TEST

/* A node of weight [5, 2], 1-D indices and offsets, one attribute. */
static fl_status refused(const int64_t *idx, int64_t L, const int64_t *off, int64_t n_off,
                         const char *attr, const char *val, int psw) {
  harness h;
  uint64_t s = 5;
  const int64_t ws[] = {5, 2}, is[] = {L}, os[] = {n_off};
  h_init(&h, "EmbeddingBag");
  h_f32(&h, "weight", 2, ws, &s, -1, 1, 0);
  h_i64(&h, "indices", 1, is, idx);
  h_i64(&h, "offsets", 1, os, off);
  if (psw) h_f32(&h, "psw", 1, is, &s, -1, 1, 0);
  if (attr) h_as(&h, attr, val);
  h_outs(&h, 1);
  fl_status st = h_infer(&h);
  if (st == FL_OK) st = h.node.op->forward(&h.node, &h.c);
  h_free(&h);
  return st;
}

START_TEST(test_refusals) {
  const int64_t idx[] = {0, 1, 2, 4}, off[] = {0, 2}, bad_off[] = {1, 2}, down[] = {0, 3, 2},
                far[] = {0, 5}, bad_idx[] = {0, 5, 1, 1};
  ck_assert_int_eq(refused(idx, 4, off, 2, NULL, NULL, 0), FL_OK);
  ck_assert_int_eq(refused(idx, 4, off, 2, "mode", "min", 0), FL_ENOTSUP);
  ck_assert_int_eq(refused(idx, 4, off, 2, "mode", "mean", 1), FL_ENOTSUP);
  ck_assert_int_eq(refused(idx, 4, bad_off, 2, NULL, NULL, 0), FL_EINVAL);
  ck_assert_int_eq(refused(idx, 4, down, 3, NULL, NULL, 0), FL_EINVAL);
  ck_assert_int_eq(refused(idx, 4, far, 2, NULL, NULL, 0), FL_EINVAL);
  ck_assert_int_eq(refused(bad_idx, 4, off, 2, NULL, NULL, 0), FL_EINVAL);
  /* 2-D indices with offsets; 1-D without */
  harness h;
  uint64_t s = 5;
  const int64_t ws[] = {5, 2}, is2[] = {2, 2}, is1[] = {4}, os[] = {2};
  h_init(&h, "EmbeddingBag");
  h_f32(&h, "weight", 2, ws, &s, -1, 1, 0);
  h_i64(&h, "indices", 2, is2, idx);
  h_i64(&h, "offsets", 1, os, off);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  h_init(&h, "EmbeddingBag");
  h_f32(&h, "weight", 2, ws, &s, -1, 1, 0);
  h_i64(&h, "indices", 1, is1, idx);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* ------------------------------------------------------------ import */

static void fixture(char *out, size_t cap, const char *name) {
  const char *src = getenv("FL_SRCDIR");
  snprintf(out, cap, "%s/tests/fixtures/ops/%s.onnx", src ? src : "..", name);
}

/* Every exported variant: one EmbeddingBag node of the mode, no Loop;
 * fixed bags read the 2-D indices (no offsets), the others the starts
 * with include_last_offset. */
START_TEST(test_import_variants) {
  static const struct {
    const char *name, *mode;
    int n_in;
  } v[] = {{"embbag_sum_fixed", "sum", 2},     {"embbag_mean_fixed", "mean", 2},
           {"embbag_max_fixed", "max", 2},     {"embbag_psw_fixed", "sum", 4},
           {"embbag_sum_offsets", "sum", 3},   {"embbag_mean_offsets", "mean", 3},
           {"embbag_max_offsets", "max", 3},   {"embbag_psw_offsets", "sum", 4},
           {"embbag_last_offset", "mean", 3}};
  for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
    char p[512];
    fixture(p, sizeof p, v[k].name);
    fl_graph *g = NULL;
    ck_assert_int_eq(fl_onnx_load(p, NULL, FL_GLOSS_MSE, &g), FL_OK);
    int bags = 0;
    for (int i = 0; i < fl_graph_num_nodes(g); i++) {
      fl_gnode_info ni;
      ck_assert_int_eq(fl_graph_node_info(g, i, &ni), FL_OK);
      ck_assert_str_ne(ni.op_type, "Loop");
      if (strcmp(ni.op_type, "EmbeddingBag")) continue;
      bags++;
      ck_assert_int_eq(ni.n_in, v[k].n_in);
      ck_assert_int_eq(ni.n_attrs, v[k].n_in == 2 || !strcmp(v[k].name, "embbag_psw_fixed") ? 1 : 2);
      ck_assert_str_eq(ni.attrs[0].name, "mode");
      ck_assert_str_eq(ni.attrs[0].s, v[k].mode);
    }
    ck_assert_msg(bags == 1, "%s: %d EmbeddingBag nodes", v[k].name, bags);
    fl_graph_free(g);
  }
}
END_TEST

/* fl_onnx_load_mem of m; the error lines it logged into msg. */
static fl_status load_logged(Onnx__ModelProto *m, char *msg, size_t cap) {
  const size_t len = onnx__model_proto__get_packed_size(m);
  uint8_t *buf = malloc(len);
  onnx__model_proto__pack(m, buf);
  FILE *tmp = tmpfile();
  ck_assert_ptr_nonnull(tmp);
  const int saved = dup(STDERR_FILENO);
  dup2(fileno(tmp), STDERR_FILENO);
  fl_log_set_level(FL_LOG_ERROR);
  fl_graph *g = NULL;
  const fl_status st = fl_onnx_load_mem(buf, len, "m.onnx", NULL, FL_GLOSS_MSE, &g);
  fl_log_set_level(FL_LOG_OFF);
  dup2(saved, STDERR_FILENO);
  close(saved);
  rewind(tmp);
  msg[fread(msg, 1, cap - 1, tmp)] = '\0';
  fclose(tmp);
  fl_graph_free(g);
  free(buf);
  return st;
}

/* The fixture's model, unpacked (the caller frees it), and the node of its
 * Loop's body whose op type is op. */
static Onnx__ModelProto *body_node(const char *name, const char *op, Onnx__NodeProto **out) {
  char p[512];
  fixture(p, sizeof p, name);
  FILE *f = fopen(p, "rb");
  ck_assert_ptr_nonnull(f);
  static uint8_t buf[1 << 16];
  const size_t len = fread(buf, 1, sizeof buf, f);
  fclose(f);
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
  ck_assert_ptr_nonnull(m);
  *out = NULL;
  for (size_t i = 0; i < m->graph->n_node; i++) {
    const Onnx__NodeProto *n = m->graph->node[i];
    if (strcmp(n->op_type, "Loop")) continue;
    const Onnx__GraphProto *b = n->attribute[0]->g;
    for (size_t j = 0; j < b->n_node; j++)
      if (!strcmp(b->node[j]->op_type, op)) *out = b->node[j];
  }
  ck_assert_ptr_nonnull(*out);
  return m;
}

static void set_op(Onnx__NodeProto *n, const char *op) {
  free(n->op_type);
  n->op_type = strdup(op);
}

/* An embedding bag of another reduction, or mean with per-sample weights,
 * is refused naming the node and the mode; a Loop that is no embedding bag
 * meets the importer's control-flow refusal. */
START_TEST(test_import_refusals) {
  char msg[4096];
  Onnx__NodeProto *n;
  Onnx__ModelProto *m = body_node("embbag_sum_offsets", "ReduceSum", &n);
  set_op(n, "ReduceMin");
  ck_assert_int_eq(load_logged(m, msg, sizeof msg), FL_ENOTSUP);
  ck_assert_msg(strstr(msg, "(Loop)") && strstr(msg, "nn.EmbeddingBag") &&
                    strstr(msg, "ReduceMin") && strstr(msg, "mode sum"),
                "%s", msg);
  onnx__model_proto__free_unpacked(m, NULL);

  m = body_node("embbag_psw_offsets", "ReduceSum", &n);
  set_op(n, "ReduceMean");
  ck_assert_int_eq(load_logged(m, msg, sizeof msg), FL_ENOTSUP);
  ck_assert_msg(strstr(msg, "mode mean") && strstr(msg, "per_sample_weights"), "%s", msg);
  onnx__model_proto__free_unpacked(m, NULL);

  m = body_node("embbag_mean_offsets", "Slice", &n);
  set_op(n, "Expand");
  ck_assert_int_eq(load_logged(m, msg, sizeof msg), FL_ENOTSUP);
  ck_assert_msg(strstr(msg, "control flow"), "%s", msg);
  onnx__model_proto__free_unpacked(m, NULL);
}
END_TEST

/* A model trained with EmbeddingBag exports the source file's Loop with the
 * trained weight table, and that file imports again with the same table. */
START_TEST(test_export_round_trip) {
  char src[512], out[64];
  fixture(src, sizeof src, "embbag_psw_offsets");
  snprintf(out, sizeof out, "/tmp/fl_embbag_%d.onnx", (int)getpid());
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  snprintf(s.kind, sizeof s.kind, "onnx");
  snprintf(s.path, sizeof s.path, "%s", src);
  s.loss = FL_LOSS_MSE;
  fl_model *m = NULL;
  ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_OK);
  float x[12], t[8];
  for (int i = 0; i < 12; i++) x[i] = (float)((i * 5) % 12);
  for (int i = 0; i < 8; i++) t[i] = 0.1f * (float)i;
  ck_assert_int_eq(fl_model_train_stepf(m, x, t, 4, 1.0f, NULL, NULL, NULL), FL_OK);
  fl_param *w = NULL;
  for (size_t i = 0; i < fl_model_num_params(m); i++)
    if (!strcmp(fl_model_param(m, i)->name, "bag.weight")) w = fl_model_param(m, i);
  ck_assert_ptr_nonnull(w);
  for (size_t k = 0; k < w->n; k++) w->value[k] -= 0.5f * w->grad[k];
  ck_assert_int_eq(fl_onnx_export(src, fl_model_graph(m), out), FL_OK);
  fl_graph *g = NULL;
  ck_assert_int_eq(fl_onnx_load(out, NULL, FL_GLOSS_MSE, &g), FL_OK);
  size_t n = 0;
  const float *v = fl_graph_value(g, "bag.weight", &n);
  ck_assert_ptr_nonnull(v);
  ck_assert_uint_eq(n, w->n);
  ck_assert(memcmp(v, w->value, n * sizeof(float)) == 0);
  fl_graph_free(g);
  fl_model_destroy(m);
  unlink(out);
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF); /* the refusal tests log their errors */
  Suite *s = suite_create("ops_embbag");
  TCase *tc = tcase_create("op");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_fixed_bags);
  tcase_add_test(tc, test_offsets);
  tcase_add_test(tc, test_scatter_add);
  tcase_add_test(tc, test_refusals);
  suite_add_tcase(s, tc);
  TCase *ti = tcase_create("import");
  tcase_set_timeout(ti, 60);
  tcase_add_test(ti, test_import_variants);
  tcase_add_test(ti, test_import_refusals);
  tcase_add_test(ti, test_export_round_trip);
  suite_add_tcase(s, ti);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
