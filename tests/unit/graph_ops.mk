# Tests of trainer/ (graph_ops).
