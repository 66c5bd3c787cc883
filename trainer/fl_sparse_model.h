/* fl_sparse_model.h - what a model with sparse tables tells the training
 * loop (never installed).
 *
 * Some models read rows of big tables that live on the pservers (the CTR
 * preset's wide weights and embeddings; later ONNX models with sparse
 * tables).  The loop (loop.c, loop_sparse.c) pulls the rows a micro-batch
 * needs before its step and pushes their gradients after it; the model
 * only says which tables it has, which ids of each a micro-batch needs,
 * and where the rows and their gradients are.  A model keeps
 * FL_SPARSE_SLOTS micro-batches prepared at once (each with its own ids,
 * rows and feed), so that the loop may pull the rows of the next one while
 * the current one computes. */
#ifndef FL_SPARSE_MODEL_H
#define FL_SPARSE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "fl_data.h"
#include "fl_model.h"
#include "fl_status.h"

#define FL_SPARSE_SLOTS 2
#define FL_SPARSE_MAX_TABLES 64

/* A table: its name on the pservers and its row width (floats per row). */
typedef struct fl_sparse_table {
  const char *name;
  uint32_t width;
} fl_sparse_table;

/* The rows of one table a prepared micro-batch needs: n unique ids in a
 * deterministic order (the same batch gives the same order), and where the
 * loop writes their rows (n * width floats). */
typedef struct fl_sparse_need {
  const uint64_t *ids;
  size_t n;
  float *rows;
} fl_sparse_need;

/* The hooks of a sparse model; self is the model's (fl_model_sparse). */
typedef struct fl_sparse_hooks {
  /* The tables (*t, valid while the model lives) and their count. */
  size_t (*tables)(void *self, const fl_sparse_table **t);
  /* Prepare micro-batch b (n samples of b->sparse) in slot (< FL_SPARSE_SLOTS):
   * need[t] for each table.  b is read during the call only.  Logs
   * FL_EINVAL (more unique ids than planned), FL_ENOMEM. */
  fl_status (*prepare)(void *self, unsigned slot, const fl_batch *b, size_t n,
                       fl_sparse_need *need);
  /* Make slot's rows and feed the model's input for the next step or eval;
   * *targets: its n float targets. */
  fl_status (*bind)(void *self, unsigned slot, const float **targets);
  /* After a train step of the bound slot: d loss / d rows of table t, in
   * the order of its ids (need[t].n * width floats). */
  const float *(*row_grad)(void *self, size_t t);
  /* After bind: the bound slot's feed of named inputs and labels, which
   * the step then takes (fl_model_train_feed), or NULL; may be NULL (a
   * model fed by its rows and targets only). */
  const fl_model_feed *(*feed)(void *self);
  /* The rows 0..*rows-1 table t starts from (rows * width floats, the
   * model's), or NULL: rows start as the pservers draw them.  May be NULL. */
  const float *(*init_rows)(void *self, size_t t, size_t *rows);
  /* After an eval of the bound slot: one score (logit) per sample. */
  const float *(*scores)(void *self);
  void (*destroy)(void *self);
} fl_sparse_hooks;

/* The hooks of m and their self, or NULL for a model without tables. */
const fl_sparse_hooks *fl_model_sparse(const fl_model *m, void **self);

/* One train step / eval of the slot prepared last bound (hooks->bind):
 * fl_model_train_stepf / fl_model_evalf with the slot's targets and no
 * dense input. */
fl_status fl_model_train_sparse(fl_model *m, unsigned slot, size_t batch, float loss_scale,
                                fl_grad_ready_fn on_ready, void *ctx, fl_model_result *res);
fl_status fl_model_eval_sparse(fl_model *m, unsigned slot, size_t batch, fl_model_result *res);

#endif
