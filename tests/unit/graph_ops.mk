# Tests of trainer/ (graph_ops): every op of the graph engine's op library
# by hand-built nodes, forward against naive references and backward
# against finite differences; the refusals.
check_PROGRAMS += tests/unit/test_graph_ops
TESTS += tests/unit/test_graph_ops
tests_unit_test_graph_ops_SOURCES = tests/unit/test_graph_ops.c tests/unit/graph_ops_harness.h \
	tests/unit/gradcheck.h
tests_unit_test_graph_ops_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_graph_ops_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm

# The ops' CUDA twins against the CPU ops; exits 77 (SKIP) without a CUDA
# device, including --without-cuda trees, where it still compiles.
check_PROGRAMS += tests/unit/test_graph_ops_cuda
TESTS += tests/unit/test_graph_ops_cuda
tests_unit_test_graph_ops_cuda_SOURCES = tests/unit/test_graph_ops_cuda.c \
	tests/unit/graph_ops_harness.h tests/unit/cuda_testutil.h tests/unit/gradcheck.h
tests_unit_test_graph_ops_cuda_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_graph_ops_cuda_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
