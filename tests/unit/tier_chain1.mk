# A pserver core restarts from a checkpoint chain with the disk tier that
# the build before layout 2 wrote (tests/fixtures/tier_chain_layout1).
check_PROGRAMS += tests/unit/test_ps_tier_chain1
TESTS += tests/unit/test_ps_tier_chain1
tests_unit_test_ps_tier_chain1_SOURCES = tests/unit/test_ps_tier_chain1.c tests/unit/ps_testutil.h
tests_unit_test_ps_tier_chain1_CFLAGS = $(FL_PS_UNIT_CFLAGS) $(ROCKSDB_CFLAGS)
tests_unit_test_ps_tier_chain1_LDADD = $(FL_PS_UNIT_LDADD)
EXTRA_DIST += tests/fixtures/tier_chain_layout1
