/* serving_export.c - pserver.serving_export: after each checkpoint the
 * pserver writes its sparse tables again for a serving system, read back
 * from the checkpoint file just committed (so the export holds exactly the
 * checkpoint's state, taken under its locks), in the layout of the
 * trainer's export (trainer/loop_sparse.c: ids int64 [n] ascending, rows
 * float32 [n, dim]): per table <table>.base-<N>.{ids,rows}.npy at a base
 * of step N, <table>.delta-<N>-<K>.{ids,rows,deleted}.npy at its delta K
 * (the rows seen or changed, the ids deleted: deletions apply first), and
 * then manifest.json naming the base and the deltas that follow it.  With
 * the disk tier the rows on disk come from the store's copy beside the
 * checkpoint: at a base all of them, at a delta those seen or changed
 * since the checkpoint before and demoted since (record "moved").  A
 * serving system reads the manifest, loads the base and applies the
 * deltas in order (deploy/examples/recsys/apply_serving_deltas.py). */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_ckpt.h"
#include "fl_log.h"
#include "fl_ps.h"
#include "ps_serving.h"
#include "tier_rocks.h"

/* Write n bytes of buf to fd (all of them). */
static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* path written whole or not at all: head then body into path.tmp, synced,
 * renamed over path. */
static fl_status write_atomic(const char *path, const void *head, size_t hlen, const void *body,
                              size_t blen) {
  char tmp[4200];
  int fd, bad;
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return FL_ERR(FL_EIO, "serving export: cannot create %s: %s (check pserver.serving_export)",
                  tmp, strerror(errno));
  bad = write_all(fd, head, hlen) || (blen && write_all(fd, body, blen)) || fsync(fd);
  bad |= close(fd) != 0;
  if (bad || rename(tmp, path) != 0) {
    fl_status st = FL_ERR(FL_EIO, "serving export: writing %s failed: %s (disk full?)", path,
                          strerror(errno));
    unlink(tmp);
    return st;
  }
  return FL_OK;
}

/* An .npy file (format 1.0) of n (x cols when cols) values of descr. */
static fl_status write_npy(const char *path, const char *descr, size_t elem, int64_t n,
                           int64_t cols, const void *data) {
  char head[256], shape[64];
  size_t len;
  uint16_t hl;
  if (cols) snprintf(shape, sizeof shape, "(%" PRId64 ", %" PRId64 ")", n, cols);
  else snprintf(shape, sizeof shape, "(%" PRId64 ",)", n);
  len = (size_t)snprintf(head + 10, sizeof head - 10,
                         "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  while ((10 + len + 1) % 64) head[10 + len++] = ' '; /* the data 64-byte aligned */
  head[10 + len++] = '\n';
  memcpy(head, "\x93NUMPY\x01\x00", 8);
  hl = (uint16_t)len;
  head[8] = (char)(hl & 0xff);
  head[9] = (char)(hl >> 8);
  return write_atomic(path, head, 10 + len, data, (size_t)n * (cols ? (size_t)cols : 1) * elem);
}

typedef struct key_at {
  uint64_t key;
  size_t at;
} key_at;

static int cmp_key_at(const void *a, const void *b) {
  uint64_t x = ((const key_at *)a)->key, y = ((const key_at *)b)->key;
  return x < y ? -1 : x > y;
}

/* Keys k ([n]) ascending as int64 into ids, and (vals: [n, dim]) their rows
 * into rows in the same order. */
static fl_status sorted(const uint64_t *k, const float *vals, size_t n, size_t dim, int64_t *ids,
                        float *rows) {
  key_at *o = malloc((n ? n : 1) * sizeof *o);
  if (!o) return FL_ERR(FL_ENOMEM, "serving export: out of memory sorting %zu ids", n);
  for (size_t i = 0; i < n; i++) o[i] = (key_at){k[i], i};
  qsort(o, n, sizeof *o, cmp_key_at);
  for (size_t i = 0; i < n; i++) {
    ids[i] = (int64_t)o[i].key; /* ids < 2^63: as the trainer's export */
    if (rows) memcpy(rows + i * dim, vals + o[i].at * dim, dim * sizeof *rows);
  }
  free(o);
  return FL_OK;
}

/* The n ids keys into <stem>.<what>.npy, and when dim their rows vals
 * ([n, dim]) into <stem>.rows.npy. */
static fl_status put_ids(const char *stem, const char *what, const uint64_t *keys, size_t n,
                         const float *vals, size_t dim) {
  int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
  float *rows = dim ? malloc((n ? n : 1) * dim * sizeof *rows) : NULL;
  char path[4200];
  fl_status st = ids && (!dim || rows) ? FL_OK
                                        : FL_ERR(FL_ENOMEM, "serving export: out of memory for "
                                                 "%zu rows of %s", n, stem);
  if (st == FL_OK) st = sorted(keys, rows ? vals : NULL, n, dim, ids, rows);
  snprintf(path, sizeof path, "%s.%s.npy", stem, what);
  if (st == FL_OK) st = write_npy(path, "<i8", sizeof *ids, (int64_t)n, 0, ids);
  snprintf(path, sizeof path, "%s.rows.npy", stem);
  if (st == FL_OK && dim) st = write_npy(path, "<f4", sizeof *rows, (int64_t)n, (int64_t)dim, rows);
  free(ids);
  free(rows);
  return st;
}

/* A table's rows to export with the disk tier: the checkpoint file's
 * (their keys sorted into mem: a row there shadows its disk copy) and
 * those read from the store's copy, gathered into k / v. */
typedef struct gathered {
  const fl_ckpt *ck;
  const char *tname;
  size_t dim, n, cap;
  uint64_t *k, *mem;
  size_t nmem;
  float *v;
} gathered;

/* Append row (dim floats) of key to g. */
static fl_status gather_add(gathered *g, uint64_t key, const float *row) {
  if (g->n == g->cap) {
    size_t nc = g->cap ? 2 * g->cap : 1024;
    uint64_t *k = realloc(g->k, nc * sizeof *k);
    float *v = k ? realloc(g->v, nc * g->dim * sizeof *v) : NULL;
    if (k) g->k = k;
    if (v) g->v = v;
    if (!k || !v)
      return FL_ERR(FL_ENOMEM, "serving export: out of memory for %zu rows of table %s", nc,
                    g->tname);
    g->cap = nc;
  }
  g->k[g->n] = key;
  memcpy(g->v + g->n * g->dim, row, g->dim * sizeof *g->v);
  g->n++;
  return FL_OK;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* fl_ps_tier_row_fn: a disk row (blob: [i64 updates][dim floats]...) not
 * shadowed by a row of the file, taken once. */
static fl_status take_disk_row(void *ctx, uint64_t key, const void *row, size_t len) {
  gathered *g = ctx;
  if (len < sizeof(int64_t) + g->dim * sizeof(float))
    return FL_ERR(FL_ECORRUPT, "serving export: table %s: a row on disk of %zu bytes, too short "
                  "for dim %zu: is the store copy of this checkpoint?", g->tname, len, g->dim);
  if (g->nmem && bsearch(&key, g->mem, g->nmem, sizeof key, cmp_u64)) return FL_OK;
  return gather_add(g, key, (const float *)((const char *)row + sizeof(int64_t)));
}

/* A u64 1-d record sparse/<tname>/<what> of ck (*n elements), or NULL. */
static const uint64_t *u64_rec(const fl_ckpt *ck, const char *tname, const char *what,
                               size_t *n) {
  char name[FL_CKPT_NAME_MAX + 16];
  fl_ckpt_record r;
  snprintf(name, sizeof name, "sparse/%s/%s", tname, what);
  if (fl_ckpt_find(ck, name, &r) != FL_OK || r.dtype != FL_CKPT_U64 || r.ndim != 1) return NULL;
  *n = (size_t)r.shape[0];
  return r.data;
}

/* Into g the rows on disk to export: a base's every row of the table's
 * stripes, a delta's rows seen or changed and then demoted ("moved", each
 * looked up in its stripe, fl_ps_table_stripe, where still there). */
static fl_status gather_disk(gathered *g, fl_ps_tier *tier, int delta) {
  size_t ns = 0, nm = 0;
  const uint64_t *ids = u64_rec(g->ck, g->tname, "tier_ids", &ns);
  const uint64_t *moved = delta ? u64_rec(g->ck, g->tname, "moved", &nm) : NULL;
  uint64_t *keys = NULL;
  fl_status st = FL_OK;
  if (!ids || ns == 0 || (ns & (ns - 1)) || (delta && !moved))
    return FL_ERR(FL_ECORRUPT, "serving export: table %s: records tier_ids%s missing in a "
                  "checkpoint with the disk tier", g->tname, delta ? " or moved" : "");
  for (size_t s = 0; !delta && st == FL_OK && s < ns; s++)
    st = fl_ps_tier_copy_rows(tier, ids[s], NULL, 0, take_disk_row, g);
  if (!delta) return st;
  /* a key demoted twice in the interval is listed twice: taken once */
  if (!(keys = malloc((nm ? nm : 1) * sizeof *keys)))
    return FL_ERR(FL_ENOMEM, "serving export: out of memory for table %s", g->tname);
  memcpy(keys, moved, nm * sizeof *keys);
  qsort(keys, nm, sizeof *keys, cmp_u64);
  for (size_t i = 0; st == FL_OK && i < nm; i++)
    if (i == 0 || keys[i] != keys[i - 1])
      st = fl_ps_tier_copy_rows(tier, ids[fl_ps_table_stripe(keys[i], (unsigned)ns)], keys + i, 1,
                                take_disk_row, g);
  free(keys);
  return st;
}

/* The rows of keys / vals (the file's) and, with the disk tier, those of
 * its copy (gather_disk) into <stem>.ids.npy / .rows.npy. */
static fl_status put_rows(gathered *g, fl_ps_tier *tier, int delta, const char *stem,
                          const fl_ckpt_record *keys, const fl_ckpt_record *vals) {
  size_t n = (size_t)keys->shape[0];
  fl_status st = FL_OK;
  if (!tier) return put_ids(stem, "ids", keys->data, n, vals->data, g->dim);
  g->mem = malloc((n ? n : 1) * sizeof *g->mem);
  if (!g->mem) return FL_ERR(FL_ENOMEM, "serving export: out of memory for table %s", g->tname);
  memcpy(g->mem, keys->data, n * sizeof *g->mem);
  qsort(g->mem, n, sizeof *g->mem, cmp_u64);
  g->nmem = n;
  for (size_t i = 0; i < n && st == FL_OK; i++)
    st = gather_add(g, ((const uint64_t *)keys->data)[i], (const float *)vals->data + i * g->dim);
  if (st == FL_OK) st = gather_disk(g, tier, delta);
  if (st == FL_OK) st = put_ids(stem, "ids", g->k, g->n, g->v, g->dim);
  free(g->mem);
  free(g->k);
  free(g->v);
  return st;
}

/* s as a JSON string (quoted, with " \\ and control bytes escaped) to f. */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* One table's files from ck; its name and dim appended to the manifest's
 * list (json; first: no comma before it). */
static fl_status put_table(const fl_ckpt *ck, fl_ps_tier *tier, const char *dir,
                           const char *tname, int64_t dim, int64_t base, int64_t seq, FILE *json,
                           int first) {
  char stem[4200], name[FL_CKPT_NAME_MAX + 16];
  fl_ckpt_record keys, vals, del;
  gathered g = {.ck = ck, .tname = tname, .dim = (size_t)dim};
  if (seq) snprintf(stem, sizeof stem, "%s/%s.delta-%" PRId64 "-%" PRId64, dir, tname, base, seq);
  else snprintf(stem, sizeof stem, "%s/%s.base-%" PRId64, dir, tname, base);
  snprintf(name, sizeof name, "sparse/%s/keys", tname);
  int ok = fl_ckpt_find(ck, name, &keys) == FL_OK && keys.dtype == FL_CKPT_U64 && keys.ndim == 1;
  snprintf(name, sizeof name, "sparse/%s/values", tname);
  ok = ok && fl_ckpt_find(ck, name, &vals) == FL_OK && vals.dtype == FL_CKPT_F32 &&
       vals.ndim == 2 && vals.shape[0] == keys.shape[0] && vals.shape[1] == dim;
  snprintf(name, sizeof name, "sparse/%s/deleted", tname);
  ok = ok && (!seq || (fl_ckpt_find(ck, name, &del) == FL_OK && del.dtype == FL_CKPT_U64 &&
                       del.ndim == 1));
  if (!ok)
    return FL_ERR(FL_ECORRUPT, "serving export: table %s has no rows%s in its checkpoint: no "
                  "export of it", tname, seq ? " or deleted ids" : "");
  FL_TRY(put_rows(&g, tier, seq != 0, stem, &keys, &vals));
  if (seq) FL_TRY(put_ids(stem, "deleted", del.data, (size_t)del.shape[0], NULL, 0));
  fprintf(json, "%s\n    {\"name\": ", first ? "" : ",");
  json_str(json, tname);
  fprintf(json, ", \"dim\": %" PRId64 "}", dim);
  return FL_OK;
}

/* Remove the files of bases other than base (once the manifest names it). */
static void prune(const char *dir, int64_t base) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return;
  while ((e = readdir(d))) {
    const char *p = strstr(e->d_name, ".base-"), *q = strstr(e->d_name, ".delta-");
    long long b;
    char path[4200];
    if (!(p && sscanf(p, ".base-%lld.", &b) == 1) && !(q && sscanf(q, ".delta-%lld-", &b) == 1))
      continue;
    if (b == base) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
}

/* Every table of ck (its disk rows in tier: NULL, none); the manifest
 * last. */
static fl_status put_all(const fl_ckpt *ck, fl_ps_tier *tier, const char *dir, int64_t base,
                         int64_t seq, int64_t step) {
  char path[4200], *man = NULL;
  size_t len = 0;
  int n = 0;
  fl_status st = FL_OK;
  FILE *f = open_memstream(&man, &len);
  if (!f) return FL_ERR(FL_ENOMEM, "serving export: no memory for the manifest of %s", dir);
  fprintf(f, "{\n  \"format\": 1,\n  \"step\": %" PRId64 ",\n  \"base\": %" PRId64
          ",\n  \"deltas\": %" PRId64 ",\n  \"tables\": [", step, base, seq);
  for (size_t i = 0; st == FL_OK && i < fl_ckpt_count(ck); i++) {
    fl_ckpt_record r;
    char tname[FL_CKPT_NAME_MAX];
    if (fl_ckpt_record_at(ck, i, &r) != FL_OK ||
        fl_ps_ckpt_table_of(r.name, tname, sizeof tname) != 1 || r.dtype != FL_CKPT_I64 ||
        r.ndim != 0)
      continue;
    st = put_table(ck, tier, dir, tname, *(const int64_t *)r.data, base, seq, f, n++ == 0);
  }
  fputs("\n  ]\n}\n", f);
  if (fclose(f) != 0 && st == FL_OK)
    st = FL_ERR(FL_ENOMEM, "serving export: no memory for the manifest of %s", dir);
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  if (st == FL_OK) st = write_atomic(path, man, len, NULL, 0);
  free(man);
  if (st == FL_OK && !seq) prune(dir, base);
  return st;
}

fl_status fl_ps_serving_export(const char *dir, const char *ckpt, const char *tier_copy,
                               int64_t base, int64_t seq, int64_t step) {
  fl_ckpt *ck = NULL;
  fl_ps_tier *tier = NULL;
  fl_status st;
  char parent[4200], *slash;
  snprintf(parent, sizeof parent, "%s", dir);
  if ((slash = strrchr(parent, '/')) && slash != parent) {
    *slash = '\0';
    mkdir(parent, 0755); /* pserver.serving_export itself; its failure shows below */
  }
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return FL_ERR(FL_EIO, "serving export: cannot create %s: %s (check "
                  "pserver.serving_export)", dir, strerror(errno));
  FL_TRY(fl_ckpt_load(ckpt, &ck));
  st = tier_copy ? fl_ps_tier_open_copy(tier_copy, &tier) : FL_OK;
  if (st == FL_OK) st = put_all(ck, tier, dir, base, seq, step);
  fl_ps_tier_close(tier);
  fl_ckpt_free(ck);
  if (st == FL_OK && seq)
    FL_LOGI("serving export of step %" PRId64 " (delta %" PRId64 " of base %" PRId64
            ") written to %s", step, seq, base, dir);
  else if (st == FL_OK)
    FL_LOGI("serving export of step %" PRId64 " (a base) written to %s", step, dir);
  return st;
}
