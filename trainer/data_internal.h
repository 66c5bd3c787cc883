/* data_internal.h - helpers shared by the data sources (never installed):
 * a small deterministic random generator (splitmix64 seeding xoshiro256**),
 * so shuffles and synthetic data are the same bits on every rank and every
 * run, whatever the platform's rand(). */
#ifndef FL_DATA_INTERNAL_H
#define FL_DATA_INTERNAL_H

#include <math.h>
#include <stdint.h>

typedef struct fl_drng {
  uint64_t s[4];
} fl_drng;

static inline uint64_t fl_drng_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Seed from up to three words (e.g. seed, epoch, stream). */
static inline void fl_drng_seed(fl_drng *r, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = fl_drng_mix(a) ^ fl_drng_mix(b + 0x632be59bd9b4e019ULL) ^
               fl_drng_mix(c + 0x8cb92ba72f3d8dd7ULL);
  for (int i = 0; i < 4; i++) {
    x = fl_drng_mix(x + (uint64_t)i);
    r->s[i] = x;
  }
}

static inline uint64_t fl_drng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t fl_drng_next(fl_drng *r) {
  uint64_t *s = r->s;
  uint64_t out = fl_drng_rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = fl_drng_rotl(s[3], 45);
  return out;
}

/* Uniform integer in [0, bound) (bound > 0), by multiply-shift. */
static inline uint64_t fl_drng_below(fl_drng *r, uint64_t bound) {
  return (uint64_t)(((unsigned __int128)fl_drng_next(r) * bound) >> 64);
}

/* Uniform double in [0, 1). */
static inline double fl_drng_uniform(fl_drng *r) {
  return (double)(fl_drng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller, one of the pair). */
static inline double fl_drng_normal(fl_drng *r) {
  double u1 = fl_drng_uniform(r), u2 = fl_drng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
