/* loop_sparse.c - the training loop's side of models with sparse tables
 * (contract in loop_internal.h, the model's side in fl_sparse_model.h).
 *
 * The tables' rows live on the pservers.  Before a micro-batch's step the
 * model says which ids of each table it needs and the rows are pulled into
 * its buffers; after the step their gradients are pushed, numbered by the
 * loop's global optimizer step (one micro-batch a step), so a trainer
 * restarted or rejoined at step s pushes s, never a number the pservers
 * drop as an old duplicate (they apply them with pserver.sparse.optimizer).  The dense parameters travel through the
 * ps-mode fl_sync like any model's.  Evaluation reads rows read-only (it
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

#include "fl_log.h"
#include "fl_metrics_auc.h"
#include "fl_ps_client.h"
#include "fl_sparse_model.h"
#include "loop_internal.h"

struct fl_sparse_run {
  fl_model *model;
  const fl_sparse_hooks *hooks;
  void *self;
  fl_sync *sync;
  const fl_sparse_table *tables;
  size_t nt;
  fl_sparse_need need[FL_SPARSE_MAX_TABLES]; /* the pulled micro-batch's */
};

int fl_loop_sparse_data(const fl_job *job) {
  const fl_job_data *d = &job->data;
  return d->format == FL_DATA_LIBSVM ||
         (d->format == FL_DATA_SYNTHETIC && !strcmp(d->synthetic.kind, "ctr"));
}

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

fl_status fl_sparse_run_create(const fl_job *job, fl_model *m, fl_sync *sync, int k,
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
  if (k > 1)
    return FL_ERR(FL_ENOTSUP, "%s: model.kind %s has sparse tables and does not do gradient "
                  "merge (k_steps %d): set strategy.gradient_merge off", job->source,
                  job->model.kind, k);
  fl_sparse_run *r = calloc(1, sizeof *r);
  if (!r) return FL_ERR(FL_ENOMEM, "sparse tables: out of memory");
  r->model = m;
  r->hooks = h;
  r->self = self;
  r->sync = sync;
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

void fl_sparse_run_free(fl_sparse_run *r) { free(r); }

/* Prepare b in slot 0 and fetch its rows: a training pull (rows created,
 * a sync pull held for the step), or an evaluation's read-only one. */
static fl_status fetch(fl_sparse_run *r, const fl_batch *b, size_t n, int read_only) {
  fl_ps_client *c = fl_sync_ps_client(r->sync);
  FL_TRY(r->hooks->prepare(r->self, 0, b, n, r->need));
  for (size_t t = 0; t < r->nt; t++)
    FL_TRY((read_only ? fl_ps_client_read_sparse : fl_ps_client_pull_sparse)(
        c, r->tables[t].name, r->tables[t].width, r->need[t].ids, r->need[t].n,
        r->need[t].rows));
  return FL_OK;
}

fl_status fl_sparse_run_pull(fl_sparse_run *r, const fl_batch *b, size_t n) {
  return fetch(r, b, n, 0);
}

fl_status fl_sparse_run_push(fl_sparse_run *r, int64_t step) {
  fl_ps_client *c = fl_sync_ps_client(r->sync);
  for (size_t t = 0; t < r->nt; t++)
    FL_TRY(fl_ps_client_push_sparse(c, r->tables[t].name, r->tables[t].width, step,
                                    r->need[t].ids, r->need[t].n,
                                    r->hooks->row_grad(r->self, t)));
  return FL_OK;
}

/* ------------------------------------------------------------ evaluation */

/* Pairs per metric sum (the ps mode sums at most 64 values at once). */
#define GATHER_CHUNK 64

/* Rank k's share of n test samples: [n k / w, n (k + 1) / w). */
static size_t share_start(size_t n, int k, int w) { return n * (size_t)k / (size_t)w; }

/* Score samples [lo, hi) of the test set into acc (probabilities), counting
 * the correct ones at p = 0.5. */
static fl_status score(fl_sparse_run *r, const fl_sparse_dataset *test, size_t lo, size_t hi,
                       fl_auc_acc *acc, double *correct) {
  const size_t bs = fl_model_max_batch(r->model);
  float p[GATHER_CHUNK], y[GATHER_CHUNK];
  for (size_t off = lo; off < hi; off += bs) {
    const size_t cnt = hi - off < bs ? hi - off : bs;
    const fl_batch b = {.size = cnt,
                        .sparse = {test->labels + off, test->offsets + off, test->feats}};
    fl_model_result res;
    FL_TRY(fetch(r, &b, cnt, 1));
    FL_TRY(fl_model_eval_sparse(r->model, 0, cnt, &res));
    const float *logit = r->hooks->scores(r->self);
    for (size_t i = 0; i < cnt; i += GATHER_CHUNK) {
      const size_t m = cnt - i < GATHER_CHUNK ? cnt - i : GATHER_CHUNK;
      for (size_t j = 0; j < m; j++) {
        p[j] = 1.0f / (1.0f + expf(-logit[i + j]));
        y[j] = test->labels[off + i + j] > 0 ? 1.0f : 0.0f;
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
static fl_status eval_all(fl_sparse_run *r, const fl_sparse_dataset *test, fl_auc_acc *mine,
                          fl_auc_acc *all, fl_auc_result *res, double *correct) {
  const int w = r->sync->ops->world_size(r->sync->self), k = r->sync->ops->rank(r->sync->self);
  const size_t lo = share_start(test->n, k, w), hi = share_start(test->n, k + 1, w);
  FL_TRY(score(r, test, lo, hi, mine, correct));
  FL_TRY(r->sync->ops->reduce_metrics(r->sync->self, correct, 1));
  FL_TRY(fl_auc_gather(r->sync, mine, lo, test->n, all));
  return fl_auc_merge(&(fl_auc_part){all->score, all->label, all->n}, 1, res);
}

fl_status fl_sparse_run_eval(fl_sparse_run *r, const fl_sparse_dataset *test, int64_t epoch,
                             FILE *out, fl_trainer_report *rep) {
  fl_auc_acc mine = {0}, all = {0};
  fl_auc_result res;
  double correct = 0, const_loss = 0, oracle = 0;
  fl_status st = eval_all(r, test, &mine, &all, &res, &correct);
  if (st == FL_OK && test->prob) st = oracle_auc(test, &oracle);
  fl_auc_acc_free(&mine);
  fl_auc_acc_free(&all);
  if (st != FL_OK) return st;
  const double n = (double)test->n, base = (double)res.positives / n;
  if (base > 0 && base < 1) const_loss = -(base * log(base) + (1 - base) * log(1 - base));
  log_eval(out, epoch, &res, correct / n, const_loss, test->prob ? &oracle : NULL);
  rep->evaluated = 1;
  rep->test_loss = res.logloss;
  rep->test_acc1 = correct / n;
  return FL_OK;
}
