/* onnx_load.c - the ONNX importer (fl_onnx.h): a ModelProto unpacked by
 * protobuf-c becomes builder calls on an fl_graph.
 *
 * The file is checked as a whole before the first builder call, so that a
 * bad file gets one message naming the culprit: every value name is
 * defined once (graph input, initializer or node output), every node input
 * is defined, the nodes form no cycle, the opset is one the ops implement.
 * Then the nodes the chosen output depends on are declared in topological
 * order; each node's op, domain, attributes and each tensor's dtype and
 * dims are checked as it is declared (the engine checks arity, attribute
 * names and, at bind, shapes). */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_model.h"
#include "fl_onnx.h"
#include "graph_internal.h"
#include "onnx_embbag.h"
#include "onnx_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ONNX raw_data is little-endian; this importer copies it as host order"
#endif

/* Elements a per-sample input may have (4 GiB of floats per sample is far
 * beyond any model this trainer runs; the bound keeps products exact). */
#define MAX_SAMPLE_ELEMS ((int64_t)1 << 30)

enum { V_INPUT = 0, V_INIT = 1, V_NODE = 2 };

/* One named value of the ONNX graph. */
typedef struct val {
  const char *name;
  int kind;   /* V_* */
  int index;  /* the initializer, graph input or producing node */
  int id;     /* fl_graph tensor id once declared, -1 before */
  int buffer; /* initializer read as BatchNormalization mean / var */
  int diff;   /* initializer read by an input that takes a gradient */
} val;

typedef struct loader {
  const char *path;
  const Onnx__GraphProto *g;
  fl_graph *fg;
  val *v;
  size_t nv, capv;
  int *slot; /* open-addressing table of value indices, -1 = empty */
  size_t nslot;
  int *order;          /* node indices in topological order */
  unsigned char *need; /* per node: the output depends on it */
  int opset;           /* the model's opset of the default domain */
  fl_onnx_embbag *rw;  /* nn.EmbeddingBag Loops rewritten (onnx_embbag.c), or NULL */
} loader;

static const char *S(const char *s) { return s ? s : ""; }

/* ------------------------------------------------------------ value table */

static size_t hash(const char *s) {
  size_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* Index of the value called name, or -1. */
static int find(const loader *L, const char *name) {
  if (!L->nslot) return -1;
  for (size_t i = hash(name) & (L->nslot - 1);; i = (i + 1) & (L->nslot - 1)) {
    int k = L->slot[i];
    if (k < 0) return -1;
    if (!strcmp(L->v[k].name, name)) return k;
  }
}

/* Add a value (the name must be new; the caller checked with find). */
static void add(loader *L, const char *name, int kind, int index) {
  int k = (int)L->nv++;
  L->v[k] = (val){.name = name, .kind = kind, .index = index, .id = -1};
  size_t i = hash(name) & (L->nslot - 1);
  while (L->slot[i] >= 0) i = (i + 1) & (L->nslot - 1);
  L->slot[i] = k;
}

/* How a node is called in messages: its name, else its first output. */
static const char *node_label(const Onnx__NodeProto *n) {
  if (n->name && n->name[0]) return n->name;
  if (n->n_output && n->output[0] && n->output[0][0]) return n->output[0];
  return "<unnamed>";
}

#define NODE_ERR(L, n, code, fmt, ...)                                                      \
  FL_ERR(code, "%s: node '%s' (%s): " fmt, (L)->path, node_label(n), S((n)->op_type),     \
         __VA_ARGS__)

/* ------------------------------------------------------------ tensors */

/* Product of dims times elsize without overflow: 0 on overflow. */
static int dims_bytes(size_t nd, const int64_t *dims, size_t elsize, size_t *n, size_t *bytes) {
  size_t e = 1;
  for (size_t i = 0; i < nd; i++) {
    if (dims[i] < 0) return 0;
    if (__builtin_mul_overflow(e, (size_t)dims[i], &e)) return 0;
  }
  size_t b;
  if (__builtin_mul_overflow(e, elsize, &b) || b > FL_ONNX_MAX_FILE) return 0;
  *n = e;
  *bytes = b;
  return 1;
}

static void fmt_dims(char *buf, size_t cap, size_t nd, const int64_t *dims) {
  size_t o = (size_t)snprintf(buf, cap, "[");
  for (size_t i = 0; i < nd && o < cap; i++)
    o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)dims[i]);
  if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* The value of tensor t as the engine holds it: F32 or I64 (int32 widened,
 * bool as 0 / 1: PyTorch's training exports give Dropout a bool
 * training_mode constant and attention bool masks; the ops read them as
 * int64; double narrowed to float: PyTorch exports a Python number, such
 * as torch.clamp's bounds, as a double constant cast to float),
 * in *data (malloc'd, the caller frees) with its dims.  what names t in
 * messages ("initializer 'w'", "node 'c' (Constant)").  Logs what is
 * wrong: FL_ENOTSUP for external / segmented data, another dtype or too
 * many dims; FL_EINVAL for negative or overflowing dims or a data size
 * that does not match them; FL_ENOMEM. */
static fl_status tensor_value(const loader *L, const Onnx__TensorProto *t, const char *what,
                              fl_gdtype *dt, int *ndim, int64_t *dims, void **data, size_t *count) {
  char db[160];
  *data = NULL;
  if ((t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
      t->n_external_data)
    return FL_ERR(FL_ENOTSUP, "%s: %s keeps its data in an external file; only tensors stored "
                  "inside the model are supported (onnx.save_model(..., "
                  "save_as_external_data=False))", L->path, what);
  if (t->segment)
    return FL_ERR(FL_ENOTSUP, "%s: %s is a segment of a tensor; segmented tensors are not "
                  "supported", L->path, what);
  const int32_t src = t->has_data_type ? t->data_type : 0;
  size_t elsize;
  if (src == FL_ONNX_FLOAT) elsize = 4, *dt = FL_G_F32;
  else if (src == FL_ONNX_INT64) elsize = 8, *dt = FL_G_I64;
  else if (src == FL_ONNX_INT32) elsize = 4, *dt = FL_G_I64;
  else if (src == FL_ONNX_BOOL) elsize = 1, *dt = FL_G_I64;
  else if (src == FL_ONNX_DOUBLE) elsize = 8, *dt = FL_G_F32;
  else
    return FL_ERR(FL_ENOTSUP, "%s: %s has dtype %s; supported: float, double (read as float), "
                  "int64, int32, bool",
                  L->path, what, fl_onnx_dtype_name(src));
  if (t->n_dims > FL_G_MAX_DIMS)
    return FL_ERR(FL_ENOTSUP, "%s: %s has %zu dims, at most %d are supported", L->path, what,
                  t->n_dims, FL_G_MAX_DIMS);
  size_t n, bytes;
  fmt_dims(db, sizeof db, t->n_dims, t->dims);
  if (!dims_bytes(t->n_dims, t->dims, elsize, &n, &bytes))
    return FL_ERR(FL_EINVAL, "%s: %s has dims %s: negative, or more elements than a model "
                  "file can hold", L->path, what, db);
  const void *from;
  if (t->has_raw_data) {
    if (t->raw_data.len != bytes)
      return FL_ERR(FL_EINVAL, "%s: %s holds %zu bytes of raw data; its dims %s of %s need %zu",
                    L->path, what, t->raw_data.len, db, fl_onnx_dtype_name(src), bytes);
    from = t->raw_data.data;
  } else {
    /* typed fields: bool and int32 both live in int32_data */
    size_t have = src == FL_ONNX_FLOAT ? t->n_float_data
                  : src == FL_ONNX_INT64 ? t->n_int64_data
                  : src == FL_ONNX_DOUBLE ? t->n_double_data : t->n_int32_data;
    if (have != n)
      return FL_ERR(FL_EINVAL, "%s: %s holds %zu %s values; its dims %s need %zu", L->path, what,
                    have, fl_onnx_dtype_name(src), db, n);
    from = src == FL_ONNX_FLOAT ? (const void *)t->float_data
           : src == FL_ONNX_INT64 ? (const void *)t->int64_data
           : src == FL_ONNX_DOUBLE ? (const void *)t->double_data : (const void *)t->int32_data;
    if (src == FL_ONNX_BOOL) elsize = 4; /* read as int32 below */
  }
  void *out = malloc(n ? n * (*dt == FL_G_F32 ? 4 : 8) : 1);
  if (!out) return FL_ERR(FL_ENOMEM, "%s: %s: out of memory", L->path, what);
  if (src == FL_ONNX_BOOL) {
    int64_t *o = out;
    for (size_t i = 0; i < n; i++) {
      int32_t x = 0;
      memcpy(&x, (const char *)from + elsize * i, elsize); /* little-endian: low byte first */
      o[i] = x != 0;
    }
  } else if (src == FL_ONNX_DOUBLE) {
    float *o = out;
    for (size_t i = 0; i < n; i++) {
      double x;
      memcpy(&x, (const char *)from + 8 * i, 8);
      o[i] = (float)x;
    }
  } else if (src == FL_ONNX_INT32) {
    int64_t *o = out;
    for (size_t i = 0; i < n; i++) {
      int32_t x;
      memcpy(&x, (const char *)from + 4 * i, 4);
      o[i] = x;
    }
  } else if (n) {
    memcpy(out, from, bytes);
  }
  *ndim = (int)t->n_dims;
  for (size_t i = 0; i < t->n_dims; i++) dims[i] = t->dims[i];
  *data = out;
  *count = n;
  return FL_OK;
}

/* Declare initializer v (k = its value index): F32 -> parameter (buffer
 * for BatchNormalization statistics; a constant when no op takes a
 * gradient through it, e.g. Dropout's ratio: its gradient would be 0 and
 * weight decay would still move it), I64 -> constant. */
static fl_status declare_init(loader *L, int k) {
  val *v = &L->v[k];
  const Onnx__TensorProto *t = L->g->initializer[v->index];
  char what[320];
  snprintf(what, sizeof what, "initializer '%.256s'", v->name);
  fl_gdtype dt;
  int ndim;
  int64_t dims[FL_G_MAX_DIMS];
  void *data;
  size_t n;
  FL_TRY(tensor_value(L, t, what, &dt, &ndim, dims, &data, &n));
  fl_status st;
  if (dt == FL_G_F32 && !v->buffer && !v->diff) {
    st = fl_graph_const(L->fg, v->name, dt, ndim, dims, data, &v->id);
  } else if (dt == FL_G_F32) {
    if (strlen(v->name) >= FL_MODEL_NAME_MAX)
      st = FL_ERR(FL_ENOTSUP, "%s: %s: the name is %zu bytes, parameter names may have at most "
                  "%d", L->path, what, strlen(v->name), FL_MODEL_NAME_MAX - 1);
    else
      st = fl_graph_param(L->fg, v->name, ndim, dims, data, !v->buffer, &v->id);
  } else {
    st = fl_graph_const(L->fg, v->name, dt, ndim, dims, data, &v->id);
  }
  free(data);
  return st;
}

/* ------------------------------------------------------------ nodes */

/* A Constant node becomes a constant tensor named after its output. */
static fl_status fold_constant(loader *L, const Onnx__NodeProto *n, int k) {
  if (n->n_attribute != 1 || !n->attribute[0])
    return NODE_ERR(L, n, FL_EINVAL, "has %zu attributes; a Constant has exactly one value "
                    "attribute", n->n_attribute);
  const Onnx__AttributeProto *a = n->attribute[0];
  const char *an = S(a->name);
  char what[320];
  snprintf(what, sizeof what, "node '%.200s' (Constant)", node_label(n));
  fl_gdtype dt;
  int ndim = 0;
  int64_t dims[FL_G_MAX_DIMS];
  void *data = NULL;
  size_t cnt;
  fl_status st;
  if (!strcmp(an, "value") && a->t) {
    FL_TRY(tensor_value(L, a->t, what, &dt, &ndim, dims, &data, &cnt));
  } else if (!strcmp(an, "value_float") && a->has_f) {
    dt = FL_G_F32;
    if (!(data = malloc(sizeof(float)))) return FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
    memcpy(data, &a->f, sizeof(float));
  } else if (!strcmp(an, "value_int") && a->has_i) {
    dt = FL_G_I64;
    if (!(data = malloc(sizeof(int64_t)))) return FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
    memcpy(data, &a->i, sizeof(int64_t));
  } else if (!strcmp(an, "value_floats") || !strcmp(an, "value_ints")) {
    const int fl = an[6] == 'f';
    size_t m = fl ? a->n_floats : a->n_ints;
    dt = fl ? FL_G_F32 : FL_G_I64;
    ndim = 1;
    dims[0] = (int64_t)m;
    if (!(data = malloc(m ? m * 8 : 1))) return FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
    if (m) memcpy(data, fl ? (const void *)a->floats : (const void *)a->ints, m * (fl ? 4 : 8));
  } else {
    return NODE_ERR(L, n, FL_ENOTSUP, "attribute '%s' is not supported; a Constant must hold "
                    "value (a float, int64 or int32 tensor), value_float(s) or value_int(s)", an);
  }
  st = fl_graph_const(L->fg, L->v[k].name, dt, ndim, dims, data, &L->v[k].id);
  free(data);
  return st;
}

/* A STRINGS attribute as one string, its entries joined by ',' (which
 * no entry may hold), into *out (the caller frees it). */
static fl_status join_strings(const loader *L, const Onnx__NodeProto *n,
                              const Onnx__AttributeProto *a, char **out) {
  size_t len = 1;
  for (size_t k = 0; k < a->n_strings; k++) {
    const ProtobufCBinaryData *e = &a->strings[k];
    if (e->len && (memchr(e->data, '\0', e->len) || memchr(e->data, ',', e->len)))
      return NODE_ERR(L, n, FL_EINVAL, "strings attribute '%s' entry %zu holds a NUL or a ','",
                      S(a->name), k);
    len += e->len + 1;
  }
  if (!(*out = malloc(len))) return FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
  size_t at = 0;
  for (size_t k = 0; k < a->n_strings; k++) {
    if (k) (*out)[at++] = ',';
    if (a->strings[k].len) memcpy(*out + at, a->strings[k].data, a->strings[k].len);
    at += a->strings[k].len;
  }
  (*out)[at] = '\0';
  return FL_OK;
}

/* The attributes of node n as fl_gattr (strings copied into *strs, which
 * the caller frees along with *out). */
static fl_status convert_attrs(const loader *L, const Onnx__NodeProto *n, fl_gattr **out,
                               char ***strs) {
  const size_t na = n->n_attribute;
  fl_gattr *at = calloc(na ? na : 1, sizeof *at);
  char **ss = calloc(na ? na : 1, sizeof *ss);
  *out = at;
  *strs = ss;
  if (!at || !ss) return FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
  for (size_t i = 0; i < na; i++) {
    const Onnx__AttributeProto *a = n->attribute[i];
    const char *an = a ? S(a->name) : "";
    if (!a || !an[0]) return NODE_ERR(L, n, FL_EINVAL, "attribute %zu has no name", i);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(an, at[j].name))
        return NODE_ERR(L, n, FL_EINVAL, "attribute '%s' is given twice", an);
    if (!strncmp(an, "flotilla_", 9))
      return NODE_ERR(L, n, FL_ENOTSUP, "attribute '%s' is not an ONNX attribute", an);
    if (a->ref_attr_name && a->ref_attr_name[0])
      return NODE_ERR(L, n, FL_ENOTSUP, "attribute '%s' refers to a function attribute; "
                      "functions are not supported", an);
    at[i].name = an;
    const int type = a->has_type ? (int)a->type : 0;
    switch (type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
      at[i].kind = FL_GA_FLOAT, at[i].f = a->f;
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
      at[i].kind = FL_GA_INT, at[i].i = a->i;
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
      at[i].kind = FL_GA_FLOATS, at[i].floats = a->floats, at[i].n = a->n_floats;
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
      at[i].kind = FL_GA_INTS, at[i].ints = a->ints, at[i].n = a->n_ints;
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
      if (a->s.len && memchr(a->s.data, '\0', a->s.len))
        return NODE_ERR(L, n, FL_EINVAL, "string attribute '%s' holds a NUL byte", an);
      if (!(ss[i] = malloc(a->s.len + 1))) return FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
      if (a->s.len) memcpy(ss[i], a->s.data, a->s.len);
      ss[i][a->s.len] = '\0';
      at[i].kind = FL_GA_STRING, at[i].s = ss[i];
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: /* comma-joined (RNN activations) */
      FL_TRY(join_strings(L, n, a, &ss[i]));
      at[i].kind = FL_GA_STRING, at[i].s = ss[i];
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
      /* ConstantOfShape's fill value: a one-element tensor. */
      const fl_gop *op = fl_gop_find(S(n->op_type));
      if (!op || !(op->traits & FL_GOP_TENSOR_VALUE) || strcmp(an, "value") || !a->t)
        return NODE_ERR(L, n, FL_ENOTSUP, "tensor attribute '%s' is not supported (only the "
                        "value of an op that takes a one-element tensor: ConstantOfShape)", an);
      fl_gdtype dt;
      int nd;
      int64_t dims[FL_G_MAX_DIMS];
      void *data;
      size_t cnt;
      char what[320];
      snprintf(what, sizeof what, "node '%.200s' (ConstantOfShape) attribute value",
               node_label(n));
      FL_TRY(tensor_value(L, a->t, what, &dt, &nd, dims, &data, &cnt));
      if (cnt != 1) {
        free(data);
        return NODE_ERR(L, n, FL_EINVAL, "attribute value must hold one element, it holds %zu",
                        cnt);
      }
      if (dt == FL_G_F32) at[i].kind = FL_GA_FLOAT, at[i].f = *(float *)data;
      else at[i].kind = FL_GA_INT, at[i].i = *(int64_t *)data;
      free(data);
      break;
    }
    case 0:
      return NODE_ERR(L, n, FL_EINVAL, "attribute '%s' has no type", an);
    default:
      return NODE_ERR(L, n, FL_ENOTSUP, "attribute '%s' has a type (%d) no supported op takes; "
                      "supported: int, float, ints, floats, string, strings", an, type);
    }
  }
  return FL_OK;
}

/* Declare node n (index ni): its initializer inputs first, then the node. */
static fl_status declare_node(loader *L, int ni) {
  const Onnx__NodeProto *n = L->g->node[ni];
  const char *op = S(n->op_type);
  const char *dom = S(n->domain);
  if (dom[0] && strcmp(dom, "ai.onnx"))
    return NODE_ERR(L, n, FL_ENOTSUP, "domain '%s' is not supported; only ONNX's default "
                    "domain (ai.onnx) is", dom);
  const fl_gop *gop = fl_gop_find(op);
  if (gop && (gop->traits & FL_GOP_IMPORT_FOLD)) {
    if (n->n_input || n->n_output != 1)
      return NODE_ERR(L, n, FL_EINVAL, "a Constant has no input and one output, this one has %zu "
                      "and %zu", n->n_input, n->n_output);
    return fold_constant(L, n, find(L, n->output[0]));
  }
  for (size_t i = 0; i < n->n_attribute; i++) /* control flow: say so before "unknown op" */
    if (n->attribute[i] && n->attribute[i]->has_type &&
        (n->attribute[i]->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH ||
         n->attribute[i]->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS))
      return NODE_ERR(L, n, FL_ENOTSUP, "attribute '%s' holds a subgraph; control flow (If, "
                      "Loop, Scan) is not supported", S(n->attribute[i]->name));
  if (!gop || (gop->domain && !fl_onnx_embbag_made(L->rw, n))) /* Flotilla's own: not ONNX's */
    return NODE_ERR(L, n, FL_ENOTSUP, "op type '%s' is not supported; supported: %s", op,
                    fl_gop_supported());
  if ((gop->opset_min && L->opset < gop->opset_min) ||
      (gop->opset_max && L->opset > gop->opset_max))
    return NODE_ERR(L, n, FL_ENOTSUP, "%s as opset %d defines it is not supported (this op is "
                    "taken at opsets %d to %d): export with an opset_version in that range", op,
                    L->opset, gop->opset_min ? gop->opset_min : FL_ONNX_OPSET_MIN,
                    gop->opset_max ? gop->opset_max : FL_ONNX_OPSET_MAX);
  /* omitted trailing outputs are dropped; an omitted middle one gets a
   * private name (the engine names every output) */
  size_t nout = n->n_output;
  while (nout && !S(n->output[nout - 1])[0]) nout--;
  int *in = calloc(n->n_input ? n->n_input : 1, sizeof *in);
  const char **outn = calloc(nout ? nout : 1, sizeof *outn);
  char **priv = calloc(nout ? nout : 1, sizeof *priv);
  int *oid = calloc(nout ? nout : 1, sizeof *oid);
  fl_gattr *at = NULL;
  char **ss = NULL;
  fl_status st = FL_OK;
  if (!in || !outn || !priv || !oid) {
    st = FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
    goto done;
  }
  for (size_t i = 0; i < n->n_input; i++) {
    const char *nm = S(n->input[i]);
    if (!nm[0]) {
      in[i] = -1;
      continue;
    }
    int k = find(L, nm);
    if (L->v[k].id < 0 && L->v[k].kind == V_INIT && (st = declare_init(L, k)) != FL_OK) goto done;
    in[i] = L->v[k].id;
  }
  for (size_t i = 0; i < nout; i++) {
    const char *nm = S(n->output[i]);
    if (nm[0]) {
      outn[i] = nm;
      continue;
    }
    size_t len = strlen(node_label(n)) + 32;
    if (!(priv[i] = malloc(len))) {
      st = FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
      goto done;
    }
    snprintf(priv[i], len, "%s:omitted_output_%zu", node_label(n), i);
    if (find(L, priv[i]) >= 0) {
      st = NODE_ERR(L, n, FL_EINVAL, "cannot name omitted output %zu", i);
      goto done;
    }
    outn[i] = priv[i];
  }
  if ((st = convert_attrs(L, n, &at, &ss)) != FL_OK) goto done;
  st = fl_graph_node(L->fg, node_label(n), op, in, (int)n->n_input, outn, (int)nout, at,
                     (int)n->n_attribute, oid);
  if (st != FL_OK) goto done;
  for (size_t i = 0; i < nout; i++)
    if (!priv[i]) L->v[find(L, outn[i])].id = oid[i];
done:
  if (ss)
    for (size_t i = 0; i < n->n_attribute; i++) free(ss[i]);
  if (priv)
    for (size_t i = 0; i < nout; i++) free(priv[i]);
  free(ss);
  free(at);
  free(priv);
  free(in);
  free(outn);
  free(oid);
  return st;
}

/* ------------------------------------------------------------ whole graph */

/* The model's opset of the default domain into *opset, refused outside
 * what the importer takes. */
static fl_status check_opset(const char *path, const Onnx__ModelProto *m, int *opset) {
  int64_t v = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (!o) continue;
    const char *d = S(o->domain);
    if (d[0] && strcmp(d, "ai.onnx")) continue; /* other domains: refused per node */
    v = o->has_version ? o->version : 0;
  }
  if (v < 0)
    return FL_ERR(FL_EINVAL, "%s: the model imports no opset of the default domain (ai.onnx)",
                  path);
  if (v < FL_ONNX_OPSET_MIN || v > FL_ONNX_OPSET_MAX)
    return FL_ERR(FL_ENOTSUP, "%s: opset %lld of the default domain; supported: %d to %d "
                  "(export with opset_version in that range)", path, (long long)v,
                  FL_ONNX_OPSET_MIN, FL_ONNX_OPSET_MAX);
  *opset = (int)v;
  return FL_OK;
}

/* The element types a data input may have and what the engine holds
 * them as: float16 is fed widened to float, int32 and bool as int64. */
static const struct {
  int32_t onnx;
  fl_gdtype dt;
} k_input_types[] = {{FL_ONNX_FLOAT, FL_G_F32},
                     {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, FL_G_F32},
                     {FL_ONNX_INT64, FL_G_I64},
                     {FL_ONNX_INT32, FL_G_I64},
                     {FL_ONNX_BOOL, FL_G_I64}};

/* A data input: a float, float16, int64, int32 or bool tensor of known
 * per-sample dims. */
static fl_status declare_input(loader *L, const Onnx__ValueInfoProto *vi, int k) {
  const char *nm = L->v[k].name;
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET)
    return FL_ERR(FL_EINVAL, "%s: graph input '%s' has no type", L->path, nm);
  if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
    return FL_ERR(FL_ENOTSUP, "%s: graph input '%s' is a sequence, map, optional or sparse "
                  "value; only a dense float tensor is supported", L->path, nm);
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  const int32_t et = tt && tt->has_elem_type ? tt->elem_type : 0;
  size_t ti = 0;
  while (ti < sizeof k_input_types / sizeof k_input_types[0] && k_input_types[ti].onnx != et) ti++;
  if (ti == sizeof k_input_types / sizeof k_input_types[0])
    return FL_ERR(FL_ENOTSUP, "%s: graph input '%s' has dtype %s; a data input must be float, "
                  "float16, int64, int32 or bool", L->path, nm, fl_onnx_dtype_name(et));
  const Onnx__TensorShapeProto *sh = tt->shape;
  if (!sh || sh->n_dim == 0)
    return FL_ERR(FL_ENOTSUP, "%s: graph input '%s' has no shape; the importer needs its rank "
                  "and the size of each dim after the batch", L->path, nm);
  if (sh->n_dim > FL_G_MAX_DIMS)
    return FL_ERR(FL_ENOTSUP, "%s: graph input '%s' has %zu dims, at most %d are supported",
                  L->path, nm, sh->n_dim, FL_G_MAX_DIMS);
  int64_t dims[FL_G_MAX_DIMS], per = 1;
  dims[0] = FL_G_BATCH;
  for (size_t i = 1; i < sh->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = sh->dim[i];
    if (!d || d->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
      return FL_ERR(FL_ENOTSUP, "%s: graph input '%s': dim %zu is %s%s%s; only the batch "
                    "dim (0) may be symbolic, the others must be fixed sizes", L->path, nm, i,
                    d && d->value_case ? "symbolic ('" : "unknown",
                    d && d->value_case ? S(d->dim_param) : "", d && d->value_case ? "')" : "");
    if (d->dim_value < 1 || d->dim_value > MAX_SAMPLE_ELEMS / per)
      return FL_ERR(FL_EINVAL, "%s: graph input '%s': dim %zu is %lld: a sample must hold "
                    "between 1 and 2^30 elements", L->path, nm, i, (long long)d->dim_value);
    per *= d->dim_value;
    dims[i] = d->dim_value;
  }
  return fl_graph_input_typed(L->fg, nm, k_input_types[ti].dt, (int)sh->n_dim, dims,
                              &L->v[k].id);
}

/* The value the loss reads: output, or the graph's only output. */
static fl_status pick_output(const loader *L, const char *output, int *k) {
  const Onnx__GraphProto *g = L->g;
  const char *nm = output && output[0] ? output : NULL;
  if (!nm) {
    if (g->n_output != 1 || !g->output[0]) {
      char list[512];
      size_t o = 0;
      list[0] = '\0';
      for (size_t i = 0; i < g->n_output && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s'%s'", i ? ", " : "",
                              g->output[i] ? S(g->output[i]->name) : "");
      return FL_ERR(FL_EINVAL, "%s: the graph has %zu outputs (%s); name the one the loss reads "
                    "with model.output", L->path, g->n_output, list);
    }
    nm = S(g->output[0]->name);
  }
  *k = find(L, nm);
  if (*k < 0 || L->v[*k].kind != V_NODE)
    return FL_ERR(FL_EINVAL, "%s: output '%s' is not computed by any node of the graph", L->path,
                  nm);
  for (size_t i = 0; i < g->n_output; i++) {
    const Onnx__ValueInfoProto *vi = g->output[i];
    if (!vi || strcmp(S(vi->name), nm) || !vi->type) continue;
    if (vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
      return FL_ERR(FL_ENOTSUP, "%s: output '%s' is a sequence, map, optional or sparse value; "
                    "the loss needs a float tensor", L->path, nm);
    const Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
    if (tt && tt->has_elem_type && tt->elem_type != FL_ONNX_FLOAT)
      return FL_ERR(FL_ENOTSUP, "%s: output '%s' has dtype %s; the loss needs float", L->path, nm,
                    fl_onnx_dtype_name(tt->elem_type));
  }
  return FL_OK;
}

/* Name every value; *inputs counts the data inputs. */
static fl_status index_values(loader *L, size_t *inputs) {
  const Onnx__GraphProto *g = L->g;
  size_t total = g->n_initializer + g->n_input;
  for (size_t i = 0; i < g->n_node; i++)
    if (g->node[i]) total += g->node[i]->n_output;
  L->capv = total ? total : 1;
  for (L->nslot = 16; L->nslot < 2 * L->capv; L->nslot *= 2) {}
  L->v = calloc(L->capv, sizeof *L->v);
  L->slot = malloc(L->nslot * sizeof *L->slot);
  if (!L->v || !L->slot) return FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
  memset(L->slot, 0xff, L->nslot * sizeof *L->slot);

  for (size_t i = 0; i < g->n_initializer; i++) {
    const char *nm = g->initializer[i] ? S(g->initializer[i]->name) : "";
    if (!nm[0]) return FL_ERR(FL_EINVAL, "%s: initializer %zu has no name", L->path, i);
    if (find(L, nm) >= 0)
      return FL_ERR(FL_EINVAL, "%s: initializer '%s' is defined twice", L->path, nm);
    add(L, nm, V_INIT, (int)i);
  }
  *inputs = 0;
  for (size_t i = 0; i < g->n_input; i++) {
    const char *nm = g->input[i] ? S(g->input[i]->name) : "";
    if (!nm[0]) return FL_ERR(FL_EINVAL, "%s: graph input %zu has no name", L->path, i);
    int k = find(L, nm);
    if (k >= 0 && L->v[k].kind == V_INIT) continue; /* an initializer listed as input */
    if (k >= 0) return FL_ERR(FL_EINVAL, "%s: graph input '%s' is listed twice", L->path, nm);
    add(L, nm, V_INPUT, (int)i);
    (*inputs)++;
  }
  if (*inputs == 0)
    return FL_ERR(FL_EINVAL, "%s: the graph has no data input (every input is an initializer)",
                  L->path);
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    if (!n) return FL_ERR(FL_EPROTO, "%s: node %zu is empty", L->path, i);
    for (size_t j = 0; j < n->n_output; j++) {
      const char *nm = S(n->output[j]);
      if (!nm[0]) continue;
      int k = find(L, nm);
      if (k >= 0)
        return NODE_ERR(L, n, FL_EINVAL, "output '%s' is already defined (%s)", nm,
                        L->v[k].kind == V_NODE ? "by another node"
                        : L->v[k].kind == V_INIT ? "as an initializer" : "as a graph input");
      add(L, nm, V_NODE, (int)i);
    }
  }
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    for (size_t j = 0; j < n->n_input; j++) {
      const char *nm = S(n->input[j]);
      if (nm[0] && find(L, nm) < 0)
        return NODE_ERR(L, n, FL_EINVAL, "input '%s' is not a graph input, an initializer or "
                        "any node's output", nm);
    }
  }
  return FL_OK;
}

/* Topological order of all nodes (Kahn); a cycle is refused naming a node
 * on or behind it. */
static fl_status sort_nodes(loader *L) {
  const Onnx__GraphProto *g = L->g;
  const size_t nn = g->n_node;
  size_t ne = 0;
  for (size_t i = 0; i < nn; i++) ne += g->node[i]->n_input;
  int *indeg = calloc(nn ? nn : 1, sizeof *indeg);
  int *start = calloc(nn + 1, sizeof *start);
  int *adj = malloc((ne ? ne : 1) * sizeof *adj);
  L->order = malloc((nn ? nn : 1) * sizeof *L->order);
  fl_status st = FL_OK;
  if (!indeg || !start || !adj || !L->order) {
    st = FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
    goto done;
  }
  /* edges producer -> consumer, in CSR form */
  for (size_t i = 0; i < nn; i++)
    for (size_t j = 0; j < g->node[i]->n_input; j++) {
      const char *nm = S(g->node[i]->input[j]);
      int k = nm[0] ? find(L, nm) : -1;
      if (k >= 0 && L->v[k].kind == V_NODE) start[L->v[k].index + 1]++, indeg[i]++;
    }
  for (size_t i = 0; i < nn; i++) start[i + 1] += start[i];
  int *fill = calloc(nn ? nn : 1, sizeof *fill);
  if (!fill) {
    st = FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
    goto done;
  }
  for (size_t i = 0; i < nn; i++)
    for (size_t j = 0; j < g->node[i]->n_input; j++) {
      const char *nm = S(g->node[i]->input[j]);
      int k = nm[0] ? find(L, nm) : -1;
      if (k >= 0 && L->v[k].kind == V_NODE) {
        int p = L->v[k].index;
        adj[start[p] + fill[p]++] = (int)i;
      }
    }
  free(fill);
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < nn; i++)
    if (!indeg[i]) L->order[tail++] = (int)i;
  while (head < tail) {
    int p = L->order[head++];
    for (int e = start[p]; e < start[p + 1]; e++)
      if (--indeg[adj[e]] == 0) L->order[tail++] = adj[e];
  }
  if (tail < nn) {
    size_t bad = 0;
    while (!indeg[bad]) bad++;
    st = NODE_ERR(L, g->node[bad], FL_EINVAL, "the graph has a cycle through or before this "
                  "node (%zu of %zu nodes can be ordered)", tail, nn);
  }
done:
  free(indeg);
  free(start);
  free(adj);
  return st;
}

/* Mark the nodes output (value index k) depends on. */
static fl_status mark_needed(loader *L, int k) {
  const Onnx__GraphProto *g = L->g;
  L->need = calloc(g->n_node ? g->n_node : 1, 1);
  int *stack = malloc((g->n_node ? g->n_node : 1) * sizeof *stack);
  if (!L->need || !stack) {
    free(stack);
    return FL_ERR(FL_ENOMEM, "%s: out of memory", L->path);
  }
  size_t sp = 0;
  L->need[L->v[k].index] = 1;
  stack[sp++] = L->v[k].index;
  while (sp) {
    const Onnx__NodeProto *n = g->node[stack[--sp]];
    for (size_t j = 0; j < n->n_input; j++) {
      const char *nm = S(n->input[j]);
      int q = nm[0] ? find(L, nm) : -1;
      if (q >= 0 && L->v[q].kind == V_NODE && !L->need[L->v[q].index]) {
        L->need[L->v[q].index] = 1;
        stack[sp++] = L->v[q].index;
      }
    }
  }
  free(stack);
  return FL_OK;
}

static fl_status load_model(loader *L, const Onnx__ModelProto *m, const char *output,
                            fl_gloss loss) {
  FL_TRY(check_opset(L->path, m, &L->opset));
  if (!m->graph) return FL_ERR(FL_EINVAL, "%s: the model has no graph", L->path);
  FL_TRY(fl_onnx_embbag_rewrite(L->path, m->graph, &L->rw));
  L->g = fl_onnx_embbag_graph(L->rw, m->graph);
  const Onnx__GraphProto *g = L->g;
  if (g->n_sparse_initializer)
    return FL_ERR(FL_ENOTSUP, "%s: the graph has sparse initializers; only dense tensors are "
                  "supported", L->path);
  int out;
  size_t inputs;
  FL_TRY(index_values(L, &inputs));
  FL_TRY(pick_output(L, output, &out));
  FL_TRY(sort_nodes(L));
  FL_TRY(mark_needed(L, out));
  /* BatchNormalization's running statistics are buffers; initializers no
   * op differentiates are constants */
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    if (!L->need[i]) continue;
    const fl_gop *op = fl_gop_find(S(n->op_type));
    for (size_t j = 0; j < n->n_input; j++) {
      int k = S(n->input[j])[0] ? find(L, n->input[j]) : -1;
      if (k < 0 || L->v[k].kind != V_INIT) continue;
      if (op && j < 32 && ((op->buffer_in >> j) & 1u)) L->v[k].buffer = 1;
      else if (!op || (op->backward && (j >= 32 || !((op->nodiff_in >> j) & 1u))))
        L->v[k].diff = 1;
    }
  }
  FL_TRY(fl_graph_new(L->path, &L->fg));
  for (size_t i = 0; i < g->n_input; i++) { /* every data input, in file order */
    const int k = find(L, S(g->input[i]->name));
    if (L->v[k].kind == V_INPUT) FL_TRY(declare_input(L, g->input[i], k));
  }
  for (size_t i = 0; i < g->n_node; i++)
    if (L->need[L->order[i]]) FL_TRY(declare_node(L, L->order[i]));
  return fl_graph_set_output(L->fg, L->v[out].id, loss);
}

fl_status fl_onnx_load_mem(const void *buf, size_t len, const char *name, const char *output,
                           fl_gloss loss, fl_graph **out) {
  if (!out) return FL_ERR(FL_EINVAL, "onnx: NULL output");
  *out = NULL;
  if (!buf && len) return FL_ERR(FL_EINVAL, "onnx: NULL buffer");
  if ((unsigned)loss > FL_GLOSS_MSE) return FL_ERR(FL_EINVAL, "onnx: bad loss %d", (int)loss);
  loader L = {.path = name ? name : "<memory>"};
  Onnx__ModelProto *m;
  FL_TRY(fl_onnx_unpack(buf, len, L.path, &m));
  fl_status st = load_model(&L, m, output, loss);
  if (st == FL_OK) st = fl_onnx_lint(m, L.path); /* a wrong export warned of (onnx_lint.c) */
  if (st != FL_OK) {
    fl_graph_free(L.fg);
    L.fg = NULL;
  }
  *out = L.fg;
  free(L.v);
  free(L.slot);
  free(L.order);
  free(L.need);
  fl_onnx_embbag_free(L.rw);
  onnx__model_proto__free_unpacked(m, NULL);
  return st;
}

fl_status fl_onnx_load(const char *path, const char *output, fl_gloss loss, fl_graph **out) {
  uint8_t *buf;
  size_t len;
  if (out) *out = NULL;
  if (!path || !path[0]) return FL_ERR(FL_EINVAL, "onnx: no model path (model.path)");
  FL_TRY(fl_onnx_read_file(path, "ONNX model", &buf, &len));
  fl_status st = fl_onnx_load_mem(buf, len, path, output, loss, out);
  free(buf);
  return st;
}
