# Unit tests of kernels/ (Check): optimizers, LR schedules, gradient merge,
# AMP and casts on the CPU.
FL_KERNEL_TESTS = tests/unit/test_optim tests/unit/test_lr tests/unit/test_gradmerge \
	tests/unit/test_amp tests/unit/test_cast
check_PROGRAMS += $(FL_KERNEL_TESTS)
TESTS += $(FL_KERNEL_TESTS)
FL_KERNEL_TEST_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
FL_KERNEL_TEST_LDADD = $(FL_LIBS) $(CHECK_LIBS) -lm
tests_unit_test_optim_SOURCES = tests/unit/test_optim.c
tests_unit_test_optim_CFLAGS = $(FL_KERNEL_TEST_CFLAGS)
tests_unit_test_optim_LDADD = $(FL_KERNEL_TEST_LDADD)
tests_unit_test_lr_SOURCES = tests/unit/test_lr.c
tests_unit_test_lr_CFLAGS = $(FL_KERNEL_TEST_CFLAGS)
tests_unit_test_lr_LDADD = $(FL_KERNEL_TEST_LDADD)
tests_unit_test_gradmerge_SOURCES = tests/unit/test_gradmerge.c
tests_unit_test_gradmerge_CFLAGS = $(FL_KERNEL_TEST_CFLAGS)
tests_unit_test_gradmerge_LDADD = $(FL_KERNEL_TEST_LDADD)
tests_unit_test_amp_SOURCES = tests/unit/test_amp.c
tests_unit_test_amp_CFLAGS = $(FL_KERNEL_TEST_CFLAGS)
tests_unit_test_amp_LDADD = $(FL_KERNEL_TEST_LDADD)
tests_unit_test_cast_SOURCES = tests/unit/test_cast.c
tests_unit_test_cast_CFLAGS = $(FL_KERNEL_TEST_CFLAGS)
tests_unit_test_cast_LDADD = $(FL_KERNEL_TEST_LDADD)
# test_lr compares against torch's schedulers, written by gen_lr.py there.
EXTRA_DIST += tests/fixtures/lr
