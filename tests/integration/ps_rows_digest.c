/* ps_rows_digest.c - what a pserver checkpoint holds, as digests that do
 * not depend on where the rows were kept: per sparse table its rows (id,
 * update count, value, optimizer state) from the file and, when there is
 * one, from the disk tier's copy beside it (<file>.tier, read with
 * RocksDB), sorted by id; and the dense records.  Two runs with and
 * without pserver.memory_budget print the same lines when they hold the
 * same bits (test_tier.sh).
 *   ps_rows_digest CKPT_FILE */
#include <config.h>

#include <inttypes.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_ckpt.h"
#include "fl_ps_layout.h"

#define MAX_ROWS (1u << 22)
#define STRIPES 16

typedef struct row {
  uint64_t key;
  unsigned char *blob;
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
    rows[*n].key = get_be64(k + 9);
    rows[*n].blob = malloc(blob);
    memcpy(rows[*n].blob, v + 8, blob);
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

/* One table: its rows from the file, then the tier's; sorted; printed. */
static int table(const fl_ckpt *ck, rocksdb_t *db, const char *t, row *rows) {
  fl_ckpt_record rk, rs, rv, r1, r2;
  const fl_ckpt_record *a, *b;
  size_t n = 0, nf, d, sl = 0, blob;
  uint64_t h = 1469598103934665603ULL;
  if (!rec(ck, t, "keys", &rk) || !rec(ck, t, "steps", &rs) || !rec(ck, t, "values", &rv))
    return 1;
  a = rec(ck, t, "state1", &r1);
  b = rec(ck, t, "state2", &r2);
  nf = (size_t)rk.shape[0];
  d = (size_t)rv.shape[1];
  if (a) sl = (size_t)a->shape[1];
  blob = 8 + (d + (a ? sl : 0) + (b ? sl : 0)) * 4;
  for (size_t i = 0; i < nf && n < MAX_ROWS; i++, n++) {
    unsigned char *p = rows[n].blob = malloc(blob);
    rows[n].key = ((const uint64_t *)rk.data)[i];
    memcpy(p, (const int64_t *)rs.data + i, 8);
    memcpy(p + 8, (const float *)rv.data + i * d, d * 4);
    if (a) memcpy(p + 8 + d * 4, (const float *)a->data + i * sl, sl * 4);
    if (b) memcpy(p + 8 + (d + sl) * 4, (const float *)b->data + i * sl, sl * 4);
  }
  if (db) tier_rows(db, t, blob, rows, &n);
  if (db) printf("tier %s: %zu of its rows on disk\n", t, n - nf);
  qsort(rows, n, sizeof *rows, by_key);
  for (size_t i = 0; i < n; i++) {
    if (i && rows[i].key == rows[i - 1].key) {
      fprintf(stderr, "table %s: row %" PRIu64 " in both tiers\n", t, rows[i].key);
      return 1;
    }
    h = fnv(fnv(h, &rows[i].key, 8), rows[i].blob, blob);
  }
  for (size_t i = 0; i < n; i++) free(rows[i].blob);
  printf("sparse %s: %zu rows, digest %016" PRIx64 "\n", t, n, h);
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
