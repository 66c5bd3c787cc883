/* loop_sparse.c - the training loop's side of models with sparse tables
 * (contract in loop_internal.h, the model's side in fl_sparse_model.h).
 *
 * The tables' rows live on the pservers.  Before a micro-batch's step the
 * model says which ids of each table it needs and the rows are pulled into
 * its buffers; after the step their gradients are pushed, numbered by the
 * loop's global optimizer step, so a trainer
 * restarted or rejoined at step s pushes s, never a number the pservers
 * drop as an old duplicate (they apply them with pserver.sparse.optimizer).
 * The dense parameters travel through the ps-mode fl_sync like any model's.
 * With gradient merge (k micro-batches a step) each micro-batch pulls its
 * rows and the rows' gradients are summed over the step's micro-batches in
 * their order, divided by k and pushed once a step: the pservers sum and
 * divide T trainers' pushes the same way, so T trainers equal 1 merging
 * k = T micro-batches bit for bit (docs/DESIGN.md section 2).
 *
 * Pipelining (pserver.sparse.pipeline, the default): the model keeps two
 * micro-batches prepared, so while one computes the next one is taken from
 * the loader into the other slot and its rows are pulled, with the PS
 * client's asynchronous calls (the trainer thread issues them; the
 * client's driver thread completes them).  Async and geo pull the next
 * rows at once, from the tables as they stand; sync pulls step s + 1's
 * rows as soon as the servers acknowledged this trainer's push of step s
 * (the pull is answered once every trainer's step s is applied, as a
 * sequential pull would be: the same rows, bit for bit), overlapping the
 * dense sync.  A push stays in flight while the next step computes; its
 * errors come out at the next push or at the epoch's end.  No pull runs
 * ahead past the epoch or the run's last step, nor, in elastic chunk mode,
 * past the claimed chunk: the next chunk is claimed (and the loader moved
 * there) only after this one's last push is acknowledged.  Each step's share of time
 * blocked waiting for rows goes to the step report, /metrics and the
 * timeline.  Evaluation reads rows read-only (it
 * changes no table) and each rank scores its contiguous share of the test
 * set; the (probability, label) pairs of every rank are gathered through
 * the sync's metric sums (each rank fills its own positions, the others
 * add zeros, so the sums are the pairs, exactly), and every rank computes
 * the exact AUC and log loss of the whole test set (fl_metrics_auc.h),
 * beside those of a constant predictor and, for synthetic data, of the
 * true click probability. */
#include <config.h>

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fl_graph_inspect.h"
#include "fl_log.h"
#include "fl_metrics.h"
#include "fl_metrics_auc.h"
#include "fl_optim.h"
#include "fl_ps_client.h"
#include "fl_ps_layout.h"
#include "fl_sparse_model.h"
#include "fl_timeline.h"
#include "loop_internal.h"

/* Gradient merge: one table's rows of the step so far, the union of its
 * micro-batches' ids in first-seen order and their gradients summed in
 * micro-batch order (as the pservers sum trainers, core_rows.c sum_rows);
 * slots: an open-addressing hash of nslots over ids (an index, or -1). */
typedef struct merge_rows {
  uint64_t *ids;
  float *g;
  int32_t *slots;
  size_t n, cap, nslots;
} merge_rows;

struct fl_sparse_run {
  fl_model *model;
  const fl_sparse_hooks *hooks;
  void *self;
  fl_sync *sync;
  fl_sparse_next_fn next; /* the training micro-batches, in order */
  void *next_ctx;
  const fl_sparse_table *tables;
  size_t nt;
  fl_sparse_need need[FL_SPARSE_SLOTS][FL_SPARSE_MAX_TABLES]; /* each slot's */
  int pipeline;  /* pserver.sparse.pipeline */
  int sync_mode; /* sync ps: the next pull waits for this step's push */
  unsigned cur;  /* the slot of the micro-batch being trained */
  int ahead;     /* the other slot holds the next micro-batch, its pulls started */
  int pushing;   /* a push is in flight (async, geo) */
  fl_batch next_b; /* that micro-batch (index, size; its arrays are gone) */
  size_t index;    /* the trained micro-batch's index in the epoch */
  int64_t step, per_epoch, max_steps; /* no pull ahead past the epoch or run */
  int64_t chunk; /* elastic chunks: micro-batches of the claimed chunk (no pull
                  * ahead past it), 0 = none */
  int alone;     /* elastic chunks: this trainer evaluates the whole test set */
  double t_step, waited;     /* the step's start, its time blocked on rows (s) */
  double wait_sum, time_sum; /* over the epoch */
  int inited; /* the model's initial rows were sent (init_tables) */
  int k, avg;       /* strategy.gradient_merge: micro-batches a step, averaged */
  int mb;           /* micro-batches merged of step mstep */
  int64_t mstep;
  merge_rows merge[FL_SPARSE_MAX_TABLES];
};

fl_status fl_loop_load_sparse(const fl_job *job, fl_sparse_dataset *train,
                              fl_sparse_dataset *test) {
  const fl_job_data *d = &job->data;
  if (d->format == FL_DATA_LIBSVM) {
    FL_TRY(fl_sparse_load(d->train_path, FL_SPARSE_LIBSVM, train));
    if (job->train.eval && d->test_path[0]) FL_TRY(fl_sparse_load(d->test_path, FL_SPARSE_LIBSVM, test));
    return FL_OK;
  }
  /* synthetic CTR: half the slots carry signal, 1000 ids per slot,
   * weights N(0, 1), bias -1 */
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

fl_status fl_sparse_run_create(const fl_job *job, fl_model *m, fl_sync *sync,
                               fl_sparse_next_fn next, void *next_ctx, int k,
                               fl_sparse_run **out) {
  void *self = NULL;
  const fl_sparse_hooks *h = fl_model_sparse(m, &self);
  fl_ps_sparse_spec specs[FL_SPARSE_MAX_TABLES];
  *out = NULL;
  if (!h) return FL_ERR(FL_EINVAL, "%s: model.kind %s has no sparse tables", job->source,
                        job->model.kind);
  if (!fl_sync_ps_client(sync))
    return FL_ERR(FL_ENOTSUP, "%s: model.kind %s keeps sparse tables on pservers: it trains in "
                  "ps mode (cluster.mode ps)", job->source, job->model.kind);
  fl_sparse_run *r = calloc(1, sizeof *r);
  if (!r) return FL_ERR(FL_ENOMEM, "sparse tables: out of memory");
  r->model = m;
  r->hooks = h;
  r->self = self;
  r->sync = sync;
  r->next = next;
  r->next_ctx = next_ctx;
  r->pipeline = job->pserver.sparse.pipeline;
  r->sync_mode = !job->strategy.a_sync;
  r->k = k > 1 ? k : 1;
  r->avg = job->strategy.gradient_merge_configs.avg;
  r->mstep = -1;
  r->nt = h->tables(self, &r->tables);
  if (r->nt > FL_SPARSE_MAX_TABLES) {
    fl_sparse_run_free(r);
    return FL_ERR(FL_EINVAL, "%s: model.kind %s has %zu sparse tables (at most %d)",
                  job->source, job->model.kind, r->nt, FL_SPARSE_MAX_TABLES);
  }
  for (size_t t = 0; t < r->nt; t++)
    specs[t] = (fl_ps_sparse_spec){r->tables[t].name, r->tables[t].width};
  fl_status st = fl_sync_ps_set_tables(sync, specs, r->nt);
  if (st != FL_OK) {
    fl_sparse_run_free(r);
    return st;
  }
  *out = r;
  return FL_OK;
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Ids sent in one InitSparse call at most. */
#define INIT_CHUNK 4096

/* Table t's initial rows 0..rows-1 (the model's values) to the pservers,
 * which create those that do not exist yet: every trainer sends the same,
 * and a restarted one changes nothing. */
static fl_status init_table(fl_sparse_run *r, size_t t, const float *init, size_t rows) {
  fl_ps_client *c = fl_sync_ps_client(r->sync);
  const uint32_t w = r->tables[t].width;
  uint64_t ids[INIT_CHUNK];
  for (size_t lo = 0; lo < rows; lo += INIT_CHUNK) {
    const size_t n = rows - lo < INIT_CHUNK ? rows - lo : INIT_CHUNK;
    for (size_t i = 0; i < n; i++) ids[i] = lo + i;
    FL_TRY(fl_ps_client_init_sparse(c, r->tables[t].name, w, ids, n, init + lo * w));
  }
  FL_LOGI("sparse table %s: rows 0..%zu from the model sent to the pservers (existing rows "
          "kept)", r->tables[t].name, rows ? rows - 1 : 0);
  return FL_OK;
}

/* Before the first pull: the tables that start from the model's values. */
static fl_status init_tables(fl_sparse_run *r) {
  for (size_t t = 0; r->hooks->init_rows && t < r->nt; t++) {
    size_t rows = 0;
    const float *init = r->hooks->init_rows(r->self, t, &rows);
    if (init) FL_TRY(init_table(r, t, init, rows));
  }
  r->inited = 1;
  return FL_OK;
}

fl_status fl_sparse_run_drain(fl_sparse_run *r) {
  fl_ps_client *c = fl_sync_ps_client(r->sync);
  fl_status st = FL_OK, st2 = FL_OK;
  if (r->pushing) st = fl_ps_client_push_sparse_finish(c);
  if (r->ahead) st2 = fl_ps_client_pull_sparse_finish(c);
  r->pushing = r->ahead = 0;
  return st != FL_OK ? st : st2;
}

void fl_sparse_run_free(fl_sparse_run *r) {
  /* nothing in flight may still write into the model's rows */
  if (!r) return;
  (void)fl_sparse_run_drain(r);
  for (size_t t = 0; t < r->nt; t++) {
    free(r->merge[t].ids);
    free(r->merge[t].g);
    free(r->merge[t].slots);
  }
  free(r);
}

void fl_sparse_run_limit(fl_sparse_run *r, int64_t steps_per_epoch, int64_t max_steps) {
  r->per_epoch = steps_per_epoch * r->k; /* micro-batches */
  r->max_steps = max_steps;
}

void fl_sparse_run_chunk(fl_sparse_run *r, int64_t micro_batches) {
  r->chunk = micro_batches;
  r->alone = 1;
}

/* Prepare b in slot and fetch its rows, blocking: a training pull (rows
 * created, a sync pull held for the step), or an evaluation's read-only
 * one. */
static fl_status fetch(fl_sparse_run *r, unsigned slot, const fl_batch *b, size_t n,
                       int read_only) {
  fl_ps_client *c = fl_sync_ps_client(r->sync);
  fl_sparse_need *need = r->need[slot];
  if (!r->inited) FL_TRY(init_tables(r));
  FL_TRY(r->hooks->prepare(r->self, slot, b, n, need));
  const double t0 = mono_s();
  /* every table's rows in one call per server */
  for (size_t t = 0; t < r->nt; t++)
    FL_TRY((read_only ? fl_ps_client_read_sparse_start : fl_ps_client_pull_sparse_start)(
        c, r->tables[t].name, r->tables[t].width, need[t].ids, need[t].n, need[t].rows));
  FL_TRY(fl_ps_client_pull_sparse_finish(c));
  r->waited += mono_s() - t0;
  return FL_OK;
}

/* When the epoch and the run go on after the trained micro-batch: the next
 * one from the loader, prepared in the other slot, its pulls started. */
static fl_status pull_ahead(fl_sparse_run *r) {
  if (r->ahead || (int64_t)r->index + 1 >= r->per_epoch ||
      (r->chunk > 0 && (int64_t)r->index + 1 >= r->chunk) ||
      (r->max_steps > 0 && r->step + 1 >= r->max_steps))
    return FL_OK;
  fl_ps_client *c = fl_sync_ps_client(r->sync);
  const unsigned slot = (r->cur + 1) % FL_SPARSE_SLOTS;
  fl_sparse_need *need = r->need[slot];
  FL_TRY(r->next(r->next_ctx, &r->next_b));
  FL_TRY(r->hooks->prepare(r->self, slot, &r->next_b, r->next_b.size, need));
  r->ahead = 1;
  for (size_t t = 0; t < r->nt; t++)
    FL_TRY(fl_ps_client_pull_sparse_start(c, r->tables[t].name, r->tables[t].width,
                                          need[t].ids, need[t].n, need[t].rows));
  return fl_ps_client_sparse_send(c);
}

fl_status fl_sparse_run_next(fl_sparse_run *r, int64_t step, fl_batch *b) {
  r->step = step;
  r->t_step = mono_s();
  r->waited = 0;
  if (r->ahead) { /* prepared and pulled while the last step ran */
    *b = r->next_b;
    r->ahead = 0;
    r->cur = (r->cur + 1) % FL_SPARSE_SLOTS;
    FL_TRY(fl_ps_client_pull_sparse_finish(fl_sync_ps_client(r->sync)));
    r->waited = mono_s() - r->t_step;
  } else {
    FL_TRY(r->next(r->next_ctx, b));
    FL_TRY(fetch(r, r->cur, b, b->size, 0));
  }
  r->index = b->index;
  /* async and geo: the next rows at once, from the tables as they stand */
  return r->pipeline && !r->sync_mode ? pull_ahead(r) : FL_OK;
}

unsigned fl_sparse_run_slot(const fl_sparse_run *r) { return r->cur; }

/* Room in m for more rows of width w: ids, gradients, and a hash at most
 * half full (rebuilt when it grows). */
static fl_status merge_room(merge_rows *m, size_t more, uint32_t w) {
  const size_t need = m->n + more;
  if (need > m->cap) {
    const size_t cap = need > 2 * m->cap ? need : 2 * m->cap;
    uint64_t *ids = realloc(m->ids, cap * sizeof *ids);
    if (ids) m->ids = ids;
    float *g = ids ? realloc(m->g, cap * w * sizeof *g) : NULL;
    if (!g) return FL_ERR(FL_ENOMEM, "gradient merge: out of memory for %zu sparse rows", cap);
    m->g = g;
    m->cap = cap;
  }
  if (2 * need < m->nslots) return FL_OK;
  size_t ns = m->nslots ? m->nslots : 64;
  while (2 * need >= ns) ns *= 2;
  int32_t *slots = realloc(m->slots, ns * sizeof *slots);
  if (!slots) return FL_ERR(FL_ENOMEM, "gradient merge: out of memory for %zu hash slots", ns);
  m->slots = slots;
  m->nslots = ns;
  memset(slots, 0xff, ns * sizeof *slots);
  for (size_t i = 0; i < m->n; i++) {
    size_t h = (size_t)fl_ps_mix64(m->ids[i]) & (ns - 1);
    while (slots[h] >= 0) h = (h + 1) & (ns - 1);
    slots[h] = (int32_t)i;
  }
  return FL_OK;
}

/* A micro-batch's n rows (ids, gradients g of width w) into m: a new id's
 * row copied, a known one's added to its sum. */
static fl_status merge_add(merge_rows *m, const uint64_t *ids, size_t n, const float *g,
                           uint32_t w) {
  FL_TRY(merge_room(m, n, w));
  for (size_t i = 0; i < n; i++) {
    size_t h = (size_t)fl_ps_mix64(ids[i]) & (m->nslots - 1);
    while (m->slots[h] >= 0 && m->ids[m->slots[h]] != ids[i]) h = (h + 1) & (m->nslots - 1);
    if (m->slots[h] < 0) {
      m->slots[h] = (int32_t)m->n;
      m->ids[m->n] = ids[i];
      memcpy(m->g + m->n * w, g + i * w, w * sizeof *g);
      m->n++;
    } else {
      float *a = m->g + (size_t)m->slots[h] * w;
      for (uint32_t j = 0; j < w; j++) a[j] += g[i * w + j];
    }
  }
  return FL_OK;
}

/* Gradient merge: the trained micro-batch's rows into the step's sums (a
 * new step starts them afresh); at the k-th, each table's sum becomes the
 * mean over the k, as the pservers average T trainers (fl_gm_finalize). */
static fl_status merge_micro(fl_sparse_run *r, int64_t step) {
  if (step != r->mstep || r->mb >= r->k) {
    for (size_t t = 0; t < r->nt; t++) {
      r->merge[t].n = 0;
      if (r->merge[t].slots) memset(r->merge[t].slots, 0xff, r->merge[t].nslots * sizeof(int32_t));
    }
    r->mb = 0;
    r->mstep = step;
  }
  const fl_sparse_need *need = r->need[r->cur];
  for (size_t t = 0; t < r->nt; t++)
    FL_TRY(merge_add(&r->merge[t], need[t].ids, need[t].n, r->hooks->row_grad(r->self, t),
                     r->tables[t].width));
  if (++r->mb < r->k) return FL_OK;
  for (size_t t = 0; t < r->nt; t++) {
    const size_t len = r->merge[t].n * r->tables[t].width;
    if (len) FL_TRY(fl_gm_finalize(&r->merge[t].g, &len, 1, r->k, r->avg));
  }
  return FL_OK;
}

fl_status fl_sparse_run_push(fl_sparse_run *r, int64_t step) {
  fl_ps_client *c = fl_sync_ps_client(r->sync);
  const fl_sparse_need *need = r->need[r->cur];
  if (r->pushing) { /* the last step's push: its errors come out here */
    r->pushing = 0;
    FL_TRY(fl_ps_client_push_sparse_finish(c));
  }
  if (r->k > 1) { /* gradient merge: one push a step, of the k micro-batches' rows */
    FL_TRY(merge_micro(r, step));
    if (r->mb < r->k) return r->pipeline && r->sync_mode ? pull_ahead(r) : FL_OK;
  }
  /* every table's rows in one batch: a restarted server gets all of them
   * again (fl_ps_client.h) */
  r->pushing = 1;
  for (size_t t = 0; t < r->nt; t++) {
    const merge_rows *m = &r->merge[t];
    FL_TRY(fl_ps_client_push_sparse_start(c, r->tables[t].name, r->tables[t].width, step,
                                          r->k > 1 ? m->ids : need[t].ids,
                                          r->k > 1 ? m->n : need[t].n,
                                          r->k > 1 ? m->g : r->hooks->row_grad(r->self, t)));
  }
  FL_TRY(fl_ps_client_sparse_send(c));
  if (r->pipeline && !r->sync_mode) return FL_OK;
  /* sync: once the servers hold this step's push, the next step's pull
   * may wait there for the step to be applied */
  r->pushing = 0;
  FL_TRY(fl_ps_client_push_sparse_finish(c));
  return r->pipeline ? pull_ahead(r) : FL_OK;
}

double fl_sparse_run_step_end(fl_sparse_run *r) {
  const double dt = mono_s() - r->t_step, share = dt > 0 ? r->waited / dt : 0;
  r->wait_sum += r->waited;
  r->time_sum += dt;
  fl_series_set(fl_metrics_std()->pull_wait_share, share);
  fl_timeline_counter(fl_timeline_default(), "pull_wait_share", share);
  return share;
}

fl_status fl_sparse_run_epoch_end(fl_sparse_run *r, int64_t epoch, FILE *out) {
  FL_TRY(fl_sparse_run_drain(r));
  if (r->time_sum > 0)
    fprintf(out, "[Epoch %" PRId64 "] pull_wait: %.4f of the step time (%s)\n", epoch,
            r->wait_sum / r->time_sum, r->pipeline ? "pipelined" : "sequential");
  fflush(out);
  r->wait_sum = r->time_sum = 0;
  return FL_OK;
}

/* ------------------------------------------------------------ evaluation */

/* Pairs per metric sum (the ps mode sums at most 64 values at once). */
#define GATHER_CHUNK 64

/* Rank k's share of n test samples: [n k / w, n (k + 1) / w). */
static size_t share_start(size_t n, int k, int w) { return n * (size_t)k / (size_t)w; }

/* A test set: sparse samples, or named inputs with one float target a
 * sample (a graph model's, gathered per batch into in[]). */
typedef struct test_src {
  const fl_sparse_dataset *sp;
  const fl_dataset *d;
  void *in[FL_DATA_MAX_INPUTS];
} test_src;

static size_t test_n(const test_src *s) { return s->sp ? s->sp->n : s->d->n; }

static float test_label(const test_src *s, size_t i) {
  return s->sp ? (s->sp->labels[i] > 0 ? 1.0f : 0.0f) : (s->d->t[i] > 0.5f ? 1.0f : 0.0f);
}

/* Samples [off, off + cnt) as a batch (cnt at most bs). */
static fl_status test_batch(test_src *s, size_t bs, size_t off, size_t cnt, fl_batch *b) {
  if (s->sp) {
    *b = (fl_batch){.size = cnt, .sparse = {s->sp->labels + off, s->sp->offsets + off,
                                            s->sp->feats}};
    return FL_OK;
  }
  const fl_dataset *d = s->d;
  *b = (fl_batch){.size = cnt, .t = d->t + off, .n_inputs = d->n_inputs, .ylen = 1};
  for (size_t k = 0; k < d->n_inputs; k++) {
    if (!s->in[k] && !(s->in[k] = malloc(bs * d->inputs[k].dim * sizeof(int64_t))))
      return FL_ERR(FL_ENOMEM, "eval: out of memory for %zu x %zu values of input %s", bs,
                    d->inputs[k].dim, d->inputs[k].name);
    fl_dataset_input_rows(d, k, off, cnt, s->in[k]);
    b->inputs[k] = s->in[k];
  }
  return FL_OK;
}

/* Score samples [lo, hi) of the test set into acc (probabilities), counting
 * the correct ones at p = 0.5. */
static fl_status score(fl_sparse_run *r, test_src *test, size_t lo, size_t hi,
                       fl_auc_acc *acc, double *correct) {
  const size_t bs = fl_model_max_batch(r->model);
  float p[GATHER_CHUNK], y[GATHER_CHUNK];
  for (size_t off = lo; off < hi; off += bs) {
    const size_t cnt = hi - off < bs ? hi - off : bs;
    fl_batch b;
    fl_model_result res;
    FL_TRY(test_batch(test, bs, off, cnt, &b));
    FL_TRY(fetch(r, 0, &b, cnt, 1));
    FL_TRY(fl_model_eval_sparse(r->model, 0, cnt, &res));
    const float *logit = r->hooks->scores(r->self);
    for (size_t i = 0; i < cnt; i += GATHER_CHUNK) {
      const size_t m = cnt - i < GATHER_CHUNK ? cnt - i : GATHER_CHUNK;
      for (size_t j = 0; j < m; j++) {
        p[j] = 1.0f / (1.0f + expf(-logit[i + j]));
        y[j] = test_label(test, off + i + j);
      }
      FL_TRY(fl_auc_add(acc, p, y, m));
    }
    *correct += (double)res.correct1;
  }
  return FL_OK;
}

static void log_eval(FILE *out, int64_t epoch, const fl_auc_result *a, double acc,
                     double const_loss, const double *oracle) {
  fprintf(out,
          "[Epoch %" PRId64 "] test auc: %.5f, logloss: %.5f, acc1: %.5f (constant predictor: "
          "auc 0.50000, logloss %.5f",
          epoch, a->auc, a->logloss, acc, const_loss);
  if (oracle) fprintf(out, "; true probability: auc %.5f", *oracle);
  fprintf(out, ")\n");
  fflush(out);
}

/* The AUC of the true click probabilities of synthetic data. */
static fl_status oracle_auc(const fl_sparse_dataset *test, double *out) {
  fl_auc_acc o = {0};
  fl_auc_result res;
  fl_status st = fl_auc_add(&o, test->prob, test->labels, test->n);
  if (st == FL_OK) st = fl_auc_merge(&(fl_auc_part){o.score, o.label, o.n}, 1, &res);
  fl_auc_acc_free(&o);
  *out = res.auc;
  return st;
}

/* This rank's share scored, every share gathered, the metrics merged. */
static fl_status eval_all(fl_sparse_run *r, test_src *test, fl_auc_acc *mine,
                          fl_auc_acc *all, fl_auc_result *res, double *correct) {
  const int w = r->alone ? 1 : r->sync->ops->world_size(r->sync->self),
            k = r->alone ? 0 : r->sync->ops->rank(r->sync->self);
  const size_t n = test_n(test), lo = share_start(n, k, w), hi = share_start(n, k + 1, w);
  FL_TRY(score(r, test, lo, hi, mine, correct));
  if (r->alone) return fl_auc_merge(&(fl_auc_part){mine->score, mine->label, mine->n}, 1, res);
  FL_TRY(r->sync->ops->reduce_metrics(r->sync->self, correct, 1));
  FL_TRY(fl_auc_gather(r->sync, mine, lo, n, all));
  return fl_auc_merge(&(fl_auc_part){all->score, all->label, all->n}, 1, res);
}

fl_status fl_sparse_run_eval(fl_sparse_run *r, const fl_sparse_dataset *stest,
                             const fl_dataset *dtest, int64_t epoch, FILE *out,
                             fl_trainer_report *rep) {
  fl_auc_acc mine = {0}, all = {0};
  fl_auc_result res;
  double correct = 0, const_loss = 0, oracle = 0;
  FL_TRY(fl_sparse_run_drain(r)); /* evaluation is sequential */
  test_src src = {.sp = stest->n ? stest : NULL, .d = dtest};
  const fl_sparse_dataset *test = src.sp;
  fl_status st = eval_all(r, &src, &mine, &all, &res, &correct);
  if (st == FL_OK && test && test->prob) st = oracle_auc(test, &oracle);
  fl_auc_acc_free(&mine);
  fl_auc_acc_free(&all);
  for (size_t k = 0; k < FL_DATA_MAX_INPUTS; k++) free(src.in[k]);
  if (st != FL_OK) return st;
  const double n = (double)test_n(&src), base = (double)res.positives / n;
  if (base > 0 && base < 1) const_loss = -(base * log(base) + (1 - base) * log(1 - base));
  log_eval(out, epoch, &res, correct / n, const_loss, test && test->prob ? &oracle : NULL);
  rep->evaluated = 1;
  rep->test_loss = res.logloss;
  rep->test_acc1 = correct / n;
  return FL_OK;
}

int fl_sparse_run_auc(const fl_sparse_run *r) {
  fl_gloss loss = FL_GLOSS_SOFTMAX_XENT;
  const fl_graph *g = fl_model_graph(r->model);
  (void)fl_graph_output_id(g, &loss);
  return loss == FL_GLOSS_BCE_LOGITS && fl_model_get_spec(r->model)->num_classes == 1;
}

fl_status fl_sparse_run_eval_batch(fl_sparse_run *r, const fl_batch *b, size_t n,
                                   fl_model_result *res) {
  FL_TRY(fl_sparse_run_drain(r)); /* evaluation is sequential */
  FL_TRY(fetch(r, 0, b, n, 1));
  return fl_model_eval_sparse(r->model, 0, n, res);
}

/* ---------------------------------------------------------------- export */

/* Table t's rows as <prefix>.<table>.ids.npy (int64 [n]) and
 * <prefix>.<table>.rows.npy (float32 [n, width]). */
static fl_status export_table(fl_sparse_run *r, size_t t, const char *prefix) {
  uint64_t *ids = NULL;
  float *rows = NULL;
  size_t n = 0;
  char path[FL_JOB_PATH_MAX + 160];
  const fl_sparse_table *tb = &r->tables[t];
  fl_status st = fl_ps_client_dump_sparse(fl_sync_ps_client(r->sync), tb->name, tb->width, &ids,
                                          &rows, &n);
  const int64_t shape[2] = {(int64_t)n, (int64_t)tb->width};
  if (st == FL_OK) {
    snprintf(path, sizeof path, "%s.%s.ids.npy", prefix, tb->name);
    st = fl_npy_save(path, FL_NPY_I64, 1, shape, ids); /* ids < 2^63: int64 as stored */
  }
  if (st == FL_OK) {
    snprintf(path, sizeof path, "%s.%s.rows.npy", prefix, tb->name);
    st = fl_npy_save(path, FL_NPY_F32, 2, shape, rows);
  }
  if (st == FL_OK) FL_LOGI("sparse table %s: %zu rows exported to %s", tb->name, n, path);
  free(ids);
  free(rows);
  return st;
}

fl_status fl_sparse_run_export(fl_sparse_run *r, const char *prefix) {
  double v = 0;
  if (!r->alone) /* every last push is in (elastic chunks: this trainer's) */
    FL_TRY(r->sync->ops->reduce_metrics(r->sync->self, &v, 1));
  if (r->sync->ops->rank(r->sync->self) != 0) return FL_OK;
  for (size_t t = 0; t < r->nt; t++) FL_TRY(export_table(r, t, prefix));
  return FL_OK;
}
