/* core_internal.h - what the pserver core's files (core*.c) share: the
 * state of a fl_ps_core, the ops table of the update modes, and the helpers
 * more than one of them calls.  Private to pserver/core*.c; the service and
 * the tests use fl_ps.h.
 *
 * Ownership: a fl_ps_core owns everything below: the trainer registry, the
 * layout and its dense blocks (made once, by the first Register or by a
 * checkpoint load, never freed before fl_ps_core_free), the sparse tables
 * (added, never removed) and the barriers.
 *
 * Locking: c->mu guards the trainer registry, the layout's creation, the
 * table list and the barriers; each dense block and each sparse table has
 * its own mutex, so pushes to different blocks run in parallel.  A sparse
 * table's mutex guards its push dedup and sync rows only: its rows are in
 * stripes (core_stripes.c), each under its own lock, so that pulls and
 * async pushes of several trainers run in parallel.  Order: c->mu before
 * a block or table lock, block locks in ascending id, a table's lock
 * before its stripe locks, stripes (and tables) in ascending index.  The set
 * of trainers a sync step waits for is kept in atomic bit words as well,
 * written before blocks are looked at again after a membership change, so
 * that a push and a death racing each other cannot both miss the step.
 * c->cb_mu guards the progress and gate hooks only and is taken with no
 * other core lock held.  Each helper below says which lock it expects. */
#ifndef FL_PS_CORE_INTERNAL_H
#define FL_PS_CORE_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <pthread.h>

#include "fl_cluster.h"
#include "fl_ps.h"
#include "fl_ps_layout.h"

#define MAX_TABLES 64
#define MAX_BARRIERS 64
#define BARRIER_NAME_MAX 128
#define PARAM_NAME_MAX 256
#define MAX_NUMEL (1ULL << 40)
#define MAX_SEQ 64
#define MAX_STRIPES 16

enum { T_UNKNOWN = 0, T_LIVE, T_DEAD, T_DONE };

typedef struct ps_trainer {
  int state;
  uint64_t incarnation;
  double last_seen;
  int64_t step;
} ps_trainer;

typedef struct ps_block {
  pthread_mutex_t mu;
  uint32_t id;
  uint64_t n;
  const char *name; /* of its parameter */
  float *value, *s1, *s2;
  int initialized;
  int64_t step;     /* sync: the step it waits for; others: pushes applied */
  int64_t updates;  /* optimizer steps applied (Adam's bias correction) */
  int64_t pend_step;
  int n_pend;
  int moved;        /* sync: step reached by a move forward, not by applying */
  uint8_t *have;    /* [num_trainers] */
  float **pend;     /* [num_trainers] gradient buffers, made on first use */
  float *acc;
  int64_t *last;    /* [num_trainers] async/geo: last step taken */
  float *prev;      /* sync: the value before the last step applied ... */
  int64_t prev_step; /* ... i.e. as of this step (-1: none) */
} ps_block;

/* One part of a trainer's sparse push held for a sync step: n rows. */
typedef struct ps_rows {
  uint64_t *keys;
  float *g;
  size_t n, cap;
} ps_rows;

typedef struct ps_table {
  fl_ps_table *t;                   /* stripe 0: name, dim, optimizer */
  fl_ps_table *sh[MAX_STRIPES];     /* the rows, by fl_ps_table_stripe */
  pthread_mutex_t smu[MAX_STRIPES]; /* one per stripe */
  unsigned ns;
  pthread_mutex_t mu;
  int64_t *cur_step; /* [num_trainers] push dedup: step and the parts seen */
  uint64_t *seqmask;
  uint64_t evicted_logged;
  /* sync (core_rows.c): the step the rows wait for, the step held, and per
   * trainer the parts of it announced and held ([num_trainers * MAX_SEQ],
   * made on the first sync push). */
  int64_t step, pend_step;
  int n_pend;        /* trainers with a part of pend_step held */
  uint32_t *parts;   /* [num_trainers] parts announced; 0: none held yet */
  uint64_t *got;     /* [num_trainers] the parts held (bit seq) */
  ps_rows *pend;
} ps_table;

typedef struct ps_barrier {
  char name[BARRIER_NAME_MAX];
  int used, done;
  uint64_t seq;
  int nv;
  uint8_t *arrived;  /* [num_trainers] */
  uint64_t *taken;   /* [num_trainers] incarnation that was answered this
                        round's result, 0: not answered */
  double *vals;      /* [num_trainers * FL_PS_BARRIER_MAX_VALUES] */
  int64_t *mins;     /* [num_trainers] */
  double sums[FL_PS_BARRIER_MAX_VALUES];
  int64_t min;
  int count;
} ps_barrier;

/* The update rules of a mode (sync, async, geo): where the modes differ,
 * the core calls through c->ops, chosen once at create (fl_ps_mode_ops_of).
 * Each hook says which lock it expects. */
typedef struct fl_ps_mode_ops {
  fl_ps_mode mode;
  int push_kind;    /* the gradient/delta push kind it takes (besides init) */
  int keeps_prev;   /* blocks keep their value before the last step applied */
  int uses_scratch; /* a push is converted into one scratch buffer per call */
  int gated;        /* checkpoints at one step on every shard (the gate) */
  /* The highest step a push to b may carry before the horizon (one past
   * the highest step declared in Register) is taken into account; *at
   * gets the step b is at.  May take b->mu. */
  int64_t (*push_limit)(fl_ps_core *c, ps_block *b, int64_t *at);
  /* Apply trainer t's gradient or delta push v of step to b (initialized);
   * *dup when it was taken before, *progress when a step was applied,
   * *at_gate when b came to stand at the gate's step.  b->mu held; scratch
   * is the call's conversion buffer (uses_scratch). */
  fl_status (*apply)(fl_ps_core *c, ps_block *b, int t, int64_t step, const Flotilla__Tensor *v,
                     float *scratch, int *dup, int *progress, int *at_gate);
  /* After a gradient or delta push of step (no lock held). */
  void (*pushed)(fl_ps_core *c, int64_t step);
  /* 1 when a pull of b by trainer t asking for min_step may be answered
   * now.  b->mu held, b initialized. */
  int (*pull_ready)(fl_ps_core *c, const ps_block *b, int32_t t, int64_t min_step);
  /* Apply what may be applied now after the counted set or the gate
   * changed.  No lock held. */
  void (*reevaluate)(fl_ps_core *c);
  /* fl_ps_core_settled (takes block locks). */
  int (*settled)(fl_ps_core *c);
  /* fl_ps_core_step, and the step a checkpoint holds given next_step and
   * the lowest block step copied (low).  Take block locks / none. */
  int64_t (*step)(fl_ps_core *c);
  int64_t (*ckpt_step)(const fl_ps_core *c, int64_t next, int64_t low);
  /* Take part seq (of parts) of trainer t's sparse push of step, n rows
   * keys / g, into pt (not a duplicate by the per-trainer dedup); *dup when
   * its step was applied before, *progress when a step was applied.
   * No lock held (takes pt->mu or the stripe locks). */
  fl_status (*sparse_push)(fl_ps_core *c, ps_table *pt, int t, int64_t step, uint32_t seq,
                           uint32_t parts, const uint64_t *keys, size_t n, const float *g,
                           int *dup, int *progress);
  /* 1 when a sparse pull by trainer t asking for min_step may be answered.
   * pt->mu held. */
  int (*sparse_ready)(const ps_table *pt, int t, int64_t min_step);
} fl_ps_mode_ops;

struct fl_ps_core {
  fl_ps_core_opts o;
  const fl_ps_mode_ops *ops; /* mode's rules, chosen once at create (core_modes.c) */
  fl_optim_hparams dense_hp, sparse_hp;
  const char *exclude[FL_JOB_MAX_LIST];
  fl_lr_schedule lr;
  int nt;
  uint64_t incarnation;
  double start;

  pthread_mutex_t cb_mu; /* guards the progress and gate hooks (see notify) */
  void (*on_progress)(void *);
  void *progress_ctx;
  void (*on_gate)(void *);
  void *gate_ctx;
  /* sync: a block whose pending step is this one holds it (does not apply
   * it) until the gate moves: every block of the server then stands at this
   * step, and a checkpoint taken there holds exactly it, the same step on
   * every shard (fl_ps_core_set_gate).  -1: no gate. */
  _Atomic int64_t gate;

  pthread_mutex_t mu;
  ps_trainer tr[FL_CLUSTER_MAX_TRAINERS];
  _Atomic uint64_t counted[FL_CLUSTER_MAX_TRAINERS / 64];
  _Atomic uint64_t parked[FL_CLUSTER_MAX_TRAINERS / 64]; /* waiting in a barrier */
  /* sync commits (core_commit.c): the trainers that announced the commit
   * protocol at Register, and per trainer one past the highest step it
   * committed (kept across its registrations; steps are the job's). */
  _Atomic uint64_t commits[FL_CLUSTER_MAX_TRAINERS / 64];
  _Atomic int64_t committed[FL_CLUSTER_MAX_TRAINERS];

  _Atomic(fl_ps_layout *) layout; /* set once */
  char layout_from[FL_JOB_PATH_MAX + 64]; /* who declared it, for messages */
  char **names;
  ps_block *blocks;   /* the blocks placed here */
  size_t n_my;
  uint32_t *local;    /* global block id -> index in blocks, or UINT32_MAX */

  ps_table tables[MAX_TABLES];
  _Atomic size_t n_tables;

  ps_barrier barriers[MAX_BARRIERS];
  uint64_t barrier_seq;

  _Atomic int64_t next_step; /* async/geo: one past the highest step pushed */
  _Atomic int64_t horizon;   /* highest step a trainer declared in Register */
  _Atomic uint64_t pushes, pulls, bytes_in, bytes_out, duplicates, invalid, dense_updates,
      checkpoints, sparse_init_rows;

  /* pserver.memory_budget (core_tier.c): the disk tier (NULL: none), the
   * hot bytes of every table and their bound, the counters published. */
  struct fl_ps_tier *tier;
  _Atomic uint64_t hot_bytes;
  uint64_t hot_budget;
  char tier_dir[FL_JOB_PATH_MAX + 64];
  uint64_t published[4];
  uint64_t tier_bg_errors; /* RocksDB's background errors already reported */
  /* Delta checkpoints (core_delta.c; saves serialized by the caller): the
   * base the next delta follows, its nonce, the deltas written since it;
   * have_base 0: the next checkpoint must be whole (the first one, after a
   * restart or a failed write). */
  int64_t base_step, delta_seq;
  uint64_t base_nonce;
  int have_base;
};

/* core_modes.c: the rules of mode m. */
const fl_ps_mode_ops *fl_ps_mode_ops_of(fl_ps_mode m);

static inline void psc_set_counted(fl_ps_core *c, int t, int on) {
  uint64_t bit = 1ULL << (t % 64);
  if (on) atomic_fetch_or(&c->counted[t / 64], bit);
  else atomic_fetch_and(&c->counted[t / 64], ~bit);
}

static inline int psc_is_counted(fl_ps_core *c, int t) {
  return (int)((atomic_load(&c->counted[t / 64]) >> (t % 64)) & 1u);
}

static inline void psc_set_parked(fl_ps_core *c, int t, int on) {
  uint64_t bit = 1ULL << (t % 64);
  if (on) atomic_fetch_or(&c->parked[t / 64], bit);
  else atomic_fetch_and(&c->parked[t / 64], ~bit);
}

static inline int psc_is_parked(fl_ps_core *c, int t) {
  return (int)((atomic_load(&c->parked[t / 64]) >> (t % 64)) & 1u);
}

/* Trainer t's pushes of step count for a sync step: it committed the step,
 * or it never announced the commit protocol (a foreign client). */
static inline int psc_committed(fl_ps_core *c, int t, int64_t step) {
  return !((atomic_load(&c->commits[t / 64]) >> (t % 64)) & 1u) ||
         atomic_load(&c->committed[t]) > step;
}

/* The block of global id id when this server holds it, else NULL. */
static inline ps_block *psc_block_of(fl_ps_core *c, uint32_t id) {
  fl_ps_layout *l = atomic_load(&c->layout);
  if (!l || id >= l->n_blocks || c->local[id] == UINT32_MAX) return NULL;
  return &c->blocks[c->local[id]];
}

/* core.c */
/* A rejected request: counted, logged at warn level, and kept for the
 * service to send back as the status details (the client gets
 * INVALID_ARGUMENT; the server itself is fine). */
fl_status psc_bad(fl_ps_core *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void psc_free_blocks(ps_block *b, size_t n, int nt);
void psc_free_names(char **names, size_t n);
/* Call the progress hook (no core lock held). */
void psc_notify(fl_ps_core *c);
/* Make the layout and this server's blocks.  c->mu held, no layout yet. */
fl_status psc_make_layout(fl_ps_core *c, const uint64_t *numel, char **names, size_t np);
/* The sparse table called name, or NULL (c->mu held, or tables not added
 * meanwhile: the list only grows). */
ps_table *psc_table_of(fl_ps_core *c, const char *name);
/* Add a sparse table (c->mu held). */
fl_status psc_add_table(fl_ps_core *c, const char *name, uint32_t dim);
/* The optimizer and learning rate of the table called name: its entry of
 * o.table_optims, else pserver.sparse.optimizer's. */
void psc_table_optim(const fl_ps_core *c, const char *name, fl_optim_hparams *hp, float *lr);

/* core_members.c */
/* The trainer may call (registered, this process, alive).  c->mu held. */
fl_status psc_check_live(fl_ps_core *c, int t);
/* psc_check_live under c->mu (takes it). */
fl_status psc_enter(fl_ps_core *c, int t);
/* Look at every block and barrier again after the counted set changed,
 * then wake the service.  No lock held. */
void psc_reevaluate(fl_ps_core *c);

/* core_dense.c */
/* Check one tensor: dtype known, shape exactly dims, bytes matching, all
 * finite.  Returns a message or NULL. */
const char *psc_check_tensor(const Flotilla__Tensor *x, int nd, const int64_t *dims);
/* The tensor's values as floats: its own bytes when fp32 and aligned, else
 * converted (or copied) into dst (n floats, not overlapping the tensor). */
const float *psc_as_f32(const Flotilla__Tensor *x, size_t n, float *dst);

/* core_rows.c: sync rows */
/* Hold part seq of trainer t's push of step; a later step first applies
 * the held step when it is whole, else drops it, and moves the table there
 * (core_modes.c sync_push); step is applied once every counted trainer
 * sent all its parts and committed it.  pt->mu held. */
fl_status psc_rows_push(fl_ps_core *c, ps_table *pt, int t, int64_t step, uint32_t seq,
                        uint32_t parts, const uint64_t *keys, size_t n, const float *g, int *dup,
                        int *progress);
/* Apply every table's held step that may be applied now; 1 when one was.
 * No lock held (takes each table's). */
int psc_rows_reevaluate(fl_ps_core *c);
/* Every sparse table here that took sync row pushes is past step (its
 * rows of it applied): a sync dense block applies a step only then.  Takes each table's lock (callers
 * may hold a block's, never a table's). */
int psc_rows_through(fl_ps_core *c, int64_t step);
void psc_rows_free(ps_table *pt, int nt);
/* Trainer t's parts of step are all held by pt (or pt is past step, or
 * holds no sync rows at all).  Takes pt->mu. */
int psc_rows_staged(ps_table *pt, int t, int64_t step);

/* core_commit.c */
/* Record whether trainer t commits its steps (Register's `commits`) and
 * that it committed the steps below committed (a server that restarted
 * learns them again); 1 when that is news (steps may apply now).  No lock
 * needed. */
int psc_set_commits(fl_ps_core *c, int t, int on, int64_t committed);
/* Every push of trainer t for step is held here, or applied: each block
 * past step or holding t's push of it, each table the same.  No lock held
 * (takes each block's and table's). */
int psc_staged(fl_ps_core *c, int t, int64_t step);

/* core_stripes.c: a table's rows in stripes */
/* Make pt's stripes from o (its name, dim, ...; max_rows split among
 * them), their locks, and pt->t.  Tables of fewer than 8192 rows keep one
 * stripe. */
fl_status psc_stripes_create(fl_ps_core *c, ps_table *pt, fl_ps_table_opts *o);
void psc_stripes_free(ps_table *pt);
/* Pull (or read, read_only) / push the rows of keys, each stripe's under
 * its lock. */
fl_status psc_stripes_pull(ps_table *pt, const uint64_t *keys, size_t n, float *out,
                           int read_only);
fl_status psc_stripes_push(ps_table *pt, const uint64_t *keys, size_t n, const float *g);
/* Rows and evictions of all stripes, hot bytes, disk rows and dropped
 * pushes of the padding id (each added to). */
void psc_stripes_count(ps_table *pt, uint64_t *rows, uint64_t *evicted, uint64_t *hot,
                       uint64_t *disk, uint64_t *padding);
/* InitSparse over the stripes: the rows of keys[0..n) that exist in
 * neither tier created with their values in rows (n*dim floats); *created
 * gets how many.  Each stripe under its lock. */
fl_status psc_stripes_init(ps_table *pt, const uint64_t *keys, size_t n, const float *rows,
                           size_t *created);
/* DumpSparse over the stripes (fl_ps_table_dump's contract for the whole
 * table: the max smallest keys above after, ascending).  Each stripe
 * under its lock. */
fl_status psc_stripes_dump(ps_table *pt, int has_after, uint64_t after, size_t max,
                           uint64_t *keys, float *vals, size_t *n, int *more);
/* Rows of the memory tier of every stripe (each stripe under its lock). */
size_t psc_stripes_rows(ps_table *pt);
/* Every table's dim, rows (whole or, k->delta, what changed) and sync
 * step into w, with every table's lock
 * and then every stripe's held (and the disk tier copied meanwhile,
 * psc_tier_snapshot).  No lock held by the caller. */
struct psc_ckpt_kind;
fl_status psc_save_tables(fl_ps_core *c, fl_ckpt_writer *w, const struct psc_ckpt_kind *k);
/* pt's rows from the records under prefix (its stripes locked). */
fl_status psc_stripes_load(ps_table *pt, const fl_ckpt *ck, const char *prefix);
/* Expire pt's old rows (when expire) and sum its counters and rows in
 * memory over its stripes (pt->mu, then each stripe's lock, taken here). */
void psc_stripes_sweep(ps_table *pt, int expire, double now, fl_ps_table_counts *n,
                       size_t *rows);
/* Expire pt's old rows at now, stripe after stripe (pt->mu held; each
 * stripe's lock taken here): a sync step's apply, so that which rows go is
 * the same bits in every run (as the table's clock, not the wall clock
 * that the periodic sweep runs by, says). */
void psc_stripes_expire(ps_table *pt, double now);
/* 1 when pt can write a delta (one stripe, fl_ps_table_delta_ok). */
int psc_stripes_delta_ok(ps_table *pt);
/* Apply the delta records under prefix to pt (one stripe; pt->mu and its
 * lock taken here). */
fl_status psc_stripes_apply_delta(ps_table *pt, const fl_ckpt *ck, const char *prefix);

/* core_tier.c: the disk tier */
/* Copy the store into the data directory's temporary (every table's
 * stripes locked): whole, or at a delta the rows demoted since the last
 * checkpoint that marked its rows saved (mark). */
fl_status psc_tier_snapshot(fl_ps_core *c, int delta, int mark);
/* The copy becomes the one of checkpoint file path (path.tier), before
 * that file is committed (a file never lacks its copy). */
fl_status psc_tier_place(fl_ps_core *c, const char *path);
/* Remove the copies whose checkpoint file is gone. */
void psc_tier_prune(fl_ps_core *c);
/* Phase 1 of a load of checkpoint file: its disk copy fits this pserver.
 * Phase 2, once the rows of file (and of the deltas replayed after it)
 * are in memory: the store becomes file's copy and the tables settle
 * against it (fl_ps_table_tier_settle; no table lock held). */
fl_status psc_tier_check_load(fl_ps_core *c, const char *file);
fl_status psc_tier_load(fl_ps_core *c, const char *file);
/* psc_tier_load of base file and the n deltas replayed after it, in
 * order (their deletions and copies replayed onto the base's copy). */
fl_status psc_tier_load_chain(fl_ps_core *c, const char *file, char (*deltas)[4096], size_t n);
/* 1 when delta, replayed after base, lacks the disk copy that base has
 * (it was lost: the chain stops before it). */
int psc_tier_copy_missing(fl_ps_core *c, const char *base, const char *delta);
/* 1 when delta's disk copy is truncated or corrupt (logged: the chain
 * stops before it). */
int psc_tier_copy_bad(fl_ps_core *c, const char *delta);
/* 0 when the disk tier cannot take a delta's copy now (its record of
 * demoted rows lost an entry, logged then): the checkpoint is a base. */
int psc_tier_delta_ok(fl_ps_core *c);

/* core_barrier.c */
/* Complete b when every counted trainer arrived.  c->mu held. */
int psc_barrier_try_complete(fl_ps_core *c, ps_barrier *b);

/* core_ckpt.c */
/* Call the gate hook (no core lock held) when every block stands at the
 * gate's step. */
void psc_gate_reached(fl_ps_core *c);
/* What a checkpoint written by psc_write_state is. */
typedef struct psc_ckpt_kind {
  int delta;         /* only the rows changed since the last checkpoint */
  int mark;          /* what is written counts as saved (a directory's) */
  uint64_t nonce;    /* its base's (ps/ckpt_nonce); 0: none written */
  int64_t base, seq; /* a delta's base step and number (1, 2, ...) */
} psc_ckpt_kind;
/* Write the state into w (the caller commits or aborts it); *step gets the
 * step it holds.  Takes the block and table locks one at a time. */
fl_status psc_write_state(fl_ps_core *c, fl_ckpt_writer *w, const psc_ckpt_kind *k,
                          int64_t *step);
/* fl_ps_core_load but the disk tier's step (psc_tier_load): the rows go
 * to memory only, the store is left as it is (a chain's loads, then the
 * copy of the last file loaded). */
fl_status psc_load_rows(fl_ps_core *c, const fl_ckpt *ck, const char *file);
/* Expire every table's old rows (when expire) and publish the tables'
 * admission, expiry and eviction counters in /metrics.  No lock held
 * (takes each table's). */
void psc_sparse_sweep(fl_ps_core *c, int expire);
/* The wall clock in seconds since the epoch (rows' last-seen times). */
double psc_wall_now(void);

#endif
