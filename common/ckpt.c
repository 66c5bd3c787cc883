/* ckpt.c - checkpoint files: writer (streaming to a temporary file, or into
 * memory), verifying reader, and the ckpt-<step>.flc directory helpers.
 * The layout and the atomicity rules are in fl_ckpt.h. */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "fl_ckpt.h"
#include "fl_log.h"

static const unsigned char k_magic[8] = {'F', 'L', 'C', 'K', 'P', 'T', '\r', '\n'};
static const unsigned char k_end[8] = {'F', 'L', 'C', 'K', 'E', 'N', 'D', '\n'};
static const unsigned char k_tag[4] = {'R', 'E', 'C', '1'};
#define HEADER_SIZE 16u
#define TRAILER_SIZE 32u
#define REC_FIXED 8u /* tag, name_len, dtype, ndim */

size_t fl_ckpt_dtype_size(fl_ckpt_dtype d) {
  switch (d) {
  case FL_CKPT_F32: return 4;
  case FL_CKPT_F16: return 2;
  case FL_CKPT_BF16: return 2;
  case FL_CKPT_F64: return 8;
  case FL_CKPT_I32: return 4;
  case FL_CKPT_I64: return 8;
  case FL_CKPT_U8: return 1;
  case FL_CKPT_U64: return 8;
  }
  return 0;
}

const char *fl_ckpt_dtype_name(fl_ckpt_dtype d) {
  switch (d) {
  case FL_CKPT_F32: return "f32";
  case FL_CKPT_F16: return "f16";
  case FL_CKPT_BF16: return "bf16";
  case FL_CKPT_F64: return "f64";
  case FL_CKPT_I32: return "i32";
  case FL_CKPT_I64: return "i64";
  case FL_CKPT_U8: return "u8";
  case FL_CKPT_U64: return "u64";
  }
  return "?";
}

/* ------------------------------------------------------------ little endian */

static void le16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static void le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t rd64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static uint32_t crc_update(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n) {
    uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = (uint32_t)crc32(crc, b, chunk);
    b += chunk;
    n -= chunk;
  }
  return crc;
}

/* ------------------------------------------------------------ name sets */

/* Open-addressing set of indices into a names array (FNV-1a hashing). */
typedef struct nameset {
  size_t *slot; /* SIZE_MAX = empty */
  size_t cap;   /* power of two */
  size_t n;
} nameset;

static uint64_t fnv(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static size_t ns_find(const nameset *ns, const char *const *names, const char *key) {
  if (!ns->cap) return SIZE_MAX;
  for (size_t i = fnv(key) & (ns->cap - 1);; i = (i + 1) & (ns->cap - 1)) {
    if (ns->slot[i] == SIZE_MAX) return SIZE_MAX;
    if (!strcmp(names[ns->slot[i]], key)) return ns->slot[i];
  }
}

static int ns_put(nameset *ns, const char *const *names, size_t idx) {
  if (2 * (ns->n + 1) > ns->cap) {
    size_t nc = ns->cap ? 2 * ns->cap : 64;
    size_t *s = malloc(nc * sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < nc; i++) s[i] = SIZE_MAX;
    for (size_t i = 0; i < ns->cap; i++) {
      if (ns->slot[i] == SIZE_MAX) continue;
      size_t j = fnv(names[ns->slot[i]]) & (nc - 1);
      while (s[j] != SIZE_MAX) j = (j + 1) & (nc - 1);
      s[j] = ns->slot[i];
    }
    free(ns->slot);
    ns->slot = s;
    ns->cap = nc;
  }
  size_t j = fnv(names[idx]) & (ns->cap - 1);
  while (ns->slot[j] != SIZE_MAX) j = (j + 1) & (ns->cap - 1);
  ns->slot[j] = idx;
  ns->n++;
  return 0;
}

/* ------------------------------------------------------------ writer */

struct fl_ckpt_writer {
  int is_mem;
  FILE *f;
  char *path; /* destination */
  char *tmp;  /* temporary file beside it */
  unsigned char *mem;
  size_t mem_len, mem_cap;
  uint32_t crc;
  uint64_t off;
  uint64_t count;
  fl_status err;
  char **names;
  size_t names_cap;
  nameset ns;
};

static const char *wname(const fl_ckpt_writer *w) { return w->is_mem ? "<memory checkpoint>" : w->path; }

static fl_status wbytes(fl_ckpt_writer *w, const void *p, size_t n) {
  if (w->err != FL_OK) return w->err;
  if (!n) return FL_OK;
  w->crc = crc_update(w->crc, p, n);
  if (w->is_mem) {
    if (w->mem_len + n > w->mem_cap) {
      size_t nc = w->mem_cap ? w->mem_cap : 4096;
      while (nc < w->mem_len + n) nc *= 2;
      unsigned char *m = realloc(w->mem, nc);
      if (!m) return w->err = FL_ERR(FL_ENOMEM, "%s: out of memory (%zu bytes)", wname(w), nc);
      w->mem = m;
      w->mem_cap = nc;
    }
    memcpy(w->mem + w->mem_len, p, n);
    w->mem_len += n;
  } else if (fwrite(p, 1, n, w->f) != n) {
    return w->err = FL_ERR(FL_EIO, "checkpoint %s: write failed at offset %llu: %s", w->tmp,
                           (unsigned long long)w->off, strerror(errno));
  }
  w->off += n;
  return FL_OK;
}

static fl_status writer_new(int is_mem, fl_ckpt_writer **out) {
  fl_ckpt_writer *w = calloc(1, sizeof *w);
  if (!w) return FL_ERR(FL_ENOMEM, "checkpoint writer: out of memory");
  w->is_mem = is_mem;
  w->crc = (uint32_t)crc32(0L, Z_NULL, 0);
  *out = w;
  return FL_OK;
}

static void writer_free(fl_ckpt_writer *w) {
  for (size_t i = 0; i < w->count; i++) free(w->names[i]);
  free(w->names);
  free(w->ns.slot);
  free(w->mem);
  free(w->path);
  free(w->tmp);
  free(w);
}

static fl_status write_header(fl_ckpt_writer *w) {
  unsigned char h[HEADER_SIZE];
  memcpy(h, k_magic, 8);
  le32(h + 8, FL_CKPT_VERSION);
  le32(h + 12, HEADER_SIZE);
  return wbytes(w, h, sizeof h);
}

fl_status fl_ckpt_writer_open_mem(fl_ckpt_writer **out) {
  fl_ckpt_writer *w;
  FL_TRY(writer_new(1, &w));
  fl_status st = write_header(w);
  if (st != FL_OK) {
    writer_free(w);
    return st;
  }
  *out = w;
  return FL_OK;
}

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strdup(".");
  if (slash == path) return strdup("/");
  return strndup(path, (size_t)(slash - path));
}

fl_status fl_ckpt_writer_open(const char *path, fl_ckpt_writer **out) {
  static unsigned counter;
  fl_ckpt_writer *w;
  fl_status st;
  if (!path || !*path || !out) return FL_ERR(FL_EINVAL, "fl_ckpt_writer_open: no path");
  FL_TRY(writer_new(0, &w));
  const char *slash = strrchr(path, '/');
  size_t dlen = slash ? (size_t)(slash - path + 1) : 0;
  size_t cap = strlen(path) + 64;
  w->path = strdup(path);
  w->tmp = malloc(cap);
  if (!w->path || !w->tmp) {
    st = FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", path);
    goto fail;
  }
  snprintf(w->tmp, cap, "%.*s.%s.tmp.%ld.%u", (int)dlen, path, path + dlen, (long)getpid(),
           __atomic_fetch_add(&counter, 1u, __ATOMIC_RELAXED));
  int fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    st = FL_ERR(FL_EIO, "checkpoint %s: cannot create %s: %s", path, w->tmp, strerror(errno));
    goto fail;
  }
  w->f = fdopen(fd, "wb");
  if (!w->f) {
    st = FL_ERR(FL_EIO, "checkpoint %s: fdopen: %s", path, strerror(errno));
    close(fd);
    unlink(w->tmp);
    goto fail;
  }
  setvbuf(w->f, NULL, _IOFBF, 1 << 20);
  st = write_header(w);
  if (st != FL_OK) {
    fl_ckpt_writer_abort(w);
    return st;
  }
  *out = w;
  return FL_OK;
fail:
  writer_free(w);
  return st;
}

fl_status fl_ckpt_put(fl_ckpt_writer *w, const char *name, fl_ckpt_dtype dtype, int ndim,
                      const int64_t *shape, const void *data) {
  unsigned char hdr[REC_FIXED + 8 * FL_CKPT_MAX_DIMS + 8];
  static const unsigned char zeros[8] = {0};
  if (!w) return FL_ERR(FL_EINVAL, "fl_ckpt_put: NULL writer");
  if (w->err != FL_OK) return w->err;
  size_t nlen = name ? strlen(name) : 0;
  size_t esz = fl_ckpt_dtype_size(dtype);
  if (nlen == 0 || nlen > FL_CKPT_NAME_MAX)
    return w->err = FL_ERR(FL_EINVAL, "%s: record name must be 1..%d bytes, got %zu", wname(w),
                           FL_CKPT_NAME_MAX, nlen);
  if (!esz) return w->err = FL_ERR(FL_EINVAL, "%s: record %s: unknown dtype %d", wname(w), name,
                                   (int)dtype);
  if (ndim < 0 || ndim > FL_CKPT_MAX_DIMS || (ndim > 0 && !shape))
    return w->err = FL_ERR(FL_EINVAL, "%s: record %s: ndim %d out of range [0, %d]", wname(w),
                           name, ndim, FL_CKPT_MAX_DIMS);
  uint64_t count = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || (shape[i] > 0 && count > UINT64_MAX / (uint64_t)shape[i]))
      return w->err = FL_ERR(FL_EINVAL, "%s: record %s: bad shape[%d] = %lld", wname(w), name, i,
                             (long long)shape[i]);
    count *= (uint64_t)shape[i];
  }
  if (count > SIZE_MAX / esz)
    return w->err = FL_ERR(FL_EINVAL, "%s: record %s: too large", wname(w), name);
  size_t nbytes = (size_t)count * esz;
  if (nbytes && !data)
    return w->err = FL_ERR(FL_EINVAL, "%s: record %s: NULL data", wname(w), name);
  if (ns_find(&w->ns, (const char *const *)w->names, name) != SIZE_MAX)
    return w->err = FL_ERR(FL_EINVAL, "%s: record %s written twice", wname(w), name);

  if (w->count == w->names_cap) {
    size_t nc = w->names_cap ? 2 * w->names_cap : 64;
    char **nn = realloc(w->names, nc * sizeof *nn);
    if (!nn) return w->err = FL_ERR(FL_ENOMEM, "%s: out of memory", wname(w));
    w->names = nn;
    w->names_cap = nc;
  }
  w->names[w->count] = strdup(name);
  if (!w->names[w->count] || ns_put(&w->ns, (const char *const *)w->names, w->count) != 0) {
    free(w->names[w->count]);
    return w->err = FL_ERR(FL_ENOMEM, "%s: out of memory", wname(w));
  }
  w->count++;

  memcpy(hdr, k_tag, 4);
  le16(hdr + 4, (uint16_t)nlen);
  hdr[6] = (unsigned char)dtype;
  hdr[7] = (unsigned char)ndim;
  FL_TRY(wbytes(w, hdr, REC_FIXED));
  FL_TRY(wbytes(w, name, nlen));
  for (int i = 0; i < ndim; i++) le64(hdr + 8 * i, (uint64_t)shape[i]);
  le64(hdr + 8 * ndim, (uint64_t)nbytes);
  FL_TRY(wbytes(w, hdr, 8 * (size_t)ndim + 8));
  FL_TRY(wbytes(w, zeros, (size_t)((8 - (w->off & 7)) & 7)));
  return wbytes(w, data, nbytes);
}

fl_status fl_ckpt_put_i64(fl_ckpt_writer *w, const char *name, int64_t value) {
  unsigned char b[8];
  le64(b, (uint64_t)value);
  return fl_ckpt_put(w, name, FL_CKPT_I64, 0, NULL, b);
}

fl_status fl_ckpt_put_blob(fl_ckpt_writer *w, const char *name, const void *data, size_t n) {
  int64_t shape[1] = {(int64_t)n};
  return fl_ckpt_put(w, name, FL_CKPT_U8, 1, shape, data);
}

static fl_status write_trailer(fl_ckpt_writer *w) {
  unsigned char t[TRAILER_SIZE];
  memcpy(t, k_end, 8);
  le64(t + 8, w->count);
  le64(t + 16, w->off);
  FL_TRY(wbytes(w, t, 24));
  le32(t + 24, w->crc);
  le32(t + 28, 0);
  uint32_t keep = w->crc;
  fl_status st = wbytes(w, t + 24, 8);
  w->crc = keep;
  return st;
}

void fl_ckpt_writer_abort(fl_ckpt_writer *w) {
  if (!w) return;
  if (w->f) {
    fclose(w->f);
    unlink(w->tmp);
  }
  writer_free(w);
}

fl_status fl_ckpt_writer_commit_mem(fl_ckpt_writer *w, void **buf, size_t *len) {
  if (!w || !w->is_mem || !buf || !len) {
    fl_ckpt_writer_abort(w);
    return FL_ERR(FL_EINVAL, "fl_ckpt_writer_commit_mem: not a memory writer");
  }
  fl_status st = write_trailer(w);
  if (st == FL_OK) {
    *buf = w->mem;
    *len = w->mem_len;
    w->mem = NULL;
  }
  writer_free(w);
  return st;
}

static fl_status fsync_dir(const char *path) {
  char *dir = dir_of(path);
  if (!dir) return FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  fl_status st = FL_OK;
  if (fd < 0 || fsync(fd) != 0)
    st = FL_ERR(FL_EIO, "checkpoint %s: fsync of directory %s: %s", path, dir, strerror(errno));
  if (fd >= 0) close(fd);
  free(dir);
  return st;
}

fl_status fl_ckpt_writer_commit_as(fl_ckpt_writer *w, const char *path) {
  const char *a, *b;
  size_t da, db;
  char *p;
  if (!w || w->is_mem || !path) {
    fl_ckpt_writer_abort(w);
    return FL_ERR(FL_EINVAL, "fl_ckpt_writer_commit_as: not a file writer, or no path");
  }
  /* The temporary is renamed: the destination must be in its directory. */
  a = strrchr(w->path, '/');
  b = strrchr(path, '/');
  da = a ? (size_t)(a - w->path) + 1 : 0;
  db = b ? (size_t)(b - path) + 1 : 0;
  if (da != db || strncmp(w->path, path, da)) {
    fl_status st = FL_ERR(FL_EINVAL, "checkpoint %s: cannot commit as %s (another directory)",
                          w->path, path);
    fl_ckpt_writer_abort(w);
    return st;
  }
  if (!(p = strdup(path))) {
    fl_ckpt_writer_abort(w);
    return FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", path);
  }
  free(w->path);
  w->path = p;
  return fl_ckpt_writer_commit(w);
}

fl_status fl_ckpt_writer_commit(fl_ckpt_writer *w) {
  fl_status st;
  if (!w || w->is_mem) {
    fl_ckpt_writer_abort(w);
    return FL_ERR(FL_EINVAL, "fl_ckpt_writer_commit: not a file writer");
  }
  st = write_trailer(w);
  if (st != FL_OK) goto fail;
  if (fflush(w->f) != 0) {
    st = FL_ERR(FL_EIO, "checkpoint %s: flush failed: %s", w->tmp, strerror(errno));
    goto fail;
  }
  if (fsync(fileno(w->f)) != 0) {
    st = FL_ERR(FL_EIO, "checkpoint %s: fsync failed: %s", w->tmp, strerror(errno));
    goto fail;
  }
  FILE *f = w->f;
  w->f = NULL;
  if (fclose(f) != 0) {
    st = FL_ERR(FL_EIO, "checkpoint %s: close failed: %s", w->tmp, strerror(errno));
    unlink(w->tmp);
    writer_free(w);
    return st;
  }
  if (rename(w->tmp, w->path) != 0) {
    st = FL_ERR(FL_EIO, "checkpoint %s: rename from %s failed: %s", w->path, w->tmp,
                strerror(errno));
    unlink(w->tmp);
    writer_free(w);
    return st;
  }
  st = fsync_dir(w->path);
  writer_free(w);
  return st;
fail:
  fl_ckpt_writer_abort(w);
  return st;
}

/* ------------------------------------------------------------ reader */

struct fl_ckpt {
  char *name;
  unsigned char *buf;
  size_t len;
  fl_ckpt_record *rec;
  const char **names;
  char *name_pool;
  size_t count;
  nameset ns;
};

void fl_ckpt_free(fl_ckpt *c) {
  if (!c) return;
  free(c->name);
  free(c->buf);
  free(c->rec);
  free(c->names);
  free(c->name_pool);
  free(c->ns.slot);
  free(c);
}

#define CORRUPT(off, ...)                                                           \
  do {                                                                              \
    char m_[256];                                                                   \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                           \
    FL_LOGE("checkpoint %s: corrupt at offset %llu: %s", c->name,                  \
            (unsigned long long)(off), m_);                                         \
    return FL_ECORRUPT;                                                             \
  } while (0)

/* Verify c->buf[0..len) and index its records. */
static fl_status parse(fl_ckpt *c) {
  const unsigned char *b = c->buf;
  size_t len = c->len;
  if (len < HEADER_SIZE + TRAILER_SIZE)
    CORRUPT(len, "truncated: %zu bytes, a checkpoint has at least %u", len,
            HEADER_SIZE + TRAILER_SIZE);
  if (memcmp(b, k_magic, 8)) CORRUPT(0, "bad magic (not a Flotilla checkpoint)");
  if (rd32(b + 8) != FL_CKPT_VERSION)
    CORRUPT(8, "unsupported version %u (this build reads %d)", rd32(b + 8), FL_CKPT_VERSION);
  if (rd32(b + 12) != HEADER_SIZE) CORRUPT(12, "bad header size %u", rd32(b + 12));
  size_t toff = len - TRAILER_SIZE;
  const unsigned char *t = b + toff;
  if (memcmp(t, k_end, 8)) CORRUPT(toff, "no trailer (truncated or overwritten)");
  if (rd64(t + 16) != toff)
    CORRUPT(toff + 16, "trailer says the records end at %llu, the file has them end at %zu",
            (unsigned long long)rd64(t + 16), toff);
  if (rd32(t + 28) != 0) CORRUPT(toff + 28, "reserved trailer field is not zero");
  uint32_t want = rd32(t + 24);
  uint32_t got = crc_update((uint32_t)crc32(0L, Z_NULL, 0), b, toff + 24);
  if (want != got) CORRUPT(toff + 24, "CRC-32 mismatch (stored %08x, computed %08x)", want, got);
  uint64_t count = rd64(t + 8);
  if (count > toff / REC_FIXED) CORRUPT(toff + 8, "record count %llu too large",
                                        (unsigned long long)count);

  c->rec = calloc(count ? count : 1, sizeof *c->rec);
  c->names = calloc(count ? count : 1, sizeof *c->names);
  c->name_pool = malloc(toff); /* names + NULs never exceed the records' bytes */
  if (!c->rec || !c->names || !c->name_pool)
    return FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", c->name);
  size_t pool = 0, pos = HEADER_SIZE;
  for (uint64_t i = 0; i < count; i++) {
    fl_ckpt_record *r = &c->rec[i];
    size_t start = pos;
    if (toff - pos < REC_FIXED) CORRUPT(pos, "record %llu runs past the end", (unsigned long long)i);
    if (memcmp(b + pos, k_tag, 4)) CORRUPT(pos, "bad record tag");
    size_t nlen = rd16(b + pos + 4);
    fl_ckpt_dtype dt = (fl_ckpt_dtype)b[pos + 6];
    int ndim = b[pos + 7];
    size_t esz = fl_ckpt_dtype_size(dt);
    if (nlen == 0 || nlen > FL_CKPT_NAME_MAX) CORRUPT(pos + 4, "bad name length %zu", nlen);
    if (!esz) CORRUPT(pos + 6, "unknown dtype %d", (int)b[pos + 6]);
    if (ndim > FL_CKPT_MAX_DIMS) CORRUPT(pos + 7, "ndim %d > %d", ndim, FL_CKPT_MAX_DIMS);
    pos += REC_FIXED;
    if (toff - pos < nlen + 8 * (size_t)ndim + 8) CORRUPT(pos, "record header runs past the end");
    if (memchr(b + pos, '\0', nlen)) CORRUPT(pos, "NUL byte in a record name");
    memcpy(c->name_pool + pool, b + pos, nlen);
    c->name_pool[pool + nlen] = '\0';
    r->name = c->name_pool + pool;
    pool += nlen + 1;
    pos += nlen;
    uint64_t elems = 1;
    for (int d = 0; d < ndim; d++, pos += 8) {
      uint64_t s = rd64(b + pos);
      if (s > (uint64_t)INT64_MAX || (s && elems > UINT64_MAX / s))
        CORRUPT(pos, "bad shape[%d] of %s", d, r->name);
      elems *= s;
      r->shape[d] = (int64_t)s;
    }
    uint64_t nbytes = rd64(b + pos);
    if (elems > UINT64_MAX / esz || nbytes != elems * esz)
      CORRUPT(pos, "record %s: %llu bytes do not match its shape", r->name,
              (unsigned long long)nbytes);
    pos += 8;
    size_t pad = (8 - (pos & 7)) & 7;
    if (toff - pos < pad) CORRUPT(pos, "record %s: padding runs past the end", r->name);
    for (size_t k = 0; k < pad; k++)
      if (b[pos + k]) CORRUPT(pos + k, "record %s: non-zero padding", r->name);
    pos += pad;
    if ((uint64_t)(toff - pos) < nbytes)
      CORRUPT(pos, "record %s: data (%llu bytes) runs past the end", r->name,
              (unsigned long long)nbytes);
    r->dtype = dt;
    r->ndim = ndim;
    r->nbytes = (size_t)nbytes;
    r->data = b + pos;
    pos += (size_t)nbytes;
    c->names[i] = r->name;
    if (ns_find(&c->ns, c->names, r->name) != SIZE_MAX)
      CORRUPT(start, "record %s appears twice", r->name);
    if (ns_put(&c->ns, c->names, (size_t)i) != 0)
      return FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", c->name);
    c->count++;
  }
  if (pos != toff) CORRUPT(pos, "%zu stray bytes after the last record", toff - pos);
  return FL_OK;
}

static fl_status load_owned(unsigned char *buf, size_t len, const char *name, fl_ckpt **out) {
  fl_ckpt *c = calloc(1, sizeof *c);
  if (!c || !(c->name = strdup(name))) {
    free(c);
    free(buf);
    return FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory", name);
  }
  c->buf = buf;
  c->len = len;
  fl_status st = parse(c);
  if (st != FL_OK) {
    fl_ckpt_free(c);
    return st;
  }
  *out = c;
  return FL_OK;
}

fl_status fl_ckpt_load_mem(const void *buf, size_t len, const char *name, fl_ckpt **out) {
  if (!out || (!buf && len)) return FL_ERR(FL_EINVAL, "fl_ckpt_load_mem: NULL argument");
  unsigned char *copy = malloc(len ? len : 1);
  if (!copy) return FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory (%zu bytes)", name, len);
  if (len) memcpy(copy, buf, len);
  return load_owned(copy, len, name ? name : "<memory>", out);
}

fl_status fl_ckpt_load(const char *path, fl_ckpt **out) {
  struct stat st;
  if (!path || !out) return FL_ERR(FL_EINVAL, "fl_ckpt_load: NULL argument");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FL_ERR(FL_EIO, "checkpoint %s: cannot open: %s", path, strerror(errno));
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return FL_ERR(FL_EIO, "checkpoint %s: fstat: %s", path, strerror(e));
  }
  size_t len = (size_t)st.st_size;
  unsigned char *buf = malloc(len ? len : 1);
  if (!buf) {
    close(fd);
    return FL_ERR(FL_ENOMEM, "checkpoint %s: out of memory (%zu bytes)", path, len);
  }
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      free(buf);
      return FL_ERR(FL_EIO, "checkpoint %s: read at offset %zu: %s", path, got, strerror(e));
    }
    if (n == 0) break; /* shrank under us: parse what is there, it will not verify */
    got += (size_t)n;
  }
  close(fd);
  return load_owned(buf, got, path, out);
}

size_t fl_ckpt_count(const fl_ckpt *c) { return c->count; }

fl_status fl_ckpt_record_at(const fl_ckpt *c, size_t i, fl_ckpt_record *out) {
  if (i >= c->count)
    return FL_ERR(FL_EINVAL, "checkpoint %s: record index %zu >= %zu", c->name, i, c->count);
  *out = c->rec[i];
  return FL_OK;
}

fl_status fl_ckpt_find(const fl_ckpt *c, const char *name, fl_ckpt_record *out) {
  size_t i = ns_find(&c->ns, c->names, name);
  if (i == SIZE_MAX) return FL_ENOTFOUND;
  if (out) *out = c->rec[i];
  return FL_OK;
}

fl_status fl_ckpt_get_i64(const fl_ckpt *c, const char *name, int64_t *value) {
  fl_ckpt_record r;
  FL_TRY(fl_ckpt_find(c, name, &r));
  if (r.dtype != FL_CKPT_I64 || r.ndim != 0)
    return FL_ERR(FL_EINVAL, "checkpoint %s: record %s is %s with %d dims, expected a 0-d i64",
                  c->name, name, fl_ckpt_dtype_name(r.dtype), r.ndim);
  *value = (int64_t)rd64(r.data);
  return FL_OK;
}

static void shape_str(char *out, size_t cap, fl_ckpt_dtype dt, int ndim, const int64_t *shape) {
  size_t len = (size_t)snprintf(out, cap, "%s[", fl_ckpt_dtype_name(dt));
  for (int i = 0; i < ndim && len < cap; i++)
    len += (size_t)snprintf(out + len, cap - len, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (len < cap) snprintf(out + len, cap - len, "]");
}

fl_status fl_ckpt_read(const fl_ckpt *c, const char *name, fl_ckpt_dtype dtype, int ndim,
                       const int64_t *shape, void *dst) {
  fl_ckpt_record r;
  if (fl_ckpt_find(c, name, &r) != FL_OK)
    return FL_ERR(FL_ENOTFOUND, "checkpoint %s: no record %s", c->name, name);
  int same = r.dtype == dtype && r.ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = r.shape[i] == shape[i];
  if (!same) {
    char a[160], b[160];
    shape_str(a, sizeof a, r.dtype, r.ndim, r.shape);
    shape_str(b, sizeof b, dtype, ndim < 0 ? 0 : ndim > FL_CKPT_MAX_DIMS ? FL_CKPT_MAX_DIMS : ndim,
              shape);
    return FL_ERR(FL_EINVAL, "checkpoint %s: record %s is %s, expected %s", c->name, name, a, b);
  }
  if (r.nbytes) memcpy(dst, r.data, r.nbytes);
  return FL_OK;
}

/* ------------------------------------------------------------ directories */

fl_status fl_ckpt_dir_path(const char *dir, int64_t step, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/ckpt-%lld.flc", dir, (long long)step);
  if (n < 0 || (size_t)n >= cap)
    return FL_ERR(FL_EINVAL, "checkpoint dir %s: path too long", dir);
  return FL_OK;
}

static fl_status mkdir_p(const char *dir) {
  char *p = strdup(dir);
  if (!p) return FL_ERR(FL_ENOMEM, "checkpoint dir %s: out of memory", dir);
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char keep = *s;
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      fl_status st = FL_ERR(FL_EIO, "checkpoint dir %s: mkdir %s: %s", dir, p, strerror(errno));
      free(p);
      return st;
    }
    *s = keep;
    if (!keep) break;
  }
  free(p);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return FL_ERR(FL_EIO, "checkpoint dir %s: not a directory", dir);
  return FL_OK;
}

fl_status fl_ckpt_dir_begin(const char *dir, int64_t step, fl_ckpt_writer **out) {
  char path[4096];
  if (step < 0) return FL_ERR(FL_EINVAL, "checkpoint dir %s: negative step %lld", dir,
                              (long long)step);
  FL_TRY(fl_ckpt_dir_path(dir, step, path, sizeof path));
  FL_TRY(mkdir_p(dir));
  return fl_ckpt_writer_open(path, out);
}

fl_status fl_ckpt_dir_begin_named(const char *dir, const char *name, fl_ckpt_writer **out) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
    return FL_ERR(FL_EINVAL, "checkpoint dir %s: path of %s too long", dir, name);
  FL_TRY(mkdir_p(dir));
  return fl_ckpt_writer_open(path, out);
}

/* Step of a "ckpt-<digits>.flc" name, or -1. */
static int64_t step_of(const char *name) {
  if (strncmp(name, "ckpt-", 5)) return -1;
  const char *d = name + 5;
  size_t nd = strspn(d, "0123456789");
  if (nd == 0 || nd > 18 || strcmp(d + nd, ".flc")) return -1;
  return strtoll(d, NULL, 10);
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x < y) - (x > y);
}

/* All steps, newest first, into a malloc'd array (*all, caller frees). */
static fl_status list_all(const char *dir, int64_t **all, size_t *n) {
  *all = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return FL_OK;
    return FL_ERR(FL_EIO, "checkpoint dir %s: %s", dir, strerror(errno));
  }
  size_t cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int64_t s = step_of(e->d_name);
    if (s < 0) continue;
    if (*n == cap) {
      size_t nc = cap ? 2 * cap : 16;
      int64_t *na = realloc(*all, nc * sizeof *na);
      if (!na) {
        closedir(d);
        free(*all);
        *all = NULL;
        return FL_ERR(FL_ENOMEM, "checkpoint dir %s: out of memory", dir);
      }
      *all = na;
      cap = nc;
    }
    (*all)[(*n)++] = s;
  }
  closedir(d);
  if (*n) qsort(*all, *n, sizeof **all, cmp_desc);
  return FL_OK;
}

fl_status fl_ckpt_dir_list(const char *dir, int64_t *steps, size_t cap, size_t *n) {
  int64_t *all;
  FL_TRY(list_all(dir, &all, n));
  for (size_t i = 0; i < *n && i < cap; i++) steps[i] = all[i];
  free(all);
  return FL_OK;
}

fl_status fl_ckpt_dir_load_latest(const char *dir, fl_ckpt **out, int64_t *step) {
  int64_t *all;
  size_t n;
  char path[4096];
  int corrupt = 0, ioerr = 0;
  FL_TRY(list_all(dir, &all, &n));
  for (size_t i = 0; i < n; i++) {
    fl_status st = fl_ckpt_dir_path(dir, all[i], path, sizeof path);
    if (st == FL_OK) st = fl_ckpt_load(path, out);
    if (st == FL_OK) {
      if (step) *step = all[i];
      if (corrupt || ioerr) FL_LOGW("checkpoint dir %s: resuming from step %lld", dir,
                                    (long long)all[i]);
      free(all);
      return FL_OK;
    }
    if (st == FL_ENOMEM) {
      free(all);
      return st;
    }
    if (st == FL_ECORRUPT) corrupt++;
    else ioerr++;
    FL_LOGW("checkpoint dir %s: skipping %s (%s)", dir, path, fl_strerror(st));
  }
  free(all);
  if (corrupt) return FL_ERR(FL_ECORRUPT, "checkpoint dir %s: no valid checkpoint among %zu",
                             dir, n);
  if (ioerr) return FL_ERR(FL_EIO, "checkpoint dir %s: no readable checkpoint among %zu", dir, n);
  return FL_ENOTFOUND;
}

/* The writer's pid of a temporary name ".<name>.tmp.<pid>.<n>", or -1. */
static long tmp_writer(const char *name) {
  const char *t = strstr(name, ".tmp.");
  if (name[0] != '.' || !t) return -1;
  const char *d = t + 5;
  size_t np = strspn(d, "0123456789");
  if (np == 0 || np > 9 || d[np] != '.') return -1;
  const char *e = d + np + 1;
  size_t nc = strspn(e, "0123456789");
  if (nc == 0 || e[nc] != '\0') return -1;
  return strtol(d, NULL, 10);
}

fl_status fl_ckpt_dir_clean_tmp(const char *dir, int include_self, size_t *removed) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[4096];
  size_t n = 0;
  if (removed) *removed = 0;
  if (!d) {
    if (errno == ENOENT) return FL_OK;
    return FL_ERR(FL_EIO, "checkpoint dir %s: %s", dir, strerror(errno));
  }
  while ((e = readdir(d))) {
    long pid = tmp_writer(e->d_name);
    if (pid <= 0) continue;
    if (pid == (long)getpid() ? !include_self : !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
      continue; /* a live writer's (or our own, during a run) */
    int len = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (len < 0 || (size_t)len >= sizeof path) continue;
    if (unlink(path) == 0) {
      FL_LOGI("checkpoint dir %s: removed %s, left by process %ld which is gone", dir, e->d_name,
              pid);
      n++;
    } else if (errno != ENOENT) {
      FL_LOGW("checkpoint dir %s: cannot remove the stale %s: %s", dir, e->d_name,
              strerror(errno));
    }
  }
  closedir(d);
  if (removed) *removed = n;
  return FL_OK;
}

fl_status fl_ckpt_dir_move_aside(const char *dir, char *moved_to, size_t cap, size_t *moved) {
  int64_t *all;
  size_t n;
  char sub[4096], from[4096], to[4096 + 64];
  fl_status st = FL_OK;
  *moved = 0;
  if (moved_to && cap) moved_to[0] = '\0';
  FL_TRY(list_all(dir, &all, &n));
  if (n == 0) {
    free(all);
    return FL_OK;
  }
  time_t now = time(NULL);
  struct tm tm;
  char stamp[32];
  gmtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  for (int k = 0;; k++) {
    int len = k ? snprintf(sub, sizeof sub, "%s/old-%s-%d", dir, stamp, k)
                : snprintf(sub, sizeof sub, "%s/old-%s", dir, stamp);
    if (len < 0 || (size_t)len >= sizeof sub) {
      free(all);
      return FL_ERR(FL_EINVAL, "checkpoint dir %s: path too long", dir);
    }
    if (mkdir(sub, 0755) == 0) break;
    if (errno != EEXIST || k > 100) {
      st = FL_ERR(FL_EIO, "checkpoint dir %s: cannot create %s: %s", dir, sub, strerror(errno));
      free(all);
      return st;
    }
  }
  for (size_t i = 0; i < n && st == FL_OK; i++) {
    st = fl_ckpt_dir_path(dir, all[i], from, sizeof from);
    if (st != FL_OK) break;
    snprintf(to, sizeof to, "%s/ckpt-%lld.flc", sub, (long long)all[i]);
    if (rename(from, to) != 0 && errno != ENOENT)
      st = FL_ERR(FL_EIO, "checkpoint dir %s: cannot move %s to %s: %s", dir, from, sub,
                  strerror(errno));
    else
      (*moved)++;
  }
  free(all);
  if (st == FL_OK) st = fsync_dir(from);
  if (moved_to) snprintf(moved_to, cap, "%s", sub);
  return st;
}

fl_status fl_ckpt_dir_prune(const char *dir, int keep) {
  int64_t *all;
  size_t n;
  char path[4096];
  fl_status st = FL_OK;
  if (keep < 1) return FL_ERR(FL_EINVAL, "checkpoint dir %s: keep must be >= 1, got %d", dir, keep);
  fl_ckpt_dir_clean_tmp(dir, 0, NULL);
  FL_TRY(list_all(dir, &all, &n));
  for (size_t i = (size_t)keep; i < n && st == FL_OK; i++) {
    st = fl_ckpt_dir_path(dir, all[i], path, sizeof path);
    if (st == FL_OK && unlink(path) != 0 && errno != ENOENT)
      st = FL_ERR(FL_EIO, "checkpoint dir %s: cannot remove %s: %s", dir, path, strerror(errno));
  }
  free(all);
  return st;
}
