/* graph_model.c - a compiled graph as an fl_model: parameters in first-use
 * order in one value arena and one gradient arena (64-byte aligned, as the
 * loop, optimizer and checkpoints expect), the losses the engine appends
 * to the output (softmax cross-entropy, BCE with logits, MSE), and the
 * train_step / eval of fl_model_ops.
 *
 * The plan is made at create for batch 1 (to check that small batches
 * bind) and then for max_batch, which stays bound; another batch size
 * re-binds on first use (shapes always; the buffer plan is cached for
 * max_batch and for the last other batch size, so alternating between a
 * training and an eval batch size plans each once).
 *
 * Rows inputs (FL_GT_ROWS) and sparse feeds are handed per step by the
 * caller (fl_graph_model_set_rows / _set_sparse_feed) and borrowed; each
 * rows input's gradient lives in a buffer of the model's own. */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_names.h"
#include "fl_timeline.h"
#include "graph_engine.h"

static size_t round_up(size_t n) {
  if (n == 0) n = 1;
  return (n + FL_G_ALIGN - 1) / FL_G_ALIGN * FL_G_ALIGN;
}

static float *alloc_floats(size_t n) {
  float *p = aligned_alloc(64, round_up(n) * sizeof(float));
  if (p) memset(p, 0, round_up(n) * sizeof(float));
  return p;
}

/* n zeroed floats, 64-byte aligned, from calloc: a large buffer's pages are
 * the kernel's zero pages until written, so a rows gradient (sized for the
 * largest eval batch) costs only the rows a training step writes.  The
 * block calloc gave sits just before the floats, for free_zeroed. */
static float *alloc_zeroed(size_t n) {
  char *base = calloc(1, round_up(n) * sizeof(float) + 64 + sizeof(void *));
  if (!base) return NULL;
  uintptr_t at = ((uintptr_t)base + sizeof(void *) + 63) & ~(uintptr_t)63;
  memcpy((char *)at - sizeof(void *), &base, sizeof base);
  return (float *)at;
}

static void free_zeroed(float *p) {
  void *base;
  if (!p) return;
  memcpy(&base, (char *)p - sizeof base, sizeof base);
  free(base);
}

static void model_free(fl_gmodel *m) {
  if (!m) return;
  fl_gdev_release(m); /* the arenas first, while the device is known */
  for (int t = 0; m->rows_grad && t < m->g->nt; t++) free_zeroed(m->rows_grad[t]);
  free(m->rows_grad);
  free(m->rows);
  free(m->rows_index);
  fl_graph_free(m->g);
  free(m->params);
  free(m->param_tensor);
  free(m->param_of);
  free(m->values);
  free(m->grads);
  free(m->has_grad);
  free(m->zero_grad);
  free(m->run_bwd);
  free(m->fwd_skip);
  free(m->accum);
  free(m->contrib);
  free(m->left);
  free(m->final);
  free(m->zero_params);
  free(m->seg);
  for (int v = 0; v < 2; v++) {
    free(m->var[v].kept);
    free(m->var[v].recomp);
    free(m->var[v].ev_kind);
    free(m->var[v].ev_node);
  }
  free(m->ckpt);
  fl_gdev_free(m, m->arena);
  fl_gdev_free(m, m->ws);
  free(m->data_fwd);
  free(m->data_bwd);
  free(m->grad_buf);
  free(m->saved_fwd);
  free(m->saved_bwd);
  free(m->plans[0].off);
  free(m->plans[1].off);
  free(m->dev_out);
  free(m->dev_dout);
  free(m);
}

/* The parameter list: every PARAM and BUFFER in first-use order (then any
 * unused ones in declaration order), values and grads moved into arenas. */
static fl_status make_params(fl_gmodel *m) {
  fl_graph *g = m->g;
  size_t np = 0, nv = 0, ng = 0;
  for (int t = 0; t < g->nt; t++) m->param_of[t] = -1;
  int *order = malloc(((size_t)g->nt + 1) * sizeof *order);
  int *layer = malloc(((size_t)g->nt + 1) * sizeof *layer);
  if (!order || !layer) {
    free(order);
    free(layer);
    return FL_ERR(FL_ENOMEM, "graph %s: out of memory", g->name);
  }
  for (int i = 0; i <= g->nn; i++) {
    if (i < g->nn) {
      const fl_gnode *n = &g->nodes[i];
      for (int k = 0; k < n->n_in; k++) {
        const int t = n->in[k];
        if (t < 0 || m->param_of[t] >= 0) continue;
        if (g->t[t].kind != FL_GT_PARAM && g->t[t].kind != FL_GT_BUFFER) continue;
        m->param_of[t] = (int)np;
        layer[np] = i;
        order[np++] = t;
      }
    } else {
      for (int t = 0; t < g->nt; t++)
        if ((g->t[t].kind == FL_GT_PARAM || g->t[t].kind == FL_GT_BUFFER) && m->param_of[t] < 0) {
          m->param_of[t] = (int)np;
          layer[np] = g->nn;
          order[np++] = t;
        }
    }
  }
  fl_status st = FL_OK;
  for (size_t p = 0; p < np; p++) {
    const fl_gtensor *t = &g->t[order[p]];
    if (strlen(t->name) >= FL_MODEL_NAME_MAX || t->ndim > FL_MODEL_MAX_DIMS) {
      st = FL_ERR(FL_ENOTSUP, "graph %s: parameter '%s': names of at most %d characters and "
                  "at most %d dimensions (it has %d)", g->name, t->name, FL_MODEL_NAME_MAX - 1,
                  FL_MODEL_MAX_DIMS, t->ndim);
      goto done;
    }
    nv += round_up(t->n);
    if (t->kind == FL_GT_PARAM) ng += round_up(t->n);
  }
  m->np = np;
  m->n_values = nv;
  m->n_grads = ng;
  m->params = calloc(np ? np : 1, sizeof *m->params);
  m->param_tensor = malloc((np ? np : 1) * sizeof *m->param_tensor);
  m->contrib = calloc(np ? np : 1, sizeof *m->contrib);
  m->left = calloc(np ? np : 1, sizeof *m->left);
  m->final = calloc(np ? np : 1, 1);
  m->zero_params = calloc(np ? np : 1, sizeof *m->zero_params);
  m->values = alloc_floats(nv);
  m->grads = alloc_floats(ng);
  if (!m->params || !m->param_tensor || !m->contrib || !m->left || !m->final ||
      !m->zero_params || !m->values || !m->grads) {
    st = FL_ERR(FL_ENOMEM, "graph %s: out of memory for %zu parameter floats", g->name, nv + ng);
    goto done;
  }
  size_t vo = 0, go = 0;
  for (size_t p = 0; p < np; p++) {
    fl_gtensor *t = &g->t[order[p]];
    fl_param *q = &m->params[p];
    snprintf(q->name, sizeof q->name, "%s", t->name);
    q->ndim = t->ndim ? t->ndim : 1;
    q->shape[0] = 1;
    for (int d = 0; d < t->ndim; d++) q->shape[d] = t->dims[d];
    q->n = t->n;
    q->value = m->values + vo;
    vo += round_up(t->n);
    memcpy(q->value, t->data, t->n * sizeof(float));
    free(t->data);
    t->data = q->value;
    t->producer = -1;
    if (t->kind == FL_GT_PARAM) {
      q->grad = m->grads + go;
      go += round_up(t->n);
    }
    q->layer = layer[p];
    m->param_tensor[p] = order[p];
  }
done:
  free(order);
  free(layer);
  return st;
}

/* AMP on a gpu graph: the GEMM precision of each node.  The lists name op
 * types in ONNX's spelling ("MatMul", "Gemm", "Conv"), Paddle's
 * ("conv2d"; fl_gop_find_paddle) or "linear".  Paddle's names of a linear
 * layer's GEMM (matmul_v2, matmul, mul) and "linear" stand for both ONNX
 * GEMM ops, Gemm and MatMul: a Paddle model has no Gemm, and PyTorch's
 * Linear exports as either.  The white list, when given, is the set of op
 * types computed in amp_math (it replaces the default MatMul, Gemm, Conv);
 * the black list keeps op types in fp32 whatever the white list says.
 * Only Gemm and Conv have a 16-bit GEMM on the gpu (their CUDA twins take
 * n->math); the CPU computes everything in fp32. */
static int amp_linear_name(const char *name) {
  static const char *const names[] = {"linear", "matmul_v2", "matmul", "mul", NULL};
  return fl_names_find(names, name) >= 0;
}

#define AMP_MAX_TARGETS 8

/* The op types name stands for (0 or more, at most AMP_MAX_TARGETS) into
 * out: a linear layer's names stand for every FL_GOP_MATMUL op. */
static int amp_targets(const char *name, const fl_gop *out[AMP_MAX_TARGETS]) {
  if (!name) return 0;
  if (amp_linear_name(name)) return fl_gop_with_traits(FL_GOP_MATMUL, out, AMP_MAX_TARGETS);
  out[0] = fl_gop_find(name);
  if (!out[0]) out[0] = fl_gop_find_paddle(name);
  return out[0] != NULL;
}

static int amp_names(const fl_gop *op, const char *name) {
  const fl_gop *t[AMP_MAX_TARGETS];
  const int n = amp_targets(name, t);
  for (int i = 0; op && i < n; i++)
    if (t[i] == op) return 1;
  return 0;
}

static int listed(const fl_gop *op, const char *const *names, size_t n) {
  for (size_t i = 0; names && i < n; i++)
    if (amp_names(op, names[i])) return 1;
  return 0;
}

static int amp_has_16bit(const fl_gop *op) { return op && (op->traits & FL_GOP_AMP16); }

/* The default white list: the ops with a 16-bit GEMM and the linear
 * layers' GEMMs. */
static int amp_default_white(const fl_gop *op) {
  return (op->traits & (FL_GOP_AMP16 | FL_GOP_MATMUL)) != 0;
}

static fl_math amp_math_of(const fl_gop *op, const fl_graph_options *opt) {
  if (!op || opt->amp_math == FL_MATH_FP32 || !amp_has_16bit(op)) return FL_MATH_FP32;
  const int w = opt->n_amp_white ? listed(op, opt->amp_white, opt->n_amp_white)
                                 : amp_default_white(op);
  return w && !listed(op, opt->amp_black, opt->n_amp_black) ? opt->amp_math : FL_MATH_FP32;
}

fl_math fl_graph_amp_math(const char *op_type, const fl_graph_options *opt) {
  if (!op_type || !opt) return FL_MATH_FP32;
  const fl_gop *op = fl_gop_find(op_type);
  return amp_math_of(op ? op : fl_gop_find_paddle(op_type), opt);
}

/* The lists' names: one that names no op type is reported (it can have no
 * effect: a Paddle list may name ops Flotilla lacks); an op type on both
 * lists is refused, as Paddle refuses it; a white-listed op type without a
 * 16-bit GEMM is reported on a gpu graph (it stays fp32). */
static fl_status check_amp_lists(const fl_graph *g, const fl_graph_options *opt) {
  for (int l = 0; l < 2; l++) {
    const char *const *names = l ? opt->amp_black : opt->amp_white;
    const size_t n = l ? opt->n_amp_black : opt->n_amp_white;
    const char *what = l ? "custom_black_list" : "custom_white_list";
    for (size_t i = 0; names && i < n; i++) {
      const char *nm = names[i] ? names[i] : "";
      const fl_gop *t[AMP_MAX_TARGETS];
      const int nt = amp_targets(nm, t);
      if (nt == 0) {
        FL_LOGW("graph %s: amp_configs.%s: '%s' is no op type Flotilla knows (ONNX or Paddle "
                "name); it has no effect", g->name, what, nm);
        continue;
      }
      for (size_t k = 0; !l && opt->amp_black && k < opt->n_amp_black; k++) {
        const char *b = opt->amp_black[k] ? opt->amp_black[k] : "";
        for (int j = 0; j < nt; j++)
          if (amp_names(t[j], b))
            return FL_ERR(FL_EINVAL, "graph %s: amp_configs: '%s' (custom_white_list) and '%s' "
                          "(custom_black_list) name the same op type (%s)", g->name, nm, b,
                          t[j]->type);
      }
      for (int j = 0; !l && opt->device >= 0 && opt->amp_math != FL_MATH_FP32 && j < nt; j++)
        if (!amp_has_16bit(t[j]) && !(nt > 1 && (t[j]->traits & FL_GOP_MATMUL)))
          FL_LOGW("graph %s: amp_configs.custom_white_list: %s has no 16-bit kernel (only Gemm "
                  "and Conv do); it computes in fp32", g->name, t[j]->type);
    }
  }
  return FL_OK;
}

static void set_math(fl_gmodel *m, const fl_graph_options *opt) {
  for (int i = 0; i < m->g->nn; i++) {
    fl_gnode *n = &m->g->nodes[i];
    n->math = opt->device < 0 ? FL_MATH_FP32 : amp_math_of(n->op, opt);
  }
}

/* Checkpoints by name (before the rewrite, which keeps them), or, after
 * it (late 1), ~sqrt(nodes) evenly spaced ones. */
static fl_status resolve_checkpoints(fl_gmodel *m, const fl_graph_options *opt, int late) {
  fl_graph *g = m->g;
  if (!opt->recompute || (opt->n_checkpoints > 0) == late) return FL_OK;
  if (opt->n_checkpoints > 0) {
    for (size_t k = 0; k < opt->n_checkpoints; k++) {
      const int t = opt->checkpoints ? fl_graph_find(g, opt->checkpoints[k]) : -1;
      if (t < 0)
        return FL_ERR(FL_EINVAL, "graph %s: recompute checkpoint '%s' names no tensor of the "
                      "graph", g->name, opt->checkpoints && opt->checkpoints[k]
                                        ? opt->checkpoints[k] : "(null)");
      m->ckpt[t] = 1;
    }
    return FL_OK;
  }
  const int len = (int)ceil(sqrt((double)g->nn));
  for (int i = len - 1; i < g->nn - 1; i += len) m->ckpt[g->nodes[i].out[0]] = 1;
  return FL_OK;
}

/* The named checkpoints, constant folding and the Relu fusion (which keep
 * them), then the
 * evenly spaced checkpoints of the fused graph. */
static fl_status rewrite(fl_gmodel *m, const fl_graph_options *opt) {
  FL_TRY(resolve_checkpoints(m, opt, 0));
  FL_TRY(fl_gfold(m));
  FL_TRY(fl_gfuse(m, opt->device));
  return resolve_checkpoints(m, opt, 1);
}

/* The SparseRowIndex node before the reader of rows input t, or -1. */
static int index_node(const fl_graph *g, int t) {
  for (int i = 0; i < g->nn; i++) {
    const fl_gnode *r = &g->nodes[i];
    const int p = (r->op->traits & FL_GOP_ROW_READER) && r->n_in > 1 && r->in[0] == t &&
                          r->in[1] >= 0 ? g->t[r->in[1]].producer : -1;
    if (p >= 0 && (g->nodes[p].op->traits & FL_GOP_ROW_INDEX)) return p;
  }
  return -1;
}

/* The list of the rows inputs, the SparseRowIndex node and the gradient
 * buffer of each; a graph without a data input or with rows inputs is
 * host only. */
static fl_status make_rows_grads(fl_gmodel *m, const fl_graph_options *opt) {
  const fl_graph *g = m->g;
  const size_t nt = (size_t)(g->nt ? g->nt : 1);
  int rows = 0;
  if (!(m->rows_grad = calloc(nt, sizeof *m->rows_grad)) ||
      !(m->rows = malloc(nt * sizeof *m->rows)) ||
      !(m->rows_index = malloc(nt * sizeof *m->rows_index)))
    return FL_ERR(FL_ENOMEM, "graph %s: out of memory", g->name);
  for (int t = 0; t < g->nt; t++) {
    if (g->t[t].kind != FL_GT_ROWS) continue;
    rows = 1;
    m->rows_index[m->n_rows] = index_node(g, t);
    m->rows[m->n_rows++] = t;
    const size_t n = (size_t)g->t[t].dims[0] * (size_t)g->t[t].dims[1];
    if (!(m->rows_grad[t] = alloc_zeroed(n)))
      return FL_ERR(FL_ENOMEM, "graph %s: out of memory for the gradient of rows input %s "
                    "(%zu floats)", g->name, g->t[t].name, n);
  }
  const int typed = g->n_inputs > 1 || (g->input >= 0 && g->t[g->input].dtype != FL_G_F32);
  if (opt->device >= 0 && (rows || typed || g->input < 0))
    return FL_ERR(FL_ENOTSUP, "graph %s: a graph %s runs on the cpu only (train.device: cpu)",
                  g->name, rows ? "with rows inputs" : typed ? "with several or int64 inputs"
                                                     : "without a data input");
  return FL_OK;
}

fl_status fl_graph_model_create(fl_graph *g, const fl_graph_options *opt, void **handle) {
  if (!handle) {
    fl_graph_free(g);
    return FL_ERR(FL_EINVAL, "graph: NULL handle");
  }
  *handle = NULL;
  if (!g || !opt || opt->max_batch == 0) {
    fl_graph_free(g);
    return FL_ERR(FL_EINVAL, "graph: NULL graph or options, or max_batch 0");
  }
  fl_gmodel *m = calloc(1, sizeof *m);
  if (!m) {
    fl_graph_free(g);
    return FL_ERR(FL_ENOMEM, "graph: out of memory");
  }
  m->g = g;
  m->max_batch = opt->max_batch;
  m->seed = opt->seed;
  m->recompute = opt->recompute != 0;
  fl_status st = fl_graph_check(g);
  if (st == FL_OK) st = fl_graph_sort(g);
  if (st != FL_OK) goto fail;
  const size_t nt = (size_t)g->nt, nn = (size_t)g->nn;
  m->param_of = malloc(nt * sizeof *m->param_of);
  m->has_grad = calloc(nt, 1);
  m->zero_grad = calloc(nt, 1);
  m->ckpt = calloc(nt, 1);
  m->data_fwd = calloc(nt, sizeof *m->data_fwd);
  m->data_bwd = calloc(nt, sizeof *m->data_bwd);
  m->grad_buf = calloc(nt, sizeof *m->grad_buf);
  m->run_bwd = calloc(nn, 1);
  m->fwd_skip = calloc(nn, 1);
  m->accum = calloc(nn, sizeof *m->accum);
  m->seg = calloc(nn, sizeof *m->seg);
  m->saved_fwd = calloc(nn, sizeof *m->saved_fwd);
  m->saved_bwd = calloc(nn, sizeof *m->saved_bwd);
  int var_ok = 1;
  for (int k = 0; k < 2; k++) {
    m->plans[k].off = malloc((3 * nt + 2 * nn + 1) * sizeof *m->plans[k].off);
    var_ok &= m->plans[k].off != NULL;
  }
  for (int v = 0; v < 2; v++) {
    m->var[v].kept = calloc(nt, 1);
    m->var[v].recomp = calloc(nn, 1);
    m->var[v].ev_kind = calloc(2 * nn, 1);
    m->var[v].ev_node = calloc(2 * nn, sizeof *m->var[v].ev_node);
    var_ok &= m->var[v].kept && m->var[v].recomp && m->var[v].ev_kind && m->var[v].ev_node;
  }
  if (!m->param_of || !m->has_grad || !m->zero_grad || !var_ok || !m->ckpt || !m->data_fwd ||
      !m->data_bwd || !m->grad_buf || !m->run_bwd || !m->fwd_skip || !m->accum ||
      !m->seg || !m->saved_fwd || !m->saved_bwd) {
    st = FL_ERR(FL_ENOMEM, "graph %s: out of memory", g->name);
    goto fail;
  }
  if ((st = rewrite(m, opt)) != FL_OK || (st = make_params(m)) != FL_OK) goto fail;
  m->ctx.t = g->t;
  m->ctx.graph = g->name;
  m->ctx.seed = opt->seed;
  if ((st = make_rows_grads(m, opt)) != FL_OK) goto fail;
  if ((st = check_amp_lists(g, opt)) != FL_OK) goto fail;
  set_math(m, opt);
  if ((st = fl_gbind(m, 1)) != FL_OK || (st = fl_gbind(m, opt->max_batch)) != FL_OK) {
    /* the ops' own bind-time messages name the node and op, not the file */
    FL_LOGE("graph %s: not compiled: shapes, attributes or types of a node are not supported "
            "(the line above names it)", g->name);
    goto fail;
  }
  if (opt->device >= 0 && (st = fl_gdev_attach(m, opt->device)) != FL_OK) goto fail;
  m->act_bytes = (m->plan_floats + m->ws_floats) * sizeof(float);
  *handle = m;
  return FL_OK;
fail:
  model_free(m);
  return st;
}

/* ---------------------------------------------------------------- ops */

static void gm_destroy(void *handle) { model_free(handle); }

static size_t gm_num_params(void *handle) { return ((fl_gmodel *)handle)->np; }

static fl_param *gm_param(void *handle, size_t index) {
  fl_gmodel *m = handle;
  return index < m->np ? &m->params[index] : NULL;
}

static size_t gm_input_size(void *handle) {
  const fl_gmodel *m = handle;
  if (m->g->input < 0) return 0;
  const fl_gtensor *in = &m->g->t[m->g->input];
  size_t per = 1;
  for (int d = 1; d < in->ndim; d++) per *= (size_t)in->dims[d];
  return per;
}

static size_t gm_activation_bytes(void *handle) { return ((fl_gmodel *)handle)->act_bytes; }

/* Values per sample of the bound output. */
static size_t out_k(const fl_gmodel *m, size_t batch) {
  return m->g->t[m->g->output].n / batch;
}

/* The graph's inputs as "'a' (float), 'b' (int64)" for messages. */
static const char *input_list(const fl_graph *g, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int t = 0; t < g->nt && len < cap; t++)
    if (g->t[t].kind == FL_GT_INPUT)
      len += (size_t)snprintf(buf + len, cap - len, "%s'%s' (%s)", len ? ", " : "", g->t[t].name,
                              g->t[t].dtype == FL_G_I64 ? "int64" : "float");
  return len ? buf : "none";
}

/* The feed's entry for input tensor t, or NULL. */
static const fl_model_input *fed(const fl_model_feed *f, const char *name) {
  for (size_t k = 0; k < f->n_inputs; k++)
    if (f->inputs[k].name && !strcmp(f->inputs[k].name, name)) return &f->inputs[k];
  return NULL;
}

/* Point every data input at its buffer in f: each input of the graph fed
 * once, by name, with its element type, and nothing else fed. */
static fl_status bind_feed(fl_gmodel *m, const fl_model_feed *f, const char *what) {
  fl_graph *g = m->g;
  char list[512];
  for (size_t k = 0; k < f->n_inputs; k++) {
    const fl_model_input *in = &f->inputs[k];
    const int t = in->name ? fl_graph_find(g, in->name) : -1;
    if (t < 0 || g->t[t].kind != FL_GT_INPUT)
      return FL_ERR(FL_EINVAL, "graph %s %s: the feed names '%s', which is no input of the "
                    "graph (its inputs: %s)", g->name, what, in->name ? in->name : "(null)",
                    input_list(g, list, sizeof list));
    if (fed(f, in->name) != in || !in->data || in->dtype != (int)g->t[t].dtype)
      return FL_ERR(FL_EINVAL, "graph %s %s: input '%s' is %s; the feed gives it %s", g->name,
                    what, in->name, g->t[t].dtype == FL_G_I64 ? "int64" : "float",
                    fed(f, in->name) != in ? "twice" : !in->data ? "NULL data"
                    : in->dtype == FL_G_I64 ? "int64 data" : "float data");
    if (g->t[t].dtype == FL_G_I64) g->t[t].idata = (int64_t *)in->data; /* ops never write it */
    else g->t[t].data = (float *)in->data;
  }
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].kind == FL_GT_INPUT && !fed(f, g->t[t].name))
      return FL_ERR(FL_EINVAL, "graph %s %s: input '%s' is not fed (the graph's inputs: %s)",
                    g->name, what, g->t[t].name, input_list(g, list, sizeof list));
  return FL_OK;
}

/* The call's arguments, and every rows input handed (fl_graph_model_set_rows). */
static fl_status check_call(fl_gmodel *m, const fl_model_feed *f, size_t batch,
                            const char *what) {
  if (!m || !f || (f->n_inputs && !f->inputs))
    return FL_ERR(FL_EINVAL, "graph %s: NULL model or feed", what);
  if (batch == 0 || batch > m->max_batch)
    return FL_ERR(FL_EINVAL, "graph %s %s: batch %zu outside [1, %zu]", m->g->name, what, batch,
                  m->max_batch);
  for (int t = 0; t < m->g->nt; t++)
    if (m->g->t[t].kind == FL_GT_ROWS && !m->g->t[t].data)
      return FL_ERR(FL_ESTATE, "graph %s %s: rows input %s was not handed its rows "
                    "(fl_graph_model_set_rows)", m->g->name, what, m->g->t[t].name);
  return bind_feed(m, f, what);
}

/* The feed of the one-float-input calls: x for the graph's input (if it
 * has one), labels [N] (none ignored) or float targets. */
static fl_status legacy_feed(const fl_gmodel *m, const float *x, const int32_t *y,
                             const float *tg, fl_model_input *in, fl_model_feed *f) {
  const fl_graph *g = m->g;
  memset(f, 0, sizeof *f);
  if ((!x && g->input >= 0) || (!y && !tg))
    return FL_ERR(FL_EINVAL, "graph %s: NULL input or targets", g->name);
  if (g->n_inputs > 1 || (g->input >= 0 && g->t[g->input].dtype != FL_G_F32)) {
    char list[512];
    return FL_ERR(FL_EINVAL, "graph %s: inputs %s: feed them by name (train_feed / eval_feed)",
                  g->name, input_list(g, list, sizeof list));
  }
  *in = (fl_model_input){.name = g->input >= 0 ? g->t[g->input].name : NULL,
                         .dtype = FL_MODEL_F32, .data = x};
  *f = (fl_model_feed){.inputs = in, .n_inputs = g->input >= 0, .y = y, .ylen = 1,
                       .ignore_index = INT64_MIN, .t = tg};
  return FL_OK;
}

/* legacy_feed of labels y, for a graph whose loss takes them (the call
 * taking float targets instead is named fcall in the message). */
static fl_status label_feed(const fl_gmodel *m, const float *x, const int32_t *y,
                            const char *fcall, fl_model_input *in, fl_model_feed *f) {
  if (m->g->loss != FL_GLOSS_SOFTMAX_XENT)
    return FL_ERR(FL_EINVAL, "graph %s: its loss takes float targets (%s)", m->g->name, fcall);
  return legacy_feed(m, x, y, NULL, in, f);
}

/* legacy_feed of float targets t, for a graph whose loss takes them. */
static fl_status float_feed(const fl_gmodel *m, const float *x, const float *t,
                            fl_model_input *in, fl_model_feed *f) {
  if (!m) return FL_ERR(FL_EINVAL, "graph: NULL model");
  if (m->g->loss == FL_GLOSS_SOFTMAX_XENT)
    return FL_ERR(FL_EINVAL, "graph %s: softmax cross-entropy takes int labels", m->g->name);
  return legacy_feed(m, x, NULL, t, in, f);
}

static void set_result(fl_model_result *res, double ls, size_t c1, size_t c5, size_t count) {
  if (res) *res = (fl_model_result){.loss_sum = ls, .correct1 = c1, .correct5 = c5, .count = count};
}

/* Softmax cross-entropy over rows of C classes (the output's last axis),
 * one class id per row; rows whose label is f->ignore_index count neither
 * in the mean nor in the accuracy (their gradient is 0). */
static fl_status token_xent(fl_gmodel *m, const fl_model_feed *f, size_t batch, float scale,
                            float *dout, fl_model_result *res) {
  const fl_gtensor *o = &m->g->t[m->g->output];
  const size_t ylen = f->ylen ? f->ylen : 1, rows = batch * ylen;
  const size_t C = o->ndim >= 2 ? (size_t)o->shape[o->ndim - 1] : 0;
  if (m->dev)
    return FL_ERR(FL_ENOTSUP, "graph %s: per-token labels and ignore_index are computed on the "
                  "cpu only (train.device: cpu)", m->g->name);
  if (C < 2 || rows * C != o->n)
    return FL_ERR(FL_EINVAL, "graph %s: %zu class ids per sample need an output of %zu rows of "
                  "classes (class axis last: [N, C] or [N, L, C]); output %s has %zu values "
                  "per sample", m->g->name, ylen, ylen, o->name, o->n / batch);
  size_t count = 0, c1 = 0, c5 = 0;
  for (size_t r = 0; r < rows; r++) {
    const int32_t lab = f->y[r];
    if ((int64_t)lab == f->ignore_index) continue;
    if (lab < 0 || (size_t)lab >= C)
      return FL_ERR(FL_EINVAL, "graph %s: label %d of sample %zu (position %zu) outside [0, %zu) "
                    "and not ignore_index %lld", m->g->name, (int)lab, r / ylen, r % ylen, C,
                    (long long)f->ignore_index);
    count++;
  }
  double ls = 0.0;
  const float g = count ? scale / (float)count : 0.0f;
  for (size_t r = 0; r < rows; r++) {
    float *d = dout ? dout + r * C : NULL;
    if ((int64_t)f->y[r] == f->ignore_index) {
      if (d) memset(d, 0, C * sizeof *d);
      continue;
    }
    double l = 0.0;
    size_t a = 0, b = 0;
    if (fl_softmax_xent(o->data + r * C, f->y + r, 1, C, g, d, &l, &a, &b) != FL_OK)
      return FL_ERR(FL_EINVAL, "graph %s: softmax cross-entropy failed", m->g->name);
    ls += l;
    c1 += a;
    c5 += b;
  }
  set_result(res, ls, c1, c5, count);
  return FL_OK;
}

/* Whether a class id of f equals its ignore_index. */
static int any_ignored(const fl_model_feed *f, size_t batch) {
  const size_t n = batch * (f->ylen ? f->ylen : 1);
  for (size_t i = 0; i < n; i++)
    if ((int64_t)f->y[i] == f->ignore_index) return 1;
  return 0;
}

/* Softmax cross-entropy of one class id per sample over the whole output. */
static fl_status sample_xent(fl_gmodel *m, const int32_t *y, size_t batch, float scale,
                             float *dout, fl_model_result *res) {
  const fl_gtensor *o = &m->g->t[m->g->output];
  const size_t K = out_k(m, batch);
  double ls = 0.0;
  size_t c1 = 0, c5 = 0;
  for (size_t i = 0; i < batch; i++)
    if (y[i] < 0 || (size_t)y[i] >= K)
      return FL_ERR(FL_EINVAL, "graph %s: label %d of sample %zu outside [0, %zu)", m->g->name,
                    (int)y[i], i, K);
  fl_status st = m->dev ? fl_gdev_softmax_xent(m, o->data, y, batch, K, scale, dout, &ls, &c1, &c5)
                        : fl_softmax_xent(o->data, y, batch, K, scale, dout, &ls, &c1, &c5);
  if (st != FL_OK) return FL_ERR(st, "graph %s: softmax cross-entropy failed", m->g->name);
  set_result(res, ls, c1, c5, batch);
  return FL_OK;
}

/* The loss of the bound output against the feed's class ids (softmax) or
 * float targets (bce, mse); d(scale * mean loss)/d output into dout when
 * set. */
static fl_status loss(fl_gmodel *m, const fl_model_feed *f, size_t batch, float scale,
                      float *dout, fl_model_result *res) {
  const fl_gtensor *o = &m->g->t[m->g->output];
  const size_t K = out_k(m, batch);
  if (m->g->loss == FL_GLOSS_SOFTMAX_XENT) {
    if (!f->y) return FL_ERR(FL_EINVAL, "graph %s: softmax cross-entropy needs int labels", m->g->name);
    if (f->ylen <= 1 && !any_ignored(f, batch)) return sample_xent(m, f->y, batch, scale, dout, res);
    return token_xent(m, f, batch, scale, dout, res);
  }
  const float *tg = f->t;
  if (!tg) return FL_ERR(FL_EINVAL, "graph %s: this loss needs float targets", m->g->name);
  if (m->dev) FL_TRY(fl_gdev_download_output(m, batch));
  const float *z = m->dev ? m->dev_out : o->data;
  float *dz = m->dev ? (dout ? m->dev_dout : NULL) : dout;
  const double inv = 1.0 / (double)(batch * K);
  double ls = 0.0, ae = 0.0, ts = 0.0, tq = 0.0;
  size_t ok = 0;
  for (size_t i = 0; i < batch * K; i++) {
    const double v = z[i], t = tg[i];
    if (m->g->loss == FL_GLOSS_BCE_LOGITS) {
      const double mx = v > 0 ? v : 0;
      ls += (mx - v * t + log1p(exp(-fabs(v)))) / (double)K;
      const double sg = v >= 0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v));
      if (dz) dz[i] = (float)((double)scale * (sg - t) * inv);
      ok += (v > 0) == (t > 0.5);
    } else {
      ls += (v - t) * (v - t) / (double)K;
      ae += fabs(v - t), ts += t, tq += t * t;
      if (dz) dz[i] = (float)((double)scale * 2.0 * (v - t) * inv);
    }
  }
  if (m->dev && dout) FL_TRY(fl_gdev_upload_dout(m, batch));
  set_result(res, ls, m->g->loss == FL_GLOSS_BCE_LOGITS ? ok / K : 0, 0, batch);
  if (res && m->g->loss == FL_GLOSS_MSE)
    res->values = batch * K, res->abs_err = ae, res->t_sum = ts, res->t_sq = tq;
  return FL_OK;
}

/* The input a gpu graph uploads: its one float input's host data. */
static const float *host_x(const fl_gmodel *m) {
  return m->g->input >= 0 ? m->g->t[m->g->input].data : NULL;
}

static fl_status step(fl_gmodel *m, const fl_model_feed *f, size_t batch, float scale,
                      fl_grad_ready_fn on_ready, void *ctx, fl_model_result *res) {
  const float *x = NULL;
  if (!(scale > 0.0f) || !isfinite(scale))
    return FL_ERR(FL_EINVAL, "graph %s: loss scale %g must be finite and > 0",
                  m ? m->g->name : "", (double)scale);
  FL_TRY(check_call(m, f, batch, "train_step"));
  FL_TRY(fl_gbind(m, batch));
  if (m->dev) FL_TRY(fl_gdev_begin(m, host_x(m), f->y, batch, &x));
  fl_timeline *tl = fl_timeline_default();
  fl_timeline_begin(tl, "compute", "forward");
  fl_status st = fl_gexec_forward(m, x, 1);
  if (st == FL_OK) st = loss(m, f, batch, scale, m->g->t[m->g->output].grad, res);
  fl_timeline_end(tl, "compute", "forward");
  if (st == FL_OK) {
    fl_timeline_begin(tl, "compute", "backward");
    st = fl_gexec_backward(m, on_ready, ctx);
    fl_timeline_end(tl, "compute", "backward");
  }
  m->step++;
  if (m->dev) {
    const fl_status e = fl_gdev_end(m, 1);
    if (st == FL_OK) st = e;
  }
  return st;
}

static fl_status evaluate(fl_gmodel *m, const fl_model_feed *f, size_t batch,
                          fl_model_result *res) {
  const float *x = NULL;
  FL_TRY(check_call(m, f, batch, "eval"));
  FL_TRY(fl_gbind(m, batch));
  if (m->dev) FL_TRY(fl_gdev_begin(m, host_x(m), f->y, batch, &x));
  fl_status st = fl_gexec_forward(m, x, 0);
  if (st == FL_OK) st = loss(m, f, batch, 1.0f, NULL, res);
  if (m->dev) {
    const fl_status e = fl_gdev_end(m, 0);
    if (st == FL_OK) st = e;
  }
  return st;
}

/* The losses' kinds of targets: class ids (softmax) or float targets. */
static fl_status check_targets(const fl_gmodel *m, const fl_model_feed *f, const char *what) {
  if (!m || !f) return FL_ERR(FL_EINVAL, "graph: NULL model or feed");
  if (m->g->loss == FL_GLOSS_SOFTMAX_XENT && !f->y)
    return FL_ERR(FL_EINVAL, "graph %s %s: softmax cross-entropy takes int labels", m->g->name,
                  what);
  if (m->g->loss != FL_GLOSS_SOFTMAX_XENT && !f->t)
    return FL_ERR(FL_EINVAL, "graph %s %s: its loss takes float targets", m->g->name, what);
  return FL_OK;
}

static fl_status gm_train_feed(void *handle, const fl_model_feed *f, size_t batch,
                               float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                               fl_model_result *res) {
  FL_TRY(check_targets(handle, f, "train_step"));
  return step(handle, f, batch, loss_scale, on_ready, ctx, res);
}

static fl_status gm_eval_feed(void *handle, const fl_model_feed *f, size_t batch,
                              fl_model_result *res) {
  FL_TRY(check_targets(handle, f, "eval"));
  return evaluate(handle, f, batch, res);
}

static fl_status gm_train_step(void *handle, const float *x, const int32_t *y, size_t batch,
                               float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                               fl_model_result *res) {
  fl_gmodel *m = handle;
  fl_model_input in;
  fl_model_feed f;
  FL_TRY(label_feed(m, x, y, "train_stepf", &in, &f));
  return step(m, &f, batch, loss_scale, on_ready, ctx, res);
}

static fl_status gm_eval(void *handle, const float *x, const int32_t *y, size_t batch,
                         fl_model_result *res) {
  fl_gmodel *m = handle;
  fl_model_input in;
  fl_model_feed f;
  FL_TRY(label_feed(m, x, y, "evalf", &in, &f));
  return evaluate(m, &f, batch, res);
}

fl_status fl_graph_model_train_stepf(void *handle, const float *x, const float *t, size_t batch,
                                     float loss_scale, fl_grad_ready_fn on_ready, void *ctx,
                                     fl_model_result *res) {
  fl_gmodel *m = handle;
  fl_model_input in;
  fl_model_feed f;
  FL_TRY(float_feed(m, x, t, &in, &f));
  return step(m, &f, batch, loss_scale, on_ready, ctx, res);
}

fl_status fl_graph_model_evalf(void *handle, const float *x, const float *t, size_t batch,
                               fl_model_result *res) {
  fl_gmodel *m = handle;
  fl_model_input in;
  fl_model_feed f;
  FL_TRY(float_feed(m, x, t, &in, &f));
  return evaluate(m, &f, batch, res);
}

fl_status fl_graph_model_forward(void *handle, const float *x, size_t batch, int training,
                                 const float **out) {
  fl_gmodel *m = handle;
  fl_model_input in;
  fl_model_feed f;
  static const int32_t none = 0;
  if (!m || !out) return FL_ERR(FL_EINVAL, "graph: NULL model or output");
  if (m->dev) return FL_ERR(FL_ENOTSUP, "graph %s: forward/backward calls are host only", m->g->name);
  FL_TRY(legacy_feed(m, x, &none, NULL, &in, &f));
  FL_TRY(check_call(m, &f, batch, "forward"));
  FL_TRY(fl_gbind(m, batch));
  FL_TRY(fl_gexec_forward(m, NULL, training != 0));
  *out = m->g->t[m->g->output].data;
  return FL_OK;
}

const float *fl_graph_model_output(void *handle) {
  fl_gmodel *m = handle;
  return m && !m->dev && m->bound ? m->g->t[m->g->output].data : NULL;
}

/* The index in m->rows of the rows input called name, or -1: from the
 * one found last on. */
static int rows_k(fl_gmodel *m, const char *name) {
  for (int i = 0; name && i < m->n_rows; i++) {
    const int k = (m->rows_at + i) % m->n_rows;
    if (strcmp(m->g->t[m->rows[k]].name, name) == 0) return m->rows_at = k;
  }
  return -1;
}

int fl_gmodel_rows_find(fl_gmodel *m, const char *name) {
  const int k = rows_k(m, name);
  return k >= 0 ? m->rows[k] : name ? fl_graph_find(m->g, name) : -1;
}

fl_status fl_graph_model_set_ranks(void *handle, const char *name, const int64_t *uniq,
                                   size_t nu, const int64_t *rank, size_t n) {
  fl_gmodel *m = handle;
  const int k = m ? rows_k(m, name) : -1;
  if (k < 0 || !uniq || !rank)
    return FL_ERR(FL_EINVAL, "graph %s: set_ranks %s: %s", m ? m->g->name : "",
                  name ? name : "(null)", k < 0 ? "no rows input of that name" : "NULL ids");
  if (m->rows_index[k] < 0) return FL_OK; /* a table no node reads */
  fl_gnode *x = &m->g->nodes[m->rows_index[k]];
  x->uniq = uniq;
  x->n_uniq = nu;
  x->rank = rank;
  x->n_rank = n;
  return FL_OK;
}

fl_status fl_graph_model_set_rows(void *handle, const char *name, const float *rows,
                                  const float **grad) {
  fl_gmodel *m = handle;
  if (!m) return FL_ERR(FL_EINVAL, "graph: NULL model");
  const int t = fl_gmodel_rows_find(m, name);
  const int is_rows = t >= 0 && m->g->t[t].kind == FL_GT_ROWS;
  if (!is_rows || !rows)
    return FL_ERR(FL_EINVAL, "graph %s: set_rows %s: %s", m->g->name, name ? name : "(null)",
                  is_rows ? "NULL rows" : "no rows input of that name");
  m->g->t[t].data = (float *)rows; /* ops never write an input */
  if (grad) *grad = m->rows_grad[t];
  return FL_OK;
}

fl_status fl_graph_model_rows_used(void *handle, const char *name, size_t n_rows) {
  fl_gmodel *m = handle;
  const int t = m && name ? fl_gmodel_rows_find(m, name) : -1;
  if (t < 0 || m->g->t[t].kind != FL_GT_ROWS || !m->bound)
    return FL_ERR(FL_EINVAL, "graph %s: rows_used %s: %s", m ? m->g->name : "",
                  name ? name : "(null)", t >= 0 && m->g->t[t].kind == FL_GT_ROWS
                  ? "the graph is not bound to a batch yet" : "no rows input of that name");
  fl_gtensor *x = &m->g->t[t];
  x->shape[0] = n_rows < 1 ? 1 : n_rows < (size_t)x->dims[0] ? (int64_t)n_rows : x->dims[0];
  x->n = (size_t)x->shape[0] * (size_t)x->shape[1];
  return FL_OK;
}

fl_status fl_graph_model_set_sparse_feed(void *handle, const char *node,
                                         const fl_graph_sparse_feed *feed) {
  fl_gmodel *m = handle;
  if (!m || !node || !feed || (feed->n && !feed->e))
    return FL_ERR(FL_EINVAL, "graph: set_sparse_feed: NULL model, node name or entries");
  for (int i = 0; i < m->g->nn; i++) {
    fl_gnode *n = &m->g->nodes[i];
    if (strcmp(n->name, node)) continue;
    if (!n->op->sparse_feed)
      return FL_ERR(FL_EINVAL, "graph %s: node %s (%s) reads no sparse feed", m->g->name, node,
                    n->op->type);
    n->feed = *feed;
    n->fed = 1;
    return FL_OK;
  }
  return FL_ERR(FL_EINVAL, "graph %s: set_sparse_feed: no node called %s", m->g->name, node);
}

void fl_graph_model_set_step(void *handle, uint64_t step) {
  if (handle) ((fl_gmodel *)handle)->step = step;
}

fl_status fl_graph_model_set_norm_sync(void *handle, fl_norm_sync_fn fn, void *ctx) {
  fl_gmodel *m = handle;
  if (!m) return FL_ERR(FL_EINVAL, "graph: NULL model");
  m->norm_sync = fn;
  m->norm_sync_ctx = fn ? ctx : NULL;
  return FL_OK;
}

const fl_graph *fl_graph_model_graph(void *handle) {
  fl_gmodel *m = handle;
  return m ? m->g : NULL; /* between steps every PARAM/BUFFER/CONST points at host memory */
}

const float *fl_graph_value(const fl_graph *g, const char *name, size_t *n) {
  const int t = fl_graph_find(g, name);
  if (t < 0 || (g->t[t].kind != FL_GT_PARAM && g->t[t].kind != FL_GT_BUFFER)) return NULL;
  if (n) *n = g->t[t].n;
  return g->t[t].data;
}

const fl_model_ops fl_graph_model_ops = {
    .abi_version = FL_MODEL_PLUGIN_ABI, .create = NULL, .destroy = gm_destroy,
    .num_params = gm_num_params, .param = gm_param, .input_size = gm_input_size,
    .train_step = gm_train_step, .eval = gm_eval, .activation_bytes = gm_activation_bytes,
    .train_feed = gm_train_feed, .eval_feed = gm_eval_feed};
