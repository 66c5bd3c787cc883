/* data_libsvm.c - sparse CTR text files: libsvm ("label idx:val ..."),
 * libffm ("label field:idx:val ...") and Paddle-style slot files
 * ("label slot:feasign ...").
 *
 * Files are read line by line through zlib (gzip or plain) so a large file
 * is never held whole; every error names file:line:column (1-based). */
#include <config.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fl_data.h"
#include "fl_log.h"

#define MAX_LINE (1u << 20)

/* The growing result, plus where we are for messages. */
typedef struct builder {
  const char *name;
  fl_sparse_format fmt;
  size_t lineno;
  fl_sparse_dataset d;
  size_t cap_n, cap_f;
} builder;

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static fl_status perr(const builder *b, const char *line, const char *at, const char *what) {
  return FL_ERR(FL_EPROTO, "%s:%zu:%zu: %s", b->name, b->lineno, (size_t)(at - line) + 1, what);
}

/* Decimal unsigned integer; *end past it.  -1 when no digit or overflow. */
static int parse_u64(const char *p, uint64_t *v, const char **end) {
  uint64_t x = 0;
  const char *q = p;
  if (*q < '0' || *q > '9') return -1;
  while (*q >= '0' && *q <= '9') {
    unsigned dgt = (unsigned)(*q - '0');
    if (x > (UINT64_MAX - dgt) / 10) return -1;
    x = x * 10 + dgt;
    q++;
  }
  *v = x;
  *end = q;
  return 0;
}

/* A finite float ending at whitespace or end of line. */
static int parse_float(const char *p, double *v, const char **end) {
  char *e;
  if (is_ws(*p) || *p == '\0') return -1;
  errno = 0;
  double x = strtod(p, &e);
  if (e == p || !isfinite(x) || fabs(x) > 3.0e38 || (*e && !is_ws(*e))) return -1;
  *v = x;
  *end = e;
  return 0;
}

/* Append a feature to the sample being built (number b->d.n, whose
 * features run from offsets[n] to offsets[n+1]). */
static fl_status push_feature(builder *b, uint32_t slot, uint64_t id, float value) {
  size_t nf = b->d.offsets[b->d.n + 1];
  if (nf == b->cap_f) {
    size_t cap = b->cap_f ? 2 * b->cap_f : 1024;
    fl_sparse_feature *f = realloc(b->d.feats, cap * sizeof *f);
    if (!f) return FL_ERR(FL_ENOMEM, "%s: out of memory at line %zu", b->name, b->lineno);
    b->d.feats = f;
    b->cap_f = cap;
  }
  b->d.feats[nf] = (fl_sparse_feature){.slot = slot, .id = id, .value = value};
  b->d.offsets[b->d.n + 1] = nf + 1;
  if (slot + 1 > b->d.num_slots) b->d.num_slots = slot + 1;
  return FL_OK;
}

/* Parse one NUL-terminated line into a new sample. */
static fl_status parse_line(builder *b, const char *line) {
  const char *p = line, *e;
  double label;

  while (is_ws(*p)) p++;
  if (*p == '\0' || *p == '#') return FL_OK;
  if (parse_float(p, &label, &e)) return perr(b, line, p, "expected a numeric label");
  if (b->d.n + 1 >= b->cap_n) {
    size_t cap = b->cap_n ? 2 * b->cap_n : 1024;
    float *lab = realloc(b->d.labels, cap * sizeof *lab);
    if (lab) b->d.labels = lab;
    size_t *off = realloc(b->d.offsets, (cap + 1) * sizeof *off);
    if (off) b->d.offsets = off;
    if (!lab || !off) return FL_ERR(FL_ENOMEM, "%s: out of memory at line %zu", b->name, b->lineno);
    if (b->cap_n == 0) b->d.offsets[0] = 0;
    b->cap_n = cap;
  }
  b->d.labels[b->d.n] = (float)label;
  b->d.offsets[b->d.n + 1] = b->d.offsets[b->d.n];
  p = e;
  for (;;) {
    uint64_t a, c;
    double val = 1.0;
    uint32_t slot = 0;
    uint64_t id;
    while (is_ws(*p)) p++;
    if (*p == '\0') break;
    const char *tok = p;
    if (parse_u64(p, &a, &e) || *e != ':')
      return perr(b, line, tok,
                  b->fmt == FL_SPARSE_SLOT ? "expected slot:feasign" : "expected idx:val");
    p = e + 1;
    if (b->fmt == FL_SPARSE_SLOT) {
      if (parse_u64(p, &c, &e) || (*e && !is_ws(*e)))
        return perr(b, line, p, "expected an unsigned integer feasign after 'slot:'");
      if (a >= FL_SPARSE_MAX_SLOTS) return perr(b, line, tok, "slot number too large");
      slot = (uint32_t)a;
      id = c;
    } else {
      /* idx:val, or field:idx:val when the second part is an integer
       * followed by ':' */
      if (parse_u64(p, &c, &e) == 0 && *e == ':') {
        if (a >= FL_SPARSE_MAX_SLOTS) return perr(b, line, tok, "field number too large");
        slot = (uint32_t)a;
        id = c;
        p = e + 1;
      } else {
        id = a;
      }
      if (parse_float(p, &val, &e)) return perr(b, line, p, "expected a finite float value");
    }
    p = e;
    FL_TRY(push_feature(b, slot, id, (float)val));
  }
  b->d.n++;
  return FL_OK;
}

static fl_status finish(builder *b, fl_sparse_dataset *out) {
  if (b->d.n == 0) {
    fl_sparse_dataset_free(&b->d);
    return FL_ERR(FL_EINVAL, "%s: no samples", b->name);
  }
  *out = b->d;
  return FL_OK;
}

void fl_sparse_dataset_free(fl_sparse_dataset *d) {
  if (!d) return;
  free(d->labels);
  free(d->offsets);
  free(d->feats);
  free(d->prob);
  memset(d, 0, sizeof *d);
}

fl_status fl_sparse_load(const char *path, fl_sparse_format fmt, fl_sparse_dataset *out) {
  builder b = {.name = path, .fmt = fmt};
  char *line = NULL;
  size_t cap = 4096;
  fl_status st = FL_OK;
  gzFile f;

  memset(out, 0, sizeof *out);
  if (!path) return FL_ERR(FL_EINVAL, "sparse: missing file name");
  if (fmt != FL_SPARSE_LIBSVM && fmt != FL_SPARSE_SLOT)
    return FL_ERR(FL_EINVAL, "%s: unknown sparse format %d", path, (int)fmt);
  errno = 0;
  f = gzopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) return FL_ERR(FL_ENOTFOUND, "%s: no such file", path);
    return FL_ERR(FL_EIO, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
  }
  gzbuffer(f, 1u << 17);
  line = malloc(cap);
  if (!line) {
    st = FL_ERR(FL_ENOMEM, "%s: out of memory", path);
    goto done;
  }
  for (;;) {
    size_t len = 0;
    int eof = 0;
    /* one whole line, growing the buffer for long ones */
    for (;;) {
      /* gzgets does not say how many bytes it read; a sentinel fill shows
       * where its terminator went, so a NUL inside the line is caught. */
      memset(line + len, 0x7f, cap - len);
      if (!gzgets(f, line + len, (int)(cap - len))) {
        int errnum;
        const char *msg = gzerror(f, &errnum);
        if (errnum != Z_OK && errnum != Z_BUF_ERROR) {
          st = errnum == Z_ERRNO
                   ? FL_ERR(FL_EIO, "%s: read error near line %zu: %s", path, b.lineno + 1,
                            strerror(errno))
                   : FL_ERR(FL_EPROTO, "%s: corrupt gzip data near line %zu: %s", path,
                            b.lineno + 1, msg);
          goto done;
        }
        if (errnum == Z_BUF_ERROR) {
          st = FL_ERR(FL_EPROTO, "%s: truncated gzip stream at line %zu", path, b.lineno + 1);
          goto done;
        }
        eof = 1;
        break;
      }
      size_t end = cap - 1;
      while (end > len && line[end] == 0x7f) end--; /* line[end]: the terminator */
      if (memchr(line + len, '\0', end - len)) {
        st = FL_ERR(FL_EPROTO, "%s:%zu: NUL byte in line", path, b.lineno + 1);
        goto done;
      }
      len = end;
      if (len > 0 && line[len - 1] == '\n') break;
      if (len + 1 < cap) { /* last line without a newline */
        if (gzeof(f)) break;
        continue;
      }
      if (cap >= MAX_LINE) {
        st = FL_ERR(FL_EPROTO, "%s:%zu: line longer than %u bytes", path, b.lineno + 1, MAX_LINE);
        goto done;
      }
      char *bigger = realloc(line, cap * 2);
      if (!bigger) {
        st = FL_ERR(FL_ENOMEM, "%s: out of memory at line %zu", path, b.lineno + 1);
        goto done;
      }
      line = bigger;
      cap *= 2;
    }
    if (eof && len == 0) break;
    line[len] = '\0';
    b.lineno++;
    st = parse_line(&b, line);
    if (st != FL_OK) goto done;
    if (eof) break;
  }
done:
  free(line);
  gzclose_r(f);
  if (st != FL_OK) {
    fl_sparse_dataset_free(&b.d);
    return st;
  }
  return finish(&b, out);
}

fl_status fl_sparse_load_mem(const char *text, size_t len, const char *name, fl_sparse_format fmt,
                             fl_sparse_dataset *out) {
  builder b = {.name = name ? name : "<memory>", .fmt = fmt};
  char *line = NULL;
  size_t pos = 0;
  fl_status st = FL_OK;

  memset(out, 0, sizeof *out);
  if (!text && len) return FL_ERR(FL_EINVAL, "%s: NULL text", b.name);
  if (fmt != FL_SPARSE_LIBSVM && fmt != FL_SPARSE_SLOT)
    return FL_ERR(FL_EINVAL, "%s: unknown sparse format %d", b.name, (int)fmt);
  while (pos < len) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
    b.lineno++;
    if (n >= MAX_LINE) {
      st = FL_ERR(FL_EPROTO, "%s:%zu: line longer than %u bytes", b.name, b.lineno, MAX_LINE);
      break;
    }
    if (memchr(text + pos, '\0', n)) {
      st = FL_ERR(FL_EPROTO, "%s:%zu: NUL byte in line", b.name, b.lineno);
      break;
    }
    char *l = realloc(line, n + 1);
    if (!l) {
      st = FL_ERR(FL_ENOMEM, "%s: out of memory at line %zu", b.name, b.lineno);
      break;
    }
    line = l;
    memcpy(line, text + pos, n);
    line[n] = '\0';
    st = parse_line(&b, line);
    if (st != FL_OK) break;
    pos += n + 1;
  }
  free(line);
  if (st != FL_OK) {
    fl_sparse_dataset_free(&b.d);
    return st;
  }
  return finish(&b, out);
}
