# Tests of trainer/ (ops_embbag, onnx_embbag): the EmbeddingBag op against a
# reference and finite differences, and its import from PyTorch's export.
check_PROGRAMS += tests/unit/test_ops_embbag
TESTS += tests/unit/test_ops_embbag
tests_unit_test_ops_embbag_SOURCES = tests/unit/test_ops_embbag.c tests/unit/graph_ops_harness.h \
	tests/unit/gradcheck.h
tests_unit_test_ops_embbag_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_ops_embbag_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
