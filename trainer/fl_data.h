/* fl_data.h - the trainer's data: readers, synthetic generators, sharding
 * by rank and a prefetching batch loader.
 *
 * Two kinds of data:
 *   dense   - images with an integer class label (IDX files of MNIST and
 *             Fashion-MNIST, or the synthetic generator), held in memory as
 *             fp32 pixels scaled to [0,1];
 *   sparse  - CTR-style samples: a float label and a list of
 *             (slot, u64 feature id, value) triples (libsvm / libffm /
 *             "label slot:feasign" text files, or the synthetic generator).
 *
 * Sharding (fl_shard_*): every epoch a permutation of all n samples is drawn
 * from (seed, epoch) - the same on every rank - and rank r takes the samples
 * at positions r, r+W, r+2W, ... of it (W = world size), cut into batches of
 * batch_size.  Every rank gets the same number of full batches:
 *   FL_REMAINDER_DROP: n/W samples per rank, rounded down to whole batches;
 *                      the (different each epoch) left-over samples are not
 *                      seen that epoch.  The ranks' samples are disjoint.
 *   FL_REMAINDER_WRAP: ceil(n/W) samples per rank rounded up to whole
 *                      batches; positions past n wrap around to the start of
 *                      the permutation, so every sample is seen at least once
 *                      per epoch and a few twice.
 * Batches always hold exactly batch_size samples.
 *
 * The loader (fl_loader_*) gathers one epoch's batches of one rank on a
 * prefetch thread into a bounded queue, in order, so the next micro-batch
 * is ready when the training step asks for it.  Errors are logged once where
 * they start (file name with byte offset or line number) and returned as
 * fl_status codes. */
#ifndef FL_DATA_H
#define FL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "fl_status.h"

/* ------------------------------------------------------------- dense images */

/* n samples of dim = channels*height*width floats each, row-major (NCHW),
 * and n labels in [0, num_classes).  x and y are owned by the dataset. */
typedef struct fl_dataset {
  size_t n;
  size_t dim;
  int channels, height, width;
  int num_classes;
  float *x;   /* n*dim */
  int32_t *y; /* n */
} fl_dataset;

/* Free x and y and zero *d.  NULL or an already-freed dataset is fine. */
void fl_dataset_free(fl_dataset *d);

/* Load an IDX image file (magic 0x00000803: unsigned bytes, dims n,rows,cols)
 * and its IDX label file (magic 0x00000801: unsigned bytes, dim n), gzip
 * compressed or plain (zlib detects which).  Pixels become p/255.  limit > 0
 * loads only the first `limit` samples (only that prefix of each file is
 * read and checked); 0 loads all and requires the files to end exactly after
 * the data.  Errors, each naming the file and the byte offset in its
 * decompressed contents:
 *   FL_ENOTFOUND  file does not exist;  FL_EIO  cannot be read;
 *   FL_EPROTO     wrong magic, zero dimension, truncated header or data,
 *                 bytes after the data, corrupt or truncated gzip stream;
 *   FL_EINVAL     image and label counts differ, a label >= num_classes.
 * On success the caller owns *out (fl_dataset_free); on error *out is
 * zeroed. */
fl_status fl_idx_load(const char *images_path, const char *labels_path, int num_classes,
                      size_t limit, fl_dataset *out);

/* The same from two in-memory file images (for tests and fuzzing); the
 * names appear in error messages.  The buffers are only read. */
fl_status fl_idx_load_mem(const void *images, size_t images_len, const char *images_name,
                          const void *labels, size_t labels_len, const char *labels_name,
                          int num_classes, size_t limit, fl_dataset *out);

/* Mean and standard deviation of all pixels of d (double accumulation in
 * sample order, so the result is the same on every rank). */
void fl_dataset_mean_std(const fl_dataset *d, double *mean, double *std);

/* x = (x - mean) / std for every pixel.  FL_EINVAL when std <= 0. */
fl_status fl_dataset_normalize(fl_dataset *d, double mean, double std);

/* Learnable synthetic images: each class has a random prototype image drawn
 * from `seed`; a sample is 0.5*prototype + 0.5*uniform noise (pixels in
 * [0,1]) with a uniformly drawn label.  `split` selects an independent
 * sample stream over the same prototypes (e.g. 0 train, 1 test).  The caller
 * owns *out (fl_dataset_free). */
typedef struct fl_synth_image_config {
  size_t n;
  int channels, height, width;
  int num_classes;
  uint64_t seed;
} fl_synth_image_config;
fl_status fl_synth_images(const fl_synth_image_config *cfg, uint32_t split, fl_dataset *out);

/* ------------------------------------------------------------ sparse (CTR) */

/* One feature of a sparse sample.  For libsvm files slot is 0 (or the field
 * of a libffm "field:idx:val" triple); for slot files value is 1. */
typedef struct fl_sparse_feature {
  uint32_t slot;
  uint64_t id;
  float value;
} fl_sparse_feature;

#define FL_SPARSE_MAX_SLOTS 65536u

/* n samples; sample i's features are feats[offsets[i] .. offsets[i+1]).
 * labels are as written in the file (CTR: 0/1; libsvm files may use -1/+1).
 * prob is the true click probability for synthetic data, NULL for files.
 * num_slots = 1 + the largest slot seen.  All arrays owned by the dataset. */
typedef struct fl_sparse_dataset {
  size_t n;
  float *labels;            /* n */
  size_t *offsets;          /* n + 1 */
  fl_sparse_feature *feats; /* offsets[n] */
  float *prob;              /* n or NULL */
  uint32_t num_slots;
} fl_sparse_dataset;

void fl_sparse_dataset_free(fl_sparse_dataset *d);

typedef enum fl_sparse_format {
  /* "label idx:val idx:val ..." (slot 0), or libffm "label field:idx:val"
   * (slot = field); idx and field are decimal integers, val a float. */
  FL_SPARSE_LIBSVM = 0,
  /* "label slot:feasign slot:feasign ..." (value 1), Paddle CTR style. */
  FL_SPARSE_SLOT = 1
} fl_sparse_format;

/* Parse a sparse text file (gzip or plain).  Blank lines and lines starting
 * with '#' are skipped.  Errors name the file, line and column:
 *   FL_ENOTFOUND / FL_EIO  open or read failure;
 *   FL_EPROTO  a bad label, a token that is not idx:val / slot:feasign, a
 *              number out of range (slot >= FL_SPARSE_MAX_SLOTS, non-finite
 *              value), a line longer than 1 MiB;
 *   FL_EINVAL  a file with no samples.
 * The caller owns *out (fl_sparse_dataset_free); zeroed on error. */
fl_status fl_sparse_load(const char *path, fl_sparse_format fmt, fl_sparse_dataset *out);
/* The same over an in-memory text (name used in messages). */
fl_status fl_sparse_load_mem(const char *text, size_t len, const char *name, fl_sparse_format fmt,
                             fl_sparse_dataset *out);

/* Synthetic CTR data with a known logistic signal.  Every sample has one
 * feature in each of num_slots slots, drawn uniformly from vocab ids of that
 * slot; the ids are distinct 64-bit hashes of (slot, index).  The first
 * signal_slots slots carry weights w(slot, index) ~ N(0, weight_scale^2)
 * drawn from seed; the others carry none.  The click probability is
 * sigmoid(bias + sum of the sample's weights) (stored in prob) and the
 * label a Bernoulli draw from it.  split selects an independent sample
 * stream over the same weights. */
typedef struct fl_synth_ctr_config {
  size_t n;
  uint32_t num_slots;
  uint32_t signal_slots;
  uint32_t vocab;
  float weight_scale;
  float bias;
  uint64_t seed;
} fl_synth_ctr_config;
fl_status fl_synth_ctr(const fl_synth_ctr_config *cfg, uint32_t split, fl_sparse_dataset *out);
/* The feature id of index `index` of slot `slot` in synthetic CTR data. */
uint64_t fl_synth_ctr_feature_id(const fl_synth_ctr_config *cfg, uint32_t slot, uint32_t index);

/* ------------------------------------------------------------------ sharding */

typedef enum fl_remainder {
  FL_REMAINDER_DROP = 0,
  FL_REMAINDER_WRAP = 1
} fl_remainder;

typedef struct fl_shard_spec {
  size_t n;          /* samples in the dataset */
  size_t batch_size; /* samples per batch (> 0) */
  int rank;          /* 0 <= rank < world_size */
  int world_size;
  uint64_t seed;     /* shuffle seed (same on every rank) */
  int shuffle;       /* 0: identity order every epoch */
  fl_remainder remainder;
} fl_shard_spec;

/* FL_EINVAL (logged) when a field is out of range or a rank would get no
 * batch at all. */
fl_status fl_shard_check(const fl_shard_spec *s);
/* Batches per epoch of every rank (the same for all ranks). */
size_t fl_shard_batches(const fl_shard_spec *s);
/* The sample indices of this rank for `epoch`, batch after batch:
 * idx must hold fl_shard_batches(s) * batch_size entries. */
fl_status fl_shard_indices(const fl_shard_spec *s, int64_t epoch, size_t *idx);
/* The epoch's permutation of all n samples (the same on every rank). */
fl_status fl_shard_permutation(const fl_shard_spec *s, int64_t epoch, size_t *perm);

/* -------------------------------------------------------------------- loader */

/* A sparse batch: per sample, its features feats[offsets[i]..offsets[i+1]). */
typedef struct fl_sparse_batch {
  const float *labels;
  const size_t *offsets; /* size + 1 */
  const fl_sparse_feature *feats;
} fl_sparse_batch;

/* One batch handed out by the loader; valid until the next fl_loader_next,
 * fl_loader_start or fl_loader_destroy on the same loader. */
typedef struct fl_batch {
  int64_t epoch;
  size_t index;      /* batch number within the epoch */
  size_t size;       /* samples (== batch_size) */
  const float *x;    /* dense: size*dim floats; NULL for sparse */
  const int32_t *y;  /* dense: size labels; NULL for sparse */
  fl_sparse_batch sparse; /* sparse: the samples; zeroed for dense */
} fl_batch;

typedef struct fl_loader fl_loader;

/* A loader over exactly one of dense / sparse (the other NULL), which must
 * outlive the loader.  depth: batches the prefetch thread may run ahead;
 * 0 = no thread, each batch is gathered inside fl_loader_next.  The caller
 * owns *out (fl_loader_destroy). */
fl_status fl_loader_create(const fl_dataset *dense, const fl_sparse_dataset *sparse,
                           const fl_shard_spec *spec, size_t depth, fl_loader **out);
/* Batches per epoch (fl_shard_batches of the spec). */
size_t fl_loader_batches(const fl_loader *l);
/* Begin (or restart) an epoch at batch first_batch (0, or where a resumed
 * run left off): stops any prefetch in progress and starts gathering. */
fl_status fl_loader_start(fl_loader *l, int64_t epoch, size_t first_batch);
/* The next batch of the epoch, in order.  FL_ESTATE when the epoch has no
 * more batches or no epoch was started; FL_ENOMEM if the prefetch thread
 * failed.  *out points into the loader (see fl_batch).  Not thread-safe:
 * one consumer thread per loader. */
fl_status fl_loader_next(fl_loader *l, fl_batch *out);
void fl_loader_destroy(fl_loader *l);

#endif
