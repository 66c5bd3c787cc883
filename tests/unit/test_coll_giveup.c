/* test_coll_giveup.c - a newer elastic round named while rank 0 sends the
 * rank table.  Rank 0 asks fl_coll_options.give_up before each table it
 * sends; here that call (the one not made on create's own thread) turns
 * true after the k-th table, as the agent's world file would mid-send, and
 * every rank's give_up sees the newer round from then on.  Every rank must
 * end its create with FL_EAGAIN or FL_ECLOSED (those that already hold the
 * table too), fast, leaving no fd or thread behind (/proc/self/fd and
 * /proc/self/task counted), and the same processes then form the next
 * world on the same ports and reduce in it.  tcp and the hierarchical
 * composition (2 hosts of 2 ranks: shm within a host; no segment may be
 * left in /dev/shm). */
#include <config.h>

#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "coll_testutil.h"

#define N 4
#define TMO 30.0 /* a give-up must come long before this */

typedef struct plan {
  int k;     /* tables rank 0 sends before the newer round is named */
  int hier;  /* 2 hosts of 2 ranks, hierarchical */
  atomic_int *newer; /* shared by the ranks: the "world file" */
} plan;

typedef struct seam {
  pthread_t creator;
  int calls; /* calls from another thread: rank 0's loop, before each table */
  const plan *p;
} seam;

static char g_logs[N][256];

/* give_up: nonzero once the newer round is named; rank 0's loop thread
 * names it when asked before table k + 1. */
static int newer_round(void *arg) {
  seam *s = arg;
  if (!pthread_equal(pthread_self(), s->creator) && ++s->calls > s->p->k)
    atomic_store(s->p->newer, 1);
  return atomic_load(s->p->newer);
}

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* Exit codes: 0 as expected; 10 create did not give up (or took too
 * long); 11 an fd or thread left; 12 the next world failed; 13 its sum;
 * 14 the test's own set-up failed. */
static int rank_main(ct_job *j, int r, void *arg) {
  const plan *p = arg;
  /* libuv's first loop opens a pipe the process keeps: not a leak */
  uv_loop_t once;
  if (uv_loop_init(&once) != 0 || uv_loop_close(&once) != 0) return 14;
  /* The port stays this process's between the rounds: given back, it
   * could become another test's outgoing port meanwhile. */
  fl_coll_options o = ct_opts(j, r, "auto", TMO);
  int keep = dup(o.listen_fd);
  if (keep < 0) return 14;
  int fds = count_dir("/proc/self/fd") - 1, threads = count_dir("/proc/self/task");
  seam s = {pthread_self(), 0, p};
  o.hierarchical = p->hier;
  o.give_up = newer_round;
  o.give_up_arg = &s;
  fl_coll *c = NULL;
  double t0 = ct_now();
  fl_status st = fl_coll_create(&o, &c);
  double took = ct_now() - t0;
  fprintf(stderr, "TEST rank %d: create %s after %.2f s\n", r, fl_strerror(st), took);
  if (c || (st != FL_EAGAIN && st != FL_ECLOSED) || took > 5.0) return 10;
  fprintf(stderr, "TEST rank %d: %d fds, %d threads (before: %d, %d)\n", r,
          count_dir("/proc/self/fd"), count_dir("/proc/self/task"), fds, threads);
  if (count_dir("/proc/self/fd") != fds || count_dir("/proc/self/task") != threads) return 11;
  o.listen_fd = keep; /* the next world, on the same ports */
  o.give_up = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 12;
  float v[3] = {1, 2, (float)r};
  st = fl_coll_allreduce(c, v, 3, FL_COLL_F32);
  fl_coll_destroy(c);
  if (count_dir("/proc/self/fd") != fds - 1 || count_dir("/proc/self/task") != threads) return 11;
  return st == FL_OK && v[0] == N && v[1] == 2 * N && v[2] == N * (N - 1) / 2 ? 0 : 13;
}

/* The names of /dev/shm/flotilla-* in *out (up to 64), and how many. */
static int shm_names(char (*out)[256]) {
  DIR *d = opendir("/dev/shm");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) && n < 64)
    if (strncmp(e->d_name, "flotilla-", 9) == 0) snprintf(out[n++], 256, "%s", e->d_name);
  if (d) closedir(d);
  return n;
}

/* A segment of the given-up world still in /dev/shm (named now, not at
 * the start), or NULL. */
static const char *shm_left(char (*before)[256], int nb) {
  static char now[64][256];
  int n = shm_names(now);
  for (int i = 0; i < n; i++) {
    int old = 0;
    for (int b = 0; b < nb && !old; b++) old = strcmp(now[i], before[b]) == 0;
    if (!old) return now[i];
  }
  return NULL;
}

static void run(int k, int hier) {
  static char shm_before[64][256];
  int nb = shm_names(shm_before);
  const char *one[N] = {"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1"};
  const char *two[N] = {"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"};
  for (int r = 0; r < N; r++)
    snprintf(g_logs[r], sizeof g_logs[r], "/tmp/fl_coll_giveup_%d_%d.log", (int)getpid(), r);
  atomic_int *newer = ct_shared(sizeof *newer);
  ck_assert_ptr_nonnull(newer);
  atomic_init(newer, 0);
  plan p = {k, hier, newer};
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, N, hier ? two : one), 0);
  double t0 = ct_now();
  ct_spawn(&j, rank_main, &p, NULL, g_logs);
  ct_wait(&j, 30);
  fprintf(stderr, "k=%d hier=%d: %.2f s\n", k, hier, ct_now() - t0);
  char want[96];
  snprintf(want, sizeof want, "after %d of %d rank tables were sent", k, N - 1);
  int said = ct_file_has(g_logs[0], want);
  for (int r = 0; r < N; r++) {
    ck_assert_msg(j.status[r] == 0, "k %d: rank %d ended with %d (10: no give-up, 11: an fd or "
                  "thread left, 12: no next world, 13: a wrong sum, 14: set-up; log %s)",
                  k, r, j.status[r], g_logs[r]);
    unlink(g_logs[r]);
  }
  ck_assert_msg(said, "rank 0 did not say it stopped after %d tables", k);
  const char *left = shm_left(shm_before, nb);
  ck_assert_msg(!left, "k %d: /dev/shm/%s left behind", k, left ? left : "");
  munmap(newer, sizeof *newer);
}

START_TEST(named_before_first_table) { run(0, 0); }
END_TEST

START_TEST(named_after_first_table) { run(1, 0); }
END_TEST

START_TEST(named_after_second_table) { run(2, 0); }
END_TEST

START_TEST(named_mid_send_hierarchical) { run(2, 1); }
END_TEST

int main(void) {
  Suite *s = suite_create("coll_giveup");
  TCase *t = tcase_create("giveup");
  tcase_set_timeout(t, 40);
  tcase_add_test(t, named_before_first_table);
  tcase_add_test(t, named_after_first_table);
  tcase_add_test(t, named_after_second_table);
  tcase_add_test(t, named_mid_send_hierarchical);
  suite_add_tcase(s, t);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf == 0 ? 0 : 1;
}
