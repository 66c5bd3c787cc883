# Tests of trainer/ (graph): the engine (builder, gradients, recompute,
# planning, losses) over the op library.
check_PROGRAMS += tests/unit/test_graph
TESTS += tests/unit/test_graph
tests_unit_test_graph_SOURCES = tests/unit/test_graph.c tests/unit/gradcheck.h
tests_unit_test_graph_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_graph_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm

# The CTR model's graph (model_ctr.c's fl_ctr_graph): logits against a
# reference, rows and parameter gradients against finite differences.
check_PROGRAMS += tests/unit/test_ctr_graph
TESTS += tests/unit/test_ctr_graph
tests_unit_test_ctr_graph_SOURCES = tests/unit/test_ctr_graph.c tests/unit/gradcheck.h
tests_unit_test_ctr_graph_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_ctr_graph_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
