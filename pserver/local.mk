# pserver/: flotilla-pserver.  Its internals (rules, sparse tables, the
# gRPC service) form one convenience library that the binary and the unit
# tests link.
noinst_LTLIBRARIES += libflpserver.la
libflpserver_la_SOURCES = pserver/fl_ps.h pserver/core_internal.h pserver/core.c \
	pserver/core_members.c pserver/core_modes.c pserver/core_dense.c pserver/core_sparse.c \
	pserver/core_barrier.c pserver/core_ckpt.c pserver/core_rows.c pserver/sparse.c \
	pserver/ps_admit.h pserver/admit.c pserver/core_delta.c \
	pserver/server.c pserver/tier_rocks.h pserver/tier_rocks.c pserver/core_stripes.c \
	pserver/core_tier.c pserver/ps_serving.h pserver/serving_export.c pserver/core_commit.c
libflpserver_la_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(ROCKSDB_CFLAGS) -I$(top_srcdir)/pserver
libflpserver_la_LIBADD = $(FL_LIBS) $(GRPC_LIBS) $(PROTOBUFC_LIBS) $(ROCKSDB_LIBS)
FL_PSERVER_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) -I$(top_srcdir)/pserver
FL_PSERVER_LIBS = libflpserver.la $(FL_LIBS) $(GRPC_LIBS) $(PROTOBUFC_LIBS) $(UV_LIBS) $(ROCKSDB_LIBS)

bin_PROGRAMS += flotilla-pserver
flotilla_pserver_SOURCES = pserver/main.c
flotilla_pserver_CFLAGS = $(FL_PSERVER_CFLAGS)
flotilla_pserver_LDADD = $(FL_PSERVER_LIBS)
