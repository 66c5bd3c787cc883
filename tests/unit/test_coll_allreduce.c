/* test_coll_allreduce.c - the collective engine's results: allreduce,
 * broadcast, allgather and barrier with every CPU backend (tcp, shm, and
 * hierarchical shm+tcp over 127.0.0.2/127.0.0.3 standing in for two
 * nodes), 2 to 8 ranks forked per test, sizes 0, 1, primes, sizes not
 * divisible by the rank count and 64 MiB, in fp32, fp16 and bf16.
 *
 * Inputs are multiples of 1/4 small enough that every partial sum is
 * exact in all three types, so each result must equal the serial sum bit
 * for bit whatever the reduction order; random inputs then check that all
 * ranks hold identical bits and that a second run gives the same bits.
 * Allreduces are run both ways the engine runs them: a blocking call on
 * the caller's thread, and requests queued to its worker. */
#include <config.h>

#include <check.h>
#include <math.h>

#include "coll_internal.h"
#include "coll_testutil.h"
#include "fl_optim.h"

#define MAX_CASES 96

typedef struct spec {
  const char *backend;
  int hier;
  int nrings;
  size_t chunk;
  int n;
  const char *hosts[CT_MAX_RANKS];
  int big; /* also a 64 MiB fp32 allreduce */
  const char *want_backend;
} spec;

typedef struct shared_res {
  uint64_t hash[CT_MAX_RANKS][MAX_CASES];
  int ncases[CT_MAX_RANKS];
} shared_res;

static shared_res *g_res;

static const size_t k_sizes[] = {0, 1, 2, 7, 13, 1000, 1003, 65537};
static const fl_coll_dtype k_types[] = {FL_COLL_F32, FL_COLL_F16, FL_COLL_BF16};

static float gen(int q, size_t size, size_t i) {
  return (float)((int)((i * 7 + (size_t)q * 13 + size) % 17) - 8) * 0.25f;
}

static void fill(fl_coll_dtype dt, void *buf, const float *v, size_t n) {
  if (dt == FL_COLL_F32)
    memcpy(buf, v, n * sizeof(float));
  else if (dt == FL_COLL_F16)
    fl_cast_f32_to_f16(v, buf, n);
  else
    fl_cast_f32_to_bf16(v, buf, n);
}

static void unfill(fl_coll_dtype dt, const void *buf, float *v, size_t n) {
  if (dt == FL_COLL_F32)
    memcpy(v, buf, n * sizeof(float));
  else if (dt == FL_COLL_F16)
    fl_cast_f16_to_f32(buf, v, n);
  else
    fl_cast_bf16_to_f32(buf, v, n);
}

static int check_allreduce(fl_coll *c, int r, int n, size_t size, fl_coll_dtype dt, uint64_t *hash) {
  size_t es = fl_coll_dtype_size(dt);
  float *v = malloc((size ? size : 1) * sizeof(float));
  float *w = malloc((size ? size : 1) * sizeof(float));
  void *buf = malloc((size ? size : 1) * es);
  int rc = 0;
  for (size_t i = 0; i < size; i++) v[i] = gen(r, size, i);
  fill(dt, buf, v, size);
  if (fl_coll_allreduce(c, buf, size, dt) != FL_OK) {
    rc = 11;
    goto out;
  }
  unfill(dt, buf, w, size);
  for (size_t i = 0; i < size; i++) {
    float want = 0;
    for (int q = 0; q < n; q++) want += gen(q, size, i);
    if (w[i] != want) {
      fprintf(stderr, "rank %d: %s size %zu [%zu] = %g, want %g\n", r, fl_coll_dtype_name(dt),
              size, i, (double)w[i], (double)want);
      rc = 12;
      goto out;
    }
  }
  *hash = ct_hash(buf, size * es);
out:
  free(v);
  free(w);
  free(buf);
  return rc;
}

/* buf (size elements of dt) holds the sum over n ranks of gen(q, key, i)? */
static int sum_ok(int r, int n, size_t key, fl_coll_dtype dt, const void *buf, size_t size) {
  float *w = malloc((size ? size : 1) * sizeof(float));
  int ok = w != NULL;
  if (ok) unfill(dt, buf, w, size);
  for (size_t i = 0; ok && i < size; i++) {
    float want = 0;
    for (int q = 0; q < n; q++) want += gen(q, key, i);
    if (w[i] != want) {
      fprintf(stderr, "rank %d: queued %s size %zu [%zu] = %g, want %g\n", r,
              fl_coll_dtype_name(dt), size, i, (double)w[i], (double)want);
      ok = 0;
    }
  }
  free(w);
  return ok;
}

/* Three allreduces queued at once (they run on the engine's worker, one
 * after the other) and a blocking one issued while they are in flight
 * (it must wait its turn): every buffer gets its own sum. */
static int check_queued(fl_coll *c, int r, int n, uint64_t *hash) {
  static const size_t qs[4] = {1003, 65537, 7, 4099};
  static const fl_coll_dtype qt[4] = {FL_COLL_F32, FL_COLL_BF16, FL_COLL_F16, FL_COLL_F32};
  void *buf[4] = {NULL, NULL, NULL, NULL};
  fl_coll_req *req[3] = {NULL, NULL, NULL};
  float *v = malloc(65537 * sizeof(float));
  int rc = v ? 0 : 71;
  for (int k = 0; k < 4 && !rc; k++) {
    buf[k] = malloc(qs[k] * fl_coll_dtype_size(qt[k]));
    if (!buf[k]) {
      rc = 71;
      break;
    }
    for (size_t i = 0; i < qs[k]; i++) v[i] = gen(r, qs[k] + (size_t)k, i);
    fill(qt[k], buf[k], v, qs[k]);
  }
  for (int k = 0; k < 3 && !rc; k++)
    if (fl_coll_iallreduce(c, buf[k], qs[k], qt[k], &req[k]) != FL_OK) rc = 72;
  if (!rc && fl_coll_allreduce(c, buf[3], qs[3], qt[3]) != FL_OK) rc = 73;
  for (int k = 0; k < 3; k++)
    if (req[k] && fl_coll_wait(c, req[k]) != FL_OK && !rc) rc = 74;
  for (int k = 0; k < 4 && !rc; k++) {
    if (!sum_ok(r, n, qs[k] + (size_t)k, qt[k], buf[k], qs[k])) rc = 75;
    hash[k] = ct_hash(buf[k], qs[k] * fl_coll_dtype_size(qt[k]));
  }
  for (int k = 0; k < 4; k++) free(buf[k]);
  free(v);
  return rc;
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* Random fp32 data: the same bits on every rank and in a second run. */
static int check_random(fl_coll *c, int r, int n, uint64_t *hash) {
  const size_t m = 4099;
  float *a = malloc(m * sizeof(float)), *b = malloc(m * sizeof(float));
  int rc = 0;
  for (size_t i = 0; i < m; i++) {
    uint64_t s = (uint64_t)r * 1000003u + i;
    a[i] = ((float)lcg(&s) / 2147483648.0f - 0.5f) * 3.0f;
  }
  memcpy(b, a, m * sizeof(float));
  if (fl_coll_allreduce(c, a, m, FL_COLL_F32) != FL_OK ||
      fl_coll_allreduce(c, b, m, FL_COLL_F32) != FL_OK) {
    rc = 21;
    goto out;
  }
  if (memcmp(a, b, m * sizeof(float)) != 0) {
    fprintf(stderr, "rank %d: two runs of the same allreduce differ\n", r);
    rc = 22;
    goto out;
  }
  for (size_t i = 0; i < m; i++) {
    double want = 0;
    for (int q = 0; q < n; q++) {
      uint64_t s = (uint64_t)q * 1000003u + i;
      want += (double)(((float)lcg(&s) / 2147483648.0f - 0.5f) * 3.0f);
    }
    if (fabs((double)a[i] - want) > 1e-5 * (1.0 + fabs(want))) {
      fprintf(stderr, "rank %d: random [%zu] = %g, want %g\n", r, i, (double)a[i], want);
      rc = 23;
      goto out;
    }
  }
  *hash = ct_hash(a, m * sizeof(float));
out:
  free(a);
  free(b);
  return rc;
}

static int check_broadcast(fl_coll *c, int r, int n, size_t bytes) {
  int root = (int)(bytes % (size_t)n);
  uint8_t *buf = malloc(bytes ? bytes : 1);
  for (size_t i = 0; i < bytes; i++) buf[i] = (uint8_t)(r == root ? i * 31 + 7 : 0xee);
  if (fl_coll_broadcast(c, buf, bytes, root) != FL_OK) {
    free(buf);
    return 31;
  }
  for (size_t i = 0; i < bytes; i++)
    if (buf[i] != (uint8_t)(i * 31 + 7)) {
      fprintf(stderr, "rank %d: broadcast of %zu bytes from %d: [%zu] wrong\n", r, bytes, root, i);
      free(buf);
      return 32;
    }
  free(buf);
  return 0;
}

static int check_allgather(fl_coll *c, int r, int n, size_t bytes) {
  uint8_t *send = malloc(bytes ? bytes : 1), *recv = malloc(bytes * (size_t)n + 1);
  for (size_t i = 0; i < bytes; i++) send[i] = (uint8_t)(r * 41 + i * 3);
  memset(recv, 0xee, bytes * (size_t)n + 1);
  int rc = fl_coll_allgather(c, send, bytes, recv) != FL_OK ? 41 : 0;
  for (int q = 0; q < n && !rc; q++)
    for (size_t i = 0; i < bytes; i++)
      if (recv[(size_t)q * bytes + i] != (uint8_t)(q * 41 + i * 3)) {
        fprintf(stderr, "rank %d: allgather %zu bytes: block %d [%zu] wrong\n", r, bytes, q, i);
        rc = 42;
        break;
      }
  free(send);
  free(recv);
  return rc;
}

static int check_big(fl_coll *c, int r, int n) {
  const size_t m = (size_t)16 << 20; /* 16 Mi floats = 64 MiB */
  float *buf = malloc(m * sizeof(float));
  if (!buf) return 51;
  for (size_t i = 0; i < m; i++) buf[i] = gen(r, m, i);
  int rc = 0;
  if (fl_coll_allreduce(c, buf, m, FL_COLL_F32) != FL_OK) rc = 52;
  for (size_t i = 0; i < m && !rc; i++) {
    float want = 0;
    for (int q = 0; q < n; q++) want += gen(q, m, i);
    if (buf[i] != want) {
      fprintf(stderr, "rank %d: 64 MiB [%zu] = %g, want %g\n", r, i, (double)buf[i], (double)want);
      rc = 53;
    }
  }
  free(buf);
  return rc;
}

static int rank_main(ct_job *j, int r, void *arg) {
  spec *sp = arg;
  fl_coll_options o = ct_opts(j, r, sp->backend, 30.0);
  o.hierarchical = sp->hier;
  o.nrings = sp->nrings ? sp->nrings : 1;
  o.chunk_bytes = sp->chunk;
  fl_coll *c = NULL;
  if (fl_coll_create(&o, &c) != FL_OK) return 10;
  int rc = 0, k = 0;
  if (sp->want_backend && strcmp(fl_coll_backend_name(c), sp->want_backend) != 0) {
    fprintf(stderr, "rank %d: backend %s, want %s\n", r, fl_coll_backend_name(c),
            sp->want_backend);
    rc = 13;
  }
  for (size_t si = 0; !rc && si < sizeof(k_sizes) / sizeof(k_sizes[0]); si++)
    for (size_t ti = 0; !rc && ti < 3; ti++)
      rc = check_allreduce(c, r, j->n, k_sizes[si], k_types[ti], &g_res->hash[r][k++]);
  if (!rc) rc = check_random(c, r, j->n, &g_res->hash[r][k++]);
  if (!rc) {
    rc = check_queued(c, r, j->n, &g_res->hash[r][k]);
    k += 4;
  }
  static const size_t bsz[] = {0, 1, 5, 4096, 100003};
  for (size_t i = 0; !rc && i < sizeof(bsz) / sizeof(bsz[0]); i++) rc = check_broadcast(c, r, j->n, bsz[i]);
  for (size_t i = 0; !rc && i < sizeof(bsz) / sizeof(bsz[0]); i++) rc = check_allgather(c, r, j->n, bsz[i]);
  if (!rc && fl_coll_barrier(c) != FL_OK) rc = 61;
  if (!rc && sp->big) rc = check_big(c, r, j->n);
  g_res->ncases[r] = k;
  fl_coll_destroy(c);
  return rc;
}

static void run_spec(spec *sp) {
  g_res = ct_shared(sizeof(shared_res));
  ck_assert_ptr_nonnull(g_res);
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, sp->n, sp->hosts), 0);
  int bad = ct_run(&j, rank_main, sp, 100.0);
  ck_assert_int_eq(bad, 0);
  int k = g_res->ncases[0];
  ck_assert_int_ge(k, 25);
  for (int r = 1; r < sp->n; r++) {
    ck_assert_int_eq(g_res->ncases[r], k);
    for (int i = 0; i < k; i++)
      ck_assert_msg(g_res->hash[r][i] == g_res->hash[0][i], "case %d: rank %d's bits differ from "
                    "rank 0's", i, r);
  }
  munmap(g_res, sizeof(shared_res));
}

#define L1 "127.0.0.1"
#define N2 "127.0.0.2"
#define N3 "127.0.0.3"

START_TEST(tcp_2_ranks) {
  spec sp = {"tcp", 0, 1, 4096, 2, {L1, L1}, 0, "tcp"};
  run_spec(&sp);
}
END_TEST

START_TEST(tcp_3_ranks_2_rings) {
  spec sp = {"tcp", 0, 2, 4096, 3, {L1, L1, L1}, 0, "tcp"};
  run_spec(&sp);
}
END_TEST

START_TEST(tcp_4_ranks) {
  spec sp = {"tcp", 0, 1, 0, 4, {L1, L1, L1, L1}, 0, "tcp"};
  run_spec(&sp);
}
END_TEST

START_TEST(tcp_5_ranks_3_rings) {
  spec sp = {"tcp", 0, 3, 1000, 5, {L1, L1, L1, L1, L1}, 0, "tcp"};
  run_spec(&sp);
}
END_TEST

START_TEST(tcp_8_ranks_two_hosts) {
  spec sp = {"tcp", 0, 1, 8192, 8, {N2, N3, N2, N3, N2, N3, N2, N3}, 0, "tcp"};
  run_spec(&sp);
}
END_TEST

START_TEST(shm_2_ranks) {
  spec sp = {"shm", 0, 1, 4096, 2, {L1, L1}, 0, "shm"};
  run_spec(&sp);
}
END_TEST

START_TEST(shm_3_ranks) {
  spec sp = {"shm", 0, 1, 1000, 3, {L1, L1, L1}, 0, "shm"};
  run_spec(&sp);
}
END_TEST

START_TEST(auto_4_ranks_is_shm) {
  spec sp = {"auto", 0, 1, 0, 4, {L1, L1, L1, L1}, 0, "shm"};
  run_spec(&sp);
}
END_TEST

START_TEST(shm_8_ranks) {
  spec sp = {"shm", 0, 1, 8192, 8, {L1, L1, L1, L1, L1, L1, L1, L1}, 0, "shm"};
  run_spec(&sp);
}
END_TEST

START_TEST(hier_2_nodes_x_2) {
  /* Ranks interleaved over the nodes: node 127.0.0.2 = {0, 2}, 127.0.0.3 = {1, 3}. */
  spec sp = {"auto", 1, 1, 4096, 4, {N2, N3, N2, N3}, 0, "hier(shm+tcp)"};
  run_spec(&sp);
}
END_TEST

START_TEST(hier_2_nodes_x_3_two_rings) {
  spec sp = {"tcp", 1, 2, 2048, 6, {N2, N2, N2, N3, N3, N3}, 0, "hier(shm+tcp)"};
  run_spec(&sp);
}
END_TEST

START_TEST(hier_one_node) {
  spec sp = {"auto", 1, 1, 0, 3, {N2, N2, N2}, 0, "hier(shm+tcp)"};
  run_spec(&sp);
}
END_TEST

START_TEST(tcp_2_ranks_64mib) {
  spec sp = {"tcp", 0, 1, 0, 2, {L1, L1}, 1, "tcp"};
  run_spec(&sp);
}
END_TEST

START_TEST(shm_2_ranks_64mib) {
  spec sp = {"shm", 0, 1, 0, 2, {L1, L1}, 1, "shm"};
  run_spec(&sp);
}
END_TEST

START_TEST(hier_2_nodes_x_1_64mib) {
  spec sp = {"auto", 1, 1, 0, 2, {N2, N3}, 1, "hier(shm+tcp)"};
  run_spec(&sp);
}
END_TEST

START_TEST(one_rank_is_local) {
  fl_coll_options o = fl_coll_options_default();
  fl_coll *c = NULL;
  ck_assert_int_eq(fl_coll_create(&o, &c), FL_OK);
  ck_assert_str_eq(fl_coll_backend_name(c), "local");
  float v[3] = {1, 2, 3};
  ck_assert_int_eq(fl_coll_allreduce(c, v, 3, FL_COLL_F32), FL_OK);
  ck_assert(v[0] == 1 && v[1] == 2 && v[2] == 3);
  uint8_t in[4] = {1, 2, 3, 4}, out[4] = {0};
  ck_assert_int_eq(fl_coll_allgather(c, in, 4, out), FL_OK);
  ck_assert_int_eq(memcmp(in, out, 4), 0);
  ck_assert_int_eq(fl_coll_broadcast(c, v, sizeof(v), 0), FL_OK);
  ck_assert_int_eq(fl_coll_barrier(c), FL_OK);
  ck_assert_int_eq(fl_coll_broadcast(c, v, sizeof(v), 1), FL_EINVAL);
  fl_coll_destroy(c);
}
END_TEST

START_TEST(bad_options) {
  fl_coll_options o = fl_coll_options_default();
  fl_coll *c = NULL;
  o.backend = "carrier-pigeon";
  ck_assert_int_eq(fl_coll_create(&o, &c), FL_EINVAL);
  o = fl_coll_options_default();
  o.rank = 2;
  o.world_size = 2;
  ck_assert_int_eq(fl_coll_create(&o, &c), FL_EINVAL);
  o = fl_coll_options_default();
  o.world_size = 2;
  ck_assert_int_eq(fl_coll_create(&o, &c), FL_EINVAL); /* no endpoints */
  ck_assert_ptr_null(c);
  /* The endpoint is taken: bind fails, and everything is released. */
  const char *h[] = {L1, L1};
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, 2, h), 0);
  o = ct_opts(&j, 0, "tcp", 2.0);
  o.listen_fd = -1;
  ck_assert_int_eq(fl_coll_create(&o, &c), FL_EIO);
  fl_endpoint bad[2] = {j.eps[0], j.eps[1]};
  snprintf(bad[1].host, sizeof bad[1].host, "no-such-host.invalid");
  o.endpoints = bad;
  o.rank = 1;
  ck_assert_int_eq(fl_coll_create(&o, &c), FL_EINVAL);
  ck_assert_ptr_null(c);
  ct_job_release(&j);
}
END_TEST

/* The transport table selection walks (coll.c): every name a job may give
 * has a row, in the order auto tries them (shm before tcp); nccl is a row
 * even in a build without it (then it says why); the hierarchical backend
 * is no row, and composes shm and tcp through their public ops (shm's
 * reduce is one of them). */
START_TEST(transport_table) {
  const coll_transport *nccl = coll_transport_find("nccl");
  const coll_transport *shm = coll_transport_find("shm");
  const coll_transport *tcp = coll_transport_find("tcp");
  ck_assert_ptr_nonnull(nccl);
  ck_assert_ptr_nonnull(shm);
  ck_assert_ptr_nonnull(tcp);
  ck_assert_ptr_null(coll_transport_find("auto"));
  ck_assert_ptr_null(coll_transport_find("hier"));
  ck_assert_ptr_eq(shm->be, &fl_coll_shm_backend);
  ck_assert_ptr_eq(tcp->be, &fl_coll_tcp_backend);
  ck_assert(shm < tcp);
  ck_assert((shm->flags & COLL_T_AUTO) && (tcp->flags & COLL_T_AUTO));
  ck_assert(!(nccl->flags & COLL_T_AUTO));
  ck_assert(shm->flags & COLL_T_ONE_HOST);
  ck_assert(nccl->flags & COLL_T_OWN_HIERARCHY);
#ifdef FL_HAVE_NCCL
  ck_assert_ptr_nonnull(nccl->be);
  ck_assert_ptr_nonnull(nccl->make_id);
#else
  ck_assert_ptr_null(nccl->be);
  ck_assert_ptr_nonnull(nccl->missing);
#endif
  ck_assert_ptr_nonnull(fl_coll_shm_backend.reduce);
}
END_TEST

START_TEST(shm_across_hosts_refused) {
  /* Both ranks must fail the same way: shm needs one host. */
  const char *hosts[] = {N2, N3};
  ct_job j;
  ck_assert_int_eq(ct_job_init(&j, 2, hosts), 0);
  spec sp = {"shm", 0, 1, 0, 2, {N2, N3}, 0, NULL};
  g_res = ct_shared(sizeof(shared_res));
  ct_spawn(&j, rank_main, &sp, NULL, NULL);
  ct_wait(&j, 30.0);
  ck_assert_int_eq(j.status[0], 10);
  ck_assert_int_eq(j.status[1], 10);
  munmap(g_res, sizeof(shared_res));
}
END_TEST

/* One test case per test, so CK_RUN_CASE=<name> runs a single one. */
#define ADD(name)                                                                                  \
  do {                                                                                             \
    TCase *t = tcase_create(#name);                                                                \
    tcase_set_timeout(t, 120);                                                                     \
    tcase_add_test(t, name);                                                                       \
    suite_add_tcase(s, t);                                                                         \
  } while (0)

static Suite *suite(void) {
  Suite *s = suite_create("coll_allreduce");
  ADD(one_rank_is_local);
  ADD(bad_options);
  ADD(tcp_2_ranks);
  ADD(tcp_3_ranks_2_rings);
  ADD(tcp_4_ranks);
  ADD(tcp_5_ranks_3_rings);
  ADD(tcp_8_ranks_two_hosts);
  ADD(shm_2_ranks);
  ADD(shm_3_ranks);
  ADD(auto_4_ranks_is_shm);
  ADD(shm_8_ranks);
  ADD(hier_2_nodes_x_2);
  ADD(hier_2_nodes_x_3_two_rings);
  ADD(hier_one_node);
  ADD(shm_across_hosts_refused);
  ADD(transport_table);
  ADD(tcp_2_ranks_64mib);
  ADD(shm_2_ranks_64mib);
  ADD(hier_2_nodes_x_1_64mib);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
