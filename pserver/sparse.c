/* sparse.c - one sparse (embedding) table of a pserver: rows of dim floats
 * keyed by uint64 ids in an open-addressing hash (linear probing,
 * backward-shift deletion), rows created on first touch with a seeded
 * uniform init, per-row SGD / Adagrad / Adam / row-wise Adagrad / FTRL
 * through the kernels library (each row one tensor of the step, its state
 * fl_optim_state_len floats per buffer: dim, or 1 for row-wise Adagrad's
 * one accumulator), and an exact LRU list so that a table at max_rows evicts the row unseen
 * longest.  Each row is one record (key, bookkeeping, value, state: row_meta)
 * and rows live densely in [0, n): an evicted row's slot is reused by
 * the row that replaces it, a deleted row's by the last row.  Admission
 * (a count-min sketch, admit.c) keeps ids seen fewer than admit_threshold
 * times in training pulls out of the table; expiry deletes rows unseen for
 * a number of the table's steps or seconds, walking from the LRU tail; the
 * rows seen and the keys deleted since the last checkpoint are kept for
 * delta checkpoints.  The core serializes access (one lock per stripe:
 * core_stripes.c). */
#include <config.h>

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_ps.h"
#include "fl_ps_layout.h"
#include "tier_rocks.h"
#include "ps_admit.h"

#define MAX_DIM (1u << 16)

/* A row's record: its key and the bookkeeping that a pull or push reads
 * or writes, followed in the same record by the row's value (dim floats)
 * and each optimizer state buffer (slen floats each), so that a row seen
 * costs the misses of one record (two cache lines for the DLRM example's
 * rows of 8 floats and Adagrad) instead of one per array. */
typedef struct row_meta {
  uint64_t key;
  int64_t step;     /* the table's clock when last seen */
  double time;      /* now when last seen */
  int64_t t;        /* update count (Adam's bias correction) */
  int32_t prev;     /* LRU: toward the most recent (head) */
  int32_t next;     /* LRU: toward the least recent (tail) */
} row_meta;

#define REC_ALIGN 64 /* the records' array starts on a cache line */

struct fl_ps_table {
  char name[128];
  uint32_t dim;
  int64_t max_rows;
  float init_range;
  uint64_t seed;
  uint64_t name_hash;
  fl_optim_hparams hp;
  float lr;
  int nstate;
  size_t slen; /* floats per row in each state buffer */
  int has_padding;
  uint64_t padding_id;
  uint64_t padding_dropped;

  size_t n, cap;
  unsigned char *rec; /* cap records of rsz bytes (row_meta, value, state) */
  size_t rsz;
  int32_t head, tail;

  int32_t *slots; /* hash slots: row index or -1 */
  size_t nslots;  /* power of two, > 2 * cap */
  fl_ps_table_counts counts;

  /* The disk tier (NULL: none; see the end of this file). */
  fl_ps_tier *tier;
  _Atomic uint64_t *hot_bytes;
  uint64_t hot_budget, row_bytes, tier_id;
  size_t blob; /* a row's bytes in the tier: step, value, state, marks */
  int64_t legacy_step; /* the marks of disk rows without theirs: the load's */
  double legacy_time;
  int tier_broken; /* a demotion failed: rows stay in memory */
  int loading;     /* a checkpoint loads: capacity not bounded by the budget */
  size_t pf_n, pf_cap; /* a call's misses, looked up at once: sorted keys */
  uint64_t *pf_keys;
  unsigned char *pf_rows;
  uint8_t *pf_found, *pf_used;
  uint64_t *pf_seqs; /* their demotion sequences */
  unsigned char *one, *out; /* one row looked up, one row demoted */
  uint64_t *used;       /* per row: its last use (use_clock), the disk's order */
  uint64_t use_clock;
  uint8_t *prob;        /* per row: in the window, not yet admitted by frequency */
  size_t nprob, win_cap;
  uint64_t *win;        /* the window's keys, oldest first (a ring; stale ones skipped) */
  size_t win_at, win_n, win_ring;
  uint8_t *fq;          /* frequency sketch: FQ_DEPTH rows of fq_w 4-bit counters */
  size_t fq_w;
  uint64_t fq_adds;
  fl_ps_sketch *sketch; /* admission; NULL: every id is admitted */
  int sketch_shared;    /* sketch is another stripe's (not freed here) */
  uint32_t admit_threshold;
  float admit_default;
  int64_t expire_steps;
  double expire_s;
  int64_t clock;        /* the table's steps: pushes applied */
  double now;           /* wall clock of the last expiry sweep */
  uint8_t *dirty;       /* per row: seen or changed since the last checkpoint;
                           these rows lead the LRU list (see first_saved) */
  int track;            /* keep deleted keys for delta checkpoints */
  uint64_t *tomb;       /* keys deleted since the last checkpoint */
  size_t ntomb, tomb_cap;
  uint64_t *moved;      /* keys seen or changed since then, demoted since */
  size_t nmoved, moved_cap, moved_uniq; /* unique: the first moved_uniq */
  int tomb_overflow;    /* more than max_rows of them: the next must be whole */
  fl_optim_tensor *steps; /* a push's rows stepped together, steps_cap of them */
  size_t steps_cap;
};

/* Row r's record, its value and its state buffers. */
static inline row_meta *ROW(const fl_ps_table *t, int32_t r) {
  return (row_meta *)(void *)(t->rec + (size_t)r * t->rsz);
}
static inline float *VAL(const fl_ps_table *t, int32_t r) {
  return (float *)(void *)(t->rec + (size_t)r * t->rsz + sizeof(row_meta));
}
static inline float *S1(const fl_ps_table *t, int32_t r) { return VAL(t, r) + t->dim; }
static inline float *S2(const fl_ps_table *t, int32_t r) { return VAL(t, r) + t->dim + t->slen; }

static fl_status tier_setup(fl_ps_table *t, const fl_ps_table_opts *o);
static fl_status tier_get_row(fl_ps_table *t, uint64_t key, int32_t *out);
static fl_status tier_lookup(fl_ps_table *t, uint64_t key, const unsigned char **b, int *found,
                             uint64_t *seq);
static fl_status tier_place(fl_ps_table *t, uint64_t key, const unsigned char *b, int found,
                            uint64_t seq, int32_t *out);
static size_t tier_expire(fl_ps_table *t);
static fl_status tier_prefetch(fl_ps_table *t, const uint64_t *keys, size_t n);
static fl_status tier_read(const fl_ps_table *t, const uint64_t *keys, size_t n, float *out);
static fl_status tier_has(fl_ps_table *t, uint64_t key, int *found);
static fl_status tier_dump_merge(const fl_ps_table *t, int has_after, uint64_t after, size_t max,
                                 uint64_t *keys, float *vals, size_t *n, int *more);
static void tier_free(fl_ps_table *t);
static size_t tier_cap(const fl_ps_table *t, size_t nc);
static void tier_forget_rows(fl_ps_table *t);
static void take_tail(fl_ps_table *t, int32_t *r);

static void note_key(fl_ps_table *t, uint64_t **list, size_t *n, size_t *cap, int64_t lim,
                     uint64_t key);

static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
  return h;
}

const char *fl_ps_table_name(const fl_ps_table *t) { return t->name; }
uint32_t fl_ps_table_dim(const fl_ps_table *t) { return t->dim; }
size_t fl_ps_table_rows(const fl_ps_table *t) { return t->n; }
uint64_t fl_ps_table_padding_dropped(const fl_ps_table *t) { return t->padding_dropped; }

/* 1 when key is the table's padding id (never a row). */
static int is_padding(const fl_ps_table *t, uint64_t key) {
  return t->has_padding && key == t->padding_id;
}

uint64_t fl_ps_table_evicted(const fl_ps_table *t) { return t->counts.evicted; }
void fl_ps_table_counts_of(const fl_ps_table *t, fl_ps_table_counts *out) { *out = t->counts; }

/* The admission and expiry options of o into t (sketch made).  A bad one:
 * FL_EINVAL, logged. */
static fl_status set_admission(fl_ps_table *t, const fl_ps_table_opts *o) {
  if (o->expire_after_steps < 0 || !(o->expire_after_seconds >= 0) || !isfinite(o->admit_default))
    return FL_ERR(FL_EINVAL, "sparse table %s: expire_after_steps / expire_after_seconds below 0 "
                  "or admit_default not finite", o->name);
  t->admit_threshold = o->admit_threshold;
  t->admit_default = o->admit_default;
  t->expire_steps = o->expire_after_steps;
  t->expire_s = o->expire_after_seconds;
  t->now = o->now;
  t->legacy_time = o->now;
  t->track = o->track_changes;
  if (o->admit_threshold < 2) return FL_OK;
  if (o->sketch_of) {
    t->sketch = o->sketch_of->sketch;
    t->sketch_shared = 1;
    return FL_OK;
  }
  return fl_ps_sketch_create(o->admit_sketch_bytes, o->seed ^ t->name_hash, &t->sketch);
}

/* A record's size for a row of b bytes: whole cache lines when that costs
 * at most a quarter more memory (a record over one more line than it
 * needs costs a miss more on half the rows: the DLRM example's 104-byte
 * rows in 128 bytes took 10% less CPU in the table loop), else a
 * multiple of 8 (row_meta's alignment). */
static size_t rec_size(size_t b) {
  const size_t lines = (b + REC_ALIGN - 1) / REC_ALIGN * REC_ALIGN;
  return 4 * lines <= 5 * b ? lines : (b + 7) & ~(size_t)7;
}

fl_status fl_ps_table_create(const fl_ps_table_opts *o, fl_ps_table **out) {
  fl_ps_table *t;
  *out = NULL;
  if (!o->name || !o->name[0] || strlen(o->name) >= sizeof t->name)
    return FL_ERR(FL_EINVAL, "sparse table: name missing or longer than %zu bytes",
                  sizeof t->name - 1);
  if (o->dim == 0 || o->dim > MAX_DIM)
    return FL_ERR(FL_EINVAL, "sparse table %s: dim %u not in [1, %u]", o->name, o->dim, MAX_DIM);
  if (o->max_rows < 1 || o->max_rows > INT32_MAX / 2)
    return FL_ERR(FL_EINVAL, "sparse table %s: max_rows %lld not in [1, %d]", o->name,
                  (long long)o->max_rows, INT32_MAX / 2);
  if (!fl_proto_sparse_optim_ok(o->hp.kind))
    return FL_ERR(FL_EINVAL, "sparse table %s: optimizer %s (" FL_PROTO_SPARSE_OPTIMS " only)", o->name,
                  fl_optim_kind_name(o->hp.kind));
  if (fl_optim_hparams_check(&o->hp) != FL_OK || !(o->lr >= 0) || !(o->init_range >= 0))
    return FL_ERR(FL_EINVAL, "sparse table %s: bad optimizer settings or init range", o->name);
  if (o->hp.kind == FL_OPTIM_FTRL && !(o->lr > 0))
    return FL_ERR(FL_EINVAL, "sparse table %s: ftrl needs lr (its alpha) > 0", o->name);
  t = calloc(1, sizeof *t);
  if (!t) return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory", o->name);
  snprintf(t->name, sizeof t->name, "%s", o->name);
  t->dim = o->dim;
  t->max_rows = o->max_rows;
  t->init_range = o->init_range;
  t->seed = o->seed;
  t->name_hash = str_hash(o->name);
  t->hp = o->hp;
  t->hp.num_threads = 1; /* rows are tiny: no thread team per row */
  t->hp.exclude_from_weight_decay = NULL;
  t->hp.n_exclude = 0;
  t->lr = o->lr;
  t->nstate = fl_optim_state_count(o->hp.kind);
  t->slen = fl_optim_state_len(o->hp.kind, o->dim);
  t->rsz = rec_size(sizeof(row_meta) + (o->dim + (size_t)t->nstate * t->slen) * sizeof(float));
  t->has_padding = o->has_padding;
  t->padding_id = o->padding_id;
  t->head = t->tail = -1;
  {
    fl_status st = o->tier && tier_setup(t, o) != FL_OK
                       ? FL_ERR(FL_ENOMEM, "sparse table %s: out of memory", o->name)
                       : FL_OK;
    if (st == FL_OK) st = set_admission(t, o);
    if (st != FL_OK) {
      fl_ps_table_free(t);
      return st;
    }
  }
  *out = t;
  return FL_OK;
}

void fl_ps_table_free(fl_ps_table *t) {
  if (!t) return;
  tier_free(t);
  free(t->rec);
  free(t->slots);
  free(t->dirty);
  free(t->tomb);
  free(t->moved);
  free(t->steps);
  if (!t->sketch_shared) fl_ps_sketch_free(t->sketch);
  free(t);
}

/* ------------------------------------------------------------------- hash */

static size_t slot_of(const fl_ps_table *t, uint64_t key) {
  return (size_t)(fl_ps_mix64(key ^ t->name_hash) & (t->nslots - 1));
}

static int32_t find(const fl_ps_table *t, uint64_t key) {
  size_t i;
  if (!t->nslots) return -1;
  for (i = slot_of(t, key);; i = (i + 1) & (t->nslots - 1)) {
    int32_t r = t->slots[i];
    if (r < 0) return -1;
    if (ROW(t, r)->key == key) return r;
  }
}

static void slot_insert(fl_ps_table *t, uint64_t key, int32_t row) {
  size_t i = slot_of(t, key);
  while (t->slots[i] >= 0) i = (i + 1) & (t->nslots - 1);
  t->slots[i] = row;
}

/* Remove key's slot, shifting later entries of its probe run back. */
static void slot_delete(fl_ps_table *t, uint64_t key) {
  size_t mask = t->nslots - 1, i = slot_of(t, key), j;
  while (ROW(t, t->slots[i])->key != key) i = (i + 1) & mask;
  j = i;
  for (;;) {
    size_t home;
    t->slots[i] = -1;
    for (;;) {
      j = (j + 1) & mask;
      if (t->slots[j] < 0) return;
      home = slot_of(t, ROW(t, t->slots[j])->key);
      /* Entry j may move to i when its home is not in (i, j] cyclically. */
      if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) break;
    }
    t->slots[i] = t->slots[j];
    i = j;
  }
}

/* Keys looked up ahead together (prefetch_rows). */
#define AHEAD 16

/* Load what the next n (at most AHEAD) keys' lookups and updates read:
 * their hash slots first, then their rows' records (the first and the
 * last byte: every cache line of a record of up to 128 bytes), then their
 * LRU neighbours' bookkeeping.  The tables
 * outgrow the caches and the TLB, so a row costs several misses that,
 * taken one after the other, are most of a pull's or push's time; the
 * loads of each stage here are independent, so their misses overlap.
 * Plain loads, not prefetch hints: hints that miss the TLB may be dropped
 * (measured: they gained nothing here).  It changes nothing. */
static void prefetch_rows(const fl_ps_table *t, const uint64_t *keys, size_t n) {
  int32_t r[AHEAD];
  uint64_t acc = 0;
  volatile uint64_t sink;
  if (!t->nslots) return;
  for (size_t i = 0; i < n; i++) r[i] = t->slots[slot_of(t, keys[i])];
  for (size_t i = 0; i < n; i++) {
    if (r[i] < 0) continue;
    const unsigned char *b = (const unsigned char *)ROW(t, r[i]);
    acc ^= ROW(t, r[i])->key ^ b[t->rsz - 1];
  }
  for (size_t i = 0; i < n; i++) {
    if (r[i] < 0) continue;
    if (ROW(t, r[i])->prev >= 0) acc ^= (uint64_t)ROW(t, ROW(t, r[i])->prev)->step;
    if (ROW(t, r[i])->next >= 0) acc ^= (uint64_t)ROW(t, ROW(t, r[i])->next)->step;
  }
  sink = acc; /* the loads are kept */
  (void)sink;
}

/* ---------------------------------------------------------------- storage */

/* The records' array at nc rows, aligned to a cache line (realloc aligns
 * to 16 bytes only); the live rows kept. */
static fl_status grow_rec(fl_ps_table *t, size_t nc) {
  const size_t a = REC_ALIGN, keep = t->n < nc ? t->n : nc;
  unsigned char *m = aligned_alloc(a, (nc * t->rsz + a - 1) / a * a); /* C11: a multiple of a */
  if (!m) return FL_ENOMEM;
  if (keep) memcpy(m, t->rec, keep * t->rsz);
  free(t->rec);
  t->rec = m;
  return FL_OK;
}

static fl_status grow(fl_ps_table *t) {
  size_t nc = t->cap ? t->cap * 2 : 1024;
  size_t ns;
  if ((int64_t)nc > t->max_rows) nc = (size_t)t->max_rows;
  if (t->tier) nc = tier_cap(t, nc);
#define GROW(field, count)                                                   \
  do {                                                                       \
    void *p_ = realloc(t->field, (count) * sizeof *t->field);                \
    if (!p_) goto nomem;                                                     \
    t->field = p_;                                                           \
  } while (0)
  if (grow_rec(t, nc) != FL_OK) goto nomem;
  GROW(dirty, nc);
  if (t->tier) {
    GROW(used, nc);
    GROW(prob, nc);
  }
#undef GROW
  t->cap = nc;
  for (ns = 16; ns < 2 * nc + 1; ns *= 2) {
  }
  if (ns != t->nslots) {
    int32_t *slots = malloc(ns * sizeof *slots);
    if (!slots) goto nomem;
    free(t->slots);
    t->slots = slots;
    t->nslots = ns;
    memset(slots, 0xff, ns * sizeof *slots);
    for (size_t r = 0; r < t->n; r++) slot_insert(t, ROW(t, r)->key, (int32_t)r);
  }
  return FL_OK;
nomem:
  return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory growing to %zu rows", t->name, nc);
}

static void lru_unlink(fl_ps_table *t, int32_t r) {
  if (ROW(t, r)->prev >= 0) ROW(t, ROW(t, r)->prev)->next = ROW(t, r)->next;
  else t->head = ROW(t, r)->next;
  if (ROW(t, r)->next >= 0) ROW(t, ROW(t, r)->next)->prev = ROW(t, r)->prev;
  else t->tail = ROW(t, r)->prev;
}

static void lru_push_head(fl_ps_table *t, int32_t r) {
  ROW(t, r)->prev = -1;
  ROW(t, r)->next = t->head;
  if (t->head >= 0) ROW(t, t->head)->prev = r;
  t->head = r;
  if (t->tail < 0) t->tail = r;
}

/* Row r was seen now: the most recent, stamped, kept for the next delta. */
static void touch(fl_ps_table *t, int32_t r) {
  ROW(t, r)->step = t->clock;
  ROW(t, r)->time = t->now;
  t->dirty[r] = 1;
  if (t->used) t->used[r] = ++t->use_clock;
  if (t->head == r) return;
  lru_unlink(t, r);
  lru_push_head(t, r);
}

/* Keep key in list (*n of *cap, at most lim) for the next delta (when
 * tracking). */
static void note_key(fl_ps_table *t, uint64_t **list, size_t *n, size_t *cap, int64_t lim,
                     uint64_t key) {
  if (!t->track || t->tomb_overflow) return;
  if ((int64_t)*n >= lim) {
    t->tomb_overflow = 1; /* a whole checkpoint is smaller than this delta */
    return;
  }
  if (*n == *cap) {
    size_t nc = *cap ? 2 * *cap : 256;
    uint64_t *p = realloc(*list, nc * sizeof *p);
    if (!p) {
      t->tomb_overflow = 1; /* the next checkpoint is whole instead */
      return;
    }
    *list = p;
    *cap = nc;
  }
  (*list)[(*n)++] = key;
}

/* Keep key, deleted, for the next delta (when tracking). */
static void note_deleted(fl_ps_table *t, uint64_t key) {
  note_key(t, &t->tomb, &t->ntomb, &t->tomb_cap, t->max_rows, key);
}

/* Deterministic uniform init of the row of key in [-r, r]. */
static void init_row(const fl_ps_table *t, uint64_t key, float *v) {
  uint64_t base = fl_ps_mix64(t->seed ^ fl_ps_mix64(t->name_hash ^ key));
  for (uint32_t j = 0; j < t->dim; j++) {
    uint64_t x = fl_ps_mix64(base + 0x9e3779b97f4a7c15ULL * (j + 1));
    float u = (float)(x >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
    v[j] = (2.0f * u - 1.0f) * t->init_range;
  }
}

/* Row r's optimizer state viewed as the kernels' tensor (no param/grad). */
static fl_optim_tensor state_of(const fl_ps_table *t, int32_t r) {
  fl_optim_tensor x;
  memset(&x, 0, sizeof x);
  x.state1 = t->nstate >= 1 ? S1(t, r) : NULL;
  x.state2 = t->nstate >= 2 ? S2(t, r) : NULL;
  x.n = t->dim;
  return x;
}

/* A new row for key (absent), evicting the least recent row when full;
 * the most recent, seen now; its value v (dim floats), or the seeded
 * init when v is NULL. */
static fl_status create_row(fl_ps_table *t, uint64_t key, const float *v, int32_t *out) {
  int32_t r;
  if ((int64_t)t->n >= t->max_rows) {
    r = t->tail;
    lru_unlink(t, r);
    slot_delete(t, ROW(t, r)->key);
    note_deleted(t, ROW(t, r)->key);
    t->counts.evicted++;
  } else {
    if (t->n == t->cap) FL_TRY(grow(t));
    r = (int32_t)t->n++;
  }
  ROW(t, r)->key = key;
  if (v) memcpy(VAL(t, r), v, t->dim * sizeof(float));
  else init_row(t, key, VAL(t, r));
  if (t->nstate >= 1) {
    fl_optim_tensor x = state_of(t, r);
    if (fl_optim_init_state(&t->hp, &x, 1) != FL_OK)
      return FL_ERR(FL_EINVAL, "sparse table %s: %s refused to set up a row's state", t->name,
                    fl_optim_kind_name(t->hp.kind));
  }
  ROW(t, r)->t = 0;
  slot_insert(t, key, r);
  lru_push_head(t, r);
  touch(t, r);
  *out = r;
  return FL_OK;
}

/* The row of key, taken from the disk tier or created (no admission). */
static fl_status get_row(fl_ps_table *t, uint64_t key, int32_t *out) {
  int32_t r = find(t, key);
  if (r >= 0) {
    *out = r;
    return FL_OK;
  }
  if (!t->tier) return create_row(t, key, NULL, out);
  FL_TRY(tier_get_row(t, key, out));
  touch(t, *out); /* stamped as seen now */
  return FL_OK;
}

/* Move row `from` (the last) into the free index `to`: data, slot, LRU
 * links. */
static void move_row(fl_ps_table *t, int32_t from, int32_t to) {
  size_t i = slot_of(t, ROW(t, from)->key);
  while (t->slots[i] != from) i = (i + 1) & (t->nslots - 1);
  t->slots[i] = to;
  memcpy(ROW(t, to), ROW(t, from), t->rsz);
  t->dirty[to] = t->dirty[from];
  if (t->used) {
    t->used[to] = t->used[from];
    t->prob[to] = t->prob[from];
  }
  if (ROW(t, to)->prev >= 0) ROW(t, ROW(t, to)->prev)->next = to;
  else t->head = to;
  if (ROW(t, to)->next >= 0) ROW(t, ROW(t, to)->next)->prev = to;
  else t->tail = to;
}

/* Free index r (unlinked, out of the hash): the last row takes it, so
 * rows stay in [0, n). */
static void free_index(fl_ps_table *t, int32_t r) {
  int32_t last = (int32_t)t->n - 1;
  if (t->prob && t->prob[r]) t->nprob--;
  if (r != last) move_row(t, last, r);
  t->n--;
  if (t->tier) atomic_fetch_sub(t->hot_bytes, t->row_bytes);
}

/* Delete row r (noted for the next delta). */
static void drop_row(fl_ps_table *t, int32_t r) {
  lru_unlink(t, r);
  slot_delete(t, ROW(t, r)->key);
  note_deleted(t, ROW(t, r)->key);
  free_index(t, r);
}

/* The row of key for training: created when absent and admitted (then
 * counted), else -1 (a training pull's sighting counted when pull). */
static fl_status train_row(fl_ps_table *t, uint64_t key, int pull, int32_t *out) {
  int32_t r = find(t, key);
  const unsigned char *b = NULL;
  int found = 0;
  uint64_t seq = 0;
  *out = r;
  if (r >= 0) return FL_OK;
  if (t->tier) { /* a row on disk is a row: promoted, not admitted again */
    FL_TRY(tier_lookup(t, key, &b, &found, &seq));
    if (found) return tier_place(t, key, b, 1, seq, out);
  }
  if (t->sketch) {
    if (!pull) return FL_OK; /* a gradient of an id without a row: dropped */
    if (fl_ps_sketch_add(t->sketch, key) < t->admit_threshold) {
      t->counts.refused++;
      return FL_OK;
    }
  }
  t->counts.admitted++;
  return t->tier ? tier_place(t, key, NULL, 0, 0, out) : create_row(t, key, NULL, out);
}

fl_status fl_ps_table_pull(fl_ps_table *t, const uint64_t *keys, size_t n, float *out) {
  size_t d = t->dim;
  if (t->tier) FL_TRY(tier_prefetch(t, keys, n));
  for (size_t i = 0; i < n; i++) {
    int32_t r;
    if (i % AHEAD == 0) prefetch_rows(t, keys + i, n - i < AHEAD ? n - i : AHEAD);
    if (is_padding(t, keys[i])) {
      memset(out + i * d, 0, d * sizeof(float));
      continue;
    }
    FL_TRY(train_row(t, keys[i], 1, &r));
    if (r < 0) {
      for (size_t j = 0; j < d; j++) out[i * d + j] = t->admit_default;
      continue;
    }
    touch(t, r);
    memcpy(out + i * d, VAL(t, r), d * sizeof(float));
  }
  return FL_OK;
}

/* Step the pending rows xs[0..*nx) together (one thread, in order: the
 * same operations as one call per row); *nx becomes 0. */
static fl_status step_rows(fl_ps_table *t, size_t *nx) {
  const size_t n = *nx;
  *nx = 0;
  return n ? fl_optim_step(&t->hp, t->steps, n, t->lr, 1) : FL_OK;
}

fl_status fl_ps_table_push(fl_ps_table *t, const uint64_t *keys, size_t n, const float *g) {
  size_t d = t->dim, nx = 0;
  /* Adam's bias correction counts each row's own updates: one call per
   * row; the other optimizers step a push's rows in one call, made before
   * a row is created (creating a row may evict, and reuse the memory of,
   * a pending one).  A key repeated within a push is applied twice, in
   * order, like two pushes.  A key not admitted has no row: its gradient
   * is dropped. */
  const int per_row = t->hp.kind == FL_OPTIM_ADAM || t->hp.kind == FL_OPTIM_ADAMW;
  if (t->tier) FL_TRY(tier_prefetch(t, keys, n));
  if (!per_row && t->steps_cap < n) {
    fl_optim_tensor *p = realloc(t->steps, n * sizeof *p);
    if (!p) return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory for a push of %zu rows",
                          t->name, n);
    t->steps = p;
    t->steps_cap = n;
  }
  t->clock++;
  for (size_t i = 0; i < n; i++) {
    int32_t r;
    if (i % AHEAD == 0) prefetch_rows(t, keys + i, n - i < AHEAD ? n - i : AHEAD);
    if (is_padding(t, keys[i])) {
      t->padding_dropped++;
      continue;
    }
    if ((r = find(t, keys[i])) < 0) {
      FL_TRY(step_rows(t, &nx));
      FL_TRY(train_row(t, keys[i], 0, &r));
      if (r < 0) continue;
    }
    touch(t, r);
    fl_optim_tensor x = state_of(t, r);
    x.param = VAL(t, r);
    x.grad = g + i * d;
    ++ROW(t, r)->t;
    if (per_row) FL_TRY(fl_optim_step(&t->hp, &x, 1, t->lr, ROW(t, r)->t));
    else t->steps[nx++] = x;
  }
  return step_rows(t, &nx);
}

void fl_ps_table_tick(fl_ps_table *t) { t->clock++; }

fl_status fl_ps_table_read(const fl_ps_table *t, const uint64_t *keys, size_t n, float *out) {
  size_t d = t->dim;
  if (t->tier) return tier_read(t, keys, n, out);
  for (size_t i = 0; i < n; i++) {
    if (i % AHEAD == 0) prefetch_rows(t, keys + i, n - i < AHEAD ? n - i : AHEAD);
    int32_t r = find(t, keys[i]);
    if (is_padding(t, keys[i])) memset(out + i * d, 0, d * sizeof(float));
    else if (r >= 0) memcpy(out + i * d, VAL(t, r), d * sizeof(float));
    else if (!t->sketch) init_row(t, keys[i], out + i * d);
    else
      for (size_t j = 0; j < d; j++) out[i * d + j] = t->admit_default;
  }
  return FL_OK;
}

/* Whether marks (step, time) are past the expiry limits. */
static int is_old(const fl_ps_table *t, int64_t step, double time) {
  return (t->expire_steps > 0 && t->clock - step >= t->expire_steps) ||
         (t->expire_s > 0 && t->now - time >= t->expire_s);
}

/* Each tier is walked from its least recent row while the rows are due:
 * a row's marks only grow with its last use, so the rows due are the
 * least recent ones of both tiers together, the same as all in memory. */
size_t fl_ps_table_expire(fl_ps_table *t, double now) {
  size_t k = 0;
  if (now > t->now) t->now = now;
  if (t->tier && (t->expire_steps > 0 || t->expire_s > 0)) k = tier_expire(t);
  while (t->tail >= 0) {
    int32_t r = t->tail;
    if (!is_old(t, ROW(t, r)->step, ROW(t, r)->time)) break;
    drop_row(t, r);
    k++;
  }
  t->counts.expired += k;
  return k;
}

int fl_ps_table_peek(const fl_ps_table *t, uint64_t key, float *out) {
  int32_t r = find(t, key);
  if (r < 0) return 0;
  memcpy(out, VAL(t, r), t->dim * sizeof(float));
  return 1;
}

fl_status fl_ps_table_init(fl_ps_table *t, const uint64_t *keys, size_t n, const float *rows,
                           size_t *created) {
  size_t d = t->dim;
  *created = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t r;
    int on_disk = 0;
    if (is_padding(t, keys[i]) || find(t, keys[i]) >= 0) continue;
    if (t->tier) FL_TRY(tier_has(t, keys[i], &on_disk));
    if (on_disk) continue; /* an existing row, demoted: left as it is */
    if (t->tier) { /* a memory row made for it (its seeded init overwritten) */
      FL_TRY(get_row(t, keys[i], &r));
      memcpy(VAL(t, r), rows + i * d, d * sizeof(float));
    } else {
      FL_TRY(create_row(t, keys[i], rows + i * d, &r));
    }
    (*created)++;
  }
  return FL_OK;
}

/* Sift the max-heap h[0..n) down from i. */
static void heap_down(uint64_t *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    uint64_t x;
    if (l < n && h[l] > h[m]) m = l;
    if (l + 1 < n && h[l + 1] > h[m]) m = l + 1;
    if (m == i) return;
    x = h[i];
    h[i] = h[m];
    h[m] = x;
    i = m;
  }
}

static void heap_up(uint64_t *h, size_t i) {
  while (i > 0 && h[(i - 1) / 2] < h[i]) {
    uint64_t x = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = x;
    i = (i - 1) / 2;
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

fl_status fl_ps_table_dump(const fl_ps_table *t, int has_after, uint64_t after, size_t max,
                           uint64_t *keys, float *vals, size_t *n, int *more) {
  size_t d = t->dim, k = 0, seen = 0;
  /* The max smallest keys above after, kept in a max-heap in keys. */
  for (size_t r = 0; r < t->n; r++) {
    uint64_t key = ROW(t, r)->key;
    if (has_after && key <= after) continue;
    seen++;
    if (k < max) {
      keys[k] = key;
      heap_up(keys, k++);
    } else if (key < keys[0]) {
      keys[0] = key;
      heap_down(keys, k, 0);
    }
  }
  qsort(keys, k, sizeof *keys, cmp_u64);
  for (size_t i = 0; i < k; i++)
    memcpy(vals + i * d, VAL(t, find(t, keys[i])), d * sizeof(float));
  *n = k;
  *more = seen > k;
  return t->tier ? tier_dump_merge(t, has_after, after, max, keys, vals, n, more) : FL_OK;
}

/* ------------------------------------------------------------ checkpoints
 * Format 3 (FL_PS_TABLE_FORMAT) writes the records "format", "optimizer"
 * (the fl_optim_kind whose state the rows hold), "clock", "counts" and,
 * with admission, "sketch" / "sketch_total"; per row keys, steps, values,
 * each state buffer as [rows, fl_optim_state_len], seen_step and
 * seen_time; a delta adds "delta" (1) and "deleted".  Format 2 has no
 * marks, clock, counts or sketch (rows load as seen at the load); format 1
 * (no "format" record, before row-wise Adagrad and FTRL) held the server's
 * sgd, adagrad or adam state as [rows, dim], the same shapes as format 2,
 * and still loads.  A table of several stripes (fl_ps_table_save_many)
 * writes format 3 too: its rows stripe after stripe, the counters summed,
 * the clock and the sketch the stripes share; its load puts each row in
 * its stripe.  (Builds before admission, expiry and deltas were striped
 * wrote such a table as format 2, which loads the same way.) */

fl_optim_kind fl_ps_table_kind(const fl_ps_table *t) { return t->hp.kind; }

/* The rows copied out for a checkpoint, least recently seen first (stripe
 * after stripe). */
typedef struct rows_out {
  size_t n;
  uint64_t *keys;
  int64_t *steps, *sstep;
  double *stime;
  float *v, *a, *b;
} rows_out;

static void rows_out_free(rows_out *o) {
  free(o->keys);
  free(o->steps);
  free(o->sstep);
  free(o->stime);
  free(o->v);
  free(o->a);
  free(o->b);
}

/* The least recently seen row of t to save (only_dirty: of those seen
 * since the last checkpoint), -1 when none; the rows to save follow it
 * toward the head.  The rows seen since the last checkpoint lead the LRU
 * list (a touch marks a row and moves it to the head, mark_saved clears
 * them all), so a delta finds them from the head, looking at no other. */
static int32_t first_saved(const fl_ps_table *t, int only_dirty, size_t *n) {
  int32_t first = -1;
  if (!only_dirty) {
    *n = t->n;
    return t->tail;
  }
  *n = 0;
  for (int32_t r = t->head; r >= 0 && t->dirty[r]; r = ROW(t, r)->next, (*n)++) first = r;
  return first;
}

/* Copy the rows of stripe t to save into o from index *i on. */
static void gather_one(const fl_ps_table *t, int only_dirty, rows_out *o, size_t *i) {
  size_t d = t->dim, sl = t->slen, n;
  for (int32_t r = first_saved(t, only_dirty, &n); r >= 0; r = ROW(t, r)->prev, (*i)++) {
    o->keys[*i] = ROW(t, r)->key;
    o->steps[*i] = ROW(t, r)->t;
    o->sstep[*i] = ROW(t, r)->step;
    o->stime[*i] = ROW(t, r)->time;
    memcpy(o->v + *i * d, VAL(t, r), d * sizeof *o->v);
    if (o->a) memcpy(o->a + *i * sl, S1(t, r), sl * sizeof *o->a);
    if (o->b) memcpy(o->b + *i * sl, S2(t, r), sl * sizeof *o->b);
  }
}

/* Copy the rows of ns stripes (only_dirty: those seen since the last
 * checkpoint), stripe after stripe, each oldest first: loading into as
 * many stripes gives each its rows in the same order. */
static fl_status gather(const fl_ps_table *const *ts, size_t ns, int only_dirty, rows_out *o) {
  const fl_ps_table *t = ts[0];
  size_t n = 0, d = t->dim, sl = t->slen, m, i = 0, k;
  memset(o, 0, sizeof *o);
  for (size_t s = 0; s < ns; s++) {
    first_saved(ts[s], only_dirty, &k);
    n += k;
  }
  m = n ? n : 1;
  o->n = n;
  o->keys = malloc(m * sizeof *o->keys);
  o->steps = malloc(m * sizeof *o->steps);
  o->sstep = malloc(m * sizeof *o->sstep);
  o->stime = malloc(m * sizeof *o->stime);
  o->v = malloc(m * d * sizeof *o->v);
  o->a = t->nstate >= 1 ? malloc(m * sl * sizeof *o->a) : NULL;
  o->b = t->nstate >= 2 ? malloc(m * sl * sizeof *o->b) : NULL;
  if (!o->keys || !o->steps || !o->sstep || !o->stime || !o->v || (t->nstate >= 1 && !o->a) ||
      (t->nstate >= 2 && !o->b))
    return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory saving %zu rows", t->name, n);
  for (size_t s = 0; s < ns; s++) gather_one(ts[s], only_dirty, o, &i);
  return FL_OK;
}

static fl_status put(fl_ckpt_writer *w, const char *prefix, const char *suffix, fl_ckpt_dtype dt,
                     int nd, const int64_t *shape, const void *data) {
  char name[FL_CKPT_NAME_MAX];
  snprintf(name, sizeof name, "%s%s", prefix, suffix);
  return fl_ckpt_put(w, name, dt, nd, shape, data);
}

static fl_status put_i64(fl_ckpt_writer *w, const char *prefix, const char *suffix, int64_t v) {
  return put(w, prefix, suffix, FL_CKPT_I64, 0, NULL, &v);
}

/* The table's own records: format, optimizer, clock (every stripe's is
 * the table's), counts (summed over the stripes), sketch (shared). */
static fl_status put_head(const fl_ps_table *const *ts, size_t ns, fl_ckpt_writer *w,
                          const char *prefix) {
  const fl_ps_table *t = ts[0];
  int64_t four = 4, counts[4] = {0, 0, 0, 0};
  for (size_t s = 0; s < ns; s++) {
    counts[0] += (int64_t)ts[s]->counts.admitted;
    counts[1] += (int64_t)ts[s]->counts.refused;
    counts[2] += (int64_t)ts[s]->counts.expired;
    counts[3] += (int64_t)ts[s]->counts.evicted;
  }
  FL_TRY(put_i64(w, prefix, "format", FL_PS_TABLE_FORMAT));
  FL_TRY(put_i64(w, prefix, "optimizer", (int64_t)t->hp.kind));
  FL_TRY(put_i64(w, prefix, "clock", t->clock));
  FL_TRY(put(w, prefix, "counts", FL_CKPT_I64, 1, &four, counts));
  if (t->sketch) {
    size_t k;
    const uint32_t *cnt = fl_ps_sketch_counters(t->sketch, &k);
    int64_t shp = (int64_t)k;
    FL_TRY(put(w, prefix, "sketch", FL_CKPT_I32, 1, &shp, cnt));
    FL_TRY(put_i64(w, prefix, "sketch_total", (int64_t)fl_ps_sketch_total(t->sketch)));
  }
  return FL_OK;
}

static fl_status put_rows(const fl_ps_table *t, fl_ckpt_writer *w, const char *prefix,
                          const rows_out *o) {
  int64_t shape[2] = {(int64_t)o->n, (int64_t)t->dim};
  int64_t sshape[2] = {(int64_t)o->n, (int64_t)t->slen};
  FL_TRY(put(w, prefix, "keys", FL_CKPT_U64, 1, shape, o->keys));
  FL_TRY(put(w, prefix, "steps", FL_CKPT_I64, 1, shape, o->steps));
  FL_TRY(put(w, prefix, "values", FL_CKPT_F32, 2, shape, o->v));
  if (o->a) FL_TRY(put(w, prefix, "state1", FL_CKPT_F32, 2, sshape, o->a));
  if (o->b) FL_TRY(put(w, prefix, "state2", FL_CKPT_F32, 2, sshape, o->b));
  FL_TRY(put(w, prefix, "seen_step", FL_CKPT_I64, 1, shape, o->sstep));
  return put(w, prefix, "seen_time", FL_CKPT_F64, 1, shape, o->stime);
}

/* With the disk tier: "tier_ids", each stripe's table id in the store
 * (where a reader of the store copy finds the rows on disk). */
static fl_status put_tier_ids(const fl_ps_table *const *ts, size_t ns, fl_ckpt_writer *w,
                              const char *prefix) {
  uint64_t ids[64];
  int64_t n = (int64_t)ns;
  if (ns > sizeof ids / sizeof *ids)
    return FL_ERR(FL_EINVAL, "sparse table %s: %zu stripes, more than a checkpoint lists",
                  ts[0]->name, ns);
  for (size_t s = 0; s < ns; s++) ids[s] = ts[s]->tier_id;
  return put(w, prefix, "tier_ids", FL_CKPT_U64, 1, &n, ids);
}

/* The keys of a per-stripe list of ns stripes as a record under prefix:
 * "deleted" (deleted since the last checkpoint) or, when moved, "moved"
 * (with the disk tier: seen or changed since then and demoted since,
 * changes a serving export reads from the store copy; a row promoted or
 * deleted since may be among them). */
static fl_status put_keys(const fl_ps_table *const *ts, size_t ns, fl_ckpt_writer *w,
                          const char *prefix, int moved) {
  const char *what = moved ? "moved" : "deleted";
  size_t n = 0, i = 0;
  uint64_t *keys;
  fl_status st;
  int64_t nk;
  for (size_t s = 0; s < ns; s++) n += moved ? ts[s]->nmoved : ts[s]->ntomb;
  keys = malloc((n ? n : 1) * sizeof *keys);
  if (!keys)
    return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory saving %zu %s keys", ts[0]->name,
                  n, what);
  for (size_t s = 0; s < ns; s++) {
    size_t k = moved ? ts[s]->nmoved : ts[s]->ntomb;
    if (k) memcpy(keys + i, moved ? ts[s]->moved : ts[s]->tomb, k * sizeof *keys);
    i += k;
  }
  nk = (int64_t)n;
  st = put(w, prefix, what, FL_CKPT_U64, 1, &nk, keys);
  free(keys);
  return st;
}

/* A delta's records "delta", "deleted" and, with the disk tier, "moved". */
static fl_status put_deleted(const fl_ps_table *const *ts, size_t ns, fl_ckpt_writer *w,
                             const char *prefix) {
  FL_TRY(put_i64(w, prefix, "delta", 1));
  FL_TRY(put_keys(ts, ns, w, prefix, 0));
  return ts[0]->tier ? put_keys(ts, ns, w, prefix, 1) : FL_OK;
}

static fl_status save_any(const fl_ps_table *const *ts, size_t ns, fl_ckpt_writer *w,
                          const char *prefix, int delta) {
  rows_out o;
  fl_status st = gather(ts, ns, delta, &o);
  if (st == FL_OK) st = put_head(ts, ns, w, prefix);
  if (st == FL_OK) st = put_rows(ts[0], w, prefix, &o);
  if (st == FL_OK && ts[0]->tier) st = put_tier_ids(ts, ns, w, prefix);
  if (st == FL_OK && delta) st = put_deleted(ts, ns, w, prefix);
  rows_out_free(&o);
  return st;
}

unsigned fl_ps_table_stripe(uint64_t key, unsigned ns) {
  return (unsigned)(fl_ps_mix64(key ^ 0x2545f4914f6cdd1dULL) >> 32) & (ns - 1);
}

fl_status fl_ps_table_save_many(const fl_ps_table *const *ts, size_t ns, fl_ckpt_writer *w,
                                const char *prefix) {
  return save_any(ts, ns, w, prefix, 0);
}

fl_status fl_ps_table_save(const fl_ps_table *t, fl_ckpt_writer *w, const char *prefix) {
  return save_any(&t, 1, w, prefix, 0);
}

fl_status fl_ps_table_save_delta_many(const fl_ps_table *const *ts, size_t ns,
                                      fl_ckpt_writer *w, const char *prefix) {
  for (size_t s = 0; s < ns; s++)
    if (!fl_ps_table_delta_ok(ts[s]))
      return FL_ERR(FL_ESTATE, "sparse table %s: the keys deleted since the last checkpoint "
                    "were not all kept: take a whole checkpoint", ts[s]->name);
  return save_any(ts, ns, w, prefix, 1);
}

fl_status fl_ps_table_save_delta(const fl_ps_table *t, fl_ckpt_writer *w, const char *prefix) {
  return fl_ps_table_save_delta_many(&t, 1, w, prefix);
}

/* A stripe that stopped demoting may hold a row shadowing its disk copy:
 * only a whole checkpoint's load resolves that (fl_ps_table_tier_settle). */
int fl_ps_table_delta_ok(const fl_ps_table *t) {
  return t->track && !t->tomb_overflow && !t->tier_broken;
}

void fl_ps_table_mark_saved(fl_ps_table *t) {
  for (int32_t r = t->head; r >= 0 && t->dirty[r]; r = ROW(t, r)->next) t->dirty[r] = 0;
  t->ntomb = 0;
  t->nmoved = t->moved_uniq = 0;
  t->tomb_overflow = 0;
}

static fl_status find_rec(const fl_ckpt *c, const char *prefix, const char *suffix,
                          fl_ckpt_dtype dt, int nd, int64_t n, int64_t d, fl_ckpt_record *r) {
  char name[FL_CKPT_NAME_MAX];
  snprintf(name, sizeof name, "%s%s", prefix, suffix);
  if (fl_ckpt_find(c, name, r) != FL_OK)
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s missing", name);
  if (r->dtype != dt || r->ndim != nd || r->shape[0] != n || (nd == 2 && r->shape[1] != d))
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s has the wrong type or shape", name);
  return FL_OK;
}

/* 1 when k is an fl_optim_kind of this build. */
static int known_kind(int64_t k) {
  int64_t n = 0;
  while (fl_optim_kind_names[n]) n++;
  return k >= 0 && k < n;
}

/* The records under prefix hold the state of kind, in a format this build
 * reads (into *fmt). */
static fl_status check_format(const fl_ckpt *c, const char *prefix, fl_optim_kind kind,
                              int64_t *fmt) {
  char name[FL_CKPT_NAME_MAX];
  int64_t held;
  fl_status st;

  snprintf(name, sizeof name, "%sformat", prefix);
  st = fl_ckpt_get_i64(c, name, fmt);
  if (st == FL_ENOTFOUND) {
    *fmt = 1;
    if (kind == FL_OPTIM_SGD || kind == FL_OPTIM_ADAGRAD || kind == FL_OPTIM_ADAM) return FL_OK;
    return FL_ERR(FL_EINVAL, "checkpoint: the table under %s is of format 1, which has no %s "
                  "state: resume it with the optimizer it was trained with (sgd, adagrad or "
                  "adam)", prefix, fl_optim_kind_name(kind));
  }
  if (st != FL_OK) return FL_ERR(FL_ECORRUPT, "checkpoint: record %s malformed", name);
  if (*fmt != 2 && *fmt != FL_PS_TABLE_FORMAT)
    return FL_ERR(FL_EINVAL, "checkpoint: %s is %lld; this build reads sparse table formats 1 "
                  "to %d: resume with the build that wrote it", name, (long long)*fmt,
                  FL_PS_TABLE_FORMAT);
  snprintf(name, sizeof name, "%soptimizer", prefix);
  if (fl_ckpt_get_i64(c, name, &held) != FL_OK)
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s missing or malformed", name);
  if (held == (int64_t)kind) return FL_OK;
  if (!known_kind(held))
    return FL_ERR(FL_EINVAL, "checkpoint: the table under %s holds the state of optimizer %lld, "
                  "unknown to this build: resume with the build that wrote it", prefix,
                  (long long)held);
  return FL_ERR(FL_EINVAL, "checkpoint: the table under %s holds %s state but uses %s here: "
                "set its optimizer back to %s to resume it", prefix,
                fl_optim_kind_name((fl_optim_kind)held), fl_optim_kind_name(kind),
                fl_optim_kind_name((fl_optim_kind)held));
}

/* No key twice in the n keys of record name. */
static fl_status unique_keys(const uint64_t *keys, int64_t n, const char *name) {
  uint64_t *sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
  fl_status st = FL_OK;
  if (!sorted) return FL_ERR(FL_ENOMEM, "checkpoint: out of memory checking %s", name);
  memcpy(sorted, keys, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
  for (int64_t i = 1; i < n && st == FL_OK; i++)
    if (sorted[i] == sorted[i - 1]) st = FL_ERR(FL_ECORRUPT, "checkpoint: %s repeats a key", name);
  free(sorted);
  return st;
}

/* Format 3's records besides the rows': marks, clock, counts, and for a
 * delta its deleted keys. */
static fl_status verify_marks(const fl_ckpt *c, const char *prefix, int64_t n, int delta) {
  fl_ckpt_record r;
  char name[FL_CKPT_NAME_MAX];
  int64_t v;
  FL_TRY(find_rec(c, prefix, "seen_step", FL_CKPT_I64, 1, n, 0, &r));
  FL_TRY(find_rec(c, prefix, "seen_time", FL_CKPT_F64, 1, n, 0, &r));
  FL_TRY(find_rec(c, prefix, "counts", FL_CKPT_I64, 1, 4, 0, &r));
  snprintf(name, sizeof name, "%sclock", prefix);
  if (fl_ckpt_get_i64(c, name, &v) != FL_OK)
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s missing or malformed", name);
  snprintf(name, sizeof name, "%sdeleted", prefix);
  if (delta && (fl_ckpt_find(c, name, &r) != FL_OK || r.dtype != FL_CKPT_U64 || r.ndim != 1))
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s missing or not 1-d u64", name);
  return FL_OK;
}

/* fl_ps_table_verify, and whether the records are a delta (*delta) of
 * format *fmt. */
static fl_status verify_any(const fl_ckpt *c, const char *prefix, uint32_t dim,
                            fl_optim_kind kind, int64_t *rows, int64_t *fmt, int *delta) {
  fl_ckpt_record rk, r;
  char name[FL_CKPT_NAME_MAX];
  int64_t n, d = dim, sl = (int64_t)fl_optim_state_len(kind, dim), dv = 0;
  int nstate = fl_optim_state_count(kind);

  FL_TRY(check_format(c, prefix, kind, fmt));
  snprintf(name, sizeof name, "%sdelta", prefix);
  *delta = fl_ckpt_get_i64(c, name, &dv) == FL_OK && dv == 1;
  snprintf(name, sizeof name, "%skeys", prefix);
  if (fl_ckpt_find(c, name, &rk) != FL_OK || rk.dtype != FL_CKPT_U64 || rk.ndim != 1)
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s missing or not 1-d u64", name);
  n = rk.shape[0];
  FL_TRY(find_rec(c, prefix, "steps", FL_CKPT_I64, 1, n, d, &r));
  FL_TRY(find_rec(c, prefix, "values", FL_CKPT_F32, 2, n, d, &r));
  if (nstate >= 1) FL_TRY(find_rec(c, prefix, "state1", FL_CKPT_F32, 2, n, sl, &r));
  if (nstate >= 2) FL_TRY(find_rec(c, prefix, "state2", FL_CKPT_F32, 2, n, sl, &r));
  if (*fmt >= 3) FL_TRY(verify_marks(c, prefix, n, *delta));
  if (rows) *rows = n;
  return unique_keys(rk.data, n, name);
}

fl_status fl_ps_table_verify(const fl_ckpt *c, const char *prefix, uint32_t dim,
                             fl_optim_kind kind, int64_t *rows) {
  int64_t fmt;
  int delta;
  return verify_any(c, prefix, dim, kind, rows, &fmt, &delta);
}

/* The records of a checkpoint's rows, found after verify_any. */
typedef struct rows_in {
  int64_t n, fmt;
  fl_ckpt_record k, s, v, a, b, ss, stime, counts, sketch;
  int has_sketch;
  int64_t clock, sketch_total;
} rows_in;

/* Find the records verified before, and check that the sketch held fits
 * this table's (else FL_EINVAL, logged: nothing changed yet). */
static fl_status rows_find(const fl_ps_table *t, const fl_ckpt *c, const char *prefix,
                           rows_in *x) {
  char name[FL_CKPT_NAME_MAX];
  int64_t n = x->n, d = t->dim, sl = (int64_t)t->slen;
#define REC(suffix, dt, nd, cols, dst) find_rec(c, prefix, suffix, dt, nd, n, cols, dst)
  REC("keys", FL_CKPT_U64, 1, 0, &x->k);
  REC("steps", FL_CKPT_I64, 1, 0, &x->s);
  REC("values", FL_CKPT_F32, 2, d, &x->v);
  if (t->nstate >= 1) REC("state1", FL_CKPT_F32, 2, sl, &x->a);
  if (t->nstate >= 2) REC("state2", FL_CKPT_F32, 2, sl, &x->b);
  if (x->fmt < 3) return FL_OK;
  REC("seen_step", FL_CKPT_I64, 1, 0, &x->ss);
  REC("seen_time", FL_CKPT_F64, 1, 0, &x->stime);
#undef REC
  find_rec(c, prefix, "counts", FL_CKPT_I64, 1, 4, 0, &x->counts);
  snprintf(name, sizeof name, "%sclock", prefix);
  fl_ckpt_get_i64(c, name, &x->clock);
  snprintf(name, sizeof name, "%ssketch", prefix);
  x->has_sketch = t->sketch && fl_ckpt_find(c, name, &x->sketch) == FL_OK;
  if (!x->has_sketch) return FL_OK;
  size_t k;
  fl_ps_sketch_counters(t->sketch, &k);
  snprintf(name, sizeof name, "%ssketch_total", prefix);
  if (x->sketch.dtype != FL_CKPT_I32 || x->sketch.ndim != 1 || x->sketch.shape[0] != (int64_t)k ||
      fl_ckpt_get_i64(c, name, &x->sketch_total) != FL_OK)
    return FL_ERR(FL_EINVAL, "checkpoint: the admission sketch under %s is not of this table's "
                  "size (%zu counters): resume with the admit_sketch_bytes it was written with",
                  prefix, k);
  return FL_OK;
}

/* A memory row for key while a checkpoint loads into a table with a disk
 * tier: never demoted, never looked up on disk (the store is replaced
 * after the load: fl_ps_table_tier_settle); at max_rows the least recent
 * is reused. */
static fl_status load_slot(fl_ps_table *t, uint64_t key, int32_t *out) {
  fl_status st = FL_OK;
  if ((int64_t)t->n >= t->max_rows) {
    take_tail(t, out);
  } else {
    t->loading = 1;
    if (t->n == t->cap) st = grow(t);
    t->loading = 0;
    FL_TRY(st);
    *out = (int32_t)t->n++;
    t->prob[*out] = 0;
    atomic_fetch_add(t->hot_bytes, t->row_bytes);
  }
  ROW(t, *out)->key = key;
  slot_insert(t, key, *out);
  lru_push_head(t, *out);
  touch(t, *out);
  return FL_OK;
}

/* Put row i of x in as the most recently seen row. */
static fl_status rows_put(fl_ps_table *t, const rows_in *x, size_t i) {
  size_t d = t->dim, sl = t->slen;
  uint64_t key = ((const uint64_t *)x->k.data)[i];
  int32_t r = find(t, key);
  if (r < 0) FL_TRY(t->tier ? load_slot(t, key, &r) : get_row(t, key, &r));
  else touch(t, r);
  memcpy(VAL(t, r), (const float *)x->v.data + i * d, d * sizeof(float));
  if (t->nstate >= 1) memcpy(S1(t, r), (const float *)x->a.data + i * sl, sl * sizeof(float));
  if (t->nstate >= 2) memcpy(S2(t, r), (const float *)x->b.data + i * sl, sl * sizeof(float));
  ROW(t, r)->t = ((const int64_t *)x->s.data)[i];
  if (x->fmt >= 3) {
    ROW(t, r)->step = ((const int64_t *)x->ss.data)[i];
    ROW(t, r)->time = ((const double *)x->stime.data)[i];
  }
  return FL_OK;
}

/* The table's own state of x: clock, counts, sketch. */
static void rows_head(fl_ps_table *t, const rows_in *x) {
  const int64_t *cn;
  if (x->fmt < 3) return;
  cn = x->counts.data;
  t->clock = x->clock;
  t->counts.admitted = (uint64_t)cn[0];
  t->counts.refused = (uint64_t)cn[1];
  t->counts.expired = (uint64_t)cn[2];
  t->counts.evicted = (uint64_t)cn[3];
  if (x->has_sketch)
    fl_ps_sketch_restore(t->sketch, x->sketch.data, (size_t)x->sketch.shape[0],
                         (uint64_t)x->sketch_total, t->name);
}

/* Drop every memory row (the disk tier's are replaced by the core). */
static void empty(fl_ps_table *t) {
  if (t->tier) tier_forget_rows(t);
  t->n = 0;
  t->head = t->tail = -1;
  if (t->nslots) memset(t->slots, 0xff, t->nslots * sizeof *t->slots);
}

fl_status fl_ps_table_load(fl_ps_table *t, const fl_ckpt *c, const char *prefix) {
  rows_in x;
  int delta;
  size_t first;

  /* Everything is checked before the table changes. */
  memset(&x, 0, sizeof x);
  FL_TRY(verify_any(c, prefix, t->dim, t->hp.kind, &x.n, &x.fmt, &delta));
  if (delta)
    return FL_ERR(FL_EINVAL, "checkpoint: the table under %s is a delta: load its base first",
                  prefix);
  FL_TRY(rows_find(t, c, prefix, &x));
  /* Start empty, then insert oldest first so recency is kept. */
  empty(t);
  memset(&t->counts, 0, sizeof t->counts);
  t->clock = 0;
  rows_head(t, &x);
  t->legacy_step = t->clock;
  t->legacy_time = t->now;
  first = x.n > t->max_rows ? (size_t)(x.n - t->max_rows) : 0;
  for (size_t i = first; i < (size_t)x.n; i++) FL_TRY(rows_put(t, &x, i));
  fl_ps_table_mark_saved(t);
  return FL_OK;
}

/* The table's own state of x into its ns stripes: every stripe's clock
 * is the table's, the counters go to the first (only their sums are
 * read), the sketch is shared. */
static void head_many(fl_ps_table *const *ts, size_t ns, const rows_in *x) {
  for (size_t s = 1; s < ns; s++) {
    memset(&ts[s]->counts, 0, sizeof ts[s]->counts);
    if (x->fmt >= 3) ts[s]->clock = x->clock;
  }
  rows_head(ts[0], x);
  for (size_t s = 0; s < ns; s++) {
    ts[s]->legacy_step = ts[s]->clock;
    ts[s]->legacy_time = ts[s]->now;
  }
}

/* Load the rows into ns > 1 stripes, each key into its stripe, oldest
 * first, with the marks, clock, counters and sketch of format 3. */
static fl_status load_striped(fl_ps_table *const *ts, size_t ns, const fl_ckpt *c,
                              const char *prefix) {
  rows_in x;
  int delta;

  memset(&x, 0, sizeof x);
  FL_TRY(verify_any(c, prefix, ts[0]->dim, ts[0]->hp.kind, &x.n, &x.fmt, &delta));
  if (delta)
    return FL_ERR(FL_EINVAL, "checkpoint: the table under %s is a delta: load its base first",
                  prefix);
  FL_TRY(rows_find(ts[0], c, prefix, &x));
  for (size_t s = 0; s < ns; s++) {
    empty(ts[s]);
    memset(&ts[s]->counts, 0, sizeof ts[s]->counts);
    ts[s]->clock = 0;
  }
  for (size_t i = 0; i < (size_t)x.n; i++) {
    uint64_t key = ((const uint64_t *)x.k.data)[i];
    FL_TRY(rows_put(ts[fl_ps_table_stripe(key, (unsigned)ns)], &x, i));
  }
  head_many(ts, ns, &x);
  for (size_t s = 0; s < ns; s++) fl_ps_table_mark_saved(ts[s]);
  return FL_OK;
}

fl_status fl_ps_table_load_many(fl_ps_table *const *ts, size_t ns, const fl_ckpt *c,
                                const char *prefix) {
  return ns == 1 ? fl_ps_table_load(ts[0], c, prefix) : load_striped(ts, ns, c, prefix);
}

fl_status fl_ps_table_apply_delta_many(fl_ps_table *const *ts, size_t ns, const fl_ckpt *c,
                                       const char *prefix) {
  rows_in x;
  fl_ckpt_record rd;
  char name[FL_CKPT_NAME_MAX];
  int delta;

  memset(&x, 0, sizeof x);
  FL_TRY(verify_any(c, prefix, ts[0]->dim, ts[0]->hp.kind, &x.n, &x.fmt, &delta));
  if (!delta)
    return FL_ERR(FL_EINVAL, "checkpoint: the table under %s is not a delta", prefix);
  FL_TRY(rows_find(ts[0], c, prefix, &x));
  snprintf(name, sizeof name, "%sdeleted", prefix);
  fl_ckpt_find(c, name, &rd);
  /* Deleted keys first: a key deleted, then seen again, is among the rows. */
  for (int64_t i = 0; i < rd.shape[0]; i++) {
    uint64_t key = ((const uint64_t *)rd.data)[i];
    fl_ps_table *t = ts[fl_ps_table_stripe(key, (unsigned)ns)];
    int32_t r = find(t, key);
    if (r >= 0) drop_row(t, r);
  }
  for (size_t i = 0; i < (size_t)x.n; i++) {
    uint64_t key = ((const uint64_t *)x.k.data)[i];
    FL_TRY(rows_put(ts[fl_ps_table_stripe(key, (unsigned)ns)], &x, i));
  }
  head_many(ts, ns, &x);
  for (size_t s = 0; s < ns; s++) fl_ps_table_mark_saved(ts[s]);
  return FL_OK;
}

fl_status fl_ps_table_apply_delta(fl_ps_table *t, const fl_ckpt *c, const char *prefix) {
  return fl_ps_table_apply_delta_many(&t, 1, c, prefix);
}

/* -------------------------------------------------------------- disk tier
 * With pserver.memory_budget the table keeps rows in memory while every
 * table's hot rows together stay within the budget (each table demotes
 * one of its own rows to make room: the least recent, or a row of the
 * window that is used less often, see pick_demoted); the others
 * live in the disk tier (tier_rocks.c) as one blob each: [int64 updates]
 * [dim values][state1][state2].  A call's keys missing from memory are
 * looked up with one multi-get before its rows are taken in order; a key
 * demoted during the call (after that look-up) is read on its own.  A row
 * found on disk is promoted (taken back, removed there) into the window.
 * Every touch stamps a row's last use (use_clock); a row reaches the disk
 * under its stamp, so the disk keeps its rows in the order of last use and
 * max_rows, which bounds the rows of both tiers, evicts the least recent
 * of the memory tail and the disk's oldest, as a table all in memory
 * would.  When a demotion fails
 * (disk full), the error names the store's path and the table stops
 * demoting: its rows stay in memory, over the budget, none lost. */

static size_t row_cost(const fl_ps_table *t) {
  /* the record (key, seen marks, update count, LRU links, value, state),
   * about two hash slots, changed mark, last use, window mark */
  return t->rsz + 2 * sizeof(int32_t) + sizeof(uint8_t) + sizeof(uint64_t) + sizeof(uint8_t);
}

uint64_t fl_ps_table_hot_bytes(const fl_ps_table *t) { return (uint64_t)(t->n * row_cost(t)); }

size_t fl_ps_table_disk_rows(const fl_ps_table *t) {
  return t->tier ? fl_ps_tier_rows(t->tier, t->tier_id) : 0;
}

uint64_t fl_ps_table_tier_id(const char *name, unsigned stripe) {
  return fl_ps_mix64(str_hash(name) + stripe);
}

/* Frequency-aware admission to memory (a window and a sketch, as
 * W-TinyLFU): a row that comes into memory (new, or read from disk) joins
 * the window; while the window holds more than win_cap rows, making room
 * weighs its oldest row against the least recent row outside it by their
 * estimated frequency of use: the more frequent stays (the window's row
 * then leaves the window), the other is demoted.  The sketch counts every
 * id of every pull and push in FQ_DEPTH rows of fq_w 4-bit counters, all
 * halved every FQ_AGE * fq_w counts so that the recent past weighs more. */
#define FQ_DEPTH 4
#define FQ_MAX 15u
#define FQ_AGE 10
#define WIN_MIN 16
#define FQ_MIN_W 1024

/* The sketch sized for the table's memory rows: fq_w at least n (2 to 4
 * bytes a row), made again, empty, when the rows outgrow it.  0 when out
 * of memory (the old one kept). */
static int fq_size(fl_ps_table *t) {
  size_t w = t->fq_w ? t->fq_w : FQ_MIN_W;
  uint8_t *fq;
  while (w < t->n) w <<= 1;
  if (t->fq && w == t->fq_w) return 1;
  if (!(fq = calloc(FQ_DEPTH * w / 2, 1))) return 0;
  free(t->fq);
  t->fq = fq;
  t->fq_w = w;
  t->fq_adds = 0;
  return 1;
}

static void fq_index(const fl_ps_table *t, uint64_t key, size_t *ix) {
  uint64_t h = fl_ps_mix64(key ^ t->name_hash), g = fl_ps_mix64(h) | 1;
  for (int i = 0; i < FQ_DEPTH; i++)
    ix[i] = (size_t)i * t->fq_w + (size_t)((h + (uint64_t)i * g) & (t->fq_w - 1));
}

static unsigned fq_get(const fl_ps_table *t, size_t i) {
  return (t->fq[i >> 1] >> ((i & 1) * 4)) & 15u;
}

static void fq_add(fl_ps_table *t, uint64_t key) {
  size_t ix[FQ_DEPTH];
  if (t->n > t->fq_w) (void)fq_size(t);
  fq_index(t, key, ix);
  for (int i = 0; i < FQ_DEPTH; i++)
    if (fq_get(t, ix[i]) < FQ_MAX) t->fq[ix[i] >> 1] += (uint8_t)(1u << ((ix[i] & 1) * 4));
  if (++t->fq_adds < FQ_AGE * (uint64_t)t->fq_w) return;
  for (size_t i = 0; i < FQ_DEPTH * t->fq_w / 2; i++) t->fq[i] = (uint8_t)((t->fq[i] >> 1) & 0x77);
  t->fq_adds = 0;
}

static unsigned fq_est(const fl_ps_table *t, uint64_t key) {
  size_t ix[FQ_DEPTH];
  unsigned m = FQ_MAX;
  fq_index(t, key, ix);
  for (int i = 0; i < FQ_DEPTH; i++)
    if (fq_get(t, ix[i]) < m) m = fq_get(t, ix[i]);
  return m;
}

/* A call with m ids missing from memory: the window keeps twice that many
 * (a pull's rows stay for its push), shrinking slowly (1/64 a call: a
 * window that shrinks and grows again demotes rows without weighing
 * them) back to 1% of the table's memory rows (at least WIN_MIN), at most
 * half of them. */
static void win_size(fl_ps_table *t, size_t m) {
  size_t lo = t->n / 100 > WIN_MIN ? t->n / 100 : WIN_MIN, top = t->n / 2 > lo ? t->n / 2 : lo;
  t->win_cap -= t->win_cap / 64;
  if (2 * m > t->win_cap) t->win_cap = 2 * m;
  if (t->win_cap > top) t->win_cap = top;
  if (t->win_cap < lo) t->win_cap = lo;
}

/* The window's oldest row still in it (stale keys dropped), -1: none. */
static int32_t win_front(fl_ps_table *t) {
  while (t->win_n) {
    int32_t r = find(t, t->win[t->win_at]);
    if (r >= 0 && t->prob[r]) return r;
    t->win_at = (t->win_at + 1) & (t->win_ring - 1);
    t->win_n--;
  }
  return -1;
}

/* Window row c joins the rest. */
static void win_leave(fl_ps_table *t, int32_t c) {
  t->prob[c] = 0;
  t->nprob--;
}

/* Make the ring hold at least twice its live keys (stale ones dropped);
 * 0 when out of memory. */
static int win_grow(fl_ps_table *t) {
  size_t live = 0, cap = t->win_ring ? t->win_ring : 1024;
  uint64_t *w;
  for (size_t i = 0; i < t->win_n; i++) {
    int32_t r = find(t, t->win[(t->win_at + i) & (t->win_ring - 1)]);
    live += r >= 0 && t->prob[r];
  }
  while (cap < 2 * live + 2) cap <<= 1;
  if (!(w = malloc(cap * sizeof *w))) return 0;
  live = 0;
  for (size_t i = 0; i < t->win_n; i++) {
    uint64_t k = t->win[(t->win_at + i) & (t->win_ring - 1)];
    int32_t r = find(t, k);
    if (r >= 0 && t->prob[r]) w[live++] = k;
  }
  free(t->win);
  t->win = w;
  t->win_ring = cap;
  t->win_at = 0;
  t->win_n = live;
  return 1;
}

/* Row r came into memory: it joins the window, whose oldest rows join the
 * rest while it is full (memory is not: no row need go; so the window's
 * keys stay within about win_cap).  Out of memory for the window's keys:
 * r is admitted at once. */
static void win_push(fl_ps_table *t, int32_t r) {
  int32_t c;
  t->prob[r] = 0;
  while (t->nprob >= t->win_cap && (c = win_front(t)) >= 0) win_leave(t, c);
  if (t->win_n == t->win_ring && !win_grow(t)) return;
  t->win[(t->win_at + t->win_n++) & (t->win_ring - 1)] = ROW(t, r)->key;
  t->prob[r] = 1;
  t->nprob++;
}

/* The memory row to demote.  A window over win_cap rows hands its oldest
 * rows to the rest first; a full window weighs its oldest row c against
 * the least recent row v, when that one is not in the window: the less
 * frequent is demoted (c on a tie), c joining the rest if it stays. */
static int32_t pick_demoted(fl_ps_table *t) {
  int32_t c, v = t->tail;
  while (t->nprob > t->win_cap && (c = win_front(t)) >= 0) win_leave(t, c);
  if (t->nprob < t->win_cap || t->prob[v] || (c = win_front(t)) < 0) return v;
  if (fq_est(t, ROW(t, c)->key) <= fq_est(t, ROW(t, v)->key)) return c;
  win_leave(t, c);
  return v;
}

fl_status fl_ps_table_tier_keep_order(fl_ps_table *t) {
  uint64_t *b;
  size_t i = 0;
  fl_status st;
  if (!t->tier) return FL_OK;
  if (!(b = malloc((t->n ? t->n : 1) * 2 * sizeof *b)))
    return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory noting the last use of %zu rows",
                  t->name, t->n);
  for (int32_t r = t->tail; r >= 0; r = ROW(t, r)->prev, i += 2) {
    b[i] = ROW(t, r)->key;
    b[i + 1] = t->used[r];
  }
  st = fl_ps_tier_put_note(t->tier, t->tier_id, b, i * sizeof *b);
  free(b);
  return st;
}

/* After a load: the memory rows get their last use from the store's note
 * (fl_ps_table_tier_keep_order); those it lacks (a store written before
 * the notes, which kept memory rows more recent than disk rows), least
 * recent first, a use after every other row. */
static void restamp(fl_ps_table *t) {
  uint64_t top = fl_ps_tier_newest(t->tier, t->tier_id), *b = NULL;
  size_t len = 0;
  for (size_t r = 0; r < t->n; r++) t->used[r] = 0;
  if (fl_ps_tier_get_note(t->tier, t->tier_id, (void **)&b, &len) != FL_OK) b = NULL;
  for (size_t i = 0; b && i + 2 <= len / sizeof *b; i += 2) {
    int32_t r = find(t, b[i]);
    if (r >= 0) t->used[r] = b[i + 1];
    if (b[i + 1] > top) top = b[i + 1];
  }
  free(b);
  t->use_clock = top;
  for (int32_t r = t->tail; r >= 0; r = ROW(t, r)->prev)
    if (!t->used[r]) t->used[r] = ++t->use_clock;
}

static fl_status tier_setup(fl_ps_table *t, const fl_ps_table_opts *o) {
  t->tier = o->tier;
  t->hot_bytes = o->hot_bytes;
  t->hot_budget = o->hot_budget;
  t->tier_id = fl_ps_table_tier_id(t->name, o->stripe);
  t->row_bytes = row_cost(t);
  t->blob = sizeof(int64_t) + (t->dim + (size_t)t->nstate * t->slen) * sizeof(float) +
            FL_PS_TIER_MARKS_LEN;
  t->one = malloc(t->blob);
  t->out = malloc(t->blob);
  t->win_cap = WIN_MIN;
  return t->one && t->out && fq_size(t) ? FL_OK : FL_ENOMEM;
}

static void tier_forget_rows(fl_ps_table *t) {
  atomic_fetch_sub(t->hot_bytes, (uint64_t)t->n * t->row_bytes);
  t->pf_n = 0;
  t->nprob = 0;
  t->win_n = 0;
}

static void tier_free(fl_ps_table *t) {
  if (t->tier) tier_forget_rows(t);
  free(t->pf_keys);
  free(t->pf_rows);
  free(t->pf_found);
  free(t->pf_used);
  free(t->pf_seqs);
  free(t->one);
  free(t->out);
  free(t->used);
  free(t->prob);
  free(t->win);
  free(t->fq);
}

/* Capacity grows no further than the budget's rows (or one more row),
 * but while a checkpoint loads or once demotion stopped (the rows then
 * stay in memory: grown a row at a time, each new row copied them all). */
static size_t tier_cap(const fl_ps_table *t, size_t nc) {
  size_t lim = (size_t)(t->hot_budget / t->row_bytes) + 1;
  if (t->loading || t->tier_broken) return nc;
  if (lim < t->n + 1) lim = t->n + 1;
  return nc < lim ? nc : lim;
}

/* A row on disk (layout 1): [i64 updates][floats: value, state 1, state 2]
 * [u64 layout (1)][i64 seen step][f64 seen time].  Layout 0 (written
 * before expiry worked with the tier) lacks the last three: they read as
 * zero (tier_rocks.h), and its rows count as seen at the load. */
#define BLOB_LAYOUT 1

/* Row r's marks in blob b (len bytes). */
static void pack_marks(const fl_ps_table *t, int32_t r, unsigned char *b) {
  uint64_t v = BLOB_LAYOUT;
  unsigned char *m = b + t->blob - FL_PS_TIER_MARKS_LEN;
  memcpy(m, &v, sizeof v);
  memcpy(m + 8, &ROW(t, r)->step, sizeof(int64_t));
  memcpy(m + 16, &ROW(t, r)->time, sizeof(double));
}

/* The marks of blob b (the load's for layout 0). */
static void blob_marks(const fl_ps_table *t, const unsigned char *b, int64_t *step, double *time) {
  *step = t->legacy_step;
  *time = t->legacy_time;
  (void)fl_ps_tier_marks(b + t->blob - FL_PS_TIER_MARKS_LEN, step, time);
}

static void pack_row(const fl_ps_table *t, int32_t r, unsigned char *b) {
  size_t d = t->dim, sl = t->slen;
  float *f = (float *)(b + sizeof(int64_t));
  memcpy(b, &ROW(t, r)->t, sizeof(int64_t));
  memcpy(f, VAL(t, r), d * sizeof *f);
  if (t->nstate >= 1) memcpy(f + d, S1(t, r), sl * sizeof *f);
  if (t->nstate >= 2) memcpy(f + d + sl, S2(t, r), sl * sizeof *f);
  pack_marks(t, r, b);
}

static void unpack_row(fl_ps_table *t, int32_t r, const unsigned char *b) {
  size_t d = t->dim, sl = t->slen;
  const float *f = (const float *)(b + sizeof(int64_t));
  memcpy(&ROW(t, r)->t, b, sizeof(int64_t));
  memcpy(VAL(t, r), f, d * sizeof *f);
  if (t->nstate >= 1) memcpy(S1(t, r), f + d, sl * sizeof *f);
  if (t->nstate >= 2) memcpy(S2(t, r), f + d + sl, sl * sizeof *f);
  blob_marks(t, b, &ROW(t, r)->step, &ROW(t, r)->time);
}

/* fl_ps_tier_old_fn of a table: its blob's marks past the limits (the
 * row is then deleted: noted for the next delta). */
static int blob_old(void *ctx, uint64_t key, const void *row) {
  fl_ps_table *t = ctx;
  int64_t step;
  double time;
  blob_marks(t, row, &step, &time);
  if (!is_old(t, step, time)) return 0;
  note_deleted(t, key);
  return 1;
}

/* Delete the disk rows due for expiry (counted by the caller).  An error
 * (logged) stops the sweep. */
static size_t tier_expire(fl_ps_table *t) {
  size_t k = 0;
  int all = 0;
  (void)fl_ps_tier_expire(t->tier, t->tier_id, t->one, t->blob, blob_old, t, &k, &all);
  t->pf_n = 0; /* a look-up kept from the last call may be of a row deleted here */
  return k;
}

static int cmp_key(const void *a, const void *b) { return cmp_u64(a, b); }

static fl_status tier_prefetch(fl_ps_table *t, const uint64_t *keys, size_t n) {
  size_t m = 0;
  if (n > t->pf_cap) {
    free(t->pf_keys);
    free(t->pf_rows);
    free(t->pf_found);
    free(t->pf_used);
    free(t->pf_seqs);
    t->pf_keys = malloc(n * sizeof *t->pf_keys);
    t->pf_rows = malloc(n * t->blob);
    t->pf_found = malloc(n);
    t->pf_used = malloc(n);
    t->pf_seqs = malloc(n * sizeof *t->pf_seqs);
    t->pf_cap = t->pf_keys && t->pf_rows && t->pf_found && t->pf_used && t->pf_seqs ? n : 0;
    t->pf_n = 0;
    if (!t->pf_cap)
      return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory looking up %zu rows", t->name, n);
  }
  for (size_t i = 0; i < n; i++) {
    fq_add(t, keys[i]);
    if (find(t, keys[i]) < 0) t->pf_keys[m++] = keys[i];
  }
  win_size(t, m);
  qsort(t->pf_keys, m, sizeof *t->pf_keys, cmp_key);
  t->pf_n = 0;
  for (size_t i = 0; i < m; i++)
    if (!t->pf_n || t->pf_keys[t->pf_n - 1] != t->pf_keys[i]) t->pf_keys[t->pf_n++] = t->pf_keys[i];
  memset(t->pf_used, 0, t->pf_n);
  return fl_ps_tier_get_many(t->tier, t->tier_id, t->pf_keys, t->pf_n, t->pf_rows, t->blob,
                             t->pf_found, t->pf_seqs);
}

/* The blob of key on disk (*found 0: none): this call's look-up when key
 * was missing at its start and not taken since, else a look-up of its own. */
static fl_status tier_lookup(fl_ps_table *t, uint64_t key, const unsigned char **b, int *found,
                             uint64_t *seq) {
  uint64_t *p = t->pf_n ? bsearch(&key, t->pf_keys, t->pf_n, sizeof key, cmp_key) : NULL;
  uint8_t f;
  if (p && !t->pf_used[p - t->pf_keys]) {
    size_t i = (size_t)(p - t->pf_keys);
    t->pf_used[i] = 1;
    *b = t->pf_rows + i * t->blob;
    *found = t->pf_found[i];
    *seq = t->pf_seqs[i];
    return FL_OK;
  }
  FL_TRY(fl_ps_tier_get_many(t->tier, t->tier_id, &key, 1, t->one, t->blob, &f, seq));
  *b = t->one;
  *found = f;
  return FL_OK;
}

/* Key's row left the disk: this call's look-up of it is stale. */
static void forget_lookup(fl_ps_table *t, uint64_t key) {
  uint64_t *p = t->pf_n ? bsearch(&key, t->pf_keys, t->pf_n, sizeof key, cmp_key) : NULL;
  if (p) t->pf_used[p - t->pf_keys] = 1;
}

/* Unlink memory row r (its index to reuse): out of the LRU, the hash and
 * the window. */
static void unlink_row(fl_ps_table *t, int32_t r) {
  lru_unlink(t, r);
  slot_delete(t, ROW(t, r)->key);
  if (t->prob[r]) t->nprob--;
  t->prob[r] = 0;
}

/* Unlink the least recent memory row; *r gets its index to reuse. */
static void take_tail(fl_ps_table *t, int32_t *r) {
  *r = t->tail;
  unlink_row(t, *r);
}

/* A write to the disk tier failed (logged there): stop demoting. */
static void tier_break(fl_ps_table *t) {
  if (t->tier_broken) return;
  t->tier_broken = 1;
  FL_LOGW("sparse table %s: rows stay in memory from now on, over pserver.memory_budget: "
          "checkpoint, free space in %s, and restart", t->name, fl_ps_tier_path(t->tier));
}

/* Keep key, seen or changed and now demoted, for the next delta; a key
 * demoted again is listed again: the list is made unique (sorted) when it
 * reaches max_rows and twice its length after the last time (a sort per
 * as many notes), and overflows once max_rows keys are unique. */
static void note_moved(fl_ps_table *t, uint64_t key) {
  size_t k = 0;
  if ((int64_t)t->nmoved >= t->max_rows && t->nmoved >= 2 * t->moved_uniq) {
    qsort(t->moved, t->nmoved, sizeof *t->moved, cmp_u64);
    for (size_t i = 0; i < t->nmoved; i++)
      if (!k || t->moved[k - 1] != t->moved[i]) t->moved[k++] = t->moved[i];
    t->nmoved = t->moved_uniq = k;
  }
  if ((int64_t)t->moved_uniq >= t->max_rows) t->tomb_overflow = 1;
  note_key(t, &t->moved, &t->nmoved, &t->moved_cap, 2 * t->max_rows, key);
}

/* Write memory row v to disk, in the order of its last use; *r gets its
 * index to reuse.  On failure the row stays (the table stops demoting). */
static fl_status demote_row(fl_ps_table *t, int32_t v, int32_t *r) {
  pack_row(t, v, t->out);
  if (fl_ps_tier_put_at(t->tier, t->tier_id, ROW(t, v)->key, t->out, t->blob, t->used[v]) != FL_OK) {
    tier_break(t);
    return FL_EIO;
  }
  if (t->dirty[v]) note_moved(t, ROW(t, v)->key);
  unlink_row(t, v);
  *r = v;
  return FL_OK;
}

/* A memory row for key (new_key: on neither tier): *r. */
static fl_status tier_slot(fl_ps_table *t, int new_key, int32_t *r) {
  size_t disk = fl_ps_table_disk_rows(t);
  if (new_key && (int64_t)(t->n + disk) >= t->max_rows) {
    uint64_t k, before = t->n ? t->used[t->tail] : UINT64_MAX;
    int f = 0;
    t->counts.evicted++;
    if (disk && !t->tier_broken)
      FL_TRY(fl_ps_tier_evict_oldest(t->tier, t->tier_id, before, &k, &f));
    if (f) {
      forget_lookup(t, k);
      note_deleted(t, k);
    } else {
      note_deleted(t, ROW(t, t->tail)->key);
      take_tail(t, r);
      return FL_OK;
    }
  }
  if (t->n && !t->tier_broken &&
      atomic_load(t->hot_bytes) + t->row_bytes > t->hot_budget &&
      demote_row(t, pick_demoted(t), r) == FL_OK)
    return FL_OK;
  if ((int64_t)t->n >= t->max_rows) {
    note_deleted(t, ROW(t, t->tail)->key);
    take_tail(t, r);
    t->counts.evicted++;
    return FL_OK;
  }
  if (t->n == t->cap) FL_TRY(grow(t));
  *r = (int32_t)t->n++;
  atomic_fetch_add(t->hot_bytes, t->row_bytes);
  return FL_OK;
}

static fl_status tier_get_row(fl_ps_table *t, uint64_t key, int32_t *out) {
  const unsigned char *b;
  int found;
  uint64_t seq = 0;
  FL_TRY(tier_lookup(t, key, &b, &found, &seq));
  return tier_place(t, key, b, found, seq, out);
}

/* A memory row for key: the disk's blob b (found, with its sequence seq),
 * promoted, or a new row (!found). */
static fl_status tier_place(fl_ps_table *t, uint64_t key, const unsigned char *b, int found,
                            uint64_t seq, int32_t *out) {
  int32_t r;
  FL_TRY(tier_slot(t, !found, &r));
  ROW(t, r)->key = key;
  if (found) {
    unpack_row(t, r, b);
  } else {
    init_row(t, key, VAL(t, r));
    fl_optim_tensor x = state_of(t, r);
    ROW(t, r)->t = 0;
    if (t->nstate >= 1 && fl_optim_init_state(&t->hp, &x, 1) != FL_OK)
      return FL_ERR(FL_EINVAL, "sparse table %s: %s refused to set up a row's state", t->name,
                    fl_optim_kind_name(t->hp.kind));
  }
  slot_insert(t, key, r);
  lru_push_head(t, r);
  t->used[r] = ++t->use_clock;
  win_push(t, r);
  *out = r;
  /* A copy left on a full disk is shadowed: the row stays in memory. */
  if (found && fl_ps_tier_drop(t->tier, t->tier_id, key, seq) != FL_OK) tier_break(t);
  return FL_OK;
}

static fl_status tier_read(const fl_ps_table *t, const uint64_t *keys, size_t n, float *out) {
  size_t d = t->dim, m = 0;
  uint64_t *miss = calloc(n ? n : 1, sizeof *miss);
  size_t *at = malloc((n ? n : 1) * sizeof *at);
  unsigned char *rows = malloc((n ? n : 1) * t->blob);
  uint8_t *found = malloc(n ? n : 1);
  fl_status st = FL_OK;
  if (!miss || !at || !rows || !found) {
    st = FL_ERR(FL_ENOMEM, "sparse table %s: out of memory reading %zu rows", t->name, n);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    int32_t r = find(t, keys[i]);
    if (r >= 0) memcpy(out + i * d, VAL(t, r), d * sizeof(float));
    else {
      at[m] = i;
      miss[m++] = keys[i];
    }
  }
  st = fl_ps_tier_get_many(t->tier, t->tier_id, miss, m, rows, t->blob, found, NULL);
  for (size_t j = 0; st == FL_OK && j < m; j++) {
    if (found[j]) memcpy(out + at[j] * d, rows + j * t->blob + sizeof(int64_t), d * sizeof(float));
    else if (!t->sketch) init_row(t, miss[j], out + at[j] * d);
    else
      for (size_t i = 0; i < d; i++) out[at[j] * d + i] = t->admit_default;
  }
done:
  free(miss);
  free(at);
  free(rows);
  free(found);
  return st;
}

/* Whether key's row is in the disk tier (a look-up, nothing moved). */
static fl_status tier_has(fl_ps_table *t, uint64_t key, int *found) {
  uint8_t f = 0;
  FL_TRY(fl_ps_tier_get_many(t->tier, t->tier_id, &key, 1, t->one, t->blob, &f, NULL));
  *found = f;
  return FL_OK;
}

/* The dump's memory rows (keys/vals, *n of them, ascending; *more: memory
 * rows beyond them) merged with the disk tier's rows above after: the max
 * smallest of both, ascending; *more when either has rows left.  A row is
 * in one tier only (a promotion removes it from the disk). */
static fl_status tier_dump_merge(const fl_ps_table *t, int has_after, uint64_t after, size_t max,
                                 uint64_t *keys, float *vals, size_t *n, int *more) {
  const size_t d = t->dim, m = *n;
  size_t dn = 0, i = 0, j = 0, k = 0;
  uint64_t *dk = malloc((max + 1) * sizeof *dk), *mk = malloc((m ? m : 1) * sizeof *mk);
  unsigned char *db = malloc((max + 1) * t->blob);
  float *mv = malloc((m ? m : 1) * d * sizeof *mv);
  fl_status st = !dk || !mk || !db || !mv
                     ? FL_ERR(FL_ENOMEM, "sparse table %s: out of memory listing rows", t->name)
                     : fl_ps_tier_scan(t->tier, t->tier_id, has_after, after, max + 1, dk, db,
                                       t->blob, &dn);
  if (st == FL_OK) {
    memcpy(mk, keys, m * sizeof *mk);
    memcpy(mv, vals, m * d * sizeof *mv);
    while (k < max && (i < m || j < dn)) {
      if (j >= dn || (i < m && mk[i] < dk[j])) {
        keys[k] = mk[i];
        memcpy(vals + k * d, mv + i++ * d, d * sizeof *vals);
      } else {
        keys[k] = dk[j];
        memcpy(vals + k * d, db + j++ * t->blob + sizeof(int64_t), d * sizeof *vals);
      }
      k++;
    }
    *more = *more || i < m || j < dn;
    *n = k;
  }
  free(dk);
  free(mk);
  free(db);
  free(mv);
  return st;
}

/* 1 when the disk copy b of row r's key is as new as the memory row or
 * newer (fl_ps_tier_disk_newer). */
static int disk_newer(const fl_ps_table *t, int32_t r, const unsigned char *b) {
  int64_t upd, step;
  double time;
  memcpy(&upd, b, sizeof upd);
  blob_marks(t, b, &step, &time);
  return fl_ps_tier_disk_newer(upd, step, time, ROW(t, r)->t, ROW(t, r)->step, ROW(t, r)->time);
}

/* The memory rows of keys[0..n) looked up in the store (rows, found, seqs:
 * the caller's scratch for n): of a row in both tiers the older copy goes. */
static fl_status settle_some(fl_ps_table *t, const uint64_t *keys, size_t n, unsigned char *rows,
                             uint8_t *found, uint64_t *seqs) {
  FL_TRY(fl_ps_tier_get_many(t->tier, t->tier_id, keys, n, rows, t->blob, found, seqs));
  for (size_t i = 0; i < n; i++) {
    int32_t r = find(t, keys[i]);
    if (!found[i] || r < 0) continue;
    if (disk_newer(t, r, rows + i * t->blob)) {
      lru_unlink(t, r);
      slot_delete(t, keys[i]);
      free_index(t, r);
    } else if (fl_ps_tier_drop(t->tier, t->tier_id, keys[i], seqs[i]) != FL_OK) {
      tier_break(t);
    }
  }
  return FL_OK;
}

fl_status fl_ps_table_tier_settle(fl_ps_table *t) {
  enum { CHUNK = 512 };
  size_t n = t->n, i = 0;
  uint64_t *keys = t->tier ? malloc((n ? n : 1) * sizeof *keys) : NULL;
  unsigned char *rows = t->tier ? malloc(CHUNK * t->blob) : NULL;
  uint8_t *found = t->tier ? malloc(CHUNK) : NULL;
  uint64_t *seqs = t->tier ? malloc(CHUNK * sizeof *seqs) : NULL;
  fl_status st = FL_OK;
  if (!t->tier) return FL_OK;
  t->pf_n = 0;
  if (!keys || !rows || !found || !seqs)
    st = FL_ERR(FL_ENOMEM, "sparse table %s: out of memory settling %zu rows with the disk tier",
                t->name, n);
  for (int32_t r = t->tail; st == FL_OK && r >= 0; r = ROW(t, r)->prev) keys[i++] = ROW(t, r)->key;
  for (size_t off = 0; st == FL_OK && off < n; off += CHUNK)
    st = settle_some(t, keys + off, n - off < CHUNK ? n - off : CHUNK, rows, found, seqs);
  restamp(t);
  while (st == FL_OK && t->n && !t->tier_broken && atomic_load(t->hot_bytes) > t->hot_budget) {
    int32_t r;
    if (demote_row(t, t->tail, &r) != FL_OK) break;
    free_index(t, r);
  }
  free(keys);
  free(rows);
  free(found);
  free(seqs);
  return st;
}
