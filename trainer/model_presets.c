/* model_presets.c - the built-in models (logreg, mlp, cnn) as op graphs.
 *
 * Each preset describes its model with ONNX ops (Gemm with transB, Conv,
 * BatchNormalization, GroupNormalization, MaxPool, Flatten) and PyTorch's
 * parameter names, so a trained preset exports as the model PyTorch would
 * have built.  The activation is fused into the op before it (the internal
 * "flotilla_act" attribute; export splits it out), which saves a pass over
 * every activation.  Parameters are initialised exactly as the sequential
 * engine did: Kaiming-uniform before a ReLU, Xavier-uniform otherwise, from
 * the splitmix64 stream keyed by (seed, the parameter's index), so a seed
 * gives the same weights as before.  The recompute segments are the old
 * ones too: ceil(sqrt(layers)) linear layers per segment for the MLP, one
 * per conv block for the CNN. */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_config.h"
#include "fl_log.h"
#include "fl_names.h"
#include "fl_graph.h"
#include "model_internal.h"

typedef struct preset {
  fl_graph *g;
  uint64_t seed;
  size_t np;         /* parameters declared so far: the init stream */
  const char *act;   /* "relu" or "tanh" */
  int relu;          /* act is relu: weights take ReLU's gain */
} preset;

/* A weight of the given dims, initialised uniform in +-bound. */
static fl_status weight(preset *p, const char *name, int ndim, const int64_t *dims, int he,
                        int *id) {
  size_t n = 1, receptive = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
  for (int d = 2; d < ndim; d++) receptive *= (size_t)dims[d];
  float *w = malloc(n * sizeof *w);
  if (!w) return FL_ERR(FL_ENOMEM, "model: out of memory for %s", name);
  const double fan_in = (double)dims[1] * (double)receptive;
  const double fan_out = (double)dims[0] * (double)receptive;
  const double bound = he ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
  fl_model_init_uniform(w, n, (float)bound, p->seed, p->np);
  fl_status st = fl_graph_param(p->g, name, ndim, dims, w, 1, id);
  free(w);
  p->np++;
  return st;
}

/* A 1-D parameter (trainable) or buffer filled with v. */
static fl_status vec(preset *p, const char *name, int64_t n, float v, int trainable, int *id) {
  float *b = malloc((size_t)n * sizeof *b);
  if (!b) return FL_ERR(FL_ENOMEM, "model: out of memory for %s", name);
  for (int64_t i = 0; i < n; i++) b[i] = v;
  fl_status st = fl_graph_param(p->g, name, 1, &n, b, trainable, id);
  free(b);
  p->np++;
  return st;
}

static fl_gattr act_attr(const char *act) {
  return (fl_gattr){.name = FL_GRAPH_ACT_ATTR, .kind = FL_GA_STRING, .s = act};
}

/* fc<i>: Gemm(x, W^T) + b, with the activation fused when act is set. */
static fl_status gemm(preset *p, int i, int x, int64_t in, int64_t out, const char *act,
                      int *y) {
  char wn[32], bn[32], on[32];
  snprintf(wn, sizeof wn, "fc%d.weight", i);
  snprintf(bn, sizeof bn, "fc%d.bias", i);
  snprintf(on, sizeof on, "fc%d", i);
  const int64_t wd[2] = {out, in};
  int w, b;
  FL_TRY(weight(p, wn, 2, wd, act && p->relu, &w));
  FL_TRY(vec(p, bn, out, 0.0f, 1, &b));
  const int ins[3] = {x, w, b};
  fl_gattr at[2] = {{.name = "transB", .kind = FL_GA_INT, .i = 1}, act_attr(act)};
  const char *outs[1] = {on};
  return fl_graph_node(p->g, on, "Gemm", ins, 3, outs, 1, at, act ? 2 : 1, y);
}

static fl_status build_linear(const fl_model_spec *s, size_t n_hidden, preset *p, char ck[][FL_MODEL_NAME_MAX],
                              size_t *n_ck) {
  const int64_t in = (int64_t)s->in_channels * s->in_height * s->in_width;
  const int64_t dims[2] = {FL_G_BATCH, in};
  int x;
  FL_TRY(fl_graph_input(p->g, "input", 2, dims, &x));
  const size_t nl = n_hidden + 1, seg = (size_t)ceil(sqrt((double)nl));
  int64_t width = in;
  for (size_t i = 0; i < nl; i++) {
    const int hidden = i < n_hidden;
    if (hidden && s->hidden[i] == 0)
      return FL_ERR(FL_EINVAL, "model: hidden layer %zu has size 0", i);
    const int64_t out = hidden ? (int64_t)s->hidden[i] : s->num_classes;
    FL_TRY(gemm(p, (int)i, x, width, out, hidden ? p->act : NULL, &x));
    width = out;
    if ((i + 1) % seg == 0 && i + 1 < nl) snprintf(ck[(*n_ck)++], FL_MODEL_NAME_MAX, "fc%zu", i);
  }
  return fl_graph_set_output(p->g, x, FL_GLOSS_SOFTMAX_XENT);
}

static fl_status build_cnn(const fl_model_spec *s, preset *p, char ck[][FL_MODEL_NAME_MAX],
                           size_t *n_ck) {
  if (s->conv_kernel % 2 == 0)
    return FL_ERR(FL_EINVAL, "model: cnn conv_kernel %d must be odd ('same' padding)",
                  s->conv_kernel);
  fl_norm_kind nk;
  if (fl_norm_parse(s->norm, &nk) != FL_OK)
    return FL_ERR(FL_EINVAL, "model: cnn norm '%s' must be \"\" (none), bn or gn", s->norm);
  const int bn = nk == FL_NORM_BN, gn = nk == FL_NORM_GN;
  const int64_t dims[4] = {FL_G_BATCH, s->in_channels, s->in_height, s->in_width};
  int x;
  FL_TRY(fl_graph_input(p->g, "input", 4, dims, &x));
  int64_t c = s->in_channels, h = s->in_height, w = s->in_width;
  const int64_t k = s->conv_kernel, pad = k / 2;
  for (int b = 0; b < 2; b++) {
    char nm[16], wn[32], bname[32];
    const int64_t oc = s->conv_channels[b];
    if (oc <= 0) return FL_ERR(FL_EINVAL, "model: conv%d has %lld channels", b, (long long)oc);
    snprintf(nm, sizeof nm, "conv%d", b);
    snprintf(wn, sizeof wn, "conv%d.weight", b);
    const int64_t wd[4] = {oc, c, k, k};
    int wid, bid = -1;
    FL_TRY(weight(p, wn, 4, wd, p->relu, &wid));
    if (!(bn || gn)) {
      snprintf(bname, sizeof bname, "conv%d.bias", b);
      FL_TRY(vec(p, bname, oc, 0.0f, 1, &bid));
    }
    const int64_t ks[2] = {k, k}, pads[4] = {pad, pad, pad, pad}, strides[2] = {1, 1};
    fl_gattr ca[4] = {{.name = "kernel_shape", .kind = FL_GA_INTS, .ints = ks, .n = 2},
                      {.name = "pads", .kind = FL_GA_INTS, .ints = pads, .n = 4},
                      {.name = "strides", .kind = FL_GA_INTS, .ints = strides, .n = 2},
                      act_attr(p->act)};
    const int cin[3] = {x, wid, bid};
    const char *cout[1] = {nm};
    FL_TRY(fl_graph_node(p->g, nm, "Conv", cin, bid >= 0 ? 3 : 2, cout, 1, ca,
                         (bn || gn) ? 3 : 4, &x));
    if (bn || gn) {
      char sn[48], bbn[48], mn[48], vn[48];
      snprintf(nm, sizeof nm, "%s%d", bn ? "bn" : "gn", b);
      snprintf(sn, sizeof sn, "%s.weight", nm);
      snprintf(bbn, sizeof bbn, "%s.bias", nm);
      int sc, bi;
      FL_TRY(vec(p, sn, oc, 1.0f, 1, &sc));
      FL_TRY(vec(p, bbn, oc, 0.0f, 1, &bi));
      const char *nout[1] = {nm};
      if (bn) {
        int mi, vi;
        snprintf(mn, sizeof mn, "%s.running_mean", nm);
        snprintf(vn, sizeof vn, "%s.running_var", nm);
        FL_TRY(vec(p, mn, oc, 0.0f, 0, &mi));
        FL_TRY(vec(p, vn, oc, 1.0f, 0, &vi));
        /* ONNX's momentum weighs the old statistics: 1 - PyTorch's */
        fl_gattr ba[3] = {{.name = "epsilon", .kind = FL_GA_FLOAT, .f = s->bn_epsilon},
                          {.name = "momentum", .kind = FL_GA_FLOAT, .f = 1.0f - s->bn_momentum},
                          act_attr(p->act)};
        const int bin[5] = {x, sc, bi, mi, vi};
        FL_TRY(fl_graph_node(p->g, nm, "BatchNormalization", bin, 5, nout, 1, ba, 3, &x));
      } else {
        if (s->gn_groups <= 0 || oc % s->gn_groups != 0)
          return FL_ERR(FL_EINVAL, "model: layer %s: %d groups do not divide %lld channels", nm,
                        s->gn_groups, (long long)oc);
        fl_gattr ga[3] = {{.name = "epsilon", .kind = FL_GA_FLOAT, .f = s->bn_epsilon},
                          {.name = "num_groups", .kind = FL_GA_INT, .i = s->gn_groups},
                          act_attr(p->act)};
        const int gin[3] = {x, sc, bi};
        FL_TRY(fl_graph_node(p->g, nm, "GroupNormalization", gin, 3, nout, 1, ga, 3, &x));
      }
    }
    snprintf(nm, sizeof nm, "pool%d", b);
    const int64_t pk[2] = {2, 2};
    fl_gattr pa[2] = {{.name = "kernel_shape", .kind = FL_GA_INTS, .ints = pk, .n = 2},
                      {.name = "strides", .kind = FL_GA_INTS, .ints = pk, .n = 2}};
    const char *pout[1] = {nm};
    FL_TRY(fl_graph_node(p->g, nm, "MaxPool", &x, 1, pout, 1, pa, 2, &x));
    snprintf(ck[(*n_ck)++], FL_MODEL_NAME_MAX, "%s", nm);
    c = oc;
    h /= 2;
    w /= 2;
    if (h == 0 || w == 0)
      return FL_ERR(FL_EINVAL, "model: cnn input %dx%d is too small for two 2x2 pools",
                    s->in_height, s->in_width);
  }
  const char *fout[1] = {"flatten"};
  fl_gattr fa = {.name = "axis", .kind = FL_GA_INT, .i = 1};
  FL_TRY(fl_graph_node(p->g, "flatten", "Flatten", &x, 1, fout, 1, &fa, 1, &x));
  int64_t width = c * h * w;
  int fc = 0;
  if (s->fc_hidden > 0) {
    FL_TRY(gemm(p, fc++, x, width, (int64_t)s->fc_hidden, p->act, &x));
    width = (int64_t)s->fc_hidden;
  }
  FL_TRY(gemm(p, fc, x, width, s->num_classes, NULL, &x));
  return fl_graph_set_output(p->g, x, FL_GLOSS_SOFTMAX_XENT);
}

static fl_status build_logreg(const fl_model_spec *s, preset *p, char ck[][FL_MODEL_NAME_MAX],
                              size_t *n_ck) {
  return build_linear(s, 0, p, ck, n_ck);
}

static fl_status build_mlp(const fl_model_spec *s, preset *p, char ck[][FL_MODEL_NAME_MAX],
                           size_t *n_ck) {
  if (s->n_hidden == 0)
    return FL_ERR(FL_EINVAL, "model: mlp needs at least one hidden layer (use logreg for none)");
  return build_linear(s, s->n_hidden, p, ck, n_ck);
}

/* The presets, by model.kind. */
static const struct {
  const char *kind;
  fl_status (*build)(const fl_model_spec *s, preset *p, char ck[][FL_MODEL_NAME_MAX],
                     size_t *n_ck);
} k_presets[] = {{"logreg", build_logreg}, {"mlp", build_mlp}, {"cnn", build_cnn}};

fl_status fl_graph_preset(const fl_model_spec *spec, uint64_t seed, fl_graph **out,
                          char ckpt[][FL_MODEL_NAME_MAX], size_t *n_ckpt) {
  *out = NULL;
  *n_ckpt = 0;
  preset p = {.seed = seed, .act = spec->activation};
  fl_act act;
  if (fl_act_parse(spec->activation, &act) != FL_OK || act == FL_ACT_NONE)
    return FL_ERR(FL_EINVAL, "model: activation '%s' must be relu or tanh", spec->activation);
  p.relu = act == FL_ACT_RELU;
  const int k = FL_ROWS_FIND(k_presets, spec->kind);
  if (k < 0)
    return FL_ERR(FL_EINVAL, "model: no preset called '%s' (logreg, mlp or cnn)", spec->kind);
  FL_TRY(fl_graph_new(spec->kind, &p.g));
  const fl_status st = k_presets[k].build(spec, &p, ckpt, n_ckpt);
  if (st != FL_OK) {
    fl_graph_free(p.g);
    return st;
  }
  *out = p.g;
  return FL_OK;
}
