/* data_npy.c - .npy files (numpy.save) as training data: a strict header
 * parser, private memory mappings of the payload, a small writer, and the
 * features + labels loader behind data.format npy.
 *
 * Why .npy: it is what a Python user already has (numpy.save of a tensor's
 * .numpy()), it needs no library, and its payload is raw C-order data that
 * can be mapped and read in place, so ranks on one node share the page
 * cache and nothing is converted at load except class ids to int32.
 *
 * The header is a Python dict literal; we accept exactly what numpy writes
 * (the keys 'descr', 'fortran_order', 'shape' in any order, single or
 * double quotes, a trailing comma, spaces and a final newline) and refuse
 * everything else with the file name and the byte offset in the header.
 * Every size is computed with overflow checks before it is compared with
 * the file's length. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fl_data.h"
#include "fl_log.h"
#include "fl_names.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_NAME_MAX 512

struct fl_npy {
  char name[NPY_NAME_MAX];
  void *map;      /* the whole file (mmap), or NULL */
  size_t map_len;
  void *heap;     /* fl_npy_open_mem's copy, or an aligned copy of the payload */
  void *data;     /* payload, aligned for the dtype */
  fl_npy_dtype dt;
  int ndim;
  int64_t shape[FL_DATA_MAX_DIMS];
  size_t count;
};

static const struct {
  const char *descr;
  fl_npy_dtype dt;
} k_descrs[] = {{"<f4", FL_NPY_F32}, {"=f4", FL_NPY_F32}, {"|u1", FL_NPY_U8},
                {"<u1", FL_NPY_U8},  {"=u1", FL_NPY_U8}, {"<i8", FL_NPY_I64},
                {"=i8", FL_NPY_I64}, {"<i4", FL_NPY_I32}, {"=i4", FL_NPY_I32},
                {"<f2", FL_NPY_F16}, {"=f2", FL_NPY_F16}, {"|b1", FL_NPY_BOOL}};

static size_t elem_size(fl_npy_dtype dt) {
  switch (dt) {
  case FL_NPY_F32: return 4;
  case FL_NPY_U8: return 1;
  case FL_NPY_I64: return 8;
  case FL_NPY_I32: return 4;
  case FL_NPY_F16: return 2;
  case FL_NPY_BOOL: return 1;
  }
  return 1;
}

const char *fl_npy_dtype_name(fl_npy_dtype dt) {
  switch (dt) {
  case FL_NPY_F32: return "f4";
  case FL_NPY_U8: return "u1";
  case FL_NPY_I64: return "i8";
  case FL_NPY_I32: return "i4";
  case FL_NPY_F16: return "f2";
  case FL_NPY_BOOL: return "b1";
  }
  return "?";
}

/* ------------------------------------------------------------ header */

typedef struct hdr {
  const char *name;
  const char *s; /* header text (not NUL-terminated) */
  size_t len, pos;
  size_t base;   /* file offset of s[0], for messages */
} hdr;

static void skip_ws(hdr *h) {
  while (h->pos < h->len && (h->s[h->pos] == ' ' || h->s[h->pos] == '\t' ||
                             h->s[h->pos] == '\n' || h->s[h->pos] == '\r'))
    h->pos++;
}

static fl_status herr(const hdr *h, const char *what) {
  return FL_ERR(FL_EPROTO, "%s: bad .npy header at byte %zu: %s", h->name, h->base + h->pos, what);
}

static int eat(hdr *h, char c) {
  skip_ws(h);
  if (h->pos < h->len && h->s[h->pos] == c) {
    h->pos++;
    return 1;
  }
  return 0;
}

/* A quoted Python string (no escapes: numpy's keys and descrs have none)
 * into out (cap bytes). */
static fl_status parse_str(hdr *h, char *out, size_t cap, const char *what) {
  skip_ws(h);
  if (h->pos >= h->len || (h->s[h->pos] != '\'' && h->s[h->pos] != '"')) return herr(h, what);
  char q = h->s[h->pos++];
  size_t n = 0;
  while (h->pos < h->len && h->s[h->pos] != q) {
    char c = h->s[h->pos];
    if (c == '\\' || (unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
      return herr(h, "unexpected character in a string");
    if (n + 1 >= cap) return herr(h, "string too long");
    out[n++] = c;
    h->pos++;
  }
  if (h->pos >= h->len) return herr(h, "unterminated string");
  h->pos++;
  out[n] = '\0';
  return FL_OK;
}

static int match_word(hdr *h, const char *w) {
  size_t n = strlen(w);
  skip_ws(h);
  if (h->len - h->pos >= n && memcmp(h->s + h->pos, w, n) == 0) {
    h->pos += n;
    return 1;
  }
  return 0;
}

/* A shape tuple: "()", "(n,)", "(a, b, c)", a trailing comma allowed ("(n)"
 * is an int in Python, not a tuple, and is refused as numpy would). */
static fl_status parse_shape(hdr *h, fl_npy *f) {
  int comma = 0;
  if (!eat(h, '(')) return herr(h, "'shape' must be a tuple");
  f->ndim = 0;
  while (!eat(h, ')')) {
    skip_ws(h);
    if (h->pos >= h->len || h->s[h->pos] < '0' || h->s[h->pos] > '9')
      return herr(h, "expected a non-negative integer in 'shape'");
    uint64_t v = 0;
    while (h->pos < h->len && h->s[h->pos] >= '0' && h->s[h->pos] <= '9') {
      unsigned d = (unsigned)(h->s[h->pos] - '0');
      if (v > ((uint64_t)INT64_MAX - d) / 10) return herr(h, "dimension overflows int64");
      v = v * 10 + d;
      h->pos++;
    }
    if (h->pos < h->len && h->s[h->pos] == 'L') h->pos++; /* Python 2's long suffix */
    if (f->ndim >= FL_DATA_MAX_DIMS) return herr(h, "more than 8 dimensions");
    f->shape[f->ndim++] = (int64_t)v;
    comma = eat(h, ',');
    if (!comma) {
      if (!eat(h, ')')) return herr(h, "expected ',' or ')' in 'shape'");
      break;
    }
  }
  if (f->ndim == 1 && !comma) return herr(h, "'shape' (n) is not a tuple; numpy writes (n,)");
  return FL_OK;
}

/* Parse the dict in h into f's dtype and shape. */
static fl_status parse_dict(hdr *h, fl_npy *f) {
  int have_descr = 0, have_fortran = 0, have_shape = 0;
  if (!eat(h, '{')) return herr(h, "expected '{' (a dict)");
  for (;;) {
    char key[32], val[16];
    if (eat(h, '}')) break;
    FL_TRY(parse_str(h, key, sizeof key, "expected a quoted key"));
    if (!eat(h, ':')) return herr(h, "expected ':' after a key");
    if (!strcmp(key, "descr")) {
      if (have_descr++) return herr(h, "duplicate key 'descr'");
      FL_TRY(parse_str(h, val, sizeof val, "'descr' must be a dtype string such as '<f4'"));
      const int i = FL_ROWS_FIND(k_descrs, val);
      if (i < 0)
        return FL_ERR(FL_EPROTO, "%s: unsupported .npy dtype '%s' (supported: '<f4' float32, "
                      "'<f2' float16, '|u1' uint8, '|b1' bool, '<i8' int64, '<i4' int32, "
                      "little-endian)", h->name, val);
      f->dt = k_descrs[i].dt;
    } else if (!strcmp(key, "fortran_order")) {
      if (have_fortran++) return herr(h, "duplicate key 'fortran_order'");
      if (match_word(h, "True"))
        return FL_ERR(FL_EPROTO, "%s: .npy array is in Fortran order; save a C-order array "
                      "(numpy.ascontiguousarray)", h->name);
      if (!match_word(h, "False")) return herr(h, "'fortran_order' must be True or False");
    } else if (!strcmp(key, "shape")) {
      if (have_shape++) return herr(h, "duplicate key 'shape'");
      FL_TRY(parse_shape(h, f));
    } else {
      char msg[80];
      snprintf(msg, sizeof msg, "unknown key '%s'", key);
      return herr(h, msg);
    }
    if (eat(h, ',')) continue;
    if (eat(h, '}')) break;
    return herr(h, "expected ',' or '}'");
  }
  skip_ws(h);
  if (h->pos != h->len) return herr(h, "text after the dict");
  if (!have_descr) return herr(h, "missing key 'descr'");
  if (!have_fortran) return herr(h, "missing key 'fortran_order'");
  if (!have_shape) return herr(h, "missing key 'shape'");
  return FL_OK;
}

static void shape_str(const fl_npy *f, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "(");
  for (int i = 0; i < f->ndim && n < cap; i++)
    n += (size_t)snprintf(out + n, cap - n, "%s%lld", i ? ", " : "", (long long)f->shape[i]);
  if (n < cap) snprintf(out + n, cap - n, f->ndim == 1 ? ",)" : ")");
}

/* Parse the file image base[0..len) (f->name set) and point f->data at the
 * payload, copying it to aligned heap memory when it is not aligned. */
static fl_status parse_file(fl_npy *f, unsigned char *base, size_t len) {
  if (len < NPY_MAGIC_LEN + 2 || memcmp(base, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
    return FL_ERR(FL_EPROTO, "%s: not a .npy file (%s)", f->name,
                  len < NPY_MAGIC_LEN + 2 ? "shorter than the magic and version"
                                          : "no \\x93NUMPY magic");
  unsigned major = base[6], minor = base[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return FL_ERR(FL_EPROTO, "%s: .npy format version %u.%u not supported (1.0, 2.0, 3.0)", f->name,
                  major, minor);
  size_t pre = major == 1 ? 10 : 12, hlen;
  if (len < pre)
    return FL_ERR(FL_EPROTO, "%s: file too short: %zu bytes end inside the header length", f->name,
                  len);
  if (major == 1)
    hlen = (size_t)base[8] | (size_t)base[9] << 8;
  else
    hlen = (size_t)base[8] | (size_t)base[9] << 8 | (size_t)base[10] << 16 |
           (size_t)base[11] << 24;
  if (hlen > len - pre)
    return FL_ERR(FL_EPROTO, "%s: file too short: header length %zu runs past the end of the "
                  "file (%zu bytes)", f->name, hlen, len);
  hdr h = {.name = f->name, .s = (const char *)base + pre, .len = hlen, .base = pre};
  FL_TRY(parse_dict(&h, f));

  size_t count = 1, es = elem_size(f->dt);
  for (int i = 0; i < f->ndim; i++) {
    uint64_t d = (uint64_t)f->shape[i];
    if (d != 0 && count > SIZE_MAX / es / d) {
      char sh[200];
      shape_str(f, sh, sizeof sh);
      return FL_ERR(FL_EPROTO, "%s: shape %s of %s overflows the address space", f->name, sh,
                    fl_npy_dtype_name(f->dt));
    }
    count *= (size_t)d;
  }
  size_t need = count * es, have = len - pre - hlen;
  if (have != need) {
    char sh[200];
    shape_str(f, sh, sizeof sh);
    return FL_ERR(FL_EPROTO, "%s: file too %s: shape %s of %s needs %zu payload bytes, the file "
                  "has %zu after its %zu-byte header", f->name, have < need ? "short" : "long", sh,
                  fl_npy_dtype_name(f->dt), need, have, pre + hlen);
  }
  f->count = count;
  unsigned char *payload = base + pre + hlen;
  if (((uintptr_t)payload % es) != 0) {
    void *copy = malloc(need ? need : 1);
    if (!copy) return FL_ERR(FL_ENOMEM, "%s: cannot copy %zu unaligned payload bytes", f->name, need);
    memcpy(copy, payload, need);
    f->heap = copy;
    payload = copy;
  }
  f->data = payload;
  return FL_OK;
}

static fl_npy *npy_new(const char *name) {
  fl_npy *f = calloc(1, sizeof *f);
  if (f) snprintf(f->name, sizeof f->name, "%s", name);
  return f;
}

fl_status fl_npy_open(const char *path, fl_npy **out) {
  *out = NULL;
  if (!path || !path[0]) return FL_ERR(FL_EINVAL, "npy: empty file name");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return FL_ERR(FL_ENOTFOUND, "%s: no such file", path);
    return FL_ERR(FL_EIO, "%s: cannot open: %s", path, strerror(e));
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return FL_ERR(FL_EIO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return FL_ERR(FL_EIO, "%s: not a regular file", path);
  }
  if ((uint64_t)sb.st_size > SIZE_MAX) {
    close(fd);
    return FL_ERR(FL_EIO, "%s: too large to map", path);
  }
  size_t len = (size_t)sb.st_size;
  fl_npy *f = npy_new(path);
  if (!f) {
    close(fd);
    return FL_ERR(FL_ENOMEM, "%s: out of memory", path);
  }
  if (len < NPY_MAGIC_LEN + 2) {
    close(fd);
    fl_npy_close(f);
    return FL_ERR(FL_EPROTO, "%s: not a .npy file (%zu bytes, shorter than the magic and version)",
                  path, len);
  }
  /* private and writable: writes (none planned) would never reach the file */
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (m == MAP_FAILED) {
    fl_npy_close(f);
    return FL_ERR(FL_EIO, "%s: cannot map %zu bytes: %s", path, len, strerror(e));
  }
  f->map = m;
  f->map_len = len;
  fl_status st = parse_file(f, m, len);
  if (st != FL_OK) {
    fl_npy_close(f);
    return st;
  }
  *out = f;
  return FL_OK;
}

fl_status fl_npy_open_mem(const void *buf, size_t len, const char *name, fl_npy **out) {
  *out = NULL;
  if (!buf && len) return FL_ERR(FL_EINVAL, "npy: NULL buffer");
  fl_npy *f = npy_new(name ? name : "<npy>");
  if (!f) return FL_ERR(FL_ENOMEM, "npy: out of memory");
  f->heap = malloc(len ? len : 1);
  if (!f->heap) {
    fl_npy_close(f);
    return FL_ERR(FL_ENOMEM, "%s: cannot copy %zu bytes", name ? name : "<npy>", len);
  }
  if (len) memcpy(f->heap, buf, len);
  /* parse_file may replace heap by an aligned payload copy: keep the image */
  unsigned char *image = f->heap;
  f->heap = NULL;
  fl_status st = parse_file(f, image, len);
  if (st != FL_OK || f->heap) {
    free(image); /* payload (if any) was copied out to f->heap */
  } else {
    f->heap = image;
  }
  if (st != FL_OK) {
    fl_npy_close(f);
    return st;
  }
  *out = f;
  return FL_OK;
}

void fl_npy_close(fl_npy *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->map_len);
  free(f->heap);
  free(f);
}

fl_npy_dtype fl_npy_dtype_of(const fl_npy *f) { return f->dt; }
int fl_npy_ndim(const fl_npy *f) { return f->ndim; }
const int64_t *fl_npy_shape(const fl_npy *f) { return f->shape; }
size_t fl_npy_count(const fl_npy *f) { return f->count; }
void *fl_npy_data(fl_npy *f) { return f->data; }
const char *fl_npy_name(const fl_npy *f) { return f->name; }

/* ------------------------------------------------------------ writer */

fl_status fl_npy_save(const char *path, fl_npy_dtype dt, int ndim, const int64_t *shape,
                      const void *data) {
  static const char *const descr[] = {"<f4", "|u1", "<i8", "<i4", "<f2", "|b1"};
  char dict[400];
  if ((unsigned)dt > FL_NPY_BOOL || ndim < 0 || ndim > FL_DATA_MAX_DIMS)
    return FL_ERR(FL_EINVAL, "%s: npy save: bad dtype or ndim %d", path, ndim);
  size_t count = 1, n;
  n = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                       descr[dt]);
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return FL_ERR(FL_EINVAL, "%s: npy save: negative dimension", path);
    count *= (size_t)shape[i];
    n += (size_t)snprintf(dict + n, sizeof dict - n, "%lld%s", (long long)shape[i],
                          ndim == 1 || i + 1 < ndim ? ", " : "");
  }
  n += (size_t)snprintf(dict + n, sizeof dict - n, "), }");
  /* pad with spaces so that magic + version + length + header is a multiple
   * of 64 (numpy's alignment), ending in a newline */
  size_t total = 10 + n + 1;
  size_t padded = (total + 63) / 64 * 64;
  size_t hlen = padded - 10;
  FILE *fp = fopen(path, "wb");
  if (!fp) return FL_ERR(FL_EIO, "%s: cannot create: %s", path, strerror(errno));
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                           (unsigned char)(hlen >> 8)};
  int ok = fwrite(pre, 1, 10, fp) == 10 && fwrite(dict, 1, n, fp) == n;
  for (size_t i = n; ok && i + 1 < hlen; i++) ok = fputc(' ', fp) != EOF;
  ok = ok && fputc('\n', fp) != EOF;
  size_t bytes = count * elem_size(dt);
  if (ok && bytes) ok = fwrite(data, 1, bytes, fp) == bytes;
  if (fclose(fp) != 0) ok = 0;
  if (!ok) return FL_ERR(FL_EIO, "%s: write failed: %s", path, strerror(errno));
  return FL_OK;
}

/* ------------------------------------------------------------ dataset */

/* Labels of the first n samples from yf into out: float32 become targets t
 * (yf then owned by out->maps[1]), class ids are copied to out->y (yf stays
 * the caller's); per_token allows class ids of shape (n, L) (out->ylen = L),
 * whose ignore_index entries are kept as they are. */
fl_status fl_npy_labels(fl_npy *yf, size_t n, int num_classes, int per_token,
                        int64_t ignore_index, fl_dataset *out) {
  const char *name = fl_npy_name(yf);
  const int64_t *sh = fl_npy_shape(yf);
  int nd = fl_npy_ndim(yf);
  if (fl_npy_dtype_of(yf) == FL_NPY_F32) {
    size_t per = 1;
    for (int i = 1; i < nd; i++) per *= (size_t)sh[i];
    if (per == 0) return FL_ERR(FL_EINVAL, "%s: float targets with an empty per-sample shape", name);
    out->t = fl_npy_data(yf);
    out->tdim = per;
    out->maps[1] = yf;
    return FL_OK;
  }
  const fl_npy_dtype yd = fl_npy_dtype_of(yf);
  if (yd != FL_NPY_I64 && yd != FL_NPY_I32)
    return FL_ERR(FL_EINVAL, "%s: labels must be int64 or int32 class ids, or float32 targets; "
                  "got %s", name, yd == FL_NPY_U8 ? "uint8" : fl_npy_dtype_name(yd));
  if (nd > 2 || (nd == 2 && sh[1] != 1 && !per_token) || (nd == 2 && sh[1] < 1))
    return FL_ERR(FL_EINVAL, "%s: class ids must have shape (n,) or (n, 1)%s, got %d dims%s",
                  name, per_token ? " or (n, L)" : "", nd,
                  nd == 2 ? " with more than one column" : "");
  const size_t ylen = nd == 2 ? (size_t)sh[1] : 1, total = n * ylen;
  out->ylen = ylen;
  out->y = malloc((total ? total : 1) * sizeof(int32_t));
  if (!out->y) return FL_ERR(FL_ENOMEM, "%s: cannot allocate %zu labels", name, total);
  const void *src = fl_npy_data(yf);
  for (size_t i = 0; i < total; i++) {
    int64_t v = yd == FL_NPY_I64 ? ((const int64_t *)src)[i] : ((const int32_t *)src)[i];
    if (v == ignore_index && per_token) {
      out->y[i] = (int32_t)v;
      continue;
    }
    if (v < 0 || v > INT32_MAX || (num_classes > 0 && v >= num_classes))
      return FL_ERR(FL_EINVAL, "%s: label %lld of sample %zu outside [0, %d) (model.num_classes)%s",
                    name, (long long)v, i / ylen, num_classes,
                    per_token ? " and not model.ignore_index" : "");
    out->y[i] = (int32_t)v;
  }
  return FL_OK;
}

fl_status fl_npy_load(const char *x_path, const char *y_path, int num_classes, float scale,
                      size_t limit, fl_dataset *out) {
  fl_npy *xf = NULL, *yf = NULL;
  fl_status st;
  memset(out, 0, sizeof *out);
  FL_TRY(fl_npy_open(x_path, &xf));
  if ((st = fl_npy_open(y_path, &yf)) != FL_OK) {
    fl_npy_close(xf);
    return st;
  }
  out->maps[0] = xf; /* from here fl_dataset_free(out) closes xf */
  fl_npy_dtype xd = fl_npy_dtype_of(xf);
  const int64_t *xs = fl_npy_shape(xf), *ys = fl_npy_shape(yf);
  if (xd != FL_NPY_F32 && xd != FL_NPY_U8) {
    st = FL_ERR(FL_EINVAL, "%s: features must be float32 ('<f4') or uint8 ('|u1'), got %s", x_path,
                fl_npy_dtype_name(xd));
    goto fail;
  }
  if (fl_npy_ndim(xf) < 1 || fl_npy_ndim(yf) < 1) {
    st = FL_ERR(FL_EINVAL, "%s: a 0-d array holds no samples (shape ())",
                fl_npy_ndim(xf) < 1 ? x_path : y_path);
    goto fail;
  }
  if (xs[0] != ys[0]) {
    st = FL_ERR(FL_EINVAL, "%s has %lld samples but %s has %lld labels", x_path, (long long)xs[0],
                y_path, (long long)ys[0]);
    goto fail;
  }
  if (xs[0] == 0) {
    st = FL_ERR(FL_EINVAL, "%s: no samples (first dimension 0)", x_path);
    goto fail;
  }
  if (xd == FL_NPY_F32 && scale != FL_NPY_DEFAULT_SCALE) {
    st = FL_ERR(FL_EINVAL, "%s: data.scale %g applies to uint8 features; this file holds float32 "
                "(scale it in numpy, or save uint8)", x_path, (double)scale);
    goto fail;
  }
  size_t n = (size_t)xs[0];
  if (limit > 0 && limit < n) n = limit;
  size_t dim = 1;
  for (int i = 1; i < fl_npy_ndim(xf); i++) dim *= (size_t)xs[i];
  if (dim == 0) {
    st = FL_ERR(FL_EINVAL, "%s: samples of zero values (a dimension is 0)", x_path);
    goto fail;
  }
  out->n = n;
  out->dim = dim;
  out->num_classes = num_classes;
  out->sample_ndim = fl_npy_ndim(xf) - 1;
  for (int i = 1; i < fl_npy_ndim(xf); i++) out->sample_shape[i - 1] = xs[i];
  /* C,H,W for the built-in models: (n,c,h,w), (n,h,w) as one channel,
   * (n,d) as 1x1xd; longer shapes fold the leading dims into channels */
  int sd = out->sample_ndim;
  int64_t c = 1, hh = 1, ww = 1;
  if (sd >= 1) ww = xs[sd];
  if (sd >= 2) hh = xs[sd - 1];
  for (int i = 1; i <= sd - 2; i++) c *= xs[i];
  if (c > INT32_MAX || hh > INT32_MAX || ww > INT32_MAX) {
    st = FL_ERR(FL_EINVAL, "%s: a sample dimension exceeds 2^31", x_path);
    goto fail;
  }
  out->channels = (int)c;
  out->height = (int)hh;
  out->width = (int)ww;
  if (xd == FL_NPY_F32) {
    out->x = fl_npy_data(xf);
  } else {
    out->xq = fl_npy_data(xf);
    out->xscale = scale;
  }
  st = fl_npy_labels(yf, n, num_classes, 0, 0, out);
  if (out->maps[1] != yf) fl_npy_close(yf); /* class ids were copied */
  yf = NULL;
  if (st != FL_OK) goto fail;
  return FL_OK;
fail:
  fl_npy_close(yf);
  fl_dataset_free(out);
  return st;
}
