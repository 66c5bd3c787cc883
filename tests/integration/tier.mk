# The sparse tables' disk tier end to end: a CTR job in PS sync mode with
# pserver.memory_budget at about 1% of its rows ends with the bits of the
# same job all in memory (ps_rows_digest of the pservers' checkpoints).
noinst_PROGRAMS += tests/integration/ps_rows_digest
tests_integration_ps_rows_digest_SOURCES = tests/integration/ps_rows_digest.c
tests_integration_ps_rows_digest_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/pserver
tests_integration_ps_rows_digest_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(ROCKSDB_CFLAGS)
tests_integration_ps_rows_digest_LDADD = $(FL_LIBS) $(ROCKSDB_LIBS)
dist_check_SCRIPTS += tests/integration/test_tier.sh
TESTS += tests/integration/test_tier.sh
# kill -9 of a budgeted pserver during a RocksDB compaction: the restart
# stands at its last checkpoint with the same rows in both tiers.
dist_check_SCRIPTS += tests/integration/test_tier_kill.sh
EXTRA_DIST += tests/integration/tier_lib.sh
TESTS += tests/integration/test_tier_kill.sh
# The disk tier on a full disk (a small tmpfs; root): no abort, the errors
# named, checkpoints refused until space is freed, no row lost.
dist_check_SCRIPTS += tests/integration/test_tier_diskfull.sh
TESTS += tests/integration/test_tier_diskfull.sh
# Delta checkpoints with a budget under ulimit -n 64: no descriptor
# shortage, and the chain restores the rows of the job all in memory.
dist_check_SCRIPTS += tests/integration/test_tier_nofile.sh
TESTS += tests/integration/test_tier_nofile.sh
# Many sparse tables under one budget: the DLRM example's 26 tables of 16
# stripes each in one store, a base and deltas restored to the rows of the
# job all in memory (skips without torch and onnx).
dist_check_SCRIPTS += tests/integration/test_tier_tables.sh
TESTS += tests/integration/test_tier_tables.sh
