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
 * table's rows stream out in key order, merged from the file's rows and
 * the copy's (a row of the file shadows its older copy on disk), in
 * bounded memory: the file and one row per source, whatever the copy
 * holds.  A serving system reads the manifest, loads the base and applies
 * the deltas in order (deploy/examples/recsys/apply_serving_deltas.py). */
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
  char tmp[4300];
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

/* ------------------------------------------------------------ npy files
 * An .npy file (format 1.0) written in bounded memory: a header sized for
 * the largest row count, the values appended through a buffer, the count
 * patched into the header at the end (the same bytes long), then synced
 * and renamed over its name. */

#define NPY_HEAD_MAX 256
#define OUT_BUF (256u << 10) /* each file's write buffer */

typedef struct npy_out {
  char path[4300], tmp[4310];
  const char *descr;
  size_t elem, row; /* bytes of an element, of a row (of one id when 1-d) */
  int64_t cols;     /* 0: 1-d */
  int64_t n;        /* rows written */
  int fd;
  char *buf;
  size_t used;
} npy_out;

/* The dictionary of the header of n rows into out (cap bytes): its length. */
static size_t npy_dict(char *out, size_t cap, const npy_out *o, int64_t n) {
  int k;
  if (o->cols)
    k = snprintf(out, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRId64
                 ", %" PRId64 "), }", o->descr, n, o->cols);
  else
    k = snprintf(out, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRId64 ",), }",
                 o->descr, n);
  return k < 0 ? 0 : (size_t)k;
}

/* o's header for n rows into head (NPY_HEAD_MAX bytes), padded with
 * spaces as for the largest count so that the data starts 64-byte aligned
 * at one place whatever n is: its length. */
static size_t npy_head(char *head, const npy_out *o, int64_t n) {
  char widest[NPY_HEAD_MAX];
  size_t len = npy_dict(head + 10, NPY_HEAD_MAX - 10, o, n);
  size_t total = (10 + npy_dict(widest, sizeof widest, o, INT64_MAX) + 1 + 63) / 64 * 64;
  memset(head + 10 + len, ' ', total - 11 - len);
  head[total - 1] = '\n';
  memcpy(head, "\x93NUMPY\x01\x00", 8);
  head[8] = (char)((total - 10) & 0xff);
  head[9] = (char)((total - 10) >> 8);
  return total;
}

static fl_status out_fail(npy_out *o) {
  return FL_ERR(FL_EIO, "serving export: writing %s failed: %s (disk full? check "
                "pserver.serving_export)", o->tmp, strerror(errno));
}

/* Start path (an .npy of descr, elem bytes a value, cols a row; 0: 1-d)
 * in o: its temporary created, the header's place written.  On failure
 * nothing is left; else out_done or out_drop ends it. */
static fl_status out_open(npy_out *o, const char *path, const char *descr, size_t elem,
                          int64_t cols) {
  char head[NPY_HEAD_MAX];
  memset(o, 0, sizeof *o);
  snprintf(o->path, sizeof o->path, "%s", path);
  snprintf(o->tmp, sizeof o->tmp, "%s.tmp", path);
  o->descr = descr;
  o->elem = elem;
  o->cols = cols;
  o->row = elem * (cols ? (size_t)cols : 1);
  if (!(o->buf = malloc(OUT_BUF)))
    return FL_ERR(FL_ENOMEM, "serving export: out of memory for the buffer of %s", path);
  o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (o->fd >= 0 && write_all(o->fd, head, npy_head(head, o, 0)) == 0) return FL_OK;
  fl_status st = FL_ERR(FL_EIO, "serving export: cannot create %s: %s (check "
                        "pserver.serving_export)", o->tmp, strerror(errno));
  if (o->fd >= 0) close(o->fd);
  unlink(o->tmp);
  free(o->buf);
  o->buf = NULL;
  return st;
}

static fl_status out_flush(npy_out *o) {
  if (o->used && write_all(o->fd, o->buf, o->used) != 0) return out_fail(o);
  o->used = 0;
  return FL_OK;
}

/* Append n rows of o's layout from p. */
static fl_status out_add(npy_out *o, const void *p, size_t n) {
  const char *c = p;
  size_t bytes = n * o->row;
  o->n += (int64_t)n;
  while (bytes) {
    size_t k = OUT_BUF - o->used < bytes ? OUT_BUF - o->used : bytes;
    memcpy(o->buf + o->used, c, k);
    o->used += k;
    c += k;
    bytes -= k;
    if (o->used == OUT_BUF) FL_TRY(out_flush(o));
  }
  return FL_OK;
}

/* Abandon o: its temporary removed. */
static void out_drop(npy_out *o) {
  if (!o->buf) return;
  close(o->fd);
  unlink(o->tmp);
  free(o->buf);
  o->buf = NULL;
}

/* Finish o: the rest written, the count in the header, synced, renamed
 * over its name (whole or not at all). */
static fl_status out_done(npy_out *o) {
  char head[NPY_HEAD_MAX];
  size_t hl = npy_head(head, o, o->n);
  fl_status st = out_flush(o);
  if (st == FL_OK && (pwrite(o->fd, head, hl, 0) != (ssize_t)hl || fsync(o->fd) != 0))
    st = out_fail(o);
  if (st == FL_OK && close(o->fd) != 0) st = out_fail(o);
  else if (st != FL_OK) close(o->fd);
  if (st == FL_OK && rename(o->tmp, o->path) != 0) st = out_fail(o);
  if (st != FL_OK) unlink(o->tmp);
  free(o->buf);
  o->buf = NULL;
  return st;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The n ids of keys, ascending, into path (int64 [n]). */
static fl_status put_ids(const char *path, const uint64_t *keys, size_t n) {
  uint64_t *s = malloc((n ? n : 1) * sizeof *s);
  npy_out o;
  fl_status st;
  if (!s) return FL_ERR(FL_ENOMEM, "serving export: out of memory for %zu ids of %s", n, path);
  memcpy(s, keys, n * sizeof *s);
  qsort(s, n, sizeof *s, cmp_u64);
  st = out_open(&o, path, "<i8", sizeof(int64_t), 0); /* ids < 2^63: as the trainer's export */
  if (st == FL_OK) st = out_add(&o, s, n);
  if (st == FL_OK) st = out_done(&o);
  else out_drop(&o);
  free(s);
  return st;
}

/* ------------------------------------------------------------- the rows
 * A table's rows are merged in key order from the checkpoint file's (its
 * memory rows, indexed by key) and, with the disk tier, the store's copy:
 * at a base a cursor per stripe (each ascending), at a delta the rows
 * seen or changed and demoted since ("moved", sorted, each looked up in
 * its stripe).  A row of the file shadows a copy on disk (the newer copy
 * rule: memory holds the row's last state).  Only the file, its key index
 * and one row per source are held at a time. */

typedef struct key_at {
  uint64_t key;
  size_t at;
} key_at;

static int cmp_key_at(const void *a, const void *b) {
  uint64_t x = ((const key_at *)a)->key, y = ((const key_at *)b)->key;
  return x < y ? -1 : x > y;
}

/* A source of disk rows in key order: a cursor, or sorted keys looked up. */
typedef struct disk_src {
  fl_ps_tier_cursor *cur; /* a base's stripe; NULL: a delta's look-ups */
  int live;               /* key / row hold the next row */
  uint64_t key;
  const char *row; /* dim floats (unaligned) */
} disk_src;

typedef struct merge {
  const char *tname;
  size_t dim;
  const float *vals; /* the file's rows, by mem[i].at */
  key_at *mem;
  size_t nmem, mi;
  fl_ps_tier *tier;
  const uint64_t *ids; /* tier_ids: each stripe's table id in the store */
  size_t ns;
  disk_src *src;
  size_t nalloc, nsrc; /* sources allocated, opened */
  uint64_t *moved; /* a delta's, sorted */
  size_t nmoved, at;
  char *scratch; /* the row a look-up found */
  int found;
} merge;

/* fl_ps_tier_row_fn: a row (blob: [i64 updates][dim floats]...) checked
 * and, for a look-up, copied into m->scratch. */
static fl_status check_row(const merge *m, size_t len) {
  if (len >= sizeof(int64_t) + m->dim * sizeof(float)) return FL_OK;
  return FL_ERR(FL_ECORRUPT, "serving export: table %s: a row on disk of %zu bytes, too short "
                "for dim %zu: is the store copy of this checkpoint?", m->tname, len, m->dim);
}

static fl_status take_looked_up(void *ctx, uint64_t key, const void *row, size_t len) {
  merge *m = ctx;
  (void)key;
  FL_TRY(check_row(m, len));
  memcpy(m->scratch, (const char *)row + sizeof(int64_t), m->dim * sizeof(float));
  m->found = 1;
  return FL_OK;
}

/* s's next row (s->live 0 when none is left). */
static fl_status src_next(merge *m, disk_src *s) {
  s->live = 0;
  if (s->cur) {
    const void *row;
    size_t len;
    FL_TRY(fl_ps_tier_cursor_next(s->cur, &s->key, &row, &len, &s->live));
    if (s->live) FL_TRY(check_row(m, len));
    s->row = s->live ? (const char *)row + sizeof(int64_t) : NULL;
    return FL_OK;
  }
  while (!s->live && m->at < m->nmoved) { /* a key demoted twice is listed twice */
    uint64_t k = m->moved[m->at++];
    if (m->at > 1 && m->moved[m->at - 2] == k) continue;
    m->found = 0;
    FL_TRY(fl_ps_tier_copy_rows(m->tier, m->ids[fl_ps_table_stripe(k, (unsigned)m->ns)], &k, 1,
                                take_looked_up, m));
    s->live = m->found;
    s->key = k;
    s->row = m->scratch;
  }
  return FL_OK;
}

/* The next row in key order to ids / rows; *more 0 when none is left. */
static fl_status merge_step(merge *m, npy_out *ids, npy_out *rows, int *more) {
  uint64_t best = UINT64_MAX;
  const char *row = NULL;
  int any = m->mi < m->nmem;
  if (any) {
    best = m->mem[m->mi].key;
    row = (const char *)(m->vals + m->mem[m->mi].at * m->dim);
  }
  for (size_t i = 0; i < m->nsrc; i++)
    if (m->src[i].live && (!any || m->src[i].key < best)) {
      best = m->src[i].key;
      row = m->src[i].row;
      any = 1;
    }
  *more = any;
  if (!any) return FL_OK;
  FL_TRY(out_add(ids, &best, 1));
  FL_TRY(out_add(rows, row, 1));
  if (m->mi < m->nmem && m->mem[m->mi].key == best) m->mi++;
  for (size_t i = 0; i < m->nsrc; i++) /* a copy the file's row shadows goes too */
    if (m->src[i].live && m->src[i].key == best) FL_TRY(src_next(m, &m->src[i]));
  return FL_OK;
}

/* The file's rows (keys / vals, n) indexed by key into m. */
static fl_status index_file(merge *m, const uint64_t *keys, const float *vals, size_t n) {
  if (!(m->mem = malloc((n ? n : 1) * sizeof *m->mem)))
    return FL_ERR(FL_ENOMEM, "serving export: out of memory indexing %zu rows of table %s", n,
                  m->tname);
  for (size_t i = 0; i < n; i++) m->mem[i] = (key_at){keys[i], i};
  qsort(m->mem, n, sizeof *m->mem, cmp_key_at);
  m->nmem = n;
  m->vals = vals;
  return FL_OK;
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

/* m's disk sources from the copy: a base's cursor per stripe, a delta's
 * look-ups of its moved keys (sorted); each at its first row. */
static fl_status open_sources(merge *m, const fl_ckpt *ck, int delta) {
  const uint64_t *moved = NULL;
  m->ids = u64_rec(ck, m->tname, "tier_ids", &m->ns);
  if (delta) moved = u64_rec(ck, m->tname, "moved", &m->nmoved);
  if (!m->ids || m->ns == 0 || (m->ns & (m->ns - 1)) || (delta && !moved))
    return FL_ERR(FL_ECORRUPT, "serving export: table %s: records tier_ids%s missing in a "
                  "checkpoint with the disk tier", m->tname, delta ? " or moved" : "");
  m->nalloc = delta ? 1 : m->ns;
  m->src = calloc(m->nalloc, sizeof *m->src);
  m->scratch = malloc(m->dim * sizeof(float) + 1);
  m->moved = malloc((m->nmoved ? m->nmoved : 1) * sizeof *m->moved);
  if (!m->src || !m->scratch || !m->moved)
    return FL_ERR(FL_ENOMEM, "serving export: out of memory for table %s", m->tname);
  if (delta) {
    memcpy(m->moved, moved, m->nmoved * sizeof *m->moved);
    qsort(m->moved, m->nmoved, sizeof *m->moved, cmp_u64);
  }
  for (m->nsrc = 0; m->nsrc < m->nalloc; m->nsrc++) {
    if (!delta) FL_TRY(fl_ps_tier_cursor_open(m->tier, m->ids[m->nsrc], &m->src[m->nsrc].cur));
    FL_TRY(src_next(m, &m->src[m->nsrc]));
  }
  return FL_OK;
}

static void merge_free(merge *m) {
  for (size_t i = 0; m->src && i < m->nalloc; i++) fl_ps_tier_cursor_close(m->src[i].cur);
  free(m->src);
  free(m->scratch);
  free(m->moved);
  free(m->mem);
}

/* The rows of keys / vals (the file's) and, with the disk tier, those of
 * its copy, merged in key order into <stem>.ids.npy / .rows.npy. */
static fl_status put_rows(merge *m, const fl_ckpt *ck, int delta, const char *stem,
                          const fl_ckpt_record *keys, const fl_ckpt_record *vals) {
  char path[4300];
  npy_out ids = {0}, rows = {0};
  int more = 1;
  fl_status st = index_file(m, keys->data, vals->data, (size_t)keys->shape[0]);
  if (st == FL_OK && m->tier) st = open_sources(m, ck, delta);
  snprintf(path, sizeof path, "%s.ids.npy", stem);
  if (st == FL_OK) st = out_open(&ids, path, "<i8", sizeof(int64_t), 0);
  snprintf(path, sizeof path, "%s.rows.npy", stem);
  if (st == FL_OK) st = out_open(&rows, path, "<f4", sizeof(float), (int64_t)m->dim);
  while (st == FL_OK && more) st = merge_step(m, &ids, &rows, &more);
  if (st == FL_OK) st = out_done(&ids);
  if (st == FL_OK) st = out_done(&rows);
  out_drop(&ids);
  out_drop(&rows);
  merge_free(m);
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
  char stem[4200], path[4300], name[FL_CKPT_NAME_MAX + 16];
  fl_ckpt_record keys, vals, del;
  merge m = {.tname = tname, .dim = (size_t)dim, .tier = tier};
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
  FL_TRY(put_rows(&m, ck, seq != 0, stem, &keys, &vals));
  snprintf(path, sizeof path, "%s.deleted.npy", stem);
  if (seq) FL_TRY(put_ids(path, del.data, (size_t)del.shape[0]));
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
