/* fl_graph_inspect.h - read-only views of a graph's tensors and nodes, for
 * code that writes a graph out (the ONNX exporter) or checks what a builder
 * made (tests).  Kept apart from the builder API (fl_graph.h) because
 * nothing that trains needs it; implemented over the engine's private
 * struct in graph_inspect.c. */
#ifndef FL_GRAPH_INSPECT_H
#define FL_GRAPH_INSPECT_H

#include "fl_graph.h"

/* One tensor as declared.  Pointers stay the graph's and are valid while it
 * lives and is not changed.  data (F32) / idata (I64): the host value of a
 * CONST (NULL for other kinds; PARAM and BUFFER values come from
 * fl_graph_value). */
typedef struct fl_gtensor_info {
  const char *name;
  fl_gtensor_kind kind;
  fl_gdtype dtype;
  int ndim;
  const int64_t *dims; /* declared dims (FL_G_BATCH in an INPUT's dims[0]); VALUE: as last bound */
  const float *data;
  const int64_t *idata;
} fl_gtensor_info;

/* One node: op type (ONNX), tensor ids in and out (-1 = omitted optional
 * input), its attributes. */
typedef struct fl_gnode_info {
  const char *name;
  const char *op_type;
  int n_in, n_out;
  const int *in, *out;
  const fl_gattr *attrs;
  int n_attrs;
  unsigned traits;              /* the op row's FL_GOP_* traits (graph_internal.h) */
} fl_gnode_info;

/* Counts (0 for NULL). */
int fl_graph_num_tensors(const fl_graph *g);
int fl_graph_num_nodes(const fl_graph *g);
/* Tensor id / node index i: FL_EINVAL (not logged) when out of range.
 * Nodes are in declaration order before fl_graph_model_create and in
 * topological order after it. */
fl_status fl_graph_tensor_info(const fl_graph *g, int id, fl_gtensor_info *out);
fl_status fl_graph_node_info(const fl_graph *g, int i, fl_gnode_info *out);
/* The data input's id and the output's id (and its loss when loss is not
 * NULL); -1 when not set. */
int fl_graph_input_id(const fl_graph *g);
int fl_graph_output_id(const fl_graph *g, fl_gloss *loss);

#endif
