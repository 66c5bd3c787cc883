/* ops_matrix.c - ops over the last two axes of a tensor taken as a stack
 * of matrices: Trilu (the triangle of each matrix, the rest zeroed).
 *
 * Why here: torch.triu / torch.tril export as Trilu (opset 14 on), and a
 * causal attention mask (`torch.triu(ones(L, L, dtype=bool), 1)`) is one:
 * on an int64 (bool) input whose value is known at bind the engine
 * computes the mask once; on floats it runs per step with a gradient (the
 * kept positions pass theirs, the zeroed ones none). */
#include <config.h>

#include <string.h>

#include "ops_internal.h"

/* ------------------------------------------------------------- Trilu */

/* The diagonal offset k (input 1, an int64 scalar known at bind, or 0) and
 * the attribute upper (1: keep j - i >= k; 0: keep j - i <= k). */
static fl_status trilu_params(const fl_gnode *n, const fl_gctx *c, int64_t *k, int *upper) {
  int64_t u;
  FL_TRY(fl_ga_int(n, "upper", 1, &u));
  if (u != 0 && u != 1) return fl_gop_fail(n, FL_EINVAL, "attribute upper is %lld, not 0 or 1",
                                           (long long)u);
  *upper = (int)u;
  *k = 0;
  if (fl_gin(n, c, 1)) {
    const int64_t *v;
    size_t cnt;
    FL_TRY(fl_gknown_i64(n, c, 1, "the diagonal offset k", &v, &cnt));
    if (cnt != 1) return fl_gop_fail(n, FL_EINVAL, "k has %zu values, not one", cnt);
    *k = v[0];
  }
  return FL_OK;
}

/* Whether element (i, j) of a matrix is kept. */
static int trilu_keep(int64_t i, int64_t j, int64_t k, int upper) {
  return upper ? j - i >= k : j - i <= k;
}

static fl_status trilu_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  if (!x) return fl_gop_fail(n, FL_EINVAL, "input 0 is required");
  if (x->ndim < 2)
    return fl_gop_fail(n, FL_EINVAL, "input has rank %d; Trilu takes matrices (rank >= 2)",
                       x->ndim);
  int64_t k;
  int upper;
  FL_TRY(trilu_params(n, c, &k, &upper));
  fl_gset_out(n, c, 0, x->dtype, x->ndim, x->shape);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* Walk every element of a [.., R, C] tensor: body runs with e (the flat
 * index) and keep (whether Trilu keeps it). */
#define TRILU_WALK(x, k, upper, body)                                           \
  do {                                                                          \
    const int64_t R_ = (x)->shape[(x)->ndim - 2], C_ = (x)->shape[(x)->ndim - 1]; \
    const size_t mats_ = R_ > 0 && C_ > 0 ? (x)->n / (size_t)(R_ * C_) : 0;     \
    size_t e = 0;                                                               \
    for (size_t m_ = 0; m_ < mats_; m_++)                                       \
      for (int64_t i_ = 0; i_ < R_; i_++)                                       \
        for (int64_t j_ = 0; j_ < C_; j_++, e++) {                              \
          const int keep = trilu_keep(i_, j_, (k), (upper));                    \
          body;                                                                 \
        }                                                                       \
  } while (0)

static fl_status trilu_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  fl_gtensor *y = fl_gout(n, c, 0);
  int64_t k;
  int upper;
  FL_TRY(trilu_params(n, c, &k, &upper));
  if (x->dtype == FL_G_I64)
    TRILU_WALK(x, k, upper, y->idata[e] = keep ? x->idata[e] : 0);
  else
    TRILU_WALK(x, k, upper, y->data[e] = keep ? x->data[e] : 0.0f);
  return FL_OK;
}

static fl_status trilu_backward(fl_gnode *n, fl_gctx *c, unsigned accum) {
  const fl_gtensor *x = fl_gin(n, c, 0);
  const float *dy = fl_gout(n, c, 0)->grad;
  float *dx = fl_gin_grad(n, c, 0);
  if (!dx) return FL_OK;
  int64_t k;
  int upper;
  FL_TRY(trilu_params(n, c, &k, &upper));
  const int acc = fl_gacc(accum, 0);
  TRILU_WALK(x, k, upper, {
    const float g = keep ? dy[e] : 0.0f;
    dx[e] = acc ? dx[e] + g : g;
  });
  return FL_OK;
}

/* --------------------------------------------------------------- table */

static const char *const trilu_attrs[] = {"upper", NULL};

const fl_gop fl_gops_matrix[] = {
    {.type = "Trilu", .paddle = "triu", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = trilu_attrs, .infer = trilu_infer, .forward = trilu_forward,
     .backward = trilu_backward, .nodiff_in = 2, .opset_min = 14,
     .doc = "float or int64/bool matrices (rank >= 2), k an int64 scalar known at bind (a "
            "constant); a mask of constants is computed once at bind"},
};
const size_t fl_gops_matrix_n = sizeof fl_gops_matrix / sizeof fl_gops_matrix[0];
