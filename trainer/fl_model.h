/* fl_model.h - the model contract between the training loop and a model.
 *
 * A model owns its parameters, their gradients and its activation buffers.
 * The loop only sees a flat list of named fp32 parameters (for the
 * optimizer, gradient merge, communication and checkpoints) and two calls:
 * train_step (forward + loss + backward on one micro-batch) and eval.
 *
 * Built-in models (logreg, mlp, cnn) and plugins share this contract; a
 * plugin is a shared library exporting `fl_model_plugin_v1` (fl_model_ops
 * below), loaded with dlopen.  The ops table is a plain C ABI. */
#ifndef FL_MODEL_H
#define FL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "fl_layers.h"
#include "fl_status.h"

#define FL_MODEL_MAX_DIMS 4
#define FL_MODEL_NAME_MAX 64
#define FL_MODEL_MAX_HIDDEN 16

/* One named tensor of the model.  value is always present; grad is present
 * for trainable parameters and NULL for buffers (batch-norm running stats),
 * which are checkpointed but neither optimized nor communicated. */
typedef struct fl_param {
  char name[FL_MODEL_NAME_MAX]; /* e.g. "fc0.weight", "bn1.running_mean" */
  int ndim;
  int64_t shape[FL_MODEL_MAX_DIMS];
  size_t n;     /* product of shape */
  float *value; /* owned by the model */
  float *grad;  /* owned by the model; NULL for buffers */
  int layer;    /* index of the layer that owns it (0 = first in forward) */
} fl_param;

/* Called from backward as soon as parameter `index`'s gradient is final for
 * this micro-batch (reverse layer order), so communication can overlap the
 * rest of backward.  Runs on the caller's thread; must be quick. */
typedef void (*fl_grad_ready_fn)(void *ctx, size_t index);

/* Per-batch results.  loss_sum is the sum over samples of the (unscaled)
 * cross-entropy, so that loss_sum/count is the mean; correct1/correct5 count
 * samples whose label is the top-1 / in the top-5 logits.  Models with
 * loss mse also fill values (the batch's target values, 0 otherwise),
 * abs_err (the sum of |output - target| over them) and t_sum / t_sq (the
 * targets' sum and sum of squares), for MAE and R². */
typedef struct fl_model_result {
  double loss_sum;
  size_t correct1;
  size_t correct5;
  size_t count;
  size_t values;
  double abs_err, t_sum, t_sq;
} fl_model_result;

/* What to build; filled from the job file's `model:` section. */
typedef struct fl_model_spec {
  char kind[16];            /* "logreg", "mlp", "cnn", "onnx", "plugin" */
  int in_channels, in_height, in_width; /* input image geometry (1,28,28) */
  int num_classes;          /* 10 */
  size_t hidden[FL_MODEL_MAX_HIDDEN]; /* mlp hidden sizes */
  size_t n_hidden;
  char activation[8];       /* mlp, cnn: "relu" (default) or "tanh" */
  int conv_channels[2];     /* cnn: channels of the two conv layers (32, 64) */
  int conv_kernel;          /* cnn: kernel size (5, padding keeps size) */
  size_t fc_hidden;         /* cnn: hidden fc width (0 = none) */
  char norm[4];             /* cnn: "" (none), "bn" or "gn" */
  int gn_groups;            /* gn: groups (8) */
  float bn_momentum;        /* bn running-stat momentum (0.1) */
  float bn_epsilon;         /* 1e-5 */
  int recompute;            /* 1: keep only segment-boundary activations */
  char plugin_path[512];    /* plugin: path of the shared library */
  char plugin_args[256];    /* plugin: free-form string handed to it */
  /* Where the built-in models compute (appended to ABI v1: a plugin built
   * against an older header never reads these; plugins compute on the host
   * and must leave device "" or "cpu"). */
  char device[8];           /* "cpu" (also "") or "gpu" */
  int device_id;            /* gpu: the CUDA device ordinal (0) */
  fl_math linear_math;      /* gpu: GEMM precision of linear layers (FP32; AMP: FP16/BF16) */
  fl_math conv_math;        /* gpu: GEMM precision of conv layers (FP32; AMP: FP16/BF16) */
  /* Appended after the device fields (plugins never read them): */
  char path[512];           /* onnx: the model file */
  char output[128];         /* onnx: the tensor the loss reads ("" = the graph's only output) */
  fl_loss_kind loss;        /* onnx: softmax_cross_entropy (0), bce_with_logits or mse */
  /* recompute: names of graph tensors that bound the segments (ONNX value
   * names; the job's recompute_configs.checkpoints), read at create only;
   * 0 = the model's own choice (see below). */
  const char *const *checkpoints;
  size_t n_checkpoints;
  /* AMP on the gpu (graph models; the job's amp_configs lists, read at
   * create only): op types in ONNX's or Paddle's names (matmul_v2,
   * matmul, mul and "linear": a linear layer, Gemm and MatMul).  White,
   * when given: the op types whose GEMMs take the 16-bit linear_math /
   * conv_math (default: Gemm, MatMul, Conv); black: kept in fp32 (it
   * wins).  At most 16 names each; an op type on both lists is refused. */
  const char *const *amp_white;
  size_t n_amp_white;
  const char *const *amp_black;
  size_t n_amp_black;
} fl_model_spec;

typedef struct fl_model fl_model;

/* Fill spec with the defaults: kind "mlp", input 1x28x28, 10 classes,
 * hidden 256-128-100, relu, cnn conv 32/64 channels of 5x5, fc_hidden 128,
 * no norm, 8 groups, bn momentum 0.1 and epsilon 1e-5, no recompute,
 * device "cpu" (fp32 GEMMs). */
void fl_model_spec_defaults(fl_model_spec *spec);

/* Build a model from spec for micro-batches of up to max_batch samples,
 * parameters initialised from seed (same seed, same bits).  On success the
 * caller owns *out and frees it with fl_model_destroy.
 *
 * Fields left 0 (or "") take the defaults above, except n_hidden and
 * fc_hidden, whose 0 means none (an mlp needs at least one hidden layer;
 * logreg ignores hidden).  Every model but a plugin is an op graph run by
 * the graph engine (graph/fl_graph.h); a preset's tensors are named after
 * its layers (fc0, conv0, bn0, gn0, pool0, flatten), which is what
 * spec.checkpoints may name.  The models:
 *  - logreg: fc0 (input -> classes).
 *  - mlp: fc0..fc{n_hidden-1} with the activation, then fc{n_hidden} to
 *    the classes.  Recompute keeps every ceil(sqrt(layers))-th output.
 *  - cnn: 2 x [conv (kernel conv_kernel, odd, stride 1, padding keeping the
 *    size) -> bn / gn (when norm is set; the conv then has no bias) -> the
 *    activation -> 2x2 max-pool], then fc0 (fc_hidden, the activation) when
 *    fc_hidden > 0, then the fc to the classes.  Recompute keeps each
 *    block's output.
 *  - onnx: the model in the file spec.path (trainer/onnx/fl_onnx.h), its
 *    output spec.output, loss spec.loss; num_classes becomes the output's
 *    width.  Recompute without named checkpoints bounds ~sqrt(nodes)
 *    evenly spaced segments.
 *  - plugin: see the plugin ABI below.
 * Recompute is used only where it lowers the planned activation peak.
 * Parameters are named as PyTorch names them ("conv0.weight", "bn0.bias",
 * "bn0.running_mean", "fc1.weight").  Weights are Kaiming-uniform before a
 * ReLU and Xavier-uniform otherwise, biases 0.
 * Errors are logged (naming the field or the plugin path): FL_EINVAL for a
 * bad spec or max_batch 0, FL_ENOTFOUND for a missing plugin file or
 * symbol, FL_ENOMEM.
 *
 * device "gpu" (graph models): the activations live on CUDA device
 * device_id, with device mirrors of the parameters and gradients; train_step
 * and eval run the ops' CUDA twins on one stream of the model's (a graph
 * holding an op without one is refused with FL_ENOTSUP naming it).
 * The host fl_param buffers stay the model's state: every train_step and
 * eval uploads the micro-batch and all parameter values (the loop, a
 * checkpoint or a peer may have changed them on the host), and train_step
 * downloads each layer's gradients (and batch-norm running statistics) to
 * the host before on_ready names them, so the contract below is the same
 * on either device.  linear_math and conv_math pick the GEMM precision
 * (fl_math; FP16/BF16 for AMP, fp32 everywhere else).  Further errors:
 * FL_ENOTSUP for gpu in a build without CUDA, on a machine without a CUDA
 * device, or with a plugin (plugins compute on the host); FL_EINVAL for a
 * device_id beyond the devices; FL_ECUDA for a CUDA failure.  The calls on
 * a gpu model make its device current on the calling thread. */
fl_status fl_model_create(const fl_model_spec *spec, size_t max_batch, uint64_t seed,
                          fl_model **out);
void fl_model_destroy(fl_model *m);

/* The spec as built (defaults resolved), and the max_batch given to create;
 * valid until fl_model_destroy. */
const fl_model_spec *fl_model_get_spec(const fl_model *m);
size_t fl_model_max_batch(const fl_model *m);

/* The parameter list, in forward order; valid until fl_model_destroy. */
size_t fl_model_num_params(const fl_model *m);
fl_param *fl_model_param(fl_model *m, size_t index);
/* Number of input floats per sample (C*H*W). */
size_t fl_model_input_size(const fl_model *m);

/* Forward, loss and backward on one micro-batch: x is batch*input_size
 * floats, y batch labels in [0, num_classes).  Gradients are OVERWRITTEN
 * with d(loss_scale * mean loss)/d(param) (the loop accumulates for
 * gradient merge).  on_ready (may be NULL) is called per parameter as its
 * gradient becomes final.  res receives the batch results (may be NULL).
 * Batch norm normalises over this micro-batch and updates its running
 * statistics once per call.  FL_EINVAL (logged, nothing changed) for NULL
 * x/y, batch 0 or > max_batch, a label out of range, or a loss_scale that
 * is not finite and > 0. */
fl_status fl_model_train_step(fl_model *m, const float *x, const int32_t *y, size_t batch,
                              float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                              fl_model_result *res);

/* Forward only, in inference mode (batch norm uses running stats); same
 * argument checks as train_step.  Gradients and parameters are untouched. */
fl_status fl_model_eval(fl_model *m, const float *x, const int32_t *y, size_t batch,
                        fl_model_result *res);

/* The compiled graph behind a built-in or onnx model (for export: its
 * parameters and buffers read as host values), NULL for a plugin; valid
 * until fl_model_destroy.  fl_graph is opaque here (graph/fl_graph.h). */
struct fl_graph;
const struct fl_graph *fl_model_graph(const fl_model *m);

/* The step number Dropout masks are drawn from (with the seed and the
 * node): the loop sets it before each micro-batch from its checkpointed
 * position, so a resumed run draws the masks of an uninterrupted one.
 * Without a call it counts train_steps from 0.  A no-op for plugins. */
void fl_model_set_step(fl_model *m, uint64_t step);

/* Models whose loss takes float targets (kind onnx with loss
 * bce_with_logits or mse): 1, and then train_step / eval refuse and the
 * ...f calls below take batch * num_classes float targets (num_classes is
 * the output's width K for these).  0 for class-label models. */
int fl_model_float_targets(const fl_model *m);
fl_status fl_model_train_stepf(fl_model *m, const float *x, const float *t, size_t batch,
                               float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                               fl_model_result *res);
fl_status fl_model_evalf(fl_model *m, const float *x, const float *t, size_t batch,
                         fl_model_result *res);
/* A bce_with_logits model's logits of its last eval or train step (batch
 * * K host floats, owned by the model, valid until its next call), for
 * metrics over the predictions (AUC, log loss); NULL for any other loss,
 * a plugin, or a graph whose output is not on the host. */
const float *fl_model_logits(const fl_model *m);
/* 1 for a graph model with loss bce_with_logits (binary targets). */
int fl_model_binary(const fl_model *m);

/* ------------------------------------------------ typed, named inputs
 * A model whose data is more than one float tensor (an imported ONNX
 * graph with several inputs, int64 token ids, a mask) or whose labels are
 * more than one class id per sample (per-token labels) is fed through an
 * fl_model_feed: every input by name with its element type, and the
 * labels with their shape.  One float input and [N] labels through a feed
 * is the same step as train_step / train_stepf. */
#define FL_MODEL_F32 1 /* float; numbered as ONNX's TensorProto.DataType */
#define FL_MODEL_I64 7 /* int64_t */
#define FL_MODEL_INPUT_DIMS 8

typedef struct fl_model_input {
  const char *name; /* the model input it feeds */
  int dtype;        /* FL_MODEL_F32 or FL_MODEL_I64, as the input declares */
  const void *data; /* batch * per-sample elements, C order; borrowed for the call */
} fl_model_input;

typedef struct fl_model_feed {
  const fl_model_input *inputs; /* every input of the model, each once */
  size_t n_inputs;
  /* softmax cross-entropy: class ids, batch * ylen, NULL otherwise.  ylen
   * 1 (0 means 1) matches an output [N, C]; ylen L an output [N, L, C]
   * (the class axis last).  A label equal to ignore_index is left out of
   * the loss's mean and of the accuracy, as nn.CrossEntropyLoss does. */
  const int32_t *y;
  size_t ylen;
  int64_t ignore_index;
  const float *t; /* bce / mse: batch * K float targets, NULL otherwise */
} fl_model_feed;

/* One input of a model as it declares it (kind onnx: the graph's inputs,
 * in file order; others: one float input "x"). */
typedef struct fl_model_input_info {
  char name[128];
  int dtype;  /* FL_MODEL_F32 / FL_MODEL_I64 */
  int ndim;   /* dims[0] stands for the batch */
  int64_t dims[FL_MODEL_INPUT_DIMS];
  int cast_to_int; /* float input that a Cast to an integer type reads directly */
} fl_model_input_info;

/* Inputs of m (0 for NULL). */
size_t fl_model_num_inputs(const fl_model *m);
/* Input i of m into *out: FL_EINVAL (not logged) when i is out of range. */
fl_status fl_model_input_get(const fl_model *m, size_t i, fl_model_input_info *out);

/* train_step / eval through a feed (above).  Results: with class ids,
 * count is the labels that are not ignore_index (tokens for [N, L]
 * labels), loss_sum and correct1/correct5 are summed over them.  FL_EINVAL
 * (logged) for a feed that misses an input, names one the model lacks, or
 * gives another element type, a label outside [0, classes) that is not
 * ignore_index, labels whose count does not match the output's rows; the
 * argument checks of train_step.  A plugin takes one float input and [N]
 * labels (translated to its train_step/eval). */
fl_status fl_model_train_feed(fl_model *m, const fl_model_feed *f, size_t batch,
                              float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                              fl_model_result *res);
fl_status fl_model_eval_feed(fl_model *m, const fl_model_feed *f, size_t batch,
                             fl_model_result *res);

/* Bytes of activation memory a train_step of max_batch holds at its peak
 * (lower with recompute).  For the built-in models: every activation,
 * pool-index, norm-statistics, activation-gradient and conv-workspace
 * buffer, all allocated once at create (device memory on a gpu model,
 * whose conv workspace is cuDNN's). */
size_t fl_model_activation_bytes(const fl_model *m);

/* Synchronised batch norm.  fn sums the n doubles of buf over every rank
 * of the job, in place, with the same result bits on every rank, and
 * returns FL_OK or the (already logged) error.  With a hook set, each batch
 * norm layer of train_step normalises with the statistics of the global
 * micro-batch (all ranks' samples) instead of this rank's: forward calls
 * fn twice per layer (per-channel sums and the sample count, then the sums
 * of squared deviations) and backward once (sum dz and sum dz*xhat; see the
 * phase kernels in fl_layers.h); the running statistics are updated from
 * the global mean and unbiased variance, so they stay equal on every rank.
 * dgamma/dbeta remain this rank's gradients (the gradient allreduce
 * averages them).  Every rank must therefore call train_step the same
 * number of times with the same model; fn is called on the thread that
 * calls train_step, in layer order.  eval never calls it (it uses the
 * running statistics).  With one rank (fn an identity) the results are
 * bitwise those without a hook.
 *
 * fn NULL removes the hook (the default: each rank normalises with its own
 * micro-batch).  ctx is handed to fn and stays the caller's; it must
 * outlive the hook.  The built-in models (logreg, mlp, cnn) take the hook
 * on either device (those without batch norm never call it; a gpu model
 * stages each exchange through these host buffers); a plugin model has
 * none: FL_ENOTSUP, not logged (the caller decides whether that is an
 * error).  FL_ENOMEM (logged) when the small statistics buffers cannot be
 * had. */
typedef fl_status (*fl_norm_sync_fn)(void *ctx, double *buf, size_t n);
fl_status fl_model_set_norm_sync(fl_model *m, fl_norm_sync_fn fn, void *ctx);

/* ------------------------------------------------------------ plugin ABI v1
 * A plugin exports `const fl_model_ops fl_model_plugin_v1`.  The loop calls
 * create once, then the rest on the handle it returned; the plugin owns all
 * memory it hands out.  Same semantics as the fl_model_* calls above.
 *
 * The trainer dlopens spec.plugin_path (a path without '/' is taken
 * relative to the working directory), checks abi_version and that no entry
 * is NULL, and after create checks the parameter list (names terminated,
 * 1..4 dims, n = product of shape, value set).  Before calling train_step
 * or eval it has already checked x, y, batch <= max_batch, the labels
 * against spec.num_classes and loss_scale, so a plugin gets clean input.
 * spec is the resolved spec; plugin_args is free for the plugin to parse.
 * A plugin may call the kernels of fl_layers.h and fl_optim.h (link
 * libflotilla); trainer/plugin_example.c is a complete one. */
typedef struct fl_model_ops {
  uint32_t abi_version; /* FL_MODEL_PLUGIN_ABI */
  fl_status (*create)(const fl_model_spec *spec, size_t max_batch, uint64_t seed, void **handle);
  void (*destroy)(void *handle);
  size_t (*num_params)(void *handle);
  fl_param *(*param)(void *handle, size_t index);
  size_t (*input_size)(void *handle);
  fl_status (*train_step)(void *handle, const float *x, const int32_t *y, size_t batch,
                          float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                          fl_model_result *res);
  fl_status (*eval)(void *handle, const float *x, const int32_t *y, size_t batch,
                    fl_model_result *res);
  size_t (*activation_bytes)(void *handle);
  /* Appended after ABI v1's entries, set by the graph engine only: the
   * trainer never reads them from a plugin's table (a v1 plugin's table
   * ends above); may be NULL. */
  fl_status (*train_feed)(void *handle, const fl_model_feed *f, size_t batch, float loss_scale,
                          fl_grad_ready_fn on_ready, void *ctx, fl_model_result *res);
  fl_status (*eval_feed)(void *handle, const fl_model_feed *f, size_t batch,
                         fl_model_result *res);
} fl_model_ops;

#define FL_MODEL_PLUGIN_ABI 1u
#define FL_MODEL_PLUGIN_SYMBOL "fl_model_plugin_v1"

#endif
