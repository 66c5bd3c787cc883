# Elastic membership on etcd: the etcd v3 client and the elastic ps chunk
# claims against a real etcd (test_etcd.sh drives test_etcd_client and
# test_chunks), and flotilla-run's etcd
# rendezvous with nodes leaving (test_elastic.sh; in ps mode
# test_elastic_ps*.sh, sharing elastic_ps_lib.sh).  They SKIP without etcd.
check_PROGRAMS += tests/integration/test_etcd_client
tests_integration_test_etcd_client_SOURCES = tests/integration/test_etcd_client.c \
	tests/integration/etcd_testutil.h
tests_integration_test_etcd_client_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
tests_integration_test_etcd_client_LDADD = $(FL_LIBS) $(CHECK_LIBS)
check_PROGRAMS += tests/integration/test_chunks
tests_integration_test_chunks_SOURCES = tests/integration/test_chunks.c \
	tests/integration/etcd_testutil.h
tests_integration_test_chunks_CFLAGS = $(FL_TRAINER_CFLAGS) $(CHECK_CFLAGS)
tests_integration_test_chunks_LDADD = libfltrainer.la $(FL_LIBS) $(CHECK_LIBS) -lm
dist_check_SCRIPTS += tests/integration/test_etcd.sh
EXTRA_DIST += tests/integration/etcd_lib.sh tests/integration/free_port.py
TESTS += tests/integration/test_etcd.sh
dist_check_SCRIPTS += tests/integration/test_elastic.sh
TESTS += tests/integration/test_elastic.sh
dist_check_SCRIPTS += tests/integration/test_elastic_ps.sh
TESTS += tests/integration/test_elastic_ps.sh
dist_check_SCRIPTS += tests/integration/test_elastic_ps_sparse.sh
TESTS += tests/integration/test_elastic_ps_sparse.sh
EXTRA_DIST += tests/integration/elastic_ps_lib.sh tests/integration/elastic_lib.sh
dist_check_SCRIPTS += tests/integration/test_elastic_ps_criteo.sh
TESTS += tests/integration/test_elastic_ps_criteo.sh
dist_check_SCRIPTS += tests/integration/test_elastic_churn.sh
TESTS += tests/integration/test_elastic_churn.sh
dist_check_SCRIPTS += tests/integration/test_elastic_nproc.sh
TESTS += tests/integration/test_elastic_nproc.sh
