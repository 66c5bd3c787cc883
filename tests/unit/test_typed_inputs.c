/* test_typed_inputs.c - typed, named inputs and labels of any shape:
 * the engine with an int64 input set per step (Gather of token ids, a
 * 0/1 mask cast to float) and per-token labels with ignore_index (loss
 * against a reference computed here, parameter gradients against finite
 * differences, refusals of a wrong feed); the data layer (several .npy
 * inputs loaded, converted per dtype and shuffled together, mismatched
 * counts, the uint8-into-Cast refusal). */
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
#include "gradcheck.h"

#define NB 3 /* samples */
#define L 4  /* tokens per sample */
#define V 7  /* vocabulary */
#define D 3  /* embedding width */
#define C 6  /* classes */
#define IGN (-100)

/* out[b, l, :] = (emb[ids[b, l]] * float(mask[b, l])) W + bias: a token
 * classifier over an int64 id input and an int64 0/1 mask input. */
static void *build_token_model(uint64_t seed) {
  fl_graph *g;
  uint64_t s = seed;
  float emb[V * D], w[D * C], b[C];
  gc_fill(emb, V * D, &s, -1.0, 1.0);
  gc_fill(w, D * C, &s, -1.0, 1.0);
  gc_fill(b, C, &s, -0.3, 0.3);
  ck_assert_int_eq(fl_graph_new("tokens", &g), FL_OK);
  const int64_t xd[2] = {FL_G_BATCH, L}, ed[2] = {V, D}, wd[2] = {D, C}, bd[1] = {C}, ad[1] = {1};
  const int64_t axes[1] = {2};
  int ids, mask, E, W, Bi, ax, e, mf, mu, em, mm, out;
  ck_assert_int_eq(fl_graph_input_typed(g, "ids", FL_G_I64, 2, xd, &ids), FL_OK);
  ck_assert_int_eq(fl_graph_input_typed(g, "mask", FL_G_I64, 2, xd, &mask), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "emb.weight", 2, ed, emb, 1, &E), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "fc.weight", 2, wd, w, 1, &W), FL_OK);
  ck_assert_int_eq(fl_graph_param(g, "fc.bias", 1, bd, b, 1, &Bi), FL_OK);
  ck_assert_int_eq(fl_graph_const(g, "axes", FL_G_I64, 1, ad, axes, &ax), FL_OK);
  const fl_gattr to_float = {.name = "to", .kind = FL_GA_INT, .i = FL_G_F32};
  ck_assert_int_eq(fl_graph_node(g, "gather", "Gather", (int[]){E, ids}, 2,
                                 (const char *[]){"e"}, 1, NULL, 0, &e), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "cast", "Cast", (int[]){mask}, 1, (const char *[]){"mf"}, 1,
                                 &to_float, 1, &mf), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "unsq", "Unsqueeze", (int[]){mf, ax}, 2,
                                 (const char *[]){"mu"}, 1, NULL, 0, &mu), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "mul", "Mul", (int[]){e, mu}, 2, (const char *[]){"em"}, 1,
                                 NULL, 0, &em), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "mm", "MatMul", (int[]){em, W}, 2, (const char *[]){"mm"}, 1,
                                 NULL, 0, &mm), FL_OK);
  ck_assert_int_eq(fl_graph_node(g, "add", "Add", (int[]){mm, Bi}, 2, (const char *[]){"out"}, 1,
                                 NULL, 0, &out), FL_OK);
  ck_assert_int_eq(fl_graph_set_output(g, out, FL_GLOSS_SOFTMAX_XENT), FL_OK);
  fl_graph_options opt = {.max_batch = NB, .seed = 1, .device = -1};
  void *h;
  ck_assert_int_eq(fl_graph_model_create(g, &opt, &h), FL_OK);
  return h;
}

static fl_param *param(void *h, const char *name) {
  for (size_t i = 0; i < fl_graph_model_ops.num_params(h); i++) {
    fl_param *p = fl_graph_model_ops.param(h, i);
    if (!strcmp(p->name, name)) return p;
  }
  ck_abort_msg("no parameter %s", name);
  return NULL;
}

/* The reference: mean over non-ignored tokens of the cross-entropy. */
static double ref_loss(void *h, const int64_t *ids, const int64_t *mask, const int32_t *y,
                       size_t *count) {
  const float *E = param(h, "emb.weight")->value, *W = param(h, "fc.weight")->value,
              *b = param(h, "fc.bias")->value;
  double sum = 0.0;
  *count = 0;
  for (int r = 0; r < NB * L; r++) {
    if (y[r] == IGN) continue;
    double z[C], mx = -1e300, se = 0.0;
    for (int c = 0; c < C; c++) {
      z[c] = b[c];
      for (int d = 0; d < D; d++) z[c] += (double)E[ids[r] * D + d] * (double)mask[r] * W[d * C + c];
      if (z[c] > mx) mx = z[c];
    }
    for (int c = 0; c < C; c++) se += exp(z[c] - mx);
    sum += mx + log(se) - z[y[r]];
    (*count)++;
  }
  return sum / (double)*count;
}

typedef struct fd_ctx {
  void *h;
  fl_model_feed f;
} fd_ctx;

static double eval_loss(void *p) {
  fd_ctx *c = p;
  fl_model_result r;
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(c->h, &c->f, NB, &r), FL_OK);
  return r.loss_sum / (double)r.count;
}

START_TEST(int64_input_per_step_and_token_loss) {
  void *h = build_token_model(11);
  int64_t ids[NB * L] = {0, 1, 2, 3, 4, 5, 6, 0, 1, 1, 2, 6};
  int64_t mask[NB * L] = {1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1};
  int32_t y[NB * L] = {0, 5, IGN, 1, 2, 3, IGN, IGN, 4, 0, 1, 2};
  fl_model_input in[2] = {{.name = "mask", .dtype = FL_MODEL_I64, .data = mask},
                          {.name = "ids", .dtype = FL_MODEL_I64, .data = ids}};
  fd_ctx c = {.h = h, .f = {.inputs = in, .n_inputs = 2, .y = y, .ylen = L,
                            .ignore_index = IGN}};
  size_t count;
  fl_model_result r;
  for (int pass = 0; pass < 2; pass++) { /* new ids each step: never known at bind */
    ck_assert_int_eq(fl_graph_model_ops.train_feed(h, &c.f, NB, 1.0f, NULL, NULL, &r), FL_OK);
    const double ref = ref_loss(h, ids, mask, y, &count);
    ck_assert_uint_eq(r.count, count);
    ck_assert_msg(fabs(r.loss_sum / (double)r.count - ref) < 1e-5, "loss %g, reference %g",
                  r.loss_sum / (double)r.count, ref);
    for (int i = 0; i < NB * L; i++) ids[i] = (ids[i] * 3 + 2) % V;
  }
  /* gradients of every parameter against finite differences of eval */
  static const char *const names[] = {"emb.weight", "fc.weight", "fc.bias"};
  ck_assert_int_eq(fl_graph_model_ops.train_feed(h, &c.f, NB, 1.0f, NULL, NULL, &r), FL_OK);
  for (int k = 0; k < 3; k++) {
    fl_param *p = param(h, names[k]);
    float *an = malloc(p->n * sizeof *an);
    memcpy(an, p->grad, p->n * sizeof *an);
    const gc_result g = gc_check(p->value, p->n, an, eval_loss, &c, 1e-3, 1e-4, 2e-2);
    ck_assert_msg(g.worst <= 1.0 && g.num_norm > 0, "%s: element %zu analytic %g numeric %g",
                  names[k], g.worst_i, g.worst_a, g.worst_n);
    free(an);
  }
  fl_graph_model_ops.destroy(h);
}
END_TEST

START_TEST(feed_refusals) {
  void *h = build_token_model(3);
  int64_t ids[NB * L] = {0}, mask[NB * L] = {0};
  float fmask[NB * L] = {0};
  int32_t y[NB * L] = {0};
  fl_model_result r;
  fl_model_input in[3] = {{.name = "ids", .dtype = FL_MODEL_I64, .data = ids},
                          {.name = "mask", .dtype = FL_MODEL_I64, .data = mask},
                          {.name = "extra", .dtype = FL_MODEL_I64, .data = mask}};
  fl_model_feed f = {.inputs = in, .n_inputs = 1, .y = y, .ylen = L, .ignore_index = IGN};
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL); /* mask missing */
  f.n_inputs = 3;
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL); /* extra unknown */
  f.n_inputs = 2;
  in[1] = (fl_model_input){.name = "mask", .dtype = FL_MODEL_F32, .data = fmask};
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL); /* wrong dtype */
  in[1] = (fl_model_input){.name = "mask", .dtype = FL_MODEL_I64, .data = mask};
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_OK);
  y[5] = C; /* out of range and not ignore_index */
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL);
  y[5] = 0;
  f.ylen = 1; /* [N] labels against an [N, L, C] output */
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_OK); /* the whole output */
  y[0] = IGN;
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL);
  ids[0] = V; /* an id past the table */
  f.ylen = L;
  ck_assert_int_eq(fl_graph_model_ops.eval_feed(h, &f, NB, &r), FL_EINVAL);
  /* the one-float-input calls name the inputs to feed */
  float x[NB * L] = {0};
  ck_assert_int_eq(fl_graph_model_ops.eval(h, x, y, NB, &r), FL_EINVAL);
  fl_graph_model_ops.destroy(h);
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF);
  Suite *s = suite_create("typed_inputs");
  TCase *tc = tcase_create("engine");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, int64_input_per_step_and_token_loss);
  tcase_add_test(tc, feed_refusals);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  const int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
