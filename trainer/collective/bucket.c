/* bucket.c - the fusion-bucket planner of collective mode (see
 * coll_bucket.h): a pure function of the parameter list and the strategy,
 * so every rank builds the same buckets in the same order. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "coll_bucket.h"
#include "fl_log.h"

void fl_bucket_plan_free(fl_bucket_plan *p) {
  if (!p) return;
  free(p->start);
  free(p->order);
  free(p->floats);
  free(p->bucket_of);
  free(p->offset);
  memset(p, 0, sizeof(*p));
}

fl_status fl_bucket_plan_build(const size_t *n, const int *layer, const int *trainable, size_t np,
                               int fuse, size_t max_bytes, int max_layers, fl_bucket_plan *out) {
  memset(out, 0, sizeof(*out));
  if (fuse && (max_bytes == 0 || max_layers < 1))
    return FL_ERR(FL_EINVAL, "fusion buckets: fuse_grad_size_in_MB and fuse_grad_size_in_TFLOPS "
                             "must be >= 1");
  size_t cap = np ? np : 1;
  out->start = calloc(cap + 1, sizeof(size_t));
  out->order = calloc(cap, sizeof(size_t));
  out->floats = calloc(cap, sizeof(size_t));
  out->bucket_of = calloc(cap, sizeof(int));
  out->offset = calloc(cap, sizeof(size_t));
  if (!out->start || !out->order || !out->floats || !out->bucket_of || !out->offset) {
    fl_bucket_plan_free(out);
    return FL_ERR(FL_ENOMEM, "fusion buckets: out of memory for %zu parameters", np);
  }
  size_t no = 0, nb = 0, bytes = 0;
  int layers = 0, last_layer = 0;
  for (size_t k = np; k-- > 0;) {
    out->bucket_of[k] = -1;
    if (!trainable[k]) continue;
    size_t pb = n[k] * sizeof(float);
    int fresh = nb == 0 || !fuse;
    if (!fresh && bytes + pb > max_bytes) fresh = 1;
    if (!fresh && layer[k] != last_layer && layers >= max_layers) fresh = 1;
    if (fresh) {
      out->start[nb++] = no;
      bytes = 0;
      layers = 0;
    }
    if (layers == 0 || layer[k] != last_layer) layers++;
    last_layer = layer[k];
    out->bucket_of[k] = (int)(nb - 1);
    out->offset[k] = out->floats[nb - 1];
    out->floats[nb - 1] += n[k];
    out->order[no++] = k;
    bytes += pb;
  }
  out->start[nb] = no;
  out->nb = nb;
  return FL_OK;
}
