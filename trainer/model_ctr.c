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
 * The whole model is one op graph (fl_ctr_graph) run by the graph engine,
 * which derives its backward: the batch's pulled rows are its rows inputs,
 * the two sums are EmbeddingBagSum nodes fed the batch's features (sample,
 * slot, unique-key index, value), and the loss is the engine's BCE with
 * logits; the rows' gradients (summed over the batch's duplicates of a
 * key by the op) are what the trainer pushes.
 * The dense part (ctr.bias and the MLP) travels like any model's parameters
 * through the ps-mode fl_sync (sync, async or geo); the sparse rows of a
 * batch are pulled before the step and their gradients pushed after it
 * (every micro-batch).
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
  void *model;                /* the compiled graph (fl_graph_model_*) */
  fl_param *pp[2 * MAX_LAYERS + 1]; /* ctr.bias, then the MLP's in first-use order */
  size_t np;
  size_t max_b, max_rows;     /* the rows inputs' capacity: unique keys of a batch at most */
  float *target;              /* max_b click targets (0 or 1) */
  /* per batch: unique keys, rows and the feed */
  uint64_t *keys;
  int32_t *kidx;              /* feature -> unique key index */
  int32_t *slots;             /* hash of keys -> unique index + 1 */
  size_t nslots, cap_feats;
  float *w_rows, *e_rows;     /* max_rows rows each */
  const float *w_grad, *e_grad; /* the graph's rows gradients */
  fl_graph_sparse_entry *feed;
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

/* The MLP's layers over x: Gemms with ReLU but the last, weights
 * Kaiming-uniform before a ReLU and Xavier for the output, drawn from the
 * seed in layer order (the draws of the model before the graph engine). */
static fl_status ctr_mlp(fl_graph *g, const fl_ctr_shape *sh, int x, int *out) {
  uint64_t rs = sh->seed ^ 0x43545221ULL;
  size_t dims[MAX_LAYERS + 1], L = sh->n_hidden + 1;
  dims[0] = (size_t)sh->slots * sh->dim;
  for (size_t l = 0; l < sh->n_hidden; l++) dims[l + 1] = sh->hidden[l];
  dims[L] = 1;
  fl_status st = FL_OK;
  float *w = NULL;
  for (size_t l = 0; st == FL_OK && l < L; l++) {
    char wn[48], bn[48], on[48];
    snprintf(wn, sizeof wn, "ctr.fc%zu.weight", l);
    snprintf(bn, sizeof bn, "ctr.fc%zu.bias", l);
    snprintf(on, sizeof on, "ctr.fc%zu", l);
    const int64_t wd[2] = {(int64_t)dims[l + 1], (int64_t)dims[l]};
    const size_t n = dims[l + 1] * dims[l];
    float *nw = realloc(w, n * sizeof *w);
    if (!nw) {
      st = FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu parameters", n);
      break;
    }
    w = nw;
    double fan_in = (double)dims[l], fan_out = (double)dims[l + 1];
    double a = l + 1 < L ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
    for (size_t k = 0; k < n; k++)
      w[k] = (float)(a * (2.0 * (double)(rng_next(&rs) >> 11) * 0x1p-53 - 1.0));
    int wi, bi;
    if ((st = fl_graph_param(g, wn, 2, wd, w, 1, &wi)) != FL_OK ||
        (st = fl_graph_param(g, bn, 1, &wd[0], NULL, 1, &bi)) != FL_OK)
      break;
    const int ins[3] = {x, wi, bi};
    const char *outs[1] = {on};
    fl_gattr at[2] = {{.name = "transB", .kind = FL_GA_INT, .i = 1},
                      {.name = FL_GRAPH_ACT_ATTR, .kind = FL_GA_STRING, .s = "relu"}};
    st = fl_graph_node(g, on, "Gemm", ins, 3, outs, 1, at, l + 1 < L ? 2 : 1, &x);
  }
  free(w);
  *out = x;
  return st;
}

/* The graph's nodes: wide = EmbeddingBagSum(wide rows, all) + ctr.bias;
 * deep = MLP(EmbeddingBagSum(emb rows, S slots)); logit = wide + deep.
 * ctr.bias is used first, so the parameters keep their order. */
static fl_status ctr_nodes(fl_graph *g, const fl_ctr_shape *sh) {
  int wr, er, bias, wide, wb, x, deep, logit;
  const int64_t one = 1;
  const fl_gattr all = {.name = "mode", .kind = FL_GA_STRING, .s = "all"};
  const fl_gattr slots = {.name = "num_slots", .kind = FL_GA_INT, .i = (int64_t)sh->slots};
  const char *o_wide[1] = {"ctr.wide_sum"}, *o_wb[1] = {"ctr.wide_bias"},
             *o_pool[1] = {"ctr.pooled"}, *o_logit[1] = {"ctr.logit"};
  FL_TRY(fl_graph_rows(g, FL_CTR_WIDE_ROWS, (int64_t)sh->rows, 1, &wr));
  FL_TRY(fl_graph_rows(g, FL_CTR_EMB_ROWS, (int64_t)sh->rows, (int64_t)sh->dim, &er));
  FL_TRY(fl_graph_param(g, "ctr.bias", 1, &one, NULL, 1, &bias));
  FL_TRY(fl_graph_node(g, FL_CTR_WIDE_NODE, "EmbeddingBagSum", &wr, 1, o_wide, 1, &all, 1, &wide));
  const int in_wb[2] = {wide, bias};
  FL_TRY(fl_graph_node(g, "ctr.wide_bias", "Add", in_wb, 2, o_wb, 1, NULL, 0, &wb));
  FL_TRY(fl_graph_node(g, FL_CTR_POOL_NODE, "EmbeddingBagSum", &er, 1, o_pool, 1, &slots, 1, &x));
  FL_TRY(ctr_mlp(g, sh, x, &deep));
  const int in_l[2] = {wb, deep};
  FL_TRY(fl_graph_node(g, "ctr.logit", "Add", in_l, 2, o_logit, 1, NULL, 0, &logit));
  return fl_graph_set_output(g, logit, FL_GLOSS_BCE_LOGITS);
}

fl_status fl_ctr_graph(const fl_ctr_shape *sh, void **handle) {
  if (!sh || !handle || sh->slots == 0 || sh->dim == 0 || sh->rows == 0 ||
      sh->max_batch == 0 || sh->n_hidden > FL_JOB_MAX_HIDDEN || (sh->n_hidden && !sh->hidden))
    return FL_ERR(FL_EINVAL, "ctr: graph of %u slots, width %u, %zu rows, batch %zu, %zu hidden "
                  "layers (all but the hidden layers must be > 0; at most %d of those)",
                  sh ? sh->slots : 0, sh ? sh->dim : 0, sh ? sh->rows : 0,
                  sh ? sh->max_batch : 0, sh ? sh->n_hidden : 0, FL_JOB_MAX_HIDDEN);
  fl_graph *g = NULL;
  FL_TRY(fl_graph_new("ctr", &g));
  const fl_status st = ctr_nodes(g, sh);
  if (st != FL_OK) {
    fl_graph_free(g);
    return st;
  }
  fl_graph_options opt;
  memset(&opt, 0, sizeof opt);
  opt.max_batch = sh->max_batch;
  opt.seed = sh->seed;
  opt.device = -1;
  return fl_graph_model_create(g, &opt, handle);
}

/* The unique keys of a batch are at most its features (max_b samples of
 * the most features a sample has) and at most the buckets. */
static size_t max_rows(const fl_sparse_dataset *a, const fl_sparse_dataset *b, size_t max_b,
                       uint64_t buckets) {
  size_t most = 1;
  for (int k = 0; k < 2; k++) {
    const fl_sparse_dataset *d = k ? b : a;
    for (size_t i = 0; i < d->n; i++)
      if (d->offsets[i + 1] - d->offsets[i] > most) most = d->offsets[i + 1] - d->offsets[i];
  }
  return (uint64_t)most * max_b < buckets ? most * max_b : (size_t)buckets;
}

/* The compiled graph, its parameters (ctr.bias, then the MLP's), and the
 * batch buffers. */
static fl_status ctr_build(ctr *c, uint32_t slots, size_t max_b, size_t rows) {
  const fl_job_model *m = &c->job->model;
  int64_t hidden[FL_JOB_MAX_HIDDEN];
  for (size_t l = 0; l < m->n_hidden; l++) hidden[l] = (int64_t)m->hidden[l];
  const fl_ctr_shape sh = {.slots = slots, .dim = (uint32_t)m->ctr.embedding_dim,
                           .hidden = hidden, .n_hidden = m->n_hidden, .rows = rows,
                           .max_batch = max_b, .seed = c->job->train.seed};
  c->S = slots;
  c->D = sh.dim;
  c->buckets = (uint64_t)m->ctr.hash_buckets;
  c->max_b = max_b;
  c->max_rows = rows;
  c->L = m->n_hidden + 1;
  FL_TRY(fl_ctr_graph(&sh, &c->model));
  c->np = fl_graph_model_ops.num_params(c->model);
  for (size_t i = 0; i < c->np; i++) {
    c->pp[i] = fl_graph_model_ops.param(c->model, i);
    c->pp[i]->layer = i ? (int)((i - 1) / 2) : 0; /* bias with the first layer */
  }
  c->target = malloc(max_b * sizeof(float));
  c->w_rows = calloc(rows, sizeof(float));
  c->e_rows = calloc(rows * c->D, sizeof(float));
  if (!c->target || !c->w_rows || !c->e_rows)
    return FL_ERR(FL_ENOMEM, "ctr: out of memory for buffers of %zu rows", rows);
  FL_TRY(fl_graph_model_set_rows(c->model, FL_CTR_WIDE_ROWS, c->w_rows, &c->w_grad));
  return fl_graph_model_set_rows(c->model, FL_CTR_EMB_ROWS, c->e_rows, &c->e_grad);
}

static void ctr_free(ctr *c) {
  if (c->model) fl_graph_model_ops.destroy(c->model);
  free(c->target);
  free(c->keys);
  free(c->kidx);
  free(c->slots);
  free(c->w_rows);
  free(c->e_rows);
  free(c->feed);
  free(c->state);
}

static uint64_t feat_key(const ctr *c, const fl_sparse_feature *f) {
  return fl_ps_mix64(((uint64_t)f->slot << 48) ^ f->id ^ 0x5bd1e995ULL) % c->buckets;
}

/* Room for nf features: keys, key indices, the feed and the hash slots. */
static fl_status reserve(ctr *c, size_t nf) {
  size_t ns = 16;
  while (ns < 2 * nf + 2) ns *= 2;
  if (nf > c->cap_feats) {
    int32_t *ki = realloc(c->kidx, nf * sizeof *ki);
    if (ki) c->kidx = ki;
    uint64_t *ks = ki ? realloc(c->keys, nf * sizeof *ks) : NULL;
    if (ks) c->keys = ks;
    fl_graph_sparse_entry *fe = ks ? realloc(c->feed, nf * sizeof *fe) : NULL;
    if (fe) c->feed = fe;
    if (!fe) return FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu features", nf);
    c->cap_feats = nf;
  }
  if (ns > c->nslots) {
    int32_t *s = realloc(c->slots, ns * sizeof *s);
    if (!s) return FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu features", nf);
    c->slots = s;
    c->nslots = ns;
  }
  return FL_OK;
}

/* Unique keys of the features [0, nf), and each feature's key index. */
static fl_status collect_keys(ctr *c, const fl_sparse_feature *feats, size_t nf, size_t *nk) {
  FL_TRY(reserve(c, nf));
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
  if (*nk > c->max_rows)
    return FL_ERR(FL_EINVAL, "ctr: a batch of %zu unique keys, over the %zu rows planned",
                  *nk, c->max_rows);
  return FL_OK;
}

/* Pull the rows of n samples and feed them to the graph, with the targets. */
static fl_status feed(ctr *c, const fl_sparse_batch *sb, size_t n, size_t *nk) {
  const size_t f0 = sb->offsets[0], nf = sb->offsets[n] - f0;
  const fl_sparse_feature *feats = sb->feats + f0;
  FL_TRY(collect_keys(c, feats, nf, nk));
  FL_TRY(fl_ps_client_pull_sparse(c->client, WIDE, 1, c->keys, *nk, c->w_rows));
  FL_TRY(fl_ps_client_pull_sparse(c->client, EMB, c->D, c->keys, *nk, c->e_rows));
  for (size_t i = 0; i < n; i++) {
    c->target[i] = sb->labels[i] > 0 ? 1.0f : 0.0f;
    for (size_t f = sb->offsets[i] - f0; f < sb->offsets[i + 1] - f0; f++)
      c->feed[f] = (fl_graph_sparse_entry){.sample = (uint32_t)i, .slot = feats[f].slot,
                                           .row = (uint32_t)c->kidx[f], .value = feats[f].value};
  }
  const fl_graph_sparse_feed fd = {c->feed, nf};
  FL_TRY(fl_graph_model_set_sparse_feed(c->model, FL_CTR_WIDE_NODE, &fd));
  return fl_graph_model_set_sparse_feed(c->model, FL_CTR_POOL_NODE, &fd);
}

/* One training step of n samples: pull, the graph's step (dense grads),
 * then push the rows' gradients. */
static fl_status train_step(ctr *c, const fl_sparse_batch *sb, size_t n, double *loss) {
  size_t nk;
  fl_model_result res;
  FL_TRY(feed(c, sb, n, &nk));
  FL_TRY(fl_graph_model_train_stepf(c->model, NULL, c->target, n, 1.0f, NULL, NULL, &res));
  *loss = res.loss_sum;
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

/* The test set's logits into s[] (scores and labels), and the engine's
 * loss and accuracy sums. */
static fl_status score(ctr *c, const fl_sparse_dataset *test, scored *s, double *loss,
                       double *correct) {
  for (size_t off = 0; off < test->n; off += c->max_b) {
    const size_t cnt = test->n - off < c->max_b ? test->n - off : c->max_b;
    const fl_sparse_batch sb = {test->labels + off, test->offsets + off, test->feats};
    fl_model_result res;
    size_t nk;
    FL_TRY(feed(c, &sb, cnt, &nk));
    FL_TRY(fl_graph_model_evalf(c->model, NULL, c->target, cnt, &res));
    const float *logit = fl_graph_model_output(c->model);
    for (size_t i = 0; i < cnt; i++) s[off + i] = (scored){logit[i], c->target[i] > 0};
    *loss += res.loss_sum;
    *correct += (double)res.correct1;
  }
  return FL_OK;
}

static fl_status evaluate(ctr *c, const fl_sparse_dataset *test, int64_t epoch, FILE *out,
                          fl_trainer_report *rep) {
  size_t n = test->n;
  scored *s = malloc(n * sizeof *s), *o = test->prob ? malloc(n * sizeof *o) : NULL;
  double loss = 0, pos = 0, correct = 0, base, const_loss = 0, a, oracle = 0;
  fl_status st = !s || (test->prob && !o)
                     ? FL_ERR(FL_ENOMEM, "ctr: out of memory evaluating %zu samples", n)
                     : score(c, test, s, &loss, &correct);
  if (st != FL_OK) {
    free(s);
    free(o);
    return st;
  }
  for (size_t i = 0; i < n; i++) {
    pos += s[i].y;
    if (o) o[i] = (scored){test->prob[i], s[i].y};
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
  {
    const size_t max_b = (size_t)(job->train.batch_size > job->train.eval_batch_size
                                      ? job->train.batch_size
                                      : job->train.eval_batch_size);
    if ((st = ctr_build(&c, train.num_slots, max_b,
                        max_rows(&train, &test, max_b, (uint64_t)job->model.ctr.hash_buckets))) !=
        FL_OK)
      goto done;
  }
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
      if ((st = train_step(&c, &b.sparse, b.size, &loss)) != FL_OK) goto done;
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
