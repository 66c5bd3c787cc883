/* sync_ps.c - PServer mode of fl_sync (fl_sync.h): how a trainer's step
 * reaches the parameter servers.
 *
 *   sync  (a_sync false): each block's merged gradient is queued as soon
 *         as backward reports its parameter final (grad_ready); a server's
 *         queued blocks go in one call once 1 MiB of them is queued (so a
 *         large model's pushes overlap the rest of backward) or at the
 *         step's end (fl_ps_client_push_block); step_end pulls every block asking
 *         for the next step, which the servers answer once every live
 *         trainer's push of this step is summed and applied.  The loop does
 *         not run an optimizer (apply = 0).
 *   async (a_sync true): the same pushes; the pulls (after the pushes are
 *         in) are answered at once with whatever the servers hold.
 *   geo   (a_sync true, a_sync_configs.k_steps = k > 0): the loop trains
 *         locally with its own optimizer (apply = 1); every k steps, before
 *         the step, the delta since the last exchange, divided by the number
 *         of trainers (as Paddle's GeoSGD does), is pushed and added on the
 *         servers, and the parameters are pulled back.  finish pushes the
 *         last delta.
 * strategy.grad_compression (fp16 / bf16, or fp16_allreduce) halves the
 * pushed bytes: gradients and deltas travel cast, the servers widen them.
 * Steps on the wire count from the step the servers report at registration
 * (a restarted trainer joins at the servers' current step).  Only trainable
 * parameters travel; buffers (batch-norm statistics) stay local.
 * agree_steps is a barrier (minimum) kept by the servers for the whole job
 * ("job/agree_steps"), reduce_metrics a barrier (sum) named by the loop's
 * step it is called at and its rank among the calls at that step
 * ("metrics/<step>/<n>"), so that a trainer restarted into a running job
 * (its first registration finds the servers past step 0: it rejoins and
 * the loop catches up to their step, fl_sync_ps_join_step) meets the
 * others' barriers under the same names and never an older one's; a
 * trainer waiting in a barrier is not waited for by sync steps (see
 * pserver/fl_ps.h). */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_identity.h"
#include "fl_log.h"
#include "fl_protocol.h"
#include "fl_ps_client.h"
#include "flotilla.pb-c.h"

typedef struct sync_ps {
  const fl_job *job;
  fl_ps_client *client;
  int mode;
  int k_geo;
  int rank, world;
  int64_t step;        /* step number of the pushes of the current step */
  int64_t local_steps; /* steps done by this process (geo period) */
  int64_t loop_step;    /* the loop's step (optimizer steps done), for barrier names */
  int64_t metrics_step; /* loop step of the last reduce_metrics */
  int64_t metrics_seq;  /* calls at that step */
  int64_t join_step;    /* servers' step at the first registration */
  /* the parameters that travel */
  fl_param **params;
  size_t np;
  long *index_of;      /* model param index -> params index, or -1 */
  size_t n_model;
  fl_ps_sparse_spec *tables;
  size_t n_tables;
  float *geo_old;      /* geo: values at the last exchange (all params) */
  float *geo_delta;
  size_t total;
  uint8_t *pushed;     /* per param, this step */
  fl_status err;       /* from grad_ready, reported by step_end */
  int registered;
  int finished;
  char token[FL_TOKEN_MAX];
  char run_id[64];
} sync_ps;

static const fl_sync_ops ps_ops;

/* Register (once) without parameters, so barriers work before the model
 * exists (agree_steps runs before init_params). */
static fl_status ensure_registered(sync_ps *s) {
  int64_t step = 0;
  if (s->registered) return FL_OK;
  FL_TRY(fl_ps_client_register(s->client, NULL, 0, s->tables, s->n_tables, &step));
  s->registered = 1;
  /* Nobody trains before every trainer passed agree_steps: a step past 0
   * now means this process joins a job that is already running. */
  s->join_step = step;
  if (step > 0)
    FL_LOGI("trainer %d: the pservers are at step %" PRId64 ": rejoining the running job", s->rank,
            step);
  return FL_OK;
}

static fl_status collect_params(sync_ps *s, fl_model *m) {
  size_t n;
  if (s->params) return FL_OK;
  if (!m) return FL_ERR(FL_EINVAL, "ps mode: no model");
  n = fl_model_num_params(m);
  s->params = calloc(n + 1, sizeof *s->params);
  s->index_of = calloc(n + 1, sizeof *s->index_of);
  if (!s->params || !s->index_of) return FL_ERR(FL_ENOMEM, "ps mode: out of memory");
  s->n_model = n;
  for (size_t i = 0; i < n; i++) {
    fl_param *p = fl_model_param(m, i);
    s->index_of[i] = -1;
    if (!p->grad) continue;
    s->index_of[i] = (long)s->np;
    s->params[s->np++] = p;
  }
  return FL_OK;
}

static fl_status pull_all(sync_ps *s, int64_t min_step) {
  return fl_ps_client_pull_dense(s->client, min_step);
}

static fl_status ps_init_params(void *self, fl_model *m) {
  sync_ps *s = self;
  fl_ps_dense_param *dp;
  int64_t step = 0;
  fl_status st;

  FL_TRY(collect_params(s, m));
  if (s->np == 0) return FL_ERR(FL_EINVAL, "ps mode: the model has no trainable parameter");
  dp = calloc(s->np, sizeof *dp);
  if (!dp) return FL_ERR(FL_ENOMEM, "ps mode: out of memory");
  for (size_t i = 0; i < s->np; i++) {
    dp[i].name = s->params[i]->name;
    dp[i].value = s->params[i]->value;
    dp[i].n = s->params[i]->n;
    s->total += s->params[i]->n;
  }
  st = fl_ps_client_register(s->client, dp, s->np, s->tables, s->n_tables, &step);
  free(dp);
  FL_TRY(st);
  s->registered = 1;
  s->step = step;
  /* async/geo: a trainer rejoining goes on from its own last push, so that
   * its share of the data is not skipped (the others went on meanwhile) */
  if (s->join_step > 0 && s->mode != FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC &&
      fl_ps_client_own_next_step(s->client) >= 0)
    s->step = fl_ps_client_own_next_step(s->client);
  if (s->join_step > 0) s->loop_step = s->step; /* where the loop catches up to */
  s->pushed = calloc(s->np, 1);
  if (!s->pushed) return FL_ERR(FL_ENOMEM, "ps mode: out of memory");
  /* Everyone starts from the servers' values; in sync mode those as of the
   * step to push next (a rejoining trainer may find it applied on some
   * blocks already: they answer the values from before it). */
  if (fl_ps_client_recovered(s->client)) /* commit the step it was killed in */
    FL_TRY(fl_ps_client_commit_pull(s->client, s->step - 1));
  else
    FL_TRY(pull_all(s, s->mode == FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC ? -(s->step + 1) : 0));
  FL_TRY(fl_ps_client_wait(s->client));
  if (s->mode == FLOTILLA__SYNC_MODE__SYNC_MODE_GEO) {
    size_t off = 0;
    s->geo_old = malloc(s->total * sizeof(float));
    s->geo_delta = malloc(s->total * sizeof(float));
    if (!s->geo_old || !s->geo_delta) return FL_ERR(FL_ENOMEM, "ps mode: out of memory (geo)");
    for (size_t i = 0; i < s->np; i++) {
      memcpy(s->geo_old + off, s->params[i]->value, s->params[i]->n * sizeof(float));
      off += s->params[i]->n;
    }
  }
  FL_LOGI("ps mode (%s): %zu parameters in %zu blocks over %d pservers; starting at step %" PRId64,
          fl_proto_mode_name(s->mode), s->np,
          fl_ps_client_layout(s->client)->n_blocks, fl_ps_client_layout(s->client)->n_servers,
          s->step);
  return FL_OK;
}

static fl_status ps_agree_steps(void *self, int64_t local_steps, int64_t *global_steps) {
  sync_ps *s = self;
  int64_t total;
  FL_TRY(ensure_registered(s));
  FL_TRY(fl_ps_client_barrier(s->client, "job/agree_steps", NULL, 0, local_steps, NULL,
                              global_steps));
  total = *global_steps * s->job->train.epochs;
  if (s->job->train.max_steps > 0 && s->job->train.max_steps < total)
    total = s->job->train.max_steps;
  fl_ps_client_set_total_steps(s->client, total);
  return FL_OK;
}

/* geo: push (p - old) / world of every parameter, pull, old = p. */
static fl_status geo_exchange(sync_ps *s) {
  const fl_ps_layout *l = fl_ps_client_layout(s->client);
  float inv = 1.0f / (float)s->world;
  size_t off = 0;
  for (size_t i = 0; i < s->np; i++) {
    const float *p = s->params[i]->value;
    for (size_t k = 0; k < s->params[i]->n; k++)
      s->geo_delta[off + k] = (p[k] - s->geo_old[off + k]) * inv;
    off += s->params[i]->n;
  }
  off = 0;
  for (size_t i = 0; i < s->np; i++) {
    for (size_t b = l->first_block[i]; b < l->first_block[i + 1]; b++)
      FL_TRY(fl_ps_client_push_block(s->client, (uint32_t)b, FLOTILLA__PUSH_KIND__PUSH_DELTA,
                                     s->step, s->geo_delta + off + l->blocks[b].offset));
    off += s->params[i]->n;
  }
  FL_TRY(fl_ps_client_wait(s->client));
  FL_TRY(pull_all(s, 0));
  FL_TRY(fl_ps_client_wait(s->client));
  off = 0;
  for (size_t i = 0; i < s->np; i++) {
    memcpy(s->geo_old + off, s->params[i]->value, s->params[i]->n * sizeof(float));
    off += s->params[i]->n;
  }
  return FL_OK;
}

static fl_status ps_step_begin(void *self, fl_model *m, int64_t step) {
  sync_ps *s = self;
  (void)m;
  s->loop_step = step;
  if (s->finished) return FL_ERR(FL_ESTATE, "ps mode: a step begun after finish");
  if (!s->pushed) return FL_ERR(FL_ESTATE, "ps mode: a step begun before init_params");
  s->err = FL_OK;
  memset(s->pushed, 0, s->np);
  if (s->mode == FLOTILLA__SYNC_MODE__SYNC_MODE_GEO && s->local_steps > 0 &&
      s->local_steps % s->k_geo == 0)
    FL_TRY(geo_exchange(s));
  return FL_OK;
}

/* Queue the gradient pushes of params[i]'s blocks. */
static void push_param(sync_ps *s, size_t i) {
  const fl_ps_layout *l = fl_ps_client_layout(s->client);
  if (s->pushed[i]) return;
  s->pushed[i] = 1;
  for (size_t b = l->first_block[i]; b < l->first_block[i + 1]; b++) {
    fl_status st = fl_ps_client_push_block(s->client, (uint32_t)b, FLOTILLA__PUSH_KIND__PUSH_GRAD,
                                           s->step, s->params[i]->grad + l->blocks[b].offset);
    if (st != FL_OK && s->err == FL_OK) s->err = st;
  }
}

static void ps_grad_ready(void *self, fl_model *m, size_t index) {
  sync_ps *s = self;
  (void)m;
  if (s->mode == FLOTILLA__SYNC_MODE__SYNC_MODE_GEO) return;
  if (index < s->n_model && s->index_of[index] >= 0) push_param(s, (size_t)s->index_of[index]);
}

static fl_status ps_step_end(void *self, fl_model *m, int64_t step, int *apply) {
  sync_ps *s = self;
  (void)m;
  s->loop_step = step + 1;
  if (s->mode == FLOTILLA__SYNC_MODE__SYNC_MODE_GEO) {
    *apply = 1;
    s->step++;
    s->local_steps++;
    return FL_OK;
  }
  *apply = 0;
  for (size_t i = 0; i < s->np; i++) push_param(s, i);
  FL_TRY(s->err);
  if (s->mode == FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC) {
    /* Every push of the step acknowledged, the pulls commit it; the
     * servers hold them until the step is applied. */
    FL_TRY(fl_ps_client_commit_pull(s->client, s->step));
  } else {
    FL_TRY(fl_ps_client_wait(s->client));
    FL_TRY(pull_all(s, 0));
  }
  FL_TRY(fl_ps_client_wait(s->client));
  s->step++;
  s->local_steps++;
  return FL_OK;
}

static fl_status ps_reduce_metrics(void *self, double *v, size_t n) {
  sync_ps *s = self;
  char name[64];
  double *sums;
  fl_status st;
  if (n > 64) return FL_ERR(FL_EINVAL, "ps mode: %zu metrics in one reduction (at most 64)", n);
  sums = malloc((n + 1) * sizeof *sums);
  if (!sums) return FL_ERR(FL_ENOMEM, "ps mode: out of memory");
  if (s->metrics_step != s->loop_step) {
    s->metrics_step = s->loop_step;
    s->metrics_seq = 0;
  }
  snprintf(name, sizeof name, "metrics/%" PRId64 "/%" PRId64, s->loop_step, s->metrics_seq++);
  st = fl_ps_client_barrier(s->client, name, v, n, 0, sums, NULL);
  if (st == FL_OK) memcpy(v, sums, n * sizeof *v);
  free(sums);
  return st;
}

static int ps_rank(void *self) { return ((sync_ps *)self)->rank; }
static int ps_world_size(void *self) { return ((sync_ps *)self)->world; }

static fl_status ps_finish(void *self) {
  sync_ps *s = self;
  if (s->finished) return FL_OK;
  if (s->mode == FLOTILLA__SYNC_MODE__SYNC_MODE_GEO && s->geo_old && s->local_steps % s->k_geo)
    FL_TRY(geo_exchange(s));
  s->finished = 1;
  return fl_ps_client_complete(s->client);
}

static void ps_destroy(void *self) {
  sync_ps *s = self;
  if (!s) return;
  fl_ps_client_destroy(s->client);
  free(s->params);
  free(s->index_of);
  free(s->pushed);
  free(s->geo_old);
  free(s->geo_delta);
  for (size_t i = 0; i < s->n_tables; i++) free((char *)s->tables[i].name);
  free(s->tables);
  free(s);
}

static const fl_sync_ops ps_ops = {
    .name = "ps",
    .init_params = ps_init_params,
    .agree_steps = ps_agree_steps,
    .step_begin = ps_step_begin,
    .grad_ready = ps_grad_ready,
    .step_end = ps_step_end,
    .reduce_metrics = ps_reduce_metrics,
    .rank = ps_rank,
    .world_size = ps_world_size,
    .finish = ps_finish,
    .destroy = ps_destroy,
};

fl_status fl_sync_ps_create(const fl_job *job, const fl_cluster *cl, fl_sync *out) {
  sync_ps *s;
  fl_ps_client_opts o;
  double hb = job->cluster.heartbeat_timeout_s;
  fl_status st;

  out->ops = NULL;
  out->self = NULL;
  if (cl->n_pservers < 1)
    return FL_ERR(FL_EINVAL, "ps mode needs the pserver list (FLOTILLA_PSERVERS_IP_PORT_LIST)");
  /* The servers apply the pushed gradients themselves, so loss-scaled
   * gradients, and a step to skip on overflow, would reach them; geo
   * trains locally through the loop's scaler and pushes parameter deltas. */
  int mode = fl_proto_mode(job->strategy.a_sync, job->strategy.a_sync_configs.k_steps);
  if (job->strategy.amp && mode != FLOTILLA__SYNC_MODE__SYNC_MODE_GEO)
    return FL_ERR(FL_EINVAL, "trainer %d: strategy.amp needs collective mode or geo ps mode "
                  "(a_sync with a_sync_configs.k_steps > 0): in %s ps mode the servers apply "
                  "raw gradients", cl->trainer_id, fl_proto_mode_name(mode));
  /* ... and compute each step's rate from the schedule alone: the
   * evaluation that moves a plateau schedule happens on the trainers. */
  if (job->lr_schedule.kind == FL_LR_PLATEAU && mode != FLOTILLA__SYNC_MODE__SYNC_MODE_GEO)
    return FL_ERR(FL_EINVAL, "trainer %d: lr_schedule.kind plateau needs local, collective or "
                  "geo ps mode: in %s ps mode the servers compute the learning rate and see no "
                  "evaluation", cl->trainer_id, fl_proto_mode_name(mode));
  s = calloc(1, sizeof *s);
  if (!s) return FL_ERR(FL_ENOMEM, "ps mode: out of memory");
  s->job = job;
  s->rank = cl->trainer_id;
  s->world = cl->trainers_num;
  s->mode = fl_proto_mode(job->strategy.a_sync, job->strategy.a_sync_configs.k_steps);
  s->k_geo = job->strategy.a_sync_configs.k_steps;
  memset(&o, 0, sizeof o);
  o.servers = cl->pserver_endpoints;
  o.n_servers = cl->n_pservers;
  o.trainer_id = cl->trainer_id;
  o.num_trainers = cl->trainers_num;
  o.mode = s->mode;
  o.dense_block_size = job->pserver.dense_block_size;
  o.rpc_timeout_s = job->cluster.rpc_timeout_s;
  o.retry_budget_s = hb * 3 > 60 ? hb * 3 : 60;
  o.heartbeat_interval_s = hb > 0 ? (hb / 4 < 5 ? hb / 4 : 5) : 0;
  o.server_timeout_s = hb > 0 ? hb : 0;
  {
    /* The shared token: FLOTILLA_TOKEN, else the token file. */
    fl_cluster tmp = *cl;
    if ((st = fl_cluster_load_token(&tmp, job->cluster.token_file)) != FL_OK) {
      free(s);
      return st;
    }
    snprintf(s->token, sizeof s->token, "%s", tmp.token);
  }
  o.token = s->token;
  {
    fl_run_identity id;
    if ((st = fl_run_identity_resolve(job, cl, &id)) != FL_OK) {
      free(s);
      return st;
    }
    snprintf(s->run_id, sizeof s->run_id, "%s", id.run_id);
    o.run_id = s->run_id;
    o.job_hash = id.job_hash;
  }
  o.wire_dtype = job->strategy.grad_compression == FL_COMPRESS_FP16   ? FLOTILLA__DTYPE__DTYPE_FP16
                 : job->strategy.grad_compression == FL_COMPRESS_BF16 ? FLOTILLA__DTYPE__DTYPE_BF16
                                                                      : FLOTILLA__DTYPE__DTYPE_FP32;
  o.tls_ca = job->cluster.tls.ca;
  if (job->cluster.tls.mutual) {
    o.tls_cert = job->cluster.tls.cert;
    o.tls_key = job->cluster.tls.key;
  }
  if ((st = fl_ps_client_create(&o, &s->client)) != FL_OK) {
    free(s);
    return st;
  }
  out->ops = &ps_ops;
  out->self = s;
  return FL_OK;
}

fl_status fl_sync_ps_set_tables(fl_sync *sync, const fl_ps_sparse_spec *tables, size_t n_tables) {
  sync_ps *s;
  if (!sync || sync->ops != &ps_ops) return FL_ERR(FL_EINVAL, "not a ps-mode trainer");
  s = sync->self;
  if (s->registered) return FL_ERR(FL_ESTATE, "ps mode: sparse tables set after registration");
  s->tables = calloc(n_tables + 1, sizeof *s->tables);
  if (!s->tables) return FL_ERR(FL_ENOMEM, "ps mode: out of memory");
  for (size_t i = 0; i < n_tables; i++) {
    s->tables[i] = tables[i];
    if (!(s->tables[i].name = strdup(tables[i].name)))
      return FL_ERR(FL_ENOMEM, "ps mode: out of memory");
    s->n_tables++;
  }
  return FL_OK;
}

fl_ps_client *fl_sync_ps_client(const fl_sync *sync) {
  if (!sync || sync->ops != &ps_ops) return NULL;
  return ((sync_ps *)sync->self)->client;
}

int64_t fl_sync_ps_step(const fl_sync *sync) {
  if (!sync || sync->ops != &ps_ops) return 0;
  return ((sync_ps *)sync->self)->step;
}

int64_t fl_sync_ps_join_step(const fl_sync *sync) {
  if (!sync || sync->ops != &ps_ops) return 0;
  return ((sync_ps *)sync->self)->join_step;
}
