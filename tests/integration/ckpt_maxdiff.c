/* ckpt_maxdiff.c - the parity check of the shell tests: the largest
 * |a - b| over every fp32 param/ record of the latest checkpoints in two
 * directories, printed as "max_abs_diff: X over N params at step S".
 * Exit 0 when both checkpoints are at the same step, hold the same params
 * and differ by at most the bound (argument 3, default 1e-5, the bar of
 * tests/integration/test_coll_train.c); 1 otherwise; 2 for bad usage.
 *   ckpt_maxdiff DIR_A DIR_B [BOUND] */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl_ckpt.h"
#include "fl_log.h"

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: ckpt_maxdiff DIR_A DIR_B [BOUND]\n");
    return 2;
  }
  double bound = argc == 4 ? strtod(argv[3], NULL) : 1e-5;
  fl_ckpt *a = NULL, *b = NULL;
  int64_t sa = -1, sb = -1;
  if (fl_ckpt_dir_load_latest(argv[1], &a, &sa) != FL_OK ||
      fl_ckpt_dir_load_latest(argv[2], &b, &sb) != FL_OK) {
    fl_ckpt_free(a);
    return 1; /* logged by the loader */
  }
  int rc = 0, params = 0;
  double worst = 0;
  if (sa != sb) {
    fprintf(stderr, "ckpt_maxdiff: steps differ: %lld in %s, %lld in %s\n", (long long)sa,
            argv[1], (long long)sb, argv[2]);
    rc = 1;
  }
  for (size_t i = 0; i < fl_ckpt_count(a) && !rc; i++) {
    fl_ckpt_record ra, rb;
    if (fl_ckpt_record_at(a, i, &ra) != FL_OK) rc = 1;
    if (rc || strncmp(ra.name, "param/", 6) != 0) continue;
    if (fl_ckpt_find(b, ra.name, &rb) != FL_OK || ra.nbytes != rb.nbytes) {
      fprintf(stderr, "ckpt_maxdiff: %s missing or of another size in %s\n", ra.name, argv[2]);
      rc = 1;
      break;
    }
    const float *x = ra.data, *y = rb.data;
    for (size_t j = 0; j < ra.nbytes / sizeof(float); j++) {
      double d = fabs((double)x[j] - (double)y[j]);
      if (isnan(d) || d > worst) worst = isnan(d) ? INFINITY : d;
    }
    params++;
  }
  if (!rc) {
    printf("max_abs_diff: %g over %d params at step %lld\n", worst, params, (long long)sa);
    if (params == 0 || !(worst <= bound)) rc = 1;
  }
  fl_ckpt_free(a);
  fl_ckpt_free(b);
  return rc;
}
