/* model_sparse_graph.c - an ONNX model whose embedding initializers
 * (pserver.sparse_tables) are trained on the pservers as sparse tables: a
 * model with sparse tables (fl_sparse_model.h) fed by named inputs.
 *
 * At create each named initializer leaves the graph's parameters and
 * becomes a rows input (fl_graph_sparse_table) sized for the most distinct
 * ids a micro-batch can hold: the batch times the int64 values a sample
 * feeds, and at most the table's rows.  prepare copies the micro-batch's
 * named inputs and labels into its slot, evaluates each table's ids on
 * them (fl_graph_model_table_ids: the int64 nodes before the reader, such
 * as ids % V, run on the feed) and keeps them once each, ascending: the
 * rows the loop pulls, in the order SparseRowIndex numbers them (bind
 * hands it the ranks found here, so that the step does not sort again).
 * Ids are the model's int64 values used as uint64 keys: a table has no
 * vocabulary to declare and grows as ids arrive (the pservers create a row
 * at its first pull; init from_model starts rows 0..V-1 from the
 * initializer, any other id from pserver's uniform init).  bind hands the
 * slot's rows to the graph and its feed to the step; row_grad is d loss /
 * d rows.  A table's padding id is the pservers' (it reads as zeros there
 * and its gradients are dropped).  The dense parameters travel like any
 * model's; the loop pulls and pushes the rows (loop_sparse.c). */
#include <config.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fl_config.h"
#include "fl_graph.h"
#include "fl_graph_inspect.h"
#include "fl_log.h"
#include "fl_sparse_model.h"
#include "model_internal.h"

_Static_assert(FL_JOB_MAX_SPARSE_TABLES <= FL_SPARSE_MAX_TABLES,
               "every pserver.sparse_tables entry is one of the model's tables");

/* One table: the job's settings, its rows input and per slot its ids
 * and pulled rows. */
typedef struct sg_table {
  const fl_job_sparse_table *job;
  int64_t capacity, vocab;      /* rows input's rows; the initializer's rows */
  uint32_t width;
  float *init;                  /* the initializer's vocab * width values */
  uint64_t *ids[FL_SPARSE_SLOTS];
  size_t n[FL_SPARSE_SLOTS];
  float *rows[FL_SPARSE_SLOTS]; /* capacity * width */
  int64_t *rank[FL_SPARSE_SLOTS]; /* per id fed, its row (fl_graph_unique_ids) */
  size_t n_rank[FL_SPARSE_SLOTS], cap_rank[FL_SPARSE_SLOTS];
  const float *grad;            /* the graph's d loss / d rows */
} sg_table;

/* One prepared micro-batch: copies of its inputs and labels, its feed. */
typedef struct sg_slot {
  void *in[FL_DATA_MAX_INPUTS];
  int32_t *y;
  float *t;
  size_t cap_y, cap_t;
  fl_model_input feed_in[FL_DATA_MAX_INPUTS];
  fl_model_feed feed;
} sg_slot;

typedef struct sg {
  const fl_job *job;
  void *graph;                  /* the model's compiled graph */
  size_t max_b, nt, ni;
  sg_table t[FL_SPARSE_MAX_TABLES];
  fl_sparse_table tables[FL_SPARSE_MAX_TABLES];
  size_t per[FL_DATA_MAX_INPUTS], esz[FL_DATA_MAX_INPUTS]; /* per sample; bytes per value */
  const char *names[FL_DATA_MAX_INPUTS]; /* the batches' named inputs, in their order */
  int dtype[FL_DATA_MAX_INPUTS];
  sg_slot slot[FL_SPARSE_SLOTS];
  int class_ids;                /* softmax: class ids; else tdim float targets a sample */
  size_t tdim;
  unsigned bound;
  int64_t *scratch;             /* ids while preparing */
  size_t cap_scratch;
  int64_t *sort_tmp;            /* the sort's scratch, 3 * cap_sort values */
  size_t cap_sort;
  const char *tnames[FL_SPARSE_MAX_TABLES]; /* t[i].job->name */
  size_t off[FL_SPARSE_MAX_TABLES + 1];     /* table i's ids: scratch[off[i], off[i + 1]) */
} sg;

static void sg_destroy(void *self) {
  sg *s = self;
  if (!s) return;
  for (size_t i = 0; i < s->nt; i++) {
    for (int k = 0; k < FL_SPARSE_SLOTS; k++) {
      free(s->t[i].ids[k]);
      free(s->t[i].rows[k]);
      free(s->t[i].rank[k]);
    }
    free(s->t[i].init);
  }
  for (int k = 0; k < FL_SPARSE_SLOTS; k++) {
    for (size_t i = 0; i < FL_DATA_MAX_INPUTS; i++) free(s->slot[k].in[i]);
    free(s->slot[k].y);
    free(s->slot[k].t);
  }
  free(s->scratch);
  free(s->sort_tmp);
  free(s);
}

/* The int64 values one sample feeds (all int64 inputs of g), 0 when a
 * dimension is unknown. */
static int64_t int64_per_sample(const fl_graph *g) {
  int64_t sum = 0;
  for (int i = 0; i < fl_graph_num_tensors(g); i++) {
    fl_gtensor_info ti;
    if (fl_graph_tensor_info(g, i, &ti) != FL_OK || ti.kind != FL_GT_INPUT ||
        ti.dtype != FL_G_I64)
      continue;
    int64_t per = 1;
    for (int d = 1; d < ti.ndim; d++) per = ti.dims[d] > 0 ? per * ti.dims[d] : 0;
    if (per == 0) return 0;
    sum += per;
  }
  return sum;
}

/* fl_model_edit_fn: each table of the job out of g's parameters. */
static fl_status sg_edit(fl_graph *g, void *ctx) {
  sg *s = ctx;
  const int64_t per = int64_per_sample(g);
  const fl_job_pserver *ps = &s->job->pserver;
  for (int i = 0; i < ps->n_sparse_tables; i++) {
    sg_table *t = &s->t[s->nt];
    fl_gtensor_info ti;
    const int id = fl_graph_find(g, ps->sparse_tables[i].name);
    int64_t cap = (int64_t)s->max_b * per, width; /* distinct ids a batch may have */
    if (id >= 0 && fl_graph_tensor_info(g, id, &ti) == FL_OK && ti.ndim == 2 && per == 0)
      cap = ti.dims[0];
    t->job = &ps->sparse_tables[i];
    s->tnames[s->nt] = t->job->name;
    FL_TRY(fl_graph_sparse_table(g, t->job->name, cap, &width, &t->init, &t->vocab));
    s->nt++;
    t->capacity = cap;
    t->width = (uint32_t)width;
    s->tables[i] = (fl_sparse_table){t->job->name, t->width};
  }
  return FL_OK;
}

/* The named inputs batches carry, in their order: data.inputs, or
 * data.format criteo's dense and sparse inputs (fl_stream). */
static size_t batch_inputs(const fl_job_data *d, const char **names) {
  if (d->format == FL_DATA_CRITEO) {
    names[0] = d->dense_input;
    names[1] = d->sparse_input;
    return 2;
  }
  for (size_t k = 0; k < d->n_inputs; k++) names[k] = d->inputs[k].name;
  return d->n_inputs;
}

/* Slot and table buffers, and the feed's inputs in the batches' order. */
static fl_status sg_buffers(sg *s, const fl_model *m) {
  s->ni = batch_inputs(&s->job->data, s->names);
  if (s->ni == 0)
    return FL_ERR(FL_EINVAL, "%s: a model with pserver.sparse_tables is fed by data.inputs (its "
                  "int64 ids among them): name each input's .npy file there", s->job->source);
  for (size_t k = 0; k < s->ni; k++) {
    fl_model_input_info mi;
    size_t i = 0;
    while (i < fl_model_num_inputs(m) && fl_model_input_get(m, i, &mi) == FL_OK &&
           strcmp(mi.name, s->names[k]))
      i++;
    if (i == fl_model_num_inputs(m))
      return FL_ERR(FL_EINVAL, "%s: the data names input '%s', which is no input of %s",
                    s->job->source, s->names[k], s->job->model.path);
    s->per[k] = 1;
    for (int j = 1; j < mi.ndim; j++) s->per[k] *= mi.dims[j] > 0 ? (size_t)mi.dims[j] : 1;
    s->dtype[k] = mi.dtype;
    s->esz[k] = mi.dtype == FL_MODEL_I64 ? sizeof(int64_t) : sizeof(float);
    for (int j = 0; j < FL_SPARSE_SLOTS; j++)
      if (!(s->slot[j].in[k] = malloc(s->max_b * s->per[k] * s->esz[k])))
        return FL_ERR(FL_ENOMEM, "sparse tables: out of memory for input %s", mi.name);
  }
  for (size_t i = 0; i < s->nt; i++) {
    sg_table *t = &s->t[i];
    const size_t nr = (size_t)t->capacity * t->width;
    for (int j = 0; j < FL_SPARSE_SLOTS; j++)
      if (!(t->ids[j] = malloc((size_t)t->capacity * sizeof *t->ids[j])) ||
          !(t->rows[j] = calloc(nr, sizeof(float))))
        return FL_ERR(FL_ENOMEM, "sparse table %s: out of memory for %zu rows", t->job->name,
                      (size_t)t->capacity);
  }
  return FL_OK;
}

/* Grow *p to n elements of size esz. */
static fl_status grow(void **p, size_t *cap, size_t n, size_t esz) {
  if (n <= *cap) return FL_OK;
  void *q = realloc(*p, n * esz);
  if (!q) return FL_ERR(FL_ENOMEM, "sparse tables: out of memory for %zu values", n);
  *p = q;
  *cap = n;
  return FL_OK;
}

/* The slot's copies of b's n samples and its feed. */
static fl_status copy_batch(sg *s, sg_slot *sl, const fl_batch *b, size_t n) {
  if (b->n_inputs != s->ni || !b->y != !s->class_ids)
    return FL_ERR(FL_EINVAL, "sparse tables: a batch of %zu named inputs and %s, the model "
                  "takes %zu and %s", b->n_inputs, b->y ? "class ids" : "float targets", s->ni,
                  s->class_ids ? "class ids" : "float targets");
  const size_t ylen = b->ylen ? b->ylen : 1;
  for (size_t k = 0; k < s->ni; k++) {
    memcpy(sl->in[k], b->inputs[k], n * s->per[k] * s->esz[k]);
    sl->feed_in[k] = (fl_model_input){.name = s->names[k], .dtype = s->dtype[k],
                                      .data = sl->in[k]};
  }
  if (b->y) {
    FL_TRY(grow((void **)&sl->y, &sl->cap_y, n * ylen, sizeof *sl->y));
    memcpy(sl->y, b->y, n * ylen * sizeof *sl->y);
  } else {
    FL_TRY(grow((void **)&sl->t, &sl->cap_t, n * s->tdim, sizeof *sl->t));
    memcpy(sl->t, b->t, n * s->tdim * sizeof *sl->t);
  }
  sl->feed = (fl_model_feed){.inputs = sl->feed_in, .n_inputs = s->ni,
                             .y = b->y ? sl->y : NULL, .ylen = ylen,
                             .ignore_index = s->job->model.ignore_index,
                             .t = b->y ? NULL : sl->t};
  return FL_OK;
}

/* Table t's distinct ids of the slot's feed, ascending (any 64-bit value),
 * and the rank of each of its m ids among them. */
static fl_status table_ids(sg *s, sg_table *t, unsigned slot, int64_t *ids, size_t m) {
  FL_TRY(grow((void **)&t->rank[slot], &t->cap_rank[slot], m, sizeof *t->rank[slot]));
  t->n_rank[slot] = m;
  const size_t u = fl_graph_unique_ids(ids, t->rank[slot], s->sort_tmp, m);
  if (u > (size_t)t->capacity)
    return FL_ERR(FL_EINVAL, "sparse table %s: %zu distinct ids in a batch, over the %" PRId64
                  " rows planned", t->job->name, u, t->capacity);
  for (size_t i = 0; i < u; i++) t->ids[slot][i] = (uint64_t)ids[i];
  t->n[slot] = u;
  return FL_OK;
}

/* hooks->prepare: the slot's copy of b, each table's ids and row buffer. */
static fl_status sg_prepare(void *self, unsigned slot, const fl_batch *b, size_t n,
                            fl_sparse_need *need) {
  sg *s = self;
  FL_TRY(copy_batch(s, &s->slot[slot], b, n));
  FL_TRY(fl_graph_model_tables_ids(s->graph, s->tnames, s->nt, &s->slot[slot].feed, n,
                                   &s->scratch, &s->cap_scratch, s->off));
  if (s->cap_sort < s->cap_scratch) {
    int64_t *p = realloc(s->sort_tmp, 3 * s->cap_scratch * sizeof *p);
    if (!p) return FL_ERR(FL_ENOMEM, "sparse tables: out of memory for %zu ids", s->cap_scratch);
    s->sort_tmp = p;
    s->cap_sort = s->cap_scratch;
  }
  for (size_t i = 0; i < s->nt; i++) {
    sg_table *t = &s->t[i];
    FL_TRY(table_ids(s, t, slot, s->scratch + s->off[i], s->off[i + 1] - s->off[i]));
    need[i] = (fl_sparse_need){t->ids[slot], t->n[slot], t->rows[slot]};
  }
  return FL_OK;
}

/* hooks->bind: the slot's rows to the graph. */
static fl_status sg_bind(void *self, unsigned slot, const float **targets) {
  sg *s = self;
  for (size_t i = 0; i < s->nt; i++) {
    sg_table *t = &s->t[i];
    FL_TRY(fl_graph_model_set_rows(s->graph, t->job->name, t->rows[slot], &t->grad));
    FL_TRY(fl_graph_model_rows_used(s->graph, t->job->name, t->n[slot]));
    FL_TRY(fl_graph_model_set_ranks(s->graph, t->job->name, (const int64_t *)t->ids[slot],
                                    t->n[slot], t->rank[slot], t->n_rank[slot]));
  }
  s->bound = slot;
  *targets = s->slot[slot].feed.t;
  return FL_OK;
}

static const fl_model_feed *sg_feed(void *self) {
  sg *s = self;
  return &s->slot[s->bound].feed;
}

static const float *sg_row_grad(void *self, size_t i) { return ((const sg *)self)->t[i].grad; }

static const float *sg_scores(void *self) {
  return fl_graph_model_output(((const sg *)self)->graph);
}

static size_t sg_tables(void *self, const fl_sparse_table **t) {
  const sg *s = self;
  *t = s->tables;
  return s->nt;
}

static const float *sg_init_rows(void *self, size_t i, size_t *rows) {
  const sg_table *t = &((const sg *)self)->t[i];
  *rows = (size_t)t->vocab;
  return t->job->init == FL_SPARSE_INIT_FROM_MODEL ? t->init : NULL;
}

static const fl_sparse_hooks sg_hooks = {
    .tables = sg_tables,
    .prepare = sg_prepare,
    .bind = sg_bind,
    .feed = sg_feed,
    .row_grad = sg_row_grad,
    .scores = sg_scores,
    .init_rows = sg_init_rows,
    .destroy = sg_destroy,
};

fl_status fl_sparse_graph_model_create(const fl_model_build_args *a, fl_model **out) {
  const fl_job *job = a->job;
  fl_model *m = NULL;
  sg *s = calloc(1, sizeof *s);
  *out = NULL;
  if (!s) return FL_ERR(FL_ENOMEM, "sparse tables: out of memory");
  s->job = job;
  s->max_b = a->max_batch;
  fl_status st = fl_model_create_edited(a->spec, a->max_batch, a->seed, sg_edit, s, &m);
  if (st == FL_OK) {
    s->graph = fl_model_graph_handle(m);
    s->class_ids = !fl_model_float_targets(m);
    s->tdim = (size_t)fl_model_get_spec(m)->num_classes;
    st = sg_buffers(s, m);
  }
  if (st != FL_OK) {
    fl_model_destroy(m);
    sg_destroy(s);
    return st;
  }
  fl_model_set_sparse(m, &sg_hooks, s);
  for (size_t i = 0; i < s->nt; i++)
    FL_LOGI("sparse table %s: %" PRId64 " x %u on the pservers (%s), rows of at most %" PRId64
            " ids a batch", s->t[i].job->name, s->t[i].vocab, s->t[i].width,
            s->t[i].job->init == FL_SPARSE_INIT_FROM_MODEL ? "from the model" : "uniform",
            s->t[i].capacity);
  *out = m;
  return FL_OK;
}
