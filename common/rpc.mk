# gRPC C core wrappers (fl_rpc.h) and the PServer-mode placement rules
# (fl_ps_layout.h) that the PS client and flotilla-pserver share.  Both
# headers stay internal (not installed): they expose gRPC types.
libflotilla_la_SOURCES += common/rpc.c common/fl_rpc.h common/ps_layout.c common/fl_ps_layout.h
# The wire's method table, mode rule and shared limits (fl_protocol.h).
libflotilla_la_SOURCES += common/protocol.c common/fl_protocol.h
# etcd v3 client (fl_etcd.h), used by flotilla-run's elastic rendezvous.
libflotilla_la_SOURCES += common/etcd.c common/fl_etcd.h
