/* test_syncbn_kernels.c - batch norm's phase kernels (fl_layers.h:
 * stats_sum, stats_sqdev, forward_apply, backward_reduce, backward_apply),
 * which synchronised batch norm runs with an allreduce between the phases.
 *
 *  - With one "rank" (the exchange an identity) the phases give exactly the
 *    bits of fl_batchnorm_forward_train and fl_batchnorm_backward: outputs,
 *    saved and running statistics, dx (also in place), dgamma, dbeta; over
 *    activations, inner sizes, with and without gamma/beta and running
 *    statistics.
 *  - A batch cut into uneven slices ("ranks", one of them a single value
 *    per channel), whose sums are added up between the phases, gives the
 *    whole batch's results (within float rounding of the different order
 *    of the double sums), and running statistics equal bit for bit on
 *    every slice.
 *  - Its gradients (dx of every slice from the summed backward sums; the
 *    sum over slices of dgamma, dbeta) match central differences of the
 *    global objective sum(r * y) (gradcheck.h).
 *  - Bad arguments (counts below the local count, NULL buffers) are
 *    FL_EINVAL. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fl_layers.h"
#include "gradcheck.h"

#define EPS 1e-2
#define ATOL 1e-3
#define RTOL 1e-3
#define MAXR 4

static float *fbuf(size_t n) {
  float *p = calloc(n ? n : 1, sizeof *p);
  ck_assert_ptr_nonnull(p);
  return p;
}

static double *dbuf(size_t n) {
  double *p = calloc(n ? n : 1, sizeof *p);
  ck_assert_ptr_nonnull(p);
  return p;
}

static float *fcopy(const float *a, size_t n) {
  float *p = fbuf(n);
  memcpy(p, a, n * sizeof *p);
  return p;
}

/* A batch of N samples of C channels x S values cut into R slices of
 * ns[r] consecutive samples (a "rank" each). */
typedef struct bn_case {
  size_t N, C, S, R, ns[MAXR], n;
  fl_act act;
  int affine, running;
  float *x, *g, *b, *r, *y;   /* whole batch (y: the slices' outputs side by side) */
  float *rm[MAXR], *rv[MAXR]; /* every slice's own running statistics */
  float *sm[MAXR], *si[MAXR];
  float *dx, *dg, *db;        /* dx of every slice; dgamma, dbeta summed over slices */
  double count;               /* global values per channel */
} bn_case;

static fl_norm_desc slice_desc(const bn_case *c, size_t r) {
  fl_norm_desc d = {.batch = c->ns[r], .channels = c->C, .inner = c->S, .eps = 1e-5f,
                    .momentum = 0.1f};
  return d;
}

static size_t slice_off(const bn_case *c, size_t r) {
  size_t o = 0;
  for (size_t q = 0; q < r; q++) o += c->ns[q];
  return o * c->C * c->S;
}

static bn_case bn_make(size_t R, const size_t *ns, size_t C, size_t S, fl_act act, int affine,
                       int running, uint64_t seed) {
  bn_case c = {.C = C, .S = S, .R = R, .act = act, .affine = affine, .running = running};
  for (size_t r = 0; r < R; r++) c.ns[r] = ns[r], c.N += ns[r];
  c.n = c.N * C * S;
  c.count = (double)(c.N * S);
  c.x = fbuf(c.n), c.y = fbuf(c.n), c.r = fbuf(c.n), c.dx = fbuf(c.n);
  c.g = fbuf(C), c.b = fbuf(C), c.dg = fbuf(C), c.db = fbuf(C);
  uint64_t s = seed;
  gc_fill(c.x, c.n, &s, -2, 2);
  for (size_t i = 0; i < c.n; i++) c.x[i] += 0.5f; /* a mean away from 0 */
  gc_fill(c.g, C, &s, 0.5, 1.5);
  gc_fill(c.b, C, &s, -0.5, 0.5);
  gc_fill(c.r, c.n, &s, -1, 1);
  for (size_t r = 0; r < R; r++) {
    c.rm[r] = fbuf(C), c.rv[r] = fbuf(C), c.sm[r] = fbuf(C), c.si[r] = fbuf(C);
    for (size_t ch = 0; ch < C; ch++) c.rm[r][ch] = 0.25f, c.rv[r][ch] = 1.5f;
  }
  return c;
}

static void bn_free(bn_case *c) {
  free(c->x), free(c->y), free(c->r), free(c->dx), free(c->g), free(c->b), free(c->dg),
      free(c->db);
  for (size_t r = 0; r < c->R; r++) free(c->rm[r]), free(c->rv[r]), free(c->sm[r]), free(c->si[r]);
}

/* Forward over the slices: every slice's sums, added up in slice order
 * (the allreduce), then its squared deviations, added up, then apply. */
static void split_forward(bn_case *c, int update_running) {
  const size_t C = c->C;
  double *sum = dbuf(C + 1), *sq = dbuf(C), *part = dbuf(C);
  for (size_t r = 0; r < c->R; r++) {
    const fl_norm_desc d = slice_desc(c, r);
    ck_assert_int_eq(fl_batchnorm_stats_sum(&d, c->x + slice_off(c, r), part), FL_OK);
    for (size_t ch = 0; ch < C; ch++) sum[ch] += part[ch];
    sum[C] += (double)(d.batch * d.inner);
  }
  ck_assert(sum[C] == c->count);
  for (size_t r = 0; r < c->R; r++) {
    const fl_norm_desc d = slice_desc(c, r);
    ck_assert_int_eq(fl_batchnorm_stats_sqdev(&d, c->x + slice_off(c, r), sum, sum[C], part),
                     FL_OK);
    for (size_t ch = 0; ch < C; ch++) sq[ch] += part[ch];
  }
  for (size_t r = 0; r < c->R; r++) {
    const fl_norm_desc d = slice_desc(c, r);
    const int run = update_running && c->running;
    ck_assert_int_eq(fl_batchnorm_forward_apply(&d, c->x + slice_off(c, r),
                                                c->y + slice_off(c, r), c->affine ? c->g : NULL,
                                                c->affine ? c->b : NULL, sum, sq, sum[C],
                                                run ? c->rm[r] : NULL, run ? c->rv[r] : NULL,
                                                c->sm[r], c->si[r], c->act),
                     FL_OK);
  }
  free(sum), free(sq), free(part);
}

/* Backward over the slices from dy = r (the global objective's gradient):
 * each slice's reduce, the sums added up, then each slice's apply (in
 * place into its dy when in_place). */
static void split_backward(bn_case *c, int in_place) {
  const size_t C = c->C;
  double *tot = dbuf(2 * C), *part = dbuf(2 * C);
  float *dy = fcopy(c->r, c->n), *dg = fbuf(C), *db = fbuf(C);
  memset(c->dg, 0, C * sizeof(float));
  memset(c->db, 0, C * sizeof(float));
  for (size_t r = 0; r < c->R; r++) {
    const fl_norm_desc d = slice_desc(c, r);
    const size_t o = slice_off(c, r);
    ck_assert_int_eq(fl_batchnorm_backward_reduce(&d, c->x + o, c->y + o, dy + o, c->sm[r],
                                                  c->si[r], part, dg, db, c->act),
                     FL_OK);
    for (size_t k = 0; k < 2 * C; k++) tot[k] += part[k];
    for (size_t ch = 0; ch < C; ch++) c->dg[ch] += dg[ch], c->db[ch] += db[ch];
  }
  for (size_t r = 0; r < c->R; r++) {
    const fl_norm_desc d = slice_desc(c, r);
    const size_t o = slice_off(c, r);
    ck_assert_int_eq(fl_batchnorm_backward_apply(&d, c->x + o, dy + o, c->affine ? c->g : NULL,
                                                 c->sm[r], c->si[r], tot, c->count,
                                                 in_place ? dy + o : c->dx + o),
                     FL_OK);
  }
  if (in_place) memcpy(c->dx, dy, c->n * sizeof(float));
  free(tot), free(part), free(dy), free(dg), free(db);
}

/* ------------------------------------------------------ one slice: bitwise */

START_TEST(phases_match_fused_bitwise) {
  const fl_act acts[] = {FL_ACT_NONE, FL_ACT_RELU, FL_ACT_TANH};
  const size_t inner[] = {5, 1};
  uint64_t seed = 100;
  for (size_t a = 0; a < 3; a++)
    for (size_t si = 0; si < 2; si++)
      for (int affine = 0; affine < 2; affine++)
        for (int running = 0; running < 2; running++) {
          const size_t ns[1] = {4};
          bn_case c = bn_make(1, ns, 3, inner[si], acts[a], affine, running, seed++);
          const fl_norm_desc d = slice_desc(&c, 0);
          const size_t C = c.C;
          /* the fused kernels on copies */
          float *y = fbuf(c.n), *sm = fbuf(C), *si_ = fbuf(C);
          float *rm = fcopy(c.rm[0], C), *rv = fcopy(c.rv[0], C);
          const float *g = affine ? c.g : NULL, *b = affine ? c.b : NULL;
          ck_assert_int_eq(fl_batchnorm_forward_train(&d, c.x, y, g, b, running ? rm : NULL,
                                                      running ? rv : NULL, sm, si_, c.act),
                           FL_OK);
          split_forward(&c, 1);
          ck_assert_mem_eq(y, c.y, c.n * sizeof(float));
          ck_assert_mem_eq(sm, c.sm[0], C * sizeof(float));
          ck_assert_mem_eq(si_, c.si[0], C * sizeof(float));
          ck_assert_mem_eq(rm, c.rm[0], C * sizeof(float));
          ck_assert_mem_eq(rv, c.rv[0], C * sizeof(float));
          float *dy = fcopy(c.r, c.n), *dx = fbuf(c.n), *dg = fbuf(C), *db = fbuf(C);
          ck_assert_int_eq(fl_batchnorm_backward(&d, c.x, y, dy, g, sm, si_, dx, dg, db, c.act),
                           FL_OK);
          for (int in_place = 0; in_place < 2; in_place++) {
            memset(c.dx, 0, c.n * sizeof(float));
            split_backward(&c, in_place);
            ck_assert_mem_eq(dx, c.dx, c.n * sizeof(float));
            ck_assert_mem_eq(dg, c.dg, C * sizeof(float));
            ck_assert_mem_eq(db, c.db, C * sizeof(float));
          }
          free(y), free(sm), free(si_), free(rm), free(rv), free(dy), free(dx), free(dg),
              free(db);
          bn_free(&c);
        }
}
END_TEST

/* --------------------------------------------------- slices: whole batch */

static double rel_diff(const float *a, const float *b, size_t n) {
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)a[i]));
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
  return scale > 0 ? worst / scale : worst;
}

START_TEST(slices_match_whole_batch) {
  const size_t shapes[][2] = {{3, 6}, {4, 1}}; /* C, S */
  const size_t ns[3] = {2, 3, 1};
  for (size_t k = 0; k < 2; k++) {
    bn_case c = bn_make(3, ns, shapes[k][0], shapes[k][1], FL_ACT_TANH, 1, 1, 200 + k);
    const size_t C = c.C;
    fl_norm_desc whole = slice_desc(&c, 0);
    whole.batch = c.N;
    float *y = fbuf(c.n), *sm = fbuf(C), *si = fbuf(C), *rm = fcopy(c.rm[0], C),
          *rv = fcopy(c.rv[0], C);
    ck_assert_int_eq(
        fl_batchnorm_forward_train(&whole, c.x, y, c.g, c.b, rm, rv, sm, si, c.act), FL_OK);
    split_forward(&c, 1);
    ck_assert_double_le(rel_diff(y, c.y, c.n), 1e-6);
    for (size_t r = 0; r < c.R; r++) {
      ck_assert_double_le(rel_diff(sm, c.sm[r], C), 1e-6);
      ck_assert_double_le(rel_diff(si, c.si[r], C), 1e-6);
      ck_assert_double_le(rel_diff(rm, c.rm[r], C), 1e-6);
      ck_assert_double_le(rel_diff(rv, c.rv[r], C), 1e-6);
      /* every slice holds the same global statistics, bit for bit */
      ck_assert_mem_eq(c.sm[r], c.sm[0], C * sizeof(float));
      ck_assert_mem_eq(c.si[r], c.si[0], C * sizeof(float));
      ck_assert_mem_eq(c.rm[r], c.rm[0], C * sizeof(float));
      ck_assert_mem_eq(c.rv[r], c.rv[0], C * sizeof(float));
    }
    /* the whole batch's per-sample statistics differ from a slice's own:
     * the slices really use the global ones */
    fl_norm_desc one = slice_desc(&c, 1);
    float *y1 = fbuf(c.n), *sm1 = fbuf(C), *si1 = fbuf(C);
    ck_assert_int_eq(fl_batchnorm_forward_train(&one, c.x + slice_off(&c, 1), y1, c.g, c.b, NULL,
                                                NULL, sm1, si1, c.act),
                     FL_OK);
    ck_assert_double_gt(rel_diff(sm, sm1, C), 1e-3);
    float *dy = fcopy(c.r, c.n), *dx = fbuf(c.n), *dg = fbuf(C), *db = fbuf(C);
    ck_assert_int_eq(fl_batchnorm_backward(&whole, c.x, y, dy, c.g, sm, si, dx, dg, db, c.act),
                     FL_OK);
    split_backward(&c, 0);
    ck_assert_double_le(rel_diff(dx, c.dx, c.n), 1e-5);
    ck_assert_double_le(rel_diff(dg, c.dg, C), 1e-5);
    ck_assert_double_le(rel_diff(db, c.db, C), 1e-5);
    free(y), free(sm), free(si), free(rm), free(rv), free(y1), free(sm1), free(si1), free(dy),
        free(dx), free(dg), free(db);
    bn_free(&c);
  }
}
END_TEST

/* ----------------------------------------------- slices: finite differences */

static double split_obj(void *p) {
  bn_case *c = p;
  split_forward(c, 0);
  double s = 0.0;
  for (size_t i = 0; i < c->n; i++) s += (double)c->r[i] * (double)c->y[i];
  return s;
}

START_TEST(slices_gradients) {
  const fl_act acts[] = {FL_ACT_NONE, FL_ACT_TANH, FL_ACT_RELU};
  const size_t ns[3] = {1, 2, 2};
  for (size_t a = 0; a < 3; a++) {
    bn_case c = bn_make(3, ns, 3, 4, acts[a], 1, 0, 300 + a);
    split_obj(&c);
    split_backward(&c, 0);
    float *dx = fcopy(c.dx, c.n), *dg = fcopy(c.dg, c.C), *db = fcopy(c.db, c.C);
    gc_result rx, rg, rb;
    if (acts[a] == FL_ACT_RELU) {
      rx = gc_check_kinked(c.x, c.n, dx, split_obj, &c, EPS, ATOL, RTOL);
      rg = gc_check_kinked(c.g, c.C, dg, split_obj, &c, EPS, ATOL, RTOL);
      rb = gc_check_kinked(c.b, c.C, db, split_obj, &c, EPS, ATOL, RTOL);
      ck_assert_uint_le(rx.skipped + rg.skipped + rb.skipped, c.n / 10);
    } else {
      rx = gc_check(c.x, c.n, dx, split_obj, &c, EPS, ATOL, RTOL);
      rg = gc_check(c.g, c.C, dg, split_obj, &c, EPS, ATOL, RTOL);
      rb = gc_check(c.b, c.C, db, split_obj, &c, EPS, ATOL, RTOL);
    }
    GC_ASSERT("sync batchnorm dx", rx);
    GC_ASSERT("sync batchnorm dgamma", rg);
    GC_ASSERT("sync batchnorm dbeta", rb);
    /* the tolerance bites: each slice's local dx (its own statistics'
     * formula with the global count but only its own sums) is wrong */
    float *dy = fcopy(c.r, c.n);
    double *part = dbuf(2 * c.C);
    const fl_norm_desc d = slice_desc(&c, 1);
    const size_t o = slice_off(&c, 1);
    ck_assert_int_eq(fl_batchnorm_backward_reduce(&d, c.x + o, c.y + o, dy + o, c.sm[1], c.si[1],
                                                  part, NULL, NULL, c.act),
                     FL_OK);
    ck_assert_int_eq(fl_batchnorm_backward_apply(&d, c.x + o, dy + o, c.g, c.sm[1], c.si[1], part,
                                                 c.count, dy + o),
                     FL_OK);
    double worst = 0.0;
    for (size_t i = o; i < o + d.batch * c.C * c.S; i++)
      worst = fmax(worst, fabs((double)dy[i] - (double)dx[i]));
    ck_assert_double_gt(worst, 1e-2);
    free(dy), free(part), free(dx), free(dg), free(db);
    bn_free(&c);
  }
}
END_TEST

/* ---------------------------------------------------------- bad arguments */

START_TEST(bad_arguments) {
  const fl_norm_desc d = {.batch = 2, .channels = 2, .inner = 3, .eps = 1e-5f, .momentum = 0.1f};
  float x[12] = {0}, y[12] = {0}, dy[12] = {0}, sm[2] = {0}, si[2] = {1, 1}, rm[2] = {0, 0},
        rv[2] = {1, 1};
  double sum[2] = {0}, sq[2] = {0}, sums[4] = {0};
  fl_norm_desc bad = d;
  bad.eps = 0.0f;
  ck_assert_int_eq(fl_batchnorm_stats_sum(&bad, x, sum), FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_stats_sum(&d, x, NULL), FL_EINVAL);
  /* a count below this slice's own 6 values */
  ck_assert_int_eq(fl_batchnorm_stats_sqdev(&d, x, sum, 5.0, sq), FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_stats_sqdev(&d, x, sum, NAN, sq), FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_stats_sqdev(&d, x, sum, 12.0, sq), FL_OK);
  ck_assert_int_eq(fl_batchnorm_forward_apply(&d, x, y, NULL, NULL, sum, sq, 5.0, NULL, NULL, sm,
                                              si, FL_ACT_NONE),
                   FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_forward_apply(&d, x, y, NULL, NULL, sum, sq, INFINITY, NULL,
                                              NULL, sm, si, FL_ACT_NONE),
                   FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_forward_apply(&d, x, y, NULL, NULL, sum, sq, 12.0, rm, NULL, sm,
                                              si, FL_ACT_NONE),
                   FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_forward_apply(&d, x, y, NULL, NULL, NULL, sq, 12.0, NULL, NULL,
                                              sm, si, FL_ACT_NONE),
                   FL_EINVAL);
  /* one value per channel in all: no variance to speak of */
  const fl_norm_desc one = {.batch = 1, .channels = 2, .inner = 1, .eps = 1e-5f,
                            .momentum = 0.1f};
  ck_assert_int_eq(fl_batchnorm_forward_apply(&one, x, y, NULL, NULL, sum, sq, 1.0, NULL, NULL,
                                              sm, si, FL_ACT_NONE),
                   FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_forward_apply(&one, x, y, NULL, NULL, sum, sq, 2.0, rm, rv, sm,
                                              si, FL_ACT_NONE),
                   FL_OK);
  ck_assert_int_eq(fl_batchnorm_backward_reduce(&d, x, NULL, dy, sm, si, sums, NULL, NULL,
                                                FL_ACT_RELU),
                   FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_backward_reduce(&d, x, y, dy, sm, si, NULL, NULL, NULL,
                                                FL_ACT_NONE),
                   FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_backward_apply(&d, x, dy, NULL, sm, si, sums, 5.0, dy),
                   FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_backward_apply(&d, x, dy, NULL, sm, si, sums, 6.0, NULL),
                   FL_EINVAL);
  ck_assert_int_eq(fl_batchnorm_backward_apply(&d, x, dy, NULL, sm, si, sums, 6.0, dy), FL_OK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("syncbn_kernels");
  TCase *t = tcase_create("core");
  tcase_add_test(t, phases_match_fused_bitwise);
  tcase_add_test(t, slices_match_whole_batch);
  tcase_add_test(t, slices_gradients);
  tcase_add_test(t, bad_arguments);
  suite_add_tcase(s, t);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
