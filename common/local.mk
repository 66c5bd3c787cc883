# common/: config + strategy + cluster + checkpoints (config.mk), gRPC
# wrappers (rpc.mk), metrics and service notification (obs.mk).  Status
# codes and logging live one layer down, in base/.
EXTRA_DIST += common/flotilla.pc.in
include $(srcdir)/common/config.mk
include $(srcdir)/common/rpc.mk
include $(srcdir)/common/obs.mk
include $(srcdir)/common/identity.mk
