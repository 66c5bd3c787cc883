# ONNX import and export (trainer/onnx/), over protobuf-c code generated
# from Debian's onnx.proto.
