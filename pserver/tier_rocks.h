/* tier_rocks.h - the disk tier of a pserver's sparse tables: one RocksDB
 * store in the pserver's data directory holding the rows that the tables
 * demoted out of their memory budget (pserver.memory_budget).  Rows are
 * opaque blobs of a table's fixed row length, keyed by the table (its name
 * hash) and the row id; each table's rows are also kept in demotion order
 * so that the least recently used row of both tiers can be found.  A
 * table's writes wait in its own batch until its next read or a
 * checkpoint (tier_rocks.c).  Calls for one table are not thread-safe: a
 * table calls it under the lock that guards the table; different tables
 * may call at once. */
#ifndef FL_PS_TIER_ROCKS_H
#define FL_PS_TIER_ROCKS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fl_status.h"

typedef struct fl_ps_tier fl_ps_tier;

/* A row's last FL_PS_TIER_MARKS_LEN bytes are its last-seen marks (the
 * caller's layout); a value written before they existed is that much
 * shorter and reads with them zero, which the caller takes as "no marks". */
#define FL_PS_TIER_MARKS_LEN 24

/* The marks m (FL_PS_TIER_MARKS_LEN bytes: a nonzero word when set, the
 * last-seen step, the last-seen time) into *step and *time; 0, both left
 * as they are, when m holds none. */
static inline int fl_ps_tier_marks(const unsigned char *m, int64_t *step, double *time) {
  uint64_t v;
  memcpy(&v, m, sizeof v);
  if (v == 0) return 0;
  memcpy(step, m + 8, sizeof *step);
  memcpy(time, m + 16, sizeof *time);
  return 1;
}

/* Of a row held in both tiers (after a full disk: a promotion whose
 * removal from the store failed), the copy a load keeps: 1 when the disk
 * copy (update count upd, last-seen step and time) is as new as the
 * memory copy (mupd, mstep, mtime) or newer.  The update count, then the
 * step, then the time decide (each only grows over a row's life, and
 * copies equal in all three hold the same bits: values change only by an
 * update).  The one rule of the pserver's load (sparse.c) and of
 * ps_rows_digest. */
static inline int fl_ps_tier_disk_newer(int64_t upd, int64_t step, double time, int64_t mupd,
                                        int64_t mstep, double mtime) {
  if (upd != mupd) return upd > mupd;
  if (step != mstep) return step > mstep;
  return time >= mtime;
}

/* Counters of a tier (all tables). */
typedef struct fl_ps_tier_stats {
  uint64_t rows;       /* rows held now */
  uint64_t bytes;      /* on disk (SST files), the memtables and pending writes */
  uint64_t mem;        /* RocksDB's memory: block cache, memtables, pending writes */
  uint64_t hits;       /* lookups that found the row */
  uint64_t misses;     /* lookups that did not (a new row) */
  uint64_t promotions; /* rows taken back into memory */
  uint64_t demotions;  /* rows written out of memory */
  uint64_t write_errors;
  uint64_t tables; /* the memory of the store's table entries (one a stripe): their id
                    * filters, record buffers and the directory; outside mem */
} fl_ps_tier_stats;

/* Open a fresh store in dir (created; whatever an earlier process left
 * there is removed first: the store's state comes back from checkpoints
 * only; FL_ESTATE, nothing removed, while another process has it open).  budget is the pserver's memory budget: RocksDB's block cache and
 * memtables are sized as a fixed share of it (see tier_rocks.c).  The
 * caller owns *out (fl_ps_tier_close). */
fl_status fl_ps_tier_open(const char *dir, size_t budget, fl_ps_tier **out);
void fl_ps_tier_close(fl_ps_tier *t);
/* The store's directory (owned by t). */
const char *fl_ps_tier_path(const fl_ps_tier *t);
/* No delta copy will be taken of t (pserver.checkpoint_delta off): from
 * now on a demotion writes its row and order key only, not the record
 * the next delta's copy is written from; fl_ps_tier_checkpoint_delta is
 * refused (FL_ESTATE).  Call right after fl_ps_tier_open. */
void fl_ps_tier_no_deltas(fl_ps_tier *t);
/* 0 when a delta's copy of t would be refused: its record of the rows
 * demoted since the last marking checkpoint lost an entry (logged then;
 * the next marking checkpoint starts it again), or t takes no deltas. */
int fl_ps_tier_delta_ok(const fl_ps_tier *t);
/* The memory RocksDB may use (block cache and memtables) out of budget. */
size_t fl_ps_tier_overhead(size_t budget);

/* Write row (len bytes) of key in table, the most recently demoted of its
 * table (into the table's pending batch).  Refused (FL_EIO) while RocksDB
 * refuses the table's earlier writes (disk full, I/O error; logged with
 * the path where that write failed): the store is unchanged for key, and
 * the writes refused stay readable. */
fl_status fl_ps_tier_put(fl_ps_tier *t, uint64_t table, uint64_t key, const void *row,
                         size_t len);
/* fl_ps_tier_put with the caller's order sequence seq (unique within
 * table): the table's rows leave in ascending seq (evict_oldest, expire),
 * so a caller that passes each row's last use keeps them in that order
 * whenever it demotes them. */
fl_status fl_ps_tier_put_at(fl_ps_tier *t, uint64_t table, uint64_t key, const void *row,
                            size_t len, uint64_t seq);
/* Keep blob (len bytes, copied) as table's note, replacing the one
 * before; it travels with the store's copies.  Get it back with
 * fl_ps_tier_get_note: *blob (the caller frees it with free(); NULL when
 * table has none) and *len. */
fl_status fl_ps_tier_put_note(fl_ps_tier *t, uint64_t table, const void *blob, size_t len);
fl_status fl_ps_tier_get_note(fl_ps_tier *t, uint64_t table, void **blob, size_t *len);
/* The largest order sequence of table written or restored (0: none). */
uint64_t fl_ps_tier_newest(const fl_ps_tier *t, uint64_t table);
/* Look up n keys of table with one multi-get (those the table's filter of
 * ids on disk rules out are answered without it): found[i] 1, rows + i * len
 * filled and seqs[i] (seqs may be NULL) set to the row's demotion sequence
 * when held.  Nothing is removed. */
fl_status fl_ps_tier_get_many(fl_ps_tier *t, uint64_t table, const uint64_t *keys, size_t n,
                              void *rows, size_t len, uint8_t *found, uint64_t *seqs);
/* Where a store's reads go (bench_tier): this thread's reads of blocks,
 * and those of the stores' reader threads for its multi-gets, from the
 * store's files since fl_ps_tier_io_begin (look-ups and scans
 * the block cache missed, from the page cache or the disk), and the
 * bytes the store's compactions read and wrote and its flushes wrote
 * since it was opened (to 10 MB; 0 when unknown). */
typedef struct fl_ps_tier_io {
  uint64_t user_blocks, user_bytes;
  uint64_t compaction_read, compaction_written, flushed;
} fl_ps_tier_io;
/* Start counting this thread's block reads and the readers' (RocksDB's
 * perf context). */
void fl_ps_tier_io_begin(void);
void fl_ps_tier_get_io(fl_ps_tier *t, fl_ps_tier_io *io);
/* Remove key of table, read by get_many with its sequence seq (a
 * promotion). */
fl_status fl_ps_tier_drop(fl_ps_tier *t, uint64_t table, uint64_t key, uint64_t seq);
/* The rows of table above after (every row when has_after is 0), keys
 * ascending: at most max of them into keys (the caller's) and their blobs
 * of len bytes into rows; *n gets how many.  Reads only. */
fl_status fl_ps_tier_scan(fl_ps_tier *t, uint64_t table, int has_after, uint64_t after,
                          size_t max, uint64_t *keys, void *rows, size_t len, size_t *n);
/* Remove the row of table with the smallest order sequence if that is
 * below before: *key gets its id, *found 0 when table has none here (or
 * none below before).  Order keys whose row is gone or on disk under a
 * newer one (stale) are removed on the way, never followed (as by
 * expire). */
fl_status fl_ps_tier_evict_oldest(fl_ps_tier *t, uint64_t table, uint64_t before, uint64_t *key,
                                  int *found);
/* Whether row (a blob read from the store) of key is due for expiry; ctx
 * is the caller's. */
typedef int (*fl_ps_tier_old_fn)(void *ctx, uint64_t key, const void *row);
/* Delete table's rows in demotion order (oldest first) while old says so:
 * *n gets how many, *all 1 when no row of table is left that old refused.
 * row is the caller's scratch of len bytes.  One iterator and one read per
 * row looked at; the deletes join the table's pending batch. */
fl_status fl_ps_tier_expire(fl_ps_tier *t, uint64_t table, void *row, size_t len,
                            fl_ps_tier_old_fn old, void *ctx, size_t *n, int *all);
/* Rows of table held here. */
size_t fl_ps_tier_rows(const fl_ps_tier *t, uint64_t table);

/* Copy the store into dir (not existing yet) with RocksDB's checkpoint
 * object: hard links to its files, the memtables flushed first (a base's
 * copy).  mark: a base of a delta chain (the next delta's copy holds the
 * rows demoted from now on; else from the mark before). */
fl_status fl_ps_tier_checkpoint(fl_ps_tier *t, const char *dir, int mark);
/* A delta's copy into dir (not existing yet): one SST file (fsynced, the
 * directory too) holding only the rows demoted since the last marking
 * checkpoint (base or delta) and still here, as they are now (each under
 * its order key), and every table's note; replayed onto the base's copy
 * by fl_ps_tier_overlay.  Read with fl_ps_tier_open_copy as a whole copy. */
fl_status fl_ps_tier_checkpoint_delta(fl_ps_tier *t, const char *dir);
/* FL_ECORRUPT (logged, naming the file) when the delta copy in dir is
 * truncated or fails its checksums (every block read); FL_OK for a whole
 * store's copy (checked when opened). */
fl_status fl_ps_tier_check_copy(const char *dir);
/* Replace the store by the copy in dir (made by fl_ps_tier_checkpoint;
 * NULL: an empty store); dir itself is left as it was. */
fl_status fl_ps_tier_restore(fl_ps_tier *t, const char *dir);
/* A delta's replay onto the store restored from its base: first the keys
 * it deleted (remove_keys, n keys of table; those not here are skipped),
 * then its copy's rows and notes (overlay: each replaces the store's
 * copy of its row or note), for each delta in order; then recount (rows, sequences, id
 * filters).  Not thread-safe: no other call on t meanwhile. */
fl_status fl_ps_tier_remove_keys(fl_ps_tier *t, uint64_t table, const uint64_t *keys, size_t n);
fl_status fl_ps_tier_overlay(fl_ps_tier *t, const char *dir);
void fl_ps_tier_recount(fl_ps_tier *t);
/* Remove a copy (a flat directory of files); FL_OK when there is none. */
fl_status fl_ps_tier_remove_copy(const char *dir);
/* Open the copy in dir (made by fl_ps_tier_checkpoint or
 * fl_ps_tier_checkpoint_delta, the latter ingested into a scratch store
 * beside it, removed at close) read-only, to read with
 * fl_ps_tier_copy_rows and cursors only; the caller owns *out
 * (fl_ps_tier_close). */
fl_status fl_ps_tier_open_copy(const char *dir, fl_ps_tier **out);
/* A row read from a copy: key and its blob of len bytes (the caller's
 * layout); an error stops the reading and is returned. */
typedef fl_status (*fl_ps_tier_row_fn)(void *ctx, uint64_t key, const void *row, size_t len);
/* fn on the rows of keys[0..n) of table held in the copy t, in that
 * order (one point look-up each). */
fl_status fl_ps_tier_copy_rows(fl_ps_tier *t, uint64_t table, const uint64_t *keys, size_t n,
                               fl_ps_tier_row_fn fn, void *ctx);
/* A walk over the rows of one table of a copy, keys ascending, one row at
 * a time (one RocksDB iterator: the memory of its current blocks, not of
 * the table). */
typedef struct fl_ps_tier_cursor fl_ps_tier_cursor;
/* A cursor on the rows of table in the copy t (which must outlive it);
 * the caller owns *out (fl_ps_tier_cursor_close). */
fl_status fl_ps_tier_cursor_open(fl_ps_tier *t, uint64_t table, fl_ps_tier_cursor **out);
/* The next row: *key, *row (its blob of *len bytes, owned by c, valid
 * until the next call) and *more 1; *more 0 past the table's last row. */
fl_status fl_ps_tier_cursor_next(fl_ps_tier_cursor *c, uint64_t *key, const void **row,
                                 size_t *len, int *more);
void fl_ps_tier_cursor_close(fl_ps_tier_cursor *c);

void fl_ps_tier_get_stats(fl_ps_tier *t, fl_ps_tier_stats *s);

/* RocksDB's background work on the store now, read from its properties at
 * the call: flushes and compactions running, whether a compaction is due,
 * and the background errors so far (a flush or compaction that failed, e.g.
 * on a full disk: the store then refuses writes until RocksDB's own
 * recovery finds space free again).  t is only read; *b is the caller's. */
typedef struct fl_ps_tier_background {
  uint64_t flushes, compactions, compaction_pending, errors;
} fl_ps_tier_background;
void fl_ps_tier_get_background(fl_ps_tier *t, fl_ps_tier_background *b);

#endif
