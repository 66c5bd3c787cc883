/* test_graph_sparse.c - an initializer made a sparse table
 * (fl_graph_sparse_table): the ids computed in the graph (ids % V) are
 * evaluated before the step, and a step on the pulled rows gives the loss
 * and, row by row, the gradient of the same graph with the dense table,
 * whether the ranks of the ids found before the step are handed to it or
 * not (or wrong ones, which it sees and ignores); readers other than Gather axis 0 / EmbeddingBag are refused. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fl_graph.h"

#define B 2
#define L 3
#define V 5
#define D 2

static const float table[V * D] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f, 0.9f, 1.0f};
static const int64_t ids_in[B * L] = {7, 2, 12, 3, 3, 9}; /* % 5: 2 2 2 3 3 4 */

/* ids [B, L] -> Mod 5 -> Gather(emb) -> Flatten -> mse. */
static fl_graph *build(void) {
  fl_graph *g = NULL;
  const int64_t in_dims[2] = {FL_G_BATCH, L}, t_dims[2] = {V, D}, v = V;
  int ids, emb, vc, m, e, y;
  ck_assert_int_eq(fl_graph_new("sparse", &g), FL_OK);
  ck_assert_int_eq(fl_graph_input_typed(g, "ids", FL_G_I64, 2, in_dims, &ids), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "emb", 2, t_dims, table, 1, &emb), FL_OK);
  ck_assert_int_eq(fl_graph_const(g, "v", FL_G_I64, 0, NULL, &v, &vc), FL_OK);
  const int mi[2] = {ids, vc};
  const char *mo[1] = {"mod"}, *go[1] = {"gathered"}, *fo[1] = {"flat"};
  ck_assert_int_eq(fl_graph_node(g, "mod", "Mod", mi, 2, mo, 1, NULL, 0, &m), FL_OK);
  const int gin[2] = {emb, m};
  ck_assert_int_eq(fl_graph_node(g, "gather", "Gather", gin, 2, go, 1, NULL, 0, &e), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "flat", "Flatten", &e, 1, fo, 1, NULL, 0, &y), FL_OK);
  ck_assert_int_eq(fl_graph_set_output(g, y, FL_GLOSS_MSE), FL_OK);
  return g;
}

static void *compile(fl_graph *g) {
  fl_graph_options o;
  memset(&o, 0, sizeof o);
  o.max_batch = B;
  o.device = -1;
  void *h = NULL;
  ck_assert_int_eq(fl_graph_model_create(g, &o, &h), FL_OK);
  return h;
}

static float targets[B * L * D];

static fl_model_feed feed(fl_model_input *in) {
  *in = (fl_model_input){.name = "ids", .dtype = FL_MODEL_I64, .data = ids_in};
  return (fl_model_feed){.inputs = in, .n_inputs = 1, .ylen = 1, .t = targets};
}

START_TEST(test_rows_match_dense) {
  for (int i = 0; i < B * L * D; i++) targets[i] = 0.05f * (float)i;
  fl_model_input in;
  fl_model_feed f = feed(&in);
  fl_model_result dres, sres;
  void *dense = compile(build());
  ck_assert_int_eq(fl_graph_model_ops.train_feed(dense, &f, B, 1.0f, NULL, NULL, &dres), FL_OK);
  const fl_param *p = fl_graph_model_ops.param(dense, 0);

  fl_graph *g = build();
  int64_t width = 0, rows = 0;
  float *init = NULL;
  ck_assert_int_eq(fl_graph_sparse_table(g, "emb", B * L, &width, &init, &rows), FL_OK);
  ck_assert_int_eq(width, D);
  ck_assert_int_eq(rows, V);
  ck_assert(!memcmp(init, table, sizeof table));
  void *sp = compile(g);
  int64_t *ids = NULL;
  size_t cap = 0, n = 0;
  ck_assert_int_eq(fl_graph_model_table_ids(sp, "emb", &f, B, &ids, &cap, &n), FL_OK);
  ck_assert_uint_eq(n, B * L);
  int64_t tmp[3 * B * L], rank[B * L], fed[B * L];
  memcpy(fed, ids, sizeof fed);
  const size_t nu = fl_graph_unique_ids(ids, rank, tmp, n);
  ck_assert_uint_eq(nu, 3); /* 2 3 4 */
  for (size_t i = 0; i < n; i++) ck_assert_int_eq(ids[rank[i]], fed[i]);
  float pulled[B * L * D] = {0};
  for (size_t r = 0; r < nu; r++) memcpy(pulled + r * D, init + ids[r] * D, D * sizeof(float));
  const float *grad = NULL;
  ck_assert_int_eq(fl_graph_model_set_rows(sp, "emb", pulled, &grad), FL_OK);
  /* the ranks found here, none (the node sorts), and ranks of other ids
   * (the node sees they are not its ids' and sorts): the same step */
  const int64_t wrong[B * L] = {0, 1, 2, 0, 1, 2};
  for (int run = 0; run < 3; run++) {
    if (run != 1)
      ck_assert_int_eq(fl_graph_model_set_ranks(sp, "emb", ids, nu, run ? wrong : rank, n),
                       FL_OK);
    ck_assert_int_eq(fl_graph_model_ops.train_feed(sp, &f, B, 1.0f, NULL, NULL, &sres), FL_OK);
    ck_assert(fabs(sres.loss_sum - dres.loss_sum) < 1e-6);
    for (size_t r = 0; r < nu; r++)
      for (int d = 0; d < D; d++)
        ck_assert(fabsf(grad[r * D + d] - p->grad[ids[r] * D + d]) < 1e-6f);
  }
  ck_assert_int_eq(fl_graph_model_set_ranks(sp, "nothing", ids, nu, rank, n), FL_EINVAL);
  free(ids);
  free(init);
  fl_graph_model_ops.destroy(sp);
  fl_graph_model_ops.destroy(dense);
}
END_TEST

START_TEST(test_refuses_other_readers) {
  fl_graph *g = build();
  const int emb = fl_graph_find(g, "emb");
  const char *o[1] = {"t"};
  int y;
  ck_assert_int_eq(fl_graph_node(g, "trans", "Transpose", &emb, 1, o, 1, NULL, 0, &y), FL_OK);
  int64_t width, rows;
  float *init = NULL;
  ck_assert_int_eq(fl_graph_sparse_table(g, "emb", B * L, &width, &init, &rows), FL_ENOTSUP);
  ck_assert_int_eq(fl_graph_sparse_table(g, "nothing", B * L, &width, &init, &rows), FL_EINVAL);
  fl_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("graph_sparse");
  TCase *tc = tcase_create("graph_sparse");
  tcase_add_test(tc, test_rows_match_dense);
  tcase_add_test(tc, test_refuses_other_readers);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
