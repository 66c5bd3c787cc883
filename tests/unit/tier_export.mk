# The serving export and checkpoints with the disk tier: a base export of
# a table many times the budget streams in bounded memory and equals the
# export without a budget; a stale copy on disk is never taken.
check_PROGRAMS += tests/unit/test_ps_tier_export
TESTS += tests/unit/test_ps_tier_export
tests_unit_test_ps_tier_export_SOURCES = tests/unit/test_ps_tier_export.c tests/unit/ps_testutil.h
tests_unit_test_ps_tier_export_CFLAGS = $(FL_PS_UNIT_CFLAGS) $(ROCKSDB_CFLAGS)
tests_unit_test_ps_tier_export_LDADD = $(FL_PS_UNIT_LDADD)
