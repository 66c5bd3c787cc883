/* test_coll_algo.c - the allreduce algorithms written over the transports
 * (ring, halving-doubling, double binary tree) and the choice between
 * them.
 *
 * Results: 2 to 9 ranks over tcp (powers of two and not), each algorithm
 * switched in collective order with fl_coll_set_algorithm, sizes from one
 * element to a few MiB, fp32, fp16, bf16 and fp64.  Inputs that are
 * multiples of 1/4 small enough to be exact in every type must equal the
 * serial sum bit for bit under every algorithm (so each agrees with the
 * ring); random inputs must give the same bits on all ranks and in a
 * second run, whatever the piece size, and be within rounding of the
 * ring's.
 * Choice: the model's predictions (latency-bound small buckets leave the
 * ring, large ones go back to it; the order of the algorithms on a
 * synthetic network; the tree's piece, the same from the same tuning), auto's table broadcast from rank 0, an
 * explicit setting honoured, and a tuning restored from a checkpoint
 * reused instead of a probe (and dropped when the world size changed);
 * the probe's medians over interleaved rounds, with a stand-in clock whose
 * outliers must not move the choice. */
#include <config.h>

#include <check.h>
#include <math.h>

#include "coll_internal.h"
#include "coll_testutil.h"
#include "fl_ckpt.h"
#include "fl_optim.h"

#define MAX_CASES 160
static const char *const k_algos[] = {"ring", "halving_doubling", "tree"};
static const fl_coll_dtype k_types[] = {FL_COLL_F32, FL_COLL_F16, FL_COLL_BF16, FL_COLL_F64};

typedef struct spec {
  int n, nrings;
  size_t chunk;
  const size_t *sizes;
  int nsizes;
  const char *algorithm; /* create option */
  const char *backend;   /* NULL: tcp */
  int one_host;          /* every rank on 127.0.0.2 */
} spec;

typedef struct shared_res {
  uint64_t hash[CT_MAX_RANKS][MAX_CASES];
  int ncases[CT_MAX_RANKS];
  uint8_t tuning[CT_MAX_RANKS][FL_COLL_TUNING_MAX];
  size_t tuning_len[CT_MAX_RANKS];
} shared_res;

static shared_res *g_res;
static const uint8_t *g_tuning; /* given to rank 0 (NULL: none) */
static size_t g_tuning_len;

static float gen(int r, size_t i) {
  return (float)((int)((r * 7 + i * 3) % 17) - 8) * 0.25f;
}

static float rnd(int r, size_t i) {
  uint64_t s = (uint64_t)r * 1000003u + i * 2654435761u + 12345u;
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return ((float)(s >> 40) / 16777216.0f - 0.5f) * 3.0f;
}

static void fill(fl_coll_dtype dt, void *buf, const float *v, size_t n) {
  if (dt == FL_COLL_F32)
    memcpy(buf, v, n * sizeof(float));
  else if (dt == FL_COLL_F64)
    for (size_t i = 0; i < n; i++) ((double *)buf)[i] = v[i];
  else if (dt == FL_COLL_F16)
    fl_cast_f32_to_f16(v, buf, n);
  else
    fl_cast_f32_to_bf16(v, buf, n);
}

static double get(fl_coll_dtype dt, const void *buf, size_t i) {
  float f;
  if (dt == FL_COLL_F32) return ((const float *)buf)[i];
  if (dt == FL_COLL_F64) return ((const double *)buf)[i];
  if (dt == FL_COLL_F16)
    fl_cast_f16_to_f32((const uint16_t *)buf + i, &f, 1);
  else
    fl_cast_bf16_to_f32((const uint16_t *)buf + i, &f, 1);
  return f;
}

/* Exact inputs: the serial sum, bit for bit. */
static int check_exact(fl_coll *c, int r, int n, size_t m, fl_coll_dtype dt, float *v, void *buf) {
  for (size_t i = 0; i < m; i++) v[i] = gen(r, i);
  fill(dt, buf, v, m);
  if (fl_coll_allreduce(c, buf, m, dt) != FL_OK) return 11;
  for (size_t i = 0; i < m; i++) {
    double want = 0;
    for (int q = 0; q < n; q++) want += gen(q, i);
    if (get(dt, buf, i) != want) {
      fprintf(stderr, "rank %d: %s %zu [%zu] = %g, want %g\n", r, fl_coll_dtype_name(dt), m, i,
              get(dt, buf, i), want);
      return 12;
    }
  }
  return 0;
}

/* Random inputs twice: the same bits; near the double-precision sum. */
static int check_random(fl_coll *c, int r, int n, size_t m, fl_coll_dtype dt, float *v, void *buf,
                        void *buf2, uint64_t *hash) {
  size_t es = fl_coll_dtype_size(dt);
  for (size_t i = 0; i < m; i++) v[i] = rnd(r, i);
  fill(dt, buf, v, m);
  memcpy(buf2, buf, m * es);
  if (fl_coll_allreduce(c, buf, m, dt) != FL_OK || fl_coll_allreduce(c, buf2, m, dt) != FL_OK)
    return 21;
  if (memcmp(buf, buf2, m * es) != 0) {
    fprintf(stderr, "rank %d: two runs of %s %zu differ\n", r, fl_coll_dtype_name(dt), m);
    return 22;
  }
  double tol = dt == FL_COLL_F32 ? 1e-5 : dt == FL_COLL_F64 ? 1e-12 : 0.05;
  for (size_t i = 0; i < m; i += 1 + m / 64) {
    double want = 0;
    for (int q = 0; q < n; q++) want += rnd(q, i);
    if (fabs(get(dt, buf, i) - want) > tol * (n + fabs(want))) {
      fprintf(stderr, "rank %d: random %s %zu [%zu] = %g, want %g\n", r, fl_coll_dtype_name(dt),
              m, i, get(dt, buf, i), want);
      return 23;
    }
  }
  *hash = ct_hash(buf, m * es);
  return 0;
}

static int run_cases(fl_coll *c, int r, int n, const spec *sp, int *k) {
  size_t maxm = 0;
  for (int i = 0; i < sp->nsizes; i++)
    if (sp->sizes[i] > maxm) maxm = sp->sizes[i];
  float *v = malloc(maxm * sizeof(float));
  void *buf = malloc(maxm * 8), *buf2 = malloc(maxm * 8);
  int rc = v && buf && buf2 ? 0 : 5;
  for (size_t a = 0; !rc && a < 3; a++) {
    if (fl_coll_set_algorithm(c, k_algos[a]) != FL_OK) rc = 6;
    for (int si = 0; !rc && si < sp->nsizes; si++)
      for (size_t ti = 0; !rc && ti < 4; ti++) {
        size_t m = sp->sizes[si];
        if (m > 100000 && k_types[ti] != FL_COLL_F32) continue;
        rc = check_exact(c, r, n, m, k_types[ti], v, buf);
        if (!rc) rc = check_random(c, r, n, m, k_types[ti], v, buf, buf2, &g_res->hash[r][(*k)++]);
      }
  }
  free(v);
  free(buf);
  free(buf2);
  return rc;
}

static int rank_main(ct_job *j, int r, void *arg) {
  const spec *sp = arg;
  fl_coll_options o = ct_opts(j, r, sp->backend ? sp->backend : "tcp", 30.0);
  o.nrings = sp->nrings ? sp->nrings : 1;
  o.chunk_bytes = sp->chunk;
  o.algorithm = sp->algorithm;
  if (r == 0) {
    o.tuning = g_tuning;
    o.tuning_len = g_tuning_len;
  }
  fl_coll *c = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 10;
  int k = 0, rc = run_cases(c, r, j->n, sp, &k);
  g_res->ncases[r] = k;
  if (!rc && fl_coll_get_tuning(c, g_res->tuning[r], FL_COLL_TUNING_MAX, &g_res->tuning_len[r]))
    rc = 7;
  fl_coll_destroy(c);
  return rc;
}

static void run_spec(const spec *sp) {
  g_res = ct_shared(sizeof(shared_res));
  ck_assert_ptr_nonnull(g_res);
  ct_job j;
  const char *hosts[CT_MAX_RANKS];
  for (int r = 0; r < sp->n; r++) hosts[r] = r % 2 && !sp->one_host ? "127.0.0.3" : "127.0.0.2";
  ck_assert_int_eq(ct_job_init(&j, sp->n, hosts), 0);
  ck_assert_int_eq(ct_run(&j, rank_main, (void *)sp, 60.0), 0);
  int k = g_res->ncases[0];
  ck_assert_int_gt(k, 0);
  for (int r = 1; r < sp->n; r++) {
    ck_assert_int_eq(g_res->ncases[r], k);
    for (int i = 0; i < k; i++)
      ck_assert_msg(g_res->hash[r][i] == g_res->hash[0][i], "case %d: rank %d's bits differ", i,
                    r);
  }
}

static const size_t k_small[] = {1, 3, 100, 4099};
static const size_t k_mid[] = {1, 2, 7, 100, 1031, 65537};
static const size_t k_big[] = {786433};  /* 3 MiB of fp32 */
static const size_t k_big8[] = {262147}; /* 1 MiB */

#define RANKS_TEST(N)                                                                              \
  START_TEST(algos_##N##_ranks) {                                                                  \
    int mid = N == 4 || N == 7;                                                                    \
    spec sp = {N, N % 3 == 0 ? 2 : 1, N % 2 ? 4096 : 0, mid ? k_mid : k_small, mid ? 6 : 4,     \
               NULL, NULL, 0};                                                               \
    run_spec(&sp);                                                                                 \
  }                                                                                                \
  END_TEST
RANKS_TEST(2)
RANKS_TEST(3)
RANKS_TEST(4)
RANKS_TEST(5)
RANKS_TEST(6)
RANKS_TEST(7)
RANKS_TEST(8)
RANKS_TEST(9)

START_TEST(algos_big) {
  spec sp = {5, 1, 65536, k_big, 1, "ring", NULL, 0};
  run_spec(&sp);
  spec sp8 = {8, 2, 0, k_big8, 1, "ring", NULL, 0};
  run_spec(&sp8);
}
END_TEST

/* The piece does not enter the sums: every algorithm (the tree's piece
 * now varies with the bucket) gives, case by case, the same bits in 4 KiB
 * pieces as in the default 512 KiB chunk. */
START_TEST(pieces_same_bits) {
  static uint64_t want[MAX_CASES];
  spec fine = {5, 1, 4096, k_mid, 6, "ring", NULL, 0};
  run_spec(&fine);
  int k = g_res->ncases[0];
  memcpy(want, g_res->hash[0], sizeof want);
  spec coarse = {5, 1, 0, k_mid, 6, "ring", NULL, 0};
  run_spec(&coarse);
  ck_assert_int_eq(g_res->ncases[0], k);
  for (int i = 0; i < k; i++)
    ck_assert_msg(g_res->hash[0][i] == want[i], "case %d: 4 KiB pieces change the bits", i);
}
END_TEST

/* Written once: each algorithm over the shared-memory transport (the shm
 * backend with the algorithm fixed at start, then switched in collective
 * order) gives, case by case, the bits it gives over tcp. */
START_TEST(shm_transport_same_bits) {
  static const int ns[] = {3, 4, 8};
  static uint64_t want[MAX_CASES];
  for (size_t q = 0; q < sizeof ns / sizeof ns[0]; q++) {
    spec tcp = {ns[q], 1, 0, k_mid, 6, "ring", NULL, 1};
    run_spec(&tcp);
    int k = g_res->ncases[0];
    memcpy(want, g_res->hash[0], sizeof want);
    spec shm = {ns[q], 1, 0, k_mid, 6, "ring", "shm", 1};
    run_spec(&shm);
    ck_assert_int_eq(g_res->ncases[0], k);
    for (int i = 0; i < k; i++)
      ck_assert_msg(g_res->hash[0][i] == want[i], "%d ranks, case %d: shm's bits differ from tcp's",
                    ns[q], i);
  }
}
END_TEST

/* Recursive doubling over tcp (a restored tuning whose 1 s alpha makes
 * every bucket double) gives, case by case, the bits of halving (no
 * tuning: a named halving_doubling halves), on 3 ranks (the fold) whole
 * and 8 ranks in 4 KiB pieces, every dtype. */
START_TEST(doubling_same_bits) {
  static const int ns[] = {3, 8};
  static uint64_t want[MAX_CASES];
  for (size_t q = 0; q < sizeof ns / sizeof ns[0]; q++) {
    spec halving = {ns[q], 1, q == 1 ? 4096 : 0, k_small, 4, "ring", NULL, 0};
    run_spec(&halving);
    int k = g_res->ncases[0];
    memcpy(want, g_res->hash[0], sizeof want);
    coll_tuning t = {ns[q], {1.0, 1e-9, 1e-10, {1, 1, 1}, {1, 1, 1}}, {0}};
    memset(t.table, COLL_ALGO_HD, sizeof t.table);
    ck_assert_int_eq(coll_algo_doubling(&t.m, COLL_ALGO_HD, ns[q], (size_t)4099 * 8), 1);
    uint8_t blob[COLL_TUNING_BYTES];
    coll_tuning_encode(&t, blob);
    g_tuning = blob;
    g_tuning_len = sizeof blob;
    spec doubling = {ns[q], 1, q == 1 ? 4096 : 0, k_small, 4, "auto", NULL, 0};
    run_spec(&doubling);
    g_tuning = NULL;
    g_tuning_len = 0;
    ck_assert_int_eq(g_res->ncases[0], k);
    for (int i = 0; i < k; i++)
      ck_assert_msg(g_res->hash[0][i] == want[i], "%d ranks, case %d: doubling's bits differ",
                    ns[q], i);
  }
}
END_TEST

/* The model: latency dominates small buckets, bandwidth large ones. */
START_TEST(model_predictions) {
  coll_model m = {50e-6, 8e-9, 0.3e-9, {1, 1, 1}, {1, 1, 1}}; /* 50 us, 1 Gbit/s */
  double chunk = 512 * 1024;
  for (int n = 4; n <= 4096; n *= 4) {
    double small = 64 * 1024, large = 256.0 * 1024 * 1024;
    double ring_s = coll_model_time(&m, COLL_ALGO_RING, n, small, chunk);
    double hd_s = coll_model_time(&m, COLL_ALGO_HD, n, small, chunk);
    ck_assert_msg(hd_s < ring_s, "n %d: hd %g not under ring %g at 64 KiB", n, hd_s, ring_s);
    ck_assert(coll_model_time(&m, COLL_ALGO_HD, n, large, chunk) <=
              coll_model_time(&m, COLL_ALGO_RING, n, large, chunk) * 1.0001);
  }
  /* Non-powers of two pay the fold. */
  ck_assert(coll_model_time(&m, COLL_ALGO_HD, 9, 1e6, chunk) >
            coll_model_time(&m, COLL_ALGO_HD, 8, 1e6, chunk));
  uint8_t t[COLL_TABLE_BINS];
  coll_model_table(&m, 64, t);
  ck_assert_int_ne(t[coll_table_bin(1024)], COLL_ALGO_RING);
  ck_assert_int_eq(coll_table_bin(1), 0);
  ck_assert_int_eq(coll_table_bin(1025), 11);
  ck_assert_int_eq(coll_table_bin((size_t)1 << 20), 20);
  coll_tuning a = {64, m, {0}}, b;
  memcpy(a.table, t, sizeof t);
  uint8_t blob[COLL_TUNING_BYTES];
  coll_tuning_encode(&a, blob);
  ck_assert_int_eq(coll_tuning_decode(blob, sizeof blob, &b), FL_OK);
  ck_assert_int_eq(b.n, 64);
  ck_assert(b.m.alpha == m.alpha && b.m.beta == m.beta && b.m.gamma == m.gamma);
  for (int i = 0; i < COLL_MODEL_ALGOS; i++) ck_assert(b.m.eff[i] == m.eff[i] && b.m.lat[i] == m.lat[i]);
  ck_assert_int_eq(memcmp(a.table, b.table, sizeof t), 0);
  blob[4] ^= 0xff; /* another version */
  ck_assert_int_eq(coll_tuning_decode(blob, sizeof blob, &b), FL_EPROTO);
}
END_TEST

/* A measured efficiency moves the choice: halving-doubling 1.6 times
 * slower per byte than the ring (8 shaped namespaces, 1 MiB) keeps large
 * buckets on the ring and small ones off it. */
START_TEST(model_efficiency) {
  coll_model m = {184e-6, 7.5e-9, 0.02e-9, {1, 1, 1}, {1, 1, 1}};
  double chunk = 512 * 1024, mib = 1024 * 1024;
  uint8_t t[COLL_TABLE_BINS];
  coll_model_table(&m, 8, t);
  ck_assert_int_ne(t[coll_table_bin((size_t)mib)], COLL_ALGO_RING);
  double lat, bw;
  coll_model_terms(&m, COLL_ALGO_HD, 8, mib, chunk, &lat, &bw);
  ck_assert(fabs(lat + bw - coll_model_time(&m, COLL_ALGO_HD, 8, mib, chunk)) < 1e-12);
  m.eff[COLL_ALGO_HD - COLL_ALGO_RING] = 1.6;
  m.eff[COLL_ALGO_TREE - COLL_ALGO_RING] = 1.5;
  ck_assert(fabs(lat + 1.6 * bw - coll_model_time(&m, COLL_ALGO_HD, 8, mib, chunk)) < 1e-12);
  coll_model_table(&m, 8, t);
  for (size_t b = (size_t)mib; b <= ((size_t)16 << 20); b *= 4)
    ck_assert_int_eq(t[coll_table_bin(b)], COLL_ALGO_RING);
  ck_assert_int_ne(t[coll_table_bin(1024)], COLL_ALGO_RING);
  /* A step of halving-doubling costing twice alpha (every rank sending at
   * once) takes the small sizes off it. */
  m.lat[COLL_ALGO_HD - COLL_ALGO_RING] = 2.0;
  coll_model_terms(&m, COLL_ALGO_HD, 8, 65536, chunk, &lat, &bw);
  ck_assert(fabs(2 * lat + 1.6 * bw - coll_model_time(&m, COLL_ALGO_HD, 8, 65536, chunk)) < 1e-12);
  coll_model_table(&m, 8, t);
  ck_assert_int_ne(t[coll_table_bin(65536)], COLL_ALGO_HD);
  /* 0: not measured, as 1. */
  coll_model z = {184e-6, 7.5e-9, 0.02e-9, {0, 0, 0}, {0, 0, 0}};
  ck_assert(coll_model_time(&z, COLL_ALGO_TREE, 8, mib, chunk) ==
            coll_model_time(&(coll_model){184e-6, 7.5e-9, 0.02e-9, {1, 1, 1}, {1, 1, 1}}, COLL_ALGO_TREE, 8,
                            mib, chunk));
}
END_TEST

/* The tree's piece: from the tuning every rank decodes, the same on all
 * of them, whatever the factors (the probe ran with pieces chosen before
 * they were measured), a power of two in bounds and within a tree's half
 * of the bucket, small enough at 1 MiB on 16 ranks that the tree
 * pipelines (the 512 KiB chunk did not). */
START_TEST(tree_segment_agreed) {
  coll_model m = {100e-6, 8e-9, 0.3e-9, {1.3, 0.7, 2.0}, {1.0, 1.6, 0.9}};
  coll_tuning a = {16, m, {0}}, ranks[4];
  coll_model_table(&m, 16, a.table);
  uint8_t blob[COLL_TUNING_BYTES];
  coll_tuning_encode(&a, blob);
  for (int r = 0; r < 4; r++)
    ck_assert_int_eq(coll_tuning_decode(blob, sizeof blob, &ranks[r]), FL_OK);
  coll_model raw = {m.alpha, m.beta, m.gamma, {1, 1, 1}, {1, 1, 1}};
  for (int b = 10; b <= 30; b++) {
    size_t bytes = (size_t)1 << b, seg = coll_algo_seg(&a.m, COLL_ALGO_TREE, 16, bytes);
    ck_assert(seg >= COLL_SEG_MIN && seg <= COLL_SEG_MAX && (seg & (seg - 1)) == 0);
    ck_assert(seg <= bytes / 2 || seg == COLL_SEG_MIN); /* no larger than a tree's half */
    ck_assert_uint_eq(coll_algo_seg(&raw, COLL_ALGO_TREE, 16, bytes), seg);
    for (int r = 0; r < 4; r++)
      ck_assert_uint_eq(coll_algo_seg(&ranks[r].m, COLL_ALGO_TREE, ranks[r].n, bytes), seg);
    ck_assert_uint_eq(coll_algo_seg(&a.m, COLL_ALGO_RING, 16, bytes), 0);
    ck_assert_uint_eq(coll_algo_seg(&a.m, COLL_ALGO_HD, 16, bytes), 0);
  }
  double mib = 1 << 20;
  ck_assert_uint_eq(coll_algo_seg(&m, COLL_ALGO_TREE, 16, (size_t)mib), 64 << 10); /* 32 KiB fastest, 64 KiB within 25% */
  ck_assert(coll_model_predict(&m, COLL_ALGO_TREE, 16, (size_t)mib) <
            0.5 * coll_model_time(&m, COLL_ALGO_TREE, 16, mib, 512 << 10));
  coll_model none = {0, 0, 0, {0, 0, 0}, {0, 0, 0}}; /* a named algorithm: not probed */
  ck_assert_uint_eq(coll_algo_seg(&none, COLL_ALGO_TREE, 16, (size_t)mib), 0);
  /* 64 KiB on 8 ranks at the alpha and beta of shaped namespaces: the
   * probe's 32 KiB piece is a tree's half, one piece per half, as the
   * named tree's chunk (which holds the half whole) cuts it. */
  coll_model ns = {200e-6, 7.5e-9, 0.027e-9, {1, 1, 1}, {1, 1, 1}};
  size_t half = 65536 / 2, seg = coll_algo_seg(&ns, COLL_ALGO_TREE, 8, 65536);
  ck_assert_uint_eq(seg, half);
  ck_assert_uint_eq((half + seg - 1) / seg, (half + FL_COLL_CHUNK - 1) / FL_COLL_CHUNK);
}
END_TEST

/* halving_doubling's variant: recursive doubling for latency-bound
 * buckets, halving for large ones, one crossover per group size (later on
 * a slower network, or where halving_doubling's steps cost more), by the
 * model with halving_doubling's factors, never where nothing was probed,
 * only for halving_doubling; the model's time is the faster variant's. */
START_TEST(doubling_variant) {
  coll_model m = {100e-6, 8e-9, 0.3e-9, {1.3, 0.7, 2.0}, {1.0, 1.6, 0.9}};
  coll_model raw = {m.alpha, m.beta, m.gamma, {1, 1, 1}, {1, 1, 1}};
  coll_model none = {0, 0, 0, {0, 0, 0}, {0, 0, 0}};
  for (int n = 2; n <= 4096; n = n < 9 ? n + 1 : n * 2) {
    ck_assert_int_eq(coll_algo_doubling(&m, COLL_ALGO_HD, n, 4), 1);
    ck_assert_int_eq(coll_algo_doubling(&m, COLL_ALGO_HD, n, (size_t)1 << 30), 0);
    ck_assert_int_eq(coll_algo_doubling(&none, COLL_ALGO_HD, n, 4), 0);
    int flips = 0;
    for (int b = 0; b < 30; b++) {
      size_t bytes = (size_t)1 << b;
      int d = coll_algo_doubling(&m, COLL_ALGO_HD, n, bytes);
      flips += b && d != coll_algo_doubling(&m, COLL_ALGO_HD, n, bytes / 2);
      coll_model dear = m; /* steps ten times as dear */
      dear.lat[COLL_ALGO_HD - COLL_ALGO_RING] *= 10;
      ck_assert(!d || coll_algo_doubling(&dear, COLL_ALGO_HD, n, bytes));
      ck_assert_int_eq(coll_algo_doubling(&m, COLL_ALGO_RING, n, bytes), 0);
      ck_assert_int_eq(coll_algo_doubling(&m, COLL_ALGO_TREE, n, bytes), 0);
      coll_model slow = m;
      slow.alpha = 1e-3;
      ck_assert(!d || coll_algo_doubling(&slow, COLL_ALGO_HD, n, bytes));
    }
    ck_assert_int_eq(flips, 1);
  }
  ck_assert_int_eq(coll_algo_doubling(&m, COLL_ALGO_HD, 1, 4), 0);
  /* 16 ranks, 100 us, 1 Gbit/s: 4 exchanges of 4 KiB beat 8 smaller ones;
   * at 1 MiB halving moves a quarter of the bytes. */
  ck_assert_int_eq(coll_algo_doubling(&m, COLL_ALGO_HD, 16, 4096), 1);
  ck_assert_int_eq(coll_algo_doubling(&m, COLL_ALGO_HD, 16, (size_t)1 << 20), 0);
  /* Steps measured at a tenth of alpha (the probe's clamp): halving. */
  m.lat[COLL_ALGO_HD - COLL_ALGO_RING] = 0.1;
  ck_assert_int_eq(coll_algo_doubling(&m, COLL_ALGO_HD, 16, 4096), 0);
  double lat, bw;
  coll_model_terms(&raw, COLL_ALGO_HD, 16, 4096, 0, &lat, &bw);
  ck_assert(fabs(lat - 4 * m.alpha) < 1e-12 && fabs(bw - 4 * 4096 * (m.beta + m.gamma)) < 1e-12);
  coll_model_terms(&raw, COLL_ALGO_HD, 17, 4096, 0, &lat, &bw); /* the fold: two exchanges more */
  ck_assert(fabs(lat - 6 * m.alpha) < 1e-12);
}
END_TEST

/* A synthetic network (16 ranks, 100 us, 1 Gbit/s; halving-doubling 1.6
 * times slower per byte, the tree's steps half the latency): the model's
 * order of the three algorithms at four sizes is the one written here,
 * and the table takes the first of each. */
START_TEST(model_order_matches_table) {
  coll_model m = {100e-6, 8e-9, 0.3e-9, {1, 1, 0.5}, {1, 1.6, 1}};
  static const struct {
    size_t bytes;
    int order[3];
  } want[] = {{4 << 10, {COLL_ALGO_HD, COLL_ALGO_TREE, COLL_ALGO_RING}}, /* by doubling */
              {64 << 10, {COLL_ALGO_HD, COLL_ALGO_TREE, COLL_ALGO_RING}},
              {1 << 20, {COLL_ALGO_RING, COLL_ALGO_TREE, COLL_ALGO_HD}},
              {64 << 20, {COLL_ALGO_RING, COLL_ALGO_TREE, COLL_ALGO_HD}}};
  uint8_t t[COLL_TABLE_BINS];
  coll_model_table(&m, 16, t);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    for (int k = 0; k < 2; k++)
      ck_assert_msg(coll_model_predict(&m, want[i].order[k], 16, want[i].bytes) <
                        coll_model_predict(&m, want[i].order[k + 1], 16, want[i].bytes),
                    "%zu bytes: %s not under %s", want[i].bytes, coll_algo_names[want[i].order[k]],
                    coll_algo_names[want[i].order[k + 1]]);
    ck_assert_int_eq(t[coll_table_bin(want[i].bytes)], want[i].order[0]);
  }
}
END_TEST

/* ------------------------------------------------ probe under noise */

/* The group probe's clock stood in for: each algorithm's true time at the
 * small and the large size, some calls (counted from 0, the warm-up round
 * included) 10 times slower (a busy spell) or faster (a lucky one), and
 * the order of the calls checked: ring, halving-doubling, tree at the
 * small size, then at the large one, round after round.  The calls at 4
 * times the large size (t[2], ring and halving-doubling only, the first
 * of a round last in the next) come last and are counted apart, in
 * huge_calls; call huge_slow of them (-1: none) is 10 times slower. */
typedef struct fake_clock {
  double t[3][COLL_MODEL_ALGOS];
  size_t bytes;
  int slow[3], fast[3]; /* call numbers; -1: none */
  int calls, shares, out_of_order;
  int skew_algo, skew_until; /* skew_algo's small-size calls before skew_until */
  double skew;               /* take this many times as long */
  int huge_calls, huge_slow;
} fake_clock;

static fl_status fake_run(void *arg, int algo, size_t len, double *secs) {
  fake_clock *f = arg;
  int k = len == f->bytes, i = algo - COLL_ALGO_RING;
  if (len == 4 * f->bytes) {
    if (i != (f->huge_calls / 2 + f->huge_calls % 2) % 2) f->out_of_order++;
    *secs = f->t[2][i] * (f->huge_calls == f->huge_slow ? 10 : 1);
    f->huge_calls++;
    return FL_OK;
  }
  if (f->calls % (2 * COLL_MODEL_ALGOS) != k * COLL_MODEL_ALGOS + i) f->out_of_order++;
  *secs = f->t[k][i];
  if (k == 0 && algo == f->skew_algo && f->calls < f->skew_until) *secs *= f->skew;
  for (int j = 0; j < 3; j++) {
    if (f->slow[j] == f->calls) *secs *= 10;
    if (f->fast[j] == f->calls) *secs /= 10;
  }
  f->calls++;
  return FL_OK;
}

static fl_status fake_share(void *arg, uint32_t *v) {
  (void)v;
  ((fake_clock *)arg)->shares++;
  return FL_OK;
}

/* On 8 ranks the tree is fastest at 64 KiB and the ring at 1 MiB; one
 * ring repetition at 1 MiB and one tree repetition at 64 KiB 10x slow, and
 * one halving-doubling repetition at 1 MiB 10x fast (the best of the
 * rounds took halving-doubling there), the warm-up slow too: the medians
 * are the true times and the table takes the tree and the ring. */
START_TEST(probe_median_outliers) {
  size_t mib = (size_t)1 << 20;
  fake_clock f = {{{3e-3, 2.5e-3, 1.5e-3}, {15e-3, 25e-3, 30e-3}}, mib, {3, 6 + 3, 12 + 2},
                  {18 + 4, -1, -1}, 0, 0, 0, 0, 0, 1, 0, -1};
  coll_probe_clock c = {fake_run, fake_share, &f};
  double med[2][COLL_MODEL_ALGOS];
  int rounds = 0;
  coll_probe_pick pick;
  ck_assert_int_eq(coll_group_probe(&c, mib, med, &rounds, &pick), FL_OK);
  ck_assert_int_eq(rounds, 5); /* 77 ms a round: the fewest the probe runs */
  ck_assert_int_eq(f.calls, 6 * (1 + rounds));
  ck_assert_int_eq(f.shares, 2); /* the rounds, the sizes to run again: none */
  ck_assert_int_eq(f.out_of_order, 0);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < COLL_MODEL_ALGOS; i++) ck_assert(med[k][i] == f.t[k][i]);
  coll_tuning t = {8, {100e-6, 8e-9, 0.1e-9, {1, 1, 1}, {1, 1, 1}}, {0}};
  coll_tune_fit(&t, 8, mib, med, &pick);
  ck_assert_int_eq(t.table[coll_table_bin(mib / 16)], COLL_ALGO_TREE);
  ck_assert_int_eq(t.table[coll_table_bin(mib)], COLL_ALGO_RING);
  ck_assert_int_eq(t.table[coll_table_bin(mib * 16)], COLL_ALGO_RING);
  /* Fast rounds (loopback): as many as the probe takes, no more. */
  fake_clock g = {{{1e-4, 1e-4, 1e-4}, {2e-4, 2e-4, 2e-4}}, mib, {-1, -1, -1}, {-1, -1, -1},
                  0, 0, 0, 0, 0, 1, 0, -1};
  c.arg = &g;
  ck_assert_int_eq(coll_group_probe(&c, mib, med, &rounds, &pick), FL_OK);
  ck_assert_int_eq(rounds, 9);
  ck_assert_int_eq(g.calls, 6 * 10 + 2 * 2 * 9); /* all equal: two at each size run again */
  ck_assert_int_eq(pick.fast[0], 1); /* even: fewer latency steps, halving-doubling */
  ck_assert_int_eq(pick.fast[1], 1); /* at the large size too */
  ck_assert(pick.by_rule[0] && pick.by_rule[1]);
}
END_TEST

/* Two algorithms within 1% of each other pick the same one whichever
 * measures faster (the fixed preference, fewer latency steps:
 * halving-doubling before the tree and the ring, at both sizes);
 * 10% apart in every paired round, the faster one, by the paired ratio. */
START_TEST(probe_close_does_not_flip) {
  size_t mib = (size_t)1 << 20;
  static const double small[3][3] = {{3e-3, 2.0e-3, 2.02e-3}, {3e-3, 2.02e-3, 2.0e-3},
                                     {3e-3, 2.2e-3, 2.0e-3}};
  static const double large[3][3] = {{20e-3, 20.2e-3, 30e-3}, {20.2e-3, 20e-3, 30e-3},
                                     {20e-3, 30e-3, 40e-3}};
  static const int want_small[3] = {1, 1, 2}, want_large[3] = {1, 1, 0};
  for (int v = 0; v < 3; v++) {
    fake_clock f = {{{0}}, mib, {-1, -1, -1}, {-1, -1, -1}, 0, 0, 0, 0, 0, 1, 0, -1};
    memcpy(f.t[0], small[v], sizeof small[v]);
    memcpy(f.t[1], large[v], sizeof large[v]);
    coll_probe_clock c = {fake_run, fake_share, &f};
    double med[2][COLL_MODEL_ALGOS];
    int rounds = 0;
    coll_probe_pick pick;
    ck_assert_int_eq(coll_group_probe(&c, mib, med, &rounds, &pick), FL_OK);
    ck_assert_int_eq(pick.fast[0], want_small[v]);
    ck_assert_int_eq(pick.fast[1], want_large[v]);
    ck_assert_int_eq(pick.by_rule[0], v < 2);
    ck_assert_int_eq(pick.close[1][0] >= 0, v < 2); /* 20 / 30 ms: not close */
    coll_tuning t = {16, {100e-6, 8e-9, 0.1e-9, {1, 1, 1}, {1, 1, 1}}, {0}};
    coll_tune_fit(&t, 16, mib, med, &pick);
    ck_assert_int_eq(t.table[coll_table_bin(mib / 16)], v < 2 ? COLL_ALGO_HD : COLL_ALGO_TREE);
    ck_assert_int_eq(t.table[coll_table_bin(mib * 64)], COLL_ALGO_RING); /* 4 MiB: even */
    if (v == 2) ck_assert(fabs(pick.paired[0] - 2.0 / 2.2) < 1e-9); /* tree / halving-doubling */
  }
}
END_TEST

/* 16 ranks at 64 KiB: halving-doubling 2.0 ms, the tree 2.1 ms, but a
 * busy spell makes halving-doubling 2.2 ms in the warm-up and four of the
 * five rounds, so their medians put the tree first, within 15%: the two
 * run five rounds more at the small size, and the medians of all ten pick
 * halving-doubling; the ring and the large size (far apart) do not run
 * again.  Sizes whose rounds would take long do not either. */
START_TEST(probe_close_runs_again) {
  size_t mib = (size_t)1 << 20;
  fake_clock f = {{{3e-3, 2.0e-3, 2.1e-3}, {15e-3, 25e-3, 30e-3}}, mib, {-1, -1, -1},
                  {-1, -1, -1}, 0, 0, 0, COLL_ALGO_HD, 6 * 5, 1.1, 0, -1};
  coll_probe_clock c = {fake_run, fake_share, &f};
  double med[2][COLL_MODEL_ALGOS];
  int rounds = 0;
  coll_probe_pick pick;
  ck_assert_int_eq(coll_group_probe(&c, mib, med, &rounds, &pick), FL_OK);
  ck_assert_int_eq(rounds, 5);
  ck_assert_int_eq(f.calls, 6 * (1 + rounds) + 2 * rounds);
  ck_assert_int_eq(f.shares, 2);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < COLL_MODEL_ALGOS; i++) ck_assert(med[k][i] == f.t[k][i]);
  coll_tuning t = {16, {100e-6, 8e-9, 0.1e-9, {1, 1, 1}, {1, 1, 1}}, {0}};
  coll_tune_fit(&t, 16, mib, med, &pick);
  ck_assert_int_eq(t.table[coll_table_bin(mib / 16)], COLL_ALGO_HD);
  fake_clock slow = {{{3, 0.2, 0.21}, {15, 25, 30}}, mib, {-1, -1, -1}, {-1, -1, -1}, 0, 0, 0,
                     0, 0, 1, 0, -1}; /* seconds */
  c.arg = &slow;
  ck_assert_int_eq(coll_group_probe(&c, mib, med, &rounds, &pick), FL_OK);
  ck_assert_int_eq(slow.calls, 6 * (1 + rounds));
}
END_TEST

/* Above the large size the ring and halving-doubling run 3 rounds at 4
 * times it, and each larger bucket runs the one whose time there, its
 * modelled latency taken off and the rest scaled, is less, whatever won
 * the large size: 16 ranks, halving-doubling fastest at 1 MiB (50 ms, the
 * ring 71 ms, whose fit gives the ring 27 ms of latency at 4 MiB and
 * halving-doubling 6 ms).  The ring 200 ms at 4 MiB and halving-doubling
 * 240 ms: the ring from 2 MiB up (the pick at 1 MiB ran at 16 and 64 MiB
 * before), one 10x slow round not moving it; halving-doubling 20% faster
 * at 4 MiB: halving-doubling up; within 5% at 4 MiB: halving-doubling at
 * 2 MiB, where the ring's latency weighs more, the ring from 4 MiB;
 * halving-doubling 13% faster at 4 MiB with a bandwidth term 2% less than
 * the ring's (as on 16 shaped namespaces): halving-doubling to 8 MiB, the
 * ring from 16 MiB (a pick at 4 MiB carried up ran halving-doubling at
 * 64 MiB, where the ring took 0.87 of its time). */
START_TEST(probe_above_large) {
  size_t mib = (size_t)1 << 20;
  static const double huge[4][2] = {
      {200e-3, 240e-3}, {240e-3, 200e-3}, {200e-3, 195e-3}, {214e-3, 190e-3}};
  static const size_t hd_upto[4] = {0, 64, 2, 8}; /* MiB; the ring above */
  for (int v = 0; v < 4; v++) {
    fake_clock f = {{{30e-3, 9e-3, 7e-3}, {71e-3, 50e-3, 56e-3}, {huge[v][0], huge[v][1], 0}},
                    mib, {-1, -1, -1}, {-1, -1, -1}, 0, 0, 0, 0, 0, 1, 0, v == 0 ? 2 : -1};
    coll_probe_clock c = {fake_run, fake_share, &f};
    double med[2][COLL_MODEL_ALGOS];
    int rounds = 0;
    coll_probe_pick pick;
    ck_assert_int_eq(coll_group_probe(&c, mib, med, &rounds, &pick), FL_OK);
    ck_assert_int_eq(f.huge_calls, 2 * 3);
    ck_assert_int_eq(f.out_of_order, 0);
    ck_assert_int_eq(pick.fast[1], 1);
    ck_assert(fabs(pick.huge[0] - huge[v][0]) < 1e-12 && fabs(pick.huge[1] - huge[v][1]) < 1e-12);
    coll_tuning t = {16, {200e-6, 7.6e-9, 0.02e-9, {1, 1, 1}, {1, 1, 1}}, {0}};
    coll_tune_fit(&t, 16, mib, med, &pick);
    ck_assert_int_eq(t.table[coll_table_bin(mib / 16)], COLL_ALGO_TREE);
    ck_assert_int_eq(t.table[coll_table_bin(mib)], COLL_ALGO_HD);
    for (size_t b = 2 * mib; b <= 64 * mib; b *= 2)
      ck_assert_int_eq(t.table[coll_table_bin(b)],
                       b <= hd_upto[v] * mib ? COLL_ALGO_HD : COLL_ALGO_RING);
  }
}
END_TEST

/* ---------------------------------------------------------- choice */

typedef struct choice_spec {
  int n;
  const char *algorithm;
  const uint8_t *tuning; /* given to rank 0 only */
  size_t tuning_len;
} choice_spec;

static int choice_rank(ct_job *j, int r, void *arg) {
  const choice_spec *cs = arg;
  fl_coll_options o = ct_opts(j, r, "tcp", 30.0);
  o.algorithm = cs->algorithm;
  if (r == 0) {
    o.tuning = cs->tuning;
    o.tuning_len = cs->tuning_len;
  }
  fl_coll *c = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 10;
  float v[33];
  for (int i = 0; i < 33; i++) v[i] = gen(r, (size_t)i);
  int rc = fl_coll_allreduce(c, v, 33, FL_COLL_F32) == FL_OK ? 0 : 11;
  if (!rc && fl_coll_get_tuning(c, g_res->tuning[r], FL_COLL_TUNING_MAX, &g_res->tuning_len[r]))
    rc = 12;
  fl_coll_destroy(c);
  return rc;
}

static void run_choice(const choice_spec *cs, char (*logs)[256]) {
  ct_job j;
  const char *hosts[CT_MAX_RANKS];
  for (int r = 0; r < cs->n; r++) hosts[r] = "127.0.0.1";
  ck_assert_int_eq(ct_job_init(&j, cs->n, hosts), 0);
  ct_spawn(&j, choice_rank, (void *)cs, NULL, logs);
  ct_wait(&j, 30.0);
  for (int r = 0; r < cs->n; r++) ck_assert_int_eq(j.status[r], 0);
  for (int r = 1; r < cs->n; r++) {
    ck_assert_uint_eq(g_res->tuning_len[r], g_res->tuning_len[0]);
    ck_assert_int_eq(memcmp(g_res->tuning[r], g_res->tuning[0], g_res->tuning_len[0]), 0);
  }
}

static int file_has(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[1024];
  int hit = 0;
  while (!hit && fgets(line, sizeof line, f)) hit = strstr(line, needle) != NULL;
  fclose(f);
  return hit;
}

START_TEST(choice_auto_explicit_resume) {
  g_res = ct_shared(sizeof(shared_res));
  char logs[CT_MAX_RANKS][256];
  for (int r = 0; r < 4; r++) snprintf(logs[r], sizeof logs[r], "/tmp/fl_coll_algo_%d_%d.log", (int)getpid(), r);
  /* auto: rank 0 probes and every rank holds its table. */
  choice_spec cs = {4, NULL, NULL, 0};
  run_choice(&cs, logs);
  ck_assert(file_has(logs[0], "network probe"));
  ck_assert(!file_has(logs[1], "network probe"));
  coll_tuning t;
  ck_assert_int_eq(coll_tuning_decode(g_res->tuning[0], g_res->tuning_len[0], &t), FL_OK);
  ck_assert_int_eq(t.n, 4);
  /* Through a checkpoint record, with a table no probe would make. */
  memset(t.table, COLL_ALGO_TREE, sizeof t.table);
  t.table[5] = COLL_ALGO_HD;
  uint8_t blob[COLL_TUNING_BYTES];
  coll_tuning_encode(&t, blob);
  fl_ckpt_writer *w = NULL;
  ck_assert_int_eq(fl_ckpt_writer_open_mem(&w), FL_OK);
  ck_assert_int_eq(fl_ckpt_put_blob(w, "collective/tuning", blob, sizeof blob), FL_OK);
  void *mem = NULL;
  size_t mlen = 0;
  ck_assert_int_eq(fl_ckpt_writer_commit_mem(w, &mem, &mlen), FL_OK);
  fl_ckpt *ck = NULL;
  ck_assert_int_eq(fl_ckpt_load_mem(mem, mlen, "mem", &ck), FL_OK);
  fl_ckpt_record rec;
  ck_assert_int_eq(fl_ckpt_find(ck, "collective/tuning", &rec), FL_OK);
  /* Resume: the restored table is reused, no probe, on every rank. */
  choice_spec rs = {4, NULL, rec.data, rec.nbytes};
  run_choice(&rs, logs);
  ck_assert(!file_has(logs[0], "network probe"));
  ck_assert(file_has(logs[0], "from the checkpoint"));
  for (int r = 0; r < 4; r++) ck_assert_int_eq(memcmp(g_res->tuning[r], blob, sizeof blob), 0);
  /* Another world size: probed again. */
  choice_spec ws = {3, NULL, rec.data, rec.nbytes};
  run_choice(&ws, logs);
  ck_assert(file_has(logs[0], "network probe"));
  ck_assert(file_has(logs[0], "another world size"));
  /* An explicit algorithm: no probe, that algorithm for every size. */
  choice_spec ex = {3, "tree", NULL, 0};
  run_choice(&ex, logs);
  ck_assert(!file_has(logs[0], "network probe"));
  ck_assert_int_eq(coll_tuning_decode(g_res->tuning[0], g_res->tuning_len[0], &t), FL_OK);
  for (int b = 0; b < COLL_TABLE_BINS; b++) ck_assert_int_eq(t.table[b], COLL_ALGO_TREE);
  fl_ckpt_free(ck);
  free(mem);
  for (int r = 0; r < 4; r++) unlink(logs[r]);
}
END_TEST

START_TEST(unknown_algorithm_refused) {
  fl_coll_options o = fl_coll_options_default();
  o.algorithm = "butterfly";
  fl_coll *c = NULL;
  ck_assert_int_eq(fl_coll_create(&o, &c), FL_EINVAL);
  ck_assert_ptr_null(c);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("coll_algo");
  TCase *t = tcase_create("algo");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, algos_2_ranks);
  tcase_add_test(t, algos_3_ranks);
  tcase_add_test(t, algos_4_ranks);
  tcase_add_test(t, algos_5_ranks);
  tcase_add_test(t, algos_6_ranks);
  tcase_add_test(t, algos_7_ranks);
  tcase_add_test(t, algos_8_ranks);
  tcase_add_test(t, algos_9_ranks);
  tcase_add_test(t, algos_big);
  tcase_add_test(t, pieces_same_bits);
  tcase_add_test(t, shm_transport_same_bits);
  tcase_add_test(t, doubling_same_bits);
  tcase_add_test(t, model_predictions);
  tcase_add_test(t, model_efficiency);
  tcase_add_test(t, tree_segment_agreed);
  tcase_add_test(t, model_order_matches_table);
  tcase_add_test(t, doubling_variant);
  tcase_add_test(t, probe_close_runs_again);
  tcase_add_test(t, probe_close_does_not_flip);
  tcase_add_test(t, probe_median_outliers);
  tcase_add_test(t, probe_above_large);
  tcase_add_test(t, choice_auto_explicit_resume);
  tcase_add_test(t, unknown_algorithm_refused);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  fl_log_set_level(FL_LOG_INFO);
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
