/* coll_check_rank.c - one rank of the many-node allreduce check
 * (test_netns_algos.sh): started in its own network namespace, it takes
 * its place like flotilla-trainer does (FLOTILLA_* variables), runs one
 * allreduce algorithm (--algorithm) over every size of --sizes (elements)
 * and every dtype (f32, f64, f16, bf16), and checks each result:
 *   - against the sum of every rank's input computed here in double (each
 *     rank's input is a function of (rank, index), so every rank knows all
 *     of them), within the rounding of the dtype: every element up to
 *     65,536, a spread sample and the last one beyond;
 *   - identical on every rank (an allgather of the result's FNV-1a hash).
 * Rank 0 prints one line per (size, dtype), `hash SIZE DTYPE HEX`, that the
 * script compares between two runs of the same algorithm (bitwise
 * reproducible), then `ok`.  Exit 0 when every check held, 1 otherwise
 * (the first failure printed with rank, size, dtype and index). */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_cluster.h"
#include "fl_coll.h"

#define MAXS 12

typedef struct dtype_row {
  const char *name;
  fl_coll_dtype dt;
  size_t size;
  double rel; /* allowed error relative to the sum of magnitudes */
} dtype_row;

static const dtype_row k_dtypes[] = {
    {"f32", FL_COLL_F32, 4, 1e-5},
    {"f64", FL_COLL_F64, 8, 1e-12},
    {"f16", FL_COLL_F16, 2, 1e-2},
    {"bf16", FL_COLL_BF16, 2, 6e-2},
};

/* Rank r's input at index k: a non-integer value, so that the order of
 * the sum shows in the bits. */
static double input(int r, size_t k) {
  return sin((double)(k + 1) * 0.37 + (double)r * 1.91) * (1.0 + (double)(r % 3));
}

static uint16_t to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e < 113) return (uint16_t)sign; /* below 2^-14: zero (within the tolerance) */
  if (e > 142) return (uint16_t)(sign | 0x7c00u);
  uint32_t h = ((e - 112) << 10) | (m >> 13), rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static float from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0) {
    float v = ldexpf((float)m, -24);
    return sign ? -v : v;
  }
  x = sign | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static float from_bf16(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static void put(const dtype_row *d, void *buf, size_t k, double v) {
  switch (d->dt) {
  case FL_COLL_F32: ((float *)buf)[k] = (float)v; break;
  case FL_COLL_F64: ((double *)buf)[k] = v; break;
  case FL_COLL_F16: ((uint16_t *)buf)[k] = to_half((float)v); break;
  case FL_COLL_BF16: ((uint16_t *)buf)[k] = to_bf16((float)v); break;
  }
}

static double get(const dtype_row *d, const void *buf, size_t k) {
  switch (d->dt) {
  case FL_COLL_F32: return ((const float *)buf)[k];
  case FL_COLL_F64: return ((const double *)buf)[k];
  case FL_COLL_F16: return from_half(((const uint16_t *)buf)[k]);
  case FL_COLL_BF16: return from_bf16(((const uint16_t *)buf)[k]);
  }
  return NAN;
}

static uint64_t fnv(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

/* Whether element k of the result buf is the sum of the n ranks' inputs
 * (as dtype d holds them), within d's rounding; says where when not. */
static int right_at(const dtype_row *d, const void *buf, size_t count, size_t k, int n, int me) {
  double want = 0, mag = 0;
  for (int r = 0; r < n; r++) {
    uint8_t one[8];
    put(d, one, 0, input(r, k));
    want += get(d, one, 0);
    mag += fabs(get(d, one, 0));
  }
  double got = get(d, buf, k);
  if (fabs(got - want) <= d->rel * mag + 1e-30) return 1;
  fprintf(stderr, "rank %d: %s count %zu index %zu: got %.9g, want %.9g\n", me, d->name, count, k,
          got, want);
  return 0;
}

/* One (size, dtype): 0 when every check held. */
static int check_one(fl_coll *c, const dtype_row *d, size_t count, uint64_t *hashes) {
  const int n = fl_coll_world_size(c), me = fl_coll_rank(c);
  void *buf = malloc(count * d->size);
  if (!buf) return 1;
  for (size_t k = 0; k < count; k++) put(d, buf, k, input(me, k));
  int bad = fl_coll_allreduce(c, buf, count, d->dt) != FL_OK;
  /* every element up to 65,536, a spread sample and the last beyond (the
   * hash covers them all) */
  const size_t stride = count / 65536 + 1;
  for (size_t k = 0; k < count && !bad; k += stride) bad = !right_at(d, buf, count, k, n, me);
  if (!bad && count) bad = !right_at(d, buf, count, count - 1, n, me);
  uint64_t h = fnv(buf, count * d->size);
  free(buf);
  if (fl_coll_allgather(c, &h, sizeof h, hashes) != FL_OK) return 1;
  for (int r = 1; r < n; r++)
    if (hashes[r] != hashes[0]) {
      fprintf(stderr, "rank %d: %s count %zu: rank %d's result differs from rank 0's\n", me,
              d->name, count, r);
      bad = 1;
    }
  if (me == 0 && !bad)
    printf("hash %zu %s %016llx\n", count, d->name, (unsigned long long)hashes[0]);
  return bad;
}

int main(int argc, char **argv) {
  size_t sizes[MAXS];
  int nsizes = 0;
  const char *algorithm = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--algorithm")) {
      algorithm = argv[i + 1];
    } else if (!strcmp(argv[i], "--sizes")) {
      char *list = strdup(argv[i + 1]), *save = NULL;
      for (char *t = strtok_r(list, ",", &save); t && nsizes < MAXS; t = strtok_r(NULL, ",", &save))
        sizes[nsizes++] = (size_t)strtoull(t, NULL, 10);
      free(list);
    }
  }
  if (!algorithm || !nsizes) {
    fprintf(stderr, "usage: coll_check_rank --algorithm NAME --sizes N,N,...\n");
    return 2;
  }
  fl_cluster cl;
  if (fl_cluster_from_env(&cl) != FL_OK || fl_cluster_validate(&cl, FL_MODE_COLLECTIVE) != FL_OK ||
      fl_cluster_load_token(&cl, NULL) != FL_OK)
    return 2;
  fl_coll_options o = fl_coll_options_default();
  o.rank = cl.trainer_id;
  o.world_size = cl.trainers_num;
  o.endpoints = cl.trainer_endpoints;
  o.token = cl.token;
  o.backend = cl.collective_backend[0] ? cl.collective_backend : NULL;
  o.algorithm = algorithm;
  o.timeout_s = 60;
  fl_coll *c = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 1;
  uint64_t *hashes = calloc((size_t)fl_coll_world_size(c), sizeof *hashes);
  int bad = !hashes;
  for (int s = 0; s < nsizes && !bad; s++)
    for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0] && !bad; d++)
      bad = check_one(c, &k_dtypes[d], sizes[s], hashes);
  if (!bad && fl_coll_rank(c) == 0) printf("ok\n");
  free(hashes);
  fl_coll_destroy(c);
  return bad;
}
