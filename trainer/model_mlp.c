/* model_mlp.c - the logreg and mlp models: stacks of fused linear layers.
 *
 * logreg is one linear layer from the flattened input to the classes; mlp
 * puts spec->hidden layers with the spec's activation (fused into each
 * GEMM's bias pass) in front of it.  With recompute the layers are cut into
 * segments of ceil(sqrt(layers)) layers (the classic checkpointing choice),
 * so only every segment's last output is kept between forward and
 * backward. */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fl_log.h"
#include "model_internal.h"

static fl_status build(const fl_model_spec *spec, size_t n_hidden, size_t max_batch,
                       uint64_t seed, void **handle) {
  fl_seq_layer_spec layers[FL_MODEL_MAX_HIDDEN + 1];
  fl_act act;
  if (fl_act_parse(spec->activation, &act) != FL_OK)
    return FL_ERR(FL_EINVAL, "model: activation '%s' must be relu or tanh", spec->activation);
  const size_t nl = n_hidden + 1;
  size_t seg_len = (size_t)ceil(sqrt((double)nl));
  for (size_t i = 0; i < nl; i++) {
    fl_seq_layer_spec *l = &layers[i];
    memset(l, 0, sizeof *l);
    l->kind = FL_SEQ_LINEAR;
    snprintf(l->name, sizeof l->name, "fc%zu", i);
    l->bias = 1;
    if (i < n_hidden) {
      if (spec->hidden[i] == 0)
        return FL_ERR(FL_EINVAL, "model: hidden layer %zu has size 0", i);
      l->out = spec->hidden[i];
      l->act = act;
      l->he_init = act == FL_ACT_RELU;
    } else {
      l->out = (size_t)spec->num_classes;
      l->act = FL_ACT_NONE;
    }
    l->segment = (int)(i / seg_len);
  }
  return fl_seq_create(layers, nl, (size_t)spec->in_channels, (size_t)spec->in_height,
                       (size_t)spec->in_width, (size_t)spec->num_classes, max_batch, seed,
                       spec->recompute, handle);
}

static fl_status logreg_create(const fl_model_spec *spec, size_t max_batch, uint64_t seed,
                               void **handle) {
  return build(spec, 0, max_batch, seed, handle);
}

static fl_status mlp_create(const fl_model_spec *spec, size_t max_batch, uint64_t seed,
                            void **handle) {
  if (spec->n_hidden == 0)
    return FL_ERR(FL_EINVAL, "model: mlp needs at least one hidden layer (use logreg for none)");
  return build(spec, spec->n_hidden, max_batch, seed, handle);
}

const fl_model_ops fl_model_logreg_ops = {
    .abi_version = FL_MODEL_PLUGIN_ABI, .create = logreg_create, .destroy = fl_seq_destroy,
    .num_params = fl_seq_num_params, .param = fl_seq_param, .input_size = fl_seq_input_size,
    .train_step = fl_seq_train_step, .eval = fl_seq_eval,
    .activation_bytes = fl_seq_activation_bytes};

const fl_model_ops fl_model_mlp_ops = {
    .abi_version = FL_MODEL_PLUGIN_ABI, .create = mlp_create, .destroy = fl_seq_destroy,
    .num_params = fl_seq_num_params, .param = fl_seq_param, .input_size = fl_seq_input_size,
    .train_step = fl_seq_train_step, .eval = fl_seq_eval,
    .activation_bytes = fl_seq_activation_bytes};
