/* test_plugin.c - model plugins: the example plugin loads, has the right
 * parameters, passes a finite-difference gradient check and trains; a
 * missing file, a library without the symbol, a file that is no library
 * and a plugin of another ABI version are refused with an error that names
 * the path and the reason. */
#include <config.h>

#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fl_model.h"
#include "gradcheck.h"

static void path_of(char *out, size_t n, const char *env, const char *rel) {
  const char *dir = getenv(env);
  snprintf(out, n, "%s/%s", dir ? dir : ".", rel);
}

static fl_model_spec plugin_spec(const char *rel, const char *args) {
  fl_model_spec s;
  fl_model_spec_defaults(&s);
  snprintf(s.kind, sizeof s.kind, "plugin");
  path_of(s.plugin_path, sizeof s.plugin_path, "FL_BUILDDIR", rel);
  snprintf(s.plugin_args, sizeof s.plugin_args, "%s", args);
  s.in_height = 4, s.in_width = 5;
  s.num_classes = 4;
  return s;
}

#define EXAMPLE "trainer/.libs/plugin_example.so"

/* Run fl_model_create with stderr captured; returns its status and the log. */
static fl_status create_logged(const fl_model_spec *s, char *log, size_t n) {
  char tmpl[] = "/tmp/fl_test_plugin_XXXXXX";
  int fd = mkstemp(tmpl);
  ck_assert_int_ge(fd, 0);
  unlink(tmpl);
  int saved = dup(2);
  dup2(fd, 2);
  fl_model *m = NULL;
  fl_status st = fl_model_create(s, 4, 1, &m);
  dup2(saved, 2);
  close(saved);
  if (m) fl_model_destroy(m);
  ssize_t got = pread(fd, log, n - 1, 0);
  log[got > 0 ? got : 0] = '\0';
  close(fd);
  fputs(log, stderr);
  return st;
}

typedef struct ctx {
  fl_model *m;
  float *x;
  int32_t *y;
  size_t n;
} ctx;

static double loss(void *p) {
  ctx *c = p;
  fl_model_result r;
  ck_assert_int_eq(fl_model_train_step(c->m, c->x, c->y, c->n, 1.0f, NULL, NULL, &r), FL_OK);
  return r.loss_sum / (double)r.count;
}

static size_t ready_count;
static void on_ready(void *p, size_t index) {
  (void)p, (void)index;
  ready_count++;
}

START_TEST(example_plugin_loads_checks_and_trains) {
  fl_model_spec s = plugin_spec(EXAMPLE, "hidden=7");
  fl_model *m = NULL;
  ck_assert_int_eq(fl_model_create(&s, 8, 3, &m), FL_OK);
  ck_assert_uint_eq(fl_model_num_params(m), 4);
  ck_assert_uint_eq(fl_model_input_size(m), 20);
  fl_param *w = fl_model_param(m, 0);
  ck_assert_str_eq(w->name, "hidden.weight");
  ck_assert(w->shape[0] == 7 && w->shape[1] == 20);
  ck_assert_str_eq(fl_model_param(m, 3)->name, "out.bias");
  ck_assert_uint_gt(fl_model_activation_bytes(m), 0);

  ctx c = {m, malloc(8 * 20 * sizeof(float)), malloc(8 * sizeof(int32_t)), 8};
  uint64_t seed = 5;
  gc_fill(c.x, 8 * 20, &seed, -1, 1);
  for (size_t i = 0; i < 8; i++) c.y[i] = (int32_t)(i % 4);
  /* gradients against central differences (smooth: tanh) */
  for (size_t i = 0; i < 4; i++) {
    fl_param *p = fl_model_param(m, i);
    loss(&c);
    float *g = malloc(p->n * sizeof *g);
    memcpy(g, p->grad, p->n * sizeof *g);
    gc_result r = gc_check(p->value, p->n, g, loss, &c, 1e-2, 1e-4, 2e-3);
    GC_ASSERT(p->name, r);
    free(g);
  }
  /* one training step lowers the loss, reporting every gradient */
  fl_model_result r0, r1;
  ready_count = 0;
  ck_assert_int_eq(fl_model_train_step(m, c.x, c.y, 8, 1.0f, on_ready, NULL, &r0), FL_OK);
  ck_assert_uint_eq(ready_count, 4);
  for (size_t i = 0; i < 4; i++) {
    fl_param *p = fl_model_param(m, i);
    for (size_t j = 0; j < p->n; j++) p->value[j] -= 0.5f * p->grad[j];
  }
  ck_assert_int_eq(fl_model_eval(m, c.x, c.y, 8, &r1), FL_OK);
  ck_assert_uint_eq(r1.count, 8);
  ck_assert_msg(r1.loss_sum < r0.loss_sum, "loss %g -> %g", r0.loss_sum, r1.loss_sum);
  /* the front checks labels before the plugin sees them */
  c.y[0] = 4;
  ck_assert_int_eq(fl_model_train_step(m, c.x, c.y, 8, 1.0f, NULL, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_model_train_step(m, c.x, c.y, 9, 1.0f, NULL, NULL, NULL), FL_EINVAL);
  free(c.x), free(c.y);
  fl_model_destroy(m);

  /* two instances coexist; same seed, same bits */
  fl_model *a = NULL, *b = NULL;
  s = plugin_spec(EXAMPLE, "");
  ck_assert_int_eq(fl_model_create(&s, 2, 9, &a), FL_OK);
  ck_assert_int_eq(fl_model_create(&s, 2, 9, &b), FL_OK);
  ck_assert_int_eq(fl_model_param(a, 0)->shape[0], 32);
  ck_assert_mem_eq(fl_model_param(a, 0)->value, fl_model_param(b, 0)->value,
                   fl_model_param(a, 0)->n * sizeof(float));
  fl_model_destroy(a);
  fl_model_destroy(b);
}
END_TEST

START_TEST(bad_plugin_args) {
  char log[4096];
  fl_model_spec s = plugin_spec(EXAMPLE, "hidden=lots");
  ck_assert_int_eq(create_logged(&s, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, "plugin_example.so"));
  ck_assert_ptr_nonnull(strstr(log, "create failed"));
}
END_TEST

START_TEST(missing_file) {
  char log[4096];
  fl_model_spec s = plugin_spec("trainer/.libs/no_such_plugin.so", "");
  ck_assert_int_eq(create_logged(&s, log, sizeof log), FL_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(log, s.plugin_path));
  ck_assert_ptr_nonnull(strstr(log, "No such file"));
}
END_TEST

START_TEST(missing_symbol) {
  char log[4096];
  /* libflotilla itself is a loadable library without the symbol */
  fl_model_spec s = plugin_spec(".libs/libflotilla.so", "");
  ck_assert_int_eq(create_logged(&s, log, sizeof log), FL_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(log, s.plugin_path));
  ck_assert_ptr_nonnull(strstr(log, FL_MODEL_PLUGIN_SYMBOL));
}
END_TEST

START_TEST(not_a_library) {
  char log[4096];
  fl_model_spec s = plugin_spec("", "");
  path_of(s.plugin_path, sizeof s.plugin_path, "FL_SRCDIR", "trainer/plugin_example.c");
  ck_assert_int_eq(create_logged(&s, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, s.plugin_path));
  ck_assert_ptr_nonnull(strstr(log, "cannot load"));
}
END_TEST

START_TEST(wrong_abi) {
  char log[4096];
  fl_model_spec s = plugin_spec("tests/unit/.libs/plugin_badabi.so", "");
  ck_assert_int_eq(create_logged(&s, log, sizeof log), FL_EINVAL);
  ck_assert_ptr_nonnull(strstr(log, s.plugin_path));
  ck_assert_ptr_nonnull(strstr(log, "ABI version 99"));
}
END_TEST

static Suite *plugin_suite(void) {
  Suite *s = suite_create("plugin");
  TCase *t = tcase_create("core");
  tcase_add_test(t, example_plugin_loads_checks_and_trains);
  tcase_add_test(t, bad_plugin_args);
  tcase_add_test(t, missing_file);
  tcase_add_test(t, missing_symbol);
  tcase_add_test(t, not_a_library);
  tcase_add_test(t, wrong_abi);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(plugin_suite());
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
