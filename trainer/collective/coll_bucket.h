/* coll_bucket.h - gradient fusion buckets (internal to collective mode).
 *
 * Gradients are packed, in reverse parameter order (the order backward
 * finishes them: last layer first), into buckets whose allreduce can start
 * as soon as their last gradient exists.  With fusion off every parameter
 * is its own bucket.  With fusion on a bucket closes before a parameter
 * that would take it past max_bytes (fuse_grad_size_in_MB), or before a
 * parameter of a new layer when it already spans max_layers layers
 * (fuse_grad_size_in_TFLOPS, read as a layer count); a parameter larger
 * than max_bytes gets a bucket of its own.  Buffers (no gradient) are in
 * no bucket. */
#ifndef FL_COLL_BUCKET_H
#define FL_COLL_BUCKET_H

#include <stddef.h>

#include "fl_status.h"

typedef struct fl_bucket_plan {
  size_t nb;         /* buckets, in the order they fill */
  size_t *start;     /* nb + 1 offsets into order */
  size_t *order;     /* trainable parameter indices, bucket by bucket */
  size_t *floats;    /* nb: floats of each bucket */
  int *bucket_of;    /* np: bucket of parameter i, -1 for buffers */
  size_t *offset;    /* np: float offset of parameter i in its bucket */
} fl_bucket_plan;

/* Plan np parameters: n[i] floats, layer[i], trainable[i] (0 = buffer).
 * On success the caller owns *out (fl_bucket_plan_free).  FL_EINVAL for
 * max_bytes 0 or max_layers < 1 with fusion on; FL_ENOMEM. */
fl_status fl_bucket_plan_build(const size_t *n, const int *layer, const int *trainable, size_t np,
                               int fuse, size_t max_bytes, int max_layers, fl_bucket_plan *out);
void fl_bucket_plan_free(fl_bucket_plan *p);

#endif
