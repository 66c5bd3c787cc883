/* onnx_internal.h - what the ONNX importer and exporter share (never
 * installed): reading and writing model files, and unpacking a ModelProto
 * safely. */
#ifndef FL_ONNX_INTERNAL_H
#define FL_ONNX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fl_status.h"
#include "onnx.pb-c.h"

/* Largest model file read: protobuf's own 2 GiB message limit. */
#define FL_ONNX_MAX_FILE ((size_t)INT32_MAX)
/* Deepest message nesting accepted.  protobuf-c's unpack recurses once per
 * nested message with no limit of its own, and ONNX's schema nests without
 * bound (TypeProto in TypeProto, GraphProto in AttributeProto), so a few
 * bytes per level would otherwise overflow the stack.  Real models nest
 * fewer than 16 levels. */
#define FL_ONNX_MAX_DEPTH 64

/* Read the whole file at path into *buf (the caller frees it) and its size
 * into *len.  FL_EIO / FL_EINVAL (too large) / FL_ENOMEM, logged with
 * what says what the file is ("model", "--export-onnx source"). */
fl_status fl_onnx_read_file(const char *path, const char *what, uint8_t **buf, size_t *len);

/* Unpack a ModelProto from len bytes at buf with protobuf-c, after checking
 * that no message nests deeper than FL_ONNX_MAX_DEPTH.  The caller frees
 * *out with onnx__model_proto__free_unpacked(*out, NULL).  FL_EPROTO
 * (logged, naming name) when it is not a ModelProto, FL_ENOMEM. */
fl_status fl_onnx_unpack(const uint8_t *buf, size_t len, const char *name,
                         Onnx__ModelProto **out);

/* Write len bytes to path atomically: a temporary file next to it, fsync,
 * rename.  FL_EIO logged with path. */
fl_status fl_onnx_write_atomic(const char *path, const uint8_t *buf, size_t len);

/* ONNX TensorProto.DataType's name ("float", "int64", ...), never NULL. */
const char *fl_onnx_dtype_name(int32_t dt);

/* Warn (fl_log WARN, each rule at most once, naming path and the first
 * offender) about a model exported from PyTorch the wrong way for
 * training: batch norm in eval mode (opset 14 on), weights with constant
 * folding's anonymous names (onnx::<Op>_<n>), a fixed batch dimension on
 * the data input.  Reads m only; FL_ENOMEM (logged) is its only error. */
fl_status fl_onnx_lint(const Onnx__ModelProto *m, const char *path);

/* ONNX element types the importer meets by number. */
enum {
  FL_ONNX_FLOAT = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
  FL_ONNX_INT32 = ONNX__TENSOR_PROTO__DATA_TYPE__INT32,
  FL_ONNX_INT64 = ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
  FL_ONNX_BOOL = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL,
  FL_ONNX_DOUBLE = ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE
};

#endif
