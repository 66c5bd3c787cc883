/* test_ops_rnn.c - unit tests of the recurrent ops (trainer/graph/ops_rnn.c):
 * RNN, GRU and LSTM built as one hand-made node each (graph_ops_harness.h),
 * every direction, with and without initial states and bias, GRU with both
 * linear_before_reset, RNN with Tanh and Relu, sequences of unequal
 * lengths (sequence_lens, zero included).  The forward is compared
 * with a naive double-precision reference written from ONNX's equations,
 * the backward (through time) with central finite differences of a fixed
 * random weighting of every output, then its accumulate path.  The
 * refusals (peepholes, layout, clip, activations, input_forget, shapes,
 * lengths beyond X's) are checked too. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "graph_ops_harness.h"

/* One case: the op, its geometry and what is given. */
typedef struct rcase {
  const char *op;     /* "RNN" | "GRU" | "LSTM" */
  const char *dir;    /* direction attribute, NULL = absent (forward) */
  int T, B, I, H;
  int bias, h0, c0;   /* inputs given */
  int lbr, relu;      /* GRU linear_before_reset; RNN activations Relu */
  int nout;
  int lens;           /* sequence_lens given: T, then 1, 0, T-1, ... */
} rcase;

/* Case k's sequence length of batch row b. */
static int len_of(const rcase *k, int b) {
  if (!k->lens) return k->T;
  static const int pattern[4] = {-1, 1, 0, -2};
  const int p = pattern[b % 4];
  return p == -1 ? k->T : p == -2 ? k->T - 1 : p;
}

static int gates_of(const char *op) { return !strcmp(op, "LSTM") ? 4 : !strcmp(op, "GRU") ? 3 : 1; }
static int dirs_of(const rcase *k) { return k->dir && !strcmp(k->dir, "bidirectional") ? 2 : 1; }

static double sg(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The pre-activation of gate q, unit j, batch b: x W^T + Wb, and, unless
 * rec is 0, h R^T + Rb. */
static double pre(const rcase *k, const float *x, const float *W, const float *R,
                  const float *Bi, const double *h, int q, int j, int rec) {
  const int G = gates_of(k->op), row = q * k->H + j;
  double s = Bi ? Bi[row] : 0.0;
  for (int i = 0; i < k->I; i++) s += (double)x[i] * W[row * k->I + i];
  if (!rec) return s;
  if (Bi) s += Bi[G * k->H + row];
  for (int i = 0; i < k->H; i++) s += h[i] * R[row * k->H + i];
  return s;
}

/* One cell step for batch row x (ONNX's equations) from h, c into hn, cn. */
static void ref_step(const rcase *k, const float *x, const float *W, const float *R,
                     const float *Bi, const double *h, const double *c, double *hn, double *cn) {
  const int H = k->H;
  for (int j = 0; j < H; j++) {
    if (!strcmp(k->op, "RNN")) {
      const double a = pre(k, x, W, R, Bi, h, 0, j, 1);
      hn[j] = k->relu ? (a > 0 ? a : 0) : tanh(a);
    } else if (!strcmp(k->op, "LSTM")) {
      const double i = sg(pre(k, x, W, R, Bi, h, 0, j, 1)), o = sg(pre(k, x, W, R, Bi, h, 1, j, 1));
      const double f = sg(pre(k, x, W, R, Bi, h, 2, j, 1)), cc = tanh(pre(k, x, W, R, Bi, h, 3, j, 1));
      cn[j] = f * c[j] + i * cc;
      hn[j] = o * tanh(cn[j]);
    } else {
      const double z = sg(pre(k, x, W, R, Bi, h, 0, j, 1));
      double a = pre(k, x, W, R, Bi, h, 2, j, 0), hr = Bi ? Bi[5 * H + j] : 0.0;
      for (int i = 0; i < H; i++) {
        const double r = sg(pre(k, x, W, R, Bi, h, 1, i, 1));
        if (k->lbr)
          hr += h[i] * R[(2 * H + j) * H + i];
        else
          hr += r * h[i] * R[(2 * H + j) * H + i];
      }
      const double rj = sg(pre(k, x, W, R, Bi, h, 1, j, 1));
      a += k->lbr ? rj * hr : hr;
      hn[j] = (1 - z) * tanh(a) + z * h[j];
    }
  }
}

/* Reference Y [T, D, B, H], Y_h, Y_c [D, B, H]. */
static void ref_forward(const rcase *k, harness *h, double *y, double *yh, double *yc) {
  const int D = dirs_of(k), G = gates_of(k->op), T = k->T, B = k->B, H = k->H;
  const int rev0 = k->dir && !strcmp(k->dir, "reverse");
  const fl_gtensor *X = h_x(h, 0), *W = h_x(h, 1), *R = h_x(h, 2);
  const float *Bi = h->node.n_in > 3 && h->in[3] >= 0 ? h_x(h, 3)->data : NULL;
  const float *H0 = k->h0 ? h_x(h, 5)->data : NULL, *C0 = k->c0 ? h_x(h, 6)->data : NULL;
  double hs[64], cs[64], hn[64], cn[64];
  for (int d = 0; d < D; d++) {
    const int rev = d ? 1 : rev0;
    for (int b = 0; b < B; b++) {
      for (int j = 0; j < H; j++) {
        hs[j] = H0 ? H0[(d * B + b) * H + j] : 0.0;
        cs[j] = C0 ? C0[(d * B + b) * H + j] : 0.0;
      }
      for (int j = 0; j < H; j++)
        for (int t = 0; t < T; t++) y[((t * D + d) * B + b) * H + j] = 0.0;
      for (int s = 0; s < T; s++) {
        const int t = rev ? T - 1 - s : s;
        if (t >= len_of(k, b)) continue;
        ref_step(k, X->data + (t * B + b) * k->I, W->data + d * G * H * k->I,
                 R->data + d * G * H * H, Bi ? Bi + d * 2 * G * H : NULL, hs, cs, hn, cn);
        memcpy(hs, hn, sizeof hs);
        memcpy(cs, cn, sizeof cs);
        for (int j = 0; j < H; j++) y[((t * D + d) * B + b) * H + j] = hs[j];
      }
      for (int j = 0; j < H; j++) {
        yh[(d * B + b) * H + j] = hs[j];
        yc[(d * B + b) * H + j] = cs[j];
      }
    }
  }
}

/* Build the node of case k (seeded data), bound. */
static void build(harness *h, const rcase *k, uint64_t seed) {
  const int D = dirs_of(k), G = gates_of(k->op);
  const int64_t xs[3] = {k->T, k->B, k->I}, ws[3] = {D, G * k->H, k->I};
  const int64_t rs[3] = {D, G * k->H, k->H}, bs[2] = {D, 2 * G * k->H}, hs[3] = {D, k->B, k->H};
  uint64_t s = seed;
  h_init(h, k->op);
  h_f32(h, "X", 3, xs, &s, -1.0, 1.0, 0);
  h_f32(h, "W", 3, ws, &s, -0.6, 0.6, 0);
  h_f32(h, "R", 3, rs, &s, -0.6, 0.6, 0);
  if (k->bias || k->h0 || k->c0 || k->lens) {
    if (k->bias) h_f32(h, "B", 2, bs, &s, -0.5, 0.5, 0);
    else h_none(h);
  }
  int64_t lens[8];
  const int64_t ls[1] = {k->B};
  for (int b = 0; b < k->B && b < 8; b++) lens[b] = len_of(k, b);
  if (k->lens) h_i64(h, "sequence_lens", 1, ls, lens);
  else if (k->h0 || k->c0) h_none(h);
  if (k->h0 || k->c0) {
    if (k->h0) h_f32(h, "initial_h", 3, hs, &s, -0.8, 0.8, 0);
    else h_none(h);
  }
  if (k->c0) h_f32(h, "initial_c", 3, hs, &s, -0.8, 0.8, 0);
  h_ai(h, "hidden_size", k->H);
  if (k->dir) h_as(h, "direction", k->dir);
  if (k->lbr) h_ai(h, "linear_before_reset", 1);
  if (k->relu) h_as(h, "activations", D == 2 ? "Relu,Relu" : "Relu");
  h_outs(h, k->nout);
  h_ready(h);
}

static void check_case(const rcase *k) {
  harness h;
  char what[96];
  snprintf(what, sizeof what, "%.4s %.13s b%d h%d c%d lbr%d relu%d nout%d lens%d", k->op,
           k->dir ? k->dir : "-", k->bias, k->h0, k->c0, k->lbr, k->relu, k->nout, k->lens);
  build(&h, k, 1234 + (uint64_t)k->H);
  const int D = dirs_of(k);
  const int64_t ys[4] = {k->T, D, k->B, k->H};
  h_expect_shape(&h, 0, 4, ys);
  for (int o = 1; o < k->nout; o++) h_expect_shape(&h, o, 3, ys + 1);
  const size_t ny = (size_t)(k->T * D * k->B * k->H), nh = (size_t)(D * k->B * k->H);
  double *y = calloc(ny, sizeof *y), *yh = calloc(nh, sizeof *yh), *yc = calloc(nh, sizeof *yc);
  ref_forward(k, &h, y, yh, yc);
  h_fwd(&h);
  expect_close(h_y(&h, 0)->data, y, ny, 1e-5, what);
  if (k->nout > 1) expect_close(h_y(&h, 1)->data, yh, nh, 1e-5, what);
  if (k->nout > 2) expect_close(h_y(&h, 2)->data, yc, nh, 1e-5, what);
  free(y);
  free(yh);
  free(yc);
  h_gradcheck(&h, what, k->nout, 1e-3, 2e-3, 2e-3);
  h_free(&h);
}

static const char *const dirs[] = {NULL, "reverse", "bidirectional"};

START_TEST(test_lstm) {
  for (int dir = 0; dir < 3; dir++)
    for (int given = 0; given < 3; given++) {
      const rcase k = {"LSTM", dirs[dir], 4, 2, 3, 3, given > 0, given > 0, given > 1, 0, 0,
                       given == 1 ? 2 : 3, 0};
      check_case(&k);
    }
  const rcase one = {"LSTM", "bidirectional", 1, 3, 2, 2, 1, 1, 0, 0, 0, 1, 0};
  check_case(&one);
  for (int dir = 0; dir < 3; dir++) {
    const rcase k = {"LSTM", dirs[dir], 4, 4, 2, 3, dir != 1, dir > 0, dir > 0, 0, 0, 3, 1};
    check_case(&k);
  }
}
END_TEST

START_TEST(test_gru) {
  for (int dir = 0; dir < 3; dir++)
    for (int lbr = 0; lbr < 2; lbr++)
      for (int given = 0; given < 2; given++) {
        const rcase k = {"GRU", dirs[dir], 4, 2, 3, 3, given, given, 0, lbr, 0, 2, 0};
        check_case(&k);
        const rcase l = {"GRU", dirs[dir], 3, 4, 2, 3, given, !given, 0, lbr, 0, 2, 1};
        check_case(&l);
      }
}
END_TEST

START_TEST(test_rnn) {
  for (int dir = 0; dir < 3; dir++)
    for (int relu = 0; relu < 2; relu++)
      for (int given = 0; given < 2; given++) {
        const rcase k = {"RNN", dirs[dir], 4, 2, 3, 3, given, given, 0, 0, relu, 2 - given, 0};
        check_case(&k);
        const rcase l = {"RNN", dirs[dir], 3, 4, 2, 3, given, 1, 0, 0, relu, 2, 1};
        check_case(&l);
      }
}
END_TEST

/* A node of op whose weights are shaped for shape_op's gates: the infer
 * status after edit. */
static fl_status refused_as(const char *op, const char *shape_op, void (*edit)(harness *h)) {
  harness h;
  uint64_t s = 5;
  const int G = gates_of(shape_op);
  const int64_t xs[3] = {2, 2, 3}, ws[3] = {1, G * 2, 3}, rs[3] = {1, G * 2, 2};
  h_init(&h, op);
  h_f32(&h, "X", 3, xs, &s, -1, 1, 0);
  h_f32(&h, "W", 3, ws, &s, -1, 1, 0);
  h_f32(&h, "R", 3, rs, &s, -1, 1, 0);
  h_ai(&h, "hidden_size", 2);
  edit(&h);
  h_outs(&h, 1);
  const fl_status st = h_infer(&h);
  h_free(&h);
  return st;
}

static fl_status refused(const char *op, void (*edit)(harness *h)) {
  return refused_as(op, op, edit);
}

static void e_none(harness *h) { (void)h; }
static void e_layout(harness *h) { h_ai(h, "layout", 1); }
static void e_clip(harness *h) { h_af(h, "clip", 3.0f); }
static void e_forget(harness *h) { h_ai(h, "input_forget", 1); }
static void e_acts(harness *h) { h_as(h, "activations", "Sigmoid,Relu,Tanh"); }
static void e_rnn_acts(harness *h) { h_as(h, "activations", "Sigmoid"); }
static void e_dir(harness *h) { h_as(h, "direction", "sideways"); }
static void e_lens(harness *h) {
  const int64_t s1[1] = {2}, v[2] = {2, 3}; /* X holds 2 steps */
  h_none(h);
  h_i64(h, "sequence_lens", 1, s1, v);
}
static void e_peep(harness *h) {
  uint64_t s = 9;
  const int64_t ps[2] = {1, 6};
  for (int i = 0; i < 4; i++) h_none(h);
  h_f32(h, "P", 2, ps, &s, -1, 1, 0);
}

START_TEST(test_refusals) {
  fl_log_set_level(FL_LOG_OFF);
  ck_assert_int_eq(refused("LSTM", e_none), FL_OK);
  ck_assert_int_eq(refused("GRU", e_none), FL_OK);
  ck_assert_int_eq(refused("RNN", e_none), FL_OK);
  ck_assert_int_eq(refused("LSTM", e_layout), FL_ENOTSUP);
  ck_assert_int_eq(refused("GRU", e_clip), FL_ENOTSUP);
  ck_assert_int_eq(refused("LSTM", e_forget), FL_ENOTSUP);
  ck_assert_int_eq(refused("LSTM", e_acts), FL_ENOTSUP);
  ck_assert_int_eq(refused("RNN", e_rnn_acts), FL_ENOTSUP);
  ck_assert_int_eq(refused("GRU", e_dir), FL_EINVAL);
  ck_assert_int_eq(refused_as("GRU", "LSTM", e_none), FL_EINVAL); /* W of 4 gates */
  ck_assert_int_eq(refused("LSTM", e_lens), FL_EINVAL);
  ck_assert_int_eq(refused("LSTM", e_peep), FL_ENOTSUP);
  fl_log_set_level(FL_LOG_INFO);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ops_rnn");
  TCase *tc = tcase_create("rnn");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_lstm);
  tcase_add_test(tc, test_gru);
  tcase_add_test(tc, test_rnn);
  tcase_add_test(tc, test_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
