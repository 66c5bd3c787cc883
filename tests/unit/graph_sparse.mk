# A graph initializer made a sparse table (trainer/graph/graph_sparse.c):
# ids computed in the graph, rows gradients against the dense graph's.
check_PROGRAMS += tests/unit/test_graph_sparse
TESTS += tests/unit/test_graph_sparse
tests_unit_test_graph_sparse_SOURCES = tests/unit/test_graph_sparse.c
tests_unit_test_graph_sparse_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_graph_sparse_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
