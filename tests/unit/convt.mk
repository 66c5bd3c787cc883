# Tests of trainer/graph/ops_convt.c (ConvTranspose): forward against a
# naive reference, backward against finite differences, the refusals.
check_PROGRAMS += tests/unit/test_ops_convt
TESTS += tests/unit/test_ops_convt
tests_unit_test_ops_convt_SOURCES = tests/unit/test_ops_convt.c tests/unit/graph_ops_harness.h \
	tests/unit/gradcheck.h
tests_unit_test_ops_convt_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_ops_convt_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
