/* model_internal.h - what the model files of trainer/ share (never installed).
 *
 * The built-in models (logreg, mlp, cnn) are all sequential stacks of layer
 * kernels from fl_layers.h, so one engine (model_seq.c) runs them: the
 * builders (model_mlp.c, model_cnn.c) only describe their layers.  The
 * engine, the builders and the plugin loader all speak fl_model_ops, the
 * same table a plugin exports, so model.c dispatches one way for all. */
#ifndef FL_MODEL_INTERNAL_H
#define FL_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fl_layers.h"
#include "fl_model.h"

#define FL_MODEL_HIDDEN __attribute__((visibility("hidden")))

/* -------------------------------------------------------- sequential engine */

typedef enum fl_seq_kind {
  FL_SEQ_LINEAR = 0, /* y = act(x W^T + b) over the flattened sample */
  FL_SEQ_CONV = 1,   /* y = act(conv(x) + b), square kernel, 'same'-style pad */
  FL_SEQ_BN = 2,     /* batch norm over channels (+ act) */
  FL_SEQ_GN = 3,     /* group norm (+ act) */
  FL_SEQ_POOL = 4    /* max-pool, square window */
} fl_seq_kind;

/* One layer as a builder describes it.  The engine derives the input shape
 * from the previous layer (the first gets the model's input shape). */
typedef struct fl_seq_layer_spec {
  fl_seq_kind kind;
  fl_act act;          /* fused activation after the op */
  char name[24];       /* parameter prefix: "fc0", "conv1", "bn0" */
  int segment;         /* recompute segment; non-decreasing along the stack */
  size_t out;          /* LINEAR: out features; CONV: out channels */
  size_t k, stride, pad; /* CONV, POOL */
  int bias;            /* LINEAR, CONV: 1 = has a bias */
  int he_init;         /* LINEAR, CONV: 1 = Kaiming-uniform (ReLU follows), 0 = Xavier */
  size_t groups;       /* GN */
  float eps, momentum; /* BN, GN */
} fl_seq_layer_spec;

/* Build a sequential model over inputs of c*h*w floats with num_classes
 * logits out (the last layer's output size must equal num_classes).
 * Parameters are initialised from seed; with recompute, only the outputs of
 * the last layer of each segment are kept between forward and backward.
 * On success *out is a handle for the fl_seq_* functions below (what
 * fl_model_ops expects); the caller frees it with fl_seq_destroy.
 * Errors are logged here (with the layer's name). */
FL_MODEL_HIDDEN fl_status fl_seq_create(const fl_seq_layer_spec *layers, size_t n_layers,
                                        size_t c, size_t h, size_t w, size_t num_classes,
                                        size_t max_batch, uint64_t seed, int recompute,
                                        void **out);
FL_MODEL_HIDDEN void fl_seq_destroy(void *handle);
FL_MODEL_HIDDEN size_t fl_seq_num_params(void *handle);
FL_MODEL_HIDDEN fl_param *fl_seq_param(void *handle, size_t index);
FL_MODEL_HIDDEN size_t fl_seq_input_size(void *handle);
FL_MODEL_HIDDEN fl_status fl_seq_train_step(void *handle, const float *x, const int32_t *y,
                                            size_t batch, float loss_scale,
                                            fl_grad_ready_fn on_ready, void *ctx,
                                            fl_model_result *res);
FL_MODEL_HIDDEN fl_status fl_seq_eval(void *handle, const float *x, const int32_t *y,
                                      size_t batch, fl_model_result *res);
FL_MODEL_HIDDEN size_t fl_seq_activation_bytes(void *handle);
/* fl_model_set_norm_sync for a sequential model (fl_model.h): the hook and
 * the statistics it carries (per batch-norm layer the global sums and
 * count, kept for recompute, and one exchange buffer), allocated here when
 * fn is set and freed when it is cleared or by fl_seq_destroy. */
FL_MODEL_HIDDEN fl_status fl_seq_set_norm_sync(void *handle, fl_norm_sync_fn fn, void *ctx);

/* Move a freshly created model to CUDA device `device` (checked by the
 * caller): device mirrors of the parameter and gradient arenas, the
 * activation arena moved to the device (the host one is freed), a stream,
 * and the conv workspace; from then on fl_seq_train_step and fl_seq_eval
 * run there with linear / conv GEMMs in lmath / cmath (details above the
 * device path in model_seq.c).  Errors are logged here (CUDA ones by the
 * fl_device.h helpers); after a failure the model can only be destroyed. */
FL_MODEL_HIDDEN fl_status fl_seq_to_device(void *handle, int device, fl_math lmath,
                                           fl_math cmath);

/* ------------------------------------------------------------ the models */

/* Ops tables of the built-in kinds (create builds the layer list and calls
 * fl_seq_create; the rest are the fl_seq_* functions).  The spec they get
 * has its defaults resolved and its common fields checked by model.c. */
FL_MODEL_HIDDEN extern const fl_model_ops fl_model_logreg_ops;
FL_MODEL_HIDDEN extern const fl_model_ops fl_model_mlp_ops;
FL_MODEL_HIDDEN extern const fl_model_ops fl_model_cnn_ops;

/* Open the plugin at path: dlopen, look up FL_MODEL_PLUGIN_SYMBOL, check its
 * ABI version and that every entry is set.  On success *ops points into the
 * library and *dl is its handle for dlclose.  Errors are logged here, naming
 * the path: FL_ENOTFOUND (no such file, or no symbol), FL_EINVAL (not a
 * loadable library, wrong ABI version, a missing entry). */
FL_MODEL_HIDDEN fl_status fl_model_plugin_open(const char *path, const fl_model_ops **ops,
                                               void **dl);

/* ------------------------------------------------------------------ init */

/* Fill w[0..n) with uniform values in [-bound, bound) drawn from a
 * splitmix64 stream keyed by (seed, stream): the same arguments give the
 * same bits on every machine. */
FL_MODEL_HIDDEN void fl_model_init_uniform(float *w, size_t n, float bound, uint64_t seed,
                                           uint64_t stream);

#endif
