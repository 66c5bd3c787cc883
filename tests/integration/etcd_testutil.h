/* etcd_testutil.h - what the programs that test_etcd.sh runs against its
 * real etcd share: the endpoint it passes in FL_ETCD_ENDPOINT, and a main
 * that runs a program's tests as one case.  Header-only: each test
 * program includes it once. */
#ifndef FL_ETCD_TESTUTIL_H
#define FL_ETCD_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdlib.h>

/* The endpoint of the etcd test_etcd.sh started (the environment's
 * string: the caller does not free it); fails the test when unset. */
static inline const char *etcd_test_endpoint(void) {
  const char *ep = getenv("FL_ETCD_ENDPOINT");
  ck_assert_msg(ep && ep[0], "FL_ETCD_ENDPOINT not set (run through test_etcd.sh)");
  return ep;
}

/* Runs the n tests (the caller's) as suite name, one case "etcd" of 30 s,
 * each forked or not as fork says; returns main's exit status. */
static inline int etcd_test_main(const char *name, enum fork_status fork,
                                 const TTest *const *tests, size_t n) {
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("etcd");
  tcase_set_timeout(tc, 30);
  for (size_t i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, fork);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

#endif
