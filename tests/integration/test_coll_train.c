/* test_coll_train.c - collective mode of the real flotilla-trainer.
 *
 * N ranks with micro-batch B train the MLP for 20 steps; one process in
 * local mode with micro-batch N*B trains the same job; the parameters in
 * the final checkpoints must agree within 1e-5.  Each rank's shard takes
 * the positions r, r+N, ... of the same shuffled order, so the N first
 * batches together are the single run's first batch, and the mean of the
 * ranks' mean gradients is the single run's gradient.  Variants: fusion
 * off / on (one layer per bucket) / on (one bucket), gradient merge
 * k_steps 1 and 2, tcp, shm and hierarchical (2 nodes on 127.0.0.2 and
 * 127.0.0.3), 2 to 4 ranks, two rings; fp16 compression agrees within a
 * looser bound.  Also: a collective run stopped at step 10 and resumed
 * gives the bits of an uninterrupted run (with allreduce_algorithm auto:
 * the same algorithms, from the checkpoint, without a second probe), and a rank killed mid-run makes
 * the others exit 1 naming it within the collective timeout. */
#include <config.h>

#include <arpa/inet.h>
#include <check.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fl_ckpt.h"
#include "free_port.h"

#define B 8
#define STEPS 20
#define MAXR 4

static char g_dir[256];
static char g_bin[512];

static void setup(void) {
  const char *b = getenv("FL_BUILDDIR");
  snprintf(g_bin, sizeof g_bin, "%s/flotilla-trainer", b ? b : ".");
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_coll_train.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

typedef struct variant {
  const char *name;
  int n;            /* ranks */
  int k;            /* gradient merge k_steps */
  int fuse;         /* fuse_all_reduce_ops */
  int fuse_mb, fuse_layers;
  const char *backend;
  int hier;         /* ranks on 127.0.0.2 / 127.0.0.3 alternately */
  int rings;
  const char *compression;
  int unbounded; /* train far past STEPS (the killed-rank test), 5 s timeout */
  const char *algorithm; /* strategy.allreduce_algorithm; NULL: auto */
} variant;

/* Write the job for micro-batch `batch`; returns its path in out. */
static void write_job(const variant *v, int batch, const char *ckdir, const char *tag, char *out,
                      size_t cap) {
  snprintf(out, cap, "%s/%s.yaml", g_dir, tag);
  FILE *f = fopen(out, "w");
  ck_assert_ptr_nonnull(f);
  /* 4 steps per epoch, so 20 steps cross 4 reshuffles. */
  long samples = (long)v->n * B * v->k * 4;
  fprintf(f,
          "model:\n  kind: mlp\n  input_shape: [1, 6, 6]\n  num_classes: 5\n  hidden: [24, 16]\n"
          "data:\n  format: synthetic\n  synthetic:\n    train_samples: %ld\n    test_samples: 40\n"
          "optimizer:\n  name: momentum\n  lr: 0.05\n"
          "train:\n  epochs: %d\n  batch_size: %d\n  max_steps: %d\n  eval: false\n"
          "  log_interval: 1000\n  num_threads: 1\n  checkpoint_dir: %s\n"
          "cluster:\n  collective_timeout_s: %d\n"
          "strategy:\n  gradient_merge: %s\n  gradient_merge_configs:\n    k_steps: %d\n"
          "    avg: true\n  fuse_all_reduce_ops: %s\n  fuse_grad_size_in_MB: %d\n"
          "  fuse_grad_size_in_TFLOPS: %d\n  use_hierarchical_allreduce: %s\n"
          "  nccl_comm_num: %d\n  grad_compression: %s\n  allreduce_algorithm: %s\n",
          samples, v->unbounded ? 1000000 : 100, batch, v->unbounded ? 0 : STEPS, ckdir, v->unbounded ? 5 : 20, v->k > 1 ? "true" : "false", v->k,
          v->fuse ? "true" : "false", v->fuse_mb ? v->fuse_mb : 32,
          v->fuse_layers ? v->fuse_layers : 50, v->hier ? "true" : "false",
          v->rings ? v->rings : 1, v->compression ? v->compression : "none",
          v->algorithm ? v->algorithm : "auto");
  fclose(f);
}

typedef struct run_set {
  int n;
  pid_t pid[MAXR];
  int status[MAXR];
  double end[MAXR];
  char eps[MAXR][40];
  char err[MAXR][300];
} run_set;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Start n ranks of job (n == 1 with mode local when `local`). */
static void start(run_set *rs, int n, int local, int hier, const char *job, const char *extra,
                  const char *backend) {
  memset(rs, 0, sizeof *rs);
  rs->n = n;
  char list[MAXR * 40] = "";
  for (int r = 0; r < n; r++) {
    const char *host = hier ? (r % 2 ? "127.0.0.3" : "127.0.0.2") : "127.0.0.1";
    snprintf(rs->eps[r], sizeof rs->eps[r], "%s:%d", host, fl_test_free_port(host));
    if (r) strcat(list, ",");
    strcat(list, rs->eps[r]);
  }
  for (int r = 0; r < n; r++) {
    snprintf(rs->err[r], sizeof rs->err[r], "%s/rank%d.%s.err", g_dir, r, local ? "l" : "c");
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
      char id[16], num[16];
      snprintf(id, sizeof id, "%d", r);
      snprintf(num, sizeof num, "%d", n);
      setenv("FLOTILLA_MODE", local ? "local" : "collective", 1);
      setenv("FLOTILLA_TRAINER_ID", id, 1);
      setenv("FLOTILLA_TRAINERS_NUM", num, 1);
      unsetenv("FLOTILLA_TOKEN_FILE");
      if (local) {
        unsetenv("FLOTILLA_TRAINER_ENDPOINTS");
        unsetenv("FLOTILLA_CURRENT_ENDPOINT");
        unsetenv("FLOTILLA_TOKEN");
      } else {
        setenv("FLOTILLA_TRAINER_ENDPOINTS", list, 1);
        setenv("FLOTILLA_CURRENT_ENDPOINT", rs->eps[r], 1);
        setenv("FLOTILLA_TOKEN", "coll-train-token", 1);
      }
      if (backend)
        setenv("FLOTILLA_COLLECTIVE_BACKEND", backend, 1);
      else
        unsetenv("FLOTILLA_COLLECTIVE_BACKEND");
      setenv("FLOTILLA_LOG_LEVEL", "info", 1);
      if (!freopen("/dev/null", "w", stdout) || !freopen(rs->err[r], "w", stderr)) _exit(126);
      alarm(120);
      if (extra)
        execl(g_bin, g_bin, "--config", job, extra, (char *)NULL);
      else
        execl(g_bin, g_bin, "--config", job, (char *)NULL);
      _exit(127);
    }
    rs->pid[r] = p;
  }
}

static void finish(run_set *rs, double t0) {
  for (int r = 0; r < rs->n; r++) {
    int ws;
    ck_assert_int_eq(waitpid(rs->pid[r], &ws, 0), rs->pid[r]);
    rs->status[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    rs->end[r] = now_s() - t0;
  }
}

static void dump_err(const char *path) {
  FILE *f = fopen(path, "r");
  char line[512];
  if (!f) return;
  while (fgets(line, sizeof line, f)) fprintf(stderr, "  | %s", line);
  fclose(f);
}

static void run_ok(int n, int local, int hier, const char *job, const char *extra,
                   const char *backend) {
  run_set rs;
  start(&rs, n, local, hier, job, extra, backend);
  finish(&rs, now_s());
  for (int r = 0; r < n; r++)
    if (rs.status[r] != 0) {
      fprintf(stderr, "rank %d of %s exited %d:\n", r, job, rs.status[r]);
      dump_err(rs.err[r]);
      ck_abort_msg("a trainer failed");
    }
}

/* Largest |a - b| over every param/ record of two checkpoint dirs. */
static double max_diff(const char *da, const char *dbb, int64_t want_step) {
  fl_ckpt *a = NULL, *b = NULL;
  int64_t sa = 0, sb = 0;
  ck_assert_int_eq(fl_ckpt_dir_load_latest(da, &a, &sa), FL_OK);
  ck_assert_int_eq(fl_ckpt_dir_load_latest(dbb, &b, &sb), FL_OK);
  ck_assert_int_eq(sa, want_step);
  ck_assert_int_eq(sb, want_step);
  double worst = 0;
  int seen = 0;
  for (size_t i = 0; i < fl_ckpt_count(a); i++) {
    fl_ckpt_record ra, rb;
    ck_assert_int_eq(fl_ckpt_record_at(a, i, &ra), FL_OK);
    if (strncmp(ra.name, "param/", 6) != 0) continue;
    ck_assert_int_eq(fl_ckpt_find(b, ra.name, &rb), FL_OK);
    ck_assert_uint_eq(ra.nbytes, rb.nbytes);
    const float *x = ra.data, *y = rb.data;
    for (size_t j = 0; j < ra.nbytes / sizeof(float); j++) {
      double d = fabs((double)x[j] - (double)y[j]);
      if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
    }
    seen++;
  }
  ck_assert_int_ge(seen, 6); /* 3 layers: weight and bias each */
  fl_ckpt_free(a);
  fl_ckpt_free(b);
  return worst;
}

static double compare(const variant *v) {
  char job1[300], jobn[300], ck1[300], ckn[300];
  snprintf(ck1, sizeof ck1, "%s/%s-single", g_dir, v->name);
  snprintf(ckn, sizeof ckn, "%s/%s-ranks", g_dir, v->name);
  write_job(v, v->n * B, ck1, "single", job1, sizeof job1);
  write_job(v, B, ckn, "ranks", jobn, sizeof jobn);
  run_ok(1, 1, 0, job1, NULL, NULL);
  run_ok(v->n, 0, v->hier, jobn, NULL, v->backend);
  return max_diff(ck1, ckn, STEPS);
}

#define EQUIV(tname, ...)                                                                          \
  START_TEST(tname) {                                                                              \
    variant v = {#tname, __VA_ARGS__};                                                             \
    double d = compare(&v);                                                                        \
    ck_assert_msg(d <= 1e-5, "%s: parameters differ by %g after %d steps", #tname, d, STEPS);    \
  }                                                                                                \
  END_TEST

/*    name                        n  k  fuse MB layers backend hier rings compression unbounded algorithm */
EQUIV(tcp_2_ranks_no_fusion,      2, 1, 0, 0, 0, "tcp", 0, 1, NULL, 0, NULL)
EQUIV(shm_2_ranks_layer_buckets,  2, 1, 1, 1, 1, "shm", 0, 1, NULL, 0, NULL)
EQUIV(tcp_2_ranks_merge_fused,    2, 2, 1, 0, 0, "tcp", 0, 1, NULL, 0, NULL)
EQUIV(shm_2_ranks_merge_no_fusion, 2, 2, 0, 0, 0, "shm", 0, 1, NULL, 0, NULL)
EQUIV(hier_4_ranks_2_nodes,       4, 1, 1, 1, 2, NULL, 1, 1, NULL, 0, NULL)
EQUIV(tcp_3_ranks_2_rings_merge,  3, 2, 1, 1, 1, "tcp", 0, 2, NULL, 0, NULL)

START_TEST(fp16_compression_close) {
  variant v = {"fp16", 2, 1, 1, 0, 0, "tcp", 0, 1, "fp16", 0, NULL};
  double d = compare(&v);
  ck_assert_msg(d > 0 && d <= 2e-2, "fp16 on the wire: parameters differ by %g", d);
}
END_TEST

START_TEST(resume_is_bitwise) {
  variant v = {"resume", 2, 1, 1, 1, 1, "tcp", 0, 1, NULL, 0, NULL};
  char joba[300], jobb[300], cka[300], ckb[300];
  snprintf(cka, sizeof cka, "%s/straight", g_dir);
  snprintf(ckb, sizeof ckb, "%s/resumed", g_dir);
  write_job(&v, B, cka, "a", joba, sizeof joba);
  write_job(&v, B, ckb, "b", jobb, sizeof jobb);
  run_ok(2, 0, 0, joba, NULL, "tcp");
  run_ok(2, 0, 0, jobb, "--max-steps=10", "tcp");
  run_ok(2, 0, 0, jobb, "--resume", "tcp");
  ck_assert_msg(max_diff(cka, ckb, STEPS) == 0.0, "a resumed collective run differs");
}
END_TEST

/* The newest checkpoint of dir: its collective/tuning record into out
 * (returns its length) and the bytes of its param/ records into *params. */
static size_t ckpt_tuning(const char *dir, uint8_t *out, size_t cap, size_t *params) {
  fl_ckpt *c = NULL;
  fl_ckpt_record rec;
  ck_assert_int_eq(fl_ckpt_dir_load_latest(dir, &c, NULL), FL_OK);
  ck_assert_int_eq(fl_ckpt_find(c, "collective/tuning", &rec), FL_OK);
  ck_assert_uint_le(rec.nbytes, cap);
  memcpy(out, rec.data, rec.nbytes);
  *params = 0;
  for (size_t i = 0; i < fl_ckpt_count(c); i++) {
    fl_ckpt_record r;
    ck_assert_int_eq(fl_ckpt_record_at(c, i, &r), FL_OK);
    if (strncmp(r.name, "param/", 6) == 0) *params += r.nbytes;
  }
  fl_ckpt_free(c);
  return rec.nbytes;
}

static int file_has(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  char line[2048];
  int hit = 0;
  while (f && !hit && fgets(line, sizeof line, f)) hit = strstr(line, needle) != NULL;
  if (f) fclose(f);
  return hit;
}

/* allreduce_algorithm auto across a resume: 3 ranks (the algorithms add
 * in different orders there) stopped at step 10 keep the probe's tuning
 * in the checkpoint; resumed, rank 0 takes it instead of probing, and
 * the bits equal an uninterrupted run of the algorithm that tuning gives
 * the job's one bucket.  The tuning blob (version 2): the per-size table
 * from byte 88, one algorithm per power-of-two bin. */
START_TEST(resume_keeps_auto_tuning) {
  static const char *const names[] = {"auto", "ring", "halving_doubling", "tree"};
  variant v = {"resume_auto", 3, 1, 1, 32, 50, "tcp", 0, 1, NULL, 0, "auto"};
  char joba[300], jobb[300], cka[300], ckb[300], err0[300];
  uint8_t t1[128], t2[128];
  size_t params = 0;
  snprintf(cka, sizeof cka, "%s/straight", g_dir);
  snprintf(ckb, sizeof ckb, "%s/resumed", g_dir);
  write_job(&v, B, ckb, "b", jobb, sizeof jobb);
  run_ok(3, 0, 0, jobb, "--max-steps=10", "tcp");
  size_t n1 = ckpt_tuning(ckb, t1, sizeof t1, &params);
  ck_assert_uint_eq(n1, 128);
  ck_assert_uint_eq(t1[4], 2);
  run_ok(3, 0, 0, jobb, "--resume", "tcp");
  snprintf(err0, sizeof err0, "%s/rank0.c.err", g_dir);
  ck_assert_msg(file_has(err0, "allreduce algorithms from the checkpoint"),
                "the resumed rank 0 did not take the checkpoint's tuning");
  ck_assert(!file_has(err0, "network probe"));
  ck_assert_uint_eq(ckpt_tuning(ckb, t2, sizeof t2, &params), n1);
  ck_assert_int_eq(memcmp(t1, t2, n1), 0);
  int bin = 0;
  while (((size_t)1 << bin) < params) bin++;
  int algo = t1[88 + bin];
  ck_assert_int_ge(algo, 1);
  ck_assert_int_le(algo, 3);
  v.algorithm = names[algo];
  write_job(&v, B, cka, "a", joba, sizeof joba);
  run_ok(3, 0, 0, joba, NULL, "tcp");
  ck_assert_msg(max_diff(cka, ckb, STEPS) == 0.0, "a resumed run (%s) differs", names[algo]);
}
END_TEST

START_TEST(killed_rank_named) {
  variant v = {"killed", 3, 1, 1, 0, 0, "tcp", 0, 1, NULL, 1, NULL};
  char job[300], ck[300];
  snprintf(ck, sizeof ck, "%s/killed", g_dir);
  write_job(&v, B, ck, "killed", job, sizeof job);
  run_set rs;
  double t0 = now_s();
  start(&rs, 3, 0, 0, job, NULL, "tcp");
  sleep(2);
  kill(rs.pid[1], SIGKILL);
  double t_kill = now_s() - t0;
  finish(&rs, t0);
  char who[80];
  snprintf(who, sizeof who, "rank 1 (%s)", rs.eps[1]);
  for (int r = 0; r < 3; r += 2) {
    ck_assert_msg(rs.status[r] == 1, "rank %d exited %d", r, rs.status[r]);
    ck_assert_msg(rs.end[r] - t_kill < 5.0 + 3.0, "rank %d took %.1f s after the kill", r,
                  rs.end[r] - t_kill);
    FILE *e = fopen(rs.err[r], "r");
    ck_assert_ptr_nonnull(e);
    static char buf[1 << 16];
    fseek(e, 0, SEEK_END);
    long size = ftell(e);
    fseek(e, size > 60000 ? size - 60000 : 0, SEEK_SET); /* the error is at the end */
    size_t m = fread(buf, 1, sizeof buf - 1, e);
    fclose(e);
    buf[m] = '\0';
    ck_assert_msg(strstr(buf, who) != NULL, "rank %d does not name %s; its log ends:\n%s", r, who,
                  m > 1500 ? buf + m - 1500 : buf);
  }
}
END_TEST

#define ADD(name)                                                                                  \
  do {                                                                                             \
    TCase *t = tcase_create(#name);                                                                \
    tcase_add_checked_fixture(t, setup, teardown);                                                 \
    tcase_set_timeout(t, 240);                                                                     \
    tcase_add_test(t, name);                                                                       \
    suite_add_tcase(s, t);                                                                         \
  } while (0)

int main(void) {
  Suite *s = suite_create("coll_train");
  ADD(tcp_2_ranks_no_fusion);
  ADD(shm_2_ranks_layer_buckets);
  ADD(tcp_2_ranks_merge_fused);
  ADD(shm_2_ranks_merge_no_fusion);
  ADD(hier_4_ranks_2_nodes);
  ADD(tcp_3_ranks_2_rings_merge);
  ADD(fp16_compression_close);
  ADD(resume_is_bitwise);
  ADD(resume_keeps_auto_tuning);
  ADD(killed_rank_named);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
