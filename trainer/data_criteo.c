/* data_criteo.c - a streaming reader of Criteo's display-advertising TSV
 * (fl_data.h, "Criteo TSV"): gzip or plain files read line by line,
 * sharded by line number over the ranks, shuffled through a bounded
 * reservoir drawn from (seed, epoch, rank), and resumable at the exact
 * sample from a small position (by seeking, or by replaying the epoch's
 * draws when a shuffle buffer is in use). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data_internal.h"
#include "fl_data.h"
#include "fl_log.h"

#define FIELDS (1 + FL_CRITEO_DENSE + FL_CRITEO_SPARSE)
#define MAX_LINE (1u << 20)
#define SKIP_LOGGED 10 /* skipped lines named in the log, per epoch */
#define LOG1P_KEPT 4096 /* integer features below this: log1p from a table */

typedef struct sample {
  float dense[FL_CRITEO_DENSE];
  int64_t sparse[FL_CRITEO_SPARSE];
  float label;
} sample;

struct fl_criteo_reader {
  fl_criteo_options o;
  char **paths;
  gzFile f;          /* the open file (index pos.file), or NULL */
  fl_criteo_pos pos; /* the reading head and what was handed out */
  int started, at_end; /* at_end: every file is read (or the range's lines) */
  uint64_t end_line;   /* a range's end (fl_criteo_range), 0 = the files' end */
  char *line;
  size_t cap;
  sample *pool;      /* the shuffle buffer (shuffle_buffer slots) */
  size_t fill;
  fl_drng rng;
  float *dense, *labels;
  int64_t *sparse;
  int32_t *y;
  float log1p_of[LOG1P_KEPT]; /* fl_criteo_log1p(i) */
  int8_t hex_of[256];         /* a byte's hex digit value, or -1 */
};

const char *const fl_criteo_input_names[2] = {"dense", "sparse"};

uint64_t fl_criteo_hash(uint32_t column, uint32_t value, int present) {
  uint64_t k = ((uint64_t)column << 33) | ((uint64_t)(present != 0) << 32) | value;
  return fl_drng_mix(k) & INT64_MAX;
}

float fl_criteo_log1p(int64_t x) { return x > 0 ? (float)log1p((double)x) : 0.0f; }

/* ------------------------------------------------------------- parsing */

/* A decimal integer spanning [p, e) (empty: 0).  -1 when it is not one. */
static int parse_int(const char *p, const char *e, int64_t *v) {
  int neg = 0;
  uint64_t x = 0;
  *v = 0;
  if (p == e) return 0;
  if (*p == '-' || *p == '+') neg = *p++ == '-';
  if (p == e) return -1;
  for (; p < e; p++) {
    if (*p < '0' || *p > '9') return -1;
    if (x > (uint64_t)INT64_MAX / 10) return -1;
    x = x * 10 + (uint64_t)(*p - '0');
  }
  if (x > (uint64_t)INT64_MAX) return -1;
  *v = neg ? -(int64_t)x : (int64_t)x;
  return 0;
}

/* A hex digit's value, or -1. */
static int hex_digit(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* 1..8 hex digits spanning [p, e) (empty: *present 0).  -1 otherwise. */
static int parse_hex(const char *p, const char *e, uint32_t *v, int *present) {
  uint32_t x = 0;
  *present = p != e;
  if (e - p > 8) return -1;
  for (; p < e; p++) {
    int d = hex_digit(*p);
    if (d < 0) return -1;
    x = x << 4 | (uint32_t)d;
  }
  *v = x;
  return 0;
}

/* An integer feature of p ending at a tab (decimal, an optional sign, at
 * most 18 digits) into *v; *p moves past the tab.  -1 otherwise. */
static inline int fast_int(const char **p, int64_t *v) {
  const char *q = *p;
  const int sign = *q == '-' || *q == '+', neg = *q == '-';
  q += sign;
  const char *d = q;
  uint64_t x = 0;
  for (; (unsigned)(*q - '0') < 10u; q++) x = x * 10 + (uint64_t)(*q - '0');
  if (*q != '\t' || q - d > 18 || (sign && q == d)) return -1;
  *v = neg ? -(int64_t)x : (int64_t)x;
  *p = q + 1;
  return 0;
}

/* parse_line of a well-formed line in one pass: 0 (s filled), or -1 for
 * any line parse_line might refuse or read otherwise (s undefined). */
static int parse_fast(const fl_criteo_reader *r, const char *p, sample *s) {
  if ((p[0] != '0' && p[0] != '1') || p[1] != '\t') return -1;
  s->label = (float)(p[0] - '0');
  p += 2;
  for (size_t i = 0; i < FL_CRITEO_DENSE; i++) {
    int64_t v;
    if (fast_int(&p, &v)) return -1;
    s->dense[i] = v >= 0 && v < LOG1P_KEPT ? r->log1p_of[v] : fl_criteo_log1p(v);
  }
  for (uint32_t c = 0; c < FL_CRITEO_SPARSE; c++) {
    const char *a = p;
    uint32_t x = 0;
    for (int d; (d = r->hex_of[(unsigned char)*p]) >= 0; p++) x = x << 4 | (uint32_t)d;
    if (p - a > 8 || *p != (c + 1 < FL_CRITEO_SPARSE ? '\t' : '\0')) return -1;
    uint64_t id = fl_criteo_hash(c, x, p != a);
    s->sparse[c] = (int64_t)(r->o.hash_buckets ? id % r->o.hash_buckets : id);
    p++;
  }
  return 0;
}

/* Whether parse_fast would read p (0) or refuse it (-1), without reading
 * the values: the counting pass's check of a well-formed line. */
static int check_fast(const fl_criteo_reader *r, const char *p) {
  if ((p[0] != '0' && p[0] != '1') || p[1] != '\t') return -1;
  p += 2;
  for (size_t i = 0; i < FL_CRITEO_DENSE; i++) {
    int64_t v;
    if (fast_int(&p, &v)) return -1;
  }
  for (uint32_t c = 0; c < FL_CRITEO_SPARSE; c++) {
    const char *a = p;
    while (r->hex_of[(unsigned char)*p] >= 0) p++;
    if (p - a > 8 || *p != (c + 1 < FL_CRITEO_SPARSE ? '\t' : '\0')) return -1;
    p++;
  }
  return 0;
}

/* One line (no line end) into s; NULL, or what is wrong with it. */
static const char *parse_line(const fl_criteo_reader *r, char *line, sample *s) {
  const char *f[FIELDS + 1];
  size_t n = 0;
  if (!parse_fast(r, line, s)) return NULL;
  f[n++] = line;
  for (char *p = line; *p; p++)
    if (*p == '\t') {
      if (n == FIELDS) return "more than 40 tab-separated fields";
      f[n++] = p + 1;
    }
  if (n != FIELDS) return "fewer than 40 tab-separated fields (label, 13 integers, 26 categoricals)";
  f[FIELDS] = line + strlen(line) + 1;
  if (f[1] - f[0] != 2 || (f[0][0] != '0' && f[0][0] != '1')) return "the label is not 0 or 1";
  s->label = (float)(f[0][0] - '0');
  for (size_t i = 0; i < FL_CRITEO_DENSE; i++) {
    int64_t v;
    if (parse_int(f[1 + i], f[2 + i] - 1, &v)) return "an integer feature is not a decimal integer";
    s->dense[i] = fl_criteo_log1p(v);
  }
  for (uint32_t c = 0; c < FL_CRITEO_SPARSE; c++) {
    uint32_t v;
    int present;
    const char *a = f[1 + FL_CRITEO_DENSE + c], *e = f[2 + FL_CRITEO_DENSE + c] - 1;
    if (parse_hex(a, e, &v, &present)) return "a categorical feature is not 1..8 hex digits";
    uint64_t id = fl_criteo_hash(c, v, present);
    s->sparse[c] = (int64_t)(r->o.hash_buckets ? id % r->o.hash_buckets : id);
  }
  return NULL;
}

/* --------------------------------------------------------------- files */

static fl_status open_file(fl_criteo_reader *r, uint32_t k) {
  const char *path = r->paths[k];
  if (r->f) gzclose_r(r->f);
  errno = 0;
  r->f = gzopen(path, "rb");
  if (!r->f)
    return FL_ERR(errno == ENOENT ? FL_ENOTFOUND : FL_EIO, "%s: cannot open: %s", path,
                  errno ? strerror(errno) : "out of memory");
  gzbuffer(r->f, 1u << 17);
  r->pos.file = k;
  r->pos.offset = 0;
  r->pos.file_line = 0;
  return FL_OK;
}

static fl_status read_error(fl_criteo_reader *r) {
  int errnum;
  const char *msg = gzerror(r->f, &errnum);
  const char *path = r->paths[r->pos.file];
  if (errnum == Z_ERRNO)
    return FL_ERR(FL_EIO, "%s: read error near line %" PRIu64 ": %s", path,
                  r->pos.file_line + 1, strerror(errno));
  return FL_ERR(FL_EPROTO, "%s: corrupt or truncated gzip data near line %" PRIu64 ": %s", path,
                r->pos.file_line + 1, errnum == Z_BUF_ERROR ? "unexpected end" : msg);
}

/* The next line of the current file into r->line without its line end;
 * *got 0 at the end of the file, *nul 1 when the line holds a NUL byte
 * (the offsets gztell gives count the bytes gzgets read). */
static fl_status read_line(fl_criteo_reader *r, int *got, int *nul) {
  size_t len = 0;
  *got = *nul = 0;
  for (;;) {
    if (!gzgets(r->f, r->line + len, (int)(r->cap - len))) {
      int errnum;
      gzerror(r->f, &errnum);
      if (errnum != Z_OK) return read_error(r);
      if (len == 0) return FL_OK;
      break;
    }
    const uint64_t at = (uint64_t)gztell(r->f), n = at - r->pos.offset;
    r->pos.offset = at;
    if (memchr(r->line + len, '\0', n)) *nul = 1;
    len += n;
    if (len > 0 && r->line[len - 1] == '\n') break;
    if (len + 1 < r->cap) continue; /* the last line, without a line end */
    if (r->cap >= MAX_LINE)
      return FL_ERR(FL_EPROTO, "%s:%" PRIu64 ": line longer than %u bytes",
                    r->paths[r->pos.file], r->pos.file_line + 1, MAX_LINE);
    char *bigger = realloc(r->line, r->cap * 2);
    if (!bigger) return FL_ERR(FL_ENOMEM, "criteo: cannot grow the line buffer");
    r->line = bigger;
    r->cap *= 2;
  }
  while (len > 0 && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r')) r->line[--len] = 0;
  *got = 1;
  r->pos.file_line++;
  r->pos.line++;
  return FL_OK;
}

/* A bad line: stop, or log (the first few of an epoch), count and skip. */
static fl_status bad_line(fl_criteo_reader *r, const char *what) {
  const char *path = r->paths[r->pos.file];
  if (r->o.bad_lines == FL_CRITEO_STOP)
    return FL_ERR(FL_EPROTO, "%s:%" PRIu64 ": %s (data.criteo.bad_lines: skip would skip it)", path,
                  r->pos.file_line, what);
  if (++r->pos.skipped <= SKIP_LOGGED)
    FL_LOGW("%s:%" PRIu64 ": %s; skipped (data.criteo.bad_lines: skip)%s", path, r->pos.file_line, what,
            r->pos.skipped == SKIP_LOGGED ? "; further skipped lines are only counted" : "");
  return FL_OK;
}

/* What is wrong with a line, or NULL: parse_line's verdict; s NULL: only
 * the verdict (a line parse_fast reads is never parsed). */
static const char *line_verdict(const fl_criteo_reader *r, char *line, sample *s) {
  sample scratch;
  if (s) return parse_line(r, line, s);
  return check_fast(r, line) ? parse_line(r, line, &scratch) : NULL;
}

/* The rank's next sample of the files into s (NULL: only checked, for the
 * count); *got 0 when all are read. */
static fl_status stream_next(fl_criteo_reader *r, sample *s, int *got) {
  const uint64_t w = (uint64_t)r->o.world_size, rank = (uint64_t)r->o.rank;
  *got = 0;
  while (!r->at_end) {
    int have, nul;
    if (r->end_line && r->pos.line >= r->end_line) {
      r->at_end = 1;
      break;
    }
    FL_TRY(read_line(r, &have, &nul));
    if (!have) {
      if (r->pos.file + 1 >= r->o.n_paths) {
        r->at_end = 1;
        break;
      }
      FL_TRY(open_file(r, r->pos.file + 1));
      continue;
    }
    if ((r->pos.line - 1) % w != rank) continue;
    const char *bad = nul ? "NUL byte in the line" : line_verdict(r, r->line, s);
    if (!bad) {
      *got = 1;
      return FL_OK;
    }
    FL_TRY(bad_line(r, bad));
  }
  return FL_OK;
}

/* The next sample handed out: file order, or through the reservoir. */
static fl_status next_sample(fl_criteo_reader *r, sample *s, int *got) {
  const size_t cap = r->o.shuffle_buffer;
  if (cap == 0) return stream_next(r, s, got);
  while (r->fill < cap && !r->at_end) {
    int have;
    FL_TRY(stream_next(r, &r->pool[r->fill], &have));
    r->fill += (size_t)have;
  }
  *got = r->fill > 0;
  if (!*got) return FL_OK;
  const size_t j = (size_t)fl_drng_below(&r->rng, r->at_end ? r->fill : cap);
  *s = r->pool[j];
  int have = 0;
  if (!r->at_end) FL_TRY(stream_next(r, &r->pool[j], &have));
  if (!have) r->pool[j] = r->pool[--r->fill];
  return FL_OK;
}

/* FL_EINVAL (logged): this rank got no sample in the epoch. */
static fl_status no_sample(const fl_criteo_reader *r) {
  return FL_ERR(FL_EINVAL, "%s%s: rank %d of %d gets no sample in epoch %" PRId64 " (%" PRIu64
                " lines, %" PRIu64 " of this rank's skipped as bad)", r->paths[0],
                r->o.n_paths > 1 ? " and the other files" : "", r->o.rank, r->o.world_size,
                r->pos.epoch, r->pos.line, r->pos.skipped);
}

fl_status fl_criteo_next(fl_criteo_reader *r, fl_criteo_batch *out) {
  size_t n = 0;
  memset(out, 0, sizeof *out);
  if (!r->started) return FL_ERR(FL_ESTATE, "criteo: no epoch started");
  for (; n < r->o.batch_size; n++) {
    sample s;
    int got;
    FL_TRY(next_sample(r, &s, &got));
    if (!got) break;
    memcpy(r->dense + n * FL_CRITEO_DENSE, s.dense, sizeof s.dense);
    memcpy(r->sparse + n * FL_CRITEO_SPARSE, s.sparse, sizeof s.sparse);
    r->labels[n] = s.label;
    r->y[n] = (int32_t)s.label;
    r->pos.emitted++;
  }
  if (r->pos.emitted == 0 && n == 0) return no_sample(r);
  *out = (fl_criteo_batch){.size = n, .dense = r->dense, .sparse = r->sparse,
                           .labels = r->labels, .y = r->y};
  return FL_OK;
}

fl_status fl_criteo_count(fl_criteo_reader *r, size_t *n) {
  *n = 0;
  if (!r->started) return FL_ERR(FL_ESTATE, "criteo: no epoch started");
  if (r->o.shuffle_buffer) return FL_ERR(FL_EINVAL, "criteo: a count reads in file order");
  for (;;) {
    int got;
    FL_TRY(stream_next(r, NULL, &got));
    if (!got) break;
    r->pos.emitted++;
  }
  if (r->pos.emitted == 0) return no_sample(r);
  *n = (size_t)r->pos.emitted;
  return FL_OK;
}

/* ------------------------------------------------------ epochs, resume */

fl_status fl_criteo_start(fl_criteo_reader *r, int64_t epoch) {
  r->started = 0;
  r->at_end = 0;
  r->end_line = 0;
  r->fill = 0;
  memset(&r->pos, 0, sizeof r->pos);
  r->pos.epoch = epoch;
  fl_drng_seed(&r->rng, r->o.seed, (uint64_t)epoch, 0x637274ULL << 32 | (uint64_t)r->o.rank);
  FL_TRY(open_file(r, 0));
  r->started = 1;
  return FL_OK;
}

/* No shuffle buffer: reopen the head's file at its offset. */
static fl_status seek_direct(fl_criteo_reader *r, const fl_criteo_pos *pos) {
  FL_TRY(open_file(r, pos->file));
  if (gzseek(r->f, (z_off_t)pos->offset, SEEK_SET) != (z_off_t)pos->offset)
    return FL_ERR(FL_EINVAL, "%s: cannot seek to byte %" PRIu64 " of a saved position (is the "
                  "file shorter than when it was saved?)", r->paths[pos->file], pos->offset);
  r->pos = *pos;
  return FL_OK;
}

/* A shuffle buffer: replay the epoch's draws up to the position. */
static fl_status seek_replay(fl_criteo_reader *r, const fl_criteo_pos *pos) {
  sample s;
  for (uint64_t k = 0; k < pos->emitted; k++) {
    int got;
    FL_TRY(next_sample(r, &s, &got));
    if (!got) break;
    r->pos.emitted++;
  }
  if (r->pos.emitted != pos->emitted || r->pos.file != pos->file || r->pos.offset != pos->offset)
    return FL_ERR(FL_EINVAL, "%s: replaying epoch %" PRId64 " to sample %" PRIu64 " ends at file "
                  "%u byte %" PRIu64 ", the saved position says file %u byte %" PRIu64 ": the "
                  "files or data options changed since it was saved", r->paths[0], pos->epoch,
                  pos->emitted, r->pos.file, r->pos.offset, pos->file, pos->offset);
  return FL_OK;
}

fl_status fl_criteo_seek(fl_criteo_reader *r, const fl_criteo_pos *pos) {
  if (pos->file >= r->o.n_paths)
    return FL_ERR(FL_EINVAL, "criteo: a saved position in file %u of %zu", pos->file,
                  r->o.n_paths);
  FL_TRY(fl_criteo_start(r, pos->epoch));
  r->started = 0;
  fl_status st = r->o.shuffle_buffer ? seek_replay(r, pos) : seek_direct(r, pos);
  r->started = st == FL_OK;
  return st;
}

/* Ownership: nothing kept. */
fl_status fl_criteo_range(fl_criteo_reader *r, const fl_criteo_pos *from, uint64_t end_line,
                          uint64_t salt) {
  if (from->file >= r->o.n_paths || end_line <= from->line)
    return FL_ERR(FL_EINVAL, "criteo: a range of lines %" PRIu64 "..%" PRIu64 " from file %u of "
                  "%zu is empty or outside the files", from->line, end_line, from->file,
                  r->o.n_paths);
  FL_TRY(fl_criteo_start(r, from->epoch));
  r->started = 0;
  FL_TRY(seek_direct(r, from));
  fl_drng_seed(&r->rng, r->o.seed, (uint64_t)from->epoch, salt);
  r->end_line = end_line;
  r->started = 1;
  return FL_OK;
}

void fl_criteo_tell(const fl_criteo_reader *r, fl_criteo_pos *pos) { *pos = r->pos; }

/* ------------------------------------------------------- open, close */

static fl_status check_options(const fl_criteo_options *o) {
  if (!o->paths || o->n_paths == 0 || o->n_paths > UINT32_MAX)
    return FL_ERR(FL_EINVAL, "criteo: no data file given (data.train_files)");
  if (o->batch_size == 0) return FL_ERR(FL_EINVAL, "criteo: batch_size must be > 0");
  if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
    return FL_ERR(FL_EINVAL, "criteo: rank %d outside a world of %d", o->rank, o->world_size);
  if (o->bad_lines != FL_CRITEO_STOP && o->bad_lines != FL_CRITEO_SKIP)
    return FL_ERR(FL_EINVAL, "criteo: unknown data.bad_lines policy %d", (int)o->bad_lines);
  for (size_t k = 0; k < o->n_paths; k++) {
    struct stat sb;
    if (!o->paths[k]) return FL_ERR(FL_EINVAL, "criteo: data file %zu has no name", k);
    if (stat(o->paths[k], &sb) != 0)
      return FL_ERR(errno == ENOENT ? FL_ENOTFOUND : FL_EIO, "%s: %s", o->paths[k],
                    strerror(errno));
  }
  return FL_OK;
}

void fl_criteo_close(fl_criteo_reader *r) {
  if (!r) return;
  if (r->f) gzclose_r(r->f);
  for (size_t k = 0; r->paths && k < r->o.n_paths; k++) free(r->paths[k]);
  free(r->paths);
  free(r->line);
  free(r->pool);
  free(r->dense);
  free(r->sparse);
  free(r->labels);
  free(r->y);
  free(r);
}

fl_status fl_criteo_open(const fl_criteo_options *o, fl_criteo_reader **out) {
  *out = NULL;
  FL_TRY(check_options(o));
  fl_criteo_reader *r = calloc(1, sizeof *r);
  if (!r) return FL_ERR(FL_ENOMEM, "criteo: out of memory");
  r->o = *o;
  const size_t bs = o->batch_size;
  r->paths = calloc(o->n_paths, sizeof *r->paths);
  r->cap = 4096;
  r->line = malloc(r->cap);
  r->pool = o->shuffle_buffer ? malloc(o->shuffle_buffer * sizeof *r->pool) : NULL;
  r->dense = malloc(bs * FL_CRITEO_DENSE * sizeof *r->dense);
  r->sparse = malloc(bs * FL_CRITEO_SPARSE * sizeof *r->sparse);
  r->labels = malloc(bs * sizeof *r->labels);
  r->y = malloc(bs * sizeof *r->y);
  int ok = r->paths && r->line && (r->pool || !o->shuffle_buffer) && r->dense && r->sparse &&
           r->labels && r->y;
  for (size_t k = 0; ok && k < o->n_paths; k++) ok = (r->paths[k] = strdup(o->paths[k])) != NULL;
  if (!ok) {
    fl_criteo_close(r);
    return FL_ERR(FL_ENOMEM, "criteo: cannot allocate a batch of %zu and a shuffle buffer of %zu",
                  bs, o->shuffle_buffer);
  }
  r->o.paths = NULL; /* the copies in r->paths are used */
  for (int64_t i = 0; i < LOG1P_KEPT; i++) r->log1p_of[i] = fl_criteo_log1p(i);
  for (int c = 0; c < 256; c++) r->hex_of[c] = (int8_t)hex_digit((char)c);
  *out = r;
  return FL_OK;
}

/* ------------------------------------------------- what models read */

void fl_criteo_as_batch(const fl_criteo_batch *b, int64_t epoch, size_t index, fl_batch *out) {
  memset(out, 0, sizeof *out);
  out->epoch = epoch;
  out->index = index;
  out->size = b->size;
  out->t = b->labels;
  out->y = b->y;
  out->n_inputs = 2;
  out->inputs[0] = b->dense;
  out->inputs[1] = b->sparse;
  out->ylen = 1;
}

/* Room for `more` samples of 39 features each in d. */
static fl_status grow_sparse(fl_sparse_dataset *d, size_t more) {
  const size_t n = d->n + more, per = FL_CRITEO_DENSE + FL_CRITEO_SPARSE;
  float *lab = realloc(d->labels, n * sizeof *lab);
  if (lab) d->labels = lab;
  size_t *off = realloc(d->offsets, (n + 1) * sizeof *off);
  if (off) d->offsets = off;
  fl_sparse_feature *f = realloc(d->feats, n * per * sizeof *f);
  if (f) d->feats = f;
  if (!lab || !off || !f) return FL_ERR(FL_ENOMEM, "criteo: cannot hold %zu sparse samples", n);
  if (d->n == 0) d->offsets[0] = 0;
  return FL_OK;
}

fl_status fl_criteo_append_sparse(const fl_criteo_batch *b, fl_sparse_dataset *d) {
  if (b->size == 0) return FL_OK;
  FL_TRY(grow_sparse(d, b->size));
  for (size_t i = 0; i < b->size; i++) {
    fl_sparse_feature *f = d->feats + d->offsets[d->n];
    for (uint32_t c = 0; c < FL_CRITEO_SPARSE; c++)
      *f++ = (fl_sparse_feature){c, (uint64_t)b->sparse[i * FL_CRITEO_SPARSE + c], 1.0f};
    for (uint32_t k = 0; k < FL_CRITEO_DENSE; k++)
      *f++ = (fl_sparse_feature){FL_CRITEO_SPARSE + k, k, b->dense[i * FL_CRITEO_DENSE + k]};
    d->labels[d->n] = b->labels[i];
    d->offsets[d->n + 1] = d->offsets[d->n] + FL_CRITEO_DENSE + FL_CRITEO_SPARSE;
    d->n++;
  }
  d->num_slots = FL_CRITEO_SPARSE + FL_CRITEO_DENSE;
  return FL_OK;
}
