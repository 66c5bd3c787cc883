/* bench_allreduce.c - bus bandwidth of the collective engine's allreduce
 * on one machine: every backend (tcp, shm, hierarchical shm+tcp with the
 * ranks split over 127.0.0.2 and 127.0.0.3), 2 and 4 ranks, 64 KiB to
 * 64 MiB of fp32, and memcpy bandwidth of the same machine as the bound.
 *
 * Each rank is a forked process.  An iteration is: barrier, allreduce,
 * then the ranks' times are gathered and the slowest counts; the figure is
 * the median over the iterations.  Bus bandwidth = size * 2(n-1)/n / time
 * (the bytes each rank must send and receive in a ring, as nccl-tests
 * reports it), in GB/s (1e9 bytes).  Prints `name: value unit` lines:
 *   memcpy_gbps: 9.8 GB/s
 *   busbw_tcp_2r_16MiB: 2.1 GB/s
 * Options: --quick (fewer iterations), --backends tcp,shm,hier,
 * --ranks 2,4, --sizes 64K,1M,16M,64M, --rings N, --chunk BYTES,
 * --algorithm ring|halving_doubling|tree|auto (default ring; another one
 * is named in the figures: busbw_tcp-tree_4r_1MiB).  shm runs its direct
 * reduce (busbw_shm_...) unless --algorithm is given, which runs that
 * algorithm over the shared-memory transport (busbw_shm-ring_...).
 * Never a pass/fail test. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/coll_testutil.h"
#include "fl_log.h"

#define MAXS 8

typedef struct cfg {
  const char *backend; /* "tcp", "shm", "hier" */
  int n;
  size_t sizes[MAXS];
  int nsizes;
  int quick;
  int rings;
  size_t chunk;
  const char *algorithm;
  int algorithm_given; /* --algorithm on the command line */
  double *out; /* shared: median seconds per size (rank 0 writes) */
} cfg;

static int iters_for(size_t bytes, int quick) {
  int it = bytes <= (64u << 10) ? 200 : bytes <= (1u << 20) ? 60 : bytes <= (16u << 20) ? 12 : 6;
  return quick ? (it + 3) / 4 : it;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int rank_main(ct_job *j, int r, void *arg) {
  cfg *cf = arg;
  int hier = strcmp(cf->backend, "hier") == 0;
  fl_coll_options o = ct_opts(j, r, hier ? "auto" : cf->backend, 60.0);
  o.hierarchical = hier;
  o.nrings = cf->rings;
  o.chunk_bytes = cf->chunk;
  int direct = !strcmp(cf->backend, "shm") && !cf->algorithm_given;
  o.algorithm = direct ? NULL : cf->algorithm;
  fl_coll *c = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 10;
  int rc = 0;
  for (int si = 0; si < cf->nsizes && !rc; si++) {
    size_t bytes = cf->sizes[si], n = bytes / sizeof(float);
    float *buf = malloc(bytes);
    if (!buf) {
      rc = 11;
      break;
    }
    for (size_t i = 0; i < n; i++) buf[i] = (float)((i + (size_t)r) % 7) * 0.5f;
    int it = iters_for(bytes, cf->quick);
    double *t = malloc((size_t)it * sizeof(double)), all[CT_MAX_RANKS];
    for (int w = 0; w < 2 && !rc; w++) /* warm-up: first touch, socket buffers */
      if (fl_coll_allreduce(c, buf, n, FL_COLL_F32) != FL_OK) rc = 12;
    for (int k = 0; k < it && !rc; k++) {
      if (fl_coll_barrier(c) != FL_OK) {
        rc = 13;
        break;
      }
      double t0 = ct_now();
      if (fl_coll_allreduce(c, buf, n, FL_COLL_F32) != FL_OK) {
        rc = 12;
        break;
      }
      double dt = ct_now() - t0;
      if (fl_coll_allgather(c, &dt, sizeof(dt), all) != FL_OK) {
        rc = 14;
        break;
      }
      t[k] = 0;
      for (int q = 0; q < j->n; q++)
        if (all[q] > t[k]) t[k] = all[q];
    }
    if (!rc && r == 0) {
      qsort(t, (size_t)it, sizeof(double), cmp_d);
      cf->out[si] = t[it / 2];
    }
    free(t);
    free(buf);
  }
  fl_coll_destroy(c);
  return rc;
}

static double memcpy_gbps(int quick) {
  size_t bytes = (size_t)64 << 20;
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) return 0;
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  int it = quick ? 5 : 15;
  double t[15];
  for (int k = 0; k < it; k++) {
    double t0 = ct_now();
    memcpy(b, a, bytes);
    t[k] = ct_now() - t0;
    a[k] = b[bytes - 1 - (size_t)k]; /* keep the copies observable */
  }
  qsort(t, (size_t)it, sizeof(double), cmp_d);
  free(a);
  free(b);
  return (double)bytes / t[it / 2] / 1e9;
}

static const char *size_name(size_t b, char *out, size_t cap) {
  if (b >= (1u << 20))
    snprintf(out, cap, "%zuMiB", b >> 20);
  else
    snprintf(out, cap, "%zuKiB", b >> 10);
  return out;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  return (size_t)v;
}

int main(int argc, char **argv) {
  const char *backends = "tcp,shm,hier", *ranks = "2,4", *sizes = "64K,1M,16M,64M";
  cfg base;
  memset(&base, 0, sizeof base);
  base.rings = 1;
  base.algorithm = "ring";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      base.quick = 1;
    else if (!strcmp(argv[i], "--backends") && i + 1 < argc)
      backends = argv[++i];
    else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
      ranks = argv[++i];
    else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
      sizes = argv[++i];
    else if (!strcmp(argv[i], "--rings") && i + 1 < argc)
      base.rings = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
      base.chunk = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "--algorithm") && i + 1 < argc)
      base.algorithm = argv[++i], base.algorithm_given = 1;
    else {
      fprintf(stderr,
              "usage: %s [--quick] [--backends tcp,shm,hier] [--ranks 2,4] "
              "[--sizes 64K,1M,16M,64M] [--rings N] [--chunk BYTES] [--algorithm NAME]\n",
              argv[0]);
      return 2;
    }
  }
  fl_log_set_level(FL_LOG_WARN);
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s", sizes);
  for (char *tok = strtok(tmp, ","); tok && base.nsizes < MAXS; tok = strtok(NULL, ","))
    base.sizes[base.nsizes++] = parse_size(tok);
  printf("memcpy_gbps: %.2f GB/s\n", memcpy_gbps(base.quick));
  fflush(stdout);
  base.out = ct_shared(MAXS * sizeof(double));
  if (!base.out) return 1;
  char bl[128];
  snprintf(bl, sizeof bl, "%s", backends);
  char *bsave = NULL;
  for (char *be = strtok_r(bl, ",", &bsave); be; be = strtok_r(NULL, ",", &bsave)) {
    char rl[64];
    snprintf(rl, sizeof rl, "%s", ranks);
    char *rsave = NULL;
    for (char *rt = strtok_r(rl, ",", &rsave); rt; rt = strtok_r(NULL, ",", &rsave)) {
      cfg cf = base;
      cf.backend = be;
      cf.n = atoi(rt);
      if (cf.n < 2 || cf.n > CT_MAX_RANKS) continue;
      const char *hosts[CT_MAX_RANKS];
      for (int r = 0; r < cf.n; r++)
        hosts[r] = !strcmp(be, "hier") ? (r < cf.n / 2 ? "127.0.0.2" : "127.0.0.3") : "127.0.0.1";
      ct_job j;
      if (ct_job_init(&j, cf.n, hosts) != 0) return 1;
      for (int si = 0; si < cf.nsizes; si++) cf.out[si] = 0;
      if (ct_run(&j, rank_main, &cf, 600.0) != 0) {
        fprintf(stderr, "bench_allreduce: %s with %d ranks failed\n", be, cf.n);
        continue;
      }
      for (int si = 0; si < cf.nsizes; si++) {
        char sn[32];
        double bus = (double)cf.sizes[si] * 2.0 * (cf.n - 1) / cf.n / cf.out[si] / 1e9;
        int named = strcmp(cf.algorithm, "ring") || (!strcmp(be, "shm") && cf.algorithm_given);
        printf("busbw_%s%s%s_%dr_%s: %.2f GB/s\n", be, named ? "-" : "", named ? cf.algorithm : "",
               cf.n,
               size_name(cf.sizes[si], sn, sizeof sn), bus);
      }
      fflush(stdout);
    }
  }
  return 0;
}
