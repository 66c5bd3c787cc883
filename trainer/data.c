/* data.c - sharding by rank, the per-epoch shuffle and the prefetching
 * batch loader (see fl_data.h for the sharding rules).
 *
 * The loader runs one producer thread per epoch that gathers this rank's
 * batches, in order, into a ring of `depth` preallocated slots; the
 * consumer (the training loop) holds one slot at a time, released by its
 * next call.  Restarting an epoch cancels and joins the producer first, so
 * a resumed run sees exactly the batches an uninterrupted one would.  With
 * depth 0 there is no thread: fl_loader_next gathers the batch itself.
 * A dense loader may augment what it gathers (data_augment.c). */
#include <config.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "fl_data.h"
#include "fl_log.h"

fl_status fl_shard_check(const fl_shard_spec *s) {
  if (!s) return FL_ERR(FL_EINVAL, "shard: NULL spec");
  if (s->world_size < 1 || s->rank < 0 || s->rank >= s->world_size)
    return FL_ERR(FL_EINVAL, "shard: rank %d outside world of %d", s->rank, s->world_size);
  if (s->batch_size == 0) return FL_ERR(FL_EINVAL, "shard: batch_size must be > 0");
  if (s->remainder != FL_REMAINDER_DROP && s->remainder != FL_REMAINDER_WRAP)
    return FL_ERR(FL_EINVAL, "shard: unknown remainder policy %d", (int)s->remainder);
  if (s->n == 0) return FL_ERR(FL_EINVAL, "shard: empty dataset");
  if (fl_shard_batches(s) == 0)
    return FL_ERR(FL_EINVAL,
                  "shard: %zu samples over %d ranks give rank %d no full batch of %zu "
                  "(use a smaller batch_size or the wrap remainder policy)",
                  s->n, s->world_size, s->rank, s->batch_size);
  return FL_OK;
}

size_t fl_shard_batches(const fl_shard_spec *s) {
  size_t w = (size_t)s->world_size;
  size_t n = s->offset < s->n ? s->n - s->offset : 0;
  if (s->batch_size == 0 || w == 0) return 0;
  if (s->remainder == FL_REMAINDER_WRAP) {
    size_t per = (n + w - 1) / w;
    return (per + s->batch_size - 1) / s->batch_size;
  }
  return n / w / s->batch_size;
}

fl_status fl_shard_permutation(const fl_shard_spec *s, int64_t epoch, size_t *perm) {
  fl_drng r;
  FL_TRY(fl_shard_check(s));
  for (size_t i = 0; i < s->n; i++) perm[i] = i;
  if (!s->shuffle) return FL_OK;
  fl_drng_seed(&r, s->seed, (uint64_t)epoch, 0x73687566ULL);
  for (size_t i = s->n - 1; i > 0; i--) {
    size_t j = (size_t)fl_drng_below(&r, (uint64_t)i + 1);
    size_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  return FL_OK;
}

/* Fill idx from an epoch permutation. */
static void shard_from_perm(const fl_shard_spec *s, const size_t *perm, size_t *idx) {
  size_t total = fl_shard_batches(s) * s->batch_size;
  size_t w = (size_t)s->world_size, r = (size_t)s->rank;
  for (size_t i = 0; i < total; i++) idx[i] = perm[(s->offset + r + w * i) % s->n];
}

fl_status fl_shard_indices(const fl_shard_spec *s, int64_t epoch, size_t *idx) {
  FL_TRY(fl_shard_check(s));
  size_t *perm = malloc(s->n * sizeof *perm);
  if (!perm) return FL_ERR(FL_ENOMEM, "shard: cannot allocate a permutation of %zu", s->n);
  fl_status st = fl_shard_permutation(s, epoch, perm);
  if (st == FL_OK) shard_from_perm(s, perm, idx);
  free(perm);
  return st;
}

/* ------------------------------------------------------------------ loader */

typedef struct slot {
  float *x;
  int32_t *y;
  float *t; /* float targets (batch * tdim), when the dataset has them */
  float *labels;
  size_t *offsets;
  fl_sparse_feature *feats;
  size_t feats_cap;
  size_t index;
  float *scratch; /* one sample, for the augmentation (dense only) */
  void *in[FL_DATA_MAX_INPUTS]; /* named inputs: batch * dim elements as fed */
} slot;

struct fl_loader {
  const fl_dataset *dense;
  const fl_sparse_dataset *sparse;
  fl_shard_spec spec;
  size_t batches;
  size_t *perm; /* n */
  size_t *idx;  /* batches * batch_size */
  slot *slots;
  size_t depth; /* prefetch depth; 0 = no thread (one slot) */
  size_t nslots;
  fl_augment aug; /* zero: none */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int running;    /* a producer thread exists (joinable) */
  int started;    /* an epoch was started */
  int cancel;     /* producer must stop */
  fl_status error;
  int64_t epoch;
  size_t next_produce; /* batch number the producer fills next */
  size_t next_consume; /* batch number handed out next */
  size_t filled;       /* slots holding batches not yet handed out */
  size_t head;         /* slot of batch next_consume */
  int holding;         /* the consumer holds the slot before head */
};

/* Gather batch b of the epoch into sl (producer side; no lock held). */
static fl_status gather(fl_loader *l, size_t b, slot *sl) {
  size_t bs = l->spec.batch_size;
  const size_t *ix = l->idx + b * bs;
  sl->index = b;
  if (l->dense) {
    const fl_dataset *d = l->dense;
    size_t dim = d->dim, yl = d->ylen ? d->ylen : 1;
    for (size_t i = 0; i < bs; i++) {
      for (size_t k = 0; k < d->n_inputs; k++) {
        const size_t es = d->inputs[k].elem == FL_DATA_I64 ? 8 : 4;
        fl_dataset_input_rows(d, k, ix[i], 1, (char *)sl->in[k] + i * d->inputs[k].dim * es);
      }
      if (d->x)
        memcpy(sl->x + i * dim, d->x + ix[i] * dim, dim * sizeof(float));
      else if (d->xq)
        fl_dataset_rows(d, ix[i], 1, sl->x + i * dim);
      if (d->y) memcpy(sl->y + i * yl, d->y + ix[i] * yl, yl * sizeof(int32_t));
      if (d->t) memcpy(sl->t + i * d->tdim, d->t + ix[i] * d->tdim, d->tdim * sizeof(float));
      if (sl->scratch) fl_augment_sample(&l->aug, l->epoch, ix[i], sl->x + i * dim, sl->scratch);
    }
    return FL_OK;
  }
  const fl_sparse_dataset *d = l->sparse;
  size_t need = 0;
  for (size_t i = 0; i < bs; i++) need += d->offsets[ix[i] + 1] - d->offsets[ix[i]];
  if (need > sl->feats_cap) {
    fl_sparse_feature *f = realloc(sl->feats, need * sizeof *f);
    if (!f) return FL_ERR(FL_ENOMEM, "loader: cannot allocate %zu sparse features", need);
    sl->feats = f;
    sl->feats_cap = need;
  }
  sl->offsets[0] = 0;
  for (size_t i = 0; i < bs; i++) {
    size_t a = d->offsets[ix[i]], e = d->offsets[ix[i] + 1];
    if (e > a) memcpy(sl->feats + sl->offsets[i], d->feats + a, (e - a) * sizeof *sl->feats);
    sl->offsets[i + 1] = sl->offsets[i] + (e - a);
    sl->labels[i] = d->labels[ix[i]];
  }
  return FL_OK;
}

static void *producer(void *arg) {
  fl_loader *l = arg;
  fl_status st = fl_shard_permutation(&l->spec, l->epoch, l->perm);
  if (st == FL_OK) shard_from_perm(&l->spec, l->perm, l->idx);
  pthread_mutex_lock(&l->mu);
  if (st != FL_OK) l->error = st;
  for (;;) {
    while (!l->cancel && l->error == FL_OK && l->next_produce < l->batches &&
           l->filled + (size_t)l->holding >= l->nslots)
      pthread_cond_wait(&l->cv, &l->mu);
    if (l->cancel || l->error != FL_OK || l->next_produce >= l->batches) break;
    size_t b = l->next_produce;
    slot *sl = &l->slots[(l->head + l->filled) % l->nslots];
    pthread_mutex_unlock(&l->mu);
    st = gather(l, b, sl);
    pthread_mutex_lock(&l->mu);
    if (st != FL_OK) {
      l->error = st;
      break;
    }
    l->next_produce++;
    l->filled++;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static void stop_producer(fl_loader *l) {
  pthread_mutex_lock(&l->mu);
  l->cancel = 1;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  if (l->running) pthread_join(l->thread, NULL);
  l->running = 0;
  l->cancel = 0;
}

void fl_loader_destroy(fl_loader *l) {
  if (!l) return;
  stop_producer(l);
  for (size_t i = 0; l->slots && i < l->nslots; i++) {
    free(l->slots[i].x);
    free(l->slots[i].y);
    free(l->slots[i].t);
    free(l->slots[i].labels);
    free(l->slots[i].offsets);
    free(l->slots[i].feats);
    free(l->slots[i].scratch);
    for (size_t k = 0; k < FL_DATA_MAX_INPUTS; k++) free(l->slots[i].in[k]);
  }
  free(l->slots);
  free(l->perm);
  free(l->idx);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

fl_status fl_loader_create(const fl_dataset *dense, const fl_sparse_dataset *sparse,
                           const fl_shard_spec *spec, size_t depth, fl_loader **out) {
  fl_loader *l;
  *out = NULL;
  if ((dense == NULL) == (sparse == NULL))
    return FL_ERR(FL_EINVAL, "loader: give exactly one of a dense or a sparse dataset");
  FL_TRY(fl_shard_check(spec));
  if (spec->n != (dense ? dense->n : sparse->n))
    return FL_ERR(FL_EINVAL, "loader: shard spec has %zu samples, dataset %zu", spec->n,
                  dense ? dense->n : sparse->n);
  l = calloc(1, sizeof *l);
  if (!l) return FL_ERR(FL_ENOMEM, "loader: out of memory");
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  l->dense = dense;
  l->sparse = sparse;
  l->spec = *spec;
  l->batches = fl_shard_batches(spec);
  l->depth = depth;
  l->nslots = depth ? depth : 1;
  size_t bs = spec->batch_size;
  l->perm = malloc(spec->n * sizeof *l->perm);
  l->idx = malloc(l->batches * bs * sizeof *l->idx);
  l->slots = calloc(l->nslots, sizeof *l->slots);
  if (!l->perm || !l->idx || !l->slots) goto nomem;
  for (size_t i = 0; i < l->nslots; i++) {
    slot *sl = &l->slots[i];
    if (dense) {
      sl->x = malloc(bs * dense->dim * sizeof(float));
      if (!sl->x) goto nomem;
      for (size_t k = 0; k < dense->n_inputs; k++) /* 8 bytes: float or int64 */
        if (!(sl->in[k] = malloc(bs * dense->inputs[k].dim * sizeof(int64_t)))) goto nomem;
      if (dense->y && !(sl->y = malloc(bs * (dense->ylen ? dense->ylen : 1) * sizeof(int32_t))))
        goto nomem;
      if (dense->t && !(sl->t = malloc(bs * dense->tdim * sizeof(float)))) goto nomem;
    } else {
      sl->labels = malloc(bs * sizeof(float));
      sl->offsets = malloc((bs + 1) * sizeof(size_t));
      if (!sl->labels || !sl->offsets) goto nomem;
    }
  }
  *out = l;
  return FL_OK;
nomem:
  fl_loader_destroy(l);
  return FL_ERR(FL_ENOMEM, "loader: cannot allocate %zu slots of %zu samples", l->nslots, bs);
}

size_t fl_loader_batches(const fl_loader *l) { return l->batches; }

fl_status fl_loader_set_offset(fl_loader *l, size_t offset) {
  if (offset >= l->spec.n)
    return FL_ERR(FL_EINVAL, "loader: epoch offset %zu past the %zu samples", offset, l->spec.n);
  stop_producer(l);
  l->started = 0;
  l->spec.offset = offset;
  l->batches = fl_shard_batches(&l->spec);
  return FL_OK;
}

fl_status fl_loader_set_augment(fl_loader *l, const fl_augment *a, const char *what) {
  if (!a->hflip && !a->crop_padding) return FL_OK;
  if (!l->dense) return FL_ERR(FL_EINVAL, "%s: data.augment applies to dense images only", what);
  FL_TRY(fl_augment_check(a, what));
  size_t dim = (size_t)a->channels * (size_t)a->height * (size_t)a->width;
  if (dim != l->dense->dim)
    return FL_ERR(FL_EINVAL, "%s: samples of %zu values are not %d x %d x %d images", what,
                  l->dense->dim, a->channels, a->height, a->width);
  stop_producer(l);
  for (size_t i = 0; i < l->nslots; i++)
    if (!l->slots[i].scratch && !(l->slots[i].scratch = malloc(dim * sizeof(float))))
      return FL_ERR(FL_ENOMEM, "loader: cannot allocate the augmentation's %zu floats", dim);
  l->aug = *a;
  l->started = 0;
  return FL_OK;
}

fl_status fl_loader_start(fl_loader *l, int64_t epoch, size_t first_batch) {
  stop_producer(l);
  l->started = 0;
  if (first_batch > l->batches)
    return FL_ERR(FL_EINVAL, "loader: first batch %zu past the epoch's %zu", first_batch,
                  l->batches);
  l->epoch = epoch;
  l->next_produce = first_batch;
  l->next_consume = first_batch;
  l->filled = 0;
  l->head = 0;
  l->holding = 0;
  l->error = FL_OK;
  l->started = 1;
  if (l->depth == 0) {
    fl_status st = fl_shard_permutation(&l->spec, epoch, l->perm);
    if (st != FL_OK) {
      l->started = 0;
      return st;
    }
    shard_from_perm(&l->spec, l->perm, l->idx);
    return FL_OK;
  }
  if (pthread_create(&l->thread, NULL, producer, l) != 0) {
    l->started = 0;
    return FL_ERR(FL_ENOMEM, "loader: cannot start the prefetch thread");
  }
  l->running = 1;
  return FL_OK;
}

static void fill_batch(const fl_loader *l, const slot *sl, fl_batch *out) {
  out->epoch = l->epoch;
  out->index = sl->index;
  out->size = l->spec.batch_size;
  if (l->dense) {
    out->x = l->dense->n_inputs ? NULL : sl->x;
    out->y = sl->y;
    out->t = sl->t;
    out->n_inputs = l->dense->n_inputs;
    for (size_t k = 0; k < out->n_inputs; k++) out->inputs[k] = sl->in[k];
    out->ylen = l->dense->ylen ? l->dense->ylen : 1;
  } else {
    out->sparse.labels = sl->labels;
    out->sparse.offsets = sl->offsets;
    out->sparse.feats = sl->feats;
  }
}

fl_status fl_loader_next(fl_loader *l, fl_batch *out) {
  fl_status st = FL_OK;
  memset(out, 0, sizeof *out);
  if (!l->started) return FL_ERR(FL_ESTATE, "loader: no epoch started");
  if (l->depth == 0) {
    if (l->next_consume >= l->batches)
      return FL_ERR(FL_ESTATE, "loader: epoch %lld has no batch after %zu", (long long)l->epoch,
                    l->batches);
    FL_TRY(gather(l, l->next_consume, &l->slots[0]));
    l->next_consume++;
    fill_batch(l, &l->slots[0], out);
    return FL_OK;
  }
  pthread_mutex_lock(&l->mu);
  if (l->holding) { /* release the slot handed out last time */
    l->holding = 0;
    pthread_cond_broadcast(&l->cv);
  }
  if (l->next_consume >= l->batches) {
    pthread_mutex_unlock(&l->mu);
    return FL_ERR(FL_ESTATE, "loader: epoch %lld has no batch after %zu", (long long)l->epoch,
                  l->batches);
  }
  while (l->filled == 0 && l->error == FL_OK) pthread_cond_wait(&l->cv, &l->mu);
  if (l->filled == 0) {
    st = l->error; /* logged by the producer */
  } else {
    slot *sl = &l->slots[l->head];
    l->head = (l->head + 1) % l->nslots;
    l->filled--;
    l->holding = 1;
    l->next_consume++;
    fill_batch(l, sl, out);
  }
  pthread_mutex_unlock(&l->mu);
  return st;
}
