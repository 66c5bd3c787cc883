/* fl_onnx.h - ONNX models in and out of the op-graph engine.
 *
 * Import: a job names `model: {kind: onnx, path: model.onnx, output:
 * logits, loss: softmax_cross_entropy}`; fl_onnx_load parses the file with
 * protobuf-c (code generated at build time from Debian's onnx.proto) and
 * describes it to the graph builder (fl_graph.h): ONNX op types and
 * attributes map 1:1 onto the engine's ops, so the importer's work is
 * checking what the engine cannot know (opset, dtypes, where the batch
 * dimension is, which initializers are trainable) and refusing, with the
 * file, node name and op type, anything it would otherwise get wrong.
 *
 *   float initializers          -> trainable parameters (constants when
 *                                  only inputs without a gradient read them)
 *   BatchNormalization mean/var -> buffers (checkpointed, never optimized)
 *   int64 / int32 / bool tensors -> int64 constants; Constant nodes folded
 *   graph inputs                -> data inputs, dim 0 = the batch: float and
 *                                  float16 as float, int64 / int32 / bool as
 *                                  int64 (fed per step, by name)
 *
 * Refused (FL_ENOTSUP, or FL_EINVAL / FL_EPROTO for a malformed file):
 * opsets outside 13..17, other op domains, ops the engine lacks, subgraph
 * attributes (If, Loop, Scan), tensors of other dtypes, external or sparse
 * data, symbolic dims other than the input's first, sequence / map /
 * optional types, cycles, inputs nobody defines, dims whose product
 * overflows, initializers whose data does not match their dims.
 *
 * Export: fl_onnx_export writes a trained graph back as ONNX: the imported
 * file with its initializers replaced by the trained values (BN running
 * statistics included), or for a preset (logreg, mlp, cnn) a ModelProto
 * built from the graph (opset 17).  Files are written to a temporary name
 * and renamed, so a reader never sees half a model. */
#ifndef FL_ONNX_H
#define FL_ONNX_H

#include <stddef.h>

#include "fl_graph.h"
#include "fl_status.h"

/* The opsets (default domain) the importer accepts, and the one export
 * writes for presets. */
#define FL_ONNX_OPSET_MIN 13
#define FL_ONNX_OPSET_MAX 17
#define FL_ONNX_EXPORT_OPSET 17

/* Parse the ONNX model in the file at path into a new, uncompiled builder
 * graph (named path).  output names the value the loss reads; NULL or ""
 * takes the graph's only output.  Only nodes the output depends on are
 * declared.  On success the caller owns *out (fl_graph_free, or hand it to
 * fl_graph_model_create).  Errors are logged once, naming path and, where
 * one is to blame, the node's name and op type: FL_EIO (unreadable),
 * FL_EPROTO (not a ModelProto), FL_ENOTSUP (unsupported op, attribute,
 * dtype, opset or dynamic shape: the message says what is supported),
 * FL_EINVAL (a graph that is not valid ONNX), FL_ENOMEM. */
fl_status fl_onnx_load(const char *path, const char *output, fl_gloss loss, fl_graph **out);

/* The same from len bytes at buf; name stands for the file in messages
 * (and names the graph).  buf stays the caller's. */
fl_status fl_onnx_load_mem(const void *buf, size_t len, const char *name, const char *output,
                           fl_gloss loss, fl_graph **out);

/* A loss's job-file name (fl_loss_names: "softmax_cross_entropy",
 * "bce_with_logits", "mse"), "?" for a bad value.  The strings are static. */
const char *fl_onnx_loss_name(fl_gloss loss);

/* Write the trained graph as ONNX to out_path (a temporary file in the same
 * directory, then rename).  src_onnx: the file the graph was imported from;
 * its ModelProto is kept as it is (opset imports, names, doc strings,
 * nodes) and only the data of the initializers the graph trained or
 * updated (parameters and batch-norm running statistics) is replaced with
 * fl_graph_value(trained, name).  src_onnx NULL: trained is a preset graph
 * and a ModelProto of opset FL_ONNX_EXPORT_OPSET is built from it (fused
 * activations written as their own Relu / Tanh nodes); a graph holding an
 * op that opset lacks (GroupNormalization) is refused.  trained stays the
 * caller's.  Errors logged: FL_EIO, FL_EPROTO / FL_EINVAL (src_onnx does
 * not match the graph), FL_ENOTSUP, FL_ENOMEM. */
fl_status fl_onnx_export(const char *src_onnx, const fl_graph *trained, const char *out_path);

#endif
