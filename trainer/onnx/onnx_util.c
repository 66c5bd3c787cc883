/* onnx_util.c - model files in and out for the ONNX importer and exporter:
 * bounded reads, a nesting-depth guard in front of protobuf-c's unpack,
 * atomic writes, names of dtypes and losses.
 *
 * Why a depth guard: protobuf-c unpacks nested messages by recursion with no
 * depth limit, and ONNX's schema lets messages nest without bound, so a
 * hostile file of a few hundred kilobytes could exhaust the stack.  The
 * guard walks the wire format's tags and lengths with the generated
 * descriptors (which field is a message) and refuses nesting deeper than
 * FL_ONNX_MAX_DEPTH before protobuf-c sees the bytes; it never interprets
 * a value: decoding stays protobuf-c's job. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_log.h"
#include "fl_onnx.h"
#include "onnx_internal.h"

fl_status fl_onnx_read_file(const char *path, const char *what, uint8_t **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return FL_ERR(FL_EIO, "%s %s: %s", what, path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    fclose(f);
    return FL_ERR(FL_EIO, "%s %s: not a regular file", what, path);
  }
  if ((uint64_t)sb.st_size > FL_ONNX_MAX_FILE) {
    fclose(f);
    return FL_ERR(FL_EINVAL, "%s %s: %lld bytes, more than protobuf's 2 GiB limit (external "
                  "data is not supported)", what, path, (long long)sb.st_size);
  }
  size_t n = (size_t)sb.st_size;
  uint8_t *p = malloc(n ? n : 1);
  if (!p) {
    fclose(f);
    return FL_ERR(FL_ENOMEM, "%s %s: out of memory for %zu bytes", what, path, n);
  }
  size_t got = fread(p, 1, n, f);
  int err = ferror(f);
  fclose(f);
  if (got != n || err) {
    free(p);
    return FL_ERR(FL_EIO, "%s %s: read %zu of %zu bytes", what, path, got, n);
  }
  *buf = p;
  *len = n;
  return FL_OK;
}

/* One base-128 varint at *p (before end) into *v; 0 when truncated or
 * longer than 10 bytes. */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 70 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    r |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 63);
    if (!(b & 0x80)) {
      *v = r;
      return 1;
    }
  }
  return 0;
}

/* Nesting depth of the message at buf (as ModelProto): FL_OK, FL_EPROTO for
 * a malformed tag or length (at *bad) or FL_EINVAL when deeper than
 * FL_ONNX_MAX_DEPTH.  Iterative: the stack holds each open message's end. */
static fl_status check_depth(const uint8_t *buf, size_t len, size_t *bad) {
  struct {
    const uint8_t *end;
    const ProtobufCMessageDescriptor *desc;
  } st[FL_ONNX_MAX_DEPTH];
  int top = 0;
  const uint8_t *p = buf;
  st[0].end = buf + len;
  st[0].desc = &onnx__model_proto__descriptor;
  for (;;) {
    *bad = (size_t)(p - buf);
    if (p == st[top].end) {
      if (top == 0) return FL_OK;
      top--;
      continue;
    }
    const uint8_t *end = st[top].end;
    uint64_t key, v;
    if (!varint(&p, end, &key)) return FL_EPROTO;
    switch (key & 7) {
    case 0: /* varint */
      if (!varint(&p, end, &v)) return FL_EPROTO;
      break;
    case 1: /* fixed64 */
      if (end - p < 8) return FL_EPROTO;
      p += 8;
      break;
    case 5: /* fixed32 */
      if (end - p < 4) return FL_EPROTO;
      p += 4;
      break;
    case 2: { /* length-delimited: a nested message when the schema says so */
      if (!varint(&p, end, &v) || v > (uint64_t)(end - p)) return FL_EPROTO;
      const uint64_t id = key >> 3;
      const ProtobufCFieldDescriptor *fd =
          (id >= 1 && id <= UINT32_MAX && st[top].desc)
              ? protobuf_c_message_descriptor_get_field(st[top].desc, (unsigned)id)
              : NULL;
      if (fd && fd->type == PROTOBUF_C_TYPE_MESSAGE) {
        if (top + 1 >= FL_ONNX_MAX_DEPTH) return FL_EINVAL;
        top++;
        st[top].end = p + v;
        st[top].desc = fd->descriptor;
      } else {
        p += v;
      }
      break;
    }
    default: /* groups (3, 4) and 6, 7: not in ONNX's schema */
      return FL_EPROTO;
    }
  }
}

fl_status fl_onnx_unpack(const uint8_t *buf, size_t len, const char *name,
                         Onnx__ModelProto **out) {
  size_t at = 0;
  *out = NULL;
  fl_status st = check_depth(buf, len, &at);
  if (st == FL_EINVAL)
    return FL_ERR(FL_EPROTO, "%s: not an ONNX model: messages nest deeper than %d levels "
                  "(at byte %zu)", name, FL_ONNX_MAX_DEPTH, at);
  if (st != FL_OK)
    return FL_ERR(FL_EPROTO, "%s: not an ONNX model: malformed or truncated protobuf at byte "
                  "%zu of %zu", name, at, len);
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
  if (!m)
    return FL_ERR(FL_EPROTO, "%s: not an ONNX model: protobuf-c cannot unpack it as a "
                  "ModelProto (truncated, or a field of the wrong type)", name);
  *out = m;
  return FL_OK;
}

fl_status fl_onnx_write_atomic(const char *path, const uint8_t *buf, size_t len) {
  size_t pl = strlen(path);
  char *tmp = malloc(pl + 16);
  if (!tmp) return FL_ERR(FL_ENOMEM, "%s: out of memory", path);
  snprintf(tmp, pl + 16, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fl_status st = FL_ERR(FL_EIO, "%s: cannot create a temporary file %s: %s", path, tmp,
                          strerror(errno));
    free(tmp);
    return st;
  }
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  int err = off < len ? (errno ? errno : EIO) : 0;
  if (!err && fchmod(fd, 0644) != 0) err = errno;
  if (!err && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) {
    unlink(tmp);
    free(tmp);
    return FL_ERR(FL_EIO, "%s: writing the model failed: %s", path, strerror(err));
  }
  free(tmp);
  return FL_OK;
}

const char *fl_onnx_dtype_name(int32_t dt) {
  static const char *const names[] = {"undefined", "float",  "uint8",   "int8",      "uint16",
                                      "int16",     "int32",  "int64",   "string",    "bool",
                                      "float16",   "double", "uint32",  "uint64",    "complex64",
                                      "complex128", "bfloat16"};
  if (dt >= 0 && (size_t)dt < sizeof names / sizeof names[0]) return names[dt];
  return "unknown";
}

const char *fl_onnx_loss_name(fl_gloss loss) {
  if ((unsigned)loss < FL_LOSS_COUNT) return fl_loss_names[loss];
  return "?";
}
