/* onnx_testutil.h - build small ONNX models in C with protobuf-c itself
 * (the generated onnx.pb-c.h), for the importer's tests and the fuzz
 * harness's seeds: valid models, and hostile ones no exporter would write.
 * Every allocation goes into the builder's pool, freed by tm_free. */
#ifndef FL_ONNX_TESTUTIL_H
#define FL_ONNX_TESTUTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

#define TM_MAX 64

typedef struct tm {
  void *pool[4096];
  size_t npool;
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto *opsets[1];
  Onnx__NodeProto *nodes[TM_MAX];
  Onnx__TensorProto *inits[TM_MAX];
  Onnx__ValueInfoProto *inputs[TM_MAX], *outputs[TM_MAX];
} tm;

static inline void *tm_alloc(tm *t, size_t n) {
  if (t->npool == sizeof t->pool / sizeof t->pool[0]) abort();
  void *p = calloc(1, n ? n : 1);
  if (!p) abort();
  t->pool[t->npool++] = p;
  return p;
}

static inline char *tm_str(tm *t, const char *s) {
  char *d = tm_alloc(t, strlen(s) + 1);
  strcpy(d, s);
  return d;
}

/* An empty model of the default domain at opset (0 = no opset import). */
static inline void tm_init(tm *t, int64_t opset) {
  memset(t, 0, sizeof *t);
  onnx__model_proto__init(&t->m);
  onnx__graph_proto__init(&t->g);
  t->m.has_ir_version = 1;
  t->m.ir_version = 8;
  t->m.graph = &t->g;
  t->g.name = tm_str(t, "test");
  t->g.node = t->nodes;
  t->g.initializer = t->inits;
  t->g.input = t->inputs;
  t->g.output = t->outputs;
  if (opset) {
    onnx__operator_set_id_proto__init(&t->opset);
    t->opset.domain = tm_str(t, "");
    t->opset.has_version = 1;
    t->opset.version = opset;
    t->opsets[0] = &t->opset;
    t->m.n_opset_import = 1;
    t->m.opset_import = t->opsets;
  }
}

static inline void tm_free(tm *t) {
  for (size_t i = 0; i < t->npool; i++) free(t->pool[i]);
  t->npool = 0;
}

/* A tensor-typed ValueInfo; dims[i] < 0 is a symbolic dim named sym
 * (or an unknown dim when sym is NULL). */
static inline Onnx__ValueInfoProto *tm_vi(tm *t, const char *name, int32_t elem, int ndim,
                                   const int64_t *dims, const char *sym) {
  Onnx__ValueInfoProto *vi = tm_alloc(t, sizeof *vi);
  Onnx__TypeProto *tp = tm_alloc(t, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = tm_alloc(t, sizeof *tt);
  Onnx__TensorShapeProto *sh = tm_alloc(t, sizeof *sh);
  Onnx__TensorShapeProto__Dimension **dv = tm_alloc(t, (size_t)(ndim + 1) * sizeof *dv);
  onnx__value_info_proto__init(vi);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sh);
  for (int i = 0; i < ndim; i++) {
    dv[i] = tm_alloc(t, sizeof *dv[i]);
    onnx__tensor_shape_proto__dimension__init(dv[i]);
    if (dims[i] >= 0) {
      dv[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dv[i]->dim_value = dims[i];
    } else if (sym) {
      dv[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dv[i]->dim_param = tm_str(t, sym);
    }
  }
  sh->n_dim = (size_t)ndim;
  sh->dim = dv;
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  tt->shape = ndim >= 0 ? sh : NULL;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  vi->name = tm_str(t, name);
  vi->type = tp;
  return vi;
}

/* Graph input: float, dim 0 symbolic "N", the rest as given. */
static inline Onnx__ValueInfoProto *tm_input(tm *t, const char *name, int ndim, const int64_t *dims) {
  int64_t d[8];
  if (ndim) memcpy(d, dims, (size_t)ndim * sizeof *d);
  d[0] = -1;
  Onnx__ValueInfoProto *vi = tm_vi(t, name, 1, ndim, d, "N");
  t->inputs[t->g.n_input++] = vi;
  return vi;
}

static inline Onnx__ValueInfoProto *tm_output(tm *t, const char *name) {
  Onnx__ValueInfoProto *vi = tm_vi(t, name, 1, 0, NULL, NULL);
  vi->type->tensor_type->shape = NULL;
  t->outputs[t->g.n_output++] = vi;
  return vi;
}

/* An initializer of dtype with raw data of rawlen bytes from data. */
static inline Onnx__TensorProto *tm_tensor(tm *t, const char *name, int32_t dtype, int ndim,
                                    const int64_t *dims, const void *data, size_t rawlen) {
  Onnx__TensorProto *x = tm_alloc(t, sizeof *x);
  onnx__tensor_proto__init(x);
  x->name = tm_str(t, name);
  x->has_data_type = 1;
  x->data_type = dtype;
  x->n_dims = (size_t)ndim;
  x->dims = tm_alloc(t, (size_t)(ndim + 1) * sizeof(int64_t));
  if (ndim) memcpy(x->dims, dims, (size_t)ndim * sizeof(int64_t));
  x->has_raw_data = 1;
  x->raw_data.len = rawlen;
  x->raw_data.data = tm_alloc(t, rawlen);
  if (rawlen) memcpy(x->raw_data.data, data, rawlen);
  return x;
}

static inline Onnx__TensorProto *tm_init_f(tm *t, const char *name, int ndim, const int64_t *dims,
                                    const float *v) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)dims[i];
  Onnx__TensorProto *x = tm_tensor(t, name, 1, ndim, dims, v, n * 4);
  t->inits[t->g.n_initializer++] = x;
  return x;
}

/* Count separated names "a,b,,c" ("" entries are omitted optional ones). */
static inline char **tm_names(tm *t, const char *list, size_t *n) {
  *n = 0;
  if (!list) return tm_alloc(t, sizeof(char *));
  size_t cnt = 1;
  for (const char *p = list; *p; p++) cnt += *p == ',';
  char **v = tm_alloc(t, cnt * sizeof *v);
  const char *s = list;
  for (size_t i = 0; i < cnt; i++) {
    const char *e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    v[i] = tm_alloc(t, len + 1);
    memcpy(v[i], s, len);
    s = e ? e + 1 : s + len;
  }
  *n = cnt;
  return v;
}

static inline Onnx__NodeProto *tm_node(tm *t, const char *op, const char *name, const char *ins,
                                const char *outs) {
  Onnx__NodeProto *n = tm_alloc(t, sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = tm_str(t, op);
  n->name = tm_str(t, name);
  n->input = tm_names(t, ins, &n->n_input);
  n->output = tm_names(t, outs, &n->n_output);
  n->attribute = tm_alloc(t, 8 * sizeof *n->attribute);
  t->nodes[t->g.n_node++] = n;
  return n;
}

static inline Onnx__AttributeProto *tm_attr(tm *t, Onnx__NodeProto *n, const char *name, int type) {
  Onnx__AttributeProto *a = tm_alloc(t, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = tm_str(t, name);
  a->has_type = 1;
  a->type = (Onnx__AttributeProto__AttributeType)type;
  n->attribute[n->n_attribute++] = a;
  return a;
}

static inline void tm_attr_i(tm *t, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = tm_attr(t, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}

static inline void tm_attr_f(tm *t, Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = tm_attr(t, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1;
  a->f = v;
}

static inline void tm_attr_ints(tm *t, Onnx__NodeProto *n, const char *name, size_t cnt,
                         const int64_t *v) {
  Onnx__AttributeProto *a = tm_attr(t, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = cnt;
  a->ints = tm_alloc(t, cnt * sizeof *v);
  memcpy(a->ints, v, cnt * sizeof *v);
}

/* The packed model (malloc'd; the caller frees). */
static inline uint8_t *tm_pack(const tm *t, size_t *len) {
  *len = onnx__model_proto__get_packed_size(&t->m);
  uint8_t *b = malloc(*len ? *len : 1);
  if (!b) abort();
  onnx__model_proto__pack(&t->m, b);
  return b;
}

/* A valid small classifier: x [N, 4] -> Gemm(W [3, 4], b [3], transB) ->
 * Relu -> Gemm(W2 [2, 3], b2) -> logits [N, 2]. */
static inline void tm_mlp(tm *t) {
  static const float w[12] = {0.1f, -0.2f, 0.3f, 0.05f, -0.4f, 0.2f, 0.1f, 0.3f, 0.25f, -0.1f,
                              0.15f, -0.3f};
  static const float b[3] = {0.01f, -0.02f, 0.03f};
  static const float w2[6] = {0.5f, -0.3f, 0.2f, -0.1f, 0.4f, 0.3f};
  static const float b2[2] = {0.0f, 0.1f};
  tm_init(t, 13);
  tm_input(t, "x", 2, (const int64_t[]){-1, 4});
  tm_init_f(t, "fc0.weight", 2, (const int64_t[]){3, 4}, w);
  tm_init_f(t, "fc0.bias", 1, (const int64_t[]){3}, b);
  tm_init_f(t, "fc1.weight", 2, (const int64_t[]){2, 3}, w2);
  tm_init_f(t, "fc1.bias", 1, (const int64_t[]){2}, b2);
  Onnx__NodeProto *n = tm_node(t, "Gemm", "fc0", "x,fc0.weight,fc0.bias", "h");
  tm_attr_i(t, n, "transB", 1);
  tm_node(t, "Relu", "relu0", "h", "hr");
  n = tm_node(t, "Gemm", "fc1", "hr,fc1.weight,fc1.bias", "logits");
  tm_attr_i(t, n, "transB", 1);
  tm_output(t, "logits");
}

#endif
