# Tests of trainer/graph/ops_rnn.c: RNN, GRU and LSTM by hand-built nodes,
# forward against a naive reference, backprop through time against finite
# differences; the refusals.
check_PROGRAMS += tests/unit/test_ops_rnn
TESTS += tests/unit/test_ops_rnn
tests_unit_test_ops_rnn_SOURCES = tests/unit/test_ops_rnn.c tests/unit/graph_ops_harness.h \
	tests/unit/gradcheck.h
tests_unit_test_ops_rnn_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_ops_rnn_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
