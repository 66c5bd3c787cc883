/* data_augment.c - training-time augmentation of image samples: a random
 * horizontal flip and a random crop from a padded image, what
 * torchvision's RandomHorizontalFlip and RandomCrop(size, padding) and
 * Paddle's vision transforms of the same names do, so that a recipe
 * written for PyTorch keeps its accuracy here.
 *
 * The draws of a sample come from (seed, epoch, sample index) alone, never
 * from a generator that advances batch after batch: a batch is the same
 * bits whatever the prefetch depth, the number of ranks, or where a
 * resumed run starts. */
#include <config.h>

#include <string.h>

#include "data_internal.h"
#include "fl_data.h"
#include "fl_log.h"

fl_status fl_augment_check(const fl_augment *a, const char *what) {
  if (!a->hflip && !a->crop_padding) return FL_OK;
  if (a->channels < 1 || a->height < 2 || a->width < 2)
    return FL_ERR(FL_EINVAL, "%s: data.augment needs image samples (channels x height x width)",
                  what);
  if (a->crop_padding < 0 || a->crop_padding >= a->height || a->crop_padding >= a->width)
    return FL_ERR(FL_EINVAL, "%s: data.augment.random_crop_padding %d must be below the "
                  "image's height and width (%d x %d)", what, a->crop_padding, a->height,
                  a->width);
  return FL_OK;
}

/* Ownership: x (channels*height*width floats) and scratch (as many) are
 * the caller's; x is rewritten in place. */
void fl_augment_sample(const fl_augment *a, int64_t epoch, size_t sample, float *x,
                       float *scratch) {
  const int H = a->height, W = a->width, P = a->crop_padding;
  fl_drng r;
  fl_drng_seed(&r, a->seed ^ 0x61756731ULL, (uint64_t)epoch, (uint64_t)sample);
  /* torchvision order: the crop (offsets in [0, 2P]) first, then the flip */
  int dy = P ? (int)fl_drng_below(&r, (uint64_t)(2 * P + 1)) - P : 0;
  int dx = P ? (int)fl_drng_below(&r, (uint64_t)(2 * P + 1)) - P : 0;
  int flip = a->hflip && (fl_drng_next(&r) >> 63);
  if (!dy && !dx && !flip) return;
  size_t plane = (size_t)H * (size_t)W;
  memcpy(scratch, x, (size_t)a->channels * plane * sizeof *x);
  for (int c = 0; c < a->channels; c++) {
    const float *src = scratch + (size_t)c * plane;
    float *dst = x + (size_t)c * plane;
    for (int i = 0; i < H; i++) {
      int si = i + dy;
      for (int j = 0; j < W; j++) {
        int sj = (flip ? W - 1 - j : j) + dx;
        dst[(size_t)i * W + j] =
            si < 0 || si >= H || sj < 0 || sj >= W ? a->fill : src[(size_t)si * W + sj];
      }
    }
  }
}
