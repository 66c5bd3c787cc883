/* test_coll_faults.c - the collective engine under failure: a stranger
 * with the wrong token cannot join (and is logged with its address), a
 * killed rank (tcp, shm, hierarchical; leader or not; rank 0 too), a hung
 * rank (SIGSTOP), a rank that stays alive but never arrives, a rank that
 * never starts, a rank that finishes early, and mismatched collectives.
 * Every surviving rank must fail with an error naming the culprit, within
 * the collective timeout (2 s here) plus a small margin, never hang.
 * Elastic paths: a rendezvous given up or timed out, then the next round
 * joined in the same process; a peer that dies in the new world's state
 * transfer (the trainers keep their state for the next round). */
#include <config.h>

#include <check.h>

#include "coll_testutil.h"
#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_sync_collective.h"
#include "fl_trainer.h"

#define TMO 2.0
#define L1 "127.0.0.1"

static char g_logs[CT_MAX_RANKS + 1][256];

static void make_logs(int n) {
  for (int r = 0; r <= n && r <= CT_MAX_RANKS; r++)
    snprintf(g_logs[r], sizeof(g_logs[r]), "/tmp/fl_coll_faults_%d_%d.log", (int)getpid(), r);
}

static void drop_logs(int n) {
  for (int r = 0; r <= n && r <= CT_MAX_RANKS; r++) unlink(g_logs[r]);
}

typedef struct plan {
  const char *backend;
  int hier;
  int victim;      /* rank that misbehaves */
  int action;      /* see below */
  int at;          /* after this many allreduces */
  double delay_s;  /* start delay of rank 1 (wrong-token test) */
} plan;

enum { ACT_KILL = 1, ACT_STOP, ACT_IDLE, ACT_FINISH, ACT_MISMATCH };

/* Exit codes: 0 = the run ended as this rank expects; 3 = a collective
 * failed (what survivors of a fault must report); 10 = create failed. */
static int rank_loop(ct_job *j, int r, void *arg) {
  plan *p = arg;
  fl_coll_options o = ct_opts(j, r, p->backend, TMO);
  o.hierarchical = p->hier;
  fl_coll *c = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 10;
  float v[1000];
  int rc = 0;
  for (int it = 0; it < 200; it++) {
    if (r == p->victim && it == p->at) {
      if (p->action == ACT_KILL) raise(SIGKILL);
      if (p->action == ACT_STOP) raise(SIGSTOP);
      if (p->action == ACT_IDLE) sleep(30);
      if (p->action == ACT_FINISH) break;
      if (p->action == ACT_MISMATCH) {
        if (fl_coll_broadcast(c, v, sizeof(v), 0) != FL_OK) rc = 3;
        break;
      }
    }
    for (int i = 0; i < 1000; i++) v[i] = (float)(r + i);
    if (fl_coll_allreduce(c, v, 1000, FL_COLL_F32) != FL_OK) {
      rc = 3;
      break;
    }
    usleep(2000);
  }
  fl_coll_destroy(c);
  return rc;
}

static void expect_named(ct_job *j, int n, int victim, const char *what, double limit_s) {
  char who[96];
  snprintf(who, sizeof(who), "rank %d (%s:%u) %s", victim, j->eps[victim].host,
           (unsigned)j->eps[victim].port, what);
  for (int r = 0; r < n; r++) {
    if (r == victim) continue;
    ck_assert_msg(j->status[r] == 3, "rank %d: status %d, expected a failed collective", r,
                  j->status[r]);
    ck_assert_msg(ct_file_has(g_logs[r], who), "rank %d's log does not say \"%s\"", r, who);
    ck_assert_msg(j->elapsed[r] < limit_s, "rank %d took %.1f s", r, j->elapsed[r]);
  }
}

static void run_fault(int n, const char *const *hosts, plan *p, double deadline) {
  ct_job j;
  make_logs(n);
  ck_assert_int_eq(ct_job_init(&j, n, hosts), 0);
  ct_spawn(&j, rank_loop, p, NULL, g_logs);
  ct_wait_victim(&j, deadline, p->victim);
  const char *what = p->action == ACT_KILL     ? "closed the connection"
                     : p->action == ACT_STOP   ? "did not respond within"
                     : p->action == ACT_IDLE   ? "did not arrive at collective"
                     : p->action == ACT_FINISH ? "finished after"
                                               : "sent broadcast";
  /* The run itself takes about 1 s before the fault; then at most the
   * timeout and the heartbeat grace. */
  expect_named(&j, n, p->victim, what, p->action == ACT_STOP ? 12.0 : 10.0);
  drop_logs(n);
}

START_TEST(killed_rank_tcp) {
  const char *h[] = {L1, L1, L1, L1};
  plan p = {"tcp", 0, 2, ACT_KILL, 20, 0};
  run_fault(4, h, &p, 30);
}
END_TEST

START_TEST(killed_rank_0_tcp) {
  const char *h[] = {L1, L1, L1};
  plan p = {"tcp", 0, 0, ACT_KILL, 10, 0};
  run_fault(3, h, &p, 30);
}
END_TEST

START_TEST(killed_rank_shm) {
  const char *h[] = {L1, L1, L1};
  plan p = {"shm", 0, 1, ACT_KILL, 15, 0};
  run_fault(3, h, &p, 30);
}
END_TEST

START_TEST(killed_leader_hier) {
  const char *h[] = {"127.0.0.2", "127.0.0.3", "127.0.0.2", "127.0.0.3"};
  plan p = {"auto", 1, 1, ACT_KILL, 12, 0};
  run_fault(4, h, &p, 30);
}
END_TEST

START_TEST(killed_member_hier) {
  const char *h[] = {"127.0.0.2", "127.0.0.3", "127.0.0.2", "127.0.0.3"};
  plan p = {"auto", 1, 3, ACT_KILL, 12, 0};
  run_fault(4, h, &p, 30);
}
END_TEST

START_TEST(hung_rank_tcp) {
  const char *h[] = {L1, L1, L1};
  plan p = {"tcp", 0, 1, ACT_STOP, 10, 0};
  run_fault(3, h, &p, 14);
}
END_TEST

START_TEST(hung_rank_shm) {
  const char *h[] = {L1, L1, L1};
  plan p = {"shm", 0, 2, ACT_STOP, 10, 0};
  run_fault(3, h, &p, 14);
}
END_TEST

START_TEST(idle_rank_never_arrives) {
  const char *h[] = {L1, L1, L1};
  plan p = {"tcp", 0, 1, ACT_IDLE, 5, 0};
  run_fault(3, h, &p, 14);
}
END_TEST

START_TEST(rank_finishes_early) {
  const char *h[] = {L1, L1, L1};
  plan p = {"tcp", 0, 2, ACT_FINISH, 5, 0};
  ct_job j;
  make_logs(3);
  ck_assert_int_eq(ct_job_init(&j, 3, h), 0);
  ct_spawn(&j, rank_loop, &p, NULL, g_logs);
  ct_wait(&j, 20);
  /* The early rank itself ends cleanly or with the verdict; the others
   * must name it. */
  expect_named(&j, 3, 2, "finished after 5 collectives", 10.0);
  drop_logs(3);
}
END_TEST

START_TEST(mismatched_collectives) {
  const char *h[] = {L1, L1};
  plan p = {"tcp", 0, 0, ACT_MISMATCH, 3, 0};
  ct_job j;
  make_logs(2);
  ck_assert_int_eq(ct_job_init(&j, 2, h), 0);
  ct_spawn(&j, rank_loop, &p, NULL, g_logs);
  ct_wait(&j, 20);
  ck_assert_int_eq(j.status[0], 3);
  ck_assert_int_eq(j.status[1], 3);
  ck_assert(ct_file_has(g_logs[0], "collective mismatch") ||
            ct_file_has(g_logs[1], "collective mismatch"));
  drop_logs(2);
}
END_TEST

/* ------------------------------------------------------------ tokens */

typedef struct tok_plan {
  int with_rank1;  /* the legitimate rank 1 runs too */
  int intruder_fd; /* the intruder's own listening socket */
  fl_endpoint eps[2];
} tok_plan;

static tok_plan g_tok;

static int tok_rank(ct_job *j, int r, void *arg) {
  (void)arg;
  if (r == 1) usleep(600000); /* the intruder gets there first */
  fl_coll_options o = ct_opts(j, r, "tcp", TMO);
  fl_coll *c = NULL;
  fl_status st = fl_coll_create(&o, &c);
  if (!g_tok.with_rank1) return st == FL_ETIMEDOUT ? 0 : 4;
  if (st != FL_OK) return 10;
  float v[5] = {1, 2, 3, 4, (float)r};
  st = fl_coll_allreduce(c, v, 5, FL_COLL_F32);
  fl_coll_destroy(c);
  return st == FL_OK && v[0] == 2 && v[4] == 1 ? 0 : 5;
}

static int intruder(void) {
  fl_coll_options o = fl_coll_options_default();
  o.rank = 1;
  o.world_size = 2;
  o.endpoints = g_tok.eps;
  o.listen_fd = g_tok.intruder_fd;
  o.token = "not-the-token";
  o.backend = "tcp";
  o.timeout_s = TMO;
  fl_coll *c = NULL;
  fl_status st = fl_coll_create(&o, &c);
  if (c) fl_coll_destroy(c);
  return st == FL_EAUTH ? 0 : 6;
}

static void run_token(int with_rank1) {
  const char *h[] = {L1, L1, L1};
  ct_job j, tmp;
  make_logs(2);
  ck_assert_int_eq(ct_job_init(&j, 2, h), 0);
  /* The intruder listens on a port of its own; it claims rank 1. */
  ck_assert_int_eq(ct_job_init(&tmp, 1, h), 0);
  g_tok.with_rank1 = with_rank1;
  g_tok.intruder_fd = tmp.fds[0];
  g_tok.eps[0] = j.eps[0];
  g_tok.eps[1] = tmp.eps[0];
  pid_t ip = fork();
  if (ip == 0) {
    int lf = open(g_logs[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (lf >= 0) dup2(lf, 2);
    _exit(intruder());
  }
  close(tmp.fds[0]);
  int start[2] = {1, with_rank1};
  ct_spawn(&j, tok_rank, NULL, start, g_logs);
  ct_wait(&j, 20);
  int ws = 0;
  waitpid(ip, &ws, 0);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the intruder was not refused (status %d)",
                ws);
  ck_assert_int_eq(j.status[0], 0);
  if (with_rank1) ck_assert_int_eq(j.status[1], 0);
  ck_assert_msg(ct_file_has(g_logs[0], "(claiming rank 1): wrong token"),
                "rank 0 did not log the refused peer");
  ck_assert_msg(ct_file_has(g_logs[0], "refused connection from 127.0.0.1:"),
                "rank 0 did not name the peer's address");
  ck_assert_msg(ct_file_has(g_logs[2], "wrong token"), "the intruder was not told why");
  if (!with_rank1) {
    char who[96];
    snprintf(who, sizeof(who), "rank 1 (127.0.0.1:%u) did not register", (unsigned)j.eps[1].port);
    ck_assert_msg(ct_file_has(g_logs[0], who), "rank 0 did not name the missing rank");
  }
  drop_logs(2);
}

START_TEST(wrong_token_cannot_join) {
  run_token(1);
}
END_TEST

START_TEST(wrong_token_alone_times_out) {
  run_token(0);
}
END_TEST

static int rdv_rank(ct_job *j, int r, void *arg) {
  (void)arg;
  fl_coll_options o = ct_opts(j, r, "auto", TMO);
  fl_coll *c = NULL;
  fl_status st = fl_coll_create(&o, &c);
  if (c) fl_coll_destroy(c);
  return st == FL_ETIMEDOUT ? 3 : 7;
}

START_TEST(rank_never_starts) {
  const char *h[] = {L1, L1, L1};
  ct_job j;
  make_logs(3);
  ck_assert_int_eq(ct_job_init(&j, 3, h), 0);
  int start[3] = {1, 1, 0};
  ct_spawn(&j, rdv_rank, NULL, start, g_logs);
  ct_wait(&j, 20);
  ck_assert_int_eq(j.status[0], 3);
  ck_assert_int_eq(j.status[1], 3);
  char who[96];
  snprintf(who, sizeof(who), "rank 2 (127.0.0.1:%u) did not register within 2.0 s",
           (unsigned)j.eps[2].port);
  ck_assert_msg(ct_file_has(g_logs[0], who), "rank 0 did not name rank 2");
  ck_assert_msg(ct_file_has(g_logs[1], who), "rank 1 did not name rank 2");
  ck_assert(j.elapsed[0] < 8.0 && j.elapsed[1] < 8.0);
  drop_logs(3);
}
END_TEST

/* ------------------------------------------------------ hostile peers */

static int busy_rank(ct_job *j, int r, void *arg) {
  (void)arg;
  fl_coll_options o = ct_opts(j, r, "tcp", TMO);
  fl_coll *c = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 10;
  int rc = 0;
  /* Run for longer than the timeout so the silent peer gets reaped. */
  for (int it = 0; it < 40 && !rc; it++) {
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)r;
    if (fl_coll_allreduce(c, v, 64, FL_COLL_F32) != FL_OK || v[0] != 1.0f) rc = 3;
    usleep(100000);
  }
  fl_coll_destroy(c);
  return rc;
}

static int raw_connect(const fl_endpoint *ep) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(ep->port);
  inet_pton(AF_INET, ep->host, &a.sin_addr);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

START_TEST(hostile_peers_are_dropped) {
  const char *h[] = {L1, L1};
  ct_job j;
  make_logs(2);
  ck_assert_int_eq(ct_job_init(&j, 2, h), 0);
  fl_endpoint ep0 = j.eps[0];
  ct_spawn(&j, busy_rank, NULL, NULL, g_logs);
  /* One peer announces a 1 GiB frame before any hello; one says nothing. */
  int big = raw_connect(&ep0), silent = raw_connect(&ep0);
  ck_assert_int_ge(big, 0);
  ck_assert_int_ge(silent, 0);
  uint8_t hdr[8] = {1, 0, 0, 0, 0, 0, 0, 0x40};
  ck_assert_int_eq(write(big, hdr, 8), 8);
  ct_wait(&j, 30);
  ck_assert_int_eq(j.status[0], 0);
  ck_assert_int_eq(j.status[1], 0);
  char b;
  ck_assert_int_le(read(big, &b, 1), 0); /* closed by rank 0 */
  ck_assert_msg(ct_file_has(g_logs[0], "sent no hello within 2.0 s"),
                "rank 0 did not drop the silent peer");
  close(big);
  close(silent);
  drop_logs(2);
}
END_TEST

/* give_up: nonzero from 0.3 s after its first call. */
static int give_up_soon(void *arg) {
  double *t0 = arg;
  if (*t0 == 0) *t0 = ct_now();
  return ct_now() - *t0 > 0.3;
}

static int given_up_rank(ct_job *j, int r, void *arg) {
  (void)arg;
  double t0 = 0;
  fl_coll_options o = ct_opts(j, r, "tcp", 30.0);
  o.give_up = give_up_soon;
  o.give_up_arg = &t0;
  fl_coll *c = NULL;
  fl_status st = fl_coll_create(&o, &c);
  if (c) fl_coll_destroy(c);
  return st == FL_EAGAIN ? 3 : st == FL_ECLOSED ? 4 : 7;
}

/* A rendezvous that waits on a rank that never starts (the last one, or
 * rank 0 with the others connecting to it) ends with FL_EAGAIN as soon as
 * give_up says so, well before the 30 s timeout (or with FL_ECLOSED on a
 * rank whose rank 0 gave up first: the elastic trainer takes both). */
static void run_given_up(int missing) {
  const char *h[] = {L1, L1, L1};
  ct_job j;
  make_logs(3);
  ck_assert_int_eq(ct_job_init(&j, 3, h), 0);
  int start[3] = {1, 1, 1};
  start[missing] = 0;
  ct_spawn(&j, given_up_rank, NULL, start, g_logs);
  ct_wait(&j, 20);
  int given_up = 0;
  for (int r = 0; r < 3; r++) {
    if (r == missing) continue;
    ck_assert_msg(j.status[r] == 3 || j.status[r] == 4, "rank %d ended with %d", r, j.status[r]);
    ck_assert_msg(j.elapsed[r] < 5.0, "rank %d gave up after %.1f s", r, j.elapsed[r]);
    given_up += j.status[r] == 3 && ct_file_has(g_logs[r], "rendezvous given up by the caller");
  }
  ck_assert_msg(given_up > 0, "no rank gave the rendezvous up (and said so)");
  drop_logs(3);
}

START_TEST(rendezvous_given_up) {
  run_given_up(2);
}
END_TEST

START_TEST(rendezvous_given_up_no_rank_0) {
  run_given_up(0);
}
END_TEST

/* ------------------------------------- elastic: retry after a timeout */

/* give_up that never gives up, counting how often it was asked. */
static int never_give_up(void *arg) {
  (*(int *)arg)++;
  return 0;
}

/* A rank of a round of 3 whose rank 2 never comes: its rendezvous, with
 * give_up set, ends at the timeout (FL_ETIMEDOUT, which an elastic trainer
 * takes like a give-up); the same process then joins the next round (the
 * 2 survivors) on the same ports, binding them again, and reduces in it. */
static int timed_out_rank(ct_job *j, int r, void *arg) {
  (void)arg;
  int asked = 0;
  fl_coll_options o = ct_opts(j, r, "tcp", 1.0);
  o.give_up = never_give_up;
  o.give_up_arg = &asked;
  fl_coll *c = NULL;
  double t0 = ct_now();
  fl_status st = fl_coll_create(&o, &c);
  if (c) fl_coll_destroy(c);
  if (st != FL_ETIMEDOUT || asked < 3 || ct_now() - t0 > 4.0) return 20;
  o.world_size = 2;
  o.timeout_s = TMO;
  o.give_up = NULL;
  c = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 21;
  float v[3] = {1, 2, (float)r};
  st = fl_coll_allreduce(c, v, 3, FL_COLL_F32);
  fl_coll_destroy(c);
  return st == FL_OK && v[0] == 2 && v[1] == 4 && v[2] == 1 ? 0 : 22;
}

START_TEST(rendezvous_timeout_then_next_round) {
  const char *h[] = {L1, L1, L1};
  ct_job j;
  make_logs(3);
  ck_assert_int_eq(ct_job_init(&j, 3, h), 0);
  ct_job_release(&j); /* the ranks bind their ports, twice, as trainers do */
  int start[3] = {1, 1, 0};
  ct_spawn(&j, timed_out_rank, NULL, start, g_logs);
  ct_wait(&j, 20);
  for (int r = 0; r < 2; r++)
    ck_assert_msg(j.status[r] == 0, "rank %d ended with %d (20: no timeout, 21: no next round, "
                  "22: a wrong sum)", r, j.status[r]);
  char who[96];
  snprintf(who, sizeof(who), "rank 2 (127.0.0.1:%u) did not register", (unsigned)j.eps[2].port);
  ck_assert_msg(ct_file_has(g_logs[0], who), "rank 0 did not name the missing rank");
  drop_logs(3);
}
END_TEST

/* ------------------------- elastic: a peer dies in the state transfer */

static char g_edir[64];

/* A small job on synthetic images, checkpoints in dir ("": none). */
static void elastic_job(fl_job *job, const char *dir) {
  fl_job_defaults(job);
  snprintf(job->source, sizeof job->source, "<elastic test>");
  job->data.format = FL_DATA_SYNTHETIC;
  job->data.synthetic.train_samples = 192;
  job->data.synthetic.test_samples = 16;
  job->data.synthetic.seed = 3;
  job->model.input_shape[1] = 8;
  job->model.input_shape[2] = 8;
  job->model.num_classes = 4;
  job->model.hidden[0] = 16;
  job->model.n_hidden = 1;
  job->train.batch_size = 8;
  job->train.epochs = 2;
  job->train.eval = 0;
  job->train.num_threads = 1;
  job->train.checkpoint_interval = 1;
  job->cluster.mode = FL_MODE_COLLECTIVE;
  job->cluster.collective_timeout_s = 10;
  snprintf(job->train.checkpoint_dir, sizeof job->train.checkpoint_dir, "%s", dir);
}

/* The checkpoint a node holds: 3 steps of one local trainer in dir. */
static int held_state_rank(ct_job *j, int r, void *arg) {
  (void)j;
  (void)r;
  fl_job job;
  elastic_job(&job, arg);
  fl_cluster cl;
  fl_cluster_defaults(&cl);
  fl_sync s;
  if (fl_sync_local_create(&job, &cl, &s) != FL_OK) return 10;
  fl_trainer_options o = {.job = &job, .log = stderr, .max_steps = 3};
  fl_trainer_report rep;
  fl_status st = fl_trainer_run(&o, &s, &rep);
  s.ops->destroy(s.self);
  return st == FL_OK && rep.steps == 3 ? 0 : 11;
}

static fl_sync_ops g_dying_ops;

/* The victim's broadcast: it dies at the state transfer's first one. */
static fl_status die_in_broadcast(void *self, void *buf, size_t bytes, int root) {
  (void)self;
  (void)buf;
  (void)bytes;
  (void)root;
  raise(SIGKILL);
  return FL_EIO;
}

/* The victim's agree_steps: it dies there, before any state moves, once
 * the others' communicators are made (rank 0's may still probe the
 * network when this one's is: a death then fails its create instead). */
static fl_status die_in_agree(void *self, int64_t local_steps, int64_t *steps) {
  (void)self;
  (void)local_steps;
  (void)steps;
  double t0 = ct_now();
  while (!(ct_file_has(g_logs[0], "collective: rank 0 of 3") &&
           ct_file_has(g_logs[1], "collective: rank 1 of 3")) &&
         ct_now() - t0 < 10)
    usleep(10000);
  raise(SIGKILL);
  return FL_EIO;
}

/* Rank r of a new world of 3 (round 1 of g_edir/world): rank 0 holds the
 * checkpoint of g_edir/0, the others none; rank 2 dies in the transfer
 * (arg NULL) or, arg non-NULL, earlier, while the ranks agree on the
 * steps.  Exit 0: the run ended for the next world, its state kept (none
 * in the second case: the round started from disk, and so will the next). */
static int transfer_rank(ct_job *j, int r, void *arg) {
  char dir[96], wf[96];
  snprintf(dir, sizeof dir, "%s/%d", g_edir, r);
  snprintf(wf, sizeof wf, "%s/world", g_edir);
  fl_job job;
  elastic_job(&job, dir);
  fl_cluster cl;
  fl_cluster_defaults(&cl);
  snprintf(cl.collective_backend, sizeof cl.collective_backend, "tcp");
  cl.mode = FL_MODE_COLLECTIVE;
  cl.trainer_id = r;
  cl.trainers_num = j->n;
  for (int q = 0; q < j->n; q++) cl.trainer_endpoints[q] = j->eps[q];
  cl.n_trainer_endpoints = j->n;
  snprintf(cl.token, sizeof cl.token, "elastic-test");
  fl_sync s;
  if (fl_sync_collective_create(&job, &cl, &s) != FL_OK) return 10;
  const fl_sync_ops *ops = s.ops;
  if (r == 2) {
    g_dying_ops = *ops;
    if (arg)
      g_dying_ops.agree_steps = die_in_agree;
    else
      g_dying_ops.broadcast = die_in_broadcast;
    s.ops = &g_dying_ops;
  }
  /* --resume: each rank restores its own directory's newest checkpoint */
  fl_trainer_options o = {.job = &job, .log = stderr, .resume = 1, .world_file = wf,
                          .world_round = 1, .world_wait_s = 20};
  fl_trainer_report rep;
  memset(&rep, 0, sizeof rep);
  fl_status st = fl_trainer_run(&o, &s, &rep);
  ops->destroy(s.self);
  int kept = rep.world_changed && (arg ? !rep.state : rep.state && rep.state_len > 0);
  free(rep.state);
  return st != FL_OK ? 11 : kept ? 0 : 12;
}

/* The next round in the agent's world file, renamed over it whole. */
static void name_round(const char *dir, int round) {
  char tmp[96], wf[96];
  snprintf(tmp, sizeof tmp, "%s/world.tmp", dir);
  snprintf(wf, sizeof wf, "%s/world", dir);
  FILE *f = fopen(tmp, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "%d 2 0 127.0.0.1 1\n", round);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_int_eq(rename(tmp, wf), 0);
}

/* A peer dies after the rendezvous, in the state transfer (agree: NULL)
 * or before it, while the ranks agree on the steps: the survivors (the
 * sender and a receiver) do not exit; they wait at the state they hold
 * until the agent names the next round, then stop for it. */
static void peer_dies_after_rendezvous(const char *agree) {
  snprintf(g_edir, sizeof g_edir, "/tmp/fl_coll_faults_el.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_edir));
  char d0[96];
  snprintf(d0, sizeof d0, "%s/0", g_edir);
  const char *h[] = {L1, L1, L1};
  ct_job a;
  ck_assert_int_eq(ct_job_init(&a, 1, h), 0);
  ct_job_release(&a);
  make_logs(3);
  ct_spawn(&a, held_state_rank, d0, NULL, g_logs);
  ct_wait(&a, 30);
  ck_assert_msg(a.status[0] == 0, "the trainer that writes the held state ended with %d",
                a.status[0]);
  name_round(g_edir, 1);
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, 3, h), 0);
  ct_job_release(&j);
  ct_spawn(&j, transfer_rank, (void *)agree, NULL, g_logs);
  /* The next round comes only once the sender waits for it. */
  double t0 = ct_now();
  while (!ct_file_has(g_logs[0], agree ? "elastic: a collective before this round's first step"
                                        : "elastic: a collective after step") &&
         ct_now() - t0 < 20)
    usleep(20000);
  name_round(g_edir, 2);
  ct_wait(&j, 30);
  ck_assert_msg(j.status[2] == 128 + SIGKILL, "the victim ended with %d", j.status[2]);
  for (int r = 0; r < 2; r++)
    ck_assert_msg(j.status[r] == 0, "rank %d ended with %d (11: an error, 12: no state kept)", r,
                  j.status[r]);
  ck_assert_msg(ct_file_has(g_logs[0], agree ? "elastic: stopped before this round's first step"
                                              : "elastic: stopped at step 3 "),
                "the sender did not keep its state for the next world");
  ck_assert_msg(ct_file_has(g_logs[1], "for the next world"),
                "the receiver did not stop for the next world");
  drop_logs(3);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_edir);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(peer_dies_in_state_transfer) { peer_dies_after_rendezvous(NULL); }
END_TEST

START_TEST(peer_dies_agreeing_steps) { peer_dies_after_rendezvous("agree"); }
END_TEST

#define ADD(name)                                                                                  \
  do {                                                                                             \
    TCase *t = tcase_create(#name);                                                                \
    tcase_set_timeout(t, 60);                                                                      \
    tcase_add_test(t, name);                                                                       \
    suite_add_tcase(s, t);                                                                         \
  } while (0)

int main(void) {
  Suite *s = suite_create("coll_faults");
  ADD(wrong_token_cannot_join);
  ADD(wrong_token_alone_times_out);
  ADD(rank_never_starts);
  ADD(rendezvous_given_up);
  ADD(rendezvous_given_up_no_rank_0);
  ADD(rendezvous_timeout_then_next_round);
  ADD(peer_dies_in_state_transfer);
  ADD(peer_dies_agreeing_steps);
  ADD(killed_rank_tcp);
  ADD(killed_rank_0_tcp);
  ADD(killed_rank_shm);
  ADD(killed_leader_hier);
  ADD(killed_member_hier);
  ADD(hung_rank_tcp);
  ADD(hung_rank_shm);
  ADD(idle_rank_never_arrives);
  ADD(rank_finishes_early);
  ADD(mismatched_collectives);
  ADD(hostile_peers_are_dropped);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
