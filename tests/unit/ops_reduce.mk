# Tests of trainer/graph (ops_reduce): the reductions, ArgMax, CumSum, TopK,
# InstanceNormalization and opset 13's BatchNormalization on hand-built
# nodes, forward against naive references, backward against finite
# differences and PyTorch's gradients at ties and zeros; the refusals.
check_PROGRAMS += tests/unit/test_ops_reduce
TESTS += tests/unit/test_ops_reduce
tests_unit_test_ops_reduce_SOURCES = tests/unit/test_ops_reduce.c tests/unit/graph_ops_harness.h \
	tests/unit/gradcheck.h
tests_unit_test_ops_reduce_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_ops_reduce_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
