# Unit tests of collective (Check).  Each test forks its ranks on
# 127.0.0.x with listening sockets bound to port 0 by the parent.
check_PROGRAMS += tests/unit/test_coll_allreduce
TESTS += tests/unit/test_coll_allreduce
tests_unit_test_coll_allreduce_SOURCES = tests/unit/test_coll_allreduce.c tests/unit/coll_testutil.h
tests_unit_test_coll_allreduce_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_coll_allreduce_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)

check_PROGRAMS += tests/unit/test_coll_faults
TESTS += tests/unit/test_coll_faults
tests_unit_test_coll_faults_SOURCES = tests/unit/test_coll_faults.c tests/unit/coll_testutil.h
tests_unit_test_coll_faults_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_coll_faults_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)

check_PROGRAMS += tests/unit/test_coll_bucket
TESTS += tests/unit/test_coll_bucket
tests_unit_test_coll_bucket_SOURCES = tests/unit/test_coll_bucket.c
tests_unit_test_coll_bucket_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_coll_bucket_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)

# NCCL: one rank on one GPU; SKIP (77) without a GPU or without NCCL.
check_PROGRAMS += tests/unit/test_coll_nccl
TESTS += tests/unit/test_coll_nccl
tests_unit_test_coll_nccl_SOURCES = tests/unit/test_coll_nccl.c tests/unit/coll_testutil.h
tests_unit_test_coll_nccl_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_coll_nccl_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)

check_PROGRAMS += tests/unit/test_coll_sync
TESTS += tests/unit/test_coll_sync
tests_unit_test_coll_sync_SOURCES = tests/unit/test_coll_sync.c tests/unit/coll_testutil.h
tests_unit_test_coll_sync_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_coll_sync_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)

# Synchronised batch norm: the model hook, ranks driving fl_sync_collective,
# and whole trainers against one process with the global batch.
check_PROGRAMS += tests/unit/test_coll_syncbn
TESTS += tests/unit/test_coll_syncbn
tests_unit_test_coll_syncbn_SOURCES = tests/unit/test_coll_syncbn.c tests/unit/coll_testutil.h
tests_unit_test_coll_syncbn_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_coll_syncbn_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)

# The allreduce algorithms over the transports (ring, halving-doubling,
# tree) on 2 to 9 ranks, and the choice between them (model, probe,
# broadcast choice, explicit setting, checkpointed tuning).
check_PROGRAMS += tests/unit/test_coll_algo
TESTS += tests/unit/test_coll_algo
tests_unit_test_coll_algo_SOURCES = tests/unit/test_coll_algo.c tests/unit/coll_testutil.h
tests_unit_test_coll_algo_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_coll_algo_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS)
