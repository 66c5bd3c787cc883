# Tests of trainer/graph's matrix ops (ops_matrix.c: Trilu).
check_PROGRAMS += tests/unit/test_ops_matrix
TESTS += tests/unit/test_ops_matrix
tests_unit_test_ops_matrix_SOURCES = tests/unit/test_ops_matrix.c tests/unit/graph_ops_harness.h \
	tests/unit/gradcheck.h
tests_unit_test_ops_matrix_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_ops_matrix_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
