/* loop_internal.h - what the training loop's files share (never
 * installed): loop.c runs every model; loop_sparse.c adds, for a model
 * with sparse tables (fl_sparse_model.h), its data, the pulls of rows
 * before each step and the pushes of their gradients after it, and its
 * evaluation; loop_valid.c the validation rules (metrics and their
 * direction, keep-best and early stopping) and the agreement of the
 * ranks' batch-norm statistics. */
#ifndef FL_LOOP_INTERNAL_H
#define FL_LOOP_INTERNAL_H

#include <stdio.h>

#include "fl_data.h"
#include "fl_metrics_auc.h"
#include "fl_model.h"
#include "fl_sync.h"
#include "fl_trainer.h"

/* The job's sparse training set, and its test set when train.eval (the
 * caller owns both: fl_sparse_dataset_free, also on error). */
fl_status fl_loop_load_sparse(const fl_job *job, fl_sparse_dataset *train,
                              fl_sparse_dataset *test);

typedef struct fl_sparse_run fl_sparse_run;

/* The pulls and pushes of model m's sparse tables through sync, which
 * must be the ps mode: registers the tables (call before agree_steps).
 * The training micro-batches come from next(next_ctx, b), in order (the
 * loop's loader or stream; fl_sparse_run_next takes them, one ahead when
 * pipelining).  k: gradient-merge k_steps (only 1).  The caller owns *out
 * (fl_sparse_run_free, which first waits for the calls in flight); m,
 * sync and next_ctx must outlive it.  FL_ENOTSUP (logged) outside ps mode
 * or with k > 1. */
typedef fl_status (*fl_sparse_next_fn)(void *ctx, fl_batch *b);
fl_status fl_sparse_run_create(const fl_job *job, fl_model *m, fl_sync *sync,
                               fl_sparse_next_fn next, void *next_ctx, int k,
                               fl_sparse_run **out);
void fl_sparse_run_free(fl_sparse_run *r);

/* Where the run's steps stop (run_epochs): no micro-batch is pulled ahead
 * past the epoch's steps_per_epoch or past max_steps (> 0). */
void fl_sparse_run_limit(fl_sparse_run *r, int64_t steps_per_epoch, int64_t max_steps);

/* Elastic chunk mode (run_epochs: 0 before the first claim, then at each
 * claim, the loader restarted at the chunk's first batch): no micro-batch
 * is pulled ahead past the chunk's micro_batches, counted from there; the
 * trainers' steps differ, so from the first call on each trainer evaluates
 * the whole test set alone and exports without waiting for the others. */
void fl_sparse_run_chunk(fl_sparse_run *r, int64_t micro_batches);

/* In place of fl_loader_next for the micro-batch of step `step`: *b (its
 * arrays may be gone; index and size stay) with its rows pulled into the
 * model's slot fl_sparse_run_slot, which the next fl_model_train_sparse
 * reads; with pserver.sparse.pipeline the next micro-batch may be taken
 * from the loader and its pulls started (async, geo). */
fl_status fl_sparse_run_next(fl_sparse_run *r, int64_t step, fl_batch *b);
unsigned fl_sparse_run_slot(const fl_sparse_run *r);
/* After the train step of that micro-batch: push its rows' gradients as
 * step `step` (the loop's global optimizer step, which a resumed or
 * rejoined trainer continues).  Pipelined, the push stays in flight (its
 * errors come out at the next push or fl_sparse_run_drain); sync waits for
 * its acknowledgement and starts the next micro-batch's pulls. */
fl_status fl_sparse_run_push(fl_sparse_run *r, int64_t step);
/* At a step's end: its share of time blocked waiting for rows (also set
 * in /metrics and on the timeline). */
double fl_sparse_run_step_end(fl_sparse_run *r);
/* Wait for every call in flight; their first error. */
fl_status fl_sparse_run_drain(fl_sparse_run *r);
/* At an epoch's end: drained, and `[Epoch e] pull_wait: S of the step
 * time (pipelined|sequential)` logged to out. */
fl_status fl_sparse_run_epoch_end(fl_sparse_run *r, int64_t epoch, FILE *out);

/* The test set through the model, rows read read-only (no table
 * changes): the sparse one (stest, when it has samples) or the named
 * inputs of dtest with one float target a sample (a model of one logit,
 * fl_sparse_run_auc).  Each rank scores its contiguous share in batches of
 * the model's max_batch, the (probability, label) pairs of all ranks are
 * gathered through the sync's reduce_metrics, and every rank logs the
 * exact metrics of the whole set: `[Epoch e] test auc: A, logloss: L,
 * acc1: C (constant predictor: ...)`; fills rep's test fields (test_loss
 * the log loss, test_acc1 the accuracy at p = 0.5).  Every rank calls it. */
fl_status fl_sparse_run_eval(fl_sparse_run *r, const fl_sparse_dataset *stest,
                             const fl_dataset *dtest, int64_t epoch, FILE *out,
                             fl_trainer_report *rep);

/* Whether the model's evaluation is fl_sparse_run_eval's AUC and log loss
 * (a BCE-with-logits model of one output); otherwise the loop evaluates
 * by its loss, each batch through fl_sparse_run_eval_batch. */
int fl_sparse_run_auc(const fl_sparse_run *r);

/* One evaluation batch b of n samples (named inputs): its rows read
 * read-only, then the model's eval into *res. */
fl_status fl_sparse_run_eval_batch(fl_sparse_run *r, const fl_batch *b, size_t n,
                                   fl_model_result *res);

/* train.export_onnx of a model with sparse tables: after every rank's
 * last push (a barrier through the sync's metric sums, so every rank
 * calls it), rank 0 writes each table's rows as <prefix>.<table>.ids.npy
 * (int64 [n], ascending) and <prefix>.<table>.rows.npy (float32
 * [n, width]) from the pservers (fl_ps_client_dump_sparse). */
fl_status fl_sparse_run_export(fl_sparse_run *r, const char *prefix);

/* ------------------------------------------------------------ validation */

/* Every validation metric of one evaluation over all ranks, indexed by
 * fl_val_metric (NaN where the task has none: acc1 of a regression, auc
 * of a class-label model).  all: the reduced sums; auc: the gathered
 * pairs' metrics of a binary (bce_with_logits) model, else NULL. */
void fl_val_values(const fl_model_result *all, const fl_auc_result *auc,
                   double out[FL_VAL_COUNT]);

/* The metrics v that are not NaN as gauges flotilla_eval{set, metric}
 * (metric without the "val_" prefix: loss, acc1, auc, ...) on the default
 * registry (/metrics); set is "val" or "test".  Never fails (a registry
 * out of memory shows nothing). */
void fl_val_publish(const char *set, const double v[FL_VAL_COUNT]);

/* 1 when larger values of m are better (accuracies, auc, r2), 0 for losses. */
int fl_val_maximize(fl_val_metric m);

/* Keep-best and early stopping on one metric: observe each validation's
 * value in order.  Plain data, zero-initialise then fl_val_tracker_init;
 * nothing to free. */
typedef struct fl_val_tracker {
  fl_val_metric metric;
  int maximize;
  double min_delta;
  int64_t patience;    /* 0: never stops */
  double best;         /* NaN before the first finite value */
  int64_t best_step;   /* the loop's step at the best value */
  int64_t bad;         /* validations since the last improvement */
} fl_val_tracker;

void fl_val_tracker_init(fl_val_tracker *t, fl_val_metric m, double min_delta, int64_t patience);
/* The value v of a validation at step: returns 1 when it improves on the
 * best by more than min_delta (it is then the best), else 0 and counts a
 * validation without improvement (a NaN value never improves). */
int fl_val_tracker_observe(fl_val_tracker *t, double v, int64_t step);
/* 1 when patience validations in a row brought no improvement. */
int fl_val_tracker_stop(const fl_val_tracker *t);

/* The held-out count of data.validation_split f of n samples: the last
 * floor(n f).  FL_EINVAL (logged, naming source) when that leaves no
 * sample on either side. */
fl_status fl_val_split_count(size_t n, double f, const char *source, size_t *held);

/* Make every rank's buffers (batch-norm running means and variances: the
 * parameters without a gradient) their mean over the ranks, through the
 * mode's metric sums, so every rank evaluates and exports one model.
 * Every rank calls it at the same point.  No-op with one rank. */
fl_status fl_val_agree_buffers(const fl_sync *sync, fl_model *m);

/* A copy of every parameter and buffer of a model (the best validation's),
 * owned by the caller: fl_val_snapshot_free. */
typedef struct fl_val_snapshot {
  float *values; /* all parameters, concatenated in model order */
  size_t n;
  int64_t step;  /* the loop's step it was taken at, -1 = none */
} fl_val_snapshot;

fl_status fl_val_snapshot_take(fl_val_snapshot *s, fl_model *m, int64_t step);
/* Put the snapshot's values back into m (the same model). */
void fl_val_snapshot_restore(const fl_val_snapshot *s, fl_model *m);
void fl_val_snapshot_free(fl_val_snapshot *s);

#endif
