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
 * k: gradient-merge k_steps (only 1).  The caller owns *out
 * (fl_sparse_run_free); m and sync must outlive it.  FL_ENOTSUP (logged)
 * outside ps mode or with k > 1. */
fl_status fl_sparse_run_create(const fl_job *job, fl_model *m, fl_sync *sync, int k,
                               fl_sparse_run **out);
void fl_sparse_run_free(fl_sparse_run *r);

/* Micro-batch b's n samples prepared in the model's slot 0 and their rows
 * pulled: the next fl_model_train_sparse / fl_model_eval_sparse of slot 0
 * reads them. */
fl_status fl_sparse_run_pull(fl_sparse_run *r, const fl_batch *b, size_t n);
/* After the train step of the pulled micro-batch: push its rows'
 * gradients as step `step` (the loop's global optimizer step, which a
 * resumed or rejoined trainer continues). */
fl_status fl_sparse_run_push(fl_sparse_run *r, int64_t step);

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

#endif
