/* core_stripes.c - a sparse table's lock striping: its rows are split by
 * id hash (fl_ps_table_stripe) into up to MAX_STRIPES stripes, each an
 * fl_ps_table of its own (hash, exact LRU over its rows, max_rows / ns
 * rows) under its own mutex, so that the pulls of several trainers and
 * async pushes touching different stripes run in parallel.  A call's keys
 * are grouped by stripe, each group taken under its stripe's lock, in
 * ascending stripe order; within a stripe the keys keep their order, so a
 * row's updates apply in the order they came (each update atomic).  Tables
 * of fewer than STRIPE_MIN_ROWS rows per stripe keep one stripe: exactly
 * the single LRU of before; so does every table of a server of one thread
 * without a disk tier (fl_ps_core_opts.threads).  Admission, expiry and
 * delta checkpoints work per stripe: the stripes share the table's sketch
 * (its adds locked in admit.c) and its clock (a push ticks the stripes it
 * does not touch); each expires from its own LRU tail and keeps its own
 * changed rows and deleted keys, and a checkpoint or delta writes them all
 * as one table's. */
#include <config.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "core_internal.h"
#include "tier_rocks.h"

#define STRIPE_MIN_ROWS 4096

/* The stripes of a table of o's rows on c: one on a server of one thread
 * without a disk tier (nothing to run in parallel; its rows in fewer
 * allocations), else one per STRIPE_MIN_ROWS rows, at most MAX_STRIPES. */
static unsigned stripes_for(const fl_ps_core *c, const fl_ps_table_opts *o) {
  unsigned ns = 1;
  if (c->o.threads == 1 && !c->tier && !c->o.job.pserver.memory_budget) return 1;
  while (ns < MAX_STRIPES && o->max_rows / (2 * (int64_t)ns) >= STRIPE_MIN_ROWS) ns *= 2;
  return ns;
}

fl_status psc_stripes_create(fl_ps_core *c, ps_table *pt, fl_ps_table_opts *o) {
  int64_t total = o->max_rows;
  pt->ns = stripes_for(c, o);
  o->tier = c->tier;
  o->hot_bytes = &c->hot_bytes;
  o->hot_budget = c->hot_budget;
  for (unsigned s = 0; s < pt->ns; s++) {
    fl_status st;
    o->max_rows = (total + pt->ns - 1) / pt->ns;
    o->stripe = s;
    o->sketch_of = s ? pt->sh[0] : NULL;
    if ((st = fl_ps_table_create(o, &pt->sh[s])) != FL_OK) {
      o->sketch_of = NULL;
      psc_stripes_free(pt);
      return st;
    }
    pthread_mutex_init(&pt->smu[s], NULL);
  }
  o->max_rows = total;
  o->sketch_of = NULL;
  pt->t = pt->sh[0];
  return FL_OK;
}

void psc_stripes_free(ps_table *pt) {
  for (unsigned s = 0; s < pt->ns; s++) {
    if (!pt->sh[s]) continue;
    fl_ps_table_free(pt->sh[s]);
    pthread_mutex_destroy(&pt->smu[s]);
    pt->sh[s] = NULL;
  }
  pt->t = NULL;
}

/* One call's keys grouped by stripe: order[start[s] .. start[s + 1]) are
 * the positions of stripe s's keys, in call order; keys/rows the same,
 * gathered. */
typedef struct groups {
  size_t start[MAX_STRIPES + 1];
  size_t *order;
  uint64_t *keys;
  float *rows;
} groups;

static fl_status group(const ps_table *pt, const uint64_t *keys, size_t n, size_t dim,
                       groups *g) {
  size_t at[MAX_STRIPES];
  memset(g->start, 0, sizeof g->start);
  g->order = malloc((n ? n : 1) * sizeof *g->order);
  g->keys = malloc((n ? n : 1) * sizeof *g->keys);
  g->rows = malloc((n ? n : 1) * dim * sizeof *g->rows);
  if (!g->order || !g->keys || !g->rows) {
    free(g->order);
    free(g->keys);
    free(g->rows);
    return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory for %zu keys",
                  fl_ps_table_name(pt->t), n);
  }
  for (size_t i = 0; i < n; i++) g->start[fl_ps_table_stripe(keys[i], pt->ns) + 1]++;
  for (unsigned s = 0; s < pt->ns; s++) g->start[s + 1] += g->start[s];
  memcpy(at, g->start, sizeof at);
  for (size_t i = 0; i < n; i++) {
    size_t j = at[fl_ps_table_stripe(keys[i], pt->ns)]++;
    g->order[j] = i;
    g->keys[j] = keys[i];
  }
  return FL_OK;
}

static void ungroup(groups *g) {
  free(g->order);
  free(g->keys);
  free(g->rows);
}

/* Push g (non-NULL), or pull or read into out, the keys of stripe s. */
static fl_status stripe_call(ps_table *pt, unsigned s, const uint64_t *keys, size_t n,
                             float *out, const float *g, int read_only) {
  fl_status st;
  if (!n) return FL_OK;
  pthread_mutex_lock(&pt->smu[s]);
  if (g) st = fl_ps_table_push(pt->sh[s], keys, n, g);
  else if (read_only) st = fl_ps_table_read(pt->sh[s], keys, n, out);
  else st = fl_ps_table_pull(pt->sh[s], keys, n, out);
  pthread_mutex_unlock(&pt->smu[s]);
  return st;
}

fl_status psc_stripes_pull(ps_table *pt, const uint64_t *keys, size_t n, float *out,
                           int read_only) {
  size_t dim = fl_ps_table_dim(pt->t);
  groups g;
  fl_status st = FL_OK;
  if (pt->ns == 1) return stripe_call(pt, 0, keys, n, out, NULL, read_only);
  FL_TRY(group(pt, keys, n, dim, &g));
  for (unsigned s = 0; s < pt->ns && st == FL_OK; s++)
    st = stripe_call(pt, s, g.keys + g.start[s], g.start[s + 1] - g.start[s],
                     g.rows + g.start[s] * dim, NULL, read_only);
  for (size_t j = 0; st == FL_OK && j < n; j++)
    memcpy(out + g.order[j] * dim, g.rows + j * dim, dim * sizeof *out);
  ungroup(&g);
  return st;
}

fl_status psc_stripes_push(ps_table *pt, const uint64_t *keys, size_t n, const float *grad) {
  size_t dim = fl_ps_table_dim(pt->t);
  groups g;
  fl_status st = FL_OK;
  if (pt->ns == 1 || !n) return stripe_call(pt, 0, keys, n, NULL, grad, 0);
  FL_TRY(group(pt, keys, n, dim, &g));
  for (size_t j = 0; j < n; j++) memcpy(g.rows + j * dim, grad + g.order[j] * dim, dim * sizeof *grad);
  for (unsigned s = 0; s < pt->ns && st == FL_OK; s++) {
    if (g.start[s + 1] == g.start[s]) { /* a step of the table all the same */
      pthread_mutex_lock(&pt->smu[s]);
      fl_ps_table_tick(pt->sh[s]);
      pthread_mutex_unlock(&pt->smu[s]);
    }
    st = stripe_call(pt, s, g.keys + g.start[s], g.start[s + 1] - g.start[s],
                     NULL, g.rows + g.start[s] * dim, 0);
  }
  ungroup(&g);
  return st;
}

void psc_stripes_count(ps_table *pt, uint64_t *rows, uint64_t *evicted, uint64_t *hot,
                       uint64_t *disk, uint64_t *padding) {
  for (unsigned s = 0; s < pt->ns; s++) {
    pthread_mutex_lock(&pt->smu[s]);
    *rows += fl_ps_table_rows(pt->sh[s]);
    *evicted += fl_ps_table_evicted(pt->sh[s]);
    *hot += fl_ps_table_hot_bytes(pt->sh[s]);
    *disk += fl_ps_table_disk_rows(pt->sh[s]);
    *padding += fl_ps_table_padding_dropped(pt->sh[s]);
    pthread_mutex_unlock(&pt->smu[s]);
  }
}

fl_status psc_stripes_init(ps_table *pt, const uint64_t *keys, size_t n, const float *rows,
                           size_t *created) {
  const size_t dim = fl_ps_table_dim(pt->t);
  groups g;
  fl_status st = FL_OK;
  *created = 0;
  if (pt->ns == 1) {
    pthread_mutex_lock(&pt->smu[0]);
    st = fl_ps_table_init(pt->sh[0], keys, n, rows, created);
    pthread_mutex_unlock(&pt->smu[0]);
    return st;
  }
  FL_TRY(group(pt, keys, n, dim, &g));
  for (size_t j = 0; j < n; j++) memcpy(g.rows + j * dim, rows + g.order[j] * dim, dim * sizeof *rows);
  for (unsigned s = 0; s < pt->ns && st == FL_OK; s++) {
    size_t made = 0, k = g.start[s + 1] - g.start[s];
    if (!k) continue;
    pthread_mutex_lock(&pt->smu[s]);
    st = fl_ps_table_init(pt->sh[s], g.keys + g.start[s], k, g.rows + g.start[s] * dim, &made);
    pthread_mutex_unlock(&pt->smu[s]);
    *created += made;
  }
  ungroup(&g);
  return st;
}

/* One stripe's page: at most max rows above (has_after, after). */
static fl_status stripe_dump(ps_table *pt, unsigned s, int has_after, uint64_t after, size_t max,
                             uint64_t *keys, float *vals, size_t *n, int *more) {
  pthread_mutex_lock(&pt->smu[s]);
  fl_status st = fl_ps_table_dump(pt->sh[s], has_after, after, max, keys, vals, n, more);
  pthread_mutex_unlock(&pt->smu[s]);
  return st;
}

/* One stripe's share of a merged page: a chunk of its rows (ascending)
 * and where the merge is in it; more: the stripe has rows above the
 * chunk's last key (its cursor); done: it has none left. */
typedef struct cursor {
  uint64_t *keys;
  float *vals;
  size_t got, at;
  int more, done;
} cursor;

/* The head of stripe s's rows in cu, its next chunk fetched (rows above
 * the last one taken, or the page's start) when the chunk is used up;
 * 0 when the stripe has none left. */
static fl_status head_of(ps_table *pt, unsigned s, cursor *cu, int has_after, uint64_t after,
                         size_t chunk, int *has) {
  *has = cu->at < cu->got;
  if (*has || cu->done) return FL_OK;
  if (cu->got) has_after = 1, after = cu->keys[cu->got - 1];
  if (cu->got && !cu->more) {
    cu->done = 1;
    return FL_OK;
  }
  FL_TRY(stripe_dump(pt, s, has_after, after, chunk, cu->keys, cu->vals, &cu->got, &cu->more));
  cu->at = 0;
  cu->done = !cu->got;
  *has = cu->got > 0;
  return FL_OK;
}

/* Merge the stripes' rows into the page: the smallest head each time.
 * Keys hash evenly over the stripes, so each stripe's chunk (a share of
 * the page and a margin) is seldom fetched twice: a page costs about one
 * page of rows copied, not one per stripe. */
static fl_status merge(ps_table *pt, cursor *cu, int has_after, uint64_t after, size_t chunk,
                       size_t max, uint64_t *keys, float *vals, size_t *n, int *more) {
  const size_t dim = fl_ps_table_dim(pt->t);
  *n = 0;
  *more = 0;
  while (*n < max) {
    int best = -1, has;
    for (unsigned s = 0; s < pt->ns; s++) {
      FL_TRY(head_of(pt, s, &cu[s], has_after, after, chunk, &has));
      if (has && (best < 0 || cu[s].keys[cu[s].at] < cu[best].keys[cu[best].at])) best = (int)s;
    }
    if (best < 0) return FL_OK;
    keys[*n] = cu[best].keys[cu[best].at];
    memcpy(vals + *n * dim, cu[best].vals + cu[best].at * dim, dim * sizeof *vals);
    cu[best].at++;
    (*n)++;
  }
  for (unsigned s = 0; s < pt->ns; s++) *more |= cu[s].at < cu[s].got || cu[s].more;
  return FL_OK;
}

fl_status psc_stripes_dump(ps_table *pt, int has_after, uint64_t after, size_t max,
                           uint64_t *keys, float *vals, size_t *n, int *more) {
  const size_t dim = fl_ps_table_dim(pt->t);
  cursor cu[MAX_STRIPES];
  size_t chunk = max / pt->ns + max / (4 * pt->ns) + 8;
  fl_status st;
  if (pt->ns == 1) return stripe_dump(pt, 0, has_after, after, max, keys, vals, n, more);
  if (chunk > max) chunk = max;
  uint64_t *sk = malloc((size_t)pt->ns * chunk * sizeof *sk);
  float *sv = malloc((size_t)pt->ns * chunk * dim * sizeof *sv);
  st = sk && sv ? FL_OK
                : FL_ERR(FL_ENOMEM, "sparse table %s: out of memory listing rows",
                         fl_ps_table_name(pt->t));
  memset(cu, 0, sizeof cu);
  for (unsigned s = 0; sk && sv && s < pt->ns; s++) {
    cu[s].keys = sk + s * chunk;
    cu[s].vals = sv + s * chunk * dim;
  }
  if (st == FL_OK) st = merge(pt, cu, has_after, after, chunk, max, keys, vals, n, more);
  free(sk);
  free(sv);
  return st;
}

size_t psc_stripes_rows(ps_table *pt) {
  uint64_t rows = 0, evicted = 0, hot = 0, disk = 0, padding = 0;
  psc_stripes_count(pt, &rows, &evicted, &hot, &disk, &padding);
  return (size_t)(rows + disk);
}

static void lock_all(fl_ps_core *c, size_t nt, int lock) {
  for (size_t i = 0; i < nt; i++)
    for (unsigned s = 0; s < c->tables[i].ns; s++) {
      if (lock) pthread_mutex_lock(&c->tables[i].smu[s]);
      else pthread_mutex_unlock(&c->tables[i].smu[s]);
    }
}

/* pt's rows into w under prefix (pt->mu and its stripes' locks held): a
 * delta or whole; marked saved when k->mark. */
static fl_status save_table(ps_table *pt, fl_ckpt_writer *w, const char *prefix,
                            const psc_ckpt_kind *k) {
  const fl_ps_table *const *ts = (const fl_ps_table *const *)pt->sh;
  fl_status st = k->delta ? fl_ps_table_save_delta_many(ts, pt->ns, w, prefix)
                          : fl_ps_table_save_many(ts, pt->ns, w, prefix);
  for (unsigned s = 0; st == FL_OK && k->mark && s < pt->ns; s++)
    fl_ps_table_mark_saved(pt->sh[s]);
  return st;
}

fl_status psc_save_tables(fl_ps_core *c, fl_ckpt_writer *w, const psc_ckpt_kind *k) {
  size_t nt = atomic_load(&c->n_tables);
  char name[FL_CKPT_NAME_MAX];
  fl_status st = FL_OK;
  /* the tables' locks first, as a sync step's apply takes them (then its
   * stripes'): each table's rows and its step saved as one */
  for (size_t i = 0; i < nt; i++) pthread_mutex_lock(&c->tables[i].mu);
  lock_all(c, nt, 1);
  if (c->tier) st = psc_tier_snapshot(c, k->delta, k->mark);
  for (size_t i = 0; i < nt && st == FL_OK; i++) {
    ps_table *pt = &c->tables[i];
    char prefix[256];
    snprintf(prefix, sizeof prefix, "sparse/%s/", fl_ps_table_name(pt->t));
    snprintf(name, sizeof name, "%sdim", prefix);
    if ((st = fl_ckpt_put_i64(w, name, fl_ps_table_dim(pt->t))) == FL_OK)
      st = save_table(pt, w, prefix, k);
    /* the table's sync step: after a restart a push its rows hold is a duplicate */
    snprintf(name, sizeof name, "%sstep", prefix);
    if (st == FL_OK) st = fl_ckpt_put_i64(w, name, pt->step);
  }
  lock_all(c, nt, 0);
  for (size_t i = 0; i < nt; i++) pthread_mutex_unlock(&c->tables[i].mu);
  return st;
}

fl_status psc_stripes_load(ps_table *pt, const fl_ckpt *ck, const char *prefix) {
  fl_status st;
  for (unsigned s = 0; s < pt->ns; s++) pthread_mutex_lock(&pt->smu[s]);
  st = fl_ps_table_load_many(pt->sh, pt->ns, ck, prefix);
  for (unsigned s = 0; s < pt->ns; s++) pthread_mutex_unlock(&pt->smu[s]);
  return st;
}

fl_status psc_stripes_apply_delta(ps_table *pt, const fl_ckpt *ck, const char *prefix) {
  fl_status st;
  pthread_mutex_lock(&pt->mu);
  for (unsigned s = 0; s < pt->ns; s++) pthread_mutex_lock(&pt->smu[s]);
  st = fl_ps_table_apply_delta_many(pt->sh, pt->ns, ck, prefix);
  for (unsigned s = 0; s < pt->ns; s++) pthread_mutex_unlock(&pt->smu[s]);
  pthread_mutex_unlock(&pt->mu);
  return st;
}

void psc_stripes_expire(ps_table *pt, double now) {
  for (unsigned s = 0; s < pt->ns; s++) {
    pthread_mutex_lock(&pt->smu[s]);
    fl_ps_table_expire(pt->sh[s], now);
    pthread_mutex_unlock(&pt->smu[s]);
  }
}

void psc_stripes_sweep(ps_table *pt, int expire, double now, fl_ps_table_counts *n,
                       size_t *rows) {
  memset(n, 0, sizeof *n);
  *rows = 0;
  pthread_mutex_lock(&pt->mu);
  for (unsigned s = 0; s < pt->ns; s++) {
    fl_ps_table_counts one;
    pthread_mutex_lock(&pt->smu[s]);
    if (expire) fl_ps_table_expire(pt->sh[s], now);
    fl_ps_table_counts_of(pt->sh[s], &one);
    *rows += fl_ps_table_rows(pt->sh[s]);
    pthread_mutex_unlock(&pt->smu[s]);
    n->admitted += one.admitted;
    n->refused += one.refused;
    n->expired += one.expired;
    n->evicted += one.evicted;
  }
  pthread_mutex_unlock(&pt->mu);
}

int psc_stripes_delta_ok(ps_table *pt) {
  int ok = 1;
  pthread_mutex_lock(&pt->mu);
  for (unsigned s = 0; s < pt->ns; s++) {
    pthread_mutex_lock(&pt->smu[s]);
    ok &= fl_ps_table_delta_ok(pt->sh[s]);
    pthread_mutex_unlock(&pt->smu[s]);
  }
  pthread_mutex_unlock(&pt->mu);
  return ok;
}
