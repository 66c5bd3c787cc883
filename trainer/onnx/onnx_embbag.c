/* onnx_embbag.c - PyTorch's nn.EmbeddingBag, as torch 1.13 exports it
 * (opsets 13 to 17), becomes one EmbeddingBag node (ops_embbag.c) on
 * import.  Why: the export is a Loop over the bags, and the engine runs no
 * control flow; one op also gives the weight table a scatter-add gradient.
 *
 * The exported pattern, for starts S (int64, bags + 1 entries):
 *   E = Slice(S, [1], [huge], [0] (, [1]))        bag ends
 *   Loop(Gather(Shape(E), 0), true) with body (i, cond):
 *     s = Unsqueeze(Gather(S, i), [0]); e = Unsqueeze(Gather(E, i), [0])
 *     rows = Gather(weight, Slice(indices, s, e, [0]))
 *     (rows = Mul(rows, Unsqueeze(Slice(psw, s, e, [0]), [1])))  per_sample_weights
 *     out = ReduceSum | ReduceMean | ReduceMax(rows, axes [0], keepdims 0)
 *     return Cast(cond), out
 * becomes EmbeddingBag(weight, indices, S, psw) with include_last_offset 1.
 * Fixed bags (2-D input X) export S = Concat(Range(0, ReduceProd(Shape(X)),
 * Gather(Shape(X), 1)), numel) and indices = Reshape(X, [-1]): those become
 * EmbeddingBag(weight, X) with no offsets.  A Loop whose body gathers
 * weight rows by such a slice but differs otherwise (another reduction,
 * per-sample weights outside mode sum) is refused, naming the node; any
 * other Loop is left to the importer, which refuses control flow.
 *
 * The rewrite never changes the source ModelProto: it makes a shallow copy
 * of the graph whose node list points at the source's nodes and at its
 * own EmbeddingBag nodes; their strings are borrowed from the source. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_names.h"
#include "onnx_embbag.h"

static char k_empty[] = "", k_op[] = "EmbeddingBag", k_mode[] = "mode",
            k_last[] = "include_last_offset";

/* One EmbeddingBag node made for a Loop. */
typedef struct made {
  Onnx__NodeProto node;
  char *in[4], *out[1];
  Onnx__AttributeProto attr[2], *attrp[2];
} made;

struct fl_onnx_embbag {
  Onnx__GraphProto graph; /* the source's, with node[] our own */
  Onnx__NodeProto **nodes;
  made *made;
  size_t n_made;
};

/* The PyTorch modes: the body's reduction and the op's mode. */
static const struct {
  const char *reduce, *mode;
} k_modes[] = {{"ReduceSum", "sum"}, {"ReduceMean", "mean"}, {"ReduceMax", "max"}};

/* A graph and the one around it (outer-scope names resolve there). */
typedef struct scope {
  const Onnx__GraphProto *g;
  const struct scope *up;
} scope;

/* What a Loop was matched to. */
typedef struct bag {
  const Onnx__NodeProto *loop;
  const char *weight, *indices, *starts, *psw, *fixed; /* fixed: 2-D indices, or NULL */
  int mode;                                            /* k_modes row, -1 before */
  const char *reduce;
} bag;

static const char *S(const char *s) { return s ? s : ""; }

static const char *label(const Onnx__NodeProto *n) {
  if (n->name && n->name[0]) return n->name;
  return n->n_output && n->output[0] ? n->output[0] : "<unnamed>";
}

/* ------------------------------------------------------------ lookups */

/* The node of sc's graph (or the graphs around it) writing name, or NULL. */
static const Onnx__NodeProto *producer(const scope *sc, const char *name) {
  for (; sc && name && name[0]; sc = sc->up)
    for (size_t i = 0; i < sc->g->n_node; i++) {
      const Onnx__NodeProto *n = sc->g->node[i];
      for (size_t j = 0; n && j < n->n_output; j++)
        if (!strcmp(S(n->output[j]), name)) return n;
    }
  return NULL;
}

/* The node writing name if it is of type op (Casts in between skipped). */
static const Onnx__NodeProto *made_by(const scope *sc, const char *name, const char *op) {
  const Onnx__NodeProto *n = producer(sc, name);
  for (int k = 0; k < 8 && n && !strcmp(S(n->op_type), "Cast") && n->n_input == 1; k++)
    n = producer(sc, n->input[0]); /* bounded: a hostile file may make a cycle of Casts */
  return n && !strcmp(S(n->op_type), op) ? n : NULL;
}

/* Input i of n, or "" when absent. */
static const char *in(const Onnx__NodeProto *n, size_t i) {
  return n && i < n->n_input ? S(n->input[i]) : "";
}

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i] && !strcmp(S(n->attribute[i]->name), name)) return n->attribute[i];
  return NULL;
}

static int64_t attr_int(const Onnx__NodeProto *n, const char *name, int64_t def) {
  const Onnx__AttributeProto *a = attr(n, name);
  return a && a->has_i ? a->i : def;
}

/* The one int64 value of tensor t, when it holds exactly one. */
static int tensor_int(const Onnx__TensorProto *t, int64_t *v) {
  if (!t || !t->has_data_type || t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__INT64)
    return 0;
  for (size_t d = 0; d < t->n_dims; d++)
    if (t->dims[d] != 1) return 0;
  if (t->has_raw_data && t->raw_data.len == sizeof *v) {
    memcpy(v, t->raw_data.data, sizeof *v); /* little-endian, as onnx_load.c requires */
    return 1;
  }
  if (!t->has_raw_data && t->n_int64_data == 1) {
    *v = t->int64_data[0];
    return 1;
  }
  return 0;
}

/* Whether name is a one-value int64 Constant (Casts skipped) equal to
 * want, or at least want when atleast. */
static int const_is(const scope *sc, const char *name, int64_t want, int atleast) {
  const Onnx__NodeProto *n = made_by(sc, name, "Constant");
  int64_t v;
  if (!n || n->n_attribute != 1) return 0;
  const Onnx__AttributeProto *a = n->attribute[0];
  if (!strcmp(S(a->name), "value_int") && a->has_i) v = a->i;
  else if (!strcmp(S(a->name), "value_ints") && a->n_ints == 1) v = a->ints[0];
  else if (!strcmp(S(a->name), "value") && tensor_int(a->t, &v)) {}
  else return 0;
  return atleast ? v >= want : v == want;
}

/* ------------------------------------------------------------ the body */

/* Unsqueeze(Gather(of, i), [0]) in the body: of (outer) into *of. */
static int bag_bound(const scope *body, const char *name, const char *iter, const char **of) {
  const Onnx__NodeProto *u = made_by(body, name, "Unsqueeze"), *g;
  if (!u || !const_is(body, in(u, 1), 0, 0) || attr(u, "axes")) return 0;
  g = made_by(body, in(u, 0), "Gather");
  if (!g || attr_int(g, "axis", 0) != 0 || strcmp(in(g, 1), iter)) return 0;
  *of = in(g, 0);
  return 1;
}

/* Slice(data, lo, hi, [0] (, [1])) of one bag: data into *data, the
 * tensors the bounds are gathered from into *lo and *hi. */
static int bag_slice(const scope *body, const char *name, const char *iter, const char **data,
                     const char **lo, const char **hi) {
  const Onnx__NodeProto *s = made_by(body, name, "Slice");
  if (!s || s->n_input < 4 || !const_is(body, in(s, 3), 0, 0)) return 0;
  if (in(s, 4)[0] && !const_is(body, in(s, 4), 1, 0)) return 0;
  *data = in(s, 0);
  return bag_bound(body, in(s, 1), iter, lo) && bag_bound(body, in(s, 2), iter, hi);
}

#define BAG_ERR(path, b, fmt, ...)                                                            \
  FL_ERR(FL_ENOTSUP, "%s: node '%s' (Loop): PyTorch's nn.EmbeddingBag export " fmt, path,     \
         label((b)->loop), __VA_ARGS__)

/* The reduction: one of k_modes over axis 0, keepdims 0. */
static fl_status bag_reduce(const char *path, const scope *body, const Onnx__NodeProto *r,
                            bag *b) {
  b->reduce = S(r->op_type);
  const int m = FL_ROWS_FIND(k_modes, b->reduce);
  if (m >= 0) b->mode = m;
  if (b->mode < 0)
    return BAG_ERR(path, b, "pools its bags with %s (mode unknown); supported: mode sum "
                   "(ReduceSum), mean (ReduceMean), max (ReduceMax): export one of those",
                   b->reduce);
  const Onnx__AttributeProto *ax = attr(r, "axes");
  const int axes0 = ax ? ax->n_ints == 1 && ax->ints[0] == 0 : const_is(body, in(r, 1), 0, 0);
  if (!axes0 || attr_int(r, "keepdims", 1) != 0)
    return BAG_ERR(path, b, "(mode %s) reduces with %s over other axes than [0] or keeps "
                   "dims; re-export with torch 1.13's symbolic", k_modes[b->mode].mode,
                   b->reduce);
  return FL_OK;
}

/* The per-sample weights: Unsqueeze(Slice(psw, lo, hi), [1]) of the bag
 * bounds the indices are sliced with (lo, hi: the tensors they come from). */
static fl_status bag_psw(const char *path, const scope *body, const Onnx__NodeProto *mul,
                         const char *iter, const char *lo, const char *hi, bag *b) {
  const Onnx__NodeProto *u = made_by(body, in(mul, 1), "Unsqueeze");
  const char *plo, *phi;
  if (!u || !const_is(body, in(u, 1), 1, 0) || attr(u, "axes") ||
      !bag_slice(body, in(u, 0), iter, &b->psw, &plo, &phi) || strcmp(plo, lo) ||
      strcmp(phi, hi))
    return BAG_ERR(path, b, "(mode %s) scales its rows by something other than "
                   "per_sample_weights; re-export with torch 1.13's symbolic",
                   k_modes[b->mode].mode);
  if (b->mode != 0)
    return BAG_ERR(path, b, "(mode %s) has per_sample_weights; they are taken with mode sum "
                   "only (as PyTorch does): export mode sum", k_modes[b->mode].mode);
  return FL_OK;
}

/* ------------------------------------------------------------ the loop */

/* Gather(Shape(x), d) (Casts skipped). */
static int shape_dim_of(const scope *sc, const char *name, const char *x, int64_t d) {
  const Onnx__NodeProto *g = made_by(sc, name, "Gather");
  const Onnx__NodeProto *sh = g ? made_by(sc, in(g, 0), "Shape") : NULL;
  return sh && attr_int(g, "axis", 0) == 0 && const_is(sc, in(g, 1), d, 0) &&
         !strcmp(in(sh, 0), x) && !sh->n_attribute;
}

/* The bag ends are the starts from entry 1 on, and the loop runs once per
 * bag, to the end: E = Slice(S, [1], [huge], [0] (, [1])), trip count
 * Gather(Shape(E), 0), the conditions constant true. */
static int bag_loop(const scope *outer, const scope *body, const char *starts,
                    const char *ends, const Onnx__NodeProto *loop) {
  const Onnx__NodeProto *e = made_by(outer, ends, "Slice");
  if (!e || strcmp(in(e, 0), starts) || !const_is(outer, in(e, 1), 1, 0) ||
      !const_is(outer, in(e, 2), INT32_MAX, 1) || !const_is(outer, in(e, 3), 0, 0) ||
      (in(e, 4)[0] && !const_is(outer, in(e, 4), 1, 0)))
    return 0;
  return loop->n_input == 2 && loop->n_output == 1 && shape_dim_of(outer, in(loop, 0), ends, 0) &&
         const_is(outer, in(loop, 1), 1, 0) &&
         const_is(body, S(body->g->output[0]->name), 1, 0);
}

/* Fixed bags of a 2-D X: indices = Reshape(X, [-1]), starts =
 * Concat(Range(0, ReduceProd(Shape(X)), Gather(Shape(X), 1)),
 * Unsqueeze(Gather(Shape(indices), 0), [0])).  Sets b->fixed to X. */
static void bag_fixed(const scope *outer, bag *b) {
  const Onnx__NodeProto *r = made_by(outer, b->indices, "Reshape");
  const Onnx__NodeProto *c = made_by(outer, b->starts, "Concat");
  if (!r || !c || c->n_input != 2 || attr_int(c, "axis", 1) != 0 ||
      !const_is(outer, in(r, 1), -1, 0))
    return;
  const char *x = in(r, 0);
  const Onnx__NodeProto *rg = made_by(outer, in(c, 0), "Range");
  const Onnx__NodeProto *p = rg ? made_by(outer, in(rg, 1), "ReduceProd") : NULL;
  const Onnx__NodeProto *sh = p ? made_by(outer, in(p, 0), "Shape") : NULL;
  const Onnx__NodeProto *u = made_by(outer, in(c, 1), "Unsqueeze");
  if (!sh || strcmp(in(sh, 0), x) || sh->n_attribute || p->n_input != 1 ||
      attr(p, "axes") || attr_int(p, "keepdims", 1) != 0 || !const_is(outer, in(rg, 0), 0, 0) ||
      !shape_dim_of(outer, in(rg, 2), x, 1) || !u || !const_is(outer, in(u, 1), 0, 0) ||
      !shape_dim_of(outer, in(u, 0), b->indices, 0))
    return;
  b->fixed = x;
}

/* Match loop: *is_bag 1 once its body gathers rows by a bag's slice (then
 * anything else unlike PyTorch's export is refused, logged). */
static fl_status match_loop(const char *path, const scope *outer, bag *b, int *is_bag) {
  const Onnx__AttributeProto *ba = attr(b->loop, "body");
  *is_bag = 0;
  if (!ba || !ba->g || ba->g->n_input != 2 || ba->g->n_output != 2 || !ba->g->input[0] ||
      !ba->g->output[0] || !ba->g->output[1])
    return FL_OK;
  const scope body = {ba->g, outer};
  const char *iter = S(ba->g->input[0]->name), *ends;
  const Onnx__NodeProto *r = producer(&body, S(ba->g->output[1]->name));
  const Onnx__NodeProto *mul = made_by(&body, in(r, 0), "Mul");
  const Onnx__NodeProto *g = made_by(&body, mul ? in(mul, 0) : in(r, 0), "Gather");
  if (!r || !g || attr_int(g, "axis", 0) != 0 ||
      !bag_slice(&body, in(g, 1), iter, &b->indices, &b->starts, &ends))
    return FL_OK;
  *is_bag = 1;
  b->weight = in(g, 0);
  FL_TRY(bag_reduce(path, &body, r, b));
  if (mul) FL_TRY(bag_psw(path, &body, mul, iter, b->starts, ends, b));
  if (!bag_loop(outer, &body, b->starts, ends, b->loop))
    return BAG_ERR(path, b, "(mode %s) does not run once per bag of consecutive offsets; "
                   "re-export with torch 1.13's symbolic", k_modes[b->mode].mode);
  bag_fixed(outer, b);
  return FL_OK;
}

/* The EmbeddingBag node for b: strings borrowed from the source graph. */
static void make_node(made *m, const bag *b) {
  static const Onnx__NodeProto node0 = ONNX__NODE_PROTO__INIT;
  static const Onnx__AttributeProto attr0 = ONNX__ATTRIBUTE_PROTO__INIT;
  size_t k = 0;
  m->node = node0;
  m->in[k++] = (char *)b->weight;
  m->in[k++] = (char *)(b->fixed ? b->fixed : b->indices);
  if (!b->fixed || b->psw) m->in[k++] = b->fixed ? k_empty : (char *)b->starts;
  if (b->psw) m->in[k++] = (char *)b->psw;
  m->out[0] = b->loop->output[0];
  m->attr[0] = m->attr[1] = attr0;
  m->attr[0].name = k_mode;
  m->attr[0].has_type = 1;
  m->attr[0].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  m->attr[0].s.data = (uint8_t *)(uintptr_t)k_modes[b->mode].mode; /* read only */
  m->attr[0].s.len = strlen(k_modes[b->mode].mode);
  m->attr[1].name = k_last;
  m->attr[1].has_type = m->attr[1].has_i = 1;
  m->attr[1].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  m->attr[1].i = 1;
  m->attrp[0] = &m->attr[0];
  m->attrp[1] = &m->attr[1];
  m->node.name = b->loop->name;
  m->node.op_type = k_op;
  m->node.n_input = k;
  m->node.input = m->in;
  m->node.n_output = 1;
  m->node.output = m->out;
  m->node.n_attribute = b->fixed ? 1 : 2;
  m->node.attribute = m->attrp;
}

/* ------------------------------------------------------------ the rewrite */

fl_status fl_onnx_embbag_rewrite(const char *path, const Onnx__GraphProto *g,
                                 fl_onnx_embbag **out) {
  size_t loops = 0;
  *out = NULL;
  for (size_t i = 0; i < g->n_node; i++)
    if (g->node[i] && !strcmp(S(g->node[i]->op_type), "Loop")) loops++;
  if (!loops) return FL_OK;
  fl_onnx_embbag *rw = calloc(1, sizeof *rw);
  if (rw) rw->nodes = malloc(g->n_node * sizeof *rw->nodes);
  if (rw && rw->nodes) rw->made = calloc(loops, sizeof *rw->made);
  if (!rw || !rw->nodes || !rw->made) {
    fl_onnx_embbag_free(rw);
    return FL_ERR(FL_ENOMEM, "%s: out of memory", path);
  }
  rw->graph = *g;
  rw->graph.node = rw->nodes;
  const scope outer = {g, NULL};
  for (size_t i = 0; i < g->n_node; i++) {
    rw->nodes[i] = g->node[i];
    if (!g->node[i] || strcmp(S(g->node[i]->op_type), "Loop") || S(g->node[i]->domain)[0])
      continue;
    bag b = {.loop = g->node[i], .mode = -1};
    int is_bag;
    const fl_status st = match_loop(path, &outer, &b, &is_bag);
    if (st != FL_OK) {
      fl_onnx_embbag_free(rw);
      return st;
    }
    if (!is_bag) continue;
    make_node(&rw->made[rw->n_made], &b);
    rw->nodes[i] = &rw->made[rw->n_made++].node;
  }
  *out = rw;
  return FL_OK;
}

const Onnx__GraphProto *fl_onnx_embbag_graph(const fl_onnx_embbag *rw,
                                             const Onnx__GraphProto *g) {
  return rw ? &rw->graph : g;
}

int fl_onnx_embbag_made(const fl_onnx_embbag *rw, const Onnx__NodeProto *n) {
  for (size_t i = 0; rw && i < rw->n_made; i++)
    if (&rw->made[i].node == n) return 1;
  return 0;
}

void fl_onnx_embbag_free(fl_onnx_embbag *rw) {
  if (!rw) return;
  free(rw->nodes);
  free(rw->made);
  free(rw);
}
