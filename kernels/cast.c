/* cast.c - fp32 <-> fp16 (IEEE binary16) and fp32 <-> bf16 on the CPU.
 *
 * Written with integer bit operations rather than _Float16 or F16C so that
 * every build, every compiler and every CPU gives the same bits: round to
 * nearest, ties to even; overflow rounds to inf; fp16 subnormals are kept;
 * inf stays inf; nan stays nan and comes out quiet (payload bits kept where
 * they fit).  Large arrays are split among OpenMP threads. */
#include <config.h>

#include "fl_optim.h"
#include "kern_internal.h"

static inline uint16_t f32_to_f16(float f) {
  uint32_t x = fl_kern_f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu, h;
  if (a > 0x7f800000u) { /* nan: keep the top payload bits, set quiet */
    h = 0x7e00u | ((a >> 13) & 0x3ffu);
  } else if (a >= 0x477ff000u) { /* >= 65520 (half an ulp above 65504) and inf */
    h = 0x7c00u;
  } else if (a >= 0x38800000u) { /* normal fp16: rebias 127 -> 15, round 13 bits */
    uint32_t r = a - 0x38000000u;
    h = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  } else if (a > 0x33000000u) { /* fp16 subnormal: units of 2^-24 */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, s = 126u - e; /* 14..24 */
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    h = q + (rem > half || (rem == half && (q & 1u)));
  } else { /* <= 2^-25 rounds to zero (2^-25 itself is a tie, to even 0) */
    h = 0;
  }
  return (uint16_t)(sign | h);
}

static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0x1fu) /* inf, or nan made quiet */
    x = 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);
  else if (e == 0) /* zero or subnormal: m * 2^-24 is exact in fp32 */
    x = fl_kern_f2u((float)m * 0x1p-24f);
  else
    x = ((e + 112u) << 23) | (m << 13);
  return fl_kern_u2f(sign | x);
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t x = fl_kern_f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline float bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  if ((x & 0x7fffffffu) > 0x7f800000u)
    x |= 0x400000u;
  return fl_kern_u2f(x);
}

/* Argument rules shared by the four casts. */
static fl_status check_cast(const void *src, size_t sbytes, const void *dst, size_t dbytes,
                            size_t n) {
  if (n == 0)
    return FL_OK;
  if (!src || !dst || n > SIZE_MAX / sizeof(float) || fl_kern_overlap(src, sbytes, dst, dbytes))
    return FL_EINVAL;
  return FL_OK;
}

/* Run `body` over [lo, hi) of n elements on the threads fl_kern_threads
 * picks. */
#define FL_CAST_PAR(n, body)                                                          \
  do {                                                                                \
    int nthr_ = fl_kern_threads(0, (n));                                              \
    (void)nthr_; /* unused without OpenMP */                                          \
    FL_OMP(omp parallel num_threads(nthr_) if (nthr_ > 1))                            \
    {                                                                                 \
      size_t T_ = (size_t)fl_kern_nthreads(), k_ = (size_t)fl_kern_tid();             \
      size_t lo = fl_kern_split((n), T_, k_, 32), hi = fl_kern_split((n), T_, k_ + 1, 32); \
      body;                                                                           \
    }                                                                                 \
  } while (0)

fl_status fl_cast_f32_to_f16(const float *src, uint16_t *dst, size_t n) {
  fl_status st = check_cast(src, n * 4, dst, n * 2, n);
  if (st != FL_OK || n == 0)
    return st;
  FL_CAST_PAR(n, for (size_t i = lo; i < hi; i++) dst[i] = f32_to_f16(src[i]));
  return FL_OK;
}

fl_status fl_cast_f16_to_f32(const uint16_t *src, float *dst, size_t n) {
  fl_status st = check_cast(src, n * 2, dst, n * 4, n);
  if (st != FL_OK || n == 0)
    return st;
  FL_CAST_PAR(n, for (size_t i = lo; i < hi; i++) dst[i] = f16_to_f32(src[i]));
  return FL_OK;
}

fl_status fl_cast_f32_to_bf16(const float *src, uint16_t *dst, size_t n) {
  fl_status st = check_cast(src, n * 4, dst, n * 2, n);
  if (st != FL_OK || n == 0)
    return st;
  FL_CAST_PAR(n, for (size_t i = lo; i < hi; i++) dst[i] = f32_to_bf16(src[i]));
  return FL_OK;
}

fl_status fl_cast_bf16_to_f32(const uint16_t *src, float *dst, size_t n) {
  fl_status st = check_cast(src, n * 2, dst, n * 4, n);
  if (st != FL_OK || n == 0)
    return st;
  FL_CAST_PAR(n, for (size_t i = lo; i < hi; i++) dst[i] = bf16_to_f32(src[i]));
  return FL_OK;
}
