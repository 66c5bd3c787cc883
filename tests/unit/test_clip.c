/* test_clip.c - unit tests of gradient clipping (kernels/clip.c): every
 * kind against torch.nn.utils.clip_grad_norm_ / clip_grad_value_ on the
 * gradients of tests/fixtures/clip/clip_torch.txt (written by gen_clip.py
 * there: several tensors, p = 1, 2, 3, inf, inf and nan elements), a case
 * worked out by hand, names, and rejected arguments. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_names.h"
#include "fl_optim.h"

#define MAX_T 8
#define MAX_N 128

typedef struct clip_case {
  fl_clip c;
  float in[MAX_T][MAX_N], out[MAX_T][MAX_N];
  size_t n[MAX_T];
  size_t nt, nout;
  double norm;
} clip_case;

/* The numbers after the first word of line into v (at most cap). */
static size_t numbers(const char *line, float *v, size_t cap) {
  const char *p = strchr(line, ' ');
  size_t k = 0;
  while (p && k < cap) {
    char *end;
    double x = strtod(p, &end);
    if (end == p) break;
    v[k++] = (float)x;
    p = end;
  }
  return k;
}

static void parse_head(char *line, clip_case *cc) {
  char kind[32];
  double mx, cv, p;
  memset(cc, 0, sizeof *cc);
  ck_assert_int_eq(sscanf(line, "case %31s max_norm=%lf clip_value=%lf norm_type=%lf", kind, &mx,
                          &cv, &p), 4);
  const int k = fl_names_find(fl_clip_kind_names, kind);
  ck_assert_msg(k >= 0, "fixture: unknown kind %s", kind);
  cc->c = (fl_clip){.kind = (fl_clip_kind)k, .max_norm = (float)mx, .clip_value = (float)cv,
                    .norm_type = (float)p};
}

/* Same within 1e-6 of the case's largest finite magnitude; nan and inf
 * exactly where torch has them. */
static void same(double got, double want, double big, const char *what, size_t t, size_t i) {
  if (isnan(want) || isinf(want)) {
    ck_assert_msg(isnan(want) ? isnan(got) : got == want, "%s [%zu][%zu]: %g, torch %g", what, t,
                  i, got, want);
    return;
  }
  ck_assert_msg(fabs(got - want) <= 1e-6 * big + 1e-30, "%s [%zu][%zu]: %.9g, torch %.9g", what, t,
                i, got, want);
}

static void run_case(clip_case *cc) {
  float *g[MAX_T];
  double norm = 0, big = 0;
  for (size_t t = 0; t < cc->nt; t++) g[t] = cc->in[t];
  ck_assert_int_eq(fl_clip_grads(&cc->c, g, cc->n, cc->nt, &norm), FL_OK);
  for (size_t t = 0; t < cc->nt; t++)
    for (size_t i = 0; i < cc->n[t]; i++)
      if (isfinite(cc->out[t][i])) big = fmax(big, fabs(cc->out[t][i]));
  for (size_t t = 0; t < cc->nt; t++)
    for (size_t i = 0; i < cc->n[t]; i++)
      same(cc->in[t][i], cc->out[t][i], big, fl_clip_kind_names[cc->c.kind], t, i);
  same(norm, cc->norm, fabs(cc->norm), "norm", 0, 0);
}

START_TEST(test_against_torch) {
  const char *src = getenv("FL_SRCDIR");
  char path[512];
  static char line[16384];
  static clip_case cc;
  snprintf(path, sizeof path, "%s/tests/fixtures/clip/clip_torch.txt", src ? src : "..");
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  int cases = 0, open = 0, kinds[FL_CLIP_COUNT] = {0};
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "case ", 5)) {
      if (open) run_case(&cc), cases++, kinds[cc.c.kind]++;
      parse_head(line, &cc);
      open = 1;
    } else if (!strncmp(line, "in ", 3)) {
      ck_assert_uint_lt(cc.nt, MAX_T);
      cc.n[cc.nt] = numbers(line, cc.in[cc.nt], MAX_N);
      cc.nt++;
    } else if (!strncmp(line, "norm ", 5)) {
      cc.norm = strtod(line + 5, NULL);
    } else if (!strncmp(line, "out ", 4)) {
      ck_assert_uint_lt(cc.nout, cc.nt);
      ck_assert_uint_eq(numbers(line, cc.out[cc.nout], MAX_N), cc.n[cc.nout]);
      cc.nout++;
    }
  }
  fclose(f);
  if (open) run_case(&cc), cases++, kinds[cc.c.kind]++;
  ck_assert_int_ge(cases, 12);
  ck_assert(kinds[FL_CLIP_GLOBAL_NORM] && kinds[FL_CLIP_NORM] && kinds[FL_CLIP_VALUE]);
}
END_TEST

START_TEST(test_by_hand) {
  /* ||(3, 4, 0, 12)|| = 13; max_norm 6.5: coef 6.5 / (13 + 1e-6) */
  float a[2] = {3, 4}, b[2] = {0, 12}, *g[2] = {a, b};
  size_t n[2] = {2, 2};
  double norm;
  fl_clip c = {.kind = FL_CLIP_GLOBAL_NORM, .max_norm = 6.5f, .norm_type = 2.0f};
  ck_assert_int_eq(fl_clip_grads(&c, g, n, 2, &norm), FL_OK);
  ck_assert_double_eq_tol(norm, 13.0, 1e-12);
  float coef = (float)(6.5 / (13.0 + 1e-6));
  ck_assert_float_eq(a[0], 3 * coef);
  ck_assert_float_eq(b[1], 12 * coef);
  /* per tensor: (3,4) has norm 5 > 1, (0, 0.5) 0.5 stays */
  float x[2] = {3, 4}, y[2] = {0, 0.5f}, *h[2] = {x, y};
  c = (fl_clip){.kind = FL_CLIP_NORM, .max_norm = 1.0f, .norm_type = 2.0f};
  ck_assert_int_eq(fl_clip_grads(&c, h, n, 2, &norm), FL_OK);
  ck_assert_double_eq_tol(norm, 5.0, 1e-12);
  ck_assert_float_eq_tol(x[0], 0.6f, 1e-6f);
  ck_assert_float_eq(y[1], 0.5f);
  /* none: untouched, lists not looked at */
  c.kind = FL_CLIP_NONE;
  ck_assert_int_eq(fl_clip_grads(&c, NULL, NULL, 0, &norm), FL_OK);
  ck_assert(isnan(norm));
}
END_TEST

START_TEST(test_names_and_refusals) {
  ck_assert_str_eq(fl_clip_kind_names[FL_CLIP_GLOBAL_NORM], "global_norm");
  ck_assert_ptr_null(fl_clip_kind_names[FL_CLIP_COUNT]);
  float a[1] = {1}, *g[1] = {a}, *gnull[1] = {NULL};
  size_t n[1] = {1}, n0[1] = {0};
  fl_clip c = {.kind = FL_CLIP_GLOBAL_NORM, .max_norm = 1.0f, .norm_type = 2.0f};
  ck_assert_int_eq(fl_clip_check(&c), FL_OK);
  c.norm_type = INFINITY;
  ck_assert_int_eq(fl_clip_check(&c), FL_OK);
  c.norm_type = 0.0f;
  ck_assert_int_eq(fl_clip_check(&c), FL_EINVAL);
  c.norm_type = NAN;
  ck_assert_int_eq(fl_clip_check(&c), FL_EINVAL);
  c.norm_type = 2.0f, c.max_norm = 0.0f;
  ck_assert_int_eq(fl_clip_grads(&c, g, n, 1, NULL), FL_EINVAL);
  c.max_norm = INFINITY;
  ck_assert_int_eq(fl_clip_check(&c), FL_EINVAL);
  c = (fl_clip){.kind = FL_CLIP_VALUE, .clip_value = -1.0f};
  ck_assert_int_eq(fl_clip_check(&c), FL_EINVAL);
  c.clip_value = 0.5f;
  ck_assert_int_eq(fl_clip_grads(&c, g, n, 0, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_clip_grads(&c, gnull, n, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_clip_grads(&c, g, n0, 1, NULL), FL_EINVAL);
  ck_assert_float_eq(a[0], 1.0f); /* nothing touched */
  c.kind = FL_CLIP_COUNT;
  ck_assert_int_eq(fl_clip_check(&c), FL_EINVAL);
  ck_assert_int_eq(fl_clip_check(NULL), FL_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("clip");
  TCase *tc = tcase_create("clip");
  tcase_add_test(tc, test_against_torch);
  tcase_add_test(tc, test_by_hand);
  tcase_add_test(tc, test_names_and_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
