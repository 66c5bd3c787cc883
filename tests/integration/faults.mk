# Integration tests: faults and security, with the real daemons on
# loopback (helper K).  Shell tests (bash) share faults_lib.sh; ps_probe is
# their gRPC client of flotilla-pserver (Stats, SaveCheckpoint, one call of
# every method), also used by tests/bench/soak_ps.sh, so it is always built.
noinst_PROGRAMS += tests/integration/ps_probe
tests_integration_ps_probe_SOURCES = tests/integration/ps_probe.c
tests_integration_ps_probe_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS)
tests_integration_ps_probe_LDADD = $(FL_LIBS) $(GRPC_LIBS) $(PROTOBUFC_LIBS)

faults_tests = tests/integration/test_faults_trainer.sh tests/integration/test_faults_ps.sh \
	tests/integration/test_faults_net.sh tests/integration/test_security.sh \
	tests/integration/test_faults_ckpt.sh tests/integration/test_faults_restart.sh \
	tests/integration/test_faults_signal.sh tests/integration/test_faults_hang.sh \
	tests/integration/test_ops.sh
dist_check_SCRIPTS += $(faults_tests) tests/integration/faults_lib.sh
TESTS += $(faults_tests)
