/* test_trainer_cli.c - the real flotilla-trainer binary: flags, exit status
 * and stderr for bad command lines, bad job files and bad data files; a
 * short training run's stdout (strategy table, log and eval lines);
 * --dump-config round trip (it dumps and exits); --max-steps then --resume;
 * --check-model (builds the model, reads no data, exits). */
#include <config.h>

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "trainer_cli_util.h"

static void setup(void) {
  cli_setup_dir("fl_test_cli");
  g_run_limit_s = 90;
}

static void write_text(const char *name, const char *text, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

#define HAS(buf, s) ck_assert_msg(strstr((buf), (s)) != NULL, "want '%s' in:\n%s", (s), (buf))

static const char *k_small_job =
    "model:\n"
    "  kind: mlp\n"
    "  input_shape: [1, 8, 8]\n"
    "  num_classes: 4\n"
    "  hidden: [16]\n"
    "data:\n"
    "  format: synthetic\n"
    "  synthetic:\n"
    "    train_samples: 256\n"
    "    test_samples: 64\n"
    "train:\n"
    "  epochs: 2\n"
    "  batch_size: 16\n"
    "  log_interval: 4\n"
    "  num_threads: 1\n";

START_TEST(help_documents_everything) {
  ck_assert_int_eq(run((const char *[]){"--help", NULL}), 0);
  static const char *const want[] = {"--config", "--resume", "--dump-config", "--max-steps",
                                     "--log-level", "--help", "FLOTILLA_ROLE", "FLOTILLA_MODE",
                                     "FLOTILLA_TRAINER_ID", "FLOTILLA_TRAINERS_NUM",
                                     "FLOTILLA_TRAINER_ENDPOINTS", "FLOTILLA_CURRENT_ENDPOINT",
                                     "FLOTILLA_PSERVERS_IP_PORT_LIST", "FLOTILLA_TOKEN",
                                     "FLOTILLA_TOKEN_FILE", "FLOTILLA_CHECKPOINT_DIR",
                                     "FLOTILLA_LOG_LEVEL", "Exit status"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) HAS(g_out, want[i]);
}
END_TEST

START_TEST(bad_command_lines) {
  char job[300];
  write_text("job.yaml", k_small_job, job, sizeof job);
  ck_assert_int_eq(run((const char *[]){NULL}), 2);
  HAS(g_err, "--config FILE is required");
  ck_assert_int_eq(run((const char *[]){"--config", job, "--bogus", NULL}), 2);
  HAS(g_err, "unknown argument '--bogus'");
  ck_assert_int_eq(run((const char *[]){"--config", job, "extra", NULL}), 2);
  HAS(g_err, "unknown argument 'extra'");
  ck_assert_int_eq(run((const char *[]){"--config", job, "--max-steps", "0", NULL}), 2);
  HAS(g_err, "--max-steps 0");
  ck_assert_int_eq(run((const char *[]){"--config", NULL}), 2);
  HAS(g_err, "--config needs a value");
  ck_assert_int_eq(run((const char *[]){"--config", job, "--log-level=loud", NULL}), 2);
  HAS(g_err, "--log-level loud");
  ck_assert_int_eq(run((const char *[]){"--config", job, "--trainer_id=abc", NULL}), 2);
  HAS(g_err, "trainer_id");
}
END_TEST

START_TEST(bad_job_files) {
  char job[300];
  ck_assert_int_eq(run((const char *[]){"--config", "/nonexistent/job.yaml", NULL}), 2);
  HAS(g_err, "/nonexistent/job.yaml");
  write_text("unknown.yaml", "train:\n  epochs: 1\n  bogus_key: 3\n", job, sizeof job);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 2);
  HAS(g_err, "unknown.yaml:3:");
  HAS(g_err, "bogus_key");
  write_text("type.yaml", "train:\n  epochs: many\n", job, sizeof job);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 2);
  HAS(g_err, "type.yaml:2:");
  HAS(g_err, "train.epochs");
  write_text("range.yaml", "strategy:\n  gradient_merge: true\n  gradient_merge_configs:\n"
                           "    k_steps: 0\n", job, sizeof job);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 2);
  HAS(g_err, "range.yaml:4:");
  HAS(g_err, "k_steps");
}
END_TEST

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* IDX files of n 4x4 images; labels i % 10 except bad_label at index 5
 * when >= 0; the image file cut by `cut` bytes. */
static void write_idx(const char *img, const char *lbl, uint32_t n, int bad_label, size_t cut) {
  unsigned char buf[16 + 64 * 16], lb[8 + 64];
  put_be32(buf, 0x803), put_be32(buf + 4, n), put_be32(buf + 8, 4), put_be32(buf + 12, 4);
  for (size_t i = 0; i < n * 16; i++) buf[16 + i] = (unsigned char)(i * 13);
  put_be32(lb, 0x801), put_be32(lb + 4, n);
  for (size_t i = 0; i < n; i++) lb[8 + i] = (unsigned char)(i % 10);
  if (bad_label >= 0) lb[8 + 5] = (unsigned char)bad_label;
  gzFile f = gzopen(img, "wb");
  gzwrite(f, buf, (unsigned)(16 + n * 16 - cut));
  gzclose(f);
  f = gzopen(lbl, "wb");
  gzwrite(f, lb, 8 + n);
  gzclose(f);
}

static void idx_job(char *job, size_t cap) {
  char text[2048];
  snprintf(text, sizeof text,
           "model:\n  input_shape: [1, 4, 4]\n  hidden: [8]\n"
           "data:\n  format: idx\n"
           "  train_images: %s/tr-img.gz\n  train_labels: %s/tr-lbl.gz\n"
           "  test_images: %s/te-img.gz\n  test_labels: %s/te-lbl.gz\n"
           "train:\n  epochs: 1\n  batch_size: 8\n  num_threads: 1\n",
           g_dir, g_dir, g_dir, g_dir);
  write_text("idx.yaml", text, job, cap);
}

START_TEST(bad_data_files) {
  char job[300], ti[300], tl[300], ei[300], el[300];
  idx_job(job, sizeof job);
  snprintf(ti, sizeof ti, "%s/tr-img.gz", g_dir);
  snprintf(tl, sizeof tl, "%s/tr-lbl.gz", g_dir);
  snprintf(ei, sizeof ei, "%s/te-img.gz", g_dir);
  snprintf(el, sizeof el, "%s/te-lbl.gz", g_dir);
  /* missing */
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 1);
  HAS(g_err, "tr-img.gz: no such file");
  /* good files train */
  write_idx(ti, tl, 64, -1, 0);
  write_idx(ei, el, 32, -1, 0);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 0);
  HAS(g_out, "[Epoch 0] test loss: ");
  /* truncated image data */
  write_idx(ti, tl, 64, -1, 7);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 1);
  HAS(g_err, "tr-img.gz: truncated image data at offset 1033");
  /* label out of range in the test set */
  write_idx(ti, tl, 64, -1, 0);
  write_idx(ei, el, 32, 12, 0);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 1);
  HAS(g_err, "te-lbl.gz: label 12 of sample 5 at offset 13 is out of range");
  /* wrong magic: labels given as images */
  write_idx(ei, el, 32, -1, 0);
  char text[2048];
  snprintf(text, sizeof text,
           "model:\n  input_shape: [1, 4, 4]\n  hidden: [8]\n"
           "data:\n  format: idx\n  train_images: %s\n  train_labels: %s\n"
           "  test_images: %s\n  test_labels: %s\n"
           "train:\n  epochs: 1\n  batch_size: 8\n",
           tl, tl, ei, el);
  write_text("magic.yaml", text, job, sizeof job);
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 1);
  HAS(g_err, "tr-lbl.gz: bad magic 0x00000801 at offset 0");
}
END_TEST

START_TEST(trains_and_logs) {
  char job[300], dump[300], ck[300];
  write_text("job.yaml", k_small_job, job, sizeof job);
  snprintf(dump, sizeof dump, "%s/dump.yaml", g_dir);
  ck_assert_int_eq(run((const char *[]){"--config", job, "--dump-config", dump, NULL}), 0);
  ck_assert_ptr_null(strstr(g_out, "[Epoch")); /* --dump-config dumps and exits */
  ck_assert_int_eq(run((const char *[]){"--config", job, NULL}), 0);
  HAS(g_out, "DistributedStrategy Overview");
  /* 256/16 = 16 batches per epoch, logged every 4 */
  HAS(g_out, "[Epoch 1, batch 12] loss: ");
  const char *p = strstr(g_out, "[Epoch 0, batch 4] loss: ");
  ck_assert_ptr_nonnull(p);
  double loss, a1;
  ck_assert_int_eq(sscanf(p, "[Epoch 0, batch 4] loss: %lf, acc1: %lf", &loss, &a1), 2);
  ck_assert(loss > 0 && a1 >= 0 && a1 <= 1);
  ck_assert_ptr_null(strstr(g_out, "acc5")); /* 4 classes: no top-5 accuracy */
  ck_assert_ptr_null(strstr(g_out, "batch 5]"));
  p = strstr(g_out, "[Epoch 1] test loss: ");
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(sscanf(p, "[Epoch 1] test loss: %lf, acc1: %lf\n", &loss, &a1), 2);
  ck_assert_msg(a1 > 0.5, "synthetic test acc1 %.3f", a1);
  /* the dump is a complete job that loads again */
  ck_assert_int_eq(run((const char *[]){"--config", dump, "--max-steps", "3", NULL}), 0);
  /* stop after 5 steps with checkpoints, then resume to the end */
  snprintf(ck, sizeof ck, "--checkpoint_dir=%s/ck", g_dir);
  ck_assert_int_eq(run((const char *[]){"--config", job, ck, "--max-steps=5", NULL}), 0);
  HAS(g_err, "checkpoint: step 5");
  ck_assert_int_eq(run((const char *[]){"--config", job, ck, "--resume", NULL}), 0);
  HAS(g_err, "resumed from");
  HAS(g_err, "ckpt-5.flc");
  ck_assert_ptr_null(strstr(g_out, "[Epoch 0, batch 4]")); /* not trained twice */
  HAS(g_out, "[Epoch 0, batch 8] loss: ");
  HAS(g_out, "[Epoch 1] test loss: ");
}
END_TEST

/* --check-model builds the model and exits without reading data; a model
 * the importer refuses exits 1 with its message. */
START_TEST(check_model_builds_and_exits) {
  char job[300];
  write_text("check.yaml", k_small_job, job, sizeof job);
  ck_assert_int_eq(run((const char *[]){"--config", job, "--check-model", NULL}), 0);
  HAS(g_out, "model ok: mlp, 64 inputs per sample, 4 parameters and buffers");
  ck_assert_ptr_null(strstr(g_out, "[Epoch"));
  write_text("nofile.yaml", "model: {kind: onnx, path: /nonexistent/m.onnx}\n", job, sizeof job);
  ck_assert_int_eq(run((const char *[]){"--config", job, "--check_model", NULL}), 1);
  HAS(g_err, "/nonexistent/m.onnx");
  ck_assert_int_eq(run((const char *[]){"--help", NULL}), 0);
  HAS(g_out, "--check_model");
}
END_TEST

static Suite *cli_suite(void) {
  Suite *s = suite_create("trainer_cli");
  TCase *t = tcase_create("cli");
  tcase_add_checked_fixture(t, setup, cli_teardown);
  tcase_set_timeout(t, 120);
  tcase_add_test(t, help_documents_everything);
  tcase_add_test(t, bad_command_lines);
  tcase_add_test(t, bad_job_files);
  tcase_add_test(t, bad_data_files);
  tcase_add_test(t, trains_and_logs);
  tcase_add_test(t, check_model_builds_and_exits);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  SRunner *sr = srunner_create(cli_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
