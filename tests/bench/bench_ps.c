/* bench_ps.c - PServer-mode throughput on loopback, beside what the
 * transport alone gives in the same run:
 *
 *   ps_push_pull_*   2 flotilla-pserver processes x 2 trainer processes
 *                    (the real PS client, async mode): each iteration a
 *                    trainer pushes the gradient of a 64 MB dense model
 *                    (64 blocks of 1 MiB, all in flight at once) and pulls
 *                    the parameters back; effective GB/s counts the 64 MB
 *                    both ways;
 *   tcp_loopback_*   one TCP connection on 127.0.0.1 moving the same 64 MB
 *                    (send and receive in two threads, reused buffers);
 *   grpc_echo_*      a bare gRPC C-core echo server in this process and 64
 *                    concurrent 1 MiB calls: the same bytes up and down,
 *                    without protobuf, tables or optimizer;
 *   sparse_pull_*    rows of 64 floats pulled in batches of 4096 ids (ids
 *                    drawn from 200k rows that already exist), over both
 *                    pservers;
 *   sparse_push_*    their gradients pushed the same way (4096 distinct
 *                    ids a push, async: one SGD step per row at once).
 * Each figure is the median of its repetitions; the PS iteration, the TCP
 * transfer and the echo round take turns, iteration by iteration, so that
 * they see the same machine load.  The trainer processes are forked before
 * this process touches gRPC (gRPC must not be initialised
 * before fork); the pservers are the installed binaries' build-tree twins,
 * found through FL_BUILDDIR or next to this program.
 *
 *   tests/bench/bench_ps [iterations]      (default 5) */
#include <config.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grpc/support/time.h>

#include "fl_cluster.h"
#include "../integration/free_port.h"
#include "fl_log.h"
#include "fl_ps_client.h"
#include "fl_rpc.h"
#include "flotilla.pb-c.h"

#define MODEL_FLOATS (16u << 20) /* 64 MB */
#define N_PARAMS 4
#define BLOCK (256u << 10)       /* floats: 1 MiB blocks */
#define SPARSE_DIM 64
#define SPARSE_BATCH 4096
#define SPARSE_POOL 200000

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---------------------------------------------------------- trainer child */

typedef struct result {
  double sparse_rows_per_s[16];
  double sparse_push_rows_per_s[16];
} result;

/* Time pushes of SPARSE_BATCH distinct rows (a run of ids from a random
 * start) into per_s[0..iters), rows/s; grads: the batch's gradient. */
static int sparse_push_timed(fl_ps_client *c, int iters, float *grads, uint64_t *ids,
                             uint64_t *rs, int64_t *step, double *per_s) {
  for (size_t i = 0; i < (size_t)SPARSE_BATCH * SPARSE_DIM; i++) grads[i] = 1e-3f;
  for (int it = 0; it < iters; it++) {
    double t0 = now_s();
    int reps = 20;
    for (int rep = 0; rep < reps; rep++) {
      *rs = *rs * 6364136223846793005ULL + 1442695040888963407ULL;
      for (size_t i = 0; i < SPARSE_BATCH; i++) ids[i] = ((*rs >> 33) + i) % SPARSE_POOL;
      if (fl_ps_client_push_sparse(c, "bench.emb", SPARSE_DIM, (*step)++, ids, SPARSE_BATCH,
                                   grads) != FL_OK)
        return 1;
    }
    per_s[it] = (double)reps * SPARSE_BATCH / (now_s() - t0);
  }
  return 0;
}

/* One trainer process: registers a 64 MB model, then runs one push+pull
 * iteration each time the parent writes a byte on go_fd, answering with
 * its duration on done_fd; trainer 0 then times sparse pulls. */
static int trainer_child(int id, const fl_endpoint *eps, int iters, int go_fd, int done_fd) {
  fl_ps_client_opts o;
  fl_ps_client *c = NULL;
  fl_ps_dense_param params[N_PARAMS];
  fl_ps_sparse_spec tab = {"bench.emb", SPARSE_DIM};
  char names[N_PARAMS][16];
  float *values = calloc(MODEL_FLOATS, sizeof(float)), *grads = malloc(MODEL_FLOATS * sizeof(float));
  float *rows = malloc((size_t)SPARSE_BATCH * SPARSE_DIM * sizeof(float));
  uint64_t *ids = malloc(SPARSE_BATCH * sizeof *ids), rs = 12345 + (uint64_t)id;
  result r;
  int64_t step = 0;
  const fl_ps_layout *l;

  memset(&r, 0, sizeof r);
  if (!values || !grads || !rows || !ids) return 1;
  for (size_t i = 0; i < MODEL_FLOATS; i++) grads[i] = 1e-6f * (float)(i % 1000);
  memset(&o, 0, sizeof o);
  o.servers = eps;
  o.n_servers = 2;
  o.trainer_id = id;
  o.num_trainers = 2;
  o.mode = FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC;
  o.dense_block_size = BLOCK;
  o.rpc_timeout_s = 60;
  o.retry_budget_s = 60;
  if (fl_ps_client_create(&o, &c) != FL_OK) return 1;
  for (int p = 0; p < N_PARAMS; p++) {
    snprintf(names[p], sizeof names[p], "w%d", p);
    params[p].name = names[p];
    params[p].value = values + (size_t)p * (MODEL_FLOATS / N_PARAMS);
    params[p].n = MODEL_FLOATS / N_PARAMS;
  }
  if (fl_ps_client_register(c, params, N_PARAMS, &tab, 1, &step) != FL_OK) return 1;
  l = fl_ps_client_layout(c);
  for (int it = -1; it < iters; it++) {
    char go;
    double t0, dt;
    if (read(go_fd, &go, 1) != 1) return 1;
    t0 = now_s();
    for (size_t b = 0; b < l->n_blocks; b++) {
      const fl_ps_block *blk = &l->blocks[b];
      fl_ps_client_push_block(c, (uint32_t)b, FLOTILLA__PUSH_KIND__PUSH_GRAD, step,
                              grads + (size_t)blk->param * (MODEL_FLOATS / N_PARAMS) +
                                  blk->offset);
    }
    if (fl_ps_client_wait(c) != FL_OK) return 1;
    fl_ps_client_pull_dense(c, 0);
    if (fl_ps_client_wait(c) != FL_OK) return 1;
    step++;
    dt = now_s() - t0;
    if (write(done_fd, &dt, sizeof dt) != (ssize_t)sizeof dt) return 1;
  }
  if (id == 0) {
    /* create the pool of rows, then time pulls drawn from it */
    for (uint64_t k = 0; k < SPARSE_POOL; k += SPARSE_BATCH) {
      size_t n = SPARSE_POOL - k < SPARSE_BATCH ? SPARSE_POOL - k : SPARSE_BATCH;
      for (size_t i = 0; i < n; i++) ids[i] = k + i;
      if (fl_ps_client_pull_sparse(c, "bench.emb", SPARSE_DIM, ids, n, rows) != FL_OK) return 1;
    }
    for (int it = 0; it < iters; it++) {
      double t0 = now_s();
      int reps = 20;
      for (int rep = 0; rep < reps; rep++) {
        for (size_t i = 0; i < SPARSE_BATCH; i++) {
          rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
          ids[i] = (rs >> 33) % SPARSE_POOL;
        }
        if (fl_ps_client_pull_sparse(c, "bench.emb", SPARSE_DIM, ids, SPARSE_BATCH, rows) != FL_OK)
          return 1;
      }
      r.sparse_rows_per_s[it] = (double)reps * SPARSE_BATCH / (now_s() - t0);
    }
    if (sparse_push_timed(c, iters, rows, ids, &rs, &step, r.sparse_push_rows_per_s) != 0)
      return 1;
  }
  fl_ps_client_complete(c);
  fl_ps_client_destroy(c);
  if (write(done_fd, &r, sizeof r) != (ssize_t)sizeof r) return 1;
  free(values);
  free(grads);
  free(rows);
  free(ids);
  return 0;
}

/* --------------------------------------------------------------- raw TCP */

typedef struct tcp_bench {
  int ls, cs, as;
  char *buf;
  size_t bytes;
  pthread_t th;
} tcp_bench;

static void *tcp_receiver(void *arg) {
  tcp_bench *x = arg;
  char *buf = malloc(1 << 20);
  while (buf) {
    ssize_t n = recv(x->as, buf, 1 << 20, 0);
    if (n <= 0) break;
  }
  free(buf);
  return NULL;
}

static void tcp_setup(tcp_bench *x) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  x->ls = socket(AF_INET, SOCK_STREAM, 0);
  x->cs = socket(AF_INET, SOCK_STREAM, 0);
  x->bytes = (size_t)MODEL_FLOATS * sizeof(float);
  x->buf = malloc(x->bytes);
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!x->buf || bind(x->ls, (struct sockaddr *)&a, sizeof a) || listen(x->ls, 1) ||
      getsockname(x->ls, (struct sockaddr *)&a, &len) ||
      connect(x->cs, (struct sockaddr *)&a, len) || (x->as = accept(x->ls, NULL, NULL)) < 0) {
    perror("bench_ps: tcp");
    exit(1);
  }
  memset(x->buf, 1, x->bytes);
  pthread_create(&x->th, NULL, tcp_receiver, x);
}

/* Seconds to push the 64 MB through the connection. */
static double tcp_iter(tcp_bench *x) {
  double t0 = now_s();
  size_t off = 0;
  while (off < x->bytes) {
    ssize_t n = send(x->cs, x->buf + off, x->bytes - off, 0);
    if (n <= 0) break;
    off += (size_t)n;
  }
  return now_s() - t0;
}

static void tcp_teardown(tcp_bench *x) {
  close(x->cs);
  pthread_join(x->th, NULL);
  close(x->as);
  close(x->ls);
  free(x->buf);
}

/* -------------------------------------------------------------- gRPC echo */

typedef struct echo_call {
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
  grpc_byte_buffer *msg;
  int stage;
  int cancelled;
} echo_call;

typedef struct echo_srv {
  grpc_server *srv;
  grpc_completion_queue *cq;
  int stop;
} echo_srv;

static void echo_arm(echo_srv *e) {
  echo_call *c = calloc(1, sizeof *c);
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->md);
  grpc_server_request_call(e->srv, &c->call, &c->details, &c->md, e->cq, e->cq, c);
}

static void *echo_main(void *arg) {
  echo_srv *e = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(e->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    echo_call *c;
    grpc_op ops[4];
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    c = ev.tag;
    if (!c) continue; /* the server's shutdown tag */
    memset(ops, 0, sizeof ops);
    if (!ev.success || c->stage == 2) {
      if (c->call) grpc_call_unref(c->call);
      if (c->msg) grpc_byte_buffer_destroy(c->msg);
      grpc_call_details_destroy(&c->details);
      grpc_metadata_array_destroy(&c->md);
      free(c);
      continue;
    }
    if (c->stage == 0) {
      if (!e->stop) echo_arm(e);
      c->stage = 1;
      ops[0].op = GRPC_OP_RECV_MESSAGE;
      ops[0].data.recv_message.recv_message = &c->msg;
      grpc_call_start_batch(c->call, ops, 1, c, NULL);
    } else {
      grpc_slice d = grpc_empty_slice();
      c->stage = 2;
      ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
      ops[1].op = GRPC_OP_SEND_MESSAGE;
      ops[1].data.send_message.send_message = c->msg;
      ops[2].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
      ops[2].data.send_status_from_server.status = GRPC_STATUS_OK;
      ops[2].data.send_status_from_server.status_details = &d;
      ops[3].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
      ops[3].data.recv_close_on_server.cancelled = &c->cancelled;
      grpc_call_start_batch(c->call, ops, 4, c, NULL);
    }
  }
  return NULL;
}

typedef struct echo_bench {
  echo_srv e;
  grpc_channel *ch;
  grpc_completion_queue *cq;
  pthread_t th;
  char *data;
  size_t nblk, bsz;
  fl_rpc_call *calls;
} echo_bench;

static void echo_setup(echo_bench *x) {
  fl_rpc_opts ro;
  char addr[64];
  int port;
  memset(&ro, 0, sizeof ro);
  memset(&x->e, 0, sizeof x->e);
  x->nblk = MODEL_FLOATS / BLOCK;
  x->bsz = (size_t)BLOCK * sizeof(float);
  x->data = malloc(x->bsz);
  x->calls = calloc(x->nblk, sizeof *x->calls);
  if (!x->data || !x->calls) exit(1);
  memset(x->data, 7, x->bsz);
  fl_rpc_server_create(&ro, &x->e.srv);
  x->e.cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(x->e.srv, x->e.cq, NULL);
  if (fl_rpc_server_bind(x->e.srv, "127.0.0.1:0", &ro, &port) != FL_OK) exit(1);
  grpc_server_start(x->e.srv);
  for (int i = 0; i < 8; i++) echo_arm(&x->e);
  pthread_create(&x->th, NULL, echo_main, &x->e);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  fl_rpc_channel_create(addr, &ro, &x->ch);
  x->cq = grpc_completion_queue_create_for_next(NULL);
}

/* Seconds for 64 concurrent 1 MiB echo calls. */
static double echo_iter(echo_bench *x) {
  double t0 = now_s();
  for (size_t b = 0; b < x->nblk; b++) {
    grpc_slice s = grpc_slice_from_static_buffer(x->data, x->bsz);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    fl_rpc_call_start(&x->calls[b], x->ch, x->cq, "/bench/Echo", bb, 60, NULL, &x->calls[b]);
  }
  for (size_t b = 0; b < x->nblk; b++) {
    grpc_event ev = grpc_completion_queue_next(x->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    fl_rpc_call *c = ev.tag;
    if (c->status != GRPC_STATUS_OK || !c->recv || grpc_byte_buffer_length(c->recv) != x->bsz) {
      fprintf(stderr, "bench_ps: echo failed (%s)\n", fl_rpc_code_name(c->status));
      exit(1);
    }
    fl_rpc_call_end(c);
  }
  return now_s() - t0;
}

static void echo_teardown(echo_bench *x) {
  x->e.stop = 1;
  grpc_channel_destroy(x->ch);
  grpc_completion_queue_shutdown(x->cq);
  while (grpc_completion_queue_next(x->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(x->cq);
  grpc_server_shutdown_and_notify(x->e.srv, x->e.cq, NULL);
  grpc_server_cancel_all_calls(x->e.srv);
  grpc_completion_queue_shutdown(x->e.cq);
  pthread_join(x->th, NULL);
  grpc_server_destroy(x->e.srv);
  grpc_completion_queue_destroy(x->e.cq);
  free(x->calls);
  free(x->data);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 5;
  const char *bd = getenv("FL_BUILDDIR");
  char bin[1024], dir[] = "/tmp/fl_bench_ps.XXXXXX", job[600], list[128], cfg[700];
  fl_endpoint eps[2];
  pid_t ps[2], tr[2];
  int go[2][2], done[2][2];
  result r[2];
  double per[2][16], tcp_s[16], echo_s[16], tt, te;
  tcp_bench tcp;
  echo_bench echo;
  FILE *f;

  if (iters < 1 || iters > 16) iters = 5;
  fl_log_set_level(FL_LOG_WARN);
  if (bd) snprintf(bin, sizeof bin, "%s/flotilla-pserver", bd);
  else {
    const char *slash = strrchr(argv[0], '/');
    snprintf(bin, sizeof bin, "%.*s/../../flotilla-pserver", slash ? (int)(slash - argv[0]) : 1,
             slash ? argv[0] : ".");
  }
  if (!mkdtemp(dir)) return 1;
  snprintf(job, sizeof job, "%s/job.yaml", dir);
  f = fopen(job, "w");
  if (!f) return 1;
  fprintf(f, "optimizer: {name: sgd, lr: 0.0001}\ncluster: {mode: ps, heartbeat_timeout_s: 60}\n"
             "pserver: {dense_block_size: %u, sparse: {optimizer: {name: sgd, lr: 0.01}}}\n"
             "strategy: {a_sync: true}\n", BLOCK);
  fclose(f);
  for (int s = 0; s < 2; s++) {
    eps[s].port = (uint16_t)fl_test_free_port("127.0.0.1");
    snprintf(eps[s].host, sizeof eps[s].host, "127.0.0.1");
  }
  snprintf(list, sizeof list, "127.0.0.1:%u,127.0.0.1:%u", eps[0].port, eps[1].port);
  snprintf(cfg, sizeof cfg, "--config=%s", job);
  for (int s = 0; s < 2; s++) {
    ps[s] = fork();
    if (ps[s] == 0) {
      char id[32], l[160], logp[700];
      int fd;
      snprintf(logp, sizeof logp, "%s/ps%d.log", dir, s);
      fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      snprintf(id, sizeof id, "FLOTILLA_PSERVER_ID=%d", s);
      snprintf(l, sizeof l, "FLOTILLA_PSERVERS_IP_PORT_LIST=%s", list);
      putenv(id);
      putenv(l);
      putenv("FLOTILLA_TRAINERS_NUM=2");
      putenv("FLOTILLA_LOG_LEVEL=warn");
      alarm(600);
      execl(bin, bin, cfg, (char *)NULL);
      perror(bin);
      _exit(127);
    }
  }
  for (int t = 0; t < 2; t++) {
    if (pipe(go[t]) != 0 || pipe(done[t]) != 0) return 1;
    tr[t] = fork();
    if (tr[t] == 0) {
      close(go[t][1]);
      close(done[t][0]);
      alarm(600);
      _exit(trainer_child(t, eps, iters, go[t][0], done[t][1]));
    }
    close(go[t][0]);
    close(done[t][1]);
  }
  /* Every fork is done: gRPC may start here.  The three transports take
   * turns, iteration by iteration, so they see the same machine load. */
  fl_rpc_init();
  tcp_setup(&tcp);
  echo_setup(&echo);
  for (int it = -1; it < iters; it++) {
    double d[2];
    for (int t = 0; t < 2; t++)
      if (write(go[t][1], "g", 1) != 1) goto child_failed;
    for (int t = 0; t < 2; t++)
      if (read(done[t][0], &d[t], sizeof d[t]) != (ssize_t)sizeof d[t]) goto child_failed;
    tt = tcp_iter(&tcp);
    te = echo_iter(&echo);
    if (it < 0) continue; /* warm-up */
    per[0][it] = d[0];
    per[1][it] = d[1];
    tcp_s[it] = tt;
    echo_s[it] = te;
  }
  tcp_teardown(&tcp);
  echo_teardown(&echo);
  fl_rpc_shutdown();
  for (int t = 0; t < 2; t++) {
    int status;
    if (read(done[t][0], &r[t], sizeof r[t]) != (ssize_t)sizeof r[t] ||
        waitpid(tr[t], &status, 0) != tr[t] || !WIFEXITED(status) || WEXITSTATUS(status))
      goto child_failed;
  }
  for (int s = 0; s < 2; s++) waitpid(ps[s], NULL, 0);
  {
    double bytes = (double)MODEL_FLOATS * sizeof(float);
    double p0 = median(per[0], iters), p1 = median(per[1], iters);
    double ps_gbps = 0.5 * (2 * bytes / p0 + 2 * bytes / p1) / 1e9;
    double tcp_gbps = bytes / median(tcp_s, iters) / 1e9;
    double echo_gbps = 2 * bytes / median(echo_s, iters) / 1e9;
    printf("ps_push_pull_64mb_ms: %.1f ms\n", 1e3 * 0.5 * (p0 + p1));
    printf("ps_push_pull_gbps_per_trainer: %.3f GB/s\n", ps_gbps);
    printf("ps_push_pull_gbps_total: %.3f GB/s\n", 2 * ps_gbps);
    printf("tcp_loopback_gbps: %.3f GB/s\n", tcp_gbps);
    printf("grpc_echo_gbps: %.3f GB/s\n", echo_gbps);
    printf("ps_per_trainer_of_grpc_echo: %.2f\n", ps_gbps / echo_gbps);
    printf("grpc_echo_of_tcp_loopback: %.2f\n", echo_gbps / tcp_gbps);
    printf("sparse_pull_rows_per_s: %.0f rows/s\n", median(r[0].sparse_rows_per_s, iters));
    printf("sparse_push_rows_per_s: %.0f rows/s\n", median(r[0].sparse_push_rows_per_s, iters));
  }
  {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_ps: cannot remove %s\n", dir);
  }
  return 0;
child_failed:
  fprintf(stderr, "bench_ps: a trainer process failed\n");
  kill(ps[0], SIGKILL);
  kill(ps[1], SIGKILL);
  return 1;
}
