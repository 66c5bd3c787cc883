# Tests of trainer/onnx/onnx_lint.c: the importer's warnings for models
# exported the wrong way for training, with stderr captured.
check_PROGRAMS += tests/unit/test_onnx_lint
TESTS += tests/unit/test_onnx_lint
tests_unit_test_onnx_lint_SOURCES = tests/unit/test_onnx_lint.c tests/unit/onnx_testutil.h \
	tests/unit/log_capture.h
tests_unit_test_onnx_lint_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_onnx_lint_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
