/* graph_sparse.c - an ONNX model's initializer as a sparse table on the
 * pservers.
 *
 * The table leaves the graph's parameters and becomes a rows input holding
 * only the rows a batch pulled; each reader (Gather axis 0, EmbeddingBag)
 * then gathers row positions instead of ids, which a SparseRowIndex node
 * computes from the ids (their ranks among the batch's distinct ids).  The
 * model pulls the rows in that same order, so it needs the ids before the
 * step: fl_graph_model_table_ids runs the int64 nodes that compute them on
 * the feed (a run that the step repeats, cheaply and identically). */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_engine.h"

/* Whether node n reads table tensor t only where a sparse table may be
 * read: input 0 of a row reader (FL_GOP_ROW_READER: a Gather on axis 0,
 * an EmbeddingBag's weight). */
static int reads_rows(const fl_gnode *n, int t) {
  const fl_gattr *axis = fl_gattr_find(n, "axis");
  if (!(n->op->traits & FL_GOP_ROW_READER) || (axis && axis->i != 0)) return 0;
  for (int i = 1; i < n->n_in; i++)
    if (n->in[i] == t) return 0;
  return 1;
}

/* A SparseRowIndex node before input 1 (the ids) of reader r. */
static fl_status index_ids(fl_graph *g, int r, const char *table, int64_t capacity) {
  char name[512];
  const int ids = g->nodes[r].in[1];
  snprintf(name, sizeof name, "%s.%s.rows", table, g->nodes[r].name);
  const fl_gattr cap = {.name = "capacity", .kind = FL_GA_INT, .i = capacity};
  const char *outs[1] = {name};
  int pos;
  FL_TRY(fl_graph_node(g, name, "SparseRowIndex", &ids, 1, outs, 1, &cap, 1, &pos));
  g->nodes[r].in[1] = pos; /* g->nodes may have moved: index again */
  return FL_OK;
}

fl_status fl_graph_sparse_table(fl_graph *g, const char *name, int64_t capacity,
                                int64_t *width, float **init, int64_t *rows) {
  const int t = g ? fl_graph_find(g, name) : -1;
  if (t < 0 || g->t[t].kind != FL_GT_PARAM || g->t[t].ndim != 2 || capacity < 1)
    return FL_ERR(FL_EINVAL, "graph %s: sparse table %s: %s", g ? g->name : "", name,
                  t < 0 ? "no initializer of that name in the model"
                  : capacity < 1 ? "no rows to hold"
                  : "not a trainable float initializer of two dimensions [rows, width]");
  const int nn = g->nn;
  for (int i = 0; i < nn; i++) {
    const fl_gnode *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] == t && !reads_rows(n, t))
        return FL_ERR(FL_ENOTSUP, "graph %s: sparse table %s is read by node %s (%s), which is "
                      "neither a Gather on axis 0 of it nor an EmbeddingBag of it: keep %s "
                      "dense (leave it out of pserver.sparse_tables)", g->name, name, n->name,
                      n->op->type, name);
  }
  int reader = -1;
  for (int i = 0; i < nn; i++) {
    if (g->nodes[i].in[0] != t) continue;
    if (reader >= 0)
      return FL_ERR(FL_ENOTSUP, "graph %s: sparse table %s is read by nodes %s and %s: a "
                    "sparse table takes one reader (keep it dense)", g->name, name,
                    g->nodes[reader].name, g->nodes[i].name);
    reader = i;
  }
  if (reader >= 0) FL_TRY(index_ids(g, reader, name, capacity));
  fl_gtensor *x = &g->t[t];
  *width = x->dims[1];
  *rows = x->dims[0];
  *init = x->data;
  x->data = NULL;
  x->kind = FL_GT_ROWS;
  x->producer = -1;
  x->dims[0] = capacity;
  x->n = 0;
  return FL_OK;
}

/* Whether tensor t is fed or computed from fed int64 values and int64
 * constants only. */
static int int64_only(const fl_graph *g, int t) {
  const fl_gtensor *x = &g->t[t];
  if (x->dtype != FL_G_I64) return 0;
  if (x->kind != FL_GT_VALUE) return 1;
  const fl_gnode *n = &g->nodes[x->producer];
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= 0 && !int64_only(g, n->in[i])) return 0;
  return 1;
}

/* Feed the int64 inputs (the others are not read here). */
static fl_status feed_ids(fl_gmodel *m, const fl_model_feed *f) {
  for (size_t k = 0; k < f->n_inputs; k++) {
    const int t = f->inputs[k].name ? fl_graph_find(m->g, f->inputs[k].name) : -1;
    if (t >= 0 && m->g->t[t].kind == FL_GT_INPUT && m->g->t[t].dtype == FL_G_I64 &&
        f->inputs[k].dtype == FL_G_I64)
      m->g->t[t].idata = (int64_t *)f->inputs[k].data; /* ops never write it */
  }
  return FL_OK;
}

/* Run the producers of int64 tensor t (ancestors first). */
static fl_status run_ids(fl_gmodel *m, int t, unsigned char *done) {
  const fl_gtensor *x = &m->g->t[t];
  if (x->kind != FL_GT_VALUE || done[x->producer] || m->fwd_skip[x->producer]) return FL_OK;
  const int p = x->producer;
  fl_gnode *n = &m->g->nodes[p];
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= 0) FL_TRY(run_ids(m, n->in[i], done));
  done[p] = 1;
  m->ctx.node_index = (size_t)p;
  return n->op->forward(n, &m->ctx);
}

/* The ids of reader index node i into m's scratch. */
static fl_status reader_ids(fl_gmodel *m, int i, unsigned char *done, int64_t **buf,
                            size_t *cap, size_t *n) {
  const fl_graph *g = m->g;
  const int t = g->nodes[i].in[0];
  if (!int64_only(g, t))
    return FL_ERR(FL_ENOTSUP, "graph %s: node %s: the ids of a sparse table must be computed "
                  "from int64 inputs and constants only (%s is not)", g->name, g->nodes[i].name,
                  g->t[t].name);
  FL_TRY(run_ids(m, t, done));
  const size_t k = g->t[t].n;
  if (*n + k > *cap) {
    int64_t *p = realloc(*buf, (*n + k) * sizeof *p);
    if (!p) return FL_ERR(FL_ENOMEM, "graph %s: out of memory for %zu ids", g->name, *n + k);
    *buf = p;
    *cap = *n + k;
  }
  if (k) memcpy(*buf + *n, g->t[t].idata, k * sizeof **buf);
  *n += k;
  return FL_OK;
}

/* Table name's rows input in m, or FL_EINVAL (logged). */
static fl_status rows_input(fl_gmodel *m, const char *name, int *t) {
  *t = name ? fl_gmodel_rows_find(m, name) : -1;
  if (*t < 0 || m->g->t[*t].kind != FL_GT_ROWS)
    return FL_ERR(FL_EINVAL, "graph %s: ids of sparse table %s: no such rows input", m->g->name,
                  name ? name : "(null)");
  return FL_OK;
}

/* The ids of every reader of rows input t appended to *ids; the nodes
 * already run (done) are not run again. */
static fl_status table_ids(fl_gmodel *m, int t, unsigned char *done, int64_t **ids,
                           size_t *cap, size_t *n) {
  for (int i = 0; i < m->g->nn; i++) {
    const fl_gnode *r = &m->g->nodes[i];
    if (r->n_in > 1 && r->in[0] == t)
      FL_TRY(reader_ids(m, m->g->t[r->in[1]].producer, done, ids, cap, n));
  }
  return FL_OK;
}

fl_status fl_graph_model_tables_ids(void *handle, const char *const *names, size_t nt,
                                    const fl_model_feed *f, size_t batch, int64_t **ids,
                                    size_t *cap, size_t *off) {
  fl_gmodel *m = handle;
  if (!m || !names || !f || batch == 0 || batch > m->max_batch)
    return FL_ERR(FL_EINVAL, "graph %s: ids of sparse tables: NULL feed or batch out of range",
                  m ? m->g->name : "");
  FL_TRY(feed_ids(m, f));
  FL_TRY(fl_gbind(m, batch));
  /* one run of each int64 node for all tables: they share the nodes
   * before their readers (the ids modulo the vocabulary, ...) */
  unsigned char *done = calloc((size_t)m->g->nn + 1, 1);
  if (!done) return FL_ERR(FL_ENOMEM, "graph %s: out of memory", m->g->name);
  fl_status st = FL_OK;
  off[0] = 0;
  for (size_t k = 0; st == FL_OK && k < nt; k++) {
    int t = -1;
    off[k + 1] = off[k];
    st = rows_input(m, names[k], &t);
    if (st == FL_OK) st = table_ids(m, t, done, ids, cap, &off[k + 1]);
  }
  free(done);
  return st;
}

fl_status fl_graph_model_table_ids(void *handle, const char *name, const fl_model_feed *f,
                                   size_t batch, int64_t **ids, size_t *cap, size_t *n) {
  size_t off[2] = {0, 0};
  const fl_status st = fl_graph_model_tables_ids(handle, &name, 1, f, batch, ids, cap, off);
  *n = off[1];
  return st;
}
