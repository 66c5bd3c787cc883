/* test_ps_tier_export.c - the serving export and checkpoints with the
 * disk tier (pserver.memory_budget), where the table is far larger than
 * the memory tier: a base export streams the rows from both tiers in
 * bounded memory (the process's peak RSS grows by a fraction of the
 * table's bytes while it is written) and is, byte for byte, the export of
 * the same training without a budget; and a stale copy on disk (the
 * store's copy of a row older than the one memory holds, as a removal
 * the disk refused leaves it) is never taken: the export of a delta and
 * of a base, a restart from a chain (delta replay) and from a base, the
 * pulls and pushes after them and their checkpoints all take the memory
 * copy, bit for bit as without a budget; a delta's store copy holds the
 * rows demoted in its interval, not the store. */
#include <config.h>

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_ckpt.h"
#include "fl_ps.h"
#include "ps_serving.h"
#include "ps_testutil.h"
#include "tier_rocks.h"

#define DIM 32
#define X 7u /* the row whose copy on disk goes stale */


/* A core of one async trainer (registered): with budget its disk tier in
 * dir, deltas every `every` checkpoints (0: none), its serving export in
 * export_root (the caller's, alive with the core). */
static fl_ps_core *mk(size_t budget, const char *dir, int64_t every, const char *export_root) {
  fl_ps_core_opts o;
  fl_ps_core *c;
  pt_opts(&o, 1, 1, FL_OPTIM_ROWWISE_ADAGRAD, 0.1f, 1 << 20); /* 16 stripes */
  o.job.pserver.memory_budget = budget;
  o.job.pserver.checkpoint_delta.every = every;
  snprintf(o.job.pserver.serving_export, sizeof o.job.pserver.serving_export, "%s", export_root);
  c = pt_core(&o);
  if (budget) ck_assert_int_eq(fl_ps_core_open_tier(c, dir), FL_OK);
  return c;
}

static void reg(fl_ps_core *c) {
  pt_register(c, &(pt_reg){.trainer = 0, .n_trainers = 1,
                           .mode = FLOTILLA__SYNC_MODE__SYNC_MODE_ASYNC, .dim = DIM});
}

static int64_t next_step; /* each push pair its own step: a push repeated at a step is dropped */

/* Push the n keys (gradients from the key and the step) to a and, when
 * not NULL, b, at the next step. */
static void push2(fl_ps_core *a, fl_ps_core *b, const uint64_t *keys, size_t n) {
  float *g = malloc(n * DIM * sizeof *g);
  int64_t step = next_step++;
  ck_assert_ptr_nonnull(g);
  for (size_t i = 0; i < n; i++)
    for (int j = 0; j < DIM; j++)
      g[i * DIM + j] = (float)((int)((keys[i] * 31 + (uint64_t)j * 7 + (uint64_t)step) % 17) - 8) *
                       0.01f;
  for (int c = 0; c < 2; c++)
    if (c == 0 || b)
      ck_assert_int_eq(pt_push_sparse(c ? b : a, &(pt_call){.trainer = 0, .table = "emb",
                                                            .dim = DIM, .step = step, .parts = 1},
                                      keys, n, g),
                       FL_OK);
  free(g);
}

/* Push keys lo..hi-1 in calls of 1000 to each of a and b. */
static void push_range(fl_ps_core *a, fl_ps_core *b, uint64_t lo, uint64_t hi) {
  static uint64_t k[1000];
  for (uint64_t s = lo; s < hi; s += 1000) {
    size_t n = hi - s < 1000 ? (size_t)(hi - s) : 1000;
    for (size_t i = 0; i < n; i++) k[i] = s + i;
    push2(a, b, k, n);
  }
}

/* Push X to a and b. */
static void push_x(fl_ps_core *a, fl_ps_core *b) {
  static const uint64_t x = X;
  push2(a, b, &x, 1);
}

/* The file at path, whole (*len bytes); the caller frees it. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf;
  long n;
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* The files a and b are the same bytes. */
static void same_file(const char *a, const char *b) {
  size_t la, lb;
  char *x = slurp(a, &la), *y = slurp(b, &lb);
  ck_assert_msg(la == lb && memcmp(x, y, la) == 0, "%s and %s differ", a, b);
  free(x);
  free(y);
}

/* The data of the .npy file at path (after its header): *n bytes. */
static char *npy_data(const char *path, size_t *n, char **whole) {
  size_t len, hl;
  *whole = slurp(path, &len);
  ck_assert_uint_ge(len, 10);
  ck_assert_mem_eq(*whole, "\x93NUMPY\x01\x00", 8);
  hl = 10 + ((size_t)(unsigned char)(*whole)[8] | (size_t)(unsigned char)(*whole)[9] << 8);
  ck_assert_uint_eq(hl % 64, 0);
  *n = len - hl;
  return *whole + hl;
}

/* The row of key in the export <stem>.ids.npy / .rows.npy into row
 * (DIM floats): 1 when there. */
static int export_row(const char *stem, uint64_t key, float *row) {
  char p[1024], *wi, *wr;
  size_t ni, nr;
  const char *ids, *rows;
  int found = 0;
  snprintf(p, sizeof p, "%s.ids.npy", stem);
  ids = npy_data(p, &ni, &wi);
  snprintf(p, sizeof p, "%s.rows.npy", stem);
  rows = npy_data(p, &nr, &wr);
  ck_assert_uint_eq(ni / 8 * DIM * sizeof(float), nr);
  for (size_t i = 0; i < ni / 8 && !found; i++) {
    int64_t id;
    memcpy(&id, ids + i * 8, 8);
    if (i) {
      int64_t prev;
      memcpy(&prev, ids + (i - 1) * 8, 8);
      ck_assert_int_lt(prev, id); /* ascending */
    }
    if ((uint64_t)id == key) {
      memcpy(row, rows + i * DIM * sizeof(float), DIM * sizeof(float));
      found = 1;
    }
  }
  free(wi);
  free(wr);
  return found;
}

/* /proc/self/status's field (kB), or -1. */
static long status_kb(const char *field) {
  char line[256];
  long v = -1;
  FILE *f = fopen("/proc/self/status", "r");
  size_t fl = strlen(field);
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, fl) && line[fl] == ':') v = strtol(line + fl + 1, NULL, 10);
  fclose(f);
  return v;
}

/* Reset the process's peak RSS to its RSS now: 0 when the kernel lets us
 * and the RSS means what it says (not under AddressSanitizer, whose
 * quarantine keeps freed memory resident). */
static int reset_peak(void) {
#ifdef __SANITIZE_ADDRESS__
  return -1;
#else
  FILE *f = fopen("/proc/self/clear_refs", "w");
  int bad;
  if (!f) return -1;
  bad = fputs("5", f) < 0;
  bad |= fclose(f) != 0;
  return bad ? -1 : 0;
#endif
}

/* Large enough that the export's own buffers and the store's background
 * work (1-5 MB of peak RSS, more under load) stay well below the bound of
 * half the rows: with 60,000 rows (4 MB bound) one CI run reached 4.6 MB. */
#define BIG_ROWS 120000
#define BIG_BUDGET (1u << 20)

START_TEST(test_base_export_streams) {
  /* 120,000 rows of 32 floats (15.6 MiB to export, about 22 MB on disk)
   * and a budget of 1 MiB (about 3,800 rows in memory). */
  char dir[] = "/tmp/fl_test_texp_XXXXXX", path[512], ea[600], eb[600], p[700], q[700];
  fl_ps_core *a, *b;
  int64_t step, sb;
  long before, peak;
  fl_ps_tiers ts;
  const size_t export_bytes = (size_t)BIG_ROWS * (DIM * sizeof(float) + 8);
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(ea, sizeof ea, "%s/serving_tier", dir);
  snprintf(eb, sizeof eb, "%s/serving_mem", dir);
  snprintf(p, sizeof p, "%s/a", dir);
  snprintf(q, sizeof q, "%s/b", dir);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  ck_assert_int_eq(mkdir(q, 0755), 0);
  a = mk(BIG_BUDGET, p, 0, ea);
  b = mk(0, NULL, 0, eb);
  reg(a);
  reg(b);
  for (uint64_t s = 0; s < 3; s++) push_range(a, b, s * 20000, BIG_ROWS);
  fl_ps_core_tier_stats(a, &ts);
  ck_assert_uint_gt(ts.disk_rows, 10 * ts.mem_rows); /* the table is mostly on disk */
  ck_assert_int_eq(fl_ps_core_save_dir(b, q, &sb, path, sizeof path), FL_OK);
  before = status_kb("VmRSS");
  if (reset_peak() != 0) before = -1; /* no peak to measure: content only */
  ck_assert_int_eq(fl_ps_core_save_dir(a, p, &step, path, sizeof path), FL_OK);
  peak = status_kb("VmHWM");
  ck_assert_int_eq(step, sb);
  if (before > 0 && peak > 0) {
    fprintf(stderr, "base export with a budget: peak RSS +%ld kB for %zu kB of rows\n",
            peak - before, export_bytes >> 10);
    ck_assert_int_lt((peak - before) * 1024, (long)(export_bytes / 2));
  }
  snprintf(p, sizeof p, "%s/pserver-0/emb.base-%lld.ids.npy", ea, (long long)step);
  snprintf(q, sizeof q, "%s/pserver-0/emb.base-%lld.ids.npy", eb, (long long)step);
  same_file(p, q);
  {
    size_t n;
    char *w;
    npy_data(p, &n, &w);
    ck_assert_uint_eq(n, (size_t)BIG_ROWS * 8);
    free(w);
  }
  snprintf(p, sizeof p, "%s/pserver-0/emb.base-%lld.rows.npy", ea, (long long)step);
  snprintf(q, sizeof q, "%s/pserver-0/emb.base-%lld.rows.npy", eb, (long long)step);
  same_file(p, q);
  fl_ps_core_free(a);
  fl_ps_core_free(b);
  pt_rm_tree(dir);
}
END_TEST

/* ------------------------------------------------------- a stale copy */

#define SMALL_BUDGET (64u << 10) /* about 200 rows in memory */
#define NKEYS 4001

static uint64_t all_keys[NKEYS];

/* Every key the stale-copy training uses: X, 1000..1999, 3000..5999. */
static void init_keys(void) {
  size_t n = 0;
  all_keys[n++] = X;
  for (uint64_t k = 1000; k < 2000; k++) all_keys[n++] = k;
  for (uint64_t k = 3000; k < 6000; k++) all_keys[n++] = k;
  ck_assert_uint_eq(n, NKEYS);
}

static void read_all(fl_ps_core *c, float *out) {
  ck_assert_int_eq(pt_pull_sparse(c, &(pt_call){.trainer = 0, .table = "emb", .dim = DIM,
                                                .read_only = 1},
                                  all_keys, NKEYS, out),
                   FL_OK);
}

/* c (with a budget) and b (without) hold the same rows. */
static void same_rows(fl_ps_core *c, fl_ps_core *b) {
  static float x[NKEYS * DIM], y[NKEYS * DIM];
  read_all(c, x);
  read_all(b, y);
  ck_assert_mem_eq(x, y, sizeof x);
}

/* The blob of X on disk in the copy beside the checkpoint file into blob
 * (cap bytes): its length; 0 when X is not there.  *table gets X's
 * stripe's table id in the store. */
typedef struct found_blob {
  char blob[1024];
  size_t len;
} found_blob;

static fl_status keep_blob(void *ctx, uint64_t key, const void *row, size_t len) {
  found_blob *f = ctx;
  (void)key;
  ck_assert_uint_le(len, sizeof f->blob);
  memcpy(f->blob, row, len);
  f->len = len;
  return FL_OK;
}

static uint64_t stripe_table(const char *file, uint64_t key) {
  fl_ckpt *ck = NULL;
  fl_ckpt_record r;
  uint64_t id;
  ck_assert_int_eq(fl_ckpt_load(file, &ck), FL_OK);
  ck_assert_int_eq(fl_ckpt_find(ck, "sparse/emb/tier_ids", &r), FL_OK);
  id = ((const uint64_t *)r.data)[fl_ps_table_stripe(key, (unsigned)r.shape[0])];
  fl_ckpt_free(ck);
  return id;
}

static size_t disk_blob(const char *file, found_blob *f) {
  char copy[600];
  fl_ps_tier *t = NULL;
  uint64_t key = X, table = stripe_table(file, X);
  snprintf(copy, sizeof copy, "%s.tier", file);
  f->len = 0;
  ck_assert_int_eq(fl_ps_tier_open_copy(copy, &t), FL_OK);
  ck_assert_int_eq(fl_ps_tier_copy_rows(t, table, &key, 1, keep_blob, f), FL_OK);
  fl_ps_tier_close(t);
  return f->len;
}

/* The rows in the store copy beside the checkpoint file (all stripes). */
static size_t copy_row_count(const char *file) {
  char copy[600];
  fl_ps_tier *t = NULL;
  fl_ckpt *ck = NULL;
  fl_ckpt_record r;
  size_t n = 0;
  snprintf(copy, sizeof copy, "%s.tier", file);
  ck_assert_int_eq(fl_ckpt_load(file, &ck), FL_OK);
  ck_assert_int_eq(fl_ckpt_find(ck, "sparse/emb/tier_ids", &r), FL_OK);
  ck_assert_int_eq(fl_ps_tier_open_copy(copy, &t), FL_OK);
  for (int64_t s = 0; s < r.shape[0]; s++) {
    fl_ps_tier_cursor *cur = NULL;
    uint64_t key;
    const void *row;
    size_t len;
    int more = 1;
    ck_assert_int_eq(fl_ps_tier_cursor_open(t, ((const uint64_t *)r.data)[s], &cur), FL_OK);
    while (more) {
      ck_assert_int_eq(fl_ps_tier_cursor_next(cur, &key, &row, &len, &more), FL_OK);
      n += (size_t)more;
    }
    fl_ps_tier_cursor_close(cur);
  }
  fl_ps_tier_close(t);
  fl_ckpt_free(ck);
  return n;
}

/* 1 when the checkpoint file holds X among its memory rows. */
static int file_has_x(const char *file) {
  fl_ckpt *ck = NULL;
  fl_ckpt_record r;
  int has = 0;
  ck_assert_int_eq(fl_ckpt_load(file, &ck), FL_OK);
  ck_assert_int_eq(fl_ckpt_find(ck, "sparse/emb/keys", &r), FL_OK);
  for (int64_t i = 0; i < r.shape[0]; i++) has |= ((const uint64_t *)r.data)[i] == X;
  fl_ckpt_free(ck);
  return has;
}

/* Put the stale blob of X into the store copy beside file (through a
 * scratch store in dir: the copy restored, X written, copied back). */
static void inject_stale(const char *dir, const char *file, const found_blob *f) {
  char scratch[600], copy[600], fresh[600];
  fl_ps_tier *t = NULL;
  snprintf(scratch, sizeof scratch, "%s/scratch.rocksdb", dir);
  snprintf(copy, sizeof copy, "%s.tier", file);
  snprintf(fresh, sizeof fresh, "%s/fresh.tier", dir);
  ck_assert_int_eq(fl_ps_tier_open(scratch, 1 << 20, &t), FL_OK);
  ck_assert_int_eq(fl_ps_tier_restore(t, copy), FL_OK);
  ck_assert_int_eq(fl_ps_tier_put(t, stripe_table(file, X), X, f->blob, f->len), FL_OK);
  ck_assert_int_eq(fl_ps_tier_checkpoint(t, fresh, 0), FL_OK);
  fl_ps_tier_close(t);
  ck_assert_int_eq(fl_ps_tier_remove_copy(copy), FL_OK);
  ck_assert_int_eq(rename(fresh, copy), 0);
  ck_assert_int_eq(fl_ps_tier_remove_copy(scratch), FL_OK);
  {
    found_blob g;
    ck_assert_uint_eq(disk_blob(file, &g), f->len);
    ck_assert_mem_eq(g.blob, f->blob, f->len);
  }
}

/* A fresh core with the budget restarted from dir's newest base and its
 * deltas (deltas: how many it must replay); its rows equal b's. */
static fl_ps_core *restart(const char *dir, const char *export_root, int64_t deltas,
                           fl_ps_core *b) {
  fl_ps_core *d = mk(SMALL_BUDGET, dir, 2, export_root);
  fl_ckpt *ck = NULL;
  int64_t step, got = -1;
  char path[512];
  ck_assert_int_eq(fl_ckpt_dir_load_latest(dir, &ck, &step), FL_OK);
  fl_ckpt_dir_path(dir, step, path, sizeof path);
  ck_assert_int_eq(fl_ps_core_load_chain(d, ck, path, dir, &got), FL_OK);
  fl_ckpt_free(ck);
  ck_assert_int_eq(got, deltas);
  reg(d);
  same_rows(d, b);
  return d;
}

/* Save a and b (b whole, into bdir); return a's step; path gets a's file. */
static int64_t save_both(fl_ps_core *a, const char *dir, fl_ps_core *b, const char *bdir,
                         char *path, size_t cap) {
  int64_t sa, sb;
  char bp[512];
  ck_assert_int_eq(fl_ps_core_save_dir(a, dir, &sa, path, cap), FL_OK);
  ck_assert_int_eq(fl_ps_core_save_dir(b, bdir, &sb, bp, sizeof bp), FL_OK);
  ck_assert_int_eq(sa, sb);
  return sa;
}

/* The base export of step of a (root ea) and of b (root eb): the same bytes. */
static void same_base_export(const char *ea, const char *eb, int64_t step) {
  char p[700], q[700];
  const char *what[2] = {"ids", "rows"};
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/pserver-0/emb.base-%lld.%s.npy", ea, (long long)step, what[i]);
    snprintf(q, sizeof q, "%s/pserver-0/emb.base-%lld.%s.npy", eb, (long long)step, what[i]);
    same_file(p, q);
  }
}

/* X's row in b. */
static void row_of_x(fl_ps_core *b, float *row) {
  uint64_t k = X;
  ck_assert_int_eq(pt_pull_sparse(b, &(pt_call){.trainer = 0, .table = "emb", .dim = DIM,
                                                .read_only = 1},
                                  &k, 1, row),
                   FL_OK);
}

/* Rows 1000..1999 and X (hot): a base; X demoted by 3000 cold rows: a
 * delta with X on disk (its blob into *old); X promoted, demoted again,
 * promoted and pushed: a second delta with X in memory and among the
 * rows demoted since the first (its export looks X up in the copy), its
 * path into d2. */
static void build_chain(fl_ps_core *a, const char *dir, fl_ps_core *b, const char *bdir,
                        found_blob *old, char *d2) {
  char path[512];
  push_range(a, b, 1000, 2000);
  push_x(a, b);
  save_both(a, dir, b, bdir, path, sizeof path);
  ck_assert(file_has_x(path));
  push_x(a, b);
  push_range(a, b, 3000, 6000);
  save_both(a, dir, b, bdir, path, sizeof path);
  ck_assert_ptr_nonnull(strstr(path, "/delta-"));
  ck_assert(!file_has_x(path));
  ck_assert_uint_gt(disk_blob(path, old), 0);
  push_x(a, b);
  push_range(a, b, 3000, 6000);
  push_x(a, b);
  save_both(a, dir, b, bdir, path, sizeof path);
  ck_assert_ptr_nonnull(strstr(path, "/delta-"));
  ck_assert(file_has_x(path));
  ck_assert_uint_eq(disk_blob(path, &(found_blob){0}), 0);
  snprintf(d2, 512, "%s", path);
}

/* The stale copy in the second delta's store copy: its export (written
 * again, into dir/again) has X's memory row; a restart replays the chain
 * and settles X to memory's copy; training goes on alike and the next
 * checkpoint (a base: its path into bpath, its step returned) and its
 * export equal b's.  *r gets the restarted core. */
static int64_t stale_in_delta(const char *dir, const char *d2, const found_blob *old,
                              fl_ps_core *b, const char *bdir, const char *ea, const char *eb,
                              char *bpath, fl_ps_core **r) {
  char e2[600], stem[800];
  float want[DIM], got[DIM];
  long long base = -1, seq = -1;
  int64_t step;
  ck_assert_int_eq(sscanf(strrchr(d2, '/'), "/delta-%lld+%lld.flc", &base, &seq), 2);
  ck_assert_int_eq(seq, 2);
  inject_stale(dir, d2, old);
  snprintf(e2, sizeof e2, "%s/again", dir);
  snprintf(stem, sizeof stem, "%s.tier", d2);
  ck_assert_int_eq(fl_ps_serving_export(e2, d2, stem, base, 2, 6), FL_OK);
  snprintf(stem, sizeof stem, "%s/emb.delta-%lld-2", e2, base);
  row_of_x(b, want);
  ck_assert(export_row(stem, X, got));
  ck_assert_mem_eq(got, want, sizeof got);
  *r = restart(dir, ea, 2, b);
  for (int64_t s = 7; s < 9; s++) {
    push_x(*r, b);
    push_range(*r, b, 1000 + (uint64_t)s * 50, 1100 + (uint64_t)s * 50);
  }
  push_x(*r, b);
  same_rows(*r, b);
  step = save_both(*r, dir, b, bdir, bpath, 512);
  ck_assert_ptr_nonnull(strstr(bpath, "/ckpt-"));
  ck_assert(file_has_x(bpath));
  same_base_export(ea, eb, step);
  return step;
}

START_TEST(test_stale_disk_copy_never_taken) {
  char dir[] = "/tmp/fl_test_texp_stale_XXXXXX", d[256], bdir[256], ea[256], eb[256];
  char d2[512], base2[512], e3[600], pdir[700], copy[700], path[512];
  found_blob old;
  fl_ps_core *a, *b, *r;
  int64_t step;
  init_keys();
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(d, sizeof d, "%s/ck", dir);
  snprintf(bdir, sizeof bdir, "%s/whole", dir);
  snprintf(ea, sizeof ea, "%s/serving_tier", dir);
  snprintf(eb, sizeof eb, "%s/serving_mem", dir);
  ck_assert_int_eq(mkdir(d, 0755), 0);
  ck_assert_int_eq(mkdir(bdir, 0755), 0);
  a = mk(SMALL_BUDGET, d, 2, ea);
  b = mk(0, NULL, 0, eb);
  reg(a);
  reg(b);
  build_chain(a, d, b, bdir, &old, d2);
  fl_ps_core_free(a);
  step = stale_in_delta(d, d2, &old, b, bdir, ea, eb, base2, &r);
  fl_ps_core_free(r);
  /* The same stale blob in the base's copy, X in its file: the base's
   * export written again equals b's; a restart from it, its pulls,
   * pushes, a base and two deltas, and a second restart (delta replay)
   * equal b's. */
  inject_stale(d, base2, &old);
  snprintf(e3, sizeof e3, "%s/again_base", dir);
  snprintf(pdir, sizeof pdir, "%s/pserver-0", e3);
  snprintf(copy, sizeof copy, "%s.tier", base2);
  ck_assert_int_eq(fl_ps_serving_export(pdir, base2, copy, step, 0, step), FL_OK);
  same_base_export(e3, eb, step);
  r = restart(d, ea, 0, b);
  for (int64_t s = 10; s < 13; s++) {
    push_x(r, b);
    push_range(r, b, 3000 + (uint64_t)s * 100, 3200 + (uint64_t)s * 100);
    save_both(r, d, b, bdir, path, sizeof path);
    /* a base's copy holds the store, a delta's the rows demoted since */
    ck_assert_uint_gt(copy_row_count(path), s == 10 ? 3000 : 0);
    if (s > 10) ck_assert_uint_le(copy_row_count(path), 202);
  }
  same_rows(r, b);
  fl_ps_core_free(r);
  r = restart(d, ea, 2, b);
  fl_ps_core_free(r);
  fl_ps_core_free(b);
  pt_rm_tree(dir);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ps_tier_export");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_base_export_streams);
  tcase_add_test(tc, test_stale_disk_copy_never_taken);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
