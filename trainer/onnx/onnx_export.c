/* onnx_export.c - trained graphs out as ONNX (fl_onnx_export).
 *
 * An imported model goes back out as the file it came from: its
 * ModelProto is unpacked again and only the data of the initializers the
 * graph holds as parameters or buffers is replaced (as raw_data), so
 * opset imports, names, doc strings, metadata and every node stay exactly
 * as the user exported them.  A preset graph (logreg, mlp, cnn) has no such
 * file: a ModelProto of opset 17 is built from the graph itself, with the
 * engine's fused activations (the internal "flotilla_act" attribute) split
 * back into Relu / Tanh nodes and batch normalization in its inference
 * form. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_graph_inspect.h"
#include "graph_internal.h"
#include "fl_log.h"
#include "fl_onnx.h"
#include "onnx_internal.h"

/* ------------------------------------------------------------ imported */

/* Elements of a TensorProto's dims, or SIZE_MAX when they are invalid. */
static size_t tensor_count(const Onnx__TensorProto *t) {
  size_t n = 1;
  for (size_t i = 0; i < t->n_dims; i++)
    if (t->dims[i] < 0 || __builtin_mul_overflow(n, (size_t)t->dims[i], &n)) return SIZE_MAX;
  return n;
}

/* The saved fields of one initializer whose data is swapped for packing. */
typedef struct swap {
  Onnx__TensorProto *t;
  protobuf_c_boolean has_raw;
  ProtobufCBinaryData raw;
  size_t n_float;
  float *floats;
} swap;

static fl_status pack_write(const ProtobufCMessage *msg, const char *out_path) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return FL_ERR(FL_ENOMEM, "%s: out of memory for %zu bytes of ONNX", out_path, len);
  size_t got = protobuf_c_message_pack(msg, buf);
  fl_status st = got == len ? fl_onnx_write_atomic(out_path, buf, len)
                            : FL_ERR(FL_EPROTO, "%s: protobuf-c packed %zu of %zu bytes",
                                     out_path, got, len);
  free(buf);
  return st;
}

static fl_status export_imported(const char *src, const fl_graph *g, const char *out_path) {
  uint8_t *file;
  size_t flen;
  Onnx__ModelProto *m = NULL;
  swap *sw = NULL;
  unsigned char *seen = NULL;
  size_t nsw = 0;
  fl_status st = fl_onnx_read_file(src, "ONNX model", &file, &flen);
  if (st != FL_OK) return st;
  st = fl_onnx_unpack(file, flen, src, &m);
  free(file);
  if (st != FL_OK) return st;
  Onnx__GraphProto *gp = m->graph;
  const int nt = fl_graph_num_tensors(g);
  if (!gp) {
    st = FL_ERR(FL_EPROTO, "%s: the model has no graph", src);
    goto done;
  }
  sw = calloc(gp->n_initializer ? gp->n_initializer : 1, sizeof *sw);
  seen = calloc(nt ? (size_t)nt : 1, 1);
  if (!sw || !seen) {
    st = FL_ERR(FL_ENOMEM, "%s: out of memory", out_path);
    goto done;
  }
  for (size_t i = 0; i < gp->n_initializer; i++) {
    Onnx__TensorProto *t = gp->initializer[i];
    const char *name = t && t->name ? t->name : "";
    int id = fl_graph_find(g, name);
    fl_gtensor_info ti;
    if (id < 0 || fl_graph_tensor_info(g, id, &ti) != FL_OK ||
        (ti.kind != FL_GT_PARAM && ti.kind != FL_GT_BUFFER))
      continue; /* not trained: written as it was */
    size_t n = 0;
    const float *v = fl_graph_value(g, name, &n);
    if (!v || !t->has_data_type || t->data_type != FL_ONNX_FLOAT || tensor_count(t) != n) {
      st = FL_ERR(FL_EINVAL, "%s: initializer '%s' does not match the trained tensor (%zu "
                  "floats): was the file changed since training?", src, name, n);
      goto done;
    }
    float *copy = malloc(n ? n * sizeof(float) : 1);
    if (!copy) {
      st = FL_ERR(FL_ENOMEM, "%s: out of memory", out_path);
      goto done;
    }
    if (n) memcpy(copy, v, n * sizeof(float));
    sw[nsw] = (swap){t, t->has_raw_data, t->raw_data, t->n_float_data, t->float_data};
    nsw++;
    t->has_raw_data = 1;
    t->raw_data.data = (uint8_t *)copy;
    t->raw_data.len = n * sizeof(float);
    t->n_float_data = 0;
    t->float_data = NULL;
    seen[id] = 1;
  }
  for (int id = 0; id < nt; id++) {
    fl_gtensor_info ti;
    if (fl_graph_tensor_info(g, id, &ti) == FL_OK && !seen[id] &&
        (ti.kind == FL_GT_PARAM || ti.kind == FL_GT_BUFFER)) {
      st = FL_ERR(FL_EINVAL, "%s: holds no initializer '%s' of the trained model: was the file "
                  "changed since training?", src, ti.name);
      goto done;
    }
  }
  st = pack_write(&m->base, out_path);
  if (st == FL_OK)
    FL_LOGI("exported %s with its %zu trained initializers to %s", src, nsw, out_path);
done:
  for (size_t i = 0; i < nsw; i++) { /* give protobuf-c back what it allocated */
    free(sw[i].t->raw_data.data);
    sw[i].t->has_raw_data = sw[i].has_raw;
    sw[i].t->raw_data = sw[i].raw;
    sw[i].t->n_float_data = sw[i].n_float;
    sw[i].t->float_data = sw[i].floats;
  }
  free(sw);
  free(seen);
  if (m) onnx__model_proto__free_unpacked(m, NULL);
  return st;
}

/* ------------------------------------------------------------ presets */

/* Every allocation of a ModelProto under construction, freed together. */
typedef struct pool {
  void **p;
  size_t n, cap;
  int failed;
} pool;

static void *palloc(pool *P, size_t size) {
  if (P->failed) return NULL;
  if (P->n == P->cap) {
    size_t cap = P->cap ? 2 * P->cap : 256;
    void **q = realloc(P->p, cap * sizeof *q);
    if (!q) {
      P->failed = 1;
      return NULL;
    }
    P->p = q;
    P->cap = cap;
  }
  void *m = calloc(1, size ? size : 1);
  if (!m) {
    P->failed = 1;
    return NULL;
  }
  P->p[P->n++] = m;
  return m;
}

static char *pstr(pool *P, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = palloc(P, n);
  if (d) memcpy(d, s, n);
  return d;
}

static void pool_free(pool *P) {
  for (size_t i = 0; i < P->n; i++) free(P->p[i]);
  free(P->p);
}

/* A float tensor ValueInfo: dim 0 "batch", the rest from dims. */
static Onnx__ValueInfoProto *value_info(pool *P, const char *name, int ndim, const int64_t *dims) {
  Onnx__ValueInfoProto *vi = palloc(P, sizeof *vi);
  Onnx__TypeProto *tp = palloc(P, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = palloc(P, sizeof *tt);
  Onnx__TensorShapeProto *sh = palloc(P, sizeof *sh);
  Onnx__TensorShapeProto__Dimension **dv = palloc(P, (size_t)(ndim ? ndim : 1) * sizeof *dv);
  if (!vi || !tp || !tt || !sh || !dv) return NULL;
  onnx__value_info_proto__init(vi);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sh);
  for (int d = 0; d < ndim; d++) {
    Onnx__TensorShapeProto__Dimension *dm = palloc(P, sizeof *dm);
    if (!dm) return NULL;
    onnx__tensor_shape_proto__dimension__init(dm);
    if (d == 0) {
      dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dm->dim_param = pstr(P, "batch");
    } else {
      dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dm->dim_value = dims[d];
    }
    dv[d] = dm;
  }
  sh->n_dim = (size_t)ndim;
  sh->dim = dv;
  tt->has_elem_type = 1;
  tt->elem_type = FL_ONNX_FLOAT;
  tt->shape = sh;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  vi->name = pstr(P, name);
  vi->type = tp;
  return vi;
}

/* An initializer from the tensor info (values: fl_graph_value for
 * parameters and buffers, the constant's own data otherwise). */
static Onnx__TensorProto *initializer(pool *P, const fl_graph *g, const fl_gtensor_info *ti) {
  Onnx__TensorProto *t = palloc(P, sizeof *t);
  int64_t *dims = palloc(P, (size_t)(ti->ndim ? ti->ndim : 1) * sizeof *dims);
  if (!t || !dims) return NULL;
  onnx__tensor_proto__init(t);
  size_t n = 1;
  for (int d = 0; d < ti->ndim; d++) {
    dims[d] = ti->dims[d];
    n *= (size_t)ti->dims[d];
  }
  const void *src = ti->dtype == FL_G_F32 ? (const void *)ti->data : (const void *)ti->idata;
  if (ti->kind == FL_GT_PARAM || ti->kind == FL_GT_BUFFER) {
    size_t got = 0;
    src = fl_graph_value(g, ti->name, &got);
    if (src && got != n) src = NULL;
  }
  const size_t es = ti->dtype == FL_G_F32 ? 4 : 8;
  uint8_t *raw = palloc(P, n * es);
  if (!raw || !src) return NULL;
  if (n) memcpy(raw, src, n * es);
  t->name = pstr(P, ti->name);
  t->n_dims = (size_t)ti->ndim;
  t->dims = dims;
  t->has_data_type = 1;
  t->data_type = ti->dtype == FL_G_F32 ? FL_ONNX_FLOAT : FL_ONNX_INT64;
  t->has_raw_data = 1;
  t->raw_data.data = raw;
  t->raw_data.len = n * es;
  return t;
}

static Onnx__AttributeProto *attribute(pool *P, const fl_gattr *a) {
  Onnx__AttributeProto *o = palloc(P, sizeof *o);
  if (!o) return NULL;
  onnx__attribute_proto__init(o);
  o->name = pstr(P, a->name);
  o->has_type = 1;
  switch (a->kind) {
  case FL_GA_INT:
    o->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, o->has_i = 1, o->i = a->i;
    break;
  case FL_GA_FLOAT:
    o->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, o->has_f = 1, o->f = a->f;
    break;
  case FL_GA_INTS:
    o->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    o->n_ints = a->n;
    o->ints = palloc(P, a->n * sizeof(int64_t));
    if (o->ints && a->n) memcpy(o->ints, a->ints, a->n * sizeof(int64_t));
    break;
  case FL_GA_FLOATS:
    o->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    o->n_floats = a->n;
    o->floats = palloc(P, a->n * sizeof(float));
    if (o->floats && a->n) memcpy(o->floats, a->floats, a->n * sizeof(float));
    break;
  case FL_GA_STRING:
    o->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    o->has_s = 1;
    o->s.len = strlen(a->s);
    o->s.data = (uint8_t *)pstr(P, a->s);
    break;
  }
  return o;
}

static Onnx__NodeProto *node(pool *P, const char *name, const char *op, size_t n_in,
                             size_t n_out) {
  Onnx__NodeProto *o = palloc(P, sizeof *o);
  char **in = palloc(P, (n_in ? n_in : 1) * sizeof *in);
  char **out = palloc(P, (n_out ? n_out : 1) * sizeof *out);
  if (!o || !in || !out) return NULL;
  onnx__node_proto__init(o);
  o->name = pstr(P, name);
  o->op_type = pstr(P, op);
  o->n_input = n_in;
  o->input = in;
  o->n_output = n_out;
  o->output = out;
  return o;
}

/* A name not used by any tensor of g: base + suffix, numbered if taken. */
static char *fresh_name(pool *P, const fl_graph *g, const char *base, const char *suffix) {
  size_t len = strlen(base) + strlen(suffix) + 24;
  char *s = palloc(P, len);
  if (!s) return NULL;
  snprintf(s, len, "%s%s", base, suffix);
  for (int k = 1; fl_graph_find(g, s) >= 0; k++) snprintf(s, len, "%s%s_%d", base, suffix, k);
  return s;
}

/* Whether the op row's export hook leaves attribute name out. */
static int dropped(const fl_gop *op, const char *name) {
  return op && op->export_drop_attr && !strcmp(op->export_drop_attr, name);
}

/* Build the ModelProto of preset graph g into *m (allocations in P). */
static fl_status build_model(pool *P, const fl_graph *g, const char *out_path,
                             Onnx__ModelProto *m, Onnx__GraphProto *gp) {
  const int nt = fl_graph_num_tensors(g), nn = fl_graph_num_nodes(g);
  const int in_id = fl_graph_input_id(g), out_id = fl_graph_output_id(g, NULL);
  fl_gtensor_info ti;
  if (in_id < 0 || out_id < 0)
    return FL_ERR(FL_EINVAL, "%s: the graph has no input or no output", out_path);
  /* refuse what opset 17 cannot say before building anything */
  for (int i = 0; i < nn; i++) {
    fl_gnode_info ni;
    fl_graph_node_info(g, i, &ni);
    const fl_gop *op = fl_gop_find(ni.op_type);
    if (op && op->opset_min > FL_ONNX_EXPORT_OPSET)
      return FL_ERR(FL_ENOTSUP, "%s: node '%s' is a %s, which ONNX has only from opset %d; the "
                    "exporter writes opset %d: train a model without it (a preset: model.norm "
                    "bn or none) to export", out_path, ni.name, ni.op_type, op->opset_min,
                    FL_ONNX_EXPORT_OPSET);
  }
  onnx__model_proto__init(m);
  onnx__graph_proto__init(gp);
  Onnx__OperatorSetIdProto *ops = palloc(P, sizeof *ops);
  Onnx__OperatorSetIdProto **opsv = palloc(P, sizeof *opsv);
  if (!ops || !opsv) return FL_ERR(FL_ENOMEM, "%s: out of memory", out_path);
  onnx__operator_set_id_proto__init(ops);
  ops->domain = pstr(P, "");
  ops->has_version = 1;
  ops->version = FL_ONNX_EXPORT_OPSET;
  opsv[0] = ops;
  m->has_ir_version = 1;
  m->ir_version = 8; /* the IR version of opset 17 (ONNX 1.12) */
  m->n_opset_import = 1;
  m->opset_import = opsv;
  m->producer_name = pstr(P, "flotilla");
  m->producer_version = pstr(P, PACKAGE_VERSION);
  m->graph = gp;
  gp->name = pstr(P, "flotilla");

  /* input, output */
  Onnx__ValueInfoProto **inv = palloc(P, sizeof *inv), **outv = palloc(P, sizeof *outv);
  if (!inv || !outv) return FL_ERR(FL_ENOMEM, "%s: out of memory", out_path);
  fl_graph_tensor_info(g, in_id, &ti);
  inv[0] = value_info(P, ti.name, ti.ndim, ti.dims);
  fl_graph_tensor_info(g, out_id, &ti);
  outv[0] = value_info(P, ti.name, ti.ndim, ti.dims);
  gp->n_input = gp->n_output = 1;
  gp->input = inv;
  gp->output = outv;

  /* initializers: parameters, buffers, constants */
  gp->initializer = palloc(P, (size_t)(nt ? nt : 1) * sizeof *gp->initializer);
  if (!gp->initializer) return FL_ERR(FL_ENOMEM, "%s: out of memory", out_path);
  for (int id = 0; id < nt; id++) {
    fl_graph_tensor_info(g, id, &ti);
    if (ti.kind != FL_GT_PARAM && ti.kind != FL_GT_BUFFER && ti.kind != FL_GT_CONST) continue;
    Onnx__TensorProto *t = initializer(P, g, &ti);
    if (!t)
      return P->failed ? FL_ERR(FL_ENOMEM, "%s: out of memory", out_path)
                       : FL_ERR(FL_EINVAL, "%s: no value for '%s'", out_path, ti.name);
    gp->initializer[gp->n_initializer++] = t;
  }

  /* nodes; a fused activation adds one */
  gp->node = palloc(P, (size_t)(2 * nn + 1) * sizeof *gp->node);
  if (!gp->node) return FL_ERR(FL_ENOMEM, "%s: out of memory", out_path);
  for (int i = 0; i < nn; i++) {
    fl_gnode_info ni;
    fl_graph_node_info(g, i, &ni);
    const fl_gop *op = fl_gop_find(ni.op_type);
    const char *act = NULL;
    int n_attr = 0;
    for (int a = 0; a < ni.n_attrs; a++) {
      if (!strcmp(ni.attrs[a].name, FL_GRAPH_ACT_ATTR)) act = ni.attrs[a].s;
      else if (!dropped(op, ni.attrs[a].name)) n_attr++;
    }
    /* the op row's export hook: an inference node (BN: Y only) */
    const int n_out = op && op->export_n_out ? op->export_n_out : ni.n_out;
    Onnx__NodeProto *o = node(P, ni.name, ni.op_type, (size_t)ni.n_in, (size_t)n_out);
    Onnx__AttributeProto **av = palloc(P, (size_t)(n_attr ? n_attr : 1) * sizeof *av);
    if (!o || !av) return FL_ERR(FL_ENOMEM, "%s: out of memory", out_path);
    for (int k = 0; k < ni.n_in; k++) {
      if (ni.in[k] < 0) {
        o->input[k] = pstr(P, "");
        continue;
      }
      fl_graph_tensor_info(g, ni.in[k], &ti);
      o->input[k] = pstr(P, ti.name);
    }
    for (int k = 0; k < n_out; k++) {
      fl_graph_tensor_info(g, ni.out[k], &ti);
      o->output[k] = pstr(P, ti.name);
    }
    for (int a = 0; a < ni.n_attrs; a++) {
      const char *an = ni.attrs[a].name;
      if (!strcmp(an, FL_GRAPH_ACT_ATTR) || dropped(op, an)) continue;
      av[o->n_attribute++] = attribute(P, &ni.attrs[a]);
    }
    o->attribute = av;
    gp->node[gp->n_node++] = o;
    if (act) {
      fl_act a = FL_ACT_NONE;
      const fl_gop *aop = fl_act_parse(act, &a) == FL_OK ? fl_gop_find_act(a) : NULL;
      if (!aop)
        return FL_ERR(FL_ENOTSUP, "%s: node '%s' (%s) has the fused activation '%s', which no "
                      "ONNX op stands for", out_path, ni.name, ni.op_type, act);
      char *pre = fresh_name(P, g, o->output[0], "_preact");
      char *an = fresh_name(P, g, ni.name, "_act");
      Onnx__NodeProto *r = node(P, an ? an : "", aop->type, 1, 1);
      if (!pre || !r) return FL_ERR(FL_ENOMEM, "%s: out of memory", out_path);
      r->input[0] = pre;
      r->output[0] = o->output[0];
      o->output[0] = pre;
      gp->node[gp->n_node++] = r;
    }
  }
  return P->failed ? FL_ERR(FL_ENOMEM, "%s: out of memory", out_path) : FL_OK;
}

static fl_status export_preset(const fl_graph *g, const char *out_path) {
  pool P = {0};
  Onnx__ModelProto m;
  Onnx__GraphProto gp;
  fl_status st = build_model(&P, g, out_path, &m, &gp);
  if (st == FL_OK) st = pack_write(&m.base, out_path);
  if (st == FL_OK)
    FL_LOGI("exported the trained model to %s (ONNX opset %d, %zu nodes, %zu initializers)",
            out_path, FL_ONNX_EXPORT_OPSET, gp.n_node, gp.n_initializer);
  pool_free(&P);
  return st;
}

fl_status fl_onnx_export(const char *src_onnx, const fl_graph *trained, const char *out_path) {
  if (!trained || !out_path || !out_path[0])
    return FL_ERR(FL_EINVAL, "onnx export: NULL graph or empty output path");
  if (src_onnx && src_onnx[0]) return export_imported(src_onnx, trained, out_path);
  return export_preset(trained, out_path);
}
