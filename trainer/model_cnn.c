/* model_cnn.c - the cnn model: two conv blocks and a classifier.
 *
 *   [conv k x k, 'same' padding -> (bn | gn) -> act -> max-pool 2x2] x 2
 *   -> fc0 (fc_hidden, act; when fc_hidden > 0) -> fc to the classes
 *
 * act is the spec's activation (ReLU by default, or tanh).  Without a norm
 * it is fused into the conv and the conv has a bias; with one, it is fused
 * into the norm and the conv has no bias (the norm's beta does that job).  Each block and the classifier are one
 * recompute segment, so recompute keeps only the two pooled maps and the
 * logits. */
#include <config.h>

#include <stdio.h>
#include <string.h>

#include "fl_log.h"
#include "model_internal.h"

static fl_status cnn_create(const fl_model_spec *spec, size_t max_batch, uint64_t seed,
                            void **handle) {
  if (spec->conv_kernel % 2 == 0)
    return FL_ERR(FL_EINVAL, "model: cnn conv_kernel %d must be odd ('same' padding)",
                  spec->conv_kernel);
  const int bn = strcmp(spec->norm, "bn") == 0, gn = strcmp(spec->norm, "gn") == 0;
  fl_act act;
  if (fl_act_parse(spec->activation, &act) != FL_OK || act == FL_ACT_NONE)
    return FL_ERR(FL_EINVAL, "model: activation '%s' must be relu or tanh", spec->activation);
  fl_seq_layer_spec layers[8];
  size_t nl = 0;
  memset(layers, 0, sizeof layers);
  for (int b = 0; b < 2; b++) {
    fl_seq_layer_spec *c = &layers[nl++];
    c->kind = FL_SEQ_CONV;
    c->segment = b;
    snprintf(c->name, sizeof c->name, "conv%d", b);
    c->out = (size_t)spec->conv_channels[b];
    c->k = (size_t)spec->conv_kernel;
    c->stride = 1;
    c->pad = c->k / 2;
    c->bias = !(bn || gn);
    c->act = (bn || gn) ? FL_ACT_NONE : act;
    c->he_init = act == FL_ACT_RELU;
    if (bn || gn) {
      fl_seq_layer_spec *n = &layers[nl++];
      n->kind = bn ? FL_SEQ_BN : FL_SEQ_GN;
      n->segment = b;
      snprintf(n->name, sizeof n->name, "%s%d", bn ? "bn" : "gn", b);
      n->act = act;
      n->groups = (size_t)spec->gn_groups;
      n->eps = spec->bn_epsilon;
      n->momentum = spec->bn_momentum;
    }
    fl_seq_layer_spec *p = &layers[nl++];
    p->kind = FL_SEQ_POOL;
    p->segment = b;
    snprintf(p->name, sizeof p->name, "pool%d", b);
    p->k = 2;
    p->stride = 2;
  }
  int fc = 0;
  if (spec->fc_hidden > 0) {
    fl_seq_layer_spec *h = &layers[nl++];
    h->kind = FL_SEQ_LINEAR;
    h->segment = 2;
    snprintf(h->name, sizeof h->name, "fc%d", fc++);
    h->out = spec->fc_hidden;
    h->bias = 1;
    h->act = act;
    h->he_init = act == FL_ACT_RELU;
  }
  fl_seq_layer_spec *o = &layers[nl++];
  o->kind = FL_SEQ_LINEAR;
  o->segment = 2;
  snprintf(o->name, sizeof o->name, "fc%d", fc);
  o->out = (size_t)spec->num_classes;
  o->bias = 1;
  return fl_seq_create(layers, nl, (size_t)spec->in_channels, (size_t)spec->in_height,
                       (size_t)spec->in_width, (size_t)spec->num_classes, max_batch, seed,
                       spec->recompute, handle);
}

const fl_model_ops fl_model_cnn_ops = {
    .abi_version = FL_MODEL_PLUGIN_ABI, .create = cnn_create, .destroy = fl_seq_destroy,
    .num_params = fl_seq_num_params, .param = fl_seq_param, .input_size = fl_seq_input_size,
    .train_step = fl_seq_train_step, .eval = fl_seq_eval,
    .activation_bytes = fl_seq_activation_bytes};
