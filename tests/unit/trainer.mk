# Unit tests of trainer (Check): data readers, sharding and loader; the
# training loop (loss falls, resume is bitwise, checkpoint contents).
check_PROGRAMS += tests/unit/test_data
TESTS += tests/unit/test_data
tests_unit_test_data_SOURCES = tests/unit/test_data.c tests/unit/log_capture.h
tests_unit_test_data_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_data_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)

check_PROGRAMS += tests/unit/test_loop
TESTS += tests/unit/test_loop
tests_unit_test_loop_SOURCES = tests/unit/test_loop.c tests/unit/ckpt_testutil.h
tests_unit_test_loop_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_loop_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)
