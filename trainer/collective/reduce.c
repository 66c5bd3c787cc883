/* reduce.c - the element arithmetic and the small wire codecs of the
 * collective engine: dtype sizes, fixed-order sums (16-bit types through
 * fp32 with the kernel library's casts), the connection hello, and the
 * constant-time token comparison.
 *
 * The sums never reorder: dst = src + dst element by element, or
 * s0 + s1 + ... in index order, so that every backend is deterministic. */
#include <config.h>

#include <string.h>

#include "coll_internal.h"
#include "fl_optim.h"

#define BLOCK 1024 /* elements converted at a time through the stack */

/* Element-wise loops are vectorised (each element is still one add in the
 * same operand order, so the bits do not change); GCC does not vectorise
 * them at -O2 on its own. */
#ifdef _OPENMP
#define SIMD _Pragma("omp simd")
#else
#define SIMD
#endif

size_t fl_coll_dtype_size(fl_coll_dtype dt) {
  switch (dt) {
  case FL_COLL_F32: return 4;
  case FL_COLL_F16:
  case FL_COLL_BF16: return 2;
  case FL_COLL_F64: return 8;
  }
  return 0;
}

const char *fl_coll_dtype_name(fl_coll_dtype dt) {
  switch (dt) {
  case FL_COLL_F32: return "fp32";
  case FL_COLL_F16: return "fp16";
  case FL_COLL_BF16: return "bf16";
  case FL_COLL_F64: return "fp64";
  }
  return "unknown";
}

static void to_f32(fl_coll_dtype dt, const uint16_t *src, float *dst, size_t n) {
  if (dt == FL_COLL_F16)
    fl_cast_f16_to_f32(src, dst, n);
  else
    fl_cast_bf16_to_f32(src, dst, n);
}

static void from_f32(fl_coll_dtype dt, const float *src, uint16_t *dst, size_t n) {
  if (dt == FL_COLL_F16)
    fl_cast_f32_to_f16(src, dst, n);
  else
    fl_cast_f32_to_bf16(src, dst, n);
}

void coll_reduce_into(fl_coll_dtype dt, void *dst, const void *src, size_t n) {
  switch (dt) {
  case FL_COLL_F32: {
    float *restrict d = dst;
    const float *restrict s = src;
    SIMD for (size_t i = 0; i < n; i++) d[i] = s[i] + d[i];
    return;
  }
  case FL_COLL_F64: {
    double *restrict d = dst;
    const double *restrict s = src;
    SIMD for (size_t i = 0; i < n; i++) d[i] = s[i] + d[i];
    return;
  }
  case FL_COLL_F16:
  case FL_COLL_BF16: {
    uint16_t *d = dst;
    const uint16_t *s = src;
    float a[BLOCK], b[BLOCK];
    for (size_t o = 0; o < n; o += BLOCK) {
      size_t m = n - o < BLOCK ? n - o : BLOCK;
      to_f32(dt, s + o, a, m);
      to_f32(dt, d + o, b, m);
      SIMD for (size_t i = 0; i < m; i++) b[i] = a[i] + b[i];
      from_f32(dt, b, d + o, m);
    }
    return;
  }
  }
}

/* One block of the sum lands in dst and, when given, in dst2 too (while
 * it is still in the cache). */
static void put2(void *dst, void *dst2, size_t off, const void *acc, size_t bytes) {
  memcpy((uint8_t *)dst + off, acc, bytes);
  if (dst2) memcpy((uint8_t *)dst2 + off, acc, bytes);
}

void coll_reduce_many(fl_coll_dtype dt, void *dst, void *dst2, const void *const *srcs, int k,
                       size_t n) {
  switch (dt) {
  case FL_COLL_F32: {
    for (size_t o = 0; o < n; o += BLOCK) {
      size_t m = n - o < BLOCK ? n - o : BLOCK;
      float acc[BLOCK];
      memcpy(acc, (const float *)srcs[0] + o, m * sizeof(float));
      for (int j = 1; j < k; j++) {
        const float *s = (const float *)srcs[j] + o;
        SIMD for (size_t i = 0; i < m; i++) acc[i] += s[i];
      }
      put2(dst, dst2, o * sizeof(float), acc, m * sizeof(float));
    }
    return;
  }
  case FL_COLL_F64: {
    for (size_t o = 0; o < n; o += BLOCK) {
      size_t m = n - o < BLOCK ? n - o : BLOCK;
      double acc[BLOCK];
      memcpy(acc, (const double *)srcs[0] + o, m * sizeof(double));
      for (int j = 1; j < k; j++) {
        const double *s = (const double *)srcs[j] + o;
        SIMD for (size_t i = 0; i < m; i++) acc[i] += s[i];
      }
      put2(dst, dst2, o * sizeof(double), acc, m * sizeof(double));
    }
    return;
  }
  case FL_COLL_F16:
  case FL_COLL_BF16: {
    for (size_t o = 0; o < n; o += BLOCK) {
      size_t m = n - o < BLOCK ? n - o : BLOCK;
      float acc[BLOCK], t[BLOCK];
      uint16_t out[BLOCK];
      to_f32(dt, (const uint16_t *)srcs[0] + o, acc, m);
      for (int j = 1; j < k; j++) {
        to_f32(dt, (const uint16_t *)srcs[j] + o, t, m);
        SIMD for (size_t i = 0; i < m; i++) acc[i] += t[i];
      }
      from_f32(dt, acc, out, m);
      put2(dst, dst2, o * sizeof(uint16_t), out, m * sizeof(uint16_t));
    }
    return;
  }
  }
}

/* Hello layout (little-endian):
 *   u32 magic, u32 version, i32 rank, i32 world, u64 session, u32 tag,
 *   u32 ring, u16 port, u16 host_len, u16 token_len, host, token */
#define HELLO_FIXED 38

size_t coll_hello_encode(const coll_hello *h, uint8_t *out, size_t cap) {
  size_t hl = strnlen(h->host, FL_HOST_MAX - 1);
  size_t need = HELLO_FIXED + hl + h->token_len;
  if (need > cap || h->token_len >= FL_TOKEN_MAX) return 0;
  coll_put_u32(out, h->magic);
  coll_put_u32(out + 4, h->version);
  coll_put_u32(out + 8, (uint32_t)h->rank);
  coll_put_u32(out + 12, (uint32_t)h->world);
  coll_put_u64(out + 16, h->session);
  coll_put_u32(out + 24, h->tag);
  coll_put_u32(out + 28, h->ring);
  coll_put_u16(out + 32, h->port);
  coll_put_u16(out + 34, (uint16_t)hl);
  coll_put_u16(out + 36, (uint16_t)h->token_len);
  memcpy(out + HELLO_FIXED, h->host, hl);
  memcpy(out + HELLO_FIXED + hl, h->token, h->token_len);
  return need;
}

fl_status coll_hello_decode(const uint8_t *p, size_t len, coll_hello *h) {
  memset(h, 0, sizeof(*h));
  if (len < HELLO_FIXED) return FL_EPROTO;
  h->magic = coll_get_u32(p);
  h->version = coll_get_u32(p + 4);
  h->rank = (int32_t)coll_get_u32(p + 8);
  h->world = (int32_t)coll_get_u32(p + 12);
  h->session = coll_get_u64(p + 16);
  h->tag = coll_get_u32(p + 24);
  h->ring = coll_get_u32(p + 28);
  h->port = coll_get_u16(p + 32);
  size_t hl = coll_get_u16(p + 34), tl = coll_get_u16(p + 36);
  if (hl >= FL_HOST_MAX || tl >= FL_TOKEN_MAX || HELLO_FIXED + hl + tl != len)
    return FL_EPROTO;
  memcpy(h->host, p + HELLO_FIXED, hl);
  h->host[hl] = '\0';
  memcpy(h->token, p + HELLO_FIXED + hl, tl);
  h->token_len = tl;
  return FL_OK;
}

int coll_token_equal(const char *expected, size_t elen, const char *got, size_t glen) {
  /* Every byte of the expected token is compared against the presented one
   * (wrapped when shorter), so the time does not depend on where they first
   * differ; a length difference is folded into the same accumulator. */
  volatile unsigned diff = (unsigned)(elen ^ glen);
  for (size_t i = 0; i < elen; i++) {
    unsigned char g = glen ? (unsigned char)got[i % glen] : 0;
    diff |= (unsigned)((unsigned char)expected[i] ^ g);
  }
  return diff == 0;
}
