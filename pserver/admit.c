/* admit.c - a count-min sketch (conservative update) counting how often a
 * sparse table's ids were seen, so that the table admits an id (creates
 * its row) only once it was seen often enough; the bound it keeps is in
 * ps_admit.h.  Kernels-free: plain counters, one hash per row.  An add
 * takes the sketch's own mutex: the lock stripes of a table share one
 * sketch, and only an id without a row (a miss) counts a sighting. */
#include <config.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fl_log.h"
#include "fl_ps_layout.h"
#include "ps_admit.h"

struct fl_ps_sketch {
  size_t width;      /* counters per row */
  uint64_t seed[FL_PS_SKETCH_DEPTH];
  uint64_t total;
  uint32_t *c;       /* [FL_PS_SKETCH_DEPTH * width] */
  pthread_mutex_t mu; /* an add's read and update as one */
};

fl_status fl_ps_sketch_create(size_t bytes, uint64_t seed, fl_ps_sketch **out) {
  fl_ps_sketch *s;
  *out = NULL;
  if (bytes < FL_PS_SKETCH_MIN_BYTES)
    return FL_ERR(FL_EINVAL, "admission sketch: %zu bytes is below the smallest (%zu): raise "
                  "pserver.sparse.admit_sketch_bytes", bytes, (size_t)FL_PS_SKETCH_MIN_BYTES);
  s = calloc(1, sizeof *s);
  if (!s) return FL_ERR(FL_ENOMEM, "admission sketch: out of memory");
  s->width = bytes / (FL_PS_SKETCH_DEPTH * sizeof *s->c);
  s->c = calloc(FL_PS_SKETCH_DEPTH * s->width, sizeof *s->c);
  if (!s->c) {
    free(s);
    return FL_ERR(FL_ENOMEM, "admission sketch: out of memory for %zu bytes", bytes);
  }
  for (int i = 0; i < FL_PS_SKETCH_DEPTH; i++)
    s->seed[i] = fl_ps_mix64(seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1));
  pthread_mutex_init(&s->mu, NULL);
  *out = s;
  return FL_OK;
}

void fl_ps_sketch_free(fl_ps_sketch *s) {
  if (!s) return;
  pthread_mutex_destroy(&s->mu);
  free(s->c);
  free(s);
}

/* The counter of key in row i. */
static uint32_t *cell(const fl_ps_sketch *s, int i, uint64_t key) {
  uint64_t h = fl_ps_mix64(key ^ s->seed[i]);
  return s->c + (size_t)i * s->width + (size_t)(h % s->width);
}

uint32_t fl_ps_sketch_estimate(const fl_ps_sketch *s, uint64_t key) {
  uint32_t m = UINT32_MAX;
  for (int i = 0; i < FL_PS_SKETCH_DEPTH; i++) {
    uint32_t v = *cell(s, i, key);
    if (v < m) m = v;
  }
  return m;
}

uint32_t fl_ps_sketch_add(fl_ps_sketch *s, uint64_t key) {
  uint32_t est, want;
  pthread_mutex_lock(&s->mu);
  est = fl_ps_sketch_estimate(s, key);
  want = est == UINT32_MAX ? est : est + 1;
  /* Conservative update: no counter needs to exceed the new estimate. */
  for (int i = 0; want != est && i < FL_PS_SKETCH_DEPTH; i++) {
    uint32_t *p = cell(s, i, key);
    if (*p < want) *p = want;
  }
  s->total += want != est;
  pthread_mutex_unlock(&s->mu);
  return want;
}

uint64_t fl_ps_sketch_total(const fl_ps_sketch *s) { return s->total; }

const uint32_t *fl_ps_sketch_counters(const fl_ps_sketch *s, size_t *n) {
  *n = FL_PS_SKETCH_DEPTH * s->width;
  return s->c;
}

fl_status fl_ps_sketch_restore(fl_ps_sketch *s, const uint32_t *counters, size_t n,
                               uint64_t total, const char *what) {
  if (n != FL_PS_SKETCH_DEPTH * s->width)
    return FL_ERR(FL_ECORRUPT, "%s: the admission sketch holds %zu counters, this table's %zu: "
                  "resume with the admit_sketch_bytes it was written with", what, n,
                  FL_PS_SKETCH_DEPTH * s->width);
  memcpy(s->c, counters, n * sizeof *s->c);
  s->total = total;
  return FL_OK;
}
