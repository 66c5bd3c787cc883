/* test_graph_ops_cuda.c - the CUDA twins of the graph engine's ops
 * (forward_cuda / backward_cuda of trainer/graph/ops_*.c) against their
 * CPU ops: each case builds the same node twice (graph_ops_harness.h), runs
 * one on the host and one with its float tensors, scratch and saved buffers
 * on the device (bound with c->stream set, as a gpu graph binds), and
 * compares outputs and input gradients, then that the device backward
 * accumulates.  Errors are relative to the largest magnitude (cuBLAS,
 * cuDNN and the device reductions add in other orders).  SKIPs (exit 77)
 * without a CUDA device. */
#include <config.h>

#include "cuda_testutil.h"
#include "fl_log.h"
#include "graph_ops_harness.h"

#define TOL 1e-4

static void *g_stream;

/* Move every float tensor, ws and saved of d to the device (host copies
 * freed); int64 data stays on the host, as on a gpu graph. */
static void d_to_device(harness *d) {
  for (int i = 0; i < d->nt; i++) {
    fl_gtensor *t = &d->t[i];
    if (t->dtype != FL_G_F32 || !t->data) continue;
    float *dv = dev_floats(t->data, t->n ? t->n : 1);
    free(t->data);
    t->data = dv;
  }
  free(d->node.ws);
  free(d->node.saved);
  float *zero = calloc(d->node.ws_floats + d->node.saved_floats + 1, sizeof *zero);
  d->node.ws = dev_floats(zero, d->node.ws_floats + 1);
  d->node.saved = dev_floats(zero, d->node.saved_floats + 1);
  free(zero);
}

static void d_free(harness *d) {
  if (d->node.op->free_state) d->node.op->free_state(&d->node);
  for (int i = 0; i < d->nt; i++) {
    fl_gtensor *t = &d->t[i];
    if (t->dtype == FL_G_F32) {
      fl_cuda_free(t->data);
      fl_cuda_free(t->grad);
    } else {
      free(t->idata);
    }
  }
  fl_cuda_free(d->node.ws);
  fl_cuda_free(d->node.saved);
  for (int i = 0; i < 4; i++) free(d->w[i]);
}

static float *to_host(const float *dev, size_t n) {
  float *h = malloc((n ? n : 1) * sizeof *h);
  ck_assert_int_eq(fl_cuda_copy_to_host(h, dev, n * sizeof *h, g_stream), FL_OK);
  return h;
}

static void expect_near(const char *what, const float *cpu, const float *gpu, size_t n,
                        double factor) {
  double scale = 1e-6, err = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(factor * cpu[i]));
  for (size_t i = 0; i < n; i++) {
    const double e = fabs(factor * cpu[i] - gpu[i]);
    if (e > err || isnan(gpu[i])) err = isnan(gpu[i]) ? INFINITY : e, at = i;
  }
  ck_assert_msg(err / scale <= TOL, "%s: error %g (relative to %g) at %zu", what, err, scale, at);
}

typedef void (*build_fn)(harness *h, int variant);

/* Build the node on both sides, compare forward, backward and the device
 * backward's accumulation. */
static void compare(const char *what, build_fn build, int variant, int nouts) {
  harness h, d;
  build(&h, variant);
  h_ready(&h);
  build(&d, variant);
  d.c = h.c;
  d.c.t = d.t;
  d.c.stream = g_stream;
  ck_assert_int_eq(h_infer(&d), FL_OK);
  d_to_device(&d);
  h_fwd(&h);
  ck_assert_int_eq(d.node.op->forward_cuda(&d.node, &d.c), FL_OK);
  for (int o = 0; o < nouts; o++) {
    float *y = to_host(h_y(&d, o)->data, h_y(&h, o)->n);
    expect_near(what, h_y(&h, o)->data, y, h_y(&h, o)->n, 1.0);
    free(y);
  }
  if (!h.c.training) goto done;
  /* Backward: the same output weights on both sides. */
  uint64_t s = 99;
  for (int o = 0; o < nouts; o++) {
    const size_t n = h_y(&h, o)->n;
    h.w[o] = malloc(n * sizeof(float));
    gc_fill(h.w[o], n, &s, -1, 1);
    h_y(&h, o)->grad = calloc(n, sizeof(float));
    h_y(&d, o)->grad = dev_floats(h.w[o], n);
  }
  float *zeros = calloc(64 * 1024, sizeof(float));
  for (int i = 0; i < h.node.n_in; i++)
    if (h_diff(&h, i)) {
      ck_assert_uint_le(h_x(&h, i)->n, 64 * 1024);
      h_x(&h, i)->grad = calloc(h_x(&h, i)->n, sizeof(float));
      h_x(&d, i)->grad = dev_floats(zeros, h_x(&h, i)->n);
    }
  free(zeros);
  h_bwd(&h, 0);
  ck_assert_int_eq(d.node.op->backward_cuda(&d.node, &d.c, 0), FL_OK);
  for (int i = 0; i < h.node.n_in; i++) {
    if (!h_diff(&h, i)) continue;
    float *g = to_host(h_x(&d, i)->grad, h_x(&h, i)->n);
    char msg[96];
    snprintf(msg, sizeof msg, "%s: grad %d", what, i);
    expect_near(msg, h_x(&h, i)->grad, g, h_x(&h, i)->n, 1.0);
    free(g);
  }
  /* Again, accumulating: twice the gradient. */
  ck_assert_int_eq(d.node.op->forward_cuda(&d.node, &d.c), FL_OK);
  for (int o = 0; o < nouts; o++)
    ck_assert_int_eq(fl_cuda_copy_to_device(h_y(&d, o)->grad, h.w[o],
                                            h_y(&h, o)->n * sizeof(float), g_stream),
                     FL_OK);
  ck_assert_int_eq(d.node.op->backward_cuda(&d.node, &d.c, 0xffu), FL_OK);
  for (int i = 0; i < h.node.n_in; i++) {
    if (!h_diff(&h, i)) continue;
    float *g = to_host(h_x(&d, i)->grad, h_x(&h, i)->n);
    char msg[96];
    snprintf(msg, sizeof msg, "%s: accumulated grad %d", what, i);
    expect_near(msg, h_x(&h, i)->grad, g, h_x(&h, i)->n, 2.0);
    free(g);
  }
done:
  d_free(&d);
  h_free(&h);
}

/* ----------------------------------------------------------------- cases */

static void build_gemm(harness *h, int variant) {
  uint64_t s = 1;
  const int64_t xs[] = {6, 9}, ws[] = {5, 9}, bs[] = {5};
  h_init(h, "Gemm");
  h_f32(h, "x", 2, xs, &s, -1, 1, 0);
  h_f32(h, "w", 2, ws, &s, -1, 1, 0);
  if (variant != 1) h_f32(h, "b", 1, bs, &s, -1, 1, 0);
  h_ai(h, "transB", 1);
  if (variant == 2) h_as(h, "flotilla_act", "relu");
  h_outs(h, 1);
}

static void build_conv(harness *h, int variant) {
  uint64_t s = 2;
  const int64_t xs[] = {2, 3, 6, 5}, ws[] = {4, 3, 3, 3}, bs[] = {4}, pads[] = {1, 1, 1, 1};
  h_init(h, "Conv");
  h_f32(h, "x", 4, xs, &s, -1, 1, 0);
  h_f32(h, "w", 4, ws, &s, -1, 1, 0);
  if (variant != 1) h_f32(h, "b", 1, bs, &s, -1, 1, 0);
  h_ais(h, "pads", pads, 4);
  if (variant == 2) h_as(h, "flotilla_act", "tanh");
  h_outs(h, 1);
}

static void build_maxpool(harness *h, int variant) {
  uint64_t s = 3;
  const int64_t xs[] = {2, 3, 6, 6}, k[] = {2, 2};
  (void)variant;
  h_init(h, "MaxPool");
  h_f32(h, "x", 4, xs, &s, -1, 1, 0);
  h_ais(h, "kernel_shape", k, 2);
  h_ais(h, "strides", k, 2);
  h_outs(h, 1);
}

static fl_status sync_identity(void *ctx, double *buf, size_t n) {
  (void)ctx, (void)buf, (void)n;
  return FL_OK;
}

/* variant 0: training; 1: eval; 2: training with the norm-sync hook. */
static void build_bn(harness *h, int variant) {
  uint64_t s = 4;
  const int64_t xs[] = {4, 3, 5}, cs[] = {3};
  h_init(h, "BatchNormalization");
  h_f32(h, "x", 3, xs, &s, -1, 2, 0);
  h_f32(h, "gamma", 1, cs, &s, 0.5, 1.5, 0);
  h_f32(h, "beta", 1, cs, &s, -0.5, 0.5, 0);
  h_f32(h, "rmean", 1, cs, &s, -0.1, 0.1, 0);
  h_f32(h, "rvar", 1, cs, &s, 0.9, 1.1, 0);
  h_as(h, "flotilla_act", "relu");
  h_outs(h, 1);
  h->c.training = variant != 1;
  if (variant == 2) h->c.norm_sync = sync_identity;
}

static void build_gn(harness *h, int variant) {
  uint64_t s = 5;
  const int64_t xs[] = {2, 6, 2, 2}, cs[] = {6};
  (void)variant;
  h_init(h, "GroupNormalization");
  h_f32(h, "x", 4, xs, &s, -1, 2, 0);
  h_f32(h, "scale", 1, cs, &s, 0.5, 1.5, 0);
  h_f32(h, "bias", 1, cs, &s, -0.5, 0.5, 0);
  h_ai(h, "num_groups", 3);
  h_as(h, "flotilla_act", "tanh");
  h_outs(h, 1);
}

static void build_act(harness *h, int variant) {
  uint64_t s = 6;
  const int64_t xs[] = {7, 9};
  h_init(h, variant ? "Tanh" : "Relu");
  h_f32(h, "x", 2, xs, &s, 0.1, 1.5, 1);
  h_outs(h, 1);
}

/* variant 0: same shapes; 1: [C] bias on [N, C]; 2: [1, C, 1, 1] on
 * [N, C, H, W]; 3: bias first, [D] + [B, T, D]. */
static void build_add(harness *h, int variant) {
  uint64_t s = 7;
  const int64_t nc[] = {5, 4}, c[] = {4}, nchw[] = {2, 3, 4, 5}, c111[] = {1, 3, 1, 1};
  const int64_t btd[] = {2, 3, 6}, d[] = {6};
  h_init(h, "Add");
  switch (variant) {
  case 0:
    h_f32(h, "a", 2, nc, &s, -1, 1, 0);
    h_f32(h, "b", 2, nc, &s, -1, 1, 0);
    break;
  case 1:
    h_f32(h, "a", 2, nc, &s, -1, 1, 0);
    h_f32(h, "b", 1, c, &s, -1, 1, 0);
    break;
  case 2:
    h_f32(h, "a", 4, nchw, &s, -1, 1, 0);
    h_f32(h, "b", 4, c111, &s, -1, 1, 0);
    break;
  default:
    h_f32(h, "b", 1, d, &s, -1, 1, 0);
    h_f32(h, "a", 3, btd, &s, -1, 1, 0);
    break;
  }
  h_outs(h, 1);
}

static void build_reshape(harness *h, int variant) {
  uint64_t s = 8;
  const int64_t xs[] = {2, 3, 4}, two[] = {2}, shp[] = {0, -1};
  h_init(h, variant ? "Flatten" : "Reshape");
  h_f32(h, "x", 3, xs, &s, -1, 1, 0);
  if (!variant) h_i64(h, "shape", 1, two, shp);
  h_outs(h, 1);
}

START_TEST(test_twins) {
  for (int v = 0; v < 3; v++) compare("Gemm", build_gemm, v, 1);
  for (int v = 0; v < 3; v++) compare("Conv", build_conv, v, 1);
  compare("MaxPool", build_maxpool, 0, 1);
  for (int v = 0; v < 3; v++) compare("BatchNormalization", build_bn, v, 1);
  compare("GroupNormalization", build_gn, 0, 1);
  for (int v = 0; v < 2; v++) compare("Relu/Tanh", build_act, v, 1);
  for (int v = 0; v < 4; v++) compare("Add", build_add, v, 1);
  for (int v = 0; v < 2; v++) compare("Reshape/Flatten", build_reshape, v, 1);
}
END_TEST

/* What the gpu does not take is refused at its first device call. */
START_TEST(test_refusals) {
  harness d;
  uint64_t s = 9;
  const int64_t as[] = {9, 6}, ws[] = {5, 9};
  h_init(&d, "Gemm");
  h_f32(&d, "x", 2, as, &s, -1, 1, 0);
  h_f32(&d, "w", 2, ws, &s, -1, 1, 0);
  h_ai(&d, "transA", 1);
  h_ai(&d, "transB", 1);
  h_outs(&d, 1);
  d.c.stream = g_stream;
  ck_assert_int_eq(h_infer(&d), FL_OK);
  d_to_device(&d);
  ck_assert_int_eq(d.node.op->forward_cuda(&d.node, &d.c), FL_ENOTSUP);
  d_free(&d);
  ck_assert_ptr_null(fl_gop_find("Softmax")->forward_cuda);
}
END_TEST

static Suite *make(void) {
  fl_log_set_level(FL_LOG_OFF);
  ck_assert_int_eq(fl_cuda_set_device(0), FL_OK);
  ck_assert_int_eq(fl_cuda_stream_create(&g_stream), FL_OK);
  Suite *s = suite_create("graph_ops_cuda");
  TCase *tc = tcase_create("twins");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_twins);
  tcase_add_test(tc, test_refusals);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cuda_test_main(make); }
