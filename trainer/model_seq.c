/* model_seq.c - the engine that runs every built-in model: a stack of layer
 * kernels (fl_layers.h) with its parameters, gradients and activations.
 *
 * Memory is laid out once, at create, for max_batch samples: parameter
 * values in one arena, gradients in another (each tensor 64-byte aligned),
 * and every activation buffer in a third, so a training step allocates
 * nothing.  Activation gradients alternate between two buffers
 * along backward (norm layers work in place in theirs).
 *
 * Recompute (gradient checkpointing): layers are grouped into segments.  In
 * the plain run every layer's output (and its pool argmax / norm
 * statistics) has its own buffer.  With recompute, only the last layer of
 * each segment keeps its own buffers; the other layers of a segment write
 * into a scratch area that all segments share.  Backward walks the segments
 * in reverse and first re-runs the forward of a segment's inner layers from
 * its stored input (batch norm without touching its running statistics),
 * then does the segment's backward.  The recomputed values come from the
 * same kernels on the same inputs, so every gradient is bitwise equal to
 * the plain run.  The last segment needs no recompute: its scratch is still
 * intact when backward starts.
 *
 * Backward calls on_ready for each trainable parameter of a layer right
 * after that layer's backward, last layer first.
 *
 * A gpu model (fl_seq_to_device, at the end of this file) walks the same
 * layers, segments and buffers: layer_forward, layer_backward and loss hand
 * over to their device versions, which run the CUDA twins on the model's
 * stream. */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_device.h"
#include "fl_log.h"
#include "fl_timeline.h"
#include "model_internal.h"

#define ALIGN_FLOATS 16 /* 64-byte alignment for every buffer */

typedef enum { MODE_TRAIN, MODE_RECOMPUTE, MODE_EVAL } fwd_mode;

typedef struct seq_layer {
  fl_seq_layer_spec s;
  size_t in_c, in_h, in_w;    /* input shape per sample */
  size_t out_c, out_h, out_w; /* output shape per sample */
  size_t in_size, out_size;   /* floats per sample */
  size_t p_first, p_count;    /* its entries in the parameter list */
  float *w, *b, *dw, *db;     /* weight/bias (norms: gamma/beta) and grads */
  float *rmean, *rvar;        /* batch norm running statistics */
  float *out;                 /* output activations */
  int32_t *argmax;            /* pool */
  float *save_mean, *save_invstd; /* norms */
  float *gout;                /* gradient of the output (one of two buffers) */
  int gsel;                   /* which of the two */
  int last_in_segment;
} seq_layer;

typedef struct seq_model {
  seq_layer *L;
  size_t nl;
  fl_param *params;
  size_t np;
  float *values, *grads; /* parameter arenas */
  float *acts;           /* activation arena */
  size_t act_bytes;
  float *ws;             /* conv im2col workspace */
  size_t max_batch, in_size, num_classes;
  int recompute;
  fl_norm_sync_fn norm_sync; /* synchronised batch norm (fl_model.h); NULL = off */
  void *norm_sync_ctx;
  double *sync_stats; /* per BN layer, global: sum[C], count, sqdev[C] (bn_sync_stats) */
  double *sync_buf;   /* backward exchange, 2*C of the widest BN (in sync_stats' block) */
  struct seq_dev *dev;   /* gpu model: its device state; NULL on the host */
} seq_model;

/* A gpu model's device state (the device path is at the end of this file).
 * values and grads mirror the host arenas float for float, so a host
 * parameter pointer maps to its mirror by its offset (dev_value,
 * dev_grad); the activation arena itself (m->acts) is device memory. */
typedef struct seq_dev {
  int device;            /* CUDA ordinal */
  void *stream;          /* every kernel and copy of the model runs on it */
  fl_math lmath, cmath;  /* GEMM precision of linear / conv layers */
  float *values, *grads; /* mirrors of m->values / m->grads */
  size_t n_values, n_grads;
  float *acts;           /* the activation arena (m->acts once moved) */
  float *x;              /* the micro-batch: max_batch * in_size floats */
  int32_t *y;            /* and its labels */
  void *ws;              /* conv workspace (cuDNN scratch, 16-bit copies) */
  size_t ws_bytes;
  size_t ws_batch;       /* the batch size ws is known to be large enough for */
  double *bn;            /* synchronised batch norm: 4*C doubles per BN layer */
} seq_dev;

static void dev_release(seq_model *m);
static fl_status dev_begin(seq_model *m, const float *x, const int32_t *y, size_t batch);
static fl_status layer_forward_dev(seq_model *m, size_t i, size_t batch, fwd_mode mode);
static fl_status layer_backward_dev(seq_model *m, size_t i, size_t batch, float *dy, float *dx);

static size_t round_up(size_t n) { return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

/* ---------------------------------------------------------------- shapes */

static fl_conv2d_desc conv_desc(const seq_layer *l, size_t batch) {
  fl_conv2d_desc d = {.batch = batch, .in_c = l->in_c, .in_h = l->in_h, .in_w = l->in_w,
                      .out_c = l->out_c, .k_h = l->s.k, .k_w = l->s.k, .stride_h = l->s.stride,
                      .stride_w = l->s.stride, .pad_h = l->s.pad, .pad_w = l->s.pad};
  return d;
}

static fl_pool2d_desc pool_desc(const seq_layer *l, size_t batch) {
  fl_pool2d_desc d = {.batch = batch, .channels = l->in_c, .in_h = l->in_h, .in_w = l->in_w,
                      .k_h = l->s.k, .k_w = l->s.k, .stride_h = l->s.stride,
                      .stride_w = l->s.stride};
  return d;
}

static fl_norm_desc norm_desc(const seq_layer *l, size_t batch) {
  fl_norm_desc d = {.batch = batch, .channels = l->in_c, .inner = l->in_h * l->in_w,
                    .groups = l->s.groups, .eps = l->s.eps, .momentum = l->s.momentum};
  return d;
}

/* Fill in a layer's shapes from its input shape; FL_EINVAL (logged) when the
 * geometry does not work out. */
static fl_status layer_shape(seq_layer *l, size_t c, size_t h, size_t w) {
  const fl_seq_layer_spec *s = &l->s;
  l->in_c = c, l->in_h = h, l->in_w = w;
  l->in_size = c * h * w;
  switch (s->kind) {
  case FL_SEQ_LINEAR:
    if (s->out == 0) return FL_ERR(FL_EINVAL, "model: layer %s: 0 output features", s->name);
    l->out_c = s->out, l->out_h = 1, l->out_w = 1;
    break;
  case FL_SEQ_CONV: {
    fl_conv2d_desc d = conv_desc(l, 1);
    d.out_c = s->out;
    if (fl_conv2d_check(&d) != FL_OK)
      return FL_ERR(FL_EINVAL, "model: layer %s: conv %zux%zu stride %zu pad %zu does not fit "
                    "a %zux%zux%zu input", s->name, s->k, s->k, s->stride, s->pad, c, h, w);
    l->out_c = s->out, l->out_h = fl_conv2d_out_h(&d), l->out_w = fl_conv2d_out_w(&d);
    break;
  }
  case FL_SEQ_POOL: {
    fl_pool2d_desc d = pool_desc(l, 1);
    if (fl_pool2d_check(&d) != FL_OK)
      return FL_ERR(FL_EINVAL, "model: layer %s: pool %zux%zu stride %zu does not fit a "
                    "%zux%zux%zu input", s->name, s->k, s->k, s->stride, c, h, w);
    l->out_c = c, l->out_h = fl_pool2d_out_h(&d), l->out_w = fl_pool2d_out_w(&d);
    break;
  }
  case FL_SEQ_BN:
  case FL_SEQ_GN:
    if (s->kind == FL_SEQ_GN && (s->groups == 0 || c % s->groups != 0))
      return FL_ERR(FL_EINVAL, "model: layer %s: %zu groups do not divide %zu channels",
                    s->name, s->groups, c);
    if (!(s->eps > 0.0f) || !(s->momentum >= 0.0f && s->momentum <= 1.0f))
      return FL_ERR(FL_EINVAL, "model: layer %s: epsilon %g must be > 0 and momentum %g in "
                    "[0, 1]", s->name, (double)s->eps, (double)s->momentum);
    l->out_c = c, l->out_h = h, l->out_w = w;
    break;
  default:
    return FL_ERR(FL_EINVAL, "model: layer %s: unknown kind %d", s->name, (int)s->kind);
  }
  l->out_size = l->out_c * l->out_h * l->out_w;
  return FL_OK;
}

/* ------------------------------------------------------------ parameters */

typedef struct param_plan {
  const char *suffix;
  int ndim;
  size_t shape[4];
  int trainable;
} param_plan;

/* The parameters of layer l, in order; returns how many. */
static size_t layer_params(const seq_layer *l, param_plan p[4]) {
  const fl_seq_layer_spec *s = &l->s;
  size_t n = 0;
  switch (s->kind) {
  case FL_SEQ_LINEAR:
    p[n++] = (param_plan){"weight", 2, {l->out_c, l->in_size}, 1};
    if (s->bias) p[n++] = (param_plan){"bias", 1, {l->out_c}, 1};
    break;
  case FL_SEQ_CONV:
    p[n++] = (param_plan){"weight", 4, {l->out_c, l->in_c, s->k, s->k}, 1};
    if (s->bias) p[n++] = (param_plan){"bias", 1, {l->out_c}, 1};
    break;
  case FL_SEQ_BN:
    p[n++] = (param_plan){"weight", 1, {l->in_c}, 1};
    p[n++] = (param_plan){"bias", 1, {l->in_c}, 1};
    p[n++] = (param_plan){"running_mean", 1, {l->in_c}, 0};
    p[n++] = (param_plan){"running_var", 1, {l->in_c}, 0};
    break;
  case FL_SEQ_GN:
    p[n++] = (param_plan){"weight", 1, {l->in_c}, 1};
    p[n++] = (param_plan){"bias", 1, {l->in_c}, 1};
    break;
  case FL_SEQ_POOL:
    break;
  }
  return n;
}

/* Initial values: weights Kaiming- or Xavier-uniform, biases and beta 0,
 * gamma 1, running mean 0, running variance 1. */
static void init_param(fl_param *p, const seq_layer *l, size_t index, uint64_t seed) {
  const char *suffix = strrchr(p->name, '.') + 1;
  const int is_weight = strcmp(suffix, "weight") == 0;
  if ((l->s.kind == FL_SEQ_LINEAR || l->s.kind == FL_SEQ_CONV) && is_weight) {
    size_t receptive = p->ndim == 4 ? (size_t)(p->shape[2] * p->shape[3]) : 1;
    const double fan_in = (double)p->shape[1] * (double)receptive;
    const double fan_out = (double)p->shape[0] * (double)receptive;
    const double bound = l->s.he_init ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
    fl_model_init_uniform(p->value, p->n, (float)bound, seed, index);
    return;
  }
  const float v = (is_weight || strcmp(suffix, "running_var") == 0) ? 1.0f : 0.0f;
  for (size_t i = 0; i < p->n; i++) p->value[i] = v;
}

/* ------------------------------------------------------------- building */

/* Bytes an activation buffer of layer l needs, per kind of buffer. */
typedef struct layer_mem {
  size_t out, argmax, stats; /* floats / int32s, each rounded to alignment */
} layer_mem;

static layer_mem layer_memory(const seq_layer *l, size_t max_batch) {
  layer_mem m = {round_up(max_batch * l->out_size), 0, 0};
  if (l->s.kind == FL_SEQ_POOL) m.argmax = round_up(max_batch * l->out_size);
  if (l->s.kind == FL_SEQ_BN) m.stats = round_up(l->in_c);
  if (l->s.kind == FL_SEQ_GN) m.stats = round_up(max_batch * l->s.groups);
  return m;
}

static size_t layer_mem_total(layer_mem m) { return m.out + m.argmax + 2 * m.stats; }

static void layer_place(seq_layer *l, layer_mem m, float *base) {
  l->out = base;
  l->argmax = m.argmax ? (int32_t *)(base + m.out) : NULL;
  l->save_mean = m.stats ? base + m.out + m.argmax : NULL;
  l->save_invstd = m.stats ? base + m.out + m.argmax + m.stats : NULL;
}

void fl_seq_destroy(void *handle) {
  seq_model *m = handle;
  if (!m) return;
  free(m->L);
  free(m->params);
  free(m->values);
  free(m->grads);
  free(m->sync_stats);
  dev_release(m); /* a device arena in m->acts is freed there */
  free(m->acts);
  free(m);
}

/* 64-byte aligned and zeroed (padding included), so that the pages are
 * touched at create rather than in the first step. */
static float *alloc_floats(size_t n) {
  if (n == 0) n = ALIGN_FLOATS;
  float *p = aligned_alloc(64, round_up(n) * sizeof(float));
  if (p) memset(p, 0, round_up(n) * sizeof(float));
  return p;
}

fl_status fl_seq_create(const fl_seq_layer_spec *layers, size_t n_layers, size_t c, size_t h,
                        size_t w, size_t num_classes, size_t max_batch, uint64_t seed,
                        int recompute, void **out) {
  fl_status st = FL_OK;
  if (!layers || n_layers == 0 || !out || max_batch == 0 || c * h * w == 0)
    return FL_ERR(FL_EINVAL, "model: empty layer list, input or batch");
  seq_model *m = calloc(1, sizeof *m);
  if (!m) return FL_ERR(FL_ENOMEM, "model: out of memory");
  m->nl = n_layers;
  m->max_batch = max_batch;
  m->in_size = c * h * w;
  m->num_classes = num_classes;
  m->recompute = recompute != 0;
  m->L = calloc(n_layers, sizeof *m->L);
  if (!m->L) {
    st = FL_ERR(FL_ENOMEM, "model: out of memory for %zu layers", n_layers);
    goto fail;
  }

  /* Shapes, segment ends, parameter counts and arena sizes. */
  size_t np = 0, n_values = 0, n_grads = 0, ws_floats = 0;
  for (size_t i = 0; i < n_layers; i++) {
    seq_layer *l = &m->L[i];
    l->s = layers[i];
    l->s.name[sizeof l->s.name - 1] = '\0';
    if (i > 0 && l->s.segment < layers[i - 1].segment) {
      st = FL_ERR(FL_EINVAL, "model: layer %s: segments must not decrease", l->s.name);
      goto fail;
    }
    st = i == 0 ? layer_shape(l, c, h, w)
                : layer_shape(l, m->L[i - 1].out_c, m->L[i - 1].out_h, m->L[i - 1].out_w);
    if (st != FL_OK) goto fail;
    l->last_in_segment = i + 1 == n_layers || layers[i + 1].segment != l->s.segment;
    param_plan pp[4];
    size_t k = layer_params(l, pp);
    l->p_first = np;
    l->p_count = k;
    np += k;
    for (size_t j = 0; j < k; j++) {
      size_t n = 1;
      for (int d = 0; d < pp[j].ndim; d++) n *= pp[j].shape[d];
      n_values += round_up(n);
      if (pp[j].trainable) n_grads += round_up(n);
    }
    if (l->s.kind == FL_SEQ_CONV) {
      fl_conv2d_desc d = conv_desc(l, 1);
      size_t f = fl_conv2d_workspace_floats(&d);
      if (f > ws_floats) ws_floats = f;
    }
  }
  if (m->L[n_layers - 1].out_size != num_classes) {
    st = FL_ERR(FL_EINVAL, "model: last layer %s gives %zu outputs for %zu classes",
                m->L[n_layers - 1].s.name, m->L[n_layers - 1].out_size, num_classes);
    goto fail;
  }

  /* Parameters. */
  m->np = np;
  m->params = calloc(np ? np : 1, sizeof *m->params);
  m->values = alloc_floats(n_values);
  m->grads = alloc_floats(n_grads);
  if (!m->params || !m->values || !m->grads) {
    st = FL_ERR(FL_ENOMEM, "model: out of memory for %zu parameter floats", n_values + n_grads);
    goto fail;
  }
  size_t vo = 0, go = 0;
  for (size_t i = 0; i < n_layers; i++) {
    seq_layer *l = &m->L[i];
    param_plan pp[4];
    size_t k = layer_params(l, pp);
    for (size_t j = 0; j < k; j++) {
      fl_param *p = &m->params[l->p_first + j];
      snprintf(p->name, sizeof p->name, "%s.%s", l->s.name, pp[j].suffix);
      p->ndim = pp[j].ndim;
      p->n = 1;
      for (int d = 0; d < p->ndim; d++) {
        p->shape[d] = (int64_t)pp[j].shape[d];
        p->n *= pp[j].shape[d];
      }
      p->value = m->values + vo;
      vo += round_up(p->n);
      if (pp[j].trainable) {
        p->grad = m->grads + go;
        go += round_up(p->n);
      }
      p->layer = (int)i;
      init_param(p, l, l->p_first + j, seed);
    }
    if (k > 0) {
      l->w = m->params[l->p_first].value;
      l->dw = m->params[l->p_first].grad;
    }
    if (k > 1) {
      l->b = m->params[l->p_first + 1].value;
      l->db = m->params[l->p_first + 1].grad;
    }
    if (l->s.kind == FL_SEQ_BN) {
      l->rmean = m->params[l->p_first + 2].value;
      l->rvar = m->params[l->p_first + 3].value;
    }
  }

  /* Activations: stored buffers, the shared scratch of recompute segments,
   * two gradient buffers and the conv workspace, in one arena. */
  size_t stored = 0, scratch = 0, seg_scratch = 0;
  for (size_t i = 0; i < n_layers; i++) {
    seq_layer *l = &m->L[i];
    size_t t = layer_mem_total(layer_memory(l, max_batch));
    if (!m->recompute || l->last_in_segment) stored += t;
    else seg_scratch += t;
    if (l->last_in_segment) {
      if (seg_scratch > scratch) scratch = seg_scratch;
      seg_scratch = 0;
    }
  }
  /* Output gradients alternate between two buffers along backward; norm
   * layers work in place, so their input gradient shares their output's. */
  size_t gsize[2] = {0, 0};
  for (size_t i = n_layers; i-- > 0;) {
    seq_layer *l = &m->L[i];
    if (i + 1 == n_layers) l->gsel = 0;
    else {
      const fl_seq_kind next = m->L[i + 1].s.kind;
      l->gsel = (next == FL_SEQ_BN || next == FL_SEQ_GN) ? m->L[i + 1].gsel
                                                         : 1 - m->L[i + 1].gsel;
    }
    if (round_up(max_batch * l->out_size) > gsize[l->gsel])
      gsize[l->gsel] = round_up(max_batch * l->out_size);
  }
  const size_t total = stored + scratch + gsize[0] + gsize[1] + round_up(ws_floats);
  m->acts = alloc_floats(total);
  if (!m->acts) {
    st = FL_ERR(FL_ENOMEM, "model: out of memory for %zu activation bytes",
                total * sizeof(float));
    goto fail;
  }
  m->act_bytes = total * sizeof(float);
  float *sp = m->acts, *scr = m->acts + stored, *seg_p = scr;
  for (size_t i = 0; i < n_layers; i++) {
    seq_layer *l = &m->L[i];
    layer_mem lm = layer_memory(l, max_batch);
    if (!m->recompute || l->last_in_segment) {
      layer_place(l, lm, sp);
      sp += layer_mem_total(lm);
    } else {
      layer_place(l, lm, seg_p);
      seg_p += layer_mem_total(lm);
    }
    if (l->last_in_segment) seg_p = scr;
  }
  float *gbuf[2] = {scr + scratch, scr + scratch + gsize[0]};
  for (size_t i = 0; i < n_layers; i++) m->L[i].gout = gbuf[m->L[i].gsel];
  m->ws = ws_floats ? gbuf[1] + gsize[1] : NULL;
  *out = m;
  return FL_OK;
fail:
  fl_seq_destroy(m);
  return st;
}

/* ------------------------------------------------------------- accessors */

size_t fl_seq_num_params(void *handle) { return ((seq_model *)handle)->np; }

fl_param *fl_seq_param(void *handle, size_t index) {
  seq_model *m = handle;
  return index < m->np ? &m->params[index] : NULL;
}

size_t fl_seq_input_size(void *handle) { return ((seq_model *)handle)->in_size; }

size_t fl_seq_activation_bytes(void *handle) { return ((seq_model *)handle)->act_bytes; }

/* ------------------------------------------------- synchronised batch norm */

fl_status fl_seq_set_norm_sync(void *handle, fl_norm_sync_fn fn, void *ctx) {
  seq_model *m = handle;
  size_t stats = 0, widest = 0;
  for (size_t i = 0; i < m->nl; i++)
    if (m->L[i].s.kind == FL_SEQ_BN) {
      stats += 2 * m->L[i].in_c + 1;
      if (m->L[i].in_c > widest) widest = m->L[i].in_c;
    }
  free(m->sync_stats);
  m->sync_stats = m->sync_buf = NULL;
  m->norm_sync = NULL;
  m->norm_sync_ctx = NULL;
  if (!fn) return FL_OK;
  if (stats) {
    m->sync_stats = malloc((stats + 2 * widest) * sizeof(double));
    if (!m->sync_stats)
      return FL_ERR(FL_ENOMEM, "model: out of memory for batch-norm statistics");
    m->sync_buf = m->sync_stats + stats;
  }
  m->norm_sync = fn;
  m->norm_sync_ctx = ctx;
  return FL_OK;
}

/* ------------------------------------------------------- forward/backward */

static const float *layer_input(const seq_model *m, size_t i, const float *x) {
  return i == 0 ? x : m->L[i - 1].out;
}

/* A kernel refused its arguments: a bug in the engine, reported once.  (A
 * CUDA twin logs its own CUDA and out-of-memory failures.) */
static fl_status kernel_failed(const seq_layer *l, const char *what, fl_status st) {
  if (st == FL_ECUDA || st == FL_ENOMEM) return st;
  return FL_ERR(st, "model: layer %s: %s kernel failed: %s", l->s.name, what, fl_strerror(st));
}

/* Batch-norm layer i's kept global statistics: sum[C], count, sqdev[C]. */
static double *bn_sync_stats(const seq_model *m, size_t i) {
  double *p = m->sync_stats;
  for (size_t j = 0; j < i; j++)
    if (m->L[j].s.kind == FL_SEQ_BN) p += 2 * m->L[j].in_c + 1;
  return p;
}

/* Training forward of batch-norm layer i over the global micro-batch
 * (fl_model_set_norm_sync): the hook adds up every rank's per-channel sums
 * and counts, then their squared deviations from the global mean; the
 * phase kernels normalise with those.  Recompute reuses the statistics kept
 * from the step's forward: no exchange, and the same bits. */
static fl_status bn_forward_sync(seq_model *m, size_t i, const float *in, size_t batch,
                                 fwd_mode mode) {
  seq_layer *l = &m->L[i];
  const fl_norm_desc d = norm_desc(l, batch);
  const size_t C = l->in_c;
  double *sum = bn_sync_stats(m, i), *sqdev = sum + C + 1;
  fl_status st;
  if (mode == MODE_TRAIN) {
    if ((st = fl_batchnorm_stats_sum(&d, in, sum)) != FL_OK)
      return kernel_failed(l, "statistics", st);
    sum[C] = (double)(batch * d.inner);
    FL_TRY(m->norm_sync(m->norm_sync_ctx, sum, C + 1));
    if ((st = fl_batchnorm_stats_sqdev(&d, in, sum, sum[C], sqdev)) != FL_OK)
      return kernel_failed(l, "statistics", st);
    FL_TRY(m->norm_sync(m->norm_sync_ctx, sqdev, C));
  }
  st = fl_batchnorm_forward_apply(&d, in, l->out, l->w, l->b, sum, sqdev, sum[C],
                                  mode == MODE_TRAIN ? l->rmean : NULL,
                                  mode == MODE_TRAIN ? l->rvar : NULL, l->save_mean,
                                  l->save_invstd, l->s.act);
  return st == FL_OK ? FL_OK : kernel_failed(l, "forward", st);
}

/* Backward of batch-norm layer i over the global micro-batch: this rank's
 * sums of dz and dz*xhat (and its dgamma, dbeta) first, then, when dx is
 * wanted, the hook adds the sums up and dx follows from the totals. */
static fl_status bn_backward_sync(seq_model *m, size_t i, const float *in, size_t batch,
                                  float *dy, float *dx) {
  seq_layer *l = &m->L[i];
  const fl_norm_desc d = norm_desc(l, batch);
  const size_t C = l->in_c;
  fl_status st = fl_batchnorm_backward_reduce(&d, in, l->out, dy, l->save_mean, l->save_invstd,
                                              m->sync_buf, l->dw, l->db, l->s.act);
  if (st != FL_OK) return kernel_failed(l, "backward", st);
  if (!dx) return FL_OK;
  FL_TRY(m->norm_sync(m->norm_sync_ctx, m->sync_buf, 2 * C));
  st = fl_batchnorm_backward_apply(&d, in, dy, l->w, l->save_mean, l->save_invstd, m->sync_buf,
                                   bn_sync_stats(m, i)[C], dx);
  return st == FL_OK ? FL_OK : kernel_failed(l, "backward", st);
}

static fl_status layer_forward(seq_model *m, size_t i, const float *x, size_t batch,
                               fwd_mode mode) {
  if (m->dev) return layer_forward_dev(m, i, batch, mode);
  seq_layer *l = &m->L[i];
  const float *in = layer_input(m, i, x);
  fl_status st = FL_OK;
  switch (l->s.kind) {
  case FL_SEQ_LINEAR:
    st = fl_linear_forward(in, l->w, l->b, l->out, batch, l->in_size, l->out_c, l->s.act);
    break;
  case FL_SEQ_CONV: {
    fl_conv2d_desc d = conv_desc(l, batch);
    st = fl_conv2d_forward(&d, in, l->w, l->b, l->out, m->ws, l->s.act);
    break;
  }
  case FL_SEQ_POOL: {
    fl_pool2d_desc d = pool_desc(l, batch);
    st = fl_maxpool2d_forward(&d, in, l->out, mode == MODE_EVAL ? NULL : l->argmax);
    break;
  }
  case FL_SEQ_BN: {
    fl_norm_desc d = norm_desc(l, batch);
    if (mode == MODE_EVAL)
      st = fl_batchnorm_forward_eval(&d, in, l->out, l->w, l->b, l->rmean, l->rvar, l->s.act);
    else if (m->norm_sync)
      return bn_forward_sync(m, i, in, batch, mode);
    else
      st = fl_batchnorm_forward_train(&d, in, l->out, l->w, l->b,
                                      mode == MODE_TRAIN ? l->rmean : NULL,
                                      mode == MODE_TRAIN ? l->rvar : NULL, l->save_mean,
                                      l->save_invstd, l->s.act);
    break;
  }
  case FL_SEQ_GN: {
    fl_norm_desc d = norm_desc(l, batch);
    st = fl_groupnorm_forward(&d, in, l->out, l->w, l->b, l->save_mean, l->save_invstd,
                              l->s.act);
    break;
  }
  }
  return st == FL_OK ? FL_OK : kernel_failed(l, "forward", st);
}

/* Backward of layer i: dy (scratch) is the gradient of its output, dx
 * receives the gradient of its input (NULL for the first layer). */
static fl_status layer_backward(seq_model *m, size_t i, const float *x, size_t batch, float *dy,
                                float *dx) {
  if (m->dev) return layer_backward_dev(m, i, batch, dy, dx);
  seq_layer *l = &m->L[i];
  const float *in = layer_input(m, i, x);
  fl_status st = FL_OK;
  switch (l->s.kind) {
  case FL_SEQ_LINEAR:
    st = fl_linear_backward(in, l->w, l->out, dy, dx, l->dw, l->db, batch, l->in_size,
                            l->out_c, l->s.act);
    break;
  case FL_SEQ_CONV: {
    fl_conv2d_desc d = conv_desc(l, batch);
    st = fl_conv2d_backward(&d, in, l->w, l->out, dy, dx, l->dw, l->db, m->ws, l->s.act);
    break;
  }
  case FL_SEQ_POOL: {
    fl_pool2d_desc d = pool_desc(l, batch);
    if (dx) st = fl_maxpool2d_backward(&d, dy, l->argmax, dx);
    break;
  }
  case FL_SEQ_BN: {
    if (m->norm_sync) return bn_backward_sync(m, i, in, batch, dy, dx);
    fl_norm_desc d = norm_desc(l, batch);
    st = fl_batchnorm_backward(&d, in, l->out, dy, l->w, l->save_mean, l->save_invstd, dx,
                               l->dw, l->db, l->s.act);
    break;
  }
  case FL_SEQ_GN: {
    fl_norm_desc d = norm_desc(l, batch);
    st = fl_groupnorm_backward(&d, in, l->out, dy, l->w, l->save_mean, l->save_invstd, dx,
                               l->dw, l->db, l->s.act);
    break;
  }
  }
  return st == FL_OK ? FL_OK : kernel_failed(l, "backward", st);
}

static fl_status loss(seq_model *m, const int32_t *y, size_t batch, float scale, float *dlogits,
                      fl_model_result *res) {
  double ls = 0.0;
  size_t c1 = 0, c5 = 0;
  fl_status st =
      m->dev ? fl_softmax_xent_cuda(m->L[m->nl - 1].out, m->dev->y, batch, m->num_classes, scale,
                                    dlogits, &ls, &c1, &c5, m->dev->stream)
             : fl_softmax_xent(m->L[m->nl - 1].out, y, batch, m->num_classes, scale, dlogits,
                               &ls, &c1, &c5);
  if (st != FL_OK) return kernel_failed(&m->L[m->nl - 1], "softmax cross-entropy", st);
  if (res) {
    res->loss_sum = ls;
    res->correct1 = c1;
    res->correct5 = c5;
    res->count = batch;
  }
  return FL_OK;
}

fl_status fl_seq_train_step(void *handle, const float *x, const int32_t *y, size_t batch,
                            float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                            fl_model_result *res) {
  seq_model *m = handle;
  if (batch == 0 || batch > m->max_batch)
    return FL_ERR(FL_EINVAL, "model: batch %zu outside [1, %zu]", batch, m->max_batch);
  if (m->dev) FL_TRY(dev_begin(m, x, y, batch));
  fl_timeline *tl = fl_timeline_default(); /* --timeline, else NULL */
  fl_timeline_begin(tl, "compute", "forward");
  for (size_t i = 0; i < m->nl; i++) FL_TRY(layer_forward(m, i, x, batch, MODE_TRAIN));
  FL_TRY(loss(m, y, batch, loss_scale, m->L[m->nl - 1].gout, res));
  fl_timeline_end(tl, "compute", "forward");
  fl_timeline_begin(tl, "compute", "backward");
  size_t seg_end = m->nl; /* one past the last layer of the current segment */
  while (seg_end > 0) {
    size_t seg_begin = seg_end - 1;
    while (seg_begin > 0 && m->L[seg_begin - 1].s.segment == m->L[seg_end - 1].s.segment)
      seg_begin--;
    if (m->recompute && seg_end != m->nl)
      for (size_t i = seg_begin; i + 1 < seg_end; i++)
        FL_TRY(layer_forward(m, i, x, batch, MODE_RECOMPUTE));
    for (size_t i = seg_end; i-- > seg_begin;) {
      seq_layer *l = &m->L[i];
      FL_TRY(layer_backward(m, i, x, batch, l->gout, i == 0 ? NULL : m->L[i - 1].gout));
      if (on_ready)
        for (size_t j = l->p_first + l->p_count; j-- > l->p_first;)
          if (m->params[j].grad) on_ready(ctx, j);
    }
    seg_end = seg_begin;
  }
  fl_timeline_end(tl, "compute", "backward");
  return FL_OK;
}

fl_status fl_seq_eval(void *handle, const float *x, const int32_t *y, size_t batch,
                      fl_model_result *res) {
  seq_model *m = handle;
  if (batch == 0 || batch > m->max_batch)
    return FL_ERR(FL_EINVAL, "model: batch %zu outside [1, %zu]", batch, m->max_batch);
  if (m->dev) FL_TRY(dev_begin(m, x, y, batch));
  for (size_t i = 0; i < m->nl; i++) FL_TRY(layer_forward(m, i, x, batch, MODE_EVAL));
  return loss(m, y, batch, 1.0f, NULL, res);
}

/* ------------------------------------------------------------ device path
 *
 * fl_seq_to_device moves a model built above to a CUDA device, as
 * PyTorch's model.to(device) does: the activation arena is re-created on
 * the device with the layout fl_seq_create computed (every layer's buffers
 * at the same offsets, so recompute's shared scratch and the two gradient
 * buffers work unchanged), and the parameter and gradient arenas get device
 * mirrors.  The host parameter arenas stay the model's state, because that
 * is what the loop, the optimizer, communication and checkpoints read and
 * write; hence each call:
 *  - dev_begin uploads the micro-batch and ALL parameter values (buffers
 *    included): the host values may have changed behind the model's back
 *    (optimizer step, --resume, a pull from a pserver, a broadcast), and
 *    one copy of the parameters per micro-batch (about 1 MB for the
 *    784-256-128-100-10 MLP) is cheaper than getting a "dirty" protocol
 *    wrong;
 *  - after a layer's backward, its gradients are downloaded (one copy per
 *    layer, ordered after that layer's kernels) before on_ready names them,
 *    so a bucket's allreduce runs on the host while the device goes on with
 *    the layers below;
 *  - after the training forward, batch norm's running statistics are
 *    downloaded (two small copies per layer), so the host buffers, which
 *    eval uploads and checkpoints save, stay current.
 * The conv workspace is sized at move time for max_batch and re-checked
 * whenever the batch size changes (cuDNN does not promise that a smaller
 * batch needs less scratch); a larger need grows it, outside any step's
 * kernels. */

static float *dev_value(const seq_model *m, const float *host) {
  return host ? m->dev->values + (host - m->values) : NULL;
}

static float *dev_grad(const seq_model *m, const float *host) {
  return host ? m->dev->grads + (host - m->grads) : NULL;
}

static const float *dev_input(const seq_model *m, size_t i) {
  return i == 0 ? m->dev->x : m->L[i - 1].out;
}

static void dev_release(seq_model *m) {
  seq_dev *d = m->dev;
  if (!d) return;
  (void)fl_cuda_set_device(d->device);
  if (d->stream) (void)fl_cuda_stream_synchronize(d->stream);
  if (m->acts == d->acts) m->acts = NULL;
  (void)fl_cuda_free(d->acts);
  (void)fl_cuda_free(d->values);
  (void)fl_cuda_free(d->grads);
  (void)fl_cuda_free(d->x);
  (void)fl_cuda_free(d->y);
  (void)fl_cuda_free(d->ws);
  (void)fl_cuda_free(d->bn);
  (void)fl_cuda_stream_destroy(d->stream);
  free(d);
  m->dev = NULL;
}

/* fl_cuda_malloc, with 0 bytes giving NULL. */
static fl_status dev_alloc(void **p, size_t bytes) {
  *p = NULL;
  return bytes ? fl_cuda_malloc(p, bytes) : FL_OK;
}

/* Bytes of conv workspace the layers need at this batch size. */
static fl_status dev_ws_need(const seq_model *m, size_t batch, size_t *need) {
  *need = 0;
  for (size_t i = 0; i < m->nl; i++) {
    const seq_layer *l = &m->L[i];
    if (l->s.kind != FL_SEQ_CONV) continue;
    fl_conv2d_desc cd = conv_desc(l, batch);
    size_t b = 0;
    fl_status st = fl_conv2d_workspace_bytes_cuda(&cd, &b);
    if (st != FL_OK) return kernel_failed(l, "conv workspace size", st);
    if (b > *need) *need = b;
  }
  return FL_OK;
}

/* Make the conv workspace large enough for `batch` (before the step's
 * kernels are queued). */
static fl_status dev_ws_for(seq_model *m, size_t batch) {
  seq_dev *d = m->dev;
  size_t need;
  if (batch == d->ws_batch) return FL_OK;
  FL_TRY(dev_ws_need(m, batch, &need));
  if (need > d->ws_bytes) {
    FL_TRY(fl_cuda_stream_synchronize(d->stream));
    const fl_status st = fl_cuda_free(d->ws);
    d->ws = NULL;
    m->act_bytes -= d->ws_bytes;
    d->ws_bytes = 0;
    FL_TRY(st);
    FL_TRY(dev_alloc(&d->ws, need));
    d->ws_bytes = need;
    m->act_bytes += need;
    FL_LOGD("model: conv workspace grown to %zu bytes for batch %zu", need, batch);
  }
  d->ws_batch = batch;
  return FL_OK;
}

fl_status fl_seq_to_device(void *handle, int device, fl_math lmath, fl_math cmath) {
  seq_model *m = handle;
  if (m->dev) return FL_ERR(FL_ESTATE, "model: already on CUDA device %d", m->dev->device);
  seq_dev *d = calloc(1, sizeof *d);
  if (!d) return FL_ERR(FL_ENOMEM, "model: out of memory");
  m->dev = d; /* from here on, fl_seq_destroy frees what was made */
  d->device = device;
  d->lmath = lmath;
  d->cmath = cmath;
  for (size_t j = 0; j < m->np; j++) {
    const fl_param *p = &m->params[j];
    size_t end = (size_t)(p->value - m->values) + round_up(p->n);
    if (end > d->n_values) d->n_values = end;
    if (p->grad) {
      end = (size_t)(p->grad - m->grads) + round_up(p->n);
      if (end > d->n_grads) d->n_grads = end;
    }
  }
  size_t ws_bytes, bn_doubles = 0;
  for (size_t i = 0; i < m->nl; i++)
    if (m->L[i].s.kind == FL_SEQ_BN) bn_doubles += 4 * m->L[i].in_c;
  FL_TRY(fl_cuda_set_device(device));
  FL_TRY(fl_cuda_stream_create(&d->stream));
  FL_TRY(dev_ws_need(m, m->max_batch, &ws_bytes));
  FL_TRY(dev_alloc((void **)&d->acts, m->act_bytes));
  FL_TRY(dev_alloc((void **)&d->values, d->n_values * sizeof(float)));
  FL_TRY(dev_alloc((void **)&d->grads, d->n_grads * sizeof(float)));
  FL_TRY(dev_alloc((void **)&d->x, m->max_batch * m->in_size * sizeof(float)));
  FL_TRY(dev_alloc((void **)&d->y, m->max_batch * sizeof(int32_t)));
  FL_TRY(dev_alloc(&d->ws, ws_bytes));
  FL_TRY(dev_alloc((void **)&d->bn, bn_doubles * sizeof(double)));
  d->ws_bytes = ws_bytes;
  d->ws_batch = m->max_batch;
  /* zeroed like the host arenas (the padding included) */
  FL_TRY(fl_cuda_memset(d->acts, 0, m->act_bytes, d->stream));
  FL_TRY(fl_cuda_memset(d->grads, 0, d->n_grads * sizeof(float), d->stream));
  FL_TRY(fl_cuda_stream_synchronize(d->stream));
  /* Nothing can fail from here: re-place every layer's buffers in the
   * device arena at their host offsets, then drop the host arena. */
  for (size_t i = 0; i < m->nl; i++) {
    seq_layer *l = &m->L[i];
    const size_t off = (size_t)(l->out - m->acts), goff = (size_t)(l->gout - m->acts);
    layer_place(l, layer_memory(l, m->max_batch), d->acts + off);
    l->gout = d->acts + goff;
  }
  free(m->acts);
  m->acts = d->acts;
  m->ws = NULL; /* the host im2col area is unused on the device */
  m->act_bytes += ws_bytes;
  FL_LOGD("model: on CUDA device %d, %zu activation bytes there", device, m->act_bytes);
  return FL_OK;
}

/* Upload what a call reads: the parameters (see above), the micro-batch
 * and its labels. */
static fl_status dev_begin(seq_model *m, const float *x, const int32_t *y, size_t batch) {
  seq_dev *d = m->dev;
  FL_TRY(fl_cuda_set_device(d->device));
  FL_TRY(dev_ws_for(m, batch));
  FL_TRY(fl_cuda_copy_to_device(d->values, m->values, d->n_values * sizeof(float), d->stream));
  FL_TRY(fl_cuda_copy_to_device(d->x, x, batch * m->in_size * sizeof(float), d->stream));
  FL_TRY(fl_cuda_copy_to_device(d->y, y, batch * sizeof(int32_t), d->stream));
  return FL_OK;
}

/* Layer l's buffers (batch-norm running statistics) back to the host. */
static fl_status dev_download_buffers(seq_model *m, const seq_layer *l) {
  for (size_t j = l->p_first; j < l->p_first + l->p_count; j++) {
    const fl_param *p = &m->params[j];
    if (!p->grad)
      FL_TRY(fl_cuda_copy_to_host(p->value, dev_value(m, p->value), p->n * sizeof(float),
                                  m->dev->stream));
  }
  return FL_OK;
}

/* Layer l's gradients back to the host: one copy of the span they occupy
 * in the gradient arena (they are consecutive there). */
static fl_status dev_download_grads(seq_model *m, const seq_layer *l) {
  float *lo = NULL, *hi = NULL;
  for (size_t j = l->p_first; j < l->p_first + l->p_count; j++) {
    fl_param *p = &m->params[j];
    if (!p->grad) continue;
    if (!lo || p->grad < lo) lo = p->grad;
    if (!hi || p->grad + p->n > hi) hi = p->grad + p->n;
  }
  if (!lo) return FL_OK;
  return fl_cuda_copy_to_host(lo, dev_grad(m, lo), (size_t)(hi - lo) * sizeof(float),
                              m->dev->stream);
}

/* Synchronised batch norm on the device: the protocol of bn_forward_sync
 * and bn_backward_sync (the same hook calls, in the same order, on the same
 * host buffers), with the CUDA phase kernels.  The hook gets host memory,
 * so each exchange is a download, the hook, an upload.  Layer i's device
 * block (dev_bn_block) holds sum[C], sqdev[C] (kept for recompute, as the
 * host's bn_sync_stats) and the backward sums[2C]. */
static double *dev_bn_block(const seq_model *m, size_t i) {
  double *p = m->dev->bn;
  for (size_t j = 0; j < i; j++)
    if (m->L[j].s.kind == FL_SEQ_BN) p += 4 * m->L[j].in_c;
  return p;
}

/* Sum over the ranks: dev[0..n) -> host, the hook on host[0..n_hook) (what
 * lies beyond n the caller has set), host[0..n) -> dev. */
static fl_status dev_exchange(seq_model *m, double *dev, double *host, size_t n, size_t n_hook) {
  void *s = m->dev->stream;
  FL_TRY(fl_cuda_copy_to_host(host, dev, n * sizeof(double), s));
  FL_TRY(m->norm_sync(m->norm_sync_ctx, host, n_hook));
  return fl_cuda_copy_to_device(dev, host, n * sizeof(double), s);
}

static fl_status bn_forward_sync_dev(seq_model *m, size_t i, const float *in, size_t batch,
                                     fwd_mode mode) {
  seq_layer *l = &m->L[i];
  const seq_dev *d = m->dev;
  const fl_norm_desc nd = norm_desc(l, batch);
  const size_t C = l->in_c;
  double *sum = bn_sync_stats(m, i), *sqdev = sum + C + 1; /* host, as the CPU keeps them */
  double *dsum = dev_bn_block(m, i), *dsqdev = dsum + C;
  fl_status st;
  if (mode == MODE_TRAIN) {
    if ((st = fl_batchnorm_stats_sum_cuda(&nd, in, dsum, d->stream)) != FL_OK)
      return kernel_failed(l, "statistics", st);
    sum[C] = (double)(batch * nd.inner); /* the count goes with the sums */
    FL_TRY(dev_exchange(m, dsum, sum, C, C + 1));
    if ((st = fl_batchnorm_stats_sqdev_cuda(&nd, in, dsum, sum[C], dsqdev, d->stream)) != FL_OK)
      return kernel_failed(l, "statistics", st);
    FL_TRY(dev_exchange(m, dsqdev, sqdev, C, C));
  }
  st = fl_batchnorm_forward_apply_cuda(&nd, in, l->out, dev_value(m, l->w), dev_value(m, l->b),
                                       dsum, dsqdev, sum[C],
                                       mode == MODE_TRAIN ? dev_value(m, l->rmean) : NULL,
                                       mode == MODE_TRAIN ? dev_value(m, l->rvar) : NULL,
                                       l->save_mean, l->save_invstd, l->s.act, d->stream);
  return st == FL_OK ? FL_OK : kernel_failed(l, "forward", st);
}

static fl_status bn_backward_sync_dev(seq_model *m, size_t i, const float *in, size_t batch,
                                      float *dy, float *dx) {
  seq_layer *l = &m->L[i];
  const seq_dev *d = m->dev;
  const fl_norm_desc nd = norm_desc(l, batch);
  const size_t C = l->in_c;
  double *dsums = dev_bn_block(m, i) + 2 * C;
  fl_status st = fl_batchnorm_backward_reduce_cuda(&nd, in, l->out, dy, l->save_mean,
                                                   l->save_invstd, dsums, dev_grad(m, l->dw),
                                                   dev_grad(m, l->db), l->s.act, d->stream);
  if (st != FL_OK) return kernel_failed(l, "backward", st);
  if (!dx) return FL_OK;
  FL_TRY(dev_exchange(m, dsums, m->sync_buf, 2 * C, 2 * C));
  st = fl_batchnorm_backward_apply_cuda(&nd, in, dy, dev_value(m, l->w), l->save_mean,
                                        l->save_invstd, dsums, bn_sync_stats(m, i)[C], dx,
                                        d->stream);
  return st == FL_OK ? FL_OK : kernel_failed(l, "backward", st);
}

static fl_status layer_forward_dev(seq_model *m, size_t i, size_t batch, fwd_mode mode) {
  seq_layer *l = &m->L[i];
  const seq_dev *d = m->dev;
  const float *in = dev_input(m, i);
  const float *w = dev_value(m, l->w), *b = dev_value(m, l->b);
  fl_status st = FL_OK;
  switch (l->s.kind) {
  case FL_SEQ_LINEAR:
    st = fl_linear_forward_cuda(in, w, b, l->out, batch, l->in_size, l->out_c, l->s.act,
                                d->lmath, d->stream);
    break;
  case FL_SEQ_CONV: {
    fl_conv2d_desc cd = conv_desc(l, batch);
    st = fl_conv2d_forward_cuda(&cd, in, w, b, l->out, d->ws, l->s.act, d->cmath, d->stream);
    break;
  }
  case FL_SEQ_POOL: {
    fl_pool2d_desc pd = pool_desc(l, batch);
    st = fl_maxpool2d_forward_cuda(&pd, in, l->out, mode == MODE_EVAL ? NULL : l->argmax,
                                   d->stream);
    break;
  }
  case FL_SEQ_BN: {
    fl_norm_desc nd = norm_desc(l, batch);
    if (mode == MODE_EVAL)
      st = fl_batchnorm_forward_eval_cuda(&nd, in, l->out, w, b, dev_value(m, l->rmean),
                                          dev_value(m, l->rvar), l->s.act, d->stream);
    else if (m->norm_sync)
      FL_TRY(bn_forward_sync_dev(m, i, in, batch, mode)); /* errors logged there */
    else
      st = fl_batchnorm_forward_train_cuda(&nd, in, l->out, w, b,
                                           mode == MODE_TRAIN ? dev_value(m, l->rmean) : NULL,
                                           mode == MODE_TRAIN ? dev_value(m, l->rvar) : NULL,
                                           l->save_mean, l->save_invstd, l->s.act, d->stream);
    break;
  }
  case FL_SEQ_GN: {
    fl_norm_desc nd = norm_desc(l, batch);
    st = fl_groupnorm_forward_cuda(&nd, in, l->out, w, b, l->save_mean, l->save_invstd,
                                   l->s.act, d->stream);
    break;
  }
  }
  if (st != FL_OK) return kernel_failed(l, "forward", st);
  if (mode == MODE_TRAIN && i + 1 == m->nl) /* the training forward is complete */
    for (size_t j = 0; j < m->nl; j++) FL_TRY(dev_download_buffers(m, &m->L[j]));
  return FL_OK;
}

/* As layer_backward, then the layer's gradients go to the host. */
static fl_status layer_backward_dev(seq_model *m, size_t i, size_t batch, float *dy, float *dx) {
  seq_layer *l = &m->L[i];
  const seq_dev *d = m->dev;
  const float *in = dev_input(m, i);
  const float *w = dev_value(m, l->w);
  float *dw = dev_grad(m, l->dw), *db = dev_grad(m, l->db);
  fl_status st = FL_OK;
  switch (l->s.kind) {
  case FL_SEQ_LINEAR:
    st = fl_linear_backward_cuda(in, w, l->out, dy, dx, dw, db, batch, l->in_size, l->out_c,
                                 l->s.act, d->lmath, d->stream);
    break;
  case FL_SEQ_CONV: {
    fl_conv2d_desc cd = conv_desc(l, batch);
    st = fl_conv2d_backward_cuda(&cd, in, w, l->out, dy, dx, dw, db, d->ws, l->s.act, d->cmath,
                                 d->stream);
    break;
  }
  case FL_SEQ_POOL: {
    fl_pool2d_desc pd = pool_desc(l, batch);
    if (dx) st = fl_maxpool2d_backward_cuda(&pd, dy, l->argmax, dx, d->stream);
    break;
  }
  case FL_SEQ_BN: {
    if (m->norm_sync) {
      FL_TRY(bn_backward_sync_dev(m, i, in, batch, dy, dx)); /* errors logged there */
      break;
    }
    fl_norm_desc nd = norm_desc(l, batch);
    st = fl_batchnorm_backward_cuda(&nd, in, l->out, dy, w, l->save_mean, l->save_invstd, dx,
                                    dw, db, l->s.act, d->stream);
    break;
  }
  case FL_SEQ_GN: {
    fl_norm_desc nd = norm_desc(l, batch);
    st = fl_groupnorm_backward_cuda(&nd, in, l->out, dy, w, l->save_mean, l->save_invstd, dx,
                                    dw, db, l->s.act, d->stream);
    break;
  }
  }
  if (st != FL_OK) return kernel_failed(l, "backward", st);
  return dev_download_grads(m, l);
}
