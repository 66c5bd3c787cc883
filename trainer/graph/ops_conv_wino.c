/* ops_conv_wino.c - Winograd F(2x2, 3x3) for the CPU Conv of ops_conv.c:
 * one group, 3x3 kernel, stride 1, dilation 1, pad 1 on every side (the
 * output as large as the input).  Why: every 2x2 output tile costs 16
 * products per channel pair instead of 36, and the GEMMs read 4 floats
 * per output position instead of im2col's 9; with the ResNet stages' 16
 * to 64 channels that pays for the transforms.
 *
 * Per chunk of images: the input tiles (4x4, overlapping by 2) transformed
 * to V[16][Cin][T] (T: the chunk's tiles), 16 GEMMs M[xi] = U[xi] . V[xi]
 * with U = G w G^T [16][Cout][Cin], and M transformed back to 2x2 outputs.
 * dW is the adjoint in w: dU[xi] += (A dY A^T)[xi] . V[xi]^T over all
 * tiles, then dW = G^T dU G.  A short last chunk multiplies only its own
 * tiles (the GEMMs' width).  dx is the forward of dz with the flipped
 * weight (ops_conv.c flips it).  Odd sizes take a last tile that reads
 * zeros past the edge and writes only what lies inside.  The transforms
 * go four tiles at a time with SSE2 (the scalar loops otherwise). */
#include <config.h>

#include <cblas.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "ops_internal.h"

/* Tiles per GEMM: a chunk of whole images with at most this many tiles
 * (at least one image).  On the ResNet example 128 was as fast as 64 and
 * 256, and faster than 512 for the 7x7 stage (64 channels). */
#define WINO_TILES 128

typedef struct wino_geom {
  int64_t th, tw, tiles; /* tiles per image: th x tw of 2x2 */
  int64_t nb, T;         /* images per chunk, tiles per chunk */
} wino_geom;

static wino_geom wino_geom_of(const fl_wino *g) {
  wino_geom q = {.th = (g->H + 1) / 2, .tw = (g->W + 1) / 2};
  q.tiles = q.th * q.tw;
  q.nb = WINO_TILES / q.tiles;
  if (q.nb > g->N) q.nb = g->N;
  if (q.nb < 1) q.nb = 1;
  q.T = q.nb * q.tiles;
  return q;
}

size_t fl_wino_ws(const fl_wino *g) {
  const wino_geom q = wino_geom_of(g);
  return (size_t)(16 * g->Cin * g->Cout + 16 * (g->Cin + g->Cout) * q.T + 16 * (q.tw + 1));
}

/* U[xi][o][c] = (G w[o][c] G^T)[xi], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]. */
static void wino_weights(const fl_wino *g, const float *w, float *U) {
  const int64_t oc = g->Cout * g->Cin;
  for (int64_t k = 0; k < oc; k++) {
    const float *f = w + 9 * k;
    float t[4][3];
    for (int j = 0; j < 3; j++) {
      t[0][j] = f[j];
      t[1][j] = 0.5f * (f[j] + f[3 + j] + f[6 + j]);
      t[2][j] = 0.5f * (f[j] - f[3 + j] + f[6 + j]);
      t[3][j] = f[6 + j];
    }
    for (int i = 0; i < 4; i++) {
      U[(4 * i + 0) * oc + k] = t[i][0];
      U[(4 * i + 1) * oc + k] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
      U[(4 * i + 2) * oc + k] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
      U[(4 * i + 3) * oc + k] = t[i][2];
    }
  }
}

/* dW[o][c] (+)= G^T dU[.][o][c] G. */
static void wino_weights_adjoint(const fl_wino *g, const float *dU, float *dw, int add) {
  const int64_t oc = g->Cout * g->Cin;
  for (int64_t k = 0; k < oc; k++) {
    float t[4][3], *f = dw + 9 * k;
    for (int i = 0; i < 4; i++) {
      const float u0 = dU[(4 * i) * oc + k], u1 = dU[(4 * i + 1) * oc + k];
      const float u2 = dU[(4 * i + 2) * oc + k], u3 = dU[(4 * i + 3) * oc + k];
      t[i][0] = u0 + 0.5f * (u1 + u2);
      t[i][1] = 0.5f * (u1 - u2);
      t[i][2] = 0.5f * (u1 + u2) + u3;
    }
    for (int j = 0; j < 3; j++) {
      const float r[3] = {t[0][j] + 0.5f * (t[1][j] + t[2][j]), 0.5f * (t[1][j] - t[2][j]),
                          0.5f * (t[1][j] + t[2][j]) + t[3][j]};
      for (int i = 0; i < 3; i++) f[3 * i + j] = add ? f[3 * i + j] + r[i] : r[i];
    }
  }
}

/* Rows 2ty-1 .. 2ty+2 of plane xc, transformed down the columns by B^T =
 * [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], into Q (4 rows of L = 2tw+2
 * floats; Q[i][m] stands for input column m - 1, zeros past the edges).
 * zero: W zeros (the rows outside the image). */
static void wino_in_rows(const fl_wino *g, const float *xc, int64_t ty, int64_t L,
                         const float *zero, float *Q) {
  const float *r[4];
  for (int i = 0; i < 4; i++) {
    const int64_t y = 2 * ty - 1 + i;
    r[i] = y >= 0 && y < g->H ? xc + y * g->W : zero;
  }
  float *q0 = Q, *q1 = Q + L, *q2 = Q + 2 * L, *q3 = Q + 3 * L;
  int64_t m = 0;
#ifdef __SSE2__
  for (; m + 4 <= g->W; m += 4) {
    const __m128 a = _mm_loadu_ps(r[0] + m), b = _mm_loadu_ps(r[1] + m);
    const __m128 c = _mm_loadu_ps(r[2] + m), d = _mm_loadu_ps(r[3] + m);
    _mm_storeu_ps(q0 + m + 1, _mm_sub_ps(a, c));
    _mm_storeu_ps(q1 + m + 1, _mm_add_ps(b, c));
    _mm_storeu_ps(q2 + m + 1, _mm_sub_ps(c, b));
    _mm_storeu_ps(q3 + m + 1, _mm_sub_ps(b, d));
  }
#endif
  for (; m < g->W; m++) {
    q0[m + 1] = r[0][m] - r[2][m];
    q1[m + 1] = r[1][m] + r[2][m];
    q2[m + 1] = r[2][m] - r[1][m];
    q3[m + 1] = r[1][m] - r[3][m];
  }
  for (int i = 0; i < 4; i++) {
    Q[i * L] = 0.0f;
    for (int64_t m = g->W + 1; m < L; m++) Q[i * L + m] = 0.0f;
  }
}

/* Tiles [t0, tw) of a row of tiles across: V[(4i + j)*s + t] = (Q[i] B)[j]
 * over padded columns 2t .. 2t+3. */
static void wino_in_cols(const float *Q, int64_t L, int64_t t0, int64_t tw, float *V, int64_t s) {
  for (int i = 0; i < 4; i++) {
    const float *r = Q + i * L;
    float *v0 = V + 4 * i * s, *v1 = v0 + s, *v2 = v1 + s, *v3 = v2 + s;
    for (int64_t t = t0; t < tw; t++) {
      v0[t] = r[2 * t] - r[2 * t + 2];
      v1[t] = r[2 * t + 1] + r[2 * t + 2];
      v2[t] = r[2 * t + 2] - r[2 * t + 1];
      v3[t] = r[2 * t + 1] - r[2 * t + 3];
    }
  }
}

/* wino_in_cols four tiles at a time with SSE2, the last four ending at tw
 * (again over some done: the same values); its loads end at Q[i][2tw+1].
 * Returns how many tiles it did (all with SSE2 and tw >= 4, else none). */
static int64_t wino_in_cols4(const float *Q, int64_t L, int64_t tw, float *V, int64_t s) {
  int64_t t = 0;
#ifdef __SSE2__
  for (; tw >= 4 && t < tw; t += 4) {
    if (t + 4 > tw) t = tw - 4;
    for (int i = 0; i < 4; i++) {
      const float *r = Q + i * L + 2 * t;
      const __m128 a = _mm_loadu_ps(r), b = _mm_loadu_ps(r + 4);
      const __m128 c = _mm_loadu_ps(r + 2), d = _mm_loadu_ps(r + 6);
      const __m128 e0 = _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
      const __m128 o0 = _mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
      const __m128 e1 = _mm_shuffle_ps(c, d, _MM_SHUFFLE(2, 0, 2, 0));
      const __m128 o1 = _mm_shuffle_ps(c, d, _MM_SHUFFLE(3, 1, 3, 1));
      float *v = V + 4 * i * s + t;
      _mm_storeu_ps(v, _mm_sub_ps(e0, e1));
      _mm_storeu_ps(v + s, _mm_add_ps(o0, e1));
      _mm_storeu_ps(v + 2 * s, _mm_sub_ps(e1, o0));
      _mm_storeu_ps(v + 3 * s, _mm_sub_ps(o0, o1));
    }
  }
#else
  (void)Q, (void)L, (void)tw, (void)V, (void)s;
#endif
  return t;
}

/* One row of tiles of plane xc: V[xi*s + tx] = (B^T d B)[xi] for the tile
 * at (ty, tx).  rb: 8*(tw+1) floats of scratch, then W zeros. */
static void wino_in_row(const fl_wino *g, const wino_geom *q, const float *xc, int64_t ty,
                        float *V, int64_t s, float *rb) {
  const int64_t L = 2 * q->tw + 2;
  wino_in_rows(g, xc, ty, L, rb + 4 * L, rb);
  wino_in_cols(rb, L, wino_in_cols4(rb, L, q->tw, V, s), q->tw, V, s);
}

/* Prefetch floats [off, off + len) of x (n floats: nothing past its end).
 * Why: the transforms read every plane row by row once; fetching the rows
 * four tile rows ahead (into the next planes at the bottom) measured 3 to
 * 5% more samples/s on the ResNet example. */
static void wino_ahead(const float *x, int64_t n, int64_t off, int64_t len) {
  if (off + len > n) len = n - off;
  for (int64_t k = 0; k < len; k += 16) __builtin_prefetch(x + off + k);
}

/* V[16][C][T] of images [i0, i0+nb) of x [N][C][H][W]. */
static void wino_in(const fl_wino *g, const wino_geom *q, int64_t C, const float *x, int64_t i0,
                    int64_t nb, float *V, float *rb) {
  const int64_t s = C * q->T, hw = g->H * g->W;
  memset(rb + 8 * (q->tw + 1), 0, (size_t)g->W * sizeof *rb);
  for (int64_t k = 0; k < nb; k++)
    for (int64_t c = 0; c < C; c++) {
      const int64_t off = ((i0 + k) * C + c) * hw;
      for (int64_t ty = 0; ty < q->th; ty++) {
        wino_ahead(x, g->N * C * hw, off + (2 * ty + 9) * g->W, 2 * g->W);
        wino_in_row(g, q, x + off, ty, V + c * q->T + k * q->tiles + ty * q->tw, s, rb);
      }
    }
}

/* Tiles [t0, tw) of a row of tiles: E0/O0 (even/odd output columns of
 * row 2ty) and E1/O1 (row 2ty+1), at rb + {0, 1, 2, 3}*tw, = A^T m A +
 * bias, A^T = [1 1 1 0; 0 1 -1 -1], m[xi] = M[xi*s + t]. */
static void wino_out_tiles(const float *M, int64_t s, float bias, int64_t t0, int64_t tw,
                           float *rb) {
  for (int64_t t = t0; t < tw; t++) {
    float r[2][4];
    for (int j = 0; j < 4; j++) {
      const float m0 = M[j * s + t], m1 = M[(4 + j) * s + t];
      const float m2 = M[(8 + j) * s + t], m3 = M[(12 + j) * s + t];
      r[0][j] = m0 + m1 + m2;
      r[1][j] = m1 - m2 - m3;
    }
    for (int i = 0; i < 2; i++) {
      rb[2 * i * tw + t] = r[i][0] + r[i][1] + r[i][2] + bias;
      rb[(2 * i + 1) * tw + t] = r[i][1] - r[i][2] - r[i][3] + bias;
    }
  }
}

/* Where wino_out_tiles4 puts a row of tiles: output rows 2ty and 2ty+1
 * (y[1] NULL past H), W wide, add: accumulate; the first nd tiles straight
 * into them, the rest into rb as wino_out_tiles. */
typedef struct wino_dst {
  float *y[2];
  int64_t W, nd;
  int add;
} wino_dst;

#ifdef __SSE2__
/* Four tiles' 8 output columns from 2t of one row (+)= a, b interleaved. */
static void wino_put8(float *y, __m128 a, __m128 b, int add) {
  __m128 lo = _mm_unpacklo_ps(a, b), hi = _mm_unpackhi_ps(a, b);
  if (add) {
    lo = _mm_add_ps(_mm_loadu_ps(y), lo);
    hi = _mm_add_ps(_mm_loadu_ps(y + 4), hi);
  }
  _mm_storeu_ps(y, lo);
  _mm_storeu_ps(y + 4, hi);
}
#endif

/* wino_out_tiles four tiles at a time with SSE2, the last four ending at
 * tw, tiles below d->nd straight into d's rows; returns the tiles done (as
 * wino_in_cols4). */
static int64_t wino_out_tiles4(const float *M, int64_t s, float bias, int64_t tw, float *rb,
                               const wino_dst *d) {
  int64_t t = 0;
#ifdef __SSE2__
  const __m128 bv = _mm_set1_ps(bias);
  for (; tw >= 4 && t < tw; t += 4) {
    if (t + 4 > tw) t = tw - 4;
    __m128 r[2][4];
    for (int j = 0; j < 4; j++) {
      const __m128 m0 = _mm_loadu_ps(M + j * s + t), m1 = _mm_loadu_ps(M + (4 + j) * s + t);
      const __m128 m2 = _mm_loadu_ps(M + (8 + j) * s + t);
      const __m128 m3 = _mm_loadu_ps(M + (12 + j) * s + t);
      r[0][j] = _mm_add_ps(_mm_add_ps(m0, m1), m2);
      r[1][j] = _mm_sub_ps(_mm_sub_ps(m1, m2), m3);
    }
    for (int i = 0; i < 2; i++) {
      const __m128 e = _mm_add_ps(_mm_add_ps(_mm_add_ps(r[i][0], r[i][1]), r[i][2]), bv);
      const __m128 o = _mm_add_ps(_mm_sub_ps(_mm_sub_ps(r[i][1], r[i][2]), r[i][3]), bv);
      if (t + 4 <= d->nd) {
        if (d->y[i]) wino_put8(d->y[i] + 2 * t, e, o, d->add);
        continue;
      }
      _mm_storeu_ps(rb + 2 * i * tw + t, e);
      _mm_storeu_ps(rb + (2 * i + 1) * tw + t, o);
    }
  }
#else
  (void)M, (void)s, (void)bias, (void)tw, (void)rb, (void)d;
#endif
  return t;
}

/* y[x] (+)= x even ? e[x/2] : o[x/2], x0 <= x < W, x0 even (add:
 * accumulate). */
static void wino_interleave(float *y, const float *e, const float *o, int64_t x0, int64_t W,
                            int add) {
  int64_t x = x0;
#ifdef __SSE2__
  for (; x + 8 <= W; x += 8)
    wino_put8(y + x, _mm_loadu_ps(e + x / 2), _mm_loadu_ps(o + x / 2), add);
  if (x + 4 <= W) {
    __m128 lo = _mm_unpacklo_ps(_mm_loadu_ps(e + x / 2), _mm_loadu_ps(o + x / 2));
    if (add) lo = _mm_add_ps(_mm_loadu_ps(y + x), lo);
    _mm_storeu_ps(y + x, lo);
    x += 4;
  }
#endif
  for (; x < W; x++) {
    const float v = x & 1 ? o[x >> 1] : e[x >> 1];
    y[x] = add ? y[x] + v : v;
  }
}

/* Output rows 2ty, 2ty+1 (those inside) of plane yc (+)= the row of tiles
 * at ty, from M (m[xi] = M[xi*s + tx]) plus bias: with SSE2 the groups of
 * four tiles whose 8 columns lie inside go straight to the rows, the rest
 * through rb (4*tw floats) and wino_interleave. */
static void wino_out_row(const fl_wino *g, const wino_geom *q, const float *M, int64_t s,
                         float bias, int add, float *yc, int64_t ty, float *rb) {
  const int64_t tw = q->tw;
  float *y0 = yc + 2 * ty * g->W;
  wino_dst d = {.y = {y0, 2 * ty + 1 < g->H ? y0 + g->W : NULL}, .W = g->W, .add = add};
#ifdef __SSE2__
  while (d.nd + 4 <= tw && 2 * d.nd + 8 <= g->W) d.nd += 4;
#endif
  wino_out_tiles(M, s, bias, wino_out_tiles4(M, s, bias, tw, rb, &d), tw, rb);
  for (int i = 0; i < 2 && d.y[i]; i++)
    wino_interleave(d.y[i], rb + 2 * i * tw, rb + (2 * i + 1) * tw, 2 * d.nd, g->W, add);
}

/* y's images [i0, i0+nb) (+)= the inverse transform of M[16][Cout][T]. */
static void wino_out(const fl_wino *g, const wino_geom *q, const float *M, const float *b,
                     int add, float *y, int64_t i0, int64_t nb, float *rb) {
  const int64_t s = g->Cout * q->T;
  for (int64_t k = 0; k < nb; k++)
    for (int64_t o = 0; o < g->Cout; o++) {
      float *yc = y + ((i0 + k) * g->Cout + o) * g->H * g->W;
      for (int64_t ty = 0; ty < q->th; ty++)
        wino_out_row(g, q, M + o * q->T + k * q->tiles + ty * q->tw, s, b ? b[o] : 0.0f, add,
                     yc, ty, rb);
    }
}

void fl_wino_forward(const fl_wino *g, const float *w, const float *b, const float *x, float *y,
                     int add, float *ws) {
  const wino_geom q = wino_geom_of(g);
  float *U = ws, *V = U + 16 * g->Cout * g->Cin, *M = V + 16 * g->Cin * q.T;
  float *rb = M + 16 * g->Cout * q.T;
  wino_weights(g, w, U);
  for (int64_t i0 = 0; i0 < g->N; i0 += q.nb) {
    const int64_t nb = g->N - i0 < q.nb ? g->N - i0 : q.nb;
    wino_in(g, &q, g->Cin, x, i0, nb, V, rb);
    for (int xi = 0; xi < 16; xi++)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->Cout,
                  (int)(nb * q.tiles), (int)g->Cin, 1.0f, U + xi * g->Cout * g->Cin, (int)g->Cin,
                  V + xi * g->Cin * q.T, (int)q.T, 0.0f, M + xi * g->Cout * q.T, (int)q.T);
    wino_out(g, &q, M, b, add, y, i0, nb, rb);
  }
}

/* (A p A^T) of the 2x2 tiles [t0, tw) whose rows are r0, r1 (zeros past
 * W), A = [1 0; 1 1; 1 -1; 0 -1]: D[xi*s + t]. */
static void wino_dy_tiles(const float *r0, const float *r1, int64_t W, int64_t t0, int64_t tw,
                          float *D, int64_t s) {
  for (int64_t t = t0; t < tw; t++) {
    const int odd = 2 * t + 1 < W;
    const float a0 = r0[2 * t], b0 = odd ? r0[2 * t + 1] : 0.0f;
    const float a1 = r1[2 * t], b1 = odd ? r1[2 * t + 1] : 0.0f;
    const float p[4][2] = {{a0, b0}, {a0 + a1, b0 + b1}, {a0 - a1, b0 - b1}, {-a1, -b1}};
    for (int i = 0; i < 4; i++) {
      D[(4 * i) * s + t] = p[i][0];
      D[(4 * i + 1) * s + t] = p[i][0] + p[i][1];
      D[(4 * i + 2) * s + t] = p[i][0] - p[i][1];
      D[(4 * i + 3) * s + t] = -p[i][1];
    }
  }
}

/* wino_dy_tiles four tiles at a time with SSE2 for rows r0, r1 of 2tw
 * floats (zeros past W), the last four ending at tw; returns the tiles
 * done (as wino_in_cols4). */
static int64_t wino_dy_tiles4(const float *r0, const float *r1, int64_t tw, float *D, int64_t s) {
  int64_t t = 0;
#ifdef __SSE2__
  const __m128 z = _mm_setzero_ps();
  for (; tw >= 4 && t < tw; t += 4) {
    if (t + 4 > tw) t = tw - 4;
    const __m128 x0 = _mm_loadu_ps(r0 + 2 * t), y0 = _mm_loadu_ps(r0 + 2 * t + 4);
    const __m128 x1 = _mm_loadu_ps(r1 + 2 * t), y1 = _mm_loadu_ps(r1 + 2 * t + 4);
    const __m128 a0 = _mm_shuffle_ps(x0, y0, _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 b0 = _mm_shuffle_ps(x0, y0, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 a1 = _mm_shuffle_ps(x1, y1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 b1 = _mm_shuffle_ps(x1, y1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m128 p[4][2] = {{a0, b0},
                            {_mm_add_ps(a0, a1), _mm_add_ps(b0, b1)},
                            {_mm_sub_ps(a0, a1), _mm_sub_ps(b0, b1)},
                            {_mm_sub_ps(z, a1), _mm_sub_ps(z, b1)}};
    for (int i = 0; i < 4; i++) {
      _mm_storeu_ps(D + (4 * i) * s + t, p[i][0]);
      _mm_storeu_ps(D + (4 * i + 1) * s + t, _mm_add_ps(p[i][0], p[i][1]));
      _mm_storeu_ps(D + (4 * i + 2) * s + t, _mm_sub_ps(p[i][0], p[i][1]));
      _mm_storeu_ps(D + (4 * i + 3) * s + t, _mm_sub_ps(z, p[i][1]));
    }
  }
#else
  (void)r0, (void)r1, (void)tw, (void)D, (void)s;
#endif
  return t;
}

/* One row of dY tiles of plane dyc: D[xi*s + tx] = (A d A^T)[xi] for the
 * 2x2 tile at (ty, tx) (zeros past the edges).  With W even (2tw = W) the
 * rows are read in place, the one past H from rb + 2tw; with W odd they
 * are copied into rb and rb + 2tw, each followed by a zero.  rb: 4tw
 * floats, all zero when wino_dy starts. */
static void wino_dy_row(const fl_wino *g, const wino_geom *q, const float *dyc, int64_t ty,
                        float *D, int64_t s, float *rb) {
  const int64_t tw = q->tw;
  const int in = 2 * ty + 1 < g->H;
  const float *r0 = dyc + 2 * ty * g->W, *r1 = in ? r0 + g->W : rb + 2 * tw;
  if (g->W & 1) {
    memcpy(rb, r0, (size_t)g->W * sizeof *rb);
    if (in)
      memcpy(rb + 2 * tw, r1, (size_t)g->W * sizeof *rb);
    else
      memset(rb + 2 * tw, 0, (size_t)g->W * sizeof *rb);
    r0 = rb;
    r1 = rb + 2 * tw;
  }
  wino_dy_tiles(r0, r1, g->W, wino_dy_tiles4(r0, r1, tw, D, s), tw, D, s);
}

/* D[16][Cout][T] of dy's images [i0, i0+nb).  rb: 4tw floats of scratch. */
static void wino_dy(const fl_wino *g, const wino_geom *q, const float *dy, int64_t i0,
                    int64_t nb, float *D, float *rb) {
  const int64_t s = g->Cout * q->T, hw = g->H * g->W;
  memset(rb, 0, (size_t)(4 * q->tw) * sizeof *rb);
  for (int64_t k = 0; k < nb; k++)
    for (int64_t o = 0; o < g->Cout; o++) {
      const int64_t off = ((i0 + k) * g->Cout + o) * hw;
      for (int64_t ty = 0; ty < q->th; ty++) {
        wino_ahead(dy, g->N * g->Cout * hw, off + (2 * ty + 8) * g->W, 2 * g->W);
        wino_dy_row(g, q, dy + off, ty, D + o * q->T + k * q->tiles + ty * q->tw, s, rb);
      }
    }
}

void fl_wino_dw(const fl_wino *g, const float *x, const float *dy, float *dw, int add,
                float *ws) {
  const wino_geom q = wino_geom_of(g);
  float *dU = ws, *V = dU + 16 * g->Cout * g->Cin, *D = V + 16 * g->Cin * q.T;
  float *rb = D + 16 * g->Cout * q.T;
  for (int64_t i0 = 0; i0 < g->N; i0 += q.nb) {
    const int64_t nb = g->N - i0 < q.nb ? g->N - i0 : q.nb;
    wino_in(g, &q, g->Cin, x, i0, nb, V, rb);
    wino_dy(g, &q, dy, i0, nb, D, rb);
    for (int xi = 0; xi < 16; xi++)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->Cout, (int)g->Cin,
                  (int)(nb * q.tiles),
                  1.0f, D + xi * g->Cout * q.T, (int)q.T, V + xi * g->Cin * q.T, (int)q.T,
                  i0 > 0 ? 1.0f : 0.0f, dU + xi * g->Cout * g->Cin, (int)g->Cin);
  }
  wino_weights_adjoint(g, dU, dw, add);
}
