# pserver.serving_export: base and deltas applied equal the trainer's
# final export bit for bit (onnx_sparse.py's click model, 2 pservers).
dist_check_SCRIPTS += tests/integration/test_serving_export.sh
TESTS += tests/integration/test_serving_export.sh
