/* core_tier.c - the disk tier of a pserver's sparse tables
 * (pserver.memory_budget; the store is tier_rocks.c, the demotions and
 * promotions sparse.c): the store opened in the pserver's data directory
 * only once the directory is claimed for this run (a second run there is
 * refused before its store is touched), a copy of it beside each
 * checkpoint file, base or delta (<file>.tier: a base's a RocksDB
 * checkpoint, hard links; a delta's one SST file of the rows demoted since
 * the checkpoint before, checked block by block before it is replayed)
 * taken with every table's stripes locked and put in place before the
 * file is committed, restored once a load (a base and its deltas) has put
 * its rows in memory (the base's copy, then each delta's deletions and
 * rows over it), then settled against them (the older copy of a row in
 * both tiers goes), removed with its checkpoint; and the tiers'
 * /metrics. */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fl_ckpt.h"
#include "fl_log.h"
#include "fl_metrics.h"
#include "core_internal.h"
#include "tier_rocks.h"

#define COPY_SUFFIX ".tier"

fl_status fl_ps_core_open_tier(fl_ps_core *c, const char *data_dir) {
  size_t budget = c->o.job.pserver.memory_budget, over = fl_ps_tier_overhead(budget);
  char path[FL_JOB_PATH_MAX + 96];
  if (!budget || c->tier) return FL_OK;
  if (!data_dir || !data_dir[0])
    return FL_ERR(FL_EINVAL, "pserver.memory_budget %zu: the disk tier lives in the pserver's "
                  "data directory: set pserver.checkpoint_dir (or the cluster's)", budget);
  if (atomic_load(&c->n_tables))
    return FL_ERR(FL_ESTATE, "pserver: the disk tier opens before the first sparse table");
  snprintf(c->tier_dir, sizeof c->tier_dir, "%s", data_dir);
  snprintf(path, sizeof path, "%s/tier.rocksdb", data_dir);
  FL_TRY(fl_ps_tier_open(path, budget, &c->tier));
  if (c->o.job.pserver.checkpoint_delta.every <= 0) fl_ps_tier_no_deltas(c->tier);
  c->hot_budget = budget - over;
  FL_LOGI("disk tier %s: sparse rows in memory within %" PRIu64 " bytes of pserver.memory_budget "
          "%zu, RocksDB's block cache and memtables within the other %zu", path, c->hot_budget,
          budget, over);
  return FL_OK;
}

static void tmp_path(const fl_ps_core *c, char *p, size_t cap) {
  snprintf(p, cap, "%s/tier.tmp", c->tier_dir);
}

fl_status psc_tier_snapshot(fl_ps_core *c, int delta, int mark) {
  char tmp[FL_JOB_PATH_MAX + 96];
  size_t nt = atomic_load(&c->n_tables);
  for (size_t i = 0; i < nt; i++)
    for (unsigned s = 0; s < c->tables[i].ns; s++)
      FL_TRY(fl_ps_table_tier_keep_order(c->tables[i].sh[s]));
  tmp_path(c, tmp, sizeof tmp);
  FL_TRY(fl_ps_tier_remove_copy(tmp));
  return delta ? fl_ps_tier_checkpoint_delta(c->tier, tmp)
               : fl_ps_tier_checkpoint(c->tier, tmp, mark);
}

void psc_tier_prune(fl_ps_core *c) {
  DIR *d = c->tier ? opendir(c->tier_dir) : NULL;
  struct dirent *e;
  char p[FL_JOB_PATH_MAX + 512];
  size_t ls = strlen(COPY_SUFFIX);
  if (!d) return;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    int len;
    if (n <= ls || strcmp(e->d_name + n - ls, COPY_SUFFIX)) continue;
    len = snprintf(p, sizeof p, "%s/%.*s", c->tier_dir, (int)(n - ls), e->d_name);
    if (len < 0 || (size_t)len >= sizeof p || access(p, F_OK) == 0) continue;
    snprintf(p, sizeof p, "%s/%s", c->tier_dir, e->d_name);
    if (fl_ps_tier_remove_copy(p) != FL_OK) break;
  }
  closedir(d);
}

fl_status psc_tier_place(fl_ps_core *c, const char *path) {
  char tmp[FL_JOB_PATH_MAX + 96], dst[FL_JOB_PATH_MAX + 512];
  if (!c->tier) return FL_OK;
  tmp_path(c, tmp, sizeof tmp);
  snprintf(dst, sizeof dst, "%s" COPY_SUFFIX, path);
  FL_TRY(fl_ps_tier_remove_copy(dst));
  if (rename(tmp, dst) != 0)
    return FL_ERR(FL_EIO, "disk tier: cannot rename %s to %s: %s", tmp, dst, strerror(errno));
  return FL_OK;
}

static int has_copy(const char *file, char *dst, size_t cap) {
  struct stat sb;
  snprintf(dst, cap, "%s" COPY_SUFFIX, file);
  return stat(dst, &sb) == 0 && S_ISDIR(sb.st_mode);
}

fl_status psc_tier_check_load(fl_ps_core *c, const char *file) {
  char dst[FL_JOB_PATH_MAX + 512];
  if (!c->tier && has_copy(file, dst, sizeof dst))
    return FL_ERR(FL_EINVAL, "checkpoint %s keeps sparse rows on disk (%s): set "
                  "pserver.memory_budget to resume it", file, dst);
  return FL_OK;
}

int psc_tier_copy_missing(fl_ps_core *c, const char *base, const char *delta) {
  char dst[FL_JOB_PATH_MAX + 512];
  return c->tier && has_copy(base, dst, sizeof dst) && !has_copy(delta, dst, sizeof dst);
}

int psc_tier_copy_bad(fl_ps_core *c, const char *delta) {
  char dst[FL_JOB_PATH_MAX + 512];
  return c->tier && has_copy(delta, dst, sizeof dst) && fl_ps_tier_check_copy(dst) != FL_OK;
}

int psc_tier_delta_ok(fl_ps_core *c) { return !c->tier || fl_ps_tier_delta_ok(c->tier); }

/* The n deleted keys del out of the store, each of the stripe table
 * ids[fl_ps_table_stripe(key, ns)] (one removal call a stripe). */
static fl_status remove_deleted(fl_ps_tier *t, const uint64_t *del, size_t n, const uint64_t *ids,
                                unsigned ns) {
  uint64_t *by = malloc((n ? n : 1) * sizeof *by);
  size_t at[MAX_STRIPES + 1] = {0};
  fl_status st = FL_OK;
  if (!by) return FL_ERR(FL_ENOMEM, "disk tier: out of memory for %zu deleted keys", n);
  for (size_t i = 0; i < n; i++) at[fl_ps_table_stripe(del[i], ns) + 1]++;
  for (unsigned s = 0; s < ns; s++) at[s + 1] += at[s];
  for (size_t i = 0; i < n; i++) by[at[fl_ps_table_stripe(del[i], ns)]++] = del[i];
  for (unsigned s = 0; s < ns && st == FL_OK; s++) { /* at[s]: the end of stripe s now */
    size_t lo = s ? at[s - 1] : 0;
    st = fl_ps_tier_remove_keys(t, ids[s], by + lo, at[s] - lo);
  }
  free(by);
  return st;
}

/* Delta file's deletions (record "deleted" of each table, by stripe:
 * record "tier_ids") out of the store, then its copy's rows over it. */
static fl_status replay_delta(fl_ps_core *c, const char *file) {
  char dst[FL_JOB_PATH_MAX + 512], name[FL_CKPT_NAME_MAX + 16];
  fl_ckpt *ck = NULL;
  fl_status st;
  FL_TRY(fl_ckpt_load(file, &ck));
  st = FL_OK;
  for (size_t i = 0; st == FL_OK && i < atomic_load(&c->n_tables); i++) {
    fl_ckpt_record del, ids;
    const char *tn = fl_ps_table_name(c->tables[i].t);
    snprintf(name, sizeof name, "sparse/%s/deleted", tn);
    if (fl_ckpt_find(ck, name, &del) != FL_OK) continue; /* a table the delta lacks */
    snprintf(name, sizeof name, "sparse/%s/tier_ids", tn);
    if (fl_ckpt_find(ck, name, &ids) != FL_OK || ids.dtype != FL_CKPT_U64 || ids.ndim != 1 ||
        ids.shape[0] < 1 || ids.shape[0] > MAX_STRIPES || del.dtype != FL_CKPT_U64 ||
        del.ndim != 1) {
      st = FL_ERR(FL_ECORRUPT, "delta checkpoint %s: table %s has no record tier_ids of its "
                  "stripes: not a delta of the disk tier", file, tn);
      break;
    }
    st = remove_deleted(c->tier, del.data, (size_t)del.shape[0], ids.data,
                        (unsigned)ids.shape[0]);
  }
  fl_ckpt_free(ck);
  if (st == FL_OK && has_copy(file, dst, sizeof dst)) st = fl_ps_tier_overlay(c->tier, dst);
  return st;
}

fl_status psc_tier_load_chain(fl_ps_core *c, const char *file, char (*deltas)[4096], size_t n) {
  char dst[FL_JOB_PATH_MAX + 512];
  size_t nt = atomic_load(&c->n_tables);
  fl_status st;
  if (!c->tier) return FL_OK;
  for (size_t i = 0; i < nt; i++)
    for (unsigned s = 0; s < c->tables[i].ns; s++) pthread_mutex_lock(&c->tables[i].smu[s]);
  st = fl_ps_tier_restore(c->tier, has_copy(file, dst, sizeof dst) ? dst : NULL);
  for (size_t d = 0; st == FL_OK && d < n; d++) st = replay_delta(c, deltas[d]);
  if (st == FL_OK && n) fl_ps_tier_recount(c->tier);
  for (size_t i = 0; i < nt; i++)
    for (unsigned s = 0; s < c->tables[i].ns; s++) {
      if (st == FL_OK) st = fl_ps_table_tier_settle(c->tables[i].sh[s]);
      pthread_mutex_unlock(&c->tables[i].smu[s]);
    }
  if (st == FL_OK)
    FL_LOGI("disk tier: the store is the copy beside %s%s, then %zu delta(s) replayed onto it",
            file, has_copy(file, dst, sizeof dst) ? "" : " (none there: empty)", n);
  return st;
}

fl_status psc_tier_load(fl_ps_core *c, const char *file) {
  return psc_tier_load_chain(c, file, NULL, 0);
}

void fl_ps_core_tier_stats(fl_ps_core *c, fl_ps_tiers *out) {
  fl_ps_tier_stats ts;
  uint64_t evicted = 0, disk = 0, padding = 0;
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++)
    psc_stripes_count(&c->tables[i], &out->mem_rows, &evicted, &out->mem_bytes, &disk,
                      &padding);
  out->budget = c->o.job.pserver.memory_budget;
  if (!c->tier) return;
  fl_ps_tier_get_stats(c->tier, &ts);
  out->disk_rows = ts.rows;
  out->disk_bytes = ts.bytes;
  out->hits = ts.hits;
  out->misses = ts.misses;
  out->promotions = ts.promotions;
  out->demotions = ts.demotions;
}

/* The series of family name (a gauge with label tier, or a counter). */
static fl_series *series(const char *name, const char *help, const char *tier) {
  fl_metric *m = NULL;
  fl_series *s = NULL;
  const char *v[1] = {tier};
  if (tier) {
    if (fl_metrics_gauge(fl_metrics_default(), name, help, "tier", &m) == FL_OK)
      fl_metric_series(m, v, &s);
    return s;
  }
  if (fl_metrics_counter(fl_metrics_default(), name, help, NULL, &m) == FL_OK)
    s = fl_metric_plain(m);
  return s;
}

/* The budget's split, RocksDB's measured share and the store's table
 * entries (a stripe each: id filter, record buffer), as gauges: what
 * /metrics states of the formula in docs/DESIGN.md (disk tier). */
static void publish_budget(fl_ps_core *c) {
  static const char *const help = "pserver.memory_budget's parts: hot rows, RocksDB's share "
                                  "(its block cache, memtables, pending writes), that share "
                                  "in use now, and the disk tier's table entries in use now "
                                  "(a stripe each: id filter, record buffer; beside the budget)";
  const char *parts[4] = {"hot_rows", "rocksdb", "rocksdb_used", "tier_tables"};
  fl_ps_tier_stats ts;
  double v[4];
  fl_metric *m = NULL;
  fl_ps_tier_get_stats(c->tier, &ts);
  v[0] = (double)c->hot_budget;
  v[1] = (double)fl_ps_tier_overhead(c->o.job.pserver.memory_budget);
  v[2] = (double)ts.mem;
  v[3] = (double)ts.tables;
  if (fl_metrics_gauge(fl_metrics_default(), "flotilla_ps_memory_budget_bytes", help, "part", &m) !=
      FL_OK)
    return;
  for (int i = 0; i < 4; i++) {
    fl_series *s = NULL;
    const char *lv[1] = {parts[i]};
    if (fl_metric_series(m, lv, &s) == FL_OK) fl_series_set(s, v[i]);
  }
}

/* RocksDB's background work as gauges (the store is one for all tables),
 * read at each tick: a test sees a compaction running without the store's
 * info LOG, which holds fatal messages only.  A new background error (a
 * flush or compaction failed: a full disk) is logged once here with the
 * free space; the writes RocksDB refuses from then on name its cause (its
 * own recovery takes writes again once space is free). */
static void publish_background(fl_ps_core *c) {
  static const char *const help = "RocksDB's background work in the disk tier's store now: "
                                  "flushes and compactions running, a compaction due (0/1), "
                                  "background errors so far";
  static const char *const kinds[4] = {"flushes", "compactions", "compaction_pending", "errors"};
  fl_ps_tier_background b;
  struct statvfs fs;
  fl_metric *m = NULL;
  fl_ps_tier_get_background(c->tier, &b);
  const uint64_t v[4] = {b.flushes, b.compactions, b.compaction_pending, b.errors};
  if (fl_metrics_gauge(fl_metrics_default(), "flotilla_ps_tier_background", help, "work", &m) ==
      FL_OK)
    for (int i = 0; i < 4; i++) {
      fl_series *s = NULL;
      const char *lv[1] = {kinds[i]};
      if (fl_metric_series(m, lv, &s) == FL_OK) fl_series_set(s, (double)v[i]);
    }
  if (b.errors <= c->tier_bg_errors) return;
  c->tier_bg_errors = b.errors;
  FL_LOGE("disk tier %s: a RocksDB flush or compaction failed (%" PRIu64 " background "
          "error(s); %.1f MiB free there): the store refuses writes, and checkpoints are "
          "refused, until space is freed there (RocksDB resumes by itself within seconds); "
          "sparse rows stay in memory over pserver.memory_budget, none lost",
          fl_ps_tier_path(c->tier), b.errors,
          statvfs(c->tier_dir, &fs) == 0 ? (double)fs.f_bavail * fs.f_frsize / 1048576.0 : -1.0);
}

void fl_ps_core_publish_tiers(fl_ps_core *c) {
  static const char *const names[4] = {"flotilla_ps_tier_hits_total",
                                       "flotilla_ps_tier_misses_total",
                                       "flotilla_ps_tier_promotions_total",
                                       "flotilla_ps_tier_demotions_total"};
  static const char *const helps[4] = {
      "Sparse rows missing from memory found in the disk tier",
      "Sparse rows missing from both tiers (new rows)",
      "Sparse rows taken back from disk into memory",
      "Sparse rows written from memory to disk (pserver.memory_budget)"};
  fl_ps_tiers t;
  uint64_t now[4];
  fl_ps_core_tier_stats(c, &t);
  if (c->tier) publish_budget(c);
  if (c->tier) publish_background(c);
  fl_series_set(series("flotilla_ps_sparse_rows", "Sparse rows held, per tier", "memory"),
                (double)t.mem_rows);
  fl_series_set(series("flotilla_ps_sparse_rows", "Sparse rows held, per tier", "disk"),
                (double)t.disk_rows);
  fl_series_set(series("flotilla_ps_sparse_bytes", "Bytes of sparse rows, per tier", "memory"),
                (double)t.mem_bytes);
  fl_series_set(series("flotilla_ps_sparse_bytes", "Bytes of sparse rows, per tier", "disk"),
                (double)t.disk_bytes);
  now[0] = t.hits;
  now[1] = t.misses;
  now[2] = t.promotions;
  now[3] = t.demotions;
  for (int i = 0; i < 4; i++) {
    fl_series_add(series(names[i], helps[i], NULL), (double)(now[i] - c->published[i]));
    c->published[i] = now[i];
  }
}
