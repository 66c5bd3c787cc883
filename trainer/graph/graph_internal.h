/* graph_internal.h - what the engine (graph*.c) and the op library (ops_*.c)
 * share; never installed.
 *
 * An op is an fl_gop: shape inference, forward, and the vector-Jacobian
 * product (backward) of one ONNX op type, on the CPU, with optional CUDA
 * twins.  The engine owns every buffer: it binds each tensor to memory of
 * the bound shape before calling an op, so ops never allocate. */
#ifndef FL_GRAPH_INTERNAL_H
#define FL_GRAPH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fl_graph.h"
#include "fl_layers.h"
#include "fl_model.h"

/* One tensor of a graph. */
typedef struct fl_gtensor {
  char *name;
  fl_gtensor_kind kind;
  fl_gdtype dtype;
  int ndim;                     /* declared rank (INPUT/PARAM/BUFFER/CONST); set by infer for VALUE */
  int64_t dims[FL_G_MAX_DIMS];  /* declared dims (FL_G_BATCH allowed in an INPUT's dims[0]) */
  /* Bound at each bind (batch size): */
  int64_t shape[FL_G_MAX_DIMS]; /* the bound shape, ndim entries */
  size_t n;                     /* elements: product of shape (1 for a scalar) */
  float *data;                  /* F32 value (host, or device on a gpu graph) */
  int64_t *idata;               /* I64 value: host memory, always */
  int known;                    /* I64: 1 when idata holds a value at bind time (shape domain) */
  float *grad;                  /* d loss / d tensor, NULL when no gradient flows here */
  int producer;                 /* node index, -1 for non-VALUE tensors */
} fl_gtensor;

/* One node. */
typedef struct fl_gnode {
  char *name;
  const struct fl_gop *op;
  int n_in, n_out;
  int *in;                      /* tensor ids, -1 = omitted optional input */
  int *out;
  fl_gattr *attrs;              /* owned copies */
  int n_attrs;
  void *state;                  /* the op's per-node data (infer may set it; op->free_state frees) */
  /* Bound at each bind: */
  float *ws;                    /* scratch for forward or backward: ws_floats */
  size_t ws_floats;
  float *saved;                 /* kept from forward to this node's backward: saved_floats */
  size_t saved_floats;
  fl_math math;                 /* GEMM precision chosen for this node (AMP; FP32 on the CPU) */
  /* Set by fl_graph_model_set_sparse_feed for the ops that read one: */
  fl_graph_sparse_feed feed;    /* entries borrowed from the caller */
  int fed;                      /* 1 once a feed was set */
  /* Set by fl_graph_model_set_ranks for a SparseRowIndex node, taken by
   * its next forward: its ids' distinct values and ranks, borrowed. */
  const int64_t *uniq, *rank;
  size_t n_uniq, n_rank;
} fl_gnode;

/* What an op call sees besides its node. */
typedef struct fl_gctx {
  fl_gtensor *t;                /* the graph's tensors, indexed by id */
  size_t batch;                 /* the bound batch size */
  int training;                 /* 1 in train_step, 0 in eval */
  int recomputing;              /* 1 when forward re-runs inside backward: state must not change twice */
  uint64_t seed, step;          /* Dropout: mask = f(seed, step, node index) */
  size_t node_index;
  fl_norm_sync_fn norm_sync;    /* fl_model_set_norm_sync's hook (NULL = local statistics) */
  void *norm_sync_ctx;
  void *stream;                 /* gpu graphs: the cudaStream_t; NULL on the CPU */
  const char *graph;            /* the graph's name (an imported model's path), for messages */
} fl_gctx;

/* Accessors ops use. */
static inline fl_gtensor *fl_gin(const fl_gnode *n, const fl_gctx *c, int i) {
  return (i < n->n_in && n->in[i] >= 0) ? &c->t[n->in[i]] : NULL;
}
static inline fl_gtensor *fl_gout(const fl_gnode *n, const fl_gctx *c, int i) {
  return i < n->n_out ? &c->t[n->out[i]] : NULL;
}
/* The attribute called name, or NULL. */
const fl_gattr *fl_gattr_find(const fl_gnode *n, const char *name);

/* An op.  Every function logs its own errors, naming the node (n->name)
 * and op type; they return FL_OK or the code. */
typedef struct fl_gop {
  const char *type;             /* ONNX op type, e.g. "Conv" */
  const char *paddle;           /* Paddle's name for AMP lists ("conv2d"), or NULL */
  const char *domain;           /* NULL: ONNX's default domain; "flotilla": Flotilla's own op,
                                   built by Flotilla's models only (never imported from an ONNX
                                   file nor listed among the ONNX op types) */
  int sparse_feed;              /* 1: forward reads the node's sparse feed (fl_gnode.feed) */
  int min_in, max_in, min_out, max_out;
  const char *const *attrs;     /* NULL-terminated names of the attributes it supports */
  /* At each bind: check the input dtypes/shapes (and attributes), set each
   * output's dtype, ndim and shape; when every input of an I64 output is
   * known, compute it into its idata (the engine gives I64 outputs host
   * memory of the bound size before forward; for shape-domain outputs infer
   * may allocate nothing: the engine calls forward right after infer when
   * all inputs are known, and marks the outputs known).  *ws and *saved
   * receive the scratch and forward-to-backward floats this node needs at
   * this batch size (0 if none). */
  fl_status (*infer)(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved);
  fl_status (*forward)(fl_gnode *n, fl_gctx *c);
  /* Given the outputs' grads, write the grads of the inputs whose grad
   * pointer is set: bit i of accum set = add into input i's grad, clear =
   * overwrite it.  NULL for ops that pass no gradient (Shape, ...). */
  fl_status (*backward)(fl_gnode *n, fl_gctx *c, unsigned accum);
  unsigned save_in;             /* bit i: backward reads input i's value */
  unsigned save_out;            /* bit i: backward reads output i's value */
  unsigned nodiff_in;           /* bit i: input i never receives a gradient (indices, shapes, axes) */
  /* CUDA twins (device pointers, c->stream); NULL when the op has none,
   * and a gpu graph holding it is refused at create. */
  fl_status (*forward_cuda)(fl_gnode *n, fl_gctx *c);
  fl_status (*backward_cuda)(fl_gnode *n, fl_gctx *c, unsigned accum);
  void (*free_state)(fl_gnode *n);
  /* Traits: what the rest of the engine (fusion, AMP, import, export, the
   * op list in docs/ONNX_OPS.md) knows of the op, read from here only. */
  unsigned traits;              /* FL_GOP_* bits below */
  unsigned buffer_in;           /* bit i: input i is a buffer updated in place (BN statistics);
                                   the importer declares such initializers as buffers */
  int opset_min, opset_max;     /* ONNX opsets whose definition this row implements (0: from
                                   or up to any the importer takes); out of range: refused */
  const char *doc;              /* one line for docs/ONNX_OPS.md: what is taken, what refused */
  int variant;                  /* which of the rows sharing a family's functions this is (which
                                   binary operation, ...): read by that family's code only */
  fl_act act;                   /* an activation a producer can apply itself: the value of
                                   FL_GRAPH_ACT_ATTR it stands for (FL_ACT_NONE: none) */
  const struct fl_gop *with_relu; /* the op a node of this type becomes when the fusion pass
                                   folds the Relu after it into it (CPU only), or NULL */
  /* Export hook: how a node of this op is written to an inference ONNX file
   * by the exporter of built-in models. */
  int export_n_out;             /* outputs written (0: all of the node's) */
  const char *export_drop_attr; /* an attribute left out (the engine's mode flag), or NULL */
} fl_gop;

/* fl_gop.traits bits: FL_GOP_* in fl_graph.h. */

/* The op called type (ONNX op type, or a Paddle name for AMP lists when
 * paddle is 1), or NULL. */
const fl_gop *fl_gop_find(const char *type);
const fl_gop *fl_gop_find_paddle(const char *name);
/* The i-th op of the table (families in order), or NULL past the end:
 * what docs/ONNX_OPS.md is generated from. */
const fl_gop *fl_gop_at(size_t i);
/* The activation op whose row stands for act (fl_gop.act), or NULL. */
const fl_gop *fl_gop_find_act(fl_act act);
/* Up to max ops that have every bit of traits, into out (the table's
 * order); returns how many. */
int fl_gop_with_traits(unsigned traits, const fl_gop **out, int max);
/* A comma-separated list of every supported ONNX op type (Flotilla's own
 * ops left out), for messages. */
const char *fl_gop_supported(void);

/* Add and the Relu after it as one op (type "Add", CPU only), for the
 * engine's rewrite (graph_fuse.c): see ops_elementwise.c. */
extern const fl_gop fl_gop_add_relu;

/* Numpy/ONNX multidirectional broadcasting of a and b into out; FL_EINVAL
 * (not logged) when they do not broadcast. */
fl_status fl_gbroadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                              int64_t *out);

#endif
