# The op library of the graph engine (trainer/graph/ops_*.c): one fl_gop
# per ONNX op type, forward and backward, and Flotilla's own sparse op.
libfltrainer_la_SOURCES += trainer/graph/ops_internal.h trainer/graph/ops_registry.c \
	trainer/graph/ops_elementwise.c trainer/graph/ops_linalg.c trainer/graph/ops_conv.c \
	trainer/graph/ops_conv_wino.c \
	trainer/graph/ops_norm.c trainer/graph/ops_reduce.c trainer/graph/ops_shape.c \
	trainer/graph/ops_sparse.c \
	trainer/graph/ops_rnn.c
