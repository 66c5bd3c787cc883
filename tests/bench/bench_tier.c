/* bench_tier.c - one sparse table (32-float rows, row-wise Adagrad) all in
 * memory or with the disk tier (pserver.memory_budget), in this process:
 *   bench_tier memory|tier|tier_deltas IDS BATCHES DIR [BUDGET]
 * fills the table with IDS distinct ids in batches of 4096 (prints
 * table_fill_rows_per_s), then pulls and pushes BATCHES batches of 4096
 * ids drawn from Zipf(1.05) over the ids (prints pull_push_rows_per_s),
 * the process's peak RSS beside the budget (tier: BUDGET bytes, default
 * 10% of the table's row bytes; RocksDB's share of it is
 * fl_ps_tier_overhead), the bytes it read from disk, and (tier) the
 * fraction of pulled rows that came from disk and the bytes read while
 * pulling and pushing, with where they went (per row promoted: from the
 * disk, the look-ups' block reads from the store's files; the
 * compactions' and flushes' bytes).  tier is the tier of a pserver without
 * delta checkpoints (pserver.checkpoint_delta off, the default:
 * fl_ps_tier_no_deltas), tier_deltas one with them (each demotion and
 * removal also appended to the record the next delta's copy is written
 * from; no checkpoint is taken).  The store goes
 * under DIR.  tests/bench/bench_tier.sh runs both and the ratio;
 * bench_tier_cgroup.sh runs the tier in a memory cgroup. */
#include <config.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "fl_names.h"
#include "fl_ps.h"
#include "fl_ps_layout.h"
#include "tier_rocks.h"

#define DIM 32
#define BATCH 4096

/* The modes: the table's tiers and whether the tier records for deltas. */
static const struct mode {
  const char *name;
  int tiered, deltas;
} modes[] = {
    {"memory", 0, 0},
    {"tier", 1, 0},
    {"tier_deltas", 1, 1},
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the process, every thread (RocksDB's background ones
 * too): on a loaded machine rows per CPU second compare better than
 * rows per wall second. */
static double cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Zipf(s) over [0, n) without a table (its n doubles would count
 * against the budget): the inverse of the continuous power law's CDF over
 * [1, n + 1), floored; the ranks are scattered over the id space. */
static uint64_t zipf_draw(size_t n, double s, uint64_t *rng) {
  double u, e = 1.0 - s, x;
  uint64_t r;
  *rng = fl_ps_mix64(*rng + 0x9e3779b97f4a7c15ULL);
  u = (double)(*rng >> 11) * (1.0 / 9007199254740992.0);
  x = pow((pow((double)n + 1.0, e) - 1.0) * u + 1.0, 1.0 / e);
  r = (uint64_t)x - 1;
  return fl_ps_mix64(r < n ? r : n - 1);
}

/* Bytes this process read from the disk (/proc/self/io); 0 when unknown. */
static unsigned long long read_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  char line[128];
  unsigned long long v = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "read_bytes: %llu", &v) == 1) break;
  if (f) fclose(f);
  return v;
}

/* Where pull+push's reads went: the bytes read from disk (rd) per row
 * promoted from it (misses), the look-ups' block reads from the store's
 * files (this thread's; page cache or disk) and the compactions' and
 * flushes' bytes since io0. */
static void print_split(const char *mode, fl_ps_tier *tier, const fl_ps_tier_io *io0,
                        unsigned long long rd, uint64_t misses) {
  fl_ps_tier_io io;
  double m = misses ? (double)misses : 1.0;
  fl_ps_tier_get_io(tier, &io);
  printf("%s pull_push_disk_read_bytes: %llu bytes\n", mode, rd);
  printf("%s pull_push_disk_read_per_miss: %.0f bytes (from the disk, per row promoted)\n", mode,
         (double)rd / m);
  printf("%s pull_push_lookup_blocks_per_miss: %.2f blocks (%.0f bytes; read from the store's "
         "files by look-ups and scans, page cache or disk)\n",
         mode, (double)io.user_blocks / m, (double)io.user_bytes / m);
  printf("%s pull_push_compaction_read_bytes: %.0f MB (written %.0f MB, flushed %.0f MB)\n", mode,
         (double)(io.compaction_read - io0->compaction_read) / 1e6,
         (double)(io.compaction_written - io0->compaction_written) / 1e6,
         (double)(io.flushed - io0->flushed) / 1e6);
}

int main(int argc, char **argv) {
  static uint64_t keys[BATCH];
  static float g[BATCH * DIM], out[BATCH * DIM];
  fl_ps_table_opts o;
  fl_ps_table *t = NULL;
  fl_ps_tier *tier = NULL;
  _Atomic uint64_t hot = 0;
  size_t ids, batches, row = 8 + (DIM + 1) * 4 + 24;
  uint64_t budget = 0, rng = 1;
  double t0, c0, el;
  struct rusage ru;
  fl_ps_tier_stats st0 = {0};
  fl_ps_tier_io io0 = {0};
  unsigned long long rd0;
  const struct mode *md = NULL;

  int mi = argc >= 2 ? FL_ROWS_FIND(modes, argv[1]) : -1;
  if ((argc != 5 && argc != 6) || mi < 0) {
    fprintf(stderr, "usage: bench_tier memory|tier|tier_deltas IDS BATCHES DIR [BUDGET]\n");
    return 2;
  }
  md = &modes[mi];
  ids = strtoull(argv[2], NULL, 10);
  batches = strtoull(argv[3], NULL, 10);
  memset(&o, 0, sizeof o);
  o.name = "emb";
  o.dim = DIM;
  o.max_rows = (int64_t)ids;
  o.init_range = 0.01f;
  o.seed = 1;
  o.hp = fl_optim_hparams_default(FL_OPTIM_ROWWISE_ADAGRAD);
  o.lr = 0.05f;
  if (md->tiered) {
    char path[4096];
    budget = argc == 6 ? strtoull(argv[5], NULL, 10) : (uint64_t)(ids * row / 10);
    snprintf(path, sizeof path, "%s/bench_tier.rocksdb", argv[4]);
    if (fl_ps_tier_open(path, budget, &tier) != FL_OK) return 1;
    if (!md->deltas) fl_ps_tier_no_deltas(tier); /* a pserver without pserver.checkpoint_delta */
    o.tier = tier;
    o.hot_bytes = &hot;
    o.hot_budget = budget - fl_ps_tier_overhead(budget);
  }
  if (fl_ps_table_create(&o, &t) != FL_OK) return 1;
  for (size_t i = 0; i < BATCH * DIM; i++) g[i] = 0.001f * (float)(i % 7);

  t0 = now();
  c0 = cpu();
  for (size_t b = 0; b * BATCH < ids; b++) {
    size_t n = ids - b * BATCH < BATCH ? ids - b * BATCH : BATCH;
    for (size_t i = 0; i < n; i++) keys[i] = fl_ps_mix64(b * BATCH + i);
    if (fl_ps_table_push(t, keys, n, g) != FL_OK) return 1;
  }
  el = now() - t0;
  printf("%s table_fill_rows_per_s: %.0f rows/s (%zu rows, %.1f s)\n", argv[1],
         (double)ids / el, ids, el);
  printf("%s table_fill_rows_per_cpu_s: %.0f rows/s\n", argv[1], (double)ids / (cpu() - c0));

  if (tier) {
    fl_ps_tier_get_stats(tier, &st0);
    fl_ps_tier_get_io(tier, &io0);
    fl_ps_tier_io_begin();
  }
  rd0 = read_bytes();
  t0 = now();
  c0 = cpu();
  for (size_t b = 0; b < batches; b++) {
    for (size_t i = 0; i < BATCH; i++) keys[i] = zipf_draw(ids, 1.05, &rng);
    if (fl_ps_table_pull(t, keys, BATCH, out) != FL_OK ||
        fl_ps_table_push(t, keys, BATCH, g) != FL_OK)
      return 1;
  }
  el = now() - t0;
  printf("%s pull_push_rows_per_s: %.0f rows/s (%zu batches of %d, %.1f s)\n", argv[1],
         (double)batches * BATCH / el, batches, BATCH, el);
  printf("%s pull_push_rows_per_cpu_s: %.0f rows/s\n", argv[1],
         (double)batches * BATCH / (cpu() - c0));
  if (tier) {
    fl_ps_tier_stats st;
    fl_ps_tier_get_stats(tier, &st);
    printf("%s pull_push_miss_fraction: %.3f (rows promoted from disk per row pulled)\n", argv[1],
           (double)(st.promotions - st0.promotions) / ((double)batches * BATCH));
    print_split(argv[1], tier, &io0, read_bytes() - rd0, st.promotions - st0.promotions);
    printf("%s rows: %zu in memory, %llu on disk (%.1f MB); %llu promotions, %llu demotions\n",
           argv[1], fl_ps_table_rows(t), (unsigned long long)st.rows, (double)st.bytes / 1e6,
           (unsigned long long)st.promotions, (unsigned long long)st.demotions);
  }
  getrusage(RUSAGE_SELF, &ru);
  printf("%s peak_rss: %.1f MB (budget %.1f MB; table in memory %.1f MB)\n", argv[1],
         (double)ru.ru_maxrss / 1024.0, (double)budget / 1e6, (double)(ids * row) / 1e6);
  printf("%s disk_read_bytes: %llu bytes\n", argv[1], read_bytes());
  fl_ps_table_free(t);
  fl_ps_tier_close(tier);
  return 0;
}
