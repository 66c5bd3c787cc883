/* graph_engine.h - the engine's private state, shared by graph.c (builder),
 * graph_bind.c (shapes and buffer planning), graph_exec.c (forward,
 * backward, recompute) and graph_model.c (the fl_model_ops adapter).
 * Never installed; the op library sees only graph_internal.h. */
#ifndef FL_GRAPH_ENGINE_H
#define FL_GRAPH_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "graph_internal.h"

#define FL_G_ALIGN 16 /* floats: every planned buffer is 64-byte aligned */

struct fl_graph {
  char *name;
  fl_gtensor *t;
  int nt, cap_t;
  fl_gnode *nodes; /* topological order once fl_graph_model_create sorted them */
  int nn, cap_n;
  int input, output; /* input: the first data input declared (-1: none) */
  int n_inputs;      /* data inputs (fl_graph_input / fl_graph_input_typed) */
  fl_gloss loss;
};

/* One planned buffer: size floats live from event start to event end
 * (inclusive); off is its place in the arena. */
typedef struct fl_gbuf {
  size_t size, off;
  int start, end;
} fl_gbuf;

enum { FL_GEV_FWD = 0, FL_GEV_LOSS = 1, FL_GEV_RECOMP = 2, FL_GEV_BWD = 3 };

/* Which values backward keeps and the events after forward and loss. */
typedef struct fl_gvariant {
  unsigned char *kept, *recomp, *ev_kind;
  int *ev_node;
  int n_ev;
} fl_gvariant;

/* A bound batch size's buffer plan: offsets into the arena (FL_G_NONE for
 * none) of each tensor's forward value, recomputed value and gradient
 * (3 per tensor), then each node's forward and backward saved floats (2
 * per node); the arena and scratch floats it needs; its variant. */
#define FL_G_NONE ((size_t)-1)
typedef struct fl_gplan {
  size_t batch; /* 0 = empty */
  int variant;
  size_t floats, ws;
  size_t *off;
} fl_gplan;

/* A compiled graph (the handle of fl_graph_model_ops). */
typedef struct fl_gmodel {
  fl_graph *g;
  size_t max_batch;
  uint64_t seed, step;
  int recompute;
  int static_done;           /* plan_static ran (first bind) */
  /* parameters: first-use order; param_of[t] is the index or -1 */
  fl_param *params;
  size_t np;
  int *param_tensor, *param_of;
  float *values, *grads;
  size_t n_values, n_grads;
  /* gradient flow (per tensor / node; fixed at create) */
  unsigned char *has_grad;   /* tensor gets d loss / d tensor */
  unsigned char *zero_grad;  /* output grad that nothing writes: zeroed before its producer's backward */
  unsigned char *run_bwd;    /* node's backward runs */
  unsigned char *fwd_skip;   /* node evaluated at bind (shape domain) */
  unsigned *accum;           /* per node: the accum bits of its backward */
  int *contrib;              /* per param: backward writes into its grad per step */
  int *left;                 /* per param: writes still to come in this step */
  unsigned char *final;      /* per param: grad final in this step */
  size_t *zero_params;       /* params no backward writes: zeroed each step */
  size_t n_zero_params;
  /* recompute (fixed at create) */
  int *seg;                  /* per node: segment */
  int n_seg;
  unsigned char *ckpt;       /* per tensor: named checkpoint */
  /* two ways to run backward: var[0] keeps every value, var[1] (with
   * recompute) recomputes the values inside segments; each bind uses the
   * one whose plan is smaller (var[0] on a tie) */
  fl_gvariant var[2];
  /* the variant in use (aliases into var[]): */
  unsigned char *kept;       /* per tensor: not recomputed */
  unsigned char *recomp;     /* per node: recomputed in backward */
  unsigned char *ev_kind;    /* backward events: FL_GEV_RECOMP or FL_GEV_BWD */
  int *ev_node;
  int n_ev;
  /* bound state (graph_bind.c) */
  size_t bound;              /* batch size bound, 0 = none */
  fl_gplan plans[2];         /* cached plans: [0] max_batch, [1] the last other batch */
  float *arena;
  size_t arena_floats;
  float *ws;
  size_t ws_floats;
  float **data_fwd, **data_bwd;   /* per tensor */
  float **grad_buf;               /* per tensor: planned grad (non-params) */
  float **saved_fwd, **saved_bwd; /* per node */
  size_t plan_floats;             /* arena floats the bound plan uses */
  float **rows_grad;              /* per tensor: a ROWS input's gradient (n floats), or NULL */
  int *rows;                      /* the rows inputs' tensors, in the graph's order */
  int *rows_index;                /* per rows input: the SparseRowIndex node of its reader, or -1 */
  int n_rows;
  int rows_at;                    /* the index in rows found last (fl_gmodel_rows_find) */
  size_t act_bytes;               /* at max_batch */
  fl_gctx ctx;
  fl_norm_sync_fn norm_sync;
  void *norm_sync_ctx;
  struct fl_gdev *dev;            /* gpu graph (graph_dev.c), NULL on the CPU */
  float *dev_out, *dev_dout;      /* gpu: host copies of the output and its grad (bce, mse) */
} fl_gmodel;

/* graph_model.c: the tensor called name (-1: none), looked for first
 * among the rows inputs from the one found last on, since a step names
 * the sparse tables in the same order each time. */
int fl_gmodel_rows_find(fl_gmodel *m, const char *name);

/* graph_dev.c: where the buffers live and the gpu path.
 *  alloc/free: arena memory (host: 64-byte aligned and zeroed; gpu:
 *    device memory); zero: n floats at p on the graph's device.
 *  attach (create, after the max_batch bind): check every node that runs
 *    in a step has CUDA twins (else FL_ENOTSUP naming the node and op; also
 *    without CUDA), make the stream, the parameter mirrors, device copies
 *    of constants, and re-bind with device arenas.
 *  begin (each step): make the device current, upload all parameter values
 *    and the micro-batch (*dx: its device copy) and labels, and point the
 *    PARAM/BUFFER/CONST tensors at their device copies.
 *  grad_ready: download parameter p's gradient to the host.
 *  softmax_xent / download_output / upload_dout: the losses' traffic.
 *  end (each step): bring BUFFERs (BN running statistics) back after a
 *    training step, wait for the stream, and point every tensor at its
 *    host memory again.
 *  All log their errors. */
fl_status fl_gdev_alloc(fl_gmodel *m, size_t floats, float **out);
void fl_gdev_free(fl_gmodel *m, float *p);
fl_status fl_gdev_zero(fl_gmodel *m, float *p, size_t n);
fl_status fl_gdev_attach(fl_gmodel *m, int device);
void fl_gdev_release(fl_gmodel *m);
fl_status fl_gdev_begin(fl_gmodel *m, const float *x, const int32_t *y, size_t batch,
                        const float **dx);
void fl_gdev_grad_ready(fl_gmodel *m, size_t p);
fl_status fl_gdev_softmax_xent(fl_gmodel *m, const float *logits, const int32_t *y, size_t batch,
                               size_t classes, float scale, float *dlogits, double *loss_sum,
                               size_t *c1, size_t *c5);
fl_status fl_gdev_download_output(fl_gmodel *m, size_t batch);
fl_status fl_gdev_upload_dout(fl_gmodel *m, size_t batch);
fl_status fl_gdev_end(fl_gmodel *m, int training);

/* graph.c */
/* Sort g's nodes topologically (stable: declaration order among ready
 * nodes), fixing producer indices; FL_EINVAL (logged, naming a node on
 * the cycle) when there is a cycle. */
fl_status fl_graph_sort(fl_graph *g);
/* Check the graph's wiring: one output, some nodes. */
fl_status fl_graph_check(const fl_graph *g);

/* Free what node n owns (name, wiring, attributes, op state); the node
 * itself stays in its array. */
void fl_gnode_release(fl_gnode *n);

/* graph_fuse.c */
/* Evaluate once every node whose inputs are all constants (a scale vector
 * PyTorch builds with Concat, ...) and make its outputs constants: the
 * node leaves the graph.  Ops with FL_GOP_NO_FOLD, Flotilla's own ops and
 * the graph's output are left alone.  Errors logged. */
fl_status fl_gfold(fl_gmodel *m);
/* Fold each Relu into the BatchNormalization or (device < 0: CPU) Add
 * whose output only it reads, unless that output is g's output or a
 * checkpoint in m->ckpt; nodes stay in topological order.  FL_ENOMEM
 * logged. */
fl_status fl_gfuse(fl_gmodel *m, int device);

/* graph_bind.c */
/* Bind every shape for batch and plan the buffers (a no-op when batch is
 * already bound); the first bind also decides the gradient flow and the
 * recompute segments (from m->ckpt).  Errors logged. */
fl_status fl_gbind(fl_gmodel *m, size_t batch);

/* graph_exec.c: the bound batch's forward (x: the device copy of the input
 * on a gpu graph, NULL: the inputs as the feed bound them), and backward from the output's grad (already written by
 * the loss into its grad buffer), calling on_ready per parameter as its
 * grad becomes final, in decreasing index order.  Errors logged by ops. */
fl_status fl_gexec_forward(fl_gmodel *m, const float *x, int training);
fl_status fl_gexec_backward(fl_gmodel *m, fl_grad_ready_fn on_ready, void *ctx);

#endif
