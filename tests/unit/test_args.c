/* test_args.c - the one command-line parser of the three programs
 * (common/fl_args.h): both spellings of every long option, the
 * value after '=' or as the next argument, no prefix abbreviations, "did
 * you mean", cluster flags, options that take no value or need one, and
 * positional arguments left behind the options. */
#include <config.h>

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "fl_args.h"
#include "fl_log.h"

enum { A_CONFIG = 1, A_MAX_STEPS, A_RESUME, A_HELP };
static const fl_arg_opt k_opts[] = {{"config", 1, A_CONFIG},
                                    {"max_steps", 1, A_MAX_STEPS},
                                    {"resume", 0, A_RESUME},
                                    {"help", 0, A_HELP},
                                    {NULL, 0, 0}};

typedef struct seen {
  int ids[16];
  const char *vals[16], *names[16];
  int n, last, rest;
} seen;

/* Parse argv (NULL-terminated) with or without the cluster flags. */
static seen parse(int cluster, const char **args) {
  static char *argv[32];
  static char store[32][64];
  seen s;
  int argc = 1;
  memset(&s, 0, sizeof s);
  argv[0] = "prog";
  for (; args[argc - 1]; argc++) {
    snprintf(store[argc], sizeof store[argc], "%s", args[argc - 1]);
    argv[argc] = store[argc];
  }
  argv[argc] = NULL;
  fl_args p = {.prog = "prog", .unknown_fmt = "unknown argument %s", .opts = k_opts,
               .cluster = cluster, .short_help = A_HELP};
  fl_args_init(&p, argc, argv);
  int id;
  while ((id = fl_args_next(&p)) != FL_ARGS_END && id != FL_ARGS_ERROR && s.n < 16) {
    s.ids[s.n] = id;
    s.vals[s.n] = p.val;
    s.names[s.n++] = p.name;
  }
  s.last = id;
  s.rest = fl_args_rest(&p);
  if (id == FL_ARGS_END && s.rest < argc) s.names[15] = argv[s.rest];
  return s;
}

START_TEST(both_spellings_both_value_forms) {
  seen s = parse(0, (const char *[]){"--max_steps=3", "--max-steps", "4", "--config", "a.yaml",
                                      "--config=b.yaml", "--resume", "-h", NULL});
  ck_assert_int_eq(s.last, FL_ARGS_END);
  ck_assert_int_eq(s.n, 6);
  ck_assert_int_eq(s.ids[0], A_MAX_STEPS);
  ck_assert_str_eq(s.vals[0], "3");
  ck_assert_int_eq(s.ids[1], A_MAX_STEPS);
  ck_assert_str_eq(s.vals[1], "4");
  ck_assert_str_eq(s.names[1], "max_steps");
  ck_assert_str_eq(s.vals[2], "a.yaml");
  ck_assert_str_eq(s.vals[3], "b.yaml");
  ck_assert_int_eq(s.ids[4], A_RESUME);
  ck_assert_ptr_null(s.vals[4]);
  ck_assert_int_eq(s.ids[5], A_HELP);
}
END_TEST

START_TEST(refusals) {
  /* getopt_long would take a unique prefix: not here */
  ck_assert_int_eq(parse(0, (const char *[]){"--conf=x", NULL}).last, FL_ARGS_ERROR);
  ck_assert_int_eq(parse(0, (const char *[]){"--max", "3", NULL}).last, FL_ARGS_ERROR);
  ck_assert_int_eq(parse(0, (const char *[]){"--bogus", NULL}).last, FL_ARGS_ERROR);
  ck_assert_int_eq(parse(0, (const char *[]){"-x", NULL}).last, FL_ARGS_ERROR);
  ck_assert_int_eq(parse(0, (const char *[]){"--resume=1", NULL}).last, FL_ARGS_ERROR);
  ck_assert_int_eq(parse(0, (const char *[]){"--config", NULL}).last, FL_ARGS_ERROR);
  /* cluster flags only where the program takes them */
  ck_assert_int_eq(parse(0, (const char *[]){"--trainer_id=1", NULL}).last, FL_ARGS_ERROR);
}
END_TEST

START_TEST(cluster_flags) {
  seen s = parse(1, (const char *[]){"--trainer-id=1", "--pservers", "h:1", "--token=x", NULL});
  ck_assert_int_eq(s.last, FL_ARGS_END);
  ck_assert_int_eq(s.n, 3);
  ck_assert_int_eq(s.ids[0], FL_ARGS_CLUSTER);
  ck_assert_str_eq(s.names[0], "trainer_id");
  ck_assert_str_eq(s.vals[0], "1");
  ck_assert_str_eq(s.names[1], "pservers");
  ck_assert_str_eq(s.vals[1], "h:1");
  ck_assert_str_eq(s.names[2], "token"); /* recognised, so fl_cluster_set refuses it */
}
END_TEST

START_TEST(positional_left_behind) {
  seen s = parse(0, (const char *[]){"job.yaml", "--resume", NULL});
  ck_assert_int_eq(s.last, FL_ARGS_END);
  ck_assert_int_eq(s.n, 1);
  ck_assert_int_eq(s.rest, 2);
  ck_assert_str_eq(s.names[15], "job.yaml");
}
END_TEST

START_TEST(did_you_mean) {
  fl_args p = {.prog = "prog", .opts = k_opts, .cluster = 1};
  char *argv[] = {"prog", NULL};
  fl_args_init(&p, 1, argv);
  ck_assert_str_eq(fl_args_suggest(&p, "--max_step"), "--max_steps");
  ck_assert_str_eq(fl_args_suggest(&p, "--max-stpes=3"), "--max_steps");
  ck_assert_str_eq(fl_args_suggest(&p, "--conf"), "--config");
  ck_assert_str_eq(fl_args_suggest(&p, "--trainerid=2"), "--trainer_id");
  ck_assert_ptr_null(fl_args_suggest(&p, "--bogus"));
  ck_assert_uint_eq(fl_edit_distance("kitten", "sitting"), 3);
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF);
  Suite *s = suite_create("args");
  TCase *tc = tcase_create("args");
  tcase_add_test(tc, both_spellings_both_value_forms);
  tcase_add_test(tc, refusals);
  tcase_add_test(tc, cluster_flags);
  tcase_add_test(tc, positional_left_behind);
  tcase_add_test(tc, did_you_mean);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
