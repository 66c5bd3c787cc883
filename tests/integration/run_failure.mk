# flotilla-run's failure report: stand-in daemons and the real ones (a
# collective rank with a missing data file, a pserver killed -9).
dist_check_SCRIPTS += tests/integration/test_run_failure.sh
TESTS += tests/integration/test_run_failure.sh
