/* sync_collective.c - collective mode (fl_sync_collective.h): fusion
 * buckets filled from grad_ready and reduced on the collective engine
 * while backward goes on, then averaged and copied back for the loop's
 * local optimizer step; and the model's batch-norm hook for
 * sync_batch_norm.
 *
 * Ordering of the batch-norm exchanges.  The hook runs on the compute
 * thread in the middle of forward and backward, while bucket allreduces
 * posted earlier in the same backward may still be queued or running on
 * the engine's worker thread over the same connections.  The hook does
 * not open a side channel: it is an ordinary fl_coll_allreduce (fp64) on
 * the same communicator, which the engine appends to the same FIFO queue
 * the buckets are on and runs one at a time on the same worker.  So a
 * statistics allreduce never interleaves with a bucket's messages; it
 * starts after the buckets posted before it have finished, and, since
 * every rank runs the same model, posts its buckets at the same points of
 * backward and calls the hook at the same layers, every rank issues the
 * same sequence of collectives.  (The cost: backward waits at a batch-norm
 * layer for the buckets posted after the layers above it.) */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_bucket.h"
#include "fl_ckpt.h"
#include "fl_coll.h"
#include "fl_log.h"
#include "fl_metrics.h"
#include "fl_optim.h"
#include "fl_sync_collective.h"
#include "fl_timeline.h"

typedef struct bucket_rt {
  float *flat;    /* the bucket's gradients, fp32 */
  uint16_t *wire; /* compressed copy (grad_compression) */
  size_t pending; /* parameters not reported yet this step */
  int ready;
  fl_coll_req *req;
  int64_t t_post; /* when its allreduce was posted (timeline clock, us) */
} bucket_rt;

typedef struct sync_coll {
  fl_coll *comm;
  int rank, world;
  int fuse, fuse_mb, fuse_layers;
  fl_grad_compression comp;
  int sync_bn;
  int bn_hooked; /* the model normalises over the global batch (norm_sync) */
  int overlap;
  fl_model *model; /* the model the plan was built for */
  size_t np;
  fl_bucket_plan plan;
  bucket_rt *b;
  unsigned char *reported;
  size_t next_post;
  int in_step;
  int finished;
  fl_status post_err;
  size_t *bufs; /* indices of the buffers (batch-norm running statistics) */
  size_t nbufs, buf_floats;
  float *buf_flat;
} sync_coll;

/* ------------------------------------------------------------- plan */

/* The model's batch-norm hook: sum the statistics over the ranks, in
 * place, in fp64 (bitwise the same on every rank; see the top of file for
 * the ordering with the buckets).  Errors are logged by the engine. */
static fl_status norm_sync(void *ctx, double *buf, size_t n) {
  sync_coll *s = ctx;
  return fl_coll_allreduce(s->comm, buf, n, FL_COLL_F64);
}

static void unplan(sync_coll *s) {
  if (s->b)
    for (size_t i = 0; i < s->plan.nb; i++) {
      free(s->b[i].flat);
      free(s->b[i].wire);
    }
  free(s->b);
  free(s->reported);
  free(s->bufs);
  free(s->buf_flat);
  fl_bucket_plan_free(&s->plan);
  s->b = NULL;
  s->reported = NULL;
  s->bufs = NULL;
  s->buf_flat = NULL;
  s->nbufs = s->buf_floats = 0;
  s->model = NULL;
}

static fl_status plan(sync_coll *s, fl_model *m) {
  if (s->model == m) return FL_OK;
  unplan(s);
  size_t np = fl_model_num_params(m);
  size_t *n = calloc(np ? np : 1, sizeof(size_t));
  int *layer = calloc(np ? np : 1, sizeof(int)), *tr = calloc(np ? np : 1, sizeof(int));
  s->reported = calloc(np ? np : 1, 1);
  s->bufs = calloc(np ? np : 1, sizeof(size_t));
  fl_status st = FL_OK;
  if (!n || !layer || !tr || !s->reported || !s->bufs) {
    st = FL_ERR(FL_ENOMEM, "collective: out of memory planning %zu parameters", np);
    goto done;
  }
  for (size_t i = 0; i < np; i++) {
    fl_param *p = fl_model_param(m, i);
    n[i] = p->n;
    layer[i] = p->layer;
    tr[i] = p->grad != NULL;
    if (!p->grad) {
      s->bufs[s->nbufs++] = i;
      s->buf_floats += p->n;
    }
  }
  st = fl_bucket_plan_build(n, layer, tr, np, s->fuse, (size_t)s->fuse_mb << 20, s->fuse_layers,
                            &s->plan);
  if (st != FL_OK) goto done;
  s->b = calloc(s->plan.nb ? s->plan.nb : 1, sizeof(bucket_rt));
  if (s->buf_floats) s->buf_flat = malloc(s->buf_floats * sizeof(float));
  if (!s->b || (s->buf_floats && !s->buf_flat)) {
    st = FL_ERR(FL_ENOMEM, "collective: out of memory for fusion buckets");
    goto done;
  }
  for (size_t i = 0; i < s->plan.nb; i++) {
    size_t f = s->plan.floats[i] ? s->plan.floats[i] : 1;
    s->b[i].flat = malloc(f * sizeof(float));
    if (s->comp != FL_COMPRESS_NONE) s->b[i].wire = malloc(f * sizeof(uint16_t));
    if (!s->b[i].flat || (s->comp != FL_COMPRESS_NONE && !s->b[i].wire)) {
      st = FL_ERR(FL_ENOMEM, "collective: out of memory for bucket %zu (%zu floats)", i, f);
      goto done;
    }
  }
  s->bn_hooked = 0;
  if (s->sync_bn && s->world > 1) {
    st = fl_model_set_norm_sync(m, norm_sync, s);
    if (st == FL_ENOTSUP)
      st = FL_ERR(FL_ENOTSUP, "collective: sync_batch_norm: this model (kind %s, device %s) has "
                  "no batch-norm hook (a plugin computes its own forward); turn "
                  "sync_batch_norm off",
                  fl_model_get_spec(m)->kind, fl_model_get_spec(m)->device);
    if (st != FL_OK) goto done;
    s->bn_hooked = 1;
  }
  s->np = np;
  s->model = m;
  if (s->rank == 0) {
    size_t tot = 0;
    for (size_t i = 0; i < s->plan.nb; i++) tot += s->plan.floats[i];
    FL_LOGI("collective: %zu gradient bucket%s over %zu floats (fusion %s)", s->plan.nb,
            s->plan.nb == 1 ? "" : "s", tot, s->fuse ? "on" : "off");
  }
done:
  free(n);
  free(layer);
  free(tr);
  if (st != FL_OK) unplan(s);
  return st;
}

/* ------------------------------------------------------------ buckets */

static void post(sync_coll *s, size_t bi) {
  bucket_rt *b = &s->b[bi];
  size_t n = s->plan.floats[bi];
  fl_status st;
  b->t_post = fl_timeline_now_us();
  if (s->comp == FL_COMPRESS_NONE) {
    st = fl_coll_iallreduce(s->comm, b->flat, n, FL_COLL_F32, &b->req);
  } else {
    float w = (float)s->world;
    for (size_t i = 0; i < n; i++) b->flat[i] /= w;
    if (s->comp == FL_COMPRESS_FP16)
      fl_cast_f32_to_f16(b->flat, b->wire, n);
    else
      fl_cast_f32_to_bf16(b->flat, b->wire, n);
    st = fl_coll_iallreduce(s->comm, b->wire, n,
                            s->comp == FL_COMPRESS_FP16 ? FL_COLL_F16 : FL_COLL_BF16, &b->req);
  }
  if (st != FL_OK && s->post_err == FL_OK) s->post_err = st;
}

/* Queue, in bucket order (the same on every rank), every bucket whose
 * gradients are all in. */
static void post_ready(sync_coll *s) {
  while (s->next_post < s->plan.nb && s->b[s->next_post].ready) post(s, s->next_post++);
}

static void take_grad(sync_coll *s, fl_model *m, size_t i) {
  int bi = s->plan.bucket_of[i];
  fl_param *p = fl_model_param(m, i);
  bucket_rt *b = &s->b[bi];
  s->reported[i] = 1;
  memcpy(b->flat + s->plan.offset[i], p->grad, p->n * sizeof(float));
  if (--b->pending == 0) b->ready = 1;
}

/* ---------------------------------------------------------- the ops */

static fl_status coll_init_params(void *self, fl_model *m) {
  sync_coll *s = self;
  FL_TRY(plan(s, m));
  if (s->world == 1) return FL_OK;
  size_t tot = 0;
  for (size_t i = 0; i < s->np; i++) tot += fl_model_param(m, i)->n;
  float *all = malloc((tot ? tot : 1) * sizeof(float));
  if (!all) return FL_ERR(FL_ENOMEM, "collective: out of memory for %zu parameters", tot);
  size_t o = 0;
  for (size_t i = 0; i < s->np; i++) {
    fl_param *p = fl_model_param(m, i);
    memcpy(all + o, p->value, p->n * sizeof(float));
    o += p->n;
  }
  fl_status st = fl_coll_broadcast(s->comm, all, tot * sizeof(float), 0);
  if (st == FL_OK) {
    o = 0;
    for (size_t i = 0; i < s->np; i++) {
      fl_param *p = fl_model_param(m, i);
      memcpy(p->value, all + o, p->n * sizeof(float));
      o += p->n;
    }
  }
  free(all);
  return st;
}

static fl_status coll_agree_steps(void *self, int64_t local_steps, int64_t *global_steps) {
  sync_coll *s = self;
  int64_t *all = malloc((size_t)s->world * sizeof(int64_t));
  if (!all) return FL_ERR(FL_ENOMEM, "collective: out of memory");
  fl_status st = fl_coll_allgather(s->comm, &local_steps, sizeof(int64_t), all);
  if (st == FL_OK) {
    int64_t lo = all[0];
    int who = 0;
    for (int r = 1; r < s->world; r++)
      if (all[r] < lo) {
        lo = all[r];
        who = r;
      }
    if (lo != local_steps)
      FL_LOGI("collective: this rank has %lld steps per epoch, rank %d only %lld: every rank "
              "runs %lld",
              (long long)local_steps, who, (long long)lo, (long long)lo);
    *global_steps = lo;
  }
  free(all);
  return st;
}

static fl_status coll_step_begin(void *self, fl_model *m, int64_t step) {
  sync_coll *s = self;
  if (s->finished)
    return FL_ERR(FL_ESTATE, "collective: step %lld begun after finish", (long long)step);
  FL_TRY(plan(s, m));
  memset(s->reported, 0, s->np ? s->np : 1);
  for (size_t i = 0; i < s->plan.nb; i++) {
    s->b[i].pending = s->plan.start[i + 1] - s->plan.start[i];
    s->b[i].ready = 0;
    s->b[i].req = NULL;
  }
  s->next_post = 0;
  s->post_err = FL_OK;
  s->in_step = 1;
  return FL_OK;
}

static void coll_grad_ready(void *self, fl_model *m, size_t index) {
  sync_coll *s = self;
  if (!s->in_step || m != s->model || index >= s->np || s->reported[index] ||
      s->plan.bucket_of[index] < 0)
    return;
  take_grad(s, m, index);
  if (s->overlap) post_ready(s);
}

/* Buffers (batch-norm running statistics) are rank 0's on every rank, as
 * PyTorch DDP's broadcast_buffers makes them.  With the batch-norm hook
 * they already are: every rank updates them from the same global
 * statistics, bit for bit, starting from the broadcast values. */
static fl_status sync_buffers(sync_coll *s, fl_model *m) {
  if (s->nbufs == 0 || s->world == 1 || s->bn_hooked) return FL_OK;
  size_t o = 0;
  for (size_t k = 0; k < s->nbufs; k++) {
    fl_param *p = fl_model_param(m, s->bufs[k]);
    memcpy(s->buf_flat + o, p->value, p->n * sizeof(float));
    o += p->n;
  }
  FL_TRY(fl_coll_broadcast(s->comm, s->buf_flat, s->buf_floats * sizeof(float), 0));
  o = 0;
  for (size_t k = 0; k < s->nbufs; k++) {
    fl_param *p = fl_model_param(m, s->bufs[k]);
    memcpy(p->value, s->buf_flat + o, p->n * sizeof(float));
    o += p->n;
  }
  return FL_OK;
}

static fl_status coll_step_end(void *self, fl_model *m, int64_t step, int *apply_locally) {
  sync_coll *s = self;
  (void)step;
  *apply_locally = 1;
  if (!s->in_step || m != s->model)
    return FL_ERR(FL_ESTATE, "collective: step_end without step_begin on this model");
  s->in_step = 0;
  /* Parameters backward did not report go in now (reverse order). */
  for (size_t bi = 0; bi < s->plan.nb; bi++)
    for (size_t k = s->plan.start[bi]; k < s->plan.start[bi + 1]; k++)
      if (!s->reported[s->plan.order[k]]) take_grad(s, m, s->plan.order[k]);
  post_ready(s);
  fl_status st = s->post_err;
  /* Observability: each bucket's allreduce from post to completion, and
   * the time this rank waits for them after backward (a straggler's peers
   * wait long). */
  fl_timeline *tl = fl_timeline_default();
  const fl_std_metrics *obs = fl_metrics_std();
  int64_t t_wait = fl_timeline_now_us();
  fl_timeline_begin(tl, "comm", "wait");
  for (size_t bi = 0; bi < s->plan.nb; bi++) {
    if (!s->b[bi].req) continue;
    fl_status w = fl_coll_wait(s->comm, s->b[bi].req);
    s->b[bi].req = NULL;
    if (st == FL_OK) st = w;
    int64_t t_done = fl_timeline_now_us();
    size_t bytes = s->plan.floats[bi] * (s->comp == FL_COMPRESS_NONE ? 4 : 2);
    char name[40];
    snprintf(name, sizeof name, "allreduce bucket %zu", bi);
    fl_timeline_span(tl, "comm", name, s->b[bi].t_post, t_done, "bytes", (int64_t)bytes);
    fl_series_observe(obs->allreduce_seconds, (double)(t_done - s->b[bi].t_post) * 1e-6);
  }
  fl_timeline_end(tl, "comm", "wait");
  fl_series_observe(obs->wait_seconds, (double)(fl_timeline_now_us() - t_wait) * 1e-6);
  if (st != FL_OK) return st; /* logged by the engine, naming the rank */
  float w = (float)s->world;
  for (size_t bi = 0; bi < s->plan.nb; bi++) {
    bucket_rt *b = &s->b[bi];
    size_t n = s->plan.floats[bi];
    if (s->comp == FL_COMPRESS_FP16)
      fl_cast_f16_to_f32(b->wire, b->flat, n);
    else if (s->comp == FL_COMPRESS_BF16)
      fl_cast_bf16_to_f32(b->wire, b->flat, n);
    else if (s->world > 1)
      for (size_t i = 0; i < n; i++) b->flat[i] /= w;
    for (size_t k = s->plan.start[bi]; k < s->plan.start[bi + 1]; k++) {
      size_t i = s->plan.order[k];
      fl_param *p = fl_model_param(m, i);
      memcpy(p->grad, b->flat + s->plan.offset[i], p->n * sizeof(float));
    }
  }
  return sync_buffers(s, m);
}

static fl_status coll_reduce_metrics(void *self, double *v, size_t n) {
  sync_coll *s = self;
  return fl_coll_allreduce(s->comm, v, n, FL_COLL_F64);
}

static int coll_rank(void *self) {
  return ((sync_coll *)self)->rank;
}

static int coll_world_size(void *self) {
  return ((sync_coll *)self)->world;
}

/* The checkpoint record of the allreduce tuning (fl_coll_get_tuning). */
#define TUNING_RECORD "collective/tuning"

/* Checkpoint hook: the allreduce tuning, so that a run resumed with the
 * same world size runs the same algorithms (hence gives the same bits)
 * without probing the network again. */
static void coll_ckpt_save(void *self, fl_ckpt_writer *w) {
  sync_coll *s = self;
  uint8_t blob[FL_COLL_TUNING_MAX];
  size_t len = 0;
  if (fl_coll_get_tuning(s->comm, blob, sizeof blob, &len) == FL_OK && len)
    fl_ckpt_put_blob(w, TUNING_RECORD, blob, len);
}

/* Rank 0 of an automatic choice: the tuning recorded in the newest
 * checkpoint of the job's directory (the one a resume starts from) into
 * blob, its length into *len (0: none, or not needed).  The engine
 * ignores it when the world size differs, and probes. */
static void restored_tuning(const fl_job *job, const fl_cluster *cl, uint8_t *blob, size_t *len) {
  const char *dir = cl->checkpoint_dir[0] ? cl->checkpoint_dir : job->train.checkpoint_dir;
  fl_allreduce_algorithm a = job->strategy.allreduce_algorithm;
  fl_ckpt *c = NULL;
  fl_ckpt_record rec;
  *len = 0;
  if (cl->trainer_id != 0 || cl->trainers_num < 2 || !dir[0] ||
      (a != FL_AR_AUTO && a != FL_AR_HIERARCHICAL) || fl_ckpt_dir_load_latest(dir, &c, NULL) != FL_OK)
    return;
  if (fl_ckpt_find(c, TUNING_RECORD, &rec) == FL_OK && rec.nbytes <= FL_COLL_TUNING_MAX) {
    memcpy(blob, rec.data, rec.nbytes);
    *len = rec.nbytes;
  }
  fl_ckpt_free(c);
}

static fl_status coll_broadcast(void *self, void *buf, size_t bytes, int root) {
  return fl_coll_broadcast(((sync_coll *)self)->comm, buf, bytes, root);
}

static fl_status coll_finish(void *self) {
  ((sync_coll *)self)->finished = 1;
  return FL_OK;
}

static void coll_destroy(void *self) {
  sync_coll *s = self;
  if (!s) return;
  if (s->comm) {
    if (!s->finished) fl_coll_abort(s->comm, "its training loop stopped before the end of the run");
    /* Requests still queued (an error in the middle of a step) end first. */
    for (size_t bi = 0; s->b && bi < s->plan.nb; bi++)
      if (s->b[bi].req) fl_coll_wait(s->comm, s->b[bi].req);
    fl_coll_destroy(s->comm);
  }
  unplan(s);
  free(s);
}

static const fl_sync_ops coll_ops = {
    .name = "collective",
    .init_params = coll_init_params,
    .agree_steps = coll_agree_steps,
    .step_begin = coll_step_begin,
    .grad_ready = coll_grad_ready,
    .step_end = coll_step_end,
    .reduce_metrics = coll_reduce_metrics,
    .rank = coll_rank,
    .world_size = coll_world_size,
    .finish = coll_finish,
    .destroy = coll_destroy,
    .ckpt_save = coll_ckpt_save,
    .broadcast = coll_broadcast,
};

/* The values that turn an environment flag off; any other sets it. */
static const char *const k_flag_off[] = {"0", "false", "off", NULL};

static int env_flag(const char *name, int dflt) {
  const char *v = getenv(name);
  if (!v || !v[0]) return dflt;
  return fl_names_find(k_flag_off, v) < 0;
}

static int (*g_give_up)(void *arg);
static void *g_give_up_arg;

/* Ownership: arg stays the caller's. */
void fl_sync_collective_give_up(int (*fn)(void *arg), void *arg) {
  g_give_up = fn;
  g_give_up_arg = arg;
}

fl_status fl_sync_collective_create(const fl_job *job, const fl_cluster *cluster, fl_sync *out) {
  memset(out, 0, sizeof(*out));
  fl_cluster *cl = malloc(sizeof(*cl));
  sync_coll *s = calloc(1, sizeof(*s));
  fl_status st = FL_OK;
  if (!cl || !s) {
    st = FL_ERR(FL_ENOMEM, "collective: out of memory");
    goto fail;
  }
  *cl = *cluster;
  if ((st = fl_cluster_load_token(cl, job->cluster.token_file)) != FL_OK) goto fail;
  s->rank = cl->trainer_id;
  s->world = cl->trainers_num;
  if (s->world > 1 && cl->n_trainer_endpoints != s->world) {
    st = FL_ERR(FL_EINVAL, "collective: %d trainers but %d trainer endpoints (FLOTILLA_TRAINER_"
                           "ENDPOINTS)",
                s->world, cl->n_trainer_endpoints);
    goto fail;
  }
  const fl_strategy *sg = &job->strategy;
  s->fuse = sg->fuse_all_reduce_ops;
  s->fuse_mb = sg->fuse_grad_size_in_MB;
  s->fuse_layers = sg->fuse_grad_size_in_TFLOPS;
  s->comp = sg->grad_compression;
  s->sync_bn = sg->sync_batch_norm;
  s->overlap = env_flag("FLOTILLA_COLLECTIVE_OVERLAP", 1);
  fl_coll_options o = fl_coll_options_default();
  o.rank = s->rank;
  o.world_size = s->world;
  o.endpoints = cl->trainer_endpoints;
  o.token = cl->token;
  o.backend = cl->collective_backend[0] ? cl->collective_backend : NULL;
  o.hierarchical = sg->use_hierarchical_allreduce;
  o.ranks_per_node = sg->hierarchical_allreduce_inter_nranks;
  o.nrings = sg->nccl_comm_num;
  o.algorithm = fl_allreduce_algorithm_name(sg->allreduce_algorithm);
  o.timeout_s = job->cluster.collective_timeout_s;
  o.give_up = g_give_up;
  o.give_up_arg = g_give_up_arg;
  uint8_t tuning[FL_COLL_TUNING_MAX];
  restored_tuning(job, cl, tuning, &o.tuning_len);
  o.tuning = tuning;
  {
    /* NCCL on the GPU this trainer's model uses (fl_cluster_gpu). */
    int ndev = fl_cuda_device_count(), node, local_rank, local_size;
    if (ndev > 0) {
      if ((st = fl_cluster_local(cl, &node, &local_rank, &local_size)) != FL_OK ||
          (st = fl_cluster_gpu(cl, local_rank, ndev, &o.gpu)) != FL_OK)
        goto fail;
    }
  }
  if (s->world > 1 && !cl->token[0])
    FL_LOGW("collective: no shared token (FLOTILLA_TOKEN, FLOTILLA_TOKEN_FILE or "
            "cluster.token_file): any process that reaches the rendezvous can join");
  if ((st = fl_coll_create(&o, &s->comm)) != FL_OK) goto fail;
  FL_LOGI("collective: rank %d of %d, backend %s, %d ring%s, fusion %s (%d MB, %d layers), "
          "compression %s, overlap %s, timeout %.0f s",
          s->rank, s->world, fl_coll_backend_name(s->comm), o.nrings, o.nrings == 1 ? "" : "s",
          s->fuse ? "on" : "off", s->fuse_mb, s->fuse_layers,
          s->comp == FL_COMPRESS_FP16 ? "fp16" : s->comp == FL_COMPRESS_BF16 ? "bf16" : "none",
          s->overlap ? "on" : "off", o.timeout_s);
  free(cl);
  out->ops = &coll_ops;
  out->self = s;
  return FL_OK;
fail:
  free(cl);
  free(s);
  return st;
}
