/* model_ctr.c - the CTR model (wide & deep over sparse features) and its
 * training run in PServer mode.
 *
 * A sample is a list of (slot, feature id, value).  Each feature is hashed
 * with its slot into one of model.ctr.hash_buckets keys, which name rows of
 * two sparse tables kept on the pservers (created on first touch, updated
 * there by pserver.sparse.optimizer):
 *   wide     "ctr.wide", 1 float per key:  wide = bias + sum value * w[key]
 *   deep     "ctr.emb",  D floats per key (D = model.ctr.embedding_dim);
 *            the embeddings of a slot are summed (times value) into that
 *            slot's D inputs, S slots give an S*D input to an MLP with
 *            model.hidden ReLU layers and one output
 *   logit = wide + deep, p = sigmoid(logit), loss = mean log loss.
 * The MLP is an op graph (graph/) run with the engine's forward/backward
 * calls, its gradient with respect to its input giving the embeddings'.
 * The dense part (bias and MLP) travels like any model's parameters through
 * the ps-mode fl_sync (sync, async or geo); the sparse rows of a batch are
 * pulled before forward and their gradients pushed after backward (every
 * micro-batch, summed over the batch's duplicates of a key).
 * Data: libsvm files (data.train_path / test_path; labels > 0 are clicks,
 * all features in slot 0) or the synthetic CTR generator of fl_data.h
 * (data.synthetic.kind: ctr, model.ctr.sparse_slots slots of which half
 * carry signal, 1000 ids per slot, weights N(0, 1), bias -1).
 * The metric is AUC (ties counted half) on the test set, beside the AUC of
 * a constant predictor (0.5) and, for synthetic data, of the true click
 * probability.  model.ctr.dense_features is not used: every feature here is
 * sparse (libsvm values keep their magnitude through `value`), and
 * gradient merge is not supported (k_steps must be 1). */
#include <config.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fl_data.h"
#include "fl_graph.h"
#include "fl_layers.h"
#include "fl_log.h"
#include "fl_optim.h"
#include "fl_ps_client.h"
#include "fl_trainer.h"

#define WIDE "ctr.wide"
#define EMB "ctr.emb"
#define MAX_LAYERS (FL_JOB_MAX_HIDDEN + 1)

typedef struct ctr {
  const fl_job *job;
  fl_sync *sync;
  fl_ps_client *client;
  uint32_t S, D;
  uint64_t buckets;
  size_t L;                   /* linear layers */
  size_t dims[MAX_LAYERS + 1];
  fl_param bias;              /* ctr.bias: the wide part's bias */
  float bias_v, bias_g;
  void *mlp;                  /* the compiled MLP graph (fl_graph_model_*) */
  fl_param *pp[2 * MAX_LAYERS + 1]; /* ctr.bias, then the MLP's in first-use order */
  size_t np;
  size_t max_b;
  float *x;                   /* the MLP's input: max_b * S * D */
  const float *deep;          /* the MLP's output of the last forward */
  float *dz;                  /* d loss / d logit */
  float *wide;                /* per sample */
  float *logit;
  /* per batch: unique keys and rows */
  uint64_t *keys;
  int32_t *kidx;              /* feature -> unique key index */
  int32_t *slots;             /* hash of keys -> unique index + 1 */
  size_t nslots, cap_keys, cap_feats;
  float *w_rows, *e_rows, *w_grad, *e_grad;
  /* local optimizer (geo) */
  fl_optim_hparams hp;
  const char *exclude[FL_JOB_MAX_LIST];
  fl_optim_tensor tens[2 * MAX_LAYERS + 1];
  float *state;
  int64_t updates;
  int64_t push_seq;
} ctr;

static uint64_t rng_next(uint64_t *s) {
  *s += 0x9e3779b97f4a7c15ULL;
  return fl_ps_mix64(*s);
}

/* The dense part: ctr.bias and the MLP graph over the S*D embedding
 * inputs (ReLU hidden layers, one output), weights Kaiming-uniform before
 * a ReLU and Xavier for the output, drawn from the job's seed in layer
 * order as before the graph engine. */
static fl_status ctr_build(ctr *c, uint32_t slots, size_t max_b) {
  const fl_job_model *m = &c->job->model;
  uint64_t rs = c->job->train.seed ^ 0x43545221ULL;

  c->S = slots;
  c->D = (uint32_t)m->ctr.embedding_dim;
  c->buckets = (uint64_t)m->ctr.hash_buckets;
  c->max_b = max_b;
  c->L = m->n_hidden + 1;
  c->dims[0] = (size_t)c->S * c->D;
  for (size_t l = 0; l < m->n_hidden; l++) c->dims[l + 1] = m->hidden[l];
  c->dims[c->L] = 1;

  snprintf(c->bias.name, sizeof c->bias.name, "ctr.bias");
  c->bias.ndim = 1;
  c->bias.shape[0] = 1;
  c->bias.n = 1;
  c->bias.value = &c->bias_v;
  c->bias.grad = &c->bias_g;
  c->pp[0] = &c->bias;

  fl_graph *g = NULL;
  FL_TRY(fl_graph_new("ctr", &g));
  const int64_t in_dims[2] = {FL_G_BATCH, (int64_t)c->dims[0]};
  int x;
  fl_status st = fl_graph_input(g, "input", 2, in_dims, &x);
  float *w = NULL;
  for (size_t l = 0; st == FL_OK && l < c->L; l++) {
    char wn[48], bn[48], on[48];
    snprintf(wn, sizeof wn, "ctr.fc%zu.weight", l);
    snprintf(bn, sizeof bn, "ctr.fc%zu.bias", l);
    snprintf(on, sizeof on, "ctr.fc%zu", l);
    const int64_t wd[2] = {(int64_t)c->dims[l + 1], (int64_t)c->dims[l]};
    const size_t n = c->dims[l + 1] * c->dims[l];
    float *nw = realloc(w, n * sizeof *w);
    if (!nw) {
      st = FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu parameters", n);
      break;
    }
    w = nw;
    /* Kaiming-uniform for ReLU layers, Xavier for the output */
    double fan_in = (double)c->dims[l], fan_out = (double)c->dims[l + 1];
    double a = l + 1 < c->L ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
    for (size_t k = 0; k < n; k++)
      w[k] = (float)(a * (2.0 * (double)(rng_next(&rs) >> 11) * 0x1p-53 - 1.0));
    int wi, bi;
    if ((st = fl_graph_param(g, wn, 2, wd, w, 1, &wi)) != FL_OK ||
        (st = fl_graph_param(g, bn, 1, &wd[0], NULL, 1, &bi)) != FL_OK)
      break;
    const int ins[3] = {x, wi, bi};
    const char *outs[1] = {on};
    fl_gattr at[2] = {{.name = "transB", .kind = FL_GA_INT, .i = 1},
                      {.name = "flotilla_act", .kind = FL_GA_STRING, .s = "relu"}};
    st = fl_graph_node(g, on, "Gemm", ins, 3, outs, 1, at, l + 1 < c->L ? 2 : 1, &x);
  }
  free(w);
  if (st == FL_OK) st = fl_graph_set_output(g, x, FL_GLOSS_BCE_LOGITS);
  if (st != FL_OK) {
    fl_graph_free(g);
    return st;
  }
  fl_graph_options opt;
  memset(&opt, 0, sizeof opt);
  opt.max_batch = max_b;
  opt.seed = c->job->train.seed;
  opt.device = -1;
  opt.input_grad = 1;
  FL_TRY(fl_graph_model_create(g, &opt, &c->mlp));
  c->np = 1 + fl_graph_model_ops.num_params(c->mlp);
  for (size_t i = 1; i < c->np; i++) {
    c->pp[i] = fl_graph_model_ops.param(c->mlp, i - 1);
    c->pp[i]->layer = (int)((i - 1) / 2);
  }
  c->x = malloc(max_b * c->dims[0] * sizeof(float));
  c->dz = malloc(max_b * sizeof(float));
  c->wide = malloc(max_b * sizeof(float));
  c->logit = malloc(max_b * sizeof(float));
  if (!c->x || !c->dz || !c->wide || !c->logit)
    return FL_ERR(FL_ENOMEM, "ctr: out of memory for buffers");
  return FL_OK;
}

static void ctr_free(ctr *c) {
  if (c->mlp) fl_graph_model_ops.destroy(c->mlp);
  free(c->x);
  free(c->dz);
  free(c->wide);
  free(c->logit);
  free(c->keys);
  free(c->kidx);
  free(c->slots);
  free(c->w_rows);
  free(c->e_rows);
  free(c->w_grad);
  free(c->e_grad);
  free(c->state);
}

static uint64_t feat_key(const ctr *c, const fl_sparse_feature *f) {
  return fl_ps_mix64(((uint64_t)f->slot << 48) ^ f->id ^ 0x5bd1e995ULL) % c->buckets;
}

/* Unique keys of the features [0, nf), and each feature's key index. */
static fl_status collect_keys(ctr *c, const fl_sparse_feature *feats, size_t nf, size_t *nk) {
  size_t ns = 16;
  while (ns < 2 * nf + 2) ns *= 2;
  if (nf > c->cap_feats) {
    int32_t *ki = realloc(c->kidx, nf * sizeof *ki);
    uint64_t *ks = ki ? realloc(c->keys, nf * sizeof *ks) : NULL;
    if (ki) c->kidx = ki;
    if (ks) c->keys = ks;
    if (!ki || !ks) return FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu features", nf);
    c->cap_feats = nf;
  }
  if (ns > c->nslots) {
    int32_t *s = realloc(c->slots, ns * sizeof *s);
    if (!s) return FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu features", nf);
    c->slots = s;
    c->nslots = ns;
  }
  memset(c->slots, 0, c->nslots * sizeof *c->slots);
  *nk = 0;
  for (size_t i = 0; i < nf; i++) {
    uint64_t k = feat_key(c, &feats[i]);
    size_t h = (size_t)fl_ps_mix64(k) & (c->nslots - 1);
    while (c->slots[h] && c->keys[c->slots[h] - 1] != k) h = (h + 1) & (c->nslots - 1);
    if (!c->slots[h]) {
      c->keys[*nk] = k;
      c->slots[h] = (int32_t)++*nk;
    }
    c->kidx[i] = c->slots[h] - 1;
  }
  if (*nk > c->cap_keys) {
    size_t D = c->D;
    float *a = realloc(c->w_rows, *nk * sizeof *a);
    float *b = a ? realloc(c->e_rows, *nk * D * sizeof *b) : NULL;
    float *g = b ? realloc(c->w_grad, *nk * sizeof *g) : NULL;
    float *h = g ? realloc(c->e_grad, *nk * D * sizeof *h) : NULL;
    if (a) c->w_rows = a;
    if (b) c->e_rows = b;
    if (g) c->w_grad = g;
    if (h) c->e_grad = h;
    if (!a || !b || !g || !h) return FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu rows", *nk);
    c->cap_keys = *nk;
  }
  return FL_OK;
}

/* Forward of n samples: c->logit[i].  Pulls the batch's rows. */
static fl_status forward(ctr *c, const fl_sparse_batch *sb, size_t n, int training) {
  size_t nf = sb->offsets[n] - sb->offsets[0], nk, D = c->D;
  const fl_sparse_feature *feats = sb->feats + sb->offsets[0];
  float *x = c->x;

  FL_TRY(collect_keys(c, feats, nf, &nk));
  FL_TRY(fl_ps_client_pull_sparse(c->client, WIDE, 1, c->keys, nk, c->w_rows));
  FL_TRY(fl_ps_client_pull_sparse(c->client, EMB, c->D, c->keys, nk, c->e_rows));
  memset(x, 0, n * c->dims[0] * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    double w = c->bias_v;
    for (size_t f = sb->offsets[i] - sb->offsets[0]; f < sb->offsets[i + 1] - sb->offsets[0]; f++) {
      const fl_sparse_feature *ft = &feats[f];
      const float *e = c->e_rows + (size_t)c->kidx[f] * D;
      w += (double)ft->value * c->w_rows[c->kidx[f]];
      if (ft->slot >= c->S) continue;
      for (size_t d = 0; d < D; d++) x[i * c->dims[0] + ft->slot * D + d] += ft->value * e[d];
    }
    c->wide[i] = (float)w;
  }
  FL_TRY(fl_graph_model_forward(c->mlp, x, n, training, &c->deep));
  for (size_t i = 0; i < n; i++) c->logit[i] = c->wide[i] + c->deep[i];
  return FL_OK;
}

static double sigmoid(double z) { return z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z)); }

/* log loss of one sample, computed stably from the logit. */
static double logloss(double z, int y) {
  double m = z > 0 ? z : 0;
  return m - (y ? z : 0) + log(exp(-m) + exp(z - m));
}

/* Backward of the batch after forward: dense grads, then sparse pushes. */
static fl_status backward(ctr *c, const fl_sparse_batch *sb, size_t n, double *loss) {
  size_t nf = sb->offsets[n] - sb->offsets[0], D = c->D, nk = 0;
  const fl_sparse_feature *feats = sb->feats + sb->offsets[0];
  float *dz = c->dz;
  const float *dx = NULL;
  double db = 0;

  *loss = 0;
  for (size_t i = 0; i < n; i++) {
    int y = sb->labels[i] > 0;
    *loss += logloss(c->logit[i], y);
    dz[i] = (float)((sigmoid(c->logit[i]) - y) / (double)n);
    db += dz[i];
  }
  c->bias_g = (float)db;
  FL_TRY(fl_graph_model_backward(c->mlp, dz, NULL, NULL, &dx));
  /* dx now holds d loss / d (MLP input); the wide part recomputes the
   * logit gradients per sample below. */
  for (size_t k = 0; k < nf; k++) nk = (size_t)c->kidx[k] + 1 > nk ? (size_t)c->kidx[k] + 1 : nk;
  memset(c->w_grad, 0, nk * sizeof(float));
  memset(c->e_grad, 0, nk * D * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    int y = sb->labels[i] > 0;
    float g = (float)((sigmoid(c->logit[i]) - y) / (double)n);
    for (size_t f = sb->offsets[i] - sb->offsets[0]; f < sb->offsets[i + 1] - sb->offsets[0]; f++) {
      const fl_sparse_feature *ft = &feats[f];
      float *eg = c->e_grad + (size_t)c->kidx[f] * D;
      c->w_grad[c->kidx[f]] += g * ft->value;
      if (ft->slot >= c->S) continue;
      for (size_t d = 0; d < D; d++) eg[d] += dx[i * c->dims[0] + ft->slot * D + d] * ft->value;
    }
  }
  FL_TRY(fl_ps_client_push_sparse(c->client, WIDE, 1, c->push_seq, c->keys, nk, c->w_grad));
  FL_TRY(fl_ps_client_push_sparse(c->client, EMB, c->D, c->push_seq, c->keys, nk, c->e_grad));
  c->push_seq++;
  return FL_OK;
}

typedef struct scored {
  float score;
  int y;
} scored;

static int cmp_scored(const void *a, const void *b) {
  float x = ((const scored *)a)->score, y = ((const scored *)b)->score;
  return x < y ? -1 : x > y;
}

/* AUC with ties counted half (rank sums). */
static double auc(scored *s, size_t n) {
  double pos = 0, neg = 0, rank_sum = 0;
  qsort(s, n, sizeof *s, cmp_scored);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    double avg;
    while (j < n && s[j].score == s[i].score) j++;
    avg = (double)(i + j + 1) / 2.0; /* 1-based average rank */
    for (size_t k = i; k < j; k++)
      if (s[k].y) rank_sum += avg;
    i = j;
  }
  for (size_t i = 0; i < n; i++) {
    if (s[i].y) pos++;
    else neg++;
  }
  if (pos == 0 || neg == 0) return 0.5;
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

static fl_status evaluate(ctr *c, const fl_sparse_dataset *test, int64_t epoch, FILE *out,
                          fl_trainer_report *rep) {
  size_t bs = c->max_b, n = test->n;
  scored *s = malloc(n * sizeof *s), *o = test->prob ? malloc(n * sizeof *o) : NULL;
  double loss = 0, pos = 0, correct = 0, base, const_loss = 0, a, oracle = 0;
  if (!s || (test->prob && !o)) {
    free(s);
    free(o);
    return FL_ERR(FL_ENOMEM, "ctr: out of memory evaluating %zu samples", n);
  }
  for (size_t off = 0; off < n; off += bs) {
    size_t cnt = n - off < bs ? n - off : bs;
    fl_sparse_batch sb = {test->labels + off, test->offsets + off, test->feats};
    fl_status st = forward(c, &sb, cnt, 0);
    if (st != FL_OK) {
      free(s);
      free(o);
      return st;
    }
    for (size_t i = 0; i < cnt; i++) {
      int y = test->labels[off + i] > 0;
      s[off + i].score = c->logit[i];
      s[off + i].y = y;
      loss += logloss(c->logit[i], y);
      correct += (c->logit[i] > 0) == y;
      pos += y;
      if (o) {
        o[off + i].score = test->prob[off + i];
        o[off + i].y = y;
      }
    }
  }
  base = pos / (double)n;
  if (base > 0 && base < 1) const_loss = -(base * log(base) + (1 - base) * log(1 - base));
  a = auc(s, n);
  if (o) oracle = auc(o, n);
  fprintf(out,
          "[Epoch %" PRId64 "] test auc: %.5f, logloss: %.5f, acc1: %.5f (constant predictor: "
          "auc 0.50000, logloss %.5f",
          epoch, a, loss / (double)n, correct / (double)n, const_loss);
  if (o) fprintf(out, "; true probability: auc %.5f", oracle);
  fprintf(out, ")\n");
  fflush(out);
  rep->evaluated = 1;
  rep->test_loss = loss / (double)n;
  rep->test_acc1 = correct / (double)n;
  free(s);
  free(o);
  return FL_OK;
}

static fl_status load(const fl_job *job, fl_sparse_dataset *train, fl_sparse_dataset *test) {
  const fl_job_data *d = &job->data;
  if (d->format == FL_DATA_LIBSVM) {
    FL_TRY(fl_sparse_load(d->train_path, FL_SPARSE_LIBSVM, train));
    if (job->train.eval && d->test_path[0]) FL_TRY(fl_sparse_load(d->test_path, FL_SPARSE_LIBSVM, test));
    return FL_OK;
  }
  if (d->format == FL_DATA_SYNTHETIC && !strcmp(d->synthetic.kind, "ctr")) {
    fl_synth_ctr_config cfg = {.n = (size_t)d->synthetic.train_samples,
                               .num_slots = (uint32_t)job->model.ctr.sparse_slots,
                               .signal_slots = (uint32_t)(job->model.ctr.sparse_slots + 1) / 2,
                               .vocab = 1000,
                               .weight_scale = 1.0f,
                               .bias = -1.0f,
                               .seed = d->synthetic.seed};
    FL_TRY(fl_synth_ctr(&cfg, 0, train));
    if (job->train.eval && d->synthetic.test_samples > 0) {
      cfg.n = (size_t)d->synthetic.test_samples;
      FL_TRY(fl_synth_ctr(&cfg, 1, test));
    }
    return FL_OK;
  }
  return FL_ERR(FL_EINVAL, "%s: the ctr model reads data.format libsvm or synthetic kind ctr",
                job->source);
}

fl_status fl_ctr_run(const fl_trainer_options *o, fl_sync *sync, fl_trainer_report *rep) {
  const fl_job *job = o->job;
  FILE *log = o->log ? o->log : stdout;
  fl_sparse_dataset train, test;
  fl_loader *loader = NULL;
  fl_ps_sparse_spec tables[2];
  fl_lr_schedule sched;
  int64_t spe = 0, local, step = 0;
  ctr c;
  fl_status st;

  memset(&c, 0, sizeof c);
  memset(&train, 0, sizeof train);
  memset(&test, 0, sizeof test);
  memset(rep, 0, sizeof *rep);
  c.job = job;
  c.sync = sync;
  if (fl_job_merge_steps(job) > 1)
    return FL_ERR(FL_ENOTSUP, "%s: the ctr model does not do gradient merge (k_steps %d)",
                  job->source, fl_job_merge_steps(job));
  if ((st = load(job, &train, &test)) != FL_OK) goto done;
  {
    fl_shard_spec spec = {.n = train.n, .batch_size = job->train.batch_size,
                          .rank = sync->ops->rank(sync->self),
                          .world_size = sync->ops->world_size(sync->self),
                          .seed = job->train.seed, .shuffle = job->data.shuffle,
                          .remainder = FL_REMAINDER_DROP};
    if ((st = fl_shard_check(&spec)) != FL_OK) goto done;
    if ((st = fl_loader_create(NULL, &train, &spec, (size_t)(job->data.prefetch > 0 ? job->data.prefetch : 1), &loader)) != FL_OK)
      goto done;
  }
  if ((st = ctr_build(&c, train.num_slots, job->train.batch_size > job->train.eval_batch_size
                                               ? job->train.batch_size
                                               : job->train.eval_batch_size)) != FL_OK)
    goto done;
  tables[0] = (fl_ps_sparse_spec){WIDE, 1};
  tables[1] = (fl_ps_sparse_spec){EMB, c.D};
  if ((st = fl_sync_ps_bind(sync, c.pp, c.np, tables, 2)) != FL_OK) goto done;
  local = (int64_t)fl_loader_batches(loader);
  if ((st = sync->ops->agree_steps(sync->self, local, &spe)) != FL_OK) goto done;
  if ((st = sync->ops->init_params(sync->self, NULL)) != FL_OK) goto done;
  c.client = fl_sync_ps_client(sync);
  if ((st = fl_job_optim_hparams(job, &c.hp, c.exclude)) != FL_OK) goto done;
  if ((st = fl_job_lr_schedule(job, spe * job->train.epochs, &sched)) != FL_OK) goto done;
  {
    size_t total = 0, off = 0;
    int ns = fl_optim_state_count(c.hp.kind);
    for (size_t i = 0; i < c.np; i++) total += c.pp[i]->n;
    c.state = calloc(total * (size_t)(ns ? ns : 1), sizeof(float));
    if (!c.state) {
      st = FL_ERR(FL_ENOMEM, "ctr: out of memory for optimizer state");
      goto done;
    }
    for (size_t i = 0; i < c.np; i++) {
      fl_param *p = c.pp[i];
      c.tens[i] = (fl_optim_tensor){p->name, p->value, p->grad, ns >= 1 ? c.state + off : NULL,
                                    ns >= 2 ? c.state + off + p->n : NULL, p->n};
      off += p->n * (size_t)(ns ? ns : 1);
    }
    if ((st = fl_optim_init_state(&c.hp, c.tens, c.np)) != FL_OK) goto done;
  }
  FL_LOGI("ctr: %u slots x embedding %u -> MLP of %zu layers; %zu training samples, %" PRId64
          " steps per epoch",
          c.S, c.D, c.L, train.n, spe);
  rep->steps_per_epoch = spe;
  for (int64_t e = 0; e < job->train.epochs; e++) {
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    if ((st = fl_loader_start(loader, e, 0)) != FL_OK) goto done;
    for (int64_t s = 0; s < spe; s++) {
      fl_batch b;
      double loss;
      int apply = 0;
      if (job->train.max_steps > 0 && step >= job->train.max_steps) break;
      if ((st = fl_loader_next(loader, &b)) != FL_OK) goto done;
      if ((st = sync->ops->step_begin(sync->self, NULL, step)) != FL_OK) goto done;
      if ((st = forward(&c, &b.sparse, b.size, 1)) != FL_OK) goto done;
      if ((st = backward(&c, &b.sparse, b.size, &loss)) != FL_OK) goto done;
      for (size_t i = c.np; i-- > 0;) sync->ops->grad_ready(sync->self, NULL, i);
      if ((st = sync->ops->step_end(sync->self, NULL, step, &apply)) != FL_OK) goto done;
      if (apply) {
        if ((st = fl_optim_step(&c.hp, c.tens, c.np, fl_lr_at(&sched, step), ++c.updates)) != FL_OK)
          goto done;
      }
      step++;
      rep->train_samples += (int64_t)b.size;
      if (job->train.log_interval > 0 && s % job->train.log_interval == 0)
        fprintf(log, "[Epoch %" PRId64 ", batch %" PRId64 "] loss: %.5f\n", e, s,
                loss / (double)b.size);
      if (o->stop && *o->stop) {
        /* The tables and the dense blocks are the pservers' (they checkpoint
         * on their own SIGTERM; in geo mode the steps since the last push
         * stay here); the trainer leaves without finish, so the pservers do
         * not count the job as complete. */
        FL_LOGI("stopped by a signal at step %" PRId64 " (epoch %" PRId64 ", batch %" PRId64
                "); the ctr model's state is the pservers'", step, e, s + 1);
        rep->steps = step;
        rep->stopped = 1;
        goto done;
      }
    }
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    rep->train_seconds += (double)(ts1.tv_sec - ts0.tv_sec) + 1e-9 * (double)(ts1.tv_nsec - ts0.tv_nsec);
    rep->epochs_done = e + 1;
    if (test.n && (st = evaluate(&c, &test, e, log, rep)) != FL_OK) goto done;
  }
  rep->steps = step;
  /* finish while the bound parameters exist: geo pushes its last delta */
  st = sync->ops->finish(sync->self);
done:
  fl_loader_destroy(loader);
  fl_sparse_dataset_free(&train);
  fl_sparse_dataset_free(&test);
  ctr_free(&c);
  return st;
}
