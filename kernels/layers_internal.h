/* layers_internal.h - helpers the CPU layer kernels share (never installed).
 *
 * Unchecked inner loops that the public, validating entry points of
 * layers.c, conv.c and norm.c call after their argument checks.  Hidden
 * from the library's exported symbols. */
#ifndef FL_LAYERS_INTERNAL_H
#define FL_LAYERS_INTERNAL_H

#include <stddef.h>

#include "fl_layers.h"

#define FL_INTERNAL __attribute__((visibility("hidden")))

/* 1 when act is one of the fl_act values. */
FL_INTERNAL int fl_act_valid(fl_act act);
/* y = act(y) in place over n floats. */
FL_INTERNAL void fl_act_apply(fl_act act, float *y, size_t n);
/* dy *= act'(y) in place (from the activated output y); no-op for NONE. */
FL_INTERNAL void fl_act_grad_inplace(fl_act act, const float *y, float *dy, size_t n);
/* db[c] = sum over n, s of dy[n, c, s]. */
FL_INTERNAL void fl_bias_grad(const float *dy, float *db, size_t batch, size_t channels,
                              size_t inner);

#endif
