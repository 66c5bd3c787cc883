/* test_cuda_optim.c - the CUDA twins of fl_optim.h against their CPU twins.
 *
 * Every optimizer (Nesterov too), gradient merge, AMP unscaling and the
 * four casts run on the same random data on the CPU and on the device, over
 * several steps and over lists of tensors big and small enough to cross the
 * CUDA chunk and batch boundaries (more than 32 tensors, odd sizes, an
 * excluded name, an all-zero parameter and an all-zero gradient for the
 * LARS/LAMB norm cases).  Results must agree within 1e-6 relative (the
 * kernels are written to give the same bits; casts must be exact).  Bad
 * arguments give the CPU twin's code before anything is queued.
 *
 * Without a CUDA device (or in a --without-cuda tree) the program exits 77
 * at once, which automake reports as SKIP.  Check runs in-process
 * (CK_NOFORK): a CUDA context does not survive fork(). */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_device.h"
#include "fl_optim.h"

#include "cuda_testutil.h"

#define REL_TOL 1e-6
#define NT 37 /* tensors per list: more than one CUDA launch's 32 */

static uint64_t rng_state;

static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}

/* Uniform in [-1, 1). */
static float urand(void) { return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f; }

/* Largest relative difference between host a and device d (n floats); both
 * nan counts as equal, exactly one nan as a failure. */
static double max_rel_diff(const float *a, const float *d, size_t n) {
  float *h = malloc(n * sizeof(float));
  ck_assert_ptr_nonnull(h);
  ck_assert_int_eq(fl_cuda_copy_to_host(h, d, n * sizeof(float), NULL), FL_OK);
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(a[i]) || isnan(h[i])) {
      ck_assert_msg(isnan(a[i]) && isnan(h[i]), "element %zu: %g vs %g", i, (double)a[i],
                    (double)h[i]);
      continue;
    }
    if (a[i] == h[i]) continue;
    double m = fmax(fabs((double)a[i]), fabs((double)h[i]));
    double r = fabs((double)a[i] - (double)h[i]) / m;
    if (r > worst) worst = r;
  }
  free(h);
  return worst;
}

/* ---------------------------------------------------------------- optimizers */

/* One list of tensors on the host (cpu) and its twin on the device (gpu). */
struct twin {
  fl_optim_tensor cpu[NT], gpu[NT];
  char names[NT][24];
  float *grads[NT]; /* host grads, refilled every step */
};

static const size_t sizes[] = {1, 7, 4096, 4097, 100003, 256, 3, 16384, 65537, 12345, 33};

static void twin_init(struct twin *w, const fl_optim_hparams *hp) {
  int ns = fl_optim_state_count(hp->kind);
  for (int i = 0; i < NT; i++) {
    size_t n = sizes[i % (sizeof sizes / sizeof sizes[0])];
    snprintf(w->names[i], sizeof w->names[i], i % 4 == 1 ? "layer%d.bias" : "layer%d.weight", i);
    fl_optim_tensor *c = &w->cpu[i], *g = &w->gpu[i];
    memset(c, 0, sizeof *c);
    c->name = w->names[i];
    c->n = n;
    c->param = malloc(n * sizeof(float));
    w->grads[i] = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(c->param);
    ck_assert_ptr_nonnull(w->grads[i]);
    c->grad = w->grads[i];
    for (size_t j = 0; j < n; j++) c->param[j] = i == 5 ? 0.0f : urand(); /* zero ||p|| */
    if (ns >= 1) c->state1 = malloc(n * sizeof(float));
    if (ns >= 2) c->state2 = malloc(n * sizeof(float));
    *g = *c;
    g->param = dev_floats(c->param, n);
    void *d = NULL;
    ck_assert_int_eq(fl_cuda_malloc(&d, n * sizeof(float)), FL_OK);
    g->grad = d;
    g->state1 = g->state2 = NULL;
  }
  ck_assert_int_eq(fl_optim_init_state(hp, w->cpu, NT), FL_OK);
  for (int i = 0; i < NT; i++) {
    size_t n = w->cpu[i].n;
    if (ns >= 1) w->gpu[i].state1 = dev_floats(w->cpu[i].state1, n);
    if (ns >= 2) w->gpu[i].state2 = dev_floats(w->cpu[i].state2, n);
  }
}

/* Fresh gradients (tensor 7 all zero: zero ||g||), the same on both sides. */
static void twin_new_grads(struct twin *w, float scale) {
  for (int i = 0; i < NT; i++) {
    size_t n = w->cpu[i].n;
    for (size_t j = 0; j < n; j++) w->grads[i][j] = i == 7 ? 0.0f : scale * urand();
    ck_assert_int_eq(fl_cuda_copy_to_device((void *)w->gpu[i].grad, w->grads[i], n * sizeof(float),
                                            NULL),
                     FL_OK);
  }
}

static double twin_compare(struct twin *w) {
  double worst = 0.0;
  for (int i = 0; i < NT; i++) {
    size_t n = w->cpu[i].n;
    worst = fmax(worst, max_rel_diff(w->cpu[i].param, w->gpu[i].param, n));
    if (w->cpu[i].state1) worst = fmax(worst, max_rel_diff(w->cpu[i].state1, w->gpu[i].state1, n));
    if (w->cpu[i].state2) worst = fmax(worst, max_rel_diff(w->cpu[i].state2, w->gpu[i].state2, n));
  }
  return worst;
}

static void twin_free(struct twin *w) {
  for (int i = 0; i < NT; i++) {
    free(w->cpu[i].param);
    free(w->grads[i]);
    free(w->cpu[i].state1);
    free(w->cpu[i].state2);
    ck_assert_int_eq(fl_cuda_free(w->gpu[i].param), FL_OK);
    ck_assert_int_eq(fl_cuda_free((void *)w->gpu[i].grad), FL_OK);
    ck_assert_int_eq(fl_cuda_free(w->gpu[i].state1), FL_OK);
    ck_assert_int_eq(fl_cuda_free(w->gpu[i].state2), FL_OK);
  }
}

/* Loop index -> (kind, nesterov): 0..6 the kinds, 7 Nesterov momentum. */
static fl_optim_hparams hparams_for(int idx) {
  fl_optim_kind kind = idx == 7 ? FL_OPTIM_MOMENTUM : (fl_optim_kind)idx;
  fl_optim_hparams hp = fl_optim_hparams_default(kind);
  static const char *const exclude[] = {"bias"};
  hp.nesterov = idx == 7;
  if (hp.weight_decay == 0.0f) hp.weight_decay = 0.01f;
  if (kind == FL_OPTIM_LARS) hp.lars_coeff = 0.5f; /* a visible local lr */
  if (kind == FL_OPTIM_ADAGRAD) hp.initial_accumulator = 0.1f;
  hp.exclude_from_weight_decay = exclude;
  hp.n_exclude = 1;
  return hp;
}

START_TEST(optimizer_matches_cpu) {
  fl_optim_hparams hp = hparams_for(_i);
  struct twin w;
  rng_state = 0x9e3779b97f4a7c15ull + (uint64_t)_i;
  twin_init(&w, &hp);
  for (int step = 1; step <= 5; step++) {
    float lr = 0.01f * (float)step;
    twin_new_grads(&w, 0.1f);
    ck_assert_int_eq(fl_optim_step(&hp, w.cpu, NT, lr, step), FL_OK);
    ck_assert_int_eq(fl_optim_step_cuda(&hp, w.gpu, NT, lr, step, NULL), FL_OK);
    double worst = twin_compare(&w);
    ck_assert_msg(worst <= REL_TOL, "%s%s step %d: relative difference %g",
                  fl_optim_kind_name(hp.kind), hp.nesterov ? " (nesterov)" : "", step, worst);
  }
  twin_free(&w);
}
END_TEST

/* The same LAMB/LARS step twice from the same state gives the same bits
 * (fixed-order reductions), on a non-default stream. */
START_TEST(norms_deterministic) {
  fl_optim_kind kinds[] = {FL_OPTIM_LARS, FL_OPTIM_LAMB};
  void *stream = NULL;
  ck_assert_int_eq(fl_cuda_stream_create(&stream), FL_OK);
  for (int k = 0; k < 2; k++) {
    fl_optim_hparams hp = hparams_for((int)kinds[k]);
    struct twin a, b;
    rng_state = 42;
    twin_init(&a, &hp);
    rng_state = 42;
    twin_init(&b, &hp);
    rng_state = 7;
    twin_new_grads(&a, 0.1f);
    rng_state = 7;
    twin_new_grads(&b, 0.1f);
    ck_assert_int_eq(fl_optim_step_cuda(&hp, a.gpu, NT, 0.1f, 1, stream), FL_OK);
    ck_assert_int_eq(fl_optim_step_cuda(&hp, b.gpu, NT, 0.1f, 1, stream), FL_OK);
    ck_assert_int_eq(fl_cuda_stream_synchronize(stream), FL_OK);
    for (int i = 0; i < NT; i++) {
      size_t bytes = a.cpu[i].n * sizeof(float);
      float *x = malloc(bytes), *y = malloc(bytes);
      ck_assert_int_eq(fl_cuda_copy_to_host(x, a.gpu[i].param, bytes, NULL), FL_OK);
      ck_assert_int_eq(fl_cuda_copy_to_host(y, b.gpu[i].param, bytes, NULL), FL_OK);
      ck_assert_msg(memcmp(x, y, bytes) == 0, "%s tensor %d differs between runs",
                    fl_optim_kind_name(hp.kind), i);
      free(x);
      free(y);
    }
    twin_free(&a);
    twin_free(&b);
  }
  ck_assert_int_eq(fl_cuda_stream_destroy(stream), FL_OK);
}
END_TEST

START_TEST(optimizer_bad_args) {
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_ADAM);
  void *d = NULL;
  ck_assert_int_eq(fl_cuda_malloc(&d, 4 * 16 * sizeof(float)), FL_OK);
  float *p = d;
  fl_optim_tensor t = {"w", p, p + 16, p + 32, p + 48, 16};
  ck_assert_int_eq(fl_optim_step_cuda(NULL, &t, 1, 0.1f, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step_cuda(&hp, NULL, 1, 0.1f, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step_cuda(&hp, &t, 0, 0.1f, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step_cuda(&hp, &t, 1, -0.1f, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step_cuda(&hp, &t, 1, NAN, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step_cuda(&hp, &t, 1, 0.1f, 0, NULL), FL_EINVAL);
  fl_optim_tensor u = t;
  u.n = 0;
  ck_assert_int_eq(fl_optim_step_cuda(&hp, &u, 1, 0.1f, 1, NULL), FL_EINVAL);
  u = t;
  u.state2 = NULL; /* Adam needs two state buffers */
  ck_assert_int_eq(fl_optim_step_cuda(&hp, &u, 1, 0.1f, 1, NULL), FL_EINVAL);
  u = t;
  u.grad = p + 8; /* overlaps param */
  ck_assert_int_eq(fl_optim_step_cuda(&hp, &u, 1, 0.1f, 1, NULL), FL_EINVAL);
  u = t;
  u.param = NULL;
  ck_assert_int_eq(fl_optim_step_cuda(&hp, &u, 1, 0.1f, 1, NULL), FL_EINVAL);
  fl_optim_hparams bad = hp;
  bad.beta1 = 1.0f;
  ck_assert_int_eq(fl_optim_step_cuda(&bad, &t, 1, 0.1f, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_cuda_free(d), FL_OK);
}
END_TEST

/* ------------------------------------------------------------ gradient merge */

START_TEST(gradient_merge_matches_cpu) {
  enum { L = 5 };
  size_t n[L] = {1, 4097, 100003, 31, 16384};
  float *acc[L], *g[L], *dacc[L], *dg[L];
  rng_state = 99 + (uint64_t)_i;
  for (int i = 0; i < L; i++) {
    acc[i] = calloc(n[i], sizeof(float));
    g[i] = malloc(n[i] * sizeof(float));
    dacc[i] = dev_floats(acc[i], n[i]);
    dg[i] = dev_floats(acc[i], n[i]);
  }
  const int k = 4;
  for (int micro = 0; micro < k; micro++) {
    for (int i = 0; i < L; i++) {
      for (size_t j = 0; j < n[i]; j++) g[i][j] = urand();
      ck_assert_int_eq(fl_cuda_copy_to_device(dg[i], g[i], n[i] * sizeof(float), NULL), FL_OK);
    }
    ck_assert_int_eq(fl_gm_accumulate(acc, (const float *const *)g, n, L), FL_OK);
    ck_assert_int_eq(fl_gm_accumulate_cuda(dacc, (const float *const *)dg, n, L, NULL), FL_OK);
  }
  int avg = _i;
  ck_assert_int_eq(fl_gm_finalize(acc, n, L, k, avg), FL_OK);
  ck_assert_int_eq(fl_gm_finalize_cuda(dacc, n, L, k, avg, NULL), FL_OK);
  for (int i = 0; i < L; i++) {
    double r = max_rel_diff(acc[i], dacc[i], n[i]);
    ck_assert_msg(r <= REL_TOL, "tensor %d (avg %d): relative difference %g", i, avg, r);
    free(acc[i]);
    free(g[i]);
    ck_assert_int_eq(fl_cuda_free(dacc[i]), FL_OK);
    ck_assert_int_eq(fl_cuda_free(dg[i]), FL_OK);
  }
}
END_TEST

START_TEST(gradient_merge_bad_args) {
  void *d = NULL;
  ck_assert_int_eq(fl_cuda_malloc(&d, 64 * sizeof(float)), FL_OK);
  float *a[1] = {d}, *b[1] = {(float *)d + 32}, *null1[1] = {NULL};
  size_t n[1] = {32}, zero[1] = {0};
  ck_assert_int_eq(fl_gm_accumulate_cuda(a, NULL, n, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate_cuda(NULL, (const float *const *)b, n, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate_cuda(a, (const float *const *)b, n, 0, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate_cuda(a, (const float *const *)b, zero, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate_cuda(a, (const float *const *)a, n, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_gm_accumulate_cuda(null1, (const float *const *)b, n, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_gm_finalize_cuda(a, n, 1, 0, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_gm_finalize_cuda(a, NULL, 1, 2, 1, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_cuda_free(d), FL_OK);
}
END_TEST

/* ---------------------------------------------------------------------- AMP */

START_TEST(unscale_matches_cpu) {
  enum { L = 4 };
  size_t n[L] = {3, 70001, 4096, 129};
  float *t[L], *d[L];
  rng_state = 5;
  /* _i: 0 all finite, 1 an inf, 2 a nan (in different tensors). */
  for (int i = 0; i < L; i++) {
    t[i] = malloc(n[i] * sizeof(float));
    for (size_t j = 0; j < n[i]; j++) t[i][j] = 1000.0f * urand();
  }
  if (_i == 1) t[1][5000] = -INFINITY;
  if (_i == 2) t[3][128] = NAN;
  for (int i = 0; i < L; i++) d[i] = dev_floats(t[i], n[i]);
  int found_cpu = -1, found_gpu = -1;
  ck_assert_int_eq(fl_amp_check_finite_and_unscale(t, n, L, 3.0f, &found_cpu), FL_OK);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale_cuda(d, n, L, 3.0f, &found_gpu, NULL), FL_OK);
  ck_assert_int_eq(found_cpu, _i != 0);
  ck_assert_int_eq(found_gpu, found_cpu);
  for (int i = 0; i < L; i++) {
    double r = max_rel_diff(t[i], d[i], n[i]);
    ck_assert_msg(r <= REL_TOL, "tensor %d: relative difference %g", i, r);
    free(t[i]);
    ck_assert_int_eq(fl_cuda_free(d[i]), FL_OK);
  }
}
END_TEST

START_TEST(unscale_bad_args) {
  void *d = NULL;
  ck_assert_int_eq(fl_cuda_malloc(&d, 16 * sizeof(float)), FL_OK);
  float *a[1] = {d};
  size_t n[1] = {16}, zero[1] = {0};
  int found = 0;
  ck_assert_int_eq(fl_amp_check_finite_and_unscale_cuda(a, n, 1, 2.0f, NULL, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale_cuda(a, n, 1, 0.0f, &found, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale_cuda(a, n, 1, INFINITY, &found, NULL),
                   FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale_cuda(a, zero, 1, 2.0f, &found, NULL),
                   FL_EINVAL);
  ck_assert_int_eq(fl_amp_check_finite_and_unscale_cuda(NULL, n, 1, 2.0f, &found, NULL),
                   FL_EINVAL);
  ck_assert_int_eq(fl_cuda_free(d), FL_OK);
}
END_TEST

/* -------------------------------------------------------------------- casts */

/* All 65,536 fp16 and bf16 patterns to fp32, bit for bit. */
START_TEST(casts_from_16_exact) {
  enum { N = 65536 };
  uint16_t *h = malloc(N * sizeof(uint16_t));
  float *c = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
  void *dh = NULL, *df = NULL;
  for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
  ck_assert_int_eq(fl_cuda_malloc(&dh, N * sizeof(uint16_t)), FL_OK);
  ck_assert_int_eq(fl_cuda_malloc(&df, N * sizeof(float)), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_device(dh, h, N * sizeof(uint16_t), NULL), FL_OK);
  for (int bf = 0; bf < 2; bf++) {
    ck_assert_int_eq(bf ? fl_cast_bf16_to_f32(h, c, N) : fl_cast_f16_to_f32(h, c, N), FL_OK);
    ck_assert_int_eq(bf ? fl_cast_bf16_to_f32_cuda(dh, df, N, NULL)
                        : fl_cast_f16_to_f32_cuda(dh, df, N, NULL),
                     FL_OK);
    ck_assert_int_eq(fl_cuda_copy_to_host(g, df, N * sizeof(float), NULL), FL_OK);
    int i = 0; /* first mismatch (checks outside the loop: Check is slow per call) */
    while (i < N && memcmp(&c[i], &g[i], sizeof(float)) == 0) i++;
    ck_assert_msg(i == N, "%s 0x%04x: CPU %a, CUDA %a", bf ? "bf16" : "fp16", i,
                  (double)c[i % N], (double)g[i % N]);
  }
  free(h);
  free(c);
  free(g);
  ck_assert_int_eq(fl_cuda_free(dh), FL_OK);
  ck_assert_int_eq(fl_cuda_free(df), FL_OK);
}
END_TEST

/* fp32 to fp16 and bf16, bit for bit, over every 251st of the 2^32 fp32
 * patterns (all exponents, signs, nans, infs and subnormals) plus the
 * rounding boundaries around every fp16 and bf16 value. */
START_TEST(casts_to_16_exact) {
  const size_t chunk = (size_t)1 << 22;
  uint32_t *x = malloc(chunk * sizeof(uint32_t));
  uint16_t *c = malloc(chunk * sizeof(uint16_t)), *g = malloc(chunk * sizeof(uint16_t));
  void *dx = NULL, *dy = NULL;
  ck_assert_int_eq(fl_cuda_malloc(&dx, chunk * sizeof(uint32_t)), FL_OK);
  ck_assert_int_eq(fl_cuda_malloc(&dy, chunk * sizeof(uint16_t)), FL_OK);
  uint64_t next = 0;
  int boundaries_done = 0;
  while (!boundaries_done) {
    size_t m = 0;
    if (next < ((uint64_t)1 << 32)) {
      for (; m < chunk && next < ((uint64_t)1 << 32); m++, next += 251) x[m] = (uint32_t)next;
    } else {
      /* Around each 16-bit value's half-way points: upper 16 bits v, lower
       * 16 bits 0x0fff..0x1001 (fp16's 13 dropped bits) and 0x7fff..0x8001. */
      for (uint32_t v = 0; v < 65536; v++)
        for (uint32_t lo = 0; lo < 3; lo++) {
          x[m++] = (v << 16) | (0x0fffu + lo);
          x[m++] = (v << 16) | (0x7fffu + lo);
        }
      boundaries_done = 1;
    }
    ck_assert_int_eq(fl_cuda_copy_to_device(dx, x, m * sizeof(uint32_t), NULL), FL_OK);
    for (int bf = 0; bf < 2; bf++) {
      const float *src = (const float *)x;
      ck_assert_int_eq(bf ? fl_cast_f32_to_bf16(src, c, m) : fl_cast_f32_to_f16(src, c, m), FL_OK);
      ck_assert_int_eq(bf ? fl_cast_f32_to_bf16_cuda(dx, dy, m, NULL)
                          : fl_cast_f32_to_f16_cuda(dx, dy, m, NULL),
                       FL_OK);
      ck_assert_int_eq(fl_cuda_copy_to_host(g, dy, m * sizeof(uint16_t), NULL), FL_OK);
      size_t i = 0;
      while (i < m && c[i] == g[i]) i++;
      ck_assert_msg(i == m, "%s of 0x%08x: CPU 0x%04x, CUDA 0x%04x", bf ? "bf16" : "fp16",
                    x[i % m], c[i % m], g[i % m]);
    }
  }
  free(x);
  free(c);
  free(g);
  ck_assert_int_eq(fl_cuda_free(dx), FL_OK);
  ck_assert_int_eq(fl_cuda_free(dy), FL_OK);
}
END_TEST

START_TEST(casts_bad_args) {
  void *d = NULL;
  ck_assert_int_eq(fl_cuda_malloc(&d, 64), FL_OK);
  float *f = d;
  uint16_t *h = d;
  ck_assert_int_eq(fl_cast_f32_to_f16_cuda(NULL, h, 4, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_cast_f16_to_f32_cuda(h, NULL, 4, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_cast_f32_to_bf16_cuda(f, h + 2, 4, NULL), FL_EINVAL); /* overlap */
  ck_assert_int_eq(fl_cast_bf16_to_f32_cuda(NULL, NULL, 0, NULL), FL_OK);  /* n = 0 */
  ck_assert_int_eq(fl_cuda_free(d), FL_OK);
}
END_TEST

/* ------------------------------------------------------------ device helpers */

START_TEST(device_helpers) {
  void *a = NULL, *b = NULL, *s = NULL;
  unsigned char host[1000], back[1000];
  for (int i = 0; i < 1000; i++) host[i] = (unsigned char)(i * 7);
  ck_assert_int_eq(fl_cuda_malloc(NULL, 8), FL_EINVAL);
  ck_assert_int_eq(fl_cuda_malloc(&a, 0), FL_EINVAL);
  ck_assert_int_eq(fl_cuda_malloc(&a, sizeof host), FL_OK);
  ck_assert_int_eq(fl_cuda_malloc(&b, sizeof host), FL_OK);
  ck_assert_int_eq(fl_cuda_stream_create(&s), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_device(a, host, sizeof host, s), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_device_async(b, a, sizeof host, s), FL_OK);
  ck_assert_int_eq(fl_cuda_memset(a, 0, 10, s), FL_OK);
  ck_assert_int_eq(fl_cuda_stream_synchronize(s), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_host(back, b, sizeof back, NULL), FL_OK);
  ck_assert_int_eq(memcmp(back, host, sizeof host), 0);
  ck_assert_int_eq(fl_cuda_copy_device(b, a, sizeof host, NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_copy_to_host(back, b, sizeof back, NULL), FL_OK);
  ck_assert_int_eq(back[9], 0);
  ck_assert_int_eq(back[10], host[10]);
  ck_assert_int_eq(fl_cuda_copy_to_host(NULL, b, 4, NULL), FL_EINVAL);
  ck_assert_int_eq(fl_cuda_copy_to_host(NULL, NULL, 0, NULL), FL_OK);
  ck_assert_int_eq(fl_cuda_synchronize(), FL_OK);
  ck_assert_int_eq(fl_cuda_stream_destroy(s), FL_OK);
  ck_assert_int_eq(fl_cuda_free(a), FL_OK);
  ck_assert_int_eq(fl_cuda_free(b), FL_OK);
  ck_assert_int_eq(fl_cuda_free(NULL), FL_OK);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_optim");
  TCase *tc = tcase_create("optim");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, optimizer_matches_cpu, 0, 8);
  tcase_add_test(tc, norms_deterministic);
  tcase_add_test(tc, optimizer_bad_args);
  tcase_add_loop_test(tc, gradient_merge_matches_cpu, 0, 2);
  tcase_add_test(tc, gradient_merge_bad_args);
  tcase_add_loop_test(tc, unscale_matches_cpu, 0, 3);
  tcase_add_test(tc, unscale_bad_args);
  tcase_add_test(tc, casts_from_16_exact);
  tcase_add_test(tc, casts_to_16_exact);
  tcase_add_test(tc, casts_bad_args);
  tcase_add_test(tc, device_helpers);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return cuda_test_main(suite); }
