# Unit tests of common (Check): the job file, the cluster environment and the
# checkpoint format.
FL_COMMON_TESTS = tests/unit/test_config tests/unit/test_cluster tests/unit/test_ckpt \
	tests/unit/test_args
check_PROGRAMS += $(FL_COMMON_TESTS)
TESTS += $(FL_COMMON_TESTS)
FL_COMMON_TEST_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
FL_COMMON_TEST_LDADD = $(FL_LIBS) $(CHECK_LIBS) -lm
tests_unit_test_config_SOURCES = tests/unit/test_config.c
tests_unit_test_config_CFLAGS = $(FL_COMMON_TEST_CFLAGS)
tests_unit_test_config_LDADD = $(FL_COMMON_TEST_LDADD)
tests_unit_test_cluster_SOURCES = tests/unit/test_cluster.c
tests_unit_test_cluster_CFLAGS = $(FL_COMMON_TEST_CFLAGS)
tests_unit_test_cluster_LDADD = $(FL_COMMON_TEST_LDADD)
tests_unit_test_ckpt_SOURCES = tests/unit/test_ckpt.c
tests_unit_test_ckpt_CFLAGS = $(FL_COMMON_TEST_CFLAGS)
tests_unit_test_ckpt_LDADD = $(FL_COMMON_TEST_LDADD)
tests_unit_test_args_SOURCES = tests/unit/test_args.c
tests_unit_test_args_CFLAGS = $(FL_COMMON_TEST_CFLAGS)
tests_unit_test_args_LDADD = $(FL_COMMON_TEST_LDADD)
# The base example jobs (test_config loads every deploy/examples/**/*.yaml).
EXTRA_DIST += deploy/examples/mlp_fmnist.yaml deploy/examples/cnn_fmnist.yaml \
	deploy/examples/logreg_fmnist.yaml
