/* core_delta.c - a pserver's checkpoint directory with delta checkpoints
 * (pserver.checkpoint_delta.every N): a whole base ckpt-<step>.flc, then
 * up to N deltas delta-<base>+<k>.flc holding the dense state, the rows
 * seen or changed and the keys deleted since the checkpoint before (with
 * the disk tier each file has the store's copy beside it); a restart
 * loads the newest base that verifies and replays its deltas in order,
 * into memory, stopping at the first missing, truncated or corrupt one,
 * or one that lost its store copy (named in the log), then rebuilds the
 * disk tier from the base's copy and the deltas' (core_tier.c).  Also the sparse tables'
 * sweep (expiry, counters in /metrics, their log line at each
 * checkpoint).  Saves are serialized by the caller (the daemon's
 * checkpoint lock); the format is fl_ckpt's. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "fl_log.h"
#include "fl_metrics.h"
#include "core_internal.h"
#include "ps_serving.h"

double psc_wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ----------------------------------------------------------------- sweep */

/* The tables' counters as gauges flotilla_table_row_events{table,event}
 * (they restart from the checkpoint's values) and flotilla_table_rows. */
static void publish(const fl_ps_table *t, const fl_ps_table_counts *n, size_t rows) {
  static fl_metric *fam;
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static const char *const events[] = {"admitted", "refused", "expired", "evicted"};
  const uint64_t v[] = {n->admitted, n->refused, n->expired, n->evicted};
  const char *rows_label[] = {fl_ps_table_name(t)};
  fl_series *s = NULL;

  pthread_mutex_lock(&mu);
  if (!fam && fl_metrics_default() &&
      fl_metrics_gauge(fl_metrics_default(), "flotilla_table_row_events",
                       "Rows admitted, ids refused below the admission threshold, rows "
                       "expired and evicted, per sparse table (pserver).",
                       "table,event", &fam) != FL_OK)
    fam = NULL;
  pthread_mutex_unlock(&mu);
  for (size_t i = 0; fam && i < 4; i++) {
    const char *labels[] = {fl_ps_table_name(t), events[i]};
    if (fl_metric_series(fam, labels, &s) == FL_OK) fl_series_set(s, (double)v[i]);
  }
  if (fl_metric_series(fl_metrics_std()->table_rows, rows_label, &s) == FL_OK)
    fl_series_set(s, (double)rows);
}

void psc_sparse_sweep(fl_ps_core *c, int expire) {
  double now = psc_wall_now();
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
    ps_table *pt = &c->tables[i];
    fl_ps_table_counts n;
    size_t rows;
    psc_stripes_sweep(pt, expire, now, &n, &rows);
    publish(pt->t, &n, rows);
  }
}

/* One line per table after each checkpoint: rows and counters. */
static void log_tables(fl_ps_core *c) {
  for (size_t i = 0; i < atomic_load(&c->n_tables); i++) {
    ps_table *pt = &c->tables[i];
    fl_ps_table_counts n;
    size_t rows;
    psc_stripes_sweep(pt, 0, 0, &n, &rows);
    FL_LOGI("sparse table %s: %zu rows; admitted %" PRIu64 ", refused %" PRIu64
            " (below admit_threshold), expired %" PRIu64 ", evicted %" PRIu64,
            fl_ps_table_name(pt->t), rows, n.admitted, n.refused, n.expired, n.evicted);
  }
}

/* ------------------------------------------------------------------ save */

static fl_status delta_path(const char *dir, int64_t base, int64_t seq, char *out, size_t cap) {
  int k = snprintf(out, cap, "%s/delta-%" PRId64 "+%" PRId64 ".flc", dir, base, seq);
  if (k < 0 || (size_t)k >= cap)
    return FL_ERR(FL_EINVAL, "checkpoint dir %s: path too long", dir);
  return FL_OK;
}

static uint64_t new_nonce(void) {
  static _Atomic uint64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return fl_ps_mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                     ((uint64_t)getpid() << 12) ^ atomic_fetch_add(&counter, 1)) | 1u;
}

/* 1 when the next checkpoint may be a delta: deltas on, a base written
 * by this process, fewer than `every` deltas since, every table able to. */
static int delta_due(fl_ps_core *c) {
  int64_t every = c->o.job.pserver.checkpoint_delta.every;
  int ok = every > 0 && c->have_base && c->delta_seq < every && psc_tier_delta_ok(c);
  for (size_t i = 0; ok && i < atomic_load(&c->n_tables); i++)
    ok = psc_stripes_delta_ok(&c->tables[i]);
  return ok;
}

/* Remove the deltas whose base is gone (pruned or never written). */
static void prune_deltas(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return;
  while ((e = readdir(d))) {
    long long base, seq;
    char path[4096], bpath[4096];
    struct stat sb;
    int used = 0;
    if (sscanf(e->d_name, "delta-%lld+%lld.flc%n", &base, &seq, &used) != 2 ||
        e->d_name[used] != '\0')
      continue;
    if (fl_ckpt_dir_path(dir, base, bpath, sizeof bpath) != FL_OK ||
        stat(bpath, &sb) == 0 || errno != ENOENT)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) == 0) FL_LOGI("removed delta checkpoint %s (its base is gone)", path);
  }
  closedir(d);
}

/* Write the checkpoint of kind k into dir; *step gets the step held, path
 * (cap bytes) the name written. */
static fl_status write_file(fl_ps_core *c, const char *dir, const psc_ckpt_kind *k,
                            int64_t *step, char *path, size_t cap) {
  fl_ckpt_writer *w = NULL;
  fl_status st;

  if (k->delta) FL_TRY(delta_path(dir, k->base, k->seq, path, cap));
  else FL_TRY(fl_ckpt_dir_path(dir, fl_ps_core_step(c), path, cap));
  FL_TRY(fl_ckpt_writer_open(path, &w));
  st = psc_write_state(c, w, k, step);
  /* A base is named after the step written, which may be later. */
  if (st == FL_OK && !k->delta) st = fl_ckpt_dir_path(dir, *step, path, cap);
  if (st == FL_OK) st = psc_tier_place(c, path); /* the store's copy first */
  if (st != FL_OK) {
    fl_ckpt_writer_abort(w);
    return st;
  }
  st = fl_ckpt_writer_commit_as(w, path);
  psc_tier_prune(c);
  return st;
}

/* pserver.serving_export: the checkpoint just written (path, of kind k,
 * holding step) again for serving, in <serving_export>/pserver-<index>;
 * with the disk tier its rows there are read from the store's copy beside
 * path.  A failed export is logged; the next checkpoint is then a base,
 * so that the serving chain starts over whole. */
static void serving_export(fl_ps_core *c, const char *path, const psc_ckpt_kind *k,
                           int64_t step) {
  const char *root = c->o.job.pserver.serving_export;
  char dir[FL_JOB_PATH_MAX + 32], copy[4200];
  if (!root[0]) return;
  snprintf(dir, sizeof dir, "%s/pserver-%d", root, c->o.server_index);
  snprintf(copy, sizeof copy, "%s.tier", path);
  if (fl_ps_serving_export(dir, path, c->tier ? copy : NULL, k->delta ? k->base : step,
                           k->delta ? k->seq : 0, step) != FL_OK)
    c->have_base = 0;
}

fl_status fl_ps_core_save_dir(fl_ps_core *c, const char *dir, int64_t *step, char *path,
                              size_t cap) {
  psc_ckpt_kind k;
  fl_status st;

  memset(&k, 0, sizeof k);
  k.mark = 1;
  k.delta = delta_due(c);
  /* Only a directory with deltas names its bases (else a base is the same
   * bytes as the state it holds, whoever writes it). */
  if (c->o.job.pserver.checkpoint_delta.every > 0) k.nonce = k.delta ? c->base_nonce : new_nonce();
  k.base = c->base_step;
  k.seq = c->delta_seq + 1;
  psc_sparse_sweep(c, 1); /* expired rows are not written */
  st = write_file(c, dir, &k, step, path, cap);
  if (st != FL_OK) {
    c->have_base = 0; /* the rows marked saved are in no file: start over */
    return st;
  }
  if (k.delta) {
    c->delta_seq = k.seq;
  } else {
    c->have_base = 1;
    c->base_step = *step;
    c->base_nonce = k.nonce;
    c->delta_seq = 0;
    prune_deltas(dir);
    psc_tier_prune(c); /* the copies of the deltas pruned */
  }
  atomic_fetch_add(&c->checkpoints, 1);
  log_tables(c);
  serving_export(c, path, &k, *step);
  return FL_OK;
}

/* ---------------------------------------------------------------- replay */

/* Load delta seq of base (nonce, file bfile) from dir into memory (the
 * store's copy comes after the chain: fl_ps_core_load_chain): 1 applied
 * (path: its name), 0 none there (the chain ends), -1 bad (named in the
 * log; nothing of it applied). */
static int replay_one(fl_ps_core *c, const char *dir, const char *bfile, int64_t base,
                      uint64_t nonce, int64_t seq, char *path) {
  struct stat sb;
  fl_ckpt *ck = NULL;
  fl_ckpt_record r;
  int64_t b = -1, s = -1;
  int rc = -1;

  if (delta_path(dir, base, seq, path, 4096) != FL_OK) return -1;
  if (stat(path, &sb) != 0 && errno == ENOENT) return 0;
  if (psc_tier_copy_missing(c, bfile, path)) {
    FL_LOGE("delta checkpoint %s has lost its copy of the disk tier (%s.tier): the restart "
            "stops at step %" PRId64 " (the last good checkpoint)", path, path,
            fl_ps_core_step(c));
    return -1;
  }
  if (psc_tier_copy_bad(c, path)) {
    FL_LOGE("delta checkpoint %s: its copy of the disk tier (%s.tier) does not read (logged "
            "above): the restart stops at step %" PRId64 " (the last good checkpoint)", path,
            path, fl_ps_core_step(c));
    return -1;
  }
  if (fl_ckpt_load(path, &ck) != FL_OK) {
    FL_LOGE("delta checkpoint %s is truncated or corrupt: the restart stops at step %" PRId64
            " (the last good checkpoint); what its interval changed is lost", path,
            fl_ps_core_step(c));
    return -1;
  }
  if (fl_ckpt_find(ck, "ps/ckpt_nonce", &r) != FL_OK || r.dtype != FL_CKPT_U64 ||
      *(const uint64_t *)r.data != nonce || fl_ckpt_get_i64(ck, "ps/delta_base", &b) != FL_OK ||
      fl_ckpt_get_i64(ck, "ps/delta_seq", &s) != FL_OK || b != base || s != seq)
    FL_LOGW("delta checkpoint %s belongs to another base (an earlier run's): not replayed; the "
            "restart stops at step %" PRId64, path, fl_ps_core_step(c));
  else if (psc_load_rows(c, ck, path) == FL_OK)
    rc = 1;
  else
    FL_LOGE("delta checkpoint %s does not apply (logged above): the restart stops at step %" PRId64,
            path, fl_ps_core_step(c));
  fl_ckpt_free(ck);
  return rc;
}

fl_status fl_ps_core_load_chain(fl_ps_core *c, const fl_ckpt *ck, const char *file,
                                const char *dir, int64_t *deltas) {
  fl_ckpt_record r;
  int64_t base, seq = 0;
  uint64_t nonce;
  char (*paths)[4096] = NULL, next[4096];
  size_t cap = 0;
  fl_status st;

  *deltas = 0;
  FL_TRY(psc_load_rows(c, ck, file));
  c->have_base = 0; /* the next checkpoint is a new base */
  if (fl_ckpt_find(ck, "ps/ckpt_nonce", &r) == FL_OK && r.dtype == FL_CKPT_U64 &&
      fl_ckpt_get_i64(ck, "ps/step", &base) == FL_OK) { /* else written without deltas */
    nonce = *(const uint64_t *)r.data;
    while (replay_one(c, dir, file, base, nonce, seq + 1, next) == 1) {
      if ((size_t)seq == cap) {
        char (*p)[4096] = realloc(paths, (cap = cap ? 2 * cap : 8) * sizeof *paths);
        if (!p) {
          free(paths);
          return FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory for its deltas' names", file);
        }
        paths = p;
      }
      memcpy(paths[seq++], next, sizeof next);
    }
  }
  *deltas = seq;
  if (seq)
    FL_LOGI("replayed %" PRId64 " delta checkpoint(s) after %s: step %" PRId64, seq, file,
            fl_ps_core_step(c));
  /* The disk tier: the base's copy, each delta's deletions and copy
   * replayed onto it, then each row of both tiers settled (what the chain
   * put in memory may be older). */
  st = psc_tier_load_chain(c, file, paths, (size_t)seq);
  free(paths);
  return st;
}
