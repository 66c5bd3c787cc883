/* test_loop_valid.c - the validation rules of the training loop
 * (trainer/loop_valid.c) and their use by fl_trainer_run: early stopping
 * on scripted metric sequences, each metric's direction, the held-out
 * share of validation_split, the batch-norm statistics averaged over a
 * (fake) second rank, and small local jobs: the split is deterministic
 * and shortens the epoch, best.flc holds the best validation's step,
 * early stopping ends the run at the right validation, a resumed run
 * keeps the best, reduce-on-plateau follows the validation; the job
 * file's keys and their refusals. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_ckpt.h"
#include "fl_config.h"
#include "fl_trainer.h"
#include "loop_internal.h"

/* --------------------------------------------------------------- tracker */

START_TEST(early_stopping_scripted_min) {
  /* min_delta 0.01, patience 2: 0.95 is worse, 0.895 better by only 0.005 */
  const double seq[] = {1.0, 0.9, 0.95, 0.895, 0.5};
  const int improved[] = {1, 1, 0, 0};
  fl_val_tracker t;
  fl_val_tracker_init(&t, FL_VAL_LOSS, 0.01, 2);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(fl_val_tracker_stop(&t), 0);
    ck_assert_int_eq(fl_val_tracker_observe(&t, seq[i], 10 * (i + 1)), improved[i]);
  }
  ck_assert_int_eq(fl_val_tracker_stop(&t), 1); /* after the 4th validation */
  ck_assert_double_eq(t.best, 0.9);
  ck_assert_int_eq(t.best_step, 20);
}
END_TEST

START_TEST(early_stopping_scripted_max) {
  /* accuracy: NaN never improves, an equal value neither (min_delta 0) */
  fl_val_tracker t;
  fl_val_tracker_init(&t, FL_VAL_ACC1, 0.0, 3);
  ck_assert_int_eq(fl_val_tracker_observe(&t, 0.5, 1), 1);
  ck_assert_int_eq(fl_val_tracker_observe(&t, 0.6, 2), 1);
  ck_assert_int_eq(fl_val_tracker_observe(&t, NAN, 3), 0);
  ck_assert_int_eq(fl_val_tracker_observe(&t, 0.6, 4), 0);
  ck_assert_int_eq(fl_val_tracker_observe(&t, 0.61, 5), 1);
  ck_assert_int_eq(fl_val_tracker_stop(&t), 0);
  for (int i = 0; i < 3; i++) fl_val_tracker_observe(&t, 0.3, 6 + i);
  ck_assert_int_eq(fl_val_tracker_stop(&t), 1);
  ck_assert_int_eq(t.best_step, 5);
  /* no metric: never stops */
  fl_val_tracker_init(&t, FL_VAL_NONE, 0.0, 1);
  fl_val_tracker_observe(&t, NAN, 1);
  fl_val_tracker_observe(&t, NAN, 2);
  ck_assert_int_eq(fl_val_tracker_stop(&t), 0);
}
END_TEST

START_TEST(metric_directions) {
  const int max[FL_VAL_COUNT] = {[FL_VAL_ACC1] = 1, [FL_VAL_ACC5] = 1, [FL_VAL_AUC] = 1,
                                 [FL_VAL_R2] = 1};
  for (int m = 0; m < FL_VAL_COUNT; m++)
    ck_assert_msg(fl_val_maximize((fl_val_metric)m) == max[m], "%s", fl_val_metric_names[m]);
  ck_assert_str_eq(fl_val_metric_names[FL_VAL_AUC], "val_auc");
}
END_TEST

START_TEST(metric_values) {
  double v[FL_VAL_COUNT];
  fl_model_result cls = {.loss_sum = 8.0, .correct1 = 3, .correct5 = 4, .count = 4};
  fl_val_values(&cls, NULL, v);
  ck_assert_double_eq(v[FL_VAL_LOSS], 2.0);
  ck_assert_double_eq(v[FL_VAL_ACC1], 0.75);
  ck_assert(isnan(v[FL_VAL_AUC]) && isnan(v[FL_VAL_MSE]));
  fl_auc_result auc = {.auc = 0.8, .logloss = 0.4, .n = 4, .positives = 2};
  fl_val_values(&cls, &auc, v);
  ck_assert_double_eq(v[FL_VAL_AUC], 0.8);
  ck_assert_double_eq(v[FL_VAL_LOGLOSS], 0.4);
  ck_assert(isnan(v[FL_VAL_ACC1])); /* binary: auc in place of acc1 */
  /* regression: targets 1, 2, 3 (mean 2, variance 2/3), mse 0.5 */
  fl_model_result reg = {.loss_sum = 1.5, .count = 3, .values = 3, .abs_err = 1.5,
                         .t_sum = 6, .t_sq = 14};
  fl_val_values(&reg, NULL, v);
  ck_assert_double_eq_tol(v[FL_VAL_R2], 1.0 - 0.5 / (2.0 / 3.0), 1e-12);
  ck_assert_double_eq(v[FL_VAL_MAE], 0.5);
  ck_assert(isnan(v[FL_VAL_ACC1]));
}
END_TEST

START_TEST(split_count) {
  size_t h = 0;
  ck_assert_int_eq(fl_val_split_count(10, 0.25, "<t>", &h), FL_OK);
  ck_assert_uint_eq(h, 2);
  ck_assert_int_eq(fl_val_split_count(400, 0.25, "<t>", &h), FL_OK);
  ck_assert_uint_eq(h, 100);
  ck_assert_int_eq(fl_val_split_count(3, 0.2, "<t>", &h), FL_EINVAL);
  ck_assert_int_eq(fl_val_split_count(1, 0.99, "<t>", &h), FL_EINVAL);
}
END_TEST

/* ----------------------------------------------------------- the keys */

#define SYN "data: {format: synthetic, synthetic: {kind: image}"

START_TEST(config_keys) {
  static fl_job job;
  ck_assert_int_eq(fl_job_load_string(SYN ", validation_split: 0.2}\n"
                                      "train: {validate_every: 7, keep_best: val_auc, early_stopping: "
                                      "{metric: val_loss, patience: 3, min_delta: 0.01}}\n",
                                      "<t>", &job), FL_OK);
  ck_assert_double_eq(job.data.validation_split, 0.2);
  ck_assert_int_eq(job.train.validate_every, 7);
  ck_assert_int_eq(job.train.keep_best, FL_VAL_AUC);
  ck_assert_int_eq(job.train.early_stopping.metric, FL_VAL_LOSS);
  ck_assert_int_eq(job.train.early_stopping.patience, 3);
  ck_assert(fl_job_has_validation(&job));
  ck_assert_int_eq(fl_job_load_string(SYN "}\n", "<t>", &job), FL_OK);
  ck_assert_int_eq(job.train.keep_best, FL_VAL_NONE);
  ck_assert_int_eq(job.train.early_stopping.patience, 5);
  static const char *const bad[][2] = {
      {SYN ", validation_split: 1}\n", "data.validation_split"},
      {SYN "}\ntrain: {keep_best: val_loss}\n", "needs a validation set"},
      {SYN "}\ntrain: {early_stopping: {metric: val_acc1}}\n", "needs a validation set"},
      {SYN ", validation_split: 0.1, validation_x: a.npy, validation_y: b.npy}\n", "not both"},
      {"data: {format: npy, train_x: a.npy, train_y: b.npy, test_x: a.npy, test_y: b.npy, "
       "validation_x: c.npy}\n", "given together"},
      {SYN ", validation_split: 0.1}\ntrain: {keep_best: val_loss}\ncluster: {mode: ps}\n"
       "strategy: {a_sync: true, a_sync_configs: {k_steps: 2}}\n", "geo"},
      {"data: {format: synthetic, synthetic: {kind: ctr}, validation_split: 0.1}\n"
       "model: {kind: ctr, num_classes: 2}\ncluster: {mode: ps}\n", "dense data"},
      {SYN "}\ntrain: {keep_best: val_best}\n", "train.keep_best"},
      {"model: {kind: onnx, path: m.onnx}\ndata: {format: npy, inputs: {a: a.npy}, train_y: y.npy, "
       "test_inputs: {a: a.npy}, test_y: y.npy, validation_inputs: {b: b.npy}, "
       "validation_y: y.npy}\n", "data.validation_inputs: must name the inputs"},
      {"model: {kind: onnx, path: m.onnx}\ndata: {format: npy, inputs: {a: a.npy}, train_y: y.npy, "
       "test_inputs: {a: a.npy}, test_y: y.npy, validation_inputs: {a: a.npy}}\n",
       "data.validation_y"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_msg(fl_job_load_string(bad[i][0], "<t>", &job) == FL_EINVAL, "accepted: %s",
                  bad[i][0]);
    ck_assert_msg(strstr(fl_job_last_error(), bad[i][1]), "%s: %s", bad[i][0],
                  fl_job_last_error());
  }
}
END_TEST

/* ----------------------------------------------- batch-norm agreement */

/* A fake second rank whose buffers hold 3 everywhere: sums add 3. */
static fl_status add_three(void *self, double *v, size_t n) {
  (void)self;
  for (size_t i = 0; i < n; i++) v[i] += 3.0;
  return FL_OK;
}
static int two(void *self) { (void)self; return 2; }

START_TEST(buffers_averaged_over_ranks) {
  fl_model_spec sp;
  fl_model_spec_defaults(&sp);
  snprintf(sp.kind, sizeof sp.kind, "cnn");
  sp.in_height = sp.in_width = 8;
  sp.num_classes = 5;
  sp.conv_channels[0] = 4;
  sp.conv_channels[1] = 70; /* more than one 64-value sum per buffer */
  sp.conv_kernel = 3;
  snprintf(sp.norm, sizeof sp.norm, "bn");
  fl_model *m = NULL;
  ck_assert_int_eq(fl_model_create(&sp, 4, 7, &m), FL_OK);
  const fl_sync_ops ops = {.reduce_metrics = add_three, .world_size = two};
  const fl_sync sync = {.ops = &ops};
  size_t bufs = 0;
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    for (size_t j = 0; j < p->n; j++) p->value[j] = (float)j;
  }
  ck_assert_int_eq(fl_val_agree_buffers(&sync, m), FL_OK);
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    bufs += !p->grad;
    for (size_t j = 0; j < p->n; j++)
      ck_assert_float_eq(p->value[j], p->grad ? (float)j : ((float)j + 3.0f) / 2.0f);
  }
  ck_assert_uint_ge(bufs, 4); /* two batch norms: mean and variance each */
  fl_model_destroy(m);
}
END_TEST

/* ---------------------------------------------------------- small jobs */

static char g_dir[256];

static void small_job(fl_job *job) {
  fl_job_defaults(job);
  snprintf(job->source, sizeof job->source, "<test>");
  job->data.format = FL_DATA_SYNTHETIC;
  job->data.synthetic.train_samples = 400;
  job->data.synthetic.test_samples = 100;
  job->data.synthetic.seed = 3;
  job->data.validation_split = 0.25;
  job->model.input_shape[1] = job->model.input_shape[2] = 8;
  job->model.num_classes = 6;
  job->model.hidden[0] = 16;
  job->model.n_hidden = 1;
  job->train.batch_size = 8;
  job->train.epochs = 2;
  job->train.num_threads = 1;
  job->train.eval_batch_size = 64;
  job->optimizer.lr = 0.05f;
}

static fl_status run_cut(const fl_job *job, const char *dir, const char *log, int64_t max_steps,
                         int resume, fl_trainer_report *rep) {
  fl_sync sync;
  ck_assert_int_eq(fl_sync_local_create(job, NULL, &sync), FL_OK);
  FILE *out = fopen(log ? log : "/dev/null", "w");
  ck_assert_ptr_nonnull(out);
  fl_trainer_options o = {.job = job, .checkpoint_dir = dir, .log = out, .max_steps = max_steps,
                          .resume = resume};
  fl_status st = fl_trainer_run(&o, &sync, rep);
  fclose(out);
  sync.ops->destroy(sync.self);
  return st;
}

static fl_status run_job(const fl_job *job, const char *dir, const char *log,
                         fl_trainer_report *rep) {
  return run_cut(job, dir, log, 0, 0, rep);
}

START_TEST(split_deterministic) {
  static fl_job job;
  small_job(&job);
  fl_trainer_report a, b;
  ck_assert_int_eq(run_job(&job, NULL, NULL, &a), FL_OK);
  ck_assert_int_eq(run_job(&job, NULL, NULL, &b), FL_OK);
  ck_assert_int_eq(a.steps_per_epoch, 300 / 8); /* the last 100 held out */
  ck_assert(a.validated && b.validated);
  ck_assert(memcmp(a.val, b.val, sizeof a.val) == 0);
  ck_assert(isfinite(a.val[FL_VAL_LOSS]) && isfinite(a.val[FL_VAL_ACC1]));
  ck_assert(isnan(a.val[FL_VAL_AUC]));
}
END_TEST

/* The validation losses logged, "val loss: L, ... (step S)". */
static int read_vals(const char *log, double *loss, long *step, int cap) {
  FILE *f = fopen(log, "r");
  char line[512];
  int n = 0;
  ck_assert_ptr_nonnull(f);
  while (n < cap && fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "] val loss: "), *q = strstr(line, "(step ");
    if (p && q && sscanf(p, "] val loss: %lf", &loss[n]) == 1 && sscanf(q, "(step %ld", &step[n]) == 1)
      n++;
  }
  fclose(f);
  return n;
}

/* Records of best.flc and the series' checkpoint of its step that hold the
 * model and optimizer are the same bits. */
static void same_model(const char *best, const char *ck) {
  fl_ckpt *a, *b;
  int params = 0;
  ck_assert_int_eq(fl_ckpt_load(best, &a), FL_OK);
  ck_assert_int_eq(fl_ckpt_load(ck, &b), FL_OK);
  for (size_t i = 0; i < fl_ckpt_count(b); i++) {
    fl_ckpt_record rb, ra;
    ck_assert_int_eq(fl_ckpt_record_at(b, i, &rb), FL_OK);
    if (strncmp(rb.name, "param/", 6) && strncmp(rb.name, "optim/", 6) &&
        strcmp(rb.name, "meta/step"))
      continue;
    ck_assert_int_eq(fl_ckpt_find(a, rb.name, &ra), FL_OK);
    ck_assert_uint_eq(ra.nbytes, rb.nbytes);
    ck_assert_msg(memcmp(ra.data, rb.data, ra.nbytes) == 0, "record %s differs", rb.name);
    params += !strncmp(rb.name, "param/", 6);
  }
  ck_assert_int_ge(params, 4);
  fl_ckpt_free(a);
  fl_ckpt_free(b);
}

START_TEST(keep_best_and_early_stopping) {
  static fl_job job;
  char log[300], best[300], ck[300], cmd[300];
  small_job(&job);
  job.train.epochs = 6;
  job.train.validate_every = 5;
  job.train.checkpoint_interval = 5;
  job.train.checkpoint_keep = 1000;
  job.train.keep_best = FL_VAL_LOSS;
  job.optimizer.lr = 0.3f; /* noisy: the loss goes up and down */
  job.data.synthetic.seed = 5;
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_valid.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  snprintf(log, sizeof log, "%s/log", g_dir);
  fl_trainer_report rep;
  ck_assert_int_eq(run_job(&job, g_dir, log, &rep), FL_OK);
  double loss[256];
  long step[256];
  int n = read_vals(log, loss, step, 256), b = -1;
  ck_assert_int_eq(n, (int)(6 * (300 / 8) / 5));
  for (int i = 0; i < n; i++)
    if (step[i] == rep.best_step) b = i;
  ck_assert_int_ge(b, 0);
  for (int i = 0; i < n; i++) /* the logged values have 5 decimals */
    ck_assert_msg(loss[b] <= loss[i], "step %ld: %g < best's %g", step[i], loss[i], loss[b]);
  for (int i = 0; i < b; i++) /* strictly better than every earlier one */
    ck_assert_msg(loss[i] >= loss[b], "step %ld", step[i]);
  snprintf(best, sizeof best, "%s/" FL_TRAINER_BEST_FILE, g_dir);
  snprintf(ck, sizeof ck, "%s/ckpt-%ld.flc", g_dir, step[b]);
  same_model(best, ck);

  /* early stopping: nothing improves val_acc1 by more than 2, so the run
   * stops at the third validation (patience 2), complete */
  job.train.keep_best = FL_VAL_NONE;
  job.train.early_stopping.metric = FL_VAL_ACC1;
  job.train.early_stopping.patience = 2;
  job.train.early_stopping.min_delta = 2.0;
  job.train.checkpoint_interval = 0;
  ck_assert_int_eq(run_job(&job, NULL, NULL, &rep), FL_OK);
  ck_assert_int_eq(rep.early_stopped, 1);
  ck_assert_int_eq(rep.steps, 15);
  ck_assert(rep.evaluated);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Cut at step 30 and resumed: the trackers and best.flc come back, so the
 * run stops, keeps and tests as the uninterrupted one. */
START_TEST(resume_keeps_best) {
  static fl_job job;
  char cmd[300];
  small_job(&job);
  job.train.validate_every = 10;
  job.train.keep_best = FL_VAL_LOSS;
  job.train.early_stopping.metric = FL_VAL_LOSS;
  job.train.early_stopping.patience = 3;
  job.optimizer.lr = 0.3f;
  job.data.synthetic.seed = 5;
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_valid.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  fl_trainer_report whole, cut, rest;
  ck_assert_int_eq(run_job(&job, g_dir, NULL, &whole), FL_OK);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", g_dir);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_eq(run_cut(&job, g_dir, NULL, 30, 0, &cut), FL_OK);
  ck_assert_int_eq(run_cut(&job, g_dir, NULL, 0, 1, &rest), FL_OK);
  ck_assert_int_eq(rest.steps, whole.steps);
  ck_assert_int_eq(rest.early_stopped, whole.early_stopped);
  ck_assert_int_eq(rest.best_step, whole.best_step);
  ck_assert_int_lt(whole.best_step, 30); /* the best is one the cut run kept */
  ck_assert_double_eq(rest.test_loss, whole.test_loss);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Reduce-on-plateau follows the validation: the rate can only change on
 * the step after a validation (every 5 steps), never at an epoch's end
 * alone. */
typedef struct lrs {
  float lr[512];
  int n;
} lrs;

static void record_lr(void *ctx, const fl_step_report *r) {
  lrs *l = ctx;
  if (l->n < 512) l->lr[l->n++] = r->lr;
}

START_TEST(plateau_reads_validation) {
  static fl_job job;
  static lrs l;
  small_job(&job);
  job.train.epochs = 3;
  job.train.validate_every = 5;
  job.optimizer.lr = 0.3f;
  job.data.synthetic.seed = 5;
  job.lr_schedule.kind = FL_LR_PLATEAU;
  job.lr_schedule.patience = 0;
  job.lr_schedule.factor = 0.5f;
  ck_assert_int_eq(fl_job_validate(&job), FL_OK);
  fl_sync sync;
  ck_assert_int_eq(fl_sync_local_create(&job, NULL, &sync), FL_OK);
  FILE *out = fopen("/dev/null", "w");
  fl_trainer_options o = {.job = &job, .log = out, .on_step = record_lr, .on_step_ctx = &l};
  fl_trainer_report rep;
  l.n = 0;
  ck_assert_int_eq(fl_trainer_run(&o, &sync, &rep), FL_OK);
  fclose(out);
  sync.ops->destroy(sync.self);
  int changes = 0;
  for (int i = 1; i < l.n; i++) /* step i + 1 follows validations at steps 5, 10, ... */
    if (l.lr[i] != l.lr[i - 1]) {
      changes++;
      ck_assert_msg(i % 5 == 0, "the rate changed at step %d, not after a validation", i + 1);
    }
  ck_assert_int_gt(changes, 0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("loop_valid");
  TCase *c = tcase_create("rules");
  tcase_add_test(c, early_stopping_scripted_min);
  tcase_add_test(c, early_stopping_scripted_max);
  tcase_add_test(c, metric_directions);
  tcase_add_test(c, metric_values);
  tcase_add_test(c, split_count);
  tcase_add_test(c, config_keys);
  tcase_add_test(c, buffers_averaged_over_ranks);
  suite_add_tcase(s, c);
  TCase *j = tcase_create("jobs");
  tcase_set_timeout(j, 60);
  tcase_add_test(j, split_deterministic);
  tcase_add_test(j, keep_best_and_early_stopping);
  tcase_add_test(j, resume_keeps_best);
  tcase_add_test(j, plateau_reads_validation);
  suite_add_tcase(s, j);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
