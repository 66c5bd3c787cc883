# common/: status codes, logging, config + strategy, tensors, rpc wrappers,
# checkpoint format, metrics, cluster description.
flotillainclude_HEADERS += common/fl_status.h common/fl_log.h
libflotilla_la_SOURCES += common/log.c
EXTRA_DIST += common/flotilla.pc.in
