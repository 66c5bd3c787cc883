/* ops_linalg.c - Gemm and MatMul of the graph engine, on cblas_sgemm.
 *
 * Gemm computes Y = act(alpha * op(A) op(B) + beta * C) as one GEMM, then
 * one pass that adds beta*C and applies the fused activation (internal
 * attribute FL_GRAPH_ACT_ATTR, see docs/DESIGN.md section 9): with transB=1, alpha=1,
 * beta=1 and a bias C[N] (PyTorch's Linear) these are the operations, in
 * the order, of fl_linear_forward and fl_linear_backward, so a Linear
 * gives that kernel's bits (test_graph_ops checks it).  Backward accumulates into input
 * grads through the GEMM's beta, so it needs no scratch.
 *
 * MatMul is numpy's matmul: 1-D operands promoted, batch dims broadcast; a
 * 2-D right operand (a Linear exported as MatMul) takes one GEMM over all
 * the left operand's rows.  A broadcast operand's gradient is summed over
 * the batch in batch order. */
#include <config.h>

#include <cblas.h>
#include <string.h>

#include "ops_internal.h"

static int ld(int64_t cols) { return cols > 0 ? (int)cols : 1; }

/* dims beyond int (cblas takes ints) are refused at infer. */
static fl_status blas_dims(const fl_gnode *n, int64_t a, int64_t b, int64_t c) {
  if (a > INT32_MAX || b > INT32_MAX || c > INT32_MAX)
    return fl_gop_fail(n, FL_EINVAL, "matrix dims %lld x %lld x %lld exceed the BLAS limit",
                       (long long)a, (long long)b, (long long)c);
  return FL_OK;
}

/* ---------------------------------------------------------------- Gemm */

typedef struct gemm_p {
  float alpha, beta;
  int ta, tb;
  fl_act act;
  int64_t M, N, K;
} gemm_p;

static fl_status gemm_params(const fl_gnode *n, const fl_gctx *c, gemm_p *p) {
  int64_t ta, tb;
  FL_TRY(fl_ga_float(n, "alpha", 1.0f, &p->alpha));
  FL_TRY(fl_ga_float(n, "beta", 1.0f, &p->beta));
  FL_TRY(fl_ga_int(n, "transA", 0, &ta));
  FL_TRY(fl_ga_int(n, "transB", 0, &tb));
  FL_TRY(fl_ga_act(n, &p->act));
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
    return fl_gop_fail(n, FL_EINVAL, "transA %lld / transB %lld must be 0 or 1", (long long)ta,
                       (long long)tb);
  p->ta = (int)ta;
  p->tb = (int)tb;
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  p->M = a->shape[p->ta ? 1 : 0];
  p->K = a->shape[p->ta ? 0 : 1];
  p->N = b->shape[p->tb ? 0 : 1];
  return FL_OK;
}

static fl_status gemm_gpu_layout(const fl_gnode *n, const fl_gctx *c, const gemm_p *p);

static fl_status gemm_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  FL_TRY(fl_gneed(n, c, 1, FL_G_F32));
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *ct = fl_gin(n, c, 2);
  char sa[160], sb[160];
  if (a->ndim != 2 || b->ndim != 2)
    return fl_gop_fail(n, FL_EINVAL, "A %s and B %s must be 2-D",
                       fl_gshape_str(a->ndim, a->shape, sa, sizeof sa),
                       fl_gshape_str(b->ndim, b->shape, sb, sizeof sb));
  gemm_p p;
  FL_TRY(gemm_params(n, c, &p));
  const int64_t kb = b->shape[p.tb ? 1 : 0];
  if (kb != p.K)
    return fl_gop_fail(n, FL_EINVAL, "A %s (transA=%d) and B %s (transB=%d) do not multiply",
                       fl_gshape_str(a->ndim, a->shape, sa, sizeof sa), p.ta,
                       fl_gshape_str(b->ndim, b->shape, sb, sizeof sb), p.tb);
  FL_TRY(blas_dims(n, p.M, p.N, p.K));
  const int64_t yshape[2] = {p.M, p.N};
  if (ct) {
    FL_TRY(fl_gneed(n, c, 2, FL_G_F32));
    int nd;
    int64_t bs[FL_G_MAX_DIMS];
    if (ct->ndim > 2 || fl_gbroadcast_shape(2, yshape, ct->ndim, ct->shape, &nd, bs) != FL_OK ||
        bs[0] != p.M || bs[1] != p.N)
      return fl_gop_fail(n, FL_EINVAL, "C %s does not broadcast to [%lld,%lld]",
                         fl_gshape_str(ct->ndim, ct->shape, sa, sizeof sa), (long long)p.M,
                         (long long)p.N);
  }
  fl_gset_out(n, c, 0, FL_G_F32, 2, yshape);
  if (c->stream) FL_TRY(gemm_gpu_layout(n, c, &p)); /* a gpu bind: refuse what it lacks */
  /* A gpu graph: scratch for gradients that accumulate (the device kernel
   * overwrites its outputs). */
  *ws = c->stream ? (size_t)(p.M * p.K + p.N * p.K + p.N) : 0;
  *saved = 0;
  return FL_OK;
}

static void gemm_bc(const fl_gtensor *y, const fl_gtensor *ct, fl_gbc *bc) {
  const int ranks[1] = {ct->ndim};
  const int64_t *shapes[1] = {ct->shape};
  fl_gbc_init(bc, 2, y->shape, 1, ranks, shapes);
}

static fl_status gemm_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *ct = fl_gin(n, c, 2);
  fl_gtensor *y = fl_gout(n, c, 0);
  gemm_p p;
  FL_TRY(gemm_params(n, c, &p));
  const size_t M = (size_t)p.M, N = (size_t)p.N;
  if (M == 0 || N == 0) return FL_OK;
  if (p.K > 0)
    cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans,
                p.tb ? CblasTrans : CblasNoTrans, (int)p.M, (int)p.N, (int)p.K, p.alpha,
                a->data, ld(a->shape[1]), b->data, ld(b->shape[1]), 0.0f, y->data, (int)N);
  else
    memset(y->data, 0, M * N * sizeof *y->data);
  if (ct && p.beta != 0.0f) {
    fl_gbc bc;
    gemm_bc(y, ct, &bc);
    const size_t inner = fl_gbc_inner(&bc), rows = inner ? bc.n / inner : 0;
    const size_t sc = bc.nd ? (size_t)bc.st[1][bc.nd - 1] : 0;
    for (size_t r = 0; r < rows; r++) {
      size_t off[4];
      fl_gbc_row(&bc, r, off);
      float *py = y->data + off[0];
      const float *pc = ct->data + off[1];
      if (p.beta == 1.0f)
        for (size_t i = 0; i < inner; i++) py[i] += pc[i * sc];
      else
        for (size_t i = 0; i < inner; i++) py[i] += p.beta * pc[i * sc];
    }
  }
  if (p.act != FL_ACT_NONE) return fl_act_forward(p.act, y->data, y->data, M * N);
  return FL_OK;
}

static fl_status gemm_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *ct = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  gemm_p p;
  FL_TRY(gemm_params(n, c, &p));
  const int M = (int)p.M, N = (int)p.N, K = (int)p.K;
  float *dz = y->grad;
  if (p.act != FL_ACT_NONE && y->n) FL_TRY(fl_act_backward(p.act, y->data, dz, dz, y->n));
  const int lda = ld(a->shape[1]), ldb = ld(b->shape[1]);
  if (ct && ct->grad) {
    fl_gbc bc;
    gemm_bc(y, ct, &bc);
    fl_gbc_reduce(&bc, 1, dz, p.beta, ct->grad, ct->n, fl_gacc(acc, 2));
  }
  if (a->grad && a->n) {
    const float beta = (float)fl_gacc(acc, 0);
    if (M == 0 || N == 0 || K == 0) {
      if (!beta) memset(a->grad, 0, a->n * sizeof *a->grad);
    } else if (!p.ta) /* dA[M,K] = alpha dz op(B)^T */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, p.tb ? CblasNoTrans : CblasTrans, M, K, N,
                  p.alpha, dz, N, b->data, ldb, beta, a->grad, lda);
    else /* dA[K,M] = alpha op(B) dz^T */
      cblas_sgemm(CblasRowMajor, p.tb ? CblasTrans : CblasNoTrans, CblasTrans, K, M, N,
                  p.alpha, b->data, ldb, dz, N, beta, a->grad, lda);
  }
  if (b->grad && b->n) {
    const float beta = (float)fl_gacc(acc, 1);
    if (M == 0 || N == 0 || K == 0) {
      if (!beta) memset(b->grad, 0, b->n * sizeof *b->grad);
    } else if (!p.tb) /* dB[K,N] = alpha op(A)^T dz */
      cblas_sgemm(CblasRowMajor, p.ta ? CblasNoTrans : CblasTrans, CblasNoTrans, K, N, M,
                  p.alpha, a->data, lda, dz, N, beta, b->grad, ldb);
    else /* dB[N,K] = alpha dz^T op(A) */
      cblas_sgemm(CblasRowMajor, CblasTrans, p.ta ? CblasTrans : CblasNoTrans, N, K, M,
                  p.alpha, dz, N, a->data, lda, beta, b->grad, ldb);
  }
  return FL_OK;
}

/* Gemm on the gpu: PyTorch Linear's layout, through fl_linear_*_cuda. */
static fl_status gemm_gpu_layout(const fl_gnode *n, const fl_gctx *c, const gemm_p *p) {
  const fl_gtensor *ct = fl_gin(n, c, 2);
  const int bias_ok = !ct || (p->beta == 1.0f && ct->n == (size_t)p->N &&
                              (ct->ndim == 1 || (ct->ndim == 2 && ct->shape[0] == 1)));
  if (!p->ta && p->tb && p->alpha == 1.0f && bias_ok && p->M > 0 && p->N > 0 && p->K > 0)
    return FL_OK;
  return fl_gop_fail(n, FL_ENOTSUP,
                     "on the gpu Gemm takes only transA=0, transB=1, alpha=1, non-empty "
                     "matrices and C absent or a [N] bias with beta=1");
}

static fl_status gemm_forward_cuda(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *ct = fl_gin(n, c, 2);
  fl_gtensor *y = fl_gout(n, c, 0);
  gemm_p p;
  FL_TRY(gemm_params(n, c, &p));
  FL_TRY(gemm_gpu_layout(n, c, &p));
  return fl_gkernel(n,
                    fl_linear_forward_cuda(a->data, b->data, ct ? ct->data : NULL, y->data,
                                           (size_t)p.M, (size_t)p.K, (size_t)p.N, p.act,
                                           n->math, c->stream),
                    "linear");
}

static fl_status gemm_backward_cuda(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *ct = fl_gin(n, c, 2);
  const fl_gtensor *y = fl_gout(n, c, 0);
  gemm_p p;
  FL_TRY(gemm_params(n, c, &p));
  FL_TRY(gemm_gpu_layout(n, c, &p));
  const size_t M = (size_t)p.M, N = (size_t)p.N, K = (size_t)p.K;
  float *da = a->grad, *db = b->grad, *dc = ct ? ct->grad : NULL;
  const int aa = fl_gacc(acc, 0), ab = fl_gacc(acc, 1), ac = fl_gacc(acc, 2);
  if ((da && aa) || (db && ab) || (dc && ac)) FL_TRY(fl_gcu_need_ws(n, M * K + N * K + N));
  /* Gradients that accumulate land in scratch first. */
  float *ka = da && aa ? n->ws : da, *kb = db && ab ? n->ws + M * K : db;
  float *kc = dc && ac ? n->ws + M * K + N * K : dc;
  FL_TRY(fl_gkernel(n,
                    fl_linear_backward_cuda(a->data, b->data, y->data, y->grad, ka, kb, kc, M,
                                            K, N, p.act, n->math, c->stream),
                    "linear backward"));
  if (da && aa) FL_TRY(fl_gcu_put(n, c, da, ka, M * K, 1));
  if (db && ab) FL_TRY(fl_gcu_put(n, c, db, kb, N * K, 1));
  if (dc && ac) FL_TRY(fl_gcu_put(n, c, dc, kc, N, 1));
  return FL_OK;
}

/* -------------------------------------------------------------- MatMul */

/* Operand shapes promoted to >= 2-D and the batch geometry. */
typedef struct mm_geo {
  int64_t M, N, K;
  int bnd;                         /* output batch rank */
  int64_t bshape[FL_G_MAX_DIMS];   /* output batch dims */
  int and_, bnd_b;                 /* batch ranks of A and B */
  int64_t abatch[FL_G_MAX_DIMS], bbatch[FL_G_MAX_DIMS];
} mm_geo;

static fl_status mm_geometry(const fl_gnode *n, const fl_gtensor *a, const fl_gtensor *b,
                             mm_geo *g) {
  char sa[160], sb[160];
  if (a->ndim < 1 || b->ndim < 1)
    return fl_gop_fail(n, FL_EINVAL, "operands must have rank >= 1 (got %d and %d)", a->ndim,
                       b->ndim);
  g->M = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
  g->K = a->shape[a->ndim - 1];
  const int64_t kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
  g->N = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
  g->and_ = a->ndim > 2 ? a->ndim - 2 : 0;
  g->bnd_b = b->ndim > 2 ? b->ndim - 2 : 0;
  if (g->and_) memcpy(g->abatch, a->shape, (size_t)g->and_ * sizeof *a->shape);
  if (g->bnd_b) memcpy(g->bbatch, b->shape, (size_t)g->bnd_b * sizeof *b->shape);
  if (kb != g->K ||
      fl_gbroadcast_shape(g->and_, g->abatch, g->bnd_b, g->bbatch, &g->bnd, g->bshape) != FL_OK)
    return fl_gop_fail(n, FL_EINVAL, "%s and %s do not multiply",
                       fl_gshape_str(a->ndim, a->shape, sa, sizeof sa),
                       fl_gshape_str(b->ndim, b->shape, sb, sizeof sb));
  return blas_dims(n, g->M, g->N, g->K);
}

static fl_status matmul_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  FL_TRY(fl_gneed(n, c, 1, FL_G_F32));
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  mm_geo g;
  FL_TRY(mm_geometry(n, a, b, &g));
  int64_t ys[FL_G_MAX_DIMS];
  int r = g.bnd;
  if (r + 2 > FL_G_MAX_DIMS) return fl_gop_fail(n, FL_EINVAL, "rank too large");
  memcpy(ys, g.bshape, (size_t)r * sizeof *ys);
  if (a->ndim > 1) ys[r++] = g.M;
  if (b->ndim > 1) ys[r++] = g.N;
  fl_gset_out(n, c, 0, FL_G_F32, r, ys);
  *ws = 0;
  *saved = 0;
  return FL_OK;
}

/* For each output batch entry in order, the matrix offsets into A, B, Y. */
typedef struct mm_iter {
  fl_gbc bc;
  size_t inner, rows, sa, sb;
  size_t as, bs, ys; /* matrix sizes */
} mm_iter;

static void mm_iter_init(mm_iter *it, const mm_geo *g) {
  const int ranks[2] = {g->and_, g->bnd_b};
  const int64_t *shapes[2] = {g->abatch, g->bbatch};
  fl_gbc_init(&it->bc, g->bnd, g->bshape, 2, ranks, shapes);
  it->inner = fl_gbc_inner(&it->bc);
  it->rows = it->inner ? it->bc.n / it->inner : 0;
  it->sa = it->bc.nd ? (size_t)it->bc.st[1][it->bc.nd - 1] : 0;
  it->sb = it->bc.nd ? (size_t)it->bc.st[2][it->bc.nd - 1] : 0;
  it->as = (size_t)(g->M * g->K);
  it->bs = (size_t)(g->K * g->N);
  it->ys = (size_t)(g->M * g->N);
}

/* Batch entry e (row r, element i): matrix offsets. */
static void mm_at(const mm_iter *it, size_t r, size_t i, size_t *oa, size_t *ob, size_t *oy) {
  size_t off[4];
  fl_gbc_row(&it->bc, r, off);
  *oa = (off[1] + i * it->sa) * it->as;
  *ob = (off[2] + i * it->sb) * it->bs;
  *oy = (off[0] + i) * it->ys;
}

static fl_status matmul_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  mm_geo g;
  FL_TRY(mm_geometry(n, a, b, &g));
  if (y->n == 0) return FL_OK;
  if (g.K == 0) {
    memset(y->data, 0, y->n * sizeof *y->data);
    return FL_OK;
  }
  const int M = (int)g.M, N = (int)g.N, K = (int)g.K;
  if (g.bnd_b == 0) { /* B is one matrix: all of A's rows in one GEMM */
    const size_t rows = a->n / (size_t)K;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, N, K, 1.0f, a->data, K,
                b->data, N, 0.0f, y->data, N);
    return FL_OK;
  }
  mm_iter it;
  mm_iter_init(&it, &g);
  for (size_t r = 0; r < it.rows; r++)
    for (size_t i = 0; i < it.inner; i++) {
      size_t oa, ob, oy;
      mm_at(&it, r, i, &oa, &ob, &oy);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a->data + oa, K,
                  b->data + ob, N, 0.0f, y->data + oy, N);
    }
  return FL_OK;
}

static fl_status matmul_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *y = fl_gout(n, c, 0);
  mm_geo g;
  FL_TRY(mm_geometry(n, a, b, &g));
  float *da = a->grad, *db = b->grad;
  /* Zero what is overwritten, then every GEMM accumulates (beta 1), so a
   * broadcast operand's gradient sums over the batch in batch order. */
  if (da && !fl_gacc(acc, 0)) memset(da, 0, a->n * sizeof *da);
  if (db && !fl_gacc(acc, 1)) memset(db, 0, b->n * sizeof *db);
  if (y->n == 0 || g.K == 0) return FL_OK;
  const int M = (int)g.M, N = (int)g.N, K = (int)g.K;
  const float *dy = y->grad;
  if (g.bnd_b == 0) {
    const int rows = (int)(a->n / (size_t)K);
    if (da) /* dA[rows,K] += dY . B^T */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, K, N, 1.0f, dy, N, b->data, N,
                  1.0f, da, K);
    if (db) /* dB[K,N] += A^T . dY */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, rows, 1.0f, a->data, K, dy, N,
                  1.0f, db, N);
    return FL_OK;
  }
  mm_iter it;
  mm_iter_init(&it, &g);
  for (size_t r = 0; r < it.rows; r++)
    for (size_t i = 0; i < it.inner; i++) {
      size_t oa, ob, oy;
      mm_at(&it, r, i, &oa, &ob, &oy);
      if (da)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, K, N, 1.0f, dy + oy, N,
                    b->data + ob, N, 1.0f, da + oa, K);
      if (db)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, M, 1.0f, a->data + oa, K,
                    dy + oy, N, 1.0f, db + ob, N);
    }
  return FL_OK;
}

/* --------------------------------------------------------------- table */

static const char *const gemm_attrs[] = {"alpha", "beta", "transA", "transB", FL_GRAPH_ACT_ATTR,
                                         NULL};
static const char *const no_attrs[] = {NULL};

const fl_gop fl_gops_linalg[] = {
    {.type = "Gemm", .paddle = "fc", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = gemm_attrs, .infer = gemm_infer, .forward = gemm_forward,
     .backward = gemm_backward, .save_in = 3, .save_out = 1,
     .forward_cuda = gemm_forward_cuda, .backward_cuda = gemm_backward_cuda,
     .traits = FL_GOP_FUSES_ACT | FL_GOP_AMP16 | FL_GOP_MATMUL},
    {.type = "MatMul", .paddle = "matmul_v2", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = matmul_infer, .forward = matmul_forward,
     .backward = matmul_backward, .save_in = 3, .traits = FL_GOP_MATMUL},
};
const size_t fl_gops_linalg_n = sizeof fl_gops_linalg / sizeof fl_gops_linalg[0];
