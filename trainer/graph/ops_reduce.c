/* ops_reduce.c - ReduceMean and ReduceSum of the graph engine.
 *
 * The reduced axes come from the "axes" attribute (ReduceMean up to opset
 * 17) or the second input (ReduceSum from opset 13, ReduceMean from 18),
 * which must then be known when shapes are bound.  The sum runs over the
 * input in memory order into the kept-dims result (deterministic); backward
 * spreads the output gradient back over the reduced positions. */
#include <config.h>

#include <math.h>
#include <string.h>

#include "ops_internal.h"

typedef struct red_p {
  int keep[FL_G_MAX_DIMS];    /* 1 = the axis is reduced */
  int keepdims;
  int64_t kshape[FL_G_MAX_DIMS]; /* the result with reduced dims as 1 */
  size_t count;               /* values summed into each output */
  int mean;
} red_p;

static fl_status red_params(const fl_gnode *n, const fl_gctx *c, red_p *p) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t kd, noop, av[FL_G_MAX_DIMS];
  int na;
  FL_TRY(fl_ga_int(n, "keepdims", 1, &kd));
  FL_TRY(fl_ga_int(n, "noop_with_empty_axes", 0, &noop));
  FL_TRY(fl_ga_ints(n, "axes", av, FL_G_MAX_DIMS, &na));
  p->mean = strcmp(n->op->type, "ReduceMean") == 0;
  p->keepdims = kd != 0;
  if (fl_gin(n, c, 1)) {
    if (na >= 0)
      return fl_gop_fail(n, FL_EINVAL, "axes given both as an attribute and as an input");
    const int64_t *v;
    size_t cnt;
    FL_TRY(fl_gknown_i64(n, c, 1, "axes", &v, &cnt));
    if (cnt > FL_G_MAX_DIMS) return fl_gop_fail(n, FL_EINVAL, "too many axes (%zu)", cnt);
    if (cnt) memcpy(av, v, cnt * sizeof *av);
    na = (int)cnt;
  }
  for (int d = 0; d < x->ndim; d++) p->keep[d] = 0;
  if (na <= 0) {
    /* No axes: all of them, or none with noop_with_empty_axes. */
    for (int d = 0; d < x->ndim; d++) p->keep[d] = !noop;
  } else {
    for (int i = 0; i < na; i++) {
      int a;
      FL_TRY(fl_gaxis(n, av[i], x->ndim, "axis", &a));
      if (p->keep[a]) return fl_gop_fail(n, FL_EINVAL, "axis %d is given twice", a);
      p->keep[a] = 1;
    }
  }
  p->count = 1;
  for (int d = 0; d < x->ndim; d++) {
    p->kshape[d] = p->keep[d] ? 1 : x->shape[d];
    if (p->keep[d]) p->count *= (size_t)x->shape[d];
  }
  return FL_OK;
}

static fl_status red_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  red_p p;
  FL_TRY(red_params(n, c, &p));
  const fl_gtensor *x = fl_gin(n, c, 0);
  int64_t ys[FL_G_MAX_DIMS];
  int nd = 0;
  for (int d = 0; d < x->ndim; d++)
    if (p.keepdims || !p.keep[d]) ys[nd++] = p.kshape[d];
  fl_gset_out(n, c, 0, FL_G_F32, nd, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

static void red_bc(const fl_gtensor *x, const red_p *p, fl_gbc *bc) {
  const int ranks[1] = {x->ndim};
  const int64_t *shapes[1] = {p->kshape};
  fl_gbc_init(bc, x->ndim, x->shape, 1, ranks, shapes);
}

static fl_status red_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  red_p p;
  FL_TRY(red_params(n, c, &p));
  fl_gbc bc;
  red_bc(x, &p, &bc);
  fl_gbc_reduce(&bc, 1, x->data, 1.0f, y->data, y->n, 0);
  if (p.mean) {
    if (p.count == 0) {
      for (size_t i = 0; i < y->n; i++) y->data[i] = NAN;
    } else {
      const float inv = 1.0f / (float)p.count;
      for (size_t i = 0; i < y->n; i++) y->data[i] *= inv;
    }
  }
  return FL_OK;
}

static fl_status red_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *x = fl_gin(n, c, 0), *y = fl_gout(n, c, 0);
  if (!x->grad) return FL_OK;
  red_p p;
  FL_TRY(red_params(n, c, &p));
  fl_gbc bc;
  red_bc(x, &p, &bc);
  const float scale = p.mean && p.count ? 1.0f / (float)p.count : 1.0f;
  const int ax = fl_gacc(acc, 0);
  const size_t inner = fl_gbc_inner(&bc), rows = inner ? bc.n / inner : 0;
  const size_t s1 = bc.nd ? (size_t)bc.st[1][bc.nd - 1] : 0;
  for (size_t r = 0; r < rows; r++) {
    size_t off[4];
    fl_gbc_row(&bc, r, off);
    float *dr = x->grad + off[0];
    const float *gr = y->grad + off[1];
    for (size_t i = 0; i < inner; i++) {
      const float v = gr[i * s1] * scale;
      dr[i] = ax ? dr[i] + v : v;
    }
  }
  return FL_OK;
}

static const char *const mean_attrs[] = {"axes", "keepdims", "noop_with_empty_axes", NULL};
static const char *const sum_attrs[] = {"keepdims", "noop_with_empty_axes", NULL};

const fl_gop fl_gops_reduce[] = {
    {.type = "ReduceMean", .paddle = "reduce_mean", .min_in = 1, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = mean_attrs, .infer = red_infer, .forward = red_forward,
     .backward = red_backward, .nodiff_in = 2},
    {.type = "ReduceSum", .paddle = "reduce_sum", .min_in = 1, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = sum_attrs, .infer = red_infer, .forward = red_forward,
     .backward = red_backward, .nodiff_in = 2},
};
const size_t fl_gops_reduce_n = sizeof fl_gops_reduce / sizeof fl_gops_reduce[0];
