/* loop_sparse.c - the training loop's side of models with sparse tables
 * (contract in loop_internal.h, the model's side in fl_sparse_model.h).
 *
 * The tables' rows live on the pservers.  Before a micro-batch's step the
 * model says which ids of each table it needs and the rows are pulled into
 * its buffers; after the step their gradients are pushed, numbered by a
 * per-process push sequence (the pservers apply them with
 * pserver.sparse.optimizer).  The dense parameters travel through the
 * ps-mode fl_sync like any model's.  The metric is AUC (ties counted half)
 * over the whole test set, which each trainer evaluates on its own, beside
 * the AUC of a constant predictor (0.5) and, for synthetic data, of the
 * true click probability. */
#include <config.h>

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
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
  int64_t push_seq;
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

fl_status fl_sparse_run_pull(fl_sparse_run *r, const fl_batch *b, size_t n) {
  fl_ps_client *c = fl_sync_ps_client(r->sync);
  FL_TRY(r->hooks->prepare(r->self, 0, b, n, r->need));
  for (size_t t = 0; t < r->nt; t++)
    FL_TRY(fl_ps_client_pull_sparse(c, r->tables[t].name, r->tables[t].width, r->need[t].ids,
                                    r->need[t].n, r->need[t].rows));
  return FL_OK;
}

fl_status fl_sparse_run_push(fl_sparse_run *r) {
  fl_ps_client *c = fl_sync_ps_client(r->sync);
  for (size_t t = 0; t < r->nt; t++)
    FL_TRY(fl_ps_client_push_sparse(c, r->tables[t].name, r->tables[t].width, r->push_seq,
                                    r->need[t].ids, r->need[t].n,
                                    r->hooks->row_grad(r->self, t)));
  r->push_seq++;
  return FL_OK;
}

/* ------------------------------------------------------------ evaluation */

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

/* The test set's scores into s[] (scores and labels), and the model's
 * loss and accuracy sums. */
static fl_status score(fl_sparse_run *r, const fl_sparse_dataset *test, scored *s,
                       double *loss, double *correct) {
  const size_t bs = fl_model_max_batch(r->model);
  for (size_t off = 0; off < test->n; off += bs) {
    const size_t cnt = test->n - off < bs ? test->n - off : bs;
    const fl_batch b = {.size = cnt,
                        .sparse = {test->labels + off, test->offsets + off, test->feats}};
    fl_model_result res;
    FL_TRY(fl_sparse_run_pull(r, &b, cnt));
    FL_TRY(fl_model_eval_sparse(r->model, 0, cnt, &res));
    const float *logit = r->hooks->scores(r->self);
    for (size_t i = 0; i < cnt; i++) s[off + i] = (scored){logit[i], test->labels[off + i] > 0};
    *loss += res.loss_sum;
    *correct += (double)res.correct1;
  }
  return FL_OK;
}

static void log_eval(FILE *out, int64_t epoch, double a, double loss, double acc,
                     double const_loss, const double *oracle) {
  fprintf(out,
          "[Epoch %" PRId64 "] test auc: %.5f, logloss: %.5f, acc1: %.5f (constant predictor: "
          "auc 0.50000, logloss %.5f",
          epoch, a, loss, acc, const_loss);
  if (oracle) fprintf(out, "; true probability: auc %.5f", *oracle);
  fprintf(out, ")\n");
  fflush(out);
}

fl_status fl_sparse_run_eval(fl_sparse_run *r, const fl_sparse_dataset *test, int64_t epoch,
                             FILE *out, fl_trainer_report *rep) {
  size_t n = test->n;
  scored *s = malloc(n * sizeof *s), *o = test->prob ? malloc(n * sizeof *o) : NULL;
  double loss = 0, pos = 0, correct = 0, base, const_loss = 0, oracle = 0;
  fl_status st = !s || (test->prob && !o)
                     ? FL_ERR(FL_ENOMEM, "eval: out of memory for %zu samples", n)
                     : score(r, test, s, &loss, &correct);
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
  if (o) oracle = auc(o, n);
  log_eval(out, epoch, auc(s, n), loss / (double)n, correct / (double)n, const_loss,
           o ? &oracle : NULL);
  rep->evaluated = 1;
  rep->test_loss = loss / (double)n;
  rep->test_acc1 = correct / (double)n;
  free(s);
  free(o);
  return FL_OK;
}
