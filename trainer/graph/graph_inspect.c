/* graph_inspect.c - read-only views of a graph (fl_graph_inspect.h) for the
 * ONNX exporter and tests.  Only reads struct fl_graph; never changes it. */
#include <config.h>

#include "fl_graph_inspect.h"
#include "graph_engine.h"

int fl_graph_num_tensors(const fl_graph *g) { return g ? g->nt : 0; }

int fl_graph_num_nodes(const fl_graph *g) { return g ? g->nn : 0; }

fl_status fl_graph_tensor_info(const fl_graph *g, int id, fl_gtensor_info *out) {
  if (!g || !out || id < 0 || id >= g->nt) return FL_EINVAL;
  const fl_gtensor *t = &g->t[id];
  const int is_const = t->kind == FL_GT_CONST;
  *out = (fl_gtensor_info){.name = t->name,
                           .kind = t->kind,
                           .dtype = t->dtype,
                           .ndim = t->ndim,
                           .dims = t->kind == FL_GT_VALUE ? t->shape : t->dims,
                           .data = is_const && t->dtype == FL_G_F32 ? t->data : NULL,
                           .idata = is_const && t->dtype == FL_G_I64 ? t->idata : NULL};
  return FL_OK;
}

fl_status fl_graph_node_info(const fl_graph *g, int i, fl_gnode_info *out) {
  if (!g || !out || i < 0 || i >= g->nn) return FL_EINVAL;
  const fl_gnode *n = &g->nodes[i];
  *out = (fl_gnode_info){.name = n->name,
                         .op_type = n->op ? n->op->type : "",
                         .traits = n->op ? n->op->traits : 0u,
                         .n_in = n->n_in,
                         .n_out = n->n_out,
                         .in = n->in,
                         .out = n->out,
                         .attrs = n->attrs,
                         .n_attrs = n->n_attrs};
  return FL_OK;
}

int fl_graph_input_id(const fl_graph *g) { return g ? g->input : -1; }

int fl_graph_output_id(const fl_graph *g, fl_gloss *loss) {
  if (!g) return -1;
  if (loss) *loss = g->loss;
  return g->output;
}
