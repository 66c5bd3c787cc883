/* bench_delta_ckpt.c - what a delta checkpoint of a sparse table saves
 * against a whole one, when a checkpoint interval touches a small share of
 * the rows (the case delta checkpoints are for).
 *
 * One table of --rows rows of --dim floats (Adagrad: one state buffer) is
 * filled, then each round pushes gradients to --touch of its rows (a
 * fresh random share each round) and writes, alternately in order, a
 * whole checkpoint and a delta of what that round changed, each a real
 * file (fl_ckpt: written, fsynced, renamed) in --dir.  The figures are
 * medians over --rounds rounds.
 *
 * Output: `name: value unit` lines - full_ckpt_bytes, delta_ckpt_bytes,
 * delta_ckpt_bytes_over_full, full_ckpt_seconds, delta_ckpt_seconds,
 * delta_ckpt_seconds_over_full, and the scale; then the same two
 * checkpoints built in memory (full_mem_seconds, delta_mem_seconds,
 * delta_mem_seconds_over_full: what the table's side costs, without the
 * disk's write and fsync, which dominate a small delta's file).  With
 * --budget BYTES the table keeps its rows beyond that in a disk tier (a
 * RocksDB store in --dir) and each checkpoint, whole or delta, is its
 * file plus the store's copy (fl_ps_tier_checkpoint: hard links, the
 * memtables flushed first), as a pserver writes them, each taken once a
 * round, before the delta
 * (tier_copy_seconds, tier_copy_bytes: a delta's copy, one SST file of
 * the rows demoted since the copy before; tier_whole_copy_seconds,
 * tier_whole_copy_bytes: a base's, hard links to the store's files, its
 * bytes those not linked from the whole copy before - the rows demoted in
 * the interval, flushed, the sorted runs a compaction wrote, RocksDB's
 * manifest), each added to its kind's figures; tier_copy_cpu_seconds and
 * tier_whole_copy_cpu_seconds: the CPU the copy call itself took on the
 * calling thread, which a loaded machine changes less).  The copies of the chain
 * (the base's, then each delta's) are kept as a pserver keeps them until
 * its next base: chain_*
 * is their disk use as du counts it (a file linked from several copies
 * once): the base's copy, the whole chain's after --rounds deltas, what
 * each delta added to it on average (its file and its copy's new files)
 * against what the interval changed on disk (the rows demoted in it, at
 * the bytes a row takes in the base's copy).  --steps S pushes an
 * interval's rows in S calls (a checkpoint every S training steps).  Not
 * a pass/fail test.
 * Usage: bench_delta_ckpt [--rows N] [--dim D] [--touch FRACTION]
 *                         [--rounds K] [--dir DIR] [--budget BYTES]
 *                         [--steps S] */
#include <config.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>
#include <stdatomic.h>

#include "fl_ps.h"
#include "tier_rocks.h"

/* The disk tier with --budget (NULL: none) and the copies of the chain:
 * chain_dir(0) the base's, chain_dir(r + 1) round r's delta's. */
static fl_ps_tier *tier;
static char bench_dir[4096];

static void chain_dir(int r, char *out, size_t cap) {
  snprintf(out, cap, "%s/bench_delta_chain-%d.tier", bench_dir, r);
}

/* A file's inode and its bytes on disk (st_blocks, as du counts). */
typedef struct inode_use {
  dev_t dev;
  ino_t ino;
} inode_use;

/* Bytes on disk of the files of dir (flat) not in seen (n of them, cap
 * at most), added to seen. */
static double dir_use(const char *dir, inode_use *seen, size_t *n, size_t cap) {
  double bytes = 0;
  char p[8300];
  struct dirent *e;
  struct stat sb;
  DIR *d = opendir(dir);
  if (!d) exit(1);
  while ((e = readdir(d))) {
    size_t i = 0;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    while (i < *n && (seen[i].ino != sb.st_ino || seen[i].dev != sb.st_dev)) i++;
    if (i < *n) continue;
    if (*n < cap) seen[(*n)++] = (inode_use){sb.st_dev, sb.st_ino};
    bytes += (double)sb.st_blocks * 512;
  }
  closedir(d);
  return bytes;
}

#define MAX_INODES 65536

/* Bytes on disk of the chain's copies 0..last, each file once. */
static double chain_use(int last) {
  static inode_use seen[MAX_INODES];
  size_t n = 0;
  double bytes = 0;
  char p[4200];
  for (int r = 0; r <= last; r++) {
    chain_dir(r, p, sizeof p);
    bytes += dir_use(p, seen, &n, MAX_INODES);
  }
  return bytes;
}

/* The calling thread's CPU seconds (a copy's own work, without RocksDB's
 * background threads; steadier than wall time on a loaded machine), and
 * those of the last copy taken. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double copy_cpu;

/* With the tier: chain position r's copy (kept): the base's whole (r 0),
 * a delta's the rows demoted since the copy before; the bytes it adds to
 * the chain before it. */
static double copy_chain(int r) {
  char p[4200];
  double c0;
  if (!tier) return 0;
  chain_dir(r, p, sizeof p);
  if (fl_ps_tier_remove_copy(p) != FL_OK) exit(1);
  c0 = cpu_s();
  if ((r ? fl_ps_tier_checkpoint_delta(tier, p) : fl_ps_tier_checkpoint(tier, p, 1)) != FL_OK)
    exit(1);
  copy_cpu = cpu_s() - c0;
  return r ? chain_use(r) - chain_use(r - 1) : chain_use(0);
}

/* With the tier: a whole copy, as a base's, replacing the one before; its
 * files not in the one before (their bytes). */
static double copy_whole(void) {
  static inode_use seen[MAX_INODES];
  char prev[4200], cur[4200];
  size_t n = 0;
  double b;
  if (!tier) return 0;
  snprintf(prev, sizeof prev, "%s/bench_delta_whole", bench_dir);
  snprintf(cur, sizeof cur, "%s/bench_delta_whole_new", bench_dir);
  double c0;
  if (fl_ps_tier_remove_copy(cur) != FL_OK) exit(1);
  c0 = cpu_s();
  if (fl_ps_tier_checkpoint(tier, cur, 0) != FL_OK) exit(1);
  copy_cpu = cpu_s() - c0;
  if (access(prev, F_OK) == 0) dir_use(prev, seen, &n, MAX_INODES);
  b = dir_use(cur, seen, &n, MAX_INODES);
  if (fl_ps_tier_remove_copy(prev) != FL_OK || rename(cur, prev) != 0) exit(1);
  return b;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Write t (whole or its delta) to path; seconds into *sec, bytes back. */
static double write_one(fl_ps_table *t, const char *path, int delta, double *sec) {
  fl_ckpt_writer *w = NULL;
  struct stat sb;
  double t0 = now_s();
  if (fl_ckpt_writer_open(path, &w) != FL_OK) exit(1);
  if ((delta ? fl_ps_table_save_delta(t, w, "sparse/emb/") : fl_ps_table_save(t, w, "sparse/emb/")) !=
          FL_OK ||
      fl_ckpt_writer_commit(w) != FL_OK)
    exit(1);
  fl_ps_table_mark_saved(t);
  *sec = now_s() - t0;
  if (stat(path, &sb) != 0) exit(1);
  return (double)sb.st_size;
}

/* Build t's checkpoint (whole or its delta) in memory, not marking it
 * saved; its seconds. */
static double build_mem(fl_ps_table *t, int delta) {
  fl_ckpt_writer *w = NULL;
  void *buf = NULL;
  size_t len = 0;
  double t0 = now_s();
  if (fl_ckpt_writer_open_mem(&w) != FL_OK) exit(1);
  if ((delta ? fl_ps_table_save_delta(t, w, "sparse/emb/") : fl_ps_table_save(t, w, "sparse/emb/")) !=
          FL_OK ||
      fl_ckpt_writer_commit_mem(w, &buf, &len) != FL_OK)
    exit(1);
  t0 = now_s() - t0;
  free(buf);
  return t0;
}

/* Push gradients to n random rows of [0, rows), in steps calls. */
static void touch_rows(fl_ps_table *t, uint64_t rows, size_t n, uint32_t dim, int steps,
                       uint64_t *rng) {
  uint64_t *keys = malloc((n ? n : 1) * sizeof *keys);
  float *g = malloc((n ? n : 1) * dim * sizeof *g);
  if (!keys || !g) exit(1);
  for (size_t i = 0; i < n; i++) {
    *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
    keys[i] = (*rng >> 17) % rows;
  }
  for (size_t i = 0; i < n * dim; i++) g[i] = 0.01f * (float)(i % 7);
  for (int s = 0; s < steps; s++) {
    size_t lo = n * (size_t)s / (size_t)steps, hi = n * (size_t)(s + 1) / (size_t)steps;
    if (hi > lo && fl_ps_table_push(t, keys + lo, hi - lo, g + lo * dim) != FL_OK) exit(1);
  }
  free(keys);
  free(g);
}

/* The chain's figures (the tier's): its copies' disk use against what
 * the intervals changed on disk (demoted rows). */
static void print_chain(int rounds, const double *db, double demoted, double disk_rows) {
  double base = chain_use(0), all = chain_use(rounds), files = 0, row_bytes, changed;
  for (int r = 0; r < rounds; r++) files += db[r];
  row_bytes = disk_rows > 0 ? base / disk_rows : 0;
  changed = (demoted / rounds) * row_bytes + files / rounds;
  printf("chain_base_copy_bytes: %.0f bytes\nchain_bytes_after_deltas: %.0f bytes\n"
         "chain_deltas: %d deltas\nchain_growth_per_delta_bytes: %.0f bytes\n"
         "chain_demoted_rows_per_delta: %.0f rows\nchain_changed_bytes_per_delta: %.0f bytes\n"
         "chain_growth_over_changed: %.2f ratio\n",
         base, all + files, rounds, (all - base + files) / rounds, demoted / rounds, changed,
         changed > 0 ? (all - base + files) / rounds / changed : 0);
}

int main(int argc, char **argv) {
  uint64_t rows = 1000000, rng = 42;
  uint32_t dim = 16;
  double touch = 0.01;
  int rounds = 5, steps = 1;
  const char *dir = "/tmp";
  size_t budget = 0;
  _Atomic uint64_t hot = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rows")) rows = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--dim")) dim = (uint32_t)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--touch")) touch = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!strcmp(argv[i], "--budget")) budget = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
  }
  if (rounds < 1 || rounds > 100 || !dim || rows < 1 || steps < 1) return 2;
  fl_ps_table_opts o;
  fl_ps_table *t = NULL;
  memset(&o, 0, sizeof o);
  o.name = "emb";
  o.dim = dim;
  o.max_rows = (int64_t)rows;
  o.init_range = 0.01f;
  o.seed = 1;
  o.hp = fl_optim_hparams_default(FL_OPTIM_ADAGRAD);
  o.lr = 0.05f;
  o.track_changes = 1;
  if (budget) {
    char store[4200];
    snprintf(store, sizeof store, "%s/bench_delta_store", dir);
    snprintf(bench_dir, sizeof bench_dir, "%s", dir);
    if (fl_ps_tier_open(store, budget, &tier) != FL_OK) return 1;
    o.tier = tier;
    o.hot_bytes = &hot;
    o.hot_budget = budget - fl_ps_tier_overhead(budget);
  }
  if (fl_ps_table_create(&o, &t) != FL_OK) return 1;
  /* Fill: every row, in batches. */
  for (uint64_t k = 0; k < rows; k += 65536) {
    size_t n = (size_t)(rows - k < 65536 ? rows - k : 65536);
    uint64_t *keys = malloc(n * sizeof *keys);
    float *v = malloc(n * dim * sizeof *v);
    for (size_t i = 0; i < n; i++) keys[i] = k + i;
    if (fl_ps_table_pull(t, keys, n, v) != FL_OK) return 1;
    free(keys);
    free(v);
  }
  char full_path[4096], delta_path[4096];
  snprintf(full_path, sizeof full_path, "%s/bench_delta_full.flc", dir);
  snprintf(delta_path, sizeof delta_path, "%s/bench_delta_delta.flc", dir);
  double fb[100], db[100], fs[100], ds[100], fm[100], dm[100], cb[100], cs[100], wb[100], ws[100];
  double cc[100], wc[100];
  double scratch;
  size_t n_touch = (size_t)((double)rows * touch);
  fl_ps_tier_stats ts0, ts1;
  double demoted = 0, disk_rows = 0;
  write_one(t, full_path, 0, &scratch); /* the base */
  copy_chain(0);
  copy_whole();
  if (tier) {
    fl_ps_tier_get_stats(tier, &ts0);
    disk_rows = (double)ts0.rows;
  }
  for (int r = 0; r < rounds; r++) {
    /* Both see the same interval: a delta of it, then the whole table. */
    touch_rows(t, rows, n_touch, dim, steps, &rng);
    if (tier) {
      fl_ps_tier_get_stats(tier, &ts1);
      demoted += (double)(ts1.demotions - ts0.demotions);
      ts0 = ts1;
    }
    cs[r] = now_s();
    cb[r] = copy_chain(r + 1);
    cs[r] = now_s() - cs[r];
    cc[r] = copy_cpu;
    ws[r] = now_s();
    wb[r] = copy_whole();
    ws[r] = now_s() - ws[r];
    wc[r] = copy_cpu;
    dm[r] = build_mem(t, 1);
    db[r] = write_one(t, delta_path, 1, &ds[r]);
    fb[r] = write_one(t, full_path, 0, &fs[r]);
    fm[r] = build_mem(t, 0);
  }
  double mcb = median(cb, rounds), mcs = median(cs, rounds);
  double mwb = median(wb, rounds), mws = median(ws, rounds);
  double mfb = median(fb, rounds) + mwb, mdb = median(db, rounds) + mcb;
  double mfs = median(fs, rounds) + mws, mds = median(ds, rounds) + mcs;
  printf("scale_rows: %llu rows\nscale_dim: %u floats\nscale_touched: %zu rows per interval\n",
         (unsigned long long)rows, dim, n_touch);
  if (tier)
    printf("scale_budget: %zu bytes\nscale_memory_rows: %zu rows\ntier_copy_bytes: %.0f bytes\n"
           "tier_copy_seconds: %.4f s\ntier_whole_copy_bytes: %.0f bytes\n"
           "tier_whole_copy_seconds: %.4f s\n",
           budget, fl_ps_table_rows(t), mcb, mcs, mwb, mws);
  if (tier)
    printf("tier_copy_cpu_seconds: %.4f s\ntier_whole_copy_cpu_seconds: %.4f s\n",
           median(cc, rounds), median(wc, rounds));
  printf("full_ckpt_bytes: %.0f bytes\ndelta_ckpt_bytes: %.0f bytes\n", mfb, mdb);
  printf("delta_ckpt_bytes_over_full: %.4f ratio\n", mdb / mfb);
  printf("full_ckpt_seconds: %.4f s\ndelta_ckpt_seconds: %.4f s\n", mfs, mds);
  printf("delta_ckpt_seconds_over_full: %.4f ratio\n", mds / mfs);
  double mfm = median(fm, rounds), mdm = median(dm, rounds);
  printf("full_mem_seconds: %.4f s\ndelta_mem_seconds: %.4f s\n", mfm, mdm);
  printf("delta_mem_seconds_over_full: %.4f ratio\n", mdm / mfm);
  if (tier) print_chain(rounds, db, demoted, disk_rows);
  unlink(full_path);
  unlink(delta_path);
  fl_ps_table_free(t);
  if (tier) {
    char store[4200];
    snprintf(store, sizeof store, "%s/bench_delta_store", dir);
    fl_ps_tier_close(tier);
    for (int r = 0; r <= rounds; r++) {
      chain_dir(r, store, sizeof store);
      fl_ps_tier_remove_copy(store);
    }
    snprintf(store, sizeof store, "%s/bench_delta_whole", dir);
    fl_ps_tier_remove_copy(store);
    snprintf(store, sizeof store, "%s/bench_delta_store", dir);
    fl_ps_tier_remove_copy(store);
  }
  return 0;
}
