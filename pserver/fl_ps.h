/* fl_ps.h - flotilla-pserver internals (never installed): the parameter
 * state and its update rules (fl_ps_core), the sparse table
 * (fl_ps_table) and the gRPC service around them (fl_ps_server).
 *
 * fl_ps_core knows nothing of gRPC: each call takes the unpacked protobuf-c
 * request, checks all of it before changing anything (a bad request leaves
 * every table as it was) and returns an fl_status that the service turns
 * into a gRPC status (FL_EINVAL -> INVALID_ARGUMENT, FL_ESTATE ->
 * FAILED_PRECONDITION: "register again").  That keeps the rules unit-
 * testable without a network.
 *
 * Rules (Paddle's names; see also docs/DESIGN.md section 2):
 *   sync  (a_sync false)          a block collects one gradient push per
 *         counted trainer for step s; when the last one is in, they are
 *         summed in trainer-id order, divided by their count (the global
 *         batch's mean), the optimizer runs once and the block's step
 *         becomes s+1.  Pulls asking for min_step s+1 wait (the service
 *         holds the call) until then.  Counted = registered and alive, or
 *         never seen yet within heartbeat_timeout_s of the server's start;
 *         dead and completed trainers are not waited for, nor is a trainer
 *         waiting in a barrier (it trains no step meanwhile; waiting for it
 *         could deadlock against a trainer that must finish its steps to
 *         reach the same barrier, e.g. one that rejoined after a restart).
 *   async (a_sync true)           each gradient push is applied at once.
 *   geo   (a_sync, k_steps > 0)   pushes are parameter deltas, added.
 * Every push carries (trainer, step): a block takes at most one push per
 * (trainer, step), so a retried push is applied once.  Step window: a
 * gradient or delta push may carry a step up to one past the block's step
 * (sync; async: one past the highest step pushed, geo: k_steps past it),
 * or up to one past the highest step a trainer declared in Register
 * (RegisterRequest.step: the last step it pushed), and below
 * FL_PS_MAX_STEP; a later step is
 * INVALID_ARGUMENT and changes nothing (a stray huge step would otherwise
 * make every real push a duplicate).  A push for a later step than the
 * block waits for, with nothing pending, moves the block forward (after a
 * restart from a checkpoint the trainers are ahead, and say so when they
 * register again); one
 * that overtakes a partly collected step applies that step with what it
 * has first (only happens while recovering).  The dense optimizer is
 * pserver.optimizer (any kernels optimizer; LARS/LAMB trust ratios are per
 * block), with the learning rate of the schedule at the pushed step.
 *
 * Sparse tables: rows of `dim` floats keyed by uint64, created on first
 * touch with a uniform init in [-init_range, init_range] drawn from
 * (train.seed, table, key) - so the value of a new row does not depend on
 * arrival order or server count - updated per row by SGD, Adagrad or Adam
 * (pserver.sparse.optimizer), at most max_rows rows per table on this
 * server: creating one more evicts the row unseen longest (exact LRU).
 * A table named in pserver.sparse_tables takes its own init_range and may
 * have a padding id (reads as zeros, never a row, gradients dropped);
 * InitSparse creates rows with given values when absent, DumpSparse lists
 * a table's rows in pages, keys ascending. */
#ifndef FL_PS_H
#define FL_PS_H

#include <stddef.h>
#include <stdint.h>

#include "fl_ckpt.h"
#include "fl_config.h"
#include "fl_optim.h"
#include "fl_protocol.h"
#include "fl_rpc.h"
#include "fl_status.h"
#include "flotilla.pb-c.h"

/* Steps on the wire are below this (2^53: exact as a double; no step
 * arithmetic can overflow). */
#define FL_PS_MAX_STEP (INT64_C(1) << 53)

/* ------------------------------------------------------------ sparse table */

typedef struct fl_ps_table fl_ps_table;

typedef struct fl_ps_table_opts {
  const char *name;       /* copied */
  uint32_t dim;           /* floats per row, >= 1 */
  int64_t max_rows;       /* >= 1 */
  float init_range;       /* rows start uniform in [-r, r] */
  uint64_t seed;
  fl_optim_hparams hp;    /* a kind fl_proto_sparse_optim_ok takes */
  float lr;
  /* The padding id (has_padding): reads as zeros, never becomes a row, and
   * its gradients are dropped (counted, fl_ps_table_padding_dropped). */
  int has_padding;
  uint64_t padding_id;
  /* pserver.memory_budget: rows are demoted into tier (NULL: none, rows
   * beyond max_rows dropped as before) while the hot rows of every table
   * sharing *hot_bytes would pass hot_budget bytes. */
  struct fl_ps_tier *tier;
  _Atomic uint64_t *hot_bytes;
  uint64_t hot_budget;
  uint32_t stripe; /* its rows' part of the tier: fl_ps_table_save_many */
  /* Admission: an id gets a row only at its admit_threshold-th training
   * pull (0 or 1: at the first), counted in a count-min sketch of
   * admit_sketch_bytes (ps_admit.h: its error bound); until then it reads
   * as admit_default in every column and its gradients are dropped. */
  uint32_t admit_threshold;
  size_t admit_sketch_bytes;
  float admit_default;
  /* A lock stripe after the first: it counts sightings in the sketch of
   * sketch_of (the table's first stripe, which owns it); NULL: its own. */
  const struct fl_ps_table *sketch_of;
  /* Expiry (fl_ps_table_expire): rows unseen for expire_after_steps of
   * the table's steps (pushes applied to it) or for expire_after_seconds
   * of the wall clock are deleted; 0: never. */
  int64_t expire_after_steps;
  double expire_after_seconds;
  double now;             /* wall clock at creation (seconds since the epoch) */
  /* Keep what changed since the last checkpoint (delta checkpoints). */
  int track_changes;
} fl_ps_table_opts;

/* What admission, expiry and eviction did to a table since its creation
 * (or the checkpoint it was loaded from). */
typedef struct fl_ps_table_counts {
  uint64_t admitted; /* rows created once their id was seen often enough */
  uint64_t refused;  /* training pulls of an id below the threshold */
  uint64_t expired;  /* rows deleted by fl_ps_table_expire */
  uint64_t evicted;  /* rows deleted at max_rows (least recently seen) */
} fl_ps_table_counts;

/* A new empty table.  FL_EINVAL (logged) for a bad option.  The caller owns
 * *out (fl_ps_table_free).  Not thread-safe: the core locks around it. */
fl_status fl_ps_table_create(const fl_ps_table_opts *o, fl_ps_table **out);
void fl_ps_table_free(fl_ps_table *t);

const char *fl_ps_table_name(const fl_ps_table *t);
uint32_t fl_ps_table_dim(const fl_ps_table *t);
size_t fl_ps_table_rows(const fl_ps_table *t);
uint64_t fl_ps_table_evicted(const fl_ps_table *t);
/* Gradient rows of the padding id dropped so far. */
uint64_t fl_ps_table_padding_dropped(const fl_ps_table *t);
void fl_ps_table_counts_of(const fl_ps_table *t, fl_ps_table_counts *out);

/* Delete the rows unseen for expire_after_steps of the table's steps or
 * expire_after_seconds before now (wall clock, seconds since the epoch;
 * rows seen from now on are stamped with it), walking from the least
 * recently seen row until one is not expired.  Returns the rows deleted. */
size_t fl_ps_table_expire(fl_ps_table *t, double now);

/* Copy the rows of keys[0..n) into out (n*dim floats), creating missing
 * rows (under admission: those of ids seen admit_threshold times, counting
 * this pull; the others read as admit_default); every row touched becomes
 * the most recently seen. */
fl_status fl_ps_table_pull(fl_ps_table *t, const uint64_t *keys, size_t n, float *out);

/* Apply one optimizer step per row with the gradients g (n*dim floats),
 * creating missing rows first (under admission: dropping their gradients
 * instead); one step of the table's clock. */
fl_status fl_ps_table_push(fl_ps_table *t, const uint64_t *keys, size_t n, const float *g);
/* One step of the table's clock without a row (a lock stripe that a push
 * to its table did not touch: every stripe counts the table's steps). */
void fl_ps_table_tick(fl_ps_table *t);
/* Rows of keys into out (n*dim floats) without changing the table: no row
 * is created, nothing counted, recency and eviction stay as they are; a
 * key without a row reads as the value it would be created with (its
 * seeded init), or admit_default under admission. */
fl_status fl_ps_table_read(const fl_ps_table *t, const uint64_t *keys, size_t n, float *out);

/* Create the rows of keys[0..n) that do not exist yet with their values in
 * rows (n*dim floats, the caller's); existing rows, and the padding id, are
 * left as they are (a key repeated in keys: its first values).  A new row
 * is the most recently seen, its optimizer state fresh.  *created gets the
 * rows made. */
fl_status fl_ps_table_init(fl_ps_table *t, const uint64_t *keys, size_t n, const float *rows,
                           size_t *created);
/* At most max (>= 1) rows whose keys are above after (every key when
 * has_after is 0), the smallest of them, keys ascending into keys (max, the
 * caller's) and their values into vals (max*dim floats); *n gets how many,
 * *more 1 when rows above the last one remain.  Changes nothing. */
fl_status fl_ps_table_dump(const fl_ps_table *t, int has_after, uint64_t after, size_t max,
                           uint64_t *keys, float *vals, size_t *n, int *more);
/* Rows and bytes of the memory tier (key, value, optimizer state, step,
 * links and hash share) and rows in the disk tier. */
uint64_t fl_ps_table_hot_bytes(const fl_ps_table *t);
size_t fl_ps_table_disk_rows(const fl_ps_table *t);
/* The id under which stripe `stripe` of table name keeps its rows in the
 * disk tier's store (also the checkpoint record "tier_ids"). */
uint64_t fl_ps_table_tier_id(const char *name, unsigned stripe);
/* After a checkpoint loaded with the disk tier (its rows put in memory,
 * never demoted meanwhile) and the store replaced by the checkpoint's
 * copy: of a row in both tiers the older copy goes (update count, then
 * last-seen step, then time; a tie keeps the disk's, the same bits), then
 * the memory rows over the budget are demoted.  No-op without a tier. */
fl_status fl_ps_table_tier_settle(fl_ps_table *t);
/* Before the store is copied for a checkpoint (t locked): each memory
 * row's last use goes into the store (its note), so that loading that
 * checkpoint restores the order of both tiers.  No-op without a tier. */
fl_status fl_ps_table_tier_keep_order(fl_ps_table *t);

/* Read a row without touching it (tests, checkpoints): 1 when present. */
int fl_ps_table_peek(const fl_ps_table *t, uint64_t key, float *out);

/* The optimizer of the table's rows. */
fl_optim_kind fl_ps_table_kind(const fl_ps_table *t);

/* The sparse-table checkpoint format written: 2 adds the records "format"
 * and "optimizer" and sizes each state record by fl_optim_state_len;
 * 3 adds the rows' last-seen marks ("seen_step", "seen_time"), the
 * table's step ("clock"), the counters ("counts") and, with admission,
 * the sketch ("sketch", "sketch_total"); a delta (records "delta" = 1 and
 * "deleted": the keys deleted since the last checkpoint) holds only the
 * rows seen or changed since then.  Formats 1 (no "format" record, sgd,
 * adagrad and adam only) and 2 are read too. */
#define FL_PS_TABLE_FORMAT 3

/* Checkpoint records under prefix ("sparse/<name>/"): format, optimizer,
 * keys, values, optimizer state, marks, in least- to most-recently-seen
 * order.  delta: only the rows seen since the last checkpoint, and the
 * keys deleted since (needs track_changes). */
fl_status fl_ps_table_save(const fl_ps_table *t, fl_ckpt_writer *w, const char *prefix);
fl_status fl_ps_table_save_delta(const fl_ps_table *t, fl_ckpt_writer *w, const char *prefix);
/* 1 when a delta can hold what changed since the last checkpoint (the
 * deleted keys kept did not overflow, the disk tier never failed a write:
 * else the next one must be whole).  With the disk tier a delta also
 * writes "moved" (the keys seen or changed, then demoted) and every
 * checkpoint "tier_ids" (fl_ps_table_tier_id of each stripe). */
int fl_ps_table_delta_ok(const fl_ps_table *t);
/* The checkpoint just written holds the table: what changed so far is
 * forgotten (call after a save that committed). */
void fl_ps_table_mark_saved(fl_ps_table *t);
/* Apply a delta written by fl_ps_table_save_delta onto the state it was
 * taken after: deleted keys go, its rows are put in (most recently seen,
 * in their order).  FL_ECORRUPT / FL_EINVAL (logged) when its records do
 * not verify; the table is unchanged then. */
fl_status fl_ps_table_apply_delta(fl_ps_table *t, const fl_ckpt *c, const char *prefix);
/* Check the records under prefix for a table of dim floats per row whose
 * rows kind updates: a format this build reads holding kind's state (else
 * FL_EINVAL, logged, naming the format or both optimizers), every record
 * present, of the right shapes, no key twice (else FL_ECORRUPT, logged).
 * *rows (may be NULL) gets their row count. */
fl_status fl_ps_table_verify(const fl_ckpt *c, const char *prefix, uint32_t dim,
                             fl_optim_kind kind, int64_t *rows);
/* Replace the contents with those records (rows beyond max_rows: the
 * least recently seen are dropped).  FL_ECORRUPT when they do not verify;
 * the table is unchanged then. */
fl_status fl_ps_table_load(fl_ps_table *t, const fl_ckpt *c, const char *prefix);

/* One table kept as ns stripes (a power of two; the core's lock striping):
 * key's rows live in stripe fl_ps_table_stripe(key, ns), each stripe a
 * table of its own (hash, LRU, max_rows, marks and deleted keys), all
 * with the same clock and one admission sketch (sketch_of).  save_many
 * writes the stripes as one table's records (stripe after stripe, each
 * least recent first; save_delta_many: what changed); load_many and
 * apply_delta_many put each row back into its stripe, so that every
 * stripe gets its rows in the order it had them.  ns 1: the one-table
 * calls. */
unsigned fl_ps_table_stripe(uint64_t key, unsigned ns);
fl_status fl_ps_table_save_many(const fl_ps_table *const *ts, size_t ns, fl_ckpt_writer *w,
                                const char *prefix);
fl_status fl_ps_table_load_many(fl_ps_table *const *ts, size_t ns, const fl_ckpt *c,
                                const char *prefix);
fl_status fl_ps_table_save_delta_many(const fl_ps_table *const *ts, size_t ns,
                                      fl_ckpt_writer *w, const char *prefix);
fl_status fl_ps_table_apply_delta_many(fl_ps_table *const *ts, size_t ns, const fl_ckpt *c,
                                       const char *prefix);

/* -------------------------------------------------------------------- core */

typedef enum fl_ps_mode {
  FL_PS_SYNC = FLOTILLA__SYNC_MODE__SYNC_MODE_SYNC,
  FL_PS_ASYNC = FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC,
  FL_PS_GEO = FLOTILLA__SYNC_MODE__SYNC_MODE_GEO
} fl_ps_mode;

/* The mode a job runs (strategy.a_sync and a_sync_configs.k_steps). */
fl_ps_mode fl_ps_mode_of(const fl_job *job);
const char *fl_ps_mode_name(fl_ps_mode m);

/* Default limit of the dense floats on one server: 2^32 (16 GiB of fp32
 * values, before optimizer state). */
#define FL_PS_DEFAULT_MAX_DENSE (UINT64_C(1) << 32)

/* One sparse table's own optimizer and learning rate, in place of
 * pserver.sparse.optimizer's for the table called name (the job file's
 * per-table settings fill these).  hp's num_threads and exclude list are
 * ignored. */
typedef struct fl_ps_table_optim {
  char name[128];
  fl_optim_hparams hp; /* a kind fl_proto_sparse_optim_ok takes */
  float lr;            /* >= 0; > 0 for ftrl */
} fl_ps_table_optim;

#define FL_PS_MAX_TABLE_OPTIMS 64

typedef struct fl_ps_core_opts {
  fl_job job;             /* optimizer, schedule, pserver and strategy sections */
  /* Per-table optimizers (n_table_optims of them, names distinct); every
   * other table takes pserver.sparse.optimizer. */
  fl_ps_table_optim table_optims[FL_PS_MAX_TABLE_OPTIMS];
  size_t n_table_optims;
  int server_index;
  int n_servers;
  int num_trainers;
  double heartbeat_timeout_s; /* <= 0: never declare a trainer dead */
  /* Elastic trainers (async and geo only; FLOTILLA_PS_ELASTIC=1): the
   * num_trainers ids are slots that trainers take and leave while the job
   * runs; nothing waits for a slot no trainer registered in, and the job is
   * complete when every trainer that registered completed or died. */
  int elastic;
  size_t max_sparse_keys;     /* most keys in one sparse call (0 = 1<<20) */
  /* The service's threads (0: not said, taken as several).  With 1 and no
   * disk tier (pserver.memory_budget 0) a sparse table is one lock stripe:
   * no call runs beside another, and one table's rows take fewer, larger
   * allocations than 16 stripes' (the same rows and values either way;
   * at max_rows one LRU over all of them). */
  int threads;
  /* Most dense floats this server holds (0 = FL_PS_DEFAULT_MAX_DENSE): a
   * Register (or checkpoint) whose layout puts more here, or more than the
   * host's memory holds with the optimizer state, is refused. */
  uint64_t max_dense_elements;
  /* The run this server belongs to (fl_identity.h): recorded in its
   * checkpoints; a trainer registering with another run id or job hash is
   * refused.  "" = not checked, not recorded. */
  char run_id[64];
  uint64_t job_hash;
  /* Called (no core lock held) after anything that may let held calls go
   * on: a sync step applied, a barrier completed, trainers joined, died or
   * completed.  May be NULL. */
  void (*on_progress)(void *ctx);
  void *progress_ctx;
} fl_ps_core_opts;

typedef struct fl_ps_core fl_ps_core;

/* A new core with no layout yet (the first Register fixes it, or
 * fl_ps_core_load).  The caller owns *out (fl_ps_core_free). */
fl_status fl_ps_core_create(const fl_ps_core_opts *o, fl_ps_core **out);
void fl_ps_core_free(fl_ps_core *c);

/* Replace the progress hook (NULL: none).  When it returns, the old hook is
 * not running and will not run again. */
void fl_ps_core_set_progress(fl_ps_core *c, void (*fn)(void *), void *ctx);

/* Monotonic seconds, the clock of heartbeats (tests pass their own `now`
 * to fl_ps_core_tick; registrations and calls stamp with this one). */
double fl_ps_now(void);

/* The calls.  Each fills the caller's response message (initialized with
 * its __init); pointers it sets into it stay valid until the next call on
 * the same thread that changes the core (a response is packed right away).
 * FL_EINVAL: bad request (logged at warn level with the trainer id);
 * FL_ESTATE: the trainer is not registered here (again). */
fl_status fl_ps_core_register(fl_ps_core *c, const Flotilla__RegisterRequest *req,
                              Flotilla__RegisterResponse *resp);
fl_status fl_ps_core_push_dense(fl_ps_core *c, const Flotilla__PushDenseRequest *req,
                                Flotilla__PushDenseResponse *resp);
/* FL_OK when the pull can be answered now, FL_EAGAIN when it must wait
 * (sync mode), or an error.  min_step > 0: the values once step min_step
 * is applied (held until then); 0: the current values; -(s+1): sync mode,
 * the values as of step s (the ones step s's gradients are computed from;
 * a trainer rejoining a running job asks for them, since the step may be
 * applied on some blocks and not on others: a block already past s answers
 * the value it kept from before s was applied), never held.  trainer_id
 * FL_PS_OBSERVER reads without being registered (monitoring tools). */
#define FL_PS_OBSERVER (-1)
fl_status fl_ps_core_pull_check(fl_ps_core *c, int32_t trainer_id, int64_t min_step,
                                const uint32_t *blocks, size_t n);
/* Sync commit (a PullDense's `committed`): trainer t has every server's
 * acknowledgement of all its pushes of the steps before next, so steps
 * below next may apply with its pushes; applies what may be applied now.
 * Idempotent (a lower next changes nothing).  FL_ESTATE: t is not
 * registered here; FL_EINVAL: next outside [0, FL_PS_MAX_STEP]; nothing
 * changes in async and geo mode. */
fl_status fl_ps_core_commit(fl_ps_core *c, int32_t t, int64_t next);
/* Pack the answer of a pull that fl_ps_core_pull_check cleared (with the
 * same min_step) into a byte buffer (the blocks are copied under their
 * locks). */
fl_status fl_ps_core_pull_pack(fl_ps_core *c, int64_t min_step, const uint32_t *blocks, size_t n,
                               fl_rpc_outbuf *ob, grpc_byte_buffer **out);
/* Sparse pull: *scratch (malloc'd, *cap floats, grown as needed, owned by
 * the caller) receives the rows; resp->values points into it.  FL_EAGAIN
 * (nothing changed) when the table has not applied the steps before
 * req->min_step yet (sync): the service holds the call and asks
 * fl_ps_core_sparse_ready until it may be answered.  req->read_only reads
 * through fl_ps_table_read and counts nothing. */
fl_status fl_ps_core_pull_sparse(fl_ps_core *c, const Flotilla__PullSparseRequest *req,
                                 float **scratch, size_t *cap, Flotilla__PullSparseResponse *resp,
                                 Flotilla__Tensor *values, int64_t shape[2]);
/* FL_OK when a sparse pull of table by trainer t asking for min_step may
 * be answered now, FL_EAGAIN when not yet, else why never. */
fl_status fl_ps_core_sparse_ready(fl_ps_core *c, int32_t t, const char *table, int64_t min_step);
fl_status fl_ps_core_push_sparse(fl_ps_core *c, const Flotilla__PushSparseRequest *req,
                                 Flotilla__PushSparseResponse *resp);
/* InitSparse: create the rows of req->keys (this server's) that do not
 * exist yet with req->values ([n_keys, dim], any wire dtype, finite);
 * existing rows and the table's padding id stay as they are.  No step,
 * no dedup: repeating it changes nothing.  resp->created: rows made (also
 * added to Stats' sparse_init_rows). */
fl_status fl_ps_core_init_sparse(fl_ps_core *c, const Flotilla__InitSparseRequest *req,
                                 Flotilla__InitSparseResponse *resp);
/* Most floats in one DumpSparse answer (64 MiB): a page has at most
 * FL_PS_DUMP_MAX_FLOATS / dim rows (and at most max_sparse_keys). */
#define FL_PS_DUMP_MAX_FLOATS ((size_t)1 << 24)
/* A DumpSparse answer's memory: malloc'd, grown as needed, owned by the
 * caller (kept across calls; zero-initialise, free both arrays). */
typedef struct fl_ps_dump_buf {
  uint64_t *keys;
  float *vals;
  size_t kcap, vcap;
} fl_ps_dump_buf;
/* DumpSparse: a page of req->table's rows on this server, keys ascending
 * above req->after_key (every key without has_after), at most req->max_rows
 * (0: the page limit above); resp's keys and values point into buf, values
 * is the caller's tensor and shape its [2].  trainer_id FL_PS_OBSERVER (or
 * a registered trainer).  Changes nothing: no row, counter or recency. */
fl_status fl_ps_core_dump_sparse(fl_ps_core *c, const Flotilla__DumpSparseRequest *req,
                                 fl_ps_dump_buf *buf, Flotilla__DumpSparseResponse *resp,
                                 Flotilla__Tensor *values, int64_t shape[2]);
/* FL_OK when the barrier is complete (answer with fl_ps_core_barrier_result),
 * FL_EAGAIN when it must wait.
 * Rounds: once a trainer process was answered a completed round's result
 * (fl_ps_core_barrier_answer / _take), its next call of the same name
 * starts the next round; any other call (a retry whose answer never came,
 * another process of that trainer after a restart) gets the completed
 * round's result.  The oldest completed barrier is forgotten when all
 * slots are used, except those named "job/..." (kept for the whole job,
 * so that a trainer that rejoins a running job finds job/agree_steps). */
fl_status fl_ps_core_barrier(fl_ps_core *c, const Flotilla__BarrierRequest *req);
/* The same, and on FL_OK the result into resp (sums in buf, which holds
 * FL_PS_BARRIER_MAX_VALUES doubles), the trainer counting as answered -
 * all under one lock, so no other trainer can start the next round in
 * between (the service answers with this). */
fl_status fl_ps_core_barrier_answer(fl_ps_core *c, const Flotilla__BarrierRequest *req,
                                    Flotilla__BarrierResponse *resp, double *buf);
/* The result of barrier `name` for trainer_id: FL_OK and resp filled (sums
 * points into buf, which must hold FL_PS_BARRIER_MAX_VALUES doubles),
 * FL_EAGAIN when not complete yet, FL_ESTATE when the trainer is no longer
 * counted (it died meanwhile), FL_ENOTFOUND when it was forgotten. */
#define FL_PS_BARRIER_MAX_VALUES 64
fl_status fl_ps_core_barrier_result(fl_ps_core *c, const char *name, int32_t trainer_id,
                                    Flotilla__BarrierResponse *resp, double *buf);
/* The same for a held call about to be answered: on FL_OK the trainer
 * counts as answered. */
fl_status fl_ps_core_barrier_take(fl_ps_core *c, const char *name, int32_t trainer_id,
                                  Flotilla__BarrierResponse *resp, double *buf);
fl_status fl_ps_core_heartbeat(fl_ps_core *c, const Flotilla__HeartbeatRequest *req,
                               Flotilla__HeartbeatResponse *resp);
fl_status fl_ps_core_complete(fl_ps_core *c, const Flotilla__CompleteRequest *req,
                              Flotilla__CompleteResponse *resp);
void fl_ps_core_stats(fl_ps_core *c, Flotilla__StatsResponse *resp);
/* Add the dense layout (names and sizes as registered, block size, server
 * count and index) to a Stats answer.  *specs and *ptrs (malloc'd, NULL
 * before any layout) are the caller's to free once resp is packed; the
 * names point into the core. */
fl_status fl_ps_core_stats_layout(fl_ps_core *c, Flotilla__StatsResponse *resp,
                                  Flotilla__DenseParamSpec **specs,
                                  Flotilla__DenseParamSpec ***ptrs);
/* Add to the byte counters of the statistics (the service counts). */
void fl_ps_core_count_bytes(fl_ps_core *c, uint64_t in, uint64_t out);

/* The message of this thread's last FL_EINVAL from a core call. */
const char *fl_ps_core_last_error(void);

/* Heartbeat check at time now (fl_ps_now clock): trainers silent for more
 * than heartbeat_timeout_s are declared dead (logged), never-seen ones once
 * the grace period is over; also logs sparse evictions since the last tick. */
void fl_ps_core_tick(fl_ps_core *c, double now);

/* pserver.memory_budget: open the sparse tables' disk tier, a fresh
 * RocksDB store in data_dir (the pserver's checkpoint directory, claimed
 * for this run), before any table is made and before a checkpoint is
 * loaded.  FL_OK and nothing done without a budget; FL_EINVAL (logged)
 * with a budget but no data_dir. */
fl_status fl_ps_core_open_tier(fl_ps_core *c, const char *data_dir);

/* The sparse rows per tier and the disk tier's counters. */
typedef struct fl_ps_tiers {
  uint64_t budget, mem_rows, mem_bytes, disk_rows, disk_bytes;
  uint64_t hits, misses, promotions, demotions;
} fl_ps_tiers;
void fl_ps_core_tier_stats(fl_ps_core *c, fl_ps_tiers *out);
/* Those as /metrics (flotilla_ps_sparse_rows/bytes{tier}, the
 * flotilla_ps_tier_*_total counters). */
void fl_ps_core_publish_tiers(fl_ps_core *c);

/* The job is over for this server when every trainer that registered
 * completed or is dead, at least one completed, and no trainer is still
 * expected: 1 when every trainer registered (the job is complete), -1 when
 * some never did (given up after heartbeat_timeout_s: the job is NOT
 * complete - e.g. the server ran out of file descriptors and refused their
 * connections), 0 while not over. */
int fl_ps_core_finished(fl_ps_core *c);
/* The trainers that never registered: count, and their ids ("7, 8, 9")
 * into out (cap bytes, caller's buffer). */
size_t fl_ps_core_unregistered(fl_ps_core *c, char *out, size_t cap);

/* The server's step: sync - the lowest step any of its blocks waits for;
 * async/geo - one past the highest step pushed.  0 before any layout. */
int64_t fl_ps_core_step(fl_ps_core *c);
/* Sync mode: 1 when no step is in flight here (every block at one step,
 * no push collected for the next) and no trainer waits in a barrier: a
 * checkpoint now holds one step.
 * Always 1 in async and geo mode. */
int fl_ps_core_settled(fl_ps_core *c);

/* Sync mode: checkpoints at one step on every shard.
 * With a gate at step g, a block whose pending step is g does not apply it
 * (its pulls of step g+1 wait) until the gate moves: every block of this
 * server comes to stand at step g, fl_ps_core_at_gate turns 1, and a
 * checkpoint taken then holds exactly step g - on every shard, since every
 * shard gates the same steps (multiples of checkpoint_interval_steps).
 * Moving the gate (to the next step, or -1: none) lets the held steps go
 * on.  No effect in async and geo mode. */
void fl_ps_core_set_gate(fl_ps_core *c, int64_t step);
int64_t fl_ps_core_gate(fl_ps_core *c);
/* 1 when a gate is set and every block of this server stands at its step;
 * -1 when some block is past it (moved forward by trainers ahead of it,
 * after a restart): no checkpoint can hold that step any more, the gate
 * must move on; 0 otherwise. */
int fl_ps_core_at_gate(fl_ps_core *c);
/* Called (no core lock held, on the thread of the call that made it so)
 * when every block came to stand at the gate's step; NULL: none.  When it
 * returns, the old hook is not running and will not run again. */
void fl_ps_core_set_gate_hook(fl_ps_core *c, void (*fn)(void *), void *ctx);

/* Write a checkpoint of every table to path (atomic, checksummed).  Blocks
 * are copied one at a time under their lock, so training goes on. */
fl_status fl_ps_core_save(fl_ps_core *c, const char *path);
/* The same into dir, as <dir>/ckpt-<step>.flc where step (into *step) is
 * the one the checkpoint holds and fl_ps_core_load will report - possibly
 * later than fl_ps_core_step() just before, as training goes on meanwhile.
 * The file's name goes into path (cap bytes, caller's buffer).  With
 * pserver.checkpoint_delta.every N, after such a base up to N checkpoints
 * are deltas instead, <dir>/delta-<base step>+<k>.flc (k = 1..N): the dense
 * state, and the sparse rows seen or changed and the keys deleted since
 * the checkpoint before; the first checkpoint of a process, and the one
 * after a failed write, is a base.  Tables' rows are expired first; one
 * log line per table gives its counters.  Calls must be serialized. */
fl_status fl_ps_core_save_dir(fl_ps_core *c, const char *dir, int64_t *step, char *path,
                              size_t cap);
/* Replace the state with a checkpoint (layout, blocks, optimizer state,
 * sparse rows, steps).  Registered trainers must register again.  FL_EINVAL
 * / FL_ECORRUPT (logged) when it does not belong to this server and job;
 * the state is unchanged then. */
fl_status fl_ps_core_load(fl_ps_core *c, const fl_ckpt *ck, const char *name);
/* Load the base ck (file, from dir), then replay its deltas of dir in
 * order (*deltas gets how many), stopping at the first one missing, of
 * another base, truncated or corrupt, or without the disk tier's copy its
 * base has (named in the log, at error level when bad): the state is then
 * that of the last good one, the disk tier that one's copy.  Errors:
 * those of loading the base or restoring the copy. */
fl_status fl_ps_core_load_chain(fl_ps_core *c, const fl_ckpt *ck, const char *file,
                                const char *dir, int64_t *deltas);
/* The table name of a pserver checkpoint's record "sparse/<name>/dim"
 * into out (cap bytes): 1; 0 when record is not such a name; -1 when its
 * name is empty, holds '/' or does not fit. */
int fl_ps_ckpt_table_of(const char *record, char *out, size_t cap);

/* Test access: a copy of dense block `block`'s value (n floats) and its
 * step; FL_ENOTFOUND when the block is not on this server or unset. */
fl_status fl_ps_core_block_value(fl_ps_core *c, uint32_t block, float *out, size_t n,
                                 int64_t *step);
/* The sparse table called name (its first lock stripe: all of it below
 * 8192 max_rows), or NULL (not locked: tests only). */
fl_ps_table *fl_ps_core_table(fl_ps_core *c, const char *name);

/* ----------------------------------------------------------------- service */

typedef struct fl_ps_server fl_ps_server;

typedef struct fl_ps_server_opts {
  const char *bind_addr;  /* "host:port" */
  int threads;            /* completion-queue threads (>= 1) */
  int calls_per_thread;   /* request_call kept armed per thread (>= 1) */
  fl_rpc_opts rpc;        /* limits, token, TLS */
  size_t max_request_bytes; /* larger requests: INVALID_ARGUMENT */
  /* Checkpoint on request (SaveCheckpoint / LoadCheckpoint calls). */
  fl_status (*save)(void *ctx, int64_t *step, char *path, size_t cap);
  fl_status (*load)(void *ctx, int64_t step, int64_t *loaded);
  void *ckpt_ctx;
} fl_ps_server_opts;

/* Serve core on o->bind_addr (grpc already initialised by the caller).
 * *port gets the bound port.  The caller owns *out and ends it with
 * fl_ps_server_stop, then frees the core. */
fl_status fl_ps_server_start(fl_ps_core *core, const fl_ps_server_opts *o, fl_ps_server **out,
                             int *port);
/* Look at the held calls again (the core's on_progress hook). */
void fl_ps_server_progress(void *server);
/* From now on the health check (grpc.health.v1.Health/Check) answers
 * NOT_SERVING (the daemon is shutting down); the calls go on. */
void fl_ps_server_not_serving(fl_ps_server *s);
/* Entry i of the service's dispatch table into *out: 0 past the end.
 * The ParameterServer methods and grpc.health.v1.Health/Check. */
int fl_ps_server_method(size_t i, fl_rpc_method *out);
/* Stop taking calls, cancel held ones, join the threads, free. */
void fl_ps_server_stop(fl_ps_server *s);

#endif
