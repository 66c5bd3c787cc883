# Integration test: restarts (kill -9) of a trainer and of a pserver in a
# sync job with sparse tables (the CTR preset), which must end exactly as
# an uninterrupted run; ps_ckpt_digest.py compares the pservers' final
# checkpoints row by row.
dist_check_SCRIPTS += tests/integration/test_sparse_restart.sh
EXTRA_DIST += tests/integration/ps_ckpt_digest.py
TESTS += tests/integration/test_sparse_restart.sh
