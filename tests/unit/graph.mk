# Tests of trainer/ (graph): the engine (builder, gradients, recompute,
# planning, losses) over the op library.
check_PROGRAMS += tests/unit/test_graph
TESTS += tests/unit/test_graph
tests_unit_test_graph_SOURCES = tests/unit/test_graph.c tests/unit/gradcheck.h
tests_unit_test_graph_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_graph_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
