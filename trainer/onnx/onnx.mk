# ONNX import and export (trainer/onnx/), over protobuf-c code generated
# from Debian's onnx.proto (libonnx-dev; configure's ONNX_PROTO) at build
# time into the build tree, never committed.
libfltrainer_la_SOURCES += trainer/onnx/fl_onnx.h trainer/onnx/onnx_internal.h \
	trainer/onnx/onnx_load.c trainer/onnx/onnx_export.c trainer/onnx/onnx_util.c \
	trainer/onnx/onnx_embbag.h trainer/onnx/onnx_embbag.c
nodist_libfltrainer_la_SOURCES = trainer/onnx/onnx.pb-c.c trainer/onnx/onnx.pb-c.h
BUILT_SOURCES += trainer/onnx/onnx.pb-c.h
CLEANFILES += trainer/onnx/onnx.pb-c.c trainer/onnx/onnx.pb-c.h

trainer/onnx/onnx.pb-c.c: $(ONNX_PROTO)
	@$(MKDIR_P) trainer/onnx
	$(AM_V_GEN)$(PROTOC_C) --proto_path=`dirname '$(ONNX_PROTO)'` --c_out=trainer/onnx '$(ONNX_PROTO)'
trainer/onnx/onnx.pb-c.h: trainer/onnx/onnx.pb-c.c
	@test -f $@ || { rm -f trainer/onnx/onnx.pb-c.c; $(MAKE) $(AM_MAKEFLAGS) trainer/onnx/onnx.pb-c.c; }
# Read-only views of a graph for the exporter (the engine's struct, read only).
libfltrainer_la_SOURCES += trainer/graph/fl_graph_inspect.h trainer/graph/graph_inspect.c
# Warnings for models exported the wrong way for training.
libfltrainer_la_SOURCES += trainer/onnx/onnx_lint.c
