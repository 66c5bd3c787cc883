# Which rows the disk tier keeps in memory: frequency-aware admission,
# eviction and expiry across both tiers as all in memory.
check_PROGRAMS += tests/unit/test_ps_tier_policy
TESTS += tests/unit/test_ps_tier_policy
tests_unit_test_ps_tier_policy_SOURCES = tests/unit/test_ps_tier_policy.c tests/unit/ps_testutil.h
tests_unit_test_ps_tier_policy_CFLAGS = $(FL_PS_UNIT_CFLAGS) $(ROCKSDB_CFLAGS)
tests_unit_test_ps_tier_policy_LDADD = $(FL_PS_UNIT_LDADD)
