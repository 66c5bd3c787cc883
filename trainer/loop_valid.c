/* loop_valid.c - the validation rules of the training loop
 * (loop_internal.h): which metrics a validation yields and which way each
 * is better (one row per metric), the keep-best / early-stopping tracker,
 * the held-out share of data.validation_split, the copy of the best
 * model, and the agreement of the ranks' batch-norm statistics before an
 * evaluation or the export (so every rank evaluates one model and the
 * export holds it), and the figures on /metrics.  loop.c runs the
 * evaluations and calls these. */
#include <config.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_metrics.h"
#include "loop_internal.h"

/* What a validation metric reads from one evaluation. */
typedef struct val_src {
  const fl_model_result *r;
  const fl_auc_result *auc;
} val_src;

static double cnt(const val_src *s) { return s->r->count ? (double)s->r->count : 1.0; }
static double get_none(const val_src *s) { (void)s; return NAN; }
static double get_loss(const val_src *s) { return s->r->loss_sum / cnt(s); }
static double get_acc1(const val_src *s) {
  return s->r->values || s->auc ? NAN : (double)s->r->correct1 / cnt(s);
}
static double get_acc5(const val_src *s) {
  return s->r->values || s->auc ? NAN : (double)s->r->correct5 / cnt(s);
}
static double get_auc(const val_src *s) { return s->auc ? s->auc->auc : NAN; }
static double get_logloss(const val_src *s) { return s->auc ? s->auc->logloss : NAN; }
static double get_mse(const val_src *s) { return s->r->values ? get_loss(s) : NAN; }
static double get_mae(const val_src *s) {
  return s->r->values ? s->r->abs_err / (double)s->r->values : NAN;
}
static double get_r2(const val_src *s) {
  if (!s->r->values) return NAN;
  const double n = (double)s->r->values, mean = s->r->t_sum / n, var = s->r->t_sq / n - mean * mean;
  return var > 0 ? 1.0 - get_loss(s) / var : NAN;
}

typedef struct val_row {
  int maximize;
  double (*get)(const val_src *s);
} val_row;

/* Indexed by fl_val_metric; the names are fl_val_metric_names. */
static const val_row rows[] = {
    [FL_VAL_NONE] = {0, get_none},   [FL_VAL_LOSS] = {0, get_loss},
    [FL_VAL_ACC1] = {1, get_acc1},   [FL_VAL_ACC5] = {1, get_acc5},
    [FL_VAL_AUC] = {1, get_auc},     [FL_VAL_LOGLOSS] = {0, get_logloss},
    [FL_VAL_MSE] = {0, get_mse},     [FL_VAL_MAE] = {0, get_mae},
    [FL_VAL_R2] = {1, get_r2},
};
_Static_assert(sizeof rows / sizeof rows[0] == FL_VAL_COUNT, "one row per validation metric");

void fl_val_values(const fl_model_result *all, const fl_auc_result *auc,
                   double out[FL_VAL_COUNT]) {
  const val_src s = {all, auc};
  for (int m = 0; m < FL_VAL_COUNT; m++) out[m] = rows[m].get(&s);
}

int fl_val_maximize(fl_val_metric m) {
  return (unsigned)m < FL_VAL_COUNT ? rows[m].maximize : 0;
}

void fl_val_tracker_init(fl_val_tracker *t, fl_val_metric m, double min_delta, int64_t patience) {
  *t = (fl_val_tracker){.metric = m, .maximize = fl_val_maximize(m), .min_delta = min_delta,
                        .patience = patience, .best = NAN, .best_step = -1};
}

int fl_val_tracker_observe(fl_val_tracker *t, double v, int64_t step) {
  const double gain = t->maximize ? v - t->best : t->best - v;
  if (isfinite(v) && (isnan(t->best) || gain > t->min_delta)) {
    t->best = v;
    t->best_step = step;
    t->bad = 0;
    return 1;
  }
  t->bad++;
  return 0;
}

int fl_val_tracker_stop(const fl_val_tracker *t) {
  return t->metric != FL_VAL_NONE && t->patience > 0 && t->bad >= t->patience;
}

fl_status fl_val_split_count(size_t n, double f, const char *source, size_t *held) {
  const size_t h = (size_t)floor((double)n * f);
  if (h == 0 || h >= n)
    return FL_ERR(FL_EINVAL, "%s: data.validation_split %g of %zu training samples holds out %zu: "
                  "none would be %s; raise or lower it", source, f, n, h,
                  h == 0 ? "validated" : "trained on");
  *held = h;
  return FL_OK;
}

/* Values per metric sum (the ps mode sums at most 64 at once). */
#define AGREE_CHUNK 64

/* Buffer p's values: the mean of every rank's, chunk by chunk. */
static fl_status agree_one(const fl_sync *sync, fl_param *p, double world) {
  double v[AGREE_CHUNK];
  for (size_t c = 0; c < p->n; c += AGREE_CHUNK) {
    const size_t m = p->n - c < AGREE_CHUNK ? p->n - c : AGREE_CHUNK;
    for (size_t j = 0; j < m; j++) v[j] = p->value[c + j];
    FL_TRY(sync->ops->reduce_metrics(sync->self, v, m));
    for (size_t j = 0; j < m; j++) p->value[c + j] = (float)(v[j] / world);
  }
  return FL_OK;
}

fl_status fl_val_agree_buffers(const fl_sync *sync, fl_model *m) {
  const int world = sync->ops->world_size(sync->self);
  if (world <= 1) return FL_OK;
  for (size_t i = 0; i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    if (!p->grad) FL_TRY(agree_one(sync, p, (double)world));
  }
  return FL_OK;
}

fl_status fl_val_snapshot_take(fl_val_snapshot *s, fl_model *m, int64_t step) {
  size_t n = 0;
  for (size_t i = 0; i < fl_model_num_params(m); i++) n += fl_model_param(m, i)->n;
  if (!s->values) {
    s->values = malloc((n ? n : 1) * sizeof *s->values);
    if (!s->values) return FL_ERR(FL_ENOMEM, "keep_best: cannot copy %zu parameter values", n);
    s->n = n;
  }
  for (size_t i = 0, o = 0; i < fl_model_num_params(m); i++) {
    const fl_param *p = fl_model_param(m, i);
    memcpy(s->values + o, p->value, p->n * sizeof(float));
    o += p->n;
  }
  s->step = step;
  return FL_OK;
}

void fl_val_snapshot_restore(const fl_val_snapshot *s, fl_model *m) {
  for (size_t i = 0, o = 0; s->values && i < fl_model_num_params(m); i++) {
    fl_param *p = fl_model_param(m, i);
    memcpy(p->value, s->values + o, p->n * sizeof(float));
    o += p->n;
  }
}

void fl_val_snapshot_free(fl_val_snapshot *s) {
  free(s->values);
  *s = (fl_val_snapshot){.step = -1};
}

void fl_val_publish(const char *set, const double v[FL_VAL_COUNT]) {
  fl_metric *g = NULL;
  if (fl_metrics_gauge(fl_metrics_default(), "flotilla_eval",
                       "Last evaluation's metrics over all ranks, by set (val or test)",
                       "set,metric", &g) != FL_OK)
    return;
  for (int m = FL_VAL_NONE + 1; m < FL_VAL_COUNT; m++) {
    fl_series *s = NULL;
    const char *name = fl_val_metric_names[m] + 4; /* without "val_" */
    if (!isnan(v[m]) && fl_metric_series(g, (const char *const[]){set, name}, &s) == FL_OK)
      fl_series_set(s, v[m]);
  }
}
