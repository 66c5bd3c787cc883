# proto/: the wire schema, compiled by protoc-c at build time into the
# build tree (never committed).
EXTRA_DIST += proto/flotilla.proto
nodist_libflotilla_la_SOURCES += proto/flotilla.pb-c.c proto/flotilla.pb-c.h
BUILT_SOURCES += proto/flotilla.pb-c.h
CLEANFILES += proto/flotilla.pb-c.c proto/flotilla.pb-c.h

proto/flotilla.pb-c.c: $(srcdir)/proto/flotilla.proto
	@$(MKDIR_P) proto
	$(AM_V_GEN)$(PROTOC_C) --proto_path=$(srcdir)/proto --c_out=proto $(srcdir)/proto/flotilla.proto
proto/flotilla.pb-c.h: proto/flotilla.pb-c.c
	@test -f $@ || { rm -f proto/flotilla.pb-c.c; $(MAKE) $(AM_MAKEFLAGS) proto/flotilla.pb-c.c; }
