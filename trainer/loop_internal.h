/* loop_internal.h - what the training loop's files share (never
 * installed): loop.c runs every model; loop_sparse.c adds, for a model
 * with sparse tables (fl_sparse_model.h), its data, the pulls of rows
 * before each step and the pushes of their gradients after it, and its
 * evaluation. */
#ifndef FL_LOOP_INTERNAL_H
#define FL_LOOP_INTERNAL_H

#include <stdio.h>

#include "fl_data.h"
#include "fl_model.h"
#include "fl_sync.h"
#include "fl_trainer.h"

/* Whether the job's data is sparse (data.format libsvm, or synthetic kind
 * ctr): read by fl_loop_load_sparse into a sparse dataset. */
int fl_loop_sparse_data(const fl_job *job);

/* The job's sparse training set, and its test set when train.eval (the
 * caller owns both: fl_sparse_dataset_free, also on error). */
fl_status fl_loop_load_sparse(const fl_job *job, fl_sparse_dataset *train,
                              fl_sparse_dataset *test);

typedef struct fl_sparse_run fl_sparse_run;

/* The pulls and pushes of model m's sparse tables through sync, which
 * must be the ps mode: registers the tables (call before agree_steps).
 * The training micro-batches come from l (fl_sparse_run_next).  k:
 * gradient-merge k_steps (only 1).  The caller owns *out
 * (fl_sparse_run_free, which first waits for the calls in flight); m,
 * sync and l must outlive it.  FL_ENOTSUP (logged) outside ps mode or with
 * k > 1. */
fl_status fl_sparse_run_create(const fl_job *job, fl_model *m, fl_sync *sync, fl_loader *l,
                               int k, fl_sparse_run **out);
void fl_sparse_run_free(fl_sparse_run *r);

/* Where the run's steps stop (run_epochs): no micro-batch is pulled ahead
 * past the epoch's steps_per_epoch or past max_steps (> 0). */
void fl_sparse_run_limit(fl_sparse_run *r, int64_t steps_per_epoch, int64_t max_steps);

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
 * changes): each rank scores its contiguous share in batches of the
 * model's max_batch, the (probability, label) pairs of all ranks are
 * gathered through the sync's reduce_metrics, and every rank logs the
 * exact metrics of the whole set: `[Epoch e] test auc: A, logloss: L,
 * acc1: C (constant predictor: ...)`; fills rep's test fields (test_loss
 * the log loss, test_acc1 the accuracy at p = 0.5).  Every rank calls it. */
fl_status fl_sparse_run_eval(fl_sparse_run *r, const fl_sparse_dataset *test, int64_t epoch,
                             FILE *out, fl_trainer_report *rep);

#endif
