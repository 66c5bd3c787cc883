# Tests of trainer/ (onnx): the importer on valid and hostile models built
# with protobuf-c (test_onnx), export and the round trip through a trained
# graph (test_onnx_export).
check_PROGRAMS += tests/unit/test_onnx
TESTS += tests/unit/test_onnx
tests_unit_test_onnx_SOURCES = tests/unit/test_onnx.c tests/unit/onnx_testutil.h \
	tests/unit/log_capture.h
tests_unit_test_onnx_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_onnx_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm

check_PROGRAMS += tests/unit/test_onnx_export
TESTS += tests/unit/test_onnx_export
tests_unit_test_onnx_export_SOURCES = tests/unit/test_onnx_export.c
tests_unit_test_onnx_export_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_onnx_export_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm

# Imported models against PyTorch's answers (tests/fixtures/onnx).
check_PROGRAMS += tests/unit/test_onnx_fixtures
TESTS += tests/unit/test_onnx_fixtures
tests_unit_test_onnx_fixtures_SOURCES = tests/unit/test_onnx_fixtures.c
tests_unit_test_onnx_fixtures_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_onnx_fixtures_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm

# docs/ONNX_OPS.md against the op table; `make onnx-ops-doc` rewrites it.
check_PROGRAMS += tests/unit/test_onnx_ops_doc
TESTS += tests/unit/test_onnx_ops_doc
tests_unit_test_onnx_ops_doc_SOURCES = tests/unit/test_onnx_ops_doc.c
tests_unit_test_onnx_ops_doc_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_unit_test_onnx_ops_doc_LDADD = libfltrainer.la $(FL_LIBS) -lm

onnx-ops-doc: tests/unit/test_onnx_ops_doc
	FL_SRCDIR='$(abs_top_srcdir)' FL_WRITE_DOC=1 ./tests/unit/test_onnx_ops_doc
.PHONY: onnx-ops-doc
