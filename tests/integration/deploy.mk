# Integration tests: deploy.  flotilla-run's command line and supervision
# (with stand-in daemons), the systemd units, the compose file.
deploy_tests = tests/integration/test_run_cli.sh tests/integration/test_run_supervisor.sh \
	tests/integration/test_systemd_units.sh tests/integration/test_compose.sh
dist_check_SCRIPTS += $(deploy_tests) tests/integration/fake_daemon.sh
TESTS += $(deploy_tests)

# With the real daemons: each mode, failure, timeline, /metrics; and every
# example job as its header says to run it (parts SKIP until the daemons
# have the mode).
deploy_daemon_tests = tests/integration/test_run_modes.sh \
	tests/integration/test_examples_local.sh tests/integration/test_examples_collective.sh \
	tests/integration/test_examples_ps.sh
dist_check_SCRIPTS += $(deploy_daemon_tests) tests/integration/examples_lib.sh
TESTS += $(deploy_daemon_tests)
