# The op-graph engine (trainer/graph/): builder, bind and planning,
# execution with automatic backward, the fl_model adapter, the presets.
libfltrainer_la_SOURCES += trainer/graph/fl_graph.h trainer/graph/graph_internal.h \
	trainer/graph/graph_engine.h trainer/graph/graph.c trainer/graph/graph_bind.c \
	trainer/graph/graph_exec.c trainer/graph/graph_model.c trainer/graph/graph_dev.c \
	trainer/graph/graph_fuse.c
libfltrainer_la_SOURCES += trainer/graph/graph_sparse.c
