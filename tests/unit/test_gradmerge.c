/* test_gradmerge.c - unit tests of gradient merge (kernels/gradmerge.c).
 *
 * The property that matters: k micro-steps of N samples, merged, train the
 * same as one step of kN samples.  The model is least squares,
 * loss_b = 1/(2N) sum_j (w.x_j - y_j)^2 over a micro-batch, so the gradient
 * of a batch is the mean of the per-sample gradients (w.x_j - y_j) x_j; the
 * kN batch's gradient (computed here in double over all kN samples at once)
 * equals the mean of the k micro-batch gradients.  With avg off, the merged
 * gradient is their sum, i.e. the gradient of the sum of the k micro-batch
 * losses, which over the kN batch is (1/N) sum_j g_j.  Both trajectories
 * run for several optimizer steps (the gradients depend on w) with SGD,
 * Momentum and Adam. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fl_optim.h"

#define DIM 37      /* parameters: one tensor of 33 and one of 4 */
#define K 4         /* micro-steps per merged step */
#define NB 16       /* samples per micro-batch */
#define OUTER 5     /* merged optimizer steps */

static float xs[OUTER][K * NB][DIM], ys[OUTER][K * NB];

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void make_data(void) {
  for (int o = 0; o < OUTER; o++)
    for (int j = 0; j < K * NB; j++) {
      for (int d = 0; d < DIM; d++)
        xs[o][j][d] = rnd();
      ys[o][j] = rnd() * 3.0f;
    }
}

/* Mean (scale = 1/count) or scaled sum of per-sample gradients of samples
 * [j0, j1) of outer step o at w, accumulated in double, rounded once. */
static void batch_grad(const float *w, int o, int j0, int j1, double scale, float *g) {
  double acc[DIM] = {0};
  for (int j = j0; j < j1; j++) {
    double e = -(double)ys[o][j];
    for (int d = 0; d < DIM; d++)
      e += (double)w[d] * xs[o][j][d];
    for (int d = 0; d < DIM; d++)
      acc[d] += e * xs[o][j][d];
  }
  for (int d = 0; d < DIM; d++)
    g[d] = (float)(acc[d] * scale);
}

/* The parameter vector as two tensors (sizes 33 and 4) of one step. */
static void views(fl_optim_kind kind, float *w, float *g, float *s1, float *s2,
                  fl_optim_tensor t[2]) {
  int ns = fl_optim_state_count(kind);
  const size_t n0 = 33, n1 = DIM - 33;
  t[0] = (fl_optim_tensor){"w", w, g, ns >= 1 ? s1 : NULL, ns >= 2 ? s2 : NULL, n0};
  t[1] = (fl_optim_tensor){"b", w + n0, g + n0, ns >= 1 ? s1 + n0 : NULL,
                           ns >= 2 ? s2 + n0 : NULL, n1};
}

START_TEST(test_merge_equals_big_batch) {
  fl_optim_kind kinds[] = {FL_OPTIM_SGD, FL_OPTIM_MOMENTUM, FL_OPTIM_ADAM};
  fl_optim_kind kind = kinds[_i / 2];
  int avg = _i % 2;
  fl_optim_hparams hp = fl_optim_hparams_default(kind);
  float lr = kind == FL_OPTIM_ADAM ? 0.01f : (avg ? 0.05f : 0.0125f);
  make_data();

  float wa[DIM], wb[DIM], sa1[DIM] = {0}, sa2[DIM] = {0}, sb1[DIM] = {0}, sb2[DIM] = {0};
  float acc[DIM], gmicro[DIM], gbig[DIM];
  float w0[DIM];
  for (int d = 0; d < DIM; d++)
    w0[d] = wa[d] = wb[d] = rnd();
  fl_optim_tensor ta[2], tb[2];
  views(kind, wa, acc, sa1, sa2, ta);
  views(kind, wb, gbig, sb1, sb2, tb);
  float *accs[2] = {acc, acc + 33};
  const float *gs[2] = {gmicro, gmicro + 33};
  size_t ns[2] = {33, DIM - 33};

  for (int o = 0; o < OUTER; o++) {
    /* A: K micro-batches of NB, merged. */
    memset(acc, 0, sizeof acc);
    for (int k = 0; k < K; k++) {
      batch_grad(wa, o, k * NB, (k + 1) * NB, 1.0 / NB, gmicro);
      ck_assert_int_eq(fl_gm_accumulate(accs, gs, ns, 2), FL_OK);
    }
    ck_assert_int_eq(fl_gm_finalize(accs, ns, 2, K, avg), FL_OK);
    ck_assert_int_eq(fl_optim_step(&hp, ta, 2, lr, o + 1), FL_OK);
    /* B: one batch of K*NB. */
    batch_grad(wb, o, 0, K * NB, avg ? 1.0 / (K * NB) : 1.0 / NB, gbig);
    ck_assert_int_eq(fl_optim_step(&hp, tb, 2, lr, o + 1), FL_OK);
    for (int d = 0; d < DIM; d++)
      ck_assert_msg(fabsf(wa[d] - wb[d]) <= 2e-6f * (1.0f + fabsf(wb[d])),
                    "%s avg=%d outer %d w[%d]: merged %.9g, big batch %.9g",
                    fl_optim_kind_name(kind), avg, o, d, (double)wa[d], (double)wb[d]);
  }
  /* The runs moved: the comparison above was not between two still points. */
  float moved = 0;
  for (int d = 0; d < DIM; d++)
    moved = fmaxf(moved, fabsf(wa[d] - w0[d]));
  ck_assert_msg(moved > 1e-3f, "parameters moved only %g", (double)moved);
}
END_TEST

START_TEST(test_values) {
  float a0[3] = {0, 0, 0}, a1[1] = {0};
  float g[3][3] = {{1, 2, -3}, {3, 4, 0.5f}, {5, 6, 1}}, h[3] = {0.5f, 1, 2};
  float *acc[2] = {a0, a1};
  size_t n[2] = {3, 1};
  for (int k = 0; k < 3; k++) {
    const float *gs[2] = {g[k], &h[k]};
    ck_assert_int_eq(fl_gm_accumulate(acc, gs, n, 2), FL_OK);
  }
  ck_assert(a0[0] == 9 && a0[1] == 12 && a0[2] == -1.5f && a1[0] == 3.5f);
  ck_assert_int_eq(fl_gm_finalize(acc, n, 2, 3, 0), FL_OK); /* avg off: the sum */
  ck_assert(a0[0] == 9 && a0[1] == 12 && a1[0] == 3.5f);
  ck_assert_int_eq(fl_gm_finalize(acc, n, 2, 3, 1), FL_OK);
  ck_assert(a0[0] == 3 && a0[1] == 4 && a0[2] == -0.5f && a1[0] == 3.5f / 3.0f);
  ck_assert_int_eq(fl_gm_finalize(acc, n, 2, 1, 1), FL_OK); /* k = 1: unchanged */
  ck_assert(a0[0] == 3);
}
END_TEST

/* Big tensors go through the threaded path: compare with a plain loop. */
START_TEST(test_large) {
  size_t n[3] = {200003, 17, 65536};
  float *acc[3], *g[3], *want[3];
  for (int i = 0; i < 3; i++) {
    acc[i] = malloc(n[i] * sizeof(float));
    g[i] = malloc(n[i] * sizeof(float));
    want[i] = malloc(n[i] * sizeof(float));
    ck_assert(acc[i] && g[i] && want[i]);
    for (size_t j = 0; j < n[i]; j++) {
      acc[i][j] = rnd();
      g[i][j] = rnd();
      want[i][j] = (acc[i][j] + g[i][j]) / 5.0f;
    }
  }
  ck_assert_int_eq(fl_gm_accumulate(acc, (const float *const *)g, n, 3), FL_OK);
  ck_assert_int_eq(fl_gm_finalize(acc, n, 3, 5, 1), FL_OK);
  for (int i = 0; i < 3; i++) {
    ck_assert(memcmp(acc[i], want[i], n[i] * sizeof(float)) == 0);
    free(acc[i]), free(g[i]), free(want[i]);
  }
}
END_TEST

START_TEST(test_bad_args) {
  float a[2] = {1, 2}, b[2] = {3, 4};
  float *acc[1] = {a}, *accnull[1] = {NULL};
  const float *g[1] = {b}, *gnull[1] = {NULL}, *galias[1] = {a};
  size_t n[1] = {2}, n0[1] = {0};
  ck_assert_int_eq(fl_gm_accumulate(NULL, g, n, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate(acc, NULL, n, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate(acc, g, NULL, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate(acc, g, n, 0), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate(acc, g, n0, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate(accnull, g, n, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate(acc, gnull, n, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate(acc, galias, n, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_finalize(NULL, n, 1, 2, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_finalize(acc, NULL, 1, 2, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_finalize(acc, n, 0, 2, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_finalize(acc, n, 1, 0, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_finalize(acc, n, 1, -2, 1), FL_EINVAL);
  ck_assert_int_eq(fl_gm_finalize(acc, n0, 1, 2, 1), FL_EINVAL);
  ck_assert(a[0] == 1 && a[1] == 2 && b[0] == 3);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gradmerge");
  TCase *tc = tcase_create("merge");
  tcase_add_loop_test(tc, test_merge_equals_big_batch, 0, 6);
  tcase_add_test(tc, test_values);
  tcase_add_test(tc, test_large);
  tcase_add_test(tc, test_bad_args);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
