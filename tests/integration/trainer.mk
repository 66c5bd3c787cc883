# Integration tests: trainer.  test_trainer_cli runs the real
# flotilla-trainer (found through FL_BUILDDIR) on job and data files it
# writes to a temporary directory.
check_PROGRAMS += tests/integration/test_trainer_cli
TESTS += tests/integration/test_trainer_cli
tests_integration_test_trainer_cli_SOURCES = tests/integration/test_trainer_cli.c \
	tests/integration/trainer_cli_util.h
tests_integration_test_trainer_cli_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
tests_integration_test_trainer_cli_LDADD = $(ZLIB_LIBS) $(CHECK_LIBS)
