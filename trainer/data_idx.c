/* data_idx.c - IDX image/label files (MNIST, Fashion-MNIST), gzip or plain.
 *
 * Both files are read through one small source abstraction (a zlib gzFile,
 * which reads plain files transparently, or a memory buffer for tests and
 * fuzzing), so the checks and their messages are the same for both.  Byte
 * offsets in messages count in the decompressed contents. */
#include <config.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fl_data.h"
#include "fl_log.h"

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u

typedef struct src {
  const char *name;
  gzFile gz;              /* file source, or NULL */
  const unsigned char *buf; /* memory source */
  size_t len;
  size_t pos; /* bytes consumed so far */
} src;

static fl_status src_open(src *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->name = path;
  errno = 0;
  s->gz = gzopen(path, "rb");
  if (!s->gz) {
    int e = errno;
    if (e == ENOENT) return FL_ERR(FL_ENOTFOUND, "%s: no such file", path);
    return FL_ERR(FL_EIO, "%s: cannot open: %s", path, e ? strerror(e) : "out of memory");
  }
  gzbuffer(s->gz, 1u << 17);
  return FL_OK;
}

static void src_close(src *s) {
  if (s->gz) gzclose_r(s->gz);
  s->gz = NULL;
}

/* Read up to n bytes; *got receives how many (fewer only at the end). */
static fl_status src_read(src *s, void *dst, size_t n, size_t *got) {
  *got = 0;
  if (!s->gz) {
    size_t left = s->len - s->pos;
    size_t k = n < left ? n : left;
    memcpy(dst, s->buf + s->pos, k);
    s->pos += k;
    *got = k;
    return FL_OK;
  }
  while (*got < n) {
    size_t want = n - *got;
    if (want > (1u << 30)) want = 1u << 30;
    int r = gzread(s->gz, (char *)dst + *got, (unsigned)want);
    int errnum = Z_OK;
    const char *msg = NULL;
    if (r < 0) msg = gzerror(s->gz, &errnum);
    if (r < 0 && errnum == Z_ERRNO)
      return FL_ERR(FL_EIO, "%s: read error at offset %zu: %s", s->name, s->pos, strerror(errno));
    if (r < 0)
      return FL_ERR(FL_EPROTO, "%s: corrupt gzip data near offset %zu: %s", s->name, s->pos, msg);
    if (r == 0) {
      msg = gzerror(s->gz, &errnum);
      if (errnum == Z_BUF_ERROR)
        return FL_ERR(FL_EPROTO, "%s: truncated gzip stream at offset %zu", s->name, s->pos);
      if (errnum != Z_OK)
        return FL_ERR(FL_EPROTO, "%s: corrupt gzip data near offset %zu: %s", s->name, s->pos,
                      msg);
      break;
    }
    *got += (size_t)r;
    s->pos += (size_t)r;
  }
  return FL_OK;
}

static fl_status src_read_exact(src *s, void *dst, size_t n, const char *what) {
  size_t got;
  size_t at = s->pos;
  FL_TRY(src_read(s, dst, n, &got));
  if (got < n)
    return FL_ERR(FL_EPROTO, "%s: truncated %s at offset %zu: %zu of %zu bytes from offset %zu",
                  s->name, what, s->pos, got, n, at);
  return FL_OK;
}

/* After the last expected byte: the stream must end here. */
static fl_status src_expect_end(src *s) {
  unsigned char b;
  size_t got;
  size_t at = s->pos;
  FL_TRY(src_read(s, &b, 1, &got));
  if (got)
    return FL_ERR(FL_EPROTO, "%s: unexpected bytes after the data at offset %zu", s->name, at);
  return FL_OK;
}

static uint32_t be32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Read the magic and dims of an IDX file; dims[0] is the sample count. */
static fl_status read_header(src *s, uint32_t magic, int ndim, uint32_t *dims) {
  unsigned char h[16];
  FL_TRY(src_read_exact(s, h, 4, "header"));
  uint32_t m = be32(h);
  if (m != magic)
    return FL_ERR(FL_EPROTO, "%s: bad magic 0x%08x at offset 0 (want 0x%08x, an IDX %s file)",
                  s->name, m, magic, magic == IDX_IMAGES_MAGIC ? "image" : "label");
  FL_TRY(src_read_exact(s, h + 4, 4 * (size_t)ndim, "header"));
  for (int i = 0; i < ndim; i++) {
    dims[i] = be32(h + 4 + 4 * i);
    if (dims[i] == 0)
      return FL_ERR(FL_EPROTO, "%s: dimension %d is 0 at offset %d", s->name, i, 4 + 4 * i);
  }
  return FL_OK;
}

/* Bytes of labels read per chunk, and the smallest growth step. */
#define IDX_CHUNK ((size_t)1 << 16)

/* arr (elements of `size` bytes, *cap of them) regrown to hold at least
 * need elements, doubling but never past limit; NULL if out of memory, and
 * then arr is untouched.  The caller owns the result. */
static void *grow(void *arr, size_t *cap, size_t need, size_t limit, size_t size) {
  size_t nc = *cap * 2 > need ? *cap * 2 : need;
  if (nc < IDX_CHUNK / size + 1) nc = IDX_CHUNK / size + 1;
  if (nc > limit) nc = limit;
  void *q = realloc(arr, nc * size);
  if (q) *cap = nc;
  return q;
}

static fl_status load(src *img, src *lbl, int num_classes, size_t limit, fl_dataset *out) {
  uint32_t idims[3], ldims[1];
  unsigned char *raw = NULL;
  fl_status st;

  memset(out, 0, sizeof *out);
  if (num_classes < 1 || num_classes > 256)
    return FL_ERR(FL_EINVAL, "IDX: num_classes %d outside [1, 256]", num_classes);
  FL_TRY(read_header(img, IDX_IMAGES_MAGIC, 3, idims));
  FL_TRY(read_header(lbl, IDX_LABELS_MAGIC, 1, ldims));
  if (idims[0] != ldims[0])
    return FL_ERR(FL_EINVAL, "%s: %u images (count at offset 4) but %s: %u labels (offset 4)",
                  img->name, idims[0], lbl->name, ldims[0]);
  if (idims[1] > 65535 || idims[2] > 65535)
    return FL_ERR(FL_EPROTO, "%s: image size %ux%u at offset 8 is implausible", img->name,
                  idims[1], idims[2]);
  size_t n = idims[0];
  if (limit && limit < n) n = limit;
  size_t dim = (size_t)idims[1] * idims[2];

  out->n = n;
  out->dim = dim;
  out->channels = 1;
  out->height = (int)idims[1];
  out->width = (int)idims[2];
  out->sample_ndim = 3;
  out->sample_shape[0] = 1;
  out->sample_shape[1] = (int64_t)idims[1];
  out->sample_shape[2] = (int64_t)idims[2];
  out->num_classes = num_classes;
  if (n > SIZE_MAX / sizeof(float) / dim) {
    st = FL_ERR(FL_EPROTO, "%s: %zu samples of %zu pixels (header at offset 4) is implausible",
                img->name, n, dim);
    goto fail;
  }
  /* The arrays grow as data arrives (at most doubling), and pixels are read
   * in chunks, not whole images, so a header that claims more or larger
   * samples than the file holds cannot make us allocate them. */
  raw = malloc(IDX_CHUNK);
  if (!raw) {
    st = FL_ERR(FL_ENOMEM, "%s: cannot allocate a read buffer", img->name);
    goto fail;
  }
  /* Labels first: a bad label is reported before the slow pixel pass. */
  for (size_t i = 0, cap = 0; i < n;) {
    size_t k = n - i < IDX_CHUNK ? n - i : IDX_CHUNK;
    st = src_read_exact(lbl, raw, k, "label data");
    if (st != FL_OK) goto fail;
    if (i + k > cap) {
      int32_t *y = grow(out->y, &cap, i + k, n, sizeof *out->y);
      if (!y) {
        st = FL_ERR(FL_ENOMEM, "%s: cannot allocate labels for %zu samples", lbl->name, i + k);
        goto fail;
      }
      out->y = y;
    }
    for (size_t j = 0; j < k; j++) {
      if (raw[j] >= num_classes) {
        st = FL_ERR(FL_EINVAL, "%s: label %u of sample %zu at offset %zu is out of range [0, %d)",
                    lbl->name, raw[j], i + j, 8 + i + j, num_classes);
        goto fail;
      }
      out->y[i + j] = raw[j];
    }
    i += k;
  }
  size_t total = n * dim;
  for (size_t i = 0, cap = 0; i < total;) {
    size_t k = total - i < IDX_CHUNK ? total - i : IDX_CHUNK;
    st = src_read_exact(img, raw, k, "image data");
    if (st != FL_OK) goto fail;
    if (i + k > cap) {
      float *xs = grow(out->x, &cap, i + k, total, sizeof *out->x);
      if (!xs) {
        st = FL_ERR(FL_ENOMEM, "%s: cannot allocate %zu pixels (sample %zu of %zu pixels)",
                    img->name, i + k, i / dim, dim);
        goto fail;
      }
      out->x = xs;
    }
    for (size_t j = 0; j < k; j++) out->x[i + j] = (float)raw[j] / 255.0f;
    i += k;
  }
  if (n == idims[0]) {
    st = src_expect_end(lbl);
    if (st == FL_OK) st = src_expect_end(img);
    if (st != FL_OK) goto fail;
  }
  free(raw);
  return FL_OK;
fail:
  free(raw);
  fl_dataset_free(out);
  return st;
}

void fl_dataset_free(fl_dataset *d) {
  if (!d) return;
  if (!d->maps[0]) free(d->x); /* else x / xq lie in that mapping */
  if (!d->maps[1]) free(d->t);
  free(d->y);
  fl_npy_close(d->maps[0]);
  fl_npy_close(d->maps[1]);
  for (size_t k = 0; k < d->n_inputs; k++) fl_npy_close(d->inputs[k].file);
  memset(d, 0, sizeof *d);
}

const float *fl_dataset_rows(const fl_dataset *d, size_t first, size_t count, float *scratch) {
  if (d->x) return d->x + first * d->dim;
  const uint8_t *q = d->xq + first * d->dim;
  for (size_t i = 0, total = count * d->dim; i < total; i++) scratch[i] = (float)q[i] * d->xscale;
  return scratch;
}

fl_status fl_idx_load(const char *images_path, const char *labels_path, int num_classes,
                      size_t limit, fl_dataset *out) {
  src img, lbl;
  fl_status st;
  memset(out, 0, sizeof *out);
  if (!images_path || !labels_path) return FL_ERR(FL_EINVAL, "IDX: missing file name");
  FL_TRY(src_open(&img, images_path));
  st = src_open(&lbl, labels_path);
  if (st != FL_OK) {
    src_close(&img);
    return st;
  }
  st = load(&img, &lbl, num_classes, limit, out);
  src_close(&img);
  src_close(&lbl);
  return st;
}

fl_status fl_idx_load_mem(const void *images, size_t images_len, const char *images_name,
                          const void *labels, size_t labels_len, const char *labels_name,
                          int num_classes, size_t limit, fl_dataset *out) {
  src img = {.name = images_name ? images_name : "<images>", .buf = images, .len = images_len};
  src lbl = {.name = labels_name ? labels_name : "<labels>", .buf = labels, .len = labels_len};
  memset(out, 0, sizeof *out);
  if ((!images && images_len) || (!labels && labels_len))
    return FL_ERR(FL_EINVAL, "IDX: NULL buffer");
  return load(&img, &lbl, num_classes, limit, out);
}

void fl_dataset_mean_std(const fl_dataset *d, double *mean, double *std) {
  double s = 0.0, s2 = 0.0;
  size_t total = d->n * d->dim;
  for (size_t i = 0; i < total; i++) {
    double v = d->x[i];
    s += v;
    s2 += v * v;
  }
  double m = total ? s / (double)total : 0.0;
  double var = total ? s2 / (double)total - m * m : 0.0;
  *mean = m;
  *std = var > 0.0 ? sqrt(var) : 0.0;
}

fl_status fl_dataset_normalize(fl_dataset *d, double mean, double std) {
  if (!(std > 0.0)) return FL_ERR(FL_EINVAL, "normalize: std %g must be > 0", std);
  float m = (float)mean, inv = (float)(1.0 / std);
  size_t total = d->n * d->dim;
  for (size_t i = 0; i < total; i++) d->x[i] = (d->x[i] - m) * inv;
  return FL_OK;
}
