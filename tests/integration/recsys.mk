# data.format criteo streamed into an ONNX model's training (plain, gzip,
# CRLF, empty fields, bad lines stop/skip, short files, --resume at the
# exact sample) against PyTorch on the recsys examples' DLRM; the DLRM
# example in PS sync mode against torch_train.py.  Seconds.
dist_check_SCRIPTS += tests/integration/test_criteo_stream.sh tests/integration/test_recsys_dlrm.sh
EXTRA_DIST += deploy/examples/recsys
TESTS += tests/integration/test_criteo_stream.sh tests/integration/test_recsys_dlrm.sh
