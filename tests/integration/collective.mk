# Integration tests: collective.  test_coll_train runs the real
# flotilla-trainer (FL_BUILDDIR) as N collective ranks on 127.0.0.x and as
# one local process, and compares their checkpoints.
check_PROGRAMS += tests/integration/test_coll_train
TESTS += tests/integration/test_coll_train
tests_integration_test_coll_train_SOURCES = tests/integration/test_coll_train.c \
	tests/integration/free_port.h
tests_integration_test_coll_train_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
tests_integration_test_coll_train_LDADD = $(FL_LIBS) $(CHECK_LIBS)
