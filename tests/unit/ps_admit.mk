# Sparse tables past memory (Check): feature admission (count-min sketch),
# expiry, and delta checkpoints replayed bit for bit.
check_PROGRAMS += tests/unit/test_ps_admit
TESTS += tests/unit/test_ps_admit
tests_unit_test_ps_admit_SOURCES = tests/unit/test_ps_admit.c tests/unit/ps_testutil.h
tests_unit_test_ps_admit_CFLAGS = $(FL_PS_UNIT_CFLAGS)
tests_unit_test_ps_admit_LDADD = $(FL_PS_UNIT_LDADD)
