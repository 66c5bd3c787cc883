/* fl_graph.h - the op-graph engine: every model the trainer trains is a
 * static DAG of ONNX-named ops over named tensors.
 *
 * Builders (the presets in trainer/model_presets.c, the ONNX importer in
 * onnx/, the CTR model) describe a graph with the fl_graph_* calls below:
 * data inputs (float or int64, fed by name per step), rows inputs (rows
 * pulled from sparse tables), the
 * initializers (trainable parameters, buffers such as batch-norm running
 * statistics, and constants), and nodes whose op types and attributes are
 * ONNX's (opsets 13 to 17) or, for the sparse ops, Flotilla's own
 * (EmbeddingBagSum, fed per step with fl_graph_model_set_sparse_feed).
 * The engine then derives the backward pass by
 * reverse-mode automatic differentiation (each op has a vector-Jacobian
 * product; the graph runs them in reverse topological order), binds shapes
 * once per batch size (evaluating integer shape subgraphs such as
 * Shape->Gather->Concat->Reshape), and plans activation and gradient
 * buffers from tensor liveness so memory is reused.  A compiled graph is an
 * fl_model (fl_model.h): named parameters in first-use order, train_step,
 * eval, on_grad_ready in reverse topological order.
 *
 * Why ONNX's vocabulary for everything: the presets and an imported model
 * then run through the same ops, so one set of tests (finite differences,
 * PyTorch fixtures) covers both, and export writes what was imported. */
#ifndef FL_GRAPH_H
#define FL_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "fl_layers.h"
#include "fl_model.h"
#include "fl_status.h"

/* The internal string attribute that names an activation ("relu", "tanh":
 * fl_act_name) applied by the node's own kernel: Gemm, Conv and the norms
 * take it, the fusion pass adds it, the exporter splits it out again. */
#define FL_GRAPH_ACT_ATTR "flotilla_act"

/* What an op is, as the op table's rows declare it (fl_gop.traits, also in
 * fl_gnode_info.traits): what fusion, AMP, import and export read. */
enum {
  FL_GOP_FUSES_ACT = 1u << 0,   /* takes FL_GRAPH_ACT_ATTR: an activation applied by its kernel */
  FL_GOP_FOLDS_RELU = 1u << 1,  /* the fusion pass folds a Relu after it into that attribute */
  FL_GOP_AMP16 = 1u << 2,       /* has a 16-bit GEMM path under AMP (its CUDA twin reads math) */
  FL_GOP_SHAPE_ONLY = 1u << 3,  /* reads only its inputs' shapes: known at bind whatever the
                                   values (Shape, Size) */
  FL_GOP_MATMUL = 1u << 4,      /* a linear layer's GEMM: what AMP lists' "linear", "matmul",
                                   "mul" and "matmul_v2" stand for */
  FL_GOP_IMPORT_FOLD = 1u << 5, /* the importer folds the node into a constant (Constant) */
  FL_GOP_TENSOR_VALUE = 1u << 6, /* its "value" attribute may be a one-element ONNX tensor */
  FL_GOP_NO_FOLD = 1u << 7,     /* never evaluated at create on constants: its value depends on
                                   the step or the mode (Dropout) */
  FL_GOP_CAST = 1u << 8,        /* converts its input to the element type its "to" names */
  FL_GOP_ROW_READER = 1u << 9,  /* reads whole rows of input 0 at the ids of input 1 (on axis 0,
                                   when it has an "axis"): may read a sparse table */
  FL_GOP_VIEW = 1u << 10,       /* output 0 holds input 0's values as they are, another shape:
                                   the planner may give both one buffer (its copy then none) */
  FL_GOP_ROW_INDEX = 1u << 11   /* a row reader's ids to their rows' positions in the batch's
                                   pulled rows; takes fl_graph_model_set_ranks' ranks */
};

/* Element types, numbered as ONNX's TensorProto.DataType. */
typedef enum fl_gdtype {
  FL_G_F32 = 1,
  FL_G_I64 = 7
} fl_gdtype;

#define FL_G_MAX_DIMS 8
/* A declared dimension equal to the batch size bound at run time. */
#define FL_G_BATCH (-1)

/* What a tensor is. */
typedef enum fl_gtensor_kind {
  FL_GT_INPUT = 0,  /* a data input, fp32 or int64 (host), first dim FL_G_BATCH, set per step */
  FL_GT_PARAM = 1,  /* trainable fp32 initializer: an fl_param with a grad */
  FL_GT_BUFFER = 2, /* fp32 state that is saved but never optimized (BN running stats) */
  FL_GT_CONST = 3,  /* fixed data (fp32 or int64), neither saved nor trained */
  FL_GT_VALUE = 4,  /* produced by a node */
  FL_GT_ROWS = 5    /* rows of a sparse table, fp32 [capacity, width], handed per step
                       (fl_graph_model_set_rows); the engine computes their gradient */
} fl_gtensor_kind;

/* One entry of a sparse feed: the feature adds value * rows[row] into
 * group slot of sample sample (see EmbeddingBagSum in ops_sparse.c). */
typedef struct fl_graph_sparse_entry {
  uint32_t sample, slot, row;
  float value;
} fl_graph_sparse_entry;

/* The sparse feed of one batch: n entries, in the order they are summed. */
typedef struct fl_graph_sparse_feed {
  const fl_graph_sparse_entry *e;
  size_t n;
} fl_graph_sparse_feed;

/* A node attribute, as ONNX's AttributeProto (the kinds the ops need). */
typedef enum fl_gattr_kind {
  FL_GA_INT = 0,
  FL_GA_FLOAT = 1,
  FL_GA_INTS = 2,
  FL_GA_FLOATS = 3,
  FL_GA_STRING = 4
} fl_gattr_kind;

typedef struct fl_gattr {
  const char *name;
  fl_gattr_kind kind;
  int64_t i;            /* INT */
  float f;              /* FLOAT */
  const int64_t *ints;  /* INTS: n entries */
  const float *floats;  /* FLOATS: n entries */
  size_t n;
  const char *s;        /* STRING, NUL-terminated */
} fl_gattr;

/* The loss the engine appends to the graph's output. */
/* The loss the engine appends to the graph's output: the kernels' loss
 * kinds (fl_loss_kind, whose names the job file takes). */
typedef enum fl_gloss {
  FL_GLOSS_SOFTMAX_XENT = FL_LOSS_SOFTMAX_XENT, /* output [B, C] logits, labels int32 class ids; top-1/top-5 counted */
  FL_GLOSS_BCE_LOGITS = FL_LOSS_BCE_LOGITS,     /* output [B, K], float targets in [0,1]; correct1 counts (logit>0)==(t>0.5) per element / K */
  FL_GLOSS_MSE = FL_LOSS_MSE                    /* output [B, K], float targets; no accuracy (correct1 = 0) */
} fl_gloss;

typedef struct fl_graph fl_graph;

/* A new empty graph named name (for messages).  The caller owns *out and
 * frees it with fl_graph_free, unless it hands it to fl_graph_model_create.
 * FL_ENOMEM (logged). */
fl_status fl_graph_new(const char *name, fl_graph **out);
void fl_graph_free(fl_graph *g);

/* Declarations.  Every tensor has a unique name (ONNX value names: a
 * second declaration of a name is FL_EINVAL, logged with both uses).  Ids
 * are small non-negative ints, stable for the graph's life.  dims has ndim
 * entries (0..FL_G_MAX_DIMS); only an INPUT's dims may hold FL_G_BATCH,
 * and only as dims[0].  Data is copied; the caller keeps its buffers. */
fl_status fl_graph_input(fl_graph *g, const char *name, int ndim, const int64_t *dims, int *id);
/* A data input of element type dt (FL_G_F32, or FL_G_I64: int64 data such
 * as token ids, in host memory, handed per step and so never known at
 * bind); a graph may declare several (fl_graph_input allows one only).
 * Graphs with an int64 input or several inputs run on the cpu and are fed
 * through fl_graph_model_ops.train_feed / eval_feed (fl_model_feed). */
fl_status fl_graph_input_typed(fl_graph *g, const char *name, fl_gdtype dt, int ndim,
                               const int64_t *dims, int *id);
/* A rows input: capacity rows of width floats (both > 0), of which a step
 * uses those its sparse feeds name.  A graph may have several, and needs
 * no data input beside them (its batch size is then the call's). */
fl_status fl_graph_rows(fl_graph *g, const char *name, int64_t capacity, int64_t width, int *id);
/* An fp32 initializer: trainable 1 gives a PARAM, 0 a BUFFER.  init may be
 * NULL (zeros). */
fl_status fl_graph_param(fl_graph *g, const char *name, int ndim, const int64_t *dims,
                         const float *init, int trainable, int *id);
/* A constant of dtype dt (data holds prod(dims) elements of it). */
fl_status fl_graph_const(fl_graph *g, const char *name, fl_gdtype dt, int ndim,
                         const int64_t *dims, const void *data, int *id);

/* A node.  op_type is an ONNX op type; in[] are tensor ids (-1 = an
 * omitted optional input, as ONNX's empty name); out_names name the
 * outputs, whose ids are written to out_ids (may be NULL).  Attributes are
 * copied.  The op and its attributes are checked here (unknown op type,
 * attribute or arity: FL_ENOTSUP / FL_EINVAL, logged with the node's name,
 * its op type and what is supported); shapes are checked at bind.  Nodes
 * may be added in any order; fl_graph_model_create sorts them and refuses
 * a cycle, naming a node on it. */
fl_status fl_graph_node(fl_graph *g, const char *name, const char *op_type, const int *in,
                        int n_in, const char *const *out_names, int n_out, const fl_gattr *attrs,
                        int n_attrs, int *out_ids);

/* The tensor the loss reads (the model's output, e.g. the logits), and the
 * loss.  Exactly one output per graph. */
fl_status fl_graph_set_output(fl_graph *g, int id, fl_gloss loss);

/* Id of the tensor called name, or -1. */
int fl_graph_find(const fl_graph *g, const char *name);

/* How to compile a graph into a model. */
typedef struct fl_graph_options {
  size_t max_batch;  /* > 0: the largest micro-batch train_step/eval accept */
  uint64_t seed;     /* Dropout masks: a function of (seed, step, node) */
  /* Recompute: names of graph tensors that bound the segments (kept
   * between forward and backward; everything else inside a segment is
   * recomputed during backward).  n_checkpoints 0 with recompute 1 lets
   * the engine pick ~sqrt(nodes) evenly spaced boundaries. */
  int recompute;
  const char *const *checkpoints;
  size_t n_checkpoints;
  /* AMP on gpu: op types (ONNX or Paddle names; Paddle's matmul_v2,
   * matmul, mul and "linear" mean both Gemm and MatMul) computed in
   * amp_math (white: when given, it replaces the default MatMul/Gemm/Conv)
   * or kept in fp32 (black, which wins).  Only Gemm and Conv have 16-bit
   * GEMMs.  Create refuses an op type on both lists and warns about names
   * of no op type (fl_graph_amp_math). */
  fl_math amp_math;
  const char *const *amp_white;
  size_t n_amp_white;
  const char *const *amp_black;
  size_t n_amp_black;
  int device;        /* -1 = cpu, else the CUDA device ordinal */
} fl_graph_options;

/* Compile g (taken: freed here on failure too) into a model handle for the
 * fl_graph_model_ops table below.  Checks: one output (a graph without an
 * input, with rows inputs, several inputs or an int64 one is host only), no cycle, every node's inputs declared, all shapes bindable at
 * batch 1 and max_batch, every recompute checkpoint names a tensor, a gpu
 * graph has a CUDA twin for every op (else FL_ENOTSUP naming the node and
 * op).  Errors are logged here. */
fl_status fl_graph_model_create(fl_graph *g, const fl_graph_options *opt, void **handle);

/* The GEMM precision a node of op type op_type (ONNX or Paddle name) gets
 * on a gpu graph compiled with opt's AMP fields (amp_math, the lists);
 * FL_MATH_FP32 for op types without a 16-bit GEMM or unknown ones.  What
 * create applies on the gpu; the CPU computes every node in fp32. */
fl_math fl_graph_amp_math(const char *op_type, const fl_graph_options *opt);

/* The fl_model_ops table of a compiled graph (create is NULL: graphs are
 * made by fl_graph_model_create).  train_step/eval take int32 class labels
 * for FL_GLOSS_SOFTMAX_XENT; see fl_graph_model_train_stepf for the float
 * targets of the other losses.  x is the data input (batch * input_size
 * floats), NULL for a graph without one; a graph with several inputs or an
 * int64 one is fed by name through train_feed / eval_feed (fl_model_feed),
 * which also take per-token class ids and ignore_index. */
extern const fl_model_ops fl_graph_model_ops;

/* train_step / eval with float targets (K per sample, K = the output's
 * per-sample size) for FL_GLOSS_BCE_LOGITS and FL_GLOSS_MSE. */
fl_status fl_graph_model_train_stepf(void *handle, const float *x, const float *t, size_t batch,
                                     float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                                     fl_model_result *res);
fl_status fl_graph_model_evalf(void *handle, const float *x, const float *t, size_t batch,
                               fl_model_result *res);

/* The output of a forward of batch samples of x (training 1: as in
 * train_step, batch norm on batch statistics, dropout on and running
 * statistics updated; 0: as eval), without a loss or a backward: for
 * callers that only need the output (the tests' fixtures).  *out points
 * at the batch*K output floats (host), valid until the next call.  Host
 * graphs only (FL_ENOTSUP on a gpu graph).  Errors logged. */
fl_status fl_graph_model_forward(void *handle, const float *x, size_t batch, int training,
                                 const float **out);

/* The output of the last forward, train step or eval (host graphs: batch*K
 * floats owned by the model, valid until the next call), or NULL. */
const float *fl_graph_model_output(void *handle);

/* The value of the rows input called name for the following steps: rows
 * (borrowed: kept valid and unchanged by the caller until the last call
 * that reads it has returned) holds its capacity * width floats, of which
 * only the rows a feed names are read.  *grad (may be NULL) receives the
 * model's buffer of d loss / d rows (capacity * width floats, valid until
 * destroy): each training step writes it, rows no entry names hold 0.
 * FL_EINVAL (logged) when name is no rows input or rows is NULL. */
fl_status fl_graph_model_set_rows(void *handle, const char *name, const float *rows,
                                  const float **grad);

/* Only rows [0, n_rows) of rows input name are read by the steps that
 * follow (until the next bind to another batch size, which restores the
 * capacity): the ops that read it see n_rows rows (at least 1, at most
 * the capacity), so its gradient is written over those rows only; every
 * id of those steps must be below n_rows.  FL_EINVAL (logged) when name is
 * no rows input or the graph was never bound. */
fl_status fl_graph_model_rows_used(void *handle, const char *name, size_t n_rows);

/* The sparse feed of the node called node (an op that reads one, such as
 * EmbeddingBagSum) for the following steps: *feed is copied, its entries
 * are borrowed (kept valid and unchanged by the caller until the last call
 * that reads them has returned).  Entries are checked when the node runs
 * (sample < batch, row < the rows' capacity).  FL_EINVAL (logged) when node
 * names no such node. */
fl_status fl_graph_model_set_sparse_feed(void *handle, const char *node,
                                         const fl_graph_sparse_feed *feed);

/* The step Dropout masks derive from (fl_model_set_step); train steps
 * count on from it. */
void fl_graph_model_set_step(void *handle, uint64_t step);

/* fl_model_set_norm_sync for a compiled graph: every BatchNormalization
 * normalises over the global micro-batch through fn (NULL: local). */
fl_status fl_graph_model_set_norm_sync(void *handle, fl_norm_sync_fn fn, void *ctx);

/* The compiled graph, for export (onnx/): its tensors by name with their
 * current values (params and buffers are the trained state). */
const fl_graph *fl_graph_model_graph(void *handle);
/* Current fp32 value of the PARAM/BUFFER called name, or NULL. */
const float *fl_graph_value(const fl_graph *g, const char *name, size_t *n);

/* Sparse tables in a built graph (graph_sparse.c).  The distinct ids of
 * ids[0..n) into ids[0..u), ascending (any 64-bit values): the order a
 * batch's rows of a sparse table are pulled in; returns u.  rank[i] gets
 * the position of the i-th id given among them, what the table's
 * SparseRowIndex node computes (fl_graph_model_set_ranks hands both to
 * it).  tmp: the caller's scratch of 3n values. */
size_t fl_graph_unique_ids(int64_t *ids, int64_t *rank, int64_t *tmp, size_t n);

/* For the next forward only: the distinct ids (nu, ascending) and the
 * ranks (n) of fl_graph_unique_ids for table name's ids, so that its
 * SparseRowIndex node takes them instead of sorting the same ids again.
 * The node checks them against the ids it reads (every rank names a
 * distinct id equal to its id, each distinct id named) and sorts when
 * they do not match.  Both borrowed until that forward.  Logged. */
fl_status fl_graph_model_set_ranks(void *handle, const char *name, const int64_t *uniq,
                                   size_t nu, const int64_t *rank, size_t n);

/* Make the fp32 initializer called name a sparse table: it becomes a rows
 * input [capacity, width] and the ids every reader gathers go through a
 * SparseRowIndex node (ids -> positions among the batch's sorted distinct
 * ids).  Readers taken: Gather with axis 0 (the table as its data) and
 * EmbeddingBag (the table as its weight); any other reader is FL_ENOTSUP
 * naming the node.  *width: the row width; *init (caller frees) the
 * initializer's values, *rows of them (its first dimension).  Logged. */
fl_status fl_graph_sparse_table(fl_graph *g, const char *name, int64_t capacity,
                                int64_t *width, float **init, int64_t *rows);

/* The ids the SparseRowIndex node of table name reads for a batch fed by
 * f, evaluated before the step (the int64 nodes that compute them run on
 * the feed; ids computed from a float value are FL_ENOTSUP).  *ids (the
 * caller's, *cap values, grown here with realloc) receives the *n ids.
 * Logged. */
fl_status fl_graph_model_table_ids(void *handle, const char *name, const fl_model_feed *f,
                                   size_t batch, int64_t **ids, size_t *cap, size_t *n);

/* fl_graph_model_table_ids of the nt tables names at once, each int64
 * node run once for all of them: table k's ids are (*ids)[off[k],
 * off[k + 1]) (off: nt + 1 values).  Logged. */
fl_status fl_graph_model_tables_ids(void *handle, const char *const *names, size_t nt,
                                    const fl_model_feed *f, size_t batch, int64_t **ids,
                                    size_t *cap, size_t *off);

#endif
