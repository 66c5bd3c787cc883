/* serving_export.c - pserver.serving_export: after each checkpoint the
 * pserver writes its sparse tables again for a serving system, read back
 * from the checkpoint file just committed (so the export holds exactly the
 * checkpoint's state, taken under its locks), in the layout of the
 * trainer's export (trainer/loop_sparse.c: ids int64 [n] ascending, rows
 * float32 [n, dim]): per table <table>.base-<N>.{ids,rows}.npy at a base
 * of step N, <table>.delta-<N>-<K>.{ids,rows,deleted}.npy at its delta K
 * (the rows seen or changed, the ids deleted: deletions apply first), and
 * then manifest.json naming the base and the deltas that follow it.  A
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
#include "ps_serving.h"

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

/* The ids (and rows, when vals) of record keys into <stem>.<what>.npy. */
static fl_status put_ids(const char *stem, const char *what, const fl_ckpt_record *keys,
                         const fl_ckpt_record *vals, size_t dim) {
  size_t n = (size_t)keys->shape[0];
  int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
  float *rows = vals ? malloc((n ? n : 1) * dim * sizeof *rows) : NULL;
  char path[4200];
  fl_status st = ids && (!vals || rows) ? FL_OK
                                        : FL_ERR(FL_ENOMEM, "serving export: out of memory for "
                                                 "%zu rows of %s", n, stem);
  if (st == FL_OK) st = sorted(keys->data, vals ? vals->data : NULL, n, dim, ids, rows);
  snprintf(path, sizeof path, "%s.%s.npy", stem, what);
  if (st == FL_OK) st = write_npy(path, "<i8", sizeof *ids, (int64_t)n, 0, ids);
  snprintf(path, sizeof path, "%s.rows.npy", stem);
  if (st == FL_OK && vals) st = write_npy(path, "<f4", sizeof *rows, (int64_t)n, (int64_t)dim, rows);
  free(ids);
  free(rows);
  return st;
}

/* The table name of a "sparse/<name>/dim" record into out, or 0. */
static int table_of(const fl_ckpt_record *r, char *out, size_t cap) {
  size_t len = strlen(r->name);
  if (strncmp(r->name, "sparse/", 7) != 0 || len < 12 || strcmp(r->name + len - 4, "/dim") != 0 ||
      len - 11 >= cap || memchr(r->name + 7, '/', len - 11))
    return 0;
  memcpy(out, r->name + 7, len - 11);
  out[len - 11] = '\0';
  return 1;
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
static fl_status put_table(const fl_ckpt *ck, const char *dir, const char *tname, int64_t dim,
                           int64_t base, int64_t seq, FILE *json, int first) {
  char stem[4200], name[FL_CKPT_NAME_MAX + 16];
  fl_ckpt_record keys, vals, del;
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
  FL_TRY(put_ids(stem, "ids", &keys, &vals, (size_t)dim));
  if (seq) FL_TRY(put_ids(stem, "deleted", &del, NULL, 0));
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

/* Every table of ck; the manifest last. */
static fl_status put_all(const fl_ckpt *ck, const char *dir, int64_t base, int64_t seq,
                         int64_t step) {
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
    if (fl_ckpt_record_at(ck, i, &r) != FL_OK || !table_of(&r, tname, sizeof tname) ||
        r.dtype != FL_CKPT_I64 || r.ndim != 0)
      continue;
    st = put_table(ck, dir, tname, *(const int64_t *)r.data, base, seq, f, n++ == 0);
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

fl_status fl_ps_serving_export(const char *dir, const char *ckpt, int64_t base, int64_t seq,
                               int64_t step) {
  fl_ckpt *ck = NULL;
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
  st = put_all(ck, dir, base, seq, step);
  fl_ckpt_free(ck);
  if (st == FL_OK && seq)
    FL_LOGI("serving export of step %" PRId64 " (delta %" PRId64 " of base %" PRId64
            ") written to %s", step, seq, base, dir);
  else if (st == FL_OK)
    FL_LOGI("serving export of step %" PRId64 " (a base) written to %s", step, dir);
  return st;
}
