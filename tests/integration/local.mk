# Integration tests: real daemons on 127.0.0.x, bounded in time; one
# fragment per area.
include $(srcdir)/tests/integration/trainer.mk
include $(srcdir)/tests/integration/collective.mk
include $(srcdir)/tests/integration/pserver.mk
include $(srcdir)/tests/integration/deploy.mk
include $(srcdir)/tests/integration/faults.mk
include $(srcdir)/tests/integration/cluster.mk
include $(srcdir)/tests/integration/byom.mk
include $(srcdir)/tests/integration/onnx.mk
include $(srcdir)/tests/integration/run_failure.mk
include $(srcdir)/tests/integration/python.mk
include $(srcdir)/tests/integration/clip_lr.mk
include $(srcdir)/tests/integration/recsys.mk
include $(srcdir)/tests/integration/valid.mk
include $(srcdir)/tests/integration/tier.mk
include $(srcdir)/tests/integration/sparse_restart.mk
include $(srcdir)/tests/integration/elastic.mk
include $(srcdir)/tests/integration/delta.mk
include $(srcdir)/tests/integration/serving_export.mk
