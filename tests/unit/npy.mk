# Unit tests of the .npy reader and data.format npy (trainer/data_npy.c).
check_PROGRAMS += tests/unit/test_npy
TESTS += tests/unit/test_npy
tests_unit_test_npy_SOURCES = tests/unit/test_npy.c tests/unit/log_capture.h
tests_unit_test_npy_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_npy_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)

# The PyTorch reference fixtures (tests/fixtures/onnx/README.md) ship with the
# source: the ONNX tests read them from $(FL_SRCDIR).
EXTRA_DIST += tests/fixtures/onnx
