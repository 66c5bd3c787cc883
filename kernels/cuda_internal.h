/* cuda_internal.h - what the CUDA files of kernels/ share (never installed).
 *
 * The boundary where CUDA, cuBLAS and cuDNN errors become FL_ECUDA: each
 * failing call is logged once here, with the calling function and what it
 * was doing, and the code propagates from there.  Also the stream cast and
 * the launch-error check every entry point does after queuing its kernels. */
#ifndef FL_CUDA_INTERNAL_H
#define FL_CUDA_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "fl_status.h"

extern "C" {
#include "fl_log.h"
}

/* The public headers pass streams as void* so that C callers need no CUDA
 * headers; NULL is the default stream. */
static inline cudaStream_t fl_stream(void *s) { return (cudaStream_t)s; }

/* Evaluate a CUDA runtime call; on failure log it (function, what) and
 * return FL_ECUDA from the enclosing function.  For use where no cleanup is
 * pending; with cleanup, use FL_CUDA_GOTO. */
#define FL_CUDA_TRY(call, what)                                                     \
  do {                                                                              \
    cudaError_t fl_ce_ = (call);                                                    \
    if (fl_ce_ != cudaSuccess)                                                      \
      return FL_ERR(FL_ECUDA, "%s: %s: %s", __func__, (what), cudaGetErrorString(fl_ce_)); \
  } while (0)

/* Same, but store FL_ECUDA in st and jump to fail. */
#define FL_CUDA_GOTO(call, what, st)                                                \
  do {                                                                              \
    cudaError_t fl_ce_ = (call);                                                    \
    if (fl_ce_ != cudaSuccess) {                                                    \
      (st) = FL_ERR(FL_ECUDA, "%s: %s: %s", __func__, (what), cudaGetErrorString(fl_ce_)); \
      goto fail;                                                                    \
    }                                                                               \
  } while (0)

/* FL_TRY for C++ (fl_log.h's version returns an int, which C++ will not
 * convert back to fl_status). */
#define FL_CU_TRY(expr)                                                             \
  do {                                                                              \
    fl_status fl_cu_st_ = (expr);                                                   \
    if (fl_cu_st_ != FL_OK) return fl_cu_st_;                                       \
  } while (0)

/* After queuing kernels: report a launch failure (bad configuration, no
 * device, a sticky error from earlier work) as FL_ECUDA. */
#define FL_CUDA_LAUNCHED(what) FL_CUDA_TRY(cudaGetLastError(), (what))

/* fp32 <-> fp16 / bf16 bit recipes of kernels/cast.c (round to nearest
 * even, overflow to inf, fp16 subnormals kept, nan kept and made quiet with
 * the payload bits that fit), as host+device functions so that the CUDA
 * casts give the CPU's bits. */
__host__ __device__ static inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

__host__ __device__ static inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

__host__ __device__ static inline uint16_t f32_to_f16(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu, h;
  if (a > 0x7f800000u) { /* nan: quiet, top payload bits */
    h = 0x7e00u | ((a >> 13) & 0x3ffu);
  } else if (a >= 0x477ff000u) { /* 65520 and up round to inf */
    h = 0x7c00u;
  } else if (a >= 0x38800000u) { /* normal: rebias the exponent, round off 13 bits */
    uint32_t r = a - 0x38000000u;
    h = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  } else if (a > 0x33000000u) { /* subnormal, in units of 2^-24 */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, s = 126u - e;
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    h = q + (rem > half || (rem == half && (q & 1u)) ? 1u : 0u);
  } else { /* up to 2^-25 (a tie, to even): zero */
    h = 0;
  }
  return (uint16_t)(sign | h);
}

__host__ __device__ static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0x1fu)
    x = 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);
  else if (e == 0) /* m * 2^-24 is exact in fp32 */
    x = f2u((float)m * 0x1p-24f);
  else
    x = ((e + 112u) << 23) | (m << 13);
  return u2f(sign | x);
}

__host__ __device__ static inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

__host__ __device__ static inline float bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  if ((x & 0x7fffffffu) > 0x7f800000u) x |= 0x400000u;
  return u2f(x);
}

#endif
