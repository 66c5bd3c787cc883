# Integration tests: PServer mode with the real flotilla-pserver and
# flotilla-trainer on loopback (sync equivalence, async/geo accuracy, the
# CTR model, faults, bad requests).
check_PROGRAMS += tests/integration/test_ps
TESTS += tests/integration/test_ps
tests_integration_test_ps_SOURCES = tests/integration/test_ps.c tests/integration/free_port.h
tests_integration_test_ps_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
tests_integration_test_ps_LDADD = $(FL_LIBS) $(GRPC_LIBS) $(PROTOBUFC_LIBS) $(CHECK_LIBS) -lm

# A second client of the pserver's wire, in Python, from stubs generated
# from proto/ at test time; SKIPs without python3-grpcio.
dist_check_SCRIPTS += tests/integration/test_wire_interop.sh
EXTRA_DIST += tests/integration/test_wire_interop.py
TESTS += tests/integration/test_wire_interop.sh
