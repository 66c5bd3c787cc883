# proto/: the wire schema, compiled by protoc-c at build time into the
# build tree (never committed).  protoc-c names the C member of a service
# method after the method, and `register` is a C keyword: the generated
# header gets it renamed to `register_` (the descriptors, which the tests
# compare with the dispatch tables, are unchanged).
EXTRA_DIST += proto/flotilla.proto proto/health.proto docs/PROTOCOL.md
nodist_libflotilla_la_SOURCES += proto/flotilla.pb-c.c proto/flotilla.pb-c.h \
	proto/health.pb-c.c proto/health.pb-c.h
BUILT_SOURCES += proto/flotilla.pb-c.h proto/health.pb-c.h
CLEANFILES += proto/flotilla.pb-c.c proto/flotilla.pb-c.h proto/health.pb-c.c proto/health.pb-c.h

proto/flotilla.pb-c.c: $(srcdir)/proto/flotilla.proto
	@$(MKDIR_P) proto
	$(AM_V_GEN)$(PROTOC_C) --proto_path=$(srcdir)/proto --c_out=proto $(srcdir)/proto/flotilla.proto && \
	sed -i 's/(\*register)(/(*register_)(/' proto/flotilla.pb-c.h
proto/flotilla.pb-c.h: proto/flotilla.pb-c.c
	@test -f $@ || { rm -f proto/flotilla.pb-c.c; $(MAKE) $(AM_MAKEFLAGS) proto/flotilla.pb-c.c; }
proto/health.pb-c.c: $(srcdir)/proto/health.proto
	@$(MKDIR_P) proto
	$(AM_V_GEN)$(PROTOC_C) --proto_path=$(srcdir)/proto --c_out=proto $(srcdir)/proto/health.proto
proto/health.pb-c.h: proto/health.pb-c.c
	@test -f $@ || { rm -f proto/health.pb-c.c; $(MAKE) $(AM_MAKEFLAGS) proto/health.pb-c.c; }
# etcd's v3 messages for the elastic rendezvous client (common/etcd.c).
EXTRA_DIST += proto/etcd_min.proto
nodist_libflotilla_la_SOURCES += proto/etcd_min.pb-c.c proto/etcd_min.pb-c.h
BUILT_SOURCES += proto/etcd_min.pb-c.h
CLEANFILES += proto/etcd_min.pb-c.c proto/etcd_min.pb-c.h
proto/etcd_min.pb-c.c: $(srcdir)/proto/etcd_min.proto
	@$(MKDIR_P) proto
	$(AM_V_GEN)$(PROTOC_C) --proto_path=$(srcdir)/proto --c_out=proto $(srcdir)/proto/etcd_min.proto
proto/etcd_min.pb-c.h: proto/etcd_min.pb-c.c
	@test -f $@ || { rm -f proto/etcd_min.pb-c.c; $(MAKE) $(AM_MAKEFLAGS) proto/etcd_min.pb-c.c; }
