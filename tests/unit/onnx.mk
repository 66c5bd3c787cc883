# Tests of trainer/ (onnx).
