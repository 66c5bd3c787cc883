/* data_stream.c - data.format criteo as the training loop's batch source
 * (fl_data.h, "Criteo batch stream"): the files and globs expanded, the
 * Criteo reader (data_criteo.c) opened on the rank's share, its batches
 * handed out as named inputs, and an epoch begun at the exact sample a
 * checkpoint recorded, or a range of the epoch begun at a batch counted
 * at open (an elastic PServer job's chunk).  The loop's other source, fl_loader, holds its data
 * in memory; this one never holds more than the reader's buffers. */
#include <config.h>

#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_data.h"
#include "fl_log.h"
#include "fl_model.h"

struct fl_stream {
  fl_criteo_reader *r;
  char **paths;
  size_t n_paths;
  size_t samples; /* the rank's samples per epoch (counted at open), or 0 */
  int64_t epoch;
  size_t index;   /* next batch of the epoch */
  fl_criteo_pos *marks; /* spec.marks: the position after each full batch, in file order */
  size_t n_marks;
  int float_targets; /* batches carry float targets (else class ids) */
  fl_dataset desc; /* the two inputs as fed: names, dims, elements */
};

/* Append one path (copied) to s->paths. */
static fl_status add_path(fl_stream *s, const char *p) {
  char **np = realloc(s->paths, (s->n_paths + 1) * sizeof *np);
  if (!np) return FL_ERR(FL_ENOMEM, "criteo: cannot list %zu files", s->n_paths + 1);
  s->paths = np;
  if (!(s->paths[s->n_paths] = strdup(p)))
    return FL_ERR(FL_ENOMEM, "criteo: cannot copy the file name %s", p);
  s->n_paths++;
  return FL_OK;
}

/* Each pattern in order: a glob's matches sorted by name; a pattern that
 * matches nothing is kept as written (the reader then names it missing). */
static fl_status expand(fl_stream *s, const char *const *pat, size_t n) {
  for (size_t i = 0; i < n; i++) {
    glob_t g;
    int rc = glob(pat[i], 0, NULL, &g);
    if (rc == GLOB_NOMATCH) {
      globfree(&g);
      FL_TRY(add_path(s, pat[i]));
      continue;
    }
    if (rc != 0) {
      globfree(&g);
      return FL_ERR(FL_EIO, "criteo: cannot expand the file pattern %s", pat[i]);
    }
    fl_status st = FL_OK;
    for (size_t k = 0; k < g.gl_pathc && st == FL_OK; k++) st = add_path(s, g.gl_pathv[k]);
    globfree(&g);
    FL_TRY(st);
  }
  return FL_OK;
}

/* The reader's options for spec o over the expanded files. */
static fl_criteo_options reader_options(const fl_stream *s, const fl_stream_spec *o,
                                        size_t shuffle) {
  return (fl_criteo_options){.paths = (const char *const *)s->paths, .n_paths = s->n_paths,
                             .batch_size = o->batch_size, .rank = o->rank,
                             .world_size = o->world_size, .seed = o->seed,
                             .shuffle_buffer = shuffle, .bad_lines = o->bad_lines,
                             .hash_buckets = o->hash_buckets};
}

/* Keep the reader's position after a full batch of the count. */
static fl_status add_mark(fl_stream *s, const fl_criteo_reader *r) {
  if ((s->n_marks & (s->n_marks - 1)) == 0) { /* 0, 1, 2, 4, ...: double */
    fl_criteo_pos *m = realloc(s->marks, (s->n_marks ? 2 * s->n_marks : 1) * sizeof *m);
    if (!m) return FL_ERR(FL_ENOMEM, "criteo: cannot keep %zu batch positions", s->n_marks + 1);
    s->marks = m;
  }
  fl_criteo_tell(r, &s->marks[s->n_marks++]);
  return FL_OK;
}

/* One pass over the rank's share in file order: its sample count (a bad
 * line under bad_lines stop fails here, before training), and with
 * o->marks each full batch's end. */
static fl_status count_samples(fl_stream *s, const fl_stream_spec *o) {
  fl_criteo_options co = reader_options(s, o, 0);
  fl_criteo_reader *r = NULL;
  fl_criteo_batch b;
  fl_criteo_pos pos;
  FL_TRY(fl_criteo_open(&co, &r));
  fl_status st = fl_criteo_start(r, 0);
  if (st == FL_OK && !o->marks) st = fl_criteo_count(r, &s->samples);
  else
    do { /* each full batch's end kept */
      if (st == FL_OK) st = fl_criteo_next(r, &b);
      if (st == FL_OK) s->samples += b.size;
      if (st == FL_OK && b.size == o->batch_size) st = add_mark(s, r);
    } while (st == FL_OK && b.size > 0);
  fl_criteo_tell(r, &pos);
  fl_criteo_close(r);
  FL_TRY(st);
  FL_LOGI("criteo: %zu files, rank %d of %d: %zu samples per epoch, %" PRIu64 " bad lines "
          "skipped", s->n_paths, o->rank, o->world_size, s->samples, pos.skipped);
  return FL_OK;
}

static void set_input(fl_data_input *in, const char *name, size_t dim, fl_data_elem el) {
  snprintf(in->name, sizeof in->name, "%s", name);
  in->dim = dim;
  in->elem = el;
}

fl_status fl_stream_open(const fl_stream_spec *o, fl_stream **out) {
  *out = NULL;
  fl_stream *s = calloc(1, sizeof *s);
  if (!s) return FL_ERR(FL_ENOMEM, "criteo: out of memory");
  fl_status st = expand(s, o->patterns, o->n_patterns);
  if (st == FL_OK && o->count) st = count_samples(s, o);
  if (st == FL_OK) {
    fl_criteo_options co = reader_options(s, o, o->shuffle_buffer);
    st = fl_criteo_open(&co, &s->r);
  }
  if (st != FL_OK) {
    fl_stream_close(s);
    return st;
  }
  s->float_targets = o->float_targets;
  s->desc.n_inputs = 2;
  set_input(&s->desc.inputs[0], o->dense_name, FL_CRITEO_DENSE, FL_DATA_F32);
  set_input(&s->desc.inputs[1], o->sparse_name, FL_CRITEO_SPARSE, FL_DATA_I64);
  s->desc.ylen = 1;
  s->desc.tdim = 1;
  *out = s;
  return FL_OK;
}

size_t fl_stream_samples(const fl_stream *s) { return s->samples; }

const fl_dataset *fl_stream_inputs(const fl_stream *s) { return &s->desc; }

/* Model input mi against stream input k: same element type, as many
 * values per sample. */
static fl_status bind_one(const fl_stream *s, const fl_model_input_info *mi, size_t k,
                          const char *model) {
  const fl_data_input *in = &s->desc.inputs[k];
  size_t per = 1;
  for (int d = 1; d < mi->ndim; d++) per *= (size_t)mi->dims[d];
  const int want = in->elem == FL_DATA_I64 ? FL_MODEL_I64 : FL_MODEL_F32;
  if (per != in->dim || mi->dtype != want)
    return FL_ERR(FL_EINVAL, "%s: input '%s' takes %zu %s values per sample; data.criteo feeds "
                  "it the %zu %s Criteo %s features: make it a %s [batch, %zu] input", model,
                  mi->name, per, mi->dtype == FL_MODEL_I64 ? "int64" : "float", in->dim,
                  want == FL_MODEL_I64 ? "int64" : "float",
                  k ? "categorical (hashed ids)" : "integer (log1p)",
                  want == FL_MODEL_I64 ? "int64" : "float", in->dim);
  return FL_OK;
}

fl_status fl_stream_bind(const fl_stream *s, const fl_model *m, const char *model) {
  const size_t nm = fl_model_num_inputs(m);
  int fed[2] = {0, 0};
  for (size_t i = 0; i < nm; i++) {
    fl_model_input_info mi;
    FL_TRY(fl_model_input_get(m, i, &mi));
    size_t k = 0;
    while (k < 2 && strcmp(mi.name, s->desc.inputs[k].name)) k++;
    if (k == 2)
      return FL_ERR(FL_EINVAL, "%s: input '%s' is not fed: data.criteo feeds dense_input '%s' "
                    "and sparse_input '%s' only", model, mi.name, s->desc.inputs[0].name,
                    s->desc.inputs[1].name);
    FL_TRY(bind_one(s, &mi, k, model));
    fed[k] = 1;
  }
  for (size_t k = 0; k < 2; k++)
    if (!fed[k])
      return FL_ERR(FL_EINVAL, "%s has no input '%s' (data.criteo.%s): name one of the model's "
                    "inputs there", model, s->desc.inputs[k].name,
                    k ? "sparse_input" : "dense_input");
  return FL_OK;
}

fl_status fl_stream_start(fl_stream *s, int64_t epoch, size_t first_batch, size_t batch_size,
                          const fl_criteo_pos *saved) {
  s->epoch = epoch;
  s->index = first_batch;
  if (first_batch == 0) return fl_criteo_start(s->r, epoch);
  if (saved && saved->epoch == epoch && saved->emitted == (uint64_t)first_batch * batch_size) {
    FL_LOGI("criteo: epoch %" PRId64 " continues at sample %" PRIu64 " (file %u, byte %" PRIu64
            ", the checkpoint's position)", epoch, saved->emitted, saved->file, saved->offset);
    return fl_criteo_seek(s->r, saved);
  }
  /* no position of this rank: replay the epoch's draws up to the batch */
  FL_LOGI("criteo: epoch %" PRId64 " continues at batch %zu, read again from its start", epoch,
          first_batch);
  FL_TRY(fl_criteo_start(s->r, epoch));
  for (size_t i = 0; i < first_batch; i++) {
    fl_criteo_batch b;
    FL_TRY(fl_criteo_next(s->r, &b));
    if (b.size < batch_size)
      return FL_ERR(FL_EINVAL, "criteo: resuming at batch %zu of epoch %" PRId64 ", but the "
                    "rank's share ends at batch %zu (the files changed?)", first_batch, epoch, i);
  }
  return FL_OK;
}

/* Distinct draws per range: a shuffle buffer's seed besides the epoch. */
#define RANGE_SALT (0x63686bULL << 32)

fl_status fl_stream_range(fl_stream *s, int64_t epoch, size_t first_batch, size_t end_batch) {
  if (first_batch >= end_batch || end_batch > s->n_marks)
    return FL_ERR(FL_EINVAL, "criteo: batches %zu..%zu of epoch %" PRId64 " asked, %zu full "
                  "batches counted at open", first_batch, end_batch, epoch, s->n_marks);
  fl_criteo_pos from = {0};
  if (first_batch) from = s->marks[first_batch - 1];
  from.epoch = epoch;
  s->epoch = epoch;
  s->index = first_batch;
  return fl_criteo_range(s->r, &from, s->marks[end_batch - 1].line, RANGE_SALT | first_batch);
}

fl_status fl_stream_next(fl_stream *s, fl_batch *out) {
  fl_criteo_batch b;
  FL_TRY(fl_criteo_next(s->r, &b));
  fl_criteo_as_batch(&b, s->epoch, s->index, out);
  if (s->float_targets) out->y = NULL;
  else out->t = NULL;
  s->index += b.size > 0;
  return FL_OK;
}

void fl_stream_tell(const fl_stream *s, fl_criteo_pos *pos) { fl_criteo_tell(s->r, pos); }

void fl_stream_close(fl_stream *s) {
  if (!s) return;
  fl_criteo_close(s->r);
  for (size_t i = 0; i < s->n_paths; i++) free(s->paths[i]);
  free(s->paths);
  free(s->marks);
  free(s);
}
