/* test_loop.c - the training loop (fl_trainer_run) in local mode and with a
 * recording fl_sync: loss falls on a slice of Fashion-MNIST, an interrupted
 * and resumed run ends bitwise equal to an uninterrupted one, checkpoints
 * hold what fl_trainer.h promises, and the fl_sync hooks come in the
 * documented order. */
#include <config.h>

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_ckpt.h"
#include "fl_config.h"
#include "fl_log.h"
#include "fl_trainer.h"

#include "ckpt_testutil.h"

#define FMNIST "/usr/share/datasets/fashion-mnist/"

static char g_dir[256];

static void make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_loop.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

static FILE *devnull(void) {
  FILE *f = fopen("/dev/null", "w");
  ck_assert_ptr_nonnull(f);
  return f;
}

/* A small, fast job on synthetic 1x8x8 images. */
static void small_job(fl_job *job) {
  fl_job_defaults(job);
  snprintf(job->source, sizeof job->source, "<test>");
  job->data.format = FL_DATA_SYNTHETIC;
  job->data.synthetic.train_samples = 400;
  job->data.synthetic.test_samples = 100;
  job->data.synthetic.seed = 3;
  job->model.input_shape[1] = 8;
  job->model.input_shape[2] = 8;
  job->model.num_classes = 6;
  job->model.hidden[0] = 16;
  job->model.hidden[1] = 12;
  job->model.n_hidden = 2;
  job->train.batch_size = 8;
  job->train.epochs = 3;
  job->train.num_threads = 1;
  job->train.eval_batch_size = 64;
  job->optimizer.lr = 0.05f;
}

/* ------------------------------------------------------------ loss falls */

typedef struct losses {
  double v[4096];
  int n;
} losses;

static void record_loss(void *ctx, const fl_step_report *r) {
  losses *l = ctx;
  if (l->n < 4096) l->v[l->n++] = r->loss;
}

static double window_mean(const losses *l, int from, int n) {
  double s = 0;
  for (int i = from; i < from + n; i++) s += l->v[i];
  return s / n;
}

START_TEST(loss_falls_on_fashion_mnist) {
  static fl_job job;
  fl_job_defaults(&job);
  snprintf(job.source, sizeof job.source, "<test>");
  if (access(FMNIST "train-images-idx3-ubyte.gz", R_OK) != 0) {
    /* without the dataset package: the same check on synthetic images */
    fprintf(stderr, "loss_falls: %s missing, using synthetic 28x28 images\n", FMNIST);
    job.data.format = FL_DATA_SYNTHETIC;
    job.data.synthetic.train_samples = 2000;
    job.data.synthetic.test_samples = 500;
  }
  job.data.limit_train = 2000;
  job.data.limit_test = 500;
  job.model.hidden[0] = 64;
  job.model.n_hidden = 1;
  job.train.batch_size = 32;
  job.train.epochs = 3;
  job.train.num_threads = 1;
  job.train.eval_batch_size = 250;
  job.optimizer.lr = 0.05f;
  fl_sync sync;
  ck_assert_int_eq(fl_sync_local_create(&job, NULL, &sync), FL_OK);
  static losses l;
  l.n = 0;
  FILE *out = devnull();
  fl_trainer_options o = {.job = &job, .log = out, .on_step = record_loss, .on_step_ctx = &l};
  fl_trainer_report rep;
  ck_assert_int_eq(fl_trainer_run(&o, &sync, &rep), FL_OK);
  fclose(out);
  ck_assert_int_eq(sync.ops->finish(sync.self), FL_OK);
  sync.ops->destroy(sync.self);
  ck_assert_int_eq(rep.steps_per_epoch, 2000 / 32);
  ck_assert_int_eq(l.n, 3 * (2000 / 32));
  ck_assert_int_eq(rep.steps, l.n);
  ck_assert_int_eq(rep.epochs_done, 3);
  double first = window_mean(&l, 0, 20), last = window_mean(&l, l.n - 20, 20);
  ck_assert_msg(last < 0.6 * first, "loss: first 20 steps %.4f, last 20 steps %.4f", first, last);
  ck_assert(rep.evaluated);
  ck_assert_msg(rep.test_acc1 > 0.65, "test acc1 %.4f", rep.test_acc1);
  ck_assert(rep.test_acc5 >= rep.test_acc1);
  ck_assert_int_eq(rep.train_samples, 3 * (2000 / 32) * 32);
}
END_TEST

/* --------------------------------------------------------------- resume */

static fl_status run_job(const fl_job *job, const char *dir, int resume, int64_t max_steps,
                         fl_trainer_report *rep) {
  fl_sync sync;
  ck_assert_int_eq(fl_sync_local_create(job, NULL, &sync), FL_OK);
  FILE *out = devnull();
  fl_trainer_options o = {.job = job, .resume = resume, .max_steps = max_steps,
                          .checkpoint_dir = dir, .log = out};
  fl_status st = fl_trainer_run(&o, &sync, rep);
  fclose(out);
  sync.ops->destroy(sync.self);
  return st;
}

/* N steps straight vs. K steps, stop, resume to N: same final checkpoint. */
static void resume_case(fl_job *job, int64_t k_stop, int64_t n_total) {
  char a[300], b[300], fa[400], fb[400];
  fl_trainer_report rep;
  make_dir();
  snprintf(a, sizeof a, "%s/straight", g_dir);
  snprintf(b, sizeof b, "%s/resumed", g_dir);
  ck_assert_int_eq(run_job(job, a, 0, n_total, &rep), FL_OK);
  ck_assert_int_eq(rep.steps, n_total);
  ck_assert_int_eq(run_job(job, b, 0, k_stop, &rep), FL_OK);
  ck_assert_int_eq(rep.steps, k_stop);
  ck_assert_int_eq(run_job(job, b, 1, n_total, &rep), FL_OK);
  ck_assert_int_eq(rep.steps, n_total);
  ck_assert_int_eq(fl_ckpt_dir_path(a, n_total, fa, sizeof fa), FL_OK);
  ck_assert_int_eq(fl_ckpt_dir_path(b, n_total, fb, sizeof fb), FL_OK);
  ck_assert_int_gt(same_checkpoints(fa, fb), 0);
  remove_dir();
}

START_TEST(resume_equals_uninterrupted_momentum) {
  static fl_job job;
  small_job(&job);
  job.train.checkpoint_interval = 7;
  /* 400/8 = 50 batches, 50 steps per epoch; stop in epoch 1 */
  resume_case(&job, 63, 130);
}
END_TEST

START_TEST(resume_equals_uninterrupted_adam_merge_amp) {
  static fl_job job;
  small_job(&job);
  job.optimizer.hp.kind = FL_OPTIM_ADAM;
  job.optimizer.lr = 0.01f;
  job.optimizer.hp.epsilon = 1e-8f;
  job.strategy.gradient_merge = 1;
  job.strategy.gradient_merge_configs.k_steps = 3;
  job.strategy.amp = 1;
  job.strategy.amp_configs.incr_every_n_steps = 4; /* the scale moves during the run */
  job.lr_schedule.kind = FL_LR_COSINE;
  job.lr_schedule.warmup_steps = 5;
  /* 50 batches -> 16 steps per epoch of 3 micro-batches; stop mid epoch 1 */
  resume_case(&job, 21, 40);
}
END_TEST

START_TEST(resume_at_epoch_boundary) {
  static fl_job job;
  small_job(&job);
  char a[300], b[300], fa[400], fb[400];
  fl_trainer_report rep;
  make_dir();
  snprintf(a, sizeof a, "%s/a", g_dir);
  snprintf(b, sizeof b, "%s/b", g_dir);
  job.train.epochs = 2;
  ck_assert_int_eq(run_job(&job, a, 0, 0, &rep), FL_OK);
  ck_assert_int_eq(rep.steps, 100);
  ck_assert_int_eq(run_job(&job, b, 0, 50, &rep), FL_OK); /* exactly one epoch */
  ck_assert_int_eq(rep.epochs_done, 1);
  ck_assert_int_eq(run_job(&job, b, 1, 0, &rep), FL_OK);
  ck_assert_int_eq(rep.steps, 100);
  ck_assert_int_eq(rep.epochs_done, 2);
  fl_ckpt_dir_path(a, 100, fa, sizeof fa);
  fl_ckpt_dir_path(b, 100, fb, sizeof fb);
  same_checkpoints(fa, fb);
  /* a resumed run that is already complete trains nothing */
  ck_assert_int_eq(run_job(&job, b, 1, 0, &rep), FL_OK);
  ck_assert_int_eq(rep.steps, 100);
  ck_assert_int_eq(rep.train_samples, 0);
  remove_dir();
}
END_TEST

START_TEST(checkpoint_contents_and_keep) {
  static fl_job job;
  small_job(&job);
  job.train.epochs = 1;
  job.train.checkpoint_interval = 10;
  job.train.checkpoint_keep = 2;
  fl_trainer_report rep;
  make_dir();
  ck_assert_int_eq(run_job(&job, g_dir, 0, 0, &rep), FL_OK);
  int64_t steps[8];
  size_t n;
  ck_assert_int_eq(fl_ckpt_dir_list(g_dir, steps, 8, &n), FL_OK);
  ck_assert_uint_eq(n, 2); /* 10,20,30,40 then 50 at the epoch end; 2 kept */
  ck_assert_int_eq(steps[0], 50);
  ck_assert_int_eq(steps[1], 40);
  fl_ckpt *c;
  int64_t v;
  ck_assert_int_eq(fl_ckpt_dir_load_latest(g_dir, &c, NULL), FL_OK);
  ck_assert_int_eq(fl_ckpt_get_i64(c, "meta/step", &v), FL_OK);
  ck_assert_int_eq(v, 50);
  ck_assert_int_eq(fl_ckpt_get_i64(c, "meta/epoch", &v), FL_OK);
  ck_assert_int_eq(v, 1);
  ck_assert_int_eq(fl_ckpt_get_i64(c, "meta/batch", &v), FL_OK);
  ck_assert_int_eq(v, 0);
  ck_assert_int_eq(fl_ckpt_get_i64(c, "rng/shuffle_seed", &v), FL_OK);
  ck_assert_int_eq(v, 1);
  fl_ckpt_record r;
  ck_assert_int_eq(fl_ckpt_find(c, "amp/scale", &r), FL_OK);
  /* momentum: one state tensor per trainable parameter */
  int params = 0, states = 0;
  for (size_t i = 0; i < fl_ckpt_count(c); i++) {
    ck_assert_int_eq(fl_ckpt_record_at(c, i, &r), FL_OK);
    params += strncmp(r.name, "param/", 6) == 0;
    states += strncmp(r.name, "optim/", 6) == 0;
  }
  ck_assert_int_eq(params, 6); /* 3 linear layers x (weight, bias) */
  ck_assert_int_eq(states, 6);
  fl_ckpt_free(c);
  /* a checkpoint from another job is refused on resume */
  job.train.seed = 2;
  ck_assert_int_eq(run_job(&job, g_dir, 1, 0, &rep), FL_EINVAL);
  job.train.seed = 1;
  job.train.batch_size = 16;
  ck_assert_int_eq(run_job(&job, g_dir, 1, 0, &rep), FL_EINVAL);
  remove_dir();
}
END_TEST

/* ------------------------------------------------------ a recording sync */

typedef struct rec_sync {
  int64_t step;
  int in_step;
  size_t ready_calls;
  size_t trainable;
  int errors;
  int apply;
  int steps_seen;
  float *snapshot; /* first parameter's values at step_begin */
  size_t snap_n;
  int fewer;     /* agree_steps: the other ranks have this many steps fewer */
  int world;     /* 0 = 1 */
  double skew;   /* reduce_metrics: sum = world * v + skew */
} rec_sync;

static fl_status rec_init(void *self, fl_model *m) {
  rec_sync *s = self;
  for (size_t i = 0; i < fl_model_num_params(m); i++) s->trainable += fl_model_param(m, i)->grad != NULL;
  return FL_OK;
}
static fl_status rec_agree(void *self, int64_t local, int64_t *global) {
  rec_sync *s = self;
  *global = local - s->fewer; /* a peer with fewer steps: the minimum wins */
  return FL_OK;
}
static fl_status rec_begin(void *self, fl_model *m, int64_t step) {
  rec_sync *s = self;
  if (s->in_step || step != s->step) s->errors++;
  s->in_step = 1;
  s->ready_calls = 0;
  fl_param *p = fl_model_param(m, 0);
  if (!s->snapshot) {
    s->snapshot = malloc(p->n * sizeof(float));
    s->snap_n = p->n;
  }
  memcpy(s->snapshot, p->value, p->n * sizeof(float));
  return FL_OK;
}
static void rec_ready(void *self, fl_model *m, size_t index) {
  rec_sync *s = self;
  if (!s->in_step || index >= fl_model_num_params(m) || !fl_model_param(m, index)->grad) s->errors++;
  s->ready_calls++;
}
static fl_status rec_end(void *self, fl_model *m, int64_t step, int *apply) {
  rec_sync *s = self;
  if (!s->in_step || step != s->step || s->ready_calls != s->trainable) s->errors++;
  /* without a local update the parameters must be what the sync leaves */
  if (!s->apply && memcmp(s->snapshot, fl_model_param(m, 0)->value, s->snap_n * sizeof(float)))
    s->errors++;
  s->in_step = 0;
  s->step++;
  s->steps_seen++;
  *apply = s->apply;
  return FL_OK;
}
/* Stands for `world` ranks that all report v (plus skew). */
static fl_status rec_reduce(void *self, double *v, size_t n) {
  rec_sync *s = self;
  for (size_t i = 0; i < n; i++) v[i] = v[i] * (s->world ? s->world : 1) + s->skew;
  return n == 8 || n == 3 ? FL_OK : FL_EINVAL; /* the evaluation's sums, the position check */
}
static int rec_rank(void *self) {
  (void)self;
  return 0;
}
static int rec_world(void *self) {
  rec_sync *s = self;
  return s->world ? s->world : 1;
}
static fl_status rec_finish(void *self) {
  (void)self;
  return FL_OK;
}
static void rec_destroy(void *self) { free(((rec_sync *)self)->snapshot); }

static const fl_sync_ops rec_ops = {"record", rec_init,   rec_agree, rec_begin,  rec_ready,
                                    rec_end,  rec_reduce, rec_rank,  rec_world, rec_finish,
                                    rec_destroy, NULL, NULL};

START_TEST(sync_hooks_in_order) {
  static fl_job job;
  small_job(&job);
  job.train.epochs = 2;
  for (int apply = 0; apply < 2; apply++) {
    for (int k = 1; k <= 2; k++) {
      rec_sync s = {.apply = apply, .fewer = 1};
      fl_sync sync = {&rec_ops, &s};
      job.strategy.gradient_merge = k > 1;
      job.strategy.gradient_merge_configs.k_steps = k;
      FILE *out = devnull();
      fl_trainer_options o = {.job = &job, .log = out};
      fl_trainer_report rep;
      ck_assert_int_eq(fl_trainer_run(&o, &sync, &rep), FL_OK);
      fclose(out);
      ck_assert_int_eq(s.errors, 0);
      ck_assert_int_eq(rep.steps_per_epoch, 50 / k - 1);
      ck_assert_int_eq(s.steps_seen, 2 * (50 / k - 1));
      ck_assert_uint_eq(s.trainable, 6);
      rec_destroy(&s);
    }
  }
}
END_TEST

/* After --resume with several ranks, their positions are compared. */
START_TEST(resume_position_agreed) {
  static fl_job job;
  small_job(&job);
  job.train.epochs = 1;
  fl_trainer_report rep;
  make_dir();
  ck_assert_int_eq(run_job(&job, g_dir, 0, 20, &rep), FL_OK);
  job.train.batch_size = 4; /* 2 ranks x 4: the same 50 steps per epoch */
  for (int skew = 0; skew < 2; skew++) {
    rec_sync s = {.apply = 1, .world = 2, .skew = skew};
    fl_sync sync = {&rec_ops, &s};
    s.step = 20;
    FILE *out = devnull();
    fl_trainer_options o = {.job = &job, .log = out, .resume = 1, .checkpoint_dir = g_dir,
                            .max_steps = 22};
    fl_status st = fl_trainer_run(&o, &sync, &rep);
    fclose(out);
    ck_assert_int_eq(st, skew ? FL_ESTATE : FL_OK);
    ck_assert_int_eq(rep.steps, skew ? 0 : 22);
    ck_assert_int_eq(s.errors, 0);
    rec_destroy(&s);
  }
  remove_dir();
}
END_TEST

START_TEST(bad_data_fails_cleanly) {
  static fl_job job;
  small_job(&job);
  make_dir();
  job.data.format = FL_DATA_IDX;
  snprintf(job.data.train_images, sizeof job.data.train_images, "%s/missing.gz", g_dir);
  fl_trainer_report rep;
  ck_assert_int_eq(run_job(&job, NULL, 0, 0, &rep), FL_ENOTFOUND);
  small_job(&job);
  job.train.batch_size = 1000; /* more than the 400 samples */
  ck_assert_int_eq(run_job(&job, NULL, 0, 0, &rep), FL_EINVAL);
  small_job(&job);
  snprintf(job.model.kind, sizeof job.model.kind, "plugin"); /* a model that cannot load */
  snprintf(job.model.plugin_path, sizeof job.model.plugin_path, "%s/none.so", g_dir);
  ck_assert_int_ne(run_job(&job, NULL, 0, 0, &rep), FL_OK);
  small_job(&job);
  ck_assert_int_eq(run_job(&job, NULL, 1, 0, &rep), FL_EINVAL); /* resume needs a directory */
  remove_dir();
}
END_TEST

/* ------------------------------------------------------- logged metrics */

/* The log of small_job with nc classes and every batch logged. */
static void log_of(int nc, char *buf, size_t cap) {
  static fl_job job;
  small_job(&job);
  job.model.num_classes = nc;
  job.train.epochs = 1;
  job.train.log_interval = 10;
  fl_sync sync;
  ck_assert_int_eq(fl_sync_local_create(&job, NULL, &sync), FL_OK);
  FILE *out = tmpfile();
  ck_assert_ptr_nonnull(out);
  fl_trainer_options o = {.job = &job, .log = out};
  fl_trainer_report rep;
  ck_assert_int_eq(fl_trainer_run(&o, &sync, &rep), FL_OK);
  sync.ops->destroy(sync.self);
  rewind(out);
  size_t n = fread(buf, 1, cap - 1, out);
  buf[n] = 0;
  fclose(out);
}

/* Top-5 accuracy is logged only with more than 5 classes, in the same
 * format as always. */
START_TEST(acc5_only_above_five_classes) {
  static char log[1 << 16];
  double loss, a1, a5;
  log_of(10, log, sizeof log);
  const char *p = strstr(log, "[Epoch 0, batch 10] loss: ");
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(sscanf(p, "[Epoch 0, batch 10] loss: %lf, acc1: %lf, acc5: %lf\n", &loss,
                          &a1, &a5), 3);
  p = strstr(log, "[Epoch 0] test loss: ");
  ck_assert_ptr_nonnull(p);
  char line[128];
  snprintf(line, sizeof line, "%.*s", (int)strcspn(p, "\n"), p);
  ck_assert_int_eq(sscanf(line, "[Epoch 0] test loss: %lf, acc1: %lf, acc5: %lf", &loss, &a1,
                          &a5), 3);
  char again[128];
  snprintf(again, sizeof again, "[Epoch 0] test loss: %.5f, acc1: %.5f, acc5: %.5f", loss, a1,
           a5);
  ck_assert_str_eq(line, again);
  log_of(3, log, sizeof log);
  ck_assert_ptr_nonnull(strstr(log, "[Epoch 0, batch 10] loss: "));
  ck_assert_ptr_nonnull(strstr(log, "[Epoch 0] test loss: "));
  ck_assert_ptr_null(strstr(log, "acc5"));
}
END_TEST

static Suite *loop_suite(void) {
  Suite *s = suite_create("loop");
  TCase *t = tcase_create("train");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, loss_falls_on_fashion_mnist);
  tcase_add_test(t, resume_equals_uninterrupted_momentum);
  tcase_add_test(t, resume_equals_uninterrupted_adam_merge_amp);
  tcase_add_test(t, resume_at_epoch_boundary);
  tcase_add_test(t, checkpoint_contents_and_keep);
  tcase_add_test(t, sync_hooks_in_order);
  tcase_add_test(t, resume_position_agreed);
  tcase_add_test(t, bad_data_fails_cleanly);
  tcase_add_test(t, acc5_only_above_five_classes);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  fl_log_set_level(FL_LOG_ERROR);
  SRunner *sr = srunner_create(loop_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
