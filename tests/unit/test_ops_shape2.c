/* test_ops_shape2.c - unit tests of the shape/padding ops (Pad, Tile,
 * Resize in trainer/graph/ops_resize.c) and Einsum (ops_linalg.c), without
 * the engine: hand-built nodes (graph_ops_harness.h), forward against
 * naive double-precision references written from the ONNX definitions,
 * backward against central finite differences and its accumulate path,
 * and the refusals, which must name what is not supported. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_ops_harness.h"

/* Multi-index of flat index o in shape (r, s). */
static void unflat(size_t o, int r, const int64_t *s, int64_t *idx) {
  for (int d = r - 1; d >= 0; d--) {
    idx[d] = (int64_t)(o % (size_t)s[d]);
    o /= (size_t)s[d];
  }
}

static size_t flat(int r, const int64_t *s, const int64_t *idx) {
  size_t o = 0;
  for (int d = 0; d < r; d++) o = o * (size_t)s[d] + (size_t)idx[d];
  return o;
}

/* ----------------------------------------------------------------- Pad */

enum { M_CONST, M_REFLECT, M_EDGE };

/* Input index along a dim of n for i (may be outside), -1 = constant. */
static int64_t pad_ref_index(int mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  if (mode == M_CONST) return -1;
  if (mode == M_EDGE) return i < 0 ? 0 : n - 1;
  while (i < 0 || i >= n) { /* bounce off the edges, never repeating them */
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
  }
  return i;
}

static void check_pad(const char *mode, int m, int r, const int64_t *xs, const int64_t *pads,
                      int with_cv) {
  harness h;
  uint64_t s = 21;
  h_init(&h, "Pad");
  h_f32(&h, "x", r, xs, &s, -1, 1, 0);
  const int64_t np[] = {2 * r};
  h_i64(&h, "pads", 1, np, pads);
  const float cv = 0.75f;
  if (with_cv) {
    const int cid = h_f32(&h, "cv", 0, np, &s, 0, 1, 0);
    h.t[cid].data[0] = cv;
  }
  if (mode) h_as(&h, "mode", mode);
  h_outs(&h, 1);
  h_ready(&h);
  int64_t ys[FL_G_MAX_DIMS];
  for (int d = 0; d < r; d++) ys[d] = xs[d] + pads[d] + pads[d + r];
  h_expect_shape(&h, 0, r, ys);
  h_fwd(&h);
  const fl_gtensor *x = h_x(&h, 0), *y = h_y(&h, 0);
  double *want = malloc((y->n ? y->n : 1) * sizeof *want);
  for (size_t o = 0; o < y->n; o++) {
    int64_t idx[FL_G_MAX_DIMS];
    unflat(o, r, ys, idx);
    int constant = 0;
    for (int d = 0; d < r; d++) {
      idx[d] = pad_ref_index(m, idx[d] - pads[d], xs[d]);
      constant |= idx[d] < 0;
    }
    want[o] = constant ? (with_cv ? cv : 0.0) : x->data[flat(r, xs, idx)];
  }
  char what[64];
  snprintf(what, sizeof what, "Pad %s rank %d", mode ? mode : "(default)", r);
  expect_close(y->data, want, y->n, 0.0, what);
  free(want);
  h_gradcheck(&h, what, 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
}

START_TEST(test_pad) {
  const int64_t x1[] = {2, 3, 5}, p1[] = {0, 0, 1, 0, 0, 2};         /* 1-D, torch (1, 2) */
  const int64_t x2[] = {2, 2, 4, 5}, p2[] = {0, 0, 2, 1, 0, 0, 1, 2}; /* 2-D */
  const int64_t p3[] = {0, 0, -1, 3, 0, 0, 2, -2};                    /* crop and pad */
  const int64_t p4[] = {0, 0, 7, 0, 0, 9};                            /* beyond one reflection */
  static const struct {
    const char *name;
    int m;
  } modes[] = {{NULL, M_CONST}, {"constant", M_CONST}, {"reflect", M_REFLECT}, {"edge", M_EDGE}};
  for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
    check_pad(modes[k].name, modes[k].m, 3, x1, p1, 0);
    check_pad(modes[k].name, modes[k].m, 4, x2, p2, 0);
    check_pad(modes[k].name, modes[k].m, 4, x2, p3, 0);
    check_pad(modes[k].name, modes[k].m, 3, x1, p4, 0);
  }
  check_pad("constant", M_CONST, 4, x2, p2, 1);
  check_pad(NULL, M_CONST, 3, x1, p1, 1);
}
END_TEST

/* A Pad node on x [2,3] with these pads and mode: infer's status. */
static fl_status pad_infer_status(const int64_t *pads, size_t np, const char *mode) {
  harness h;
  uint64_t s = 1;
  const int64_t xs[] = {2, 3}, ns[] = {(int64_t)np};
  h_init(&h, "Pad");
  h_f32(&h, "x", 2, xs, &s, 0, 1, 0);
  h_i64(&h, "pads", 1, ns, pads);
  if (mode) h_as(&h, "mode", mode);
  h_outs(&h, 1);
  const fl_status st = h_infer(&h);
  h_free(&h);
  return st;
}

START_TEST(test_pad_refusals) {
  const int64_t ok[] = {0, 1, 0, 1}, three[] = {0, 1, 0}, crop[] = {0, -2, 0, -2};
  ck_assert_int_eq(pad_infer_status(ok, 4, "reflect"), FL_OK);
  ck_assert_int_eq(pad_infer_status(ok, 4, "wrap"), FL_ENOTSUP);
  ck_assert_int_eq(pad_infer_status(three, 3, NULL), FL_EINVAL);
  ck_assert_int_eq(pad_infer_status(crop, 4, NULL), FL_EINVAL);
}
END_TEST

/* ---------------------------------------------------------------- Tile */

START_TEST(test_tile) {
  harness h;
  uint64_t s = 31;
  const int64_t xs[] = {2, 3, 2}, rs[] = {3}, rep[] = {2, 1, 3}, ys[] = {4, 3, 6};
  h_init(&h, "Tile");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "repeats", 1, rs, rep);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, 3, ys);
  h_fwd(&h);
  for (size_t o = 0; o < h_y(&h, 0)->n; o++) {
    int64_t idx[3];
    unflat(o, 3, ys, idx);
    for (int d = 0; d < 3; d++) idx[d] %= xs[d];
    ck_assert_float_eq(h_y(&h, 0)->data[o], h_x(&h, 0)->data[flat(3, xs, idx)]);
  }
  h_gradcheck(&h, "Tile", 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
  /* Negative repeats and a count that is not the rank are refused. */
  const int64_t bad[] = {1, -1, 1}, two[] = {2};
  h_init(&h, "Tile");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "repeats", 1, rs, bad);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  h_init(&h, "Tile");
  h_f32(&h, "x", 3, xs, &s, -1, 1, 0);
  h_i64(&h, "repeats", 1, two, rep);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

/* -------------------------------------------------------------- Resize */

typedef struct rz_case {
  const char *mode, *coord, *nearest;
  int r;
  int64_t xs[4];
  const float *scales; /* or NULL: sizes */
  const int64_t *sizes;
} rz_case;

/* The ONNX input coordinate of output index o. */
static double rz_ref_coord(const char *coord, double o, double scale, double in, double out) {
  if (!strcmp(coord, "half_pixel")) return (o + 0.5) / scale - 0.5;
  if (!strcmp(coord, "pytorch_half_pixel")) return out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
  if (!strcmp(coord, "align_corners")) return out == 1 ? 0.0 : o * (in - 1) / (out - 1);
  if (!strcmp(coord, "tf_half_pixel_for_nn")) return (o + 0.5) / scale;
  return o / scale; /* asymmetric */
}

static int64_t rz_ref_round(const char *nearest, double v) {
  const double f = floor(v);
  if (!strcmp(nearest, "floor")) return (int64_t)f;
  if (!strcmp(nearest, "ceil")) return (int64_t)ceil(v);
  if (v - f == 0.5) return (int64_t)(!strcmp(nearest, "round_prefer_ceil") ? f + 1 : f);
  return (int64_t)floor(v + 0.5);
}

static int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Reference value of output element idx (shape ys, scales sc). */
static double rz_ref(const rz_case *k, const float *x, const int64_t *ys, const double *sc,
                     const int64_t *idx) {
  const int r = k->r;
  int64_t i0[4], i1[4];
  double l[4];
  for (int d = 0; d < r; d++) {
    const double v = rz_ref_coord(k->coord, (double)idx[d], sc[d], (double)k->xs[d], (double)ys[d]);
    if (!strcmp(k->mode, "nearest")) {
      i0[d] = i1[d] = clampi(rz_ref_round(k->nearest, v), 0, k->xs[d] - 1);
      l[d] = 0.0;
    } else {
      const double c = v < 0 ? 0 : v > (double)(k->xs[d] - 1) ? (double)(k->xs[d] - 1) : v;
      i0[d] = (int64_t)floor(c);
      i1[d] = i0[d] + 1 < k->xs[d] ? i0[d] + 1 : i0[d];
      l[d] = c - (double)i0[d];
    }
  }
  double sum = 0.0;
  for (int corner = 0; corner < (1 << r); corner++) { /* multilinear over every dim */
    double w = 1.0;
    int64_t at[4];
    for (int d = 0; d < r; d++) {
      const int hi = (corner >> d) & 1;
      at[d] = hi ? i1[d] : i0[d];
      w *= hi ? l[d] : 1.0 - l[d];
    }
    if (w != 0.0) sum += w * x[flat(r, k->xs, at)];
  }
  return sum;
}

static void check_resize(const rz_case *k) {
  harness h;
  uint64_t s = 41;
  h_init(&h, "Resize");
  h_f32(&h, "x", k->r, k->xs, &s, -1, 1, 0);
  h_none(&h); /* roi */
  const int64_t nr[] = {k->r};
  int64_t ys[4];
  double sc[4];
  if (k->scales) {
    const int id = h_f32(&h, "scales", 1, nr, &s, 0, 1, 0);
    memcpy(h.t[id].data, k->scales, (size_t)k->r * sizeof(float));
    h.t[id].kind = FL_GT_CONST;
    for (int d = 0; d < k->r; d++) {
      ys[d] = (int64_t)floor((double)k->xs[d] * k->scales[d]);
      sc[d] = k->scales[d];
    }
  } else {
    h_none(&h);
    h_i64(&h, "sizes", 1, nr, k->sizes);
    for (int d = 0; d < k->r; d++) {
      ys[d] = k->sizes[d];
      sc[d] = (double)(float)((float)ys[d] / (float)k->xs[d]);
    }
  }
  h_as(&h, "mode", k->mode);
  h_as(&h, "coordinate_transformation_mode", k->coord);
  if (k->nearest) h_as(&h, "nearest_mode", k->nearest);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, k->r, ys);
  h_fwd(&h);
  const fl_gtensor *y = h_y(&h, 0);
  double *want = malloc(y->n * sizeof *want);
  for (size_t o = 0; o < y->n; o++) {
    int64_t idx[4];
    unflat(o, k->r, ys, idx);
    want[o] = rz_ref(k, h_x(&h, 0)->data, ys, sc, idx);
  }
  char what[128];
  snprintf(what, sizeof what, "Resize %s %s %s", k->mode, k->coord, k->scales ? "scales" : "sizes");
  expect_close(y->data, want, y->n, 1e-5, what);
  free(want);
  h_gradcheck(&h, what, 1, 1e-3, 1e-4, 1e-3);
  h_free(&h);
}

START_TEST(test_resize) {
  static const float s2[] = {1, 1, 2, 2}, s1d[] = {1, 1, 2}, shalf[] = {1, 1, 0.5f, 0.6f};
  static const float s3d[] = {1, 2, 1.5f, 3};
  static const int64_t z57[] = {2, 3, 5, 7}, z1d[] = {2, 3, 7}, z1[] = {2, 3, 1, 6};
  static const char *const nm[] = {"floor", "ceil", "round_prefer_floor", "round_prefer_ceil"};
  static const char *const lc[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                   "asymmetric"};
  const rz_case base = {.r = 4, .xs = {2, 3, 4, 4}};
  for (int i = 0; i < 4; i++) {
    rz_case k = base;
    k.mode = "nearest", k.coord = "asymmetric", k.nearest = nm[i], k.scales = s2;
    check_resize(&k);
    k.sizes = z57, k.scales = NULL;
    check_resize(&k);
    k.coord = "half_pixel";
    check_resize(&k);
    k.coord = "tf_half_pixel_for_nn", k.scales = s3d; /* nearest on every dim */
    check_resize(&k);
  }
  for (int i = 0; i < 4; i++) {
    rz_case k = base;
    k.mode = "linear", k.coord = lc[i], k.scales = s2;
    check_resize(&k);
    k.scales = shalf; /* downsampling */
    check_resize(&k);
    k.scales = NULL, k.sizes = z57;
    check_resize(&k);
    k.sizes = z1; /* an output dim of 1 */
    check_resize(&k);
    rz_case k1 = {.mode = "linear", .coord = lc[i], .r = 3, .xs = {2, 3, 4}, .scales = s1d};
    check_resize(&k1);
    k1.scales = NULL, k1.sizes = z1d;
    check_resize(&k1);
  }
}
END_TEST

/* A Resize node of x [1,2,3,4]: infer's status.  scales: 4 floats (a
 * constant unless computed), sizes: 4 ints; either may be NULL. */
static fl_status resize_status(const char *mode, const char *coord, const float *scales,
                               int computed, const int64_t *sizes) {
  harness h;
  uint64_t s = 1;
  const int64_t xs[] = {1, 2, 3, 4}, four[] = {4};
  h_init(&h, "Resize");
  h_f32(&h, "x", 4, xs, &s, 0, 1, 0);
  h_none(&h);
  if (scales) {
    const int id = h_f32(&h, "scales", 1, four, &s, 0, 1, 0);
    memcpy(h.t[id].data, scales, 4 * sizeof(float));
    if (!computed) h.t[id].kind = FL_GT_CONST;
  } else {
    h_none(&h);
  }
  if (sizes) h_i64(&h, "sizes", 1, four, sizes);
  if (mode) h_as(&h, "mode", mode);
  if (coord) h_as(&h, "coordinate_transformation_mode", coord);
  h_outs(&h, 1);
  const fl_status st = h_infer(&h);
  h_free(&h);
  return st;
}

START_TEST(test_resize_refusals) {
  static const float s2[] = {1, 1, 2, 2}, sc[] = {2, 1, 2, 2};
  static const int64_t z[] = {1, 2, 6, 8};
  ck_assert_int_eq(resize_status("linear", "align_corners", s2, 0, NULL), FL_OK);
  ck_assert_int_eq(resize_status(NULL, NULL, NULL, 0, z), FL_OK);
  ck_assert_int_eq(resize_status("cubic", NULL, s2, 0, NULL), FL_ENOTSUP);
  ck_assert_int_eq(resize_status("nearest", "tf_crop_and_resize", s2, 0, NULL), FL_ENOTSUP);
  ck_assert_int_eq(resize_status("nearest", NULL, s2, 1, NULL), FL_EINVAL); /* computed */
  ck_assert_int_eq(resize_status("nearest", NULL, s2, 0, z), FL_EINVAL);    /* both */
  ck_assert_int_eq(resize_status("nearest", NULL, NULL, 0, NULL), FL_EINVAL); /* neither */
  ck_assert_int_eq(resize_status("linear", NULL, sc, 0, NULL), FL_ENOTSUP); /* dim 0 */
  ck_assert_int_eq(resize_status("nearest", NULL, sc, 0, NULL), FL_OK);
}
END_TEST

/* -------------------------------------------------------------- Einsum */

/* Naive einsum of a and b for a parsed "A,B->Y" (letters only) in double:
 * every assignment of the letters, y[Y] += a[A] * b[B]. */
static void einsum_ref(const char *ta, const char *tb, const char *ty, const int64_t *size,
                       const float *a, const float *b, double *y, size_t yn) {
  char letters[16] = {0};
  int nl = 0;
  for (const char *s = ta; *s; s++)
    if (!strchr(letters, *s)) letters[nl++] = *s;
  for (const char *s = tb; *s; s++)
    if (!strchr(letters, *s)) letters[nl++] = *s;
  int64_t val[128] = {0}, ls[16];
  for (int i = 0; i < nl; i++) ls[i] = size[(int)letters[i]];
  memset(y, 0, yn * sizeof *y);
  size_t total = 1;
  for (int i = 0; i < nl; i++) total *= (size_t)ls[i];
  for (size_t o = 0; o < total; o++) {
    int64_t idx[16];
    unflat(o, nl, ls, idx);
    for (int i = 0; i < nl; i++) val[(int)letters[i]] = idx[i];
    size_t ia = 0, ib = 0, iy = 0;
    for (const char *s = ta; *s; s++) ia = ia * (size_t)size[(int)*s] + (size_t)val[(int)*s];
    for (const char *s = tb; *s; s++) ib = ib * (size_t)size[(int)*s] + (size_t)val[(int)*s];
    for (const char *s = ty; *s; s++) iy = iy * (size_t)size[(int)*s] + (size_t)val[(int)*s];
    y[iy] += (double)a[ia] * b[ib];
  }
}

/* eq as given to the node; ta, tb, ty its terms (ty explicit). */
static void check_einsum(const char *eq, const char *ta, const char *tb, const char *ty) {
  int64_t size[128] = {0};
  static const int64_t dims[] = {2, 3, 4, 5, 3, 2, 4};
  int k = 0;
  for (const char *t = ta; *t; t++)
    if (!size[(int)*t]) size[(int)*t] = dims[k++ % 7];
  for (const char *t = tb; *t; t++)
    if (!size[(int)*t]) size[(int)*t] = dims[k++ % 7];
  int64_t sa[8], sb[8], sy[8];
  const int na = (int)strlen(ta), nb = (int)strlen(tb), ny = (int)strlen(ty);
  for (int i = 0; i < na; i++) sa[i] = size[(int)ta[i]];
  for (int i = 0; i < nb; i++) sb[i] = size[(int)tb[i]];
  for (int i = 0; i < ny; i++) sy[i] = size[(int)ty[i]];
  harness h;
  uint64_t s = 51;
  h_init(&h, "Einsum");
  h_f32(&h, "a", na, sa, &s, -1, 1, 0);
  h_f32(&h, "b", nb, sb, &s, -1, 1, 0);
  h_as(&h, "equation", eq);
  h_outs(&h, 1);
  h_ready(&h);
  h_expect_shape(&h, 0, ny, sy);
  h_fwd(&h);
  const fl_gtensor *y = h_y(&h, 0);
  double *want = malloc((y->n ? y->n : 1) * sizeof *want);
  einsum_ref(ta, tb, ty, size, h_x(&h, 0)->data, h_x(&h, 1)->data, want, y->n);
  expect_close(y->data, want, y->n, 1e-5, eq);
  free(want);
  h_gradcheck(&h, eq, 1, 1e-3, 2e-3, 2e-3);
  h_free(&h);
}

START_TEST(test_einsum) {
  static const char *const eqs[][4] = {
      {"bij,bjk->bik", "bij", "bjk", "bik"},     {"bhqd,bhkd->bhqk", "bhqd", "bhkd", "bhqk"},
      {"bhqk,bhkd->bhqd", "bhqk", "bhkd", "bhqd"}, {"bi,bi->b", "bi", "bi", "b"},
      {"ij,jk->ik", "ij", "jk", "ik"},           {"ij, jk", "ij", "jk", "ik"},
      {"bij,bjk->bki", "bij", "bjk", "bki"},     {"bji,bjk->bik", "bji", "bjk", "bik"},
      {"ibj,jkb->kbi", "ibj", "jkb", "kbi"},     {"xy,zy->zx", "xy", "zy", "zx"},
      {"bn,bm->bnm", "bn", "bm", "bnm"},         {"i,i->", "i", "i", ""},
      {"BHq,Hqk->kBH", "BHq", "Hqk", "kBH"}};
  for (size_t i = 0; i < sizeof eqs / sizeof eqs[0]; i++)
    check_einsum(eqs[i][0], eqs[i][1], eqs[i][2], eqs[i][3]);
}
END_TEST

static fl_status einsum_status(const char *eq, int nin, int ra, const int64_t *sa, int rb,
                               const int64_t *sb) {
  harness h;
  uint64_t s = 1;
  h_init(&h, "Einsum");
  h_f32(&h, "a", ra, sa, &s, 0, 1, 0);
  if (nin > 1) h_f32(&h, "b", rb, sb, &s, 0, 1, 0);
  if (nin > 2) h_f32(&h, "c", rb, sb, &s, 0, 1, 0);
  h_as(&h, "equation", eq);
  h_outs(&h, 1);
  const fl_status st = h_infer(&h);
  h_free(&h);
  return st;
}

START_TEST(test_einsum_refusals) {
  const int64_t s23[] = {2, 3}, s33[] = {3, 3}, s34[] = {3, 4}, s44[] = {4, 4};
  ck_assert_int_eq(einsum_status("ij,jk->ik", 2, 2, s23, 2, s34), FL_OK);
  ck_assert_int_eq(einsum_status("ij->ji", 1, 2, s23, 0, NULL), FL_ENOTSUP);
  ck_assert_int_eq(einsum_status("ij,jk,kl->il", 3, 2, s33, 2, s33), FL_ENOTSUP);
  ck_assert_int_eq(einsum_status("...ij,...jk->...ik", 2, 2, s23, 2, s34), FL_ENOTSUP);
  ck_assert_int_eq(einsum_status("ii,ij->j", 2, 2, s33, 2, s34), FL_ENOTSUP);
  ck_assert_int_eq(einsum_status("ij,jk->k", 2, 2, s23, 2, s34), FL_ENOTSUP); /* i summed */
  ck_assert_int_eq(einsum_status("ij,jk->ikk", 2, 2, s23, 2, s34), FL_ENOTSUP);
  ck_assert_int_eq(einsum_status("ij,jk->ikz", 2, 2, s23, 2, s34), FL_EINVAL);
  ck_assert_int_eq(einsum_status("ij,jk->ik", 2, 2, s23, 2, s44), FL_EINVAL); /* j: 3 vs 4 */
  ck_assert_int_eq(einsum_status("ijk,jk->ik", 2, 2, s23, 2, s34), FL_EINVAL); /* rank */
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF); /* the refusal tests log their errors */
  Suite *s = suite_create("ops_shape2");
  TCase *tc = tcase_create("ops");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_pad);
  tcase_add_test(tc, test_pad_refusals);
  tcase_add_test(tc, test_tile);
  tcase_add_test(tc, test_resize);
  tcase_add_test(tc, test_resize_refusals);
  tcase_add_test(tc, test_einsum);
  tcase_add_test(tc, test_einsum_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
