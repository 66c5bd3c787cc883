# tests/: each area keeps its test rules in its own fragment, owned by
# whoever owns that area (unit/ with Check, integration/ with real daemons,
# bench/ never pass/fail, fuzz/ libFuzzer harnesses).
include $(srcdir)/tests/unit/common.mk
include $(srcdir)/tests/unit/kernels.mk
include $(srcdir)/tests/unit/clip.mk
include $(srcdir)/tests/unit/cuda.mk
include $(srcdir)/tests/unit/model_cuda.mk
include $(srcdir)/tests/unit/layers.mk
include $(srcdir)/tests/unit/trainer.mk
include $(srcdir)/tests/unit/npy.mk
include $(srcdir)/tests/unit/graph.mk
include $(srcdir)/tests/unit/graph_ops.mk
include $(srcdir)/tests/unit/convt.mk
include $(srcdir)/tests/unit/ops_reduce.mk
include $(srcdir)/tests/unit/ops_matrix.mk
include $(srcdir)/tests/unit/ops_shape2.mk
include $(srcdir)/tests/unit/ops_activation.mk
include $(srcdir)/tests/unit/ops_rnn.mk
include $(srcdir)/tests/unit/onnx.mk
include $(srcdir)/tests/unit/ops_embbag.mk
include $(srcdir)/tests/unit/onnx_lint.mk
include $(srcdir)/tests/unit/typed_inputs.mk
include $(srcdir)/tests/unit/collective.mk
include $(srcdir)/tests/unit/pserver.mk
include $(srcdir)/tests/unit/tier.mk
include $(srcdir)/tests/unit/ps_admit.mk
include $(srcdir)/tests/unit/obs.mk
include $(srcdir)/tests/unit/run_failure.mk
include $(srcdir)/tests/unit/layering.mk
include $(srcdir)/tests/unit/criteo.mk
include $(srcdir)/tests/unit/loop_valid.mk
include $(srcdir)/tests/integration/local.mk
include $(srcdir)/tests/bench/local.mk
include $(srcdir)/tests/fuzz/local.mk
include $(srcdir)/tests/unit/graph_sparse.mk
include $(srcdir)/tests/unit/names.mk
include $(srcdir)/tests/unit/tier_policy.mk
