/* ops_registry.c - the op library's index and shared helpers: looking an
 * op up by its ONNX type or its Paddle name (AMP lists are written in
 * either vocabulary), the list of supported types for messages, ONNX
 * multidirectional broadcasting, and the attribute/shape helpers every
 * ops_*.c file uses (ops_internal.h).  Why one place: an op's error
 * messages and attribute checks read the same whatever the family. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fl_device.h"
#include "fl_log.h"
#include "fl_names.h"
#include "fl_optim.h"
#include "ops_internal.h"

/* ------------------------------------------------------------- lookups */

typedef struct family {
  const fl_gop *ops;
  const size_t *n;
} family;

static const family families[] = {
    {fl_gops_elementwise, &fl_gops_elementwise_n},
    {fl_gops_linalg, &fl_gops_linalg_n},
    {fl_gops_conv, &fl_gops_conv_n},
    {fl_gops_norm, &fl_gops_norm_n},
    {fl_gops_reduce, &fl_gops_reduce_n},
    {fl_gops_shape, &fl_gops_shape_n},
    {fl_gops_matrix, &fl_gops_matrix_n},
    {fl_gops_sparse, &fl_gops_sparse_n},
    {fl_gops_embbag, &fl_gops_embbag_n},
    {fl_gops_convt, &fl_gops_convt_n},
    {fl_gops_resize, &fl_gops_resize_n},
    {fl_gops_activation, &fl_gops_activation_n},
    {fl_gops_rnn, &fl_gops_rnn_n},
};
#define N_FAMILIES (sizeof families / sizeof families[0])

const fl_gop *fl_gop_find(const char *type) {
  if (!type) return NULL;
  for (size_t f = 0; f < N_FAMILIES; f++)
    for (size_t i = 0; i < *families[f].n; i++)
      if (strcmp(families[f].ops[i].type, type) == 0) return &families[f].ops[i];
  return NULL;
}

const fl_gop *fl_gop_at(size_t i) {
  for (size_t f = 0; f < N_FAMILIES; f++) {
    if (i < *families[f].n) return &families[f].ops[i];
    i -= *families[f].n;
  }
  return NULL;
}

const fl_gop *fl_gop_find_act(fl_act act) {
  for (size_t f = 0; act != FL_ACT_NONE && f < N_FAMILIES; f++)
    for (size_t i = 0; i < *families[f].n; i++)
      if (families[f].ops[i].act == act) return &families[f].ops[i];
  return NULL;
}

int fl_gop_with_traits(unsigned traits, const fl_gop **out, int max) {
  int k = 0;
  for (size_t f = 0; f < N_FAMILIES; f++)
    for (size_t i = 0; i < *families[f].n && k < max; i++)
      if ((families[f].ops[i].traits & traits) == traits) out[k++] = &families[f].ops[i];
  return k;
}

/* Paddle op names beyond each op's own (fl_gop.paddle): Paddle has several
 * names, or versions, for what one ONNX op does. */
static const struct {
  const char *paddle, *onnx;
} paddle_alias[] = {
    {"matmul", "MatMul"},
    {"mul", "Gemm"},
    {"depthwise_conv2d", "Conv"},
    {"sync_batch_norm", "BatchNormalization"},
    {"flatten2", "Flatten"},
    {"flatten_contiguous_range", "Flatten"},
    {"reshape", "Reshape"},
    {"transpose", "Transpose"},
    {"squeeze", "Squeeze"},
    {"unsqueeze", "Unsqueeze"},
    {"lookup_table", "Gather"},
    {"lookup_table_v2", "Gather"},
    {"assign", "Identity"},
};

const fl_gop *fl_gop_find_paddle(const char *name) {
  if (!name) return NULL;
  for (size_t f = 0; f < N_FAMILIES; f++)
    for (size_t i = 0; i < *families[f].n; i++)
      if (families[f].ops[i].paddle && strcmp(families[f].ops[i].paddle, name) == 0)
        return &families[f].ops[i];
  const int a = FL_ROWS_FIND(paddle_alias, name);
  return a < 0 ? NULL : fl_gop_find(paddle_alias[a].onnx);
}

static char supported_list[2048];
static pthread_once_t supported_once = PTHREAD_ONCE_INIT;

static void supported_build(void) {
  size_t len = 0;
  for (size_t f = 0; f < N_FAMILIES; f++)
    for (size_t i = 0; i < *families[f].n; i++) {
      if (families[f].ops[i].domain) continue; /* Flotilla's own: not an ONNX op type */
      const int w = snprintf(supported_list + len, sizeof supported_list - len, "%s%s",
                             len ? ", " : "", families[f].ops[i].type);
      if (w < 0 || (size_t)w >= sizeof supported_list - len) return;
      len += (size_t)w;
    }
}

const char *fl_gop_supported(void) {
  pthread_once(&supported_once, supported_build); /* built once from the tables */
  return supported_list;
}

const fl_gattr *fl_gattr_find(const fl_gnode *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

fl_status fl_gbroadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                              int64_t *out) {
  if (na < 0 || nb < 0 || na > FL_G_MAX_DIMS || nb > FL_G_MAX_DIMS) return FL_EINVAL;
  const int r = na > nb ? na : nb;
  int64_t tmp[FL_G_MAX_DIMS];
  for (int d = 0; d < r; d++) {
    const int ia = d - (r - na), ib = d - (r - nb);
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da == db || db == 1)
      tmp[d] = da;
    else if (da == 1)
      tmp[d] = db;
    else
      return FL_EINVAL;
  }
  memcpy(out, tmp, (size_t)r * sizeof *out);
  *nout = r;
  return FL_OK;
}

/* ------------------------------------------------------------ messages */

fl_status fl_gop_fail(const fl_gnode *n, fl_status code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fl_log(FL_LOG_ERROR, "graph: node %s (%s): %s", n->name ? n->name : "?",
         n->op ? n->op->type : "?", msg);
  return code;
}

const char *fl_gshape_str(int ndim, const int64_t *shape, char *buf, size_t len) {
  size_t at = 0;
  if (len == 0) return buf;
  buf[0] = '\0';
  int w = snprintf(buf, len, "[");
  at = w > 0 ? (size_t)w : 0;
  for (int d = 0; d < ndim && at < len; d++) {
    w = snprintf(buf + at, len - at, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (w < 0) break;
    at += (size_t)w;
  }
  if (at < len) snprintf(buf + at, len - at, "]");
  return buf;
}

/* ---------------------------------------------------------- attributes */

static const char *kind_name(fl_gattr_kind k) {
  switch (k) {
  case FL_GA_INT: return "int";
  case FL_GA_FLOAT: return "float";
  case FL_GA_INTS: return "ints";
  case FL_GA_FLOATS: return "floats";
  case FL_GA_STRING: return "string";
  }
  return "?";
}

static fl_status want_kind(const fl_gnode *n, const fl_gattr *a, fl_gattr_kind k) {
  if (a->kind == k) return FL_OK;
  return fl_gop_fail(n, FL_EINVAL, "attribute %s is a %s, expected a %s", a->name,
                     kind_name(a->kind), kind_name(k));
}

fl_status fl_ga_int(const fl_gnode *n, const char *name, int64_t def, int64_t *out) {
  const fl_gattr *a = fl_gattr_find(n, name);
  if (!a) {
    *out = def;
    return FL_OK;
  }
  FL_TRY(want_kind(n, a, FL_GA_INT));
  *out = a->i;
  return FL_OK;
}

fl_status fl_ga_float(const fl_gnode *n, const char *name, float def, float *out) {
  const fl_gattr *a = fl_gattr_find(n, name);
  if (!a) {
    *out = def;
    return FL_OK;
  }
  FL_TRY(want_kind(n, a, FL_GA_FLOAT));
  *out = a->f;
  return FL_OK;
}

fl_status fl_ga_str(const fl_gnode *n, const char *name, const char *def, const char **out) {
  const fl_gattr *a = fl_gattr_find(n, name);
  if (!a) {
    *out = def;
    return FL_OK;
  }
  FL_TRY(want_kind(n, a, FL_GA_STRING));
  *out = a->s ? a->s : "";
  return FL_OK;
}

fl_status fl_ga_ints(const fl_gnode *n, const char *name, int64_t *out, int max, int *count) {
  const fl_gattr *a = fl_gattr_find(n, name);
  if (!a) {
    *count = -1;
    return FL_OK;
  }
  FL_TRY(want_kind(n, a, FL_GA_INTS));
  if (a->n > (size_t)max)
    return fl_gop_fail(n, FL_EINVAL, "attribute %s has %zu values, at most %d supported", name,
                       a->n, max);
  if (a->n) memcpy(out, a->ints, a->n * sizeof *out);
  *count = (int)a->n;
  return FL_OK;
}

fl_status fl_ga_act(const fl_gnode *n, fl_act *act) {
  const char *s;
  FL_TRY(fl_ga_str(n, FL_GRAPH_ACT_ATTR, "", &s));
  if (fl_act_parse(s, act) != FL_OK)
    return fl_gop_fail(n, FL_EINVAL, FL_GRAPH_ACT_ATTR " \"%s\" is not supported (relu, tanh)", s);
  return FL_OK;
}

/* -------------------------------------------------------------- shapes */

size_t fl_gnumel(int ndim, const int64_t *shape) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
  return n;
}

static const char *dtype_name(fl_gdtype dt) {
  return dt == FL_G_F32 ? "float" : dt == FL_G_I64 ? "int64" : "?";
}

fl_status fl_gneed(const fl_gnode *n, const fl_gctx *c, int i, fl_gdtype dt) {
  const fl_gtensor *t = fl_gin(n, c, i);
  if (!t) return fl_gop_fail(n, FL_EINVAL, "input %d is required", i);
  if (t->dtype != dt)
    return fl_gop_fail(n, FL_EINVAL, "input %d (%s) is %s, expected %s", i, t->name,
                       dtype_name(t->dtype), dtype_name(dt));
  return FL_OK;
}

void fl_gset_out(const fl_gnode *n, fl_gctx *c, int i, fl_gdtype dt, int ndim,
                 const int64_t *shape) {
  fl_gtensor *t = fl_gout(n, c, i);
  if (!t) return;
  t->dtype = dt;
  t->ndim = ndim;
  if (ndim) memmove(t->shape, shape, (size_t)ndim * sizeof *shape);
  t->n = fl_gnumel(ndim, t->shape);
}

fl_status fl_gknown_i64(const fl_gnode *n, const fl_gctx *c, int i, const char *what,
                        const int64_t **v, size_t *count) {
  const fl_gtensor *t = fl_gin(n, c, i);
  if (!t) return fl_gop_fail(n, FL_EINVAL, "input %d (%s) is required", i, what);
  if (t->dtype != FL_G_I64)
    return fl_gop_fail(n, FL_EINVAL, "input %d (%s, %s) must be int64", i, what, t->name);
  if (!t->known || (!t->idata && t->n))
    return fl_gop_fail(n, FL_EINVAL,
                       "input %d (%s, %s) must be computable when shapes are bound (a "
                       "constant or a shape expression), not data-dependent",
                       i, what, t->name);
  if (t->ndim > 1)
    return fl_gop_fail(n, FL_EINVAL, "input %d (%s, %s) must be a scalar or 1-D", i, what,
                       t->name);
  *v = t->idata;
  *count = t->n;
  return FL_OK;
}

fl_status fl_gaxis(const fl_gnode *n, int64_t a, int r, const char *what, int *out) {
  if (a < -(int64_t)r || a >= (int64_t)r)
    return fl_gop_fail(n, FL_EINVAL, "%s %lld is out of range for rank %d", what,
                       (long long)a, r);
  *out = (int)(a < 0 ? a + r : a);
  return FL_OK;
}

void fl_gput(float *dst, const float *src, size_t n, int accum) {
  if (accum)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
  else if (dst != src)
    memcpy(dst, src, n * sizeof *dst);
}

/* ---------------------------------------------------------- broadcasting */

void fl_gbc_init(fl_gbc *b, int ndim, const int64_t *shape, int nops, const int *ranks,
                 const int64_t *const *shapes) {
  int64_t full[4][FL_G_MAX_DIMS];
  const int no = nops + 1;
  /* Contiguous strides of every operand, aligned to the output's dims. */
  for (int k = 0; k < no; k++) {
    const int r = k ? ranks[k - 1] : ndim;
    const int64_t *s = k ? shapes[k - 1] : shape;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
      const int id = d - (ndim - r);
      const int64_t dim = id >= 0 ? s[id] : 1;
      full[k][d] = (dim == 1) ? 0 : stride;
      stride *= dim;
    }
  }
  b->nops = nops;
  b->n = fl_gnumel(ndim, shape);
  b->nd = 0;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] == 1) continue;
    if (b->nd > 0) {
      /* Merge into the previous kept dim when every operand chains. */
      const int p = b->nd - 1;
      int chain = 1;
      for (int k = 0; k < no && chain; k++)
        chain = full[k][d] * shape[d] == b->st[k][p] || (full[k][d] == 0 && b->st[k][p] == 0);
      if (chain) {
        b->shape[p] *= shape[d];
        for (int k = 0; k < no; k++) b->st[k][p] = full[k][d];
        continue;
      }
    }
    b->shape[b->nd] = shape[d];
    for (int k = 0; k < no; k++) b->st[k][b->nd] = full[k][d];
    b->nd++;
  }
}

void fl_gbc_row(const fl_gbc *b, size_t r, size_t *off) {
  for (int k = 0; k <= b->nops; k++) off[k] = 0;
  for (int d = b->nd - 2; d >= 0; d--) {
    const size_t i = r % (size_t)b->shape[d];
    r /= (size_t)b->shape[d];
    for (int k = 0; k <= b->nops; k++) off[k] += i * (size_t)b->st[k][d];
  }
}

void fl_gbc_reduce(const fl_gbc *b, int k, const float *g, float scale, float *dst, size_t dst_n,
                   int accum) {
  if (!accum) memset(dst, 0, dst_n * sizeof *dst);
  const size_t inner = fl_gbc_inner(b), rows = inner ? b->n / inner : 0;
  const size_t sk = b->nd ? (size_t)b->st[k][b->nd - 1] : 0;
  size_t off[4];
  for (size_t r = 0; r < rows; r++) {
    fl_gbc_row(b, r, off);
    const float *gr = g + off[0];
    float *dr = dst + off[k];
    if (scale == 1.0f) {
      if (sk == 0)
        for (size_t i = 0; i < inner; i++) dr[0] += gr[i];
      else
        for (size_t i = 0; i < inner; i++) dr[i * sk] += gr[i];
    } else {
      if (sk == 0)
        for (size_t i = 0; i < inner; i++) dr[0] += scale * gr[i];
      else
        for (size_t i = 0; i < inner; i++) dr[i * sk] += scale * gr[i];
    }
  }
}

/* ------------------------------------------------------------- kernels */

fl_status fl_gkernel(const fl_gnode *n, fl_status st, const char *what) {
  if (st == FL_OK || st == FL_ECUDA || st == FL_ENOMEM) return st;
  return fl_gop_fail(n, st, "%s kernel failed: %s", what, fl_strerror(st));
}

fl_status fl_gcu_put(const fl_gnode *n, const fl_gctx *c, float *dst, const float *src,
                     size_t count, int accum) {
  if (count == 0) return FL_OK;
  if (accum) {
    float *const acc[1] = {dst};
    const float *const g[1] = {src};
    const size_t cnt[1] = {count};
    return fl_gkernel(n, fl_gm_accumulate_cuda(acc, g, cnt, 1, c->stream), "accumulate");
  }
  if (dst == src) return FL_OK;
  return fl_gkernel(n, fl_cuda_copy_device_async(dst, src, count * sizeof *dst, c->stream),
                    "device copy");
}

fl_status fl_gcu_copy_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  if (x->dtype != FL_G_F32)
    return fl_gop_fail(n, FL_ENOTSUP, "int64 data on the gpu is not supported");
  return fl_gcu_put(n, c, y->data, x->data, x->n, 0);
}

fl_status fl_gcu_copy_backward(fl_gnode *n, fl_gctx *c, unsigned accum) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  return fl_gcu_put(n, c, x->grad, y->grad, x->n, fl_gacc(accum, 0));
}

fl_status fl_gcu_need_ws(const fl_gnode *n, size_t need) {
  if (n->ws_floats >= need) return FL_OK;
  return fl_gop_fail(n, FL_EINVAL,
                     "device scratch of %zu floats is bound, %zu needed (a gpu graph must be "
                     "bound with its stream set)",
                     n->ws_floats, need);
}
