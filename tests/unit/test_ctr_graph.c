/* test_ctr_graph.c - the CTR model's graph (fl_ctr_graph, model_ctr.c) run
 * by the engine without pservers: its logits and loss against a direct
 * double-precision reference of wide & deep, and every gradient the
 * engine derives (the rows inputs' and the dense parameters') against
 * central finite differences of the engine's mean loss, on a feed with a
 * row named twice in a sample and by two samples, a slot beyond the
 * pooled ones (wide only) and an empty sample; then the refusals (rows or
 * feed not handed, entries out of range, unknown names, a gpu graph); and
 * the ctr model as the loop builds it: an eval micro-batch of its whole
 * max_batch (above the training batch) in either slot. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_config.h"
#include "fl_graph.h"
#include "fl_log.h"
#include "fl_ps_client.h"
#include "fl_sparse_model.h"
#include "fl_trainer.h"
#include "gradcheck.h"
#include "model_internal.h"

#define S 3
#define D 2
#define HID 4
#define R 6 /* row 5 is never named */
#define NB 4

static const int64_t hidden[1] = {HID};
static const fl_ctr_shape shape = {.slots = S, .dim = D, .hidden = hidden, .n_hidden = 1,
                                   .rows = R, .max_batch = NB, .seed = 11};

/* Sample 0 names row 0 twice (slot 0), sample 1 has slot 3 (>= S: wide
 * only), sample 2 is empty, sample 3 names rows 0 and 1 again. */
static const fl_graph_sparse_entry entries[] = {
    {0, 0, 0, 1.0f}, {0, 1, 1, 0.5f}, {0, 0, 0, 2.0f}, {1, 2, 2, 1.5f},
    {1, 3, 3, -1.0f}, {3, 1, 0, 1.0f}, {3, 2, 4, 0.7f}, {3, 0, 1, -0.5f}};
#define NE (sizeof entries / sizeof entries[0])
static const float targets[NB] = {1, 0, 1, 0};

typedef struct fixture {
  void *h;
  float wide[R], emb[R * D];
  const float *gw, *ge;
} fixture;

static void setup(fixture *f) {
  uint64_t s = 5;
  ck_assert_int_eq(fl_ctr_graph(&shape, &f->h), FL_OK);
  gc_fill(f->wide, R, &s, -0.5, 0.5);
  gc_fill(f->emb, R * D, &s, -1.0, 1.0);
  ck_assert_int_eq(fl_graph_model_set_rows(f->h, FL_CTR_WIDE_ROWS, f->wide, &f->gw), FL_OK);
  ck_assert_int_eq(fl_graph_model_set_rows(f->h, FL_CTR_EMB_ROWS, f->emb, &f->ge), FL_OK);
  const fl_graph_sparse_feed fd = {entries, NE};
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(f->h, FL_CTR_WIDE_NODE, &fd), FL_OK);
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(f->h, FL_CTR_POOL_NODE, &fd), FL_OK);
  /* non-zero biases, so their paths count */
  for (size_t p = 0; p < fl_graph_model_ops.num_params(f->h); p++) {
    fl_param *q = fl_graph_model_ops.param(f->h, p);
    if (q->ndim == 1) gc_fill(q->value, q->n, &s, -0.3, 0.3);
  }
}

static const float *pv(fixture *f, size_t p) { return fl_graph_model_ops.param(f->h, p)->value; }

/* The logits by hand: bias + sum v w[r] + MLP(per-slot sums of v e[r]). */
static void reference(fixture *f, double *logit) {
  for (size_t i = 0; i < NB; i++) {
    double x[S * D] = {0}, h[HID], z = pv(f, 0)[0];
    for (size_t k = 0; k < NE; k++) {
      const fl_graph_sparse_entry *e = &entries[k];
      if (e->sample != i) continue;
      z += (double)e->value * f->wide[e->row];
      for (size_t d = 0; e->slot < S && d < D; d++)
        x[e->slot * D + d] += (double)e->value * f->emb[e->row * D + d];
    }
    for (size_t j = 0; j < HID; j++) {
      double a = pv(f, 2)[j];
      for (size_t k = 0; k < S * D; k++) a += (double)pv(f, 1)[j * S * D + k] * x[k];
      h[j] = a > 0 ? a : 0;
    }
    double o = pv(f, 4)[0];
    for (size_t j = 0; j < HID; j++) o += (double)pv(f, 3)[j] * h[j];
    logit[i] = z + o;
  }
}

/* The engine's mean loss (what train_stepf differentiates at scale 1). */
static double mean_loss(void *ctx) {
  fixture *f = ctx;
  fl_model_result r;
  ck_assert_int_eq(fl_graph_model_evalf(f->h, NULL, targets, NB, &r), FL_OK);
  return r.loss_sum / NB;
}

START_TEST(test_forward_matches_reference) {
  fixture f;
  setup(&f);
  static const char *const names[] = {"ctr.bias", "ctr.fc0.weight", "ctr.fc0.bias",
                                      "ctr.fc1.weight", "ctr.fc1.bias"};
  ck_assert_uint_eq(fl_graph_model_ops.num_params(f.h), 5);
  for (size_t p = 0; p < 5; p++)
    ck_assert_str_eq(fl_graph_model_ops.param(f.h, p)->name, names[p]);
  double want[NB], loss = 0;
  reference(&f, want);
  fl_model_result r;
  ck_assert_int_eq(fl_graph_model_evalf(f.h, NULL, targets, NB, &r), FL_OK);
  const float *got = fl_graph_model_output(f.h);
  for (size_t i = 0; i < NB; i++) {
    ck_assert_msg(fabs(got[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])), "logit %zu: %g, want %g",
                  i, (double)got[i], want[i]);
    const double m = want[i] > 0 ? want[i] : 0;
    loss += m - targets[i] * want[i] + log(exp(-m) + exp(want[i] - m));
  }
  ck_assert_msg(fabs(r.loss_sum - loss) <= 1e-5 * (1 + loss), "loss %g, want %g", r.loss_sum,
                loss);
  fl_graph_model_ops.destroy(f.h);
}
END_TEST

START_TEST(test_gradients_match_finite_differences) {
  fixture f;
  setup(&f);
  fl_model_result r;
  ck_assert_int_eq(fl_graph_model_train_stepf(f.h, NULL, targets, NB, 1.0f, NULL, NULL, &r), FL_OK);
  float gw[R], ge[R * D];
  memcpy(gw, f.gw, sizeof gw);
  memcpy(ge, f.ge, sizeof ge);
  /* row 5 is named by no entry; row 3 only in slot 3, which the pool skips */
  ck_assert_float_eq(gw[5], 0.0f);
  ck_assert(gw[3] != 0.0f);
  for (size_t d = 0; d < D; d++) {
    ck_assert_float_eq(ge[5 * D + d], 0.0f);
    ck_assert_float_eq(ge[3 * D + d], 0.0f);
  }
  gc_result g = gc_check(f.wide, R, gw, mean_loss, &f, 1e-3, 1e-5, 1e-3);
  GC_ASSERT("wide rows", g);
  g = gc_check_kinked(f.emb, R * D, ge, mean_loss, &f, 1e-3, 1e-5, 1e-3);
  GC_ASSERT("embedding rows", g);
  ck_assert_uint_le(g.skipped, 2);
  for (size_t p = 0; p < fl_graph_model_ops.num_params(f.h); p++) {
    fl_param *q = fl_graph_model_ops.param(f.h, p);
    float *an = malloc(q->n * sizeof *an);
    memcpy(an, q->grad, q->n * sizeof *an);
    g = gc_check_kinked(q->value, q->n, an, mean_loss, &f, 1e-3, 1e-5, 1e-3);
    ck_assert_msg(g.worst <= 1.0, "%s: gradient mismatch at %zu: %g vs %g", q->name, g.worst_i,
                  g.worst_a, g.worst_n);
    ck_assert_uint_le(g.skipped, q->n / 4);
    free(an);
  }
  fl_graph_model_ops.destroy(f.h);
}
END_TEST

START_TEST(test_refusals) {
  void *h;
  fl_model_result r;
  float rows[R * D] = {0};
  const fl_ctr_shape none = {.slots = S, .dim = D, .rows = 0, .max_batch = NB};
  ck_assert_int_eq(fl_ctr_graph(&none, &h), FL_EINVAL);
  ck_assert_int_eq(fl_ctr_graph(&shape, &h), FL_OK);
  /* rows not handed, then no feed */
  ck_assert_int_eq(fl_graph_model_evalf(h, NULL, targets, NB, &r), FL_ESTATE);
  ck_assert_int_eq(fl_graph_model_set_rows(h, FL_CTR_WIDE_ROWS, rows, NULL), FL_OK);
  ck_assert_int_eq(fl_graph_model_set_rows(h, FL_CTR_EMB_ROWS, rows, NULL), FL_OK);
  ck_assert_int_eq(fl_graph_model_evalf(h, NULL, targets, NB, &r), FL_ESTATE);
  ck_assert_int_eq(fl_graph_model_set_rows(h, "nope", rows, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_graph_model_set_rows(h, "ctr.bias", rows, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_graph_model_set_rows(h, FL_CTR_EMB_ROWS, NULL, NULL), FL_EINVAL);
  /* feeds: unknown node, a node that reads none, entries out of range */
  const fl_graph_sparse_entry bad_row = {0, 0, R, 1.0f}, bad_sample = {NB, 0, 0, 1.0f};
  fl_graph_sparse_feed fd = {&bad_row, 1};
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(h, "nope", &fd), FL_EINVAL);
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(h, "ctr.fc0", &fd), FL_EINVAL);
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(h, FL_CTR_WIDE_NODE, &fd), FL_OK);
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(h, FL_CTR_POOL_NODE, &fd), FL_OK);
  ck_assert_int_eq(fl_graph_model_evalf(h, NULL, targets, NB, &r), FL_EINVAL);
  fd.e = &bad_sample;
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(h, FL_CTR_WIDE_NODE, &fd), FL_OK);
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(h, FL_CTR_POOL_NODE, &fd), FL_OK);
  ck_assert_int_eq(fl_graph_model_train_stepf(h, NULL, targets, NB, 1.0f, NULL, NULL, &r),
                   FL_EINVAL);
  /* an empty feed is a batch of empty samples: the logits are the biases */
  fd.n = 0;
  fd.e = NULL;
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(h, FL_CTR_WIDE_NODE, &fd), FL_OK);
  ck_assert_int_eq(fl_graph_model_set_sparse_feed(h, FL_CTR_POOL_NODE, &fd), FL_OK);
  ck_assert_int_eq(fl_graph_model_evalf(h, NULL, targets, NB, &r), FL_OK);
  fl_graph_model_ops.destroy(h);
}
END_TEST

START_TEST(test_rows_graph_is_host_only) {
  fl_graph *g;
  int rows, y;
  const fl_gattr all = {.name = "mode", .kind = FL_GA_STRING, .s = "all"};
  const char *out[1] = {"y"};
  ck_assert_int_eq(fl_graph_new("rows", &g), FL_OK);
  ck_assert_int_eq(fl_graph_rows(g, "r", 4, 1, &rows), FL_OK);
  ck_assert_int_eq(fl_graph_rows(g, "r", 4, 1, &rows), FL_EINVAL); /* a name twice */
  ck_assert_int_eq(fl_graph_rows(g, "r0", 0, 1, &rows), FL_EINVAL);
  ck_assert_int_eq(fl_graph_node(g, "pool", "EmbeddingBagSum", &rows, 1, out, 1, &all, 1, &y),
                   FL_OK);
  ck_assert_int_eq(fl_graph_set_output(g, y, FL_GLOSS_BCE_LOGITS), FL_OK);
  fl_graph_options o = {.max_batch = 2, .device = 0};
  void *h;
  ck_assert_int_eq(fl_graph_model_create(g, &o, &h), FL_ENOTSUP);
}
END_TEST

/* The model takes one float target per sample (its one logit), whatever
 * the job's num_classes 2 says: an eval of max_batch samples reads
 * max_batch targets from each slot's buffers. */
START_TEST(test_model_eval_at_max_batch) {
  fl_job job;
  fl_sparse_dataset train = {0};
  fl_model_spec spec;
  const char *names[FL_TRAINER_SPEC_NAMES];
  fl_model *m = NULL;
  enum { MAXB = 24 };
  fl_job_defaults(&job);
  snprintf(job.model.kind, sizeof job.model.kind, "ctr");
  job.model.num_classes = 2;
  job.model.n_hidden = 1;
  job.model.hidden[0] = 4;
  job.model.ctr.embedding_dim = 2;
  job.model.ctr.sparse_slots = 3;
  job.model.ctr.hash_buckets = 997;
  const fl_synth_ctr_config cfg = {.n = 40, .num_slots = 3, .signal_slots = 2, .vocab = 50,
                                   .weight_scale = 1.0f, .bias = -1.0f, .seed = 3};
  ck_assert_int_eq(fl_synth_ctr(&cfg, 0, &train), FL_OK);
  fl_trainer_model_spec(&job, -1, names, &spec);
  const fl_model_build_args a = {.job = &job, .spec = &spec, .max_batch = MAXB, .seed = 1,
                                 .train = &train, .test = NULL};
  ck_assert_int_eq(fl_model_build(&a, &m), FL_OK);
  ck_assert_int_eq(fl_model_get_spec(m)->num_classes, 1);
  void *self;
  const fl_sparse_hooks *h = fl_model_sparse(m, &self);
  ck_assert_ptr_nonnull(h);
  for (unsigned slot = 0; slot < FL_SPARSE_SLOTS; slot++) {
    const size_t off = slot * (train.n - MAXB);
    const fl_batch b = {.size = MAXB,
                        .sparse = {train.labels + off, train.offsets + off, train.feats}};
    fl_sparse_need need[2];
    fl_model_result r;
    ck_assert_int_eq(h->prepare(self, slot, &b, MAXB, need), FL_OK);
    ck_assert_int_eq(fl_model_eval_sparse(m, slot, MAXB, &r), FL_OK);
    ck_assert(isfinite(r.loss_sum));
    const float *logit = h->scores(self);
    for (size_t i = 0; i < MAXB; i++) ck_assert(isfinite(logit[i]));
  }
  fl_model_destroy(m);
  fl_sparse_dataset_free(&train);
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_ERROR); /* the refusals' messages stay in the log */
  Suite *s = suite_create("ctr_graph");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_forward_matches_reference);
  tcase_add_test(tc, test_gradients_match_finite_differences);
  tcase_add_test(tc, test_refusals);
  tcase_add_test(tc, test_rows_graph_is_host_only);
  tcase_add_test(tc, test_model_eval_at_max_batch);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
