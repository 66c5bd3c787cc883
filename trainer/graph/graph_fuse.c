/* graph_fuse.c - the engine's graph rewrite: a Relu whose input is the
 * output of a BatchNormalization or an Add that nothing else reads is
 * folded into that node, which then writes the Relu's output itself.
 *
 * Why: in a ResNet every BatchNormalization + Relu and Add + Relu pair
 * costs a separate pass over a tensor forward, two backward, and a buffer
 * for the sum; the fused node applies the activation while the value is
 * in registers.  The results are the separate ops' bits.
 *
 * fl_graph_model_create calls fl_gfuse after the named recompute
 * checkpoints are known and before the first bind.  A sum that is the
 * graph's output or a named checkpoint is not folded.  Batch norm takes
 * the internal attribute FL_GRAPH_ACT_ATTR = "relu" (its CPU and CUDA
 * kernels apply it); an Add gets the op its row names in with_relu
 * (fl_gop_add_relu: type "Add", CPU only, so gpu graphs keep Add and Relu
 * apart).  Which ops do what is the op table's (fl_gop traits).  The fused node keeps its
 * name (messages), and the tensor between the two is left with neither
 * producer nor consumer (the planner gives it no buffer).  An imported
 * model's export writes the file's own nodes, so the rewrite never shows
 * there; a preset's export splits the attribute out again. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_engine.h"

/* How many node inputs read tensor t. */
static int readers(const fl_graph *g, int t) {
  int r = 0;
  for (int i = 0; i < g->nn; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) r += g->nodes[i].in[k] == t;
  return r;
}

/* Whether node p (the producer of Relu r's input) takes the Relu: an op
 * that folds it into its activation attribute (batch norm) and has none
 * yet, or one with a fused twin (a float Add) on the CPU. */
static int foldable(const fl_gnode *p, int device) {
  if (p->op->traits & FL_GOP_FOLDS_RELU) return !fl_gattr_find(p, FL_GRAPH_ACT_ATTR);
  return p->op->with_relu && device < 0;
}

/* Append the attribute FL_GRAPH_ACT_ATTR = "relu" to node p (owned copies,
 * as the builder's; fl_graph_free frees them). */
static fl_status add_act(fl_gnode *p) {
  fl_gattr *a = realloc(p->attrs, ((size_t)p->n_attrs + 1) * sizeof *a);
  if (!a) return FL_ENOMEM;
  p->attrs = a;
  char *name = strdup(FL_GRAPH_ACT_ATTR), *s = strdup(fl_act_name(FL_ACT_RELU));
  if (!name || !s) {
    free(name);
    free(s);
    return FL_ENOMEM;
  }
  a[p->n_attrs++] = (fl_gattr){.name = name, .kind = FL_GA_STRING, .s = s};
  return FL_OK;
}

/* Remove node r (a Relu: no attributes, state or outputs left to it) from
 * the topological order, renumbering the producers after it. */
static void drop_node(fl_graph *g, int r) {
  fl_gnode *n = &g->nodes[r];
  free(n->name);
  free(n->in);
  free(n->out);
  free(n->attrs);
  memmove(n, n + 1, (size_t)(g->nn - r - 1) * sizeof *n);
  g->nn--;
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].producer > r) g->t[t].producer--;
}

/* Fold Relu node r into its input's producer when allowed; *done = 1 when
 * it was. */
static fl_status fold(fl_gmodel *m, int r, int device, int *done) {
  fl_graph *g = m->g;
  const fl_gnode *relu = &g->nodes[r];
  const int mid = relu->in[0];
  *done = 0;
  if (mid < 0 || g->t[mid].kind != FL_GT_VALUE || g->t[mid].producer < 0 || mid == g->output ||
      m->ckpt[mid] || readers(g, mid) != 1 || relu->n_attrs)
    return FL_OK;
  const int pi = g->t[mid].producer;
  fl_gnode *p = &g->nodes[pi];
  if (p->out[0] != mid || !foldable(p, device)) return FL_OK;
  if (p->op->with_relu)
    p->op = p->op->with_relu;
  else if (add_act(p) != FL_OK)
    return FL_ERR(FL_ENOMEM, "graph %s: out of memory fusing node %s", g->name, p->name);
  const int y = relu->out[0];
  p->out[0] = y;
  g->t[y].producer = pi;
  g->t[mid].producer = -1;
  drop_node(g, r);
  *done = 1;
  return FL_OK;
}

fl_status fl_gfuse(fl_gmodel *m, int device) {
  fl_graph *g = m->g;
  for (int r = 0; r < g->nn;) {
    int done = 0;
    if (g->nodes[r].op->act == FL_ACT_RELU) FL_TRY(fold(m, r, device, &done));
    if (!done) r++;
  }
  return FL_OK;
}

/* ------------------------------------------------- constant folding */

/* Whether node n can be evaluated once now: every input present is a
 * constant, and nothing about the op or its outputs forbids it. */
static int foldable_const(const fl_graph *g, const fl_gnode *n) {
  if (n->op->domain || n->op->sparse_feed || (n->op->traits & FL_GOP_NO_FOLD)) return 0;
  int inputs = 0;
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i] < 0) continue;
    if (g->t[n->in[i]].kind != FL_GT_CONST) return 0;
    inputs++;
  }
  for (int o = 0; o < n->n_out; o++)
    if (n->out[o] == g->output) return 0;
  return inputs > 0;
}

/* Run node n (index i) on its constant inputs and turn its outputs into
 * constants that own their values. */
static fl_status fold_node(fl_graph *g, int i) {
  fl_gnode *n = &g->nodes[i];
  fl_gctx c = {.t = g->t, .batch = 1, .graph = g->name, .node_index = (size_t)i};
  size_t ws = 0, saved = 0;
  FL_TRY(n->op->infer(n, &c, &ws, &saved));
  float *wsb = calloc(ws ? ws : 1, sizeof *wsb), *sb = calloc(saved ? saved : 1, sizeof *sb);
  fl_status st = wsb && sb ? FL_OK : FL_ENOMEM;
  for (int o = 0; st == FL_OK && o < n->n_out; o++) {
    fl_gtensor *t = &g->t[n->out[o]];
    if (t->dtype == FL_G_F32)
      st = (t->data = calloc(t->n ? t->n : 1, sizeof *t->data)) ? FL_OK : FL_ENOMEM;
    else
      st = (t->idata = calloc(t->n ? t->n : 1, sizeof *t->idata)) ? FL_OK : FL_ENOMEM;
  }
  if (st == FL_ENOMEM) FL_LOGE("graph %s: out of memory folding node %s", g->name, n->name);
  n->ws = wsb, n->ws_floats = ws, n->saved = sb, n->saved_floats = saved;
  if (st == FL_OK) st = n->op->forward(n, &c);
  n->ws = n->saved = NULL;
  free(wsb);
  free(sb);
  for (int o = 0; o < n->n_out; o++) {
    fl_gtensor *t = &g->t[n->out[o]];
    t->kind = FL_GT_CONST;
    t->producer = -1;
    t->known = t->dtype == FL_G_I64;
    t->ndim = t->ndim < 0 ? 0 : t->ndim;
    for (int d = 0; d < t->ndim; d++) t->dims[d] = t->shape[d];
  }
  return st;
}

fl_status fl_gfold(fl_gmodel *m) {
  fl_graph *g = m->g;
  for (int i = 0; i < g->nn;) {
    if (!foldable_const(g, &g->nodes[i])) {
      i++;
      continue;
    }
    FL_TRY(fold_node(g, i));
    fl_gnode_release(&g->nodes[i]);
    memmove(&g->nodes[i], &g->nodes[i + 1], (size_t)(g->nn - i - 1) * sizeof g->nodes[0]);
    g->nn--;
    for (int t = 0; t < g->nt; t++)
      if (g->t[t].producer > i) g->t[t].producer--;
  }
  return FL_OK;
}
