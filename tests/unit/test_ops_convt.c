/* test_ops_convt.c - unit tests of ConvTranspose (trainer/graph/ops_convt.c)
 * without the engine, through graph_ops_harness.h: the output shape and
 * values against a naive double-precision scatter straight from ONNX's
 * definition, backward against central finite differences and against the
 * same definition's gradients, accumulation into input grads, an empty
 * batch, and the refusals (auto_pad, output_shape, 3-D, shapes). */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_ops_harness.h"

typedef struct convt_case {
  int64_t N, C, H, W, O, kh, kw, group;
  int64_t sh, sw, dh, dw, pt, pl, pb, pr, oph, opw;
  int one_d, bias;
} convt_case;

static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1,
                        int64_t op) {
  return s * (in - 1) + op + (k - 1) * d + 1 - p0 - p1;
}

/* got within tol of want, scaled by want's largest magnitude. */
static void close_scaled(const float *got, const double *want, size_t n, double tol,
                         const char *what) {
  double big = 0.0;
  for (size_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1.0 + big), "%s[%zu]: %.9g, want %.9g",
                  what, i, (double)got[i], want[i]);
}

/* Every (input element, tap) pair of case k that lands inside Y: calls
 * f(ctx, x index, w index, y index). */
static void scatter(const convt_case *k, int64_t oh, int64_t ow,
                    void (*f)(void *, int64_t, int64_t, int64_t), void *ctx) {
  const int64_t Cg = k->C / k->group, Og = k->O / k->group;
  for (int64_t n = 0; n < k->N; n++)
    for (int64_t c = 0; c < k->C; c++)
      for (int64_t i = 0; i < k->H; i++)
        for (int64_t j = 0; j < k->W; j++)
          for (int64_t og = 0; og < Og; og++)
            for (int64_t u = 0; u < k->kh; u++)
              for (int64_t v = 0; v < k->kw; v++) {
                const int64_t yy = i * k->sh - k->pt + u * k->dh;
                const int64_t yx = j * k->sw - k->pl + v * k->dw;
                if (yy < 0 || yy >= oh || yx < 0 || yx >= ow) continue;
                const int64_t o = c / Cg * Og + og;
                f(ctx, ((n * k->C + c) * k->H + i) * k->W + j,
                  ((c * Og + og) * k->kh + u) * k->kw + v, ((n * k->O + o) * oh + yy) * ow + yx);
              }
}

typedef struct ref {
  const float *x, *w, *dy;
  double *y, *dx, *dw;
} ref;

static void ref_fwd(void *p, int64_t xi, int64_t wi, int64_t yi) {
  ref *r = p;
  r->y[yi] += (double)r->x[xi] * r->w[wi];
}

static void ref_bwd(void *p, int64_t xi, int64_t wi, int64_t yi) {
  ref *r = p;
  r->dx[xi] += (double)r->dy[yi] * r->w[wi];
  r->dw[wi] += (double)r->dy[yi] * r->x[xi];
}

/* The case's tensors on h, and its attributes when attrs (not yet
 * inferred). */
static void build(harness *h, const convt_case *k, uint64_t *s, int attrs) {
  h_init(h, "ConvTranspose");
  const int nd = k->one_d ? 3 : 4;
  const int64_t xs4[] = {k->N, k->C, k->H, k->W}, xs3[] = {k->N, k->C, k->W};
  const int64_t Og = k->O / k->group;
  const int64_t ws4[] = {k->C, Og, k->kh, k->kw}, ws3[] = {k->C, Og, k->kw}, bs[] = {k->O};
  h_f32(h, "x", nd, k->one_d ? xs3 : xs4, s, -1, 1, 0);
  h_f32(h, "w", nd, k->one_d ? ws3 : ws4, s, -1, 1, 0);
  if (k->bias) h_f32(h, "b", 1, bs, s, -1, 1, 0);
  h_outs(h, 1);
  if (!attrs) return;
  static int64_t st[2], dl[2], pd[4], op[2];
  if (k->one_d) {
    st[0] = k->sw, dl[0] = k->dw, pd[0] = k->pl, pd[1] = k->pr, op[0] = k->opw;
  } else {
    st[0] = k->sh, st[1] = k->sw, dl[0] = k->dh, dl[1] = k->dw, op[0] = k->oph, op[1] = k->opw;
    pd[0] = k->pt, pd[1] = k->pl, pd[2] = k->pb, pd[3] = k->pr;
  }
  const size_t sp = k->one_d ? 1 : 2;
  h_ais(h, "strides", st, sp);
  h_ais(h, "dilations", dl, sp);
  h_ais(h, "pads", pd, 2 * sp);
  h_ais(h, "output_padding", op, sp);
  h_ai(h, "group", k->group);
}

static void check_case(const convt_case *k) {
  harness h;
  uint64_t s = 73;
  build(&h, k, &s, 1);
  h_ready(&h);
  const int64_t oh = out_size(k->H, k->kh, k->sh, k->dh, k->pt, k->pb, k->oph);
  const int64_t ow = out_size(k->W, k->kw, k->sw, k->dw, k->pl, k->pr, k->opw);
  const int64_t ys4[] = {k->N, k->O, oh, ow}, ys3[] = {k->N, k->O, ow};
  h_expect_shape(&h, 0, k->one_d ? 3 : 4, k->one_d ? ys3 : ys4);
  h_fwd(&h);
  const fl_gtensor *y = h_y(&h, 0);
  ref r = {.x = h_x(&h, 0)->data, .w = h_x(&h, 1)->data};
  r.y = calloc(y->n, sizeof *r.y);
  for (size_t i = 0; k->bias && i < y->n; i++)
    r.y[i] = h_x(&h, 2)->data[i / (size_t)(oh * ow) % (size_t)k->O];
  scatter(k, oh, ow, ref_fwd, &r);
  close_scaled(y->data, r.y, y->n, 1e-5, "ConvTranspose");
  /* Linear in each input: a large step keeps rounding out of the quotient. */
  h_gradcheck(&h, "ConvTranspose", 1, 3e-2, 2e-3, 3e-3);
  r.dy = h.w[0];
  r.dx = calloc(h_x(&h, 0)->n, sizeof *r.dx);
  r.dw = calloc(h_x(&h, 1)->n, sizeof *r.dw);
  scatter(k, oh, ow, ref_bwd, &r);
  close_scaled(h.analytic[0], r.dx, h_x(&h, 0)->n, 1e-5, "ConvTranspose dx");
  close_scaled(h.analytic[1], r.dw, h_x(&h, 1)->n, 1e-5, "ConvTranspose dW");
  free(r.y);
  free(r.dx);
  free(r.dw);
  h_free(&h);
}

START_TEST(test_convt) {
  /* N C H W O kh kw group, strides, dilations, pads (t l b r), output_padding, 1-D, bias */
  const convt_case cases[] = {
      /* stride 2, pad 1, output_padding 1 (PyTorch's doubling decoder) */
      {2, 3, 4, 5, 4, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1},
      /* groups 2, dilation 2, asymmetric pads */
      {2, 4, 3, 4, 6, 3, 2, 2, 1, 2, 2, 2, 0, 1, 1, 0, 0, 1, 0, 1},
      /* no bias, stride 3, output_padding past the end pads */
      {1, 2, 3, 3, 3, 2, 3, 1, 3, 2, 1, 1, 0, 1, 2, 0, 2, 1, 0, 0},
      /* stride 1, as large as the input (the column helpers' plane path) */
      {2, 3, 5, 6, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1},
      /* 1-D: stride 2, groups 2, dilation 2, pad, output_padding 1 */
      {2, 4, 1, 7, 2, 1, 3, 2, 2, 2, 1, 2, 0, 1, 0, 1, 0, 1, 1, 1},
      /* depthwise, kernel 2 stride 2 (a U-Net up step) */
      {1, 3, 4, 4, 3, 2, 2, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1},
      {2, 4, 3, 3, 2, 2, 2, 1, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}
END_TEST

START_TEST(test_convt_empty_batch) {
  const convt_case k = {0, 2, 3, 3, 2, 2, 2, 1, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1};
  harness h;
  uint64_t s = 5;
  build(&h, &k, &s, 1);
  h_ready(&h);
  const int64_t ys[] = {0, 2, 6, 6};
  h_expect_shape(&h, 0, 4, ys);
  fl_gtensor *y = h_y(&h, 0), *w = h_x(&h, 1), *b = h_x(&h, 2);
  y->grad = calloc(1, sizeof(float));
  w->grad = malloc(w->n * sizeof(float));
  b->grad = malloc(b->n * sizeof(float));
  for (size_t i = 0; i < w->n; i++) w->grad[i] = 5.0f;
  for (size_t i = 0; i < b->n; i++) b->grad[i] = 5.0f;
  h_fwd(&h);
  ck_assert_int_eq(h.node.op->backward(&h.node, &h.c, 0), FL_OK);
  for (size_t i = 0; i < w->n; i++) ck_assert_float_eq(w->grad[i], 0.0f);
  for (size_t i = 0; i < b->n; i++) ck_assert_float_eq(b->grad[i], 0.0f);
  h_free(&h);
}
END_TEST

/* A 2-D case (3x3 input and kernel) with one attribute must be refused
 * with code. */
static void refused(const char *attr, const int64_t *v, size_t nv, const char *s,
                    fl_status code) {
  const convt_case k = {1, 2, 3, 3, 2, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1};
  harness h;
  uint64_t seed = 9;
  build(&h, &k, &seed, 0);
  if (s) h_as(&h, attr, s);
  else h_ais(&h, attr, v, nv);
  ck_assert_int_eq(h_infer(&h), code);
  h_free(&h);
}

START_TEST(test_convt_refusals) {
  const int64_t os[] = {5, 5}, ks[] = {3, 2}, big[] = {3, 3, 3, 3}, neg[] = {-1, 0},
                zk[] = {0, 3};
  refused("auto_pad", NULL, 0, "SAME_UPPER", FL_ENOTSUP);
  refused("auto_pad", NULL, 0, "VALID", FL_ENOTSUP);
  refused("output_shape", os, 2, NULL, FL_ENOTSUP);
  refused("kernel_shape", ks, 2, NULL, FL_EINVAL);
  refused("kernel_shape", ks, 1, NULL, FL_EINVAL);
  refused("kernel_shape", zk, 2, NULL, FL_EINVAL);  /* 0: not the weight's 3 */
  refused("strides", big, 3, NULL, FL_EINVAL);      /* three values for two dims */
  refused("strides", big, 4, NULL, FL_EINVAL);
  refused("output_padding", neg, 2, NULL, FL_EINVAL);
  refused("dilations", neg + 1, 1, NULL, FL_EINVAL); /* one value for two dims */
  refused("pads", big, 4, NULL, FL_EINVAL); /* 5 - 6: nothing left */
  harness h;
  uint64_t s = 3;
  const int64_t x5[] = {1, 2, 3, 3, 3}, w5[] = {2, 1, 1, 1, 1}, x4[] = {1, 4, 3, 3},
                w4[] = {3, 2, 2, 2}, bs[] = {3};
  h_init(&h, "ConvTranspose"); /* 3-D */
  h_f32(&h, "x", 5, x5, &s, 0, 1, 0);
  h_f32(&h, "w", 5, w5, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_ENOTSUP);
  h_free(&h);
  h_init(&h, "ConvTranspose"); /* weight's dim 0 is not the input's channels */
  h_f32(&h, "x", 4, x4, &s, 0, 1, 0);
  h_f32(&h, "w", 4, w4, &s, 0, 1, 0);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
  const int64_t w4b[] = {4, 2, 2, 2};
  h_init(&h, "ConvTranspose"); /* bias of the wrong size: O is 2 * group 2 = 4 */
  h_f32(&h, "x", 4, x4, &s, 0, 1, 0);
  h_f32(&h, "w", 4, w4b, &s, 0, 1, 0);
  h_f32(&h, "b", 1, bs, &s, 0, 1, 0);
  h_ai(&h, "group", 2);
  h_outs(&h, 1);
  ck_assert_int_eq(h_infer(&h), FL_EINVAL);
  h_free(&h);
}
END_TEST

int main(void) {
  fl_log_set_level(FL_LOG_OFF); /* the refusal tests log their errors */
  Suite *s = suite_create("ops_convt");
  TCase *tc = tcase_create("convt");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_convt);
  tcase_add_test(tc, test_convt_empty_batch);
  tcase_add_test(tc, test_convt_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
