/* ops_linalg.c - Gemm, MatMul and Einsum of the graph engine, on
 * cblas_sgemm.
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
 * the batch in batch order.
 *
 * Einsum takes the two-operand equations that are a batched matrix
 * product after transposes (attention's "bhqd,bhkd->bhqk", "bij,bjk->bik",
 * "bi,bi->b"...): see its section below. */
#include <config.h>

#include <cblas.h>
#include <stdio.h>
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

/* -------------------------------------------------------------- Einsum */

/* Einsum of two operands that is a batched matrix product.  Each letter
 * of the equation is a batch dim (in both operands and the output),
 * contracted (in both operands, not the output) or free in one operand
 * (and in the output).  In canonical order A is [batch, freeA, contr], B
 * [batch, contr, freeB] and Y [batch, freeA, freeB] (batch, freeA and
 * contr in A's letter order, freeB in B's): one GEMM per batch entry.  A
 * tensor whose memory already is in canonical order, or in it with its
 * two matrix groups swapped (a transposed matrix), is used in place; any
 * other is copied through the node's scratch.  Backward is the same
 * product twice: dA = dY . B^T, dB = A^T . dY. */

#define ES_LETTERS 128

/* The parsed equation: the letters of each operand and of the output. */
typedef struct es_eq {
  const char *text;
  char in[2][FL_G_MAX_DIMS + 1], out[FL_G_MAX_DIMS + 1];
  int nin[2], nout;
} es_eq;

/* Append letter ch to s (of *len), refusing more than the rank limit and
 * a letter given twice (a diagonal or a repeated output). */
static fl_status es_push(const fl_gnode *n, const es_eq *e, char *s, int *len, char ch) {
  if (memchr(s, ch, (size_t)*len))
    return fl_gop_fail(n, FL_ENOTSUP,
                       "equation \"%s\": letter %c is repeated in one term (diagonals and "
                       "repeated output letters are not supported)", e->text, ch);
  if (*len >= FL_G_MAX_DIMS)
    return fl_gop_fail(n, FL_EINVAL, "equation \"%s\": a term has more than %d letters",
                       e->text, FL_G_MAX_DIMS);
  s[(*len)++] = ch;
  s[*len] = '\0';
  return FL_OK;
}

/* No "->": the output is every letter seen once, in ASCII order. */
static fl_status es_implicit(const fl_gnode *n, es_eq *e) {
  int seen[ES_LETTERS] = {0};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < e->nin[k]; i++) seen[(unsigned char)e->in[k][i]]++;
  for (int ch = 0; ch < ES_LETTERS; ch++)
    if (seen[ch] == 1) FL_TRY(es_push(n, e, e->out, &e->nout, (char)ch));
  return FL_OK;
}

static fl_status es_parse(const fl_gnode *n, es_eq *e) {
  memset(e, 0, sizeof *e);
  FL_TRY(fl_ga_str(n, "equation", "", &e->text));
  int term = 0, arrow = 0;
  for (const char *s = e->text; *s; s++) {
    if (*s == ' ') continue;
    if (*s == ',' && !arrow && ++term < 2) continue;
    if (*s == '-' && s[1] == '>' && !arrow && term == 1) {
      arrow = 1, s++;
      continue;
    }
    if (*s == '.')
      return fl_gop_fail(n, FL_ENOTSUP, "equation \"%s\": ellipsis '...' is not supported",
                         e->text);
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
      return fl_gop_fail(n, FL_ENOTSUP,
                         "equation \"%s\" is not supported: Einsum takes exactly two "
                         "operands of letters, \"ab,bc->ac\"", e->text);
    if (arrow)
      FL_TRY(es_push(n, e, e->out, &e->nout, *s));
    else
      FL_TRY(es_push(n, e, e->in[term], &e->nin[term], *s));
  }
  if (term != 1 || n->n_in != 2)
    return fl_gop_fail(n, FL_ENOTSUP,
                       "equation \"%s\" with %d inputs: only two-operand equations are "
                       "supported", e->text, n->n_in);
  return arrow ? FL_OK : es_implicit(n, e);
}

/* A or B or Y as a batch of matrices in canonical order. */
typedef struct es_mat {
  int direct;                   /* the tensor's memory is used in place */
  int t;                        /* stored transposed: [batch, cols, rows] */
  int r;                        /* canonical rank */
  int64_t sh[FL_G_MAX_DIMS];    /* canonical shape */
  int64_t st[FL_G_MAX_DIMS];    /* the tensor's stride along each canonical dim */
  int64_t rows, cols;
  size_t n;
} es_mat;

typedef struct es_plan {
  es_eq e;
  int64_t size[ES_LETTERS];     /* each letter's dim, -1 if unused */
  int64_t bt;                   /* batch entries */
  es_mat a, b, y;
} es_plan;

/* m for a tensor with letters tl, canonical letters g0 (batch), g1 (rows),
 * g2 (cols). */
static void es_mat_init(es_mat *m, const es_plan *p, const char *tl, const char *g0,
                        const char *g1, const char *g2) {
  int64_t tst[ES_LETTERS] = {0}, s = 1;
  const int nt = (int)strlen(tl);
  for (int i = nt - 1; i >= 0; i--) {
    tst[(unsigned char)tl[i]] = s;
    s *= p->size[(unsigned char)tl[i]];
  }
  char can[3 * 16], swp[3 * 16];
  snprintf(can, sizeof can, "%s%s%s", g0, g1, g2);
  snprintf(swp, sizeof swp, "%s%s%s", g0, g2, g1);
  m->r = nt;
  m->rows = m->cols = 1;
  for (int i = 0; i < nt; i++) {
    const unsigned char ch = (unsigned char)can[i];
    m->sh[i] = p->size[ch];
    m->st[i] = tst[ch];
    if (strchr(g1, ch)) m->rows *= p->size[ch];
    if (strchr(g2, ch)) m->cols *= p->size[ch];
  }
  m->n = (size_t)(p->bt * m->rows * m->cols);
  m->t = strcmp(tl, can) != 0;
  m->direct = !m->t || strcmp(tl, swp) == 0;
}

/* Each letter's size from the operands (equal where both have it). */
static fl_status es_sizes(const fl_gnode *n, const fl_gctx *c, es_plan *p) {
  for (int ch = 0; ch < ES_LETTERS; ch++) p->size[ch] = -1;
  char sx[160];
  for (int k = 0; k < 2; k++) {
    const fl_gtensor *x = fl_gin(n, c, k);
    if (x->ndim != p->e.nin[k])
      return fl_gop_fail(n, FL_EINVAL, "equation \"%s\": operand %d %s %s has rank %d, not %d",
                         p->e.text, k, x->name, fl_gshape_str(x->ndim, x->shape, sx, sizeof sx),
                         x->ndim, p->e.nin[k]);
    for (int i = 0; i < x->ndim; i++) {
      int64_t *s = &p->size[(unsigned char)p->e.in[k][i]];
      if (*s >= 0 && *s != x->shape[i])
        return fl_gop_fail(n, FL_EINVAL, "equation \"%s\": letter %c is %lld in operand 0 "
                           "and %lld in operand 1", p->e.text, p->e.in[k][i], (long long)*s,
                           (long long)x->shape[i]);
      *s = x->shape[i];
    }
  }
  return FL_OK;
}

/* Sort the letters into batch, freeA, contr, freeB (g[0..3]). */
static fl_status es_groups(const fl_gnode *n, const es_plan *p, char g[4][16]) {
  int len[4] = {0};
  memset(g, 0, 4 * sizeof g[0]);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < p->e.nin[k]; i++) {
      const char ch = p->e.in[k][i];
      const int other = strchr(p->e.in[1 - k], ch) != NULL, out = strchr(p->e.out, ch) != NULL;
      if (!other && !out)
        return fl_gop_fail(n, FL_ENOTSUP, "equation \"%s\": letter %c is only in operand %d "
                           "and not in the output (a plain sum; reduce first)", p->e.text, ch,
                           k);
      if (k == 1 && other) continue; /* batch and contracted letters: A's order */
      const int grp = !other ? (k == 0 ? 1 : 3) : out ? 0 : 2;
      g[grp][len[grp]++] = ch;
    }
  for (int i = 0; i < p->e.nout; i++)
    if (!strchr(p->e.in[0], p->e.out[i]) && !strchr(p->e.in[1], p->e.out[i]))
      return fl_gop_fail(n, FL_EINVAL, "equation \"%s\": output letter %c is in no operand",
                         p->e.text, p->e.out[i]);
  return FL_OK;
}

static fl_status es_plan_of(const fl_gnode *n, const fl_gctx *c, es_plan *p) {
  FL_TRY(es_parse(n, &p->e));
  FL_TRY(es_sizes(n, c, p));
  char g[4][16];
  FL_TRY(es_groups(n, p, g));
  p->bt = 1;
  for (const char *s = g[0]; *s; s++) p->bt *= p->size[(unsigned char)*s];
  es_mat_init(&p->a, p, p->e.in[0], g[0], g[1], g[2]);
  es_mat_init(&p->b, p, p->e.in[1], g[0], g[2], g[3]);
  es_mat_init(&p->y, p, p->e.out, g[0], g[1], g[3]);
  return blas_dims(n, p->a.rows, p->b.cols, p->a.cols);
}

/* A batch of logical [rows, cols] matrices bs floats apart, stored
 * row-major or (t) transposed. */
typedef struct es_view {
  float *p;
  int t;
  int64_t rows, cols;
  size_t bs;
} es_view;

static es_view es_T(es_view v) {
  const int64_t r = v.rows;
  v.rows = v.cols;
  v.cols = r;
  v.t ^= 1;
  return v;
}

/* c = a . b for each batch entry; c (+)= with beta 1. */
static void es_gemm(size_t bt, es_view a, es_view b, es_view c, float beta) {
  if (c.t) { /* C stored transposed: C^T = B^T A^T */
    const es_view t = es_T(b);
    b = es_T(a);
    a = t;
    c = es_T(c);
  }
  const int M = (int)a.rows, N = (int)b.cols, K = (int)a.cols;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f) memset(c.p, 0, bt * c.bs * sizeof *c.p);
    return;
  }
  for (size_t i = 0; i < bt; i++)
    cblas_sgemm(CblasRowMajor, a.t ? CblasTrans : CblasNoTrans, b.t ? CblasTrans : CblasNoTrans,
                M, N, K, 1.0f, a.p + i * a.bs, a.t ? M : K, b.p + i * b.bs, b.t ? K : N, beta,
                c.p + i * c.bs, N);
}

/* Walk m's canonical index space in order: canon[i] = t[off] (out 0) or
 * t[off] (+)= canon[i] (out 1). */
static void es_move(const es_mat *m, float *t, float *canon, int out, int acc) {
  int64_t idx[FL_G_MAX_DIMS] = {0}, off = 0;
  for (size_t i = 0; i < m->n; i++) {
    if (!out)
      canon[i] = t[off];
    else if (acc)
      t[off] += canon[i];
    else
      t[off] = canon[i];
    for (int d = m->r - 1; d >= 0; d--) {
      off += m->st[d];
      if (++idx[d] < m->sh[d]) break;
      off -= m->st[d] * m->sh[d];
      idx[d] = 0;
    }
  }
}

/* The view of m over tensor memory t: in place when direct, else a
 * canonical copy in *ws (gathered when gather is set), *ws advanced. */
static es_view es_view_of(const es_mat *m, float *t, float **ws, int gather) {
  es_view v = {.p = t, .t = m->t, .rows = m->rows, .cols = m->cols,
               .bs = (size_t)(m->rows * m->cols)};
  if (m->direct) return v;
  v.p = *ws;
  v.t = 0;
  *ws += m->n;
  if (gather) es_move(m, t, v.p, 0, 0);
  return v;
}

static fl_status einsum_infer(fl_gnode *n, fl_gctx *c, size_t *ws, size_t *saved) {
  es_eq e;
  FL_TRY(es_parse(n, &e)); /* the equation's refusals before the inputs' */
  FL_TRY(fl_gneed(n, c, 0, FL_G_F32));
  FL_TRY(fl_gneed(n, c, 1, FL_G_F32));
  es_plan p;
  FL_TRY(es_plan_of(n, c, &p));
  int64_t ys[FL_G_MAX_DIMS];
  for (int i = 0; i < p.e.nout; i++) ys[i] = p.size[(unsigned char)p.e.out[i]];
  fl_gset_out(n, c, 0, FL_G_F32, p.e.nout, ys);
  /* Backward's scratch: A and B copied and their gradients, dY copied. */
  *ws = (p.a.direct ? 0 : 2 * p.a.n) + (p.b.direct ? 0 : 2 * p.b.n) + (p.y.direct ? 0 : p.y.n);
  *saved = 0;
  return FL_OK;
}

static fl_status einsum_forward(fl_gnode *n, fl_gctx *c) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1);
  fl_gtensor *y = fl_gout(n, c, 0);
  es_plan p;
  FL_TRY(es_plan_of(n, c, &p));
  if (y->n == 0) return FL_OK;
  float *ws = n->ws;
  const es_view va = es_view_of(&p.a, a->data, &ws, 1), vb = es_view_of(&p.b, b->data, &ws, 1);
  const es_view vy = es_view_of(&p.y, y->data, &ws, 0);
  es_gemm((size_t)p.bt, va, vb, vy, 0.0f);
  if (!p.y.direct) es_move(&p.y, y->data, vy.p, 1, 0);
  return FL_OK;
}

/* dst = x . w into operand m's gradient g (accumulating when acc). */
static void es_grad(const es_plan *p, const es_mat *m, float *g, int acc, es_view x, es_view w,
                    float **ws) {
  if (!g) return;
  const es_view d = es_view_of(m, g, ws, 0);
  const int direct = m->direct;
  if (m->n == 0) return;
  es_gemm((size_t)p->bt, x, w, d, direct && acc ? 1.0f : 0.0f);
  if (!direct) es_move(m, g, d.p, 1, acc);
}

static fl_status einsum_backward(fl_gnode *n, fl_gctx *c, unsigned acc) {
  const fl_gtensor *a = fl_gin(n, c, 0), *b = fl_gin(n, c, 1), *y = fl_gout(n, c, 0);
  es_plan p;
  FL_TRY(es_plan_of(n, c, &p));
  if (y->n == 0) { /* empty product: zero gradients */
    if (a->grad && !fl_gacc(acc, 0)) memset(a->grad, 0, a->n * sizeof *a->grad);
    if (b->grad && !fl_gacc(acc, 1)) memset(b->grad, 0, b->n * sizeof *b->grad);
    return FL_OK;
  }
  float *ws = n->ws;
  const es_view va = es_view_of(&p.a, a->data, &ws, b->grad != NULL);
  const es_view vb = es_view_of(&p.b, b->data, &ws, a->grad != NULL);
  const es_view vdy = es_view_of(&p.y, y->grad, &ws, 1);
  es_grad(&p, &p.a, a->grad, fl_gacc(acc, 0), vdy, es_T(vb), &ws);
  es_grad(&p, &p.b, b->grad, fl_gacc(acc, 1), es_T(va), vdy, &ws);
  return FL_OK;
}

/* --------------------------------------------------------------- table */

static const char *const gemm_attrs[] = {"alpha", "beta", "transA", "transB", FL_GRAPH_ACT_ATTR,
                                         NULL};
static const char *const no_attrs[] = {NULL};
static const char *const einsum_attrs[] = {"equation", NULL};

const fl_gop fl_gops_linalg[] = {
    {.type = "Gemm", .paddle = "fc", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = gemm_attrs, .infer = gemm_infer, .forward = gemm_forward,
     .backward = gemm_backward, .save_in = 3, .save_out = 1,
     .forward_cuda = gemm_forward_cuda, .backward_cuda = gemm_backward_cuda,
     .traits = FL_GOP_FUSES_ACT | FL_GOP_AMP16 | FL_GOP_MATMUL,
     .doc = "transA, transB, alpha, beta, C broadcast to [M, N]; gpu: PyTorch's Linear only "
            "(transA 0, transB 1, alpha 1, C a [N] bias)"},
    {.type = "MatMul", .paddle = "matmul_v2", .min_in = 2, .max_in = 2, .min_out = 1,
     .max_out = 1, .attrs = no_attrs, .infer = matmul_infer, .forward = matmul_forward,
     .backward = matmul_backward, .save_in = 3, .traits = FL_GOP_MATMUL,
     .doc = "numpy matmul: 1-D operands, batched operands broadcast over the leading dims"},
    {.type = "Einsum", .paddle = "einsum", .min_in = 1, .max_in = 16, .min_out = 1,
     .max_out = 1, .attrs = einsum_attrs, .infer = einsum_infer, .forward = einsum_forward,
     .backward = einsum_backward, .save_in = 3,
     .doc = "two operands whose equation is a batched matrix product after transposes "
            "(batch, contracted and free letters, output in any order, implicit output "
            "taken); one operand, three, '...', a repeated letter in a term and a letter "
            "summed out of one operand alone refused"},
};
const size_t fl_gops_linalg_n = sizeof fl_gops_linalg / sizeof fl_gops_linalg[0];
