/* fuzz_idx.c - the IDX image/label reader (fl_idx_load_mem, fl_idx_load)
 * on hostile files.
 *
 * Input: 4 header bytes, then the two files.
 *   byte 0   num_classes - 1 (so 1..256)
 *   byte 1   flags: bit 0 read through files (memfds) with fl_idx_load,
 *            bit 1 gzip the image file first, bit 2 gzip the label file
 *            first (both only with bit 0: the memory reader takes plain
 *            bytes), bits 4-5 the sample limit: 0, 1, 3 or 1000
 *   byte 2-3 length of the image file (little-endian, clamped to what is
 *            there); the label file is the rest
 * Invariants: a refused pair gives FL_EPROTO or FL_EINVAL (FL_EIO /
 * FL_ENOTFOUND only for files; never FL_ENOMEM: no input of a megabyte
 * needs gigabytes, see replay.c) and a zeroed dataset; an accepted
 * one has n <= limit, 28x28-style sizes from the header, pixels in [0, 1],
 * labels in [0, num_classes), and normalises to finite values. */
#include <config.h>

#include <math.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fl_data.h"
#include "fuzz.h"

#define FUZZ_MAX_INPUT (1 << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_logging();
  return 0;
}

/* A memfd holding p[0..n), gzip-compressed when gz; its /proc path in
 * path.  Returns the fd (the caller closes it). */
static int make_file(const uint8_t *p, size_t n, int gz, char *path, size_t cap) {
  uint8_t *z = gz ? fuzz_gzip(p, n, &n) : NULL;
  int fd = fuzz_memfile(z ? z : p, n, path, cap);
  free(z);
  return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t limits[4] = {0, 1, 3, 1000};
  fl_dataset d;
  fl_status st;

  if (size < 4 || size > FUZZ_MAX_INPUT) return 0;
  int num_classes = data[0] + 1;
  int flags = data[1];
  size_t limit = limits[(flags >> 4) & 3];
  const uint8_t *body = data + 4;
  size_t blen = size - 4;
  size_t ilen = fuzz_u16(data + 2);
  if (ilen > blen) ilen = blen;

  if (flags & 1) {
    char ipath[64], lpath[64];
    int ifd = make_file(body, ilen, flags & 2, ipath, sizeof ipath);
    int lfd = make_file(body + ilen, blen - ilen, flags & 4, lpath, sizeof lpath);
    st = fl_idx_load(ipath, lpath, num_classes, limit, &d);
    close(ifd);
    close(lfd);
  } else {
    st = fl_idx_load_mem(body, ilen, "images", body + ilen, blen - ilen, "labels", num_classes,
                         limit, &d);
  }
  if (st != FL_OK) {
    FUZZ_CHECK(st == FL_EPROTO || st == FL_EINVAL ||
                   ((flags & 1) && (st == FL_EIO || st == FL_ENOTFOUND)),
               "status %d", (int)st);
    FUZZ_CHECK(d.x == NULL && d.y == NULL && d.n == 0, "dataset not zeroed on error");
    return 0;
  }
  FUZZ_CHECK(d.n >= 1 && (!limit || d.n <= limit), "n %zu, limit %zu", d.n, limit);
  FUZZ_CHECK(d.channels == 1 && d.height >= 1 && d.width >= 1 &&
                 d.dim == (size_t)d.height * (size_t)d.width,
             "dims %d x %d x %d, dim %zu", d.channels, d.height, d.width, d.dim);
  FUZZ_CHECK(d.num_classes == num_classes, "num_classes %d", d.num_classes);
  for (size_t i = 0; i < d.n; i++)
    FUZZ_CHECK(d.y[i] >= 0 && d.y[i] < num_classes, "label %d", (int)d.y[i]);
  for (size_t i = 0; i < d.n * d.dim; i++)
    FUZZ_CHECK(d.x[i] >= 0.0f && d.x[i] <= 1.0f, "pixel %g", (double)d.x[i]);
  double mean, sd;
  fl_dataset_mean_std(&d, &mean, &sd);
  FUZZ_CHECK(isfinite(mean) && isfinite(sd) && sd >= 0.0, "mean %g std %g", mean, sd);
  st = fl_dataset_normalize(&d, mean, sd);
  FUZZ_CHECK(st == (sd > 0.0 ? FL_OK : FL_EINVAL), "normalize: %d", (int)st);
  for (size_t i = 0; st == FL_OK && i < d.n * d.dim; i++)
    FUZZ_CHECK(isfinite(d.x[i]), "normalized pixel %g", (double)d.x[i]);
  fl_dataset_free(&d);
  return 0;
}
