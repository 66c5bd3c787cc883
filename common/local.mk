# common/: status codes, logging (here), config + strategy + cluster +
# checkpoints (config.mk), gRPC wrappers (rpc.mk).
flotillainclude_HEADERS += common/fl_status.h common/fl_log.h
libflotilla_la_SOURCES += common/log.c
EXTRA_DIST += common/flotilla.pc.in
include $(srcdir)/common/config.mk
include $(srcdir)/common/rpc.mk
include $(srcdir)/common/obs.mk
include $(srcdir)/common/identity.mk
