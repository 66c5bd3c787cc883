/* fl_identity.h - the identity of a training run, recorded in every
 * checkpoint, and what a daemon does at start with a checkpoint directory
 * that already holds checkpoints.
 *
 * Why: pruning keeps the highest step numbers, so a new run writing into a
 * directory of an older (longer) run lost its own checkpoints, and a restart
 * resumed the older run's state.  A run is now identified by
 *   - the job hash: FNV-1a 64 over the resolved model and optimizer
 *     sections of the job (as fl_job_write_yaml writes them), so a changed
 *     model or optimizer is another job; and
 *   - the run id: FLOTILLA_RUN_ID (flotilla-run makes a fresh one per
 *     invocation and keeps it across --max_restart restarts), else a random
 *     one in local mode, else one derived from the job hash and the cluster
 *     (mode, trainer count, pserver and trainer endpoints) so that the
 *     processes of a job started by hand agree on it.
 * Trainers and pservers write both into each checkpoint (records
 * meta/job_hash, 0-d u64, and meta/run_id, bytes) and the pserver checks a
 * trainer's pair at registration.
 *
 * At start (fl_ckpt_dir_claim): stale temporary files of dead writers are
 * removed; then the newest valid checkpoint of the directory decides:
 *   none                           start from scratch;
 *   same job hash and run id       this run's own (a restart): resume;
 *   anything else                  refuse, naming the directory and both
 *                                  identities, unless
 *     --resume                     continue from it (a warning says whose), or
 *     --fresh                      move every checkpoint aside into
 *                                  <dir>/old-<UTC time>/ and start from
 *                                  scratch (nothing is deleted).
 * A checkpoint written before identities existed (no meta/run_id) counts
 * as another run's, with a message saying so. */
#ifndef FL_IDENTITY_H
#define FL_IDENTITY_H

#include <stdint.h>

#include "fl_ckpt.h"
#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FL_RUN_ID_MAX 64 /* bytes, NUL included */

typedef struct fl_run_identity {
  uint64_t job_hash;
  char run_id[FL_RUN_ID_MAX];
  int derived; /* 1: no FLOTILLA_RUN_ID, the id was derived or drawn here */
} fl_run_identity;

/* The job hash of job (model and optimizer sections).  FL_ENOMEM/FL_EIO
 * when the sections cannot be written out (logged). */
fl_status fl_job_hash(const fl_job *job, uint64_t *out);

/* This process's identity: FLOTILLA_RUN_ID when set (1..63 printable
 * characters without spaces, else FL_EINVAL naming the variable), else a
 * random id in local mode, else one derived from the job hash and cl. */
fl_status fl_run_identity_resolve(const fl_job *job, const fl_cluster *cl, fl_run_identity *out);

/* "job 0123456789abcdef, run R" into out (for messages). */
const char *fl_run_identity_str(const fl_run_identity *id, char *out, size_t cap);

/* Record id in a checkpoint being written (meta/job_hash, meta/run_id). */
fl_status fl_run_identity_put(fl_ckpt_writer *w, const fl_run_identity *id);

/* The identity recorded in c: FL_ENOTFOUND (not logged) for a checkpoint
 * written before identities were recorded, FL_ECORRUPT (logged, naming
 * `name`) for malformed records. */
fl_status fl_run_identity_get(const fl_ckpt *c, const char *name, fl_run_identity *out);

/* 1 when a and b are the same run (same job hash and run id). */
int fl_run_identity_same(const fl_run_identity *a, const fl_run_identity *b);

typedef enum fl_ckpt_start {
  FL_CKPT_START_AUTO = 0, /* resume this run's own checkpoints, refuse another run's */
  FL_CKPT_START_RESUME,   /* --resume: continue from whatever is newest */
  FL_CKPT_START_FRESH     /* --fresh: move existing checkpoints aside */
} fl_ckpt_start;

/* Decide what to do with checkpoint directory dir at start (see above).
 * With move_aside 0, --fresh only starts from scratch (for ranks that do
 * not own the directory).  On FL_OK, *ck is the checkpoint to resume from
 * (caller frees with fl_ckpt_free) and *step its step, or *ck is NULL:
 * start from scratch.  FL_ESTATE (logged) when it refuses; FL_ECORRUPT /
 * FL_EIO (logged) when the directory holds checkpoints and none can be
 * read (refused too, unless --fresh). */
fl_status fl_ckpt_dir_claim(const char *dir, const fl_run_identity *me, fl_ckpt_start mode,
                            int move_aside, fl_ckpt **ck, int64_t *step);

#ifdef __cplusplus
}
#endif
#endif
