/* test_coll_sync.c - collective mode's fl_sync (sync_collective.c) driven
 * directly, with real models, by forked ranks: rank 0's parameters reach
 * every rank (init_params); the ranks agree on the smallest step count;
 * metrics are summed; gradients come back averaged with fusion on and off,
 * with buckets posted early or late, with parameters never reported by
 * backward, and with bf16 on the wire; batch-norm running statistics are
 * broadcast from rank 0, or, under sync_batch_norm (where the model's
 * batch-norm hook keeps them equal; test_coll_syncbn.c), left alone; a
 * rank that is destroyed before finishing is named by the others as having
 * aborted. */
#include <config.h>

#include <check.h>
#include <math.h>

#include "coll_testutil.h"
#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_model.h"
#include "fl_sync_collective.h"

typedef struct opts {
  int fuse, layers;
  int compression; /* fl_grad_compression */
  int sync_bn;
  int cnn;
  int skip_report; /* do not call grad_ready for the first parameter */
  int abort_rank;  /* -1 = none */
} opts;

static fl_job g_job;
static char g_logs[CT_MAX_RANKS][256];

static fl_status make_sync(ct_job *j, int r, const opts *o, fl_sync *s) {
  fl_job_defaults(&g_job);
  g_job.cluster.mode = FL_MODE_COLLECTIVE;
  g_job.cluster.collective_timeout_s = 5;
  g_job.strategy.fuse_all_reduce_ops = o->fuse;
  g_job.strategy.fuse_grad_size_in_TFLOPS = o->layers;
  g_job.strategy.grad_compression = (fl_grad_compression)o->compression;
  g_job.strategy.sync_batch_norm = o->sync_bn;
  fl_cluster cl;
  fl_cluster_defaults(&cl);
  cl.mode = FL_MODE_COLLECTIVE;
  cl.trainer_id = r;
  cl.trainers_num = j->n;
  for (int q = 0; q < j->n; q++) cl.trainer_endpoints[q] = j->eps[q];
  cl.n_trainer_endpoints = j->n;
  snprintf(cl.token, sizeof cl.token, "sync-test");
  return fl_sync_collective_create(&g_job, &cl, s);
}

static fl_model *make_model(int r, int cnn) {
  fl_model_spec sp;
  fl_model_spec_defaults(&sp);
  if (cnn) {
    snprintf(sp.kind, sizeof sp.kind, "cnn");
    sp.in_height = sp.in_width = 8;
    sp.conv_channels[0] = 4;
    sp.conv_channels[1] = 4;
    sp.conv_kernel = 3;
    sp.fc_hidden = 0;
    snprintf(sp.norm, sizeof sp.norm, "bn");
  } else {
    sp.in_height = sp.in_width = 6;
    sp.hidden[0] = 12;
    sp.hidden[1] = 8;
    sp.n_hidden = 2;
  }
  fl_model *m = NULL;
  /* A different seed per rank: init_params must make them equal. */
  if (fl_model_create(&sp, 4, 100 + (uint64_t)r, &m) != FL_OK) return NULL;
  return m;
}

static int rank_main(ct_job *j, int r, void *arg) {
  const opts *o = arg;
  fl_sync s;
  if (make_sync(j, r, o, &s) != FL_OK) return 10;
  fl_model *m = make_model(r, o->cnn);
  if (!m) return 11;
  int rc = 0;
  size_t np = fl_model_num_params(m);
  /* init_params: everybody ends with rank 0's values (seed 100). */
  if (s.ops->init_params(s.self, m) != FL_OK) rc = 20;
  fl_model *ref = make_model(0, o->cnn);
  for (size_t i = 0; i < np && !rc; i++) {
    fl_param *a = fl_model_param(m, i), *b = fl_model_param(ref, i);
    if (memcmp(a->value, b->value, a->n * sizeof(float)) != 0) rc = 21;
  }
  fl_model_destroy(ref);
  /* agree_steps: rank r has 10 + r steps, all agree on 10. */
  int64_t g = 0;
  if (!rc && (s.ops->agree_steps(s.self, 10 + r, &g) != FL_OK || g != 10)) rc = 22;
  double v[2] = {1.5, (double)r};
  if (!rc && (s.ops->reduce_metrics(s.self, v, 2) != FL_OK || v[0] != 1.5 * j->n ||
              v[1] != j->n * (j->n - 1) / 2.0))
    rc = 23;
  if (!rc && s.ops->rank(s.self) != r) rc = 24;
  if (!rc && s.ops->world_size(s.self) != j->n) rc = 25;
  if (o->abort_rank >= 0) {
    if (r == o->abort_rank) {
      s.ops->destroy(s.self); /* not finished: the others must hear it */
    } else {
      double w[1] = {0};
      if (!rc) rc = s.ops->reduce_metrics(s.self, w, 1) != FL_OK ? 0 : 40;
      s.ops->destroy(s.self);
    }
    fl_model_destroy(m);
    return rc;
  }
  /* Two steps: grad of rank r = (r + 1) * (i + 1) * 0.25 for parameter i;
   * the mean over ranks is (n + 1) / 2 * (i + 1) * 0.25. */
  for (int step = 0; step < 2 && !rc; step++) {
    if (s.ops->step_begin(s.self, m, step) != FL_OK) {
      rc = 30;
      break;
    }
    for (size_t i = np; i-- > 0;) {
      fl_param *p = fl_model_param(m, i);
      if (!p->grad) {
        /* a buffer: rank-specific running statistics */
        for (size_t e = 0; e < p->n; e++) p->value[e] = (float)(r + 1);
        continue;
      }
      for (size_t e = 0; e < p->n; e++) p->grad[e] = (float)((r + 1) * (i + 1)) * 0.25f;
      if (!(o->skip_report && i == 0)) s.ops->grad_ready(s.self, m, i);
    }
    int apply = 0;
    fl_status st = s.ops->step_end(s.self, m, step, &apply);
    if (st != FL_OK || !apply) {
      rc = 31;
      break;
    }
    for (size_t i = 0; i < np && !rc; i++) {
      fl_param *p = fl_model_param(m, i);
      float want = p->grad ? (float)((j->n + 1) * (i + 1)) * 0.125f
                           : o->sync_bn ? (float)(r + 1) : 1.0f;
      const float *x = p->grad ? p->grad : p->value;
      for (size_t e = 0; e < p->n; e++) {
        float tol = o->compression ? fabsf(want) * 0.01f : 0.0f;
        if (fabsf(x[e] - want) > tol) {
          fprintf(stderr, "rank %d step %d: %s[%zu] = %g, want %g\n", r, step, p->name, e,
                  (double)x[e], (double)want);
          rc = 32;
          break;
        }
      }
    }
  }
  if (!rc && s.ops->finish(s.self) != FL_OK) rc = 33;
  s.ops->destroy(s.self);
  fl_model_destroy(m);
  return rc;
}

static void run(int n, opts *o) {
  const char *h[] = {"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1"};
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, n, h), 0);
  ct_job_release(&j); /* the sync binds the endpoints itself */
  for (int r = 0; r < n; r++)
    snprintf(g_logs[r], sizeof g_logs[r], "/tmp/fl_coll_sync_%d_%d.log", (int)getpid(), r);
  ct_spawn(&j, rank_main, o, NULL, g_logs);
  ct_wait(&j, 60);
  int named[CT_MAX_RANKS];
  for (int r = 0; r < n; r++) {
    char who[96];
    snprintf(who, sizeof who, "rank %d (127.0.0.1:%u) aborted: its training loop stopped",
             o->abort_rank, (unsigned)j.eps[o->abort_rank < 0 ? 0 : o->abort_rank].port);
    named[r] = o->abort_rank < 0 || r == o->abort_rank || ct_file_has(g_logs[r], who);
    unlink(g_logs[r]);
  }
  for (int r = 0; r < n; r++) {
    ck_assert_msg(j.status[r] == 0, "rank %d ended with %d", r, j.status[r]);
    ck_assert_msg(named[r], "rank %d does not name the aborted rank %d", r, o->abort_rank);
  }
}

START_TEST(fused_one_bucket) {
  opts o = {1, 50, 0, 0, 0, 0, -1};
  run(3, &o);
}
END_TEST

START_TEST(bucket_per_layer) {
  opts o = {1, 1, 0, 0, 0, 0, -1};
  run(2, &o);
}
END_TEST

START_TEST(no_fusion_missing_report) {
  opts o = {0, 50, 0, 0, 0, 1, -1};
  run(3, &o);
}
END_TEST

START_TEST(bf16_on_the_wire) {
  opts o = {1, 1, FL_COMPRESS_BF16, 0, 0, 0, -1};
  run(2, &o);
}
END_TEST

START_TEST(bn_buffers_from_rank_0) {
  opts o = {1, 50, 0, 0, 1, 0, -1};
  run(3, &o);
}
END_TEST

START_TEST(bn_buffers_left_under_sync_bn) {
  opts o = {1, 50, 0, 1, 1, 0, -1};
  run(3, &o);
}
END_TEST

START_TEST(unfinished_rank_aborts) {
  opts o = {1, 50, 0, 0, 0, 0, 1};
  run(3, &o);
}
END_TEST

int main(void) {
  Suite *s = suite_create("coll_sync");
  TCase *t = tcase_create("sync");
  tcase_set_timeout(t, 90);
  tcase_add_test(t, fused_one_bucket);
  tcase_add_test(t, bucket_per_layer);
  tcase_add_test(t, no_fusion_missing_report);
  tcase_add_test(t, bf16_on_the_wire);
  tcase_add_test(t, bn_buffers_from_rank_0);
  tcase_add_test(t, bn_buffers_left_under_sync_bn);
  tcase_add_test(t, unfinished_rank_aborts);
  suite_add_tcase(s, t);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
