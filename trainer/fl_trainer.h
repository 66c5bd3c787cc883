/* fl_trainer.h - the training loop of flotilla-trainer, the same in every
 * mode (local, collective, ps); what differs between modes lives behind an
 * fl_sync (fl_sync.h).
 *
 * fl_trainer_run loads the data of the job, builds the model, optimizer,
 * learning-rate schedule and AMP loss scaler, optionally resumes from the
 * newest checkpoint, and trains:
 *   - an epoch is this rank's shard of the shuffled training set (fl_data.h,
 *     remainder policy DROP: every rank the same number of full batches);
 *   - an optimizer step takes k = gradient-merge k_steps micro-batches of
 *     train.batch_size; steps per epoch = floor(batches / k), agreed over the
 *     ranks with sync->agree_steps (left-over micro-batches of an epoch are
 *     not used);
 *   - gradients are merged into one accumulator per parameter (k > 1); on the
 *     k-th micro-batch each parameter's merged gradient is handed to
 *     sync->grad_ready as the model reports it final;
 *   - when the mode applies the update locally: AMP unscale + finite check
 *     and the dynamic loss scaler (an overflow step skips the update), then
 *     the optimizer with the scheduled learning rate.  The schedule is
 *     indexed by the optimizer step (skipped steps included); Adam-family
 *     bias correction counts the updates actually applied;
 *   - the learning-rate schedule spans epochs * steps_per_epoch steps, or
 *     train.max_steps when smaller; the --max-steps override of
 *     fl_trainer_options only stops the run early and does not change the
 *     schedule, so a run cut short and resumed matches an uninterrupted one;
 *   - logs `[Epoch e, batch b] loss: ..., acc1: ..., acc5: ...` (this rank's
 *     micro-batch b, every train.log_interval micro-batches), after each
 *     epoch's training `[Epoch e] train: S steps, N samples, T s, R
 *     samples/s, cpu C s` (this rank; C = CPU time of the whole process),
 *     and after each epoch `[Epoch e] test loss: ..., acc1: ..., acc5: ...`
 *     over the whole test set (each rank evaluates a contiguous slice; sums
 *     are reduced);
 *   - checkpoints (fl_ckpt.h) every train.checkpoint_interval steps, at each
 *     epoch end (after the eval) and when stopped by max_steps; only rank 0
 *     writes.  A checkpoint holds every parameter and buffer, optimizer
 *     state, gradient accumulators, loss scaler, the step / epoch / batch
 *     position, the shuffle seed and the run's identity; resuming from it
 *     gives parameters bitwise equal to an uninterrupted run's.  At start a
 *     directory holding this run's checkpoints is resumed from, one holding
 *     another run's is refused unless resume or fresh says what to do
 *     (fl_ckpt_dir_claim);
 *   - with a validation set (data.validation_split: the last share of the
 *     training samples, held out before sharding; or validation files)
 *     `[Epoch e] val loss: ... (step s)` every train.validate_every steps
 *     or after each epoch, over all ranks; reduce-on-plateau then follows
 *     it; train.keep_best keeps the best validation's model on every rank
 *     (rank 0 also writes FL_TRAINER_BEST_FILE) and a run that ends
 *     normally tests and exports it; train.early_stopping ends the run
 *     (complete, report.early_stopped) after `patience` validations
 *     without an improvement by more than min_delta;
 *   - binary models (bce_with_logits, on the host) are evaluated with the
 *     exact AUC and log loss over all ranks' predictions in place of acc1;
 *   - before every evaluation and the export the ranks' buffers (batch-norm
 *     running statistics) become their mean over the ranks, so every rank
 *     evaluates one model and the export holds the one last tested;
 *   - in ps mode a trainer that rejoins a running job (a restart,
 *     fl_sync_ps_join_step) goes on from the servers' current step and
 *     parameters, with or without a checkpoint of its own.
 * Image data is normalised with the mean and std of the training pixels.
 * With train.device gpu the model computes on CUDA device opts->device
 * (fl_model.h; with strategy.amp its GEMMs take amp_configs.dtype unless
 * custom_black_list names the op); everything above stays on the host. */
#ifndef FL_TRAINER_H
#define FL_TRAINER_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_model.h"
#include "fl_identity.h"
#include "fl_status.h"
#include "fl_sync.h"

/* The meta/format record of the trainer's checkpoints. */
#define FL_TRAINER_CKPT_FORMAT "flotilla-trainer-1"
/* train.keep_best: the best validation's checkpoint, beside the newest
 * ones in the checkpoint directory (same records, plus best/metric and
 * best/value); --resume never takes it. */
#define FL_TRAINER_BEST_FILE "best.flc"

/* A mode's constructor, one entry per mode in flotilla-trainer's table.  On
 * success *out is a live instance; the caller ends it with ops->finish
 * after a successful run (finish must NOT free) and always with
 * ops->destroy (which frees).  job and cluster outlive the instance.
 * fl_trainer_run itself calls ops->finish at the end of a successful run,
 * while its model still exists (geo pushes its last delta from the
 * parameters), so finish must be idempotent: the caller's later call is a
 * no-op. */
typedef fl_status (*fl_sync_create_fn)(const fl_job *job, const fl_cluster *cluster,
                                       fl_sync *out);

/* The local mode (world size 1): nothing to exchange; the optimizer runs
 * here.  Never fails except for FL_ENOMEM. */
fl_status fl_sync_local_create(const fl_job *job, const fl_cluster *cluster, fl_sync *out);

/* One optimizer step's figures, for fl_trainer_options.on_step. */
typedef struct fl_step_report {
  int64_t epoch;
  int64_t step;      /* global optimizer step number, 1 = the first */
  double loss;       /* mean loss over the step's micro-batches (this rank) */
  double acc1, acc5; /* top-1 / top-5 accuracy over them */
  float lr;          /* learning rate used */
  float loss_scale;  /* AMP scale used for this step (1 without AMP) */
  int skipped;       /* 1: AMP overflow, the update was skipped */
  double pull_wait;  /* sparse tables: time blocked waiting for rows / step time */
} fl_step_report;

typedef void (*fl_step_fn)(void *ctx, const fl_step_report *r);

typedef struct fl_trainer_options {
  const fl_job *job;          /* resolved and validated; read only */
  int resume;                 /* continue from the newest checkpoint, if any, even
                                 another run's (fl_identity.h) */
  int fresh;                  /* move another run's checkpoints aside, start anew */
  const fl_run_identity *identity; /* this run's, recorded in every checkpoint;
                                 NULL: none recorded, none checked */
  int64_t max_steps;          /* > 0: stop after this global step (see above) */
  const char *checkpoint_dir; /* NULL or "": train.checkpoint_dir */
  FILE *log;                  /* log and eval lines; NULL = stdout */
  fl_step_fn on_step;         /* called after every optimizer step (may be NULL) */
  void *on_step_ctx;
  int device;                 /* train.device gpu: the CUDA ordinal to use (0) */
  /* Set (non-zero) by a SIGTERM/SIGINT handler; NULL: never.  The loop
   * finishes the step it is in, agrees with the other ranks on a step to
   * stop at (collective: they compare flags every FL_TRAINER_STOP_EVERY
   * steps; local and ps trainers stop on their own), checkpoints there and
   * returns FL_OK with report.stopped set, without sync->ops->finish (the
   * job is not complete; --resume continues it). */
  volatile sig_atomic_t *stop;
  /* Elastic worlds kept in process (collective, flotilla-run's agent:
   * FLOTILLA_ELASTIC_WORLD).  world_file: where the agent writes the next
   * round "<r> <nodes> <node rank> <master addr> <master port>"; NULL: none.
   * A newer round than world_round stops the ranks at an agreed step, and a
   * collective that fails (a dead peer) makes this rank wait for one, up
   * to world_wait_s, at its last completed step: the run then returns
   * FL_OK with report.world_changed and its state in report.state.
   * state/state_len: such a state (the checkpoint format) to start from
   * instead of the checkpoint directory, stopped at world_t0 (monotonic
   * seconds, for the log line of the change). */
  const char *world_file;
  int64_t world_round;
  double world_wait_s;
  const void *state;
  size_t state_len;
  double world_t0;
} fl_trainer_options;

#define FL_TRAINER_STOP_EVERY 4

/* What a run did (this rank). */
typedef struct fl_trainer_report {
  int64_t steps;           /* global optimizer steps done, resumed ones included */
  int64_t epochs_done;     /* complete epochs */
  int evaluated;           /* 1 when the test_* figures are set */
  double test_loss, test_acc1, test_acc5; /* last evaluation */
  double train_seconds;    /* wall time of the training steps of this run */
  int64_t train_samples;   /* samples trained on in this run */
  size_t activation_bytes; /* fl_model_activation_bytes */
  int64_t steps_per_epoch;
  int stopped;             /* 1: ended early by opts->stop (checkpointed) */
  int validated;           /* 1 when val[] is set */
  double val[FL_VAL_COUNT]; /* last validation, by fl_val_metric (NaN: not given) */
  int early_stopped;       /* 1: train.early_stopping ended the run (complete) */
  int64_t best_step;       /* train.keep_best: the step of the best validation, -1 */
  int world_changed;       /* 1: stopped for a newer round of world_file (not complete) */
  void *state;             /* then its state (caller frees), state_len bytes */
  size_t state_len;
  double world_t0;         /* when it stopped training (monotonic seconds) */
} fl_trainer_report;

/* Train the job with the mode in sync (which stays the caller's); a
 * successful run ends with sync->ops->finish.  Errors are logged where they
 * start (data files, checkpoint, model, a peer) and returned.  rep may be
 * NULL. */
fl_status fl_trainer_run(const fl_trainer_options *opts, fl_sync *sync, fl_trainer_report *rep);

/* The fl_model_spec fl_trainer_run builds for job: the model section,
 * strategy.recompute and its checkpoints, the amp_configs op lists (with
 * strategy.amp), and with train.device gpu the CUDA ordinal device and the
 * AMP GEMM precision.  names is caller storage the spec's name lists point
 * into (entries point into job), so names and job must outlive *out. */
#define FL_TRAINER_SPEC_NAMES (3 * FL_JOB_MAX_LIST)
void fl_trainer_model_spec(const fl_job *job, int device, const char *names[FL_TRAINER_SPEC_NAMES],
                           fl_model_spec *out);

/* ONNX export (trainer/export.c).  Write model m, built from job, as ONNX
 * to out_path: the job's model.path with the trained initializers for
 * model.kind onnx, a fresh ModelProto for the presets (fl_onnx.h).
 * FL_ENOTSUP (logged) for a model that is not a graph (plugin, ctr);
 * errors of the export are logged there.  fl_trainer_run calls it on rank
 * 0 at the end of a successful run when train.export_onnx is set. */
fl_status fl_trainer_export_onnx(const fl_job *job, const fl_model *m, const char *out_path);

/* flotilla-trainer --export-onnx: build job's model on the CPU, load its
 * parameters and buffers from the newest checkpoint in ckdir (NULL or "":
 * train.checkpoint_dir) and export it to out_path.  FL_ENOTFOUND (logged)
 * when there is no checkpoint, FL_EINVAL when the checkpoint is not this
 * job's model; other errors as fl_trainer_export_onnx. */
fl_status fl_trainer_export_checkpoint(const fl_job *job, const char *ckdir, const char *out_path);

#endif
