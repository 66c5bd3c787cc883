/* fl_data.h - the trainer's data: readers, synthetic generators, sharding
 * by rank and a prefetching batch loader.
 *
 * Two kinds of data:
 *   dense   - images with an integer class label (IDX files of MNIST and
 *             Fashion-MNIST, or the synthetic generator), held in memory as
 *             fp32 pixels scaled to [0,1]; or .npy files as a Python user
 *             writes them with numpy.save (features of any shape, float32 or
 *             uint8, class ids or float targets), memory-mapped; or one
 *             .npy file per named model input (data.inputs: float32,
 *             float16, uint8, int64, int32, bool), converted per sample
 *             to the float or int64 the input takes, with class ids [N]
 *             or [N, L];
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
 * Batches always hold exactly batch_size samples.  An elastic resume in
 * mid-epoch (another world size) sets offset: the first offset positions
 * were taken by the earlier world, and rank r takes offset + r + W*i.
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

#define FL_DATA_MAX_DIMS 8

struct fl_npy;

/* Element types of .npy files (see the npy section below). */
typedef enum fl_npy_dtype {
  FL_NPY_F32 = 0,
  FL_NPY_U8 = 1,
  FL_NPY_I64 = 2,
  FL_NPY_I32 = 3,
  FL_NPY_F16 = 4,
  FL_NPY_BOOL = 5
} fl_npy_dtype;

/* n samples of dim = channels*height*width values each, row-major (NCHW),
 * and per sample either a class label in [0, num_classes) (y) or tdim float
 * targets (t, for the BCE and MSE losses).  Everything is owned by the
 * dataset.  Features are fp32 in x, or (npy uint8 files) bytes in xq with
 * value xq*xscale, x then NULL: read them with fl_dataset_rows.  npy data
 * lies in private mappings of the files (held in maps[]): x and t may point
 * there, so never free them directly. */
/* Named inputs (data.inputs): one .npy file per model input. */
#define FL_DATA_MAX_INPUTS 8
#define FL_DATA_NAME_MAX 128

/* The element type a model input takes, numbered as fl_model.h's
 * FL_MODEL_F32 / FL_MODEL_I64. */
typedef enum fl_data_elem {
  FL_DATA_F32 = 1,
  FL_DATA_I64 = 7
} fl_data_elem;

/* One named input: n samples of dim elements in file (owned, mapped),
 * stored as dtype, fed as elem (fl_dataset_bind_input decides). */
typedef struct fl_data_input {
  char name[FL_DATA_NAME_MAX];
  struct fl_npy *file;
  fl_npy_dtype dtype;
  size_t dim;
  fl_data_elem elem;
  float scale; /* uint8 fed as float: value = byte * scale */
} fl_data_input;

typedef struct fl_dataset {
  size_t n;
  size_t dim;
  int channels, height, width;
  int num_classes;
  float *x;   /* n*dim, or NULL when the features are xq */
  int32_t *y; /* n class labels, or NULL when the labels are float targets t */
  const uint8_t *xq; /* n*dim uint8 features (npy), or NULL */
  float xscale;      /* feature value = xq * xscale */
  float *t;          /* n*tdim float targets (npy float32 labels), or NULL */
  size_t tdim;
  int sample_ndim;   /* per-sample feature shape as stored (npy: the file's */
  int64_t sample_shape[FL_DATA_MAX_DIMS]; /* shape minus dim 0; else C,H,W) */
  struct fl_npy *maps[2]; /* files whose mappings x/xq/t point into */
  /* Named inputs (fl_npy_load_inputs; x and xq are then NULL, dim and
   * sample_shape those of the first input), and the class ids per sample
   * (y holds n * ylen; ylen 0 means 1). */
  size_t n_inputs;
  fl_data_input inputs[FL_DATA_MAX_INPUTS];
  size_t ylen;
} fl_dataset;

/* Free what d holds (arrays and mappings) and zero *d.  NULL or an
 * already-freed dataset is fine. */
void fl_dataset_free(fl_dataset *d);

/* Features of samples first .. first+count-1 as fp32: d->x + first*dim when
 * the dataset holds fp32, else converted from xq into scratch (caller's
 * buffer of count*dim floats) and scratch returned. */
const float *fl_dataset_rows(const fl_dataset *d, size_t first, size_t count, float *scratch);

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

/* -------------------------------------------------------------------- npy */

/* .npy files as numpy.save writes them (format versions 1.0, 2.0, 3.0):
 * the magic "\x93NUMPY", a version, a little-endian header length, and a
 * header that is a Python dict literal with exactly the keys 'descr',
 * 'fortran_order' and 'shape', then the C-order payload.  Accepted descr:
 * '<f4' (also '=f4' on this little-endian host), '|u1' ('<u1'), '<i8',
 * '<i4', '<f2' (float16) and '|b1' (bool, one byte 0/1); fortran_order
 * must be False.  The payload must be exactly
 * prod(shape) elements (bytes after it are refused too). */
/* (fl_npy_dtype: the element types of .npy files, defined above) */

typedef struct fl_npy fl_npy;

/* Map the file at path (private, read-only to the file).  Errors name the
 * file and what is wrong: FL_ENOTFOUND no such file; FL_EIO cannot read or
 * map it; FL_EPROTO bad magic, unknown version, header length past the end,
 * malformed header dict, unsupported dtype, fortran order, a shape with more
 * than FL_DATA_MAX_DIMS dims or whose byte size overflows, a payload shorter
 * or longer than the shape says.  The caller owns *out (fl_npy_close). */
fl_status fl_npy_open(const char *path, fl_npy **out);
/* The same over an in-memory file image (tests, fuzzing); buf is copied,
 * name is used in messages. */
fl_status fl_npy_open_mem(const void *buf, size_t len, const char *name, fl_npy **out);
void fl_npy_close(fl_npy *f);
fl_npy_dtype fl_npy_dtype_of(const fl_npy *f);
int fl_npy_ndim(const fl_npy *f);
const int64_t *fl_npy_shape(const fl_npy *f); /* ndim entries */
size_t fl_npy_count(const fl_npy *f);          /* elements: prod(shape) */
/* The payload, aligned for its dtype, valid until fl_npy_close.  Writable
 * (a private copy-on-write mapping: writes never reach the file). */
void *fl_npy_data(fl_npy *f);
const char *fl_npy_name(const fl_npy *f);
/* "f4", "u1", "i8", "i4", "f2", "b1". */
const char *fl_npy_dtype_name(fl_npy_dtype dt);

/* Write data (prod(shape) elements of dt, C order) as a version 1.0 .npy
 * file at path.  FL_EIO (logged, naming the file) when writing fails. */
fl_status fl_npy_save(const char *path, fl_npy_dtype dt, int ndim, const int64_t *shape,
                      const void *data);

/* Labels of the first n samples of the open file yf into out (what
 * fl_npy_load does with its labels): float32 become float targets t (out
 * then owns yf, in maps[1]); int64 / int32 class ids are copied to y,
 * below num_classes when it is > 0.  per_token: class ids may also have
 * shape (n, L) (out->ylen = L) and entries equal to ignore_index are kept.
 * FL_EINVAL (logged, naming the file) otherwise. */
fl_status fl_npy_labels(fl_npy *yf, size_t n, int num_classes, int per_token,
                        int64_t ignore_index, fl_dataset *out);

/* Named inputs: data.inputs (train) or data.test_inputs, and the labels. */
typedef struct fl_npy_inputs {
  size_t n;                               /* 1..FL_DATA_MAX_INPUTS */
  const char *names[FL_DATA_MAX_INPUTS];  /* the model inputs they feed */
  const char *paths[FL_DATA_MAX_INPUTS];  /* their .npy files */
  const char *y_path;                     /* labels (per_token rules of fl_npy_labels) */
  int num_classes;                        /* > 0: class ids checked below it */
  int64_t ignore_index;                   /* model.ignore_index (-100) */
  float scale;                            /* data.scale: uint8 fed to a float input */
  size_t limit;                           /* > 0: the first `limit` samples only */
} fl_npy_inputs;

/* Open every input file and the labels: every file must hold the same
 * number of samples (dim 0; FL_EINVAL naming two files and their counts).
 * Inputs may be float32, float16, uint8, int64, int32 or bool; each is fed
 * as float until fl_dataset_bind_input says otherwise.  The caller owns
 * *out (fl_dataset_free); zeroed on error. */
fl_status fl_npy_load_inputs(const fl_npy_inputs *spec, fl_dataset *out);

/* Input k of d fed to a model input of element type elem; cast_to_int:
 * the model casts that (float) input to an integer type right away.
 * Conversions: float32 and float16 to float; uint8 to float (times
 * scale) or to int64; int64, int32 and bool to int64.  FL_EINVAL (logged,
 * naming the input and its file): float data for an int64 input, integer
 * or bool data for a float input, uint8 data for a float input that the
 * graph casts to an integer (the ids would arrive divided by 255). */
fl_status fl_dataset_bind_input(fl_dataset *d, size_t k, fl_data_elem elem, int cast_to_int);

/* Samples first .. first+count-1 of input k as fed: count * dim floats
 * or int64s (its elem) into dst. */
void fl_dataset_input_rows(const fl_dataset *d, size_t k, size_t first, size_t count, void *dst);

/* Default data.scale of uint8 features: 1/255, as torchvision's ToTensor. */
#define FL_NPY_DEFAULT_SCALE (1.0f / 255.0f)

/* Load features (x_path: n samples of any shape, float32 or uint8) and
 * labels (y_path: shape (n) or (n,1) of int64/int32 class ids, or float32
 * of shape (n, ...) as float targets) into *out.  Features stay in the
 * mapping: float32 as x, uint8 as xq with xscale = scale (scale must be
 * FL_NPY_DEFAULT_SCALE for float32 features, the caller passes data.scale).
 * Class ids must lie in [0, num_classes) (num_classes > 0), and are copied
 * to an int32 array.  limit > 0 uses only the first `limit` samples.
 * Errors (logged, naming the file): those of fl_npy_open; FL_EINVAL a
 * features dtype that is not f4/u1, a labels dtype that is not i8/i4/f4,
 * feature and label counts that differ, a label out of range, a labels
 * shape that is not (n) or (n,1) for class ids, a zero-sample file, scale
 * set with float32 features.  The caller owns *out (fl_dataset_free); *out
 * is zeroed on error. */
fl_status fl_npy_load(const char *x_path, const char *y_path, int num_classes, float scale,
                      size_t limit, fl_dataset *out);

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
  size_t offset;     /* positions of the epoch's permutation already
                      * consumed (an elastic resume in mid-epoch: a world
                      * of W' ranks takes positions offset + r + W'i); 0 */
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
  const int32_t *y;  /* dense: size labels; NULL for sparse and float targets */
  const float *t;    /* dense float targets: size*tdim floats, else NULL */
  fl_sparse_batch sparse; /* sparse: the samples; zeroed for dense */
  /* named inputs (x NULL): input k's size*dim elements as fed (float or
   * int64, the dataset's inputs[k].elem); y holds size*ylen class ids */
  size_t n_inputs;
  const void *inputs[FL_DATA_MAX_INPUTS];
  size_t ylen;
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
/* Set the spec's offset for the epochs started from now on (0 for whole
 * epochs); the batch count follows (it may become 0).  FL_EINVAL when
 * offset is not below the dataset's size. */
fl_status fl_loader_set_offset(fl_loader *l, size_t offset);

/* Training-time augmentation of image samples (channels x height x width
 * floats, channel after channel), torchvision's RandomCrop(padding) and
 * RandomHorizontalFlip: the image is shifted by (dy, dx), each uniform in
 * [-crop_padding, crop_padding], pixels from outside it set to fill (the
 * value a raw 0 pixel has after the dataset's scaling), then mirrored left
 * to right with probability 1/2 when hflip.  Draws depend only on (seed,
 * epoch, sample index). */
typedef struct fl_augment {
  int hflip;
  int crop_padding;
  int channels, height, width;
  float fill;
  uint64_t seed;
} fl_augment;
/* FL_EINVAL, naming `what` (the data file), when an augmentation is asked
 * of samples that are not images or padding >= the image's height/width. */
fl_status fl_augment_check(const fl_augment *a, const char *what);
/* Augment sample `sample` of `epoch` in place; scratch holds as many
 * floats as x. */
void fl_augment_sample(const fl_augment *a, int64_t epoch, size_t sample, float *x,
                       float *scratch);
/* Augment every training batch the dense loader l gathers from now on
 * (checked with fl_augment_check; call before fl_loader_start).  The
 * caller keeps a; the loader copies it. */
fl_status fl_loader_set_augment(fl_loader *l, const fl_augment *a, const char *what);
/* Begin (or restart) an epoch at batch first_batch (0, or where a resumed
 * run left off): stops any prefetch in progress and starts gathering. */
fl_status fl_loader_start(fl_loader *l, int64_t epoch, size_t first_batch);
/* The next batch of the epoch, in order.  FL_ESTATE when the epoch has no
 * more batches or no epoch was started; FL_ENOMEM if the prefetch thread
 * failed.  *out points into the loader (see fl_batch).  Not thread-safe:
 * one consumer thread per loader. */
fl_status fl_loader_next(fl_loader *l, fl_batch *out);
void fl_loader_destroy(fl_loader *l);

/* ------------------------------------------------------------ Criteo TSV */

/* Criteo's display-advertising TSV (the Kaggle challenge and Criteo 1TB
 * files): one sample per line,
 *     label \t I1 .. I13 \t C1 .. C26
 * 40 tab-separated fields; label 0 or 1; I* decimal integers, possibly
 * empty or negative; C* categorical values written as 1..8 hex digits
 * (Criteo writes 8), possibly empty.  Lines end in LF or CRLF; files may be
 * gzip compressed (zlib reads both).  Each sample becomes
 *   dense  [13] float: log(1 + x) of each integer, 0 for an empty or
 *          negative one (DLRM's transform);
 *   sparse [26] int64: fl_criteo_hash(column, value, present) of each
 *          categorical, reduced modulo hash_buckets when that is > 0;
 *   label       float 0/1 (and int32 class id 0/1).
 * A bad line (not 40 fields, a label that is not 0/1, an integer that is
 * not one, a categorical that is not 1..8 hex digits) is named with its
 * file and line number and stops the read (FL_EPROTO) or, with
 * FL_CRITEO_SKIP, is logged (the first few), counted and skipped.
 *
 * The reader streams: it holds one line, the shuffle buffer and one batch,
 * never a file.  Files are read in the order given, line after line; the
 * lines of all files are numbered 0, 1, 2, ... across files (bad lines and
 * blank lines too) and rank r of W takes the lines whose number % W == r
 * (every rank reads every byte and parses its own lines: gzip streams
 * cannot be split into byte ranges).  Over the ranks every line is taken
 * exactly once per epoch.
 *
 * Shuffle (shuffle_buffer = N > 0): a reservoir of N samples, filled with
 * the rank's first N; then for each further sample a slot j uniform in
 * [0, N) is handed out and refilled with it; at the end of the files the
 * remaining slots are handed out in uniform random order.  The draws come
 * from (seed, epoch, rank) only, so an epoch is the same sequence on every
 * run.  N = 0: file order.
 *
 * Batches hold batch_size samples; the last one of an epoch holds what is
 * left (size < batch_size; the caller may drop it), so a file shorter than
 * one batch gives one short batch.  A rank that gets no sample at all in
 * an epoch is refused (FL_EINVAL).
 *
 * Resume: fl_criteo_tell gives the position after the last sample handed
 * out; fl_criteo_seek continues exactly there.  Without a shuffle buffer
 * it reopens the file and seeks to the byte offset (immediate for plain
 * files; gzip files are decompressed up to it).  With one, the buffer's
 * contents are not saved: the epoch is replayed from its start (the same
 * draws) and the `emitted` samples before the position are read and
 * dropped, then the reading head must be where it was saved (else the files
 * changed: FL_EINVAL).  That costs a read of the epoch up to the position,
 * in exchange for a position of a few words. */

#define FL_CRITEO_DENSE 13
#define FL_CRITEO_SPARSE 26

typedef enum fl_criteo_bad_lines {
  FL_CRITEO_STOP = 0, /* data.criteo.bad_lines: stop */
  FL_CRITEO_SKIP = 1  /* data.criteo.bad_lines: skip */
} fl_criteo_bad_lines;

typedef struct fl_criteo_options {
  const char *const *paths; /* n_paths files, read in this order (copied) */
  size_t n_paths;
  size_t batch_size;        /* > 0 */
  int rank, world_size;     /* 0 <= rank < world_size */
  uint64_t seed;            /* the shuffle's seed (train.seed) */
  size_t shuffle_buffer;    /* data.criteo.shuffle_buffer: N samples, 0 = file order */
  fl_criteo_bad_lines bad_lines;
  uint64_t hash_buckets;    /* > 0: ids modulo this; 0: the 63-bit hash */
} fl_criteo_options;

/* Where a rank is in an epoch: a few words the loop can checkpoint. */
typedef struct fl_criteo_pos {
  int64_t epoch;
  uint64_t emitted;   /* samples handed out this epoch */
  uint32_t file;      /* the reading head: file index, */
  uint64_t offset;    /* byte offset of its next line (decompressed), */
  uint64_t file_line; /* lines of that file read, */
  uint64_t line;      /* lines of all files read this epoch (the sharding number) */
  uint64_t skipped;   /* bad lines skipped this epoch by this rank */
} fl_criteo_pos;

/* One batch; the arrays belong to the reader and stay valid until its next
 * call. */
typedef struct fl_criteo_batch {
  size_t size;          /* 0: the epoch is over */
  const float *dense;   /* size * 13 */
  const int64_t *sparse; /* size * 26 */
  const float *labels;  /* size */
  const int32_t *y;     /* size class ids 0/1 */
} fl_criteo_batch;

typedef struct fl_criteo_reader fl_criteo_reader;

/* The id of a categorical value: the splitmix64 finalizer of the key
 * (column << 33) | (present << 32) | value, cleared of its top bit:
 *   k = key + 0x9e3779b97f4a7c15; k = (k ^ k>>30) * 0xbf58476d1ce4e5b9;
 *   k = (k ^ k>>27) * 0x94d049bb133111eb; id = (k ^ k>>31) & (2^63 - 1).
 * column is 0..25 (C1 is 0), value the hex digits' number, present 0 for an
 * empty field (value then 0): every column has its own 'missing' id, and
 * distinct (column, value) keys differ in the 64-bit mix. */
uint64_t fl_criteo_hash(uint32_t column, uint32_t value, int present);
/* DLRM's transform of an integer feature: log(1 + x) for x > 0, else 0. */
float fl_criteo_log1p(int64_t x);

/* Check the options and that every file exists.  FL_EINVAL (logged) for a
 * bad option, FL_ENOTFOUND / FL_EIO naming the file.  The caller owns *out
 * (fl_criteo_close). */
fl_status fl_criteo_open(const fl_criteo_options *o, fl_criteo_reader **out);
void fl_criteo_close(fl_criteo_reader *r);
/* Begin epoch `epoch` at its first sample. */
fl_status fl_criteo_start(fl_criteo_reader *r, int64_t epoch);
/* Continue at a position fl_criteo_tell gave (same files and options). */
fl_status fl_criteo_seek(fl_criteo_reader *r, const fl_criteo_pos *pos);
void fl_criteo_tell(const fl_criteo_reader *r, fl_criteo_pos *pos);
/* Begin a range of the epoch: the lines after from (a position
 * fl_criteo_tell gave in file order, its epoch the range's) up to line
 * end_line (counted as pos.line), then the epoch ends; a shuffle buffer
 * draws within the range only, from (seed, epoch, salt).  Elastic chunks
 * of a stream (data_stream.c).  FL_EINVAL for an empty range. */
fl_status fl_criteo_range(fl_criteo_reader *r, const fl_criteo_pos *from, uint64_t end_line,
                          uint64_t salt);
/* The next batch of the epoch (size 0 once it is over).  Errors: FL_EPROTO
 * for a bad line under FL_CRITEO_STOP (file:line named), FL_EIO / FL_EPROTO
 * for an unreadable or corrupt file, FL_EINVAL when this rank got no
 * sample in the epoch, FL_ESTATE when no epoch was started. */
fl_status fl_criteo_next(fl_criteo_reader *r, fl_criteo_batch *out);
/* The samples left in the epoch (file order: a reader without a shuffle
 * buffer), each line checked as fl_criteo_next does (the same errors and
 * skipped lines) but no value read: a counting pass. */
fl_status fl_criteo_count(fl_criteo_reader *r, size_t *n);
/* The batch as named, typed inputs (n_inputs 2: inputs[0] the "dense"
 * floats [size, 13], inputs[1] the "sparse" int64 ids [size, 26]), float
 * targets t (the labels, tdim 1) and class ids y; for a model whose graph
 * inputs are named fl_criteo_input_names. */
void fl_criteo_as_batch(const fl_criteo_batch *b, int64_t epoch, size_t index, fl_batch *out);
extern const char *const fl_criteo_input_names[2];
/* Append the batch to a sparse dataset in the CTR preset's form: slot c
 * (0..25) holds categorical c's id with value 1, slot 26 + i holds dense
 * feature i (id i, value the transformed number), label 0/1.  d starts
 * zeroed; the caller owns it (fl_sparse_dataset_free). */
fl_status fl_criteo_append_sparse(const fl_criteo_batch *b, fl_sparse_dataset *d);

/* ------------------------------------------------- Criteo batch stream */

/* data.format criteo feeding a model's named inputs: the training loop's
 * batch source beside fl_loader (data_stream.c).  The files are given as
 * names or glob patterns, expanded in order (a glob's matches sorted);
 * the reader above reads the rank's share.  Batches carry two named inputs,
 * dense_name (float [size, 13]) and sparse_name (int64 [size, 26]), and
 * the labels as float targets (tdim 1) or class ids 0/1.  An epoch ends at
 * the end of the rank's share; count: one pass in file order at open gives
 * the rank's samples per epoch (the loop's steps; a bad line under
 * bad_lines stop is reported there, before training). */
typedef struct fl_stream_spec {
  const char *const *patterns; /* n_patterns files or globs */
  size_t n_patterns;
  const char *dense_name, *sparse_name;
  size_t batch_size;
  int rank, world_size;
  uint64_t seed;
  size_t shuffle_buffer;
  fl_criteo_bad_lines bad_lines;
  uint64_t hash_buckets;
  int count;
  int marks;         /* with count: the position after each full batch kept (fl_stream_range) */
  int float_targets; /* batches carry the labels as float targets, else as class ids */
} fl_stream_spec;

typedef struct fl_stream fl_stream;
struct fl_model;

/* Expand the files, count (o->count) and open the reader; errors as
 * fl_criteo_open / fl_criteo_next.  The caller owns *out
 * (fl_stream_close). */
fl_status fl_stream_open(const fl_stream_spec *o, fl_stream **out);
void fl_stream_close(fl_stream *s);
/* The rank's samples per epoch (0 unless counted). */
size_t fl_stream_samples(const fl_stream *s);
/* The two inputs as a dataset without samples (names, dims, elements,
 * ylen and tdim 1), for building feeds; owned by s. */
const fl_dataset *fl_stream_inputs(const fl_stream *s);
/* The model m (file `model`, for messages) takes exactly the two inputs,
 * with their element types and widths; FL_EINVAL (logged) otherwise. */
fl_status fl_stream_bind(const fl_stream *s, const struct fl_model *m, const char *model);
/* Begin epoch `epoch` at batch first_batch: at saved (a position
 * fl_stream_tell gave after first_batch batches of batch_size in that
 * epoch) when it is one, else by reading the first batches again. */
fl_status fl_stream_start(fl_stream *s, int64_t epoch, size_t first_batch, size_t batch_size,
                          const fl_criteo_pos *saved);
/* Begin batches [first_batch, end_batch) of epoch `epoch` (of batch_size,
 * as counted: spec.marks), the epoch ending after them: an elastic chunk,
 * sought directly (a shuffle buffer draws within it).  FL_EINVAL outside
 * the counted batches. */
fl_status fl_stream_range(fl_stream *s, int64_t epoch, size_t first_batch, size_t end_batch);
/* The next batch (size 0 at the end of the rank's share); *out points
 * into the reader until the next call. */
fl_status fl_stream_next(fl_stream *s, fl_batch *out);
void fl_stream_tell(const fl_stream *s, fl_criteo_pos *pos);

#endif
