# Typed, named inputs and labels of any shape: the engine's int64 inputs
# and per-token loss, the data layer's several .npy inputs.
check_PROGRAMS += tests/unit/test_typed_inputs
TESTS += tests/unit/test_typed_inputs
tests_unit_test_typed_inputs_SOURCES = tests/unit/test_typed_inputs.c tests/unit/gradcheck.h
tests_unit_test_typed_inputs_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_typed_inputs_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
