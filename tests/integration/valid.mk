# Validation, keep_best and early stopping, auc/log loss of binary models
# over all ranks against numpy, batch-norm statistics agreed in ps mode
# against PyTorch on the export.  Seconds.
dist_check_SCRIPTS += tests/integration/test_valid.sh
EXTRA_DIST += tests/integration/valid_auc.py
TESTS += tests/integration/test_valid.sh
