/* cuda_testutil.h - what the CUDA test programs share: device buffers that
 * fail the test when CUDA does, and a main that SKIPs (exit 77) without a
 * GPU and runs the suite in-process (CK_NOFORK: a CUDA context does not
 * survive fork).  Header-only, for test programs. */
#ifndef FL_CUDA_TESTUTIL_H
#define FL_CUDA_TESTUTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "fl_device.h"

/* bytes of device memory (the test frees it with fl_cuda_free). */
static inline void *dev_alloc(size_t bytes) {
  void *d = NULL;
  ck_assert_int_eq(fl_cuda_malloc(&d, bytes), FL_OK);
  return d;
}

/* A device copy of the host buffer h. */
static inline void *dev_from(const void *h, size_t bytes) {
  void *d = dev_alloc(bytes);
  ck_assert_int_eq(fl_cuda_copy_to_device(d, h, bytes, NULL), FL_OK);
  return d;
}

/* A device copy of n host floats. */
static inline float *dev_floats(const float *h, size_t n) {
  return dev_from(h, n * sizeof(float));
}

/* The program's main: 77 without a CUDA device, else the result of the
 * suite make() builds (only then, so a SKIP allocates nothing). */
static inline int cuda_test_main(Suite *(*make)(void)) {
  if (fl_cuda_device_count() == 0) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  SRunner *sr = srunner_create(make());
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
