# trainer/: flotilla-trainer.  Its internals form one convenience library
# (libfltrainer) that the binary and the tests link; each part keeps its
# sources in its own fragment.
noinst_LTLIBRARIES += libfltrainer.la
libfltrainer_la_SOURCES = trainer/fl_model.h trainer/fl_sync.h
# The model plugin ABI: installed, with the headers it includes, so that a
# plugin builds against an installed Flotilla (pkg-config --cflags flotilla).
flotillainclude_HEADERS += trainer/fl_model.h
libfltrainer_la_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) -I$(top_srcdir)/trainer -I$(top_srcdir)/trainer/graph \
	-I$(top_srcdir)/trainer/onnx -I$(top_builddir)/trainer/onnx \
	-I$(top_srcdir)/trainer/collective
libfltrainer_la_LIBADD = $(FL_LIBS)
FL_TRAINER_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) -I$(top_srcdir)/trainer -I$(top_srcdir)/trainer/graph \
	-I$(top_srcdir)/trainer/onnx -I$(top_builddir)/trainer/onnx \
	-I$(top_srcdir)/trainer/collective
include $(srcdir)/trainer/models.mk
include $(srcdir)/trainer/loop.mk
include $(srcdir)/trainer/collective/local.mk
include $(srcdir)/trainer/ps.mk
include $(srcdir)/trainer/graph/graph.mk
include $(srcdir)/trainer/graph/ops.mk
include $(srcdir)/trainer/onnx/onnx.mk
