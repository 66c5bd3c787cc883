/* model.c - fl_model: one front for the built-in models and plugins.
 *
 * Every model, built in or loaded, is an fl_model_ops table and a handle.
 * This file resolves the spec's defaults, checks what all models share,
 * picks the table by kind, checks the arguments of every call before the
 * model sees them (so a bad batch changes nothing, and plugins get clean
 * input), and owns the seeded generator the built-in models initialise
 * their parameters with.  The built-in kinds are op graphs (the presets of
 * model_presets.c) and kind onnx loads one from a file; both run on
 * the graph engine, on the host or, with device gpu, on a CUDA device. */
#include <config.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_config.h"
#include "fl_device.h"
#include "fl_log.h"
#include "fl_graph_inspect.h"
#include "fl_onnx.h"
#include "fl_model_kind.h"
#include "fl_sparse_model.h"
#include "model_internal.h"

struct fl_model {
  const fl_model_ops *ops;
  void *handle;
  void *dl; /* plugins: the dlopen handle */
  int graph; /* handle is a compiled graph (fl_graph.h) */
  fl_gloss loss; /* graphs: what train_step's targets are */
  fl_model_spec spec;
  size_t max_batch;
  const fl_sparse_hooks *sparse; /* models with sparse tables (fl_sparse_model.h) */
  void *sparse_self;
  fl_model_edit_fn edit; /* applied to the graph before it is compiled, or NULL */
  void *edit_ctx;
};

/* ------------------------------------------------------------------ init */

/* splitmix64 (Steele, Lea, Flood): a tiny generator whose whole state is
 * one counter, so a (seed, stream) pair names a reproducible sequence. */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void fl_model_init_uniform(float *w, size_t n, float bound, uint64_t seed, uint64_t stream) {
  uint64_t st = seed;
  st = splitmix64(&st) ^ (stream * 0xd1b54a32d192ed03ull);
  for (size_t i = 0; i < n; i++) {
    /* 24 random bits -> [0, 1) exactly representable in float */
    const float u = (float)(splitmix64(&st) >> 40) * 0x1p-24f;
    w[i] = (2.0f * u - 1.0f) * bound;
  }
}

/* ------------------------------------------------------------------ spec */

void fl_model_spec_defaults(fl_model_spec *spec) {
  if (!spec) return;
  memset(spec, 0, sizeof *spec);
  strcpy(spec->kind, "mlp");
  spec->in_channels = 1, spec->in_height = 28, spec->in_width = 28;
  spec->num_classes = 10;
  spec->hidden[0] = 256, spec->hidden[1] = 128, spec->hidden[2] = 100;
  spec->n_hidden = 3;
  strcpy(spec->activation, "relu");
  spec->conv_channels[0] = 32, spec->conv_channels[1] = 64;
  spec->conv_kernel = 5;
  spec->fc_hidden = 128;
  spec->gn_groups = 8;
  spec->bn_momentum = 0.1f;
  spec->bn_epsilon = 1e-5f;
  strcpy(spec->device, fl_train_device_names[FL_DEVICE_CPU]);
}

/* The device fields of r: "" becomes "cpu"; a gpu model needs a built-in
 * kind, a CUDA build and the device.  Logs what is wrong. */
static fl_status resolve_device(fl_model_spec *r) {
  r->device[sizeof r->device - 1] = '\0';
  if (!r->device[0]) strcpy(r->device, fl_train_device_names[FL_DEVICE_CPU]);
  const int lm = (int)r->linear_math, cm = (int)r->conv_math;
  if (lm < FL_MATH_FP32 || lm > FL_MATH_BF16 || cm < FL_MATH_FP32 || cm > FL_MATH_BF16)
    return FL_ERR(FL_EINVAL, "model: linear_math %d / conv_math %d must be an fl_math", lm,
                  cm);
  const int dev = fl_names_find(fl_train_device_names, r->device);
  if (dev == FL_DEVICE_CPU) return FL_OK;
  if (dev != FL_DEVICE_GPU)
    return FL_ERR(FL_EINVAL, "model: device '%s' must be cpu or gpu", r->device);
  if (!fl_model_kind_has(r->kind, FL_KIND_GPU))
    return FL_ERR(FL_ENOTSUP, "model: device gpu: model.kind %s computes on the host (use cpu)",
                  r->kind);
#ifndef FL_HAVE_CUDA
  return FL_ERR(FL_ENOTSUP, "model: device gpu: built without CUDA (configure --with-cuda)");
#else
  const int n = fl_cuda_device_count();
  if (n == 0) return FL_ERR(FL_ENOTSUP, "model: device gpu: no CUDA device");
  if (r->device_id < 0 || r->device_id >= n)
    return FL_ERR(FL_EINVAL, "model: device_id %d outside the %d CUDA devices", r->device_id, n);
  return FL_OK;
#endif
}

/* Copy spec into r with zero fields replaced by their defaults, and check
 * the fields every kind shares.  Logs what is wrong. */
static fl_status resolve_spec(const fl_model_spec *spec, fl_model_spec *r) {
  *r = *spec;
  r->kind[sizeof r->kind - 1] = '\0';
  r->activation[sizeof r->activation - 1] = '\0';
  r->norm[sizeof r->norm - 1] = '\0';
  r->plugin_path[sizeof r->plugin_path - 1] = '\0';
  r->plugin_args[sizeof r->plugin_args - 1] = '\0';
  r->path[sizeof r->path - 1] = '\0';
  r->output[sizeof r->output - 1] = '\0';
  if (r->n_checkpoints > 0 && !r->checkpoints)
    return FL_ERR(FL_EINVAL, "model: %zu recompute checkpoints but no names", r->n_checkpoints);
  if ((r->n_amp_white > 0 && !r->amp_white) || (r->n_amp_black > 0 && !r->amp_black))
    return FL_ERR(FL_EINVAL, "model: an AMP op list with entries but no names");
  if (r->n_amp_white > FL_MODEL_MAX_AMP_LIST || r->n_amp_black > FL_MODEL_MAX_AMP_LIST)
    return FL_ERR(FL_EINVAL, "model: AMP op lists of %zu and %zu names (at most %d each)",
                  r->n_amp_white, r->n_amp_black, FL_MODEL_MAX_AMP_LIST);
  if (!r->kind[0]) strcpy(r->kind, "mlp");
  if (!r->in_channels) r->in_channels = 1;
  if (!r->in_height) r->in_height = 28;
  if (!r->in_width) r->in_width = 28;
  if (!r->num_classes) r->num_classes = 10;
  if (!r->activation[0]) strcpy(r->activation, "relu");
  if (!r->conv_channels[0]) r->conv_channels[0] = 32;
  if (!r->conv_channels[1]) r->conv_channels[1] = 64;
  if (!r->conv_kernel) r->conv_kernel = 5;
  if (!r->gn_groups) r->gn_groups = 8;
  if (r->bn_momentum == 0.0f) r->bn_momentum = 0.1f;
  if (r->bn_epsilon == 0.0f) r->bn_epsilon = 1e-5f;

  if (r->in_channels < 0 || r->in_height < 0 || r->in_width < 0)
    return FL_ERR(FL_EINVAL, "model: input geometry %dx%dx%d must be positive", r->in_channels,
                  r->in_height, r->in_width);
  if (r->num_classes < 2)
    return FL_ERR(FL_EINVAL, "model: num_classes %d must be at least 2", r->num_classes);
  if (r->n_hidden > FL_MODEL_MAX_HIDDEN)
    return FL_ERR(FL_EINVAL, "model: %zu hidden layers, at most %d", r->n_hidden,
                  FL_MODEL_MAX_HIDDEN);
  fl_act act;
  if (fl_act_parse(r->activation, &act) != FL_OK || act == FL_ACT_NONE)
    return FL_ERR(FL_EINVAL, "model: activation '%s' must be relu or tanh", r->activation);
  fl_norm_kind nk;
  if (fl_norm_parse(r->norm, &nk) != FL_OK)
    return FL_ERR(FL_EINVAL, "model: norm '%s' must be \"\" (none), bn or gn", r->norm);
  if (r->conv_channels[0] < 0 || r->conv_channels[1] < 0 || r->conv_kernel < 0 ||
      r->gn_groups < 0)
    return FL_ERR(FL_EINVAL, "model: conv channels %d/%d, kernel %d and gn_groups %d must be "
                  "positive", r->conv_channels[0], r->conv_channels[1], r->conv_kernel,
                  r->gn_groups);
  if (!(r->bn_momentum > 0.0f && r->bn_momentum <= 1.0f))
    return FL_ERR(FL_EINVAL, "model: bn_momentum %g must be in (0, 1]", (double)r->bn_momentum);
  if (!(r->bn_epsilon > 0.0f) || !isfinite(r->bn_epsilon))
    return FL_ERR(FL_EINVAL, "model: bn_epsilon %g must be > 0", (double)r->bn_epsilon);
  return resolve_device(r);
}

/* --------------------------------------------------------------- plugins */

/* A plugin's parameter list must be well-formed before the loop uses it. */
static fl_status check_params(const fl_model *m) {
  const size_t np = m->ops->num_params(m->handle);
  for (size_t i = 0; i < np; i++) {
    const fl_param *p = m->ops->param(m->handle, i);
    if (!p || !p->value || memchr(p->name, '\0', sizeof p->name) == NULL || !p->name[0] ||
        p->ndim < 1 || p->ndim > FL_MODEL_MAX_DIMS)
      return FL_ERR(FL_EINVAL, "model plugin %s: parameter %zu is malformed (NULL, no value, "
                    "unterminated name or ndim outside 1..%d)", m->spec.plugin_path, i,
                    FL_MODEL_MAX_DIMS);
    size_t n = 1;
    for (int d = 0; d < p->ndim; d++) {
      if (p->shape[d] <= 0)
        return FL_ERR(FL_EINVAL, "model plugin %s: parameter %s has dimension %d of size %lld",
                      m->spec.plugin_path, p->name, d, (long long)p->shape[d]);
      n *= (size_t)p->shape[d];
    }
    if (n != p->n)
      return FL_ERR(FL_EINVAL, "model plugin %s: parameter %s has n = %zu but its shape holds "
                    "%zu", m->spec.plugin_path, p->name, p->n, n);
  }
  if (m->ops->input_size(m->handle) == 0)
    return FL_ERR(FL_EINVAL, "model plugin %s: input size 0", m->spec.plugin_path);
  return FL_OK;
}

/* ----------------------------------------------------------------- graphs */

/* The graph of kind onnx: spec->path, its output and loss.  Logs. */
static fl_status load_onnx(const fl_model_spec *s, fl_graph **g) {
  if (!s->path[0]) return FL_ERR(FL_EINVAL, "model: kind onnx needs path (the .onnx file)");
  if ((unsigned)s->loss >= FL_LOSS_COUNT)
    return FL_ERR(FL_EINVAL, "model %s: loss %d is not an fl_loss_kind (0 to %d)", s->path,
                  (int)s->loss, FL_LOSS_COUNT - 1);
  return fl_onnx_load(s->path, s->output, (fl_gloss)s->loss, g);
}

/* Values per sample of a compiled graph's output (the classes of a
 * softmax model, K targets otherwise). */
static size_t graph_width(const fl_model *m) {
  const fl_graph *g = fl_graph_model_graph(m->handle);
  fl_gtensor_info ti;
  if (fl_graph_tensor_info(g, fl_graph_output_id(g, NULL), &ti) != FL_OK) return 0;
  size_t k = 1;
  for (int d = 1; d < ti.ndim; d++) k *= (size_t)ti.dims[d];
  return k;
}

/* Build m's graph (a preset, or the ONNX file of kind onnx) and compile it
 * for m->max_batch on m's device.  Logs what is wrong. */
static fl_status create_graph(fl_model *m, uint64_t seed) {
  const fl_model_spec *s = &m->spec;
  char ck[FL_MODEL_MAX_CKPT][FL_MODEL_NAME_MAX];
  const char *ckp[FL_MODEL_MAX_CKPT];
  size_t n_ck = 0;
  fl_graph *g = NULL;
  fl_graph_options opt;
  memset(&opt, 0, sizeof opt);
  if (fl_model_kind_has(s->kind, FL_KIND_FILE)) {
    FL_TRY(load_onnx(s, &g));
  } else {
    FL_TRY(fl_graph_preset(s, seed, &g, ck, &n_ck));
  }
  const fl_status est = m->edit ? m->edit(g, m->edit_ctx) : FL_OK;
  if (est != FL_OK) {
    fl_graph_free(g);
    return est;
  }
  for (size_t i = 0; i < n_ck; i++) ckp[i] = ck[i];
  opt.max_batch = m->max_batch;
  opt.seed = seed;
  opt.recompute = s->recompute;
  opt.checkpoints = ckp;
  opt.n_checkpoints = n_ck;
  if (s->recompute && s->n_checkpoints > 0) { /* the job's names win over the preset's */
    opt.checkpoints = s->checkpoints;
    opt.n_checkpoints = s->n_checkpoints;
  }
  /* AMP: the 16-bit precision for GEMMs, for the op types of the job's
   * white list (default Gemm, MatMul, Conv) except those of its black list
   * and the layer kinds the spec leaves fp32 (linear_math / conv_math) */
  const char *black[FL_MODEL_MAX_AMP_LIST + 3];
  size_t nb = 0;
  opt.amp_math = s->linear_math != FL_MATH_FP32 ? s->linear_math : s->conv_math;
  if (opt.amp_math != FL_MATH_FP32 && s->linear_math == FL_MATH_FP32)
    black[nb++] = "Gemm", black[nb++] = "MatMul";
  if (opt.amp_math != FL_MATH_FP32 && s->conv_math == FL_MATH_FP32) black[nb++] = "Conv";
  for (size_t i = 0; i < s->n_amp_black; i++) black[nb++] = s->amp_black[i];
  opt.amp_black = black;
  opt.n_amp_black = nb;
  opt.amp_white = s->amp_white;
  opt.n_amp_white = s->n_amp_white;
  opt.device =
      fl_names_find(fl_train_device_names, s->device) == FL_DEVICE_GPU ? s->device_id : -1;
  FL_TRY(fl_graph_model_create(g, &opt, &m->handle));
  m->ops = &fl_graph_model_ops;
  m->graph = 1;
  /* an imported model's classes (or targets) are its output's width */
  if (fl_model_kind_has(s->kind, FL_KIND_FILE)) {
    const size_t k = graph_width(m);
    fl_gloss loss = FL_GLOSS_SOFTMAX_XENT;
    (void)fl_graph_output_id(fl_graph_model_graph(m->handle), &loss);
    m->loss = loss;
    if (k == 0 || k > INT32_MAX || (loss == FL_GLOSS_SOFTMAX_XENT && k < 2))
      return FL_ERR(FL_EINVAL, "model %s: output of %zu values per sample (a softmax needs at "
                    "least 2 classes)", s->path, k);
    m->spec.num_classes = (int)k;
  }
  return FL_OK;
}

/* ------------------------------------------------------------- lifecycle */

/* fl_model_create, with edit (may be NULL) applied to the graph. */
static fl_status model_create(const fl_model_spec *spec, size_t max_batch, uint64_t seed,
                              fl_model_edit_fn edit, void *edit_ctx, fl_model **out) {
  if (!spec || !out) return FL_ERR(FL_EINVAL, "model: NULL spec or output");
  *out = NULL;
  if (max_batch == 0) return FL_ERR(FL_EINVAL, "model: max_batch must be > 0");
  fl_model *m = calloc(1, sizeof *m);
  if (!m) return FL_ERR(FL_ENOMEM, "model: out of memory");
  m->edit = edit;
  m->edit_ctx = edit_ctx;
  fl_status st = resolve_spec(spec, &m->spec);
  if (st != FL_OK) goto fail;
  m->max_batch = max_batch;
  const char *kind = m->spec.kind;
  if (fl_model_kind_index(kind) < 0 || fl_model_kind_has(kind, FL_KIND_SPARSE)) {
    st = FL_ERR(FL_EINVAL, "model: kind '%s' is no dense model (logreg, mlp, cnn, onnx or "
                "plugin; a kind with sparse tables is built from its data by fl_model_build)",
                kind);
    goto fail;
  } else if (!fl_model_kind_has(kind, FL_KIND_PLUGIN)) {
    st = create_graph(m, seed);
    if (st != FL_OK) goto fail;
  } else {
    if (!m->spec.plugin_path[0]) {
      st = FL_ERR(FL_EINVAL, "model: kind plugin needs plugin_path");
      goto fail;
    }
    st = fl_model_plugin_open(m->spec.plugin_path, &m->ops, &m->dl);
    if (st != FL_OK) goto fail;
    st = m->ops->create(&m->spec, max_batch, seed, &m->handle);
    if (st != FL_OK) {
      FL_LOGE("model plugin %s: create failed: %s", m->spec.plugin_path, fl_strerror(st));
      m->handle = NULL;
      goto fail;
    }
    if ((st = check_params(m)) != FL_OK) goto fail;
  }
  *out = m;
  return FL_OK;
fail:
  fl_model_destroy(m);
  return st;
}

fl_status fl_model_create(const fl_model_spec *spec, size_t max_batch, uint64_t seed,
                          fl_model **out) {
  return model_create(spec, max_batch, seed, NULL, NULL, out);
}

fl_status fl_model_create_edited(const fl_model_spec *spec, size_t max_batch, uint64_t seed,
                                 fl_model_edit_fn edit, void *ctx, fl_model **out) {
  if (!edit) return FL_ERR(FL_EINVAL, "model: create_edited without an edit");
  if (spec && fl_model_kind_has(spec->kind, FL_KIND_PLUGIN))
    return FL_ERR(FL_EINVAL, "model: a plugin has no graph to edit");
  return model_create(spec, max_batch, seed, edit, ctx, out);
}

void fl_model_set_sparse(fl_model *m, const fl_sparse_hooks *hooks, void *self) {
  m->sparse = hooks;
  m->sparse_self = self;
}

void *fl_model_graph_handle(fl_model *m) { return m && m->graph ? m->handle : NULL; }

fl_status fl_model_wrap_graph(const fl_model_spec *spec, void *graph, size_t max_batch,
                              const fl_sparse_hooks *hooks, void *self, fl_model **out) {
  fl_model *m = calloc(1, sizeof *m);
  if (!m) {
    fl_graph_model_ops.destroy(graph);
    if (hooks) hooks->destroy(self);
    return FL_ERR(FL_ENOMEM, "model %s: out of memory", spec->kind);
  }
  m->ops = &fl_graph_model_ops;
  m->handle = graph;
  m->graph = 1;
  (void)fl_graph_output_id(fl_graph_model_graph(graph), &m->loss);
  m->spec = *spec;
  /* float targets: one per output value (the CTR model's one logit, though
   * its job says num_classes 2), which is what the target checks read */
  if (m->loss != FL_GLOSS_SOFTMAX_XENT) m->spec.num_classes = (int)graph_width(m);
  m->max_batch = max_batch;
  m->sparse = hooks;
  m->sparse_self = self;
  *out = m;
  return FL_OK;
}

const fl_sparse_hooks *fl_model_sparse(const fl_model *m, void **self) {
  if (!m || !m->sparse) return NULL;
  if (self) *self = m->sparse_self;
  return m->sparse;
}

/* A dense kind's build: fl_model_create from the spec. */
static fl_status build_dense(const fl_model_build_args *a, fl_model **out) {
  return fl_model_create(a->spec, a->max_batch, a->seed, out);
}

/* Kind onnx: dense, or with pserver.sparse_tables a model with sparse
 * tables (model_sparse_graph.c). */
static fl_status build_onnx(const fl_model_build_args *a, fl_model **out) {
  if (a->job && a->job->pserver.n_sparse_tables > 0) return fl_sparse_graph_model_create(a, out);
  return build_dense(a, out);
}

/* The build function of each row of fl_model_kinds, by its index. */
static const fl_model_build_fn k_builders[] = {
    [FL_MODEL_KIND_LOGREG] = build_dense, [FL_MODEL_KIND_MLP] = build_dense,
    [FL_MODEL_KIND_CNN] = build_dense,    [FL_MODEL_KIND_PLUGIN] = build_dense,
    [FL_MODEL_KIND_CTR] = fl_ctr_model_create, [FL_MODEL_KIND_ONNX] = build_onnx,
};
_Static_assert(sizeof k_builders / sizeof k_builders[0] == FL_MODEL_KINDS,
               "a build function for every row of fl_model_kinds");

fl_status fl_model_build(const fl_model_build_args *a, fl_model **out) {
  const int i = fl_model_kind_index(a->spec->kind);
  if (i < 0)
    return FL_ERR(FL_EINVAL, "model: unknown kind '%s' (logreg, mlp, cnn, plugin, ctr or onnx)",
                  a->spec->kind);
  return k_builders[i](a, out);
}

void fl_model_destroy(fl_model *m) {
  if (!m) return;
  if (m->handle) m->ops->destroy(m->handle);
  if (m->sparse) m->sparse->destroy(m->sparse_self);
  if (m->dl) dlclose(m->dl);
  free(m);
}

const fl_model_spec *fl_model_get_spec(const fl_model *m) { return m ? &m->spec : NULL; }

size_t fl_model_max_batch(const fl_model *m) { return m ? m->max_batch : 0; }

size_t fl_model_num_params(const fl_model *m) { return m ? m->ops->num_params(m->handle) : 0; }

fl_param *fl_model_param(fl_model *m, size_t index) {
  if (!m || index >= m->ops->num_params(m->handle)) return NULL;
  return m->ops->param(m->handle, index);
}

size_t fl_model_input_size(const fl_model *m) { return m ? m->ops->input_size(m->handle) : 0; }

void fl_model_set_step(fl_model *m, uint64_t step) {
  if (m && m->graph) fl_graph_model_set_step(m->handle, step);
}

const fl_graph *fl_model_graph(const fl_model *m) {
  return m && m->graph ? fl_graph_model_graph(m->handle) : NULL;
}

size_t fl_model_activation_bytes(const fl_model *m) {
  return m ? m->ops->activation_bytes(m->handle) : 0;
}

fl_status fl_model_set_norm_sync(fl_model *m, fl_norm_sync_fn fn, void *ctx) {
  if (!m) return FL_ERR(FL_EINVAL, "model: set_norm_sync on NULL");
  if (!m->graph) return FL_ENOTSUP; /* plugins have no hook (fl_model.h) */
  return fl_graph_model_set_norm_sync(m->handle, fn, ctx);
}

/* ----------------------------------------------------------------- steps */

int fl_model_float_targets(const fl_model *m) {
  return m && m->graph && m->loss != FL_GLOSS_SOFTMAX_XENT;
}

static fl_status check_batch(const fl_model *m, const float *x, const void *y, size_t batch,
                             const char *what) {
  if (!m || !x || !y) return FL_ERR(FL_EINVAL, "model %s: NULL model, input or labels", what);
  if (batch == 0 || batch > m->max_batch)
    return FL_ERR(FL_EINVAL, "model %s: batch %zu outside [1, %zu]", what, batch,
                  m->max_batch);
  return FL_OK;
}

static fl_status check_labels(const fl_model *m, const int32_t *y, size_t batch,
                              const char *what) {
  if (fl_model_float_targets(m))
    return FL_ERR(FL_EINVAL, "model %s: loss %s takes float targets, not class labels", what,
                  fl_onnx_loss_name(m->loss));
  for (size_t i = 0; i < batch; i++)
    if (y[i] < 0 || y[i] >= m->spec.num_classes)
      return FL_ERR(FL_EINVAL, "model %s: label %d of sample %zu outside [0, %d)", what,
                    (int)y[i], i, m->spec.num_classes);
  return FL_OK;
}

static fl_status check_scale(float loss_scale) {
  if (!(loss_scale > 0.0f) || !isfinite(loss_scale))
    return FL_ERR(FL_EINVAL, "model train_step: loss scale %g must be finite and > 0",
                  (double)loss_scale);
  return FL_OK;
}

fl_status fl_model_train_step(fl_model *m, const float *x, const int32_t *y, size_t batch,
                              float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                              fl_model_result *res) {
  FL_TRY(check_batch(m, x, y, batch, "train_step"));
  FL_TRY(check_labels(m, y, batch, "train_step"));
  FL_TRY(check_scale(loss_scale));
  fl_status st = m->ops->train_step(m->handle, x, y, batch, loss_scale, on_ready, ctx, res);
  if (st != FL_OK && m->dl)
    FL_LOGE("model plugin %s: train_step failed: %s", m->spec.plugin_path, fl_strerror(st));
  return st;
}

fl_status fl_model_eval(fl_model *m, const float *x, const int32_t *y, size_t batch,
                        fl_model_result *res) {
  FL_TRY(check_batch(m, x, y, batch, "eval"));
  FL_TRY(check_labels(m, y, batch, "eval"));
  fl_status st = m->ops->eval(m->handle, x, y, batch, res);
  if (st != FL_OK && m->dl)
    FL_LOGE("model plugin %s: eval failed: %s", m->spec.plugin_path, fl_strerror(st));
  return st;
}

/* Float targets must be finite (a NaN target would poison the loss). */
static fl_status check_targets(const fl_model *m, const float *t, size_t batch,
                               const char *what) {
  if (!fl_model_float_targets(m))
    return FL_ERR(FL_EINVAL, "model %s: this model takes class labels, not float targets", what);
  const size_t n = batch * (size_t)m->spec.num_classes;
  for (size_t i = 0; i < n; i++)
    if (!isfinite(t[i]))
      return FL_ERR(FL_EINVAL, "model %s: target %zu of sample %zu is not finite", what,
                    i % (size_t)m->spec.num_classes, i / (size_t)m->spec.num_classes);
  return FL_OK;
}

fl_status fl_model_train_stepf(fl_model *m, const float *x, const float *t, size_t batch,
                               float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                               fl_model_result *res) {
  FL_TRY(check_batch(m, x, t, batch, "train_step"));
  FL_TRY(check_targets(m, t, batch, "train_step"));
  FL_TRY(check_scale(loss_scale));
  return fl_graph_model_train_stepf(m->handle, x, t, batch, loss_scale, on_ready, ctx, res);
}

fl_status fl_model_evalf(fl_model *m, const float *x, const float *t, size_t batch,
                         fl_model_result *res) {
  FL_TRY(check_batch(m, x, t, batch, "eval"));
  FL_TRY(check_targets(m, t, batch, "eval"));
  return fl_graph_model_evalf(m->handle, x, t, batch, res);
}

int fl_model_binary(const fl_model *m) {
  return m && m->graph && m->loss == FL_GLOSS_BCE_LOGITS;
}

const float *fl_model_logits(const fl_model *m) {
  if (!m || !m->graph || m->loss != FL_GLOSS_BCE_LOGITS) return NULL;
  return fl_graph_model_output(m->handle);
}

/* The sparse model's slot bound: its feed (*f, a model of named inputs),
 * or its targets checked like a batch's (*f NULL). */
static fl_status bind_slot(fl_model *m, unsigned slot, size_t batch, const float **t,
                           const fl_model_feed **f, const char *what) {
  if (!m || !m->sparse || slot >= FL_SPARSE_SLOTS)
    return FL_ERR(FL_EINVAL, "model %s: not a model with sparse tables, or slot %u",
                  what, slot);
  FL_TRY(m->sparse->bind(m->sparse_self, slot, t));
  *f = m->sparse->feed ? m->sparse->feed(m->sparse_self) : NULL;
  if (*f) return FL_OK; /* checked as every feed is */
  FL_TRY(check_batch(m, *t, *t, batch, what));
  return check_targets(m, *t, batch, what);
}

fl_status fl_model_train_sparse(fl_model *m, unsigned slot, size_t batch, float loss_scale,
                                fl_grad_ready_fn on_ready, void *ctx, fl_model_result *res) {
  const float *t = NULL;
  const fl_model_feed *f = NULL;
  FL_TRY(bind_slot(m, slot, batch, &t, &f, "train_step"));
  if (f) return fl_model_train_feed(m, f, batch, loss_scale, on_ready, ctx, res);
  FL_TRY(check_scale(loss_scale));
  return fl_graph_model_train_stepf(m->handle, NULL, t, batch, loss_scale, on_ready, ctx, res);
}

fl_status fl_model_eval_sparse(fl_model *m, unsigned slot, size_t batch, fl_model_result *res) {
  const float *t = NULL;
  const fl_model_feed *f = NULL;
  FL_TRY(bind_slot(m, slot, batch, &t, &f, "eval"));
  if (f) return fl_model_eval_feed(m, f, batch, res);
  return fl_graph_model_evalf(m->handle, NULL, t, batch, res);
}

/* ----------------------------------------------------------------- feeds */

/* Whether a Cast to an integer type (INT32 6, INT64 7) reads tensor id. */
static int read_by_int_cast(const fl_graph *g, int id) {
  for (int i = 0; i < fl_graph_num_nodes(g); i++) {
    fl_gnode_info ni;
    if (fl_graph_node_info(g, i, &ni) != FL_OK || ni.n_in < 1 || ni.in[0] != id ||
        !(ni.traits & FL_GOP_CAST))
      continue;
    for (int a = 0; a < ni.n_attrs; a++)
      if (ni.attrs[a].name && !strcmp(ni.attrs[a].name, "to") &&
          (ni.attrs[a].i == 6 || ni.attrs[a].i == 7))
        return 1;
  }
  return 0;
}

/* The graph tensor id of m's input i, or -1. */
static int graph_input(const fl_model *m, size_t i) {
  const fl_graph *g = fl_graph_model_graph(m->handle);
  size_t k = 0;
  for (int t = 0; t < fl_graph_num_tensors(g); t++) {
    fl_gtensor_info ti;
    if (fl_graph_tensor_info(g, t, &ti) == FL_OK && ti.kind == FL_GT_INPUT && k++ == i) return t;
  }
  return -1;
}

size_t fl_model_num_inputs(const fl_model *m) {
  if (!m) return 0;
  if (!m->graph) return 1;
  size_t n = 0;
  while (graph_input(m, n) >= 0) n++;
  return n;
}

fl_status fl_model_input_get(const fl_model *m, size_t i, fl_model_input_info *out) {
  if (!m || !out || i >= fl_model_num_inputs(m)) return FL_EINVAL;
  memset(out, 0, sizeof *out);
  if (!m->graph) { /* a plugin: one float input of input_size values */
    *out = (fl_model_input_info){.dtype = FL_MODEL_F32, .ndim = 2,
                                 .dims = {-1, (int64_t)fl_model_input_size(m)}};
    snprintf(out->name, sizeof out->name, "x");
    return FL_OK;
  }
  const fl_graph *g = fl_graph_model_graph(m->handle);
  const int id = graph_input(m, i);
  fl_gtensor_info ti;
  FL_TRY(fl_graph_tensor_info(g, id, &ti));
  snprintf(out->name, sizeof out->name, "%s", ti.name);
  out->dtype = ti.dtype == FL_G_I64 ? FL_MODEL_I64 : FL_MODEL_F32;
  out->ndim = ti.ndim < FL_MODEL_INPUT_DIMS ? ti.ndim : FL_MODEL_INPUT_DIMS;
  for (int d = 0; d < out->ndim; d++) out->dims[d] = ti.dims[d];
  out->cast_to_int = out->dtype == FL_MODEL_F32 && read_by_int_cast(g, id);
  return FL_OK;
}

/* A plugin's feed: one float input and one class id per sample. */
static fl_status plugin_feed(const fl_model *m, const fl_model_feed *f, const char *what) {
  if (f->n_inputs != 1 || !f->inputs || f->inputs[0].dtype != FL_MODEL_F32 || f->ylen > 1 ||
      !f->y)
    return FL_ERR(FL_EINVAL, "model plugin %s %s: a plugin takes one float input and one class "
                  "id per sample", m->spec.plugin_path, what);
  return FL_OK;
}

static fl_status check_feed(const fl_model *m, const fl_model_feed *f, size_t batch,
                            const char *what) {
  if (!m || !f) return FL_ERR(FL_EINVAL, "model %s: NULL model or feed", what);
  if (batch == 0 || batch > m->max_batch)
    return FL_ERR(FL_EINVAL, "model %s: batch %zu outside [1, %zu]", what, batch, m->max_batch);
  if (!m->graph) return plugin_feed(m, f, what);
  if (fl_model_float_targets(m)) {
    if (!f->t) return FL_ERR(FL_EINVAL, "model %s: loss %s takes float targets, not class labels",
                             what, fl_onnx_loss_name(m->loss));
    return check_targets(m, f->t, batch, what);
  }
  if (!f->y) return FL_ERR(FL_EINVAL, "model %s: this model takes class labels", what);
  return FL_OK;
}

fl_status fl_model_train_feed(fl_model *m, const fl_model_feed *f, size_t batch,
                              float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                              fl_model_result *res) {
  FL_TRY(check_feed(m, f, batch, "train_step"));
  FL_TRY(check_scale(loss_scale));
  if (!m->graph)
    return fl_model_train_step(m, f->inputs[0].data, f->y, batch, loss_scale, on_ready, ctx, res);
  return m->ops->train_feed(m->handle, f, batch, loss_scale, on_ready, ctx, res);
}

fl_status fl_model_eval_feed(fl_model *m, const fl_model_feed *f, size_t batch,
                             fl_model_result *res) {
  FL_TRY(check_feed(m, f, batch, "eval"));
  if (!m->graph) return fl_model_eval(m, f->inputs[0].data, f->y, batch, res);
  return m->ops->eval_feed(m->handle, f, batch, res);
}
