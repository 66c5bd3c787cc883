# Integration test of the ONNX export: flotilla-trainer's refusals,
# end-of-training export against --export-onnx from a checkpoint, and the
# exported presets loaded into their PyTorch modules (that part needs
# Debian's python3-torch/python3-onnx and is skipped without them).
dist_check_SCRIPTS += tests/integration/test_onnx_export.sh
EXTRA_DIST += tests/integration/onnx_presets_torch.py
TESTS += tests/integration/test_onnx_export.sh

# An imported model in every mode: PS sync (and geo) and collective against
# one local trainer of the global batch, sync_batch_norm on every
# BatchNormalization, PS with batch-norm buffers and the export, recompute
# segments bounded by ONNX value names (bitwise), --resume (bitwise), the
# AMP lists.  Seconds.
dist_check_SCRIPTS += tests/integration/test_onnx_modes.sh
TESTS += tests/integration/test_onnx_modes.sh

# Named, typed inputs: a PyTorch token model with int64 ids and a bool
# mask trained from data.inputs, per-sample and per-token labels (with
# ignore_index) against PyTorch's losses; the input refusals.  Seconds.
dist_check_SCRIPTS += tests/integration/test_typed_inputs.sh
EXTRA_DIST += tests/integration/typed_inputs.py
TESTS += tests/integration/test_typed_inputs.sh

# Models with ids, masks and sequences against PyTorch: five whole models
# (whole_models.py: BiLSTM text classifier, GRU tagger, TCN, U-Net-style,
# GroupNorm CNN) and the two sequence examples with two trainers.  Seconds.
dist_check_SCRIPTS += tests/integration/test_seq_models.sh
EXTRA_DIST += tests/integration/whole_models.py
TESTS += tests/integration/test_seq_models.sh

# An ONNX model's own embeddings as sparse tables on the pservers
# (pserver.sparse_tables): Embedding with a padding id and EmbeddingBag over
# ids taken modulo the vocabulary in the graph, init from_model, sync PS with
# 1 and 2 trainers against PyTorch's losses and test metrics; the export
# (ONNX + the tables' .npy) loaded back into PyTorch; the refusals.  Seconds.
dist_check_SCRIPTS += tests/integration/test_onnx_sparse.sh
EXTRA_DIST += tests/integration/onnx_sparse.py
EXTRA_DIST += tests/integration/sparse_lib.sh
TESTS += tests/integration/test_onnx_sparse.sh

# The sparse tables' exactness: each row optimizer on 1, 2 and 3 trainers
# and 1 and 2 pservers and 1 trainer merging 2 and 3 micro-batches (the
# same bits) against a reference, uniform init, async and geo, a trainer
# restarted, refusals
dist_check_SCRIPTS += tests/integration/test_onnx_sparse_exact.sh
EXTRA_DIST += tests/integration/onnx_sparse_exact.py
TESTS += tests/integration/test_onnx_sparse_exact.sh
