# Integration tests: cluster engines.  In make check: flotilla-run with
# torchrun's spellings on loopback.  In make check-cluster (root, real
# daemons, network namespaces; each SKIPs with its reason where it cannot
# run): a real Slurm (slurmctld + slurmd + munge) running srun -n 2
# flotilla-trainer, and multi-node jobs on namespaces linked by veth pairs
# with netem delay, rate and loss.
cluster_tests = tests/integration/test_run_torchrun.sh tests/integration/test_k8s_manifests.sh
dist_check_SCRIPTS += $(cluster_tests)
TESTS += $(cluster_tests)

FL_CLUSTER_TESTS = tests/integration/test_slurm.sh tests/integration/test_netns_cluster.sh \
	tests/integration/test_netns_algos.sh
EXTRA_DIST += $(FL_CLUSTER_TESTS) tests/integration/netns_lib.sh

# The parity check of the shell tests: largest parameter difference of two
# checkpoints.
noinst_PROGRAMS += tests/integration/ckpt_maxdiff
tests_integration_ckpt_maxdiff_SOURCES = tests/integration/ckpt_maxdiff.c
tests_integration_ckpt_maxdiff_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS)
tests_integration_ckpt_maxdiff_LDADD = $(FL_LIBS) -lm

# One rank of test_netns_algos.sh: an allreduce algorithm checked on
# every size and dtype, its result's hash printed.
noinst_PROGRAMS += tests/integration/coll_check_rank
tests_integration_coll_check_rank_SOURCES = tests/integration/coll_check_rank.c
tests_integration_coll_check_rank_CFLAGS = $(FL_TRAINER_CFLAGS)
tests_integration_coll_check_rank_LDADD = libfltrainer.la $(FL_LIBS) -lm

# The namespace harness's userspace link (delay and loss without sch_netem).
noinst_PROGRAMS += tests/integration/netns_wire
tests_integration_netns_wire_SOURCES = tests/integration/netns_wire.c

# The same harness as make check, on the cluster tests only.
check-cluster: all
	$(MAKE) $(AM_MAKEFLAGS) check TESTS='$(FL_CLUSTER_TESTS)'
.PHONY: check-cluster
EXTRA_DIST += deploy/slurm/collective.sbatch deploy/slurm/ps.sbatch \
	deploy/k8s/secret.yaml deploy/k8s/rendezvous-service.yaml deploy/k8s/trainers-collective.yaml \
	deploy/k8s/pservers.yaml deploy/k8s/trainers-ps.yaml
