# The op library of the graph engine (trainer/graph/ops_*.c): one fl_gop
# per ONNX op type, forward and backward.
