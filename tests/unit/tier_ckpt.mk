# The disk tier's checkpoint side (pserver/tier_rocks.c): delta copies of
# one SST file, damaged ones refused, layout 1 copies replayed
# (tests/fixtures/tier_delta_layout1), stale order keys in the live store.
check_PROGRAMS += tests/unit/test_ps_tier_ckpt
TESTS += tests/unit/test_ps_tier_ckpt
tests_unit_test_ps_tier_ckpt_SOURCES = tests/unit/test_ps_tier_ckpt.c tests/unit/ps_testutil.h
tests_unit_test_ps_tier_ckpt_CFLAGS = $(FL_PS_UNIT_CFLAGS) $(ROCKSDB_CFLAGS)
tests_unit_test_ps_tier_ckpt_LDADD = $(FL_PS_UNIT_LDADD)
EXTRA_DIST += tests/fixtures/tier_delta_layout1
