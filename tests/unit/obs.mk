# Unit tests of observability (the Prometheus registry and /metrics
# endpoint, fl_obs, sd_notify, the Chrome-tracing timeline writer) and of
# flotilla-run (Check).
check_PROGRAMS += tests/unit/check_metrics tests/unit/check_timeline
TESTS += tests/unit/check_metrics tests/unit/check_timeline
tests_unit_check_metrics_SOURCES = tests/unit/check_metrics.c
tests_unit_check_metrics_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
tests_unit_check_metrics_LDADD = $(FL_LIBS) $(CHECK_LIBS)
tests_unit_check_timeline_SOURCES = tests/unit/check_timeline.c
tests_unit_check_timeline_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
tests_unit_check_timeline_LDADD = $(FL_LIBS) $(CHECK_LIBS)

# flotilla-run's layout, log parser and progress (no processes started).
check_PROGRAMS += tests/unit/check_run
TESTS += tests/unit/check_run
tests_unit_check_run_SOURCES = tests/unit/check_run.c deploy/run_plan.c deploy/run_progress.c \
	deploy/run_internal.h
tests_unit_check_run_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/deploy
tests_unit_check_run_LDADD = $(FL_LIBS) $(CHECK_LIBS) -lm
