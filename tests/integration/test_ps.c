/* test_ps.c - PServer mode end to end with the real daemons on loopback:
 * flotilla-pserver and flotilla-trainer processes (found through
 * FL_BUILDDIR), ports picked free on 127.0.0.1, every process bounded by a
 * timeout and killed at the end of its test.
 *
 *   sync        2 pservers + 2 trainers end with the parameters (within
 *               1e-5) of one local process training the same global batch;
 *   async, geo  the Fashion-MNIST MLP reaches 0.85 test accuracy (geo with
 *               its deltas sent as fp16);
 *   ctr         the CTR model beats a constant predictor's AUC clearly;
 *   faults      a trainer killed: sync goes on with the other; a pserver
 *               killed and restarted: it loads its checkpoint, the trainers
 *               retry, and the job completes; a restarted pserver whose
 *               trainers come back a step apart skips to the later step;
 *   bad input   malformed bytes, unknown table, wrong shape or dtype,
 *               oversized request, wrong token: INVALID_ARGUMENT (or
 *               UNAUTHENTICATED), the server stays up, nothing changes.
 *
 * gRPC is only initialised (bad-input test) after the last fork. */
#include <config.h>

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fl_ckpt.h"
#include "free_port.h"
#include "fl_ps_layout.h"
#include "fl_rpc.h"
#include "flotilla.pb-c.h"

#define MAXP 8
#define FMNIST "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

static char g_dir[256];
static char g_bindir[512];
static pid_t g_pids[MAXP];
static int g_np;

static void setup(void) {
  const char *b = getenv("FL_BUILDDIR");
  snprintf(g_bindir, sizeof g_bindir, "%s", b ? b : ".");
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_test_ps.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  g_np = 0;
}

static void teardown(void) {
  char cmd[300];
  for (int i = 0; i < g_np; i++)
    if (g_pids[i] > 0) {
      kill(g_pids[i], SIGKILL);
      waitpid(g_pids[i], NULL, 0);
    }
  if (!getenv("FL_KEEP_TEST_DIR")) {
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void write_file(const char *name, const char *text) {
  char path[512];
  FILE *f;
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* Start a daemon: prog ("flotilla-pserver" / "flotilla-trainer") with the
 * given FLOTILLA_* settings ("NAME=value", NULL-terminated) and extra args,
 * output to <dir>/<log>; killed by alarm after limit_s.  Returns its index. */
static int spawn(const char *prog, const char *log, const char *const *env, const char *arg1,
                 const char *arg2, int limit_s) {
  char bin[600], logp[512];
  pid_t pid;
  snprintf(bin, sizeof bin, "%s/%s", g_bindir, prog);
  snprintf(logp, sizeof logp, "%s/%s", g_dir, log);
  ck_assert_int_lt(g_np, MAXP);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    for (const char *const *e = env; *e; e++) putenv((char *)*e);
    alarm((unsigned)limit_s);
    execl(bin, bin, arg1, arg2, (char *)NULL);
    _exit(127);
  }
  g_pids[g_np] = pid;
  return g_np++;
}

/* Wait for process i up to limit_s: its exit status, or -1 (killed). */
static int wait_for(int i, double limit_s) {
  double end = now_s() + limit_s;
  int status;
  while (now_s() < end) {
    pid_t r = waitpid(g_pids[i], &status, WNOHANG);
    if (r == g_pids[i]) {
      g_pids[i] = 0;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    usleep(20000);
  }
  kill(g_pids[i], SIGKILL);
  waitpid(g_pids[i], NULL, 0);
  g_pids[i] = 0;
  return -1;
}

static void kill9(int i) {
  kill(g_pids[i], SIGKILL);
  waitpid(g_pids[i], NULL, 0);
  g_pids[i] = 0;
}

static char *slurp(const char *log) {
  char path[512];
  FILE *f;
  long n;
  char *buf;
  snprintf(path, sizeof path, "%s/%s", g_dir, log);
  f = fopen(path, "rb");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(buf);
  n = (long)fread(buf, 1, (size_t)n, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Wait until log contains text (up to limit_s). */
static int wait_log(const char *log, const char *text, double limit_s) {
  double end = now_s() + limit_s;
  while (now_s() < end) {
    char *b = slurp(log);
    int found = strstr(b, text) != NULL;
    free(b);
    if (found) return 1;
    usleep(50000);
  }
  return 0;
}

/* The last "<prefix> ... acc1: X" value in log, or -1. */
static double last_value(const char *log, const char *prefix, const char *key) {
  char *b = slurp(log), *p = b, *hit = NULL;
  double v = -1;
  while ((p = strstr(p, prefix)) != NULL) hit = p++;
  if (hit && (hit = strstr(hit, key)) != NULL) v = atof(hit + strlen(key));
  free(b);
  return v;
}

static void dump_logs(const char *const *logs) {
  for (; *logs; logs++) {
    char *b = slurp(*logs);
    size_t n = strlen(b);
    fprintf(stderr, "----- %s (last 3000 bytes)\n%s\n", *logs, n > 3000 ? b + n - 3000 : b);
    free(b);
  }
}

/* ------------------------------------------------------------- a PS job */

typedef struct job {
  int n_ps, n_tr;
  int ps[4], tr[4];
  char list[256];
  char env[12][4][320]; /* per process: up to 4 settings */
} job;

static void job_start(job *j, const char *config, int n_ps, int n_tr, int limit_s) {
  char cfg[512];
  j->n_ps = n_ps;
  j->n_tr = n_tr;
  j->list[0] = '\0';
  snprintf(cfg, sizeof cfg, "--config=%s/%s", g_dir, config);
  for (int s = 0; s < n_ps; s++) {
    char ep[32];
    snprintf(ep, sizeof ep, "%s127.0.0.1:%d", s ? "," : "", fl_test_free_port("127.0.0.1"));
    strcat(j->list, ep);
  }
  for (int s = 0; s < n_ps; s++) {
    char log[32];
    const char *env[6];
    snprintf(j->env[s][0], 320, "FLOTILLA_PSERVERS_IP_PORT_LIST=%s", j->list);
    snprintf(j->env[s][1], 320, "FLOTILLA_PSERVER_ID=%d", s);
    snprintf(j->env[s][2], 320, "FLOTILLA_TRAINERS_NUM=%d", n_tr);
    snprintf(j->env[s][3], 320, "FLOTILLA_ROLE=PSERVER");
    for (int k = 0; k < 4; k++) env[k] = j->env[s][k];
    env[4] = "FLOTILLA_MODE=ps";
    env[5] = NULL;
    snprintf(log, sizeof log, "ps%d.log", s);
    j->ps[s] = spawn("flotilla-pserver", log, env, cfg, NULL, limit_s);
  }
  for (int t = 0; t < n_tr; t++) {
    char log[32];
    const char *env[6];
    snprintf(j->env[4 + t][0], 320, "FLOTILLA_PSERVERS_IP_PORT_LIST=%s", j->list);
    snprintf(j->env[4 + t][1], 320, "FLOTILLA_TRAINER_ID=%d", t);
    snprintf(j->env[4 + t][2], 320, "FLOTILLA_TRAINERS_NUM=%d", n_tr);
    snprintf(j->env[4 + t][3], 320, "FLOTILLA_ROLE=TRAINER");
    for (int k = 0; k < 4; k++) env[k] = j->env[4 + t][k];
    env[4] = "FLOTILLA_MODE=ps";
    env[5] = NULL;
    snprintf(log, sizeof log, "tr%d.log", t);
    j->tr[t] = spawn("flotilla-trainer", log, env, cfg, NULL, limit_s);
  }
}

static void restart_pserver(job *j, int s, const char *config, int limit_s) {
  char cfg[512], log[32];
  const char *env[6];
  snprintf(cfg, sizeof cfg, "--config=%s/%s", g_dir, config);
  for (int k = 0; k < 4; k++) env[k] = j->env[s][k];
  env[4] = "FLOTILLA_MODE=ps";
  env[5] = NULL;
  snprintf(log, sizeof log, "ps%d.log", s);
  j->ps[s] = spawn("flotilla-pserver", log, env, cfg, NULL, limit_s);
}

/* Every process of the job ends with status 0 within limit_s. */
static void job_expect_ok(job *j, double limit_s) {
  static const char *const logs[] = {"ps0.log", "ps1.log", "tr0.log", "tr1.log", NULL};
  int bad = 0;
  for (int t = 0; t < j->n_tr; t++)
    if (g_pids[j->tr[t]] && wait_for(j->tr[t], limit_s) != 0) bad = 1;
  for (int s = 0; s < j->n_ps; s++)
    if (g_pids[j->ps[s]] && wait_for(j->ps[s], 20) != 0) bad = 1;
  if (bad) dump_logs(logs);
  ck_assert_msg(!bad, "a process of the job failed (logs above)");
}

/* ----------------------------------------------------------- checkpoints */

/* Reassemble parameter `name` of n floats from the pservers' newest
 * checkpoints in <dir>/<sub>/pserver-<s>. */
static void ps_param(const char *sub, int n_ps, const char *name, float *out, size_t n) {
  fl_ckpt *ck[4];
  fl_ckpt_record numel, names, r;
  fl_ps_layout *l;
  int64_t bs, step;
  size_t p = 0, found = 0;
  const char *nm;
  for (int s = 0; s < n_ps; s++) {
    char d[600];
    snprintf(d, sizeof d, "%s/%s/pserver-%d", g_dir, sub, s);
    ck_assert_int_eq(fl_ckpt_dir_load_latest(d, &ck[s], &step), FL_OK);
  }
  ck_assert_int_eq(fl_ckpt_find(ck[0], "dense/numel", &numel), FL_OK);
  ck_assert_int_eq(fl_ckpt_find(ck[0], "dense/names", &names), FL_OK);
  ck_assert_int_eq(fl_ckpt_get_i64(ck[0], "ps/block_size", &bs), FL_OK);
  ck_assert_int_eq(fl_ps_layout_build(numel.data, (size_t)numel.shape[0], (uint64_t)bs, n_ps, &l),
                   FL_OK);
  for (nm = names.data; p < l->n_params; p++, nm += strlen(nm) + 1)
    if (!strcmp(nm, name)) break;
  ck_assert_uint_lt(p, l->n_params);
  ck_assert_uint_eq(l->numel[p], n);
  for (size_t b = l->first_block[p]; b < l->first_block[p + 1]; b++) {
    char rn[64];
    snprintf(rn, sizeof rn, "dense/%zu/value", b);
    ck_assert_int_eq(fl_ckpt_find(ck[l->blocks[b].server], rn, &r), FL_OK);
    memcpy(out + l->blocks[b].offset, r.data, l->blocks[b].n * sizeof(float));
    found += l->blocks[b].n;
  }
  ck_assert_uint_eq(found, n);
  fl_ps_layout_free(l);
  for (int s = 0; s < n_ps; s++) fl_ckpt_free(ck[s]);
}

/* ---------------------------------------------------------------- tests */

static const char *sync_job =
    "model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [48, 24]}\n"
    "data:\n  format: synthetic\n  synthetic: {kind: image, train_samples: 1536, test_samples: 256, seed: 3}\n"
    "optimizer: {name: momentum, lr: 0.05, momentum: 0.9}\n"
    "train: {epochs: 2, batch_size: %d, seed: 7, log_interval: 100, num_threads: 1}\n"
    "cluster: {mode: %s, heartbeat_timeout_s: 10}\n"
    "pserver: {dense_block_size: 1000, checkpoint_dir: %s/ps}\n"
    "strategy: {a_sync: false}\n";

START_TEST(test_sync_equals_local) {
  char text[2048];
  job j;
  const char *env[4] = {"FLOTILLA_MODE=local", "FLOTILLA_TRAINERS_NUM=1", NULL, NULL};
  char ckenv[600], lcfg[600];
  static const char *const names[] = {"fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias",
                                      "fc2.weight", "fc2.bias"};
  static const size_t sizes[] = {48 * 64, 48, 24 * 48, 24, 10 * 24, 10};
  fl_ckpt *lck;
  int64_t step;
  double maxdiff = 0;
  int loc;

  /* 2 trainers x batch 16 in sync mode ... */
  snprintf(text, sizeof text, sync_job, 16, "ps", g_dir);
  write_file("sync.yaml", text);
  job_start(&j, "sync.yaml", 2, 2, 120);
  job_expect_ok(&j, 90);
  /* ... against one process with batch 32 (the union of their batches). */
  snprintf(text, sizeof text, sync_job, 32, "local", g_dir);
  write_file("local.yaml", text);
  snprintf(ckenv, sizeof ckenv, "FLOTILLA_CHECKPOINT_DIR=%s/local", g_dir);
  env[2] = ckenv;
  snprintf(lcfg, sizeof lcfg, "--config=%s/local.yaml", g_dir);
  loc = spawn("flotilla-trainer", "local.log", env, lcfg, NULL, 60);
  ck_assert_int_eq(wait_for(loc, 60), 0);
  {
    char d[600];
    snprintf(d, sizeof d, "%s/local", g_dir);
    ck_assert_int_eq(fl_ckpt_dir_load_latest(d, &lck, &step), FL_OK);
  }
  ck_assert_int_eq(step, 2 * (1536 / 32));
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    float *a = malloc(sizes[i] * sizeof *a), *b = malloc(sizes[i] * sizeof *b);
    char rn[64];
    int64_t shape[2];
    ps_param("ps", 2, names[i], a, sizes[i]);
    snprintf(rn, sizeof rn, "param/%s", names[i]);
    shape[0] = (int64_t)(i % 2 ? sizes[i] : (i == 0 ? 48 : i == 2 ? 24 : 10));
    shape[1] = (int64_t)(sizes[i] / (size_t)shape[0]);
    ck_assert_int_eq(fl_ckpt_read(lck, rn, FL_CKPT_F32, i % 2 ? 1 : 2, shape, b), FL_OK);
    for (size_t k = 0; k < sizes[i]; k++)
      if (fabs((double)a[k] - b[k]) > maxdiff) maxdiff = fabs((double)a[k] - b[k]);
    free(a);
    free(b);
  }
  fl_ckpt_free(lck);
  fprintf(stderr, "sync vs local: max |diff| %.3g over 96 steps\n", maxdiff);
  ck_assert_double_le(maxdiff, 1e-5);
}
END_TEST

static const char *fmnist_job =
    "model: {kind: mlp, input_shape: [1, 28, 28], num_classes: 10, hidden: [128]}\n"
    "data: {format: idx}\n"
    "optimizer: {name: adam, lr: 0.001}\n"
    "train: {epochs: 3, batch_size: 64, seed: 1, log_interval: 1000, num_threads: 1,"
    " eval_batch_size: 1000}\n"
    "cluster: {mode: ps, heartbeat_timeout_s: 20}\n"
    "pserver: {dense_block_size: 65536}\n"
    "strategy: {a_sync: true, a_sync_configs: {k_steps: %d}, grad_compression: %s}\n";

static void fmnist_run(int k_steps) {
  char text[1024];
  job j;
  double acc0, acc1;
  /* geo also sends its deltas as fp16 (strategy.grad_compression) */
  snprintf(text, sizeof text, fmnist_job, k_steps, k_steps ? "fp16" : "none");
  write_file("fm.yaml", text);
  job_start(&j, "fm.yaml", 2, 2, 150);
  job_expect_ok(&j, 140);
  acc0 = last_value("tr0.log", "[Epoch 2] test loss", "acc1: ");
  acc1 = last_value("tr1.log", "[Epoch 2] test loss", "acc1: ");
  fprintf(stderr, "%s: Fashion-MNIST test acc1 %.4f (trainer 0), %.4f (trainer 1)\n",
          k_steps ? "geo" : "async", acc0, acc1);
  ck_assert_double_ge(acc0, 0.85);
  ck_assert_double_ge(acc1, 0.85);
}

START_TEST(test_async_fmnist) { fmnist_run(0); }
END_TEST

START_TEST(test_geo_fmnist) { fmnist_run(4); }
END_TEST

static const char *ctr_job =
    "model:\n  kind: ctr\n  num_classes: 2\n  hidden: [32, 16]\n"
    "  ctr: {embedding_dim: 8, sparse_slots: 8, hash_buckets: 100003}\n"
    "data:\n  format: synthetic\n"
    "  synthetic: {kind: ctr, train_samples: 16000, test_samples: 4000, seed: 5}\n"
    "optimizer: {name: adam, lr: 0.003}\n"
    "train: {epochs: 1, batch_size: 128, eval_batch_size: 1000, seed: 1, log_interval: 50,"
    " num_threads: 1}\n"
    "cluster: {mode: ps, heartbeat_timeout_s: 10}\n"
    "pserver:\n  dense_block_size: 4096\n  sparse: {optimizer: {name: adagrad, lr: 0.05}}\n"
    "strategy: {a_sync: false}\n";

START_TEST(test_ctr_auc) {
  job j;
  double auc0, loss0, const0;
  write_file("ctr.yaml", ctr_job);
  job_start(&j, "ctr.yaml", 2, 2, 120);
  job_expect_ok(&j, 100);
  auc0 = last_value("tr0.log", "[Epoch 0] test auc", "auc: ");
  loss0 = last_value("tr0.log", "[Epoch 0] test auc", "logloss: ");
  const0 = last_value("tr0.log", "[Epoch 0] test auc", "auc 0.50000, logloss ");
  fprintf(stderr, "ctr: test AUC %.4f (constant 0.5), log loss %.4f (constant %.4f)\n", auc0,
          loss0, const0);
  ck_assert_double_ge(auc0, 0.65);
  ck_assert_double_lt(loss0, const0 - 0.03);
  /* the pairs of both ranks gathered: both log the same metrics */
  ck_assert_double_eq(last_value("tr1.log", "[Epoch 0] test auc", "auc: "), auc0);
  ck_assert_double_eq(last_value("tr1.log", "[Epoch 0] test auc", "logloss: "), loss0);
}
END_TEST

/* The last `totals:` line of a pserver log without its byte counts (the
 * evaluation's barriers move bytes): step, pushes, pulls, duplicates,
 * invalid, dense updates, sparse rows. */
static void ps_totals(const char *log, char *out, size_t cap) {
  char *b = slurp(log), *p = b, *hit = NULL;
  while ((p = strstr(p, "] totals: ")) != NULL) hit = p++;
  ck_assert_ptr_nonnull(hit);
  char *bytes = strstr(hit, " bytes in"), *dup = strstr(hit, " duplicates"), *end = strchr(hit, '\n');
  ck_assert(bytes && dup && bytes < dup);
  while (bytes > hit && bytes[-1] != ',') bytes--;
  while (dup > hit && dup[-1] != ',') dup--;
  if (end) *end = '\0';
  *bytes = '\0';
  snprintf(out, cap, "%s |%s", hit, dup);
  free(b);
}

/* libsvm data whose test ids are never trained on: a pull that created
 * rows would show in the pserver's totals. */
static void write_disjoint_libsvm(void) {
  char path[512];
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "%s/%s", g_dir, k ? "ro.test.svm" : "ro.train.svm");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < (k ? 150 : 400); i++)
      fprintf(f, "%d %d:1 %d:1 %d:0.5\n", (i * 7 % 5) < 2, 1 + k * 1000 + i % 13,
              20 + k * 1000 + i % 17, 40 + k * 1000 + i % 7);
    fclose(f);
  }
}

static const char *ro_job =
    "model:\n  kind: ctr\n  num_classes: 2\n  hidden: [8]\n"
    "  ctr: {embedding_dim: 4, sparse_slots: 1, hash_buckets: 100003}\n"
    "data: {format: libsvm, train_path: %s/ro.train.svm, test_path: %s/ro.test.svm}\n"
    "optimizer: {name: sgd, lr: 0.05}\n"
    "train: {epochs: 2, batch_size: 32, eval_batch_size: 64, eval: %s, seed: 1,"
    " num_threads: 1}\n"
    "cluster: {mode: ps, heartbeat_timeout_s: 10}\n"
    "pserver: {sparse: {optimizer: {name: adagrad, lr: 0.05}}}\n"
    "strategy: {a_sync: false}\n";

/* Evaluation reads rows read-only: the pserver's totals (steps, pushes,
 * pulls, rows) are the same with and without it. */
START_TEST(test_ctr_eval_read_only) {
  char text[1024], with[512], without[512];
  job j;
  write_disjoint_libsvm();
  for (int e = 0; e < 2; e++) {
    snprintf(text, sizeof text, ro_job, g_dir, g_dir, e ? "true" : "false");
    write_file("ro.yaml", text);
    job_start(&j, "ro.yaml", 1, 1, 60);
    job_expect_ok(&j, 50);
    ps_totals("ps0.log", e ? with : without, sizeof with);
  }
  ck_assert(wait_log("tr0.log", "[Epoch 1] test auc", 1));
  ck_assert_str_eq(with, without);
}
END_TEST

/* The fault tests kill a process at an early mark (batch 20, pserver 1's
 * first interval checkpoint) and need the job to be still running then: on
 * a loaded machine the mark can reach the log a second or more after the
 * step that made it (a delayed tick, a slow fsync), while 2 epochs of this
 * job take about half a second.  With 10 epochs the rest of the run after
 * the mark takes over two seconds even unloaded, more under load. */
#define FAULT_EPOCHS 10

/* 1 when process i has not exited yet (reaps it when it has). */
static int running(int i) {
  if (g_pids[i] <= 0) return 0;
  if (waitpid(g_pids[i], NULL, WNOHANG) == 0) return 1;
  g_pids[i] = 0;
  return 0;
}

static const char *fault_job =
    "model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [32]}\n"
    "data:\n  format: synthetic\n  synthetic: {kind: image, train_samples: 4096, test_samples: 256, seed: 3}\n"
    "optimizer: {name: sgd, lr: 0.05}\n"
    "train: {epochs: %d, batch_size: 16, seed: 7, log_interval: 20, num_threads: 1}\n"
    "cluster: {mode: ps, heartbeat_timeout_s: 2, rpc_timeout_s: 5}\n"
    "pserver: {dense_block_size: 500, checkpoint_dir: %s/ps, checkpoint_interval_steps: 20}\n"
    "strategy: {a_sync: false}\n";

START_TEST(test_trainer_killed) {
  char text[1024];
  job j;
  snprintf(text, sizeof text, fault_job, FAULT_EPOCHS, g_dir);
  write_file("fault.yaml", text);
  job_start(&j, "fault.yaml", 2, 2, 120);
  ck_assert(wait_log("tr1.log", "[Epoch 0, batch 20]", 60));
  ck_assert_msg(running(j.tr[0]) && running(j.tr[1]), "the job ended before the kill");
  kill9(j.tr[1]);
  /* Trainer 0 finishes alone once trainer 1 is declared dead. */
  ck_assert_int_eq(wait_for(j.tr[0], 90), 0);
  ck_assert_int_eq(wait_for(j.ps[0], 20), 0);
  ck_assert_int_eq(wait_for(j.ps[1], 20), 0);
  ck_assert(wait_log("ps0.log", "trainer 1 declared dead", 1));
  ck_assert(wait_log("ps0.log", "every trainer completed", 1));
}
END_TEST

START_TEST(test_pserver_restarted) {
  char text[1024];
  job j;
  snprintf(text, sizeof text, fault_job, FAULT_EPOCHS, g_dir);
  write_file("fault.yaml", text);
  job_start(&j, "fault.yaml", 2, 2, 150);
  ck_assert(wait_log("ps1.log", "(interval_steps)", 60));
  /* A pserver restarted after the trainers completed would wait for them
   * for ever (they never register again): fail here instead. */
  ck_assert_msg(running(j.tr[0]) && running(j.tr[1]) && running(j.ps[1]),
                "the job ended before pserver 1 could be killed");
  kill9(j.ps[1]);
  usleep(700000);
  restart_pserver(&j, 1, "fault.yaml", 120);
  job_expect_ok(&j, 120);
  ck_assert(wait_log("ps1.log", "loaded checkpoint", 1));
  ck_assert(wait_log("ps1.log", "every trainer completed", 1));
}
END_TEST

START_TEST(test_trainer_rejoins) {
  /* Trainer 1 is killed and started again at once: it registers again
   * (a new process), joins at the servers' current step, and the job
   * completes with both. */
  char text[1024], cfg[600];
  const char *env[6];
  job j;
  int again;
  snprintf(text, sizeof text, fault_job, FAULT_EPOCHS, g_dir);
  write_file("fault.yaml", text);
  job_start(&j, "fault.yaml", 2, 2, 150);
  ck_assert(wait_log("tr1.log", "[Epoch 0, batch 20]", 60));
  ck_assert_msg(running(j.tr[0]) && running(j.tr[1]), "the job ended before the kill");
  kill9(j.tr[1]);
  for (int k = 0; k < 4; k++) env[k] = j.env[4 + 1][k];
  env[4] = "FLOTILLA_MODE=ps";
  env[5] = NULL;
  snprintf(cfg, sizeof cfg, "--config=%s/fault.yaml", g_dir);
  again = spawn("flotilla-trainer", "tr1b.log", env, cfg, NULL, 120);
  j.tr[1] = again;
  job_expect_ok(&j, 120);
  ck_assert(wait_log("ps0.log", "trainer 1 registered again (new process)", 1));
  ck_assert(wait_log("tr1b.log", "starting at step", 1));
}
END_TEST

/* ------------------------------------------------------------- bad input */

static grpc_status_code call_raw(grpc_channel *ch, const char *method, const void *bytes,
                                 size_t len, const char *token) {
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice sl = grpc_slice_from_copied_buffer(bytes, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
  fl_rpc_call c;
  grpc_status_code code;
  grpc_slice_unref(sl);
  ck_assert_int_eq(fl_rpc_call_start(&c, ch, cq, method, bb, 10, token, &c), FL_OK);
  grpc_completion_queue_pluck(cq, &c, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  code = c.status;
  fl_rpc_call_end(&c);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  return code;
}

static grpc_status_code call_msg(grpc_channel *ch, const char *method, const ProtobufCMessage *m,
                                 const char *token) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n + 1);
  grpc_status_code code;
  protobuf_c_message_pack(m, buf);
  code = call_raw(ch, method, buf, n, token);
  free(buf);
  return code;
}

/* Start the job's only pserver for n_tr trainers with the config file
 * name holding text, the settings in extra (NULL-ended, at most 3) and the
 * option arg (or NULL); its address goes to list.  Returns its index,
 * once it serves. */
static int one_pserver(const char *name, const char *text, int n_tr, const char *const *extra,
                       const char *arg, char *list, size_t cap) {
  char e0[128], e2[64], cfg[600];
  const char *env[8];
  int k = 0, psi;
  write_file(name, text);
  snprintf(list, cap, "127.0.0.1:%d", fl_test_free_port("127.0.0.1"));
  snprintf(e0, sizeof e0, "FLOTILLA_PSERVERS_IP_PORT_LIST=%s", list);
  snprintf(e2, sizeof e2, "FLOTILLA_TRAINERS_NUM=%d", n_tr);
  snprintf(cfg, sizeof cfg, "--config=%s/%s", g_dir, name);
  env[k++] = e0;
  env[k++] = "FLOTILLA_PSERVER_ID=0";
  env[k++] = e2;
  env[k++] = "FLOTILLA_MODE=ps";
  for (; extra && *extra && k < 7; extra++) env[k++] = *extra;
  env[k] = NULL;
  psi = spawn("flotilla-pserver", "ps0.log", env, cfg, arg, 60);
  ck_assert(wait_log("ps0.log", "serving", 20));
  return psi;
}

/* Whether ch reached READY within limit_s.  A refusal the cases below
 * check must come from the server, not from a connection not made yet;
 * when none comes, the pserver's log says why (pserver index psi). */
static int channel_ready(grpc_channel *ch, int psi, double limit_s) {
  static const char *const logs[] = {"ps0.log", NULL};
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  const double end = now_s() + limit_s;
  grpc_connectivity_state st = grpc_channel_check_connectivity_state(ch, 1);
  while (st != GRPC_CHANNEL_READY && now_s() < end) {
    gpr_timespec wake = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                     gpr_time_from_millis(200, GPR_TIMESPAN));
    grpc_channel_watch_connectivity_state(ch, st, wake, cq, NULL);
    grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    st = grpc_channel_check_connectivity_state(ch, 1);
  }
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  if (st == GRPC_CHANNEL_READY) return 1;
  fprintf(stderr, "no connection to the pserver within %.0f s (it %s)\n", limit_s,
          running(psi) ? "runs" : "exited");
  dump_logs(logs);
  return 0;
}

/* AMP is refused in sync and async ps mode (the servers would apply
 * loss-scaled gradients), before the trainer contacts any server. */
START_TEST(test_amp_refused) {
  char list[96], cfg[600];
  const char *env[6];
  write_file("amp.yaml", "model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [8]}\n"
                         "data: {format: synthetic, synthetic: {kind: image, train_samples: 64, "
                         "test_samples: 16, seed: 1}}\n"
                         "cluster: {mode: ps}\nstrategy: {amp: true, a_sync: false}\n");
  snprintf(list, sizeof list, "FLOTILLA_PSERVERS_IP_PORT_LIST=127.0.0.1:%d", fl_test_free_port("127.0.0.1"));
  snprintf(cfg, sizeof cfg, "--config=%s/amp.yaml", g_dir);
  env[0] = list;
  env[1] = "FLOTILLA_TRAINER_ID=0";
  env[2] = "FLOTILLA_TRAINERS_NUM=1";
  env[3] = "FLOTILLA_ROLE=TRAINER";
  env[4] = "FLOTILLA_MODE=ps";
  env[5] = NULL;
  int tr = spawn("flotilla-trainer", "amp.log", env, cfg, NULL, 30);
  ck_assert_int_eq(wait_for(tr, 30), 1);
  ck_assert(wait_log("amp.log", "strategy.amp needs collective mode or geo ps mode", 1));
  ck_assert(wait_log("amp.log", "in sync ps mode the servers apply raw gradients", 1));
}
END_TEST

START_TEST(test_bad_requests) {
  const char *tok = "s3cret-token";
  char list[64], e1[128], ckdir[600];
  const char *env[3];
  grpc_channel *ch;
  fl_rpc_opts ro;
  Flotilla__RegisterRequest reg = FLOTILLA__REGISTER_REQUEST__INIT;
  Flotilla__DenseParamSpec spec = FLOTILLA__DENSE_PARAM_SPEC__INIT, *sp = &spec;
  Flotilla__SparseTableSpec tab = FLOTILLA__SPARSE_TABLE_SPEC__INIT, *tp = &tab;
  Flotilla__PushDenseRequest push = FLOTILLA__PUSH_DENSE_REQUEST__INIT;
  Flotilla__DenseBlock blk = FLOTILLA__DENSE_BLOCK__INIT, *bp = &blk;
  Flotilla__Tensor t = FLOTILLA__TENSOR__INIT;
  Flotilla__PullSparseRequest ps = FLOTILLA__PULL_SPARSE_REQUEST__INIT;
  Flotilla__PullDenseRequest pd = FLOTILLA__PULL_DENSE_REQUEST__INIT;
  Flotilla__StatsRequest sq = FLOTILLA__STATS_REQUEST__INIT;
  Flotilla__StatsResponse *stats;
  fl_rpc_outbuf *ob;
  fl_rpc_inbuf in = {0};
  grpc_status_code code;
  float init[8] = {1, 2, 3, 4, 5, 6, 7, 8}, g[8] = {1, 1, 1, 1, 1, 1, 1, 1}, big[9];
  float half[4] = {0};
  int64_t shape = 8, bad_shape = 9;
  uint64_t key = 1;
  uint32_t b0 = 0;
  uint8_t junk[64];
  int psi;

  snprintf(e1, sizeof e1, "FLOTILLA_TOKEN=%s", tok);
  snprintf(ckdir, sizeof ckdir, "FLOTILLA_CHECKPOINT_DIR=%s/ck", g_dir);
  env[0] = e1;
  env[1] = ckdir;
  env[2] = NULL;
  psi = one_pserver("bad.yaml", "cluster: {mode: ps}\nstrategy: {a_sync: true}\n"
                    "pserver: {dense_block_size: 8}\n", 1, env, "--max_request_bytes=4096",
                    list, sizeof list);

  fl_rpc_init(); /* after the last fork */
  memset(&ro, 0, sizeof ro);
  ck_assert_int_eq(fl_rpc_channel_create(list, &ro, &ch), FL_OK);
  ck_assert(channel_ready(ch, psi, 20));
  ck_assert_int_eq(fl_rpc_outbuf_create(0, &ob), FL_OK);

  spec.name = "w";
  spec.numel = 8;
  tab.name = "emb";
  tab.dim = 4;
  reg.num_trainers = 1;
  reg.mode = FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC;
  reg.dense_block_size = 8;
  reg.num_servers = 1;
  reg.n_dense = 1;
  reg.dense = &sp;
  reg.n_sparse = 1;
  reg.sparse = &tp;
  /* No token, a wrong token: UNAUTHENTICATED. */
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/Register", &reg.base, NULL),
                   GRPC_STATUS_UNAUTHENTICATED);
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/Register", &reg.base, "nope"),
                   GRPC_STATUS_UNAUTHENTICATED);
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/Register", &reg.base, tok),
                   GRPC_STATUS_OK);
  /* Initial value, then the bad pushes. */
  t.dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  t.n_shape = 1;
  t.shape = &shape;
  t.data.data = (uint8_t *)init;
  t.data.len = sizeof init;
  blk.value = &t;
  push.n_blocks = 1;
  push.blocks = &bp;
  push.kind = FLOTILLA__PUSH_KIND__PUSH_INIT;
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/PushDense", &push.base, tok),
                   GRPC_STATUS_OK);
  push.kind = FLOTILLA__PUSH_KIND__PUSH_GRAD;
  push.step = 1;
  /* malformed bytes */
  memset(junk, 0xff, sizeof junk);
  ck_assert_int_eq(call_raw(ch, "/flotilla.ParameterServer/PushDense", junk, sizeof junk, tok),
                   GRPC_STATUS_INVALID_ARGUMENT);
  /* wrong shape */
  t.data.data = (uint8_t *)big;
  t.data.len = sizeof big;
  t.shape = &bad_shape;
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/PushDense", &push.base, tok),
                   GRPC_STATUS_INVALID_ARGUMENT);
  /* wrong dtype for the byte count (fp16 of 8 elements is 16 bytes) */
  t.shape = &shape;
  t.data.data = (uint8_t *)g;
  t.data.len = sizeof g;
  t.dtype = FLOTILLA__DTYPE__DTYPE_FP16;
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/PushDense", &push.base, tok),
                   GRPC_STATUS_INVALID_ARGUMENT);
  t.dtype = FLOTILLA__DTYPE__DTYPE_BF16;
  t.data.data = (uint8_t *)half;
  t.data.len = 12; /* 6 elements' worth */
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/PushDense", &push.base, tok),
                   GRPC_STATUS_INVALID_ARGUMENT);
  /* unknown block; unknown table */
  t.dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  t.data.data = (uint8_t *)g;
  t.data.len = sizeof g;
  blk.block = 3;
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/PushDense", &push.base, tok),
                   GRPC_STATUS_INVALID_ARGUMENT);
  blk.block = 0;
  ps.table = "no_such_table";
  ps.n_keys = 1;
  ps.keys = &key;
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/PullSparse", &ps.base, tok),
                   GRPC_STATUS_INVALID_ARGUMENT);
  /* oversized: more than --max_request_bytes */
  {
    size_t n = 5000;
    uint8_t *huge = calloc(n, 1);
    ck_assert_int_eq(call_raw(ch, "/flotilla.ParameterServer/PushDense", huge, n, tok),
                     GRPC_STATUS_INVALID_ARGUMENT);
    free(huge);
  }
  /* Unknown method. */
  ck_assert_int_eq(call_raw(ch, "/flotilla.ParameterServer/Nope", junk, 4, tok),
                   GRPC_STATUS_UNIMPLEMENTED);
  /* Still up, and nothing changed: the value is the initial one and no
   * update was applied. */
  pd.n_blocks = 1;
  pd.blocks = &b0;
  ck_assert_int_eq(fl_rpc_unary(ch, "/flotilla.ParameterServer/PullDense", &pd.base, 10, tok, ob,
                                &in, &code, NULL, 0),
                   FL_OK);
  {
    Flotilla__PullDenseResponse *r =
        flotilla__pull_dense_response__unpack(NULL, in.len, in.data);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->n_blocks, 1);
    ck_assert_mem_eq(r->blocks[0]->value->data.data, init, sizeof init);
    flotilla__pull_dense_response__free_unpacked(r, NULL);
  }
  ck_assert_int_eq(fl_rpc_unary(ch, "/flotilla.ParameterServer/Stats", &sq.base, 10, tok, ob, &in,
                                &code, NULL, 0),
                   FL_OK);
  stats = flotilla__stats_response__unpack(NULL, in.len, in.data);
  ck_assert_ptr_nonnull(stats);
  ck_assert_uint_eq(stats->dense_updates, 0);
  ck_assert_uint_ge(stats->invalid, 4);
  ck_assert_uint_eq(stats->sparse_rows, 0);
  flotilla__stats_response__free_unpacked(stats, NULL);
  /* A good push is still applied. */
  t.data.data = (uint8_t *)g;
  ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/PushDense", &push.base, tok),
                   GRPC_STATUS_OK);
  ck_assert_int_eq(fl_rpc_unary(ch, "/flotilla.ParameterServer/Stats", &sq.base, 10, tok, ob, &in,
                                &code, NULL, 0),
                   FL_OK);
  stats = flotilla__stats_response__unpack(NULL, in.len, in.data);
  ck_assert_uint_eq(stats->dense_updates, 1);
  flotilla__stats_response__free_unpacked(stats, NULL);
  /* Checkpoint on request, then load it back (the trainer must register
   * again afterwards, as after a restart). */
  {
    Flotilla__SaveCheckpointRequest sr = FLOTILLA__SAVE_CHECKPOINT_REQUEST__INIT;
    Flotilla__LoadCheckpointRequest lr = FLOTILLA__LOAD_CHECKPOINT_REQUEST__INIT;
    Flotilla__SaveCheckpointResponse *so;
    ck_assert_int_eq(fl_rpc_unary(ch, "/flotilla.ParameterServer/SaveCheckpoint", &sr.base, 10,
                                  tok, ob, &in, &code, NULL, 0),
                     FL_OK);
    so = flotilla__save_checkpoint_response__unpack(NULL, in.len, in.data);
    ck_assert_ptr_nonnull(so);
    ck_assert_ptr_nonnull(strstr(so->path, "/ck/pserver-0/ckpt-"));
    ck_assert_int_eq(access(so->path, R_OK), 0);
    flotilla__save_checkpoint_response__free_unpacked(so, NULL);
    lr.step = -1;
    ck_assert_int_eq(fl_rpc_unary(ch, "/flotilla.ParameterServer/LoadCheckpoint", &lr.base, 10,
                                  tok, ob, &in, &code, NULL, 0),
                     FL_OK);
    ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/PullDense", &pd.base, tok),
                     GRPC_STATUS_FAILED_PRECONDITION);
    ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/Register", &reg.base, tok),
                     GRPC_STATUS_OK);
    ck_assert_int_eq(call_msg(ch, "/flotilla.ParameterServer/PullDense", &pd.base, tok),
                     GRPC_STATUS_OK);
  }
  /* SIGTERM: final checkpoint, clean exit. */
  kill(g_pids[psi], SIGTERM);
  ck_assert_int_eq(wait_for(psi, 20), 0);
  ck_assert(wait_log("ps0.log", "(SIGTERM)", 1));
  fl_rpc_outbuf_free(ob);
  fl_rpc_inbuf_free(&in);
  grpc_channel_destroy(ch);
  fl_rpc_shutdown();
}
END_TEST

/* -------------------------------------- a restart with trainers apart */

#define APART_PS "/flotilla.ParameterServer/"

/* Trainer t of 2 registers with the commit protocol on the only server,
 * declaring its next push's step and its commits. */
static grpc_status_code apart_register(grpc_channel *ch, int t, int64_t step, int64_t committed) {
  Flotilla__RegisterRequest r = FLOTILLA__REGISTER_REQUEST__INIT;
  Flotilla__DenseParamSpec spec = FLOTILLA__DENSE_PARAM_SPEC__INIT, *sp = &spec;
  spec.name = "w";
  spec.numel = 8;
  r.trainer_id = t;
  r.num_trainers = 2;
  r.incarnation = 100 + (uint64_t)t;
  r.mode = FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC;
  r.dense_block_size = 8;
  r.num_servers = 1;
  r.n_dense = 1;
  r.dense = &sp;
  r.step = step;
  r.commits = 1;
  r.committed = committed;
  return call_msg(ch, APART_PS "Register", &r.base, NULL);
}

/* Trainer t's push of kind and step: 8 floats of v. */
static grpc_status_code apart_push(grpc_channel *ch, int t, int kind, int64_t step,
                                   const float *v) {
  Flotilla__PushDenseRequest r = FLOTILLA__PUSH_DENSE_REQUEST__INIT;
  Flotilla__DenseBlock blk = FLOTILLA__DENSE_BLOCK__INIT, *bp = &blk;
  Flotilla__Tensor x = FLOTILLA__TENSOR__INIT;
  int64_t shape = 8;
  x.dtype = FLOTILLA__DTYPE__DTYPE_FP32;
  x.n_shape = 1;
  x.shape = &shape;
  x.data.data = (uint8_t *)v;
  x.data.len = 8 * sizeof(float);
  blk.value = &x;
  r.trainer_id = t;
  r.kind = kind;
  r.step = step;
  r.n_blocks = 1;
  r.blocks = &bp;
  return call_msg(ch, APART_PS "PushDense", &r.base, NULL);
}

/* Trainer t's pull of the block asking for min_step, committing the steps
 * below it (held by the server until min_step applied; 10 s at most). */
static grpc_status_code apart_pull(grpc_channel *ch, int t, int64_t min_step) {
  Flotilla__PullDenseRequest r = FLOTILLA__PULL_DENSE_REQUEST__INIT;
  uint32_t b0 = 0;
  r.trainer_id = t;
  r.n_blocks = 1;
  r.blocks = &b0;
  r.min_step = min_step;
  r.committed = min_step;
  return call_msg(ch, APART_PS "PullDense", &r.base, NULL);
}

START_TEST(test_pserver_restart_trainers_apart) {
  /* The server stands where a restart from an older checkpoint leaves it
   * (step 0, its later steps lost) while trainer 0 had pushed step 6 and
   * trainer 1, its step 5 committed, still waited for this server's
   * answer to its pull of step 6.  Trainer 0 registers again first and
   * repeats its push of 6, then trainer 1 registers and repeats its push
   * of 5 and its pull: the server skipped step 5 with the others, so the
   * pull is answered, and step 6 completes with both trainers.  (Before,
   * trainer 1's push of 5 was taken as its push of step 6 and the pull
   * waited for a step that needed trainer 1's next push: the job hung.) */
  const float init[8] = {1, 2, 3, 4, 5, 6, 7, 8}, g[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  char list[64];
  grpc_channel *ch;
  fl_rpc_opts ro;
  int psi = one_pserver("apart.yaml", "cluster: {mode: ps}\nstrategy: {a_sync: false}\n"
                        "pserver: {dense_block_size: 8}\n", 2, NULL, NULL, list, sizeof list);

  fl_rpc_init(); /* after the last fork */
  memset(&ro, 0, sizeof ro);
  ck_assert_int_eq(fl_rpc_channel_create(list, &ro, &ch), FL_OK);
  ck_assert(channel_ready(ch, psi, 20));

  ck_assert_int_eq(apart_register(ch, 0, 6, 7), GRPC_STATUS_OK);
  ck_assert_int_eq(apart_push(ch, 0, FLOTILLA__PUSH_KIND__PUSH_INIT, 0, init), GRPC_STATUS_OK);
  ck_assert_int_eq(apart_push(ch, 0, FLOTILLA__PUSH_KIND__PUSH_GRAD, 6, g), GRPC_STATUS_OK);
  ck_assert_int_eq(apart_register(ch, 1, 5, 6), GRPC_STATUS_OK);
  ck_assert_int_eq(apart_push(ch, 1, FLOTILLA__PUSH_KIND__PUSH_GRAD, 5, g), GRPC_STATUS_OK);
  ck_assert_int_eq(apart_pull(ch, 1, 6), GRPC_STATUS_OK);
  ck_assert_int_eq(apart_push(ch, 1, FLOTILLA__PUSH_KIND__PUSH_GRAD, 6, g), GRPC_STATUS_OK);
  ck_assert_int_eq(apart_pull(ch, 1, 7), GRPC_STATUS_OK);
  ck_assert_int_eq(apart_pull(ch, 0, 7), GRPC_STATUS_OK);
  ck_assert(wait_log("ps0.log", "block 0: moving from step 0 to step 6 (trainer 0 is ahead)", 1));
  grpc_channel_destroy(ch);
  fl_rpc_shutdown();
  kill9(psi);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ps_integration");
  TCase *tc = tcase_create("daemons");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, test_bad_requests);
  tcase_add_test(tc, test_amp_refused);
  tcase_add_test(tc, test_sync_equals_local);
  tcase_add_test(tc, test_ctr_auc);
  tcase_add_test(tc, test_ctr_eval_read_only);
  tcase_add_test(tc, test_trainer_killed);
  tcase_add_test(tc, test_pserver_restarted);
  tcase_add_test(tc, test_pserver_restart_trainers_apart);
  tcase_add_test(tc, test_trainer_rejoins);
  if (access(FMNIST, R_OK) == 0) {
    tcase_add_test(tc, test_async_fmnist);
    tcase_add_test(tc, test_geo_fmnist);
  } else {
    fprintf(stderr, "%s missing (apt-get install dataset-fashion-mnist): the Fashion-MNIST "
            "runs are left out\n", FMNIST);
  }
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
