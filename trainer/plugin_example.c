/* plugin_example.c - an example model plugin (plugin ABI v1, fl_model.h).
 *
 * A complete plugin in one file, built as a loadable module and used by the
 * tests: a one-hidden-layer tanh network,
 *
 *   hidden = tanh(x W0^T + b0)   ("hidden.weight", "hidden.bias")
 *   logits = hidden W1^T + b1    ("out.weight", "out.bias")
 *
 * made of the kernels of fl_layers.h.  plugin_args may say "hidden=N"
 * (default 32).  Load it with `model: {kind: plugin, plugin_path: ...}`.
 * Outside the tree, build it against an installed Flotilla with
 *   cc -shared -fPIC $(pkg-config --cflags flotilla) plugin_example.c \
 *      -o plugin_example.so $(pkg-config --libs flotilla) -lm
 * It owns everything it allocates and keeps no global state, so several
 * instances can coexist. */
#ifdef HAVE_CONFIG_H /* in the tree; an installed Flotilla has no config.h */
#include <config.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_layers.h"
#include "fl_model.h"

typedef struct example {
  size_t in, hidden, classes, max_batch;
  fl_param p[4];
  float *mem;                  /* every buffer below, one allocation */
  float *h, *logits, *dh;      /* activations for max_batch */
} example;

/* Same seed, same bits: a splitmix64 stream per parameter. */
static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void xavier(fl_param *p, uint64_t seed, uint64_t stream) {
  uint64_t s = seed ^ (stream * 0xd1b54a32d192ed03ull);
  const float bound = (float)sqrt(6.0 / (double)(p->shape[0] + p->shape[1]));
  for (size_t i = 0; i < p->n; i++)
    p->value[i] = ((float)(next(&s) >> 40) * 0x1p-24f * 2.0f - 1.0f) * bound;
}

static void ex_destroy(void *handle) {
  example *e = handle;
  if (!e) return;
  free(e->mem);
  free(e);
}

static void set_param(fl_param *p, const char *name, size_t d0, size_t d1, float **cursor) {
  snprintf(p->name, sizeof p->name, "%s", name);
  p->ndim = d1 ? 2 : 1;
  p->shape[0] = (int64_t)d0;
  p->shape[1] = (int64_t)d1;
  p->n = d1 ? d0 * d1 : d0;
  p->value = *cursor;
  p->grad = *cursor + p->n;
  *cursor += 2 * p->n;
  p->layer = strncmp(name, "out", 3) == 0;
}

static fl_status ex_create(const fl_model_spec *spec, size_t max_batch, uint64_t seed,
                           void **handle) {
  size_t hidden = 32;
  if (spec->plugin_args[0]) {
    char extra;
    if (sscanf(spec->plugin_args, "hidden=%zu%c", &hidden, &extra) != 1 || hidden == 0)
      return FL_EINVAL; /* the trainer names the plugin and the code */
  }
  example *e = calloc(1, sizeof *e);
  if (!e) return FL_ENOMEM;
  e->in = (size_t)spec->in_channels * (size_t)spec->in_height * (size_t)spec->in_width;
  e->hidden = hidden;
  e->classes = (size_t)spec->num_classes;
  e->max_batch = max_batch;
  const size_t nparam = hidden * e->in + hidden + e->classes * hidden + e->classes;
  const size_t nact = max_batch * (2 * hidden + e->classes);
  e->mem = calloc(2 * nparam + nact, sizeof(float));
  if (!e->mem) {
    free(e);
    return FL_ENOMEM;
  }
  float *cur = e->mem;
  set_param(&e->p[0], "hidden.weight", hidden, e->in, &cur);
  set_param(&e->p[1], "hidden.bias", hidden, 0, &cur);
  set_param(&e->p[2], "out.weight", e->classes, hidden, &cur);
  set_param(&e->p[3], "out.bias", e->classes, 0, &cur);
  e->h = cur;
  e->dh = e->h + max_batch * hidden;
  e->logits = e->dh + max_batch * hidden;
  xavier(&e->p[0], seed, 0);
  xavier(&e->p[2], seed, 2);
  *handle = e;
  return FL_OK;
}

static size_t ex_num_params(void *handle) { (void)handle; return 4; }

static fl_param *ex_param(void *handle, size_t index) {
  example *e = handle;
  return index < 4 ? &e->p[index] : NULL;
}

static size_t ex_input_size(void *handle) { return ((example *)handle)->in; }

static size_t ex_activation_bytes(void *handle) {
  example *e = handle;
  return e->max_batch * (2 * e->hidden + e->classes) * sizeof(float);
}

static fl_status forward(example *e, const float *x, size_t batch) {
  fl_status st = fl_linear_forward(x, e->p[0].value, e->p[1].value, e->h, batch, e->in,
                                   e->hidden, FL_ACT_TANH);
  if (st != FL_OK) return st;
  return fl_linear_forward(e->h, e->p[2].value, e->p[3].value, e->logits, batch, e->hidden,
                           e->classes, FL_ACT_NONE);
}

static void fill(fl_model_result *res, double loss, size_t c1, size_t c5, size_t batch) {
  if (!res) return;
  res->loss_sum = loss;
  res->correct1 = c1;
  res->correct5 = c5;
  res->count = batch;
}

static fl_status ex_train_step(void *handle, const float *x, const int32_t *y, size_t batch,
                               float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                               fl_model_result *res) {
  example *e = handle;
  double loss;
  size_t c1, c5;
  fl_status st = forward(e, x, batch);
  if (st != FL_OK) return st;
  /* dlogits overwrite the logits (allowed by fl_softmax_xent). */
  st = fl_softmax_xent(e->logits, y, batch, e->classes, loss_scale, e->logits, &loss, &c1, &c5);
  if (st != FL_OK) return st;
  st = fl_linear_backward(e->h, e->p[2].value, NULL, e->logits, e->dh, e->p[2].grad,
                          e->p[3].grad, batch, e->hidden, e->classes, FL_ACT_NONE);
  if (st != FL_OK) return st;
  if (on_ready) on_ready(ctx, 3), on_ready(ctx, 2);
  st = fl_linear_backward(x, e->p[0].value, e->h, e->dh, NULL, e->p[0].grad, e->p[1].grad,
                          batch, e->in, e->hidden, FL_ACT_TANH);
  if (st != FL_OK) return st;
  if (on_ready) on_ready(ctx, 1), on_ready(ctx, 0);
  fill(res, loss, c1, c5, batch);
  return FL_OK;
}

static fl_status ex_eval(void *handle, const float *x, const int32_t *y, size_t batch,
                         fl_model_result *res) {
  example *e = handle;
  double loss;
  size_t c1, c5;
  fl_status st = forward(e, x, batch);
  if (st != FL_OK) return st;
  st = fl_softmax_xent(e->logits, y, batch, e->classes, 1.0f, NULL, &loss, &c1, &c5);
  if (st != FL_OK) return st;
  fill(res, loss, c1, c5, batch);
  return FL_OK;
}

/* The one symbol the trainer looks for. */
const fl_model_ops fl_model_plugin_v1 = {
    .abi_version = FL_MODEL_PLUGIN_ABI,
    .create = ex_create,
    .destroy = ex_destroy,
    .num_params = ex_num_params,
    .param = ex_param,
    .input_size = ex_input_size,
    .train_step = ex_train_step,
    .eval = ex_eval,
    .activation_bytes = ex_activation_bytes,
};
