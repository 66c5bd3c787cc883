/* check_run.c - unit tests of flotilla-run's parts that need no process:
 * the job layout (endpoints, which node starts what, the FLOTILLA_*
 * environment, OPENBLAS_NUM_THREADS), the log-line parser, the progress
 * tracker and its CSV. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_log.h"
#include "run_internal.h"

static fl_run_plan *plan_of(const fl_run_opts *o, int node, fl_status want) {
  fl_run_plan *p = calloc(1, sizeof *p);
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(fl_run_make_plan(o, node, p), want);
  return p;
}

static void plan_free(fl_run_plan *p) {
  fl_run_plan_clear(p);
  free(p);
}

/* The value of KEY in a process's environment, or NULL. */
static const char *env_of(const fl_run_proc *p, const char *key) {
  size_t n = strlen(key);
  for (int i = 0; i < p->n_env; i++)
    if (strncmp(p->env[i], key, n) == 0 && p->env[i][n] == '=') return p->env[i] + n + 1;
  return NULL;
}

START_TEST(test_one_node_collective) {
  fl_run_opts o;
  fl_run_opts_defaults(&o);
  o.nproc_per_node = 3;
  fl_run_plan *p = plan_of(&o, 0, FL_OK);
  ck_assert_int_eq(p->n_trainers, 3);
  ck_assert_int_eq(p->n_pservers, 0);
  ck_assert_int_eq(p->n_procs, 3);
  /* Free ports: distinct, on the node's address, below the kernel's
   * ephemeral range (no outgoing connection can take one before its
   * process binds it). */
  int eph_lo = 32768;
  FILE *rf = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (rf) {
    ck_assert_int_eq(fscanf(rf, "%d", &eph_lo), 1);
    fclose(rf);
  }
  for (int i = 0; i < 3; i++) {
    ck_assert(p->procs[i].local);
    ck_assert_int_eq(strncmp(p->procs[i].endpoint, "127.0.0.1:", 10), 0);
    const int port = atoi(p->procs[i].endpoint + 10);
    ck_assert_int_ge(port, 1024);
    ck_assert_int_lt(port, eph_lo);
    for (int j = 0; j < i; j++) ck_assert_str_ne(p->procs[i].endpoint, p->procs[j].endpoint);
  }
  char eps[512];
  snprintf(eps, sizeof eps, "%s,%s,%s", p->procs[0].endpoint, p->procs[1].endpoint,
           p->procs[2].endpoint);
  const fl_run_proc *t1 = &p->procs[1];
  ck_assert_str_eq(env_of(t1, "FLOTILLA_ROLE"), "TRAINER");
  ck_assert_str_eq(env_of(t1, "FLOTILLA_MODE"), "collective");
  ck_assert_str_eq(env_of(t1, "FLOTILLA_TRAINER_ID"), "1");
  ck_assert_str_eq(env_of(t1, "FLOTILLA_TRAINERS_NUM"), "3");
  ck_assert_str_eq(env_of(t1, "FLOTILLA_TRAINER_ENDPOINTS"), eps);
  ck_assert_str_eq(env_of(t1, "FLOTILLA_CURRENT_ENDPOINT"), t1->endpoint);
  ck_assert_str_eq(env_of(t1, "FLOTILLA_LOCAL_RANK"), "1");
  ck_assert_str_eq(env_of(t1, "FLOTILLA_LOCAL_SIZE"), "3");
  ck_assert_str_eq(env_of(t1, "FLOTILLA_LOG_DIR"), "log");
  ck_assert_ptr_null(env_of(t1, "FLOTILLA_PSERVERS_IP_PORT_LIST"));
  ck_assert_ptr_null(env_of(t1, "FLOTILLA_SELECTED_GPUS"));
  ck_assert_str_eq(t1->log_path, "log/workerlog.1");
  plan_free(p);

  /* One trainer: local mode, nobody to meet. */
  o.nproc_per_node = 1;
  p = plan_of(&o, 0, FL_OK);
  ck_assert_str_eq(env_of(&p->procs[0], "FLOTILLA_MODE"), "local");
  ck_assert_ptr_null(env_of(&p->procs[0], "FLOTILLA_TRAINER_ENDPOINTS"));
  plan_free(p);
}
END_TEST

START_TEST(test_multi_node_ps) {
  fl_run_opts o;
  fl_run_opts_defaults(&o);
  o.mode = FL_RUN_PS;
  ck_assert_int_eq(fl_run_split_list("--ips", "10.0.0.1, 10.0.0.2", o.ips, FL_RUN_MAX_NODES,
                                     &o.n_ips),
                   FL_OK);
  o.n_gpus = 2;
  o.gpus[0] = 4;
  o.gpus[1] = 5;
  o.server_num = 2;
  snprintf(o.log_dir, sizeof o.log_dir, "/tmp/l");
  /* Node 1's view: the same layout as node 0's, its own share local. */
  fl_run_plan *p0 = plan_of(&o, 0, FL_OK);
  fl_run_plan *p = plan_of(&o, 1, FL_OK);
  ck_assert_int_eq(p->n_trainers, 4);
  ck_assert_int_eq(p->n_pservers, 4);
  for (int i = 0; i < p->n_procs; i++) {
    ck_assert_str_eq(p->procs[i].endpoint, p0->procs[i].endpoint);
    ck_assert_int_eq(p->procs[i].local, !p0->procs[i].local);
  }
  /* Trainers: no listening port in ps mode; pservers on 6170 + j. */
  ck_assert_str_eq(p->procs[4].endpoint, "10.0.0.1:6170");
  ck_assert_str_eq(p->procs[5].endpoint, "10.0.0.1:6171");
  ck_assert_str_eq(p->procs[6].endpoint, "10.0.0.2:6170");
  ck_assert_str_eq(p->procs[7].endpoint, "10.0.0.2:6171");
  const fl_run_proc *t3 = &p->procs[3];
  ck_assert(t3->local);
  ck_assert_int_eq(t3->gpu, 5);
  ck_assert_str_eq(env_of(t3, "FLOTILLA_SELECTED_GPUS"), "5");
  ck_assert_str_eq(env_of(t3, "FLOTILLA_MODE"), "ps");
  ck_assert_str_eq(env_of(t3, "FLOTILLA_TRAINER_ID"), "3");
  ck_assert_str_eq(env_of(t3, "FLOTILLA_LOCAL_RANK"), "1");
  ck_assert_ptr_null(env_of(t3, "FLOTILLA_TRAINER_ENDPOINTS"));
  ck_assert_str_eq(env_of(t3, "FLOTILLA_PSERVERS_IP_PORT_LIST"),
                   "10.0.0.1:6170,10.0.0.1:6171,10.0.0.2:6170,10.0.0.2:6171");
  const fl_run_proc *s2 = &p->procs[6];
  ck_assert(s2->local);
  ck_assert_str_eq(env_of(s2, "FLOTILLA_ROLE"), "PSERVER");
  ck_assert_str_eq(env_of(s2, "FLOTILLA_PSERVER_ID"), "2");
  ck_assert_str_eq(env_of(s2, "FLOTILLA_CURRENT_ENDPOINT"), "10.0.0.2:6170");
  ck_assert_str_eq(env_of(s2, "FLOTILLA_TRAINERS_NUM"), "4");
  ck_assert_str_eq(s2->log_path, "/tmp/l/serverlog.2");
  ck_assert_int_eq(p0->procs[6].n_env, 0); /* not node 0's to start */
  plan_free(p0);
  plan_free(p);
}
END_TEST

START_TEST(test_blas_threads) {
  /* OPENBLAS_NUM_THREADS: 1 for a pserver, train.num_threads for a
   * trainer (none for 0, all cores), none when flotilla-run's own
   * environment sets it (passed on as is). */
  const char *given = getenv("OPENBLAS_NUM_THREADS");
  char *saved = given ? strdup(given) : NULL;
  fl_run_opts o;
  fl_run_opts_defaults(&o);
  o.mode = FL_RUN_PS;
  o.nproc_per_node = 2;
  o.server_num = 1;
  o.train_threads = 3;
  unsetenv("OPENBLAS_NUM_THREADS");
  fl_run_plan *p = plan_of(&o, 0, FL_OK);
  ck_assert_int_eq(p->n_procs, 3);
  ck_assert_str_eq(env_of(&p->procs[0], "OPENBLAS_NUM_THREADS"), "3");
  ck_assert_str_eq(env_of(&p->procs[1], "OPENBLAS_NUM_THREADS"), "3");
  ck_assert_str_eq(env_of(&p->procs[2], "OPENBLAS_NUM_THREADS"), "1");
  plan_free(p);
  o.train_threads = 0;
  p = plan_of(&o, 0, FL_OK);
  ck_assert_ptr_null(env_of(&p->procs[0], "OPENBLAS_NUM_THREADS"));
  ck_assert_str_eq(env_of(&p->procs[2], "OPENBLAS_NUM_THREADS"), "1");
  plan_free(p);
  o.train_threads = 3;
  setenv("OPENBLAS_NUM_THREADS", "4", 1);
  p = plan_of(&o, 0, FL_OK);
  for (int i = 0; i < p->n_procs; i++)
    ck_assert_ptr_null(env_of(&p->procs[i], "OPENBLAS_NUM_THREADS"));
  plan_free(p);
  if (saved) setenv("OPENBLAS_NUM_THREADS", saved, 1);
  else unsetenv("OPENBLAS_NUM_THREADS");
  free(saved);
}
END_TEST

START_TEST(test_explicit_servers_and_port) {
  fl_run_opts o;
  fl_run_opts_defaults(&o);
  o.mode = FL_RUN_PS;
  o.port = 7000;
  o.nproc_per_node = 2;
  ck_assert_int_eq(fl_run_split_list("--servers", "127.0.0.1:7100,[::1]:7101,10.9.9.9:1",
                                     o.servers, FL_RUN_MAX_PROCS, &o.n_servers),
                   FL_OK);
  fl_run_plan *p = plan_of(&o, 0, FL_OK);
  ck_assert_int_eq(p->n_pservers, 3);
  ck_assert(p->procs[2].local);   /* 127.0.0.1 is this node */
  ck_assert(!p->procs[3].local);  /* ::1 is not in --ips */
  ck_assert(!p->procs[4].local);
  ck_assert_str_eq(env_of(&p->procs[2], "FLOTILLA_CURRENT_ENDPOINT"), "127.0.0.1:7100");
  plan_free(p);

  /* Collective with --port: trainer i on BASE + i. */
  fl_run_opts_defaults(&o);
  o.port = 7000;
  o.nproc_per_node = 2;
  p = plan_of(&o, 0, FL_OK);
  ck_assert_str_eq(p->procs[0].endpoint, "127.0.0.1:7000");
  ck_assert_str_eq(p->procs[1].endpoint, "127.0.0.1:7001");
  plan_free(p);
}
END_TEST

START_TEST(test_bad_requests) {
  fl_run_opts o;
  char list[4][FL_RUN_EP_MAX];
  int n;
  fl_run_opts_defaults(&o);
  o.server_num = 2; /* collective */
  plan_free(plan_of(&o, 0, FL_EINVAL));
  fl_run_opts_defaults(&o);
  o.mode = FL_RUN_PS;
  o.server_num = 1;
  o.n_servers = 1;
  snprintf(o.servers[0], FL_RUN_EP_MAX, "127.0.0.1:1");
  plan_free(plan_of(&o, 0, FL_EINVAL)); /* both */
  fl_run_opts_defaults(&o);
  o.nproc_per_node = 3;
  o.n_gpus = 2;
  plan_free(plan_of(&o, 0, FL_EINVAL)); /* disagree */
  fl_run_opts_defaults(&o);
  ck_assert_int_eq(fl_run_split_list("--ips", "1.1.1.1,1.1.1.1", o.ips, 4, &o.n_ips), FL_OK);
  plan_free(plan_of(&o, 0, FL_EINVAL)); /* twice */
  fl_run_opts_defaults(&o);
  o.mode = FL_RUN_PS;
  o.n_servers = 1;
  snprintf(o.servers[0], FL_RUN_EP_MAX, "nohostport");
  plan_free(plan_of(&o, 0, FL_EINVAL));
  ck_assert_int_eq(fl_run_split_list("--ips", "a,,b", list, 4, &n), FL_EINVAL);
  ck_assert_int_eq(fl_run_split_list("--ips", "a,b,c,d,e", list, 4, &n), FL_EINVAL);
}
END_TEST

START_TEST(test_find_node) {
  fl_run_opts o;
  int node = -1;
  char local[3][FL_RUN_EP_MAX] = {"127.0.0.1", "::1", "192.168.7.3"};
  fl_run_opts_defaults(&o);
  ck_assert_int_eq(fl_run_split_list("--ips", "10.0.0.1,192.168.7.3", o.ips, 4, &o.n_ips), FL_OK);
  ck_assert_int_eq(fl_run_find_node(&o, local, 3, &node), FL_OK);
  ck_assert_int_eq(node, 1);
  ck_assert_int_eq(fl_run_find_node(&o, local, 1, &node), FL_EINVAL); /* no match */
  snprintf(o.node_ip, sizeof o.node_ip, "10.0.0.1");
  ck_assert_int_eq(fl_run_find_node(&o, local, 1, &node), FL_OK);
  ck_assert_int_eq(node, 0);
  snprintf(o.node_ip, sizeof o.node_ip, "10.0.0.9");
  ck_assert_int_eq(fl_run_find_node(&o, local, 3, &node), FL_EINVAL);
  /* The real interfaces include loopback. */
  char mine[64][FL_RUN_EP_MAX];
  int n = 0, lo = 0;
  ck_assert_int_eq(fl_run_local_addrs(mine, 64, &n), FL_OK);
  for (int i = 0; i < n; i++) lo |= strcmp(mine[i], "127.0.0.1") == 0;
  ck_assert(lo);
}
END_TEST

/* torchrun's spellings: with --ips they only check and pick; without, the
 * nodes are numbers and the trainers get torchrun's variables. */
START_TEST(test_torchrun_opts) {
  fl_run_opts o;
  int node = -1;
  char local[1][FL_RUN_EP_MAX] = {"127.0.0.1"};
  fl_log_set_level(FL_LOG_OFF);
  fl_run_opts_defaults(&o);
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_OK); /* nothing given: nothing changes */
  ck_assert_int_eq(o.torchrun, 0);
  ck_assert_int_eq(o.port, 0);

  /* With --ips. */
  ck_assert_int_eq(fl_run_split_list("--ips", "10.0.0.1,10.0.0.2", o.ips, 4, &o.n_ips), FL_OK);
  o.ips_given = 1;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_port = 7000;
  snprintf(o.master_addr, sizeof o.master_addr, "10.0.0.1");
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_OK);
  ck_assert_int_eq(o.torchrun, 0);
  ck_assert_str_eq(o.node_ip, "10.0.0.2");
  ck_assert_int_eq(o.port, 7000);
  ck_assert_int_eq(fl_run_find_node(&o, local, 1, &node), FL_OK);
  ck_assert_int_eq(node, 1);
  fl_run_opts bad = o;
  bad.nnodes = 3;
  ck_assert_int_eq(fl_run_torchrun_opts(&bad), FL_EINVAL);
  bad = o;
  snprintf(bad.master_addr, sizeof bad.master_addr, "10.0.0.2");
  ck_assert_int_eq(fl_run_torchrun_opts(&bad), FL_EINVAL);
  bad = o;
  bad.node_rank = 2;
  ck_assert_int_eq(fl_run_torchrun_opts(&bad), FL_EINVAL);
  bad = o;
  bad.port = 6000;
  ck_assert_int_eq(fl_run_torchrun_opts(&bad), FL_EINVAL);
  bad = o;
  snprintf(bad.node_ip, sizeof bad.node_ip, "10.0.0.1"); /* node_rank 1 is 10.0.0.2 */
  ck_assert_int_eq(fl_run_torchrun_opts(&bad), FL_EINVAL);

  /* Without --ips: 3 nodes by number, this is node 2. */
  fl_run_opts_defaults(&o);
  o.nnodes = 3;
  o.node_rank = 2;
  o.nproc_per_node = 2;
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_EINVAL); /* needs --master_addr */
  snprintf(o.master_addr, sizeof o.master_addr, "10.77.0.1");
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_OK);
  ck_assert_int_eq(o.torchrun, 1);
  ck_assert_int_eq(o.n_ips, 3);
  ck_assert_int_eq(o.master_port, 29500);
  ck_assert_int_eq(fl_run_find_node(&o, local, 1, &node), FL_OK);
  ck_assert_int_eq(node, 2);
  fl_run_plan *p = plan_of(&o, node, FL_OK);
  ck_assert_int_eq(p->n_trainers, 6);
  ck_assert_str_eq(p->procs[0].endpoint, "10.77.0.1:29500");
  ck_assert(!p->procs[0].local);
  const fl_run_proc *t5 = &p->procs[5];
  ck_assert(t5->local);
  ck_assert_str_eq(t5->endpoint, "");
  ck_assert_str_eq(env_of(t5, "FLOTILLA_MODE"), "collective");
  ck_assert_str_eq(env_of(t5, "FLOTILLA_CLUSTER_ENV"), "torchrun");
  ck_assert_str_eq(env_of(t5, "RANK"), "5");
  ck_assert_str_eq(env_of(t5, "WORLD_SIZE"), "6");
  ck_assert_str_eq(env_of(t5, "LOCAL_RANK"), "1");
  ck_assert_str_eq(env_of(t5, "LOCAL_WORLD_SIZE"), "2");
  ck_assert_str_eq(env_of(t5, "GROUP_RANK"), "2");
  ck_assert_str_eq(env_of(t5, "MASTER_ADDR"), "10.77.0.1");
  ck_assert_str_eq(env_of(t5, "MASTER_PORT"), "29500");
  ck_assert_ptr_null(env_of(t5, "FLOTILLA_TRAINER_ID"));
  ck_assert_ptr_null(env_of(t5, "FLOTILLA_TRAINER_ENDPOINTS"));
  plan_free(p);

  /* ps mode: --servers, never --master_addr (the trainers meet nobody) */
  fl_run_opts_defaults(&o);
  o.nnodes = 2;
  o.mode = FL_RUN_PS;
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_EINVAL); /* ps needs --servers */
  o.n_servers = 1;
  snprintf(o.servers[0], sizeof o.servers[0], "10.77.0.9:6170");
  o.node_rank = 1;
  snprintf(o.node_ip, sizeof o.node_ip, "10.77.0.2");
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_OK);
  ck_assert_int_eq(fl_run_find_node(&o, local, 1, &node), FL_OK);
  ck_assert_int_eq(node, 1);
  p = plan_of(&o, node, FL_OK);
  ck_assert_int_eq(p->n_trainers, 2);
  ck_assert(p->procs[1].local);
  ck_assert_str_eq(env_of(&p->procs[1], "FLOTILLA_MODE"), "ps");
  ck_assert_str_eq(env_of(&p->procs[1], "RANK"), "1");
  ck_assert_ptr_null(env_of(&p->procs[1], "MASTER_ADDR"));
  plan_free(p);
  fl_run_opts_defaults(&o);
  o.nnodes = 2;
  o.mode = FL_RUN_COLLECTIVE;
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_EINVAL); /* collective needs --master_addr */
  fl_run_opts_defaults(&o);
  o.nnodes = 2;
  o.node_rank = 2;
  snprintf(o.master_addr, sizeof o.master_addr, "10.77.0.1");
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_EINVAL); /* node rank out of range */
  fl_run_opts_defaults(&o);
  o.node_rank = 1; /* of one node */
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_EINVAL);
  fl_run_opts_defaults(&o);
  o.nnodes = 1;
  o.master_port = 6500;
  snprintf(o.master_addr, sizeof o.master_addr, "127.0.0.2");
  ck_assert_int_eq(fl_run_torchrun_opts(&o), FL_OK); /* one node at that address */
  ck_assert_int_eq(o.torchrun, 0);
  ck_assert_str_eq(o.ips[0], "127.0.0.2");
  ck_assert_int_eq(o.port, 6500);
}
END_TEST

START_TEST(test_parse_lines) {
  fl_run_record r;
  ck_assert_int_eq(fl_run_parse_line("2026-01-01T00:00:00.000Z I [trainer 0] training mlp: 3 "
                                     "epochs of 468 steps (2 x 64 samples, rank 0 of 2), x",
                                     &r),
                   1);
  ck_assert_int_eq(r.kind, FL_RUN_REC_PLAN);
  ck_assert_int_eq(r.epoch, 3);
  ck_assert_int_eq(r.batches, 936);
  ck_assert_int_eq(fl_run_parse_line("[Epoch 2, batch 100] loss: 0.41234, acc1: 0.85938, "
                                     "acc5: 0.99",
                                     &r),
                   1);
  ck_assert_int_eq(r.kind, FL_RUN_REC_TRAIN);
  ck_assert_int_eq(r.epoch, 2);
  ck_assert_int_eq(r.batch, 100);
  ck_assert_int_eq(r.batches, -1);
  ck_assert_double_eq_tol(r.loss, 0.41234, 1e-12);
  ck_assert_double_eq_tol(r.acc, 0.85938, 1e-12);
  ck_assert_int_eq(fl_run_parse_line("x [Epoch 0, batch 5/469] loss: 1.5", &r), 1);
  ck_assert_int_eq(r.batches, 469);
  ck_assert(isnan(r.acc));
  ck_assert_int_eq(fl_run_parse_line("[Epoch 4] test loss: 0.4567, acc1: 0.8412, acc5: 1", &r),
                   1);
  ck_assert_int_eq(r.kind, FL_RUN_REC_TEST);
  ck_assert_int_eq(r.epoch, 4);
  ck_assert_double_eq_tol(r.acc, 0.8412, 1e-12);
  ck_assert_int_eq(fl_run_parse_line("[Epoch 1, test] loss: 0.5, accuracy: 0.75", &r), 1);
  ck_assert_int_eq(r.kind, FL_RUN_REC_TEST);
  ck_assert_double_eq(r.acc, 0.75);
  /* Not progress: the epoch summary, a loss_scale key, other text. */
  ck_assert_int_eq(fl_run_parse_line("[Epoch 1] train: 468 steps, 29952 samples", &r), 1);
  ck_assert_int_eq(r.kind, FL_RUN_REC_EPOCH_END);
  ck_assert_int_eq(r.epoch, 1);
  ck_assert_int_eq(fl_run_parse_line("[Epoch 1, batch 3] loss_scale: 8", &r), 0);
  ck_assert_int_eq(fl_run_parse_line("[Epoch x, batch 3] loss: 1", &r), 0);
  ck_assert_int_eq(fl_run_parse_line("[Epoch 1, batch 3 loss: 1", &r), 0);
  ck_assert_int_eq(fl_run_parse_line("hello", &r), 0);
}
END_TEST

static void feed(fl_run_progress *p, const char *line, double t) {
  fl_run_record r;
  ck_assert_int_eq(fl_run_parse_line(line, &r), 1);
  ck_assert_int_eq(fl_run_progress_feed(p, &r, t), FL_OK);
}

START_TEST(test_progress_and_csv) {
  fl_run_progress *p;
  char line[256];
  /* 2 trainers x 50 samples per batch = 100 samples per global batch. */
  ck_assert_int_eq(fl_run_progress_new(4, 100, &p), FL_OK);
  ck_assert_str_eq(fl_run_progress_line(p, line, sizeof line), "");
  feed(p, "training mlp: 2 epochs of 100 steps (1 x 50 samples, rank 0 of 2)", 0);
  feed(p, "[Epoch 0, batch 0] loss: 2.3, acc1: 0.1", 10);
  feed(p, "[Epoch 0, batch 10] loss: 1.5, acc1: 0.5", 11); /* 10 batches in 1 s */
  fl_run_progress_line(p, line, sizeof line);
  /* The job file said 4 epochs, the trainer 2: the trainer wins. 189 batches
   * left at 1000 samples/s = 18.9 s. */
  ck_assert_str_eq(line, "epoch 1/2  step 11/100 (11%)  1000 samples/s  ETA 19s  loss 1.5000  "
                         "acc 0.5000");
  feed(p, "[Epoch 0, batch 30] loss: 1.0, acc1: 0.6", 13); /* 1000 samples/s again */
  feed(p, "[Epoch 0] test loss: 0.9, acc1: 0.7", 15);
  feed(p, "[Epoch 1, batch 0] loss: 0.8, acc1: 0.75", 30); /* after eval: no rate */
  feed(p, "[Epoch 1, batch 50] loss: 0.7, acc1: 0.8", 32); /* 2500 samples/s */
  fl_run_progress_line(p, line, sizeof line);
  /* EMA: 0.7 * 1000 + 0.3 * 2500 = 1450; 49 batches left -> 3.4 s. */
  ck_assert_str_eq(line, "epoch 2/2  step 51/100 (51%)  1450 samples/s  ETA 3s  loss 0.7000  "
                         "acc 0.8000  test acc 0.7000 (epoch 1)");
  /* the last logged batch is not the last one: the epoch's end line says
   * it is whole (the line reaches 100%) */
  feed(p, "[Epoch 1] train: 100 steps, 10000 samples, 5.00 s, 2000.0 samples/s, cpu 5.00 s", 33);
  fl_run_progress_line(p, line, sizeof line);
  ck_assert_str_eq(line, "epoch 2/2  step 100/100 (100%)  1450 samples/s  ETA 0s  loss 0.7000  "
                         "acc 0.8000  test acc 0.7000 (epoch 1)");
  int epoch;
  double loss, acc;
  ck_assert_int_eq(fl_run_progress_last_test(p, &epoch, &loss, &acc), 1);
  ck_assert_int_eq(epoch, 0);
  ck_assert_double_eq(acc, 0.7);
  ck_assert_uint_eq(fl_run_progress_count(p), 6);

  char path[] = "/tmp/fl_run_csv_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(fl_run_progress_write_csv(p, path), FL_OK);
  FILE *f = fopen(path, "r");
  char buf[2048];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  ck_assert_str_eq(buf, "kind,time_s,epoch,batch,global_batch,samples_per_s,loss,acc,auc,"
                        "val_loss,val_acc,val_auc\n"
                        "train,0.000,0,0,1,,2.3,0.1,,,,\n"
                        "train,1.000,0,10,11,1000,1.5,0.5,,,,\n"
                        "train,3.000,0,30,31,1000,1,0.6,,,,\n"
                        "test,5.000,0,,100,,0.9,0.7,,,,\n"
                        "train,20.000,1,0,101,,0.8,0.75,,,,\n"
                        "train,22.000,1,50,151,1450,0.7,0.8,,,,\n");

  /* The plot: a script with both data blocks, and a PNG when gnuplot is here. */
  char png[64], gp[64];
  snprintf(png, sizeof png, "%s.png", path);
  snprintf(gp, sizeof gp, "%s.gp", path);
  fl_status st = fl_run_plot(path, png, gp);
  ck_assert(st == FL_OK || st == FL_ENOTFOUND);
  f = fopen(gp, "r");
  ck_assert_ptr_nonnull(f);
  n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  ck_assert_ptr_nonnull(strstr(buf, "$train << EOD\n1 2.3 0.1\n11 1.5 0.5\n"));
  ck_assert_ptr_nonnull(strstr(buf, "$test << EOD\n100 0.9 0.7\nEOD\n"));
  if (st == FL_OK) {
    f = fopen(png, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char sig[8];
    ck_assert_uint_eq(fread(sig, 1, 8, f), 8);
    fclose(f);
    ck_assert_int_eq(memcmp(sig, "\x89PNG\r\n\x1a\n", 8), 0);
    unlink(png);
  }
  unlink(gp);
  unlink(path);
  fl_run_progress_free(p);
}
END_TEST

START_TEST(test_progress_bursts) {
  fl_run_progress *p;
  char line[256];
  ck_assert_int_eq(fl_run_progress_new(1, 10, &p), FL_OK);
  feed(p, "[Epoch 0, batch 0] loss: 2", 0);
  feed(p, "[Epoch 0, batch 100] loss: 1", 10);    /* 100 samples/s */
  feed(p, "[Epoch 0, batch 200] loss: 1", 10.001); /* a burst: not a rate */
  feed(p, "[Epoch 0, batch 300] loss: 1", 10.002);
  fl_run_progress_line(p, line, sizeof line);
  ck_assert_ptr_nonnull(strstr(line, "  100 samples/s"));
  feed(p, "[Epoch 0, batch 400] loss: 1", 11); /* 300 batches since t=10: 3000 */
  fl_run_progress_line(p, line, sizeof line);
  ck_assert_ptr_nonnull(strstr(line, "  970 samples/s")); /* 0.7 * 100 + 0.3 * 3000 */
  fl_run_record r;
  ck_assert_int_eq(fl_run_parse_line("[Epoch 0] test auc: 0.86, logloss: 0.45, acc1: 0.79", &r),
                   1);
  ck_assert_double_eq_tol(r.loss, 0.45, 1e-12);
  ck_assert_double_eq_tol(r.auc, 0.86, 1e-12);
  /* validations: their own records, shown beside the test's */
  ck_assert_int_eq(fl_run_parse_line("[Epoch 0] val loss: 0.5, auc: 0.91, logloss: 0.5 (step 300)",
                                     &r), 1);
  ck_assert_int_eq(r.kind, FL_RUN_REC_VAL);
  ck_assert_int_eq(r.batch, 300);
  ck_assert_double_eq_tol(r.auc, 0.91, 1e-12);
  ck_assert(isnan(r.acc));
  ck_assert_int_eq(fl_run_progress_feed(p, &r, 12), FL_OK);
  fl_run_progress_line(p, line, sizeof line);
  ck_assert_ptr_nonnull(strstr(line, "  val auc 0.9100 (epoch 1)"));
  fl_run_progress_free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("run");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_one_node_collective);
  tcase_add_test(tc, test_multi_node_ps);
  tcase_add_test(tc, test_blas_threads);
  tcase_add_test(tc, test_explicit_servers_and_port);
  tcase_add_test(tc, test_bad_requests);
  tcase_add_test(tc, test_find_node);
  tcase_add_test(tc, test_torchrun_opts);
  tcase_add_test(tc, test_parse_lines);
  tcase_add_test(tc, test_progress_and_csv);
  tcase_add_test(tc, test_progress_bursts);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
