# Tests of trainer/ (ops_shape2): Pad, Tile, Resize and Einsum by
# hand-built nodes, forward against naive references, backward against
# finite differences; the refusals.
check_PROGRAMS += tests/unit/test_ops_shape2
TESTS += tests/unit/test_ops_shape2
tests_unit_test_ops_shape2_SOURCES = tests/unit/test_ops_shape2.c tests/unit/graph_ops_harness.h \
	tests/unit/gradcheck.h
tests_unit_test_ops_shape2_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_ops_shape2_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
