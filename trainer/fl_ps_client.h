/* fl_ps_client.h - PServer mode on the trainer: the client of the
 * flotilla-pserver service, the ps-mode fl_sync, and the CTR model that
 * only trains in this mode.
 *
 * The client keeps one channel per pserver and one completion queue driven
 * by its own thread, so many calls are in flight at once (the pushes of
 * different blocks overlap each other and the rest of backward).  Every
 * call has a deadline (cluster.rpc_timeout_s); UNAVAILABLE and an expired
 * deadline are retried with exponential backoff (50 ms doubling to 2 s)
 * for up to retry_budget_s (a held call - a sync pull, a barrier - waits
 * longer for the other trainers, as long as the server answers something:
 * one that answers nothing for server_timeout_s is hung, and the call
 * fails naming it) - pushes carry (trainer, step) so a retried push
 * is applied once.  FAILED_PRECONDITION means the server does not know this
 * trainer (it restarted, or declared the trainer dead): the client
 * registers again, gives the server its current parameter values if the
 * server has none (a restart without a checkpoint), and repeats the failed
 * calls.  A heartbeat thread calls every server every
 * heartbeat_timeout_s / 4.
 *
 * Placement comes from fl_ps_layout.h, computed here exactly as the
 * servers compute it. */
#ifndef FL_PS_CLIENT_H
#define FL_PS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "fl_cluster.h"
#include "fl_config.h"
#include "fl_model.h"
#include "fl_ps_layout.h"
#include "fl_rpc.h"
#include "fl_status.h"
#include "fl_sync.h"
#include "fl_trainer.h"

typedef struct fl_ps_client fl_ps_client;

typedef struct fl_ps_client_opts {
  const fl_endpoint *servers; /* n_servers endpoints, copied */
  int n_servers;
  int trainer_id;
  int num_trainers;
  int mode;                   /* FLOTILLA__SYNC_MODE__* (sync 0, async 1, geo 2) */
  uint64_t dense_block_size;
  int64_t total_steps;        /* for the servers' learning-rate schedule */
  double rpc_timeout_s;       /* deadline of one call */
  double retry_budget_s;      /* how long UNAVAILABLE is retried */
  double heartbeat_interval_s; /* <= 0: no heartbeats */
  double server_timeout_s;    /* > 0: a server that answers nothing (no call, no
                                 heartbeat) for this long while calls wait on it
                                 is hung: they fail naming it (heartbeat_timeout_s) */
  const char *token;          /* copied; NULL/"" = none */
  const char *tls_ca, *tls_cert, *tls_key; /* copied; NULL/"" = insecure */
  const char *run_id;         /* copied; the run this trainer belongs to (fl_identity.h) */
  uint64_t job_hash;          /* its job hash: a pserver of another run refuses us */
  int wire_dtype;             /* FLOTILLA__DTYPE__*: gradient/delta pushes are
                                 cast to fp16 or bf16 on the wire (values,
                                 initial values and pulls stay fp32) */
} fl_ps_client_opts;

/* One dense parameter (value memory stays the caller's; the client reads it
 * to initialise servers and writes it when pulling). */
typedef struct fl_ps_dense_param {
  const char *name;
  float *value;
  size_t n;
} fl_ps_dense_param;

typedef struct fl_ps_sparse_spec {
  const char *name;
  uint32_t dim;
} fl_ps_sparse_spec;

/* Connect (lazily: channels connect on first use) and start the driver and
 * heartbeat threads.  The caller owns *out (fl_ps_client_destroy). */
fl_status fl_ps_client_create(const fl_ps_client_opts *o, fl_ps_client **out);
void fl_ps_client_destroy(fl_ps_client *c);

/* Register with every server (retrying while they come up), declaring the
 * dense parameters and sparse tables (arrays copied; values stay the
 * caller's).  A server whose blocks have no value yet gets them from
 * params (the first trainer's values win).  *step gets the step to go on
 * from: sync - the lowest the servers report (the step they all still take
 * pushes for), async/geo - the highest. */
fl_status fl_ps_client_register(fl_ps_client *c, const fl_ps_dense_param *params, size_t n,
                                const fl_ps_sparse_spec *tables, size_t n_tables,
                                int64_t *step);

/* The run's number of optimizer steps, sent with the next registration
 * (the servers' learning-rate schedule spans it). */
void fl_ps_client_set_total_steps(fl_ps_client *c, int64_t total_steps);

/* The placement of the registered dense parameters. */
const fl_ps_layout *fl_ps_client_layout(const fl_ps_client *c);

/* Queue a push of dense block `block` (kind: 0 gradient, 1 delta) for step
 * from src (the block's n floats; must stay unchanged until the next
 * fl_ps_client_wait returns).  A server's queued blocks of one step and
 * kind travel in one PushDense call, sent by the next
 * fl_ps_client_pull_dense or fl_ps_client_wait, or once 1 MiB is queued. */
fl_status fl_ps_client_push_block(fl_ps_client *c, uint32_t block, int kind, int64_t step,
                                  const float *src);
/* Queue pulls of every dense block into its parameter's value memory (a
 * server's blocks up to 1 MiB together in one call), answered once the
 * server applied every step < min_step (sync); min_step -(s+1): the values
 * as of step s (sync, see pserver/fl_ps.h). */
fl_status fl_ps_client_pull_dense(fl_ps_client *c, int64_t min_step);
/* Sync: once every push of step this client made is acknowledged (the
 * queued calls waited for, recovering as fl_ps_client_wait does, but kept
 * in the batch so that a restarted server gets them again), queue pulls of
 * every dense block asking for step + 1, each carrying the commit of step
 * to its server, and a pull of no block to a server that holds none
 * (docs/PROTOCOL.md, "Commit").  fl_ps_client_wait then waits for them.
 * FLOTILLA_TEST_EXIT_AT=step (tests only) commits that step to server 0
 * alone, waits until it applied it and ends the process. */
fl_status fl_ps_client_commit_pull(fl_ps_client *c, int64_t step);
/* 1 when the registration found this trainer's step s applied on some
 * server and all its pushes of s held by the others (it was killed among
 * its commits): the step returned is s + 1, and the caller commits s with
 * fl_ps_client_commit_pull(c, s) instead of computing it again. */
int fl_ps_client_recovered(const fl_ps_client *c);
/* Wait for every queued call (repeating them after a re-registration when
 * needed: a server that forgot this trainer, restarted from a checkpoint,
 * is registered with again and gets every call of every batch again, the
 * ones it had answered and the last sparse push too, the pushes first and
 * over before any pull).  Returns the first error. */
fl_status fl_ps_client_wait(fl_ps_client *c);

/* Rows of keys[0..n) of table (dim floats each) into out, from the servers
 * that own them, in parallel, creating missing rows.  Keys need not be
 * distinct.  Sync: answered once the servers applied the last step this
 * client pushed to the table. */
fl_status fl_ps_client_pull_sparse(fl_ps_client *c, const char *table, uint32_t dim,
                                   const uint64_t *keys, size_t n, float *out);
/* Push row gradients (n*dim floats) of distinct keys for step, to every
 * server (an empty push where a server owns none of them: a sync step
 * waits for every trainer's push). */
fl_status fl_ps_client_push_sparse(fl_ps_client *c, const char *table, uint32_t dim,
                                   int64_t step, const uint64_t *keys, size_t n,
                                   const float *grads);

/* Initial rows of a table (a model's own embedding): ids[0..n) with their
 * rows (n*width floats) go to the servers that own them, in parallel; a
 * server creates the rows that do not exist yet with these values and
 * leaves existing rows unchanged, so the call is idempotent (every trainer
 * may send the same rows; after a restart from a checkpoint nothing
 * changes).  The table's padding id is never created.  Width must be the
 * table's registered dim (FL_EINVAL, logged). */
fl_status fl_ps_client_init_sparse(fl_ps_client *c, const char *table, uint32_t width,
                                   const uint64_t *ids, size_t n, const float *rows);
/* Every row of table on all pservers (paged DumpSparse calls to each, as an
 * observer: changes nothing on the servers), ids ascending: *ids (n) and
 * *rows (n*width floats) are malloc'd, the caller frees both (NULL and 0
 * on an error). */
fl_status fl_ps_client_dump_sparse(fl_ps_client *c, const char *table, uint32_t width,
                                   uint64_t **ids, float **rows, size_t *n);
/* The same pulls and pushes, asynchronous, for a loop that pulls the next
 * micro-batch's rows while the current one computes: a start queues the
 * calls of one registered table and returns; the finish of its kind waits
 * for every call of that kind started since the last finish (repeating
 * them after a re-registration, as fl_ps_client_wait does) and returns the
 * first error.  Pulls and pushes are batches of their own, apart from each
 * other and from the blocking calls, so they stay in flight across any
 * other call of the client.  keys and grads are copied by the start; out
 * is written until the pull's finish returns.  A pull asks, as the
 * blocking one, for the step after the last push to the table that a push
 * finish saw through.  At most one start per table and kind between two
 * finishes; the thread that makes the client's other calls makes these.
 * A start only queues its calls: fl_ps_client_sparse_send (or the finish)
 * sends what the starts queued, one call per server for all the tables
 * (PullSparseBatch / PushSparseBatch). */
fl_status fl_ps_client_pull_sparse_start(fl_ps_client *c, const char *table, uint32_t dim,
                                         const uint64_t *keys, size_t n, float *out);
fl_status fl_ps_client_pull_sparse_finish(fl_ps_client *c);
/* As the pull start, for evaluation: a read-only pull that creates no row
 * and changes no server state; a key without a row reads as its seeded
 * initial value (docs/PROTOCOL.md).  An evaluation batch's tables go in one
 * call per server; the pull finish waits for them.  Not mixed with
 * training pulls between two finishes. */
fl_status fl_ps_client_read_sparse_start(fl_ps_client *c, const char *table, uint32_t dim,
                                         const uint64_t *keys, size_t n, float *out);
fl_status fl_ps_client_push_sparse_start(fl_ps_client *c, const char *table, uint32_t dim,
                                         int64_t step, const uint64_t *keys, size_t n,
                                         const float *grads);
fl_status fl_ps_client_push_sparse_finish(fl_ps_client *c);
/* Send the sparse pulls and pushes queued by the starts since the last
 * send: per kind, one call to each server with all of its tables' rows. */
fl_status fl_ps_client_sparse_send(fl_ps_client *c);

/* Barrier `name` over every live trainer, held on every server (so no
 * server's sync step waits for a trainer that waits here): sums[0..nv)
 * get the sums of values (may be NULL when nv is 0), *min (may be NULL)
 * the minimum of value_min, as server 0 computed them. */
fl_status fl_ps_client_barrier(fl_ps_client *c, const char *name, const double *values,
                               size_t nv, int64_t value_min, double *sums, int64_t *min);

/* Tell every server this trainer is done (heartbeats stop first). */
fl_status fl_ps_client_complete(fl_ps_client *c);

/* What the client did so far.  A call counts as answered when the server
 * gave it a status that is not retried (OK or an error); its request bytes
 * count then, its response bytes when OK - the same bytes the server's
 * Stats count as bytes_in / bytes_out.  pushes and pulls count the OK
 * PushDense/PushSparse and PullDense/PullSparse calls (initial values
 * included), as the server's Stats do.  retries: attempts retried after
 * UNAVAILABLE or an expired deadline; failed: calls that ended in an error
 * other than FAILED_PRECONDITION (which means "register again"), and
 * heartbeats that did not get through.  fl_ps_client_destroy logs the
 * totals ("ps client totals: ..."). */
typedef struct fl_ps_client_totals {
  uint64_t calls, pushes, pulls, bytes_sent, bytes_received, retries, failed;
} fl_ps_client_totals;
void fl_ps_client_counters(const fl_ps_client *c, fl_ps_client_totals *out);

/* ------------------------------------------------------------- the mode */

/* PS mode for flotilla-trainer's mode table (fl_trainer.h's contract). */
fl_status fl_sync_ps_create(const fl_job *job, const fl_cluster *cluster, fl_sync *out);

/* The sparse tables of a model that has some (fl_sparse_model.h), to
 * register with the pservers: call before agree_steps (the first
 * registration).  FL_EINVAL when s is not a ps-mode fl_sync, FL_ESTATE
 * after the registration. */
fl_status fl_sync_ps_set_tables(fl_sync *s, const fl_ps_sparse_spec *tables, size_t n_tables);
/* The client of a ps-mode fl_sync (NULL for another mode or before
 * init_params). */
fl_ps_client *fl_sync_ps_client(const fl_sync *s);
/* async/geo: after a registration, the step this trainer id pushes next
 * (one past the last the servers took from it, the lowest over the servers
 * that hold dense blocks); -1 when unknown. */
int64_t fl_ps_client_own_next_step(const fl_ps_client *c);

/* The step number pushes of the current step carry. */
int64_t fl_sync_ps_step(const fl_sync *s);
/* The servers' step when this process first registered: 0 when it joined
 * the job at its start, > 0 when it rejoins a running job (a restart); the
 * loop then catches up to fl_sync_ps_step.  0 for another mode. */
int64_t fl_sync_ps_join_step(const fl_sync *s);

/* The CTR model's graph (what model.kind ctr trains), for fl_ctr_graph. */
typedef struct fl_ctr_shape {
  uint32_t slots, dim;    /* S slots of D-float embeddings: the MLP's input is S*D */
  const int64_t *hidden;  /* n_hidden ReLU layer widths (at most FL_JOB_MAX_HIDDEN) */
  size_t n_hidden;
  size_t rows;            /* the rows inputs' capacity: unique keys of a batch at most */
  size_t max_batch;
  uint64_t seed;          /* the MLP's initial weights derive from it (train.seed) */
} fl_ctr_shape;

/* Names in the CTR graph: the rows inputs (the wide table's rows [rows, 1],
 * the embeddings [rows, D]) and the EmbeddingBagSum nodes that read the
 * batch's sparse feed (the wide sum, and the per-slot pooling). */
#define FL_CTR_WIDE_TABLE "ctr.wide"
#define FL_CTR_EMB_TABLE "ctr.emb"
#define FL_CTR_WIDE_ROWS "ctr.wide_rows"
#define FL_CTR_EMB_ROWS "ctr.emb_rows"
#define FL_CTR_WIDE_NODE "ctr.wide"
#define FL_CTR_POOL_NODE "ctr.pool"

/* Compile the CTR graph into *handle (the caller owns it: destroy with
 * fl_graph_model_ops.destroy): logit = EmbeddingBagSum(wide rows, all) +
 * ctr.bias + MLP(EmbeddingBagSum(embedding rows, S slots)), loss BCE with
 * logits; no data input (fl_graph_model_train_stepf / evalf take x NULL),
 * the rows and the feeds handed per step (fl_graph_model_set_rows,
 * fl_graph_model_set_sparse_feed).  Parameters in order: ctr.bias, then
 * ctr.fc<l>.weight and .bias per layer.  FL_EINVAL (logged) for a shape
 * with a zero size. */
fl_status fl_ctr_graph(const fl_ctr_shape *shape, void **handle);

#endif
