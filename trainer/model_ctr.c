/* model_ctr.c - the CTR model (wide & deep over sparse features), a model
 * with sparse tables (fl_sparse_model.h) trained by the one training loop.
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
 * key by the op) are what the loop pushes.  Both tables read the same keys
 * (a batch's unique keys in first-seen order).
 * The dense part (ctr.bias and the MLP) travels like any model's parameters
 * through the ps-mode fl_sync (sync, async or geo).  model.ctr.dense_features
 * is not used: every feature here is sparse (libsvm values keep their
 * magnitude through `value`). */
#include <config.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_data.h"
#include "fl_graph.h"
#include "fl_layers.h"
#include "fl_log.h"
#include "fl_ps_client.h"
#include "fl_sparse_model.h"
#include "fl_trainer.h"
#include "model_internal.h"

#define MAX_LAYERS (FL_JOB_MAX_HIDDEN + 1)

/* One prepared micro-batch: its unique keys, the feed (each feature's key
 * index) and targets, and the pulled rows of both tables. */
typedef struct ctr_slot {
  uint64_t *keys;
  fl_graph_sparse_entry *feed;
  size_t cap_feats, nf, nk, n;
  float *target;              /* max_b click targets (0 or 1) */
  float *w_rows, *e_rows;     /* max_rows rows each */
} ctr_slot;

typedef struct ctr {
  uint32_t S, D;
  uint64_t buckets;
  void *graph;                /* the compiled graph (fl_graph_model_*), the model's */
  size_t max_b, max_rows;     /* the rows inputs' capacity: unique keys of a batch at most */
  ctr_slot slot[FL_SPARSE_SLOTS];
  int32_t *kidx;              /* feature -> unique key index (while preparing) */
  int32_t *hslots;            /* hash of keys -> unique index + 1 */
  size_t nhslots, cap_kidx;
  const float *w_grad, *e_grad; /* the graph's rows gradients */
  fl_sparse_table tables[2];
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
    for (size_t i = 0; d && i < d->n; i++)
      if (d->offsets[i + 1] - d->offsets[i] > most) most = d->offsets[i + 1] - d->offsets[i];
  }
  return (uint64_t)most * max_b < buckets ? most * max_b : (size_t)buckets;
}

static void ctr_destroy(void *self) {
  ctr *c = self;
  if (!c) return;
  for (int k = 0; k < FL_SPARSE_SLOTS; k++) {
    free(c->slot[k].keys);
    free(c->slot[k].feed);
    free(c->slot[k].target);
    free(c->slot[k].w_rows);
    free(c->slot[k].e_rows);
  }
  free(c->kidx);
  free(c->hslots);
  free(c);
}

static uint64_t feat_key(const ctr *c, const fl_sparse_feature *f) {
  return fl_ps_mix64(((uint64_t)f->slot << 48) ^ f->id ^ 0x5bd1e995ULL) % c->buckets;
}

/* Room for nf features in slot s: keys, the feed, key indices and the
 * hash slots. */
static fl_status reserve(ctr *c, ctr_slot *s, size_t nf) {
  size_t ns = 16;
  while (ns < 2 * nf + 2) ns *= 2;
  if (nf > s->cap_feats) {
    uint64_t *ks = realloc(s->keys, nf * sizeof *ks);
    if (ks) s->keys = ks;
    fl_graph_sparse_entry *fe = ks ? realloc(s->feed, nf * sizeof *fe) : NULL;
    if (fe) s->feed = fe;
    if (!fe) return FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu features", nf);
    s->cap_feats = nf;
  }
  if (nf > c->cap_kidx) {
    int32_t *ki = realloc(c->kidx, nf * sizeof *ki);
    if (!ki) return FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu features", nf);
    c->kidx = ki;
    c->cap_kidx = nf;
  }
  if (ns > c->nhslots) {
    int32_t *h = realloc(c->hslots, ns * sizeof *h);
    if (!h) return FL_ERR(FL_ENOMEM, "ctr: out of memory for %zu features", nf);
    c->hslots = h;
    c->nhslots = ns;
  }
  return FL_OK;
}

/* Unique keys of the features [0, nf) into s (in first-seen order), and
 * each feature's key index. */
static fl_status collect_keys(ctr *c, ctr_slot *s, const fl_sparse_feature *feats, size_t nf) {
  FL_TRY(reserve(c, s, nf));
  memset(c->hslots, 0, c->nhslots * sizeof *c->hslots);
  size_t nk = 0;
  for (size_t i = 0; i < nf; i++) {
    uint64_t k = feat_key(c, &feats[i]);
    size_t h = (size_t)fl_ps_mix64(k) & (c->nhslots - 1);
    while (c->hslots[h] && s->keys[c->hslots[h] - 1] != k) h = (h + 1) & (c->nhslots - 1);
    if (!c->hslots[h]) {
      s->keys[nk] = k;
      c->hslots[h] = (int32_t)++nk;
    }
    c->kidx[i] = c->hslots[h] - 1;
  }
  if (nk > c->max_rows)
    return FL_ERR(FL_EINVAL, "ctr: a batch of %zu unique keys, over the %zu rows planned",
                  nk, c->max_rows);
  s->nk = nk;
  return FL_OK;
}

/* hooks->prepare: the keys of n samples (both tables read the same keys),
 * the feed and the targets. */
static fl_status ctr_prepare(void *self, unsigned slot, const fl_batch *b, size_t n,
                             fl_sparse_need *need) {
  ctr *c = self;
  ctr_slot *s = &c->slot[slot];
  const fl_sparse_batch *sb = &b->sparse;
  const size_t f0 = sb->offsets[0], nf = sb->offsets[n] - f0;
  const fl_sparse_feature *feats = sb->feats + f0;
  FL_TRY(collect_keys(c, s, feats, nf));
  for (size_t i = 0; i < n; i++) {
    s->target[i] = sb->labels[i] > 0 ? 1.0f : 0.0f;
    for (size_t f = sb->offsets[i] - f0; f < sb->offsets[i + 1] - f0; f++)
      s->feed[f] = (fl_graph_sparse_entry){.sample = (uint32_t)i, .slot = feats[f].slot,
                                           .row = (uint32_t)c->kidx[f], .value = feats[f].value};
  }
  s->nf = nf;
  s->n = n;
  need[0] = (fl_sparse_need){s->keys, s->nk, s->w_rows};
  need[1] = (fl_sparse_need){s->keys, s->nk, s->e_rows};
  return FL_OK;
}

/* hooks->bind: the slot's rows and feed become the graph's. */
static fl_status ctr_bind(void *self, unsigned slot, const float **targets) {
  ctr *c = self;
  ctr_slot *s = &c->slot[slot];
  const fl_graph_sparse_feed fd = {s->feed, s->nf};
  FL_TRY(fl_graph_model_set_rows(c->graph, FL_CTR_WIDE_ROWS, s->w_rows, &c->w_grad));
  FL_TRY(fl_graph_model_set_rows(c->graph, FL_CTR_EMB_ROWS, s->e_rows, &c->e_grad));
  FL_TRY(fl_graph_model_set_sparse_feed(c->graph, FL_CTR_WIDE_NODE, &fd));
  FL_TRY(fl_graph_model_set_sparse_feed(c->graph, FL_CTR_POOL_NODE, &fd));
  *targets = s->target;
  return FL_OK;
}

static const float *ctr_row_grad(void *self, size_t t) {
  const ctr *c = self;
  return t == 0 ? c->w_grad : c->e_grad;
}

static const float *ctr_scores(void *self) {
  return fl_graph_model_output(((const ctr *)self)->graph);
}

static size_t ctr_tables(void *self, const fl_sparse_table **t) {
  *t = ((const ctr *)self)->tables;
  return 2;
}

static const fl_sparse_hooks ctr_hooks = {
    .tables = ctr_tables,
    .prepare = ctr_prepare,
    .bind = ctr_bind,
    .row_grad = ctr_row_grad,
    .scores = ctr_scores,
    .destroy = ctr_destroy,
};

/* The compiled graph and the slots' buffers for max_b samples and `rows`
 * unique keys. */
static fl_status ctr_build(ctr *c, const fl_job *job, uint32_t slots, size_t max_b,
                           size_t rows) {
  const fl_job_model *m = &job->model;
  int64_t hidden[FL_JOB_MAX_HIDDEN];
  for (size_t l = 0; l < m->n_hidden; l++) hidden[l] = (int64_t)m->hidden[l];
  const fl_ctr_shape sh = {.slots = slots, .dim = (uint32_t)m->ctr.embedding_dim,
                           .hidden = hidden, .n_hidden = m->n_hidden, .rows = rows,
                           .max_batch = max_b, .seed = job->train.seed};
  c->S = slots;
  c->D = sh.dim;
  c->buckets = (uint64_t)m->ctr.hash_buckets;
  c->max_b = max_b;
  c->max_rows = rows;
  c->tables[0] = (fl_sparse_table){FL_CTR_WIDE_TABLE, 1};
  c->tables[1] = (fl_sparse_table){FL_CTR_EMB_TABLE, c->D};
  for (int k = 0; k < FL_SPARSE_SLOTS; k++) {
    ctr_slot *s = &c->slot[k];
    s->target = malloc(max_b * sizeof(float));
    s->w_rows = calloc(rows, sizeof(float));
    s->e_rows = calloc(rows * c->D, sizeof(float));
    if (!s->target || !s->w_rows || !s->e_rows)
      return FL_ERR(FL_ENOMEM, "ctr: out of memory for buffers of %zu rows", rows);
  }
  FL_TRY(fl_ctr_graph(&sh, &c->graph));
  const size_t np = fl_graph_model_ops.num_params(c->graph);
  for (size_t i = 0; i < np; i++) /* bias with the first layer */
    fl_graph_model_ops.param(c->graph, i)->layer = i ? (int)((i - 1) / 2) : 0;
  return FL_OK;
}

fl_status fl_ctr_model_create(const fl_model_build_args *a, fl_model **out) {
  const fl_job *job = a->job;
  if (!a->train || !a->train->n)
    return FL_ERR(FL_EINVAL, "%s: the ctr model needs sparse training data (data.format libsvm "
                  "or synthetic kind ctr)", job->source);
  ctr *c = calloc(1, sizeof *c);
  if (!c) return FL_ERR(FL_ENOMEM, "ctr: out of memory");
  const size_t rows = max_rows(a->train, a->test, a->max_batch,
                               (uint64_t)job->model.ctr.hash_buckets);
  fl_status st = ctr_build(c, job, a->train->num_slots, a->max_batch, rows);
  if (st != FL_OK) {
    if (c->graph) fl_graph_model_ops.destroy(c->graph);
    ctr_destroy(c);
    return st;
  }
  FL_LOGI("ctr: %u slots x embedding %u -> MLP of %zu layers; rows of at most %zu keys a batch",
          c->S, c->D, job->model.n_hidden + 1, rows);
  return fl_model_wrap_graph(a->spec, c->graph, a->max_batch, &ctr_hooks, c, out);
}
