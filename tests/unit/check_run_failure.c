/* check_run_failure.c - unit tests of flotilla-run's failure report
 * (run_failure.c) without processes: what an end was, error lines and
 * whom they blame, the cause found in a log segment, which end is named
 * first (blame followed, cycles not), and the printed report. */
#include <config.h>

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_internal.h"

START_TEST(test_exit_kind) {
  fl_run_exit e = {.status = 0};
  ck_assert_int_eq(fl_run_exit_kind(&e), FL_RUN_END_OK);
  e.status = 1;
  ck_assert_int_eq(fl_run_exit_kind(&e), FL_RUN_END_FAILED);
  e.sent = FL_RUN_SENT_TERM; /* asked to stop: its status is ours */
  ck_assert_int_eq(fl_run_exit_kind(&e), FL_RUN_END_STOPPED);
  e = (fl_run_exit){.signal = SIGKILL, .sent = FL_RUN_SENT_TERM}; /* the OOM killer */
  ck_assert_int_eq(fl_run_exit_kind(&e), FL_RUN_END_FAILED);
  e.sent |= FL_RUN_SENT_KILL;
  ck_assert_int_eq(fl_run_exit_kind(&e), FL_RUN_END_STOPPED);
  e = (fl_run_exit){.signal = SIGSEGV, .sent = FL_RUN_SENT_TERM};
  ck_assert_int_eq(fl_run_exit_kind(&e), FL_RUN_END_FAILED);
}
END_TEST

START_TEST(test_error_lines) {
  ck_assert(fl_run_log_is_error("2024-05-01T10:00:00.123Z E [trainer 1] data: bad"));
  ck_assert(fl_run_log_is_error("E [trainer 1] data: bad"));
  ck_assert(!fl_run_log_is_error("2024-05-01T10:00:00.123Z W [trainer 1] slow"));
  ck_assert(!fl_run_log_is_error("Epoch 1"));
  ck_assert(!fl_run_log_is_error("12 E not a timestamp"));
  ck_assert(!fl_run_log_is_error(""));
  fl_run_role role;
  int id;
  ck_assert(fl_run_log_blames("E [trainer 0] collective rank 0: allreduce #3: rank 12 (10.0.0.2:6170) "
                              "aborted: x", &role, &id));
  ck_assert_int_eq(role, FL_RUN_TRAINER);
  ck_assert_int_eq(id, 12);
  ck_assert(fl_run_log_blames("E [trainer 1] pserver 3 (h:1) has answered nothing", &role, &id));
  ck_assert_int_eq(role, FL_RUN_PSERVER);
  ck_assert_int_eq(id, 3);
  ck_assert(!fl_run_log_blames("E [trainer 0] collective rank 0: timeout", &role, &id));
  ck_assert(!fl_run_log_blames("E crank 1 (x)", &role, &id));
}
END_TEST

/* A log file in /tmp holding text; its path in path[64]. */
static void write_log(char *path, const char *text) {
  snprintf(path, 64, "/tmp/fl_check_run_failure.XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

START_TEST(test_cause_in_segment) {
  char path[64], cause[256];
  const char *first = "E [trainer 1] old attempt's error\n";
  char text[4096];
  snprintf(text, sizeof text, "%sstarting\nE [trainer 1] the cause\nE [trainer 1] its echo\nbye\n",
           first);
  write_log(path, text);
  int64_t from = (int64_t)strlen(first);
  ck_assert(fl_run_log_cause(path, from, -1, cause, sizeof cause));
  ck_assert_str_eq(cause, "E [trainer 1] the cause");
  ck_assert(fl_run_log_cause(path, 0, from, cause, sizeof cause));
  ck_assert_str_eq(cause, "E [trainer 1] old attempt's error");
  ck_assert(!fl_run_log_cause(path, from, from + 9, cause, sizeof cause)); /* "starting\n" */
  ck_assert(!fl_run_log_cause("/nonexistent/log", 0, -1, cause, sizeof cause));
  unlink(path);
  /* Only the lines near the end count: an error long before is not it. */
  size_t n = (size_t)snprintf(text, sizeof text, "E [trainer 0] long ago\n");
  for (int i = 0; i < 60; i++) n += (size_t)snprintf(text + n, sizeof text - n, "line %d\n", i);
  write_log(path, text);
  ck_assert(!fl_run_log_cause(path, 0, -1, cause, sizeof cause));
  unlink(path);
}
END_TEST

typedef struct logs {
  char t0[64], t1[64], t2[64];
} logs;

static void make_logs(logs *l) {
  write_log(l->t0, "E [trainer 0] collective rank 0: rank 1 (127.0.0.1:5) aborted: stopped\n");
  write_log(l->t1, "E [trainer 1] data: cannot open x\n"
                   "E [trainer 1] collective rank 1: rank 1 (127.0.0.1:5) aborted: stopped\n");
  write_log(l->t2, "E [trainer 2] collective rank 2: rank 1 (127.0.0.1:5) aborted: stopped\n");
}

static void free_logs(logs *l) {
  unlink(l->t0);
  unlink(l->t1);
  unlink(l->t2);
}

static fl_run_exit end_of(int id, const char *log, int64_t status, int sent, double t) {
  return (fl_run_exit){.role = FL_RUN_TRAINER, .id = id, .pid = 100 + id, .status = status,
                       .sent = sent, .t = t, .log_path = log};
}

/* Rank 0 ends first blaming rank 1; rank 1 (failed, blaming only itself)
 * is named; rank 2 was stopped. */
START_TEST(test_cause_follows_blame) {
  logs l;
  make_logs(&l);
  fl_run_report *r;
  ck_assert_int_eq(fl_run_report_new(&r), FL_OK);
  ck_assert_ptr_null(fl_run_report_cause(r, 0));
  fl_run_exit e0 = end_of(0, l.t0, 1, 0, 0.1), e1 = end_of(1, l.t1, 1, FL_RUN_SENT_TERM, 0.2),
              e2 = end_of(2, l.t2, 1, FL_RUN_SENT_TERM, 0.3);
  ck_assert_int_eq(fl_run_report_add(r, &e0), FL_OK);
  ck_assert_int_eq(fl_run_report_add(r, &e1), FL_OK);
  ck_assert_int_eq(fl_run_report_add(r, &e2), FL_OK);
  const fl_run_exit *c = fl_run_report_cause(r, 0);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(c->id, 1);
  ck_assert_ptr_null(fl_run_report_cause(r, 1));

  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  fl_run_report_print(r, 0, 10, out);
  fclose(out);
  ck_assert_ptr_nonnull(strstr(buf, "first failure: trainer 1 (pid 101) exited with status 1"));
  ck_assert_ptr_nonnull(strstr(buf, "its error: E [trainer 1] data: cannot open x"));
  ck_assert_ptr_nonnull(strstr(buf, "trainer 0 (pid 100): failed because of it"));
  ck_assert_ptr_nonnull(strstr(buf, "trainer 2 (pid 102): stopped by flotilla-run (SIGTERM)"));
  free(buf);
  fl_run_report_free(r);
  free_logs(&l);
}
END_TEST

/* Blame is not followed to a clean end, nor around a cycle. */
START_TEST(test_cause_stays) {
  logs l;
  make_logs(&l);
  fl_run_report *r;
  ck_assert_int_eq(fl_run_report_new(&r), FL_OK);
  fl_run_exit e0 = end_of(0, l.t0, 1, 0, 0.1), e1 = end_of(1, l.t1, 0, 0, 0.2);
  fl_run_report_add(r, &e0);
  fl_run_report_add(r, &e1);
  ck_assert_int_eq(fl_run_report_cause(r, 0)->id, 0); /* rank 1 finished cleanly */
  fl_run_report_free(r);

  /* 0 blames 2 and 2 blames 1 (which did not fail): 0 is named. */
  unlink(l.t2);
  write_log(l.t2, "E [trainer 2] rank 1 (h:1) closed the connection\n");
  unlink(l.t0);
  write_log(l.t0, "E [trainer 0] rank 2 (h:2) closed the connection\n");
  ck_assert_int_eq(fl_run_report_new(&r), FL_OK);
  fl_run_exit f0 = end_of(0, l.t0, 1, 0, 0.1), f2 = end_of(2, l.t2, 1, 0, 0.2);
  fl_run_report_add(r, &f0);
  fl_run_report_add(r, &f2);
  ck_assert_int_eq(fl_run_report_cause(r, 0)->id, 0);
  fl_run_report_free(r);
  free_logs(&l);
}
END_TEST

/* --max_restart: each attempt is its own; earlier ones get one line. */
START_TEST(test_attempts) {
  char path[64], text[256];
  const char *first = "E [trainer 1] crashed\n";
  snprintf(text, sizeof text, "%s----- restart -----\nE [trainer 1] crashed again\n", first);
  write_log(path, text);
  fl_run_report *r;
  ck_assert_int_eq(fl_run_report_new(&r), FL_OK);
  fl_run_exit a = end_of(1, path, 5, 0, 0.3), b = a;
  b.attempt = 1;
  b.pid = 200;
  b.log_from = (int64_t)strlen(first);
  fl_run_report_add(r, &a);
  fl_run_report_add(r, &b);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  fl_run_report_print_attempts(r, 1, out);
  fl_run_report_print(r, 1, 10, out);
  fclose(out);
  ck_assert_ptr_nonnull(strstr(buf, "first start: trainer 1 (pid 101) exited with status 5 at "
                                    "+0.300 s: E [trainer 1] crashed; restarted"));
  ck_assert_ptr_nonnull(strstr(buf, "first failure: trainer 1 (pid 200) exited with status 5 at "
                                    "+0.300 s (after restart 1)"));
  ck_assert_ptr_nonnull(strstr(buf, "its error: E [trainer 1] crashed again"));
  free(buf);
  fl_run_report_free(r);
  unlink(path);
}
END_TEST

int main(void) {
  Suite *s = suite_create("run_failure");
  TCase *tc = tcase_create("report");
  tcase_add_test(tc, test_exit_kind);
  tcase_add_test(tc, test_error_lines);
  tcase_add_test(tc, test_cause_in_segment);
  tcase_add_test(tc, test_cause_follows_blame);
  tcase_add_test(tc, test_cause_stays);
  tcase_add_test(tc, test_attempts);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
