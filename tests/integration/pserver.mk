# Integration tests: PServer mode with the real flotilla-pserver and
# flotilla-trainer on loopback (sync equivalence, async/geo accuracy, the
# CTR model, faults, bad requests).
check_PROGRAMS += tests/integration/test_ps
TESTS += tests/integration/test_ps
tests_integration_test_ps_SOURCES = tests/integration/test_ps.c
tests_integration_test_ps_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
tests_integration_test_ps_LDADD = $(FL_LIBS) $(GRPC_LIBS) $(PROTOBUFC_LIBS) $(CHECK_LIBS) -lm
