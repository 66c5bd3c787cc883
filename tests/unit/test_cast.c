/* test_cast.c - unit tests of the fp32 <-> fp16 / bf16 casts
 * (kernels/cast.c) over every 16-bit pattern.
 *
 * The references here are independent of the bit tricks under test: fp16
 * values come from ldexp on the fields, and fp32 -> fp16/bf16 rounding is
 * checked by searching the sorted table of representable values for the
 * nearest one (ties to the even bit pattern), over all fp16 values, all
 * midpoints between neighbours, their float neighbours, and a million
 * random floats.  Plus literal cases: ties, subnormals, overflow, nan. */
#include <config.h>

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fl_optim.h"

/* ck_assert records every passing check (a message to the parent process
 * in fork mode), which over millions of elements costs minutes: loops
 * check with REQUIRE, which calls into Check only on failure. */
#define REQUIRE(cond, ...)     \
  do {                         \
    if (!(cond))               \
      ck_abort_msg(__VA_ARGS__); \
  } while (0)

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Value of a finite fp16 pattern from its fields. */
static double f16_value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

static uint16_t to_f16(float x) {
  uint16_t h = 0xdead;
  REQUIRE(fl_cast_f32_to_f16(&x, &h, 1) == FL_OK, "cast failed");
  return h;
}

static float from_f16(uint16_t h) {
  float x;
  REQUIRE(fl_cast_f16_to_f32(&h, &x, 1) == FL_OK, "cast failed");
  return x;
}

static uint16_t to_bf16(float x) {
  uint16_t h = 0xdead;
  REQUIRE(fl_cast_f32_to_bf16(&x, &h, 1) == FL_OK, "cast failed");
  return h;
}

static float from_bf16(uint16_t h) {
  float x;
  REQUIRE(fl_cast_bf16_to_f32(&h, &x, 1) == FL_OK, "cast failed");
  return x;
}

/* Nearest fp16 to finite x by search: patterns 0..0x7c00 in increasing
 * order of value, 0x7c00 standing for 65536 (the next value the format
 * would have), which puts the overflow threshold at 65520 exactly. */
static uint16_t ref_f16(float x) {
  double a = fabs((double)x);
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  int lo = 0, hi = 0x7c00; /* invariant: val(lo) <= a < val(hi) unless a >= 65536 */
  if (a >= 65536.0)
    return sign | 0x7c00;
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (f16_value((uint16_t)mid) <= a)
      lo = mid;
    else
      hi = mid;
  }
  double vl = f16_value((uint16_t)lo), vh = hi == 0x7c00 ? 65536.0 : f16_value((uint16_t)hi);
  double dl = a - vl, dh = vh - a;
  int pick = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
  return sign | (uint16_t)pick;
}

/* Nearest bf16 to finite x: the two bf16 values around x are x's bits
 * truncated to 16 and the next pattern; 0x7f80 stands for 2^128. */
static uint16_t ref_bf16(float x) {
  uint32_t u = f2u(x), sign = u & 0x80000000u, a = u & 0x7fffffffu;
  if (isinf(x))
    return (uint16_t)((sign | 0x7f800000u) >> 16);
  uint32_t lo = a & 0xffff0000u, hi = lo + 0x10000u;
  double v = u2f(a), vl = u2f(lo), vh = hi == 0x7f800000u ? ldexp(1, 128) : u2f(hi);
  double dl = v - vl, dh = vh - v;
  uint32_t pick = dl < dh ? lo : dh < dl ? hi : (((lo >> 16) & 1) ? hi : lo);
  return (uint16_t)((sign | pick) >> 16);
}

START_TEST(test_f16_all_patterns) {
  static uint16_t h[65536], back[65536];
  static float f[65536];
  for (int i = 0; i < 65536; i++)
    h[i] = (uint16_t)i;
  ck_assert_int_eq(fl_cast_f16_to_f32(h, f, 65536), FL_OK);
  ck_assert_int_eq(fl_cast_f32_to_f16(f, back, 65536), FL_OK);
  for (int i = 0; i < 65536; i++) {
    int e = (i >> 10) & 0x1f, m = i & 0x3ff;
    if (e == 0x1f && m != 0) { /* nan stays nan, made quiet, sign kept */
      REQUIRE(isnan(f[i]), "0x%04x -> %g", i, (double)f[i]);
      REQUIRE((back[i] & 0x7c00) == 0x7c00 && (back[i] & 0x200) && (back[i] & 0x3ff),
              "nan 0x%04x came back as 0x%04x", i, back[i]);
      /* sign and payload kept */
      REQUIRE((back[i] & 0x81ff) == (i & 0x81ff), "nan 0x%04x came back as 0x%04x", i, back[i]);
      continue;
    }
    if (e == 0x1f)
      REQUIRE(isinf(f[i]) && (f[i] > 0) == !(i & 0x8000), "0x%04x -> %g", i, (double)f[i]);
    else
      REQUIRE((double)f[i] == f16_value((uint16_t)i), "0x%04x -> %.9g, want %.9g", i,
              (double)f[i], f16_value((uint16_t)i));
    REQUIRE(back[i] == i, "0x%04x -> %.9g -> 0x%04x", i, (double)f[i], back[i]);
    REQUIRE(!!signbit(f[i]) == !!(i & 0x8000), "0x%04x: sign lost", i); /* -0 stays -0 */
  }
}
END_TEST

START_TEST(test_bf16_all_patterns) {
  static uint16_t h[65536], back[65536];
  static float f[65536];
  for (int i = 0; i < 65536; i++)
    h[i] = (uint16_t)i;
  ck_assert_int_eq(fl_cast_bf16_to_f32(h, f, 65536), FL_OK);
  ck_assert_int_eq(fl_cast_f32_to_bf16(f, back, 65536), FL_OK);
  for (int i = 0; i < 65536; i++) {
    int e = (i >> 7) & 0xff, m = i & 0x7f;
    if (e == 0xff && m != 0) {
      REQUIRE(isnan(f[i]), "0x%04x -> %g", i, (double)f[i]);
      REQUIRE((back[i] & 0x7f80) == 0x7f80 && (back[i] & 0x40),
              "nan 0x%04x came back as 0x%04x", i, back[i]);
      REQUIRE((back[i] & 0x803f) == (i & 0x803f), "nan 0x%04x came back as 0x%04x", i, back[i]);
      continue;
    }
    REQUIRE(f2u(f[i]) == (uint32_t)i << 16, "0x%04x -> 0x%08x", i, f2u(f[i]));
    REQUIRE(back[i] == i, "0x%04x -> 0x%04x", i, back[i]);
  }
}
END_TEST

START_TEST(test_f16_rounding_exhaustive) {
  /* Every fp16 value, every midpoint between neighbours (exact in fp32),
   * and the floats just below and above each midpoint, both signs. */
  for (int h = 0; h < 0x7c00; h++) {
    double v = f16_value((uint16_t)h), w = h + 1 == 0x7c00 ? 65536.0 : f16_value((uint16_t)(h + 1));
    float mid = (float)((v + w) / 2);
    ck_assert((double)mid == (v + w) / 2);
    const float xs[4] = {(float)v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
    for (int k = 0; k < 4; k++)
      for (int s = 0; s < 2; s++) {
        float x = s ? -xs[k] : xs[k];
        uint16_t got = to_f16(x), want = ref_f16(x);
        REQUIRE(got == want, "%.9g (0x%08x): 0x%04x, want 0x%04x", (double)x, f2u(x), got, want);
      }
    /* the tie goes to the even one of h, h+1 */
    uint16_t t = to_f16(mid);
    REQUIRE((t & 1) == 0 && (t == h || t == h + 1), "tie above 0x%04x went to 0x%04x", h, t);
  }
}
END_TEST

START_TEST(test_random_floats) {
  uint64_t st = 12345;
  for (int i = 0; i < 1000000; i++) {
    st ^= st << 13, st ^= st >> 7, st ^= st << 17;
    uint32_t u = (uint32_t)(st >> 32);
    if (i & 1) /* half of them with exponents in and around the fp16 range */
      u = (u & 0x807fffffu) | ((uint32_t)(96 + (st & 0x3f)) << 23);
    float x = u2f(u);
    if (isnan(x))
      continue;
    uint16_t h = to_f16(x), hw = ref_f16(x);
    REQUIRE(h == hw, "fp16 of %.9g (0x%08x): 0x%04x, want 0x%04x", (double)x, u, h, hw);
    uint16_t b = to_bf16(x), bw = ref_bf16(x);
    REQUIRE(b == bw, "bf16 of %.9g (0x%08x): 0x%04x, want 0x%04x", (double)x, u, b, bw);
  }
}
END_TEST

START_TEST(test_literal_cases) {
  ck_assert_uint_eq(to_f16(1.0f), 0x3c00);
  ck_assert_uint_eq(to_f16(-2.0f), 0xc000);
  ck_assert_uint_eq(to_f16(0.1f), 0x2e66);    /* 0.0999755859375 */
  ck_assert_uint_eq(to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie, to even */
  ck_assert_uint_eq(to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie, to even */
  ck_assert_uint_eq(to_f16(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01);
  ck_assert_uint_eq(to_f16(65504.0f), 0x7bff); /* largest finite */
  ck_assert_uint_eq(to_f16(65519.996f), 0x7bff);
  ck_assert_uint_eq(to_f16(65520.0f), 0x7c00); /* tie with 65536 -> inf */
  ck_assert_uint_eq(to_f16(1e10f), 0x7c00);
  ck_assert_uint_eq(to_f16(-FLT_MAX), 0xfc00);
  ck_assert_uint_eq(to_f16(INFINITY), 0x7c00);
  ck_assert_uint_eq(to_f16(-INFINITY), 0xfc00);
  ck_assert_uint_eq(to_f16(0x1p-14f), 0x0400);  /* smallest normal */
  ck_assert_uint_eq(to_f16(0x1p-24f), 0x0001);  /* smallest subnormal */
  ck_assert_uint_eq(to_f16(0x1p-25f), 0x0000);  /* tie with 0 -> 0 */
  ck_assert_uint_eq(to_f16(0x1.000002p-25f), 0x0001);
  ck_assert_uint_eq(to_f16(3 * 0x1p-25f), 0x0002); /* tie 1|2 -> 2 */
  ck_assert_uint_eq(to_f16(0x1.ff8p-15f), 0x03ff); /* largest subnormal */
  ck_assert_uint_eq(to_f16(0x1.ffap-15f), 0x03ff);
  ck_assert_uint_eq(to_f16(0x1.ffcp-15f), 0x0400); /* tie, to even: the smallest normal */
  ck_assert_uint_eq(to_f16(1e-30f), 0x0000);
  ck_assert_uint_eq(to_f16(-1e-30f), 0x8000);
  ck_assert_uint_eq(to_f16(-0.0f), 0x8000);
  ck_assert_uint_eq(to_f16(FLT_MIN), 0x0000);
  ck_assert_uint_eq(to_f16(u2f(0x7f800001u)) & 0x7e00, 0x7e00); /* signalling nan */
  ck_assert_uint_eq(to_f16(u2f(0xffc00000u)), 0xfe00);
  ck_assert(from_f16(0x3555) == 0x1.554p-2f); /* 0.333251953125 */
  ck_assert(from_f16(0x0001) == 0x1p-24f);
  ck_assert(isnan(from_f16(0x7c01)) && f2u(from_f16(0x7c01)) & 0x400000u);

  ck_assert_uint_eq(to_bf16(1.0f), 0x3f80);
  ck_assert_uint_eq(to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie, to even */
  ck_assert_uint_eq(to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie, to even */
  ck_assert_uint_eq(to_bf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
  ck_assert_uint_eq(to_bf16(FLT_MAX), 0x7f80); /* rounds to inf */
  ck_assert_uint_eq(to_bf16(-INFINITY), 0xff80);
  ck_assert_uint_eq(to_bf16(0x1p-133f), 0x0001); /* subnormals survive */
  ck_assert_uint_eq(to_bf16(u2f(0x7f800001u)), 0x7fc0); /* nan, not inf */
  ck_assert(isnan(from_bf16(0x7f81)) && (f2u(from_bf16(0x7f81)) & 0x400000u));
  ck_assert(from_bf16(0xc040) == -3.0f);
}
END_TEST

START_TEST(test_large_arrays) {
  /* Threaded conversion of a big array equals element-by-element. */
  size_t n = 300007;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  uint16_t *h = malloc(n * sizeof *h), *b = malloc(n * sizeof *b);
  ck_assert(x && y && h && b);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)((double)i * 0.37 - 50000.0) * (i % 3 ? 1e-3f : 1.0f);
  ck_assert_int_eq(fl_cast_f32_to_f16(x, h, n), FL_OK);
  ck_assert_int_eq(fl_cast_f32_to_bf16(x, b, n), FL_OK);
  for (size_t i = 0; i < n; i++) {
    REQUIRE(h[i] == ref_f16(x[i]), "fp16 of x[%zu] = %.9g: 0x%04x", i, (double)x[i], h[i]);
    REQUIRE(b[i] == ref_bf16(x[i]), "bf16 of x[%zu] = %.9g: 0x%04x", i, (double)x[i], b[i]);
  }
  ck_assert_int_eq(fl_cast_f16_to_f32(h, y, n), FL_OK);
  for (size_t i = 0; i < n; i++)
    REQUIRE((double)y[i] == f16_value(h[i]) || isinf(y[i]), "fp16 0x%04x -> %.9g", h[i],
            (double)y[i]);
  ck_assert_int_eq(fl_cast_bf16_to_f32(b, y, n), FL_OK);
  for (size_t i = 0; i < n; i++)
    REQUIRE(f2u(y[i]) == (uint32_t)b[i] << 16, "bf16 0x%04x -> 0x%08x", b[i], f2u(y[i]));
  free(x), free(y), free(h), free(b);
}
END_TEST

START_TEST(test_bad_args) {
  float f[4] = {1, 2, 3, 4};
  uint16_t h[4] = {0};
  ck_assert_int_eq(fl_cast_f32_to_f16(NULL, NULL, 0), FL_OK); /* n == 0 is a no-op */
  ck_assert_int_eq(fl_cast_f16_to_f32(NULL, NULL, 0), FL_OK);
  ck_assert_int_eq(fl_cast_f32_to_f16(NULL, h, 4), FL_EINVAL);
  ck_assert_int_eq(fl_cast_f32_to_f16(f, NULL, 4), FL_EINVAL);
  ck_assert_int_eq(fl_cast_f16_to_f32(NULL, f, 4), FL_EINVAL);
  ck_assert_int_eq(fl_cast_f16_to_f32(h, NULL, 4), FL_EINVAL);
  ck_assert_int_eq(fl_cast_f32_to_bf16(f, NULL, 4), FL_EINVAL);
  ck_assert_int_eq(fl_cast_bf16_to_f32(NULL, f, 4), FL_EINVAL);
  ck_assert_int_eq(fl_cast_f32_to_f16(f, (uint16_t *)f, 4), FL_EINVAL); /* in place */
  ck_assert_int_eq(fl_cast_bf16_to_f32((uint16_t *)f + 2, f, 4), FL_EINVAL);
  ck_assert_int_eq(fl_cast_f32_to_f16(f, h, SIZE_MAX / 2), FL_EINVAL);
  ck_assert(f[0] == 1 && f[3] == 4 && h[0] == 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cast");
  TCase *tc = tcase_create("cast");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_f16_all_patterns);
  tcase_add_test(tc, test_bf16_all_patterns);
  tcase_add_test(tc, test_f16_rounding_exhaustive);
  tcase_add_test(tc, test_random_floats);
  tcase_add_test(tc, test_literal_cases);
  tcase_add_test(tc, test_large_arrays);
  tcase_add_test(tc, test_bad_args);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
