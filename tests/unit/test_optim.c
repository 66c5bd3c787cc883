/* test_optim.c - unit tests of the CPU optimizer step (kernels/optim.c).
 *
 * Each optimizer is checked two ways: against a few numbers worked out by
 * hand (in the comments), and, over several steps and a list of tensors of
 * awkward sizes, against a straightforward scalar double-precision
 * reference written here from the formulas of docs/DESIGN.md section 5.
 * The sparse-row optimizers (row-wise Adagrad, FTRL) get the same two
 * checks, with their own settings (l1, l2, beta, lr_power).
 * Also: LARS/LAMB with zero norms and excluded parameters, bit-identical
 * results at any thread count, and argument checks that change nothing. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fl_optim.h"

/* ------------------------------------------------------------- helpers */

static uint64_t rng_state = 88172645463325252ull;

static void rng_seed(uint64_t s) { rng_state = s ? s : 1; }

/* Uniform in [-1, 1). */
static float rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *falloc(size_t n) {
  float *p = calloc(n, sizeof *p);
  ck_assert_ptr_nonnull(p);
  return p;
}

static double *dalloc(size_t n) {
  double *p = calloc(n, sizeof *p);
  ck_assert_ptr_nonnull(p);
  return p;
}

/* Element by element; Check is called only on a mismatch (every passing
 * ck_assert is a message to the parent process in fork mode, too slow for
 * millions of elements). */
static void expect_close(const float *x, const double *ref, size_t n, double rtol, double atol,
                         const char *what) {
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)x[i] - ref[i]);
    if (!(d <= atol + rtol * fabs(ref[i])))
      ck_abort_msg("%s[%zu]: got %.9g, reference %.9g", what, i, (double)x[i], ref[i]);
  }
}

/* For state buffers, whose entries can cancel to near 0: absolute
 * tolerance relative to the largest entry. */
static void expect_close_state(const float *x, const double *ref, size_t n, const char *what) {
  double mx = 0;
  for (size_t i = 0; i < n; i++)
    mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
  expect_close(x, ref, n, 2e-6, 2e-6 * mx, what);
}

#define EXPECT_NEAR(x, want, tol)                                                          \
  ck_assert_msg(fabs((double)(x) - (double)(want)) <= (tol), "%s = %.9g, want %.9g", #x, \
                (double)(x), (double)(want))

/* One float tensor of the step under test. */
typedef struct tens {
  float *p, *g, *s1, *s2;
  size_t n;
} tens;

static void tens_make(tens *t, size_t n) {
  t->n = n;
  t->p = falloc(n);
  t->g = falloc(n);
  t->s1 = falloc(n);
  t->s2 = falloc(n);
}

static void tens_free(tens *t) {
  free(t->p), free(t->g), free(t->s1), free(t->s2);
}

static fl_optim_tensor view(const tens *t, const char *name, fl_optim_kind kind) {
  int ns = fl_optim_state_count(kind);
  fl_optim_tensor v = {name, t->p, t->g, ns >= 1 ? t->s1 : NULL, ns >= 2 ? t->s2 : NULL, t->n};
  return v;
}

/* ---------------------------------------------------- double reference */

typedef struct ref {
  double *p, *s1, *s2;
  size_t n;
  int dec; /* weight decay applies to this tensor */
} ref;

static double ref_norm(const double *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += x[i] * x[i];
  return sqrt(s);
}

/* One step of hp over one tensor with gradient g, written from the formulas
 * of DESIGN.md section 5 (bias corrections as m_hat, v_hat). */
static void ref_step(const fl_optim_hparams *hp, ref *r, const float *gf, double lr, int64_t t) {
  size_t n = r->n;
  double wd = r->dec ? hp->weight_decay : 0.0, mu = hp->momentum, eps = hp->epsilon;
  double b1 = hp->beta1, b2 = hp->beta2;
  double *g = dalloc(n), *rr = dalloc(n);
  for (size_t i = 0; i < n; i++)
    g[i] = gf[i];
  switch (hp->kind) {
  case FL_OPTIM_SGD:
    for (size_t i = 0; i < n; i++)
      r->p[i] -= lr * (g[i] + wd * r->p[i]);
    break;
  case FL_OPTIM_MOMENTUM:
    for (size_t i = 0; i < n; i++) {
      double gi = g[i] + wd * r->p[i];
      r->s1[i] = mu * r->s1[i] + gi;
      r->p[i] -= lr * (hp->nesterov ? gi + mu * r->s1[i] : r->s1[i]);
    }
    break;
  case FL_OPTIM_ADAM:
  case FL_OPTIM_ADAMW:
    for (size_t i = 0; i < n; i++) {
      double gi = g[i];
      if (hp->kind == FL_OPTIM_ADAMW)
        r->p[i] *= 1.0 - lr * wd;
      else
        gi += wd * r->p[i];
      r->s1[i] = b1 * r->s1[i] + (1 - b1) * gi;
      r->s2[i] = b2 * r->s2[i] + (1 - b2) * gi * gi;
      double mh = r->s1[i] / (1 - pow(b1, (double)t)), vh = r->s2[i] / (1 - pow(b2, (double)t));
      r->p[i] -= lr * mh / (sqrt(vh) + eps);
    }
    break;
  case FL_OPTIM_ADAGRAD:
    for (size_t i = 0; i < n; i++) {
      double gi = g[i] + wd * r->p[i];
      r->s1[i] += gi * gi;
      r->p[i] -= lr * gi / (sqrt(r->s1[i]) + eps);
    }
    break;
  case FL_OPTIM_LARS: {
    double pn = ref_norm(r->p, n), gn = ref_norm(g, n), local = lr;
    if (wd > 0 && pn > 0 && gn > 0)
      local = lr * hp->lars_coeff * pn / (gn + wd * pn + eps);
    for (size_t i = 0; i < n; i++) {
      r->s1[i] = mu * r->s1[i] + local * (g[i] + wd * r->p[i]);
      r->p[i] -= r->s1[i];
    }
    break;
  }
  case FL_OPTIM_LAMB: {
    for (size_t i = 0; i < n; i++) {
      r->s1[i] = b1 * r->s1[i] + (1 - b1) * g[i];
      r->s2[i] = b2 * r->s2[i] + (1 - b2) * g[i] * g[i];
      double mh = r->s1[i] / (1 - pow(b1, (double)t)), vh = r->s2[i] / (1 - pow(b2, (double)t));
      rr[i] = mh / (sqrt(vh) + eps) + wd * r->p[i];
    }
    double pn = ref_norm(r->p, n), rn = ref_norm(rr, n), trust = 1.0;
    if (wd > 0 && pn > 0 && rn > 0)
      trust = pn / rn;
    for (size_t i = 0; i < n; i++)
      r->p[i] -= lr * trust * rr[i];
    break;
  }
  case FL_OPTIM_ROWWISE_ADAGRAD: {
    /* FBGEMM's row-wise Adagrad: the mean of g'^2 over the row. */
    double ss = 0;
    for (size_t i = 0; i < n; i++) {
      rr[i] = g[i] + wd * r->p[i];
      ss += rr[i] * rr[i];
    }
    r->s1[0] += ss / (double)n;
    double c = lr / (sqrt(r->s1[0]) + eps);
    for (size_t i = 0; i < n; i++)
      r->p[i] -= c * rr[i];
    break;
  }
  case FL_OPTIM_FTRL: {
    /* McMahan et al. 2013, Algorithm 1 with per-coordinate rates
     * n^(-lr_power) / alpha (TensorFlow's generalisation). */
    double k = -(double)hp->lr_power, l1 = hp->l1, l2 = hp->l2, beta = hp->beta;
    for (size_t i = 0; i < n; i++) {
      double nn = r->s2[i] + g[i] * g[i];
      double sigma = (pow(nn, k) - pow(r->s2[i], k)) / lr;
      r->s1[i] += g[i] - sigma * r->p[i];
      r->s2[i] = nn;
      double z = r->s1[i], q = (beta + pow(nn, k)) / lr + 2 * l2;
      r->p[i] = fabs(z) <= l1 ? 0.0 : -(z - (z < 0 ? -l1 : l1)) / q;
    }
    break;
  }
  }
  free(g);
  free(rr);
}

/* ------------------------------------------------ hand-computed values */

/* One tensor of one element: p = 1, gradient 0.5 (SGD, Adam, AdamW) or 1. */
static void run_scalar(fl_optim_hparams *hp, float g, float lr, const double *want, int steps,
                       const double *want_s1) {
  float p = 1.0f, s1 = 0.0f, s2 = 0.0f;
  fl_optim_tensor t = {"w", &p, &g, &s1, &s2, 1};
  ck_assert_int_eq(fl_optim_init_state(hp, &t, 1), FL_OK);
  for (int k = 0; k < steps; k++) {
    ck_assert_int_eq(fl_optim_step(hp, &t, 1, lr, k + 1), FL_OK);
    EXPECT_NEAR(p, want[k], 1e-6);
    if (want_s1)
      EXPECT_NEAR(s1, want_s1[k], 1e-6);
  }
}

START_TEST(test_hand_sgd) {
  /* p -= 0.1*(0.5 + 0.01*p): 1 -> 0.949 -> 0.898051 -> 0.847152949 */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_SGD);
  hp.weight_decay = 0.01f;
  const double want[] = {0.949, 0.898051, 0.847152949};
  run_scalar(&hp, 0.5f, 0.1f, want, 3, NULL);
}
END_TEST

START_TEST(test_hand_momentum) {
  /* g = 1, mu = 0.9, lr = 0.1: v = 1, 1.9, 2.71; p = 0.9, 0.71, 0.439 */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_MOMENTUM);
  const double want[] = {0.9, 0.71, 0.439}, v[] = {1.0, 1.9, 2.71};
  run_scalar(&hp, 1.0f, 0.1f, want, 3, v);
}
END_TEST

START_TEST(test_hand_nesterov) {
  /* Same, stepping along g + mu*v = 1.9, 2.71, 3.439: p = 0.81, 0.539, 0.1951 */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_MOMENTUM);
  hp.nesterov = 1;
  const double want[] = {0.81, 0.539, 0.1951}, v[] = {1.0, 1.9, 2.71};
  run_scalar(&hp, 1.0f, 0.1f, want, 3, v);
}
END_TEST

START_TEST(test_hand_adam) {
  /* A constant gradient makes m_hat = g and v_hat = g^2 exactly, so each step
   * moves p by lr*g/(|g| + eps) = 0.01*0.5/(0.5 + 1e-8) ~= 0.01.  m after t
   * steps is 0.5*(1 - 0.9^t): 0.05, 0.095, 0.1355. */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_ADAM);
  const double want[] = {0.99, 0.98, 0.97}, m[] = {0.05, 0.095, 0.1355};
  run_scalar(&hp, 0.5f, 0.01f, want, 3, m);
}
END_TEST

START_TEST(test_hand_adamw) {
  /* p *= 1 - 0.01*0.1 first, then the Adam step of 0.01:
   * 0.999 - 0.01 = 0.989; 0.989*0.999 - 0.01 = 0.978011;
   * 0.978011*0.999 - 0.01 = 0.967032989 */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_ADAMW);
  hp.weight_decay = 0.1f;
  const double want[] = {0.989, 0.978011, 0.967032989};
  run_scalar(&hp, 0.5f, 0.01f, want, 3, NULL);
}
END_TEST

START_TEST(test_hand_adagrad) {
  /* g = 1: s = 1, 2, 3; p = 1 - 0.1/1 - 0.1/sqrt(2) - 0.1/sqrt(3) */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_ADAGRAD);
  const double want[] = {0.9, 0.8292893219, 0.771554295}, s[] = {1, 2, 3};
  run_scalar(&hp, 1.0f, 0.1f, want, 3, s);
}
END_TEST

START_TEST(test_hand_lars) {
  /* p = (3, 4), g = (0.6, 0.8): ||p|| = 5, ||g|| = 1.  lr 0.1, coeff 0.001,
   * wd 0.0005, eps 0: local_lr = 0.1*0.001*5/(1 + 0.0025) = 0.0005/1.0025,
   * g + wd*p = (0.6015, 0.802) = 1.0025*(0.6, 0.8), so v = (0.0003, 0.0004)
   * and p = (2.9997, 3.9996).  Steps 2 and 3 (same g) worked the same way. */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_LARS);
  float p[2] = {3, 4}, g[2] = {0.6f, 0.8f}, v[2];
  fl_optim_tensor t = {"fc.w", p, g, v, NULL, 2};
  const double wp[3][2] = {{2.9997, 3.9996}, {2.99913003, 3.99884004}, {2.998317144, 3.997756192}};
  const double wv[3][2] = {
      {0.0003, 0.0004}, {0.00056997, 0.00075996}, {0.000812886003, 0.001083848004}};
  ck_assert_int_eq(fl_optim_init_state(&hp, &t, 1), FL_OK);
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(fl_optim_step(&hp, &t, 1, 0.1f, k + 1), FL_OK);
    for (int i = 0; i < 2; i++) {
      EXPECT_NEAR(p[i], wp[k][i], 2e-6);
      EXPECT_NEAR(v[i], wv[k][i], 1e-9);
    }
  }
}
END_TEST

START_TEST(test_hand_lamb) {
  /* p = (3, 4), constant g = (0.6, 0.8), lr 0.01, wd 0.01, eps 1e-6.  Step 1:
   * m_hat/(sqrt(v_hat)+eps) = (1, 1) less ~2e-6, r = (1.03, 1.04),
   * ||r|| = 1.463728, trust = 5/1.463728 = 3.41594,
   * p = (3 - 0.0341594*1.03, 4 - 0.0341594*1.04) = (2.964816, 3.964474). */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_LAMB);
  float p[2] = {3, 4}, g[2] = {0.6f, 0.8f}, m[2], v[2];
  fl_optim_tensor t = {"fc.w", p, g, m, v, 2};
  const double wp[3][2] = {
      {2.964815878, 3.964474269}, {2.929980263, 3.929300431}, {2.895489639, 3.894474931}};
  ck_assert_int_eq(fl_optim_init_state(&hp, &t, 1), FL_OK);
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(fl_optim_step(&hp, &t, 1, 0.01f, k + 1), FL_OK);
    EXPECT_NEAR(p[0], wp[k][0], 2e-6);
    EXPECT_NEAR(p[1], wp[k][1], 2e-6);
  }
}
END_TEST

START_TEST(test_hand_rowwise_adagrad) {
  /* p = (3, 4), g = (0.6, 0.8), lr 0.1: mean g^2 = 0.5, so s = 0.5, 1, 1.5
   * and p -= (0.1/sqrt(s))*g each step. */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_ROWWISE_ADAGRAD);
  float p[2] = {3, 4}, g[2] = {0.6f, 0.8f}, s = -1;
  fl_optim_tensor t = {"emb", p, g, &s, NULL, 2};
  const double wp[3][2] = {
      {2.915147187, 3.886862917}, {2.855147188, 3.806862917}, {2.806157394, 3.741543191}};
  ck_assert_int_eq(fl_optim_init_state(&hp, &t, 1), FL_OK);
  ck_assert(s == 0.0f);
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(fl_optim_step(&hp, &t, 1, 0.1f, k + 1), FL_OK);
    EXPECT_NEAR(s, 0.5 * (k + 1), 1e-7);
    EXPECT_NEAR(p[0], wp[k][0], 2e-6);
    EXPECT_NEAR(p[1], wp[k][1], 2e-6);
  }
}
END_TEST

START_TEST(test_hand_ftrl) {
  /* p = 1, g = 1, alpha 0.1, n from 0.  Step 1: n = 1, sigma = 10,
   * z = 1 - 10 = -9, p = 9/(1/0.1) = 0.9.  Without l1, l2 and beta FTRL's
   * p follows Adagrad's here (0.9, 0.82928932, 0.77155430). */
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_FTRL);
  const double want[] = {0.9, 0.8292893219, 0.771554295};
  run_scalar(&hp, 1.0f, 0.1f, want, 3, NULL);
  /* l1 2, l2 0.5, beta 1: p = (9 - 2)/((1 + 1)/0.1 + 1) = 1/3, then the
   * same recurrence: 0.29355946, 0.25824936. */
  hp.l1 = 2.0f, hp.l2 = 0.5f, hp.beta = 1.0f;
  const double want2[] = {1.0 / 3.0, 0.2935594647, 0.2582493637};
  run_scalar(&hp, 1.0f, 0.1f, want2, 3, NULL);
  /* l1 20 > |z|: the weight is 0 (z = -9, -8, -7). */
  hp.l1 = 20.0f, hp.l2 = 0, hp.beta = 0;
  const double zero[] = {0, 0, 0}, z[] = {-9, -8, -7};
  run_scalar(&hp, 1.0f, 0.1f, zero, 3, z);
}
END_TEST

/* --------------------------------------------- against the reference */

/* Configurations run against the reference: every kind, with and without
 * weight decay, Nesterov, Adagrad with a starting accumulator, and epsilons
 * big enough (eps > 0) that where they enter the formula shows. */
typedef struct config {
  fl_optim_kind kind;
  float wd;
  int nesterov;
  float lr;
  float eps; /* < 0: the kind's default */
} config;

static const config configs[] = {
    {FL_OPTIM_SGD, 0.0f, 0, 0.1f, -1},        {FL_OPTIM_SGD, 0.05f, 0, 0.1f, -1},
    {FL_OPTIM_MOMENTUM, 0.0f, 0, 0.05f, -1},  {FL_OPTIM_MOMENTUM, 0.01f, 0, 0.05f, -1},
    {FL_OPTIM_MOMENTUM, 0.01f, 1, 0.05f, -1}, {FL_OPTIM_ADAM, 0.0f, 0, 0.01f, -1},
    {FL_OPTIM_ADAM, 0.02f, 0, 0.01f, 0.05f},  {FL_OPTIM_ADAMW, 0.01f, 0, 0.01f, -1},
    {FL_OPTIM_ADAMW, 0.0f, 0, 0.01f, 0.05f},  {FL_OPTIM_ADAGRAD, 0.0f, 0, 0.1f, -1},
    {FL_OPTIM_ADAGRAD, 0.01f, 0, 0.1f, 0.3f}, {FL_OPTIM_LARS, 0.0005f, 0, 1.0f, -1},
    {FL_OPTIM_LARS, 0.001f, 0, 1.0f, 0.5f},   {FL_OPTIM_LARS, 0.0f, 0, 0.1f, -1},
    {FL_OPTIM_LAMB, 0.01f, 0, 0.01f, -1},     {FL_OPTIM_LAMB, 0.02f, 0, 0.01f, 0.05f},
    {FL_OPTIM_LAMB, 0.0f, 0, 0.01f, 0.05f},
};
#define N_CONFIGS ((int)(sizeof configs / sizeof configs[0]))

/* Tensors of awkward sizes (a vector tail, one element, more than one
 * reduction segment and one thread's share), two of them excluded. */
static const size_t sizes[] = {1, 7, 33, 1000, 70001};
static const char *const names[] = {"emb.w", "fc1.bias", "fc1.w", "ln.norm.scale", "fc2.w"};
#define NT 5
static const char *const excl[] = {"bias", "norm"};

static int ref_decays(const fl_optim_hparams *hp, const char *name) {
  if (hp->weight_decay == 0.0f)
    return 0;
  for (size_t i = 0; i < hp->n_exclude; i++)
    if (strstr(name, hp->exclude_from_weight_decay[i]))
      return 0;
  return 1;
}

/* Four steps of hp over the NT tensors against the reference. */
static void run_reference(fl_optim_hparams hp, float lr, uint64_t seed) {
  int ada = hp.kind == FL_OPTIM_ADAGRAD || hp.kind == FL_OPTIM_ROWWISE_ADAGRAD;
  hp.exclude_from_weight_decay = excl;
  hp.n_exclude = 2;
  rng_seed(seed);
  tens t[NT];
  ref r[NT];
  fl_optim_tensor v[NT];
  for (int i = 0; i < NT; i++) {
    tens_make(&t[i], sizes[i]);
    r[i].n = sizes[i];
    r[i].p = dalloc(sizes[i]), r[i].s1 = dalloc(sizes[i]), r[i].s2 = dalloc(sizes[i]);
    r[i].dec = ref_decays(&hp, names[i]);
    ck_assert_int_eq(fl_optim_decays(&hp, names[i]), r[i].dec);
    for (size_t j = 0; j < sizes[i]; j++) {
      t[i].p[j] = rnd();
      r[i].p[j] = t[i].p[j];
      r[i].s1[j] = ada ? hp.initial_accumulator : 0.0;
      r[i].s2[j] = hp.kind == FL_OPTIM_FTRL ? hp.initial_accumulator : 0.0;
    }
    v[i] = view(&t[i], names[i], hp.kind);
  }
  ck_assert_int_eq(fl_optim_init_state(&hp, v, NT), FL_OK);
  for (int64_t step = 1; step <= 4; step++) {
    for (int i = 0; i < NT; i++)
      for (size_t j = 0; j < sizes[i]; j++)
        t[i].g[j] = rnd() * (i == 3 ? 4.0f : 0.5f);
    ck_assert_int_eq(fl_optim_step(&hp, v, NT, lr, step), FL_OK);
    for (int i = 0; i < NT; i++) {
      size_t ns = fl_optim_state_len(hp.kind, sizes[i]);
      ref_step(&hp, &r[i], t[i].g, lr, step);
      expect_close(t[i].p, r[i].p, sizes[i], 2e-6, 2e-6, names[i]);
      if (v[i].state1)
        expect_close_state(t[i].s1, r[i].s1, ns, "state1");
      if (v[i].state2)
        expect_close_state(t[i].s2, r[i].s2, ns, "state2");
    }
  }
  for (int i = 0; i < NT; i++) {
    tens_free(&t[i]);
    free(r[i].p), free(r[i].s1), free(r[i].s2);
  }
}

START_TEST(test_reference) {
  const config *cf = &configs[_i];
  fl_optim_hparams hp = fl_optim_hparams_default(cf->kind);
  hp.weight_decay = cf->wd;
  hp.nesterov = cf->nesterov;
  if (cf->eps >= 0)
    hp.epsilon = cf->eps;
  hp.initial_accumulator = cf->kind == FL_OPTIM_ADAGRAD ? 0.1f : 0.0f;
  run_reference(hp, cf->lr, 1234 + (uint64_t)_i);
}
END_TEST

/* The sparse-row optimizers: row-wise Adagrad (each tensor one row) with
 * and without decay, a start accumulator and a big eps; FTRL plain, with
 * every regularizer, with another lr_power, and with TensorFlow's
 * initial_accumulator_value 0.1. */
static const fl_optim_hparams row_configs[] = {
    {.kind = FL_OPTIM_ROWWISE_ADAGRAD, .epsilon = 1e-8f},
    {.kind = FL_OPTIM_ROWWISE_ADAGRAD, .epsilon = 0.3f, .weight_decay = 0.01f,
     .initial_accumulator = 0.1f},
    {.kind = FL_OPTIM_FTRL, .lr_power = -0.5f},
    {.kind = FL_OPTIM_FTRL, .lr_power = -0.5f, .l1 = 0.05f, .l2 = 0.1f, .beta = 1.0f,
     .initial_accumulator = 0.1f},
    {.kind = FL_OPTIM_FTRL, .lr_power = -0.3f, .l1 = 0.01f, .l2 = 0.01f, .beta = 0.5f,
     .initial_accumulator = 0.1f},
    {.kind = FL_OPTIM_FTRL, .lr_power = 0.0f, .l1 = 0.001f},
};
#define N_ROW_CONFIGS ((int)(sizeof row_configs / sizeof row_configs[0]))

START_TEST(test_row_reference) {
  run_reference(row_configs[_i], _i < 2 ? 0.1f : 0.05f, 777 + (uint64_t)_i);
}
END_TEST

/* ------------------------------------------ LARS / LAMB special cases */

/* Run `steps` steps of a single tensor of n elements given p0 and a
 * gradient generator (g = scale * rnd(), or 0), and compare with the
 * reference. */
static void run_one_vs_ref(fl_optim_hparams *hp, const char *name, size_t n, float pscale,
                           float gscale, int steps, float lr) {
  tens t;
  ref r = {dalloc(n), dalloc(n), dalloc(n), n, ref_decays(hp, name)};
  tens_make(&t, n);
  for (size_t j = 0; j < n; j++)
    r.p[j] = t.p[j] = pscale * rnd();
  fl_optim_tensor v = view(&t, name, hp->kind);
  for (int64_t s = 1; s <= steps; s++) {
    for (size_t j = 0; j < n; j++)
      t.g[j] = gscale * rnd();
    ck_assert_int_eq(fl_optim_step(hp, &v, 1, lr, s), FL_OK);
    ref_step(hp, &r, t.g, lr, s);
    expect_close(t.p, r.p, n, 2e-6, 5e-7, name);
    expect_close_state(t.s1, r.s1, n, "state1");
  }
  tens_free(&t);
  free(r.p), free(r.s1), free(r.s2);
}

START_TEST(test_lars_zero_norms) {
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_LARS);
  /* ||p|| = 0: local_lr = lr, so v = lr*g and p = -lr*g after one step. */
  float p[3] = {0, 0, 0}, g[3] = {1, -2, 0.5f}, v[3] = {0, 0, 0};
  fl_optim_tensor t = {"w", p, g, v, NULL, 3};
  ck_assert_int_eq(fl_optim_step(&hp, &t, 1, 0.1f, 1), FL_OK);
  EXPECT_NEAR(p[0], -0.1, 1e-7);
  EXPECT_NEAR(p[1], 0.2, 1e-7);
  EXPECT_NEAR(v[2], 0.05, 1e-7);
  /* ||g|| = 0: local_lr = lr, v = lr*wd*p = 0.1*0.0005*2 = 1e-4. */
  float q[2] = {2, 2}, z[2] = {0, 0}, w[2] = {0, 0};
  fl_optim_tensor u = {"w", q, z, w, NULL, 2};
  ck_assert_int_eq(fl_optim_step(&hp, &u, 1, 0.1f, 1), FL_OK);
  EXPECT_NEAR(w[0], 1e-4, 1e-10);
  EXPECT_NEAR(q[1], 2 - 1e-4, 1e-7);
  /* And over several steps of bigger tensors against the reference. */
  run_one_vs_ref(&hp, "w", 40000, 0.0f, 1.0f, 3, 0.1f);
  run_one_vs_ref(&hp, "w", 40000, 1.0f, 0.0f, 3, 0.1f);
}
END_TEST

START_TEST(test_lamb_zero_norms) {
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_LAMB);
  /* ||p|| = 0: trust 1, r = m_hat/(sqrt(v_hat)+eps) ~= sign(g): p ~= -lr*sign(g). */
  float p[2] = {0, 0}, g[2] = {3, -0.25f}, m[2] = {0, 0}, v[2] = {0, 0};
  fl_optim_tensor t = {"w", p, g, m, v, 2};
  ck_assert_int_eq(fl_optim_step(&hp, &t, 1, 0.01f, 1), FL_OK);
  EXPECT_NEAR(p[0], -0.01, 1e-7);
  EXPECT_NEAR(p[1], 0.01, 1e-7);
  /* ||p|| = 0 and g = 0: r = 0, trust 1, nothing moves. */
  float q[2] = {0, 0}, z[2] = {0, 0}, m2[2] = {0, 0}, v2[2] = {0, 0};
  fl_optim_tensor u = {"w", q, z, m2, v2, 2};
  ck_assert_int_eq(fl_optim_step(&hp, &u, 1, 0.01f, 1), FL_OK);
  ck_assert(q[0] == 0.0f && q[1] == 0.0f);
  /* g = 0, p != 0: r = wd*p, trust = 1/wd, p *= 1 - lr. */
  float a[2] = {1, -2}, m3[2] = {0, 0}, v3[2] = {0, 0};
  fl_optim_tensor w = {"w", a, z, m3, v3, 2};
  ck_assert_int_eq(fl_optim_step(&hp, &w, 1, 0.01f, 1), FL_OK);
  EXPECT_NEAR(a[0], 0.99, 1e-6);
  EXPECT_NEAR(a[1], -1.98, 1e-6);
  run_one_vs_ref(&hp, "w", 40000, 0.0f, 1.0f, 3, 0.01f);
  run_one_vs_ref(&hp, "w", 40000, 1.0f, 0.0f, 3, 0.01f);
}
END_TEST

START_TEST(test_excluded_no_trust) {
  /* An excluded parameter gets wd = 0 and so no trust ratio: LARS steps
   * with plain lr (v = lr*g), LAMB with trust 1 (p ~= p - lr*sign(g)). */
  const char *ex[] = {"bias"};
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_LARS);
  hp.exclude_from_weight_decay = ex;
  hp.n_exclude = 1;
  ck_assert_int_eq(fl_optim_decays(&hp, "fc.bias"), 0);
  ck_assert_int_eq(fl_optim_decays(&hp, "fc.w"), 1);
  ck_assert_int_eq(fl_optim_decays(&hp, NULL), 1);
  float p[2] = {3, 4}, g[2] = {0.6f, 0.8f}, v[2] = {0, 0};
  fl_optim_tensor t = {"fc.bias", p, g, v, NULL, 2};
  ck_assert_int_eq(fl_optim_step(&hp, &t, 1, 0.1f, 1), FL_OK);
  EXPECT_NEAR(v[0], 0.06, 1e-8);
  EXPECT_NEAR(p[1], 3.92, 1e-6);
  run_one_vs_ref(&hp, "x.bias.y", 50000, 1.0f, 1.0f, 3, 0.1f);

  fl_optim_hparams hl = fl_optim_hparams_default(FL_OPTIM_LAMB);
  hl.exclude_from_weight_decay = ex;
  hl.n_exclude = 1;
  float q[2] = {3, 4}, m[2] = {0, 0}, s[2] = {0, 0};
  fl_optim_tensor u = {"fc.bias", q, g, m, s, 2};
  ck_assert_int_eq(fl_optim_step(&hl, &u, 1, 0.01f, 1), FL_OK);
  EXPECT_NEAR(q[0], 2.99, 1e-6);
  EXPECT_NEAR(q[1], 3.99, 1e-6);
  run_one_vs_ref(&hl, "x.bias.y", 50000, 1.0f, 1.0f, 3, 0.01f);
}
END_TEST

/* ------------------------------------------------------- determinism */

/* Same inputs, 1..4 threads: identical bits in every parameter and state. */
START_TEST(test_thread_determinism) {
  fl_optim_kind kind = (fl_optim_kind)_i;
  const size_t sz[] = {300007, 5, 40000};
  const char *nm[] = {"a.w", "b.bias", "c.w"};
  float *out[4][3][3];
  for (int th = 0; th < 4; th++) {
    fl_optim_hparams hp = fl_optim_hparams_default(kind);
    hp.num_threads = th + 1;
    hp.weight_decay = 0.01f;
    hp.exclude_from_weight_decay = excl;
    hp.n_exclude = 1;
    rng_seed(99);
    tens t[3];
    fl_optim_tensor v[3];
    for (int i = 0; i < 3; i++) {
      tens_make(&t[i], sz[i]);
      for (size_t j = 0; j < sz[i]; j++)
        t[i].p[j] = rnd();
      v[i] = view(&t[i], nm[i], kind);
    }
    ck_assert_int_eq(fl_optim_init_state(&hp, v, 3), FL_OK);
    for (int64_t s = 1; s <= 3; s++) {
      for (int i = 0; i < 3; i++)
        for (size_t j = 0; j < sz[i]; j++)
          t[i].g[j] = rnd();
      ck_assert_int_eq(fl_optim_step(&hp, v, 3, 0.01f, s), FL_OK);
    }
    for (int i = 0; i < 3; i++) {
      out[th][i][0] = t[i].p, out[th][i][1] = t[i].s1, out[th][i][2] = t[i].s2;
      free(t[i].g);
    }
  }
  for (int th = 1; th < 4; th++)
    for (int i = 0; i < 3; i++)
      for (int k = 0; k < 3; k++)
        ck_assert_msg(memcmp(out[0][i][k], out[th][i][k], sz[i] * sizeof(float)) == 0,
                      "%s: %d threads differ from 1 (tensor %d, buffer %d)",
                      fl_optim_kind_name(kind), th + 1, i, k);
  for (int th = 0; th < 4; th++)
    for (int i = 0; i < 3; i++)
      for (int k = 0; k < 3; k++)
        free(out[th][i][k]);
}
END_TEST

/* --------------------------------------------------------- bad arguments */

START_TEST(test_bad_args) {
  float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, m[4] = {0}, v[4] = {0};
  float p2[3] = {5, 6, 7}, g2[3] = {1, 1, 1}, m2[3] = {0}, v2[3] = {0};
  float keep[4], keep2[3], keepm[4];
  memcpy(keep, p, sizeof p);
  memcpy(keep2, p2, sizeof p2);
  memcpy(keepm, m, sizeof m);
  fl_optim_hparams hp = fl_optim_hparams_default(FL_OPTIM_ADAM);
  fl_optim_tensor t[2] = {{"a", p, g, m, v, 4}, {"b", p2, g2, m2, v2, 3}};

  ck_assert_int_eq(fl_optim_step(NULL, t, 2, 0.1f, 1), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step(&hp, NULL, 2, 0.1f, 1), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step(&hp, t, 0, 0.1f, 1), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, -0.1f, 1), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, NAN, 1), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, INFINITY, 1), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, 0.1f, 0), FL_EINVAL);
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, 0.1f, -3), FL_EINVAL);
  /* The second tensor is bad: the first must not move either. */
  t[1].n = 0;
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, 0.1f, 1), FL_EINVAL);
  t[1].n = 3;
  t[1].state2 = NULL; /* missing state */
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, 0.1f, 1), FL_EINVAL);
  t[1].state2 = v2;
  t[1].grad = NULL;
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, 0.1f, 1), FL_EINVAL);
  t[1].grad = g2;
  t[1].param = NULL;
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, 0.1f, 1), FL_EINVAL);
  t[1].param = p2;
  t[1].state1 = p2; /* state aliasing the parameter */
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, 0.1f, 1), FL_EINVAL);
  t[1].state1 = m2;
  t[1].grad = p2 + 1; /* overlapping */
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, 0.1f, 1), FL_EINVAL);
  t[1].grad = g2;
  t[1].n = SIZE_MAX / 2;
  ck_assert_int_eq(fl_optim_step(&hp, t, 2, 0.1f, 1), FL_EINVAL);
  t[1].n = 3;

  /* Hyper-parameters out of their domain. */
  fl_optim_hparams bad = hp;
  bad.beta1 = 1.0f;
  ck_assert_int_eq(fl_optim_step(&bad, t, 2, 0.1f, 1), FL_EINVAL);
  bad = hp, bad.beta2 = -0.1f;
  ck_assert_int_eq(fl_optim_step(&bad, t, 2, 0.1f, 1), FL_EINVAL);
  bad = hp, bad.epsilon = -1e-8f;
  ck_assert_int_eq(fl_optim_step(&bad, t, 2, 0.1f, 1), FL_EINVAL);
  bad = hp, bad.weight_decay = NAN;
  ck_assert_int_eq(fl_optim_step(&bad, t, 2, 0.1f, 1), FL_EINVAL);
  bad = hp, bad.kind = (fl_optim_kind)42;
  ck_assert_int_eq(fl_optim_step(&bad, t, 2, 0.1f, 1), FL_EINVAL);
  bad = hp, bad.nesterov = 2;
  ck_assert_int_eq(fl_optim_hparams_check(&bad), FL_EINVAL);
  bad = hp, bad.n_exclude = 1;
  ck_assert_int_eq(fl_optim_step(&bad, t, 2, 0.1f, 1), FL_EINVAL);
  const char *ex_null[] = {NULL}, *ex_empty[] = {""};
  bad.exclude_from_weight_decay = ex_null;
  ck_assert_int_eq(fl_optim_hparams_check(&bad), FL_EINVAL);
  bad.exclude_from_weight_decay = ex_empty;
  ck_assert_int_eq(fl_optim_hparams_check(&bad), FL_EINVAL);
  ck_assert_int_eq(fl_optim_hparams_check(NULL), FL_EINVAL);

  ck_assert(memcmp(p, keep, sizeof p) == 0);
  ck_assert(memcmp(p2, keep2, sizeof p2) == 0);
  ck_assert(memcmp(m, keepm, sizeof m) == 0);

  /* init_state checks the same and needs no gradient. */
  ck_assert_int_eq(fl_optim_init_state(NULL, t, 2), FL_EINVAL);
  ck_assert_int_eq(fl_optim_init_state(&hp, t, 0), FL_EINVAL);
  t[0].state1 = NULL;
  ck_assert_int_eq(fl_optim_init_state(&hp, t, 2), FL_EINVAL);
  t[0].state1 = m;
  t[0].grad = NULL;
  ck_assert_int_eq(fl_optim_init_state(&hp, t, 2), FL_OK);

  /* SGD needs no state at all. */
  fl_optim_hparams sgd = fl_optim_hparams_default(FL_OPTIM_SGD);
  fl_optim_tensor s = {NULL, p, g, NULL, NULL, 4};
  ck_assert_int_eq(fl_optim_step(&sgd, &s, 1, 0.5f, 1), FL_OK);
  EXPECT_NEAR(p[0], 0.5, 0);
  /* lr = 0 is allowed and moves nothing. */
  ck_assert_int_eq(fl_optim_step(&sgd, &s, 1, 0.0f, 1), FL_OK);
  EXPECT_NEAR(p[0], 0.5, 0);
}
END_TEST

START_TEST(test_names_defaults) {
  for (int k = 0; k <= FL_OPTIM_FTRL; k++) {
    fl_optim_kind back;
    ck_assert_int_eq(fl_optim_kind_parse(fl_optim_kind_name((fl_optim_kind)k), &back), FL_OK);
    ck_assert_int_eq(back, k);
    fl_optim_hparams hp = fl_optim_hparams_default((fl_optim_kind)k);
    ck_assert_int_eq(fl_optim_hparams_check(&hp), FL_OK);
  }
  fl_optim_kind out;
  ck_assert_int_eq(fl_optim_kind_parse("rmsprop", &out), FL_EINVAL);
  ck_assert_int_eq(fl_optim_kind_parse(NULL, &out), FL_EINVAL);
  ck_assert_int_eq(fl_optim_kind_parse("adam", NULL), FL_EINVAL);
  ck_assert_str_eq(fl_optim_kind_name((fl_optim_kind)-1), "unknown");
  ck_assert_int_eq(fl_optim_state_count(FL_OPTIM_SGD), 0);
  ck_assert_int_eq(fl_optim_state_count(FL_OPTIM_LARS), 1);
  ck_assert_int_eq(fl_optim_state_count(FL_OPTIM_LAMB), 2);
  fl_optim_hparams lamb = fl_optim_hparams_default(FL_OPTIM_LAMB);
  EXPECT_NEAR(lamb.epsilon, 1e-6, 1e-12);
  EXPECT_NEAR(lamb.weight_decay, 0.01, 1e-9);
  fl_optim_hparams lars = fl_optim_hparams_default(FL_OPTIM_LARS);
  EXPECT_NEAR(lars.lars_coeff, 0.001, 1e-9);
  EXPECT_NEAR(lars.momentum, 0.9, 1e-7);
  /* Adagrad starts its accumulator at initial_accumulator. */
  fl_optim_hparams ada = fl_optim_hparams_default(FL_OPTIM_ADAGRAD);
  ada.initial_accumulator = 0.25f;
  float p = 0, g = 0, s = -1;
  fl_optim_tensor t = {NULL, &p, &g, &s, NULL, 1};
  ck_assert_int_eq(fl_optim_init_state(&ada, &t, 1), FL_OK);
  ck_assert(s == 0.25f);
  /* The sparse-row optimizers: one accumulator per row; FTRL's n starts at
   * initial_accumulator, its z at 0. */
  ck_assert_uint_eq(fl_optim_state_len(FL_OPTIM_ROWWISE_ADAGRAD, 64), 1);
  ck_assert_uint_eq(fl_optim_state_len(FL_OPTIM_FTRL, 64), 64);
  ck_assert_uint_eq(fl_optim_state_len(FL_OPTIM_ADAM, 64), 64);
  ck_assert_int_eq(fl_optim_state_count(FL_OPTIM_ROWWISE_ADAGRAD), 1);
  ck_assert_int_eq(fl_optim_state_count(FL_OPTIM_FTRL), 2);
  ck_assert(fl_optim_sparse_only(FL_OPTIM_FTRL) && fl_optim_sparse_only(FL_OPTIM_ROWWISE_ADAGRAD));
  ck_assert(!fl_optim_sparse_only(FL_OPTIM_ADAGRAD));
  fl_optim_hparams ftrl = fl_optim_hparams_default(FL_OPTIM_FTRL);
  EXPECT_NEAR(ftrl.lr_power, -0.5, 0);
  ftrl.initial_accumulator = 0.1f;
  float fp[2] = {1, 1}, fg[2] = {0, 0}, fz[2] = {-1, -1}, fn[2] = {-1, -1};
  fl_optim_tensor ft = {NULL, fp, fg, fz, fn, 2};
  ck_assert_int_eq(fl_optim_init_state(&ftrl, &ft, 1), FL_OK);
  ck_assert(fz[1] == 0.0f && fn[1] == 0.1f);
  ck_assert_int_eq(fl_optim_step(&ftrl, &ft, 1, 0.0f, 1), FL_EINVAL); /* alpha 0 */
  fl_optim_hparams bad = ftrl;
  bad.lr_power = 0.5f;
  ck_assert_int_eq(fl_optim_hparams_check(&bad), FL_EINVAL);
  bad = ftrl, bad.l1 = -1;
  ck_assert_int_eq(fl_optim_hparams_check(&bad), FL_EINVAL);
  bad = ftrl, bad.beta = NAN;
  ck_assert_int_eq(fl_optim_hparams_check(&bad), FL_EINVAL);
  /* Row-wise Adagrad's one-float state may sit right after the row. */
  fl_optim_hparams rw = fl_optim_hparams_default(FL_OPTIM_ROWWISE_ADAGRAD);
  float row[3] = {1, 2, 0};
  fl_optim_tensor rt = {NULL, row, fg, row + 2, NULL, 2};
  ck_assert_int_eq(fl_optim_step(&rw, &rt, 1, 0.1f, 1), FL_OK);
  rt.state1 = row + 1;
  ck_assert_int_eq(fl_optim_step(&rw, &rt, 1, 0.1f, 1), FL_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("optim");
  TCase *tc = tcase_create("hand");
  tcase_add_test(tc, test_hand_sgd);
  tcase_add_test(tc, test_hand_momentum);
  tcase_add_test(tc, test_hand_nesterov);
  tcase_add_test(tc, test_hand_adam);
  tcase_add_test(tc, test_hand_adamw);
  tcase_add_test(tc, test_hand_adagrad);
  tcase_add_test(tc, test_hand_lars);
  tcase_add_test(tc, test_hand_lamb);
  tcase_add_test(tc, test_hand_rowwise_adagrad);
  tcase_add_test(tc, test_hand_ftrl);
  suite_add_tcase(s, tc);
  tc = tcase_create("reference");
  tcase_add_loop_test(tc, test_reference, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_row_reference, 0, N_ROW_CONFIGS);
  tcase_add_test(tc, test_lars_zero_norms);
  tcase_add_test(tc, test_lamb_zero_norms);
  tcase_add_test(tc, test_excluded_no_trust);
  suite_add_tcase(s, tc);
  tc = tcase_create("threads");
  tcase_add_loop_test(tc, test_thread_determinism, 0, FL_OPTIM_FTRL + 1);
  suite_add_tcase(s, tc);
  tc = tcase_create("args");
  tcase_add_test(tc, test_bad_args);
  tcase_add_test(tc, test_names_defaults);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
