# gRPC C core wrappers.
