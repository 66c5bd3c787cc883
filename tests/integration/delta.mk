# Delta checkpoints of the pservers' sparse tables: kill -9 of a pserver
# between a base and its first delta and after deltas (the CTR preset).
dist_check_SCRIPTS += tests/integration/test_delta_ckpt.sh
TESTS += tests/integration/test_delta_ckpt.sh
