# The sparse tables' disk tier (pserver.memory_budget, RocksDB) and lock
# stripes: same bits with and without a budget, LRU across tiers, disk
# full, checkpoints of the tier, concurrent pulls and pushes.
check_PROGRAMS += tests/unit/test_ps_tier
TESTS += tests/unit/test_ps_tier
tests_unit_test_ps_tier_SOURCES = tests/unit/test_ps_tier.c tests/unit/ps_testutil.h
tests_unit_test_ps_tier_CFLAGS = $(FL_PS_UNIT_CFLAGS) $(ROCKSDB_CFLAGS)
tests_unit_test_ps_tier_LDADD = $(FL_PS_UNIT_LDADD)
# One store of hundreds of tables (stripes): added at once, base and delta.
check_PROGRAMS += tests/unit/test_ps_tier_tables
TESTS += tests/unit/test_ps_tier_tables
tests_unit_test_ps_tier_tables_SOURCES = tests/unit/test_ps_tier_tables.c tests/unit/ps_testutil.h
tests_unit_test_ps_tier_tables_CFLAGS = $(FL_PS_UNIT_CFLAGS) $(ROCKSDB_CFLAGS)
tests_unit_test_ps_tier_tables_LDADD = $(FL_PS_UNIT_LDADD)
