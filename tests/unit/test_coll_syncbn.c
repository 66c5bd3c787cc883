/* test_coll_syncbn.c - synchronised batch norm (sync_batch_norm): the
 * model's batch-norm hook (fl_model_set_norm_sync) and collective mode's
 * use of it (sync_collective.c).
 *
 *  - One process, an identity hook: training the cnn with batch norm gives
 *    the bits of the same model without a hook (plain and recompute), the
 *    hook is called twice per batch-norm layer in forward and once in
 *    backward, never by eval, and its error ends train_step.
 *  - Forked ranks driving fl_sync_collective and the model directly: after
 *    steps of SGD every rank holds the same bits (parameters AND running
 *    statistics, which nothing but the hook keeps equal now), and those
 *    equal one model trained on the global batch within 1e-5.  A model
 *    without the hook (a plugin) is refused by init_params on every rank.
 *  - The whole trainer (fl_trainer_run), N ranks of micro-batch B against
 *    one local process of micro-batch N*B, 20 steps of the cnn with batch
 *    norm: every parameter and running statistic in the final checkpoints
 *    agrees within 1e-5, over tcp, shm and hierarchical (2 nodes on
 *    127.0.0.2 / 127.0.0.3), 2 and 4 ranks, fusion off / one bucket /
 *    a bucket per layer, gradient merge k_steps 2, and recompute.  Each
 *    rank's shard takes the positions r, r+N, ... of the same shuffled
 *    order, so the N ranks' micro-batches together are the single run's
 *    (see tests/integration/test_coll_train.c).  Without sync_batch_norm
 *    the same comparison differs by far more (the test has teeth). */
#include <config.h>

#include <check.h>
#include <math.h>

#include "coll_testutil.h"
#include "fl_ckpt.h"
#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_model.h"
#include "fl_sync_collective.h"
#include "fl_trainer.h"

#define NCLS 5
#define HW 8

static fl_model *make_cnn(size_t max_batch, int recompute) {
  fl_model_spec sp;
  fl_model_spec_defaults(&sp);
  snprintf(sp.kind, sizeof sp.kind, "cnn");
  sp.in_height = sp.in_width = HW;
  sp.num_classes = NCLS;
  sp.conv_channels[0] = 4;
  sp.conv_channels[1] = 6;
  sp.conv_kernel = 3;
  sp.fc_hidden = 0;
  sp.recompute = recompute;
  snprintf(sp.norm, sizeof sp.norm, "bn");
  fl_model *m = NULL;
  if (fl_model_create(&sp, max_batch, 7, &m) != FL_OK) return NULL;
  return m;
}

/* A batch of n samples: inputs with a per-channel offset (so batch norm's
 * mean matters), labels 0..NCLS-1. */
static void make_batch(size_t n, uint64_t seed, float *x, int32_t *y) {
  uint64_t s = seed;
  for (size_t i = 0; i < n * HW * HW; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 0.6f;
  }
  for (size_t i = 0; i < n; i++) y[i] = (int32_t)((i * 7 + seed) % NCLS);
}

static void sgd(fl_model *m, float lr) {
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    if (p->grad)
      for (size_t e = 0; e < p->n; e++) p->value[e] -= lr * p->grad[e];
  }
}

/* ------------------------------------------------------ one process: hook */

typedef struct count_hook {
  int calls;
  size_t doubles;
  int fail_at; /* return FL_ECLOSED on this call (1-based); 0 = never */
} count_hook;

static fl_status identity_hook(void *ctx, double *buf, size_t n) {
  count_hook *h = ctx;
  ck_assert_ptr_nonnull(buf);
  h->calls++;
  h->doubles += n;
  return h->fail_at == h->calls ? FL_ECLOSED : FL_OK;
}

START_TEST(identity_hook_is_bitwise) {
  const size_t B = 6;
  for (int recompute = 0; recompute < 2; recompute++) {
    fl_model *a = make_cnn(B, recompute), *b = make_cnn(B, recompute);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    count_hook h = {0, 0, 0};
    ck_assert_int_eq(fl_model_set_norm_sync(b, identity_hook, &h), FL_OK);
    float x[B * HW * HW];
    int32_t y[B];
    for (int step = 0; step < 3; step++) {
      make_batch(B, 10 + (uint64_t)step, x, y);
      fl_model_result ra, rb;
      ck_assert_int_eq(fl_model_train_step(a, x, y, B, 1.0f, NULL, NULL, &ra), FL_OK);
      ck_assert_int_eq(fl_model_train_step(b, x, y, B, 1.0f, NULL, NULL, &rb), FL_OK);
      ck_assert(ra.loss_sum == rb.loss_sum);
      for (size_t i = 0; i < fl_model_num_params(a); i++) {
        fl_param *pa = fl_model_param(a, i), *pb = fl_model_param(b, i);
        ck_assert_mem_eq(pa->value, pb->value, pa->n * sizeof(float));
        if (pa->grad) ck_assert_mem_eq(pa->grad, pb->grad, pa->n * sizeof(float));
      }
      sgd(a, 0.1f);
      sgd(b, 0.1f);
    }
    /* per step: 2 batch-norm layers x (2 in forward + 1 in backward); the
     * exchanges carry C+1 and C doubles forward and 2C backward (C = 4, 6) */
    ck_assert_int_eq(h.calls, 3 * 6);
    ck_assert_uint_eq(h.doubles, 3 * ((4 + 1 + 4 + 2 * 4) + (6 + 1 + 6 + 2 * 6)));
    /* eval uses the running statistics: no exchange */
    fl_model_result re;
    ck_assert_int_eq(fl_model_eval(b, x, y, B, &re), FL_OK);
    ck_assert_int_eq(h.calls, 3 * 6);
    /* a failing exchange ends the step with its status */
    h.fail_at = h.calls + 2;
    ck_assert_int_eq(fl_model_train_step(b, x, y, B, 1.0f, NULL, NULL, NULL), FL_ECLOSED);
    /* no hook again: no more calls */
    ck_assert_int_eq(fl_model_set_norm_sync(b, NULL, NULL), FL_OK);
    const int before = h.calls;
    ck_assert_int_eq(fl_model_train_step(b, x, y, B, 1.0f, NULL, NULL, NULL), FL_OK);
    ck_assert_int_eq(h.calls, before);
    fl_model_destroy(a);
    fl_model_destroy(b);
  }
  ck_assert_int_eq(fl_model_set_norm_sync(NULL, identity_hook, NULL), FL_EINVAL);
}
END_TEST

/* ------------------------------------------- ranks: fl_sync_collective */

#define MR 3
#define MB 4
#define MSTEPS 4

typedef struct model_run {
  int n;
  const char *backend;
  size_t nfloats;           /* parameter floats, buffers included */
  float *values;            /* shared: n * nfloats, each rank's final values */
} model_run;

static fl_job g_job;

static fl_status make_coll_sync(ct_job *j, int r, int sync_bn, const char *backend, fl_sync *s) {
  fl_job_defaults(&g_job);
  g_job.cluster.mode = FL_MODE_COLLECTIVE;
  g_job.cluster.collective_timeout_s = 10;
  g_job.strategy.fuse_all_reduce_ops = 1;
  g_job.strategy.fuse_grad_size_in_TFLOPS = 1; /* a bucket per layer, in flight during backward */
  g_job.strategy.sync_batch_norm = sync_bn;
  fl_cluster cl;
  fl_cluster_defaults(&cl);
  cl.mode = FL_MODE_COLLECTIVE;
  cl.trainer_id = r;
  cl.trainers_num = j->n;
  for (int q = 0; q < j->n; q++) cl.trainer_endpoints[q] = j->eps[q];
  cl.n_trainer_endpoints = j->n;
  snprintf(cl.token, sizeof cl.token, "syncbn-test");
  if (backend) snprintf(cl.collective_backend, sizeof cl.collective_backend, "%s", backend);
  return fl_sync_collective_create(&g_job, &cl, s);
}

typedef struct ready_ctx {
  fl_sync *s;
  fl_model *m;
} ready_ctx;

static void on_ready(void *ctx, size_t i) {
  ready_ctx *rc = ctx;
  rc->s->ops->grad_ready(rc->s->self, rc->m, i);
}

static int model_rank(ct_job *j, int r, void *arg) {
  model_run *mr = arg;
  fl_sync s;
  if (make_coll_sync(j, r, 1, mr->backend, &s) != FL_OK) return 10;
  fl_model *m = make_cnn(MB, 0);
  if (!m) return 11;
  int rc = 0;
  if (s.ops->init_params(s.self, m) != FL_OK) rc = 12;
  float x[MR * MB * HW * HW];
  int32_t y[MR * MB];
  ready_ctx ctx = {&s, m};
  for (int step = 0; step < MSTEPS && !rc; step++) {
    make_batch((size_t)j->n * MB, 50 + (uint64_t)step, x, y); /* the global batch */
    int apply = 0;
    if (s.ops->step_begin(s.self, m, step) != FL_OK ||
        fl_model_train_step(m, x + (size_t)r * MB * HW * HW, y + (size_t)r * MB, MB, 1.0f,
                            on_ready, &ctx, NULL) != FL_OK ||
        s.ops->step_end(s.self, m, step, &apply) != FL_OK || !apply)
      rc = 13;
    else
      sgd(m, 0.2f);
  }
  size_t o = 0;
  float *mine = mr->values + (size_t)r * mr->nfloats;
  for (size_t i = 0; i < fl_model_num_params(m) && !rc; i++) {
    fl_param *p = fl_model_param(m, i);
    memcpy(mine + o, p->value, p->n * sizeof(float));
    o += p->n;
  }
  if (!rc && s.ops->finish(s.self) != FL_OK) rc = 14;
  s.ops->destroy(s.self);
  fl_model_destroy(m);
  return rc;
}

static void run_model_ranks(int n, const char *backend) {
  /* the reference model is made after the ranks ran: a forked rank must
   * not inherit (and leak) it */
  fl_model *ref = make_cnn((size_t)n * MB, 0);
  ck_assert_ptr_nonnull(ref);
  size_t nf = 0;
  for (size_t i = 0; i < fl_model_num_params(ref); i++) nf += fl_model_param(ref, i)->n;
  fl_model_destroy(ref);
  model_run mr = {n, backend, nf, ct_shared((size_t)n * nf * sizeof(float))};
  ck_assert_ptr_nonnull(mr.values);
  const char *h[] = {"127.0.0.1", "127.0.0.1", "127.0.0.1"};
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, n, h), 0);
  ct_job_release(&j); /* the sync binds the endpoints itself */
  char logs[MR][256];
  for (int r = 0; r < n; r++)
    snprintf(logs[r], sizeof logs[r], "/tmp/fl_coll_syncbn_%d_%d.log", (int)getpid(), r);
  ct_spawn(&j, model_rank, &mr, NULL, logs);
  ct_wait(&j, 60);
  for (int r = 0; r < n; r++) {
    if (j.status[r] != 0) {
      char cmd[300];
      snprintf(cmd, sizeof cmd, "cat %s >&2", logs[r]);
      ck_assert_int_eq(system(cmd), 0);
    }
    unlink(logs[r]);
  }
  for (int r = 0; r < n; r++) ck_assert_msg(j.status[r] == 0, "rank %d ended with %d", r, j.status[r]);
  /* the same bits on every rank, running statistics included */
  for (int r = 1; r < n; r++)
    ck_assert_msg(memcmp(mr.values, mr.values + (size_t)r * nf, nf * sizeof(float)) == 0,
                  "rank %d's parameters differ from rank 0's", r);
  /* one model on the global batch (the mean loss over n*MB samples) */
  ref = make_cnn((size_t)n * MB, 0);
  ck_assert_ptr_nonnull(ref);
  float x[MR * MB * HW * HW];
  int32_t y[MR * MB];
  for (int step = 0; step < MSTEPS; step++) {
    make_batch((size_t)n * MB, 50 + (uint64_t)step, x, y);
    ck_assert_int_eq(fl_model_train_step(ref, x, y, (size_t)n * MB, 1.0f, NULL, NULL, NULL), FL_OK);
    sgd(ref, 0.2f);
  }
  size_t o = 0;
  double worst = 0.0;
  int running = 0;
  for (size_t i = 0; i < fl_model_num_params(ref); i++) {
    fl_param *p = fl_model_param(ref, i);
    running += strstr(p->name, "running_") != NULL;
    for (size_t e = 0; e < p->n; e++)
      worst = fmax(worst, fabs((double)p->value[e] - (double)mr.values[o + e]));
    o += p->n;
  }
  ck_assert_int_eq(running, 4);
  ck_assert_msg(worst <= 1e-5, "%d ranks differ from the global batch by %g", n, worst);
  munmap(mr.values, (size_t)n * nf * sizeof(float));
  fl_model_destroy(ref);
}

START_TEST(ranks_bitwise_equal_tcp_3) { run_model_ranks(3, "tcp"); }
END_TEST

START_TEST(ranks_bitwise_equal_shm_2) { run_model_ranks(2, "shm"); }
END_TEST

/* A model without the hook (the example plugin) is refused by every rank
 * under sync_batch_norm, with a line saying why. */
static int plugin_rank(ct_job *j, int r, void *arg) {
  (void)arg;
  fl_model_spec sp;
  fl_model_spec_defaults(&sp);
  snprintf(sp.kind, sizeof sp.kind, "plugin");
  const char *b = getenv("FL_BUILDDIR");
  snprintf(sp.plugin_path, sizeof sp.plugin_path, "%s/trainer/.libs/plugin_example.so",
           b ? b : ".");
  fl_model *m = NULL;
  if (fl_model_create(&sp, 4, 1, &m) != FL_OK) return 10;
  int rc = fl_model_set_norm_sync(m, identity_hook, NULL) == FL_ENOTSUP ? 0 : 11;
  fl_sync s;
  if (!rc && make_coll_sync(j, r, 1, "tcp", &s) != FL_OK) rc = 12;
  if (!rc) {
    if (s.ops->init_params(s.self, m) != FL_ENOTSUP) rc = 13;
    /* leave together (an unfinished destroy would abort the job, and the
     * other rank could still be setting up its connections) */
    if (s.ops->finish(s.self) != FL_OK) rc = 14;
    s.ops->destroy(s.self);
  }
  fl_model_destroy(m);
  return rc;
}

START_TEST(plugin_refused) {
  const char *h[] = {"127.0.0.1", "127.0.0.1"};
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, 2, h), 0);
  ct_job_release(&j);
  char logs[2][256];
  for (int r = 0; r < 2; r++)
    snprintf(logs[r], sizeof logs[r], "/tmp/fl_coll_syncbn_plugin_%d_%d.log", (int)getpid(), r);
  ct_spawn(&j, plugin_rank, NULL, NULL, logs);
  ct_wait(&j, 60);
  int said[2];
  for (int r = 0; r < 2; r++) {
    said[r] = ct_file_has(logs[r], "sync_batch_norm: this model (kind plugin, device cpu) has no "
                                   "batch-norm hook");
    unlink(logs[r]);
  }
  for (int r = 0; r < 2; r++) {
    ck_assert_msg(j.status[r] == 0, "rank %d ended with %d", r, j.status[r]);
    ck_assert_msg(said[r], "rank %d does not say why", r);
  }
}
END_TEST

/* ------------------------------------------- the trainer: global batch */

#define TB 8
#define TSTEPS 20
#define TMAXR 4

typedef struct variant {
  const char *name;
  int n, k;       /* ranks, gradient merge k_steps */
  int fuse, fuse_layers;
  const char *backend; /* NULL: auto (hierarchical when hier) */
  int hier;       /* ranks on 127.0.0.2 / 127.0.0.3 alternately */
  int recompute;
  int sync_bn;
} variant;

static char g_dir[64];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fl_coll_syncbn.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* The job text for micro-batch `batch`, checkpoints into ckdir. */
static void job_text(const variant *v, int batch, const char *ckdir, char *out, size_t cap) {
  /* 4 steps per epoch, so 20 steps cross 4 reshuffles */
  const long samples = (long)v->n * TB * v->k * 4;
  int w = snprintf(out, cap,
                   "model:\n  kind: cnn\n  input_shape: [1, %d, %d]\n  num_classes: %d\n"
                   "  conv_channels: [4, 6]\n  conv_kernel: 3\n  fc_hidden: 12\n  norm: bn\n"
                   "data:\n  format: synthetic\n  synthetic:\n    train_samples: %ld\n"
                   "    test_samples: 16\n"
                   "optimizer:\n  name: momentum\n  lr: 0.05\n"
                   "train:\n  epochs: 100\n  batch_size: %d\n  max_steps: %d\n  eval: false\n"
                   "  log_interval: 1000\n  num_threads: 1\n  checkpoint_dir: %s\n"
                   "cluster:\n  collective_timeout_s: 20\n"
                   "strategy:\n  gradient_merge: %s\n  gradient_merge_configs:\n"
                   "    k_steps: %d\n    avg: true\n  fuse_all_reduce_ops: %s\n"
                   "  fuse_grad_size_in_TFLOPS: %d\n  use_hierarchical_allreduce: %s\n"
                   "  recompute: %s\n  sync_batch_norm: %s\n",
                   HW, HW, NCLS, samples, batch, TSTEPS, ckdir, v->k > 1 ? "true" : "false",
                   v->k, v->fuse ? "true" : "false", v->fuse_layers ? v->fuse_layers : 50,
                   v->hier ? "true" : "false", v->recompute ? "true" : "false",
                   v->sync_bn ? "true" : "false");
  ck_assert(w > 0 && (size_t)w < cap);
}

typedef struct trainer_run {
  const variant *v;
  int local;
  char text[2048];
} trainer_run;

/* One rank of fl_trainer_run: collective, or the single local process. */
static int trainer_rank(ct_job *j, int r, void *arg) {
  trainer_run *tr = arg;
  fl_job job;
  if (fl_job_load_string(tr->text, "syncbn-job", &job) != FL_OK || fl_job_validate(&job) != FL_OK)
    return 10;
  fl_sync s;
  fl_status st;
  fl_cluster cl;
  fl_cluster_defaults(&cl);
  if (tr->local) {
    st = fl_sync_local_create(&job, &cl, &s);
  } else {
    if (tr->v->backend)
      snprintf(cl.collective_backend, sizeof cl.collective_backend, "%s", tr->v->backend);
    cl.mode = FL_MODE_COLLECTIVE;
    cl.trainer_id = r;
    cl.trainers_num = j->n;
    for (int q = 0; q < j->n; q++) cl.trainer_endpoints[q] = j->eps[q];
    cl.n_trainer_endpoints = j->n;
    snprintf(cl.token, sizeof cl.token, "syncbn-train");
    st = fl_sync_collective_create(&job, &cl, &s);
  }
  if (st != FL_OK) return 11;
  FILE *log = fopen("/dev/null", "w");
  fl_trainer_options o = {.job = &job, .log = log};
  fl_trainer_report rep;
  st = fl_trainer_run(&o, &s, &rep);
  s.ops->destroy(s.self);
  if (log) fclose(log);
  return st == FL_OK && rep.steps == TSTEPS ? 0 : 12;
}

static void run_trainers(const variant *v, int local, const char *ckdir) {
  trainer_run tr = {.v = v, .local = local};
  job_text(v, local ? v->n * TB : TB, ckdir, tr.text, sizeof tr.text);
  const int n = local ? 1 : v->n;
  const char *h[TMAXR];
  for (int r = 0; r < n; r++) h[r] = v->hier ? (r % 2 ? "127.0.0.3" : "127.0.0.2") : "127.0.0.1";
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, n, h), 0);
  ct_job_release(&j);
  char logs[TMAXR][256];
  for (int r = 0; r < n; r++)
    snprintf(logs[r], sizeof logs[r], "%s/%s.%s.%d.log", g_dir, v->name, local ? "l" : "c", r);
  ct_spawn(&j, trainer_rank, &tr, NULL, logs);
  ct_wait(&j, 120);
  for (int r = 0; r < n; r++)
    if (j.status[r] != 0) {
      char cmd[400];
      snprintf(cmd, sizeof cmd, "tail -n 30 %s >&2", logs[r]);
      ck_assert_int_eq(system(cmd), 0);
      ck_abort_msg("%s: %s rank %d ended with %d", v->name, local ? "local" : "collective", r,
                   j.status[r]);
    }
}

/* Largest |a - b| over every param/ record (running statistics included)
 * of the newest checkpoints of two directories. */
static double max_diff(const char *da, const char *dbb) {
  fl_ckpt *a = NULL, *b = NULL;
  int64_t sa = 0, sb = 0;
  ck_assert_int_eq(fl_ckpt_dir_load_latest(da, &a, &sa), FL_OK);
  ck_assert_int_eq(fl_ckpt_dir_load_latest(dbb, &b, &sb), FL_OK);
  ck_assert_int_eq(sa, TSTEPS);
  ck_assert_int_eq(sb, TSTEPS);
  double worst = 0.0;
  int seen = 0, running = 0;
  for (size_t i = 0; i < fl_ckpt_count(a); i++) {
    fl_ckpt_record ra, rb;
    ck_assert_int_eq(fl_ckpt_record_at(a, i, &ra), FL_OK);
    if (strncmp(ra.name, "param/", 6) != 0) continue;
    ck_assert_int_eq(fl_ckpt_find(b, ra.name, &rb), FL_OK);
    ck_assert_uint_eq(ra.nbytes, rb.nbytes);
    const float *x = ra.data, *y = rb.data;
    for (size_t e = 0; e < ra.nbytes / sizeof(float); e++) {
      const double d = fabs((double)x[e] - (double)y[e]);
      if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
    }
    seen++;
    running += strstr(ra.name, ".running_") != NULL;
  }
  /* conv0, bn0 (4), conv1, bn1 (4), fc0 (2), fc1 (2) */
  ck_assert_int_eq(seen, 14);
  ck_assert_int_eq(running, 4);
  fl_ckpt_free(a);
  fl_ckpt_free(b);
  return worst;
}

static double compare(const variant *v) {
  char ck1[300], ckn[300];
  snprintf(ck1, sizeof ck1, "%s/%s-single", g_dir, v->name);
  snprintf(ckn, sizeof ckn, "%s/%s-ranks", g_dir, v->name);
  run_trainers(v, 1, ck1);
  run_trainers(v, 0, ckn);
  return max_diff(ck1, ckn);
}

#define EQUIV(tname, ...)                                                                   \
  START_TEST(tname) {                                                                       \
    const variant v = {#tname, __VA_ARGS__, 1};                                             \
    const double d = compare(&v);                                                           \
    ck_assert_msg(d <= 1e-5, "%s: parameters differ by %g after %d steps", #tname, d,      \
                  TSTEPS);                                                                  \
  }                                                                                         \
  END_TEST

/*    name                          n  k  fuse layers backend hier recompute */
EQUIV(tcp_2_ranks_no_fusion,        2, 1, 0, 0, "tcp", 0, 0)
EQUIV(shm_2_ranks_merge_one_bucket, 2, 2, 1, 0, "shm", 0, 0)
EQUIV(tcp_4_ranks_merge_layer_buckets, 4, 2, 1, 1, "tcp", 0, 0)
EQUIV(hier_4_ranks_2_nodes,         4, 1, 1, 1, NULL, 1, 0)
EQUIV(shm_2_ranks_recompute,        2, 1, 1, 1, "shm", 0, 1)

START_TEST(without_sync_bn_differs) {
  const variant v = {"plain_bn", 2, 1, 0, 0, "tcp", 0, 0, 0};
  const double d = compare(&v);
  ck_assert_msg(d > 1e-3, "per-rank batch norm should differ from the global batch, by %g", d);
}
END_TEST

#define ADD(name, timeout)                                                                  \
  do {                                                                                      \
    TCase *t = tcase_create(#name);                                                         \
    tcase_add_checked_fixture(t, setup, teardown);                                          \
    tcase_set_timeout(t, timeout);                                                          \
    tcase_add_test(t, name);                                                                \
    suite_add_tcase(s, t);                                                                  \
  } while (0)

int main(void) {
  Suite *s = suite_create("coll_syncbn");
  ADD(identity_hook_is_bitwise, 60);
  ADD(ranks_bitwise_equal_tcp_3, 90);
  ADD(ranks_bitwise_equal_shm_2, 90);
  ADD(plugin_refused, 60);
  ADD(tcp_2_ranks_no_fusion, 240);
  ADD(shm_2_ranks_merge_one_bucket, 240);
  ADD(tcp_4_ranks_merge_layer_buckets, 240);
  ADD(hier_4_ranks_2_nodes, 240);
  ADD(shm_2_ranks_recompute, 240);
  ADD(without_sync_bn_differs, 240);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
