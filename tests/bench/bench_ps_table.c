/* bench_ps_table.c - a pserver's sparse-table loop alone (no RPC, no core):
 * the DLRM example's tables (deploy/examples/recsys/dlrm_sync.yaml: 26
 * tables of 10,000 rows of 8 floats, Adagrad, each in 16 lock stripes as
 * a pserver of several threads with the default max_rows keeps them, or
 * in the stripes asked for: 1 as a pserver of one thread), rows 0..9999 first set
 * as init from_model does, then steps of 256 ids a table (60% drawn from
 * 200 hot ids, the rest from all 10,000; a fixed seed), each table's
 * distinct ids pulled then pushed stripe by stripe as the core does.  It
 * times the pulls and pushes only, in this thread's CPU time, so that a
 * loaded machine's waits do not count; the figure is the median of the
 * repetitions.  Memory-bound: it measures the rows' layout.
 *
 * Output: ps_table_stripes (the stripes a table), ps_table_loop_cpu_s (one
 * pass of the steps), ps_table_rows_per_cpu_s (rows pulled and pushed per
 * CPU second).  Not a pass/fail test.
 * Usage: bench_ps_table [repetitions (default 7)] [steps (default 390)]
 *                       [stripes: 1, 2, 4, 8 or 16 (default 16)] */
#include <config.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fl_log.h"
#include "fl_ps.h"

enum { TABLES = 26, STRIPES = 16 /* at most */, ROWS = 10000, DIM = 8, BATCH = 256, HOT = 200 };

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Table i's ns stripes, created and holding rows 0..ROWS-1 (the model's). */
static fl_status make_table(int i, unsigned ns, fl_ps_table **s) {
  char name[64];
  static uint64_t keys[ROWS];
  static float rows[ROWS * DIM];
  snprintf(name, sizeof name, "tables.bags.%d.weight", i);
  for (unsigned k = 0; k < ns; k++) {
    fl_ps_table_opts o;
    size_t n = 0, made;
    memset(&o, 0, sizeof o);
    o.name = name;
    o.dim = DIM;
    o.max_rows = 1000000 / ns;
    o.init_range = 0.01f;
    o.seed = 1;
    o.hp = fl_optim_hparams_default(FL_OPTIM_ADAGRAD);
    o.lr = 0.05f;
    o.now = 1;
    FL_TRY(fl_ps_table_create(&o, &s[k]));
    for (uint64_t id = 0; id < ROWS; id++)
      if (fl_ps_table_stripe(id, ns) == k) {
        for (size_t d = 0; d < DIM; d++) rows[n * DIM + d] = (float)((id * DIM + d) % 97) * 1e-3f;
        keys[n++] = id;
      }
    FL_TRY(fl_ps_table_init(s[k], keys, n, rows, &made));
  }
  return FL_OK;
}

/* One pass of steps over the tables of nstr stripes; *cpu gets the pulls'
 * and pushes' CPU seconds, *rows the rows they moved. */
static fl_status pass(fl_ps_table *t[TABLES][STRIPES], unsigned nstr, int steps, uint64_t *seed,
                      double *cpu, size_t *rows) {
  static uint64_t ids[STRIPES][BATCH];
  static float buf[BATCH * DIM];
  size_t ns[STRIPES];
  uint64_t u[BATCH];
  *cpu = 0;
  *rows = 0;
  for (int st = 0; st < steps; st++)
    for (int i = 0; i < TABLES; i++) {
      for (int b = 0; b < BATCH; b++) {
        const uint64_t x = xorshift(seed);
        u[b] = x % 100 < 60 ? (x >> 8) % HOT : (x >> 8) % ROWS;
      }
      qsort(u, BATCH, sizeof *u, cmp_u64);
      memset(ns, 0, sizeof ns);
      for (int b = 0; b < BATCH; b++)
        if (!b || u[b] != u[b - 1]) {
          const unsigned k = fl_ps_table_stripe(u[b], nstr);
          ids[k][ns[k]++] = u[b];
        }
      const double a = cpu_now();
      for (unsigned k = 0; k < nstr; k++)
        if (ns[k]) FL_TRY(fl_ps_table_pull(t[i][k], ids[k], ns[k], buf));
      for (unsigned k = 0; k < nstr; k++) {
        if (!ns[k]) continue;
        for (size_t q = 0; q < ns[k] * DIM; q++) buf[q] = 1e-3f * (float)(q % 7);
        FL_TRY(fl_ps_table_push(t[i][k], ids[k], ns[k], buf));
        *rows += 2 * ns[k];
      }
      *cpu += cpu_now() - a;
    }
  return FL_OK;
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 7, steps = argc > 2 ? atoi(argv[2]) : 390;
  const int ns = argc > 3 ? atoi(argv[3]) : STRIPES;
  static fl_ps_table *t[TABLES][STRIPES];
  double *cpu;
  size_t rows = 0;
  uint64_t seed = 88172645463325252ULL;
  fl_status st = FL_OK;
  if (reps < 1 || steps < 1 || ns < 1 || ns > STRIPES || (ns & (ns - 1))) {
    fprintf(stderr, "usage: bench_ps_table [repetitions >= 1] [steps >= 1] "
                    "[stripes: 1, 2, 4, 8 or 16]\n");
    return 2;
  }
  if (!(cpu = calloc((size_t)reps, sizeof *cpu))) return 1;
  for (int i = 0; i < TABLES && st == FL_OK; i++) st = make_table(i, (unsigned)ns, t[i]);
  for (int r = 0; r < reps && st == FL_OK; r++)
    st = pass(t, (unsigned)ns, steps, &seed, &cpu[r], &rows);
  if (st == FL_OK) {
    qsort(cpu, (size_t)reps, sizeof *cpu, cmp_double);
    const double med = reps % 2 ? cpu[reps / 2] : (cpu[reps / 2 - 1] + cpu[reps / 2]) / 2;
    printf("ps_table_stripes: %d\n", ns);
    printf("ps_table_loop_cpu_s: %.3f s\n", med);
    printf("ps_table_rows_per_cpu_s: %.0f rows/s\n", (double)rows / med);
  }
  for (int i = 0; i < TABLES; i++)
    for (int k = 0; k < ns; k++) fl_ps_table_free(t[i][k]);
  free(cpu);
  return st == FL_OK ? 0 : 1;
}
