# The op library of the graph engine (trainer/graph/ops_*.c): one fl_gop
# per ONNX op type, forward and backward, and Flotilla's own ops.  One
# family file a line.
libfltrainer_la_SOURCES += trainer/graph/ops_internal.h trainer/graph/ops_registry.c
libfltrainer_la_SOURCES += trainer/graph/ops_elementwise.c
libfltrainer_la_SOURCES += trainer/graph/ops_linalg.c
libfltrainer_la_SOURCES += trainer/graph/ops_conv.c trainer/graph/ops_conv_wino.c
libfltrainer_la_SOURCES += trainer/graph/ops_norm.c
libfltrainer_la_SOURCES += trainer/graph/ops_reduce.c
libfltrainer_la_SOURCES += trainer/graph/ops_shape.c
libfltrainer_la_SOURCES += trainer/graph/ops_sparse.c
libfltrainer_la_SOURCES += trainer/graph/ops_matrix.c
libfltrainer_la_SOURCES += trainer/graph/ops_embbag.c
libfltrainer_la_SOURCES += trainer/graph/ops_convt.c
libfltrainer_la_SOURCES += trainer/graph/ops_resize.c
libfltrainer_la_SOURCES += trainer/graph/ops_activation.c
libfltrainer_la_SOURCES += trainer/graph/ops_rnn.c
