/* ps_admit.h - the count-min sketch behind a sparse table's feature
 * admission (pserver/admit.c): how often each id was seen in training
 * pulls, in a fixed amount of memory, so that a table creates a row only
 * for an id seen admit_threshold times.  Private to pserver/.
 *
 * Error bound: with depth d = FL_PS_SKETCH_DEPTH rows of w counters and N
 * sightings counted in all, an id's estimate is never below its true count
 * and exceeds it by more than 2N/w with probability at most 2^-d (each
 * row's excess is at most N/w on average; Markov, rows hashed
 * independently).  Conservative update (only the smallest counters grow)
 * keeps the excess lower still.  Counters saturate at UINT32_MAX.
 * fl_ps_sketch_add may be called from several threads at once (the lock
 * stripes of one table share its sketch: an add takes the sketch's mutex);
 * the others need the adds stopped (every stripe of the table locked).
 * Conservative update depends on the order of the adds only where ids
 * share counters: with no collision among them, any order gives the same
 * counters. */
#ifndef FL_PS_ADMIT_H
#define FL_PS_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "fl_status.h"

#define FL_PS_SKETCH_DEPTH 4
/* Smallest sketch: 4 rows of 64 counters. */
#define FL_PS_SKETCH_MIN_BYTES (FL_PS_SKETCH_DEPTH * 64 * sizeof(uint32_t))

typedef struct fl_ps_sketch fl_ps_sketch;

/* A zeroed sketch of at most bytes bytes of counters (at least
 * FL_PS_SKETCH_MIN_BYTES, else FL_EINVAL, logged), hashing with seed.
 * The caller owns *out (fl_ps_sketch_free). */
fl_status fl_ps_sketch_create(size_t bytes, uint64_t seed, fl_ps_sketch **out);
void fl_ps_sketch_free(fl_ps_sketch *s);

/* Count one more sighting of key; returns its new estimate. */
uint32_t fl_ps_sketch_add(fl_ps_sketch *s, uint64_t key);
/* The estimate of key's sightings (never below the true count). */
uint32_t fl_ps_sketch_estimate(const fl_ps_sketch *s, uint64_t key);
/* Sightings counted in all (N of the bound). */
uint64_t fl_ps_sketch_total(const fl_ps_sketch *s);

/* The counters (checkpoints): *n gets their count (depth * width); the
 * array stays owned by the sketch. */
const uint32_t *fl_ps_sketch_counters(const fl_ps_sketch *s, size_t *n);
/* Replace the counters and the total with saved ones; FL_ECORRUPT (logged,
 * naming what) when n is not this sketch's count. */
fl_status fl_ps_sketch_restore(fl_ps_sketch *s, const uint32_t *counters, size_t n,
                               uint64_t total, const char *what);

#endif
