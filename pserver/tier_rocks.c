/* tier_rocks.c - the sparse tables' disk tier on RocksDB (tier_rocks.h).
 * Keys are 17 bytes: 'r', the table's name hash and the row id, both
 * big-endian, holding [u64 order sequence][the row's bytes] (a row of
 * the layout before the marks is FL_PS_TIER_MARKS_LEN shorter); 'o', the
 * table, the order sequence, holding the row id: the table's rows oldest
 * first (the caller passes each row's last use, fl_ps_tier_put_at; a
 * store before that took the demotion order, which was the same); and
 * 'u', the table, 0: the table's note (fl_ps_tier_put_note).  A store
 * copy of an earlier build may hold 'd' keys (a demotion's number, the
 * row id): removed at restore.
 * The rows demoted since the last checkpoint that marks its rows saved,
 * which a delta's copy takes, are one record file beside the store
 * (RECORD_FILE), all tables' alike: each demotion appends the row's id
 * and value as written, each removal of a row from the store (promotion,
 * eviction, expiry) its id, into its table's buffer, flushed into the
 * file as a chunk when full; so the copy reads the record once, in
 * order, instead of looking each row up in the store (random reads, most
 * of a delta's cost); a marking checkpoint or a restore removes the
 * record; a store that takes no deltas (fl_ps_tier_no_deltas) writes none.
 * Descriptors: the record holds one while it has entries (RECORD_FILES),
 * whatever the number of tables, and RocksDB's share of RLIMIT_NOFILE
 * (open_files_cap) is that much smaller.
 * Writes (demotions, removals) gather in a per-table indexed write batch
 * applied as one RocksDB write when it is full or before the table's next
 * read; a batch RocksDB refuses (disk full) stays and is read through.
 * Expiry walks a table's 'o' keys oldest first, reading each row's marks
 * through the caller, and deletes while they are due: the same rows, in
 * the same order, as a table all in memory would drop from its LRU tail.
 * A table's id filter (a blocked Bloom filter) answers most new ids
 * without a look-up; a large multi-get is read in chunks by the store's
 * reader threads at once (multi_get).
 * The write-ahead log is off: the store is rebuilt from a checkpoint at
 * start, never replayed, so rows written after the last checkpoint are not
 * needed after a crash.  Memory (fl_ps_tier_overhead): RocksDB's share is
 * a quarter of the budget: a block cache of budget/8 that also holds the
 * index and filter blocks, memtables of budget/32 each, at most
 * FL_TIER_MEMTABLES of them, and the pending batches (budget/32 in all:
 * budget/512 each while the store has at most 16 tables, a share of that
 * sum each beyond, at least FL_TIER_MIN_PENDING); the tables keep the
 * other three quarters for hot rows.
 * Tables: one entry per table id the store has seen (a sparse table's
 * stripe), as many as there are: its counters, pending batch, id filter
 * and record buffer (the table directory, below); what they hold in
 * memory is counted (fl_ps_tier_stats.tables). */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_log.h"
#include "tier_rocks.h"

#define KEY_LEN 17
#define SEQ_LEN 8
#define FL_TIER_CACHE_SHARE 8     /* block cache with index and filters: budget / 8 */
#define FL_TIER_MEMTABLES 3       /* memtables, one filling, the others flushing */
#define FL_TIER_MEMTABLE_SHARE 32 /* each memtable: budget / 32 */
#define FL_TIER_PENDING_SHARE 512 /* each table's pending batch: budget / 512 ... */
#define FL_TIER_PENDING_TABLES 16 /* ... while the store has at most 16 tables */
#define FL_TIER_MIN_BYTES (64u << 10)
#define FL_TIER_MIN_PENDING (16u << 10)
#define ENTRY_COST 48 /* a batch entry's index and header, roughly */
/* A copy is read with a block cache of COPY_BUDGET / FL_TIER_CACHE_SHARE. */
#define COPY_BUDGET (16u << 20)
/* A delta's copy (layout 2): the directory holds one SST file, DELTA_FILE,
 * of the delta's 'o', 'r' and 'u' keys and a key 'v', 0, 0 holding the
 * layout; read by ingesting it into a scratch store beside the copy
 * (<copy>.<pid>-<n>.tier: a crash's leftover is pruned as a copy without
 * its checkpoint file).  Layout 1, a RocksDB store of its own, still
 * reads as any copy. */
#define DELTA_FILE "delta.sst"
#define DELTA_LAYOUT 2
/* The record of demotions and removals since the last marking
 * checkpoint, every table's in one file, <store>/RECORD_FILE (a table a
 * file took 16 descriptors a sparse table: a pserver of several tables
 * under a low ulimit -n ran out of them): chunks [u64 table id][u64 bytes
 * of entries][that table's entries], each a table's buffer (its share of
 * RECORD_BUFFER * RECORD_TABLES, record_cap) flushed when full or before
 * a delta's copy, at an offset taken under the store's record lock; entries [u64 id][u64 value
 * bytes, RECORD_REMOVED: a removal][the value: the order sequence
 * big-endian, the row], native byte order (never read by another
 * process).  A table's chunks lie in its order (its calls come one at a
 * time); different tables' interleave.  The record is no part of a
 * checkpoint: a restore starts it afresh. */
#define RECORD_FILE "demoted.rec"
#define RECORD_REMOVED UINT64_MAX
#define RECORD_BUFFER (64u << 10) /* a table's buffer, store of RECORD_TABLES tables or fewer */
#define RECORD_TABLES 16          /* beyond, each has RECORD_BUFFER * 16 / tables ... */
#define RECORD_MIN (4u << 10)     /* ... but at least RECORD_MIN */
#define RECORD_HEAD 16 /* a chunk's table id and length */
#define RECORD_FILES 1 /* descriptors the tier keeps open besides RocksDB's */

/* A blocked Bloom filter of a table's row ids on disk: a 512-bit block
 * per id, FILTER_PROBES bits in it.  Ids are added, never removed (a
 * deleted id is a false positive: one look-up); it is built again from the
 * table's 'o' keys (small values) once it took more ids than it was sized
 * for, and at every restore. */
#define FILTER_BITS_PER_ID 10
#define FILTER_PROBES 6
#define FILTER_MIN_IDS 4096
typedef struct id_filter {
  uint64_t *w;    /* nblocks * 8 words */
  size_t nblocks; /* a power of two */
  uint64_t adds, cap;
} id_filter;

typedef struct tier_table {
  uint64_t id;
  id_filter f;
  _Atomic uint64_t rows;
  uint64_t newest; /* the largest order sequence written (0: none) */
  rocksdb_writebatch_t *pend; /* writes not yet applied */
  _Atomic size_t pend_bytes;
  rocksdb_writebatch_wi_t *stuck; /* writes RocksDB refused (NULL: none), read through */
  unsigned char *rbuf; /* RECORD_HEAD, then entries not yet in the record (NULL: none since
                        * the last marking checkpoint) */
  size_t rlen, rcap;   /* bytes of entries in rbuf, room for them */
  size_t rmax;         /* the largest entry recorded (its buffer holds one at least) */
} tier_table;

/* The table directory: an entry per table, however many.  Entries live
 * in chunks that never move (chunk c holds DIR_FIRST << c of them, in
 * the order the tables came), so an entry's address stays valid until
 * the store is closed, and are found by id through an open-addressing
 * index of their addresses (at most half full) read without a lock: an
 * entry is filled in before its slot is published, and an index that
 * would pass half full is replaced by one twice as large, published
 * whole, the old one kept (a reader may still probe it; it then misses
 * the new table and looks again under the lock) until the store is
 * closed.  n_tables counts the entries, published after each one. */
#define DIR_FIRST 16
#define DIR_CHUNKS 32
typedef struct tier_index {
  struct tier_index *old; /* the index this one replaced (NULL: none) */
  size_t mask;            /* slots - 1, slots a power of two */
  _Atomic(tier_table *) slot[];
} tier_index;

struct fl_ps_tier {
  char path[4096];
  size_t budget, pend_cap;
  int max_files; /* RocksDB's max_open_files (open_files_cap at the open) */
  rocksdb_t *db;
  rocksdb_column_family_handle_t *cf;
  rocksdb_options_t *opt;
  rocksdb_cache_t *cache;
  rocksdb_block_based_table_options_t *bbo;
  rocksdb_writeoptions_t *wo;
  rocksdb_readoptions_t *ro;
  _Atomic uint64_t seq; /* the next order sequence of fl_ps_tier_put */
  int no_deltas; /* no delta copies: no record of demotions (fl_ps_tier_no_deltas) */
  pthread_mutex_t mu; /* guards adding a table: chunk and index */
  tier_table *chunk[DIR_CHUNKS];
  _Atomic(tier_index *) index;
  _Atomic size_t n_tables;
  _Atomic uint64_t dir_bytes; /* the directory's memory: chunks, indexes, filters, records */
  _Atomic uint64_t hits, misses, promotions, demotions, write_errors;
  pthread_mutex_t rec_mu; /* guards rec_fd and rec_end */
  int rec_fd;             /* the record of demotions and removals (-1: none yet) */
  off_t rec_end;          /* its length, the chunks flushed and being flushed */
  _Atomic int rec_bad;    /* an entry was lost: the next delta's copy is refused */
  int scratch; /* a store made to read a delta's copy: removed at close */
  struct read_pool *readers; /* started at the first large multi-get (NULL: none yet) */
};

static void put_be64(unsigned char *p, uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}

static uint64_t get_be64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return v;
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Size f, a filter of t, for ids ids (cleared); FL_ENOMEM leaves f
 * without bits (every id then may be on disk). */
static fl_status filter_size(fl_ps_tier *t, id_filter *f, uint64_t ids) {
  size_t nb = 1;
  uint64_t *w;
  if (ids < FILTER_MIN_IDS) ids = FILTER_MIN_IDS;
  while ((uint64_t)nb * 512 < ids * FILTER_BITS_PER_ID) nb <<= 1;
  w = calloc(nb * 8, sizeof *w);
  atomic_fetch_sub(&t->dir_bytes, f->nblocks * 64);
  atomic_fetch_add(&t->dir_bytes, w ? nb * 64 : 0);
  free(f->w);
  f->w = w;
  f->nblocks = w ? nb : 0;
  f->adds = 0;
  f->cap = w ? ids : 0;
  if (w) return FL_OK;
  return FL_ERR(FL_ENOMEM, "disk tier: out of memory for the filter of %llu row ids; new ids "
                "are looked up in the store", (unsigned long long)ids);
}

/* An id the filter already answers (a row demoted again) is not counted:
 * only new ids bring the rebuild nearer. */
static void filter_add(id_filter *f, uint64_t id) {
  uint64_t h = mix64(id), *b, had = 1;
  if (!f->w) return;
  b = f->w + (h & (f->nblocks - 1)) * 8;
  h = mix64(h ^ 0x9e3779b97f4a7c15ULL);
  for (int i = 0; i < FILTER_PROBES; i++, h >>= 9) {
    uint64_t bit = 1ULL << (h & 63);
    had &= (b[(h >> 6) & 7] & bit) != 0;
    b[(h >> 6) & 7] |= bit;
  }
  f->adds += !had;
}

/* 0 when id is surely not on disk. */
static int filter_may(const id_filter *f, uint64_t id) {
  uint64_t h = mix64(id);
  const uint64_t *b;
  if (!f->w) return 1;
  b = f->w + (h & (f->nblocks - 1)) * 8;
  h = mix64(h ^ 0x9e3779b97f4a7c15ULL);
  for (int i = 0; i < FILTER_PROBES; i++, h >>= 9)
    if (!(b[(h >> 6) & 7] & (1ULL << (h & 63)))) return 0;
  return 1;
}

static void make_key(unsigned char *k, char kind, uint64_t table, uint64_t x) {
  k[0] = (unsigned char)kind;
  put_be64(k + 1, table);
  put_be64(k + 9, x);
}

size_t fl_ps_tier_overhead(size_t budget) {
  return budget / FL_TIER_CACHE_SHARE + FL_TIER_MEMTABLES * (budget / FL_TIER_MEMTABLE_SHARE) +
         16 * (budget / FL_TIER_PENDING_SHARE);
}

const char *fl_ps_tier_path(const fl_ps_tier *t) { return t->path; }

void fl_ps_tier_no_deltas(fl_ps_tier *t) { t->no_deltas = 1; }

int fl_ps_tier_delta_ok(const fl_ps_tier *t) {
  return !t->no_deltas && !atomic_load(&t->rec_bad);
}

/* Entry i of the directory: chunk *c, place *at in it. */
static void dir_place(size_t i, size_t *c, size_t *at) {
  size_t size = DIR_FIRST;
  for (*c = 0; i >= size; (*c)++, size <<= 1) i -= size;
  *at = i;
}

/* Entry i (below n_tables) of the directory. */
static tier_table *tab_at(const fl_ps_tier *t, size_t i) {
  size_t c, at;
  dir_place(i, &c, &at);
  return &t->chunk[c][at];
}

/* The entry of table, NULL when the store has none (yet); no lock. */
static tier_table *find_table(const fl_ps_tier *t, uint64_t table) {
  tier_index *x = atomic_load_explicit(&t->index, memory_order_acquire);
  if (!x) return NULL;
  for (size_t h = mix64(table) & x->mask;; h = (h + 1) & x->mask) {
    tier_table *e = atomic_load_explicit(&x->slot[h], memory_order_acquire);
    if (!e || e->id == table) return e;
  }
}

/* e published in x (which has a free slot). */
static void index_put(tier_index *x, tier_table *e) {
  size_t h = mix64(e->id) & x->mask;
  while (atomic_load_explicit(&x->slot[h], memory_order_relaxed)) h = (h + 1) & x->mask;
  atomic_store_explicit(&x->slot[h], e, memory_order_release);
}

/* Room in t's index for n entries (at most half full), the index replaced
 * by a larger one holding the n - 1 entries there are when it would pass
 * that; 0 when out of memory.  Under t->mu. */
static int index_room(fl_ps_tier *t, size_t n) {
  tier_index *x = atomic_load_explicit(&t->index, memory_order_relaxed), *y;
  size_t slots = x ? x->mask + 1 : 2 * DIR_FIRST;
  if (x && 2 * n <= slots) return 1;
  while (2 * n > slots) slots <<= 1;
  if (!(y = calloc(1, sizeof *y + slots * sizeof y->slot[0]))) return 0;
  y->old = x;
  y->mask = slots - 1;
  for (size_t i = 0; i + 1 < n; i++) index_put(y, tab_at(t, i));
  atomic_fetch_add(&t->dir_bytes, sizeof *y + slots * sizeof y->slot[0]);
  atomic_store_explicit(&t->index, y, memory_order_release);
  return 1;
}

/* A new entry of table, the directory's n_tables-th: NULL (logged) when
 * out of memory.  Under t->mu. */
static tier_table *add_table(fl_ps_tier *t, uint64_t table) {
  size_t n = atomic_load(&t->n_tables), c, at;
  tier_table *e;
  dir_place(n, &c, &at);
  if (c < DIR_CHUNKS && !t->chunk[c] && (t->chunk[c] = calloc(DIR_FIRST << c, sizeof *e)))
    atomic_fetch_add(&t->dir_bytes, (DIR_FIRST << c) * sizeof *e);
  if (c >= DIR_CHUNKS || !t->chunk[c] || !index_room(t, n + 1)) {
    (void)FL_ERR(FL_ENOMEM, "disk tier %s: out of memory for the entry of table %016llx (%zu "
                 "tables in the store)", t->path, (unsigned long long)table, n);
    return NULL;
  }
  e = &t->chunk[c][at];
  e->id = table;
  atomic_store(&e->rows, 0);
  e->newest = 0;
  e->pend = rocksdb_writebatch_create();
  e->pend_bytes = 0;
  e->stuck = NULL;
  e->rbuf = NULL;
  e->rlen = e->rcap = e->rmax = 0;
  (void)filter_size(t, &e->f, FILTER_MIN_IDS);
  index_put(atomic_load_explicit(&t->index, memory_order_relaxed), e);
  atomic_store(&t->n_tables, n + 1);
  return e;
}

/* The entry of table (added on first use); NULL (logged) when out of
 * memory. */
static tier_table *table_of(fl_ps_tier *t, uint64_t table) {
  tier_table *e = find_table(t, table);
  if (e) return e;
  pthread_mutex_lock(&t->mu);
  if (!(e = find_table(t, table))) e = add_table(t, table);
  pthread_mutex_unlock(&t->mu);
  return e;
}

/* The bytes after which a table's pending batch is applied: budget/512
 * (pend_cap) while the store has at most FL_TIER_PENDING_TABLES tables,
 * beyond that an equal share of their sum, at least FL_TIER_MIN_PENDING. */
static size_t table_pend_cap(const fl_ps_tier *t) {
  size_t n = atomic_load(&t->n_tables), cap;
  if (n <= FL_TIER_PENDING_TABLES) return t->pend_cap;
  cap = t->pend_cap * FL_TIER_PENDING_TABLES / n;
  return cap < FL_TIER_MIN_PENDING ? FL_TIER_MIN_PENDING : cap;
}

/* A table's record buffer: RECORD_BUFFER while the store has at most
 * RECORD_TABLES tables, beyond that an equal share of their sum, at least
 * RECORD_MIN. */
static size_t record_cap(const fl_ps_tier *t) {
  size_t n = atomic_load(&t->n_tables), cap;
  if (n <= RECORD_TABLES) return RECORD_BUFFER;
  cap = (size_t)RECORD_BUFFER * RECORD_TABLES / n;
  return cap < RECORD_MIN ? RECORD_MIN : cap;
}

/* The SST files RocksDB may hold open: a quarter of the descriptors the
 * process may open (RLIMIT_NOFILE, which the daemons raise to its hard
 * limit at start) less the RECORD_FILES the tier keeps open itself, so
 * that the disk tier never takes the descriptors gRPC needs for its
 * connections; at least ROCKSDB_MIN_OPEN_FILES (RocksDB raises a smaller
 * setting to that).  RocksDB also holds a few files outside that share
 * (LOCK, MANIFEST, LOG, a flush's and a compaction's output). */
#define ROCKSDB_MIN_OPEN_FILES 20
static int open_files_cap(void) {
  struct rlimit rl;
  rlim_t n = 256;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) n = rl.rlim_cur / 4;
  n = n > RECORD_FILES ? n - RECORD_FILES : 0;
  return n < ROCKSDB_MIN_OPEN_FILES ? ROCKSDB_MIN_OPEN_FILES : n > 65536 ? 65536 : (int)n;
}

static void record_path(const fl_ps_tier *t, char *p, size_t cap) {
  snprintf(p, cap, "%s/" RECORD_FILE, t->path);
}

/* The record lost an entry of table (what says how, err the errno): the
 * next delta's copy is refused; logged once until the next marking
 * checkpoint, with the descriptor limit when that was the cause. */
static void record_lost(fl_ps_tier *t, uint64_t table, const char *what, int err) {
  char p[4200], lim[160] = "";
  struct rlimit rl;
  if (atomic_exchange(&t->rec_bad, 1)) return;
  record_path(t, p, sizeof p);
  if ((err == EMFILE || err == ENFILE) && getrlimit(RLIMIT_NOFILE, &rl) == 0)
    snprintf(lim, sizeof lim, " (out of descriptors: RLIMIT_NOFILE %llu, RocksDB may hold %d of "
             "them; raise ulimit -n)", (unsigned long long)rl.rlim_cur, t->max_files);
  (void)FL_ERR(FL_EIO, "disk tier %s: cannot %s the record of demoted rows %s (table %016llx): "
               "%s%s; no row is lost, but the next checkpoint cannot be a delta and is taken "
               "whole", t->path, what, p, (unsigned long long)table, strerror(err), lim);
}

/* The record file opened (created empty) unless it is; 0 when that
 * failed (logged, the record lost). */
static int record_open(fl_ps_tier *t, uint64_t table) {
  char p[4200];
  int err = 0;
  pthread_mutex_lock(&t->rec_mu);
  if (t->rec_fd < 0) {
    record_path(t, p, sizeof p);
    t->rec_fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    err = t->rec_fd < 0 ? errno : 0;
    t->rec_end = 0;
  }
  pthread_mutex_unlock(&t->rec_mu);
  if (err) record_lost(t, table, "open", err);
  return !err;
}

/* e's buffered entries appended to the record as one chunk (the buffer
 * emptied); a failure is logged and loses the record. */
static void record_flush(fl_ps_tier *t, tier_table *e) {
  size_t n = RECORD_HEAD + e->rlen, done = 0;
  uint64_t head[2] = {e->id, e->rlen};
  off_t at;
  if (!e->rlen) return;
  e->rlen = 0;
  if (atomic_load(&t->rec_bad)) return;
  memcpy(e->rbuf, head, sizeof head);
  pthread_mutex_lock(&t->rec_mu);
  at = t->rec_end;
  t->rec_end += (off_t)n;
  pthread_mutex_unlock(&t->rec_mu);
  while (done < n) {
    ssize_t k = pwrite(t->rec_fd, e->rbuf + done, n - done, at + (off_t)done);
    if (k <= 0) {
      record_lost(t, e->id, "write", k < 0 ? errno : ENOSPC);
      return;
    }
    done += (size_t)k;
  }
}

/* Append to the record, through e's buffer, the demotion of row key with
 * the value sq (SEQ_LEN bytes) and row (len bytes), or with sq NULL its
 * removal from the store.  The file is opened by the first entry since
 * the last marking checkpoint.  A failure is logged once (until the next
 * marking checkpoint) and refuses the next delta's copy; the demotion
 * itself goes on. */
static void record(fl_ps_tier *t, tier_table *e, uint64_t key, const unsigned char *sq,
                   const void *row, size_t len) {
  uint64_t head[2] = {key, sq ? SEQ_LEN + (uint64_t)len : RECORD_REMOVED};
  size_t n = sizeof head + (sq ? SEQ_LEN + len : 0), cap = record_cap(t);
  unsigned char *p;
  if (t->no_deltas || atomic_load(&t->rec_bad)) return;
  if (n > e->rmax) e->rmax = n;
  if (cap < e->rmax) cap = e->rmax;
  if (e->rlen + n > e->rcap || e->rcap != cap) record_flush(t, e);
  if (e->rcap != cap) { /* first used, its share changed, or a larger entry */
    if (!(p = realloc(e->rbuf, RECORD_HEAD + cap))) {
      record_lost(t, e->id, "buffer", ENOMEM);
      return;
    }
    atomic_fetch_add(&t->dir_bytes, cap + (e->rbuf ? 0 : RECORD_HEAD));
    atomic_fetch_sub(&t->dir_bytes, e->rcap);
    e->rbuf = p;
    e->rcap = cap;
  }
  if (!e->rlen && !record_open(t, e->id)) return;
  p = e->rbuf + RECORD_HEAD + e->rlen;
  memcpy(p, head, sizeof head);
  if (sq) memcpy(p + sizeof head, sq, SEQ_LEN);
  if (len) memcpy(p + sizeof head + SEQ_LEN, row, len);
  e->rlen += n;
}

/* The record closed and removed, every table's buffer freed (the next
 * entry takes one of the share then): none demoted since now. */
static void drop_records(fl_ps_tier *t) {
  char p[4200];
  for (size_t i = 0; i < atomic_load(&t->n_tables); i++) {
    tier_table *e = tab_at(t, i);
    if (e->rbuf) atomic_fetch_sub(&t->dir_bytes, RECORD_HEAD + e->rcap);
    free(e->rbuf);
    e->rbuf = NULL;
    e->rlen = e->rcap = 0;
  }
  if (t->rec_fd >= 0) {
    close(t->rec_fd);
    record_path(t, p, sizeof p);
    (void)unlink(p);
  }
  t->rec_fd = -1;
  t->rec_end = 0;
  atomic_store(&t->rec_bad, 0);
}

/* Remove dir and the files in it (the store is flat). */
static fl_status remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[4200];
  if (!d) {
    if (errno == ENOENT) return FL_OK;
    return FL_ERR(FL_EIO, "disk tier: cannot open %s: %s", dir, strerror(errno));
  }
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0) {
      closedir(d);
      return FL_ERR(FL_EIO, "disk tier: cannot remove %s: %s; remove the directory %s by hand",
                    p, strerror(errno), dir);
    }
  }
  closedir(d);
  if (rmdir(dir) != 0)
    return FL_ERR(FL_EIO, "disk tier: cannot remove %s: %s", dir, strerror(errno));
  return FL_OK;
}

/* FL_ESTATE (logged) when another process holds the store in dir open
 * (RocksDB's lock on dir/LOCK), before anything there is removed. */
static fl_status check_unused(const char *dir) {
  char p[4200];
  struct flock fl;
  int fd;
  snprintf(p, sizeof p, "%s/LOCK", dir);
  if ((fd = open(p, O_RDWR | O_CLOEXEC)) < 0) return FL_OK;
  memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (fcntl(fd, F_GETLK, &fl) != 0) fl.l_type = F_UNLCK;
  close(fd);
  if (fl.l_type == F_UNLCK) return FL_OK;
  return FL_ERR(FL_ESTATE, "disk tier %s: in use by process %ld (another pserver in the same data "
                "directory?): give each pserver its own checkpoint directory", dir,
                (long)fl.l_pid);
}

static fl_status open_db(fl_ps_tier *t) {
  static const char *const names[1] = {"default"};
  const rocksdb_options_t *opts[1] = {t->opt};
  char *err = NULL;
  t->db = rocksdb_open_column_families(t->opt, t->path, 1, names, opts, &t->cf, &err);
  if (err) {
    fl_status st = FL_ERR(FL_EIO, "disk tier: cannot open the RocksDB store %s: %s (is another "
                          "pserver using this data directory?)", t->path, err);
    rocksdb_free(err);
    t->db = NULL;
    t->cf = NULL;
    return st;
  }
  return FL_OK;
}

static void close_db(fl_ps_tier *t) {
  if (t->cf) rocksdb_column_family_handle_destroy(t->cf);
  if (t->db) rocksdb_close(t->db);
  t->cf = NULL;
  t->db = NULL;
}

/* Index and filter blocks live in the block cache (charged to the budget)
 * in partitions of METADATA_BLOCK bytes under a pinned top level: the cache
 * is small next to the store (budget/8 for 1.4 times the hot rows' bytes
 * per disk row), and whole index and filter blocks, a file's each, were
 * read again for most look-ups (a quarter of their CPU); a look-up now
 * reads one partition of each.  The last sorted run has no filter: a row
 * looked up is there or in a newer run (the table's id filter answers new
 * ids first), so its filter, the largest, would rule out next to nothing.
 * Each data block carries a hash index for point look-ups. */
#define METADATA_BLOCK 4096

/* Data blocks start at a page (4 KiB, their size; RocksDB pads each, the
 * values are not compressed): a look-up that misses the block cache reads
 * one page, where a block across two pages took two from the disk.
 * RocksDB 7.8's C API has no setter for it: set through an options string,
 * which configures the table factory set above in place (its block cache
 * kept).  Refused, the blocks stay unaligned (logged). */
static void align_blocks(fl_ps_tier *t) {
  char *err = NULL;
  rocksdb_options_t *o = rocksdb_options_create();
  rocksdb_get_options_from_string(t->opt, "block_based_table_factory={block_align=true}", o, &err);
  if (err) {
    FL_LOGW("disk tier %s: RocksDB refused aligned data blocks (%s): a look-up may read two "
            "pages", t->path, err);
    rocksdb_free(err);
    rocksdb_options_destroy(o);
    return;
  }
  rocksdb_options_destroy(t->opt);
  t->opt = o;
}

static void set_table_options(fl_ps_tier *t, size_t cache) {
  t->cache = rocksdb_cache_create_lru(cache);
  t->bbo = rocksdb_block_based_options_create();
  rocksdb_block_based_options_set_block_cache(t->bbo, t->cache);
  rocksdb_block_based_options_set_filter_policy(t->bbo, rocksdb_filterpolicy_create_bloom_full(10));
  rocksdb_block_based_options_set_cache_index_and_filter_blocks(t->bbo, 1);
  rocksdb_block_based_options_set_cache_index_and_filter_blocks_with_high_priority(t->bbo, 1);
  rocksdb_block_based_options_set_index_type(
      t->bbo, rocksdb_block_based_table_index_type_two_level_index_search);
  rocksdb_block_based_options_set_partition_filters(t->bbo, 1);
  rocksdb_block_based_options_set_metadata_block_size(t->bbo, METADATA_BLOCK);
  rocksdb_block_based_options_set_pin_top_level_index_and_filter(t->bbo, 1);
  rocksdb_options_set_optimize_filters_for_hits(t->opt, 1);
  rocksdb_block_based_options_set_data_block_index_type(
      t->bbo, rocksdb_block_based_table_data_block_index_type_binary_search_and_hash);
  rocksdb_options_set_block_based_table_factory(t->opt, t->bbo);
  align_blocks(t);
}

#define COMPACTION_READAHEAD (256u << 10)
#define ROCKSDB_FATAL_LEVEL 4 /* rocksdb::InfoLogLevel::FATAL_LEVEL: no name in the C API */
static void set_options(fl_ps_tier *t) {
  size_t cache = t->budget / FL_TIER_CACHE_SHARE, mt = t->budget / FL_TIER_MEMTABLE_SHARE;
  if (cache < FL_TIER_MIN_BYTES) cache = FL_TIER_MIN_BYTES;
  if (mt < FL_TIER_MIN_BYTES) mt = FL_TIER_MIN_BYTES;
  t->pend_cap = t->budget / FL_TIER_PENDING_SHARE;
  if (t->pend_cap < FL_TIER_MIN_PENDING) t->pend_cap = FL_TIER_MIN_PENDING;
  t->opt = rocksdb_options_create();
  rocksdb_options_set_create_if_missing(t->opt, 1);
  rocksdb_options_set_write_buffer_size(t->opt, mt);
  rocksdb_options_set_max_write_buffer_number(t->opt, FL_TIER_MEMTABLES);
  rocksdb_options_set_db_write_buffer_size(t->opt, FL_TIER_MEMTABLES * mt);
  rocksdb_options_set_memtable_prefix_bloom_size_ratio(t->opt, 0.05);
  rocksdb_options_set_memtable_whole_key_filtering(t->opt, 1);
  rocksdb_options_set_compression(t->opt, rocksdb_no_compression);
  t->max_files = open_files_cap();
  rocksdb_options_set_max_open_files(t->opt, t->max_files);
  /* The info LOG lives on the store's disk: on a full disk RocksDB's
   * error handler writes to it after a failed flush, and librocksdb 7.8
   * aborts the process when that write fails too (an assertion in its
   * file writer).  Its C API offers no logger of our own, so the LOG takes
   * fatal messages only; the errors reach the pserver's log through the
   * writes RocksDB refuses and its background-error count. */
  rocksdb_options_set_info_log_level(t->opt, ROCKSDB_FATAL_LEVEL);
  /* Rows land at random keys and small memtables flush often: leveled
   * compaction would rewrite the whole last level for every few
   * memtables (measured: 58% of the CPU); universal compaction merges
   * sorted runs of similar size instead (about half the CPU per row, the
   * disk holding up to twice the live rows meanwhile).  Let the runs pile
   * up a little before writes slow down. */
  rocksdb_options_set_max_background_jobs(t->opt, 2);
  rocksdb_options_set_level0_file_num_compaction_trigger(t->opt, 8);
  rocksdb_options_set_level0_slowdown_writes_trigger(t->opt, 48);
  rocksdb_options_set_level0_stop_writes_trigger(t->opt, 96);
  rocksdb_options_set_compaction_style(t->opt, rocksdb_universal_compaction);
  /* The store's files are opened for random reads (no kernel readahead),
   * so a compaction read its inputs a 4 KiB block per pread: as many
   * reads as the look-ups' (bench_tier_cgroup.sh at 10^7 rows, 400 MiB:
   * 1.9 GB for 473,000 promotions).  Read them COMPACTION_READAHEAD at a
   * time instead (a buffer per input file being compacted). */
  rocksdb_options_compaction_readahead_size(t->opt, COMPACTION_READAHEAD);
  set_table_options(t, cache);
  t->wo = rocksdb_writeoptions_create();
  rocksdb_writeoptions_disable_WAL(t->wo, 1);
  rocksdb_writeoptions_set_sync(t->wo, 0);
  t->ro = rocksdb_readoptions_create();
}

/* A tier of store dir with its options set, not opened yet.  Ownership:
 * the caller owns *out (fl_ps_tier_close). */
static fl_status tier_new(const char *dir, size_t budget, fl_ps_tier **out) {
  fl_ps_tier *t;
  *out = NULL;
  if (strlen(dir) >= sizeof t->path)
    return FL_ERR(FL_EINVAL, "disk tier: path %s too long", dir);
  t = calloc(1, sizeof *t);
  if (!t) return FL_ERR(FL_ENOMEM, "disk tier: out of memory");
  snprintf(t->path, sizeof t->path, "%s", dir);
  t->budget = budget;
  pthread_mutex_init(&t->mu, NULL);
  pthread_mutex_init(&t->rec_mu, NULL);
  t->rec_fd = -1;
  set_options(t);
  *out = t;
  return FL_OK;
}

/* glibc gives each new thread a malloc arena of its own (up to 8 a core)
 * until M_ARENA_MAX; blocks a reader read and the block cache let go
 * later stayed resident in the readers' arenas (bench_tier: 11 MB more
 * peak RSS at a 42 MB budget, past the memory cgroup's limit at 400 MiB),
 * so a process with a disk tier keeps FL_TIER_ARENAS arenas; threads
 * started after share them. */
#define FL_TIER_ARENAS 2

fl_status fl_ps_tier_open(const char *dir, size_t budget, fl_ps_tier **out) {
  fl_ps_tier *t;
  fl_status st;
  *out = NULL;
  mallopt(M_ARENA_MAX, FL_TIER_ARENAS);
  FL_TRY(tier_new(dir, budget, &t));
  if ((st = check_unused(dir)) != FL_OK || (st = remove_dir(dir)) != FL_OK ||
      (st = open_db(t)) != FL_OK) {
    fl_ps_tier_close(t);
    return st;
  }
  *out = t;
  return FL_OK;
}

static void readers_stop(fl_ps_tier *t);

/* Writes still pending are dropped: the next open starts the store afresh. */
void fl_ps_tier_close(fl_ps_tier *t) {
  if (!t) return;
  readers_stop(t);
  close_db(t);
  drop_records(t);
  if (t->scratch) (void)remove_dir(t->path);
  for (size_t i = 0; i < atomic_load(&t->n_tables); i++) {
    tier_table *e = tab_at(t, i);
    rocksdb_writebatch_destroy(e->pend);
    if (e->stuck) rocksdb_writebatch_wi_destroy(e->stuck);
    free(e->f.w);
  }
  for (size_t c = 0; c < DIR_CHUNKS; c++) free(t->chunk[c]);
  for (tier_index *x = atomic_load(&t->index), *old; x; x = old) {
    old = x->old;
    free(x);
  }
  rocksdb_readoptions_destroy(t->ro);
  rocksdb_writeoptions_destroy(t->wo);
  rocksdb_options_destroy(t->opt);
  rocksdb_block_based_options_destroy(t->bbo);
  rocksdb_cache_destroy(t->cache);
  pthread_mutex_destroy(&t->mu);
  pthread_mutex_destroy(&t->rec_mu);
  free(t);
}

static void keep_put(void *wi, const char *k, size_t kl, const char *v, size_t vl) {
  rocksdb_writebatch_wi_put(wi, k, kl, v, vl);
}

static void keep_delete(void *wi, const char *k, size_t kl) {
  rocksdb_writebatch_wi_delete(wi, k, kl);
}

/* A pending write, seen through rocksdb_writebatch_iterate (k and v point
 * into the batch); i is its place in the batch. */
typedef struct ent {
  const char *k, *v;
  size_t vl;
  size_t i;
  int del;
} ent;

typedef struct ents {
  ent *a;
  size_t n, cap;
  int bad; /* out of memory: write the batch as it is */
} ents;

static void ents_add(ents *x, const char *k, const char *v, size_t vl, int del) {
  if (x->bad) return;
  if (x->n == x->cap) {
    size_t cap = x->cap ? 2 * x->cap : 1024;
    ent *a = realloc(x->a, cap * sizeof *a);
    if (!a) {
      x->bad = 1;
      return;
    }
    x->a = a;
    x->cap = cap;
  }
  x->a[x->n] = (ent){k, v, vl, x->n, del};
  x->n++;
}

static void ents_put(void *x, const char *k, size_t kl, const char *v, size_t vl) {
  (void)kl; /* every key is KEY_LEN */
  ents_add(x, k, v, vl, 0);
}

static void ents_delete(void *x, const char *k, size_t kl) {
  (void)kl;
  ents_add(x, k, NULL, 0, 1);
}

/* Key order, then batch order (a key's later write stays later). */
static int cmp_ent(const void *pa, const void *pb) {
  const ent *a = pa, *b = pb;
  int c = memcmp(a->k, b->k, KEY_LEN);
  return c ? c : (a->i > b->i) - (a->i < b->i);
}

/* Write e's pending batch in key order: the memtable's skip list takes
 * sorted keys for a fraction of the cost of random ones.  Its deletes go
 * as single deletes: a row's 'r' key is put once per demotion and deleted
 * once (promotion, eviction, expiry, a load's settling) before it can be
 * put again, 'o' keys are unique, and the note ('u') is never deleted, so
 * a delete and its put cancel in the first flush or compaction holding
 * both instead of the tombstone travelling to the last sorted run (a row
 * demoted and promoted again within a memtable's life never reaches an
 * SST file). */
static void write_sorted(fl_ps_tier *t, tier_table *e, char **err) {
  ents x = {0};
  rocksdb_writebatch_t *wb;
  rocksdb_writebatch_iterate(e->pend, &x, ents_put, ents_delete);
  if (x.bad || !(wb = rocksdb_writebatch_create())) {
    free(x.a);
    rocksdb_write(t->db, t->wo, e->pend, err);
    return;
  }
  qsort(x.a, x.n, sizeof *x.a, cmp_ent);
  for (size_t i = 0; i < x.n; i++) {
    if (x.a[i].del) rocksdb_writebatch_singledelete(wb, x.a[i].k, KEY_LEN);
    else rocksdb_writebatch_put(wb, x.a[i].k, KEY_LEN, x.a[i].v, x.a[i].vl);
  }
  free(x.a);
  rocksdb_write(t->db, t->wo, wb, err);
  rocksdb_writebatch_destroy(wb);
}

/* Apply e's pending writes as one RocksDB write.  Writes RocksDB refuses
 * move to e->stuck, an indexed batch read through until a later call
 * applies it; the error is logged the first time. */
static fl_status settle(fl_ps_tier *t, tier_table *e) {
  char *err = NULL;
  if (!e->pend_bytes) return FL_OK;
  if (e->stuck) rocksdb_write_writebatch_wi(t->db, t->wo, e->stuck, &err);
  else write_sorted(t, e, &err);
  if (!err) {
    if (e->stuck) rocksdb_writebatch_wi_destroy(e->stuck);
    e->stuck = NULL;
    rocksdb_writebatch_clear(e->pend);
    e->pend_bytes = 0;
    return FL_OK;
  }
  atomic_fetch_add(&t->write_errors, 1);
  fl_status st = e->stuck ? FL_EIO
                          : FL_ERR(FL_EIO, "disk tier %s: writing %zu bytes of demoted rows "
                                   "failed: %s (disk full? free space there or raise "
                                   "pserver.memory_budget); they stay in memory meanwhile",
                                   t->path, atomic_load(&e->pend_bytes), err);
  if (!e->stuck) {
    e->stuck = rocksdb_writebatch_wi_create(0, 1);
    rocksdb_writebatch_iterate(e->pend, e->stuck, keep_put, keep_delete);
    rocksdb_writebatch_clear(e->pend);
  }
  rocksdb_free(err);
  return st;
}

/* Every table's pending writes applied before a copy of the store.  Writes
 * RocksDB still refuses (logged when first refused) refuse the copy, the
 * reason named again: a checkpoint is not taken without them. */
static fl_status settle_all(fl_ps_tier *t) {
  for (size_t i = 0; i < atomic_load(&t->n_tables); i++) {
    int was_stuck = tab_at(t, i)->stuck != NULL;
    fl_status st = settle(t, tab_at(t, i));
    if (st != FL_OK && was_stuck)
      return FL_ERR(st, "disk tier %s: no copy of the store for the checkpoint: RocksDB still "
                    "refuses the rows demoted since a write failed (disk full? RocksDB takes "
                    "writes again within seconds of space freed there)", t->path);
    FL_TRY(st);
  }
  return FL_OK;
}

/* e's batch grew by bytes: applied once over its share (a refusal keeps the
 * rows in the batch; the next demotion reports it). */
static void grew(fl_ps_tier *t, tier_table *e, size_t bytes) {
  e->pend_bytes += bytes + 2 * ENTRY_COST;
  if (e->pend_bytes >= table_pend_cap(t)) (void)settle(t, e);
}

static void rebuild_filter(fl_ps_tier *t, tier_table *e);

fl_status fl_ps_tier_put(fl_ps_tier *t, uint64_t table, uint64_t key, const void *row,
                         size_t len) {
  return fl_ps_tier_put_at(t, table, key, row, len, atomic_fetch_add(&t->seq, 1));
}

fl_status fl_ps_tier_put_at(fl_ps_tier *t, uint64_t table, uint64_t key, const void *row,
                            size_t len, uint64_t seq) {
  unsigned char rk[KEY_LEN], ok[KEY_LEN], id[8], sq[SEQ_LEN];
  const char *vp[2] = {(const char *)sq, row};
  const size_t vs[2] = {SEQ_LEN, len};
  const char *kp[1] = {(const char *)rk};
  const size_t ks[1] = {KEY_LEN};
  tier_table *e = table_of(t, table);
  if (!e) return FL_ENOMEM; /* logged by table_of */
  if (e->stuck) FL_TRY(settle(t, e));
  if (seq > e->newest) e->newest = seq;
  make_key(rk, 'r', table, key);
  make_key(ok, 'o', table, seq);
  put_be64(sq, seq);
  put_be64(id, key);
  if (e->stuck) {
    rocksdb_writebatch_wi_putv(e->stuck, 1, kp, ks, 2, vp, vs);
    rocksdb_writebatch_wi_put(e->stuck, (const char *)ok, KEY_LEN, (const char *)id, 8);
  } else {
    rocksdb_writebatch_putv(e->pend, 1, kp, ks, 2, vp, vs);
    rocksdb_writebatch_put(e->pend, (const char *)ok, KEY_LEN, (const char *)id, 8);
  }
  record(t, e, key, sq, row, len);
  atomic_fetch_add(&e->rows, 1);
  atomic_fetch_add(&t->demotions, 1);
  grew(t, e, 2 * KEY_LEN + SEQ_LEN + len + 16 + ENTRY_COST);
  filter_add(&e->f, key);
  if (e->f.adds > e->f.cap) rebuild_filter(t, e);
  return FL_OK;
}

/* Scratch of a multi-get of n keys. */
typedef struct mget {
  unsigned char *kb;
  const char **kl;
  size_t *ks;
  rocksdb_pinnableslice_t **vals;
  char **errs;
  size_t *pos; /* the caller's index of each key looked up */
  size_t m;    /* keys looked up: those the filter did not rule out */
  int sorted;  /* they ascend (the multi-get then skips its sort) */
} mget;

static void mget_free(mget *g, size_t n) {
  for (size_t i = 0; g->vals && i < n; i++) rocksdb_pinnableslice_destroy(g->vals[i]);
  for (size_t i = 0; g->errs && i < n; i++) rocksdb_free(g->errs[i]);
  free(g->kb);
  free(g->kl);
  free(g->ks);
  free(g->vals);
  free(g->errs);
  free(g->pos);
}

/* The scratch of n keys of table e; the keys e's filter rules out are
 * answered here (found 0, a miss), the others listed to look up. */
static fl_status mget_alloc(fl_ps_tier *t, const tier_table *e, mget *g, uint64_t table,
                            const uint64_t *keys, size_t n, uint8_t *found) {
  size_t m = n ? n : 1;
  g->kb = malloc(m * KEY_LEN);
  g->kl = malloc(m * sizeof *g->kl);
  g->ks = malloc(m * sizeof *g->ks);
  g->vals = calloc(m, sizeof *g->vals);
  g->errs = calloc(m, sizeof *g->errs);
  g->pos = malloc(m * sizeof *g->pos);
  if (!g->kb || !g->kl || !g->ks || !g->vals || !g->errs || !g->pos)
    return FL_ERR(FL_ENOMEM, "disk tier %s: out of memory looking up %zu rows", t->path, n);
  g->sorted = 1;
  for (size_t i = 0; i < n; i++) {
    size_t j = g->m;
    if (e && !filter_may(&e->f, keys[i])) {
      found[i] = 0;
      atomic_fetch_add(&t->misses, 1);
      continue;
    }
    make_key(g->kb + j * KEY_LEN, 'r', table, keys[i]);
    g->sorted &= !j || memcmp(g->kb + (j - 1) * KEY_LEN, g->kb + j * KEY_LEN, KEY_LEN) < 0;
    g->kl[j] = (const char *)g->kb + j * KEY_LEN;
    g->ks[j] = KEY_LEN;
    g->pos[g->m++] = i;
  }
  return FL_OK;
}

/* Copy the row of value v (vn bytes) into row (len bytes): a value of the
 * layout before the marks (FL_PS_TIER_MARKS_LEN shorter) gets them zero.
 * FL_ECORRUPT when the length is neither. */
static fl_status copy_row(const fl_ps_tier *t, const char *v, size_t vn, void *row, size_t len) {
  size_t have = vn - SEQ_LEN;
  if (vn != SEQ_LEN + len && !(len >= FL_PS_TIER_MARKS_LEN && vn == SEQ_LEN + len -
                                                                    FL_PS_TIER_MARKS_LEN))
    return FL_ERR(FL_ECORRUPT, "disk tier %s: a row of %zu bytes where %zu were expected",
                  t->path, vn, SEQ_LEN + len);
  memcpy(row, v + SEQ_LEN, have);
  memset((char *)row + have, 0, len - have);
  return FL_OK;
}

/* Take the value v (vn bytes; NULL: none) of row i: FL_ECORRUPT when its
 * length is wrong. */
static fl_status take_value(fl_ps_tier *t, const char *v, size_t vn, size_t i, void *rows,
                            size_t len, uint8_t *found, uint64_t *seqs) {
  found[i] = 0;
  if (v) {
    FL_TRY(copy_row(t, v, vn, (char *)rows + i * len, len));
    if (seqs) seqs[i] = get_be64((const unsigned char *)v);
    found[i] = 1;
  }
  atomic_fetch_add(found[i] ? &t->hits : &t->misses, 1);
  return FL_OK;
}

/* The look-ups of a table whose batch RocksDB refused: one by one through
 * the batch. */
static fl_status get_through(fl_ps_tier *t, tier_table *e, mget *g, void *rows, size_t len,
                             uint8_t *found, uint64_t *seqs) {
  fl_status st = FL_OK;
  for (size_t i = 0; i < g->m && st == FL_OK; i++) {
    char *err = NULL, *v;
    size_t vn = 0;
    v = rocksdb_writebatch_wi_get_from_batch_and_db(e->stuck, t->db, t->ro, g->kl[i], KEY_LEN,
                                                    &vn, &err);
    if (err) st = FL_ERR(FL_EIO, "disk tier %s: reading a row failed: %s", t->path, err);
    else st = take_value(t, v, vn, g->pos[i], rows, len, found, seqs);
    rocksdb_free(err);
    rocksdb_free(v);
  }
  return st;
}

/* Readers: RocksDB 7.8 as packaged here (no io_uring) reads the data
 * blocks of a multi-get one pread after another, and a block the page
 * cache does not hold costs the disk's whole latency (about 0.3 ms at
 * queue depth 1 on these machines, several times more reads per second
 * with four in flight), so a multi-get of many keys is cut into chunks
 * that the caller and FL_TIER_READERS threads of the store read at once.
 * Block reads counted since fl_ps_tier_io_begin on the readers add up in
 * reader_blocks and reader_bytes (RocksDB's perf context is per thread). */
#define FL_TIER_READERS 8
#define READ_CHUNK_MIN 16 /* keys: a multi-get of fewer than two chunks stays on the caller */

typedef struct read_job {
  fl_ps_tier *t;
  mget *g;
  size_t chunk, nchunks, next, done; /* next and done: under the pool's lock */
  struct read_job *link;
} read_job;

typedef struct read_pool {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  read_job *head; /* jobs with chunks left to claim */
  int stop;
  size_t n;
  pthread_t th[FL_TIER_READERS];
} read_pool;

static _Atomic int io_counting;
static _Atomic uint64_t reader_blocks, reader_bytes;

/* Claim j's next chunk (under p->mu); j leaves the queue with its last. */
static size_t claim_chunk(read_pool *p, read_job *j) {
  size_t c = j->next++;
  if (j->next == j->nchunks)
    for (read_job **q = &p->head; *q; q = &(*q)->link)
      if (*q == j) {
        *q = j->link;
        break;
      }
  return c;
}

/* Chunk c of j's keys, one multi-get; on a reader, its block reads are
 * added to the counts while fl_ps_tier_io_begin asked for them. */
static void read_chunk(read_job *j, size_t c, int reader) {
  mget *g = j->g;
  size_t s = c * j->chunk, n = g->m - s < j->chunk ? g->m - s : j->chunk;
  int count = reader && atomic_load(&io_counting);
  rocksdb_perfcontext_t *pc = count ? rocksdb_perfcontext_create() : NULL;
  if (pc) {
    rocksdb_set_perf_level(rocksdb_enable_count);
    rocksdb_perfcontext_reset(pc);
  }
  rocksdb_batched_multi_get_cf(j->t->db, j->t->ro, j->t->cf, n, g->kl + s, g->ks + s,
                               g->vals + s, g->errs + s, g->sorted != 0);
  if (!pc) return;
  atomic_fetch_add(&reader_blocks, rocksdb_perfcontext_metric(pc, rocksdb_block_read_count));
  atomic_fetch_add(&reader_bytes, rocksdb_perfcontext_metric(pc, rocksdb_block_read_byte));
  rocksdb_perfcontext_destroy(pc);
}

/* A reader thread: chunks of the queued jobs until the pool stops. */
static void *reader_main(void *arg) {
  read_pool *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    read_job *j;
    size_t c;
    while (!p->head && !p->stop) pthread_cond_wait(&p->work, &p->mu);
    if (!p->head) break;
    j = p->head;
    c = claim_chunk(p, j);
    pthread_mutex_unlock(&p->mu);
    read_chunk(j, c, 1);
    pthread_mutex_lock(&p->mu);
    if (++j->done == j->nchunks) pthread_cond_broadcast(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Stop and join t's readers (none: nothing to do). */
static void readers_stop(fl_ps_tier *t) {
  read_pool *p = t->readers;
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  for (size_t i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  free(p);
  t->readers = NULL;
}

/* t's readers, started once (under t->mu: tables may read at once); NULL
 * when none could start: the caller reads alone, only slower. */
static read_pool *readers_of(fl_ps_tier *t) {
  read_pool *p;
  pthread_mutex_lock(&t->mu);
  if (!t->readers && (p = calloc(1, sizeof *p))) {
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    t->readers = p;
    while (p->n < FL_TIER_READERS && !pthread_create(&p->th[p->n], NULL, reader_main, p)) p->n++;
  }
  p = t->readers && t->readers->n ? t->readers : NULL;
  pthread_mutex_unlock(&t->mu);
  return p;
}

/* g's multi-get, in chunks read at once when it is large (see above). */
static void multi_get(fl_ps_tier *t, mget *g) {
  read_job j = {t, g, g->m, 1, 0, 0, NULL};
  read_pool *p = g->m >= 2 * READ_CHUNK_MIN ? readers_of(t) : NULL;
  if (p) {
    j.chunk = g->m / (2 * (p->n + 1));
    if (j.chunk < READ_CHUNK_MIN) j.chunk = READ_CHUNK_MIN;
    j.nchunks = (g->m + j.chunk - 1) / j.chunk;
    pthread_mutex_lock(&p->mu);
    j.link = p->head;
    p->head = &j;
    pthread_cond_broadcast(&p->work);
    while (j.next < j.nchunks) {
      size_t c = claim_chunk(p, &j);
      pthread_mutex_unlock(&p->mu);
      read_chunk(&j, c, 0);
      pthread_mutex_lock(&p->mu);
      j.done++;
    }
    while (j.done < j.nchunks) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return;
  }
  read_chunk(&j, 0, 0);
}

static fl_status get_batched(fl_ps_tier *t, mget *g, void *rows, size_t len, uint8_t *found,
                             uint64_t *seqs) {
  fl_status st = FL_OK;
  if (!g->m) return FL_OK;
  multi_get(t, g);
  for (size_t i = 0; i < g->m && st == FL_OK; i++) {
    size_t vn = 0;
    const char *v = g->vals[i] ? rocksdb_pinnableslice_value(g->vals[i], &vn) : NULL;
    if (g->errs[i]) st = FL_ERR(FL_EIO, "disk tier %s: reading a row failed: %s", t->path, g->errs[i]);
    else st = take_value(t, v, vn, g->pos[i], rows, len, found, seqs);
  }
  return st;
}

fl_status fl_ps_tier_get_many(fl_ps_tier *t, uint64_t table, const uint64_t *keys, size_t n,
                              void *rows, size_t len, uint8_t *found, uint64_t *seqs) {
  tier_table *e = table_of(t, table);
  mget g = {0};
  fl_status st;
  if (!n) return FL_OK;
  st = mget_alloc(t, e, &g, table, keys, n, found);
  if (e && g.m) (void)settle(t, e); /* a refusal keeps the batch, read through below */
  if (st == FL_OK)
    st = e && e->stuck ? get_through(t, e, &g, rows, len, found, seqs)
                       : get_batched(t, &g, rows, len, found, seqs);
  mget_free(&g, n);
  return st;
}

/* The perf context is RocksDB's, per thread; nothing to free. */
void fl_ps_tier_io_begin(void) {
  rocksdb_perfcontext_t *pc = rocksdb_perfcontext_create();
  atomic_store(&reader_blocks, 0);
  atomic_store(&reader_bytes, 0);
  atomic_store(&io_counting, 1);
  rocksdb_set_perf_level(rocksdb_enable_count);
  rocksdb_perfcontext_reset(pc);
  rocksdb_perfcontext_destroy(pc);
}

/* The GB figure after label in RocksDB's stats text s, in bytes. */
static uint64_t stats_gb(const char *s, const char *label) {
  const char *p = s ? strstr(s, label) : NULL;
  double gb = 0;
  if (!p || sscanf(p + strlen(label), "%lf", &gb) != 1 || gb < 0) return 0;
  return (uint64_t)(gb * 1073741824.0);
}

/* Fills the caller's *io; the stats text is freed here. */
void fl_ps_tier_get_io(fl_ps_tier *t, fl_ps_tier_io *io) {
  rocksdb_perfcontext_t *pc = rocksdb_perfcontext_create();
  char *s = t->db ? rocksdb_property_value(t->db, "rocksdb.stats") : NULL;
  const char *c = s ? strstr(s, "Cumulative compaction:") : NULL;
  memset(io, 0, sizeof *io);
  io->user_blocks = rocksdb_perfcontext_metric(pc, rocksdb_block_read_count) +
                    atomic_load(&reader_blocks);
  io->user_bytes = rocksdb_perfcontext_metric(pc, rocksdb_block_read_byte) +
                   atomic_load(&reader_bytes);
  rocksdb_perfcontext_destroy(pc);
  io->compaction_written = stats_gb(c, "Cumulative compaction:");
  io->compaction_read = stats_gb(c, "MB/s write,");
  io->flushed = stats_gb(s, "Flush(GB): cumulative");
  rocksdb_free(s);
}

/* Delete the two keys of row key of table whose demotion sequence is seq. */
static fl_status delete_row(fl_ps_tier *t, uint64_t table, uint64_t key, uint64_t seq) {
  unsigned char rk[KEY_LEN], ok[KEY_LEN];
  tier_table *e = table_of(t, table);
  if (!e) return FL_ENOMEM; /* logged by table_of */
  make_key(rk, 'r', table, key);
  make_key(ok, 'o', table, seq);
  if (e->stuck) {
    rocksdb_writebatch_wi_delete(e->stuck, (const char *)rk, KEY_LEN);
    rocksdb_writebatch_wi_delete(e->stuck, (const char *)ok, KEY_LEN);
  } else {
    rocksdb_writebatch_delete(e->pend, (const char *)rk, KEY_LEN);
    rocksdb_writebatch_delete(e->pend, (const char *)ok, KEY_LEN);
  }
  record(t, e, key, NULL, NULL, 0);
  atomic_fetch_sub(&e->rows, 1);
  grew(t, e, 2 * KEY_LEN);
  return FL_OK;
}

fl_status fl_ps_tier_drop(fl_ps_tier *t, uint64_t table, uint64_t key, uint64_t seq) {
  FL_TRY(delete_row(t, table, key, seq));
  atomic_fetch_add(&t->promotions, 1);
  return FL_OK;
}

/* An iterator over the store as table sees it (its pending writes applied
 * first, or read through when RocksDB refuses them). */
static rocksdb_iterator_t *iter_of(fl_ps_tier *t, uint64_t table) {
  tier_table *e = table_of(t, table);
  rocksdb_iterator_t *it;
  if (e) (void)settle(t, e);
  it = rocksdb_create_iterator(t->db, t->ro);
  return e && e->stuck ? rocksdb_writebatch_wi_create_iterator_with_base(e->stuck, it) : it;
}

/* Build e's filter again from its 'o' keys, sized for twice its rows (so
 * that a rebuild's scan is paid for by as many adds). */
static void rebuild_filter(fl_ps_tier *t, tier_table *e) {
  unsigned char lo[KEY_LEN];
  rocksdb_iterator_t *it;
  if (filter_size(t, &e->f, 2 * atomic_load(&e->rows)) != FL_OK) return;
  it = iter_of(t, e->id);
  make_key(lo, 'o', e->id, 0);
  for (rocksdb_iter_seek(it, (const char *)lo, KEY_LEN); rocksdb_iter_valid(it);
       rocksdb_iter_next(it)) {
    size_t kl = 0, vl = 0;
    const char *k = rocksdb_iter_key(it, &kl), *v = rocksdb_iter_value(it, &vl);
    if (kl != KEY_LEN || memcmp(k, lo, 9) || vl != 8) break;
    filter_add(&e->f, get_be64((const unsigned char *)v));
  }
  rocksdb_iter_destroy(it);
}

fl_status fl_ps_tier_scan(fl_ps_tier *t, uint64_t table, int has_after, uint64_t after,
                          size_t max, uint64_t *keys, void *rows, size_t len, size_t *n) {
  unsigned char lo[KEY_LEN];
  rocksdb_iterator_t *it;
  fl_status st = FL_OK;
  *n = 0;
  if (has_after && after == UINT64_MAX) return FL_OK;
  it = iter_of(t, table);
  make_key(lo, 'r', table, has_after ? after + 1 : 0);
  for (rocksdb_iter_seek(it, (const char *)lo, KEY_LEN); *n < max && rocksdb_iter_valid(it);
       rocksdb_iter_next(it)) {
    size_t kl = 0, vl = 0;
    const char *k = rocksdb_iter_key(it, &kl), *v = rocksdb_iter_value(it, &vl);
    if (kl != KEY_LEN || memcmp(k, lo, 9)) break; /* past this table's rows */
    if ((st = copy_row(t, v, vl, (char *)rows + *n * len, len)) != FL_OK) break;
    keys[*n] = get_be64((const unsigned char *)k + 9);
    (*n)++;
  }
  rocksdb_iter_destroy(it);
  return st;
}

/* The value of the row key k (KEY_LEN bytes) of table e read through e's
 * refused writes (NULL: none; the caller frees it with rocksdb_free). */
static fl_status get_through_one(fl_ps_tier *t, tier_table *e, const char *k, char **v,
                                 size_t *vn) {
  char *err = NULL;
  fl_status st = FL_OK;
  *v = e->stuck ? rocksdb_writebatch_wi_get_from_batch_and_db(e->stuck, t->db, t->ro, k, KEY_LEN,
                                                              vn, &err)
                : rocksdb_get(t->db, t->ro, k, KEY_LEN, vn, &err);
  if (err) st = FL_ERR(FL_EIO, "disk tier %s: reading a row failed: %s", t->path, err);
  rocksdb_free(err);
  return st;
}

/* Remove e's order key of seq alone: a stale one (its row gone, or on
 * disk under a newer order key since a removal of its copy never reached
 * the disk); it counted as a row. */
static void drop_stale_order(fl_ps_tier *t, tier_table *e, uint64_t seq) {
  unsigned char ok[KEY_LEN];
  make_key(ok, 'o', e->id, seq);
  if (e->stuck) rocksdb_writebatch_wi_delete(e->stuck, (const char *)ok, KEY_LEN);
  else rocksdb_writebatch_delete(e->pend, (const char *)ok, KEY_LEN);
  if (atomic_load(&e->rows)) atomic_fetch_sub(&e->rows, 1);
  grew(t, e, KEY_LEN);
}

/* *cur 1 when e's row key is on disk under the order key of seq, else 0. */
static fl_status order_current(fl_ps_tier *t, tier_table *e, uint64_t key, uint64_t seq,
                               int *cur) {
  unsigned char rk[KEY_LEN];
  char *v = NULL;
  size_t vn = 0;
  make_key(rk, 'r', e->id, key);
  FL_TRY(get_through_one(t, e, (const char *)rk, &v, &vn));
  *cur = v && vn >= SEQ_LEN && get_be64((const unsigned char *)v) == seq;
  rocksdb_free(v);
  return FL_OK;
}

/* The oldest order key naming its row's copy on disk; the stale ones
 * before it (a removal of a promoted row's copy that never reached the
 * disk, the row demoted again under a newer key) are removed, not
 * followed: following one evicted the row's newer copy early. */
fl_status fl_ps_tier_evict_oldest(fl_ps_tier *t, uint64_t table, uint64_t before, uint64_t *key,
                                  int *found) {
  unsigned char lo[KEY_LEN];
  rocksdb_iterator_t *it = iter_of(t, table);
  tier_table *e = table_of(t, table);
  fl_status st = FL_OK;
  uint64_t seq = 0;
  *found = 0;
  make_key(lo, 'o', table, 0);
  for (rocksdb_iter_seek(it, (const char *)lo, KEY_LEN); e && st == FL_OK && rocksdb_iter_valid(it);
       rocksdb_iter_next(it)) {
    size_t kl = 0, vl = 0;
    const char *k = rocksdb_iter_key(it, &kl), *v = rocksdb_iter_value(it, &vl);
    int cur = 0;
    if (kl != KEY_LEN || memcmp(k, lo, 9) || vl != 8 ||
        (seq = get_be64((const unsigned char *)k + 9)) >= before)
      break;
    *key = get_be64((const unsigned char *)v);
    st = order_current(t, e, *key, seq, &cur);
    if (st == FL_OK && cur) {
      *found = 1;
      break;
    }
    if (st == FL_OK) drop_stale_order(t, e, seq);
  }
  rocksdb_iter_destroy(it);
  if (st != FL_OK || !*found) return st;
  return delete_row(t, table, *key, seq);
}

/* The value of the row key k (KEY_LEN bytes) of table e into row (len
 * bytes), read through e's refused writes; *found 0 when absent.  Not
 * counted as a hit or miss. */
static fl_status read_row(fl_ps_tier *t, tier_table *e, const char *k, void *row, size_t len,
                          int *found, uint64_t *seq) {
  char *v = NULL;
  size_t vn = 0;
  fl_status st = get_through_one(t, e, k, &v, &vn);
  *found = v != NULL;
  if (st == FL_OK && v) st = copy_row(t, v, vn, row, len);
  if (st == FL_OK && v) *seq = get_be64((const unsigned char *)v);
  rocksdb_free(v);
  return st;
}

fl_status fl_ps_tier_expire(fl_ps_tier *t, uint64_t table, void *row, size_t len,
                            fl_ps_tier_old_fn old, void *ctx, size_t *n, int *all) {
  unsigned char lo[KEY_LEN], rk[KEY_LEN];
  rocksdb_iterator_t *it = iter_of(t, table);
  tier_table *e = table_of(t, table);
  fl_status st = FL_OK;
  *n = 0;
  *all = 1;
  make_key(lo, 'o', table, 0);
  for (rocksdb_iter_seek(it, (const char *)lo, KEY_LEN); e && st == FL_OK && rocksdb_iter_valid(it);
       rocksdb_iter_next(it)) {
    size_t kl = 0, vl = 0;
    const char *k = rocksdb_iter_key(it, &kl), *v = rocksdb_iter_value(it, &vl);
    uint64_t key, at, seq = 0;
    int found = 0;
    if (kl != KEY_LEN || memcmp(k, lo, 9) || vl != 8) break; /* past this table's order */
    key = get_be64((const unsigned char *)v);
    at = get_be64((const unsigned char *)k + 9);
    make_key(rk, 'r', table, key);
    st = read_row(t, e, (const char *)rk, row, len, &found, &seq);
    if (st != FL_OK) break;
    if (!found || seq != at) { /* a stale order key (or one a crash left): removed, not followed */
      drop_stale_order(t, e, at);
      continue;
    }
    if (!old(ctx, key, row)) {
      *all = 0;
      break;
    }
    st = delete_row(t, table, key, at);
    if (st == FL_OK) (*n)++;
  }
  rocksdb_iter_destroy(it);
  return st;
}

fl_status fl_ps_tier_put_note(fl_ps_tier *t, uint64_t table, const void *blob, size_t len) {
  unsigned char k[KEY_LEN];
  tier_table *e = table_of(t, table);
  if (!e) return FL_ENOMEM; /* logged by table_of */
  make_key(k, 'u', table, 0);
  if (e->stuck) rocksdb_writebatch_wi_put(e->stuck, (const char *)k, KEY_LEN, blob, len);
  else rocksdb_writebatch_put(e->pend, (const char *)k, KEY_LEN, blob, len);
  grew(t, e, KEY_LEN + len);
  return FL_OK;
}

fl_status fl_ps_tier_get_note(fl_ps_tier *t, uint64_t table, void **blob, size_t *len) {
  unsigned char k[KEY_LEN];
  char *err = NULL, *v;
  tier_table *e = table_of(t, table);
  *blob = NULL;
  *len = 0;
  if (e) (void)settle(t, e);
  make_key(k, 'u', table, 0);
  v = e && e->stuck ? rocksdb_writebatch_wi_get_from_batch_and_db(e->stuck, t->db, t->ro,
                                                                  (const char *)k, KEY_LEN, len,
                                                                  &err)
                    : rocksdb_get(t->db, t->ro, (const char *)k, KEY_LEN, len, &err);
  if (err) {
    fl_status st = FL_ERR(FL_EIO, "disk tier %s: reading a table's note failed: %s", t->path, err);
    rocksdb_free(err);
    rocksdb_free(v);
    return st;
  }
  if (v && !(*blob = malloc(*len ? *len : 1))) {
    rocksdb_free(v);
    return FL_ERR(FL_ENOMEM, "disk tier %s: out of memory reading a note of %zu bytes", t->path,
                  *len);
  }
  if (v) memcpy(*blob, v, *len);
  rocksdb_free(v);
  return FL_OK;
}

uint64_t fl_ps_tier_newest(const fl_ps_tier *t, uint64_t table) {
  const tier_table *e = find_table(t, table);
  return e ? e->newest : 0;
}

size_t fl_ps_tier_rows(const fl_ps_tier *t, uint64_t table) {
  const tier_table *e = find_table(t, table);
  return e ? (size_t)atomic_load(&e->rows) : 0;
}

static fl_status forget_demoted(fl_ps_tier *t);
static fl_status drop_old_demotions(fl_ps_tier *t);

fl_status fl_ps_tier_checkpoint(fl_ps_tier *t, const char *dir, int mark) {
  char *err = NULL;
  rocksdb_checkpoint_t *cp;
  FL_TRY(settle_all(t));
  cp = rocksdb_checkpoint_object_create(t->db, &err);
  if (!err) rocksdb_checkpoint_create(cp, dir, 0, &err);
  if (cp) rocksdb_checkpoint_object_destroy(cp);
  if (!err) return mark ? forget_demoted(t) : FL_OK;
  fl_status st = FL_ERR(FL_EIO, "disk tier %s: checkpoint into %s failed: %s", t->path, dir, err);
  rocksdb_free(err);
  return st;
}

/* Link (or copy, across file systems) the file from into to. */
static fl_status link_or_copy(const char *from, const char *to) {
  FILE *in, *out;
  char buf[65536];
  size_t k;
  int bad = 0;
  if (link(from, to) == 0) return FL_OK;
  in = fopen(from, "rb");
  out = in ? fopen(to, "wb") : NULL;
  while (out && (k = fread(buf, 1, sizeof buf, in)) > 0) bad |= fwrite(buf, 1, k, out) != k;
  bad |= !in || !out || (in && ferror(in));
  if (in) fclose(in);
  if (out) bad |= fclose(out) != 0;
  if (bad) return FL_ERR(FL_EIO, "disk tier: cannot copy %s to %s: %s", from, to, strerror(errno));
  return FL_OK;
}

static fl_status copy_dir(const char *from, const char *to) {
  DIR *d;
  struct dirent *e;
  char a[4200], b[4200];
  fl_status st = FL_OK;
  if (mkdir(to, 0755) != 0)
    return FL_ERR(FL_EIO, "disk tier: cannot create %s: %s", to, strerror(errno));
  if (!(d = opendir(from)))
    return FL_ERR(FL_EIO, "disk tier: cannot open the checkpoint's store %s: %s", from,
                  strerror(errno));
  while (st == FL_OK && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(a, sizeof a, "%s/%s", from, e->d_name);
    snprintf(b, sizeof b, "%s/%s", to, e->d_name);
    st = link_or_copy(a, b);
  }
  closedir(d);
  return st;
}

/* Recount each table's rows and the next sequence from the 'o' keys. */
static void rescan(fl_ps_tier *t) {
  rocksdb_iterator_t *it = rocksdb_create_iterator(t->db, t->ro);
  unsigned char lo[1] = {'o'};
  uint64_t next = 0;
  for (size_t i = 0; i < atomic_load(&t->n_tables); i++) {
    atomic_store(&tab_at(t, i)->rows, 0);
    tab_at(t, i)->newest = 0;
  }
  for (rocksdb_iter_seek(it, (const char *)lo, 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl = 0;
    const unsigned char *k = (const unsigned char *)rocksdb_iter_key(it, &kl);
    tier_table *e;
    if (kl != KEY_LEN || k[0] != 'o') break;
    if ((e = table_of(t, get_be64(k + 1))) != NULL) {
      atomic_fetch_add(&e->rows, 1);
      if (get_be64(k + 9) > e->newest) e->newest = get_be64(k + 9);
    }
    if (get_be64(k + 9) >= next) next = get_be64(k + 9) + 1;
  }
  rocksdb_iter_destroy(it);
  atomic_store(&t->seq, next);
  for (size_t i = 0; i < atomic_load(&t->n_tables); i++) rebuild_filter(t, tab_at(t, i));
}

/* 1 when dir is a delta's copy (layout 2): sst (cap bytes) gets its file's
 * path; else sst is "". */
static int is_delta_copy(const char *dir, char *sst, size_t cap) {
  snprintf(sst, cap, "%s/" DELTA_FILE, dir);
  if (access(sst, F_OK) == 0) return 1;
  sst[0] = '\0';
  return 0;
}

/* The delta copy file sst ingested into t's store (copied: the
 * checkpoint's file is left as it is). */
static fl_status ingest_copy(fl_ps_tier *t, const char *sst) {
  const char *files[1] = {sst};
  char *err = NULL;
  fl_status st = FL_OK;
  rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
  rocksdb_ingestexternalfileoptions_set_move_files(io, 0);
  rocksdb_ingest_external_file(t->db, files, 1, io, &err);
  rocksdb_ingestexternalfileoptions_destroy(io);
  if (err)
    st = FL_ERR(FL_ECORRUPT, "disk tier: the delta copy %s is truncated or corrupt: %s", sst,
                err);
  rocksdb_free(err);
  return st;
}

fl_status fl_ps_tier_restore(fl_ps_tier *t, const char *dir) {
  char sst[4200] = "";
  close_db(t);
  for (size_t i = 0; i < atomic_load(&t->n_tables); i++) {
    tier_table *e = tab_at(t, i);
    rocksdb_writebatch_clear(e->pend);
    e->pend_bytes = 0;
    if (e->stuck) rocksdb_writebatch_wi_destroy(e->stuck);
    e->stuck = NULL;
  }
  drop_records(t);
  FL_TRY(remove_dir(t->path));
  if (dir && !is_delta_copy(dir, sst, sizeof sst)) FL_TRY(copy_dir(dir, t->path));
  FL_TRY(open_db(t));
  if (dir && sst[0]) FL_TRY(ingest_copy(t, sst));
  fl_ps_tier_recount(t);
  if (dir && !sst[0]) FL_TRY(drop_old_demotions(t));
  return forget_demoted(t);
}

fl_status fl_ps_tier_remove_copy(const char *dir) { return remove_dir(dir); }

/* Write wb into t's store (and clear it); FL_EIO (logged) when refused. */
static fl_status write_batch(fl_ps_tier *t, rocksdb_writebatch_t *wb) {
  char *err = NULL;
  fl_status st = FL_OK;
  rocksdb_write(t->db, t->wo, wb, &err);
  if (err)
    st = FL_ERR(FL_EIO, "disk tier %s: writing rows failed: %s (disk full?)", t->path, err);
  rocksdb_free(err);
  rocksdb_writebatch_clear(wb);
  return st;
}

/* The value of the key k (KEY_LEN bytes) in t (NULL: none; the caller
 * frees it with rocksdb_free) and *vn its length; FL_EIO when the read
 * fails. */
static fl_status get_value(fl_ps_tier *t, const unsigned char *k, char **v, size_t *vn) {
  char *err = NULL;
  *v = rocksdb_get(t->db, t->ro, (const char *)k, KEY_LEN, vn, &err);
  if (!err) return FL_OK;
  fl_status st = FL_ERR(FL_EIO, "disk tier %s: reading a row failed: %s", t->path, err);
  rocksdb_free(err);
  return st;
}

/* No row counts as demoted since the checkpoint (taken or restored) any
 * more: the records go. */
static fl_status forget_demoted(fl_ps_tier *t) {
  drop_records(t);
  return FL_OK;
}

/* The 'd' keys a restored copy of an earlier build holds, out of t. */
static fl_status drop_old_demotions(fl_ps_tier *t) {
  static const char lo[1] = {'d'}, hi[1] = {'e'};
  rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
  fl_status st;
  rocksdb_writebatch_delete_range(wb, lo, 1, hi, 1);
  st = write_batch(t, wb);
  rocksdb_writebatch_destroy(wb);
  return st;
}

/* Into wb: the removal of row rk (its 'r' key) from t with its order key,
 * when t holds it. */
static fl_status batch_remove(fl_ps_tier *t, const unsigned char *rk, rocksdb_writebatch_t *wb) {
  unsigned char ok[KEY_LEN];
  char *v = NULL;
  size_t vn = 0;
  FL_TRY(get_value(t, rk, &v, &vn));
  if (v && vn >= SEQ_LEN) {
    make_key(ok, 'o', get_be64(rk + 1), get_be64((const unsigned char *)v));
    rocksdb_writebatch_delete(wb, (const char *)rk, KEY_LEN);
    rocksdb_writebatch_delete(wb, (const char *)ok, KEY_LEN);
  }
  rocksdb_free(v);
  return FL_OK;
}

#define CHAIN_BATCH 4096 /* rows a write of a delta's replay */

/* A row demoted since the last marking checkpoint and still on disk: its
 * table, id, order sequence there and value in the record (mapped;
 * written as is); at, its entry's place in the record. */
typedef struct demoted {
  uint64_t tab, id, seq;
  const char *v; /* NULL: removed since */
  size_t vn, at;
} demoted;

/* Table, id, then the record's order (a row's last entry last). */
static int cmp_demoted_id(const void *pa, const void *pb) {
  const demoted *a = pa, *b = pb;
  if (a->tab != b->tab) return a->tab < b->tab ? -1 : 1;
  if (a->id != b->id) return a->id < b->id ? -1 : 1;
  return (a->at > b->at) - (a->at < b->at);
}

static int cmp_demoted_seq(const void *pa, const void *pb) {
  const demoted *a = pa, *b = pb;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* The record mapped into memory (len bytes; NULL when empty). */
typedef struct record_map {
  void *p;
  size_t len;
} record_map;

/* The record, every table's buffer flushed into it, mapped into *m. */
static fl_status map_record(fl_ps_tier *t, record_map *m) {
  char p[4200];
  m->p = NULL;
  m->len = 0;
  for (size_t i = 0; i < atomic_load(&t->n_tables); i++) record_flush(t, tab_at(t, i));
  if (atomic_load(&t->rec_bad))
    return FL_ERR(FL_EIO, "disk tier %s: the record of the rows demoted since the last "
                  "checkpoint is incomplete (logged when it failed): take a whole checkpoint",
                  t->path);
  if (t->rec_fd < 0 || t->rec_end == 0) return FL_OK;
  m->p = mmap(NULL, (size_t)t->rec_end, PROT_READ, MAP_PRIVATE, t->rec_fd, 0);
  if (m->p == MAP_FAILED) {
    m->p = NULL;
    record_path(t, p, sizeof p);
    return FL_ERR(FL_EIO, "disk tier %s: cannot map the record of demoted rows %s: %s", t->path,
                  p, strerror(errno));
  }
  m->len = (size_t)t->rec_end;
  return FL_OK;
}

static void unmap_record(record_map *m) {
  if (m->p) munmap(m->p, m->len);
  m->p = NULL;
}

/* The entries of one chunk of table tab, p to end, appended to *l (*n of
 * them, *cap room); FL_ECORRUPT (not logged) when they do not fit the
 * chunk. */
static fl_status parse_chunk(const fl_ps_tier *t, uint64_t tab, const char *p, const char *end,
                               demoted **l, size_t *n, size_t *cap) {
  while (p < end) {
    uint64_t head[2];
    if ((size_t)(end - p) < sizeof head) return FL_ECORRUPT;
    memcpy(head, p, sizeof head);
    p += sizeof head;
    if (head[1] != RECORD_REMOVED && (head[1] < SEQ_LEN || head[1] > (uint64_t)(end - p)))
      return FL_ECORRUPT;
    if (*n == *cap) {
      demoted *q = realloc(*l, (*cap = *cap ? 2 * *cap : 1024) * sizeof *q);
      if (!q)
        return FL_ERR(FL_ENOMEM, "disk tier %s: out of memory for %zu demoted rows", t->path, *n);
      *l = q;
    }
    (*l)[*n] = (demoted){.tab = tab, .id = head[0], .at = *n};
    if (head[1] != RECORD_REMOVED) {
      (*l)[*n].v = p;
      (*l)[*n].vn = (size_t)head[1];
      (*l)[*n].seq = get_be64((const unsigned char *)p);
      p += head[1];
    }
    (*n)++;
  }
  return FL_OK;
}

/* The entries of the record m into *l (*n of them, in order; the caller
 * frees *l). */
static fl_status parse_record(const fl_ps_tier *t, const record_map *m, demoted **l, size_t *n) {
  const char *p = m->p, *end = p + m->len;
  size_t cap = 0;
  fl_status st = FL_OK;
  for (*n = 0; p && p < end;) {
    uint64_t head[2];
    if ((size_t)(end - p) < sizeof head) break;
    memcpy(head, p, sizeof head);
    if (head[1] > (uint64_t)(end - p) - sizeof head) break;
    p += sizeof head;
    if ((st = parse_chunk(t, head[0], p, p + head[1], l, n, &cap)) != FL_OK) break;
    p += head[1];
  }
  if (p == end) return FL_OK;
  if (st == FL_ENOMEM) return st;
  return FL_ERR(FL_ECORRUPT, "disk tier %s: the record of demoted rows is cut short after %zu "
                "entries: take a whole checkpoint", t->path, *n);
}

/* *l: the rows demoted since the last marking checkpoint and still on
 * disk (each once, as its record's last entry has it), tables and ids
 * ascending, their values in m (mapped here; the caller unmaps it and
 * frees *l). */
static fl_status list_demoted(fl_ps_tier *t, record_map *m, demoted **l, size_t *n) {
  size_t k = 0;
  fl_status st;
  *l = NULL;
  *n = 0;
  FL_TRY(map_record(t, m));
  st = parse_record(t, m, l, n);
  if (st != FL_OK) {
    free(*l);
    *l = NULL;
    *n = 0;
    return st;
  }
  if (*n) qsort(*l, *n, sizeof **l, cmp_demoted_id);
  for (size_t i = 0; i < *n; i++) /* a row's last entry, when not a removal */
    if ((i + 1 == *n || (*l)[i + 1].id != (*l)[i].id || (*l)[i + 1].tab != (*l)[i].tab) &&
        (*l)[i].v)
      (*l)[k++] = (*l)[i];
  *n = k;
  return FL_OK;
}

/* A delta's copy being written: one SST file, keys added in order. */
typedef struct delta_out {
  fl_ps_tier *t;
  rocksdb_sstfilewriter_t *w;
  const char *path;
  tier_table **tabs; /* the tables, ids ascending */
  demoted **rows;    /* each table's rows (in all), ids ascending */
  size_t *nrows;
  demoted *all;   /* every table's rows, tables and ids ascending */
  record_map map; /* the record, holding the rows' values */
} delta_out;

/* FL_EIO (logged) for a refused add or finish of o's file (err freed). */
static fl_status sst_error(delta_out *o, char *err) {
  fl_status st = FL_ERR(FL_EIO, "disk tier %s: writing the delta copy %s failed: %s (disk "
                        "full? free space there)", o->t->path, o->path, err);
  rocksdb_free(err);
  return st;
}

static fl_status sst_put(delta_out *o, const unsigned char *k, const char *v, size_t vn) {
  char *err = NULL;
  rocksdb_sstfilewriter_put(o->w, (const char *)k, KEY_LEN, v, vn, &err);
  return err ? sst_error(o, err) : FL_OK;
}

/* Table i's order keys (sequences ascending; rows sorted by sequence). */
static fl_status put_orders(delta_out *o, size_t i) {
  unsigned char k[KEY_LEN], id[8];
  demoted *l = o->rows[i];
  fl_status st = FL_OK;
  if (o->nrows[i] == 0) return FL_OK; /* l may be NULL: no qsort of it */
  qsort(l, o->nrows[i], sizeof *l, cmp_demoted_seq);
  for (size_t j = 0; st == FL_OK && j < o->nrows[i]; j++) {
    if (j && l[j].seq == l[j - 1].seq) continue; /* one row an order key */
    make_key(k, 'o', o->tabs[i]->id, l[j].seq);
    put_be64(id, l[j].id);
    st = sst_put(o, k, (const char *)id, 8);
  }
  qsort(l, o->nrows[i], sizeof *l, cmp_demoted_id);
  return st;
}

/* Table i's rows as their records have them (ids ascending). */
static fl_status put_rows(delta_out *o, size_t i) {
  unsigned char k[KEY_LEN];
  fl_status st = FL_OK;
  for (size_t j = 0; st == FL_OK && j < o->nrows[i]; j++) {
    make_key(k, 'r', o->tabs[i]->id, o->rows[i][j].id);
    st = sst_put(o, k, o->rows[i][j].v, o->rows[i][j].vn);
  }
  return st;
}

/* Table i's note, when it has one. */
static fl_status put_note(delta_out *o, size_t i) {
  unsigned char k[KEY_LEN];
  char *v = NULL;
  size_t vn = 0;
  fl_status st;
  make_key(k, 'u', o->tabs[i]->id, 0);
  st = get_value(o->t, k, &v, &vn);
  if (st == FL_OK && v) st = sst_put(o, k, v, vn);
  rocksdb_free(v);
  return st;
}

static int cmp_table_id(const void *pa, const void *pb) {
  const tier_table *a = *(tier_table *const *)pa, *b = *(tier_table *const *)pb;
  return a->id < b->id ? -1 : a->id > b->id;
}

/* o's keys in RocksDB's order ('o', 'r', 'u', then the layout key 'v'),
 * each kind table by table, ids ascending; then the file finished
 * (fsynced). */
static fl_status write_delta(delta_out *o, size_t nt) {
  unsigned char vk[KEY_LEN], ver[8];
  char *err = NULL;
  fl_status st = FL_OK;
  for (size_t i = 0; st == FL_OK && i < nt; i++) st = put_orders(o, i);
  for (size_t i = 0; st == FL_OK && i < nt; i++) st = put_rows(o, i);
  for (size_t i = 0; st == FL_OK && i < nt; i++) st = put_note(o, i);
  make_key(vk, 'v', 0, 0);
  put_be64(ver, DELTA_LAYOUT);
  if (st == FL_OK) st = sst_put(o, vk, (const char *)ver, 8);
  if (st == FL_OK) rocksdb_sstfilewriter_finish(o->w, &err);
  return st == FL_OK && err ? sst_error(o, err) : st;
}

/* dir's entries onto the disk (the directory fsynced). */
static fl_status sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    fl_status st = FL_ERR(FL_EIO, "disk tier: cannot sync the directory %s: %s", dir,
                          strerror(errno));
    if (fd >= 0) close(fd);
    return st;
  }
  close(fd);
  return FL_OK;
}

/* Into o: the tables of t (ids ascending) and each one's demoted rows. */
static fl_status gather_demoted(fl_ps_tier *t, delta_out *o, size_t nt) {
  size_t n = 0, j = 0;
  o->tabs = calloc(nt ? nt : 1, sizeof *o->tabs);
  o->rows = calloc(nt ? nt : 1, sizeof *o->rows);
  o->nrows = calloc(nt ? nt : 1, sizeof *o->nrows);
  if (!o->tabs || !o->rows || !o->nrows)
    return FL_ERR(FL_ENOMEM, "disk tier %s: out of memory for a delta copy", t->path);
  for (size_t i = 0; i < nt; i++) o->tabs[i] = tab_at(t, i);
  if (nt) qsort(o->tabs, nt, sizeof *o->tabs, cmp_table_id);
  FL_TRY(list_demoted(t, &o->map, &o->all, &n));
  for (size_t i = 0; i < nt; i++) { /* the record's tables are t's */
    size_t from = j;
    while (j < n && o->all[j].tab == o->tabs[i]->id) j++;
    o->rows[i] = j > from ? o->all + from : NULL;
    o->nrows[i] = j - from;
  }
  return FL_OK;
}

/* What gather_demoted took for o. */
static void release_demoted(delta_out *o) {
  free(o->all);
  unmap_record(&o->map);
  free(o->tabs);
  free(o->rows);
  free(o->nrows);
}

fl_status fl_ps_tier_checkpoint_delta(fl_ps_tier *t, const char *dir) {
  char path[4200];
  size_t nt = atomic_load(&t->n_tables);
  rocksdb_envoptions_t *eo;
  delta_out o = {.t = t, .path = path};
  fl_status st;
  if (t->no_deltas)
    return FL_ERR(FL_ESTATE, "disk tier %s: a delta copy of a store opened without deltas "
                  "(fl_ps_tier_no_deltas): its demotions were not noted", t->path);
  FL_TRY(settle_all(t));
  if (mkdir(dir, 0755) != 0)
    return FL_ERR(FL_EIO, "disk tier: cannot create the delta copy %s: %s", dir, strerror(errno));
  snprintf(path, sizeof path, "%s/" DELTA_FILE, dir);
  st = gather_demoted(t, &o, nt);
  eo = rocksdb_envoptions_create();
  o.w = rocksdb_sstfilewriter_create(eo, t->opt);
  if (st == FL_OK) {
    char *err = NULL;
    rocksdb_sstfilewriter_open(o.w, path, &err);
    st = err ? sst_error(&o, err) : write_delta(&o, nt);
  }
  rocksdb_sstfilewriter_destroy(o.w);
  rocksdb_envoptions_destroy(eo);
  release_demoted(&o);
  if (st == FL_OK) st = sync_dir(dir);
  if (st == FL_OK) st = forget_demoted(t);
  return st;
}

fl_status fl_ps_tier_remove_keys(fl_ps_tier *t, uint64_t table, const uint64_t *keys, size_t n) {
  rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
  fl_status st = FL_OK;
  for (size_t i = 0; i < n && st == FL_OK; i++) {
    unsigned char rk[KEY_LEN];
    make_key(rk, 'r', table, keys[i]);
    st = batch_remove(t, rk, wb);
    if (st == FL_OK && rocksdb_writebatch_count(wb) >= CHAIN_BATCH) st = write_batch(t, wb);
  }
  if (st == FL_OK) st = write_batch(t, wb);
  rocksdb_writebatch_destroy(wb);
  return st;
}

/* Each row of the open copy d (its 'r' keys) into t, over t's copy of it. */
static fl_status overlay_rows(fl_ps_tier *t, fl_ps_tier *d) {
  static const unsigned char lo[1] = {'r'};
  rocksdb_iterator_t *it = rocksdb_create_iterator(d->db, d->ro);
  rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
  fl_status st = FL_OK;
  for (rocksdb_iter_seek(it, (const char *)lo, 1); st == FL_OK && rocksdb_iter_valid(it);
       rocksdb_iter_next(it)) {
    size_t kl = 0, vl = 0;
    const unsigned char *k = (const unsigned char *)rocksdb_iter_key(it, &kl);
    const char *v = rocksdb_iter_value(it, &vl);
    unsigned char ok[KEY_LEN], id[8];
    if (kl != KEY_LEN || k[0] != 'r') break;
    if (vl < SEQ_LEN) {
      st = FL_ERR(FL_ECORRUPT, "disk tier: the delta copy %s has a row of %zu bytes", d->path, vl);
      break;
    }
    st = batch_remove(t, k, wb); /* a pending removal is read past: keys here are unique */
    make_key(ok, 'o', get_be64(k + 1), get_be64((const unsigned char *)v));
    memcpy(id, k + 9, 8);
    rocksdb_writebatch_put(wb, (const char *)k, KEY_LEN, v, vl);
    rocksdb_writebatch_put(wb, (const char *)ok, KEY_LEN, (const char *)id, 8);
    if (st == FL_OK && rocksdb_writebatch_count(wb) >= CHAIN_BATCH) st = write_batch(t, wb);
  }
  if (st == FL_OK) st = write_batch(t, wb);
  rocksdb_writebatch_destroy(wb);
  rocksdb_iter_destroy(it);
  return st;
}

/* Each note of the open copy d (its 'u' keys) into t, over t's. */
static fl_status overlay_notes(fl_ps_tier *t, fl_ps_tier *d) {
  static const unsigned char lo[1] = {'u'};
  rocksdb_iterator_t *it = rocksdb_create_iterator(d->db, d->ro);
  rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
  fl_status st;
  for (rocksdb_iter_seek(it, (const char *)lo, 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl = 0, vl = 0;
    const char *k = rocksdb_iter_key(it, &kl), *v = rocksdb_iter_value(it, &vl);
    if (kl != KEY_LEN || k[0] != 'u') break;
    rocksdb_writebatch_put(wb, k, KEY_LEN, v, vl);
  }
  st = write_batch(t, wb);
  rocksdb_writebatch_destroy(wb);
  rocksdb_iter_destroy(it);
  return st;
}

fl_status fl_ps_tier_overlay(fl_ps_tier *t, const char *dir) {
  fl_ps_tier *d = NULL;
  fl_status st;
  FL_TRY(fl_ps_tier_open_copy(dir, &d));
  st = overlay_rows(t, d);
  if (st == FL_OK) st = overlay_notes(t, d);
  fl_ps_tier_close(d);
  return st;
}

void fl_ps_tier_recount(fl_ps_tier *t) { rescan(t); }

/* The delta copy file sst (layout 2) of the copy dir ingested into a
 * fresh scratch store (removed at close). */
static fl_status open_delta_copy(const char *dir, const char *sst, fl_ps_tier **out) {
  static _Atomic unsigned n;
  char path[4200];
  fl_ps_tier *t;
  fl_status st;
  snprintf(path, sizeof path, "%s.%ld-%u.tier", dir, (long)getpid(), atomic_fetch_add(&n, 1));
  FL_TRY(remove_dir(path));
  FL_TRY(tier_new(path, COPY_BUDGET, &t));
  t->scratch = 1;
  if ((st = open_db(t)) != FL_OK || (st = ingest_copy(t, sst)) != FL_OK) {
    fl_ps_tier_close(t);
    return st;
  }
  *out = t;
  return FL_OK;
}

fl_status fl_ps_tier_open_copy(const char *dir, fl_ps_tier **out) {
  fl_ps_tier *t;
  char *err = NULL, sst[4200];
  *out = NULL;
  if (is_delta_copy(dir, sst, sizeof sst)) return open_delta_copy(dir, sst, out);
  FL_TRY(tier_new(dir, COPY_BUDGET, &t));
  t->db = rocksdb_open_for_read_only(t->opt, dir, 0, &err);
  if (err) {
    fl_status st = FL_ERR(FL_EIO, "disk tier: cannot read the store copy %s: %s", dir, err);
    rocksdb_free(err);
    t->db = NULL;
    fl_ps_tier_close(t);
    return st;
  }
  *out = t;
  return FL_OK;
}

fl_status fl_ps_tier_check_copy(const char *dir) {
  fl_ps_tier *t;
  rocksdb_iterator_t *it;
  char *err = NULL, sst[4200];
  fl_status st = FL_OK;
  if (!is_delta_copy(dir, sst, sizeof sst)) return FL_OK; /* a whole store: opened when replayed */
  FL_TRY(open_delta_copy(dir, sst, &t));
  it = rocksdb_create_iterator(t->db, t->ro);
  for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
  }
  rocksdb_iter_get_error(it, &err);
  if (err)
    st = FL_ERR(FL_ECORRUPT, "disk tier: the delta copy %s is corrupt: %s", sst, err);
  rocksdb_free(err);
  rocksdb_iter_destroy(it);
  fl_ps_tier_close(t);
  return st;
}

/* fn on the value v (vn bytes) of row key, if any: its blob after the
 * demotion sequence. */
static fl_status give_row(const fl_ps_tier *t, uint64_t key, const char *v, size_t vn,
                          fl_ps_tier_row_fn fn, void *ctx) {
  if (!v) return FL_OK;
  if (vn < SEQ_LEN)
    return FL_ERR(FL_ECORRUPT, "disk tier %s: a row of %zu bytes", t->path, vn);
  return fn(ctx, key, v + SEQ_LEN, vn - SEQ_LEN);
}

struct fl_ps_tier_cursor {
  fl_ps_tier *t;
  rocksdb_iterator_t *it;
  unsigned char lo[KEY_LEN]; /* the table's first key: its prefix */
  int started, done;
};

fl_status fl_ps_tier_cursor_open(fl_ps_tier *t, uint64_t table, fl_ps_tier_cursor **out) {
  fl_ps_tier_cursor *c = calloc(1, sizeof *c);
  *out = NULL;
  if (!c) return FL_ERR(FL_ENOMEM, "disk tier %s: out of memory for a cursor", t->path);
  c->t = t;
  c->it = rocksdb_create_iterator(t->db, t->ro);
  make_key(c->lo, 'r', table, 0);
  rocksdb_iter_seek(c->it, (const char *)c->lo, KEY_LEN);
  *out = c;
  return FL_OK;
}

/* FL_EIO (logged) when c's iterator stopped on an error, else FL_OK. */
static fl_status cursor_error(fl_ps_tier_cursor *c) {
  char *err = NULL;
  fl_status st = FL_OK;
  rocksdb_iter_get_error(c->it, &err);
  if (err) st = FL_ERR(FL_EIO, "disk tier %s: reading the rows failed: %s", c->t->path, err);
  rocksdb_free(err);
  return st;
}

fl_status fl_ps_tier_cursor_next(fl_ps_tier_cursor *c, uint64_t *key, const void **row,
                                 size_t *len, int *more) {
  size_t kl = 0, vl = 0;
  const char *k, *v;
  *more = 0;
  if (c->done) return FL_OK;
  if (c->started) rocksdb_iter_next(c->it);
  c->started = 1;
  if (!rocksdb_iter_valid(c->it)) {
    c->done = 1;
    return cursor_error(c);
  }
  k = rocksdb_iter_key(c->it, &kl);
  v = rocksdb_iter_value(c->it, &vl);
  if (kl != KEY_LEN || memcmp(k, c->lo, 9)) { /* past this table's rows */
    c->done = 1;
    return FL_OK;
  }
  if (vl < SEQ_LEN) return FL_ERR(FL_ECORRUPT, "disk tier %s: a row of %zu bytes", c->t->path, vl);
  *key = get_be64((const unsigned char *)k + 9);
  *row = v + SEQ_LEN;
  *len = vl - SEQ_LEN;
  *more = 1;
  return FL_OK;
}

void fl_ps_tier_cursor_close(fl_ps_tier_cursor *c) {
  if (!c) return;
  rocksdb_iter_destroy(c->it);
  free(c);
}

fl_status fl_ps_tier_copy_rows(fl_ps_tier *t, uint64_t table, const uint64_t *keys, size_t n,
                               fl_ps_tier_row_fn fn, void *ctx) {
  fl_status st = FL_OK;
  for (size_t i = 0; i < n && st == FL_OK; i++) {
    unsigned char rk[KEY_LEN];
    char *err = NULL, *v;
    size_t vn = 0;
    make_key(rk, 'r', table, keys[i]);
    v = rocksdb_get(t->db, t->ro, (const char *)rk, KEY_LEN, &vn, &err);
    st = err ? FL_ERR(FL_EIO, "disk tier %s: reading a row failed: %s", t->path, err)
             : give_row(t, keys[i], v, vn, fn, ctx);
    rocksdb_free(err);
    rocksdb_free(v);
  }
  return st;
}

void fl_ps_tier_get_stats(fl_ps_tier *t, fl_ps_tier_stats *s) {
  uint64_t sst = 0, mem = 0, pend = 0;
  memset(s, 0, sizeof *s);
  for (size_t i = 0; i < atomic_load(&t->n_tables); i++) {
    s->rows += atomic_load(&tab_at(t, i)->rows);
    pend += atomic_load(&tab_at(t, i)->pend_bytes);
  }
  if (t->db) {
    rocksdb_property_int(t->db, "rocksdb.total-sst-files-size", &sst);
    rocksdb_property_int(t->db, "rocksdb.cur-size-all-mem-tables", &mem);
  }
  s->bytes = sst + mem + pend;
  s->mem = rocksdb_cache_get_usage(t->cache) + mem + pend;
  s->hits = atomic_load(&t->hits);
  s->misses = atomic_load(&t->misses);
  s->promotions = atomic_load(&t->promotions);
  s->demotions = atomic_load(&t->demotions);
  s->write_errors = atomic_load(&t->write_errors);
  s->tables = atomic_load(&t->dir_bytes);
}

/* The properties are RocksDB's own counters, read without a lock; the C
 * API of RocksDB 7.8 has no event listener, and its statistics come as one
 * text to parse, so these are the simplest exact source (the info LOG is
 * kept quiet: set_options). */
void fl_ps_tier_get_background(fl_ps_tier *t, fl_ps_tier_background *b) {
  memset(b, 0, sizeof *b);
  if (!t->db) return;
  rocksdb_property_int(t->db, "rocksdb.num-running-flushes", &b->flushes);
  rocksdb_property_int(t->db, "rocksdb.num-running-compactions", &b->compactions);
  rocksdb_property_int(t->db, "rocksdb.compaction-pending", &b->compaction_pending);
  rocksdb_property_int(t->db, "rocksdb.background-errors", &b->errors);
}
