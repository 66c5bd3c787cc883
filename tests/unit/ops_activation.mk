# Tests of trainer/graph/ops_activation.c (the activation family) and Cast
# to BOOL: forward against references, backward against finite
# differences, PyTorch's rules at the kinks, the refusals.
check_PROGRAMS += tests/unit/test_ops_activation
TESTS += tests/unit/test_ops_activation
tests_unit_test_ops_activation_SOURCES = tests/unit/test_ops_activation.c \
	tests/unit/graph_ops_harness.h tests/unit/gradcheck.h
tests_unit_test_ops_activation_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_ops_activation_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
