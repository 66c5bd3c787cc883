/* test_names.c - unit tests of the name lookup every table of choices goes
 * through (base/names.c): a NULL-terminated table of names, a table of
 * {name, value} rows, names absent or NULL, and the first of two equal
 * names winning. */
#include <config.h>

#include <check.h>
#include <stdlib.h>

#include "fl_names.h"

START_TEST(test_names_table) {
  static const char *const names[] = {"none", "relu", "tanh", "relu", NULL};
  static const char *const empty[] = {NULL};
  ck_assert_int_eq(fl_names_find(names, "none"), 0);
  ck_assert_int_eq(fl_names_find(names, "tanh"), 2);
  ck_assert_int_eq(fl_names_find(names, "relu"), 1);
  ck_assert_int_eq(fl_names_find(names, "Relu"), -1);
  ck_assert_int_eq(fl_names_find(names, ""), -1);
  ck_assert_int_eq(fl_names_find(names, NULL), -1);
  ck_assert_int_eq(fl_names_find(empty, "none"), -1);
}
END_TEST

START_TEST(test_rows_table) {
  static const struct {
    const char *name;
    int value;
    double weight;
  } rows[] = {{"sum", 7, 0.5}, {"mean", 8, 1.5}, {"max", 9, 2.5}, {NULL, 10, 0.0}};
  ck_assert_int_eq(FL_ROWS_FIND(rows, "sum"), 0);
  ck_assert_int_eq(FL_ROWS_FIND(rows, "max"), 2);
  ck_assert_int_eq(rows[FL_ROWS_FIND(rows, "mean")].value, 8);
  ck_assert_int_eq(FL_ROWS_FIND(rows, "min"), -1);
  ck_assert_int_eq(FL_ROWS_FIND(rows, NULL), -1);
  ck_assert_int_eq(fl_rows_find(rows, 2, sizeof rows[0], "max"), -1);
  ck_assert_int_eq(fl_rows_find(rows, 0, sizeof rows[0], "sum"), -1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("names");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_names_table);
  tcase_add_test(tc, test_rows_table);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
