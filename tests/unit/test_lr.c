/* test_lr.c - unit tests of the learning-rate schedules (kernels/lr.c):
 * values at the key steps (start, middle, end, past the end, warmup
 * boundaries) worked out by hand, every torch-defined schedule step by step
 * against torch.optim.lr_scheduler (tests/fixtures/lr/lr_torch.txt, written
 * by gen_lr.py there), names, and rejected schedules. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_names.h"
#include "fl_optim.h"

#define EXPECT_LR(s, step, want)                                                     \
  do {                                                                               \
    float got_ = fl_lr_at((s), (step));                                              \
    ck_assert_msg(fabs((double)got_ - (want)) <= 1e-6 * fabs(want) + 1e-9,           \
                  "step %lld: lr %.9g, want %.9g", (long long)(step), (double)got_, \
                  (double)(want));                                                   \
  } while (0)

static fl_lr_schedule sched(fl_lr_kind kind) {
  fl_lr_schedule s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.base_lr = 0.1f;
  s.end_lr = 0.001f;
  s.power = 1.0f;
  s.decay_steps = 100;
  return s;
}

START_TEST(test_constant) {
  fl_lr_schedule s = sched(FL_LR_CONSTANT);
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_OK);
  EXPECT_LR(&s, 0, 0.1);
  EXPECT_LR(&s, 1000000, 0.1);
  EXPECT_LR(&s, -5, 0.1); /* a negative step counts as 0 */
}
END_TEST

START_TEST(test_polynomial) {
  fl_lr_schedule s = sched(FL_LR_POLYNOMIAL);
  /* power 1: linear from 0.1 to 0.001 over 100 steps */
  EXPECT_LR(&s, 0, 0.1);
  EXPECT_LR(&s, 50, 0.0505);  /* 0.099*0.5 + 0.001 */
  EXPECT_LR(&s, 75, 0.02575); /* 0.099*0.25 + 0.001 */
  EXPECT_LR(&s, 100, 0.001);
  EXPECT_LR(&s, 5000, 0.001); /* held at end_lr */
  s.power = 2.0f;
  EXPECT_LR(&s, 50, 0.02575); /* 0.099*0.25 + 0.001 */
  EXPECT_LR(&s, 90, 0.00199); /* 0.099*0.01 + 0.001 */
  s.power = 0.5f;
  EXPECT_LR(&s, 75, 0.0505); /* 0.099*sqrt(0.25) + 0.001 */
}
END_TEST

START_TEST(test_cosine) {
  fl_lr_schedule s = sched(FL_LR_COSINE);
  s.end_lr = 0.0f;
  EXPECT_LR(&s, 0, 0.1);
  EXPECT_LR(&s, 50, 0.05);                /* (1 + cos(pi/2))/2 = 0.5 */
  EXPECT_LR(&s, 25, 0.08535533906);       /* (1 + sqrt(2)/2)/2 * 0.1 */
  EXPECT_LR(&s, 100, 0.0);
  EXPECT_LR(&s, 101, 0.0);
  s.end_lr = 0.02f;
  EXPECT_LR(&s, 50, 0.06); /* 0.02 + 0.08*0.5 */
  EXPECT_LR(&s, 200, 0.02);
}
END_TEST

START_TEST(test_piecewise) {
  fl_lr_schedule s = sched(FL_LR_PIECEWISE);
  s.n_boundaries = 2;
  s.boundaries[0] = 10, s.boundaries[1] = 20;
  s.values[0] = 1.0f, s.values[1] = 0.5f, s.values[2] = 0.25f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_OK);
  EXPECT_LR(&s, 0, 1.0);
  EXPECT_LR(&s, 9, 1.0);
  EXPECT_LR(&s, 10, 0.5);
  EXPECT_LR(&s, 19, 0.5);
  EXPECT_LR(&s, 20, 0.25);
  EXPECT_LR(&s, 1 << 30, 0.25);
  s.n_boundaries = 0; /* a single piece */
  s.values[0] = 0.3f;
  EXPECT_LR(&s, 123, 0.3);
}
END_TEST

START_TEST(test_warmup) {
  fl_lr_schedule s = sched(FL_LR_POLYNOMIAL);
  s.warmup_steps = 10;
  s.warmup_start_lr = 0.0f;
  EXPECT_LR(&s, 0, 0.0);
  EXPECT_LR(&s, 5, 0.05); /* halfway to the schedule's start, 0.1 */
  EXPECT_LR(&s, 9, 0.09);
  EXPECT_LR(&s, 10, 0.1); /* the decay starts counting here */
  EXPECT_LR(&s, 60, 0.0505);
  EXPECT_LR(&s, 110, 0.001);
  s.warmup_start_lr = 0.02f;
  EXPECT_LR(&s, 5, 0.06);
  fl_lr_schedule c = sched(FL_LR_CONSTANT);
  c.warmup_steps = 4;
  EXPECT_LR(&c, 1, 0.025);
  EXPECT_LR(&c, 4, 0.1);
  fl_lr_schedule p = sched(FL_LR_PIECEWISE);
  p.n_boundaries = 1;
  p.boundaries[0] = 5;
  p.values[0] = 0.2f, p.values[1] = 0.02f;
  p.warmup_steps = 2;
  EXPECT_LR(&p, 1, 0.1);  /* halfway to values[0] */
  EXPECT_LR(&p, 6, 0.2);  /* t = 4 < 5 */
  EXPECT_LR(&p, 7, 0.02); /* t = 5 */
}
END_TEST

START_TEST(test_names) {
  for (int k = 0; k < FL_LR_COUNT; k++) {
    fl_lr_kind back;
    ck_assert_int_eq(fl_lr_kind_parse(fl_lr_kind_name((fl_lr_kind)k), &back), FL_OK);
    ck_assert_int_eq(back, k);
  }
  fl_lr_kind k;
  ck_assert_str_eq(fl_lr_kind_name(FL_LR_COSINE), "cosine");
  ck_assert_int_eq(fl_lr_kind_parse("exponentials", &k), FL_EINVAL);
  ck_assert_str_eq(fl_lr_kind_names[FL_LR_INVERSE_SQRT], "inverse_sqrt");
  ck_assert_ptr_null(fl_lr_kind_names[FL_LR_COUNT]);
  ck_assert_int_eq(fl_lr_kind_takes(FL_LR_STEP, "gamma"), 1);
  ck_assert_int_eq(fl_lr_kind_takes(FL_LR_STEP, "step"), 0); /* a word, not a prefix */
  ck_assert_int_eq(fl_lr_kind_takes(FL_LR_ONECYCLE, "div_factor"), 1);
  ck_assert_int_eq(fl_lr_kind_takes(FL_LR_ONECYCLE, "factor"), 0);
  ck_assert_int_eq(fl_lr_kind_takes(FL_LR_PLATEAU, "factor"), 1);
  ck_assert_int_eq(fl_lr_kind_takes(FL_LR_CONSTANT, "gamma"), 0);
  ck_assert_int_eq(fl_lr_kind_takes((fl_lr_kind)99, "gamma"), 0);
  ck_assert_int_eq(fl_lr_kind_parse(NULL, &k), FL_EINVAL);
  ck_assert_int_eq(fl_lr_kind_parse("cosine", NULL), FL_EINVAL);
  ck_assert_str_eq(fl_lr_kind_name(FL_LR_COUNT), "unknown");
}
END_TEST

START_TEST(test_bad_schedules) {
  ck_assert_int_eq(fl_lr_schedule_check(NULL), FL_EINVAL);
  ck_assert(isnan(fl_lr_at(NULL, 3)));
  fl_lr_schedule s = sched(FL_LR_POLYNOMIAL);
  s.base_lr = -0.1f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  ck_assert(isnan(fl_lr_at(&s, 3)));
  s = sched(FL_LR_POLYNOMIAL), s.decay_steps = 0;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_POLYNOMIAL), s.power = 0.0f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_COSINE), s.end_lr = NAN;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_COSINE), s.warmup_steps = -1;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_CONSTANT), s.warmup_start_lr = -1.0f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_PIECEWISE), s.n_boundaries = FL_LR_MAX_PIECES + 1;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_PIECEWISE), s.n_boundaries = 2;
  s.boundaries[0] = 5, s.boundaries[1] = 5; /* not increasing */
  s.values[0] = s.values[1] = s.values[2] = 0.1f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s.boundaries[1] = 6, s.values[2] = -1.0f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s.values[2] = 0.1f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_OK);
  s.kind = (fl_lr_kind)FL_LR_COUNT;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_STEP), s.gamma = 0.5f; /* step_size 0 */
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s.step_size = 2, s.gamma = 1.5f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s.gamma = 1.0f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_OK);
  s = sched(FL_LR_MULTISTEP), s.gamma = 0.5f; /* no milestone */
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s.n_boundaries = 1, s.boundaries[0] = 0; /* milestones count from 1 */
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_EXPONENTIAL); /* gamma 0 */
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_ONECYCLE), s.pct_start = 0.005f, s.div_factor = 25, s.final_div_factor = 1e4f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL); /* a rise of less than one step */
  s.pct_start = 0.3f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_OK);
  s.pct_start = 1.0f; /* no fall */
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_LINEAR), s.start_factor = 0.0f, s.end_factor = 1.0f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_INVERSE_SQRT); /* needs a warmup */
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  s = sched(FL_LR_PLATEAU), s.plateau.factor = 1.0f;
  ck_assert_int_eq(fl_lr_schedule_check(&s), FL_EINVAL);
  ck_assert_int_eq(fl_lr_plateau_observe(&s, 1.0, NULL), FL_EINVAL);
  s = sched(FL_LR_COSINE);
  ck_assert_int_eq(fl_lr_plateau_observe(&s, 1.0, NULL), FL_EINVAL); /* not a plateau */
  ck_assert_int_eq(fl_lr_plateau_observe(NULL, 1.0, NULL), FL_EINVAL);
}
END_TEST

START_TEST(test_warmup_in_front_of_torch_kinds) {
  fl_lr_schedule s = sched(FL_LR_STEP);
  s.step_size = 2, s.gamma = 0.5f, s.warmup_steps = 4;
  EXPECT_LR(&s, 2, 0.05); /* halfway to base */
  EXPECT_LR(&s, 4, 0.1);
  EXPECT_LR(&s, 6, 0.05); /* t = 2 */
  s = sched(FL_LR_PLATEAU), s.plateau.factor = 0.5f, s.warmup_steps = 2;
  EXPECT_LR(&s, 1, 0.05);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(fl_lr_plateau_observe(&s, 1.0, NULL), FL_OK);
  EXPECT_LR(&s, 1, 0.025); /* the warmup ramps to the current rate */
  EXPECT_LR(&s, 9, 0.05);
}
END_TEST

/* ------------------------------------------------ against torch (fixture) */

typedef enum { K_FLOAT, K_I64, K_LIST, K_CHOICE } ktype;

/* The fixture's keys (the job file's names) onto fl_lr_schedule fields. */
static const char *const k_anneal[] = {"cos", "linear", NULL};
static const char *const k_mode[] = {"min", "max", NULL};
static const char *const k_thmode[] = {"rel", "abs", NULL};
#define FLD(k, t, m, ...) {(k), (t), offsetof(fl_lr_schedule, m), __VA_ARGS__}
static const struct fkey {
  const char *key;
  ktype type;
  size_t off;
  const char *const *choices;
} fkeys[] = {
    FLD("base_lr", K_FLOAT, base_lr, NULL),
    FLD("max_lr", K_FLOAT, base_lr, NULL),
    FLD("end_lr", K_FLOAT, end_lr, NULL),
    FLD("power", K_FLOAT, power, NULL),
    FLD("decay_steps", K_I64, decay_steps, NULL),
    FLD("total_steps", K_I64, decay_steps, NULL),
    FLD("total_iters", K_I64, decay_steps, NULL),
    FLD("warmup_steps", K_I64, warmup_steps, NULL),
    FLD("warmup_start_lr", K_FLOAT, warmup_start_lr, NULL),
    FLD("step_size", K_I64, step_size, NULL),
    FLD("gamma", K_FLOAT, gamma, NULL),
    FLD("milestones", K_LIST, boundaries, NULL),
    FLD("pct_start", K_FLOAT, pct_start, NULL),
    FLD("anneal", K_CHOICE, anneal, k_anneal),
    FLD("div_factor", K_FLOAT, div_factor, NULL),
    FLD("final_div_factor", K_FLOAT, final_div_factor, NULL),
    FLD("start_factor", K_FLOAT, start_factor, NULL),
    FLD("end_factor", K_FLOAT, end_factor, NULL),
    FLD("mode", K_CHOICE, plateau.mode_max, k_mode),
    FLD("factor", K_FLOAT, plateau.factor, NULL),
    FLD("patience", K_I64, plateau.patience, NULL),
    FLD("threshold", K_FLOAT, plateau.threshold, NULL),
    FLD("threshold_mode", K_CHOICE, plateau.threshold_abs, k_thmode),
    FLD("cooldown", K_I64, plateau.cooldown, NULL),
    FLD("min_lr", K_FLOAT, plateau.min_lr, NULL),
};

static void set_key(fl_lr_schedule *s, const char *key, char *val) {
  char *base = (char *)s;
  for (size_t i = 0; i < sizeof fkeys / sizeof fkeys[0]; i++) {
    const struct fkey *f = &fkeys[i];
    if (strcmp(f->key, key) != 0) continue;
    if (f->type == K_FLOAT) {
      *(float *)(base + f->off) = strtof(val, NULL);
    } else if (f->type == K_I64) {
      *(int64_t *)(base + f->off) = strtoll(val, NULL, 10);
    } else if (f->type == K_LIST) {
      for (char *p = val; *p && s->n_boundaries < FL_LR_MAX_PIECES; p += *p == ',')
        s->boundaries[s->n_boundaries++] = strtoll(p, &p, 10);
    } else {
      const int k = fl_names_find(f->choices, val);
      ck_assert_msg(k >= 0, "fixture: %s=%s is no choice", key, val);
      *(int *)(base + f->off) = k;
    }
    return;
  }
  ck_abort_msg("fixture: unknown key %s", key);
}

/* Parse "case <kind> k=v ..." into s. */
static void parse_case(char *line, fl_lr_schedule *s) {
  memset(s, 0, sizeof *s);
  strtok(line, " \n");
  char *kind = strtok(NULL, " \n");
  ck_assert_int_eq(fl_lr_kind_parse(kind, &s->kind), FL_OK);
  for (char *kv = strtok(NULL, " \n"); kv; kv = strtok(NULL, " \n")) {
    char *eq = strchr(kv, '=');
    ck_assert_ptr_nonnull(eq);
    *eq = '\0';
    set_key(s, kv, eq + 1);
  }
  ck_assert_msg(fl_lr_schedule_check(s) == FL_OK, "fixture case %s: rejected", kind);
}

/* Numbers after the first word of line, into v (at most cap). */
static size_t numbers(char *line, double *v, size_t cap) {
  size_t n = 0;
  strtok(line, " \n");
  for (char *p = strtok(NULL, " \n"); p && n < cap; p = strtok(NULL, " \n"))
    v[n++] = strtod(p, NULL);
  return n;
}

/* Every rate within 1e-6 of the case's largest one. */
static void compare(const fl_lr_schedule *s, const double *got, const double *want, size_t n) {
  double big = 0;
  for (size_t i = 0; i < n; i++) big = fabs(want[i]) > big ? fabs(want[i]) : big;
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= 1e-6 * big, "%s step %zu: lr %.9g, torch %.9g",
                  fl_lr_kind_name(s->kind), i, got[i], want[i]);
}

START_TEST(test_against_torch) {
  const char *src = getenv("FL_SRCDIR");
  char path[512], line[8192];
  snprintf(path, sizeof path, "%s/tests/fixtures/lr/lr_torch.txt", src ? src : "..");
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fl_lr_schedule s;
  double metrics[256], want[256], got[256];
  size_t nm = 0, cases = 0, seen[FL_LR_COUNT] = {0};
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "case ", 5)) {
      parse_case(line, &s);
      nm = 0;
    } else if (!strncmp(line, "metrics ", 8)) {
      nm = numbers(line, metrics, 256);
    } else if (!strncmp(line, "lr ", 3)) {
      size_t n = numbers(line, want, 256);
      ck_assert_int_eq(s.kind == FL_LR_PLATEAU, nm == n);
      for (size_t i = 0; i < n; i++) {
        if (s.kind == FL_LR_PLATEAU)
          ck_assert_int_eq(fl_lr_plateau_observe(&s, metrics[i], NULL), FL_OK);
        got[i] = fl_lr_at(&s, (int64_t)i);
      }
      compare(&s, got, want, n);
      cases++;
      seen[s.kind]++;
    }
  }
  fclose(f);
  ck_assert_uint_ge(cases, 15);
  for (int k = FL_LR_STEP; k < FL_LR_COUNT; k++)
    ck_assert_msg(seen[k] > 0, "no torch case for %s", fl_lr_kind_name((fl_lr_kind)k));
}
END_TEST

START_TEST(test_plateau_reduced_flag) {
  fl_lr_schedule s = sched(FL_LR_PLATEAU);
  s.plateau.factor = 0.5f, s.plateau.min_lr = 0.04f;
  int r = -1;
  ck_assert_int_eq(fl_lr_plateau_observe(&s, 1.0, &r), FL_OK);
  ck_assert_int_eq(r, 0);
  ck_assert_int_eq(fl_lr_plateau_observe(&s, NAN, &r), FL_OK); /* nan: no improvement */
  ck_assert_int_eq(r, 1);
  EXPECT_LR(&s, 0, 0.05);
  ck_assert_int_eq(fl_lr_plateau_observe(&s, 2.0, &r), FL_OK);
  ck_assert_int_eq(r, 1);
  EXPECT_LR(&s, 0, 0.04); /* clamped at min_lr */
  ck_assert_int_eq(fl_lr_plateau_observe(&s, 2.0, &r), FL_OK);
  ck_assert_int_eq(r, 0); /* already at min_lr */
  EXPECT_LR(&s, 0, 0.04);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lr");
  TCase *tc = tcase_create("schedules");
  tcase_add_test(tc, test_constant);
  tcase_add_test(tc, test_polynomial);
  tcase_add_test(tc, test_cosine);
  tcase_add_test(tc, test_piecewise);
  tcase_add_test(tc, test_warmup);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_bad_schedules);
  tcase_add_test(tc, test_warmup_in_front_of_torch_kinds);
  tcase_add_test(tc, test_against_torch);
  tcase_add_test(tc, test_plateau_reduced_flag);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
