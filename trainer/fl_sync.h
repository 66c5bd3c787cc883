/* fl_sync.h - how one optimizer step's gradients leave this trainer.
 *
 * The training loop is the same in every mode; what differs is how the
 * merged gradient of a step becomes the next parameters.  A mode is a table
 * of function pointers (as the collective backends are):
 *   local       - world size 1: nothing to exchange, optimizer runs here;
 *   collective  - allreduce (average) the gradients over the ranks, fused in
 *                 buckets that start while backward still runs, then every
 *                 rank runs the same optimizer step locally;
 *   ps          - push gradients (or geo deltas) to the pservers, pull the
 *                 new parameters; the optimizer runs on the servers.
 *
 * Order of calls for optimizer step s (k = gradient-merge k_steps):
 *   step_begin(s)                      once, before the first micro-batch
 *   k times: forward/backward; on the k-th micro-batch the loop calls
 *            grad_ready(i) for each trainable parameter i, in the order
 *            backward finishes them, with the merged (finalized) gradient
 *            already in the model's grad buffer of i
 *   step_end(s, &apply)                after backward; on return either
 *            apply == 1: the grads are the global ones and the loop runs
 *            AMP unscale/check and the optimizer locally, or apply == 0: the
 *            parameters were already updated remotely (pulled).
 * Every function returns an fl_status; an error ends the run (logged where
 * it started, naming the rank or peer). */
#ifndef FL_SYNC_H
#define FL_SYNC_H

#include <stdint.h>

#include "fl_ckpt.h"
#include "fl_model.h"
#include "fl_status.h"

typedef struct fl_sync_ops {
  const char *name;
  /* Before training: make every rank start from the same parameters
   * (collective: broadcast from rank 0; ps: pull from the servers, or
   * initialise them on first registration). */
  fl_status (*init_params)(void *self, fl_model *m);
  /* All ranks agree on the number of optimizer steps of this epoch (the
   * minimum over ranks), so that uneven shards cannot deadlock. */
  fl_status (*agree_steps)(void *self, int64_t local_steps, int64_t *global_steps);
  fl_status (*step_begin)(void *self, fl_model *m, int64_t step);
  void (*grad_ready)(void *self, fl_model *m, size_t index);
  fl_status (*step_end)(void *self, fl_model *m, int64_t step, int *apply_locally);
  /* Sum of `n` doubles over all ranks, in place (metrics: loss, accuracy). */
  fl_status (*reduce_metrics)(void *self, double *v, size_t n);
  /* Rank of this trainer and number of trainers. */
  int (*rank)(void *self);
  int (*world_size)(void *self);
  /* The job is done (ps: send complete); then free self. */
  fl_status (*finish)(void *self);
  void (*destroy)(void *self);
  /* Optional (NULL: none): add the mode's own records to the checkpoint
   * rank 0 is writing (collective: the allreduce tuning); a failed put is
   * reported by the writer's commit. */
  void (*ckpt_save)(void *self, fl_ckpt_writer *w);
  /* Optional (NULL: none): bytes of buf from rank root to every rank (an
   * elastic resume hands the newest state over with it). */
  fl_status (*broadcast)(void *self, void *buf, size_t bytes, int root);
} fl_sync_ops;

/* A mode instance: ops plus its private state. */
typedef struct fl_sync {
  const fl_sync_ops *ops;
  void *self;
} fl_sync;

#endif
