/* data_synth.c - seeded synthetic data: learnable images and CTR samples
 * with a known logistic signal, for tests and benchmarks that must not
 * depend on downloaded files.  Same config and split, same bits. */
#include <config.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "fl_data.h"
#include "fl_log.h"

fl_status fl_synth_images(const fl_synth_image_config *cfg, uint32_t split, fl_dataset *out) {
  fl_drng r;
  float *proto = NULL;

  memset(out, 0, sizeof *out);
  if (!cfg || cfg->n == 0 || cfg->channels < 1 || cfg->height < 1 || cfg->width < 1 ||
      cfg->num_classes < 1)
    return FL_ERR(FL_EINVAL, "synthetic images: n, geometry and num_classes must be > 0");
  size_t dim = (size_t)cfg->channels * (size_t)cfg->height * (size_t)cfg->width;
  proto = malloc((size_t)cfg->num_classes * dim * sizeof(float));
  out->x = malloc(cfg->n * dim * sizeof(float));
  out->y = malloc(cfg->n * sizeof(int32_t));
  if (!proto || !out->x || !out->y) {
    free(proto);
    fl_dataset_free(out);
    return FL_ERR(FL_ENOMEM, "synthetic images: cannot allocate %zu x %zu", cfg->n, dim);
  }
  out->n = cfg->n;
  out->dim = dim;
  out->channels = cfg->channels;
  out->height = cfg->height;
  out->width = cfg->width;
  out->sample_ndim = 3;
  out->sample_shape[0] = cfg->channels;
  out->sample_shape[1] = cfg->height;
  out->sample_shape[2] = cfg->width;
  out->num_classes = cfg->num_classes;

  fl_drng_seed(&r, cfg->seed, 0x70726f746fULL, 0);
  for (size_t i = 0; i < (size_t)cfg->num_classes * dim; i++) proto[i] = (float)fl_drng_uniform(&r);
  fl_drng_seed(&r, cfg->seed, 0x73616d706c65ULL, (uint64_t)split + 1);
  for (size_t i = 0; i < cfg->n; i++) {
    int32_t c = (int32_t)fl_drng_below(&r, (uint64_t)cfg->num_classes);
    const float *p = proto + (size_t)c * dim;
    float *x = out->x + i * dim;
    out->y[i] = c;
    for (size_t j = 0; j < dim; j++) x[j] = 0.5f * p[j] + 0.5f * (float)fl_drng_uniform(&r);
  }
  free(proto);
  return FL_OK;
}

uint64_t fl_synth_ctr_feature_id(const fl_synth_ctr_config *cfg, uint32_t slot, uint32_t index) {
  /* a bijective mix of a unique 64-bit word: distinct (slot, index) give
   * distinct ids; the seed moves the whole id space */
  return fl_drng_mix(((uint64_t)slot << 32 | index) ^ fl_drng_mix(cfg->seed));
}

fl_status fl_synth_ctr(const fl_synth_ctr_config *cfg, uint32_t split, fl_sparse_dataset *out) {
  fl_drng r;
  float *w = NULL;

  memset(out, 0, sizeof *out);
  if (!cfg || cfg->n == 0 || cfg->num_slots == 0 || cfg->vocab == 0 ||
      cfg->num_slots > FL_SPARSE_MAX_SLOTS || cfg->signal_slots > cfg->num_slots ||
      !(cfg->weight_scale >= 0.0f) || !isfinite(cfg->bias))
    return FL_ERR(FL_EINVAL, "synthetic CTR: need n, num_slots (<= %u), vocab > 0, "
                             "signal_slots <= num_slots, weight_scale >= 0",
                  FL_SPARSE_MAX_SLOTS);
  size_t nw = (size_t)cfg->signal_slots * cfg->vocab;
  size_t nf = cfg->n * cfg->num_slots;
  w = malloc((nw ? nw : 1) * sizeof(float));
  out->labels = malloc(cfg->n * sizeof(float));
  out->prob = malloc(cfg->n * sizeof(float));
  out->offsets = malloc((cfg->n + 1) * sizeof(size_t));
  out->feats = malloc(nf * sizeof(fl_sparse_feature));
  if (!w || !out->labels || !out->prob || !out->offsets || !out->feats) {
    free(w);
    fl_sparse_dataset_free(out);
    return FL_ERR(FL_ENOMEM, "synthetic CTR: cannot allocate %zu samples", cfg->n);
  }
  out->n = cfg->n;
  out->num_slots = cfg->num_slots;

  fl_drng_seed(&r, cfg->seed, 0x776569676874ULL, 0);
  for (size_t i = 0; i < nw; i++) w[i] = (float)(fl_drng_normal(&r) * cfg->weight_scale);
  fl_drng_seed(&r, cfg->seed, 0x636c69636bULL, (uint64_t)split + 1);
  out->offsets[0] = 0;
  for (size_t i = 0; i < cfg->n; i++) {
    double z = cfg->bias;
    fl_sparse_feature *f = out->feats + i * cfg->num_slots;
    for (uint32_t s = 0; s < cfg->num_slots; s++) {
      uint32_t j = (uint32_t)fl_drng_below(&r, cfg->vocab);
      f[s] = (fl_sparse_feature){.slot = s, .id = fl_synth_ctr_feature_id(cfg, s, j), .value = 1.0f};
      if (s < cfg->signal_slots) z += w[(size_t)s * cfg->vocab + j];
    }
    double p = 1.0 / (1.0 + exp(-z));
    out->prob[i] = (float)p;
    out->labels[i] = fl_drng_uniform(&r) < p ? 1.0f : 0.0f;
    out->offsets[i + 1] = (i + 1) * cfg->num_slots;
  }
  free(w);
  return FL_OK;
}
