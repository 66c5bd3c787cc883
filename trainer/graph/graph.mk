# The op-graph engine (trainer/graph/): builder, bind and planning,
# execution with automatic backward, the fl_model adapter, the presets.
libfltrainer_la_SOURCES += trainer/graph/fl_graph.h trainer/graph/graph_internal.h
