/* ps_rows_digest.c - what a pserver checkpoint holds, as digests that do
 * not depend on where the rows were kept: per sparse table its rows (id,
 * update count, value, optimizer state) from the file and, when there is
 * one, from the disk tier's copy beside it (<file>.tier, read with
 * RocksDB), sorted by id; and the dense records.  Two runs with and
 * without pserver.memory_budget print the same lines when they hold the
 * same bits (test_tier.sh).  A row in both tiers (possible after a full
 * disk: a promotion whose removal from the store failed) counts once, the
 * copy a load keeps (fl_ps_tier_disk_newer, the pserver's own rule, on
 * the update counts and last-seen marks of both copies); one whose disk
 * copy has no marks (a store of a build before them) is refused.
 *   ps_rows_digest CKPT_FILE */
#include <config.h>

#include <inttypes.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_ckpt.h"
#include "fl_ps_layout.h"
#include "tier_rocks.h"

#define MAX_ROWS (1u << 22)
#define STRIPES 16

/* A row of either tier: its blob ([update count][values][state]), its
 * last-seen marks when it has them, and where it came from. */
typedef struct row {
  uint64_t key;
  unsigned char *blob;
  int64_t step;
  double time;
  int marks, disk;
} row;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

/* The disk tier's id of a table's stripe (as pserver/sparse.c makes it). */
static uint64_t tier_id(const char *name, unsigned stripe) {
  return fl_ps_mix64(fnv(1469598103934665603ULL, name, strlen(name)) + stripe);
}

static int by_key(const void *a, const void *b) {
  uint64_t x = ((const row *)a)->key, y = ((const row *)b)->key;
  return x < y ? -1 : x > y;
}

static uint64_t get_be64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return v;
}

/* Rows of table name in the tier copy db, blob bytes each, appended. */
static void tier_rows(rocksdb_t *db, const char *name, size_t blob, row *rows, size_t *n) {
  rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
  rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
  uint64_t ids[STRIPES];
  for (unsigned s = 0; s < STRIPES; s++) ids[s] = tier_id(name, s);
  for (rocksdb_iter_seek(it, "r", 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
    size_t kl, vl;
    const unsigned char *k = (const unsigned char *)rocksdb_iter_key(it, &kl);
    const unsigned char *v = (const unsigned char *)rocksdb_iter_value(it, &vl);
    int mine = 0;
    if (kl != 17 || k[0] != 'r') break;
    for (unsigned s = 0; s < STRIPES; s++) mine |= get_be64(k + 1) == ids[s];
    /* [sequence][blob][24 bytes of last-seen marks, layout 1; none before] */
    if (!mine || (vl != 8 + blob && vl != 8 + blob + 24) || *n == MAX_ROWS) continue;
    rows[*n] = (row){.key = get_be64(k + 9), .blob = malloc(blob), .disk = 1};
    memcpy(rows[*n].blob, v + 8, blob);
    if (vl == 8 + blob + FL_PS_TIER_MARKS_LEN)
      rows[*n].marks = fl_ps_tier_marks(v + 8 + blob, &rows[*n].step, &rows[*n].time);
    (*n)++;
  }
  rocksdb_iter_destroy(it);
  rocksdb_readoptions_destroy(ro);
}

static const fl_ckpt_record *rec(const fl_ckpt *ck, const char *t, const char *s,
                                 fl_ckpt_record *r) {
  char name[FL_CKPT_NAME_MAX];
  snprintf(name, sizeof name, "sparse/%s/%s", t, s);
  return fl_ckpt_find(ck, name, r) == FL_OK ? r : NULL;
}

/* Of two copies x and y of one row (x before y by key), the one a load
 * keeps into *keep; 1 (said) when that cannot be told. */
static int newer(const char *t, const row *x, const row *y, const row **keep) {
  const row *d = x->disk ? x : y, *m = x->disk ? y : x;
  int64_t du, mu;
  if (x->disk == y->disk || !d->marks || !m->marks) {
    fprintf(stderr, "table %s: row %" PRIu64 " twice %s\n", t, x->key,
            x->disk == y->disk ? "in one tier" : "in both tiers, a copy without last-seen marks");
    return 1;
  }
  memcpy(&du, d->blob, sizeof du);
  memcpy(&mu, m->blob, sizeof mu);
  *keep = fl_ps_tier_disk_newer(du, d->step, d->time, mu, m->step, m->time) ? d : m;
  return 0;
}

/* One table: its rows from the file, then the tier's; sorted; printed. */
static int table(const fl_ckpt *ck, rocksdb_t *db, const char *t, row *rows) {
  fl_ckpt_record rk, rs, rv, r1, r2, rss, rst;
  const fl_ckpt_record *a, *b, *ss, *st;
  size_t n = 0, nf, d, sl = 0, blob, both = 0;
  uint64_t h = 1469598103934665603ULL;
  int bad = 0;
  if (!rec(ck, t, "keys", &rk) || !rec(ck, t, "steps", &rs) || !rec(ck, t, "values", &rv))
    return 1;
  a = rec(ck, t, "state1", &r1);
  b = rec(ck, t, "state2", &r2);
  ss = rec(ck, t, "seen_step", &rss);
  st = rec(ck, t, "seen_time", &rst);
  nf = (size_t)rk.shape[0];
  d = (size_t)rv.shape[1];
  if (a) sl = (size_t)a->shape[1];
  blob = 8 + (d + (a ? sl : 0) + (b ? sl : 0)) * 4;
  for (size_t i = 0; i < nf && n < MAX_ROWS; i++, n++) {
    unsigned char *p = malloc(blob);
    rows[n] = (row){.key = ((const uint64_t *)rk.data)[i], .blob = p, .marks = ss && st};
    if (ss && st) {
      rows[n].step = ((const int64_t *)ss->data)[i];
      rows[n].time = ((const double *)st->data)[i];
    }
    memcpy(p, (const int64_t *)rs.data + i, 8);
    memcpy(p + 8, (const float *)rv.data + i * d, d * 4);
    if (a) memcpy(p + 8 + d * 4, (const float *)a->data + i * sl, sl * 4);
    if (b) memcpy(p + 8 + (d + sl) * 4, (const float *)b->data + i * sl, sl * 4);
  }
  if (db) tier_rows(db, t, blob, rows, &n);
  qsort(rows, n, sizeof *rows, by_key);
  for (size_t i = 0; i < n && !bad; i++) {
    const row *keep = &rows[i];
    if (i + 1 < n && rows[i + 1].key == rows[i].key) {
      bad = newer(t, &rows[i], &rows[i + 1], &keep);
      both++;
      i++;
    }
    h = fnv(fnv(h, &keep->key, 8), keep->blob, blob);
  }
  for (size_t i = 0; i < n; i++) free(rows[i].blob);
  if (bad) return 1;
  if (db && both)
    printf("tier %s: %zu of its rows on disk, %zu of them also in the file (the newer copy "
           "kept)\n", t, n - nf, both);
  else if (db)
    printf("tier %s: %zu of its rows on disk\n", t, n - nf);
  printf("sparse %s: %zu rows, digest %016" PRIx64 "\n", t, n - both, h);
  return 0;
}

int main(int argc, char **argv) {
  fl_ckpt *ck = NULL;
  rocksdb_t *db = NULL;
  rocksdb_options_t *opt = rocksdb_options_create();
  char tier[4200], *err = NULL;
  uint64_t h = 1469598103934665603ULL;
  size_t nd = 0;
  int bad = 0;
  row *rows = malloc(MAX_ROWS * sizeof *rows);
  if (argc != 2 || !rows || fl_ckpt_load(argv[1], &ck) != FL_OK) {
    fprintf(stderr, "usage: ps_rows_digest CKPT_FILE\n");
    free(rows);
    rocksdb_options_destroy(opt);
    return 2;
  }
  snprintf(tier, sizeof tier, "%s.tier", argv[1]);
  db = rocksdb_open_for_read_only(opt, tier, 0, &err);
  if (err) { /* no tier copy: all rows are in the file */
    rocksdb_free(err);
    db = NULL;
  }
  for (size_t i = 0; i < fl_ckpt_count(ck); i++) {
    fl_ckpt_record r;
    size_t len;
    fl_ckpt_record_at(ck, i, &r);
    len = strlen(r.name);
    if (!strncmp(r.name, "dense/", 6) && r.dtype == FL_CKPT_F32) {
      h = fnv(fnv(h, r.name, len), r.data, r.nbytes);
      nd++;
    } else if (!strncmp(r.name, "sparse/", 7) && len > 11 && !strcmp(r.name + len - 4, "/dim")) {
      char t[256];
      snprintf(t, sizeof t, "%.*s", (int)(len - 11), r.name + 7);
      bad |= table(ck, db, t, rows);
    }
  }
  printf("dense: %zu records, digest %016" PRIx64 "\n", nd, h);
  if (db) rocksdb_close(db);
  rocksdb_options_destroy(opt);
  fl_ckpt_free(ck);
  free(rows);
  return bad;
}
