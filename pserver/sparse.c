/* sparse.c - one sparse (embedding) table of a pserver: rows of dim floats
 * keyed by uint64 ids in an open-addressing hash (linear probing,
 * backward-shift deletion), rows created on first touch with a seeded
 * uniform init, per-row SGD / Adagrad / Adam / row-wise Adagrad / FTRL
 * through the kernels library (each row one tensor of the step, its state
 * fl_optim_state_len floats per buffer: dim, or 1 for row-wise Adagrad's
 * one accumulator), and an exact LRU list so that a table at max_rows evicts the row unseen
 * longest.  Rows live densely in [0, n): an evicted row's slot is reused by
 * the row that replaces it.  The core serializes access (one lock per
 * table). */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_ps.h"
#include "fl_ps_layout.h"

#define MAX_DIM (1u << 16)

struct fl_ps_table {
  char name[128];
  uint32_t dim;
  int64_t max_rows;
  float init_range;
  uint64_t seed;
  uint64_t name_hash;
  fl_optim_hparams hp;
  float lr;
  int nstate;
  size_t slen; /* floats per row in each state buffer */
  int has_padding;
  uint64_t padding_id;
  uint64_t padding_dropped;

  size_t n, cap;
  uint64_t *keys;
  float *val;
  float *s1, *s2;
  int64_t *t;     /* per-row update count (Adam's bias correction) */
  int32_t *prev;  /* LRU: toward the most recent (head) */
  int32_t *next;  /* LRU: toward the least recent (tail) */
  int32_t head, tail;

  int32_t *slots; /* hash slots: row index or -1 */
  size_t nslots;  /* power of two, > 2 * cap */
  uint64_t evicted;
};

static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
  return h;
}

const char *fl_ps_table_name(const fl_ps_table *t) { return t->name; }
uint32_t fl_ps_table_dim(const fl_ps_table *t) { return t->dim; }
size_t fl_ps_table_rows(const fl_ps_table *t) { return t->n; }
uint64_t fl_ps_table_evicted(const fl_ps_table *t) { return t->evicted; }
uint64_t fl_ps_table_padding_dropped(const fl_ps_table *t) { return t->padding_dropped; }

/* 1 when key is the table's padding id (never a row). */
static int is_padding(const fl_ps_table *t, uint64_t key) {
  return t->has_padding && key == t->padding_id;
}

fl_status fl_ps_table_create(const fl_ps_table_opts *o, fl_ps_table **out) {
  fl_ps_table *t;
  *out = NULL;
  if (!o->name || !o->name[0] || strlen(o->name) >= sizeof t->name)
    return FL_ERR(FL_EINVAL, "sparse table: name missing or longer than %zu bytes",
                  sizeof t->name - 1);
  if (o->dim == 0 || o->dim > MAX_DIM)
    return FL_ERR(FL_EINVAL, "sparse table %s: dim %u not in [1, %u]", o->name, o->dim, MAX_DIM);
  if (o->max_rows < 1 || o->max_rows > INT32_MAX / 2)
    return FL_ERR(FL_EINVAL, "sparse table %s: max_rows %lld not in [1, %d]", o->name,
                  (long long)o->max_rows, INT32_MAX / 2);
  if (!fl_proto_sparse_optim_ok(o->hp.kind))
    return FL_ERR(FL_EINVAL, "sparse table %s: optimizer %s (" FL_PROTO_SPARSE_OPTIMS " only)", o->name,
                  fl_optim_kind_name(o->hp.kind));
  if (fl_optim_hparams_check(&o->hp) != FL_OK || !(o->lr >= 0) || !(o->init_range >= 0))
    return FL_ERR(FL_EINVAL, "sparse table %s: bad optimizer settings or init range", o->name);
  if (o->hp.kind == FL_OPTIM_FTRL && !(o->lr > 0))
    return FL_ERR(FL_EINVAL, "sparse table %s: ftrl needs lr (its alpha) > 0", o->name);
  t = calloc(1, sizeof *t);
  if (!t) return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory", o->name);
  snprintf(t->name, sizeof t->name, "%s", o->name);
  t->dim = o->dim;
  t->max_rows = o->max_rows;
  t->init_range = o->init_range;
  t->seed = o->seed;
  t->name_hash = str_hash(o->name);
  t->hp = o->hp;
  t->hp.num_threads = 1; /* rows are tiny: no thread team per row */
  t->hp.exclude_from_weight_decay = NULL;
  t->hp.n_exclude = 0;
  t->lr = o->lr;
  t->nstate = fl_optim_state_count(o->hp.kind);
  t->slen = fl_optim_state_len(o->hp.kind, o->dim);
  t->has_padding = o->has_padding;
  t->padding_id = o->padding_id;
  t->head = t->tail = -1;
  *out = t;
  return FL_OK;
}

void fl_ps_table_free(fl_ps_table *t) {
  if (!t) return;
  free(t->keys);
  free(t->val);
  free(t->s1);
  free(t->s2);
  free(t->t);
  free(t->prev);
  free(t->next);
  free(t->slots);
  free(t);
}

/* ------------------------------------------------------------------- hash */

static size_t slot_of(const fl_ps_table *t, uint64_t key) {
  return (size_t)(fl_ps_mix64(key ^ t->name_hash) & (t->nslots - 1));
}

static int32_t find(const fl_ps_table *t, uint64_t key) {
  size_t i;
  if (!t->nslots) return -1;
  for (i = slot_of(t, key);; i = (i + 1) & (t->nslots - 1)) {
    int32_t r = t->slots[i];
    if (r < 0) return -1;
    if (t->keys[r] == key) return r;
  }
}

static void slot_insert(fl_ps_table *t, uint64_t key, int32_t row) {
  size_t i = slot_of(t, key);
  while (t->slots[i] >= 0) i = (i + 1) & (t->nslots - 1);
  t->slots[i] = row;
}

/* Remove key's slot, shifting later entries of its probe run back. */
static void slot_delete(fl_ps_table *t, uint64_t key) {
  size_t mask = t->nslots - 1, i = slot_of(t, key), j;
  while (t->keys[t->slots[i]] != key) i = (i + 1) & mask;
  j = i;
  for (;;) {
    size_t home;
    t->slots[i] = -1;
    for (;;) {
      j = (j + 1) & mask;
      if (t->slots[j] < 0) return;
      home = slot_of(t, t->keys[t->slots[j]]);
      /* Entry j may move to i when its home is not in (i, j] cyclically. */
      if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) break;
    }
    t->slots[i] = t->slots[j];
    i = j;
  }
}

/* ---------------------------------------------------------------- storage */

static fl_status grow(fl_ps_table *t) {
  size_t nc = t->cap ? t->cap * 2 : 1024, d = t->dim;
  size_t ns;
  if ((int64_t)nc > t->max_rows) nc = (size_t)t->max_rows;
#define GROW(field, count)                                                   \
  do {                                                                       \
    void *p_ = realloc(t->field, (count) * sizeof *t->field);                \
    if (!p_) goto nomem;                                                     \
    t->field = p_;                                                           \
  } while (0)
  GROW(keys, nc);
  GROW(val, nc * d);
  if (t->nstate >= 1) GROW(s1, nc * t->slen);
  if (t->nstate >= 2) GROW(s2, nc * t->slen);
  GROW(t, nc);
  GROW(prev, nc);
  GROW(next, nc);
#undef GROW
  t->cap = nc;
  for (ns = 16; ns < 2 * nc + 1; ns *= 2) {
  }
  if (ns != t->nslots) {
    int32_t *slots = malloc(ns * sizeof *slots);
    if (!slots) goto nomem;
    free(t->slots);
    t->slots = slots;
    t->nslots = ns;
    memset(slots, 0xff, ns * sizeof *slots);
    for (size_t r = 0; r < t->n; r++) slot_insert(t, t->keys[r], (int32_t)r);
  }
  return FL_OK;
nomem:
  return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory growing to %zu rows", t->name, nc);
}

static void lru_unlink(fl_ps_table *t, int32_t r) {
  if (t->prev[r] >= 0) t->next[t->prev[r]] = t->next[r];
  else t->head = t->next[r];
  if (t->next[r] >= 0) t->prev[t->next[r]] = t->prev[r];
  else t->tail = t->prev[r];
}

static void lru_push_head(fl_ps_table *t, int32_t r) {
  t->prev[r] = -1;
  t->next[r] = t->head;
  if (t->head >= 0) t->prev[t->head] = r;
  t->head = r;
  if (t->tail < 0) t->tail = r;
}

static void touch(fl_ps_table *t, int32_t r) {
  if (t->head == r) return;
  lru_unlink(t, r);
  lru_push_head(t, r);
}

/* Deterministic uniform init of the row of key in [-r, r]. */
static void init_row(const fl_ps_table *t, uint64_t key, float *v) {
  uint64_t base = fl_ps_mix64(t->seed ^ fl_ps_mix64(t->name_hash ^ key));
  for (uint32_t j = 0; j < t->dim; j++) {
    uint64_t x = fl_ps_mix64(base + 0x9e3779b97f4a7c15ULL * (j + 1));
    float u = (float)(x >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
    v[j] = (2.0f * u - 1.0f) * t->init_range;
  }
}

/* Row r's optimizer state viewed as the kernels' tensor (no param/grad). */
static fl_optim_tensor state_of(const fl_ps_table *t, int32_t r) {
  fl_optim_tensor x;
  memset(&x, 0, sizeof x);
  x.state1 = t->nstate >= 1 ? t->s1 + (size_t)r * t->slen : NULL;
  x.state2 = t->nstate >= 2 ? t->s2 + (size_t)r * t->slen : NULL;
  x.n = t->dim;
  return x;
}

/* The row of key, created (evicting the least recent row when full). */
static fl_status get_row(fl_ps_table *t, uint64_t key, int32_t *out) {
  int32_t r = find(t, key);
  size_t d = t->dim;
  if (r >= 0) {
    *out = r;
    return FL_OK;
  }
  if ((int64_t)t->n >= t->max_rows) {
    r = t->tail;
    lru_unlink(t, r);
    slot_delete(t, t->keys[r]);
    t->evicted++;
  } else {
    if (t->n == t->cap) FL_TRY(grow(t));
    r = (int32_t)t->n++;
  }
  t->keys[r] = key;
  init_row(t, key, t->val + (size_t)r * d);
  if (t->nstate >= 1) {
    fl_optim_tensor x = state_of(t, r);
    if (fl_optim_init_state(&t->hp, &x, 1) != FL_OK)
      return FL_ERR(FL_EINVAL, "sparse table %s: %s refused to set up a row's state", t->name,
                    fl_optim_kind_name(t->hp.kind));
  }
  t->t[r] = 0;
  slot_insert(t, key, r);
  lru_push_head(t, r);
  *out = r;
  return FL_OK;
}

fl_status fl_ps_table_pull(fl_ps_table *t, const uint64_t *keys, size_t n, float *out) {
  size_t d = t->dim;
  for (size_t i = 0; i < n; i++) {
    int32_t r;
    if (is_padding(t, keys[i])) {
      memset(out + i * d, 0, d * sizeof(float));
      continue;
    }
    FL_TRY(get_row(t, keys[i], &r));
    touch(t, r);
    memcpy(out + i * d, t->val + (size_t)r * d, d * sizeof(float));
  }
  return FL_OK;
}

fl_status fl_ps_table_push(fl_ps_table *t, const uint64_t *keys, size_t n, const float *g) {
  size_t d = t->dim;
  /* One step per row, right after fetching it: creating a later row may
   * evict (and reuse the memory of) an earlier one of the same push, and a
   * key repeated within a push is applied twice, in order, like two pushes. */
  for (size_t i = 0; i < n; i++) {
    int32_t r;
    fl_optim_tensor x;
    if (is_padding(t, keys[i])) {
      t->padding_dropped++;
      continue;
    }
    FL_TRY(get_row(t, keys[i], &r));
    touch(t, r);
    x = state_of(t, r);
    x.param = t->val + (size_t)r * d;
    x.grad = g + i * d;
    /* Adam's bias correction counts each row's own updates. */
    FL_TRY(fl_optim_step(&t->hp, &x, 1, t->lr, ++t->t[r]));
  }
  return FL_OK;
}

fl_status fl_ps_table_read(const fl_ps_table *t, const uint64_t *keys, size_t n, float *out) {
  size_t d = t->dim;
  for (size_t i = 0; i < n; i++) {
    int32_t r = find(t, keys[i]);
    if (is_padding(t, keys[i])) memset(out + i * d, 0, d * sizeof(float));
    else if (r >= 0) memcpy(out + i * d, t->val + (size_t)r * d, d * sizeof(float));
    else init_row(t, keys[i], out + i * d);
  }
  return FL_OK;
}

int fl_ps_table_peek(const fl_ps_table *t, uint64_t key, float *out) {
  int32_t r = find(t, key);
  if (r < 0) return 0;
  memcpy(out, t->val + (size_t)r * t->dim, t->dim * sizeof(float));
  return 1;
}

fl_status fl_ps_table_init(fl_ps_table *t, const uint64_t *keys, size_t n, const float *rows,
                           size_t *created) {
  size_t d = t->dim;
  *created = 0;
  for (size_t i = 0; i < n; i++) {
    int32_t r;
    if (is_padding(t, keys[i]) || find(t, keys[i]) >= 0) continue;
    FL_TRY(get_row(t, keys[i], &r));
    memcpy(t->val + (size_t)r * d, rows + i * d, d * sizeof(float));
    (*created)++;
  }
  return FL_OK;
}

/* Sift the max-heap h[0..n) down from i. */
static void heap_down(uint64_t *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    uint64_t x;
    if (l < n && h[l] > h[m]) m = l;
    if (l + 1 < n && h[l + 1] > h[m]) m = l + 1;
    if (m == i) return;
    x = h[i];
    h[i] = h[m];
    h[m] = x;
    i = m;
  }
}

static void heap_up(uint64_t *h, size_t i) {
  while (i > 0 && h[(i - 1) / 2] < h[i]) {
    uint64_t x = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = x;
    i = (i - 1) / 2;
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

fl_status fl_ps_table_dump(const fl_ps_table *t, int has_after, uint64_t after, size_t max,
                           uint64_t *keys, float *vals, size_t *n, int *more) {
  size_t d = t->dim, k = 0, seen = 0;
  /* The max smallest keys above after, kept in a max-heap in keys. */
  for (size_t r = 0; r < t->n; r++) {
    uint64_t key = t->keys[r];
    if (has_after && key <= after) continue;
    seen++;
    if (k < max) {
      keys[k] = key;
      heap_up(keys, k++);
    } else if (key < keys[0]) {
      keys[0] = key;
      heap_down(keys, k, 0);
    }
  }
  qsort(keys, k, sizeof *keys, cmp_u64);
  for (size_t i = 0; i < k; i++)
    memcpy(vals + i * d, t->val + (size_t)find(t, keys[i]) * d, d * sizeof(float));
  *n = k;
  *more = seen > k;
  return FL_OK;
}

/* ------------------------------------------------------------ checkpoints
 * Format 2 (FL_PS_TABLE_FORMAT) writes the records "format" and
 * "optimizer" (the fl_optim_kind whose state the rows hold) and each state
 * buffer as [rows, fl_optim_state_len]; format 1 (no "format" record, before
 * row-wise Adagrad and FTRL) held the server's sgd, adagrad or adam state as
 * [rows, dim], the same shapes format 2 gives them, and still loads. */

fl_optim_kind fl_ps_table_kind(const fl_ps_table *t) { return t->hp.kind; }

fl_status fl_ps_table_save(const fl_ps_table *t, fl_ckpt_writer *w, const char *prefix) {
  size_t n = t->n, d = t->dim, sl = t->slen, m = n ? n : 1, i = 0;
  uint64_t *keys = malloc(m * sizeof *keys);
  int64_t *steps = malloc(m * sizeof *steps);
  float *v = malloc(m * d * sizeof *v);
  float *a = t->nstate >= 1 ? malloc(m * sl * sizeof *a) : NULL;
  float *b = t->nstate >= 2 ? malloc(m * sl * sizeof *b) : NULL;
  char name[FL_CKPT_NAME_MAX];
  int64_t shape[2] = {(int64_t)n, (int64_t)d}, sshape[2] = {(int64_t)n, (int64_t)sl};
  fl_status st = FL_OK;

  if (!keys || !steps || !v || (t->nstate >= 1 && !a) || (t->nstate >= 2 && !b)) {
    st = FL_ERR(FL_ENOMEM, "sparse table %s: out of memory saving %zu rows", t->name, n);
    goto done;
  }
  for (int32_t r = t->tail; r >= 0; r = t->prev[r], i++) {
    keys[i] = t->keys[r];
    steps[i] = t->t[r];
    memcpy(v + i * d, t->val + (size_t)r * d, d * sizeof *v);
    if (a) memcpy(a + i * sl, t->s1 + (size_t)r * sl, sl * sizeof *a);
    if (b) memcpy(b + i * sl, t->s2 + (size_t)r * sl, sl * sizeof *b);
  }
#define NAME(suffix) snprintf(name, sizeof name, "%s%s", prefix, suffix)
#define PUT(suffix, dt, nd, shp, data)                                       \
  do {                                                                       \
    NAME(suffix);                                                            \
    if ((st = fl_ckpt_put(w, name, dt, nd, shp, data)) != FL_OK) goto done;  \
  } while (0)
  NAME("format");
  if ((st = fl_ckpt_put_i64(w, name, FL_PS_TABLE_FORMAT)) != FL_OK) goto done;
  NAME("optimizer");
  if ((st = fl_ckpt_put_i64(w, name, (int64_t)t->hp.kind)) != FL_OK) goto done;
  PUT("keys", FL_CKPT_U64, 1, shape, keys);
  PUT("steps", FL_CKPT_I64, 1, shape, steps);
  PUT("values", FL_CKPT_F32, 2, shape, v);
  if (a) PUT("state1", FL_CKPT_F32, 2, sshape, a);
  if (b) PUT("state2", FL_CKPT_F32, 2, sshape, b);
#undef PUT
#undef NAME
done:
  free(keys);
  free(steps);
  free(v);
  free(a);
  free(b);
  return st;
}

static fl_status find_rec(const fl_ckpt *c, const char *prefix, const char *suffix,
                          fl_ckpt_dtype dt, int nd, int64_t n, int64_t d, fl_ckpt_record *r) {
  char name[FL_CKPT_NAME_MAX];
  snprintf(name, sizeof name, "%s%s", prefix, suffix);
  if (fl_ckpt_find(c, name, r) != FL_OK)
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s missing", name);
  if (r->dtype != dt || r->ndim != nd || r->shape[0] != n || (nd == 2 && r->shape[1] != d))
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s has the wrong type or shape", name);
  return FL_OK;
}

/* 1 when k is an fl_optim_kind of this build. */
static int known_kind(int64_t k) {
  int64_t n = 0;
  while (fl_optim_kind_names[n]) n++;
  return k >= 0 && k < n;
}

/* The records under prefix hold the state of kind, in a format this build
 * reads. */
static fl_status check_format(const fl_ckpt *c, const char *prefix, fl_optim_kind kind) {
  char name[FL_CKPT_NAME_MAX];
  int64_t fmt, held;
  fl_status st;

  snprintf(name, sizeof name, "%sformat", prefix);
  st = fl_ckpt_get_i64(c, name, &fmt);
  if (st == FL_ENOTFOUND) {
    if (kind == FL_OPTIM_SGD || kind == FL_OPTIM_ADAGRAD || kind == FL_OPTIM_ADAM) return FL_OK;
    return FL_ERR(FL_EINVAL, "checkpoint: the table under %s is of format 1, which has no %s "
                  "state: resume it with the optimizer it was trained with (sgd, adagrad or "
                  "adam)", prefix, fl_optim_kind_name(kind));
  }
  if (st != FL_OK) return FL_ERR(FL_ECORRUPT, "checkpoint: record %s malformed", name);
  if (fmt != FL_PS_TABLE_FORMAT)
    return FL_ERR(FL_EINVAL, "checkpoint: %s is %lld; this build reads sparse table formats 1 "
                  "and %d: resume with the build that wrote it", name, (long long)fmt,
                  FL_PS_TABLE_FORMAT);
  snprintf(name, sizeof name, "%soptimizer", prefix);
  if (fl_ckpt_get_i64(c, name, &held) != FL_OK)
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s missing or malformed", name);
  if (held == (int64_t)kind) return FL_OK;
  if (!known_kind(held))
    return FL_ERR(FL_EINVAL, "checkpoint: the table under %s holds the state of optimizer %lld, "
                  "unknown to this build: resume with the build that wrote it", prefix,
                  (long long)held);
  return FL_ERR(FL_EINVAL, "checkpoint: the table under %s holds %s state but uses %s here: "
                "set its optimizer back to %s to resume it", prefix,
                fl_optim_kind_name((fl_optim_kind)held), fl_optim_kind_name(kind),
                fl_optim_kind_name((fl_optim_kind)held));
}

fl_status fl_ps_table_verify(const fl_ckpt *c, const char *prefix, uint32_t dim,
                             fl_optim_kind kind, int64_t *rows) {
  fl_ckpt_record rk, r;
  char name[FL_CKPT_NAME_MAX];
  int64_t n, d = dim, sl = (int64_t)fl_optim_state_len(kind, dim);
  int nstate = fl_optim_state_count(kind);
  uint64_t *sorted;
  fl_status st = FL_OK;

  FL_TRY(check_format(c, prefix, kind));
  snprintf(name, sizeof name, "%skeys", prefix);
  if (fl_ckpt_find(c, name, &rk) != FL_OK || rk.dtype != FL_CKPT_U64 || rk.ndim != 1)
    return FL_ERR(FL_ECORRUPT, "checkpoint: record %s missing or not 1-d u64", name);
  n = rk.shape[0];
  FL_TRY(find_rec(c, prefix, "steps", FL_CKPT_I64, 1, n, d, &r));
  FL_TRY(find_rec(c, prefix, "values", FL_CKPT_F32, 2, n, d, &r));
  if (nstate >= 1) FL_TRY(find_rec(c, prefix, "state1", FL_CKPT_F32, 2, n, sl, &r));
  if (nstate >= 2) FL_TRY(find_rec(c, prefix, "state2", FL_CKPT_F32, 2, n, sl, &r));
  sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
  if (!sorted) return FL_ERR(FL_ENOMEM, "checkpoint: out of memory checking %s", name);
  memcpy(sorted, rk.data, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
  for (int64_t i = 1; i < n && st == FL_OK; i++)
    if (sorted[i] == sorted[i - 1]) st = FL_ERR(FL_ECORRUPT, "checkpoint: %s repeats a key", name);
  free(sorted);
  if (rows) *rows = n;
  return st;
}

fl_status fl_ps_table_load(fl_ps_table *t, const fl_ckpt *c, const char *prefix) {
  fl_ckpt_record rk, rs, rv, ra, rb;
  char name[FL_CKPT_NAME_MAX];
  int64_t n, d = t->dim, sl = (int64_t)t->slen;
  size_t first;

  /* Everything is checked before the table changes. */
  FL_TRY(fl_ps_table_verify(c, prefix, t->dim, t->hp.kind, &n));
  snprintf(name, sizeof name, "%skeys", prefix);
  fl_ckpt_find(c, name, &rk);
  find_rec(c, prefix, "steps", FL_CKPT_I64, 1, n, d, &rs);
  find_rec(c, prefix, "values", FL_CKPT_F32, 2, n, d, &rv);
  if (t->nstate >= 1) find_rec(c, prefix, "state1", FL_CKPT_F32, 2, n, sl, &ra);
  if (t->nstate >= 2) find_rec(c, prefix, "state2", FL_CKPT_F32, 2, n, sl, &rb);
  /* Start empty, then insert oldest first so recency is kept. */
  t->n = 0;
  t->head = t->tail = -1;
  if (t->nslots) memset(t->slots, 0xff, t->nslots * sizeof *t->slots);
  first = n > t->max_rows ? (size_t)(n - t->max_rows) : 0;
  for (size_t i = first; i < (size_t)n; i++) {
    uint64_t key = ((const uint64_t *)rk.data)[i];
    int32_t r;
    FL_TRY(get_row(t, key, &r));
    memcpy(t->val + (size_t)r * d, (const float *)rv.data + i * d, (size_t)d * sizeof(float));
    if (t->nstate >= 1)
      memcpy(t->s1 + (size_t)r * sl, (const float *)ra.data + i * sl, (size_t)sl * sizeof(float));
    if (t->nstate >= 2)
      memcpy(t->s2 + (size_t)r * sl, (const float *)rb.data + i * sl, (size_t)sl * sizeof(float));
    t->t[r] = ((const int64_t *)rs.data)[i];
  }
  return FL_OK;
}
