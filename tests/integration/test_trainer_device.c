/* test_trainer_device.c - train.device gpu end to end: the job-file key,
 * flotilla-trainer's refusals, the model's, and (with a GPU) training.
 *
 * Everywhere:
 *  - (without a GPU) device: gpu exits 1 naming train.device and why:
 *    "built without CUDA (configure --with-cuda)" in a CPU-only tree, "no
 *    CUDA device" in a CUDA tree on a machine without a GPU, and
 *    fl_trainer_run fails the same way;
 *  - device: tpu is a job-file error (exit 2); a plugin model on the gpu
 *    exits 1 (plugins compute on the host);
 *  - fl_model_create refuses gpu for a plugin, a bad device name or math,
 *    and a gpu it cannot have.
 * With a CUDA device (those cases are not registered without one):
 *  - fl_trainer_run on the GPU: the loss falls and the model classifies;
 *  - AMP fp16 with an overflowing initial loss scale: steps are skipped
 *    until the scaler has come down, then the loss falls;
 *  - --max-steps then --resume ends bitwise equal to an uninterrupted run
 *    (the host parameters are the state; the device is re-uploaded);
 *  - the flotilla-trainer binary trains with device: gpu.
 * The runner does not fork (CK_NOFORK): CUDA does not survive fork; the
 * binary runs in a child that execs at once. */
#include <config.h>

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fl_ckpt.h"
#include "fl_config.h"
#include "fl_device.h"
#include "fl_model.h"
#include "fl_trainer.h"

#include "../unit/ckpt_testutil.h"
#include "trainer_cli_util.h"

static void setup(void) {
  cli_setup_dir("fl_test_device");
}

static void write_job(const char *name, const char *device, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f,
          "model:\n"
          "  kind: mlp\n"
          "  input_shape: [1, 12, 12]\n"
          "  num_classes: 10\n"
          "  hidden: [64, 32]\n"
          "data:\n"
          "  format: synthetic\n"
          "  synthetic:\n"
          "    train_samples: 2048\n"
          "    test_samples: 512\n"
          "optimizer:\n"
          "  name: momentum\n"
          "  lr: 0.05\n"
          "train:\n"
          "  epochs: 3\n"
          "  batch_size: 32\n"
          "  eval_batch_size: 256\n"
          "  log_interval: 16\n"
          "  num_threads: 1\n"
          "  device: %s\n",
          device);
  fclose(f);
}

#define HAS(buf, s) ck_assert_msg(strstr((buf), (s)) != NULL, "want '%s' in:\n%s", (s), (buf))

/* ------------------------------------------------------------ everywhere */

START_TEST(cli_gpu_unavailable) {
  char job[300];
  write_job("gpu.yaml", "gpu", job, sizeof job);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 1);
  HAS(g_err, "train.device: gpu");
#ifdef FL_HAVE_CUDA
  HAS(g_err, "no CUDA device");
#else
  HAS(g_err, "built without CUDA (configure --with-cuda)");
#endif
  ck_assert_ptr_null(strstr(g_out, "[Epoch 0")); /* nothing trained */
}
END_TEST

START_TEST(cli_bad_device_name) {
  char job[300];
  write_job("tpu.yaml", "tpu", job, sizeof job);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 2);
  HAS(g_err, "train.device");
  HAS(g_err, "tpu");
}
END_TEST

START_TEST(cli_plugin_on_gpu) {
  char job[300];
  snprintf(job, sizeof job, "%s/plugin.yaml", g_dir);
  FILE *f = fopen(job, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "model:\n  kind: plugin\n  plugin_path: %s/none.so\n"
             "data:\n  format: synthetic\ntrain:\n  device: gpu\n", g_dir);
  fclose(f);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 1);
  HAS(g_err, "train.device: gpu: model.kind plugin computes on the CPU only");
}
END_TEST

static fl_model_spec small_spec(const char *kind, const char *device) {
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  snprintf(s.kind, sizeof s.kind, "%s", kind);
  snprintf(s.device, sizeof s.device, "%s", device);
  s.in_height = s.in_width = 8;
  s.hidden[0] = 8;
  s.n_hidden = 1;
  return s;
}

START_TEST(model_refuses) {
  fl_model *m = NULL;
  fl_model_spec s = small_spec("plugin", "gpu");
  snprintf(s.plugin_path, sizeof s.plugin_path, "%s/none.so", g_dir);
  ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_ENOTSUP); /* plugins stay on the host */
  ck_assert_ptr_null(m);
  s = small_spec("mlp", "tpu");
  ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_EINVAL);
  s = small_spec("mlp", "gpu");
  s.linear_math = (fl_math)7;
  ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_EINVAL);
  s = small_spec("mlp", "gpu");
  const int n = fl_cuda_device_count();
  if (n == 0) {
    ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_ENOTSUP);
  } else {
    s.device_id = n;
    ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_EINVAL);
  }
  ck_assert_ptr_null(m);
  s = small_spec("mlp", ""); /* "" is the host */
  ck_assert_int_eq(fl_model_create(&s, 4, 1, &m), FL_OK);
  ck_assert_str_eq(fl_model_get_spec(m)->device, "cpu");
  fl_model_destroy(m);
}
END_TEST

/* A small job on synthetic 1x12x12 images, in process. */
static void small_job(fl_job *job, fl_train_device device) {
  fl_job_defaults(job);
  snprintf(job->source, sizeof job->source, "<test>");
  job->data.format = FL_DATA_SYNTHETIC;
  job->data.synthetic.train_samples = 1024;
  job->data.synthetic.test_samples = 256;
  job->data.synthetic.seed = 5;
  job->model.input_shape[1] = 12;
  job->model.input_shape[2] = 12;
  job->model.hidden[0] = 64;
  job->model.hidden[1] = 32;
  job->model.n_hidden = 2;
  job->train.batch_size = 32;
  job->train.epochs = 3;
  job->train.num_threads = 1;
  job->train.eval_batch_size = 128;
  job->train.device = device;
  job->optimizer.lr = 0.05f;
}

typedef struct steps {
  double loss[1024];
  int skipped[1024];
  int n;
} steps;

static void record(void *ctx, const fl_step_report *r) {
  steps *s = ctx;
  if (s->n < 1024) s->loss[s->n] = r->loss, s->skipped[s->n] = r->skipped, s->n++;
}

static fl_status run_job(const fl_job *job, const char *ckdir, int resume, int64_t max_steps,
                         steps *rec, fl_trainer_report *rep) {
  fl_sync sync;
  ck_assert_int_eq(fl_sync_local_create(job, NULL, &sync), FL_OK);
  FILE *out = fopen("/dev/null", "w");
  ck_assert_ptr_nonnull(out);
  fl_trainer_options o = {.job = job, .resume = resume, .max_steps = max_steps,
                          .checkpoint_dir = ckdir, .log = out, .on_step = rec ? record : NULL,
                          .on_step_ctx = rec, .device = 0};
  fl_status st = fl_trainer_run(&o, &sync, rep);
  fclose(out);
  sync.ops->destroy(sync.self);
  return st;
}

START_TEST(loop_gpu_unavailable) {
  static fl_job job;
  small_job(&job, FL_DEVICE_GPU);
  fl_trainer_report rep;
  ck_assert_int_eq(run_job(&job, NULL, 0, 0, NULL, &rep), FL_ENOTSUP);
}
END_TEST

/* --------------------------------------------------------- with a GPU */

static double mean_of(const double *v, int from, int n) {
  double s = 0.0;
  for (int i = from; i < from + n; i++) s += v[i];
  return s / n;
}

START_TEST(loop_trains_on_gpu) {
  static fl_job job;
  static steps s;
  small_job(&job, FL_DEVICE_GPU);
  s.n = 0;
  fl_trainer_report rep;
  ck_assert_int_eq(run_job(&job, NULL, 0, 0, &s, &rep), FL_OK);
  ck_assert_int_eq(s.n, 3 * (1024 / 32));
  const double first = mean_of(s.loss, 0, 10), last = mean_of(s.loss, s.n - 10, 10);
  ck_assert_msg(last < 0.6 * first, "loss on the GPU: %.4f -> %.4f", first, last);
  ck_assert(rep.evaluated);
  ck_assert_msg(rep.test_acc1 > 0.6, "test acc1 %.3f", rep.test_acc1);
  ck_assert_uint_gt(rep.activation_bytes, 0);
}
END_TEST

START_TEST(loop_amp_fp16_on_gpu) {
  static fl_job job;
  static steps s;
  small_job(&job, FL_DEVICE_GPU);
  job.strategy.amp = 1;
  job.strategy.amp_configs.dtype = FL_AMP_FLOAT16;
  job.strategy.amp_configs.init_loss_scaling = 1073741824.0f; /* 2^30: overflows fp16 */
  job.strategy.amp_configs.decr_every_n_nan_or_inf = 1;
  job.strategy.amp_configs.decr_ratio = 0.5f;
  s.n = 0;
  fl_trainer_report rep;
  ck_assert_int_eq(run_job(&job, NULL, 0, 0, &s, &rep), FL_OK);
  ck_assert_msg(s.skipped[0], "a 2^30 loss scale did not overflow the fp16 GEMMs");
  int skipped = 0, good = -1;
  for (int i = 0; i < s.n; i++) {
    skipped += s.skipped[i];
    if (good < 0 && !s.skipped[i]) good = i;
  }
  ck_assert_int_ge(good, 1);
  ck_assert_int_lt(good, 30);
  const double first = mean_of(s.loss, good, 10), last = mean_of(s.loss, s.n - 10, 10);
  ck_assert_msg(last < 0.6 * first, "fp16 loss: %.4f -> %.4f (%d steps skipped)", first, last,
                skipped);
  ck_assert_msg(rep.test_acc1 > 0.6, "test acc1 %.3f", rep.test_acc1);
}
END_TEST

START_TEST(loop_resume_on_gpu) {
  static fl_job job;
  small_job(&job, FL_DEVICE_GPU);
  snprintf(job.model.kind, sizeof job.model.kind, "cnn");
  job.model.norm = FL_NORM_BN;
  job.model.conv_channels[0] = 4;
  job.model.conv_channels[1] = 8;
  job.model.conv_kernel = 3;
  job.model.fc_hidden = 16;
  job.train.checkpoint_interval = 10;
  char a[300], b[300], fa[400], fb[400];
  fl_trainer_report rep;
  snprintf(a, sizeof a, "%s/straight", g_dir);
  snprintf(b, sizeof b, "%s/resumed", g_dir);
  /* 32 steps per epoch: stop inside epoch 1 */
  ck_assert_int_eq(run_job(&job, a, 0, 70, NULL, &rep), FL_OK);
  ck_assert_int_eq(run_job(&job, b, 0, 45, NULL, &rep), FL_OK);
  ck_assert_int_eq(run_job(&job, b, 1, 70, NULL, &rep), FL_OK);
  ck_assert_int_eq(rep.steps, 70);
  ck_assert_int_eq(fl_ckpt_dir_path(a, 70, fa, sizeof fa), FL_OK);
  ck_assert_int_eq(fl_ckpt_dir_path(b, 70, fb, sizeof fb), FL_OK);
  ck_assert_int_gt(same_checkpoints(fa, fb), 0);
}
END_TEST

/* The first number after `key` in the binary's stdout. */
static double logged(const char *key) {
  const char *p = strstr(g_out, key);
  ck_assert_msg(p != NULL, "no '%s' in:\n%s", key, g_out);
  double v = 0.0;
  ck_assert_int_eq(sscanf(p + strlen(key), "%lf", &v), 1);
  return v;
}

START_TEST(cli_trains_on_gpu) {
  char job[300];
  write_job("gpu.yaml", "gpu", job, sizeof job);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 0);
  HAS(g_err, "uses GPU 0");
  const double l0 = logged("[Epoch 0, batch 0] loss: ");
  const double l2 = logged("[Epoch 2, batch 48] loss: ");
  ck_assert_msg(l2 < 0.5 * l0, "training loss on the GPU: %.5f -> %.5f", l0, l2);
  const char *p = strstr(g_out, "[Epoch 2] test loss: ");
  double loss, acc;
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(sscanf(p, "[Epoch 2] test loss: %lf, acc1: %lf", &loss, &acc), 2);
  ck_assert_msg(acc > 0.6, "test acc1 %.4f", acc);
}
END_TEST

static Suite *device_suite(void) {
  Suite *s = suite_create("trainer_device");
  TCase *t = tcase_create("device");
  tcase_add_checked_fixture(t, setup, cli_teardown);
  tcase_set_timeout(t, 240);
  tcase_add_test(t, cli_bad_device_name);
  tcase_add_test(t, model_refuses);
  tcase_add_test(t, cli_plugin_on_gpu);
  if (fl_cuda_device_count() == 0) {
    tcase_add_test(t, cli_gpu_unavailable);
    tcase_add_test(t, loop_gpu_unavailable);
  } else {
    tcase_add_test(t, loop_trains_on_gpu);
    tcase_add_test(t, loop_amp_fp16_on_gpu);
    tcase_add_test(t, loop_resume_on_gpu);
    tcase_add_test(t, cli_trains_on_gpu);
  }
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  SRunner *sr = srunner_create(device_suite());
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
