/* graph.c - building an op graph: tensors, initializers, nodes with copied
 * attributes, the output and its loss; then validation and a stable
 * topological sort that refuses cycles.
 *
 * The builder checks what it can see from one call (unique names, known op
 * type, arity, attribute names, tensor ids); shapes wait for bind
 * (graph_bind.c), where the batch size is known. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_names.h"
#include "graph_engine.h"

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

fl_status fl_graph_new(const char *name, fl_graph **out) {
  if (!out) return FL_ERR(FL_EINVAL, "graph: NULL output");
  *out = NULL;
  fl_graph *g = calloc(1, sizeof *g);
  if (!g || !(g->name = dupstr(name ? name : "graph"))) {
    free(g);
    return FL_ERR(FL_ENOMEM, "graph %s: out of memory", name ? name : "");
  }
  g->input = g->output = -1;
  *out = g;
  return FL_OK;
}

static void free_attrs(fl_gattr *a, int n) {
  for (int i = 0; i < n; i++) {
    free((char *)a[i].name);
    free((int64_t *)a[i].ints);
    free((float *)a[i].floats);
    free((char *)a[i].s);
  }
  free(a);
}

void fl_gnode_release(fl_gnode *n) {
  if (n->op && n->op->free_state && n->state) n->op->free_state(n);
  free(n->name);
  free(n->in);
  free(n->out);
  free_attrs(n->attrs, n->n_attrs);
}

void fl_graph_free(fl_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->nn; i++) fl_gnode_release(&g->nodes[i]);
  for (int i = 0; i < g->nt; i++) {
    fl_gtensor *t = &g->t[i];
    free(t->name);
    /* PARAM/BUFFER values move into the model's arena at create; before
     * that, and for CONSTs, they are the graph's own. */
    if (t->kind == FL_GT_CONST || t->producer == -2) free(t->data);
    if (t->kind == FL_GT_CONST || t->kind == FL_GT_VALUE) free(t->idata);
  }
  free(g->t);
  free(g->nodes);
  free(g->name);
  free(g);
}

int fl_graph_find(const fl_graph *g, const char *name) {
  if (!g || !name) return -1;
  for (int i = 0; i < g->nt; i++)
    if (strcmp(g->t[i].name, name) == 0) return i;
  return -1;
}

/* Describe what first declared the tensor called name, for messages. */
static const char *origin(const fl_graph *g, int id) {
  const fl_gtensor *t = &g->t[id];
  switch (t->kind) {
  case FL_GT_INPUT: return "an input";
  case FL_GT_PARAM: return "a parameter";
  case FL_GT_BUFFER: return "a buffer";
  case FL_GT_CONST: return "a constant";
  case FL_GT_ROWS: return "a rows input";
  default: return t->producer >= 0 && t->producer < g->nn ? g->nodes[t->producer].name : "a node";
  }
}

/* A new tensor; id written to *id.  Logs duplicates and bad dims. */
static fl_status add_tensor(fl_graph *g, const char *name, fl_gtensor_kind kind, fl_gdtype dt,
                            int ndim, const int64_t *dims, const char *what, int *id) {
  if (!name || !name[0]) return FL_ERR(FL_EINVAL, "graph %s: %s with an empty name", g->name, what);
  const int dup = fl_graph_find(g, name);
  if (dup >= 0)
    return FL_ERR(FL_EINVAL, "graph %s: tensor '%s' declared twice (%s, then %s)", g->name, name,
                  origin(g, dup), what);
  if (kind != FL_GT_VALUE) {
    if (ndim < 0 || ndim > FL_G_MAX_DIMS || (ndim > 0 && !dims))
      return FL_ERR(FL_EINVAL, "graph %s: tensor '%s': rank %d outside 0..%d", g->name, name,
                    ndim, FL_G_MAX_DIMS);
    for (int d = 0; d < ndim; d++) {
      const int batch_ok = kind == FL_GT_INPUT && d == 0 && dims[d] == FL_G_BATCH;
      if (!batch_ok && dims[d] <= 0)
        return FL_ERR(FL_EINVAL, "graph %s: tensor '%s': dimension %d is %lld (only the "
                      "input's first dimension may be the batch)", g->name, name, d,
                      (long long)dims[d]);
    }
  }
  if (g->nt == g->cap_t) {
    int cap = g->cap_t ? 2 * g->cap_t : 32;
    fl_gtensor *t = realloc(g->t, (size_t)cap * sizeof *t);
    if (!t) return FL_ERR(FL_ENOMEM, "graph %s: out of memory", g->name);
    g->t = t;
    g->cap_t = cap;
  }
  fl_gtensor *t = &g->t[g->nt];
  memset(t, 0, sizeof *t);
  if (!(t->name = dupstr(name))) return FL_ERR(FL_ENOMEM, "graph %s: out of memory", g->name);
  t->kind = kind;
  t->dtype = dt;
  t->ndim = ndim;
  for (int d = 0; d < ndim; d++) t->dims[d] = dims[d];
  t->producer = -1;
  *id = g->nt++;
  return FL_OK;
}

static size_t dims_count(int ndim, const int64_t *dims) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
  return n;
}

fl_status fl_graph_input(fl_graph *g, const char *name, int ndim, const int64_t *dims, int *id) {
  if (!g) return FL_ERR(FL_EINVAL, "graph: NULL graph");
  if (g->input >= 0)
    return FL_ERR(FL_EINVAL, "graph %s: a second input '%s' (the input is '%s'; one only)",
                  g->name, name ? name : "", g->t[g->input].name);
  return fl_graph_input_typed(g, name, FL_G_F32, ndim, dims, id);
}

fl_status fl_graph_input_typed(fl_graph *g, const char *name, fl_gdtype dt, int ndim,
                               const int64_t *dims, int *id) {
  if (!g) return FL_ERR(FL_EINVAL, "graph: NULL graph");
  if (dt != FL_G_F32 && dt != FL_G_I64)
    return FL_ERR(FL_EINVAL, "graph %s: input '%s' of element type %d (float or int64 only)",
                  g->name, name ? name : "", (int)dt);
  if (ndim < 1 || !dims || dims[0] != FL_G_BATCH)
    return FL_ERR(FL_EINVAL, "graph %s: input '%s' must have the batch as its first dimension",
                  g->name, name ? name : "");
  int i;
  FL_TRY(add_tensor(g, name, FL_GT_INPUT, dt, ndim, dims, "an input", &i));
  if (g->input < 0) g->input = i;
  g->n_inputs++;
  if (id) *id = i;
  return FL_OK;
}

fl_status fl_graph_rows(fl_graph *g, const char *name, int64_t capacity, int64_t width, int *id) {
  if (!g) return FL_ERR(FL_EINVAL, "graph: NULL graph");
  const int64_t dims[2] = {capacity, width};
  int i;
  FL_TRY(add_tensor(g, name, FL_GT_ROWS, FL_G_F32, 2, dims, "a rows input", &i));
  if (id) *id = i;
  return FL_OK;
}

fl_status fl_graph_param(fl_graph *g, const char *name, int ndim, const int64_t *dims,
                         const float *init, int trainable, int *id) {
  if (!g) return FL_ERR(FL_EINVAL, "graph: NULL graph");
  int i;
  FL_TRY(add_tensor(g, name, trainable ? FL_GT_PARAM : FL_GT_BUFFER, FL_G_F32, ndim, dims,
                    trainable ? "a parameter" : "a buffer", &i));
  fl_gtensor *t = &g->t[i];
  const size_t n = dims_count(ndim, dims);
  t->data = calloc(n ? n : 1, sizeof(float));
  if (!t->data) {
    g->nt--;
    free(t->name);
    return FL_ERR(FL_ENOMEM, "graph %s: out of memory for '%s' (%zu floats)", g->name, name, n);
  }
  t->producer = -2; /* owns its data until create moves it into the arena */
  if (init) memcpy(t->data, init, n * sizeof(float));
  t->n = n;
  if (id) *id = i;
  return FL_OK;
}

fl_status fl_graph_const(fl_graph *g, const char *name, fl_gdtype dt, int ndim,
                         const int64_t *dims, const void *data, int *id) {
  if (!g) return FL_ERR(FL_EINVAL, "graph: NULL graph");
  if (dt != FL_G_F32 && dt != FL_G_I64)
    return FL_ERR(FL_EINVAL, "graph %s: constant '%s' of element type %d (float or int64 only)",
                  g->name, name ? name : "", (int)dt);
  if (!data) return FL_ERR(FL_EINVAL, "graph %s: constant '%s' without data", g->name, name ? name : "");
  int i;
  FL_TRY(add_tensor(g, name, FL_GT_CONST, dt, ndim, dims, "a constant", &i));
  fl_gtensor *t = &g->t[i];
  const size_t n = dims_count(ndim, dims);
  const size_t es = dt == FL_G_F32 ? sizeof(float) : sizeof(int64_t);
  void *p = malloc((n ? n : 1) * es);
  if (!p) {
    g->nt--;
    free(t->name);
    return FL_ERR(FL_ENOMEM, "graph %s: out of memory for constant '%s'", g->name, name);
  }
  memcpy(p, data, n * es);
  if (dt == FL_G_F32) t->data = p;
  else {
    t->idata = p;
    t->known = 1;
  }
  t->n = n;
  for (int d = 0; d < ndim; d++) t->shape[d] = dims[d];
  if (id) *id = i;
  return FL_OK;
}

/* Deep copy of n attributes into *out. */
static fl_status copy_attrs(const fl_gattr *a, int n, fl_gattr **out) {
  *out = NULL;
  if (n == 0) return FL_OK;
  fl_gattr *c = calloc((size_t)n, sizeof *c);
  if (!c) return FL_ENOMEM;
  for (int i = 0; i < n; i++) {
    c[i].kind = a[i].kind;
    c[i].i = a[i].i;
    c[i].f = a[i].f;
    c[i].n = a[i].n;
    int bad = !(c[i].name = dupstr(a[i].name));
    if (a[i].kind == FL_GA_INTS && a[i].n) {
      int64_t *v = malloc(a[i].n * sizeof *v);
      if (v) memcpy(v, a[i].ints, a[i].n * sizeof *v);
      c[i].ints = v;
      bad |= !v;
    }
    if (a[i].kind == FL_GA_FLOATS && a[i].n) {
      float *v = malloc(a[i].n * sizeof *v);
      if (v) memcpy(v, a[i].floats, a[i].n * sizeof *v);
      c[i].floats = v;
      bad |= !v;
    }
    if (a[i].kind == FL_GA_STRING) bad |= !(c[i].s = dupstr(a[i].s ? a[i].s : ""));
    if (bad) {
      free_attrs(c, i + 1);
      return FL_ENOMEM;
    }
  }
  *out = c;
  return FL_OK;
}

fl_status fl_graph_node(fl_graph *g, const char *name, const char *op_type, const int *in,
                        int n_in, const char *const *out_names, int n_out, const fl_gattr *attrs,
                        int n_attrs, int *out_ids) {
  if (!g) return FL_ERR(FL_EINVAL, "graph: NULL graph");
  const char *nm = name && name[0] ? name : (out_names && n_out > 0 && out_names[0] ? out_names[0] : "?");
  if (!op_type) return FL_ERR(FL_EINVAL, "graph %s: node %s without an op type", g->name, nm);
  const fl_gop *op = fl_gop_find(op_type);
  if (!op)
    return FL_ERR(FL_ENOTSUP, "graph %s: node %s: op type %s is not supported (supported: %s)",
                  g->name, nm, op_type, fl_gop_supported());
  if (n_in < op->min_in || n_in > op->max_in || n_out < op->min_out || n_out > op->max_out)
    return FL_ERR(FL_EINVAL, "graph %s: node %s (%s): %d inputs and %d outputs; it takes %d..%d "
                  "inputs and %d..%d outputs", g->name, nm, op_type, n_in, n_out, op->min_in,
                  op->max_in, op->min_out, op->max_out);
  if ((n_in > 0 && !in) || !out_names || n_attrs < 0 || (n_attrs > 0 && !attrs))
    return FL_ERR(FL_EINVAL, "graph %s: node %s (%s): NULL inputs, outputs or attributes",
                  g->name, nm, op_type);
  for (int i = 0; i < n_in; i++)
    if (in[i] < -1 || in[i] >= g->nt)
      return FL_ERR(FL_EINVAL, "graph %s: node %s (%s): input %d is tensor id %d, not declared",
                    g->name, nm, op_type, i, in[i]);
  for (int a = 0; a < n_attrs; a++) {
    if (!op->attrs || fl_names_find(op->attrs, attrs[a].name) < 0) {
      char list[512] = "";
      size_t len = 0;
      for (const char *const *s = op->attrs; s && *s; s++) {
        if (!strncmp(*s, "flotilla_", 9)) continue; /* internal (fused activation) */
        int w = snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", *s);
        if (w < 0 || (size_t)w >= sizeof list - len) break;
        len += (size_t)w;
      }
      return FL_ERR(FL_EINVAL, "graph %s: node %s (%s): attribute %s is not supported (it "
                    "takes: %s)", g->name, nm, op_type, attrs[a].name ? attrs[a].name : "(null)",
                    len ? list : "none");
    }
  }
  for (int o = 0; o < n_out; o++)
    if (!out_names[o] || !out_names[o][0])
      return FL_ERR(FL_EINVAL, "graph %s: node %s (%s): output %d has no name", g->name, nm,
                    op_type, o);
  if (g->nn == g->cap_n) {
    int cap = g->cap_n ? 2 * g->cap_n : 32;
    fl_gnode *n = realloc(g->nodes, (size_t)cap * sizeof *n);
    if (!n) return FL_ERR(FL_ENOMEM, "graph %s: out of memory", g->name);
    g->nodes = n;
    g->cap_n = cap;
  }
  fl_gnode *n = &g->nodes[g->nn];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->n_in = n_in;
  n->n_out = n_out;
  n->name = dupstr(nm);
  n->in = malloc((size_t)(n_in ? n_in : 1) * sizeof(int));
  n->out = malloc((size_t)n_out * sizeof(int));
  fl_status st = FL_OK;
  if (!n->name || !n->in || !n->out || copy_attrs(attrs, n_attrs, &n->attrs) != FL_OK) {
    st = FL_ERR(FL_ENOMEM, "graph %s: out of memory for node %s", g->name, nm);
    goto undo;
  }
  n->n_attrs = n_attrs;
  if (n_in) memcpy(n->in, in, (size_t)n_in * sizeof(int));
  const int nt0 = g->nt;
  for (int o = 0; o < n_out; o++) {
    /* a node's output must not be one of its own inputs or an earlier tensor */
    if ((st = add_tensor(g, out_names[o], FL_GT_VALUE, FL_G_F32, 0, NULL, n->name, &n->out[o])) !=
        FL_OK) {
      for (int k = nt0; k < g->nt; k++) free(g->t[k].name);
      g->nt = nt0;
      goto undo;
    }
    g->t[n->out[o]].producer = g->nn;
  }
  if (out_ids) memcpy(out_ids, n->out, (size_t)n_out * sizeof(int));
  g->nn++;
  return FL_OK;
undo:
  free(n->name);
  free(n->in);
  free(n->out);
  free_attrs(n->attrs, n->n_attrs);
  return st;
}

fl_status fl_graph_set_output(fl_graph *g, int id, fl_gloss loss) {
  if (!g) return FL_ERR(FL_EINVAL, "graph: NULL graph");
  if (id < 0 || id >= g->nt)
    return FL_ERR(FL_EINVAL, "graph %s: output tensor id %d is not declared", g->name, id);
  if (g->output >= 0)
    return FL_ERR(FL_EINVAL, "graph %s: output set twice ('%s', then '%s')", g->name,
                  g->t[g->output].name, g->t[id].name);
  if ((int)loss < FL_GLOSS_SOFTMAX_XENT || (int)loss > FL_GLOSS_MSE)
    return FL_ERR(FL_EINVAL, "graph %s: unknown loss %d", g->name, (int)loss);
  if (g->t[id].kind != FL_GT_VALUE)
    return FL_ERR(FL_EINVAL, "graph %s: output '%s' must be produced by a node", g->name,
                  g->t[id].name);
  g->output = id;
  g->loss = loss;
  return FL_OK;
}

fl_status fl_graph_check(const fl_graph *g) {
  if (g->output < 0) return FL_ERR(FL_EINVAL, "graph %s: no output set", g->name);
  if (g->nn == 0) return FL_ERR(FL_EINVAL, "graph %s: no nodes", g->name);
  return FL_OK;
}

fl_status fl_graph_sort(fl_graph *g) {
  const int nn = g->nn;
  int *indeg = calloc((size_t)nn + 1, sizeof *indeg);
  int *order = malloc(((size_t)nn + 1) * sizeof *order);
  int *newpos = malloc(((size_t)nn + 1) * sizeof *newpos);
  fl_gnode *sorted = malloc(((size_t)nn + 1) * sizeof *sorted);
  fl_status st = FL_OK;
  if (!indeg || !order || !newpos || !sorted) {
    st = FL_ERR(FL_ENOMEM, "graph %s: out of memory sorting %d nodes", g->name, nn);
    goto done;
  }
  for (int i = 0; i < nn; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      const int t = g->nodes[i].in[k];
      if (t >= 0 && g->t[t].producer >= 0) indeg[i]++;
    }
  /* Kahn's algorithm, always taking the lowest-numbered ready node, so a
   * graph declared in order keeps its order. */
  int done_n = 0;
  unsigned char *placed = calloc((size_t)nn + 1, 1);
  if (!placed) {
    st = FL_ERR(FL_ENOMEM, "graph %s: out of memory sorting", g->name);
    goto done;
  }
  int lo = 0;
  while (done_n < nn) {
    int pick = -1;
    for (int i = lo; i < nn; i++)
      if (!placed[i] && indeg[i] == 0) {
        pick = i;
        break;
      }
    if (pick < 0) {
      int on = -1;
      for (int i = 0; i < nn && on < 0; i++)
        if (!placed[i]) on = i;
      /* walk back along unplaced producers until a node repeats: it is on a cycle */
      unsigned char *seen = calloc((size_t)nn, 1);
      int cur = on;
      while (seen && !seen[cur]) {
        seen[cur] = 1;
        int next = -1;
        for (int k = 0; k < g->nodes[cur].n_in && next < 0; k++) {
          const int t = g->nodes[cur].in[k];
          if (t >= 0 && g->t[t].producer >= 0 && !placed[g->t[t].producer]) next = g->t[t].producer;
        }
        if (next < 0) break;
        cur = next;
      }
      free(seen);
      free(placed);
      st = FL_ERR(FL_EINVAL, "graph %s: the nodes form a cycle (node %s, op %s, is on it)",
                  g->name, g->nodes[cur].name, g->nodes[cur].op->type);
      goto done;
    }
    placed[pick] = 1;
    order[done_n++] = pick;
    for (int o = 0; o < g->nodes[pick].n_out; o++) {
      const int t = g->nodes[pick].out[o];
      for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
          if (g->nodes[i].in[k] == t) indeg[i]--;
    }
    lo = 0; /* a lower-numbered node may have become ready */
    while (lo < nn && placed[lo]) lo++;
  }
  free(placed);
  for (int i = 0; i < nn; i++) {
    sorted[i] = g->nodes[order[i]];
    newpos[order[i]] = i;
  }
  memcpy(g->nodes, sorted, (size_t)nn * sizeof *sorted);
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].producer >= 0) g->t[t].producer = newpos[g->t[t].producer];
done:
  free(indeg);
  free(order);
  free(newpos);
  free(sorted);
  return st;
}
