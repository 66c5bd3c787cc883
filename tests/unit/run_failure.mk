# flotilla-run's failure report (run_failure.c): no process started.
check_PROGRAMS += tests/unit/check_run_failure
TESTS += tests/unit/check_run_failure
tests_unit_check_run_failure_SOURCES = tests/unit/check_run_failure.c deploy/run_failure.c \
	deploy/run_internal.h
tests_unit_check_run_failure_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS) \
	-I$(top_srcdir)/deploy
tests_unit_check_run_failure_LDADD = $(FL_LIBS) $(CHECK_LIBS)
