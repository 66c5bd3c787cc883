# Integration tests: cluster engines.  In make check: flotilla-run with
# torchrun's spellings on loopback.  In make check-cluster (root, real
# daemons, network namespaces; each SKIPs with its reason where it cannot
# run): a real Slurm (slurmctld + slurmd + munge) running srun -n 2
# flotilla-trainer, and multi-node jobs on namespaces linked by veth pairs
# with netem delay, rate and loss.
cluster_tests = tests/integration/test_run_torchrun.sh
dist_check_SCRIPTS += $(cluster_tests)
TESTS += $(cluster_tests)

FL_CLUSTER_TESTS = tests/integration/test_slurm.sh
EXTRA_DIST += $(FL_CLUSTER_TESTS)

# The same harness as make check, on the cluster tests only.
check-cluster: all
	$(MAKE) $(AM_MAKEFLAGS) check TESTS='$(FL_CLUSTER_TESTS)'
.PHONY: check-cluster
EXTRA_DIST += deploy/slurm/collective.sbatch deploy/slurm/ps.sbatch deploy/slurm/ps.multi-prog.conf
