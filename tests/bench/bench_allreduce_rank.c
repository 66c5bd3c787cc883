/* bench_allreduce_rank.c - one rank of an allreduce benchmark spread over
 * machines (or network namespaces): unlike bench_allreduce, which forks
 * every rank on this host, each rank is started where it should run, by
 * whatever launcher (tests/bench/run_bench_netns.sh uses `ip netns exec`),
 * and takes its place like flotilla-trainer does: FLOTILLA_* variables or a
 * cluster engine's (fl_cluster_from_engines).
 *
 * An iteration is: barrier, allreduce of SIZE bytes of fp32, then the
 * ranks' times are gathered and the slowest counts; the figure is the
 * median over the iterations.  Rank 0 prints, per size,
 *   busbw_LABEL_16MiB: 0.93 GB/s       (size * 2(n-1)/n / time, 1e9 bytes)
 *   time_LABEL_16MiB: 0.0321 s
 *   # pick_LABEL_16MiB: ring          (the algorithm the tuning runs there)
 * Options: --sizes 1M,16M,64M  --iters N (per size; default 5)
 *          --hier (use_hierarchical_allreduce)  --rings N  --label NAME
 *          --timeout S (collective timeout, default 60).
 * Never pass/fail. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_internal.h"
#include "fl_cluster.h"
#include "fl_coll.h"
#include "fl_log.h"

#define MAXS 8

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* "64M" / "512K" / "1048576" -> bytes; 0 when malformed. */
static size_t parse_size(const char *s) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return 0;
  if (*end == 'K' || *end == 'k') v <<= 10, end++;
  else if (*end == 'M' || *end == 'm') v <<= 20, end++;
  return *end ? 0 : (size_t)v;
}

/* The algorithm c's tuning runs a bucket of bytes with (auto's pick,
 * halving_doubling's doubling variant told apart), or "?" when c has none
 * (one rank, shm). */
static const char *pick_name(const fl_coll *c, size_t bytes) {
  uint8_t blob[FL_COLL_TUNING_MAX];
  size_t len = 0;
  coll_tuning t;
  if (fl_coll_get_tuning(c, blob, sizeof blob, &len) != FL_OK || !len ||
      coll_tuning_decode(blob, len, &t) != FL_OK)
    return "?";
  int a = t.table[coll_table_bin(bytes)];
  return coll_algo_doubling(&t.m, a, t.n, bytes) ? "halving_doubling_by_doubling"
                                                 : coll_algo_names[a];
}

int main(int argc, char **argv) {
  size_t sizes[MAXS] = {1u << 20, 16u << 20, 64u << 20};
  int nsizes = 3, iters = 5, hier = 0, rings = 1;
  double timeout = 60;
  const char *label = "allreduce", *algorithm = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      char *list = strdup(argv[++i]), *save = NULL;
      nsizes = 0;
      for (char *t = strtok_r(list, ",", &save); t && nsizes < MAXS; t = strtok_r(NULL, ",", &save))
        if ((sizes[nsizes] = parse_size(t)) >= sizeof(float)) nsizes++;
      free(list);
    } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--rings") && i + 1 < argc) {
      rings = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
      timeout = atof(argv[++i]);
    } else if (!strcmp(argv[i], "--label") && i + 1 < argc) {
      label = argv[++i];
    } else if (!strcmp(argv[i], "--algorithm") && i + 1 < argc) {
      algorithm = argv[++i];
    } else if (!strcmp(argv[i], "--hier")) {
      hier = 1;
    } else {
      fprintf(stderr, "usage: bench_allreduce_rank [--sizes 1M,16M,64M] [--iters N] [--hier] "
                      "[--rings N] [--label NAME] [--timeout S] [--algorithm NAME]\n");
      return 2;
    }
  }
  if (nsizes == 0 || iters < 1 || iters > 1000 || rings < 1 || !(timeout > 0)) {
    fprintf(stderr, "bench_allreduce_rank: bad --sizes, --iters, --rings or --timeout\n");
    return 2;
  }
  fl_cluster cl;
  if (fl_cluster_from_env(&cl) != FL_OK || fl_cluster_from_engines(&cl, FL_MODE_COLLECTIVE) ||
      fl_cluster_validate(&cl, FL_MODE_COLLECTIVE) != FL_OK || fl_cluster_load_token(&cl, NULL))
    return 2;
  fl_coll_options o = fl_coll_options_default();
  o.rank = cl.trainer_id;
  o.world_size = cl.trainers_num;
  o.endpoints = cl.trainer_endpoints;
  o.token = cl.token;
  o.backend = cl.collective_backend[0] ? cl.collective_backend : NULL;
  o.hierarchical = hier;
  o.nrings = rings;
  o.timeout_s = timeout;
  o.algorithm = algorithm;
  fl_coll *c = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 1;
  int n = fl_coll_world_size(c), rank = fl_coll_rank(c), rc = 0;
  if (rank == 0)
    printf("# %s: %d ranks, backend %s, %d ring%s\n", label, n, fl_coll_backend_name(c), rings,
           rings == 1 ? "" : "s");
  double *times = calloc((size_t)iters, sizeof *times), *all = calloc((size_t)n, sizeof *all);
  for (int si = 0; si < nsizes && !rc && times && all; si++) {
    size_t bytes = sizes[si], cnt = bytes / sizeof(float);
    float *buf = malloc(bytes);
    if (!buf) {
      rc = 1;
      break;
    }
    for (size_t k = 0; k < cnt; k++) buf[k] = (float)(k % 7);
    for (int it = -1; it < iters && !rc; it++) { /* iteration -1: warm-up */
      double t;
      if (fl_coll_barrier(c) != FL_OK) rc = 1;
      t = now_s();
      if (!rc && fl_coll_allreduce(c, buf, cnt, FL_COLL_F32) != FL_OK) rc = 1;
      t = now_s() - t;
      if (!rc && fl_coll_allgather(c, &t, sizeof t, all) != FL_OK) rc = 1;
      if (rc || it < 0) continue;
      double worst = 0;
      for (int r = 0; r < n; r++)
        if (all[r] > worst) worst = all[r];
      times[it] = worst;
    }
    free(buf);
    if (rc || rank != 0) continue;
    qsort(times, (size_t)iters, sizeof *times, cmp_d);
    double med = times[iters / 2];
    char name[32];
    if (bytes >= (1u << 20)) snprintf(name, sizeof name, "%zuMiB", bytes >> 20);
    else snprintf(name, sizeof name, "%zuKiB", bytes >> 10);
    printf("busbw_%s_%s: %.4f GB/s\n", label, name, (double)bytes * 2.0 * (n - 1) / n / med / 1e9);
    printf("time_%s_%s: %.6f s\n", label, name, med);
    printf("# pick_%s_%s: %s\n", label, name, pick_name(c, bytes));
    fflush(stdout);
  }
  free(times);
  free(all);
  fl_coll_destroy(c);
  return rc;
}
